# SPDX-License-Identifier: BSD-3-Clause
# Command-line tools. They link the installed library (public API only).
bin_PROGRAMS += tools/resihp-info
tools_resihp_info_SOURCES = tools/resihp-info.c
tools_resihp_info_LDADD = libresihp/libresihp.la
# The PyTorch benchmark runs from the source tree (the examples, the lab
# cluster harness, build/): shipped, not installed.
EXTRA_DIST += tools/resihp-bench-torch.sh
# The control plane at scale: the real coordinator with N simulated
# replicas on loopback (it drives the coordinator's internal API, so it
# links the internal library, as resihp-run does).
bin_PROGRAMS += tools/resihp-bench-control
tools_resihp_bench_control_SOURCES = tools/resihp-bench-control.c
tools_resihp_bench_control_LDADD = libresihp/libresihp-internal.la
dist_man_MANS += man/resihp-bench-control.1
dist_check_SCRIPTS += tests/tools/bench-control.test
TESTS += tests/tools/bench-control.test
