#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The GPT example under resihp: a replica of a resilient data-parallel job
run by resihp-run(1) (or, with --standalone, one process computing every
microbatch: the reference of a resilient run). The same model, data,
dropout masks and optimizer as reference.py and ddp_gloo.py; the gradient
exchange, the assignment of microbatches, recovery from a failed replica
and the catch-up of a replacement are resihp.torch's Trainer's."""
import os
import signal
import sys
import time

import torch

import resihp.torch as rt

import common
from gpt import pipeline_stages, pipeline_units
from textdata import fixed_workload


def test_fault(args, model):
    if args.test_fault == "bad-init":  # replica r's parameters nudged
        with torch.no_grad():
            next(model.parameters()).add_(
                int(os.environ.get("RESIHP_REPLICA", "0")) * 1e-3)
    elif args.test_fault == "meta-device":
        model.to("meta")


def slow_unit(module, ms):
    """module's forward also sleeps ms in 0.5 ms slices (--test-unit-ms):
    a slice stopped from outside ends late, so the sleep slows as compute
    would; none of it touches the arithmetic."""
    slices = max(1, round(ms / 0.5))

    def pre(_module, _inputs):
        for _ in range(slices):
            time.sleep(0.0005)

    module.register_forward_pre_hook(pre)


def hold(spec, index, replica, rank=0):
    if not spec:
        return
    at, who, path = spec.split(":", 2)
    # REPLICA[.RANK]: one rank of a replica (its stage with --stages, its
    # shard with --shard; default 0)
    who, _, k = who.partition(".")
    if index == int(at) and replica == int(who) and rank == int(k or 0):
        with open(path + ".tmp", "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(path + ".tmp", path)  # whole, once it exists
        while True:
            signal.pause()


def main():
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("deterministic", "float32", "bfloat16"),
                   default="deterministic",
                   help="gradient sums: exact fixed point (bitwise the same "
                   "whoever computes what), float32, or bfloat16 on the wire")
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="gradient bucket size in MiB (exchange overlapped "
                   "with the last microbatch's backward)")
    p.add_argument("--clip", type=float, default=None, metavar="MAXNORM",
                   help="clip the step's summed gradient to this norm "
                   "(torch.nn.utils.clip_grad_norm_ in the Trainer's "
                   "before_step hook: the same gradient on every replica)")
    p.add_argument("--stages", type=common.positive, default=None,
                   metavar="K",
                   help="pipeline parallelism: the model (embedding, "
                   "blocks, head) in K stages, stage k on rank k of each "
                   "replica (resihp-run --ranks-per-replica K); with "
                   "--standalone the K stages run in this process")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe",
                   help="with --stages: all forward passes then all "
                   "backward passes (gpipe), or one forward and one backward "
                   "in turn once the pipeline is full (1f1b: fewer "
                   "activations kept); the same result")
    p.add_argument("--move-layers", action="store_true",
                   help="with --stages: the coordinator may move units "
                   "(embedding, blocks, head) between the stages of a "
                   "replica when one is slow, and back (Trainer(stages=, "
                   "move_layers=True)); the digest is then one per unit")
    p.add_argument("--shard", action="store_true",
                   help="a sharded replica (resihp-run --ranks-per-replica "
                   "K): each rank keeps 1/K of the parameters and optimizer "
                   "state (Trainer shard=True); with --standalone, K = 1")
    p.add_argument("--shard-layers", action="store_true",
                   help="with --shard: gather the blocks' parameters one "
                   "block at a time (Trainer shard_units=the blocks; "
                   "embeddings, final norm and head are gathered for the "
                   "whole step) instead of the whole model for the step")
    p.add_argument("--standalone", action="store_true",
                   help="no resihp job: compute all microbatches here")
    p.add_argument("--test-fault",
                   choices=("bad-init", "bad-catchup", "meta-device"),
                   help="rehearse a program error (tests): replicas "
                   "initialised differently, a replacement whose received "
                   "state is corrupt, a model on the meta device")
    p.add_argument("--test-unit-ms", type=float, default=0.0, metavar="MS",
                   help="tests, with --stages: each unit's forward pass also "
                   "takes about MS ms (sleeping in 0.5 ms slices, which a "
                   "SIGSTOP duty cycle from outside slows as it slows "
                   "compute), so that a stage's time follows the units it "
                   "holds and not the CPU time a busy test machine gives it")
    p.add_argument("--test-hold", metavar="STEP:REPLICA[.RANK]:FILE",
                   help="tests: replica REPLICA (its rank RANK, default 0: "
                   "the stage with --stages, the shard with --shard) "
                   "writes its pid to FILE at "
                   "the start of step STEP and waits there for a signal "
                   "from outside (so that a test's SIGKILL or SIGSTOP lands "
                   "mid-run however fast the steps are)")
    args = p.parse_args()
    model, opt, sched, corpus = common.setup(args)
    test_fault(args, model)
    work = fixed_workload(args.batch, args.ctx)
    clip = None
    if args.clip is not None:
        def clip(step):
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    if args.shard_layers and not args.shard:
        sys.exit(f"{sys.argv[0]}: --shard-layers needs --shard")
    if args.stages and args.shard:
        sys.exit(f"{sys.argv[0]}: --stages and --shard together are not "
                 f"supported yet: give one of them")
    if args.move_layers and not args.stages:
        sys.exit(f"{sys.argv[0]}: --move-layers needs --stages")
    if args.stages:
        return pipeline(args, model, opt, corpus, work, clip)
    tr = rt.Trainer(model, opt, microbatches=args.microbatches,
                    steps=args.steps, scheduler=sched, mode=args.mode,
                    seed=args.seed,
                    workload=work, before_step=clip,
                    standalone=args.standalone, bucket_mb=args.bucket_mb,
                    shard=True if args.shard else None,
                    shard_units=list(model.blocks) if args.shard_layers
                    else None)
    shard = tr.job.shard if tr.job is not None else 0  # 0: the one rank
    if args.test_fault == "bad-catchup":
        load = tr.state.load

        def corrupt_then_load():
            tr.state.meta[8:16] = 0x7b  # "{{{{{{{{": not a state
            return load()

        tr.state.load = corrupt_then_load
    losses, times = [], []
    for step in tr:
        hold(args.test_hold, step.index, tr.replica, shard)
        t0 = time.perf_counter()
        for mb in step:  # the Trainer has seeded torch's RNG for mb
            x, y = corpus.microbatch(step.index, mb, args.batch, args.ctx,
                                     args.seed)
            tokens, sum_l2, nseq = work(step.index, mb)
            step.backward(common.loss_of(model, x, y), tokens=tokens,
                          sum_l2=sum_l2, nseq=nseq)
        times.append(time.perf_counter() - t0)
        losses.append(step.loss)
        # every replica has the same global loss: all stop together
        common.check_finite(step.index, step.loss, tr.abort)
        if tr.replica == 0 and shard == 0:
            common.step_line(step.index, step.loss, times[-1])
    # the state digest of model and optimizer (sharded: of the full state,
    # gathered; the model is full again after finish)
    digest = tr.finish()
    if tr.replica == 0 and shard == 0:
        common.report(args, model, opt, corpus, losses, times, digest=digest,
                      extra={"mode": args.mode,
                             "standalone": args.standalone})


def pipeline(args, model, opt, corpus, work, clip):
    """The loop with --stages: this rank's stage of the model (GPipe over
    the replica's ranks, resihp.torch.pipeline); the step's loss is the
    same on every stage, printed by replica 0's stage 0."""
    if clip is not None:
        sys.exit(f"{sys.argv[0]}: --clip needs the whole model's gradient "
                 f"norm, which a pipeline stage does not have (not "
                 f"supported with --stages yet)")
    try:
        stages = pipeline_stages(model, args.stages)
    except ValueError as e:
        sys.exit(f"{sys.argv[0]}: {e}")
    sched = None
    if args.cosine:
        def sched(o):
            return torch.optim.lr_scheduler.CosineAnnealingLR(
                o, T_max=args.steps)
    whole = model
    if args.move_layers:
        # the units as the children of one model, the stages as split
        # points into them: the Trainer's layers
        whole = torch.nn.Sequential(*pipeline_units(model))
        stages = [sum(len(s) for s in stages[:i])
                  for i in range(1, len(stages))]
    if args.test_unit_ms > 0:
        for u in (list(whole.children()) if args.move_layers else
                  [m for s in stages for m in s]):
            slow_unit(u, args.test_unit_ms)
    tr = rt.Trainer(whole, opt, stages=stages,
                    microbatches=args.microbatches,
                    steps=args.steps, scheduler=sched, mode=args.mode,
                    seed=args.seed, workload=work,
                    standalone=args.standalone, bucket_mb=args.bucket_mb,
                    schedule=args.schedule, move_layers=args.move_layers)

    def batch(step, mb):
        return corpus.microbatch(step, mb, args.batch, args.ctx, args.seed)

    def loss_fn(logits, y):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                 y.flatten())

    losses, times = [], []
    speaker = tr.replica == 0 and tr.stage == 0
    who = f"[replica {tr.replica} stage {tr.stage}]"
    if tr.shrunk:  # relaunched on its surviving ranks (resihp-run)
        print(f"{who} partition {','.join(map(str, tr.counts))} from the "
              f"coordinator (shrunk to {tr.K} ranks)", flush=True)
    for step in tr:
        if not args.standalone and not times and step.index > 0:
            # a replacement's first step: its state came from a healthy
            # replica
            print(f"{who} caught up at step {step.index}", flush=True)
        hold(args.test_hold, step.index, tr.replica, tr.stage)
        if step.layers_moved:
            print(f"{who} partition {','.join(map(str, step.partition))} "
                  f"(units moved at step {step.index})", flush=True)
        t0 = time.perf_counter()
        step.run(batch, loss_fn)
        times.append(time.perf_counter() - t0)
        losses.append(step.loss)
        common.check_finite(step.index, step.loss, tr.abort)
        if speaker:
            common.step_line(step.index, step.loss, times[-1])
    digest = tr.finish()
    if args.standalone:  # the whole model is here
        common.report(args, model, opt, corpus, losses, times, digest=digest,
                      extra={"mode": args.mode, "standalone": True,
                             "stages": args.stages})
    elif speaker:
        print(f"digest {digest} (stage 0)", flush=True)


if __name__ == "__main__":
    try:
        main()
    except rt.ProgramError as e:  # bad input: said once, no traceback
        sys.exit(f"{sys.argv[0]}: {e}")
