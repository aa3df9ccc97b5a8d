/* SPDX-License-Identifier: BSD-3-Clause */
/* Cross-memory attach (process_vm_readv) between ranks of one host.
 *
 * The rings of shm.c copy every byte twice (into the ring, out of it). A
 * rank that may read its peer's memory directly needs one copy. Whether it
 * may is decided once, when the communicator is set up, over the
 * authenticated data links of the peers that already share memory rings
 * (so: the same host, the same user): each rank tells its pid and the
 * address and value of a fresh random word; the peer reads that word with
 * process_vm_readv and says whether it saw the value. A pair is usable
 * only when both reads worked and both ranks want the path. Each rank also
 * holds a pidfd of every peer it may read (Linux 5.3 or later; none: the
 * rings): after reading, it asks the pidfd whether the peer exited, since
 * a pid number alone may by then name another process.
 *
 * Why a read can fail: another pid namespace (the pid names some other
 * process or none), a seccomp filter, or Yama. With
 * /proc/sys/kernel/yama/ptrace_scope = 1 (common on production machines) a
 * process may only be read by its ancestors, and the ranks of a job are
 * siblings; the probe then fails and the ranks silently keep the rings.
 * This code never calls prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): that
 * would let any process of the user read and write the rank.
 *
 * The algorithm must make the same choice on every member, so the ranks
 * also exchange which peers each of them can read (reach sets): a member
 * takes the single-copy path only when every pair of the view is usable,
 * which every member then knows alike (resihp__cma_view_ok).
 */
#ifndef RESIHP_TRANSPORT_CMA_H
#define RESIHP_TRANSPORT_CMA_H

#include "msgauth.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Collective over the same-host peers (local[i] non-zero: rings were set
 * up with i; every such pair runs it, whatever want says). Fills pid[i]
 * and pidfd[i] (n entries; 0 and -1 where i cannot be read or does not
 * want to be; the caller closes the pidfds) and reach
 * (n sets of set_len bytes: reach[i*set_len ..] is the set of ranks that i
 * can read, as i said; this rank's own set, and empty sets for ranks it
 * cannot read). Blocking on data_fds until deadline_ms; a peer that sends
 * a malformed or forged message is RESIHP_EPROTO, a dead link RESIHP_EPEER
 * or RESIHP_ETIMEDOUT (the communicator is not created). */
int resihp__cma_setup(int self, int n, const int *data_fds,
                      resihp__msgauth_t *auth, const uint8_t *local, int want,
                      int64_t deadline_ms, pid_t *pid, int *pidfd,
                      uint8_t *reach, size_t set_len);

/* 1 when the process of pidfd has exited (or the fd is bad), else 0. */
int resihp__cma_exited(int pidfd);

/* Read len bytes at addr in process pid into dst (one or more
 * process_vm_readv calls). 0, or -errno of the failed call (ESRCH: the
 * process is gone; EFAULT: the range is not mapped there; EPERM: not
 * allowed, e.g. the pid now names another user's process). */
int resihp__cma_read(pid_t pid, void *dst, uint64_t addr, size_t len);

#endif
