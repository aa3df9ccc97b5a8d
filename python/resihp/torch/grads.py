# SPDX-License-Identifier: BSD-3-Clause
"""A replica's gradients for one step and their exchange.

The parameters' .grad are views into one flat float32 buffer, so backward
accumulates straight into what is exchanged. Two trailing slots carry the
step's loss and, at step 0, a check that every replica starts from the same
parameters (a digest word and a count: the sums agree only if every replica
put the same word).

deterministic: after each microbatch its gradient is added to an int64
fixed-point accumulator (libresihp's resihp_fixed_*) and the float buffer is
cleared; the exchange sums the accumulators exactly, so the result does not
depend on which replica computed which microbatch. float32 / bfloat16: the
microbatches accumulate in float, the exchange sums floats (bfloat16 on the
wire). Either way a failed exchange leaves the local sum untouched: the
reassigned microbatches are added to it and the exchange runs again."""
import torch

from .. import job as _job
from ..errors import ProgramError

MODES = ("deterministic", "float32", "bfloat16")
_SLOTS = 3  # loss, check word, count


def _params(optimizer):
    out, seen = [], set()
    for g in optimizer.param_groups:
        for p in g["params"]:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


class Gradients:
    def __init__(self, optimizer, mode, microbatches):
        if mode not in MODES:
            raise ProgramError("mode '%s': use one of %s" % (mode,
                                                             ", ".join(MODES)))
        self.mode, self.m = mode, microbatches
        self.params = _params(optimizer)
        for p in self.params:
            if p.dtype != torch.float32:
                raise ProgramError(
                    "a parameter of dtype %s: resihp.torch trains float32 "
                    "parameters (bfloat16 is available for the exchange: "
                    "mode='bfloat16')" % p.dtype)
        self.n = sum(p.numel() for p in self.params)
        self.flat = torch.zeros(self.n + _SLOTS, dtype=torch.float32)
        self.views, off = [], 0
        for p in self.params:
            self.views.append(self.flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        self.fb = _job.fixed_frac_bits()
        if mode == "deterministic":
            self.acc = torch.zeros(self.n + _SLOTS, dtype=torch.int64)
        elif mode == "bfloat16":
            self.wire = torch.zeros(self.n + _SLOTS, dtype=torch.bfloat16)

    def start(self, check_word=None):
        """A new step: zero gradients; check_word at step 0."""
        self.flat.zero_()
        for p, v in zip(self.params, self.views):
            p.grad = v
        if self.mode == "deterministic":
            self.acc.zero_()
        self.check = check_word
        tail = self._tail()
        if check_word is not None:
            tail[1], tail[2] = check_word, 1

    def _tail(self):
        buf = self.acc if self.mode == "deterministic" else self.flat
        return buf[self.n:]

    def _gather(self):
        """Gradients a user's zero_grad or an optimizer detached from the
        flat buffer go back into it."""
        for p, v in zip(self.params, self.views):
            g = p.grad
            if g is None:
                v.zero_()
            elif g.data_ptr() != v.data_ptr():
                v.copy_(g)
            p.grad = v

    def add_microbatch(self, loss_over_m):
        """After one microbatch's backward of loss/M."""
        self._gather()
        if self.mode == "deterministic":
            self.flat[self.n] = loss_over_m
            _job.fixed_accumulate_float(self.acc.data_ptr(),
                                        self.flat.data_ptr(), self.n + 1,
                                        self.fb)
            self.flat.zero_()
        else:
            self.flat[self.n] += loss_over_m

    def exchange(self, job):
        """Sum over the replicas (job None: this process is all of them).
        Returns None when the gradients hold the step's result, else the
        microbatch ids reassigned to this replica."""
        self._gather()
        count = self.n + _SLOTS
        if self.mode == "deterministic":
            if job is not None:
                extra = job.allreduce(self.acc.data_ptr(), count,
                                      _job.FIXED64)
                if extra is not None:
                    return extra
            _job.fixed_to_float(self.flat.data_ptr(), self.acc.data_ptr(),
                                self.n + 1, self.fb)
            self.tail = [float(self.flat[self.n]), int(self.acc[self.n + 1]),
                         int(self.acc[self.n + 2])]
        else:
            if self.mode == "bfloat16":
                self.wire.copy_(self.flat)
                buf, dtype = self.wire, _job.BFLOAT16
            else:
                buf, dtype = self.flat, _job.FLOAT32
            if job is not None:
                extra = job.allreduce(buf.data_ptr(), count, dtype)
                if extra is not None:
                    return extra
            if self.mode == "bfloat16":
                self.flat.copy_(self.wire)
            self.tail = [float(x) for x in self.flat[self.n:]]
        for p, v in zip(self.params, self.views):
            p.grad = v
        return None

    def loss(self):
        """The step's mean loss over its M microbatches (after exchange)."""
        return self.tail[0]

    def same_start(self):
        """At step 0: did every replica start from the same parameters?"""
        word, count = self.tail[1], self.tail[2]
        return count <= 0 or word == self.check * count
