/* SPDX-License-Identifier: BSD-3-Clause */
/* See errbuf.h. */
#include "config.h"

#include "errbuf.h"

#include <stdarg.h>
#include <stdio.h>

void resihp__errf(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}
