/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks (elf_check.c): the section headers, where the module
 * still has them (ld.so never reads them): the tables the dynamic section
 * points at must be the sections the linker wrote, and the full symbol
 * table tells where functions start. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "elf_image.h"

/* A module's section headers, when it has usable ones (sstrip removes
 * them; ld.so never reads them): im->sec, or NULL. */
void apx__elf_read_sections(image *im, const ehdr_t *eh) {
  if (eh->e_shoff == 0 || eh->e_shnum == 0 || eh->e_shentsize != sizeof(shdr_t)) return;
  uint64_t end;
  uint64_t bytes = (uint64_t)eh->e_shnum * sizeof(shdr_t);
  if (__builtin_add_overflow((uint64_t)eh->e_shoff, bytes, &end) || end > im->file_size) return;
  shdr_t *sh = malloc(bytes);
  if (!sh) return;
  if (apx__elf_file_read(im, eh->e_shoff, sh, bytes) != 0) {
    free(sh);
    return;
  }
  im->sec = sh;
  im->nsec = eh->e_shnum;
  if (eh->e_shstrndx >= eh->e_shnum) return;
  const shdr_t *names = &sh[eh->e_shstrndx];
  if (names->sh_type != SHT_STRTAB || names->sh_size == 0 ||
      __builtin_add_overflow((uint64_t)names->sh_offset, (uint64_t)names->sh_size, &end) ||
      end > im->file_size)
    return;
  im->shstr = malloc(names->sh_size);
  if (!im->shstr) return;
  if (apx__elf_file_read(im, names->sh_offset, im->shstr, names->sh_size) != 0 ||
      im->shstr[names->sh_size - 1] != '\0') {
    free(im->shstr);
    im->shstr = NULL;
    return;
  }
  im->shstr_size = names->sh_size;
}

/* The name of the section holding code address `at`, or NULL. */
const char *apx__elf_code_section_name(const image *im, uint64_t at, uint64_t *start) {
  for (unsigned i = 0; im->shstr && i < im->nsec; i++) {
    const shdr_t *sh = &im->sec[i];
    if ((sh->sh_flags & (SHF_ALLOC | SHF_EXECINSTR)) != (SHF_ALLOC | SHF_EXECINSTR) ||
        at < sh->sh_addr || at - sh->sh_addr >= sh->sh_size || sh->sh_name >= im->shstr_size)
      continue;
    *start = sh->sh_addr;
    return im->shstr + sh->sh_name;
  }
  return NULL;
}

#ifndef SHT_RELR
#define SHT_RELR 19
#endif

static int within(uint64_t at, uint64_t size, int has, uint64_t start, uint64_t length) {
  return has && at >= start && at - start <= length && size <= length - (at - start);
}

/* Where the module has section headers, the tables its dynamic section
 * points at are the sections the linker wrote: a tag that moved, changed
 * kind or went missing (a truncated dynamic section leaves the module's
 * relocations unapplied, and ld.so then loads it) shows as a
 * disagreement. */
int apx__elf_check_sections(image *im) {
  static const struct {
    uint32_t type;
    int key, size_key;
    int64_t tag;
  } exact[] = {
      {SHT_GNU_HASH, K_GNU_HASH, -1, DT_GNU_HASH},
      {SHT_HASH, K_HASH, -1, DT_HASH},
      {SHT_GNU_versym, K_VERSYM, -1, DT_VERSYM},
      {SHT_GNU_verneed, K_VERNEED, -1, DT_VERNEED},
      {SHT_GNU_verdef, K_VERDEF, -1, DT_VERDEF},
      {SHT_RELR, K_RELR, K_RELRSZ, DT_RELR},
      {SHT_INIT_ARRAY, K_INIT_ARRAY, K_INIT_ARRAYSZ, DT_INIT_ARRAY},
      {SHT_FINI_ARRAY, K_FINI_ARRAY, K_FINI_ARRAYSZ, DT_FINI_ARRAY},
      {SHT_PREINIT_ARRAY, K_PREINIT_ARRAY, K_PREINIT_ARRAYSZ, DT_PREINIT_ARRAY},
  };
  int rela_kind = im->rules ? im->rules->rela : -1;
  for (unsigned i = 0; i < im->nsec; i++) {
    const shdr_t *sh = &im->sec[i];
    if (!(sh->sh_flags & SHF_ALLOC) || sh->sh_size == 0) continue;
    for (size_t e = 0; e < sizeof exact / sizeof exact[0]; e++) {
      if (sh->sh_type != exact[e].type) continue;
      if (!im->has[exact[e].key] || im->val[exact[e].key] != sh->sh_addr ||
          (exact[e].size_key >= 0 && im->val[exact[e].size_key] != sh->sh_size))
        return apx__elf_fail(im,
                             "section %u (type [%#x], at [%#llx], %llu bytes) has no matching %s "
                             "in the dynamic section",
                             i, (unsigned)sh->sh_type, (unsigned long long)sh->sh_addr,
                             (unsigned long long)sh->sh_size, apx__elf_tag_name(exact[e].tag));
    }
    if ((sh->sh_type == SHT_RELA && rela_kind != 0) || (sh->sh_type == SHT_REL && rela_kind != 1)) {
      int rela = sh->sh_type == SHT_RELA;
      int table = rela ? K_RELA : K_REL, size = rela ? K_RELASZ : K_RELSZ;
      if (!within(sh->sh_addr, sh->sh_size, im->has[table], im->val[table], im->val[size]) &&
          !within(sh->sh_addr, sh->sh_size, im->has[K_JMPREL], im->val[K_JMPREL],
                  im->val[K_PLTRELSZ]))
        return apx__elf_fail(im,
                             "relocation section %u [%#llx, %llu bytes] lies outside %s and "
                             "DT_JMPREL: the dynamic section leaves relocations unapplied",
                             i, (unsigned long long)sh->sh_addr, (unsigned long long)sh->sh_size,
                             rela ? "DT_RELA" : "DT_REL");
    }
    if (sh->sh_type == SHT_DYNSYM) {
      if (im->val[K_SYMTAB] != sh->sh_addr || im->symcount > sh->sh_size / sizeof(sym_t))
        return apx__elf_fail(im,
                             "DT_SYMTAB [%#llx] with [%llu] hashed symbols disagrees with the "
                             "symbol section at [%#llx] of [%llu] symbols",
                             (unsigned long long)im->val[K_SYMTAB],
                             (unsigned long long)im->symcount, (unsigned long long)sh->sh_addr,
                             (unsigned long long)(sh->sh_size / sizeof(sym_t)));
      const shdr_t *str = sh->sh_link < im->nsec ? &im->sec[sh->sh_link] : NULL;
      if (str && str->sh_type == SHT_STRTAB &&
          (im->val[K_STRTAB] != str->sh_addr || im->strsz != str->sh_size))
        return apx__elf_fail(im,
                             "DT_STRTAB [%#llx] / DT_STRSZ [%llu] disagree with the string section "
                             "at [%#llx] of [%llu] bytes",
                             (unsigned long long)im->val[K_STRTAB], (unsigned long long)im->strsz,
                             (unsigned long long)str->sh_addr, (unsigned long long)str->sh_size);
    }
    if (sh->sh_type == SHT_DYNAMIC && sh->sh_addr != im->dynamic_vaddr)
      return apx__elf_fail(im, "PT_DYNAMIC [%#llx] disagrees with the dynamic section at [%#llx]",
                           (unsigned long long)im->dynamic_vaddr, (unsigned long long)sh->sh_addr);
  }
  return 0;
}

/* 1 when a function symbol of the module's full symbol table (SHT_SYMTAB,
 * which strip removes) or of its dynamic one starts at `at`; 0 when none
 * does; -1 when the module has no full symbol table to tell. */
int apx__elf_function_starts_at(image *im, uint64_t at) {
  for (uint64_t i = 0; i < im->symcount; i++)
    if (ELFW_ST_TYPE(im->symtab[i].st_info) == STT_FUNC && im->symtab[i].st_value == at &&
        im->symtab[i].st_shndx != SHN_UNDEF)
      return 1;
  int found = -1;
  for (unsigned i = 0; i < im->nsec && found != 1; i++) {
    const shdr_t *sh = &im->sec[i];
    uint64_t end;
    if (sh->sh_type != SHT_SYMTAB || sh->sh_entsize != sizeof(sym_t) ||
        __builtin_add_overflow((uint64_t)sh->sh_offset, (uint64_t)sh->sh_size, &end) ||
        end > im->file_size)
      continue;
    found = 0;
    sym_t chunk[256];
    for (uint64_t done = 0; done < sh->sh_size / sizeof(sym_t) && found != 1;) {
      uint64_t n = sh->sh_size / sizeof(sym_t) - done;
      if (n > 256) n = 256;
      if (apx__elf_file_read(im, sh->sh_offset + done * sizeof(sym_t), chunk, n * sizeof(sym_t)) !=
          0)
        break;
      for (uint64_t k = 0; k < n; k++)
        if (ELFW_ST_TYPE(chunk[k].st_info) == STT_FUNC && chunk[k].st_value == at &&
            chunk[k].st_shndx != SHN_UNDEF)
          found = 1;
      done += n;
    }
  }
  return found;
}
