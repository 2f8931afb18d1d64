/* SPDX-License-Identifier: Apache-2.0 */
/* The ELF checks (elf_check.c): reading the module's file through its
 * PT_LOAD segments. Every read is a pread of the open descriptor (no
 * mapping, so a file truncated meanwhile cannot fault), and every address
 * is looked up in the segments first. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elf_image.h"

int apx__elf_fail(image *im, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(im->reason, im->reason_size, fmt, ap);
  va_end(ap);
  return -1;
}

int apx__elf_file_read(const image *im, uint64_t off, void *buf, size_t len) {
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
const phdr_t *apx__elf_segment_of(const image *im, uint64_t vaddr, uint64_t len, int file_backed) {
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

int apx__elf_in_executable_segment(const image *im, uint64_t vaddr) {
  const phdr_t *p = apx__elf_segment_of(im, vaddr, 1, 0);
  return p && (p->p_flags & PF_X);
}

/* [vaddr, vaddr + len) is memory ld.so may write while relocating. */
int apx__elf_writable(const image *im, uint64_t vaddr, uint64_t len) {
  const phdr_t *p = apx__elf_segment_of(im, vaddr, len, 0);
  return p && ((p->p_flags & PF_W) || im->textrel);
}

/* The file bytes behind [vaddr, vaddr + len) into buf: 0, or -1 when they
 * do not lie inside one PT_LOAD's file bytes or cannot be read. */
int apx__elf_read_at(const image *im, uint64_t vaddr, void *buf, size_t len) {
  const phdr_t *p = apx__elf_segment_of(im, vaddr, len, 1);
  return p ? apx__elf_file_read(im, (uint64_t)p->p_offset + (vaddr - p->p_vaddr), buf, len) : -1;
}

/* A malloc'd copy of the file bytes behind [vaddr, vaddr + len), which must
 * lie inside one PT_LOAD's file bytes; NULL with the reason. */
void *apx__elf_read_table(image *im, uint64_t vaddr, uint64_t len, const char *what) {
  const phdr_t *p = apx__elf_segment_of(im, vaddr, len, 1);
  if (!p) {
    apx__elf_fail(im, "%s [%#llx, %llu bytes] lies outside the file bytes of every PT_LOAD segment",
                  what, (unsigned long long)vaddr, (unsigned long long)len);
    return NULL;
  }
  void *buf = malloc(len ? (size_t)len : 1);
  if (!buf) {
    apx__elf_fail(im, "out of memory reading %s [%llu bytes]", what, (unsigned long long)len);
    return NULL;
  }
  if (apx__elf_file_read(im, (uint64_t)p->p_offset + (vaddr - p->p_vaddr), buf, (size_t)len) != 0) {
    free(buf);
    apx__elf_fail(im, "cannot read %s (%s)", what, strerror(errno ? errno : EIO));
    return NULL;
  }
  return buf;
}

int apx__elf_read_word(image *im, word_window *w, uint64_t vaddr, uint32_t *out) {
  if (w->count && vaddr >= w->vaddr && vaddr - w->vaddr < 4 * (uint64_t)w->count &&
      (vaddr - w->vaddr) % 4 == 0) {
    *out = w->words[(vaddr - w->vaddr) / 4];
    return 0;
  }
  const phdr_t *p = apx__elf_segment_of(im, vaddr, 4, 1);
  if (!p) return -1;
  uint64_t left = ((uint64_t)p->p_vaddr + p->p_filesz - vaddr) / 4;
  size_t n = left < 1024 ? (size_t)left : 1024;
  if (apx__elf_file_read(im, (uint64_t)p->p_offset + (vaddr - p->p_vaddr), w->words, n * 4) != 0)
    return -1;
  w->vaddr = vaddr;
  w->count = n;
  *out = w->words[0];
  return 0;
}

const char *apx__elf_string_at(const image *im, uint64_t off) {
  return off < im->strsz ? im->strtab + off : NULL;
}
