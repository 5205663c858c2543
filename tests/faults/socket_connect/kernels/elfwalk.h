// elfwalk.h: finding functions of the worker process's loaded libraries without importing them.
//
// The symbol allowlist checks what a candidate library imports; it cannot see what the library
// finds in memory. This helper starts from the address of a libc function the allowlist accepts
// (strtol), walks down page by page to libc's ELF header, reads libc's dynamic symbol table and
// looks up any function by name (mprotect, getauxval, dl_iterate_phdr, pthread_create, open,
// ...). dl_iterate_phdr, called through such a pointer, then lists every loaded object (the
// CUDA driver, the vDSO) for the same lookup. Nothing here imports a forbidden symbol, uses inline
// assembly or makes a system call of its own.
//
// One copy for the suites (tests/adversarial/shared/): the candidates that use it link it into
// their kernels/ (the cheats text_patch_timer, worker_frame_rewrite, plan_inputs_match,
// walk_pthread_deferred, sync_patch_side_stream; the faults fork_bomb, sleep_forever,
// socket_connect and write_outside, which take libc's syscall() with it). The build reads a
// candidate's files through such links, so each candidate still builds from its kernels/ alone.
#ifndef ELFWALK_H
#define ELFWALK_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>

// A loaded ELF object's dynamic symbol table.
struct elf_obj {
	uintptr_t bias;            // load bias: a symbol's address is bias + st_value
	const Elf64_Sym *symtab;   // DT_SYMTAB
	const char *strtab;        // DT_STRTAB
	const uint32_t *gnu_hash;  // DT_GNU_HASH, or nullptr
	const uint32_t *sysv_hash; // DT_HASH, or nullptr
};

// The ELF header of the loaded object that maps `addr`: the first page at or below it that
// starts with a 64-bit shared-object header. nullptr when none is found within 256 MiB.
const Elf64_Ehdr *elf_header_below(const void *addr);

// Reads the dynamic section of the object whose program headers are `ph` (n of them) and whose
// load bias is `bias` (as dl_iterate_phdr reports them). False when it has no symbol table.
bool elf_obj_from_phdrs(uintptr_t bias, const Elf64_Phdr *ph, int n, elf_obj *o);

// The same for the object whose ELF header is mapped at `eh`.
bool elf_obj_from_header(const Elf64_Ehdr *eh, elf_obj *o);

// The address of the defined symbol `name` (any version), or nullptr. Indirect functions
// (STT_GNU_IFUNC: their address is a resolver) are not returned.
void *elf_obj_lookup(const elf_obj *o, const char *name);

// libc's symbol table, found from the address of strtol. False when the walk fails.
bool elf_libc(elf_obj *libc);

// The symbol table of the loaded object whose path contains `name_part` ("libcuda.so"), listed
// by libc's dl_iterate_phdr. False when libc has no dl_iterate_phdr or nothing matches.
bool elf_loaded(const elf_obj *libc, const char *name_part, elf_obj *o);

// The vDSO's symbol table, from getauxval(AT_SYSINFO_EHDR) found in libc. False when absent.
bool elf_vdso(const elf_obj *libc, elf_obj *o);

// elf_obj_lookup cast to a function pointer type.
template <typename F> inline F elf_fn(const elf_obj *o, const char *name)
{
	return reinterpret_cast<F>(elf_obj_lookup(o, name));
}

#endif
