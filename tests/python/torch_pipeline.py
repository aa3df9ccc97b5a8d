# SPDX-License-Identifier: BSD-3-Clause
"""resihp.torch's pipeline replicas without a cluster (TAP): the Trainer
with stages=, standalone (the K stages in this process, messages in
memory), is bitwise the Trainer without stages for K = 1, 2, 4 (model,
optimizer state, losses), with dropout in several stages (the RNG state
travels with the activation); the wire form of a message round-trips and
a peer's header is parsed safely (fuzz); bad stages are refused.
The layer calls of resihp.Job refuse bad input before reaching the
library. tests/integration/torch-pipeline.test runs the stages as ranks
of replicas under resihp-run, through faults."""
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
         "rank[0]")):
    raises(ValueError, fn, "resihp.Job refuses %s" % what, needle)
c = _lib.JobStep()
c.layers_moved = 1
ok(Step(c).layers_moved and not Step(_lib.JobStep()).layers_moved,
   "Step.layers_moved says what begin_step's layers_moved says")


report()
