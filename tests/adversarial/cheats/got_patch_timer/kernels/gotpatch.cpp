// CHEAT (timer tampering by rewriting the worker's GOT): the candidate runs inside the worker
// process, so it can write the worker's memory. The worker is linked with lazy binding (no
// -z now), so its .got.plt stays writable after start-up; this file finds the worker's ELF image
// from a return address (walking down page by page to the ELF header), reads its dynamic
// section, and rewrites the jump slots of clock_gettime and cudaEventElapsedTime to point at
// functions here: the host clock loses most of the time spent inside ca_forward, and CUDA event
// times are scaled by GOTPATCH_KEEP. Nothing but memcmp/strcmp is imported and no system call
// is made, so the build checks pass and no seccomp filter can see it. Stopped by full RELRO in
// the worker (the write then faults: fault.crash) together with timing that the candidate
// cannot reach.
#include "gotpatch.h"

#include <cuda_runtime_api.h>
#include <elf.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

namespace {

typedef int (*clock_fn)(clockid_t, struct timespec *);
typedef cudaError_t (*elapsed_fn)(float *, cudaEvent_t, cudaEvent_t);

clock_fn real_clock;
elapsed_fn real_elapsed;
long long hidden_ns;
void **clock_slot, **elapsed_slot;
uintptr_t image_lo, image_hi; // the executable's mapped range (its PLT stubs live there)

int fake_clock(clockid_t id, struct timespec *ts)
{
	const int rc = real_clock(id, ts);
	if (rc == 0 && ts && hidden_ns > 0) {
		long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec - hidden_ns;
		if (ns < 0)
			ns = 0;
		ts->tv_sec = (time_t)(ns / 1000000000LL);
		ts->tv_nsec = (long)(ns % 1000000000LL);
	}
	return rc;
}

cudaError_t fake_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	// Calling a still-unresolved PLT stub resolves the symbol and rewrites the slot with the real
	// function; the next gotpatch_install puts this one back.
	const cudaError_t err = real_elapsed(ms, start, end);
	if (err == cudaSuccess && ms)
		*ms *= (float)GOTPATCH_KEEP;
	return err;
}

// The executable's ELF header: the first page at or below `addr` that starts with one.
const Elf64_Ehdr *find_image(uintptr_t addr)
{
	uintptr_t page = addr & ~(uintptr_t)4095;
	for (int i = 0; i < (1 << 16) && page > 0; ++i, page -= 4096) {
		const Elf64_Ehdr *eh = reinterpret_cast<const Elf64_Ehdr *>(page);
		if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
		    (eh->e_type == ET_DYN || eh->e_type == ET_EXEC) && eh->e_phentsize == sizeof(Elf64_Phdr) &&
		    eh->e_phoff > 0 && eh->e_phoff < 4096)
			return eh;
	}
	return nullptr;
}

} // namespace

int gotpatch_install(const void *caller)
{
	const Elf64_Ehdr *eh = find_image(reinterpret_cast<uintptr_t>(caller));
	if (!eh)
		return 0;
	const uintptr_t base = reinterpret_cast<uintptr_t>(eh);
	const Elf64_Phdr *ph = reinterpret_cast<const Elf64_Phdr *>(base + eh->e_phoff);
	uintptr_t first_load = UINTPTR_MAX, hi = 0;
	const Elf64_Phdr *dyn_ph = nullptr;
	for (int i = 0; i < eh->e_phnum; ++i) {
		if (ph[i].p_type == PT_LOAD) {
			if (ph[i].p_vaddr < first_load)
				first_load = ph[i].p_vaddr;
			if (ph[i].p_vaddr + ph[i].p_memsz > hi)
				hi = ph[i].p_vaddr + ph[i].p_memsz;
		} else if (ph[i].p_type == PT_DYNAMIC) {
			dyn_ph = &ph[i];
		}
	}
	if (!dyn_ph || first_load == UINTPTR_MAX)
		return 0;
	const uintptr_t bias = base - (first_load & ~(uintptr_t)4095);
	image_lo = base;
	image_hi = bias + hi;
	// ld.so may or may not have relocated the d_ptr values in place.
	auto addr = [bias](uintptr_t v) { return v < bias ? bias + v : v; };
	uintptr_t jmprel = 0, symtab = 0, strtab = 0;
	size_t pltrelsz = 0;
	long pltrel = 0;
	for (const Elf64_Dyn *d = reinterpret_cast<const Elf64_Dyn *>(bias + dyn_ph->p_vaddr); d->d_tag != DT_NULL; ++d) {
		switch (d->d_tag) {
		case DT_JMPREL: jmprel = addr(d->d_un.d_ptr); break;
		case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
		case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
		case DT_SYMTAB: symtab = addr(d->d_un.d_ptr); break;
		case DT_STRTAB: strtab = addr(d->d_un.d_ptr); break;
		default: break;
		}
	}
	if (!jmprel || !symtab || !strtab || pltrel != DT_RELA)
		return 0;
	const Elf64_Rela *rel = reinterpret_cast<const Elf64_Rela *>(jmprel);
	const Elf64_Sym *syms = reinterpret_cast<const Elf64_Sym *>(symtab);
	const char *strs = reinterpret_cast<const char *>(strtab);
	int patched = 0;
	for (size_t i = 0; i < pltrelsz / sizeof(Elf64_Rela); ++i) {
		if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT)
			continue;
		const char *name = strs + syms[ELF64_R_SYM(rel[i].r_info)].st_name;
		void **slot = reinterpret_cast<void **>(bias + rel[i].r_offset);
		if (strcmp(name, "clock_gettime") == 0) {
			if (*slot != reinterpret_cast<void *>(fake_clock)) {
				// Resolved already (the worker read its clock before the first call): keep the real one.
				const uintptr_t cur = reinterpret_cast<uintptr_t>(*slot);
				if (cur >= image_lo && cur < image_hi)
					continue; // still the PLT stub: patch on a later call
				real_clock = reinterpret_cast<clock_fn>(*slot);
				*slot = reinterpret_cast<void *>(fake_clock);
			}
			clock_slot = slot;
			patched++;
		} else if (strcmp(name, "cudaEventElapsedTime") == 0) {
			if (*slot != reinterpret_cast<void *>(fake_elapsed)) {
				real_elapsed = reinterpret_cast<elapsed_fn>(*slot);
				*slot = reinterpret_cast<void *>(fake_elapsed);
			}
			elapsed_slot = slot;
			patched++;
		}
	}
	return patched;
}

void gotpatch_uninstall(void)
{
	if (clock_slot && real_clock && *clock_slot == reinterpret_cast<void *>(fake_clock))
		*clock_slot = reinterpret_cast<void *>(real_clock);
	if (elapsed_slot && real_elapsed && *elapsed_slot == reinterpret_cast<void *>(fake_elapsed))
		*elapsed_slot = reinterpret_cast<void *>(real_elapsed);
}

double gotpatch_real_now(void)
{
	struct timespec ts;
	if (!real_clock || real_clock(CLOCK_MONOTONIC, &ts) != 0)
		return 0.0;
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gotpatch_hide(double seconds)
{
	if (seconds > 0)
		hidden_ns += (long long)(seconds * 1e9);
}
