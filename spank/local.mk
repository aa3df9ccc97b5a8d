# SPDX-License-Identifier: BSD-3-Clause
# The SPANK plugin: links only libresihp's core (settings, errors), never
# CUDA/NCCL, and exports only slurm_spank_*/plugin_* symbols.
slurmplugin_LTLIBRARIES = spank/resihp.la
spank_resihp_la_SOURCES = spank/plugin.c spank/plugin.h spank/options.c \
	spank/srun.c spank/stepd.c spank/probe.c
spank_resihp_la_CPPFLAGS = $(AM_CPPFLAGS) $(SLURM_CPPFLAGS) \
	-I$(top_srcdir)/libresihp/probe
spank_resihp_la_LIBADD = libresihp/libresihp-core.la
spank_resihp_la_LDFLAGS = -module -avoid-version -shared \
	-Wl,--version-script=$(srcdir)/spank/resihp.map -Wl,-z,relro -Wl,-z,now
EXTRA_DIST += spank/resihp.map
slurmplugindir = $(slurm_plugindir)

# Slurm loads resihp.so directly: the libtool archive would only clutter the
# plugin directory.
install-exec-hook: install-exec-hook-spank
install-exec-hook-spank:
	rm -f $(DESTDIR)$(slurmplugindir)/resihp.la
uninstall-hook: uninstall-hook-spank
uninstall-hook-spank:
	rm -f $(DESTDIR)$(slurmplugindir)/resihp.so
.PHONY: install-exec-hook-spank uninstall-hook-spank
