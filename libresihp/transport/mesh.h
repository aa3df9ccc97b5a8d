/* SPDX-License-Identifier: BSD-3-Clause */
/* Setting up the authenticated full mesh of a communicator.
 *
 * Rank i connects to every rank j < i and accepts from every j > i, twice
 * per pair: channel 0 carries data, channel 1 control (heartbeats, aborts,
 * membership agreement). Every connection is authenticated both ways with a
 * challenge-response over the per-job secret K, on two connections:
 *
 *   client -> server  HELLO     magic, version, channel, src, dst, n, group,
 *                               Nc
 *   server -> client  CHALLENGE Ns, HMAC(K, "resihp-srv" | HELLO | Ns)
 *                     and the server closes
 *   client -> server  HELLO (answer=1), Ns, HMAC(K, "resihp-cli" | HELLO | Ns)
 *                     on a new connection, at once
 *   server -> client  VERDICT   1 accepted (or it closes)
 *
 * Ns is a cookie (cookie.h): the server's clock, random bytes and its MAC
 * of the hello under a key of its own, valid 10 s, so the server keeps
 * nothing between its challenge and the answer, and a flood of
 * connections (valid hellos included: anyone can write one) has no table
 * of challenges to fill; Nc is a fresh random nonce, and an answer
 * replayed with its cookie is refused. The client checks the server's MAC
 * before proving anything itself. A connection that fails any check is
 * refused, logged with the remote address, and the server keeps waiting
 * for the genuine peer. What the server holds is connections whose bytes
 * have not come yet, each with a deadline and at most 64 (the oldest
 * without a valid hello goes first); a genuine client's bytes come with
 * its connection and are read at once, and a client whose connection was
 * dropped dials again.
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
  /* which communicator of the ranks behind listen_fd (0: the only one);
   * a hello for another group is refused, and its sender dials again */
  uint32_t group;
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

/* The handshake's version, in its hello. */
#define RESIHP__MESH_VERSION 3
/* A hello's bytes on the wire (tests that play a peer or a relay). */
#define RESIHP__MESH_HELLO_BYTES 56

/* Tests only: the client half waits this long before it answers the
 * server (a round trip of a distant rank). 0 in a job. */
extern int resihp__mesh_test_rtt_ms;

/* Client half, exposed for tests that play a peer: connect to endpoint and
 * authenticate as rank src towards rank dst on channel. Returns the fd or a
 * negative code; fills *auth (if not NULL) with the connection's MAC state. */
int resihp__mesh_dial(const char *endpoint, const uint8_t *secret,
                      size_t secret_len, int src, int dst, int nranks,
                      int channel, int64_t deadline_ms,
                      resihp__msgauth_t *auth);

/* Tests and the fuzz target (tests/fuzz/fuzz_mesh_hs.c): the server's
 * side of the handshake on one connected socket fd, as far as what has
 * come allows: 0 still waiting, 1 the peer proved itself (verdict sent), 2
 * a challenge went out, negative: refused. */
struct resihp__cookie_jar;
int resihp__mesh_hs_serve(const resihp__mesh_opts_t *o,
                          struct resihp__cookie_jar *jar, int fd);

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
