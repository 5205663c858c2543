
	.text
	.globl	f
	.type	f, @function
f:
	ret
	.size	f, .-f
