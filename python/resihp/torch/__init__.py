# SPDX-License-Identifier: BSD-3-Clause
"""resihp for PyTorch: a resilient Trainer loop (trainer.py) and a DDP comm
hook adapter (ddp.py). The Trainer trains models on the CPU or on one CUDA
device; the DDP adapter, CPU models. Debian's torch 1.13 and torch 2.x."""
from ..errors import ProgramError, ResihpError
from .digest import state_digest
from .trainer import Step, Trainer, microbatch_seed
from . import ddp

__all__ = ["Trainer", "Step", "state_digest", "microbatch_seed", "ddp",
           "ProgramError",
           "ResihpError"]
