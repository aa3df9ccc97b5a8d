# SPDX-License-Identifier: BSD-3-Clause
# The Python package resihp (ctypes binding + resihp.torch), installed into
# the site directory of the interpreter configure found ($(pythondir)).
# Plain files, no byte-compiling: the package has no build step.
resihppydir = $(pythondir)/resihp
dist_resihppy_DATA = \
	python/resihp/__init__.py python/resihp/_lib.py \
	python/resihp/errors.py python/resihp/job.py \
	python/resihp/comm.py
nodist_resihppy_DATA = python/resihp/_installed.py
resihptorchdir = $(pythondir)/resihp/torch
dist_resihptorch_DATA = \
	python/resihp/torch/__init__.py python/resihp/torch/codec.py \
	python/resihp/torch/ddp.py python/resihp/torch/device.py \
	python/resihp/torch/buffers.py \
	python/resihp/torch/shard.py \
	python/resihp/torch/digest.py python/resihp/torch/fixed.py \
	python/resihp/torch/grads.py python/resihp/torch/layers.py \
	python/resihp/torch/overlap.py \
	python/resihp/torch/pipeline.py \
	python/resihp/torch/state.py python/resihp/torch/trainer.py

# where make install puts libresihp, for _lib.py to find it
python/resihp/_installed.py: Makefile
	$(AM_V_GEN)mkdir -p python/resihp && \
	{ echo '# SPDX-License-Identifier: BSD-3-Clause'; \
	  echo '# written by make: where libresihp is installed'; \
	  echo 'LIBDIR = "$(libdir)"'; } > $@
CLEANFILES += python/resihp/_installed.py
