/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of a GO's partitions of the layers (lparts=, parsed by
 * resihp__lparts_parse in recovery/layer_groups.c; written by the
 * coordinator, control/coord_layers.c), libFuzzer-style, with the
 * standalone driver of fuzz_driver.h for `make check`.
 *
 * The input is the list; the members are the ids 0, 2, 4, ..., 18, the
 * model 20 layers over 3 ranks. Invariants beyond "does not crash": an
 * accepted list gives partitions of 1 to 3 ranks (fewer: a replica that
 * shrank) from 0 to 20, each member one
 * of them, every listed member the partition it was listed with, the
 * others the first; the runs of them tile 0..20, every rank of each
 * holding a whole number of runs; a refused one leaves nothing; the
 * most ranks of them is what resihp__lparts_max_ranks scans. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/recovery/layer_groups.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NM 10
#define L 20
#define K 3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  int ids[NM], of[NM];
  for (int i = 0; i < NM; i++)
    ids[i] = 2 * i;
  resihp__partition_t *parts = NULL;
  int np = -1;
  if (resihp__lparts_parse(in, L, K, ids, NM, &parts, &np, of)) {
    if (parts || np != 0)
      abort();
    free(in);
    return 0;
  }
  if (np < 1 || np > NM)
    abort();
  int most = 0;
  for (int d = 0; d < np; d++) {
    const resihp__partition_t *p = &parts[d];
    if (p->k < 1 || p->k > K || p->bounds[0] != 0 || p->bounds[p->k] != L)
      abort();
    most = p->k > most ? p->k : most;
    for (int k = 0; k < p->k; k++)
      if (p->bounds[k] >= p->bounds[k + 1])
        abort();
  }
  /* the scan without parsing (a shrunk replica's columns, job_step.c)
   * says the same */
  if (resihp__lparts_max_ranks(in, K) != most)
    abort();
  /* the entry each member was listed in: count the '@' lists' ids */
  for (int i = 0; i < NM; i++) {
    if (of[i] < 0 || of[i] >= np)
      abort();
    char want[16];
    snprintf(want, sizeof(want), "%d", ids[i]);
    int listed = 0;
    const char *e = in;
    for (int d = 0; d < np; d++) {
      const char *next = strchr(e, ',');
      size_t len = next ? (size_t)(next - e) : strlen(e);
      const char *at = memchr(e, '@', len);
      for (const char *q = at; q && q < e + len;) {
        q++;
        size_t n = strcspn(q, ":,");
        /* (by value: the parser takes "06" for 6) */
        size_t z = strspn(q, "0");
        z = z < n ? z : n ? n - 1 : 0;
        if (n - z == strlen(want) && !strncmp(q + z, want, n - z)) {
          if (of[i] != d)
            abort();
          listed = 1;
        }
        q += n;
        if (q >= e + len || *q != ':')
          break;
      }
      e = next ? next + 1 : e + len;
    }
    if (!listed && of[i] != 0)
      abort();
  }
  resihp__runmap_t m;
  if (resihp__runmap_build(&m, L, parts, np) || m.first[0] != 0 ||
      m.first[m.nruns] != L)
    abort();
  for (int d = 0; d < np; d++)
    for (int k = 0; k < parts[d].k; k++) {
      int r0, r1;
      if (resihp__runmap_rank_runs(&m, &parts[d], k, &r0, &r1) || r0 >= r1 ||
          m.first[r0] != parts[d].bounds[k] ||
          m.first[r1] != parts[d].bounds[k + 1])
        abort();
    }
  resihp__runmap_free(&m);
  for (int d = 0; d < np; d++)
    resihp__partition_free(&parts[d]);
  free(parts);
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Lists of cut points, members and junk. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "4:9", "7:13", "1:19", "4:9@2", "7:13@4:6", ",",          ",",  "@",
      "@0",  "@18",  "@3",   ":",     "0",        "20",         "19", "6",
      "2:2", "@4:4", "-1",   " ",     "\xff",     "99999999999",
      ",@2", "11@4", "4:9:12"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 10, 9);
  return resihp__fuzz_pad_long(buf, n, cap, 80);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_lparts", "corpus-lparts", 4096,
                           fuzz_generate, 20000);
}
#endif
