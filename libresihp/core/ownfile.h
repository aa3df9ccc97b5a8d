/* SPDX-License-Identifier: BSD-3-Clause */
/* Files a user names for a run's own output or input (--events, the
 * metrics textfile, --state-dir's files): opened never through a link,
 * never hanging on a FIFO or a device, and only when they are regular
 * files of this user (the effective uid), so that nobody can point a run,
 * root's helpers included, at another user's file or stall it. */
#ifndef RESIHP_CORE_OWNFILE_H
#define RESIHP_CORE_OWNFILE_H

#include <stddef.h>
#include <sys/types.h>

/* open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode),
 * then the file must be a regular one owned by us: its descriptor (in
 * blocking mode), else a negative code with a sentence in err naming the
 * path and what is wrong (RESIHP_ENOENT when it does not exist and flags
 * do not create it). */
int resihp__open_own(const char *path, int flags, mode_t mode, char *err,
                     size_t errlen);
/* 0 when path does not exist or is a regular file of ours (a link is
 * not), else RESIHP_EINVAL with a sentence in err: for a file about to be
 * replaced by a rename. */
int resihp__own_or_absent(const char *path, char *err, size_t errlen);

#endif
