/* SPDX-License-Identifier: Apache-2.0 */
/* Opening the shared objects the core loads (backend modules, the trt
 * backend's plugin_library): the file is opened once, every check reads the
 * open descriptor, and dlopen maps that descriptor through
 * /proc/self/fd/N, so nothing can swap the file between check and use.
 * A module is refused when it is not a regular file, when others can
 * write it or a directory above it (world-writable, or group-writable by a
 * group apx__group_write_trusted does not accept, without the sticky
 * bit), when its owner is not trusted (apx__unsafe_file_reason_trusting),
 * or when its ELF structure fails apx__elf_check (libapexx/elf_check.c:
 * another machine's module, a truncated one, a dynamic section pointing
 * outside the module, each of which would fail or fault inside dlopen). */
#include "config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

int apx__in_trusted_dir(const char *path, int or_itself) {
  const char *dirs = apx__getenv("APEXX_TRUSTED_DIRS");
  if (!dirs || !*dirs) return 0;
  char *real = realpath(path, NULL);
  if (!real) return 0;
  int found = 0;
  for (const char *p = dirs; *p && !found;) {
    size_t len = strcspn(p, ":");
    char dir[4096];
    if (len > 0 && len < sizeof dir && p[0] == '/') {
      memcpy(dir, p, len);
      dir[len] = '\0';
      char *real_dir = realpath(dir, NULL);
      if (real_dir) {
        size_t dl = strlen(real_dir);
        found = strncmp(real, real_dir, dl) == 0 &&
                (real[dl] == '/' || (dl == 1 && real_dir[0] == '/') ||
                 (or_itself && real[dl] == '\0'));
        free(real_dir);
      }
    }
    p += len;
    if (*p == ':') p++;
  }
  free(real);
  return found;
}

/* gid is the personal group of user `owner`: the owner's primary group,
 * with the owner's name, listing no other member (the user private group
 * scheme of Debian and Red Hat, under which umask 002 makes a user's files
 * group-writable; Debian's OpenSSH accepts such files the same way). */
static int personal_group(uid_t owner, gid_t gid) {
  size_t size = 16384;
  int personal = 0;
  for (;;) {
    char *buf = malloc(size);
    if (!buf) return 0;
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;
    int rc = getpwuid_r(owner, &pw, buf, size / 2, &pwp);
    if (rc == 0 && pwp && pw.pw_gid == gid)
      rc = getgrgid_r(gid, &gr, buf + size / 2, size / 2, &grp);
    if (rc == 0 && pwp && grp)
      personal = strcmp(gr.gr_name, pw.pw_name) == 0 &&
                 (!gr.gr_mem[0] || (strcmp(gr.gr_mem[0], pw.pw_name) == 0 && !gr.gr_mem[1]));
    free(buf);
    if (rc != ERANGE || size >= (1u << 22)) return personal;
    size *= 2;
  }
}

int apx__group_write_trusted(const struct stat *st, const char *path, int or_itself) {
  return st->st_gid == 0 || personal_group(st->st_uid, st->st_gid) ||
         apx__in_trusted_dir(path, or_itself);
}

const char *apx__unsafe_dir_reason(const char *path) {
  static __thread char reason[600];
  char *real = realpath(path, NULL);
  if (!real && errno == ENOMEM) { /* not resolved: the directories are unknown */
    snprintf(reason, sizeof reason, "out of memory resolving [%s]", path);
    return reason;
  }
  if (!real) return NULL; /* absence is reported elsewhere */
  const char *found = NULL;
  /* every directory from the file's parent up to / */
  for (char *slash = strrchr(real, '/'); slash && !found; slash = strrchr(real, '/')) {
    if (slash == real)
      slash[1] = '\0'; /* "/" itself */
    else
      *slash = '\0';
    struct stat st;
    if (stat(real, &st) == 0 && S_ISDIR(st.st_mode) && !(st.st_mode & S_ISVTX)) {
      if (st.st_mode & S_IWOTH) {
        snprintf(reason, sizeof reason,
                 "directory [%s] above [%s] is world-writable without the sticky bit", real,
                 path);
        found = reason;
      } else if ((st.st_mode & S_IWGRP) && !apx__group_write_trusted(&st, real, 1)) {
        snprintf(reason, sizeof reason,
                 "directory [%s] above [%s] is group-writable without the sticky bit and its "
                 "group [%u] is neither root's group nor its owner's personal group",
                 real, path, (unsigned)st.st_gid);
        found = reason;
      }
    }
    if (slash == real) break;
  }
  free(real);
  return found;
}

/* uid listed in "1001, 1002" (commas or blanks); a malformed item never
 * matches. */
static int uid_listed(const char *list, uid_t uid) {
  for (const char *p = list; p && *p;) {
    while (*p == ',' || isspace((unsigned char)*p)) p++;
    if (!*p) break;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p) return 0;
    if (errno == 0 && (*end == '\0' || *end == ',' || isspace((unsigned char)*end)) &&
        (uid_t)v == uid && v == (unsigned long)(uid_t)v)
      return 1;
    p = end;
    while (*p && *p != ',' && !isspace((unsigned char)*p)) p++;
  }
  return 0;
}

const char *apx__unsafe_stat_reason(const struct stat *st, const char *path,
                                    const char *real_path, const char *trusted_uids) {
  static __thread char reason[700];
  if (st->st_mode & S_IWOTH) {
    snprintf(reason, sizeof reason, "[%s] is world-writable", path);
    return reason;
  }
  if ((st->st_mode & S_IWGRP) && !apx__group_write_trusted(st, real_path, 0)) {
    snprintf(reason, sizeof reason,
             "[%s] is group-writable and its group [%u] is neither root's group nor its "
             "owner's personal group (to trust it, chmod g-w or list its directory in "
             "APEXX_TRUSTED_DIRS)",
             path, (unsigned)st->st_gid);
    return reason;
  }
  if (st->st_uid != 0 && st->st_uid != geteuid() && !uid_listed(trusted_uids, st->st_uid) &&
      !apx__in_trusted_dir(real_path, 0)) {
    snprintf(reason, sizeof reason,
             "[%s] is owned by uid [%u], neither root nor the current user (to trust "
             "it, list its directory in APEXX_TRUSTED_DIRS or the uid in [apexx] "
             "trusted_owner_uids of a root-owned configuration)",
             path, (unsigned)st->st_uid);
    return reason;
  }
  return NULL;
}

const char *apx__unsafe_file_reason_trusting(const char *path, const char *trusted_uids) {
  struct stat st;
  if (stat(path, &st) != 0) return NULL; /* absence is reported elsewhere */
  return apx__unsafe_stat_reason(&st, path, path, trusted_uids);
}

const char *apx__unsafe_file_reason(const char *path) {
  return apx__unsafe_file_reason_trusting(path, NULL);
}

/* A relative library name has no ".." component; no name is empty. */
int apx__library_name_ok(const char *name) {
  if (!name || !*name) return 0;
  if (name[0] == '/') return 1;
  for (const char *p = name; *p;) {
    size_t len = strcspn(p, "/");
    if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
    p += len;
    while (*p == '/') p++;
  }
  return 1;
}

/* The dynamic linker takes a name it has loaded before (or added to an
 * object it found loaded) for that object without opening anything, and
 * descriptor numbers come back. So every call maps its descriptor under a
 * name never used before: /proc/self/fd/ then 32 tokens, "./" or "/" for
 * the bits of a process-wide counter, then N. The kernel resolves every
 * such name to descriptor N; the linker still recognises a module it has
 * loaded by its device and inode and returns that one. */
static void fresh_fd_name(char *buf, size_t size, int fd) {
  static unsigned counter;
  unsigned g = __atomic_fetch_add(&counter, 1u, __ATOMIC_RELAXED);
  size_t n = (size_t)snprintf(buf, size, "/proc/self/fd/");
  for (int bit = 31; bit >= 0 && n + 3 < size; bit--)
    n += (size_t)snprintf(buf + n, size - n, "%s", (g >> bit) & 1u ? "./" : "/");
  snprintf(buf + n, size - n, "%d", fd);
}

/* text with every occurrence of name replaced by real (the linker names a
 * module by the /proc/self/fd name it was opened by); NULL when name does
 * not occur or out of memory. */
static char *replace_name(const char *text, const char *name, const char *real) {
  size_t name_len = strlen(name), real_len = strlen(real), count = 0;
  for (const char *p = strstr(text, name); p; p = strstr(p + name_len, name)) count++;
  if (count == 0) return NULL;
  size_t text_len = strlen(text);
  char *out = malloc(text_len + count * real_len + 1);
  if (!out) return NULL;
  char *o = out;
  for (const char *p = text, *hit; *p; p = hit + name_len) {
    hit = strstr(p, name);
    if (!hit) {
      strcpy(o, p);
      return out;
    }
    memcpy(o, p, (size_t)(hit - p));
    o += hit - p;
    memcpy(o, real, real_len);
    o += real_len;
    *o = '\0';
  }
  return out;
}

void *apx__dlopen_checked(const char *path, int flags, const char *trusted_uids,
                          int *not_found, char *reason, size_t reason_size) {
  *not_found = 0;
  reason[0] = '\0';
  /* O_NONBLOCK: a FIFO must not block the open; it is refused below */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *not_found = errno == ENOENT || errno == ENOTDIR;
    snprintf(reason, reason_size, "%s (%s)", *not_found ? "not found" : "cannot open",
             strerror(errno));
    return NULL;
  }
  void *handle = NULL;
  struct stat st, again;
  const char *unsafe;
  char elf_reason[300];
  if (fstat(fd, &st) != 0) {
    snprintf(reason, reason_size, "cannot stat (%s)", strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    snprintf(reason, reason_size, "not a regular file");
  } else if (st.st_mode & S_IWOTH) {
    snprintf(reason, reason_size, "refused to load: [%s] is world-writable (other users could "
             "edit it)", path);
  } else if ((unsafe = apx__unsafe_dir_reason(path)) != NULL) {
    snprintf(reason, reason_size, "refused to load: %s (other users could replace it)", unsafe);
  } else if ((unsafe = apx__unsafe_file_reason_trusting(path, trusted_uids)) != NULL) {
    snprintf(reason, reason_size, "refused to load: %s (other users could edit it)", unsafe);
  } else if (stat(path, &again) != 0 || again.st_dev != st.st_dev || again.st_ino != st.st_ino) {
    snprintf(reason, reason_size, "refused to load: [%s] changed while it was checked", path);
  } else if (apx__elf_check(fd, (uint64_t)st.st_size, elf_reason, sizeof elf_reason) != 0) {
    snprintf(reason, reason_size, "not a loadable shared object: %s", elf_reason);
  } else {
    char fd_path[160];
    fresh_fd_name(fd_path, sizeof fd_path, fd);
    /* without /proc the path itself, just checked to be this file */
    const char *open_path = access(fd_path, F_OK) == 0 ? fd_path : path;
    dlerror();
    handle = dlopen(open_path, flags);
    if (!handle) {
      const char *err = dlerror(); /* copied at once: dlerror text is fleeting */
      char *named = err && open_path != path ? replace_name(err, open_path, path) : NULL;
      snprintf(reason, reason_size, "dlopen failed: %s",
               named ? named : err ? err : "unknown error");
      free(named);
    }
  }
  close(fd);
  return handle;
}
