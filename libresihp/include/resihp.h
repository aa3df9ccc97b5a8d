/* SPDX-License-Identifier: BSD-3-Clause */
/* libresihp: the in-rank library of resihp.
 *
 * Include this header only; it pulls in the public sub-headers under
 * resihp/. Naming: public symbols are resihp_* / RESIHP_*, every fallible call
 * returns 0 or a negative RESIHP_E* code (see resihp/error.h), and each
 * header says who frees what.
 */
#ifndef RESIHP_H
#define RESIHP_H

#include <resihp/allreduce.h>
#include <resihp/detector.h>
#include <resihp/error.h>
#include <resihp/job.h>
#include <resihp/log.h>
#include <resihp/planner.h>
#include <resihp/settings.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library actually linked ("0.1.0"). */
const char *resihp_version(void);

/* Optional features compiled into this build, space separated
 * (e.g. "tcp shm nccl"). */
const char *resihp_build_features(void);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_H */
