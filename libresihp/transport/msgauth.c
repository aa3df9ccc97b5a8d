/* SPDX-License-Identifier: BSD-3-Clause */
/* Per-message integrity after a handshake (see msgauth.h). */
#include "config.h"

#include "msgauth.h"

#include <resihp/error.h>

#include <string.h>

static void derive(uint8_t key[RESIHP__SHA256_LEN], const uint8_t *secret,
                   size_t slen, const char *label, const char *dir,
                   const void *ns, size_t nsl, const void *nc, size_t ncl) {
  static const char ctx[] = "resihp-session";
  const void *parts[5] = {ctx, label, dir, ns, nc};
  size_t lens[5] = {sizeof(ctx) - 1, strlen(label), strlen(dir), nsl, ncl};
  resihp__hmac_sha256(secret, slen, parts, lens, 5, key);
}

void resihp__msgauth_init(resihp__msgauth_t *a, const uint8_t *secret,
                          size_t slen, const char *label, const void *nonce_srv,
                          size_t nsrv, const void *nonce_cli, size_t ncli,
                          int is_client) {
  resihp__macdir_t *s2c = is_client ? &a->rx : &a->tx;
  resihp__macdir_t *c2s = is_client ? &a->tx : &a->rx;
  derive(s2c->key, secret, slen, label, "s2c", nonce_srv, nsrv, nonce_cli,
         ncli);
  derive(c2s->key, secret, slen, label, "c2s", nonce_srv, nsrv, nonce_cli,
         ncli);
  a->tx.seq = a->rx.seq = 0;
}

void resihp__msgauth_seal(resihp__msgauth_t *a, const void *const *parts,
                          const size_t *lens, int n,
                          uint8_t tag[RESIHP__MAC_LEN]) {
  resihp__macstream_t s;
  resihp__macstream_begin(&s, &a->tx);
  for (int i = 0; i < n; i++)
    resihp__macstream_update(&s, parts[i], lens[i]);
  resihp__macstream_seal(&s, &a->tx, tag);
}

int resihp__msgauth_open(resihp__msgauth_t *a, const void *const *parts,
                         const size_t *lens, int n,
                         const uint8_t tag[RESIHP__MAC_LEN]) {
  resihp__macstream_t s;
  resihp__macstream_begin(&s, &a->rx);
  for (int i = 0; i < n; i++)
    resihp__macstream_update(&s, parts[i], lens[i]);
  return resihp__macstream_open(&s, &a->rx, tag);
}

void resihp__hex(char *out, const uint8_t *in, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[in[i] >> 4];
    out[2 * i + 1] = d[in[i] & 15];
  }
  out[2 * n] = '\0';
}

void resihp__mac_to_hex(const uint8_t tag[RESIHP__MAC_LEN], char *out) {
  resihp__hex(out, tag, RESIHP__MAC_LEN);
}

static int nibble(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

int resihp__mac_from_hex(const char *s, size_t len,
                         uint8_t tag[RESIHP__MAC_LEN]) {
  if (len != RESIHP__MAC_HEX)
    return RESIHP_EAUTH;
  for (int i = 0; i < RESIHP__MAC_LEN; i++) {
    int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return RESIHP_EAUTH;
    tag[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

/* HMAC (RFC 2104) by hand, as resihp__hmac_sha256 computes it, so that the
 * message can come in pieces: keys are 32 bytes, shorter than a block. */
static void padded_key(const uint8_t *key, uint8_t pad, uint8_t out[64]) {
  for (int i = 0; i < 64; i++)
    out[i] = (uint8_t)((i < RESIHP__SHA256_LEN ? key[i] : 0) ^ pad);
}

void resihp__mackey_init(resihp__mackey_t *k, const resihp__macdir_t *d) {
  uint8_t pad[64];
  padded_key(d->key, 0x36, pad);
  resihp__sha256_init(&k->inner);
  resihp__sha256_update(&k->inner, pad, sizeof(pad));
  padded_key(d->key, 0x5c, pad);
  resihp__sha256_init(&k->outer);
  resihp__sha256_update(&k->outer, pad, sizeof(pad));
  memset(pad, 0, sizeof(pad));
}

void resihp__macstream_begin_key(resihp__macstream_t *s,
                                 const resihp__mackey_t *k,
                                 const resihp__macdir_t *d) {
  uint8_t seq[8];
  for (int i = 0; i < 8; i++)
    seq[i] = (uint8_t)(d->seq >> (8 * i));
  s->inner = k->inner;
  s->outer = k->outer;
  resihp__sha256_update(&s->inner, seq, sizeof(seq));
}

void resihp__macstream_begin(resihp__macstream_t *s,
                             const resihp__macdir_t *d) {
  resihp__mackey_t k;
  resihp__mackey_init(&k, d);
  resihp__macstream_begin_key(s, &k, d);
  memset(&k, 0, sizeof(k));
}

void resihp__macstream_update(resihp__macstream_t *s, const void *p, size_t n) {
  resihp__sha256_update(&s->inner, p, n);
}

static void stream_tag(resihp__macstream_t *s, uint8_t out[RESIHP__MAC_LEN]) {
  uint8_t inner[RESIHP__SHA256_LEN], full[RESIHP__SHA256_LEN];
  resihp__sha256_final(&s->inner, inner);
  resihp__sha256_update(&s->outer, inner, sizeof(inner));
  resihp__sha256_final(&s->outer, full);
  memcpy(out, full, RESIHP__MAC_LEN);
}

void resihp__macstream_seal(resihp__macstream_t *s, resihp__macdir_t *tx,
                            uint8_t tag[RESIHP__MAC_LEN]) {
  stream_tag(s, tag);
  tx->seq++;
}

int resihp__macstream_open(resihp__macstream_t *s, resihp__macdir_t *rx,
                           const uint8_t tag[RESIHP__MAC_LEN]) {
  uint8_t want[RESIHP__MAC_LEN];
  stream_tag(s, want);
  if (resihp__ct_memcmp(want, tag, RESIHP__MAC_LEN) != 0)
    return RESIHP_EAUTH;
  rx->seq++;
  return 0;
}
