/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare (bench/compare.c, compiled in): the input is one flag
 * byte, then BASELINE text, a line "--", then CURRENT text (no "--": the
 * same text for both). Flag bits: 1 --relative, 2 --statistic min,
 * 4 --allow-mismatch, 8 --emit-baseline (BASELINE only), 16 --output-json,
 * 32 --output-md, 64 --confirm with BASELINE as the previous summary,
 * 128 CURRENT given twice (pooled repetitions). Outputs go to the scratch
 * directory; --quiet keeps stdout short (libFuzzer's -close_fd_mask
 * drops it). */
#include "fuzz_common.h"

int bench_compare_main(int argc, char **argv);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned flags = data[0];
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  size_t base_len = len;
  const char *cur = text;
  size_t cur_len = len;
  for (size_t i = 0; i + 4 <= len; i++)
    if (memcmp(text + i, "\n--\n", 4) == 0) {
      base_len = i;
      cur = text + i + 4;
      cur_len = len - i - 4;
      break;
    }
  char base_path[128], cur_path[128], json_path[128], md_path[128];
  snprintf(base_path, sizeof base_path, "%s", fuzz_file("base.json", text, base_len));
  snprintf(cur_path, sizeof cur_path, "%s", fuzz_file("current.json", cur, cur_len));
  snprintf(json_path, sizeof json_path, "%s/summary.json", fuzz_dir());
  snprintf(md_path, sizeof md_path, "%s/summary.md", fuzz_dir());

  char *argv[20];
  int argc = 0;
  argv[argc++] = (char *)"compare";
  argv[argc++] = (char *)"--quiet";
  if (flags & 1) argv[argc++] = (char *)"--relative";
  if (flags & 2) {
    argv[argc++] = (char *)"--statistic";
    argv[argc++] = (char *)"min";
  }
  if (flags & 4) argv[argc++] = (char *)"--allow-mismatch";
  if (flags & 8) argv[argc++] = (char *)"--emit-baseline";
  if (flags & 16) {
    argv[argc++] = (char *)"--output-json";
    argv[argc++] = json_path;
  }
  if (flags & 32) {
    argv[argc++] = (char *)"--output-md";
    argv[argc++] = md_path;
  }
  if (flags & 64) {
    argv[argc++] = (char *)"--confirm";
    argv[argc++] = base_path;
  }
  argv[argc++] = base_path;
  if (!(flags & 8)) {
    argv[argc++] = cur_path;
    if (flags & 128) argv[argc++] = cur_path;
  }
  argv[argc] = NULL;
  bench_compare_main(argc, argv);
  fflush(stdout);
  return 0;
}
