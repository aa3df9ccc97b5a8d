/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of a partition's text (recovery/layer_groups.h: the cut
 * points "c1:c2:..." that a replica says at join and the coordinator hands
 * on), libFuzzer-style, with the standalone driver of fuzz_driver.h for
 * `make check`.
 *
 * The input is the text; the model's layer count is taken from its
 * length. Invariants beyond "does not crash": an accepted partition runs
 * from 0 to L in strictly increasing bounds, its text read back is the
 * same partition, the runs of it and of a fixed second partition tile
 * 0..L, and each of its ranks holds a whole number of them. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/recovery/layer_groups.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  int L = 1 + (int)(size % 97);
  resihp__partition_t p, q, two[2];
  if (resihp__partition_parse(in, L, &p)) {
    if (p.bounds)
      abort();
    free(in);
    return 0;
  }
  if (p.k < 1 || p.bounds[0] != 0 || p.bounds[p.k] != L)
    abort();
  for (int i = 0; i < p.k; i++)
    if (p.bounds[i] >= p.bounds[i + 1])
      abort();
  char *text = malloc(size + 16);
  if (!text || resihp__partition_format(&p, text, size + 16) ||
      resihp__partition_parse(text, L, &q) || !resihp__partition_equal(&p, &q))
    abort();
  int half[2] = {L / 2, L - L / 2};
  two[0] = p;
  if (L < 2 ? resihp__partition_from_counts(half + 1, 1, L, &two[1])
            : resihp__partition_from_counts(half, 2, L, &two[1]))
    abort();
  resihp__runmap_t m;
  if (resihp__runmap_build(&m, L, two, 2) || m.first[0] != 0 ||
      m.first[m.nruns] != L)
    abort();
  for (int r = 0; r < m.nruns; r++)
    if (m.first[r] >= m.first[r + 1])
      abort();
  for (int k = 0; k < p.k; k++) {
    int r0, r1;
    if (resihp__runmap_rank_runs(&m, &p, k, &r0, &r1) || r0 >= r1 ||
        m.first[r0] != p.bounds[k] || m.first[r1] != p.bounds[k + 1])
      abort();
  }
  resihp__runmap_free(&m);
  resihp__partition_free(&two[1]);
  resihp__partition_free(&q);
  resihp__partition_free(&p);
  free(text);
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Cut point texts: numbers in and out of range, separators, junk. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"1", "2", "3", "7", "10", "40", "96",
                                      "97", "0", "-1", ":", ":", "::", "00",
                                      "99999999999", " ", ",", "\xff", "+5"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 12, 11);
  return resihp__fuzz_pad_long(buf, n, cap, 60);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_layer_groups",
                           "corpus-layer-groups", 4096, fuzz_generate, 20000);
}
#endif
