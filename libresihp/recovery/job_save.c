/* SPDX-License-Identifier: BSD-3-Clause */
/* The resumable state (job_save.h): the file format, its writer and
 * readers, and the rank's side of a save and of a resume.
 *
 * A save happens at a step boundary, where nothing is in flight: the
 * coordinator asks one member replica (SAVE step=s, relayed down the star
 * like GO), each of its K ranks writes the shard it holds, the K ranks add
 * up their failures over the replica communicator, and the leader answers
 * SAVED step=s ok=1|0. The directory comes from RESIHP_STATE_DIR, which
 * resihp-run sets for the replica's step: no path ever travels on the
 * wire, only the step number. A resumed run's ranks find their step's
 * directory in RESIHP_RESUME_DIR and load their shard at their first
 * START, before computing anything. */
#include "config.h"

#include "../transport/msgauth.h"
#include "../transport/sha256.h"
#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int rc, char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* Whether st is a directory that only we can change: ours (the effective
 * uid), not writable by group or others. */
static const char *not_own_dir(const struct stat *st) {
  if (S_ISLNK(st->st_mode))
    return "is a symbolic link";
  if (!S_ISDIR(st->st_mode))
    return "is not a directory";
  if (st->st_uid != geteuid())
    return "belongs to another user";
  if (st->st_mode & 022)
    return "is writable by others";
  return NULL;
}

/* A state directory (--state-dir, a step-N in it), never followed as a
 * link, that only we can change: anyone else who could would plant links
 * that a clean-up follows, or shards that a resume loads. 0, or
 * RESIHP_EINVAL with what is wrong in err (RESIHP_ENOENT: it is not
 * there). */
static int own_dir(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st))
    return fail(errno == ENOENT ? RESIHP_ENOENT : RESIHP_ESYS, err, errlen,
                "cannot examine %s: %s", path, strerror(errno));
  const char *why = not_own_dir(&st);
  if (why)
    return fail(RESIHP_EINVAL, err, errlen,
                "refusing the state directory %s: it %s (owner uid %ld, mode "
                "%04o; this run is uid %ld): use a directory of your own, "
                "mode 0700",
                path, why, (long)st.st_uid, (unsigned)(st.st_mode & 07777),
                (long)geteuid());
  return 0;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* A shape digest: 16 hex digits, or "-" (no state registered). */
static int shape_ok(const char *s) {
  if (!strcmp(s, "-"))
    return 1;
  size_t n = strlen(s);
  if (n != 16)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!strchr("0123456789abcdef", s[i]))
      return 0;
  return 1;
}

void resihp__save_hdr_encode(const resihp__save_hdr_t *h,
                             uint8_t out[RESIHP__SAVE_HDR_LEN]) {
  memset(out, 0, RESIHP__SAVE_HDR_LEN);
  memcpy(out, RESIHP__SAVE_MAGIC, 8);
  put32(out + 8, RESIHP__SAVE_VERSION);
  put32(out + 12, (uint32_t)h->shard);
  put32(out + 16, (uint32_t)h->shards);
  put64(out + 24, (uint64_t)h->step);
  memcpy(out + 32, h->shape, strnlen(h->shape, 16));
  put64(out + 48, h->length);
}

int resihp__save_hdr_parse(const uint8_t *b, size_t n, resihp__save_hdr_t *h,
                           char *err, size_t errlen) {
  memset(h, 0, sizeof(*h));
  if (n < RESIHP__SAVE_HDR_LEN || memcmp(b, RESIHP__SAVE_MAGIC, 8))
    return fail(RESIHP_EPROTO, err, errlen,
                "not a resihp state file (no header)");
  uint32_t ver = get32(b + 8), shard = get32(b + 12), shards = get32(b + 16);
  uint64_t step = get64(b + 24), len = get64(b + 48);
  if (ver != RESIHP__SAVE_VERSION)
    return fail(RESIHP_EPROTO, err, errlen,
                "state file version %u, this resihp reads version %d",
                (unsigned)ver, RESIHP__SAVE_VERSION);
  if (shards < 1 || shards > RESIHP__SAVE_MAX_SHARDS || shard >= shards ||
      step > (uint64_t)RESIHP__SAVE_MAX_STEPS || get32(b + 20) ||
      get64(b + 56))
    return fail(RESIHP_EPROTO, err, errlen,
                "state file header out of range (shard %u of %u, step %llu)",
                (unsigned)shard, (unsigned)shards, (unsigned long long)step);
  char shape[17];
  memcpy(shape, b + 32, 16);
  shape[16] = '\0';
  /* NUL padding only after the text */
  size_t sl = strlen(shape);
  for (size_t i = sl; i < 16; i++)
    if (b[32 + i])
      sl = 99;
  if (sl == 99 || !shape_ok(shape))
    return fail(RESIHP_EPROTO, err, errlen,
                "state file header has a malformed shape digest");
  h->step = (long)step;
  h->shard = (int)shard;
  h->shards = (int)shards;
  h->length = len;
  memcpy(h->shape, shape, sizeof(shape));
  return 0;
}

static int write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

/* fsync a directory, so that a rename in it survives a crash. */
static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Write n bytes of parts to path through a temporary file: written,
 * fsync'ed, renamed. */
static int write_atomic(const char *dir, const char *path, const void *const *p,
                        const size_t *lens, int n, char *err, size_t errlen) {
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                0600);
  if (fd < 0)
    return fail(RESIHP_ESYS, err, errlen, "cannot create %s: %s", tmp,
                strerror(errno));
  int bad = 0;
  for (int i = 0; !bad && i < n; i++)
    bad = write_all(fd, p[i], lens[i]);
  bad = bad || fsync(fd);
  int e = errno;
  if (close(fd))
    bad = 1;
  if (bad || rename(tmp, path)) {
    e = bad ? e : errno;
    unlink(tmp);
    return fail(e == ENOSPC ? RESIHP_ENOSPC : RESIHP_EIO, err, errlen,
                "cannot write %s: %s", path, strerror(e));
  }
  sync_dir(dir);
  return 0;
}

/* Read DIR/key into key: a regular file of ours, mode 0600 (no bits for
 * anyone else), never through a link, of exactly the key's length. */
static int read_key(const char *path, uint8_t *key, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return fail(errno == ENOENT ? RESIHP_ENOENT : RESIHP_ESYS, err, errlen,
                "cannot open the state key %s: %s%s", path, strerror(errno),
                errno == ENOENT ? " (a state saved by an older resihp, or not "
                                  "a resihp state directory)"
                                : "");
  struct stat st;
  const char *why = NULL;
  if (fstat(fd, &st))
    why = "cannot be examined";
  else if (!S_ISREG(st.st_mode))
    why = "is not a regular file";
  else if (st.st_uid != geteuid())
    why = "belongs to another user";
  else if (st.st_mode & 077)
    why = "can be read or changed by others";
  else if (st.st_size != RESIHP__SAVE_KEY_LEN || read_all(fd, key, RESIHP__SAVE_KEY_LEN))
    why = "is not a state key (wrong length)";
  close(fd);
  if (why)
    return fail(RESIHP_EINVAL, err, errlen,
                "refusing the state key %s: it %s; this state cannot be "
                "trusted: resume from another --state-dir",
                path, why);
  return 0;
}

int resihp__save_key(const char *dir, int create,
                     uint8_t key[RESIHP__SAVE_KEY_LEN], char *err,
                     size_t errlen) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof(path), "%s/key", dir);
  int rc = read_key(path, key, err, errlen);
  if (rc != RESIHP_ENOENT || !create)
    return rc;
  /* a new key, made whole under a name of our own and then linked into
   * place: a concurrent creator's link fails (EEXIST) and reads the
   * winner's */
  uint8_t k[RESIHP__SAVE_KEY_LEN];
  if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
    return fail(RESIHP_ESYS, err, errlen, "no random bytes for a state key");
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  const void *parts[1] = {k};
  size_t lens[1] = {sizeof(k)};
  rc = write_atomic(dir, tmp, parts, lens, 1, err, errlen);
  memset(k, 0, sizeof(k));
  if (rc)
    return rc;
  int linked = link(tmp, path);
  int e = errno;
  unlink(tmp);
  if (linked && e != EEXIST)
    return fail(RESIHP_ESYS, err, errlen, "cannot create the state key %s: %s",
                path, strerror(e));
  sync_dir(dir);
  return read_key(path, key, err, errlen);
}

static void step_dir(char *out, size_t cap, const char *dir, long step) {
  snprintf(out, cap, "%s/step-%ld", dir, step);
}

int resihp__save_write(const char *dir, long step, int shard, int shards,
                       const char *shape, const resihp_job_buf_t *bufs, int n,
                       char *err, size_t errlen) {
  if (!dir || !*dir || step < 0 || step > RESIHP__SAVE_MAX_STEPS ||
      shards < 1 || shards > RESIHP__SAVE_MAX_SHARDS || shard < 0 ||
      shard >= shards || n < 0 || n > RESIHP__JOB_MAX_BUFS || !shape ||
      !shape_ok(shape))
    return fail(RESIHP_EINVAL, err, errlen, "bad arguments to save a shard");
  char sd[4096], path[4200];
  step_dir(sd, sizeof(sd), dir, step);
  if (mkdir(dir, 0700) && errno != EEXIST)
    return fail(RESIHP_ESYS, err, errlen, "cannot create %s: %s", dir,
                strerror(errno));
  int rc = own_dir(dir, err, errlen);
  if (rc)
    return rc;
  if (mkdir(sd, 0700) && errno != EEXIST)
    return fail(RESIHP_ESYS, err, errlen, "cannot create %s: %s", sd,
                strerror(errno));
  if ((rc = own_dir(sd, err, errlen)))
    return rc;
  snprintf(path, sizeof(path), "%s/shard-%d.bin", sd, shard);
  resihp__save_hdr_t h = {.step = step, .shard = shard, .shards = shards};
  for (int i = 0; i < n; i++)
    h.length += bufs[i].bytes;
  snprintf(h.shape, sizeof(h.shape), "%s", shape);
  uint8_t hdr[RESIHP__SAVE_HDR_LEN], tag[RESIHP__SAVE_TAG_LEN],
      key[RESIHP__SAVE_KEY_LEN];
  if ((rc = resihp__save_key(dir, 1, key, err, errlen)))
    return rc;
  resihp__save_hdr_encode(&h, hdr);
  resihp__hmac_t s;
  resihp__hmac_init(&s, key, sizeof(key));
  memset(key, 0, sizeof(key));
  resihp__hmac_update(&s, hdr, sizeof(hdr));
  for (int i = 0; i < n; i++)
    resihp__hmac_update(&s, bufs[i].data, bufs[i].bytes);
  resihp__hmac_final(&s, tag);
  const void **parts = malloc(sizeof(void *) * (size_t)(n + 2));
  size_t *lens = malloc(sizeof(size_t) * (size_t)(n + 2));
  if (!parts || !lens) {
    free(parts);
    free(lens);
    return fail(RESIHP_ENOMEM, err, errlen, "out of memory");
  }
  parts[0] = hdr;
  lens[0] = sizeof(hdr);
  for (int i = 0; i < n; i++) {
    parts[i + 1] = bufs[i].data;
    lens[i + 1] = bufs[i].bytes;
  }
  parts[n + 1] = tag;
  lens[n + 1] = sizeof(tag);
  rc = write_atomic(sd, path, parts, lens, n + 2, err, errlen);
  free(parts);
  free(lens);
  return rc;
}

int resihp__save_read(const char *path, const uint8_t key[RESIHP__SAVE_KEY_LEN],
                      resihp__save_hdr_t *h, const resihp_job_buf_t *bufs,
                      int n, char *err, size_t errlen) {
  /* a link is not followed; the file must be ours (fstat below) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return fail(RESIHP_ENOENT, err, errlen, "cannot open %s: %s", path,
                strerror(errno));
  struct stat sb;
  uint8_t hdr[RESIHP__SAVE_HDR_LEN], tag[RESIHP__SAVE_TAG_LEN],
      got[RESIHP__SAVE_TAG_LEN];
  int rc = 0;
  char why[200];
  if (!fstat(fd, &sb) && S_ISREG(sb.st_mode) && sb.st_uid != geteuid()) {
    rc = fail(RESIHP_EPROTO, err, errlen,
              "%s belongs to another user (uid %ld): not loaded", path,
              (long)sb.st_uid);
    goto out;
  }
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) ||
      read_all(fd, hdr, sizeof(hdr))) {
    rc = fail(RESIHP_EPROTO, err, errlen, "%s: not a resihp state file", path);
    goto out;
  }
  if (resihp__save_hdr_parse(hdr, sizeof(hdr), h, why, sizeof(why))) {
    rc = fail(RESIHP_EPROTO, err, errlen, "%s: %s", path, why);
    goto out;
  }
  /* the length is the file's word: it must match the file's size */
  if (h->length > (uint64_t)sb.st_size ||
      (uint64_t)sb.st_size !=
          RESIHP__SAVE_HDR_LEN + h->length + RESIHP__SAVE_TAG_LEN) {
    rc = fail(RESIHP_EPROTO, err, errlen,
              "%s: truncated or padded (%lld bytes, the header says %llu of "
              "state)",
              path, (long long)sb.st_size, (unsigned long long)h->length);
    goto out;
  }
  size_t total = 0;
  for (int i = 0; bufs && i < n; i++)
    total += bufs[i].bytes;
  if (bufs && total != h->length) {
    rc = fail(RESIHP_EPROTO, err, errlen,
              "%s: holds %llu bytes of state, this rank's shard has %zu", path,
              (unsigned long long)h->length, total);
    goto out;
  }
  resihp__hmac_t s;
  resihp__hmac_init(&s, key, RESIHP__SAVE_KEY_LEN);
  resihp__hmac_update(&s, hdr, sizeof(hdr));
  uint8_t chunk[65536];
  uint64_t left = h->length;
  for (int i = 0; left && (!bufs || i < n);) {
    uint8_t *dst = chunk;
    size_t want = left < sizeof(chunk) ? (size_t)left : sizeof(chunk);
    if (bufs) {
      dst = bufs[i].data;
      want = bufs[i].bytes;
      i++;
    }
    if (want && read_all(fd, dst, want)) {
      rc = fail(RESIHP_EIO, err, errlen, "%s: read failed", path);
      goto out;
    }
    resihp__hmac_update(&s, dst, want);
    left -= want;
  }
  resihp__hmac_final(&s, got);
  if (read_all(fd, tag, sizeof(tag)) ||
      resihp__ct_memcmp(tag, got, sizeof(tag)))
    rc = fail(RESIHP_EPROTO, err, errlen,
              "%s: integrity check failed (the file is corrupt, or was "
              "changed by someone without the state key)",
              path);
out:
  close(fd);
  return rc;
}

int resihp__save_meta_format(const resihp__save_meta_t *m, char *out,
                             size_t cap) {
  int n = snprintf(out, cap,
                   "resihp-state %d\nstep=%ld\nsteps=%ld\nmicrobatches=%d\n"
                   "replicas=%d\nshards=%d\nshape=%s\n",
                   RESIHP__SAVE_VERSION, m->step, m->steps, m->microbatches,
                   m->replicas, m->shards, m->shape);
  return n < 0 || (size_t)n >= cap ? RESIHP_ERANGE : n;
}

/* One "key=value" line's value as a number in [lo, hi]. */
static int meta_num(const char *v, long lo, long hi, long *out) {
  if (!*v || strlen(v) > 12)
    return -1;
  long x = 0;
  for (const char *p = v; *p; p++) {
    if (*p < '0' || *p > '9')
      return -1;
    x = x * 10 + (*p - '0');
  }
  if (x < lo || x > hi)
    return -1;
  *out = x;
  return 0;
}

int resihp__save_meta_parse(const char *text, size_t n, resihp__save_meta_t *m,
                            char *err, size_t errlen) {
  memset(m, 0, sizeof(*m));
  char line[128];
  int have = 0, seen_head = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && text[j] != '\n')
      j++;
    if (j - i >= sizeof(line) || j == n)
      return fail(RESIHP_EPROTO, err, errlen,
                  "meta: a line too long or not ended by a newline");
    if (memchr(text + i, '\0', j - i))
      return fail(RESIHP_EPROTO, err, errlen, "meta: a NUL byte in a line");
    memcpy(line, text + i, j - i);
    line[j - i] = '\0';
    i = j + 1;
    if (!seen_head) {
      char want[32];
      snprintf(want, sizeof(want), "resihp-state %d", RESIHP__SAVE_VERSION);
      if (strcmp(line, want))
        return fail(RESIHP_EPROTO, err, errlen,
                    "meta: not a resihp state (first line '%.40s', expected "
                    "'%s')",
                    line, want);
      seen_head = 1;
      continue;
    }
    char *eq = strchr(line, '=');
    if (!eq)
      return fail(RESIHP_EPROTO, err, errlen, "meta: malformed line '%.40s'",
                  line);
    *eq = '\0';
    const char *k = line, *v = eq + 1;
    long x = 0;
    int bit, bad = 0;
    if (!strcmp(k, "step")) {
      bit = 1;
      bad = meta_num(v, 0, RESIHP__SAVE_MAX_STEPS, &x);
      m->step = x;
    } else if (!strcmp(k, "steps")) {
      bit = 2;
      bad = meta_num(v, 1, RESIHP__SAVE_MAX_STEPS, &x);
      m->steps = x;
    } else if (!strcmp(k, "microbatches")) {
      bit = 4;
      bad = meta_num(v, 1, 1L << 30, &x);
      m->microbatches = (int)x;
    } else if (!strcmp(k, "replicas")) {
      bit = 8;
      bad = meta_num(v, 1, 1L << 30, &x);
      m->replicas = (int)x;
    } else if (!strcmp(k, "shards")) {
      bit = 16;
      bad = meta_num(v, 1, RESIHP__SAVE_MAX_SHARDS, &x);
      m->shards = (int)x;
    } else if (!strcmp(k, "shape")) {
      bit = 32;
      bad = strlen(v) >= sizeof(m->shape) || !shape_ok(v);
      if (!bad)
        snprintf(m->shape, sizeof(m->shape), "%s", v);
    } else {
      return fail(RESIHP_EPROTO, err, errlen, "meta: unknown key '%.20s'", k);
    }
    if (bad || (have & bit))
      return fail(RESIHP_EPROTO, err, errlen,
                  "meta: bad or repeated value for '%s'", k);
    have |= bit;
  }
  if (have != 63)
    return fail(RESIHP_EPROTO, err, errlen,
                "meta: incomplete (needs step, steps, microbatches, "
                "replicas, shards and shape)");
  if (m->step > m->steps)
    return fail(RESIHP_EPROTO, err, errlen,
                "meta: step %ld is past the training's %ld steps", m->step,
                m->steps);
  return 0;
}

int resihp__save_commit(const char *dir, const resihp__save_meta_t *m,
                        char *err, size_t errlen) {
  char sd[4096], path[4200], text[512];
  step_dir(sd, sizeof(sd), dir, m->step);
  int rc = own_dir(dir, err, errlen);
  if (rc || (rc = own_dir(sd, err, errlen)))
    return rc;
  int n = resihp__save_meta_format(m, text, sizeof(text));
  if (n < 0)
    return fail(n, err, errlen, "meta too long");
  snprintf(path, sizeof(path), "%s/meta", sd);
  const void *p[1] = {text};
  size_t l[1] = {(size_t)n};
  rc = write_atomic(sd, path, p, l, 1, err, errlen);
  if (rc)
    return rc;
  /* latest: a new link under a temporary name, renamed over the old */
  char link[4200], tmp[4300], target[64];
  snprintf(link, sizeof(link), "%s/latest", dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", link, (long)getpid());
  snprintf(target, sizeof(target), "step-%ld", m->step);
  unlink(tmp);
  if (symlink(target, tmp) || rename(tmp, link)) {
    int e = errno;
    unlink(tmp);
    return fail(RESIHP_ESYS, err, errlen, "cannot point %s at %s: %s", link,
                target, strerror(e));
  }
  sync_dir(dir);
  return 0;
}

int resihp__save_latest(const char *dir, resihp__save_meta_t *m, char *err,
                        size_t errlen) {
  char link[4200], target[64], path[4300];
  int rc = own_dir(dir, err, errlen);
  if (rc)
    return rc;
  snprintf(link, sizeof(link), "%s/latest", dir);
  ssize_t tl = readlink(link, target, sizeof(target) - 1);
  if (tl < 0)
    return fail(RESIHP_ENOENT, err, errlen,
                "%s: %s (is DIR a --state-dir of an earlier run?)", link,
                strerror(errno));
  target[tl] = '\0';
  long step = -1;
  if (strncmp(target, "step-", 5) ||
      meta_num(target + 5, 0, RESIHP__SAVE_MAX_STEPS, &step))
    return fail(RESIHP_EPROTO, err, errlen,
                "%s points at '%s', not at a step-N directory", link, target);
  snprintf(path, sizeof(path), "%s/%s", dir, target);
  if ((rc = own_dir(path, err, errlen)))
    return rc;
  snprintf(path, sizeof(path), "%s/%s/meta", dir, target);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return fail(RESIHP_ENOENT, err, errlen, "cannot open %s: %s", path,
                strerror(errno));
  char text[1024];
  ssize_t got = read(fd, text, sizeof(text));
  close(fd);
  if (got < 0 || got == (ssize_t)sizeof(text))
    return fail(RESIHP_EPROTO, err, errlen, "%s: unreadable or too long", path);
  char why[200];
  if (resihp__save_meta_parse(text, (size_t)got, m, why, sizeof(why)))
    return fail(RESIHP_EPROTO, err, errlen, "%s: %s", path, why);
  if (m->step != step)
    return fail(RESIHP_EPROTO, err, errlen,
                "%s says step %ld but sits in step-%ld", path, m->step, step);
  return 0;
}

void resihp__save_remove(const char *dir, long step) {
  /* through descriptors, none of them a link (a step-N planted as a link
   * to someone else's files is not followed): the state directory and
   * the step's, both ours and only ours to change */
  char name[32];
  snprintf(name, sizeof(name), "step-%ld", step);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return;
  struct stat st;
  int sfd = -1;
  if (!fstat(dfd, &st) && !not_own_dir(&st))
    sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = NULL;
  if (sfd >= 0 && (fstat(sfd, &st) || not_own_dir(&st) ||
                   !(d = fdopendir(sfd)))) {
    close(sfd);
    sfd = -1;
  }
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      /* only what a save writes (never a directory: unlinkat, flags 0) */
      if (strncmp(e->d_name, "shard-", 6) && strncmp(e->d_name, "meta", 4))
        continue;
      unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    unlinkat(dfd, name, AT_REMOVEDIR);
  }
  close(dfd);
}

/* ---- the rank's side ------------------------------------------------- */

int resihp__job_on_save(resihp_job_t *j) {
  long s = -1;
  int rc = 0;
  char err[512] = "";
  const char *dir = getenv("RESIHP_STATE_DIR");
  if (resihp__wire_get_long(j->msg, "step", &s) || s < 0)
    return RESIHP_EPROTO;
  if (!dir || !*dir) {
    rc = RESIHP_EINVAL;
    snprintf(err, sizeof(err), "no RESIHP_STATE_DIR in the environment");
  } else if (!j->valid_state || s != j->step + 1) {
    /* the state held is that of the start of step j->step + 1 */
    rc = RESIHP_ESTATE;
    snprintf(err, sizeof(err), "asked to save step %ld holding step %ld", s,
             j->step + 1);
  } else {
    char shape[17];
    resihp__job_state_shape(j, shape);
    rc = resihp__save_write(dir, s, j->lrank, j->lsize, shape, j->state,
                            j->nstate, err, sizeof(err));
  }
  if (rc)
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: cannot save the state of step %ld: %s",
               j->replica, j->lrank, s, err);
  else
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d rank %d: saved shard %d of step %ld (%zu bytes)",
               j->replica, j->lrank, j->lrank, s, j->state_len);
  int64_t failed = rc != 0;
  if ((rc = resihp__job_replica_sum(j, &failed, 1)))
    return rc;
  if (j->lrank > 0)
    return 0;
  char line[64];
  snprintf(line, sizeof(line), "SAVED step=%ld ok=%d", s, failed ? 0 : 1);
  return resihp__job_send(j, line);
}

int resihp__job_resuming(const resihp_job_t *j) {
  (void)j;
  const char *d = getenv("RESIHP_RESUME_DIR");
  return d && *d;
}

int resihp__job_resume_load(resihp_job_t *j, long s) {
  const char *dir = getenv("RESIHP_RESUME_DIR");
  char path[4200], err[5000] = "", shape[17];
  resihp__save_hdr_t h;
  snprintf(path, sizeof(path), "%s/shard-%d.bin", dir ? dir : "", j->lrank);
  resihp__job_state_shape(j, shape);
  /* the key is the state directory's, one above the step's */
  char sdir[4200];
  snprintf(sdir, sizeof(sdir), "%s", dir ? dir : "");
  char *slash = strrchr(sdir, '/');
  if (slash)
    *slash = '\0';
  uint8_t key[RESIHP__SAVE_KEY_LEN];
  int rc = resihp__save_key(sdir, 0, key, err, sizeof(err));
  if (!rc)
    rc = resihp__save_read(path, key, &h, j->state, j->nstate, err,
                           sizeof(err));
  memset(key, 0, sizeof(key));
  if (!rc && (h.step != s || h.shard != j->lrank || h.shards != j->lsize ||
              strcmp(h.shape, shape))) {
    rc = RESIHP_EPROTO;
    snprintf(err, sizeof(err),
             "%s holds shard %d of %d at step %ld with state shape %s; this "
             "rank is shard %d of %d at step %ld with shape %s",
             path, h.shard, h.shards, h.step, h.shape, j->lrank, j->lsize, s,
             shape);
  }
  int64_t failed = rc != 0;
  if (rc) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: cannot resume: %s (resume with the same "
               "program, options and ranks per replica, or from another "
               "state directory)",
               j->replica, j->lrank, err);
    char why[200];
    snprintf(why, sizeof(why), "cannot load the saved state: %.150s", err);
    resihp_job_abort(j, why);
  } else {
    resihp_log(RESIHP_LOG_INFO, "job",
               "replica %d rank %d: resumed shard %d at step %ld from %s",
               j->replica, j->lrank, j->lrank, s, path);
  }
  int rc2 = resihp__job_replica_sum(j, &failed, 1);
  if (rc2)
    return rc2;
  return failed ? RESIHP_ESTATE : 0;
}
