/* SPDX-License-Identifier: BSD-3-Clause */
/* The data-plane transport seen by collective algorithms: a table of
 * operations, so that the ring all-reduce never touches a socket (or a GPU).
 *
 * Peers are world ranks. A transport moves tagged, framed messages: a send
 * is queued and completes when every byte left this process; a receive is
 * posted with its expected tag and length and completes when the payload is
 * in place. Messages between a pair arrive in the order they were sent. The
 * transport owns no thread: the caller drives it with progress(), which
 * waits at most timeout_ms (also waking when wake_fd becomes readable).
 *
 * Failure contract: progress() returns a negative RESIHP_E* code and sets
 * *bad_peer when a peer's link fails or closes, also in the middle of a
 * frame (RESIHP_EPEER: the peer died or left), or a live peer sends a frame
 * that cannot be right (RESIHP_EPROTO: bad magic, unknown type, oversized,
 * wrong tag or length, a failed MAC, a corrupt shared-memory ring). The
 * rule: a peer whose link closed or was reset, or whose process is gone,
 * is RESIHP_EPEER wherever its stream stopped - mid-header, mid-payload,
 * mid-MAC-tag, a partial frame left in a ring - and also when its last
 * bytes were wrong but its link had closed by the time they were parsed;
 * silence is RESIHP_ETIMEDOUT (the caller's bound); RESIHP_EPROTO only
 * for a peer whose link is still open. A caller may treat EPROTO as a
 * reason to leave; a survivor of a crash must not. (tests/unit/
 * test_allreduce_kill.c kills senders at every part of a frame.) Frames of
 * an older epoch are dropped:
 * they are leftovers of an aborted collective. cancel() abandons every
 * queued operation but keeps each stream framed (a half-sent frame is
 * finished with padding, a half-received one is skipped later), so the
 * same links carry the next epoch.
 *
 * Integrity: with per-message MAC state for a link (msgauth.h, keyed by the
 * handshake; the TCP transport uses it on socket links, not on
 * shared-memory rings, which only the two processes' user can reach),
 * every frame on it is followed by a RESIHP__MAC_LEN tag over
 * its header - and its payload when the header has RESIHP__FRAME_F_MACPAY,
 * which the sender sets under mac-data and for RESIHP__STEP_CONTROL frames -
 * with the link's sequence number. A frame is only complete (its receive
 * done, its data usable) once the tag checked out; a bad tag, or a payload
 * left uncovered where this side wants it covered, is RESIHP_EPROTO.
 */
#ifndef RESIHP_TRANSPORT_H
#define RESIHP_TRANSPORT_H

#include "msgauth.h"

#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Whether the peer of a connected socket has closed it or it was reset
 * (bytes may still be unread): the test that turns a protocol error into
 * RESIHP_EPEER (see the contract above). One poll(), for error paths. */
static inline int resihp__link_closed(int fd) {
  struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
  return fd >= 0 && poll(&pf, 1, 0) == 1 &&
         (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

#define RESIHP__FRAME_MAGIC 0x52534850u /* "RSHP" */

enum {
  RESIHP__FRAME_DATA = 1,
  RESIHP__FRAME_HEARTBEAT = 2,
  RESIHP__FRAME_ABORT = 3,
  RESIHP__FRAME_AGREE = 4,
  RESIHP__FRAME_DONE = 5,
  RESIHP__FRAME_BYE = 6, /* orderly departure (resihp_comm_destroy) */
  RESIHP__FRAME_DECIDED = 7, /* the agreed set of an epoch already left */
};

/* Header flags. */
#define RESIHP__FRAME_F_MACPAY 1u /* the frame's MAC covers its payload */
/* The payload is the alternative, shorter form that the receive offers
 * (post_send_alt/post_recv_alt: the deterministic ring's int32 chunks). */
#define RESIHP__FRAME_F_ALT 2u

/* Steps at or above this carry the communicator's own messages on the data
 * links (DONE, the NCCL id), not gradients: their MAC always covers the
 * payload. */
#define RESIHP__STEP_CONTROL (UINT32_MAX - 1)

/* Point-to-point messages (p2p.c): seq is the number of the message on its
 * ordered pair of ranks in this epoch, chunk the index of the frame in the
 * message, with RESIHP__CHUNK_LAST on its last frame (so that a message of
 * another size never passes for the one a receive expects). Broadcast
 * frames: seq is the collective number, chunk as for messages. A frame of
 * the point-to-point kind never completes a receive of the collective kind
 * (every other step) or the other way round: the two ranks' calls do not
 * match, and the receiver reports RESIHP_EPROTO rather than misreading it. */
#define RESIHP__STEP_P2P (UINT32_MAX - 2)
#define RESIHP__STEP_BCAST (UINT32_MAX - 3)
#define RESIHP__CHUNK_LAST 0x80000000u

/* Every frame starts with this header (host byte order: the ranks of a job
 * share one architecture). The epoch is in every frame so that late or
 * duplicate messages of an older membership are recognised and dropped. */
typedef struct {
  uint32_t magic;
  uint16_t type;
  uint16_t flags;
  uint32_t epoch;
  uint32_t src; /* world rank of the sender */
  uint32_t seq; /* collective number in the epoch (AGREE: round) */
  uint32_t step;
  uint32_t chunk;
  uint32_t len; /* payload bytes that follow */
} resihp__frame_hdr_t;

typedef struct {
  uint32_t seq, step, chunk;
} resihp__tag_t;

typedef struct resihp__transport resihp__transport_t;

/* dst[i] = payload[i] + addend[i] for n elements of dtype; dst may be
 * payload (resihp__reduce_sum_to). */
typedef void (*resihp__combine_fn)(void *dst, const void *payload,
                                   const void *addend, size_t n, int dtype);
/* Writes a frame's payload at payload (room for cap bytes) and returns
 * its form (1 plain, 2 alternative), or 0 for not so. */
typedef int (*resihp__fill_fn)(void *arg, void *payload, size_t cap);
/* count whole elements of a payload in its form (1 plain, 2 alternative),
 * the first being element index of the frame; elems is only valid during
 * the call (it may point into a shared-memory ring). */
typedef void (*resihp__sink_fn)(void *arg, int form, size_t index,
                                const void *elems, size_t count);

typedef struct {
  const char *name;
  int (*post_send)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                   const void *buf, size_t len);
  int (*post_recv)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                   void *buf, size_t len);
  /* Optional (NULL where not offered), in pairs: a frame in its
   * alternative form (RESIHP__FRAME_F_ALT), and a receive that takes
   * either len bytes in the plain form or alt_len (0 < alt_len < len)
   * bytes in the alternative form into buf; recv_done then says which (1
   * plain, 2 alternative). Any other length, or the flag where the receive
   * offers no alternative, is RESIHP_EPROTO. */
  int (*post_send_alt)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                       const void *buf, size_t len);
  int (*post_recv_alt)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                       void *buf, size_t len, size_t alt_len);
  /* Optional (NULL where not offered): post_recv whose completed buffer
   * holds payload + addend, element by element (elem bytes each, len a
   * multiple; addend must not overlap buf). The transport sums as the bytes
   * arrive, which lets the shared-memory rings add straight from the ring
   * into buf instead of copying and then reading buf again. */
  int (*post_recv_reduce)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                          void *buf, const void *addend, size_t len,
                          size_t elem, resihp__combine_fn combine, int dtype);
  /* Optional: a receive of len bytes (elements of elem bytes) or, when
   * alt_len is not 0, alt_len bytes in the alternative form (elements of
   * alt_elem bytes) whose payload is handed to sink in order, whole
   * elements at a time, as it arrives: from a shared-memory ring in place
   * (so that the caller computes straight from it instead of copying the
   * frame out first). buf (len bytes) gathers an element cut by the ring's
   * end, and over a socket the payload passes through it. recv_done says
   * which form came, as for post_recv_alt. Elements are handed over before
   * the frame's MAC is checked: the caller must treat what the sink wrote
   * as unverified until recv_done. */
  /* Optional: a frame made in place, in the peer's shared-memory ring,
   * without a copy: when nothing is queued for peer and the ring has room
   * for the header and len bytes in one piece, fill writes the payload
   * there and says its form (len bytes plain, or alt_len in the
   * alternative form). 0: sent (complete); 1: not written (no ring, no
   * room, queued sends, or fill said 0: use post_send); or the link's
   * failure, as progress() reports it. */
  int (*send_fill)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                   size_t len, size_t alt_len, resihp__fill_fn fill, void *arg);
  /* Optional, in a pair: the commit round's vote through the shared
   * memory of a ring pair instead of a zero-length frame. vote tells peer
   * that this rank finished the collective of key (not 0): 0, or
   * RESIHP_ENOTSUP where the pair has no rings (then a frame). voted says
   * whether peer's vote is key (1; only equality counts) and, while not,
   * makes progress() watch for it (an event, with a doorbell asked before
   * sleeping; a peer that closes its link first is RESIHP_EPEER); key 0
   * stops watching. cancel() stops it too. */
  int (*vote)(resihp__transport_t *t, int peer, uint64_t key);
  int (*voted)(resihp__transport_t *t, int peer, uint64_t key);
  int (*post_recv_sink)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                        void *buf, size_t len, size_t elem, size_t alt_len,
                        size_t alt_elem, resihp__sink_fn sink, void *arg);
  /* Optional: a RESIHP__STEP_P2P message of any length, cut by the
   * transport into frames of at most max_payload bytes (chunk numbered as
   * above; tag.chunk is ignored). One queue entry however long. */
  int (*post_send_msg)(resihp__transport_t *t, int peer, resihp__tag_t tag,
                       const void *buf, size_t len);
  /* Optional: the caller's buffers of the sends still queued for peer stop
   * being valid; what has not left yet is copied into private memory and
   * leaves during later progress() calls. 0 or RESIHP_ENOMEM. */
  int (*detach_sends)(resihp__transport_t *t, int peer);
  /* Optional: 1 when peer has sent bytes that no receive took yet (it is
   * sending to this rank), 0 otherwise; EOF does not count. */
  int (*has_input)(resihp__transport_t *t, int peer);
  /* Non-zero once the receive posted for peer has completed (clears it):
   * 1, or 2 for the alternative form of post_recv_alt. */
  int (*recv_done)(resihp__transport_t *t, int peer);
  /* Sends queued for peer that have not completed. */
  int (*sends_pending)(resihp__transport_t *t, int peer);
  int (*progress)(resihp__transport_t *t, int timeout_ms, int *bad_peer);
  void (*cancel)(resihp__transport_t *t);
  void (*set_epoch)(resihp__transport_t *t, uint32_t epoch);
  /* Stop using a peer's link (removed from the view); shuts it down. */
  void (*drop_peer)(resihp__transport_t *t, int peer);
  void (*destroy)(resihp__transport_t *t);
  /* Optional, for transports whose device moves the data (NCCL), NULL for
   * TCP: the whole all-reduce on device buffers, sendbuf != recvbuf. It
   * returns when the stream has finished it, or with RESIHP_EPEER once
   * *failed becomes non-zero (the CPU side noticed a failure; the device
   * communicator is then revoked), or RESIHP_ETIMEDOUT after timeout_ms
   * without completion. */
  int (*allreduce)(resihp__transport_t *t, const void *sendbuf, void *recvbuf,
                   size_t count, int dtype, int op, void *stream,
                   atomic_int *failed, int timeout_ms);
  /* Drop the ranks (positions in the old view) from the device
   * communicator; collective among the survivors. RESIHP_ENOTSUP when
   * nobody is to be dropped: NCCL cannot remake a communicator in place,
   * the caller attaches a new one. */
  int (*shrink)(resihp__transport_t *t, int *excluded, int nexcluded,
                int timeout_ms);
} resihp__transport_ops_t;

struct resihp__transport {
  const resihp__transport_ops_t *ops;
};

/* TCP: one connected, authenticated stream socket per peer (fds[peer], -1
 * for self); takes ownership of the fds. Peers on the same host may have
 * shared-memory rings (rin/rout from resihp__shm_setup, or NULL arrays;
 * ownership passes too): the frames then travel through the rings and the
 * socket only carries doorbells. max_payload bounds what a peer may
 * announce. wake_fd (or -1) is polled too so another thread can interrupt a
 * wait. auth (nranks entries, copied) is each link's MAC state from the
 * mesh, with mac_data asking for MACs over gradient payloads too; NULL
 * turns MACs off (tests that play a peer with hand-made frames). */
struct resihp__ring;
int resihp__tcp_transport_create(int self, int nranks, const int *fds,
                                 struct resihp__ring **rin,
                                 struct resihp__ring **rout,
                                 size_t max_payload, int wake_fd,
                                 const resihp__msgauth_t *auth,
                                 int mac_data, resihp__transport_t **out);

/* NCCL (built only when configure finds it): a non-blocking NCCL
 * communicator of nranks on CUDA device `device`, from a unique id that
 * view rank 0 made with resihp__nccl_unique_id() and the CPU side
 * distributed. Waits at most timeout_ms, and gives up when *failed. */
#define RESIHP__NCCL_ID_BYTES 128
int resihp__nccl_unique_id(uint8_t id[RESIHP__NCCL_ID_BYTES]);
int resihp__nccl_transport_create(const uint8_t id[RESIHP__NCCL_ID_BYTES],
                                  int rank, int nranks, int device,
                                  atomic_int *failed, int timeout_ms,
                                  resihp__transport_t **out);
/* The newer calls the loaded NCCL has (transport/nccl.c looks them up at
 * run time): bit 1 ncclCommRevoke, bit 2 ncclCommShrink; its version into
 * *version. */
#define RESIHP__NCCL_HAS_REVOKE 1
#define RESIHP__NCCL_HAS_SHRINK 2
unsigned resihp__nccl_newer(int *version);
/* Tests: 0 makes this process behave as with an NCCL that has neither
 * (the fallbacks run on any NCCL), 1 uses what it has. */
void resihp__nccl_use_newer(int on);

#endif
