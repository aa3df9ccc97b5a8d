/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the lists of figures ranks send to the fail-slow detector
 * (PERF s=mb:us:tokens:l2:nseq,... and WL w=tokens:l2:nseq,...), parsed by
 * resihp__wire_parse_tuples in the coordinator. Beyond "does not crash": an
 * accepted list has as many tuples as its ','-separated items, never more
 * than asked for, every value within [0, max], and printing the values back
 * gives the input again unless it had leading zeros. libFuzzer entry plus
 * the standalone driver, as tests/fuzz/README says. */
#include "config.h"

#include "../../libresihp/control/wire.h"
#include "fuzz_driver.h"

#include <resihp/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX 4096
#define ITEMS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[LIST_MAX + 1], back[LIST_MAX * 2];
  long long v[ITEMS * 5 + 1];
  if (size < 1)
    return 0;
  int arity = 1 + data[0] % 5, max_items = data[0] / 5 % (ITEMS + 1);
  long long max = data[0] & 1 ? 1000000000000000LL : 999;
  data++, size--;
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  v[(size_t)max_items * (size_t)arity] = -7; /* a guard past the room */
  int n = -1;
  int rc = resihp__wire_parse_tuples(in, arity, max, v, max_items, &n);
  if (v[(size_t)max_items * (size_t)arity] != -7)
    abort(); /* wrote past max_items tuples */
  if (rc)
    return 0;
  if (n < 0 || n > max_items)
    abort();
  size_t o = 0;
  back[0] = '\0';
  for (int i = 0; i < n; i++)
    for (int f = 0; f < arity; f++) {
      long long x = v[(size_t)i * (size_t)arity + (size_t)f];
      if (x < 0 || x > max)
        abort();
      o += (size_t)snprintf(back + o, sizeof(back) - o, "%s%lld",
                            f   ? ":"
                            : i ? ","
                                : "",
                            x);
    }
  if (!strstr(in, "0") && strcmp(back, in))
    abort(); /* not what was sent */
  if (strlen(in) > 0 && !strchr(in, '0') && n == 0)
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "1",  "12", "999", "1000", "0",  "00",        "99999999999999999999",
      ":",  ",",  "-",   " ",    "\n", "1:2:3:4:5", "7:8:9",
      "1,", ",1", "::",  "+1"};
  buf[0] = (uint8_t)resihp__fuzz_rng();
  size_t n =
      resihp__fuzz_atoms(buf, 1, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         1 + resihp__fuzz_rng() % 60, 16);
  return resihp__fuzz_pad_long(buf, n, cap, 50);
}

int main(int argc, char **argv) {
  resihp__fuzz_quiet();
  return resihp__fuzz_main(argc, argv, "fuzz_tuples", "corpus-tuples",
                           LIST_MAX + 1, gen, 20000);
}
#endif
