/* SPDX-License-Identifier: BSD-3-Clause */
/* The resumable state on disk (resihp-run --state-dir, --resume): its
 * files, their writer and their readers. Shared by the ranks (which write
 * and load their shard, job_save.c), resihp-run (which writes the meta and
 * checks everything before a resume), the unit test and the fuzz target.
 *
 *   DIR/step-<s>/shard-<k>.bin  one per rank k of the replica that saved:
 *       a 64-byte header (below), the shard's state buffers end to end
 *       (the bytes catch-up sends), and the SHA-256 of header and payload
 *   DIR/step-<s>/meta           text, written by resihp-run once every
 *       shard is on disk: "resihp-state 1" then key=value lines (step = the
 *       next step to run, the ledger position; microbatches, steps,
 *       replicas, shards, shape)
 *   DIR/latest                  a symbolic link to step-<s> (replaced
 *       atomically: it names the newest complete state)
 *
 * Every file is written to a temporary name, fsync'ed and renamed, so a
 * crash leaves the previous state intact. The tag is a digest, not a MAC:
 * a resumed run has a new job secret, so the files are protected by the
 * directory's permissions, and the digest catches corruption. Hence no
 * directory is used that someone else could change (it must be ours and
 * not writable by group or others: a save, a resume and the clean-up
 * refuse it), no link is followed (a shard, meta, or step-<s> planted as
 * a link), and a shard file must be ours. */
#ifndef RESIHP_RECOVERY_JOB_SAVE_H
#define RESIHP_RECOVERY_JOB_SAVE_H

#include <resihp/job.h>

#include <stddef.h>
#include <stdint.h>

#define RESIHP__SAVE_MAGIC "RESIHPSH"
#define RESIHP__SAVE_VERSION 2 /* 2: the tag is keyed (DIR/key) */
#define RESIHP__SAVE_HDR_LEN 64
#define RESIHP__SAVE_TAG_LEN 32
#define RESIHP__SAVE_KEY_LEN 32
/* Bounds a header or meta may hold (the coordinator's own limits). */
#define RESIHP__SAVE_MAX_SHARDS 64
#define RESIHP__SAVE_MAX_STEPS 1000000000L

/* Header layout, little-endian: magic[8] version u32 shard u32 shards u32
 * zero u32 step i64 shape[16] (hex digest, or "-" and NULs) length u64
 * zero[8]. */
typedef struct {
  long step; /* the state as of the start of this step */
  int shard, shards;
  uint64_t length; /* payload bytes */
  char shape[17];  /* the rank's state shape digest (resihp__job_state_shape) */
} resihp__save_hdr_t;

typedef struct {
  long step;  /* next step to run */
  long steps; /* of the whole training */
  int microbatches, replicas, shards;
  char shape[17]; /* the replica's shape digest (HELLO shape=) */
} resihp__save_meta_t;

void resihp__save_hdr_encode(const resihp__save_hdr_t *h,
                             uint8_t out[RESIHP__SAVE_HDR_LEN]);
/* Parse and check a header (n bytes available); 0 or RESIHP_EPROTO with
 * what is wrong in err. */
int resihp__save_hdr_parse(const uint8_t *buf, size_t n,
                           resihp__save_hdr_t *h, char *err, size_t errlen);

/* The state directory's key, DIR/key: 32 random bytes that key every
 * shard's tag (HMAC-SHA-256 over header and payload), so that a shard
 * changed by anyone who cannot read the key fails the check on resume.
 * It must be a regular file of the caller's own, mode 0600, never a link.
 * With create, a directory without one gets one (atomically: of two
 * creators, one key wins and both use it). 0, or a negative code with
 * what is wrong in err. */
int resihp__save_key(const char *dir, int create,
                     uint8_t key[RESIHP__SAVE_KEY_LEN], char *err,
                     size_t errlen);

/* Write shard `shard` of `shards` for step into DIR/step-<step>/ (made if
 * need be), atomically, tagged with DIR's key (made if need be). 0 or a
 * negative code, err says why. */
int resihp__save_write(const char *dir, long step, int shard, int shards,
                       const char *shape, const resihp_job_buf_t *bufs, int n,
                       char *err, size_t errlen);
/* Read and check a shard file: header, length, tag (keyed with key, the
 * key of the state directory it is in). With bufs, the
 * payload goes into them (their total must be the header's length);
 * without, it is only checked. The buffers hold no valid state unless 0 is
 * returned. */
int resihp__save_read(const char *path, const uint8_t key[RESIHP__SAVE_KEY_LEN],
                      resihp__save_hdr_t *h, const resihp_job_buf_t *bufs,
                      int n, char *err, size_t errlen);

/* The meta text (at most cap bytes) and its parser (n bytes of text). */
int resihp__save_meta_format(const resihp__save_meta_t *m, char *out,
                             size_t cap);
int resihp__save_meta_parse(const char *text, size_t n, resihp__save_meta_t *m,
                            char *err, size_t errlen);
/* DIR/step-<m->step>/meta, then DIR/latest -> step-<m->step>. */
int resihp__save_commit(const char *dir, const resihp__save_meta_t *m,
                        char *err, size_t errlen);
/* Read DIR/latest and its meta, check that they agree. */
int resihp__save_latest(const char *dir, resihp__save_meta_t *m, char *err,
                        size_t errlen);
/* Remove DIR/step-<step> (its shard files, meta and leftovers). */
void resihp__save_remove(const char *dir, long step);

#endif
