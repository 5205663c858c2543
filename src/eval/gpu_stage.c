/* gpu_stage: one evaluation at a time on a shared GPU's timed stages (gpu_stage.h). */
#include "eval/gpu_stage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/timeline.h"

void gpu_stage_init(struct gpu_stage *g)
{
	g->fd = -1;
	g->waited_s = 0;
	g->held_s = 0;
	g->since = 0;
}

int gpu_stage_enter(struct gpu_stage *g)
{
	const char *path = getenv("CUDA_AGENT_GPU_LOCK");
	double t0;
	int fd;
	if (!path || !path[0] || g->fd >= 0)
		return 0;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ca_log_warn("cannot open the GPU lock %s (%s): evaluating without it", path,
			    strerror(errno));
		return -1;
	}
	t0 = ca_now();
	while (flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			ca_log_warn("cannot lock %s (%s): evaluating without it", path,
				    strerror(errno));
			close(fd);
			return -1;
		}
	}
	g->since = ca_now();
	g->waited_s += g->since - t0;
	g->fd = fd;
	return 0;
}

void gpu_stage_leave(struct gpu_stage *g)
{
	if (g->fd < 0)
		return;
	double now = ca_now();
	g->held_s += now - g->since;
	ca_timeline_span("gpu_held", g->since, now);
	(void)flock(g->fd, LOCK_UN);
	close(g->fd);
	g->fd = -1;
}
