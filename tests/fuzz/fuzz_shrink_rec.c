/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of resihp-run's record line of a replica that may shrink in
 * place (tools/run/shrink_rec.c: "S r killed lost wait nwas was..."),
 * which a launcher that takes over parses from the keeper's record;
 * libFuzzer-style, with the standalone driver of fuzz_driver.h for
 * `make check`.
 *
 * The input is the line, for a job of 4 replicas and 16 nodes.
 * Invariants beyond "does not crash": a refused line sets nothing; an
 * accepted one is in range (replica, killed node + 1, nodes) and written
 * again (resihp__run_shrink_format) reads back the same, poll 0. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../tools/run/shrink_rec.h"

#include <stdlib.h>
#include <string.h>

#define R 4
#define NODES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  resihp__run_shrink_t s, t, was;
  memset(&s, 0x5a, sizeof(s));
  was = s;
  int r = -7, r2 = -7;
  if (resihp__run_shrink_parse(in, R, NODES, &r, &s)) {
    if (r != -7 || memcmp(&s, &was, sizeof(s)))
      abort();
    free(in);
    return 0;
  }
  if (r < 0 || r >= R || s.killed < 0 || s.killed > NODES || s.wait < 0 ||
      s.poll != 0 || s.nwas < 0 || s.nwas > NODES)
    abort();
  for (int i = 0; i < s.nwas; i++)
    if (s.was[i] < 0 || s.was[i] >= NODES)
      abort();
  char line[64 * 12 + 96];
  int n = resihp__run_shrink_format(r, &s, line, sizeof(line));
  if (n < 1 || line[n - 1] != '\n')
    abort();
  line[n - 1] = '\0';
  memset(&t, 0, sizeof(t));
  if (resihp__run_shrink_parse(line, R, NODES, &r2, &t) || r2 != r ||
      t.nwas != s.nwas || t.killed != s.killed || t.lost != s.lost ||
      t.wait != s.wait || memcmp(t.was, s.was, sizeof(int) * (size_t)s.nwas))
    abort();
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Lines near the grammar: fields, numbers at and past their bounds. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "S",  " ",  "0",  "1",  "3",  "4",  "15", "16",
      "17", "-1", "00", " 3", " 0", "18446744073709551615",
      "18446744073709551616", "9223372036854775807", "9223372036854775808",
      "x",  "\n", "  "};
  size_t n = 0;
  if (resihp__fuzz_rng() % 4)
    n = resihp__fuzz_atoms(buf, 0, cap, (const char *const[]){"S 1 0 0 0 3"},
                           1, 1, 0);
  n = resihp__fuzz_atoms(buf, n, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 12, 7);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_shrink_rec", "corpus-shrink-rec",
                           1024, fuzz_generate, 20000);
}
#endif
