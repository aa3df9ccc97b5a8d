/* SPDX-License-Identifier: BSD-3-Clause */
/* Groups of forked ranks on loopback for the all-reduce tests: the parent
 * pre-binds one listening socket per rank on 127.0.0.1 (port 0) so the
 * endpoint list is known before any child starts. Children check their own
 * results and exit 0 (correct), 3 (excluded by the others, expected for both
 * ends of a cut link) or 1; they also write one record per survivor into a
 * pipe so that the parent can check that all survivors ended in the same
 * view. */
#ifndef RESIHP_TESTS_RANK_GROUP_H
#define RESIHP_TESTS_RANK_GROUP_H

#include "suite_main.h"

#include <resihp.h>

#include <check.h>

#include <stdint.h>

#define MAXN 8
#define SECRET "test-job-secret-0123456789"
/* Fault tests use the default bound (1 s); the others a generous one, so
 * that a loaded machine cannot fake a failure. */
#define DETECT_MS 1000
#define CALM_DETECT_MS 3000
/* What the next make_comm uses. */
extern int detect_ms;
extern int transport;   /* -1 default (shared memory on one host), 1 TCP */
extern int mac_data;    /* MACs over gradient payloads too */
extern long small_max;  /* -1 default (registry), 0 ring only, else bytes */
extern int single_copy; /* -1 registry (default on), 0 off, 1 on */

extern char ep_buf[MAXN][32];
extern const char *eps[MAXN];
extern int lfds[MAXN];
extern int rec_pipe[2];

struct record {
  int world_rank, attempts;
  uint32_t epoch;
  uint64_t members;
  double fail_ms; /* how long the failed call took to return */
};

void bind_endpoints(int n);
int make_comm(int rank, int n, const char *secret, long chunk,
              int deterministic, resihp_comm_t **c);
/* The same over any endpoints and listening socket, as group `group` of
 * the ranks behind it (resihp__comm_create_group; make_comm is group 0
 * over eps[] and lfds[]). */
int make_comm_group(int rank, int n, const char *const *endpoints, int lfd,
                    uint32_t group, const char *secret, long chunk,
                    int deterministic, resihp_comm_t **c);

typedef int (*rank_fn)(int rank, int n, void *arg);

/* run_group: the first time rank resume_rank stops itself, it is continued
 * resume_ms later (-1: stopped ranks stay stopped). */
extern int resume_rank, resume_ms;
/* run_group: the first time rank kill_stopped_rank stops itself, it gets
 * SIGKILL from the parent at once (-1: none): a test stops a rank at an
 * exact point with raise(SIGSTOP) and has it killed from outside there. */
extern int kill_stopped_rank;

/* Fork n ranks running fn; returns their exit statuses in st[]. Ranks
 * still alive and stopped once the others are done get SIGKILL. */
void run_group(int n, rank_fn fn, void *arg, int st[MAXN]);
int read_records(struct record *rec, int max);
double now_ms(void);
void put_record(resihp_comm_t *c, int attempts, double fail_ms);

/* Exactly representable contributions: the float sum is exact whatever the
 * order, so results can be compared with ==. */
double value(int world_rank, size_t i);
/* For RESIHP_FIXED64: the same in 20 fraction bits, plus a few low bits. */
int64_t fixed_value(int world_rank, size_t i);
void fill(void *buf, size_t count, resihp_dtype_t dt, int wr);
/* Check buf against the sum over the world ranks in members. */
int check(const void *buf, size_t count, resihp_dtype_t dt, resihp_op_t op,
          uint64_t members, int nmembers);
uint64_t view_mask(resihp_comm_t *c);
/* Every rank exited 0 (a Check assertion). */
void expect_all_ok(int n, const int st[MAXN]);

#endif
