/* resihp_allreduce: buffer management, fault-tolerant outcome (DONE/ABORT
 * on the control connections, see comm.c) and deterministic mode around the
 * ring algorithm of ring_allreduce.c. The caller's buffer is written only
 * once the outcome is known to be success everywhere. */
#include "config.h"

#include "comm_internal.h"
#include "../transport/mesh.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int reserve(void **buf, size_t *cap, size_t want) {
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
static int fail(resihp_comm_t *c, int ring_rc, int bad_peer) {
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
             "rank %d: all-reduce aborted in epoch %u (%s); suspected:%s; "
             "call resihp_comm_shrink() and retry",
             c->world_rank, c->epoch, resihp_strerror(code), who);
  return code;
}

/* Ring done here: wait until every member is done or dead, or one aborted. */
static int commit(resihp_comm_t *c) {
  int64_t seq1 = (int64_t)c->seq + 1;
  int rc = 0;
  resihp__comm_broadcast_ctrl(c, RESIHP__FRAME_DONE, c->seq, NULL);
  int64_t deadline = resihp__now_ms() + 10 * (int64_t)c->detect_ms;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    int waiting = 0;
    for (int i = 0; i < c->nmembers && !rc; i++) {
      int m = c->members[i];
      if (m == c->world_rank)
        continue;
      if (c->abort_seq[m] == seq1)
        rc = RESIHP_EPEER;
      else if (c->done_seq[m] < seq1 && !resihp__set_has(&c->dead, m))
        waiting = 1;
    }
    if (rc || !waiting)
      break;
    int64_t left = deadline - resihp__now_ms();
    if (left <= 0) {
      rc = RESIHP_ETIMEDOUT;
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(left < 50 ? left : 50) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static void copy_out(void *buf, const void *work, size_t count, int dtype,
                     double div) {
  if (div == 1.0) {
    if (buf != work)
      memcpy(buf, work, count * resihp__dtype_size(dtype));
    return;
  }
  switch (dtype) {
  case RESIHP_FLOAT32: {
    float *d = buf;
    const float *s = work;
    for (size_t i = 0; i < count; i++)
      d[i] = (float)(s[i] / div);
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
  size_t esz = resihp__dtype_size(dtype);
  if (!c || (!buf && count) || !esz || (op != RESIHP_OP_SUM && op != RESIHP_OP_AVG) ||
      count > ((size_t)1 << 40)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "resihp_allreduce: invalid argument (comm %p, buf %p, count "
               "%zu, dtype %d, op %d)",
               (void *)c, buf, count, (int)dtype, (int)op);
    return RESIHP_EINVAL;
  }
  int bad = -1, rc;
  if (!c->unprotected && atomic_load(&c->failed))
    return fail(c, RESIHP_EPEER, -1);
  int fixed = c->deterministic && dtype != RESIHP_FIXED64;
  int wire = fixed ? RESIHP_FIXED64 : (int)dtype;
  size_t wsz = resihp__dtype_size(wire);
  double div = op == RESIHP_OP_AVG ? (double)c->nmembers : 1.0;
  const void *in;
  void *work, *staging = NULL;
  if (fixed || c->unprotected) {
    if ((rc = reserve(&c->staging, &c->staging_cap, c->chunk_bytes)))
      return rc;
    staging = c->staging;
  }
  if (fixed) {
    if ((rc = reserve(&c->work, &c->work_cap, count * wsz + 1)))
      return rc;
    int64_t *fx = c->work;
    if (dtype == RESIHP_FLOAT32)
      resihp_fixed_from_float(fx, buf, count, c->frac_bits);
    else if (dtype == RESIHP_FLOAT64)
      resihp_fixed_from_double(fx, buf, count, c->frac_bits);
    else
      resihp_fixed_from_bf16(fx, buf, count, c->frac_bits);
    in = work = fx;
  } else if (c->unprotected) {
    in = work = buf;
  } else {
    if ((rc = reserve(&c->work, &c->work_cap, count * wsz + 1)))
      return rc;
    in = buf;
    work = c->work;
  }
  rc = resihp__ring_allreduce(c, in, work, staging, count, wire, &bad);
  if (rc)
    return c->unprotected ? (c->seq++, rc) : fail(c, rc, bad);
  if (!c->unprotected && c->nmembers > 1 && (rc = commit(c)))
    return fail(c, rc, -1);
  c->seq++;
  if (fixed) {
    if (dtype == RESIHP_FLOAT32)
      resihp_fixed_to_float(buf, work, count, c->frac_bits, div);
    else if (dtype == RESIHP_FLOAT64)
      resihp_fixed_to_double(buf, work, count, c->frac_bits, div);
    else
      resihp_fixed_to_bf16(buf, work, count, c->frac_bits, div);
  } else {
    copy_out(buf, work, count, wire, div);
  }
  return 0;
}
