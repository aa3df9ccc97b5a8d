# SPDX-License-Identifier: BSD-3-Clause
# The pipeline-parallel example trainer (sharded replicas), built (not
# installed) for the tests and the benchmark, and the test of its
# reference mode (no Slurm).
noinst_PROGRAMS += contrib/pipeline-trainer/resihp-pipeline-trainer
contrib_pipeline_trainer_resihp_pipeline_trainer_SOURCES = \
	contrib/pipeline-trainer/pipeline-trainer.c \
	contrib/common/trainer-common.c contrib/common/trainer-layers.c \
	contrib/common/trainer-rendezvous.c \
	contrib/common/trainer-common.h contrib/common/trainer-data.c \
	contrib/common/trainer-data.h
# No fused multiply-adds: a unit's arithmetic must round the same in every
# context the compiler inlines it into, or the pipeline split is not exact.
contrib_pipeline_trainer_resihp_pipeline_trainer_CFLAGS = $(AM_CFLAGS) \
	-ffp-contract=off
contrib_pipeline_trainer_resihp_pipeline_trainer_LDADD = \
	libresihp/libresihp.la -lm
dist_check_SCRIPTS += tests/tools/pipeline-trainer.test
TESTS += tests/tools/pipeline-trainer.test
# Its benchmark against plain communicators (needs a Slurm allocation), and
# the demo that runs it on a lab cluster: shipped, not installed.
EXTRA_DIST += tools/resihp-bench-pipeline.sh contrib/demo/run-pipeline-bench.sh
# Regrouping's benchmark (issue 32: layer-keyed groups, a slow stage's
# policies, a node lost with no spare) and its demo on a lab cluster.
EXTRA_DIST += tools/resihp-bench-regroup.sh contrib/demo/run-regroup-bench.sh
dist_check_SCRIPTS += tests/tools/bench-regroup.test
TESTS += tests/tools/bench-regroup.test
# The fuzz target of its --partition parser (tests/fuzz/README).
check_PROGRAMS += tests/fuzz/fuzz_partition
tests_fuzz_fuzz_partition_SOURCES = tests/fuzz/fuzz_partition.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h \
	contrib/common/trainer-common.c contrib/common/trainer-common.h
tests_fuzz_fuzz_partition_LDADD = libresihp/libresihp.la
TESTS += tests/fuzz/fuzz_partition
EXTRA_DIST += tests/fuzz/corpus-partition/plain \
	tests/fuzz/corpus-partition/too-many \
	tests/fuzz/corpus-partition/empty-item tests/fuzz/corpus-partition/huge
# As sharded replicas under resihp-run on a lab cluster.
dist_check_SCRIPTS += tests/integration/pipeline.test
TESTS += tests/integration/pipeline.test
# Replicas with different partitions of the layers, under faults.
dist_check_SCRIPTS += tests/integration/layers.test
TESTS += tests/integration/layers.test
# Layers moved off a stage slowed from outside, and back (issue 32).
dist_check_SCRIPTS += tests/integration/repartition.test
TESTS += tests/integration/repartition.test
# A replica that lost a stage with no spare left shrinks in place (issue 32).
dist_check_SCRIPTS += tests/integration/shrink.test
TESTS += tests/integration/shrink.test
