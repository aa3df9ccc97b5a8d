/* SPDX-License-Identifier: BSD-3-Clause */
/* SHA-256 (FIPS 180-4) and HMAC (RFC 2104). The portable compression
 * function is written for clarity; where the CPU has the SHA extensions
 * (x86 SHA-NI, checked once with cpuid) a second one uses them, several
 * times faster, since data-frame MACs (mac-data) hash every byte that an
 * all-reduce moves. */
#include "config.h"

#include "sha256.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHANI_BUILD 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const uint8_t b[64]) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 |
           (uint32_t)b[4 * i + 2] << 8 | b[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], bb = h[1], c = h[2], d = h[3], e = h[4], f = h[5],
           g = h[6], hh = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
                  ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
                  ((a & bb) ^ (a & c) ^ (bb & c));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = bb;
    bb = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += bb;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

#ifdef HAVE_SHANI_BUILD
/* The same compression with the SHA-NI instructions: four rounds per
 * sha256rnds2 pair, the message schedule with sha256msg1/msg2. The state
 * lives as ABEF/CDGH, the layout the instructions want. */
__attribute__((target("sha,sse4.1"))) static void
compress_shani(uint32_t h[8], const uint8_t *b, size_t blocks) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL,
                                      0x0405060700010203ULL);
  __m128i tmp = _mm_loadu_si128((const __m128i *)&h[0]);
  __m128i st1 = _mm_loadu_si128((const __m128i *)&h[4]);
  tmp = _mm_shuffle_epi32(tmp, 0xB1);          /* CDAB */
  st1 = _mm_shuffle_epi32(st1, 0x1B);          /* EFGH */
  __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);  /* ABEF */
  st1 = _mm_blend_epi16(st1, tmp, 0xF0);       /* CDGH */
  for (; blocks; blocks--, b += 64) {
    __m128i abef = st0, cdgh = st1, w[4];
    for (int j = 0; j < 16; j++) {
      __m128i m;
      if (j < 4) {
        m = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b + 16 * j)),
                             swap);
      } else {
        /* w[t] = s1(w[t-2]) + w[t-7] + s0(w[t-15]) + w[t-16], four at a
         * time; w[] holds the last four groups, oldest at j % 4. */
        m = _mm_sha256msg1_epu32(w[j % 4], w[(j + 1) % 4]);
        m = _mm_add_epi32(m, _mm_alignr_epi8(w[(j + 3) % 4], w[(j + 2) % 4], 4));
        m = _mm_sha256msg2_epu32(m, w[(j + 3) % 4]);
      }
      w[j % 4] = m;
      __m128i k = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)&K[4 * j]));
      st1 = _mm_sha256rnds2_epu32(st1, st0, k);
      st0 = _mm_sha256rnds2_epu32(st0, st1, _mm_shuffle_epi32(k, 0x0E));
    }
    st0 = _mm_add_epi32(st0, abef);
    st1 = _mm_add_epi32(st1, cdgh);
  }
  tmp = _mm_shuffle_epi32(st0, 0x1B);    /* FEBA */
  st1 = _mm_shuffle_epi32(st1, 0xB1);    /* DCHG */
  st0 = _mm_blend_epi16(tmp, st1, 0xF0); /* DCBA */
  st1 = _mm_alignr_epi8(st1, tmp, 8);    /* HGFE */
  _mm_storeu_si128((__m128i *)&h[0], st0);
  _mm_storeu_si128((__m128i *)&h[4], st1);
}

static int cpu_has_shani(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) ||
      !(c & bit_SSE4_1))
    return 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
}
#endif

static void compress_portable(uint32_t h[8], const uint8_t *b, size_t blocks) {
  for (; blocks; blocks--, b += 64)
    compress(h, b);
}

/* Chosen once: 0 not yet, 1 portable, 2 SHA-NI. RESIHP_SHA256_PORTABLE
 * (any value) forces the portable code, for tests and measurements. */
static atomic_int impl;

void resihp__sha256_select(int portable) {
  atomic_store_explicit(&impl, portable ? 1 : 0, memory_order_relaxed);
}

static void compress_blocks(uint32_t h[8], const uint8_t *b, size_t blocks) {
  int k = atomic_load_explicit(&impl, memory_order_relaxed);
  if (!k) {
    k = 1;
#ifdef HAVE_SHANI_BUILD
    if (!getenv("RESIHP_SHA256_PORTABLE") && cpu_has_shani())
      k = 2;
#endif
    atomic_store_explicit(&impl, k, memory_order_relaxed);
  }
#ifdef HAVE_SHANI_BUILD
  if (k == 2) {
    compress_shani(h, b, blocks);
    return;
  }
#endif
  compress_portable(h, b, blocks);
}

void resihp__sha256_init(resihp__sha256_t *c) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, iv, sizeof(iv));
  c->bytes = 0;
  c->fill = 0;
}

void resihp__sha256_update(resihp__sha256_t *c, const void *data, size_t len) {
  const uint8_t *p = data;
  c->bytes += len;
  if (c->fill) {
    size_t take = 64 - c->fill < len ? 64 - c->fill : len;
    memcpy(c->block + c->fill, p, take);
    c->fill += take;
    p += take;
    len -= take;
    if (c->fill < 64)
      return;
    compress_blocks(c->h, c->block, 1);
    c->fill = 0;
  }
  /* Whole blocks straight from the input, without a copy. */
  if (len >= 64) {
    compress_blocks(c->h, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
  }
  memcpy(c->block, p, len);
  c->fill = len;
}

void resihp__sha256_final(resihp__sha256_t *c, uint8_t out[RESIHP__SHA256_LEN]) {
  uint64_t bits = c->bytes * 8;
  /* 0x80, zeros up to 56 bytes into a block, the length in bits. */
  c->block[c->fill++] = 0x80;
  if (c->fill > 56) {
    memset(c->block + c->fill, 0, 64 - c->fill);
    compress_blocks(c->h, c->block, 1);
    c->fill = 0;
  }
  memset(c->block + c->fill, 0, 56 - c->fill);
  for (int i = 0; i < 8; i++)
    c->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
  compress_blocks(c->h, c->block, 1);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(c->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)c->h[i];
  }
  memset(c, 0, sizeof(*c));
}

void resihp__hmac_init(resihp__hmac_t *h, const void *key, size_t keylen) {
  uint8_t k[64] = {0}, pad[64];
  if (keylen > 64) {
    resihp__sha256_init(&h->inner);
    resihp__sha256_update(&h->inner, key, keylen);
    resihp__sha256_final(&h->inner, k);
  } else if (keylen) {
    memcpy(k, key, keylen);
  }
  for (int i = 0; i < 64; i++) {
    pad[i] = k[i] ^ 0x36;
    h->okey[i] = k[i] ^ 0x5c;
  }
  resihp__sha256_init(&h->inner);
  resihp__sha256_update(&h->inner, pad, 64);
  memset(k, 0, sizeof(k));
  memset(pad, 0, sizeof(pad));
}

void resihp__hmac_update(resihp__hmac_t *h, const void *data, size_t len) {
  resihp__sha256_update(&h->inner, data, len);
}

void resihp__hmac_final(resihp__hmac_t *h, uint8_t out[RESIHP__SHA256_LEN]) {
  uint8_t inner[RESIHP__SHA256_LEN];
  resihp__sha256_t c;
  resihp__sha256_final(&h->inner, inner);
  resihp__sha256_init(&c);
  resihp__sha256_update(&c, h->okey, 64);
  resihp__sha256_update(&c, inner, sizeof(inner));
  resihp__sha256_final(&c, out);
  memset(h->okey, 0, sizeof(h->okey));
}

void resihp__hmac_sha256(const void *key, size_t keylen, const void *const *parts,
                         const size_t *lens, int n,
                         uint8_t out[RESIHP__SHA256_LEN]) {
  resihp__hmac_t h;
  resihp__hmac_init(&h, key, keylen);
  for (int i = 0; i < n; i++)
    resihp__hmac_update(&h, parts[i], lens[i]);
  resihp__hmac_final(&h, out);
}

int resihp__ct_memcmp(const void *a, const void *b, size_t n) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++)
    d |= x[i] ^ y[i];
  return d;
}
