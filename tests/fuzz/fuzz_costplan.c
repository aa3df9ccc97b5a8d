/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the cost plan a START of a free run by cost carries
 * (cby= cslow= cmod=, control/costplan.c), parsed by every rank and by a
 * restored coordinator. Beyond "does not crash": an accepted plan has
 * 1..cap distinct contributors below max_id, multipliers >= 1 and models
 * that resihp_model_ok accepts, all finite; written back it parses to the
 * same bits; and the owners it gives any workloads are its contributors.
 * libFuzzer entry plus the standalone driver, as tests/fuzz/README says:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -DRESIHP_FUZZ_LIBFUZZER -Ibuild -Ilibresihp/include \
 *     tests/fuzz/fuzz_costplan.c tests/fuzz/fuzz_driver.c \
 *     build/libresihp/.libs/libresihp-internal.a -lm -lpthread \
 *     -o fuzz_costplan_libfuzzer */
#include "config.h"

#include "../../libresihp/control/costplan.h"
#include "fuzz_driver.h"

#include <resihp/error.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_ 8192
#define M 7

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[LINE_MAX_ + 1];
  if (size < 1)
    return 0;
  uint8_t sel = data[0];
  int K = 1 + sel % 3, cap = 1 + sel / 3 % 6, max_id = 1 + sel / 18 % 12;
  data++, size--;
  size = resihp__fuzz_cstr_in(in, sizeof(in), data, size);
  resihp__costplan_t p, q;
  if (resihp__costplan_init(&p, cap, K) || resihp__costplan_init(&q, cap, K))
    abort();
  /* the member list the receiver holds ("cby=list"): 0, 2, 4, ... */
  int list[6], nlist = (max_id + 1) / 2 < cap ? (max_id + 1) / 2 : cap;
  for (int i = 0; i < nlist; i++)
    list[i] = 2 * i;
  int rc = resihp__costplan_parse(in, max_id, &p, list, nlist);
  if (rc) {
    if (p.nc != 0 ||
        (rc != RESIHP_ENOENT && rc != RESIHP_EPROTO && rc != RESIHP_ENOMEM))
      abort();
    goto out;
  }
  if (p.nc < 1 || p.nc > cap)
    abort();
  for (int i = 0; i < p.nc; i++) {
    if (p.contrib[i] < 0 || p.contrib[i] >= max_id || !(p.slow[i] >= 1) ||
        !isfinite(p.slow[i]))
      abort();
    for (int j = 0; j < i; j++)
      if (p.contrib[i] == p.contrib[j])
        abort();
  }
  for (int k = 0; k < K; k++)
    if (!resihp_model_ok(&p.model[k]))
      abort();
  /* back and forth, with and without the receiver's list: the same bits */
  for (int with = 0; with < 2; with++) {
    resihp__wire_buf_t b;
    resihp__wire_buf_init(&b);
    resihp__wire_buf_printf(&b, "START");
    resihp__costplan_put(&b, &p, with ? list : NULL, with ? nlist : 0);
    if (b.err ||
        resihp__costplan_parse(b.s, max_id, &q, with ? list : NULL,
                               with ? nlist : 0) ||
        q.nc != p.nc ||
        memcmp(q.contrib, p.contrib, sizeof(int) * (size_t)p.nc) ||
        memcmp(q.slow, p.slow, sizeof(double) * (size_t)p.nc) ||
        memcmp(q.model, p.model, sizeof(resihp_model_t) * (size_t)K))
      abort();
    resihp__wire_buf_free(&b);
  }
  /* any workloads: owners among the contributors, or a refusal */
  resihp_workload_t w[M];
  double cost[M];
  int pick[M], owner[M];
  for (int mb = 0; mb < M; mb++) {
    double n = (double)(1 + mb * 97 + sel);
    w[mb] = (resihp_workload_t){n, n * n, 1};
  }
  if (!resihp__costplan_owners(&p, w, M, cost, pick, owner))
    for (int mb = 0; mb < M; mb++) {
      int found = 0;
      for (int i = 0; i < p.nc; i++)
        found |= owner[mb] == p.contrib[i];
      if (!found || !(cost[mb] > 0))
        abort();
    }
out:
  resihp__costplan_free(&p);
  resihp__costplan_free(&q);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "START step=3 ",
      " cby=",
      " cslow=",
      " cmod=",
      "0",
      "1:2",
      "3ff0000000000000",
      "4000000000000000",
      "7ff0000000000000",
      "7ff8000000000000",
      "bff0000000000000",
      "3FF0000000000000",
      "0000000000000000",
      "408f400000000000",
      ":",
      "3ff00000000000",
      "3ff0000000000000:3ff0000000000000:3ff0000000000000:3ff0000000000000:"
      "3ff0000000000000:3ff0000000000000:3ff0000000000000",
      " ",
      "-1",
      "="};
  buf[0] = (uint8_t)resihp__fuzz_rng();
  size_t n =
      resihp__fuzz_atoms(buf, 1, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         1 + resihp__fuzz_rng() % 40, 16);
  return resihp__fuzz_pad_long(buf, n, cap, 50);
}

int main(int argc, char **argv) {
  resihp__fuzz_quiet();
  return resihp__fuzz_main(argc, argv, "fuzz_costplan", "corpus-costplan",
                           LINE_MAX_ + 1, gen, 20000);
}
#endif
