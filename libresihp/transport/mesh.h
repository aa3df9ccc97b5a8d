/* SPDX-License-Identifier: BSD-3-Clause */
/* Setting up the authenticated full mesh of a communicator.
 *
 * Rank i connects to every rank j < i and accepts from every j > i, twice
 * per pair: channel 0 carries data, channel 1 control (heartbeats, aborts,
 * membership agreement). Every connection is authenticated both ways with a
 * challenge-response over the per-job secret K:
 *
 *   client -> server  HELLO     magic, version, channel, src, dst, n, Nc
 *   server -> client  CHALLENGE Ns, HMAC(K, "resihp-srv" | HELLO | Ns)
 *   client -> server  RESPONSE  HMAC(K, "resihp-cli" | HELLO | Ns)
 *   server -> client  VERDICT   1 accepted, 0 refused
 *
 * Nc and Ns are fresh random nonces, so a recorded exchange cannot be
 * replayed. The client checks the server's MAC before proving anything
 * itself. A connection that fails any check is refused, logged with the
 * remote address, and the server keeps waiting for the genuine peer. The
 * server runs its handshakes concurrently, each with a deadline and at most
 * 64 pending (the oldest unfinished one is dropped for a newer one), so
 * idle or garbage connections cannot delay a genuine peer; a client whose
 * connection was dropped before the challenge dials again.
 *
 * Both nonces also key the per-message MACs of the connection that follows
 * (msgauth.h; labels "resihp-data" and "resihp-ctrl").
 */
#ifndef RESIHP_TRANSPORT_MESH_H
#define RESIHP_TRANSPORT_MESH_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "msgauth.h"

typedef struct {
  int rank, nranks;
  const char *const *endpoints;
  int listen_fd; /* bound to endpoints[rank], or -1 */
  const uint8_t *secret;
  size_t secret_len;
  int timeout_ms;
  /* polled while waiting for a peer; non-zero ends the set-up with
   * RESIHP_EPEER (resihp_comm_opts_t.setup_abort) */
  int (*abort)(void *arg);
  void *abort_arg;
} resihp__mesh_opts_t;

/* Fill data_fds[] and ctrl_fds[] (nranks entries, -1 for self) with
 * authenticated, non-blocking, TCP_NODELAY sockets, and data_auth[] and
 * ctrl_auth[] (nranks entries each, or NULL) with each connection's
 * per-message MAC state. All or nothing. */
int resihp__mesh_connect(const resihp__mesh_opts_t *o, int *data_fds,
                         int *ctrl_fds, resihp__msgauth_t *data_auth,
                         resihp__msgauth_t *ctrl_auth);

/* Monotonic milliseconds. */
int64_t resihp__now_ms(void);
/* The CLOCK_REALTIME instant ms milliseconds from now (ms >= 0): the
 * absolute deadline pthread_cond_timedwait wants. */
struct timespec resihp__realtime_in(int64_t ms);

/* Client half, exposed for tests that play a peer: connect to endpoint and
 * authenticate as rank src towards rank dst on channel. Returns the fd or a
 * negative code; fills *auth (if not NULL) with the connection's MAC state. */
int resihp__mesh_dial(const char *endpoint, const uint8_t *secret,
                      size_t secret_len, int src, int dst, int nranks,
                      int channel, int64_t deadline_ms,
                      resihp__msgauth_t *auth);

/* Orderly close of n sockets (entries -1 are skipped; all set to -1):
 * shut down the sending side, then read and discard until every peer has
 * closed too or linger_ms passed. Closing a socket that still holds unread
 * data makes the kernel send a reset, which can destroy data the peer has
 * not read yet; this avoids that. */
void resihp__graceful_close(int *fds, int n, int linger_ms);

/* Write/read exactly len bytes before deadline (non-blocking fd). */
int resihp__io_full(int fd, void *buf, size_t len, int writing,
                    int64_t deadline_ms);

#endif
