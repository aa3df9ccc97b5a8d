# SPDX-License-Identifier: BSD-3-Clause
# Fault-tolerant all-reduce (issue #3): transports (TCP mesh with HMAC
# authentication, shared-memory rings between ranks of one host, NCCL when
# found), communicator membership (monitor, shrink agreement) and the ring.
# Tests: tests/unit/test_allreduce (Check, forked ranks that really die),
# tests/gpu (skips without two GPUs), tests/sanitizers.sh (ASan/UBSan tree
# in build-asan/, run by hand or by CI).
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/transport/transport.h \
	libresihp/transport/sha256.h \
	libresihp/transport/sha256.c \
	libresihp/transport/msgauth.h \
	libresihp/transport/msgauth.c \
	libresihp/transport/mesh.h \
	libresihp/transport/mesh.c \
	libresihp/transport/cookie.c libresihp/transport/cookie.h \
	libresihp/transport/shm.h \
	libresihp/transport/shm.c \
	libresihp/transport/cma.h \
	libresihp/transport/cma.c \
	libresihp/transport/tcp.c \
	libresihp/collectives/comm_internal.h \
	libresihp/collectives/comm.c \
	libresihp/collectives/ctrl_frame.c \
	libresihp/collectives/ring_allreduce.c \
	libresihp/collectives/small_allreduce.c \
	libresihp/collectives/cma_allreduce.c \
	libresihp/collectives/allreduce.c \
	libresihp/collectives/p2p.c \
	libresihp/collectives/shard.c \
	libresihp/collectives/reduce.c \
	libresihp/collectives/fixed_point.h \
	libresihp/collectives/fixed_point.c
resihpinclude_HEADERS += libresihp/include/resihp/allreduce.h

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_allreduce
tests_unit_test_allreduce_SOURCES = tests/unit/test_allreduce.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_allreduce_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_allreduce_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_allreduce

# A rank killed mid-frame at many offsets: EPEER/ETIMEDOUT, never EPROTO.
check_PROGRAMS += tests/unit/test_allreduce_kill
tests_unit_test_allreduce_kill_SOURCES = tests/unit/test_allreduce_kill.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_allreduce_kill_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_allreduce_kill_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_allreduce_kill

# The layer-keyed groups over real sockets: one group per run of layers,
# several per rank over one listening socket (recovery/layer_groups.h).
check_PROGRAMS += tests/unit/test_layer_comms
tests_unit_test_layer_comms_SOURCES = tests/unit/test_layer_comms.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_layer_comms_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_layer_comms_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_layer_comms

# A second failure during a shrink agreement, its order forced by hooks.
check_PROGRAMS += tests/unit/test_shrink_race
tests_unit_test_shrink_race_SOURCES = tests/unit/test_shrink_race.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_shrink_race_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_shrink_race_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_shrink_race

# Reduce-scatter and all-gather (a sharded replica's collectives): any
# count, exact against the all-reduce, a member SIGKILLed from outside.
check_PROGRAMS += tests/unit/test_shard_collectives
tests_unit_test_shard_collectives_SOURCES = \
  tests/unit/test_shard_collectives.c tests/unit/rank_group.c \
  tests/unit/rank_group.h
tests_unit_test_shard_collectives_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_shard_collectives_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_shard_collectives

# Small-message all-reduce (direct exchange).
check_PROGRAMS += tests/unit/test_allreduce_small
tests_unit_test_allreduce_small_SOURCES = tests/unit/test_allreduce_small.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_allreduce_small_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_allreduce_small_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_allreduce_small

# Single-copy all-reduce (process_vm_readv).
check_PROGRAMS += tests/unit/test_allreduce_cma
tests_unit_test_allreduce_cma_SOURCES = tests/unit/test_allreduce_cma.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_allreduce_cma_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_allreduce_cma_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_allreduce_cma

# Deterministic mode: fast conversions, narrow wire form.
check_PROGRAMS += tests/unit/test_fixed_fast
tests_unit_test_fixed_fast_SOURCES = tests/unit/test_fixed_fast.c \
  tests/unit/rank_group.c tests/unit/rank_group.h
tests_unit_test_fixed_fast_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_fixed_fast_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_fixed_fast
endif

# Fuzz targets of the frame readers (libFuzzer builds: see their sources):
# the control-frame reader and the data-plane transport, each run in
# `make check` over its corpus (tests/fuzz/corpus-frame-*) plus generated
# inputs by the shared standalone driver.
check_PROGRAMS += tests/fuzz/fuzz_frame_ctrl tests/fuzz/fuzz_frame_data
tests_fuzz_fuzz_frame_ctrl_SOURCES = tests/fuzz/fuzz_frame_ctrl.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_frame_ctrl_LDADD = libresihp/libresihp-internal.la -lm
tests_fuzz_fuzz_frame_data_SOURCES = tests/fuzz/fuzz_frame_data.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_frame_data_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_frame_ctrl tests/fuzz/fuzz_frame_data
EXTRA_DIST += tests/fuzz/corpus-frame-ctrl tests/fuzz/corpus-frame-data
# The names in /dev/shm the clean-up of stale rings reads (shm.c).
check_PROGRAMS += tests/fuzz/fuzz_shm_name
tests_fuzz_fuzz_shm_name_SOURCES = tests/fuzz/fuzz_shm_name.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_shm_name_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_shm_name
EXTRA_DIST += tests/fuzz/corpus-shm-name
# The mesh handshake's server side (hellos, answers, cookies).
check_PROGRAMS += tests/fuzz/fuzz_mesh_hs
tests_fuzz_fuzz_mesh_hs_SOURCES = tests/fuzz/fuzz_mesh_hs.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_mesh_hs_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_mesh_hs
EXTRA_DIST += tests/fuzz/corpus-mesh-hs

# Benchmarks: resihp vs Open MPI on loopback (tools/resihp-bench.sh runs
# both). The MPI twin is compiled and linked with $(MPICC): its object comes
# from a plain rule and the program has no automake-compiled sources.
noinst_PROGRAMS += tools/resihp-bench-allreduce
tools_resihp_bench_allreduce_SOURCES = tools/resihp-bench-allreduce.c
tools_resihp_bench_allreduce_LDADD = libresihp/libresihp.la
# The host data paths of a large all-reduce beside memcpy (2 ranks).
noinst_PROGRAMS += tools/resihp-bench-single-copy
tools_resihp_bench_single_copy_SOURCES = tools/resihp-bench-single-copy.c
tools_resihp_bench_single_copy_LDADD = libresihp/libresihp.la
EXTRA_DIST += tools/resihp-bench.sh tools/resihp-bench-mpi.c tests/sanitizers.sh
if HAVE_MPI
noinst_PROGRAMS += tools/resihp-bench-mpi
tools_resihp_bench_mpi_SOURCES =
tools_resihp_bench_mpi_LDADD = tools/resihp-bench-mpi.mpio
tools_resihp_bench_mpi_LINK = $(MPICC) $(AM_CFLAGS) $(CFLAGS) $(AM_LDFLAGS) $(LDFLAGS) -o $@
CLEANFILES += tools/resihp-bench-mpi.mpio
tools/resihp-bench-mpi.mpio: $(top_srcdir)/tools/resihp-bench-mpi.c
	@$(MKDIR_P) tools
	$(AM_V_CC)$(MPICC) $(WARN_CFLAGS) $(CFLAGS) -c -o $@ $(top_srcdir)/tools/resihp-bench-mpi.c
endif

# Device buffers staged through pinned host memory: its own convenience
# library, the only other one that sees the CUDA headers.
if HAVE_CUDA
noinst_LTLIBRARIES += libresihp/libresihp-cuda.la
libresihp_libresihp_cuda_la_SOURCES = libresihp/collectives/device_staging.c
libresihp_libresihp_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
libresihp_libresihp_cuda_la_LIBADD = $(CUDA_LIBS)
libresihp_libresihp_internal_la_LIBADD += libresihp/libresihp-cuda.la
if HAVE_NVCC
libresihp_libresihp_cuda_la_SOURCES += libresihp/collectives/device_fixed.c
endif

# GPU test: ranks sharing one device; exits 77 (skip) without one.
check_PROGRAMS += tests/gpu/test_allreduce_staged
tests_gpu_test_allreduce_staged_SOURCES = tests/gpu/test_allreduce_staged.c \
	tests/gpu/device_count.h
tests_gpu_test_allreduce_staged_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_allreduce_staged_LDADD = libresihp/libresihp-internal.la \
	$(CUDA_LIBS) -lpthread
TESTS += tests/gpu/test_allreduce_staged

# Device buffers staged vs host buffers vs the PCIe/HBM copy limits.
noinst_PROGRAMS += tools/resihp-bench-device
tools_resihp_bench_device_SOURCES = tools/resihp-bench-device.c
tools_resihp_bench_device_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tools_resihp_bench_device_LDADD = libresihp/libresihp-internal.la $(CUDA_LIBS)
endif
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/collectives/device_staging.h
EXTRA_DIST += libresihp/collectives/device_staging.c \
	libresihp/collectives/device_fixed.c

# NCCL data plane: its own convenience library so that only nccl.c sees
# the CUDA/NCCL headers; the SPANK plugin links libresihp-core.la only, so
# nothing CUDA reaches slurmstepd.
if HAVE_NCCL
noinst_LTLIBRARIES += libresihp/libresihp-nccl.la
libresihp_libresihp_nccl_la_SOURCES = libresihp/transport/nccl.c
libresihp_libresihp_nccl_la_CPPFLAGS = $(AM_CPPFLAGS) $(NCCL_CPPFLAGS) $(CUDA_CPPFLAGS)
libresihp_libresihp_nccl_la_LIBADD = $(NCCL_LIBS) $(CUDA_LIBS)
libresihp_libresihp_internal_la_LIBADD += libresihp/libresihp-nccl.la

# GPU test: needs two CUDA devices; exits 77 (skip) otherwise.
check_PROGRAMS += tests/gpu/test_allreduce_nccl
tests_gpu_test_allreduce_nccl_SOURCES = tests/gpu/test_allreduce_nccl.c \
	tests/gpu/device_count.h
tests_gpu_test_allreduce_nccl_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_allreduce_nccl_LDADD = libresihp/libresihp-internal.la $(CUDA_LIBS)
TESTS += tests/gpu/test_allreduce_nccl

# What one GPU allows of NCCL: a one-rank communicator's life cycle.
check_PROGRAMS += tests/gpu/test_nccl_lifecycle
tests_gpu_test_nccl_lifecycle_SOURCES = tests/gpu/test_nccl_lifecycle.c \
	tests/gpu/device_count.h
tests_gpu_test_nccl_lifecycle_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_nccl_lifecycle_LDADD = libresihp/libresihp-internal.la \
	$(CUDA_LIBS)
TESTS += tests/gpu/test_nccl_lifecycle
endif
