/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks (elf_check.c): every relocation ld.so applies (glibc's
 * do-rel.h): its symbol, its type on this machine and the words it writes,
 * inside writable PT_LOAD segments; DT_RELR's addresses and bitmaps. */
#include "config.h"

#include <stdlib.h>

#include "elf_image.h"

/* ---- relocations ---- */

/* One relocation as ld.so applies it: where it writes, which symbol, the
 * type; table names the tag for messages. */
static int check_relocation(image *im, const char *table, uint64_t index, uint64_t offset,
                            uint64_t info, int64_t addend, int has_addend) {
  uint64_t sym = ELFW_R_SYM(info);
  uint32_t type = (uint32_t)ELFW_R_TYPE(info);
  if (sym >= im->symcount)
    return apx__elf_fail(im, "relocation %llu of %s names symbol [%llu], past the [%llu] symbols",
                         (unsigned long long)index, table, (unsigned long long)sym,
                         (unsigned long long)im->symcount);
  uint64_t size = sizeof(addr_t);
  if (im->rules) {
    if (type == im->rules->copy)
      return apx__elf_fail(im, "relocation %llu of %s is a copy relocation (executables only)",
                           (unsigned long long)index, table);
    if (type == im->rules->tlsdesc) size = 2 * sizeof(addr_t);
    if (type == im->rules->irelative && has_addend &&
        !apx__elf_in_executable_segment(im, (uint64_t)addend))
      return apx__elf_fail(im,
                           "relocation %llu of %s calls a resolver at [%#llx], outside the "
                           "executable PT_LOAD segments",
                           (unsigned long long)index, table, (unsigned long long)addend);
  }
  if (!apx__elf_writable(im, offset, size))
    return apx__elf_fail(im,
                         "relocation %llu of %s writes at [%#llx], outside every writable PT_LOAD "
                         "segment",
                         (unsigned long long)index, table, (unsigned long long)offset);
  return 0;
}

/* A relocation table (RELA or REL entries) at tag `at`, `size` bytes. */
static int check_relocation_table(image *im, int64_t tag, uint64_t at, uint64_t size, int rela,
                                  uint64_t relative_count) {
  size_t entry = rela ? sizeof(rela_t) : sizeof(rel_t);
  if (size % entry != 0)
    return apx__elf_fail(im, "%s's size [%llu] is not a multiple of its entry size [%zu]",
                         apx__elf_tag_name(tag), (unsigned long long)size, entry);
  void *table = apx__elf_read_table(im, at, size, apx__elf_tag_name(tag));
  if (!table) return -1;
  uint64_t count = size / entry;
  if (relative_count > count) relative_count = count; /* ld.so takes the smaller */
  int rc = 0;
  for (uint64_t i = 0; i < count && rc == 0; i++) {
    uint64_t offset, info;
    int64_t addend = 0;
    if (rela) {
      const rela_t *r = (const rela_t *)table + i;
      offset = r->r_offset;
      info = r->r_info;
      addend = (int64_t)r->r_addend;
    } else {
      const rel_t *r = (const rel_t *)table + i;
      offset = r->r_offset;
      info = r->r_info;
    }
    /* ld.so applies the first DT_RELACOUNT entries as relative ones
     * without reading their type */
    if (i < relative_count && im->rules && ELFW_R_TYPE(info) != im->rules->relative)
      rc = apx__elf_fail(im,
                         "DT_RELACOUNT/DT_RELCOUNT says %llu relative relocations lead %s, but "
                         "relocation %llu is of type [%u]",
                         (unsigned long long)relative_count, apx__elf_tag_name(tag),
                         (unsigned long long)i, (unsigned)ELFW_R_TYPE(info));
    else
      rc = check_relocation(im, apx__elf_tag_name(tag), i, offset, info, addend, rela);
  }
  free(table);
  return rc;
}

/* DT_RELR: even words are addresses, odd words bitmaps of the next 63 (31)
 * words; the first must be an address (ld.so starts writing from it). */
static int check_relr(image *im) {
  uint64_t size = im->val[K_RELRSZ];
  if (size % sizeof(addr_t) != 0)
    return apx__elf_fail(im, "DT_RELRSZ [%llu] is not a multiple of [%zu]",
                         (unsigned long long)size, sizeof(addr_t));
  addr_t *relr = apx__elf_read_table(im, im->val[K_RELR], size, "DT_RELR");
  if (!relr) return -1;
  uint64_t where = 0;
  int have_base = 0, rc = 0;
  for (uint64_t i = 0; i < size / sizeof(addr_t) && rc == 0; i++) {
    addr_t word = relr[i];
    if ((word & 1) == 0) {
      where = word;
      have_base = 1;
      if (!apx__elf_writable(im, where, sizeof(addr_t)))
        rc = apx__elf_fail(im,
                           "DT_RELR entry %llu writes at [%#llx], outside every writable PT_LOAD "
                           "segment",
                           (unsigned long long)i, (unsigned long long)where);
      where += sizeof(addr_t);
      continue;
    }
    if (!have_base) {
      rc = apx__elf_fail(im, "DT_RELR starts with a bitmap, not an address");
      break;
    }
    for (unsigned bit = 1; bit < 8 * sizeof(addr_t) && rc == 0; bit++)
      if ((word >> bit) & 1) {
        uint64_t at = where + (bit - 1) * sizeof(addr_t);
        if (!apx__elf_writable(im, at, sizeof(addr_t)))
          rc = apx__elf_fail(im,
                             "DT_RELR entry %llu writes at [%#llx], outside every writable PT_LOAD "
                             "segment",
                             (unsigned long long)i, (unsigned long long)at);
      }
    where += (8 * sizeof(addr_t) - 1) * sizeof(addr_t);
  }
  free(relr);
  return rc;
}

int apx__elf_check_relocations(image *im) {
  int rela_kind = im->rules ? im->rules->rela : -1; /* -1: check both kinds */
  if (im->has[K_RELA] && rela_kind != 0 &&
      check_relocation_table(im, DT_RELA, im->val[K_RELA], im->val[K_RELASZ], 1,
                             im->has[K_RELACOUNT] ? im->val[K_RELACOUNT] : 0) != 0)
    return -1;
  if (im->has[K_REL] && rela_kind != 1 &&
      check_relocation_table(im, DT_REL, im->val[K_REL], im->val[K_RELSZ], 0,
                             im->has[K_RELCOUNT] ? im->val[K_RELCOUNT] : 0) != 0)
    return -1;
  if (im->has[K_JMPREL] &&
      check_relocation_table(im, DT_JMPREL, im->val[K_JMPREL], im->val[K_PLTRELSZ],
                             im->val[K_PLTREL] == DT_RELA, 0) != 0)
    return -1;
  if (im->has[K_RELR] && check_relr(im) != 0) return -1;
  if (im->has[K_PLTGOT] && !apx__elf_segment_of(im, im->val[K_PLTGOT], 3 * sizeof(addr_t), 0))
    return apx__elf_fail(im, "DT_PLTGOT [%#llx] (three words) lies outside every PT_LOAD segment",
                         (unsigned long long)im->val[K_PLTGOT]);
  return 0;
}
