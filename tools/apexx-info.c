/* apexx-info: the configured backends (library, version, device, state,
 * reason) and the dispatch order per op, as text or JSON (cJSON).
 * Exit 0 even when a backend is unavailable; 1 when the configuration
 * itself is broken or a flag is wrong. */
#include "config.h"

#include <apexx/apexx.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(out,
          "usage: apexx-info [--keys] [--json] [--config FILE]\n"
          "Show apexx's configured backends, their state and reason, and the\n"
          "dispatch order of every op.\n"
          "  --keys         list every configuration key and environment variable\n"
          "                 (the core's and each backend's) with its value and source\n"
          "  --json         print the same as JSON\n"
          "  --config FILE  read FILE instead of $APEXX_CONFIG / the installed apexx.ini\n"
          "  --help         this text\n"
          "  --version      print the version\n");
}

static void add_string_or_null(cJSON *o, const char *name, const char *v) {
  if (v)
    cJSON_AddStringToObject(o, name, v);
  else
    cJSON_AddNullToObject(o, name);
}

/* --keys: every key and variable, with its value and where it came from. */
static int print_keys(apx_context *ctx, int json) {
  int n = apx_config_key_count(ctx);
  cJSON *arr = json ? cJSON_CreateArray() : NULL;
  for (int i = 0; i < n; i++) {
    apx_config_key_info k;
    if (apx_config_key(ctx, i, &k) != APX_OK) {
      fprintf(stderr, "apexx-info: %s\n", apx_last_error());
      cJSON_Delete(arr);
      return 1;
    }
    if (json) {
      cJSON *o = cJSON_CreateObject();
      add_string_or_null(o, "section", k.section);
      add_string_or_null(o, "key", k.key);
      add_string_or_null(o, "owner", k.owner);
      add_string_or_null(o, "type", k.type);
      add_string_or_null(o, "range", k.range);
      add_string_or_null(o, "default", k.default_value);
      add_string_or_null(o, "environment", k.env);
      add_string_or_null(o, "value", k.value);
      add_string_or_null(o, "source", k.source);
      add_string_or_null(o, "help", k.help);
      cJSON_AddItemToArray(arr, o);
      continue;
    }
    printf("[%s] %s%s%s %s: %s (%s)\n", k.section, k.key ? k.key : "",
           k.key ? "" : "$", k.key ? "" : k.env, k.type, k.value ? k.value : "(unset)",
           k.source);
    printf("    %s", k.help);
    if (k.range && *k.range) printf("; %s", k.range);
    if (k.default_value) printf("; default %s", k.default_value);
    if (k.key && k.env) printf("; environment %s", k.env);
    printf("\n");
  }
  if (json) {
    char *text = cJSON_Print(arr);
    if (text) puts(text);
    free(text);
    cJSON_Delete(arr);
  }
  return 0;
}

static void split_lines(cJSON *arr, const char *text) {
  char *copy = strdup(text ? text : "");
  for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save))
    cJSON_AddItemToArray(arr, cJSON_CreateString(line));
  free(copy);
}

static void print_indented(const char *lines) {
  char *copy = strdup(lines);
  for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save))
    printf("  %s\n", line);
  free(copy);
}

int main(int argc, char **argv) {
  int json = 0, keys = 0;
  const char *config = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--keys") == 0) {
      keys = 1;
    } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      config = argv[++i];
    } else if (strncmp(argv[i], "--config=", 9) == 0) {
      config = argv[i] + 9;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("apexx-info %s (libapexx %s)\n", PACKAGE_VERSION, apx_version());
      return 0;
    } else {
      fprintf(stderr, "apexx-info: unknown argument [%s]\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }

  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, config);
  if (st != APX_OK) {
    fprintf(stderr, "apexx-info: %s: %s\n", apx_status_name(st), apx_last_error());
    return 1;
  }

  if (keys) {
    int rc = print_keys(ctx, json);
    apx_close(ctx);
    return rc;
  }
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", apx_version());
  const char *source = apx_config_source(ctx);
  cJSON_AddStringToObject(root, "config", source[0] ? source : "(built-in default)");
  split_lines(cJSON_AddArrayToObject(root, "overrides"), apx_config_overrides(ctx));
  split_lines(cJSON_AddArrayToObject(root, "warnings"), apx_config_warnings(ctx));
  cJSON *backends = cJSON_AddArrayToObject(root, "backends");
  int n = apx_backend_count(ctx);
  for (int i = 0; i < n; i++) {
    struct apx_backend_info info;
    apx_backend_info(ctx, i, &info);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", info.name);
    cJSON_AddStringToObject(b, "library", info.library);
    cJSON_AddStringToObject(b, "version", info.version);
    cJSON_AddStringToObject(b, "device", info.state == APX_BACKEND_OK || info.version[0]
                                             ? apx_device_name(info.device)
                                             : "");
    cJSON_AddStringToObject(b, "device_name", info.device_name);
    cJSON_AddStringToObject(b, "state", apx_backend_state_name(info.state));
    cJSON_AddStringToObject(b, "reason", info.reason);
    cJSON *ops = cJSON_AddArrayToObject(b, "ops");
    for (int op = 0; op < APX_OP_COUNT; op++) {
      int has = 0;
      if (apx_backend_provides(ctx, i, (apx_op_id)op, &has) == APX_OK && has)
        cJSON_AddItemToArray(ops, cJSON_CreateString(apx_op_name((apx_op_id)op)));
    }
    cJSON_AddItemToArray(backends, b);
  }
  /* APEXX_BACKEND sends every call (without its own apx_call.backend) to one
   * backend: the dispatch table then names that one alone */
  const char *forced = apx_forced_backend(ctx);
  if (forced) {
    cJSON_AddStringToObject(root, "forced_backend", forced);
  } else {
    cJSON_AddNullToObject(root, "forced_backend");
  }

  cJSON *dispatch = cJSON_AddObjectToObject(root, "dispatch");
  for (int op = 0; op < APX_OP_COUNT; op++) {
    cJSON *entry = cJSON_CreateArray();
    const char *order[APX_MAX_BACKENDS];
    int count = 0;
    apx_op_order(ctx, (apx_op_id)op, order, &count);
    for (int k = 0; k < count; k++) {
      if (!forced || strcmp(forced, order[k]) == 0)
        cJSON_AddItemToArray(entry, cJSON_CreateString(order[k]));
    }
    cJSON_AddItemToObject(dispatch, apx_op_name((apx_op_id)op), entry);
  }

  if (json) {
    char *text = cJSON_Print(root);
    puts(text);
    free(text);
  } else {
    printf("apexx %s\n", apx_version());
    printf("config: %s\n", source[0] ? source : "(built-in default: no file found)");
    const char *ov = apx_config_overrides(ctx);
    if (ov[0]) printf("environment overrides:\n");
    print_indented(ov);
    const char *w = apx_config_warnings(ctx);
    if (w[0]) printf("config warnings:\n");
    print_indented(w);
    printf("\nbackends:\n");
    for (int i = 0; i < n; i++) {
      struct apx_backend_info info;
      apx_backend_info(ctx, i, &info);
      printf("  %-6s %-14s %s\n", info.name, apx_backend_state_name(info.state), info.library);
      if (info.version[0]) printf("         version %s, %s device", info.version, apx_device_name(info.device));
      if (info.version[0] && info.device_name[0]) printf(": %s", info.device_name);
      if (info.version[0]) printf("\n");
      if (info.reason[0]) printf("         reason: %s\n", info.reason);
      if (info.version[0]) {
        printf("         ops:");
        int listed = 0;
        for (int op = 0; op < APX_OP_COUNT; op++) {
          int has = 0;
          if (apx_backend_provides(ctx, i, (apx_op_id)op, &has) == APX_OK && has)
            printf("%s %s", listed++ ? "," : "", apx_op_name((apx_op_id)op));
        }
        printf("%s\n", listed ? "" : " none");
      }
    }
    printf("\ndispatch order (first that can run a call wins):\n");
    if (forced) printf("  APEXX_BACKEND = %s: every call goes to %s alone\n", forced, forced);
    for (int op = 0; op < APX_OP_COUNT; op++) {
      const char *order[APX_MAX_BACKENDS];
      int count = 0;
      apx_op_order(ctx, (apx_op_id)op, order, &count);
      printf("  %-22s", apx_op_name((apx_op_id)op));
      int shown = 0;
      for (int k = 0; k < count; k++) {
        if (forced && strcmp(forced, order[k]) != 0) continue;
        int has = 1;
        for (int i = 0; i < n; i++) {
          struct apx_backend_info info;
          if (apx_backend_info(ctx, i, &info) == APX_OK && strcmp(info.name, order[k]) == 0)
            apx_backend_provides(ctx, i, (apx_op_id)op, &has);
        }
        printf("%s%s%s", shown++ ? ", " : "", order[k], has ? "" : " (lacks it)");
      }
      printf("\n");
    }
  }
  cJSON_Delete(root);
  apx_close(ctx);
  return 0;
}
