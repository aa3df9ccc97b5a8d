/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp error codes.
 *
 * Contract for every libresihp call that returns int: 0 on success, a
 * negative RESIHP_E* code on failure. A call that fails has no effect the
 * caller must undo (buffers passed in are left as they were unless the
 * function's own documentation says otherwise) and it has already logged a
 * message that says what the user can do about it.
 *
 * Codes are never renumbered or reused: append new ones at the end.
 */
#ifndef RESIHP_ERROR_H
#define RESIHP_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* XX(name, value, message) */
#define RESIHP_ERROR_MAP(XX)                                                   \
  XX(EINVAL, -1, "invalid argument")                                           \
  XX(ENOMEM, -2, "out of memory")                                              \
  XX(ERANGE, -3, "value out of range")                                         \
  XX(ENOENT, -4, "not found")                                                  \
  XX(EIO, -5, "I/O error")                                                     \
  XX(ETIMEDOUT, -6, "timed out")                                               \
  XX(EPEER, -7, "peer failed (died, hung or link cut)")                        \
  XX(EEPOCH, -8, "stale membership epoch")                                     \
  XX(EAUTH, -9, "authentication failed")                                       \
  XX(EPROTO, -10, "protocol error (malformed or truncated message)")          \
  XX(ECLOSED, -11, "connection closed")                                        \
  XX(ENOTSUP, -12, "not supported by this build")                              \
  XX(EABORTED, -13, "operation aborted")                                       \
  XX(ESYS, -14, "system call failed")                                          \
  XX(EBUSY, -15, "resource busy")                                              \
  XX(ENOSPC, -16, "no space left on device")                                   \
  XX(ENOSPARE, -17, "no healthy spare available")                              \
  XX(EINFEASIBLE, -18, "no feasible plan")                                     \
  XX(EPROBE, -19, "node health probe failed")                                  \
  XX(ESTATE, -20, "call not valid in the current state")                      \
  XX(EEXCLUDED, -21, "this rank was excluded from the membership by its peers") \
  XX(EREASSIGNED, -22, "peers failed: compute the reassigned microbatches and retry")

typedef enum {
  RESIHP_OK = 0,
#define RESIHP__ERR_ENUM(name, value, msg) RESIHP_##name = (value),
  RESIHP_ERROR_MAP(RESIHP__ERR_ENUM)
#undef RESIHP__ERR_ENUM
} resihp_error_t;

/* Human-readable message for a code; never NULL ("unknown error" otherwise). */
const char *resihp_strerror(int err);

/* Symbolic name ("RESIHP_ETIMEDOUT"); never NULL. */
const char *resihp_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_ERROR_H */
