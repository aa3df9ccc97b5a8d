/* SPDX-License-Identifier: BSD-3-Clause */
/* slurmstepd side (S_CTX_REMOTE): hand the validated settings to the tasks
 * through their environment. Only what the user's options or the site's
 * plugstack.conf set is exported, so a rank's own RESIHP_* variables still
 * apply to everything else. Nothing here reads the job's environment: this
 * code runs as root. */
#include "config.h"

#include "plugin.h"

#include <stdio.h>

static int export(spank_t sp, const char *name, const char *value) {
  spank_err_t rc = spank_setenv(sp, name, value, 1);
  if (rc == ESPANK_SUCCESS)
    return 0;
  slurm_error("%s: cannot set %s for the tasks: %s", PLUGIN_NAME, name,
              spank_strerror(rc));
  return -1;
}

int resihp__stepd_user_init(spank_t sp) {
  if (export(sp, "RESIHP_ENABLED", "1") ||
      export(sp, "RESIHP_PLUGIN_VERSION", PACKAGE_VERSION))
    return -1;
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++) {
    if (resihp_plugin.settings.source[i] == RESIHP_SOURCE_DEFAULT)
      continue;
    char v[RESIHP_SETTING_STR_MAX];
    resihp_settings_format(&resihp_plugin.settings, (resihp_setting_id_t)i, v,
                           sizeof(v));
    if (export(sp, resihp_setting_desc((resihp_setting_id_t)i)->env, v))
      return -1;
  }
  return resihp__probe_step_start(sp);
}
