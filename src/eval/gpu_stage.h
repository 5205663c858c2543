/* gpu_stage: evaluations that share a GPU take turns on it for everything that runs there or is
 * timed there, while their builds and process starts overlap (docs/service.md, "Scheduling").
 *
 * Two evaluations on one GPU at once time each other: a kernel of one runs inside the other's
 * timed window. Running them one by one leaves the GPU idle while each compiles (about 1 s) and
 * starts its processes (about 0.5 s). So a service may give each GPU several workers and one lock
 * file ($CUDA_AGENT_GPU_LOCK, set per worker by `serve --gpu-slots`): an evaluation holds the
 * lock (an exclusive flock) while it describes a task (the bridge runs the reference), and from
 * its calibration to the end of its candidate's process (verification, timing, baselines, the
 * re-timing at a threshold); it does not hold it while nvcc compiles or while its processes
 * start (CUDA contexts are made, no kernel runs). Those starts still go through the driver's
 * locks and roughly double the holder's turn on an H100; keeping them out of the turns was
 * measured slower (docs/service.md, "Scheduling"). Without the variable nothing is locked.
 *
 * Ownership: a held stage owns one descriptor (O_CLOEXEC) until gpu_stage_leave. */
#ifndef CA_EVAL_GPU_STAGE_H
#define CA_EVAL_GPU_STAGE_H

#include <stdbool.h>

struct gpu_stage {
	int fd; /* -1 when not held */
	double waited_s; /* seconds spent waiting for the lock, all entries together */
	double held_s;   /* seconds it was held, all entries together */
	double since;    /* when it was taken (while held) */
};

void gpu_stage_init(struct gpu_stage *g);
/* Takes the lock named by $CUDA_AGENT_GPU_LOCK (blocking), or nothing when it is unset or
 * already held. 0, or -1 when the lock file cannot be used (the evaluation goes on unlocked,
 * with a warning). */
int gpu_stage_enter(struct gpu_stage *g);
/* Lets the lock go (safe when not held). */
void gpu_stage_leave(struct gpu_stage *g);

#endif
