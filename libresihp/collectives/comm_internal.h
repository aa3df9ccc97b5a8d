/* SPDX-License-Identifier: BSD-3-Clause */
/* Internals of a communicator, shared by comm.c (membership, monitor,
 * agreement) and ring_allreduce.c (the algorithm). */
#ifndef RESIHP_COLLECTIVES_COMM_INTERNAL_H
#define RESIHP_COLLECTIVES_COMM_INTERNAL_H

#include "../transport/transport.h"

#include <resihp/allreduce.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define RESIHP__SET_BYTES (RESIHP_COMM_MAX_RANKS / 8)

typedef struct {
  uint8_t b[RESIHP__SET_BYTES];
} resihp__set_t;

static inline void resihp__set_add(resihp__set_t *s, int i) {
  s->b[i >> 3] |= (uint8_t)(1u << (i & 7));
}
static inline int resihp__set_has(const resihp__set_t *s, int i) {
  return (s->b[i >> 3] >> (i & 7)) & 1;
}

/* A control frame as received (header and, for sets, the payload; the
 * MAC tag that follows them). */
struct rxstate {
  resihp__frame_hdr_t h;
  uint8_t set[RESIHP__SET_BYTES];
  uint8_t tag[RESIHP__MAC_LEN];
  size_t got; /* bytes of header + set + tag so far */
};

/* Reading control frames (ctrl_frame.c): the next bytes of the frame in r
 * go to *dst, at most the returned count (tag_len: RESIHP__MAC_LEN, or 0
 * without MACs). Once n of them arrived, resihp__ctrl_got returns 0 (more
 * to come), 1 (a whole frame whose header is sound and whose MAC checked
 * out with auth, when not NULL; the caller then sets r->got = 0) or
 * RESIHP_EPROTO (logged). set_len is the set size of this world. */
size_t resihp__ctrl_want(struct rxstate *r, size_t tag_len, uint8_t **dst);
int resihp__ctrl_got(struct rxstate *r, size_t n, int peer, size_t set_len,
                     resihp__msgauth_t *auth);

/* Control frames of the next epoch that arrived before this rank got
 * there; replayed when it commits. */
#define RESIHP__STASH_MAX 8
struct resihp__stash {
  int n;
  struct rxstate f[RESIHP__STASH_MAX];
};

struct mbox {
  int have;
  uint32_t round;
  resihp__set_t set;
};

struct resihp_comm {
  int world_rank, world_size;
  int *members, nmembers, my_index; /* the current view */
  uint32_t epoch, seq;
  int detect_ms, hb_ms, deterministic, frac_bits, unprotected, op_ms;
  int mac_data; /* MACs over gradient payloads too (control: always) */
  size_t chunk_bytes;
  size_t small_max; /* small-message path up to this size (0: ring only) */
  resihp__transport_t *tp;
  resihp__transport_t *gpu; /* NCCL data plane, when attached */
  struct resihp__staged *staged; /* device buffers without NCCL (CUDA) */
  /* NCCL was attached and then lost (a failed shrink): device all-reduces
   * must not fall back to the staged path on their own, since the other
   * ranks may still use NCCL. Cleared by the next attach. */
  int gpu_detached;
  int gpu_device;  /* the CUDA device NCCL was attached on */
  void *fixed_dev; /* device int64 sums of the deterministic NCCL path */
  size_t fixed_dev_cap;
  int *data_fds; /* copies for the link-cut test hook */
  int *ctrl_fds;
  /* Per-message MACs of the control links, by world rank: tx under
   * ctrl_mu, rx by the monitor thread only. */
  resihp__msgauth_t *ctrl_auth;
  /* Monitor thread: owned by the communicator, joined by destroy. */
  pthread_t monitor;
  int monitor_running;
  int stop_pipe[2];
  int notify_fd; /* eventfd: monitor -> algorithm */
  pthread_mutex_t mu;   /* everything below */
  pthread_cond_t cv;
  pthread_mutex_t ctrl_mu; /* serialises writes on control sockets */
  uint8_t *in_view;     /* by world rank */
  uint8_t *ctrl_closed; /* by world rank: the monitor saw EOF/error */
  resihp__set_t dead;   /* noticed here: socket error, silence, bad frame */
  int dead_code;        /* RESIHP_EPEER or ETIMEDOUT: first cause */
  resihp__set_t blamed; /* suspects reported by peers' aborts */
  resihp__set_t departed; /* in dead after a BYE: orderly, data still due */
  int64_t *abort_seq;   /* by world rank: seq+1 of its last abort, 0 none */
  int64_t *done_seq;    /* by world rank: seq+1 of its last DONE */
  struct mbox (*mbox)[2];
  atomic_int failed; /* fast check for the algorithm */
  int excluded_by;   /* a member whose agreement set named this rank, or -1 */
  /* Agreement already concluded elsewhere (a DECIDED for this epoch), and
   * what this rank decided when it left the previous epoch, to answer
   * peers that are still agreeing on it. */
  int decided_have;
  resihp__set_t decided;
  int prev_valid;
  resihp__set_t prev_decided;
  uint8_t *reply_decided; /* by world rank */
  struct resihp__stash *stash; /* by world rank */
  /* Point to point (p2p.c): message numbers of each ordered pair in epoch
   * p2p_epoch, by world rank (NULL until the first call), and the
   * messages sent to this rank itself, oldest first. */
  uint32_t p2p_epoch;
  uint32_t *p2p_tx, *p2p_rx;
  struct resihp__selfmsg *self_head, *self_tail;
  /* Single copy (cma_allreduce.c): pid of each same-host peer whose
   * memory this rank may read (0: none), each rank's reach set as it told
   * (cma.h), and the verdict for the view of epoch cma_epoch (-1: none). */
  pid_t *cma_pid;
  int *cma_pidfd;
  resihp__set_t *cma_reach;
  int64_t cma_epoch;
  int cma_ok;
  /* Private buffers reused across calls. */
  void *work, *staging;
  size_t work_cap, staging_cap;
};

/* Control messages (monitor and algorithm threads may both call). */
void resihp__comm_send_ctrl(resihp_comm_t *c, int peer, int type, uint32_t seq,
                            const resihp__set_t *set);
/* The same with an explicit epoch in the header (answers about an epoch
 * this rank has left). */
void resihp__comm_send_ctrl_epoch(resihp_comm_t *c, int peer, int type,
                                  uint32_t seq, const resihp__set_t *set,
                                  uint32_t epoch, int use_epoch);
void resihp__comm_broadcast_ctrl(resihp_comm_t *c, int type, uint32_t seq,
                                 const resihp__set_t *set);
/* Record a failure of peer noticed by this process. */
void resihp__comm_mark_dead(resihp_comm_t *c, int peer, int code);
/* resihp_comm_create for one of several communicators whose ranks share
 * their listening sockets (a rank in the groups of several runs of
 * layers, recovery/layer_groups.h): group names it in the handshake, so a
 * peer's hello for another group is refused (it dials again) and never
 * joins this one. Set up such groups one after the other, in the same
 * order on every rank (ascending group), so that none waits for a peer
 * busy with a later one. resihp_comm_create is group 0. */
int resihp__comm_create_group(const resihp_comm_opts_t *o, uint32_t group,
                              resihp_comm_t **out);

/* A call of this rank failed (rc; bad_peer, a world rank, or -1): mark the
 * peer, cancel the transport, broadcast ABORT with the suspects and return
 * the code the caller sees (allreduce.c). what names the call in logs. */
int resihp__comm_fail(resihp_comm_t *c, int rc, int bad_peer, const char *what);
/* Whether peer (world rank) broke off what this rank does with it alone
 * (p2p.c): this rank excluded (RESIHP_EEXCLUDED), any member aborted, or
 * peer failed (not merely left: what it sent before BYE still arrives).
 * 0 when neither. */
int resihp__comm_peer_broken(resihp_comm_t *c, int peer);

/* At the start of a call: 0, or the error of a communicator that failed
 * (RESIHP_EEXCLUDED, or as resihp__comm_fail). */
int resihp__comm_enter(resihp_comm_t *c, const char *what);

/* Point to point (p2p.c): before the communicator goes, let sends that
 * were handed to the transport leave (bounded by op_ms, stops at the first
 * failure); then free the p2p state. */
void resihp__p2p_flush(resihp_comm_t *c);
void resihp__p2p_free(resihp_comm_t *c);
/* Test hook (fault injection): called before a receive posts frame `frame`
 * (send 0) and before a broadcast sends it on (send 1). */
extern void (*resihp__p2p_test_hook)(resihp_comm_t *c, int send, size_t frame);

/* The chunk-pipelined ring over the transport (ring_allreduce.c). */
int resihp__ring_allreduce(resihp_comm_t *c, const void *in, void *work,
                           void *staging, size_t count, int wire_dtype,
                           int *bad_peer);

/* One phase of the ring alone (a sharded replica's collectives, shard.c):
 * RESIHP__RING_RS, n-1 steps after which member p holds segment p (its
 * resihp_block) reduced in work, in read-only (work must differ); or
 * RESIHP__RING_AG, n-1 steps that send segment p of work (in == work) and
 * fill every other segment of work. The all-reduce runs both. */
enum { RESIHP__RING_RS = 1, RESIHP__RING_AG = 2, RESIHP__RING_BOTH = 3 };
int resihp__ring_phase(resihp_comm_t *c, const void *in, void *work,
                       size_t count, int dtype, int phase, int *bad_peer);
/* The outcome round after an algorithm ran here without error: 0 once
 * every member is done, else the code to hand to resihp__comm_fail
 * (allreduce.c). */
int resihp__comm_commit(resihp_comm_t *c);
/* *buf holds at least want bytes (grown, contents lost), or RESIHP_ENOMEM,
 * logged (allreduce.c). */
int resihp__reserve(void **buf, size_t *cap, size_t want);
/* count sums of dtype from work to buf, divided by div (1: a copy). */
void resihp__copy_out(void *buf, const void *work, size_t count, int dtype,
                      double div);

/* One wait of an algorithm on the transport (ring_allreduce.c):
 * RESIHP_EABORTED once the communicator failed, the transport's error
 * (*bad_peer set), RESIHP_ETIMEDOUT when nothing moved for op_ms (10
 * detection bounds unprotected; the caller names whom to blame), else 0.
 * *last_progress: when something last moved; what: for the log. */
int resihp__algo_wait(resihp_comm_t *c, int64_t *last_progress,
                      int *bad_peer, const char *what);

/* Test hook: called before each chunk is sent (fault-injection tests). */
extern void (*resihp__ring_test_hook)(resihp_comm_t *c, int step,
                                      size_t chunk);

/* Tests: called by resihp_comm_shrink (without c->mu) at point 0, when a
 * round's agreement messages are in and before this rank's own detections
 * join the set, and at point 1, once decided and before the commit; round
 * is the agreement's round. NULL in production. */
extern void (*resihp__shrink_test_hook)(resihp_comm_t *c, int point,
                                        uint32_t round);

/* Small messages (small_allreduce.c): every member sends its buffer to
 * every other and adds the n contributions in view order (bitwise equal
 * results everywhere). slots: n * count elements of dtype. Deterministic
 * mode: fx (else NULL) as for the ring, dtype RESIHP_FIXED64, in == work
 * (count int64, written here when the values do not fit the narrow form
 * in fx->narrow, count + 1 int32), the result in fx->out. Otherwise as
 * resihp__ring_allreduce. */
#define RESIHP__STEP_SMALL (UINT32_MAX - 4)
struct resihp__ring_fixed;
/* A view of one member, or nothing to add (ring and small path): in (or
 * fx's values) to work (fx->out). Returns 0. */
int resihp__allreduce_alone(const struct resihp__ring_fixed *fx, const void *in,
                            void *work, size_t count, size_t esz);
int resihp__small_allreduce(resihp_comm_t *c, const void *in,
                            const struct resihp__ring_fixed *fx, void *work,
                            void *slots, size_t count, int dtype,
                            int *bad_peer);
/* Whether an all-reduce of bytes (wire size) takes the small-message path:
 * the same answer on every member (size, view size, settings). */
int resihp__small_fits(const resihp_comm_t *c, size_t bytes);
/* Test hook: called before send k (stage k = 0..n-2) and once every
 * contribution arrived (stage n-1). */
extern void (*resihp__small_test_hook)(resihp_comm_t *c, int stage);

/* Single-copy all-reduce between ranks of one host (cma_allreduce.c). */
struct resihp__ring;
/* At creation, after the rings (rin[i] != NULL: peer i shares them), before
 * the transport takes the data links: fills cma_pid, cma_pidfd and
 * cma_reach. */
int resihp__cma_comm_setup(resihp_comm_t *c, int want, struct resihp__ring **rin,
                           resihp__msgauth_t *data_auth, int64_t deadline_ms);
/* Buffers of at least this many bytes (count times the wire type) take the
 * single-copy path when every pair of the view can use it. */
#define RESIHP__CMA_MIN_BYTES ((size_t)256 << 10)
/* Pieces read per process_vm_readv: reduce-scatter (three fit the L2
 * cache: resihp__cma_allreduce's staging) and all-gather. */
#define RESIHP__CMA_PIECE ((size_t)128 << 10)
#define RESIHP__CMA_STAGING (3 * RESIHP__CMA_PIECE)
#define RESIHP__CMA_GATHER_PIECE ((size_t)256 << 10)
/* Whether this call takes the single-copy path: the same answer on every
 * member of the view for the same count (no message needed). */
int resihp__cma_chosen(resihp_comm_t *c, size_t bytes);
/* The algorithm (in and work as for the ring; in == work allowed). */
int resihp__cma_allreduce(resihp_comm_t *c, const void *in, void *work,
                          void *staging, size_t count, int dtype,
                          int *bad_peer);
/* One phase alone, as resihp__ring_phase (staging as for the all-reduce;
 * the all-gather needs none). */
int resihp__cma_phases(resihp_comm_t *c, const void *in, void *work,
                       void *staging, size_t count, int dtype, int phases,
                       int *bad_peer);
/* Test hooks: called before each piece this rank reads (phase 0:
 * reduce-scatter, 1: all-gather), and the number of calls that took the
 * single-copy path in this process. */
extern void (*resihp__cma_test_hook)(resihp_comm_t *c, int phase,
                                     size_t piece);
extern atomic_long resihp__cma_calls;

/* Element-wise kernels (reduce.c). */
size_t resihp__dtype_size(int dtype);
/* dst[i] += src[i] */
void resihp__reduce_sum(void *dst, const void *src, size_t n, int dtype);
/* dst[i] = a[i] + b[i]; dst may be a or b, other overlaps are not allowed.
 * A resihp__combine_fn for post_recv_reduce. */
void resihp__reduce_sum_to(void *dst, const void *a, const void *b, size_t n,
                           int dtype);
#define RESIHP__DTYPE_INT64 RESIHP_FIXED64

#endif
