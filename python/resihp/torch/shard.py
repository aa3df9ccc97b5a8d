# SPDX-License-Identifier: BSD-3-Clause
"""Sharded replicas (Trainer(..., shard=True)): FSDP/ZeRO-3 over a replica's
K ranks, data parallel and fault tolerant across replicas (HSDP).

Layout. The trained parameters (the optimizer's, in its order) are one flat
vector of n float32 elements, followed by three slots (the step's loss, the
start check's word and count, as in grads.py): N = n + 3 elements, cut into
K blocks by resihp_block (resihp.comm.block). Rank k of the replica owns
block k: its part of the parameters is the only copy it keeps between
steps, and the optimizer steps on it: each param_group's parameters are
replaced by one flat parameter, that group's part of the block (views of
one tensor, possibly empty), so the optimizer's state (moments) exists for
the block only: about 1/K of the replica's. Only elementwise optimizers
(SGD, Adam, AdamW, ...: no norm over a whole tensor, as LAMB takes) give
the same update on a block as on the whole tensors.

A step (whole model; per-layer gathering is a later step):
- all-gather the blocks (the replica communicator) into a full flat
  vector, the model's parameters become views of it;
- the step's microbatches are split over the K ranks (the i-th of the
  list on rank i mod K, reassigned ones too): each computes its
  microbatches' full gradient (into a flat buffer, accumulated in 64-bit
  fixed point in deterministic mode, as grads.py);
- reduce-scatter the K ranks' sums within the replica: rank k gets block
  k's sum (exact in fixed point, so the split does not change a bit);
- the fault-tolerant all-reduce of the block across replicas, in the
  job's group of shard k (resihp_job(3)); if a replica failed, the
  survivors compute its microbatches too (split again) and the exchange
  starts again from the intact local sums;
- the slots reach every rank of the replica (broadcast from their owner);
  with a before_step hook the summed gradient is all-gathered into the
  model's .grad (clip_grad_norm_ then sees every shard: the same on every
  rank, bitwise standalone=True's) and the rank keeps its block of what the
  hook left;
- the full parameters and gradients are freed, the optimizer steps on the
  block, the scheduler steps, the rank's state commits.

State. What a replacement's rank k receives from rank k of a healthy
replica (libresihp: the K transfers in parallel) is this rank's state only:
its block of the parameters, its optimizer state, the model's buffers and
frozen parameters (the same on every rank), and the meta state (optimizer
state_dict without tensors, scheduler, RNG, extra_state) of the rank: a
ReplicaState over a module that holds the block (ShardModule).

Without resihp-run (standalone=True) shard=comm (a resihp.Comm of K
processes) runs one replica of K ranks: the same arithmetic, what the
tests compare with the unsharded standalone=True. shard=True standalone is
K = 1.

Devices: the parameters may live on a CUDA device; the blocks, the
gathered vector and the sums travel through host buffers (libresihp reads
host memory), pinned for a CUDA model."""
import ctypes
import hashlib

import torch
import torch.nn as nn

from .. import job as _job
from ..comm import block
from ..errors import ProgramError
from . import fixed
from .device import host_buffer
from .digest import _update
from .grads import MODES, trained
from .state import ReplicaState

_SLOTS = 3  # loss, check word, count (grads.py)


class _Alone:
    """The communicator of a replica of one rank (standalone, K = 1)."""
    rank, size = 0, 1

    def block(self, count):
        return 0, count

    def reduce_scatter(self, src, dst, count, dtype):
        ctypes.memmove(dst, src, count * 8 if dtype == _job.FIXED64 else
                       count * 4)

    def allgather(self, src, dst, count, dtype):
        if src != dst:
            ctypes.memmove(dst, src, count * 4)

    def bcast(self, root, addr, nbytes):
        pass


class _NoOverlap:
    armed = False  # a sharded step exchanges after backward

    def arm(self, job):
        pass


class ShardModule(nn.Module):
    """What a rank keeps: its block of the trained parameters (one flat
    parameter per param_group, in ParameterList order) and, as buffers, the
    model's other tensors (buffers, frozen parameters)."""

    def __init__(self, parts, others):
        super().__init__()
        self.parts = nn.ParameterList(parts)
        for i, (name, t) in enumerate(others):
            self.register_buffer("t%d" % i, t.detach(), persistent=True)


class Shards:
    """The flat layout, this rank's block and the step's full tensors."""

    def __init__(self, model, optimizer, comm, mode, job):
        if mode not in MODES or mode == "bfloat16":
            raise ProgramError(
                "mode '%s' with shard=: use 'deterministic' or 'float32'" %
                mode)
        if optimizer.state:
            raise ProgramError(
                "shard=: the optimizer already has state (it stepped): "
                "build the Trainer before the first optimizer step")
        self.model, self.optimizer, self.mode, self.job = (model, optimizer,
                                                           mode, job)
        self.comm = comm if comm is not None else _Alone()
        self.K, self.k = self.comm.size, self.comm.rank
        self.params, self.device = trained(optimizer)
        # shapes and sizes of the full parameters (freed between steps)
        self.shapes = [p.shape for p in self.params]
        self.sizes = [p.numel() for p in self.params]
        self.n = sum(self.sizes)
        self.N = self.n + _SLOTS
        self.lo, self.len = block(self.N, self.K, self.k)
        hi = min(self.lo + self.len, self.n)
        self.plen = max(0, hi - self.lo)  # parameter elements of the block
        self.fb = _job.fixed_frac_bits()
        self.dtype = _job.FIXED64 if mode == "deterministic" else _job.FLOAT32
        # the block (host memory, what the all-gather sends), and its view
        # on the model's device, which the optimizer steps
        self.host = host_buffer(self.len, torch.float32, self.device)
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.host[:self.plen].copy_(flat[self.lo:self.lo + self.plen])
        del flat
        self.data = (self.host if self.device.type == "cpu" else
                     self.host.to(self.device))
        self.grad = torch.zeros(self.plen, dtype=torch.float32,
                                device=self.device)
        # one flat parameter per param_group: its part of the block
        self.parts, self.spans, off = [], [], 0
        for g in optimizer.param_groups:
            glen = sum(p.numel() for p in g["params"] if p.requires_grad)
            a, b = max(self.lo, off), min(self.lo + self.plen, off + glen)
            a, b = a - self.lo, max(a, b) - self.lo
            part = nn.Parameter(self.data[a:b])
            part.grad = self.grad[a:b]
            self.parts.append(part)
            self.spans.append((a, b))
            off += glen
        for g, part in zip(optimizer.param_groups, self.parts):
            g["params"] = [part]  # the optimizer now steps the block
        self._free()
        self.hooked = False  # the model's .grad hold the full sum (hook)

    def _views(self, flat):
        """The parameters' shaped views of a flat vector."""
        out, off = [], 0
        for shape, size in zip(self.shapes, self.sizes):
            out.append(flat[off:off + size].view(shape))
            off += size
        return out

    def share(self, mbs):
        """This rank's microbatches of a list the replica's ranks got."""
        return [mb for i, mb in enumerate(mbs) if i % self.K == self.k]

    def _free(self):
        """Drop the full parameters and gradients (between steps)."""
        empty = torch.empty(0, dtype=torch.float32, device=self.device)
        for p in self.params:
            p.data = empty
            p.grad = None
        self.full = self.flat = self.acc = None
        self.gathered = False

    def _gather_host(self, src):
        """The all-gather of a block-shaped host vector: N host floats."""
        out = host_buffer(self.N, torch.float32, self.device)
        self.comm.allgather(src.data_ptr(), out.data_ptr(), self.N,
                            _job.FLOAT32)
        return out

    def gather(self):
        """The model's parameters, full, for the step (idempotent)."""
        if self.gathered:
            return
        if self.device.type != "cpu":
            self.host.copy_(self.data)
        full = self._gather_host(self.host)
        self.full = full if self.device.type == "cpu" else full.to(
            self.device)
        for p, v in zip(self.params, self._views(self.full)):
            p.data = v
        self.gathered = True

    # -- the gradients (the interface of grads.Gradients) -----------------
    overlap = _NoOverlap()

    def start(self, check_word=None):
        self.gather()
        self.flat = torch.zeros(self.N, dtype=torch.float32,
                                device=self.device)
        for p, v in zip(self.params, self._views(self.flat)):
            p.grad = v
        self.acc = (torch.zeros(self.N, dtype=torch.int64, device=self.device)
                    if self.mode == "deterministic" else self.flat)
        self.check = check_word
        if check_word is not None:
            self.acc[self.n + 1], self.acc[self.n + 2] = check_word, 1

    def add_microbatch(self, loss_over_m):
        # a user's zero_grad or optimizer may have detached a gradient
        for p, v in zip(self.params, self._views(self.flat)):
            if p.grad is None:
                v.zero_()
            elif p.grad.data_ptr() != v.data_ptr():
                v.copy_(p.grad)
            p.grad = v
        self.flat[self.n] += loss_over_m
        if self.mode == "deterministic":
            fixed.accumulate(self.acc[:self.n + 1], self.flat[:self.n + 1],
                             self.fb)
            self.flat.zero_()

    def exchange(self, job):
        """Reduce-scatter in the replica, all-reduce of the block across
        replicas. None when done, else the reassigned microbatch ids."""
        wdt = torch.int64 if self.mode == "deterministic" else torch.float32
        if self.device.type == "cpu":  # the sums are host memory already
            src = self.acc
        else:
            src = host_buffer(self.N, wdt, self.device)
            src.copy_(self.acc)
        mine = host_buffer(max(1, self.len), wdt, self.device)
        self.comm.reduce_scatter(src.data_ptr(), mine.data_ptr(), self.N,
                                 self.dtype)
        del src
        if job is not None:
            extra = job.allreduce(mine.data_ptr(), self.len, self.dtype)
            if extra is not None:
                return extra
        # the slots, from the rank(s) whose block holds them
        tail = torch.zeros(_SLOTS, dtype=wdt)
        for s in range(_SLOTS):
            i = self.n + s
            owner = next(r for r in range(self.K) if
                         block(self.N, self.K, r)[0] <= i <
                         sum(block(self.N, self.K, r)))
            if owner == self.k:
                tail[s] = mine[i - self.lo]
            self.comm.bcast(owner, tail[s:].data_ptr(), tail.element_size())
        if self.mode == "deterministic":
            g = torch.empty(self.plen, dtype=torch.float32)
            fixed.to_float(g, mine[:self.plen].contiguous(), self.fb)
            loss = torch.empty(1, dtype=torch.float32)
            fixed.to_float(loss, tail[:1].clone(), self.fb)
            self.tail = [float(loss[0]), int(tail[1]), int(tail[2])]
        else:
            g = mine[:self.plen]
            self.tail = [float(x) for x in tail.tolist()]
        self.grad.copy_(g)
        for part, (a, b) in zip(self.parts, self.spans):
            part.grad = self.grad[a:b]
        return None

    def full_grads(self):
        """The summed gradient in the model's .grad (for a before_step
        hook): the blocks all-gathered."""
        blk = host_buffer(self.len, torch.float32, self.device)
        blk[:self.plen].copy_(self.grad)
        full = self._gather_host(blk)
        self.hooked = True
        self.flat = full if self.device.type == "cpu" else full.to(
            self.device)
        for p, v in zip(self.params, self._views(self.flat)):
            p.grad = v

    def keep_block_of_grads(self):
        """After a before_step hook: this rank's block of what it left."""
        if self.hooked:
            self.hooked = False
            self.grad.copy_(self.flat[self.lo:self.lo + self.plen])

    def loss(self):
        return self.tail[0]

    def start_sums(self):
        return self.tail[1], self.tail[2]

    def release(self):
        """The step's exchange is done: free the full tensors."""
        self._free()

    # -- the full state, for a digest -----------------------------------------
    def full_state(self):
        """[(name, tensor)] of the optimizer's state as the unsharded
        optimizer would hold it ('opt.i.key', digest.py's names): the
        per-element tensors all-gathered and cut per parameter, the scalar
        ones (step counts) as they are."""
        states = [self.optimizer.state.get(p, {}) for p in self.parts]
        keys = sorted({k for st in states for k in st
                       if torch.is_tensor(st[k])})
        per_elem, scalar = {}, {}
        for k in keys:
            blk = host_buffer(self.len, torch.float32, self.device)
            for st, (a, b) in zip(states, self.spans):
                t = st.get(k)
                if t is None:
                    continue
                if t.dim() == 0:
                    scalar[k] = t
                elif b > a:
                    blk[a:b].copy_(t.reshape(-1).float())
            if k not in scalar:
                per_elem[k] = self._gather_host(blk)
        views = {k: self._views(v) for k, v in per_elem.items()}
        out = []
        for i in range(len(self.params)):
            for k in keys:
                t = scalar[k] if k in scalar else views[k][i]
                out.append(("opt.%d.%s" % (i, k), t))
        return out


class ShardState(ReplicaState):
    """The replica state of one rank of a sharded replica (its block, its
    optimizer state, its meta), plus what needs the other ranks: the start
    check's word and the digest of the full state."""

    def __init__(self, shards, scheduler, meta_bytes, extra):
        self.shards = shards
        model = shards.model
        trained = {id(p) for p in shards.params}
        others = [(n, t) for n, t in model.state_dict(keep_vars=True).items()
                  if id(t) not in trained]
        super().__init__(ShardModule(shards.parts, others), shards.optimizer,
                         scheduler, meta_bytes, extra)

    def start_word(self):
        self.shards.gather()  # the word of the full model, as unsharded
        return int(self.digest_model()[:3], 16)

    def digest_model(self):
        h = hashlib.sha256()
        for name, t in sorted(self.shards.model.state_dict().items()):
            _update(h, name, t)
        return h.hexdigest()

    def digest(self):
        """state_digest(model, optimizer) of the unsharded state this
        replica holds (collective over the replica's ranks): the same on
        every rank, and standalone=True's when bitwise equal. The model's
        parameters stay full (Trainer.finish: to evaluate or save it)."""
        sh = self.shards
        sh.gather()
        h = hashlib.sha256()
        for name, t in sorted(sh.model.state_dict().items()):
            _update(h, name, t)
        for name, t in sh.full_state():
            _update(h, name, t)
        return h.hexdigest()

    def step_done(self, step, apply=True, after=None):
        self.shards.keep_block_of_grads()
        self.shards.release()
        super().step_done(step, apply, after)


def attach(tr, shard, standalone, workload, job_options, meta_bytes,
           extra_state):
    """Set up tr (a Trainer) as one rank of a sharded replica: tr.job,
    tr.state, tr.grads, tr.share. shard: True (the job's replica
    communicator; standalone: a replica of one rank) or a resihp.Comm."""
    if tr.mode == "bfloat16":
        raise ProgramError("mode 'bfloat16' with shard=: use "
                           "'deterministic' or 'float32'")
    comm = None if shard is True else shard
    tr.job = None
    if not standalone:
        if comm is not None:
            raise ProgramError("shard=: under resihp-run pass shard=True "
                               "(the job's replica communicator)")
        tr.job = _job.Job(tr.microbatches, tr.steps, **(job_options or {}))
        # a replica of one rank needs no communicator
        comm = tr.job.replica_comm if tr.job.shards > 1 else None
    shards = Shards(tr.model, tr.optimizer, comm, tr.mode, tr.job)
    tr.grads = shards
    tr.state = ShardState(shards, tr.scheduler, meta_bytes, extra_state)
    tr.share = shards.share
    if tr.before_step is not None:  # the hook sees the full summed gradient
        user = tr.before_step

        def before(step):
            shards.full_grads()
            return user(step)
        tr.before_step = before
    if tr.job is not None:
        tr.job.set_state(tr.state.buffers())
        if workload is not None:
            tr.job.set_workload_fn(workload)
