/* safetensors reader and writer; see safetensors.h for the contract.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON (an object mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__"
 * object of strings), then the data; offsets are relative to the start of the data. */
#include "tensor/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "util/fs.h"

#define METADATA_KEY "__metadata__"
/* How much of an untrusted name goes into a diagnostic. */
#define SHOWN_NAME_MAX 80

/* A printable, one-line, bounded rendering of an untrusted name for diagnostics. */
static const char *shown(const char *name, char out[SHOWN_NAME_MAX + 4])
{
	size_t i = 0;
	for (; name[i] && i < SHOWN_NAME_MAX; i++) {
		unsigned char c = (unsigned char)name[i];
		out[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	if (name[i]) {
		memcpy(out + i, "...", 3);
		i += 3;
	}
	out[i] = '\0';
	return out;
}

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void store_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

struct span {
	size_t begin, end;
	size_t idx; /* into the tensor array */
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

static int check_metadata(const json_t *meta, struct ca_diag *d)
{
	const char *key;
	const json_t *val;
	char sk[SHOWN_NAME_MAX + 4];

	if (!json_is_object(meta))
		return ca_fail(d, CA_ERR_PARSE, "safetensors header: %s must be an object",
			       METADATA_KEY);
	json_object_foreach((json_t *)meta, key, val) {
		if (!json_is_string(val))
			return ca_fail(d, CA_ERR_PARSE,
				       "safetensors header: %s entry '%s' is not a string",
				       METADATA_KEY, shown(key, sk));
	}
	return 0;
}

/* Reads a non-negative JSON integer into *out. */
static bool get_size(const json_t *v, size_t *out)
{
	json_int_t i;
	if (!json_is_integer(v))
		return false;
	i = json_integer_value(v);
	if (i < 0 || (unsigned long long)i > SIZE_MAX)
		return false;
	*out = (size_t)i;
	return true;
}

/* Fills t from one header entry; data_size is the number of bytes after the header. */
static int parse_entry(struct st_tensor *t, struct span *sp, const char *key, const json_t *e,
		       size_t data_size, struct ca_diag *d)
{
	char sk[SHOWN_NAME_MAX + 4];
	const json_t *dtype, *shape, *offs, *dim;
	size_t i, begin, end, elem, numel = 1, nbytes;

	if (strlen(key) >= CA_SAFETENSORS_NAME_MAX)
		return ca_fail(d, CA_ERR_LIMIT, "tensor '%s': name longer than %d bytes",
			       shown(key, sk), CA_SAFETENSORS_NAME_MAX - 1);
	if (key[0] == '\0')
		return ca_fail(d, CA_ERR_PARSE, "safetensors header: a tensor has an empty name");
	if (!json_is_object(e))
		return ca_fail(d, CA_ERR_PARSE, "tensor '%s': entry is not an object",
			       shown(key, sk));
	dtype = json_object_get(e, "dtype");
	shape = json_object_get(e, "shape");
	offs = json_object_get(e, "data_offsets");
	if (!json_is_string(dtype))
		return ca_fail(d, CA_ERR_PARSE, "tensor '%s': missing or non-string dtype",
			       shown(key, sk));
	if (!json_is_array(shape))
		return ca_fail(d, CA_ERR_PARSE, "tensor '%s': missing or non-array shape",
			       shown(key, sk));
	if (!json_is_array(offs) || json_array_size(offs) != 2)
		return ca_fail(d, CA_ERR_PARSE,
			       "tensor '%s': data_offsets must be an array [begin, end]",
			       shown(key, sk));

	memcpy(t->name, key, strlen(key) + 1);
	t->dtype = ca_dtype_from_safetensors(json_string_value(dtype));
	if (t->dtype == CA_DTYPE_INVALID) {
		char sd[SHOWN_NAME_MAX + 4];
		return ca_fail(d, CA_ERR_UNSUPPORTED, "tensor '%s': unknown dtype '%s'",
			       shown(key, sk), shown(json_string_value(dtype), sd));
	}
	elem = ca_dtype_size(t->dtype);
	if (json_array_size(shape) > CA_MAX_DIMS)
		return ca_fail(d, CA_ERR_LIMIT, "tensor '%s': %zu dimensions, more than the %d allowed",
			       shown(key, sk), json_array_size(shape), CA_MAX_DIMS);
	t->ndim = (int)json_array_size(shape);
	json_array_foreach(shape, i, dim) {
		size_t n;
		if (!get_size(dim, &n) || (unsigned long long)n > INT64_MAX)
			return ca_fail(d, CA_ERR_PARSE,
				       "tensor '%s': shape[%zu] is not a non-negative integer",
				       shown(key, sk), i);
		t->shape[i] = (int64_t)n;
		if (__builtin_mul_overflow(numel, n, &numel))
			return ca_fail(d, CA_ERR_PARSE, "tensor '%s': shape is too large",
				       shown(key, sk));
	}
	if (__builtin_mul_overflow(numel, elem, &nbytes))
		return ca_fail(d, CA_ERR_PARSE, "tensor '%s': shape is too large", shown(key, sk));
	if (!get_size(json_array_get(offs, 0), &begin) || !get_size(json_array_get(offs, 1), &end))
		return ca_fail(d, CA_ERR_PARSE,
			       "tensor '%s': data_offsets must be non-negative integers",
			       shown(key, sk));
	if (begin > end)
		return ca_fail(d, CA_ERR_PARSE, "tensor '%s': data_offsets [%zu, %zu] run backwards",
			       shown(key, sk), begin, end);
	if (end > data_size)
		return ca_fail(d, CA_ERR_PARSE,
			       "tensor '%s': data_offsets [%zu, %zu] exceed the %zu data bytes",
			       shown(key, sk), begin, end, data_size);
	if (end - begin != nbytes)
		return ca_fail(d, CA_ERR_PARSE,
			       "tensor '%s': data_offsets [%zu, %zu] hold %zu bytes but %s shape "
			       "needs %zu",
			       shown(key, sk), begin, end, end - begin, ca_dtype_safetensors_name(t->dtype),
			       nbytes);
	t->nbytes = nbytes;
	sp->begin = begin;
	sp->end = end;
	return 0;
}

/* Parses buf into st (tensors and their data pointers); st->storage is left to the caller. */
static int parse_buffer(struct safetensors *st, const uint8_t *buf, size_t len, struct ca_diag *d)
{
	int rc = 0;
	uint64_t hlen64;
	size_t hlen, data_size, n = 0, count;
	const uint8_t *data;
	json_t *root = NULL;
	json_error_t jerr;
	const char *key;
	json_t *val;
	struct st_tensor *tensors = NULL;
	struct span *spans = NULL;

	if (len < 8)
		return ca_fail(d, CA_ERR_PARSE,
			       "safetensors: %zu bytes, too short for the 8-byte header length", len);
	hlen64 = load_le64(buf);
	if (hlen64 > CA_SAFETENSORS_MAX_HEADER)
		return ca_fail(d, CA_ERR_LIMIT,
			       "safetensors: header length %llu is over the limit of %u bytes",
			       (unsigned long long)hlen64, CA_SAFETENSORS_MAX_HEADER);
	if (hlen64 > len - 8)
		return ca_fail(d, CA_ERR_PARSE,
			       "safetensors: header length %llu exceeds the %zu bytes after it "
			       "(truncated file?)",
			       (unsigned long long)hlen64, len - 8);
	hlen = (size_t)hlen64;
	data = buf + 8 + hlen;
	data_size = len - 8 - hlen;

	root = json_loadb((const char *)buf + 8, hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		/* jansson quotes the offending input: keep the message on one printable line */
		for (char *c = jerr.text; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		rc = ca_fail(d, CA_ERR_PARSE, "safetensors header: bad JSON at byte %d: %s",
			     jerr.position, jerr.text);
		goto out;
	}
	if (!json_is_object(root)) {
		rc = ca_fail(d, CA_ERR_PARSE, "safetensors header: not a JSON object");
		goto out;
	}
	count = json_object_size(root);
	if (json_object_get(root, METADATA_KEY)) {
		rc = check_metadata(json_object_get(root, METADATA_KEY), d);
		if (rc)
			goto out;
		count--;
	}
	if (count > CA_SAFETENSORS_MAX_TENSORS) {
		rc = ca_fail(d, CA_ERR_LIMIT, "safetensors header: %zu tensors, over the limit of %d",
			     count, CA_SAFETENSORS_MAX_TENSORS);
		goto out;
	}
	tensors = calloc(count ? count : 1, sizeof *tensors);
	spans = calloc(count ? count : 1, sizeof *spans);
	if (!tensors || !spans) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory reading a safetensors header");
		goto out;
	}
	json_object_foreach(root, key, val) {
		if (strcmp(key, METADATA_KEY) == 0)
			continue;
		if (n == count) { /* cannot happen: the object's size bounds the keys */
			rc = ca_fail(d, CA_ERR_PARSE, "safetensors header: inconsistent key count");
			goto out;
		}
		rc = parse_entry(&tensors[n], &spans[n], key, val, data_size, d);
		if (rc)
			goto out;
		spans[n].idx = n;
		tensors[n].data = data + spans[n].begin;
		n++;
	}

	/* Overlap: sort by offset; a non-empty tensor must start at or after every earlier end.
	 * Empty tensors occupy no bytes and cannot overlap anything. */
	qsort(spans, n, sizeof *spans, span_cmp);
	{
		size_t max_begin = 0, max_end = 0, max_idx = 0;
		bool any = false;
		for (size_t i = 0; i < n; i++) {
			char s1[SHOWN_NAME_MAX + 4], s2[SHOWN_NAME_MAX + 4];
			if (spans[i].begin == spans[i].end)
				continue;
			if (any && spans[i].begin < max_end) {
				rc = ca_fail(d, CA_ERR_PARSE,
					     "safetensors: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] "
					     "overlap",
					     shown(tensors[max_idx].name, s1), max_begin, max_end,
					     shown(tensors[spans[i].idx].name, s2), spans[i].begin,
					     spans[i].end);
				goto out;
			}
			max_begin = spans[i].begin;
			max_end = spans[i].end;
			max_idx = spans[i].idx;
			any = true;
		}
	}
	qsort(tensors, n, sizeof *tensors, name_cmp);
	st->tensors = tensors;
	st->count = n;
	tensors = NULL;
out:
	free(tensors);
	free(spans);
	json_decref(root);
	return rc;
}

int safetensors_parse(struct safetensors *st, const uint8_t *buf, size_t len, struct ca_diag *d)
{
	memset(st, 0, sizeof *st);
	if (!buf && len)
		return ca_fail(d, CA_ERR_INVALID, "safetensors: NULL buffer");
	return parse_buffer(st, buf, len, d);
}

int safetensors_open(struct safetensors *st, const char *path, struct ca_diag *d)
{
	int rc;
	int fd;
	void *map = MAP_FAILED;
	size_t len = 0;

	memset(st, 0, sizeof *st);
	rc = ca_open_regular(path, &fd, &len, d);
	if (rc)
		return rc;
	if (len < 8) {
		rc = ca_fail(d, CA_ERR_PARSE,
			     "%s: %zu bytes, too short for a safetensors file (truncated?)", path, len);
		goto out;
	}
	map = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	if (map == MAP_FAILED) {
		rc = ca_fail(d, CA_ERR_IO, "cannot map %s: %s", path, strerror(errno));
		goto out;
	}
	rc = parse_buffer(st, map, len, d);
	if (rc) {
		ca_fail_prefix(d, rc, "%s", path);
		goto out;
	}
	st->storage = map;
	st->storage_len = len;
	st->storage_is_mmap = 1;
	map = MAP_FAILED;
out:
	if (map != MAP_FAILED)
		munmap(map, len);
	close(fd);
	return rc;
}

void safetensors_close(struct safetensors *st)
{
	if (!st)
		return;
	free(st->tensors);
	if (st->storage) {
		if (st->storage_is_mmap)
			munmap(st->storage, st->storage_len);
		else
			free(st->storage);
	}
	memset(st, 0, sizeof *st);
}

const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name)
{
	size_t lo = 0, hi = st->count;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, st->tensors[mid].name);
		if (c == 0)
			return &st->tensors[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const struct st_tensor *safetensors_find_indexed(const struct safetensors *st, const char *prefix,
						 int index)
{
	char name[CA_SAFETENSORS_NAME_MAX];
	int n = snprintf(name, sizeof name, "%s.%d", prefix, index);
	if (index < 0 || n < 0 || (size_t)n >= sizeof name)
		return NULL;
	return safetensors_find(st, name);
}

/* ---- writer ---------------------------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len, const char *path, struct ca_diag *d)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ca_fail(d, CA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
		if (n == 0)
			return ca_fail(d, CA_ERR_IO, "cannot write %s: no progress", path);
		done += (size_t)n;
	}
	return 0;
}

static int check_tensor(const struct st_tensor *t, size_t i, struct ca_diag *d)
{
	char sk[SHOWN_NAME_MAX + 4];
	size_t numel = 1, nbytes;

	if (memchr(t->name, '\0', sizeof t->name) == NULL)
		return ca_fail(d, CA_ERR_INVALID, "tensor %zu: name is not terminated", i);
	if (t->name[0] == '\0' || strcmp(t->name, METADATA_KEY) == 0)
		return ca_fail(d, CA_ERR_INVALID, "tensor %zu: invalid name '%s'", i,
			       shown(t->name, sk));
	if (t->dtype <= CA_DTYPE_INVALID || t->dtype >= CA_DTYPE_COUNT)
		return ca_fail(d, CA_ERR_INVALID, "tensor '%s': invalid dtype %d", shown(t->name, sk),
			       (int)t->dtype);
	if (t->ndim < 0 || t->ndim > CA_MAX_DIMS)
		return ca_fail(d, CA_ERR_INVALID, "tensor '%s': %d dimensions (0..%d allowed)",
			       shown(t->name, sk), t->ndim, CA_MAX_DIMS);
	for (int k = 0; k < t->ndim; k++) {
		if (t->shape[k] < 0)
			return ca_fail(d, CA_ERR_INVALID, "tensor '%s': negative dimension %lld",
				       shown(t->name, sk), (long long)t->shape[k]);
		if ((uint64_t)t->shape[k] > SIZE_MAX ||
		    __builtin_mul_overflow(numel, (size_t)t->shape[k], &numel))
			return ca_fail(d, CA_ERR_INVALID, "tensor '%s': shape is too large",
				       shown(t->name, sk));
	}
	if (__builtin_mul_overflow(numel, ca_dtype_size(t->dtype), &nbytes))
		return ca_fail(d, CA_ERR_INVALID, "tensor '%s': shape is too large",
			       shown(t->name, sk));
	if (nbytes != t->nbytes)
		return ca_fail(d, CA_ERR_INVALID,
			       "tensor '%s': nbytes is %zu but a %s tensor of that shape holds %zu",
			       shown(t->name, sk), t->nbytes, ca_dtype_safetensors_name(t->dtype),
			       nbytes);
	if (nbytes && !t->data)
		return ca_fail(d, CA_ERR_INVALID, "tensor '%s': no data", shown(t->name, sk));
	return 0;
}

/* Builds the JSON header text (unpadded), heap-allocated. */
static int build_header(const struct st_tensor *tensors, size_t count,
			const char *const *metadata, char **out, struct ca_diag *d)
{
	int rc = 0;
	json_t *root = json_object();
	size_t off = 0;
	char sk[SHOWN_NAME_MAX + 4];

	*out = NULL;
	if (!root)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory building a safetensors header");
	if (metadata && metadata[0]) {
		json_t *meta = json_object();
		if (!meta || json_object_set_new(root, METADATA_KEY, meta) != 0) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory building a safetensors header");
			goto out;
		}
		for (const char *const *m = metadata; *m; m += 2) {
			json_t *v;
			if (!m[1]) {
				rc = ca_fail(d, CA_ERR_INVALID, "metadata key '%s' has no value",
					     shown(m[0], sk));
				goto out;
			}
			v = json_string(m[1]);
			if (!v || json_object_set_new(meta, m[0], v) != 0) {
				rc = ca_fail(d, CA_ERR_INVALID,
					     "metadata '%s': key or value is not valid UTF-8",
					     shown(m[0], sk));
				goto out;
			}
		}
	}
	for (size_t i = 0; i < count; i++) {
		const struct st_tensor *t = &tensors[i];
		json_t *shape, *entry;

		rc = check_tensor(t, i, d);
		if (rc)
			goto out;
		if (json_object_get(root, t->name)) {
			rc = ca_fail(d, CA_ERR_INVALID, "tensor '%s' appears twice",
				     shown(t->name, sk));
			goto out;
		}
		if (off > (size_t)LLONG_MAX - t->nbytes) {
			rc = ca_fail(d, CA_ERR_LIMIT, "safetensors: total data size overflows");
			goto out;
		}
		shape = json_array();
		for (int k = 0; shape && k < t->ndim; k++)
			if (json_array_append_new(shape, json_integer((json_int_t)t->shape[k])) != 0) {
				json_decref(shape);
				shape = NULL;
			}
		entry = shape ? json_pack("{s:s, s:o, s:[I, I]}", "dtype",
					  ca_dtype_safetensors_name(t->dtype), "shape", shape,
					  "data_offsets", (json_int_t)off,
					  (json_int_t)(off + t->nbytes))
			      : NULL;
		if (!entry) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory building a safetensors header");
			goto out;
		}
		if (json_object_set_new(root, t->name, entry) != 0) {
			rc = ca_fail(d, CA_ERR_INVALID, "tensor '%s': name is not valid UTF-8",
				     shown(t->name, sk));
			goto out;
		}
		off += t->nbytes;
	}
	*out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!*out)
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory building a safetensors header");
out:
	json_decref(root);
	return rc;
}

int safetensors_write(const char *path, const struct st_tensor *tensors, size_t count,
		      const char *const *metadata, struct ca_diag *d)
{
	static atomic_uint serial;
	char tmp[PATH_MAX];
	char *json = NULL;
	uint8_t *header = NULL;
	size_t jlen, hlen;
	int fd = -1, rc = 0, n;

	if (count > CA_SAFETENSORS_MAX_TENSORS)
		return ca_fail(d, CA_ERR_LIMIT, "safetensors: %zu tensors, over the limit of %d",
			       count, CA_SAFETENSORS_MAX_TENSORS);
	rc = build_header(tensors, count, metadata, &json, d);
	if (rc)
		return ca_fail_prefix(d, rc, "cannot write %s", path);
	jlen = strlen(json);
	hlen = (jlen + 7) & ~(size_t)7;
	if (hlen > CA_SAFETENSORS_MAX_HEADER) {
		rc = ca_fail(d, CA_ERR_LIMIT, "cannot write %s: header of %zu bytes is over the limit",
			     path, hlen);
		goto out;
	}
	header = malloc(8 + hlen);
	if (!header) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory writing %s", path);
		goto out;
	}
	store_le64(header, hlen);
	memcpy(header + 8, json, jlen);
	memset(header + 8 + jlen, ' ', hlen - jlen);

	n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
		     atomic_fetch_add(&serial, 1u));
	if (n < 0 || (size_t)n >= sizeof tmp) {
		rc = ca_fail(d, CA_ERR_LIMIT, "path too long: %s", path);
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = ca_fail(d, CA_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
	rc = write_all(fd, header, 8 + hlen, tmp, d);
	for (size_t i = 0; rc == 0 && i < count; i++)
		rc = write_all(fd, tensors[i].data, tensors[i].nbytes, tmp, d);
	if (close(fd) != 0 && rc == 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
	if (rc == 0 && rename(tmp, path) != 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
	if (rc != 0)
		unlink(tmp);
out:
	free(header);
	free(json);
	return rc;
}
