# SPDX-License-Identifier: BSD-3-Clause
"""Module buffers a forward pass updates (BatchNorm's running statistics).

Each replica computes its own microbatches, so a buffer a forward changes
(running_mean/running_var/num_batches_tracked of BatchNorm*d, an
InstanceNorm with track_running_stats=True, a user module's counter) gets
each replica's own updates: the replicas' model states drift apart and the
run ends with them disagreeing (resihp-run exit 3). Such buffers are not
exchanged (summing running statistics would not give the sequential
updates of one process: the result would not be bitwise that of
standalone=True), so they are refused, with what to do instead:
- before joining, modules in training mode that track running statistics
  (the attribute track_running_stats, public in torch's norm layers);
- at the first step this process runs, any buffer whose bytes its
  microbatches changed (BufferWatch), whatever the module."""
import torch

from ..errors import ProgramError

_WHAT_TO_DO = (
    "build it with track_running_stats=False (batch statistics in eval "
    "too), replace it with nn.GroupNorm/nn.LayerNorm, or keep it in eval "
    "mode (module.eval(): frozen statistics)")


def refuse_running_stats(model):
    """ProgramError for the first module in training mode that updates
    running statistics in forward."""
    for name, m in model.named_modules():
        if m.training and getattr(m, "track_running_stats", False) and \
                getattr(m, "running_mean", None) is not None:
            raise ProgramError(
                "module '%s' (%s) updates its running statistics in forward, "
                "each replica from its own microbatches: the replicas' "
                "buffers would differ and the run end with the replicas "
                "disagreeing; resihp does not exchange buffers: %s" %
                (name or "the model", type(m).__name__, _WHAT_TO_DO))


def _bytes(t):
    return t.detach().reshape(-1).contiguous().view(torch.uint8)


class BufferWatch:
    """The model's buffers at a step's start; changed() after its
    microbatches names those a forward updated."""

    def __init__(self, model):
        self.before = [(n, b, _bytes(b).clone())
                       for n, b in model.named_buffers() if b.numel()]

    def changed(self):
        return [n for n, b, old in self.before
                if not torch.equal(_bytes(b), old)]

    def check(self, job):
        """Stop the run (every replica) if a buffer changed."""
        names = self.changed()
        if not names:
            return
        msg = ("the model's buffer%s %s changed during the step's forward "
               "passes: each replica updates them from its own "
               "microbatches, so the replicas would disagree; resihp does "
               "not exchange buffers: keep buffers constant in forward (for "
               "norm layers: %s)" % ("s" if len(names) > 1 else "",
                                     ", ".join("'%s'" % n for n in names[:5]),
                                     _WHAT_TO_DO))
        if job is not None:
            job.abort(msg)
        raise ProgramError(msg + "; the run was stopped")
