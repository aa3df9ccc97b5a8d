# SPDX-License-Identifier: BSD-3-Clause
# The pipeline-parallel example trainer (sharded replicas), built (not
# installed) for the tests and the benchmark, and the test of its
# reference mode (no Slurm).
noinst_PROGRAMS += contrib/pipeline-trainer/resihp-pipeline-trainer
contrib_pipeline_trainer_resihp_pipeline_trainer_SOURCES = \
	contrib/pipeline-trainer/pipeline-trainer.c \
	contrib/common/trainer-common.c contrib/common/trainer-layers.c \
	contrib/common/trainer-common.h
# No fused multiply-adds: a unit's arithmetic must round the same in every
# context the compiler inlines it into, or the pipeline split is not exact.
contrib_pipeline_trainer_resihp_pipeline_trainer_CFLAGS = $(AM_CFLAGS) \
	-ffp-contract=off
contrib_pipeline_trainer_resihp_pipeline_trainer_LDADD = \
	libresihp/libresihp.la -lm
dist_check_SCRIPTS += tests/tools/pipeline-trainer.test
TESTS += tests/tools/pipeline-trainer.test
