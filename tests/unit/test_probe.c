/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the probe library: selection lists, the bounded helper
 * (deadline, blame, hygiene), renderers, the metrics writer, and the gpu
 * check's verdicts and details against a fake NVML. */
#include "config.h"

#include "probe.h"

#include "../../libresihp/metrics/metrics.h"
#include "suite_main.h"

#include <resihp.h>

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(parse_lists) {
  unsigned m = 0;
  char err[256];
  ck_assert_int_eq(resihp__probe_parse_list("all", &m, err, sizeof(err)), 0);
  ck_assert_uint_eq(m, RESIHP_PROBE_ALL);
  ck_assert_int_eq(resihp__probe_parse_list("none", &m, err, sizeof(err)), 0);
  ck_assert_uint_eq(m, 0);
  ck_assert_int_eq(resihp__probe_parse_list("mem:net", &m, err, sizeof(err)),
                   0);
  ck_assert_uint_eq(m, (1u << RESIHP_PROBE_MEM) | (1u << RESIHP_PROBE_NET));
  m = 77;
  ck_assert_int_eq(resihp__probe_parse_list("mem:scratch", &m, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_uint_eq(m, 77); /* unchanged on failure */
  ck_assert_ptr_nonnull(strstr(err, "unknown probe 'scratch'"));
  ck_assert_int_eq(resihp__probe_parse_list("mem::net", &m, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_int_eq(resihp__probe_parse_list("mem:mem", &m, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "twice"));
  ck_assert_int_eq(resihp__probe_parse_list("", &m, err, sizeof(err)),
                   RESIHP_EINVAL);
  char longlist[400];
  memset(longlist, 'a', sizeof(longlist) - 1);
  longlist[sizeof(longlist) - 1] = '\0';
  ck_assert_int_eq(resihp__probe_parse_list(longlist, &m, err, sizeof(err)),
                   RESIHP_ERANGE);
}
END_TEST

START_TEST(valid_dirs) {
  ck_assert(resihp__probe_valid_dir("/tmp"));
  ck_assert(resihp__probe_valid_dir("/scratch/job.1"));
  ck_assert(!resihp__probe_valid_dir("tmp"));
  ck_assert(!resihp__probe_valid_dir(""));
  ck_assert(!resihp__probe_valid_dir(NULL));
  ck_assert(!resihp__probe_valid_dir("/tmp/../etc"));
  ck_assert(!resihp__probe_valid_dir("/tmp/.."));
  ck_assert(!resihp__probe_valid_dir("/tmp/a\nb"));
}
END_TEST

START_TEST(config_from_settings) {
  resihp_settings_t s;
  resihp_settings_init(&s);
  char err[256];
  ck_assert_int_eq(resihp_settings_parse_opts(
                       &s, "probes=mem:disk,probe-timeout=2s,"
                           "probe-min-free-mem=1G,probe-min-link=1000",
                       err, sizeof(err)),
                   0);
  resihp_probe_config_t c;
  resihp__probe_config_init(&c);
  ck_assert_int_eq(
      resihp__probe_config_from_settings(&c, &s, "/job/tmp", err, sizeof(err)),
      0);
  ck_assert_uint_eq(c.checks,
                    (1u << RESIHP_PROBE_MEM) | (1u << RESIHP_PROBE_DISK));
  ck_assert_int_eq(c.timeout_ms, 2000);
  ck_assert_int_eq(c.min_free_mem, 1L << 30);
  ck_assert_int_eq(c.min_link_mbps, 1000);
  ck_assert_str_eq(c.scratch_dir, "/job/tmp");
  /* An explicit probe-scratch wins over the job's TMPDIR. */
  ck_assert_int_eq(resihp_settings_set(&s, "probe-scratch", "/scratch",
                                       RESIHP_SOURCE_OPTION, NULL, 0),
                   0);
  ck_assert_int_eq(
      resihp__probe_config_from_settings(&c, &s, "/job/tmp", err, sizeof(err)),
      0);
  ck_assert_str_eq(c.scratch_dir, "/scratch");
  ck_assert_int_eq(resihp_settings_set(&s, "probe-scratch", "rel/dir",
                                       RESIHP_SOURCE_OPTION, NULL, 0),
                   0);
  ck_assert_int_eq(
      resihp__probe_config_from_settings(&c, &s, NULL, err, sizeof(err)),
      RESIHP_EINVAL);
}
END_TEST

static void config_only(resihp_probe_config_t *c, unsigned checks) {
  resihp__probe_config_init(c);
  c->checks = checks;
  c->min_free_mem = 0;
}

START_TEST(run_healthy_and_forced_failure) {
  resihp_probe_config_t c;
  config_only(&c, (1u << RESIHP_PROBE_MEM) | (1u << RESIHP_PROBE_DISK));
  resihp_probe_report_t rep;
  ck_assert_int_eq(resihp__probe_run(&c, &rep), 0);
  ck_assert_int_eq(rep.healthy, 1);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_MEM].status, RESIHP_PROBE_PASS);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_DISK].status, RESIHP_PROBE_PASS);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_NET].status, RESIHP_PROBE_NOTRUN);

  c.test_fail = 1u << RESIHP_PROBE_DISK;
  ck_assert_int_eq(resihp__probe_run(&c, &rep), 0);
  ck_assert_int_eq(rep.healthy, 0);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_DISK].status, RESIHP_PROBE_FAIL);
  char sum[256];
  ck_assert_int_eq(resihp__probe_failure_summary(&rep, sum, sizeof(sum)), 1);
  ck_assert_ptr_nonnull(strstr(sum, "disk: "));
}
END_TEST

START_TEST(run_deadline_blames_the_slow_check) {
  resihp_probe_config_t c;
  config_only(&c, (1u << RESIHP_PROBE_MEM) | (1u << RESIHP_PROBE_DISK) |
                      (1u << RESIHP_PROBE_NET));
  c.timeout_ms = 200;
  c.test_delay_check = RESIHP_PROBE_DISK;
  c.test_delay_ms = 10000;
  resihp_probe_report_t rep;
  ck_assert_int_eq(resihp__probe_run(&c, &rep), 0);
  ck_assert_int_eq(rep.healthy, 0);
  ck_assert_int_eq(rep.timed_out, 1);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_MEM].status, RESIHP_PROBE_PASS);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_DISK].status, RESIHP_PROBE_TIMEOUT);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_NET].status, RESIHP_PROBE_NOTRUN);
  /* The helper was killed, not waited out. */
  ck_assert_int_lt(rep.usec, 5000000);
}
END_TEST

START_TEST(mem_threshold_and_fake_proc) {
  char dir[] = "/tmp/resihp-unit-proc.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/meminfo", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "MemTotal:       1000000 kB\nMemAvailable:     102400 kB\n");
  fclose(f);
  resihp_probe_config_t c;
  config_only(&c, 1u << RESIHP_PROBE_MEM);
  snprintf(c.proc_root, sizeof(c.proc_root), "%s", dir);
  resihp_probe_result_t r;
  c.min_free_mem = 100L << 20;
  resihp__probe_run_check(&c, RESIHP_PROBE_MEM, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  c.min_free_mem = 101L << 20;
  resihp__probe_run_check(&c, RESIHP_PROBE_MEM, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_ptr_nonnull(strstr(r.detail, "available 100 MiB < required 101"));
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(scratch_unwritable) {
  resihp_probe_config_t c;
  config_only(&c, 1u << RESIHP_PROBE_DISK);
  snprintf(c.scratch_dir, sizeof(c.scratch_dir), "/nonexistent-resihp-dir");
  resihp_probe_result_t r;
  resihp__probe_run_check(&c, RESIHP_PROBE_DISK, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_ptr_nonnull(strstr(r.detail, "cannot create"));
}
END_TEST

/* Only the site's configuration may drain: a failure that comes from the
 * user's thresholds, the job's TMPDIR or the step's expectations is run
 * again with the site's values (and passes there); one under the site's
 * own inputs counts as it is. */
START_TEST(site_verdict_ignores_user_inputs) {
  resihp_probe_config_t site, eff;
  resihp_probe_report_t rep, v;
  unsigned rerun;
  const unsigned MEM = 1u << RESIHP_PROBE_MEM, DISK = 1u << RESIHP_PROBE_DISK,
                 TOPO = 1u << RESIHP_PROBE_TOPO;
  config_only(&site, MEM | DISK | TOPO);
  site.timeout_ms = 60000;

  /* probe-min-free-mem=1P from the user, TMPDIR on nothing, a step that
   * "needs" more CPUs than any machine has. */
  eff = site;
  eff.min_free_mem = 1L << 50;
  snprintf(eff.scratch_dir, sizeof(eff.scratch_dir), "/nonexistent-resihp");
  eff.expect_cpus = 1 << 20;
  ck_assert_int_eq(resihp__probe_run(&eff, &rep), 0);
  ck_assert_int_eq(rep.healthy, 0);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_MEM].status, RESIHP_PROBE_FAIL);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_DISK].status, RESIHP_PROBE_FAIL);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_TOPO].status, RESIHP_PROBE_FAIL);
  ck_assert_int_eq(resihp__probe_site_verdict(&eff, &rep, &site, &v, &rerun), 0);
  ck_assert_uint_eq(rerun, MEM | DISK | TOPO);
  ck_assert_int_eq(v.healthy, 1);

  /* A check the site did not select never drains, whatever its result. */
  resihp_probe_config_t narrow = site;
  narrow.checks = MEM;
  ck_assert_int_eq(resihp__probe_site_verdict(&eff, &rep, &narrow, &v, &rerun),
                   0);
  ck_assert_uint_eq(rerun, MEM);
  ck_assert_int_eq(v.healthy, 1);

  /* A failure under the site's own inputs counts without a second run. */
  site.test_fail = DISK;
  eff = site;
  ck_assert_int_eq(resihp__probe_run(&eff, &rep), 0);
  ck_assert_int_eq(resihp__probe_site_verdict(&eff, &rep, &site, &v, &rerun), 0);
  ck_assert_uint_eq(rerun, 0);
  ck_assert_int_eq(v.healthy, 0);
  ck_assert_uint_eq(v.checks, DISK);
  char sum[256];
  ck_assert_int_eq(resihp__probe_failure_summary(&v, sum, sizeof(sum)), 1);
  ck_assert_ptr_nonnull(strstr(sum, "disk: failure forced"));

  /* probe-timeout from the user shorter than the site's: a timeout is not
   * the node's fault until the check is run under the site's deadline. */
  config_only(&site, DISK);
  site.timeout_ms = 60000;
  site.test_delay_check = RESIHP_PROBE_DISK;
  site.test_delay_ms = 300;
  eff = site;
  eff.timeout_ms = 100;
  ck_assert_int_eq(resihp__probe_run(&eff, &rep), 0);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_DISK].status, RESIHP_PROBE_TIMEOUT);
  ck_assert_int_eq(resihp__probe_site_verdict(&eff, &rep, &site, &v, &rerun), 0);
  ck_assert_uint_eq(rerun, DISK);
  ck_assert_int_eq(v.healthy, 1);
  /* ... but a timeout under the site's own deadline counts. */
  site.timeout_ms = 100;
  eff = site;
  ck_assert_int_eq(resihp__probe_run(&eff, &rep), 0);
  ck_assert_int_eq(resihp__probe_site_verdict(&eff, &rep, &site, &v, &rerun), 0);
  ck_assert_uint_eq(rerun, 0);
  ck_assert_int_eq(v.healthy, 0);
  ck_assert_int_eq(v.r[RESIHP_PROBE_DISK].status, RESIHP_PROBE_TIMEOUT);
}
END_TEST

START_TEST(kv_and_json_render) {
  resihp_probe_config_t c;
  config_only(&c, (1u << RESIHP_PROBE_MEM) | (1u << RESIHP_PROBE_GPU));
  snprintf(c.nvml_lib, sizeof(c.nvml_lib), "/nonexistent/libnvidia-ml.so.1");
  c.test_fail = 1u << RESIHP_PROBE_MEM;
  resihp_probe_report_t rep;
  ck_assert_int_eq(resihp__probe_run(&c, &rep), 0);
  ck_assert_int_eq(rep.r[RESIHP_PROBE_GPU].status, RESIHP_PROBE_SKIP);
  char buf[4096];
  ck_assert_int_gt(resihp__probe_format_kv(&rep, "start", buf, sizeof(buf)), 0);
  ck_assert_ptr_nonnull(strstr(buf, "format=resihp-probe-v1\nkind=start\n"));
  ck_assert_ptr_nonnull(strstr(buf, "\nhealthy=0\n"));
  ck_assert_ptr_nonnull(strstr(buf, "\nfailed=mem\n"));
  ck_assert_ptr_nonnull(strstr(buf, "\ncheck.gpu.status=skip\n"));
  ck_assert_ptr_null(strstr(buf, "check.net."));
  ck_assert_int_eq(resihp__probe_format_kv(&rep, "start", buf, 40),
                   RESIHP_ERANGE);

  char *json = NULL;
  size_t jl = 0;
  FILE *f = open_memstream(&json, &jl);
  resihp__probe_print_json(&rep, "manual", f);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(json, "\"healthy\":false"));
  ck_assert_ptr_nonnull(strstr(json, "\"name\":\"mem\",\"status\":\"fail\""));
  free(json);

  char path[] = "/tmp/resihp-unit-kv.XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  ck_assert_int_eq(resihp__probe_write_kv(&rep, "start", path, 0), 0);
  ck_assert_int_eq(resihp__probe_write_kv(&rep, "periodic", path, 1), 0);
  f = fopen(path, "r");
  int blocks = 0;
  char line[512];
  while (fgets(line, sizeof(line), f))
    blocks += !strncmp(line, "format=", 7);
  fclose(f);
  ck_assert_int_eq(blocks, 2);
  unlink(path);
}
END_TEST

/* ---- gpu check against the fake NVML (tests/fake/fake-nvml.c) ---------- */

/* The fake reads what to answer from "<library>.state". A private copy of
 * the library gets a state file of its own, so that these tests never race
 * with resihp-probe.test, which steers the built one. */
struct fake_nvml {
  char dir[64];
  char lib[128];
  char state[160];
};

static int fake_nvml_open(struct fake_nvml *f) {
  const char *top = getenv("top_builddir");
  char src[4096];
  snprintf(src, sizeof(src), "%s/tests/fake/.libs/libfake-nvml.so",
           top ? top : ".");
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    fprintf(stderr, "skipped: %s not built\n", src);
    return -1;
  }
  snprintf(f->dir, sizeof(f->dir), "/tmp/resihp-fake-nvml.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(f->dir));
  snprintf(f->lib, sizeof(f->lib), "%s/libnvidia-ml.so.1", f->dir);
  snprintf(f->state, sizeof(f->state), "%s.state", f->lib);
  int out = open(f->lib, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  ck_assert_int_ge(out, 0);
  char buf[65536];
  ssize_t k;
  while ((k = read(in, buf, sizeof(buf))) > 0)
    ck_assert_int_eq(write(out, buf, (size_t)k), k);
  ck_assert_int_eq(k, 0);
  close(in);
  ck_assert_int_eq(close(out), 0);
  return 0;
}

static void fake_nvml_close(struct fake_nvml *f) {
  unlink(f->state);
  unlink(f->lib);
  rmdir(f->dir);
}

/* One gpu check, in this process, with the fake answering as "state" says
 * ("" = the idle-H200 defaults). */
static void gpu_check(const struct fake_nvml *f, const char *state,
                      int expect_gpus, resihp_probe_result_t *r) {
  FILE *s = fopen(f->state, "w");
  ck_assert_ptr_nonnull(s);
  fprintf(s, "%s\n", state);
  ck_assert_int_eq(fclose(s), 0);
  resihp_probe_config_t c;
  config_only(&c, 1u << RESIHP_PROBE_GPU);
  c.expect_gpus = expect_gpus;
  snprintf(c.nvml_lib, sizeof(c.nvml_lib), "%s", f->lib);
  resihp__probe_run_check(&c, RESIHP_PROBE_GPU, r);
  ck_assert_uint_lt(strlen(r->detail), sizeof(r->detail));
}

#define HAS(r, text)                                                           \
  ck_assert_msg(strstr((r).detail, text) != NULL, "'%s' not in '%s'", text,    \
                (r).detail)
#define HASNT(r, text)                                                         \
  ck_assert_msg(strstr((r).detail, text) == NULL, "'%s' in '%s'", text,        \
                (r).detail)

/* What an idle H200 answered: retired pages NOT_SUPPORTED is reported as
 * n/a, never as checked, and does not fail the GPU. */
START_TEST(gpu_h200_defaults) {
  struct fake_nvml f;
  if (fake_nvml_open(&f) != 0)
    return;
  resihp_probe_result_t r;
  gpu_check(&f, "", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  ck_assert_str_eq(r.detail,
                   "1 GPU healthy: gpu0 H200: ecc 0 uncorrected, "
                   "retired-pages n/a, remap 0 pending, throttle none, "
                   "pcie gen5/5 x16/16, replay 0, sm 345/1980 MHz, "
                   "mem 3201/3201 MHz");
  /* Where the query works it is named as checked. */
  gpu_check(&f, "retired=0", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  HAS(r, "retired-pages ok");
  gpu_check(&f, "retired=1", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  HAS(r, "gpu0: retired pages pending reset");
  fake_nvml_close(&f);
}
END_TEST

/* ECC disabled: the count query is unsupported, which is not a fault. */
START_TEST(gpu_ecc_unsupported) {
  struct fake_nvml f;
  if (fake_nvml_open(&f) != 0)
    return;
  resihp_probe_result_t r;
  gpu_check(&f, "ecc_rc=3", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  HAS(r, "gpu0 H200: ecc n/a, retired-pages n/a, remap 0 pending");
  HASNT(r, "uncorrected");
  /* Any other error of a required query fails, with NVML's words. */
  gpu_check(&f, "ecc_rc=999", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_str_eq(r.detail, "gpu0: ecc query: Unknown Error");
  fake_nvml_close(&f);
}
END_TEST

/* x8 of x16 fails; a generation below the maximum (power saving when idle)
 * is only reported. */
START_TEST(gpu_pcie_link) {
  struct fake_nvml f;
  if (fake_nvml_open(&f) != 0)
    return;
  resihp_probe_result_t r;
  gpu_check(&f, "width=8", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_str_eq(r.detail, "gpu0: pcie link x8 of x16");
  gpu_check(&f, "gen=1", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  HAS(r, "pcie gen1/5 x16/16");
  gpu_check(&f, "count=4 gpu=2 width=8 gen=3", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_str_eq(r.detail, "gpu2: pcie link x8 of x16; 3 GPUs healthy");
  fake_nvml_close(&f);
}
END_TEST

/* A GPU that fell off the bus answers GPU_IS_LOST, to the handle or to a
 * query; either fails it with that word, and the others stay healthy. */
START_TEST(gpu_lost) {
  struct fake_nvml f;
  if (fake_nvml_open(&f) != 0)
    return;
  resihp_probe_result_t r;
  gpu_check(&f, "count=2 gpu=1 handle_rc=15", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_str_eq(r.detail, "gpu1: no handle (GPU is lost); 1 GPU healthy");
  gpu_check(&f, "count=2 gpu=0 lost=1", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  /* Said once: a lost GPU is not asked again. */
  ck_assert_str_eq(r.detail, "gpu0: ecc query: GPU is lost; 1 GPU healthy");
  fake_nvml_close(&f);
}
END_TEST

/* The clock event reasons come from the current name where the driver has
 * it; the deprecated throttle name would say thermal throttling here. Only
 * hardware reasons fail. */
START_TEST(gpu_throttle) {
  struct fake_nvml f;
  if (fake_nvml_open(&f) != 0)
    return;
  resihp_probe_result_t r;
  gpu_check(&f, "throttle=1 old_throttle=40", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  HAS(r, "throttle none");
  gpu_check(&f, "throttle=4", 0, &r); /* software power cap */
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  HAS(r, "throttle 0x4");
  gpu_check(&f, "throttle=40 old_throttle=0", 0, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  HAS(r, "gpu0: hardware throttling (reasons 0x40)");
  fake_nvml_close(&f);
}
END_TEST

/* 8 (and 64) GPUs: the detail stays within RESIHP_PROBE_DETAIL_MAX, shows
 * whole entries and counts the rest, and a failing GPU is never the one left
 * out. Run through the helper, as resihp-probe does. */
START_TEST(gpu_many) {
  struct fake_nvml f;
  if (fake_nvml_open(&f) != 0)
    return;
  resihp_probe_result_t r;
  gpu_check(&f, "count=8", 8, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_PASS);
  HAS(r, "8 GPUs healthy: gpu0 H200: ecc 0 uncorrected,");
  HAS(r, "mem 3201/3201 MHz; +7 more healthy");
  const char *end = "; +7 more healthy";
  size_t dl = strlen(r.detail), el = strlen(end);
  ck_assert(dl > el && strcmp(r.detail + dl - el, end) == 0);
  gpu_check(&f, "count=8 remap=1", 8, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  HAS(r, "gpu0: row remap pending reset; gpu1: row remap pending reset");
  const char *more = strstr(r.detail, "; +");
  ck_assert_ptr_nonnull(more);
  unsigned shown = 0;
  for (const char *p = r.detail; (p = strstr(p, "gpu")) != NULL; p++)
    shown++;
  char tail[32];
  snprintf(tail, sizeof(tail), "; +%u more failing", 8 - shown);
  ck_assert_str_eq(more, tail);
  gpu_check(&f, "count=64 gpu=63 lost=1", 64, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_str_eq(r.detail, "gpu63: ecc query: GPU is lost; 63 GPUs healthy");
  gpu_check(&f, "count=4", 8, &r);
  ck_assert_int_eq(r.status, RESIHP_PROBE_FAIL);
  ck_assert_str_eq(r.detail,
                   "NVML sees 4 GPUs, step asked for 8; 4 GPUs healthy");

  FILE *s = fopen(f.state, "w");
  ck_assert_ptr_nonnull(s);
  fprintf(s, "count=8 gpu=6 width=8\n");
  ck_assert_int_eq(fclose(s), 0);
  resihp_probe_config_t c;
  config_only(&c, 1u << RESIHP_PROBE_GPU);
  snprintf(c.nvml_lib, sizeof(c.nvml_lib), "%s", f.lib);
  resihp_probe_report_t rep;
  ck_assert_int_eq(resihp__probe_run(&c, &rep), 0);
  ck_assert_int_eq(rep.healthy, 0);
  ck_assert_str_eq(rep.r[RESIHP_PROBE_GPU].detail,
                   "gpu6: pcie link x8 of x16; 7 GPUs healthy");
  fake_nvml_close(&f);
}
END_TEST

START_TEST(metrics_roundtrip_atomic) {
  char dir[] = "/tmp/resihp-unit-metrics.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof(path), "%s/x.prom", dir);
  for (int round = 0; round < 3; round++) {
    resihp_metrics_t *m = resihp__metrics_create();
    ck_assert_int_eq(resihp__metrics_declare(m, "resihp_test_total",
                                             RESIHP_METRIC_COUNTER, "A test."),
                     0);
    ck_assert_int_eq(resihp__metrics_declare(m, "resihp_test_gauge",
                                             RESIHP_METRIC_GAUGE, "G."),
                     0);
    ck_assert_int_eq(resihp__metrics_load(m, path), 0);
    ck_assert_int_eq(resihp__metrics_add(m, "resihp_test_total", "k=\"a\"", 1),
                     0);
    ck_assert_int_eq(resihp__metrics_set(m, "resihp_test_gauge", NULL, 0.5), 0);
    ck_assert_int_eq(resihp__metrics_add(m, "undeclared", NULL, 1),
                     RESIHP_EINVAL);
    ck_assert_int_eq(resihp__metrics_add(m, "resihp_test_total", "a\nb", 1),
                     RESIHP_EINVAL);
    ck_assert_int_eq(resihp__metrics_write(m, path), 0);
    ck_assert(resihp__metrics_get(m, "resihp_test_total", "k=\"a\"", -1) ==
              round + 1);
    resihp__metrics_destroy(m);
  }
  resihp__metrics_destroy(NULL);
  ck_assert_int_eq(resihp__metrics_declare(NULL, "x", RESIHP_METRIC_GAUGE, ""),
                   RESIHP_EINVAL);
  FILE *f = fopen(path, "r");
  char text[1024] = "";
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "# TYPE resihp_test_total counter\n"));
  ck_assert_ptr_nonnull(strstr(text, "resihp_test_total{k=\"a\"} 3\n"));
  ck_assert_ptr_nonnull(strstr(text, "resihp_test_gauge 0.5\n"));
  /* No temporary file left behind. */
  char tmp[160];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  ck_assert_int_ne(access(tmp, F_OK), 0);
  int lk = resihp__metrics_lock(path, 1000, NULL, 0);
  ck_assert_int_ge(lk, 0);
  close(lk);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Nobody but resihp's root helpers may hold the metrics lock: it is 0600,
 * taken without blocking, and a lock file that anyone else could open (a
 * 0644 one, a planted symlink, another user's file) is refused. */
START_TEST(metrics_lock_is_private_and_bounded) {
  char dir[] = "/tmp/resihp-unit-mlock.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[128], lock[160], target[160], err[512];
  snprintf(path, sizeof(path), "%s/n.prom", dir);
  snprintf(lock, sizeof(lock), "%s.lock", path);
  snprintf(target, sizeof(target), "%s/target", dir);
  umask(022);
  int a = resihp__metrics_lock(path, 1000, err, sizeof(err));
  ck_assert_int_ge(a, 0);
  struct stat st;
  ck_assert_int_eq(stat(lock, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  /* Held elsewhere (another open file description): busy, not a wait. */
  ck_assert_int_eq(resihp__metrics_lock(path, 20, err, sizeof(err)),
                   RESIHP_EBUSY);
  ck_assert_ptr_nonnull(strstr(err, "still held"));
  close(a);
  a = resihp__metrics_lock(path, 1000, err, sizeof(err));
  ck_assert_int_ge(a, 0);
  close(a);
  /* A lock file others can open (older resihp made it 0644) is refused. */
  ck_assert_int_eq(chmod(lock, 0644), 0);
  ck_assert_int_eq(resihp__metrics_lock(path, 1000, err, sizeof(err)),
                   RESIHP_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "remove it"));
  /* A planted symlink is not followed. */
  ck_assert_int_eq(unlink(lock), 0);
  int t = open(target, O_WRONLY | O_CREAT, 0644);
  ck_assert_int_ge(t, 0);
  close(t);
  ck_assert_int_eq(symlink(target, lock), 0);
  ck_assert_int_eq(resihp__metrics_lock(path, 1000, err, sizeof(err)),
                   RESIHP_EIO);
  ck_assert_ptr_nonnull(strstr(err, "symbolic link"));
  ck_assert_int_eq(stat(target, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0644);
  ck_assert_int_eq(unlink(lock), 0);
  /* Someone else's file, even with mode 0600. */
  if (geteuid() == 0) {
    t = open(lock, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(t, 0);
    ck_assert_int_eq(fchown(t, 65534, 65534), 0);
    close(t);
    ck_assert_int_eq(resihp__metrics_lock(path, 1000, err, sizeof(err)),
                     RESIHP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "owner uid 65534"));
  }
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static void make_dir_with(const char *base, const char *name, uid_t owner,
                          const char *file) {
  char p[300];
  snprintf(p, sizeof(p), "%s/%s", base, name);
  ck_assert_int_eq(mkdir(p, 0700), 0);
  if (file) {
    char f[400];
    snprintf(f, sizeof(f), "%s/%s", p, file);
    int fd = open(f, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    if (owner != geteuid())
      ck_assert_int_eq(chown(f, owner, owner), 0);
  }
  if (owner != geteuid())
    ck_assert_int_eq(chown(p, owner, owner), 0);
}

static int exists_at(const char *base, const char *name) {
  char p[400];
  snprintf(p, sizeof(p), "%s/%s", base, name);
  struct stat st;
  return lstat(p, &st) == 0;
}

START_TEST(rundir_names) {
  uid_t u = 7;
  ck_assert_int_eq(resihp__rundir_parse_name("resihp.1000.42.0.aB3xYz", &u), 1);
  ck_assert_int_eq(u, 1000);
  ck_assert_int_eq(
      resihp__rundir_parse_name("resihp.0.4294967291.4294967291.000000", &u),
      1);
  ck_assert_int_eq(u, 0);
  const char *bad[] = {"resihp.1000.42.aB3xYz",     "resihp.1000.42.0.aB3xY",
                       "resihp.1000.42.0.aB3xYz0", "resihp.01000.42.0.aB3xYz",
                       "resihp.1000.42.0.aB3/Yz",  "resihp.4294967296.1.0.abcdef",
                       "resihp.-1.42.0.aB3xYz",    "xresihp.1.2.3.abcdef",
                       "resihp..2.3.abcdef",       "probe.kv"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(!resihp__rundir_parse_name(bad[i], &u), "%s", bad[i]);
}
END_TEST

/* A node that dies leaves its step's directory; the next step removes it,
 * but only what is provably resihp's and stale: a live step's (locked)
 * directory, a planted symlink, a directory whose owner is not the uid its
 * name carries, and one holding anything else stay. */
START_TEST(rundir_stale_cleanup) {
  char base[] = "/tmp/resihp-unit-rundir.XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(base));
  ck_assert_int_eq(chmod(base, 01777), 0);
  uid_t me = geteuid();
  char live[320], err[256];
  int lk = resihp__rundir_create(base, me, 42, 0, live, sizeof(live), err,
                                 sizeof(err));
  ck_assert_int_ge(lk, 0);
  struct stat st;
  ck_assert_int_eq(stat(live, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  const char *live_name = strrchr(live, '/') + 1;
  uid_t u;
  ck_assert(resihp__rundir_parse_name(live_name, &u) && u == me);

  char stale[64], other[64], victim[300], sym[64];
  snprintf(stale, sizeof(stale), "resihp.%ld.41.0.AbC123", (long)me);
  make_dir_with(base, stale, me, RESIHP_RUNDIR_RESULTS);
  snprintf(other, sizeof(other), "resihp.%ld.40.0.Xtra12", (long)me);
  make_dir_with(base, other, me, "users-own-file");
  snprintf(victim, sizeof(victim), "%s/victim", base);
  make_dir_with(base, "victim", me, RESIHP_RUNDIR_RESULTS);
  snprintf(sym, sizeof(sym), "resihp.%ld.39.0.Sym123", (long)me);
  char symp[400];
  snprintf(symp, sizeof(symp), "%s/%s", base, sym);
  ck_assert_int_eq(symlink(victim, symp), 0);
  if (me == 0) {
    /* named for root but owned by nobody; and nobody's own leftover,
     * removed as nobody */
    make_dir_with(base, "resihp.0.38.0.Frn123", 65534, RESIHP_RUNDIR_RESULTS);
    make_dir_with(base, "resihp.65534.37.0.Nob123", 65534,
                  RESIHP_RUNDIR_RESULTS);
  }

  int removed = resihp__rundir_clean_stale(base, 1000, 100);
  ck_assert_int_eq(removed, me == 0 ? 2 : 1);
  ck_assert(!exists_at(base, stale));
  ck_assert(exists_at(base, live_name));
  ck_assert(exists_at(base, other));
  ck_assert(exists_at(base, sym));
  ck_assert(exists_at(base, "victim/" RESIHP_RUNDIR_RESULTS));
  if (me == 0) {
    ck_assert(exists_at(base, "resihp.0.38.0.Frn123/" RESIHP_RUNDIR_RESULTS));
    ck_assert(!exists_at(base, "resihp.65534.37.0.Nob123"));
    ck_assert_int_eq(geteuid(), 0); /* back to root */
  }

  /* The step ends (or its node dies): its directory is stale now. */
  close(lk);
  ck_assert_int_eq(resihp__rundir_clean_stale(base, 1000, 100), 1);
  ck_assert(!exists_at(base, live_name));
  /* The scan is bounded. */
  make_dir_with(base, stale, me, NULL);
  ck_assert_int_eq(resihp__rundir_clean_stale(base, 1000, 0), 0);
  ck_assert(exists_at(base, stale));

  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(helper_hygiene) {
  /* A command run through the helper sees a clean environment, no
   * inherited fds beyond stdio, default signal mask and no pending
   * inheritance of our ignored signals. */
  setenv("RESIHP_UNIT_SECRET", "leak", 1);
  int leak = open("/dev/null", O_RDONLY); /* not O_CLOEXEC on purpose */
  ck_assert_int_ge(leak, 3);
  signal(SIGTERM, SIG_IGN);
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, &old);
  char script[] =
      "test -z \"$RESIHP_UNIT_SECRET\" || exit 3; "
      "test \"$PATH\" = /usr/sbin:/usr/bin:/sbin:/bin || exit 4; "
      "n=$(ls /proc/self/fd | wc -l); test $n -le 4 || exit 5; "
      /* 32 and 33 are glibc's own (SIGCANCEL/SIGSETXID): libc cannot
       * change them, and a helper that runs NVML must keep them. */
      "v=$(awk '/^SigIgn/ {print $2}' /proc/self/status); "
      "test $(( 0x$v & ~0x180000000 )) = 0 || exit 6; "
      "grep -q '^SigBlk:[[:space:]]*0*$' /proc/self/status || exit 7; "
      "exit 0";
  char *argv[] = {"/bin/sh", "-c", script, NULL};
  ck_assert_int_eq(resihp__run_command(argv, NULL, 10000), 0);
  char *slow[] = {"/bin/sleep", "10", NULL};
  ck_assert_int_eq(resihp__run_command(slow, NULL, 100), RESIHP_ETIMEDOUT);
  char *env[] = {"RESIHP_UNIT_X=1", NULL};
  char *show[] = {"/bin/sh", "-c", "test \"$RESIHP_UNIT_X\" = 1", NULL};
  ck_assert_int_eq(resihp__run_command(show, env, 10000), 0);
  signal(SIGTERM, SIG_DFL);
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(leak);
}
END_TEST

/* A root-actions helper is forked by slurmstepd while user_init runs with
 * the job's effective uid, then regains root. The kernel clears
 * PR_SET_PDEATHSIG on that credential change: the helper must arm it again,
 * or it outlives a killed slurmstepd. Real processes: the test is the
 * subreaper, A plays slurmstepd, B the helper; A is SIGKILLed and B must die
 * of the parent-death signal rather than see the end of the socket. */
START_TEST(become_root_keeps_parent_death_signal) {
  if (geteuid() != 0) {
    fprintf(stderr, "skipped: needs root to change credentials\n");
    return;
  }
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pid_t a = fork();
  ck_assert_int_ge(a, 0);
  if (a == 0) {
    pid_t me = getpid();
    pid_t b = fork();
    if (b < 0)
      _exit(1);
    if (b == 0) {
      int fd = resihp__helper_sanitize(sv[1], me, "unit-helper");
      /* as in user_init: real and saved uid root, effective the user's */
      if (seteuid(65534) != 0)
        _exit(2);
      int msg[3] = {(int)getpid(), resihp__helper_become_root(me), 0};
      prctl(PR_GET_PDEATHSIG, &msg[2]);
      if (write(fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        _exit(3);
      char c;
      while (read(fd, &c, 1) > 0)
        ;
      _exit(0); /* survived its parent: the bug */
    }
    close(sv[0]);
    close(sv[1]);
    for (;;)
      pause();
  }
  close(sv[1]);
  int msg[3];
  ck_assert_int_eq(read(sv[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
  ck_assert_int_eq(msg[1], 0);
  ck_assert_int_eq(msg[2], SIGKILL);
  kill(a, SIGKILL);
  int st;
  ck_assert_int_eq(waitpid(a, &st, 0), a);
  /* The parent-death signal was sent while A exited, before waitpid
   * returned: from here B either is dying of it or reads EOF. */
  close(sv[0]);
  ck_assert_int_eq(waitpid((pid_t)msg[0], &st, 0), (pid_t)msg[0]);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                "helper outlived its parent (status 0x%x)", st);
}
END_TEST

START_TEST(new_settings_registered) {
  resihp_settings_t s;
  resihp_settings_init(&s);
  ck_assert_int_eq(resihp_settings_get(&s, RESIHP_SETTING_PROBE_MIN_FREE_MEM),
                   256L << 20);
  ck_assert_str_eq(resihp_settings_get_str(&s, RESIHP_SETTING_PROBE_RUN_DIR),
                   "/tmp");
  ck_assert_str_eq(resihp_settings_get_str(&s, RESIHP_SETTING_PROBE_METRICS),
                   "");
  ck_assert_int_eq(resihp_setting_lookup("RESIHP_PROBE_MIN_LINK_MBPS"),
                   RESIHP_SETTING_PROBE_MIN_LINK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("probe");
  TCase *tc = tcase_create("probe");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, parse_lists);
  tcase_add_test(tc, valid_dirs);
  tcase_add_test(tc, config_from_settings);
  tcase_add_test(tc, run_healthy_and_forced_failure);
  tcase_add_test(tc, run_deadline_blames_the_slow_check);
  tcase_add_test(tc, mem_threshold_and_fake_proc);
  tcase_add_test(tc, scratch_unwritable);
  tcase_add_test(tc, site_verdict_ignores_user_inputs);
  tcase_add_test(tc, kv_and_json_render);
  tcase_add_test(tc, gpu_h200_defaults);
  tcase_add_test(tc, gpu_ecc_unsupported);
  tcase_add_test(tc, gpu_pcie_link);
  tcase_add_test(tc, gpu_lost);
  tcase_add_test(tc, gpu_throttle);
  tcase_add_test(tc, gpu_many);
  tcase_add_test(tc, metrics_roundtrip_atomic);
  tcase_add_test(tc, metrics_lock_is_private_and_bounded);
  tcase_add_test(tc, rundir_names);
  tcase_add_test(tc, rundir_stale_cleanup);
  tcase_add_test(tc, helper_hygiene);
  tcase_add_test(tc, new_settings_registered);
  tcase_add_test(tc, become_root_keeps_parent_death_signal);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
