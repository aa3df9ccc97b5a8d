/* SPDX-License-Identifier: BSD-3-Clause */
/* Reading the communicator's control frames (comm.c) off a byte stream:
 * header, suspicion set, MAC tag. Kept apart from the socket and from the
 * communicator's state so that the fuzz target (tests/fuzz/fuzz_frame_ctrl)
 * drives exactly this code with arbitrary bytes. */
#include "config.h"

#include "comm_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

static int with_set(uint16_t type) {
  return type == RESIHP__FRAME_ABORT || type == RESIHP__FRAME_AGREE ||
         type == RESIHP__FRAME_DECIDED;
}

static int known_type(uint16_t type) {
  return type == RESIHP__FRAME_HEARTBEAT || type == RESIHP__FRAME_DONE ||
         type == RESIHP__FRAME_BYE || with_set(type);
}

size_t resihp__ctrl_want(struct rxstate *r, size_t tag_len, uint8_t **dst) {
  size_t hdr = sizeof(r->h);
  if (r->got < hdr) {
    *dst = (uint8_t *)&r->h + r->got;
    return hdr - r->got;
  }
  if (r->got < hdr + r->h.len) {
    *dst = r->set + (r->got - hdr);
    return hdr + r->h.len - r->got;
  }
  *dst = r->tag + (r->got - hdr - r->h.len);
  return hdr + r->h.len + tag_len - r->got;
}

int resihp__ctrl_got(struct rxstate *r, size_t n, int peer, size_t set_len,
                     resihp__msgauth_t *auth) {
  size_t hdr = sizeof(r->h), tag_len = auth ? RESIHP__MAC_LEN : 0;
  r->got += n;
  if (r->got == hdr && n) {
    /* The length is only trusted once it is the one the type implies, which
     * also keeps the set inside r->set. */
    if (r->h.magic != RESIHP__FRAME_MAGIC || r->h.src != (uint32_t)peer ||
        !known_type(r->h.type) || r->h.flags ||
        set_len > sizeof(r->set) ||
        r->h.len != (with_set(r->h.type) ? set_len : 0)) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "malformed control frame from rank %d (magic %#x type %u "
                 "src %u len %u): dropping the peer",
                 peer, r->h.magic, r->h.type, r->h.src, r->h.len);
      return RESIHP_EPROTO;
    }
  }
  if (r->got < hdr || r->got < hdr + r->h.len + tag_len)
    return 0;
  if (auth) {
    const void *parts[2] = {&r->h, r->set};
    size_t lens[2] = {hdr, r->h.len};
    if (resihp__msgauth_open(auth, parts, lens, 2, r->tag)) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "control frame from rank %d (type %u) fails its MAC "
                 "(forged, replayed or changed on the way): dropping the peer",
                 peer, r->h.type);
      return RESIHP_EPROTO;
    }
  }
  return 1;
}
