/* SPDX-License-Identifier: BSD-3-Clause */
/* The job secret's file and its clean-up (see secret.h).
 *
 * Removal is race-free against a creator: a creator locks its new file
 * only after creating it, so a cleaner may lock and remove it in between;
 * the creator then finds that its name no longer leads to its file (after
 * locking) and makes a new one. A cleaner removes a file only while it
 * holds the exclusive lock, and only if the name still leads to the file
 * it locked. The same as the probe directories' clean-up (probe/rundir.c). */
#include "config.h"

#include "secret.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX ".resihp-secret."

int resihp__secret_parse_name(const char *name, char *job, size_t len) {
  if (strncmp(name, PREFIX, strlen(PREFIX)))
    return 0;
  const char *j = name + strlen(PREFIX), *dot = strrchr(j, '.');
  if (!dot || dot == j || !dot[1] || (size_t)(dot - j) >= len)
    return 0;
  for (const char *p = j; p < dot; p++)
    if (!((*p >= '0' && *p <= '9') || *p == '_'))
      return 0;
  for (const char *p = dot + 1; *p; p++)
    if (*p < '0' || *p > '9')
      return 0;
  memcpy(job, j, (size_t)(dot - j));
  job[dot - j] = '\0';
  return 1;
}

/* The name in dfd leads to the file open as fd (not a link). */
static int same_file(int dfd, const char *name, int fd) {
  struct stat a, b;
  return !fstatat(dfd, name, &a, AT_SYMLINK_NOFOLLOW) && !fstat(fd, &b) &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int resihp__secret_clean_stale(const char *dir,
                               resihp__secret_job_active_fn job_active,
                               long max_entries) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return 0;
  int scan = dup(dfd);
  DIR *d = scan >= 0 ? fdopendir(scan) : NULL;
  if (!d) {
    if (scan >= 0)
      close(scan);
    close(dfd);
    return 0;
  }
  uid_t self = geteuid();
  int removed = 0;
  struct dirent *e;
  for (long n = 0; n < max_entries && (e = readdir(d)) != NULL; n++) {
    char job[64];
    struct stat st;
    if (!resihp__secret_parse_name(e->d_name, job, sizeof(job)) ||
        fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
        !S_ISREG(st.st_mode) || st.st_uid != self)
      continue; /* not ours, a link, or another user's */
    int fd = openat(dfd, e->d_name,
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
      continue;
    /* held: its job (a keeper, a primary or a standby) still needs it;
     * no locks here (ENOLCK, EINVAL...): nothing proves it stale */
    if (!flock(fd, LOCK_EX | LOCK_NB) && same_file(dfd, e->d_name, fd) &&
        !(job_active && job_active(job)) && !unlinkat(dfd, e->d_name, 0))
      removed++;
    close(fd); /* and its lock */
  }
  closedir(d);
  close(dfd);
  return removed;
}

int resihp__secret_create(const char *dir, const char *job, char *path,
                          size_t len, int *lock_fd) {
  *lock_fd = -1;
  if ((size_t)snprintf(path, len, "%s/" PREFIX "%s.%ld", dir, job,
                       (long)getpid()) >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  /* a cleaner may remove the file between its creation and its lock:
   * then again (a cleaner removes only a file nobody holds) */
  for (int tries = 0; tries < 8; tries++) {
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      return -1;
    uint8_t key[32];
    int ok = getrandom(key, sizeof(key), 0) == (ssize_t)sizeof(key) &&
             write(fd, key, sizeof(key)) == (ssize_t)sizeof(key);
    memset(key, 0, sizeof(key));
    if (!ok) {
      int err = errno ? errno : EIO;
      close(fd);
      unlink(path);
      errno = err;
      return -1;
    }
    if (flock(fd, LOCK_SH)) {
      /* no locks on this file system: held by nobody, so only a later
       * start that can lock may remove it (then Slurm must say the job
       * is over too) */
      *lock_fd = fd;
      return 0;
    }
    struct stat a, b;
    if (!lstat(path, &a) && !fstat(fd, &b) && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      *lock_fd = fd;
      return 0;
    }
    close(fd); /* removed under us before the lock: make it again */
  }
  errno = EAGAIN;
  return -1;
}

int resihp__secret_hold(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -1;
  if (flock(fd, LOCK_SH)) {
    close(fd);
    return -1;
  }
  return fd;
}
