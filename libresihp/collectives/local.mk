# Fault-tolerant all-reduce (issue #3): transports (TCP mesh with HMAC
# authentication; NCCL when found), communicator membership and the ring.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/transport/transport.h \
	libresihp/transport/sha256.h \
	libresihp/transport/sha256.c \
	libresihp/transport/mesh.h \
	libresihp/transport/mesh.c \
	libresihp/transport/tcp.c \
	libresihp/collectives/comm_internal.h \
	libresihp/collectives/comm.c \
	libresihp/collectives/ring_allreduce.c \
	libresihp/collectives/allreduce.c \
	libresihp/collectives/reduce.c
resihpinclude_HEADERS += libresihp/include/resihp/allreduce.h

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_allreduce
tests_unit_test_allreduce_SOURCES = tests/unit/test_allreduce.c
tests_unit_test_allreduce_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_allreduce_LDADD = $(UNIT_LDADD) -lm
TESTS += tests/unit/test_allreduce
endif

# Benchmarks: resihp vs Open MPI on loopback (tools/resihp-bench.sh runs
# both). The MPI twin is compiled with $(MPICC) by a plain rule.
noinst_PROGRAMS += tools/resihp-bench-allreduce
tools_resihp_bench_allreduce_SOURCES = tools/resihp-bench-allreduce.c
tools_resihp_bench_allreduce_LDADD = libresihp/libresihp.la
dist_noinst_SCRIPTS = tools/resihp-bench.sh
EXTRA_DIST += tools/resihp-bench-mpi.c
if HAVE_MPI
noinst_SCRIPTS = tools/resihp-bench-mpi
CLEANFILES += tools/resihp-bench-mpi
tools/resihp-bench-mpi: $(top_srcdir)/tools/resihp-bench-mpi.c
	@$(MKDIR_P) tools
	$(AM_V_CC)$(MPICC) $(WARN_CFLAGS) -O2 -o $@ $(top_srcdir)/tools/resihp-bench-mpi.c
endif
