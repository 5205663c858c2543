/* hash: content hashes (XXH3-128, hex) used for task identity and build-cache keys.
 * Not cryptographic: the cache and task ids need collision resistance against accidents, and
 * nothing security-relevant is keyed on them. */
#ifndef CA_UTIL_HASH_H
#define CA_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define CA_HASH_HEX_LEN 32 /* 128 bits as lowercase hex, plus NUL needs 33 bytes */

struct ca_hasher {
	void *state; /* XXH3_state_t, owned */
};

int ca_hasher_init(struct ca_hasher *h);
void ca_hasher_update(struct ca_hasher *h, const void *data, size_t len);
/* Adds a length-prefixed string so that ("ab","c") and ("a","bc") hash differently. */
void ca_hasher_update_str(struct ca_hasher *h, const char *s);
void ca_hasher_final_hex(struct ca_hasher *h, char out[CA_HASH_HEX_LEN + 1]);
void ca_hasher_free(struct ca_hasher *h);

void ca_hash_hex(const void *data, size_t len, char out[CA_HASH_HEX_LEN + 1]);

/* 64-bit hash for checksums. */
uint64_t ca_hash64(const void *data, size_t len);

#endif
