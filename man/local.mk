# SPDX-License-Identifier: BSD-3-Clause
dist_man_MANS += man/resihp.8 man/libresihp.3 man/resihp-info.1
