# SPDX-License-Identifier: BSD-3-Clause
# The coordinator's failover: snapshot and restore of its state
# (coord_snapshot.c), its unit test and the restore parser's fuzz target.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/control/coord_snapshot.c
