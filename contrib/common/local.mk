# SPDX-License-Identifier: BSD-3-Clause
# The unit test of the example trainers' data kinds and simulated compute
# (contrib/common/trainer-data.h); the trainers list these sources in
# their own local.mk.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_trainer_data
tests_unit_test_trainer_data_SOURCES = tests/unit/test_trainer_data.c \
	contrib/common/trainer-data.c contrib/common/trainer-data.h \
	contrib/common/trainer-common.c contrib/common/trainer-common.h
tests_unit_test_trainer_data_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_trainer_data_LDADD = libresihp/libresihp.la $(CHECK_LIBS)
TESTS += tests/unit/test_trainer_data
endif
