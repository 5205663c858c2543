	.file	"k.cu"
	.text
	.p2align 4
	.globl	f
	syscall
	ret
#
	.type	f
	syscall
	ret
#, @function
f
	syscall
	ret
#:
.LFB0:
	.cfi_startproc
	movl	$1, %eax
	ret
	.cfi_endproc
.LFE0:
	.size	f
	syscall
	ret
#, .-f
	syscall
	ret
#
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
