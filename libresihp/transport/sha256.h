/* SPDX-License-Identifier: BSD-3-Clause */
/* SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), enough to authenticate
 * peers with a challenge-response; no external crypto library needed. */
#ifndef RESIHP_TRANSPORT_SHA256_H
#define RESIHP_TRANSPORT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define RESIHP__SHA256_LEN 32

typedef struct {
  uint32_t h[8];
  uint64_t bytes;
  uint8_t block[64];
  size_t fill;
} resihp__sha256_t;

void resihp__sha256_init(resihp__sha256_t *c);
void resihp__sha256_update(resihp__sha256_t *c, const void *data, size_t len);
void resihp__sha256_final(resihp__sha256_t *c, uint8_t out[RESIHP__SHA256_LEN]);

/* HMAC over a message that arrives in pieces: init, update per piece,
 * final (which wipes the state). */
typedef struct {
  resihp__sha256_t inner;
  uint8_t okey[64]; /* the key xor opad, for the outer hash */
} resihp__hmac_t;

void resihp__hmac_init(resihp__hmac_t *h, const void *key, size_t keylen);
void resihp__hmac_update(resihp__hmac_t *h, const void *data, size_t len);
void resihp__hmac_final(resihp__hmac_t *h, uint8_t out[RESIHP__SHA256_LEN]);

/* HMAC over the concatenation of n (pointer, length) parts. */
void resihp__hmac_sha256(const void *key, size_t keylen, const void *const *parts,
                         const size_t *lens, int n,
                         uint8_t out[RESIHP__SHA256_LEN]);

/* Tests and measurements: 1 forces the portable compression function, 0
 * lets the next hash pick the fastest one the CPU offers (SHA-NI). */
void resihp__sha256_select(int portable);

/* Constant-time comparison; 0 when equal. */
int resihp__ct_memcmp(const void *a, const void *b, size_t n);

#endif
