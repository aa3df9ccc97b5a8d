# SPDX-License-Identifier: BSD-3-Clause
# libresihp. Three layers:
#  - libresihp-core.la: errors, logging, settings; small, no threads of its
#    own, safe inside slurmstepd (the SPANK plugin links only this);
#  - libresihp-internal.la: core + every module; unit tests link this to
#    reach internal (resihp__) functions;
#  - libresihp.la: the installed library, exporting only public resihp_*.
noinst_LTLIBRARIES += libresihp/libresihp-core.la libresihp/libresihp-internal.la
libresihp_libresihp_core_la_SOURCES = \
	libresihp/core/errbuf.c libresihp/core/errbuf.h \
	libresihp/core/error.c \
	libresihp/core/log.c \
	libresihp/core/ownfile.c libresihp/core/ownfile.h \
	libresihp/core/settings.c \
	libresihp/core/version.c

libresihp_libresihp_internal_la_SOURCES =
libresihp_libresihp_internal_la_LIBADD = libresihp/libresihp-core.la

lib_LTLIBRARIES += libresihp/libresihp.la
libresihp_libresihp_la_SOURCES =
libresihp_libresihp_la_LIBADD = libresihp/libresihp-internal.la
libresihp_libresihp_la_LDFLAGS = -version-info $(RESIHP_LT_VERSION) \
	-export-symbols-regex '^resihp_[a-z]'

include_HEADERS = libresihp/include/resihp.h
resihpincludedir = $(includedir)/resihp
resihpinclude_HEADERS = \
	libresihp/include/resihp/error.h \
	libresihp/include/resihp/log.h \
	libresihp/include/resihp/settings.h

pkgconfig_DATA = libresihp/libresihp.pc
DISTCLEANFILES += libresihp/libresihp.pc
EXTRA_DIST += libresihp/libresihp.pc.in

# Modules add their sources here (one local.mk per concern).
# (libresihp.la has no sources of its own; this makes libtool link it as C.)
nodist_EXTRA_libresihp_libresihp_la_SOURCES = dummy.c

# Deterministic mode on GPU buffers (nvcc-built kernels; only with HAVE_NVCC).
include libresihp/collectives/fixed_point_gpu.mk

# The GPU part of the spares' burn-in (nvcc-built kernels; only with HAVE_NVCC).
include libresihp/probe/burnin_gpu.mk

# The tools link libresihp.so.0. Installed into a directory the dynamic
# linker finds only through its cache (/usr/local/lib on Debian: libtool sets
# no RPATH for a directory /etc/ld.so.conf lists), they fail with "cannot
# open shared object file" until ldconfig rebuilds the cache: do it here when
# installing for real (no DESTDIR: a staged install, e.g. a package build,
# leaves it to the package's trigger or scriptlet) and as root (nobody else
# may write the cache; others are told). ldconfig also runs at uninstall so
# that the cache forgets the library.
LDCONFIG = /sbin/ldconfig
install-exec-hook: install-exec-hook-ldconfig
install-exec-hook-ldconfig:
	@if test -n "$(DESTDIR)"; then :; \
	elif test "`id -u`" != 0; then \
	  echo "note: run '$(LDCONFIG)' as root if $(libdir) is in the dynamic linker's search path (/etc/ld.so.conf)"; \
	elif test -x "$(LDCONFIG)"; then \
	  echo " $(LDCONFIG)"; $(LDCONFIG) || echo "warning: $(LDCONFIG) failed: run it by hand"; \
	fi
uninstall-hook: uninstall-hook-ldconfig
uninstall-hook-ldconfig:
	@if test -z "$(DESTDIR)" && test "`id -u`" = 0 && test -x "$(LDCONFIG)"; then \
	  $(LDCONFIG) || :; fi
.PHONY: install-exec-hook-ldconfig uninstall-hook-ldconfig
