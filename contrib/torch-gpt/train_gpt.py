#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The GPT example under resihp: a replica of a resilient data-parallel job
run by resihp-run(1) (or, with --standalone, one process computing every
microbatch: the reference of a resilient run). The same model, data,
dropout masks and optimizer as reference.py and ddp_gloo.py; the gradient
exchange, the assignment of microbatches, recovery from a failed replica
and the catch-up of a replacement are resihp.torch's Trainer's."""
import time

import resihp.torch as rt

import common
from textdata import fixed_workload


def main():
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("deterministic", "float32", "bfloat16"),
                   default="deterministic",
                   help="gradient sums: exact fixed point (bitwise the same "
                   "whoever computes what), float32, or bfloat16 on the wire")
    p.add_argument("--standalone", action="store_true",
                   help="no resihp job: compute all microbatches here")
    args = p.parse_args()
    model, opt, sched, corpus = common.setup(args)
    work = fixed_workload(args.batch, args.ctx)
    tr = rt.Trainer(model, opt, microbatches=args.microbatches,
                    steps=args.steps, scheduler=sched, mode=args.mode,
                    seed=args.seed,
                    workload=work,
                    standalone=args.standalone)
    losses, times = [], []
    for step in tr:
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
        if tr.replica == 0:
            common.step_line(step.index, step.loss, times[-1])
    digest = tr.finish(rt.state_digest(model, opt))
    if tr.replica == 0:
        common.report(args, model, opt, corpus, losses, times, digest=digest,
                      extra={"mode": args.mode,
                             "standalone": args.standalone})


if __name__ == "__main__":
    main()
