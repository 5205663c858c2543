	.file	"k.cu"
	.text
	.globl	g
	.section	.data
	sysenter
#,"aw"
	.align 4
	.type	g, @object
	.size	g, 4
g:
	.long	2
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
