/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp SPANK plugin: entry points only. Each hook dispatches on
 * spank_context() to the module for that side (srun.c, stepd.c); options and
 * plugstack arguments live in options.c. */
#include "config.h"

#include "plugin.h"

#include <string.h>

SPANK_PLUGIN(resihp, 1);

struct resihp_plugin resihp_plugin = {
    .enabled = 0,
    .drain_on_probe_failure = 0,
    .test_delay_check = -1,
    .periodic_pid = -1,
    .run_dir_fd = -1,
};

int slurm_spank_init(spank_t sp, int argc, char **argv) {
  spank_context_t ctx = spank_context();
  if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
    return 0;
  resihp_settings_init(&resihp_plugin.admin);
  if (resihp__plugstack_parse(argc, argv) < 0)
    return -1;
  resihp_plugin.settings = resihp_plugin.admin;
  return resihp__options_register(sp);
}

int slurm_spank_init_post_opt(spank_t sp, int argc, char **argv) {
  if (!resihp_plugin.enabled)
    return 0;
  switch (spank_context()) {
  case S_CTX_LOCAL:
    return resihp__srun_post_opt(sp);
  default:
    return 0;
  }
}

int slurm_spank_user_init(spank_t sp, int argc, char **argv) {
  if (!resihp_plugin.enabled || spank_context() != S_CTX_REMOTE)
    return 0;
  return resihp__stepd_user_init(sp);
}

int slurm_spank_task_init(spank_t sp, int argc, char **argv) {
  if (!resihp_plugin.enabled || spank_context() != S_CTX_REMOTE)
    return 0;
  return resihp__probe_task_init(sp);
}

int slurm_spank_task_exit(spank_t sp, int argc, char **argv) {
  if (resihp_plugin.enabled && spank_context() == S_CTX_REMOTE)
    resihp__probe_task_exit(sp);
  return 0;
}

int slurm_spank_exit(spank_t sp, int argc, char **argv) {
  if (resihp_plugin.enabled && spank_context() == S_CTX_REMOTE)
    resihp__probe_step_end(sp);
  return 0;
}
