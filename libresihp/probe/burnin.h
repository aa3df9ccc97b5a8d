/* SPDX-License-Identifier: BSD-3-Clause */
/* Burn-in of a spare before it may replace a replica (issue 35): a probe
 * that passed says the node is up, not that it can train at the job's
 * pace. The burn-in runs the work a replica does on the CPU, bounded by a
 * deadline - a compute kernel (fixed work: the same on every node) and a
 * loopback all-reduce of the job's gradient size (two threads over TCP on
 * 127.0.0.1, the transport the replicas use) - and times it. The same
 * burn-in, run by the replicas' ranks as they first join, is the
 * reference: a spare much slower than the replicas' median, or one whose
 * burn-in fails (wrong sums, no finish before the deadline), is refused as
 * suspect (coord_spares.c).
 *
 * GPU nodes (burnin_gpu.c, built when configure finds nvcc): a GEMM on
 * every visible device and, with NCCL, a device all-reduce of the same
 * size across them, timed and judged the same way. Without a usable GPU
 * that part is skipped (gpus = 0), not failed; a spare is compared on the
 * GPU only when it and the replicas' reference both have GPU figures.
 */
#ifndef RESIHP_PROBE_BURNIN_H
#define RESIHP_PROBE_BURNIN_H

#include <stddef.h>
#include <stdint.h>

/* Largest all-reduce a burn-in runs: a bigger job is timed at this size
 * (its rate is what is compared). */
#define RESIHP__BURNIN_MAX_BYTES (64L << 20)
/* All-reduce size when the job's is not known yet. */
#define RESIHP__BURNIN_DEFAULT_BYTES (4L << 20)
/* Below this, a time is jitter, not speed (microseconds): on a busy node
 * a few-millisecond all-reduce varies several-fold with the scheduler. */
#define RESIHP__BURNIN_FLOOR_US 20000L
/* A spare slower than the replicas by more than this factor is refused. */
#define RESIHP__BURNIN_MAX_RATIO 3.0

typedef struct {
  long bytes;            /* all-reduce size */
  long compute_us;       /* the compute kernel */
  long allreduce_us;     /* the loopback all-reduce */
  int gpus;              /* CUDA devices burned in (0: none, skipped) */
  long gpu_gemm_us;      /* the GEMM, on the slowest device */
  long gpu_allreduce_us; /* the device all-reduce (0: no NCCL) */
  int failed;            /* 1: wrong result, deadline passed or no resources */
  char why[120];         /* when failed */
} resihp__burnin_t;

/* Run the burn-in with an all-reduce of `bytes` (clamped to
 * [4096, RESIHP__BURNIN_MAX_BYTES]); gives up at deadline_ms
 * (resihp__now_ms clock). Always fills *out; returns 0 when it passed,
 * RESIHP_ETIMEDOUT, RESIHP_EIO (a wrong result) or another negative code
 * (out->why says what). */
int resihp__burnin_run(long bytes, int64_t deadline_ms, resihp__burnin_t *out);

/* The GPU part (burnin_gpu.c; only with RESIHP_HAVE_CUDA_KERNELS): fills
 * out's gpu fields, returns 0 when it passed or there is no usable GPU
 * (gpus = 0), else an error with out->why. */
int resihp__burnin_gpu(long bytes, int64_t deadline_ms, resihp__burnin_t *out);

/* The reference of n burn-ins (failed ones skipped): the (lower) median
 * of each figure, the all-reduce scaled to the size of the first: of two
 * replicas, the faster, since a replica's burn-in is only ever slowed by
 * what else ran then. Returns the
 * number used (0: no reference). */
int resihp__burnin_reference(const resihp__burnin_t *v, int n,
                             resihp__burnin_t *ref);

enum {
  RESIHP__BURNIN_PASS = 0,
  RESIHP__BURNIN_SLOW,     /* slower than max_ratio x the reference */
  RESIHP__BURNIN_FAILED,   /* the burn-in itself failed */
  RESIHP__BURNIN_UNJUDGED, /* no reference yet */
};

/* The verdict on a spare's burn-in against the replicas' reference (NULL:
 * none yet). Times below RESIHP__BURNIN_FLOOR_US count as the floor, so
 * that jitter on a fast kernel is no slowness; the all-reduce is compared
 * per byte. why (may be NULL) says what was found, e.g. "compute 9.7x
 * slower than the replicas (481 ms vs 49 ms)". */
int resihp__burnin_judge(const resihp__burnin_t *spare,
                         const resihp__burnin_t *ref, double max_ratio,
                         char *why, size_t len);

/* "BYTES:COMPUTE_US:ALLREDUCE_US", with ":GPUS:GEMM_US:DEVICE_ALLREDUCE_US"
 * after it when GPUs were burned in, or "fail" for a failed burn-in, as
 * the wire carries it; and back (0, or RESIHP_EPROTO). */
void resihp__burnin_format(const resihp__burnin_t *b, char *out, size_t len);
int resihp__burnin_parse(const char *s, resihp__burnin_t *out);

#endif
