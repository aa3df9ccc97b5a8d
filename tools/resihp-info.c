/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-info: version, build features and the effective value of every
 * RESIHP_* setting in this environment (with where it came from), so that a
 * user can see exactly what a rank started here would run with. */
#include "config.h"

#include <resihp.h>

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f, "usage: resihp-info [--settings-only] [--help]\n"
             "Print resihp's version, build features and effective settings.\n");
}

int main(int argc, char **argv) {
  int settings_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--settings-only"))
      settings_only = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "resihp-info: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  resihp_settings_t s;
  resihp_settings_init(&s);
  char err[512];
  int rc = resihp_settings_load_env(&s, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "resihp-info: invalid environment: %s\n", err);
    return 1;
  }
  if (!settings_only) {
    printf("resihp %s\n", resihp_version());
    printf("features: %s\n", resihp_build_features());
    printf("slurm (built against): %s\n", RESIHP_SLURM_VERSION);
    printf("\n");
  }
  static const char *const src[] = {"default", "env", "option"};
  printf("%-16s %-26s %-12s %-8s %s\n", "KEY", "ENVIRONMENT", "VALUE", "SOURCE",
         "MEANING");
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++) {
    const resihp_setting_desc_t *d = resihp_setting_desc((resihp_setting_id_t)i);
    char v[RESIHP_SETTING_STR_MAX];
    resihp_settings_format(&s, (resihp_setting_id_t)i, v, sizeof(v));
    printf("%-16s %-26s %-12s %-8s %s\n", d->key, d->env, v[0] ? v : "\"\"",
           src[s.source[i]], d->help);
  }
  return 0;
}
