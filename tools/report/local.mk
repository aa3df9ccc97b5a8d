# SPDX-License-Identifier: BSD-3-Clause
# resihp-report: a run's report (HTML with an inline SVG timeline, SVG or
# PNG) from resihp-run's events, drawn with Debian's python3-matplotlib. A
# Python script: installed with the interpreter configure found.
bin_SCRIPTS += tools/resihp-report
tools/resihp-report: $(top_srcdir)/tools/report/resihp_report.py Makefile
	$(AM_V_GEN)mkdir -p tools && \
	sed '1s|^#!.*|#!$(PYTHON)|' $(top_srcdir)/tools/report/resihp_report.py > $@.tmp && \
	chmod +x $@.tmp && mv $@.tmp $@
CLEANFILES += tools/resihp-report
EXTRA_DIST += tools/report/resihp_report.py
dist_man_MANS += man/resihp-report.1
# the report of a real lab run with every kind of event, checked element
# by element; in a headless chromium, offline; its parser fuzzed
dist_check_SCRIPTS += tests/tools/report.test tests/tools/report-browser.test \
	tests/fuzz/fuzz_report.test
TESTS += tests/tools/report.test tests/tools/report-browser.test \
	tests/fuzz/fuzz_report.test
EXTRA_DIST += tests/tools/report/run.events tests/tools/report/make-fixture.sh \
	tests/tools/report/report_test.py tests/tools/report/browser_test.py \
	tests/fuzz/fuzz_report.py
