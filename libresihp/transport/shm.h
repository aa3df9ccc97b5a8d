/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared-memory rings for peers on the same host.
 *
 * For each ordered pair of ranks on one host there is one single-producer,
 * single-consumer byte ring in a POSIX shared-memory object created (mode
 * 0600) by the consumer. The TCP transport uses a ring exactly like its
 * socket - a framed byte stream, so framing, epochs, cancel and padding stay
 * the same - but data moves with one memcpy on each side instead of through
 * the kernel's TCP stack (on the receiving side no copy at all when the
 * bytes are summed straight out of the ring, resihp__ring_consume). The authenticated TCP socket of the pair remains:
 * it carries one-byte doorbells (data available / space available, sent only
 * when the other side said it is about to sleep) and its EOF still means
 * that the peer closed or died.
 */
#ifndef RESIHP_TRANSPORT_SHM_H
#define RESIHP_TRANSPORT_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "msgauth.h"

typedef struct resihp__ring resihp__ring_t;

/* Decide per peer whether both ends can share memory, and map the rings.
 * Collective over the mesh: every rank calls it right after the mesh is up
 * with the same want_shm. in[i]/out[i] stay NULL for peers that use TCP.
 * Uses data_fds (blocking exchange bounded by deadline_ms); with auth (the
 * data links' MAC state, n entries, or NULL) every message carries a MAC,
 * and a bad one is RESIHP_EPROTO. */
int resihp__shm_setup(int self, int n, const int *data_fds,
                      resihp__msgauth_t *auth, int want_shm,
                      int64_t deadline_ms, resihp__ring_t **in,
                      resihp__ring_t **out);

void resihp__ring_unmap(resihp__ring_t *r);

/* A ring's name, /resihp-PID-PEER-NONCE, lives only until both sides have
 * mapped it: the side that maps it (the producer) unlinks it at once, and
 * the creator at the latest when the set-up ends. Only a creator that dies
 * before its peer mapped the ring leaves the name (4 MiB of /dev/shm):
 * every set-up that wants shared memory first removes the rings of this
 * user whose creator (the PID in the name) is gone, killed or a zombie.
 * Returns how many it removed; the scan is bounded. */
int resihp__shm_clean_stale(void);
/* The creator's PID of a name (without the leading '/') of exactly the
 * form resihp-PID-PEER-NONCE (decimal PID > 0 and PEER without leading
 * zeros, NONCE 16 lowercase hex digits), or -1. /dev/shm is everyone's:
 * tests/fuzz/fuzz_shm_name. */
pid_t resihp__shm_ring_creator(const char *name);

/* Test hook (tests/unit): called by resihp__shm_setup at each of its
 * phases, with the peer concerned, so a test can stop the rank there and
 * kill it from outside. */
enum {
  RESIHP__SHM_CREATED = 0, /* the ring for peer exists, its name unsent */
  RESIHP__SHM_NAMED = 1,   /* peer was sent the name of its ring */
  RESIHP__SHM_MAPPED = 2,  /* peer's ring for us is mapped (or refused) */
  RESIHP__SHM_TOLD = 3,    /* peer was told whether that worked */
  RESIHP__SHM_DONE = 4,    /* heard whether peer mapped our ring */
  RESIHP__SHM_NPHASES = 5
};
extern void (*resihp__shm_test_hook)(int phase, int peer);

/* The sealed set-up messages of resihp__shm_setup, for other set-up
 * exchanges on the data links (cma.c): len bytes, then (with auth) their
 * MAC; a MAC that fails is RESIHP_EPROTO (logged, naming peer). */
int resihp__setup_send(int fd, resihp__msgauth_t *auth, const void *m,
                       size_t len, int64_t deadline_ms);
int resihp__setup_recv(int fd, resihp__msgauth_t *auth, void *m, size_t len,
                       int64_t deadline_ms, int peer);

/* Every index the peer publishes is checked against this side's own: a
 * ring operation returns RESIHP_EPROTO (and touches nothing) when the
 * peer's head or tail is impossible; the caller then drops the peer. */

/* Producer: copy up to the free space from iov; returns bytes written, 0
 * when full. With arm, a full ring also asks the consumer to ring once it
 * made space (before sleeping on the socket); without, nothing is asked
 * (a caller that is only polling the ring, so that nobody pays for a
 * doorbell it would not wait for). Sets *doorbell when the consumer asked
 * to be woken. */
ssize_t resihp__ring_write(resihp__ring_t *r, const struct iovec *iov,
                           int niov, int arm, int *doorbell);

/* Producer, without a copy: where want bytes may be written in one piece
 * (free, and before the ring's end), or NULL (then resihp__ring_write);
 * *bad when the peer's index is impossible. resihp__ring_publish then
 * hands the first n <= want of them to the consumer (*doorbell as for
 * resihp__ring_write). */
uint8_t *resihp__ring_reserve(resihp__ring_t *r, size_t want, int *bad);
void resihp__ring_publish(resihp__ring_t *r, size_t n, int *doorbell);

/* Consumer: copy up to len available bytes to buf (NULL: discard); returns
 * bytes read, 0 when empty (with arm, the producer will then ring). Sets
 * *doorbell when the producer asked to be woken. */
ssize_t resihp__ring_read(resihp__ring_t *r, void *buf, size_t len, int arm,
                          int *doorbell);

/* Consumer, without a copy: hands up to len available bytes to
 * consume(arg, bytes, n) in place, as one or two spans (the ring wraps),
 * then frees them. Otherwise as resihp__ring_read. */
ssize_t resihp__ring_consume(resihp__ring_t *r, size_t len, int arm,
                             int *doorbell,
                             void (*consume)(void *arg, const uint8_t *bytes,
                                             size_t n),
                             void *arg);

/* The commit round without frames (allreduce.c): the producer stores the
 * key of the collective it finished in its outbound ring (*doorbell when
 * the consumer sleeps on it); the consumer asks whether the vote is key,
 * with arm also asking for a doorbell when it is not yet (then looking
 * once more). Only equality counts: the peer may write any value there. */
void resihp__ring_vote(resihp__ring_t *r, uint64_t key, int *doorbell);
int resihp__ring_voted(resihp__ring_t *r, uint64_t key, int arm);

/* Consumer: whether the producer wrote bytes not read yet (no copy, no
 * doorbell; a corrupted index counts as bytes, the next read reports it). */
int resihp__ring_pending(resihp__ring_t *r);

/* Tests that play a hostile peer: the shared head (which 0) or tail (1). */
_Atomic uint64_t *resihp__ring_test_index(resihp__ring_t *r, int which);

#endif
