/* SPDX-License-Identifier: BSD-3-Clause */
/* slurmstepd side of the node health probes (S_CTX_REMOTE).
 *
 * user_init (once per step and node, privileges temporarily dropped to the
 * job's user, before any task is forked): run the selected checks in a
 * sanitised helper under probe-timeout, write the results file into a fresh
 * per-step directory, export its path to the tasks, log the verdict, and do
 * the root-only follow-ups (metrics textfile, drain) in a short-lived child
 * that regains root. The verdict is acted on in task_init: a task that
 * fails there exits 1, so srun reports the failure and exits non-zero,
 * whereas a failing user_init only makes srun print "launch failed" and
 * exit 0 (measured on Slurm 22.05).
 *
 * When probe-interval > 0 a periodic helper re-runs the checks and appends
 * to the results file; it is killed when the last local task exits and at
 * the latest in slurm_spank_exit, and PR_SET_PDEATHSIG covers a dying
 * slurmstepd.
 *
 * Trust: the job's environment is read only for TMPDIR (the default scratch
 * directory, written with the user's own credentials) and for the GPU list
 * Slurm set (a count compared with what the node has). Those, the step's
 * CPU count and the user's --resilient probe options can fail the user's
 * own step, never drain the node: with drain=yes, a failure drains only
 * when a check the site selected also fails with the site's values alone
 * (verdict.c). Everything that runs as root uses plugstack.conf values and
 * slurmstepd's own environment. */
#include "config.h"

#include "plugin.h"

#include "probe.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROOT_ACTIONS_TIMEOUT_MS 15000
#define DRAIN_TIMEOUT_MS 10000

/* Copy a value from the job's environment, bounded; "" when absent. */
static void job_getenv(spank_t sp, const char *name, char *buf, size_t len) {
  buf[0] = '\0';
  if (spank_getenv(sp, name, buf, (int)len) != ESPANK_SUCCESS)
    buf[0] = '\0';
}

/* Number of entries in a comma-separated GPU list ("0,1,3"), at most 64. */
static int count_list(const char *s) {
  if (!*s)
    return 0;
  int n = 1;
  for (; *s; s++)
    if (*s == ',')
      n++;
  return n > 64 ? 64 : n;
}

/* This node's name as slurmd knows it: slurmd exports SLURMD_NODENAME into
 * its own (trusted) environment, which slurmstepd inherits. */
static void node_name(char *buf, size_t len) {
  const char *n = getenv("SLURMD_NODENAME");
  if (n && *n && strnlen(n, len) < len) {
    snprintf(buf, len, "%s", n);
    return;
  }
  if (gethostname(buf, len) != 0)
    snprintf(buf, len, "unknown");
  buf[len - 1] = '\0';
}

/* The admin-only test hooks, on the node test-fail-node= names (if any).
 * node_name() must have run. */
static void apply_test_hooks(resihp_probe_config_t *c) {
  int target = !resihp_plugin.test_fail_node[0] ||
               !strcmp(resihp_plugin.test_fail_node, resihp_plugin.node);
  c->test_fail = target ? resihp_plugin.test_fail : 0;
  c->test_delay_check = resihp_plugin.test_delay_check;
  c->test_delay_ms = resihp_plugin.test_delay_ms;
}

/* Two configurations of the same checks. eff is what the step asked for:
 * the site's settings overridden by the user's options, the job's TMPDIR
 * as default scratch directory and the step's CPU and GPU counts as
 * expectations; its verdict decides whether the step's tasks start. site
 * has the plugstack.conf values only and no input from the job (scratch
 * /tmp unless the site set probe-scratch, no expectations): only a failure
 * under it may drain the node (see verdict.c). */
static int build_config(spank_t sp, resihp_probe_config_t *eff,
                        resihp_probe_config_t *site) {
  char tmpdir[RESIHP_PROBE_PATH_MAX], gpus[256];
  job_getenv(sp, "TMPDIR", tmpdir, sizeof(tmpdir));
  if (!resihp__probe_valid_dir(tmpdir))
    tmpdir[0] = '\0';
  resihp__probe_config_init(eff);
  resihp__probe_config_init(site);
  char err[512];
  if (resihp__probe_config_from_settings(eff, &resihp_plugin.settings, tmpdir,
                                         err, sizeof(err)) ||
      resihp__probe_config_from_settings(site, &resihp_plugin.admin, NULL, err,
                                         sizeof(err))) {
    slurm_error("%s: probe configuration: %s", PLUGIN_NAME, err);
    return -1;
  }
  uint32_t ntasks = 0, cpt = 0;
  if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) == ESPANK_SUCCESS &&
      spank_get_item(sp, S_STEP_CPUS_PER_TASK, &cpt) == ESPANK_SUCCESS &&
      ntasks < 100000 && cpt < 100000)
    eff->expect_cpus = (int)(ntasks * (cpt ? cpt : 1));
  resihp_plugin.local_tasks = ntasks;
  job_getenv(sp, "SLURM_STEP_GPUS", gpus, sizeof(gpus));
  if (!gpus[0])
    job_getenv(sp, "SLURM_JOB_GPUS", gpus, sizeof(gpus));
  eff->expect_gpus = count_list(gpus);
  apply_test_hooks(eff);
  apply_test_hooks(site);
  return 0;
}

static const char *run_base(void) {
  return resihp_settings_get_str(&resihp_plugin.settings,
                                 RESIHP_SETTING_PROBE_RUN_DIR);
}

/* A fresh, unpredictable per-step directory created with the user's
 * credentials and locked for the step's life (rundir.c): the lock is what
 * tells a later step's clean-up that this one still runs. */
static int make_run_dir(spank_t sp) {
  uint32_t job = 0, step = 0;
  spank_get_item(sp, S_JOB_ID, &job);
  spank_get_item(sp, S_JOB_STEPID, &step);
  char err[400];
  int fd = resihp__rundir_create(run_base(), geteuid(), job, step,
                                 resihp_plugin.run_dir,
                                 sizeof(resihp_plugin.run_dir), err,
                                 sizeof(err));
  if (fd < 0) {
    resihp_plugin.run_dir[0] = '\0';
    slurm_error("%s: %s", PLUGIN_NAME, err);
    return -1;
  }
  resihp_plugin.run_dir_fd = fd;
  return 0;
}

/* Directories of steps that died with their node (no slurm_spank_exit ran)
 * are removed by the next step that starts here, in a helper that runs
 * beside the probe: as root, so that any user's leftovers go, acting as
 * each directory's owner (rundir.c). Bounded in entries looked at and in
 * time: a user filling the directory cannot hold the step up. */
#define STALE_MAX_ENTRIES 100000
#define STALE_MAX_REMOVED 256
#define STALE_TIMEOUT_MS 5000

static pid_t start_stale_cleanup(void) {
  const char *base = run_base();
  if (!resihp__probe_valid_dir(base))
    return -1;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  resihp__helper_sanitize(-1, parent, "resihp-clean");
  if (resihp__helper_become_root(parent) != 0)
    _exit(2);
  _exit(resihp__rundir_clean_stale(base, STALE_MAX_ENTRIES,
                                   STALE_MAX_REMOVED) < 0);
}

static void finish_stale_cleanup(pid_t pid) {
  if (pid <= 0)
    return;
  if (resihp__reap_bounded(pid, NULL, STALE_TIMEOUT_MS) == RESIHP_ETIMEDOUT) {
    kill(pid, SIGKILL);
    resihp__reap_bounded(pid, NULL, 1000);
  }
}

static void results_path(char *buf, size_t len) {
  snprintf(buf, len, "%s/" RESIHP_RUNDIR_RESULTS, resihp_plugin.run_dir);
}

/* Whether a failed run under eff drains the node: only with drain=yes and
 * only when a check the site selected fails under the site's configuration
 * too (reason: what failed then). 0 when not; *user_only set when the run
 * failed but the site's checks pass. */
static int drain_decision(const resihp_probe_config_t *eff,
                          const resihp_probe_report_t *rep,
                          const resihp_probe_config_t *site, char *reason,
                          size_t len, int *user_only) {
  *user_only = 0;
  if (rep->healthy || !resihp_plugin.drain_on_probe_failure)
    return 0;
  resihp_probe_report_t v;
  if (resihp__probe_site_verdict(eff, rep, site, &v, NULL) != 0)
    return 0; /* no verdict under the site's values: never drain on a guess */
  if (v.healthy) {
    *user_only = 1;
    return 0;
  }
  resihp__probe_failure_summary(&v, reason, len);
  return 1;
}

/* Root-only follow-ups of a probe run: draining the node when
 * drain_decision() says so, then the Prometheus metrics. Bounded; returns status bits
 * (1: metrics, 2: drain, 4: helper failed or killed) and, for the metrics,
 * the reason in why. The drain comes first and never waits behind the
 * metrics lock: a node that must leave the pool leaves it even when the
 * metrics cannot be written. */
static int root_actions(const resihp_probe_report_t *rep, const char *kind,
                        const char *slurm_conf, const char *drain_reason,
                        char *why, size_t whylen) {
  const char *metrics =
      resihp_settings_get_str(&resihp_plugin.settings, RESIHP_SETTING_PROBE_METRICS);
  int drain = drain_reason != NULL;
  why[0] = '\0';
  if (!*metrics && !drain)
    return 0;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return 4;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return 4;
  }
  if (pid == 0) {
    int w = resihp__helper_sanitize(p[1], parent, "resihp-root");
    /* Without root, writing a root-owned metrics file or talking to
     * slurmctld as SlurmUser fails below and is reported by the caller. */
    (void)resihp__helper_become_root(parent);
    int st = 0;
    if (drain && resihp__probe_drain(resihp_plugin.node, drain_reason,
                                     slurm_conf, DRAIN_TIMEOUT_MS) != 0)
      st |= 2;
    char err[400] = "";
    if (*metrics && resihp__probe_update_metrics(rep, kind, metrics, err,
                                                 sizeof(err)) != 0) {
      st |= 1;
      (void)!write(w, err, strnlen(err, sizeof(err)));
    }
    _exit(st);
  }
  close(p[1]);
  int st = 0;
  int rc = resihp__reap_bounded(pid, &st, ROOT_ACTIONS_TIMEOUT_MS);
  if (rc == RESIHP_ETIMEDOUT) {
    kill(pid, SIGKILL);
    resihp__reap_bounded(pid, NULL, 1000);
  }
  /* The helper is gone (or killed): whatever it wrote is in the pipe. */
  int fl = fcntl(p[0], F_GETFL);
  if (fl >= 0)
    fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
  ssize_t n = whylen > 1 ? read(p[0], why, whylen - 1) : 0;
  why[n > 0 ? n : 0] = '\0';
  close(p[0]);
  if (rc != 0 || !WIFEXITED(st))
    return 4;
  return WEXITSTATUS(st);
}

static void log_verdict(const resihp_probe_report_t *rep, const char *kind) {
  char per[300] = "";
  size_t off = 0;
  for (int i = 0; i < RESIHP_PROBE__COUNT && off < sizeof(per); i++) {
    if (!(rep->checks & (1u << i)))
      continue;
    int w = snprintf(per + off, sizeof(per) - off, "%s%s=%s/%.1fms",
                     off ? " " : "", resihp__probe_check_name(i),
                     resihp__probe_status_name(rep->r[i].status),
                     rep->r[i].usec / 1000.0);
    if (w > 0)
      off += (size_t)w;
  }
  if (rep->healthy)
    slurm_info("%s: %s probe passed on %s in %.1f ms (%s)", PLUGIN_NAME, kind,
               resihp_plugin.node, rep->usec / 1000.0, per);
  else
    slurm_error("%s: %s probe FAILED on %s in %.1f ms: %s (%s)", PLUGIN_NAME,
                kind, resihp_plugin.node, rep->usec / 1000.0,
                resihp_plugin.probe_summary, per);
}

/* The periodic helper: never returns. */
static void periodic_loop(const resihp_probe_config_t *c0,
                          const resihp_probe_config_t *site0, long interval_s,
                          pid_t stepd, const char *slurm_conf) {
  char path[sizeof(resihp_plugin.run_dir) + 16];
  results_path(path, sizeof(path));
  /* test-fail-periodic= forces failures in these runs only (on the node
   * test-fail-node= names, if any), so that a step can start healthy and
   * see its node go bad later */
  resihp_probe_config_t cp = *c0, cs = *site0;
  if (!resihp_plugin.test_fail_node[0] ||
      !strcmp(resihp_plugin.test_fail_node, resihp_plugin.node)) {
    cp.test_fail |= resihp_plugin.test_fail_periodic;
    cs.test_fail |= resihp_plugin.test_fail_periodic;
  }
  const resihp_probe_config_t *c = &cp;
  for (;;) {
    for (long s = 0; s < interval_s; s++) {
      sleep(1);
      if (getppid() != stepd)
        _exit(0);
    }
    resihp_probe_report_t rep;
    if (resihp__probe_run(c, &rep) != 0)
      continue;
    (void)resihp__probe_write_kv(&rep, "periodic", path, 1);
    char reason[400], why[400];
    int user_only;
    int drain = drain_decision(c, &rep, &cs, reason, sizeof(reason),
                               &user_only);
    (void)root_actions(&rep, "periodic", slurm_conf, drain ? reason : NULL,
                       why, sizeof(why));
  }
}

static void start_periodic(const resihp_probe_config_t *c,
                           const resihp_probe_config_t *site,
                           const char *slurm_conf) {
  long interval =
      resihp_settings_get(&resihp_plugin.settings, RESIHP_SETTING_PROBE_INTERVAL);
  if (interval <= 0)
    return;
  pid_t stepd = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    slurm_error("%s: cannot start the periodic probe: %s", PLUGIN_NAME,
                strerror(errno));
    return;
  }
  if (pid == 0) {
    resihp__helper_sanitize(-1, stepd, "resihp-periodic");
    periodic_loop(c, site, interval, stepd, slurm_conf);
    _exit(0);
  }
  resihp_plugin.periodic_pid = pid;
  slurm_info("%s: periodic probe every %ld s on %s (pid %d)", PLUGIN_NAME,
             interval, resihp_plugin.node, (int)pid);
}

int resihp__probe_step_start(spank_t sp) {
  resihp_probe_config_t c, site;
  if (resihp_plugin.probe_ran)
    return 0;
  node_name(resihp_plugin.node, sizeof(resihp_plugin.node));
  if (build_config(sp, &c, &site)) {
    /* Fail the tasks (task_init), not user_init: see the top comment. */
    resihp_plugin.probe_failed = 1;
    snprintf(resihp_plugin.probe_summary, sizeof(resihp_plugin.probe_summary),
             "invalid probe configuration (see the slurmd log)");
    return 0;
  }
  if (!c.checks)
    return 0; /* probes=none: no helper, no directory, nothing exported */
  resihp_plugin.probe_ran = 1;

  /* slurmstepd's own environment (from slurmd), never the job's. */
  char slurm_conf[256] = "";
  const char *sc = getenv("SLURM_CONF");
  if (sc && sc[0] == '/' && strnlen(sc, sizeof(slurm_conf)) < sizeof(slurm_conf))
    snprintf(slurm_conf, sizeof(slurm_conf), "%s", sc);

  pid_t cleaner = start_stale_cleanup();
  resihp_probe_report_t rep;
  int rc = resihp__probe_run(&c, &rep);
  if (rc) {
    finish_stale_cleanup(cleaner);
    snprintf(resihp_plugin.probe_summary, sizeof(resihp_plugin.probe_summary),
             "probe helper could not start (%s)", strerror(errno));
    resihp_plugin.probe_failed = 1;
    slurm_error("%s: %s", PLUGIN_NAME, resihp_plugin.probe_summary);
    return 0;
  }
  resihp__probe_failure_summary(&rep, resihp_plugin.probe_summary,
                                sizeof(resihp_plugin.probe_summary));
  resihp_plugin.probe_failed = !rep.healthy;
  log_verdict(&rep, "step-start");

  int made = make_run_dir(sp);
  finish_stale_cleanup(cleaner);
  if (made == 0) {
    char path[sizeof(resihp_plugin.run_dir) + 16];
    results_path(path, sizeof(path));
    if (resihp__probe_write_kv(&rep, "start", path, 0) != 0)
      slurm_error("%s: cannot write probe results %s: %s", PLUGIN_NAME, path,
                  strerror(errno));
    else if (spank_setenv(sp, "RESIHP_PROBE_RESULTS", path, 1) !=
             ESPANK_SUCCESS)
      slurm_error("%s: cannot export RESIHP_PROBE_RESULTS", PLUGIN_NAME);
  }
  spank_setenv(sp, "RESIHP_PROBE_STATUS", rep.healthy ? "pass" : "fail", 1);

  char reason[400], why[400];
  int user_only;
  int drain = drain_decision(&c, &rep, &site, reason, sizeof(reason),
                             &user_only);
  if (user_only) {
    slurm_info("%s: not draining %s: it passes the checks with the site's "
               "settings; the failure comes from this step's --resilient "
               "probe options or environment",
               PLUGIN_NAME, resihp_plugin.node);
    size_t l = strlen(resihp_plugin.probe_summary);
    snprintf(resihp_plugin.probe_summary + l,
             sizeof(resihp_plugin.probe_summary) - l,
             " (with the site's settings the node passes: check this step's "
             "--resilient probe options and TMPDIR)");
  }
  int st = root_actions(&rep, "start", slurm_conf, drain ? reason : NULL, why,
                        sizeof(why));
  if (st & 1)
    slurm_error("%s: probe metrics not updated: %s", PLUGIN_NAME, why);
  if (st & 2)
    slurm_error("%s: could not drain %s with scontrol", PLUGIN_NAME,
                resihp_plugin.node);
  else if (drain && st < 4)
    slurm_error("%s: drained %s (drain=yes): %s", PLUGIN_NAME,
                resihp_plugin.node, reason);

  if (rep.healthy)
    start_periodic(&c, &site, slurm_conf);
  return 0;
}

int resihp__probe_task_init(spank_t sp) {
  if (!resihp_plugin.probe_failed)
    return 0;
  /* A spare's check step runs its agent whatever the verdict: the agent
   * reports a failed probe to the coordinator (RESIHP_PROBE_STATUS=fail)
   * and exits 1, which is more than a task that never starts can say. */
  if (resihp_settings_get(&resihp_plugin.settings, RESIHP_SETTING_ROLE) ==
      1 /* spare */)
    return 0;
  /* This runs in the task just before exec: its stderr is the user's. */
  dprintf(STDERR_FILENO,
          "%s: node %s failed its health probe, not starting the task: %s\n",
          PLUGIN_NAME, resihp_plugin.node, resihp_plugin.probe_summary);
  return -1;
}

static void stop_periodic(void) {
  pid_t pid = resihp_plugin.periodic_pid;
  if (pid <= 0)
    return;
  resihp_plugin.periodic_pid = -1;
  kill(pid, SIGKILL);
  /* slurmstepd may have reaped it already (it waits for any child). */
  resihp__reap_bounded(pid, NULL, 1000);
}

void resihp__probe_task_exit(spank_t sp) {
  if (++resihp_plugin.tasks_exited >= resihp_plugin.local_tasks)
    stop_periodic();
}

/* slurm_spank_exit runs as root while the directory belongs to the user,
 * who may have swapped it for a symlink or another directory: remove it
 * only through descriptors opened without following links, only when it
 * still belongs to the job's user, and only our names inside it. */
void resihp__probe_step_end(spank_t sp) {
  stop_periodic();
  if (resihp_plugin.run_dir[0]) {
    uid_t uid = 0;
    spank_get_item(sp, S_JOB_UID, &uid);
    const char *name = strrchr(resihp_plugin.run_dir, '/');
    int basefd = open(run_base(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (basefd >= 0 && name)
      (void)resihp__rundir_remove(basefd, name + 1, uid, 0);
    if (basefd >= 0)
      close(basefd);
    resihp_plugin.run_dir[0] = '\0';
  }
  if (resihp_plugin.run_dir_fd >= 0) {
    close(resihp_plugin.run_dir_fd);
    resihp_plugin.run_dir_fd = -1;
  }
}
