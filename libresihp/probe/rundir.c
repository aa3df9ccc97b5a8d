/* SPDX-License-Identifier: BSD-3-Clause */
/* Per-step probe directories and their clean-up (see probe.h).
 *
 * A step's directory, BASE/resihp.UID.JOB.STEP.XXXXXX, is made by mkdtemp
 * with the job user's credentials and locked (flock on the directory
 * itself) by its slurmstepd for the step's whole life; slurm_spank_exit
 * removes it. When a node dies, nothing runs slurm_spank_exit and the
 * directory stays: a later step start removes it. "Provably ours and
 * stale" is: the name has exactly our form, the entry is a real directory
 * (never a symlink) owned by the uid its name carries, nobody holds its
 * lock (a killed slurmstepd released it; a live one still holds it), and
 * it holds nothing but the names we write. Root does the clean-up with
 * the owner's effective uid, every call relative to descriptors opened
 * without following links: nothing a user plants can make it delete what
 * that user could not delete anyway.
 *
 * A creator locks its directory only after mkdtemp, so a cleaner may take
 * the lock first and remove the directory: the creator then finds the name
 * gone (or pointing elsewhere) after locking, and makes a new one. The
 * cleaner removes a directory only while holding its lock. */
#include "config.h"

#include "probe.h"

#include "../core/errbuf.h"

#include <resihp/error.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a step writes into its directory (spank/probe.c, report.c). */
static const char *const ours[] = {RESIHP_RUNDIR_RESULTS,
                                   RESIHP_RUNDIR_RESULTS ".tmp"};

/* Digits of an unsigned 32-bit number without leading zeros, then sep. */
static const char *parse_u32(const char *p, char sep, unsigned long *out) {
  const char *q = p;
  unsigned long v = 0;
  while (*q >= '0' && *q <= '9' && q - p < 10) {
    v = v * 10 + (unsigned long)(*q - '0');
    q++;
  }
  if (q == p || *q != sep || (q - p > 1 && *p == '0') || v > 0xffffffffUL)
    return NULL;
  *out = v;
  return q + 1;
}

int resihp__rundir_parse_name(const char *name, uid_t *uid) {
  static const char prefix[] = "resihp.";
  if (strncmp(name, prefix, sizeof(prefix) - 1) != 0)
    return 0;
  const char *p = name + sizeof(prefix) - 1;
  unsigned long u, job, step;
  if (!(p = parse_u32(p, '.', &u)) || !(p = parse_u32(p, '.', &job)) ||
      !(p = parse_u32(p, '.', &step)))
    return 0;
  /* mkdtemp's six characters */
  for (int i = 0; i < 6; i++) {
    char c = p[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  if (p[6] != '\0')
    return 0;
  *uid = (uid_t)u;
  return 1;
}

int resihp__rundir_create(const char *base, uid_t uid, unsigned long job,
                          unsigned long step, char *path, size_t len,
                          char *err, size_t errlen) {
  if (!resihp__probe_valid_dir(base)) {
    resihp__errf(err, errlen,
                 "probe-run-dir '%.80s' is not a usable absolute path", base);
    return RESIHP_EINVAL;
  }
  for (int attempt = 0; attempt < 3; attempt++) {
    if (snprintf(path, len, "%s/resihp.%lu.%lu.%lu.XXXXXX", base,
                 (unsigned long)uid, job, step) >= (int)len) {
      resihp__errf(err, errlen, "probe-run-dir '%.80s' is too long", base);
      return RESIHP_ERANGE;
    }
    /* mode 0700: until it is locked nobody else can even open it */
    if (!mkdtemp(path)) {
      resihp__errf(err, errlen, "cannot create a probe directory under %.200s: "
                   "%s", base, strerror(errno));
      return RESIHP_EIO;
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      continue; /* removed by a cleaner before we could lock it */
    struct stat a, b;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 &&
        lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      return fd;
    close(fd);
    (void)rmdir(path); /* ours and empty, or already gone */
  }
  resihp__errf(err, errlen, "cannot create and lock a probe directory under "
               "%.200s", base);
  return RESIHP_EIO;
}

int resihp__rundir_remove(int basefd, const char *name, uid_t uid,
                          int if_unlocked) {
  int dfd = openat(basefd, name,
                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return RESIHP_ENOENT; /* gone, not a directory, or a symlink */
  struct stat st;
  int rc = RESIHP_EBUSY;
  if (fstat(dfd, &st) != 0 || st.st_uid != uid) {
    rc = RESIHP_EINVAL;
    goto out;
  }
  if (if_unlocked && flock(dfd, LOCK_EX | LOCK_NB) != 0)
    goto out; /* its step still runs */
  for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
    (void)unlinkat(dfd, ours[i], 0);
  /* Fails (ENOTEMPTY) when anything else is inside: that is not ours. */
  rc = unlinkat(basefd, name, AT_REMOVEDIR) == 0 ? 0 : RESIHP_EBUSY;
out:
  close(dfd);
  return rc;
}

int resihp__rundir_clean_stale(const char *base, long max_entries,
                               int max_removed) {
  int basefd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (basefd < 0)
    return RESIHP_EIO;
  int scan = dup(basefd);
  DIR *d = scan >= 0 ? fdopendir(scan) : NULL;
  if (!d) {
    if (scan >= 0)
      close(scan);
    close(basefd);
    return RESIHP_EIO;
  }
  uid_t self = geteuid();
  int removed = 0;
  struct dirent *e;
  /* A user can fill the directory with entries: the scan is bounded. */
  for (long n = 0; n < max_entries && removed < max_removed &&
                   (e = readdir(d)) != NULL;
       n++) {
    uid_t uid;
    if (!resihp__rundir_parse_name(e->d_name, &uid))
      continue;
    struct stat st;
    if (fstatat(basefd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != uid)
      continue; /* a symlink, a file, or not its owner's: not ours */
    if (self != 0 && uid != self)
      continue;
    /* As root, act as the owner: the kernel then refuses whatever the
     * owner could not do. */
    if (self == 0 && uid != 0 && seteuid(uid) != 0)
      continue;
    if (resihp__rundir_remove(basefd, e->d_name, uid, 1) == 0)
      removed++;
    if (self == 0 && uid != 0 && seteuid(0) != 0) {
      removed = RESIHP_ESYS; /* cannot act as root again: stop here */
      break;
    }
  }
  closedir(d);
  close(basefd);
  return removed;
}
