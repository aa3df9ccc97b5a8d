# SPDX-License-Identifier: BSD-3-Clause
# Planner (issue #6): hybrid-parallel layout, layer partition, microbatch
# quotas and escalation, plus the tools built on it (resihp-plan,
# resihp-sim), their man pages, examples and tests.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/planner/planner-int.h \
	libresihp/planner/cost.c \
	libresihp/planner/partition.c \
	libresihp/planner/quota.c \
	libresihp/planner/plan.c \
	libresihp/planner/escalate.c \
	libresihp/planner/assign.c
libresihp_libresihp_internal_la_LIBADD += -lm
resihpinclude_HEADERS += libresihp/include/resihp/planner.h

bin_PROGRAMS += tools/resihp-plan
tools_resihp_plan_SOURCES = tools/resihp-plan.c
tools_resihp_plan_LDADD = libresihp/libresihp.la -lm

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_planner
tests_unit_test_planner_SOURCES = tests/unit/test_planner.c
tests_unit_test_planner_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_planner_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_planner
endif

dist_man_MANS += man/resihp-plan.1
EXTRA_DIST += contrib/plans/small-slow.plan contrib/plans/mixed-64.plan \
	contrib/plans/large-4096.plan

bin_PROGRAMS += tools/resihp-sim
tools_resihp_sim_SOURCES = tools/resihp-sim.c
tools_resihp_sim_LDADD = libresihp/libresihp.la -lm

dist_check_SCRIPTS += tests/tools/plan-sim.test
TESTS += tests/tools/plan-sim.test
dist_man_MANS += man/resihp-sim.1
