# SPDX-License-Identifier: BSD-3-Clause
# Deterministic mode on GPU buffers (fixed_point_gpu.h), built when
# configure finds nvcc (HAVE_NVCC). nvcc compiles fixed_point_kernels.cu
# into a fatbin (sm_80, sm_90 code and compute_90 PTX for newer GPUs), bin2c
# turns it into a C array in the build tree, and fixed_point_gpu.c loads it
# at run time through libcudart alone. Only the .cu is distributed; the
# generated files are rebuilt from it and cleaned. The GPU test and bench
# exit 77 (skip) without a CUDA device.
EXTRA_DIST += libresihp/collectives/fixed_point_kernels.cu
if HAVE_NVCC
noinst_LTLIBRARIES += libresihp/libresihp-fixedgpu.la
libresihp_libresihp_fixedgpu_la_SOURCES = \
	libresihp/collectives/fixed_point_gpu.h \
	libresihp/collectives/fixed_point_gpu.c
nodist_libresihp_libresihp_fixedgpu_la_SOURCES = \
	libresihp/collectives/fixed_point_fatbin.c
libresihp_libresihp_fixedgpu_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
libresihp_libresihp_fixedgpu_la_LIBADD = $(CUDA_LIBS) -lm
libresihp_libresihp_internal_la_LIBADD += libresihp/libresihp-fixedgpu.la
CLEANFILES += libresihp/collectives/fixed_point_fatbin.c \
	libresihp/collectives/fixed_point_kernels.fatbin

# No fast math, no flush to zero, no fused multiply-add: the kernels must
# round exactly as the CPU reference does. NVCCFLAGS is the user's.
FIXED_GPU_NVCCFLAGS = -O3 -std=c++17 --fmad=false \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# A .cu file ($$cu) into a fatbin ($$fb) and a C file ($@) that embeds it
# as the array $$sym (also used by probe/burnin_gpu.mk).
GPU_FATBIN_C = $(NVCC) --fatbin $(FIXED_GPU_NVCCFLAGS) $(NVCCFLAGS) \
	  -o "$$fb" "$$cu" && \
	{ echo '/* SPDX-License-Identifier: BSD-3-Clause */'; \
	  echo "/* Generated from `basename $$cu` by nvcc and bin2c. */"; \
	  echo "extern const unsigned long long $$sym[];"; \
	  $(BIN2C) --const --type longlong --name "$$sym" "$$fb"; \
	} > $@-t && mv -f $@-t $@
libresihp/collectives/fixed_point_fatbin.c: \
		$(srcdir)/libresihp/collectives/fixed_point_kernels.cu
	@$(MKDIR_P) libresihp/collectives
	$(AM_V_GEN)cu=$(srcdir)/libresihp/collectives/fixed_point_kernels.cu; \
	  fb=libresihp/collectives/fixed_point_kernels.fatbin; \
	  sym=resihp__fixed_point_fatbin; $(GPU_FATBIN_C)

# Every result bit for bit against the CPU scalar reference.
check_PROGRAMS += tests/gpu/test_fixed_point_gpu
tests_gpu_test_fixed_point_gpu_SOURCES = tests/gpu/test_fixed_point_gpu.c
tests_gpu_test_fixed_point_gpu_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_test_fixed_point_gpu_LDADD = libresihp/libresihp-internal.la \
	$(CUDA_LIBS) -lm
TESTS += tests/gpu/test_fixed_point_gpu

# The kernels against the device-to-device copy limit, 1 MiB .. 1 GiB.
noinst_PROGRAMS += tools/resihp-bench-gpu-fixed
tools_resihp_bench_gpu_fixed_SOURCES = tools/resihp-bench-gpu-fixed.c
tools_resihp_bench_gpu_fixed_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tools_resihp_bench_gpu_fixed_LDADD = libresihp/libresihp-internal.la \
	$(CUDA_LIBS)
endif
