/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-pipeline-trainer: a small but real pipeline-parallel trainer on
 * the CPU, for sharded replicas (resihp-run --ranks-per-replica K).
 *
 * Model. Token sequences (the synthetic data of contrib/trainer, see
 * contrib/common/trainer-common.h) go through an embedding table (V x D)
 * averaged over the sequence, L tanh layers (the first D -> H, the others
 * H -> H) and a softmax over C classes; SGD with momentum. The model is
 * L + 2 units, the layers that partitioning moves: unit 0 the embedding,
 * units 1..L the hidden layers, unit L+1 the classifier (its weights and
 * the softmax loss).
 *
 * Partition. K stages own contiguous runs of units, at least one each.
 * The run lengths come from the planner (resihp_planner_partition, tp 1,
 * equal stage speeds) with each unit's cost taken from its arithmetic per
 * microbatch and its memory from its parameters; --partition a,b,... sets
 * them instead; --partition-of R=a:b:... gives replica R its own (the
 * layer-keyed groups of resihp_job(3) let replicas differ: the result is
 * the same; its state is then declared unit by unit,
 * resihp_job_set_layer_state, so that a replacement of replica R catches
 * up unit by unit from the stages of the others). Stage k is rank k of a
 * replica (resihp_job_shard).
 * --move-layers lets the coordinator move units between the stages of a
 * replica at a step boundary, off a slow stage and back
 * (resihp_job_set_layers_movable): the stages then send the units that
 * change hands to their new stage (move_units) and train on. Its state is
 * then declared unit by unit too, so that a replica that lost a stage
 * with no spare left can shrink: resihp-run relaunches it as fewer
 * stages on its survivors' nodes, which hold the coordinator's partition
 * (resihp_job_shrunk_partition) and catch every unit up from the others.
 *
 * Schedule. GPipe: a stage runs the forward pass of all its microbatches
 * (receiving each input from stage k-1 and sending its output to k+1 over
 * the replica communicator, resihp_send/resihp_recv), keeping their
 * activations, then the backward passes in reverse order (the gradients
 * travel k+1 -> k). Each stage accumulates its own parameters' gradients
 * per microbatch in int64 fixed point (the last stage also the loss) and
 * exchanges them once per step in its data-parallel group
 * (resihp_job_allreduce, the K groups concurrently). Microbatches handed
 * over by RESIHP_EREASSIGNED run through the pipeline as one more pass:
 * every stage of the replica gets the same st.extra.
 *
 * Determinism. A unit's arithmetic does not depend on where the stage
 * boundaries are (activations cross them as float bits), and fixed point
 * sums are exact, so the parameters are bitwise the same whatever the
 * partition, the number of stages and replicas, and whatever failed. The
 * program prints per stage the FNV-1a 64 checksum of its state (each
 * unit's parameters then momentum, units in order) and, in --reference
 * mode, a model checksum over all units that does not depend on K. With
 * --partition-of the result lists every unit's checksum instead (one per
 * unit, '/' between them: the same text whatever the partition).
 * --float exchanges float32 gradients (resihp_job_allreduce_as) instead:
 * faster to reduce, but not reproducible across failures.
 *
 * Modes.
 *   (default)       under resihp-run: rank k of each replica trains
 *                   stage k, K = resihp_job_shards.
 *   --reference     no job: one process runs the K stages of one replica
 *                   one after the other over all M microbatches, with the
 *                   same arithmetic, and prints "final result: c0/c1/..."
 *                   as resihp-run reports a replica's result.
 *   --plain DIR     the baseline without fault tolerance: R*K tasks of one
 *                   plain srun step (task t = replica t/K, stage t%K) meet
 *                   through files in DIR, exchange gradients over plain
 *                   communicators (unprotected) and print the step time.
 * --stages K gives K where no job does (--reference, --plain) and is checked
 * against the job's otherwise; --mb-ms N makes each stage sleep after its
 * forward pass for the simulated compute of the microbatch, N ms for a
 * mean one and scaled by its workload (a heavier model, for demos) and by
 * the stage's units (N ms for L+2 units / K, as many as every unit's
 * share: a stage holding more units computes longer, as with real layers);
 * --data and --tokens pick the data (contrib/common/trainer-data.h).
 */
#include "../common/trainer-common.h"
#include "../common/trainer-data.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 64
#define MAX_UNITS (MAX_LAYERS + 2)

typedef struct {
  int V, D, H, L, C, B, M;
  int K; /* --stages; 0: the job's shards (1 without a job) */
  long steps;
  double lr, momentum;
  uint64_t seed;
  int mb_ms, quiet, print_every, use_float, reference;
  trainer_data_t data; /* --data, --tokens */
  trainer_cost_t cost; /* from --mb-ms */
  int maxs;            /* the most sequences in a microbatch */
  const char *plain_dir;
  int part[MAX_UNITS], npart; /* --partition */
  /* --partition-of R=c1:c2:...: replica pof_r's own (-1: none) */
  int pof[MAX_UNITS], npof, pof_r;
  int move_layers; /* --move-layers: the coordinator may repartition */
} cfg_t;

/* A rank's result (resihp_job_finish: at most 200 characters): with
 * --partition-of, up to RESULT_UNITS units' checksums of 17 characters. */
enum { RESULT_UNITS = 11, RESULT_MAX = 17 * RESULT_UNITS + 1 };

/* One unit: parameters p and momentum v (one allocation), the gradient g
 * of the microbatch being differentiated, and where its gradient lies in
 * the stage's accumulator. Units 1.. hold W (out x in) then b (out). */
typedef struct {
  int in, out;
  size_t n;
  float *p, *v, *g;
  size_t off;
} unit_t;

/* One microbatch in flight on a stage: its data (regenerated on every
 * stage from (seed, step, mb): cheaper than shipping the tokens) and the
 * activations at the stage's unit boundaries. */
typedef struct {
  int mb;
  trainer_mb_t d;
  float *act;
  double secs;
} slot_t;

typedef struct {
  const cfg_t *c;
  unit_t *units; /* the model's units; [u0, u1) are this stage's */
  int k, K, u0, u1, fb;
  size_t aoff[MAX_UNITS + 1]; /* boundary u0 + i at slot.act + aoff[i] */
  size_t nacc; /* the stage's parameters (+ 1, the loss, on the last) */
  int64_t *acc;
  float *facc;
  slot_t *slots;
  int nslots;
  float *d[2], *drecv;  /* gradient scratch, B x widest boundary */
  float *da;            /* one sequence's, widest boundary */
  trainer_mb_t scratch; /* for the step's sequence count */
  trainer_mbstats_t times;
  resihp_job_t *job;
  /* --mb-ms for this stage's units: the simulated compute is each
   * unit's, so a stage holding more units sleeps longer */
  trainer_cost_t cost;
} stage_t;

static void oom(void) {
  fprintf(stderr, "resihp-pipeline-trainer: out of memory (smaller "
                  "--vocab/--embed/--hidden/--batch/--tokens?)\n");
  exit(1);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p)
    oom();
  return p;
}

static int nunits(const cfg_t *c) {
  return c->L + 2;
}

/* Width of boundary j, the input of unit j: tokens before the embedding,
 * D after it, H after each hidden layer, and after the classifier the
 * gradient of the loss by the logits (C), which its backward pass needs. */
static int bwidth(const cfg_t *c, int j) {
  return j == 0 ? 0 : j == 1 ? c->D : j <= c->L + 1 ? c->H : c->C;
}

static size_t unit_params(const cfg_t *c, int u) {
  if (u == 0)
    return (size_t)c->V * c->D;
  return (size_t)bwidth(c, u + 1) * bwidth(c, u) + bwidth(c, u + 1);
}

/* A unit's gradient elements in the stage's accumulator: its parameters,
 * and the last unit's then the loss (what resihp_job_set_layers says). */
static size_t unit_grads(const cfg_t *c, int j) {
  return unit_params(c, j) + (j == nunits(c) - 1);
}

/* Each unit from a stream of its own, so that the initial model does not
 * depend on which units a process holds. */
static void init_unit(const cfg_t *c, unit_t *u, int j) {
  u->in = bwidth(c, j);
  u->out = bwidth(c, j + 1);
  u->n = unit_params(c, j);
  u->p = xcalloc(2 * u->n, sizeof(float));
  u->v = u->p + u->n;
  u->g = xcalloc(u->n, sizeof(float));
  uint64_t r = (c->seed ^ 0x1234) + 0x9e3779b97f4a7c15ULL * (uint64_t)(j + 1);
  size_t nw = j == 0 ? u->n : (size_t)u->out * u->in;
  /* uniform with variance 1/fan_in keeps tanh out of saturation */
  float scale = j == 0 ? 1.0f : (float)(2 * sqrt(3.0 / u->in));
  for (size_t i = 0; i < nw; i++) {
    double x = (double)(trainer_splitmix(&r) >> 11) / 9007199254740992.0;
    u->p[i] = (float)(x - 0.5) * scale;
  }
}

static void free_unit(unit_t *u) {
  free(u->p);
  free(u->g);
}

/* ---- the units' arithmetic (the same whatever the partition) ---------- */

static void gen_data(const cfg_t *c, slot_t *sl, long s, int mb) {
  double t0 = trainer_now_s();
  sl->mb = mb;
  trainer_data_draw(&c->data, s, mb, &sl->d);
  sl->secs = trainer_now_s() - t0;
}

/* A unit over the sequences of a microbatch, from the layers of
 * trainer-common.h. in and out are the boundaries around it (nseq x width);
 * after the classifier, out holds dloss/dlogits. */
static double unit_fwd(const cfg_t *c, const unit_t *u, int j, const slot_t *sl,
                       const float *in, float *out) {
  double loss = 0;
  const float *bias = u->p + (size_t)u->out * u->in;
  for (int b = 0; b < sl->d.nseq; b++) {
    float *y = out + (size_t)b * u->out;
    if (j == 0) {
      trainer_embed_mean(u->p, c->D, sl->d.tok + sl->d.off[b], sl->d.len[b], y);
      continue;
    }
    const float *x = in + (size_t)b * u->in;
    trainer_dense(u->p, bias, u->in, u->out, x, y, j < nunits(c) - 1);
    if (j == nunits(c) - 1)
      loss += trainer_softmax_xent(y, u->out, sl->d.cls[b]);
  }
  return loss;
}

/* Adds the unit's gradient to u->g; din gets the gradient at its input
 * (not for the embedding). dout is unused after the classifier, whose out
 * is already dloss/dlogits. da: scratch of the unit's output width. */
static void unit_bwd(const cfg_t *c, unit_t *u, int j, const slot_t *sl,
                     const float *in, const float *out, const float *dout,
                     float *din, float *da) {
  float *gb = u->g + (size_t)u->out * u->in;
  for (int b = 0; b < sl->d.nseq; b++) {
    const float *y = out + (size_t)b * u->out, *dy = da;
    if (j == 0) {
      trainer_embed_mean_bwd(u->g, c->D, sl->d.tok + sl->d.off[b], sl->d.len[b],
                             dout + (size_t)b * c->D);
      continue;
    }
    if (j == nunits(c) - 1)
      dy = y;
    else
      trainer_tanh_bwd(y, dout + (size_t)b * u->out, u->out, da);
    trainer_dense_bwd(u->p, u->in, u->out, in + (size_t)b * u->in, dy, u->g, gb,
                      din + (size_t)b * u->in);
  }
}

/* ---- a stage ---------------------------------------------------------- */

static float *bnd(stage_t *st, slot_t *sl, int j) {
  return sl->act + st->aoff[j - st->u0];
}

/* What crosses boundary j for the microbatch in sl: its data is already
 * drawn (every stage draws it, cheaper than shipping it). */
static size_t bnd_bytes(const stage_t *st, const slot_t *sl, int j) {
  return (size_t)sl->d.nseq * bwidth(st->c, j) * sizeof(float);
}

/* Stage k of K over units [u0, u1) of units (allocated by the caller). */
static void stage_init(stage_t *st, const cfg_t *c, unit_t *units, int k, int K,
                       int u0, int u1, resihp_job_t *job) {
  *st = (stage_t){.c = c,
                  .units = units,
                  .k = k,
                  .K = K,
                  .u0 = u0,
                  .u1 = u1,
                  .job = job,
                  .fb = resihp_fixed_frac_bits(),
                  .cost = c->cost};
  st->cost.ms_per_work *= (double)(u1 - u0) * K / nunits(c);
  int wmax = 0;
  for (int j = u0; j <= u1; j++) {
    st->aoff[j - u0 + 1] = st->aoff[j - u0] + (size_t)c->maxs * bwidth(c, j);
    if (bwidth(c, j) > wmax)
      wmax = bwidth(c, j);
  }
  for (int j = u0; j < u1; j++) {
    units[j].off = st->nacc;
    st->nacc += unit_grads(c, j);
  }
  st->acc = xcalloc(st->nacc, sizeof(int64_t));
  st->facc = xcalloc(st->nacc, sizeof(float));
  st->d[0] = xcalloc((size_t)c->maxs * wmax, sizeof(float));
  st->d[1] = xcalloc((size_t)c->maxs * wmax, sizeof(float));
  st->drecv = xcalloc((size_t)c->maxs * wmax, sizeof(float));
  if (trainer_mb_init(&st->scratch, &c->data))
    oom();
  st->da = xcalloc((size_t)wmax, sizeof(float));
}

static void stage_free(stage_t *st) {
  for (int i = 0; i < st->nslots; i++) {
    trainer_mb_free(&st->slots[i].d);
    free(st->slots[i].act);
  }
  trainer_mb_free(&st->scratch);
  trainer_mbstats_free(&st->times);
  free(st->slots);
  free(st->acc);
  free(st->facc);
  free(st->d[0]);
  free(st->d[1]);
  free(st->drecv);
  free(st->da);
}

/* GPipe keeps every microbatch of a pass in flight. */
static void stage_slots(stage_t *st, int n) {
  if (n <= st->nslots)
    return;
  slot_t *slots = realloc(st->slots, (size_t)n * sizeof(slot_t));
  if (!slots) {
    fprintf(stderr,
            "resihp-pipeline-trainer: out of memory for %d "
            "microbatches in flight\n",
            n);
    exit(1);
  }
  st->slots = slots;
  const cfg_t *c = st->c;
  for (int i = st->nslots; i < n; i++) {
    slot_t *sl = &st->slots[i];
    if (trainer_mb_init(&sl->d, &c->data))
      oom();
    sl->act = xcalloc(st->aoff[st->u1 - st->u0 + 1], sizeof(float));
  }
  st->nslots = n;
}

static void stage_zero(stage_t *st) {
  memset(st->acc, 0, st->nacc * sizeof(int64_t));
  memset(st->facc, 0, st->nacc * sizeof(float));
}

static void accumulate(stage_t *st, size_t off, const float *g, size_t n) {
  if (st->c->use_float)
    for (size_t i = 0; i < n; i++)
      st->facc[off + i] += g[i];
  else
    resihp_fixed_accumulate_float(st->acc + off, g, n, st->fb);
}

/* Forward pass through the stage of the microbatch drawn into sl
 * (gen_data); its input (boundary u0) is already in the slot unless the
 * stage starts with the embedding. */
static void stage_fwd(stage_t *st, slot_t *sl) {
  const cfg_t *c = st->c;
  double t0 = trainer_now_s();
  for (int j = st->u0; j < st->u1; j++) {
    double loss = unit_fwd(c, &st->units[j], j, sl, j ? bnd(st, sl, j) : NULL,
                           bnd(st, sl, j + 1));
    if (j == nunits(c) - 1) {
      float lf = (float)loss;
      accumulate(st, st->nacc - 1, &lf, 1);
    }
  }
  trainer_compute_sleep(&st->cost, &sl->d);
  sl->secs += trainer_now_s() - t0;
}

/* Backward pass: dout is the gradient at boundary u1 (NULL on the last
 * stage); returns the gradient at boundary u0 (NULL on the first stage),
 * valid until the next call. Adds the units' gradients to the stage's
 * accumulator. */
static const float *stage_bwd(stage_t *st, slot_t *sl, const float *dout) {
  const cfg_t *c = st->c;
  double t0 = trainer_now_s();
  const float *d = dout;
  int w = 0;
  for (int j = st->u1 - 1; j >= st->u0; j--) {
    unit_t *u = &st->units[j];
    float *din = j == 0 ? NULL : st->d[w];
    w ^= 1;
    memset(u->g, 0, u->n * sizeof(float));
    unit_bwd(c, u, j, sl, bnd(st, sl, j), bnd(st, sl, j + 1), d, din, st->da);
    accumulate(st, u->off, u->g, u->n);
    d = din;
  }
  sl->secs += trainer_now_s() - t0;
  trainer_mbstats_add(&st->times, sl->secs);
  if (st->job)
    resihp_job_report_microbatch(st->job, sl->mb, (double)sl->d.tokens,
                                 sl->d.sum_l2, sl->d.nseq, sl->secs);
  return d;
}

/* SGD with momentum from the summed gradient of step s; returns the mean
 * loss per sequence on the last stage. */
static double stage_apply(stage_t *st, long s) {
  const cfg_t *c = st->c;
  double n = trainer_data_step_seqs(&c->data, s, c->M, &st->scratch);
  for (int j = st->u0; j < st->u1; j++) {
    unit_t *u = &st->units[j];
    if (c->use_float)
      for (size_t i = 0; i < u->n; i++)
        u->g[i] = (float)(st->facc[u->off + i] / n);
    else
      resihp_fixed_to_float(u->g, st->acc + u->off, u->n, st->fb, n);
    for (size_t i = 0; i < u->n; i++) {
      u->v[i] = (float)c->momentum * u->v[i] + u->g[i];
      u->p[i] -= (float)c->lr * u->v[i];
    }
  }
  float loss = 0;
  if (st->u1 < nunits(c))
    ; /* the loss is the last stage's */
  else if (c->use_float)
    loss = (float)(st->facc[st->nacc - 1] / n);
  else
    resihp_fixed_to_float(&loss, st->acc + st->nacc - 1, 1, st->fb, n);
  return loss;
}

/* The stage's state as the job copies it: per unit, parameters then
 * momentum. */
static int stage_state(const stage_t *st, resihp_job_buf_t *bufs) {
  int n = 0;
  for (int j = st->u0; j < st->u1; j++) {
    bufs[n++] = (resihp_job_buf_t){st->units[j].p, st->units[j].n * 4};
    bufs[n++] = (resihp_job_buf_t){st->units[j].v, st->units[j].n * 4};
  }
  return n;
}

/* The stage's state by unit (its two buffers each) into ls, over bufs:
 * the number of units. */
static int stage_layer_state(const stage_t *st, resihp_job_buf_t *bufs,
                             resihp_job_layer_state_t *ls) {
  int n = stage_state(st, bufs) / 2;
  for (int j = 0; j < n; j++)
    ls[j] = (resihp_job_layer_state_t){bufs + 2 * j, 2};
  return n;
}

static uint64_t units_fnv(uint64_t h, const unit_t *units, int u0, int u1) {
  for (int j = u0; j < u1; j++)
    h = trainer_fnv1a_more(h, units[j].p, 2 * units[j].n * sizeof(float));
  return h;
}

/* A stage's result: its units' checksum; with --partition-of (replicas
 * of different partitions) each unit's, joined by '/', so that a
 * replica's result "r0/r1/..." is the same whatever its partition. */
static void stage_result(const cfg_t *c, const unit_t *units, int u0, int u1,
                         char *out, size_t cap) {
  if (!c->npof && !c->move_layers) {
    snprintf(out, cap, "%016llx",
             (unsigned long long)units_fnv(TRAINER_FNV_INIT, units, u0, u1));
    return;
  }
  size_t n = 0;
  out[0] = '\0';
  for (int j = u0; j < u1 && n < cap; j++)
    n += (size_t)snprintf(
        out + n, cap - n, "%s%016llx", j > u0 ? "/" : "",
        (unsigned long long)units_fnv(TRAINER_FNV_INIT, units, j, j + 1));
}

/* One GPipe pass of n microbatches through a stage of a real pipeline:
 * 0 or the error of the replica communicator. */
static int pipe_pass(stage_t *st, resihp_comm_t *pp, long s, const int *mbs,
                     int n) {
  int rc, first = st->k == 0, last = st->k == st->K - 1;
  stage_slots(st, n);
  for (int i = 0; i < n; i++) {
    slot_t *sl = &st->slots[i];
    gen_data(st->c, sl, s, mbs[i]);
    if (!first && (rc = resihp_recv(pp, st->k - 1, bnd(st, sl, st->u0),
                                    bnd_bytes(st, sl, st->u0))))
      return rc;
    stage_fwd(st, sl);
    if (!last && (rc = resihp_send(pp, st->k + 1, bnd(st, sl, st->u1),
                                   bnd_bytes(st, sl, st->u1))))
      return rc;
  }
  for (int i = n - 1; i >= 0; i--) {
    slot_t *sl = &st->slots[i];
    if (!last &&
        (rc = resihp_recv(pp, st->k + 1, st->drecv, bnd_bytes(st, sl, st->u1))))
      return rc;
    const float *din = stage_bwd(st, sl, last ? NULL : st->drecv);
    if (!first &&
        (rc = resihp_send(pp, st->k - 1, din, bnd_bytes(st, sl, st->u0))))
      return rc;
  }
  return 0;
}

/* ---- partition -------------------------------------------------------- */

/* The run lengths an option gave (n of them) for K stages: 0, or -1. */
static int given(const char *opt, const int *counts, int n, int K,
                 int *layers, const char **from) {
  if (n != K) {
    fprintf(stderr,
            "resihp-pipeline-trainer: %s names %d stages, the job has %d\n",
            opt, n, K);
    return -1;
  }
  memcpy(layers, counts, (size_t)K * sizeof(int));
  *from = opt;
  return 0;
}

/* Run lengths of K stages: --partition-of for replica r (-1: no job),
 * --partition, or the planner's. */
static int partition(const cfg_t *c, int K, int r, int *layers,
                     const char **from) {
  int NU = nunits(c);
  if (K > NU) {
    fprintf(stderr,
            "resihp-pipeline-trainer: %d stages need at least %d units; the "
            "model has %d (raise --layers)\n",
            K, K, NU);
    return -1;
  }
  if (c->npof && r == c->pof_r)
    return given("--partition-of", c->pof, c->npof, K, layers, from);
  if (c->npart)
    return given("--partition", c->part, c->npart, K, layers, from);
  /* cost of a unit per microbatch: its multiply-adds forward and backward
   * per sequence (of a mean length), times the sequences of a mean
   * microbatch; the scale does not matter */
  double ms[MAX_UNITS], mem[MAX_UNITS], speed[MAX_UNITS], cap[MAX_UNITS], mtok,
      mseq;
  if (trainer_data_mean(&c->data, &mtok, &mseq))
    oom();
  for (int j = 0; j < NU; j++) {
    double flops =
        j == 0 ? 2 * mtok * c->D : 3.0 * bwidth(c, j) * bwidth(c, j + 1);
    ms[j] = flops * mseq * 1e-6;
    mem[j] = 3.0 * sizeof(float) * unit_params(c, j) / 1e9;
  }
  for (int k = 0; k < K; k++)
    speed[k] = 1, cap[k] = 1e9;
  resihp_plan_cluster_t cl;
  resihp_plan_cluster_init(&cl);
  resihp_plan_model_t m;
  resihp_plan_model_init(&m);
  m.layers = NU;
  m.layer_ms = ms;
  m.layer_mem_gb = mem;
  m.boundary_mb = mseq * c->H * sizeof(float) / 1e6;
  m.microbatches = c->M;
  double fill, step;
  int rc = resihp_planner_partition(&cl, &m, 1, K, speed, cap, c->M, layers,
                                    &fill, &step);
  if (rc) {
    fprintf(stderr,
            "resihp-pipeline-trainer: the planner found no partition "
            "of %d units over %d stages: %s\n",
            NU, K, resihp_strerror(rc));
    return -1;
  }
  *from = "the planner";
  return 0;
}

static void print_partition(const cfg_t *c, const char *prefix, int K,
                            const int *layers, const char *from) {
  printf("%spartition", prefix);
  for (int k = 0; k < K; k++)
    printf("%c%d", k ? ',' : ' ', layers[k]);
  printf(" of %d units (embedding, %d hidden, classifier) from %s:", nunits(c),
         c->L, from);
  for (int k = 0, a = 0; k < K; a += layers[k], k++)
    printf(" stage %d units %d-%d%s", k, a, a + layers[k] - 1,
           k < K - 1 ? ";" : "\n");
  fflush(stdout);
}

static void stage_range(const int *layers, int k, int *u0, int *u1) {
  *u0 = 0;
  for (int i = 0; i < k; i++)
    *u0 += layers[i];
  *u1 = *u0 + layers[k];
}

/* Stage k of K as a process of its own holds: units[] gets the stage's
 * units only. */
static void stage_open(stage_t *st, const cfg_t *c, unit_t *units,
                       const int *layers, int k, int K, resihp_job_t *job) {
  int u0, u1;
  stage_range(layers, k, &u0, &u1);
  for (int j = u0; j < u1; j++)
    init_unit(c, &units[j], j);
  stage_init(st, c, units, k, K, u0, u1, job);
}

static void stage_close(stage_t *st) {
  for (int j = st->u0; j < st->u1; j++)
    free_unit(&st->units[j]);
  stage_free(st);
}

/* ---- modes ------------------------------------------------------------ */

static int run_reference(const cfg_t *c) {
  int K = c->K ? c->K : c->npart ? c->npart : 1, NU = nunits(c);
  int layers[MAX_UNITS];
  const char *from;
  if (partition(c, K, -1, layers, &from))
    return 2;
  if (!c->quiet)
    print_partition(c, "", K, layers, from);
  unit_t units[MAX_UNITS];
  for (int j = 0; j < NU; j++)
    init_unit(c, &units[j], j);
  stage_t *st = xcalloc((size_t)K, sizeof(stage_t));
  for (int k = 0; k < K; k++) {
    int u0, u1;
    stage_range(layers, k, &u0, &u1);
    stage_init(&st[k], c, units, k, K, u0, u1, NULL);
    stage_slots(&st[k], c->M);
  }
  double t0 = trainer_now_s();
  for (long s = 0; s < c->steps; s++) {
    for (int k = 0; k < K; k++)
      stage_zero(&st[k]);
    /* the replica's pipeline with its links replaced by copies */
    for (int i = 0; i < c->M; i++)
      for (int k = 0; k < K; k++) {
        slot_t *sl = &st[k].slots[i];
        gen_data(c, sl, s, i);
        if (k > 0)
          memcpy(bnd(&st[k], sl, st[k].u0),
                 bnd(&st[k - 1], &st[k - 1].slots[i], st[k - 1].u1),
                 bnd_bytes(&st[k], sl, st[k].u0));
        stage_fwd(&st[k], sl);
      }
    for (int i = c->M - 1; i >= 0; i--) {
      const float *d = NULL;
      for (int k = K - 1; k >= 0; k--)
        d = stage_bwd(&st[k], &st[k].slots[i], d);
    }
    double loss = 0;
    for (int k = 0; k < K; k++)
      loss = stage_apply(&st[k], s);
    if (!c->quiet && c->print_every > 0 &&
        (s % c->print_every == 0 || s == c->steps - 1))
      printf("step %ld loss %.4f\n", s, loss);
  }
  double secs = trainer_now_s() - t0;
  printf("training done: %ld steps of %d microbatches, %d stage(s) in one "
         "process, mean step %.2f ms\n",
         c->steps, c->M, K, 1000 * secs / c->steps);
  for (int k = 0; k < K && !c->quiet; k++) {
    char who[32];
    snprintf(who, sizeof(who), "stage %d ", k);
    trainer_mbstats_print(&st[k].times, stdout, who);
  }
  printf("model checksum %016llx\n",
         (unsigned long long)units_fnv(TRAINER_FNV_INIT, units, 0, NU));
  printf("final result:");
  for (int k = 0; k < K; k++) {
    char sum[RESULT_MAX];
    stage_result(c, units, st[k].u0, st[k].u1, sum, sizeof(sum));
    printf("%c%s", k ? '/' : ' ', sum);
  }
  printf("\n");
  for (int k = 0; k < K; k++)
    stage_free(&st[k]);
  free(st);
  for (int j = 0; j < NU; j++)
    free_unit(&units[j]);
  return 0;
}

/* The coordinator moved units between this replica's stages at this step
 * boundary (st.layers_moved, --move-layers): each unit that changes hands
 * goes from its old stage to its new one over the replica communicator,
 * parameters and momentum (the units in order on every stage: each
 * transfer is one send matched by one receive, so no cycle of waits),
 * then the stage holds its new units and the job commits the new state
 * by unit on every stage, or on none (resihp_job_commit_layer_state).
 * The units' arithmetic does not depend on which stage holds them: bitwise the same
 * run. 0, or the error: leave (the replica fails as a whole). */
static int move_units(stage_t *st, unit_t *units, int *layers, int K,
                      const char *who) {
  const cfg_t *c = st->c;
  int now[MAX_UNITS], was[MAX_UNITS], is[MAX_UNITS], k = st->k, NU = nunits(c);
  int rc = resihp_job_partition(st->job, now, K);
  resihp_comm_t *pp = resihp_job_replica_comm(st->job);
  if (rc)
    return rc;
  for (int s = 0, j = 0, i = 0; s < K; s++) {
    for (int n = 0; n < layers[s]; n++)
      was[j++] = s;
    for (int n = 0; n < now[s]; n++)
      is[i++] = s;
  }
  for (int j = 0; j < NU && !rc; j++) {
    if (was[j] == is[j])
      continue;
    if (was[j] == k)
      rc = resihp_send(pp, is[j], units[j].p, 2 * units[j].n * sizeof(float));
    else if (is[j] == k) {
      init_unit(c, &units[j], j);
      rc = resihp_recv(pp, was[j], units[j].p, 2 * units[j].n * sizeof(float));
    }
  }
  if (rc)
    return rc;
  for (int j = st->u0; j < st->u1; j++)
    if (is[j] != k)
      free_unit(&units[j]);
  int u0, u1;
  stage_range(now, k, &u0, &u1);
  stage_free(st);
  stage_init(st, c, units, k, K, u0, u1, st->job);
  memcpy(layers, now, sizeof(int) * (size_t)K);
  /* still by unit (as declared: --move-layers), so that the replica
   * can still shrink onto its surviving stages */
  resihp_job_buf_t bufs[2 * MAX_UNITS];
  resihp_job_layer_state_t ls[MAX_UNITS];
  rc = resihp_job_commit_layer_state(st->job, ls,
                                     stage_layer_state(st, bufs, ls), NULL, 0,
                                     0);
  if (!rc && !c->quiet)
    print_partition(c, who, K, layers, "the coordinator (units moved)");
  return rc;
}

/* The gradient exchange of a step in the job. */
static int job_exchange(stage_t *st) {
  if (st->c->use_float)
    return resihp_job_allreduce_as(st->job, st->facc, st->nacc, RESIHP_FLOAT32,
                                   RESIHP_OP_SUM);
  return resihp_job_allreduce(st->job, st->acc, st->nacc);
}

static int run_job(const cfg_t *c) {
  resihp_job_opts_t o;
  resihp_job_opts_init(&o);
  o.microbatches = c->M;
  o.steps = c->steps;
  /* (with --move-layers a replica may come back as fewer stages: checked
   * below instead) */
  int want = c->K ? c->K : c->npart;
  o.ranks_per_replica = c->move_layers ? 0 : want;
  resihp_job_t *job = NULL;
  int rc = resihp_job_join(&o, &job);
  if (rc) {
    fprintf(stderr, "resihp-pipeline-trainer: cannot join the job: %s\n",
            resihp_strerror(rc));
    return 1;
  }
  int me = resihp_job_replica(job), k = resihp_job_shard(job),
      K = resihp_job_shards(job), layers[MAX_UNITS], ret = 1;
  char who[64];
  snprintf(who, sizeof(who), "[replica %d stage %d] ", me, k);
  const char *from;
  resihp_comm_t *pp = resihp_job_replica_comm(job);
  /* a replica shrunk in place holds the coordinator's partition over its
   * stages; any other, the program's */
  rc = c->move_layers ? resihp_job_shrunk_partition(job, layers, K)
                      : RESIHP_ENOENT;
  if (!rc) {
    from = "the coordinator (shrunk: no spare was left)";
  } else if (rc != RESIHP_ENOENT) {
    fprintf(stderr, "%sthe coordinator's partition: %s\n", who,
            resihp_strerror(rc));
    resihp_job_destroy(job);
    return 1;
  } else if ((want && K != want && !c->npart) ||
             partition(c, K, me, layers, &from)) {
    if (want && K != want && !c->npart)
      fprintf(stderr, "%s--stages %d, the job has %d\n", who, want, K);
    resihp_job_destroy(job);
    return 2;
  }
  if (K > 1 && !pp) {
    fprintf(stderr, "%sthe job has no replica communicator\n", who);
    resihp_job_destroy(job);
    return 1;
  }
  if (!c->quiet)
    print_partition(c, who, K, layers, from);
  unit_t units[MAX_UNITS] = {0};
  stage_t st;
  trainer_workload_t wl = {.d = &c->data};
  stage_open(&st, c, units, layers, k, K, job);
  /* the model's units as the job's layers: the gradient exchange is keyed
   * by them (resihp_job(3)), and the job checks every exchange against
   * this stage's units */
  size_t elems[MAX_UNITS];
  int lfirst = -1, lcount = 0;
  for (int j = 0; j < nunits(c); j++)
    elems[j] = unit_grads(c, j);
  if ((rc = resihp_job_set_layers(job, nunits(c), elems, layers, K)) ||
      (rc = resihp_job_layers(job, &lfirst, &lcount)) || lfirst != st.u0 ||
      lfirst + lcount != st.u1) {
    fprintf(stderr, "%scannot declare the layers: %s\n", who,
            rc ? resihp_strerror(rc) : "the job says other layers");
    rc = rc ? rc : -1;
    goto out;
  }
  if (c->move_layers && (rc = resihp_job_set_layers_movable(job))) {
    fprintf(stderr, "%scannot offer to move layers: %s\n", who,
            resihp_strerror(rc));
    goto out;
  }
  resihp_job_buf_t bufs[2 * MAX_UNITS];
  /* with --partition-of or --move-layers, the state by unit: a
   * replacement of a replica whose partition no other holds (its own, or
   * the coordinator's over a shrunk replica's stages) catches up unit by
   * unit from the ranks of other partitions (resihp_job(3)); the same
   * buffers in the same order either way */
  resihp_job_layer_state_t ls[MAX_UNITS];
  int nl = stage_layer_state(&st, bufs, ls);
  if ((rc = c->npof || c->move_layers
                  ? resihp_job_set_layer_state(job, ls, nl, NULL, 0)
                  : resihp_job_set_state_list(job, bufs, 2 * nl))) {
    fprintf(stderr, "%scannot register the state: %s\n", who,
            resihp_strerror(rc));
    goto out;
  }
  /* the next step's workloads, so that microbatches go by predicted cost */
  if (trainer_mb_init(&wl.scratch, &c->data) == 0)
    resihp_job_set_workload_fn(job, trainer_workload, &wl);
  resihp_job_step_t ss;
  double t0 = trainer_now_s(), t_begin = 0, t_pipe = 0, t_ex = 0, t;
  long done_steps = 0;
  for (;;) {
    t = trainer_now_s();
    rc = resihp_job_begin_step(job, &ss);
    t_begin += trainer_now_s() - t;
    if (rc || ss.done)
      break;
    if (ss.catching_up && !c->quiet)
      printf("%scaught up at step %ld: shard of %zu bytes in %.3f s (%.1f "
             "MB/s); training again from the next step\n",
             who, ss.step, ss.catchup_bytes, ss.catchup_seconds,
             ss.catchup_seconds > 0
                 ? (double)ss.catchup_bytes / 1e6 / ss.catchup_seconds
                 : 0.0);
    if (ss.layers_moved && (rc = move_units(&st, units, layers, K, who))) {
      fprintf(stderr, "%sstep %ld: moving the units failed: %s; leaving\n",
              who, ss.step, resihp_strerror(rc));
      goto out;
    }
    stage_zero(&st);
    const char *what = "the pipeline";
    t = trainer_now_s();
    rc = pipe_pass(&st, pp, ss.step, ss.mbs, ss.nmbs);
    t_pipe += trainer_now_s() - t;
    t = trainer_now_s();
    while (!rc) {
      what = "the gradient exchange";
      if ((rc = job_exchange(&st)) != RESIHP_EREASSIGNED)
        break;
      if (!c->quiet)
        printf("%sstep %ld: %d microbatch(es) of failed replicas reassigned "
               "here (%d replicas left)\n",
               who, ss.step, ss.nextra, ss.nreplicas);
      what = "the pipeline";
      double t1 = trainer_now_s();
      rc = pipe_pass(&st, pp, ss.step, ss.extra, ss.nextra);
      t_pipe += trainer_now_s() - t1;
      t += trainer_now_s() - t1; /* not the exchange's time */
    }
    t_ex += trainer_now_s() - t;
    if (rc) {
      /* a stage of this replica is gone, or the group excluded it: the
       * replica fails as a whole and resihp-run relaunches it */
      fprintf(stderr, "%sstep %ld: %s failed: %s; leaving\n", who, ss.step,
              what, resihp_strerror(rc));
      goto out;
    }
    double loss = stage_apply(&st, ss.step);
    if ((rc = resihp_job_end_step(job))) {
      /* a stage of this replica died after the exchange */
      fprintf(stderr, "%sstep %ld: the step's end failed: %s; leaving\n", who,
              ss.step, resihp_strerror(rc));
      goto out;
    }
    done_steps++;
    if (!c->quiet && k == K - 1 && c->print_every > 0 &&
        (ss.step % c->print_every == 0 || ss.step == c->steps - 1))
      printf("%sstep %ld loss %.4f (%d replicas, %d of %d microbatches "
             "here)\n",
             who, ss.step, loss, ss.nreplicas, ss.nmbs, c->M);
    fflush(stdout);
  }
  if (rc) {
    fprintf(stderr, "%scannot begin a step: %s\n", who, resihp_strerror(rc));
    goto out;
  }
  char sum[RESULT_MAX];
  stage_result(c, units, st.u0, st.u1, sum, sizeof(sum));
  double secs = trainer_now_s() - t0;
  printf("%straining done: %ld steps here in %.2f s, mean step %.2f ms (step "
         "boundaries %.2f s, pipeline %.2f s, gradient exchange %.2f s); "
         "stage checksum %s\n",
         who, done_steps, secs, done_steps ? 1000 * secs / done_steps : 0.0,
         t_begin, t_pipe, t_ex, sum);
  if (!c->quiet)
    trainer_mbstats_print(&st.times, stdout, who);
  fflush(stdout);
  resihp_job_finish(job, sum);
  ret = 0;
out:
  resihp_job_destroy(job);
  stage_close(&st);
  trainer_mb_free(&wl.scratch);
  return ret;
}

static int run_plain(const cfg_t *c) {
  int t = trainer_envint("SLURM_PROCID", 0),
      n = trainer_envint("SLURM_NTASKS", 1),
      K = c->K       ? c->K
          : c->npart ? c->npart
                     : 1;
  if (n < 1 || t < 0 || t >= n || n % K) {
    fprintf(stderr,
            "resihp-pipeline-trainer: --plain needs SLURM_NTASKS a multiple "
            "of the %d stages and 0 <= SLURM_PROCID < SLURM_NTASKS (got "
            "%d of %d)\n",
            K, t, n);
    return 2;
  }
  int R = n / K, r = t / K, k = t % K, layers[MAX_UNITS], ret = 1;
  const char *attempt = getenv("RESIHP_ATTEMPT"), *from;
  if (!attempt || !*attempt)
    attempt = "0";
  if (partition(c, K, -1, layers, &from))
    return 2;
  if (!c->quiet && t == 0)
    print_partition(c, "", K, layers, from);
  char name[64], prog[64];
  snprintf(prog, sizeof(prog), "resihp-pipeline-trainer[%d]", t);
  /* the data-parallel group of stage k, then the pipeline of replica r */
  resihp_comm_t *dp = NULL, *pp = NULL;
  snprintf(name, sizeof(name), "ep.%s.dp%d", attempt, k);
  int rc = trainer_rendezvous(prog, c->plain_dir, name, r, R, 1, &dp);
  if (rc)
    return rc;
  if (K > 1) {
    snprintf(name, sizeof(name), "ep.%s.pp%d", attempt, r);
    if ((rc = trainer_rendezvous(prog, c->plain_dir, name, k, K, 0, &pp))) {
      resihp_comm_destroy(dp);
      return rc;
    }
  }
  unit_t units[MAX_UNITS] = {0};
  stage_t st;
  stage_open(&st, c, units, layers, k, K, NULL);
  int *mbs = xcalloc((size_t)c->M, sizeof(int)), nmbs = 0;
  for (int mb = r; mb < c->M; mb += R)
    mbs[nmbs++] = mb;
  double t0 = trainer_now_s();
  for (long s = 0; s < c->steps; s++) {
    stage_zero(&st);
    if ((rc = pipe_pass(&st, pp, s, mbs, nmbs)))
      goto fail;
    rc = c->use_float ? resihp_allreduce(dp, st.facc, st.nacc, RESIHP_FLOAT32,
                                         RESIHP_OP_SUM)
                      : resihp_allreduce(dp, st.acc, st.nacc, RESIHP_FIXED64,
                                         RESIHP_OP_SUM);
    if (rc)
      goto fail;
    double loss = stage_apply(&st, s);
    if (!c->quiet && r == 0 && k == K - 1 && c->print_every > 0 &&
        (s % c->print_every == 0 || s == c->steps - 1)) {
      printf("step %ld loss %.4f\n", s, loss);
      fflush(stdout);
    }
  }
  double secs = trainer_now_s() - t0;
  /* replica 0's stages send their checksums to its stage 0, which prints
   * the replica's result as resihp-run would */
  char sum[17];
  snprintf(
      sum, sizeof(sum), "%016llx",
      (unsigned long long)units_fnv(TRAINER_FNV_INIT, units, st.u0, st.u1));
  if (r == 0 && k > 0 && (rc = resihp_send(pp, 0, sum, 16)))
    goto fail;
  if (t == 0) {
    printf("training done: %ld steps, %d replicas x %d stages (plain "
           "communicators), mean step %.2f ms\n",
           c->steps, R, K, 1000 * secs / c->steps);
    printf("final result: %s", sum);
    for (int i = 1; i < K; i++) {
      if ((rc = resihp_recv(pp, i, sum, 16)))
        goto fail;
      printf("/%s", sum);
    }
    printf("\n");
  }
  ret = 0;
  goto out;
fail:
  fprintf(stderr,
          "%s: communication failed: %s (no fault tolerance here: the run "
          "must be started again)\n",
          prog, resihp_strerror(rc));
out:
  resihp_comm_destroy(pp);
  resihp_comm_destroy(dp);
  free(mbs);
  stage_close(&st);
  return ret;
}

/* ---- options ---------------------------------------------------------- */

static long num(const char *opt, const char *arg, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 10);
  if (errno || end == arg || *end || v < lo || v > hi) {
    fprintf(stderr,
            "resihp-pipeline-trainer: --%s wants an integer in %ld..%ld, "
            "not '%s'\n",
            opt, lo, hi, arg);
    exit(2);
  }
  return v;
}

static double real(const char *opt, const char *arg) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (errno || end == arg || *end || !isfinite(v) || v < 0) {
    fprintf(stderr,
            "resihp-pipeline-trainer: --%s wants a number >= 0, not '%s'\n",
            opt, arg);
    exit(2);
  }
  return v;
}

/* Their sum is checked against the model once all options are known. */
static void parse_partition(cfg_t *c, const char *arg) {
  c->npart = trainer_parse_counts(arg, c->part, MAX_UNITS, MAX_UNITS);
  if (c->npart < 0) {
    fprintf(stderr,
            "resihp-pipeline-trainer: --partition wants unit counts >= 1 "
            "separated by commas, one per stage (e.g. 2,4), not '%s'\n",
            arg);
    exit(2);
  }
}

/* R=c1:c2:... (the counts' sum is checked with --partition's). */
static void parse_partition_of(cfg_t *c, const char *arg) {
  int n = c->npof ? -1
                  : trainer_parse_replica_counts(arg, &c->pof_r, c->pof,
                                                 MAX_UNITS, MAX_UNITS);
  if (n < 0) {
    fprintf(stderr,
            "resihp-pipeline-trainer: --partition-of wants a replica and its "
            "unit counts >= 1 separated by colons, one per stage (e.g. "
            "1=4:2), once, not '%s'\n",
            arg);
    exit(2);
  }
  c->npof = n;
}

/* The counts of a partition option (n of them, 0: not given) cover the
 * units, one per stage: 0, or -1 (said). */
static int counts_cover(const cfg_t *c, const char *opt, const int *counts,
                        int n) {
  int sum = 0;
  for (int i = 0; i < n; i++)
    sum += counts[i];
  if (!n || (sum == nunits(c) && (!c->K || c->K == n)))
    return 0;
  fprintf(stderr,
          "resihp-pipeline-trainer: %s must cover the %d units (embedding, "
          "%d hidden, classifier) with one count per stage%s (got a sum of "
          "%d over %d stages)\n",
          opt, nunits(c), c->L, c->K ? " (--stages)" : "", sum, n);
  return -1;
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: resihp-pipeline-trainer [--steps N] [--microbatches M]\n"
      "       [--batch B] [--vocab V] [--embed D] [--hidden H] [--layers L]\n"
      "       [--classes C] [--lr X] [--momentum X] [--seed S] [--mb-ms MS]\n"
      "       [--stages K] [--partition N,N..] [--partition-of R=N:N..]\n"
      "       [--float] [--print-every N] [--move-layers]\n"
      "       [--data fixed|longtail|packed] [--tokens N] [--quiet]\n"
      "       [--reference | --plain DIR]\n"
      "Run under resihp-run --ranks-per-replica K (rank k trains pipeline\n"
      "stage k); --reference trains the K stages in one process, --plain DIR\n"
      "in one plain srun step of R*K tasks without fault tolerance. The\n"
      "model has L+2 units (embedding, L hidden layers, classifier).\n"
      "--partition-of R=N:N.. gives replica R its own partition under\n"
      "resihp-run (the others --partition's or the planner's).\n"
      "--move-layers lets the coordinator move units between the stages of\n"
      "a replica whose stage is slow, and back (results: each unit's\n"
      "checksum, as with --partition-of); a replica that lost a stage with\n"
      "no spare left then goes on as fewer stages (resihp-run(1)).\n");
}

int main(int argc, char **argv) {
  cfg_t c = {.V = 512,
             .D = 32,
             .H = 64,
             .L = 4,
             .C = 8,
             .B = 8,
             .M = 12,
             .steps = 40,
             .lr = 0.1,
             .momentum = 0.9,
             .seed = 1,
             .print_every = 10};
  /* the integer options, by their bounds; getopt returns 256 + index */
  static const struct {
    const char *name;
    size_t off;
    long lo, hi;
  } iopt[] = {
      {"microbatches", offsetof(cfg_t, M), 1, 165518},
      {"batch", offsetof(cfg_t, B), 1, 4096},
      {"vocab", offsetof(cfg_t, V), 2, 1000000},
      {"embed", offsetof(cfg_t, D), 1, 4096},
      {"hidden", offsetof(cfg_t, H), 1, 4096},
      {"layers", offsetof(cfg_t, L), 1, MAX_LAYERS},
      {"classes", offsetof(cfg_t, C), 2, 1024},
      {"mb-ms", offsetof(cfg_t, mb_ms), 0, 60000},
      {"stages", offsetof(cfg_t, K), 1, MAX_UNITS},
      {"tokens", offsetof(cfg_t, data.budget), TRAINER_LONG_MIN, 1 << 20},
      {"print-every", offsetof(cfg_t, print_every), 0, 1000000000}};
  enum { NI = sizeof(iopt) / sizeof(iopt[0]) };
  struct option lo[NI + 16] = {
      {"steps", 1, 0, 's'}, {"lr", 1, 0, 'l'},        {"momentum", 1, 0, 'u'},
      {"seed", 1, 0, 'S'},  {"partition", 1, 0, 'P'}, {"float", 0, 0, 'f'},
      {"quiet", 0, 0, 'q'}, {"reference", 0, 0, 'r'}, {"plain", 1, 0, 'x'},
      {"help", 0, 0, 'h'},  {"data", 1, 0, 'T'}, {"partition-of", 1, 0, 'O'},
      {"move-layers", 0, 0, 'm'}};
  for (int i = 0; i < NI; i++)
    lo[13 + i] = (struct option){iopt[i].name, 1, 0, 256 + i};
  int o;
  while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    if (o >= 256 && o < 256 + NI) {
      *(int *)((char *)&c + iopt[o - 256].off) = (int)num(
          iopt[o - 256].name, optarg, iopt[o - 256].lo, iopt[o - 256].hi);
      continue;
    }
    switch (o) {
    case 's':
      c.steps = num("steps", optarg, 1, 1000000000L);
      break;
    case 'l':
      c.lr = real("lr", optarg);
      break;
    case 'u':
      c.momentum = real("momentum", optarg);
      break;
    case 'S':
      c.seed = (uint64_t)num("seed", optarg, 0, 0x7fffffffffffffffL);
      break;
    case 'P':
      parse_partition(&c, optarg);
      break;
    case 'O':
      parse_partition_of(&c, optarg);
      break;
    case 'f':
      c.use_float = 1;
      break;
    case 'q':
      c.quiet = 1;
      break;
    case 'm':
      c.move_layers = 1;
      break;
    case 'r':
      c.reference = 1;
      break;
    case 'x':
      c.plain_dir = optarg;
      break;
    case 'T':
      if (trainer_data_kind(optarg) < 0) {
        fprintf(stderr,
                "resihp-pipeline-trainer: --data wants fixed, longtail or "
                "packed, not '%s'\n",
                optarg);
        return 2;
      }
      c.data.kind = (trainer_data_kind_t)trainer_data_kind(optarg);
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc || (c.reference && c.plain_dir)) {
    usage(stderr);
    return 2;
  }
  if (c.V < c.C) {
    fprintf(stderr, "resihp-pipeline-trainer: --vocab must be at least "
                    "--classes\n");
    return 2;
  }
  if ((c.npof || c.move_layers) && nunits(&c) > RESULT_UNITS) {
    fprintf(stderr,
            "resihp-pipeline-trainer: --partition-of and --move-layers report "
            "each unit's checksum: at most %d units (--layers %d)\n",
            RESULT_UNITS, RESULT_UNITS - 2);
    return 2;
  }
  if (counts_cover(&c, "--partition-of", c.pof, c.npof) ||
      counts_cover(&c, "--partition", c.part, c.npart))
    return 2;
  c.data.B = c.B;
  c.data.V = c.V;
  c.data.C = c.C;
  c.data.seed = c.seed;
  if (!c.data.budget)
    c.data.budget = 64 * c.B;
  c.maxs = trainer_data_max_seqs(&c.data);
  if (trainer_cost_init(&c.cost, &c.data, c.mb_ms))
    oom();
  if (c.reference)
    return run_reference(&c);
  if (c.plain_dir)
    return run_plain(&c);
  return run_job(&c);
}
