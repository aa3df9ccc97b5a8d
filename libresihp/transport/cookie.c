/* SPDX-License-Identifier: BSD-3-Clause */
/* A server's stateless challenge (cookie.h). */
#include "config.h"

#include "cookie.h"

#include "mesh.h"
#include "sha256.h"

#include <resihp/error.h>

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define RAND 12
#define MAC 16
#define NL RESIHP__COOKIE_NONCE

static const uint8_t zero[NL];

int resihp__cookie_jar_init(resihp__cookie_jar_t *j) {
  memset(j, 0, sizeof(*j));
  j->period_start = resihp__now_ms();
  return getrandom(j->key, sizeof(j->key), 0) == (ssize_t)sizeof(j->key)
             ? 0
             : RESIHP_ESYS;
}

void resihp__cookie_jar_free(resihp__cookie_jar_t *j) {
  if (!j)
    return;
  free(j->seen[0].k);
  free(j->seen[1].k);
  memset(j, 0, sizeof(*j));
}

static uint32_t clock_s(void) {
  return (uint32_t)(resihp__now_ms() / 1000);
}

/* The MAC of a cookie whose t and random bytes are c's first 4 + RAND. */
static void cookie_mac(const resihp__cookie_jar_t *j, const void *bind,
                       size_t blen, const uint8_t *c,
                       uint8_t mac[RESIHP__SHA256_LEN]) {
  const void *parts[2] = {bind, c};
  size_t lens[2] = {blen, 4 + RAND};
  resihp__hmac_sha256(j->key, sizeof(j->key), parts, lens, 2, mac);
}

int resihp__cookie_make(const resihp__cookie_jar_t *j, const void *bind,
                        size_t blen, uint8_t out[RESIHP__COOKIE_LEN]) {
  uint8_t mac[RESIHP__SHA256_LEN];
  uint32_t t = clock_s();
  for (int i = 0; i < 4; i++)
    out[i] = (uint8_t)(t >> (24 - 8 * i));
  if (getrandom(out + 4, RAND, 0) != RAND)
    return RESIHP_ESYS;
  cookie_mac(j, bind, blen, out, mac);
  memcpy(out + 4 + RAND, mac, MAC);
  return 0;
}

int resihp__cookie_check(const resihp__cookie_jar_t *j, const void *bind,
                         size_t blen, const uint8_t c[RESIHP__COOKIE_LEN]) {
  uint8_t mac[RESIHP__SHA256_LEN];
  cookie_mac(j, bind, blen, c, mac);
  if (resihp__ct_memcmp(mac, c + 4 + RAND, MAC))
    return RESIHP_EAUTH;
  uint32_t t = (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 |
               (uint32_t)c[2] << 8 | c[3];
  return clock_s() - t <= RESIHP__COOKIE_S ? 0 : RESIHP_ETIMEDOUT;
}

/* Open addressing, never more than half full; an all-zero key marks a
 * free place. The keys are random: their first bytes are a good hash. */
static size_t place(const resihp__nonce_set_t *s, const uint8_t *k) {
  uint64_t hash;
  memcpy(&hash, k, sizeof(hash));
  size_t i = (size_t)hash & (s->cap - 1);
  while (memcmp(s->k[i], zero, NL) && memcmp(s->k[i], k, NL))
    i = (i + 1) & (s->cap - 1);
  return i;
}

static int has(const resihp__nonce_set_t *s, const uint8_t *k) {
  return s->cap && !memcmp(s->k[place(s, k)], k, NL);
}

static int add(resihp__nonce_set_t *s, const uint8_t *k) {
  if (2 * (s->n + 1) > s->cap) {
    resihp__nonce_set_t g = {.cap = s->cap ? 2 * s->cap : 64};
    if (!(g.k = calloc(g.cap, NL)))
      return RESIHP_ENOMEM;
    for (size_t i = 0; i < s->cap; i++)
      if (memcmp(s->k[i], zero, NL)) {
        memcpy(g.k[place(&g, s->k[i])], s->k[i], NL);
        g.n++;
      }
    free(s->k);
    *s = g;
  }
  memcpy(s->k[place(s, k)], k, NL);
  s->n++;
  return 0;
}

int resihp__cookie_first_use(resihp__cookie_jar_t *j, const uint8_t *nonce) {
  if (!memcmp(nonce, zero, NL))
    return RESIHP_EAUTH;
  /* A nonce accepted in a period that ended RESIHP__COOKIE_S + 1 seconds
   * ago can no longer come with a valid cookie: the older period goes. */
  int64_t now = resihp__now_ms();
  if (now - j->period_start >= (RESIHP__COOKIE_S + 1) * 1000) {
    free(j->seen[1].k);
    j->seen[1] = j->seen[0];
    j->seen[0] = (resihp__nonce_set_t){0};
    j->period_start = now;
  }
  if (has(&j->seen[0], nonce) || has(&j->seen[1], nonce))
    return RESIHP_EAUTH;
  return add(&j->seen[0], nonce);
}
