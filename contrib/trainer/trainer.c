/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-trainer: a small but real data-parallel trainer on the CPU.
 *
 * Model: a bag-of-embeddings classifier over token sequences - an
 * embedding table (V x D), mean over the sequence, a tanh hidden layer
 * (H) and a softmax over C classes - trained with SGD and momentum on
 * deterministic synthetic sequences of variable length: each sequence
 * belongs to a class and draws half of its tokens from that class's block
 * of the vocabulary. Every step processes the same M microbatches;
 * microbatch m of step s is generated from (seed, s, m) alone, so any
 * replica can compute any microbatch. --data picks B sequences of 4..63
 * tokens (fixed, the default), B of long-tailed lengths 8..1023
 * (longtail) or as many as fit in --tokens (packed); --mb-ms is the mean
 * simulated compute of a microbatch, scaled by its workload like a
 * transformer's (contrib/common/trainer-data.h).
 *
 * Determinism. Per-microbatch gradients are accumulated in int64 fixed
 * point (resihp_fixed_accumulate_float) and summed exactly across
 * replicas, so the update - and the final parameters - are bitwise the
 * same whichever replica computed which microbatch, and whatever failed.
 * The trainer prints an FNV-1a 64 checksum of parameters and momentum.
 *
 * Modes.
 *   (default)      under resihp-run: resihp_job_* (quota, fault-tolerant
 *                  all-reduce with in-step reassignment, catch-up).
 *   --checkpoint DIR --checkpoint-every K
 *                  the checkpoint-restart baseline: R tasks of one plain
 *                  srun step meet through files in DIR, all-reduce with a
 *                  fixed communicator, rank 0 writes a checkpoint every K
 *                  steps, and any failure ends the run (exit 1) so that the
 *                  caller restarts it from the last checkpoint.
 *   --reference    no job: one process computes all M microbatches of
 *                  every step and prints the final checksum, which a run
 *                  under resihp-run must match bitwise.
 */
#include "../common/trainer-common.h"
#include "../common/trainer-data.h"

#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  int V, D, H, C, B, M;
  long steps;
  double lr, momentum;
  uint64_t seed;
  int mb_ms;
  double mb_kops; /* > 0: real arithmetic instead of sleeping (--mb-work) */
  trainer_data_t data; /* --data, --tokens */
  int reference;
  int quiet;
  int print_every;
  const char *ckpt_dir;
  int ckpt_every;
  const char *die_at; /* steps ("15,30,45") at which the last rank dies once */
  /* --abort-at STEP[:REPLICA]: that replica stops the run at that step's
   * begin (resihp_job_abort), as a program error would (-1: never) */
  long abort_step;
  int abort_replica;
} cfg_t;

typedef struct {
  cfg_t c;
  size_t P;     /* parameters */
  float *state; /* params[P] then momentum[P] */
  float *E, *W1, *b1, *W2, *b2;
  float *grad;
  int64_t *acc; /* P + 1 (loss) */
  trainer_mb_t mb, scratch;
  trainer_workload_t wl; /* the next step's workloads, for resihp */
  trainer_cost_t cost;
  trainer_mbstats_t times;
} model_t;

static void init_model(model_t *m) {
  cfg_t *c = &m->c;
  m->P = (size_t)c->V * c->D + (size_t)c->H * c->D + c->H +
         (size_t)c->C * c->H + c->C;
  m->state = calloc(2 * m->P, sizeof(float));
  m->grad = calloc(m->P, sizeof(float));
  m->acc = calloc(m->P + 1, sizeof(int64_t));
  c->data.B = c->B;
  c->data.V = c->V;
  c->data.C = c->C;
  c->data.seed = c->seed;
  if (!m->state || !m->grad || !m->acc || trainer_mb_init(&m->mb, &c->data) ||
      trainer_mb_init(&m->scratch, &c->data) ||
      trainer_mb_init(&m->wl.scratch, &c->data) ||
      trainer_cost_init(&m->cost, &c->data, c->mb_kops > 0 ? 0 : c->mb_ms) ||
      trainer_cost_init_arith(&m->cost, &c->data, c->mb_kops)) {
    fprintf(stderr, "trainer: out of memory\n");
    exit(1);
  }
  m->E = m->state;
  m->W1 = m->E + (size_t)c->V * c->D;
  m->b1 = m->W1 + (size_t)c->H * c->D;
  m->W2 = m->b1 + c->H;
  m->b2 = m->W2 + (size_t)c->C * c->H;
  uint64_t r = c->seed ^ 0x1234;
  for (size_t i = 0; i < m->P; i++) {
    double u = (double)(trainer_splitmix(&r) >> 11) / 9007199254740992.0;
    m->state[i] = (float)((u - 0.5) * 1.0);
  }
}

/* Gradient of the summed loss of microbatch mb of step s into m->grad;
 * returns the loss. The microbatch stays in m->mb. */
static double microbatch(model_t *m, long s, int mb) {
  cfg_t *c = &m->c;
  memset(m->grad, 0, m->P * sizeof(float));
  float *gE = m->grad, *gW1 = gE + (size_t)c->V * c->D,
        *gb1 = gW1 + (size_t)c->H * c->D, *gW2 = gb1 + c->H,
        *gb2 = gW2 + (size_t)c->C * c->H;
  float x[256], h[256], dz[64], dh[256], dx[256];
  double loss = 0;
  trainer_mb_t *d = &m->mb;
  trainer_data_draw(&c->data, s, mb, d);
  for (int b = 0; b < d->nseq; b++) {
    int cls = d->cls[b], L = d->len[b];
    const int *tok = d->tok + d->off[b];
    trainer_embed_mean(m->E, c->D, tok, L, x);
    trainer_dense(m->W1, m->b1, c->D, c->H, x, h, 1);
    trainer_dense(m->W2, m->b2, c->H, c->C, h, dz, 0);
    loss += trainer_softmax_xent(dz, c->C, cls);
    trainer_dense_bwd(m->W2, c->H, c->C, h, dz, gW2, gb2, dh);
    trainer_tanh_bwd(h, dh, c->H, dh);
    trainer_dense_bwd(m->W1, c->D, c->H, x, dh, gW1, gb1, dx);
    trainer_embed_mean_bwd(gE, c->D, tok, L, dx);
  }
  if (m->cost.ops_per_work > 0)
    trainer_compute_arith(&m->cost, d);
  else
    trainer_compute_sleep(&m->cost, d);
  return loss;
}

/* acc (fixed point) += one microbatch */
static void add_microbatch(model_t *m, resihp_job_t *job, long s, int mb,
                           int fb) {
  double t0 = trainer_now_s();
  double loss = microbatch(m, s, mb);
  resihp_fixed_accumulate_float(m->acc, m->grad, m->P, fb);
  float lf = (float)loss;
  resihp_fixed_accumulate_float(m->acc + m->P, &lf, 1, fb);
  double secs = trainer_now_s() - t0;
  trainer_mbstats_add(&m->times, secs);
  if (job)
    resihp_job_report_microbatch(job, mb, (double)m->mb.tokens, m->mb.sum_l2,
                                 m->mb.nseq, secs);
}

/* SGD with momentum from the summed gradient of step s; returns the mean
 * loss per sequence. */
static double apply(model_t *m, long s, int fb) {
  cfg_t *c = &m->c;
  double n = trainer_data_step_seqs(&c->data, s, c->M, &m->scratch);
  float *g = m->grad, loss;
  resihp_fixed_to_float(g, m->acc, m->P, fb, n);
  resihp_fixed_to_float(&loss, m->acc + m->P, 1, fb, n);
  float *w = m->state, *v = m->state + m->P;
  for (size_t i = 0; i < m->P; i++) {
    v[i] = (float)c->momentum * v[i] + g[i];
    w[i] -= (float)c->lr * v[i];
  }
  return loss;
}

static int run_resilient(model_t *m) {
  cfg_t *c = &m->c;
  int fb = resihp_fixed_frac_bits();
  resihp_job_opts_t o;
  resihp_job_opts_init(&o);
  o.microbatches = c->M;
  o.steps = c->steps;
  resihp_job_t *job = NULL;
  int rc = resihp_job_join(&o, &job);
  if (rc) {
    fprintf(stderr, "trainer: cannot join the job: %s\n", resihp_strerror(rc));
    return 1;
  }
  int me = resihp_job_replica(job);
  resihp_job_set_state(job, m->state, 2 * m->P * sizeof(float));
  m->wl.d = &c->data;
  resihp_job_set_workload_fn(job, trainer_workload, &m->wl);
  resihp_job_step_t st;
  double t0 = trainer_now_s(), t_begin = 0, t_comp = 0, t_ar = 0, t;
  long done_steps = 0;
  for (;;) {
    t = trainer_now_s();
    rc = resihp_job_begin_step(job, &st);
    t_begin += trainer_now_s() - t;
    if (rc || st.done)
      break;
    t = trainer_now_s();
    memset(m->acc, 0, (m->P + 1) * sizeof(int64_t));
    if (st.step == c->abort_step && me == c->abort_replica) {
      char why[96];
      snprintf(why, sizeof(why),
               "test abort at step %ld (resihp-trainer --abort-at)", st.step);
      fprintf(stderr, "[replica %d] step %ld: %s\n", me, st.step, why);
      rc = resihp_job_abort(job, why);
      if (rc)
        fprintf(stderr, "[replica %d] abort not sent: %s\n", me,
                resihp_strerror(rc));
      resihp_job_destroy(job);
      return 1;
    }
    if (st.catching_up && !c->quiet)
      printf("[replica %d] caught up at step %ld; training again from the "
             "next step\n",
             me, st.step);
    for (int i = 0; i < st.nmbs; i++)
      add_microbatch(m, job, st.step, st.mbs[i], fb);
    t_comp += trainer_now_s() - t;
    t = trainer_now_s();
    while ((rc = resihp_job_allreduce(job, m->acc, m->P + 1)) ==
           RESIHP_EREASSIGNED) {
      if (!c->quiet)
        printf("[replica %d] step %ld: %d microbatch(es) of failed replicas "
               "reassigned here (%d replicas left)\n",
               me, st.step, st.nextra, st.nreplicas);
      for (int i = 0; i < st.nextra; i++)
        add_microbatch(m, job, st.step, st.extra[i], fb);
    }
    if (rc) {
      fprintf(stderr, "[replica %d] step %ld: all-reduce failed: %s\n", me,
              st.step, resihp_strerror(rc));
      resihp_job_destroy(job);
      return 1;
    }
    t_ar += trainer_now_s() - t;
    double loss = apply(m, st.step, fb);
    if ((rc = resihp_job_end_step(job))) {
      fprintf(stderr, "[replica %d] step %ld: the step's end failed: %s\n", me,
              st.step, resihp_strerror(rc));
      resihp_job_destroy(job);
      return 1;
    }
    done_steps++;
    if (!c->quiet && c->print_every > 0 &&
        (st.step % c->print_every == 0 || st.step == c->steps - 1))
      printf("[replica %d] step %ld loss %.4f (%d replicas, %d of %d "
             "microbatches here)\n",
             me, st.step, loss, st.nreplicas, st.nmbs, c->M);
    fflush(stdout);
  }
  if (rc) {
    fprintf(stderr, "[replica %d] cannot begin a step: %s\n", me,
            resihp_strerror(rc));
    resihp_job_destroy(job);
    return 1;
  }
  char sum[32];
  snprintf(
      sum, sizeof(sum), "%016llx",
      (unsigned long long)trainer_fnv1a(m->state, 2 * m->P * sizeof(float)));
  printf("[replica %d] training done: %ld steps here in %.2f s (step "
         "boundaries %.2f s, microbatches %.2f s, all-reduce %.2f s); final "
         "checksum %s\n",
         me, done_steps, trainer_now_s() - t0, t_begin, t_comp, t_ar, sum);
  char who[32];
  snprintf(who, sizeof(who), "[replica %d] ", me);
  if (!c->quiet)
    trainer_mbstats_print(&m->times, stdout, who);
  fflush(stdout);
  resihp_job_finish(job, sum);
  resihp_job_destroy(job);
  return 0;
}

/* ---- the reference: one process, every microbatch ------------------- */

static int run_reference(model_t *m) {
  cfg_t *c = &m->c;
  int fb = resihp_fixed_frac_bits();
  double t0 = trainer_now_s();
  for (long s = 0; s < c->steps; s++) {
    memset(m->acc, 0, (m->P + 1) * sizeof(int64_t));
    for (int mb = 0; mb < c->M; mb++)
      add_microbatch(m, NULL, s, mb, fb);
    double loss = apply(m, s, fb);
    if (!c->quiet && c->print_every > 0 &&
        (s % c->print_every == 0 || s == c->steps - 1))
      printf("step %ld loss %.4f\n", s, loss);
  }
  printf("reference done: %ld steps of %d microbatches (%s data) in %.2f s; "
         "final checksum %016llx\n",
         c->steps, c->M, trainer_data_name(c->data.kind), trainer_now_s() - t0,
         (unsigned long long)trainer_fnv1a(m->state, 2 * m->P * sizeof(float)));
  if (!c->quiet)
    trainer_mbstats_print(&m->times, stdout, "");
  return 0;
}

/* ---- checkpoint-restart baseline ------------------------------------- */

static int save_ckpt(model_t *m, long next_step) {
  char tmp[4096], fin[4096];
  snprintf(tmp, sizeof(tmp), "%s/ckpt.tmp", m->c.ckpt_dir);
  snprintf(fin, sizeof(fin), "%s/ckpt", m->c.ckpt_dir);
  FILE *f = fopen(tmp, "wb");
  if (!f)
    return -1;
  int ok = fwrite(&next_step, sizeof(next_step), 1, f) == 1 &&
           fwrite(m->state, sizeof(float), 2 * m->P, f) == 2 * m->P;
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  fclose(f);
  return ok ? rename(tmp, fin) : -1;
}

static long load_ckpt(model_t *m) {
  char fin[4096];
  snprintf(fin, sizeof(fin), "%s/ckpt", m->c.ckpt_dir);
  FILE *f = fopen(fin, "rb");
  if (!f)
    return 0;
  long s = 0;
  if (fread(&s, sizeof(s), 1, f) != 1 ||
      fread(m->state, sizeof(float), 2 * m->P, f) != 2 * m->P)
    s = -1;
  fclose(f);
  return s;
}

static int dies_at(const char *list, long s) {
  const char *p = list;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p)
      return 0;
    if (v == s)
      return 1;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

static int run_checkpointed(model_t *m) {
  cfg_t *c = &m->c;
  int fb = resihp_fixed_frac_bits();
  int rank = trainer_envint("SLURM_PROCID", 0),
      n = trainer_envint("SLURM_NTASKS", 1);
  const char *attempt = getenv("RESIHP_ATTEMPT");
  long start = load_ckpt(m);
  if (start < 0) {
    fprintf(stderr, "trainer: unreadable checkpoint in %s\n", c->ckpt_dir);
    return 2;
  }
  /* rendezvous through files: ep.<attempt>.<rank> = host:port */
  char name[64];
  snprintf(name, sizeof(name), "ep.%s", attempt ? attempt : "0");
  resihp_comm_t *comm = NULL;
  int rc = trainer_rendezvous("trainer", c->ckpt_dir, name, rank, n, 0, &comm);
  if (rc)
    return rc;
  for (long s = start; s < c->steps; s++) {
    if (c->die_at && rank == n - 1 && dies_at(c->die_at, s)) {
      char mark[4096];
      snprintf(mark, sizeof(mark), "%s/died.%ld", c->ckpt_dir, s);
      int fd = open(mark, O_CREAT | O_EXCL | O_WRONLY, 0600);
      if (fd >= 0) {
        close(fd);
        raise(SIGKILL);
      }
    }
    memset(m->acc, 0, (m->P + 1) * sizeof(int64_t));
    for (int mb = rank; mb < c->M; mb += n)
      add_microbatch(m, NULL, s, mb, fb);
    rc =
        resihp_allreduce(comm, m->acc, m->P + 1, RESIHP_FIXED64, RESIHP_OP_SUM);
    if (rc) {
      fprintf(stderr,
              "trainer[%d]: step %ld: all-reduce failed (%s): the "
              "job must restart from its checkpoint\n",
              rank, s, resihp_strerror(rc));
      resihp_comm_destroy(comm);
      return 1;
    }
    double loss = apply(m, s, fb);
    if (rank == 0 && !c->quiet && c->print_every > 0 &&
        (s % c->print_every == 0 || s == c->steps - 1)) {
      printf("step %ld loss %.4f\n", s, loss);
      fflush(stdout); /* progress as it goes (the node-failure bench
                       * kills a node when the job reaches a step) */
    }
    if (rank == 0 && c->ckpt_every > 0 && (s + 1) % c->ckpt_every == 0 &&
        save_ckpt(m, s + 1))
      fprintf(stderr, "trainer: cannot write a checkpoint\n");
  }
  resihp_comm_destroy(comm);
  if (rank == 0) {
    printf(
        "training done: final checksum %016llx\n",
        (unsigned long long)trainer_fnv1a(m->state, 2 * m->P * sizeof(float)));
    char done[4096];
    snprintf(done, sizeof(done), "%s/done", c->ckpt_dir);
    FILE *d = fopen(done, "w");
    if (d)
      fclose(d);
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: resihp-trainer [--steps N] [--microbatches M] [--batch B]\n"
      "       [--hidden H] [--embed D] [--vocab V] [--classes C] [--lr X]\n"
      "       [--momentum X] [--seed S] [--mb-ms MS | --mb-work KOPS]\n"
      "       [--print-every N] [--data fixed|longtail|packed] [--tokens N]\n"
      "       [--quiet]\n"
      "       [--reference | --checkpoint DIR --checkpoint-every K "
      "[--die-at S,S..]]\n"
      "       [--abort-at STEP[:REPLICA]]\n"
      "Run under resihp-run (see resihp-run(1)); prints the checksum of the\n"
      "final parameters. --mb-ms is the mean simulated compute of a\n"
      "microbatch, scaled by its tokens and squared lengths: a sleep, which\n"
      "a SIGSTOP/SIGCONT duty cycle slows but a CPU quota (cgroup cpu.max,\n"
      "a neighbour taking the core) does not. --mb-work KOPS computes\n"
      "instead: the mean microbatch does KOPS thousand multiply-adds (so\n"
      "scaled), which anything taking CPU time away slows, as it would a\n"
      "real model: the way to test slowdowns by CPU quota or load (about\n"
      "1000 KOPS take 1-4 ms on a current core). --tokens is the token\n"
      "budget of a packed microbatch (default 64 x --batch).\n"
      "--abort-at (tests): replica REPLICA (default 0) stops the whole run\n"
      "at the begin of step STEP with resihp_job_abort and exits 1.\n");
}

int main(int argc, char **argv) {
  model_t m = {.c = {.V = 64,
                     .D = 16,
                     .H = 32,
                     .C = 8,
                     .B = 8,
                     .M = 12,
                     .steps = 40,
                     .lr = 0.2,
                     .momentum = 0.9,
                     .seed = 1,
                     .mb_ms = 2,
                     .print_every = 10,
                     .abort_step = -1}};
  static const struct option lo[] = {{"steps", 1, 0, 's'},
                                     {"microbatches", 1, 0, 'M'},
                                     {"batch", 1, 0, 'B'},
                                     {"hidden", 1, 0, 'H'},
                                     {"embed", 1, 0, 'D'},
                                     {"vocab", 1, 0, 'V'},
                                     {"classes", 1, 0, 'C'},
                                     {"lr", 1, 0, 'l'},
                                     {"momentum", 1, 0, 'u'},
                                     {"seed", 1, 0, 'S'},
                                     {"mb-ms", 1, 0, 'w'},
                                     {"mb-work", 1, 0, 'W'},
                                     {"print-every", 1, 0, 'p'},
                                     {"quiet", 0, 0, 'q'},
                                     {"checkpoint", 1, 0, 'k'},
                                     {"checkpoint-every", 1, 0, 'K'},
                                     {"die-at", 1, 0, 'd'},
                                     {"abort-at", 1, 0, 'A'},
                                     {"data", 1, 0, 'T'},
                                     {"tokens", 1, 0, 'N'},
                                     {"reference", 0, 0, 'r'},
                                     {"help", 0, 0, 'h'},
                                     {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (o) {
    case 's':
      m.c.steps = atol(optarg);
      break;
    case 'M':
      m.c.M = atoi(optarg);
      break;
    case 'B':
      m.c.B = atoi(optarg);
      break;
    case 'H':
      m.c.H = atoi(optarg);
      break;
    case 'D':
      m.c.D = atoi(optarg);
      break;
    case 'V':
      m.c.V = atoi(optarg);
      break;
    case 'C':
      m.c.C = atoi(optarg);
      break;
    case 'l':
      m.c.lr = atof(optarg);
      break;
    case 'u':
      m.c.momentum = atof(optarg);
      break;
    case 'S':
      m.c.seed = strtoull(optarg, NULL, 10);
      break;
    case 'w':
      m.c.mb_ms = atoi(optarg);
      break;
    case 'W': {
      char *end;
      m.c.mb_kops = strtod(optarg, &end);
      if (*end || end == optarg || !(m.c.mb_kops > 0 && m.c.mb_kops <= 1e9)) {
        fprintf(stderr,
                "resihp-trainer: --mb-work wants thousands of operations per "
                "mean microbatch (> 0), not '%s'\n",
                optarg);
        return 2;
      }
      break;
    }
    case 'p':
      m.c.print_every = atoi(optarg);
      break;
    case 'q':
      m.c.quiet = 1;
      break;
    case 'k':
      m.c.ckpt_dir = optarg;
      break;
    case 'K':
      m.c.ckpt_every = atoi(optarg);
      break;
    case 'd':
      m.c.die_at = optarg;
      break;
    case 'A': {
      char *end;
      m.c.abort_step = strtol(optarg, &end, 10);
      m.c.abort_replica =
          *end == ':' && end[1] ? (int)strtol(end + 1, &end, 10) : 0;
      if (*end || end == optarg || m.c.abort_step < 0 ||
          m.c.abort_replica < 0) {
        fprintf(stderr,
                "resihp-trainer: --abort-at wants STEP or STEP:REPLICA (both "
                ">= 0), not '%s'\n",
                optarg);
        return 2;
      }
      break;
    }
    case 'T':
      if (trainer_data_kind(optarg) < 0) {
        fprintf(stderr,
                "resihp-trainer: --data wants fixed, longtail or packed, not "
                "'%s'\n",
                optarg);
        return 2;
      }
      m.c.data.kind = (trainer_data_kind_t)trainer_data_kind(optarg);
      break;
    case 'N':
      m.c.data.budget = atoi(optarg);
      if (m.c.data.budget < TRAINER_LONG_MIN || m.c.data.budget > 1 << 20) {
        fprintf(stderr,
                "resihp-trainer: --tokens wants a token budget from %d to "
                "%d, not '%s'\n",
                TRAINER_LONG_MIN, 1 << 20, optarg);
        return 2;
      }
      break;
    case 'r':
      m.c.reference = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (m.c.steps < 1 || m.c.M < 1 || m.c.B < 1 || m.c.H < 1 || m.c.H > 256 ||
      m.c.D < 1 || m.c.D > 256 || m.c.C < 2 || m.c.C > 64 || m.c.V < m.c.C ||
      m.c.mb_ms < 0) {
    fprintf(stderr, "resihp-trainer: bad sizes (hidden/embed <= 256, "
                    "2 <= classes <= 64 <= vocab)\n");
    return 2;
  }
  if (m.c.B > 1 << 16 || (m.c.reference && m.c.ckpt_dir)) {
    fprintf(stderr, "resihp-trainer: --batch is at most 65536, and "
                    "--reference and --checkpoint do not go together\n");
    return 2;
  }
  if (!m.c.data.budget)
    m.c.data.budget = 64 * m.c.B;
  init_model(&m);
  int rc = m.c.reference  ? run_reference(&m)
           : m.c.ckpt_dir ? run_checkpointed(&m)
                          : run_resilient(&m);
  free(m.state);
  free(m.grad);
  free(m.acc);
  trainer_mb_free(&m.mb);
  trainer_mb_free(&m.scratch);
  trainer_mb_free(&m.wl.scratch);
  trainer_mbstats_free(&m.times);
  return rc;
}
