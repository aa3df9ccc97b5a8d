/* SPDX-License-Identifier: BSD-3-Clause */
/* A server's stateless challenge: a cookie it hands out and checks later
 * from a key of its own and its clock, so that it keeps nothing for a
 * client that has not yet proved the secret.
 *
 * Anyone who can reach a port can open connections faster than a distant
 * client can answer a challenge; a server that keeps each challenge until
 * its answer comes holds a table strangers fill, and a genuine client's
 * challenge is pushed out before its answer arrives. With a cookie the
 * server answers a hello and forgets it: the client comes back with the
 * cookie and its proof, and the server checks that the cookie is its own,
 * is bound to what the client said, and is at most RESIHP__COOKIE_S
 * seconds old. A proof replayed with its cookie is refused: the server
 * remembers the client nonces it accepted for as long as a cookie stays
 * valid (a set that only a proof of the secret adds to).
 *
 * A cookie: t (the server's monotonic clock, seconds, 4 bytes big-endian),
 * 12 random bytes, and the first 16 bytes of HMAC(key, bind | t | random).
 * Used by the control plane's handshake (control/handshake.c) and the
 * communicator's (mesh.c). */
#ifndef RESIHP_TRANSPORT_COOKIE_H
#define RESIHP_TRANSPORT_COOKIE_H

#include <stddef.h>
#include <stdint.h>

#define RESIHP__COOKIE_LEN 32
#define RESIHP__COOKIE_S 10
/* The bytes of a client nonce the replay check keys on. */
#define RESIHP__COOKIE_NONCE 16

typedef struct {
  uint8_t (*k)[RESIHP__COOKIE_NONCE];
  size_t cap, n;
} resihp__nonce_set_t;

typedef struct resihp__cookie_jar {
  uint8_t key[32];
  resihp__nonce_set_t seen[2]; /* [0]: the current period */
  int64_t period_start;
} resihp__cookie_jar_t;

/* A new key: 0 or RESIHP_ESYS. */
int resihp__cookie_jar_init(resihp__cookie_jar_t *j);
void resihp__cookie_jar_free(resihp__cookie_jar_t *j); /* NULL is fine */
/* A cookie bound to bind (blen bytes): 0 or RESIHP_ESYS. */
int resihp__cookie_make(const resihp__cookie_jar_t *j, const void *bind,
                        size_t blen, uint8_t out[RESIHP__COOKIE_LEN]);
/* 0 for a cookie of this jar's, bound to bind, not older than
 * RESIHP__COOKIE_S; RESIHP_EAUTH (not ours, or bound to something else)
 * or RESIHP_ETIMEDOUT (too old). */
int resihp__cookie_check(const resihp__cookie_jar_t *j, const void *bind,
                         size_t blen, const uint8_t c[RESIHP__COOKIE_LEN]);
/* Record a client nonce (its first RESIHP__COOKIE_NONCE bytes), once its
 * proof is checked: 0 the first time, RESIHP_EAUTH for a replay (or an
 * all-zero nonce), RESIHP_ENOMEM. */
int resihp__cookie_first_use(resihp__cookie_jar_t *j, const uint8_t *nonce);

#endif
