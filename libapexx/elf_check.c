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

#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#if UINTPTR_MAX > 0xffffffffu
#define ELF_CLASS_HOST ELFCLASS64
#define ELFW(type) Elf64_##type
#define ELFW_R_SYM(info) ELF64_R_SYM(info)
#define ELFW_R_TYPE(info) ELF64_R_TYPE(info)
#define ELFW_ST_TYPE(info) ELF64_ST_TYPE(info)
#else
#define ELF_CLASS_HOST ELFCLASS32
#define ELFW(type) Elf32_##type
#define ELFW_R_SYM(info) ELF32_R_SYM(info)
#define ELFW_R_TYPE(info) ELF32_R_TYPE(info)
#define ELFW_ST_TYPE(info) ELF32_ST_TYPE(info)
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ELF_DATA_HOST ELFDATA2LSB
#else
#define ELF_DATA_HOST ELFDATA2MSB
#endif

/* This machine's e_machine, 0 where unknown (ld.so then judges alone). */
#if defined(__x86_64__)
#define ELF_MACHINE_HOST EM_X86_64
#elif defined(__aarch64__)
#define ELF_MACHINE_HOST EM_AARCH64
#elif defined(__i386__)
#define ELF_MACHINE_HOST EM_386
#elif defined(__arm__)
#define ELF_MACHINE_HOST EM_ARM
#elif defined(__powerpc64__)
#define ELF_MACHINE_HOST EM_PPC64
#elif defined(__riscv)
#define ELF_MACHINE_HOST EM_RISCV
#elif defined(__s390x__)
#define ELF_MACHINE_HOST EM_S390
#else
#define ELF_MACHINE_HOST 0
#endif

#ifndef DT_RELRSZ
#define DT_RELRSZ 35
#define DT_RELR 36
#define DT_RELRENT 37
#endif

typedef ELFW(Ehdr) ehdr_t;
typedef ELFW(Phdr) phdr_t;
typedef ELFW(Shdr) shdr_t;
typedef ELFW(Dyn) dyn_t;
typedef ELFW(Sym) sym_t;
typedef ELFW(Rela) rela_t;
typedef ELFW(Rel) rel_t;
typedef ELFW(Addr) addr_t;

/* What one machine's relocations look like to its dynamic linker. */
typedef struct machine_rules {
  uint16_t machine;
  const char *name;
  int rela;              /* 1: RELA tables only; 0: REL only */
  uint32_t relative;     /* base + addend */
  uint32_t irelative;    /* calls the resolver at base + addend */
  uint32_t copy;         /* refused: a shared object has no copy relocations */
  uint32_t tlsdesc;      /* writes two words */
} machine_rules;

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

/* The dynamic tags the checks name. */
static const char *tag_name(int64_t tag) {
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

/* The tags kept by value (the last of each wins, as in ld.so). */
enum {
  K_PLTRELSZ, K_PLTGOT, K_HASH, K_STRTAB, K_SYMTAB, K_RELA, K_RELASZ, K_RELAENT, K_STRSZ,
  K_SYMENT, K_INIT, K_FINI, K_REL, K_RELSZ, K_RELENT, K_PLTREL, K_TEXTREL, K_JMPREL,
  K_INIT_ARRAY, K_FINI_ARRAY, K_INIT_ARRAYSZ, K_FINI_ARRAYSZ, K_PREINIT_ARRAY,
  K_PREINIT_ARRAYSZ, K_FLAGS, K_RELRSZ, K_RELR, K_RELRENT, K_GNU_HASH, K_VERSYM, K_VERDEF,
  K_VERNEED, K_RELACOUNT, K_RELCOUNT, K_COUNT
};

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

typedef struct image {
  int fd;
  uint64_t file_size;
  const machine_rules *rules; /* NULL: a machine without relocation rules here */
  phdr_t *ph;
  unsigned phnum;
  char *reason;
  size_t reason_size;
  /* the dynamic section, as ld.so reads it */
  int has[K_COUNT];
  uint64_t val[K_COUNT];
  struct name_entry {
    int64_t tag; /* DT_NEEDED, DT_FILTER or DT_AUXILIARY: a library ld.so opens */
    uint64_t offset;
  } *needed;
  size_t needed_count;
  char *strtab; /* DT_STRSZ bytes */
  uint64_t strsz;
  sym_t *symtab;
  uint64_t symcount;
  int textrel;
  uint64_t dynamic_vaddr;
  shdr_t *sec; /* the section headers where usable, else NULL */
  unsigned nsec;
  char *shstr; /* their names, where readable */
  uint64_t shstr_size;
} image;

static int fail(image *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(image *im, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(im->reason, im->reason_size, fmt, ap);
  va_end(ap);
  return -1;
}

static int file_read(const image *im, uint64_t off, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = pread(im->fd, p, len, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    off += (uint64_t)n;
    len -= (size_t)n;
  }
  return 0;
}

/* The PT_LOAD segment holding [vaddr, vaddr + len) in memory (file_backed:
 * within its file bytes), or NULL. */
static const phdr_t *segment_of(const image *im, uint64_t vaddr, uint64_t len, int file_backed) {
  uint64_t end;
  if (__builtin_add_overflow(vaddr, len, &end)) return NULL;
  for (unsigned i = 0; i < im->phnum; i++) {
    const phdr_t *p = &im->ph[i];
    if (p->p_type != PT_LOAD) continue;
    uint64_t size = file_backed ? p->p_filesz : p->p_memsz;
    if (vaddr >= p->p_vaddr && end <= (uint64_t)p->p_vaddr + size) return p;
  }
  return NULL;
}

static int in_executable_segment(const image *im, uint64_t vaddr) {
  const phdr_t *p = segment_of(im, vaddr, 1, 0);
  return p && (p->p_flags & PF_X);
}

/* [vaddr, vaddr + len) is memory ld.so may write while relocating. */
static int writable(const image *im, uint64_t vaddr, uint64_t len) {
  const phdr_t *p = segment_of(im, vaddr, len, 0);
  return p && ((p->p_flags & PF_W) || im->textrel);
}

/* The file bytes behind [vaddr, vaddr + len) into buf: 0, or -1 when they
 * do not lie inside one PT_LOAD's file bytes or cannot be read. */
static int read_at(const image *im, uint64_t vaddr, void *buf, size_t len) {
  const phdr_t *p = segment_of(im, vaddr, len, 1);
  return p ? file_read(im, (uint64_t)p->p_offset + (vaddr - p->p_vaddr), buf, len) : -1;
}

/* A malloc'd copy of the file bytes behind [vaddr, vaddr + len), which must
 * lie inside one PT_LOAD's file bytes; NULL with the reason. */
static void *read_table(image *im, uint64_t vaddr, uint64_t len, const char *what) {
  const phdr_t *p = segment_of(im, vaddr, len, 1);
  if (!p) {
    fail(im, "%s [%#llx, %llu bytes] lies outside the file bytes of every PT_LOAD segment",
         what, (unsigned long long)vaddr, (unsigned long long)len);
    return NULL;
  }
  void *buf = malloc(len ? (size_t)len : 1);
  if (!buf) {
    fail(im, "out of memory reading %s [%llu bytes]", what, (unsigned long long)len);
    return NULL;
  }
  if (file_read(im, (uint64_t)p->p_offset + (vaddr - p->p_vaddr), buf, (size_t)len) != 0) {
    free(buf);
    fail(im, "cannot read %s (%s)", what, strerror(errno ? errno : EIO));
    return NULL;
  }
  return buf;
}

/* 32-bit words of the file read a window at a time (the GNU hash chains,
 * whose length only the walk tells). */
typedef struct word_window {
  uint64_t vaddr; /* first word held */
  size_t count;
  uint32_t words[1024];
} word_window;

static int read_word(image *im, word_window *w, uint64_t vaddr, uint32_t *out) {
  if (w->count && vaddr >= w->vaddr && vaddr - w->vaddr < 4 * (uint64_t)w->count &&
      (vaddr - w->vaddr) % 4 == 0) {
    *out = w->words[(vaddr - w->vaddr) / 4];
    return 0;
  }
  const phdr_t *p = segment_of(im, vaddr, 4, 1);
  if (!p) return -1;
  uint64_t left = ((uint64_t)p->p_vaddr + p->p_filesz - vaddr) / 4;
  size_t n = left < 1024 ? (size_t)left : 1024;
  if (file_read(im, (uint64_t)p->p_offset + (vaddr - p->p_vaddr), w->words, n * 4) != 0)
    return -1;
  w->vaddr = vaddr;
  w->count = n;
  *out = w->words[0];
  return 0;
}

static const char *string_at(const image *im, uint64_t off) {
  return off < im->strsz ? im->strtab + off : NULL;
}

/* ---- the file header and the program headers ---- */

static int check_header(image *im, const ehdr_t *eh) {
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return fail(im, "not an ELF file (no ELF magic)");
  if (eh->e_ident[EI_CLASS] != ELF_CLASS_HOST)
    return fail(im, "ELF class [%u] is not this machine's [%u] (%d-bit)",
                (unsigned)eh->e_ident[EI_CLASS], (unsigned)ELF_CLASS_HOST,
                ELF_CLASS_HOST == ELFCLASS64 ? 64 : 32);
  if (eh->e_ident[EI_DATA] != ELF_DATA_HOST)
    return fail(im, "ELF byte order [%u] is not this machine's [%u] (%s-endian)",
                (unsigned)eh->e_ident[EI_DATA], (unsigned)ELF_DATA_HOST,
                ELF_DATA_HOST == ELFDATA2LSB ? "little" : "big");
  if (eh->e_ident[EI_VERSION] != EV_CURRENT || eh->e_version != EV_CURRENT)
    return fail(im, "ELF version [%u] is not [%u]", (unsigned)eh->e_version, (unsigned)EV_CURRENT);
  unsigned osabi = eh->e_ident[EI_OSABI];
  if (osabi != ELFOSABI_SYSV && osabi != ELFOSABI_GNU)
    return fail(im, "ELF OS ABI [%u] is neither System V [0] nor GNU/Linux [3]", osabi);
  if (osabi == ELFOSABI_SYSV && eh->e_ident[EI_ABIVERSION] != 0)
    return fail(im, "ELF ABI version [%u] of the System V ABI is not [0]",
                (unsigned)eh->e_ident[EI_ABIVERSION]);
  if (ELF_MACHINE_HOST != 0 && eh->e_machine != ELF_MACHINE_HOST)
    return fail(im, "ELF machine [%u] (%s) is not this machine's [%u] (%s): a module built "
                "for another architecture",
                (unsigned)eh->e_machine, machine_name(eh->e_machine),
                (unsigned)ELF_MACHINE_HOST, machine_name(ELF_MACHINE_HOST));
  if (eh->e_type != ET_DYN)
    return fail(im, "ELF type [%u] is not a shared object", (unsigned)eh->e_type);
  if (eh->e_phentsize != sizeof(phdr_t) || eh->e_phnum == 0 || eh->e_phnum == PN_XNUM)
    return fail(im, "program header table [%u entries of %u bytes] is malformed",
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
      fail(im, "%s segment %u's file range [%llu, %llu) lies past the end of the file "
           "[%llu bytes] (truncated?)",
           segment_name(p->p_type), i, (unsigned long long)p->p_offset,
           (unsigned long long)p->p_offset + (unsigned long long)p->p_filesz,
           (unsigned long long)im->file_size);
      return NULL;
    }
    if (mapped && p->p_filesz > p->p_memsz) {
      fail(im, "segment %u's file size exceeds its memory size", i);
      return NULL;
    }
    if (p->p_type == PT_LOAD) {
      if (__builtin_add_overflow((uint64_t)p->p_vaddr, (uint64_t)p->p_memsz, &end) ||
          end > UINT64_MAX / 2) {
        fail(im, "PT_LOAD segment %u [%#llx, %llu bytes] ends past the address space", i,
             (unsigned long long)p->p_vaddr, (unsigned long long)p->p_memsz);
        return NULL;
      }
      if (prev_load && p->p_vaddr < prev_load->p_vaddr) {
        fail(im, "PT_LOAD segment %u's address [%#llx] is below the one before it [%#llx] "
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
    fail(im, "no PT_LOAD segment");
    return NULL;
  }
  if (dynamics != 1) {
    fail(im, "%u PT_DYNAMIC segments (a shared object has one)", dynamics);
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
    if (size && !segment_of(im, p->p_vaddr, size, file_backed)) {
      fail(im, "%s segment %u [%#llx, %llu bytes] lies outside every PT_LOAD segment",
           segment_name(p->p_type), i, (unsigned long long)p->p_vaddr,
           (unsigned long long)size);
      return NULL;
    }
    if (p->p_type == PT_TLS && p->p_align & (p->p_align - 1)) {
      fail(im, "PT_TLS alignment [%llu] is not a power of two", (unsigned long long)p->p_align);
      return NULL;
    }
  }
  if (dynamic->p_filesz < sizeof(dyn_t)) {
    fail(im, "the dynamic section is empty");
    return NULL;
  }
  return dynamic;
}

/* ---- the dynamic section ---- */

static int read_dynamic(image *im, const phdr_t *dynamic) {
  im->dynamic_vaddr = dynamic->p_vaddr;
  size_t count = dynamic->p_filesz / sizeof(dyn_t);
  dyn_t *dyn = read_table(im, dynamic->p_vaddr, count * sizeof(dyn_t), "the dynamic section");
  if (!dyn) return -1;
  size_t n = 0;
  while (n < count && dyn[n].d_tag != DT_NULL) n++;
  if (n == count) {
    free(dyn);
    return fail(im, "the dynamic section has no DT_NULL entry within its [%zu] entries", count);
  }
  im->needed = malloc((n ? n : 1) * sizeof *im->needed);
  if (!im->needed) {
    free(dyn);
    return fail(im, "out of memory reading the dynamic section");
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
    if (is_address_tag(tag) && !segment_of(im, value, 1, 0))
      rc = fail(im, "dynamic entry %zu: %s [%#llx] lies outside every PT_LOAD segment", i,
                tag_name(tag), (unsigned long long)value);
    else if (is_string_tag(tag) && im->has[K_STRSZ] && value >= im->val[K_STRSZ])
      rc = fail(im, "dynamic entry %zu: %s [%llu] lies outside the string table "
                "(DT_STRSZ [%llu] bytes)",
                i, tag_name(tag), (unsigned long long)value,
                (unsigned long long)im->val[K_STRSZ]);
  }
  free(dyn);
  return rc;
}

/* A tag ld.so dereferences whenever another is present. */
static int need_pair(image *im, int key, int64_t tag, int needed_key, int64_t needed_tag) {
  if (im->has[key] && !im->has[needed_key])
    return fail(im, "%s is present without %s", tag_name(tag), tag_name(needed_tag));
  return 0;
}

static int check_required(image *im) {
  if (!im->has[K_STRTAB] || !im->has[K_STRSZ] || !im->has[K_SYMTAB])
    return fail(im, "the dynamic section lacks %s", !im->has[K_STRTAB]  ? "DT_STRTAB"
                                                    : !im->has[K_STRSZ] ? "DT_STRSZ"
                                                                        : "DT_SYMTAB");
  if (!im->has[K_GNU_HASH] && !im->has[K_HASH])
    return fail(im, "the dynamic section has neither DT_GNU_HASH nor DT_HASH");
  if (im->has[K_SYMENT] && im->val[K_SYMENT] != sizeof(sym_t))
    return fail(im, "DT_SYMENT [%llu] is not [%zu]", (unsigned long long)im->val[K_SYMENT],
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
    return fail(im, "DT_RELAENT [%llu] is not [%zu]", (unsigned long long)im->val[K_RELAENT],
                sizeof(rela_t));
  if (im->has[K_RELENT] && im->val[K_RELENT] != sizeof(rel_t))
    return fail(im, "DT_RELENT [%llu] is not [%zu]", (unsigned long long)im->val[K_RELENT],
                sizeof(rel_t));
  if (im->has[K_RELRENT] && im->val[K_RELRENT] != sizeof(addr_t))
    return fail(im, "DT_RELRENT [%llu] is not [%zu]", (unsigned long long)im->val[K_RELRENT],
                sizeof(addr_t));
  if (im->has[K_PLTREL]) {
    uint64_t kind = im->val[K_PLTREL];
    int ok = im->rules ? kind == (uint64_t)(im->rules->rela ? DT_RELA : DT_REL)
                       : kind == DT_RELA || kind == DT_REL;
    if (!ok)
      return fail(im, "DT_PLTREL [%llu] is not %s", (unsigned long long)kind,
                  !im->rules ? "DT_RELA [7] or DT_REL [17]"
                  : im->rules->rela ? "DT_RELA [7]" : "DT_REL [17]");
  }
  /* the string table: every name ld.so reads ends inside it */
  im->strsz = im->val[K_STRSZ];
  if (im->strsz == 0) return fail(im, "DT_STRSZ is 0");
  im->strtab = read_table(im, im->val[K_STRTAB], im->strsz, "the string table (DT_STRTAB, DT_STRSZ)");
  if (!im->strtab) return -1;
  if (im->strtab[im->strsz - 1] != '\0')
    return fail(im, "the string table (DT_STRTAB [%#llx], DT_STRSZ [%llu]) does not end in a NUL",
                (unsigned long long)im->val[K_STRTAB], (unsigned long long)im->strsz);
  for (size_t i = 0; i < im->needed_count; i++)
    if (im->strtab[im->needed[i].offset] == '\0')
      return fail(im, "%s names the empty string (no library has that name)",
                  tag_name(im->needed[i].tag));
  return 0;
}

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
  uint32_t *head = read_table(im, at, 16, "the GNU hash table's header (DT_GNU_HASH)");
  if (!head) return -1;
  uint32_t nbuckets = head[0], symbias = head[1], nwords = head[2], shift = head[3];
  free(head);
  if (nbuckets == 0) return fail(im, "the GNU hash table (DT_GNU_HASH) has no buckets");
  if (nwords == 0 || (nwords & (nwords - 1)))
    return fail(im, "the GNU hash table's bloom filter size [%u] is not a power of two", nwords);
  if (shift >= 8 * sizeof(addr_t))
    return fail(im, "the GNU hash table's bloom shift [%u] is not below [%zu]", shift,
                8 * sizeof(addr_t));
  /* PT_LOAD ends are below 2^63 (check_segments): these sums cannot wrap */
  uint64_t buckets_at = at + 16 + (uint64_t)nwords * sizeof(addr_t);
  uint32_t *buckets = read_table(im, buckets_at, (uint64_t)nbuckets * 4,
                                 "the GNU hash table's buckets (DT_GNU_HASH)");
  if (!buckets) return -1;
  uint64_t chains_at = buckets_at + (uint64_t)nbuckets * 4;
  uint64_t end = symbias;
  word_window *window = malloc(sizeof *window);
  if (!window) {
    free(buckets);
    return fail(im, "out of memory reading the GNU hash table");
  }
  window->count = 0;
  int rc = 0;
  for (uint32_t b = 0; b < nbuckets && rc == 0; b++) {
    if (buckets[b] == 0) continue;
    if (buckets[b] < symbias) {
      rc = fail(im, "GNU hash bucket [%u] starts at symbol [%u], below the first hashed symbol "
                "[%u]",
                b, buckets[b], symbias);
      break;
    }
    for (uint64_t i = buckets[b];; i++) {
      uint32_t word;
      if (read_word(im, window, chains_at + 4 * (i - symbias), &word) != 0) {
        rc = fail(im, "GNU hash bucket [%u]'s chain runs past the file bytes of its PT_LOAD "
                  "segment (at symbol [%llu])",
                  b, (unsigned long long)i);
        break;
      }
      if (names) {
        const char *name = im->strtab + im->symtab[i].st_name;
        uint32_t h = gnu_hash(name);
        if ((h | 1u) != (word | 1u) || h % nbuckets != b) {
          rc = fail(im, "symbol [%llu] [%.64s] is not where the GNU hash table has it (bucket "
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
  uint32_t *head = read_table(im, at, 8, "the hash table's header (DT_HASH)");
  if (!head) return -1;
  uint32_t nbucket = head[0], nchain = head[1];
  free(head);
  if (nbucket == 0) return fail(im, "the hash table (DT_HASH) has no buckets");
  uint32_t *table = read_table(im, at + 8, ((uint64_t)nbucket + nchain) * 4,
                               "the hash table's buckets and chains (DT_HASH)");
  if (!table) return -1;
  const uint32_t *bucket = table, *chain = table + nbucket;
  uint64_t steps = 0;
  int rc = 0;
  for (uint32_t b = 0; b < nbucket && rc == 0; b++) {
    for (uint32_t i = bucket[b]; i != STN_UNDEF; i = chain[i]) {
      if (i >= nchain) {
        rc = fail(im, "the hash table (DT_HASH) reaches symbol [%u], past its [%u] chains", i,
                  nchain);
        break;
      }
      if (++steps > nchain) {
        rc = fail(im, "the hash table's chains (DT_HASH) loop");
        break;
      }
      if (names && sysv_hash(im->strtab + im->symtab[i].st_name) % nbucket != b) {
        rc = fail(im, "symbol [%u] [%.64s] is not where the hash table (DT_HASH) has it: "
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
    void *table = read_table(im, im->val[tables[t].key], size,
                             tag_name(tables[t].key == K_RELA  ? DT_RELA
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
static int check_symbols(image *im) {
  uint64_t gnu_count = 0, sysv_count = 0, reloc_count = 0;
  if (im->has[K_GNU_HASH] && check_gnu_hash(im, &gnu_count, 0) != 0) return -1;
  if (im->has[K_HASH] && check_sysv_hash(im, &sysv_count, 0) != 0) return -1;
  if (relocation_symbols(im, &reloc_count) != 0) return -1;
  im->symcount = gnu_count > sysv_count ? gnu_count : sysv_count;
  if (reloc_count > im->symcount) im->symcount = reloc_count;
  if (im->symcount == 0) im->symcount = 1; /* symbol 0, the undefined symbol */
  if (im->symcount > im->file_size / sizeof(sym_t))
    return fail(im, "the hash tables and relocations reach symbol [%llu], past what the file "
                "holds",
                (unsigned long long)im->symcount - 1);
  im->symtab = read_table(im, im->val[K_SYMTAB], im->symcount * sizeof(sym_t),
                          "the symbol table (DT_SYMTAB)");
  if (!im->symtab) return -1;
  for (uint64_t i = 0; i < im->symcount; i++) {
    const sym_t *s = &im->symtab[i];
    if (s->st_name >= im->strsz)
      return fail(im, "symbol [%llu]'s name [%u] lies outside the string table (DT_STRSZ [%llu])",
                  (unsigned long long)i, (unsigned)s->st_name, (unsigned long long)im->strsz);
    if (s->st_shndx == SHN_UNDEF || s->st_shndx >= SHN_LORESERVE) continue;
    unsigned type = ELFW_ST_TYPE(s->st_info);
#if !defined(__powerpc64__) /* ELFv1 function symbols name descriptors in data */
    if ((type == STT_FUNC || type == STT_GNU_IFUNC) && !in_executable_segment(im, s->st_value))
      return fail(im, "function symbol [%llu] [%.64s] at [%#llx] lies outside the executable "
                  "PT_LOAD segments",
                  (unsigned long long)i, im->strtab + s->st_name,
                  (unsigned long long)s->st_value);
#endif
    if (type == STT_OBJECT && !segment_of(im, s->st_value, s->st_size, 0))
      return fail(im, "object symbol [%llu] [%.64s] [%#llx, %llu bytes] lies outside every "
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
    const char *needed = string_at(im, im->needed[i].offset);
    if (needed && strcmp(needed, name) == 0) return 1;
  }
  return 0;
}

/* DT_VERNEED and DT_VERDEF chains as ld.so walks them (until a zero next
 * offset, whatever the counts say), then DT_VERSYM, whose indices must
 * name a version those chains define: ld.so indexes its version array with
 * them unchecked. */
static int check_versions(image *im) {
  unsigned ndx_high = 0;
  /* every record is at least 8 bytes and each step moves forward */
  uint64_t guard = im->file_size / 8 + 1;
  if (im->has[K_VERNEED]) {
    uint64_t at = im->val[K_VERNEED];
    for (uint64_t n = 0;; n++) {
      ELFW(Verneed) vn;
      if (n > guard || read_at(im, at, &vn, sizeof vn) != 0)
        return fail(im, "version need record %llu (DT_VERNEED) at [%#llx] lies outside the file "
                    "bytes of every PT_LOAD segment",
                    (unsigned long long)n, (unsigned long long)at);
      if (vn.vn_version != 1)
        return fail(im, "version need record %llu has version [%u], not [1]",
                    (unsigned long long)n, (unsigned)vn.vn_version);
      const char *file = string_at(im, vn.vn_file);
      if (!file)
        return fail(im, "version need record %llu names file [%u], outside the string table",
                    (unsigned long long)n, (unsigned)vn.vn_file);
      if (!is_needed_name(im, file)) /* ld.so asserts it is a dependency */
        return fail(im, "version need record %llu names [%.64s], which no DT_NEEDED entry names",
                    (unsigned long long)n, file);
      uint64_t aux = at + vn.vn_aux;
      for (uint64_t m = 0;; m++) {
        ELFW(Vernaux) va;
        if (m > guard || read_at(im, aux, &va, sizeof va) != 0)
          return fail(im, "version need record %llu's entry %llu lies outside the file bytes of "
                      "every PT_LOAD segment",
                      (unsigned long long)n, (unsigned long long)m);
        if (!string_at(im, va.vna_name))
          return fail(im, "version need record %llu's entry %llu names [%u], outside the "
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
      if (n > guard || read_at(im, at, &vd, sizeof vd) != 0)
        return fail(im, "version definition %llu (DT_VERDEF) at [%#llx] lies outside the file "
                    "bytes of every PT_LOAD segment",
                    (unsigned long long)n, (unsigned long long)at);
      if (vd.vd_version != 1)
        return fail(im, "version definition %llu has version [%u], not [1]",
                    (unsigned long long)n, (unsigned)vd.vd_version);
      if (read_at(im, at + vd.vd_aux, &va, sizeof va) != 0)
        return fail(im, "version definition %llu's name entry lies outside the file bytes of "
                    "every PT_LOAD segment",
                    (unsigned long long)n);
      if (!string_at(im, va.vda_name))
        return fail(im, "version definition %llu names [%u], outside the string table",
                    (unsigned long long)n, (unsigned)va.vda_name);
      if ((vd.vd_ndx & 0x7fffu) > ndx_high) ndx_high = vd.vd_ndx & 0x7fffu;
      if (vd.vd_next == 0) break;
      at += vd.vd_next;
    }
  }
  if (!im->has[K_VERSYM]) {
    if (ndx_high > 0) /* ld.so then reads DT_VERSYM's entry unchecked */
      return fail(im, "DT_VERNEED or DT_VERDEF defines versions but DT_VERSYM is missing");
    return 0;
  }
  uint16_t *versym = read_table(im, im->val[K_VERSYM], im->symcount * 2,
                                "the symbol version table (DT_VERSYM)");
  if (!versym) return -1;
  int rc = 0;
  for (uint64_t i = 0; i < im->symcount && rc == 0; i++)
    if ((versym[i] & 0x7fffu) > ndx_high)
      rc = fail(im, "symbol [%llu]'s version index [%u] (DT_VERSYM) is past the versions "
                "DT_VERNEED and DT_VERDEF define [%u]",
                (unsigned long long)i, versym[i] & 0x7fffu, ndx_high);
  free(versym);
  return rc;
}

/* ---- relocations ---- */

/* One relocation as ld.so applies it: where it writes, which symbol, the
 * type; table names the tag for messages. */
static int check_relocation(image *im, const char *table, uint64_t index, uint64_t offset,
                            uint64_t info, int64_t addend, int has_addend) {
  uint64_t sym = ELFW_R_SYM(info);
  uint32_t type = (uint32_t)ELFW_R_TYPE(info);
  if (sym >= im->symcount)
    return fail(im, "relocation %llu of %s names symbol [%llu], past the [%llu] symbols",
                (unsigned long long)index, table, (unsigned long long)sym,
                (unsigned long long)im->symcount);
  uint64_t size = sizeof(addr_t);
  if (im->rules) {
    if (type == im->rules->copy)
      return fail(im, "relocation %llu of %s is a copy relocation (executables only)",
                  (unsigned long long)index, table);
    if (type == im->rules->tlsdesc) size = 2 * sizeof(addr_t);
    if (type == im->rules->irelative && has_addend && !in_executable_segment(im, (uint64_t)addend))
      return fail(im, "relocation %llu of %s calls a resolver at [%#llx], outside the "
                  "executable PT_LOAD segments",
                  (unsigned long long)index, table, (unsigned long long)addend);
  }
  if (!writable(im, offset, size))
    return fail(im, "relocation %llu of %s writes at [%#llx], outside every writable PT_LOAD "
                "segment",
                (unsigned long long)index, table, (unsigned long long)offset);
  return 0;
}

/* A relocation table (RELA or REL entries) at tag `at`, `size` bytes. */
static int check_relocation_table(image *im, int64_t tag, uint64_t at, uint64_t size, int rela,
                                  uint64_t relative_count) {
  size_t entry = rela ? sizeof(rela_t) : sizeof(rel_t);
  if (size % entry != 0)
    return fail(im, "%s's size [%llu] is not a multiple of its entry size [%zu]", tag_name(tag),
                (unsigned long long)size, entry);
  void *table = read_table(im, at, size, tag_name(tag));
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
      rc = fail(im, "DT_RELACOUNT/DT_RELCOUNT says %llu relative relocations lead %s, but "
                "relocation %llu is of type [%u]",
                (unsigned long long)relative_count, tag_name(tag), (unsigned long long)i,
                (unsigned)ELFW_R_TYPE(info));
    else
      rc = check_relocation(im, tag_name(tag), i, offset, info, addend, rela);
  }
  free(table);
  return rc;
}

/* DT_RELR: even words are addresses, odd words bitmaps of the next 63 (31)
 * words; the first must be an address (ld.so starts writing from it). */
static int check_relr(image *im) {
  uint64_t size = im->val[K_RELRSZ];
  if (size % sizeof(addr_t) != 0)
    return fail(im, "DT_RELRSZ [%llu] is not a multiple of [%zu]", (unsigned long long)size,
                sizeof(addr_t));
  addr_t *relr = read_table(im, im->val[K_RELR], size, "DT_RELR");
  if (!relr) return -1;
  uint64_t where = 0;
  int have_base = 0, rc = 0;
  for (uint64_t i = 0; i < size / sizeof(addr_t) && rc == 0; i++) {
    addr_t word = relr[i];
    if ((word & 1) == 0) {
      where = word;
      have_base = 1;
      if (!writable(im, where, sizeof(addr_t)))
        rc = fail(im, "DT_RELR entry %llu writes at [%#llx], outside every writable PT_LOAD "
                  "segment",
                  (unsigned long long)i, (unsigned long long)where);
      where += sizeof(addr_t);
      continue;
    }
    if (!have_base) {
      rc = fail(im, "DT_RELR starts with a bitmap, not an address");
      break;
    }
    for (unsigned bit = 1; bit < 8 * sizeof(addr_t) && rc == 0; bit++)
      if ((word >> bit) & 1) {
        uint64_t at = where + (bit - 1) * sizeof(addr_t);
        if (!writable(im, at, sizeof(addr_t)))
          rc = fail(im, "DT_RELR entry %llu writes at [%#llx], outside every writable PT_LOAD "
                    "segment",
                    (unsigned long long)i, (unsigned long long)at);
      }
    where += (8 * sizeof(addr_t) - 1) * sizeof(addr_t);
  }
  free(relr);
  return rc;
}

static int check_relocations(image *im) {
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
  if (im->has[K_PLTGOT] && !segment_of(im, im->val[K_PLTGOT], 3 * sizeof(addr_t), 0))
    return fail(im, "DT_PLTGOT [%#llx] (three words) lies outside every PT_LOAD segment",
                (unsigned long long)im->val[K_PLTGOT]);
  return 0;
}

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
  rela_t *table = read_table(im, im->val[K_RELA], count * sizeof(rela_t), "DT_RELA");
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
  addr_t *relr = read_table(im, im->val[K_RELR], im->val[K_RELRSZ], "DT_RELR");
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
      if (read_at(im, off, &word, sizeof word) != 0)
        continue; /* in the zero-filled part: never relocated to anything */
      how[k] = 1;
      value[k] = word;
    }
  }
  free(relr);
  return 0;
}

/* A module's section headers, when it has usable ones (sstrip removes
 * them; ld.so never reads them): im->sec, or NULL. */
static void read_sections(image *im, const ehdr_t *eh) {
  if (eh->e_shoff == 0 || eh->e_shnum == 0 || eh->e_shentsize != sizeof(shdr_t)) return;
  uint64_t end;
  uint64_t bytes = (uint64_t)eh->e_shnum * sizeof(shdr_t);
  if (__builtin_add_overflow((uint64_t)eh->e_shoff, bytes, &end) || end > im->file_size) return;
  shdr_t *sh = malloc(bytes);
  if (!sh) return;
  if (file_read(im, eh->e_shoff, sh, bytes) != 0) {
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
  if (file_read(im, names->sh_offset, im->shstr, names->sh_size) != 0 ||
      im->shstr[names->sh_size - 1] != '\0') {
    free(im->shstr);
    im->shstr = NULL;
    return;
  }
  im->shstr_size = names->sh_size;
}

/* The name of the section holding code address `at`, or NULL. */
static const char *code_section_name(const image *im, uint64_t at, uint64_t *start) {
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
static int check_sections(image *im) {
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
        return fail(im, "section %u (type [%#x], at [%#llx], %llu bytes) has no matching %s "
                    "in the dynamic section",
                    i, (unsigned)sh->sh_type, (unsigned long long)sh->sh_addr,
                    (unsigned long long)sh->sh_size, tag_name(exact[e].tag));
    }
    if ((sh->sh_type == SHT_RELA && rela_kind != 0) || (sh->sh_type == SHT_REL && rela_kind != 1)) {
      int rela = sh->sh_type == SHT_RELA;
      int table = rela ? K_RELA : K_REL, size = rela ? K_RELASZ : K_RELSZ;
      if (!within(sh->sh_addr, sh->sh_size, im->has[table], im->val[table], im->val[size]) &&
          !within(sh->sh_addr, sh->sh_size, im->has[K_JMPREL], im->val[K_JMPREL],
                  im->val[K_PLTRELSZ]))
        return fail(im, "relocation section %u [%#llx, %llu bytes] lies outside %s and "
                    "DT_JMPREL: the dynamic section leaves relocations unapplied",
                    i, (unsigned long long)sh->sh_addr, (unsigned long long)sh->sh_size,
                    rela ? "DT_RELA" : "DT_REL");
    }
    if (sh->sh_type == SHT_DYNSYM) {
      if (im->val[K_SYMTAB] != sh->sh_addr || im->symcount > sh->sh_size / sizeof(sym_t))
        return fail(im, "DT_SYMTAB [%#llx] with [%llu] hashed symbols disagrees with the "
                    "symbol section at [%#llx] of [%llu] symbols",
                    (unsigned long long)im->val[K_SYMTAB], (unsigned long long)im->symcount,
                    (unsigned long long)sh->sh_addr,
                    (unsigned long long)(sh->sh_size / sizeof(sym_t)));
      const shdr_t *str = sh->sh_link < im->nsec ? &im->sec[sh->sh_link] : NULL;
      if (str && str->sh_type == SHT_STRTAB &&
          (im->val[K_STRTAB] != str->sh_addr || im->strsz != str->sh_size))
        return fail(im, "DT_STRTAB [%#llx] / DT_STRSZ [%llu] disagree with the string section "
                    "at [%#llx] of [%llu] bytes",
                    (unsigned long long)im->val[K_STRTAB], (unsigned long long)im->strsz,
                    (unsigned long long)str->sh_addr, (unsigned long long)str->sh_size);
    }
    if (sh->sh_type == SHT_DYNAMIC && sh->sh_addr != im->dynamic_vaddr)
      return fail(im, "PT_DYNAMIC [%#llx] disagrees with the dynamic section at [%#llx]",
                  (unsigned long long)im->dynamic_vaddr, (unsigned long long)sh->sh_addr);
  }
  return 0;
}

/* 1 when a function symbol of the module's full symbol table (SHT_SYMTAB,
 * which strip removes) or of its dynamic one starts at `at`; 0 when none
 * does; -1 when the module has no full symbol table to tell. */
static int function_starts_at(image *im, uint64_t at) {
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
      if (file_read(im, sh->sh_offset + done * sizeof(sym_t), chunk, n * sizeof(sym_t)) != 0)
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

/* The code ld.so calls while loading and at exit: DT_INIT and DT_FINI
 * inside executable segments (any function may be one: -Wl,-init), each
 * DT_INIT_ARRAY / DT_FINI_ARRAY slot relocated to an address inside them
 * (an unrelocated slot would be called at its link-time address). */
static int check_init_fini(image *im) {
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
      if (!in_executable_segment(im, at)) {
        rc = fail(im, "%s [%#llx] lies outside the executable PT_LOAD segments",
                  tag_name(code[c].tag), (unsigned long long)at);
        break;
      }
      /* the .init and .fini sections are one function each; anywhere else
       * (-Wl,-init=f) it must be a function the symbol tables know, where
       * the module still has its full symbol table */
      uint64_t start = 0;
      const char *section = code_section_name(im, at, &start);
      int init_section = section && (!strcmp(section, ".init") || !strcmp(section, ".fini"));
      if (init_section ? at != start : function_starts_at(im, at) == 0) {
        rc = fail(im, "%s [%#llx] is not the start of a function (%s%s)",
                  tag_name(code[c].tag), (unsigned long long)at,
                  init_section ? "inside section " : "no function symbol there",
                  init_section ? section : "");
        break;
      }
    } else {
      if (size % sizeof(addr_t) != 0 || !writable(im, at, size)) {
        rc = fail(im, "%s [%#llx, %llu bytes] is not whole words inside a writable PT_LOAD "
                  "segment",
                  tag_name(code[c].tag), (unsigned long long)at, (unsigned long long)size);
        break;
      }
      uint64_t slots = size / sizeof(addr_t);
      unsigned char *how = malloc(slots ? (size_t)slots : 1);
      uint64_t *value = malloc((slots ? (size_t)slots : 1) * sizeof *value);
      if (!how || !value)
        rc = fail(im, "out of memory reading %s", tag_name(code[c].tag));
      else if (relocated_values(im, at, slots, how, value) != 0)
        rc = -1;
      for (uint64_t slot = 0; slot < slots && rc == 0; slot++) {
        if (how[slot] == 0)
          rc = fail(im, "%s entry %llu is never relocated (ld.so would call the raw address)",
                    tag_name(code[c].tag), (unsigned long long)slot);
        else if (how[slot] == 1 && !in_executable_segment(im, value[slot]))
          rc = fail(im, "%s entry %llu [%#llx] lies outside the executable PT_LOAD segments",
                    tag_name(code[c].tag), (unsigned long long)slot,
                    (unsigned long long)value[slot]);
      }
      free(how);
      free(value);
    }
  }
  if (rc == 0 && im->has[K_PREINIT_ARRAY] &&
      !segment_of(im, im->val[K_PREINIT_ARRAY], im->val[K_PREINIT_ARRAYSZ], 0))
    rc = fail(im, "DT_PREINIT_ARRAY lies outside every PT_LOAD segment");
  return rc;
}

int apx__elf_check(int fd, uint64_t file_size, char *reason, size_t reason_size) {
  image im;
  memset(&im, 0, sizeof im);
  im.fd = fd;
  im.file_size = file_size;
  im.reason = reason;
  im.reason_size = reason_size;
  ehdr_t eh;
  if (file_size < sizeof eh || file_read(&im, 0, &eh, sizeof eh) != 0)
    return fail(&im, "[%llu] bytes: too short for an ELF header", (unsigned long long)file_size);
  if (check_header(&im, &eh) != 0) return -1;
  for (size_t i = 0; i < sizeof machines / sizeof machines[0]; i++)
    if (machines[i].machine == eh.e_machine) im.rules = &machines[i];
  uint64_t ph_bytes = (uint64_t)eh.e_phnum * sizeof(phdr_t), ph_end;
  if (__builtin_add_overflow((uint64_t)eh.e_phoff, ph_bytes, &ph_end) || ph_end > file_size)
    return fail(&im, "program headers [%llu, %llu) lie past the end of the file [%llu bytes] "
                "(truncated?)",
                (unsigned long long)eh.e_phoff, (unsigned long long)ph_end,
                (unsigned long long)file_size);
  im.ph = malloc(ph_bytes);
  if (!im.ph) return fail(&im, "out of memory reading program headers");
  im.phnum = eh.e_phnum;
  read_sections(&im, &eh);
  int rc = -1;
  const phdr_t *dynamic;
  if (file_read(&im, eh.e_phoff, im.ph, ph_bytes) != 0)
    fail(&im, "cannot read the program headers");
  else if ((dynamic = check_segments(&im)) != NULL && read_dynamic(&im, dynamic) == 0 &&
           check_required(&im) == 0 && check_symbols(&im) == 0 && check_versions(&im) == 0 &&
           check_relocations(&im) == 0 && check_init_fini(&im) == 0 &&
           check_sections(&im) == 0)
    rc = 0;
  free(im.ph);
  free(im.needed);
  free(im.strtab);
  free(im.symtab);
  free(im.sec);
  free(im.shstr);
  return rc;
}
