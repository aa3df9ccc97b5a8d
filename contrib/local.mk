# SPDX-License-Identifier: BSD-3-Clause
EXTRA_DIST += contrib/plugstack.conf.d/resihp.conf contrib/dev/ensure-deps.sh \
	contrib/dev/demo-lab.sh contrib/dev/check-slurm-headers.sh \
	contrib/demo/run-demo.sh
include contrib/common/local.mk
include contrib/torch-gpt/local.mk
