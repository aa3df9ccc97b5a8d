/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared-memory byte rings (see shm.h). */
#include "config.h"

#include "shm.h"
#include "mesh.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define RING_BYTES ((size_t)4 << 20) /* power of two */
#define SHM_MAGIC 0x5253484d52494e47ull /* "RSHMRING" */
#define SETUP_MAGIC 0x5253484du        /* "RSHM" */

struct ring_hdr {
  uint64_t magic, nonce;
  _Alignas(64) _Atomic uint64_t head; /* bytes ever written (producer) */
  _Atomic int prod_waiting;
  _Alignas(64) _Atomic uint64_t tail; /* bytes ever read (consumer) */
  _Atomic int cons_waiting;
  /* The producer's commit votes (the key of the collective it finished),
   * by the key's parity: a producer whose collectives carry no data (count
   * 0) may vote for the next one before the consumer saw this one, never
   * for the one after (that needs the consumer's vote for the next). And
   * whether the consumer sleeps until one changes. */
  _Alignas(64) _Atomic uint64_t vote[2];
  _Atomic int vote_waiting;
  _Alignas(64) uint8_t data[];
};

/* The peer can write every byte of the shared header, so this side never
 * trusts its own index there: it keeps it here (pos: head for the
 * producer's mapping, tail for the consumer's) and only publishes it, and
 * the peer's index is accepted only within one ring of it. */
struct resihp__ring {
  struct ring_hdr *h;
  size_t map_len;
  uint64_t pos;
};

/* Before the ring carries anything: only this side (the producer) ever
 * writes the data area, and the consumer reads no byte before head says so,
 * so storing zeros over the fresh, zeroed pages changes nothing. */
static void prefault_writes(resihp__ring_t *r) {
  volatile uint8_t *d = r->h->data;
  for (size_t off = 0; off < RING_BYTES; off += 4096)
    d[off] = 0;
}

struct setup_msg {
  uint32_t magic, ok;
  uint64_t nonce;
  char name[48];
};

static size_t map_len(void) { return sizeof(struct ring_hdr) + RING_BYTES; }

void resihp__ring_unmap(resihp__ring_t *r) {
  if (!r)
    return;
  munmap(r->h, r->map_len);
  free(r);
}

/* The pages are mapped here, at set-up, not one fault at a time during
 * the first collectives: a first touch of a shared-memory page costs
 * microseconds on bare metal and tens of them in a VM (measured: 20-50 us,
 * and a 4 MiB ring has 1024 pages), so the first pass through a ring met
 * a new page per 4 KiB of data on both sides and the first ~1000
 * all-reduces of 4 KiB took ~600 us instead of ~20. MAP_POPULATE maps a
 * shared mapping read-only, which is all the consumer needs; the producer
 * also writes every page once (prefault_writes). */
static resihp__ring_t *map_fd(int fd) {
  void *p = mmap(NULL, map_len(), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED)
    return NULL;
  resihp__ring_t *r = malloc(sizeof(*r));
  if (!r) {
    munmap(p, map_len());
    return NULL;
  }
  r->h = p;
  r->map_len = map_len();
  r->pos = 0; /* both indices start at 0 (a fresh, zeroed object) */
  return r;
}

/* Bytes in the ring, from this side's own index and the peer's, or
 * RESIHP_EPROTO when the peer's index is impossible (it wrote past what is
 * free, or moved backwards). */
static int64_t used(uint64_t head, uint64_t tail) {
  uint64_t n = head - tail;
  if (n > RING_BYTES) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "shared-memory ring corrupted by the peer (head %llu, tail "
               "%llu, size %zu): dropping the peer",
               (unsigned long long)head, (unsigned long long)tail, RING_BYTES);
    return RESIHP_EPROTO;
  }
  return (int64_t)n;
}

/* After a store the other side may be sleeping on: fence, then a doorbell
 * if it asked for one (it sets its flag, fences and looks again). */
static void wake_if_waiting(_Atomic int *waiting, int *doorbell) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load(waiting) && atomic_exchange(waiting, 0))
    *doorbell = 1;
}

/* Producer: the bytes up to head are the consumer's; ring if it waits. */
static void publish(resihp__ring_t *r, uint64_t head, int *doorbell) {
  r->pos = head;
  atomic_store_explicit(&r->h->head, head, memory_order_release);
  wake_if_waiting(&r->h->cons_waiting, doorbell);
}

uint8_t *resihp__ring_reserve(resihp__ring_t *r, size_t want, int *bad) {
  int64_t n =
      used(r->pos, atomic_load_explicit(&r->h->tail, memory_order_acquire));
  *bad = n < 0;
  size_t pos = (size_t)r->pos & (RING_BYTES - 1);
  if (n < 0 || RING_BYTES - (size_t)n < want || RING_BYTES - pos < want)
    return NULL;
  return r->h->data + pos;
}

void resihp__ring_publish(resihp__ring_t *r, size_t n, int *doorbell) {
  publish(r, r->pos + n, doorbell);
}

ssize_t resihp__ring_write(resihp__ring_t *r, const struct iovec *iov,
                           int niov, int arm, int *doorbell) {
  struct ring_hdr *h = r->h;
  uint64_t head = r->pos;
  int64_t n = used(head, atomic_load_explicit(&h->tail, memory_order_acquire));
  if (n < 0)
    return n;
  size_t space = RING_BYTES - (size_t)n;
  if (!space && !arm)
    return 0;
  if (!space) {
    /* Ask to be woken, then look again: the consumer either sees the flag
     * or we see its progress (both sides fence between store and load). */
    atomic_store(&h->prod_waiting, 1);
    atomic_thread_fence(memory_order_seq_cst);
    n = used(head, atomic_load_explicit(&h->tail, memory_order_acquire));
    if (n < 0)
      return n;
    space = RING_BYTES - (size_t)n;
    if (!space)
      return 0;
  }
  size_t done = 0;
  for (int k = 0; k < niov && done < space; k++) {
    const uint8_t *src = iov[k].iov_base;
    size_t len = iov[k].iov_len;
    if (len > space - done)
      len = space - done;
    size_t pos = (size_t)(head + done) & (RING_BYTES - 1);
    size_t first = RING_BYTES - pos < len ? RING_BYTES - pos : len;
    memcpy(h->data + pos, src, first);
    memcpy(h->data, src + first, len - first);
    done += len;
  }
  publish(r, head + done, doorbell);
  return (ssize_t)done;
}

ssize_t resihp__ring_consume(resihp__ring_t *r, size_t len, int arm,
                             int *doorbell,
                             void (*consume)(void *arg, const uint8_t *bytes,
                                             size_t n),
                             void *arg) {
  struct ring_hdr *h = r->h;
  uint64_t tail = r->pos;
  int64_t avail =
      used(atomic_load_explicit(&h->head, memory_order_acquire), tail);
  if (avail < 0)
    return avail;
  if (!avail && !arm)
    return 0;
  if (!avail) {
    atomic_store(&h->cons_waiting, 1);
    atomic_thread_fence(memory_order_seq_cst);
    avail = used(atomic_load_explicit(&h->head, memory_order_acquire), tail);
    if (avail <= 0)
      return avail;
  }
  if (len > (size_t)avail)
    len = (size_t)avail;
  size_t pos = (size_t)tail & (RING_BYTES - 1);
  size_t first = RING_BYTES - pos < len ? RING_BYTES - pos : len;
  consume(arg, h->data + pos, first);
  if (len > first)
    consume(arg, h->data, len - first);
  r->pos = tail + len;
  atomic_store_explicit(&h->tail, r->pos, memory_order_release);
  wake_if_waiting(&h->prod_waiting, doorbell);
  return (ssize_t)len;
}

void resihp__ring_vote(resihp__ring_t *r, uint64_t key, int *doorbell) {
  atomic_store_explicit(&r->h->vote[key & 1], key, memory_order_release);
  wake_if_waiting(&r->h->vote_waiting, doorbell);
}

int resihp__ring_voted(resihp__ring_t *r, uint64_t key, int arm) {
  struct ring_hdr *h = r->h;
  if (atomic_load_explicit(&h->vote[key & 1], memory_order_acquire) == key)
    return 1;
  if (!arm)
    return 0;
  /* As for data: ask, then look again (both sides fence in between). */
  atomic_store(&h->vote_waiting, 1);
  atomic_thread_fence(memory_order_seq_cst);
  return atomic_load_explicit(&h->vote[key & 1], memory_order_acquire) == key;
}

int resihp__ring_pending(resihp__ring_t *r) {
  return atomic_load_explicit(&r->h->head, memory_order_acquire) != r->pos;
}

_Atomic uint64_t *resihp__ring_test_index(resihp__ring_t *r, int which) {
  return which ? &r->h->tail : &r->h->head;
}

struct copy_out {
  uint8_t *dst;
};

static void copy_span(void *arg, const uint8_t *bytes, size_t n) {
  struct copy_out *c = arg;
  if (c->dst) {
    memcpy(c->dst, bytes, n);
    c->dst += n;
  }
}

ssize_t resihp__ring_read(resihp__ring_t *r, void *buf, size_t len, int arm,
                          int *doorbell) {
  struct copy_out c = {buf};
  return resihp__ring_consume(r, len, arm, doorbell, copy_span, &c);
}

/* The set-up messages travel on the authenticated data links, and with
 * their MAC (auth, when not NULL): an object name or a verdict changed on
 * the path could otherwise point this rank at memory someone else wrote. */
static int send_sealed(int fd, resihp__msgauth_t *auth, const void *m,
                       size_t len, int64_t deadline) {
  uint8_t tag[RESIHP__MAC_LEN];
  int rc = resihp__io_full(fd, (void *)m, len, 1, deadline);
  if (rc || !auth)
    return rc;
  const void *parts[1] = {m};
  resihp__msgauth_seal(auth, parts, &len, 1, tag);
  return resihp__io_full(fd, tag, sizeof(tag), 1, deadline);
}

static int recv_sealed(int fd, resihp__msgauth_t *auth, void *m, size_t len,
                       int64_t deadline, int peer) {
  uint8_t tag[RESIHP__MAC_LEN];
  int rc = resihp__io_full(fd, m, len, 0, deadline);
  if (rc || !auth)
    return rc;
  if ((rc = resihp__io_full(fd, tag, sizeof(tag), 0, deadline)))
    return rc;
  const void *parts[1] = {m};
  if (resihp__msgauth_open(auth, parts, &len, 1, tag)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "transport set-up message from rank %d fails its MAC (changed "
               "on the way)",
               peer);
    return RESIHP_EPROTO;
  }
  return 0;
}

int resihp__setup_send(int fd, resihp__msgauth_t *auth, const void *m,
                       size_t len, int64_t deadline_ms) {
  return send_sealed(fd, auth, m, len, deadline_ms);
}

int resihp__setup_recv(int fd, resihp__msgauth_t *auth, void *m, size_t len,
                       int64_t deadline_ms, int peer) {
  return recv_sealed(fd, auth, m, len, deadline_ms, peer);
}

void (*resihp__shm_test_hook)(int phase, int peer);

static void phase(int ph, int peer) {
  if (resihp__shm_test_hook)
    resihp__shm_test_hook(ph, peer);
}

/* ---- stale rings ----------------------------------------------------------
 * The name carries its creator's PID, so a later set-up on the host can tell
 * a ring nobody will ever unlink: its creator is gone. A zombie counts as
 * gone (its peer sees the socket's EOF before the parent reaps it). A PID
 * reused by a live process keeps its ring until that one ends too. */
#define STALE_MAX_ENTRIES 4096 /* a user can fill /dev/shm: bounded scan */

static int pid_gone(pid_t pid) {
  if (kill(pid, 0) < 0)
    return errno == ESRCH;
  char path[32], state = 0;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return 0;
  /* "PID (COMM) STATE ...": COMM may hold spaces and parentheses */
  char buf[512];
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *close_paren = strrchr(buf, ')');
  if (close_paren && close_paren[1] == ' ')
    state = close_paren[2];
  return state == 'Z' || state == 'X';
}

/* A decimal number without sign or leading zero, at most max, then sep;
 * the byte after sep, or NULL. */
static const char *number(const char *p, char sep, long max, long *out) {
  long v = 0;
  const char *q = p;
  for (; *q >= '0' && *q <= '9'; q++) {
    if (v > (max - (*q - '0')) / 10)
      return NULL;
    v = v * 10 + (*q - '0');
  }
  if (q == p || *q != sep || (q - p > 1 && *p == '0'))
    return NULL;
  *out = v;
  return q + 1;
}

pid_t resihp__shm_ring_creator(const char *name) {
  long pid, peer;
  const char *p = strncmp(name, "resihp-", 7) ? NULL : name + 7;
  if (!p || !(p = number(p, '-', INT_MAX, &pid)) || pid <= 0 ||
      !(p = number(p, '-', INT_MAX, &peer)) || strlen(p) != 16 ||
      strspn(p, "0123456789abcdef") != 16)
    return -1;
  return (pid_t)pid;
}

int resihp__shm_clean_stale(void) {
  DIR *d = opendir("/dev/shm");
  if (!d)
    return 0;
  uid_t self = geteuid();
  int removed = 0;
  struct dirent *e;
  for (long n = 0; n < STALE_MAX_ENTRIES && (e = readdir(d)) != NULL; n++) {
    pid_t pid = resihp__shm_ring_creator(e->d_name);
    struct stat st;
    if (pid < 0 || pid == getpid() ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || st.st_uid != self || !pid_gone(pid))
      continue;
    char name[NAME_MAX + 2];
    snprintf(name, sizeof(name), "/%s", e->d_name);
    if (shm_unlink(name) == 0) {
      removed++;
      resihp_log(RESIHP_LOG_DEBUG, "allreduce",
                 "removed %s: shared-memory ring of rank process %d, which "
                 "died during a set-up",
                 name, (int)pid);
    }
  }
  closedir(d);
  return removed;
}

int resihp__shm_setup(int self, int n, const int *data_fds,
                      resihp__msgauth_t *auth, int want_shm,
                      int64_t deadline_ms, resihp__ring_t **in,
                      resihp__ring_t **out) {
  struct setup_msg *mine = calloc((size_t)n, sizeof(*mine));
  int rc = 0;
  if (!mine)
    return RESIHP_ENOMEM;
  if (want_shm)
    resihp__shm_clean_stale();
  /* 1. Create an inbound ring per peer and tell the peer its name. */
  for (int i = 0; i < n; i++) {
    in[i] = out[i] = NULL;
    if (i == self || data_fds[i] < 0)
      continue;
    struct setup_msg *m = &mine[i];
    m->magic = SETUP_MAGIC;
    if (want_shm && getrandom(&m->nonce, sizeof(m->nonce), 0) ==
                        (ssize_t)sizeof(m->nonce)) {
      snprintf(m->name, sizeof(m->name), "/resihp-%d-%d-%016llx",
               (int)getpid(), i, (unsigned long long)m->nonce);
      int fd = shm_open(m->name, O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd >= 0 && ftruncate(fd, (off_t)map_len()) == 0 &&
          (in[i] = map_fd(fd)) != NULL) {
        in[i]->h->magic = SHM_MAGIC;
        in[i]->h->nonce = m->nonce;
        m->ok = 1;
      }
      if (fd >= 0)
        close(fd);
      if (!m->ok) {
        shm_unlink(m->name);
        m->name[0] = '\0';
      }
    }
    phase(RESIHP__SHM_CREATED, i);
    if ((rc = send_sealed(data_fds[i], auth ? &auth[i] : NULL, m, sizeof(*m),
                          deadline_ms)))
      goto out;
    phase(RESIHP__SHM_NAMED, i);
  }
  /* 2. Map each peer's ring for us; 3. tell whether that worked. */
  uint8_t *ok_out = calloc((size_t)n, 1);
  if (!ok_out) {
    rc = RESIHP_ENOMEM;
    goto out;
  }
  for (int i = 0; i < n && !rc; i++) {
    if (i == self || data_fds[i] < 0)
      continue;
    struct setup_msg p;
    if ((rc = recv_sealed(data_fds[i], auth ? &auth[i] : NULL, &p, sizeof(p),
                          deadline_ms, i)))
      break;
    if (p.magic != SETUP_MAGIC) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d sent a malformed transport set-up message", i);
      rc = RESIHP_EPROTO;
      break;
    }
    p.name[sizeof(p.name) - 1] = '\0';
    if (mine[i].ok && p.ok && !strncmp(p.name, "/resihp-", 8)) {
      int fd = shm_open(p.name, O_RDWR, 0);
      if (fd >= 0) {
        struct stat st;
        if (!fstat(fd, &st) && (size_t)st.st_size == map_len())
          out[i] = map_fd(fd);
        close(fd);
        /* Mapped on both sides now (or never by us): the name has served,
         * and it must not outlive a creator killed from here on. */
        shm_unlink(p.name);
      }
      /* Same host and the same object: the nonce came over the
       * authenticated link. */
      if (out[i] && (out[i]->h->magic != SHM_MAGIC ||
                     out[i]->h->nonce != p.nonce)) {
        resihp__ring_unmap(out[i]);
        out[i] = NULL;
      }
    }
    if (out[i])
      prefault_writes(out[i]);
    ok_out[i] = out[i] != NULL;
    phase(RESIHP__SHM_MAPPED, i);
  }
  for (int i = 0; i < n && !rc; i++) {
    if (i == self || data_fds[i] < 0)
      continue;
    rc = send_sealed(data_fds[i], auth ? &auth[i] : NULL, &ok_out[i], 1,
                     deadline_ms);
    if (!rc)
      phase(RESIHP__SHM_TOLD, i);
  }
  for (int i = 0; i < n && !rc; i++) {
    if (i == self || data_fds[i] < 0)
      continue;
    uint8_t peer_ok = 0;
    if ((rc = recv_sealed(data_fds[i], auth ? &auth[i] : NULL, &peer_ok, 1,
                          deadline_ms, i)))
      break;
    phase(RESIHP__SHM_DONE, i);
    /* Shared memory only if both directions work; else TCP both ways. */
    if (!(peer_ok && ok_out[i])) {
      resihp__ring_unmap(in[i]);
      resihp__ring_unmap(out[i]);
      in[i] = out[i] = NULL;
    }
  }
  free(ok_out);
out:
  for (int i = 0; i < n; i++) {
    if (mine[i].ok)
      shm_unlink(mine[i].name); /* mapped on both sides (or abandoned) */
    if (rc) {
      resihp__ring_unmap(in[i]);
      resihp__ring_unmap(out[i]);
      in[i] = out[i] = NULL;
    }
  }
  free(mine);
  return rc;
}
