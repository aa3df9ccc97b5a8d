/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the control-frame reader (libresihp/collectives/
 * ctrl_frame.c: header checks, suspicion set, MAC), fed byte streams as a
 * rank's monitor thread receives them from a peer, in pieces of any size.
 *
 * Input: byte 0 holds options (bit 0: MACs on; bit 1: the rest describes
 * frames that this harness seals with the sender's real key, so that
 * well-formed frames get through the MAC and the checks after it are
 * reached; bits 2-3: the peer's rank; bits 4-5: how the stream is cut),
 * byte 1 the world size / 4. Then the raw stream, or in sealed mode
 * records of a 32-byte header and the set bytes its length asks for (the
 * tag is appended here).
 *
 * Invariants beyond "no crash" (ASan/UBSan): the reader never asks for
 * bytes outside its frame buffer nor for none at all, fails only with
 * RESIHP_EPROTO, and every frame it completes has a sound header.
 *
 * make check runs it over tests/fuzz/corpus-frame-ctrl plus generated
 * inputs (shared driver, fuzz_driver.c). libFuzzer build, from the source
 * tree after a configure in build/ (the same for fuzz_frame_data.c):
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -DRESIHP_FUZZ_LIBFUZZER \
 *     -Ibuild -Ilibresihp/include tests/fuzz/fuzz_frame_ctrl.c \
 *     tests/fuzz/fuzz_driver.c libresihp/core/[a-z]*.c libresihp/transport/tcp.c \
 *     libresihp/transport/shm.c libresihp/transport/mesh.c \
 *     libresihp/transport/msgauth.c libresihp/transport/sha256.c \
 *     libresihp/collectives/ctrl_frame.c libresihp/collectives/reduce.c \
 *     -lpthread -lm -o fuzz_frame_ctrl
 *   ./fuzz_frame_ctrl -max_len=2048 -max_total_time=300 CORPUS_COPY/
 *
 * and merge new finds into the corpus with -merge=1. */
#include "config.h"

#include "fuzz_driver.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "../../libresihp/transport/msgauth.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdlib.h>
#include <string.h>

#define HDR sizeof(resihp__frame_hdr_t)

static void keys(resihp__msgauth_t *rx, resihp__msgauth_t *tx) {
  static const uint8_t secret[] = "fuzz-secret";
  resihp__msgauth_init(rx, secret, sizeof(secret) - 1, "resihp-ctrl", "NS", 2,
                       "NC", 2, 0);
  resihp__msgauth_init(tx, secret, sizeof(secret) - 1, "resihp-ctrl", "NS", 2,
                       "NC", 2, 1);
}

/* Sealed mode: turn records into frames with correct tags. */
static size_t seal_records(const uint8_t *in, size_t n, uint8_t *out,
                           size_t cap, resihp__msgauth_t *tx) {
  size_t o = 0;
  while (n >= HDR && o + HDR + RESIHP__SET_BYTES + RESIHP__MAC_LEN <= cap) {
    resihp__frame_hdr_t h;
    memcpy(&h, in, HDR);
    in += HDR, n -= HDR;
    size_t len = h.len < n ? h.len : n;
    if (len > RESIHP__SET_BYTES)
      len = RESIHP__SET_BYTES;
    memcpy(out + o, &h, HDR);
    memcpy(out + o + HDR, in, len);
    const void *parts[2] = {&h, in};
    size_t lens[2] = {HDR, len};
    resihp__msgauth_seal(tx, parts, lens, 2, out + o + HDR + len);
    o += HDR + len + RESIHP__MAC_LEN;
    in += len, n -= len;
  }
  return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t sealed[1 << 17];
  resihp__fuzz_quiet();
  if (size < 2)
    return 0;
  int mac = data[0] & 1, seal = (data[0] >> 1) & 1, peer = (data[0] >> 2) & 3;
  int cut = (data[0] >> 4) & 3;
  size_t set_len = ((size_t)data[1] * 4 + 1 + 7) / 8;
  resihp__msgauth_t rx, tx;
  keys(&rx, &tx);
  const uint8_t *p = data + 2;
  size_t n = size - 2;
  if (seal && mac) {
    n = seal_records(p, n, sealed, sizeof(sealed), &tx);
    p = sealed;
  }
  struct rxstate r;
  memset(&r, 0, sizeof(r));
  size_t tag_len = mac ? RESIHP__MAC_LEN : 0;
  while (n) {
    uint8_t *dst;
    size_t want = resihp__ctrl_want(&r, tag_len, &dst);
    if (!want || dst < (uint8_t *)&r ||
        dst + want > (uint8_t *)&r + offsetof(struct rxstate, got))
      abort(); /* asks for nothing, or for bytes outside the frame */
    size_t k = cut == 0 ? 1 : cut == 1 ? 7 : want;
    if (k > want)
      k = want;
    if (k > n)
      k = n;
    memcpy(dst, p, k);
    p += k, n -= k;
    int rc = resihp__ctrl_got(&r, k, peer, set_len, mac ? &rx : NULL);
    if (rc < 0) {
      if (rc != RESIHP_EPROTO)
        abort();
      break;
    }
    if (rc == 1) {
      if (r.h.magic != RESIHP__FRAME_MAGIC || r.h.src != (uint32_t)peer ||
          (r.h.len != 0 && r.h.len != set_len))
        abort(); /* a frame completed with a header that is not sound */
      r.got = 0;
    }
  }
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
/* Mostly well-formed frames of every type, some damaged. */
static size_t gen(uint8_t *buf, size_t cap) {
  uint64_t (*rng)(void) = resihp__fuzz_rng;
  size_t n = 0;
  uint8_t opts = (uint8_t)rng(), world = (uint8_t)(rng() % 8);
  buf[n++] = opts;
  buf[n++] = world;
  size_t set_len = ((size_t)world * 4 + 1 + 7) / 8;
  int frames = (int)(rng() % 6);
  for (int i = 0; i < frames && n + HDR + 200 < cap; i++) {
    resihp__frame_hdr_t h = {.magic = RESIHP__FRAME_MAGIC,
                             .type = (uint16_t)(2 + rng() % 6),
                             .src = (uint32_t)((opts >> 2) & 3),
                             .seq = (uint32_t)(rng() % 4)};
    int with_set = h.type == RESIHP__FRAME_ABORT ||
                   h.type == RESIHP__FRAME_AGREE ||
                   h.type == RESIHP__FRAME_DECIDED;
    h.len = (uint32_t)(with_set ? set_len : 0);
    switch (rng() % 8) {
    case 0:
      h.len = (uint32_t)rng();
      break;
    case 1:
      h.magic ^= 1u << (rng() % 32);
      break;
    case 2:
      h.src = (uint32_t)rng();
      break;
    case 3:
      h.type = (uint16_t)rng();
      break;
    }
    memcpy(buf + n, &h, HDR);
    n += HDR;
    size_t extra = (h.len < 160 ? h.len : 160) + (opts & 2 ? 0 : RESIHP__MAC_LEN);
    for (size_t k = 0; k < extra; k++)
      buf[n++] = (uint8_t)rng();
  }
  return n;
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_frame_ctrl", "corpus-frame-ctrl",
                           65536, gen, 20000);
}
#endif
