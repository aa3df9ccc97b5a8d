/* SPDX-License-Identifier: BSD-3-Clause */
/* Coordinator failover: the coordinator's state as text (the snapshot),
 * mirrored write-ahead through opts.on_mirror, and a coordinator rebuilt
 * from it (resihp__coord_restore) that continues the job.
 *
 * Write-ahead. Whatever changes the state marks it dirty
 * (resihp__coord_dirty: every line but a heartbeat, a replica's failure,
 * a decided round, a commit, the launcher's calls). Before a message goes
 * to a replica (resihp__coord_send_to) and before ledger lines are written
 * (resihp__coord_write_ledger), a dirty state is mirrored. So every answer
 * a replica may have seen, and every ledger line, follows from a state the
 * keeper holds; what a replica did not see it asks again, and the
 * coordinator answers requests idempotently (coord_protocol.c). A free run
 * costs a mirror per commit only (PROG), not per heartbeat.
 *
 * What is mirrored: the job's shape, the step, phase, epochs, member lists,
 * owners, the last START (to send it again), every replica's record
 * (addresses, Slurm step, begun/ready/catching, list epoch, quota, results,
 * its fail-slow statistics), stop and abort, the RECOVER rounds of the step
 * (a re-sent RECOVER gets the same REASSIGN), the save in progress, the
 * failure records of the summary and the spare registry, the cost plan of
 * the last START ("cp", parsed as a START's) and the owners a free run by
 * cost reported that are not in the ledger yet ("ow"), the switch costs
 * measured and the decisions taken for slow replicas ("w",
 * coord_decide.c; a switch being timed then is not) and the launches timed
 * that price a swap until one is measured ("wl"). What is not, and
 * is rebuilt: connections and handshakes (every member must reconnect,
 * HELLO ... again=1, within silence_ms of the restore or is failed like a
 * silent replica); the fail-slow detector's history (each rank's detector
 * starts afresh and every replica is healthy until its PERF says
 * otherwise); flags that say a message was already sent (HOLD's held: a
 * reconnecting member of a free run that must end is told again); the
 * step times of the summary but the first and the current one.
 *
 * The ledger: the steps before `step` are committed, base_step..step-1, and
 * the file's lines since the run began are ledger_have of them; the
 * restored coordinator writes the others (a commit mirrors, then writes,
 * with the owners that hold until the next START).
 *
 * Format: lines of space-separated fields, numbers in decimal, id lists as
 * "a:b:c" ("-" when empty), free tokens as "=value", texts with spaces to
 * the end of the line (printable ASCII). The parser trusts nothing: every
 * count, id and length is bounded, and the result must pass
 * resihp__coord_check.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "RESIHP-COORD 1"
/* RECOVER reports one member may make in one step (coord_rounds.c): a
 * bound on the rounds a snapshot may hold. */
#define ROUNDS_PER_REPLICA 8
/* The longest step time a record may say (a day) */
#define STEP_MS_MAX 86400000L

/* ---- writing ---- */

/* (A snapshot of 10,000 replicas is ~10^5 fields: they are appended, not
 * printf'ed, where that is simple.) */
static void put_ids(resihp__wire_buf_t *b, const int *v, int n) {
  if (n <= 0)
    resihp__wire_buf_put(b, " -", 2);
  else {
    resihp__wire_buf_put(b, " ", 1);
    resihp__wire_buf_ints(b, v, n);
  }
}

/* The ids r (< n) with set[r] != 0. */
static void put_set(resihp__wire_buf_t *b, const char *set, int n) {
  int first = 1;
  resihp__wire_buf_put(b, " ", 1);
  for (int r = 0; r < n && !b->err; r++)
    if (set[r]) {
      if (!first)
        resihp__wire_buf_put(b, ":", 1);
      resihp__wire_buf_long(b, r);
      first = 0;
    }
  if (first)
    resihp__wire_buf_put(b, "-", 1);
}

/* lead, then s with every byte outside [lo, '~'] written as '?'. */
static void put_clean(resihp__wire_buf_t *b, const char *lead, const char *s,
                      char lo) {
  size_t l = strlen(lead), n = s ? strlen(s) : 0;
  resihp__wire_buf_put(b, lead, l);
  resihp__wire_buf_put(b, s ? s : "", n);
  if (b->err)
    return;
  for (char *q = b->s + b->len - n; q < b->s + b->len; q++)
    if (*q < lo || *q > '~')
      *q = '?';
}

/* A text to the end of the line: printable ASCII only. */
static void put_text(resihp__wire_buf_t *b, const char *s) {
  put_clean(b, " ", s, ' ');
}

/* A free token: "=value" (no space inside). */
static void put_word(resihp__wire_buf_t *b, const char *s) {
  put_clean(b, " =", s, '!');
}

int resihp__coord_snapshot(resihp__coord_t *c, resihp__wire_buf_t *b) {
  resihp__wire_buf_printf(b, MAGIC " %d %d %d %ld", c->R, c->M, c->K, c->S);
  put_word(b, c->shape);
  resihp__wire_buf_printf(b, " %ld\n", c->base_step);
  resihp__wire_buf_printf(
      b,
      "c %ld %d %d %" PRIu32 " %" PRIu32 " %d %d %d %d %ld %d %d %ld %d %d "
      "%d %ld %ld %ld %ld %d %d %d %" PRId64 " %" PRId64 " %" PRId64
      " %ld %" PRId64 " %ld %ld\n",
      c->step, c->phase, c->state, c->epoch, c->go_epoch, c->changed, c->stop,
      c->abort_replica, c->wl_asked, c->save_step, c->save_asked, c->save_last,
      c->reassigned, c->save_over, c->start_run, c->nstart_contrib, c->start_at,
      c->samples, c->costed, c->swaps, c->nfails, c->nrounds, c->nspares,
      c->start_ms ? c->start_ms[c->base_step] : 0,
      c->start_ms ? c->start_ms[c->step] : 0, c->t_done, c->starts,
      c->step_ms, c->repartitions, c->shrinks);
  resihp__wire_buf_printf(b, "a");
  put_text(b, c->abort_why);
  resihp__wire_buf_printf(b, "\nl");
  put_text(b, c->lost_why);
  resihp__wire_buf_printf(b, "\nm");
  put_ids(b, c->members, c->nmembers);
  resihp__wire_buf_printf(b, "\nn");
  put_ids(b, c->last_list, c->nlast);
  resihp__wire_buf_printf(b, "\ni");
  put_set(b, c->in_step, c->R);
  resihp__wire_buf_printf(b, "\no");
  put_ids(b, c->owner, c->owner ? c->M : 0);
  resihp__wire_buf_printf(b, "\nso");
  put_ids(b, c->start_owner, c->start_owner ? c->M : 0);
  resihp__wire_buf_printf(b, "\nsc");
  put_ids(b, c->start_contrib, c->start_contrib ? c->nstart_contrib : 0);
  resihp__wire_buf_printf(b, "\n");
  for (int r = 0; r < c->R && !b->err; r++) {
    const rep_t *p = &c->reps[r];
    if (p->state == R_NONE && !p->expected)
      continue;
    resihp__wire_buf_printf(
        b,
        "r %d %d %ld %ld %ld %d %d %d %d %d %d %" PRIu32 " %d %d %d %d %ld "
        "%ld %ld %ld %ld %.17g %ld %" PRId64 " %" PRId64,
        r, p->state, p->jobid, p->stepid, p->begun, p->waiting, p->ready,
        p->catching, p->catchup_failed, p->finished, p->expected, p->list_epoch,
        p->quota, p->reports, p->resyncs, p->open_fail, p->swapped_at,
        p->slow_since, p->slow_steps, p->slow_total, p->slow_episodes,
        p->worst_slow, p->fault_step, p->fault_ms, p->last_life);
    put_word(b, p->node);
    put_word(b, p->lep);
    put_word(b, p->ep);
    put_word(b, p->sep);
    put_word(b, p->fault_kind);
    put_word(b, p->result);
    put_word(b, p->cred);
    resihp__wire_buf_printf(b, "\n");
  }
  for (int i = 0; i < c->nfails && !b->err; i++) {
    const fail_t *f = &c->fails[i];
    resihp__wire_buf_printf(
        b, "f %d %ld %d %d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
        f->replica, f->step, f->catchup, f->outside, f->t_fault, f->t_detect,
        f->t_admit, f->t_train);
    put_word(b, f->kind);
    put_text(b, f->why);
    resihp__wire_buf_printf(b, "\n");
  }
  for (int k = 0; k < c->nrounds && !b->err; k++) {
    const round_t *rd = &c->rounds[k];
    resihp__wire_buf_printf(b, "d %" PRIu32 " %d %d", rd->cepoch, rd->decided,
                            rd->n);
    put_set(b, rd->inview, c->R);
    put_set(b, rd->reported, c->R);
    put_ids(b, rd->mb, rd->mb ? rd->n : 0);
    put_ids(b, rd->to, rd->to ? rd->n : 0);
    resihp__wire_buf_printf(b, "\n");
  }
  for (int k = 0; k < c->nspares && !b->err; k++) {
    const spare_t *sp = &c->spares[k];
    resihp__wire_buf_printf(b, "s %d %ld %d", sp->state, sp->registrations,
                            sp->replica);
    put_word(b, sp->node);
    put_text(b, sp->summary);
    resihp__wire_buf_printf(b, "\n");
  }
  if (c->cplan_have && c->cplan.nc > 0) {
    resihp__wire_buf_printf(b, "cp");
    resihp__costplan_put(b, &c->cplan, NULL, 0);
    resihp__wire_buf_printf(b, "\n");
  }
  if (c->fown_n > 0) {
    resihp__wire_buf_printf(b, "ow %ld", c->fown_at);
    put_ids(b, c->fown, c->fown_n * c->M);
    resihp__wire_buf_printf(b, "\n");
  }
  /* the replicas' partitions of the layers (coord_layers.c) */
  resihp__coord_put_layers(c, b);
  /* the switch costs measured (ms summed, how many) and the decisions
   * taken by kind (coord_decide.c), so that a standby goes on from them */
  long dn = 0;
  for (int k = 0; k < RESIHP__DECIDE__N; k++)
    dn += c->cost_n[k] + c->decisions[k];
  if (dn) {
    resihp__wire_buf_printf(b, "w");
    for (int k = 0; k < RESIHP__DECIDE__N; k++)
      resihp__wire_buf_printf(
          b, " %lld %ld %ld",
          c->cost_sum[k] > 0 ? (long long)llround(c->cost_sum[k] * 1000) : 0,
          c->cost_n[k], c->decisions[k]);
    resihp__wire_buf_printf(b, "\n");
  }
  /* the launches timed (ms summed, how many) that price a swap until one
   * is measured: a standby that takes over prices it so too */
  if (c->launch_n > 0)
    resihp__wire_buf_printf(b, "wl %lld %ld\n",
                            (long long)llround(c->launch_sum * 1000),
                            c->launch_n);
  /* the coordinator's term (vouch.h): a standby's takeover is term+1 */
  if (c->term)
    resihp__wire_buf_printf(b, "t %" PRIu32 "\n", c->term);
  resihp__wire_buf_printf(b, "end\n");
  return b->err;
}

/* How long a restored coordinator waits for its members (on the
 * listening clock, coord_loop.c): the silence bound, plus two steps, since
 * a member in a free run looks at its link at its step boundaries only
 * (recovery/job_step.c) and the kill may come just after one. */
static int64_t reconnect_window(const resihp__coord_t *c) {
  return c->o.silence_ms + 2 * c->step_ms;
}

void resihp__coord_reconnect_within(resihp__coord_t *c, int ms) {
  if (c->reconnect_by) {
    int64_t w = reconnect_window(c);
    c->reconnect_by = c->listened + (ms > w ? ms : w);
  }
}

static void shift(int64_t *t, int64_t d) {
  if (*t)
    *t += d;
}

void resihp__coord_shift_times(resihp__coord_t *c, int64_t delta_ms) {
  for (long s = c->base_step; c->start_ms && s <= c->step; s++)
    shift(&c->start_ms[s], delta_ms);
  shift(&c->t_done, delta_ms);
  shift(&c->rm_ms, delta_ms); /* switches being timed (coord_decide.c) */
  shift(&c->sw_ms, delta_ms);
  shift(&c->dg_ms, delta_ms);
  for (int r = 0; r < c->R; r++) {
    shift(&c->reps[r].fault_ms, delta_ms);
    shift(&c->reps[r].last_life, delta_ms);
  }
  for (int i = 0; i < c->nfails; i++) {
    fail_t *f = &c->fails[i];
    shift(&f->t_fault, delta_ms);
    shift(&f->t_detect, delta_ms);
    shift(&f->t_admit, delta_ms);
    shift(&f->t_train, delta_ms);
  }
}

void resihp__coord_mirror_if(resihp__coord_t *c) {
  if (!c->o.on_mirror || !c->dirty || c->mirroring)
    return;
  c->mirroring = 1;
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  int rc = resihp__coord_snapshot(c, &b);
  if (rc)
    logc(RESIHP_LOG_ERROR,
         "cannot build the coordinator's state record (%s): the keeper keeps "
         "an older one, a failover now would lose the job",
         resihp_strerror(rc));
  else
    c->o.on_mirror(c->o.ud, b.s, b.len);
  resihp__wire_buf_free(&b);
  c->dirty = rc != 0;
  c->mirroring = 0;
}

void resihp__coord_mirror(resihp__coord_t *c) {
  c->dirty = 1;
  resihp__coord_mirror_if(c);
}

/* ---- reading ---- */

typedef struct {
  char *p; /* the rest of the line (NUL-terminated) */
  int err;
} cur_t;

static long long num(cur_t *u, long long lo, long long hi) {
  if (u->err || *u->p != ' ') {
    u->err = 1;
    return lo;
  }
  char *s = u->p + 1, *e;
  if (*s != '-' && (*s < '0' || *s > '9')) {
    u->err = 1;
    return lo;
  }
  errno = 0;
  long long v = strtoll(s, &e, 10);
  if (errno || e == s || (*e && *e != ' ') || v < lo || v > hi) {
    u->err = 1;
    return lo;
  }
  u->p = e;
  return v;
}

static double dbl(cur_t *u) {
  if (u->err || *u->p != ' ') {
    u->err = 1;
    return 0;
  }
  char *s = u->p + 1, *e;
  errno = 0;
  double v = strtod(s, &e);
  if (errno || e == s || (*e && *e != ' ') || !(v >= 0 && v < 1e9)) {
    u->err = 1;
    return 0;
  }
  u->p = e;
  return v;
}

/* "=value" into out (cap bytes with its NUL). */
static void word(cur_t *u, char *out, size_t cap) {
  if (u->err || u->p[0] != ' ' || u->p[1] != '=') {
    u->err = 1;
    return;
  }
  char *s = u->p + 2, *e = s;
  while (*e && *e != ' ')
    e++;
  if ((size_t)(e - s) >= cap) {
    u->err = 1;
    return;
  }
  memcpy(out, s, (size_t)(e - s));
  out[e - s] = '\0';
  u->p = e;
}

/* A text to the end of the line. */
static void text(cur_t *u, char *out, size_t cap) {
  if (u->err || *u->p != ' ' || strlen(u->p + 1) >= cap) {
    u->err = 1;
    return;
  }
  for (const char *q = u->p + 1; *q; q++)
    if (*q < ' ' || *q > '~')
      u->err = 1;
  snprintf(out, cap, "%s", u->p + 1);
  u->p += strlen(u->p);
}

/* An id list of at most max ids in [0, hi), "-" for none: the count. */
static int ids(cur_t *u, int *out, int max, int hi) {
  if (u->err || *u->p != ' ') {
    u->err = 1;
    return 0;
  }
  char *s = u->p + 1;
  if (s[0] == '-' && (s[1] == ' ' || s[1] == '\0')) {
    u->p = s + 1;
    return 0;
  }
  int n = 0;
  for (;;) {
    if (*s < '0' || *s > '9' || n >= max) {
      u->err = 1;
      return 0;
    }
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || v >= hi) {
      u->err = 1;
      return 0;
    }
    out[n++] = (int)v;
    if (*e != ':') {
      u->p = e;
      if (*e && *e != ' ')
        u->err = 1;
      return n;
    }
    s = e + 1;
  }
}

/* The same as a set of R flags (ids in increasing order). */
static void set(cur_t *u, char *flags, int R, int *tmp) {
  int n = ids(u, tmp, R, R);
  memset(flags, 0, (size_t)R);
  for (int i = 0; i < n; i++) {
    if ((i && tmp[i] <= tmp[i - 1]))
      u->err = 1;
    flags[tmp[i]] = 1;
  }
}

static int sorted(const int *v, int n) {
  for (int i = 1; i < n; i++)
    if (v[i] <= v[i - 1])
      return 0;
  return 1;
}

/* The next line of the text (NUL-terminated in place), NULL at its end. */
static char *next_line(char **at, char *end) {
  if (*at >= end)
    return NULL;
  char *s = *at, *nl = memchr(s, '\n', (size_t)(end - s));
  if (!nl)
    return NULL; /* a record cut short */
  *nl = '\0';
  *at = nl + 1;
  return s;
}

/* Whether line starts with the tag and a space (or ends there): then u
 * points after the tag. */
static int tag(char *line, const char *t, cur_t *u) {
  size_t n = strlen(t);
  if (strncmp(line, t, n) || (line[n] != ' ' && line[n] != '\0'))
    return 0;
  u->p = line + n;
  u->err = 0;
  return 1;
}

static int restore_rep(resihp__coord_t *c, cur_t *u, int r) {
  rep_t *p = &c->reps[r];
  p->state = (int)num(u, R_NONE, R_GONE);
  p->jobid = (long)num(u, -1, LONG_MAX);
  p->stepid = (long)num(u, -1, LONG_MAX);
  p->begun = (long)num(u, -1, MAX_STEPS);
  p->waiting = (int)num(u, 0, 1);
  p->ready = (int)num(u, 0, 1);
  p->catching = (int)num(u, 0, 1);
  p->catchup_failed = (int)num(u, 0, 1);
  p->finished = (int)num(u, 0, 1);
  p->expected = (int)num(u, 0, 1);
  p->list_epoch = (uint32_t)num(u, 0, UINT32_MAX);
  p->quota = (int)num(u, 0, c->M);
  p->reports = (int)num(u, 0, INT_MAX);
  p->resyncs = (int)num(u, 0, INT_MAX);
  p->open_fail = (int)num(u, -1, c->nfails - 1);
  p->swapped_at = (long)num(u, -1, MAX_STEPS);
  p->slow_since = (long)num(u, LONG_MIN, LONG_MAX);
  p->slow_steps = (long)num(u, 0, LONG_MAX);
  p->slow_total = (long)num(u, 0, LONG_MAX);
  p->slow_episodes = (long)num(u, 0, LONG_MAX);
  p->worst_slow = dbl(u);
  p->fault_step = (long)num(u, -1, MAX_STEPS);
  p->fault_ms = (int64_t)num(u, LLONG_MIN, LLONG_MAX);
  p->last_life = (int64_t)num(u, LLONG_MIN, LLONG_MAX);
  word(u, p->node, sizeof(p->node));
  word(u, p->lep, sizeof(p->lep));
  char *ep = malloc(RESIHP__COORD_EPS_MAX),
       *sep = malloc(RESIHP__COORD_EPS_MAX);
  int rc = RESIHP_ENOMEM;
  if (ep && sep) {
    word(u, ep, RESIHP__COORD_EPS_MAX);
    word(u, sep, RESIHP__COORD_EPS_MAX);
    rc = 0;
    /* the addresses end up in lists others parse: as a HELLO's */
    if (!u->err && (ep[0] || sep[0]) &&
        (!resihp__wire_list_ok(ep, c->K, RESIHP__COORD_EP_MAX) ||
         !resihp__wire_list_ok(sep, c->K, RESIHP__COORD_EP_MAX)))
      u->err = 1;
    if (!u->err && !ep[0] && (p->state == R_MEMBER || p->state == R_JOINING))
      u->err = 1;
    if (!u->err && (ep[0] || sep[0]))
      rc = resihp__coord_set_eps(c, r, ep, sep);
  }
  free(ep);
  free(sep);
  /* a gone replica's Slurm step and addresses are those of the process
   * its failure or swap retired (nothing has replaced it yet) */
  if (!rc && p->state == R_GONE && p->ep)
    p->retired = resihp__coord_identity(p->jobid, p->stepid, p->ep, p->sep);
  word(u, p->fault_kind, sizeof(p->fault_kind));
  word(u, p->result, sizeof(p->result));
  word(u, p->cred, sizeof(p->cred));
  /* a credential is hex of its length, or none (a replica never welcome) */
  if (!u->err && p->cred[0] &&
      strspn(p->cred, "0123456789abcdef") != RESIHP__COORD_CRED_HEX)
    u->err = 1;
  if ((p->node[0] && strcmp(p->node, "?") && /* "?": no node= said */
       !resihp__wire_token_ok(p->node, sizeof(p->node))) ||
      (p->lep[0] && !resihp__wire_token_ok(p->lep, sizeof(p->lep))))
    u->err = 1;
  if (*u->p)
    u->err = 1;
  return rc;
}

static int restore_round(resihp__coord_t *c, cur_t *u, int *tmp) {
  if (c->nrounds == c->caprounds) {
    int n = c->caprounds ? 2 * c->caprounds : 8;
    round_t *x = realloc(c->rounds, sizeof(round_t) * (size_t)n);
    if (!x)
      return RESIHP_ENOMEM;
    c->rounds = x;
    c->caprounds = n;
  }
  round_t *rd = &c->rounds[c->nrounds];
  memset(rd, 0, sizeof(*rd));
  rd->inview = malloc((size_t)c->R);
  rd->reported = malloc((size_t)c->R);
  if (c->M) {
    rd->mb = malloc(sizeof(int) * (size_t)c->M);
    rd->to = malloc(sizeof(int) * (size_t)c->M);
  }
  c->nrounds++; /* freed with the others from now on */
  if (!rd->inview || !rd->reported || (c->M && (!rd->mb || !rd->to)))
    return RESIHP_ENOMEM;
  rd->cepoch = (uint32_t)num(u, 0, UINT32_MAX);
  rd->decided = (int)num(u, 0, 1);
  rd->n = (int)num(u, 0, c->M);
  set(u, rd->inview, c->R, tmp);
  set(u, rd->reported, c->R, tmp);
  int nm = ids(u, rd->mb, c->M, c->M);
  int nt = ids(u, rd->to, c->M, c->R);
  if (nm != rd->n || nt != rd->n || *u->p)
    u->err = 1;
  return 0;
}

static int restore_spare(resihp__coord_t *c, cur_t *u) {
  int state = (int)num(u, RESIHP__SPARE_CHECKING, RESIHP__SPARE_SUSPECT);
  long regs = (long)num(u, 0, LONG_MAX);
  int replica = (int)num(u, -1, c->R - 1);
  char node[64] = "", summary[200] = "";
  word(u, node, sizeof(node));
  text(u, summary, sizeof(summary));
  if (u->err || !resihp__wire_token_ok(node, sizeof(node)))
    return u->err = 1, 0;
  int n = c->nspares, rc = resihp__coord_spare_add(c, node);
  if (rc)
    return rc;
  if (c->nspares != n + 1)
    return u->err = 1, 0; /* the same node twice */
  spare_t *sp = &c->spares[n];
  sp->state = state;
  sp->registrations = regs;
  sp->replica = replica;
  memcpy(sp->summary, summary, sizeof(summary));
  return 0;
}

/* The job's shape (the header): as the first HELLO sets it. */
static int restore_shape(resihp__coord_t *c, long M, long K, long S,
                         const char *shape) {
  if (!S)
    return M || K ? RESIHP_EPROTO : 0;
  if (M < 1 || M > resihp__wire_max_microbatches() || K < 1 ||
      K > RESIHP__COORD_MAX_SHARDS ||
      !resihp__wire_token_ok(shape, sizeof(c->shape)))
    return RESIHP_EPROTO;
  c->M = (int)M;
  c->K = (int)K;
  c->S = S;
  snprintf(c->shape, sizeof(c->shape), "%s", shape);
  c->owner = calloc((size_t)M, sizeof(int));
  if (!c->owner || resihp__coord_perf_init(c))
    return RESIHP_ENOMEM;
  return 0;
}

/* The body of a snapshot after its header, into c (whose shape is set). */
static int restore_body(resihp__coord_t *c, char *at, char *end, int *tmp) {
  cur_t u = {0};
  char *line = next_line(&at, end);
  if (!line || !tag(line, "c", &u))
    return RESIHP_EPROTO;
  c->step = (long)num(&u, c->base_step, c->S ? c->S : c->base_step);
  c->phase = (int)num(&u, P_BARRIER, P_FREE);
  c->state = (int)num(&u, RESIHP__COORD_RUNNING, RESIHP__COORD_LOST);
  c->epoch = (uint32_t)num(&u, 0, UINT32_MAX);
  c->go_epoch = (uint32_t)num(&u, 0, c->epoch);
  c->changed = (int)num(&u, 0, 1);
  c->stop = (int)num(&u, 0, 1);
  c->abort_replica = (int)num(&u, -1, c->R - 1);
  c->wl_asked = (int)num(&u, -1, c->R - 1);
  c->save_step = (long)num(&u, -1, MAX_STEPS);
  c->save_asked = (int)num(&u, -1, c->R - 1);
  c->save_last = (int)num(&u, -1, c->R - 1);
  c->reassigned = (long)num(&u, 0, LONG_MAX);
  c->save_over = (int)num(&u, 0, 1);
  c->start_run = (int)num(&u, 0, 1);
  c->nstart_contrib = (int)num(&u, 0, c->R);
  c->start_at = (long)num(&u, 0, MAX_STEPS);
  c->samples = (long)num(&u, 0, LONG_MAX);
  c->costed = (long)num(&u, 0, LONG_MAX);
  c->swaps = (long)num(&u, 0, LONG_MAX);
  /* records are made as their lines come: a count is no allocation */
  c->nfails = (int)num(&u, 0, INT_MAX - 1);
  int nrounds = (int)num(&u, 0, ROUNDS_PER_REPLICA * (long)c->R);
  int nspares = (int)num(&u, 0, RESIHP__COORD_MAX_SPARES);
  int64_t t0 = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
  int64_t tstep = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
  c->t_done = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
  c->starts = (long)num(&u, 0, LONG_MAX);
  /* (absent in an older record: unknown) */
  c->step_ms = *u.p ? (int64_t)num(&u, 0, STEP_MS_MAX) : 0;
  /* (absent in an older record: none counted; a standby's summary counts
   * what the primary did) */
  c->repartitions = *u.p ? (long)num(&u, 0, LONG_MAX) : 0;
  c->shrinks = *u.p ? (long)num(&u, 0, LONG_MAX) : 0;
  if (u.err || *u.p || (!c->S && c->phase != P_BARRIER) ||
      (!c->M && c->nstart_contrib))
    return RESIHP_EPROTO;
  if (resihp__coord_ensure_steps(c, c->step + 2))
    return RESIHP_ENOMEM;
  c->start_ms[c->base_step] = t0;
  c->start_ms[c->step] = tstep;
  if (!(line = next_line(&at, end)) || !tag(line, "a", &u))
    return RESIHP_EPROTO;
  text(&u, c->abort_why, sizeof(c->abort_why));
  if (!(line = next_line(&at, end)) || !tag(line, "l", &u))
    return RESIHP_EPROTO;
  text(&u, c->lost_why, sizeof(c->lost_why));
  if (u.err || !(line = next_line(&at, end)) || !tag(line, "m", &u))
    return RESIHP_EPROTO;
  c->nmembers = ids(&u, c->members, c->R, c->R);
  if (u.err || *u.p || !sorted(c->members, c->nmembers) ||
      !(line = next_line(&at, end)) || !tag(line, "n", &u))
    return RESIHP_EPROTO;
  c->nlast = ids(&u, c->last_list, c->R, c->R);
  if (u.err || *u.p || !sorted(c->last_list, c->nlast) ||
      !(line = next_line(&at, end)) || !tag(line, "i", &u))
    return RESIHP_EPROTO;
  set(&u, c->in_step, c->R, tmp);
  if (u.err || *u.p || !(line = next_line(&at, end)) || !tag(line, "o", &u))
    return RESIHP_EPROTO;
  if (ids(&u, c->owner, c->M, c->R) != c->M || u.err || *u.p ||
      !(line = next_line(&at, end)) || !tag(line, "so", &u))
    return RESIHP_EPROTO;
  /* the last START: none before the first one */
  if (c->M) {
    c->start_owner = malloc(sizeof(int) * (size_t)c->M);
    c->start_contrib = malloc(sizeof(int) * (size_t)c->R);
    if (!c->start_owner || !c->start_contrib)
      return RESIHP_ENOMEM;
  }
  int nso = ids(&u, c->start_owner, c->M, c->R);
  if ((nso != c->M && nso != 0) || u.err || *u.p ||
      !(line = next_line(&at, end)) || !tag(line, "sc", &u))
    return RESIHP_EPROTO;
  if (ids(&u, c->start_contrib, c->nstart_contrib, c->R) != c->nstart_contrib ||
      u.err || *u.p)
    return RESIHP_EPROTO;
  if (!nso) {
    if (c->nstart_contrib || c->phase == P_RUN || c->phase == P_FREE)
      return RESIHP_EPROTO;
    free(c->start_owner);
    free(c->start_contrib);
    c->start_owner = c->start_contrib = NULL;
  }
  int last = -1, nf = 0, rc;
  while ((line = next_line(&at, end)) && strcmp(line, "end")) {
    if (tag(line, "r", &u)) {
      int r = (int)num(&u, last + 1, c->R - 1);
      if (u.err)
        return RESIHP_EPROTO;
      last = r;
      if ((rc = restore_rep(c, &u, r)))
        return rc;
    } else if (tag(line, "f", &u)) {
      if (nf >= c->nfails)
        return RESIHP_EPROTO;
      if (resihp__coord_ensure_fails(c, nf + 1))
        return RESIHP_ENOMEM;
      fail_t *f = &c->fails[nf++];
      memset(f, 0, sizeof(*f));
      f->replica = (int)num(&u, 0, c->R - 1);
      f->step = (long)num(&u, 0, MAX_STEPS);
      f->catchup = (int)num(&u, 0, 1);
      f->outside = (int)num(&u, 0, 1);
      f->t_fault = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
      f->t_detect = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
      f->t_admit = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
      f->t_train = (int64_t)num(&u, LLONG_MIN, LLONG_MAX);
      word(&u, f->kind, sizeof(f->kind));
      text(&u, f->why, sizeof(f->why));
    } else if (tag(line, "d", &u)) {
      if (c->nrounds >= nrounds || !c->M)
        return RESIHP_EPROTO;
      if ((rc = restore_round(c, &u, tmp)))
        return rc;
    } else if (tag(line, "s", &u)) {
      if (c->nspares >= nspares)
        return RESIHP_EPROTO;
      if ((rc = restore_spare(c, &u)))
        return rc;
    } else if (tag(line, "w", &u)) {
      /* switch costs and decisions (coord_decide.c): at most a million
       * switches of a week each, in ms */
      for (int k = 0; k < RESIHP__DECIDE__N; k++) {
        c->cost_sum[k] = (double)num(&u, 0, 604800000LL * 1000000) / 1000.0;
        c->cost_n[k] = (long)num(&u, 0, 1000000);
        c->decisions[k] = (long)num(&u, 0, LONG_MAX);
      }
      if (*u.p)
        return RESIHP_EPROTO;
    } else if (tag(line, "wl", &u)) {
      /* (as "w": a million launches of a week each, in ms) */
      c->launch_sum = (double)num(&u, 0, 604800000LL * 1000000) / 1000.0;
      c->launch_n = (long)num(&u, 1, 1000000);
      if (*u.p || u.err)
        return RESIHP_EPROTO;
    } else if (tag(line, "t", &u)) {
      c->term = (uint32_t)num(&u, 1, UINT32_MAX - 1);
      if (*u.p)
        return RESIHP_EPROTO;
    } else if (tag(line, "y", &u)) {
      /* a replica's partition of the layers, as its BEGIN said it */
      int r = (int)num(&u, 0, c->R - 1);
      if (u.err || strncmp(u.p, " lay=", 5) || c->reps[r].lpart)
        return RESIHP_EPROTO;
      if ((rc = resihp__coord_restore_layers(c, r, u.p + 5)))
        return rc == RESIHP_ENOMEM ? rc : RESIHP_EPROTO;
    } else if (tag(line, "cp", &u)) {
      /* the plan of a START by cost (its own parser: every figure) */
      if (c->cplan_have || !c->M || !c->nstart_contrib ||
          resihp__costplan_parse(line, c->R, &c->cplan, NULL, 0) ||
          c->cplan.nc != c->nstart_contrib ||
          memcmp(c->cplan.contrib, c->start_contrib,
                 sizeof(int) * (size_t)c->nstart_contrib))
        return RESIHP_EPROTO;
      c->cplan_have = 1;
    } else if (tag(line, "ow", &u)) {
      /* owners a free run by cost reported, not yet in the ledger */
      if (!c->cplan_have || c->fown_n || c->phase != P_FREE || !c->start_run)
        return RESIHP_EPROTO;
      c->fown_at = (long)num(&u, c->start_at + 1, c->start_at + c->fown_cap);
      int n = ids(&u, c->fown, c->fown_cap * c->M, c->R);
      if (u.err || *u.p || n < c->M || n % c->M ||
          c->fown_at - c->start_at - 1 + n / c->M > c->fown_cap ||
          c->fown_at > (c->step > c->start_at ? c->step : c->start_at + 1))
        return RESIHP_EPROTO;
      for (int i = 0; i < n; i++)
        if (!c->in_step[c->fown[i]])
          return RESIHP_EPROTO; /* not a contributor of the run */
      c->fown_n = n / c->M;
    } else {
      return RESIHP_EPROTO;
    }
    if (u.err)
      return RESIHP_EPROTO;
  }
  /* the end line, and nothing after it */
  if (!line || at != end || nf != c->nfails || c->nrounds != nrounds ||
      c->nspares != nspares)
    return RESIHP_EPROTO;
  /* what resihp__coord_check does not see */
  for (int i = 0; i < c->nlast; i++)
    if (c->reps[c->last_list[i]].state == R_NONE)
      return RESIHP_EPROTO;
  for (int i = 0; i < c->nstart_contrib; i++)
    if (!c->in_step[c->start_contrib[i]])
      return RESIHP_EPROTO;
  if (resihp__coord_check(c))
    return RESIHP_EPROTO;
  return c->start_owner ? resihp__coord_index_start(c) : 0;
}

/* What a standby checks a vouch against (vouch.h): the last membership,
 * each replica's credential (the last word of its r line), the term. Only
 * those lines are read; the rest is the restore's to judge. */
int resihp__coord_snapshot_voters(const char *snap, size_t len, int replicas,
                                  uint32_t *term, int *members, int *nmembers,
                                  char (*creds)[RESIHP__COORD_CRED_HEX + 1]) {
  if (!snap || replicas < 1 || replicas > RESIHP__COORD_MAX_REPLICAS ||
      memchr(snap, '\0', len))
    return RESIHP_EPROTO;
  char *text = malloc(len + 1);
  if (!text)
    return RESIHP_ENOMEM;
  memcpy(text, snap, len);
  text[len] = '\0';
  char *at = text, *end = text + len, *line = next_line(&at, end);
  cur_t u = {0};
  int rc = RESIHP_EPROTO, have_m = 0, ended = 0;
  *term = 0;
  *nmembers = 0;
  for (int r = 0; r < replicas; r++)
    creds[r][0] = '\0';
  if (!line || !tag(line, MAGIC, &u) ||
      num(&u, 1, RESIHP__COORD_MAX_REPLICAS) != replicas || u.err)
    goto out;
  while ((line = next_line(&at, end))) {
    if (!strcmp(line, "end")) {
      ended = 1;
      break;
    }
    if (tag(line, "m", &u)) {
      *nmembers = ids(&u, members, replicas, replicas);
      if (u.err || *u.p || !sorted(members, *nmembers) || have_m++)
        goto out;
    } else if (tag(line, "t", &u)) {
      *term = (uint32_t)num(&u, 1, UINT32_MAX - 1);
      if (u.err || *u.p)
        goto out;
    } else if (tag(line, "r", &u)) {
      int r = (int)num(&u, 0, replicas - 1);
      char *w = strrchr(line, ' ');
      if (u.err || !w || w[1] != '=')
        goto out;
      u.p = w;
      word(&u, creds[r], RESIHP__COORD_CRED_HEX + 1);
      if (u.err || (creds[r][0] && strspn(creds[r], "0123456789abcdef") !=
                                       RESIHP__COORD_CRED_HEX))
        goto out;
    }
  }
  rc = ended && have_m && at == end ? 0 : RESIHP_EPROTO;
out:
  free(text);
  return rc;
}

int resihp__coord_restore(const resihp__coord_opts_t *o, const char *snap,
                          size_t len, long ledger_have, resihp__coord_t **out) {
  if (!o || !snap || !out)
    return RESIHP_EINVAL;
  /* a state record, not a file of any size: R replicas, each a line of
   * at most its addresses and a few numbers */
  size_t cap = (size_t)o->replicas *
                   (2 * RESIHP__COORD_EPS_MAX + RESIHP__COORD_LAY_MAX + 1024) +
               (size_t)4 * RESIHP__WIRE_LINE_MAX;
  if (len > cap || memchr(snap, '\0', len))
    return RESIHP_EPROTO;
  char *text = malloc(len + 1);
  int *tmp = malloc(sizeof(int) * (size_t)(o->replicas > 0 ? o->replicas : 1));
  if (!text || !tmp) {
    free(text);
    free(tmp);
    return RESIHP_ENOMEM;
  }
  memcpy(text, snap, len);
  text[len] = '\0';
  char *at = text, *end = text + len, *line = next_line(&at, end);
  cur_t u = {0};
  char shape[24] = "";
  long long R = 0, M = 0, K = 0, S = 0, base = 0;
  if (line && tag(line, MAGIC, &u)) {
    R = num(&u, 1, RESIHP__COORD_MAX_REPLICAS);
    M = num(&u, 0, INT_MAX);
    K = num(&u, 0, RESIHP__COORD_MAX_SHARDS);
    S = num(&u, 0, MAX_STEPS);
    word(&u, shape, sizeof(shape));
    base = num(&u, 0, MAX_STEPS - 1);
  }
  resihp__coord_t *c = NULL;
  int rc = RESIHP_EPROTO;
  if (!line || !u.p || u.err || *u.p || R != o->replicas || (S && base >= S))
    goto out;
  resihp__coord_opts_t co = *o;
  co.start_step = (long)base;
  if ((rc = resihp__coord_create(&co, &c))) {
    resihp__coord_destroy(c);
    free(text);
    free(tmp);
    return rc; /* not the text's fault */
  }
  if ((rc = restore_shape(c, (long)M, (long)K, (long)S, shape)) ||
      (rc = restore_body(c, at, end, tmp)))
    goto out;
  /* rebuilt, not mirrored (see above) */
  for (int r = 0; r < c->R; r++) {
    c->reps[r].slow = c->reps[r].run_slow = 1.0;
    resihp__coord_perf_stages(c, r); /* (a shrunk one's: its own) */
    c->reps[r].healthy_from = c->step; /* (its detector starts anew) */
  }
  /* a free run that must end: every member is told HOLD when it comes
   * back (coord_protocol.c reattach) */
  c->held = c->phase == P_FREE && resihp__coord_hold_needed(c);
  c->dirty = 0;
  c->reconnect_by = c->listened + reconnect_window(c);
  c->restored_ms = resihp__now_ms();
  c->restored_step = c->again_step = c->step;
  long committed = c->step - c->base_step;
  if (c->o.ledger && ledger_have >= 0 && ledger_have < committed) {
    logc(RESIHP_LOG_INFO,
         "failover: the ledger lacks steps %ld..%ld; writing them",
         c->base_step + ledger_have, c->step - 1);
    resihp__coord_write_ledger(c, c->base_step + ledger_have, c->step);
  } else if (c->o.ledger && ledger_have > committed) {
    logc(RESIHP_LOG_WARN,
         "failover: the ledger holds %ld steps, the state says %ld are "
         "committed",
         ledger_have, committed);
  }
  logc(RESIHP_LOG_INFO,
       "failover: coordinator restored at step %ld, epoch %u, %d members "
       "(each must reconnect within %d ms)",
       c->step, c->epoch, c->nmembers, c->o.silence_ms);
  *out = c;
  c = NULL;
  rc = 0;
out:
  if (rc && rc != RESIHP_ENOMEM)
    rc = RESIHP_EPROTO;
  resihp__coord_destroy(c);
  free(text);
  free(tmp);
  return rc;
}
