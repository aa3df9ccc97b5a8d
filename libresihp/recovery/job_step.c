/* SPDX-License-Identifier: BSD-3-Clause */
/* Step boundaries (see resihp/job.h and control/coordinator.h).
 *
 * The leader says BEGIN and reads the coordinator's answers; GO, START and
 * DONE are relayed verbatim to the replica's other ranks, so that all K
 * ranks act on the same lines in the same order:
 *
 *   GO new=1   every rank re-creates its shard group for the epoch (the
 *              k-th address of each member in members=r@a/b,...), the K
 *              ranks add up their failures, and the leader answers READY
 *              or RESYNC for the replica;
 *   START      the step's microbatches; catchup=1: every rank receives its
 *              shard (job_catchup.c) and the K ranks agree whether all
 *              did; serve=r.k@ep,...: rank k of this replica sends shard k
 *              to replica r from a thread while it computes;
 *   DONE       training is over.
 *
 * Free-running. START run=1 says the coordinator needs nothing of the
 * following boundaries: nobody waits to join, nothing is caught up, the
 * assignment stays the same. The job then says no BEGIN: at the end of
 * each step (resihp__job_free_boundary, from resihp_job_end_step) every
 * rank adds up over its shard group, then over its replica, whether the
 * next step needs the coordinator: its leader heard a line other than HB
 * (HOLD: a joiner, a stop, a death the coordinator learnt of), the run is
 * at its last step, this step was recovered, a fault is planned for the
 * next step or the node failed a periodic probe. Every rank of every
 * member gets the same sum (a failed sum counts as non-zero: the fault-
 * tolerant all-reduce fails on every survivor or on none), so they all go
 * on with the same microbatch list, or all say BEGIN at the same step.
 * Meanwhile the coordinator hears, at most about once a second, PROG
 * step=s (from the leader of the first member: steps before s are
 * committed) and PERF (the steps the same sum picked, on every rank).
 *
 * By cost. A START run=1 may carry a cost plan (control/costplan.c): then
 * at each boundary, before the vote, every rank asks the data loader for
 * the next step's workloads, assigns them with the plan (the coordinator's
 * own function: every rank gets the same owners) and takes its
 * replica's microbatches; a rank that cannot (no workload function, one
 * that fails, a workload the model cannot cost, the plan unreadable, the
 * log of owners full) votes to end the run, so that the next step goes
 * through the coordinator: nobody ever goes on with a different list.
 * Each leader logs the owners of the run's steps and sends them with the
 * BEGIN that ends the run and with RECOVER; the first member's leader
 * also with PROG, those since its last one (coord_schedule.c).
 *
 * Every agreement among the K ranks is an exact sum over the replica
 * communicator (resihp__job_replica_sum), called by all K ranks at the same
 * points because they follow the same lines. */
#include "config.h"

#include "job_internal.h"
#include "job_members.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* on_start: the catch-up failed, wait to be admitted again */
#define CATCHUP_AGAIN 1
/* on_start: a START for a step this replica is past */
#define STALE 2

/* The other ranks' columns of GO's list (col_eps, job_groups.c), kept
 * while the members' partitions differ (GO's lparts= names more than
 * one): from the whole list, or as the change to the columns held of the
 * last epoch (old ids, nold of them); a change without them is refused,
 * and the rank's RESYNC gets the whole list. 0, or RESIHP_EPROTO /
 * RESIHP_ENOMEM (nothing held then). */
static int other_columns(resihp_job_t *j, const char *list, const int *old,
                         int nold, const int *ids, int n) {
  char *lp = malloc(RESIHP__JOB_MSG_MAX);
  if (!lp)
    return RESIHP_ENOMEM;
  int differ = !resihp__wire_get(j->msg, "lparts", lp, RESIHP__JOB_MSG_MAX) &&
               strchr(lp, ',');
  /* a replica that shrank (control/coord_shrink.c) has fewer ranks than
   * the others' partitions: the columns of all of theirs */
  int nc = differ ? resihp__lparts_max_ranks(lp, RESIHP__JOB_MAX_SHARDS) : 1;
  free(lp);
  if (nc < j->lsize)
    nc = j->lsize;
  int held = j->col_eps != NULL, rc = 0, nheld = j->ncols;
  if (!differ || nc == 1) {
    resihp__job_cols_free(j);
    return 0;
  }
  resihp__job_ep_t **cols = calloc((size_t)nc, sizeof(*cols));
  if (!cols)
    return RESIHP_ENOMEM;
  for (int k = 0; k < nc && !rc; k++) {
    if (k == j->lrank)
      continue;
    int *kids = NULL, kn = 0;
    if (list)
      rc = resihp__job_members_parse(list, k, &kids, &cols[k], &kn);
    else if (!held || k >= nheld) /* (no base: the whole list, RESYNC) */
      rc = RESIHP_EPROTO;
    else
      rc = resihp__job_members_delta(
          j->msg, (long)j->epoch, old,
          (const resihp__job_ep_t *)j->col_eps[k], nold, k, &kids, &cols[k],
          &kn);
    if (!rc && (kn != n || memcmp(kids, ids, sizeof(int) * (size_t)n)))
      rc = RESIHP_EPROTO;
    free(kids);
  }
  resihp__job_cols_free(j);
  j->col_eps = cols;
  j->ncols = nc;
  if (rc)
    resihp__job_cols_free(j);
  return rc;
}

void resihp__job_cols_free(resihp_job_t *j) {
  for (int k = 0; j->col_eps && k < j->ncols; k++)
    free(j->col_eps[k]);
  free(j->col_eps);
  j->col_eps = NULL;
  j->ncols = 0;
}

/* The groups of an epoch: this rank's shard k of every member, from GO's
 * whole list (members=) or its change since the last epoch, and with
 * layers in different partitions the groups of this rank's runs
 * (job_groups.c). The list is kept even when the groups cannot be made
 * (the next GO may be a delta of it). */
static int setup_group(resihp_job_t *j, uint32_t epoch) {
  resihp__job_groups_destroy(j);
  j->vgen = 0;
  int *ids = NULL, n = 0, rc;
  resihp__job_ep_t *eps = NULL;
  char *list = malloc(RESIHP__JOB_MSG_MAX);
  if (!list)
    return RESIHP_ENOMEM;
  rc = resihp__wire_get(j->msg, "members", list, RESIHP__JOB_MSG_MAX);
  int whole = !rc;
  if (!rc)
    rc = resihp__job_members_parse(list, j->lrank, &ids, &eps, &n);
  else if (rc == RESIHP_ENOENT)
    rc = resihp__job_members_delta(j->msg, j->member_eps ? (long)j->epoch : -1,
                                   j->members,
                                   (const resihp__job_ep_t *)j->member_eps,
                                   j->nmembers, j->lrank, &ids, &eps, &n);
  if (!rc)
    rc = other_columns(j, whole ? list : NULL, j->members, j->nmembers, ids,
                       n);
  free(list);
  if (rc) {
    /* whatever list this rank held is no base for the next delta */
    free(ids);
    free(eps);
    free(j->member_eps);
    j->member_eps = NULL;
    resihp__job_cols_free(j);
    return rc;
  }
  free(j->members);
  free(j->member_eps);
  j->members = ids;
  j->member_eps = eps;
  j->nmembers = n;
  j->epoch = epoch;
  int me = -1;
  for (int i = 0; i < n; i++)
    if (ids[i] == j->replica)
      me = i;
  if (me >= 0)
    resihp__job_setup_fault(j);
  if (me < 0)
    return RESIHP_EPROTO;
  if ((rc = resihp__job_layers_go(j)))
    return rc;
  return resihp__job_groups_create(j, me, n, eps, j->col_eps);
}

/* The next control line: the leader reads the coordinator and relays what
 * its ranks act on; the others read the leader. */
static int next_line(resihp_job_t *j) {
  if (j->lrank > 0)
    return resihp__job_recv_up(j);
  int relayed = j->stash && j->stash_relayed;
  int rc = resihp__job_recv(j);
  if (rc || j->lsize == 1 || relayed)
    return rc;
  if (!strcmp(j->msg, "DONE") || !strncmp(j->msg, "GO ", 3) ||
      !strncmp(j->msg, "START ", 6) || !strncmp(j->msg, "SAVE ", 5))
    return resihp__job_send_down(j, j->msg);
  return 0;
}

/* GO: a new epoch's groups, if any; the leader says how it went. */
static int on_go(resihp_job_t *j) {
  long ep = 0, isnew = 0;
  if (resihp__wire_get_long(j->msg, "epoch", &ep) || ep < 0 ||
      ep > (long)UINT32_MAX || resihp__wire_get_long(j->msg, "new", &isnew))
    return RESIHP_EPROTO;
  if (!isnew)
    return 0;
  if (j->comm && ep <= (long)j->epoch) {
    /* stale: a coordinator that came back answered a request again whose
     * answer this replica already acted on (job_link.c) */
    resihp_log(RESIHP_LOG_DEBUG, "job",
               "replica %d rank %d: stale GO of epoch %ld", j->replica,
               j->lrank, ep);
    return 0;
  }
  int rc, src = setup_group(j, (uint32_t)ep);
  if (src && j->go_refused)
    return RESIHP_EINVAL; /* no new epoch helps: it leaves (job_layers.c) */
  if (src)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: group of epoch %ld not set up (%s)",
               j->replica, j->lrank, ep, resihp_strerror(src));
  int64_t failed = src != 0;
  if (j->lrank > 0) {
    /* to the leader, which watches the coordinator meanwhile (a rank
     * blocked in a sum with its leader would leave nobody to hear a new
     * epoch that ends the others' set-ups) */
    char l[64];
    snprintf(l, sizeof(l), "SETUP epoch=%ld failed=%d", ep, (int)failed);
    return resihp__job_send_up(j, l);
  }
  if (j->lsize > 1 &&
      (rc = resihp__job_setup_results(j, (uint32_t)ep, &failed)))
    return rc;
  char line[64];
  snprintf(line, sizeof(line), "%s epoch=%ld", failed ? "RESYNC" : "READY", ep);
  return resihp__job_send(j, line);
}

/* The step is on: fire any fault injected for it, then tell the caller
 * its microbatches. */
static int enter_step(resihp_job_t *j, resihp_job_step_t *st, long s, int cu) {
  resihp__job_maybe_fire(j, s);
  j->in_step = 1;
  j->recovered = 0;
  j->st = st;
  st->step = s;
  st->catching_up = cu;
  st->nmbs = j->nmbs;
  st->mbs = j->mbs;
  st->epoch = j->epoch;
  st->nreplicas = resihp_comm_size(j->comm);
  st->layers_moved = j->moving;
  if (cu) {
    st->catchup_bytes = j->state_len;
    st->catchup_seconds = (double)j->catchup_ms / 1000.0;
  }
  return 0;
}

/* START with catchup=1: every rank receives its shard; all or none. */
static int catch_up(resihp_job_t *j, long s) {
  if (!j->nstate)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: catching up but no state was registered "
               "(resihp_job_set_state_list)",
               j->replica);
  int rc = resihp__job_receive_state(j, s - 1);
  if (rc)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: catch-up at step %ld failed (%s)",
               j->replica, j->lrank, s, resihp_strerror(rc));
  int64_t failed = rc != 0;
  if ((rc = resihp__job_replica_sum(j, &failed, 1)))
    return rc;
  if (!failed)
    return 0;
  resihp__job_receive_reset(j);
  /* leave the groups: the survivors shrink without this replica, and the
   * coordinator admits it again with another source */
  if (j->lrank == 0) {
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: catch-up failed; leaving the group to be admitted "
               "again",
               j->replica);
    if ((rc = resihp__job_send(j, "CATCHUP_FAILED")))
      return rc;
  }
  resihp__job_groups_destroy(j);
  j->member = 0;
  return CATCHUP_AGAIN;
}

/* START: a free run by cost brings its plan (cby= cslow= cmod=); the log
 * of owners starts afresh (the coordinator knows everything before s). A
 * plan that cannot be taken ends the run at the first boundary. */
static void take_plan(resihp_job_t *j, long s) {
  int M = j->o.microbatches, maxid = 0, rc;
  j->cost_on = j->cost_bad = 0;
  j->olog_n = j->olog_sent = 0;
  j->olog_from = s + 1;
  if (!j->run)
    return;
  for (int i = 0; i < j->nmembers; i++)
    if (j->members[i] >= maxid)
      maxid = j->members[i] + 1;
  resihp__costplan_free(&j->cplan);
  if (!j->olog) {
    j->olog_cap = resihp__costplan_rows(M);
    j->olog = malloc(sizeof(int) * (size_t)j->olog_cap * (size_t)M);
    j->cwl = malloc(sizeof(resihp_workload_t) * (size_t)M);
    j->ccost = malloc(sizeof(double) * (size_t)M);
    j->cpick = malloc(sizeof(int) * (size_t)M);
  }
  int *mbs = realloc(j->mbs, sizeof(int) * (size_t)M);
  if (mbs)
    j->mbs = mbs;
  if (!mbs || !j->olog || !j->cwl || !j->ccost || !j->cpick)
    rc = RESIHP_ENOMEM;
  else {
    /* the coordinator's models, one per shard of the job: a replica shrunk
     * in place has fewer ranks, and assigns with them all the same (with
     * its own count it refused every plan: no step of it ran free) */
    int K = resihp__costplan_models(j->msg);
    if (!(rc = resihp__costplan_init(&j->cplan, j->nmembers ? j->nmembers : 1,
                                     K > 0 ? K : j->lsize)))
      rc = resihp__costplan_parse(j->msg, maxid, &j->cplan, j->members,
                                  j->nmembers);
  }
  if (rc == RESIHP_ENOENT)
    return; /* no plan: the same microbatches every step */
  j->cost_on = !rc;
  j->cost_bad = rc != 0;
  if (rc)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: the cost plan of step %ld cannot be taken "
               "(%s); the free run ends after this step",
               j->replica, j->lrank, s, resihp_strerror(rc));
}

static int on_start(resihp_job_t *j, resihp_job_step_t *st) {
  long s = -1, cu = 0;
  int rc;
  if (resihp__wire_get_long(j->msg, "step", &s) || s < 0)
    return RESIHP_EPROTO;
  if (j->valid_state && s <= j->step)
    return STALE; /* an answer again after a failover (job_link.c) */
  resihp__wire_get_long(j->msg, "catchup", &cu);
  long wl = 0, run = 0;
  resihp__wire_get_long(j->msg, "wl", &wl);
  resihp__wire_get_long(j->msg, "run", &run);
  j->wl_asked = wl == 1;
  j->run = run == 1 && !cu;
  /* until=T: a save is due at boundary T (coord_save.c), which needs the
   * coordinator; absent: only the last step ends the run by itself */
  j->run_until = LONG_MAX;
  long until = 0;
  if (!resihp__wire_get_long(j->msg, "until", &until) && until > s)
    j->run_until = until;
  if ((rc = resihp__job_parse_mbs(j, j->msg, "mbs", &j->mbs, &j->nmbs)))
    return rc;
  if (!j->comm)
    return RESIHP_EPROTO; /* a START without a group of ours */
  take_plan(j, s);
  j->nextra = 0;
  j->step = s;
  j->member = 1;
  if (cu) {
    if ((rc = catch_up(j, s)))
      return rc;
  } else if (!j->valid_state && resihp__job_resuming(j)) {
    /* a resumed run: the state of step s is on disk (job_save.c) */
    if ((rc = resihp__job_resume_load(j, s)))
      return rc;
  } else if (!j->valid_state && s > 0) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: asked to compute step %ld without a state",
               j->replica, s);
    return RESIHP_ESTATE;
  }
  j->valid_state = 1;
  char *serve = malloc(RESIHP__JOB_MSG_MAX);
  if (serve && !resihp__wire_get(j->msg, "serve", serve, RESIHP__JOB_MSG_MAX))
    resihp__job_serve_start(j, serve, s);
  free(serve);
  return enter_step(j, st, s, (int)cu);
}

/* A planned fault (not a slowdown) of this replica fires at step s: the
 * coordinator must be at that step to take its announcement. */
static int fault_planned(const resihp_job_t *j, long s) {
  for (int i = 0; i < j->ninj; i++)
    if (j->inj[i].kind != RESIHP__INJ_SLOW_RANK && !j->inj_fired[i] &&
        j->inj[i].replica == j->replica && j->inj[i].step == s)
      return 1;
  return 0;
}

/* Whether the coordinator (to the leader) or the leader (to the others)
 * said anything but heartbeats since the last boundary: HOLD, or the link
 * is gone. Read without waiting, and read at every boundary, or the
 * heartbeats would fill the socket over a long run. Nothing else can be on
 * these links here: GO, START, DONE and REASSIGN answer the leader's own
 * BEGIN or RECOVER. A leader's lost or silent coordinator link is no
 * reason to stop: it connects again (job_link.c) and the run goes on, so
 * that a failover changes no vote; only a reconnect that failed ends the
 * free run (its BEGIN then fails as before). */
static int coordinator_spoke(resihp_job_t *j) {
  resihp__wire_t *w = j->lrank > 0 ? &j->up : &j->cw;
  int said = 0, t, frc = w->fd < 0 ? RESIHP_ECLOSED : resihp__wire_fill(w);
  while (w->fd >= 0 &&
         (t = resihp__wire_take(w, j->msg, RESIHP__JOB_MSG_MAX))) {
    j->heard_ms = resihp__now_ms();
    if (t == 1 && !strcmp(j->msg, "HB"))
      continue;
    if (t == 1 && j->lrank == 0 && !strncmp(j->msg, "COORDS ", 7)) {
      resihp__job_on_coords(j, j->msg); /* news, not a boundary */
      continue;
    }
    said = 1;
    resihp_log(RESIHP_LOG_DEBUG, "job",
               "replica %d rank %d: '%.40s' at step %ld: the free run ends",
               j->replica, j->lrank, t == 1 ? j->msg : "(bad line)", j->step);
    if (t < 0)
      break;
  }
  if (j->lrank > 0)
    return said || frc < 0;
  if (!frc && j->heard_ms && resihp__now_ms() - j->heard_ms > j->timeout_ms)
    frc = RESIHP_ETIMEDOUT; /* a frozen coordinator: as good as gone */
  if (frc < 0 && !said)
    return resihp__job_reconnect(j, frc) != 0;
  return said || frc < 0;
}

/* A free run by cost: the owners of step s from the data loader's
 * workloads and the plan, into the next row of the log (not counted yet):
 * 0, or why not (the run must then end). */
static int cost_owners(resihp_job_t *j, long s) {
  int M = j->o.microbatches;
  if (j->olog_n >= j->olog_cap)
    return RESIHP_ERANGE; /* the run is as long as its report may be */
  int rc = resihp__job_workloads(j, s, j->cwl);
  if (!rc)
    rc = resihp__costplan_owners(&j->cplan, j->cwl, M, j->ccost, j->cpick,
                                 j->olog + (size_t)j->olog_n * (size_t)M);
  if (rc)
    resihp_log(RESIHP_LOG_DEBUG, "job",
               "replica %d rank %d: step %ld cannot be assigned by cost here "
               "(%s): the free run ends",
               j->replica, j->lrank, s, resihp_strerror(rc));
  return rc;
}

void resihp__job_put_owners(const resihp_job_t *j, resihp__wire_buf_t *b,
                            int from, long to) {
  long n = to - j->olog_from;
  if (n > j->olog_n)
    n = j->olog_n;
  if (!j->cost_on || from < 0 || n <= from)
    return;
  int M = j->o.microbatches;
  resihp__wire_buf_printf(b, " ofrom=%ld own=", j->olog_from + from);
  resihp__wire_buf_ints(b, j->olog + (size_t)from * (size_t)M,
                        (int)(n - from) * M);
}

void (*resihp__job_boundary_hook)(long step);

int resihp__job_free_boundary(resihp_job_t *j) {
  if (!j->run)
    return 0;
  j->run = 0; /* on any error, the next step goes through the coordinator */
  /* [0]: the next step needs the coordinator; [1]: samples are due */
  int64_t v[2] = {0, 0}, now = resihp__now_ms();
  v[0] = coordinator_spoke(j) || j->step + 1 >= j->o.steps ||
         j->step + 1 >= j->run_until || j->recovered ||
         fault_planned(j, j->step + 1);
  int rc;
  if (!v[0] && (rc = resihp__job_check_probes(j))) {
    j->probe_rc = rc; /* FAULT said; begin_step returns it */
    v[0] = 1;
  }
  /* by cost: every rank computes the next step's owners now, and any
   * that cannot ends the run for all */
  if (!v[0] && (j->cost_bad || (j->cost_on && cost_owners(j, j->step + 1))))
    v[0] = 1;
  v[1] = now - j->last_perf_ms >= resihp__job_report_ms(j->nmembers, j->lsize);
  /* in each of the rank's groups (the K ranks hold every run once: the
   * replica's sum of the groups' sums is the same on every replica) */
  int64_t sum[2] = {0, 0}, broke = 0;
  for (int g = 0; g < resihp__job_ngroups(j); g++) {
    resihp_comm_t *c = resihp__job_group(j, g);
    int64_t w[2] = {v[0], v[1]};
    if (!(rc = resihp_allreduce(c, w, 2, RESIHP_FIXED64, RESIHP_OP_SUM))) {
      sum[0] += w[0];
      sum[1] += w[1];
      continue;
    }
    /* A member died after the step committed (its part of the step was
     * complete, or the step would have failed): the survivors agree on who
     * is left, and the coordinator, which learns of the death itself,
     * makes the next epoch without it. */
    int failed[64], nf = 0;
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT && rc != RESIHP_EPROTO)
      return rc;
    if ((rc = resihp_comm_shrink(c, NULL, 0, failed, 64, &nf))) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: lost its group after step %ld (%s); leaving",
                 j->replica, j->step, resihp_strerror(rc));
      return rc;
    }
    broke = 1;
  }
  v[0] = broke ? 1 : sum[0];
  v[1] = broke ? 1 : sum[1];
  if (resihp__job_boundary_hook)
    resihp__job_boundary_hook(j->step);
  if ((rc = resihp__job_replica_sum(j, v, 2)))
    return rc;
  j->run = v[0] == 0;
  if (j->run && j->cost_on) {
    /* the next step's microbatches: this replica's of the row */
    const int *row = j->olog + (size_t)j->olog_n++ * (size_t)j->o.microbatches;
    j->nmbs = 0;
    for (int mb = 0; mb < j->o.microbatches; mb++)
      if (row[mb] == j->replica)
        j->mbs[j->nmbs++] = mb;
  }
  j->perf_due = !j->run || v[1] > 0;
  if (j->perf_due)
    j->last_perf_ms = now;
  return 0;
}

/* The next step of a free run: the same microbatches and group, the
 * samples when due, PROG now and then from the first member's leader. */
static int free_step(resihp_job_t *j, resihp_job_step_t *st) {
  int64_t now = resihp__now_ms();
  if (j->perf_due)
    resihp__job_send_perf(j);
  if (j->lrank == 0 && j->nmembers > 0 && j->members[0] == j->replica &&
      now - j->last_prog_ms >= RESIHP__JOB_REPORT_MS) {
    /* by cost, with the owners of the steps since the last PROG */
    resihp__wire_buf_t b;
    resihp__wire_buf_init(&b);
    resihp__wire_buf_printf(&b, "PROG step=%ld", j->step + 1);
    resihp__job_put_owners(j, &b, j->olog_sent, j->step + 1);
    j->last_prog_ms = now;
    int rc = b.err ? b.err : resihp__job_send(j, b.s);
    resihp__wire_buf_free(&b);
    if (rc)
      return rc;
    if (j->cost_on && j->step + 1 - j->olog_from > j->olog_sent)
      j->olog_sent = (int)(j->step + 1 - j->olog_from);
  }
  j->nextra = 0;
  j->step++;
  return enter_step(j, st, j->step, 0);
}

int resihp_job_begin_step(resihp_job_t *j, resihp_job_step_t *st) {
  if (!j || !st)
    return RESIHP_EINVAL;
  if (j->in_step) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "resihp_job_begin_step: step %ld was not ended", j->step);
    return RESIHP_ESTATE;
  }
  resihp__job_serve_reap(j);
  memset(st, 0, sizeof(*st));
  j->began = 1; /* the layers' partition is fixed from here */
  if (j->replica_lost)
    return j->replica_lost;
  int rc = j->probe_rc;
  j->probe_rc = 0;
  if (rc)
    return rc;
  if (j->run)
    return free_step(j, st);
  rc = resihp__job_check_probes(j);
  if (rc)
    return rc;
  resihp__job_send_perf(j);
  if (j->lrank == 0) {
    /* the end of a free run by cost: the owners of all its steps */
    resihp__wire_buf_t b;
    resihp__wire_buf_init(&b);
    resihp__wire_buf_printf(&b, "BEGIN step=%ld", j->member ? j->step + 1 : -1);
    resihp__job_put_lay(j, &b);
    if (j->lstate_off) /* its state by layer: catch-up by layer */
      resihp__wire_buf_printf(&b, " lst=1");
    if (j->member)
      resihp__job_put_owners(j, &b, 0, j->step + 1);
    rc = b.err ? b.err : resihp__job_send(j, b.s);
    resihp__wire_buf_free(&b);
    if (rc)
      return rc;
  }
  for (;;) {
    if ((rc = next_line(j)))
      return rc;
    if (!strcmp(j->msg, "DONE")) {
      st->done = 1;
      st->step = j->step + 1;
      return 0;
    }
    if (!strncmp(j->msg, "SAVE ", 5)) {
      /* a save at this boundary (job_save.c); then GO or DONE */
      if ((rc = resihp__job_on_save(j)))
        return rc;
      continue;
    }
    if (!strncmp(j->msg, "GO ", 3)) {
      if ((rc = on_go(j)))
        return rc;
      continue;
    }
    if (!strncmp(j->msg, "NO ", 3)) {
      resihp_log(RESIHP_LOG_ERROR, "job", "replica %d rank %d: %s", j->replica,
                 j->lrank, j->msg);
      return RESIHP_ESTATE;
    }
    if (strncmp(j->msg, "START ", 6))
      continue; /* WELCOME and the like */
    rc = on_start(j, st);
    if (rc != CATCHUP_AGAIN && rc != STALE)
      return rc;
  }
}
