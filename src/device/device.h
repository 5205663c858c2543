/* device: the supervisor's own, trusted view of the evaluation's GPU (docs/protocol.md, "The
 * timed loop"; docs/security.md, "The trust boundary").
 *
 * The supervisor never runs candidate code, so what it does here is trusted: it maps the slots
 * the bridge exported (the same GPU memory the candidate's process reads and writes), prepares
 * every call (perturbs the inputs in place, poisons the outputs, flushes L2), takes checksums of
 * the inputs and parameters before and after a checked call, and probes the GPU after a call:
 * contexts of different processes never run at the same time, so a probe launched in this
 * context waits for whatever the candidate's process left running on the GPU.
 *
 * Two backends: DEVICE_CUDA (the driver API through cudrv; the kernels of kernels.cu from the
 * fatbin embedded in the binary; a stream in the device's primary context, spin-waiting so that
 * a probe's return is seen at once), and DEVICE_CPU (slots are memfds mapped into this process;
 * the same arithmetic in plain C, prep.h; flush and probe do nothing): the CPU backend lets the
 * whole protocol run in tests without a GPU.
 *
 * Ownership: a device owns its context reference, stream, module and scratch buffers
 * (device_close); a device_slot owns its mapping (device_slot_release). Functions that take a
 * device enqueue on its stream unless they say they synchronize. Errors of the CUDA backend are
 * the environment's (the candidate cannot reach this context): messages say what failed. */
#ifndef CA_DEVICE_DEVICE_H
#define CA_DEVICE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"
#include "util/diag.h"

enum device_kind { DEVICE_NONE = 0, DEVICE_CUDA, DEVICE_CPU };

#define DEVICE_STAMPS 15 /* probes of one window whose start the GPU stamps */

struct device_slot {
	enum device_kind kind;
	size_t bytes;  /* usable bytes (what the exporter asked for) */
	size_t mapped; /* bytes mapped (CUDA: rounded up to the allocation granularity) */
	uint64_t dptr; /* CUDA: the device address in this process (0 when unmapped) */
	unsigned long long handle; /* CUDA: the imported allocation handle */
	void *host;    /* CPU: the mapping */
};

/* Maps a slot exported as a POSIX file descriptor (CUDA VMM handle, or a memfd for kind cpu)
 * into this process for `ordinal` with read-write access. The descriptor stays the caller's. For
 * the CUDA kind the driver must be initialized (cudrv_load) and a context of the device current
 * on this thread. Shared by the supervisor and the GPU worker. */
int device_slot_map(enum device_kind kind, int ordinal, int fd, size_t bytes,
		    struct device_slot *s, struct ca_diag *d);
void device_slot_unmap(struct device_slot *s);

struct device_nvml {
	void *lib;
	void *device; /* nvmlDevice_t */
	bool ok;
	char driver[96]; /* "" when unknown */
	int (*get_clock)(void *device, int type, unsigned int *mhz);
	int (*shutdown)(void);
};

struct device {
	enum device_kind kind;
	int ordinal;
	char name[256];
	char pci_bus_id[64];
	int cc_major, cc_minor, sm_count;
	size_t l2_bytes, total_mem;
	int driver_version; /* cuDriverGetVersion, e.g. 13000 (0 on the CPU) */
	struct device_nvml nvml;
	/* CUDA backend */
	const struct cudrv *drv;
	void *ctx, *stream, *module;        /* CUcontext, CUstream, CUmodule */
	void *fn_empty, *fn_hold, *fn_stamp, *fn_checksum, *fn_flush, *fn_perturb[4]; /* CUfunction: f64 f32 f16 bf16 */
	uint64_t flush_buf, sum_buf;        /* CUdeviceptr */
	/* The GPU's global timer at the last hold's start ([0]) and at each probe's start since
	 * ([1 + k]), and this process's clock just before that hold was launched and just after
	 * each probe was (device_probe_waits). */
	uint64_t stamp_buf;
	double hold_at, probe_at[DEVICE_STAMPS], probe_t0;
	bool held;
	uint64_t cpu_sum;                   /* the CPU backend's checksum accumulator */
	size_t flush_bytes;
	unsigned flush_value;
};

/* Opens the backend: DEVICE_CUDA on device `ordinal` (CUDA_VISIBLE_DEVICES applies, as for
 * every process of the evaluation), or DEVICE_CPU. CA_ERR_UNSUPPORTED when there is no usable
 * driver, device or embedded kernels (the message says which). */
int device_open(struct device *dev, enum device_kind kind, int ordinal, struct ca_diag *d);
void device_close(struct device *dev);

/* device_slot_map for this device (its context made current first). */
int device_slot_import(struct device *dev, int fd, size_t bytes, struct device_slot *s,
		       struct ca_diag *d);

/* The L2 flush buffer: factor * the L2 size (at least 2 MiB when the L2 size is unknown),
 * written once. Kept while the size asked for stays the same (a device kept across
 * evaluations keeps it); another size replaces it. Returns its size in *bytes (0 on the CPU). */
int device_flush_alloc(struct device *dev, double factor, size_t *bytes, struct ca_diag *d);

/* A buffer of the device's own (the supervisor's context: no other process can reach it), for
 * copies of slots (the checked calls kept for after the timed loop, eval/data.c). */
struct device_buffer {
	size_t bytes;
	uint64_t dptr; /* CUDA */
	void *host;    /* CPU */
};
/* Allocates `bytes` (> 0) if that leaves at least `reserve` bytes of the device's memory free
 * (CUDA; the CPU backend allocates host memory). CA_ERR_NOMEM when it does not fit, without a
 * message: the caller does without. */
int device_buffer_alloc(struct device *dev, size_t bytes, size_t reserve, struct device_buffer *b,
			struct ca_diag *d);
void device_buffer_free(struct device *dev, struct device_buffer *b);
/* Enqueued: copies nbytes between [off, off + nbytes) of the slot and [boff, boff + nbytes) of
 * the buffer, into the buffer when to_buffer, else back into the slot. */
int device_buffer_copy(struct device *dev, struct device_slot *s, size_t off,
		       struct device_buffer *b, size_t boff, size_t nbytes, bool to_buffer,
		       struct ca_diag *d);

/* Enqueued: 0xFF bytes over [off, off + nbytes) of the slot (NaN in every float format). */
int device_poison(struct device *dev, struct device_slot *s, size_t off, size_t nbytes,
		  struct ca_diag *d);
/* Enqueued: moves numel elements of type t at off from perturbation state `from` to `to`
 * (prep.h: each element at its placed value or half of it, `fraction` of them halved in each
 * state, element i decided by ca_prep_key(i, layout); state 0 is the set as placed); non-float
 * types are left alone. */
int device_perturb(struct device *dev, struct device_slot *s, size_t off, size_t numel,
		   enum ca_dtype t, uint64_t layout, uint64_t from, uint64_t to, double fraction,
		   struct ca_diag *d);
/* Checksums (prep.h): device_checksum_reset() zeroes an accumulator, device_checksum_add()
 * enqueues the checksum of [off, off + nbytes) of a slot (off 8-byte aligned) into it, and
 * device_checksum_read() waits and reads the sum. */
int device_checksum_reset(struct device *dev, struct ca_diag *d);
int device_checksum_add(struct device *dev, struct device_slot *s, size_t off, size_t nbytes,
			uint64_t salt, struct ca_diag *d);
int device_checksum_read(struct device *dev, uint64_t *sum, struct ca_diag *d);
/* Enqueued: reads the whole flush buffer (no-op without one). */
int device_flush_l2(struct device *dev, struct ca_diag *d);
/* Enqueued, not waited for: a one-thread kernel that keeps the GPU busy for `seconds` by its
 * global timer (at most 0.1 s) and notes when it started (device_probe_waits). No-op on the
 * CPU. */
int device_hold(struct device *dev, double seconds, struct ca_diag *d);
/* A probe in two halves, so that it can be launched at once when an answer arrives and waited
 * for later: device_probe_start() launches probe number k of the window begun by the last
 * device_hold() (probes k < DEVICE_STAMPS note on the GPU's global timer when they start), and
 * device_probe_finish() waits for it; *seconds is the time from just before the launch to the
 * return (0 on the CPU). */
int device_probe_start(struct device *dev, int k, struct ca_diag *d);
int device_probe_finish(struct device *dev, double *seconds, struct ca_diag *d);
/* After the probes of a window have returned: for each of the first n (at most DEVICE_STAMPS),
 * how long it waited before it started, beyond the launch itself, as a lower bound measured on
 * the GPU's own timer: (its start - the hold's start) - (this process's clock just after its
 * launch - just before the hold's). A probe launched while another context still had work
 * waits for that work (contexts of different processes take turns), and the first one after a
 * call also for the switch back to this context; the clock stamps are taken so that a late
 * stamp (this process descheduled) can only make the figure smaller. NaN where unknown (the
 * CPU backend, no hold in this window). Ends the window's stamps. */
int device_probe_waits(struct device *dev, int n, double *wait_s, struct ca_diag *d);
/* Waits for everything enqueued on the device's stream. */
int device_sync(struct device *dev, struct ca_diag *d);
/* An empty kernel launched and waited for; *seconds is how long that took by this process's
 * monotonic clock (the GPU may first have to finish another process's work). 0 on the CPU. */
int device_probe(struct device *dev, double *seconds, struct ca_diag *d);
/* The current SM clock in MHz from NVML, or -1 when unknown. */
int device_sm_clock(const struct device *dev);

#endif
