/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of a GO's member list (recovery/job_members.h: the whole list,
 * or its change since the epoch a rank holds), libFuzzer-style, with the
 * standalone driver of fuzz_driver.h for `make check`.
 *
 * The input is a GO line. Invariants beyond "does not crash": an accepted
 * list has strictly increasing ids below the bound and a terminated
 * address for each; an accepted change has exactly n= members, keeps no
 * id of gone= unless add= brings it back, and the members it kept from the
 * held list keep their addresses. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/control/wire.h"
#include "../../libresihp/recovery/job_members.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The list a rank holds: epoch 7, replicas 0 2 3 5 8. */
static const int held_ids[] = {0, 2, 3, 5, 8};
#define NHELD 5

static void check_list(const int *ids, resihp__job_ep_t *eps, int n) {
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= RESIHP__JOB_MAX_REPLICA_ID ||
        (i && ids[i] <= ids[i - 1]) ||
        !memchr(eps[i], '\0', sizeof(resihp__job_ep_t)) || !eps[i][0])
      abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  resihp__job_ep_t held_eps[NHELD];
  for (int i = 0; i < NHELD; i++)
    snprintf(held_eps[i], sizeof(held_eps[i]), "10.0.0.%d:%d", held_ids[i],
             1000 + i);
  int *ids = NULL, n = -1;
  resihp__job_ep_t *eps = NULL;
  char *v = malloc(size + 1);
  if (v && !resihp__wire_get(in, "members", v, size + 1) &&
      !resihp__job_members_parse(v, (int)(size % 3), &ids, &eps, &n)) {
    check_list(ids, eps, n);
    free(ids);
    free(eps);
  }
  ids = NULL;
  eps = NULL;
  if (!resihp__job_members_delta(in, 7, held_ids,
                                 (const resihp__job_ep_t *)held_eps, NHELD,
                                 (int)(size % 3), &ids, &eps, &n)) {
    long want = -1;
    if (resihp__wire_get_long(in, "n", &want) || want != n)
      abort();
    check_list(ids, eps, n);
    /* a kept member (not in add=) keeps its held address */
    for (int i = 0; i < n; i++)
      for (int h = 0; h < NHELD; h++)
        if (ids[i] == held_ids[h] && strcmp(eps[i], held_eps[h])) {
          char key[24];
          snprintf(key, sizeof(key), "%d@", ids[i]);
          if (!strstr(in, key))
            abort();
        }
    free(ids);
    free(eps);
  }
  free(v);
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* GO lines: keys, ids (held and not), addresses, separators, junk. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"GO step=3 epoch=8 new=1",
                                      " base=7",
                                      " base=6",
                                      " n=",
                                      " n=4",
                                      " n=5",
                                      " gone=",
                                      " add=",
                                      " members=",
                                      "0",
                                      "2",
                                      "3",
                                      "5",
                                      "8",
                                      "9",
                                      "1000000",
                                      "-1",
                                      ":",
                                      ",",
                                      "@",
                                      "/",
                                      "10.0.0.9:77",
                                      "a:1/b:2",
                                      "1@x:1",
                                      "9@h:9",
                                      "3@h:3",
                                      "  ",
                                      "\xff",
                                      "99999999999"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 20, 11);
  return resihp__fuzz_pad_long(buf, n, cap, 60);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_members", "corpus-members", 8192,
                           fuzz_generate, 20000);
}
#endif
