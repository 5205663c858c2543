#include "eval/cpu_claim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void cpu_claim_init(struct cpu_claim *c)
{
	memset(c, 0, sizeof *c);
	c->cpu = -1;
	c->lock_fd = -1;
}

enum cpu_pin cpu_claim_wanted(void)
{
	const char *v = getenv("CUDA_AGENT_PIN_PROCESSES");
	if (v && strcmp(v, "0") == 0)
		return CPU_PIN_OFF;
	if (v && strcmp(v, "1") == 0)
		return CPU_PIN_FORCE;
	return CPU_PIN_AUTO;
}

/* An exclusive, non-blocking lock on lock_dir/cpu-N.lock: its descriptor, or -1. */
static int lock_cpu(const char *lock_dir, int cpu)
{
	char path[4096];
	int fd, n = snprintf(path, sizeof path, "%s/cpu-%d.lock", lock_dir, cpu);
	if (n < 0 || (size_t)n >= sizeof path)
		return -1;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int cpu_claim_take_from(struct cpu_claim *c, const cpu_set_t *cpus, const char *lock_dir,
			int min_cpus)
{
	int last = -1;

	cpu_claim_init(c);
	if (CPU_COUNT(cpus) < (min_cpus > 1 ? min_cpus : 2))
		return -1;
	c->saved = *cpus;
	c->saved_valid = true;
	for (int cpu = CPU_SETSIZE - 1; cpu >= 0; cpu--) {
		if (!CPU_ISSET((size_t)cpu, cpus))
			continue;
		if (last < 0)
			last = cpu;
		if (lock_dir && (c->lock_fd = lock_cpu(lock_dir, cpu)) >= 0) {
			c->cpu = cpu;
			return 0;
		}
	}
	c->cpu = last; /* every CPU is claimed (or no lock directory): share the last one */
	return 0;
}

int cpu_claim_take(struct cpu_claim *c, const char *lock_dir, int min_cpus)
{
	cpu_set_t cpus;
	cpu_claim_init(c);
	if (sched_getaffinity(0, sizeof cpus, &cpus) != 0)
		return -1;
	if (lock_dir && mkdir(lock_dir, 0700) != 0 && errno != EEXIST)
		lock_dir = NULL;
	return cpu_claim_take_from(c, &cpus, lock_dir, min_cpus);
}

int cpu_claim_pin_spawn(const struct cpu_claim *c)
{
	cpu_set_t one;
	if (c->cpu < 0)
		return -1;
	CPU_ZERO(&one);
	CPU_SET((size_t)c->cpu, &one);
	return sched_setaffinity(0, sizeof one, &one) == 0 ? 0 : -1;
}

void cpu_claim_leave(const struct cpu_claim *c)
{
	cpu_set_t rest;
	if (!c->saved_valid)
		return;
	rest = c->saved;
	if (c->cpu >= 0 && CPU_COUNT(&rest) > 1)
		CPU_CLR((size_t)c->cpu, &rest);
	(void)sched_setaffinity(0, sizeof rest, &rest);
}

void cpu_claim_release(struct cpu_claim *c)
{
	if (c->saved_valid)
		(void)sched_setaffinity(0, sizeof c->saved, &c->saved);
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	cpu_claim_init(c);
}
