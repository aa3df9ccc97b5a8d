/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of resihp__secret_parse_name, which resihp-run's clean-up of
 * stale job secrets (tools/run/secret.c) applies to every name in the
 * secret directory, one the job's nodes share. Beyond "does not crash": a
 * name is accepted only in the exact form .resihp-secret.JOB.PID (JOB of
 * digits and '_', PID of digits, both non-empty, JOB shorter than the
 * buffer), and then the JOB it returns is the one in the name, cut
 * nowhere. libFuzzer entry plus the standalone driver, as tests/fuzz/README
 * describes. */
#include "config.h"

#include "../../tools/run/secret.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_FUZZ 300
#define JOB_CAP 16

/* The specification, written independently of the parser. */
static int expected(const char *s, char *job) {
  static const char prefix[] = ".resihp-secret.";
  if (strncmp(s, prefix, sizeof(prefix) - 1))
    return 0;
  s += sizeof(prefix) - 1;
  const char *last = strrchr(s, '.');
  if (!last)
    return 0;
  size_t jn = (size_t)(last - s);
  if (jn == 0 || jn >= JOB_CAP || strspn(s, "0123456789_") != jn)
    return 0;
  const char *pid = last + 1;
  if (!*pid || strspn(pid, "0123456789") != strlen(pid))
    return 0;
  memcpy(job, s, jn);
  job[jn] = '\0';
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[NAME_MAX_FUZZ + 1];
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  char got[JOB_CAP + 8], want[JOB_CAP + 8];
  memset(got, 'x', sizeof(got));
  int g = resihp__secret_parse_name(in, got, JOB_CAP);
  int e = expected(in, want);
  if (g != e || (g && strcmp(got, want)) || got[JOB_CAP] != 'x')
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      ".resihp-secret.", ".resihp-secret", ".", "0", "1", "123", "123_4",
      "_", "99999999999999999", "-1", "+1", "a", "/", "..", " ", "\x01",
      "\xff"};
  if (resihp__fuzz_rng() % 2) /* mostly well-formed, then mutated */
    return resihp__fuzz_near_miss(
        buf,
        snprintf((char *)buf, cap, ".resihp-secret.%lu%s.%lu",
                 (unsigned long)(resihp__fuzz_rng() % 100000000ULL),
                 resihp__fuzz_rng() % 3 ? "" : "_7",
                 (unsigned long)(resihp__fuzz_rng() % 5000000)),
        cap);
  return resihp__fuzz_atoms(buf, 0, cap, atoms,
                           sizeof(atoms) / sizeof(atoms[0]),
                           resihp__fuzz_rng() % 8, 0);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_secret_name", "corpus-secret",
                          NAME_MAX_FUZZ, gen, 20000);
}
#endif
