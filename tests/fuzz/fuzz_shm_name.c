/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of resihp__shm_ring_creator, which every shared-memory
 * set-up applies to every name in /dev/shm (a directory everyone writes)
 * to find the rings of creators that are gone (transport/shm.c). Beyond
 * "does not crash": a name is accepted only in the exact form
 * resihp-PID-PEER-NONCE (decimal numbers of at most INT_MAX without sign or
 * leading zero, PID > 0, NONCE 16 lowercase hex digits), and then the PID
 * it returns is the one in the name. libFuzzer entry plus the standalone
 * driver, as tests/fuzz/README describes. */
#include "config.h"

#include "../../libresihp/transport/shm.h"
#include "fuzz_driver.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_FUZZ 300

/* A canonical decimal number at s of at most INT_MAX, then sep: its
 * length (without sep), or 0. Written independently of the parser. */
static size_t canonical(const char *s, char sep, long long *v) {
  size_t n = strspn(s, "0123456789");
  if (n == 0 || n > 10 || s[n] != sep || (n > 1 && s[0] == '0'))
    return 0;
  char num[11];
  memcpy(num, s, n);
  num[n] = '\0';
  *v = strtoll(num, NULL, 10);
  return *v <= INT_MAX ? n : 0;
}

static long long expected(const char *s) {
  long long pid, peer;
  size_t n;
  if (strncmp(s, "resihp-", 7))
    return -1;
  s += 7;
  if (!(n = canonical(s, '-', &pid)) || pid == 0)
    return -1;
  s += n + 1;
  if (!(n = canonical(s, '-', &peer)))
    return -1;
  s += n + 1;
  if (strlen(s) != 16)
    return -1;
  for (int i = 0; i < 16; i++)
    if (!strchr("0123456789abcdef", s[i]))
      return -1;
  return pid;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[NAME_MAX_FUZZ + 1];
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  if ((long long)resihp__shm_ring_creator(in) != expected(in))
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "resihp-", "resihp", "-", "0", "1", "007", "2147483647", "2147483648",
      "99999999999", "+1", "0123456789abcdef", "0123456789ABCDEF",
      "fffffffffffffff", "ffffffffffffffff0", " ", "/", "\x01", "\xff"};
  if (resihp__fuzz_rng() % 2) /* mostly well-formed, then mutated */
    return resihp__fuzz_near_miss(
        buf,
        snprintf((char *)buf, cap, "resihp-%lu-%lu-%016llx",
                 (unsigned long)(resihp__fuzz_rng() % 3000000000ULL),
                 (unsigned long)(resihp__fuzz_rng() % 100),
                 (unsigned long long)resihp__fuzz_rng()),
        cap);
  return resihp__fuzz_atoms(buf, 0, cap, atoms,
                           sizeof(atoms) / sizeof(atoms[0]),
                           resihp__fuzz_rng() % 8, 0);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_shm_name", "corpus-shm-name",
                          NAME_MAX_FUZZ, gen, 20000);
}
#endif
