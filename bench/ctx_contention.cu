// What other processes' CUDA set-ups do to one process's driver calls (docs/service.md,
// "Scheduling"). Run by bench/ctx_contention.sh.
//
//   ctx_contention victim|work SECONDS OUT   one process in a loop: an empty launch and a
//       stream sync (victim), or cudaMalloc 16 MiB + copy in + empty launch + copy out + cudaFree
//       (work); writes "START_S MICROSECONDS" per iteration to OUT
//   ctx_contention churn SECONDS HOLD OUT    forks children one after the other, each making a
//       context (cudaFree(0), cudaMalloc 1 MiB, sync), keeping it HOLD seconds, and exiting;
//       writes "create BEGIN END" and "exit BEGIN END" windows to OUT
// Times are CLOCK_MONOTONIC seconds, the same clock in every process.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__global__ void empty_kernel(void) {}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int churn(double seconds, double hold, FILE *out)
{
	double t0 = now_s();
	while (now_s() - t0 < seconds) {
		int pp[2];
		double begin = now_s(), made = 0, leaving = 0;
		if (pipe(pp) != 0)
			return 1;
		pid_t p = fork();
		if (p < 0)
			return 1;
		if (p == 0) {
			float *x = NULL;
			close(pp[0]);
			if (cudaFree(0) != cudaSuccess || cudaMalloc(&x, 1 << 20) != cudaSuccess ||
			    cudaDeviceSynchronize() != cudaSuccess)
				_exit(2);
			made = now_s();
			struct timespec s = {(time_t)hold, (long)((hold - (double)(time_t)hold) * 1e9)};
			nanosleep(&s, NULL);
			leaving = now_s();
			if (write(pp[1], &made, sizeof made) != sizeof made ||
			    write(pp[1], &leaving, sizeof leaving) != sizeof leaving)
				_exit(2);
			exit(0); /* the CUDA runtime's teardown, as a worker's */
		}
		close(pp[1]);
		int ok = read(pp[0], &made, sizeof made) == sizeof made &&
			 read(pp[0], &leaving, sizeof leaving) == sizeof leaving;
		int status = 0;
		waitpid(p, &status, 0);
		close(pp[0]);
		if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "ctx_contention: a child could not make its context\n");
			return 1;
		}
		fprintf(out, "create %.6f %.6f\nexit %.6f %.6f\n", begin, made, leaving, now_s());
	}
	return 0;
}

static int victim(double seconds, bool work, FILE *out)
{
	const size_t bytes = 16u << 20;
	cudaStream_t s;
	void *host = NULL, *dev = NULL;
	if (cudaFree(0) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
	    (work && cudaMallocHost(&host, bytes) != cudaSuccess))
		return 1;
	double t0 = now_s();
	while (now_s() - t0 < seconds) {
		double a = now_s();
		if (work && (cudaMalloc(&dev, bytes) != cudaSuccess ||
			     cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess))
			return 1;
		empty_kernel<<<1, 1, 0, s>>>();
		if (work && cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess)
			return 1;
		if (cudaStreamSynchronize(s) != cudaSuccess || (work && cudaFree(dev) != cudaSuccess))
			return 1;
		fprintf(out, "%.6f %.1f\n", a, (now_s() - a) * 1e6);
	}
	return 0;
}

int main(int argc, char **argv)
{
	bool is_churn = argc == 5 && strcmp(argv[1], "churn") == 0;
	bool is_victim = argc == 4 && (strcmp(argv[1], "victim") == 0 || strcmp(argv[1], "work") == 0);
	if (!is_churn && !is_victim) {
		fprintf(stderr, "usage: ctx_contention victim|work SECONDS OUT\n"
				"       ctx_contention churn SECONDS HOLD OUT\n");
		return 2;
	}
	FILE *out = fopen(argv[argc - 1], "w");
	if (!out) {
		perror(argv[argc - 1]);
		return 1;
	}
	int rc = is_churn ? churn(atof(argv[2]), atof(argv[3]), out)
			  : victim(atof(argv[2]), strcmp(argv[1], "work") == 0, out);
	if (fclose(out) != 0 || rc) {
		fprintf(stderr, "ctx_contention %s failed\n", argv[1]);
		return 1;
	}
	return 0;
}
