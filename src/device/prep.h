/* prep: the arithmetic of a call's preparation, shared by the supervisor's GPU kernels
 * (kernels.cu) and its CPU backend (device.c, for tests without a GPU): one implementation.
 *
 *   - perturbation: x *= factor for f64 (in double) and f32 (in float); f16 and bf16 are
 *     computed in float and rounded stochastically with a counter-based hash of (seed, index),
 *     so a factor closer to 1 than half an ulp still changes values, without bias. Infinities,
 *     NaN and products that would overflow keep their value.
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

/* bf16 is the top half of a float: adding 16 random bits below the cut and truncating rounds
 * up (in magnitude) with probability (dropped bits) / 2^16: unbiased stochastic rounding. */
CA_PREP_FN uint16_t ca_prep_perturb_bf16(uint16_t b, float f, uint64_t h)
{
	uint32_t yb, rounded;
	if ((b & 0x7f80u) == 0x7f80u)
		return b;
	yb = ca_prep_bits(ca_prep_float((uint32_t)b << 16) * f);
	if ((yb & 0x7f800000u) == 0x7f800000u)
		return b;
	rounded = (yb + (uint32_t)(h & 0xffffu)) >> 16;
	if ((rounded & 0x7f80u) == 0x7f80u)
		rounded = yb >> 16; /* rounding up would overflow: truncate instead */
	return (uint16_t)rounded;
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

/* f16: round toward zero, then step one ulp away from zero with probability equal to the
 * fraction of an ulp that was dropped. */
CA_PREP_FN uint16_t ca_prep_perturb_f16(uint16_t b, float f, uint64_t h)
{
	float y, lof, hif, ay, alo, ahi, frac, u;
	uint16_t lb, hb;
	if ((b & 0x7c00u) == 0x7c00u)
		return b; /* inf or NaN */
	y = ca_prep_half_to_float(b) * f;
	lb = ca_prep_float_to_half_rz(y);
	lof = ca_prep_half_to_float(lb);
	if (lof == y)
		return lb;
	hb = (uint16_t)(lb + 1u); /* next magnitude, same sign */
	if ((hb & 0x7c00u) == 0x7c00u)
		return lb;
	hif = ca_prep_half_to_float(hb);
	ay = y < 0 ? -y : y;
	alo = lof < 0 ? -lof : lof;
	ahi = hif < 0 ? -hif : hif;
	frac = (ay - alo) / (ahi - alo);
	u = (float)(h >> 40) * 5.9604644775390625e-08f; /* 24 random bits in [0, 1) */
	return u < frac ? hb : lb;
}

#endif
