/* State and internal interface of the resihp SPANK plugin.
 *
 * All state lives in one static struct (plugin.c). Nothing of it is active
 * unless one of the --resilient options was given: every hook checks
 * `resihp_plugin.enabled` first and returns 0 otherwise. */
#ifndef RESIHP_SPANK_PLUGIN_H
#define RESIHP_SPANK_PLUGIN_H

#include <slurm/spank.h>

#include <resihp/settings.h>

#define PLUGIN_NAME "resihp"

struct resihp_plugin {
  int enabled;                  /* any --resilient* option seen */
  int drain_on_probe_failure;   /* plugstack drain=yes */
  resihp_settings_t admin;      /* defaults + plugstack.conf arguments */
  resihp_settings_t settings;   /* admin + the user's options */
  unsigned char user_set[RESIHP_SETTING__COUNT]; /* set by the user's options */
};

extern struct resihp_plugin resihp_plugin;

/* options.c: plugstack arguments and the srun/sbatch/salloc options. */
int resihp__plugstack_parse(int argc, char **argv);
int resihp__options_register(spank_t sp);

/* srun.c (local context) and stepd.c (remote context). */
int resihp__srun_post_opt(spank_t sp);
int resihp__stepd_user_init(spank_t sp);

#endif
