/* SPDX-License-Identifier: BSD-3-Clause */
/* See ownfile.h. */
#include "config.h"

#include "ownfile.h"

#include "errbuf.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Why st is not a regular file of ours, or NULL. */
static const char *not_own(const struct stat *st) {
  if (S_ISLNK(st->st_mode))
    return "is a symbolic link";
  if (!S_ISREG(st->st_mode))
    return S_ISFIFO(st->st_mode) ? "is a FIFO, not a regular file"
                                 : "is not a regular file";
  if (st->st_uid != geteuid())
    return "belongs to another user";
  return NULL;
}

static int refuse(const char *path, const char *why, const struct stat *st,
                  char *err, size_t errlen) {
  resihp__errf(err, errlen, "refusing %.200s: it %s (owner uid %ld; this run "
               "is uid %ld): name a regular file of your own",
               path, why, (long)st->st_uid, (long)geteuid());
  return RESIHP_EINVAL;
}

int resihp__open_own(const char *path, int flags, mode_t mode, char *err,
                     size_t errlen) {
  int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                mode);
  if (fd < 0) {
    int e = errno;
    struct stat st;
    const char *why = e != ENOENT && !lstat(path, &st) ? not_own(&st) : NULL;
    if (why) /* a link (ELOOP), a FIFO without a reader (ENXIO), ... */
      return refuse(path, why, &st, err, errlen);
    resihp__errf(err, errlen, "cannot open %.200s: %s", path, strerror(e));
    return e == ENOENT ? RESIHP_ENOENT : RESIHP_EIO;
  }
  struct stat st;
  const char *why = fstat(fd, &st) ? "cannot be examined" : not_own(&st);
  if (why) {
    close(fd);
    return refuse(path, why, &st, err, errlen);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    resihp__errf(err, errlen, "cannot use %.200s: %s", path, strerror(errno));
    close(fd);
    return RESIHP_EIO;
  }
  return fd;
}

int resihp__own_or_absent(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st))
    return errno == ENOENT ? 0 : RESIHP_EIO;
  const char *why = not_own(&st);
  return why ? refuse(path, why, &st, err, errlen) : 0;
}
