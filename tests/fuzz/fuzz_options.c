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

#include <resihp.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[RESIHP_OPTS_MAX + 64];
  if (size >= sizeof(in))
    size = sizeof(in) - 1;
  memcpy(in, data, size);
  in[size] = '\0';

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
/* xorshift: reproducible without depending on libc's rand(). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Inputs biased towards the grammar: keys, '=', ',', units, junk bytes. */
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "debug", "detect-timeout", "heartbeat", "transport", "chunk-bytes",
      "deterministic", "probes", "probe-timeout", "probe-min-free-mem",
      "probe-scratch", "replica", "role", "=", ",", ",,", "=", "1", "0",
      "-1", "2s", "500ms", "1m", "4K", "256M", "9999999999999999999", "yes",
      "tcp", "spare", "all", "none", "mem:disk", "/tmp", "..", "\x01", "\xff",
      " ", "=="};
  size_t n = 0, parts = rng() % 12;
  for (size_t i = 0; i < parts && n < cap; i++) {
    if (rng() % 5 == 0) {
      buf[n++] = (uint8_t)rng();
      continue;
    }
    const char *a = atoms[rng() % (sizeof(atoms) / sizeof(atoms[0]))];
    size_t l = strlen(a);
    if (n + l > cap)
      break;
    memcpy(buf + n, a, l);
    n += l;
  }
  if (rng() % 50 == 0) /* now and then, something very long */
    while (n < cap)
      buf[n++] = (uint8_t)('a' + rng() % 3);
  return n;
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_options: cannot open %s\n", path);
    return -1;
  }
  static uint8_t buf[RESIHP_OPTS_MAX + 64];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    if (run_file(argv[i]))
      return 1;
    files++;
  }
  /* Under `make check`: the checked-in corpus. */
  const char *top = getenv("top_srcdir");
  if (argc == 1 && top) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus", top);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096 + 300];
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      if (run_file(path))
        return 1;
      files++;
    }
    if (d)
      closedir(d);
  }
  const char *r = getenv("RESIHP_FUZZ_RUNS"), *sd = getenv("RESIHP_FUZZ_SEED");
  long runs = r ? strtol(r, NULL, 10) : 20000;
  if (sd)
    rng_state = strtoull(sd, NULL, 10) | 1;
  static uint8_t buf[RESIHP_OPTS_MAX + 64];
  for (long i = 0; i < runs; i++) {
    size_t n = gen(buf, sizeof(buf) - 1);
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("fuzz_options: %d corpus files and %ld generated inputs, no "
         "failure\n",
         files, runs);
  return 0;
}
#endif
