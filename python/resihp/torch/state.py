# SPDX-License-Identifier: BSD-3-Clause
"""What a replacement replica copies from a healthy one, as buffers.

libresihp sends a list of buffers of fixed sizes (checked at join against
every other replica) as they were at the last commit. Here they are:
- the model's state_dict tensors (parameters and buffers) themselves:
  received in place, no copy;
- the optimizer's state tensors (moments, step counts): torch creates them
  at the first step, so their shapes are learnt up front from a copy of the
  optimizer that takes one step on zero gradients, and the buffers are
  allocated here; at each commit the optimizer's tensors are made these
  buffers (copied once and rebound if the optimizer replaced them);
- one byte buffer holding everything else, written at each commit in a
  safe encoding (codec.py: no pickle, a peer's bytes cannot run code): the
  optimizer's state_dict without its tensors, the LR scheduler's
  state_dict, the RNG state and the step;
- the user's own state objects (extra_state: a data loader's position, an
  EMA, a GradScaler: anything with state_dict/load_state_dict): the
  tensors of their state_dict in buffers allocated at construction (their
  number, shapes and dtypes must not change), the rest in the byte buffer.
After a catch-up, load() puts all of it back through load_state_dict.

A model on a CUDA device: libresihp reads and writes the buffers raw, in
host memory. Each tensor on the device has a pinned CPU mirror, which is
what the buffers list; commit() copies the tensors to their mirrors (and
waits: libresihp may read them any time after), load() copies the mirrors
back. Tensors on the CPU (e.g. an optimizer's step counts) are their own
buffers, as for a CPU model. The meta buffer then also carries the
device's RNG state (format version 2; a CPU model writes version 1)."""
import copy
import struct

import torch

from ..errors import ProgramError
from . import codec
from .device import check_tensor, cuda_of, one_device, pinned_like
from .digest import state_digest

_MARK = "__resihp_buffer__"
_USER_MARK = "__resihp_user_buffer__"
_DIFFERENT_START = ("the replicas started from different parameters: "
                    "initialise the model the same way on every replica "
                    "(torch.manual_seed before building it)")


_VERSION_CPU, _VERSION_CUDA = 1, 2  # meta formats (see above)


def _optimizer_layout(optimizer):
    """[(group, index, key, empty tensor like the state's)] in a fixed order,
    from a copy of the optimizer stepped once on zero gradients."""
    name = type(optimizer).__name__
    try:
        twin = copy.deepcopy(optimizer)
    except Exception as e:
        raise ProgramError(
            "cannot copy the optimizer %s (copy.deepcopy failed: %s: %s): "
            "resihp learns the shapes of its state from a copy stepped once "
            "on zero gradients; keep objects that cannot be copied (locks, "
            "files, generators, handles) out of the optimizer's attributes "
            "or give its class a __deepcopy__" %
            (name, type(e).__name__, e)) from e
    with torch.no_grad():
        for g in twin.param_groups:
            for p in g["params"]:
                p.grad = torch.zeros_like(p)
        try:
            twin.step()
        except AttributeError as e:
            # torch's Optimizer.__getstate__ keeps defaults, state and
            # param_groups only: a subclass's own attributes are not copied
            raise ProgramError(
                "cannot learn the layout of the optimizer %s's state: step() "
                "of a copy of it failed (AttributeError: %s); resihp learns "
                "it from copy.deepcopy(optimizer) stepped once on zero "
                "gradients, and torch.optim.Optimizer.__getstate__ copies "
                "only defaults, state and param_groups: give %s a "
                "__getstate__/__setstate__ (or __deepcopy__) that keeps the "
                "attributes its step() uses" % (name, e, name)) from e
        except Exception as e:
            raise ProgramError(
                "cannot learn the layout of the optimizer %s's state: "
                "step() of a copy of it, on zero gradients and without a "
                "closure, failed (%s: %s); the optimizer must step without "
                "a closure (LBFGS cannot) and its copy must step like the "
                "original" % (name, type(e).__name__, e)) from e
    layout = []
    for gi, g in enumerate(twin.param_groups):
        for pi, p in enumerate(g["params"]):
            st = twin.state.get(p, {})
            for k in sorted(st):
                if torch.is_tensor(st[k]):
                    layout.append((gi, pi, k, torch.zeros_like(st[k])))
    return layout


def check_optimizer(optimizer):
    """One torch.optim.Optimizer, or a ProgramError that says what to do."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return
    if isinstance(optimizer, (list, tuple)):
        raise ProgramError(
            "resihp.torch takes one optimizer, not a %s of %d: put the "
            "parameter sets in one optimizer as param_groups, each with its "
            "own settings, e.g. torch.optim.AdamW([{'params': a, 'lr': "
            "1e-3}, {'params': b, 'lr': 1e-2, 'weight_decay': 0}]); "
            "different optimizer classes for different parameters are not "
            "supported" % (type(optimizer).__name__, len(optimizer)))
    raise ProgramError("the optimizer is a %s, not a torch.optim.Optimizer: "
                       "pass one torch.optim optimizer (a subclass of "
                       "torch.optim.Optimizer)" % type(optimizer).__name__)


def _check_extra(extra):
    """{name: object with state_dict/load_state_dict}, or a ProgramError."""
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise ProgramError("extra_state is a %s: pass a dict {name: object "
                           "with state_dict() and load_state_dict()}" %
                           type(extra).__name__)
    for name, obj in extra.items():
        if not isinstance(name, str) or not (
                callable(getattr(obj, "state_dict", None)) and
                callable(getattr(obj, "load_state_dict", None))):
            raise ProgramError(
                "extra_state[%r] (a %s): each entry must be named by a "
                "string and have state_dict() and load_state_dict(), as "
                "torch modules, optimizers and GradScaler do; wrap other "
                "state in a small class with those two methods" %
                (name, type(obj).__name__))
    return dict(extra)


def _walk(x, fn, pick=torch.is_tensor):
    """x with every value v that pick(v) (in dicts, lists, tuples) replaced
    by fn(v), in a fixed order."""
    if pick(x):
        return fn(x)
    if isinstance(x, dict):
        return {k: _walk(v, fn, pick) for k, v in x.items()}
    if isinstance(x, list):
        return [_walk(v, fn, pick) for v in x]
    if isinstance(x, tuple):
        return tuple(_walk(v, fn, pick) for v in x)
    return x


def _user_mark(v):
    return isinstance(v, str) and v.startswith(_USER_MARK)


class ReplicaState:
    def __init__(self, model, optimizer, scheduler=None, meta_bytes=1 << 20,
                 extra=None):
        check_optimizer(optimizer)
        self.extra = _check_extra(extra)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.tensors, seen, named = [], set(), []
        for name, t in model.state_dict(keep_vars=True).items():
            t = t.detach()
            named.append(("model tensor '%s'" % name, t))
            check_tensor(named[-1][0], t)
            key = (t.device, t.data_ptr(), t.numel(), t.dtype)
            if key not in seen and t.numel():  # tied weights: once
                seen.add(key)
                self.tensors.append(t)
        names = {id(p): n for n, p in model.named_parameters()}
        params = [("parameter '%s'" % names[id(p)] if id(p) in names else
                   "an optimizer parameter of shape %s" % (tuple(p.shape),),
                   p) for g in optimizer.param_groups for p in g["params"]]
        # the parameters on one device; buffers may be on the CPU beside it
        one_device(params, "the optimizer's parameters")
        self.cuda = cuda_of(named + params, "the model's tensors")
        self.slots = _optimizer_layout(optimizer)
        # the extra state's tensors: host buffers, in _walk's order
        self.extra_bufs = []
        for obj in self.extra.values():
            _walk(obj.state_dict(), lambda t: self.extra_bufs.append(
                torch.zeros(t.shape, dtype=t.dtype)))
        self.meta = torch.zeros(meta_bytes, dtype=torch.uint8)
        # (tensor, its host buffer): the tensor itself on the CPU, else a
        # pinned mirror holding the state as of the last commit
        self.hosted = []
        for t in self.tensors + [s[3] for s in self.slots]:
            self.hosted.append((t, t if t.device.type == "cpu" else
                                pinned_like(t)))
        self._to_host()

    def buffers(self):
        """(address, bytes) of every buffer, in the order sent: host
        memory, which libresihp reads and writes raw."""
        ts = [h for _, h in self.hosted] + [
            b for b in self.extra_bufs if b.numel()] + [self.meta]
        return [(t.data_ptr(), t.numel() * t.element_size()) for t in ts]

    def _to_host(self):
        """The mirrors get their device tensors; done when this returns."""
        if self.cuda is None:
            return
        for t, h in self.hosted:
            if h is not t:
                h.copy_(t, non_blocking=True)
        torch.cuda.current_stream(self.cuda).synchronize()

    def _from_host(self):
        """The device tensors get their mirrors (after a catch-up)."""
        if self.cuda is None:
            return
        for t, h in self.hosted:
            if h is not t:
                t.copy_(h, non_blocking=True)
        torch.cuda.current_stream(self.cuda).synchronize()

    def start_word(self, model=None):
        """A word of the model's digest (model: another, e.g. the whole
        model of a stage). Summed over the replicas at step 0 with a count,
        it tells whether they all start from the same parameters
        (check_start)."""
        return int(state_digest(self.model if model is None else model)[:3],
                   16)

    def check_start(self, job, mine, word, count):
        """After step 0's exchange of (word, count): stop the run (every
        replica sees it) unless every replica put this one's word."""
        if mine is None or count <= 0 or word == mine * count:
            return
        if job is not None:
            job.abort(_DIFFERENT_START)
        raise ProgramError(_DIFFERENT_START + "; the run was stopped")

    def catch_up(self, job):
        """load(), or stop the run: a state that cannot be loaded here
        cannot be on a spare either."""
        try:
            self.load()
        except Exception as e:
            job.abort("the state received from a healthy replica cannot be "
                      "loaded: %s" % e)
            raise ProgramError("catch-up: the state cannot be loaded (%s); "
                               "the run was stopped" % e) from e

    def step_done(self, step, apply=True, after=None):
        """The step's gradients are summed: optimizer and scheduler step
        (unless apply is False: a before_step hook skipped the step),
        after() (the after_step hook), then the buffers hold the new state
        (commit)."""
        if apply:
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
        if after is not None:
            after()
        self.commit(step)

    def digest(self):
        return state_digest(self.model, self.optimizer)

    def _param(self, gi, pi):
        return self.optimizer.param_groups[gi]["params"][pi]

    def commit(self, step):
        """Make the buffers hold the state after step (its optimizer step
        done). Called before the commit, so a catch-up never sees a mix."""
        meta = self._meta(step, self._bind_slots())
        self._to_host()
        self._write_meta(meta)

    def _bind_slots(self):
        """The optimizer's state tensors into their buffers (copied once
        and rebound if the optimizer replaced them); {id(buffer): slot} of
        the slots the optimizer has."""
        marks = {}
        for i, (gi, pi, k, buf) in enumerate(self.slots):
            cur = self.optimizer.state.get(self._param(gi, pi), {}).get(k)
            if cur is None:
                continue
            if cur is not buf:
                if cur.shape != buf.shape or cur.dtype != buf.dtype:
                    raise ProgramError(
                        "optimizer state '%s' changed shape (%s %s, was %s "
                        "%s)" % (k, tuple(cur.shape), cur.dtype,
                                 tuple(buf.shape), buf.dtype))
                buf.copy_(cur)
                self.optimizer.state[self._param(gi, pi)][k] = buf
            marks[id(buf)] = i
        return marks

    def _meta(self, step, marks):
        """The byte buffer's content: everything but the tensors."""
        sd = self.optimizer.state_dict()
        # its per-parameter dicts are the optimizer's own: copy before marking
        sd["state"] = {i: dict(st) for i, st in sd["state"].items()}
        for st in sd["state"].values():
            for k, v in st.items():
                if torch.is_tensor(v) and id(v) in marks:
                    st[k] = "%s%d" % (_MARK, marks[id(v)])
        meta = {"version": _VERSION_CPU, "step": int(step),
                "extra": self._extra_state(),
                "optimizer": sd,
                "scheduler": (self.scheduler.state_dict()
                              if self.scheduler is not None else None),
                "rng": torch.get_rng_state()}
        if self.cuda is not None:
            meta["version"] = _VERSION_CUDA
            meta["cuda_rng"] = torch.cuda.get_rng_state(self.cuda)
        return meta

    def _write_meta(self, meta):
        blob = codec.encode(meta)
        if len(blob) + 8 > self.meta.numel():
            raise ProgramError(
                "the optimizer/scheduler state takes %d bytes, more than the "
                "%d reserved: pass a larger meta_bytes to the Trainer" %
                (len(blob), self.meta.numel() - 8))
        self.meta[:8] = torch.frombuffer(bytearray(struct.pack("<Q",
                                                               len(blob))),
                                         dtype=torch.uint8)
        self.meta[8:8 + len(blob)] = torch.frombuffer(bytearray(blob),
                                                      dtype=torch.uint8)

    def _extra_state(self):
        """{name: state_dict} of the extra state, its tensors copied to
        their buffers and replaced by marks."""
        out, at = {}, [0]

        def to_buffer(t):
            i = at[0]
            at[0] += 1
            if i >= len(self.extra_bufs) or \
                    t.shape != self.extra_bufs[i].shape or \
                    t.dtype != self.extra_bufs[i].dtype:
                raise ProgramError(
                    "extra_state[%r]: the tensors of its state_dict changed "
                    "(number, shape or dtype) since the Trainer was built; "
                    "a replacement receives them in buffers of fixed sizes: "
                    "keep them fixed" % name)
            self.extra_bufs[i].copy_(t.detach())
            return "%s%d" % (_USER_MARK, i)

        for name, obj in self.extra.items():
            out[name] = _walk(obj.state_dict(), to_buffer)
        if at[0] != len(self.extra_bufs):
            raise ProgramError("extra_state: its state_dicts hold fewer "
                               "tensors than when the Trainer was built; "
                               "keep their number fixed")
        return out

    def _load_extra(self, states):
        if not isinstance(states, dict) or set(states) != set(self.extra):
            raise ProgramError(
                "the state received has extra state %s, this replica %s: "
                "give every replica the same extra_state names" %
                (sorted(map(str, states)) if isinstance(states, dict)
                 else "of another kind", sorted(self.extra)))

        def from_buffer(v):
            i = int(v[len(_USER_MARK):])
            if not 0 <= i < len(self.extra_bufs):
                raise ProgramError("the state received is malformed (extra "
                                   "buffer %d of %d)" %
                                   (i, len(self.extra_bufs)))
            return self.extra_bufs[i].clone()

        for name, obj in self.extra.items():
            obj.load_state_dict(_walk(states[name], from_buffer, _user_mark))

    def load(self):
        """After a catch-up: the model's tensors came in place; put the rest
        back. Returns the step the state is of, or -1 for the initial one."""
        n = struct.unpack("<Q", bytes(self.meta[:8].tolist()))[0]
        if n == 0:  # the source had not committed a step: fresh optimizer
            self._from_host()
            self.optimizer.state.clear()
            return -1
        if n > self.meta.numel() - 8:
            raise ProgramError("the state received is malformed (meta length "
                               "%d)" % n)
        try:
            meta = codec.decode(bytes(self.meta[8:8 + n].numpy()))
        except ValueError as e:
            raise ProgramError("the state received is %s" % e) from None
        try:
            return self._load(meta)
        except ProgramError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError,
                RuntimeError, OverflowError) as e:
            # a peer's word in the wrong shape: the program's error (the
            # replica stops the run), never a raw traceback
            raise ProgramError("the state received is malformed (%s: %s)" %
                               (type(e).__name__, e)) from None

    def _scheduler_state(self, sd):
        """A peer's scheduler state_dict, only with the fields this
        scheduler has (load_state_dict sets whatever attributes it is
        given)."""
        if not isinstance(sd, dict):
            raise ProgramError("the state received has a scheduler state "
                               "that is not a dict")
        known = set(self.scheduler.state_dict())
        odd = sorted(str(k) for k in sd if k not in known)
        if odd:
            raise ProgramError("the state received has scheduler fields "
                               "this scheduler does not have: %s" %
                               ", ".join(odd[:5]))
        return sd

    def _load(self, meta):
        version = meta.get("version") if isinstance(meta, dict) else None
        if version not in (_VERSION_CPU, _VERSION_CUDA):
            raise ProgramError(
                "the state received is of format version %r, this resihp "
                "reads versions %d and %d: run the same resihp on every "
                "replica" % (version, _VERSION_CPU, _VERSION_CUDA))
        # the slots' device tensors first: load_state_dict copies them
        self._from_host()
        sd = meta["optimizer"]
        for st in sd["state"].values():
            for k, v in st.items():
                if isinstance(v, str) and v.startswith(_MARK):
                    st[k] = self.slots[int(v[len(_MARK):])][3]
        self.optimizer.load_state_dict(sd)
        for gi, pi, k, buf in self.slots:  # optimizer tensors are the buffers
            st = self.optimizer.state.get(self._param(gi, pi))
            if st is not None and k in st:
                st[k] = buf
        return self._load_rest(meta)

    def _load_rest(self, meta):
        """The scheduler, the extra state and the RNG of meta; its step."""
        if self.scheduler is not None and meta["scheduler"] is not None:
            self.scheduler.load_state_dict(
                self._scheduler_state(meta["scheduler"]))
        # a state written before extra_state existed (a resumed run's
        # checkpoint) has none
        self._load_extra(meta.get("extra", {}))
        torch.set_rng_state(meta["rng"])
        # a state from a CPU replica has no device RNG state: the device's
        # stays (the Trainer seeds it at each microbatch anyway)
        if self.cuda is not None and meta.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(meta["cuda_rng"], self.cuda)
        return meta["step"]
