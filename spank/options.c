/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin's options (--resilient[=OPTS] and friends) and its strict
 * plugstack.conf arguments. Every value goes through libresihp's settings
 * registry, so srun rejects exactly what the library would reject. */
#include "config.h"

#include "plugin.h"

#include "probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Settings that name files the privileged probe helper writes as root:
 * only the site may choose them. */
static int admin_only(int id) {
  return id == RESIHP_SETTING_PROBE_METRICS ||
         id == RESIHP_SETTING_PROBE_RUN_DIR;
}

/* test-delay=CHECK:MS */
static int parse_test_delay(const char *value) {
  char check[32];
  const char *colon = strchr(value, ':');
  size_t l = colon ? (size_t)(colon - value) : 0;
  if (!colon || l == 0 || l >= sizeof(check))
    return -1;
  memcpy(check, value, l);
  check[l] = '\0';
  int k = resihp__probe_check_lookup(check);
  char *end;
  errno = 0;
  long ms = strtol(colon + 1, &end, 10);
  if (k < 0 || end == colon + 1 || *end || errno || ms < 1 || ms > 600000)
    return -1;
  resihp_plugin.test_delay_check = k;
  resihp_plugin.test_delay_ms = ms;
  return 0;
}

static int set_or_complain(resihp_settings_t *s, const char *what,
                           const char *key, const char *value) {
  char err[512];
  if (resihp_settings_set(s, key, value, RESIHP_SOURCE_OPTION, err,
                          sizeof(err)) == 0)
    return 0;
  slurm_error("%s: %s: %s", PLUGIN_NAME, what, err);
  return -1;
}

int resihp__plugstack_parse(int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
      slurm_error("%s: plugstack.conf: argument '%.80s' is not key=value; "
                  "see resihp(8) for valid arguments",
                  PLUGIN_NAME, arg);
      return -1;
    }
    char key[64];
    size_t kl = (size_t)(eq - arg);
    if (kl >= sizeof(key)) {
      slurm_error("%s: plugstack.conf: key too long in '%.80s'", PLUGIN_NAME,
                  arg);
      return -1;
    }
    memcpy(key, arg, kl);
    key[kl] = '\0';
    const char *value = eq + 1;
    if (!strcmp(key, "drain")) {
      if (!strcmp(value, "yes") || !strcmp(value, "no")) {
        resihp_plugin.drain_on_probe_failure = !strcmp(value, "yes");
        continue;
      }
      slurm_error("%s: plugstack.conf: drain=%.40s: use drain=yes or drain=no",
                  PLUGIN_NAME, value);
      return -1;
    }
    if (strnlen(value, RESIHP_SETTING_STR_MAX) >= RESIHP_SETTING_STR_MAX) {
      slurm_error("%s: plugstack.conf: value of %s longer than %d characters",
                  PLUGIN_NAME, key, RESIHP_SETTING_STR_MAX - 1);
      return -1;
    }
    /* Test hook for the site's own validation of the plugin: forced
     * failures and delays of named checks. Admin-only by construction. */
    if (!strcmp(key, "test-fail")) {
      char err[256];
      if (resihp__probe_parse_list(value, &resihp_plugin.test_fail, err,
                                   sizeof(err))) {
        slurm_error("%s: plugstack.conf: test-fail=%.40s: %s", PLUGIN_NAME,
                    value, err);
        return -1;
      }
      continue;
    }
    if (!strcmp(key, "test-fail-periodic")) {
      char err[256];
      if (resihp__probe_parse_list(value, &resihp_plugin.test_fail_periodic,
                                   err, sizeof(err))) {
        slurm_error("%s: plugstack.conf: test-fail-periodic=%.40s: %s",
                    PLUGIN_NAME, value, err);
        return -1;
      }
      continue;
    }
    if (!strcmp(key, "test-fail-node")) {
      if (!*value || strlen(value) >= sizeof(resihp_plugin.test_fail_node) ||
          strpbrk(value, " \t,=")) {
        slurm_error("%s: plugstack.conf: test-fail-node=%.40s: use one Slurm "
                    "node name",
                    PLUGIN_NAME, value);
        return -1;
      }
      snprintf(resihp_plugin.test_fail_node,
               sizeof(resihp_plugin.test_fail_node), "%s", value);
      continue;
    }
    if (!strcmp(key, "test-delay")) {
      if (parse_test_delay(value)) {
        slurm_error("%s: plugstack.conf: test-delay=%.40s: use "
                    "test-delay=CHECK:MS (MS 1..600000)",
                    PLUGIN_NAME, value);
        return -1;
      }
      continue;
    }
    /* Any setting key sets the site default that users' options override. */
    if (resihp_setting_lookup(key) < 0 || strncmp(key, "RESIHP_", 7) == 0) {
      slurm_error("%s: plugstack.conf: unknown argument '%s'; valid are "
                  "drain=yes|no, test-fail=, test-fail-periodic=, "
                  "test-fail-node=, test-delay= and the setting "
                  "keys of resihp(8) "
                  "(e.g. detect-timeout=1000)",
                  PLUGIN_NAME, key);
      return -1;
    }
    if (set_or_complain(&resihp_plugin.admin, "plugstack.conf", key, value))
      return -1;
    if (!strcmp(key, "probes")) {
      char err[256];
      unsigned probes;
      if (resihp__probe_parse_list(value, &probes, err, sizeof(err))) {
        slurm_error("%s: plugstack.conf: probes: %s", PLUGIN_NAME, err);
        return -1;
      }
    }
  }
  return 0;
}

/* --resilient[=OPTS]: enable; OPTS are key=value settings. */
static int opt_resilient(int val, const char *optarg, int remote) {
  resihp_settings_t tmp = resihp_plugin.settings;
  char err[512];
  /* The remote side may see this callback twice; parsing into a copy of the
   * current settings and then replacing them is idempotent. */
  if (resihp_settings_parse_opts(&tmp, optarg, err, sizeof(err))) {
    slurm_error("%s: invalid --resilient option: %s (see 'man resihp')",
                PLUGIN_NAME, err);
    return -1;
  }
  /* Which keys did the user write? Parse alone into defaults to know. */
  resihp_settings_t mine;
  resihp_settings_init(&mine);
  (void)resihp_settings_parse_opts(&mine, optarg, NULL, 0);
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++)
    if (mine.source[i] == RESIHP_SOURCE_OPTION && admin_only(i)) {
      slurm_error("%s: invalid --resilient option: %s can only be set by the "
                  "administrator in plugstack.conf (see 'man resihp')",
                  PLUGIN_NAME, resihp_setting_desc((resihp_setting_id_t)i)->key);
      return -1;
    }
  unsigned probes;
  if (resihp__probe_parse_list(
          resihp_settings_get_str(&tmp, RESIHP_SETTING_PROBES), &probes, err,
          sizeof(err))) {
    slurm_error("%s: invalid --resilient option: probes: %s (see 'man "
                "resihp')",
                PLUGIN_NAME, err);
    return -1;
  }
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++)
    if (tmp.source[i] == RESIHP_SOURCE_OPTION &&
        resihp_plugin.admin.source[i] != RESIHP_SOURCE_OPTION)
      resihp_plugin.user_set[i] = 1;
  resihp_plugin.settings = tmp;
  resihp_plugin.enabled = 1;
  return 0;
}

/* Friends: --resilient-KEY=VALUE for the settings resihp-run passes per step.
 * Each one implies --resilient. */
static const struct {
  const char *name;
  resihp_setting_id_t id;
  const char *arginfo;
  const char *usage;
} friends[] = {
    {"resilient-replica", RESIHP_SETTING_REPLICA, "N",
     "data-parallel replica index of this step (implies --resilient)"},
    {"resilient-role", RESIHP_SETTING_ROLE, "replica|spare",
     "what this step is for (implies --resilient)"},
    {"resilient-coordinator", RESIHP_SETTING_COORDINATOR, "HOST:PORT",
     "resihp coordinator of the job (implies --resilient)"},
    {"resilient-probes", RESIHP_SETTING_PROBES, "LIST",
     "health checks: all, none or check:check:... (implies --resilient)"},
};

static int opt_friend(int val, const char *optarg, int remote) {
  if ((unsigned)val >= sizeof(friends) / sizeof(friends[0]))
    return -1;
  char what[64];
  snprintf(what, sizeof(what), "--%s", friends[val].name);
  if (!optarg || !*optarg) {
    slurm_error("%s: %s needs a value (%s)", PLUGIN_NAME, what,
                friends[val].arginfo);
    return -1;
  }
  const resihp_setting_desc_t *d = resihp_setting_desc(friends[val].id);
  resihp_settings_t tmp = resihp_plugin.settings;
  if (set_or_complain(&tmp, what, d->key, optarg))
    return -1;
  if (friends[val].id == RESIHP_SETTING_PROBES) {
    char err[256];
    unsigned probes;
    if (resihp__probe_parse_list(optarg, &probes, err, sizeof(err))) {
      slurm_error("%s: %s: %s", PLUGIN_NAME, what, err);
      return -1;
    }
  }
  resihp_plugin.settings = tmp;
  resihp_plugin.user_set[friends[val].id] = 1;
  resihp_plugin.enabled = 1;
  return 0;
}

int resihp__options_register(spank_t sp) {
  struct spank_option main_opt = {
      .name = "resilient",
      .arginfo = "[OPTS]",
      .usage = "run this step under resihp fault tolerance; OPTS is "
               "key=value[,key=value...] (see 'man resihp')",
      .has_arg = 2,
      .val = 0,
      .cb = opt_resilient,
  };
  spank_err_t rc = spank_option_register(sp, &main_opt);
  if (rc != ESPANK_SUCCESS) {
    slurm_error("%s: cannot register --resilient: %s", PLUGIN_NAME,
                spank_strerror(rc));
    return -1;
  }
  for (size_t i = 0; i < sizeof(friends) / sizeof(friends[0]); i++) {
    struct spank_option o = {
        .name = (char *)friends[i].name,
        .arginfo = (char *)friends[i].arginfo,
        .usage = (char *)friends[i].usage,
        .has_arg = 1,
        .val = (int)i,
        .cb = opt_friend,
    };
    rc = spank_option_register(sp, &o);
    if (rc != ESPANK_SUCCESS) {
      slurm_error("%s: cannot register --%s: %s", PLUGIN_NAME, friends[i].name,
                  spank_strerror(rc));
      return -1;
    }
  }
  return 0;
}
