/* SPDX-License-Identifier: BSD-3-Clause */
/* The spare agent (see spare_agent.h). One short connection: the launcher
 * re-runs the check step to re-probe a spare, so the agent keeps nothing
 * running on a node that may be needed for a replacement at any moment. */
#include "config.h"

#include "../probe/burnin.h"
#include "../probe/results.h"
#include "../transport/mesh.h"
#include "spare_agent.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>
#include <resihp/settings.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The probe verdict the plugin handed this step: status "pass"/"fail" and,
 * on failure, what failed. No probe (probes=none, or no plugin) is a pass:
 * the step started, which is all that can be said. */
static void verdict(char *status, size_t slen, char *summary, size_t len) {
  const char *st = getenv("RESIHP_PROBE_STATUS");
  const char *path = getenv("RESIHP_PROBE_RESULTS");
  snprintf(status, slen, "%s", st && !strcmp(st, "fail") ? "fail" : "pass");
  snprintf(summary, len, "-");
  resihp__probe_watch_t w;
  resihp__probe_block_t b;
  if (!path || resihp__probe_watch_init(&w, path))
    return;
  /* the start block comes first */
  if (resihp__probe_watch_next(&w, &b) == 1) {
    if (b.healthy == 0) {
      snprintf(status, slen, "fail");
      snprintf(summary, len, "%.290s", b.summary[0] ? b.summary : b.failed);
    }
  } else if (!strcmp(status, "fail")) {
    snprintf(summary, len, "probe results unreadable");
  }
  resihp__probe_watch_free(&w);
  if (!strcmp(status, "fail") && !strcmp(summary, "-"))
    snprintf(summary, len, "probe failed");
}

int resihp__spare_agent_run(int timeout_ms) {
  const resihp_settings_t *s = resihp_settings_global();
  const char *coord = resihp_settings_get_str(s, RESIHP_SETTING_COORDINATOR);
  const char *sf = resihp_settings_get_str(s, RESIHP_SETTING_SECRET_FILE);
  char node[64];
  const char *n = getenv("SLURMD_NODENAME");
  if (n && *n)
    snprintf(node, sizeof(node), "%s", n);
  else if (gethostname(node, sizeof(node)))
    snprintf(node, sizeof(node), "unknown");
  node[sizeof(node) - 1] = '\0';
  if (!coord[0]) {
    resihp_log(RESIHP_LOG_ERROR, "spare",
               "no coordinator (RESIHP_COORDINATOR): the spare agent runs "
               "inside resihp-run's spare check step");
    return 2;
  }
  char status[8], summary[300], bi[80] = "";
  verdict(status, sizeof(status), summary, sizeof(summary));
  int64_t deadline = resihp__now_ms() + timeout_ms;
  /* burn-in, when the launcher asks for it (RESIHP_BURNIN_BYTES: the
   * job's all-reduce size, 0 when not known yet): bounded by
   * RESIHP_BURNIN_MS and half the time this agent has, so that a node too
   * slow to finish still registers, with a failed burn-in */
  const char *bv = getenv("RESIHP_BURNIN_BYTES");
  if (!strcmp(status, "pass") && bv && *bv && strcmp(bv, "off")) {
    resihp__burnin_t b;
    long bytes = atol(bv) > 0 ? atol(bv) : RESIHP__BURNIN_DEFAULT_BYTES;
    long ms = timeout_ms / 2;
    const char *mv = getenv("RESIHP_BURNIN_MS");
    if (mv && atol(mv) > 0 && atol(mv) < ms)
      ms = atol(mv);
    int64_t t0 = resihp__now_ms();
    if (resihp__burnin_run(bytes, t0 + ms, &b))
      snprintf(summary, sizeof(summary), "%.250s", b.why);
    char f[64];
    resihp__burnin_format(&b, f, sizeof(f));
    snprintf(bi, sizeof(bi), " burnin=%s", f);
    resihp_log(RESIHP_LOG_INFO, "spare",
               "node %s: burn-in %s in %ld ms (compute %ld us, all-reduce "
               "of %ld bytes %ld us; %d GPU(s): GEMM %ld us, device "
               "all-reduce %ld us)",
               node, b.failed ? "failed" : "done",
               (long)(resihp__now_ms() - t0), b.compute_us, b.bytes,
               b.allreduce_us, b.gpus, b.gpu_gemm_us, b.gpu_allreduce_us);
  }
  uint8_t *secret = NULL;
  size_t slen = 0;
  int rc = resihp__wire_read_secret(sf, &secret, &slen);
  if (rc) {
    resihp_log(RESIHP_LOG_ERROR, "spare", "cannot read the job secret '%s': %s",
               sf, resihp_strerror(rc));
    return 2;
  }
  resihp__wire_t w;
  resihp__wire_init(&w, -1);
  char line[512];
  int fd = resihp__wire_dial(coord, deadline);
  if (fd < 0) {
    rc = fd;
    goto out;
  }
  resihp__wire_init(&w, fd);
  if ((rc = resihp__wire_auth_client(&w, secret, slen, "coord", deadline)))
    goto out;
  snprintf(line, sizeof(line), "SPARE node=%s status=%s%s summary=%s", node,
           status, bi, summary);
  if ((rc = resihp__wire_send(&w, line, deadline)))
    goto out;
  /* the coordinator's heartbeats may come first */
  do
    rc = resihp__wire_recv(&w, line, sizeof(line), deadline);
  while (!rc && !strcmp(line, "HB"));
  if (!rc && strncmp(line, "SPARE_OK ", 9))
    rc = RESIHP_EPROTO;
out:
  resihp__wire_free(&w);
  memset(secret, 0, slen);
  free(secret);
  if (rc) {
    resihp_log(RESIHP_LOG_ERROR, "spare",
               "node %s could not register with the coordinator %s: %s", node,
               coord, resihp_strerror(rc));
    return 2;
  }
  resihp_log(RESIHP_LOG_INFO, "spare", "node %s registered as a spare (%s)",
             node, line + 9);
  return strcmp(status, "pass") ? 1 : 0;
}
