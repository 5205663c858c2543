// hotpatch.cpp: see hotpatch.h.
#include "hotpatch.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

namespace {

constexpr uintptr_t PAGE = 4096;

// Writes `len` bytes at `at` with the pages made writable (and executable again afterwards).
bool write_code(unsigned char *at, const unsigned char *bytes, size_t len, mprotect_fn mprotect)
{
	uintptr_t lo = reinterpret_cast<uintptr_t>(at) & ~(PAGE - 1);
	uintptr_t hi = (reinterpret_cast<uintptr_t>(at) + len + PAGE - 1) & ~(PAGE - 1);
	void *page = reinterpret_cast<void *>(lo);
	const size_t span = hi - lo;
	bool exec_kept = mprotect(page, span, PROT_READ | PROT_WRITE | PROT_EXEC) == 0;
	if (!exec_kept && mprotect(page, span, PROT_READ | PROT_WRITE) != 0)
		return false;
	if (len == 5 && (reinterpret_cast<uintptr_t>(at) & 7) == 0) {
		// One aligned 8-byte store: a thread entering the function sees the old or the new
		// first instruction, never half of one.
		uint64_t word;
		memcpy(&word, at, 8);
		memcpy(&word, bytes, 5);
		__atomic_store_n(reinterpret_cast<uint64_t *>(at), word, __ATOMIC_SEQ_CST);
	} else {
		memcpy(at, bytes, len);
	}
	// Back to r-x. Under a policy that refuses to make a written page executable again this
	// fails, and the next call into the page faults.
	mprotect(page, span, PROT_READ | PROT_EXEC);
	return true;
}

} // namespace

bool hotpatch_install(hotpatch *p, void *target, void *replacement, mprotect_fn mprotect)
{
	if (p->active || !target || !replacement || !mprotect)
		return p->active;
	unsigned char *at = static_cast<unsigned char *>(target);
	unsigned char jump[14];
	const intptr_t rel = reinterpret_cast<intptr_t>(replacement) - (reinterpret_cast<intptr_t>(at) + 5);
	if (rel >= INT32_MIN && rel <= INT32_MAX) {
		const int32_t rel32 = static_cast<int32_t>(rel);
		jump[0] = 0xE9; // jmp rel32
		memcpy(jump + 1, &rel32, 4);
		p->len = 5;
	} else {
		const uint64_t abs64 = reinterpret_cast<uint64_t>(replacement);
		jump[0] = 0xFF; // jmp qword [rip + 0]
		jump[1] = 0x25;
		memset(jump + 2, 0, 4);
		memcpy(jump + 6, &abs64, 8);
		p->len = 14;
	}
	memcpy(p->saved, at, p->len);
	p->at = at;
	p->active = write_code(at, jump, p->len, mprotect);
	return p->active;
}

void hotpatch_remove(hotpatch *p, mprotect_fn mprotect)
{
	if (!p->active)
		return;
	write_code(p->at, p->saved, p->len, mprotect);
	p->active = false;
}
