/* SPDX-License-Identifier: BSD-3-Clause */
/* srun side (S_CTX_LOCAL). Options were validated in their callbacks, so an
 * invalid value has already failed the srun; here we only tell the user, at
 * -v, what the step will run with. */
#include "config.h"

#include "plugin.h"

#include <stdio.h>
#include <string.h>

int resihp__srun_post_opt(spank_t sp) {
  char line[1024];
  size_t off = 0;
  for (int i = 0; i < RESIHP_SETTING__COUNT && off < sizeof(line); i++) {
    if (resihp_plugin.settings.source[i] == RESIHP_SOURCE_DEFAULT)
      continue;
    char v[RESIHP_SETTING_STR_MAX];
    resihp_settings_format(&resihp_plugin.settings, (resihp_setting_id_t)i, v,
                           sizeof(v));
    int n = snprintf(line + off, sizeof(line) - off, " %s=%s",
                     resihp_setting_desc((resihp_setting_id_t)i)->key, v);
    if (n < 0)
      break;
    off += (size_t)n;
  }
  line[sizeof(line) - 1] = '\0';
  slurm_verbose("%s: resilient mode on%s", PLUGIN_NAME,
                off ? line : " (defaults)");
  return 0;
}
