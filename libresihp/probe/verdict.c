/* SPDX-License-Identifier: BSD-3-Clause */
/* Which probe failures may drain a node.
 *
 * A probe run at step start uses the effective configuration: the site's
 * plugstack.conf settings, overridden by the user's --resilient options,
 * plus inputs from the job (its TMPDIR as scratch directory, its GPU and
 * CPU counts as expectations). Any of those can make a healthy node fail:
 * probe-min-free-mem=1P, a TMPDIR on a full or hung file system, a forged
 * SLURM_STEP_GPUS, probe-timeout=100. That must fail the user's step, but
 * root drains only on the verdict the site's own configuration gives.
 *
 * Re-running everything under the site's configuration would cost a
 * second probe (a second deadline when a check hangs) on every failure, so
 * a failure counts as it is when the check ran with exactly the site's
 * inputs: a FAIL when its thresholds, paths and expectations are the
 * site's; a TIMEOUT only when, in addition, the deadline was at least the
 * site's and every check that ran before it was also run as the site would
 * run it (the deadline covers the whole run, so time spent in a check of
 * the user's choosing is not the node's fault). The other failures of
 * checks the site selected are run again, alone, under the site's
 * configuration, and only that run's verdict counts. */
#include "config.h"

#include "probe.h"

#include <resihp/error.h>

#include <string.h>

static int same_str(const char *a, const char *b) { return !strcmp(a, b); }

/* The inputs each check reads (see checks.c and nvml.c) and the test hooks
 * that act on it. */
static int same_inputs(const resihp_probe_config_t *a,
                       const resihp_probe_config_t *b, int check) {
  unsigned bit = 1u << check;
  if ((a->test_fail & bit) != (b->test_fail & bit))
    return 0;
  int da = a->test_delay_check == check ? (int)(a->test_delay_ms > 0) : 0;
  int db = b->test_delay_check == check ? (int)(b->test_delay_ms > 0) : 0;
  if (da != db || (da && a->test_delay_ms != b->test_delay_ms))
    return 0;
  switch (check) {
  case RESIHP_PROBE_TOPO:
    return a->expect_cpus == b->expect_cpus &&
           a->expect_gpus == b->expect_gpus;
  case RESIHP_PROBE_MEM:
    return a->min_free_mem == b->min_free_mem &&
           same_str(a->proc_root, b->proc_root);
  case RESIHP_PROBE_DISK:
    return same_str(a->scratch_dir, b->scratch_dir);
  case RESIHP_PROBE_NET:
    return a->min_link_mbps == b->min_link_mbps &&
           same_str(a->sysfs_root, b->sysfs_root);
  case RESIHP_PROBE_GPU:
    return a->expect_gpus == b->expect_gpus &&
           same_str(a->nvml_lib, b->nvml_lib);
  default:
    return 0;
  }
}

/* Would the site's run have given this failure too, without running it? */
static int counts_as_is(const resihp_probe_config_t *eff,
                        const resihp_probe_report_t *rep,
                        const resihp_probe_config_t *site, int check) {
  if (!same_inputs(eff, site, check))
    return 0;
  if (rep->r[check].status != RESIHP_PROBE_TIMEOUT)
    return 1;
  if (eff->timeout_ms < site->timeout_ms)
    return 0;
  for (int j = 0; j < check; j++)
    if ((rep->checks & (1u << j)) &&
        (!(site->checks & (1u << j)) || !same_inputs(eff, site, j)))
      return 0;
  return 1;
}

static int bad(int status) {
  return status == RESIHP_PROBE_FAIL || status == RESIHP_PROBE_TIMEOUT;
}

int resihp__probe_site_verdict(const resihp_probe_config_t *eff,
                               const resihp_probe_report_t *rep,
                               const resihp_probe_config_t *site,
                               resihp_probe_report_t *out,
                               unsigned *rerun_mask) {
  memset(out, 0, sizeof(*out));
  out->time = rep->time;
  out->healthy = 1;
  unsigned rerun = 0, kept = 0;
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    unsigned bit = 1u << i;
    if (!(rep->checks & bit) || !(site->checks & bit) ||
        !bad(rep->r[i].status))
      continue;
    if (counts_as_is(eff, rep, site, i))
      kept |= bit;
    else
      rerun |= bit;
  }
  if (rerun_mask)
    *rerun_mask = rerun;
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++)
    if (kept & (1u << i)) {
      out->r[i] = rep->r[i];
      out->timed_out |= rep->r[i].status == RESIHP_PROBE_TIMEOUT;
    }
  out->usec = 0;
  if (rerun) {
    resihp_probe_config_t c = *site;
    c.checks = rerun;
    resihp_probe_report_t again;
    int rc = resihp__probe_run(&c, &again);
    if (rc)
      return rc; /* no verdict: the caller must not drain */
    for (int i = 0; i < RESIHP_PROBE__COUNT; i++)
      if (rerun & (1u << i))
        out->r[i] = again.r[i];
    out->timed_out |= again.timed_out;
    out->usec = again.usec;
  }
  out->checks = kept | rerun;
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++)
    if ((out->checks & (1u << i)) && bad(out->r[i].status))
      out->healthy = 0;
  return 0;
}
