/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: which ranks of a failed replica died, from which of its
 * nodes died (a replica with no healthy spare left shrinks in place onto
 * its survivors' nodes: coord_shrink.c 11, launch.c). */
#ifndef RESIHP_TOOLS_RUN_SHRINK_PICK_H
#define RESIHP_TOOLS_RUN_SHRINK_PICK_H

/* A replica's step ran on nn nodes, rpn ranks on each, in Slurm's block
 * order (node i held ranks i*rpn .. i*rpn+rpn-1); down[i] says node i died.
 * Sets *dead to the bits of the ranks that died with them and returns the
 * number of nodes left; -1 (nothing set) when there is nothing to shrink:
 * no node died, every node did, fewer than 2 nodes, rpn < 1, or more than
 * 64 ranks. */
int resihp__run_shrink_pick(int nn, int rpn, const int *down,
                            unsigned long long *dead);

#endif
