/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of resihp-detect-eval's trace reader (tools/detect-eval/
 * traceio.c): users feed it their own logs. Beyond "does not crash": a
 * trace that is accepted has at least one rank, samples that describe
 * possible microbatches in non-decreasing iteration order, labels and
 * microbatch counts that name only ranks with samples, counts sorted by
 * iteration. libFuzzer entry plus the standalone driver, as
 * tests/fuzz/README says. */
#include "config.h"

#include "../../tools/detect-eval/eval.h"
#include "fuzz_driver.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN_MAX 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > IN_MAX)
    size = IN_MAX;
  FILE *fp = fmemopen((void *)data, size ? size : 1, "r");
  if (!fp)
    return 0;
  if (!size)
    fgetc(fp); /* fmemopen wants a non-empty buffer: read it empty */
  char err[600];
  ev_source_t *s = ev_trace_read(fp, "fuzz", err, sizeof(err));
  fclose(fp);
  if (!s) {
    if (!strstr(err, "fuzz")) {
      fprintf(stderr, "refusal without the input's name: %s\n", err);
      abort(); /* every refusal names the input */
    }
    return 0;
  }
  if (s->n_ranks < 1 || s->mb < 1)
    abort();
  for (size_t i = 0; i < s->nep; i++) {
    const ev_episode_t *e = &s->ep[i];
    if (e->rank >= s->n_ranks || e->end <= e->start ||
        (e->kind == EV_HANG) != (e->rank == -1) || e->rank < -1)
      abort();
    /* a ramp that holds reaches its factor inside the episode */
    if (e->hold &&
        (!(e->ramp_from > 0) || e->hold <= e->start || e->hold > e->end ||
         ev_episode_factor(e, e->hold) != e->factor))
      abort();
    if (e->kind == EV_HANG && s->n_iters < e->end)
      abort();
  }
  for (size_t i = 0; i < s->nmb; i++)
    if (s->mbl[i].rank >= s->n_ranks ||
        (i && s->mbl[i].iter < s->mbl[i - 1].iter))
      abort();
  uint32_t it, last = 0;
  const ev_sample_t *sm;
  size_t n;
  int first = 1;
  while (s->next(s, &it, &sm, &n) > 0) {
    if ((!first && it <= last) || !n)
      abort();
    first = 0;
    last = it;
    for (size_t i = 0; i < n; i++) {
      const resihp_workload_t *w = &sm[i].w;
      double n2 = w->tokens * w->tokens;
      if (sm[i].iter != it || sm[i].rank >= s->n_ranks || !(sm[i].t > 0) ||
          !isfinite(sm[i].t) || w->nseq < 1 || w->nseq > w->tokens ||
          w->sum_l2 > n2 * (1 + 1e-9) || w->sum_l2 < n2 / w->nseq * (1 - 1e-9))
        abort();
    }
  }
  ev_source_destroy(s);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"0 0 0 8192 20000000 7 98000.5\n",
                                      "1 1 0 100 10000 1 5\n",
                                      "2 3 1 4000 16000000 1 50000\n",
                                      "#! mb 8\n",
                                      "#! mb 3 0\n",
                                      "#! mb 2 1 4\n",
                                      "#! nofault\n",
                                      "#! slow 1 1 2 1.5 compute\n",
                                      "#! slow 0 0 9 2 comm ramp=1 eff=1.1\n",
                                      "#! stop 0 1 3\n",
                                      "#! hang 3 9\n",
                                      "#! slow 0 0 9 1.6 compute ramp=1 "
                                      "hold=5 eff=1.6\n",
                                      "hold=",
                                      "# comment\n",
                                      "\n",
                                      " ",
                                      "\t",
                                      "-1",
                                      "1e400",
                                      "nan",
                                      "4294967295",
                                      "99999999999999999999",
                                      "eff=",
                                      "ramp=0.5",
                                      "#!",
                                      "#! mb 1 9999999 1\n",
                                      "0 0 0 100 20000 1 5\n",
                                      "5 0 0 1 1 1 1\n"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 24, 12);
  return resihp__fuzz_pad_long(buf, n, cap, 200);
}

int main(int argc, char **argv) {
  resihp__fuzz_quiet();
  return resihp__fuzz_main(argc, argv, "fuzz_detect_trace",
                           "corpus-detect-trace", IN_MAX, gen, 20000);
}
#endif
