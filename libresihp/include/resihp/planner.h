/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp planner: hybrid-parallel layout, layer partition and microbatch
 * quotas for a cluster whose devices may be slow or failed, and the choice of
 * how to react when one device degrades.
 *
 * Units everywhere: time in milliseconds (ms) unless a name says _s, memory
 * in GB, bandwidth in GB/s, message sizes in MB (so MB / (GB/s) = ms).
 *
 * Cost model (the planner minimises it; resihp-plan(1) documents it too).
 * A layout has TP degree t (a power of two, a TP group never spans nodes),
 * PP degree p and DP degree d. A TP group runs at the speed of its slowest
 * member. For a stage s of one replica holding layers [a, b):
 *   T_s = sum(layer_ms[a..b)) / (t * speed_s) + (b - a) * c_tp
 *   c_tp = t > 1 ? 2 (t-1)/t * tp_mb / nvlink_gbs + 4 nvlink_lat : 0
 * A replica running m microbatches with 1F1B costs
 *   pipe(m) = m > 0 ? fill + (m - 1) * step : 0
 *   fill = sum_s T_s + (p - 1) c_pp,  step = max_s T_s + (p > 1 ? c_pp : 0)
 *   c_pp = 2 * boundary_mb / t / net_gbs + 2 net_lat   (activation + grad)
 * and the iteration costs max over replicas of pipe(quota_r) plus the
 * gradient all-reduce across replicas (ring bandwidth term, log-depth
 * latency term, as if shards were balanced):
 *   c_dp = d > 1 ? 2 (d-1)/d * G / (p t) / net_gbs + 2 ceil(log2 d) net_lat
 *   G = grad_fraction * sum(layer_mem_gb) * 1000 (MB)
 * Memory of a device in stage s (0-based) must fit its capacity:
 *   (sum(layer_mem_gb[a..b)) + (b - a) * act_gb * (p - s)) / t
 * ((p - s) microbatches are in flight at stage s under 1F1B).
 * The global microbatch count per iteration is a constant of the model:
 * quotas always sum to it, whatever fails.
 *
 * Ownership: input structs are the caller's and are only read during the
 * call; a plan copies what it needs and owns all its memory;
 * resihp_plan_destroy(NULL) is fine.
 */
#ifndef RESIHP_PLANNER_H
#define RESIHP_PLANNER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resihp_plan_device {
  int node;      /* node index; TP groups are formed within one node */
  double speed;  /* 1.0 healthy, 0.7 = 30 % slow, 0 = failed */
  double mem_gb; /* usable device memory */
} resihp_plan_device_t;

typedef struct resihp_plan_cluster {
  int ndevices;
  const resihp_plan_device_t *devices; /* ndevices entries */
  int spare_nodes;   /* healthy hot-spare nodes outside the plan */
  double nvlink_gbs; /* per-GPU bandwidth inside a node (TP) */
  double net_gbs;    /* per-GPU bandwidth between nodes (PP, DP) */
  double nvlink_lat_us;
  double net_lat_us;
} resihp_plan_cluster_t;

typedef struct resihp_plan_model {
  int layers;
  const double *layer_ms;     /* fwd+bwd of one microbatch, t=1, speed 1 */
  const double *layer_mem_gb; /* weights + grads + optimizer state, t=1 */
  double act_gb;      /* activations kept per layer per in-flight microbatch */
  double boundary_mb; /* activation crossing a stage boundary, per microbatch */
  double tp_mb;       /* bytes all-reduced inside TP per layer and microbatch */
  double grad_fraction; /* gradient / layer_mem bytes (bf16, Adam: 1/8) */
  int microbatches;     /* global microbatches per iteration (kept constant) */
} resihp_plan_model_t;

typedef struct resihp_plan_opts {
  int max_tp; /* 0: GPUs of the largest node */
  int max_pp; /* 0: number of layers */
  int tp, pp; /* 0: choose; otherwise fixed */
} resihp_plan_opts_t;

/* Defaults: H100-class links (NVLink 300 GB/s, 50 GB/s network, 5/10 us). */
void resihp_plan_cluster_init(resihp_plan_cluster_t *c);
/* Zero model with grad_fraction 1/8. */
void resihp_plan_model_init(resihp_plan_model_t *m);
void resihp_plan_opts_init(resihp_plan_opts_t *o);

typedef struct resihp_plan resihp_plan_t;

/* Choose the layout of minimum predicted iteration time. On success *out is
 * a new plan the caller frees with resihp_plan_destroy. RESIHP_EINVAL for a
 * malformed description, RESIHP_EINFEASIBLE when no layout fits (too few
 * healthy devices, model larger than memory, fixed tp/pp impossible). */
int resihp_plan_create(const resihp_plan_cluster_t *cluster,
                       const resihp_plan_model_t *model,
                       const resihp_plan_opts_t *opts, resihp_plan_t **out);
void resihp_plan_destroy(resihp_plan_t *plan);

int resihp_plan_tp(const resihp_plan_t *plan);
int resihp_plan_pp(const resihp_plan_t *plan);
int resihp_plan_dp(const resihp_plan_t *plan);
/* Predicted iteration time and its data-parallel all-reduce part. */
double resihp_plan_iter_ms(const resihp_plan_t *plan);
double resihp_plan_dp_ms(const resihp_plan_t *plan);
/* Microbatches of replica r (0 <= r < dp); -1 if r is out of range. */
int resihp_plan_quota(const resihp_plan_t *plan, int replica);
/* Layers of stage s of replica r (stages hold consecutive layers in stage
 * order); -1 if out of range. */
int resihp_plan_stage_layers(const resihp_plan_t *plan, int replica, int stage);
/* Speed of the TP group running a stage (minimum of its members); memory it
 * uses and its capacity per device (GB). Negative if out of range. */
double resihp_plan_stage_speed(const resihp_plan_t *plan, int replica,
                               int stage);
double resihp_plan_stage_mem_gb(const resihp_plan_t *plan, int replica,
                                int stage);
double resihp_plan_stage_cap_gb(const resihp_plan_t *plan, int replica,
                                int stage);
/* Predicted time of replica r's pipeline with its quota. */
double resihp_plan_replica_ms(const resihp_plan_t *plan, int replica);
/* Where device i runs. RESIHP_ENOENT when the plan leaves it idle (failed,
 * or left over); any out pointer may be NULL. */
int resihp_plan_device_slot(const resihp_plan_t *plan, int device, int *replica,
                            int *stage, int *tp_rank);

/* --- Building blocks (used by the planner, resihp-sim and tests) --- */

/* Best contiguous partition of the model's layers over pp stages whose TP
 * groups (tp devices each) have the given speeds and per-device memory
 * capacities, for a replica expected to run `microbatches` microbatches.
 * Writes pp layer counts (each >= 1) and the replica's fill/step (see cost
 * model). RESIHP_EINFEASIBLE if no partition fits in memory. */
int resihp_planner_partition(const resihp_plan_cluster_t *cluster,
                             const resihp_plan_model_t *model, int tp, int pp,
                             const double *stage_speed,
                             const double *stage_cap_gb, int microbatches,
                             int *layers_out, double *fill_ms, double *step_ms);

/* Fill/step of a replica with a given partition (no memory check). */
void resihp_planner_replica_cost(const resihp_plan_cluster_t *cluster,
                                 const resihp_plan_model_t *model, int tp,
                                 int pp, const double *stage_speed,
                                 const int *layers, double *fill_ms,
                                 double *step_ms);

/* Gradient all-reduce time across dp replicas (cost model c_dp). */
double resihp_planner_dp_ms(const resihp_plan_cluster_t *cluster,
                            const resihp_plan_model_t *model, int tp, int pp,
                            int dp);

/* A set of `count` identical replicas for the quota solver. */
typedef struct resihp_replica_class {
  double fill_ms, step_ms; /* in: pipeline cost of one replica */
  int count;               /* in: replicas in the class (0 allowed) */
  int quota;               /* out: microbatches of each replica ... */
  int n_extra;             /* out: ... and this many of them get quota + 1 */
} resihp_replica_class_t;

/* Split `microbatches` over the replicas so that the slowest finishes as
 * early as possible (exact integer optimum). Writes quota/n_extra per class
 * and the resulting pipeline time (without c_dp) to *time_ms.
 * RESIHP_EINFEASIBLE if there is no replica. */
int resihp_planner_quotas(resihp_replica_class_t *classes, int nclasses,
                          int microbatches, double *time_ms);

/* --- One step's microbatches over the live replicas --- */

typedef enum {
  RESIHP_ASSIGN_EVEN,  /* equal counts in contiguous blocks: no adaptation */
  RESIHP_ASSIGN_COUNT, /* counts by speed (resihp_planner_quotas), blocks */
  RESIHP_ASSIGN_COST,  /* by predicted cost: longest first, each to the
                          replica that would finish it first */
} resihp_assign_mode_t;

/* "even", "count", "cost"; and back (-1 for an unknown name). */
const char *resihp_assign_mode_name(resihp_assign_mode_t m);
int resihp_assign_mode_lookup(const char *name);

/* Give each of the n microbatches to one of the r replicas: owner[i] in
 * [0, r). cost[i] > 0 is microbatch i's predicted time on a healthy
 * replica (NULL: all equal); slow[j] >= 1 is replica j's time multiplier
 * (NULL: all 1). Every microbatch gets exactly one owner whatever the
 * inputs (non-finite or non-positive figures count as 1), so the
 * constant-microbatch invariant never depends on a prediction. The result
 * is a function of the inputs only (ties go to the lower index): every
 * process computing it gets the same assignment. *makespan_out (may be
 * NULL) gets the predicted time of the slowest replica. O(n log n + n r)
 * time; RESIHP_EINVAL for n < 0 or r < 1, RESIHP_ENOMEM. */
int resihp_planner_assign(resihp_assign_mode_t mode, const double *cost, int n,
                          const double *slow, int r, int *owner,
                          double *makespan_out);

/* Seconds a swap for a spare saves over the remaining steps for a data-
 * parallel job of r replicas, one of them `factor` times slower (>= 1),
 * its microbatches balanced by speed (the others absorb the difference),
 * healthy step time step_s: the replica is out for swap_s seconds while the
 * other r-1 carry the step, then all r run at full speed. Negative: the
 * swap does not pay back. */
double resihp_planner_swap_gain_s(int r, double factor, double step_s,
                                  double remaining_steps, double swap_s);

/* --- Escalation for one degraded device --- */

typedef enum {
  RESIHP_ESC_ABSORB,      /* keep layout, move microbatches (quotas) */
  RESIHP_ESC_REPARTITION, /* move layers off the slow stage, then quotas */
  RESIHP_ESC_REGROUP,     /* drop the device from its TP group (t -> t/2) */
  RESIHP_ESC_SPARE,       /* replace its node by a hot spare */
  RESIHP_ESC_RELAUNCH,    /* relaunch the replica's step on the same nodes */
  RESIHP_ESC__COUNT
} resihp_escalation_t;

/* Switching costs and horizon; documented defaults from
 * resihp_escalation_costs_init (see resihp-plan(1)). */
typedef struct resihp_escalation_costs {
  double horizon_iters;  /* iterations over which options are compared */
  double quota_switch_s; /* stall to install new quotas */
  double repartition_s;  /* stall to rebuild pipeline links (+ layer moves) */
  double regroup_s;      /* stall to rebuild TP communicators (+ moves) */
  double spare_swap_s;   /* replica offline while a spare takes over */
  double relaunch_s;     /* replica offline while its step restarts */
  double relaunch_cure;  /* probability a relaunch clears the fault */
} resihp_escalation_costs_t;

void resihp_escalation_costs_init(resihp_escalation_costs_t *c);

typedef struct resihp_escalation_option {
  resihp_escalation_t kind;
  int feasible;     /* 0: not possible here (then the figures are 0) */
  double switch_s;  /* whole-job stall to switch */
  double offline_s; /* time the affected replica is out (others go on) */
  double during_ms; /* iteration time while it is out */
  double iter_ms;   /* iteration time once settled (expected) */
  double total_s;   /* predicted time for horizon_iters iterations */
} resihp_escalation_option_t;

/* Options for device `device` of the plan's cluster now running at
 * new_speed (0 = failed), the other devices as planned. Fills out[k] for
 * every kind k and *best with the feasible option of least total_s.
 * RESIHP_EINVAL on bad arguments. A device the plan leaves idle yields
 * ABSORB at no cost. */
int resihp_plan_escalate(const resihp_plan_t *plan, int device,
                         double new_speed,
                         const resihp_escalation_costs_t *costs,
                         resihp_escalation_option_t out[RESIHP_ESC__COUNT],
                         resihp_escalation_t *best);

/* "absorb", "repartition", "regroup", "spare", "relaunch"; never NULL. */
const char *resihp_escalation_name(resihp_escalation_t kind);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_PLANNER_H */
