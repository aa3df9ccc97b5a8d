/* SPDX-License-Identifier: BSD-3-Clause */
/* Cross-memory attach set-up and reads (see cma.h). */
#include "config.h"

#include "cma.h"
#include "shm.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <poll.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define CMA_MAGIC 0x52434d41u /* "RCMA" */

struct probe_msg {
  uint32_t magic, want;
  uint64_t pid, addr, value;
};

int resihp__cma_read(pid_t pid, void *dst, uint64_t addr, size_t len) {
  uint8_t *d = dst;
  while (len) {
    struct iovec l = {d, len}, r = {(void *)(uintptr_t)addr, len};
    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return -errno;
    if (got == 0) /* a partial read stops at an unmapped page */
      return -EFAULT;
    d += got;
    addr += (uint64_t)got;
    len -= (size_t)got;
  }
  return 0;
}

static int pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

int resihp__cma_exited(int pidfd) {
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  int r;
  while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
    ;
  return r != 0; /* readable once the process exited; errors count too */
}

static void set_bit(uint8_t *set, int i) {
  set[i >> 3] |= (uint8_t)(1u << (i & 7));
}

int resihp__cma_setup(int self, int n, const int *data_fds,
                      resihp__msgauth_t *auth, const uint8_t *local, int want,
                      int64_t deadline_ms, pid_t *pid, int *pidfd,
                      uint8_t *reach, size_t set_len) {
  memset(pid, 0, (size_t)n * sizeof(*pid));
  for (int i = 0; i < n; i++)
    pidfd[i] = -1;
  memset(reach, 0, (size_t)n * set_len);
  /* On the heap, freed only once every peer has said that it read it. */
  uint64_t *word = malloc(sizeof(*word));
  uint8_t *ok = calloc((size_t)n, 1);
  uint8_t *set = malloc(set_len);
  int rc = word && ok && set ? 0 : RESIHP_ENOMEM;
  if (rc)
    goto out;
  if (getrandom(word, sizeof(*word), 0) != (ssize_t)sizeof(*word))
    want = 0;
  struct probe_msg me = {CMA_MAGIC, want ? 1 : 0, (uint64_t)getpid(),
                         (uint64_t)(uintptr_t)word, *word};
#define EACH_LOCAL(i)                                                          \
  for (int i = 0; i < n && !rc; i++)                                           \
    if (i != self && local[i] && data_fds[i] >= 0)
  EACH_LOCAL(i)
  rc = resihp__setup_send(data_fds[i], auth ? &auth[i] : NULL, &me, sizeof(me),
                          deadline_ms);
  EACH_LOCAL(i) {
    struct probe_msg p;
    if ((rc = resihp__setup_recv(data_fds[i], auth ? &auth[i] : NULL, &p,
                                 sizeof(p), deadline_ms, i)))
      break;
    if (p.magic != CMA_MAGIC) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d sent a malformed memory-attach set-up message", i);
      rc = RESIHP_EPROTO;
      break;
    }
    if (!want || !p.want || !p.pid || p.pid > INT_MAX)
      continue;
    uint64_t v = ~p.value;
    int r = (pidfd[i] = pidfd_open((pid_t)p.pid)) < 0
                ? -errno
                : resihp__cma_read((pid_t)p.pid, &v, p.addr, sizeof(v));
    if (!r && v == p.value) {
      ok[i] = 1;
      pid[i] = (pid_t)p.pid;
    } else {
      resihp_log(RESIHP_LOG_INFO, "allreduce",
                 "rank %d cannot read the memory of rank %d (pid %llu: %s): "
                 "single copy off, shared-memory rings instead (with Yama "
                 "ptrace_scope 1, see resihp(8))",
                 self, i, (unsigned long long)p.pid,
                 r ? strerror(-r) : "another process");
    }
  }
  /* Both ends must be able to read each other. */
  EACH_LOCAL(i)
  rc = resihp__setup_send(data_fds[i], auth ? &auth[i] : NULL, &ok[i], 1,
                          deadline_ms);
  EACH_LOCAL(i) {
    uint8_t peer_ok = 0;
    if ((rc = resihp__setup_recv(data_fds[i], auth ? &auth[i] : NULL, &peer_ok,
                                 1, deadline_ms, i)))
      break;
    if (!peer_ok)
      pid[i] = 0;
  }
  /* Reach sets, so that every member decides alike for any view. */
  memset(set, 0, set_len);
  for (int i = 0; i < n; i++)
    if (pid[i] && (size_t)(i >> 3) < set_len)
      set_bit(set, i);
  memcpy(reach + (size_t)self * set_len, set, set_len);
  EACH_LOCAL(i)
  rc = resihp__setup_send(data_fds[i], auth ? &auth[i] : NULL, set, set_len,
                          deadline_ms);
  EACH_LOCAL(i) {
    uint8_t *dst = reach + (size_t)i * set_len;
    if ((rc = resihp__setup_recv(data_fds[i], auth ? &auth[i] : NULL, dst,
                                 set_len, deadline_ms, i)))
      break;
    if (!pid[i])
      memset(dst, 0, set_len); /* unknown: decides nothing here */
  }
#undef EACH_LOCAL
out:
  for (int i = 0; i < n; i++)
    if (rc || !pid[i]) {
      pid[i] = 0;
      if (pidfd[i] >= 0)
        close(pidfd[i]);
      pidfd[i] = -1;
    }
  free(word);
  free(ok);
  free(set);
  return rc;
}
