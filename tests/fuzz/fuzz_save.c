/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the resumable state's parsers (job_save.h): the shard
 * file header and the meta text, both read by resihp-run --resume and by
 * every rank of a resumed run from a directory a user gives.
 * libFuzzer-style, with the standalone driver of fuzz_driver.h for
 * `make check`. The first byte picks the parser.
 *
 * Invariants beyond "does not crash": a refused input leaves a message; an
 * accepted header has its fields in range and encodes back to the same 64
 * bytes; an accepted meta formats to a text that parses to the same
 * values. */
#include "config.h"

#include "../../libresihp/recovery/job_save.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size)
    return 0;
  int which = data[0] & 1;
  data++;
  size--;
  char err[300];
  err[0] = '\0';
  if (which == 0) {
    resihp__save_hdr_t h;
    int rc = resihp__save_hdr_parse(data, size, &h, err, sizeof(err));
    if (rc) {
      if (rc != RESIHP_EPROTO || !err[0])
        abort();
      return 0;
    }
    if (h.shards < 1 || h.shards > RESIHP__SAVE_MAX_SHARDS || h.shard < 0 ||
        h.shard >= h.shards || h.step < 0 || h.step > RESIHP__SAVE_MAX_STEPS ||
        strlen(h.shape) > 16)
      abort();
    uint8_t back[RESIHP__SAVE_HDR_LEN];
    resihp__save_hdr_encode(&h, back);
    if (memcmp(back, data, RESIHP__SAVE_HDR_LEN))
      abort();
    return 0;
  }
  resihp__save_meta_t m, m2;
  int rc = resihp__save_meta_parse((const char *)data, size, &m, err,
                                   sizeof(err));
  if (rc) {
    if (rc != RESIHP_EPROTO || !err[0])
      abort();
    return 0;
  }
  char text[512];
  int n = resihp__save_meta_format(&m, text, sizeof(text));
  if (n < 0 || resihp__save_meta_parse(text, (size_t)n, &m2, err, sizeof(err)) ||
      m2.step != m.step || m2.steps != m.steps ||
      m2.microbatches != m.microbatches || m2.replicas != m.replicas ||
      m2.shards != m.shards || strcmp(m2.shape, m.shape) || m.step > m.steps)
    abort();
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
#include "fuzz_driver.h"

/* Half headers (a valid one, then bytes changed), half metas built from
 * the grammar's atoms. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  if (resihp__fuzz_rng() & 1) {
    resihp__save_hdr_t h = {.step = (long)(resihp__fuzz_rng() % 100),
                            .shard = 0,
                            .shards = 1 + (int)(resihp__fuzz_rng() % 4),
                            .length = resihp__fuzz_rng() % 5000};
    snprintf(h.shape, sizeof(h.shape), "%s",
             resihp__fuzz_rng() & 1 ? "-" : "0123456789abcdef");
    buf[0] = 0;
    resihp__save_hdr_encode(&h, buf + 1);
    int flips = (int)(resihp__fuzz_rng() % 4);
    for (int i = 0; i < flips; i++)
      buf[1 + resihp__fuzz_rng() % RESIHP__SAVE_HDR_LEN] ^=
          (uint8_t)(1u << (resihp__fuzz_rng() % 8));
    size_t n = 1 + RESIHP__SAVE_HDR_LEN;
    if (resihp__fuzz_rng() % 8 == 0)
      n = resihp__fuzz_rng() % n;
    return n;
  }
  static const char *const atoms[] = {
      "resihp-state 1\n", "resihp-state 2\n", "step=",  "steps=",
      "microbatches=",    "replicas=",        "shards=", "shape=",
      "0",                "1",                "7",       "64",
      "65",               "-1",               "-",       "0123456789abcdef",
      "0123456789ABCDEF", "99999999999999",   "\n",      "=",
      "x",                "\0",               " ",       "\xff"};
  buf[0] = 1;
  return 1 + resihp__fuzz_pad_long(
                 buf + 1,
                 resihp__fuzz_atoms(buf + 1, 0, cap - 1, atoms,
                                    sizeof(atoms) / sizeof(atoms[0]),
                                    resihp__fuzz_rng() % 30, 9),
                 cap - 1, 80);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_save", "corpus-save", 4096,
                           fuzz_generate, 20000);
}
#endif
