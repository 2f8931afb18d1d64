/* SPDX-License-Identifier: Apache-2.0 */
/* Every message (apx_last_error, a backend's reason, the configuration's
 * warnings and overrides) and every log line is one printable line of
 * valid UTF-8, whatever bytes the input held (issue 30 item 16): control
 * bytes are escaped where libapexx formats messages (libapexx/error.c,
 * log.c), and the 1023-byte cut never splits a character or an escape. */
#define _GNU_SOURCE
#include "coretest.h"

#include <fcntl.h>

/* A NUL-terminated text is valid UTF-8 with no C0 control, DEL, C1
 * control or U+2028/U+2029; returns a description of the first fault, or
 * NULL. */
static const char *not_printable(const char *text) {
  static char why[128];
  const unsigned char *p = (const unsigned char *)text;
  while (*p) {
    size_t n = *p < 0x80 ? 1 : *p >= 0xc2 && *p <= 0xdf ? 2 : *p >= 0xe0 && *p <= 0xef ? 3
                              : *p >= 0xf0 && *p <= 0xf4 ? 4 : 0;
    uint32_t c = n == 1 ? *p : n == 2 ? *p & 0x1fu : n == 3 ? *p & 0x0fu : *p & 0x07u;
    for (size_t i = 1; i < n; i++) {
      if ((p[i] & 0xc0) != 0x80) n = 0;
      if (!n) break;
      c = (c << 6) | (p[i] & 0x3fu);
    }
    if (n == 0 || (n == 2 && c < 0x80) || (n == 3 && c < 0x800) || (n == 4 && c < 0x10000) ||
        c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
      snprintf(why, sizeof why, "invalid UTF-8 at byte %zu", (size_t)(p - (const unsigned char *)text));
      return why;
    }
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == 0x2028 || c == 0x2029) {
      snprintf(why, sizeof why, "control U+%04X at byte %zu", (unsigned)c,
               (size_t)(p - (const unsigned char *)text));
      return why;
    }
    p += n;
  }
  return NULL;
}

#define ck_assert_printable(text)                                                                  \
  do {                                                                                             \
    const char *fault_ = not_printable(text);                                                      \
    ck_assert_msg(fault_ == NULL, "%s in [%s]", fault_, (text));                                   \
  } while (0)

START_TEST(control_bytes_in_a_path_are_escaped) {
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, "/nonexistent/\x1b[2J\x1b[31mred\nfake line\t\x7f.ini"),
                   APX_ERR_CONFIG);
  ck_assert_printable(apx_last_error());
  ck_assert_contains(apx_last_error(), "/nonexistent/\\x1b[2J\\x1b[31mred\\nfake line\\t\\x7f.ini");
}
END_TEST

START_TEST(bytes_that_are_not_utf8_are_escaped) {
  apx_context *ctx = NULL;
  /* Latin-1 e-acute, a stray continuation byte, an overlong '/', a UTF-16
   * surrogate, a C1 CSI (U+009B) and U+2028, then a valid e-acute */
  ck_assert_int_eq(apx_open(&ctx, "/nonexistent/caf\xe9-\x80-\xc0\xaf-\xed\xa0\x80-\xc2\x9b-"
                                  "\xe2\x80\xa8-caf\xc3\xa9.ini"),
                   APX_ERR_CONFIG);
  ck_assert_printable(apx_last_error());
  ck_assert_contains(apx_last_error(), "caf\\xe9-\\x80-\\xc0\\xaf-\\xed\\xa0\\x80-\\xc2\\x9b-"
                                       "\\xe2\\x80\\xa8-caf\xc3\xa9.ini");
}
END_TEST

/* The cut at 1023 bytes falls on every byte of a multi-byte character
 * and of an escape in turn: the message stays valid and as long as fits. */
START_TEST(the_cut_never_splits_a_character_or_an_escape) {
  static const char *const units[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\x01"};
  for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
    for (int pad = 0; pad < 4; pad++) {
      char path[2400] = "/nonexistent/";
      size_t len = strlen(path);
      for (int i = 0; i < pad; i++) path[len++] = 'p';
      while (len + strlen(units[u]) < 2000) {
        memcpy(path + len, units[u], strlen(units[u]));
        len += strlen(units[u]);
      }
      path[len] = '\0';
      apx_context *ctx = NULL;
      ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
      const char *msg = apx_last_error();
      ck_assert_printable(msg);
      size_t unit = u == 3 ? 4 /* "\x01" */ : strlen(units[u]);
      ck_assert_msg(strlen(msg) <= 1023 && strlen(msg) > 1023 - unit,
                    "unit %zu pad %d: %zu bytes", u, pad, strlen(msg));
    }
  }
}
END_TEST

/* Names from the file and the environment reach the warnings, the
 * overrides and the log lines (stderr by default) escaped. */
START_TEST(warnings_overrides_and_log_lines_are_one_line_each) {
  const char *path = write_ini("[apexx]\nco\x1b[2Jlour = blue\n[op tile\x1b[0;pwned\x07pack]\n"
                               "order = cpu\n[backend cpu]\n");
  setenv("APEXX_LOG", "warn\nFAKE: injected line\x1b[2J", 1);
  apx_context *ctx = NULL;
  char log[16384];
  apx_status st = open_capturing_log(path, &ctx, log, sizeof log);
  unsetenv("APEXX_LOG");
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  const char *warnings = apx_config_warnings(ctx);
  ck_assert_contains(warnings, "unknown key [co\\x1b[2Jlour]");
  ck_assert_contains(warnings, "unknown op [tile\\x1b[0;pwned\\x07pack]");
  ck_assert_contains(apx_config_overrides(ctx), "APEXX_LOG=warn\\nFAKE: injected line\\x1b[2J");
  /* each line of each text printable */
  const char *texts[] = {warnings, apx_config_overrides(ctx), log};
  for (size_t t = 0; t < 3; t++) {
    char *copy = strdup(texts[t]);
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
      ck_assert_printable(line);
      ck_assert_msg(strncmp(line, "FAKE", 4) != 0, "an injected line: [%s]", line);
    }
    free(copy);
  }
  ck_assert_contains(log, "APEXX_LOG = [warn\\nFAKE: injected line\\x1b[2J] is not a level");
  ck_assert_contains(log, "unknown key [co\\x1b[2Jlour]");
  apx_close(ctx);
}
END_TEST

START_TEST(backend_name_with_a_control_byte_is_an_error) {
  const char *path = write_ini("[backend cp\x1b[8mu]\nenabled = no\n");
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_printable(apx_last_error());
  ck_assert_contains(apx_last_error(), ":1: backend name [cp\\x1b[8mu] has a control byte");
}
END_TEST

int main(void) {
  Suite *s = suite_create("messages");
  TCase *tc = tcase_create("messages");
  tcase_add_test(tc, control_bytes_in_a_path_are_escaped);
  tcase_add_test(tc, bytes_that_are_not_utf8_are_escaped);
  tcase_add_test(tc, the_cut_never_splits_a_character_or_an_escape);
  tcase_add_test(tc, warnings_overrides_and_log_lines_are_one_line_each);
  tcase_add_test(tc, backend_name_with_a_control_byte_is_an_error);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
