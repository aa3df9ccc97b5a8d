/* SPDX-License-Identifier: BSD-3-Clause */
/* State and internal interface of the resihp SPANK plugin.
 *
 * All state lives in one static struct (plugin.c). Nothing of it is active
 * unless one of the --resilient options was given: every hook checks
 * `resihp_plugin.enabled` first and returns 0 otherwise. */
#ifndef RESIHP_SPANK_PLUGIN_H
#define RESIHP_SPANK_PLUGIN_H

#include <slurm/spank.h>

/* Every SPANK call, item, callback and option field used here is the same
 * in the spank.h of Slurm 22.05 to 25.11 (contrib/dev/check-slurm-headers.sh;
 * resihp(8), SLURM VERSIONS); older releases were never checked. */
#if !defined(SLURM_VERSION_NUMBER) || \
    SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(22, 5, 0)
#error "resihp's SPANK plugin needs Slurm 22.05 or newer (resihp(8))"
#endif

#include <resihp/settings.h>

#include <stdint.h>
#include <sys/types.h>

#define PLUGIN_NAME "resihp"

struct resihp_plugin {
  int enabled;                  /* any --resilient* option seen */
  int drain_on_probe_failure;   /* plugstack drain=yes */
  resihp_settings_t admin;      /* defaults + plugstack.conf arguments */
  resihp_settings_t settings;   /* admin + the user's options */
  unsigned char user_set[RESIHP_SETTING__COUNT]; /* set by the user's options */

  /* Admin-only test hook (plugstack test-fail=, test-delay=): forces a
   * check to fail or to be slow. Never taken from a job's environment. */
  unsigned test_fail;
  int test_delay_check; /* -1: none */
  long test_delay_ms;
  unsigned test_fail_periodic; /* test-fail-periodic=: periodic runs only */
  char test_fail_node[64];     /* test-fail-node=: only this node ("" all) */

  /* slurmstepd side, per step on this node. */
  int probe_ran;               /* the step-start probe ran */
  int probe_failed;            /* ... and found this node unhealthy */
  char probe_summary[512];     /* what failed, for task_init's message */
  char node[128];              /* this node's Slurm name */
  char run_dir[320];           /* per-step directory (results file) */
  int run_dir_fd;              /* its lock, held while the step runs; -1 */
  pid_t periodic_pid;          /* periodic probe helper, -1: none */
  uint32_t local_tasks;
  uint32_t tasks_exited;
};

extern struct resihp_plugin resihp_plugin;

/* options.c: plugstack arguments and the srun/sbatch/salloc options. */
int resihp__plugstack_parse(int argc, char **argv);
int resihp__options_register(spank_t sp);

/* srun.c (local context) and stepd.c (remote context). */
int resihp__srun_post_opt(spank_t sp);
int resihp__stepd_user_init(spank_t sp);

/* probe.c (remote context): step-start probe, its verdict in each task,
 * the periodic probe helper and clean-up. */
int resihp__probe_step_start(spank_t sp);
int resihp__probe_task_init(spank_t sp);
void resihp__probe_task_exit(spank_t sp);
void resihp__probe_step_end(spank_t sp);

#endif
