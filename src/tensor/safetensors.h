/* safetensors: reader and writer for the safetensors format (8-byte little-endian header length,
 * a JSON header, then the raw data), used for every tensor that crosses a process boundary.
 *
 * The reader treats its input as untrusted: the header is capped (CA_SAFETENSORS_MAX_HEADER),
 * the tensor count is capped (CA_SAFETENSORS_MAX_TENSORS), every offset pair is checked against
 * the data size and against the dtype and shape (no overflow), and overlapping tensors are
 * rejected. Ownership: a struct safetensors owns its mapping or buffer and its entries; the
 * `data` pointers of its entries point into that storage and die with safetensors_close(). */
#ifndef CA_TENSOR_SAFETENSORS_H
#define CA_TENSOR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"
#include "util/diag.h"

#define CA_SAFETENSORS_MAX_HEADER (100u << 20)
#define CA_SAFETENSORS_MAX_TENSORS 65536
#define CA_SAFETENSORS_NAME_MAX 256

struct st_tensor {
	char name[CA_SAFETENSORS_NAME_MAX];
	enum ca_dtype dtype;
	int ndim;
	int64_t shape[CA_MAX_DIMS];
	size_t nbytes;
	const void *data; /* into the file's storage (read) or caller memory (write) */
};

struct safetensors {
	struct st_tensor *tensors; /* sorted by name */
	size_t count;
	void *storage;       /* mmap'd file or owned copy */
	size_t storage_len;
	int storage_is_mmap;
};

/* Maps a file read-only and parses it. */
int safetensors_open(struct safetensors *st, const char *path, struct ca_diag *d);
/* Parses a buffer in memory; the buffer must outlive st (no copy is made; storage stays NULL). */
int safetensors_parse(struct safetensors *st, const uint8_t *buf, size_t len, struct ca_diag *d);
void safetensors_close(struct safetensors *st);

/* NULL if absent. */
const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name);
/* Finds "<prefix>.<index>", e.g. ("args", 2) -> "args.2". */
const struct st_tensor *safetensors_find_indexed(const struct safetensors *st, const char *prefix,
						 int index);

/* Writes tensors (names, dtypes, shapes, nbytes, data taken from each entry) to path atomically.
 * metadata: optional NULL-terminated list of key, value, key, value, ... strings. */
int safetensors_write(const char *path, const struct st_tensor *tensors, size_t count,
		      const char *const *metadata, struct ca_diag *d);

#endif
