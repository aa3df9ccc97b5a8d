/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the example trainers: see trainer-common.h. */
#include "trainer-common.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t trainer_splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t trainer_mb_rng(uint64_t seed, long s, int mb) {
  uint64_t r = seed * 1000003ULL + (uint64_t)s * 7919ULL + (uint64_t)mb;
  trainer_splitmix(&r);
  return r;
}

void trainer_tokens(uint64_t *r, int V, int C, int cls, int len, int *tok) {
  int block = V / C;
  for (int t = 0; t < len; t++) {
    uint64_t u = trainer_splitmix(r);
    tok[t] = (u & 1) ? cls * block + (int)((u >> 8) % (uint64_t)block)
                     : (int)((u >> 8) % (uint64_t)V);
  }
}

int trainer_sequence(uint64_t *r, int V, int C, int *cls, int *tok) {
  *cls = (int)(trainer_splitmix(r) % (uint64_t)C);
  int len = 4 + (int)(trainer_splitmix(r) % (TRAINER_MAX_LEN - 3));
  trainer_tokens(r, V, C, *cls, len, tok);
  return len;
}

uint64_t trainer_fnv1a_more(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t trainer_fnv1a(const void *p, size_t n) {
  return trainer_fnv1a_more(TRAINER_FNV_INIT, p, n);
}

static int parse_counts(const char *s, char sep, int *out, int max, int hi) {
  int n = 0;
  for (;;) {
    long v = 0;
    const char *start = s;
    /* v stops growing past hi: no overflow, however many digits */
    for (; *s >= '0' && *s <= '9'; s++)
      if (v <= hi)
        v = v * 10 + (*s - '0');
    if (s == start || v < 1 || v > hi || n == max)
      return -1;
    out[n++] = (int)v;
    if (!*s)
      return n;
    if (*s++ != sep)
      return -1;
  }
}

int trainer_parse_counts(const char *s, int *out, int max, int hi) {
  return parse_counts(s, ',', out, max, hi);
}

int trainer_parse_replica_counts(const char *s, int *r, int *out, int max,
                                 int hi) {
  long long v = 0;
  const char *start = s;
  for (; *s >= '0' && *s <= '9'; s++)
    if (v <= INT_MAX)
      v = v * 10 + (*s - '0');
  if (s == start || v > INT_MAX || *s != '=')
    return -1;
  *r = (int)v;
  return parse_counts(s + 1, ':', out, max, hi);
}

double trainer_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void trainer_sleep_ms(int ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int trainer_envint(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}
