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
