/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the resumable state's files (libresihp/recovery/job_save.c):
 * a shard written and read back is the same bytes; every kind of damage
 * (a flipped payload byte, a flipped header byte, a truncated or padded
 * file, a wrong length for the reader's buffers) is refused with a message;
 * a write never leaves a temporary file behind; the meta round-trips and
 * DIR/latest names the last commit; malformed metas are refused. */
#include "config.h"

#include "../../libresihp/recovery/job_save.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void mkdir_tmp(void) {
  snprintf(dir, sizeof(dir), "/tmp/resihp-save-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void rm_tree(const char *d) {
  char cmd[400];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
  ck_assert_int_eq(system(cmd), 0);
}

/* Two buffers of known bytes. */
static uint8_t a[1000], b[333];
static void fill(uint8_t seed) {
  for (size_t i = 0; i < sizeof(a); i++)
    a[i] = (uint8_t)(seed + i * 7);
  for (size_t i = 0; i < sizeof(b); i++)
    b[i] = (uint8_t)(seed ^ (i * 13));
}

static void flip(const char *path, long off) {
  int fd = open(path, O_RDWR);
  ck_assert_int_ge(fd, 0);
  uint8_t x;
  ck_assert_int_eq(pread(fd, &x, 1, off), 1);
  x ^= 0x40;
  ck_assert_int_eq(pwrite(fd, &x, 1, off), 1);
  close(fd);
}

START_TEST(shard_round_trip_and_damage) {
  mkdir_tmp();
  fill(3);
  resihp_job_buf_t bufs[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
  char err[600];
  ck_assert_int_eq(resihp__save_write(dir, 12, 1, 2, "0123456789abcdef", bufs,
                                      2, err, sizeof(err)),
                   0);
  uint8_t key[RESIHP__SAVE_KEY_LEN];
  ck_assert_int_eq(resihp__save_key(dir, 0, key, err, sizeof(err)), 0);
  char path[400];
  snprintf(path, sizeof(path), "%s/step-12/shard-1.bin", dir);
  /* no temporary left */
  char sd[300];
  snprintf(sd, sizeof(sd), "%s/step-12", dir);
  DIR *d = opendir(sd);
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      files++;
      ck_assert_str_eq(e->d_name, "shard-1.bin");
    }
  closedir(d);
  ck_assert_int_eq(files, 1);
  /* read back into zeroed buffers */
  memset(a, 0, sizeof(a));
  memset(b, 0, sizeof(b));
  resihp__save_hdr_t h;
  ck_assert_int_eq(resihp__save_read(path, key, &h, bufs, 2, err, sizeof(err)), 0);
  ck_assert_int_eq(h.step, 12);
  ck_assert_int_eq(h.shard, 1);
  ck_assert_int_eq(h.shards, 2);
  ck_assert_uint_eq(h.length, sizeof(a) + sizeof(b));
  ck_assert_str_eq(h.shape, "0123456789abcdef");
  uint8_t a0[sizeof(a)], b0[sizeof(b)];
  memcpy(a0, a, sizeof(a));
  memcpy(b0, b, sizeof(b));
  fill(3);
  ck_assert_mem_eq(a0, a, sizeof(a));
  ck_assert_mem_eq(b0, b, sizeof(b));
  /* check only, no buffers */
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)), 0);
  /* a buffer of the wrong size: refused before reading */
  resihp_job_buf_t small[1] = {{a, sizeof(a)}};
  ck_assert_int_eq(resihp__save_read(path, key, &h, small, 1, err, sizeof(err)),
                   RESIHP_EPROTO);
  ck_assert_ptr_nonnull(strstr(err, "this rank's shard"));
  /* a payload byte flipped: integrity check */
  flip(path, 64 + 500);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_EPROTO);
  ck_assert_ptr_nonnull(strstr(err, "corrupt"));
  flip(path, 64 + 500);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)), 0);
  /* the step in the header changed: the tag covers the header too */
  flip(path, 24);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_EPROTO);
  flip(path, 24);
  /* truncated, then padded */
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(truncate(path, sb.st_size - 1), 0);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_EPROTO);
  ck_assert_ptr_nonnull(strstr(err, "truncated"));
  ck_assert_int_eq(truncate(path, sb.st_size + 5), 0);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_EPROTO);
  /* not a state file at all */
  ck_assert_int_eq(truncate(path, 10), 0);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_EPROTO);
  /* a missing file */
  snprintf(path, sizeof(path), "%s/step-12/shard-0.bin", dir);
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_ENOENT);
  /* bad arguments are refused, nothing written */
  ck_assert_int_eq(resihp__save_write(dir, 3, 2, 2, "-", bufs, 2, err,
                                      sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_int_eq(resihp__save_write(dir, 3, 0, 1, "../x", bufs, 2, err,
                                      sizeof(err)),
                   RESIHP_EINVAL);
  rm_tree(dir);
}
END_TEST

START_TEST(meta_latest_and_remove) {
  mkdir_tmp();
  fill(9);
  resihp_job_buf_t bufs[1] = {{a, sizeof(a)}};
  char err[600];
  resihp__save_meta_t m = {.step = 4,
                           .steps = 40,
                           .microbatches = 12,
                           .replicas = 3,
                           .shards = 1,
                           .shape = "fedcba9876543210"},
                      got;
  for (long s = 4; s <= 8; s += 4) {
    m.step = s;
    ck_assert_int_eq(resihp__save_write(dir, s, 0, 1, m.shape, bufs, 1, err,
                                        sizeof(err)),
                     0);
    ck_assert_int_eq(resihp__save_commit(dir, &m, err, sizeof(err)), 0);
    ck_assert_int_eq(resihp__save_latest(dir, &got, err, sizeof(err)), 0);
    ck_assert_int_eq(got.step, s);
    ck_assert_int_eq(got.steps, 40);
    ck_assert_int_eq(got.microbatches, 12);
    ck_assert_int_eq(got.replicas, 3);
    ck_assert_int_eq(got.shards, 1);
    ck_assert_str_eq(got.shape, m.shape);
  }
  char sd[300];
  resihp__save_remove(dir, 4);
  snprintf(sd, sizeof(sd), "%s/step-4", dir);
  ck_assert_int_ne(access(sd, F_OK), 0);
  snprintf(sd, sizeof(sd), "%s/step-8/meta", dir);
  ck_assert_int_eq(access(sd, F_OK), 0);
  /* a meta that lies about its step is refused */
  FILE *f = fopen(sd, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "resihp-state 2\nstep=7\nsteps=40\nmicrobatches=12\n"
             "replicas=3\nshards=1\nshape=-\n");
  fclose(f);
  ck_assert_int_eq(resihp__save_latest(dir, &got, err, sizeof(err)),
                   RESIHP_EPROTO);
  ck_assert_ptr_nonnull(strstr(err, "step-8"));
  /* no latest at all */
  rm_tree(dir);
  mkdir_tmp();
  ck_assert_int_eq(resihp__save_latest(dir, &got, err, sizeof(err)),
                   RESIHP_ENOENT);
  rm_tree(dir);
}
END_TEST

/* What others could change is never trusted: a step-N planted as a link
 * to another directory is not followed by the clean-up (its files stay);
 * a state directory writable by others, or another user's, is refused
 * for a save and a resume; a shard that is a link is not loaded. */
START_TEST(planted_links_and_foreign_dirs) {
  mkdir_tmp();
  fill(5);
  resihp_job_buf_t bufs[1] = {{a, sizeof(a)}};
  char err[600], victim[300], path[400], sd[300];
  /* someone else's files, and step-3 a link to them */
  snprintf(victim, sizeof(victim), "%s-victim", dir);
  ck_assert_int_eq(mkdir(victim, 0700), 0);
  snprintf(path, sizeof(path), "%s/shard-0.bin", victim);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("not yours\n", f);
  fclose(f);
  snprintf(sd, sizeof(sd), "%s/step-3", dir);
  ck_assert_int_eq(symlink(victim, sd), 0);
  resihp__save_remove(dir, 3);
  ck_assert_int_eq(access(path, F_OK), 0); /* still there */
  /* a save into it is refused too */
  ck_assert_int_eq(resihp__save_write(dir, 3, 0, 1, "fedcba9876543210", bufs,
                                      1, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "symbolic link"));
  /* a shard that is a link is not loaded */
  ck_assert_int_eq(resihp__save_write(dir, 4, 0, 1, "fedcba9876543210", bufs,
                                      1, err, sizeof(err)),
                   0);
  char real[400], ln[400];
  snprintf(real, sizeof(real), "%s/step-4/shard-0.bin", dir);
  snprintf(ln, sizeof(ln), "%s/step-4/shard-1.bin", dir);
  ck_assert_int_eq(symlink(real, ln), 0);
  resihp__save_hdr_t h;
  uint8_t key[RESIHP__SAVE_KEY_LEN];
  ck_assert_int_eq(resihp__save_key(dir, 0, key, err, sizeof(err)), 0);
  ck_assert_int_lt(resihp__save_read(ln, key, &h, NULL, 0, err, sizeof(err)),
                   0);
  /* a state directory others may write to */
  ck_assert_int_eq(chmod(dir, 0777), 0);
  ck_assert_int_eq(resihp__save_write(dir, 5, 0, 1, "fedcba9876543210", bufs,
                                      1, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "writable by others"));
  resihp__save_meta_t m;
  ck_assert_int_eq(resihp__save_latest(dir, &m, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_int_eq(chmod(dir, 0700), 0);
  /* another user's (as root: chowned to 65534) */
  if (geteuid() == 0) {
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    ck_assert_int_eq(resihp__save_write(dir, 6, 0, 1, "fedcba9876543210",
                                        bufs, 1, err, sizeof(err)),
                     RESIHP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "another user"));
    ck_assert_int_eq(chown(dir, 0, 0), 0);
  }
  rm_tree(dir);
  rm_tree(victim);
}
END_TEST

START_TEST(meta_parser_refuses) {
  static const char *const bad[] = {
      "",
      "resihp-state 2\n",
      "resihp-state 2\nstep=1\n",
      "resihp-state 2\nstep=1\nsteps=4\nmicrobatches=1\nreplicas=1\nshards=1\n"
      "shape=-", /* no final newline */
      "resihp-state 2\nstep=5\nsteps=4\nmicrobatches=1\nreplicas=1\nshards=1\n"
      "shape=-\n", /* past the end */
      "resihp-state 2\nstep=1\nstep=1\nsteps=4\nmicrobatches=1\nreplicas=1\n"
      "shards=1\nshape=-\n",
      "resihp-state 2\nstep=-1\nsteps=4\nmicrobatches=1\nreplicas=1\n"
      "shards=1\nshape=-\n",
      "resihp-state 2\nstep=1\nsteps=4\nmicrobatches=1\nreplicas=1\n"
      "shards=65\nshape=-\n",
      "resihp-state 2\nstep=1\nsteps=4\nmicrobatches=1\nreplicas=1\n"
      "shards=1\nshape=../../x\n",
      "resihp-state 2\nstep=1\nsteps=4\nmicrobatches=1\nreplicas=1\n"
      "shards=1\nshape=-\nextra=1\n",
      "resihp-state 2\nstep=99999999999999999999\nsteps=4\nmicrobatches=1\n"
      "replicas=1\nshards=1\nshape=-\n",
      /* an older format (unkeyed tags) */
      "resihp-state 1\nstep=0\nsteps=4\nmicrobatches=7\nreplicas=2\n"
      "shards=64\nshape=-\n"};
  resihp__save_meta_t m;
  char err[300];
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    ck_assert_int_eq(
        resihp__save_meta_parse(bad[i], strlen(bad[i]), &m, err, sizeof(err)),
        RESIHP_EPROTO);
    ck_assert_int_gt((int)strlen(err), 0);
  }
  const char *good = "resihp-state 2\nstep=0\nsteps=4\nmicrobatches=7\n"
                     "replicas=2\nshards=64\nshape=-\n";
  ck_assert_int_eq(
      resihp__save_meta_parse(good, strlen(good), &m, err, sizeof(err)), 0);
  ck_assert_int_eq(m.shards, 64);
}
END_TEST

/* The tag is keyed with the state directory's key: a shard rewritten
 * whole, its tag made right by someone without the key (here: under
 * another directory's key, as an unkeyed checksum could be recomputed),
 * is refused; the key itself must be the owner's alone, never a link. */
START_TEST(tag_is_keyed) {
  mkdir_tmp();
  fill(5);
  resihp_job_buf_t bufs[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
  char err[600], other[300], path[400], forged[400], kp[400], okp[400];
  ck_assert_int_eq(resihp__save_write(dir, 4, 0, 1, "-", bufs, 2, err,
                                      sizeof(err)),
                   0);
  uint8_t key[RESIHP__SAVE_KEY_LEN], key2[RESIHP__SAVE_KEY_LEN];
  ck_assert_int_eq(resihp__save_key(dir, 0, key, err, sizeof(err)), 0);
  /* the same key read again; a second creator finds it */
  ck_assert_int_eq(resihp__save_key(dir, 1, key2, err, sizeof(err)), 0);
  ck_assert_mem_eq(key, key2, sizeof(key));
  snprintf(other, sizeof(other), "%s/other", dir);
  a[7] ^= 1; /* the forger's own parameters */
  ck_assert_int_eq(resihp__save_write(other, 4, 0, 1, "-", bufs, 2, err,
                                      sizeof(err)),
                   0);
  snprintf(path, sizeof(path), "%s/step-4/shard-0.bin", dir);
  snprintf(forged, sizeof(forged), "%s/step-4/shard-0.bin", other);
  ck_assert_int_eq(rename(forged, path), 0);
  resihp__save_hdr_t h;
  ck_assert_int_eq(resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err)),
                   RESIHP_EPROTO);
  ck_assert_msg(strstr(err, "integrity check failed"), "%s", err);
  /* the key: readable by others, missing, a link */
  snprintf(kp, sizeof(kp), "%s/key", dir);
  ck_assert_int_eq(chmod(kp, 0644), 0);
  ck_assert_int_eq(resihp__save_key(dir, 0, key2, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_msg(strstr(err, "read or changed by others"), "%s", err);
  ck_assert_int_eq(unlink(kp), 0);
  ck_assert_int_eq(resihp__save_key(dir, 0, key2, err, sizeof(err)),
                   RESIHP_ENOENT);
  snprintf(okp, sizeof(okp), "%s/key", other);
  ck_assert_int_eq(symlink(okp, kp), 0);
  ck_assert_int_ne(resihp__save_key(dir, 1, key2, err, sizeof(err)), 0);
  rm_tree(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("job_save");
  TCase *t = tcase_create("files");
  tcase_set_timeout(t, 30);
  tcase_add_test(t, shard_round_trip_and_damage);
  tcase_add_test(t, meta_latest_and_remove);
  tcase_add_test(t, meta_parser_refuses);
  tcase_add_test(t, planted_links_and_foreign_dirs);
  tcase_add_test(t, tag_is_keyed);
  suite_add_tcase(s, t);
  return run_suite(s);
}
