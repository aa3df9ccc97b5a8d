/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the address lists of sharded replicas, "a/b/..." (one
 * address per rank in HELLO's ep= and sep=, GO's members, the replica
 * communicator's RANKS): resihp__wire_list_ok, which the coordinator
 * applies to what a rank says, and resihp__wire_list_item, with which the
 * coordinator and every rank pick one address. Beyond "does not crash": a
 * list accepted for n ranks has exactly n items, each a plain token that
 * fits, item n does not exist, and no item is ever longer than asked for.
 * libFuzzer entry plus the standalone driver, as tests/fuzz/README says. */
#include "config.h"

#include "../../libresihp/control/wire.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX 4096
#define ITEM_CAP 48

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[LIST_MAX + 1], item[ITEM_CAP + 8];
  if (size < 1)
    return 0;
  int n = data[0] % 70; /* past the 64 ranks a replica may have */
  data++, size--;
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  int ok = resihp__wire_list_ok(in, n, ITEM_CAP);
  for (int k = 0; k < (n ? n : 1) + 1; k++) {
    memset(item, 'Z', sizeof(item));
    int rc = resihp__wire_list_item(in, k, item, ITEM_CAP);
    if (!rc && (strlen(item) >= ITEM_CAP || strchr(item, '/')))
      abort(); /* too long, or more than one item */
    if (item[ITEM_CAP] != 'Z')
      abort(); /* wrote past cap */
    if (ok && k < n && (rc || !resihp__wire_token_ok(item, ITEM_CAP)))
      abort();
    if (ok && k == n && !rc)
      abort(); /* one item more than accepted */
  }
  if (ok && (size_t)n > size / 2 + 1)
    abort(); /* n items need n-1 separators and n non-empty items */
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "127.0.0.1:1", "10.0.0.2:65535", "/", "//", "host-a:5", ":", "a",
      "x y", "\n", "\x01", "\xff", "0123456789012345678901234567890123456789"
      "0123456789"};
  buf[0] = (uint8_t)resihp__fuzz_rng();
  size_t n = resihp__fuzz_atoms(buf, 1, cap, atoms,
                                sizeof(atoms) / sizeof(atoms[0]),
                                1 + resihp__fuzz_rng() % 80, 16);
  return resihp__fuzz_pad_long(buf, n, cap, 50);
}

int main(int argc, char **argv) {
  resihp__fuzz_quiet();
  return resihp__fuzz_main(argc, argv, "fuzz_addr_list", "corpus-addr-list",
                           LIST_MAX + 1, gen, 20000);
}
#endif
