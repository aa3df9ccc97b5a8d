/* SPDX-License-Identifier: BSD-3-Clause */
/* Optional PMIx wire-up inside one replica's job step (srun --mpi=pmix):
 * rank 0 publishes its address with PMIx_Put/Commit, one collecting
 * PMIx_Fence (bounded by PMIX_TIMEOUT) spreads it, the others PMIx_Get it.
 * That is the only PMIx traffic: nothing blocks on PMIx after start-up (a
 * fence would hang forever once a node of the step has died).
 *
 * Then every rank calls PMIx_Finalize (no barrier: PMIx only tells its
 * local server). A rank that dies later is then an ordinary task exit for
 * Slurm, not a lost PMIx client: Slurm 22.05's PMIx plugin answers a lost
 * client from its error handler with a synchronous kill of the whole step
 * (slurm_kill_job_step, from inside the slurmstepd that is tearing the
 * step down), measured on the lab cluster to log "_errhandler" on every
 * rank death and suspected of the late reaps that drained healthy nodes
 * ("Kill task failed"). resihp-run cancels a failed replica's step itself
 * (and the replica's other ranks leave on their own), so nothing relies
 * on Slurm's kill. */
#ifndef RESIHP_RECOVERY_PMIX_WIREUP_H
#define RESIHP_RECOVERY_PMIX_WIREUP_H

#include <stddef.h>

/* RESIHP_ENOTSUP when the step was not started with PMIx (no PMIX_RANK),
 * else 0 with *rank and *size set, or a negative code. */
int resihp__pmix_init(int *rank, int *size);
/* Rank 0 passes its address in ep; the others get it there. */
int resihp__pmix_leader_ep(int rank, char *ep, size_t cap);

#endif
