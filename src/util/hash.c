#include "util/hash.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "util/diag.h"

int ca_hasher_init(struct ca_hasher *h)
{
	XXH3_state_t *st = XXH3_createState();
	if (!st)
		return CA_ERR_NOMEM;
	XXH3_128bits_reset(st);
	h->state = st;
	return 0;
}

void ca_hasher_update(struct ca_hasher *h, const void *data, size_t len)
{
	XXH3_128bits_update(h->state, data, len);
}

void ca_hasher_update_str(struct ca_hasher *h, const char *s)
{
	uint64_t len = s ? strlen(s) : 0;
	XXH3_128bits_update(h->state, &len, sizeof len);
	if (len)
		XXH3_128bits_update(h->state, s, (size_t)len);
}

static void to_hex(XXH128_hash_t v, char out[CA_HASH_HEX_LEN + 1])
{
	snprintf(out, CA_HASH_HEX_LEN + 1, "%016llx%016llx", (unsigned long long)v.high64,
		 (unsigned long long)v.low64);
}

void ca_hasher_final_hex(struct ca_hasher *h, char out[CA_HASH_HEX_LEN + 1])
{
	to_hex(XXH3_128bits_digest(h->state), out);
}

void ca_hasher_free(struct ca_hasher *h)
{
	if (h->state)
		XXH3_freeState(h->state);
	h->state = NULL;
}

void ca_hash_hex(const void *data, size_t len, char out[CA_HASH_HEX_LEN + 1])
{
	to_hex(XXH3_128bits(data, len), out);
}

uint64_t ca_hash64(const void *data, size_t len)
{
	return XXH3_64bits(data, len);
}
