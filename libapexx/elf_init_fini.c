/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks (elf_check.c): the code ld.so calls while loading and at
 * exit (glibc's dl-init.c): DT_INIT, DT_FINI and the constructor and
 * destructor arrays, as relocated. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "elf_image.h"

/* ---- constructors and destructors ---- */

/* What each word of [at, at + slots words) holds once relocated: how[k] =
 * 1 with value[k] for a relative relocation (or DT_RELR, which adds the
 * base to the word in the file), 2 for one resolved by symbol (or a
 * machine whose relocations are not modelled here), 0 when none sets it. */
static int relocated_values(image *im, uint64_t at, uint64_t slots, unsigned char *how,
                            uint64_t *value) {
  memset(how, 0, (size_t)slots);
  if (!im->rules || !im->rules->rela || !im->has[K_RELA]) {
    memset(how, 2, (size_t)slots);
    return 0;
  }
  uint64_t count = im->val[K_RELASZ] / sizeof(rela_t);
  rela_t *table = apx__elf_read_table(im, im->val[K_RELA], count * sizeof(rela_t), "DT_RELA");
  if (!table) return -1;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t off = table[i].r_offset;
    if (off < at || (off - at) % sizeof(addr_t) || (off - at) / sizeof(addr_t) >= slots)
      continue;
    uint64_t k = (off - at) / sizeof(addr_t);
    if (ELFW_R_TYPE(table[i].r_info) == im->rules->relative) {
      how[k] = 1;
      value[k] = (uint64_t)table[i].r_addend;
    } else {
      how[k] = 2;
    }
  }
  free(table);
  if (!im->has[K_RELR]) return 0;
  addr_t *relr = apx__elf_read_table(im, im->val[K_RELR], im->val[K_RELRSZ], "DT_RELR");
  if (!relr) return -1;
  uint64_t where = 0;
  for (uint64_t i = 0; i < im->val[K_RELRSZ] / sizeof(addr_t); i++) {
    uint64_t hit[8 * sizeof(addr_t)];
    unsigned hits = 0;
    if ((relr[i] & 1) == 0) {
      hit[hits++] = relr[i];
      where = relr[i] + sizeof(addr_t);
    } else {
      for (unsigned bit = 1; bit < 8 * sizeof(addr_t); bit++)
        if ((relr[i] >> bit) & 1) hit[hits++] = where + (bit - 1) * sizeof(addr_t);
      where += (8 * sizeof(addr_t) - 1) * sizeof(addr_t);
    }
    for (unsigned h = 0; h < hits; h++) {
      uint64_t off = hit[h];
      if (off < at || (off - at) % sizeof(addr_t) || (off - at) / sizeof(addr_t) >= slots)
        continue;
      uint64_t k = (off - at) / sizeof(addr_t);
      addr_t word;
      if (apx__elf_read_at(im, off, &word, sizeof word) != 0)
        continue; /* in the zero-filled part: never relocated to anything */
      how[k] = 1;
      value[k] = word;
    }
  }
  free(relr);
  return 0;
}

/* The code ld.so calls while loading and at exit: DT_INIT and DT_FINI
 * inside executable segments (any function may be one: -Wl,-init), each
 * DT_INIT_ARRAY / DT_FINI_ARRAY slot relocated to an address inside them
 * (an unrelocated slot would be called at its link-time address). */
int apx__elf_check_init_fini(image *im) {
  int rc = 0;
  static const struct {
    int key, size_key;
    int64_t tag;
  } code[] = {
      {K_INIT, -1, DT_INIT},
      {K_FINI, -1, DT_FINI},
      {K_INIT_ARRAY, K_INIT_ARRAYSZ, DT_INIT_ARRAY},
      {K_FINI_ARRAY, K_FINI_ARRAYSZ, DT_FINI_ARRAY},
  };
  for (size_t c = 0; c < sizeof code / sizeof code[0] && rc == 0; c++) {
    if (!im->has[code[c].key]) continue;
    uint64_t at = im->val[code[c].key];
    uint64_t size = code[c].size_key >= 0 ? im->val[code[c].size_key] : 0;
    if (code[c].size_key < 0) {
      if (!apx__elf_in_executable_segment(im, at)) {
        rc = apx__elf_fail(im, "%s [%#llx] lies outside the executable PT_LOAD segments",
                           apx__elf_tag_name(code[c].tag), (unsigned long long)at);
        break;
      }
      /* the .init and .fini sections are one function each; anywhere else
       * (-Wl,-init=f) it must be a function the symbol tables know, where
       * the module still has its full symbol table */
      uint64_t start = 0;
      const char *section = apx__elf_code_section_name(im, at, &start);
      int init_section = section && (!strcmp(section, ".init") || !strcmp(section, ".fini"));
      if (init_section ? at != start : apx__elf_function_starts_at(im, at) == 0) {
        rc = apx__elf_fail(im, "%s [%#llx] is not the start of a function (%s%s)",
                           apx__elf_tag_name(code[c].tag), (unsigned long long)at,
                           init_section ? "inside section " : "no function symbol there",
                           init_section ? section : "");
        break;
      }
    } else {
      if (size % sizeof(addr_t) != 0 || !apx__elf_writable(im, at, size)) {
        rc = apx__elf_fail(im,
                           "%s [%#llx, %llu bytes] is not whole words inside a writable PT_LOAD "
                           "segment",
                           apx__elf_tag_name(code[c].tag), (unsigned long long)at,
                           (unsigned long long)size);
        break;
      }
      uint64_t slots = size / sizeof(addr_t);
      unsigned char *how = malloc(slots ? (size_t)slots : 1);
      uint64_t *value = malloc((slots ? (size_t)slots : 1) * sizeof *value);
      if (!how || !value)
        rc = apx__elf_fail(im, "out of memory reading %s", apx__elf_tag_name(code[c].tag));
      else if (relocated_values(im, at, slots, how, value) != 0)
        rc = -1;
      for (uint64_t slot = 0; slot < slots && rc == 0; slot++) {
        if (how[slot] == 0)
          rc = apx__elf_fail(im,
                             "%s entry %llu is never relocated (ld.so would call the raw address)",
                             apx__elf_tag_name(code[c].tag), (unsigned long long)slot);
        else if (how[slot] == 1 && !apx__elf_in_executable_segment(im, value[slot]))
          rc = apx__elf_fail(im,
                             "%s entry %llu [%#llx] lies outside the executable PT_LOAD segments",
                             apx__elf_tag_name(code[c].tag), (unsigned long long)slot,
                             (unsigned long long)value[slot]);
      }
      free(how);
      free(value);
    }
  }
  if (rc == 0 && im->has[K_PREINIT_ARRAY] &&
      !apx__elf_segment_of(im, im->val[K_PREINIT_ARRAY], im->val[K_PREINIT_ARRAYSZ], 0))
    rc = apx__elf_fail(im, "DT_PREINIT_ARRAY lies outside every PT_LOAD segment");
  return rc;
}
