# SPDX-License-Identifier: BSD-3-Clause
"""A digest of a training state that is the same bits on every machine."""
import hashlib

import torch


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


def _update(h, name, t):
    h.update(("%s %s %s\n" % (name, t.dtype, tuple(t.shape))).encode())
    h.update(_tensor_bytes(t))


def state_digest(model, optimizer=None):
    """sha256 (hex) over the model's state_dict tensors in name order, and
    the optimizer's state tensors in parameter order, raw bytes: two states
    have the same digest only when they are bitwise equal."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        _update(h, name, t)
    if optimizer is not None:
        for i, (_, st) in enumerate(sorted(optimizer.state_dict()["state"]
                                           .items())):
            for k in sorted(st):
                if torch.is_tensor(st[k]):
                    _update(h, "opt.%d.%s" % (i, k), st[k])
    return h.hexdigest()
