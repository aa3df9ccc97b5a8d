/* SPDX-License-Identifier: BSD-3-Clause */
/* Writing a user-facing error sentence into a caller's (err, errlen) buffer,
 * the convention of every parsing function in libresihp. */
#ifndef RESIHP_CORE_ERRBUF_H
#define RESIHP_CORE_ERRBUF_H

#include <stddef.h>

/* vsnprintf into err; does nothing when err is NULL or errlen is 0. */
void resihp__errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
