/* SPDX-License-Identifier: BSD-3-Clause */
/* Point to point and broadcast over a communicator (see resihp/allreduce.h).
 * Placeholder until the implementation lands: every call is refused. */
#include "config.h"

#include <resihp/allreduce.h>
#include <resihp/error.h>

int resihp_send(resihp_comm_t *comm, int peer, const void *buf, size_t bytes) {
  (void)comm, (void)peer, (void)buf, (void)bytes;
  return RESIHP_ENOTSUP;
}

int resihp_recv(resihp_comm_t *comm, int peer, void *buf, size_t bytes) {
  (void)comm, (void)peer, (void)buf, (void)bytes;
  return RESIHP_ENOTSUP;
}

int resihp_bcast(resihp_comm_t *comm, int root, void *buf, size_t bytes) {
  (void)comm, (void)root, (void)buf, (void)bytes;
  return RESIHP_ENOTSUP;
}
