/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the standby's early takeover (control/vouch.h): a vouch
 * (a replica's HELLO again=1, read by the standby from the network) and
 * the lines of a state record the vouches are counted against
 * (resihp__coord_snapshot_voters: the membership, the credentials, the
 * term). Beyond "does not crash": an accepted vouch names a replica in
 * range with a credential of hex of its length; an accepted record's
 * count takes no stranger, no wrong credential, nobody twice, and never
 * exceeds its membership. libFuzzer entry plus the standalone driver, as
 * tests/fuzz/README says. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/vouch.h"
#include "fuzz_driver.h"

#include <stdlib.h>
#include <string.h>

#define IN_MAX 4096
#define R 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > IN_MAX)
    size = IN_MAX;
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  int r = -1;
  char cred[RESIHP__VOUCH_CRED_HEX + 1];
  uint32_t term = 0;
  if (!resihp__vouch_parse(in, &r, cred, &term) &&
      (r < 0 || r >= RESIHP__COORD_MAX_REPLICAS ||
       strlen(cred) != RESIHP__VOUCH_CRED_HEX ||
       strspn(cred, "0123456789abcdef") != RESIHP__VOUCH_CRED_HEX ||
       term == UINT32_MAX))
    abort();
  resihp__vouch_t *v = NULL;
  if (!resihp__vouch_create(in, size, R, &v)) {
    int m = resihp__vouch_members(v);
    if (m < 0 || m > R)
      abort();
    static const char *const creds[] = {"00112233445566778899aabbccddeeff",
                                        "ffeeddccbbaa99887766554433221100",
                                        "", "x"};
    int counted = 0;
    for (int k = -1; k <= R; k++)
      for (size_t c = 0; c < sizeof(creds) / sizeof(creds[0]); c++) {
        int had = resihp__vouch_has(v, k);
        int rc = resihp__vouch_add(v, k, creds[c], 1);
        if (rc == 1) {
          if (had || strlen(creds[c]) != RESIHP__VOUCH_CRED_HEX || k < 0 ||
              k >= R)
            abort();
          counted++;
        } else if (rc == 0 && !had) {
          abort();
        }
      }
    if (counted != resihp__vouch_count(v) || counted > m)
      abort();
    resihp__vouch_destroy(v);
  }
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"HELLO ",
                                      "replica=",
                                      "again=1",
                                      "again=0",
                                      " cred=",
                                      "00112233445566778899aabbccddeeff",
                                      "ffeeddccbbaa99887766554433221100",
                                      "0011",
                                      " term=",
                                      "4294967294",
                                      "4294967295",
                                      "RESIHP-COORD 1 4 12 1 3000 =- 0\n",
                                      "m ",
                                      "0:1:2",
                                      "1:0",
                                      "-",
                                      "r ",
                                      "0 1 7 =n1 =",
                                      "t ",
                                      "6",
                                      "end\n",
                                      "\n",
                                      " ",
                                      "=",
                                      "3",
                                      "-1"};
  size_t n = resihp__fuzz_atoms(buf, 0, cap, atoms,
                                sizeof(atoms) / sizeof(atoms[0]),
                                1 + resihp__fuzz_rng() % 24, 40);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  resihp__fuzz_quiet();
  return resihp__fuzz_main(argc, argv, "fuzz_vouch", "corpus-vouch", IN_MAX,
                           gen, 20000);
}
#endif
