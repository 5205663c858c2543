// elfwalk.cpp: see elfwalk.h.
#include "elfwalk.h"

#include <stdlib.h>
#include <string.h>

namespace {

constexpr uintptr_t PAGE = 4096;
constexpr int MAX_PAGES = 1 << 16; // 256 MiB below the starting address

// The leading fields of glibc's struct dl_phdr_info (declared here: <link.h> pulls in <dlfcn.h>).
struct phdr_info {
	Elf64_Addr addr;
	const char *name;
	const Elf64_Phdr *phdr;
	Elf64_Half phnum;
};
typedef int (*phdr_callback)(phdr_info *, size_t, void *);
typedef int (*iterate_phdr_fn)(phdr_callback, void *);
typedef unsigned long (*getauxval_fn)(unsigned long);

uint32_t gnu_hash_of(const char *s)
{
	uint32_t h = 5381;
	for (; *s; ++s)
		h = h * 33 + (unsigned char)*s;
	return h;
}

uint32_t sysv_hash_of(const char *s)
{
	uint32_t h = 0;
	for (; *s; ++s) {
		h = (h << 4) + (unsigned char)*s;
		const uint32_t g = h & 0xf0000000u;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

void *symbol_if(const elf_obj *o, uint32_t index, const char *name)
{
	const Elf64_Sym *s = &o->symtab[index];
	if (s->st_shndx == SHN_UNDEF || s->st_value == 0 || strcmp(o->strtab + s->st_name, name) != 0)
		return nullptr;
	const int type = ELF64_ST_TYPE(s->st_info);
	if (type != STT_FUNC && type != STT_OBJECT && type != STT_NOTYPE)
		return nullptr; // STT_GNU_IFUNC among others: the address is not the function
	return reinterpret_cast<void *>(o->bias + s->st_value);
}

// dl_iterate_phdr's callback: the first object whose path contains the wanted part.
struct find_state {
	const char *part;
	elf_obj *out;
	bool found;
};

int find_object(phdr_info *info, size_t, void *arg)
{
	find_state *st = static_cast<find_state *>(arg);
	if (!info->name || !strstr(info->name, st->part))
		return 0;
	st->found = elf_obj_from_phdrs(info->addr, info->phdr, info->phnum, st->out);
	return st->found ? 1 : 0;
}

} // namespace

const Elf64_Ehdr *elf_header_below(const void *addr)
{
	uintptr_t page = reinterpret_cast<uintptr_t>(addr) & ~(PAGE - 1);
	for (int i = 0; i < MAX_PAGES && page >= PAGE; ++i, page -= PAGE) {
		const Elf64_Ehdr *eh = reinterpret_cast<const Elf64_Ehdr *>(page);
		if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
		    (eh->e_type == ET_DYN || eh->e_type == ET_EXEC) && eh->e_phoff == sizeof(Elf64_Ehdr) &&
		    eh->e_phentsize == sizeof(Elf64_Phdr) && eh->e_phnum > 0 && eh->e_phnum < 64)
			return eh;
	}
	return nullptr;
}

bool elf_obj_from_phdrs(uintptr_t bias, const Elf64_Phdr *ph, int n, elf_obj *o)
{
	const Elf64_Phdr *dyn_ph = nullptr;
	for (int i = 0; i < n; ++i)
		if (ph[i].p_type == PT_DYNAMIC)
			dyn_ph = &ph[i];
	if (!dyn_ph)
		return false;
	// ld.so relocates the d_ptr entries of the objects it loads in place; the kernel's vDSO keeps
	// link-time values. Both are handled: a value below the bias is an offset.
	auto addr = [bias](uintptr_t v) { return v < bias ? bias + v : v; };
	memset(o, 0, sizeof *o);
	o->bias = bias;
	for (const Elf64_Dyn *d = reinterpret_cast<const Elf64_Dyn *>(bias + dyn_ph->p_vaddr); d->d_tag != DT_NULL;
	     ++d) {
		switch (d->d_tag) {
		case DT_SYMTAB: o->symtab = reinterpret_cast<const Elf64_Sym *>(addr(d->d_un.d_ptr)); break;
		case DT_STRTAB: o->strtab = reinterpret_cast<const char *>(addr(d->d_un.d_ptr)); break;
		case DT_GNU_HASH: o->gnu_hash = reinterpret_cast<const uint32_t *>(addr(d->d_un.d_ptr)); break;
		case DT_HASH: o->sysv_hash = reinterpret_cast<const uint32_t *>(addr(d->d_un.d_ptr)); break;
		default: break;
		}
	}
	return o->symtab && o->strtab && (o->gnu_hash || o->sysv_hash);
}

bool elf_obj_from_header(const Elf64_Ehdr *eh, elf_obj *o)
{
	const uintptr_t base = reinterpret_cast<uintptr_t>(eh);
	const Elf64_Phdr *ph = reinterpret_cast<const Elf64_Phdr *>(base + eh->e_phoff);
	uintptr_t first = UINTPTR_MAX;
	for (int i = 0; i < eh->e_phnum; ++i)
		if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < first)
			first = ph[i].p_vaddr;
	if (first == UINTPTR_MAX)
		return false;
	return elf_obj_from_phdrs(base - (first & ~(PAGE - 1)), ph, eh->e_phnum, o);
}

void *elf_obj_lookup(const elf_obj *o, const char *name)
{
	if (o->gnu_hash) {
		const uint32_t nbuckets = o->gnu_hash[0], symoffset = o->gnu_hash[1], bloom_size = o->gnu_hash[2];
		if (nbuckets == 0)
			return nullptr;
		const uint64_t *bloom = reinterpret_cast<const uint64_t *>(&o->gnu_hash[4]);
		const uint32_t *buckets = reinterpret_cast<const uint32_t *>(&bloom[bloom_size]);
		const uint32_t *chain = &buckets[nbuckets];
		const uint32_t h = gnu_hash_of(name);
		for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; ++i) {
			const uint32_t ch = chain[i - symoffset];
			if ((ch | 1) == (h | 1)) {
				if (void *p = symbol_if(o, i, name))
					return p;
			}
			if (ch & 1)
				break;
		}
		return nullptr;
	}
	const uint32_t nbucket = o->sysv_hash[0];
	if (nbucket == 0)
		return nullptr;
	const uint32_t *bucket = &o->sysv_hash[2], *chain = &bucket[nbucket];
	for (uint32_t i = bucket[sysv_hash_of(name) % nbucket]; i != STN_UNDEF; i = chain[i])
		if (void *p = symbol_if(o, i, name))
			return p;
	return nullptr;
}

bool elf_libc(elf_obj *libc)
{
	// strtol is on the allowlist; its address (from this library's GOT) lies in libc's text.
	long (*anchor)(const char *, char **, int) = &strtol;
	const Elf64_Ehdr *eh = elf_header_below(reinterpret_cast<const void *>(anchor));
	return eh && elf_obj_from_header(eh, libc) && elf_obj_lookup(libc, "strtol");
}

bool elf_loaded(const elf_obj *libc, const char *name_part, elf_obj *o)
{
	iterate_phdr_fn iterate = elf_fn<iterate_phdr_fn>(libc, "dl_iterate_phdr");
	if (!iterate)
		return false;
	find_state st = {name_part, o, false};
	iterate(find_object, &st);
	return st.found;
}

bool elf_vdso(const elf_obj *libc, elf_obj *o)
{
	getauxval_fn aux = elf_fn<getauxval_fn>(libc, "getauxval");
	const unsigned long at = aux ? aux(AT_SYSINFO_EHDR) : 0;
	return at && elf_obj_from_header(reinterpret_cast<const Elf64_Ehdr *>(at), o);
}
