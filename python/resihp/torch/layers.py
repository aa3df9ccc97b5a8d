# SPDX-License-Identifier: BSD-3-Clause
"""Layers that move between the stages of a pipeline replica
(PipelineTrainer(move_layers=True), resihp_job(3) "Repartition").

The layers are the model's top-level children, each with the children
without trained parameters that follow it (an activation, a dropout: they
go where the layer before them goes; those before the first layer go with
it). The job's layer-keyed groups exchange each layer's gradient with the
ranks of the other replicas that hold it, whatever the partitions, and a
replacement catches up layer by layer from whichever healthy rank holds a
layer.

A stage's state is declared by layer (resihp_job_set_layer_state), in
host memory: for each layer its state_dict tensors (in place), its
parameters' optimizer state tensors (moments, momentum buffers, step
counts: allocated here, the shapes learnt as state.py does) and one byte
per such tensor saying whether the optimizer has created it yet (Adam
creates its moments at the first step: a layer that moves or is caught up
before it has none, and the receiver must not invent zeros, since an
optimizer's lazily created state need not be zeros); then the rank's own
state: the extra state's tensors and the meta buffer, which here holds
what no layer owns and every stage has alike (the param_groups' settings
without their parameters, the scheduler, the RNG, the extra state's
other fields), so it means the same on rank k of any partition. An
optimizer whose per-parameter state has values other than tensors is
refused.

A move (begin_step's layers_moved): every rank builds its new stage (the
layers it holds now: modules, optimizer from the optimizer function,
scheduler, gradients, state buffers), then the layers that change hands go
from their old rank to their new one over the replica communicator, in
layer order on every rank (each transfer is one sequence of sends matched
by the same receives: no cycle of waits), and the layers a rank keeps are
copied from its old buffers. The new optimizer gets its per-parameter
state from the buffers, the old one's param_groups settings (the
scheduler may have changed the learning rate) and the scheduler its old
state; the job commits the new state, by layer as declared, on every
rank or on none (resihp_job_commit_layer_state: the moved replica still
serves a catch-up by layer and can still shrink). Nothing of the old stage is written before
that, and every rank holds the whole model's modules, so a peer failing
mid-move leaves a stage that is whole (the replica fails as one anyway:
the error ends the process). Every rank keeps the whole model (as it is
built): the layers it does not hold are not trained there and use no
optimizer state."""
import ctypes

import hashlib

import torch

from ..errors import ProgramError
from .digest import _update
from .state import ReplicaState

_VERSION_LAYERS = 3  # the meta format of a state by layer (state.py: 1, 2)


def _trained(module):
    return [p for p in module.parameters() if p.requires_grad]


def units(model):
    """The model's layers: [[children]] in model order, each starting at a
    child with trained parameters; and the child index each starts at."""
    kids = list(model.children())
    starts = [i for i, m in enumerate(kids) if _trained(m)]
    if not starts:
        raise ProgramError("move_layers: the model has no child with trained "
                           "parameters")
    starts[0] = 0  # parameter-free children before the first layer join it
    ends = starts[1:] + [len(kids)]
    out = [kids[a:b] for a, b in zip(starts, ends)]
    owner = {}
    for u, mods in enumerate(out):
        for m in mods:
            for name, p in m.named_parameters():
                if owner.setdefault(id(p), u) != u:
                    raise ProgramError(
                        "move_layers: parameter '%s' is in layers %d and %d "
                        "(tied weights across layers are not supported: "
                        "untie them or put the modules sharing it in one "
                        "child of the model)" % (name, owner[id(p)], u))
    return out, starts


def counts_of(stages, starts, nkids):
    """The starting partition in layers from stages= split points into the
    model's children (each at a layer's first child), or a ProgramError."""
    if not isinstance(stages, (list, tuple)) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in stages):
        raise ProgramError(
            "move_layers: stages= gives split points into the model's "
            "children (e.g. [2] for two stages), not module lists")
    cuts = [0] + list(stages) + [nkids]
    if any(b <= a for a, b in zip(cuts, cuts[1:])):
        raise ProgramError(
            "stages %s: split points must increase strictly between 0 and "
            "the model's %d children" % (list(stages), nkids))
    at = {c: u for u, c in enumerate(starts)}
    bad = [c for c in stages if c not in at]
    if bad:
        raise ProgramError(
            "move_layers: split point %d is not the start of a layer (the "
            "layers start at children %s: a child with trained parameters; "
            "the parameter-free ones go with the layer before them)" %
            (bad[0], starts))
    lay = [at[c] for c in stages] + [len(starts)]
    return [b - a for a, b in zip([0] + lay, lay)]


def holds(counts, k):
    """range of the layers rank k holds under the partition counts."""
    a = sum(counts[:k])
    return range(a, a + counts[k])


def owners(counts):
    """[rank holding layer u] under the partition counts."""
    return [k for k, c in enumerate(counts) for _ in range(c)]


def elems(unit_lists, slots):
    """Gradient elements of each layer: its trained parameters', the
    gradients' slots (grads.py) counted with the last layer."""
    out = [sum(p.numel() for m in mods for p in _trained(m))
           for mods in unit_lists]
    out[-1] += slots
    return out


class LayerState(ReplicaState):
    """A stage's replica state by layer (see above). layers: the layer
    indices the stage holds, unit_lists the model's layers' children."""

    def __init__(self, layers, unit_lists, module, optimizer, scheduler=None,
                 meta_bytes=1 << 20, extra=None):
        super().__init__(module, optimizer, scheduler, meta_bytes, extra)
        if self.cuda is not None:
            raise ProgramError("move_layers on a CUDA device is not supported "
                               "yet: move_layers=False (fixed stages) runs "
                               "CUDA stages")
        self.layers = list(layers)
        unit_of = {}
        for i, u in enumerate(self.layers):
            for m in unit_lists[u]:
                for p in m.parameters():
                    unit_of[id(p)] = i
        self.unit_tensors = []
        for u in self.layers:
            ts, seen = [], set()
            for m in unit_lists[u]:
                for t in m.state_dict(keep_vars=True).values():
                    t = t.detach()
                    if t.numel() and t.data_ptr() not in seen:
                        seen.add(t.data_ptr())
                        ts.append(t)
            self.unit_tensors.append(ts)
        self.unit_slots = [[] for _ in self.layers]
        for i, (gi, pi, _, _) in enumerate(self.slots):
            self.unit_slots[unit_of[id(self._param(gi, pi))]].append(i)
        self.present = [torch.zeros(max(1, len(s)), dtype=torch.uint8)
                        for s in self.unit_slots]

    def layer_tensors(self, i):
        """The tensors of held layer i (its index in self.layers), in the
        order sent."""
        return self.unit_tensors[i] + [self.slots[s][3] for s in
                                       self.unit_slots[i]] + [self.present[i]]

    def buffers_of(self, u):
        """(address, bytes) of held layer u's buffers (u: a model layer)."""
        i = self.layers.index(u)
        return [(t.data_ptr(), t.numel() * t.element_size())
                for t in self.layer_tensors(i)]

    def layer_buffers(self):
        return [[(t.data_ptr(), t.numel() * t.element_size())
                 for t in self.layer_tensors(i)]
                for i in range(len(self.layers))]

    def rank_buffers(self):
        ts = [b for b in self.extra_bufs if b.numel()] + [self.meta]
        return [(t.data_ptr(), t.numel() * t.element_size()) for t in ts]

    def buffers(self):
        return [b for lb in self.layer_buffers() for b in lb] + \
            self.rank_buffers()

    def _meta(self, step, marks):
        # the per-parameter state moves as the layers' tensors, no meta
        # carries it (None: SGD's momentum_buffer without momentum, the
        # same as none)
        for st in self.optimizer.state.values():
            odd = [k for k, v in st.items()
                   if v is not None and not torch.is_tensor(v)]
            if odd:
                raise ProgramError(
                    "move_layers: the optimizer %s keeps per-parameter state "
                    "that is not a tensor (%s): only tensors move with a "
                    "layer" % (type(self.optimizer).__name__,
                               ", ".join(map(str, odd))))
        have = set(marks.values())
        for i, idx in enumerate(self.unit_slots):
            for pos, s in enumerate(idx):
                self.present[i][pos] = 1 if s in have else 0
        return {"version": _VERSION_LAYERS, "step": int(step),
                "extra": self._extra_state(),
                "groups": [{k: v for k, v in g.items() if k != "params"}
                           for g in self.optimizer.param_groups],
                "scheduler": (self.scheduler.state_dict()
                              if self.scheduler is not None else None),
                "rng": torch.get_rng_state()}

    def bind(self):
        """The optimizer's per-parameter state becomes the buffers the
        layers' bytes say it has (after a move or a catch-up)."""
        for i, idx in enumerate(self.unit_slots):
            for pos, s in enumerate(idx):
                gi, pi, k, buf = self.slots[s]
                p = self._param(gi, pi)
                if int(self.present[i][pos]):
                    self.optimizer.state[p][k] = buf
                elif k in self.optimizer.state.get(p, {}):
                    del self.optimizer.state[p][k]
        for p in [p for p, st in self.optimizer.state.items() if not st]:
            del self.optimizer.state[p]

    def set_groups(self, groups):
        """The param_groups' settings (not their parameters) of another
        optimizer of this stage's kind: the same number of groups."""
        mine = self.optimizer.param_groups
        if not isinstance(groups, list) or len(groups) != len(mine) or \
                not all(isinstance(g, dict) for g in groups):
            raise ProgramError(
                "move_layers: the optimizer has %d param_groups here and %s "
                "in the state moved or received: the optimizer function must "
                "make the same groups whichever layers it is given" %
                (len(mine), len(groups) if isinstance(groups, list) else
                 "another kind"))
        for g, saved in zip(mine, groups):
            odd = sorted(str(k) for k in saved if k == "params" or k not in g)
            if odd:
                raise ProgramError("the state received has param_group "
                                   "fields this optimizer does not have: %s"
                                   % ", ".join(odd[:5]))
            g.update(saved)

    def _load(self, meta):
        version = meta.get("version") if isinstance(meta, dict) else None
        if version != _VERSION_LAYERS:
            raise ProgramError(
                "the state received is of format version %r, a stage that "
                "moves layers reads version %d: run the same resihp and "
                "move_layers on every replica" % (version, _VERSION_LAYERS))
        self.bind()
        self.set_groups(meta["groups"])
        return self._load_rest(meta)


def copy_layer(dst, src):
    """The bytes of one layer's buffers from src to dst ((address, bytes)
    lists of the same layer: the same sizes)."""
    if [n for _, n in dst] != [n for _, n in src]:
        raise ProgramError("move_layers: a layer's state has other sizes on "
                           "its new stage (%s bytes, was %s)" %
                           ([n for _, n in dst], [n for _, n in src]))
    for (d, n), (s, _) in zip(dst, src):
        if d != s and n:
            ctypes.memmove(d, s, n)


def layer_digest(mods, optimizer):
    """16 hex digits over one layer's state: its state_dict tensors (by
    name) and its parameters' optimizer state tensors (in order, by key).
    The same whichever rank holds the layer."""
    h = hashlib.sha256()
    for j, m in enumerate(mods):
        for name, t in sorted(m.state_dict().items()):
            _update(h, "%d.%s" % (j, name), t)
    ps = [p for m in mods for p in m.parameters()]
    for i, p in enumerate(ps):
        st = optimizer.state.get(p, {})
        for k in sorted(st):
            if torch.is_tensor(st[k]):
                _update(h, "opt.%d.%s" % (i, k), st[k])
    return h.hexdigest()[:16]
