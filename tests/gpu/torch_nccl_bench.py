# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed's NCCL all-reduce on this machine's GPU 0, as the
baseline of resihp's NCCL path (resihp-bench-device --nccl --ranks 1): one
rank, float32, in place, the same sizes and timing (iterations per size as
the C bench, best of --reps; wall time around a synchronised batch of
calls). Prints "BYTES ALGBW" (GB/s, bytes / time), then whether NCCL takes
two ranks on one GPU (two processes, each on cuda:0; NCCL refuses a
communicator whose ranks share a device), and what it said.

usage: torch_nccl_bench.py [--reps R] [--min BYTES] [--max BYTES] (K/M/G)
Exits 77 without a CUDA device."""
import argparse
import datetime
import multiprocessing as mp
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist


def size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units \
        else int(s)


def iters_for(nbytes):  # as tools/resihp-bench-device.c
    return max(3, min(200, (256 << 20) // max(nbytes, 1)))


def one_rank(args):
    store = dist.HashStore()
    dist.init_process_group("nccl", store=store, rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    print("# torch %s, NCCL %s, one rank on %s; GB/s = bytes / time"
          % (torch.__version__, ".".join(map(str, torch.cuda.nccl.version())),
             torch.cuda.get_device_name(0)))
    print("%12s %10s" % ("bytes", "algbw"))
    b = args.min
    while b <= args.max:
        t = torch.ones(b // 4, device="cuda")
        dist.all_reduce(t)  # warm-up
        torch.cuda.synchronize()
        it, best = iters_for(b), 1e30
        for _ in range(args.reps):
            t0 = time.perf_counter()
            for _ in range(it):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t0) / it)
        print("%12d %10.2f" % (b, b / best / 1e9), flush=True)
        b *= 4
    dist.destroy_process_group()


def shared_gpu_rank(rank, path, q):
    try:
        dist.init_process_group(
            "nccl", store=dist.FileStore(path, 2), rank=rank, world_size=2,
            timeout=datetime.timedelta(seconds=60),
            device_id=torch.device("cuda", 0))
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        q.put((rank, "ok: sum %g" % t[0].item()))
    except Exception as e:  # what NCCL says is the result
        q.put((rank, "%s: %s" % (type(e).__name__, str(e).split("\n")[0])))


def two_ranks_one_gpu():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        ps = [ctx.Process(target=shared_gpu_rank,
                          args=(r, os.path.join(tmp, "store"), q))
              for r in range(2)]
        for p in ps:
            p.start()
        said = {}
        deadline = time.time() + 120
        while len(said) < 2 and time.time() < deadline:
            try:
                r, what = q.get(timeout=5)
                said[r] = what
            except Exception:
                if not any(p.is_alive() for p in ps):
                    break
        for p in ps:
            p.join(5)
            if p.is_alive():
                p.kill()
    for r in range(2):
        print("two ranks on one GPU, rank %d: %s"
              % (r, said.get(r, "no answer within 120 s (hung or died)")))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--min", type=size, default=1 << 20)
    p.add_argument("--max", type=size, default=256 << 20)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: torch %s sees no CUDA device" % torch.__version__)
        sys.exit(77)
    one_rank(args)
    two_ranks_one_gpu()


if __name__ == "__main__":
    main()
