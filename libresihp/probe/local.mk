# SPDX-License-Identifier: BSD-3-Clause
# Node health probes (issue #7): shared by the SPANK plugin and
# tools/resihp-probe. A convenience library without threads, CUDA or NCCL
# (NVML is dlopen()ed inside the probe helper only), so that it can be linked
# into the plugin that slurmstepd loads.
noinst_LTLIBRARIES += libresihp/libresihp-metrics.la libresihp/libresihp-probe.la

# The Prometheus textfile writer, reusable by every libresihp module.
libresihp_libresihp_metrics_la_SOURCES = \
	libresihp/metrics/metrics.c libresihp/metrics/metrics.h

libresihp_libresihp_probe_la_SOURCES = \
	libresihp/probe/probe.h libresihp/probe/probe.c \
	libresihp/probe/checks.h libresihp/probe/checks.c \
	libresihp/probe/nvml.c libresihp/probe/helper.c \
	libresihp/probe/report.c libresihp/probe/verdict.c \
	libresihp/probe/rundir.c
libresihp_libresihp_probe_la_CFLAGS = $(AM_CFLAGS) $(HWLOC_CFLAGS)
libresihp_libresihp_probe_la_LIBADD = libresihp/libresihp-metrics.la \
	$(HWLOC_LIBS)

# The reader of the results file is for the job's processes (the ranks
# watch it for periodic failures, the spare agent reports its verdict), not
# for the plugin, which only writes it; so is the burn-in (threads, TCP).
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/probe/results.h libresihp/probe/results.c \
	libresihp/probe/burnin.h libresihp/probe/burnin.c

# The plugin runs the probes in its remote (slurmstepd) context.
spank_resihp_la_LIBADD += libresihp/libresihp-probe.la

# resihp-probe: the same checks from a shell, for admins and health scripts.
sbin_PROGRAMS += tools/resihp-probe
tools_resihp_probe_SOURCES = tools/resihp-probe.c
tools_resihp_probe_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libresihp/probe
tools_resihp_probe_LDADD = libresihp/libresihp-probe.la \
	libresihp/libresihp-core.la

dist_man_MANS += man/resihp-probe.8

# Packaging for sysadmins (built from the `make dist` tarball).
EXTRA_DIST += contrib/rpm/resihp.spec \
	contrib/debian/changelog contrib/debian/control \
	contrib/debian/copyright contrib/debian/rules \
	contrib/debian/source/format contrib/debian/resihp.install \
	contrib/debian/libresihp0.install contrib/debian/libresihp-dev.install \
	contrib/debian/resihp.README.Debian

# Tests: probe unit tests, the fuzz target of the option parser (also run as
# a regular test through its standalone driver), the exported-symbols check,
# resihp-probe's CLI and the probes on the real lab cluster.
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_probe
tests_unit_test_probe_SOURCES = tests/unit/test_probe.c
tests_unit_test_probe_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libresihp/probe
tests_unit_test_probe_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_probe_LDADD = libresihp/libresihp-probe.la $(UNIT_LDADD)
TESTS += tests/unit/test_probe
endif

check_PROGRAMS += tests/fuzz/fuzz_options tests/fuzz/fuzz_rundir_name
tests_fuzz_fuzz_options_SOURCES = tests/fuzz/fuzz_options.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_options_LDADD = libresihp/libresihp-core.la
TESTS += tests/fuzz/fuzz_options
# The names root's stale-directory clean-up parses (rundir.c).
tests_fuzz_fuzz_rundir_name_SOURCES = tests/fuzz/fuzz_rundir_name.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_rundir_name_CPPFLAGS = $(AM_CPPFLAGS) \
	-I$(top_srcdir)/libresihp/probe
tests_fuzz_fuzz_rundir_name_LDADD = libresihp/libresihp-probe.la \
	libresihp/libresihp-core.la
TESTS += tests/fuzz/fuzz_rundir_name
EXTRA_DIST += tests/fuzz/corpus/plain tests/fuzz/corpus/many \
	tests/fuzz/corpus/bad tests/fuzz/README \
	tests/fuzz/corpus-rundir/valid tests/fuzz/corpus-rundir/max \
	tests/fuzz/corpus-rundir/overflow tests/fuzz/corpus-rundir/leading-zero \
	tests/fuzz/corpus-rundir/long-suffix

# A fake libnvidia-ml for the gpu check's NVML path on GPU-less machines.
check_LTLIBRARIES = tests/fake/libfake-nvml.la
tests_fake_libfake_nvml_la_SOURCES = tests/fake/fake-nvml.c
tests_fake_libfake_nvml_la_LDFLAGS = -module -avoid-version -shared \
	-rpath /nowhere

dist_check_SCRIPTS += tests/integration/plugin-exports.test \
	tests/integration/resihp-probe.test \
	tests/integration/spank-probes.test \
	tests/integration/spank-drain.test \
	tests/integration/spank-rundir.test
TESTS += tests/integration/plugin-exports.test \
	tests/integration/resihp-probe.test \
	tests/integration/spank-probes.test \
	tests/integration/spank-drain.test \
	tests/integration/spank-rundir.test

# A spare's burn-in: the verdict, the reference, the wire form, a real run
# and the coordinator's suspect spares (issue 35).
check_PROGRAMS += tests/unit/test_burnin
tests_unit_test_burnin_SOURCES = tests/unit/test_burnin.c
tests_unit_test_burnin_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_burnin_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_burnin
