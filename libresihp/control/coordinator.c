/* SPDX-License-Identifier: BSD-3-Clause */
/* The job coordinator (see coordinator.h for the protocol).
 *
 * Membership. The group is the set of replicas that take part in the
 * current step. It changes only at step boundaries (a replacement is
 * admitted, or a replica that died is left out), and every change is a new
 * epoch in which the members re-create their communicator; within a step a
 * failure is handled by the survivors' own shrink, and the coordinator only
 * learns the agreed view through RECOVER.
 *
 * Ledger. owner[mb] says which replica computes microbatch mb of the
 * current step. At START the M microbatches are cut into contiguous blocks
 * over the contributing members (replicas catching up contribute nothing).
 * A RECOVER with view V moves every microbatch whose owner is outside V to
 * the contributors in V, round-robin in microbatch order; the moves are kept
 * per (step, communicator epoch) so that every survivor of the same view
 * gets the same answer, whatever order their RECOVERs arrive in. Because a
 * failed all-reduce leaves every survivor's buffer untouched, a microbatch
 * whose owner left the view was never counted: moving it neither drops nor
 * double-counts a sample.
 *
 * Failure detection here is coarse (socket EOF, silence for silence_ms, or
 * exclusion by the survivors' view); the survivors' all-reduce detects
 * within its own, tighter bound. A replica declared failed is reported to
 * the launcher, which kills its step before starting a replacement, so a
 * replica is never alive twice.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"
#include "coordinator.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* RECOVER reports one member may make in one step: each stands for a
 * failure it saw, and a replica sees few in one step; more is a fault. */
#define REPORTS_PER_STEP 8
/* Same for RESYNC (a member that cannot set up an epoch). */
#define RESYNCS_PER_STEP 8
/* Pending handshakes, and how long each may take. */
#define HS_PENDING 64
#define HS_TIMEOUT_MS 3000

void resihp__coord_send_to(resihp__coord_t *c, int r, const char *line) {
  rep_t *p = &c->reps[r];
  if (p->conn < 0)
    return;
  if (resihp__wire_send(&c->conns[p->conn].w, line, resihp__now_ms() + 2000) <
      0)
    logc(RESIHP_LOG_WARN, "cannot send to replica %d", r);
}

void resihp__coord_send_buf_to(resihp__coord_t *c, int r,
                               const resihp__wire_buf_t *b) {
  if (b->err) {
    logc(RESIHP_LOG_ERROR, "cannot build a message for replica %d (%s)", r,
         resihp_strerror(b->err));
    return;
  }
  resihp__coord_send_to(c, r, b->s);
}

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

void resihp__coord_close_conn(resihp__coord_t *c, int k) {
  conn_t *cn = &c->conns[k];
  resihp__wire_free(&cn->w);
  if (cn->replica >= 0 && c->reps[cn->replica].conn == k)
    c->reps[cn->replica].conn = -1;
  cn->replica = -1;
}

/* Tell the waiting non-leader ranks of replica r where their leader is. */
static void answer_subs(resihp__coord_t *c, int r) {
  rep_t *p = &c->reps[r];
  if (!p->lep[0] || p->conn < 0)
    return;
  char line[160];
  snprintf(line, sizeof(line), "LEADER ep=%s", p->lep);
  for (int i = 0; i < c->nconns; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd < 0 || cn->sub_replica != r || cn->sub_stepid != p->stepid ||
        cn->sub_jobid != p->jobid)
      continue;
    resihp__wire_send(&cn->w, line, resihp__now_ms() + 1000);
    cn->sub_replica = -1;
  }
}

static void on_subhello(resihp__coord_t *c, int k, const char *msg) {
  long r = -1, sid = -1, jid = -1;
  if (resihp__wire_get_range(msg, "replica", 0, c->R - 1, &r) ||
      resihp__wire_get_range(msg, "stepid", -1, LONG_MAX, &sid) ||
      resihp__wire_get_range(msg, "jobid", -1, LONG_MAX, &jid)) {
    resihp__coord_refuse(c, k, "bad-subhello", 1, msg);
    return;
  }
  c->conns[k].sub_replica = (int)r;
  c->conns[k].sub_stepid = sid;
  c->conns[k].sub_jobid = jid;
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

/* HELLO: every field bounded, names and addresses plain tokens (they end
 * up inside lists that others parse), and the training the same as the
 * job's (the first HELLO sets it). */
static void on_hello(resihp__coord_t *c, int k, const char *msg) {
  long r = -1, m = 0, s = 0, jobid = -1, stepid = -1;
  char ep[96] = "", sep[96] = "", node[64] = "?", lep[96] = "-";
  int maxm = resihp__wire_max_microbatches();
  if (resihp__wire_get_range(msg, "replica", 0, c->R - 1, &r) ||
      resihp__wire_get_long(msg, "mbs", &m) ||
      resihp__wire_get_range(msg, "steps", 1, MAX_STEPS, &s) ||
      resihp__wire_get(msg, "ep", ep, sizeof(ep)) ||
      !resihp__wire_token_ok(ep, sizeof(ep)) ||
      resihp__wire_get(msg, "sep", sep, sizeof(sep)) ||
      !resihp__wire_token_ok(sep, sizeof(sep)) || m < 1 ||
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
    resihp__coord_refuse(c, k, "too-many-microbatches", 1, msg);
    return;
  }
  if (c->S && (m != c->M || s != c->S)) {
    logc(RESIHP_LOG_ERROR,
         "replica %ld has %ld microbatches x %ld steps, the job %d x %ld: "
         "refused (every replica must run the same training)",
         r, m, s, c->M, c->S);
    resihp__coord_refuse(c, k, "mismatch", 1, msg);
    return;
  }
  rep_t *p = &c->reps[r];
  if (p->state == R_MEMBER || (p->state == R_JOINING && p->conn >= 0) ||
      c->state != RESIHP__COORD_RUNNING) {
    logc(RESIHP_LOG_ERROR, "replica %ld is already running", r);
    resihp__coord_refuse(c, k, "duplicate", 1, msg);
    return;
  }
  if (!c->S) {
    c->owner = calloc((size_t)m, sizeof(int));
    if (!c->owner || resihp__coord_ensure_steps(c, 1)) {
      free(c->owner);
      c->owner = NULL;
      resihp__coord_refuse(c, k, "out-of-memory", 1, msg);
      return;
    }
    c->M = (int)m;
    c->S = s;
  }
  p->state = R_JOINING;
  p->conn = k;
  p->waiting = 0;
  p->catchup_failed = 0;
  p->catching = 0;
  p->finished = 0;
  snprintf(p->ep, sizeof(p->ep), "%s", ep);
  snprintf(p->sep, sizeof(p->sep), "%s", sep);
  snprintf(p->node, sizeof(p->node), "%s", node);
  p->jobid = jobid;
  p->stepid = stepid;
  snprintf(p->lep, sizeof(p->lep), "%s", strcmp(lep, "-") ? lep : "");
  c->conns[k].replica = (int)r;
  p->last_life = resihp__now_ms();
  char line[128];
  snprintf(line, sizeof(line), "WELCOME replica=%ld step=%ld", r, c->step);
  resihp__coord_send_to(c, (int)r, line);
  logc(RESIHP_LOG_INFO, "replica %ld joined from %s (node %s, step %ld.%ld)", r,
       ep, node, jobid, stepid);
  answer_subs(c, (int)r);
}

/* FAULT kind=K step=S node=N from replica r. A periodic probe failure
 * fails the replica at once. Any other kind claims to be an injected fault:
 * only the launcher knows what it injected, so the report counts (and the
 * failure that follows is attributed to it) only if on_fault accepts it;
 * otherwise it is logged and ignored, and whatever happens to the replica
 * next is an outside fault like any other. */
static void on_fault_report(resihp__coord_t *c, int r, const char *msg) {
  rep_t *p = &c->reps[r];
  char kind[16] = "", node[64] = "";
  long v;
  resihp__wire_get(msg, "kind", kind, sizeof(kind));
  resihp__wire_get(msg, "node", node, sizeof(node));
  if (resihp__wire_get_long(msg, "step", &v))
    v = c->step;
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

void resihp__coord_on_line(resihp__coord_t *c, int k, const char *msg) {
  int r = c->conns[k].replica;
  if (r >= 0)
    c->reps[r].last_life = resihp__now_ms();
  if (!strncmp(msg, "HB", 2) && (msg[2] == '\0' || msg[2] == ' '))
    return;
  if (r < 0) {
    if (!strncmp(msg, "HELLO ", 6))
      on_hello(c, k, msg);
    else if (!strncmp(msg, "SUBHELLO ", 9))
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
    if (resihp__wire_get_range(msg, "step", -1, c->step + 1, &v)) {
      resihp__coord_refuse(c, k, "bad-begin", 1, msg);
      return;
    }
    if (p->state == R_MEMBER && v > p->begun)
      p->begun = v;
    else if (p->state == R_JOINING)
      p->waiting = 1;
  } else if (!strncmp(msg, "READY ", 6) || !strncmp(msg, "RESYNC ", 7)) {
    int ready = msg[2] == 'A';
    if (resihp__wire_get_range(msg, "epoch", 0, UINT32_MAX, &v)) {
      resihp__coord_refuse(c, k, ready ? "bad-ready" : "bad-resync", 1, msg);
      return;
    }
    if ((uint32_t)v != c->epoch || p->state != R_MEMBER)
      return; /* stale */
    if (ready) {
      p->ready = 1;
    } else if (c->phase == P_SETUP && ++p->resyncs > RESYNCS_PER_STEP) {
      resihp__coord_fail_replica(c, r, "cannot set up a communicator");
    } else if (c->phase == P_SETUP) {
      logc(RESIHP_LOG_WARN,
           "replica %d could not set up epoch %u; trying a new epoch", r,
           c->epoch);
      resihp__coord_send_go(c);
    }
  } else if (!strncmp(msg, "RECOVER ", 8)) {
    resihp__coord_on_recover(c, k, r, msg);
  } else if (!strncmp(msg, "FAULT ", 6)) {
    on_fault_report(c, r, msg);
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
  } else if (!strncmp(msg, "FINISH ", 7)) {
    char res[sizeof(p->result)];
    int rc = resihp__wire_get(msg, "result", res, sizeof(res));
    for (const char *q = res; !rc && *q; q++)
      rc = *q < '!' || *q > '~';
    if (rc || !res[0]) {
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

int resihp__coord_adopt(resihp__coord_t *c, resihp__wire_t *w) {
  int k = -1;
  for (int i = 0; i < c->nconns; i++)
    if (c->conns[i].w.fd < 0) {
      k = i;
      break;
    }
  if (k < 0) {
    if (c->nconns == c->capconns) {
      int nc = c->capconns ? 2 * c->capconns : 16;
      conn_t *n = realloc(c->conns, sizeof(conn_t) * (size_t)nc);
      if (!n) {
        resihp__wire_free(w);
        return RESIHP_ENOMEM;
      }
      c->conns = n;
      c->capconns = nc;
    }
    k = c->nconns++;
  }
  c->conns[k].w = *w;
  c->conns[k].replica = -1;
  c->conns[k].sub_replica = -1;
  c->conns[k].last_heard = resihp__now_ms();
  resihp__wire_init(w, -1);
  return k;
}

/* Every complete line that connection k has buffered, then what its
 * socket said (rc from resihp__wire_fill, or a bad line) if it is gone. */
static void drain_conn(resihp__coord_t *c, int k, int rc) {
  conn_t *cn = &c->conns[k];
  int t;
  while (cn->w.fd >= 0 &&
         (t = resihp__wire_take(&cn->w, c->line, RESIHP__WIRE_LINE_MAX + 1))) {
    if (t < 0) {
      logc(RESIHP_LOG_ERROR,
           "a connection%s sent a line that %s: connection dropped",
           cn->replica >= 0 ? " of a replica" : "",
           t == RESIHP_EAUTH ? "failed its integrity check (altered, "
                               "injected or replayed)"
                             : "is malformed");
      rc = t;
      break;
    }
    resihp__coord_on_line(c, k, c->line);
    cn = &c->conns[k];
  }
  if (rc < 0 && cn->w.fd >= 0) {
    int r = cn->replica;
    resihp__coord_close_conn(c, k);
    if (r >= 0 && c->state == RESIHP__COORD_RUNNING &&
        !(c->phase == P_END && c->reps[r].finished))
      resihp__coord_fail_replica(c, r, "connection lost");
  }
}

void resihp__coord_feed(resihp__coord_t *c, int k, const char *line) {
  if (k < 0 || k >= c->nconns || c->conns[k].w.fd < 0)
    return;
  resihp__coord_on_line(c, k, line);
  resihp__coord_advance(c);
}

/* Handshakes never hold this loop: each pending one is a record in c->hs,
 * moved on when its socket has something (see handshake.c). */
static void accept_conns(resihp__coord_t *c, int listener_ready) {
  if (listener_ready)
    resihp__wire_hs_accept(c->hs, c->lfd);
  resihp__wire_t w;
  while (resihp__wire_hs_next(c->hs, &w) == 1) {
    int k = resihp__coord_adopt(c, &w);
    if (k >= 0)
      drain_conn(c, k, 0); /* lines that came with the handshake */
  }
}

int resihp__coord_poll(resihp__coord_t *c, int timeout_ms) {
  int want = c->nconns + 1 + resihp__wire_hs_pending(c->hs);
  if (want > c->cappfd) {
    struct pollfd *np = realloc(c->pfd, sizeof(*np) * (size_t)want);
    if (!np)
      return RESIHP_ENOMEM;
    c->pfd = np;
    c->cappfd = want;
  }
  struct pollfd *p = c->pfd;
  p[0].fd = c->lfd;
  p[0].events = POLLIN;
  p[0].revents = 0;
  for (int i = 0; i < c->nconns; i++) {
    p[i + 1].fd = c->conns[i].w.fd;
    p[i + 1].events = POLLIN;
    p[i + 1].revents = 0;
  }
  int n = c->nconns;
  int nh = resihp__wire_hs_fds(c->hs, p + n + 1, want - n - 1);
  poll(p, (nfds_t)(n + 1 + nh), resihp__wire_hs_wait_ms(c->hs, timeout_ms));
  int64_t now = resihp__now_ms();
  for (int i = 0; i < n; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd < 0 || !p[i + 1].revents)
      continue;
    int rc = resihp__wire_fill(&cn->w);
    cn->last_heard = now;
    drain_conn(c, i, rc);
  }
  accept_conns(c, p[0].revents != 0);
  for (int i = 0; i < c->nconns; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd >= 0 && cn->replica >= 0 &&
        now - cn->last_heard > c->o.silence_ms &&
        c->state == RESIHP__COORD_RUNNING) {
      int r = cn->replica;
      logc(RESIHP_LOG_WARN, "replica %d silent for %lld ms", r,
           (long long)(now - cn->last_heard));
      resihp__coord_fail_replica(c, r, "silent");
    }
  }
  if (now - c->last_hb >= 500) {
    c->last_hb = now;
    for (int r = 0; r < c->R; r++)
      if (c->reps[r].conn >= 0)
        resihp__coord_send_to(c, r, "HB");
  }
  resihp__coord_advance(c);
  return 0;
}

int resihp__coord_create(const resihp__coord_opts_t *o, resihp__coord_t **out) {
  if (!o || o->replicas < 1 || o->replicas > MAXR || !o->secret ||
      !o->secret_len)
    return RESIHP_EINVAL;
  resihp__coord_t *c = calloc(1, sizeof(*c));
  if (!c)
    return RESIHP_ENOMEM;
  c->o = *o;
  c->lfd = -1;
  if (c->o.silence_ms <= 0)
    c->o.silence_ms = 3000;
  c->line = malloc(RESIHP__WIRE_LINE_MAX + 1);
  int rc = RESIHP_ENOMEM;
  if (!c->line)
    goto fail;
  c->R = o->replicas;
  for (int r = 0; r < MAXR; r++) {
    c->reps[r].conn = -1;
    c->reps[r].begun = -1;
    c->reps[r].open_fail = -1;
  }
  if ((rc = resihp__wire_hs_create(o->secret, o->secret_len, "coord",
                                   HS_PENDING, HS_TIMEOUT_MS, &c->hs)))
    goto fail;
  c->lfd = resihp__wire_listen(o->bind_host, o->port, &c->port);
  if (c->lfd < 0) {
    logc(RESIHP_LOG_ERROR, "cannot listen on %s:%d: %s",
         o->bind_host ? o->bind_host : "*", o->port, strerror(errno));
    rc = c->lfd;
    goto fail;
  }
  *out = c;
  return 0;
fail:
  resihp__coord_destroy(c);
  return rc;
}

void resihp__coord_destroy(resihp__coord_t *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nconns; i++)
    resihp__wire_free(&c->conns[i].w);
  resihp__coord_free_rounds(c);
  free(c->rounds);
  free(c->conns);
  free(c->spares);
  if (c->lfd >= 0)
    close(c->lfd);
  resihp__wire_hs_destroy(c->hs);
  free(c->line);
  free(c->pfd);
  free(c->owner);
  free(c->start_ms);
  free(c);
}

int resihp__coord_port(const resihp__coord_t *c) {
  return c->port;
}
int resihp__coord_state(const resihp__coord_t *c) {
  return c->state;
}
long resihp__coord_step(const resihp__coord_t *c) {
  return c->step;
}
uint32_t resihp__coord_epoch(const resihp__coord_t *c) {
  return c->epoch;
}
int resihp__coord_members(const resihp__coord_t *c) {
  return c->nmembers;
}
int resihp__coord_connected(const resihp__coord_t *c, int r) {
  return r >= 0 && r < c->R && c->reps[r].conn >= 0;
}

int resihp__coord_replica_eps(const resihp__coord_t *c, int r, const char **ep,
                              const char **sep, const char **lep) {
  if (r < 0 || r >= c->R || !c->reps[r].ep[0])
    return RESIHP_ENOENT;
  if (ep)
    *ep = c->reps[r].ep;
  if (sep)
    *sep = c->reps[r].sep;
  if (lep)
    *lep = c->reps[r].lep;
  return 0;
}

const char *resihp__coord_check(const resihp__coord_t *c) {
  if (c->nmembers < 0 || c->nmembers > c->R)
    return "member count out of range";
  for (int i = 0; i < c->nmembers; i++) {
    int m = c->members[i];
    if (m < 0 || m >= c->R)
      return "member id out of range";
    if (i && c->members[i - 1] >= m)
      return "members not sorted or repeated";
    if (c->reps[m].state != R_MEMBER)
      return "a member is not in state MEMBER";
  }
  int healthy = 0;
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (p->state == R_MEMBER && !resihp__coord_is_member(c, r))
      return "state MEMBER outside the group";
    if (p->conn >= 0 && (p->conn >= c->nconns || c->conns[p->conn].w.fd < 0 ||
                         c->conns[p->conn].replica != r))
      return "replica and connection disagree";
    healthy += p->state == R_MEMBER && p->conn >= 0 && !p->catching;
  }
  for (int mb = 0; mb < c->M; mb++) {
    if (c->owner[mb] < 0 || c->owner[mb] >= c->R)
      return "ledger owner out of range";
    if (c->phase == P_RUN && !c->in_step[c->owner[mb]])
      return "ledger owner was not in the step";
  }
  if (c->S && (c->step > c->S || c->capsteps < c->step + 1))
    return "step out of range";
  for (int k = 0; k < c->nrounds; k++)
    if (c->rounds[k].n < 0 || c->rounds[k].n > c->M)
      return "round moves out of range";
  if (c->state == RESIHP__COORD_LOST && healthy)
    return "job lost while a connected member held the state";
  return NULL;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Duration of step s (its START to the next one, or to the end). */
static int64_t step_ms(const resihp__coord_t *c, long s) {
  if (s < 0 || s >= c->step || !c->start_ms[s])
    return -1;
  int64_t end = s + 1 < c->step ? c->start_ms[s + 1] : c->t_done;
  return end - c->start_ms[s];
}

int resihp__coord_summary(const resihp__coord_t *c, FILE *f,
                          double *seconds_out) {
  long steps = c->step;
  int64_t *d = malloc(sizeof(int64_t) * (size_t)(steps + 1));
  int n = 0;
  for (long s = 0; d && s < steps; s++) {
    int64_t x = step_ms(c, s);
    if (x >= 0)
      d[n++] = x;
  }
  double median = 0;
  if (n) {
    qsort(d, (size_t)n, sizeof(int64_t), cmp_i64);
    median = (double)d[n / 2];
  }
  free(d);
  /* still running: the launcher was stopped at once, mid-step */
  int64_t t_end = c->t_done ? c->t_done : resihp__now_ms();
  double secs = steps && c->start_ms && c->start_ms[0]
                    ? (double)(t_end - c->start_ms[0]) / 1000.0
                    : 0.0;
  if (seconds_out)
    *seconds_out = secs;
  fprintf(f, "resihp-run summary\n");
  fprintf(f, "  steps completed:        %ld of %ld (%d microbatches each)\n",
          steps, c->S, c->M);
  fprintf(f,
          "  training time:          %.3f s (%.2f steps/s, %.1f "
          "microbatches/s; median step %.0f ms)\n",
          secs, secs > 0 ? steps / secs : 0.0,
          secs > 0 ? (double)steps * c->M / secs : 0.0, median);
  fprintf(f,
          "  failures:               %d (%ld microbatches reassigned "
          "within their step)\n",
          c->nfails, c->reassigned);
  double worst_stall = 0, worst_rejoin = 0;
  for (int i = 0; i < c->nfails; i++) {
    const fail_t *x = &c->fails[i];
    /* the step in which the fault happened */
    long s = x->step;
    for (long k = 0; c->start_ms && k <= steps && k < c->S; k++)
      if (c->start_ms[k] && c->start_ms[k] <= x->t_fault)
        s = k;
    int64_t sd = step_ms(c, s);
    double stall = sd >= 0 ? (double)sd - median : -1;
    if (stall < 0 && sd >= 0)
      stall = 0;
    double rejoin =
        x->t_train ? (double)(x->t_train - x->t_fault) / 1000.0 : -1;
    if (stall > worst_stall)
      worst_stall = stall;
    if (rejoin > worst_rejoin)
      worst_rejoin = rejoin;
    char rj[64];
    if (rejoin >= 0)
      snprintf(rj, sizeof(rj), "replacement training again after %.2f s",
               rejoin);
    else if (x->t_admit)
      snprintf(rj, sizeof(rj), "its replacement failed while catching up");
    else
      snprintf(rj, sizeof(rj), "not replaced");
    char sl[48];
    if (stall >= 0)
      snprintf(sl, sizeof(sl), "%.0f ms", stall);
    else
      snprintf(sl, sizeof(sl), "n/a (step not completed)");
    /* An injected fault's time is known; an outside one's is not, only
     * how long before the detection the replica last showed life. */
    char det[96];
    snprintf(det, sizeof(det),
             x->outside ? "outside fault: last sign of life %lld ms before "
                          "detection"
                        : "detected after %lld ms",
             (long long)(x->t_detect - x->t_fault));
    fprintf(f,
            "  failure %d: replica %d, %s%s at step %ld (%s); %s; survivors' "
            "stall %s; %s\n",
            i + 1, x->replica, x->kind, x->catchup ? " during catch-up" : "", s,
            x->why, det, sl, rj);
  }
  if (c->nfails && worst_rejoin > 0)
    fprintf(f, "  worst survivor stall:   %.0f ms; worst rejoin: %.2f s\n",
            worst_stall, worst_rejoin);
  else if (c->nfails)
    fprintf(f, "  worst survivor stall:   %.0f ms; no replica rejoined\n",
            worst_stall);
  for (int i = 0; i < c->nspares; i++) {
    const spare_t *sp = &c->spares[i];
    char extra[260] = "";
    if (sp->state == RESIHP__SPARE_PROMOTED)
      snprintf(extra, sizeof(extra), " to replica %d", sp->replica);
    else if (sp->summary[0])
      snprintf(extra, sizeof(extra), " (%s)", sp->summary);
    fprintf(f, "  spare %s: %s%s; %ld registration(s)\n", sp->node,
            resihp__spare_state_name(sp->state), extra, sp->registrations);
  }
  const char *ref = NULL;
  int agree = 1, nres = 0;
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (!p->finished || !p->result[0] || !strcmp(p->result, "-"))
      continue;
    nres++;
    if (!ref)
      ref = p->result;
    else if (strcmp(ref, p->result))
      agree = 0;
  }
  for (int r = 0; r < c->R && !agree; r++)
    if (c->reps[r].finished)
      fprintf(f, "  replica %d result:      %s\n", r, c->reps[r].result);
  fprintf(f, "  final result:           %s (%d replicas %s)\n",
          ref ? ref : "none", nres, agree ? "agree" : "DISAGREE");
  return agree && ref ? 0 : -1;
}
