# SPDX-License-Identifier: BSD-3-Clause
"""resihp.torch's pipeline replicas without a cluster (TAP): the Trainer
with stages=, standalone (the K stages in this process, messages in
memory), is bitwise the Trainer without stages for K = 1, 2, 4 (model,
optimizer state, losses), with dropout in several stages (the RNG state
travels with the activation); the wire form of a message round-trips and
a peer's header is parsed safely (fuzz); bad stages are refused.
move_layers: layers moved between the standalone stages at step
boundaries (and back, before the optimizer has any state, with Adam and
with SGD's momentum) keep the bits of the Trainer without stages, every
layer's digest included; a stage loaded from other stages' layers (as a
catch-up by layer copies them) trains on to the same bits; the layer
calls of resihp.Job refuse bad input before reaching the library.
tests/integration/torch-pipeline.test runs the stages as ranks of
replicas under resihp-run, through faults; torch-repartition.test moves
layers off a stage slowed from outside."""
import ctypes
import collections
import random

import torch
import torch.nn as nn

import resihp
import resihp.torch as rt
from resihp.torch import pipeline
from tap import ok, raises, report
from trainloop import train_with


def build(seed=1):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(16, 16), nn.Tanh(), nn.Dropout(0.1),
                         nn.Linear(16, 16), nn.Dropout(0.3), nn.Linear(16, 3))


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


def sched(opt):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))


def batch(step, mb):
    g = torch.Generator().manual_seed(1000 * step + mb)
    return torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,),
                                                         generator=g)


def opt_state(model, optimizers):
    """Every parameter's optimizer state tensors, in model order."""
    out = []
    for p in model.parameters():
        for o in optimizers:
            if p in o.state:
                out.extend(v.clone() for _, v in sorted(o.state[p].items())
                           if torch.is_tensor(v))
    return out


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


STEPS, M = 5, 6
for mode in ("deterministic", "float32"):
    ref = build()
    ropt = adamw(ref.parameters())
    rlosses = train_with(batch, rt.Trainer(
        ref, ropt, scheduler=sched(ropt), microbatches=M, steps=STEPS,
        mode=mode, standalone=True), ref)
    rstate = opt_state(ref, [ropt])
    for stages in ([], [3], [2, 4, 7], None):
        if stages is None:  # module lists instead of split points
            model = build()
            kids = list(model.children())
            stages = [kids[:1], kids[1:5], [kids[5], kids[6]], kids[7:]]
        else:
            model = build()
        # an optimizer over the whole model, rebuilt per stage
        tr = rt.Trainer(model, adamw(model.parameters()), stages=stages,
                        scheduler=sched, microbatches=M, steps=STEPS,
                        mode=mode, standalone=True)
        losses = []
        for step in tr:
            losses.append(step.run(batch, nn.functional.cross_entropy))
        K = len(tr.stages)
        ok(rt.state_digest(model) == rt.state_digest(ref) and
           same(opt_state(model, [s.optimizer for s in tr.stages]), rstate)
           and losses == rlosses,
           "%s, %d stages (%s): parameters, optimizer state and losses "
           "bitwise those of the Trainer without stages" %
           (mode, K, "module lists" if stages and isinstance(stages[0], list) else
            "split points %s" % stages))
        ok(tr.finish().count("/") == K - 1, "%d stages: the result is the "
           "stages' digests joined by '/'" % K)

# a function of the parameters as the optimizer gives the same bits
def build_ref():
    r = build()
    o = adamw(r.parameters())
    train_with(batch, rt.Trainer(r, o, scheduler=sched(o), microbatches=M,
                                 steps=STEPS, standalone=True), r)
    return r


model = build()
tr = rt.Trainer(model, adamw, stages=[4], scheduler=sched, microbatches=M,
                steps=STEPS, standalone=True)
for step in tr:
    step.run(batch, nn.functional.cross_entropy)
ok(rt.state_digest(model) == rt.state_digest(build_ref()),
   "optimizer given as a function of the stage's parameters: the same bits")


# -- the wire form of a message, through a fake replica communicator -------
class FakeJob:
    def __init__(self):
        self.q = collections.deque()

    def replica_send(self, dst, addr, n):
        self.q.append(ctypes.string_at(addr, n))

    def replica_recv(self, src, addr, n):
        b = self.q.popleft()
        assert len(b) == n, (len(b), n)
        ctypes.memmove(addr, b, n)


link = pipeline._Link(FakeJob())
good = True
for t in (torch.randn(3, 4, 5), torch.randn(2, 3).to(torch.bfloat16),
          torch.arange(7), torch.zeros(0, 4), torch.tensor(2.5,
                                                        dtype=torch.float64),
          torch.randn(4, 6)[:, ::2]):
    link.send(0, 1, t)
    r = link.recv(0, 1, torch.device("cpu"))
    good = good and r.dtype == t.dtype and torch.equal(r, t)
ok(good, "a tensor message round-trips through the wire form (dtypes, "
   "empty, scalar, non-contiguous)")
raises(resihp.ProgramError, lambda: link.send(0, 1, torch.zeros(
    1, 1, 1, 1, 1, 1, 1)), "an activation of 7 dimensions is refused",
    "dimensions")
rnd = random.Random(5)
bad = []
for i in range(5000):  # a peer's header: ProgramError or a sane shape
    h = [rnd.choice((0, 1, 2, 6, 7, 8, -1, 1 << 40, rnd.randrange(-9, 99),
                     rnd.getrandbits(63) - (1 << 62)))
         for _ in range(pipeline._HEADER)]
    try:
        dt, shape = pipeline.parse_header(h)
        n = torch.empty(0, dtype=dt).element_size()
        for d in shape:
            n *= d
        if len(shape) > 6 or min(shape, default=0) < 0 or \
                n > pipeline._MAX_BYTES:
            bad.append(h)
    except resihp.ProgramError:
        pass
    except Exception as e:
        bad.append("%s: %s" % (type(e).__name__, e))
ok(not bad, "header fuzz: 5000 random headers give a sane shape or a "
   "ProgramError (%s)" % (bad[:2] or "nothing else"))


# the seconds a stage reports for a microbatch are its compute, not its
# waits for the neighbour stages (a slow stage 0 must not make stage 1 look
# slow to the detector): a clock that moves only while the link waits
class Clock:
    now = 0.0

    def perf_counter(self):
        return self.now


class WaitingJob(FakeJob):
    def __init__(self, clock):
        super().__init__()
        self.clock, self.reported = clock, []

    def replica_send(self, dst, addr, n):
        self.clock.now += 100.0
        super().replica_send(dst, addr, n)

    def replica_recv(self, src, addr, n):
        self.clock.now += 100.0
        super().replica_recv(src, addr, n)

    def report_microbatch(self, mb, seconds):
        self.reported.append(seconds)


clock = Clock()
tr = rt.Trainer(build(), adamw, stages=[3], microbatches=2, steps=1,
                standalone=True)
wj = WaitingJob(clock)
feed = pipeline._Link(wj)
feed.send(0, 1, torch.randn(4, 16))                   # the activation
feed.send(0, 1, pipeline._rng_state(torch.device("cpu")))
feed.send(2, 1, torch.randn(4, 3))                    # its gradient
feed.send(2, 1, torch.tensor([0.5], dtype=torch.float64))
# stage 1 of 3 (its output goes on to a stage 2, fed here)
tr.K, tr.job, tr.link, real = 3, wj, pipeline._Link(wj), pipeline.time
pipeline.time = clock
try:
    st = pipeline.PipelineStep(tr, 0, [0])
    item = tr._forward(tr.stages[1], st, 0, batch, nn.functional.cross_entropy)
    tr._backward(tr.stages[1], *item)
finally:
    pipeline.time = real
ok(wj.reported == [0.0], "a stage's microbatch time leaves out its waits for "
   "the other stages (reported %s, the clock moving only in its sends and "
   "receives)" % wj.reported)

# -- refused, saying what to do ---------------------------------------------
m = build()
raises(resihp.ProgramError, lambda: rt.Trainer(
    m, adamw, stages=[3, 3], microbatches=2, steps=1, standalone=True),
    "split points that do not increase are refused", "increase strictly")
raises(resihp.ProgramError, lambda: rt.Trainer(
    m, adamw, stages=[1, 2], microbatches=2, steps=1, standalone=True),
    "a stage without trained parameters is refused", "no trained parameter")
emb = nn.Embedding(3, 16)
head = nn.Linear(16, 3)
head.weight = emb.weight
tm = nn.Sequential(emb, nn.Linear(16, 16), head)
raises(resihp.ProgramError, lambda: rt.Trainer(
    tm, adamw, stages=[1], microbatches=2, steps=1, standalone=True),
    "tied weights across stages are refused", "tied weights")
o = adamw(m.parameters())
raises(resihp.ProgramError, lambda: rt.Trainer(
    m, o, stages=[3], scheduler=sched(o), microbatches=2, steps=1,
    standalone=True), "a scheduler object (not a function) is refused",
    "function of the stage's optimizer")
tr = rt.Trainer(m, adamw, stages=[3], microbatches=2, steps=1,
                standalone=True)
raises(resihp.ProgramError, lambda: [list(s) for s in tr],
       "iterating a pipeline step says to call step.run", "step.run")

# -- move_layers: the layer calls of resihp.Job refuse bad input ----------
from resihp import _lib
from resihp.job import Job, Step, check_layers
from resihp.torch import layers as lay

nojob = Job.__new__(Job)  # never joined: a refusal must come first
nojob._h = ctypes.c_void_p()
buf = torch.zeros(4)
good_buf = (buf.data_ptr(), 16)
for what, fn, needle in (
        ("no layers", lambda: check_layers([], [1]), "1 to"),
        ("a negative layer size", lambda: check_layers([3, -1], [1, 1]),
         ">= 0"),
        ("a rank with no layer", lambda: check_layers([3, 4], [2, 0]),
         "at least one"),
        ("counts that do not sum to the layers",
         lambda: check_layers([3, 4, 5], [1, 1]), "sum to the 3"),
        ("a partition of the wrong number of ranks",
         lambda: check_layers([3, 4], [1, 1], shards=3), "3 ranks"),
        ("a float count", lambda: check_layers([3, 4], [1.5, 0.5]),
         "not an integer"),
        ("set_layers with bad counts",
         lambda: nojob.set_layers([3, 4], [3]), "sum to the 2"),
        ("a state that is not a list", lambda: nojob.set_state(5),
         "(address, bytes)"),
        ("a buffer that is not a pair",
         lambda: nojob.commit_layers([(1, 2, 3)]), "pair"),
        ("a negative size", lambda: nojob.commit_layers([(1, -4)]),
         "size >= 0"),
        ("a buffer without an address",
         lambda: nojob.commit_layers([(0, 8)]), "an address"),
        ("too many buffers",
         lambda: nojob.commit_layers([good_buf] * 4097), "at most 4096"),
        ("layer state that is not a list",
         lambda: nojob.set_layer_state(7), "buffer lists"),
        ("a layer's bad buffer",
         lambda: nojob.set_layer_state([[good_buf], [(0, 1)]]),
         "layers[1]"),
        ("a rank buffer of another kind",
         lambda: nojob.set_layer_state([[good_buf]], rank=["x"]),
         "rank[0]"),
        ("a committed layer state that is not a list",
         lambda: nojob.commit_layer_state(7), "buffer lists"),
        ("a committed layer's bad buffer",
         lambda: nojob.commit_layer_state([[good_buf], [(0, 1)]]),
         "layers[1]"),
        ("a committed rank buffer of another kind",
         lambda: nojob.commit_layer_state([[good_buf]], rank=["x"]),
         "rank[0]"),
        ("a committed layer state of too many buffers",
         lambda: nojob.commit_layer_state([[good_buf] * 4000],
                                          rank=[good_buf] * 97),
         "at most 4096")):
    raises(ValueError, fn, "resihp.Job refuses %s" % what, needle)
c = _lib.JobStep()
c.layers_moved = 1
ok(Step(c).layers_moved and not Step(_lib.JobStep()).layers_moved,
   "Step.layers_moved says what begin_step's layers_moved says")


# -- move_layers: moves between the standalone stages keep the bits ------
def layer_digests(model, optimizer):
    """Every layer's digest as the stages report them, '/'-joined."""
    return "/".join(lay.layer_digest(mods, optimizer)
                    for mods in lay.units(model)[0])


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, dampening=0.1)


STEPS = 7
PLAN = {-1: [1, 3], 0: [3, 1], 1: [2, 2], 3: [1, 3], 4: [2, 2]}
for mode, opt_fn in (("deterministic", adamw), ("float32", adamw),
                     ("deterministic", sgd)):
    ref = build()
    ropt = opt_fn(ref.parameters())
    rlosses = train_with(batch, rt.Trainer(
        ref, ropt, scheduler=sched(ropt), microbatches=M, steps=STEPS,
        mode=mode, standalone=True), ref)
    model = build()  # 4 layers: [Linear ReLU Dropout] [Linear Tanh Dropout]
    tr = rt.Trainer(model, opt_fn, stages=[3], scheduler=sched,  # ...
                    microbatches=M, steps=STEPS, mode=mode, standalone=True,
                    move_layers=True)
    tr.move_layers_to(PLAN[-1])  # before Adam has created its state
    losses, seen = [], []
    for step in tr:
        losses.append(step.run(batch, nn.functional.cross_entropy))
        seen.append(step.partition)
        if step.index in PLAN:
            tr.move_layers_to(PLAN[step.index])
    name = "%s, %s" % (mode, type(ropt).__name__)
    ok(seen == [[1, 3], [3, 1], [2, 2], [2, 2], [1, 3], [2, 2], [2, 2]],
       "%s: the stages held the partitions moved to (%s)" % (name, seen))
    ok(rt.state_digest(model) == rt.state_digest(ref) and losses == rlosses
       and tr.finish() == layer_digests(ref, ropt),
       "%s: layers moved 5 times (and back) between the 2 stages: "
       "parameters, every layer's optimizer state and the losses bitwise "
       "those of the Trainer without stages" % name)
    ok(all(s.optimizer.param_groups[0]["lr"] == ropt.param_groups[0]["lr"]
           for s in tr.stages),
       "%s: the rebuilt optimizers keep the scheduler's learning rate" % name)

# a stage loaded from the layers of other stages (what a catch-up by layer
# copies: each layer from the stage that holds it, the rank's own state
# from the same stage index) trains on to the same bits
ref = build()
ropt = adamw(ref.parameters())
rlosses = train_with(batch, rt.Trainer(
    ref, ropt, scheduler=sched(ropt), microbatches=M, steps=STEPS,
    standalone=True), ref)
src = rt.Trainer(build(), adamw, stages=[8], scheduler=sched, microbatches=M,
                 steps=STEPS, standalone=True, move_layers=True)
for step in src:
    step.run(batch, nn.functional.cross_entropy)
    if step.index == 2:
        break
src._open = None
model = build(seed=7)  # other parameters: all of them must come in
dst = rt.Trainer(model, adamw, stages=[3], scheduler=sched, microbatches=M,
                 steps=STEPS, standalone=True, move_layers=True)
for k, s in enumerate(dst.stages):
    for u in s.layers:
        holder = [t for t in src.stages if u in t.layers][0]
        lay.copy_layer(s.state.buffers_of(u), holder.state.buffers_of(u))
    lay.copy_layer(s.state.rank_buffers(), src.stages[k].state.rank_buffers())
    s.state.catch_up(None)
dst._next = 3
losses = [step.run(batch, nn.functional.cross_entropy) for step in dst]
ok(rt.state_digest(model) == rt.state_digest(ref) and
   losses == rlosses[3:] and dst.finish() == layer_digests(ref, ropt),
   "stages of the partition 1,3 loaded layer by layer from stages of 3,1 "
   "after step 2 train on to the same bits")


# all or nothing: a peer failing in the middle of a move (its send or
# receive raises, as the replica communicator does when a rank died)
# leaves this rank's stage as it was, tells the others (commit_layer_state
# failed=True) and raises: the replica fails, never half-moved. A move
# that succeeds commits the new stage's state by layer (commit_layer_state,
# not the opaque commit_layers), so that the moved replica still serves a
# catch-up by layer and can still shrink
class FailingJob:
    def __init__(self, fail_at):
        self.calls, self.fail_at, self.committed = 0, fail_at, []

    def _op(self):
        self.calls += 1
        if self.calls == self.fail_at:
            raise resihp.ResihpError(-7, "resihp_recv")  # RESIHP_EPEER

    def replica_send(self, dst, addr, n):
        self._op()

    def replica_recv(self, src, addr, n):
        self._op()

    def commit_layers(self, state, failed=False):
        self.committed.append(("opaque", failed))

    def commit_layer_state(self, layers, rank=(), failed=False):
        self.committed.append(("by layer", failed) if failed else
                              ("by layer", layers, rank))


def as_rank1(fj):
    """A standalone trainer of 2 stages after step 0, then as rank 1
    (layers 1-3) of a replica under the job fj; (trainer, model)."""
    model = build()
    tr = rt.Trainer(model, adamw, stages=[3], scheduler=sched,
                    microbatches=M, steps=STEPS, standalone=True,
                    move_layers=True)
    for step in tr:
        step.run(batch, nn.functional.cross_entropy)
        break
    tr._open = None
    tr.stages, tr.job = tr.stages[1:], fj
    return tr, model


# 3,1 takes layers 1 and 2 off rank 1 (sent), which keeps layer 3
fj = FailingJob(0)
tr, model = as_rank1(fj)
tr._move([3, 1], 1)
st = tr.stages[0].state
ok(tr.counts == [3, 1] and st.layers == [3] and fj.calls > 0 and
   fj.committed == [("by layer", st.layer_buffers(), st.rank_buffers())],
   "a move commits the new stage's state by layer (commit_layer_state: "
   "layer 3's buffers, then the rank's), not an opaque list")

for at, who in ((1, "its first transfer"), (4, "a later transfer")):
    # this process as rank 1 of 2 (layers 1-3): 3,1 takes layers 1 and 2
    # off it (sent), 1,3 would bring nothing; the peer fails mid-move
    fj = FailingJob(at)
    tr, model = as_rank1(fj)
    stage = tr.stages[0]
    before = (rt.state_digest(model), stage.digest())
    raises(resihp.ResihpError, lambda: tr._move([3, 1], 1),
           "a peer failing at %s of a move raises" % who, "EPEER")
    ok(tr.stages == [stage] and tr.counts == [1, 3] and
       fj.committed == [("by layer", True)] and
       (rt.state_digest(model), stage.digest()) == before,
       "a move failed at %s: the stage is untouched (parameters, optimizer "
       "state, partition) and the others were told (commit failed=True)" %
       who)

# -- move_layers: refused, saying what to do --------------------------------
m = build()
kids = list(m.children())
for what, kw, needle in (
        ("module lists", dict(stages=[kids[:3], kids[3:]]), "split points"),
        ("a split point inside a layer", dict(stages=[2]), "not the start"),
        ("tied weights across layers",
         dict(stages=[1], model=tm), "tied weights")):
    raises(resihp.ProgramError, lambda kw=kw: rt.Trainer(
        kw.pop("model", m), adamw, microbatches=2, steps=1,
        standalone=True, move_layers=True, **kw),
        "move_layers: %s are refused" % what, needle)
two = torch.optim.AdamW([{"params": list(kids[0].parameters())},
                         {"params": list(kids[3].parameters()), "lr": 0.1}])
raises(resihp.ProgramError, lambda: rt.Trainer(
    m, two, stages=[3], microbatches=2, steps=1, standalone=True,
    move_layers=True), "move_layers: an optimizer of several param_groups "
    "is refused", "function of the parameters")
tr = rt.Trainer(m, adamw, stages=[3], microbatches=2, steps=1,
                standalone=True, move_layers=True)
for bad in ([4, 0], [1, 1, 2], [3, 3], "ab"):
    raises(resihp.ProgramError, lambda bad=bad: tr.move_layers_to(bad),
           "move_layers_to(%r) is refused" % (bad,), "partition")
raises(resihp.ProgramError, lambda: rt.Trainer(
    m, adamw(m.parameters()), microbatches=2, steps=1, standalone=True,
    move_layers=True), "move_layers without stages= is refused", "stages=")
raises(resihp.ProgramError, lambda: rt.Trainer(
    m, adamw, stages=[3], microbatches=2, steps=1,
    standalone=True).move_layers_to([2, 2]),
    "move_layers_to without move_layers is refused", "move_layers=True")
report()
