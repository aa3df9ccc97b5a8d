/* SPDX-License-Identifier: BSD-3-Clause */
/* The in-rank job's life cycle (see resihp/job.h, job_internal.h for the
 * other files, and the protocol in control/coordinator.h): options, join,
 * the coordinator link and its heartbeat thread, accessors, finish, abort,
 * destroy.
 *
 * The leader's main thread talks to the coordinator: it sends requests and
 * reads the answers itself, skipping the coordinator's heartbeats. A
 * heartbeat thread only writes (HB under send_mu, every 200 ms on the star
 * links and as often as WELCOME says on the coordinator link), so a rank
 * that is computing is never taken for a dead one, while a rank that is
 * hung (SIGSTOP) falls silent as a whole. */
#include "config.h"

#include "../probe/burnin.h"
#include "../transport/msgauth.h"
#include "../transport/sha256.h"
#include "job_internal.h"
#include "pmix_wireup.h"

#include <resihp/error.h>
#include <resihp/log.h>
#include <resihp/settings.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How long a leader that leaves waits for its relay to learn how every
 * rank's link ended (resihp__job_relay_settle): only a rank that hangs
 * with its links open makes it wait this long. */
#define RELAY_SETTLE_MS 1000

void resihp_job_opts_init(resihp_job_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->replica = -1;
}

int resihp__job_parse_mbs(resihp_job_t *j, const char *msg, const char *key,
                          int **out, int *n) {
  char *v = malloc(RESIHP__JOB_MSG_MAX);
  if (!v)
    return RESIHP_ENOMEM;
  int rc = resihp__wire_get(msg, key, v, RESIHP__JOB_MSG_MAX);
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

int resihp__job_welcome(resihp_job_t *j, const char *line) {
  if (strncmp(line, "WELCOME ", 8))
    return RESIHP_EPROTO;
  long hb = RESIHP__JOB_HB_MS;
  int rc = resihp__wire_get_range(line, "hb", 100, 60000, &hb);
  if (rc && rc != RESIHP_ENOENT)
    return RESIHP_EPROTO;
  __atomic_store_n(&j->coord_hb_ms, rc ? RESIHP__JOB_HB_MS : (int)hb,
                   __ATOMIC_RELAXED);
  /* the first WELCOME's credential (one again=1 has none: the same one
   * stays) */
  char cred[sizeof(j->cred)];
  if (!resihp__wire_get(line, "cred", cred, sizeof(cred)))
    memcpy(j->cred, cred, sizeof(cred));
  /* the coordinator's term (absent: 0, an older resihp-run's) */
  long term = 0;
  if (resihp__wire_get_range(line, "term", 0, UINT32_MAX - 1, &term) ==
      RESIHP_EPROTO)
    return RESIHP_EPROTO;
  j->term = (uint32_t)term;
  resihp__job_layers_welcome(j, line);
  return 0;
}

static void *hb_main(void *arg) {
  resihp_job_t *j = arg;
  int64_t coord_next = 0;
  pthread_mutex_lock(&j->hb_mu);
  while (!j->hb_stop) {
    struct timespec ts = resihp__realtime_in(RESIHP__JOB_HB_MS);
    pthread_cond_timedwait(&j->hb_cv, &j->hb_mu, &ts);
    if (j->hb_stop)
      break;
    pthread_mutex_unlock(&j->hb_mu);
    pthread_mutex_lock(&j->send_mu);
    int64_t now = resihp__now_ms(), dl = now + 1000;
    int coord_ms = __atomic_load_n(&j->coord_hb_ms, __ATOMIC_RELAXED);
    if (j->cw.fd >= 0 && now >= coord_next) {
      /* every coord_ms, on the star links' ticks (half a tick early
       * rather than a tick late) */
      resihp__wire_send(&j->cw, "HB", dl);
      coord_next = now + coord_ms - RESIHP__JOB_HB_MS / 2;
    }
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

void resihp_job_destroy(resihp_job_t *j) {
  if (!j)
    return;
  /* a rank that leaves on its own says so first: its leader tells a
   * rank lost (its link closes without a word) from one that left */
  if (j->lrank > 0 && j->up.fd >= 0)
    resihp__job_send_up(j, "BYE");
  resihp__job_serve_stop(j);
  stop_hb(j);
  if (j->lrank == 0 && j->relay_started) {
    /* the leader: its links closed first (the ranks blocked on them see
     * it and leave, saying BYE), then how each rank ended is told */
    resihp__job_groups_destroy(j);
    resihp_comm_destroy(j->rcomm);
    j->rcomm = NULL;
    resihp__job_relay_settle(j, RELAY_SETTLE_MS);
  }
  /* a relay waiting for a new coordinator link (job_link.c) waits no more */
  pthread_mutex_lock(&j->send_mu);
  if (!j->lost)
    j->lost = RESIHP_ECLOSED;
  pthread_cond_broadcast(&j->link_cv);
  pthread_mutex_unlock(&j->send_mu);
  resihp__job_relay_stop(j);
  resihp__job_groups_destroy(j);
  resihp_comm_destroy(j->rcomm);
  resihp__wire_free(&j->cw);
  resihp__wire_free(&j->up);
  for (int k = 0; j->down && k < j->lsize - 1; k++)
    resihp__wire_free(&j->down[k]);
  free(j->down);
  free(j->down_open);
  free(j->results);
  free(j->setup_epoch);
  free(j->setup_failed);
  if (j->relay_pipe[0] >= 0) {
    close(j->relay_pipe[0]);
    close(j->relay_pipe[1]);
  }
  pthread_mutex_destroy(&j->relay_mu);
  pthread_cond_destroy(&j->relay_cv);
  free(j->work);
  free(j->members);
  free(j->member_eps);
  resihp__job_cols_free(j);
  for (int *fd = &j->lfd; fd <= &j->rlfd; fd++)
    if (*fd >= 0)
      close(*fd);
  if (j->llfd >= 0)
    close(j->llfd);
  resihp__wire_hs_destroy(j->shs);
  resihp__wire_hs_destroy(j->lhs);
  resihp__lobby_destroy(j->slobby);
  resihp__lobby_destroy(j->llobby);
  if (j->secret) {
    memset(j->secret, 0, j->secret_len);
    free(j->secret);
  }
  pthread_mutex_destroy(&j->send_mu);
  pthread_mutex_destroy(&j->serve_mu);
  pthread_cond_destroy(&j->link_cv);
  free(j->hello);
  free(j->pending);
  pthread_mutex_destroy(&j->hb_mu);
  pthread_cond_destroy(&j->hb_cv);
  resihp__probe_watch_free(&j->probes);
  resihp__job_state_free(j);
  resihp__job_layers_free(j);
  free(j->mbs);
  free(j->extra);
  resihp__costplan_free(&j->cplan);
  free(j->olog);
  free(j->cwl);
  free(j->ccost);
  free(j->cpick);
  free(j->msg);
  free(j->stash);
  free(j);
}

/* The step's ranks: SLURM_PROCID/NTASKS, or PMIx where the step has it. */
static void find_ranks(resihp_job_t *j) {
  const char *pr = getenv("SLURM_PROCID"), *nt = getenv("SLURM_NTASKS");
  j->lrank = pr && *pr ? atoi(pr) : 0;
  j->lsize = nt && *nt ? atoi(nt) : 1;
  int pr_rank, pr_size;
  if (j->lsize > 1 && resihp__pmix_init(&pr_rank, &pr_size) == 0) {
    j->lrank = pr_rank;
    j->lsize = pr_size;
    j->pmix = 1;
  }
  if (j->lsize < 1 || j->lrank < 0 || j->lrank >= j->lsize) {
    j->lrank = 0;
    j->lsize = 1;
  }
}

/* A listening socket on the address it is advertised at (the one that
 * routes to the coordinator), not on every address of the host: its
 * "ip:port" into ep. */
static int listen_on(const char *ip, int *fd, char *ep, size_t cap) {
  int port = 0;
  *fd = resihp__wire_listen(ip, 0, &port);
  if (*fd < 0) {
    resihp_log(RESIHP_LOG_ERROR, "job", "cannot open a listening socket: %s",
               strerror(errno));
    return RESIHP_ESYS;
  }
  snprintf(ep, cap, "%s:%d", ip, port);
  return 0;
}

/* Checks that need no peer: bad input fails here, before anything runs. */
static int check_opts(const resihp_job_opts_t *o) {
  if (!o || o->microbatches < 1 || o->steps < 1) {
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
  if (o->ranks_per_replica < 0 || o->nstate < 0 || (o->nstate && !o->state)) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "resihp_job_join: ranks_per_replica and nstate must be >= 0 "
               "(and state given when nstate is)");
    return RESIHP_EINVAL;
  }
  return 0;
}

/* The burn-in the launcher asks of a replica's first launch
 * (RESIHP_BURNIN_BYTES): the same kernel and loopback all-reduce a spare
 * runs before it may replace a replica (probe/burnin.h), timed here, on a
 * node that trains at the job's pace, before training starts. The
 * all-reduce is of this rank's state size (its gradients'), else of the
 * size the variable gives. " burnin=..." into out, or nothing. */
static void burnin(const resihp_job_t *j, char *out, size_t len) {
  const char *v = getenv("RESIHP_BURNIN_BYTES");
  if (!v || !*v || !strcmp(v, "off"))
    return;
  long bytes = 0;
  for (int i = 0; i < j->nstate; i++)
    bytes += (long)j->state[i].bytes;
  if (!bytes)
    bytes = atol(v) > 0 ? atol(v) : RESIHP__BURNIN_DEFAULT_BYTES;
  resihp__burnin_t b;
  int rc = resihp__burnin_run(bytes, resihp__now_ms() + 5000, &b);
  if (rc)
    resihp_log(RESIHP_LOG_WARN, "job",
               "burn-in failed on this node (%s): no reference from it", b.why);
  char f[64];
  resihp__burnin_format(&b, f, sizeof(f));
  snprintf(out, len, " burnin=%s", f);
}

/* Leader: say HELLO for the replica, with every rank's addresses. */
static int hello(resihp_job_t *j, const char *jid, const char *sid) {
  char shape[17];
  if (j->lsize > 1)
    memcpy(shape, j->rshape, sizeof(shape));
  else
    resihp__job_state_shape(j, shape);
  char bi[80] = "";
  burnin(j, bi, sizeof(bi));
  snprintf(j->msg, RESIHP__JOB_MSG_MAX,
           "HELLO replica=%d ep=%s sep=%s node=%s jobid=%s stepid=%s "
           "mbs=%d steps=%ld pid=%ld lsize=%d lep=%s shape=%s%s",
           j->replica, j->lsize > 1 ? j->eps : j->ep,
           j->lsize > 1 ? j->seps : j->sep, j->node, jid, sid,
           j->o.microbatches, j->o.steps, (long)getpid(), j->lsize,
           j->lsize > 1 ? j->lep : "-", shape, bi);
  /* kept for a reconnect (job_link.c); set once welcome, so that a
   * failure at join stays final */
  char *line = strdup(j->msg);
  if (!line)
    return RESIHP_ENOMEM;
  int rc = resihp__job_send(j, line);
  if (!rc)
    rc = resihp__job_recv(j);
  if (!rc)
    rc = resihp__job_welcome(j, j->msg);
  if (rc)
    free(line);
  else
    j->hello = line;
  return rc;
}

int resihp_job_join(const resihp_job_opts_t *o, resihp_job_t **out) {
  int rc = check_opts(o);
  if (rc)
    return rc;
  const resihp_settings_t *s = resihp_settings_global();
  resihp_job_t *j = calloc(1, sizeof(*j));
  if (!j)
    return RESIHP_ENOMEM;
  j->o = *o;
  j->o.state = NULL; /* copied below */
  j->lfd = j->slfd = j->rlfd = j->llfd = -1;
  j->relay_pipe[0] = j->relay_pipe[1] = -1;
  resihp__wire_init(&j->cw, -1);
  resihp__wire_init(&j->up, -1);
  j->detect_ms = (int)resihp_settings_get(s, RESIHP_SETTING_DETECT_TIMEOUT);
  find_ranks(j);
  pthread_mutex_init(&j->send_mu, NULL);
  pthread_mutex_init(&j->serve_mu, NULL);
  j->serve_fd = -1;
  pthread_cond_init(&j->link_cv, NULL);
  j->main_thread = pthread_self();
  pthread_mutex_init(&j->hb_mu, NULL);
  pthread_cond_init(&j->hb_cv, NULL);
  pthread_mutex_init(&j->relay_mu, NULL);
  pthread_cond_init(&j->relay_cv, NULL);
  j->msg = malloc(RESIHP__JOB_MSG_MAX);
  j->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
  j->step = -1;
  rc = RESIHP_EINVAL;
  if (!j->msg) {
    rc = RESIHP_ENOMEM;
    goto fail;
  }
  /* with several ranks, rank 0 checks them all (job_replica.c), so that
   * every rank of the replica learns it and leaves at once */
  if (j->lsize == 1 && o->ranks_per_replica && o->ranks_per_replica != 1) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "this program is written for %d ranks per replica but the "
               "replica's step has 1: run it with resihp-run "
               "--ranks-per-replica %d",
               o->ranks_per_replica, o->ranks_per_replica);
    goto fail;
  }
  if (j->lsize > RESIHP__JOB_MAX_SHARDS) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "%d ranks per replica: at most %d are supported", j->lsize,
               RESIHP__JOB_MAX_SHARDS);
    goto fail;
  }
  if (o->nstate && (rc = resihp__job_state_set(j, o->state, o->nstate)))
    goto fail;
  j->shape_fixed = o->nstate > 0;
  rc = RESIHP_EINVAL;
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
  if ((rc = resihp__job_parse_failover(getenv("RESIHP_FAILOVER_MS"),
                                       &j->failover_ms)))
    goto fail;
  if ((rc = resihp__wire_read_secret(sf, &j->secret, &j->secret_len)))
    goto fail;
  if ((rc = resihp__job_set_coords(j, j->coordinator))) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "RESIHP_COORDINATOR='%.80s': expected HOST:PORT, or up to %d "
               "of them separated by '/' (the primary coordinator first)",
               j->coordinator, RESIHP__JOB_COORDS);
    goto fail;
  }
  /* the primary first; a standby takes no one before it takes over */
  int fd = -1;
  for (int i = 0; i < j->ncoords && fd < 0; i++) {
    j->coord_at = i;
    fd = resihp__wire_dial(j->coords[i], resihp__now_ms() + 10000 / j->ncoords);
  }
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
               resihp__job_coord_ep(j), resihp_strerror(rc));
    goto fail;
  }
  /* Our address is the one that routes to the coordinator. */
  struct sockaddr_in me;
  socklen_t ml = sizeof(me);
  char ip[INET_ADDRSTRLEN] = "127.0.0.1";
  if (!getsockname(j->cw.fd, (struct sockaddr *)&me, &ml))
    inet_ntop(AF_INET, &me.sin_addr, ip, sizeof(ip));
  const char *jid = getenv("SLURM_JOB_ID"), *sid = getenv("SLURM_STEP_ID");
  if (!jid || !*jid)
    jid = "-1";
  if (!sid || !*sid)
    sid = "-1";
  if ((rc = listen_on(ip, &j->lfd, j->ep, sizeof(j->ep))) ||
      (rc = listen_on(ip, &j->slfd, j->sep, sizeof(j->sep))) ||
      (rc = listen_on(ip, &j->rlfd, j->rep, sizeof(j->rep))))
    goto fail;
  if (j->lrank > 0) {
    if ((rc = resihp__job_join_leader(j, jid, sid)))
      goto fail;
  } else {
    if (j->lsize > 1) {
      if ((rc = listen_on(ip, &j->llfd, j->lep, sizeof(j->lep))))
        goto fail;
      if (j->pmix && resihp__pmix_leader_ep(0, j->lep, sizeof(j->lep)))
        resihp_log(RESIHP_LOG_WARN, "job",
                   "replica %d: PMIx wire-up failed; the other ranks find "
                   "this one through the coordinator",
                   j->replica);
    }
    /* The other ranks' addresses (and state shapes) first: HELLO carries
     * all of them. Ranks that PMIx cannot tell where this one is ask the
     * coordinator, which learns it from LEP. */
    if (j->lsize > 1) {
      snprintf(j->msg, RESIHP__JOB_MSG_MAX,
               "LEP replica=%d jobid=%s stepid=%s lep=%s", j->replica, jid, sid,
               j->lep);
      if ((rc = resihp__job_send(j, j->msg)) ||
          (rc = resihp__job_accept_ranks(j)))
        goto fail;
    }
    if ((rc = hello(j, jid, sid)))
      goto fail;
  }
  if ((rc = resihp__job_replica_comm_create(j)))
    goto fail;
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
  resihp_job_buf_t b = {state, bytes};
  return resihp_job_set_state_list(j, &b, 1);
}

int resihp_job_set_state_list(resihp_job_t *j, const resihp_job_buf_t *bufs,
                              int n) {
  if (!j || n < 0 || (n && !bufs))
    return RESIHP_EINVAL;
  return resihp__job_state_set(j, bufs, n);
}

int resihp_job_replica(const resihp_job_t *j) {
  return j ? j->replica : -1;
}

int resihp_job_shard(const resihp_job_t *j) {
  return j ? j->lrank : -1;
}

int resihp_job_shards(const resihp_job_t *j) {
  return j ? j->lsize : 0;
}

resihp_comm_t *resihp_job_replica_comm(resihp_job_t *j) {
  return j ? j->rcomm : NULL;
}

int resihp_job_end_step(resihp_job_t *j) {
  if (!j || !j->in_step)
    return RESIHP_ESTATE;
  j->in_step = 0;
  j->st = NULL;
  /* free-running: whether the next step goes on without the coordinator
   * (job_step.c) */
  return resihp__job_free_boundary(j);
}

void resihp_job_report_microbatch(resihp_job_t *j, int mb, double tokens,
                                  double sum_l2, double nseq, double seconds) {
  if (!j)
    return;
  seconds = resihp__job_slow_microbatch(j, seconds);
  resihp_job_mb_sample_t *x = &j->samples[j->nsamples % RESIHP__JOB_SAMPLES];
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
  long have =
      j->nsamples < RESIHP__JOB_SAMPLES ? j->nsamples : RESIHP__JOB_SAMPLES;
  long first = j->nsamples - have;
  int n = 0;
  for (long i = first; i < j->nsamples && n < max; i++)
    out[n++] = j->samples[i % RESIHP__JOB_SAMPLES];
  return n;
}

/* Text as the coordinator takes it: printable ASCII, anything else '_'
 * (spaces too unless keep_spaces: a result is one token, a reason words).
 * Returns whether anything but spaces is left. */
static int clean_text(char *r, int keep_spaces) {
  int text = 0;
  for (char *p = r; *p; p++) {
    if (*p < ' ' || *p > '~' || (*p == ' ' && !keep_spaces))
      *p = '_';
    text |= *p != ' ';
  }
  return text;
}

/* Every rank's result reaches the leader over the star; the replica's is
 * "r0/r1/...", or a digest of that when it would be too long. */
int resihp_job_finish(resihp_job_t *j, const char *result) {
  if (!j)
    return RESIHP_EINVAL;
  char r[224], line[300];
  snprintf(r, sizeof(r), "%s", result && *result ? result : "-");
  clean_text(r, 0);
  if (!j->valid_state)
    snprintf(r, sizeof(r), "-");
  if (j->lrank > 0) {
    snprintf(line, sizeof(line), "RESULT result=%s", r);
    return resihp__job_send_up(j, line);
  }
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  if (j->lsize > 1)
    resihp__job_results(j, r, &b);
  else
    resihp__wire_buf_printf(&b, "%s", r);
  if (b.err) {
    resihp__wire_buf_free(&b);
    return RESIHP_ENOMEM;
  }
  if (b.len > 200) {
    uint8_t d[RESIHP__SHA256_LEN];
    resihp__sha256_t h;
    resihp__sha256_init(&h);
    resihp__sha256_update(&h, b.s, b.len);
    resihp__sha256_final(&h, d);
    snprintf(r, sizeof(r), "sha256:");
    resihp__hex(r + 7, d, 16);
  } else {
    snprintf(r, sizeof(r), "%s", b.s);
  }
  resihp__wire_buf_free(&b);
  snprintf(line, sizeof(line), "FINISH result=%s", r);
  return resihp__job_send(j, line);
}

/* The reason travels as the last field of one line and ends up in
 * resihp-run's messages: printable ASCII (anything else, line breaks
 * included, becomes '_'), spaces kept, at most 200 characters. */
int resihp_job_abort(resihp_job_t *j, const char *reason) {
  if (!j)
    return RESIHP_EINVAL;
  char why[201], line[224];
  snprintf(why, sizeof(why), "%s",
           reason && *reason ? reason : "no reason given");
  if (!clean_text(why, 1))
    snprintf(why, sizeof(why), "no reason given");
  resihp_log(RESIHP_LOG_ERROR, "job",
             "replica %d rank %d: stopping the whole run: %s (an error of "
             "the program: a spare would fail the same way)",
             j->replica, j->lrank, why);
  snprintf(line, sizeof(line), "ABORT reason=%s", why);
  return resihp__job_tell(j, line);
}
