/* libFuzzer target: elf_dynamic_read on arbitrary bytes must either fail cleanly with a message
 * or yield non-empty, NUL-terminated names that the lookups find again; the library rules then
 * run over the result. Seeds: small real shared libraries (GNU hash, SysV hash, no section
 * headers) in tests/fuzz/corpus/fuzz_elfsyms/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "build/elfsyms.h"
#include "build/rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct elf_dynamic e;
	struct ca_diag d;
	char report[1024];
	struct rules_report r;

	d.msg[0] = '\0';
	int rc = elf_dynamic_read(data, size, &e, &d);
	if (rc != 0) {
		if (rc > 0 || d.msg[0] == '\0')
			abort();
		if (e.undefined || e.defined || e.needed || e.num_undefined || e.num_needed)
			abort(); /* an error leaves the struct empty */
		return 0;
	}
	for (size_t i = 0; i < e.num_undefined; i++) {
		const struct elf_symbol *s = &e.undefined[i];
		if (!s->name || !s->name[0])
			abort();
		if (!elf_dynamic_find_undefined(&e, s->name))
			abort();
	}
	for (size_t i = 0; i < e.num_defined; i++) {
		const struct elf_symbol *s = &e.defined[i];
		if (!s->name || !s->name[0] || !elf_dynamic_find_defined(&e, s->name))
			abort();
	}
	for (size_t i = 0; i < e.num_needed; i++)
		if (!e.needed[i] || strlen(e.needed[i]) > size)
			abort();
	if (e.soname && strlen(e.soname) > size)
		abort();
	if (e.runpath && strlen(e.runpath) > size)
		abort();

	rules_report_init(&r, report, sizeof report);
	int n = rules_check_elf(&e, &r);
	rules_report_finish(&r);
	if (n < 0 || strlen(report) >= sizeof report || (n > 0 && report[0] == '\0'))
		abort();
	elf_dynamic_free(&e);
	return 0;
}
