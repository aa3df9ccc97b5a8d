/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of RESIHP_FAILOVER_MS (recovery/job_link.c: set by
 * resihp-run, or by a user, read by every replica's rank 0), libFuzzer-
 * style, with the standalone driver of fuzz_driver.h for `make check`.
 *
 * Invariants beyond "does not crash": a value is taken exactly when it is
 * empty (the default) or only decimal digits worth at most
 * RESIHP__JOB_FAILOVER_MAX_MS, and then it is that number; anything else
 * is RESIHP_EINVAL and leaves the output alone.
 *
 * libFuzzer: clang -fsanitize=fuzzer,address -DRESIHP_FUZZ_LIBFUZZER -I.
 *   -Ilibresihp/include tests/fuzz/fuzz_failover_ms.c
 *   tests/fuzz/fuzz_driver.c libresihp/.libs/libresihp-internal.a */
#include "config.h"

#include "../../libresihp/recovery/job_internal.h"
#include "fuzz_driver.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  resihp__fuzz_quiet();
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  /* what a strict reading takes: digits only, no overflow past the cap */
  long want = in[0] ? 0 : RESIHP__JOB_FAILOVER_MS;
  for (const char *p = in; *p && want >= 0; p++)
    want = *p < '0' || *p > '9' || want > RESIHP__JOB_FAILOVER_MAX_MS
               ? -1
               : want * 10 + (*p - '0');
  if (want > RESIHP__JOB_FAILOVER_MAX_MS)
    want = -1;
  int ms = -7, rc = resihp__job_parse_failover(in, &ms);
  if (want >= 0 ? rc != 0 || ms != want : rc != RESIHP_EINVAL || ms != -7)
    abort();
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "0",  "1",   "9", "30000", "3600000", "3600001", "99999999999999999999",
      "-",  "+",   " ", "\t",    "x",       "0x",      ".",
      "ms", "\xff"};
  return resihp__fuzz_pad_long(
      buf,
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 6, 9),
      cap, 60);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_failover_ms", "corpus-failover-ms",
                           256, fuzz_generate, 20000);
}
#endif
