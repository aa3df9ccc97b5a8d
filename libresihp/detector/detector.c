/* SPDX-License-Identifier: BSD-3-Clause */
/* The detector object: its configuration, the table of ranks and the stage
 * table that groups peers (ranks doing the same work). Everything is
 * allocated here, once; the per-sample paths in failslow.c and health.c only
 * touch this memory. */
#include "config.h"

#include "detector-internal.h"

#include <resihp/error.h>
#include <resihp/log.h>
#include <resihp/settings.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

void resihp_detector_config_init(resihp_detector_config_t *cfg, int n_ranks) {
  if (!cfg)
    return;
  memset(cfg, 0, sizeof(*cfg));
  const resihp_settings_t *s = resihp_settings_global();
  long margin = resihp_settings_get(s, RESIHP_SETTING_SLOW_MARGIN);
  long timeout = resihp_settings_get(s, RESIHP_SETTING_DETECT_TIMEOUT);
  long beat = resihp_settings_get(s, RESIHP_SETTING_HEARTBEAT);
  cfg->n_ranks = n_ranks;
  cfg->slow_margin = (double)margin / 100.0;
  cfg->min_slow = 0.05;
  cfg->forget = 0.998;
  cfg->warmup = 32;
  cfg->suspect_misses = 2;
  cfg->failed_misses = beat > 0 ? (unsigned)(timeout / beat) : 10;
  if (cfg->failed_misses < 1)
    cfg->failed_misses = 1;
  cfg->peer_check = 32;
  cfg->confirm_iters = 3;
}

static int bad_config(const char *what, double v, const char *allowed) {
  resihp_log(RESIHP_LOG_ERROR, "detector",
             "resihp_detector_create: %s = %g is invalid; %s", what, v,
             allowed);
  return RESIHP_EINVAL;
}

int resihp_detector_create(resihp_detector_t **out,
                           const resihp_detector_config_t *cfg) {
  if (!out || !cfg) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_create: NULL argument");
    return RESIHP_EINVAL;
  }
  *out = NULL;
  if (cfg->n_ranks < 1 || cfg->n_ranks > (1 << 24))
    return bad_config("n_ranks", cfg->n_ranks, "use 1..16777216");
  if (!(cfg->slow_margin >= 0.01 && cfg->slow_margin <= 10))
    return bad_config("slow_margin", cfg->slow_margin,
                      "use a fraction 0.01..10 (0.25 = 25 %)");
  if (!(cfg->min_slow > 0 && cfg->min_slow <= cfg->slow_margin))
    return bad_config("min_slow", cfg->min_slow,
                      "use 0 < min_slow <= "
                      "slow_margin");
  if (!(cfg->forget >= 0.9 && cfg->forget <= 1))
    return bad_config("forget", cfg->forget, "use 0.9..1");
  if (cfg->warmup < 4)
    return bad_config("warmup", cfg->warmup, "use at least 4 samples");
  if (cfg->confirm_iters < 1 || cfg->confirm_iters > 1000)
    return bad_config("confirm_iters", cfg->confirm_iters,
                      "use 1..1000 iterations");
  if (cfg->suspect_misses < 1 || cfg->failed_misses < cfg->suspect_misses)
    return bad_config("failed_misses", cfg->failed_misses,
                      "use 1 <= suspect_misses <= failed_misses");

  resihp_detector_t *d = calloc(1, sizeof(*d));
  if (d) {
    d->ranks = calloc((size_t)cfg->n_ranks, sizeof(d->ranks[0]));
    d->stages = calloc((size_t)cfg->n_ranks, sizeof(d->stages[0]));
    d->scratch = calloc((size_t)cfg->n_ranks, sizeof(d->scratch[0]));
  }
  if (!d || !d->ranks || !d->stages || !d->scratch) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_create: out of memory for %d ranks",
               cfg->n_ranks);
    resihp_detector_destroy(d);
    return RESIHP_ENOMEM;
  }
  d->cfg = *cfg;
  d->h = log1p(cfg->slow_margin);
  d->s_min = log1p(cfg->min_slow);
  d->k_min = 0.8 * d->s_min;
  /* Until told otherwise every rank is alone in its own stage; caller ids
   * are >= 0, so the defaults (-1 - rank) cannot collide with them. */
  for (int i = 0; i < cfg->n_ranks; i++) {
    resihp__stage_init(&d->stages[i], -1 - i);
    d->stages[i].members = 1;
    d->stages[i].head = i;
    struct resihp__rank *r = &d->ranks[i];
    r->slot = i;
    r->next_peer = -1;
    r->stage = -1 - i;
    r->state = RESIHP_HEALTH_HEALTHY;
    r->slow_factor = 1;
    resihp__failslow_reset(d, i);
  }
  *out = d;
  return 0;
}

void resihp_detector_destroy(resihp_detector_t *d) {
  if (!d)
    return;
  free(d->ranks);
  free(d->stages);
  free(d->scratch);
  free(d);
}

int resihp__detector_check_rank(const resihp_detector_t *d, int rank,
                                const char *who) {
  if (!d) {
    resihp_log(RESIHP_LOG_ERROR, "detector", "%s: detector is NULL", who);
    return RESIHP_EINVAL;
  }
  if (rank < 0 || rank >= d->cfg.n_ranks) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "%s: rank %d out of range; the detector was created for ranks "
               "0..%d",
               who, rank, d->cfg.n_ranks - 1);
    return RESIHP_ERANGE;
  }
  return 0;
}

static void unlink_rank(resihp_detector_t *d, int rank) {
  struct resihp__rank *r = &d->ranks[rank];
  struct resihp__stage *s = &d->stages[r->slot];
  for (int *p = &s->head; *p >= 0; p = &d->ranks[*p].next_peer)
    if (*p == rank) {
      *p = r->next_peer;
      break;
    }
  r->next_peer = -1;
  s->members--;
}

int resihp_detector_set_stage(resihp_detector_t *d, int rank, int stage) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_set_stage");
  if (rc)
    return rc;
  if (stage < 0) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_set_stage: stage %d rejected; stage ids are "
               ">= 0",
               stage);
    return RESIHP_EINVAL;
  }
  struct resihp__rank *r = &d->ranks[rank];
  if (r->stage == stage)
    return 0;
  int slot = -1, free_slot = -1;
  for (int i = 0; i < d->cfg.n_ranks; i++) {
    if (d->stages[i].members > 0 && d->stages[i].id == stage) {
      slot = i;
      break;
    }
    if (free_slot < 0 && d->stages[i].members == 0)
      free_slot = i;
  }
  unlink_rank(d, rank);
  if (slot < 0) {
    /* There are as many slots as ranks and this rank just left one, so a
     * free slot exists if none was seen before the scan stopped. */
    if (free_slot < 0)
      for (int i = 0; i < d->cfg.n_ranks; i++)
        if (d->stages[i].members == 0) {
          free_slot = i;
          break;
        }
    slot = free_slot;
    resihp__stage_init(&d->stages[slot], stage);
  }
  struct resihp__stage *s = &d->stages[slot];
  r->slot = slot;
  r->stage = stage;
  r->next_peer = s->head;
  s->head = rank;
  s->members++;
  /* A different model slice runs at a different speed: start over. */
  if (r->samples)
    resihp_log(RESIHP_LOG_INFO, "detector",
               "rank %d moved to stage %d: predictor restarted", rank, stage);
  resihp__failslow_reset(d, rank);
  resihp__publish(d, rank, 0);
  return 0;
}

int resihp_detector_record(resihp_detector_t *d, int rank, uint64_t iter,
                           const resihp_workload_t *w, double time_us) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_record");
  if (rc)
    return rc;
  rc = resihp__check_sample("resihp_detector_record", w, time_us);
  if (rc)
    return rc;
  struct resihp__rank *r = &d->ranks[rank];
  if (r->state == RESIHP_HEALTH_FAILED) {
    if (!r->refused++) /* once per failure, not once per microbatch */
      resihp_log(RESIHP_LOG_WARN, "detector",
                 "rank %d is marked failed; its samples are ignored (call "
                 "resihp_detector_reset_rank once it has rejoined)",
                 rank);
    return RESIHP_ESTATE;
  }
  resihp__failslow_record(d, rank, iter, w, time_us);
  return 0;
}

int resihp_detector_set_confirm_ms(resihp_detector_t *d, unsigned ms) {
  if (!d || ms > 60000) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_set_confirm_ms: %s",
               d ? "at most 60000 ms" : "detector is NULL");
    return RESIHP_EINVAL;
  }
  d->confirm_ms = ms;
  return 0;
}

int resihp_detector_end_iter(resihp_detector_t *d, uint64_t iter) {
  if (!d) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_end_iter: detector is NULL");
    return RESIHP_EINVAL;
  }
  /* Only the open iteration can end; an older one was judged already. */
  if (d->open && iter >= d->cur_iter)
    resihp__failslow_close(d);
  return 0;
}

int resihp_detector_health(const resihp_detector_t *d, int rank,
                           resihp_rank_health_t *out) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_health");
  if (rc)
    return rc;
  if (!out) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_health: out is NULL");
    return RESIHP_EINVAL;
  }
  const struct resihp__rank *r = &d->ranks[rank];
  *out = (resihp_rank_health_t){.state = r->state,
                                .slow_factor = r->slow_factor,
                                .why = r->why,
                                .missed_heartbeats = r->misses,
                                .since_iter = r->since_iter,
                                .samples = r->samples};
  return 0;
}

int resihp_detector_reset_rank(resihp_detector_t *d, int rank, uint64_t iter) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_reset_rank");
  if (rc)
    return rc;
  struct resihp__rank *r = &d->ranks[rank];
  r->misses = 0;
  r->socket_err = 0;
  r->probe_failed = 0;
  r->refused = 0;
  resihp__failslow_reset(d, rank);
  resihp__publish(d, rank, iter);
  return 0;
}

int resihp_detector_predict(const resihp_detector_t *d, int rank,
                            const resihp_workload_t *w, double *time_us) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_predict");
  if (rc)
    return rc;
  if (!time_us) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_predict: time_us is NULL");
    return RESIHP_EINVAL;
  }
  rc = resihp__check_sample("resihp_detector_predict", w, 1.0);
  if (rc)
    return rc;
  const struct resihp__rank *r = &d->ranks[rank];
  if (r->pred.n < d->cfg.warmup)
    return RESIHP_ESTATE;
  *time_us = resihp__pred_predict(&r->pred, w);
  return 0;
}

int resihp_detector_model(const resihp_detector_t *d, int rank,
                          resihp_model_t *out) {
  int rc = resihp__detector_check_rank(d, rank, "resihp_detector_model");
  if (rc)
    return rc;
  if (!out) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_detector_model: out is NULL");
    return RESIHP_EINVAL;
  }
  const struct resihp__rank *r = &d->ranks[rank];
  if (r->pred.n < d->cfg.warmup)
    return RESIHP_ESTATE;
  resihp__pred_model(&r->pred, out);
  return 0;
}
