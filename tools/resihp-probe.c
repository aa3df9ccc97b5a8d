/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-probe: run resihp's node health checks from a shell (admins,
 * Slurm HealthCheckProgram wrappers, a future coordinator vetting spares)
 * and print them as a table or JSON.
 *
 * Exit status: 0 healthy, 1 a check failed or timed out, 2 usage error. */
#include "config.h"

#include "probe.h"

#include <resihp.h>

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_UNHEALTHY 1
#define EXIT_USAGE 2

static void usage(FILE *f) {
  fprintf(f,
          "usage: resihp-probe [options]\n"
          "Run resihp's node health checks (the ones the SPANK plugin runs at\n"
          "step start) and print the results.\n\n"
          "  -c, --checks LIST       all (default), none or check:check...\n"
          "                          checks: topo mem disk net gpu\n"
          "  -t, --timeout DUR       hard deadline of the run (default 5s)\n"
          "  -m, --min-free-mem SIZE memory that must be available (256M)\n"
          "  -s, --scratch DIR       dir the disk check writes to (TMPDIR,/tmp)\n"
          "  -l, --min-link MBPS     slowest acceptable NIC/IB rate (0: any)\n"
          "      --expect-cpus N     fail if fewer PUs are usable\n"
          "      --expect-gpus N     fail if fewer GPUs are present\n"
          "  -j, --json              one JSON object instead of a table\n"
          "      --kv                the key=value results format of the plugin\n"
          "      --metrics FILE      also update this Prometheus textfile\n"
          "      --test-fail LIST    force these checks to fail (testing)\n"
          "      --test-delay C:MS   make check C sleep MS first (testing)\n"
          "      --sysfs DIR, --proc DIR, --nvml LIB  alternative sources\n"
          "  -h, --help, -V, --version\n\n"
          "Exit status: 0 healthy, 1 a check failed or timed out, 2 usage.\n"
          "See resihp-probe(8).\n");
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "resihp-probe: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'resihp-probe --help'.\n");
  va_end(ap);
  return EXIT_USAGE;
}

/* Values go through the settings registry so that units and ranges are
 * exactly those of --resilient=... */
static int set(resihp_settings_t *s, const char *key, const char *value) {
  char err[512];
  if (resihp_settings_set(s, key, value, RESIHP_SOURCE_OPTION, err,
                          sizeof(err)) == 0)
    return 0;
  fprintf(stderr, "resihp-probe: %s\n", err);
  return -1;
}

static int parse_count(const char *v, int *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (end == v || *end || errno || n < 0 || n > 100000)
    return -1;
  *out = (int)n;
  return 0;
}

static int path_opt(char *dst, size_t len, const char *v) {
  if (strnlen(v, len) >= len)
    return -1;
  snprintf(dst, len, "%s", v);
  return 0;
}

enum {
  OPT_EXPECT_CPUS = 256,
  OPT_EXPECT_GPUS,
  OPT_KV,
  OPT_METRICS,
  OPT_TEST_FAIL,
  OPT_TEST_DELAY,
  OPT_SYSFS,
  OPT_PROC,
  OPT_NVML,
};

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"checks", required_argument, NULL, 'c'},
      {"timeout", required_argument, NULL, 't'},
      {"min-free-mem", required_argument, NULL, 'm'},
      {"scratch", required_argument, NULL, 's'},
      {"min-link", required_argument, NULL, 'l'},
      {"expect-cpus", required_argument, NULL, OPT_EXPECT_CPUS},
      {"expect-gpus", required_argument, NULL, OPT_EXPECT_GPUS},
      {"json", no_argument, NULL, 'j'},
      {"kv", no_argument, NULL, OPT_KV},
      {"metrics", required_argument, NULL, OPT_METRICS},
      {"test-fail", required_argument, NULL, OPT_TEST_FAIL},
      {"test-delay", required_argument, NULL, OPT_TEST_DELAY},
      {"sysfs", required_argument, NULL, OPT_SYSFS},
      {"proc", required_argument, NULL, OPT_PROC},
      {"nvml", required_argument, NULL, OPT_NVML},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  resihp_settings_t s;
  resihp_settings_init(&s);
  resihp_probe_config_t c;
  resihp__probe_config_init(&c);
  int json = 0, kv = 0, expect_cpus = 0, expect_gpus = 0;
  unsigned test_fail = 0;
  const char *metrics = NULL, *delay = NULL;
  char sysfs[RESIHP_PROBE_PATH_MAX] = "", proc[RESIHP_PROBE_PATH_MAX] = "",
       nvml[RESIHP_PROBE_PATH_MAX] = "";
  char err[512];
  int o;
  opterr = 0;
  while ((o = getopt_long(argc, argv, ":c:t:m:s:l:jhV", longopts, NULL)) !=
         -1) {
    switch (o) {
    case 'c':
      if (set(&s, "probes", optarg))
        return EXIT_USAGE;
      break;
    case 't':
      if (set(&s, "probe-timeout", optarg))
        return EXIT_USAGE;
      break;
    case 'm':
      if (set(&s, "probe-min-free-mem", optarg))
        return EXIT_USAGE;
      break;
    case 's':
      if (set(&s, "probe-scratch", optarg))
        return EXIT_USAGE;
      break;
    case 'l':
      if (set(&s, "probe-min-link", optarg))
        return EXIT_USAGE;
      break;
    case OPT_EXPECT_CPUS:
      if (parse_count(optarg, &expect_cpus))
        return bad_usage("--expect-cpus=%s: give a count 0..100000", optarg);
      break;
    case OPT_EXPECT_GPUS:
      if (parse_count(optarg, &expect_gpus))
        return bad_usage("--expect-gpus=%s: give a count 0..100000", optarg);
      break;
    case 'j':
      json = 1;
      break;
    case OPT_KV:
      kv = 1;
      break;
    case OPT_METRICS:
      metrics = optarg;
      break;
    case OPT_TEST_FAIL:
      if (resihp__probe_parse_list(optarg, &test_fail, err, sizeof(err)))
        return bad_usage("--test-fail: %s", err);
      break;
    case OPT_TEST_DELAY:
      delay = optarg;
      break;
    case OPT_SYSFS:
      if (path_opt(sysfs, sizeof(sysfs), optarg))
        return bad_usage("--sysfs: path too long");
      break;
    case OPT_PROC:
      if (path_opt(proc, sizeof(proc), optarg))
        return bad_usage("--proc: path too long");
      break;
    case OPT_NVML:
      if (path_opt(nvml, sizeof(nvml), optarg))
        return bad_usage("--nvml: path too long");
      break;
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      printf("resihp-probe %s\n", resihp_version());
      return 0;
    case ':':
      return bad_usage("option '%s' needs a value", argv[optind - 1]);
    default:
      return bad_usage("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return bad_usage("unexpected argument '%s'", argv[optind]);
  if (json && kv)
    return bad_usage("--json and --kv exclude each other");

  if (resihp__probe_config_from_settings(&c, &s, getenv("TMPDIR"), err,
                                         sizeof(err)))
    return bad_usage("%s", err);
  c.expect_cpus = expect_cpus;
  c.expect_gpus = expect_gpus;
  c.test_fail = test_fail;
  if (delay) {
    char check[32];
    const char *colon = strchr(delay, ':');
    size_t l = colon ? (size_t)(colon - delay) : 0;
    char *end = NULL;
    long ms = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || l == 0 || l >= sizeof(check) || !end || *end || ms < 1 ||
        ms > 600000)
      return bad_usage("--test-delay=%s: use CHECK:MS (MS 1..600000)", delay);
    memcpy(check, delay, l);
    check[l] = '\0';
    c.test_delay_check = resihp__probe_check_lookup(check);
    if (c.test_delay_check < 0)
      return bad_usage("--test-delay: unknown check '%s'", check);
    c.test_delay_ms = ms;
  }
  if (sysfs[0])
    snprintf(c.sysfs_root, sizeof(c.sysfs_root), "%s", sysfs);
  if (proc[0])
    snprintf(c.proc_root, sizeof(c.proc_root), "%s", proc);
  if (nvml[0])
    snprintf(c.nvml_lib, sizeof(c.nvml_lib), "%s", nvml);

  resihp_probe_report_t rep;
  int rc = resihp__probe_run(&c, &rep);
  if (rc) {
    fprintf(stderr, "resihp-probe: cannot start the probe helper: %s\n",
            resihp_strerror(rc));
    return EXIT_UNHEALTHY;
  }
  if (json) {
    resihp__probe_print_json(&rep, "manual", stdout);
  } else if (kv) {
    char buf[4096];
    if (resihp__probe_format_kv(&rep, "manual", buf, sizeof(buf)) > 0)
      fputs(buf, stdout);
  } else {
    resihp__probe_print_text(&rep, stdout);
  }
  char merr[512];
  if (metrics && resihp__probe_update_metrics(&rep, "manual", metrics, merr,
                                              sizeof(merr)) != 0)
    fprintf(stderr, "resihp-probe: metrics not updated: %s\n", merr);
  if (!rep.healthy && !json && !kv) {
    char sum[512];
    resihp__probe_failure_summary(&rep, sum, sizeof(sum));
    fprintf(stderr, "resihp-probe: unhealthy: %s\n", sum);
  }
  return rep.healthy ? 0 : EXIT_UNHEALTHY;
}
