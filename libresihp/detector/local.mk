# SPDX-License-Identifier: BSD-3-Clause
# Detector (issue #5): workload-aware fail-slow detection (online microbatch
# time predictor, CUSUM, validation against peers) and fail-stop inputs
# folded into one health state per rank; its evaluation tool and tests.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/detector/detector-internal.h \
	libresihp/detector/predictor.c \
	libresihp/detector/failslow.c \
	libresihp/detector/health.c \
	libresihp/detector/detector.c
resihpinclude_HEADERS += libresihp/include/resihp/detector.h

# resihp-detect-eval: synthetic traces (or the user's own) replayed through
# the detector and two naive baselines.
bin_PROGRAMS += tools/resihp-detect-eval
tools_resihp_detect_eval_SOURCES = \
	tools/detect-eval/eval.h \
	tools/detect-eval/tracegen.c \
	tools/detect-eval/traceio.c \
	tools/detect-eval/baseline.c \
	tools/resihp-detect-eval.c
tools_resihp_detect_eval_LDADD = libresihp/libresihp.la
dist_man_MANS += man/resihp-detect-eval.1

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_detector
tests_unit_test_detector_SOURCES = tests/unit/test_detector.c
tests_unit_test_detector_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_detector_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_detector
endif

dist_check_SCRIPTS += tests/unit/detect-eval.test
TESTS += tests/unit/detect-eval.test

# The fuzz target of resihp-detect-eval's trace reader (tests/fuzz/README).
check_PROGRAMS += tests/fuzz/fuzz_detect_trace
tests_fuzz_fuzz_detect_trace_SOURCES = tests/fuzz/fuzz_detect_trace.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h \
	tools/detect-eval/eval.h tools/detect-eval/traceio.c \
	tools/detect-eval/tracegen.c
tests_fuzz_fuzz_detect_trace_LDADD = libresihp/libresihp.la -lm
TESTS += tests/fuzz/fuzz_detect_trace
EXTRA_DIST += tests/fuzz/corpus-detect-trace/labelled \
	tests/fuzz/corpus-detect-trace/ramp-hold-hang \
	tests/fuzz/corpus-detect-trace/counts \
	tests/fuzz/corpus-detect-trace/contradiction \
	tests/fuzz/corpus-detect-trace/bad
