/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks (elf_check.c): the dynamic section as ld.so reads it
 * (glibc's elf/get-dynamic-info.h): the tags it keeps, every address and
 * string offset inside the module, the tags it needs in pairs, the entry
 * sizes, and the string table. */
#include "config.h"

#include <stdlib.h>

#include "elf_image.h"

/* The dynamic tags the checks name. */
const char *apx__elf_tag_name(int64_t tag) {
  switch (tag) {
#define TAG_(t) \
  case t: return #t;
    TAG_(DT_NULL) TAG_(DT_NEEDED) TAG_(DT_PLTRELSZ) TAG_(DT_PLTGOT) TAG_(DT_HASH)
    TAG_(DT_STRTAB) TAG_(DT_SYMTAB) TAG_(DT_RELA) TAG_(DT_RELASZ) TAG_(DT_RELAENT)
    TAG_(DT_STRSZ) TAG_(DT_SYMENT) TAG_(DT_INIT) TAG_(DT_FINI) TAG_(DT_SONAME)
    TAG_(DT_RPATH) TAG_(DT_REL) TAG_(DT_RELSZ) TAG_(DT_RELENT) TAG_(DT_PLTREL)
    TAG_(DT_JMPREL) TAG_(DT_INIT_ARRAY) TAG_(DT_FINI_ARRAY) TAG_(DT_INIT_ARRAYSZ)
    TAG_(DT_FINI_ARRAYSZ) TAG_(DT_RUNPATH) TAG_(DT_PREINIT_ARRAY) TAG_(DT_PREINIT_ARRAYSZ)
    TAG_(DT_RELRSZ) TAG_(DT_RELR) TAG_(DT_RELRENT) TAG_(DT_GNU_HASH) TAG_(DT_TLSDESC_PLT)
    TAG_(DT_TLSDESC_GOT) TAG_(DT_GNU_CONFLICT) TAG_(DT_GNU_LIBLIST) TAG_(DT_CONFIG)
    TAG_(DT_DEPAUDIT) TAG_(DT_AUDIT) TAG_(DT_PLTPAD) TAG_(DT_MOVETAB) TAG_(DT_SYMINFO)
    TAG_(DT_VERSYM) TAG_(DT_VERDEF) TAG_(DT_VERNEED) TAG_(DT_AUXILIARY) TAG_(DT_FILTER)
#undef TAG_
  default: return "DT_?";
  }
}

/* Tags whose value is an address in the module (ld.so adds the load
 * base). */
static int is_address_tag(int64_t tag) {
  switch (tag) {
  case DT_PLTGOT: case DT_HASH: case DT_STRTAB: case DT_SYMTAB: case DT_RELA:
  case DT_INIT: case DT_FINI: case DT_REL: case DT_JMPREL: case DT_INIT_ARRAY:
  case DT_FINI_ARRAY: case DT_PREINIT_ARRAY: case DT_RELR: case DT_GNU_HASH:
  case DT_TLSDESC_PLT: case DT_TLSDESC_GOT: case DT_GNU_CONFLICT: case DT_GNU_LIBLIST:
  case DT_PLTPAD: case DT_MOVETAB: case DT_SYMINFO: case DT_VERSYM: case DT_VERDEF:
  case DT_VERNEED:
    return 1;
  default:
    return 0;
  }
}

/* Tags whose value is an offset into the string table. */
static int is_string_tag(int64_t tag) {
  switch (tag) {
  case DT_NEEDED: case DT_SONAME: case DT_RPATH: case DT_RUNPATH: case DT_AUXILIARY:
  case DT_FILTER: case DT_CONFIG: case DT_DEPAUDIT: case DT_AUDIT:
    return 1;
  default:
    return 0;
  }
}

static int tag_key(int64_t tag) {
  switch (tag) {
  case DT_PLTRELSZ: return K_PLTRELSZ;
  case DT_PLTGOT: return K_PLTGOT;
  case DT_HASH: return K_HASH;
  case DT_STRTAB: return K_STRTAB;
  case DT_SYMTAB: return K_SYMTAB;
  case DT_RELA: return K_RELA;
  case DT_RELASZ: return K_RELASZ;
  case DT_RELAENT: return K_RELAENT;
  case DT_STRSZ: return K_STRSZ;
  case DT_SYMENT: return K_SYMENT;
  case DT_INIT: return K_INIT;
  case DT_FINI: return K_FINI;
  case DT_REL: return K_REL;
  case DT_RELSZ: return K_RELSZ;
  case DT_RELENT: return K_RELENT;
  case DT_PLTREL: return K_PLTREL;
  case DT_TEXTREL: return K_TEXTREL;
  case DT_JMPREL: return K_JMPREL;
  case DT_INIT_ARRAY: return K_INIT_ARRAY;
  case DT_FINI_ARRAY: return K_FINI_ARRAY;
  case DT_INIT_ARRAYSZ: return K_INIT_ARRAYSZ;
  case DT_FINI_ARRAYSZ: return K_FINI_ARRAYSZ;
  case DT_PREINIT_ARRAY: return K_PREINIT_ARRAY;
  case DT_PREINIT_ARRAYSZ: return K_PREINIT_ARRAYSZ;
  case DT_FLAGS: return K_FLAGS;
  case DT_RELRSZ: return K_RELRSZ;
  case DT_RELR: return K_RELR;
  case DT_RELRENT: return K_RELRENT;
  case DT_GNU_HASH: return K_GNU_HASH;
  case DT_VERSYM: return K_VERSYM;
  case DT_VERDEF: return K_VERDEF;
  case DT_VERNEED: return K_VERNEED;
  case DT_RELACOUNT: return K_RELACOUNT;
  case DT_RELCOUNT: return K_RELCOUNT;
  default: return -1;
  }
}

/* ---- the dynamic section ---- */

int apx__elf_read_dynamic(image *im, const phdr_t *dynamic) {
  im->dynamic_vaddr = dynamic->p_vaddr;
  size_t count = dynamic->p_filesz / sizeof(dyn_t);
  dyn_t *dyn =
      apx__elf_read_table(im, dynamic->p_vaddr, count * sizeof(dyn_t), "the dynamic section");
  if (!dyn) return -1;
  size_t n = 0;
  while (n < count && dyn[n].d_tag != DT_NULL) n++;
  if (n == count) {
    free(dyn);
    return apx__elf_fail(im, "the dynamic section has no DT_NULL entry within its [%zu] entries",
                         count);
  }
  im->needed = malloc((n ? n : 1) * sizeof *im->needed);
  if (!im->needed) {
    free(dyn);
    return apx__elf_fail(im, "out of memory reading the dynamic section");
  }
  for (size_t i = 0; i < n; i++) {
    int64_t tag = (int64_t)dyn[i].d_tag;
    uint64_t value = dyn[i].d_un.d_val;
    int key = tag_key(tag);
    if (key >= 0) {
      im->has[key] = 1;
      im->val[key] = value;
    }
    if (tag == DT_NEEDED || tag == DT_FILTER || tag == DT_AUXILIARY) {
      im->needed[im->needed_count].tag = tag;
      im->needed[im->needed_count++].offset = value;
    }
    if (tag == DT_TEXTREL || (tag == DT_FLAGS && (value & DF_TEXTREL))) im->textrel = 1;
  }
  /* addresses and string offsets, entry by entry (every one ld.so keeps) */
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    int64_t tag = (int64_t)dyn[i].d_tag;
    uint64_t value = dyn[i].d_un.d_val;
    if (is_address_tag(tag) && !apx__elf_segment_of(im, value, 1, 0))
      rc = apx__elf_fail(im, "dynamic entry %zu: %s [%#llx] lies outside every PT_LOAD segment", i,
                         apx__elf_tag_name(tag), (unsigned long long)value);
    else if (is_string_tag(tag) && im->has[K_STRSZ] && value >= im->val[K_STRSZ])
      rc = apx__elf_fail(im,
                         "dynamic entry %zu: %s [%llu] lies outside the string table "
                         "(DT_STRSZ [%llu] bytes)",
                         i, apx__elf_tag_name(tag), (unsigned long long)value,
                         (unsigned long long)im->val[K_STRSZ]);
  }
  free(dyn);
  return rc;
}

/* A tag ld.so dereferences whenever another is present. */
static int need_pair(image *im, int key, int64_t tag, int needed_key, int64_t needed_tag) {
  if (im->has[key] && !im->has[needed_key])
    return apx__elf_fail(im, "%s is present without %s", apx__elf_tag_name(tag),
                         apx__elf_tag_name(needed_tag));
  return 0;
}

int apx__elf_check_required(image *im) {
  if (!im->has[K_STRTAB] || !im->has[K_STRSZ] || !im->has[K_SYMTAB])
    return apx__elf_fail(im, "the dynamic section lacks %s",
                         !im->has[K_STRTAB]  ? "DT_STRTAB"
                         : !im->has[K_STRSZ] ? "DT_STRSZ"
                                             : "DT_SYMTAB");
  if (!im->has[K_GNU_HASH] && !im->has[K_HASH])
    return apx__elf_fail(im, "the dynamic section has neither DT_GNU_HASH nor DT_HASH");
  if (im->has[K_SYMENT] && im->val[K_SYMENT] != sizeof(sym_t))
    return apx__elf_fail(im, "DT_SYMENT [%llu] is not [%zu]", (unsigned long long)im->val[K_SYMENT],
                         sizeof(sym_t));
  if (need_pair(im, K_RELA, DT_RELA, K_RELASZ, DT_RELASZ) ||
      need_pair(im, K_RELA, DT_RELA, K_RELAENT, DT_RELAENT) ||
      need_pair(im, K_REL, DT_REL, K_RELSZ, DT_RELSZ) ||
      need_pair(im, K_REL, DT_REL, K_RELENT, DT_RELENT) ||
      need_pair(im, K_JMPREL, DT_JMPREL, K_PLTRELSZ, DT_PLTRELSZ) ||
      need_pair(im, K_JMPREL, DT_JMPREL, K_PLTREL, DT_PLTREL) ||
      need_pair(im, K_RELR, DT_RELR, K_RELRSZ, DT_RELRSZ) ||
      need_pair(im, K_RELR, DT_RELR, K_RELRENT, DT_RELRENT) ||
      need_pair(im, K_INIT_ARRAY, DT_INIT_ARRAY, K_INIT_ARRAYSZ, DT_INIT_ARRAYSZ) ||
      need_pair(im, K_FINI_ARRAY, DT_FINI_ARRAY, K_FINI_ARRAYSZ, DT_FINI_ARRAYSZ) ||
      need_pair(im, K_PREINIT_ARRAY, DT_PREINIT_ARRAY, K_PREINIT_ARRAYSZ, DT_PREINIT_ARRAYSZ))
    return -1;
  if (im->has[K_RELAENT] && im->val[K_RELAENT] != sizeof(rela_t))
    return apx__elf_fail(im, "DT_RELAENT [%llu] is not [%zu]",
                         (unsigned long long)im->val[K_RELAENT], sizeof(rela_t));
  if (im->has[K_RELENT] && im->val[K_RELENT] != sizeof(rel_t))
    return apx__elf_fail(im, "DT_RELENT [%llu] is not [%zu]", (unsigned long long)im->val[K_RELENT],
                         sizeof(rel_t));
  if (im->has[K_RELRENT] && im->val[K_RELRENT] != sizeof(addr_t))
    return apx__elf_fail(im, "DT_RELRENT [%llu] is not [%zu]",
                         (unsigned long long)im->val[K_RELRENT], sizeof(addr_t));
  if (im->has[K_PLTREL]) {
    uint64_t kind = im->val[K_PLTREL];
    int ok = im->rules ? kind == (uint64_t)(im->rules->rela ? DT_RELA : DT_REL)
                       : kind == DT_RELA || kind == DT_REL;
    if (!ok)
      return apx__elf_fail(im, "DT_PLTREL [%llu] is not %s", (unsigned long long)kind,
                           !im->rules        ? "DT_RELA [7] or DT_REL [17]"
                           : im->rules->rela ? "DT_RELA [7]"
                                             : "DT_REL [17]");
  }
  /* the string table: every name ld.so reads ends inside it */
  im->strsz = im->val[K_STRSZ];
  if (im->strsz == 0)
    return apx__elf_fail(im, "DT_STRSZ is 0");
  im->strtab = apx__elf_read_table(im, im->val[K_STRTAB], im->strsz,
                                   "the string table (DT_STRTAB, DT_STRSZ)");
  if (!im->strtab) return -1;
  if (im->strtab[im->strsz - 1] != '\0')
    return apx__elf_fail(
        im, "the string table (DT_STRTAB [%#llx], DT_STRSZ [%llu]) does not end in a NUL",
        (unsigned long long)im->val[K_STRTAB], (unsigned long long)im->strsz);
  for (size_t i = 0; i < im->needed_count; i++)
    if (im->strtab[im->needed[i].offset] == '\0')
      return apx__elf_fail(im, "%s names the empty string (no library has that name)",
                           apx__elf_tag_name(im->needed[i].tag));
  return 0;
}
