/* SPDX-License-Identifier: BSD-3-Clause */
/* Coordinator failover: the state as text (snapshot), mirrored write-ahead
 * through opts.on_mirror, and a coordinator rebuilt from it (restore). */
#include "config.h"

#include "coord_internal.h"

#include <resihp/error.h>

int resihp__coord_snapshot(resihp__coord_t *c, resihp__wire_buf_t *b) {
  (void)c;
  (void)b;
  return RESIHP_ENOTSUP;
}

void resihp__coord_mirror(resihp__coord_t *c) {
  (void)c;
}

int resihp__coord_restore(const resihp__coord_opts_t *o, const char *snap,
                          size_t len, long ledger_have, resihp__coord_t **out) {
  (void)o;
  (void)snap;
  (void)len;
  (void)ledger_have;
  (void)out;
  return RESIHP_ENOTSUP;
}
