/* dtype: the element types cuda-agent moves between torch, safetensors files and DLPack.
 * One table maps each to its safetensors name, torch name, size and DLPack type. */
#ifndef CA_TENSOR_DTYPE_H
#define CA_TENSOR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ca_dtype {
	CA_DTYPE_INVALID = 0,
	CA_DTYPE_F64,
	CA_DTYPE_F32,
	CA_DTYPE_F16,
	CA_DTYPE_BF16,
	CA_DTYPE_I64,
	CA_DTYPE_I32,
	CA_DTYPE_I16,
	CA_DTYPE_I8,
	CA_DTYPE_U8,
	CA_DTYPE_BOOL,
	CA_DTYPE_COUNT
};

#define CA_MAX_DIMS 8

/* DLPack type code for bool (kDLBool, added in DLPack 0.8; Debian ships 0.6 without it). */
#define CA_DLPACK_BOOL_CODE 6

/* Safetensors names: "F32", "BF16", "BOOL", ... ; CA_DTYPE_INVALID when unknown. */
enum ca_dtype ca_dtype_from_safetensors(const char *name);
const char *ca_dtype_safetensors_name(enum ca_dtype t);
/* torch names as the bridge writes them: "float32", "bfloat16", "bool", ... */
enum ca_dtype ca_dtype_from_torch(const char *name);
const char *ca_dtype_torch_name(enum ca_dtype t);
size_t ca_dtype_size(enum ca_dtype t);
bool ca_dtype_is_float(enum ca_dtype t);
/* DLPack (code, bits) */
void ca_dtype_dlpack(enum ca_dtype t, uint8_t *code, uint8_t *bits);

/* Converts element i of a buffer of type t to double (bf16/f16 decoded in software). */
double ca_dtype_load(enum ca_dtype t, const void *data, size_t i);

#endif
