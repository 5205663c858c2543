/* Unit tests for src/build/elfsyms: real shared libraries built with `cc -shared` at test time
 * (with section headers, without them, with DT_HASH, with no hash table at all), and truncated,
 * corrupt and hostile buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <elf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/elfsyms.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/proc.h"

static char tmpdir[PATH_MAX];

static const char lib_src[] =
	"#include <stdio.h>\n"
	"#include <math.h>\n"
	"extern void weak_hook(void) __attribute__((weak));\n"
	"double exported_fn(double x)\n"
	"{\n"
	"	if (weak_hook)\n"
	"		weak_hook();\n"
	"	puts(\"hello\");\n"
	"	return cos(x);\n"
	"}\n"
	"static int hidden_helper(int x) { return x + 1; }\n"
	"__attribute__((visibility(\"hidden\"))) int hidden_global(int x) { return hidden_helper(x); }\n"
	"int exported_data = 3;\n";

/* Builds lib_src into <tmpdir>/<name> with extra linker flags; returns the file bytes. */
static uint8_t *build_lib(const char *name, const char *extra, size_t *len)
{
	char src[PATH_MAX], out[PATH_MAX];
	struct ca_diag d;
	struct ca_run_result rr;
	char *buf = NULL;

	assert_int_equal(ca_path_join(src, sizeof src, tmpdir, "lib.c"), 0);
	assert_int_equal(ca_write_file_atomic(src, lib_src, strlen(lib_src), &d), 0);
	assert_int_equal(ca_path_join(out, sizeof out, tmpdir, name), 0);
	const char *argv[] = {"cc", "-shared", "-fPIC", "-O1", "-fno-builtin", "-o", out, src,
			      "-Wl,--no-as-needed", "-Wl,-soname,libtest.so.1", "-Wl,-rpath,/opt/ca",
			      extra, "-lm", NULL};
	if (!extra[0]) {
		argv[11] = "-lm";
		argv[12] = NULL;
	}
	assert_int_equal(ca_run(argv, NULL, &rr, &d), 0);
	if (rr.exit_code != 0)
		fail_msg("cc failed: %s", rr.err);
	ca_run_result_free(&rr);
	assert_int_equal(ca_read_file(out, 1u << 24, &buf, len, &d), 0);
	return (uint8_t *)buf;
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-elfsyms-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

static bool has_needed(const struct elf_dynamic *e, const char *prefix)
{
	for (size_t i = 0; i < e->num_needed; i++)
		if (strncmp(e->needed[i], prefix, strlen(prefix)) == 0)
			return true;
	return false;
}

/* What every variant of the test library must show. */
static void check_test_lib(const struct elf_dynamic *e)
{
	const struct elf_symbol *s;

	s = elf_dynamic_find_undefined(e, "puts");
	assert_non_null(s);
	assert_false(s->weak);
	s = elf_dynamic_find_undefined(e, "cos");
	assert_non_null(s);
	assert_false(s->weak);
	s = elf_dynamic_find_undefined(e, "weak_hook");
	assert_non_null(s);
	assert_true(s->weak);
	assert_null(elf_dynamic_find_undefined(e, "exported_fn"));

	s = elf_dynamic_find_defined(e, "exported_fn");
	assert_non_null(s);
	assert_int_equal(s->type, STT_FUNC);
	s = elf_dynamic_find_defined(e, "exported_data");
	assert_non_null(s);
	assert_int_equal(s->type, STT_OBJECT);
	assert_null(elf_dynamic_find_defined(e, "hidden_global"));
	assert_null(elf_dynamic_find_defined(e, "hidden_helper"));
	assert_null(elf_dynamic_find_defined(e, "puts"));

	assert_true(has_needed(e, "libm.so."));
	assert_true(has_needed(e, "libc.so."));
	assert_non_null(e->soname);
	assert_string_equal(e->soname, "libtest.so.1");
	assert_non_null(e->runpath);
	assert_string_equal(e->runpath, "/opt/ca");
}

/* Removes the section headers, as sstrip would. */
static void strip_sections(uint8_t *buf)
{
	Elf64_Ehdr eh;
	memcpy(&eh, buf, sizeof eh);
	eh.e_shoff = 0;
	eh.e_shnum = 0;
	eh.e_shstrndx = 0;
	memcpy(buf, &eh, sizeof eh);
}

/* File offset of the dynamic entry with the given tag, or 0. */
static size_t find_dyn_tag(const uint8_t *buf, size_t len, int64_t tag)
{
	Elf64_Ehdr eh;
	memcpy(&eh, buf, sizeof eh);
	for (size_t i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, buf + eh.e_phoff + i * sizeof ph, sizeof ph);
		if (ph.p_type != PT_DYNAMIC)
			continue;
		for (size_t off = ph.p_offset; off + sizeof(Elf64_Dyn) <= len; off += sizeof(Elf64_Dyn)) {
			Elf64_Dyn dyn;
			memcpy(&dyn, buf + off, sizeof dyn);
			if (dyn.d_tag == DT_NULL)
				return 0;
			if (dyn.d_tag == tag)
				return off;
		}
	}
	return 0;
}

static void assert_same_imports(const struct elf_dynamic *a, const struct elf_dynamic *b)
{
	assert_int_equal(a->num_undefined, b->num_undefined);
	for (size_t i = 0; i < a->num_undefined; i++) {
		assert_string_equal(a->undefined[i].name, b->undefined[i].name);
		assert_int_equal(a->undefined[i].weak, b->undefined[i].weak);
	}
	assert_int_equal(a->num_needed, b->num_needed);
	for (size_t i = 0; i < a->num_needed; i++)
		assert_string_equal(a->needed[i], b->needed[i]);
}

static void test_sections_and_stripped(void **state)
{
	(void)state;
	size_t len;
	uint8_t *buf = build_lib("libgnu.so", "-Wl,--hash-style=gnu", &len);
	struct elf_dynamic full, stripped;
	struct ca_diag d;

	assert_int_equal(elf_dynamic_read(buf, len, &full, &d), 0);
	assert_true(full.from_sections);
	check_test_lib(&full);

	strip_sections(buf);
	assert_int_equal(elf_dynamic_read(buf, len, &stripped, &d), 0);
	assert_false(stripped.from_sections);
	check_test_lib(&stripped);
	assert_same_imports(&full, &stripped);

	/* no hash table at all: the count comes from DT_STRTAB - DT_SYMTAB */
	size_t at = find_dyn_tag(buf, len, DT_GNU_HASH);
	assert_true(at > 0);
	Elf64_Dyn dyn;
	memcpy(&dyn, buf + at, sizeof dyn);
	dyn.d_tag = DT_DEBUG;
	memcpy(buf + at, &dyn, sizeof dyn);
	struct elf_dynamic nohash;
	assert_int_equal(elf_dynamic_read(buf, len, &nohash, &d), 0);
	check_test_lib(&nohash);
	assert_same_imports(&full, &nohash);

	elf_dynamic_free(&full);
	elf_dynamic_free(&stripped);
	elf_dynamic_free(&nohash);
	elf_dynamic_free(&nohash); /* twice is harmless */
	free(buf);
}

static void test_sysv_hash(void **state)
{
	(void)state;
	size_t len;
	uint8_t *buf = build_lib("libsysv.so", "-Wl,--hash-style=sysv", &len);
	struct elf_dynamic full, stripped;
	struct ca_diag d;

	assert_int_equal(elf_dynamic_read(buf, len, &full, &d), 0);
	check_test_lib(&full);
	assert_true(find_dyn_tag(buf, len, DT_HASH) > 0);
	assert_int_equal(find_dyn_tag(buf, len, DT_GNU_HASH), 0);
	strip_sections(buf);
	assert_int_equal(elf_dynamic_read(buf, len, &stripped, &d), 0);
	assert_false(stripped.from_sections);
	check_test_lib(&stripped);
	assert_same_imports(&full, &stripped);
	elf_dynamic_free(&full);
	elf_dynamic_free(&stripped);
	free(buf);
}

static void test_read_file(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct elf_dynamic e;
	struct ca_diag d;
	size_t len;
	uint8_t *buf = build_lib("libfile.so", "", &len);

	free(buf);
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "libfile.so"), 0);
	assert_int_equal(elf_dynamic_read_file(path, &e, &d), 0);
	check_test_lib(&e);
	elf_dynamic_free(&e);

	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "missing.so"), 0);
	assert_int_equal(elf_dynamic_read_file(path, &e, &d), CA_ERR_NOTFOUND);
	assert_int_equal(e.num_undefined, 0);

	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "text.so"), 0);
	assert_int_equal(ca_write_file_atomic(path, "hello world, not an ELF file\n", 29, &d), 0);
	assert_int_equal(elf_dynamic_read_file(path, &e, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "text.so"));
	assert_non_null(strstr(d.msg, "magic"));
}

static void test_bad_headers(void **state)
{
	(void)state;
	size_t len;
	uint8_t *orig = build_lib("libbad.so", "", &len);
	uint8_t *buf = malloc(len);
	struct elf_dynamic e;
	struct ca_diag d;
	Elf64_Ehdr eh;

	assert_non_null(buf);
	assert_int_equal(elf_dynamic_read(NULL, 0, &e, &d), CA_ERR_INVALID);
	assert_int_equal(elf_dynamic_read(orig, 0, &e, &d), CA_ERR_PARSE);
	assert_int_equal(elf_dynamic_read(orig, 40, &e, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "truncated"));

	memcpy(buf, orig, len);
	buf[1] = 'X';
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	memcpy(buf, orig, len);
	buf[EI_CLASS] = ELFCLASS32;
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_UNSUPPORTED);
	assert_non_null(strstr(d.msg, "64-bit"));

	memcpy(buf, orig, len);
	buf[EI_DATA] = ELFDATA2MSB;
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_UNSUPPORTED);

	/* section headers beyond the end of the file */
	memcpy(buf, orig, len);
	memcpy(&eh, buf, sizeof eh);
	eh.e_shoff = (Elf64_Off)len - 8;
	memcpy(buf, &eh, sizeof eh);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	/* an offset that overflows when added to the size */
	memcpy(buf, orig, len);
	memcpy(&eh, buf, sizeof eh);
	eh.e_shoff = UINT64_MAX - 16;
	memcpy(buf, &eh, sizeof eh);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	memcpy(buf, orig, len);
	memcpy(&eh, buf, sizeof eh);
	eh.e_shentsize = 12;
	memcpy(buf, &eh, sizeof eh);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	memcpy(buf, orig, len);
	memcpy(&eh, buf, sizeof eh);
	eh.e_phoff = (Elf64_Off)len;
	memcpy(buf, &eh, sizeof eh);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	/* .dynsym: absurd size, bad entry size, bad string table link, a name past its table */
	memcpy(&eh, orig, sizeof eh);
	size_t dynsym = 0;
	for (size_t i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		memcpy(&sh, orig + eh.e_shoff + i * sizeof sh, sizeof sh);
		if (sh.sh_type == SHT_DYNSYM)
			dynsym = eh.e_shoff + i * sizeof sh;
	}
	assert_true(dynsym > 0);
	Elf64_Shdr sh;

	memcpy(buf, orig, len);
	memcpy(&sh, buf + dynsym, sizeof sh);
	sh.sh_size = UINT64_MAX / 2;
	memcpy(buf + dynsym, &sh, sizeof sh);
	assert_int_not_equal(elf_dynamic_read(buf, len, &e, &d), 0);

	memcpy(buf, orig, len);
	memcpy(&sh, buf + dynsym, sizeof sh);
	sh.sh_entsize = 16;
	memcpy(buf + dynsym, &sh, sizeof sh);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	memcpy(buf, orig, len);
	memcpy(&sh, buf + dynsym, sizeof sh);
	sh.sh_link = 60000;
	memcpy(buf + dynsym, &sh, sizeof sh);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);

	memcpy(buf, orig, len);
	memcpy(&sh, buf + dynsym, sizeof sh);
	Elf64_Sym sym;
	memcpy(&sym, buf + sh.sh_offset + sizeof sym, sizeof sym); /* symbol 1 */
	sym.st_name = 0x7fffffff;
	memcpy(buf + sh.sh_offset + sizeof sym, &sym, sizeof sym);
	assert_int_equal(elf_dynamic_read(buf, len, &e, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "string table"));
	assert_null(e.undefined);

	free(buf);
	free(orig);
}

/* Every prefix of a real library, and many corrupted copies: never a crash (ASan watches), and a
 * success always yields names that lie in the struct's own storage. */
static void test_truncations_and_corruptions(void **state)
{
	(void)state;
	size_t len;
	uint8_t *orig = build_lib("libfuzz.so", "", &len);
	struct elf_dynamic e;
	struct ca_diag d;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	int ok_full = 0;

	for (size_t n = 0; n <= len; n++) {
		uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
		assert_non_null(copy);
		memcpy(copy, orig, n);
		if (elf_dynamic_read(copy, n, &e, &d) == 0) {
			for (size_t i = 0; i < e.num_undefined; i++)
				assert_true(strlen(e.undefined[i].name) > 0);
			if (n == len)
				ok_full = 1;
		}
		elf_dynamic_free(&e);
		free(copy);
	}
	assert_true(ok_full);

	for (int iter = 0; iter < 3000; iter++) {
		uint8_t *copy = malloc(len);
		assert_non_null(copy);
		memcpy(copy, orig, len);
		int flips = 1 + iter % 8;
		for (int k = 0; k < flips; k++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			size_t at = (size_t)(rng >> 33) % (len < 8192 ? len : 8192);
			copy[at] = (uint8_t)(rng >> 17);
		}
		if (elf_dynamic_read(copy, len, &e, &d) == 0) {
			for (size_t i = 0; i < e.num_needed; i++)
				assert_non_null(e.needed[i]);
		}
		elf_dynamic_free(&e);
		free(copy);
	}
	free(orig);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sections_and_stripped),
		cmocka_unit_test(test_sysv_hash),
		cmocka_unit_test(test_read_file),
		cmocka_unit_test(test_bad_headers),
		cmocka_unit_test(test_truncations_and_corruptions),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
