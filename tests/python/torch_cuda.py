# SPDX-License-Identifier: BSD-3-Clause
"""resihp.torch with a model on a CUDA device, without a cluster (TAP): the
fixed-point emulation against libresihp's C reference bit for bit, the
gradient exchange through the pinned wire (a stand-in job that sums two
identical replicas, with and without overlap, with a reassignment), the
Trainer's modes and determinism, the catch-up round trip through the host
buffers (dropout and the device's RNG included), bad input refused.

Skips (exit 0, TAP "1..0 # SKIP") without a CUDA device. For development,
RESIHP_TEST_DEVICE=cpu runs the device-independent checks on the CPU."""
import ctypes
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = os.environ.get("RESIHP_TEST_DEVICE", "cuda")
if DEV.startswith("cuda") and not torch.cuda.is_available():
    print("1..0 # SKIP no CUDA device visible to torch %s" % torch.__version__)
    sys.exit(0)
DEV = torch.device(DEV)
CUDA = DEV.type == "cuda"
# the same bits from cuBLAS run after run (read at its first call)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.use_deterministic_algorithms(True, warn_only=True)

import resihp  # noqa: E402
import resihp.torch as rt  # noqa: E402
from resihp import job as rj  # noqa: E402
from resihp.torch import codec, fixed  # noqa: E402
from resihp.torch.grads import Gradients  # noqa: E402
from tap import ok, raises, report  # noqa: E402
from trainloop import train_with  # noqa: E402

def same_bits(a, b):
    """Bitwise equality of two tensors of one dtype, wherever they are."""
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {torch.float32: torch.int32, torch.float64: torch.int64,
            torch.bfloat16: torch.int16}.get(a.dtype)
    return torch.equal(a.view(view), b.view(view)) if view else torch.equal(
        a, b)


# -- fixed point: the torch emulation on the device against the C code -------
FB = rj.fixed_frac_bits()


def fixed_inputs(n=1 << 16, seed=5):
    """float32 values: ordinary ones over a wide range of scales, exact
    ties of the rounding, saturating and special values."""
    g = torch.Generator().manual_seed(seed)
    ordinary = torch.randn(n, generator=g) * torch.pow(
        2.0, torch.randint(-45, 45, (n,), generator=g).float())
    m = torch.randint(-(1 << 21), 1 << 21, (4096,), generator=g)
    ties = ((m.double() + 0.5) * 2.0 ** -FB).float()
    top = 2.0 ** (63 - FB)
    special = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5],
                           dtype=torch.float64) * 2.0 ** -FB
    special = torch.cat([special.float(), torch.tensor(
        [float("inf"), float("-inf"), float("nan"), top, -top,
         top * (1 - 2.0 ** -24), -top * (1 - 2.0 ** -24), top * 1.5,
         -top * 1.5, 3.4e38, -3.4e38, 1e-45, -1e-45, 1.17e-38, -1.17e-38],
        dtype=torch.float32)])
    return torch.cat([ordinary, ties, special])


def fixed_sums(n, seed=6):
    """int64 values: the whole range (conversions rounding twice, the
    extremes) and a realistic one, with ties of int64 -> double and of
    double -> float."""
    g = torch.Generator().manual_seed(seed)
    special = torch.tensor([0, 1, -1, (1 << 63) - 1, -(1 << 63),
                            (1 << 53) + 1, -((1 << 53) + 1), (1 << 54) + 2,
                            ((1 << 24) + 1) << 10, -(((1 << 24) + 1) << 10),
                            ((1 << 24) + 3) << 20], dtype=torch.int64)
    wide = torch.randint(-(1 << 63), (1 << 63) - 1, (n // 2,), generator=g,
                         dtype=torch.int64)
    narrow = torch.randint(-(1 << 45), 1 << 45,
                           (n - n // 2 - special.numel(),), generator=g,
                           dtype=torch.int64)
    return torch.cat([wide, narrow, special])


x = fixed_inputs()
acc0 = fixed_sums(x.numel())
ref = acc0.clone()
rj.fixed_accumulate_float(ref.data_ptr(), x.data_ptr(), x.numel(), FB)
emu = acc0.clone().to(DEV)
fixed.accumulate_emulated(emu, x.to(DEV), FB)
ok(emu.device.type == DEV.type and same_bits(emu, ref),
   "fixed point on %s: accumulate (ties, NaN, +-inf, saturation, wrap) "
   "equals the C reference bit for bit (%d of %d differ)" %
   (DEV, int((emu.cpu() != ref).sum()), x.numel()))
disp = acc0.clone().to(DEV)
fixed.accumulate(disp, x.to(DEV), FB)
ok(same_bits(disp, ref), "fixed point on %s: fixed.accumulate (the "
   "Trainer's call) equals the C reference" % DEV)
back = torch.empty(acc0.numel(), dtype=torch.float32)
rj.fixed_to_float(back.data_ptr(), acc0.data_ptr(), acc0.numel(), FB)
emu_back = torch.empty(acc0.numel(), dtype=torch.float32, device=DEV)
fixed.to_float(emu_back, acc0.to(DEV), FB)
ok(same_bits(emu_back, back), "fixed point on %s: back to float32 equals "
   "the C reference bit for bit" % DEV)

# -- models and data ---------------------------------------------------------


def build(seed=1, dev=DEV):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 3))
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def batch(step, mb, dev=DEV):
    g = torch.Generator().manual_seed(1000 * step + mb)
    return (torch.randn(6, 8, generator=g).to(dev),
            torch.randint(0, 3, (6,), generator=g).to(dev))


def train(tr, model, steps=None):
    return train_with(batch, tr, model, steps)


# -- the exchange through the pinned wire ------------------------------------
_WIRE_DTYPES = {rj.FIXED64: torch.int64, rj.FLOAT32: torch.float32,
                rj.BFLOAT16: torch.bfloat16}


class TwinJob:
    """job.allreduce as if two replicas had computed the same local sums:
    reads the wire where libresihp would (raw host memory) and doubles it
    in place, exactly. reassign: what the first call returns instead (a
    peer failed, these microbatches are this replica's now)."""

    def __init__(self, reassign=None):
        self.reassign, self.calls, self.seen = reassign, 0, []

    def allreduce(self, addr, count, dtype):
        self.calls += 1
        if self.reassign is not None:
            out, self.reassign = self.reassign, None
            return out
        td = _WIRE_DTYPES[dtype]
        size = torch.tensor([], dtype=td).element_size()
        w = torch.frombuffer((ctypes.c_char * (count * size)).from_address(
            addr), dtype=td)
        self.seen.append(w.clone())
        w.mul_(2)
        return None


def one_step(mode, job, overlap, mbs, extra_ok=True):
    """One step's gradients through Gradients.exchange: (flat, loss)."""
    model, opt, _ = build(3)
    g = Gradients(opt, mode, bucket_bytes=256)  # a bucket per parameter
    g.start(None)
    todo, first, m = list(mbs), True, 4
    while True:
        for k, mb in enumerate(todo):
            if first and overlap and k == len(todo) - 1:
                g.overlap.arm(job)
            torch.manual_seed(rt.microbatch_seed(0, 0, mb))
            x, y = batch(0, mb)
            loss = F.cross_entropy(model(x), y) / m
            loss.backward()
            g.add_microbatch(float(loss.detach()))
        todo, first = g.exchange(job), False
        if todo is None:
            break
    return g, g.flat.clone(), g.loss()


for mode in ("deterministic", "float32", "bfloat16"):
    g0, alone, l0 = one_step(mode, None, False, range(4))
    for overlap in (False, True):
        job = TwinJob()
        g1, twice, l1 = one_step(mode, job, overlap, range(4))
        n = g1.n
        ok(g1.wire.device.type == "cpu" and g1.wire.is_pinned() == CUDA and
           g1.flat.device.type == DEV.type and
           all(p.grad.data_ptr() == v.data_ptr()
               for p, v in zip(g1.params, g1.views)),
           "%s: the wire is %s host memory, the gradients live on %s" %
           (mode, "pinned" if CUDA else "plain", DEV))
        ok(job.calls == len(g1.buckets) and
           same_bits(twice[:n + 1], alone[:n + 1] * 2) and l1 == 2 * l0,
           "%s, overlap %s: the exchange reads the wire complete (two "
           "replicas' sum is twice one's, bit for bit; %d buckets)" %
           (mode, overlap, job.calls))
for mode in ("deterministic", "float32"):
    _, ref4, _ = one_step(mode, None, False, range(4))
    job = TwinJob(reassign=[3])
    _, got, _ = one_step(mode, job, True, range(3))
    ok(same_bits(got[:-2], ref4[:-2] * 2),
       "%s: a reassignment during the overlapped exchange, then the "
       "reassigned microbatch and the exchange again: the sums of all four "
       "(%d calls)" % (mode, job.calls))

# -- the Trainer: determinism and modes --------------------------------------
digests, losses = {}, {}
for mode, overlap in (("deterministic", False), ("deterministic", False),
                      ("deterministic", True), ("float32", False),
                      ("float32", True), ("bfloat16", False),
                      ("bfloat16", True)):
    m, o, s = build()
    tr = rt.Trainer(m, o, scheduler=s, microbatches=5, steps=4, mode=mode,
                    standalone=True, bucket_mb=0.001)
    tr.overlap = overlap  # the bucket thread, without a job
    ls = train(tr, m)
    d = rt.state_digest(m, o)
    digests.setdefault(mode, []).append(d)
    losses.setdefault(mode, []).append(ls)
ok(len(set(digests["deterministic"])) == 1,
   "deterministic on %s: the same digest twice, and with the overlapped "
   "exchange" % DEV)
ok(len(set(digests["float32"])) == 1 and len(set(digests["bfloat16"])) == 1
   and len({digests[k][0] for k in digests}) == 3 and
   all(all(x == x and abs(x) < 100 for x in ls) for k in losses
       for ls in losses[k]),
   "float32 and bfloat16 train on %s (their own results, the same with "
   "the overlapped exchange)" % DEV)

# -- catch-up round trip through the host buffers ----------------------------
ma, oa, sa = build(1)
ta = rt.Trainer(ma, oa, scheduler=sa, microbatches=4, steps=6,
                standalone=True)
la = train(ta, ma, steps=3)
rng_after = torch.cuda.get_rng_state(DEV) if CUDA else torch.get_rng_state()
mb_, ob, sb = build(2)
tb = rt.Trainer(mb_, ob, scheduler=sb, microbatches=4, steps=6,
                standalone=True)
src, dst = ta.state.buffers(), tb.state.buffers()
host = [h for _, h in ta.state.hosted] + [ta.state.meta]
ok([n for _, n in src] == [n for _, n in dst] and
   all(t.device.type == "cpu" for t in host) and
   all(h.is_pinned() == (t.device.type == "cuda") and h.device.type == "cpu"
       for t, h in ta.state.hosted) and
   any(t.device.type == DEV.type for t, _ in ta.state.hosted),
   "the state buffers are host memory (pinned mirrors of the device's "
   "tensors) of the same sizes on two replicas")
for (sa_, n), (da, _) in zip(src, dst):
    ctypes.memmove(da, sa_, n)
if CUDA:
    torch.cuda.manual_seed(12345)  # the receiver's RNG is elsewhere
meta_len = int.from_bytes(bytes(tb.state.meta[:8].tolist()), "little")
version = codec.decode(bytes(tb.state.meta[8:8 + meta_len].numpy()))[
    "version"]
step_of = tb.state.load()
tb._next = step_of + 1
ok(step_of == 2 and version == (2 if CUDA else 1),
   "the received state is of step 2 (%d), format version %d" %
   (step_of, version))
ok(rt.state_digest(ma, oa) == rt.state_digest(mb_, ob) and
   next(mb_.parameters()).device.type == DEV.type and
   sa.state_dict()["last_epoch"] == sb.state_dict()["last_epoch"] and
   (not CUDA or torch.equal(torch.cuda.get_rng_state(DEV), rng_after)),
   "after load: model, optimizer, scheduler and the device's RNG equal the "
   "source's")
la += train(ta, ma)
lb = train(tb, mb_)
ok(rt.state_digest(ma, oa) == rt.state_digest(mb_, ob) and la[3:] == lb,
   "the caught-up replica on %s trains on bitwise like its source (dropout "
   "included)" % DEV)

# -- bad input ---------------------------------------------------------------
if CUDA:
    mixed = nn.Sequential(nn.Linear(4, 4).to(DEV), nn.Linear(4, 4))
    raises(resihp.ProgramError,
           lambda: rt.Trainer(mixed, torch.optim.SGD(mixed.parameters(),
                                                     lr=0.1),
                              microbatches=2, steps=1, standalone=True),
           "parameters on the CPU and a CUDA device are refused",
           "one device")
    mixed = nn.Sequential(nn.Linear(4, 4).to(DEV), nn.Linear(4, 4))
    raises(resihp.ProgramError,
           lambda: Gradients(torch.optim.SGD(mixed.parameters(), lr=0.1),
                             "deterministic"),
           "Gradients: parameters on two devices are refused", "one device")
mm = nn.Linear(4, 4).to("meta")
raises(resihp.ProgramError,
       lambda: rt.Trainer(mm, torch.optim.SGD(mm.parameters(), lr=0.1),
                          microbatches=2, steps=1, standalone=True),
       "a model on the 'meta' device is refused", "'meta'")

report()
