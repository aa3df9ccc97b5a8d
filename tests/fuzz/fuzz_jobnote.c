/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the job's Comment as resihp-run reads it back (squeue -o
 * %k: the user's own text, or a user's forgery of ours) and writes it
 * (tools/run/jobnote.h), libFuzzer-style, with the standalone driver of
 * fuzz_driver.h for `make check`.
 *
 * Invariants beyond "does not crash": the user's part it keeps is at most
 * RESIHP__JOBNOTE_USER_MAX printable ASCII bytes without quotes, the count
 * is 0..999999, and the Comment written from them (with the input as the
 * last failure's text too) is at most RESIHP__JOBNOTE_MAX printable bytes
 * without quotes that hold "resihp: ". */
#include "config.h"

#include "fuzz_driver.h"

#include "../../tools/run/jobnote.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void printable_or_abort(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n > max)
    abort();
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < ' ' || (unsigned char)s[i] >= 0x7f ||
        s[i] == '"' || s[i] == '\'')
      abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  char user[RESIHP__JOBNOTE_USER_MAX + 1];
  int failures = -1;
  resihp__jobnote_parse(in, user, sizeof(user), &failures);
  printable_or_abort(user, RESIHP__JOBNOTE_USER_MAX);
  if (failures < 0 || failures > 999999)
    abort();
  resihp__jobnote_t n = {.state = in, .step = 7, .failures = failures,
                         .last = in, .dropped = 1, .swaps = 1};
  char out[RESIHP__JOBNOTE_MAX + 64];
  size_t l = resihp__jobnote_text(user, &n, out, sizeof(out));
  if (l != strlen(out) || (!strstr(out, "resihp: ") && l < RESIHP__JOBNOTE_MAX))
    abort();
  printable_or_abort(out, RESIHP__JOBNOTE_MAX);
  /* a tiny buffer still gets a terminated string */
  char small[5];
  if (resihp__jobnote_text(user, &n, small, sizeof(small)) > 4 ||
      strlen(small) > 4)
    abort();
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "resihp:", " | ",  "; failures ", "99999999999", "-3",  "(null)",
      "running", "\"",   "'",           "\n",          "\x7f", "\xc3\xa9",
      "step 4",  "user", " ",           "|",           "=",    "resihp: x"};
  return resihp__fuzz_pad_long(
      buf,
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 16, 7),
      cap, 60);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_jobnote", "corpus-jobnote", 4096,
                           fuzz_generate, 20000);
}
#endif
