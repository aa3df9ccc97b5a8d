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

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_detector
tests_unit_test_detector_SOURCES = tests/unit/test_detector.c
tests_unit_test_detector_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_detector_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_detector
endif
