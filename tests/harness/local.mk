# SPDX-License-Identifier: BSD-3-Clause
# throttle: slows processes from outside (SIGSTOP/SIGCONT duty cycle or
# cgroup cpu.max) for the fail-slow tests and benchmarks; built for
# `make check`, not installed. Its test asserts events, not speed.
check_PROGRAMS += tests/harness/throttle
tests_harness_throttle_SOURCES = tests/harness/throttle.c
dist_check_SCRIPTS += tests/tools/throttle.test
TESTS += tests/tools/throttle.test
