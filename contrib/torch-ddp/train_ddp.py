#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""A small DistributedDataParallel training script, two ways:

  resihp-run --replicas R ... -- python3 train_ddp.py
      each replica is a one-rank gloo group; resihp.torch.ddp.Adapter
      routes DDP's gradient buckets to resihp's fault-tolerant all-reduce
      and recomputes a failed peer's microbatches;
  python3 train_ddp.py --stock RANK --world W --init file:///tmp/x
      stock gloo DDP over W processes (DDP's built-in allreduce, no hook),
      rank k computing the microbatches resihp's 'even' assignment gives
      replica k (microbatch i goes to i*W//M), with the same arithmetic:
      same per-microbatch seeds, loss * W/M, no_sync() but for the last.

Both print "final result: <state digest>" (the stock run: rank 0, after
checking that every rank has the same digest). A failure-free resihp run
with --assign even and R = W = 2 ends bitwise where the stock run ends.
The model: an MLP with dropout on a fixed synthetic regression task
(AdamW, StepLR), CPU, one thread."""
import argparse
import contextlib
import hashlib
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import resihp.torch as rt
from resihp.torch import microbatch_seed

D_IN, D_HID, D_OUT, BATCH = 32, 64, 4, 16


def make_model(seed):
    torch.manual_seed(seed)  # every replica/rank starts from the same model
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.GELU(),
                                torch.nn.Dropout(0.1),
                                torch.nn.Linear(D_HID, D_HID), torch.nn.GELU(),
                                torch.nn.Linear(D_HID, D_OUT))
    return model


def batch(step, mb):
    """Microbatch mb of step: the same tensors whoever computes it."""
    d = hashlib.sha256(b"data:%d:%d" % (step, mb)).digest()
    g = torch.Generator().manual_seed(int.from_bytes(d[:8], "little") >> 1)
    x = torch.randn(BATCH, D_IN, generator=g)
    y = torch.sin(x[:, :D_OUT] * 1.5) + 0.1 * torch.randn(BATCH, D_OUT,
                                                            generator=g)
    return x, y


def optim(ddp):
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3, weight_decay=0.01)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.7)


def loss_of(ddp, step, mb):
    x, y = batch(step, mb)
    return torch.nn.functional.mse_loss(ddp(x), y)


def run_resihp(a):
    rt.ddp.one_rank_group()
    ddp = DistributedDataParallel(make_model(a.seed))
    opt, sched = optim(ddp)
    adapter = rt.ddp.Adapter({"microbatches": a.microbatches,
                              "steps": a.steps}, ddp, opt, sched, seed=a.seed)
    for step in adapter:
        if a.rounds:  # the same loop spelled out
            for mbs in step.rounds():
                for i, mb in enumerate(mbs):
                    step.microbatch(mb)
                    with step.sync(i == len(mbs) - 1):
                        step.scale(loss_of(ddp, step.index, mb)).backward()
        else:
            for mb in step:
                step.backward(loss_of(ddp, step.index, mb))
        if step.reassigned:
            print("replica %d step %d: computed reassigned microbatches %s"
                  % (adapter.replica, step.index, step.reassigned),
                  flush=True)
        if a.print_every and step.index % a.print_every == 0 and \
                not a.rounds:
            print("replica %d step %d: loss %.6f" % (adapter.replica,
                                                     step.index, step.loss),
                  flush=True)
    print("replica digest:", adapter.finish(), flush=True)


def run_stock(a):
    rank, world, m = a.stock, a.world, a.microbatches
    dist.init_process_group("gloo", init_method=a.init, rank=rank,
                            world_size=world)
    ddp = DistributedDataParallel(make_model(a.seed))
    opt, sched = optim(ddp)
    mine = [i for i in range(m) if i * world // m == rank]  # 'even'
    for s in range(a.steps):
        opt.zero_grad(set_to_none=False)
        for i, mb in enumerate(mine):
            torch.manual_seed(microbatch_seed(a.seed, s, mb))
            last = i == len(mine) - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                (loss_of(ddp, s, mb) * (world / m)).backward()
        opt.step()
        sched.step()
    digest = rt.state_digest(ddp.module, opt)
    out = [None] * world
    dist.all_gather_object(out, digest)
    if rank == 0:
        if len(set(out)) != 1:
            print("ranks disagree: %s" % out)
            return 1
        print("final result: %s (%d ranks agree)" % (digest, world))
    dist.destroy_process_group()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--microbatches", type=int, default=6)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--print-every", type=int, default=0)
    p.add_argument("--rounds", action="store_true",
                   help="use step.rounds()/step.sync() instead of the "
                   "step iterator (no loss is reported then)")
    p.add_argument("--stock", type=int, metavar="RANK", default=None,
                   help="run stock gloo DDP as this rank")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--init", default=None,
                   help="stock: torch.distributed init_method (file://...)")
    a = p.parse_args()
    torch.set_num_threads(1)  # the same kernels' reduction order everywhere
    if a.stock is None:
        run_resihp(a)
        return 0
    if not a.init:
        p.error("--stock needs --init file:///some/path")
    return run_stock(a)


if __name__ == "__main__":
    sys.exit(main())
