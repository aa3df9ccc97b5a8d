# SPDX-License-Identifier: BSD-3-Clause
# The coordinator's failover: snapshot and restore of its state
# (coord_snapshot.c), its unit test and the restore parser's fuzz target.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/control/coord_snapshot.c

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_coord_failover
tests_unit_test_coord_failover_SOURCES = tests/unit/test_coord_failover.c
tests_unit_test_coord_failover_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_failover_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_failover
endif

# Fuzz target of the state record's parser (resihp__coord_restore).
check_PROGRAMS += tests/fuzz/fuzz_snapshot
tests_fuzz_fuzz_snapshot_SOURCES = tests/fuzz/fuzz_snapshot.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_snapshot_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_snapshot
EXTRA_DIST += tests/fuzz/corpus-snapshot/setup tests/fuzz/corpus-snapshot/run \
	tests/fuzz/corpus-snapshot/freerun tests/fuzz/corpus-snapshot/round \
	tests/fuzz/corpus-snapshot/save tests/fuzz/corpus-snapshot/end \
	tests/fuzz/corpus-snapshot/spares tests/fuzz/corpus-snapshot/cut \
	tests/fuzz/corpus-snapshot/freerun-cost tests/fuzz/corpus-snapshot/layers \
	tests/fuzz/corpus-snapshot/repart tests/fuzz/corpus-snapshot/decide \
	tests/fuzz/corpus-snapshot/shrunk tests/fuzz/corpus-snapshot/launches

# Fuzz target of the cost plan of a free run by cost (costplan.c).
check_PROGRAMS += tests/fuzz/fuzz_costplan
tests_fuzz_fuzz_costplan_SOURCES = tests/fuzz/fuzz_costplan.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_costplan_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_costplan
EXTRA_DIST += tests/fuzz/corpus-costplan/k1-three \
	tests/fuzz/corpus-costplan/k2-slow tests/fuzz/corpus-costplan/nan \
	tests/fuzz/corpus-costplan/twice tests/fuzz/corpus-costplan/upper \
	tests/fuzz/corpus-costplan/slow-below-1 \
	tests/fuzz/corpus-costplan/members-list \
	tests/fuzz/corpus-costplan/sparse-slow

# The keeper: the process that outlives the coordinator (keeper.h).
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/control/keeper.c libresihp/control/keeper.h \
	libresihp/control/gate.c libresihp/control/gate.h \
	libresihp/control/standby.c libresihp/control/standby.h \
	libresihp/control/vouch.c libresihp/control/vouch.h

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_keeper
tests_unit_test_keeper_SOURCES = tests/unit/test_keeper.c
tests_unit_test_keeper_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_keeper_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_keeper
# The standby's feed: the primary's records to another node (standby.h).
check_PROGRAMS += tests/unit/test_preauth
tests_unit_test_preauth_SOURCES = tests/unit/test_preauth.c
tests_unit_test_preauth_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_preauth_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_preauth
check_PROGRAMS += tests/unit/test_standby
tests_unit_test_standby_SOURCES = tests/unit/test_standby.c
tests_unit_test_standby_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_standby_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_standby
endif
# Fuzz target of the feed's lines (REC, STANDBY).
check_PROGRAMS += tests/fuzz/fuzz_feed
tests_fuzz_fuzz_feed_SOURCES = tests/fuzz/fuzz_feed.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_feed_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_feed
EXTRA_DIST += tests/fuzz/corpus-feed/rec tests/fuzz/corpus-feed/hello \
	tests/fuzz/corpus-feed/rec-too-long
dist_check_SCRIPTS += tests/integration/failover.test
TESTS += tests/integration/failover.test
# ... and the standby on another node, when the batch host dies.
dist_check_SCRIPTS += tests/integration/standby.test
TESTS += tests/integration/standby.test
# ... and no split brain when it takes over on the replicas' word while
# the primary is alive but stopped (vouch.h).
dist_check_SCRIPTS += tests/integration/standby-split.test
TESTS += tests/integration/standby-split.test

# The coordinator's output queues: a replica that stops reading delays
# nobody (coord_loop.c, resihp__wire_queue).
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_coord_slow_reader
tests_unit_test_coord_slow_reader_SOURCES = tests/unit/test_coord_slow_reader.c \
	tests/unit/coord_pairs.c tests/unit/coord_pairs.h
tests_unit_test_coord_slow_reader_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_slow_reader_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_slow_reader

# An injected fault announced just before somebody else reports the
# replica's failure still counts as injected (coord_members.c).
check_PROGRAMS += tests/unit/test_coord_fault_order
tests_unit_test_coord_fault_order_SOURCES = \
	tests/unit/test_coord_fault_order.c \
	tests/unit/coord_pairs.c tests/unit/coord_pairs.h
tests_unit_test_coord_fault_order_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_fault_order_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_fault_order

# A slow member does not end a free run; a change of its speed, or a swap
# that pays, does (coord_schedule.c, coord_perf.c).
check_PROGRAMS += tests/unit/test_coord_slow_run
tests_unit_test_coord_slow_run_SOURCES = \
	tests/unit/test_coord_slow_run.c \
	tests/unit/coord_pairs.c tests/unit/coord_pairs.h
tests_unit_test_coord_slow_run_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_slow_run_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_slow_run

# The cost plan's multipliers: one slow replica of 10,000 is a short line.
check_PROGRAMS += tests/unit/test_costplan
tests_unit_test_costplan_SOURCES = tests/unit/test_costplan.c
tests_unit_test_costplan_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_costplan_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_costplan
endif

# What one failure and one join cost the coordinator, in bytes and in
# judgement (silence on listening time), at 1,000 replicas.
check_PROGRAMS += tests/unit/test_coord_cost
tests_unit_test_coord_cost_SOURCES = tests/unit/test_coord_cost.c
tests_unit_test_coord_cost_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_cost_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_cost
check_PROGRAMS += tests/unit/test_repart
tests_unit_test_repart_SOURCES = tests/unit/test_repart.c
tests_unit_test_repart_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_repart_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_repart
# and the shrink of a replica that lost ranks with no spare left.
check_PROGRAMS += tests/unit/test_shrink
tests_unit_test_shrink_SOURCES = tests/unit/test_shrink.c
tests_unit_test_shrink_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_shrink_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_shrink

check_PROGRAMS += tests/unit/test_decide
tests_unit_test_decide_SOURCES = tests/unit/test_decide.c
tests_unit_test_decide_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_decide_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_decide
# the detector and the moves of layers fed sample sequences
check_PROGRAMS += tests/unit/test_repart_samples
tests_unit_test_repart_samples_SOURCES = tests/unit/test_repart_samples.c
tests_unit_test_repart_samples_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_repart_samples_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_repart_samples

# The standby's early takeover on the replicas' word (vouch.h): its unit
# test and the fuzz target of a vouch and of the record it is counted
# against.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_vouch
tests_unit_test_vouch_SOURCES = tests/unit/test_vouch.c
tests_unit_test_vouch_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_vouch_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_vouch
endif
check_PROGRAMS += tests/fuzz/fuzz_vouch
tests_fuzz_fuzz_vouch_SOURCES = tests/fuzz/fuzz_vouch.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_vouch_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_vouch
EXTRA_DIST += tests/fuzz/corpus-vouch/hello tests/fuzz/corpus-vouch/record \
	tests/fuzz/corpus-vouch/snapshot-run
