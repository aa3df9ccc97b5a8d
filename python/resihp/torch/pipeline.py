# SPDX-License-Identifier: BSD-3-Clause
"""Pipeline-parallel replicas: stage k of every replica on its rank k.

    model = nn.Sequential(embed, block0, block1, head)  # the same everywhere
    tr = Trainer(model, lambda params: torch.optim.AdamW(params, lr=1e-3),
                 stages=[2], microbatches=M, steps=S)   # [embed, block0] |
    for step in tr:                                    # [block1, head]
        step.run(batch, F.cross_entropy)   # batch(step, mb) -> (x, y)
        print(step.loss)
    tr.finish()

Under resihp-run --ranks-per-replica K a replica is K ranks; rank k
(resihp.Job.shard) holds stage k: its modules, its optimizer over their
parameters, its scheduler, its gradients and its replica state (state.py).
GPipe: every stage runs the forward passes of the step's microbatches in
order (stage 0 reads the input from batch(step, mb), a later stage
receives it from stage k-1 over the replica communicator), keeping their
graphs, then their backward passes in the same order (the gradient of a
stage's output comes from stage k+1; the last stage computes
loss_fn(output, target) / M and its backward). Each stage accumulates its
own gradients per microbatch as the Trainer does (fixed point in
deterministic mode) and exchanges them in its own fault-tolerant group,
the ranks k of all replicas (the job's per-shard all-reduce); microbatches
reassigned after a replica failed run through the pipeline as one more
pass (every rank of a replica gets the same list). The step commits on
every stage or on none (libresihp). A replacement's rank k receives stage
k's state (parameters, optimizer state, the meta state: optimizer
state_dict without tensors, scheduler, RNG, extra_state) from rank k of a
healthy replica.

A failed rank fails its replica as one: a peer inside the replica that
died or hangs makes this rank's send or receive fail (RESIHP_EPEER,
RESIHP_ETIMEDOUT, within the communicator's detection bound): the
ResihpError ends the process, and resihp-run replaces the whole replica.

Bitwise. A stage's arithmetic is that of the same modules in the whole
model: the activation crosses the boundary as its exact bits, and the
gradient flowing back into it too. The torch RNG (CPU, and the CUDA
device's of a CUDA stage) is seeded for microbatch mb on stage 0 as the
Trainer does, and handed from stage to stage with the activation, so
dropout anywhere draws what it draws in one process running the whole
model. In deterministic mode the parameters, the optimizer state and the
losses are bitwise those of the Trainer without stages (standalone=True),
whatever K and whatever failed (finish() reports K stage digests, not the
whole model's one).
standalone=True with stages runs the K stages one after the other in this
process (the same messages, kept in memory): the per-stage reference.

Moving layers (move_layers=True, resihp_job(3) "Repartition"). The
model's top-level children, each with the parameter-free children after
it (activations, dropout), are its layers; stages= split points (each at
a layer's first child) give the starting partition. The stages declare
them to the job with their gradient elements (resihp_job_set_layers; the
gradient is the layers' parameters in model order, exchanged in the job's
layer-keyed groups) and their state by layer (a replacement catches up
each layer from whichever healthy rank holds it). When the fail-slow
detector finds a stage slow, the coordinator moves layers off it at a
step boundary (and back once it is healthy): before that step the ranks
of the replica send the parameters and the optimizer state (moments,
momentum buffers, step counts, as far as the optimizer created them) of
the layers that change hands over the replica communicator, rebuild
their optimizer (optimizer must then be a function of the parameters
making the same param_groups for any layers, or an optimizer of one
param_group), scheduler and gradients
over their new layers, keeping the param_groups' settings and the
scheduler's state, and commit on every rank or on none (layers.py). The
step says layers_moved and partition. The bits do not depend on which
stage holds a layer: a run with moves is bitwise the standalone run
(standalone=True has move_layers_to(counts) to move them by hand).
finish() reports 16 hex digits per layer, '/'-joined, the same for any
partition (a rank's over 200 characters: a digest of them). Every rank
keeps the whole model's modules; on a CPU only (refused on CUDA yet); a
layer with tied weights in another layer is refused.

Not supported (yet): a parameter shared by two stages (tied weights:
refused), a stage whose forward takes or returns more than one tensor,
before_step hooks that need the whole model's gradient (clipping by the
global norm: the hook sees this stage's gradients only, step.stage,
step.module), overlap of the exchange with backward, interleaved stages.
schedule="1f1b" runs one forward and one backward in turn once the
pipeline is full (PipelineTrainer), with the same result. CUDA stages
(activations staged through host memory, the device's RNG state handed on)
are written but were not run on a GPU yet."""
import collections
import hashlib
import inspect
import time

import torch
import torch.nn as nn

from ..errors import ProgramError, ResihpError
from ..job import Job
from . import layers as lay
from .buffers import BufferWatch, refuse_running_stats
from .digest import state_digest
from .grads import _SLOTS, Gradients
from .state import ReplicaState, check_optimizer
from .trainer import Trainer, microbatch_seed, run_hook

# the dtypes an activation may have on the wire, by code
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
           torch.int64, torch.int32, torch.uint8, torch.bool)
_ITEMSIZE = [torch.empty(0, dtype=d).element_size() for d in _DTYPES]
_MAXDIM = 6
_HEADER = 2 + _MAXDIM  # dtype code, ndim, dims
_MAX_BYTES = 1 << 36   # a larger activation is a corrupt header
SCHEDULES = ("gpipe", "1f1b")


def split(model, stages):
    """The stages as nn.Sequential modules: stages is a list of K module
    lists (each an nn.Module or a list of them), or a list of K - 1 split
    points into the model's children (nn.Sequential(a, b, c, d) with [1, 3]
    gives [a], [b, c], [d]; [] gives one stage)."""
    if not isinstance(stages, (list, tuple)):
        raise ProgramError("stages: a list of module lists (one per stage) "
                           "or of split points into the model's children")
    if all(isinstance(s, int) for s in stages):  # [] is one stage
        kids = list(model.children())
        cuts = [0] + list(stages) + [len(kids)]
        if any(b <= a for a, b in zip(cuts, cuts[1:])):
            raise ProgramError(
                "stages %s: split points must increase strictly between 0 "
                "and the model's %d children (each stage gets at least one)"
                % (list(stages), len(kids)))
        out = [nn.Sequential(*kids[a:b]) for a, b in zip(cuts, cuts[1:])]
    else:
        out = []
        for s in stages:
            if isinstance(s, nn.Module):
                s = [s]
            if not isinstance(s, (list, tuple)) or not s or not all(
                    isinstance(m, nn.Module) for m in s):
                raise ProgramError("stages: each stage is an nn.Module or a "
                                   "non-empty list of them")
            out.append(nn.Sequential(*s))
    owner = {}
    for k, m in enumerate(out):
        for name, p in m.named_parameters():
            if id(p) in owner and owner[id(p)] != k:
                raise ProgramError(
                    "parameter '%s' of stage %d is also in stage %d (tied "
                    "weights across pipeline stages are not supported: untie "
                    "them or keep the modules sharing it in one stage)" %
                    (name, k, owner[id(p)]))
            owner[id(p)] = k
    inside = {id(p) for p in model.parameters()}
    if any(i not in inside for i in owner):
        raise ProgramError("stages: every stage's modules must be part of "
                           "the model passed to the Trainer")
    return out


def stage_optimizer(optimizer, module):
    """This stage's optimizer: optimizer(params) when it is a function,
    else an optimizer of the same class and settings over the stage's
    parameters (its param_groups kept, each with this stage's share)."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not isinstance(optimizer, torch.optim.Optimizer) and \
            callable(optimizer):
        opt = optimizer(params)
        check_optimizer(opt)
        return opt
    check_optimizer(optimizer)
    mine = {id(p) for p in params}
    groups = []
    for g in optimizer.param_groups:
        ps = [p for p in g["params"] if id(p) in mine]
        if ps:
            groups.append(dict(g, params=ps))
    try:
        # the settings its constructor takes (a torch 2.x AdamW's defaults
        # hold decoupled_weight_decay, which only Adam's takes); every
        # setting also travels in the groups, which take precedence
        sig = inspect.signature(type(optimizer).__init__).parameters
        anykw = any(p.kind == p.VAR_KEYWORD for p in sig.values())
        kw = {k: v for k, v in optimizer.defaults.items()
              if anykw or k in sig}
        return type(optimizer)(groups, **kw)
    except Exception as e:
        raise ProgramError(
            "cannot build the %s of a pipeline stage from the optimizer "
            "given (%s: %s): pass a function of the stage's parameters "
            "instead, e.g. lambda params: torch.optim.AdamW(params, lr=1e-3)"
            % (type(optimizer).__name__, type(e).__name__, e)) from e


def parse_header(h):
    """(dtype, shape) of a tensor message's header (int64 values), or a
    ProgramError: the bytes come from a peer."""
    h = [int(v) for v in h]
    code, ndim = h[0], h[1]
    if not 0 <= code < len(_DTYPES) or not 0 <= ndim <= _MAXDIM:
        raise ProgramError("a pipeline message with a bad header (dtype "
                           "code %d, %d dimensions)" % (code, ndim))
    shape = h[2:2 + ndim]
    n = _ITEMSIZE[code]
    for d in shape:
        if d < 0:
            raise ProgramError("a pipeline message with a negative "
                               "dimension %s" % (shape,))
        n *= d
        if n > _MAX_BYTES:
            raise ProgramError("a pipeline message of shape %s: too large"
                               % (shape,))
    return _DTYPES[code], tuple(shape)


class _Link:
    """Tensors between the stages of this process's replica. Standalone:
    queues in memory (the K stages run in this process, one after the
    other). Under a job: the replica communicator; a message is a header
    (dtype, shape) then the tensor's bytes, staged in host memory."""

    def __init__(self, job):
        self.job = job
        self.queues = collections.defaultdict(collections.deque)
        # seconds spent in the replica communicator's sends and receives:
        # waits for the other stages, not this stage's compute
        self.waited = 0.0

    def send(self, src, dst, t):
        t = t.detach()
        if self.job is None:
            self.queues[(src, dst)].append(t.clone())
            return
        t0 = time.perf_counter()
        try:
            self._send(dst, t)
        finally:
            self.waited += time.perf_counter() - t0

    def _send(self, dst, t):
        t = t.cpu().contiguous()
        if t.dim() > _MAXDIM or t.dtype not in _DTYPES:
            raise ProgramError("a stage's output of %s and %d dimensions: "
                               "the pipeline passes tensors of up to %d "
                               "dimensions of %s" %
                               (t.dtype, t.dim(), _MAXDIM,
                                ", ".join(map(str, _DTYPES))))
        h = torch.zeros(_HEADER, dtype=torch.int64)
        h[0], h[1] = _DTYPES.index(t.dtype), t.dim()
        h[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
        self.job.replica_send(dst, h.data_ptr(), h.numel() * 8)
        self.job.replica_send(dst, t.data_ptr(), t.numel() * t.element_size())

    def recv(self, src, dst, device):
        if self.job is None:
            return self.queues[(src, dst)].popleft().to(device)
        t0 = time.perf_counter()
        try:
            t = self._recv(src)
        finally:
            self.waited += time.perf_counter() - t0
        return t.to(device)

    def _recv(self, src):
        h = torch.zeros(_HEADER, dtype=torch.int64)
        self.job.replica_recv(src, h.data_ptr(), h.numel() * 8)
        dtype, shape = parse_header(h.tolist())
        t = torch.empty(shape, dtype=dtype)
        self.job.replica_recv(src, t.data_ptr(), t.numel() * t.element_size())
        return t


def _rng_state(device):
    """The torch RNG state to hand on: the CPU's, and the device's."""
    parts = [torch.get_rng_state()]
    if device.type == "cuda":
        parts.append(torch.cuda.get_rng_state(device))
    return torch.cat(parts)


def _set_rng_state(state, device):
    n = torch.get_rng_state().numel()
    if state.numel() != n + (torch.cuda.get_rng_state(device).numel()
                             if device.type == "cuda" else 0):
        raise ProgramError("the RNG state received from the previous stage "
                           "has %d bytes: run the same torch and the same "
                           "device type on every stage" % state.numel())
    state = state.cpu()
    torch.set_rng_state(state[:n].clone())
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[n:].clone(), device)


class _Stage:
    """Stage k as this process holds it: modules, optimizer, scheduler,
    gradients and replica state. With layers (move_layers): the model's
    layers it holds (units: every layer's children), its state by layer,
    its gradients in the layers' order, the slots exchanged only by the
    stage holding the last layer (last)."""

    def __init__(self, k, module, optimizer, scheduler, mode, bucket_bytes,
                 meta_bytes, extra, layers=None, units=None, last=False):
        self.k, self.module = k, module
        if not any(p.requires_grad for p in module.parameters()):
            raise ProgramError("pipeline stage %d has no trained parameter: "
                               "move its modules into a neighbour stage" % k)
        self.optimizer = stage_optimizer(optimizer, module)
        if scheduler is not None and (not callable(scheduler) or
                                      hasattr(scheduler, "state_dict")):
            raise ProgramError(
                "with stages, scheduler is a function of the stage's "
                "optimizer (e.g. lambda opt: torch.optim.lr_scheduler."
                "LambdaLR(opt, f)): each stage has its own optimizer")
        self.scheduler = scheduler(self.optimizer) if scheduler else None
        self.layers, self.units = layers, units
        if layers is None:
            self.state = ReplicaState(module, self.optimizer, self.scheduler,
                                      meta_bytes, extra)
            self.grads = Gradients(self.optimizer, mode, bucket_bytes)
        else:
            self.state = lay.LayerState(layers, units, module, self.optimizer,
                                        self.scheduler, meta_bytes, extra)
            order, seen = [], set()
            for u in layers:
                for m in units[u]:
                    for p in m.parameters():
                        if p.requires_grad and id(p) not in seen:
                            seen.add(id(p))
                            order.append(p)
            self.grads = Gradients(self.optimizer, mode, bucket_bytes,
                                   order=order, exchange_slots=last)
        self.device = self.grads.device
        self.kept = []  # (mb, input, output, seconds) awaiting backward

    def digest(self):
        """This stage's result: 32 hex digits of its state digest (K of
        them, '/'-joined, fit resihp-run's 200-character result); with
        layers, each layer's 16 ('/'-joined: the same whichever stage
        holds which layer)."""
        if self.layers is not None:
            return "/".join(lay.layer_digest(self.units[u], self.optimizer)
                            for u in self.layers)
        return state_digest(self.module, self.optimizer)[:32]


class PipelineStep:
    """One step of a pipeline replica (yielded by iterating the Trainer).
    run(batch, loss_fn) computes it. Attributes as resihp.torch.Step:
    index, catching_up, nreplicas, mbs, reassigned, loss (after run: the
    step's mean loss, the same on every stage), applied; and in the hooks
    stage (this stage's index), module and optimizer (this stage's).
    With move_layers: layers_moved (the coordinator moved layers at this
    step's boundary: done before the step was yielded) and partition (the
    layers of each stage now)."""

    def __init__(self, trainer, index, mbs, catching_up=False, nreplicas=1,
                 layers_moved=False):
        self.trainer = trainer
        self.layers_moved = bool(layers_moved)
        self.partition = (list(trainer.counts) if trainer.counts is not None
                          else None)
        self.index, self.mbs = index, list(mbs)
        self.catching_up, self.nreplicas = bool(catching_up), nreplicas
        self.reassigned, self.loss, self.applied = [], None, None
        self.stage = self.module = self.optimizer = None
        self._done = False

    def __iter__(self):
        raise ProgramError("a pipeline step is not iterated: call "
                           "step.run(batch, loss_fn)")

    def run(self, batch, loss_fn):
        """The step on this rank's stage: batch(step, mb) -> (input,
        target) for microbatch mb (called on the first stage for the input
        and on the last for the target, with the RNG seeded as the Trainer
        seeds it), loss_fn(output, target) -> the microbatch's loss (on
        the last stage). Exchanges the gradients and commits."""
        if self._done:
            raise ProgramError("step %d ran already" % self.index)
        self._done = True
        tr = self.trainer
        todo = self.mbs
        while True:
            tr._pipeline(self, todo, batch, loss_fn)
            extra = [s.grads.exchange(tr.job) for s in tr.stages][0]
            if extra is None:
                tr._share_slots()
                break
            todo = list(extra)
            self.reassigned.extend(todo)
        tr._commit(self)
        return self.loss


class PipelineTrainer(Trainer):
    """The Trainer with stages= (see resihp.torch.Trainer for the other
    arguments and this module's docstring for the schedule). model: the
    whole model, built the same way on every rank; stages: K module lists
    or K - 1 split points into model's children; optimizer: a function of
    a stage's parameters returning its optimizer, or an optimizer over the
    model's parameters (rebuilt per stage with its class and settings);
    scheduler: a function of a stage's optimizer returning its scheduler.
    Under resihp-run, K must be --ranks-per-replica. extra_state objects
    are each rank's own (standalone: stage 0's). schedule: "gpipe"
    (default) or "1f1b" (fewer activations kept; the same result; the
    standalone reference always runs GPipe). move_layers: the stages'
    layers may move between the ranks (see the module's docstring; under
    resihp-run the replica may then also come back shrunk on fewer
    ranks, holding the coordinator's partition: shrunk is then True,
    K and counts say its ranks and partition)."""

    def __init__(self, model, optimizer, *, stages, microbatches, steps,
                 scheduler=None, mode="deterministic", seed=0, workload=None,
                 standalone=False, bucket_mb=25.0, overlap=True,
                 before_step=None, after_step=None, extra_state=None,
                 meta_bytes=1 << 20, job_options=None, schedule="gpipe",
                 move_layers=False):
        del overlap  # the exchange follows the pipeline's backward
        if schedule not in SCHEDULES:
            raise ProgramError("schedule '%s': use one of %s" %
                               (schedule, ", ".join(SCHEDULES)))
        self.schedule = schedule
        self.model = model
        self.microbatches, self.steps = int(microbatches), int(steps)
        if self.microbatches < 1 or self.steps < 1:
            raise ProgramError("microbatches and steps must be >= 1")
        self.seed, self.mode = int(seed), mode
        self.before_step, self.after_step = before_step, after_step
        self.counts = self.units = None
        # this process is a replica shrunk onto its surviving ranks: it
        # holds the coordinator's partition (resihp.Job.shrunk_partition)
        self.shrunk = False
        if move_layers:
            if isinstance(optimizer, torch.optim.Optimizer) and \
                    len(optimizer.param_groups) > 1:
                raise ProgramError(
                    "move_layers: an optimizer of %d param_groups is rebuilt "
                    "per stage with the groups that have its layers, which "
                    "changes when layers move: pass a function of the "
                    "parameters that makes the same groups for any layers" %
                    len(optimizer.param_groups))
            self.units, starts = lay.units(model)
            self.counts = lay.counts_of(stages, starts,
                                        len(list(model.children())))
            self.K = len(self.counts)
        else:
            modules = split(model, stages)
            self.K = len(modules)
        if not standalone:
            refuse_running_stats(model)
        self.job = None
        mine = range(self.K)
        if not standalone:
            # the stage is known after join (the rank's shard): its state
            # is registered then, before the first step. A replica that
            # moves layers may come back shrunk on fewer ranks (resihp-run):
            # it joins with any number and holds the coordinator's
            # partition then
            self.job = Job(self.microbatches, self.steps,
                           ranks_per_replica=0 if move_layers else self.K,
                           **(job_options or {}))
            mine = [self.job.shard]
            if move_layers:
                shrunk = self.job.shrunk_partition
                if shrunk is not None:
                    self.counts, self.K = shrunk, len(shrunk)
                    self.shrunk = True
                elif self.job.shards != self.K:
                    raise ProgramError(
                        "stages= makes %d stages, the job has %d ranks per "
                        "replica (resihp-run --ranks-per-replica)" %
                        (self.K, self.job.shards))
        self.link = _Link(self.job)
        self._args = (optimizer, scheduler, mode, int(bucket_mb * (1 << 20)),
                      meta_bytes, extra_state)
        if move_layers:
            self.stages = [self._layer_stage(k, self.counts,
                                             extra_state if k == mine[0]
                                             else None) for k in mine]
        else:
            self.stages = [_Stage(k, modules[k], optimizer, scheduler, mode,
                                  self._args[3], meta_bytes,
                                  extra_state if k == mine[0] else None)
                           for k in mine]
        if self.job is not None:
            if move_layers:
                st = self.stages[0].state
                self.job.set_layers(lay.elems(self.units, _SLOTS),
                                    self.counts)
                self.job.set_layers_movable()
                self.job.set_layer_state(st.layer_buffers(),
                                         st.rank_buffers())
            else:
                self.job.set_state(self.stages[0].state.buffers())
            if workload is not None:
                self.job.set_workload_fn(workload)
        self._replica = self.job.replica if self.job is not None else 0
        self._next, self._open = 0, None
        self._watch, self._watched = None, standalone

    def _layer_stage(self, k, counts, extra):
        """Stage k holding its layers of the partition counts."""
        optimizer, scheduler, mode, bucket, meta_bytes, _ = self._args
        held = list(lay.holds(counts, k))
        module = nn.Sequential(*[m for u in held for m in self.units[u]])
        return _Stage(k, module, optimizer, scheduler, mode, bucket,
                      meta_bytes, extra, layers=held, units=self.units,
                      last=held[-1] == len(self.units) - 1)

    def _share_slots(self):
        """With layers under a job, only the stage holding the last layer
        exchanged the slots (loss, start check): it gives their sums to
        the replica's other stages."""
        if self.counts is None or self.job is None or self.K == 1:
            return
        g = self.stages[0].grads
        t = torch.tensor(g.tail, dtype=torch.float64)
        self.job.replica_comm.bcast(self.K - 1, t.data_ptr(), t.numel() * 8)
        g.tail = [float(t[0]), int(t[1]), int(t[2])]

    def move_layers_to(self, counts):
        """Standalone with move_layers: move the layers to the partition
        counts (layers per stage) at this step boundary, as the coordinator
        does under a job (to check that a move keeps the bits)."""
        if self.job is not None or self.counts is None:
            raise ProgramError("move_layers_to: a standalone PipelineTrainer "
                               "with move_layers=True (under a job the "
                               "coordinator moves the layers)")
        if self._open is not None:
            raise ProgramError("move_layers_to: between steps, not inside "
                               "step %d" % self._open)
        self._move(counts, self._next)

    def _move(self, now, index):
        """The layers to the partition now at the boundary of step index
        (see layers.py): all of this process's stages rebuilt, the layers
        that change hands sent, received or copied, the job's commit on
        every rank of the replica or on none."""
        try:
            now = [int(c) for c in now]
        except (TypeError, ValueError):
            raise ProgramError("a partition is a list of layer counts, not "
                               "%r" % (now,)) from None
        if len(now) != self.K or min(now) < 1 or \
                sum(now) != len(self.units):
            raise ProgramError(
                "partition %s: %d stages holding at least one of the %d "
                "layers each" % (now, self.K, len(self.units)))
        old = {s.k: s for s in self.stages}
        try:
            new = {k: self._layer_stage(k, now, old[k].state.extra or None)
                   for k in old}
            was_at, now_at = lay.owners(self.counts), lay.owners(now)
            for u, (src, dst) in enumerate(zip(was_at, now_at)):
                if src in old and dst in new:  # kept, or both stages here
                    lay.copy_layer(new[dst].state.buffers_of(u),
                                   old[src].state.buffers_of(u))
                elif src in old:
                    for a, n in old[src].state.buffers_of(u):
                        self.job.replica_send(dst, a, n)
                elif dst in new:
                    for a, n in new[dst].state.buffers_of(u):
                        self.job.replica_recv(src, a, n)
            for k, s in new.items():
                o = old[k]
                s.state.bind()
                if s.scheduler is not None:
                    s.scheduler.load_state_dict(o.scheduler.state_dict())
                # after the scheduler's: it set the learning rates anew
                s.state.set_groups([{k2: v for k2, v in g.items()
                                     if k2 != "params"}
                                    for g in o.optimizer.param_groups])
                s.state.commit(index - 1)
        except (ProgramError, ResihpError):
            if self.job is not None:
                try:  # the others learn it at their commit: all or none
                    self.job.commit_layer_state([], failed=True)
                except ResihpError:
                    pass
            raise
        if self.job is not None:
            # by layer, as declared: the moved replica still serves a
            # catch-up by layer and can still shrink onto its survivors
            st = new[self.stages[0].k].state
            self.job.commit_layer_state(st.layer_buffers(),
                                        st.rank_buffers())
        self.stages = [new[k] for k in sorted(new)]
        self.counts = now

    @property
    def stage(self):
        """This rank's stage index (standalone: 0, holding all K)."""
        return self.stages[0].k

    def __iter__(self):
        while True:
            if self._open is not None:
                raise ProgramError("step %d was left before step.run()" %
                                   self._open)
            if self.job is None:
                if self._next >= self.steps:
                    return
                step = PipelineStep(self, self._next, range(self.microbatches))
            else:
                info = self.job.begin_step()
                if info.done:
                    return
                if info.catching_up or (self._next == 0 and info.index > 0):
                    for s in self.stages:
                        s.state.catch_up(self.job)
                if info.layers_moved:
                    self._move(self.job.partition, info.index)
                step = PipelineStep(self, info.index, info.mbs,
                                    info.catching_up, info.nreplicas,
                                    info.layers_moved)
            self._open = step.index
            if not self._watched:
                self._watch = [BufferWatch(s.module) for s in self.stages]
                self._watched = True
            for s in self.stages:
                check = None
                if step.index == 0 and self.mode != "bfloat16":
                    # with layers, one stage checks for all: the whole
                    # model's word (every rank builds all of it)
                    check = s.state.start_word(
                        self.model if self.counts is not None else None)
                s.grads.start(check)
            yield step

    def _pipeline(self, step, mbs, batch, loss_fn):
        """The microbatches mbs through the local stages. GPipe: every
        local stage's forward passes (in stage order), then their backward
        passes (in reverse stage order). 1F1B (under a job): stage k runs
        K - 1 - k forward passes ahead, then one forward and one backward
        in turn, then the backward passes left, so it keeps at most K - k
        microbatches' activations instead of all of them. Either way each
        stage runs the backward passes in microbatch order: the same sums
        in the same order, the same bits."""
        if self.schedule == "1f1b" and self.job is not None:
            s = self.stages[0]
            ahead = collections.deque()
            for i, mb in enumerate(mbs):
                ahead.append(self._forward(s, step, mb, batch, loss_fn))
                if i >= self.K - 1 - s.k:
                    self._backward(s, *ahead.popleft())
            while ahead:
                self._backward(s, *ahead.popleft())
            return
        for s in self.stages:
            kept = [self._forward(s, step, mb, batch, loss_fn) for mb in mbs]
            s.kept = kept
        for s in reversed(self.stages):
            kept, s.kept = s.kept, []
            for item in kept:
                self._backward(s, *item)

    def _forward(self, s, step, mb, batch, loss_fn):
        """Microbatch mb's forward pass on stage s: (mb, input, output or
        loss / M on the last stage, seconds)."""
        last = self.K - 1
        t0, w0 = time.perf_counter(), self.link.waited
        target = None
        if s.k == 0 or s.k == last:
            torch.manual_seed(microbatch_seed(self.seed, step.index, mb))
            x, target = batch(step.index, mb)
        if s.k == 0:
            inp = x
        else:
            inp = self.link.recv(s.k - 1, s.k, s.device)
            _set_rng_state(self.link.recv(s.k - 1, s.k, s.device), s.device)
            if inp.is_floating_point():
                inp.requires_grad_(True)
        out = s.module(inp)
        if s.k < last:
            if not torch.is_tensor(out):
                raise ProgramError(
                    "stage %d returned a %s: a stage passes one tensor to "
                    "the next" % (s.k, type(out).__name__))
            self.link.send(s.k, s.k + 1, out)
            self.link.send(s.k, s.k + 1, _rng_state(s.device))
        else:
            out = loss_fn(out, target) / self.microbatches
        # this stage's compute: the detector compares it with the same
        # stage of the other replicas (waits for a slow neighbour are not
        # this rank's slowness)
        return mb, inp, out, (time.perf_counter() - t0 -
                              (self.link.waited - w0))

    def _backward(self, s, mb, inp, out, secs):
        """Microbatch mb's backward pass on stage s; its gradients join
        the stage's sum, the loss travels back with the input's gradient."""
        t0, w0 = time.perf_counter(), self.link.waited
        if s.k == self.K - 1:
            out.backward()
            loss = float(out.detach())
        else:
            g = self.link.recv(s.k + 1, s.k, s.device)
            loss = float(self.link.recv(s.k + 1, s.k, "cpu"))
            if out.requires_grad:
                out.backward(g)
        s.grads.add_microbatch(loss)
        if s.k > 0:
            g = inp.grad if inp.grad is not None else torch.zeros_like(inp)
            self.link.send(s.k, s.k - 1, g)
            self.link.send(s.k, s.k - 1,
                           torch.tensor([loss], dtype=torch.float64))
        if self.job is not None:
            self.job.report_microbatch(mb, secs + time.perf_counter() - t0 -
                                       (self.link.waited - w0))

    def _commit(self, step):
        if self._watch is not None:  # this process's first step
            for w in self._watch:
                w.check(self.job)
            self._watch = None
        for s in self.stages:
            s.state.check_start(self.job, s.grads.check,
                                *s.grads.start_sums())
        step.loss = self.stages[-1].grads.loss()
        for s in self.stages:
            step.stage, step.module, step.optimizer = (s.k, s.module,
                                                       s.optimizer)
            step.applied = run_hook(self.before_step, "before_step", step,
                                    self.job) is not False
            s.state.step_done(step.index, step.applied, lambda: run_hook(
                self.after_step, "after_step", step, self.job))
        if self.job is not None:
            self.job.end_step()
        self._open = None
        self._next = step.index + 1

    def finish(self, result=None):
        """Report this rank's result (default: its stage's digest,
        standalone the K stages' joined by '/', as resihp-run reports a
        replica of K ranks); returns it."""
        if result is None:
            result = "/".join(s.digest() for s in self.stages)
            if len(result) > 200:  # resihp_job_finish's bound
                result = hashlib.sha256(result.encode()).hexdigest()[:32]
        return super().finish(result)
