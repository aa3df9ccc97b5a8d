/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp_allreduce: buffer management, fault-tolerant outcome (DONE/ABORT
 * on the control connections, see comm.c) and deterministic mode around the
 * ring algorithm of ring_allreduce.c. The caller's buffer is written only
 * once the outcome is known to be success everywhere. */
#include "config.h"

#include "../transport/mesh.h"
#include "comm_internal.h"
#include "device_staging.h"
#include "fixed_point.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int resihp__reserve(void **buf, size_t *cap, size_t want) {
  if (*cap >= want)
    return 0;
  void *p = malloc(want);
  if (!p) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "cannot allocate %zu bytes of work buffer", want);
    return RESIHP_ENOMEM;
  }
  free(*buf);
  *buf = p;
  *cap = want;
  return 0;
}

/* Suspects of the current epoch as a set (mu held by caller or not needed). */
static void suspects(resihp_comm_t *c, resihp__set_t *s) {
  pthread_mutex_lock(&c->mu);
  *s = c->dead;
  for (size_t k = 0; k < sizeof(s->b); k++)
    s->b[k] |= c->blamed.b[k];
  pthread_mutex_unlock(&c->mu);
}

/* The ring of collective seq failed here (ring_rc): tell everyone, return
 * the code the caller sees. */
int resihp__comm_fail(resihp_comm_t *c, int ring_rc, int bad_peer,
                      const char *what) {
  resihp_log(RESIHP_LOG_DEBUG, "allreduce",
             "rank %d: %s (collective %u of epoch %u) failed here: %s (peer "
             "%d)",
             c->world_rank, what, c->seq, c->epoch, resihp_err_name(ring_rc),
             bad_peer);
  if (c->unprotected) {
    /* No monitor, nobody reads aborts: just keep the streams framed. */
    c->tp->ops->cancel(c->tp);
    c->seq++;
    return ring_rc;
  }
  if (bad_peer >= 0 && (ring_rc == RESIHP_EPEER || ring_rc == RESIHP_EPROTO ||
                        ring_rc == RESIHP_ETIMEDOUT))
    resihp__comm_mark_dead(c, bad_peer, ring_rc);
  c->tp->ops->cancel(c->tp);
  resihp__set_t s;
  suspects(c, &s);
  resihp__comm_broadcast_ctrl(c, RESIHP__FRAME_ABORT, c->seq, &s);
  c->seq++;
  if (ring_rc == RESIHP_EPROTO || ring_rc == RESIHP_ENOMEM ||
      ring_rc == RESIHP_EINVAL)
    return ring_rc;
  pthread_mutex_lock(&c->mu);
  int code = c->dead_code ? c->dead_code : RESIHP_EPEER;
  pthread_mutex_unlock(&c->mu);
  char who[256] = "";
  size_t off = 0;
  for (int i = 0; i < c->world_size && off + 12 < sizeof(who); i++)
    if (resihp__set_has(&s, i))
      off += (size_t)snprintf(who + off, sizeof(who) - off, " %d", i);
  resihp_log(RESIHP_LOG_WARN, "allreduce",
             "rank %d: %s aborted in epoch %u (%s); suspected:%s; "
             "call resihp_comm_shrink() and retry",
             c->world_rank, what, c->epoch, resihp_strerror(code), who);
  return code;
}

static int fail(resihp_comm_t *c, int ring_rc, int bad_peer) {
  return resihp__comm_fail(c, ring_rc, bad_peer, "all-reduce");
}

int resihp__comm_peer_broken(resihp_comm_t *c, int peer) {
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  if (c->excluded_by >= 0)
    rc = RESIHP_EEXCLUDED;
  for (int i = 0; i < c->nmembers && !rc; i++)
    if (c->abort_seq[c->members[i]])
      rc = RESIHP_EPEER;
  if (!rc && peer >= 0 && resihp__set_has(&c->dead, peer) &&
      !resihp__set_has(&c->departed, peer))
    rc = c->dead_code ? c->dead_code : RESIHP_EPEER;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int resihp__comm_enter(resihp_comm_t *c, const char *what) {
  if (c->unprotected || !atomic_load(&c->failed))
    return 0;
  pthread_mutex_lock(&c->mu);
  int excluded = c->excluded_by >= 0;
  pthread_mutex_unlock(&c->mu);
  if (excluded) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d was excluded from the membership by its peers; it "
               "must leave the job",
               c->world_rank);
    return RESIHP_EEXCLUDED;
  }
  return resihp__comm_fail(c, RESIHP_EPEER, -1, what);
}

/* Ring done here: wait until every member is done or dead, or one aborted.
 * DONE travels on the data links, read by this thread (no thread hop on
 * the fast path): between ranks of one host a vote word in their rings'
 * shared memory (the key of the collective), else a zero-length frame
 * after the last chunk - a vote costs no frame and no system call, which
 * was a third of a 4 KiB all-reduce between two ranks. ABORT and deaths
 * come from the monitor, which also wakes the transport's poll. */
int resihp__comm_commit(resihp_comm_t *c) {
  const resihp__transport_ops_t *ops = c->tp->ops;
  int64_t seq1 = (int64_t)c->seq + 1;
  resihp__tag_t tag = {c->seq, UINT32_MAX, 0};
  uint64_t key = ((uint64_t)c->epoch << 32 | c->seq) + 1; /* never 0 */
  static const uint8_t nothing[1];
  uint8_t sink[1];
  int rc = 0, bad = -1;
  /* On the stack: no allocation per call. */
  resihp__set_t got = {0}, voting = {0};
  for (int i = 0; i < c->nmembers; i++) {
    int m = c->members[i];
    if (m == c->world_rank)
      continue;
    int v = ops->vote ? ops->vote(c->tp, m, key) : RESIHP_ENOTSUP;
    if (!v)
      resihp__set_add(&voting, m);
    else if (v != RESIHP_ENOTSUP || ops->post_send(c->tp, m, tag, nothing, 0) ||
             ops->post_recv(c->tp, m, tag, sink, 0))
      resihp__comm_mark_dead(c, m, RESIHP_EPEER);
  }
  int64_t deadline = resihp__now_ms() + 10 * (int64_t)c->detect_ms;
  for (;;) {
    int waiting = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nmembers && !rc; i++) {
      int m = c->members[i];
      if (m == c->world_rank)
        continue;
      if (!resihp__set_has(&got, m) &&
          (resihp__set_has(&voting, m) ? ops->voted(c->tp, m, key)
                                       : ops->recv_done(c->tp, m)))
        resihp__set_add(&got, m);
      if (c->abort_seq[m] == seq1)
        rc = RESIHP_EPEER;
      else if (!resihp__set_has(&got, m) && !resihp__set_has(&c->dead, m))
        waiting = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc || !waiting)
      break;
    if (resihp__now_ms() > deadline) {
      rc = RESIHP_ETIMEDOUT;
      break;
    }
    int r = ops->progress(c->tp, c->hb_ms, &bad);
    if (r < 0 && bad >= 0)
      resihp__comm_mark_dead(c, bad, r); /* dead counts as done here */
  }
  for (int i = 0; i < c->nmembers; i++) /* stop watching votes not seen */
    if (resihp__set_has(&voting, c->members[i]) &&
        !resihp__set_has(&got, c->members[i]))
      ops->voted(c->tp, c->members[i], 0);
  return rc;
}

void resihp__copy_out(void *buf, const void *work, size_t count, int dtype,
                      double div) {
  if (div == 1.0) {
    if (buf != work)
      memcpy(buf, work, count * resihp__dtype_size(dtype));
    return;
  }
  switch (dtype) {
  case RESIHP_FLOAT32: {
    /* n is exact in float; float division vectorises. */
    float *d = buf;
    const float *s = work;
    float fdiv = (float)div;
    for (size_t i = 0; i < count; i++)
      d[i] = s[i] / fdiv;
    break;
  }
  case RESIHP_FLOAT64: {
    double *d = buf;
    const double *s = work;
    for (size_t i = 0; i < count; i++)
      d[i] = s[i] / div;
    break;
  }
  case RESIHP_BFLOAT16: {
    uint16_t *d = buf;
    const uint16_t *s = work;
    for (size_t i = 0; i < count; i++)
      d[i] = resihp_bf16_from_float((float)(resihp_bf16_to_float(s[i]) / div));
    break;
  }
  case RESIHP_FIXED64: {
    /* Integer average rounds toward zero; exact and order-free. */
    int64_t *d = buf;
    const int64_t *s = work;
    for (size_t i = 0; i < count; i++)
      d[i] = s[i] / (int64_t)div;
    break;
  }
  }
}

int resihp_allreduce(resihp_comm_t *c, void *buf, size_t count,
                     resihp_dtype_t dtype, resihp_op_t op) {
  return resihp_allreduce_to(c, buf, buf, count, dtype, op);
}

int resihp_allreduce_to(resihp_comm_t *c, const void *sendbuf, void *buf,
                        size_t count, resihp_dtype_t dtype, resihp_op_t op) {
  size_t esz = resihp__dtype_size(dtype);
  int inplace = sendbuf == buf;
  if (!c || (!buf && count) || (!sendbuf && count) || !esz ||
      (op != RESIHP_OP_SUM && op != RESIHP_OP_AVG) ||
      count > ((size_t)1 << 40)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "resihp_allreduce: invalid argument (comm %p, buf %p, count "
               "%zu, dtype %d, op %d)",
               (void *)c, buf, count, (int)dtype, (int)op);
    return RESIHP_EINVAL;
  }
  int bad = -1, rc;
  if ((rc = resihp__comm_enter(c, "all-reduce")))
    return rc;
  int fixed = c->deterministic && dtype != RESIHP_FIXED64;
  int wire = fixed ? RESIHP_FIXED64 : (int)dtype;
  size_t wsz = resihp__dtype_size(wire);
  double div = op == RESIHP_OP_AVG ? (double)c->nmembers : 1.0;
  const void *in;
  void *work, *staging = NULL, *fixed_out = NULL;
  if (fixed || (c->unprotected && inplace)) {
    /* The deterministic ring's second chunk: step 0's conversion. */
    if ((rc = resihp__reserve(&c->staging, &c->staging_cap,
                              (fixed ? 2 : 1) * c->chunk_bytes)))
      return rc;
    staging = c->staging;
  }
  if (fixed) {
    /* int64 sums, the narrow forms of the chunks the ring sends so, and
     * (in place) the results until the outcome is known. */
    size_t nlen = resihp__ring_fixed_narrow_len(c, count);
    size_t outoff = (count * wsz + nlen * 4 + 63) & ~(size_t)63;
    if ((rc = resihp__reserve(&c->work, &c->work_cap,
                              outoff + (inplace ? count * esz : 0))))
      return rc;
    in = work = c->work;
    fixed_out = inplace ? (char *)work + outoff : buf;
  } else if (c->unprotected && inplace) {
    in = work = buf;
  } else if (!inplace) {
    /* Out of place: sendbuf is only read, so it survives any failure and
     * no private copy is needed. */
    staging = NULL;
    in = sendbuf;
    work = buf;
  } else {
    if ((rc = resihp__reserve(&c->work, &c->work_cap, count * wsz + 1)))
      return rc;
    in = sendbuf;
    work = c->work;
  }
  int small = resihp__small_fits(c, count * wsz);
  int cma = !small && resihp__cma_chosen(c, count * wsz);
  if (fixed && cma) /* this path wants the input whole */
    resihp__fixed_from(work, sendbuf, NULL, count, (int)dtype, c->frac_bits);
  /* Deterministic: the caller's values, the narrow forms, the results. */
  struct resihp__ring_fixed fx = {
      sendbuf,      (int)dtype,
      c->frac_bits, fixed ? (int32_t *)((char *)work + count * wsz) : NULL,
      fixed_out,    div};
  if (small) {
    if ((rc = resihp__reserve(&c->staging, &c->staging_cap,
                              (size_t)c->nmembers * count * wsz)))
      return rc;
    rc = resihp__small_allreduce(c, in, fixed ? &fx : NULL, work, c->staging,
                                 count, wire, &bad);
  } else if (cma) {
    if ((rc = resihp__reserve(&c->staging, &c->staging_cap,
                              RESIHP__CMA_STAGING)))
      return rc;
    rc = resihp__cma_allreduce(c, in, work, c->staging, count, wire, &bad);
  } else if (fixed) {
    /* The ring converts the input as it first reads it (fixed_point.h). */
    rc = resihp__ring_allreduce_fixed(c, &fx, work, staging, count, &bad);
  } else {
    rc = resihp__ring_allreduce(c, in, work, staging, count, wire, &bad);
  }
  if (rc)
    return fail(c, rc, bad);
  if (!c->unprotected && c->nmembers > 1 && (rc = resihp__comm_commit(c)))
    return fail(c, rc, -1);
  c->seq++;
  if (fixed && cma)
    resihp__fixed_to(buf, work, count, (int)dtype, c->frac_bits, div);
  else if (fixed && fixed_out != buf)
    memcpy(buf, fixed_out, count * esz);
  else if (!fixed)
    resihp__copy_out(buf, work, count, wire, div);
  return 0;
}

/* ---- GPU data plane -------------------------------------------------------
 * Same outcome protocol as above; the NCCL transport moves the data. */

int resihp_comm_attach_device(resihp_comm_t *c, int device) {
  if (!c)
    return RESIHP_EINVAL;
#ifndef RESIHP_HAVE_NCCL
  (void)device;
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "this libresihp was built without NCCL: rebuild with --with-nccl "
             "for device buffers");
  return RESIHP_ENOTSUP;
#else
  if (c->gpu) {
    c->gpu->ops->destroy(c->gpu);
    c->gpu = NULL;
  }
  c->gpu_detached = 0;
#ifdef RESIHP_HAVE_CUDA_KERNELS
  resihp__device_fixed_free(c); /* its sums may be on another device */
#endif
  if (!c->unprotected && atomic_load(&c->failed))
    return fail(c, RESIHP_EPEER, -1);
  uint8_t id[RESIHP__NCCL_ID_BYTES];
  int rc = 0, bad = -1;
  const resihp__transport_ops_t *ops = c->tp->ops;
  resihp__tag_t tag = {c->seq, UINT32_MAX - 1, 0};
  int root = c->members[0];
  if (c->world_rank == root) {
    if ((rc = resihp__nccl_unique_id(id)))
      memset(id, 0, sizeof(id)); /* still send: peers must not wait */
    for (int i = 1; i < c->nmembers; i++)
      if (ops->post_send(c->tp, c->members[i], tag, id, sizeof(id)))
        rc = RESIHP_EPEER;
  } else if ((rc = ops->post_recv(c->tp, root, tag, id, sizeof(id)))) {
    return fail(c, rc, root);
  }
  int64_t deadline = resihp__now_ms() + c->op_ms;
  for (int got = c->world_rank == root;;) {
    if (!got && ops->recv_done(c->tp, root))
      got = 1;
    int pending = 0;
    for (int i = 0; i < c->nmembers; i++)
      if (c->members[i] != c->world_rank)
        pending |= ops->sends_pending(c->tp, c->members[i]);
    if (got && !pending)
      break;
    if (atomic_load(&c->failed) || resihp__now_ms() > deadline)
      return fail(c, RESIHP_EPEER, -1);
    int r = ops->progress(c->tp, c->hb_ms, &bad);
    if (r < 0)
      return fail(c, r, bad);
  }
  c->seq++;
  static const uint8_t zero[RESIHP__NCCL_ID_BYTES];
  if (rc || !memcmp(id, zero, sizeof(id)))
    return rc ? rc : RESIHP_EIO;
  rc = resihp__nccl_transport_create(id, c->my_index, c->nmembers, device,
                                     &c->failed, 10 * c->detect_ms, &c->gpu);
  c->gpu_device = device;
  if (rc)
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d: cannot attach CUDA device %d: %s", c->world_rank,
               device, resihp_strerror(rc));
  return rc;
#endif
}

int resihp_allreduce_device(resihp_comm_t *c, const void *sendbuf,
                            void *recvbuf, size_t count, resihp_dtype_t dtype,
                            resihp_op_t op, void *cuda_stream) {
  if (!c || !resihp__dtype_size(dtype) || (count && (!sendbuf || !recvbuf)))
    return RESIHP_EINVAL;
  if (!c->gpu && c->gpu_detached) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "the device communicator was lost in a shrink (epoch %u): "
               "call resihp_comm_attach_device() again",
               c->epoch);
    return RESIHP_ESTATE;
  }
  if (!c->gpu) {
#ifdef RESIHP_HAVE_CUDA
    return resihp__allreduce_staged(c, sendbuf, recvbuf, count, dtype, op,
                                    cuda_stream);
#else
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "this libresihp was built without CUDA: rebuild it with "
               "--with-cuda for device buffers");
    return RESIHP_ENOTSUP;
#endif
  }
  if (!c->unprotected && atomic_load(&c->failed))
    return fail(c, RESIHP_EPEER, -1);
  int rc;
  if (c->deterministic && dtype != RESIHP_FIXED64) {
#ifdef RESIHP_HAVE_CUDA_KERNELS
    rc = resihp__allreduce_device_fixed(c, sendbuf, recvbuf, count, dtype, op,
                                        cuda_stream);
#else
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "deterministic mode on NCCL needs the CUDA kernels, and this "
               "libresihp was built without nvcc: rebuild it with nvcc in "
               "the CUDA directory, or sum int64 (RESIHP_FIXED64) yourself");
    return RESIHP_ENOTSUP;
#endif
  } else {
    rc = c->gpu->ops->allreduce(c->gpu, sendbuf, recvbuf, count, (int)dtype,
                                (int)op, cuda_stream, &c->failed,
                                10 * c->detect_ms);
  }
  if (rc)
    return fail(c, rc, -1);
  if (!c->unprotected && c->nmembers > 1 && (rc = resihp__comm_commit(c)))
    return fail(c, rc, -1);
  c->seq++;
  return 0;
}
