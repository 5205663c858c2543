/* prep: the arithmetic of a call's preparation, shared by the supervisor's GPU kernels
 * (kernels.cu) and its CPU backend (device.c, for tests without a GPU): one implementation.
 *
 *   - perturbation: every element of a set is either at its placed value or at half of it,
 *     chosen per element by a counter-based hash of (the set's current seed, index): a bit
 *     that is 1 with probability `fraction`. Moving a set from seed `from` to seed `to`
 *     halves the elements whose bit turns on and doubles those whose bit turns off (seed 0:
 *     the set as placed, every bit off). Scaling by two is exact in every float format
 *     (subnormals aside), so values never drift however many calls a set serves, and stay in
 *     [x/2, x]: signs and ranges such as (0, 1) are kept. Each call's inputs differ from every
 *     earlier state of the set in about half the elements, independently, so no output can be
 *     derived from an earlier one without the work, and an earlier output served again misses
 *     the tolerance. Infinities and NaN keep their value.
 *   - checksum: every 8-byte word (a tail zero-padded) is hashed with its index and a salt and
 *     the hashes are summed mod 2^64: any changed bit changes the sum except with probability
 *     ~2^-64, and the sum does not depend on the order of the additions.
 * Plain integer and float arithmetic only (no CUDA intrinsics), so C and CUDA agree bit for
 * bit. */
#ifndef CA_DEVICE_PREP_H
#define CA_DEVICE_PREP_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CA_PREP_FN __host__ __device__ __forceinline__
#else
#define CA_PREP_FN static inline
#endif

CA_PREP_FN uint64_t ca_prep_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

CA_PREP_FN uint64_t ca_prep_element_hash(uint64_t seed, uint64_t i)
{
	return ca_prep_mix64(seed ^ ca_prep_mix64(i + 0x9e3779b97f4a7c15ull));
}

CA_PREP_FN uint64_t ca_prep_checksum_word(uint64_t w, uint64_t i, uint64_t salt)
{
	return ca_prep_mix64(w ^ ca_prep_mix64(i ^ salt));
}

CA_PREP_FN float ca_prep_float(uint32_t b)
{
	float f;
	memcpy(&f, &b, 4);
	return f;
}

CA_PREP_FN uint32_t ca_prep_bits(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	return b;
}

/* IEEE half -> float (exact). */
CA_PREP_FN float ca_prep_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (exp == 0x1fu)
		return ca_prep_float(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24 */
		float v = (float)mant * 5.9604644775390625e-08f;
		return sign ? -v : v;
	}
	return ca_prep_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* float -> half rounded toward zero; finite values beyond the half range saturate to the
 * largest finite half. Not for NaN or infinities (the caller keeps those). */
CA_PREP_FN uint16_t ca_prep_float_to_half_rz(float x)
{
	uint32_t b = ca_prep_bits(x), sign = (b >> 16) & 0x8000u, mant = b & 0x7fffffu;
	int exp = (int)((b >> 23) & 0xffu) - 127 + 15;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7bffu);
	if (exp <= 0) {
		int shift = 14 - exp; /* subnormal half: (1.mant) >> (1 - exp), then 13 bits more */
		if (shift > 24)
			return (uint16_t)sign;
		return (uint16_t)(sign | ((mant | 0x800000u) >> shift));
	}
	return (uint16_t)(sign | ((uint32_t)exp << 10) | (mant >> 13));
}

/* Which element's hash decides element i (the `layout` of a tensor, docs/protocol.md
 * "In-distribution inputs"): CA_PREP_ELEMENTS, each its own; CA_PREP_UNIFORM, one for the whole
 * tensor (it moves at once: order is kept); n >= 2, a tensor whose last two dimensions are n x n
 * and symmetric: (r, c) and (c, r) share one, so it stays symmetric. */
#define CA_PREP_ELEMENTS 0ull
#define CA_PREP_UNIFORM  UINT64_MAX

CA_PREP_FN uint64_t ca_prep_key(uint64_t i, uint64_t layout)
{
	uint64_t nn, rc, r, c;
	if (layout == CA_PREP_ELEMENTS || layout == 1)
		return i;
	if (layout == CA_PREP_UNIFORM)
		return 0;
	nn = layout * layout;
	rc = i % nn;
	r = rc / layout;
	c = rc % layout;
	return i - rc + (r < c ? r * layout + c : c * layout + r);
}

/* Whether element i of a set at seed `seed` is halved (seed 0: never). */
CA_PREP_FN int ca_prep_halved(uint64_t seed, uint64_t i, uint64_t threshold)
{
	return seed != 0 && ca_prep_element_hash(seed, i) < threshold;
}

/* The factor element i is scaled by when its set moves from `from` to `to`: 0.5, 2 or 1. */
CA_PREP_FN float ca_prep_toggle(uint64_t from, uint64_t to, uint64_t i, uint64_t threshold)
{
	int d = ca_prep_halved(from, i, threshold) - ca_prep_halved(to, i, threshold);
	return d < 0 ? 0.5f : d > 0 ? 2.0f : 1.0f;
}

CA_PREP_FN uint16_t ca_prep_scale_bf16(uint16_t b, float f)
{
	if (f == 1.0f || (b & 0x7f80u) == 0x7f80u)
		return b;
	return (uint16_t)(ca_prep_bits(ca_prep_float((uint32_t)b << 16) * f) >> 16);
}

CA_PREP_FN uint16_t ca_prep_scale_f16(uint16_t b, float f)
{
	if (f == 1.0f || (b & 0x7c00u) == 0x7c00u)
		return b; /* inf or NaN */
	return ca_prep_float_to_half_rz(ca_prep_half_to_float(b) * f);
}

/* `fraction` (0..1] of elements halved in each state, as a threshold on a 64-bit hash. */
CA_PREP_FN uint64_t ca_prep_threshold(double fraction)
{
	if (!(fraction > 0))
		return 0;
	if (fraction >= 1.0)
		return UINT64_MAX;
	return (uint64_t)(fraction * 18446744073709551616.0);
}

#endif
