/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks a module passes before dlopen (apx__elf_check): the
 * header is this machine's (class, byte order, version, OS ABI, machine),
 * the segments the dynamic linker maps or reads lie inside the file, and
 * every word of the dynamic section the linker dereferences, indexes with
 * or sizes by stays inside a PT_LOAD segment: the string, symbol, hash,
 * version and relocation tables, the symbols the hash tables reach, the
 * version chains, each relocation's target and symbol, and the
 * constructors' and destructors' addresses. The rules follow glibc's
 * elf/get-dynamic-info.h, dl-version.c, dl-lookup.c, do-rel.h and
 * dl-init.c: wherever ld.so would read out of bounds, divide by zero or
 * assert, the module is refused here with the tag and the bad value.
 * Everything is read from the open descriptor with pread (no mapping, so a
 * file truncated meanwhile cannot fault). What no check can catch (code
 * the module runs while it loads) is in docs/reliability.md. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "elf_image.h"
#include "internal.h"

/* The files of the checks: elf_image.c reads the file through its
 * segments; this file checks the header and the program headers, then runs
 * the others in ld.so's order: elf_dynamic.c (the dynamic section and its
 * tags), elf_symbols.c (hash, symbol and version tables),
 * elf_relocations.c, elf_init_fini.c (constructors and destructors) and
 * elf_sections.c (the section headers against the dynamic section). */

static const machine_rules machines[] = {
    {EM_X86_64, "x86-64", 1, R_X86_64_RELATIVE, R_X86_64_IRELATIVE, R_X86_64_COPY,
     R_X86_64_TLSDESC},
    {EM_AARCH64, "AArch64", 1, R_AARCH64_RELATIVE, R_AARCH64_IRELATIVE, R_AARCH64_COPY,
     R_AARCH64_TLSDESC},
    {EM_386, "x86", 0, R_386_RELATIVE, R_386_IRELATIVE, R_386_COPY, R_386_TLS_DESC},
    {EM_ARM, "ARM", 0, R_ARM_RELATIVE, R_ARM_IRELATIVE, R_ARM_COPY, R_ARM_TLS_DESC},
};

static const char *machine_name(unsigned machine) {
  switch (machine) {
  case EM_X86_64: return "x86-64";
  case EM_AARCH64: return "AArch64";
  case EM_386: return "x86";
  case EM_ARM: return "ARM";
  case EM_PPC64: return "PowerPC64";
  case EM_PPC: return "PowerPC";
  case EM_RISCV: return "RISC-V";
  case EM_S390: return "s390";
  case EM_MIPS: return "MIPS";
  case EM_SPARCV9: return "SPARC V9";
  case EM_LOONGARCH: return "LoongArch";
  default: return "unknown";
  }
}

/* ---- the file header and the program headers ---- */

static int check_header(image *im, const ehdr_t *eh) {
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
    return apx__elf_fail(im, "not an ELF file (no ELF magic)");
  if (eh->e_ident[EI_CLASS] != ELF_CLASS_HOST)
    return apx__elf_fail(im, "ELF class [%u] is not this machine's [%u] (%d-bit)",
                         (unsigned)eh->e_ident[EI_CLASS], (unsigned)ELF_CLASS_HOST,
                         ELF_CLASS_HOST == ELFCLASS64 ? 64 : 32);
  if (eh->e_ident[EI_DATA] != ELF_DATA_HOST)
    return apx__elf_fail(im, "ELF byte order [%u] is not this machine's [%u] (%s-endian)",
                         (unsigned)eh->e_ident[EI_DATA], (unsigned)ELF_DATA_HOST,
                         ELF_DATA_HOST == ELFDATA2LSB ? "little" : "big");
  if (eh->e_ident[EI_VERSION] != EV_CURRENT || eh->e_version != EV_CURRENT)
    return apx__elf_fail(im, "ELF version [%u] is not [%u]", (unsigned)eh->e_version,
                         (unsigned)EV_CURRENT);
  unsigned osabi = eh->e_ident[EI_OSABI];
  if (osabi != ELFOSABI_SYSV && osabi != ELFOSABI_GNU)
    return apx__elf_fail(im, "ELF OS ABI [%u] is neither System V [0] nor GNU/Linux [3]", osabi);
  if (osabi == ELFOSABI_SYSV && eh->e_ident[EI_ABIVERSION] != 0)
    return apx__elf_fail(im, "ELF ABI version [%u] of the System V ABI is not [0]",
                         (unsigned)eh->e_ident[EI_ABIVERSION]);
  if (ELF_MACHINE_HOST != 0 && eh->e_machine != ELF_MACHINE_HOST)
    return apx__elf_fail(im,
                         "ELF machine [%u] (%s) is not this machine's [%u] (%s): a module built "
                         "for another architecture",
                         (unsigned)eh->e_machine, machine_name(eh->e_machine),
                         (unsigned)ELF_MACHINE_HOST, machine_name(ELF_MACHINE_HOST));
  if (eh->e_type != ET_DYN)
    return apx__elf_fail(im, "ELF type [%u] is not a shared object", (unsigned)eh->e_type);
  if (eh->e_phentsize != sizeof(phdr_t) || eh->e_phnum == 0 || eh->e_phnum == PN_XNUM)
    return apx__elf_fail(im, "program header table [%u entries of %u bytes] is malformed",
                         (unsigned)eh->e_phnum, (unsigned)eh->e_phentsize);
  return 0;
}

static const char *segment_name(uint32_t type) {
  switch (type) {
  case PT_LOAD: return "PT_LOAD";
  case PT_DYNAMIC: return "PT_DYNAMIC";
  case PT_TLS: return "PT_TLS";
  case PT_NOTE: return "PT_NOTE";
  case PT_GNU_RELRO: return "PT_GNU_RELRO";
  case PT_GNU_EH_FRAME: return "PT_GNU_EH_FRAME";
  case PT_GNU_PROPERTY: return "PT_GNU_PROPERTY";
  default: return "segment";
  }
}

/* Segments ld.so maps, reads or protects: inside the file and inside the
 * module's PT_LOAD segments. Returns the PT_DYNAMIC header. */
static const phdr_t *check_segments(image *im) {
  const phdr_t *dynamic = NULL, *prev_load = NULL;
  unsigned dynamics = 0, loads = 0;
  for (unsigned i = 0; i < im->phnum; i++) {
    const phdr_t *p = &im->ph[i];
    uint64_t end;
    int mapped = p->p_type == PT_LOAD || p->p_type == PT_DYNAMIC || p->p_type == PT_TLS;
    if (mapped && (__builtin_add_overflow((uint64_t)p->p_offset, (uint64_t)p->p_filesz, &end) ||
                   end > im->file_size)) {
      apx__elf_fail(im,
                    "%s segment %u's file range [%llu, %llu) lies past the end of the file "
                    "[%llu bytes] (truncated?)",
                    segment_name(p->p_type), i, (unsigned long long)p->p_offset,
                    (unsigned long long)p->p_offset + (unsigned long long)p->p_filesz,
                    (unsigned long long)im->file_size);
      return NULL;
    }
    if (mapped && p->p_filesz > p->p_memsz) {
      apx__elf_fail(im, "segment %u's file size exceeds its memory size", i);
      return NULL;
    }
    if (p->p_type == PT_LOAD) {
      if (__builtin_add_overflow((uint64_t)p->p_vaddr, (uint64_t)p->p_memsz, &end) ||
          end > UINT64_MAX / 2) {
        apx__elf_fail(im, "PT_LOAD segment %u [%#llx, %llu bytes] ends past the address space", i,
                      (unsigned long long)p->p_vaddr, (unsigned long long)p->p_memsz);
        return NULL;
      }
      if (prev_load && p->p_vaddr < prev_load->p_vaddr) {
        apx__elf_fail(im,
                      "PT_LOAD segment %u's address [%#llx] is below the one before it [%#llx] "
                      "(they must ascend)",
                      i, (unsigned long long)p->p_vaddr, (unsigned long long)prev_load->p_vaddr);
        return NULL;
      }
      prev_load = p;
      loads++;
    }
    if (p->p_type == PT_DYNAMIC) {
      dynamic = p;
      dynamics++;
    }
  }
  if (loads == 0) {
    apx__elf_fail(im, "no PT_LOAD segment");
    return NULL;
  }
  if (dynamics != 1) {
    apx__elf_fail(im, "%u PT_DYNAMIC segments (a shared object has one)", dynamics);
    return NULL;
  }
  for (unsigned i = 0; i < im->phnum; i++) {
    const phdr_t *p = &im->ph[i];
    uint64_t size;
    int file_backed = 0;
    switch (p->p_type) {
    case PT_DYNAMIC: case PT_TLS: case PT_NOTE: case PT_GNU_PROPERTY:
      size = p->p_filesz; /* read from memory by ld.so (TLS: its initial image) */
      file_backed = 1;
      break;
    case PT_GNU_RELRO: case PT_GNU_EH_FRAME:
      size = p->p_memsz;
      break;
    default:
      continue;
    }
    if (size && !apx__elf_segment_of(im, p->p_vaddr, size, file_backed)) {
      apx__elf_fail(im, "%s segment %u [%#llx, %llu bytes] lies outside every PT_LOAD segment",
                    segment_name(p->p_type), i, (unsigned long long)p->p_vaddr,
                    (unsigned long long)size);
      return NULL;
    }
    if (p->p_type == PT_TLS && p->p_align & (p->p_align - 1)) {
      apx__elf_fail(im, "PT_TLS alignment [%llu] is not a power of two",
                    (unsigned long long)p->p_align);
      return NULL;
    }
  }
  if (dynamic->p_filesz < sizeof(dyn_t)) {
    apx__elf_fail(im, "the dynamic section is empty");
    return NULL;
  }
  return dynamic;
}

int apx__elf_check(int fd, uint64_t file_size, char *reason, size_t reason_size) {
  image im;
  memset(&im, 0, sizeof im);
  im.fd = fd;
  im.file_size = file_size;
  im.reason = reason;
  im.reason_size = reason_size;
  ehdr_t eh;
  if (file_size < sizeof eh || apx__elf_file_read(&im, 0, &eh, sizeof eh) != 0)
    return apx__elf_fail(&im, "[%llu] bytes: too short for an ELF header",
                         (unsigned long long)file_size);
  if (check_header(&im, &eh) != 0) return -1;
  for (size_t i = 0; i < sizeof machines / sizeof machines[0]; i++)
    if (machines[i].machine == eh.e_machine) im.rules = &machines[i];
  uint64_t ph_bytes = (uint64_t)eh.e_phnum * sizeof(phdr_t), ph_end;
  if (__builtin_add_overflow((uint64_t)eh.e_phoff, ph_bytes, &ph_end) || ph_end > file_size)
    return apx__elf_fail(&im,
                         "program headers [%llu, %llu) lie past the end of the file [%llu bytes] "
                         "(truncated?)",
                         (unsigned long long)eh.e_phoff, (unsigned long long)ph_end,
                         (unsigned long long)file_size);
  im.ph = malloc(ph_bytes);
  if (!im.ph)
    return apx__elf_fail(&im, "out of memory reading program headers");
  im.phnum = eh.e_phnum;
  apx__elf_read_sections(&im, &eh);
  int rc = -1;
  const phdr_t *dynamic;
  if (apx__elf_file_read(&im, eh.e_phoff, im.ph, ph_bytes) != 0)
    apx__elf_fail(&im, "cannot read the program headers");
  else if ((dynamic = check_segments(&im)) != NULL && apx__elf_read_dynamic(&im, dynamic) == 0 &&
           apx__elf_check_required(&im) == 0 && apx__elf_check_symbols(&im) == 0 &&
           apx__elf_check_versions(&im) == 0 && apx__elf_check_relocations(&im) == 0 &&
           apx__elf_check_init_fini(&im) == 0 && apx__elf_check_sections(&im) == 0)
    rc = 0;
  free(im.ph);
  free(im.needed);
  free(im.strtab);
  free(im.symtab);
  free(im.sec);
  free(im.shstr);
  return rc;
}
