/* elfsyms: a defensive reader of the dynamic linking view of an ELF64 little-endian file.
 *
 * Lists what a shared library imports (its undefined dynamic symbols, weak ones flagged), what it
 * exports (its defined, visible dynamic symbols) and the libraries it asks for (DT_NEEDED), which
 * is what the build driver checks against the allowlist (build/rules.h).
 *
 * Symbols come from the .dynsym section and the string table it links to when section headers
 * exist; when they are absent or stripped, from the PT_DYNAMIC segment (DT_SYMTAB, DT_STRTAB,
 * DT_STRSZ; the symbol count from DT_GNU_HASH, else DT_HASH, else the distance from DT_SYMTAB to
 * DT_STRTAB). DT_NEEDED, DT_SONAME and DT_RUNPATH/DT_RPATH come from PT_DYNAMIC (the loader's
 * view), else from the SHT_DYNAMIC section.
 *
 * The input is untrusted: every offset and size is checked against the buffer without overflow,
 * every string read is bounded by its table, counts are capped (ELF_MAX_SYMBOLS, ...), and
 * structures are copied out with memcpy (no unaligned access). Malformed input yields
 * CA_ERR_PARSE, a 32-bit or big-endian file CA_ERR_UNSUPPORTED, a cap CA_ERR_LIMIT.
 *
 * Ownership: struct elf_dynamic owns copies of the string tables; every name points into them and
 * lives until elf_dynamic_free(). No libelf. */
#ifndef CA_BUILD_ELFSYMS_H
#define CA_BUILD_ELFSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/diag.h"

#define ELF_MAX_SYMBOLS (1u << 20)
#define ELF_MAX_SECTIONS (1u << 16)
#define ELF_MAX_SEGMENTS (1u << 12)
#define ELF_MAX_DYNAMIC (1u << 16)      /* entries of the dynamic array */
#define ELF_MAX_FILE_BYTES (1ull << 30) /* elf_dynamic_read_file refuses larger files */

struct elf_symbol {
	const char *name;   /* never NULL, never empty */
	bool weak;          /* STB_WEAK */
	unsigned char type; /* STT_* */
};

struct elf_dynamic {
	struct elf_symbol *undefined; /* imports, in symbol table order */
	size_t num_undefined;
	struct elf_symbol *defined;   /* exports: defined, global/weak/unique, default/protected */
	size_t num_defined;
	const char **needed;          /* DT_NEEDED in order */
	size_t num_needed;
	const char *soname;           /* DT_SONAME or NULL */
	const char *runpath;          /* DT_RUNPATH, else DT_RPATH, else NULL */
	bool from_sections;           /* symbols came from .dynsym (false: from PT_DYNAMIC) */
	/* owned storage */
	char *sym_strings;
	char *dyn_strings;
};

/* Parses buf (len bytes). On success *out is filled (free with elf_dynamic_free); on error *out is
 * left empty (elf_dynamic_free is still safe). A file with no dynamic section gives empty lists. */
int elf_dynamic_read(const uint8_t *buf, size_t len, struct elf_dynamic *out, struct ca_diag *d);

/* Reads the file (at most ELF_MAX_FILE_BYTES) and parses it; messages name the path. */
int elf_dynamic_read_file(const char *path, struct elf_dynamic *out, struct ca_diag *d);

void elf_dynamic_free(struct elf_dynamic *e);

/* Lookups by exact name. */
const struct elf_symbol *elf_dynamic_find_undefined(const struct elf_dynamic *e, const char *name);
const struct elf_symbol *elf_dynamic_find_defined(const struct elf_dynamic *e, const char *name);

#endif
