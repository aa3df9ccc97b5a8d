# SPDX-License-Identifier: BSD-3-Clause
"""What the GPT examples share: options, the model/optimizer/data set-up,
one microbatch's loss, the even assignment and the end-of-run report.

reference.py, ddp_gloo.py and train_gpt.py build the same model from the
same seed, draw the same microbatches and the same dropout masks, and use
the same optimizer, so their losses and final states can be compared.
"""
import argparse
import json
import math
import os
import sys
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from gpt import GPT, GPTConfig
from textdata import Corpus, CorpusError

try:
    # The same digest and dropout seeds as resihp.torch's Trainer, so that
    # every example's losses and final state can be compared with the
    # others'. The baselines use nothing else of resihp.
    from resihp.torch import microbatch_seed, state_digest
except ImportError as e:
    sys.exit(f"{sys.argv[0]}: cannot import resihp.torch ({e}): put resihp's "
             f"python/ directory on PYTHONPATH and, in the source tree, set "
             f"RESIHP_LIBRARY to build/libresihp/.libs/libresihp.so")


def positive(s):
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s} is not a positive integer")
    return v


def parser(description):
    p = argparse.ArgumentParser(description=description)
    a = p.add_argument
    a("--microbatches", "-M", type=positive, default=8,
      help="microbatches per step (global)")
    a("--steps", "-S", type=positive, default=20)
    a("--batch", "-B", type=positive, default=8,
      help="sequences per microbatch")
    a("--layers", type=positive, default=2)
    a("--heads", type=positive, default=4)
    a("--d-model", type=positive, default=128)
    a("--ctx", type=positive, default=64, help="tokens per sequence")
    a("--dropout", type=float, default=0.1)
    a("--tie", action="store_true", help="tie the output head to the embedding")
    a("--lr", type=float, default=3e-3)
    a("--cosine", action="store_true",
      help="cosine learning-rate schedule over --steps")
    a("--seed", type=int, default=1234)
    a("--corpus", default=None,
      help="text file or directory (default /usr/share/common-licenses)")
    a("--threads", type=positive, default=None,
      help="torch.set_num_threads (per process)")
    a("--json", default=None, help="write per-step losses/times and digest")
    a("--device", default="cpu",
      help="cpu, or cuda[:N]: the model and the data on that device, with "
      "torch's deterministic algorithms (the same bits run after run, "
      "which bitwise comparisons with --standalone need)")
    return p


def device_of(args):
    """torch.device of --device; exits 2 with the reason when unusable."""
    try:
        dev = torch.device(args.device)
    except RuntimeError as e:
        sys.exit(f"{sys.argv[0]}: --device {args.device}: {e}; give cpu or "
                 f"cuda[:N]")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"{sys.argv[0]}: --device {args.device}: torch "
                     f"{torch.__version__} sees no CUDA device")
        # cuBLAS gives the same bits run after run only with a fixed
        # workspace, read at its first call
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # warn_only: an op with no deterministic CUDA kernel warns (and
        # the bitwise comparison says whether it mattered) instead of
        # stopping the run
        torch.use_deterministic_algorithms(True, warn_only=True)
    elif dev.type != "cpu":
        sys.exit(f"{sys.argv[0]}: --device {args.device}: give cpu or "
                 f"cuda[:N]")
    return dev


def setup(args):
    """(model, optimizer, scheduler, corpus) for args; exits 2 with the
    reason on a bad corpus or configuration."""
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = device_of(args)
    try:
        cfg = GPTConfig(n_layer=args.layers, n_head=args.heads,
                        d_model=args.d_model, ctx=args.ctx,
                        dropout=args.dropout, tied=args.tie)
        corpus = Corpus(args.corpus, dev)
        corpus.microbatch(0, 0, 1, args.ctx, args.seed)  # big enough?
        corpus.eval_batch(1, args.ctx)
    except (CorpusError, ValueError) as e:
        sys.exit(f"{sys.argv[0]}: {e}")
    torch.manual_seed(args.seed)
    model = GPT(cfg).to(dev)  # initialised on the CPU: the same everywhere
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
             if args.cosine else None)
    return model, opt, sched, corpus


def microbatch_loss(model, corpus, args, step, mb):
    """The mean cross-entropy of microbatch mb of a step, with torch's RNG
    (dropout) re-seeded from (seed, step, mb) first, as the Trainer does."""
    torch.manual_seed(microbatch_seed(args.seed, step, mb))
    return loss_of(model, *corpus.microbatch(step, mb, args.batch, args.ctx,
                                             args.seed))


def train_step(model, opt, sched, corpus, args, step, ids, divisor,
               no_sync=None):
    """One optimizer step over microbatches ids, in order: the backward of
    each one's loss / divisor, under no_sync() (DDP: no all-reduce) for all
    but the last when given. Returns (sum of the losses, seconds)."""
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for k, mb in enumerate(ids):
        with no_sync() if no_sync and k < len(ids) - 1 else nullcontext():
            loss = microbatch_loss(model, corpus, args, step, mb)
            (loss / divisor).backward()
        total += loss.item()
    opt.step()
    if sched:
        sched.step()
    return total, time.perf_counter() - t0


def loss_of(model, x, y):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def even_ids(replica, replicas, m):
    """The microbatch ids that resihp's 'even' assignment gives a replica
    (libresihp/planner/assign.c: owner[i] = i * R / M, integer division)."""
    return [i for i in range(m) if i * replicas // m == replica]


def eval_loss(model, corpus, args):
    model.eval()
    with torch.no_grad():
        loss = loss_of(model, *corpus.eval_batch(args.batch, args.ctx)).item()
    model.train()
    return loss


def step_line(step, loss, seconds):
    print(f"step {step} loss {loss:.6f} time {seconds:.4f} s", flush=True)


def report(args, model, optimizer, corpus, losses, times, digest=None,
           extra=None):
    """Final digest, held-out loss, mean step time without the first two
    steps (warm-up); the same as JSON with --json."""
    digest = digest or state_digest(model, optimizer)
    warm = times[2:] if len(times) > 2 else times
    mean = sum(warm) / len(warm)
    ev = eval_loss(model, corpus, args)
    print(f"eval loss {ev:.6f}")
    print(f"mean step time {mean:.4f} s (steps {len(times) - len(warm)}.."
          f"{len(times) - 1})")
    print(f"digest {digest}", flush=True)
    if args.json:
        out = {"losses": losses, "times": times, "mean_step_s": mean,
               "eval_loss": ev, "digest": digest,
               "config": {k: v for k, v in vars(args).items() if k != "json"},
               "torch": torch.__version__}
        out.update(extra or {})
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return digest


def check_finite(step, loss, abort=None):
    """Stop on a diverged loss (abort: the Trainer's, to stop every replica)."""
    if not math.isfinite(loss):
        why = f"step {step}: loss is {loss}; lower --lr"
        if abort:
            abort(why)
        sys.exit(why)
