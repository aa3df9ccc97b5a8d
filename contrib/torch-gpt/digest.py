# SPDX-License-Identifier: BSD-3-Clause
"""state_digest: a hex SHA-256 of a model's (and optimizer's) state.

Pure function of the state: tensors in name order (model), then the
optimizer's per-parameter state in index order, each as its name, dtype,
shape and raw bytes. Two replicas agree on the digest iff their state is
bitwise equal (up to SHA-256), so resihp-run can compare replicas with it.
Pass the bare model, not a DistributedDataParallel wrapper (its names carry
a "module." prefix). Tied weights appear under each of their names.
"""
import hashlib

import torch


def _tensor(h, name, t):
    t = t.detach().cpu().contiguous()
    h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
    # uint8 view: raw bytes for every dtype, bfloat16 included (numpy has none)
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _value(h, name, v):
    if torch.is_tensor(v):
        _tensor(h, name, v)
    elif isinstance(v, dict):
        for k in sorted(v, key=str):
            _value(h, f"{name}.{k}", v[k])
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _value(h, f"{name}.{i}", x)
    else:  # plain numbers, flags: repr is exact for ints and floats
        h.update(f"{name}\0{v!r}\0".encode())


def state_digest(model, optimizer=None):
    h = hashlib.sha256()
    sd = model.state_dict()
    for name in sorted(sd):
        _tensor(h, name, sd[name])
    if optimizer is not None:
        osd = optimizer.state_dict()
        _value(h, "optim.state", osd["state"])
        # hyper-parameters too (a scheduler changes lr), without the
        # parameter index lists, which say nothing about the state
        groups = [{k: v for k, v in g.items() if k != "params"}
                  for g in osd["param_groups"]]
        _value(h, "optim.groups", groups)
    return h.hexdigest()
