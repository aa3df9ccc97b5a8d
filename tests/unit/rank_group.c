/* SPDX-License-Identifier: BSD-3-Clause */
/* Groups of forked ranks on loopback (see rank_group.h). */
#include "config.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "rank_group.h"

#include <arpa/inet.h>
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int detect_ms = CALM_DETECT_MS;
int transport = -1;
int mac_data = 0;
long small_max = -1;
int single_copy = -1;

char ep_buf[MAXN][32];
const char *eps[MAXN];
int lfds[MAXN];
int rec_pipe[2];

void bind_endpoints(int n) {
  for (int i = 0; i < n; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 64), 0);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    snprintf(ep_buf[i], sizeof(ep_buf[i]), "127.0.0.1:%u", ntohs(sa.sin_port));
    eps[i] = ep_buf[i];
    lfds[i] = fd;
  }
}

int make_comm(int rank, int n, const char *secret, long chunk,
              int deterministic, resihp_comm_t **c) {
  return make_comm_group(rank, n, eps, lfds[rank], 0, secret, chunk,
                         deterministic, c);
}

int make_comm_group(int rank, int n, const char *const *endpoints, int lfd,
                    uint32_t group, const char *secret, long chunk,
                    int deterministic, resihp_comm_t **c) {
  resihp_comm_opts_t o;
  resihp_comm_opts_init(&o);
  o.rank = rank;
  o.nranks = n;
  o.endpoints = endpoints;
  o.listen_fd = lfd;
  o.secret = secret;
  o.secret_len = strlen(secret);
  o.detect_timeout_ms = detect_ms;
  o.heartbeat_ms = 100;
  o.connect_timeout_ms = 10000;
  o.chunk_bytes = chunk;
  o.deterministic = deterministic;
  o.transport = transport;
  o.mac_data = mac_data;
  o.small_max = small_max;
  o.single_copy = single_copy;
  return resihp__comm_create_group(&o, group, c);
}

int resume_rank = -1, resume_ms;
int kill_stopped_rank = -1;

void run_group(int n, rank_fn fn, void *arg, int st[MAXN]) {
  pid_t pid[MAXN];
  bind_endpoints(n);
  ck_assert_int_eq(pipe(rec_pipe), 0);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    ck_assert_int_ge(pid[r], 0);
    if (pid[r] == 0) {
      close(rec_pipe[0]);
      for (int j = 0; j < n; j++)
        if (j != r)
          close(lfds[j]);
      alarm(40);
      _exit(fn(r, n, arg));
    }
  }
  close(rec_pipe[1]);
  for (int j = 0; j < n; j++)
    close(lfds[j]);
  /* Wait for everyone that exits on its own; a stopped rank never does, so
   * poll with WNOHANG and kill stragglers that are stopped once all the
   * others are gone. */
  int left = n;
  for (int r = 0; r < n; r++)
    st[r] = -1;
  while (left) {
    int progressed = 0;
    for (int r = 0; r < n; r++) {
      if (st[r] != -1)
        continue;
      int s;
      pid_t w = waitpid(pid[r], &s, WNOHANG | WUNTRACED);
      if (w == pid[r] && WIFSTOPPED(s) && r == resume_rank) {
        struct timespec ts = {resume_ms / 1000, (resume_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid[r], SIGCONT);
        resume_rank = -1;
        continue;
      }
      if (w == pid[r] && WIFSTOPPED(s) && r == kill_stopped_rank) {
        kill(pid[r], SIGKILL);
        kill_stopped_rank = -1;
        continue;
      }
      if (w == pid[r] && WIFSTOPPED(s))
        continue;
      if (w == pid[r]) {
        st[r] = s;
        left--;
        progressed = 1;
      }
    }
    if (!progressed) {
      /* Only stopped ranks left? */
      int running = 0;
      for (int r = 0; r < n; r++) {
        if (st[r] != -1)
          continue;
        char path[64], state = 0;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid[r]);
        FILE *f = fopen(path, "r");
        if (f) {
          if (fscanf(f, "%*d %*s %c", &state) != 1)
            state = 0;
          fclose(f);
        }
        if (state != 'T')
          running = 1;
      }
      if (!running)
        for (int r = 0; r < n; r++)
          if (st[r] == -1)
            kill(pid[r], SIGKILL);
      struct timespec ts = {0, 20 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

int read_records(struct record *rec, int max) {
  int k = 0;
  while (k < max &&
         read(rec_pipe[0], &rec[k], sizeof(rec[k])) == (ssize_t)sizeof(rec[k]))
    k++;
  close(rec_pipe[0]);
  return k;
}

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void put_record(resihp_comm_t *c, int attempts, double fail_ms) {
  struct record r = {.world_rank = resihp_comm_world_rank(c),
                     .attempts = attempts,
                     .epoch = resihp_comm_epoch(c),
                     .fail_ms = fail_ms};
  for (int i = 0; i < resihp_comm_size(c); i++)
    r.members |= 1ull << resihp_comm_member(c, i);
  if (write(rec_pipe[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
    _exit(1);
}

double value(int world_rank, size_t i) {
  return (double)((world_rank + 1) * (int)(i % 13 + 1)) - 7.0;
}

int64_t fixed_value(int world_rank, size_t i) {
  return (int64_t)value(world_rank, i) * ((int64_t)1 << 20) + (int64_t)(i % 7);
}

/* FIXED64: exact integers, so SUM is exact and AVG rounds toward zero like
 * the library. */
static int check_fixed(const int64_t *buf, size_t count, resihp_op_t op,
                       uint64_t members, int nmembers) {
  for (size_t i = 0; i < count; i++) {
    int64_t want = 0;
    for (int r = 0; r < 64; r++)
      if (members >> r & 1)
        want += fixed_value(r, i);
    if (op == RESIHP_OP_AVG)
      want /= nmembers;
    if (buf[i] != want) {
      fprintf(stderr, "fixed mismatch at %zu\n", i);
      return 1;
    }
  }
  return 0;
}

void fill(void *buf, size_t count, resihp_dtype_t dt, int wr) {
  for (size_t i = 0; i < count; i++) {
    double v = value(wr, i);
    if (dt == RESIHP_FIXED64)
      ((int64_t *)buf)[i] = fixed_value(wr, i);
    else if (dt == RESIHP_FLOAT32)
      ((float *)buf)[i] = (float)v;
    else if (dt == RESIHP_FLOAT64)
      ((double *)buf)[i] = v;
    else
      ((uint16_t *)buf)[i] = resihp_bf16_from_float((float)v);
  }
}

int check(const void *buf, size_t count, resihp_dtype_t dt, resihp_op_t op,
          uint64_t members, int nmembers) {
  if (dt == RESIHP_FIXED64)
    return check_fixed(buf, count, op, members, nmembers);
  for (size_t i = 0; i < count; i++) {
    double want = 0;
    for (int r = 0; r < 64; r++)
      if (members >> r & 1)
        want += value(r, i);
    if (op == RESIHP_OP_AVG)
      want /= nmembers;
    double got;
    if (dt == RESIHP_FLOAT32) {
      got = ((const float *)buf)[i];
      want = (float)want;
    } else if (dt == RESIHP_FLOAT64) {
      got = ((const double *)buf)[i];
    } else {
      got = resihp_bf16_to_float(((const uint16_t *)buf)[i]);
      /* bf16 has 8 bits of mantissa: allow its rounding per hop. */
      if (fabs(got - want) <= fabs(want) / 64 + 0.5)
        continue;
    }
    if (got != want) {
      fprintf(stderr, "mismatch at %zu: got %g want %g (dtype %d)\n", i, got,
              want, (int)dt);
      return 1;
    }
  }
  return 0;
}

uint64_t view_mask(resihp_comm_t *c) {
  uint64_t m = 0;
  for (int i = 0; i < resihp_comm_size(c); i++)
    m |= 1ull << resihp_comm_member(c, i);
  return m;
}

void expect_all_ok(int n, const int st[MAXN]) {
  for (int r = 0; r < n; r++)
    ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                  "rank %d status %#x", r, st[r]);
}
