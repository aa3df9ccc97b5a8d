/* SPDX-License-Identifier: BSD-3-Clause */
/* Optional PMIx wire-up inside one replica's job step (srun --mpi=pmix):
 * rank 0 publishes its address with PMIx_Put/Commit, one collecting
 * PMIx_Fence (bounded by PMIX_TIMEOUT) spreads it, the others PMIx_Get it.
 * That is the only PMIx traffic: nothing blocks on PMIx after start-up
 * (a fence would hang forever once a node of the step has died), and
 * PMIx_Finalize is not called for the same reason. */
#ifndef RESIHP_RECOVERY_PMIX_WIREUP_H
#define RESIHP_RECOVERY_PMIX_WIREUP_H

#include <stddef.h>

/* RESIHP_ENOTSUP when the step was not started with PMIx (no PMIX_RANK),
 * else 0 with *rank and *size set, or a negative code. */
int resihp__pmix_init(int *rank, int *size);
/* Rank 0 passes its address in ep; the others get it there. */
int resihp__pmix_leader_ep(int rank, char *ep, size_t cap);

#endif
