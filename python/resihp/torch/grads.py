# SPDX-License-Identifier: BSD-3-Clause
"""A replica's gradients for one step and their exchange.

The parameters' .grad are views into one flat float32 buffer, so backward
accumulates straight into it. Three trailing slots carry the step's loss
and, at step 0, a check that every replica starts from the same parameters
(a digest word and a count: the sums agree only if every replica put the
same word).

deterministic: each microbatch's gradient is added to an int64 fixed-point
accumulator (libresihp's resihp_fixed_*) and the float buffer cleared; the
exchange sums the accumulators exactly, so the result does not depend on
which replica computed which microbatch. float32 / bfloat16: microbatches
accumulate in float and the exchange sums floats (bfloat16 on the wire).

Buckets. The exchange goes bucket by bucket (bucket_bytes each, in the
reverse order of the parameters: the order backward finishes them), from a
copy of the local sum (the "wire"): a bucket reduced before a peer failed
already holds the dead replica's share, so after a failure every bucket is
exchanged again from the local sums plus the reassigned microbatches, which
stay intact. During the backward of the step's last microbatch, a bucket
whose gradients are all done is exchanged at once from a thread
(overlap.py), while backward goes on with the others. Every replica
exchanges the buckets in the same order, the slots last.

Layers (the pipeline's move_layers). The library checks each exchange
against the rank's layers (resihp_job_set_layers: the layers' elements,
the slots counted with the last layer): the parameters are then in the
layers' order (order=), and one exchange carries them all, with the slots
only on the rank that holds the last layer (exchange_slots); the others
get the slots' sums from it (pipeline.py). No overlap: the layer-keyed
groups take the whole gradient in one call.

Devices. The parameters live on the CPU or on one CUDA device; the float
buffer and the accumulator live there too (on a CUDA device the fixed-point
arithmetic is torch ops giving the C reference's bits: fixed.py). The wire
is always host memory, as libresihp reads it: pinned for a CUDA model.
prepare() copies a bucket to it and exchange() copies the result back, both
synchronously, also without a job (standalone), so the reference takes the
same path as a resilient run."""
import torch

from .. import job as _job
from ..errors import ProgramError
from . import fixed
from .device import host_buffer, one_device
from .overlap import Overlap

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


def trained(optimizer):
    """The optimizer's trained parameters (float32, on one device) and
    their device, or a ProgramError."""
    params = _params(optimizer)
    device = one_device((("a parameter of shape %s" % (tuple(p.shape),), p)
                         for p in params), "the trained parameters")
    for p in params:
        if p.dtype != torch.float32:
            raise ProgramError(
                "a parameter of dtype %s: resihp.torch trains float32 "
                "parameters (bfloat16 is available for the exchange: "
                "mode='bfloat16')" % p.dtype)
    return params, device


class _NoOverlap:
    armed = False


class Gradients:
    def __init__(self, optimizer, mode, bucket_bytes=25 << 20, order=None,
                 exchange_slots=True):
        if mode not in MODES:
            raise ProgramError("mode '%s': use one of %s" % (mode,
                                                             ", ".join(MODES)))
        self.mode = mode
        self.params, self.device = trained(optimizer)
        if order is not None:  # the layers' order (see Layers above)
            order = list(order)
            if len(order) != len(self.params) or \
                    {id(p) for p in order} != {id(p) for p in self.params}:
                raise ProgramError(
                    "the layers' parameters are not the optimizer's trained "
                    "parameters: the optimizer function must take every "
                    "parameter it is given (and the layers' parameters "
                    "require gradients)")
            self.params = order
        self.n = sum(p.numel() for p in self.params)
        self.flat = torch.zeros(self.n + _SLOTS, dtype=torch.float32,
                                device=self.device)
        self.views, self.offsets, off = [], [], 0
        for p in self.params:
            self.views.append(self.flat[off:off + p.numel()].view_as(p))
            self.offsets.append(off)
            off += p.numel()
        self.fb = _job.fixed_frac_bits()
        wire_dtype, self.dtype = {
            "deterministic": (torch.int64, _job.FIXED64),
            "float32": (torch.float32, _job.FLOAT32),
            "bfloat16": (torch.bfloat16, _job.BFLOAT16)}[mode]
        self.wire = host_buffer(self.n + _SLOTS, wire_dtype, self.device)
        if mode == "deterministic":
            self.acc = torch.zeros(self.n + _SLOTS, dtype=torch.int64,
                                   device=self.device)
        # the elements exchanged: all of them, or the parameters' alone
        self.exchanged = self.n + (_SLOTS if exchange_slots else 0)
        if order is not None:
            self.buckets = [(0, self.n + _SLOTS, list(range(len(self.params))))]
            self.overlap = _NoOverlap()
        else:
            self.buckets = self._make_buckets(max(1, int(bucket_bytes)))
            self.overlap = Overlap(self)

    def _make_buckets(self, bucket_bytes):
        """[(lo, hi, parameter indices)] in exchange order; the slots last."""
        out, cur, lo, hi = [], [], None, None
        for i in reversed(range(len(self.params))):
            a, b = self.offsets[i], self.offsets[i] + self.params[i].numel()
            cur.append(i)
            lo, hi = a, (b if hi is None else hi)
            if (hi - lo) * 4 >= bucket_bytes:
                out.append((lo, hi, cur))
                cur, lo, hi = [], None, None
        if cur:
            out.append((lo, hi, cur))
        out.append((self.n, self.n + _SLOTS, []))
        return out

    def start(self, check_word=None):
        """A new step: zero gradients; check_word at step 0."""
        self.flat.zero_()
        for p, v in zip(self.params, self.views):
            p.grad = v
        if self.mode == "deterministic":
            self.acc.zero_()
        self.check = check_word
        tail = (self.acc if self.mode == "deterministic" else self.flat)[self.n:]
        if check_word is not None:
            tail[1], tail[2] = check_word, 1

    def gather(self, i):
        """Parameter i's gradient into the flat buffer, if a user's
        zero_grad or an optimizer detached it."""
        p, v = self.params[i], self.views[i]
        g = p.grad
        if g is None:
            v.zero_()
        elif g.data_ptr() != v.data_ptr():
            v.copy_(g)
        p.grad = v

    def add_microbatch(self, loss_over_m):
        """After one microbatch's backward of loss/M."""
        if self.overlap.armed:  # the buckets were taken as they finished
            self.flat[self.n] += loss_over_m
            return
        for i in range(len(self.params)):
            self.gather(i)
        self.flat[self.n] += loss_over_m
        if self.mode == "deterministic":
            fixed.accumulate(self.acc[:self.n + 1], self.flat[:self.n + 1],
                             self.fb)
            self.flat.zero_()

    def prepare(self, bucket, fresh):
        """The wire gets a bucket's local sum. fresh: the bucket's last
        microbatch is still in the float buffer (overlap), not yet in the
        fixed-point accumulator. The copy to the wire is synchronous: the
        wire is complete when this returns."""
        lo, hi, _ = bucket
        if self.mode == "deterministic":
            if fresh:
                hi_f = min(hi, self.n + 1)  # the loss slot, not the check
                fixed.accumulate(self.acc[lo:hi_f], self.flat[lo:hi_f],
                                 self.fb)
                self.flat[lo:hi_f].zero_()
            self.wire[lo:hi].copy_(self.acc[lo:hi])
        else:
            self.wire[lo:hi].copy_(self.flat[lo:hi])

    def reduce(self, bucket, job):
        """Exchange one bucket of the wire; None or the reassigned ids."""
        lo, hi, _ = bucket
        if job is None:
            return None
        w = self.wire[lo:]
        return job.allreduce(w.data_ptr(), min(hi, self.exchanged) - lo,
                             self.dtype)

    def exchange(self, job):
        """Sum over the replicas (job None: this process is all of them).
        Returns None when the gradients hold the step's result, else the
        microbatch ids reassigned to this replica."""
        if self.overlap.armed:
            extra = self.overlap.finish()
        else:
            extra = None
            for b in self.buckets:
                self.prepare(b, False)
                extra = self.reduce(b, job)
                if extra is not None:
                    break
        if extra is not None:
            return extra
        if self.mode == "deterministic":
            if self.device.type == "cpu":
                sums = self.wire
            else:  # the accumulator is free until the next start()
                sums = self.acc
                sums.copy_(self.wire)
            fixed.to_float(self.flat[:self.n + 1], sums[:self.n + 1],
                           self.fb)
            self.tail = [float(self.flat[self.n]), int(self.wire[self.n + 1]),
                         int(self.wire[self.n + 2])]
        else:
            self.flat.copy_(self.wire)
            self.tail = [float(x) for x in self.flat[self.n:].tolist()]
        for p, v in zip(self.params, self.views):
            p.grad = v
        return None

    def loss(self):
        """The step's mean loss over its M microbatches (after exchange)."""
        return self.tail[0]

    def start_sums(self):
        """After exchange: the sums of the start check's word and count."""
        return self.tail[1], self.tail[2]
