/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx/config.c ownership trust: a configuration or backend library
 * owned by another non-root uid is refused with a message naming the
 * settings that trust it; $APEXX_TRUSTED_DIRS trusts files under its
 * directories, [apexx] trusted_owner_uids (only in a root-owned
 * configuration) trusts owners of backend libraries; world-writable files
 * stay refused either way. Group-writable files and directories (issue 30
 * item 11) are refused unless the group is root's, the owner's personal
 * group, or the file lies under APEXX_TRUSTED_DIRS. Needs root (chown);
 * skipped otherwise. */
#define _GNU_SOURCE
#include "coretest.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

#define OTHER_UID 12345
#define OTHER_GID 12345

static char dir[256];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/apexx-trust-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  unsetenv("APEXX_TRUSTED_DIRS");
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  unsetenv("APEXX_TRUSTED_DIRS");
}

/* dir/name with text, owned by uid, mode 0644 */
static const char *file_in(const char *sub, const char *name, const char *text, uid_t uid) {
  static char path[512];
  char parent[400];
  snprintf(parent, sizeof parent, "%s%s%s", dir, sub ? "/" : "", sub ? sub : "");
  mkdir(parent, 0755);
  snprintf(path, sizeof path, "%s/%s", parent, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  ck_assert_int_eq(chmod(path, 0644), 0);
  ck_assert_int_eq(chown(path, uid, (gid_t)-1), 0);
  return path;
}

#define NEED_ROOT()                                                                                \
  do {                                                                                             \
    if (geteuid() != 0) {                                                                          \
      printf("skipped: chown needs root\n");                                                       \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

START_TEST(other_owner_is_refused_naming_the_settings) {
  NEED_ROOT();
  const char *path = file_in("ws", "apexx.ini", "[backend cpu]\n", OTHER_UID);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "owned by uid [12345]");
  ck_assert_contains(apx_last_error(), "APEXX_TRUSTED_DIRS");
  ck_assert_contains(apx_last_error(), "trusted_owner_uids");
}
END_TEST

START_TEST(trusted_dir_accepts_other_owner) {
  NEED_ROOT();
  char *path = strdup(file_in("ws", "apexx.ini", "[backend cpu]\nenabled = no\n", OTHER_UID));
  char trusted[600];
  /* a relative entry and a sibling are ignored; the workspace is trusted */
  snprintf(trusted, sizeof trusted, "relative/dir:%s/other:%s/ws", dir, dir);
  setenv("APEXX_TRUSTED_DIRS", trusted, 1);
  apx_context *ctx = open_ok(path);
  apx_close(ctx);
  /* only the sibling: refused */
  snprintf(trusted, sizeof trusted, "%s/other", dir);
  mkdir(trusted, 0755);
  setenv("APEXX_TRUSTED_DIRS", trusted, 1);
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  /* a prefix that is not a directory boundary: refused */
  snprintf(trusted, sizeof trusted, "%s/w", dir);
  mkdir(trusted, 0755);
  setenv("APEXX_TRUSTED_DIRS", trusted, 1);
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  free(path);
}
END_TEST

START_TEST(world_writable_stays_refused_in_a_trusted_dir) {
  NEED_ROOT();
  const char *path = file_in("ws", "apexx.ini", "[backend cpu]\n", OTHER_UID);
  ck_assert_int_eq(chmod(path, 0666), 0);
  char trusted[600];
  snprintf(trusted, sizeof trusted, "%s/ws", dir);
  setenv("APEXX_TRUSTED_DIRS", trusted, 1);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "world-writable");
}
END_TEST

START_TEST(trusted_owner_uids_for_libraries) {
  NEED_ROOT();
  const char *modules = getenv("APEXX_TEST_MODULES");
  ck_assert_msg(modules != NULL, "APEXX_TEST_MODULES is not set (run under make check)");
  /* a copy of the alpha fixture owned by another uid */
  char src[512], lib[512], cmd[1200];
  snprintf(src, sizeof src, "%s/fixture-alpha.so", modules);
  snprintf(lib, sizeof lib, "%s/alpha.so", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, lib);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(chmod(lib, 0755), 0);
  ck_assert_int_eq(chown(lib, OTHER_UID, (gid_t)-1), 0);
  char text[1024];
  snprintf(text, sizeof text, "[backend alpha]\nlibrary = %s\n", lib);
  char *plain = strdup(file_in(NULL, "plain.ini", text, 0));
  apx_context *ctx = open_ok(plain);
  const struct apx_backend_info *alpha = backend_named(ctx, "alpha");
  ck_assert_int_eq(alpha->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(alpha->reason, "trusted_owner_uids");
  apx_close(ctx);
  snprintf(text, sizeof text,
           "[apexx]\ntrusted_owner_uids = 999, %d\n[backend alpha]\nlibrary = %s\n", OTHER_UID,
           lib);
  char *trusting = strdup(file_in(NULL, "trusting.ini", text, 0));
  ctx = open_ok(trusting);
  alpha = backend_named(ctx, "alpha");
  ck_assert_msg(alpha->state == APX_BACKEND_OK, "alpha: %s", alpha->reason);
  ck_assert_str_eq(apx_config_warnings(ctx), "");
  apx_close(ctx);
  /* the key in a file not owned by root (trusted through the env) */
  ck_assert_int_eq(chown(trusting, OTHER_UID, (gid_t)-1), 0);
  setenv("APEXX_TRUSTED_DIRS", dir, 1);
  ck_assert_int_eq(apx_open(&ctx, trusting), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "owned by root");
  free(plain);
  free(trusting);
}
END_TEST

START_TEST(group_writable_config_is_refused) {
  NEED_ROOT();
  const char *path = file_in("ws", "apexx.ini", "[backend cpu]\nenabled = no\n", 0);
  ck_assert_int_eq(chown(path, 0, OTHER_GID), 0);
  ck_assert_int_eq(chmod(path, 0664), 0);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "is group-writable and its group [12345]");
  ck_assert_contains(apx_last_error(), "APEXX_TRUSTED_DIRS");
  /* root's group: accepted (sudo's rule for sudoers) */
  ck_assert_int_eq(chown(path, 0, 0), 0);
  apx_close(open_ok(path));
  /* any group, under a trusted directory */
  ck_assert_int_eq(chown(path, 0, OTHER_GID), 0);
  char trusted[600];
  snprintf(trusted, sizeof trusted, "%s/ws", dir);
  setenv("APEXX_TRUSTED_DIRS", trusted, 1);
  apx_close(open_ok(path));
}
END_TEST

START_TEST(group_writable_directory_is_refused_without_sticky_bit) {
  NEED_ROOT();
  char *path = strdup(file_in("ws", "apexx.ini", "[backend cpu]\nenabled = no\n", 0));
  char ws[400];
  snprintf(ws, sizeof ws, "%s/ws", dir);
  ck_assert_int_eq(chown(ws, 0, OTHER_GID), 0);
  ck_assert_int_eq(chmod(ws, 0775), 0);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "is group-writable without the sticky bit");
  ck_assert_int_eq(chmod(ws, 01775), 0);
  apx_close(open_ok(path));
  ck_assert_int_eq(chmod(ws, 0775), 0);
  setenv("APEXX_TRUSTED_DIRS", ws, 1); /* the trusted directory itself */
  apx_close(open_ok(path));
  free(path);
}
END_TEST

/* A user whose primary group is named as the user and lists no other
 * member (daemon:daemon on Debian), or none. */
static const struct passwd *user_with_personal_group(void) {
  static struct passwd found;
  static char name[64];
  const struct passwd *pw;
  setpwent();
  while ((pw = getpwent()) != NULL) {
    if (pw->pw_uid == 0) continue;
    const struct group *gr = getgrgid(pw->pw_gid);
    if (gr && strcmp(gr->gr_name, pw->pw_name) == 0 && !gr->gr_mem[0] &&
        strlen(pw->pw_name) < sizeof name) {
      snprintf(name, sizeof name, "%s", pw->pw_name);
      found = *pw;
      found.pw_name = name;
      endpwent();
      return &found;
    }
  }
  endpwent();
  return NULL;
}

START_TEST(group_writable_module_needs_its_owners_personal_group) {
  NEED_ROOT();
  const struct passwd *user = user_with_personal_group();
  if (!user) {
    printf("skipped: no user with a personal group in the passwd database\n");
    return;
  }
  const char *modules = getenv("APEXX_TEST_MODULES");
  ck_assert_msg(modules != NULL, "APEXX_TEST_MODULES is not set (run under make check)");
  char lib[512], cmd[1200];
  snprintf(lib, sizeof lib, "%s/alpha.so", dir);
  snprintf(cmd, sizeof cmd, "cp '%s/fixture-alpha.so' '%s'", modules, lib);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(chmod(lib, 0775), 0);
  ck_assert_int_eq(chown(lib, user->pw_uid, user->pw_gid), 0);
  char text[1024];
  snprintf(text, sizeof text, "[apexx]\ntrusted_owner_uids = %u\n[backend alpha]\nlibrary = %s\n",
           (unsigned)user->pw_uid, lib);
  char *config = strdup(file_in(NULL, "trusting.ini", text, 0));
  apx_context *ctx = open_ok(config);
  const struct apx_backend_info *alpha = backend_named(ctx, "alpha");
  ck_assert_msg(alpha->state == APX_BACKEND_OK, "alpha (owner %s, its group): %s",
                user->pw_name, alpha->reason);
  apx_close(ctx);
  /* the same module group-writable by another group */
  ck_assert_int_eq(chown(lib, user->pw_uid, OTHER_GID), 0);
  ctx = open_ok(config);
  alpha = backend_named(ctx, "alpha");
  ck_assert_int_eq(alpha->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(alpha->reason, "is group-writable and its group [12345]");
  apx_close(ctx);
  free(config);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config_trust");
  TCase *tc = tcase_create("trust");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, other_owner_is_refused_naming_the_settings);
  tcase_add_test(tc, trusted_dir_accepts_other_owner);
  tcase_add_test(tc, world_writable_stays_refused_in_a_trusted_dir);
  tcase_add_test(tc, trusted_owner_uids_for_libraries);
  tcase_add_test(tc, group_writable_config_is_refused);
  tcase_add_test(tc, group_writable_directory_is_refused_without_sticky_bit);
  tcase_add_test(tc, group_writable_module_needs_its_owners_personal_group);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
