/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's protocol front end: what a connection may say and in
 * which order (see coordinator.h). A connection first says who it is
 * (HELLO from a replica's rank 0, SUBHELLO from one of its other ranks,
 * answered with LEADER, or SPARE from a spare agent, coord_spares.c); a
 * replica's connection then sends BEGIN, READY/RESYNC, RECOVER
 * (coord_rounds.c), FAULT, CATCHUP_FAILED and FINISH, or ABORT to stop the
 * run. Anything malformed is refused and its connection dropped, taking its
 * replica with it.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "../transport/msgauth.h"
#include "../transport/sha256.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* RESYNC reports one member may make in one step (a member that cannot
 * set up an epoch). */
#define RESYNCS_PER_STEP 8

/* Refuse a message from connection k: say why, then hang up if it was
 * malformed (the caller's loop sees the connection gone). */
void resihp__coord_refuse(resihp__coord_t *c, int k, const char *reason,
                          int hangup, const char *msg) {
  char line[96];
  logc(RESIHP_LOG_ERROR, "refused '%.120s' (%s)%s", msg, reason,
       hangup ? ": connection dropped" : "");
  snprintf(line, sizeof(line), "NO reason=%s", reason);
  resihp__wire_send(&c->conns[k].w, line, resihp__now_ms() + 1000);
  if (!hangup)
    return;
  /* a replica's connection: the replica goes with it (not the job) */
  int r = c->conns[k].replica;
  if (r >= 0)
    resihp__coord_fail_replica(c, r, "sent a malformed message");
  if (c->conns[k].w.fd >= 0)
    resihp__coord_close_conn(c, k);
}

/* Tell the waiting non-leader ranks of replica r where their leader is:
 * from its LEP (said before HELLO, while it gathers its ranks' addresses)
 * or its HELLO, for the ranks of the same Slurm step. */
static void answer_subs(resihp__coord_t *c, int r) {
  if (!c->subs_waiting)
    return; /* (every HELLO asks: replicas of one rank never wait) */
  int left = 0;
  for (int i = 0; i < c->nconns; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd < 0 || cn->sub_replica < 0)
      continue;
    if (cn->sub_replica != r) {
      left++;
      continue;
    }
    const char *lep = NULL;
    for (int l = 0; !lep && l < c->nconns; l++) {
      const conn_t *ln = &c->conns[l];
      if (ln->w.fd >= 0 && ln->lep_replica == r && ln->lep[0] &&
          ln->lep_stepid == cn->sub_stepid && ln->lep_jobid == cn->sub_jobid)
        lep = ln->lep;
    }
    const rep_t *p = &c->reps[r];
    if (!lep && p->lep[0] && p->conn >= 0 && p->stepid == cn->sub_stepid &&
        p->jobid == cn->sub_jobid)
      lep = p->lep;
    if (!lep) {
      left++;
      continue;
    }
    char line[160];
    snprintf(line, sizeof(line), "LEADER ep=%s", lep);
    resihp__wire_send(&cn->w, line, resihp__now_ms() + 1000);
    cn->sub_replica = -1;
  }
  c->subs_waiting = left;
}

/* SUBHELLO (a rank that waits for its leader's address) and LEP (a leader
 * that gives it): replica and Slurm step, so that the ranks of a step that
 * is gone never meet its successor's leader. */
static void on_subhello(resihp__coord_t *c, int k, const char *msg) {
  long r = -1, sid = -1, jid = -1;
  int lep = !strncmp(msg, "LEP ", 4);
  conn_t *cn = &c->conns[k];
  if (resihp__wire_get_range(msg, "replica", 0, c->R - 1, &r) ||
      resihp__wire_get_range(msg, "stepid", -1, LONG_MAX, &sid) ||
      resihp__wire_get_range(msg, "jobid", -1, LONG_MAX, &jid) ||
      (lep && (resihp__wire_get(msg, "lep", cn->lep, sizeof(cn->lep)) ||
               !resihp__wire_token_ok(cn->lep, sizeof(cn->lep))))) {
    cn->lep[0] = '\0';
    resihp__coord_refuse(c, k, lep ? "bad-lep" : "bad-subhello", 1, msg);
    return;
  }
  if (lep) {
    cn->lep_replica = (int)r;
    cn->lep_stepid = sid;
    cn->lep_jobid = jid;
  } else {
    c->subs_waiting += cn->sub_replica < 0;
    cn->sub_replica = (int)r;
    cn->sub_stepid = sid;
    cn->sub_jobid = jid;
  }
  answer_subs(c, (int)r);
}

/* An optional name: absent (out unchanged), or a plain token. */
static int opt_token(const char *msg, const char *key, char *out, size_t cap) {
  char v[128];
  int rc = resihp__wire_get(msg, key, v, sizeof(v));
  if (rc == RESIHP_ENOENT)
    return 0;
  if (rc || !resihp__wire_token_ok(v, cap))
    return RESIHP_EPROTO;
  memcpy(out, v, strlen(v) + 1); /* fits: token_ok checked the length */
  return 0;
}

void resihp__coord_send_coords(resihp__coord_t *c, int r) {
  if (c->coords_line)
    resihp__coord_again(c, resihp__coord_send_to(c, r, c->coords_line));
}

void resihp__coord_set_coords(resihp__coord_t *c, const char *eps) {
  char *line = NULL;
  if (eps && *eps) {
    size_t n = strlen(eps) + 16;
    if (!(line = malloc(n)))
      return; /* the old list stays: still right for the primary */
    snprintf(line, n, "COORDS eps=%s", eps);
  }
  if ((!line && !c->coords_line) ||
      (line && c->coords_line && !strcmp(line, c->coords_line))) {
    free(line);
    return;
  }
  free(c->coords_line);
  c->coords_line = line;
  logc(RESIHP_LOG_INFO, "the coordinator's addresses: %s",
       eps && *eps ? eps : "(none said)");
  for (int r = 0; line && r < c->R; r++)
    if (c->reps[r].conn >= 0)
      resihp__coord_send_coords(c, r);
}

/* HELLO ... again=1: a replica that lost its coordinator link (a failover,
 * coord_snapshot.c) comes back on connection k. The same process (replica
 * id, Slurm step, addresses) of a joiner or a member takes its place
 * again: 1. Anything else is an ordinary HELLO: 0. */
static int reattach(resihp__coord_t *c, int k, int r, long jobid, long stepid,
                    const char *ep, const char *sep, const char *msg) {
  rep_t *p = &c->reps[r];
  if ((p->state != R_MEMBER && p->state != R_JOINING) || p->jobid != jobid ||
      p->stepid != stepid || !p->ep || strcmp(p->ep, ep) || !p->sep ||
      strcmp(p->sep, sep) || c->state != RESIHP__COORD_RUNNING)
    return 0;
  /* its ids are no proof (every GO lists ep, a step id is easily
   * guessed): the credential of its WELCOME is */
  char cred[RESIHP__COORD_CRED_HEX + 1] = "";
  if (resihp__wire_get(msg, "cred", cred, sizeof(cred)) || !p->cred[0] ||
      strlen(cred) != RESIHP__COORD_CRED_HEX ||
      resihp__ct_memcmp(cred, p->cred, RESIHP__COORD_CRED_HEX)) {
    logc(RESIHP_LOG_ERROR,
         "a HELLO again=1 for replica %d without its credential: refused "
         "(its link stays)",
         r);
    return -1;
  }
  if (p->conn >= 0 && p->conn != k)
    resihp__coord_close_conn(c, p->conn); /* its old link, now dead */
  p->conn = k;
  c->conns[k].replica = r;
  p->last_life = resihp__now_ms();
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(
      &b, "WELCOME replica=%d step=%ld hb=%d again=1 term=%" PRIu32, r, c->step,
      c->hb_leader_ms, c->term);
  resihp__coord_put_lay(c, r, &b);
  resihp__coord_again(c, resihp__coord_send_buf_to(c, r, &b));
  resihp__wire_buf_free(&b);
  resihp__coord_send_coords(c, r);
  logc(RESIHP_LOG_INFO, "replica %d reconnected (step %ld)", r, c->step);
  /* a free run that must end: HOLD is said again (who heard it is not
   * mirrored; a restored coordinator sets held when a HOLD is due). It
   * follows from a state already mirrored (the first HOLD was sent after
   * the mirror, or held was restored), so it needs no mirror: N members
   * coming back must not make N snapshots of O(N) each. */
  if (c->phase == P_FREE && c->held && resihp__coord_is_member(c, r))
    resihp__coord_again(c, resihp__coord_send_to(c, r, "HOLD"));
  answer_subs(c, r);
  return 1;
}

/* Refuse replica r's HELLO for what its program runs (a configuration no
 * node can change): recorded for the launcher (resihp__coord_refused). */
static void refuse_program(resihp__coord_t *c, int k, long r,
                           const char *reason, const char *msg) {
  rep_t *p = &c->reps[r];
  snprintf(p->refused, sizeof(p->refused), "%s", reason);
  resihp__coord_refuse(c, k, reason, 1, msg);
}

/* HELLO: every field bounded, names and addresses plain tokens (they end
 * up inside lists that others parse), and the training the same as the
 * job's (the first HELLO sets it). */
static void on_hello(resihp__coord_t *c, int k, const char *msg) {
  /* a replica that obeys a newer term only (control/vouch.h): a standby
   * took over from this coordinator, which decides nothing more; the
   * replica is neither taken in nor counted (it tries its next address) */
  long term = 0;
  if (resihp__wire_get_range(msg, "term", 0, UINT32_MAX - 1, &term) == 0 &&
      (uint32_t)term > c->term) {
    if (!c->superseded)
      logc(RESIHP_LOG_WARN,
           "a replica obeys term %ld, newer than this coordinator's %" PRIu32
           ": a standby took over; this one decides nothing more",
           term, c->term);
    c->superseded = 1;
    resihp__coord_close_conn(c, k);
    return;
  }
  long r = -1, m = 0, s = 0, jobid = -1, stepid = -1, K = 1;
  char ep[RESIHP__COORD_EPS_MAX] = "", sep[RESIHP__COORD_EPS_MAX] = "";
  char node[64] = "?", lep[RESIHP__COORD_EP_MAX] = "-", shape[20] = "-";
  int maxm = resihp__wire_max_microbatches();
  if (resihp__wire_get_range(msg, "replica", 0, c->R - 1, &r) ||
      resihp__wire_get_long(msg, "mbs", &m) ||
      resihp__wire_get_range(msg, "steps", 1, MAX_STEPS, &s) ||
      resihp__wire_get_range(msg, "lsize", 1, RESIHP__COORD_MAX_SHARDS, &K) ==
          RESIHP_EPROTO ||
      resihp__wire_get(msg, "ep", ep, sizeof(ep)) ||
      !resihp__wire_list_ok(ep, (int)K, RESIHP__COORD_EP_MAX) ||
      resihp__wire_get(msg, "sep", sep, sizeof(sep)) ||
      !resihp__wire_list_ok(sep, (int)K, RESIHP__COORD_EP_MAX) || m < 1 ||
      opt_token(msg, "shape", shape, sizeof(shape)) ||
      opt_token(msg, "node", node, sizeof(node)) ||
      opt_token(msg, "lep", lep, sizeof(lep)) ||
      resihp__wire_get_range(msg, "jobid", -1, LONG_MAX, &jobid) ==
          RESIHP_EPROTO ||
      resihp__wire_get_range(msg, "stepid", -1, LONG_MAX, &stepid) ==
          RESIHP_EPROTO) {
    resihp__coord_refuse(c, k, "bad-hello", 1, msg);
    return;
  }
  if (m > maxm) {
    logc(RESIHP_LOG_ERROR,
         "replica %ld has %ld microbatches per step; at most %d fit in a "
         "message: use fewer, larger microbatches",
         r, m, maxm);
    refuse_program(c, k, r, "too-many-microbatches", msg);
    return;
  }
  /* GO lists every member's addresses: "r@ep," with r below 10^7 */
  if ((size_t)c->R * (strlen(ep) + 9) + RESIHP__WIRE_LIST_HEADROOM >
      RESIHP__WIRE_LINE_MAX) {
    logc(RESIHP_LOG_ERROR,
         "replica %ld: the member list of %d replicas with addresses like "
         "its %zu bytes would not fit in a %d-byte line: refused (use fewer "
         "replicas, fewer ranks per replica or shorter host names)",
         r, c->R, strlen(ep), RESIHP__WIRE_LINE_MAX);
    refuse_program(c, k, r, "too-many-replicas", msg);
    return;
  }
  if (c->S && (m != c->M || s != c->S)) {
    logc(RESIHP_LOG_ERROR,
         "replica %ld has %ld microbatches x %ld steps, the job %d x %ld: "
         "refused (every replica must run the same training)",
         r, m, s, c->M, c->S);
    refuse_program(c, k, r, "mismatch", msg);
    return;
  }
  long again = 0, e = 0, st = 0, pid = 0;
  /* its burn-in (the launcher asks first launches for one): the reference
   * of the spares' (coord_spares.c) */
  char bi[64];
  resihp__burnin_t burnin = {0};
  int birc = resihp__wire_get(msg, "burnin", bi, sizeof(bi));
  if ((birc && birc != RESIHP_ENOENT) ||
      (!birc && resihp__burnin_parse(bi, &burnin)) ||
      resihp__wire_get_range(msg, "again", 0, 1, &again) == RESIHP_EPROTO ||
      resihp__wire_get_range(msg, "pid", 1, INT_MAX, &pid) == RESIHP_EPROTO ||
      resihp__wire_get_range(msg, "epoch", 0, UINT32_MAX, &e) ==
          RESIHP_EPROTO ||
      resihp__wire_get_range(msg, "step", 0, MAX_STEPS, &st) == RESIHP_EPROTO) {
    resihp__coord_refuse(c, k, "bad-hello", 1, msg);
    return;
  }
  /* its state shape is compared at its first BEGIN, with the replicas
   * of its partition of the layers (coord_layers.c), known only then; a
   * replica that shrank (coord_shrink.c) comes back with its ranks now,
   * its lists as kept here */
  int shrunk = c->S && K != c->K &&
               resihp__coord_shrunk_hello(c, (int)r, (int)K, ep, sep,
                                          sizeof(ep)) == 0;
  if (c->S && K != c->K && !shrunk) {
    logc(RESIHP_LOG_ERROR,
         "replica %ld has %ld rank(s), the job %d: refused (every replica "
         "must have the same ranks per replica)",
         r, K, c->K);
    refuse_program(c, k, r, "mismatch", msg);
    return;
  }
  if (again && c->reps[r].retired &&
      resihp__coord_identity(jobid, stepid, ep, sep) == c->reps[r].retired) {
    /* the process this replica's failure or swap retired, reconnecting
     * (it took its closed link for a coordinator failover): it must not
     * take the place of the replica's replacement, nor be counted a
     * failure again when its step is cancelled */
    logc(RESIHP_LOG_INFO,
         "replica %ld: its retired process (step %ld.%ld) reconnected: told "
         "to leave",
         r, jobid, stepid);
    resihp__coord_refuse(c, k, "retired", 1, msg);
    return;
  }
  int ra = again ? reattach(c, k, (int)r, jobid, stepid, ep, sep, msg) : 0;
  if (ra > 0 && st > c->again_step && c->restored_ms)
    c->again_step = st; /* where the survivors were: the failures' step */
  if (ra > 0)
    return;
  if (ra < 0) {
    resihp__coord_refuse(c, k, "bad-credential", 1, msg);
    return;
  }
  rep_t *p = &c->reps[r];
  if (p->state != R_MEMBER && !(p->state == R_JOINING && p->conn >= 0) &&
      c->state == RESIHP__COORD_RUNNING &&
      resihp__coord_set_eps(c, r, ep, sep)) {
    resihp__coord_refuse(c, k, "out-of-memory", 1, msg);
    return;
  }
  if (p->state == R_MEMBER || (p->state == R_JOINING && p->conn >= 0) ||
      c->state != RESIHP__COORD_RUNNING) {
    logc(RESIHP_LOG_ERROR, "replica %ld is already running", r);
    resihp__coord_refuse(c, k, "duplicate", 1, msg);
    return;
  }
  if (!birc)
    p->burnin = burnin;
  if (!c->S) {
    c->owner = calloc((size_t)m, sizeof(int));
    c->M = (int)m;
    c->K = (int)K;
    if (!c->owner || resihp__coord_ensure_steps(c, 1) ||
        resihp__coord_perf_init(c)) {
      free(c->owner);
      c->owner = NULL;
      resihp__coord_perf_free(c);
      c->M = c->K = 0;
      resihp__coord_refuse(c, k, "out-of-memory", 1, msg);
      return;
    }
    c->S = s;
    snprintf(c->shape, sizeof(c->shape), "%s", shape);
  }
  uint8_t rnd[RESIHP__COORD_CRED_HEX / 2];
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
    resihp__coord_refuse(c, k, "no-randomness", 1, msg);
    return;
  }
  resihp__hex(p->cred, rnd, sizeof(rnd));
  p->state = R_JOINING;
  p->conn = k;
  p->refused[0] = '\0';
  p->waiting = 0;
  p->catchup_failed = 0;
  p->catching = 0;
  p->finished = 0;
  p->lost_now = 0;
  snprintf(p->node, sizeof(p->node), "%s", node);
  p->jobid = jobid;
  p->stepid = stepid;
  p->pid = pid;
  snprintf(p->lep, sizeof(p->lep), "%s", strcmp(lep, "-") ? lep : "");
  snprintf(p->shape, sizeof(p->shape), "%s", shape);
  p->shape_open = 1;
  /* a new process: nothing moved; one of the job's K ranks is no longer
   * shrunk, one of the replica's fewer is (a relaunch in place) */
  resihp__coord_repart_reset(c, (int)r, shrunk);
  c->conns[k].replica = (int)r;
  p->last_life = resihp__now_ms();
  /* and the partition of the layers that replica r holds (its last
   * process's, committed with its state): what this process catches up */
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(
      &b, "WELCOME replica=%ld step=%ld hb=%d cred=%s term=%" PRIu32, r,
      c->step, c->hb_leader_ms, p->cred, c->term);
  resihp__coord_put_lay(c, (int)r, &b);
  /* a relaunch in place of fewer ranks: they hold the partition above, the
   * planner's over the survivors, not the one their program declares
   * (resihp_job_shrunk_partition) */
  if (shrunk)
    resihp__wire_buf_printf(&b, " shrunk=1");
  resihp__coord_again(c, resihp__coord_send_buf_to(c, (int)r, &b));
  resihp__wire_buf_free(&b);
  resihp__coord_send_coords(c, (int)r);
  logc(RESIHP_LOG_INFO,
       "replica %ld joined from %s (node %s, pid %ld, step %ld.%ld)", r, ep,
       node, pid, jobid, stepid);
  answer_subs(c, (int)r);
}

/* FAULT kind=K step=S node=N from replica r. A periodic probe failure
 * fails the replica at once. Any other kind claims to be an injected fault:
 * only the launcher knows what it injected, so the report counts (and the
 * failure that follows is attributed to it) only if on_fault accepts it;
 * otherwise it is logged and ignored, and whatever happens to the replica
 * next is an outside fault like any other. */
static void on_fault_report(resihp__coord_t *c, int k, int r,
                            const char *msg) {
  rep_t *p = &c->reps[r];
  char kind[16] = "", node[64] = "";
  long v;
  resihp__wire_get(msg, "kind", kind, sizeof(kind));
  resihp__wire_get(msg, "node", node, sizeof(node));
  if (resihp__wire_get_long(msg, "step", &v))
    v = c->step;
  if (!strcmp(kind, "lost")) {
    /* The leader lost rank k of its replica (its link closed without a
     * word, before the rank's result): kept for the launcher
     * (resihp__coord_lost_ranks), which with no spare left shrinks the
     * replica onto its other ranks' nodes. A member fails as any replica
     * that loses a rank (its exchange, its set-up); one that is not a
     * member yet (a replacement or a shrink in place catching up: a
     * second failure during a regroup) fails now: it waited for a
     * set-up or a catch-up to time out. */
    long lk;
    if (resihp__wire_get_range(msg, "rank", 1,
                               resihp__coord_rep_k(c, r) - 1, &lk)) {
      resihp__coord_refuse(c, k, "bad-fault", 0, msg);
      return;
    }
    p->lost_now |= 1ULL << lk;
    resihp__coord_dirty(c); /* (in the state record: coord_shrink.c) */
    logc(RESIHP_LOG_WARN, "replica %d: its leader lost rank %ld", r, lk);
    if (!p->finished && c->phase != P_END && p->state == R_JOINING) {
      char why[48];
      snprintf(why, sizeof(why), "its rank %ld was lost", lk);
      resihp__coord_fail_replica(c, r, why);
    }
    return;
  }
  if (!strcmp(kind, "probe")) {
    /* Not an injection: the replica's node failed a periodic probe and
     * the replica is leaving; fail it now rather than wait for the
     * socket to close. */
    char summary[400] = "", why[64];
    resihp__wire_get_rest(msg, "summary", summary, sizeof(summary));
    logc(RESIHP_LOG_WARN,
         "replica %d: node %s failed its periodic health probe (%s)", r,
         node[0] ? node : p->node, summary);
    snprintf(p->fault_kind, sizeof(p->fault_kind), "%s", kind);
    p->fault_ms = resihp__now_ms();
    p->fault_step = v < 0 ? -1 : c->step;
    snprintf(why, sizeof(why), "periodic probe failed on %.32s",
             node[0] ? node : p->node);
    resihp__coord_fail_replica(c, r, why);
    return;
  }
  if (!c->o.on_fault ||
      c->o.on_fault(c->o.ud, r, kind, node[0] ? node : p->node, v) != 0) {
    logc(RESIHP_LOG_WARN,
         "replica %d: ignored a FAULT report (kind %.16s, step %ld) that "
         "matches no fault the launcher injected",
         r, kind, v);
    return;
  }
  snprintf(p->fault_kind, sizeof(p->fault_kind), "%s", kind);
  p->fault_ms = resihp__now_ms();
  p->fault_step = v < 0 ? -1 : c->step;
  logc(RESIHP_LOG_INFO, "replica %d: injected %s fires (step %ld)", r, kind,
       c->step);
}

/* Text that ends up in the summary and in the launcher's messages:
 * printable ASCII, not empty. With rest, to the end of the line and spaces
 * allowed (words for people); without, one token. */
static int printable(const char *msg, const char *key, int rest, char *out,
                     size_t cap) {
  int rc = rest ? resihp__wire_get_rest(msg, key, out, cap)
                : resihp__wire_get(msg, key, out, cap);
  int seen = 0;
  for (const char *q = out; !rc && *q; q++) {
    rc = *q < ' ' || *q > '~';
    seen |= *q != ' ';
  }
  if (rc || !seen)
    out[0] = '\0';
  return rc || !seen ? RESIHP_EPROTO : 0;
}

/* ABORT reason=TEXT from replica r (see coordinator.h): its program met
 * an error that a spare would meet again, so relaunching it would only
 * burn the spares. It leaves the group now, not as a failure (no
 * on_failed, no replacement, no failure record), and the run ends at the
 * next step boundary through the stop of resihp__coord_stop. A step being
 * set up (GO sent, no START yet) does not start: the members go back to
 * the barrier they have all passed, where the stop ends the run. In a step
 * that runs, the survivors' all-reduce loses the leaver and their RECOVER
 * moves its microbatches, as after any departure. The sender holds the
 * job's secret and is leaving either way: a reason that is not printable
 * text is refused, but the stop stands. */
static void on_abort(resihp__coord_t *c, int k, int r, const char *msg) {
  char why[sizeof(c->abort_why)];
  if (printable(msg, "reason", 1, why, sizeof(why))) {
    resihp__coord_refuse(c, k, "bad-abort", 0, msg);
    snprintf(why, sizeof(why), "(no readable reason given)");
  }
  logc(RESIHP_LOG_ERROR, "replica %d stopped the run: %s", r, why);
  if (c->abort_replica < 0) {
    c->abort_replica = r;
    memcpy(c->abort_why, why, sizeof(why));
  }
  rep_t *p = &c->reps[r];
  resihp__coord_remove_member(c, r);
  p->state = R_GONE;
  p->catching = 0;
  p->waiting = 0;
  p->expected = 0;
  /* a leader whose other rank aborted is still there: it must leave too,
   * and its FINISH must not count among the results */
  resihp__wire_send(&c->conns[k].w, "NO reason=aborted",
                    resihp__now_ms() + 1000);
  resihp__coord_close_conn(c, k);
  if (!c->stop)
    logc(RESIHP_LOG_INFO,
         "stopping: step %ld is the last to start, no replacement for "
         "replica %d",
         c->step, r);
  c->stop = 1;
  resihp__coord_hold(c, "a replica stopped the run");
  if (c->phase == P_SETUP)
    c->phase = P_BARRIER;
}

/* Free-running, a member's word says how far the members are: every step
 * before t is committed (coord_schedule.c). PROG and PERF (of step t - 1)
 * come from a rank that agreed with every other to go on; BEGIN, FAULT
 * and RECOVER (coord_rounds.c) from one whose last step committed. */
static void free_progress(resihp__coord_t *c, int r, const char *msg,
                          long plus) {
  long t;
  if (c->phase == P_FREE && resihp__coord_is_member(c, r) &&
      !resihp__wire_get_range(msg, "step", 0, c->S, &t))
    resihp__coord_free_to(c, t + plus);
}

/* A BEGIN said again by a replica that missed its answer (coordinator
 * failover): the same answer again, 1; 0 for any other BEGIN. A member
 * whose BEGIN s was counted gets its GO of the epoch being set up; in a
 * step that runs (the GO was new=0, which asks no READY) GO new=0 and its
 * START; the replica asked to save, SAVE; at the end, anyone gets DONE. */
static int answer_begin(resihp__coord_t *c, int r, const char *msg) {
  const rep_t *p = &c->reps[r];
  long s;
  if (resihp__wire_get_range(msg, "step", -1, MAX_STEPS, &s))
    return 0;
  if (c->phase == P_END) {
    resihp__coord_send_to(c, r, "DONE");
    return 1;
  }
  if (p->state != R_MEMBER || s > c->step || s > p->begun)
    return 0;
  char line[96];
  if (c->phase == P_SETUP) {
    resihp__coord_send_go_whole(c, r);
    return 1;
  }
  if ((c->phase == P_RUN || c->phase == P_FREE) && s <= c->start_at &&
      c->in_step[r]) {
    if (p->owed) { /* its GO and START have not left yet: they do now */
      resihp__coord_pay(c, r);
      return 1;
    }
    snprintf(line, sizeof(line), "GO step=%ld epoch=%u new=0", s, c->epoch);
    resihp__coord_send_to(c, r, line);
    resihp__coord_send_start(c, r);
    return 1;
  }
  if (c->phase == P_BARRIER && s == c->step && c->save_asked == r &&
      resihp__coord_saving(c)) {
    snprintf(line, sizeof(line), "SAVE step=%ld", s);
    resihp__coord_send_to(c, r, line);
    return 1;
  }
  return 0;
}

/* (the state they follow from is mirrored already) */
static int again_begin(resihp__coord_t *c, int r, const char *msg) {
  int done;
  resihp__coord_again(c, done = answer_begin(c, r, msg));
  return done;
}

/* A BEGIN's lay= (coord_layers.c): replica r's partition of the layers,
 * kept. 0, or 1 when refused (its replica failed: a malformed one; or
 * its program refused: another number of layers than the job's, more
 * distinct partitions than a GO line holds). */
static int begin_layers(resihp__coord_t *c, int k, int r, const char *msg) {
  char lay[RESIHP__COORD_LAY_MAX];
  int rc = resihp__wire_get(msg, "lay", lay, sizeof(lay));
  long lst = 0;
  c->reps[r].lstate = !rc && !resihp__wire_get_long(msg, "lst", &lst) &&
                      lst == 1; /* (anything else: an opaque state) */
  if (rc == RESIHP_ENOENT)
    return 0;
  if (!rc && (rc = resihp__coord_set_layers(c, r, lay)) == 0)
    return 0;
  if (rc == RESIHP_EINVAL || rc == RESIHP_ERANGE) {
    logc(RESIHP_LOG_ERROR, "replica %d holds the layers as %.40s: %s: refused",
         r, lay,
         rc == RESIHP_EINVAL ? "the job's model has another number of layers"
                             : "too many distinct partitions in the job");
    refuse_program(
        c, k, r, rc == RESIHP_EINVAL ? "mismatch" : "too-many-partitions", msg);
  } else {
    resihp__coord_refuse(
        c, k, rc == RESIHP_ENOMEM ? "out-of-memory" : "bad-layers", 1, msg);
  }
  return 1;
}

/* The first BEGIN of replica r's process: its state shape against its
 * partition's (coord_layers.c). 0, or 1 when its program was refused (a
 * different model or state list: no spare changes that). */
static int begin_shape(resihp__coord_t *c, int k, int r, const char *msg) {
  const char *want;
  if (!resihp__coord_check_shape(c, r, &want))
    return 0;
  logc(RESIHP_LOG_ERROR,
       "replica %d: its state buffers have the shape %s, those of the "
       "replicas holding %s %s: refused (the replicas of one partition of "
       "the layers must hold the same state buffers and sizes: the same "
       "model and program)",
       r, c->reps[r].shape,
       c->nlayers && c->reps[r].lpart ? "its partition of the layers" : "the job's",
       want);
  refuse_program(c, k, r, "mismatch", msg);
  return 1;
}

void resihp__coord_on_line(resihp__coord_t *c, int k, const char *msg) {
  int r = c->conns[k].replica;
  if (r >= 0)
    c->reps[r].last_life = resihp__now_ms();
  if (!strncmp(msg, "HB", 2) && (msg[2] == '\0' || msg[2] == ' '))
    return;
  c->lines_rx++;
  resihp__coord_dirty(c);
  if (r < 0) {
    if (!strncmp(msg, "HELLO ", 6))
      on_hello(c, k, msg);
    else if (!strncmp(msg, "SUBHELLO ", 9) || !strncmp(msg, "LEP ", 4))
      on_subhello(c, k, msg);
    else if (!strncmp(msg, "SPARE ", 6))
      resihp__coord_on_spare(c, k, msg);
    else
      resihp__coord_refuse(c, k, "hello-first", 1, msg);
    return;
  }
  rep_t *p = &c->reps[r];
  long v;
  if (!strncmp(msg, "BEGIN ", 6)) {
    if (begin_layers(c, k, r, msg) || (p->shape_open && begin_shape(c, k, r, msg)))
      return;
    resihp__coord_repart_begin(c, r, msg);
    if (again_begin(c, r, msg))
      return;
    int free_member = c->phase == P_FREE && resihp__coord_is_member(c, r);
    if (free_member && resihp__coord_take_owners(c, msg)) {
      resihp__coord_refuse(c, k, "bad-owners", 1, msg);
      return;
    }
    free_progress(c, r, msg, 0);
    /* free-running by cost, a BEGIN must bring the owners of the run's
     * steps before it (every leader holds them: job_step.c) */
    if (resihp__wire_get_range(msg, "step", -1, c->step + 1, &v) ||
        (free_member && c->phase == P_FREE && v > c->step)) {
      resihp__coord_refuse(c, k, "bad-begin", 1, msg);
      return;
    }
    if (p->state == R_MEMBER && v > p->begun)
      p->begun = v;
    else if (p->state == R_JOINING)
      p->waiting = 1;
    if (p->state == R_JOINING)
      resihp__coord_hold(c, "a replica waits to join");
    else if (c->phase == P_FREE && resihp__coord_is_member(c, r)) {
      c->phase = P_BARRIER; /* the run is over: back to the barrier */
      c->fown_n = 0;        /* every step of it is in the ledger */
    }
  } else if (!strncmp(msg, "PROG ", 5)) {
    c->lines_timed++;
    if (c->phase == P_FREE && resihp__coord_is_member(c, r) &&
        resihp__coord_take_owners(c, msg)) {
      resihp__coord_refuse(c, k, "bad-owners", 1, msg);
      return;
    }
    free_progress(c, r, msg, 0);
  } else if (!strncmp(msg, "READY ", 6) || !strncmp(msg, "RESYNC ", 7)) {
    int ready = msg[2] == 'A';
    if (resihp__wire_get_range(msg, "epoch", 0, UINT32_MAX, &v)) {
      resihp__coord_refuse(c, k, ready ? "bad-ready" : "bad-resync", 1, msg);
      return;
    }
    if ((uint32_t)v != c->epoch || p->state != R_MEMBER)
      return; /* stale */
    if ((c->phase == P_RUN || c->phase == P_FREE) && c->in_step[r]) {
      /* its START was lost with a coordinator (the step cannot have
       * started without its READY): the same again */
      resihp__coord_again(c, resihp__coord_send_start(c, r));
      return;
    }
    if (ready) {
      p->ready = 1;
    } else if (c->phase == P_SETUP && ++p->resyncs > RESYNCS_PER_STEP) {
      resihp__coord_fail_replica(c, r, "cannot set up a communicator");
    } else if (c->phase == P_SETUP) {
      logc(RESIHP_LOG_WARN,
           "replica %d could not set up epoch %u; trying a new epoch", r,
           c->epoch);
      p->list_epoch = 0; /* its list may be the cause: send it whole */
      resihp__coord_send_go(c);
    }
  } else if (!strncmp(msg, "RECOVER ", 8)) {
    resihp__coord_on_recover(c, k, r, msg);
  } else if (!strncmp(msg, "PERF ", 5)) {
    c->lines_timed++;
    free_progress(c, r, msg, 1);
    resihp__coord_on_perf(c, k, r, msg);
    if (c->hold_slow) { /* a member turned slow (coord_perf.c) */
      c->hold_slow = 0;
      resihp__coord_hold(c, "a member is slow");
    }
  } else if (!strncmp(msg, "WL ", 3)) {
    resihp__coord_on_wl(c, k, r, msg);
  } else if (!strncmp(msg, "FAULT ", 6)) {
    free_progress(c, r, msg, 0);
    on_fault_report(c, k, r, msg);
  } else if (!strncmp(msg, "CATCHUP_FAILED", 14)) {
    logc(RESIHP_LOG_WARN,
         "replica %d lost its catch-up source; it will be admitted again", r);
    p->catchup_failed = 1;
    /* It leaves this step's group at once (it contributed nothing): the
     * step must not wait for it, even if no survivor reports a RECOVER. */
    if (p->state == R_MEMBER && p->catching) {
      resihp__coord_remove_member(c, r);
      p->state = R_JOINING;
      p->waiting = 1;
      p->catching = 0;
    }
  } else if (!strncmp(msg, "SAVED ", 6)) {
    resihp__coord_on_saved(c, k, r, msg);
  } else if (!strncmp(msg, "ABORT ", 6)) {
    on_abort(c, k, r, msg);
  } else if (!strncmp(msg, "FINISH ", 7)) {
    char res[sizeof(p->result)];
    if (printable(msg, "result", 0, res, sizeof(res))) {
      /* Not taken as a result: the run's verdict compares them. */
      resihp__coord_refuse(c, k, "bad-finish", 0, msg);
      snprintf(res, sizeof(res), "-");
    }
    memcpy(p->result, res, sizeof(res));
    p->finished = 1;
  } else {
    logc(RESIHP_LOG_WARN, "replica %d: unknown message '%.40s'", r, msg);
  }
}
