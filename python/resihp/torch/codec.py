# SPDX-License-Identifier: BSD-3-Clause
"""A safe encoding for the small state that is not in tensors (optimizer
hyper-parameters, LR scheduler, RNG): JSON with tags for what JSON lacks
(tuples, dicts with non-string keys, bytes, small tensors). Unlike pickle,
decoding what a peer sent cannot run code; anything else is refused."""
import base64
import binascii
import json

import torch

_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16,
                               torch.bfloat16, torch.int64, torch.int32,
                               torch.int16, torch.int8, torch.uint8,
                               torch.bool)}


def _enc(x):
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return [_enc(v) for v in x]
    if isinstance(x, tuple):
        return {"t": [_enc(v) for v in x]}
    if isinstance(x, dict):
        return {"d": [[_enc(k), _enc(v)] for k, v in x.items()]}
    if isinstance(x, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(x)).decode()}
    if torch.is_tensor(x):
        t = x.detach().cpu().contiguous()
        if str(t.dtype) not in _DTYPES:
            raise TypeError("a tensor of dtype %s" % t.dtype)
        flat = t.reshape(-1)
        raw = flat.view(torch.uint8) if t.dtype != torch.bool else flat.to(
            torch.uint8)
        return {"x": str(t.dtype), "s": list(t.shape),
                "v": base64.b64encode(bytes(raw.numpy())).decode()}
    raise TypeError("cannot encode a %s in the replica state" %
                    type(x).__name__)


def _dec(x):
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if isinstance(x, dict) and len(x) == 1 and "t" in x:
        return tuple(_dec(v) for v in x["t"])
    if isinstance(x, dict) and len(x) == 1 and "d" in x:
        return {_dec(k): _dec(v) for k, v in x["d"]}
    if isinstance(x, dict) and len(x) == 1 and "b" in x:
        return base64.b64decode(x["b"], validate=True)
    if isinstance(x, dict) and set(x) == {"x", "s", "v"}:
        dtype = _DTYPES[x["x"]]
        raw = bytearray(base64.b64decode(x["v"], validate=True))
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.zeros(
            0, dtype=torch.uint8)
        t = t.to(torch.bool) if dtype == torch.bool else t.view(dtype)
        return t.reshape([int(n) for n in x["s"]]).clone()
    raise ValueError("malformed replica state")


def encode(obj):
    return json.dumps(_enc(obj), separators=(",", ":")).encode()


def decode(blob):
    """The object encode() wrote; ValueError for anything else (a shape
    of Infinity included: OverflowError is no answer to a peer's bytes)."""
    try:
        return _dec(json.loads(blob.decode()))
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError,
            OverflowError, MemoryError, binascii.Error,
            RecursionError) as e:
        raise ValueError("malformed replica state (%s)" % e) from None
