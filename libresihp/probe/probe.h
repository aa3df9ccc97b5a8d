/* SPDX-License-Identifier: BSD-3-Clause */
/* Node health probes, shared by the SPANK plugin (step start and periodic)
 * and tools/resihp-probe. Private to resihp: internal names (resihp__).
 *
 * Each check runs in a helper process forked with the hygiene slurmstepd
 * needs (see resihp__helper_sanitize) and is bounded by a hard deadline:
 * a check that hangs (dead NFS scratch, wedged driver) is SIGKILLed with its
 * helper and reported as a timeout naming the check. Nothing here starts a
 * thread or loads CUDA; NVML is dlopen()ed inside the helper only.
 *
 * Results are plain structs; the report functions render them as the
 * key=value file handed to ranks (format v1, see resihp-probe(8)), as JSON
 * and as a text table. A future coordinator reads the same formats.
 */
#ifndef RESIHP_PROBE_H
#define RESIHP_PROBE_H

#include <resihp/settings.h>

#include <stdio.h>
#include <sys/types.h>

/* XX(ID, name, what it checks) */
#define RESIHP_PROBE_CHECKS(XX)                                                \
  XX(TOPO, "topo", "hwloc topology: PUs/cores/NUMA (and GPUs) vs the step")   \
  XX(MEM, "mem", "available memory vs probe-min-free-mem")                    \
  XX(DISK, "disk", "create+write+fsync+unlink a file in the scratch dir")     \
  XX(NET, "net", "NIC and InfiniBand link state and rate (sysfs)")            \
  XX(GPU, "gpu", "NVML: uncorrected ECC, pending retired/remapped rows, "     \
                 "hardware throttling, PCIe link width")

typedef enum {
#define RESIHP__PROBE_ENUM(id, name, help) RESIHP_PROBE_##id,
  RESIHP_PROBE_CHECKS(RESIHP__PROBE_ENUM)
#undef RESIHP__PROBE_ENUM
  RESIHP_PROBE__COUNT
} resihp_probe_check_t;

#define RESIHP_PROBE_ALL ((1u << RESIHP_PROBE__COUNT) - 1)

typedef enum {
  RESIHP_PROBE_NOTRUN = 0, /* not selected, or never reached (timeout) */
  RESIHP_PROBE_PASS,
  RESIHP_PROBE_FAIL,
  RESIHP_PROBE_SKIP,    /* nothing to check here (no GPU library, no IB) */
  RESIHP_PROBE_TIMEOUT, /* the deadline expired while this check ran */
} resihp_probe_status_t;

#define RESIHP_PROBE_DETAIL_MAX 200
#define RESIHP_PROBE_PATH_MAX 256

typedef struct {
  unsigned checks;           /* bit per resihp_probe_check_t */
  long timeout_ms;           /* hard deadline of one probe run */
  long min_free_mem;         /* bytes */
  long min_link_mbps;        /* 0 = any rate */
  int expect_cpus;           /* PUs the step uses on this node (0 = none) */
  int expect_gpus;           /* GPUs the step asked for (0 = none) */
  char scratch_dir[RESIHP_PROBE_PATH_MAX];
  char sysfs_root[RESIHP_PROBE_PATH_MAX]; /* "/sys"; tests point elsewhere */
  char proc_root[RESIHP_PROBE_PATH_MAX];  /* "/proc" */
  char nvml_lib[RESIHP_PROBE_PATH_MAX];   /* "libnvidia-ml.so.1" */
  /* Admin/test hook: never set from a job's environment. */
  unsigned test_fail;        /* checks forced to fail */
  int test_delay_check;      /* check to slow down, -1 none */
  long test_delay_ms;
} resihp_probe_config_t;

typedef struct {
  int status; /* resihp_probe_status_t */
  long usec;  /* wall time of the check */
  char detail[RESIHP_PROBE_DETAIL_MAX];
} resihp_probe_result_t;

typedef struct {
  resihp_probe_result_t r[RESIHP_PROBE__COUNT];
  unsigned checks;  /* what was asked */
  int healthy;      /* no FAIL and no TIMEOUT */
  int timed_out;    /* the deadline expired */
  long usec;        /* wall time of the whole run */
  long long time;   /* unix time of the start */
} resihp_probe_report_t;

const char *resihp__probe_check_name(int check);
const char *resihp__probe_status_name(int status);
int resihp__probe_check_lookup(const char *name);

/* "all", "none" or "name:name..." -> mask. Bounded; rejects unknown names,
 * empty items and duplicates with a sentence in err. */
int resihp__probe_parse_list(const char *list, unsigned *mask, char *err,
                             size_t errlen);

/* Defaults, then the probe settings of s (probes, probe-timeout, ...).
 * scratch_fallback is used when probe-scratch is empty (the plugin passes
 * the job's TMPDIR; NULL means /tmp). */
void resihp__probe_config_init(resihp_probe_config_t *c);
int resihp__probe_config_from_settings(resihp_probe_config_t *c,
                                       const resihp_settings_t *s,
                                       const char *scratch_fallback,
                                       char *err, size_t errlen);

/* A directory given to the probes: absolute, bounded, printable, no "..". */
int resihp__probe_valid_dir(const char *dir);

/* Run one check in this process (no deadline). */
void resihp__probe_run_check(const resihp_probe_config_t *c, int check,
                             resihp_probe_result_t *out);

/* Run every selected check in a sanitised helper under c->timeout_ms.
 * Returns 0 when a report was produced (healthy or not), a negative
 * RESIHP_E* code when no helper could be started. */
int resihp__probe_run(const resihp_probe_config_t *c,
                      resihp_probe_report_t *rep);

/* The verdict that may drain the node (see verdict.c): rep came from a run
 * under eff (site settings + the user's options + the job's environment);
 * out holds only the failed checks that site selects, each with its result
 * under site's configuration (taken from rep when the check ran with the
 * site's inputs, else from a new run of just those checks under site).
 * out->healthy is 0 only when a site check fails under site values.
 * rerun_mask (may be NULL) gets the checks that were run again. Returns 0,
 * or a negative code when the new run could not start (then out is not a
 * verdict: do not drain). */
int resihp__probe_site_verdict(const resihp_probe_config_t *eff,
                               const resihp_probe_report_t *rep,
                               const resihp_probe_config_t *site,
                               resihp_probe_report_t *out,
                               unsigned *rerun_mask);

/* "mem: available 100 MiB < 256 MiB; net: ..." for the failed checks
 * (bounded, printable). Returns the number of failed checks. */
int resihp__probe_failure_summary(const resihp_probe_report_t *rep, char *buf,
                                  size_t len);

/* Renderers. kind is "start", "periodic" or "manual". */
int resihp__probe_format_kv(const resihp_probe_report_t *rep, const char *kind,
                            char *buf, size_t len);
int resihp__probe_write_kv(const resihp_probe_report_t *rep, const char *kind,
                           const char *path, int append);
void resihp__probe_print_json(const resihp_probe_report_t *rep,
                              const char *kind, FILE *f);
void resihp__probe_print_text(const resihp_probe_report_t *rep, FILE *f);

/* Update the Prometheus textfile at path (locked read-modify-write, atomic
 * replace): resihp_probe_runs_total, resihp_probe_failures_total{check},
 * resihp_probe_duration_seconds{check}, ... Bounded: a busy or untrusted
 * lock file (see resihp__metrics_lock) skips this run's update with a
 * sentence in err. */
int resihp__probe_update_metrics(const resihp_probe_report_t *rep,
                                 const char *kind, const char *path,
                                 char *err, size_t errlen);

/* Fork hygiene for helpers of slurmstepd: default signal dispositions and an
 * empty mask, stdio on /dev/null, every fd >= 3 closed except keep_fd (which
 * is moved to a high number and returned), PR_SET_PDEATHSIG(SIGKILL) against
 * parent_pid, a minimal fixed environment, cwd "/", and comm set to name.
 * Call only in the child, first thing after fork(). Returns the new keep_fd
 * (or -1 when keep_fd was -1); _exit()s if the parent is already gone. */
int resihp__helper_sanitize(int keep_fd, pid_t parent_pid, const char *name);

/* In a helper sanitised against parent_pid while slurmstepd had dropped
 * its effective ids to the job's user (user_init): regain root for good
 * (real, effective and saved ids, no supplementary groups) and re-arm
 * PR_SET_PDEATHSIG, which the credential change cleared. _exit()s if the
 * parent is already gone. Returns 0 or RESIHP_ESYS (not root, or the real
 * uid is not root either). */
int resihp__helper_become_root(pid_t parent_pid);

/* Reap a child within timeout_ms. A child killed with SIGKILL while in an
 * uninterruptible sleep (dead NFS server) cannot be reaped until the I/O
 * ends: rather than block the step, give up and let it become slurmstepd's
 * zombie. Returns 0 (status filled when not NULL), RESIHP_ETIMEDOUT or
 * RESIHP_ESYS (no such child). */
int resihp__reap_bounded(pid_t pid, int *status, long timeout_ms);

/* Run argv (argv[0] an absolute path or a name found in the helper PATH)
 * in a sanitised child, bounded by timeout_ms. env_extra: NULL or a
 * NULL-terminated list of "NAME=value" added to the clean environment.
 * Returns the exit status, or a negative RESIHP_E* code (ETIMEDOUT after
 * SIGKILL). */
int resihp__run_command(char *const argv[], char *const env_extra[],
                        long timeout_ms);

/* Per-step probe directories (rundir.c): BASE/resihp.UID.JOB.STEP.XXXXXX,
 * holding the results file RESIHP_RUNDIR_RESULTS, locked by its step. */
#define RESIHP_RUNDIR_RESULTS "probe.kv"

/* 1 and the uid when name has exactly that form, else 0. */
int resihp__rundir_parse_name(const char *name, uid_t *uid);

/* Create a fresh directory with the caller's credentials (mode 0700) and
 * lock it; path (len bytes) gets its name. Returns the lock fd (O_CLOEXEC;
 * keep it open while the step runs) or a negative code with err. */
int resihp__rundir_create(const char *base, uid_t uid, unsigned long job,
                          unsigned long step, char *path, size_t len,
                          char *err, size_t errlen);

/* Remove basefd/name when it is a directory (not a symlink) owned by uid,
 * unlocked unless if_unlocked is 0, and holding nothing but our files.
 * Returns 0 when removed, a negative code when it was left alone. */
int resihp__rundir_remove(int basefd, const char *name, uid_t uid,
                          int if_unlocked);

/* Remove the stale directories under base (see rundir.c), looking at most
 * at max_entries entries and removing at most max_removed. As root, each
 * is removed with its owner's effective uid; otherwise only the caller's
 * own are considered. Returns how many were removed or a negative code. */
int resihp__rundir_clean_stale(const char *base, long max_entries,
                               int max_removed);

/* Drain node with reason "resihp: <summary>" through scontrol. slurm_conf
 * may be NULL (scontrol's default). Returns 0 or a negative code. */
int resihp__probe_drain(const char *node, const char *summary,
                        const char *slurm_conf, long timeout_ms);

#endif
