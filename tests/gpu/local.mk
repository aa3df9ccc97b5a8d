# SPDX-License-Identifier: BSD-3-Clause
# The GPU device check (tests/gpu/device-check.sh): one script that runs
# every GPU path on a machine lent with a GPU and no Slurm, and the check
# of its CPU-side parts here (tests/gpu/device-check-cpu.test). The GPU
# test programs it runs are built in libresihp/collectives/*.mk.

# A job of R replicas as local processes, the coordinator embedded.
check_PROGRAMS += tests/gpu/resihp-local-job
tests_gpu_resihp_local_job_SOURCES = tests/gpu/local_job.c tools/run/secret.c \
	tools/run/secret.h
tests_gpu_resihp_local_job_LDADD = libresihp/libresihp-internal.la

dist_check_SCRIPTS += tests/gpu/device-check.sh tests/gpu/device-check-cpu.test
TESTS += tests/gpu/device-check-cpu.test

# No NCCL entry point newer than the NCCL hosts carry is linked.
dist_check_SCRIPTS += tests/gpu/nccl-symbols.test
TESTS += tests/gpu/nccl-symbols.test
EXTRA_DIST += tests/gpu/torch_nccl_bench.py
