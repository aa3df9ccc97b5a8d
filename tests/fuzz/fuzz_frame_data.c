/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the data-plane frame reader: the real TCP transport
 * (libresihp/transport/tcp.c: header checks, epochs, parking, skipping,
 * summing while bytes arrive, MACs) reading what a peer writes into a
 * socket pair, while receives are posted, epochs change and collectives
 * are cancelled as the input says.
 *
 * Input: byte 0 holds options (bit 0: MACs on; bit 1: mac-data; bit 2:
 * frames are sealed here with the sender's real key, so that well-formed
 * ones pass their MAC). Then operations, one byte each and their operands:
 *   0 raw bytes: a length byte, then that many bytes to write;
 *   1 a frame: 32 header bytes, then as many payload bytes as the header
 *     asks for (at most what is left), then the tag (sealed here, or 16
 *     bytes of the input);
 *   2 post a receive: seq (0..3), step (0, 1, point to point or
 *     broadcast), chunk (0..3, bit 2: the last of a message) and a length
 *     byte (receives of either kind meet frames of both); bit 2 of the
 *     step byte: a receive that also takes the alternative form of half
 *     the length (post_recv_alt, the deterministic ring's int32 chunks);
 *   3 the same summing float32 while it arrives (post_recv_reduce), or,
 *     with bit 2 of the step byte, handing int64 elements (or int32 ones of
 *     the alternative form, half the length plus 4 bytes) to a sink that
 *     checks their place (post_recv_sink, the deterministic ring's last
 *     reduce-scatter step);
 *   4 set the epoch (0..3);  5 cancel.
 * After each operation the transport makes progress and is asked whether
 * the peer has input waiting (has_input, which peeks at the socket).
 *
 * Invariants beyond "no crash" (ASan/UBSan: receive buffers are exactly
 * the posted length): a failure is RESIHP_EPROTO or RESIHP_EPEER and names
 * the peer. Corpus: tests/fuzz/corpus-frame-data; libFuzzer build as in
 * fuzz_frame_ctrl.c (-max_len=4096). */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "../../libresihp/transport/msgauth.h"
#include "../../libresihp/transport/transport.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HDR sizeof(resihp__frame_hdr_t)
#define MAXPAY 512

struct input {
  const uint8_t *p;
  size_t n;
};

static int take(struct input *in, void *dst, size_t k) {
  if (in->n < k)
    return -1;
  memcpy(dst, in->p, k);
  in->p += k, in->n -= k;
  return 0;
}

static void put(int fd, const void *b, size_t n) {
  if (n && send(fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
    /* a full socket only loses input */
  }
}

/* One frame as the input describes it, sealed by tx when asked. */
static void frame(struct input *in, int fd, int mac, int seal,
                  resihp__msgauth_t *tx) {
  static uint8_t pay[MAXPAY * 2];
  resihp__frame_hdr_t h;
  if (take(in, &h, HDR))
    return;
  size_t len = h.len < in->n ? h.len : in->n;
  if (len > sizeof(pay))
    len = sizeof(pay);
  take(in, pay, len);
  put(fd, &h, HDR);
  put(fd, pay, len);
  if (!mac)
    return;
  uint8_t tag[RESIHP__MAC_LEN] = {0};
  if (seal) {
    resihp__macstream_t m;
    resihp__macstream_begin(&m, &tx->tx);
    resihp__macstream_update(&m, &h, HDR);
    if (h.flags & RESIHP__FRAME_F_MACPAY)
      resihp__macstream_update(&m, pay, len);
    resihp__macstream_seal(&m, &tx->tx, tag);
  } else if (take(in, tag, sizeof(tag))) {
    return;
  }
  put(fd, tag, sizeof(tag));
}

/* Steps of both kinds, collective (0, 1) and point to point. */
static uint32_t step_of(uint8_t v) {
  static const uint32_t steps[4] = {0, 1, RESIHP__STEP_P2P, RESIHP__STEP_BCAST};
  return steps[v & 3];
}

static void combine(void *dst, const void *a, const void *b, size_t n,
                    int dtype) {
  resihp__reduce_sum_to(dst, a, b, n, dtype);
}

/* The elements handed over lie within the posted form's length (arg: the
 * plain length; the alternative one is half of it plus 4) and are
 * readable. */
static size_t sink_len;
static volatile uint8_t sink_sum;

static void sink(void *arg, int form, size_t index, const void *elems,
                 size_t count) {
  size_t plain = *(const size_t *)arg;
  size_t esz = form == 2 ? 4 : 8, len = form == 2 ? plain / 2 + 4 : plain;
  if ((form != 1 && form != 2) || !count || (index + count) * esz > len)
    abort();
  for (size_t i = 0; i < count * esz; i++)
    sink_sum = (uint8_t)(sink_sum + ((const uint8_t *)elems)[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  resihp__fuzz_quiet();
  if (size < 1)
    return 0;
  int mac = data[0] & 1, mac_data = (data[0] >> 1) & 1,
      seal = (data[0] >> 2) & 1;
  struct input in = {data + 1, size - 1};
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
    abort();
  static const uint8_t secret[] = "fuzz-secret";
  resihp__msgauth_t auth[2], tx;
  memset(auth, 0, sizeof(auth));
  resihp__msgauth_init(&auth[1], secret, sizeof(secret) - 1, "resihp-data",
                       "NS", 2, "NC", 2, 0);
  resihp__msgauth_init(&tx, secret, sizeof(secret) - 1, "resihp-data", "NS",
                       2, "NC", 2, 1);
  int fds[2] = {-1, sv[0]};
  resihp__transport_t *t;
  if (resihp__tcp_transport_create(0, 2, fds, NULL, NULL, MAXPAY, -1,
                                   mac ? auth : NULL, mac_data, &t))
    abort();
  uint8_t *buf = NULL, *add = NULL;
  int posted = 0;
  for (uint8_t op; !take(&in, &op, 1);) {
    uint8_t b[4];
    switch (op % 6) {
    case 0:
      if (!take(&in, b, 1)) {
        size_t k = b[0] < in.n ? b[0] : in.n;
        put(sv[1], in.p, k);
        in.p += k, in.n -= k;
      }
      break;
    case 1:
      frame(&in, sv[1], mac, seal, &tx);
      break;
    case 2:
    case 3:
      if (take(&in, b, 4) || posted)
        break;
      {
        resihp__tag_t tag = {b[0] & 3u, step_of(b[1]),
                             (b[2] & 3u) | (b[2] & 4 ? RESIHP__CHUNK_LAST : 0)};
        size_t len = op % 6 == 3 ? (size_t)(b[3] & ~3u) : b[3];
        free(buf);
        free(add);
        buf = malloc(len ? len : 1);
        add = calloc(1, len ? len : 1);
        size_t len8 = len & ~(size_t)7;
        sink_len = len8;
        int rc = op % 6 == 3 && b[1] & 4 && len8 >= 16
                     ? t->ops->post_recv_sink(t, 1, tag, buf, len8, 8,
                                              len8 / 2 + 4, 4, sink, &sink_len)
                 : op % 6 == 3
                     ? t->ops->post_recv_reduce(t, 1, tag, buf, add, len, 4,
                                                combine, RESIHP_FLOAT32)
                 : b[1] & 4 && len >= 2
                     ? t->ops->post_recv_alt(t, 1, tag, buf, len, len / 2)
                     : t->ops->post_recv(t, 1, tag, buf, len);
        posted = rc == 0;
      }
      break;
    case 4:
      if (!take(&in, b, 1))
        t->ops->set_epoch(t, b[0] & 3u);
      break;
    case 5:
      t->ops->cancel(t);
      posted = 0;
      break;
    }
    if ((unsigned)t->ops->has_input(t, 1) > 1)
      abort();
    for (int k = 0; k < 4; k++) {
      int bad = -1, rc = t->ops->progress(t, 0, &bad);
      if (rc < 0) {
        if ((rc != RESIHP_EPROTO && rc != RESIHP_EPEER) || bad != 1)
          abort();
        goto done;
      }
      if (posted && t->ops->recv_done(t, 1))
        posted = 0;
    }
  }
done:
  close(sv[1]);
  t->ops->destroy(t);
  free(buf);
  free(add);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
/* Receives posted, then frames that mostly match them, some damaged. */
static size_t gen(uint8_t *buf, size_t cap) {
  uint64_t (*rng)(void) = resihp__fuzz_rng;
  size_t n = 0;
  buf[n++] = (uint8_t)(rng() | (rng() % 4 ? 4 : 0)); /* mostly sealed */
  int ops = (int)(rng() % 10);
  for (int i = 0; i < ops && n + HDR + 300 < cap; i++) {
    uint8_t op = (uint8_t)(rng() % 8 < 3 ? 2 + rng() % 2 : rng() % 6);
    uint8_t seq = (uint8_t)(rng() % 2), step = (uint8_t)(rng() % 4),
            last = (uint8_t)(rng() % 2 * 4), len = (uint8_t)(rng() % 64 * 4);
    buf[n++] = op;
    switch (op) {
    case 0:
      buf[n++] = (uint8_t)(rng() % 40);
      for (int k = 0; k < 40; k++)
        buf[n++] = (uint8_t)rng();
      break;
    case 1: {
      uint16_t flags = (uint16_t)(rng() % 4); /* MACPAY, ALT */
      if (flags & RESIHP__FRAME_F_ALT && rng() % 2) /* the alternative */
        len = (uint8_t)(len / 2 + rng() % 2 * 4);   /* form of a length */
      resihp__frame_hdr_t h = {.magic = RESIHP__FRAME_MAGIC,
                               .type = RESIHP__FRAME_DATA,
                               .flags = flags,
                               .epoch = (uint32_t)(rng() % 2),
                               .src = 1,
                               .seq = seq,
                               .step = step_of(step),
                               .chunk = last ? RESIHP__CHUNK_LAST : 0,
                               .len = len};
      if (rng() % 6 == 0)
        ((uint8_t *)&h)[rng() % HDR] ^= (uint8_t)(1u << (rng() % 8));
      memcpy(buf + n, &h, HDR);
      n += HDR;
      for (size_t k = 0; k < (size_t)len + RESIHP__MAC_LEN && k < 300; k++)
        buf[n++] = (uint8_t)rng();
      break;
    }
    case 2:
    case 3:
      buf[n++] = seq, buf[n++] = (uint8_t)(step | rng() % 2 * 4);
      buf[n++] = last, buf[n++] = len;
      break;
    case 4:
      buf[n++] = (uint8_t)rng();
      break;
    }
  }
  return n;
}

/* Each input sets up and tears down a transport on a socket pair: fewer
 * runs than the cheaper targets. */
int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_frame_data", "corpus-frame-data",
                           65536, gen, 2000);
}
#endif
