	.file	"clean.c"
	.text
	.p2align 4
	.globl	scale
	.type	scale, @function
scale:
.LFB0:
	.cfi_startproc
	testl	%edx, %edx
	jle	.L2
	movss	(%rsi), %xmm0
	movl	%edx, %r9d
	movl	$1, %eax
	leaq	table(%rip), %r8
	addss	%xmm0, %xmm0
	addss	.LC0(%rip), %xmm0
	movss	%xmm0, (%rdi)
	cmpl	$1, %edx
	je	.L2
	.p2align 4,,10
	.p2align 3
.L4:
	movss	(%rsi,%rax,4), %xmm0
	movq	%rax, %rcx
	andl	$3, %ecx
	addss	%xmm0, %xmm0
	addss	(%r8,%rcx,4), %xmm0
	movss	%xmm0, (%rdi,%rax,4)
	addq	$1, %rax
	cmpq	%r9, %rax
	jne	.L4
.L2:
	xorl	%eax, %eax
	testl	%edx, %edx
	setne	%al
	addl	%eax, %eax
	ret
	.cfi_endproc
.LFE0:
	.size	scale, .-scale
	.section	.rodata
	.align 16
	.type	table, @object
	.size	table, 16
table:
	.long	1065353216
	.long	1073741824
	.long	1077936128
	.long	1082130432
	.section	.rodata.cst4,"aM",@progbits,4
	.align 4
.LC0:
	.long	1065353216
	.ident	"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"
	.section	.note.GNU-stack,"",@progbits
