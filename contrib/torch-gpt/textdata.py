# SPDX-License-Identifier: BSD-3-Clause
"""Real text every Debian system has, as deterministic byte microbatches.

The default corpus is /usr/share/common-licenses (base-files: GPL-2, GPL-3,
LGPL-2.1, Apache-2.0, MPL-2.0, Artistic, ...): files sorted by name, each
read once (GPL is a symlink to GPL-3 and is skipped as a duplicate), so every
replica on every Debian 12 builds the same bytes. The first 95% is the
training split, the rest is held out.

Microbatch mb of step s is drawn from (seed, s, mb) alone, so whichever
process computes it (its own replica, a peer that took it over after a
failure, the single-process reference) gets the same bytes.
"""
import os
import random

import torch

DEFAULT_CORPUS = "/usr/share/common-licenses"
TRAIN_FRACTION = 0.95
_M64 = (1 << 64) - 1


class CorpusError(Exception):
    """The corpus cannot be used; the message says what to do."""


def mix(*xs):
    """Mix integers into a 63-bit seed (splitmix64 steps): distinct tuples
    give unrelated streams, and the value is the same in every process."""
    z = 0x9E3779B97F4A7C15
    for x in xs:
        z = (z + (int(x) & _M64) + 0x9E3779B97F4A7C15) & _M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        z ^= z >> 31
    return z >> 1


# Tags the data stream: unrelated to the torch (dropout) seed of the same
# (seed, step, mb), which resihp.torch derives by its own hash.
DATA_STREAM = 1


def _files(path):
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        seen, out = set(), []
        for n in names:
            p = os.path.join(path, n)
            real = os.path.realpath(p)
            if os.path.isfile(real) and real not in seen:
                seen.add(real)
                out.append(p)
        return out
    if os.path.isfile(path):
        return [path]
    raise CorpusError(f"corpus {path}: no such file or directory; give "
                      f"--corpus a text file or a directory of text files")


class Corpus:
    def __init__(self, path=None, device="cpu"):
        """device: where the windows go (the model's device)."""
        self.device = torch.device(device)
        path = path or DEFAULT_CORPUS
        files = _files(path)
        data = b"".join(open(f, "rb").read() for f in files)
        if not data:
            raise CorpusError(
                f"corpus {path}: no text found (no non-empty regular files); "
                f"install base-files or give --corpus a text file or directory")
        self.path, self.files, self.size = path, files, len(data)
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        cut = int(len(data) * TRAIN_FRACTION)
        self.train, self.val = t[:cut], t[cut:]

    def _need(self, split, name, ctx):
        if len(split) < ctx + 2:
            raise CorpusError(
                f"corpus {self.path}: its {name} split has {len(split)} bytes, "
                f"too few for windows of ctx {ctx} + 1: use more text or a "
                f"smaller --ctx")

    def _windows(self, split, offsets, ctx):
        idx = torch.tensor(offsets, dtype=torch.long)[:, None] + \
            torch.arange(ctx + 1)
        w = split[idx].long().to(self.device)
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def microbatch(self, step, mb, batch, ctx, seed):
        """(x, y): LongTensors [batch, ctx], y is x shifted by one byte;
        windows at offsets drawn from (seed, step, mb) only. Python's
        random.Random, not torch's generator: same draws on every torch."""
        self._need(self.train, "training", ctx)
        r = random.Random(mix(seed, step, mb, DATA_STREAM))
        hi = len(self.train) - ctx - 1
        return self._windows(self.train,
                             [r.randrange(hi + 1) for _ in range(batch)], ctx)

    def eval_batch(self, batch, ctx):
        """Held-out windows, evenly spaced over the split (no randomness)."""
        self._need(self.val, "held-out", ctx)
        hi = len(self.val) - ctx - 1
        return self._windows(self.val,
                             [i * hi // max(batch - 1, 1) for i in range(batch)],
                             ctx)


def fixed_workload(batch, ctx):
    """The Trainer's workload fn for fixed-length windows: every microbatch
    is batch sequences of ctx tokens (tokens, sum of squared lengths, count)."""
    def workload(step, mb):
        return float(batch * ctx), float(batch * ctx * ctx), float(batch)
    return workload
