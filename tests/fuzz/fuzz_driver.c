/* SPDX-License-Identifier: BSD-3-Clause */
/* Standalone driver of the transport fuzz targets, so that they build with
 * gcc and run as regular tests: every file given on the command line, or
 * under `make check` the target's checked-in corpus
 * ($top_srcdir/tests/fuzz/corpus-<name>/), then RESIHP_FUZZ_RUNS inputs
 * from the target's generator (default: the target's; seed
 * RESIHP_FUZZ_SEED). A
 * target aborts on a broken invariant, which fails the test. */
#include "config.h"

#include "fuzz_driver.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT 65536

/* xorshift: reproducible without depending on libc's rand(). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static int run_file(const char *path) {
  static uint8_t buf[FUZZ_MAX_INPUT];
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_%s: cannot open %s\n", fuzz_name, path);
    return -1;
  }
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  return 0;
}

static int run_corpus(const char *top, int *files) {
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus-%s", top, fuzz_name);
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "fuzz_%s: no corpus in %s\n", fuzz_name, dir);
    return -1;
  }
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[4096 + 300];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    rc = run_file(path);
    (*files)++;
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++, files++)
    if (run_file(argv[i]))
      return 1;
  const char *top = getenv("top_srcdir");
  if (argc == 1 && top && run_corpus(top, &files))
    return 1;
  const char *r = getenv("RESIHP_FUZZ_RUNS"), *sd = getenv("RESIHP_FUZZ_SEED");
  long runs = r ? strtol(r, NULL, 10) : fuzz_default_runs;
  if (sd)
    rng_state = strtoull(sd, NULL, 10) | 1;
  static uint8_t buf[FUZZ_MAX_INPUT];
  for (long i = 0; i < runs; i++)
    LLVMFuzzerTestOneInput(buf, fuzz_generate(buf, sizeof(buf), rng));
  printf("fuzz_%s: %d corpus files and %ld generated inputs, no failure\n",
         fuzz_name, files, runs);
  return 0;
}
