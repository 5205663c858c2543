/* The supervisor's GPU kernels (kernels.cu), built by nvcc into a fatbin (SASS for the common
 * targets plus PTX) and embedded here, so that the `cuda-agent` binary needs no CUDA library at
 * link time: device.c loads it with cuModuleLoadData. CA_DEVICE_FATBIN is the fatbin's path
 * (the Makefile passes it); an empty file means no nvcc was found at build time. */
	.section .rodata
	.balign 64
	.global ca_device_fatbin
	.type ca_device_fatbin, @object
ca_device_fatbin:
	.incbin CA_DEVICE_FATBIN
	.global ca_device_fatbin_end
ca_device_fatbin_end:
	.byte 0
	.section .note.GNU-stack,"",@progbits
