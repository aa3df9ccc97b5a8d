/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-local-job: a resilient job of R replicas as processes of this
 * machine, with no Slurm: the coordinator embedded as resihp-run and the
 * unit tests embed it (resihp__coord_create/_poll), each replica one
 * process of COMMAND with the RESIHP_* environment resihp-run gives a job
 * step (RESIHP_REPLICA, RESIHP_COORDINATOR, RESIHP_SECRET_FILE). For the
 * GPU device check (tests/gpu/device-check.sh): a machine with a GPU and
 * no cluster, replicas sharing the device.
 *
 * The coordinator's bounds are the product's: the silence bound is the
 * coord-timeout setting's default (resihp-run's), a slowdown counts after
 * a second (resihp-run's confirm_slow_ms).
 *
 * --replace            relaunch a failed replica once, as resihp-run
 *                      starts a replacement on a spare; the survivors wait
 *                      for it at the next boundary (--wait-for-replacements)
 * --timeout S          give up after S seconds (default 600): exit 3
 *
 * Faults come from outside (the caller SIGKILLs or SIGSTOPs a replica's
 * process: tests/gpu/device-check.sh waits for the replica to say it
 * reached the step, train_gpt.py --test-hold).
 *
 * Prints resihp-run's summary at the end ("final result: X (N replicas
 * agree)"). Exit status: 0 the job finished and every finished replica
 * agrees, 1 it did not, 2 usage, 3 timed out. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/transport/mesh.h"
#include "../../tools/run/secret.h"

#include <resihp.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPLICAS 64

struct host {
  int R, replace;
  char **argv;
  char coord_ep[64], secret_path[4096];
  pid_t pid[MAX_REPLICAS];
  int replaced[MAX_REPLICAS], failed;
  resihp__coord_t *c;
};

static pid_t spawn(struct host *h, int r) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    char rs[16];
    snprintf(rs, sizeof(rs), "%d", r);
    setenv("RESIHP_REPLICA", rs, 1);
    setenv("RESIHP_COORDINATOR", h->coord_ep, 1);
    setenv("RESIHP_SECRET_FILE", h->secret_path, 1);
    execvp(h->argv[0], h->argv);
    fprintf(stderr, "resihp-local-job: cannot run %s: %s\n", h->argv[0],
            strerror(errno));
    _exit(127);
  }
  return p;
}

static void on_failed(void *ud, int r, const char *node, long jobid,
                      long stepid, const char *why) {
  (void)node;
  (void)jobid;
  (void)stepid;
  struct host *h = ud;
  h->failed++;
  fprintf(stderr, "resihp-local-job: replica %d failed (%s)\n", r, why);
  if (h->pid[r] > 0)
    kill(h->pid[r], SIGKILL); /* as resihp-run cancels its step */
  if (h->replace && !h->replaced[r]) {
    h->replaced[r] = 1;
    h->pid[r] = spawn(h, r);
    resihp__coord_expect(h->c, r, 1);
    fprintf(stderr, "resihp-local-job: replica %d relaunched (pid %d)\n", r,
            (int)h->pid[r]);
  }
}

static int usage(FILE *f, int rc) {
  fprintf(f, "usage: resihp-local-job [--replicas R] [--replace] [--timeout S] -- COMMAND [ARG...]\n");
  return rc;
}

int main(int argc, char **argv) {
  static struct host h = {.R = 2};
  long timeout_s = 600;
  static const struct option lo[] = {{"replicas", 1, 0, 'r'},
                                     {"replace", 0, 0, 'p'},
                                     {"timeout", 1, 0, 't'},
                                     {"help", 0, 0, 'h'},
                                     {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "+r:pt:h", lo, NULL)) != -1) {
    switch (ch) {
    case 'r':
      h.R = atoi(optarg);
      break;
    case 'p':
      h.replace = 1;
      break;
    case 't':
      timeout_s = atol(optarg);
      break;
    case 'h':
      return usage(stdout, 0);
    default:
      return usage(stderr, 2);
    }
  }
  if (optind >= argc || h.R < 1 || h.R > MAX_REPLICAS || timeout_s < 1) {
    fprintf(stderr, "resihp-local-job: need a COMMAND and 1..%d replicas\n",
            MAX_REPLICAS);
    return usage(stderr, 2);
  }
  h.argv = argv + optind;
  /* the job secret as resihp-run makes it (32 random bytes, 0600, held
   * by a lock while the job runs) */
  const char *tmp = getenv("TMPDIR");
  char job[32];
  int lock_fd = -1;
  snprintf(job, sizeof(job), "%d", (int)getpid());
  if (resihp__secret_create(tmp && *tmp ? tmp : "/tmp", job, h.secret_path,
                            sizeof(h.secret_path), &lock_fd)) {
    perror("resihp-local-job: secret file");
    return 1;
  }
  uint8_t *secret = NULL; /* as the ranks read it */
  size_t slen = 0;
  if (resihp__wire_read_secret(h.secret_path, &secret, &slen)) {
    fprintf(stderr, "resihp-local-job: cannot read back %s\n", h.secret_path);
    unlink(h.secret_path);
    return 1;
  }
  resihp__coord_opts_t co = {
      .replicas = h.R,
      .bind_host = "127.0.0.1",
      .secret = secret,
      .secret_len = slen,
      .silence_ms = (int)resihp_settings_get(resihp_settings_global(),
                                             RESIHP_SETTING_COORD_TIMEOUT),
      .confirm_slow_ms = 1000,
      .hold_for_replacements = h.replace,
      .on_failed = on_failed,
      .ud = &h};
  int rc = resihp__coord_create(&co, &h.c);
  if (rc) {
    fprintf(stderr, "resihp-local-job: cannot start the coordinator: %s\n",
            resihp_strerror(rc));
    unlink(h.secret_path);
    return 1;
  }
  snprintf(h.coord_ep, sizeof(h.coord_ep), "127.0.0.1:%d",
           resihp__coord_port(h.c));
  for (int r = 0; r < h.R; r++)
    h.pid[r] = spawn(&h, r);
  int64_t t0 = resihp__now_ms(), deadline = t0 + timeout_s * 1000;
  while (resihp__coord_state(h.c) == RESIHP__COORD_RUNNING &&
         resihp__now_ms() < deadline) {
    resihp__coord_poll(h.c, 50);
    while (waitpid(-1, NULL, WNOHANG) > 0) /* reap; the coordinator sees */
      ;
  }
  int state = resihp__coord_state(h.c);
  /* the replicas exit once the coordinator said the job is done */
  for (int64_t until = resihp__now_ms() + 30000;
       resihp__now_ms() < until && waitpid(-1, NULL, WNOHANG) >= 0;)
    resihp__coord_poll(h.c, 50);
  for (int r = 0; r < h.R; r++)
    if (h.pid[r] > 0)
      kill(h.pid[r], SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  printf("resihp-local-job: %d replicas, %d failure(s), %.1f s\n", h.R,
         h.failed, (double)(resihp__now_ms() - t0) / 1000.0);
  int agree = resihp__coord_summary(h.c, stdout, NULL);
  resihp__coord_destroy(h.c);
  unlink(h.secret_path);
  close(lock_fd);
  free(secret);
  if (state == RESIHP__COORD_RUNNING)
    return 3;
  return state == RESIHP__COORD_DONE && agree == 0 ? 0 : 1;
}
