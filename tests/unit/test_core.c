/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of libresihp's core: error codes, settings registry, logging. */
#include "config.h"
#include "suite_main.h"

#include <resihp.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(error_names_and_messages) {
  ck_assert_str_eq(resihp_strerror(RESIHP_OK), "success");
  ck_assert_str_eq(resihp_strerror(RESIHP_ETIMEDOUT), "timed out");
  ck_assert_str_eq(resihp_err_name(RESIHP_EPEER), "RESIHP_EPEER");
  ck_assert_str_eq(resihp_strerror(-9999), "unknown error");
  ck_assert_str_eq(resihp_err_name(12345), "RESIHP_UNKNOWN");
  /* Codes are distinct and negative. */
#define XX(name, value, msg) ck_assert_int_lt(RESIHP_##name, 0);
  RESIHP_ERROR_MAP(XX)
#undef XX
}
END_TEST

START_TEST(settings_defaults) {
  resihp_settings_t s;
  resihp_settings_init(&s);
  ck_assert_int_eq(resihp_settings_get(&s, RESIHP_SETTING_DETECT_TIMEOUT), 1000);
  ck_assert_int_eq(resihp_settings_get(&s, RESIHP_SETTING_DETERMINISTIC), 0);
  ck_assert_str_eq(resihp_settings_get_str(&s, RESIHP_SETTING_PROBES), "all");
  char buf[64];
  ck_assert_str_eq(resihp_settings_format(&s, RESIHP_SETTING_TRANSPORT, buf,
                                          sizeof(buf)),
                   "auto");
  ck_assert_str_eq(
      resihp_settings_format(&s, RESIHP_SETTING_DEBUG, buf, sizeof(buf)),
      "warn");
  ck_assert_int_eq(resihp_setting_lookup("detect-timeout"),
                   RESIHP_SETTING_DETECT_TIMEOUT);
  ck_assert_int_eq(resihp_setting_lookup("RESIHP_HEARTBEAT_MS"),
                   RESIHP_SETTING_HEARTBEAT);
  ck_assert_int_eq(resihp_setting_lookup("nope"), -1);
  ck_assert_int_eq(resihp_setting_lookup(NULL), -1);
}
END_TEST

START_TEST(settings_parse_good) {
  resihp_settings_t s;
  resihp_settings_init(&s);
  char err[256] = "";
  ck_assert_int_eq(resihp_settings_parse_opts(
                       &s,
                       "detect-timeout=2s,heartbeat=50ms,deterministic,"
                       "transport=tcp,chunk-bytes=1M,probes=hwloc:mem,role=spare",
                       err, sizeof(err)),
                   0);
  ck_assert_int_eq(s.value[RESIHP_SETTING_DETECT_TIMEOUT], 2000);
  ck_assert_int_eq(s.value[RESIHP_SETTING_HEARTBEAT], 50);
  ck_assert_int_eq(s.value[RESIHP_SETTING_DETERMINISTIC], 1);
  ck_assert_int_eq(s.value[RESIHP_SETTING_CHUNK_BYTES], 1 << 20);
  ck_assert_str_eq(s.str[RESIHP_SETTING_PROBES], "hwloc:mem");
  ck_assert_int_eq(s.source[RESIHP_SETTING_HEARTBEAT], RESIHP_SOURCE_OPTION);
  ck_assert_int_eq(s.source[RESIHP_SETTING_REPLICA], RESIHP_SOURCE_DEFAULT);
  char buf[64];
  ck_assert_str_eq(
      resihp_settings_format(&s, RESIHP_SETTING_ROLE, buf, sizeof(buf)),
      "spare");
  /* NULL and "" are valid and change nothing. */
  resihp_settings_t before = s;
  ck_assert_int_eq(resihp_settings_parse_opts(&s, NULL, err, sizeof(err)), 0);
  ck_assert_int_eq(resihp_settings_parse_opts(&s, "", err, sizeof(err)), 0);
  ck_assert_mem_eq(&s, &before, sizeof(s));
}
END_TEST

/* Each bad string must fail, say something, and leave s unchanged. */
static const struct {
  const char *opts;
  const char *needle; /* expected in the message */
} bad[] = {
    {"detect-timeout=abc", "not a duration"},
    {"detect-timeout=5", "out of range"},
    {"detect-timeout=99999999999999999999", "not a duration"},
    {"detect-timeout=-5", "out of range"},
    {"detect-timeout=10q", "not a duration"},
    {"detect-timeout", "needs a value"},
    {"heartbeat=", "not a duration"},
    {"bogus=1", "unknown setting 'bogus'"},
    {"deterministic=maybe", "not a boolean"},
    {"transport=infiniband", "choose one of auto|tcp|shm|nccl"},
    {"chunk-bytes=1T", "not an integer"},
    {"chunk-bytes=1", "out of range"},
    {"heartbeat=10,heartbeat=20", "given twice"},
    {"heartbeat=10,,deterministic", "empty item"},
    {",heartbeat=10", "empty item"},
    {"heartbeat=10,", "empty item"},
    {"coordinator=a b", "forbidden character"},
    {"coordinator=x\x01y", "forbidden character"},
    {"=5", "unknown setting ''"},
    {"heartbeat= 10", "not a duration"},
    {"debug=9", "choose one of"},
};

START_TEST(settings_parse_bad) {
  resihp_settings_t s, before;
  resihp_settings_init(&s);
  s.value[RESIHP_SETTING_HEARTBEAT] = 77;
  before = s;
  char err[512] = "";
  int rc = resihp_settings_parse_opts(&s, bad[_i].opts, err, sizeof(err));
  ck_assert_msg(rc < 0, "'%s' accepted", bad[_i].opts);
  ck_assert_msg(strstr(err, bad[_i].needle) != NULL,
                "'%s': message '%s' lacks '%s'", bad[_i].opts, err,
                bad[_i].needle);
  ck_assert_mem_eq(&s, &before, sizeof(s));
}
END_TEST

START_TEST(settings_all_or_nothing) {
  resihp_settings_t s;
  resihp_settings_init(&s);
  char err[512];
  ck_assert_int_lt(
      resihp_settings_parse_opts(&s, "heartbeat=20,detect-timeout=zzz", err,
                                 sizeof(err)),
      0);
  ck_assert_int_eq(s.value[RESIHP_SETTING_HEARTBEAT], 100);
}
END_TEST

START_TEST(settings_bounded_lengths) {
  resihp_settings_t s;
  resihp_settings_init(&s);
  char err[512];
  char *huge = malloc(RESIHP_OPTS_MAX + 10);
  memset(huge, 'a', RESIHP_OPTS_MAX + 9);
  huge[RESIHP_OPTS_MAX + 9] = '\0';
  ck_assert_int_eq(resihp_settings_parse_opts(&s, huge, err, sizeof(err)),
                   RESIHP_ERANGE);
  char longval[RESIHP_SETTING_STR_MAX + 20] = "coordinator=";
  memset(longval + 12, 'h', RESIHP_SETTING_STR_MAX);
  longval[12 + RESIHP_SETTING_STR_MAX] = '\0';
  ck_assert_int_eq(resihp_settings_parse_opts(&s, longval, err, sizeof(err)),
                   RESIHP_ERANGE);
  ck_assert_ptr_nonnull(strstr(err, "longer than"));
  free(huge);
  /* A NULL err buffer is allowed. */
  ck_assert_int_lt(resihp_settings_parse_opts(&s, "bogus=1", NULL, 0), 0);
}
END_TEST

START_TEST(settings_from_env) {
  setenv("RESIHP_DETECT_TIMEOUT_MS", "250", 1);
  setenv("RESIHP_TRANSPORT", "shm", 1);
  resihp_settings_t s;
  resihp_settings_init(&s);
  char err[512];
  ck_assert_int_eq(resihp_settings_load_env(&s, err, sizeof(err)), 0);
  ck_assert_int_eq(s.value[RESIHP_SETTING_DETECT_TIMEOUT], 250);
  ck_assert_int_eq(s.source[RESIHP_SETTING_DETECT_TIMEOUT], RESIHP_SOURCE_ENV);
  setenv("RESIHP_HEARTBEAT_MS", "fast", 1);
  resihp_settings_init(&s);
  ck_assert_int_lt(resihp_settings_load_env(&s, err, sizeof(err)), 0);
  ck_assert_ptr_nonnull(strstr(err, "RESIHP_HEARTBEAT_MS"));
  ck_assert_int_eq(s.value[RESIHP_SETTING_DETECT_TIMEOUT], 1000);
  /* The process-wide copy keeps going with defaults for bad variables. */
  const resihp_settings_t *g = resihp_settings_global();
  ck_assert_int_eq(g->value[RESIHP_SETTING_DETECT_TIMEOUT], 250);
  ck_assert_int_eq(g->value[RESIHP_SETTING_HEARTBEAT], 100);
}
END_TEST

static char last_msg[1024];
static int calls;
static void capture(resihp_log_level_t l, const char *sub, const char *msg,
                    void *ud) {
  (void)l;
  snprintf(last_msg, sizeof(last_msg), "%s|%s|%s", sub, msg, (char *)ud);
  calls++;
}

START_TEST(log_levels_and_handler) {
  resihp_log_set_handler(capture, "ud");
  resihp_log_set_level(RESIHP_LOG_INFO);
  resihp_log(RESIHP_LOG_DEBUG, "test", "hidden %d", 1);
  ck_assert_int_eq(calls, 0);
  resihp_log(RESIHP_LOG_INFO, "test", "shown %d", 2);
  ck_assert_int_eq(calls, 1);
  ck_assert_str_eq(last_msg, "test|shown 2|ud");
  ck_assert(resihp_log_enabled(RESIHP_LOG_ERROR));
  ck_assert(!resihp_log_enabled(RESIHP_LOG_TRACE));
  ck_assert_str_eq(resihp_log_level_name(RESIHP_LOG_WARN), "warn");
  resihp_log_set_handler(NULL, NULL);
}
END_TEST

START_TEST(log_level_from_env) {
  setenv("RESIHP_DEBUG", "debug", 1);
  ck_assert_int_eq(resihp_log_get_level(), RESIHP_LOG_DEBUG);
}
END_TEST

START_TEST(version_and_features) {
  ck_assert_str_eq(resihp_version(), PACKAGE_VERSION);
  ck_assert_ptr_nonnull(strstr(resihp_build_features(), "tcp"));
}
END_TEST

static Suite *core_suite(void) {
  Suite *s = suite_create("core");
  TCase *t = tcase_create("core");
  tcase_set_timeout(t, 10);
  tcase_add_test(t, error_names_and_messages);
  tcase_add_test(t, settings_defaults);
  tcase_add_test(t, settings_parse_good);
  tcase_add_loop_test(t, settings_parse_bad, 0, sizeof(bad) / sizeof(bad[0]));
  tcase_add_test(t, settings_all_or_nothing);
  tcase_add_test(t, settings_bounded_lengths);
  tcase_add_test(t, settings_from_env);
  tcase_add_test(t, log_levels_and_handler);
  tcase_add_test(t, log_level_from_env);
  tcase_add_test(t, version_and_features);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  return run_suite(core_suite());
}
