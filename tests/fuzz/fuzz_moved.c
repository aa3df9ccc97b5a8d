/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of a GO's moved= list (the replicas whose layers the
 * coordinator moved in this epoch: resihp__moved_has in
 * recovery/layer_groups.c; written by control/coord_repart.c),
 * libFuzzer-style, with the standalone driver of fuzz_driver.h for
 * `make check`.
 *
 * The input is the list. Invariants beyond "does not crash": an accepted
 * list is ':'-separated decimal ids below 2^24 and says 1 for replica 7
 * exactly when 7 is one of its items. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/recovery/layer_groups.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Whether s is decimal id items separated by ':' ("" is none), each
 * below 2^24 (leading zeros allowed), and whether 7 is among them. */
static int well_formed(const char *s, int *has7) {
  *has7 = 0;
  if (!*s)
    return 1;
  for (;;) {
    size_t n = strspn(s, "0123456789"), z = strspn(s, "0");
    if (n == 0 || (z < n && n - z > 8))
      return 0;
    long v = strtol(s + (z < n ? z : n - 1), NULL, 10);
    if (v >= 1L << 24)
      return 0;
    *has7 |= v == 7;
    s += n;
    if (!*s)
      return 1;
    if (*s++ != ':')
      return 0;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  int rc = resihp__moved_has(in, 7), has7;
  if (rc != 0 && rc != 1 && rc != RESIHP_EPROTO)
    abort();
  /* an accepted list (up to a NUL) is one, and says what it holds (the
   * parser may accept less than well_formed, never more) */
  if (rc >= 0 && (!well_formed(in, &has7) || rc != has7))
    abort();
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Ids, separators and junk. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"7", "1", "0", "17", "70", ":",
                                      ":",  "07", "-7", "16777216", "16777215",
                                      " ", "\xff", "99999999999", "7:", ":7"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 8, 7);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_moved", "corpus-moved", 4096,
                           fuzz_generate, 20000);
}
#endif
