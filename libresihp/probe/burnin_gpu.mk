# SPDX-License-Identifier: BSD-3-Clause
# The GPU part of a spare's burn-in (burnin_gpu.c, issue 35), built when
# configure finds nvcc (HAVE_NVCC), the way the deterministic-mode kernels
# are (fixed_point_gpu.mk): nvcc compiles burnin_kernels.cu into a fatbin,
# bin2c embeds it, burnin_gpu.c loads it through libcudart alone (and uses
# NCCL for the device all-reduce when configure found it). Without a GPU
# the burn-in skips that part (tests/unit/test_burnin checks the skip).
EXTRA_DIST += libresihp/probe/burnin_kernels.cu
if HAVE_NVCC
noinst_LTLIBRARIES += libresihp/libresihp-burningpu.la
libresihp_libresihp_burningpu_la_SOURCES = libresihp/probe/burnin_gpu.c
nodist_libresihp_libresihp_burningpu_la_SOURCES = \
	libresihp/probe/burnin_fatbin.c
libresihp_libresihp_burningpu_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) \
	$(NCCL_CPPFLAGS)
libresihp_libresihp_burningpu_la_LIBADD = $(CUDA_LIBS) $(NCCL_LIBS)
libresihp_libresihp_internal_la_LIBADD += libresihp/libresihp-burningpu.la
CLEANFILES += libresihp/probe/burnin_fatbin.c \
	libresihp/probe/burnin_kernels.fatbin

libresihp/probe/burnin_fatbin.c: $(srcdir)/libresihp/probe/burnin_kernels.cu
	@$(MKDIR_P) libresihp/probe
	$(AM_V_GEN)cu=$(srcdir)/libresihp/probe/burnin_kernels.cu; \
	  fb=libresihp/probe/burnin_kernels.fatbin; \
	  sym=resihp__burnin_fatbin; $(GPU_FATBIN_C)
endif
