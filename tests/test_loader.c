/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx/loader.c against deliberately broken backends: each ends in its
 * state with a reason, and none stops the others from loading. The ELF
 * checks (libapexx/elf_check.c) against modules corrupted here, at test
 * time, from the built alpha fixture: another machine's module, and every
 * word of its dynamic section replaced in turn (issue 30 item 10). */
#define _GNU_SOURCE
#include "coretest.h"

#include <apexx/backend.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdint.h>

static apx_context *open_fixtures(void) {
  const char *path = write_ini_modules(
      "[apexx]\nbackend_dir = %s\norder = alpha\n"
      "[backend alpha]\nlibrary = fixture-alpha.so\n"
      "[backend nosym]\nlibrary = fixture-nosym.so\n"
      "[backend abi]\nlibrary = fixture-abi.so\n"
      "[backend small]\nlibrary = fixture-small.so\n"
      "[backend name]\nlibrary = fixture-name.so\n"
      "[backend probe]\nlibrary = fixture-probe.so\n"
      "[backend init]\nlibrary = fixture-init.so\n"
      "[backend missing]\nlibrary = fixture-missing.so\n"
      "[backend garbage]\nlibrary = GARBAGE\n"
      "[backend off]\nlibrary = fixture-alpha.so\nenabled = no\n");
  /* the garbage library is addressed by absolute path */
  static char text[8192];
  FILE *f = fopen(path, "r");
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  char garbage[600];
  snprintf(garbage, sizeof garbage, "%s/not-a-library.so", getenv("APEXX_TEST_FIXTURES"));
  char *at = strstr(text, "GARBAGE");
  char rewritten[8192];
  snprintf(rewritten, sizeof rewritten, "%.*s%s%s", (int)(at - text), text, garbage, at + 7);
  unlink(path);
  unsetenv("APEXX_BACKEND_DIR"); /* backend_dir of the file must count */
  return open_ok(write_ini(rewritten));
}

static void expect_state(apx_context *ctx, const char *name, apx_backend_state state,
                         const char *reason_part) {
  const struct apx_backend_info *b = backend_named(ctx, name);
  ck_assert_msg(b->state == state, "%s: state %s, expected %s (%s)", name,
                apx_backend_state_name(b->state), apx_backend_state_name(state), b->reason);
  if (reason_part)
    ck_assert_contains(b->reason, reason_part);
  else
    ck_assert_str_eq(b->reason, "");
}

START_TEST(each_defect_has_its_state_and_reason) {
  apx_context *ctx = open_fixtures();
  expect_state(ctx, "alpha", APX_BACKEND_OK, NULL);
  expect_state(ctx, "nosym", APX_BACKEND_SYMBOL_MISSING, "does not export apx_backend_entry");
  expect_state(ctx, "abi", APX_BACKEND_ABI_MISMATCH, "ABI version [99], core expects [2]");
  expect_state(ctx, "small", APX_BACKEND_ABI_MISMATCH, "table size [8] is below the minimum");
  expect_state(ctx, "name", APX_BACKEND_NAME_MISMATCH,
               "library calls itself [impostor], configured as [name]");
  expect_state(ctx, "probe", APX_BACKEND_UNAVAILABLE, "fixture probe says no: widget missing");
  expect_state(ctx, "init", APX_BACKEND_INIT_FAILED, "fixture init failed: no widgets");
  expect_state(ctx, "missing", APX_BACKEND_NOT_FOUND, "fixture-missing.so not found");
  expect_state(ctx, "garbage", APX_BACKEND_LOAD_FAILED, "not a loadable shared object");
  expect_state(ctx, "off", APX_BACKEND_DISABLED, "enabled = no");
  apx_close(ctx);
}
END_TEST

START_TEST(info_reports_library_version_and_device) {
  apx_context *ctx = open_fixtures();
  const struct apx_backend_info *alpha = backend_named(ctx, "alpha");
  ck_assert_contains(alpha->library, "fixture-alpha.so");
  ck_assert_str_eq(alpha->version, "9.9.9-fixture");
  ck_assert_int_eq(alpha->device, APX_DEVICE_HOST);
  ck_assert_str_eq(alpha->device_name, "fixture device");
  struct apx_backend_info info;
  ck_assert_int_eq(apx_backend_info(ctx, apx_backend_count(ctx), &info), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "outside");
  apx_close(ctx);
}
END_TEST

/* The marker that the backend running a tilepack on ctx fills its output
 * with (the fixtures' tilepack). */
static float tilepack_marker(apx_context *ctx) {
  float features[1 * 1 * 8 * 8] = {0}, out[1 * 1 * 1 * 8 * 8];
  int32_t idx[1] = {0};
  apx_tensor f = apx_tensor_host(features, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tensor i = apx_tensor_host(idx, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  apx_tensor o = apx_tensor_host(out, APX_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 8, 8});
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &f;
  a.idx = &i;
  a.tile = 8;
  a.out = &o;
  ck_assert_int_eq(apx_tilepack(ctx, &a, NULL), APX_OK);
  ck_assert(out[63] == out[0]);
  return out[0];
}

/* A tilepack on ctx runs on alpha: its marker fills the output. */
static void tilepack_runs_on_alpha(apx_context *ctx) { ck_assert(tilepack_marker(ctx) == 111.0f); }

START_TEST(a_working_backend_runs_beside_broken_ones) {
  apx_context *ctx = open_fixtures();
  tilepack_runs_on_alpha(ctx);
  apx_close(ctx);
}
END_TEST

START_TEST(library_writable_by_others_is_refused) {
  char dir[] = "/tmp/apexx-mod-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char src[600], dst[700], cmd[2200];
  snprintf(src, sizeof src, "%s/fixture-alpha.so", getenv("APEXX_TEST_MODULES"));
  snprintf(dst, sizeof dst, "%s/fixture-alpha.so", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 0777 '%s'", src, dst, dst);
  ck_assert_int_eq(system(cmd), 0);
  char text[2048];
  snprintf(text, sizeof text, "[backend alpha]\nlibrary = %s\n", dst);
  apx_context *ctx = open_ok(write_ini(text));
  expect_state(ctx, "alpha", APX_BACKEND_LOAD_FAILED, "world-writable");
  apx_close(ctx);
  unlink(dst);
  rmdir(dir);
}
END_TEST

/* ---- modules corrupted at test time ---- */

#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Phdr phdr_t;
typedef Elf64_Shdr shdr_t;
typedef Elf64_Dyn dyn_t;
typedef Elf64_Sym sym_t;
#define ST_TYPE(i) ELF64_ST_TYPE(i)
#define ST_BIND(i) ELF64_ST_BIND(i)
#else
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Phdr phdr_t;
typedef Elf32_Shdr shdr_t;
typedef Elf32_Dyn dyn_t;
typedef Elf32_Sym sym_t;
#define ST_TYPE(i) ELF32_ST_TYPE(i)
#define ST_BIND(i) ELF32_ST_BIND(i)
#endif

typedef struct module_image {
  unsigned char *bytes;
  size_t size;
} module_image;

/* The built alpha fixture, read whole. */
static module_image alpha_image(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/fixture-alpha.so", getenv("APEXX_TEST_MODULES"));
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
  module_image m = {NULL, 0};
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  m.size = (size_t)ftell(f);
  rewind(f);
  m.bytes = malloc(m.size);
  ck_assert_ptr_nonnull(m.bytes);
  ck_assert_uint_eq(fread(m.bytes, 1, m.size, f), m.size);
  fclose(f);
  return m;
}

static const phdr_t *segment(const module_image *m, uint32_t type) {
  const ehdr_t *eh = (const ehdr_t *)m->bytes;
  for (unsigned i = 0; i < eh->e_phnum; i++) {
    const phdr_t *p = (const phdr_t *)(m->bytes + eh->e_phoff) + i;
    if (p->p_type == type) return p;
  }
  return NULL;
}

/* File offset of address vaddr (inside a PT_LOAD's file bytes). */
static size_t file_offset(const module_image *m, uint64_t vaddr) {
  const ehdr_t *eh = (const ehdr_t *)m->bytes;
  for (unsigned i = 0; i < eh->e_phnum; i++) {
    const phdr_t *p = (const phdr_t *)(m->bytes + eh->e_phoff) + i;
    if (p->p_type == PT_LOAD && vaddr >= p->p_vaddr && vaddr < p->p_vaddr + p->p_filesz)
      return (size_t)(p->p_offset + (vaddr - p->p_vaddr));
  }
  ck_abort_msg("address %#llx is in no PT_LOAD", (unsigned long long)vaddr);
  return 0;
}

/* The dynamic section's entries up to and with its DT_NULL. */
static dyn_t *dynamic_entries(const module_image *m, size_t *count) {
  const phdr_t *d = segment(m, PT_DYNAMIC);
  ck_assert_ptr_nonnull(d);
  dyn_t *dyn = (dyn_t *)(m->bytes + d->p_offset);
  size_t n = 0;
  while (dyn[n].d_tag != DT_NULL) n++;
  *count = n + 1;
  return dyn;
}

static uint64_t dynamic_value(const module_image *m, int64_t tag) {
  size_t n;
  dyn_t *dyn = dynamic_entries(m, &n);
  for (size_t i = 0; i < n; i++)
    if (dyn[i].d_tag == tag) return dyn[i].d_un.d_val;
  ck_abort_msg("the fixture has no dynamic tag %lld", (long long)tag);
  return 0;
}

/* The section of the given name, or NULL. */
static const shdr_t *section_named(const module_image *m, const char *name) {
  const ehdr_t *eh = (const ehdr_t *)m->bytes;
  if (!eh->e_shoff || eh->e_shstrndx >= eh->e_shnum) return NULL;
  const shdr_t *sh = (const shdr_t *)(m->bytes + eh->e_shoff);
  const char *names = (const char *)m->bytes + sh[eh->e_shstrndx].sh_offset;
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if (strcmp(names + sh[i].sh_name, name) == 0) return &sh[i];
  return NULL;
}

static char module_dir[256];

static void module_dir_setup(void) {
  snprintf(module_dir, sizeof module_dir, "/tmp/apexx-loader-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(module_dir));
}

static void module_dir_teardown(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", module_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* Write bytes as a fresh module file (its own inode) in module_dir. */
static const char *write_module(const unsigned char *bytes, size_t size) {
  static char path[400];
  static unsigned serial;
  snprintf(path, sizeof path, "%s/module-%u.so", module_dir, serial++);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(bytes, 1, size, f), size);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(chmod(path, 0755), 0);
  return path;
}

/* apx_open with alpha (the fixture, intact) and a second backend "corrupt"
 * whose library is `module`: the open must succeed, alpha must load and
 * run, and a corrupt module that fails to load must say so naming its own
 * path. *info gets corrupt's state (reason copied to reason). */
static void open_beside_alpha(const char *module, apx_backend_state *state, char *reason,
                              size_t reason_size) {
  char text[2048];
  snprintf(text, sizeof text,
           "[apexx]\nbackend_dir = %s\norder = alpha\n[backend alpha]\nlibrary = "
           "fixture-alpha.so\n[backend corrupt]\nlibrary = %s\n",
           getenv("APEXX_TEST_MODULES"), module);
  unsetenv("APEXX_BACKEND_DIR");
  apx_context *ctx = open_ok(write_ini(text));
  const struct apx_backend_info *alpha = backend_named(ctx, "alpha");
  ck_assert_msg(alpha->state == APX_BACKEND_OK, "alpha: %s", alpha->reason);
  const struct apx_backend_info *corrupt = backend_named(ctx, "corrupt");
  *state = corrupt->state;
  snprintf(reason, reason_size, "%s", corrupt->reason);
  if (corrupt->state == APX_BACKEND_LOAD_FAILED) {
    ck_assert_contains(corrupt->reason, module);
    ck_assert_msg(strstr(corrupt->reason, "/proc/self/fd") == NULL,
                  "the reason names the descriptor, not the module: %s", corrupt->reason);
  }
  apx_close(ctx);
}

START_TEST(module_for_another_machine_is_refused_naming_its_path) {
  module_image m = alpha_image();
  ehdr_t *eh = (ehdr_t *)m.bytes;
  uint16_t machine = eh->e_machine;
  eh->e_machine = machine == EM_AARCH64 ? EM_X86_64 : EM_AARCH64;
  const char *path = write_module(m.bytes, m.size);
  apx_backend_state state;
  char reason[600];
  open_beside_alpha(path, &state, reason, sizeof reason);
  ck_assert_int_eq(state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(reason, "ELF machine [");
  ck_assert_contains(reason, "is not this machine's");
  /* and a byte order or class that is not this machine's */
  eh->e_machine = machine;
  eh->e_ident[EI_DATA] = eh->e_ident[EI_DATA] == ELFDATA2LSB ? ELFDATA2MSB : ELFDATA2LSB;
  open_beside_alpha(write_module(m.bytes, m.size), &state, reason, sizeof reason);
  ck_assert_int_eq(state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(reason, "byte order");
  free(m.bytes);
}
END_TEST

/* A failure only dlopen finds (an undefined symbol) names the module by
 * its path, not by the /proc/self/fd name it was opened through. */
START_TEST(dlopen_failure_names_the_module_path) {
  module_image m = alpha_image();
  size_t strtab = file_offset(&m, dynamic_value(&m, DT_STRTAB));
  size_t symtab = file_offset(&m, dynamic_value(&m, DT_SYMTAB));
  uint64_t strsz = dynamic_value(&m, DT_STRSZ);
  /* rename the first imported function (undefined, global): "calloc" ->
   * "callo~": the hash tables hold defined symbols only */
  char *renamed = NULL;
  for (size_t i = 1; !renamed; i++) {
    sym_t *s = (sym_t *)(m.bytes + symtab) + i;
    ck_assert_msg((const unsigned char *)(s + 1) <= m.bytes + strtab,
                  "the fixture imports no global function");
    char *name = (char *)m.bytes + strtab + s->st_name;
    if (s->st_shndx == SHN_UNDEF && ST_TYPE(s->st_info) == STT_FUNC &&
        ST_BIND(s->st_info) == STB_GLOBAL && s->st_name < strsz && name[0] != '_')
      renamed = name;
  }
  renamed[strlen(renamed) - 1] = '~';
  const char *path = write_module(m.bytes, m.size);
  apx_backend_state state;
  char reason[600];
  open_beside_alpha(path, &state, reason, sizeof reason);
  ck_assert_int_eq(state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(reason, "dlopen failed");
  ck_assert_contains(reason, "undefined symbol");
  free(m.bytes);
}
END_TEST

/* Named corruptions of one dynamic word and the reason each gets. */
START_TEST(corrupt_dynamic_words_are_named) {
  static const struct {
    int64_t tag;
    int tag_word;    /* 1: replace the tag, 0: the value */
    uint64_t value;  /* ~0 - k: the original value + k */
    const char *expect;
  } cases[] = {
      {DT_STRTAB, 0, 0x7fffffff0000ull, "DT_STRTAB [0x7fffffff0000] lies outside every PT_LOAD"},
      {DT_SYMTAB, 0, ~0ull - 24, "symbol ["},
      {DT_GNU_HASH, 0, ~0ull - 4, "GNU hash table"},
      {DT_PLTREL, 0, DT_REL, "DT_PLTREL [17] is not DT_RELA [7]"},
      {DT_RELAENT, 1, DT_NULL, "DT_RELA is present without DT_RELAENT"},
      {DT_VERSYM, 1, 0x7ffffffe, "DT_VERSYM is missing"},
      {DT_NEEDED, 0, 1u << 30, "DT_NEEDED [1073741824] lies outside the string table"},
      {DT_INIT, 0, ~0ull - 1, "DT_INIT ["},
      {DT_STRSZ, 0, ~0ull - 1, "DT_STRSZ ["},
  };
  module_image m = alpha_image();
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t n;
    dyn_t *dyn = dynamic_entries(&m, &n);
    size_t i = 0;
    while (i < n && dyn[i].d_tag != cases[c].tag) i++;
    if (i == n && cases[c].tag == DT_PLTREL) continue; /* a machine with no PLT relocations */
    ck_assert_msg(i < n, "the fixture has no dynamic tag %lld", (long long)cases[c].tag);
    dyn_t saved = dyn[i];
    if (cases[c].tag_word)
      dyn[i].d_tag = (int64_t)cases[c].value;
    else
      dyn[i].d_un.d_val = cases[c].value > ~0ull - 64 ? saved.d_un.d_val + (~0ull - cases[c].value)
                                                       : cases[c].value;
    apx_backend_state state;
    char reason[600];
    open_beside_alpha(write_module(m.bytes, m.size), &state, reason, sizeof reason);
    ck_assert_msg(state == APX_BACKEND_LOAD_FAILED, "case %zu: %s", c,
                  apx_backend_state_name(state));
    ck_assert_contains(reason, "not a loadable shared object");
    ck_assert_contains(reason, cases[c].expect);
    dyn[i] = saved;
  }
  free(m.bytes);
}
END_TEST

/* Every word of the dynamic section replaced in turn, the tag by other
 * tags and the value by far and near values: apx_open returns, alpha
 * loads and runs beside the corrupt module, and the corrupt one either
 * loads or fails naming its path. Before the checks one in three of
 * these ended the process (SIGSEGV, SIGBUS, SIGILL, or an ld.so
 * assertion). Left out: DT_INIT or DT_FINI moved onto other code in a
 * module without its full symbol table, which no check can tell from
 * -Wl,-init=function (docs/reliability.md). */
START_TEST(no_single_corrupt_dynamic_word_crashes_apx_open) {
  static const int64_t tags[] = {
      DT_NULL,    DT_NEEDED,       DT_STRTAB,   DT_SYMTAB,  DT_RELA,    DT_RELASZ,
      DT_RELAENT, DT_STRSZ,        DT_INIT,     DT_FINI,    DT_PLTREL,  DT_JMPREL,
      DT_INIT_ARRAY, DT_INIT_ARRAYSZ, DT_GNU_HASH, DT_HASH, DT_VERSYM,  DT_VERNEED,
      DT_RELACOUNT, 36 /* DT_RELR */, DT_FILTER, 0x12345678,
  };
  module_image m = alpha_image();
  int stripped = section_named(&m, ".symtab") == NULL;
  const phdr_t *text = NULL;
  const ehdr_t *eh = (const ehdr_t *)m.bytes;
  size_t n;
  dyn_t *dyn = dynamic_entries(&m, &n);
  unsigned tried = 0, loaded = 0, refused = 0;
  for (size_t i = 0; i < n; i++) {
    for (int word = 0; word < 2; word++) {
      uint64_t original = word == 0 ? (uint64_t)dyn[i].d_tag : dyn[i].d_un.d_val;
      uint64_t values[32];
      size_t count = 0;
      if (word == 0) {
        for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) values[count++] = (uint64_t)tags[t];
      } else {
        uint64_t v[] = {0, 1, ~0ull, 0x7fffffff0000ull, original + 1, original + 8,
                        original - 8, original + 0x100, original ^ 0x1000, m.size};
        memcpy(values, v, sizeof v);
        count = sizeof v / sizeof v[0];
      }
      for (size_t k = 0; k < count; k++) {
        if (values[k] == original) continue;
        if (word == 1 && stripped && (dyn[i].d_tag == DT_INIT || dyn[i].d_tag == DT_FINI)) {
          /* other code of a stripped module: see above */
          for (unsigned p = 0; p < eh->e_phnum; p++) {
            const phdr_t *ph = (const phdr_t *)(m.bytes + eh->e_phoff) + p;
            if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) text = ph;
          }
          if (text && values[k] >= text->p_vaddr && values[k] < text->p_vaddr + text->p_memsz)
            continue;
        }
        dyn_t saved = dyn[i];
        if (word == 0)
          dyn[i].d_tag = (int64_t)values[k];
        else
          dyn[i].d_un.d_val = values[k];
        const char *path = write_module(m.bytes, m.size);
        dyn[i] = saved;
        apx_backend_state state;
        char reason[600];
        open_beside_alpha(path, &state, reason, sizeof reason);
        tried++;
        loaded += state == APX_BACKEND_OK || state == APX_BACKEND_NAME_MISMATCH;
        refused += state == APX_BACKEND_LOAD_FAILED;
        unlink(path);
      }
    }
  }
  printf("dynamic words: %u corrupt modules, %u loaded, %u refused or failed in dlopen\n",
         tried, loaded, refused);
  ck_assert_uint_gt(refused, tried / 2);
  free(m.bytes);
}
END_TEST

/* A corrupt module of a backend that no call needs (trt on a cpu-only
 * machine): apx_open still succeeds and the working backend runs. */
START_TEST(corrupt_unused_module_leaves_the_others_working) {
  module_image m = alpha_image();
  size_t n;
  dyn_t *dyn = dynamic_entries(&m, &n);
  for (size_t i = 0; i < n; i++)
    if (dyn[i].d_tag == DT_STRTAB) dyn[i].d_un.d_val = 0x7fffffff0000ull;
  char text[2048];
  snprintf(text, sizeof text,
           "[apexx]\nbackend_dir = %s\norder = alpha\n[backend alpha]\nlibrary = "
           "fixture-alpha.so\n[backend trt]\nlibrary = %s\n",
           getenv("APEXX_TEST_MODULES"), write_module(m.bytes, m.size));
  unsetenv("APEXX_BACKEND_DIR");
  apx_context *ctx = open_ok(write_ini(text));
  const struct apx_backend_info *trt = backend_named(ctx, "trt");
  ck_assert_int_eq(trt->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(trt->reason, "DT_STRTAB");
  tilepack_runs_on_alpha(ctx);
  apx_close(ctx);
  free(m.bytes);
}
END_TEST

/* A module built against ABI version 1 (the op slots inline in the backend
 * table; tests/fixtures/backend_fixture_v1.c) is refused with the reason
 * to rebuild it, and the backends beside it load and run. */
START_TEST(abi_version_1_module_is_refused_with_the_reason) {
  unsetenv("APEXX_BACKEND_DIR");
  apx_context *ctx = open_ok(write_ini_modules("[apexx]\nbackend_dir = %s\norder = old, alpha\n"
                                               "[backend old]\nlibrary = fixture-v1.so\n"
                                               "[backend alpha]\nlibrary = fixture-alpha.so\n"));
  expect_state(ctx, "old", APX_BACKEND_ABI_MISMATCH,
               "ABI version [1], core expects [2] (built against an older "
               "include/apexx/backend.h: rebuild it against this one; version 2 moved the op "
               "slots into apx_backend_ops)");
  expect_state(ctx, "alpha", APX_BACKEND_OK, NULL);
  const struct apx_backend_info *old = backend_named(ctx, "old");
  ck_assert_contains(old->library, "fixture-v1.so");
  int provides = -1;
  ck_assert_int_eq(apx_backend_provides(ctx, 0, APX_OP_TILEPACK, &provides), APX_OK);
  ck_assert_int_eq(provides, 0);
  float features[64] = {0}, out[64];
  int32_t ids[1] = {0};
  apx_tensor f = apx_tensor_host(features, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tensor i = apx_tensor_host(ids, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  apx_tensor o = apx_tensor_host(out, APX_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 8, 8});
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &f;
  a.idx = &i;
  a.tile = 8;
  a.out = &o;
  ck_assert_int_eq(apx_tilepack(ctx, &a, NULL), APX_OK);
  ck_assert(out[0] == 111.0f); /* alpha ran it, not the refused module */
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &a, NULL, &e), APX_OK);
  ck_assert_int_eq(e.passed_over[0].code, APX_PASS_NOT_LOADED);
  ck_assert_contains(e.passed_over[0].reason, "not_loaded:abi_mismatch: ABI version [1]");
  apx_close(ctx);
}
END_TEST

/* A module built against ABI 2's services table (the FF services
 * ff_params, ff_cached and ff_route before open_library; FIXTURE_ABI2_SERVICES
 * in tests/fixtures/backend_fixture.c) still loads: the retired slots are
 * NULL where it looks for them, and its typed keys, read at ABI 2's
 * offsets, reach it (tilepack writes level + 100*loud + 1000*strlen(greeting)). */
START_TEST(abi_2_services_layout_still_serves) {
  unsetenv("APEXX_BACKEND_DIR");
  apx_context *ctx = open_ok(write_ini_modules("[apexx]\nbackend_dir = %s\norder = abi2svc\n"
                                               "[backend abi2svc]\nlibrary = fixture-abi2svc.so\n"
                                               "level = 7\ngreeting = hi\nloud = yes\n"));
  expect_state(ctx, "abi2svc", APX_BACKEND_OK, NULL);
  ck_assert(tilepack_marker(ctx) == 2107.0f);
  apx_close(ctx);
}
END_TEST

/* apx_library_open: the core's checked loader for tools (apexx-bench's
 * plugin library): a module loads and its entry is found; a file that is
 * no library, a missing file and NULL arguments are refused, named. */
START_TEST(library_open_checks_like_the_loader) {
  apx_context *ctx = open_fixtures();
  char path[700];
  snprintf(path, sizeof path, "%s/fixture-alpha.so", getenv("APEXX_TEST_MODULES"));
  void *h = (void *)1;
  ck_assert_int_eq(apx_library_open(ctx, path, &h), APX_OK);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(dlsym(h, APX_BACKEND_ENTRY_SYMBOL));
  dlclose(h);
  snprintf(path, sizeof path, "%s/not-a-library.so", getenv("APEXX_TEST_FIXTURES"));
  h = (void *)1;
  ck_assert_int_eq(apx_library_open(ctx, path, &h), APX_ERR_IO);
  ck_assert_ptr_null(h);
  ck_assert_contains(apx_last_error(), "apx_library_open: [");
  ck_assert_contains(apx_last_error(), "not-a-library.so]: not a loadable shared object");
  ck_assert_int_eq(apx_library_open(ctx, "/nonexistent/libx.so", &h), APX_ERR_IO);
  ck_assert_contains(apx_last_error(), "[/nonexistent/libx.so]: not found");
  ck_assert_int_eq(apx_library_open(ctx, NULL, &h), APX_ERR_INVALID_ARG);
  ck_assert_str_eq(apx_last_error(), "apx_library_open: path = [NULL]");
  ck_assert_int_eq(apx_library_open(NULL, path, &h), APX_ERR_INVALID_ARG);
  apx_close(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("loader");
  TCase *tc = tcase_create("loader");
  tcase_add_test(tc, each_defect_has_its_state_and_reason);
  tcase_add_test(tc, info_reports_library_version_and_device);
  tcase_add_test(tc, a_working_backend_runs_beside_broken_ones);
  tcase_add_test(tc, library_writable_by_others_is_refused);
  tcase_add_test(tc, abi_version_1_module_is_refused_with_the_reason);
  tcase_add_test(tc, abi_2_services_layout_still_serves);
  tcase_add_test(tc, library_open_checks_like_the_loader);
  suite_add_tcase(s, tc);
  TCase *elf = tcase_create("elf");
  tcase_add_checked_fixture(elf, module_dir_setup, module_dir_teardown);
  tcase_set_timeout(elf, 120);
  tcase_add_test(elf, module_for_another_machine_is_refused_naming_its_path);
  tcase_add_test(elf, dlopen_failure_names_the_module_path);
  tcase_add_test(elf, corrupt_dynamic_words_are_named);
  tcase_add_test(elf, no_single_corrupt_dynamic_word_crashes_apx_open);
  tcase_add_test(elf, corrupt_unused_module_leaves_the_others_working);
  suite_add_tcase(s, elf);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
