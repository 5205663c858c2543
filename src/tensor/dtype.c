#include "tensor/dtype.h"

#include <math.h>
#include <string.h>

struct dtype_info {
	const char *st_name;
	const char *torch_name;
	size_t size;
	uint8_t dl_code, dl_bits;
	bool is_float;
};

/* DLPack codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6. */
static const struct dtype_info table[CA_DTYPE_COUNT] = {
	[CA_DTYPE_F64] = {"F64", "float64", 8, 2, 64, true},
	[CA_DTYPE_F32] = {"F32", "float32", 4, 2, 32, true},
	[CA_DTYPE_F16] = {"F16", "float16", 2, 2, 16, true},
	[CA_DTYPE_BF16] = {"BF16", "bfloat16", 2, 4, 16, true},
	[CA_DTYPE_I64] = {"I64", "int64", 8, 0, 64, false},
	[CA_DTYPE_I32] = {"I32", "int32", 4, 0, 32, false},
	[CA_DTYPE_I16] = {"I16", "int16", 2, 0, 16, false},
	[CA_DTYPE_I8] = {"I8", "int8", 1, 0, 8, false},
	[CA_DTYPE_U8] = {"U8", "uint8", 1, 1, 8, false},
	[CA_DTYPE_BOOL] = {"BOOL", "bool", 1, CA_DLPACK_BOOL_CODE, 8, false},
};

enum ca_dtype ca_dtype_from_safetensors(const char *name)
{
	for (int t = 1; t < CA_DTYPE_COUNT; t++)
		if (strcmp(table[t].st_name, name) == 0)
			return (enum ca_dtype)t;
	return CA_DTYPE_INVALID;
}

const char *ca_dtype_safetensors_name(enum ca_dtype t)
{
	return t > 0 && t < CA_DTYPE_COUNT ? table[t].st_name : "INVALID";
}

enum ca_dtype ca_dtype_from_torch(const char *name)
{
	if (strncmp(name, "torch.", 6) == 0)
		name += 6;
	for (int t = 1; t < CA_DTYPE_COUNT; t++)
		if (strcmp(table[t].torch_name, name) == 0)
			return (enum ca_dtype)t;
	return CA_DTYPE_INVALID;
}

const char *ca_dtype_torch_name(enum ca_dtype t)
{
	return t > 0 && t < CA_DTYPE_COUNT ? table[t].torch_name : "invalid";
}

size_t ca_dtype_size(enum ca_dtype t)
{
	return t > 0 && t < CA_DTYPE_COUNT ? table[t].size : 0;
}

bool ca_dtype_is_float(enum ca_dtype t)
{
	return t > 0 && t < CA_DTYPE_COUNT && table[t].is_float;
}

void ca_dtype_dlpack(enum ca_dtype t, uint8_t *code, uint8_t *bits)
{
	*code = t > 0 && t < CA_DTYPE_COUNT ? table[t].dl_code : 0;
	*bits = t > 0 && t < CA_DTYPE_COUNT ? table[t].dl_bits : 0;
}

static double half_to_double(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double v;
	if (exp == 0)
		v = ldexp((double)mant, -24);
	else if (exp == 31)
		v = mant ? NAN : INFINITY;
	else
		v = ldexp((double)(mant | 0x400), exp - 25);
	return sign ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
	uint32_t bits = (uint32_t)b << 16;
	float f;
	memcpy(&f, &bits, sizeof f);
	return (double)f;
}

double ca_dtype_load(enum ca_dtype t, const void *data, size_t i)
{
	const unsigned char *p = (const unsigned char *)data + i * ca_dtype_size(t);
	switch (t) {
	case CA_DTYPE_F64: { double v; memcpy(&v, p, 8); return v; }
	case CA_DTYPE_F32: { float v; memcpy(&v, p, 4); return (double)v; }
	case CA_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); return half_to_double(v); }
	case CA_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return bf16_to_double(v); }
	case CA_DTYPE_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
	case CA_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); return (double)v; }
	case CA_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); return (double)v; }
	case CA_DTYPE_I8: { int8_t v; memcpy(&v, p, 1); return (double)v; }
	case CA_DTYPE_U8: return (double)p[0];
	case CA_DTYPE_BOOL: return p[0] ? 1.0 : 0.0;
	default: return NAN;
	}
}
