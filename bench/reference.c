/* SPDX-License-Identifier: Apache-2.0 */
/* The same-run bandwidth reference: every ok row's GB/s as a share of its
 * backend's reference.copy row (docs/report.md, Rows: pct_of_copy). The
 * copy row itself is the runner's (runner.c, entry reference.copy). */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const cJSON *child(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int row_is_ok(const cJSON *row) {
  const cJSON *st = child(row, "status");
  return cJSON_IsString(st) && strcmp(st->valuestring, "ok") == 0;
}

static void set_share(cJSON *row, double pct, const char *reason) {
  cJSON_DeleteItemFromObjectCaseSensitive(row, "pct_of_copy");
  cJSON_DeleteItemFromObjectCaseSensitive(row, "pct_of_copy_reason");
  bench_json_number(row, "pct_of_copy", pct, reason);
}

void bench_add_copy_shares(cJSON *report) {
  cJSON *benchmarks = cJSON_GetObjectItemCaseSensitive(report, "benchmarks");
  const cJSON *copy_rows = child(child(child(benchmarks, "reference"), "copy"), "rows");
  cJSON *section, *entry, *row;
  cJSON_ArrayForEach(section, benchmarks) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(entry, "rows")) {
        const cJSON *gbs = child(row, "gb_per_s");
        if (!row_is_ok(row) || !cJSON_IsNumber(gbs)) continue;
        const cJSON *copy = child(copy_rows, row->string);
        const cJSON *copy_gbs = child(copy, "gb_per_s");
        char reason[256];
        if (!copy) {
          snprintf(reason, sizeof reason,
                   "no reference.copy row for %s in this run (--ops left it out)", row->string);
          set_share(row, NAN, reason);
        } else if (!row_is_ok(copy) || !cJSON_IsNumber(copy_gbs) || copy_gbs->valuedouble <= 0) {
          snprintf(reason, sizeof reason, "the reference.copy row of %s did not run (%s)",
                   row->string,
                   cJSON_IsString(child(copy, "reason")) ? child(copy, "reason")->valuestring
                                                         : "no GB/s");
          set_share(row, NAN, reason);
        } else {
          set_share(row, 100.0 * gbs->valuedouble / copy_gbs->valuedouble, NULL);
        }
      }
    }
  }
}
