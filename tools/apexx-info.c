/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-info: the configured backends (library, version, device, state,
 * reason) and the dispatch order per op, the configuration keys (--keys)
 * or the op descriptors (--ops), as text or JSON (cJSON). The ops are the
 * library's descriptors (apx_op_describe), so a new op shows up here
 * without an edit. Exit 0 even when a backend is unavailable; 1 when the
 * configuration itself is broken or a flag is wrong. */
#include "config.h"

#include <apexx/apexx.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(out,
          "usage: apexx-info [--keys | --ops] [--json] [--config FILE] [-h | --help] [--version]\n"
          "Show apexx's configured backends, their state and reason, and the\n"
          "dispatch order of every op.\n"
          "  --keys         list every configuration key and environment variable\n"
          "                 (the core's and each backend's) with its value and source\n"
          "  --ops          list every op's descriptor: its arguments with their role,\n"
          "                 layout and dtype rule, and its capabilities\n"
          "  --json         print the same as JSON\n"
          "  --config FILE  read FILE instead of $APEXX_CONFIG / the installed apexx.ini\n"
          "  -h, --help     this text\n"
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
    /* "[section] name type = value (from source)", or for a key nothing
     * sets "[section] name type: unset (why)" */
    printf("[%s] %s%s%s %s", k.section, k.key ? k.key : "", k.key ? "" : "$",
           k.key ? "" : k.env, k.type);
    if (k.value && strncmp(k.source, "environment (", 13) == 0)
      printf(" = %s (from $%.*s)\n", k.value, (int)strlen(k.source + 13) - 1, k.source + 13);
    else if (k.value)
      printf(" = %s (from %s)\n", k.value,
             strcmp(k.source, "default") == 0       ? "the default"
             : strcmp(k.source, "environment") == 0 ? "the environment"
                                                    : k.source);
    else if (!k.key)
      printf(": unset (not in the environment)\n");
    else
      printf(": unset (no default; no file sets it%s%s)\n", k.env ? ", nor $" : "",
             k.env ? k.env : "");
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

/* ---- --ops: the op descriptors ------------------------------------------- */
static const char *const kind_names[] = {"input", "index",  "output", "int64", "dim",
                                         "double", "flag", "enum",   "handle", "result"};
static const char *const dtype_class_names[] = {"any", "float", "index"};

static const char *kind_name(apx_arg_kind kind) {
  return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

static int is_tensor(apx_arg_kind kind) {
  return kind == APX_ARG_INPUT || kind == APX_ARG_INDEX || kind == APX_ARG_OUTPUT;
}

/* The capability bits as names, into caps (a JSON array) or printed. */
static void capability_names(uint32_t bits, cJSON *caps) {
  static const struct {
    uint32_t bit;
    const char *name;
  } known[] = {{APX_OP_CAP_INDEX_TENSORS, "index_tensors"},
               {APX_OP_CAP_DEVICE_CHECKS, "device_checks"},
               {APX_OP_CAP_EAGER_CAPTURE, "eager_capture"}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (bits & known[i].bit) {
      if (caps)
        cJSON_AddItemToArray(caps, cJSON_CreateString(known[i].name));
      else
        printf(" %s", known[i].name);
    }
}

static cJSON *arg_json(const apx_op_desc *d, const apx_op_arg *a) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", a->name);
  cJSON_AddStringToObject(o, "kind", kind_name(a->kind));
  if (is_tensor(a->kind)) {
    cJSON_AddBoolToObject(o, "optional", a->optional);
    cJSON_AddNumberToObject(o, "ndim", a->ndim);
    cJSON_AddStringToObject(o, "dtypes", (unsigned)a->dtypes < 3 ? dtype_class_names[a->dtypes]
                                                                 : "?");
    add_string_or_null(o, "same_dtype_as",
                       a->same_dtype_as >= 0 && a->same_dtype_as < d->arg_count
                           ? d->args[a->same_dtype_as].name
                           : NULL);
    add_string_or_null(o, "alias_of",
                       a->alias_of >= 0 && a->alias_of < d->arg_count ? d->args[a->alias_of].name
                                                                       : NULL);
    add_string_or_null(o, "layout", a->layout);
  }
  if (a->kind == APX_ARG_ENUM) {
    cJSON *names = cJSON_AddArrayToObject(o, "values");
    for (int k = 0; k < a->enum_count; k++)
      cJSON_AddItemToArray(names, cJSON_CreateString(a->enum_names[k]));
  }
  if (a->kind == APX_ARG_HANDLE || a->kind == APX_ARG_RESULT) {
    cJSON_AddBoolToObject(o, "optional", a->optional);
    add_string_or_null(o, "type", a->type_name);
  }
  return o;
}

static cJSON *op_json(const apx_op_desc *d) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", d->name);
  cJSON_AddNumberToObject(o, "id", d->id);
  cJSON_AddStringToObject(o, "summary", d->summary);
  cJSON *args = cJSON_AddArrayToObject(o, "args");
  for (int i = 0; i < d->arg_count; i++)
    cJSON_AddItemToArray(args, arg_json(d, &d->args[i]));
  capability_names(d->caps, cJSON_AddArrayToObject(o, "capabilities"));
  return o;
}

/* An option's ARGS_INIT value, printed. */
static void print_default(const apx_op_desc *d, const apx_op_arg *a) {
  const char *init = (const char *)d->args_init + a->offset;
  int i;
  int64_t v;
  double x;
  switch (a->kind) {
  case APX_ARG_INT64:
    memcpy(&v, init, sizeof v);
    printf(" = %lld", (long long)v);
    break;
  case APX_ARG_DOUBLE:
    memcpy(&x, init, sizeof x);
    printf(" = %g", x);
    break;
  case APX_ARG_DIM:
  case APX_ARG_FLAG:
    memcpy(&i, init, sizeof i);
    printf(" = %d", i);
    break;
  case APX_ARG_ENUM:
    memcpy(&i, init, sizeof i);
    printf(" = %s", i >= 0 && i < a->enum_count ? a->enum_names[i] : "?");
    break;
  default:
    break;
  }
}

/* One line per argument: name, role, then a tensor's layout and dtype rule,
 * an option's default (and an enum's values) or a pointer's type. */
static void print_arg(const apx_op_desc *d, const apx_op_arg *a) {
  printf("    %-22s %-7s", a->name, kind_name(a->kind));
  print_default(d, a);
  if (is_tensor(a->kind)) {
    printf(" %s", a->layout ? a->layout : "");
    if (a->same_dtype_as >= 0 && a->same_dtype_as < d->arg_count)
      printf("; dtype of %s", d->args[a->same_dtype_as].name);
    else if (a->dtypes == APX_DTYPES_FLOAT)
      printf("; f32|f16|bf16");
    else if (a->dtypes == APX_DTYPES_INDEX)
      printf("; i32|i64");
    if (a->alias_of >= 0 && a->alias_of < d->arg_count)
      printf("; may be %s itself", d->args[a->alias_of].name);
  } else if (a->kind == APX_ARG_ENUM) {
    for (int k = 0; k < a->enum_count; k++) printf("%s%s", k ? "|" : " (", a->enum_names[k]);
    printf(")");
  } else if (a->type_name) {
    printf(" %s", a->type_name);
  }
  if (a->optional) printf(" (optional)");
  printf("\n");
}

static void print_ops(int json) {
  cJSON *ops = json ? cJSON_CreateArray() : NULL;
  const apx_op_desc *d;
  for (int op = 0; (d = apx_op_describe((apx_op_id)op)) != NULL; op++) {
    if (json) {
      cJSON_AddItemToArray(ops, op_json(d));
      continue;
    }
    printf("%s: %s\n", d->name, d->summary);
    for (int i = 0; i < d->arg_count; i++) print_arg(d, &d->args[i]);
    printf("    capabilities:");
    capability_names(d->caps, NULL);
    printf("%s\n", d->caps ? "" : " none");
  }
  if (json) {
    char *text = cJSON_Print(ops);
    if (text) puts(text);
    free(text);
    cJSON_Delete(ops);
  }
}

/* ---- backends and dispatch ------------------------------------------------- */
/* The ops are the library's descriptors: apx_op_describe(op) for op = 0, 1,
 * ... until NULL. */
static int op_count(void) {
  int n = 0;
  while (apx_op_describe((apx_op_id)n)) n++;
  return n;
}

static cJSON *backend_json(apx_context *ctx, int i, int ops) {
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
  cJSON *provided = cJSON_AddArrayToObject(b, "ops");
  for (int op = 0; op < ops; op++) {
    int has = 0;
    if (apx_backend_provides(ctx, i, (apx_op_id)op, &has) == APX_OK && has)
      cJSON_AddItemToArray(provided, cJSON_CreateString(apx_op_describe((apx_op_id)op)->name));
  }
  return b;
}

/* The whole report as JSON (the text form prints from it). */
static cJSON *report_json(apx_context *ctx) {
  int ops = op_count();
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", apx_version());
  const char *source = apx_config_source(ctx);
  cJSON_AddStringToObject(root, "config", source[0] ? source : "(built-in default)");
  split_lines(cJSON_AddArrayToObject(root, "overrides"), apx_config_overrides(ctx));
  split_lines(cJSON_AddArrayToObject(root, "warnings"), apx_config_warnings(ctx));
  cJSON *backends = cJSON_AddArrayToObject(root, "backends");
  int n = apx_backend_count(ctx);
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(backends, backend_json(ctx, i, ops));
  /* APEXX_BACKEND sends every call (without its own apx_call.backend) to one
   * backend: the dispatch table then names that one alone */
  const char *forced = apx_forced_backend(ctx);
  if (forced)
    cJSON_AddStringToObject(root, "forced_backend", forced);
  else
    cJSON_AddNullToObject(root, "forced_backend");
  cJSON *dispatch = cJSON_AddObjectToObject(root, "dispatch");
  for (int op = 0; op < ops; op++) {
    cJSON *entry = cJSON_CreateArray();
    const char *order[APX_MAX_BACKENDS];
    int count = 0;
    apx_op_order(ctx, (apx_op_id)op, order, &count);
    for (int k = 0; k < count; k++)
      if (!forced || strcmp(forced, order[k]) == 0)
        cJSON_AddItemToArray(entry, cJSON_CreateString(order[k]));
    cJSON_AddItemToObject(dispatch, apx_op_describe((apx_op_id)op)->name, entry);
  }
  return root;
}

/* 1 unless backend `name` is loaded and lacks op. */
static int backend_has(apx_context *ctx, const char *name, int op) {
  int has = 1;
  for (int i = 0; i < apx_backend_count(ctx); i++) {
    struct apx_backend_info info;
    if (apx_backend_info(ctx, i, &info) == APX_OK && strcmp(info.name, name) == 0)
      apx_backend_provides(ctx, i, (apx_op_id)op, &has);
  }
  return has;
}

static void print_backends(apx_context *ctx, const cJSON *root) {
  printf("\nbackends:\n");
  int i = 0;
  for (const cJSON *b = cJSON_GetObjectItem(root, "backends")->child; b; b = b->next, i++) {
    struct apx_backend_info info;
    apx_backend_info(ctx, i, &info);
    printf("  %-6s %-14s %s\n", info.name, apx_backend_state_name(info.state), info.library);
    if (!info.version[0]) {
      if (info.reason[0]) printf("         reason: %s\n", info.reason);
      continue;
    }
    printf("         version %s, %s device", info.version, apx_device_name(info.device));
    if (info.device_name[0]) printf(": %s", info.device_name);
    printf("\n");
    if (info.reason[0]) printf("         reason: %s\n", info.reason);
    printf("         ops:");
    int listed = 0;
    for (const cJSON *op = cJSON_GetObjectItem(b, "ops")->child; op; op = op->next)
      printf("%s %s", listed++ ? "," : "", op->valuestring);
    printf("%s\n", listed ? "" : " none");
  }
}

static void print_text(apx_context *ctx, const cJSON *root) {
  printf("apexx %s\n", apx_version());
  const char *source = apx_config_source(ctx);
  printf("config: %s\n", source[0] ? source : "(built-in default: no file found)");
  const char *ov = apx_config_overrides(ctx);
  if (ov[0]) printf("environment overrides:\n");
  print_indented(ov);
  const char *w = apx_config_warnings(ctx);
  if (w[0]) printf("config warnings:\n");
  print_indented(w);
  print_backends(ctx, root);
  printf("\ndispatch order (first that can run a call wins):\n");
  const char *forced = apx_forced_backend(ctx);
  if (forced) printf("  APEXX_BACKEND = %s: every call goes to %s alone\n", forced, forced);
  const cJSON *dispatch = cJSON_GetObjectItem(root, "dispatch");
  int width = 22; /* the longest op name and a space */
  for (const cJSON *e = dispatch->child; e; e = e->next)
    if ((int)strlen(e->string) + 1 > width) width = (int)strlen(e->string) + 1;
  int op = 0;
  for (const cJSON *e = dispatch->child; e; e = e->next, op++) {
    printf("  %-*s", width, e->string);
    int shown = 0;
    for (const cJSON *b = e->child; b; b = b->next)
      printf("%s%s%s", shown++ ? ", " : "", b->valuestring,
             backend_has(ctx, b->valuestring, op) ? "" : " (lacks it)");
    printf("\n");
  }
}

int main(int argc, char **argv) {
  int json = 0, keys = 0, ops = 0;
  const char *config = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--keys") == 0) {
      keys = 1;
    } else if (strcmp(argv[i], "--ops") == 0) {
      ops = 1;
    } else if (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0) {
      config = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : NULL;
      if (!config || !*config) {
        fprintf(stderr, "apexx-info: --config needs a value (a path)\n");
        usage(stderr);
        return 1;
      }
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
  if (keys && ops) {
    fprintf(stderr, "apexx-info: --keys and --ops are two listings: give one\n");
    usage(stderr);
    return 1;
  }
  /* the descriptors are the library's own: no context, no configuration */
  if (ops) {
    print_ops(json);
    return 0;
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
  cJSON *root = report_json(ctx);
  if (json) {
    char *text = cJSON_Print(root);
    puts(text);
    free(text);
  } else {
    print_text(ctx, root);
  }
  cJSON_Delete(root);
  apx_close(ctx);
  return 0;
}
