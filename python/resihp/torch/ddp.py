# SPDX-License-Identifier: BSD-3-Clause
"""Fault-tolerant gradient exchange for a DistributedDataParallel script.

Each replica is its own one-process torch.distributed group; DDP's gradient
buckets go through a comm hook to resihp's fault-tolerant all-reduce instead
of a group spanning the replicas:

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                            world_size=1)
    ddp = DistributedDataParallel(model)            # CPU model
    opt = torch.optim.AdamW(ddp.parameters())
    adapter = resihp.torch.ddp.Adapter({"microbatches": M, "steps": S},
                                       ddp, opt, scheduler, seed=1234)
    for step in adapter:              # joins, catches up, then each step
        for mb in step:               # own ids, then reassigned ones
            x, y = batch(step.index, mb)
            step.backward(loss_fn(ddp(x), y))
        # here the step committed: optimizer.step(), scheduler.step()
    adapter.finish()                  # resihp-run compares the digests

What the loop does for the script: before each microbatch it re-seeds the
torch RNG from (seed, step, microbatch) (the Trainer's convention: dropout
does not depend on who computes a microbatch) and enters ddp.no_sync() for
every microbatch but the last of a round, so gradients accumulate locally
and DDP hands its buckets to the hook once per round. step.backward(loss)
scales the loss by R/M (R: replicas at the step's start, M: microbatches per
step) and the hook divides the gradients by R before summing them, as DDP's
own allreduce hook divides by the world size: the update is the mean over
the step's M microbatches. (reduce="sum" is the Trainer's convention
instead: loss/M, a plain sum.) The optimizer and the scheduler step when a
round's exchange succeeded (the adapter also commits the state a
replacement copies and ends the step); do not call optimizer.step() or
zero_grad() in the loop (the adapter zeroes the gradients at each step).
The same loop spelled out, for a script that keeps its own backward:

    for step in adapter:
        for mbs in step.rounds():     # own ids, then each reassigned list
            for i, mb in enumerate(mbs):
                step.microbatch(mb)   # seeds the RNG
                with step.sync(i == len(mbs) - 1):
                    step.scale(loss_fn(ddp(x), y)).backward()

The hook. DDP calls it once per bucket and waits for the futures it returns
at the end of backward. Buckets are not completed one by one: a peer may die
after some of them were summed, and such a sum already holds the dead
replica's part. The hook copies every bucket into one flat buffer laid out by
parameter (DDP rebuilds its buckets after the first iteration, so a
replacement's buckets are not ordered like a veteran's) and at the last
bucket (bucket.is_last()) all survivors call one resihp all-reduce of it
(float32, with the step's loss and a start check in three trailing slots).
If it succeeds every future gets its share of the sum. If a replica died,
resihp returns the microbatches reassigned to this replica: every future
gets the bucket's LOCAL copy (the gradients hold the local sum), the loop
yields the extra microbatches (accumulating on top, no_sync() but for the
last) and that last backward runs the hook again, which exchanges every
bucket again. The dead replica's microbatches are then computed once, by the
survivors, and the sum is that of all M.
A replica with nothing to compute in a round (a replacement in its catch-up
step, more replicas than microbatches) takes part with zeros without running
DDP's backward.

What it recovers:
- a peer dying (or being excluded) in the middle of a step, in any bucket,
  when the training loop is the one above (or step.rounds() with step.sync,
  which is the same thing spelled out);
- a replacement started by resihp-run at a step boundary: it catches up
  from a healthy replica through the job's state list, which is the
  Trainer's ReplicaState (state.py): the model's parameters and buffers,
  the optimizer's state, the scheduler, the RNG, as of the last commit.
What it does not:
- an arbitrary DDP loop (its own backward/optimizer.step() per step) cannot
  recompute a dead peer's microbatches: its step would apply the local sum.
  The hook refuses to run outside this loop's rounds (a clear error) rather
  than train on a wrong sum; in-step reassignment for arbitrary scripts
  needs the Trainer loop (resihp.torch.Trainer);
- results are float sums: bitwise reproducible across failures only in the
  Trainer's fixed-point mode. Here a failure-free run with R = 2 equals
  stock gloo DDP bitwise (a + b is order-free), but after a failure the
  sums are taken in another grouping and the final state differs in the
  last bits from a failure-free run (the replicas still agree);
- module buffers updated in forward (BatchNorm's running statistics) are
  not exchanged (DDP's broadcast_buffers has a one-process group): they
  would drift apart, so they are refused (norm layers tracking running
  statistics at construction, any buffer changed by the first step's
  forward passes at its end: see buffers.py);
- CPU tensors, float32 gradients, one rank per replica (no sharding), one
  backward per microbatch, DDP's find_unused_parameters=False."""
import contextlib
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .. import job as _job
from ..errors import ProgramError
from ..job import Job
from .buffers import BufferWatch, refuse_running_stats
from .state import ReplicaState
from .trainer import microbatch_seed, run_hook

_SLOTS = 3  # loss, start check word, count (as grads.py)
REDUCE = ("ddp", "sum")


def _check_ddp(ddp):
    if not isinstance(ddp, DistributedDataParallel):
        raise ProgramError(
            "resihp.torch.ddp.Adapter wants the DistributedDataParallel "
            "module (got %s): wrap the model with "
            "DistributedDataParallel(model) first" % type(ddp).__name__)
    pg = getattr(ddp, "process_group", None)
    if pg is None or pg.size() != 1:
        raise ProgramError(
            "the DistributedDataParallel module's process group has %s "
            "ranks: each resihp replica is its own one-rank group; call "
            "torch.distributed.init_process_group('gloo', "
            "store=torch.distributed.HashStore(), rank=0, world_size=1) "
            "before wrapping the model" % (pg.size() if pg else "no"))
    for name, p in ddp.module.named_parameters():
        if p.device.type != "cpu":
            raise ProgramError(
                "parameter '%s' is on %s: the resihp DDP adapter exchanges "
                "CPU tensors only (build the model on the CPU and wrap it "
                "with DistributedDataParallel(model) without device_ids); "
                "to train on a CUDA device use resihp.torch.Trainer, which "
                "supports a model on one CUDA device" %
                (name, p.device))
        if p.requires_grad and p.dtype != torch.float32:
            raise ProgramError(
                "parameter '%s' is %s: the resihp DDP adapter exchanges "
                "float32 gradients" % (name, p.dtype))


class Step:
    """One training step of the adapter's loop."""

    def __init__(self, adapter, info):
        self.adapter = adapter
        self.index = info.index
        self.catching_up = info.catching_up
        self.nreplicas = max(1, info.nreplicas)  # at the step's start
        self.mbs = list(info.mbs)
        self.reassigned = []    # microbatches added after a peer failed
        self.loss = None        # after the exchange: mean loss over M
        self.applied = None     # after the commit: False if skipped
        self._extra = None      # what the last exchange asked for
        self._exchanged = False
        self._in_round = False
        self._loss_sum = 0.0
        self._pending = None
        self._check = None
        self._committed = False

    def scale(self, loss):
        """The loss of one microbatch as the adapter's reduction wants it."""
        a = self.adapter
        if a.reduce == "sum":
            return loss / a.microbatches
        return loss * (self.nreplicas / a.microbatches)

    def backward(self, loss, tokens=1.0, sum_l2=None, nseq=1.0):
        """Backward of scale(loss) for the microbatch being computed;
        tokens, sum of squared sequence lengths, sequences: its workload for
        resihp's fail-slow detector."""
        mb = self._pending
        if mb is None:
            raise ProgramError("step.backward() outside a microbatch (or "
                               "twice for one)")
        self._loss_sum += float(loss.detach()) / self.adapter.microbatches
        self.scale(loss).backward()
        self._pending = None
        self.adapter.job.report_microbatch(mb, time.perf_counter() - self._t0,
                                           tokens, sum_l2, nseq)

    def sync(self, last):
        """The context a microbatch's forward and backward run in:
        ddp.no_sync() unless it is the last of its round."""
        return (contextlib.nullcontext() if last
                else self.adapter.ddp.no_sync())

    def microbatch(self, mb):
        """Re-seed the torch RNG for microbatch mb (the loop does it)."""
        torch.manual_seed(microbatch_seed(self.adapter.seed, self.index, mb))
        self._pending = mb
        self._t0 = time.perf_counter()

    def rounds(self):
        """The step's microbatch lists: its own, then each list reassigned
        after a peer failed. After a round's last backward (in
        sync(True)) the exchange ran; when it succeeded the step commits
        and the iteration ends."""
        a = self.adapter
        todo = self.mbs
        while True:
            self._exchanged, self._extra = False, None
            if todo:
                self._in_round = True
                try:
                    yield list(todo)
                finally:
                    self._in_round = False
                if not self._exchanged:
                    raise ProgramError(
                        "step %d: the round's last microbatch did not reach "
                        "the gradient exchange: run its forward and backward "
                        "inside step.sync(True) (the others in "
                        "step.sync(False))" % self.index)
            else:
                a._exchange_zeros(self)
            if self._extra is None:
                break
            todo = self._extra
            self.reassigned.extend(todo)
        a._commit(self)

    def __iter__(self):
        """The step's microbatch ids, each inside the right sync context
        (step.rounds() spelled out); the step commits after the last."""
        for todo in self.rounds():
            for i, mb in enumerate(todo):
                self.microbatch(mb)
                with self.sync(i == len(todo) - 1):
                    yield mb
                if self._pending is not None:
                    raise ProgramError("microbatch %d: call step.backward(loss) "
                                       "once for every microbatch" % mb)


class Adapter:
    """A DistributedDataParallel script's loop made fault tolerant (the
    module's docstring shows the loop and says what it recovers).

    job_or_opts: a resihp.Job already joined (then pass microbatches=), or
        a dict of resihp.Job options: microbatches (M, per step) and steps
        (S) at least; the adapter joins with the replica state list.
    ddp: the DistributedDataParallel module, over a one-rank gloo group
        (one_rank_group()), a CPU model with float32 parameters.
    optimizer: one torch.optim.Optimizer over ddp's parameters (a list
        is refused: use param_groups), deep-copyable, stepping without a
        closure; the
        adapter steps it when a step commits and zeroes the gradients at
        each step (do not call step() or zero_grad() in the loop).
    scheduler: an LR scheduler, stepped after the optimizer at each commit.
    seed: the torch RNG is seeded from (seed, step, microbatch) before
        each microbatch (as the Trainer does).
    reduce: "ddp" (default: the loss is scaled by R/M and the gradients
        divided by R, as DDP's own hook divides by the world size) or "sum"
        (loss / M, the Trainer's convention); the update is the mean over
        the step's M microbatches either way.
    workload: fn(step, mb) -> (tokens, sum_l2, nseq) of microbatch mb of
        step from the data loader, or None when unknown. Pass it: with it
        the replicas assign each step themselves and steps run free of the
        coordinator; without it every step goes through the coordinator
        (see resihp.torch.Trainer, resihp-run(1) --assign).
    before_step: fn(step) after the exchange, before optimizer.step(),
        the gradients summed (see resihp.torch.Trainer): clip, log, check;
        False skips the step's optimizer and scheduler step.
    after_step: fn(step) after optimizer.step(), before the commit: update
        an EMA or other extra_state there.
    extra_state: {name: object with state_dict/load_state_dict} handed to
        a replacement with the rest (see resihp.torch.Trainer).
    microbatches: M, when job_or_opts is a Job.
    meta_bytes: bytes reserved for the optimizer's and scheduler's state
        without their tensors, the RNG state and the step (default 1 MiB).

    Gradients are summed as float32: a failure-free run equals stock DDP;
    after a failure the replicas agree but differ in the last bits from a
    failure-free run (resihp.torch.Trainer's deterministic mode does not).
    On a failure the survivors compute the dead replica's microbatches
    (the loop yields them) and exchange again; a replacement receives the
    last committed state (model, optimizer, scheduler, RNG)."""

    def __init__(self, job_or_opts, ddp, optimizer, scheduler=None, *,
                 seed=0, reduce="ddp", workload=None, before_step=None,
                 after_step=None, extra_state=None, microbatches=None, meta_bytes=1 << 20):
        _check_ddp(ddp)
        refuse_running_stats(ddp.module)
        if reduce not in REDUCE:
            raise ProgramError("reduce '%s': use one of %s" %
                               (reduce, ", ".join(REDUCE)))
        self.ddp, self.optimizer, self.scheduler = ddp, optimizer, scheduler
        self.seed, self.reduce = int(seed), reduce
        self.before_step, self.after_step = before_step, after_step
        self.state = ReplicaState(ddp.module, optimizer, scheduler,
                                  meta_bytes, extra_state)
        self.params = [p for p in ddp.module.parameters() if p.requires_grad]
        self.where, n = {}, 0
        for p in self.params:
            self.where[id(p)] = (n, p.numel())
            n += p.numel()
        self.n = n
        self.flat = torch.zeros(n + _SLOTS, dtype=torch.float32)
        if isinstance(job_or_opts, Job):
            if microbatches is None:
                raise ProgramError("with a joined Job pass microbatches= "
                                   "(the job's microbatches per step)")
            self.job, self.microbatches = job_or_opts, int(microbatches)
            self.job.set_state(self.state.buffers())
        else:
            opts = dict(job_or_opts)
            self.microbatches = int(opts.get("microbatches", 0))
            if self.microbatches < 1 or int(opts.get("steps", 0)) < 1:
                raise ProgramError("the job options need microbatches >= 1 "
                                   "and steps >= 1")
            self.job = Job(state=self.state.buffers(), **opts)
        if workload is not None:
            self.job.set_workload_fn(workload)
        self._step = None
        self._watch, self._watched = None, False
        self._buckets = []
        ddp.register_comm_hook(None, self._hook)

    @property
    def replica(self):
        """This replica's index."""
        return self.job.replica

    def __iter__(self):
        """The run's steps (Step): joins, catches up when this replica is
        a replacement, zeroes the gradients at each step; a step commits
        (optimizer and scheduler step) when its rounds are done."""
        while True:
            if self._step is not None and not self._step._committed:
                raise ProgramError("step %d was left before its microbatches "
                                   "were done" % self._step.index)
            info = self.job.begin_step()
            if info.done:
                self._step = None
                return
            if info.catching_up:
                self.state.catch_up(self.job)
            step = Step(self, info)
            if step.index == 0:
                step._check = self.state.start_word()
            for p in self.params:  # as optimizer.zero_grad(set_to_none=False)
                if p.grad is not None:
                    p.grad.detach_()
                    p.grad.zero_()
            self._step = step
            if not self._watched:
                self._watch, self._watched = BufferWatch(self.ddp.module), True
            yield step

    steps = __iter__

    def _hook(self, state, bucket):
        fut = torch.futures.Future()
        st = self._step
        if st is None or not st._in_round:
            self._buckets.clear()
            fut.set_exception(ProgramError(
                "a DDP gradient exchange outside the resihp adapter's step "
                "loop: run backward inside 'for step in adapter: for mb in "
                "step:' (a peer's failure can only be recovered there)"))
            return fut
        buf = bucket.buffer()
        spans = []
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            off, n = self.where.get(id(p), (None, 0))
            boff = (g.data_ptr() - buf.data_ptr()) // buf.element_size()
            if off is None or g.numel() != n or boff < 0 or \
                    boff + n > buf.numel():
                fut.set_exception(ProgramError(
                    "a DDP bucket holds a gradient the adapter does not know "
                    "(parameters must not change after the adapter is made)"))
                return fut
            spans.append((boff, off, n))
        self._buckets.append((fut, buf.clone(), spans))
        if bucket.is_last():
            try:
                self._exchange_buckets(st)
            except Exception as e:
                for f, _, _ in self._buckets:
                    if not f.done():
                        f.set_exception(e)
            self._buckets.clear()
        return fut

    def _exchange_buckets(self, st):
        self.flat.zero_()
        for _, local, spans in self._buckets:
            for boff, off, n in spans:
                self.flat[off:off + n] = local[boff:boff + n]
        if self._allreduce(st):
            for f, local, _ in self._buckets:
                f.set_result(local)
            return
        for f, local, spans in self._buckets:
            out = local.clone()
            for boff, off, n in spans:
                out[boff:boff + n] = self.flat[off:off + n]
            f.set_result(out)

    def _exchange_zeros(self, st):
        """A round without microbatches: zeros, no DDP backward."""
        self.flat.zero_()
        st._exchanged = True
        if self._allreduce(st):
            return
        with torch.no_grad():
            for p in self.params:
                off, n = self.where[id(p)]
                v = self.flat[off:off + n].view_as(p)
                if p.grad is None:
                    p.grad = v.clone()
                else:
                    p.grad.copy_(v)

    def _allreduce(self, st):
        """Sum self.flat (gradients, then the slots) over the replicas.
        True: microbatches were reassigned (st._extra; self.flat is not
        the sum)."""
        st._exchanged = True
        tail = self.flat[self.n:]
        tail[0] = st._loss_sum
        if st._check is not None:
            tail[1], tail[2] = st._check, 1
        if self.reduce == "ddp":
            self.flat[:self.n].div_(st.nreplicas)
        extra = self.job.allreduce(self.flat.data_ptr(), self.n + _SLOTS,
                                   _job.FLOAT32, _job.OP_SUM)
        if extra is not None:
            st._extra = list(extra)
            return True
        st._extra = None
        st.loss = float(tail[0])
        self.state.check_start(self.job, st._check, float(tail[1]),
                               float(tail[2]))
        return False

    def _commit(self, st):
        if self._watch is not None:  # this process's first step
            self._watch.check(self.job)
            self._watch = None
        st.applied = run_hook(self.before_step, "before_step", st,
                              self.job) is not False
        self.state.step_done(st.index, st.applied, lambda: run_hook(
            self.after_step, "after_step", st, self.job))
        self.job.end_step()
        st._committed = True

    def finish(self, result=None):
        """The run is over: report the result (default: the state digest of
        the module and optimizer), which resihp-run compares; returns it."""
        if result is None:
            result = self.state.digest()
        self.job.finish(result)
        self.job.close()
        return result

    def close(self):
        """Leave the job without a result (finish() also closes)."""
        self.job.close()


def one_rank_group():
    """init_process_group for a replica: gloo, one rank, an in-memory store
    (a no-op if a group exists)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
