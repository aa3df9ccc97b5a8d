/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: what a replica whose step failed keeps until it is launched
 * again, for a shrink in place onto its surviving nodes (launch.c
 * shrink_in_place, coord_shrink.c 11), and its line in the launcher's
 * record (record.c), so that a launcher that takes over between the
 * failure and the relaunch goes on with the shrink instead of giving the
 * replica up. */
#ifndef RESIHP_TOOLS_RUN_SHRINK_REC_H
#define RESIHP_TOOLS_RUN_SHRINK_REC_H

#include <stddef.h>
#include <stdint.h>

#define RESIHP__RUN_SHRINK_NODES 64

typedef struct {
  /* the nodes of its last step once released (indices into the
   * launcher's node table) */
  int was[RESIHP__RUN_SHRINK_NODES], nwas;
  /* the node + 1 an injected kill-node of that step ran its command for
   * (0: none) */
  int killed;
  /* the ranks of that step its leader said it lost while their nodes may
   * live on (resihp__coord_lost_ranks at its failure; bits, 0: none) */
  unsigned long long lost;
  /* no spare, none of its nodes known dead yet, the replica able to
   * shrink: until when resihp-run waits for Slurm's verdict on them, and
   * when it asks next (resihp__now_ms; 0: not waiting) */
  int64_t wait, poll;
} resihp__run_shrink_t;

/* Replica r's line of the record, "S r killed lost wait nwas was...\n"
 * (poll is not kept: a launcher that takes over asks at once), into buf
 * of cap bytes: its length, or -1 when it does not fit. */
int resihp__run_shrink_format(int r, const resihp__run_shrink_t *s, char *buf,
                              size_t cap);

/* Such a line (without its newline) of a job of R replicas and nnodes
 * nodes: 0 with *r and *s set (poll 0), or -1 with nothing set when it is
 * not one: a field that is not a decimal number or out of range (r,
 * killed > nnodes, a negative wait, nwas above 64 or nnodes, a node not
 * in the table), missing or trailing. */
int resihp__run_shrink_parse(const char *line, int R, int nnodes, int *r,
                             resihp__run_shrink_t *s);

#endif
