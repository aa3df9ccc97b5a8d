# SPDX-License-Identifier: BSD-3-Clause
# The PyTorch GPT example: installed as an example under
# $(pkgdatadir)/examples/torch-gpt (run with /usr/bin/python3, which sees
# Debian's python3-torch), and the test of its pure-PyTorch parts.
torchgptdir = $(pkgdatadir)/examples/torch-gpt
dist_torchgpt_DATA = contrib/torch-gpt/common.py \
	contrib/torch-gpt/gpt.py contrib/torch-gpt/textdata.py
dist_torchgpt_SCRIPTS = contrib/torch-gpt/reference.py \
	contrib/torch-gpt/ddp_gloo.py contrib/torch-gpt/train_gpt.py
dist_check_SCRIPTS += tests/tools/torch-gpt.test
TESTS += tests/tools/torch-gpt.test
dist_check_SCRIPTS += tests/tools/torch-gpt-stages.test
TESTS += tests/tools/torch-gpt-stages.test
