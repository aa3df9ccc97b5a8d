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
#include "coordinator.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXR RESIHP__COORD_MAX_REPLICAS
#define MAX_ROUNDS 64
#define MAX_FAIL 256
#define LINE 8192

enum { R_NONE, R_JOINING, R_MEMBER, R_GONE };
enum { P_BARRIER, P_SETUP, P_RUN, P_END };

typedef struct {
  int state;
  int conn; /* index into conns, -1 when none */
  char ep[96], sep[96], node[64];
  char lep[96]; /* the leader's address for the step's other ranks */
  long jobid, stepid;
  long begun;   /* last BEGIN step (members) */
  int waiting;  /* joiner waiting for admission */
  int ready;    /* READY for the current setup epoch */
  int catching; /* catching up in the current step */
  int catchup_failed;
  int finished;
  char result[224];
  char fault_kind[16]; /* injected fault announced, not yet seen failing */
  int64_t fault_ms;
  long fault_step;
  int open_fail; /* failure record waiting for this replica's comeback */
  int64_t last_life; /* last line (heartbeat included) heard from it */
  int expected;      /* the launcher started a replacement, not admitted yet */
} rep_t;

typedef struct {
  resihp__wire_t w;
  int replica;
  int64_t last_heard;
  /* a non-leader rank waiting for its leader's address */
  int sub_replica;
  long sub_stepid, sub_jobid;
} conn_t;

typedef struct {
  uint32_t cepoch;
  int n;
  int *mb, *to;
} round_t;

typedef struct {
  char node[64];
  int state; /* RESIHP__SPARE_* */
  long registrations;
  int replica; /* promoted to */
  char summary[200];
} spare_t;

typedef struct {
  int replica;
  char kind[16];
  char why[64];
  long step;
  int catchup; /* the fault hit during a catch-up transfer */
  int outside; /* not injected: t_fault is the last sign of life */
  int64_t t_fault, t_detect, t_admit, t_train;
} fail_t;

struct resihp__coord {
  resihp__coord_opts_t o;
  uint8_t *secret;
  int lfd, port;
  conn_t *conns;
  int nconns, capconns;
  rep_t reps[MAXR];
  int R, M;
  long S;
  long step;
  int phase, state;
  uint32_t epoch;
  int members[MAXR], nmembers;
  int last_list[MAXR], nlast; /* members of the last started epoch */
  int changed; /* a member left or joined since (same ids, new process) */
  int *owner;
  round_t rounds[MAX_ROUNDS];
  int nrounds;
  int64_t *start_ms; /* START time of each step, index step */
  int64_t t_done;
  fail_t fails[MAX_FAIL];
  int nfails;
  long reassigned;
  int64_t last_hb;
  spare_t *spares;
  int nspares, capspares;
  int stop; /* end at the next step boundary (resihp__coord_stop) */
};

static void logc(resihp_log_level_t l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logc(resihp_log_level_t l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  resihp_vlog(l, "coord", fmt, ap);
  va_end(ap);
}

static void send_to(resihp__coord_t *c, int r, const char *line) {
  rep_t *p = &c->reps[r];
  if (p->conn < 0)
    return;
  if (resihp__wire_send(c->conns[p->conn].w.fd, line, resihp__now_ms() + 2000) <
      0)
    logc(RESIHP_LOG_WARN, "cannot send to replica %d", r);
}

static int is_member(const resihp__coord_t *c, int r) {
  for (int i = 0; i < c->nmembers; i++)
    if (c->members[i] == r)
      return 1;
  return 0;
}

static void remove_member(resihp__coord_t *c, int r) {
  int k = 0;
  c->changed |= is_member(c, r);
  for (int i = 0; i < c->nmembers; i++)
    if (c->members[i] != r)
      c->members[k++] = c->members[i];
  c->nmembers = k;
}

static void add_member(resihp__coord_t *c, int r) {
  int i = c->nmembers++;
  c->changed = 1;
  while (i > 0 && c->members[i - 1] > r) {
    c->members[i] = c->members[i - 1];
    i--;
  }
  c->members[i] = r;
}

static void close_conn(resihp__coord_t *c, int k) {
  conn_t *cn = &c->conns[k];
  resihp__wire_free(&cn->w);
  if (cn->replica >= 0 && c->reps[cn->replica].conn == k)
    c->reps[cn->replica].conn = -1;
  cn->replica = -1;
}

static void send_go(resihp__coord_t *c);
static void advance(resihp__coord_t *c);

/* Replica r has failed: leave it out, tell the launcher. */
static void fail_replica(resihp__coord_t *c, int r, const char *why) {
  rep_t *p = &c->reps[r];
  if (p->state == R_GONE || p->state == R_NONE)
    return;
  int was_member = is_member(c, r);
  remove_member(c, r);
  if (p->conn >= 0)
    close_conn(c, p->conn);
  p->state = R_GONE;
  p->catching = 0;
  logc(RESIHP_LOG_WARN, "replica %d failed at step %ld (%s)", r, c->step, why);
  if (c->nfails < MAX_FAIL && c->state == RESIHP__COORD_RUNNING) {
    fail_t *f = &c->fails[c->nfails];
    memset(f, 0, sizeof(*f));
    f->replica = r;
    f->t_detect = resihp__now_ms();
    int announced = p->fault_kind[0] && f->t_detect - p->fault_ms < 120000;
    if (announced)
      memcpy(f->kind, p->fault_kind, sizeof(f->kind));
    else
      strcpy(f->kind, "detected");
    snprintf(f->why, sizeof(f->why), "%s", why);
    /* An outside fault (nobody announced it) happened at an unknown time
     * after the replica's last sign of life: report that, not the
     * detection time. */
    f->outside = !announced;
    f->t_fault = announced          ? p->fault_ms
                 : p->last_life > 0 ? p->last_life
                                    : f->t_detect;
    f->step = announced ? p->fault_step : c->step;
    f->catchup = announced && p->fault_step < 0;
    if (f->step < 0)
      f->step = c->step;
    p->open_fail = c->nfails++;
  }
  p->fault_kind[0] = '\0';
  if (c->o.on_failed && c->phase != P_END)
    c->o.on_failed(c->o.ud, r, p->node, p->jobid, p->stepid, why);
  if (was_member && c->phase == P_SETUP)
    send_go(c); /* a new epoch without it */
}

void resihp__coord_mark_failed(resihp__coord_t *c, int r, const char *why) {
  if (r < 0 || r >= c->R)
    return;
  rep_t *p = &c->reps[r];
  p->expected = 0; /* no replacement is coming */
  if (p->state == R_NONE) {
    p->state = R_GONE;
    logc(RESIHP_LOG_WARN, "replica %d given up (%s)", r, why);
  } else {
    fail_replica(c, r, why);
  }
  advance(c);
}

static void append(char *buf, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *off, const char *fmt, ...) {
  if (*off >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *off, cap - *off, fmt, ap);
  va_end(ap);
  if (w > 0)
    *off += (size_t)w;
}

static void member_list(resihp__coord_t *c, char *buf, size_t cap) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->nmembers; i++)
    append(buf, cap, &off, "%s%d@%s", i ? "," : "", c->members[i],
           c->reps[c->members[i]].ep);
}

/* Start of a step's set-up: GO to every member, a new epoch if the member
 * list differs from the last one started. */
static void send_go(resihp__coord_t *c) {
  if (c->nmembers == 0) {
    c->phase = P_BARRIER;
    return;
  }
  int same = c->nmembers == c->nlast && !c->changed;
  c->changed = 0;
  for (int i = 0; same && i < c->nmembers; i++)
    same = c->members[i] == c->last_list[i];
  if (!same || c->phase == P_SETUP)
    c->epoch++;
  c->phase = P_SETUP;
  char *line = malloc(LINE * 4), list[LINE * 3];
  if (!line)
    return;
  member_list(c, list, sizeof(list));
  snprintf(line, LINE * 4, "GO step=%ld epoch=%u new=%d members=%s", c->step,
           c->epoch, same ? 0 : 1, list);
  for (int i = 0; i < c->nmembers; i++) {
    c->reps[c->members[i]].ready = same;
    send_to(c, c->members[i], line);
  }
  free(line);
  memcpy(c->last_list, c->members, sizeof(int) * (size_t)c->nmembers);
  c->nlast = c->nmembers;
  if (!same)
    logc(RESIHP_LOG_INFO, "step %ld: epoch %u with %d replicas: %s", c->step,
         c->epoch, c->nmembers, list);
}

static int contributors(resihp__coord_t *c, int *out) {
  int n = 0;
  for (int i = 0; i < c->nmembers; i++)
    if (!c->reps[c->members[i]].catching)
      out[n++] = c->members[i];
  return n;
}

static void lose(resihp__coord_t *c, const char *why) {
  logc(RESIHP_LOG_ERROR,
       "training cannot go on at step %ld: %s; the job's state is lost "
       "(add spares or replicas)",
       c->step, why);
  c->state = RESIHP__COORD_LOST;
  c->t_done = resihp__now_ms();
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].conn >= 0)
      send_to(c, r, "NO reason=job-lost");
}

static void start_step(resihp__coord_t *c) {
  int contrib[MAXR];
  int nc = contributors(c, contrib);
  if (nc == 0) {
    lose(c, "no member holds a valid state");
    return;
  }
  for (int mb = 0; mb < c->M; mb++)
    c->owner[mb] = contrib[(long)mb * nc / c->M];
  for (int k = 0; k < c->nrounds; k++) {
    free(c->rounds[k].mb);
    free(c->rounds[k].to);
  }
  c->nrounds = 0;
  int64_t now = resihp__now_ms();
  c->start_ms[c->step] = now;
  c->phase = P_RUN;
  char *line = malloc(LINE * 4);
  if (!line)
    return;
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    rep_t *p = &c->reps[r];
    size_t off = 0;
    append(line, LINE * 4, &off, "START step=%ld epoch=%u mbs=", c->step,
           c->epoch);
    int first = 1, nq = 0;
    for (int mb = 0; mb < c->M; mb++)
      if (c->owner[mb] == r) {
        append(line, LINE * 4, &off, "%s%d", first ? "" : ":", mb);
        first = 0;
        nq++;
      }
    if (p->catching) {
      append(line, LINE * 4, &off, " catchup=1");
    } else {
      /* joiners are spread over the contributors */
      int sfirst = 1, ji = 0;
      for (int k = 0; k < c->nmembers; k++) {
        rep_t *q = &c->reps[c->members[k]];
        if (!q->catching)
          continue;
        if (contrib[ji++ % nc] == r) {
          append(line, LINE * 4, &off, "%s%d@%s", sfirst ? " serve=" : ",",
                 c->members[k], q->sep);
          sfirst = 0;
        }
      }
      if (p->open_fail >= 0 && nq > 0) {
        fail_t *f = &c->fails[p->open_fail];
        if (!f->t_train)
          f->t_train = now;
        p->open_fail = -1;
      }
    }
    send_to(c, r, line);
  }
  free(line);
}

static void commit_step(resihp__coord_t *c) {
  logc(RESIHP_LOG_DEBUG, "step %ld committed by %d replicas", c->step,
       c->nmembers);
  if (c->o.ledger) {
    fprintf(c->o.ledger, "%ld", c->step);
    for (int mb = 0; mb < c->M; mb++)
      fprintf(c->o.ledger, " %d", c->owner[mb]);
    fputc('\n', c->o.ledger);
    fflush(c->o.ledger);
  }
  for (int i = 0; i < c->nmembers; i++)
    c->reps[c->members[i]].catching = 0;
  c->step++;
  c->phase = P_BARRIER;
}

/* Every member has committed the last step: DONE instead of GO, to the
 * joiners too (the trainers then FINISH with their result). Used at the
 * last step and when the launcher asks to stop (resihp__coord_stop). */
static void end_training(resihp__coord_t *c) {
  c->phase = P_END;
  c->t_done = resihp__now_ms();
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].conn >= 0)
      send_to(c, r, "DONE");
}

/* With hold_for_replacements, a step does not start while a replacement
 * the launcher started has not reached the barrier: the replacement joins
 * at the first boundary after it is up, however long its start takes. */
static int replacement_on_its_way(const resihp__coord_t *c) {
  if (!c->o.hold_for_replacements)
    return 0;
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].expected &&
        !(c->reps[r].state == R_JOINING && c->reps[r].waiting))
      return 1;
  return 0;
}

void resihp__coord_stop(resihp__coord_t *c) {
  if (!c->stop)
    logc(RESIHP_LOG_INFO, "stop asked: step %ld is the last to start", c->step);
  c->stop = 1;
  advance(c);
}

void resihp__coord_expect(resihp__coord_t *c, int replica, int on) {
  if (replica >= 0 && replica < c->R)
    c->reps[replica].expected = on;
  advance(c);
}

/* Move the state machine on as far as the replicas let it. */
static void advance(resihp__coord_t *c) {
  for (int guard = 0; guard < 8 && c->state == RESIHP__COORD_RUNNING; guard++) {
    if (c->phase == P_RUN) {
      for (int i = 0; i < c->nmembers; i++)
        if (c->reps[c->members[i]].begun <= c->step)
          return;
      if (c->nmembers == 0 && c->step > 0) {
        lose(c, "every replica failed");
        return;
      }
      commit_step(c);
      continue;
    }
    if (c->phase == P_SETUP) {
      for (int i = 0; i < c->nmembers; i++)
        if (!c->reps[c->members[i]].ready)
          return;
      if (c->nmembers == 0) {
        c->phase = P_BARRIER;
        continue;
      }
      start_step(c);
      return;
    }
    if (c->phase == P_END) {
      for (int i = 0; i < c->nmembers; i++)
        if (!c->reps[c->members[i]].finished)
          return;
      c->state = RESIHP__COORD_DONE;
      return;
    }
    /* P_BARRIER */
    if (c->S == 0 && !c->stop)
      return; /* nobody said hello yet */
    for (int i = 0; i < c->nmembers; i++)
      if (c->reps[c->members[i]].begun < c->step)
        return;
    if (c->nmembers == 0 && c->step > 0) {
      lose(c, "every replica that held the state failed");
      return;
    }
    if (c->stop || c->step >= c->S) {
      end_training(c);
      continue;
    }
    if (replacement_on_its_way(c))
      return;
    int nwait = 0, pending = 0;
    for (int r = 0; r < c->R; r++) {
      if (c->reps[r].state == R_JOINING && c->reps[r].waiting)
        nwait++;
      else if (c->reps[r].state == R_NONE ||
               (c->reps[r].state == R_JOINING && !c->reps[r].waiting))
        pending++;
    }
    if (c->nmembers == 0 && (pending || !nwait))
      return; /* the first step waits for every initial replica */
    for (int r = 0; r < c->R; r++) {
      rep_t *p = &c->reps[r];
      if (p->state == R_JOINING && p->waiting) {
        p->state = R_MEMBER;
        p->waiting = 0;
        p->catching = c->step > 0;
        p->begun = c->step;
        p->finished = 0;
        p->expected = 0;
        add_member(c, r);
        if (p->open_fail >= 0 && !c->fails[p->open_fail].t_admit)
          c->fails[p->open_fail].t_admit = resihp__now_ms();
      }
    }
    send_go(c);
  }
}

static void on_recover(resihp__coord_t *c, int r, const char *msg) {
  long s = -1, ce = -1;
  char view[LINE];
  int *v = NULL, nv = 0;
  if (resihp__wire_get_long(msg, "step", &s) ||
      resihp__wire_get_long(msg, "cepoch", &ce) ||
      resihp__wire_get(msg, "view", view, sizeof(view)) ||
      resihp__wire_parse_ints(view, &v, &nv) || s != c->step ||
      c->phase != P_RUN) {
    logc(RESIHP_LOG_ERROR, "replica %d: bad or late RECOVER (%s)", r, msg);
    free(v);
    send_to(c, r, "NO reason=bad-recover");
    return;
  }
  round_t *rd = NULL;
  for (int k = 0; k < c->nrounds; k++)
    if (c->rounds[k].cepoch == (uint32_t)ce)
      rd = &c->rounds[k];
  if (!rd) {
    if (c->nrounds == MAX_ROUNDS) {
      free(v);
      lose(c, "too many failures in one step");
      return;
    }
    rd = &c->rounds[c->nrounds++];
    rd->cepoch = (uint32_t)ce;
    rd->n = 0;
    rd->mb = malloc(sizeof(int) * (size_t)c->M);
    rd->to = malloc(sizeof(int) * (size_t)c->M);
    if (!rd->mb || !rd->to) {
      free(v);
      lose(c, "out of memory");
      return;
    }
    char inview[MAXR] = {0};
    for (int i = 0; i < nv; i++)
      if (v[i] >= 0 && v[i] < c->R)
        inview[v[i]] = 1;
    /* members the survivors left out */
    int gone[MAXR], ng = 0;
    for (int i = 0; i < c->nmembers; i++)
      if (!inview[c->members[i]])
        gone[ng++] = c->members[i];
    for (int i = 0; i < ng; i++) {
      rep_t *p = &c->reps[gone[i]];
      if (p->catchup_failed && p->conn >= 0) {
        remove_member(c, gone[i]);
        p->state = R_JOINING;
        p->waiting = 1;
        p->catching = 0;
        p->catchup_failed = 0;
      } else {
        fail_replica(c, gone[i], "left out by the survivors");
      }
    }
    int contrib[MAXR], nc = 0;
    for (int i = 0; i < nv; i++)
      if (v[i] >= 0 && v[i] < c->R && c->reps[v[i]].state == R_MEMBER &&
          !c->reps[v[i]].catching)
        contrib[nc++] = v[i];
    int k = 0;
    for (int mb = 0; mb < c->M; mb++) {
      if (inview[c->owner[mb]])
        continue;
      if (nc == 0) {
        free(v);
        lose(c, "no survivor holds a valid state");
        return;
      }
      int to = contrib[k++ % nc];
      c->owner[mb] = to;
      rd->mb[rd->n] = mb;
      rd->to[rd->n] = to;
      rd->n++;
    }
    c->reassigned += rd->n;
    logc(RESIHP_LOG_INFO,
         "step %ld: %d microbatches of failed replicas reassigned to %d "
         "survivors",
         c->step, rd->n, nc);
  }
  free(v);
  char *line = malloc(LINE * 2);
  if (!line)
    return;
  size_t off = 0;
  append(line, LINE * 2, &off, "REASSIGN step=%ld cepoch=%ld extra=", s, ce);
  int first = 1;
  for (int i = 0; i < rd->n; i++)
    if (rd->to[i] == r) {
      append(line, LINE * 2, &off, "%s%d", first ? "" : ":", rd->mb[i]);
      first = 0;
    }
  send_to(c, r, line);
  free(line);
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
    resihp__wire_send(cn->w.fd, line, resihp__now_ms() + 1000);
    cn->sub_replica = -1;
  }
}

static void on_subhello(resihp__coord_t *c, int k, const char *msg) {
  long r = -1, sid = -1, jid = -1;
  if (resihp__wire_get_long(msg, "replica", &r) || r < 0 || r >= c->R ||
      resihp__wire_get_long(msg, "stepid", &sid) ||
      resihp__wire_get_long(msg, "jobid", &jid)) {
    close_conn(c, k);
    return;
  }
  c->conns[k].sub_replica = (int)r;
  c->conns[k].sub_stepid = sid;
  c->conns[k].sub_jobid = jid;
  answer_subs(c, (int)r);
}

static void on_hello(resihp__coord_t *c, int k, const char *msg) {
  long r = -1, m = 0, s = 0, jobid = -1, stepid = -1;
  char ep[96] = "", sep[96] = "", node[64] = "?";
  if (resihp__wire_get_long(msg, "replica", &r) ||
      resihp__wire_get_long(msg, "mbs", &m) ||
      resihp__wire_get_long(msg, "steps", &s) ||
      resihp__wire_get(msg, "ep", ep, sizeof(ep)) ||
      resihp__wire_get(msg, "sep", sep, sizeof(sep)) || r < 0 || r >= c->R ||
      m < 1 || m > 1000000 || s < 1) {
    logc(RESIHP_LOG_ERROR, "bad HELLO (%s): refused", msg);
    resihp__wire_send(c->conns[k].w.fd, "NO reason=bad-hello",
                      resihp__now_ms() + 1000);
    close_conn(c, k);
    return;
  }
  resihp__wire_get(msg, "node", node, sizeof(node));
  resihp__wire_get_long(msg, "jobid", &jobid);
  resihp__wire_get_long(msg, "stepid", &stepid);
  if (c->S && (m != c->M || s != c->S)) {
    logc(RESIHP_LOG_ERROR,
         "replica %ld has %ld microbatches x %ld steps, the job %d x %ld: "
         "refused (every replica must run the same training)",
         r, m, s, c->M, c->S);
    resihp__wire_send(c->conns[k].w.fd, "NO reason=mismatch",
                      resihp__now_ms() + 1000);
    close_conn(c, k);
    return;
  }
  rep_t *p = &c->reps[r];
  if (p->state == R_MEMBER || (p->state == R_JOINING && p->conn >= 0) ||
      c->state != RESIHP__COORD_RUNNING) {
    logc(RESIHP_LOG_ERROR, "replica %ld is already running: refused", r);
    resihp__wire_send(c->conns[k].w.fd, "NO reason=duplicate",
                      resihp__now_ms() + 1000);
    close_conn(c, k);
    return;
  }
  if (!c->S) {
    c->M = (int)m;
    c->S = s;
    c->owner = calloc((size_t)m, sizeof(int));
    c->start_ms = calloc((size_t)s + 1, sizeof(int64_t));
    if (!c->owner || !c->start_ms) {
      lose(c, "out of memory");
      return;
    }
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
  if (resihp__wire_get(msg, "lep", p->lep, sizeof(p->lep)) ||
      !strcmp(p->lep, "-"))
    p->lep[0] = '\0';
  c->conns[k].replica = (int)r;
  p->last_life = resihp__now_ms();
  char line[128];
  snprintf(line, sizeof(line), "WELCOME replica=%ld step=%ld", r, c->step);
  send_to(c, (int)r, line);
  logc(RESIHP_LOG_INFO, "replica %ld joined from %s (node %s, step %ld.%ld)", r,
       ep, node, jobid, stepid);
  answer_subs(c, (int)r);
}

static spare_t *find_spare(const resihp__coord_t *c, const char *node) {
  for (int i = 0; i < c->nspares; i++)
    if (!strcmp(c->spares[i].node, node))
      return &c->spares[i];
  return NULL;
}

const char *resihp__spare_state_name(int state) {
  switch (state) {
  case RESIHP__SPARE_CHECKING:
    return "checking";
  case RESIHP__SPARE_HEALTHY:
    return "registered-healthy";
  case RESIHP__SPARE_FAILED_PROBE:
    return "failed-probe";
  case RESIHP__SPARE_UNREACHABLE:
    return "unreachable";
  case RESIHP__SPARE_PROMOTED:
    return "promoted";
  }
  return "?";
}

int resihp__coord_spare_add(resihp__coord_t *c, const char *node) {
  if (find_spare(c, node))
    return 0;
  if (c->nspares == RESIHP__COORD_MAX_SPARES || strlen(node) >= 64)
    return RESIHP_ENOSPC;
  if (c->nspares == c->capspares) {
    int n = c->capspares ? 2 * c->capspares : 16;
    spare_t *x = realloc(c->spares, sizeof(spare_t) * (size_t)n);
    if (!x)
      return RESIHP_ENOMEM;
    c->spares = x;
    c->capspares = n;
  }
  spare_t *sp = &c->spares[c->nspares++];
  memset(sp, 0, sizeof(*sp));
  snprintf(sp->node, sizeof(sp->node), "%s", node);
  sp->replica = -1;
  return 0;
}

int resihp__coord_spare_state(const resihp__coord_t *c, const char *node,
                              long *registrations) {
  const spare_t *sp = find_spare(c, node);
  if (registrations)
    *registrations = sp ? sp->registrations : 0;
  return sp ? sp->state : RESIHP__SPARE_CHECKING;
}

static int spare_bad(int state) {
  return state == RESIHP__SPARE_FAILED_PROBE ||
         state == RESIHP__SPARE_UNREACHABLE;
}

void resihp__coord_spare_mark(resihp__coord_t *c, const char *node, int state,
                              int replica, const char *why) {
  if (resihp__coord_spare_add(c, node))
    return;
  spare_t *sp = find_spare(c, node);
  if (spare_bad(sp->state))
    return;
  sp->state = state;
  sp->replica = replica;
  if (why)
    snprintf(sp->summary, sizeof(sp->summary), "%s", why);
  if (spare_bad(state))
    logc(RESIHP_LOG_WARN, "spare %s is %s (%s)", node,
         resihp__spare_state_name(state), why ? why : "");
}

/* SPARE node=N status=pass|fail summary=TEXT from a spare agent. */
static void on_spare(resihp__coord_t *c, int k, const char *msg) {
  char node[64] = "", status[8] = "", summary[400] = "", line[128];
  if (resihp__wire_get(msg, "node", node, sizeof(node)) || !node[0] ||
      resihp__wire_get(msg, "status", status, sizeof(status)) ||
      (strcmp(status, "pass") && strcmp(status, "fail")) ||
      resihp__coord_spare_add(c, node)) {
    logc(RESIHP_LOG_ERROR, "bad SPARE registration (%.200s): refused", msg);
    resihp__wire_send(c->conns[k].w.fd, "NO reason=bad-spare",
                      resihp__now_ms() + 1000);
    close_conn(c, k);
    return;
  }
  resihp__wire_get_rest(msg, "summary", summary, sizeof(summary));
  spare_t *sp = find_spare(c, node);
  sp->registrations++;
  int pass = !strcmp(status, "pass");
  /* a bad spare stays bad; a promoted one belongs to its replica */
  if (!spare_bad(sp->state) && sp->state != RESIHP__SPARE_PROMOTED) {
    sp->state = pass ? RESIHP__SPARE_HEALTHY : RESIHP__SPARE_FAILED_PROBE;
    snprintf(sp->summary, sizeof(sp->summary), "%s",
             pass || !strcmp(summary, "-") ? "" : summary);
  }
  logc(pass ? RESIHP_LOG_DEBUG : RESIHP_LOG_WARN,
       "spare %s registered: probe %s%s%s -> %s", node, status,
       pass ? "" : ": ", pass ? "" : summary,
       resihp__spare_state_name(sp->state));
  snprintf(line, sizeof(line), "SPARE_OK state=%s",
           resihp__spare_state_name(sp->state));
  resihp__wire_send(c->conns[k].w.fd, line, resihp__now_ms() + 1000);
  if (c->o.on_spare)
    c->o.on_spare(c->o.ud, node, sp->state, sp->summary);
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
    fail_replica(c, r, why);
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

static void on_line(resihp__coord_t *c, int k, const char *msg) {
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
      on_spare(c, k, msg);
    else
      close_conn(c, k);
    return;
  }
  rep_t *p = &c->reps[r];
  long v;
  if (!strncmp(msg, "BEGIN ", 6)) {
    if (resihp__wire_get_long(msg, "step", &v))
      return;
    if (p->state == R_MEMBER)
      p->begun = v;
    else if (p->state == R_JOINING)
      p->waiting = 1;
  } else if (!strncmp(msg, "READY ", 6)) {
    if (!resihp__wire_get_long(msg, "epoch", &v) && (uint32_t)v == c->epoch &&
        p->state == R_MEMBER)
      p->ready = 1;
  } else if (!strncmp(msg, "RESYNC ", 7)) {
    if (!resihp__wire_get_long(msg, "epoch", &v) && (uint32_t)v == c->epoch &&
        c->phase == P_SETUP) {
      logc(RESIHP_LOG_WARN,
           "replica %d could not set up epoch %u; trying a new epoch", r,
           c->epoch);
      send_go(c);
    }
  } else if (!strncmp(msg, "RECOVER ", 8)) {
    on_recover(c, r, msg);
  } else if (!strncmp(msg, "FAULT ", 6)) {
    on_fault_report(c, r, msg);
  } else if (!strncmp(msg, "CATCHUP_FAILED", 14)) {
    logc(RESIHP_LOG_WARN,
         "replica %d lost its catch-up source; it will be admitted again", r);
    p->catchup_failed = 1;
    /* It leaves this step's group at once (it contributed nothing): the
     * step must not wait for it, even if no survivor reports a RECOVER. */
    if (p->state == R_MEMBER && p->catching) {
      remove_member(c, r);
      p->state = R_JOINING;
      p->waiting = 1;
      p->catching = 0;
    }
  } else if (!strncmp(msg, "FINISH ", 7)) {
    resihp__wire_get(msg, "result", p->result, sizeof(p->result));
    p->finished = 1;
  } else {
    logc(RESIHP_LOG_WARN, "replica %d: unknown message '%.40s'", r, msg);
  }
}

static void accept_conn(resihp__coord_t *c) {
  for (;;) {
    int fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    /* GO and START leave back to back: Nagle would hold START for the
     * peer's delayed ACK (~40 ms a step) */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    resihp__wire_t w;
    resihp__wire_init(&w, fd);
    int rc = resihp__wire_auth_server(&w, c->secret, c->o.secret_len, "coord",
                                      resihp__now_ms() + 1000);
    if (rc) {
      logc(RESIHP_LOG_WARN,
           "refused a connection that failed authentication (%s)",
           resihp_strerror(rc));
      resihp__wire_free(&w);
      continue;
    }
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
          resihp__wire_free(&w);
          continue;
        }
        c->conns = n;
        c->capconns = nc;
      }
      k = c->nconns++;
    }
    c->conns[k].w = w;
    c->conns[k].replica = -1;
    c->conns[k].sub_replica = -1;
    c->conns[k].last_heard = resihp__now_ms();
  }
}

int resihp__coord_poll(resihp__coord_t *c, int timeout_ms) {
  struct pollfd *p = malloc(sizeof(*p) * (size_t)(c->nconns + 1));
  if (!p)
    return RESIHP_ENOMEM;
  p[0].fd = c->lfd;
  p[0].events = POLLIN;
  for (int i = 0; i < c->nconns; i++) {
    p[i + 1].fd = c->conns[i].w.fd;
    p[i + 1].events = POLLIN;
    p[i + 1].revents = 0;
  }
  int n = c->nconns;
  poll(p, (nfds_t)n + 1, timeout_ms);
  int64_t now = resihp__now_ms();
  for (int i = 0; i < n; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd < 0 || !p[i + 1].revents)
      continue;
    int rc = resihp__wire_fill(&cn->w);
    cn->last_heard = now;
    char *line = malloc(RESIHP__WIRE_LINE_MAX);
    if (!line)
      break;
    while (cn->w.fd >= 0 &&
           resihp__wire_take(&cn->w, line, RESIHP__WIRE_LINE_MAX))
      on_line(c, i, line);
    free(line);
    if (rc < 0 && cn->w.fd >= 0) {
      int r = cn->replica;
      close_conn(c, i);
      if (r >= 0 && c->state == RESIHP__COORD_RUNNING &&
          !(c->phase == P_END && c->reps[r].finished))
        fail_replica(c, r, "connection lost");
    }
  }
  if (p[0].revents)
    accept_conn(c);
  free(p);
  for (int i = 0; i < c->nconns; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd >= 0 && cn->replica >= 0 &&
        now - cn->last_heard > c->o.silence_ms &&
        c->state == RESIHP__COORD_RUNNING) {
      int r = cn->replica;
      logc(RESIHP_LOG_WARN, "replica %d silent for %lld ms", r,
           (long long)(now - cn->last_heard));
      fail_replica(c, r, "silent");
    }
  }
  if (now - c->last_hb >= 500) {
    c->last_hb = now;
    for (int r = 0; r < c->R; r++)
      if (c->reps[r].conn >= 0)
        send_to(c, r, "HB");
  }
  advance(c);
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
  if (c->o.silence_ms <= 0)
    c->o.silence_ms = 3000;
  c->secret = malloc(o->secret_len);
  if (!c->secret) {
    free(c);
    return RESIHP_ENOMEM;
  }
  memcpy(c->secret, o->secret, o->secret_len);
  c->R = o->replicas;
  for (int r = 0; r < MAXR; r++) {
    c->reps[r].conn = -1;
    c->reps[r].begun = -1;
    c->reps[r].open_fail = -1;
  }
  c->lfd = resihp__wire_listen(o->bind_host, o->port, &c->port);
  if (c->lfd < 0) {
    logc(RESIHP_LOG_ERROR, "cannot listen on %s:%d: %s",
         o->bind_host ? o->bind_host : "*", o->port, strerror(errno));
    int rc = c->lfd;
    free(c->secret);
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void resihp__coord_destroy(resihp__coord_t *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nconns; i++)
    resihp__wire_free(&c->conns[i].w);
  for (int k = 0; k < c->nrounds; k++) {
    free(c->rounds[k].mb);
    free(c->rounds[k].to);
  }
  free(c->conns);
  free(c->spares);
  close(c->lfd);
  memset(c->secret, 0, c->o.secret_len);
  free(c->secret);
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
int resihp__coord_members(const resihp__coord_t *c) {
  return c->nmembers;
}
int resihp__coord_connected(const resihp__coord_t *c, int r) {
  return r >= 0 && r < c->R && c->reps[r].conn >= 0;
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
