/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration loading: the input is optional environment lines
 * (APEXX_BACKEND=..., APEXX_LOG=..., APEXX_TRT_PLUGIN_LIB=...,
 * APEXX_TRUSTED_DIRS=...), a line "--", then INI text (no "--": all INI).
 * apx_open reads it with backend_dir an empty directory; '/' becomes '_'
 * everywhere so that no library path can leave that directory (the
 * loader's own checks have their suite, tests/test_reliability.c). */
#include "fuzz_common.h"

static const char *const env_names[] = {"APEXX_BACKEND", "APEXX_LOG", "APEXX_TRT_PLUGIN_LIB",
                                        "APEXX_TRUSTED_DIRS"};
#define ENV_COUNT (sizeof env_names / sizeof env_names[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  for (size_t i = 0; i < size; i++) text[i] = data[i] == '/' ? '_' : (char)data[i];
  text[size] = '\0';
  char *ini = text;
  size_t ini_size = size;
  char *sep = strstr(text, "\n--\n");
  if (sep && memchr(text, '\0', (size_t)(sep - text)) == NULL) {
    *sep = '\0';
    ini = sep + 4;
    ini_size = size - (size_t)(ini - text);
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
      char *eq = strchr(line, '=');
      if (!eq) continue;
      *eq = '\0';
      for (size_t e = 0; e < ENV_COUNT; e++)
        if (strcmp(line, env_names[e]) == 0) setenv(env_names[e], eq + 1, 1);
    }
  }
  char empty[128];
  snprintf(empty, sizeof empty, "%s/modules", fuzz_dir());
  mkdir(empty, 0700);
  setenv("APEXX_BACKEND_DIR", empty, 1);
  unsetenv("APEXX_CONFIG");
  const char *path = fuzz_file("fuzz.ini", ini, ini_size);
  apx_context *ctx = NULL;
  if (apx_open(&ctx, path) == APX_OK) {
    /* read back what a caller may read */
    for (int i = 0; i < apx_backend_count(ctx); i++) {
      struct apx_backend_info info;
      apx_backend_info(ctx, i, &info);
    }
    const char *order[APX_MAX_BACKENDS];
    int n = 0;
    for (int op = 0; op < APX_OP_COUNT; op++) apx_op_order(ctx, (apx_op_id)op, order, &n);
    (void)apx_config_source(ctx);
    (void)apx_config_overrides(ctx);
    apx_close(ctx);
  }
  for (size_t e = 0; e < ENV_COUNT; e++) unsetenv(env_names[e]);
  free(text);
  return 0;
}
