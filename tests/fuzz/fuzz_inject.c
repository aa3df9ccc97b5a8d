/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the fault injection plans (--inject, RESIHP_INJECT: from
 * the user, read by resihp-run and by every rank), libFuzzer-style, with
 * the standalone driver of fuzz_driver.h for `make check`.
 *
 * Invariants beyond "does not crash": a refused plan yields no item and a
 * terminated message; an accepted one has at most the maximum of items,
 * each of a known kind with a replica >= 0 and a step >= 0 or "catchup"
 * (slow-rank: a number, a factor in (1, 100] and a duration >= 0, the
 * other kinds neither), and printing it and parsing that again gives the
 * same items. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/recovery/inject.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  resihp__inject_t v[RESIHP__INJECT_MAX], w[RESIHP__INJECT_MAX];
  int n = -1, m = -1;
  char err[400];
  memset(err, 'x', sizeof(err));
  int rc =
      resihp__inject_parse(in, v, RESIHP__INJECT_MAX, &n, err, sizeof(err));
  if (rc) {
    if (rc != RESIHP_EINVAL || n != 0 || !memchr(err, '\0', sizeof(err)))
      abort();
    free(in);
    return 0;
  }
  if (n < 0 || n > RESIHP__INJECT_MAX)
    abort();
  for (int i = 0; i < n; i++)
    if ((unsigned)v[i].kind > RESIHP__INJ_SLOW_RANK || v[i].replica < 0 ||
        v[i].rank < -1 ||
        (v[i].step < 0 && v[i].step != RESIHP__INJECT_CATCHUP) ||
        !strcmp(resihp__inject_kind_name(v[i].kind), "?") ||
        (v[i].kind == RESIHP__INJ_SLOW_RANK
             ? v[i].step < 0 ||
                   v[i].factor_milli < RESIHP__INJECT_SLOW_MIN_MILLI ||
                   v[i].factor_milli > RESIHP__INJECT_SLOW_MAX_MILLI ||
                   v[i].steps < 0 || v[i].steps > RESIHP__INJECT_SLOW_MAX_STEPS
             : v[i].factor_milli != 0 || v[i].steps != 0))
      abort();
  /* round trip: 64 items of at most 80 bytes each */
  char buf[RESIHP__INJECT_MAX * 80];
  resihp__inject_format(v, n, buf, sizeof(buf));
  if (resihp__inject_parse(buf, w, RESIHP__INJECT_MAX, &m, err, sizeof(err)) ||
      m != n)
    abort();
  for (int i = 0; i < n; i++)
    if (w[i].kind != v[i].kind || w[i].replica != v[i].replica ||
        w[i].rank != v[i].rank || w[i].step != v[i].step ||
        w[i].factor_milli != v[i].factor_milli || w[i].steps != v[i].steps)
      abort();
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Inputs biased towards the grammar: kinds, ':', '@', numbers, "catchup",
 * separators, junk bytes. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"kill-rank",
                                      "kill-node",
                                      "hang-rank",
                                      "slow-rank",
                                      "slow-rank:1@3",
                                      ":4",
                                      "x",
                                      "\xc3\x97",
                                      "\xc3",
                                      "1.5",
                                      "100.000",
                                      "100.001",
                                      "1.0001",
                                      ".5",
                                      "2.",
                                      "kill",
                                      ":",
                                      "@",
                                      ",",
                                      ",,",
                                      "0",
                                      "1",
                                      "17",
                                      "-1",
                                      "+3",
                                      " 2",
                                      "1000000",
                                      "1000001",
                                      "99999999999999999999",
                                      "catchup",
                                      "catch",
                                      "0x10",
                                      "\t",
                                      "\xff"};
  return resihp__fuzz_pad_long(
      buf,
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 24, 9),
      cap, 60);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_inject", "corpus-inject", 8192,
                           fuzz_generate, 20000);
}
#endif
