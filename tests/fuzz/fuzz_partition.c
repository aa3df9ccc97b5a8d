/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of trainer_parse_counts (contrib/common), the parser of the
 * pipeline trainer's --partition, and of trainer_parse_replica_counts
 * (--partition-of R=a:b:...). Beyond "does not crash": a list is
 * accepted exactly when it is comma-separated decimal numbers, each 1..HI,
 * at most MAX of them, and then the counts are the numbers written; the
 * input with its commas made colons after "R=" gives the same counts and
 * R, and with commas as they are (or R out of range) is refused. The
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
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  int got[MAX], want[MAX];
  int n = trainer_parse_counts(in, got, MAX, HI);
  int m = expected(in, want);
  if (n != m || (n > 0 && memcmp(got, want, (size_t)n * sizeof(int))))
    abort();
  /* the same list for a replica: R=, colons between the counts */
  static const char *const rs[] = {"7", "0", "2147483647", "2147483648", "",
                                   "-1"};
  char of[IN_MAX + 16];
  int r = (int)(size % (sizeof(rs) / sizeof(rs[0])));
  int rok = r <= 2; /* the others: past 2^31-1, empty, a sign */
  snprintf(of, sizeof(of), "%s=%s", rs[r], in);
  int has_colon = strchr(in, ':') != NULL, has_comma = strchr(in, ',') != NULL;
  for (char *q = of + strlen(rs[r]) + 1; *q; q++)
    if (*q == ',')
      *q = ':';
  int rr = -1;
  n = trainer_parse_replica_counts(of, &rr, got, MAX, HI);
  if (!has_colon && /* (a colon of its own would be a separator too) */
      (n != (rok ? m : -1) ||
      (n > 0 && (memcmp(got, want, (size_t)n * sizeof(int)) ||
                 rr != atoi(rs[r])))))
    abort();
  /* commas are not its separator */
  snprintf(of, sizeof(of), "1=%s", in);
  if (has_comma && trainer_parse_replica_counts(of, &rr, got, MAX, HI) >= 0)
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "1",   "2",  "9",  "10", "66", "67", "0", "00",
      "007", ",",  ",",  ",",  "-1", "+1", " ", "99999999999999999999",
      "x",   "\t", "1e3", ":", "="};
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
