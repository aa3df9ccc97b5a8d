/* SPDX-License-Identifier: BSD-3-Clause */
/* The K ranks of one replica (see job_internal.h).
 *
 * Finding each other. Rank 0 of the step (SLURM_PROCID, or the PMIx rank)
 * is the leader. The others learn its address through PMIx, or from the
 * coordinator (SUBHELLO -> LEADER, which the coordinator can answer once
 * the leader said LEP), dial it, authenticate ("local" channel) and say
 * SUB with their addresses (shard group, catch-up, replica communicator),
 * the ranks per replica they were written for and their state's shape.
 * The leader checks that they agree, builds the replica's address lists
 * for its HELLO, and sends every rank RANKS with the replica communicator's
 * endpoints, on which they all create it.
 *
 * The star links stay for control lines: the leader relays what the
 * coordinator says (GO, START, EXTRA, DONE), the others send FAULT
 * announcements (forwarded to the coordinator at once by the leader's
 * relay thread) and their finish results. Heartbeats flow both ways
 * (job.c), so a rank waiting for its leader knows it is alive. */
#include "config.h"

#include "../collectives/comm_internal.h"
#include "job_internal.h"
#include "pmix_wireup.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Non-leader: find the leader, connect, and introduce this rank. */
int resihp__job_join_leader(resihp_job_t *j, const char *jid, const char *sid) {
  char line[512], lep[RESIHP__JOB_EP_MAX] = "";
  int rc;
  const char *how = "PMIx";
  if (!j->pmix || resihp__pmix_leader_ep(j->lrank, lep, sizeof(lep))) {
    how = "the coordinator";
    snprintf(line, sizeof(line),
             "SUBHELLO replica=%d lrank=%d jobid=%s stepid=%s", j->replica,
             j->lrank, jid, sid);
    rc = resihp__job_send(j, line);
    if (!rc)
      rc = resihp__job_recv(j);
    if (rc)
      return rc;
    if (strncmp(j->msg, "LEADER ", 7) ||
        resihp__wire_get(j->msg, "ep", lep, sizeof(lep)))
      return RESIHP_EPROTO;
  }
  resihp_log(RESIHP_LOG_INFO, "job",
             "replica %d rank %d: rank 0 is at %s (found through %s)",
             j->replica, j->lrank, lep, how);
  resihp__wire_free(&j->cw); /* only the leader speaks for the replica */
  int64_t dl = resihp__now_ms() + 30000;
  int fd = resihp__wire_dial(lep, dl);
  if (fd < 0) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: cannot reach the replica's rank 0 at %s",
               j->replica, j->lrank, lep);
    return fd;
  }
  resihp__wire_init(&j->up, fd);
  rc = resihp__wire_auth_client(&j->up, j->secret, j->secret_len, "local", dl);
  if (!rc) {
    char shape[17];
    resihp__job_state_shape(j, shape);
    snprintf(line, sizeof(line),
             "SUB lrank=%d lsize=%d rpr=%d ep=%s sep=%s rep=%s shape=%s",
             j->lrank, j->lsize, j->o.ranks_per_replica, j->ep, j->sep, j->rep,
             shape);
    rc = resihp__wire_send(&j->up, line, dl);
  }
  return rc;
}

/* A handshake-complete connection on lfd and its first line, before the
 * deadline. Strangers never hold this up: their handshakes are records
 * in hs that move on only when they say something (wire.h); nor do
 * connections that authenticate and then say nothing: they wait for
 * their first line side by side in lobby (lobby.h). */
int resihp__job_accept_authed(resihp_job_t *j, resihp__wire_hs_t *hs,
                              resihp__lobby_t *lobby, int lfd,
                              int64_t deadline, int (*give_up)(resihp_job_t *),
                              resihp__wire_t *out, char *line, size_t cap) {
  struct pollfd p[2 + RESIHP__JOB_LOBBY];
  for (;;) {
    resihp__wire_t w;
    while (resihp__wire_hs_next(hs, &w) == 1)
      resihp__lobby_add(lobby, &w);
    if (resihp__lobby_next(lobby, out, line, cap) == 1)
      return 0;
    if (give_up && give_up(j))
      return RESIHP_EPEER;
    int64_t left = deadline - resihp__now_ms();
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    p[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    p[1] = (struct pollfd){.fd = resihp__wire_hs_fd(hs), .events = POLLIN};
    int n = 2 + resihp__lobby_fds(lobby, p + 2);
    poll(p, (nfds_t)n,
         resihp__lobby_wait_ms(
             lobby, resihp__wire_hs_wait_ms(hs, left < 50 ? (int)left : 50)));
    if (p[0].revents)
      resihp__wire_hs_accept(hs, lfd);
  }
}

/* One rank's SUB line: its addresses go at position lr of the lists. */
typedef struct {
  char ep[RESIHP__JOB_EP_MAX], sep[RESIHP__JOB_EP_MAX], rep[RESIHP__JOB_EP_MAX];
  char shape[20];
  long rpr;
} sub_t;

static int parse_sub(const resihp_job_t *j, const char *line, long *lr,
                     sub_t *s) {
  long ls = -1;
  if (strncmp(line, "SUB ", 4) ||
      resihp__wire_get_range(line, "lrank", 1, j->lsize - 1, lr) ||
      resihp__wire_get_range(line, "lsize", 1, RESIHP__JOB_MAX_SHARDS, &ls) ||
      resihp__wire_get_range(line, "rpr", 0, RESIHP__JOB_MAX_SHARDS, &s->rpr) ||
      resihp__wire_get(line, "ep", s->ep, sizeof(s->ep)) ||
      resihp__wire_get(line, "sep", s->sep, sizeof(s->sep)) ||
      resihp__wire_get(line, "rep", s->rep, sizeof(s->rep)) ||
      resihp__wire_get(line, "shape", s->shape, sizeof(s->shape)) ||
      !resihp__wire_token_ok(s->ep, sizeof(s->ep)) ||
      !resihp__wire_token_ok(s->sep, sizeof(s->sep)) ||
      !resihp__wire_token_ok(s->rep, sizeof(s->rep)) ||
      !resihp__wire_token_ok(s->shape, sizeof(s->shape)))
    return RESIHP_EPROTO;
  if (ls != j->lsize) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: rank %ld sees %ld ranks in the step, rank 0 %d",
               j->replica, *lr, ls, j->lsize);
    return RESIHP_EINVAL;
  }
  return 0;
}

/* The ranks of a replica must be written for the same K: a program whose
 * ranks disagree is refused before anything starts. */
static int check_rpr(const resihp_job_t *j, const sub_t *subs) {
  for (int k = 0; k < j->lsize; k++) {
    long want = k ? subs[k].rpr : j->o.ranks_per_replica;
    if (want && want != j->lsize) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: rank %d is written for %ld ranks per replica, "
                 "the step has %d: the program's ranks disagree on the "
                 "job's shape (use resihp-run --ranks-per-replica %ld, or "
                 "fix the program)",
                 j->replica, k, want, j->lsize, want);
      return RESIHP_EINVAL;
    }
  }
  return 0;
}

static void *relay_main(void *arg);

/* Leader: accept the other ranks of the replica and build its lists. */
int resihp__job_accept_ranks(resihp_job_t *j) {
  j->down = calloc((size_t)j->lsize - 1, sizeof(*j->down));
  sub_t *subs = calloc((size_t)j->lsize, sizeof(*subs));
  j->results = calloc((size_t)j->lsize, sizeof(*j->results));
  j->down_open = calloc((size_t)j->lsize, sizeof(int));
  j->setup_epoch = calloc((size_t)j->lsize, sizeof(*j->setup_epoch));
  j->setup_failed = calloc((size_t)j->lsize, sizeof(*j->setup_failed));
  if (!j->down || !subs || !j->results || !j->down_open || !j->setup_epoch ||
      !j->setup_failed) {
    free(subs);
    return RESIHP_ENOMEM;
  }
  for (int k = 0; k < j->lsize - 1; k++)
    resihp__wire_init(&j->down[k], -1);
  int rc = resihp__wire_hs_create(j->secret, j->secret_len, "local",
                                  RESIHP__JOB_HS_PENDING,
                                  RESIHP__JOB_HS_TIMEOUT_MS, &j->lhs);
  if (!rc)
    rc = resihp__lobby_create(RESIHP__JOB_LOBBY, RESIHP__JOB_FIRST_LINE_MS,
                              RESIHP__JOB_SUB_MAX, &j->llobby);
  int64_t dl = resihp__now_ms() + 60000;
  int got = 0;
  while (!rc && got < j->lsize - 1) {
    resihp__wire_t w;
    char line[RESIHP__JOB_SUB_MAX + 1];
    if ((rc = resihp__job_accept_authed(j, j->lhs, j->llobby, j->llfd, dl,
                                        NULL, &w, line, sizeof(line)))) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: only %d of the step's %d other ranks came",
                 j->replica, got, j->lsize - 1);
      break;
    }
    long lr = -1;
    sub_t s;
    int prc = parse_sub(j, line, &lr, &s);
    if (prc == RESIHP_EINVAL)
      rc = prc;
    if (prc || j->down[lr - 1].fd >= 0) {
      resihp__wire_free(&w);
      continue;
    }
    j->down[lr - 1] = w;
    j->down_open[lr - 1] = 1;
    subs[lr] = s;
    got++;
  }
  if (!rc)
    rc = check_rpr(j, subs);
  if (rc) {
    resihp__job_send_down(j, "NO reason=replica-shape");
    free(subs);
    return rc;
  }
  /* the replica's lists, shard order; and the shape of every shard */
  resihp__job_state_shape(j, subs[0].shape);
  snprintf(subs[0].ep, sizeof(subs[0].ep), "%s", j->ep);
  snprintf(subs[0].sep, sizeof(subs[0].sep), "%s", j->sep);
  snprintf(subs[0].rep, sizeof(subs[0].rep), "%s", j->rep);
  resihp__wire_buf_t e, s, r, h;
  resihp__wire_buf_init(&e);
  resihp__wire_buf_init(&s);
  resihp__wire_buf_init(&r);
  resihp__wire_buf_init(&h);
  for (int k = 0; k < j->lsize; k++) {
    const char *sl = k ? "/" : "";
    resihp__wire_buf_printf(&e, "%s%s", sl, subs[k].ep);
    resihp__wire_buf_printf(&s, "%s%s", sl, subs[k].sep);
    resihp__wire_buf_printf(&r, "%s%s", sl, subs[k].rep);
    resihp__wire_buf_printf(&h, "%s%s", sl, subs[k].shape);
  }
  rc = e.err ? e.err : s.err ? s.err : r.err ? r.err : h.err;
  if (!rc) {
    snprintf(j->eps, sizeof(j->eps), "%s", e.s);
    snprintf(j->seps, sizeof(j->seps), "%s", s.s);
    snprintf(j->reps, sizeof(j->reps), "%s", r.s);
    resihp__job_shape_digest(h.s, j->rshape);
  }
  resihp__wire_buf_free(&e);
  resihp__wire_buf_free(&s);
  resihp__wire_buf_free(&r);
  resihp__wire_buf_free(&h);
  free(subs);
  if (!rc && (pipe(j->relay_pipe) ||
              pthread_create(&j->relay_thread, NULL, relay_main, j)))
    rc = RESIHP_ESYS;
  if (!rc)
    j->relay_started = 1;
  return rc;
}

/* Everyone: create the replica communicator (the leader first tells the
 * others its endpoints). With K = 1 it has one rank and costs nothing. */
int resihp__job_replica_comm_create(resihp_job_t *j) {
  int rc = 0;
  if (j->lsize > 1) {
    char *line = malloc(RESIHP__JOB_MSG_MAX);
    if (!line)
      return RESIHP_ENOMEM;
    if (j->lrank == 0) {
      /* and what WELCOME said of the replica's partition: every rank
       * answers resihp_job_shrunk_partition */
      snprintf(line, RESIHP__JOB_MSG_MAX, "RANKS reps=%s%s%s%s", j->reps,
               j->welcome_lay[0] ? " lay=" : "", j->welcome_lay,
               j->welcome_shrunk ? " shrunk=1" : "");
      rc = resihp__job_send_down(j, line);
    } else if (!(rc = resihp__job_recv_up(j))) {
      if (!strncmp(j->msg, "NO ", 3)) {
        resihp_log(RESIHP_LOG_ERROR, "job",
                   "replica %d rank %d: rank 0 refused the replica (%s)",
                   j->replica, j->lrank, j->msg + 3);
        rc = RESIHP_EINVAL;
      } else if (strncmp(j->msg, "RANKS ", 6) ||
                 resihp__wire_get(j->msg, "reps", j->reps, sizeof(j->reps))) {
        rc = RESIHP_EPROTO;
      } else {
        resihp__job_layers_welcome(j, j->msg);
      }
    }
    free(line);
  } else {
    snprintf(j->reps, sizeof(j->reps), "%s", j->rep);
  }
  const char *eps[RESIHP__JOB_MAX_SHARDS];
  char(*items)[RESIHP__JOB_EP_MAX] =
      calloc((size_t)j->lsize, RESIHP__JOB_EP_MAX);
  if (!items)
    return RESIHP_ENOMEM;
  for (int k = 0; !rc && k < j->lsize; k++) {
    rc = resihp__wire_list_item(j->reps, k, items[k], RESIHP__JOB_EP_MAX);
    eps[k] = items[k];
  }
  if (!rc) {
    rc = resihp__job_comm_create(j, j->lrank, j->lsize, eps, j->rlfd, 30000, 0,
                                 &j->rcomm);
    if (rc)
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d rank %d: the replica communicator was not set "
                 "up (%s)",
                 j->replica, j->lrank, resihp_strerror(rc));
  }
  free(items);
  return rc;
}

/* A shard group's set-up waits for peers that the coordinator may
 * already know to be dead: it then sends the next epoch's GO (or another
 * line) at once, while the set-up would dial the dead one until its
 * deadline (10 s). So the set-up looks at this rank's link (the
 * coordinator's for the leader, the leader's for the others) without
 * blocking: heartbeats are taken as such; any other line is kept for the
 * next read and ends the set-up. The leader relays what its ranks act on
 * at once, so that their set-ups end too. Main thread only, as every read
 * of these links. */
static int setup_abort(void *arg) {
  resihp_job_t *j = arg;
  if (j->stash)
    return 1;
  resihp__wire_t *w = j->lrank > 0 ? &j->up : &j->cw;
  if (w->fd < 0 || (j->lrank == 0 && j->lost) || resihp__wire_fill(w))
    return 0; /* a lost link is the main path's business */
  if (!w->len || !memchr(w->buf, '\n', w->len))
    return 0; /* no line yet: the usual answer, without an allocation */
  char *line = malloc(RESIHP__JOB_MSG_MAX);
  if (!line)
    return 0;
  for (;;) {
    int r = resihp__wire_take(w, line, RESIHP__JOB_MSG_MAX);
    if (r != 1) {
      free(line); /* nothing complete (a bad line: the next read says so) */
      return 0;
    }
    if (!strcmp(line, "HB")) {
      if (j->lrank == 0)
        j->heard_ms = resihp__now_ms();
      continue;
    }
    if (j->lrank == 0 && !strncmp(line, "COORDS ", 7)) {
      resihp__job_on_coords(j, line);
      continue;
    }
    break;
  }
  resihp_log(RESIHP_LOG_INFO, "job",
             "replica %d rank %d: '%.40s' came during the set-up of epoch %u: "
             "set-up ended",
             j->replica, j->lrank, line, j->epoch);
  j->stash = line;
  j->stash_relayed = 0;
  if (j->lrank == 0 && j->lsize > 1 &&
      (!strcmp(line, "DONE") || !strncmp(line, "GO ", 3) ||
       !strncmp(line, "START ", 6) || !strncmp(line, "SAVE ", 5)))
    j->stash_relayed = !resihp__job_send_down(j, line);
  return 1;
}

int resihp__job_comm_create(resihp_job_t *j, int rank, int n,
                            const char *const *eps, int listen_fd,
                            int connect_timeout_ms, int abortable,
                            resihp_comm_t **out) {
  return resihp__job_comm_create_group(j, 0, rank, n, eps, listen_fd,
                                       connect_timeout_ms, abortable, out);
}

int resihp__job_comm_create_group(resihp_job_t *j, uint32_t group, int rank,
                                  int n, const char *const *eps, int listen_fd,
                                  int connect_timeout_ms, int abortable,
                                  resihp_comm_t **out) {
  resihp_comm_opts_t co;
  resihp_comm_opts_init(&co);
  co.rank = rank;
  co.nranks = n;
  co.endpoints = eps;
  co.listen_fd = listen_fd;
  co.secret = j->secret;
  co.secret_len = j->secret_len;
  co.connect_timeout_ms = connect_timeout_ms;
  if (abortable) {
    co.setup_abort = setup_abort;
    co.setup_abort_arg = j;
  }
  return resihp__comm_create_group(&co, group, out);
}

/* The stashed line (setup_abort) into j->msg, if there is one. */
int resihp__job_take_stash(resihp_job_t *j) {
  if (!j->stash)
    return 0;
  snprintf(j->msg, RESIHP__JOB_MSG_MAX, "%s", j->stash);
  free(j->stash);
  j->stash = NULL;
  return 1;
}

/* A line to one star link, atomically with respect to heartbeats. */
static int star_send(resihp_job_t *j, resihp__wire_t *w, const char *line) {
  pthread_mutex_lock(&j->send_mu);
  int rc = resihp__wire_send(w, line, resihp__now_ms() + j->timeout_ms);
  pthread_mutex_unlock(&j->send_mu);
  return rc;
}

static void link_ended(resihp_job_t *j, int k, int stop);

int resihp__job_send_down(resihp_job_t *j, const char *line) {
  for (int k = 0; j->down && k < j->lsize - 1; k++) {
    if (j->down[k].fd < 0)
      continue;
    if (star_send(j, &j->down[k], line)) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: lost rank %d of this replica", j->replica, k + 1);
      /* (its link may be closed for the relay thread's poll now: the
       * coordinator hears it from here) */
      link_ended(j, k, 0);
      return RESIHP_EPEER;
    }
  }
  return 0;
}

int resihp__job_send_down_buf(resihp_job_t *j, const resihp__wire_buf_t *b) {
  if (b->err) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: cannot build a message for its ranks (%s)",
               j->replica, resihp_strerror(b->err));
    return b->err;
  }
  return resihp__job_send_down(j, b->s);
}

int resihp__job_send_up(resihp_job_t *j, const char *line) {
  return star_send(j, &j->up, line) ? RESIHP_EPEER : 0;
}

/* The leader relays the coordinator's word; it may wait at the step
 * boundary for the slowest replica, but its heartbeats say it is alive. */
int resihp__job_recv_up(resihp_job_t *j) {
  if (resihp__job_take_stash(j))
    return 0;
  for (;;) {
    int rc = resihp__wire_recv(&j->up, j->msg, RESIHP__JOB_MSG_MAX,
                               resihp__now_ms() + j->timeout_ms);
    if (rc) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d rank %d: lost the replica's rank 0 (%s)",
                 j->replica, j->lrank, resihp_strerror(rc));
      return rc == RESIHP_ETIMEDOUT ? rc : RESIHP_EPEER;
    }
    if (strcmp(j->msg, "HB"))
      return 0;
  }
}

int resihp__job_replica_sum(resihp_job_t *j, int64_t *v, size_t n) {
  if (j->lsize == 1)
    return 0;
  int rc = resihp_allreduce(j->rcomm, v, n, RESIHP_FIXED64, RESIHP_OP_SUM);
  if (rc) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: a rank of this replica failed (%s): the "
               "replica leaves the job",
               j->replica, j->lrank, resihp_strerror(rc));
    resihp__job_replica_lost(j);
    return RESIHP_EPEER;
  }
  return 0;
}

/* Leave the shard group now rather than when the caller exits: its other
 * members see the links close and recover without this replica at once.
 * A caller that went on after a failed end_step (its code not checked)
 * used to wait in begin_step for the coordinator while the others waited
 * in the next exchange for it, alive and heartbeating: the job stood
 * still. The replica communicator stays (the caller may hold it). */
void resihp__job_replica_lost(resihp_job_t *j) {
  /* it leaves on its own, perhaps without resihp_job_destroy (a program
   * that exits on the error): its leader must not take it for lost */
  if (j->lrank > 0 && !j->replica_lost && j->up.fd >= 0)
    resihp__job_send_up(j, "BYE");
  j->replica_lost = RESIHP_EPEER;
  j->run = 0;
  resihp__job_groups_destroy(j);
}

/* ---- the leader's relay thread --------------------------------------- */

/* Reads what the other ranks say: FAULT and ABORT go to the coordinator at
 * once (the rank is about to die or leave, or its node to be killed),
 * RESULT is kept for
 * finish, HB only proves life. A link that fails is closed here; the
 * replica communicator reports the rank's death to whoever needs it. */
static void relay_line(resihp_job_t *j, int k, const char *line) {
  if (!strcmp(line, "BYE")) { /* it leaves on its own (resihp_job_destroy) */
    pthread_mutex_lock(&j->relay_mu);
    j->down_open[k] = 2;
    pthread_cond_broadcast(&j->relay_cv);
    pthread_mutex_unlock(&j->relay_mu);
    return;
  }
  if (!strncmp(line, "FAULT ", 6) || !strncmp(line, "ABORT ", 6)) {
    resihp__job_send(j, line); /* waits out a failover (job_link.c) */
    return;
  }
  if (!strncmp(line, "PERF ", 5)) {
    /* the coordinator's detector learns which rank it is from us */
    resihp__wire_buf_t b;
    resihp__wire_buf_init(&b);
    resihp__wire_buf_printf(&b, "PERF k=%d %s", k + 1, line + 5);
    if (!b.err)
      resihp__job_send(j, b.s);
    resihp__wire_buf_free(&b);
    return;
  }
  long ep, failed;
  if (!strncmp(line, "SETUP ", 6) &&
      !resihp__wire_get_range(line, "epoch", 0, UINT32_MAX - 1, &ep) &&
      !resihp__wire_get_range(line, "failed", 0, 1, &failed)) {
    pthread_mutex_lock(&j->relay_mu);
    j->setup_epoch[k + 1] = (uint32_t)ep + 1;
    j->setup_failed[k + 1] = (int)failed;
    pthread_cond_broadcast(&j->relay_cv);
    pthread_mutex_unlock(&j->relay_mu);
    return;
  }
  if (!strncmp(line, "RESULT ", 7)) {
    pthread_mutex_lock(&j->relay_mu);
    j->down_open[k] = 2; /* its work is done: it may leave without a BYE */
    if (resihp__wire_get(line, "result", j->results[k + 1],
                         sizeof(j->results[k + 1])))
      snprintf(j->results[k + 1], sizeof(j->results[k + 1]), "-");
    pthread_cond_broadcast(&j->relay_cv);
    pthread_mutex_unlock(&j->relay_mu);
  }
}

/* Rank k's link closed without its BYE: the rank is gone (killed, or
 * its program died) while its node may live on. The coordinator is told
 * which (FAULT kind=lost rank=k, authenticated as every line of this
 * link) at once, before anyone fails the replica: with no spare left, the
 * launcher shrinks the replica onto its other ranks' nodes
 * (coord_shrink.c 11) instead of waiting for a verdict on a node that
 * never comes. After the stop (resihp_job_destroy has marked the link
 * closed) it is the link's last word. */
static void report_lost(resihp_job_t *j, int k, int stop) {
  char line[64];
  snprintf(line, sizeof(line), "FAULT kind=lost rank=%d", k);
  resihp_log(RESIHP_LOG_ERROR, "job",
             "replica %d: rank %d of this replica is lost (its link closed "
             "without a word): telling the coordinator",
             j->replica, k);
  if (stop)
    resihp__job_send_last(j, line);
  else
    resihp__job_send(j, line); /* waits out a failover (job_link.c) */
}

/* Rank k+1's link ended (closed, or a send down it failed): unless it
 * said BYE or its RESULT first (down_open 2), it is lost and the
 * coordinator is told, once, whichever thread sees it first; a leader
 * leaving waits for that telling (resihp__job_relay_settle). */
static void link_ended(resihp_job_t *j, int k, int stop) {
  pthread_mutex_lock(&j->relay_mu);
  int lost = j->down_open && j->down_open[k] == 1;
  if (j->down_open)
    j->down_open[k] = 0;
  j->relay_reporting += lost;
  pthread_cond_broadcast(&j->relay_cv);
  pthread_mutex_unlock(&j->relay_mu);
  if (!lost)
    return;
  report_lost(j, k + 1, stop);
  pthread_mutex_lock(&j->relay_mu);
  j->relay_reporting--;
  pthread_cond_broadcast(&j->relay_cv);
  pthread_mutex_unlock(&j->relay_mu);
}

static void *relay_main(void *arg) {
  resihp_job_t *j = arg;
  int n = j->lsize - 1;
  struct pollfd *p = calloc((size_t)n + 1, sizeof(*p));
  char *line = malloc(RESIHP__JOB_MSG_MAX);
  if (!p || !line)
    goto out;
  /* After the stop, what the ranks have already sent is still read (a
   * few rounds, without waiting): an ABORT sent by a rank just before it
   * left must reach the coordinator even when the leader, seeing that
   * rank gone, is already on its way out. */
  for (int stop = 0, after = 0; after < 16; after += stop) {
    p[0].fd = j->relay_pipe[0];
    p[0].events = POLLIN;
    p[0].revents = 0;
    for (int k = 0; k < n; k++) {
      p[k + 1].fd = j->down_open[k] ? j->down[k].fd : -1;
      p[k + 1].events = POLLIN;
      p[k + 1].revents = 0;
    }
    int ready = poll(p + stop, (nfds_t)(n + 1 - stop), stop ? 0 : -1);
    if (ready < 0)
      continue;
    if (stop && ready == 0)
      break;
    stop |= p[0].revents != 0;
    for (int k = 0; k < n; k++) {
      if (!p[k + 1].revents)
        continue;
      int rc = resihp__wire_fill(&j->down[k]);
      int t;
      while ((t = resihp__wire_take(&j->down[k], line, RESIHP__JOB_MSG_MAX)) ==
             1)
        relay_line(j, k, line);
      if (rc || t < 0)
        link_ended(j, k, stop);
    }
  }
out:
  free(p);
  free(line);
  return NULL;
}

/* A rank SIGKILLed closes its data links and its star link as it exits,
 * one after the other: the leader can see the data link fail, give up
 * and leave before the star link's end reaches its relay, and the rank
 * was then never reported lost (the launcher waited for a verdict on a
 * node that lives). A leader leaving first lets the relay read how every
 * link ended: the others say BYE as they leave, a finished one said its
 * RESULT; the bound only covers a rank that hangs. */
void resihp__job_relay_settle(resihp_job_t *j, int ms) {
  if (!j->relay_started)
    return;
  int64_t dl = resihp__now_ms() + ms;
  pthread_mutex_lock(&j->relay_mu);
  for (;;) {
    int open = j->relay_reporting;
    for (int k = 0; k < j->lsize - 1; k++)
      open += j->down_open[k] == 1;
    int64_t left = dl - resihp__now_ms();
    if (!open || left <= 0)
      break;
    struct timespec ts = resihp__realtime_in(left);
    pthread_cond_timedwait(&j->relay_cv, &j->relay_mu, &ts);
  }
  pthread_mutex_unlock(&j->relay_mu);
}

void resihp__job_relay_stop(resihp_job_t *j) {
  if (!j->relay_started)
    return;
  if (write(j->relay_pipe[1], "x", 1) < 0) {
    /* the thread then waits for its links to close */
  }
  pthread_join(j->relay_thread, NULL);
  j->relay_started = 0;
}

/* The ranks' set-ups end by their deadline (job_step.c); then this much
 * for their word to come. */
#define SETUP_RESULTS_MS (10000 + 5000)

int resihp__job_setup_results(resihp_job_t *j, uint32_t epoch,
                              int64_t *failed) {
  int64_t dl = resihp__now_ms() + SETUP_RESULTS_MS;
  int gone = 0;
  pthread_mutex_lock(&j->relay_mu);
  for (;;) {
    int waiting = 0;
    for (int k = 1; k < j->lsize; k++) {
      if (j->setup_epoch[k] == epoch + 1) {
        *failed |= j->setup_failed[k];
        continue;
      }
      if (!j->down_open[k - 1])
        gone = 1;
      waiting++;
    }
    if (!waiting || gone)
      break;
    if (resihp__now_ms() >= dl) {
      *failed = 1; /* a rank that says nothing: try a new epoch */
      break;
    }
    /* Watched while the ranks set up: when the coordinator moves on, they
     * hear it from here (relayed down) and end their set-ups. */
    pthread_mutex_unlock(&j->relay_mu);
    setup_abort(j);
    pthread_mutex_lock(&j->relay_mu);
    struct timespec ts = resihp__realtime_in(50);
    pthread_cond_timedwait(&j->relay_cv, &j->relay_mu, &ts);
  }
  pthread_mutex_unlock(&j->relay_mu);
  if (gone) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: a rank of this replica is gone during a group's "
               "set-up: the replica leaves the job",
               j->replica);
    resihp__job_hang_up(j); /* what was relayed before went first */
    resihp__job_replica_lost(j);
    return RESIHP_EPEER;
  }
  return 0;
}

/* Leader: every rank's result, "r0/r1/..." (a rank that is gone: "-"). */
int resihp__job_results(resihp_job_t *j, const char *mine,
                        resihp__wire_buf_t *b) {
  resihp__wire_buf_printf(b, "%s", mine);
  int64_t dl = resihp__now_ms() + j->timeout_ms;
  pthread_mutex_lock(&j->relay_mu);
  for (;;) {
    int waiting = 0;
    for (int k = 0; k < j->lsize - 1; k++)
      waiting += j->down_open[k] && !j->results[k + 1][0];
    int64_t left = dl - resihp__now_ms();
    if (!waiting || left <= 0)
      break;
    /* the relay thread signals every result and every closed link */
    struct timespec ts = resihp__realtime_in(left);
    pthread_cond_timedwait(&j->relay_cv, &j->relay_mu, &ts);
  }
  for (int k = 1; k < j->lsize; k++)
    resihp__wire_buf_printf(b, "/%s", j->results[k][0] ? j->results[k] : "-");
  pthread_mutex_unlock(&j->relay_mu);
  return b->err;
}
