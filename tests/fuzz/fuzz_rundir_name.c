/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of resihp__rundir_parse_name, which root's stale-directory
 * clean-up applies to every name it finds in the probe run dir, a
 * directory every user can write to. Beyond "does not crash": a name is
 * accepted only in the exact form resihp.UID.JOB.STEP.XXXXXX (canonical
 * decimal numbers of at most 32 bits, six alphanumerics), and then the UID
 * it returns is the one in the name. libFuzzer entry plus the standalone
 * driver (driver.c), as tests/fuzz/README describes. */
#include "config.h"

#include "fuzz_driver.h"
#include "probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_FUZZ 300

/* The specification, written independently of the parser. */
static int expected(const char *s, unsigned long *uid) {
  unsigned long v[3];
  if (strncmp(s, "resihp.", 7))
    return 0;
  s += 7;
  for (int k = 0; k < 3; k++) {
    size_t n = strspn(s, "0123456789");
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0') || s[n] != '.')
      return 0;
    char num[11];
    memcpy(num, s, n);
    num[n] = '\0';
    v[k] = strtoul(num, NULL, 10);
    if (v[k] > 0xffffffffUL)
      return 0;
    s += n + 1;
  }
  if (strlen(s) != 6)
    return 0;
  for (int i = 0; i < 6; i++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                "0123456789", s[i]) || !s[i])
      return 0;
  *uid = v[0];
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[NAME_MAX_FUZZ + 1];
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  uid_t uid = (uid_t)12345;
  unsigned long want = 0;
  int got = resihp__rundir_parse_name(in, &uid);
  int exp = expected(in, &want);
  if (got != exp || (got && (unsigned long)uid != want))
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "resihp.", "resihp", ".", "0", "1", "00", "01", "1000", "4294967295",
      "4294967296", "99999999999", "-1", "+1", "abcdef", "aB3xYz", "abcde",
      "abcdefg", "/", "..", " ", "\x01", "\xff", "X"};
  if (resihp__fuzz_rng() % 2) /* mostly well-formed, then mutated */
    return resihp__fuzz_near_miss(
        buf,
        snprintf((char *)buf, cap, "resihp.%lu.%lu.%lu.%s",
                 (unsigned long)(resihp__fuzz_rng() % 5000000000ULL),
                 (unsigned long)(resihp__fuzz_rng() % 100000),
                 (unsigned long)(resihp__fuzz_rng() % 10), "aB3xYz"),
        cap);
  return resihp__fuzz_atoms(buf, 0, cap, atoms,
                           sizeof(atoms) / sizeof(atoms[0]),
                           resihp__fuzz_rng() % 10, 0);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_rundir_name", "corpus-rundir",
                          NAME_MAX_FUZZ, gen, 20000);
}
#endif
