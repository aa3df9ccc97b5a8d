/* SPDX-License-Identifier: BSD-3-Clause */
/* The spare agent: the program of a spare node's check step (resihp-run
 * --spare-agent). It registers the node with the job's coordinator as a
 * spare, with the verdict of the step-start health probe the plugin ran on
 * it (RESIHP_PROBE_STATUS, and the failed checks from the start block of
 * RESIHP_PROBE_RESULTS), over a connection authenticated with the job's
 * secret like a rank's (RESIHP_COORDINATOR, RESIHP_SECRET_FILE). See the
 * spare registry in coordinator.h.
 */
#ifndef RESIHP_CONTROL_SPARE_AGENT_H
#define RESIHP_CONTROL_SPARE_AGENT_H

/* Register this node within timeout_ms. Returns 0 when registered healthy,
 * 1 when registered with a failed probe, 2 when it could not register
 * (exit codes of the agent; the reason is logged). */
int resihp__spare_agent_run(int timeout_ms);

#endif
