/* cpu_claim: the CPU an evaluation's candidate process and its reference process share
 * (docs/security.md, "The outside bound's resolution").
 *
 * The outside bound pairs every timed call of the candidate's process with an empty call of a
 * reference process and takes out their offset, calibrated before the candidate was loaded.
 * Started on CPUs of their own, the two processes' host costs differed by up to 22 us at
 * calibration and drifted apart by up to 20 us later (the scheduler moves them, cores differ in
 * frequency and idle depth), which pushed the bound below honest claims, and so let a lie pass.
 * On one CPU the calibrated offsets stayed within 4 us and the drift was never negative (H200,
 * 2026-12-02). The candidate cannot move itself away (its seccomp filter refuses
 * sched_setaffinity).
 *
 * A claim is an exclusive flock on DIR/cpu-N.lock, so that evaluations running at the same time
 * on one host (bench --jobs, several services) take different CPUs while there are enough; when
 * every CPU is claimed the last one is shared (noisier, still correct). The supervisor's own
 * thread leaves the claimed CPU to the two processes while they run (cpu_claim_pin_spawn,
 * cpu_claim_leave).
 *
 * Ownership: the claim holds one descriptor (O_CLOEXEC: never inherited) until
 * cpu_claim_release. */
#ifndef CA_EVAL_CPU_CLAIM_H
#define CA_EVAL_CPU_CLAIM_H

#include <sched.h>
#include <stdbool.h>

#define CPU_CLAIM_MIN_CPUS 3 /* one for the two processes, the rest for the supervisor */

enum cpu_pin { CPU_PIN_AUTO, CPU_PIN_FORCE, CPU_PIN_OFF };

struct cpu_claim {
	int cpu;     /* -1: none */
	int lock_fd; /* -1: shared or none */
	cpu_set_t saved; /* this thread's CPUs before the claim */
	bool saved_valid;
};

/* Timing CPUs (docs/service.md, "Timing CPUs"). A service runs many evaluations at once: their
 * builds (nvcc), process starts and bridges run while one of them is timed, and on the timed
 * processes' CPU they preempt them (host windows tens of microseconds noisier, so the outside
 * bound needs hundreds more calls to settle: H200, 2026-12-02). A pool that evaluates on GPUs
 * reserves timing CPUs: claims are taken from them first, and the pool's own threads and
 * children (every build, bridge and process start) run on the other CPUs. The reserved list
 * reaches the pool's workers through this variable; an operator may set it instead. */
#define CPU_CLAIM_TIMING_ENV "CUDA_AGENT_TIMING_CPUS"
#define CPU_LIST_MAX 1024 /* characters of a formatted CPU list */

/* A Linux CPU list ("0-3,8,10-11"): 0, or -1 when s is empty, malformed or names a CPU past
 * CPU_SETSIZE. */
int cpu_list_parse(const char *s, cpu_set_t *set);
/* *out = the CPUs of a that are not in b (out may be a or b). */
void cpu_set_minus(cpu_set_t *out, const cpu_set_t *a, const cpu_set_t *b);
/* The list of set's CPUs into buf (cap bytes): 0, or -1 when it does not fit. */
int cpu_list_format(const cpu_set_t *set, char *buf, size_t cap);
/* Timing CPUs for n evaluations, from the CPUs in allowed: the n highest (at most a quarter of
 * allowed), each with its hyperthread siblings (sysfs_root/cpuN/topology/thread_siblings_list;
 * sysfs_root NULL: /sys/devices/system/cpu) kept out of *rest as well while that leaves half
 * of allowed. 0 with *timing and *rest (allowed less the timing CPUs and their siblings), or -1
 * when allowed is too small for even one (fewer than 4 CPUs). */
int cpu_claim_reserve(const cpu_set_t *allowed, int n, const char *sysfs_root, cpu_set_t *timing,
		      cpu_set_t *rest);
/* The timing CPUs of $CUDA_AGENT_TIMING_CPUS: 0, or -1 when unset or not a CPU list. */
int cpu_claim_timing_cpus(cpu_set_t *timing);

/* CUDA_AGENT_PIN_PROCESSES: unset, auto: pin when there is a reference process (a GPU) and at
 * least CPU_CLAIM_MIN_CPUS CPUs; 1: pin whenever there are two CPUs (tests on CPU hosts); 0:
 * never (a diagnostic: the bias measured both ways is in docs/security.md). */
enum cpu_pin cpu_claim_wanted(void);
/* Claims a CPU among those this thread may use (at least min_cpus of them), highest first, with
 * lock files in lock_dir (created 0700 when missing): a free timing CPU ($CUDA_AGENT_TIMING_CPUS)
 * first, then the thread's own. 0 with c->cpu >= 0; -1 with c->cpu == -1 when nothing was
 * claimed (too few CPUs, no affinity). Nothing is pinned yet. */
int cpu_claim_take(struct cpu_claim *c, const char *lock_dir, int min_cpus);
/* The same from a given set of CPUs (tests). */
int cpu_claim_take_from(struct cpu_claim *c, const cpu_set_t *cpus, const char *lock_dir,
			int min_cpus);
/* Pins this thread to the claimed CPU, so that processes spawned now start there. */
int cpu_claim_pin_spawn(const struct cpu_claim *c);
/* This thread goes back to its CPUs less the claimed one (all of them when that would leave
 * none). */
void cpu_claim_leave(const struct cpu_claim *c);
/* This thread goes back to every CPU it had; the lock is released. Safe to call twice. */
void cpu_claim_release(struct cpu_claim *c);
/* An empty claim (cpu -1), safe to release. */
void cpu_claim_init(struct cpu_claim *c);

#endif
