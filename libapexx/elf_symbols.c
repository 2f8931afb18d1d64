/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks (elf_check.c): the symbols ld.so reads. The GNU and SysV
 * hash tables (glibc's dl-lookup.c), the symbols they and the relocations
 * reach, and the version chains and indices (dl-version.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "elf_image.h"

/* ---- symbols and hash tables ---- */

static uint32_t gnu_hash(const char *s) {
  uint32_t h = 5381;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = h * 33 + *p;
  return h;
}

static uint32_t sysv_hash(const char *s) {
  uint32_t h = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    h = (h << 4) + *p;
    uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

/* The GNU hash table: ld.so divides by its bucket count, indexes its bloom
 * words with (count - 1) as a mask and walks each chain to its end bit.
 * The first pass (symbols not read yet) bounds the chains: *count is one
 * past the last symbol they reach. The second checks that every chain
 * word hashes its symbol's name and sits in that name's bucket: a moved
 * table, symbol table or string table shows here. */
static int check_gnu_hash(image *im, uint64_t *count, int names) {
  uint64_t at = im->val[K_GNU_HASH];
  uint32_t *head = apx__elf_read_table(im, at, 16, "the GNU hash table's header (DT_GNU_HASH)");
  if (!head) return -1;
  uint32_t nbuckets = head[0], symbias = head[1], nwords = head[2], shift = head[3];
  free(head);
  if (nbuckets == 0)
    return apx__elf_fail(im, "the GNU hash table (DT_GNU_HASH) has no buckets");
  if (nwords == 0 || (nwords & (nwords - 1)))
    return apx__elf_fail(im, "the GNU hash table's bloom filter size [%u] is not a power of two",
                         nwords);
  if (shift >= 8 * sizeof(addr_t))
    return apx__elf_fail(im, "the GNU hash table's bloom shift [%u] is not below [%zu]", shift,
                         8 * sizeof(addr_t));
  /* PT_LOAD ends are below 2^63 (check_segments): these sums cannot wrap */
  uint64_t buckets_at = at + 16 + (uint64_t)nwords * sizeof(addr_t);
  uint32_t *buckets = apx__elf_read_table(im, buckets_at, (uint64_t)nbuckets * 4,
                                          "the GNU hash table's buckets (DT_GNU_HASH)");
  if (!buckets) return -1;
  uint64_t chains_at = buckets_at + (uint64_t)nbuckets * 4;
  uint64_t end = symbias;
  word_window *window = malloc(sizeof *window);
  if (!window) {
    free(buckets);
    return apx__elf_fail(im, "out of memory reading the GNU hash table");
  }
  window->count = 0;
  int rc = 0;
  for (uint32_t b = 0; b < nbuckets && rc == 0; b++) {
    if (buckets[b] == 0) continue;
    if (buckets[b] < symbias) {
      rc =
          apx__elf_fail(im,
                        "GNU hash bucket [%u] starts at symbol [%u], below the first hashed symbol "
                        "[%u]",
                        b, buckets[b], symbias);
      break;
    }
    for (uint64_t i = buckets[b];; i++) {
      uint32_t word;
      if (apx__elf_read_word(im, window, chains_at + 4 * (i - symbias), &word) != 0) {
        rc = apx__elf_fail(im,
                           "GNU hash bucket [%u]'s chain runs past the file bytes of its PT_LOAD "
                           "segment (at symbol [%llu])",
                           b, (unsigned long long)i);
        break;
      }
      if (names) {
        const char *name = im->strtab + im->symtab[i].st_name;
        uint32_t h = gnu_hash(name);
        if ((h | 1u) != (word | 1u) || h % nbuckets != b) {
          rc = apx__elf_fail(im,
                             "symbol [%llu] [%.64s] is not where the GNU hash table has it (bucket "
                             "[%u]): DT_GNU_HASH, DT_SYMTAB or DT_STRTAB is wrong",
                             (unsigned long long)i, name, b);
          break;
        }
      }
      if (i + 1 > end) end = i + 1;
      if (word & 1u) break;
    }
  }
  free(window);
  free(buckets);
  *count = end;
  return rc;
}

/* The SysV hash table: ld.so divides by nbucket and follows chain indices
 * until 0, so every index must be below nchain and no chain may loop. The
 * second pass checks each symbol's name hashes to its bucket. */
static int check_sysv_hash(image *im, uint64_t *count, int names) {
  uint64_t at = im->val[K_HASH];
  uint32_t *head = apx__elf_read_table(im, at, 8, "the hash table's header (DT_HASH)");
  if (!head) return -1;
  uint32_t nbucket = head[0], nchain = head[1];
  free(head);
  if (nbucket == 0)
    return apx__elf_fail(im, "the hash table (DT_HASH) has no buckets");
  uint32_t *table = apx__elf_read_table(im, at + 8, ((uint64_t)nbucket + nchain) * 4,
                                        "the hash table's buckets and chains (DT_HASH)");
  if (!table) return -1;
  const uint32_t *bucket = table, *chain = table + nbucket;
  uint64_t steps = 0;
  int rc = 0;
  for (uint32_t b = 0; b < nbucket && rc == 0; b++) {
    for (uint32_t i = bucket[b]; i != STN_UNDEF; i = chain[i]) {
      if (i >= nchain) {
        rc = apx__elf_fail(im, "the hash table (DT_HASH) reaches symbol [%u], past its [%u] chains",
                           i, nchain);
        break;
      }
      if (++steps > nchain) {
        rc = apx__elf_fail(im, "the hash table's chains (DT_HASH) loop");
        break;
      }
      if (names && sysv_hash(im->strtab + im->symtab[i].st_name) % nbucket != b) {
        rc = apx__elf_fail(im,
                           "symbol [%u] [%.64s] is not where the hash table (DT_HASH) has it: "
                           "DT_HASH, DT_SYMTAB or DT_STRTAB is wrong",
                           i, im->strtab + im->symtab[i].st_name);
        break;
      }
    }
  }
  free(table);
  *count = nchain;
  return rc;
}

/* One past the highest symbol a processed relocation table names (the
 * hash tables need not reach undefined symbols, and reach none when the
 * module exports nothing). */
static int relocation_symbols(image *im, uint64_t *count) {
  static const struct {
    int key, size_key;
    int rela; /* -1: DT_JMPREL, whose kind DT_PLTREL says */
  } tables[] = {{K_RELA, K_RELASZ, 1}, {K_REL, K_RELSZ, 0}, {K_JMPREL, K_PLTRELSZ, -1}};
  int rela_kind = im->rules ? im->rules->rela : -1;
  *count = 0;
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
    if (!im->has[tables[t].key]) continue;
    int rela = tables[t].rela >= 0 ? tables[t].rela : im->val[K_PLTREL] == DT_RELA;
    if (tables[t].rela >= 0 && rela_kind >= 0 && rela != rela_kind) continue; /* not applied */
    size_t entry = rela ? sizeof(rela_t) : sizeof(rel_t);
    uint64_t size = im->val[tables[t].size_key] / entry * entry;
    void *table = apx__elf_read_table(im, im->val[tables[t].key], size,
                                      apx__elf_tag_name(tables[t].key == K_RELA  ? DT_RELA
                                                        : tables[t].key == K_REL ? DT_REL
                                                                                 : DT_JMPREL));
    if (!table) return -1;
    for (uint64_t i = 0; i < size / entry; i++) {
      uint64_t info = rela ? ((const rela_t *)table)[i].r_info : ((const rel_t *)table)[i].r_info;
      if ((uint64_t)ELFW_R_SYM(info) + 1 > *count) *count = (uint64_t)ELFW_R_SYM(info) + 1;
    }
    free(table);
  }
  return 0;
}

/* The symbols ld.so may read (relocations index them directly): each
 * name inside the string table, each defined function inside executable
 * code, each defined object inside the module. */
int apx__elf_check_symbols(image *im) {
  uint64_t gnu_count = 0, sysv_count = 0, reloc_count = 0;
  if (im->has[K_GNU_HASH] && check_gnu_hash(im, &gnu_count, 0) != 0) return -1;
  if (im->has[K_HASH] && check_sysv_hash(im, &sysv_count, 0) != 0) return -1;
  if (relocation_symbols(im, &reloc_count) != 0) return -1;
  im->symcount = gnu_count > sysv_count ? gnu_count : sysv_count;
  if (reloc_count > im->symcount) im->symcount = reloc_count;
  if (im->symcount == 0) im->symcount = 1; /* symbol 0, the undefined symbol */
  if (im->symcount > im->file_size / sizeof(sym_t))
    return apx__elf_fail(im,
                         "the hash tables and relocations reach symbol [%llu], past what the file "
                         "holds",
                         (unsigned long long)im->symcount - 1);
  im->symtab = apx__elf_read_table(im, im->val[K_SYMTAB], im->symcount * sizeof(sym_t),
                                   "the symbol table (DT_SYMTAB)");
  if (!im->symtab) return -1;
  for (uint64_t i = 0; i < im->symcount; i++) {
    const sym_t *s = &im->symtab[i];
    if (s->st_name >= im->strsz)
      return apx__elf_fail(
          im, "symbol [%llu]'s name [%u] lies outside the string table (DT_STRSZ [%llu])",
          (unsigned long long)i, (unsigned)s->st_name, (unsigned long long)im->strsz);
    if (s->st_shndx == SHN_UNDEF || s->st_shndx >= SHN_LORESERVE) continue;
    unsigned type = ELFW_ST_TYPE(s->st_info);
#if !defined(__powerpc64__) /* ELFv1 function symbols name descriptors in data */
    if ((type == STT_FUNC || type == STT_GNU_IFUNC) &&
        !apx__elf_in_executable_segment(im, s->st_value))
      return apx__elf_fail(im,
                           "function symbol [%llu] [%.64s] at [%#llx] lies outside the executable "
                           "PT_LOAD segments",
                           (unsigned long long)i, im->strtab + s->st_name,
                           (unsigned long long)s->st_value);
#endif
    if (type == STT_OBJECT && !apx__elf_segment_of(im, s->st_value, s->st_size, 0))
      return apx__elf_fail(im,
                           "object symbol [%llu] [%.64s] [%#llx, %llu bytes] lies outside every "
                           "PT_LOAD segment",
                           (unsigned long long)i, im->strtab + s->st_name,
                           (unsigned long long)s->st_value, (unsigned long long)s->st_size);
  }
  /* every name now reads inside the string table: the hashes must match */
  if (im->has[K_GNU_HASH] && check_gnu_hash(im, &gnu_count, 1) != 0) return -1;
  if (im->has[K_HASH] && check_sysv_hash(im, &sysv_count, 1) != 0) return -1;
  return 0;
}

/* ---- symbol versions ---- */

static int is_needed_name(const image *im, const char *name) {
  for (size_t i = 0; i < im->needed_count; i++) {
    if (im->needed[i].tag != DT_NEEDED) continue;
    const char *needed = apx__elf_string_at(im, im->needed[i].offset);
    if (needed && strcmp(needed, name) == 0) return 1;
  }
  return 0;
}

/* DT_VERNEED and DT_VERDEF chains as ld.so walks them (until a zero next
 * offset, whatever the counts say), then DT_VERSYM, whose indices must
 * name a version those chains define: ld.so indexes its version array with
 * them unchecked. */
int apx__elf_check_versions(image *im) {
  unsigned ndx_high = 0;
  /* every record is at least 8 bytes and each step moves forward */
  uint64_t guard = im->file_size / 8 + 1;
  if (im->has[K_VERNEED]) {
    uint64_t at = im->val[K_VERNEED];
    for (uint64_t n = 0;; n++) {
      ELFW(Verneed) vn;
      if (n > guard || apx__elf_read_at(im, at, &vn, sizeof vn) != 0)
        return apx__elf_fail(
            im,
            "version need record %llu (DT_VERNEED) at [%#llx] lies outside the file "
            "bytes of every PT_LOAD segment",
            (unsigned long long)n, (unsigned long long)at);
      if (vn.vn_version != 1)
        return apx__elf_fail(im, "version need record %llu has version [%u], not [1]",
                             (unsigned long long)n, (unsigned)vn.vn_version);
      const char *file = apx__elf_string_at(im, vn.vn_file);
      if (!file)
        return apx__elf_fail(im,
                             "version need record %llu names file [%u], outside the string table",
                             (unsigned long long)n, (unsigned)vn.vn_file);
      if (!is_needed_name(im, file)) /* ld.so asserts it is a dependency */
        return apx__elf_fail(
            im, "version need record %llu names [%.64s], which no DT_NEEDED entry names",
            (unsigned long long)n, file);
      uint64_t aux = at + vn.vn_aux;
      for (uint64_t m = 0;; m++) {
        ELFW(Vernaux) va;
        if (m > guard || apx__elf_read_at(im, aux, &va, sizeof va) != 0)
          return apx__elf_fail(
              im,
              "version need record %llu's entry %llu lies outside the file bytes of "
              "every PT_LOAD segment",
              (unsigned long long)n, (unsigned long long)m);
        if (!apx__elf_string_at(im, va.vna_name))
          return apx__elf_fail(im,
                               "version need record %llu's entry %llu names [%u], outside the "
                               "string table",
                               (unsigned long long)n, (unsigned long long)m, (unsigned)va.vna_name);
        if ((va.vna_other & 0x7fffu) > ndx_high) ndx_high = va.vna_other & 0x7fffu;
        if (va.vna_next == 0) break;
        aux += va.vna_next;
      }
      if (vn.vn_next == 0) break;
      at += vn.vn_next;
    }
  }
  if (im->has[K_VERDEF]) {
    uint64_t at = im->val[K_VERDEF];
    for (uint64_t n = 0;; n++) {
      ELFW(Verdef) vd;
      ELFW(Verdaux) va;
      if (n > guard || apx__elf_read_at(im, at, &vd, sizeof vd) != 0)
        return apx__elf_fail(im,
                             "version definition %llu (DT_VERDEF) at [%#llx] lies outside the file "
                             "bytes of every PT_LOAD segment",
                             (unsigned long long)n, (unsigned long long)at);
      if (vd.vd_version != 1)
        return apx__elf_fail(im, "version definition %llu has version [%u], not [1]",
                             (unsigned long long)n, (unsigned)vd.vd_version);
      if (apx__elf_read_at(im, at + vd.vd_aux, &va, sizeof va) != 0)
        return apx__elf_fail(im,
                             "version definition %llu's name entry lies outside the file bytes of "
                             "every PT_LOAD segment",
                             (unsigned long long)n);
      if (!apx__elf_string_at(im, va.vda_name))
        return apx__elf_fail(im, "version definition %llu names [%u], outside the string table",
                             (unsigned long long)n, (unsigned)va.vda_name);
      if ((vd.vd_ndx & 0x7fffu) > ndx_high) ndx_high = vd.vd_ndx & 0x7fffu;
      if (vd.vd_next == 0) break;
      at += vd.vd_next;
    }
  }
  if (!im->has[K_VERSYM]) {
    if (ndx_high > 0) /* ld.so then reads DT_VERSYM's entry unchecked */
      return apx__elf_fail(im, "DT_VERNEED or DT_VERDEF defines versions but DT_VERSYM is missing");
    return 0;
  }
  uint16_t *versym = apx__elf_read_table(im, im->val[K_VERSYM], im->symcount * 2,
                                         "the symbol version table (DT_VERSYM)");
  if (!versym) return -1;
  int rc = 0;
  for (uint64_t i = 0; i < im->symcount && rc == 0; i++)
    if ((versym[i] & 0x7fffu) > ndx_high)
      rc = apx__elf_fail(im,
                         "symbol [%llu]'s version index [%u] (DT_VERSYM) is past the versions "
                         "DT_VERNEED and DT_VERDEF define [%u]",
                         (unsigned long long)i, versym[i] & 0x7fffu, ndx_high);
  free(versym);
  return rc;
}
