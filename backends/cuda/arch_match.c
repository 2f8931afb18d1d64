/* SPDX-License-Identifier: Apache-2.0 */
/* The module's arch list against a device's compute capability
 * (arch_match.h; CUDA's rules: docs/gpus.md, What a build carries). */
#include "arch_match.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct arch_entry {
  int ptx;      /* compute_XY (else sm_XY) */
  int cc;       /* XY: major * 10 + minor */
  char variant; /* 'a', 'f' or 0 */
};

static void put(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t size, const char *fmt, ...) {
  if (!buf || size == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

/* One entry of `len` characters at s; 0 when it is not sm_XY or compute_XY
 * (XY two or three digits, the first not 0, then at most one a or f). */
static int parse_entry(const char *s, size_t len, struct arch_entry *e) {
  size_t i;
  if (len > 3 && strncmp(s, "sm_", 3) == 0) {
    e->ptx = 0;
    i = 3;
  } else if (len > 8 && strncmp(s, "compute_", 8) == 0) {
    e->ptx = 1;
    i = 8;
  } else {
    return 0;
  }
  size_t digits = 0;
  e->cc = 0;
  while (i < len && s[i] >= '0' && s[i] <= '9' && digits < 3) {
    if (digits == 0 && s[i] == '0') return 0;
    e->cc = e->cc * 10 + (s[i] - '0');
    i++;
    digits++;
  }
  if (digits < 2) return 0;
  e->variant = 0;
  if (i < len && (s[i] == 'a' || s[i] == 'f')) e->variant = s[i++];
  return i == len;
}

/* Does a device of cc dev (major * 10 + minor) run e? */
static int runs(const struct arch_entry *e, int dev) {
  const int same_major = dev / 10 == e->cc / 10 && dev % 10 >= e->cc % 10;
  if (e->variant == 'a') return dev == e->cc;
  if (!e->ptx || e->variant == 'f') return same_major;
  return dev >= e->cc; /* PTX JIT-compiles for its own cc and every later one */
}

int cuda_arch_match(int major, int minor, const char *carried, char *chosen, size_t chosen_size,
                    int *code_arch, char *reason, size_t reason_size) {
  put(chosen, chosen_size, "%s", "");
  put(reason, reason_size, "%s", "");
  if (code_arch) *code_arch = 0;
  if (major < 1 || minor < 0 || minor > 9) {
    put(reason, reason_size, "compute capability [%d.%d] is not one", major, minor);
    return 0;
  }
  const char *list = carried ? carried : "";
  const int dev = major * 10 + minor;
  /* the best fitting SASS entry, else the best fitting PTX one */
  const char *best = NULL;
  size_t best_len = 0;
  struct arch_entry best_e = {0, 0, 0};
  int entries = 0;
  for (const char *p = list; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    size_t len = strcspn(p, " ");
    struct arch_entry e;
    if (!parse_entry(p, len, &e)) {
      put(reason, reason_size,
          "the module's arch list [%s] has an entry [%.*s] that is not sm_XY or compute_XY", list,
          (int)len, p);
      return 0;
    }
    entries++;
    if (runs(&e, dev) &&
        (!best || (best_e.ptx && !e.ptx) || (best_e.ptx == e.ptx && e.cc > best_e.cc))) {
      best = p;
      best_len = len;
      best_e = e;
    }
    p += len;
  }
  if (entries == 0) {
    put(reason, reason_size, "the module's arch list is empty: which devices it runs on is unknown");
    return 0;
  }
  if (!best) {
    put(reason, reason_size,
        "the module has no code for this device's cc %d.%d: it carries [%s] (SASS sm_XY runs on "
        "cc X.y, y >= Y; PTX compute_XY is JIT-compiled for cc >= X.Y); build with %d in "
        "--with-cuda-arch, or the default list (docs/gpus.md)",
        major, minor, list, dev);
    return 0;
  }
  put(chosen, chosen_size, "%.*s", (int)best_len, best);
  if (code_arch) *code_arch = best_e.cc;
  return 1;
}
