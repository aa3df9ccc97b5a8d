/* SPDX-License-Identifier: BSD-3-Clause */
/* A rank SIGKILLed in the middle of a frame, at many offsets, on every data
 * path: the survivors' failing call must say RESIHP_EPEER or
 * RESIHP_ETIMEDOUT (the peer is dead or silent), never RESIHP_EPROTO (which
 * is for a live peer sending garbage: a caller may treat it as fatal and
 * leave, breaking the others' next all-reduce). Then every survivor shrinks,
 * the retry gives the exact sum of the survivors and they agree on the view.
 *
 * Two ways to kill: (a) the ring's test hook raises SIGKILL in the victim
 * before chunk c of step s (frames of earlier chunks are then still queued
 * or half written); (b) a killer process SIGKILLs the victim at an
 * arbitrary moment while it runs back-to-back all-reduces (it learns from a
 * pipe byte that the victim entered its loop). Over the shared-memory rings
 * (the default between ranks of one host) and TCP only, with and without
 * MACs over the data.
 *
 * Byte-exact on one link: a real sender process killed after exactly k
 * bytes of its frames, for k in every part of a frame, on the socket and
 * the shared-memory ring; and bytes that cannot be right, which are
 * RESIHP_EPROTO from a live sender and RESIHP_EPEER from a dead one.
 *
 * Also: what a sum does with NaN and +-Inf (resihp/allreduce.h), for the
 * float path and the deterministic fixed-point mode. */
#include "config.h"

#include <resihp.h>

#include "../../libresihp/collectives/comm_internal.h"
#include "../../libresihp/transport/mesh.h"
#include "../../libresihp/transport/shm.h"

#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_group.h"

enum { K_HOOK, K_KILLER };

struct kcase {
  int n;
  int kind;     /* K_HOOK or K_KILLER */
  int tcp;      /* 0: shared-memory rings, 1: TCP only */
  int mac;      /* MACs over gradient payloads */
  int victim;   /* world rank */
  int step;     /* K_HOOK: before chunk `chunk` of step `step` */
  int chunk;    /* K_KILLER: microseconds the killer waits (spread only) */
  size_t count; /* float32 elements */
  long chunk_bytes;
};

#define MI ((size_t)1 << 20)

/* Chunks: a segment is cut into chunks of at least 32 KiB (ring_allreduce.c)
 * and at most chunk_bytes, aiming at four per segment; the step/chunk pairs
 * below stay inside 2(n-1) steps and the chunks a segment has. */
static const struct kcase cases[] = {
    /* (a) the ring hook, shared memory */
    {2, K_HOOK, 0, 0, 1, 0, 0, MI, 65536},
    {2, K_HOOK, 0, 0, 0, 0, 5, MI, 65536},
    {2, K_HOOK, 0, 0, 1, 1, 3, MI, 65536},
    {2, K_HOOK, 0, 1, 1, 0, 7, MI, 65536},
    {2, K_HOOK, 0, 1, 0, 1, 12, MI, 65536},
    {2, K_HOOK, 0, 0, 1, 0, 2, 6 * MI, 4 << 20},
    {3, K_HOOK, 0, 0, 1, 1, 4, MI, 65536},
    {3, K_HOOK, 0, 1, 2, 3, 2, MI, 65536},
    {3, K_HOOK, 0, 0, 0, 2, 0, MI, 65536},
    {4, K_HOOK, 0, 0, 2, 4, 1, MI, 65536},
    {4, K_HOOK, 0, 1, 3, 1, 3, MI, 65536},
    /* (a) the ring hook, TCP */
    {2, K_HOOK, 1, 0, 1, 0, 1, MI, 65536},
    {2, K_HOOK, 1, 0, 0, 1, 9, MI, 65536},
    {2, K_HOOK, 1, 1, 1, 0, 4, MI, 65536},
    {2, K_HOOK, 1, 1, 0, 1, 14, MI, 65536},
    {2, K_HOOK, 1, 0, 1, 1, 1, 6 * MI, 4 << 20},
    {3, K_HOOK, 1, 0, 1, 2, 3, MI, 65536},
    {3, K_HOOK, 1, 1, 0, 0, 2, MI, 65536},
    {4, K_HOOK, 1, 0, 1, 5, 0, MI, 65536},
    {4, K_HOOK, 1, 1, 2, 2, 2, MI, 65536},
    /* (b) the killer, at an arbitrary moment of back-to-back calls */
    {2, K_KILLER, 0, 0, 1, 0, 0, 2 * MI, 1 << 20},
    {2, K_KILLER, 0, 1, 0, 0, 300, 2 * MI, 1 << 20},
    {2, K_KILLER, 0, 0, 1, 0, 2000, 6 * MI, 4 << 20},
    {3, K_KILLER, 0, 0, 2, 0, 700, 2 * MI, 1 << 20},
    {4, K_KILLER, 0, 1, 1, 0, 1500, MI, 65536},
    {2, K_KILLER, 1, 0, 1, 0, 0, 2 * MI, 1 << 20},
    {2, K_KILLER, 1, 1, 0, 0, 500, 2 * MI, 1 << 20},
    {2, K_KILLER, 1, 0, 0, 0, 3000, 6 * MI, 4 << 20},
    {3, K_KILLER, 1, 1, 1, 0, 900, 2 * MI, 1 << 20},
    {4, K_KILLER, 1, 0, 3, 0, 1200, MI, 65536},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* Exit statuses of a survivor. */
#define XS_OK 0
#define XS_FAIL 1
#define XS_EPROTO 2 /* the failing call said RESIHP_EPROTO */

static int kill_pipe[2] = {-1, -1};
static int pid_pipe[2] = {-1, -1};
static const struct kcase *cur;
static resihp_comm_t *hook_comm;

static void kill_hook(resihp_comm_t *c, int step, size_t chunk) {
  if (c == hook_comm && step == cur->step && (long)chunk == cur->chunk)
    raise(SIGKILL);
}

/* The exact sum of value() (rank_group.c) over the members: value(r, i) is
 * (r + 1) * (i % 13 + 1) - 7, so the sum is a closed form per i. */
static int check_sum(const float *buf, size_t count, uint64_t members) {
  double s1 = 0, m = 0;
  for (int r = 0; r < 64; r++)
    if (members >> r & 1) {
      s1 += r + 1;
      m++;
    }
  for (size_t i = 0; i < count; i++) {
    float want = (float)(s1 * (double)(i % 13 + 1) - 7.0 * m);
    if (buf[i] != want) {
      fprintf(stderr, "mismatch at %zu: got %g want %g\n", i, buf[i], want);
      return 1;
    }
  }
  return 0;
}

static int rank_killed(int rank, int n, void *arg) {
  const struct kcase *k = arg;
  cur = k;
  detect_ms = DETECT_MS;
  transport = k->tcp ? 1 : -1;
  mac_data = k->mac;
  /* Frames of the ring: the single-copy path moves no frames (its kills are
   * in test_allreduce_cma). */
  single_copy = 0;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, k->chunk_bytes, 0, &c))
    return XS_FAIL;
  float *buf = malloc(k->count * sizeof(float));
  float *orig = malloc(k->count * sizeof(float));
  if (!buf || !orig)
    return XS_FAIL;
  fill(orig, k->count, RESIHP_FLOAT32, rank);
  if (rank == k->victim) {
    if (k->kind == K_HOOK) {
      hook_comm = c;
      resihp__ring_test_hook = kill_hook;
    } else {
      char b = 'k';
      if (write(kill_pipe[1], &b, 1) != 1)
        return XS_FAIL;
    }
    /* Until killed; the hook must fire in the first call (a step/chunk
     * that does not exist is a broken case, not a pass). */
    for (int it = 0; it < (k->kind == K_HOOK ? 1 : 10000); it++) {
      memcpy(buf, orig, k->count * sizeof(float));
      if (resihp_allreduce(c, buf, k->count, RESIHP_FLOAT32, RESIHP_OP_SUM))
        break;
    }
    return XS_FAIL; /* never killed */
  }
  int rc = 0, attempts = 0;
  /* Back-to-back calls until the victim's death shows (the hook victim dies
   * in the first one; the killer's may die between two calls). */
  for (int it = 0; it < 10000 && !rc; it++) {
    memcpy(buf, orig, k->count * sizeof(float));
    rc = resihp_allreduce(c, buf, k->count, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (!rc && check_sum(buf, k->count, view_mask(c)))
      return XS_FAIL;
  }
  if (rc == RESIHP_EPROTO) {
    fprintf(stderr, "rank %d: a dead peer was reported as RESIHP_EPROTO\n",
            rank);
    return XS_EPROTO;
  }
  if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) {
    fprintf(stderr, "rank %d: unexpected %s\n", rank, resihp_err_name(rc));
    return XS_FAIL;
  }
  while (rc) {
    if (++attempts > 3)
      return XS_FAIL;
    if (memcmp(buf, orig, k->count * sizeof(float))) {
      fprintf(stderr, "rank %d: buffer modified by a failed call\n", rank);
      return XS_FAIL;
    }
    int failed[MAXN], nf = 0;
    if (resihp_comm_failed(c, failed, MAXN) < 1)
      return XS_FAIL;
    rc = resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf);
    if (rc) {
      fprintf(stderr, "rank %d: shrink %s\n", rank, resihp_err_name(rc));
      return XS_FAIL;
    }
    rc = resihp_allreduce(c, buf, k->count, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (rc && rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT)
      return rc == RESIHP_EPROTO ? XS_EPROTO : XS_FAIL;
  }
  uint64_t want = ((1ull << n) - 1) & ~(1ull << k->victim);
  if (view_mask(c) != want || check_sum(buf, k->count, want)) {
    fprintf(stderr, "rank %d: view %#llx, wanted %#llx, or a wrong sum\n", rank,
            (unsigned long long)view_mask(c), (unsigned long long)want);
    return XS_FAIL;
  }
  put_record(c, attempts, 0);
  resihp_comm_destroy(c);
  free(buf);
  free(orig);
  return XS_OK;
}

/* (b): waits for the victim's byte, then kills it; a child of the test of
 * its own, since run_group does not expose pids (the victim sends its pid
 * on pid_pipe). */
static pid_t start_killer(int delay_us) {
  pid_t k = fork();
  ck_assert_int_ge(k, 0);
  if (k)
    return k;
  close(kill_pipe[1]); /* EOF, not a hang, if the victim never writes */
  close(pid_pipe[1]);
  char b;
  pid_t victim;
  if (read(pid_pipe[0], &victim, sizeof(victim)) != (ssize_t)sizeof(victim) ||
      read(kill_pipe[0], &b, 1) != 1)
    _exit(1);
  /* Only spreads the moment over the victim's calls; nothing waits on it. */
  struct timespec ts = {0, delay_us * 1000L};
  nanosleep(&ts, NULL);
  kill(victim, SIGKILL);
  _exit(0);
}

static int rank_entry(int rank, int n, void *arg) {
  const struct kcase *k = arg;
  if (k->kind == K_KILLER && rank == k->victim) {
    pid_t me = getpid();
    if (write(pid_pipe[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
      return XS_FAIL;
  }
  return rank_killed(rank, n, arg);
}

START_TEST(killed_mid_frame) {
  const struct kcase *k = &cases[_i];
  static struct kcase adhoc;
  const char *spec = getenv(
      "RESIHP_KILL_CASE"); /* n,kind,tcp,mac,victim,step,chunk,count,chunk_bytes
                            */
  if (spec) {
    if (_i)
      return;
    sscanf(spec, "%d,%d,%d,%d,%d,%d,%d,%zu,%ld", &adhoc.n, &adhoc.kind,
           &adhoc.tcp, &adhoc.mac, &adhoc.victim, &adhoc.step, &adhoc.chunk,
           &adhoc.count, &adhoc.chunk_bytes);
    k = &adhoc;
  }
  const char *only = getenv("RESIHP_TEST_SCENARIO"); /* for debugging */
  if (only && atoi(only) != _i)
    return;
  int st[MAXN];
  pid_t killer = -1;
  ck_assert_int_eq(pipe(kill_pipe), 0);
  ck_assert_int_eq(pipe(pid_pipe), 0);
  if (k->kind == K_KILLER)
    killer = start_killer(k->chunk);
  run_group(k->n, rank_entry, (void *)k, st);
  if (killer > 0) {
    int ks;
    ck_assert_int_eq(waitpid(killer, &ks, 0), killer);
    ck_assert_msg(WIFEXITED(ks) && WEXITSTATUS(ks) == 0, "killer %#x", ks);
  }
  close(kill_pipe[0]);
  close(kill_pipe[1]);
  close(pid_pipe[0]);
  close(pid_pipe[1]);
  ck_assert_msg(WIFSIGNALED(st[k->victim]) &&
                    WTERMSIG(st[k->victim]) == SIGKILL,
                "case %d: victim status %#x", _i, st[k->victim]);
  for (int r = 0; r < k->n; r++) {
    if (r == k->victim)
      continue;
    ck_assert_msg(!(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == XS_EPROTO),
                  "case %d (n %d %s%s): rank %d got RESIHP_EPROTO for a dead "
                  "peer",
                  _i, k->n, k->tcp ? "tcp" : "shm", k->mac ? " mac-data" : "",
                  r);
    ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == XS_OK,
                  "case %d: rank %d status %#x", _i, r, st[r]);
  }
  struct record rec[MAXN];
  int nrec = read_records(rec, MAXN);
  ck_assert_int_eq(nrec, k->n - 1);
  for (int j = 1; j < nrec; j++) {
    ck_assert_uint_eq(rec[j].members, rec[0].members);
    ck_assert_uint_eq(rec[j].epoch, rec[0].epoch);
  }
}
END_TEST

/* ---- one link: a real sender killed after exactly k bytes of a frame ----
 * The byte-exact side of the above: the sender (a forked process) makes
 * real frames with the transport (MACs included) into a capture socket,
 * writes the first k bytes of that stream onto the link under test (the
 * socket, or its shared-memory ring with a doorbell), and SIGKILLs itself.
 * The receiver, with no monitor thread to notice the death first, must
 * report RESIHP_EPEER for every k inside a frame: in its header, its
 * payload (also mid-element of a summed receive) and its MAC tag. */

#define LINK_LEN 65536 /* payload bytes of a frame */
#define HDR_LEN sizeof(resihp__frame_hdr_t)

struct link_case {
  int shm;    /* the ring, else the socket */
  int mac;    /* 0: no MACs, 1: header MACs, 2: mac-data */
  int reduce; /* the receiver sums as bytes arrive (post_recv_reduce) */
};

static void link_auth(resihp__msgauth_t a[2], int self) {
  static const uint8_t secret[] = "kill-test-secret";
  memset(a, 0, 2 * sizeof(*a));
  resihp__msgauth_init(&a[1 - self], secret, sizeof(secret), "data", "NS", 2,
                       "NC", 2, self);
}

/* The stream the transport writes for two frames of LINK_LEN bytes: with
 * MAC tags on a socket, without on a ring (tcp.c: a ring has nobody on its
 * path). */
static size_t capture(const struct link_case *lc, const uint8_t *pay,
                      uint8_t *out, size_t cap) {
  int cs[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, cs))
    _exit(10);
  resihp__msgauth_t a[2];
  link_auth(a, 1);
  int fds[2] = {cs[0], -1};
  resihp__transport_t *t;
  if (resihp__tcp_transport_create(1, 2, fds, NULL, NULL, LINK_LEN, -1,
                                   lc->mac && !lc->shm ? a : NULL, lc->mac == 2,
                                   &t))
    _exit(11);
  for (uint32_t f = 0; f < 2; f++) {
    resihp__tag_t tag = {0, 0, f};
    if (t->ops->post_send(t, 0, tag, pay, LINK_LEN))
      _exit(12);
  }
  size_t got = 0;
  int bad;
  for (int k = 0; k < 100000; k++) {
    if (t->ops->progress(t, 0, &bad) < 0)
      _exit(13);
    ssize_t r = read(cs[1], out + got, cap - got);
    if (r > 0)
      got += (size_t)r;
    else if (!t->ops->sends_pending(t, 0))
      return got;
  }
  _exit(14);
}

/* How the sender's stream ends: cut after `at` bytes, with the byte at
 * flip (if below at) changed, or with an impossible ring head published
 * (bad_index); then the sender dies, or stays alive (live) until the
 * receiver is done (it holds the read end of hold). */
struct cut {
  size_t at, flip;
  int bad_index, live;
};
#define NO_FLIP ((size_t)-1)

static void sender(const struct link_case *lc, int fd, resihp__ring_t *out,
                   const struct cut *cu, int hold) {
  static uint8_t pay[LINK_LEN], stream[2 * (LINK_LEN + 256)];
  for (size_t i = 0; i < LINK_LEN; i++)
    pay[i] = (uint8_t)(i * 7);
  size_t total = capture(lc, pay, stream, sizeof(stream)), at = cu->at;
  if (at > total)
    _exit(15);
  if (cu->flip < at)
    stream[cu->flip] ^= 0x40;
  if (out) {
    struct iovec iov = {stream, at};
    int bell = 0;
    if (resihp__ring_write(out, &iov, 1, 0, &bell) != (ssize_t)at)
      _exit(16);
    if (cu->bad_index)
      atomic_store(resihp__ring_test_index(out, 0), (uint64_t)-1);
    if (write(fd, "b", 1) != 1) /* wake the receiver, armed or not */
      _exit(17);
  } else if (resihp__io_full(fd, stream, at, 1, resihp__now_ms() + 10000)) {
    _exit(18);
  }
  if (cu->live) {
    char b;
    while (read(hold, &b, 1) > 0) {
    }
    _exit(0);
  }
  raise(SIGKILL);
}

static void add_u8(void *dst, const void *a, const void *b, size_t n,
                   int dtype) {
  (void)dtype;
  for (size_t i = 0; i < n; i++)
    ((uint8_t *)dst)[i] = ((const uint8_t *)a)[i] + ((const uint8_t *)b)[i];
}

/* Play one sender (see struct cut); frame 0 ends at one_frame. Returns
 * what the receiver's progress reported. A dead sender is waited for
 * first when its stream holds bad bytes (its death then precedes their
 * parsing), not for a mere cut (its EOF may come while the receiver
 * waits). */
static int play(const struct link_case *lc, const struct cut *cu,
                size_t one_frame) {
  int sv[2], hold[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  ck_assert_int_eq(pipe(hold), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  int self = pid ? 0 : 1;
  int fds[2] = {-1, -1};
  fds[1 - self] = sv[self];
  close(sv[1 - self]);
  close(hold[pid ? 0 : 1]);
  resihp__ring_t *in[2] = {0}, *out[2] = {0};
  if (lc->shm && resihp__shm_setup(self, 2, fds, NULL, 1,
                                   resihp__now_ms() + 10000, in, out)) {
    if (!pid)
      _exit(19);
    ck_abort_msg("shared-memory set-up failed");
  }
  if (!pid)
    sender(lc, fds[0], out[0], cu, hold[0]);
  ck_assert_msg(!lc->shm || in[1], "no shared-memory ring");
  int st = 0;
  int garbage = cu->flip < cu->at || cu->bad_index;
  if (garbage && !cu->live)
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  resihp__msgauth_t a[2];
  link_auth(a, 0);
  resihp__transport_t *t;
  ck_assert_int_eq(resihp__tcp_transport_create(0, 2, fds, in, out, LINK_LEN,
                                                -1, lc->mac ? a : NULL,
                                                lc->mac == 2, &t),
                   0);
  static uint8_t got[LINK_LEN], add[LINK_LEN];
  int rc = 0, bad = -1;
  for (uint32_t f = 0; f < 2 && !rc; f++) {
    resihp__tag_t tag = {0, 0, f};
    ck_assert_int_eq(lc->reduce
                         ? t->ops->post_recv_reduce(t, 1, tag, got, add,
                                                    LINK_LEN, 4, add_u8, 0)
                         : t->ops->post_recv(t, 1, tag, got, LINK_LEN),
                     0);
    /* Bounded by the sender's death or its bad bytes; the count only keeps
     * a broken transport from hanging the test. */
    int k, done = 0;
    for (k = 0; k < 500 && !rc && !done; k++) {
      rc = t->ops->progress(t, 100, &bad);
      rc = rc < 0 ? rc : 0;
      done = !rc && t->ops->recv_done(t, 1);
    }
    ck_assert_msg(rc || done, "no outcome at %zu", cu->at);
    /* Frame 0 completes exactly when the cut is past its end. */
    ck_assert_msg((f == 0) == (cu->at >= one_frame) || rc,
                  "frame %u at %zu: completed too early", f, cu->at);
  }
  close(hold[1]);
  if (!garbage || cu->live)
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  if (cu->live)
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sender %#x", st);
  else
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "sender status %#x", st);
  ck_assert_int_eq(bad, 1);
  t->ops->destroy(t);
  return rc;
}

/* _i: bit 0 the ring, bit 1 a summed receive, _i / 4 the MAC mode. */
START_TEST(link_cut_at_every_part) {
  struct link_case lc = {.shm = _i & 1, .reduce = _i >> 1 & 1, .mac = _i / 4};
  /* A ring link carries no tags whatever the MAC mode. */
  size_t tl = lc.mac && !lc.shm ? RESIHP__MAC_LEN : 0;
  size_t F = HDR_LEN + LINK_LEN + tl;
  size_t at[] = {1,
                 HDR_LEN / 2,
                 HDR_LEN - 1,
                 HDR_LEN,
                 HDR_LEN + 1,
                 HDR_LEN + LINK_LEN / 2 + 1,
                 HDR_LEN + LINK_LEN - 1,
                 HDR_LEN + LINK_LEN,
                 HDR_LEN + LINK_LEN + 1,
                 F - 1,
                 F + 3,
                 F + HDR_LEN + 5,
                 2 * F - 1};
  for (size_t j = 0; j < sizeof(at) / sizeof(at[0]); j++) {
    if (at[j] == F || (!tl && at[j] >= HDR_LEN + LINK_LEN && at[j] < F))
      continue; /* a whole frame: not a cut */
    struct cut cu = {.at = at[j], .flip = NO_FLIP};
    int rc = play(&lc, &cu, F);
    ck_assert_msg(rc == RESIHP_EPEER,
                  "%s%s, mac %d: sender killed after %zu of %zu bytes: %s",
                  lc.shm ? "shm" : "tcp", lc.reduce ? " summed" : "", lc.mac,
                  at[j], 2 * F, resihp_err_name(rc));
  }
}
END_TEST

/* Bytes that cannot be right - a header's magic, a payload byte under
 * mac-data, a MAC tag, a ring index - are RESIHP_EPROTO from a live peer,
 * and RESIHP_EPEER from one that is dead by the time they are parsed.
 * _i: bit 0 the ring, bit 1 the sender stays alive, _i / 4 what is bad. */
START_TEST(garbage_live_or_dead) {
  int what = _i / 4;
  struct link_case lc = {.shm = _i & 1,
                         .mac = what == 0   ? 0
                                : what == 1 ? 2
                                            : 1};
  size_t tl = lc.mac && !lc.shm ? RESIHP__MAC_LEN : 0;
  size_t F = HDR_LEN + LINK_LEN + tl;
  struct cut cu = {.at = F + 100, .flip = NO_FLIP, .live = _i >> 1 & 1};
  if (lc.shm && (what == 1 || what == 2))
    return; /* MACs: the socket only (a ring has nobody on its path) */
  if (what == 0)
    cu.flip = 1; /* the magic */
  else if (what == 1)
    cu.flip = HDR_LEN + 1000; /* payload, covered by the MAC */
  else if (what == 2)
    cu.flip = HDR_LEN + LINK_LEN + 3; /* the tag */
  else if (!lc.shm)
    return; /* ring indices: the ring only */
  else
    cu.bad_index = 1;
  int rc = play(&lc, &cu, (size_t)-1); /* frame 0 must not complete */
  ck_assert_msg(rc == (cu.live ? RESIHP_EPROTO : RESIHP_EPEER),
                "%s, bad %d, sender %s: %s", lc.shm ? "shm" : "tcp", what,
                cu.live ? "alive" : "dead", resihp_err_name(rc));
}
END_TEST

/* The control link too: a rank writes a malformed control frame and dies
 * while the survivor is stopped, so that its monitor finds both the bytes
 * and the closed link when it looks; the survivor's next all-reduce must
 * say RESIHP_EPEER (the first cause the monitor recorded), not EPROTO. */
START_TEST(ctrl_garbage_then_dead) {
  int ready[2], go[2];
  bind_endpoints(2);
  ck_assert_int_eq(pipe(ready), 0);
  ck_assert_int_eq(pipe(go), 0);
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    ck_assert_int_ge(pid[r], 0);
    if (pid[r])
      continue;
    close(lfds[1 - r]);
    alarm(40);
    resihp_comm_t *c;
    if (make_comm(r, 2, SECRET, 4096, 0, &c) || write(ready[1], "r", 1) != 1)
      _exit(XS_FAIL);
    char b;
    if (read(go[0], &b, 1) != 1)
      _exit(XS_FAIL);
    if (r == 1) { /* the victim: garbage, then death */
      uint8_t junk[sizeof(resihp__frame_hdr_t)];
      memset(junk, 0xab, sizeof(junk));
      if (write(c->ctrl_fds[0], junk, sizeof(junk)) != (ssize_t)sizeof(junk))
        _exit(XS_FAIL);
      raise(SIGKILL);
    }
    /* The survivor, continued: wait until the monitor has seen it all. */
    int failed[MAXN];
    for (int k = 0; k < 4000 && resihp_comm_failed(c, failed, MAXN) < 1; k++) {
      struct timespec ts = {0, 5000000};
      nanosleep(&ts, NULL);
    }
    float x[4] = {1, 2, 3, 4};
    int rc = resihp_allreduce(c, x, 4, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (rc != RESIHP_EPEER)
      fprintf(stderr, "survivor: %s\n", resihp_err_name(rc));
    _exit(rc == RESIHP_EPEER    ? XS_OK
          : rc == RESIHP_EPROTO ? XS_EPROTO
                                : XS_FAIL);
  }
  close(lfds[0]);
  close(lfds[1]);
  char b[2];
  ck_assert_int_eq(read(ready[0], b, 1), 1);
  ck_assert_int_eq(read(ready[0], b + 1, 1), 1);
  int st;
  ck_assert_int_eq(kill(pid[0], SIGSTOP), 0);
  ck_assert_int_eq(waitpid(pid[0], &st, WUNTRACED), pid[0]);
  ck_assert(WIFSTOPPED(st));
  ck_assert_int_eq(write(go[1], "gg", 2), 2); /* the survivor reads later */
  ck_assert_int_eq(waitpid(pid[1], &st, 0), pid[1]);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "victim %#x", st);
  ck_assert_int_eq(kill(pid[0], SIGCONT), 0);
  ck_assert_int_eq(waitpid(pid[0], &st, 0), pid[0]);
  ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == XS_EPROTO),
                "a dead peer's last bytes made RESIHP_EPROTO");
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == XS_OK, "survivor %#x", st);
  close(ready[0]);
  close(ready[1]);
  close(go[0]);
  close(go[1]);
}
END_TEST

/* ---- NaN and infinities (resihp/allreduce.h) ----------------------------- */

#define NV 8
static int res_pipe[2] = {-1, -1};

/* Contribution of world rank r to element i (rank 0 and 1 hold the odd
 * values, the others plain ones). */
static float nan_input(int r, int i) {
  switch (i) {
  case 0: /* NaN + finite */
    return r == 0 ? NAN : 1.0f;
  case 1: /* +Inf + finite */
    return r == 1 ? INFINITY : 2.0f;
  case 2: /* +Inf + -Inf (+ finite) */
    return r == 0 ? -INFINITY : r == 1 ? INFINITY : 3.0f;
  case 3: /* +Inf alone, others 0 */
    return r == 0 ? INFINITY : 0.0f;
  case 4: /* -Inf alone, others 0 */
    return r == 1 ? -INFINITY : 0.0f;
  case 5: /* finite sum beyond float's range */
    return FLT_MAX;
  case 6: /* +Inf and finite values of the same sign */
    return r == 0 ? INFINITY : 1.0f;
  default:
    return (float)(r + 1);
  }
}

static int rank_nan(int rank, int n, void *arg) {
  int det = *(int *)arg;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, 4096, det, &c))
    return 1;
  float buf[NV];
  for (int i = 0; i < NV; i++)
    buf[i] = nan_input(rank, i);
  int rc = resihp_allreduce(c, buf, NV, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (rc) {
    fprintf(stderr, "rank %d: %s\n", rank, resihp_err_name(rc));
    return 1;
  }
  if (write(res_pipe[1], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
    return 1;
  resihp_comm_destroy(c);
  return 0;
}

/* _i: ranks 2 or 3, float (even) or deterministic (odd). */
START_TEST(nan_and_inf) {
  int n = 2 + _i / 2, det = _i % 2, st[MAXN];
  ck_assert_int_eq(pipe(res_pipe), 0);
  run_group(n, rank_nan, &det, st);
  close(res_pipe[1]);
  expect_all_ok(n, st);
  float got[MAXN][NV];
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(read(res_pipe[0], got[r], sizeof(got[r])),
                     (ssize_t)sizeof(got[r]));
  close(res_pipe[0]);
  /* Bit for bit the same everywhere, NaN payloads included. */
  for (int r = 1; r < n; r++)
    ck_assert_msg(!memcmp(got[r], got[0], sizeof(got[0])),
                  "%d ranks det %d: results differ between ranks", n, det);
  const float *g = got[0];
  float others = 0; /* element 7: the plain sum */
  for (int r = 0; r < n; r++)
    others += (float)(r + 1);
  ck_assert_float_eq(g[7], others);
  if (!det) {
    ck_assert(isnan(g[0]));
    ck_assert(isinf(g[1]) && g[1] > 0);
    ck_assert(isnan(g[2]));
    ck_assert(isinf(g[3]) && g[3] > 0);
    ck_assert(isinf(g[4]) && g[4] < 0);
    ck_assert(isinf(g[5]) && g[5] > 0);
    ck_assert(isinf(g[6]) && g[6] > 0);
    return;
  }
  int fb = resihp_fixed_frac_bits();
  float top = ldexpf(1.0f, 63 - fb); /* INT64_MAX * 2^-fb, rounded */
  /* NaN counts as 0: the others' sum, exactly. */
  ck_assert_float_eq(g[0], (float)(n - 1));
  /* A saturated element with every other contribution 0: +-2^(63-fb). */
  ck_assert_float_eq(g[3], top);
  ck_assert_float_eq(g[4], -top);
  /* Everything else that saturates or overflows wraps: finite, never Inf
   * or NaN. */
  for (int i = 1; i < 7; i++)
    ck_assert_msg(isfinite(g[i]), "det element %d: %g", i, g[i]);
  /* Element 1 (Inf + 2.0 each from the others) wrapped below zero. */
  ck_assert(g[1] < 0);
}
END_TEST

/* ---- a rank killed during the shared-memory set-up -----------------------
 * Rank 1 of 3 stops itself at phase `phase` of resihp__shm_setup (after
 * its first peer; the hook's raise) and the parent SIGKILLs it there from
 * outside. Then a later set-up on the host (a fresh pair of ranks) runs,
 * and /dev/shm must hold no ring of any of the first three processes:
 * a ring of a live creator is unlinked once its peer mapped it or the
 * set-up ended, and a killed creator's ring by the next set-up. */
static int setup_phase = -1;
static int shm_pid_pipe[2] = {-1, -1};

static void stop_at_phase(int ph, int peer) {
  (void)peer;
  if (ph == setup_phase) {
    setup_phase = -1; /* once */
    raise(SIGSTOP);
  }
}

static int setup_rank(int rank, int n, void *arg) {
  int victim = *(int *)arg;
  pid_t me = getpid();
  if (write(shm_pid_pipe[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
    return XS_FAIL;
  if (rank == victim)
    resihp__shm_test_hook = stop_at_phase;
  resihp_comm_t *c = NULL;
  int rc = make_comm(rank, n, SECRET, 0, 0, &c);
  if (rank == victim)
    return XS_FAIL; /* it should have been killed */
  (void)rc;         /* a survivor's set-up may fail or succeed */
  resihp_comm_destroy(c);
  return XS_OK;
}

static int plain_rank(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c = NULL;
  int rc = make_comm(rank, n, SECRET, 0, 0, &c);
  resihp_comm_destroy(c);
  return rc ? XS_FAIL : XS_OK;
}

/* Names in /dev/shm of rings created by one of pids. */
static int rings_of(const pid_t *pids, int n, char *first, size_t len) {
  DIR *d = opendir("/dev/shm");
  ck_assert_ptr_nonnull(d);
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int pid;
    if (sscanf(e->d_name, "resihp-%d-", &pid) != 1)
      continue;
    for (int i = 0; i < n; i++)
      if (pid == (int)pids[i]) {
        if (!found++)
          snprintf(first, len, "%s", e->d_name);
      }
  }
  closedir(d);
  return found;
}

START_TEST(shm_setup_killed_at_every_phase) {
  int victim = 1, st[MAXN];
  transport = -1; /* shared memory between ranks of this host */
  ck_assert_int_eq(pipe(shm_pid_pipe), 0);
  setup_phase = _i;
  kill_stopped_rank = victim;
  run_group(3, setup_rank, &victim, st);
  ck_assert_msg(WIFSIGNALED(st[victim]) && WTERMSIG(st[victim]) == SIGKILL,
                "phase %d: the victim was not killed there (status %d)", _i,
                st[victim]);
  for (int r = 0; r < 3; r++)
    if (r != victim)
      ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == XS_OK,
                    "phase %d: rank %d status %d", _i, r, st[r]);
  close(shm_pid_pipe[1]);
  pid_t pids[3];
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(read(shm_pid_pipe[0], &pids[i], sizeof(pids[i])),
                     sizeof(pids[i]));
  close(shm_pid_pipe[0]);
  /* the next set-up on this host */
  run_group(2, plain_rank, NULL, st);
  expect_all_ok(2, st);
  char name[NAME_MAX + 1] = "";
  int left = rings_of(pids, 3, name, sizeof(name));
  ck_assert_msg(left == 0,
                "phase %d: %d shared-memory ring(s) left in /dev/shm, e.g. %s",
                _i, left, name);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("allreduce_kill");
  TCase *tc = tcase_create("kill");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, killed_mid_frame, 0, NCASES);
  suite_add_tcase(s, tc);
  tc = tcase_create("link");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, link_cut_at_every_part, 0, 12);
  tcase_add_loop_test(tc, garbage_live_or_dead, 0, 16);
  tcase_add_test(tc, ctrl_garbage_then_dead);
  suite_add_tcase(s, tc);
  tc = tcase_create("setup");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, shm_setup_killed_at_every_phase, 0,
                      RESIHP__SHM_NPHASES);
  suite_add_tcase(s, tc);
  tc = tcase_create("nan");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, nan_and_inf, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
