# SPDX-License-Identifier: BSD-3-Clause
"""resihp.torch without a cluster (TAP): the state encoding and its fuzzing,
the catch-up round trip of model/optimizer/scheduler/RNG through the
replica state buffers, determinism of the reference, the fixed-point
emulation a CUDA model uses (against the C code, and in training), bad
input refused. tests/python/torch_cuda.py does the same on a CUDA device."""
import ctypes
import os
import random
import threading

import torch
import torch.nn as nn

import resihp
import resihp.torch as rt
from resihp import job as rj
from resihp.torch import codec, fixed
from resihp.torch.state import ReplicaState
from tap import ok, raises, report
from trainloop import batch, train_with

def build(seed=1):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(16, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def train(tr, model, steps=None):
    return train_with(batch, tr, model, steps)


# -- the safe encoding -----------------------------------------------------
model, opt, sched = build()
tr = rt.Trainer(model, opt, scheduler=sched, microbatches=4, steps=3,
                standalone=True)
train(tr, model)
meta = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
        "rng": torch.get_rng_state(), "k": {1: (2.5, float("inf"), None)}}
meta["scheduler"].pop("lr_lambdas", None)
back = codec.decode(codec.encode(meta))
ok(back["k"] == {1: (2.5, float("inf"), None)} and
   torch.equal(back["rng"], meta["rng"]) and
   back["optimizer"]["param_groups"][0]["betas"] ==
   meta["optimizer"]["param_groups"][0]["betas"] and
   torch.equal(back["optimizer"]["state"][0]["exp_avg"],
               meta["optimizer"]["state"][0]["exp_avg"]),
   "codec: optimizer/scheduler/RNG state round-trips")
raises(TypeError, lambda: codec.encode({"f": lambda: 0}),
       "codec: a function is not encoded", "cannot encode")
blob = codec.encode(meta)
rnd = random.Random(13)
other = []
for i in range(3000):  # mutations of a real blob: ValueError or a value
    b = bytearray(blob)
    for _ in range(rnd.randint(1, 8)):
        op = rnd.randrange(3)
        at = rnd.randrange(len(b))
        if op == 0:
            b[at] = rnd.randrange(256)
        elif op == 1:
            del b[at:at + rnd.randint(1, 64)]
        else:
            b[at:at] = bytes(rnd.choice(b'{}[]":,0123456789tdbxsv') for _ in
                             range(rnd.randint(1, 8)))
    try:
        codec.decode(bytes(b))
    except ValueError:
        pass
    except Exception as e:
        other.append("%s: %s" % (type(e).__name__, e))
ok(not other, "codec fuzz: 3000 mutated states give a value or ValueError "
   "(%s)" % (other[:2] or "nothing else"))
raises(ValueError, lambda: codec.decode(b'{"x":"torch.float32","s":[9],'
                                        b'"v":"AAAA"}'),
       "codec: a tensor whose bytes do not fill its shape is refused")
for shape in (b"Infinity", b"-Infinity", b"NaN", b"1e999"):
    raises(ValueError, lambda: codec.decode(b'{"x":"torch.float32","s":[' +
                                            shape + b'],"v":""}'),
           "codec: a tensor of shape [%s] is ValueError, nothing else" %
           shape.decode())

# -- catch-up round trip through the buffers ---------------------------------
# A trains 3 steps; B (built from another seed) receives A's buffers byte
# for byte, as libresihp's catch-up does, and loads them; both train 3 more.
ma, oa, sa = build(1)
ta = rt.Trainer(ma, oa, scheduler=sa, microbatches=4, steps=6,
                standalone=True)
la = train(ta, ma, steps=3)
mb_, ob, sb = build(2)
tb = rt.Trainer(mb_, ob, scheduler=sb, microbatches=4, steps=6,
                standalone=True)
src, dst = ta.state.buffers(), tb.state.buffers()
ok([n for _, n in src] == [n for _, n in dst],
   "the state buffers of two replicas have the same sizes")
for (sa_, n), (da, _) in zip(src, dst):
    ctypes.memmove(da, sa_, n)
step_of = tb.state.load()
tb._next = step_of + 1
ok(step_of == 2, "the received state is of step 2 (%d)" % step_of)
ok(rt.state_digest(ma, oa) == rt.state_digest(mb_, ob) and
   sa.state_dict()["last_epoch"] == sb.state_dict()["last_epoch"],
   "after load: model, optimizer and scheduler equal the source's")
la += train(ta, ma)
lb = train(tb, mb_)
ok(rt.state_digest(ma, oa) == rt.state_digest(mb_, ob) and la[3:] == lb,
   "the caught-up replica trains on bitwise like its source")


# -- extra_state: the user's own state objects, handed over too ------------
class Position:  # a data loader's position: no tensor
    def __init__(self):
        self.seen, self.epoch = 0, 0

    def state_dict(self):
        return {"seen": self.seen, "epoch": self.epoch, "log": [1, "a"]}

    def load_state_dict(self, sd):
        self.seen, self.epoch = sd["seen"], sd["epoch"]


def with_extra(seed):
    m, o, s = build(seed)
    ema = nn.Linear(8, 16)  # an EMA of the first layer
    ema.load_state_dict(m[0].state_dict())
    extra = {"pos": Position(), "ema": ema, "empty": nn.Sequential()}

    def update_ema(step):  # from the new parameters, before the commit
        with torch.no_grad():
            for e, p in zip(ema.parameters(), m[0].parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)

    tr = rt.Trainer(m, o, scheduler=s, microbatches=4, steps=6,
                    standalone=True, extra_state=extra, after_step=update_ema)
    return m, o, tr, extra


def train_extra(tr, m, extra, steps=None):
    losses = []
    for step in tr:
        for mb in step:
            x, y = batch(step.index, mb)
            step.backward(torch.nn.functional.cross_entropy(m(x), y))
            extra["pos"].seen += 1
        losses.append(step.loss)
        if steps is not None and step.index + 1 >= steps:
            break
    return losses


xa_m, xa_o, xa_t, xa_e = with_extra(1)
train_extra(xa_t, xa_m, xa_e, steps=3)
xb_m, xb_o, xb_t, xb_e = with_extra(2)
src, dst = xa_t.state.buffers(), xb_t.state.buffers()
for (sa_, n), (da, _) in zip(src, dst):
    ctypes.memmove(da, sa_, n)
xb_t.state.load()
xb_t._next = 3
ok(xb_e["pos"].seen == 12 and
   rt.state_digest(xb_e["ema"]) == rt.state_digest(xa_e["ema"]) and
   rt.state_digest(xb_e["ema"]) != rt.state_digest(xb_m[0]),
   "extra_state: a data loader position and an EMA module reach the "
   "replacement (position %d)" % xb_e["pos"].seen)
la, lb = train_extra(xa_t, xa_m, xa_e), train_extra(xb_t, xb_m, xb_e)
ok(la == lb and rt.state_digest(xa_e["ema"]) == rt.state_digest(xb_e["ema"])
   and xa_e["pos"].seen == xb_e["pos"].seen == 24,
   "extra_state: the caught-up replica goes on like its source")
raises(resihp.ProgramError,
       lambda: rt.Trainer(*build()[:2], microbatches=2, steps=1,
                          standalone=True, extra_state={"x": object()}),
       "extra_state without state_dict/load_state_dict is refused",
       "load_state_dict")
xa_e["ema"].bias = nn.Parameter(torch.zeros(3))
raises(resihp.ProgramError, lambda: xa_t.state.commit(9),
       "extra_state whose tensors change shape is refused at commit",
       "keep them fixed")


def put_meta(state, blob):
    state.meta[:8] = torch.tensor(list(len(blob).to_bytes(8, "little")),
                                  dtype=torch.uint8)
    state.meta[8:8 + len(blob)] = torch.tensor(list(blob), dtype=torch.uint8)


good = bytes(tb.state.meta[8:8 + int.from_bytes(
    bytes(tb.state.meta[:8].tolist()), "little")].numpy())
evil = codec.decode(good)
evil["scheduler"]["__class__"] = 1
evil["scheduler"]["base_lrs"] = [1.0]
put_meta(tb.state, codec.encode(evil))
raises(resihp.ProgramError, tb.state.load,
       "a received scheduler state with fields this scheduler lacks is "
       "refused", "scheduler fields")
ok("__class__" not in vars(sb) and sb.base_lrs != [1.0],
   "the refused scheduler state set nothing")
older = codec.decode(good)
del older["extra"]  # as written before extra_state existed
put_meta(tb.state, codec.encode(older))
ok(tb.state.load() == older["step"], "a state without extra_state (an older "
   "checkpoint) loads when the replica has none")
for what, bad in (("an optimizer state that is a number", {"optimizer": 5}),
                  ("a step that is missing", {"step": None}),
                  ("an RNG state that is a string", {"rng": "x"})):
    wrong = codec.decode(good)
    for k, v in bad.items():
        if v is None:
            del wrong[k]
        else:
            wrong[k] = v
    put_meta(tb.state, codec.encode(wrong))
    raises(resihp.ProgramError, tb.state.load,
           "a received state with %s is a ProgramError" % what, "malformed")
put_meta(tb.state, good)
tb.state.meta[8:12] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
raises(resihp.ProgramError, tb.state.load,
       "a corrupt received state is refused", "malformed")
newer = codec.encode({"version": 99, "step": 1})
tb.state.meta[:8] = torch.tensor(list(len(newer).to_bytes(8, "little")),
                                 dtype=torch.uint8)
tb.state.meta[8:8 + len(newer)] = torch.tensor(list(newer),
                                               dtype=torch.uint8)
raises(resihp.ProgramError, tb.state.load,
       "a state of an unknown format version is refused", "version 99")

# -- the reference is deterministic; modes --------------------------------
digests = []
for mode in ("deterministic", "deterministic", "float32", "bfloat16"):
    m, o, s = build()
    train(rt.Trainer(m, o, scheduler=s, microbatches=5, steps=4, mode=mode,
                     standalone=True), m)
    digests.append(rt.state_digest(m, o))
ok(digests[0] == digests[1], "deterministic mode: same digest twice")
ok(len(set(digests[1:])) == 3, "float32 and bfloat16 exchanges train too "
   "(their own results)")
for mode, d in (("deterministic", digests[0]), ("float32", digests[2])):
    m, o, s = build()
    tr = rt.Trainer(m, o, scheduler=s, microbatches=5, steps=4, mode=mode,
                    standalone=True, bucket_mb=0.0005)
    tr.overlap = True  # the bucket thread during backward, without a job
    train(tr, m)
    ok(rt.state_digest(m, o) == d, "%s: the same result with the buckets "
       "exchanged during backward" % mode)

# -- before_step: between the exchange and optimizer.step() -----------------
def run_hook(hook, mode="deterministic", **kw):
    m, o, s = build()
    tr = rt.Trainer(m, o, scheduler=s, microbatches=5, steps=4, mode=mode,
                    standalone=True, before_step=hook and hook(m), **kw)
    if kw.get("bucket_mb"):
        tr.overlap = True  # the bucket thread during backward
    train(tr, m)
    return rt.state_digest(m, o), s.state_dict()["last_epoch"]


seen = []


def watcher(m):
    def hook(step):
        seen.append((step.index, step.loss,
                     float(torch.nn.utils.clip_grad_norm_(m.parameters(),
                                                          float("inf")))))
    return hook


ok(run_hook(watcher)[0] == digests[0] and [s[0] for s in seen] ==
   [0, 1, 2, 3] and all(s[1] is not None and s[2] > 0 for s in seen),
   "before_step: called once a step with the loss and the summed gradient "
   "(norms %s); a hook that changes nothing changes no bit" %
   ", ".join("%.4f" % s[2] for s in seen))


def clip(m):
    return lambda step: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)


clipped = run_hook(clip)[0]
ok(clipped != digests[0] and clipped == run_hook(clip)[0] and
   clipped == run_hook(clip, bucket_mb=0.0005)[0],
   "before_step clipping (max norm 0.05 < every step's norm): another "
   "result, the same bits twice and with the buckets overlapped")
ok(run_hook(clip, "float32")[0] != digests[2],
   "before_step clips in float32 mode too")
m0, o0, _ = build()
ok(run_hook(lambda m: lambda step: False) == (rt.state_digest(m0), 0),
   "before_step returning False skips the optimizer and scheduler step "
   "(parameters and schedule as built)")


def boom(m):
    def hook(step):
        raise RuntimeError("grad norm is nan")
    return hook


raises(resihp.ProgramError, lambda: run_hook(boom),
       "an exception in before_step stops the run, named",
       "before_step raised RuntimeError at step 0: grad norm is nan")

# -- the fixed point of a CUDA model: torch ops, here on the CPU --------------
fb = rj.fixed_frac_bits()
g = torch.Generator().manual_seed(5)
x = torch.cat([
    torch.randn(20000, generator=g) * torch.pow(
        2.0, torch.randint(-45, 45, (20000,), generator=g).float()),
    ((torch.randint(-(1 << 21), 1 << 21, (2000,), generator=g).double() +
      0.5) * 2.0 ** -fb).float(),  # ties
    torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0,
                  2.0 ** (63 - fb), -2.0 ** (63 - fb), 3.4e38, -3.4e38,
                  1e-45])])
acc0 = torch.randint(-(1 << 63), (1 << 63) - 1, (x.numel(),), generator=g,
                     dtype=torch.int64)  # wraps modulo 2^64 too
ref, emu = acc0.clone(), acc0.clone()
rj.fixed_accumulate_float(ref.data_ptr(), x.data_ptr(), x.numel(), fb)
fixed.accumulate_emulated(emu, x, fb)
ok(torch.equal(ref, emu), "fixed point: the torch emulation (a CUDA "
   "model's) equals the C reference (ties, NaN, +-inf, saturation)")
fr, fe = torch.empty(x.numel()), torch.empty(x.numel())
rj.fixed_to_float(fr.data_ptr(), acc0.data_ptr(), acc0.numel(), fb)
fixed.to_float_emulated(fe, acc0, fb)
ok(torch.equal(fr.view(torch.int32), fe.view(torch.int32)),
   "fixed point: the emulation's way back to float32 equals the C code")
c_calls = fixed.accumulate, fixed.to_float
fixed.accumulate = fixed.accumulate_emulated
fixed.to_float = fixed.to_float_emulated
try:
    m, o, s = build()
    train(rt.Trainer(m, o, scheduler=s, microbatches=5, steps=4,
                     standalone=True), m)
finally:
    fixed.accumulate, fixed.to_float = c_calls
ok(rt.state_digest(m, o) == digests[0], "deterministic mode trains to the "
   "same bits with the emulation as with the C code")

# -- what help() shows ----------------------------------------------------
import inspect  # noqa: E402
from resihp.torch import ddp as rddp  # noqa: E402

for cls in (rt.Trainer, rddp.Adapter):
    doc = cls.__doc__ or ""
    params = [n for n in inspect.signature(cls.__init__).parameters
              if n != "self"]
    missing = [n for n in params if n + ":" not in doc]
    ok(not missing, "help(%s) documents every argument (missing: %s)" %
       (cls.__name__, ", ".join(missing) or "none"))
    for what in (("deterministic", "float32") if cls is rt.Trainer else ()) + \
            ("failure", "coordinator"):
        ok(what in doc, "help(%s) says %s" % (cls.__name__, what))
undoc = ["%s.%s" % (c.__name__, n) for c in (rt.Trainer, rt.Step,
                                             rddp.Adapter, rddp.Step)
         for n, f in vars(c).items()
         if (not n.startswith("_") or n == "__iter__") and
         callable(getattr(f, "fget", f)) and not getattr(f, "fget", f).__doc__]
ok(not undoc and rt.Step.__doc__, "every public method has a docstring "
   "(missing: %s)" % (", ".join(undoc) or "none"))
readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "..", "..", "README.md")).read()
ex = readme[readme.index("rt.Trainer("):]
ok("workload=" in ex[:ex.index("```")], "the README's Trainer example "
   "passes workload=")

# -- bad input -------------------------------------------------------------
m, o, s = build()
raises(resihp.ProgramError, lambda: rt.Trainer(m, o, microbatches=2,
                                               steps=1, mode="fp8",
                                               standalone=True),
       "an unknown mode is refused", "use one of")
mm = nn.Linear(4, 4).to("meta")
raises(resihp.ProgramError,
       lambda: rt.Trainer(mm, torch.optim.SGD(mm.parameters(), lr=0.1),
                          microbatches=2, steps=1, standalone=True),
       "a model on the 'meta' device is refused", "'meta'")
md = nn.Linear(4, 4).double()
raises(resihp.ProgramError,
       lambda: rt.Trainer(md, torch.optim.SGD(md.parameters(), lr=0.1),
                          microbatches=2, steps=1, standalone=True),
       "float64 parameters are refused", "float32")
m, o, s = build()
o2 = torch.optim.SGD(m.parameters(), lr=0.1)
for opts in ([o, o2], (o,)):
    raises(resihp.ProgramError,
           lambda: rt.Trainer(m, opts, microbatches=2, steps=1,
                              standalone=True),
           "a %s of optimizers is refused, saying what to do" %
           type(opts).__name__, "param_groups")


class Locked(torch.optim.SGD):  # its copy lacks the lock
    def __init__(self, params, **kw):
        super().__init__(params, **kw)
        self.lock = threading.Lock()

    def step(self, closure=None):
        with self.lock:
            return super().step(closure)


class Uncopyable(Locked):  # the copy itself fails
    def __getstate__(self):
        return dict(super().__getstate__(), lock=self.lock)


class NeedsClosure(torch.optim.SGD):
    def step(self, closure):
        return super().step(closure)


raises(resihp.ProgramError,
       lambda: rt.Trainer(m, Locked(m.parameters(), lr=0.1), microbatches=2,
                          steps=1, standalone=True),
       "an optimizer whose copy lacks an attribute: the error says why and "
       "what to do", "__getstate__/__setstate__")
raises(resihp.ProgramError,
       lambda: rt.Trainer(m, Uncopyable(m.parameters(), lr=0.1),
                          microbatches=2, steps=1, standalone=True),
       "an optimizer deepcopy cannot copy: the error says deepcopy failed",
       "copy.deepcopy failed")
raises(resihp.ProgramError,
       lambda: rt.Trainer(m, NeedsClosure(m.parameters(), lr=0.1),
                          microbatches=2, steps=1, standalone=True),
       "an optimizer whose step needs a closure: the error names the step "
       "and why", "step() of a copy")

# -- buffers a forward updates ----------------------------------------------
nojob = {"coordinator": "", "replica": -1}  # fails at join: RESIHP_EINVAL


def bn_model(**kw):
    torch.manual_seed(3)
    mod = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16, **kw),
                        nn.Linear(16, 3))
    return mod, torch.optim.SGD(mod.parameters(), lr=0.1)


mbn, obn = bn_model()
raises(resihp.ProgramError,
       lambda: rt.Trainer(mbn, obn, microbatches=2, steps=1,
                          job_options=nojob),
       "BatchNorm tracking running statistics is refused before joining, "
       "saying what to do", "track_running_stats=False")
mbn.train(False)
raises(resihp.ResihpError, lambda: rt.Trainer(mbn, obn, microbatches=2,
                                              steps=1, job_options=nojob),
       "BatchNorm in eval mode (frozen statistics) is accepted",
       "RESIHP_EINVAL")
raises(resihp.ResihpError,
       lambda: rt.Trainer(*bn_model(track_running_stats=False),
                          microbatches=2, steps=1, job_options=nojob),
       "BatchNorm(track_running_stats=False) is accepted", "RESIHP_EINVAL")
rddp.one_rank_group()
mbn, _ = bn_model()
dbn = torch.nn.parallel.DistributedDataParallel(mbn)
raises(resihp.ProgramError,
       lambda: rddp.Adapter(dict(nojob, microbatches=2, steps=1), dbn,
                            torch.optim.SGD(dbn.parameters(), lr=0.1)),
       "the DDP adapter refuses BatchNorm too", "track_running_stats=False")
mbn, obn = bn_model()
tbn = rt.Trainer(mbn, obn, microbatches=2, steps=1, standalone=True)
ok(train(tbn, mbn) and True, "standalone (the reference) trains BatchNorm")


class Counter(nn.Linear):  # a buffer of its own that forward updates
    def __init__(self):
        super().__init__(8, 3)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen += x.shape[0]
        return super().forward(x)


torch.manual_seed(4)
mc = Counter()
tc = rt.Trainer(mc, torch.optim.SGD(mc.parameters(), lr=0.1), microbatches=2,
                steps=2, standalone=True)
tc._watched = False  # as in a resilient run: watch the first step
raises(resihp.ProgramError, lambda: train(tc, mc),
       "a buffer changed by the first step's forward passes stops the run, "
       "named", "buffer 'seen' changed")
mc = Counter()
mc.seen.fill_(float("nan"))
mc.forward = super(Counter, mc).forward  # constant buffers, NaN included
tc = rt.Trainer(mc, torch.optim.SGD(mc.parameters(), lr=0.1), microbatches=2,
                steps=2, standalone=True)
tc._watched = False
ok(len(train(tc, mc)) == 2, "constant buffers (NaN included) pass the watch")
t = rt.Trainer(m, o, microbatches=2, steps=1, standalone=True)


def skip_backward():
    for step in t:
        for mb in step:
            pass


raises(resihp.ProgramError, skip_backward,
       "a microbatch without backward is refused", "step.backward")
raises(resihp.ResihpError,
       lambda: rt.Trainer(m, o, microbatches=2, steps=1,
                          job_options={"coordinator": "", "replica": -1}),
       "no coordinator: the C error name comes with the exception",
       "RESIHP_EINVAL")

report()
