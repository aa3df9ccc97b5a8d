/* SPDX-License-Identifier: BSD-3-Clause */
/* Fault-tolerant all-reduce across data-parallel replicas.
 *
 * A communicator (resihp_comm_t) joins the ranks of one data-parallel group
 * over authenticated TCP connections (a full mesh: one data and one control
 * connection per pair); peers on the same host move data through
 * shared-memory rings instead, the socket then only carrying doorbells.
 * resihp_allreduce() runs a chunk-pipelined ring (reduce-scatter then
 * all-gather) over the current view: the live members of the current membership
 * epoch.
 *
 * Failures. A peer that dies or whose link is cut is noticed at once (socket
 * errors); one that hangs is judged by the detection bound T
 * (RESIHP_DETECT_TIMEOUT_MS, default 1 s): a monitor thread exchanges
 * heartbeats every hb (RESIHP_HEARTBEAT_MS, at most T/3) on the control
 * connections and declares a peer failed once it has been silent for T + hb.
 * So a peer that stops (SIGSTOP, a hung host) for less than T is never
 * declared failed, and one that stays stopped is declared failed between T
 * and T + hb after it stopped (plus scheduling delays on a busy host). A
 * rank whose collective fails broadcasts an abort carrying its suspects. Every
 * survivor's resihp_allreduce() then returns RESIHP_EPEER (a socket failed or a
 * peer reported a failure) or RESIHP_ETIMEDOUT (a peer fell silent);
 * resihp_comm_failed() names the suspects. The caller's buffer is left exactly
 * as it was. The caller then calls resihp_comm_shrink(): the survivors agree on
 * the union of their suspicion sets, move to the next epoch without those
 * ranks, and the caller retries the all-reduce.
 *
 * Outcome. A call returns 0 on a rank only once every member has finished
 * its part of the ring (a DONE message) or is dead in this rank's eyes, and
 * an abort from any member fails it. So, with one failure per collective,
 * either every survivor keeps the result (the dead rank's contribution
 * included: it was complete) or every survivor gets the error, with its
 * buffer untouched, and retries: survivors never diverge.
 *
 * Ranks. "World ranks" are the 0..n-1 positions of the endpoint list given at
 * creation; they never change. resihp_comm_rank()/size() are positions in the
 * current view, which shrink renumbers densely in world-rank order.
 *
 * Threads. A communicator is used by one thread at a time; its monitor
 * thread is private and joined by resihp_comm_destroy().
 *
 * Ownership. resihp_comm_create() copies everything it is given (endpoints,
 * secret); it does not take ownership of opts->listen_fd. The communicator
 * is freed by resihp_comm_destroy(), which accepts NULL.
 */
#ifndef RESIHP_ALLREDUCE_H
#define RESIHP_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest world a communicator supports: a data-parallel group of 100K
 * single-GPU replicas. Frames carry only a world's worth of rank set
 * ((nranks + 7) / 8 bytes); this bound sizes the sets held in memory. */
#define RESIHP_COMM_MAX_RANKS 131072

typedef struct resihp_comm resihp_comm_t;

typedef enum {
  RESIHP_FLOAT32 = 0,
  RESIHP_BFLOAT16 = 1, /* uint16_t storage; summed in float, rounded to even */
  RESIHP_FLOAT64 = 2,
  RESIHP_FIXED64 = 3, /* int64 fixed point (resihp_fixed_*): exact sums */
} resihp_dtype_t;

typedef enum {
  RESIHP_OP_SUM = 0,
  RESIHP_OP_AVG = 1, /* sum divided by the size of the current view */
} resihp_op_t;

typedef struct {
  int rank;                     /* world rank of this process, 0..nranks-1 */
  int nranks;                   /* 1..RESIHP_COMM_MAX_RANKS */
  const char *const *endpoints; /* nranks "host:port" (IPv4 or name) */
  /* A listening socket already bound to endpoints[rank], or -1 to bind
   * it here. Not closed by the library. */
  int listen_fd;
  /* Per-job secret. NULL: read the file named by RESIHP_SECRET_FILE. */
  const void *secret;
  size_t secret_len;
  /* 0 = take from the settings registry (RESIHP_*). */
  int detect_timeout_ms;
  int heartbeat_ms;
  int connect_timeout_ms; /* whole mesh set-up; 0 = 30000 */
  /* Bound on one collective waiting for a peer that is alive (heartbeats
   * arrive) but does not take part, e.g. a replica still checkpointing;
   * 0 = 300000. Dead or hung peers are caught by the detection bound. */
  int op_timeout_ms;
  long chunk_bytes;
  /* -1 = registry, 0 = off, 1 = on. */
  int deterministic;
  /* Host data plane: -1 = RESIHP_TRANSPORT (auto|tcp|shm|nccl), 0 = auto
   * (shared memory with peers on this host, TCP otherwise; also what shm
   * and nccl mean for host buffers), 1 = TCP only. */
  int transport;
  /* 0 = fault tolerant (default). 1 = plain in-place ring, no private copy
   * and no monitor thread: a failure may leave the buffer half reduced.
   * Exists to measure what fault tolerance costs. */
  int unprotected;
  /* Every frame after the handshake carries a MAC with a sequence number
   * (keyed by the handshake): control frames always, and the header of
   * every data frame. mac_data extends it to gradient payloads, so that
   * nobody on the path can change the numbers either: -1 = registry
   * (RESIHP_MAC_DATA, mac-data, default off), 0 = off, 1 = on. Every rank
   * must use the same value. A frame whose MAC fails makes its sender a
   * suspect, like a malformed frame (RESIHP_EPROTO). Frames between ranks
   * of one host that go through shared-memory rings carry none: a ring is
   * memory of the two processes (mode 0600, removed from /dev/shm once
   * both mapped it), and whoever else could write it (their user, root)
   * could read the keys as well. */
  int mac_data;
  /* All-reduces of at most this many bytes (wire size) use the
   * small-message algorithm (direct exchange: fewer steps, more bytes),
   * larger ones the ring; it also applies only while (view size - 1) times
   * the size stays small. -1 = registry (RESIHP_SMALL_MAX, small-max,
   * default 32 KiB), 0 = ring always. Every rank must use the same value. */
  long small_max;
  /* Large all-reduces between ranks of one host read each other's buffers
   * with process_vm_readv (one copy instead of two through the
   * shared-memory rings) where the kernel allows it, rings otherwise:
   * -1 = registry (RESIHP_SINGLE_COPY, single-copy, default off: slower than
   * the rings where the kernel pins pages slowly, e.g. paravirtualised guests),
   * 0 = off, 1 = on. A pair of ranks uses it only when both want it. */
  int single_copy;
  /* Ends a set-up that waits for a peer that will never come: while the
   * mesh set-up waits for a peer (to listen, or to dial in), it calls
   * setup_abort(setup_abort_arg) at least every 100 ms, and a non-zero
   * answer ends resihp_comm_create at once with RESIHP_EPEER. A job calls
   * it when its coordinator has moved on (a member died, a new epoch):
   * the set-up then costs the detection bound, not connect_timeout_ms.
   * NULL: only the deadline ends a set-up. */
  int (*setup_abort)(void *setup_abort_arg);
  void *setup_abort_arg;
} resihp_comm_opts_t;

/* Defaults: listen_fd -1, deterministic -1, transport -1, mac_data -1,
 * small_max -1, single_copy -1, everything else 0/NULL. */
void resihp_comm_opts_init(resihp_comm_opts_t *opts);

/* Connect to every other rank, authenticate each connection with the
 * secret (HMAC-SHA-256 challenge-response both ways) and start the monitor.
 * Blocks until the full mesh is up or connect_timeout_ms passes
 * (RESIHP_ETIMEDOUT). A connection that fails authentication is refused,
 * logged, and does not count. Epoch starts at 0. */
int resihp_comm_create(const resihp_comm_opts_t *opts, resihp_comm_t **out);

void resihp_comm_destroy(resihp_comm_t *comm);

int resihp_comm_rank(const resihp_comm_t *comm);
int resihp_comm_size(const resihp_comm_t *comm);
int resihp_comm_world_rank(const resihp_comm_t *comm);
int resihp_comm_world_size(const resihp_comm_t *comm);
/* World rank of member i of the current view, or -1. */
int resihp_comm_member(const resihp_comm_t *comm, int i);
uint32_t resihp_comm_epoch(const resihp_comm_t *comm);

/* World ranks suspected since the current epoch began (the peers a failed
 * resihp_allreduce() blames). Writes at most max entries; returns how many
 * there are. */
int resihp_comm_failed(const resihp_comm_t *comm, int *world_ranks, int max);

/* In-place all-reduce of count elements over the current view. count may be
 * 0 or smaller than the view. Returns 0, or RESIHP_EPEER/ETIMEDOUT (buffer
 * untouched; call resihp_comm_shrink and retry), RESIHP_EPROTO (a peer sent
 * a malformed frame; it is suspected as well), RESIHP_EINVAL, RESIHP_ENOMEM.
 * A peer that died, left or whose link closed or was reset is always
 * RESIHP_EPEER, also when it went in the middle of a frame, and one that
 * fell silent RESIHP_ETIMEDOUT; RESIHP_EPROTO only ever means that a live
 * peer sent something that cannot be right (bad frame, failed MAC, corrupt
 * shared-memory ring). All three are recoverable by shrink and retry.
 * In deterministic mode float inputs are summed exactly in int64 fixed point
 * (see resihp_fixed_*), so the result does not depend on the order or the
 * grouping of contributions.
 *
 * NaN and infinities. Every member gets bit for bit the same result (each
 * element is reduced once, on one member, and copied to the others), NaN
 * payloads included.
 *  - RESIHP_FLOAT32/FLOAT64/BFLOAT16 (bf16 is summed in float and rounded
 *    back): IEEE arithmetic. A NaN in any contribution makes the element
 *    NaN; +Inf and -Inf together give NaN; an infinity with finite values
 *    stays that infinity; a finite sum beyond the type's range becomes
 *    +-Inf. Which NaN (payload, sign) comes out when several meet, or from
 *    Inf - Inf (the CPU's default NaN), depends on the order of the ring and
 *    the CPU; RESIHP_OP_AVG divides it unchanged.
 *  - Deterministic mode (float inputs converted to fixed point): a NaN
 *    counts as 0 - it disappears from the sum without a trace; +-Inf and
 *    finite values beyond +-2^(63 - frac_bits) saturate to INT64_MAX /
 *    INT64_MIN, so with every other contribution 0 the result is
 *    +-2^(63 - frac_bits) (finite, not Inf). The integer sum wraps modulo
 *    2^64: a saturated element plus anything of the same sign, or sums of
 *    in-range values beyond the range, come out as meaningless finite
 *    numbers, never Inf or NaN. Keep |x| times the number of ranks below
 *    2^(63 - frac_bits) (2^31 with the default 32 fractional bits), or
 *    check gradients for non-finite values before the call.
 *  - RESIHP_FIXED64 inputs: wrapping int64 sum. */
int resihp_allreduce(resihp_comm_t *comm, void *buf, size_t count,
                     resihp_dtype_t dtype, resihp_op_t op);

/* Out of place: sendbuf is only read (and so survives any failure intact),
 * the result goes to recvbuf, whose contents are unspecified after a
 * failure. Saves the private copy that the in-place form needs to keep the
 * caller's input; sendbuf == recvbuf is the in-place form. The buffers must
 * not overlap otherwise. */
int resihp_allreduce_to(resihp_comm_t *comm, const void *sendbuf, void *recvbuf,
                        size_t count, resihp_dtype_t dtype, resihp_op_t op);

/* ---- point to point and broadcast ----------------------------------------
 * For a group whose members hold different shards (a replica's pipeline
 * stages, tensor-parallel slices): activations and their gradients between
 * stages, pieces broadcast from one member. peer and root are positions in
 * the current view (resihp_comm_rank numbering). Messages between a pair
 * arrive in the order they were sent; a receive must name the sender and
 * the exact size (a frame of another size is RESIHP_EPROTO, the sender is
 * then suspected). Sends to oneself and sizes of 0 are allowed.
 *
 * Failures as resihp_allreduce(): a peer that dies, whose link is cut or
 * that hangs past the detection bound makes the call return RESIHP_EPEER or
 * RESIHP_ETIMEDOUT (never RESIHP_EPROTO for a dead peer), and
 * resihp_comm_failed() names it; a receive buffer is then unspecified, a
 * send buffer is never written. A live peer that takes no part is waited
 * for at most op_timeout_ms. resihp_bcast() returns 0 on a rank once it has
 * the root's bytes and has passed them on; it is not an agreement (use
 * resihp_allreduce for that).
 *
 * A send returns once its bytes have left the process. When the receiver
 * is itself sending to this rank (both ends of a pipeline exchange send
 * first), a send that cannot finish keeps the rest in a private copy and
 * returns; it leaves during this rank's next calls on the communicator (and
 * resihp_comm_destroy), so both directions at once never deadlock,
 * whatever the size. A message sent before a collective must be received
 * before that collective (messages are not buffered across collectives):
 * a receiver that meets a message where it expects collective data, or the
 * other way round, fails with RESIHP_EPROTO. Every rank must use the same
 * chunk_bytes (messages travel in frames of that size). */
int resihp_send(resihp_comm_t *comm, int peer, const void *buf, size_t bytes);
int resihp_recv(resihp_comm_t *comm, int peer, void *buf, size_t bytes);
int resihp_bcast(resihp_comm_t *comm, int root, void *buf, size_t bytes);

/* ---- reduce-scatter and all-gather ---------------------------------------
 * For a group whose members each own one block of a flat buffer (the
 * ranks of a sharded replica, FSDP/ZeRO style: rank i holds block i of
 * every parameter and of the optimizer state). count elements are cut into
 * as many blocks as the current view has members, block i (view position i)
 * being resihp_block(count, n, i, ...): count / n elements, one more for
 * the first count % n blocks, so any count works (blocks may be empty).
 *
 * resihp_reduce_scatter: sendbuf holds count elements on every member;
 * recvbuf gets this member's block of their sum (or average): the elements
 * [lo, lo + len) of the all-reduced buffer, in deterministic mode exactly
 * those of resihp_allreduce (float sums: exact for exact values, else
 * possibly added in another order than the all-reduce's). It is the
 * reduce-scatter phase of the all-reduce's algorithm alone: n-1 ring steps,
 * each member sending (n-1)/n of the buffer, half the all-reduce's bytes
 * (single copy between ranks of one host where the all-reduce would take
 * it: each member reads its own block of every other). The sums wait in
 * the communicator's work buffer (count elements, kept between calls as
 * the all-reduce's) until every member is done.
 * resihp_allgather: sendbuf holds this member's block (len elements; it may
 * be recvbuf + lo, in place); recvbuf (count elements) gets every member's
 * block at its place: the all-gather phase of the all-reduce's algorithm
 * alone (n-1 ring steps, or single-copy reads of each owner's block).
 *
 * Failures as resihp_allreduce(): a member that dies, whose link is cut or
 * that hangs past the detection bound makes every member's call return
 * RESIHP_EPEER or RESIHP_ETIMEDOUT, and resihp_comm_failed() names it;
 * sendbuf is never written (this member's block of an in-place all-gather
 * stays as it was), recvbuf is unspecified. On a replica communicator
 * (resihp_job_replica_comm) that fails the replica as one: leave. */
void resihp_block(size_t count, int n, int i, size_t *lo, size_t *len);
int resihp_reduce_scatter(resihp_comm_t *comm, const void *sendbuf,
                          void *recvbuf, size_t count, resihp_dtype_t dtype,
                          resihp_op_t op);
int resihp_allgather(resihp_comm_t *comm, const void *sendbuf, void *recvbuf,
                     size_t count, resihp_dtype_t dtype);

/* ---- GPU data plane ------------------------------------------------------
 * Device buffers travel one of two ways. With NCCL attached (FTAR split:
 * the CPU communicator keeps membership, failure detection and agreement;
 * NCCL moves device data), NCCL does. Without (ranks sharing one GPU, or a
 * library built without NCCL), they are staged through pinned host memory
 * in segments, the copies overlapped with the host ring. Without CUDA at
 * build time, these return RESIHP_ENOTSUP.
 *
 * Attach: collective over the current view; view rank 0 makes an NCCL
 * unique id and sends it over the authenticated links; every rank then
 * creates a non-blocking NCCL communicator on CUDA device `device` (one
 * device per rank). resihp_comm_shrink() later shrinks it with
 * ncclCommShrink. */
int resihp_comm_attach_device(resihp_comm_t *comm, int device);

/* All-reduce of device buffers (both on one device), ordered after the
 * work already enqueued on cuda_stream (a cudaStream_t; NULL = default
 * stream) and waited for. sendbuf is never written; with sendbuf ==
 * recvbuf the result goes through a private device buffer first, so a
 * failure leaves recvbuf as it was (out of place, recvbuf is meaningful
 * only after success). Failures as resihp_allreduce(): call
 * resihp_comm_shrink() (which also revokes and shrinks an attached NCCL
 * communicator) and retry. RESIHP_EIO: this rank's GPU failed or hung (a
 * copy did not finish within the operation bound); leave the job. The
 * deterministic mode applies to the staged path as to host buffers. */
int resihp_allreduce_device(resihp_comm_t *comm, const void *sendbuf,
                            void *recvbuf, size_t count, resihp_dtype_t dtype,
                            resihp_op_t op, void *cuda_stream);

/* Agree with the other survivors on who failed and move to the next epoch
 * without them. suspects (world ranks, may be NULL/0) are added to what this
 * rank already suspects. Survivors exchange their suspicion sets in rounds
 * on the control connections and take the union until a round brings
 * nothing new; a peer that stays silent for the detection bound during a
 * round is added as well. If failed is not NULL, the removed world ranks are
 * written there (at most max) and *nfailed says how many. Returns 0, or
 * RESIHP_EEXCLUDED when the others excluded this rank (it must leave the
 * job). It is collective: every survivor calls it, also those that suspect
 * nobody. */
int resihp_comm_shrink(resihp_comm_t *comm, const int *suspects, int nsuspects,
                       int *failed, int max, int *nfailed);

/* Test hook: cut the data and control links to world rank peer with
 * shutdown(2), as a broken cable would. */
int resihp_comm_test_cut_link(resihp_comm_t *comm, int peer);

/* ---- deterministic fixed point -------------------------------------------
 * value = (int64) round_half_even(x * 2^frac_bits); out-of-range values
 * saturate, NaN becomes 0. Back: (double)value * (2^-frac_bits / divisor),
 * rounded to the target type. Integer sums are exact and associative, so a
 * trainer can accumulate microbatch gradients in fixed point and get the same
 * bits however the microbatches are spread over replicas. frac_bits comes
 * from RESIHP_FIXED_FRAC_BITS (default 32) unless given (0..62). */
int resihp_fixed_frac_bits(void);
void resihp_fixed_from_float(int64_t *dst, const float *src, size_t n,
                             int frac_bits);
void resihp_fixed_from_double(int64_t *dst, const double *src, size_t n,
                              int frac_bits);
void resihp_fixed_from_bf16(int64_t *dst, const uint16_t *src, size_t n,
                            int frac_bits);
/* dst[i] += src[i] converted (accumulate a microbatch). */
void resihp_fixed_accumulate_float(int64_t *acc, const float *src, size_t n,
                                   int frac_bits);
void resihp_fixed_to_float(float *dst, const int64_t *src, size_t n,
                           int frac_bits, double divisor);
void resihp_fixed_to_double(double *dst, const int64_t *src, size_t n,
                            int frac_bits, double divisor);
void resihp_fixed_to_bf16(uint16_t *dst, const int64_t *src, size_t n,
                          int frac_bits, double divisor);

/* bfloat16 <-> float (round to nearest even; NaN kept quiet). */
uint16_t resihp_bf16_from_float(float f);
float resihp_bf16_to_float(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_ALLREDUCE_H */
