/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the --resilient=OPTS parser (the string a user hands to a
 * root-run SPANK plugin), libFuzzer-style, plus a standalone driver so that
 * it builds with gcc and runs as a regular test: every file given on the
 * command line (a corpus) and then N pseudo-random inputs (N from
 * RESIHP_FUZZ_RUNS, default 20000; seed from RESIHP_FUZZ_SEED).
 *
 * Invariants checked beyond "does not crash": parsing is all-or-nothing
 * (on failure the settings are unchanged), a success round-trips through
 * resihp_settings_format, and the error text is NUL-terminated within its
 * buffer. See tests/fuzz/README for a clang -fsanitize=fuzzer build. */
#include "config.h"

#include "fuzz_driver.h"

#include <resihp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[RESIHP_OPTS_MAX + 64];
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);

  resihp_settings_t s, before;
  resihp_settings_init(&s);
  before = s;
  char err[128];
  memset(err, 'x', sizeof(err));
  int rc = resihp_settings_parse_opts(&s, in, err, sizeof(err));
  if (rc != 0) {
    if (rc > 0 || memcmp(&s, &before, sizeof(s)) != 0)
      abort(); /* not all-or-nothing */
    if (!memchr(err, '\0', sizeof(err)))
      abort(); /* unterminated message */
    return 0;
  }
  /* Success: every value formats and re-parses to the same value. */
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++) {
    char v[RESIHP_SETTING_STR_MAX];
    resihp_settings_format(&s, (resihp_setting_id_t)i, v, sizeof(v));
    resihp_settings_t t;
    resihp_settings_init(&t);
    const char *key = resihp_setting_desc((resihp_setting_id_t)i)->key;
    if (resihp_settings_set(&t, key, v, RESIHP_SOURCE_OPTION, NULL, 0) != 0) {
      /* An empty string is a valid default but not a valid option value
       * only for ... nothing: every STR accepts "". */
      abort();
    }
    if (t.value[i] != s.value[i] || strcmp(t.str[i], s.str[i]) != 0)
      abort();
  }
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
/* Inputs biased towards the grammar: keys, '=', ',', units, junk bytes. */
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"debug",
                                      "detect-timeout",
                                      "heartbeat",
                                      "transport",
                                      "chunk-bytes",
                                      "deterministic",
                                      "probes",
                                      "probe-timeout",
                                      "probe-min-free-mem",
                                      "probe-scratch",
                                      "replica",
                                      "role",
                                      "=",
                                      ",",
                                      ",,",
                                      "=",
                                      "1",
                                      "0",
                                      "-1",
                                      "2s",
                                      "500ms",
                                      "1m",
                                      "4K",
                                      "256M",
                                      "9999999999999999999",
                                      "yes",
                                      "tcp",
                                      "spare",
                                      "all",
                                      "none",
                                      "mem:disk",
                                      "/tmp",
                                      "..",
                                      "\x01",
                                      "\xff",
                                      " ",
                                      "=="};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 12, 5);
  return resihp__fuzz_pad_long(buf, n, cap, 50);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_options", "corpus",
                           RESIHP_OPTS_MAX + 64, gen, 20000);
}
#endif
