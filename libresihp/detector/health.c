/* SPDX-License-Identifier: BSD-3-Clause */
/* One health state per rank, folded from every input the detector has.
 *
 * Fail-stop evidence is counted the way Slurm and PMIx count it: a
 * heartbeat period without a heartbeat is a miss, misses are consecutive
 * (one heartbeat clears them), a few misses make the rank SUSPECT and
 * failed_misses (the detection timeout over the heartbeat period) make it
 * FAILED. A socket error is strong but not conclusive evidence (a
 * connection can be reset by a restarting proxy), so it makes the rank
 * SUSPECT and shortens the wait to suspect_misses; a failed node probe is
 * conclusive. FAILED is sticky: only resihp_detector_reset_rank, called when
 * the rank has been replaced, clears it. The fail-slow verdict (failslow.c)
 * ranks below FAILED and above a mere suspicion.
 */
#include "config.h"

#include "detector-internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>

static const char *const state_names[] = {
    [RESIHP_HEALTH_HEALTHY] = "healthy",
    [RESIHP_HEALTH_SUSPECT] = "suspect",
    [RESIHP_HEALTH_SLOW] = "slow",
    [RESIHP_HEALTH_FAILED] = "failed",
};

const char *resihp_health_state_name(resihp_health_state_t s) {
  return (unsigned)s < sizeof(state_names) / sizeof(state_names[0])
             ? state_names[s]
             : "?";
}

static const char *why_text(unsigned why) {
  if (why & RESIHP_WHY_PROBE)
    return "health probe failed";
  if ((why & RESIHP_WHY_SOCKET) && (why & RESIHP_WHY_HEARTBEAT))
    return "socket error and missed heartbeats";
  if (why & RESIHP_WHY_SOCKET)
    return "socket error";
  if (why & RESIHP_WHY_HEARTBEAT)
    return "missed heartbeats";
  if (why & RESIHP_WHY_SLOW)
    return "microbatches slower than predicted";
  return "recovered";
}

void resihp__publish(resihp_detector_t *d, int rank, uint64_t iter) {
  struct resihp__rank *r = &d->ranks[rank];
  unsigned why = 0;
  if (r->fs != RESIHP__FS_OK)
    why |= RESIHP_WHY_SLOW;
  if (r->fs == RESIHP__FS_SLOW && r->vs_peers)
    why |= RESIHP_WHY_PEERS;
  if (r->misses)
    why |= RESIHP_WHY_HEARTBEAT;
  if (r->socket_err)
    why |= RESIHP_WHY_SOCKET;
  if (r->probe_failed)
    why |= RESIHP_WHY_PROBE;

  resihp_health_state_t st = RESIHP_HEALTH_HEALTHY;
  int failed = r->probe_failed || r->misses >= d->cfg.failed_misses ||
               (r->socket_err && r->misses >= d->cfg.suspect_misses);
  /* Sticky without a test of its own: once FAILED, the calls below stop
   * clearing the evidence; only reset_rank does. */
  if (failed)
    st = RESIHP_HEALTH_FAILED;
  else if (r->fs == RESIHP__FS_SLOW)
    st = RESIHP_HEALTH_SLOW;
  else if (r->fs == RESIHP__FS_SUSPECT || r->socket_err ||
           r->misses >= d->cfg.suspect_misses)
    st = RESIHP_HEALTH_SUSPECT;

  double factor = st == RESIHP_HEALTH_SLOW ? exp(r->factor_log) : 1.0;
  if (factor < 1)
    factor = 1;
  resihp_health_state_t prev = r->state;
  int changed = st != prev;
  int moved = st == RESIHP_HEALTH_SLOW && !changed &&
              fabs(factor / r->reported - 1) > 0.10;
  r->why = why;
  r->slow_factor = factor;
  if (!changed && !moved)
    return;
  if (changed) {
    r->state = st;
    r->since_iter = iter;
    if (st == RESIHP_HEALTH_FAILED)
      r->it_n = 0; /* its last samples are not judged */
  }
  r->reported = factor;
  if (st == RESIHP_HEALTH_SLOW)
    resihp_log(RESIHP_LOG_INFO, "detector",
               "rank %d: %s -> slow at iteration %llu: %.2fx slower than %s",
               rank, resihp_health_state_name(prev), (unsigned long long)iter,
               factor,
               (why & RESIHP_WHY_PEERS) ? "its peers" : "its stage's baseline");
  else
    resihp_log(st == RESIHP_HEALTH_FAILED ? RESIHP_LOG_WARN : RESIHP_LOG_INFO,
               "detector", "rank %d: %s -> %s at iteration %llu (%s)", rank,
               resihp_health_state_name(prev), resihp_health_state_name(st),
               (unsigned long long)iter, why_text(why));
  if (d->cfg.on_event) {
    resihp_rank_health_t now = {.state = st,
                                .slow_factor = factor,
                                .why = why,
                                .missed_heartbeats = r->misses,
                                .since_iter = r->since_iter,
                                .samples = r->samples};
    d->cfg.on_event(rank, prev, &now, iter, d->cfg.userdata);
  }
}

int resihp_detector_heartbeat(resihp_detector_t *d, int rank, uint64_t iter,
                              int received) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_heartbeat");
  if (rc)
    return rc;
  struct resihp__rank *r = &d->ranks[rank];
  if (r->state == RESIHP_HEALTH_FAILED)
    return 0;
  if (received) {
    /* Alive after all: a reset connection was not its death. */
    r->misses = 0;
    r->socket_err = 0;
  } else if (r->misses < d->cfg.failed_misses) {
    r->misses++;
  }
  resihp__publish(d, rank, iter);
  return 0;
}

int resihp_detector_socket_error(resihp_detector_t *d, int rank, uint64_t iter,
                                 int err) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_socket_error");
  if (rc)
    return rc;
  if (err >= 0) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_socket_error: err %d is not an error code; "
               "pass the negative RESIHP_E* the transport returned",
               err);
    return RESIHP_EINVAL;
  }
  struct resihp__rank *r = &d->ranks[rank];
  if (r->state == RESIHP_HEALTH_FAILED)
    return 0;
  resihp_log(RESIHP_LOG_INFO, "detector", "rank %d: socket error: %s", rank,
             resihp_strerror(err));
  r->socket_err = 1;
  resihp__publish(d, rank, iter);
  return 0;
}

int resihp_detector_probe_report(resihp_detector_t *d, int rank, uint64_t iter,
                                 int ok, const char *what) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_probe_report");
  if (rc)
    return rc;
  if (ok)
    return 0;
  struct resihp__rank *r = &d->ranks[rank];
  if (r->state == RESIHP_HEALTH_FAILED)
    return 0;
  resihp_log(RESIHP_LOG_WARN, "detector",
             "rank %d: node health probe '%s' failed", rank, what ? what : "?");
  r->probe_failed = 1;
  resihp__publish(d, rank, iter);
  return 0;
}
