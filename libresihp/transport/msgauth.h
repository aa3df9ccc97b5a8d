/* SPDX-License-Identifier: BSD-3-Clause */
/* Per-message integrity after a mutual handshake.
 *
 * A handshake proves that both ends hold the per-job secret, but the bytes
 * that follow it could still be injected or replayed by anyone on the path.
 * So each direction of an authenticated connection gets its own session key,
 *
 *   K_dir = HMAC(secret, "resihp-session" | label | dir | Ns | Nc)
 *
 * (dir is "s2c" or "c2s", Ns/Nc the server's and client's handshake nonces,
 * label the channel), and every message in that direction carries a tag
 *
 *   tag = HMAC(K_dir, seq | message)[0..RESIHP__MAC_LEN)
 *
 * where seq is a 64-bit little-endian counter that both ends advance per
 * message. A dropped, reordered, replayed or forged message fails the check,
 * and a message from one connection or direction is useless on another.
 * Nothing is encrypted: the threat is tampering, not reading.
 *
 * The struct is plain state owned by the connection; no allocation. */
#ifndef RESIHP_TRANSPORT_MSGAUTH_H
#define RESIHP_TRANSPORT_MSGAUTH_H

#include "sha256.h"

#include <stddef.h>
#include <stdint.h>

#define RESIHP__MAC_LEN 16 /* bytes of tag on the wire (128 bits) */
#define RESIHP__MAC_HEX (2 * RESIHP__MAC_LEN)

typedef struct {
  uint8_t key[RESIHP__SHA256_LEN];
  uint64_t seq; /* sequence number of the next message */
} resihp__macdir_t;

typedef struct {
  resihp__macdir_t tx, rx;
} resihp__msgauth_t;

/* Derive both directions' keys. is_client selects which direction is tx, so
 * that the client's tx is the server's rx. Nonces are the raw bytes (or the
 * exact text) each side sent in the handshake. */
void resihp__msgauth_init(resihp__msgauth_t *a, const uint8_t *secret,
                          size_t secret_len, const char *label,
                          const void *nonce_srv, size_t nsrv,
                          const void *nonce_cli, size_t ncli, int is_client);

/* Tag the next outgoing message, made of n (pointer, length) parts, and
 * advance tx.seq. */
void resihp__msgauth_seal(resihp__msgauth_t *a, const void *const *parts,
                          const size_t *lens, int n,
                          uint8_t tag[RESIHP__MAC_LEN]);

/* Check the tag of the next incoming message. 0 (rx.seq advances) or
 * RESIHP_EAUTH (nothing changes; the caller should drop the connection:
 * a stream whose sequence was broken cannot be resynchronised). */
int resihp__msgauth_open(resihp__msgauth_t *a, const void *const *parts,
                         const size_t *lens, int n,
                         const uint8_t tag[RESIHP__MAC_LEN]);

/* Streaming form of the same tag, for a message that is produced or
 * consumed piece by piece (a data frame summed as its bytes arrive):
 * begin with the direction (&a->tx to seal, &a->rx to open), feed the
 * message in any pieces, then seal (advances tx.seq) or open (0 and rx.seq
 * advances, or RESIHP_EAUTH). Equal to resihp__msgauth_seal/open over the
 * concatenated pieces. */
typedef struct {
  resihp__sha256_t inner, outer;
} resihp__macstream_t;

/* A direction's key with its HMAC pads already hashed, for a link that
 * tags many frames (saves half the work of a short message). */
typedef struct {
  resihp__sha256_t inner, outer;
} resihp__mackey_t;

void resihp__mackey_init(resihp__mackey_t *k, const resihp__macdir_t *d);

void resihp__macstream_begin(resihp__macstream_t *s, const resihp__macdir_t *d);
/* The same from a prepared key: d must be the direction k was made from. */
void resihp__macstream_begin_key(resihp__macstream_t *s,
                                 const resihp__mackey_t *k,
                                 const resihp__macdir_t *d);
void resihp__macstream_update(resihp__macstream_t *s, const void *p, size_t n);
void resihp__macstream_seal(resihp__macstream_t *s, resihp__macdir_t *tx,
                            uint8_t tag[RESIHP__MAC_LEN]);
int resihp__macstream_open(resihp__macstream_t *s, resihp__macdir_t *rx,
                           const uint8_t tag[RESIHP__MAC_LEN]);

/* n bytes as 2n lowercase hex digits and a NUL (out has 2n + 1 bytes). */
void resihp__hex(char *out, const uint8_t *in, size_t n);

/* Text forms for line protocols: the tag as RESIHP__MAC_HEX lowercase hex
 * digits (out has room for RESIHP__MAC_HEX + 1), and back. from_hex returns
 * 0 or RESIHP_EAUTH for anything that is not exactly that many hex digits. */
void resihp__mac_to_hex(const uint8_t tag[RESIHP__MAC_LEN], char *out);
int resihp__mac_from_hex(const char *s, size_t len,
                         uint8_t tag[RESIHP__MAC_LEN]);

#endif
