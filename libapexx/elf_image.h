/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks of a module (apx__elf_check, elf_check.c): what their
 * files share. The host's ELF class, byte order and machine, the ELF types
 * of that class, the relocation rules of the machines known here, the tags
 * of the dynamic section kept by value, and the image: the open file, its
 * program headers and what the checks have read so far. */
#ifndef APX_CORE_ELF_IMAGE_H
#define APX_CORE_ELF_IMAGE_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>

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

/* The tags kept by value (the last of each wins, as in ld.so). */
enum {
  K_PLTRELSZ, K_PLTGOT, K_HASH, K_STRTAB, K_SYMTAB, K_RELA, K_RELASZ, K_RELAENT, K_STRSZ,
  K_SYMENT, K_INIT, K_FINI, K_REL, K_RELSZ, K_RELENT, K_PLTREL, K_TEXTREL, K_JMPREL,
  K_INIT_ARRAY, K_FINI_ARRAY, K_INIT_ARRAYSZ, K_FINI_ARRAYSZ, K_PREINIT_ARRAY,
  K_PREINIT_ARRAYSZ, K_FLAGS, K_RELRSZ, K_RELR, K_RELRENT, K_GNU_HASH, K_VERSYM, K_VERDEF,
  K_VERNEED, K_RELACOUNT, K_RELCOUNT, K_COUNT
};

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

/* ---- elf_image.c: the file through its segments ---- */
/* The reason into im->reason (printf format); returns -1. */
int apx__elf_fail(image *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* len file bytes at off into buf: 0, or -1 (short or failed read). */
int apx__elf_file_read(const image *im, uint64_t off, void *buf, size_t len);
/* The PT_LOAD segment holding [vaddr, vaddr + len) in memory (file_backed:
 * within its file bytes), or NULL. */
const phdr_t *apx__elf_segment_of(const image *im, uint64_t vaddr, uint64_t len, int file_backed);
/* vaddr lies in an executable PT_LOAD segment. */
int apx__elf_in_executable_segment(const image *im, uint64_t vaddr);
/* [vaddr, vaddr + len) is memory ld.so may write while relocating. */
int apx__elf_writable(const image *im, uint64_t vaddr, uint64_t len);
/* The file bytes behind [vaddr, vaddr + len) into buf: 0, or -1 when they
 * do not lie inside one PT_LOAD's file bytes or cannot be read. */
int apx__elf_read_at(const image *im, uint64_t vaddr, void *buf, size_t len);
/* A malloc'd copy of the file bytes behind [vaddr, vaddr + len), which must
 * lie inside one PT_LOAD's file bytes; NULL with the reason. */
void *apx__elf_read_table(image *im, uint64_t vaddr, uint64_t len, const char *what);
/* 32-bit words of the file read a window at a time (the GNU hash chains,
 * whose length only the walk tells). */
typedef struct word_window {
  uint64_t vaddr; /* first word held */
  size_t count;
  uint32_t words[1024];
} word_window;
int apx__elf_read_word(image *im, word_window *w, uint64_t vaddr, uint32_t *out);
/* The string at offset off of the string table, or NULL past its end. */
const char *apx__elf_string_at(const image *im, uint64_t off);

/* ---- the checks, in the order apx__elf_check runs them ---- */
/* elf_dynamic.c: the name of a dynamic tag ("DT_?" for one not named). */
const char *apx__elf_tag_name(int64_t tag);
/* elf_dynamic.c: the entries of PT_DYNAMIC into im, their addresses and
 * string offsets checked; then the tags ld.so needs, the entry sizes and
 * the string table. */
int apx__elf_read_dynamic(image *im, const phdr_t *dynamic);
int apx__elf_check_required(image *im);
/* elf_symbols.c: the hash tables, the symbols they and the relocations
 * reach (im->symtab); the version chains and DT_VERSYM. */
int apx__elf_check_symbols(image *im);
int apx__elf_check_versions(image *im);
/* elf_relocations.c: every relocation table ld.so applies. */
int apx__elf_check_relocations(image *im);
/* elf_init_fini.c: DT_INIT, DT_FINI and the constructor and destructor
 * arrays. */
int apx__elf_check_init_fini(image *im);
/* elf_sections.c: the section headers into im->sec where usable (never
 * fails); the tables of the dynamic section against them; the name of
 * the code section holding at (its start in *start), or NULL; whether a
 * function starts at at (1, 0, or -1: no full symbol table to tell). */
void apx__elf_read_sections(image *im, const ehdr_t *eh);
int apx__elf_check_sections(image *im);
const char *apx__elf_code_section_name(const image *im, uint64_t at, uint64_t *start);
int apx__elf_function_starts_at(image *im, uint64_t at);

#endif
