/* wxprobe_selftest: a program that does one of each thing wxprobe (tests/sandbox/wxprobe.c)
 * reports, for tests/sandbox/wxprobe_check.sh: a W+X mapping, a memfd, mprotect(PROT_EXEC),
 * a write-open outside the sandbox's writable places (of a path that does not exist, so
 * nothing is written), and a raw memfd_create syscall from inline assembly (x86-64; elsewhere
 * the raw part is skipped). It prints "selftest done". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	void *q = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = memfd_create("selftest", MFD_CLOEXEC);
	int wfd = open("/nonexistent-wxprobe/x", O_WRONLY | O_CLOEXEC);
	if (q != MAP_FAILED)
		(void)mprotect(q, 4096, PROT_READ | PROT_EXEC);
#if defined(__x86_64__)
	long r;
	const char *name = "selftest-raw";
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"((long)SYS_memfd_create), "D"(name), "S"(0L)
			 : "rcx", "r11", "memory");
	if (r >= 0)
		close((int)r);
#endif
	if (fd >= 0)
		close(fd);
	if (wfd >= 0)
		close(wfd);
	printf("selftest done%s\n", p == MAP_FAILED ? " (no W+X mapping here)" : "");
	return 0;
}
