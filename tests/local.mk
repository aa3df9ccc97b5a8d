# SPDX-License-Identifier: BSD-3-Clause
# Tests: Check unit tests per module (tests/unit), and TAP integration tests
# that start a real Slurm cluster (tests/integration, tests/harness).
TEST_EXTENSIONS = .test
TEST_LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
AM_TESTS_ENVIRONMENT = \
	top_srcdir='$(abs_top_srcdir)'; top_builddir='$(abs_top_builddir)'; \
	PYTHON='$(PYTHON)'; export top_srcdir top_builddir PYTHON;

if HAVE_CHECK
UNIT_LDADD = libresihp/libresihp-internal.la $(CHECK_LIBS)
UNIT_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)

check_PROGRAMS += tests/unit/test_core
tests_unit_test_core_SOURCES = tests/unit/test_core.c
tests_unit_test_core_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_core_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_core
endif

dist_check_SCRIPTS += tests/integration/spank-options.test
TESTS += tests/integration/spank-options.test
# resihp_job_abort: the program stops the run, no spare is used
dist_check_SCRIPTS += tests/integration/abort.test
TESTS += tests/integration/abort.test
EXTRA_DIST += tests/fuzz/corpus-coord/abort

# resihp.torch.ddp against stock gloo DDP and under a replica's failure
dist_check_SCRIPTS += tests/integration/torch-ddp.test
TESTS += tests/integration/torch-ddp.test
EXTRA_DIST += contrib/torch-ddp/train_ddp.py

EXTRA_DIST += tests/unit/suite_main.h
EXTRA_DIST += tests/harness/lab-cluster.sh tests/harness/tap.sh tests/run-tests.sh
include tests/harness/local.mk
include tests/gpu/local.mk

dist_check_SCRIPTS += tests/tools/licence.test
TESTS += tests/tools/licence.test
EXTRA_DIST += contrib/debian/copyright contrib/rpm/resihp.spec

dist_check_SCRIPTS += tests/python/torch-local.test
TESTS += tests/python/torch-local.test
dist_check_SCRIPTS += tests/python/torch-shard.test
TESTS += tests/python/torch-shard.test
EXTRA_DIST += tests/python/torch_shard.py
EXTRA_DIST += tests/python/torch_local.py tests/python/tap.py \
	tests/python/trainloop.py
dist_check_SCRIPTS += tests/python/torch-pipeline.test
TESTS += tests/python/torch-pipeline.test
EXTRA_DIST += tests/python/torch_pipeline.py
dist_check_SCRIPTS += tests/python/torch-cuda.test
TESTS += tests/python/torch-cuda.test
EXTRA_DIST += tests/python/torch_cuda.py

dist_check_SCRIPTS += tests/integration/torch.test
TESTS += tests/integration/torch.test
dist_check_SCRIPTS += tests/integration/torch-pipeline.test
TESTS += tests/integration/torch-pipeline.test
dist_check_SCRIPTS += tests/integration/torch-repartition.test
TESTS += tests/integration/torch-repartition.test
dist_check_SCRIPTS += tests/integration/torch-shrink.test
TESTS += tests/integration/torch-shrink.test
dist_check_SCRIPTS += tests/integration/torch-shard.test
TESTS += tests/integration/torch-shard.test

# make install as root leaves the tools runnable (ldconfig; mount namespace)
dist_check_SCRIPTS += tests/tools/install.test
TESTS += tests/tools/install.test

# failures and outcome in the job's Comment, set by resihp-run as the owner
dist_check_SCRIPTS += tests/integration/slurm-record.test
TESTS += tests/integration/slurm-record.test

# the user documentation (README.md, doc/) links only inside the tree
dist_check_SCRIPTS += tests/tools/docs.test
TESTS += tests/tools/docs.test
