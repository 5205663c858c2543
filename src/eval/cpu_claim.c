#include "eval/cpu_claim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
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

/* Locks the highest CPU of set that nobody has claimed: 0 with c->cpu and c->lock_fd, or -1. */
static int claim_free(struct cpu_claim *c, const cpu_set_t *set, const char *lock_dir)
{
	for (int cpu = CPU_SETSIZE - 1; lock_dir && cpu >= 0; cpu--) {
		if (CPU_ISSET((size_t)cpu, set) && (c->lock_fd = lock_cpu(lock_dir, cpu)) >= 0) {
			c->cpu = cpu;
			return 0;
		}
	}
	return -1;
}

int cpu_claim_take_from(struct cpu_claim *c, const cpu_set_t *cpus, const char *lock_dir,
			int min_cpus)
{
	cpu_claim_init(c);
	if (CPU_COUNT(cpus) < (min_cpus > 1 ? min_cpus : 2))
		return -1;
	c->saved = *cpus;
	c->saved_valid = true;
	if (claim_free(c, cpus, lock_dir) == 0)
		return 0;
	/* every CPU is claimed (or no lock directory): share the last one */
	for (int cpu = CPU_SETSIZE - 1; c->cpu < 0 && cpu >= 0; cpu--)
		if (CPU_ISSET((size_t)cpu, cpus))
			c->cpu = cpu;
	return 0;
}

int cpu_claim_take(struct cpu_claim *c, const char *lock_dir, int min_cpus)
{
	cpu_set_t cpus, timing;
	cpu_claim_init(c);
	if (sched_getaffinity(0, sizeof cpus, &cpus) != 0)
		return -1;
	if (lock_dir && mkdir(lock_dir, 0700) != 0 && errno != EEXIST)
		lock_dir = NULL;
	if (lock_dir && cpu_claim_timing_cpus(&timing) == 0) {
		cpu_set_t all;
		CPU_OR(&all, &cpus, &timing);
		if (CPU_COUNT(&all) >= min_cpus && claim_free(c, &timing, lock_dir) == 0) {
			c->saved = cpus;
			c->saved_valid = true;
			return 0;
		}
	}
	return cpu_claim_take_from(c, &cpus, lock_dir, min_cpus);
}

int cpu_list_parse(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	if (!s || !*s)
		return -1;
	while (*s) {
		char *end;
		unsigned long lo, hi;
		if (*s < '0' || *s > '9')
			return -1;
		lo = hi = strtoul(s, &end, 10);
		if (*end == '-') {
			if (end[1] < '0' || end[1] > '9')
				return -1;
			hi = strtoul(end + 1, &end, 10);
		}
		if (lo > hi || hi >= CPU_SETSIZE)
			return -1;
		for (unsigned long k = lo; k <= hi; k++)
			CPU_SET(k, set);
		if (*end == '\n' && end[1] == '\0')
			break; /* sysfs files end in a newline */
		if (*end != ',' && *end != '\0')
			return -1;
		s = *end == ',' ? end + 1 : end;
		if (*end == ',' && !*s)
			return -1;
	}
	return CPU_COUNT(set) > 0 ? 0 : -1;
}

void cpu_set_minus(cpu_set_t *out, const cpu_set_t *a, const cpu_set_t *b)
{
	cpu_set_t both;
	CPU_AND(&both, a, b);
	CPU_XOR(out, a, &both);
}

int cpu_list_format(const cpu_set_t *set, char *buf, size_t cap)
{
	size_t len = 0;
	if (cap == 0)
		return -1;
	buf[0] = '\0';
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		int last = cpu, n;
		if (!CPU_ISSET((size_t)cpu, set))
			continue;
		while (last + 1 < CPU_SETSIZE && CPU_ISSET((size_t)(last + 1), set))
			last++;
		n = last > cpu ? snprintf(buf + len, cap - len, "%s%d-%d", len ? "," : "", cpu, last)
			       : snprintf(buf + len, cap - len, "%s%d", len ? "," : "", cpu);
		if (n < 0 || (size_t)n >= cap - len)
			return -1;
		len += (size_t)n;
		cpu = last;
	}
	return 0;
}

/* The hyperthread siblings of cpu (itself included), or just cpu when sysfs does not say. */
static void cpu_siblings(const char *sysfs_root, int cpu, cpu_set_t *sib)
{
	char path[4096], line[CPU_LIST_MAX];
	FILE *f;
	int n = snprintf(path, sizeof path, "%s/cpu%d/topology/thread_siblings_list",
			 sysfs_root ? sysfs_root : "/sys/devices/system/cpu", cpu);
	bool ok = false;
	if (n > 0 && (size_t)n < sizeof path && (f = fopen(path, "re"))) {
		ok = fgets(line, sizeof line, f) && cpu_list_parse(line, sib) == 0;
		fclose(f);
	}
	if (!ok) {
		CPU_ZERO(sib);
		CPU_SET((size_t)cpu, sib);
	}
}

int cpu_claim_reserve(const cpu_set_t *allowed, int n, const char *sysfs_root, cpu_set_t *timing,
		      cpu_set_t *rest)
{
	int total = CPU_COUNT(allowed), want = n < total / 4 ? n : total / 4, got = 0;
	CPU_ZERO(timing);
	*rest = *allowed;
	if (want < 1)
		return -1;
	for (int cpu = CPU_SETSIZE - 1; cpu >= 0 && got < want; cpu--) {
		cpu_set_t sib, left;
		if (!CPU_ISSET((size_t)cpu, rest))
			continue; /* not ours, or a sibling of a timing CPU */
		CPU_SET((size_t)cpu, timing);
		CPU_CLR((size_t)cpu, rest);
		got++;
		cpu_siblings(sysfs_root, cpu, &sib);
		cpu_set_minus(&left, rest, &sib);
		if (2 * CPU_COUNT(&left) >= total)
			*rest = left; /* the siblings idle too, while half the CPUs stay for the rest */
	}
	return 0;
}

int cpu_claim_timing_cpus(cpu_set_t *timing)
{
	return cpu_list_parse(getenv(CPU_CLAIM_TIMING_ENV), timing);
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
