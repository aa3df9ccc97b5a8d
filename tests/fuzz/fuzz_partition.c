/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of trainer_parse_counts (contrib/common), the parser of the
 * pipeline trainer's --partition. Beyond "does not crash": a list is
 * accepted exactly when it is comma-separated decimal numbers, each 1..HI,
 * at most MAX of them, and then the counts are the numbers written. The
 * check is a specification written independently of the parser.
 * libFuzzer entry plus the standalone driver, as tests/fuzz/README says. */
#include "config.h"

#include "../../contrib/common/trainer-common.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN_MAX 400
#define MAX 8
#define HI 66

static int expected(const char *s, int *out) {
  int n = 0;
  const char *item = s;
  for (;;) {
    size_t len = strcspn(item, ",");
    if (len == 0 || strspn(item, "0123456789") != len || n == MAX)
      return -1;
    while (len > 1 && *item == '0') /* leading zeros say nothing */
      item++, len--;
    if (len > 2)
      return -1;
    char num[3] = {0};
    memcpy(num, item, len);
    int v = atoi(num);
    if (v < 1 || v > HI)
      return -1;
    out[n++] = v;
    if (!item[len])
      return n;
    item += len + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[IN_MAX + 1];
  if (size > IN_MAX)
    size = IN_MAX;
  memcpy(in, data, size);
  in[size] = '\0';
  int got[MAX], want[MAX];
  int n = trainer_parse_counts(in, got, MAX, HI);
  int m = expected(in, want);
  if (n != m || (n > 0 && memcmp(got, want, (size_t)n * sizeof(int))))
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "1",   "2",  "9",  "10", "66", "67", "0", "00",
      "007", ",",  ",",  ",",  "-1", "+1", " ", "99999999999999999999",
      "x",   "\t", "1e3"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 20, 16);
  return resihp__fuzz_pad_long(buf, n, cap, 50);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_partition", "corpus-partition",
                           IN_MAX, gen, 20000);
}
#endif
