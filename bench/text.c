/* SPDX-License-Identifier: Apache-2.0 */
/* Growing text: the Markdown, HTML and comparison renderers append to one
 * buffer and hand the result on (bench.h, "growing text"). */
#include "bench.h"

#include <stdarg.h>
#include <stdlib.h>

void bench_text_vappend(bench_text *t, const char *fmt, va_list ap) {
  if (t->failed)
    return;
  va_list copy;
  va_copy(copy, ap);
  int need = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (need < 0) {
    t->failed = 1;
    return;
  }
  if (t->len + (size_t)need + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 4096;
    while (t->len + (size_t)need + 1 > cap)
      cap *= 2;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->failed = 1;
      return;
    }
    t->data = grown;
    t->cap = cap;
  }
  vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
  t->len += (size_t)need;
}

void bench_text_append(bench_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bench_text_vappend(t, fmt, ap);
  va_end(ap);
}

char *bench_text_finish(bench_text *t) {
  if (t->failed || !t->data) {
    free(t->data);
    t->data = NULL;
    return NULL;
  }
  char *out = t->data;
  t->data = NULL;
  return out;
}
