	.file	"k.cu"
	.text
#APP
	.section .nv_fatbin, "a"
.align 8
fatbinData:
.quad 0x00100001ba55ed50,0x0000000000000ff0,0x0000004001010002,0x0000000000000e70
.quad 0x0000000000000000,0x0000005a00010008,0x0000000000000000,0x0000000000000011
.quad 0x0000000000000000,0x0000000000000000,0x41010102464c457f,0x0000000000000008
.quad 0xa23684591ee6fd3a,0x85580014fb4e1b28,0x35f8162980481ae8,0x8d43e0c23dee0261
.quad 0xe04aa6db8a8327b1,0x9004243484f5894e,0xdc8af35124d35184,0x0084e6428d526fcc
.text

#NO_APP
	.section	.nvFatBinSegment,"aw"
	.align 8
	.type	_ZL15__fatDeviceText, @object
	.size	_ZL15__fatDeviceText, 24
_ZL15__fatDeviceText:
	.long	1180844977
	.long	1
	.quad	fatbinData
	.quad	0
	.local	_ZZ20__device_stub__Z1kPfPfE3__f
	.section	.note.GNU-stack,"",@progbits
