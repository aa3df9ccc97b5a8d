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
  free(j->lstate_off);
  j->lstate_off = NULL;
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
  free(j->lstate_off); /* an opaque list again (job_layer_state.c) */
  j->lstate_off = NULL;
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

/* Send a piece of the snapshot (bytes [off, off + len): the whole state
 * or a piece of it, job_layer_state.c) to rank k of a replacement at ep;
 * what: "" (the whole state), " layers=A-B" or " rank=1". */
static int send_one(resihp_job_t *j, const char *ep, const char *dg, int k,
                    size_t off, size_t len, const char *what) {
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
    snprintf(line, sizeof(line),
             "STATE step=%ld shard=%d bytes=%zu sha256=%s%s", j->serve_step, k,
             len, dg, what);
    rc = resihp__wire_send(&w, line, deadline);
  }
  const uint8_t *from = j->snap + off;
  size_t half = len / 2;
  if (!rc)
    rc = resihp__wire_write(&w, from, half, deadline);
  int f = resihp__job_catchup_fault(j);
  if (!rc && f >= 0) {
    j->inj_fired[f] = 1;
    resihp__job_fire(j, j->inj[f].kind, RESIHP__INJECT_CATCHUP);
  }
  if (!rc)
    rc = resihp__wire_write(&w, from + half, len - half, deadline);
  /* the tag of the whole transfer: a tampered state is refused */
  const void *parts[1] = {from};
  size_t lens[1] = {len};
  if (!rc)
    rc = resihp__wire_seal(&w, parts, lens, 1, deadline);
  serve_publish(j, -1);
  resihp__wire_free(&w);
  return rc;
}

/* Sender thread: every entry of serve_to (my_entries) gets its piece of
 * the snapshot. */
static void *serve_main(void *arg) {
  resihp_job_t *j = arg;
  char dg[65], pdg[65], what[48];
  int whole_dg = 0;
  char *save = NULL;
  for (char *t = strtok_r(j->serve_to, ",", &save);
       t && !__atomic_load_n(&j->serve_stop, __ATOMIC_ACQUIRE);
       t = strtok_r(NULL, ",", &save)) {
    int q, k, a, b;
    const char *ep;
    size_t off, len;
    if (resihp__job_serve_entry_parse(t, &q, &k, &a, &b, &ep) ||
        resihp__job_state_piece(j, a, b, &off, &len))
      continue; /* (my_entries kept only this rank's) */
    if (a == -1 && !whole_dg) {
      digest_hex(j->snap, j->state_len, dg);
      whole_dg = 1;
    } else if (a != -1) {
      digest_hex(j->snap + off, len, pdg);
    }
    if (a == -1)
      what[0] = '\0';
    else if (a == -2)
      snprintf(what, sizeof(what), " rank=1");
    else
      snprintf(what, sizeof(what), " layers=%d-%d", a, b);
    int64_t t0 = resihp__now_ms();
    int rc = send_one(j, ep, a == -1 ? dg : pdg, k, off, len, what);
    int64_t ms = resihp__now_ms() - t0;
    if (rc)
      resihp_log(RESIHP_LOG_WARN, "job",
                 "replica %d: catch-up of replica %d shard %d%s failed (%s)",
                 j->replica, q, k, what, resihp_strerror(rc));
    else
      resihp_log(RESIHP_LOG_INFO, "job",
                 "replica %d: sent shard %d%s (%zu bytes, step-%ld state) to "
                 "replica %d in %lld ms (%.1f MB/s)",
                 j->replica, k, what, len, j->serve_step, q, (long long)ms,
                 mbps(len, ms));
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

/* The entries of serve (resihp__job_serve_entry_parse) that this rank
 * serves: "r.k@ep" and "r.k:r@ep" whose k is this rank's shard,
 * "r.k:A-B@ep" whose layers are this rank's. */
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
    int r, k, a, b;
    const char *ep;
    size_t po, pl;
    if (resihp__job_serve_entry_parse(t, &r, &k, &a, &b, &ep) ||
        (a < 0 ? k != j->lrank : resihp__job_state_piece(j, a, b, &po, &pl)))
      continue;
    off += (size_t)sprintf(out + off, "%s%s", off ? "," : "", t);
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

/* An offer: "STATE step=... shard=... bytes=... sha256=...[ layers=A-B|
 * rank=1]". */
#define OFFER_MAX 255

/* What a catch-up has received: the whole state, or (by layer) which of
 * this rank's layers and whether its own state. */
typedef struct {
  int whole;
  char *layer; /* lstate_count flags; NULL: an opaque state */
  int rank;
} got_t;

static int got_all(const resihp_job_t *j, const got_t *g) {
  if (g->whole)
    return 1;
  if (!g->layer || !g->rank)
    return 0;
  for (int i = 0; i < j->lstate_count; i++)
    if (!g->layer[i])
      return 0;
  return 1;
}

/* The piece an offer line names: a -1 (the whole state), -2 (the rank's
 * own) or layers [a, b); RESIHP_EPROTO when malformed, RESIHP_EINVAL when
 * not a piece of this rank's state or one received already. */
static int offer_piece(const resihp_job_t *j, const char *line,
                       const got_t *g, int *a, int *b, size_t *off,
                       size_t *len) {
  if (resihp__job_offer_piece_parse(line, a, b))
    return RESIHP_EPROTO;
  if (*a != -1 && !g->layer)
    return RESIHP_EINVAL; /* a piece, but this rank's state is opaque */
  if (resihp__job_state_piece(j, *a, *b, off, len))
    return RESIHP_EINVAL;
  if (*a == -2 && g->rank)
    return RESIHP_EINVAL;
  for (int l = *a; *a >= 0 && l < *b; l++)
    if (g->layer[l - j->lstate_first])
      return RESIHP_EINVAL;
  return 0;
}

/* The state buffers' pieces that hold bytes [off, off + len) (all of them
 * for the whole state, as before pieces existed): n, into parts/lens. */
static int range_parts(const resihp_job_t *j, size_t off, size_t len,
                       const void **parts, size_t *lens) {
  int n = 0;
  int whole = off == 0 && len == j->state_len;
  size_t at = 0;
  for (int i = 0; i < j->nstate; at += j->state[i].bytes, i++) {
    size_t bb = j->state[i].bytes;
    size_t lo = off > at ? off : at;
    size_t hi = off + len < at + bb ? off + len : at + bb;
    if (!whole && lo >= hi)
      continue;
    parts[n] = whole ? j->state[i].data : (uint8_t *)j->state[i].data + (lo - at);
    lens[n++] = whole ? bb : hi - lo;
  }
  return n;
}

/* One offer on an authenticated connection: 0 (received and checked, *g
 * updated), STALE_OFFER, or an error. */
static int receive_offer(resihp_job_t *j, resihp__wire_t *w, const char *line,
                         long want, int64_t deadline, got_t *g) {
  char dg[80], got[65];
  long bytes = -1, step = -1, shard = -1;
  int a = -1, b = -1;
  size_t off = 0, len = j->state_len;
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
  int prc = rc ? 0 : offer_piece(j, line, g, &a, &b, &off, &len);
  if (!rc && (prc || shard != j->lrank || bytes < 0 || (size_t)bytes != len)) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: the state offered (shard %ld, %ld bytes, "
               "%s) is not this rank's (shard %d, %zu bytes): refused",
               j->replica, j->lrank, shard, bytes,
               prc == RESIHP_EPROTO ? "a malformed piece"
               : prc                ? "a piece not of its layers or again"
               : a == -1            ? "the whole state"
                                    : "a piece",
               j->lrank, len);
    rc = RESIHP_EPROTO;
  }
  size_t half = len / 2;
  if (!rc)
    rc = read_into(w, j, off, half, deadline);
  int f = resihp__job_catchup_fault(j);
  if (!rc && f >= 0) {
    j->inj_fired[f] = 1;
    resihp__job_fire(j, j->inj[f].kind, RESIHP__INJECT_CATCHUP);
  }
  if (!rc)
    rc = read_into(w, j, off + half, len - half, deadline);
  const void **parts = malloc(sizeof(void *) * (size_t)(j->nstate + 1));
  size_t *lens = malloc(sizeof(size_t) * (size_t)(j->nstate + 1));
  if (!rc && (!parts || !lens))
    rc = RESIHP_ENOMEM;
  int np = rc ? 0 : range_parts(j, off, len, parts, lens);
  resihp__sha256_t h;
  resihp__sha256_init(&h);
  for (int i = 0; !rc && i < np; i++)
    resihp__sha256_update(&h, parts[i], lens[i]);
  if (!rc && (rc = resihp__wire_unseal(w, parts, lens, np, deadline)))
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
  if (!rc && a == -1)
    g->whole = 1;
  else if (!rc && a == -2)
    g->rank = 1;
  else if (!rc)
    memset(g->layer + (a - j->lstate_first), 1, (size_t)(b - a));
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
  /* by layer: the pieces may come from several sources, in any order */
  got_t g = {0};
  if (!rc && j->lstate_off &&
      !(g.layer = calloc((size_t)j->lstate_count + 1, 1)))
    rc = RESIHP_ENOMEM;
  int pieces = 0;
  while (!rc && !got_all(j, &g)) {
    resihp__wire_t w;
    char line[OFFER_MAX + 1];
    /* a source gone before its offer was a source given up: the lobby
     * drops it, and the next one is waited for */
    if ((rc = resihp__job_accept_authed(j, j->shs, j->slobby, j->slfd,
                                        deadline, source_may_be_gone, &w, line,
                                        sizeof(line))))
      break;
    rc = receive_offer(j, &w, line, step, deadline, &g);
    resihp__wire_free(&w);
    if (rc == STALE_OFFER)
      rc = 0;
    else if (!rc)
      pieces++;
  }
  free(g.layer);
  if (!rc) {
    int64_t ms = resihp__now_ms() - t0;
    j->catchup_ms = ms;
    char by[48] = "";
    if (!g.whole)
      snprintf(by, sizeof(by), " by layer, %d pieces", pieces);
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d: caught up shard %d with the state of step %ld "
               "(%zu bytes%s in %lld ms, %.1f MB/s, digest checked)",
               j->replica, j->lrank, step, j->state_len, by, (long long)ms,
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
