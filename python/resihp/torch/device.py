# SPDX-License-Identifier: BSD-3-Clause
"""Where a model's tensors live, and their host copies.

resihp.torch trains a model on the CPU or on one CUDA device. libresihp
only ever sees host memory: a tensor on a CUDA device is staged through a
page-locked (pinned) CPU tensor of the same shape, copied to and fro by
Python (grads.py: the exchange's wire; state.py: the catch-up buffers)."""
import torch

from ..errors import ProgramError

_HOW = ("move the whole model there with model.to(device) before building "
        "the optimizer")


def check_tensor(name, t):
    """Refuse a tensor resihp.torch cannot exchange or copy."""
    if t.device.type == "meta":
        raise ProgramError(
            "%s is on the 'meta' device, which holds no data: materialise "
            "the model on the CPU or on one CUDA device (e.g. "
            "model.to_empty(device=...) then initialise it) before "
            "training" % name)
    if t.device.type not in ("cpu", "cuda"):
        raise ProgramError(
            "%s is on %s: resihp.torch trains models on the CPU or on one "
            "CUDA device (%s)" % (name, t.device, _HOW))
    if not t.is_contiguous():
        raise ProgramError("%s is not contiguous: call .contiguous() on it "
                           "before training" % name)


def one_device(named, what):
    """The device of every tensor in named [(name, tensor)]: the CPU or one
    CUDA device. what says what they are, for the messages."""
    dev = None
    for name, t in named:
        check_tensor(name, t)
        d = t.device
        if d.type == "cuda" and d.index is None:
            d = torch.device("cuda", torch.cuda.current_device())
        if dev is None:
            dev = d
        elif d != dev:
            raise ProgramError(
                "%s are on %s and %s (%s): resihp.torch wants them all on "
                "one device, the CPU or one CUDA device: %s" %
                (what, dev, d, name, _HOW))
    return dev if dev is not None else torch.device("cpu")


def cuda_of(named, what):
    """The one CUDA device among named [(name, tensor)] (None if all are
    on the CPU): the tensors of a replica's state may mix the CPU (small
    buffers, optimizer step counts) with one CUDA device, not two."""
    dev = None
    for name, t in named:
        check_tensor(name, t)
        if t.device.type != "cuda":
            continue
        d = t.device if t.device.index is not None else torch.device(
            "cuda", torch.cuda.current_device())
        if dev is None:
            dev = d
        elif d != dev:
            raise ProgramError(
                "%s are on %s and %s (%s): resihp.torch trains a model on one "
                "CUDA device at most: %s" % (what, dev, d, name, _HOW))
    return dev


def pinned_like(t):
    """A page-locked CPU tensor with t's shape and dtype (zeros)."""
    return torch.empty(tuple(t.shape), dtype=t.dtype,
                       pin_memory=True).zero_()


def host_buffer(n, dtype, dev):
    """n elements of dtype that libresihp reads and writes: plain CPU memory
    for a CPU model, pinned memory when dev is a CUDA device."""
    if dev.type == "cuda":
        return torch.empty(n, dtype=dtype, pin_memory=True).zero_()
    return torch.zeros(n, dtype=dtype)
