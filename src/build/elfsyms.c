#include "build/elfsyms.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

#define DYN_ENT ((uint64_t)sizeof(Elf64_Dyn))
#define SYM_ENT ((uint64_t)sizeof(Elf64_Sym))

/* A region [off, off + size) of the buffer, checked to lie inside it. */
struct region {
	uint64_t off, size;
	bool present;
};

struct parse {
	const uint8_t *buf;
	size_t len;
	Elf64_Ehdr eh;
	Elf64_Phdr *ph;
	size_t phnum;
	Elf64_Shdr *sh;
	size_t shnum;
	/* from the dynamic array */
	uint64_t *needed_off;
	size_t num_needed;
	bool has_strtab, has_strsz, has_symtab, has_hash, has_gnu_hash, has_soname, has_runpath,
		has_rpath;
	uint64_t strtab, strsz, symtab, syment, hash, gnu_hash, soname, runpath, rpath;
	struct region dyn_strtab; /* file region of the dynamic string table */
	struct region symtab_r;   /* file region of the symbol table */
	struct region sym_strtab; /* file region of the symbols' string table */
	size_t nsyms;
};

static bool in_file(size_t len, uint64_t off, uint64_t size)
{
	return off <= (uint64_t)len && size <= (uint64_t)len - off;
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* Maps a virtual address to a file offset through the PT_LOAD segments; *avail receives the bytes
 * of file data from there to the end of that segment's file image (clamped to the file). */
static bool vaddr_to_off(const struct parse *p, uint64_t vaddr, uint64_t *off, uint64_t *avail)
{
	for (size_t i = 0; i < p->phnum; i++) {
		const Elf64_Phdr *ph = &p->ph[i];
		if (ph->p_type != PT_LOAD || vaddr < ph->p_vaddr)
			continue;
		uint64_t delta = vaddr - ph->p_vaddr;
		if (delta >= ph->p_filesz)
			continue;
		if (!in_file(p->len, ph->p_offset, 0) || delta > (uint64_t)p->len - ph->p_offset)
			continue;
		uint64_t o = ph->p_offset + delta;
		uint64_t seg_left = ph->p_filesz - delta;
		uint64_t file_left = (uint64_t)p->len - o;
		*off = o;
		*avail = seg_left < file_left ? seg_left : file_left;
		return true;
	}
	return false;
}

static int read_ehdr(struct parse *p, struct ca_diag *d)
{
	if (p->len < EI_NIDENT || memcmp(p->buf, ELFMAG, SELFMAG) != 0)
		return ca_fail(d, CA_ERR_PARSE, "not an ELF file (bad magic)");
	if (p->buf[EI_CLASS] != ELFCLASS64)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "not a 64-bit ELF file (class %u)",
			       p->buf[EI_CLASS]);
	if (p->buf[EI_DATA] != ELFDATA2LSB)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "not a little-endian ELF file (data %u)",
			       p->buf[EI_DATA]);
	if (p->len < sizeof p->eh)
		return ca_fail(d, CA_ERR_PARSE, "ELF header truncated (%zu bytes)", p->len);
	memcpy(&p->eh, p->buf, sizeof p->eh);
	return 0;
}

static int read_shdrs(struct parse *p, struct ca_diag *d)
{
	const Elf64_Ehdr *eh = &p->eh;
	uint64_t count = eh->e_shnum;

	if (eh->e_shoff == 0)
		return 0; /* stripped: no section headers */
	if (eh->e_shentsize != sizeof(Elf64_Shdr))
		return ca_fail(d, CA_ERR_PARSE, "bad section header size %u", eh->e_shentsize);
	if (!in_file(p->len, eh->e_shoff, sizeof(Elf64_Shdr)))
		return ca_fail(d, CA_ERR_PARSE, "section headers lie outside the file");
	if (count == 0) { /* extended numbering: the count is in section 0 */
		Elf64_Shdr s0;
		memcpy(&s0, p->buf + eh->e_shoff, sizeof s0);
		count = s0.sh_size;
	}
	if (count > ELF_MAX_SECTIONS)
		return ca_fail(d, CA_ERR_LIMIT, "%llu sections, over the limit of %u",
			       (unsigned long long)count, ELF_MAX_SECTIONS);
	if (!in_file(p->len, eh->e_shoff, count * sizeof(Elf64_Shdr)))
		return ca_fail(d, CA_ERR_PARSE, "section headers run past the end of the file");
	if (count == 0)
		return 0;
	p->sh = malloc((size_t)count * sizeof *p->sh);
	if (!p->sh)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory reading section headers");
	memcpy(p->sh, p->buf + eh->e_shoff, (size_t)count * sizeof *p->sh);
	p->shnum = (size_t)count;
	return 0;
}

static int read_phdrs(struct parse *p, struct ca_diag *d)
{
	const Elf64_Ehdr *eh = &p->eh;
	uint64_t count = eh->e_phnum;

	if (count == 0 || eh->e_phoff == 0)
		return 0;
	if (eh->e_phentsize != sizeof(Elf64_Phdr))
		return ca_fail(d, CA_ERR_PARSE, "bad program header size %u", eh->e_phentsize);
	if (count == PN_XNUM && p->shnum > 0)
		count = p->sh[0].sh_info;
	if (count > ELF_MAX_SEGMENTS)
		return ca_fail(d, CA_ERR_LIMIT, "%llu program headers, over the limit of %u",
			       (unsigned long long)count, ELF_MAX_SEGMENTS);
	if (!in_file(p->len, eh->e_phoff, count * sizeof(Elf64_Phdr)))
		return ca_fail(d, CA_ERR_PARSE, "program headers run past the end of the file");
	if (count == 0)
		return 0;
	p->ph = malloc((size_t)count * sizeof *p->ph);
	if (!p->ph)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory reading program headers");
	memcpy(p->ph, p->buf + eh->e_phoff, (size_t)count * sizeof *p->ph);
	p->phnum = (size_t)count;
	return 0;
}

static const Elf64_Shdr *find_section(const struct parse *p, uint32_t type)
{
	for (size_t i = 0; i < p->shnum; i++)
		if (p->sh[i].sh_type == type)
			return &p->sh[i];
	return NULL;
}

/* The string table a section links to, as a checked file region. */
static int linked_strtab(const struct parse *p, const Elf64_Shdr *s, const char *what,
			 struct region *r, struct ca_diag *d)
{
	if (s->sh_link == 0 || s->sh_link >= p->shnum)
		return ca_fail(d, CA_ERR_PARSE, "%s links to a bad string table index %u", what,
			       s->sh_link);
	const Elf64_Shdr *st = &p->sh[s->sh_link];
	if (st->sh_type != SHT_STRTAB)
		return ca_fail(d, CA_ERR_PARSE, "%s links to a section that is not a string table",
			       what);
	if (!in_file(p->len, st->sh_offset, st->sh_size))
		return ca_fail(d, CA_ERR_PARSE, "the string table of %s lies outside the file",
			       what);
	*r = (struct region){.off = st->sh_offset, .size = st->sh_size, .present = true};
	return 0;
}

/* Walks the dynamic array at [off, off + size) and records what we need. */
static int read_dynamic(struct parse *p, uint64_t off, uint64_t size, struct ca_diag *d)
{
	uint64_t count = size / DYN_ENT;

	if (!in_file(p->len, off, size))
		return ca_fail(d, CA_ERR_PARSE, "the dynamic section lies outside the file");
	if (count > ELF_MAX_DYNAMIC)
		count = ELF_MAX_DYNAMIC; /* a real one ends with DT_NULL long before */
	p->needed_off = malloc((size_t)(count ? count : 1) * sizeof *p->needed_off);
	if (!p->needed_off)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory reading the dynamic section");
	for (uint64_t i = 0; i < count; i++) {
		Elf64_Dyn dyn;
		memcpy(&dyn, p->buf + off + i * DYN_ENT, sizeof dyn);
		uint64_t v = dyn.d_un.d_val;
		switch (dyn.d_tag) {
		case DT_NULL:
			return 0;
		case DT_NEEDED:
			p->needed_off[p->num_needed++] = v;
			break;
		case DT_STRTAB: p->has_strtab = true; p->strtab = v; break;
		case DT_STRSZ: p->has_strsz = true; p->strsz = v; break;
		case DT_SYMTAB: p->has_symtab = true; p->symtab = v; break;
		case DT_SYMENT: p->syment = v; break;
		case DT_HASH: p->has_hash = true; p->hash = v; break;
		case DT_GNU_HASH: p->has_gnu_hash = true; p->gnu_hash = v; break;
		case DT_SONAME: p->has_soname = true; p->soname = v; break;
		case DT_RUNPATH: p->has_runpath = true; p->runpath = v; break;
		case DT_RPATH: p->has_rpath = true; p->rpath = v; break;
		default: break;
		}
	}
	return 0;
}

/* Number of symbols in a DT_GNU_HASH table: one past the highest index reachable from a bucket. */
static int gnu_hash_count(const struct parse *p, size_t *nsyms, struct ca_diag *d)
{
	uint64_t off, avail;
	if (!vaddr_to_off(p, p->gnu_hash, &off, &avail) || avail < 16)
		return ca_fail(d, CA_ERR_PARSE, "DT_GNU_HASH points outside the file");
	const uint8_t *h = p->buf + off;
	uint64_t nbuckets = rd32(h), symoffset = rd32(h + 4), bloom_size = rd32(h + 8);
	uint64_t buckets_off = 16 + bloom_size * 8;
	if (buckets_off > avail || nbuckets > (avail - buckets_off) / 4)
		return ca_fail(d, CA_ERR_PARSE, "DT_GNU_HASH table runs past its segment");
	uint64_t chains_off = buckets_off + nbuckets * 4;
	uint64_t max = 0;
	for (uint64_t b = 0; b < nbuckets; b++) {
		uint64_t v = rd32(h + buckets_off + b * 4);
		if (v > max)
			max = v;
	}
	if (max == 0) {
		if (symoffset > ELF_MAX_SYMBOLS)
			return ca_fail(d, CA_ERR_LIMIT, "more than %u dynamic symbols",
				       ELF_MAX_SYMBOLS);
		*nsyms = (size_t)symoffset;
		return 0;
	}
	if (max < symoffset)
		return ca_fail(d, CA_ERR_PARSE, "DT_GNU_HASH bucket below the symbol offset");
	for (uint64_t idx = max;; idx++) {
		if (idx >= ELF_MAX_SYMBOLS)
			return ca_fail(d, CA_ERR_LIMIT, "more than %u dynamic symbols",
				       ELF_MAX_SYMBOLS);
		uint64_t at = chains_off + (idx - symoffset) * 4;
		if (at > avail || avail - at < 4)
			return ca_fail(d, CA_ERR_PARSE, "DT_GNU_HASH chain runs past its segment");
		if (rd32(h + at) & 1u) {
			*nsyms = (size_t)idx + 1;
			return 0;
		}
	}
}

static int sysv_hash_count(const struct parse *p, size_t *nsyms, struct ca_diag *d)
{
	uint64_t off, avail;
	if (!vaddr_to_off(p, p->hash, &off, &avail) || avail < 8)
		return ca_fail(d, CA_ERR_PARSE, "DT_HASH points outside the file");
	uint32_t nchain = rd32(p->buf + off + 4);
	if (nchain > ELF_MAX_SYMBOLS)
		return ca_fail(d, CA_ERR_LIMIT, "%u dynamic symbols, over the limit of %u", nchain,
			       ELF_MAX_SYMBOLS);
	*nsyms = nchain;
	return 0;
}

/* Locates the symbol table and its strings: .dynsym when present, else through PT_DYNAMIC. */
static int locate_symbols(struct parse *p, bool *from_sections, struct ca_diag *d)
{
	const Elf64_Shdr *ds = find_section(p, SHT_DYNSYM);
	int rc = 0;

	if (ds) {
		if (ds->sh_entsize != SYM_ENT)
			return ca_fail(d, CA_ERR_PARSE, "bad .dynsym entry size %llu",
				       (unsigned long long)ds->sh_entsize);
		if (!in_file(p->len, ds->sh_offset, ds->sh_size))
			return ca_fail(d, CA_ERR_PARSE, ".dynsym lies outside the file");
		if (ds->sh_size / SYM_ENT > ELF_MAX_SYMBOLS)
			return ca_fail(d, CA_ERR_LIMIT, "more than %u dynamic symbols",
				       ELF_MAX_SYMBOLS);
		rc = linked_strtab(p, ds, ".dynsym", &p->sym_strtab, d);
		if (rc)
			return rc;
		p->symtab_r = (struct region){.off = ds->sh_offset, .size = ds->sh_size,
					      .present = true};
		p->nsyms = (size_t)(ds->sh_size / SYM_ENT);
		*from_sections = true;
		return 0;
	}
	*from_sections = false;
	if (!p->has_symtab)
		return 0; /* nothing dynamic to read */
	if (p->syment != 0 && p->syment != SYM_ENT)
		return ca_fail(d, CA_ERR_PARSE, "bad DT_SYMENT %llu", (unsigned long long)p->syment);
	if (!p->dyn_strtab.present)
		return ca_fail(d, CA_ERR_PARSE, "DT_SYMTAB without a usable DT_STRTAB/DT_STRSZ");
	uint64_t off, avail;
	if (!vaddr_to_off(p, p->symtab, &off, &avail))
		return ca_fail(d, CA_ERR_PARSE, "DT_SYMTAB points outside the file");
	size_t n = 0;
	if (p->has_gnu_hash)
		rc = gnu_hash_count(p, &n, d);
	else if (p->has_hash)
		rc = sysv_hash_count(p, &n, d);
	else if (p->has_strtab && p->strtab > p->symtab) {
		/* No hash table: assume the usual layout, .dynstr right after .dynsym. */
		uint64_t guess = (p->strtab - p->symtab) / SYM_ENT;
		if (guess > ELF_MAX_SYMBOLS)
			rc = ca_fail(d, CA_ERR_LIMIT, "more than %u dynamic symbols",
				     ELF_MAX_SYMBOLS);
		else
			n = (size_t)guess;
	} else
		rc = ca_fail(d, CA_ERR_PARSE, "cannot tell the number of dynamic symbols");
	if (rc)
		return rc;
	if ((uint64_t)n * SYM_ENT > avail)
		return ca_fail(d, CA_ERR_PARSE, "the dynamic symbol table runs past its segment");
	p->symtab_r = (struct region){.off = off, .size = (uint64_t)n * SYM_ENT, .present = true};
	p->sym_strtab = p->dyn_strtab;
	p->nsyms = n;
	return 0;
}

/* A heap copy of a string table with one extra NUL. */
static char *copy_table(const struct parse *p, struct region r)
{
	char *s = malloc((size_t)r.size + 1);
	if (!s)
		return NULL;
	memcpy(s, p->buf + r.off, (size_t)r.size);
	s[r.size] = '\0';
	return s;
}

/* Name at offset `at` of a table of `size` bytes; NULL unless NUL-terminated inside the table. */
static const char *table_str(const char *table, uint64_t size, uint64_t at)
{
	if (!table || at >= size)
		return NULL;
	if (!memchr(table + at, '\0', (size_t)(size - at)))
		return NULL;
	return table + at;
}

static int collect_symbols(const struct parse *p, struct elf_dynamic *out, struct ca_diag *d)
{
	size_t nu = 0, nd = 0;
	const char *strs = out->sym_strings;
	uint64_t strs_size = p->sym_strtab.size;

	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			out->undefined = calloc(nu ? nu : 1, sizeof *out->undefined);
			out->defined = calloc(nd ? nd : 1, sizeof *out->defined);
			if (!out->undefined || !out->defined)
				return ca_fail(d, CA_ERR_NOMEM, "out of memory listing symbols");
		}
		for (size_t i = 1; i < p->nsyms; i++) {
			Elf64_Sym s;
			memcpy(&s, p->buf + p->symtab_r.off + i * SYM_ENT, sizeof s);
			unsigned bind = ELF64_ST_BIND(s.st_info), type = ELF64_ST_TYPE(s.st_info);
			unsigned vis = ELF64_ST_VISIBILITY(s.st_other);
			bool global = bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE;
			if (s.st_name == 0 || !global)
				continue;
			bool undef = s.st_shndx == SHN_UNDEF;
			if (!undef && ((vis != STV_DEFAULT && vis != STV_PROTECTED) ||
				       type == STT_SECTION || type == STT_FILE))
				continue;
			const char *name = table_str(strs, strs_size, s.st_name);
			if (!name)
				return ca_fail(d, CA_ERR_PARSE,
					       "dynamic symbol %zu has a name outside its string table",
					       i);
			if (!name[0])
				continue;
			if (pass == 0) {
				if (undef)
					nu++;
				else
					nd++;
				continue;
			}
			struct elf_symbol sym = {.name = name, .weak = bind == STB_WEAK,
						 .type = (unsigned char)type};
			if (undef)
				out->undefined[out->num_undefined++] = sym;
			else
				out->defined[out->num_defined++] = sym;
		}
	}
	return 0;
}

static int dyn_str(const struct parse *p, const struct elf_dynamic *out, uint64_t at,
		   const char *what, const char **res, struct ca_diag *d)
{
	const char *s = table_str(out->dyn_strings ? out->dyn_strings : out->sym_strings,
				  p->dyn_strtab.size, at);
	if (!s)
		return ca_fail(d, CA_ERR_PARSE, "%s lies outside the dynamic string table", what);
	*res = s;
	return 0;
}

int elf_dynamic_read(const uint8_t *buf, size_t len, struct elf_dynamic *out, struct ca_diag *d)
{
	struct parse p = {.buf = buf, .len = len};
	const Elf64_Phdr *dyn_ph = NULL;
	const Elf64_Shdr *dyn_sh = NULL;
	int rc;

	memset(out, 0, sizeof *out);
	if (!buf)
		return ca_fail(d, CA_ERR_INVALID, "no ELF data");
	if ((rc = read_ehdr(&p, d)) || (rc = read_shdrs(&p, d)) || (rc = read_phdrs(&p, d)))
		goto out;

	/* The dynamic array: the loader's PT_DYNAMIC, else the SHT_DYNAMIC section. */
	for (size_t i = 0; i < p.phnum && !dyn_ph; i++)
		if (p.ph[i].p_type == PT_DYNAMIC)
			dyn_ph = &p.ph[i];
	dyn_sh = find_section(&p, SHT_DYNAMIC);
	if (dyn_ph)
		rc = read_dynamic(&p, dyn_ph->p_offset, dyn_ph->p_filesz, d);
	else if (dyn_sh)
		rc = read_dynamic(&p, dyn_sh->sh_offset, dyn_sh->sh_size, d);
	if (rc)
		goto out;

	/* The dynamic string table: DT_STRTAB/DT_STRSZ mapped through PT_LOAD, else the string
	 * table the SHT_DYNAMIC section links to. */
	if (p.has_strtab && p.has_strsz) {
		uint64_t off, avail;
		if (vaddr_to_off(&p, p.strtab, &off, &avail) && p.strsz <= avail)
			p.dyn_strtab = (struct region){.off = off, .size = p.strsz, .present = true};
	}
	if (!p.dyn_strtab.present && dyn_sh && (rc = linked_strtab(&p, dyn_sh, ".dynamic",
								  &p.dyn_strtab, d)))
		goto out;
	if (!p.dyn_strtab.present &&
	    (p.num_needed || p.has_soname || p.has_runpath || p.has_rpath)) {
		rc = ca_fail(d, CA_ERR_PARSE, "the dynamic string table (DT_STRTAB) is missing or "
					      "outside the file");
		goto out;
	}

	if ((rc = locate_symbols(&p, &out->from_sections, d)))
		goto out;
	if (p.sym_strtab.present) {
		out->sym_strings = copy_table(&p, p.sym_strtab);
		if (!out->sym_strings) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory copying the string table");
			goto out;
		}
	}
	if (p.dyn_strtab.present && !(p.sym_strtab.present && p.sym_strtab.off == p.dyn_strtab.off &&
				      p.sym_strtab.size == p.dyn_strtab.size)) {
		out->dyn_strings = copy_table(&p, p.dyn_strtab);
		if (!out->dyn_strings) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory copying the string table");
			goto out;
		}
	}
	if (p.symtab_r.present && (rc = collect_symbols(&p, out, d)))
		goto out;

	if (p.num_needed) {
		out->needed = calloc(p.num_needed, sizeof *out->needed);
		if (!out->needed) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing needed libraries");
			goto out;
		}
		for (size_t i = 0; i < p.num_needed; i++) {
			const char *s;
			if ((rc = dyn_str(&p, out, p.needed_off[i], "a DT_NEEDED name", &s, d)))
				goto out;
			out->needed[out->num_needed++] = s;
		}
	}
	if (p.has_soname && (rc = dyn_str(&p, out, p.soname, "DT_SONAME", &out->soname, d)))
		goto out;
	if (p.has_runpath && (rc = dyn_str(&p, out, p.runpath, "DT_RUNPATH", &out->runpath, d)))
		goto out;
	if (!out->runpath && p.has_rpath &&
	    (rc = dyn_str(&p, out, p.rpath, "DT_RPATH", &out->runpath, d)))
		goto out;
out:
	free(p.ph);
	free(p.sh);
	free(p.needed_off);
	if (rc)
		elf_dynamic_free(out);
	return rc;
}

int elf_dynamic_read_file(const char *path, struct elf_dynamic *out, struct ca_diag *d)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	memset(out, 0, sizeof *out);
	rc = ca_read_file(path, (size_t)ELF_MAX_FILE_BYTES, &buf, &len, d);
	if (rc)
		return rc;
	rc = elf_dynamic_read((const uint8_t *)buf, len, out, d);
	if (rc)
		ca_fail_prefix(d, rc, "%s", path);
	free(buf);
	return rc;
}

void elf_dynamic_free(struct elf_dynamic *e)
{
	if (!e)
		return;
	free(e->undefined);
	free(e->defined);
	free(e->needed);
	free(e->sym_strings);
	free(e->dyn_strings);
	memset(e, 0, sizeof *e);
}

static const struct elf_symbol *find_in(const struct elf_symbol *syms, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(syms[i].name, name) == 0)
			return &syms[i];
	return NULL;
}

const struct elf_symbol *elf_dynamic_find_undefined(const struct elf_dynamic *e, const char *name)
{
	return find_in(e->undefined, e->num_undefined, name);
}

const struct elf_symbol *elf_dynamic_find_defined(const struct elf_dynamic *e, const char *name)
{
	return find_in(e->defined, e->num_defined, name);
}
