/* SPDX-License-Identifier: BSD-3-Clause */
/* One shard's state and its catch-up (see job_internal.h).
 *
 * The state is a list of buffers (parameters, optimizer moments, RNG...),
 * the caller's. A serving rank copies it at START (the state of the last
 * committed step) into one snapshot, and a sender thread dials each
 * replacement it serves for its shard, authenticates ("state" channel) and
 * sends "STATE step=s shard=k bytes=n sha256=..." followed by the bytes and
 * the tag of the whole transfer; the rank goes on with its microbatches
 * meanwhile. Rank k of a replacement checks the shard, the length, the tag
 * and the digest; it receives straight into its buffers, which hold no
 * valid state until the transfer is complete and checked (a replacement
 * whose transfer fails leaves the group and is admitted again later, with
 * another source). The coordinator spreads the K shards of a replacement
 * over the healthy replicas, so the K transfers run in parallel from
 * different sources. */
#include "config.h"

#include "../transport/msgauth.h"
#include "../transport/sha256.h"
#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void resihp__job_state_free(resihp_job_t *j) {
  free(j->state);
  j->state = NULL;
  j->nstate = 0;
  j->state_len = 0;
  free(j->snap);
  j->snap = NULL;
  free(j->serve_to);
  j->serve_to = NULL;
}

int resihp__job_state_set(resihp_job_t *j, const resihp_job_buf_t *bufs,
                          int n) {
  if (n > RESIHP__JOB_MAX_BUFS) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "a state of %d buffers: at most %d (join them into fewer)", n,
               RESIHP__JOB_MAX_BUFS);
    return RESIHP_EINVAL;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (!bufs[i].data && bufs[i].bytes)
      return RESIHP_EINVAL;
    if (bufs[i].bytes > SIZE_MAX / 2 - total)
      return RESIHP_ERANGE;
    total += bufs[i].bytes;
  }
  if (j->shape_fixed) {
    int same = n == j->nstate;
    for (int i = 0; same && i < n; i++)
      same = bufs[i].bytes == j->state[i].bytes;
    if (!same) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d rank %d: the state's buffers differ from those "
                 "given at join (number or sizes): refused",
                 j->replica, j->lrank);
      return RESIHP_EINVAL;
    }
  }
  resihp_job_buf_t *copy = malloc(sizeof(*copy) * (size_t)(n ? n : 1));
  if (!copy)
    return RESIHP_ENOMEM;
  if (n)
    memcpy(copy, bufs, sizeof(*copy) * (size_t)n);
  free(j->state);
  j->state = copy;
  j->nstate = n;
  j->state_len = total;
  return 0;
}

void resihp__job_shape_digest(const char *text, char out[17]) {
  uint8_t d[RESIHP__SHA256_LEN];
  resihp__sha256_t h;
  resihp__sha256_init(&h);
  resihp__sha256_update(&h, text, strlen(text));
  resihp__sha256_final(&h, d);
  resihp__hex(out, d, 8);
}

void resihp__job_state_shape(const resihp_job_t *j, char out[17]) {
  if (!j->shape_fixed) {
    snprintf(out, 17, "-");
    return;
  }
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "%d", j->nstate);
  for (int i = 0; i < j->nstate; i++)
    resihp__wire_buf_printf(&b, ":%zu", j->state[i].bytes);
  resihp__job_shape_digest(b.err ? "?" : b.s, out);
  resihp__wire_buf_free(&b);
}

static void digest_hex(const void *buf, size_t len, char out[65]) {
  resihp__sha256_t h;
  uint8_t d[RESIHP__SHA256_LEN];
  resihp__sha256_init(&h);
  resihp__sha256_update(&h, buf, len);
  resihp__sha256_final(&h, d);
  resihp__hex(out, d, RESIHP__SHA256_LEN);
}

static double mbps(size_t bytes, int64_t ms) {
  return (double)bytes / 1e6 / ((ms > 0 ? (double)ms : 0.5) / 1000.0);
}

/* The serve thread's connection, made visible to resihp__job_serve_stop
 * (fd >= 0) or taken back before it is closed (fd < 0). */
static int serve_publish(resihp_job_t *j, int fd) {
  pthread_mutex_lock(&j->serve_mu);
  int stopped = fd >= 0 && __atomic_load_n(&j->serve_stop, __ATOMIC_ACQUIRE);
  j->serve_fd = stopped ? -1 : fd;
  pthread_mutex_unlock(&j->serve_mu);
  return stopped;
}

/* Send the snapshot to one replacement's rank at ep. */
static int send_one(resihp_job_t *j, const char *ep, const char *dg) {
  int64_t deadline = resihp__now_ms() + 30000;
  int fd = resihp__wire_dial_stoppable(ep, deadline, &j->serve_stop);
  if (fd < 0)
    return fd;
  if (serve_publish(j, fd)) {
    close(fd);
    return RESIHP_ECLOSED;
  }
  resihp__wire_t w;
  resihp__wire_init(&w, fd);
  char line[256];
  int rc = resihp__wire_auth_client_stoppable(&w, j->secret, j->secret_len,
                                              "state", deadline,
                                              &j->serve_stop);
  if (!rc) {
    snprintf(line, sizeof(line), "STATE step=%ld shard=%d bytes=%zu sha256=%s",
             j->serve_step, j->lrank, j->state_len, dg);
    rc = resihp__wire_send(&w, line, deadline);
  }
  size_t half = j->state_len / 2;
  if (!rc)
    rc = resihp__wire_write(&w, j->snap, half, deadline);
  int f = resihp__job_catchup_fault(j);
  if (!rc && f >= 0) {
    j->inj_fired[f] = 1;
    resihp__job_fire(j, j->inj[f].kind, RESIHP__INJECT_CATCHUP);
  }
  if (!rc)
    rc = resihp__wire_write(&w, j->snap + half, j->state_len - half, deadline);
  /* the tag of the whole transfer: a tampered state is refused */
  const void *parts[1] = {j->snap};
  size_t lens[1] = {j->state_len};
  if (!rc)
    rc = resihp__wire_seal(&w, parts, lens, 1, deadline);
  serve_publish(j, -1);
  resihp__wire_free(&w);
  return rc;
}

/* Sender thread: every entry of serve_to gets the snapshot. */
static void *serve_main(void *arg) {
  resihp_job_t *j = arg;
  char dg[65];
  digest_hex(j->snap, j->state_len, dg);
  char *save = NULL;
  for (char *t = strtok_r(j->serve_to, ",", &save);
       t && !__atomic_load_n(&j->serve_stop, __ATOMIC_ACQUIRE);
       t = strtok_r(NULL, ",", &save)) {
    char *at = strchr(t, '@');
    if (!at)
      continue;
    *at = '\0';
    int64_t t0 = resihp__now_ms();
    int rc = send_one(j, at + 1, dg);
    int64_t ms = resihp__now_ms() - t0;
    if (rc)
      resihp_log(RESIHP_LOG_WARN, "job",
                 "replica %d: catch-up of replica %s shard %d failed (%s)",
                 j->replica, t, j->lrank, resihp_strerror(rc));
    else
      resihp_log(RESIHP_LOG_INFO, "job",
                 "replica %d: sent shard %d (%zu bytes, step-%ld state) to "
                 "replica %s in %lld ms (%.1f MB/s)",
                 j->replica, j->lrank, j->state_len, j->serve_step, t,
                 (long long)ms, mbps(j->state_len, ms));
  }
  __atomic_store_n(&j->serve_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void serve_join(resihp_job_t *j) {
  pthread_join(j->serve_thread, NULL);
  j->serving = 0;
  free(j->snap);
  j->snap = NULL;
}

void resihp__job_serve_reap(resihp_job_t *j) {
  if (j->serving && __atomic_load_n(&j->serve_done, __ATOMIC_ACQUIRE))
    serve_join(j);
}

void resihp__job_serve_stop(resihp_job_t *j) {
  if (!j->serving)
    return;
  __atomic_store_n(&j->serve_stop, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&j->serve_mu);
  if (j->serve_fd >= 0)
    shutdown(j->serve_fd, SHUT_RDWR);
  pthread_mutex_unlock(&j->serve_mu);
  if (!__atomic_load_n(&j->serve_done, __ATOMIC_ACQUIRE))
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d: an earlier catch-up served from here is given up "
               "(its replacement left)",
               j->replica);
  serve_join(j);
}

/* The entries "r.k@ep" of serve whose shard k is this rank's. */
static char *my_entries(const resihp_job_t *j, const char *serve) {
  char *out = calloc(1, strlen(serve) + 1), *copy = strdup(serve);
  char *save = NULL;
  if (!out || !copy) {
    free(out);
    free(copy);
    return NULL;
  }
  size_t off = 0;
  for (char *t = strtok_r(copy, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    int r = -1, k = -1, n = 0;
    if (sscanf(t, "%d.%d@%n", &r, &k, &n) != 2 || n == 0 || k != j->lrank)
      continue;
    off += (size_t)sprintf(out + off, "%s%d@%s", off ? "," : "", r, t + n);
  }
  free(copy);
  if (!off) {
    free(out);
    return NULL;
  }
  return out;
}

void resihp__job_serve_start(resihp_job_t *j, const char *serve, long s) {
  resihp__job_serve_stop(j);
  if (!j->state_len)
    return;
  char *mine = my_entries(j, serve);
  if (!mine)
    return;
  j->snap = malloc(j->state_len);
  if (!j->snap) {
    free(mine);
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: no memory for a copy of the state: not serving",
               j->replica);
    return;
  }
  size_t off = 0;
  for (int i = 0; i < j->nstate; i++) {
    memcpy(j->snap + off, j->state[i].data, j->state[i].bytes);
    off += j->state[i].bytes;
  }
  free(j->serve_to);
  j->serve_to = mine;
  j->serve_step = s - 1;
  j->serve_stop = j->serve_done = 0;
  if (!pthread_create(&j->serve_thread, NULL, serve_main, j))
    j->serving = 1;
}

/* A member died before the state came (maybe the source): give up now
 * rather than hold the survivors' all-reduce up. */
static int source_may_be_gone(resihp_job_t *j) {
  return resihp__job_groups_failed(j);
}

/* Read len bytes into the state buffers from offset off on. */
static int read_into(resihp__wire_t *w, resihp_job_t *j, size_t off, size_t len,
                     int64_t deadline) {
  size_t at = 0;
  for (int i = 0; i < j->nstate && len; i++) {
    size_t b = j->state[i].bytes;
    if (off >= at + b) {
      at += b;
      continue;
    }
    size_t from = off - at, n = b - from < len ? b - from : len;
    int rc =
        resihp__wire_read(w, (uint8_t *)j->state[i].data + from, n, deadline);
    if (rc)
      return rc;
    off += n;
    len -= n;
    at += b;
  }
  return 0;
}

/* An offer of another step than the one wanted: refused, the wait goes
 * on. */
#define STALE_OFFER 1

/* One offer on an authenticated connection: 0 (received and checked),
 * STALE_OFFER, or an error. */
/* An offer: "STATE step=... shard=... bytes=... sha256=...". */
#define OFFER_MAX 255

static int receive_offer(resihp_job_t *j, resihp__wire_t *w, const char *line,
                         long want, int64_t deadline) {
  char dg[80], got[65];
  long bytes = -1, step = -1, shard = -1;
  int rc = 0;
  if ((resihp__wire_get_long(line, "bytes", &bytes) ||
              resihp__wire_get_long(line, "step", &step) ||
              resihp__wire_get_long(line, "shard", &shard) ||
              resihp__wire_get(line, "sha256", dg, sizeof(dg))))
    rc = RESIHP_EPROTO;
  if (!rc && step != want) {
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d rank %d: an offer of the state of step %ld, not "
               "%ld (a source still serving an earlier catch-up): refused",
               j->replica, j->lrank, step, want);
    return STALE_OFFER;
  }
  if (!rc &&
      (shard != j->lrank || bytes < 0 || (size_t)bytes != j->state_len)) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: the state offered (shard %ld, %ld bytes) "
               "is not this rank's (shard %d, %zu bytes): refused",
               j->replica, j->lrank, shard, bytes, j->lrank, j->state_len);
    rc = RESIHP_EPROTO;
  }
  size_t half = j->state_len / 2;
  if (!rc)
    rc = read_into(w, j, 0, half, deadline);
  int f = resihp__job_catchup_fault(j);
  if (!rc && f >= 0) {
    j->inj_fired[f] = 1;
    resihp__job_fire(j, j->inj[f].kind, RESIHP__INJECT_CATCHUP);
  }
  if (!rc)
    rc = read_into(w, j, half, j->state_len - half, deadline);
  const void **parts = malloc(sizeof(void *) * (size_t)(j->nstate + 1));
  size_t *lens = malloc(sizeof(size_t) * (size_t)(j->nstate + 1));
  if (!rc && (!parts || !lens))
    rc = RESIHP_ENOMEM;
  resihp__sha256_t h;
  resihp__sha256_init(&h);
  for (int i = 0; !rc && i < j->nstate; i++) {
    parts[i] = j->state[i].data;
    lens[i] = j->state[i].bytes;
    resihp__sha256_update(&h, j->state[i].data, j->state[i].bytes);
  }
  if (!rc && (rc = resihp__wire_unseal(w, parts, lens, j->nstate, deadline)))
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: the state received failed its integrity check "
               "(%s): refused",
               j->replica, resihp_strerror(rc));
  free(parts);
  free(lens);
  if (!rc) {
    uint8_t d[RESIHP__SHA256_LEN];
    resihp__sha256_final(&h, d);
    resihp__hex(got, d, RESIHP__SHA256_LEN);
    if (strcmp(got, dg))
      rc = RESIHP_EPROTO;
  }
  return rc;
}

int resihp__job_receive_state(resihp_job_t *j, long step) {
  int64_t t0 = resihp__now_ms(), deadline = t0 + 30000;
  int rc = j->shs ? 0
                  : resihp__wire_hs_create(j->secret, j->secret_len, "state",
                                           RESIHP__JOB_HS_PENDING,
                                           RESIHP__JOB_HS_TIMEOUT_MS, &j->shs);
  if (!rc && !j->slobby)
    rc = resihp__lobby_create(RESIHP__JOB_LOBBY, RESIHP__JOB_FIRST_LINE_MS,
                              OFFER_MAX, &j->slobby);
  for (;;) {
    resihp__wire_t w;
    char line[OFFER_MAX + 1];
    /* a source gone before its offer was a source given up: the lobby
     * drops it, and the next one is waited for */
    if (rc || (rc = resihp__job_accept_authed(j, j->shs, j->slobby, j->slfd,
                                              deadline, source_may_be_gone,
                                              &w, line, sizeof(line))))
      return rc;
    rc = receive_offer(j, &w, line, step, deadline);
    resihp__wire_free(&w);
    if (rc != STALE_OFFER)
      break;
    rc = 0;
  }
  if (!rc) {
    int64_t ms = resihp__now_ms() - t0;
    j->catchup_ms = ms;
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d: caught up shard %d with the state of step %ld "
               "(%zu bytes in %lld ms, %.1f MB/s, digest checked)",
               j->replica, j->lrank, step, j->state_len, (long long)ms,
               mbps(j->state_len, ms));
  }
  return rc;
}

void resihp__job_receive_reset(resihp_job_t *j) {
  resihp__wire_hs_destroy(j->shs);
  j->shs = NULL;
  resihp__lobby_destroy(j->slobby);
  j->slobby = NULL;
  for (int fd; j->slfd >= 0 && (fd = accept(j->slfd, NULL, NULL)) >= 0;)
    close(fd);
}
