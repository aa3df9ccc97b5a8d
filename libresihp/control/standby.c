/* SPDX-License-Identifier: BSD-3-Clause */
/* The standby's feed (see standby.h). */
#include "config.h"

#include "standby.h"

#include "../transport/mesh.h"
#include "../transport/sha256.h"
#include "lobby.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LABEL "standby"
/* Handshakes in progress: strangers are never waited for (wire.h). */
#define HS_PENDING 8
#define HS_TIMEOUT_MS 3000
/* A hello must follow the handshake at once; a record must go within. */
#define HELLO_MS 2000
#define SEND_MS 10000
#define FIELD_MAX 64
/* Authenticated connections waiting for their hello, and its length. */
#define HELLO_PENDING 8
#define HELLO_LINE_MAX 255

struct resihp__feed {
  int lfd;
  resihp__wire_hs_t *hs;
  pthread_t thread;
  int started;
  int wake[2]; /* a new record, BYE or stop: the thread looks */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* BYE went out */
  /* under mu: the newest record and its number, what was asked */
  char *rec;
  size_t len;
  unsigned long seq, sent; /* sent: to the standby connected now */
  int stop, bye, bye_done;
  /* under mu: the standby connected now */
  int have;
  unsigned gen;
  char ep[FIELD_MAX], node[FIELD_MAX], step[FIELD_MAX];
  char expect[FIELD_MAX]; /* the node of the standby wanted ("": any) */
  char token[FIELD_MAX];  /* the token it must say ("": none asked) */
  /* under mu: when the standby connected now last said anything (its
   * HB: it still follows, so it does not take over; 0: none) */
  int64_t heard_ms;
  /* the feed thread's: authenticated, hello not yet read (one that says
   * nothing holds neither the thread nor the standby after it) */
  resihp__lobby_t *lobby;
};

int resihp__feed_parse_rec(const char *line, size_t *n) {
  long v;
  if (strncmp(line, "REC ", 4) ||
      resihp__wire_get_range(line, "n", 0, RESIHP__FEED_REC_MAX, &v))
    return RESIHP_EPROTO;
  *n = (size_t)v;
  return 0;
}

int resihp__feed_parse_hello(const char *line, char *ep, size_t epcap,
                             char *node, size_t nodecap, char *step,
                             size_t stepcap) {
  int rc;
  if (strncmp(line, "STANDBY ", 8) || resihp__wire_get(line, "ep", ep, epcap) ||
      resihp__wire_get(line, "node", node, nodecap) ||
      !resihp__wire_token_ok(ep, epcap) || !strchr(ep, ':') ||
      !resihp__wire_token_ok(node, nodecap))
    return RESIHP_EPROTO;
  if ((rc = resihp__wire_get(line, "step", step, stepcap)) == RESIHP_ENOENT &&
      stepcap > 1)
    snprintf(step, stepcap, "-");
  else if (rc || !resihp__wire_token_ok(step, stepcap))
    return RESIHP_EPROTO;
  return 0;
}

int resihp__feed_token_ok(const char *line, const char *want) {
  if (!want || !want[0])
    return 1;
  char got[FIELD_MAX] = "";
  size_t n = strlen(want);
  return !resihp__wire_get(line, "token", got, sizeof(got)) &&
         strlen(got) == n && !resihp__ct_memcmp(got, want, n);
}

static void poke(resihp__feed_t *f) {
  char b = 1;
  if (write(f->wake[1], &b, 1) < 0) {
    /* full: the thread has a wake-up pending anyway */
  }
}

/* The standby now connected, or none (ep NULL). */
static void set_standby(resihp__feed_t *f, const char *ep, const char *node,
                        const char *step) {
  pthread_mutex_lock(&f->mu);
  f->have = ep != NULL;
  f->sent = 0;
  f->heard_ms = ep ? resihp__now_ms() : 0;
  snprintf(f->ep, sizeof(f->ep), "%s", ep ? ep : "");
  snprintf(f->node, sizeof(f->node), "%s", node ? node : "");
  snprintf(f->step, sizeof(f->step), "%s", step ? step : "");
  f->gen++;
  pthread_mutex_unlock(&f->mu);
}

static void drop(resihp__feed_t *f, resihp__wire_t *w, const char *why) {
  if (w->fd < 0)
    return;
  resihp_log(RESIHP_LOG_WARN, "feed", "the standby at %s is gone (%s)", f->ep,
             why);
  resihp__wire_free(w);
  resihp__wire_init(w, -1);
  set_standby(f, NULL, NULL, NULL);
}

/* A new connection whose handshake is done and whose hello is line: it
 * is the standby now (the one before is dropped), or it is refused. */
static void take(resihp__feed_t *f, const char *line, resihp__wire_t *nw,
                 resihp__wire_t *w) {
  char ep[FIELD_MAX], node[FIELD_MAX], step[FIELD_MAX];
  if (resihp__feed_parse_hello(line, ep, sizeof(ep), node, sizeof(node), step,
                               sizeof(step))) {
    resihp__wire_free(nw);
    return;
  }
  pthread_mutex_lock(&f->mu);
  int wanted = !f->expect[0] || !strcmp(f->expect, node);
  int genuine = resihp__feed_token_ok(line, f->token);
  pthread_mutex_unlock(&f->mu);
  if (!wanted) { /* an old standby: its successor stays */
    resihp__wire_free(nw);
    return;
  }
  if (!genuine) { /* not the one the primary launched */
    resihp_log(RESIHP_LOG_WARN, "feed",
               "a standby on node %s without the token of the one launched "
               "there: refused",
               node);
    resihp__wire_free(nw);
    return;
  }
  if (w->fd >= 0)
    drop(f, w, "another standby took its place");
  *w = *nw;
  set_standby(f, ep, node, step); /* sent nothing yet: the newest at once */
  resihp_log(RESIHP_LOG_INFO, "feed", "standby at %s on node %s", ep, node);
}

/* The newest record, if the standby does not have it yet (a copy taken
 * under the lock). */
static int send_record(resihp__feed_t *f, resihp__wire_t *w) {
  pthread_mutex_lock(&f->mu);
  unsigned long seq = f->seq;
  size_t len = f->len;
  char *copy = seq != f->sent && f->rec ? malloc(len ? len : 1) : NULL;
  if (copy)
    memcpy(copy, f->rec, len);
  pthread_mutex_unlock(&f->mu);
  if (!copy)
    return 0;
  char head[64];
  snprintf(head, sizeof(head), "REC n=%zu", len);
  int64_t dl = resihp__now_ms() + SEND_MS;
  int rc = resihp__wire_send(w, head, dl);
  if (!rc)
    rc = resihp__wire_send_data(w, copy, len, dl);
  free(copy);
  if (!rc) {
    pthread_mutex_lock(&f->mu);
    f->sent = seq;
    pthread_mutex_unlock(&f->mu);
  }
  return rc;
}

static void *feed_main(void *arg) {
  resihp__feed_t *f = arg;
  resihp__wire_t w, nw;
  resihp__wire_init(&w, -1);
  int64_t next_beat = 0;
  for (;;) {
    pthread_mutex_lock(&f->mu);
    int stop = f->stop, bye = f->bye && !f->bye_done;
    pthread_mutex_unlock(&f->mu);
    if (stop)
      break;
    if (bye) { /* the newest record first: the state at the end */
      if (w.fd >= 0 && !send_record(f, &w))
        resihp__wire_send(&w, "BYE", resihp__now_ms() + HELLO_MS);
      drop(f, &w, "the job is over");
      pthread_mutex_lock(&f->mu);
      f->bye_done = 1;
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
    }
    if (w.fd >= 0 && !f->bye_done) {
      int rc = send_record(f, &w);
      if (!rc && resihp__now_ms() >= next_beat) {
        rc = resihp__wire_send(&w, "HB", resihp__now_ms() + HELLO_MS);
        next_beat = resihp__now_ms() + RESIHP__FEED_BEAT_MS;
      }
      if (rc)
        drop(f, &w, resihp_strerror(rc));
    }
    struct pollfd p[4 + HELLO_PENDING] = {{f->lfd, POLLIN, 0},
                                          {resihp__wire_hs_fd(f->hs), POLLIN, 0},
                                          {f->wake[0], POLLIN, 0},
                                          {w.fd, POLLIN, 0}};
    int np = 4 + resihp__lobby_fds(f->lobby, p + 4);
    /* w.fd < 0 is skipped by poll */
    poll(p, (nfds_t)np,
         resihp__lobby_wait_ms(
             f->lobby,
             resihp__wire_hs_wait_ms(f->hs, RESIHP__FEED_BEAT_MS / 2)));
    if (p[0].revents)
      resihp__wire_hs_accept(f->hs, f->lfd);
    resihp__wire_init(&nw, -1);
    while (resihp__wire_hs_next(f->hs, &nw) == 1) {
      if (f->bye_done)
        resihp__wire_free(&nw); /* the job is over: nobody to follow */
      else
        resihp__lobby_add(f->lobby, &nw);
      resihp__wire_init(&nw, -1);
    }
    char hello[HELLO_LINE_MAX + 1];
    while (resihp__lobby_next(f->lobby, &nw, hello, sizeof(hello)) == 1) {
      if (f->bye_done)
        resihp__wire_free(&nw);
      else
        take(f, hello, &nw, &w);
    }
    char b[64];
    while (read(f->wake[0], b, sizeof(b)) > 0)
      ;
    /* the standby says only HB after its hello (it still follows: the
     * primary's lease, vouch.h); anything else, or the input's end, is
     * its end */
    if (w.fd >= 0 && p[3].revents) {
      int rc = resihp__wire_fill(&w), t;
      char l[16];
      while (rc >= 0 && (t = resihp__wire_take(&w, l, sizeof(l)))) {
        if (t < 0 || strcmp(l, "HB")) {
          rc = RESIHP_EPROTO;
          break;
        }
        pthread_mutex_lock(&f->mu);
        f->heard_ms = resihp__now_ms();
        pthread_mutex_unlock(&f->mu);
      }
      if (rc < 0)
        drop(f, &w,
             rc == RESIHP_EPROTO ? "it spoke out of turn" : resihp_strerror(rc));
    }
  }
  resihp__wire_free(&w);
  return NULL;
}

int resihp__feed_start(int lfd, const uint8_t *secret, size_t secret_len,
                       resihp__feed_t **out) {
  resihp__feed_t *f = calloc(1, sizeof(*f));
  if (!f)
    return RESIHP_ENOMEM;
  f->lfd = lfd;
  f->wake[0] = f->wake[1] = -1;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  int rc = resihp__wire_hs_create(secret, secret_len, LABEL, HS_PENDING,
                                  HS_TIMEOUT_MS, &f->hs);
  if (!rc)
    rc = resihp__lobby_create(HELLO_PENDING, HELLO_MS, HELLO_LINE_MAX,
                              &f->lobby);
  if (!rc && pipe2(f->wake, O_CLOEXEC | O_NONBLOCK))
    rc = RESIHP_ESYS;
  if (!rc && pthread_create(&f->thread, NULL, feed_main, f))
    rc = RESIHP_ESYS;
  f->started = !rc;
  if (rc) {
    resihp__feed_stop(f);
    return rc;
  }
  *out = f;
  return 0;
}

unsigned long resihp__feed_put(resihp__feed_t *f, const void *rec,
                               size_t len) {
  if (!f)
    return 0;
  char *copy = malloc(len ? len : 1);
  if (!copy)
    return 0; /* the one before stays: a standby restores from it */
  memcpy(copy, rec, len);
  pthread_mutex_lock(&f->mu);
  free(f->rec);
  f->rec = copy;
  f->len = len;
  unsigned long seq = ++f->seq;
  pthread_mutex_unlock(&f->mu);
  poke(f);
  return seq;
}

int resihp__feed_sent(resihp__feed_t *f, unsigned long seq) {
  pthread_mutex_lock(&f->mu);
  int done = f->have && f->sent >= seq;
  pthread_mutex_unlock(&f->mu);
  return done;
}

void resihp__feed_expect(resihp__feed_t *f, const char *node,
                         const char *token) {
  if (!f)
    return;
  pthread_mutex_lock(&f->mu);
  snprintf(f->expect, sizeof(f->expect), "%s", node ? node : "");
  snprintf(f->token, sizeof(f->token), "%s", token ? token : "");
  pthread_mutex_unlock(&f->mu);
}

int resihp__feed_standby(resihp__feed_t *f, char *ep, size_t epcap, char *node,
                         size_t nodecap, char *step, size_t stepcap,
                         unsigned *gen) {
  if (!f)
    return 0;
  pthread_mutex_lock(&f->mu);
  int have = f->have;
  if (ep)
    snprintf(ep, epcap, "%s", f->ep);
  if (node)
    snprintf(node, nodecap, "%s", f->node);
  if (step)
    snprintf(step, stepcap, "%s", f->step);
  if (gen)
    *gen = f->gen;
  pthread_mutex_unlock(&f->mu);
  return have;
}

int64_t resihp__feed_heard_ms(resihp__feed_t *f) {
  if (!f)
    return 0;
  pthread_mutex_lock(&f->mu);
  int64_t t = f->have ? f->heard_ms : 0;
  pthread_mutex_unlock(&f->mu);
  return t;
}

void resihp__feed_bye(resihp__feed_t *f, int wait_ms) {
  if (!f || !f->started)
    return;
  pthread_mutex_lock(&f->mu);
  f->bye = 1;
  pthread_mutex_unlock(&f->mu);
  poke(f);
  pthread_mutex_lock(&f->mu);
  struct timespec ts = resihp__realtime_in(wait_ms);
  while (!f->bye_done)
    if (pthread_cond_timedwait(&f->cv, &f->mu, &ts))
      break;
  pthread_mutex_unlock(&f->mu);
}

void resihp__feed_stop(resihp__feed_t *f) {
  if (!f)
    return;
  if (f->started) {
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_mutex_unlock(&f->mu);
    poke(f);
    pthread_join(f->thread, NULL);
  }
  resihp__wire_hs_destroy(f->hs);
  resihp__lobby_destroy(f->lobby);
  for (int i = 0; i < 2; i++)
    if (f->wake[i] >= 0)
      close(f->wake[i]);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f->rec);
  free(f);
}

int resihp__feed_follow(const char *ep, const uint8_t *secret,
                        size_t secret_len, const char *hello, int silence_ms,
                        char **rec, size_t *len,
                        void (*tick)(void *ud, int heard), void *ud) {
  int fd = resihp__wire_dial(ep, resihp__now_ms() + HELLO_MS);
  if (fd < 0)
    return fd;
  resihp__wire_t w;
  resihp__wire_init(&w, fd);
  int rc = resihp__wire_auth_client(&w, secret, secret_len, LABEL,
                                    resihp__now_ms() + HS_TIMEOUT_MS);
  if (!rc)
    rc = resihp__wire_send(&w, hello, resihp__now_ms() + HELLO_MS);
  char line[128];
  int64_t heard = resihp__now_ms(), beat = 0;
  while (!rc) {
    /* our HB every beat while we follow: the primary's lease */
    int64_t now = resihp__now_ms();
    if (now >= beat) {
      rc = resihp__wire_send(&w, "HB", now + HELLO_MS);
      beat = now + RESIHP__FEED_BEAT_MS;
      if (rc)
        break;
    }
    int64_t dl = heard + silence_ms < beat ? heard + silence_ms : beat;
    rc = resihp__wire_recv(&w, line, sizeof(line), dl);
    if (tick)
      tick(ud, !rc);
    if (rc == RESIHP_ETIMEDOUT && resihp__now_ms() < heard + silence_ms) {
      rc = 0; /* only time for our beat */
      continue;
    }
    size_t n;
    if (!rc)
      heard = resihp__now_ms();
    if (rc || !strcmp(line, "HB"))
      continue;
    if (!strcmp(line, "BYE")) {
      rc = 1;
      break;
    }
    if (resihp__feed_parse_rec(line, &n)) {
      rc = RESIHP_EPROTO;
      break;
    }
    char *buf = malloc(n ? n : 1);
    if (!buf) {
      rc = RESIHP_ENOMEM;
      break;
    }
    /* a record cut by the primary's death is no record */
    if ((rc = resihp__wire_recv_data(&w, buf, n,
                                     resihp__now_ms() + SEND_MS + silence_ms))) {
      free(buf);
      break;
    }
    free(*rec);
    *rec = buf;
    *len = n;
  }
  resihp__wire_free(&w);
  return rc;
}
