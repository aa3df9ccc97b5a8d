# SPDX-License-Identifier: BSD-3-Clause
"""The training loop of a resilient replica, for PyTorch.

    tr = Trainer(model, optimizer, microbatches=M, steps=S)
    for step in tr:                       # joins, catches up, commits
        for mb in step:                   # own ids, then reassigned ones
            x, y = batch(step.index, mb)
            step.backward(loss_fn(model(x), y), tokens=x.numel())
        print(step.loss)                  # the step's global mean loss
    tr.finish(state_digest(model, optimizer))

Each step processes the same M microbatches, spread over the replicas by
resihp-run's coordinator. A microbatch's loss is scaled by 1/M, so the update
is the mean over all M. The optimizer (and the scheduler) step only when the
gradient exchange succeeded; if a replica failed during it, the survivors
compute its microbatches too (the inner loop yields them) and exchange again.
A replacement gets the state of the last committed step from a healthy
replica (model, optimizer, scheduler, RNG: see state.py) and trains on.
Gradients are exchanged in buckets of bucket_mb MiB, those of the step's
last microbatch while its backward still runs (overlap=True; grads.py).
The torch RNG is seeded from (seed, step, microbatch) before each microbatch
(torch.manual_seed: the CPU's and every CUDA device's), so dropout does not
depend on which replica computes it. Microbatch times and workloads go to
resihp's fail-slow detector.

The model lives on the CPU or on one CUDA device (model.to(device) before
building the optimizer), with the same guarantees: libresihp sees host
memory only, and the gradients and the replica state are staged through
pinned host buffers (grads.py, state.py).

standalone=True runs without resihp: one process computes all M microbatches
of every step with the same arithmetic (the reference a resilient run is
compared with)."""
import hashlib
import time

import torch

from ..errors import ProgramError
from ..job import Job
from .buffers import BufferWatch, refuse_running_stats
from .grads import Gradients
from .state import ReplicaState


def run_hook(fn, what, step, job):
    """fn(step) (a before_step or after_step hook); what it returns. An
    exception in it stops the run (every replica runs it on the same
    state: a spare would fail the same way)."""
    if fn is None:
        return None
    try:
        return fn(step)
    except Exception as e:
        reason = ("%s raised %s at step %d: %s" %
                  (what, type(e).__name__, step.index, e))
        if job is not None:
            job.abort(reason)
        raise ProgramError(reason + "; the run was stopped") from e


def microbatch_seed(seed, step, mb):
    """The torch seed of microbatch mb of step: the same whichever replica
    (or a stock script that must match) computes it. The Trainer passes it
    to torch.manual_seed, which seeds the CPU and the CUDA devices."""
    d = hashlib.sha256(b"%d:%d:%d" % (int(seed), int(step), int(mb))).digest()
    return int.from_bytes(d[:8], "little") & ((1 << 63) - 1)


class Step:
    """One training step, yielded by iterating a Trainer.

    Iterate it for the step's microbatch ids (this replica's own, then any
    reassigned from a replica that failed during the exchange) and call
    backward() once for each. Attributes: index (the step number),
    catching_up (this replica just received the state of a healthy one),
    nreplicas (live replicas at the step's start), mbs (the ids assigned at
    the start), reassigned (ids added after a failure), loss (after the
    loop over the microbatches: the step's mean loss over all M
    microbatches, summed across the replicas), applied (after the commit:
    False when a before_step hook skipped the optimizer step)."""

    def __init__(self, trainer, index, mbs, catching_up=False, nreplicas=1):
        self.trainer = trainer
        self.index = index
        self.catching_up = bool(catching_up)
        self.nreplicas = nreplicas
        self.mbs = list(mbs)
        self.loss = None
        self.applied = None
        self.reassigned = []
        self._pending = None

    def __iter__(self):
        """The step's microbatch ids: this replica's own, then those
        reassigned after a replica failed. The torch RNG is seeded for each
        before it is yielded; after the last, the step commits."""
        tr = self.trainer
        todo, first = self.mbs, True
        while True:
            for k, mb in enumerate(tr.share(todo)):
                if first and k == len(todo) - 1 and tr.overlap:
                    tr.grads.overlap.arm(tr.job)  # exchange during backward
                self._pending = mb
                torch.manual_seed(microbatch_seed(tr.seed, self.index, mb))
                self._t0 = time.perf_counter()
                yield mb
                if self._pending is not None:
                    raise ProgramError("microbatch %d: call step.backward(loss) "
                                       "once for every microbatch" % mb)
            todo, first = tr.grads.exchange(tr.job), False
            if todo is None:
                break
            self.reassigned.extend(todo)
        if tr._watch is not None:  # this process's first step
            tr._watch.check(tr.job)
            tr._watch = None
        tr._commit(self)

    def backward(self, loss, tokens=1.0, sum_l2=None, nseq=1.0):
        """Backward of loss/M for the microbatch just yielded (call it once
        per microbatch, never loss.backward() yourself; do not call
        optimizer.step() or zero_grad(): the Trainer does when the step
        commits). tokens, sum_l2 (sum of squared sequence lengths) and nseq
        (sequences) describe the microbatch's workload for resihp's
        fail-slow detector, with its measured time."""
        mb = self._pending
        if mb is None:
            raise ProgramError("step.backward() outside a microbatch (or "
                               "twice for one)")
        tr = self.trainer
        scaled = loss / tr.microbatches
        scaled.backward()
        tr.grads.add_microbatch(float(scaled.detach()))
        self._pending = None
        if tr.job is not None:
            tr.job.report_microbatch(mb, time.perf_counter() - self._t0,
                                     tokens, sum_l2, nseq)


class Trainer:
    """The training loop of one resilient data-parallel replica.

        tr = Trainer(model, optimizer, microbatches=M, steps=S,
                     workload=lambda step, mb: (tokens, sum_l2, nseq))
        for step in tr:            # joins, catches up, commits
            for mb in step:        # own ids, then reassigned ones
                x, y = batch(step.index, mb)
                step.backward(loss_fn(model(x), y), tokens=x.numel())
        tr.finish()                # resihp-run compares the replicas

    Run it under resihp-run (or with standalone=True). Arguments:

    model: a torch.nn.Module on the CPU or on one CUDA device, float32
        parameters, built the same way on every replica (torch.manual_seed
        before building it: the replicas' parameters are checked at step 0
        and the run stops if they differ). Buffers updated in forward
        (BatchNorm's running statistics) are not exchanged: they would
        drift apart across replicas, so they are refused (but with
        standalone=True): a norm layer in training mode that tracks
        running statistics before joining, any buffer the forward passes
        of this process's first step changed at its end (the run stops).
        Use track_running_stats=False, nn.GroupNorm/nn.LayerNorm, or keep
        the layer in eval mode.
    optimizer: one torch.optim.Optimizer over the model's parameters
        (built after model.to(device)); several parameter groups are
        fine, a list of optimizers is refused (one optimizer with a
        param_group per set of parameters does the same). It must be
        deep-copyable and step without a closure: the layout of its state
        is learnt from a copy stepped once on zero gradients. The Trainer
        calls its step() when a step commits and zeroes the gradients at
        each step.
    microbatches: M, the microbatches per step (the same on every replica);
        each microbatch's loss is scaled by 1/M, so the update is the mean
        over all M, however many replicas compute them.
    steps: S, the steps of the run.
    scheduler: an LR scheduler, stepped after the optimizer at each commit;
        its state_dict goes to a replacement.
    mode: how gradients are summed across replicas.
        "deterministic" (default): in 64-bit fixed point, exactly: the
        result does not depend on which replica computed which microbatch,
        so a run with failures ends bitwise equal to standalone=True.
        "float32": float sums, faster to convert, at parity with DDP; after
        a failure the sums are grouped otherwise and the result differs in
        the last bits from a failure-free run (the replicas still agree).
        "bfloat16": float32 gradients sent as bfloat16 (half the bytes).
    seed: the torch RNG is seeded from (seed, step, microbatch) before
        each microbatch (microbatch_seed()), so dropout does not depend on
        which replica computes a microbatch.
    workload: fn(step, mb) -> (tokens, sum_l2, nseq) for microbatch mb of
        step, from the data loader, before it is computed (tokens, sum of
        squared sequence lengths, sequences), or None when unknown. Pass it:
        with it (and resihp-run's default --assign cost) the replicas
        assign each step themselves and steps run free of the coordinator;
        without it every step goes through the coordinator, assigned by
        counts (resihp-run(1), --assign).
    standalone: run without resihp: this one process computes all M
        microbatches of every step with the same arithmetic (the reference
        a resilient run is compared with).
    bucket_mb: the size in MiB of the buckets gradients are exchanged in
        (default 25): smaller buckets start the exchange earlier during
        backward, larger ones cost fewer calls. It does not change the
        result.
    overlap: exchange the buckets of the step's last microbatch from a
        thread while its backward still runs (default True); False
        exchanges after backward. It does not change the result.
    before_step: fn(step), called at each step once the gradients are
        exchanged, before optimizer.step(): the parameters' .grad hold the
        step's summed gradient, the same on every replica (and bitwise that
        of standalone=True in deterministic mode), step.loss is set. What
        fn does deterministically with them is done alike everywhere:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), logging
        the gradient norm, a check for inf/NaN. fn returning False skips
        the step's optimizer and scheduler step (step.applied is False;
        the step still commits). An exception in fn stops the run
        (ProgramError; resihp-run exits 6).
    after_step: fn(step), called at each step after optimizer.step() and
        the scheduler's step (or the skip), before the step commits: the
        place to update an EMA or other extra_state from the new
        parameters, so that a replacement receives them as of this step.
        An exception in fn stops the run.
    extra_state: {name: object} of the replica's own state beyond the
        model, optimizer, scheduler and RNG: a data loader's position, an
        EMA copy of the model, a GradScaler; anything with state_dict() and
        load_state_dict(). A replacement receives each object's state_dict
        as of the last committed step and load_state_dict()s it before its
        first step (when step.catching_up). Update them only inside the
        step loop or in a hook (after_step for what depends on the new
        parameters, as an EMA does), so the committed state is that of
        the step. The tensors of a state_dict travel in buffers allocated at
        construction: their number, shapes and dtypes must stay the same;
        the rest (numbers, strings, lists, dicts) in meta_bytes. Every
        replica gives the same names.
    meta_bytes: bytes reserved for the optimizer's and scheduler's state
        without their tensors, the RNG state, the step and extra_state's
        non-tensor values (default 1 MiB; a larger value is asked for when
        they do not fit).
    job_options: a dict of more resihp.Job options (e.g. coordinator,
        replica) for runs outside resihp-run.
    stages: pipeline parallelism (resihp-run --ranks-per-replica K):
        a list of K module lists, or K - 1 split points into model's
        children; rank k of each replica trains stage k, optimizer is
        then a function of a stage's parameters (or an optimizer rebuilt
        per stage), scheduler a function of a stage's optimizer, and each
        step runs with step.run(batch, loss_fn) instead of the loop over
        microbatches; schedule="1f1b" (default "gpipe") keeps fewer
        activations, with the same result (resihp.torch.pipeline);
        move_layers=True lets the coordinator move the layers (the model's
        top-level children) between the stages when one is slow, with the
        same result (split points only; pipeline.py, layers.py).
    shard: True: this process is one of the K ranks of a sharded replica
        (resihp-run --ranks-per-replica K; FSDP/ZeRO-3 inside a replica,
        data parallel across replicas, shard.py): it keeps 1/K of the
        trained parameters and of the optimizer state; each step gathers
        the parameters within the replica, splits the step's microbatches
        over the K ranks, reduce-scatters the gradients within the
        replica, all-reduces its block across replicas (fault tolerant,
        per shard) and steps the optimizer on its block. Deterministic
        mode stays bitwise standalone=True's. A replacement's rank k gets
        rank k's state of a healthy replica. The model's parameters are
        full only during the step's microbatches and before_step (freed
        before the optimizer step: after_step sees them empty); the
        optimizer must be elementwise (SGD, Adam, AdamW...), mode
        deterministic or float32. With standalone=True: a resihp.Comm of
        K processes (one replica without resihp-run, as the tests run
        it), or True for K = 1.
    shard_units: with shard=, gather the parameters unit by unit instead
        of the whole model for the step (ZeRO-3/FSDP style: fewer full
        parameters at once): a list of the model's modules (disjoint, each
        holding trained parameters) or "children" (the model's top-level
        children that do). A unit's parameters are gathered before its
        forward and freed after it, gathered again before its backward and
        freed after; those of no unit are full for the whole step. Each
        microbatch must call every unit once, in the list's order, and its
        output (or first output) must require grad; ProgramError
        otherwise. The same result, bitwise.

    On a failure: if a replica dies or is excluded during a step, the
    survivors compute its microbatches too (the inner loop yields them,
    step.reassigned lists them) and exchange again; the optimizer and
    the scheduler step only when the exchange succeeded, so no step is
    applied twice or half. A replacement started by resihp-run joins at a
    step boundary and receives the state of the last committed step from a
    healthy replica (model parameters and buffers, optimizer, scheduler,
    RNG; step.catching_up is True for it) and trains on. An error of the
    program that a spare cannot fix (replicas initialised differently, a
    state that cannot be loaded) stops the whole run (ProgramError here,
    resihp-run exits 6); a fault of this process itself ends it, and
    resihp-run replaces it. At the end resihp-run compares the replicas'
    finish() results: a disagreement ends the run with exit 3."""

    def __new__(cls, *args, stages=None, **kwargs):
        # stages=: a pipeline replica, stage k on rank k (pipeline.py)
        if stages is not None and (kwargs.get("shard") not in (None, False)
                                   or kwargs.get("shard_units") is not None):
            raise ProgramError("stages= with shard= or shard_units= is not "
                               "supported yet: give one of them")
        if kwargs.get("move_layers") and stages is None:
            raise ProgramError("move_layers=True moves layers between the "
                               "stages of a pipeline replica: give stages=")
        if stages is not None and cls is Trainer:
            from .pipeline import PipelineTrainer
            cls = PipelineTrainer
        return super().__new__(cls)

    def __init__(self, model, optimizer, *, microbatches, steps,
                 scheduler=None, mode="deterministic", seed=0, workload=None,
                 standalone=False, bucket_mb=25.0, overlap=True,
                 before_step=None, after_step=None, extra_state=None,
                 meta_bytes=1 << 20,
                 job_options=None, shard=None, shard_units=None):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.microbatches, self.steps = int(microbatches), int(steps)
        if self.microbatches < 1 or self.steps < 1:
            raise ProgramError("microbatches and steps must be >= 1")
        self.seed, self.mode = int(seed), mode
        self.before_step, self.after_step = before_step, after_step
        if not standalone:  # one process computing all M is the reference
            refuse_running_stats(model)
        self._watch, self._watched = None, standalone
        self._next = 0
        self._open = None
        self.share = list  # the microbatches of a list this process computes
        if shard_units is not None and shard in (None, False):
            raise ProgramError("shard_units= without shard=: give shard=")
        # -- sharded replicas: shard.py sets job, state, grads and share --
        if shard is not None and shard is not False:
            from .shard import attach
            self.overlap = False
            attach(self, shard, standalone, workload, job_options,
                   meta_bytes, extra_state, shard_units)
            self._replica = self.job.replica if self.job is not None else 0
            return
        self.state = ReplicaState(model, optimizer, scheduler, meta_bytes,
                                  extra_state)
        self.grads = Gradients(optimizer, mode, int(bucket_mb * (1 << 20)))
        self.job = None
        self.overlap = bool(overlap) and not standalone
        if not standalone:
            self.job = Job(self.microbatches, self.steps,
                           state=self.state.buffers(), **(job_options or {}))
            if workload is not None:
                self.job.set_workload_fn(workload)
        self._replica = self.job.replica if self.job is not None else 0

    @property
    def replica(self):
        """This replica's index (0 standalone); valid after finish too."""
        return self._replica

    def __iter__(self):
        """The run's steps (Step), from the first this replica takes part
        in: it joins, catches up from a healthy replica when it is a
        replacement, and commits each step once its microbatches are
        done and exchanged. Ends after the last step or when resihp-run
        stops the run."""
        while True:
            if self._open is not None:
                raise ProgramError("step %d was left before all its "
                                   "microbatches were done" % self._open)
            if self.job is None:
                if self._next >= self.steps:
                    return
                step = Step(self, self._next, range(self.microbatches))
            else:
                info = self.job.begin_step()
                if info.done:
                    return
                # A first step past 0 that is no catch-up is a resumed run
                # (resihp-run --resume): libresihp loaded the buffers from
                # disk; the optimizer, scheduler and RNG come back from
                # them as after a catch-up.
                resumed = self._next == 0 and info.index > 0
                if info.catching_up or resumed:
                    self.state.catch_up(self.job)
                step = Step(self, info.index, info.mbs, info.catching_up,
                            info.nreplicas)
            self._open = step.index
            if not self._watched:
                self._watch, self._watched = BufferWatch(self.model), True
            check = None  # bfloat16 cannot carry the word's sum exactly
            if step.index == 0 and self.mode != "bfloat16":
                check = self.state.start_word()
            self.grads.start(check)
            yield step

    def _commit(self, step):
        self.state.check_start(self.job, self.grads.check,
                               *self.grads.start_sums())
        step.loss = self.grads.loss()
        step.applied = run_hook(self.before_step, "before_step", step,
                                self.job) is not False
        self.state.step_done(step.index, step.applied, lambda: run_hook(
            self.after_step, "after_step", step, self.job))
        if self.job is not None:
            self.job.end_step()
        self._open = None
        self._next = step.index + 1

    def abort(self, reason):
        """Stop the whole run (every replica): a program error."""
        if self.job is not None:
            self.job.abort(reason)

    def finish(self, result=None):
        """The run is over: report the result (default: the state digest),
        which resihp-run compares across replicas; returns it."""
        if result is None:
            result = self.state.digest()
        if self.job is not None:
            self.job.finish(result)
            self.job.close()
        return result

    def close(self):
        """Leave the job without a result (finish() also closes)."""
        if self.job is not None:
            self.job.close()
