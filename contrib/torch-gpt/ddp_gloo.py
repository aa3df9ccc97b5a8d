#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The stock baseline: torch.distributed gloo DistributedDataParallel with R
processes on this machine (started here; a FileStore, no torchrun), the
same model, data, dropout masks and optimizer as the resihp example.

Each step has M global microbatches; rank r computes the ids resihp's
'even' assignment gives replica r (i with i * R // M == r), accumulating
gradients under no_sync() except for its last microbatch, whose backward
all-reduces. DDP's hook divides the sum over ranks by R, so each
microbatch's mean loss is divided by M/R: the update is then
(1/R) * sum_r sum_{i of r} (R/M) grad_i = (1/M) * sum_i grad_i, the mean
over all M microbatches, as in reference.py and under resihp.
"""
import datetime
import multiprocessing as mp
import os
import sys
import tempfile
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from common import state_digest


def worker(rank, replicas, args, store_path):
    store = dist.FileStore(store_path, replicas)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=replicas,
        timeout=datetime.timedelta(seconds=args.timeout))
    model, opt, sched, corpus = common.setup(args)
    ddp = DDP(model)
    m = args.microbatches
    ids = common.even_ids(rank, replicas, m)
    # loss / (M/R), not loss * (R/M): with R = 1 the very same division
    # as reference.py
    per = m / replicas
    losses, times = [], []
    for step in range(args.steps):
        local, elapsed = common.train_step(ddp, opt, sched, corpus, args, step,
                                           ids, per, ddp.no_sync)
        # Not timed: the global mean loss, and the slowest rank's time.
        t = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(t)
        w = torch.tensor([elapsed], dtype=torch.float64)
        dist.all_reduce(w, op=dist.ReduceOp.MAX)
        losses.append(t.item() / m)
        times.append(w.item())
        common.check_finite(step, losses[-1], leave)  # same on every rank
        if rank == 0:
            common.step_line(step, losses[-1], times[-1])
    digest = state_digest(model, opt)
    all_digests = [None] * replicas
    dist.all_gather_object(all_digests, digest)
    if len(set(all_digests)) != 1:
        leave(f"replicas disagree on the final state: {all_digests}")
    if rank == 0:
        common.report(args, model, opt, corpus, losses, times, digest=digest,
                      extra={"replicas": replicas})
    dist.barrier()
    leave()


def leave(why=None):
    """Exit without tearing the process group down: with torch 1.13 that
    can deadlock (seen here): ~ProcessGroupGloo joins its worker threads
    while holding the GIL, and a worker freeing a tensor's Python object
    waits for the GIL. Nothing is left to flush but stdio."""
    if why:
        print(why, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if why else 0)


def main():
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--replicas", "-R", type=common.positive, default=2,
                   help="processes (DDP ranks)")
    p.add_argument("--timeout", type=common.positive, default=300,
                   help="seconds a collective may wait for a peer")
    args = p.parse_args()
    if args.microbatches < args.replicas:
        p.error(f"--microbatches {args.microbatches} < --replicas "
                f"{args.replicas}: every rank needs a microbatch per step")
    # Fail on a bad corpus or model here, once, not in R processes.
    common.setup(args)
    # gloo finds peers by this host's name; where it does not resolve to a
    # usable address, loopback is right: every rank is on this machine.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="ddp-gloo.") as tmp:
        procs = [ctx.Process(target=worker,
                             args=(r, args.replicas, args, os.path.join(tmp, "store")))
                 for r in range(args.replicas)]
        for pr in procs:
            pr.start()
        live, rc = list(procs), 0
        while live:
            for s in wait([pr.sentinel for pr in live]):
                pr = next(q for q in live if q.sentinel == s)
                live.remove(pr)
                pr.join()
                if pr.exitcode != 0 and rc == 0:
                    rc = 1
                    print(f"rank {procs.index(pr)} exited with {pr.exitcode}; "
                          f"stopping the others", file=sys.stderr)
                    # the others would wait for it until --timeout
                    for q in live:
                        q.terminate()
    sys.exit(rc)


if __name__ == "__main__":
    main()
