/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the standby feed's lines (control/standby.h): REC n=...
 * (read by the standby: how many bytes of record follow) and the
 * STANDBY hello (read by the primary). Beyond "does not crash": an
 * accepted count is at most RESIHP__FEED_REC_MAX, and an accepted hello's
 * address and node are plain tokens within their room, the address with a
 * port. libFuzzer entry plus the standalone driver, as tests/fuzz/README
 * says. */
#include "config.h"

#include "../../libresihp/control/standby.h"
#include "../../libresihp/control/wire.h"
#include "fuzz_driver.h"

#include <stdlib.h>
#include <string.h>

#define LINE_MAX_FUZZ 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[LINE_MAX_FUZZ + 1], ep[24 + 8], node[12 + 8], step[10 + 8];
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  size_t n = 0;
  if (!resihp__feed_parse_rec(in, &n) && n > RESIHP__FEED_REC_MAX)
    abort();
  memset(ep, 'Z', sizeof(ep));
  memset(node, 'Z', sizeof(node));
  memset(step, 'Z', sizeof(step));
  if (!resihp__feed_parse_hello(in, ep, 24, node, 12, step, 10) &&
      (!resihp__wire_token_ok(ep, 24) || !strchr(ep, ':') ||
       !resihp__wire_token_ok(node, 12) || !resihp__wire_token_ok(step, 10)))
    abort();
  if (ep[24] != 'Z' || node[12] != 'Z' || step[10] != 'Z')
    abort(); /* wrote past the room given */
  /* the standby's token: taken only when it is exactly the one asked */
  static const char want[] = "00112233445566778899aabbccddeeff";
  char got[80];
  if (resihp__feed_token_ok(in, want) &&
      (resihp__wire_get(in, "token", got, sizeof(got)) || strcmp(got, want)))
    abort();
  if (!resihp__feed_token_ok(in, NULL) || !resihp__feed_token_ok(in, ""))
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"REC ",
                                      "n=",
                                      "1024",
                                      "1073741824",
                                      "1073741825",
                                      "-1",
                                      "STANDBY ",
                                      "ep=",
                                      "node=",
                                      "token=",
                                      "00112233445566778899aabbccddeeff",
                                      "00112233445566778899aabbccddeef",
                                      "h:1",
                                      "10.0.0.2:4000",
                                      "n2",
                                      " ",
                                      "=",
                                      ":",
                                      "step=",
                                      "12.3",
                                      "99999999999999999999",
                                      "HB",
                                      "BYE",
                                      "\n",
                                      "x"};
  size_t n = resihp__fuzz_atoms(buf, 0, cap, atoms,
                                sizeof(atoms) / sizeof(atoms[0]),
                                1 + resihp__fuzz_rng() % 12, 24);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  resihp__fuzz_quiet();
  return resihp__fuzz_main(argc, argv, "fuzz_feed", "corpus-feed",
                           LINE_MAX_FUZZ, gen, 20000);
}
#endif
