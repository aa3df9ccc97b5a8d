/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of a GO's shrunk= list (the ranks each shrunk replica lost
 * in this epoch: resihp__shrunk_get in recovery/layer_groups.c; written
 * by control/coord_shrink.c), libFuzzer-style, with the standalone driver
 * of fuzz_driver.h for `make check`.
 *
 * The input is the list. Invariants beyond "does not crash": an accepted
 * list is ','-separated items "R:k" (decimal, R below 2^24, k below
 * RESIHP__SHRUNK_RANKS, no item twice, at most RESIHP__SHRUNK_ITEMS), and
 * replica 7's bits are exactly the k of its items; a refused one leaves
 * no bits. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/recovery/layer_groups.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One decimal number of s (leading zeros allowed) below lim, or -1. */
static long number(const char **s, long lim) {
  size_t n = strspn(*s, "0123456789"), z = strspn(*s, "0");
  if (n == 0 || (z < n && n - z > 9))
    return -1;
  long v = strtol(*s + (z < n ? z : n - 1), NULL, 10);
  *s += n;
  return v < lim ? v : -1;
}

/* Whether s is a well-formed list, and replica 7's bits. */
static int well_formed(const char *s, unsigned long long *bits7) {
  long r[RESIHP__SHRUNK_ITEMS], k[RESIHP__SHRUNK_ITEMS];
  int n = 0;
  *bits7 = 0;
  if (!*s)
    return 1;
  for (;;) {
    if (n == RESIHP__SHRUNK_ITEMS)
      return 0;
    r[n] = number(&s, 1L << 24);
    if (r[n] < 0 || *s++ != ':')
      return 0;
    k[n] = number(&s, RESIHP__SHRUNK_RANKS);
    if (k[n] < 0)
      return 0;
    for (int i = 0; i < n; i++)
      if (r[i] == r[n] && k[i] == k[n])
        return 0;
    if (r[n] == 7)
      *bits7 |= 1ULL << k[n];
    n++;
    if (!*s)
      return 1;
    if (*s++ != ',')
      return 0;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  unsigned long long dead = 12345, want;
  int rc = resihp__shrunk_get(in, 7, &dead);
  if (rc != 0 && rc != 1 && rc != RESIHP_EPROTO)
    abort();
  if (rc < 0 && dead)
    abort();
  /* an accepted list (up to a NUL) is one and says what it holds (the
   * parser may accept less than well_formed, never more) */
  if (rc >= 0 &&
      (!well_formed(in, &want) || dead != want || rc != (want != 0)))
    abort();
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Ids, ranks, separators and junk. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "7",  "1",  "0",  "63", "64", ":",        ":",        ",",
      ",",  "07", "-7", " ",  "\xff", "16777216", "16777215", "7:1",
      "7:1,", "3:0", "99999999999"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 10, 7);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_shrunk", "corpus-shrunk", 4096,
                           fuzz_generate, 20000);
}
#endif
