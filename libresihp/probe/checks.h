/* SPDX-License-Identifier: BSD-3-Clause */
/* The individual checks (checks.c, nvml.c), called by probe.c. */
#ifndef RESIHP_PROBE_CHECKS_H
#define RESIHP_PROBE_CHECKS_H

#include "probe.h"

void resihp__probe_say(resihp_probe_result_t *r, int status, const char *fmt,
                       ...) __attribute__((format(printf, 3, 4)));

void resihp__probe_check_topo(const resihp_probe_config_t *c,
                              resihp_probe_result_t *r);
void resihp__probe_check_mem(const resihp_probe_config_t *c,
                             resihp_probe_result_t *r);
void resihp__probe_check_disk(const resihp_probe_config_t *c,
                                 resihp_probe_result_t *r);
void resihp__probe_check_net(const resihp_probe_config_t *c,
                             resihp_probe_result_t *r);
void resihp__probe_check_gpu(const resihp_probe_config_t *c,
                             resihp_probe_result_t *r);

#endif
