# SPDX-License-Identifier: BSD-3-Clause
"""The training loop of the Python test scripts: every microbatch of every
step through batch(step, mb), its loss backward; the steps' mean losses."""
import torch
import torch.nn.functional as F


def batch(step, mb):
    """Microbatch mb of step of the test scripts' small model: 4 samples of
    8 features, 3 classes, the same whoever asks."""
    g = torch.Generator().manual_seed(1000 * step + mb)
    return torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,),
                                                         generator=g)


def train_with(batch, tr, model, steps=None):
    losses = []
    for step in tr:
        for mb in step:
            x, y = batch(step.index, mb)
            step.backward(F.cross_entropy(model(x), y))
        losses.append(step.loss)
        if steps is not None and step.index + 1 >= steps:
            break
    return losses
