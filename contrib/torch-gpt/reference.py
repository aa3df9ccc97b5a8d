#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The single-process reference: every step computes all M microbatches in
order, accumulating float32 gradients of loss/M, then one optimizer step
(what resihp.torch's Trainer does standalone in mode float32).
The update is the mean over the M microbatches of each one's mean loss, as
under ddp_gloo.py and resihp; with the same options, ddp_gloo.py --replicas 1
gives the same final digest, bit for bit."""
import common


def main():
    args = common.parser(__doc__.split("\n")[0]).parse_args()
    model, opt, sched, corpus = common.setup(args)
    m = args.microbatches
    losses, times = [], []
    for step in range(args.steps):
        total, seconds = common.train_step(model, opt, sched, corpus, args,
                                           step, range(m), m)
        times.append(seconds)
        losses.append(total / m)
        common.check_finite(step, losses[-1])
        common.step_line(step, losses[-1], times[-1])
    common.report(args, model, opt, corpus, losses, times)


if __name__ == "__main__":
    main()
