/* SPDX-License-Identifier: BSD-3-Clause */
/* A standalone driver for libFuzzer-style targets, so that they build with
 * gcc and run as regular tests (see tests/fuzz/README): every file named
 * on the command line, or under `make check` every file of the target's
 * corpus directory, then N pseudo-random inputs from the target's
 * generator (N from RESIHP_FUZZ_RUNS, default 20000; seed from
 * RESIHP_FUZZ_SEED). A target defines LLVMFuzzerTestOneInput and, unless
 * RESIHP_FUZZ_LIBFUZZER is defined, defines FUZZ_NAME (its name) and
 * FUZZ_CORPUS (its corpus directory under top_srcdir), includes this
 * header once, and defines fuzz_generate (declared below) with the help of
 * fuzz_rng and fuzz_atoms. */
#ifndef RESIHP_TESTS_FUZZ_STANDALONE_H
#define RESIHP_TESTS_FUZZ_STANDALONE_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The largest input read from a file or generated. */
enum { FUZZ_MAX_INPUT = 8192 };
/* One generated input into buf (at most cap bytes); returns its size. */
static size_t fuzz_generate(uint8_t *buf, size_t cap);

/* xorshift: reproducible without depending on libc's rand(). */
static uint64_t fuzz_rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t fuzz_rng(void) {
  fuzz_rng_state ^= fuzz_rng_state << 13;
  fuzz_rng_state ^= fuzz_rng_state >> 7;
  fuzz_rng_state ^= fuzz_rng_state << 17;
  return fuzz_rng_state;
}

/* An input biased towards a grammar: up to max_parts atoms, a random byte
 * instead of an atom one time in junk_every, and one input in long_every
 * padded to cap with letters (something very long). Returns its size. */
static size_t fuzz_atoms(uint8_t *buf, size_t cap, const char *const *atoms,
                         size_t natoms, size_t max_parts, unsigned junk_every,
                         unsigned long_every) {
  size_t n = 0, parts = fuzz_rng() % max_parts;
  for (size_t i = 0; i < parts && n < cap; i++) {
    if (fuzz_rng() % junk_every == 0) {
      buf[n++] = (uint8_t)fuzz_rng();
      continue;
    }
    const char *a = atoms[fuzz_rng() % natoms];
    size_t l = strlen(a);
    if (n + l > cap)
      break;
    memcpy(buf + n, a, l);
    n += l;
  }
  if (fuzz_rng() % long_every == 0)
    while (n < cap)
      buf[n++] = (uint8_t)('a' + fuzz_rng() % 3);
  return n;
}

static int fuzz_run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open %s\n", FUZZ_NAME, path);
    return -1;
  }
  static uint8_t buf[FUZZ_MAX_INPUT];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    if (fuzz_run_file(argv[i]))
      return 1;
    files++;
  }
  const char *top = getenv("top_srcdir");
  if (argc == 1 && top) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/%s", top, FUZZ_CORPUS);
    DIR *d = opendir(dir);
    if (!d) {
      fprintf(stderr, "%s: no corpus at %s\n", FUZZ_NAME, dir);
      return 1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096 + 300];
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      if (fuzz_run_file(path)) {
        closedir(d);
        return 1;
      }
      files++;
    }
    closedir(d);
  }
  const char *r = getenv("RESIHP_FUZZ_RUNS"), *sd = getenv("RESIHP_FUZZ_SEED");
  long runs = r ? strtol(r, NULL, 10) : 20000;
  if (sd)
    fuzz_rng_state = strtoull(sd, NULL, 10) | 1;
  static uint8_t buf[FUZZ_MAX_INPUT];
  for (long i = 0; i < runs; i++)
    LLVMFuzzerTestOneInput(buf, fuzz_generate(buf, sizeof(buf)));
  printf("%s: %d corpus files and %ld generated inputs, no failure\n",
         FUZZ_NAME, files, runs);
  return 0;
}

#endif
