# SPDX-License-Identifier: BSD-3-Clause
"""resihp for Python: the replica side of a resilient training job run by
resihp-run(1). resihp.torch has the PyTorch Trainer and DDP adapter."""
from .comm import Comm
from .errors import ProgramError, ResihpError
from .job import (BFLOAT16, FIXED64, FLOAT32, FLOAT64, OP_AVG, OP_SUM, Job,
                  Step, version)

__all__ = ["Job", "Comm", "Step", "ResihpError", "ProgramError", "FLOAT32",
           "BFLOAT16", "FLOAT64", "FIXED64", "OP_SUM", "OP_AVG", "version"]
