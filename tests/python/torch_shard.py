# SPDX-License-Identifier: BSD-3-Clause
"""resihp.torch's sharded replicas (Trainer(..., shard=)) without a
cluster (TAP): one replica of K forked ranks joined by a resihp.Comm over
loopback, standalone=True, against the unsharded standalone=True:
- K = 1, 2, 3, 4: every rank's digest of the full state (parameters and
  optimizer, all-gathered) and every step's loss bitwise the reference's,
  with two param_groups, AdamW, a LambdaLR, dropout, and with a
  before_step hook that clips the gradient over all shards; float32
  sums: the ranks agree, losses close to the float32 reference;
- catch-up per shard: each rank of a second replica, started from other
  parameters, receives the buffers of the same rank of the first byte for
  byte (as libresihp's catch-up sends them), loads them and trains on
  bitwise like it;
- memory: parameters + optimizer state kept per rank ~ 1/K of the
  unsharded replica's (figures in the test's names);
- shard_units= (gathering layer by layer): the same, bitwise, for K = 1..4
  (a rank with fewer microbatches gathers as often as the others), and on
  a model of four large layers the most full parameter elements held at
  once (Shards.peak) ~ two layers' instead of the whole model's;
- bad input refused."""
import ctypes
import json
import os
import socket
import sys

import torch
import torch.nn as nn

import resihp.torch as rt
from resihp.comm import Comm
from tap import ok, raises, report
from trainloop import batch, train_with

torch.set_num_threads(1)  # the same kernels in the parent and the ranks
M, S = 6, 5


def build(seed=1, width=16):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(width, 3))
    opt = torch.optim.AdamW([{"params": model[0].parameters()},
                             {"params": model[3].parameters(), "lr": 3e-2,
                              "weight_decay": 0.0}], lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def clipper(model):
    def hook(step):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
    return hook


def trainer(seed=1, clip=False, width=16, **kw):
    m, o, s = build(seed, width)
    tr = rt.Trainer(m, o, scheduler=s, microbatches=M, steps=S,
                    standalone=True, before_step=clipper(m) if clip else None,
                    **kw)
    return tr, m


def kept_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def unsharded_bytes(m, o):
    return kept_bytes(list(m.parameters()) + [
        t for st in o.state.values() for t in st.values()
        if torch.is_tensor(t)])


def sharded_bytes(tr):
    sh = tr.grads
    return kept_bytes([sh.data] + [t for st in sh.optimizer.state.values()
                                   for t in st.values()
                                   if torch.is_tensor(t)])


def run_ranks(K, fn):
    """fn(comm) in K forked ranks of one replica; their JSON results."""
    socks = [socket.socket() for _ in range(K)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
    eps = ["127.0.0.1:%d" % s.getsockname()[1] for s in socks]
    pipes, pids = [], []
    for r in range(K):
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            try:
                c = Comm.create(r, eps, b"torch-shard-test-secret",
                                listen_fd=socks[r].fileno(),
                                connect_timeout_ms=60000)
                out = json.dumps(fn(c))
                # messages handed over leave before the rank exits (a
                # peer may still be receiving its part of the last
                # broadcast: os._exit alone would cut it off)
                c.close()
            except BaseException as e:  # noqa: the parent reports it
                out = json.dumps({"error": "%s: %s" % (type(e).__name__, e)})
            os.write(wr, out.encode())
            os._exit(0)
        os.close(wr)
        pipes.append(rd)
        pids.append(pid)
    for s in socks:
        s.close()
    res = []
    for rd in pipes:
        b = b""
        while True:
            chunk = os.read(rd, 1 << 16)
            if not chunk:
                break
            b += chunk
        os.close(rd)
        res.append(json.loads(b) if b else {"error": "no result"})
    for pid in pids:
        os.waitpid(pid, 0)
    return res


# -- the reference: one process, unsharded --------------------------------
refs = {}
for clip in (False, True):
    tr, m = trainer(clip=clip)
    losses = train_with(batch, tr, m)
    refs[clip] = (tr.finish(), losses)


def sharded(clip, units=None):
    def fn(comm):
        tr, m = trainer(clip=clip, shard=comm, shard_units=units)
        losses = train_with(batch, tr, m)
        return {"digest": tr.finish(), "losses": losses}
    return fn


for K in (1, 2, 3, 4):
    for clip in (False, True):
        for units in (None, "children"):
            res = run_ranks(K, sharded(clip, units))
            bad = [r for r in res if r.get("digest") != refs[clip][0] or
                   r.get("losses") != refs[clip][1]]
            ok(not bad, "K=%d%s%s: every rank's full state and every loss "
               "bitwise the unsharded reference's (%s)" %
               (K, ", clipped over all shards" if clip else "",
                ", gathered layer by layer" if units else "",
                bad[0] if bad else refs[clip][0][:16]))

# float32 sums: the K ranks' partial sums are grouped otherwise than one
# process's, so close to the reference, not equal; the ranks agree
tr, m = trainer(mode="float32")
ref32 = train_with(batch, tr, m)


def float32(units):
    def fn(comm):
        tr, m = trainer(mode="float32", shard=comm, shard_units=units)
        losses = train_with(batch, tr, m)
        return {"digest": tr.finish(), "losses": losses}
    return fn


for units in (None, "children"):
    res = run_ranks(2, float32(units))
    ok(len({r.get("digest") for r in res}) == 1 and
       all(abs(a - b) <= 1e-5 * abs(b) for a, b in
           zip(res[0].get("losses", []), ref32)) and
       len(res[0].get("losses", [])) == S,
       "K=2 float32%s: the ranks agree, every loss within 1e-5 of the "
       "float32 reference's (%s)" % (", layer by layer" if units else "",
                                     res[0].get("losses") or res[0]))

tr, m = trainer(shard=True)  # standalone, no communicator: K = 1
ok(train_with(batch, tr, m) == refs[False][1] and
   tr.finish() == refs[False][0], "shard=True standalone (K=1) is the "
   "reference bitwise")


# -- catch-up per shard ------------------------------------------------------
def catch_up(comm, units=None):
    ta, ma = trainer(1, shard=comm, shard_units=units)
    la = train_with(batch, ta, ma, steps=3)
    # another start: all of it must come
    tb, mb = trainer(2, shard=comm, shard_units=units)
    src, dst = ta.state.buffers(), tb.state.buffers()
    if [n for _, n in src] != [n for _, n in dst]:
        return {"error": "buffer sizes differ"}
    for (sa, n), (da, _) in zip(src, dst):
        ctypes.memmove(da, sa, n)  # what libresihp's catch-up does
    tb._next = tb.state.load() + 1
    la += train_with(batch, ta, ma)
    lb = train_with(batch, tb, mb)
    return {"a": ta.finish(), "b": tb.finish(), "la": la[3:], "lb": lb,
            "bytes": sum(n for _, n in src)}


for K, units in ((2, None), (4, None), (2, "children")):
    res = run_ranks(K, lambda comm: catch_up(comm, units))
    good = all(r.get("a") == r.get("b") == refs[False][0] and
               r.get("la") == r.get("lb") for r in res)
    ok(good, "K=%d%s: each rank of a replacement receives its shard's "
       "state (%s bytes per rank), loads it and trains on bitwise like its "
       "source, to the reference's state (%s)" %
       (K, ", layer by layer" if units else "",
        "/".join(str(r.get("bytes")) for r in res), "" if good else res))


# -- memory: parameters + optimizer state per rank ~ 1/K --------------------
W = 1024
m, o, s = build(1, W)
tr0 = rt.Trainer(m, o, scheduler=s, microbatches=2, steps=1,
                 standalone=True)
train_with(batch, tr0, m)
full = unsharded_bytes(m, o)


def memory(comm):
    tr, m = trainer(width=W, shard=comm)
    tr.steps = 1
    train_with(batch, tr, m, steps=1)
    return {"bytes": sharded_bytes(tr)}


for K in (2, 4):
    res = run_ranks(K, memory)
    per = [r.get("bytes", r.get("error")) for r in res]
    worst = max(r.get("bytes", -1) for r in res)
    ok(all("bytes" in r for r in res) and 0 < worst <= full / K * 1.01 + 64,
       "K=%d: parameters + optimizer state per rank %s bytes, unsharded "
       "%d (x%.3f, 1/K = %.3f)" % (K, "/".join(map(str, per)), full,
                                   worst / full, 1.0 / K))


# -- layer by layer: the most full parameters held at once ------------------
def deep(seed=1, W=256):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, W), nn.ReLU(), nn.Linear(W, W),
                          nn.ReLU(), nn.Dropout(0.1), nn.Linear(W, W),
                          nn.ReLU(), nn.Linear(W, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


m, o = deep()
tr = rt.Trainer(m, o, microbatches=M, steps=3, standalone=True)
deep_ref = (train_with(batch, tr, m), tr.finish())
deep_n = sum(p.numel() for p in m.parameters())
layer = max(p.numel() for p in m.parameters()) + 256  # weight and bias


def peak(units):
    def fn(comm):
        m, o = deep()
        tr = rt.Trainer(m, o, microbatches=M, steps=3, standalone=True,
                        shard=comm, shard_units=units)
        losses = train_with(batch, tr, m)
        held = tr.grads.peak  # the steps' (finish() gathers the model)
        return {"peak": held, "losses": losses, "digest": tr.finish()}
    return fn


for K in (2, 3):
    whole = run_ranks(K, peak(None))
    units = run_ranks(K, peak("children"))
    same = all((r.get("losses"), r.get("digest")) == deep_ref
               for r in whole + units)
    pw = max(r.get("peak", -1) for r in whole)
    pu = max(r.get("peak", -1) for r in units)
    ok(same and pw == deep_n and 0 < pu <= layer,
       "K=%d, 4 layers of %d parameters: the most full parameter elements "
       "held at once %d whole model, %d layer by layer (x%.3f; the largest "
       "layer %d), both bitwise the unsharded reference%s" %
       (K, deep_n, pw, pu, pu / deep_n, layer,
        "" if same else " (NOT: %s)" % (whole + units)))


class Residual(nn.Module):
    """A pre-norm residual block (as a transformer's MLP half)."""

    def __init__(self, W):
        super().__init__()
        self.ln = nn.LayerNorm(W)
        self.mlp = nn.Sequential(nn.Linear(W, 2 * W), nn.GELU(),
                                 nn.Linear(2 * W, W))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


def resnet(seed=1, W=16):
    torch.manual_seed(seed)
    blocks = [Residual(W) for _ in range(3)]
    model = nn.Sequential(nn.Linear(8, W), *blocks, nn.Linear(W, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt, blocks


m, o, _ = resnet()
tr = rt.Trainer(m, o, microbatches=M, steps=3, standalone=True)
res_ref = (train_with(batch, tr, m), tr.finish())


def residual(comm):
    m, o, blocks = resnet()
    tr = rt.Trainer(m, o, microbatches=M, steps=3, standalone=True,
                    shard=comm, shard_units=blocks)  # the rest: whole step
    return {"losses": train_with(batch, tr, m), "digest": tr.finish()}


for K in (2, 4):
    res = run_ranks(K, residual)
    ok(all((r.get("losses"), r.get("digest")) == res_ref for r in res),
       "K=%d: residual blocks gathered one at a time (the first and last "
       "layers for the whole step) bitwise the unsharded reference (%s)" %
       (K, res_ref[1][:16] if all("digest" in r for r in res) else res))


def reversed_units():
    m, o, s = build()
    tr = rt.Trainer(m, o, microbatches=M, steps=S, standalone=True,
                    shard=True, shard_units=[m[3], m[0]])
    train_with(batch, tr, m)


raises(rt.ProgramError, reversed_units, "shard_units=: units listed in "
       "another order than the forward calls them are refused",
       "in the list's order")
raises(rt.ProgramError, lambda: trainer(shard_units="children"),
       "shard_units= without shard= is refused", "without shard=")


# -- refused ----------------------------------------------------------------
raises(rt.ProgramError, lambda: trainer(shard=True, mode="bfloat16"),
       "shard=: bfloat16 mode is refused", "bfloat16")


def stepped():
    m, o, s = build()
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    o.step()
    rt.Trainer(m, o, microbatches=M, steps=S, standalone=True, shard=True)


raises(rt.ProgramError, stepped, "shard=: an optimizer that already "
       "stepped is refused", "before the first optimizer step")
report()
sys.stdout.flush()
