/* SPDX-License-Identifier: BSD-3-Clause */
/* Standalone fuzz driver (see fuzz_driver.h). */
#include "config.h"

#include "fuzz_driver.h"

#include <resihp/log.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(resihp_log_level_t level, const char *subsystem,
                  const char *msg, void *ud) {
  (void)level;
  (void)subsystem;
  (void)msg;
  (void)ud;
}

void resihp__fuzz_quiet(void) {
  resihp_log_set_handler(quiet, NULL);
}

/* xorshift: reproducible without depending on libc's rand(). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

uint64_t resihp__fuzz_rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

size_t resihp__fuzz_near_miss(uint8_t *buf, int len, size_t cap) {
  size_t n = len < 0 ? 0 : (size_t)len;
  if (n >= cap)
    n = cap - 1;
  if (n && resihp__fuzz_rng() % 2)
    buf[resihp__fuzz_rng() % n] = (uint8_t)resihp__fuzz_rng();
  return n;
}

char *resihp__fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (s) {
    memcpy(s, data, size);
    s[size] = '\0';
  }
  return s;
}

size_t resihp__fuzz_cstr_in(char *dst, size_t cap, const uint8_t *data,
                            size_t size) {
  if (size >= cap)
    size = cap - 1;
  memcpy(dst, data, size);
  dst[size] = '\0';
  return size;
}

size_t resihp__fuzz_atoms(uint8_t *buf, size_t n, size_t cap,
                          const char *const *atoms, size_t natoms, size_t parts,
                          unsigned junk_one_in) {
  for (size_t i = 0; i < parts && n < cap; i++) {
    if (junk_one_in && resihp__fuzz_rng() % junk_one_in == 0) {
      buf[n++] = (uint8_t)resihp__fuzz_rng();
      continue;
    }
    const char *a = atoms[resihp__fuzz_rng() % natoms];
    size_t l = strlen(a);
    if (n + l > cap)
      break;
    memcpy(buf + n, a, l);
    n += l;
  }
  return n;
}

size_t resihp__fuzz_pad_long(uint8_t *buf, size_t n, size_t cap,
                             unsigned one_in) {
  if (one_in && resihp__fuzz_rng() % one_in == 0)
    while (n < cap)
      buf[n++] = (uint8_t)('a' + resihp__fuzz_rng() % 3);
  return n;
}

static int run_file(const char *name, const char *path, uint8_t *buf,
                    size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open %s\n", name, path);
    return -1;
  }
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  return 0;
}

int resihp__fuzz_main(int argc, char **argv, const char *name,
                      const char *corpus, size_t max_len,
                      size_t (*gen)(uint8_t *buf, size_t cap), long runs) {
  uint8_t *buf = malloc(max_len);
  if (!buf)
    return 1;
  int files = 0;
  for (int i = 1; i < argc; i++, files++)
    if (run_file(name, argv[i], buf, max_len))
      return 1;
  const char *top = getenv("top_srcdir");
  if (argc == 1 && top) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/%s", top, corpus);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096 + 300];
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      if (run_file(name, path, buf, max_len))
        return 1;
      files++;
    }
    if (d)
      closedir(d);
  }
  const char *r = getenv("RESIHP_FUZZ_RUNS"), *sd = getenv("RESIHP_FUZZ_SEED");
  if (r)
    runs = strtol(r, NULL, 10);
  if (sd)
    rng_state = strtoull(sd, NULL, 10) | 1;
  for (long i = 0; i < runs; i++)
    LLVMFuzzerTestOneInput(buf, gen(buf, max_len));
  free(buf);
  printf("%s: %d corpus files and %ld generated inputs, no failure\n", name,
         files, runs);
  return 0;
}
