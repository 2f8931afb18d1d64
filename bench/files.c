/* SPDX-License-Identifier: Apache-2.0 */
/* The files apexx-bench writes and reads (docs/report.md, Writing the file
 * and Input limits): outputs prepared as a temporary beside the target
 * (a symlink's target) and renamed, written in place to devices and FIFOs,
 * or to the standard streams, in pairs whose Markdown follows its JSON;
 * inputs read whole from regular files only, without blocking, within a
 * size cap. */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- files ------------------------------------------------------------- */

/* Write all of text to fd; 0, or -1 with errno set. */
static int write_all(int fd, const char *text) {
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    done += (size_t)w;
  }
  return 0;
}

const char *bench_file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symlink";
  return "a regular file";
}

/* The ".NAME.tmp." prefix of path's temporary files, split into the
 * directory and the prefix; caller frees both. */
static int temp_prefix(const char *path, char **dir, char **prefix) {
  char *dir_copy = strdup(path), *base_copy = strdup(path);
  *dir = *prefix = NULL;
  if (dir_copy && base_copy) {
    *dir = strdup(dirname(dir_copy));
    size_t len = strlen(path) + 16;
    *prefix = malloc(len);
    if (*prefix) snprintf(*prefix, len, ".%s.tmp.", basename(base_copy));
  }
  free(dir_copy);
  free(base_copy);
  if (!*dir || !*prefix) {
    free(*dir);
    free(*prefix);
    return -1;
  }
  return 0;
}

int bench_clean_stale_temps(const char *path, double max_age_s) {
  if (strcmp(path, "-") == 0) return 0;
  /* a symlink's temporaries lie beside its target (bench_write_temp) */
  char *resolved = realpath(path, NULL);
  char *dir, *prefix;
  int split = temp_prefix(resolved ? resolved : path, &dir, &prefix);
  free(resolved);
  if (split != 0)
    return 0;
  int removed = 0;
  DIR *d = opendir(dir);
  size_t plen = strlen(prefix);
  time_t now = time(NULL);
  struct dirent *ent;
  while (d && (ent = readdir(d))) {
    /* mkstemp's suffix: exactly six characters */
    if (strncmp(ent->d_name, prefix, plen) != 0 || strlen(ent->d_name) != plen + 6) {
      continue;
    }
    size_t flen = strlen(dir) + strlen(ent->d_name) + 2;
    char *full = malloc(flen);
    if (!full) break;
    snprintf(full, flen, "%s/%s", dir, ent->d_name);
    struct stat st;
    /* only our own regular files */
    if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        difftime(now, st.st_mtime) >= max_age_s && unlink(full) == 0) {
      removed++;
    }
    free(full);
  }
  if (d) closedir(d);
  free(dir);
  free(prefix);
  return removed;
}

int bench_write_temp(const char *path, const char *text,
                     bench_pending_file *pending, char *err, size_t err_size) {
  memset(pending, 0, sizeof *pending);
  /* the standard streams by name: written to the descriptor itself (a
   * reopen of /proc/self/fd/N would start at offset 0 of a redirected
   * file, and truncating it would lose what was written before) */
  static const struct {
    const char *name;
    int fd;
  } streams[] = {{"-", 1},          {"/dev/stdout", 1},      {"/dev/fd/1", 1},
                 {"/proc/self/fd/1", 1}, {"/dev/stderr", 2}, {"/dev/fd/2", 2},
                 {"/proc/self/fd/2", 2}};
  int stream_fd = -1;
  for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
    if (strcmp(path, streams[i].name) == 0) stream_fd = streams[i].fd;
  }
  if (stream_fd >= 0) {
    pending->mode = BENCH_WRITE_STDOUT;
    pending->fd = stream_fd;
    pending->text = strdup(text);
    pending->final_path = strdup(path);
    if (!pending->text || !pending->final_path) goto oom;
    return 0;
  }
  struct stat lst;
  char *resolved = NULL; /* a symlink's regular target */
  if (lstat(path, &lst) == 0 && !S_ISREG(lst.st_mode)) {
    /* never replace what is not a regular file */
    struct stat st;
    int followed = stat(path, &st) == 0;
    if (S_ISLNK(lst.st_mode) && !followed) {
      snprintf(err, err_size, "[%s] is a symlink to a missing file (%s); refusing "
               "to create its target", path, strerror(errno));
      return -1;
    }
    if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode)) {
      snprintf(err, err_size, "[%s] is %s%s; give a file path", path,
               S_ISLNK(lst.st_mode) ? "a symlink to " : "", bench_file_kind(st.st_mode));
      return -1;
    }
    if (S_ISLNK(lst.st_mode) && S_ISREG(st.st_mode)) {
      /* a symlink to a regular file: its target is replaced like a regular
       * file (temporary beside the target, rename), the link stays; written
       * in place, a full disk left the target half-written */
      resolved = realpath(path, NULL);
      if (!resolved) {
        snprintf(err, err_size, "cannot resolve the symlink [%s]: %s", path, strerror(errno));
        return -1;
      }
    } else {
      pending->mode = BENCH_WRITE_IN_PLACE;
      pending->text = strdup(text);
      pending->final_path = strdup(path);
      if (!pending->text || !pending->final_path)
        goto oom;
      return 0;
    }
  }
  const char *target = resolved ? resolved : path;
  char *dir, *prefix;
  if (temp_prefix(target, &dir, &prefix) != 0) {
    free(resolved);
    goto oom;
  }
  size_t tmp_len = strlen(dir) + strlen(prefix) + 16;
  char *tmp = malloc(tmp_len);
  if (!tmp) {
    free(dir);
    free(prefix);
    free(resolved);
    goto oom;
  }
  /* same directory as the target, so rename() stays atomic */
  snprintf(tmp, tmp_len, "%s/%sXXXXXX", dir, prefix);
  free(dir);
  free(prefix);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(err, err_size, "cannot create a temporary file beside [%s]: %s", target,
             strerror(errno));
    free(tmp);
    free(resolved);
    return -1;
  }
  if (write_all(fd, text) != 0) {
    snprintf(err, err_size, "cannot write [%s]: %s (the target [%s] is unchanged)", tmp,
             strerror(errno), target);
    close(fd);
    unlink(tmp);
    free(tmp);
    free(resolved);
    return -1;
  }
  /* mkstemp makes 0600; a report is an ordinary file (0644 minus umask) */
  mode_t mask = umask(0);
  umask(mask);
  int finish_errno = 0;
  if (fchmod(fd, 0666 & ~mask) != 0 || fsync(fd) != 0)
    finish_errno = errno;
  if (close(fd) != 0 && !finish_errno)
    finish_errno = errno;
  if (finish_errno) {
    snprintf(err, err_size, "cannot finish [%s]: %s (the target [%s] is unchanged)", tmp,
             strerror(finish_errno), target);
    unlink(tmp);
    free(tmp);
    free(resolved);
    return -1;
  }
  pending->mode = BENCH_WRITE_RENAME;
  pending->tmp_path = tmp;
  pending->final_path = resolved ? resolved : strdup(path);
  if (!pending->final_path) {
    bench_discard_temp(pending);
    goto oom;
  }
  return 0;
oom:
  bench_discard_temp(pending);
  snprintf(err, err_size, "%s: out of memory", path);
  return -1;
}

/* In place: open the existing target (no O_CREAT, so a symlink that went
 * dangling is not followed into a new file; O_NONBLOCK so a FIFO without a
 * reader is an error rather than a hang), truncate regular targets. */
static int write_in_place(const char *path, const char *text, char *err,
                          size_t err_size) {
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, err_size, "cannot open [%s] for writing in place: %s%s", path,
             strerror(errno),
             errno == ENXIO ? " (a FIFO with no reader)" : "");
    return -1;
  }
  struct stat st;
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) {
    snprintf(err, err_size, "cannot truncate [%s]: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (write_all(fd, text) != 0) {
    snprintf(err, err_size, "cannot write [%s]: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (close(fd) != 0) {
    snprintf(err, err_size, "cannot finish [%s]: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

int bench_commit_temp(bench_pending_file *pending, char *err, size_t err_size) {
  int rc = 0;
  switch (pending->mode) {
  case BENCH_WRITE_NONE:
    return 0;
  case BENCH_WRITE_STDOUT:
    fflush(stdout);
    if (write_all(pending->fd, pending->text) != 0) {
      snprintf(err, err_size, "cannot write standard %s: %s",
               pending->fd == 2 ? "error" : "output", strerror(errno));
      rc = -1;
    }
    break;
  case BENCH_WRITE_IN_PLACE:
    rc = write_in_place(pending->final_path, pending->text, err, err_size);
    break;
  case BENCH_WRITE_RENAME:
    if (rename(pending->tmp_path, pending->final_path) != 0) {
      snprintf(err, err_size, "cannot rename [%s] to [%s]: %s", pending->tmp_path,
               pending->final_path, strerror(errno));
      unlink(pending->tmp_path);
      rc = -1;
      break;
    }
    /* make the rename itself durable: fsync the directory (best effort; some
     * file systems refuse fsync on a directory) */
    {
      char *dir_copy = strdup(pending->final_path);
      if (dir_copy) {
        int dir_fd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY);
        if (dir_fd >= 0) {
          (void)fsync(dir_fd);
          close(dir_fd);
        }
        free(dir_copy);
      }
    }
    break;
  }
  free(pending->tmp_path);
  free(pending->final_path);
  free(pending->text);
  memset(pending, 0, sizeof *pending);
  return rc;
}

void bench_discard_temp(bench_pending_file *pending) {
  if (pending->tmp_path) unlink(pending->tmp_path);
  free(pending->tmp_path);
  free(pending->final_path);
  free(pending->text);
  memset(pending, 0, sizeof *pending);
}

int bench_write_atomic(const char *path, const char *text, char *err,
                       size_t err_size) {
  bench_pending_file pending;
  if (bench_write_temp(path, text, &pending, err, err_size) != 0) return -1;
  return bench_commit_temp(&pending, err, err_size);
}

int bench_write_pair(const char *tool, const char *json_path, const char *json, const char *md_path,
                     const char *md) {
  char err[1024];
  bench_pending_file pj, pm;
  memset(&pj, 0, sizeof pj);
  memset(&pm, 0, sizeof pm);
  if (json_path)
    bench_clean_stale_temps(json_path, 600.0);
  if (md_path)
    bench_clean_stale_temps(md_path, 600.0);
  if (json_path && bench_write_temp(json_path, json, &pj, err, sizeof err) != 0) {
    fprintf(stderr, "%s: --output-json: %s; neither file was written\n", tool, err);
    return -1;
  }
  if (md_path && bench_write_temp(md_path, md, &pm, err, sizeof err) != 0) {
    fprintf(stderr, "%s: --output-md: %s; neither file was written\n", tool, err);
    bench_discard_temp(&pj);
    return -1;
  }
  if (bench_commit_temp(&pj, err, sizeof err) != 0) {
    fprintf(stderr, "%s: --output-json: %s; neither file was written\n", tool, err);
    bench_discard_temp(&pm);
    return -1;
  }
  if (bench_commit_temp(&pm, err, sizeof err) != 0) {
    fprintf(stderr,
            "%s: --output-md: %s; the JSON [%s] was written, the Markdown [%s] was not "
            "(any older file there is unchanged)\n",
            tool, err, json_path ? json_path : "-", md_path);
    return -1;
  }
  return 0;
}

char *bench_read_file(const char *path, size_t max_bytes, const char *what, char *err,
                      size_t err_size) {
  /* O_NONBLOCK: a FIFO must not block the open (it is refused below) */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int open_errno = errno;
    struct stat st;
    if (open_errno == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
      snprintf(err, err_size, "[%s] is %s, not a regular file; %s is read from a regular file",
               path, bench_file_kind(st.st_mode), what);
    } else {
      snprintf(err, err_size, "cannot read [%s]: %s", path, strerror(open_errno));
    }
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, err_size, "cannot read [%s]: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, err_size, "[%s] is %s, not a regular file; %s is read from a regular file", path,
             bench_file_kind(st.st_mode), what);
    close(fd);
    return NULL;
  }
  if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
    snprintf(err, err_size,
             "[%s] is [%lld] bytes, more than %s may hold [%zu] (docs/report.md, Input "
             "limits)",
             path, (long long)st.st_size, what, max_bytes);
    close(fd);
    return NULL;
  }
  /* the file's size now, and room to notice it growing past the cap */
  size_t cap = (size_t)st.st_size + 1, len = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    ssize_t got = read(fd, buf + len, cap - len);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      snprintf(err, err_size, "cannot read [%s]: %s", path, strerror(errno));
      free(buf);
      close(fd);
      return NULL;
    }
    if (got == 0)
      break;
    len += (size_t)got;
    if (len > max_bytes) {
      snprintf(err, err_size,
               "[%s] grew past [%zu] bytes while read, more than %s may hold (docs/report.md, "
               "Input limits)",
               path, max_bytes, what);
      free(buf);
      close(fd);
      return NULL;
    }
    if (len == cap) {
      size_t grown_cap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
      char *grown = realloc(buf, grown_cap + 1);
      if (!grown) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = grown;
      cap = grown_cap;
    }
  }
  close(fd);
  if (!buf) {
    snprintf(err, err_size, "[%s]: out of memory", path);
    return NULL;
  }
  buf[len] = '\0';
  return buf;
}
