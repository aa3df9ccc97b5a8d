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

A step (whole model, or unit by unit with shard_units=):
- all-gather the blocks (the replica communicator) into a full flat
  vector, the model's parameters become views of it; with units (a list
  of the model's modules, ZeRO-3/FSDP style) only the parameters of no
  unit are gathered for the whole step, and a unit's are gathered just
  before its forward (a forward pre-hook) and freed after it (a forward
  hook), gathered again just before its backward (a hook on its output's
  gradient) and freed when the next unit's backward gathers (the hook
  fires once the later units' backward is done) or the microbatch ends:
  one unit's parameters are full at a time (Shards.peak counts). The
  gathers are collectives of the replica, so every rank must gather the
  same units in the same order: each microbatch calls the units once each
  in the list's order (forward) and their backward runs in the reverse
  order, else ProgramError; a rank with fewer of the step's microbatches
  than another gathers as many times more without computing (Units.pad).
  The gradient is still accumulated for the whole model (a full flat
  buffer) and reduce-scattered after the microbatches;
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

    def __init__(self, model, optimizer, comm, mode, job, units=None):
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
        self.alive = self.peak = 0  # full parameter elements held (now, max)
        self.units = None
        self._free()
        self.hooked = False  # the model's .grad hold the full sum (hook)
        if units is not None:
            self.units = Units(self, units)

    def _views(self, flat):
        """The parameters' shaped views of a flat vector."""
        out, off = [], 0
        for shape, size in zip(self.shapes, self.sizes):
            out.append(flat[off:off + size].view(shape))
            off += size
        return out

    def _full_grads(self):
        """(parameter, its view of the step's gradient) of the parameters
        full for the whole step (a unit's get theirs when gathered)."""
        views = self._views(self.flat)
        if self.units is None:
            return list(zip(self.params, views))
        return [(self.params[i], views[i]) for i in self.units.rest]

    def share(self, mbs):
        """This rank's microbatches of a list the replica's ranks got."""
        mine = [mb for i, mb in enumerate(mbs) if i % self.K == self.k]
        if self.units is not None:  # the most any rank of the replica has
            self.units.due = -(-len(mbs) // self.K)
            self.units.done = 0
        return mine

    def _held(self, delta):
        self.alive += delta
        self.peak = max(self.peak, self.alive)

    def _gather_spans(self, spans):
        """The flat elements of spans ([(a, b)] of [0, n), the same on
        every rank) from their owners' blocks: one broadcast per owner and
        span; a tensor on the model's device."""
        total = sum(b - a for a, b in spans)
        out = host_buffer(total, torch.float32, self.device)
        o = 0
        for a, b in spans:
            for r in range(self.K):
                lo, ln = block(self.N, self.K, r)
                x, y = max(a, lo), min(b, lo + ln)
                if y <= x:
                    continue
                dst = out[o + x - a:o + y - a]
                if r == self.k:
                    dst.copy_(self.host[x - self.lo:y - self.lo])
                self.comm.bcast(r, dst.data_ptr(), (y - x) * 4)
            o += b - a
        return out if self.device.type == "cpu" else out.to(self.device)

    def _free(self):
        """Drop the full parameters and gradients (between steps)."""
        empty = torch.empty(0, dtype=torch.float32, device=self.device)
        for p in self.params:
            p.data = empty
            p.grad = None
        self.full = self.flat = self.acc = None
        self.gathered = False
        self.alive = 0
        if self.units is not None:
            self.units.reset()

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
        self._held(self.n - self.alive)

    # -- the gradients (the interface of grads.Gradients) -----------------
    overlap = _NoOverlap()

    def start(self, check_word=None):
        if self.units is None:
            self.gather()
        else:  # the parameters of no unit; the units' in their hooks
            self._free()
            if self.device.type != "cpu":
                self.host.copy_(self.data)
            self.units.start()
        self.flat = torch.zeros(self.N, dtype=torch.float32,
                                device=self.device)
        for p, v in self._full_grads():
            p.grad = v
        self.acc = (torch.zeros(self.N, dtype=torch.int64, device=self.device)
                    if self.mode == "deterministic" else self.flat)
        self.check = check_word
        if check_word is not None:
            self.acc[self.n + 1], self.acc[self.n + 2] = check_word, 1

    def add_microbatch(self, loss_over_m):
        if self.units is not None:
            self.units.microbatch_done()
        # a user's zero_grad or optimizer may have detached a gradient
        for p, v in self._full_grads():
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
        if self.units is not None:
            self.units.pad()
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
        if self.units is not None:  # the hook may read the parameters
            self.gather()
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


class Units:
    """Gathering unit by unit (shard_units=): the hooks on the units and
    the order of their gathers (the same on every rank of the replica)."""

    def __init__(self, sh, units):
        self.sh = sh
        units = list(units)
        if not units:
            raise ProgramError("shard_units=: an empty list")
        at, off = {}, 0
        for i, (p, size) in enumerate(zip(sh.params, sh.sizes)):
            at[id(p)] = (i, off, off + size)
            off += size
        self.members, self.spans, seen = [], [], set()
        for u in units:
            if not isinstance(u, nn.Module):
                raise ProgramError("shard_units=: %r is no nn.Module" % (u,))
            idx = sorted(at[id(p)][0] for p in u.parameters()
                         if id(p) in at)
            if not idx or seen & set(idx):
                raise ProgramError(
                    "shard_units=: every unit must hold trained parameters "
                    "that no other unit holds (%s)" % type(u).__name__)
            seen |= set(idx)
            self.members.append(idx)
            self.spans.append(self._spans([at[id(sh.params[i])][1:]
                                           for i in idx]))
        self.rest = [i for i in range(len(sh.params)) if i not in seen]
        self.rest_spans = self._spans([at[id(sh.params[i])][1:]
                                       for i in self.rest])
        self.on = False
        self.due = self.done = 0
        for u, unit in enumerate(units):
            unit.register_forward_pre_hook(
                lambda mod, inp, u=u: self._forward(u))
            unit.register_forward_hook(
                lambda mod, inp, out, u=u: self._forward_done(u, out))

    @staticmethod
    def _spans(ranges):
        out = []
        for a, b in sorted(ranges):
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            elif b > a:
                out.append((a, b))
        return out

    def reset(self):
        self.on = False
        self.live = set()
        self.fwd = self.bwd = 0  # the next unit expected, forward/backward

    def _set(self, idx, spans, full):
        sh = self.sh
        views, o = [], 0
        for i in idx:
            views.append(full[o:o + sh.sizes[i]].view(sh.shapes[i]))
            o += sh.sizes[i]
        grads = sh._views(sh.flat) if sh.flat is not None else None
        for i, v in zip(idx, views):
            sh.params[i].data = v
            if grads is not None:  # backward accumulates into the step's
                sh.params[i].grad = grads[i]
        sh._held(sum(b - a for a, b in spans))

    def _gather(self, u):
        self._set(self.members[u], self.spans[u],
                  self.sh._gather_spans(self.spans[u]))
        self.live.add(u)

    def _drop(self, u):
        if u in self.live:
            self.live.discard(u)
            sh = self.sh
            empty = torch.empty(0, dtype=torch.float32, device=sh.device)
            grads = sh._views(sh.flat) if sh.flat is not None else None
            for i in self.members[u]:
                p = sh.params[i]
                if grads is not None and p.grad is not None and \
                        p.grad.data_ptr() != grads[i].data_ptr():
                    grads[i].copy_(p.grad)  # backward replaced the view
                p.grad = None
                p.data = empty
            self.sh._held(-sum(b - a for a, b in self.spans[u]))

    def start(self):
        self.reset()
        if self.rest_spans:
            self._set(self.rest, self.rest_spans,
                      self.sh._gather_spans(self.rest_spans))
        self.on = True

    def _order(self, what, u, want):
        if u != want:
            raise ProgramError(
                "shard_units=: the %s of unit %d came where unit %d's was "
                "due: each microbatch must call the units once each in the "
                "list's order (their backward then runs in reverse), the "
                "same on every rank" % (what, u, want))

    def _forward(self, u):
        if not self.on:
            return
        self._order("forward", u, self.fwd)
        self.fwd += 1
        self._gather(u)

    def _forward_done(self, u, out):
        if not self.on:
            return None
        self._drop(u)
        t = out[0] if isinstance(out, (tuple, list)) else out
        if not (torch.is_tensor(t) and t.requires_grad):
            raise ProgramError(
                "shard_units=: unit %d's output (or its first element) must "
                "be a tensor that requires grad (its backward gathers the "
                "unit again)" % u)
        t.register_hook(lambda g: self._backward(u))
        return None

    def _backward(self, u):
        self._order("backward", u, len(self.members) - 1 - self.bwd)
        self.bwd += 1
        for v in list(self.live):  # the unit whose backward is over
            self._drop(v)
        self._gather(u)

    def microbatch_done(self):
        n = len(self.members)
        if self.fwd != n or self.bwd != n:
            raise ProgramError(
                "shard_units=: a microbatch ran %d of %d units' forward and "
                "%d backward: each must run every unit once" %
                (self.fwd, n, self.bwd))
        for v in list(self.live):
            self._drop(v)
        self.fwd = self.bwd = 0
        self.done += 1

    def pad(self):
        """As many gathers as the ranks with more microbatches make."""
        n = len(self.members)
        for _ in range(self.due - self.done):
            for u in list(range(n)) + list(range(n - 1, -1, -1)):
                self._gather(u)
                self._drop(u)
        self.due = self.done = 0


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
        sh = self.shards
        if sh.units is None:
            sh.gather()  # the word of the full model, as unsharded
            return int(self.digest_model()[:3], 16)
        # layer by layer: one trained parameter full at a time
        if sh.device.type != "cpu":
            sh.host.copy_(sh.data)
        at, off = {}, 0
        for p, size, shape in zip(sh.params, sh.sizes, sh.shapes):
            at[id(p)] = (off, off + size, shape)
            off += size
        h = hashlib.sha256()
        for name, t in sorted(sh.model.state_dict(keep_vars=True).items()):
            if id(t) in at:
                a, b, shape = at[id(t)]
                sh._held(b - a)
                t = sh._gather_spans([(a, b)] if b > a else []).view(shape)
                sh._held(a - b)
            _update(h, name, t.detach())
        return int(h.hexdigest()[:3], 16)

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
           extra_state, units=None):
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
    if units == "children":
        units = [c for c in tr.model.children()
                 if any(p.requires_grad for p in c.parameters())]
    shards = Shards(tr.model, tr.optimizer, comm, tr.mode, tr.job, units)
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
