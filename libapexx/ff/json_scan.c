/* SPDX-License-Identifier: Apache-2.0 */
/* The safetensors header's text, scanned before cJSON reads it
 * (apx__ff_json_scan): strict JSON (RFC 8259) within the limits of
 * docs/ff_weights.md, Limits. cJSON accepts all of it, so a scanned header
 * that cJSON then fails on has run out of memory: no second parse is needed
 * to tell the two apart, and the error position is the scan's own (cJSON's
 * is one pointer for the whole process). */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "ff_internal.h"

#define STR_(x) #x
#define STR(x) STR_(x) /* a limit's value inside a message */

static int is_json_space(unsigned char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

typedef struct json_scan {
  const unsigned char *start, *at, *end;
  long items;          /* values and keys so far */
  const char *problem; /* the first failure */
  int over_limit;      /* the failure is a limit, not bad JSON */
} json_scan;

static int scan_fail(json_scan *s, const char *problem) {
  s->problem = problem;
  return 0;
}

static int scan_limit(json_scan *s, const char *problem) {
  s->over_limit = 1;
  return scan_fail(s, problem);
}

static void scan_space(json_scan *s) {
  while (s->at < s->end && is_json_space(*s->at))
    s->at++;
}

static int hex4(const unsigned char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned char ch = p[i];
    unsigned digit = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
                     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                     : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10)
                                              : 16u;
    if (digit == 16u)
      return 0;
    v = v << 4 | digit;
  }
  *out = v;
  return 1;
}

static int count_item(json_scan *s) {
  if (++s->items > APX__FF_MAX_HEADER_VALUES)
    return scan_limit(s, "more than " STR(APX__FF_MAX_HEADER_VALUES) " values and keys");
  return 1;
}

static int scan_string(json_scan *s) {
  if (!count_item(s))
    return 0;
  s->at++; /* the opening quote */
  while (s->at < s->end) {
    unsigned char ch = *s->at;
    if (ch == '"') {
      s->at++;
      return 1;
    }
    if (ch < 0x20)
      return scan_fail(s, "a control character inside a string");
    if (ch != '\\') {
      s->at++;
      continue;
    }
    if (s->end - s->at < 2)
      break;
    unsigned char esc = s->at[1];
    if (esc == '"' || esc == '\\' || esc == '/' || esc == 'b' || esc == 'f' || esc == 'n' ||
        esc == 'r' || esc == 't') {
      s->at += 2;
      continue;
    }
    unsigned code, low;
    if (esc != 'u')
      return scan_fail(s, "an unknown escape inside a string");
    if (s->end - s->at < 6 || !hex4(s->at + 2, &code))
      return scan_fail(s, "a \\u escape without four hex digits");
    /* a NUL would end the name cJSON hands back: "T\u0000x" would read as
     * "T" */
    if (code == 0)
      return scan_fail(s, "\\u0000 (NUL) inside a string");
    if (code >= 0xDC00 && code <= 0xDFFF)
      return scan_fail(s, "a \\u escape of a lone low surrogate");
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (s->end - s->at < 12 || s->at[6] != '\\' || s->at[7] != 'u' || !hex4(s->at + 8, &low) ||
          low < 0xDC00 || low > 0xDFFF)
        return scan_fail(s, "a \\u escape of a high surrogate without its low half");
      s->at += 12;
    } else {
      s->at += 6;
    }
  }
  return scan_fail(s, "a string that is not closed");
}

static int is_digit(const json_scan *s, const unsigned char *p) {
  return p < s->end && *p >= '0' && *p <= '9';
}

static int scan_number(json_scan *s) {
  const unsigned char *p = s->at;
  if (*p == '-')
    p++;
  if (!is_digit(s, p))
    return scan_fail(s, "a '-' without digits");
  if (*p == '0')
    p++;
  else
    while (is_digit(s, p))
      p++;
  if (p < s->end && *p == '.') {
    if (!is_digit(s, ++p))
      return scan_fail(s, "a number without digits after its '.'");
    while (is_digit(s, p))
      p++;
  }
  if (p < s->end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < s->end && (*p == '+' || *p == '-'))
      p++;
    if (!is_digit(s, p))
      return scan_fail(s, "a number without digits in its exponent");
    while (is_digit(s, p))
      p++;
  }
  if (p - s->at > APX__FF_MAX_NUMBER_CHARS)
    return scan_limit(s, "a number of more than " STR(APX__FF_MAX_NUMBER_CHARS) " characters");
  s->at = p;
  return 1;
}

static int scan_literal(json_scan *s, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(s->end - s->at) < n || memcmp(s->at, word, n) != 0)
    return scan_fail(s, "an unexpected character");
  s->at += n;
  return 1;
}

static int scan_value(json_scan *s, int depth) {
  scan_space(s);
  if (s->at >= s->end)
    return scan_fail(s, "the text ends where a value should start");
  unsigned char ch = *s->at;
  if (ch == '"')
    return scan_string(s);
  if (!count_item(s))
    return 0;
  if (ch == '{' || ch == '[') {
    if (depth >= APX__FF_MAX_HEADER_DEPTH)
      return scan_limit(s, "objects and arrays nested more than " STR(APX__FF_MAX_HEADER_DEPTH)
                           " deep");
    int object = ch == '{';
    unsigned char close = object ? '}' : ']';
    s->at++;
    scan_space(s);
    if (s->at < s->end && *s->at == close) {
      s->at++;
      return 1;
    }
    for (int items = 1;; items++) {
      if (!object && items > APX__FF_MAX_ARRAY_ITEMS)
        return scan_limit(s, "an array of more than " STR(APX__FF_MAX_ARRAY_ITEMS) " items");
      if (object) {
        scan_space(s);
        if (s->at >= s->end || *s->at != '"')
          return scan_fail(s, "a key that is not a string");
        if (!scan_string(s))
          return 0;
        scan_space(s);
        if (s->at >= s->end || *s->at != ':')
          return scan_fail(s, "a key without ':'");
        s->at++;
      }
      if (!scan_value(s, depth + 1))
        return 0;
      scan_space(s);
      if (s->at < s->end && *s->at == ',') {
        s->at++;
        continue;
      }
      if (s->at < s->end && *s->at == close) {
        s->at++;
        return 1;
      }
      return scan_fail(s, object ? "no ',' or '}' after a member" : "no ',' or ']' after an item");
    }
  }
  if (ch == 't')
    return scan_literal(s, "true");
  if (ch == 'f')
    return scan_literal(s, "false");
  if (ch == 'n')
    return scan_literal(s, "null");
  if (ch == '-' || (ch >= '0' && ch <= '9'))
    return scan_number(s);
  return scan_fail(s, "an unexpected character");
}

int apx__ff_json_scan(const char *text, size_t bytes, const char **problem, size_t *at,
                      int *over_limit) {
  json_scan s = {(const unsigned char *)text, (const unsigned char *)text,
                 (const unsigned char *)text + bytes, 0, NULL, 0};
  int ok = scan_value(&s, 0);
  if (ok) {
    scan_space(&s);
    if (s.at != s.end) {
      ok = 0;
      s.problem = "bytes after its JSON value";
    }
  }
  *problem = s.problem;
  *at = (size_t)(s.at - s.start);
  *over_limit = s.over_limit;
  return ok;
}
