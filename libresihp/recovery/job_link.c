/* SPDX-License-Identifier: BSD-3-Clause */
/* The leader's coordinator link and its failover (see job_internal.h and
 * the protocol in control/coordinator.h).
 *
 * A coordinator can die and come back (the keeper forks a new one from its
 * last state record, on the same listening socket), or a standby on
 * another node takes over on its own address (job_coords.c). A leader
 * whose link fails (EOF, an error, or silence past the timeout) therefore
 * does not leave: it connects again, to each address in turn, until
 * RESIHP_FAILOVER_MS has passed, says its
 * HELLO line again with " again=1 epoch=E step=S", and, if it was waiting
 * for an answer, says its pending request again: the coordinator answers
 * requests idempotently, so the answer it missed comes (again).
 *
 * Threads. The main thread alone reads the link, so it alone replaces it
 * (a reader must never find its link swapped underneath). The heartbeat
 * thread ignores a failed send (the main path notices the same failure);
 * the relay thread, whose FAULT/PERF/ABORT must not be lost, waits for the
 * main thread's new link (gen changes) and sends on that. Writes are
 * serialised by send_mu as before; the swap happens under it. */
#include "config.h"

#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* One try must not eat the window: a coordinator that is not there yet
 * refuses at once, one that is restoring answers within these bounds. */
#define TRY_DIAL_MS 1000
#define TRY_AUTH_MS 2000
#define TRY_WELCOME_MS 5000
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 500

int resihp__job_parse_failover(const char *v, int *ms) {
  if (!v || !*v) {
    *ms = RESIHP__JOB_FAILOVER_MS;
    return 0;
  }
  long x = 0;
  for (const char *p = v; *p; p++) {
    if (*p < '0' || *p > '9' || x > RESIHP__JOB_FAILOVER_MAX_MS) {
      x = -1;
      break;
    }
    x = x * 10 + (*p - '0');
  }
  if (x < 0 || x > RESIHP__JOB_FAILOVER_MAX_MS) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "RESIHP_FAILOVER_MS='%.32s': expected a number of "
               "milliseconds from 0 to %d (how long a replica waits for a "
               "new coordinator); unset it for the default %d",
               v, RESIHP__JOB_FAILOVER_MAX_MS, RESIHP__JOB_FAILOVER_MS);
    return RESIHP_EINVAL;
  }
  *ms = (int)x;
  return 0;
}

/* The requests whose answer a new coordinator gives again. */
static int is_request(const char *line) {
  static const char *const kinds[] = {"HELLO ",         "BEGIN ",   "READY ",
                                      "RESYNC ",        "RECOVER ", "SAVED ",
                                      "CATCHUP_FAILED", "FINISH ",  "WL "};
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (!strncmp(line, kinds[i], strlen(kinds[i])))
      return 1;
  return 0;
}

/* Failures of the link, as opposed to a line we must not send. */
static int link_failure(int rc) {
  return rc && rc != RESIHP_ERANGE && rc != RESIHP_ENOMEM &&
         rc != RESIHP_EINVAL;
}

static int on_main_thread(const resihp_job_t *j) {
  return pthread_equal(pthread_self(), j->main_thread);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR)
    ;
}

void resihp__job_say_no(const resihp_job_t *j, const char *no) {
  if (!strcmp(no, "NO reason=retired"))
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: this process was retired by the job (swapped for "
               "a spare, or failed): it leaves, its replacement goes on",
               j->replica);
  else
    resihp_log(RESIHP_LOG_ERROR, "job", "replica %d: the coordinator says %s",
               j->replica, no);
}

/* One try at the address in turn: connect, authenticate, HELLO again=1,
 * WELCOME. 0 with *nw up; RESIHP_ESTATE when the coordinator refused (NO:
 * final); RESIHP_ENOENT when nobody listens there; else transient. */
static int try_once(resihp_job_t *j, int64_t deadline, resihp__wire_t *nw) {
  int64_t now = resihp__now_ms();
  int64_t dl = now + TRY_DIAL_MS < deadline ? now + TRY_DIAL_MS : deadline;
  errno = 0;
  int fd = resihp__wire_dial(resihp__job_coord_ep(j), dl);
  if (fd < 0 && errno == ECONNREFUSED)
    return RESIHP_ENOENT;
  if (fd < 0)
    return fd;
  resihp__wire_init(nw, fd);
  int rc = resihp__wire_auth_client(nw, j->secret, j->secret_len, "coord",
                                    resihp__now_ms() + TRY_AUTH_MS);
  char *line = NULL;
  if (!rc && !(line = malloc(RESIHP__JOB_MSG_MAX)))
    rc = RESIHP_ENOMEM;
  if (!rc) {
    /* step: the last one this replica started (0 before any) */
    snprintf(line, RESIHP__JOB_MSG_MAX,
             "%s again=1 epoch=%u step=%ld cred=%s term=%" PRIu32, j->hello,
             j->epoch, j->step < 0 ? 0 : j->step, j->cred[0] ? j->cred : "-",
             j->min_term > j->term ? j->min_term : j->term);
    rc = resihp__wire_send(nw, line, resihp__now_ms() + TRY_AUTH_MS);
  }
  int64_t wdl = resihp__now_ms() + TRY_WELCOME_MS;
  uint32_t was_min = j->min_term;
  long term = 0;
  while (!rc && !(rc = resihp__wire_recv(nw, j->msg, RESIHP__JOB_MSG_MAX, wdl))) {
    if (!strcmp(j->msg, "HB"))
      continue;
    if (strncmp(j->msg, "VOUCHED ", 8))
      break;
    /* a standby that follows nobody counted this as our word that the
     * primary is lost (control/vouch.h): from now on no coordinator of
     * an older term is obeyed; wait here for its takeover or release */
    if (resihp__wire_get_range(j->msg, "term", 1, UINT32_MAX - 1, &term) ||
        (uint32_t)term <= j->term) {
      rc = RESIHP_EPROTO;
      break;
    }
    if ((uint32_t)term > j->min_term)
      j->min_term = (uint32_t)term;
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: vouched for the standby's takeover (term %ld): "
               "no coordinator of an older term is obeyed from now on",
               j->replica, term);
    wdl = deadline;
  }
  if (!rc && !strcmp(j->msg, "RELEASED")) {
    /* the standby follows the primary again: it never takes over with
     * our word, which we take back */
    j->min_term = was_min;
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d: the standby follows the primary again: back to "
               "it",
               j->replica);
    rc = RESIHP_EBUSY;
  } else if (!rc && !strncmp(j->msg, "NO", 2)) {
    resihp__job_say_no(j, j->msg);
    rc = RESIHP_ESTATE;
  } else if (!rc && (term = 0,
                     resihp__wire_get_range(j->msg, "term", 0, UINT32_MAX - 1,
                                            &term) == RESIHP_EPROTO ||
                         (uint32_t)term < j->min_term ||
                         (uint32_t)term < j->term)) {
    /* an old coordinator (a primary that was stopped or cut off while a
     * standby took over): never obeyed again */
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: a coordinator of term %ld answered, older than "
               "term %" PRIu32 ": refused",
               j->replica, term,
               j->min_term > j->term ? j->min_term : j->term);
    rc = RESIHP_EEPOCH;
  } else if (!rc && resihp__job_welcome(j, j->msg)) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: the new coordinator answered '%.60s' to HELLO",
               j->replica, j->msg);
    rc = RESIHP_EPROTO;
  }
  free(line);
  if (rc)
    resihp__wire_free(nw);
  return rc;
}

/* The main thread: replace the link. */
static int reconnect_main(resihp_job_t *j, int why) {
  int64_t t0 = resihp__now_ms(), deadline = t0 + j->failover_ms;
  resihp_log(RESIHP_LOG_WARN, "job",
             "replica %d: lost the coordinator at step %ld epoch %u (%s); "
             "connecting again for up to %d ms",
             j->replica, j->step, j->epoch, resihp_strerror(why),
             j->failover_ms);
  pthread_mutex_lock(&j->send_mu);
  resihp__wire_free(&j->cw); /* the old link: nothing more is read from it */
  resihp__wire_init(&j->cw, -1);
  pthread_mutex_unlock(&j->send_mu);
  resihp__wire_t nw;
  int rc = RESIHP_ETIMEDOUT, backoff = BACKOFF_MIN_MS, tries = 0, refused = 0;
  while (resihp__now_ms() < deadline) {
    tries++;
    if (!(rc = try_once(j, deadline, &nw)) || rc == RESIHP_ESTATE ||
        rc == RESIHP_ENOMEM || rc == RESIHP_EPROTO)
      break;
    /* Refused: nobody listens there. The keeper holds the coordinator's
     * socket across failovers and a standby listens from its start, so
     * when every address refuses in a row, resihp-run itself is gone: no
     * coordinator will come back (final). */
    refused = rc == RESIHP_ENOENT ? refused + 1 : 0;
    if (refused >= j->ncoords)
      break;
    resihp__job_coord_next(j);
    if (refused) /* the next address at once */
      continue;
    int64_t left = deadline - resihp__now_ms();
    if (left <= 0)
      break;
    sleep_ms(backoff < left ? backoff : (int)left);
    backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
  }
  pthread_mutex_lock(&j->send_mu);
  if (!rc) {
    j->cw = nw;
    j->heard_ms = resihp__now_ms();
    /* the new coordinator may lack owners PROG carried: all again */
    j->olog_sent = 0;
  } else {
    j->lost = rc;
  }
  j->gen++;
  pthread_cond_broadcast(&j->link_cv);
  pthread_mutex_unlock(&j->send_mu);
  if (rc)
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: no coordinator came back within %d ms (%d tries, "
               "last: %s); resihp-run has probably ended",
               j->replica, j->failover_ms, tries, resihp_strerror(rc));
  else
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: coordinator back after %lld ms (%d tries): %.80s",
               j->replica, (long long)(resihp__now_ms() - t0), tries, j->msg);
  return rc;
}

/* Another thread: wait for the main thread's new link (it notices the
 * same failure when it next reads or, in a free run, at the next
 * boundary), i.e. for the generation to move past g. */
static int wait_new_link(resihp_job_t *j, unsigned long g, int why) {
  pthread_mutex_lock(&j->send_mu);
  struct timespec ts = resihp__realtime_in(j->failover_ms + TRY_WELCOME_MS);
  while (j->gen == g && !j->lost)
    if (pthread_cond_timedwait(&j->link_cv, &j->send_mu, &ts) == ETIMEDOUT)
      break;
  int rc = j->lost ? j->lost : j->gen != g ? 0 : why;
  pthread_mutex_unlock(&j->send_mu);
  return rc;
}

void resihp__job_hang_up(resihp_job_t *j) {
  pthread_mutex_lock(&j->send_mu);
  if (!j->lost) {
    j->lost = RESIHP_EPEER;
    if (j->cw.fd >= 0)
      shutdown(j->cw.fd, SHUT_RDWR); /* the descriptor stays: no reuse */
  }
  pthread_cond_broadcast(&j->link_cv);
  pthread_mutex_unlock(&j->send_mu);
}

int resihp__job_reconnect(resihp_job_t *j, int why) {
  if (!j->hello || !on_main_thread(j)) /* a failure at join stays final */
    return why;
  return j->lost ? j->lost : reconnect_main(j, why);
}

/* One send on the current link (a closed one, -1, fails as such); *g:
 * the generation of the link it went to. */
static int send_now(resihp_job_t *j, const char *line, unsigned long *g) {
  pthread_mutex_lock(&j->send_mu);
  *g = j->gen;
  int rc = j->lost        ? j->lost
           : j->cw.fd < 0 ? RESIHP_ECLOSED
                          : resihp__wire_send(&j->cw, line,
                                              resihp__now_ms() + j->timeout_ms);
  if (rc && link_failure(rc) && !j->lost && j->cw.fd >= 0 && !on_main_thread(j))
    /* the main thread is perhaps reading: make it notice now */
    shutdown(j->cw.fd, SHUT_RDWR);
  pthread_mutex_unlock(&j->send_mu);
  return rc;
}

int resihp__job_send(resihp_job_t *j, const char *line) {
  if (on_main_thread(j) && is_request(line)) {
    size_t n = strlen(line) + 1;
    char *p = realloc(j->pending, n);
    if (!p)
      return RESIHP_ENOMEM;
    memcpy(p, line, n);
    j->pending = p;
  }
  int rc;
  unsigned long g;
  while ((rc = send_now(j, line, &g)) && link_failure(rc) && j->hello &&
         !(rc = on_main_thread(j) ? resihp__job_reconnect(j, rc)
                                  : wait_new_link(j, g, rc)))
    ;
  if (rc)
    resihp_log(RESIHP_LOG_ERROR, "job", "replica %d: lost the coordinator (%s)",
               j->replica, resihp_strerror(rc));
  return rc;
}

int resihp__job_send_last(resihp_job_t *j, const char *line) {
  pthread_mutex_lock(&j->send_mu);
  int rc = j->lost && j->lost != RESIHP_ECLOSED ? j->lost
           : j->cw.fd < 0                       ? RESIHP_ECLOSED
                                                : resihp__wire_send(&j->cw, line,
                                                    resihp__now_ms() + 1000);
  pthread_mutex_unlock(&j->send_mu);
  return rc;
}

/* After a reconnect: the request the old coordinator may not have
 * answered goes to the new one (a HELLO was said again by the reconnect
 * itself). */
static int resend_pending(resihp_job_t *j) {
  unsigned long g;
  if (!j->pending || !strncmp(j->pending, "HELLO ", 6))
    return 0;
  return send_now(j, j->pending, &g);
}

int resihp__job_recv(resihp_job_t *j) {
  for (;;) {
    int rc = resihp__job_take_stash(j) ? 0
             : j->lost                  ? j->lost
             : j->cw.fd < 0
                 ? RESIHP_ECLOSED
                 : resihp__wire_recv(&j->cw, j->msg, RESIHP__JOB_MSG_MAX,
                                     resihp__now_ms() + j->timeout_ms);
    if (rc && link_failure(rc) && !j->lost && j->hello && on_main_thread(j)) {
      /* a new link, the pending request again, and wait on */
      if (!(rc = resihp__job_reconnect(j, rc))) {
        rc = resend_pending(j);
        if (!rc || link_failure(rc))
          continue; /* wait on (a failed re-send: the next read fails) */
      }
    }
    if (rc) {
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d: lost the coordinator (%s); resihp-run has "
                 "probably ended",
                 j->replica, resihp_strerror(rc));
      return rc;
    }
    j->heard_ms = resihp__now_ms();
    if (!strcmp(j->msg, "HB"))
      continue;
    if (!strncmp(j->msg, "COORDS ", 7)) {
      resihp__job_on_coords(j, j->msg);
      continue;
    }
    if (!strncmp(j->msg, "NO", 2)) {
      resihp__job_say_no(j, j->msg);
      return RESIHP_ESTATE;
    }
    return 0;
  }
}
