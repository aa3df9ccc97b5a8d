/* SPDX-License-Identifier: BSD-3-Clause */
/* The in-rank side of step-level recovery (see resihp/job.h, and the
 * protocol in control/coordinator.h).
 *
 * The main thread talks to the coordinator: it sends requests and reads
 * the answers itself, skipping the coordinator's heartbeats. A heartbeat
 * thread only writes (HB every 200 ms, under send_mu), so a rank that is
 * computing is never taken for a dead one, while a rank that is hung
 * (SIGSTOP) falls silent as a whole.
 *
 * Catch-up. The serving member copies its state at START (the state of
 * the last committed step), and a sender thread dials the replacement's
 * catch-up socket, authenticates ("state" channel) and sends
 * "STATE step=s bytes=n sha256=..." followed by the bytes; the member
 * goes on with its microbatches meanwhile. The replacement checks length
 * and digest before it overwrites its own state; if the transfer fails it
 * leaves the step's communicator (the survivors shrink without it) and
 * waits to be admitted again with another source.
 *
 * Several ranks per replica (srun -n K in one step). Rank 0 of the step
 * (SLURM_PROCID) is the leader: it alone talks to the coordinator and
 * takes part in the all-reduce across replicas. The other ranks learn the
 * leader's address from the coordinator (SUBHELLO -> LEADER) and connect
 * to it (authenticated, "local" channel). Per step the leader sends them
 * the replica's microbatch list (and, for a replacement, the state); each
 * rank computes every lsize-th microbatch, sends its fixed-point
 * accumulator to the leader, which sums them exactly, runs the all-reduce
 * across replicas and sends back the result or the reassigned
 * microbatches. Any rank of a replica failing fails the replica: the
 * leader gives up, the coordinator sees it go, and resihp-run cancels the
 * whole step. The state is assumed replicated inside a replica (catch-up
 * copies the serving leader's state to every rank of the replacement).
 */
#include "config.h"

#include "../control/wire.h"
#include "../probe/results.h"
#include "../transport/mesh.h"
#include "../transport/sha256.h"
#include "inject.h"
#include "pmix_wireup.h"

#include <resihp/allreduce.h>
#include <resihp/error.h>
#include <resihp/job.h>
#include <resihp/log.h>
#include <resihp/settings.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG_MAX (RESIHP__WIRE_LINE_MAX + 1)
#define SAMPLES 4096
#define MAXM RESIHP_COMM_MAX_RANKS
/* Handshakes in progress on a listening socket, and each one's deadline
 * (see wire.h: strangers are never waited for). */
#define HS_PENDING 32
#define HS_TIMEOUT_MS 3000

struct resihp_job {
  resihp_job_opts_t o;
  char coordinator[RESIHP_SETTING_STR_MAX];
  int replica;
  uint8_t *secret;
  size_t secret_len;
  int timeout_ms;
  char node[64];

  resihp__wire_t cw;
  pthread_mutex_t send_mu;
  pthread_mutex_t hb_mu;
  pthread_cond_t hb_cv;
  pthread_t hb_thread;
  int hb_started, hb_stop;

  int lfd, slfd;                /* all-reduce and catch-up listening sockets */
  resihp__wire_hs_t *shs, *lhs; /* handshakes on slfd and llfd */
  char ep[96], sep[96];

  resihp_comm_t *comm;
  uint32_t epoch;
  int members[MAXM], nmembers;
  int member;      /* in the group of the current step */
  int valid_state; /* holds the state of the last committed step */
  int in_step;
  long step;
  int *mbs, nmbs, *extra, nextra;
  resihp_job_step_t *st;

  void *state;
  size_t state_len;
  pthread_t serve_thread;
  int serving;
  uint8_t *snap;
  char serve_to[4096];
  long serve_step;

  resihp__inject_t inj[RESIHP__INJECT_MAX];
  int ninj;
  int inj_fired[RESIHP__INJECT_MAX];

  /* ranks of this replica's step: rank 0 (the leader) speaks for the
   * replica; the others hang off it in a star (see the header comment) */
  int lrank, lsize;
  int llfd;
  char lep[96];
  resihp__wire_t up;    /* non-leader: link to the leader */
  resihp__wire_t *down; /* leader: links to ranks 1..lsize-1 */
  int *full, nfull;     /* leader: the replica's whole list */
  int64_t *work;
  size_t workcap;
  int detect_ms;
  int pmix; /* the step's ranks found each other through PMIx */

  /* the plugin's probe results for this node, watched for periodic
   * failures at each step boundary */
  resihp__probe_watch_t probes;
  int watch_probes;

  resihp_job_mb_sample_t samples[SAMPLES];
  long nsamples;
  char *msg;
};

void resihp_job_opts_init(resihp_job_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->replica = -1;
}

static int send_line(resihp_job_t *j, const char *line) {
  pthread_mutex_lock(&j->send_mu);
  int rc = resihp__wire_send(&j->cw, line, resihp__now_ms() + j->timeout_ms);
  pthread_mutex_unlock(&j->send_mu);
  if (rc)
    resihp_log(RESIHP_LOG_ERROR, "job", "replica %d: lost the coordinator (%s)",
               j->replica, resihp_strerror(rc));
  return rc;
}

/* Next message from the coordinator other than a heartbeat. The deadline
 * is about the coordinator's silence: its heartbeats extend it. */
static int recv_msg(resihp_job_t *j) {
  for (;;) {
    int rc = resihp__wire_recv(&j->cw, j->msg, MSG_MAX,
                               resihp__now_ms() + j->timeout_ms);
    if (rc) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: lost the coordinator (%s); resihp-run has "
                 "probably ended",
                 j->replica, resihp_strerror(rc));
      return rc;
    }
    if (!strcmp(j->msg, "HB"))
      continue;
    if (!strncmp(j->msg, "NO", 2)) {
      resihp_log(RESIHP_LOG_ERROR, "job", "replica %d: coordinator says %s",
                 j->replica, j->msg);
      return RESIHP_ESTATE;
    }
    return 0;
  }
}

static void *hb_main(void *arg) {
  resihp_job_t *j = arg;
  pthread_mutex_lock(&j->hb_mu);
  while (!j->hb_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->hb_cv, &j->hb_mu, &ts);
    if (j->hb_stop)
      break;
    pthread_mutex_unlock(&j->hb_mu);
    pthread_mutex_lock(&j->send_mu);
    int64_t dl = resihp__now_ms() + 1000;
    if (j->cw.fd >= 0)
      resihp__wire_send(&j->cw, "HB", dl);
    if (j->up.fd >= 0)
      resihp__wire_send(&j->up, "HB", dl);
    for (int k = 0; j->down && k < j->lsize - 1; k++)
      if (j->down[k].fd >= 0)
        resihp__wire_send(&j->down[k], "HB", dl);
    pthread_mutex_unlock(&j->send_mu);
    pthread_mutex_lock(&j->hb_mu);
  }
  pthread_mutex_unlock(&j->hb_mu);
  return NULL;
}

static void stop_hb(resihp_job_t *j) {
  if (!j->hb_started)
    return;
  pthread_mutex_lock(&j->hb_mu);
  j->hb_stop = 1;
  pthread_cond_signal(&j->hb_cv);
  pthread_mutex_unlock(&j->hb_mu);
  pthread_join(j->hb_thread, NULL);
  j->hb_started = 0;
}

static void join_serve(resihp_job_t *j) {
  if (!j->serving)
    return;
  pthread_join(j->serve_thread, NULL);
  j->serving = 0;
  free(j->snap);
  j->snap = NULL;
}

void resihp_job_destroy(resihp_job_t *j) {
  if (!j)
    return;
  join_serve(j);
  stop_hb(j);
  resihp_comm_destroy(j->comm);
  resihp__wire_free(&j->cw);
  resihp__wire_free(&j->up);
  for (int k = 0; j->down && k < j->lsize - 1; k++)
    resihp__wire_free(&j->down[k]);
  free(j->down);
  free(j->full);
  free(j->work);
  if (j->llfd >= 0)
    close(j->llfd);
  if (j->lfd >= 0)
    close(j->lfd);
  if (j->slfd >= 0)
    close(j->slfd);
  resihp__wire_hs_destroy(j->shs);
  resihp__wire_hs_destroy(j->lhs);
  if (j->secret) {
    memset(j->secret, 0, j->secret_len);
    free(j->secret);
  }
  pthread_mutex_destroy(&j->send_mu);
  pthread_mutex_destroy(&j->hb_mu);
  pthread_cond_destroy(&j->hb_cv);
  resihp__probe_watch_free(&j->probes);
  free(j->mbs);
  free(j->extra);
  free(j->msg);
  free(j);
}

static int parse_list(resihp_job_t *j, const char *msg, const char *key,
                      int **out, int *n);
static void maybe_fire(resihp_job_t *j, long step);

/* The step is on: fire any fault injected for it, then tell the caller its
 * microbatches (leader and sub-ranks alike). */
static int enter_step(resihp_job_t *j, resihp_job_step_t *st, long s, int cu,
                      uint32_t epoch, int nreplicas) {
  maybe_fire(j, s);
  j->in_step = 1;
  j->st = st;
  st->step = s;
  st->catching_up = cu;
  st->nmbs = j->nmbs;
  st->mbs = j->mbs;
  st->epoch = epoch;
  st->nreplicas = nreplicas;
  return 0;
}

/* Read the next line from a local link, skipping heartbeats; silence for
 * the detection bound is a failure. The leader forwards faults announced
 * by its ranks to the coordinator. */
static int local_recv(resihp_job_t *j, resihp__wire_t *w, char *out, size_t cap,
                      int64_t patience_ms) {
  for (;;) {
    int rc = resihp__wire_recv(w, out, cap, resihp__now_ms() + patience_ms);
    if (rc)
      return rc == RESIHP_ETIMEDOUT ? RESIHP_ETIMEDOUT : RESIHP_EPEER;
    if (!strcmp(out, "HB"))
      continue;
    if (!strncmp(out, "FAULT ", 6) && j->cw.fd >= 0) {
      pthread_mutex_lock(&j->send_mu);
      resihp__wire_send(&j->cw, out, resihp__now_ms() + 2000);
      pthread_mutex_unlock(&j->send_mu);
      continue;
    }
    return 0;
  }
}

/* A line and optional raw bytes (with their tag), atomically with respect
 * to heartbeats. */
static int local_send(resihp_job_t *j, resihp__wire_t *w, const char *line,
                      const void *raw, size_t len) {
  pthread_mutex_lock(&j->send_mu);
  int64_t dl = resihp__now_ms() + j->timeout_ms;
  int rc = resihp__wire_send(w, line, dl);
  if (!rc && len)
    rc = resihp__wire_send_data(w, raw, len, dl);
  pthread_mutex_unlock(&j->send_mu);
  return rc;
}

static int send_down(resihp_job_t *j, const char *line, const void *raw,
                     size_t len) {
  for (int k = 0; k < j->lsize - 1; k++) {
    int rc = local_send(j, &j->down[k], line, raw, len);
    if (rc) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: lost rank %d of this replica (%s)", j->replica,
                 k + 1, resihp_strerror(rc));
      return RESIHP_EPEER;
    }
  }
  return 0;
}

/* Non-leader: find the leader (through PMIx when the step has it, else
 * through the coordinator), then connect. */
static int join_leader(resihp_job_t *j, const char *jid, const char *sid) {
  char line[256], lep[96] = "";
  int rc;
  const char *how = "PMIx";
  if (!j->pmix || resihp__pmix_leader_ep(j->lrank, lep, sizeof(lep))) {
    how = "the coordinator";
    snprintf(line, sizeof(line),
             "SUBHELLO replica=%d lrank=%d jobid=%s stepid=%s", j->replica,
             j->lrank, jid, sid);
    rc = send_line(j, line);
    if (!rc)
      rc = recv_msg(j);
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
    snprintf(line, sizeof(line), "SUB lrank=%d", j->lrank);
    rc = resihp__wire_send(&j->up, line, dl);
  }
  return rc;
}

/* The next connection on lfd that completes the handshake, before the
 * deadline. Strangers never hold this up: their handshakes are records in
 * hs that move on only when they say something (wire.h). give_up (may be
 * NULL) is asked between polls whether waiting is still worth it. */
static int accept_authed(resihp_job_t *j, resihp__wire_hs_t *hs, int lfd,
                         int64_t deadline, int (*give_up)(resihp_job_t *),
                         resihp__wire_t *out) {
  struct pollfd p[1 + HS_PENDING];
  for (;;) {
    if (resihp__wire_hs_next(hs, out) == 1)
      return 0;
    if (give_up && give_up(j))
      return RESIHP_EPEER;
    int64_t left = deadline - resihp__now_ms();
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    p[0].fd = lfd;
    p[0].events = POLLIN;
    p[0].revents = 0;
    int n = 1 + resihp__wire_hs_fds(hs, p + 1, HS_PENDING);
    poll(p, (nfds_t)n, resihp__wire_hs_wait_ms(hs, left < 50 ? (int)left : 50));
    if (p[0].revents)
      resihp__wire_hs_accept(hs, lfd);
  }
}

/* Leader: accept the other ranks of the replica. */
static int accept_ranks(resihp_job_t *j) {
  j->down = calloc((size_t)j->lsize - 1, sizeof(*j->down));
  if (!j->down)
    return RESIHP_ENOMEM;
  for (int k = 0; k < j->lsize - 1; k++)
    resihp__wire_init(&j->down[k], -1);
  int rc = resihp__wire_hs_create(j->secret, j->secret_len, "local", HS_PENDING,
                                  HS_TIMEOUT_MS, &j->lhs);
  if (rc)
    return rc;
  int64_t dl = resihp__now_ms() + 60000;
  int got = 0;
  while (got < j->lsize - 1) {
    resihp__wire_t w;
    if ((rc = accept_authed(j, j->lhs, j->llfd, dl, NULL, &w))) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: only %d of the step's %d other ranks came",
                 j->replica, got, j->lsize - 1);
      return rc;
    }
    char line[128];
    long lr = -1;
    /* it holds the secret: it may take its time, up to the deadline */
    if (resihp__wire_recv(&w, line, sizeof(line), dl) ||
        resihp__wire_get_range(line, "lrank", 1, j->lsize - 1, &lr) ||
        j->down[lr - 1].fd >= 0) {
      resihp__wire_free(&w);
      continue;
    }
    j->down[lr - 1] = w;
    got++;
  }
  return 0;
}

/* This rank's share of a replica's list: every lsize-th entry. */
static int share(const int *list, int n, int lrank, int lsize, int **out) {
  int *a = malloc(sizeof(int) * (size_t)(n ? n : 1)), k = 0;
  if (!a)
    return RESIHP_ENOMEM;
  for (int i = lrank; i < n; i += lsize)
    a[k++] = list[i];
  free(*out);
  *out = a;
  return k;
}

/* The leader's line to its ranks, then the raw bytes, if any. */
static int send_down_buf(resihp_job_t *j, const resihp__wire_buf_t *b,
                         const void *raw, size_t len) {
  if (b->err) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: cannot build a message for its ranks (%s)",
               j->replica, resihp_strerror(b->err));
    return b->err;
  }
  return send_down(j, b->s, raw, len);
}

/* Non-leader side of begin_step. */
static int sub_begin_step(resihp_job_t *j, resihp_job_step_t *st) {
  int rc = local_recv(j, &j->up, j->msg, MSG_MAX, (int64_t)j->timeout_ms);
  if (rc)
    return rc;
  if (!strcmp(j->msg, "DONE")) {
    st->done = 1;
    st->step = j->step + 1;
    return 0;
  }
  long s = -1, cu = 0, ep = 0, nr = 0, bytes = 0;
  if (strncmp(j->msg, "STEP ", 5) ||
      resihp__wire_get_long(j->msg, "step", &s) ||
      resihp__wire_get_long(j->msg, "cu", &cu) ||
      resihp__wire_get_long(j->msg, "epoch", &ep) ||
      resihp__wire_get_long(j->msg, "nrep", &nr) ||
      resihp__wire_get_long(j->msg, "state", &bytes))
    return RESIHP_EPROTO;
  int *all = NULL, nall = 0;
  if ((rc = parse_list(j, j->msg, "mbs", &all, &nall)))
    return rc;
  if (bytes) {
    if ((size_t)bytes != j->state_len) {
      free(all);
      return RESIHP_EPROTO;
    }
    /* A bad tag fails this rank, and so the replica: what was read in
     * is never trained on. */
    rc = resihp__wire_recv_data(&j->up, j->state, j->state_len,
                                resihp__now_ms() + j->timeout_ms);
    if (rc) {
      free(all);
      return rc == RESIHP_EAUTH ? rc : RESIHP_EPEER;
    }
  }
  j->nmbs = share(all, nall, j->lrank, j->lsize, &j->mbs);
  free(all);
  if (j->nmbs < 0)
    return j->nmbs;
  j->step = s;
  j->member = 1;
  j->valid_state = 1;
  return enter_step(j, st, s, (int)cu, (uint32_t)ep, (int)nr);
}

/* Non-leader side of the all-reduce. */
static int sub_allreduce(resihp_job_t *j, int64_t *acc, size_t n) {
  char line[64];
  snprintf(line, sizeof(line), "ACC n=%zu", n);
  int rc = local_send(j, &j->up, line, acc, n * sizeof(int64_t));
  if (rc)
    return RESIHP_EPEER;
  /* the leader may spend a while in the all-reduce across replicas */
  rc = local_recv(j, &j->up, j->msg, MSG_MAX, (int64_t)j->timeout_ms);
  if (rc)
    return rc;
  if (!strncmp(j->msg, "RESULT", 6))
    return resihp__wire_recv_data(&j->up, acc, n * sizeof(int64_t),
                                  resihp__now_ms() + j->timeout_ms)
               ? RESIHP_EPEER
               : 0;
  if (!strncmp(j->msg, "EXTRA ", 6)) {
    int *all = NULL, nall = 0;
    if ((rc = parse_list(j, j->msg, "list", &all, &nall)))
      return rc;
    j->nextra = share(all, nall, j->lrank, j->lsize, &j->extra);
    free(all);
    if (j->st) {
      long nr = 0;
      resihp__wire_get_long(j->msg, "nrep", &nr);
      j->st->nextra = j->nextra;
      j->st->extra = j->extra;
      j->st->nreplicas = (int)nr;
    }
    return RESIHP_EREASSIGNED;
  }
  return RESIHP_EPEER;
}

/* Leader: the sum of every rank's accumulator into j->work. */
static int gather(resihp_job_t *j, const int64_t *acc, size_t n) {
  if (j->workcap < n) {
    int64_t *w = realloc(j->work, sizeof(int64_t) * (n ? n : 1));
    if (!w)
      return RESIHP_ENOMEM;
    j->work = w;
    j->workcap = n;
  }
  memcpy(j->work, acc, n * sizeof(int64_t));
  int64_t *tmp = malloc(sizeof(int64_t) * (n ? n : 1));
  if (!tmp)
    return RESIHP_ENOMEM;
  int rc = 0;
  for (int k = 0; k < j->lsize - 1 && !rc; k++) {
    char line[64];
    long got = -1;
    /* the rank is computing: wait while it keeps sending heartbeats */
    rc = local_recv(j, &j->down[k], line, sizeof(line), (int64_t)j->detect_ms);
    if (!rc && (strncmp(line, "ACC ", 4) ||
                resihp__wire_get_long(line, "n", &got) || (size_t)got != n))
      rc = RESIHP_EPROTO;
    if (!rc)
      rc = resihp__wire_recv_data(&j->down[k], tmp, n * sizeof(int64_t),
                                  resihp__now_ms() + j->timeout_ms);
    for (size_t i = 0; !rc && i < n; i++)
      j->work[i] += tmp[i];
    if (rc)
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: rank %d of this replica failed (%s): the "
                 "replica leaves the job",
                 j->replica, k + 1, resihp_strerror(rc));
  }
  free(tmp);
  return rc ? RESIHP_EPEER : 0;
}

int resihp_job_join(const resihp_job_opts_t *o, resihp_job_t **out) {
  if (!o || !out || o->microbatches < 1 || o->steps < 1) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "resihp_job_join: microbatches and steps must be >= 1");
    return RESIHP_EINVAL;
  }
  if (o->microbatches > resihp__wire_max_microbatches()) {
    /* Every list of microbatch ids must fit in one control message; a
     * list cut short would lose samples without a word. */
    resihp_log(RESIHP_LOG_ERROR, "job",
               "resihp_job_join: %d microbatches per step is more than the "
               "control messages can carry (at most %d): use fewer, larger "
               "microbatches",
               o->microbatches, resihp__wire_max_microbatches());
    return RESIHP_ERANGE;
  }
  const resihp_settings_t *s = resihp_settings_global();
  resihp_job_t *j = calloc(1, sizeof(*j));
  if (!j)
    return RESIHP_ENOMEM;
  j->o = *o;
  j->lfd = j->slfd = j->llfd = -1;
  resihp__wire_init(&j->cw, -1);
  resihp__wire_init(&j->up, -1);
  j->detect_ms = (int)resihp_settings_get(s, RESIHP_SETTING_DETECT_TIMEOUT);
  {
    const char *pr = getenv("SLURM_PROCID"), *nt = getenv("SLURM_NTASKS");
    j->lrank = pr && *pr ? atoi(pr) : 0;
    j->lsize = nt && *nt ? atoi(nt) : 1;
    int pr_rank, pr_size;
    if (j->lsize > 1 && resihp__pmix_init(&pr_rank, &pr_size) == 0) {
      j->lrank = pr_rank;
      j->lsize = pr_size;
      j->pmix = 1;
    }
    if (j->lsize < 1 || j->lsize > MAXM || j->lrank < 0 ||
        j->lrank >= j->lsize) {
      j->lrank = 0;
      j->lsize = 1;
    }
  }
  pthread_mutex_init(&j->send_mu, NULL);
  pthread_mutex_init(&j->hb_mu, NULL);
  pthread_cond_init(&j->hb_cv, NULL);
  j->msg = malloc(MSG_MAX);
  j->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
  j->step = -1;
  int rc = RESIHP_EINVAL;
  if (!j->msg) {
    rc = RESIHP_ENOMEM;
    goto fail;
  }
  snprintf(j->coordinator, sizeof(j->coordinator), "%s",
           o->coordinator
               ? o->coordinator
               : resihp_settings_get_str(s, RESIHP_SETTING_COORDINATOR));
  j->replica = o->replica >= 0
                   ? o->replica
                   : (int)resihp_settings_get(s, RESIHP_SETTING_REPLICA);
  const char *sf = o->secret_file
                       ? o->secret_file
                       : resihp_settings_get_str(s, RESIHP_SETTING_SECRET_FILE);
  const char *node = getenv("SLURMD_NODENAME");
  snprintf(j->node, sizeof(j->node), "%s", node && *node ? node : "local");
  j->watch_probes =
      !resihp__probe_watch_init(&j->probes, getenv("RESIHP_PROBE_RESULTS"));
  if (!j->coordinator[0] || j->replica < 0) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "no coordinator or replica: run the trainer under resihp-run "
               "(or set RESIHP_COORDINATOR and RESIHP_REPLICA)");
    goto fail;
  }
  /* RESIHP_INJECT holds commas, so it is read here, not via the registry */
  const char *inj = o->inject ? o->inject : getenv("RESIHP_INJECT");
  char err[512];
  if (resihp__inject_parse(inj, j->inj, RESIHP__INJECT_MAX, &j->ninj, err,
                           sizeof(err))) {
    resihp_log(RESIHP_LOG_ERROR, "job", "%s", err);
    goto fail;
  }
  if ((rc = resihp__wire_read_secret(sf, &j->secret, &j->secret_len)))
    goto fail;
  int fd = resihp__wire_dial(j->coordinator, resihp__now_ms() + 10000);
  if (fd < 0) {
    rc = fd;
    resihp_log(RESIHP_LOG_ERROR, "job", "cannot reach the coordinator %s: %s",
               j->coordinator, resihp_strerror(rc));
    goto fail;
  }
  resihp__wire_init(&j->cw, fd);
  if ((rc = resihp__wire_auth_client(&j->cw, j->secret, j->secret_len, "coord",
                                     resihp__now_ms() + 10000))) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "coordinator %s: authentication failed (%s): is "
               "RESIHP_SECRET_FILE the job's secret?",
               j->coordinator, resihp_strerror(rc));
    goto fail;
  }
  /* Our address is the one that routes to the coordinator. */
  struct sockaddr_in me;
  socklen_t ml = sizeof(me);
  char ip[INET_ADDRSTRLEN] = "127.0.0.1";
  if (!getsockname(fd, (struct sockaddr *)&me, &ml))
    inet_ntop(AF_INET, &me.sin_addr, ip, sizeof(ip));
  const char *jid = getenv("SLURM_JOB_ID"), *sid = getenv("SLURM_STEP_ID");
  if (!jid || !*jid)
    jid = "-1";
  if (!sid || !*sid)
    sid = "-1";
  if (j->lrank > 0) {
    if ((rc = join_leader(j, jid, sid)))
      goto fail;
    goto started;
  }
  if (j->lsize > 1) {
    int lport = 0;
    j->llfd = resihp__wire_listen(NULL, 0, &lport);
    if (j->llfd < 0) {
      rc = RESIHP_ESYS;
      goto fail;
    }
    snprintf(j->lep, sizeof(j->lep), "%s:%d", ip, lport);
    if (j->pmix && resihp__pmix_leader_ep(0, j->lep, sizeof(j->lep)))
      resihp_log(RESIHP_LOG_WARN, "job",
                 "replica %d: PMIx wire-up failed; the other ranks find "
                 "this one through the coordinator",
                 j->replica);
  }
  int port = 0, sport = 0;
  j->lfd = resihp__wire_listen(NULL, 0, &port);
  j->slfd = resihp__wire_listen(NULL, 0, &sport);
  if (j->lfd < 0 || j->slfd < 0) {
    rc = RESIHP_ESYS;
    resihp_log(RESIHP_LOG_ERROR, "job", "cannot open listening sockets: %s",
               strerror(errno));
    goto fail;
  }
  snprintf(j->ep, sizeof(j->ep), "%s:%d", ip, port);
  snprintf(j->sep, sizeof(j->sep), "%s:%d", ip, sport);
  snprintf(j->msg, MSG_MAX,
           "HELLO replica=%d ep=%s sep=%s node=%s jobid=%s stepid=%s "
           "mbs=%d steps=%ld pid=%ld lsize=%d lep=%s",
           j->replica, j->ep, j->sep, j->node, jid, sid, o->microbatches,
           o->steps, (long)getpid(), j->lsize, j->lsize > 1 ? j->lep : "-");
  if ((rc = send_line(j, j->msg)) || (rc = recv_msg(j)))
    goto fail;
  if (strncmp(j->msg, "WELCOME ", 8)) {
    rc = RESIHP_EPROTO;
    goto fail;
  }
  if (j->lsize > 1 && (rc = accept_ranks(j)))
    goto fail;
started:
  if (pthread_create(&j->hb_thread, NULL, hb_main, j)) {
    rc = RESIHP_ESYS;
    goto fail;
  }
  j->hb_started = 1;
  resihp_log(RESIHP_LOG_INFO, "job", "replica %d rank %d/%d joined %s",
             j->replica, j->lrank, j->lsize, j->coordinator);
  *out = j;
  return 0;
fail:
  resihp_job_destroy(j);
  return rc;
}

int resihp_job_set_state(resihp_job_t *j, void *state, size_t bytes) {
  if (!j || (!state && bytes))
    return RESIHP_EINVAL;
  j->state = state;
  j->state_len = bytes;
  return 0;
}

int resihp_job_replica(const resihp_job_t *j) {
  return j ? j->replica : -1;
}

static int parse_list(resihp_job_t *j, const char *msg, const char *key,
                      int **out, int *n) {
  char *v = malloc(MSG_MAX);
  if (!v)
    return RESIHP_ENOMEM;
  int rc = resihp__wire_get(msg, key, v, MSG_MAX);
  if (rc == RESIHP_ENOENT) {
    v[0] = '\0';
    rc = 0;
  }
  if (!rc) {
    free(*out);
    *out = NULL;
    rc = resihp__wire_parse_ints(v, j->o.microbatches, out, n);
  }
  free(v);
  return rc;
}

/* Announce an injected fault to the coordinator, then commit it. */
static void fire(resihp_job_t *j, resihp__inj_kind_t kind, long step) {
  char line[256];
  snprintf(line, sizeof(line), "FAULT kind=%s step=%ld node=%s",
           resihp__inject_kind_name(kind), step, j->node);
  resihp_log(RESIHP_LOG_WARN, "job",
             "replica %d: injected fault %s at step %ld (node %s)", j->replica,
             resihp__inject_kind_name(kind), step, j->node);
  if (j->lrank > 0)
    local_send(j, &j->up, line, NULL, 0);
  else
    send_line(j, line);
  switch (kind) {
  case RESIHP__INJ_KILL_RANK:
    raise(SIGKILL);
    break;
  case RESIHP__INJ_HANG_RANK:
    raise(SIGSTOP);
    break;
  case RESIHP__INJ_KILL_NODE:
    /* resihp-run kills the node (and us with it); if nobody does within
     * 10 s, the rank dies alone, which is still a failure to recover. */
    for (int i = 0; i < 100; i++)
      usleep(100000);
    raise(SIGKILL);
    break;
  }
}

/* A node kill hits the leader's node, a rank kill or hang the replica's
 * last rank (the leader when it is alone). */
static int my_fault(const resihp_job_t *j, int i) {
  int who = j->inj[i].kind == RESIHP__INJ_KILL_NODE ? 0 : j->lsize - 1;
  return j->inj[i].replica == j->replica && j->lrank == who;
}

static void maybe_fire(resihp_job_t *j, long step) {
  for (int i = 0; i < j->ninj; i++)
    if (!j->inj_fired[i] && my_fault(j, i) && j->inj[i].step == step) {
      j->inj_fired[i] = 1;
      fire(j, j->inj[i].kind, step);
    }
}

static int catchup_fault(resihp_job_t *j) {
  for (int i = 0; i < j->ninj; i++)
    if (!j->inj_fired[i] && j->inj[i].replica == j->replica && j->lrank == 0 &&
        j->inj[i].step == RESIHP__INJECT_CATCHUP)
      return i;
  return -1;
}

static void digest_hex(const void *buf, size_t len, char out[65]) {
  resihp__sha256_t h;
  uint8_t d[RESIHP__SHA256_LEN];
  resihp__sha256_init(&h);
  resihp__sha256_update(&h, buf, len);
  resihp__sha256_final(&h, d);
  for (int i = 0; i < RESIHP__SHA256_LEN; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

/* Sender thread of a catch-up: every replacement in serve_to gets snap. */
static void *serve_main(void *arg) {
  resihp_job_t *j = arg;
  char list[sizeof(j->serve_to)], dg[65], line[256];
  snprintf(list, sizeof(list), "%s", j->serve_to);
  digest_hex(j->snap, j->state_len, dg);
  char *save = NULL;
  for (char *t = strtok_r(list, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    char *at = strchr(t, '@');
    if (!at)
      continue;
    int64_t deadline = resihp__now_ms() + 30000;
    int fd = resihp__wire_dial(at + 1, deadline);
    if (fd < 0) {
      resihp_log(RESIHP_LOG_WARN, "job",
                 "replica %d: cannot reach replacement %s for catch-up (%s)",
                 j->replica, t, resihp_strerror(fd));
      continue;
    }
    resihp__wire_t w;
    resihp__wire_init(&w, fd);
    int rc = resihp__wire_auth_client(&w, j->secret, j->secret_len, "state",
                                      deadline);
    if (!rc) {
      snprintf(line, sizeof(line), "STATE step=%ld bytes=%zu sha256=%s",
               j->serve_step, j->state_len, dg);
      rc = resihp__wire_send(&w, line, deadline);
    }
    size_t half = j->state_len / 2;
    if (!rc)
      rc = resihp__wire_write(&w, j->snap, half, deadline);
    int f = catchup_fault(j);
    if (!rc && f >= 0) {
      j->inj_fired[f] = 1;
      fire(j, j->inj[f].kind, RESIHP__INJECT_CATCHUP);
    }
    if (!rc)
      rc =
          resihp__wire_write(&w, j->snap + half, j->state_len - half, deadline);
    /* the tag of the whole transfer: a tampered state is refused */
    const void *parts[1] = {j->snap};
    size_t lens[1] = {j->state_len};
    if (!rc)
      rc = resihp__wire_seal(&w, parts, lens, 1, deadline);
    if (rc)
      resihp_log(RESIHP_LOG_WARN, "job",
                 "replica %d: catch-up of replica %.*s failed (%s)", j->replica,
                 (int)(at - t), t, resihp_strerror(rc));
    else
      resihp_log(RESIHP_LOG_INFO, "job",
                 "replica %d: sent %zu bytes of step-%ld state to replica %.*s",
                 j->replica, j->state_len, j->serve_step, (int)(at - t), t);
    resihp__wire_free(&w);
  }
  return NULL;
}

/* A member died before the state came (maybe the source): give up now
 * rather than hold the survivors' all-reduce up. */
static int source_may_be_gone(resihp_job_t *j) {
  return resihp_comm_failed(j->comm, NULL, 0) > 0;
}

/* Receive the state of a healthy member into j->state. */
static int receive_state(resihp_job_t *j) {
  int64_t deadline = resihp__now_ms() + 30000;
  int rc = j->shs ? 0
                  : resihp__wire_hs_create(j->secret, j->secret_len, "state",
                                           HS_PENDING, HS_TIMEOUT_MS, &j->shs);
  resihp__wire_t w;
  if (rc || (rc = accept_authed(j, j->shs, j->slfd, deadline,
                                source_may_be_gone, &w)))
    return rc;
  char line[256], dg[80], got[65];
  long bytes = -1, step = -1;
  rc = resihp__wire_recv(&w, line, sizeof(line), deadline);
  if (!rc && (resihp__wire_get_long(line, "bytes", &bytes) ||
              resihp__wire_get_long(line, "step", &step) ||
              resihp__wire_get(line, "sha256", dg, sizeof(dg)) ||
              (size_t)bytes != j->state_len))
    rc = RESIHP_EPROTO;
  uint8_t *buf = rc ? NULL : malloc(j->state_len ? j->state_len : 1);
  if (!rc && !buf)
    rc = RESIHP_ENOMEM;
  size_t half = j->state_len / 2;
  if (!rc)
    rc = resihp__wire_read(&w, buf, half, deadline);
  int f = catchup_fault(j);
  if (!rc && f >= 0) {
    j->inj_fired[f] = 1;
    fire(j, j->inj[f].kind, RESIHP__INJECT_CATCHUP);
  }
  if (!rc)
    rc = resihp__wire_read(&w, buf + half, j->state_len - half, deadline);
  const void *parts[1] = {buf};
  size_t lens[1] = {j->state_len};
  if (!rc && (rc = resihp__wire_unseal(&w, parts, lens, 1, deadline)))
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: the state received failed its integrity check "
               "(%s): refused",
               j->replica, resihp_strerror(rc));
  if (!rc) {
    digest_hex(buf, j->state_len, got);
    if (strcmp(got, dg))
      rc = RESIHP_EPROTO;
  }
  if (!rc) {
    memcpy(j->state, buf, j->state_len);
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d: caught up with the state of step %ld (%zu "
               "bytes, digest checked)",
               j->replica, step, j->state_len);
  }
  free(buf);
  resihp__wire_free(&w);
  return rc;
}

static int setup_comm(resihp_job_t *j, const char *list) {
  resihp_comm_destroy(j->comm);
  j->comm = NULL;
  char *copy = strdup(list);
  const char *eps[MAXM];
  int n = 0, me = -1;
  if (!copy)
    return RESIHP_ENOMEM;
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && n < MAXM;
       t = strtok_r(NULL, ",", &save)) {
    char *at = strchr(t, '@');
    if (!at)
      continue;
    *at = '\0';
    j->members[n] = atoi(t);
    if (j->members[n] == j->replica)
      me = n;
    eps[n++] = at + 1;
  }
  j->nmembers = n;
  int rc = RESIHP_EPROTO;
  if (me >= 0) {
    resihp_comm_opts_t co;
    resihp_comm_opts_init(&co);
    co.rank = me;
    co.nranks = n;
    co.endpoints = eps;
    co.listen_fd = j->lfd;
    co.secret = j->secret;
    co.secret_len = j->secret_len;
    co.connect_timeout_ms = 10000;
    rc = resihp_comm_create(&co, &j->comm);
  }
  free(copy);
  return rc;
}

/* A periodic probe failed on this rank's node: the node is not fit to
 * train on, even though the rank still runs. Tell the coordinator (through
 * the leader for the other ranks of a replica), which fails the replica and
 * has it relaunched on a healthy spare, and leave. Checked at step
 * boundaries only, where leaving costs no half-done work: the steps the
 * replica finished are already in every survivor's sum. An unchanged file
 * costs one stat(2). The job keeps no detector, so nothing else is told. */
static int check_probes(resihp_job_t *j) {
  if (!j->watch_probes)
    return 0;
  resihp__probe_block_t b;
  int rc;
  while ((rc = resihp__probe_watch_next(&j->probes, &b)) == 1) {
    if (strcmp(b.kind, "periodic") || b.healthy != 0)
      continue;
    char line[640];
    snprintf(line, sizeof(line),
             "FAULT kind=probe step=%ld node=%s summary=%.400s", j->step + 1,
             j->node, b.summary[0] ? b.summary : b.failed);
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: node %s failed its periodic health probe (%s): "
               "leaving so that the replica is relaunched on a healthy node",
               j->replica, j->node, b.summary[0] ? b.summary : b.failed);
    if (j->lrank > 0)
      local_send(j, &j->up, line, NULL, 0);
    else
      send_line(j, line);
    j->watch_probes = 0;
    return RESIHP_EPROBE;
  }
  if (rc < 0)
    j->watch_probes = 0; /* no results file (probes=none) or it is gone */
  return 0;
}

int resihp_job_begin_step(resihp_job_t *j, resihp_job_step_t *st) {
  if (!j || !st)
    return RESIHP_EINVAL;
  if (j->in_step) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "resihp_job_begin_step: step %ld was not ended", j->step);
    return RESIHP_ESTATE;
  }
  join_serve(j);
  memset(st, 0, sizeof(*st));
  int rc = check_probes(j);
  if (rc)
    return rc;
  if (j->lrank > 0)
    return sub_begin_step(j, st);
  char line[128];
  snprintf(line, sizeof(line), "BEGIN step=%ld", j->member ? j->step + 1 : -1);
  rc = send_line(j, line);
  if (rc)
    return rc;
  for (;;) {
    if ((rc = recv_msg(j)))
      return rc;
    if (!strcmp(j->msg, "DONE")) {
      st->done = 1;
      st->step = j->step + 1;
      if (j->lsize > 1)
        send_down(j, "DONE", NULL, 0);
      return 0;
    }
    if (!strncmp(j->msg, "GO ", 3)) {
      long ep = 0, isnew = 0;
      char *list = malloc(MSG_MAX);
      if (!list)
        return RESIHP_ENOMEM;
      if (resihp__wire_get_long(j->msg, "epoch", &ep) ||
          resihp__wire_get_long(j->msg, "new", &isnew) ||
          resihp__wire_get(j->msg, "members", list, MSG_MAX)) {
        free(list);
        return RESIHP_EPROTO;
      }
      j->epoch = (uint32_t)ep;
      if (isnew) {
        rc = setup_comm(j, list);
        snprintf(line, sizeof(line), "%s epoch=%ld", rc ? "RESYNC" : "READY",
                 ep);
        if (rc)
          resihp_log(RESIHP_LOG_WARN, "job",
                     "replica %d: communicator of epoch %ld not set up (%s)",
                     j->replica, ep, resihp_strerror(rc));
        free(list);
        if ((rc = send_line(j, line)))
          return rc;
      } else {
        free(list);
      }
      continue;
    }
    if (strncmp(j->msg, "START ", 6))
      continue; /* WELCOME and the like */
    long s = -1, cu = 0;
    resihp__wire_get_long(j->msg, "step", &s);
    resihp__wire_get_long(j->msg, "catchup", &cu);
    if ((rc = parse_list(j, j->msg, "mbs", &j->mbs, &j->nmbs)))
      return rc;
    j->nextra = 0;
    j->step = s;
    j->member = 1;
    if (cu) {
      if (!j->state && j->state_len == 0)
        resihp_log(RESIHP_LOG_WARN, "job",
                   "replica %d: catching up but no state was registered "
                   "(resihp_job_set_state)",
                   j->replica);
      rc = receive_state(j);
      if (rc) {
        resihp_log(RESIHP_LOG_WARN, "job",
                   "replica %d: catch-up at step %ld failed (%s); leaving "
                   "the group to be admitted again",
                   j->replica, s, resihp_strerror(rc));
        send_line(j, "CATCHUP_FAILED");
        resihp_comm_destroy(j->comm);
        j->comm = NULL;
        j->member = 0;
        continue;
      }
    } else if (!j->valid_state && s > 0) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: asked to compute step %ld without a state",
                 j->replica, s);
      return RESIHP_ESTATE;
    }
    j->valid_state = 1;
    char *serve = malloc(MSG_MAX);
    if (serve && !resihp__wire_get(j->msg, "serve", serve, MSG_MAX) &&
        j->state_len) {
      j->snap = malloc(j->state_len);
      if (j->snap) {
        memcpy(j->snap, j->state, j->state_len);
        snprintf(j->serve_to, sizeof(j->serve_to), "%s", serve);
        j->serve_step = s - 1;
        if (!pthread_create(&j->serve_thread, NULL, serve_main, j))
          j->serving = 1;
      }
    }
    free(serve);
    if (j->lsize > 1) {
      /* the replica's whole list to its other ranks; each takes a share */
      resihp__wire_buf_t b;
      resihp__wire_buf_init(&b);
      resihp__wire_buf_printf(&b,
                              "STEP step=%ld cu=%ld epoch=%u nrep=%d "
                              "state=%zu mbs=",
                              s, cu, j->epoch, j->nmembers,
                              cu ? j->state_len : (size_t)0);
      resihp__wire_buf_ints(&b, j->mbs, j->nmbs);
      rc = send_down_buf(j, &b, j->state, cu ? j->state_len : 0);
      resihp__wire_buf_free(&b);
      if (rc)
        return rc;
      int *all = j->mbs;
      j->mbs = NULL;
      j->nmbs = share(all, j->nmbs, 0, j->lsize, &j->mbs);
      free(all);
    }
    return enter_step(j, st, s, (int)cu, j->epoch, j->nmembers);
  }
}

int resihp_job_allreduce(resihp_job_t *j, int64_t *acc, size_t n) {
  if (!j || (!acc && n))
    return RESIHP_EINVAL;
  if (!j->in_step)
    return RESIHP_ESTATE;
  if (j->lrank > 0)
    return sub_allreduce(j, acc, n);
  if (!j->comm)
    return RESIHP_ESTATE;
  int64_t *buf = acc;
  if (j->lsize > 1) {
    int grc = gather(j, acc, n);
    if (grc)
      return grc;
    buf = j->work;
  }
  for (;;) {
    int rc = resihp_allreduce(j->comm, buf, n, RESIHP_FIXED64, RESIHP_OP_SUM);
    if (!rc && j->lsize > 1) {
      memcpy(acc, buf, n * sizeof(int64_t));
      char line[64];
      snprintf(line, sizeof(line), "RESULT n=%zu", n);
      rc = send_down(j, line, acc, n * sizeof(int64_t));
    }
    if (!rc)
      return 0;
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT && rc != RESIHP_EPROTO)
      return rc;
    int failed[MAXM], nf = 0;
    rc = resihp_comm_shrink(j->comm, NULL, 0, failed, MAXM, &nf);
    if (rc) {
      if (rc == RESIHP_EEXCLUDED)
        resihp_log(RESIHP_LOG_ERROR, "job",
                   "replica %d: excluded by the other replicas; leaving",
                   j->replica);
      return rc;
    }
    resihp__wire_buf_t b;
    resihp__wire_buf_init(&b);
    resihp__wire_buf_printf(&b, "RECOVER step=%ld cepoch=%u view=", j->step,
                            resihp_comm_epoch(j->comm));
    int size = resihp_comm_size(j->comm);
    for (int i = 0; i < size; i++)
      resihp__wire_buf_printf(&b, "%s%d", i ? ":" : "",
                              j->members[resihp_comm_member(j->comm, i)]);
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: step %ld: %d peer(s) failed; %d replicas go on",
               j->replica, j->step, nf, size);
    rc = b.err ? b.err : send_line(j, b.s);
    resihp__wire_buf_free(&b);
    if (rc)
      return rc;
    do {
      if ((rc = recv_msg(j)))
        return rc;
    } while (strncmp(j->msg, "REASSIGN ", 9));
    if ((rc = parse_list(j, j->msg, "extra", &j->extra, &j->nextra)))
      return rc;
    if (j->nextra == 0)
      continue;
    if (j->lsize > 1) {
      resihp__wire_buf_init(&b);
      resihp__wire_buf_printf(&b, "EXTRA nrep=%d list=", size);
      resihp__wire_buf_ints(&b, j->extra, j->nextra);
      rc = send_down_buf(j, &b, NULL, 0);
      resihp__wire_buf_free(&b);
      if (rc)
        return rc;
      int *all = j->extra;
      j->extra = NULL;
      j->nextra = share(all, j->nextra, 0, j->lsize, &j->extra);
      free(all);
    }
    if (j->st) {
      j->st->nextra = j->nextra;
      j->st->extra = j->extra;
      j->st->nreplicas = size;
    }
    return RESIHP_EREASSIGNED;
  }
}

int resihp_job_end_step(resihp_job_t *j) {
  if (!j || !j->in_step)
    return RESIHP_ESTATE;
  j->in_step = 0;
  j->st = NULL;
  return 0;
}

void resihp_job_report_microbatch(resihp_job_t *j, int mb, double tokens,
                                  double sum_l2, double nseq, double seconds) {
  if (!j)
    return;
  resihp_job_mb_sample_t *x = &j->samples[j->nsamples % SAMPLES];
  x->step = j->step;
  x->mb = mb;
  x->tokens = tokens;
  x->sum_l2 = sum_l2;
  x->nseq = nseq;
  x->seconds = seconds;
  j->nsamples++;
}

int resihp_job_microbatch_samples(const resihp_job_t *j,
                                  resihp_job_mb_sample_t *out, int max) {
  if (!j || max <= 0)
    return 0;
  long have = j->nsamples < SAMPLES ? j->nsamples : SAMPLES;
  long first = j->nsamples - have;
  int n = 0;
  for (long i = first; i < j->nsamples && n < max; i++)
    out[n++] = j->samples[i % SAMPLES];
  return n;
}

int resihp_job_finish(resihp_job_t *j, const char *result) {
  if (!j)
    return RESIHP_EINVAL;
  if (j->lrank > 0)
    return 0; /* the leader reports for the replica */
  char line[300], r[224];
  snprintf(r, sizeof(r), "%s", result && *result ? result : "-");
  for (char *p = r; *p; p++)
    if (*p <= ' ' || *p > '~')
      *p = '_';
  snprintf(line, sizeof(line), "FINISH result=%s", j->valid_state ? r : "-");
  return send_line(j, line);
}

/* ---- sharded replicas: placeholders until the implementation lands ---- */
int resihp_job_set_state_list(resihp_job_t *j, const resihp_job_buf_t *bufs,
                              int n) {
  if (!j || n < 0 || (n && !bufs))
    return RESIHP_EINVAL;
  if (n > 1)
    return RESIHP_ENOTSUP;
  return resihp_job_set_state(j, n ? bufs[0].data : NULL, n ? bufs[0].bytes : 0);
}

int resihp_job_allreduce_as(resihp_job_t *j, void *buf, size_t count,
                            resihp_dtype_t dtype, resihp_op_t op) {
  if (dtype == RESIHP_FIXED64 && op == RESIHP_OP_SUM)
    return resihp_job_allreduce(j, buf, count);
  return RESIHP_ENOTSUP;
}

int resihp_job_shard(const resihp_job_t *j) { return j ? j->lrank : -1; }
int resihp_job_shards(const resihp_job_t *j) { return j ? j->lsize : 0; }
resihp_comm_t *resihp_job_replica_comm(resihp_job_t *j) {
  (void)j;
  return NULL;
}
