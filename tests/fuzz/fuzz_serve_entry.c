/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the pieces of a catch-up (issue 32, catch-up by layer,
 * recovery/job_layer_state.c): an entry of START's serve= ("Q.K@EP",
 * "Q.K:A-B@EP", "Q.K:r@EP", written by the coordinator,
 * control/coord_schedule.c) and a catch-up offer line's piece
 * ("STATE ... layers=A-B" or "rank=1", written by the source rank),
 * libFuzzer-style, with the standalone driver of fuzz_driver.h for
 * `make check`.
 *
 * The input is both: as an entry, then as an offer line. Invariants
 * beyond "does not crash": an accepted entry is canonical (written back
 * from what was parsed it is the input), its layers 0 <= A < B; an
 * accepted offer names the whole state, the rank's own or layers
 * A < B; either piece, asked of a rank holding layers 7..12 of 20 with
 * a state by layer, is inside its state or refused. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/recovery/job_internal.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A rank 1 of 3 holding layers [7, 13) of 20, each 10 + l bytes of
 * state, and 5 of its own. */
static void piece_in_bounds(int a, int b) {
  static resihp_job_t j;
  static int bounds[4] = {0, 7, 13, 20};
  static size_t off[7];
  j.nlayers = 20;
  j.part.k = 3;
  j.part.bounds = bounds;
  j.lrank = 1;
  j.lstate_first = 7;
  j.lstate_count = 6;
  size_t at = 0;
  for (int i = 0; i < 6; i++) {
    off[i] = at;
    at += 10 + (size_t)(7 + i);
  }
  off[6] = at;
  j.lstate_off = off;
  j.state_len = at + 5;
  size_t o, n;
  if (resihp__job_state_piece(&j, a, b, &o, &n))
    return;
  if (o > j.state_len || n > j.state_len - o)
    abort();
  if (a >= 0 && (a < 7 || b > 13))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  int q = -5, k = -5, a = -5, b = -5;
  const char *ep = NULL;
  if (!resihp__job_serve_entry_parse(in, &q, &k, &a, &b, &ep)) {
    char back[128];
    if (!ep || ep <= in || ep > in + size || !*ep || q < 0 || k < 0 ||
        (a >= 0 && b <= a) || (a < 0 && a != -1 && a != -2))
      abort();
    if (a == -1)
      snprintf(back, sizeof(back), "%d.%d@", q, k);
    else if (a == -2)
      snprintf(back, sizeof(back), "%d.%d:r@", q, k);
    else
      snprintf(back, sizeof(back), "%d.%d:%d-%d@", q, k, a, b);
    if (strncmp(back, in, strlen(back)) || in + strlen(back) != ep)
      abort();
    piece_in_bounds(a, b);
  }
  a = b = -5;
  if (!resihp__job_offer_piece_parse(in, &a, &b)) {
    if ((a >= 0 && b <= a) || (a < 0 && a != -1 && a != -2))
      abort();
    piece_in_bounds(a, b);
  }
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Entries and offer lines, nearly right and not. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "2.1",      "0.0",       ":",          "r",     "7-9",  "12-13", "@",
      "127.0.0.1:4000",        "-",          ".",     "0",    "01",    "13",
      "99999999", "STATE ",    " layers=",   " rank=1", " rank=2", " ", "7",
      "9-7",      " sha256=ab", "\xff",      ","};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 8, 9);
  return resihp__fuzz_pad_long(buf, n, cap, 80);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_serve_entry",
                           "corpus-serve-entry", 512, fuzz_generate, 20000);
}
#endif
