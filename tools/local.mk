# SPDX-License-Identifier: BSD-3-Clause
# Command-line tools. They link the installed library (public API only).
bin_PROGRAMS += tools/resihp-info
tools_resihp_info_SOURCES = tools/resihp-info.c
tools_resihp_info_LDADD = libresihp/libresihp.la
# The PyTorch benchmark runs from the source tree (the examples, the lab
# cluster harness, build/): shipped, not installed.
EXTRA_DIST += tools/resihp-bench-torch.sh
