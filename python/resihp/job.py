# SPDX-License-Identifier: BSD-3-Clause
"""A replica's side of a resilient job (resihp/job.h), for Python.

    job = resihp.Job(microbatches=M, steps=S, state=[(addr, nbytes), ...])
    while True:
        st = job.begin_step()
        if st.done: break
        ... compute st.mbs into acc ...
        while (extra := job.allreduce(addr, count, resihp.FIXED64)):
            ... add the microbatches in extra, call again ...
        job.end_step()
    job.finish(checksum)

Buffers are passed as addresses (a torch tensor's data_ptr(), a ctypes
array's address) with their lengths: the caller keeps them alive."""
import ctypes
import operator

from . import _lib
from ._lib import lib
from .comm import Comm
from .errors import ResihpError, check

FLOAT32, BFLOAT16, FLOAT64, FIXED64 = 0, 1, 2, 3
OP_SUM, OP_AVG = 0, 1
_EREASSIGNED = -22


class Step:
    """What begin_step said of this step (a copy: valid after the call)."""

    def __init__(self, c):
        self.index = c.step
        self.done = bool(c.done)
        self.catching_up = bool(c.catching_up)
        self.mbs = [c.mbs[i] for i in range(c.nmbs)] if c.nmbs > 0 else []
        self.epoch = c.epoch
        self.nreplicas = c.nreplicas
        self.catchup_bytes = c.catchup_bytes
        self.catchup_seconds = c.catchup_seconds
        # the coordinator moved layers between this replica's ranks: move
        # their state, then Job.commit_layers (resihp_job(3) Repartition)
        self.layers_moved = bool(c.layers_moved)


_MAX_BUFS = 4096       # RESIHP__JOB_MAX_BUFS: a state list's buffers
_MAX_LAYERS = 100000   # RESIHP__LAYERS_MAX


def _int(v, what):
    """v as an int (a bool or a float is refused: a slip, not a count)."""
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            return operator.index(v)  # numpy / torch integers
        except TypeError:
            raise ValueError("%s: %r is not an integer" % (what, v)) from None
    return v


def _buf_list(state, what):
    """[(address, bytes)] checked: a list of pairs of integers, bytes >= 0,
    an address for every non-empty buffer, at most 4096 of them."""
    if isinstance(state, (str, bytes)) or not hasattr(state, "__iter__"):
        raise ValueError("%s: a list of (address, bytes) pairs, not a %s" %
                         (what, type(state).__name__))
    out = []
    for i, b in enumerate(state):
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise ValueError("%s[%d]: an (address, bytes) pair, not %r" %
                             (what, i, b))
        addr = _int(b[0], "%s[%d]'s address" % (what, i))
        nbytes = _int(b[1], "%s[%d]'s size" % (what, i))
        if nbytes < 0 or addr < 0 or (nbytes and not addr):
            raise ValueError("%s[%d]: (%d, %d): a buffer needs a size >= 0 "
                             "and, unless empty, an address" %
                             (what, i, addr, nbytes))
        out.append((addr, nbytes))
    if len(out) > _MAX_BUFS:
        raise ValueError("%s: %d buffers, at most %d" % (what, len(out),
                                                         _MAX_BUFS))
    return out


def _bufs(state):
    arr = (_lib.JobBuf * max(1, len(state)))()
    for i, (addr, nbytes) in enumerate(state):
        arr[i].data = addr
        arr[i].bytes = nbytes
    return arr


def check_layers(elems, counts, shards=None):
    """(elems, counts) as lists of ints, or a ValueError that says what is
    wrong: elems[l] >= 0 gradient elements of layer l (1 to 100000 layers),
    counts[k] >= 1 layers of rank k summing to the layers (shards entries
    when given)."""
    elems = [_int(e, "elems[%d]" % i) for i, e in enumerate(elems)]
    counts = [_int(c, "counts[%d]" % i) for i, c in enumerate(counts)]
    if not 1 <= len(elems) <= _MAX_LAYERS:
        raise ValueError("%d layers: declare 1 to %d" % (len(elems),
                                                         _MAX_LAYERS))
    if any(e < 0 for e in elems):
        raise ValueError("elems %s: a layer's gradient elements are >= 0" %
                         elems[:8])
    if not counts or any(c < 1 for c in counts) or sum(counts) != len(elems):
        raise ValueError("partition %s: every rank holds at least one layer "
                         "and the counts sum to the %d layers" %
                         (counts, len(elems)))
    if shards is not None and len(counts) != shards:
        raise ValueError("partition %s: %d entries, the replica has %d ranks"
                         % (counts, len(counts), shards))
    return elems, counts


class Job:
    """A joined replica rank. Arguments as resihp_job_opts_t; None/-1 take
    the RESIHP_* environment resihp-run sets. state: (address, bytes) pairs,
    checked at join against the same shard of every other replica."""

    def __init__(self, microbatches, steps, *, state=(), coordinator=None,
                 replica=-1, secret_file=None, inject=None, timeout_ms=0,
                 ranks_per_replica=0):
        o = _lib.JobOpts()
        lib.resihp_job_opts_init(ctypes.byref(o))
        o.microbatches, o.steps = int(microbatches), int(steps)
        enc = lambda s: s.encode() if s is not None else None
        o.coordinator, o.secret_file, o.inject = (enc(coordinator),
                                                  enc(secret_file), enc(inject))
        o.replica, o.timeout_ms = int(replica), int(timeout_ms)
        o.ranks_per_replica = int(ranks_per_replica)
        state = list(state)
        self._state = _bufs(state)
        o.state = self._state if state else None
        o.nstate = len(state)
        self._h = ctypes.c_void_p()
        self._workload = None
        self._st = _lib.JobStep()
        check(lib.resihp_job_join(ctypes.byref(o), ctypes.byref(self._h)),
              "resihp_job_join")

    def _job(self):
        if not self._h:
            raise ResihpError(-20, "the job was closed")
        return self._h

    @property
    def replica(self):
        return lib.resihp_job_replica(self._job())

    @property
    def shard(self):
        return lib.resihp_job_shard(self._job())

    @property
    def shards(self):
        return lib.resihp_job_shards(self._job())

    @property
    def replica_comm(self):
        """The communicator of this replica's K ranks (rank k = shard k;
        resihp.comm.Comm, None when there is none), owned by the job:
        reduce_scatter, allgather, allreduce, bcast. An error from it means
        a rank of the replica failed: the replica fails as one, let the
        error end the process."""
        if getattr(self, "_rcomm", None) is None:
            h = lib.resihp_job_replica_comm(self._job())
            self._rcomm = Comm(h, owner=self) if h else None
        return self._rcomm

    def set_layers(self, elems, counts):
        """The model's layers (elems[l]: gradient elements of layer l, in
        the order of this rank's gradient) and this replica's partition
        (counts[k]: layers of rank k; len(counts) == shards), the same on
        every rank of the replica, before the first step (resihp_job(3))."""
        elems, counts = check_layers(elems, counts)
        check_layers(elems, counts, self.shards)
        e = (ctypes.c_size_t * max(1, len(elems)))(*elems)
        c = (ctypes.c_int * max(1, len(counts)))(*counts)
        check(lib.resihp_job_set_layers(self._job(), len(elems), e, c,
                                        len(counts)), "resihp_job_set_layers")

    @property
    def layers(self):
        """range of the layers this rank holds, or None when none were
        declared."""
        first, count = ctypes.c_int(), ctypes.c_int()
        rc = lib.resihp_job_layers(self._job(), ctypes.byref(first),
                                   ctypes.byref(count))
        if rc == -4:  # RESIHP_ENOENT: no layers declared
            return None
        check(rc, "resihp_job_layers")
        return range(first.value, first.value + count.value)

    def _counts(self, fn, what):
        """A partition call's counts, or None on RESIHP_ENOENT."""
        n = self.shards
        arr = (ctypes.c_int * max(1, n))()
        rc = fn(self._job(), arr, n)
        if rc == -4:  # RESIHP_ENOENT
            return None
        check(rc, what)
        return list(arr[:n])

    @property
    def partition(self):
        """This replica's partition now (counts[k]: layers of rank k), or
        None when no layers were declared."""
        return self._counts(lib.resihp_job_partition, "resihp_job_partition")

    @property
    def shrunk_partition(self):
        """In a replica relaunched shrunk on its survivors: the partition
        the coordinator planned over its ranks (declare it with set_layers
        instead of the program's own); None in any other process."""
        return self._counts(lib.resihp_job_shrunk_partition,
                            "resihp_job_shrunk_partition")

    def set_layers_movable(self):
        """This program can move layers between its ranks at a step
        boundary (after set_layers, before the first step, on every rank):
        a step may then say layers_moved."""
        check(lib.resihp_job_set_layers_movable(self._job()),
              "resihp_job_set_layers_movable")

    def _layer_state(self, layers, rank, call):
        """A state by layer as resihp_job_layer_state_t: (the per-layer
        arrays, which the caller keeps, the layer list, its length, the
        rank's array, its length), or a ValueError that says what is
        wrong: one list of (address, bytes) buffers per layer this rank
        holds now, at most 4096 buffers in all."""
        if isinstance(layers, (str, bytes)) or not hasattr(layers,
                                                           "__iter__"):
            raise ValueError("layers: a list of buffer lists, one per layer "
                             "of this rank, not a %s" % type(layers).__name__)
        per = [_buf_list(b, "layers[%d]" % i) for i, b in enumerate(layers)]
        rank = _buf_list(rank, "rank")
        if sum(len(b) for b in per) + len(rank) > _MAX_BUFS:
            raise ValueError("a state of %d buffers, at most %d" %
                             (sum(len(b) for b in per) + len(rank),
                              _MAX_BUFS))
        mine = self.layers
        if mine is None or len(per) != len(mine):
            raise ValueError("layers: %d buffer lists, this rank holds %s: "
                             "one per layer (%s)" %
                             (len(per), "no layers" if mine is None else
                              "%d layers" % len(mine), call))
        arrs = [_bufs(b) for b in per]
        ls = (_lib.JobLayerState * max(1, len(per)))()
        for i, (a, b) in enumerate(zip(arrs, per)):
            ls[i].bufs, ls[i].nbufs = a, len(b)
        return arrs, ls, len(per), _bufs(rank), len(rank)

    def set_layer_state(self, layers, rank=()):
        """This rank's state by layer: layers[i] the (address, bytes)
        buffers of layer layers.start + i of this rank, rank its own state
        that belongs to no layer; after set_layers, before the first step,
        on every rank of the replica (catch-up by layer, resihp_job(3))."""
        arrs, ls, n, rb, nr = self._layer_state(layers, rank,
                                                "set_layers first")
        check(lib.resihp_job_set_layer_state(self._job(), ls, n, rb, nr),
              "resihp_job_set_layer_state")
        self._state = (arrs, ls, rb)

    def commit_layers(self, state, failed=False):
        """After a step whose layers_moved is true: this rank moved its
        layers' state, state its new (address, bytes) list (the layers'
        buffers in layer order, then the rank's). The ranks of the replica
        agree that all of them did (failed=True: this one did not); a
        ResihpError on every rank otherwise: leave, the replica fails.
        The list is opaque from then on: a rank that declared its state
        by layer commits with commit_layer_state instead."""
        state = _buf_list(state, "state") if not failed else []
        bufs = _bufs(state)
        check(lib.resihp_job_commit_layers(self._job(), bufs, len(state),
                                           1 if failed else 0),
              "resihp_job_commit_layers")
        self._state = bufs

    def commit_layer_state(self, layers, rank=(), failed=False):
        """commit_layers for a rank that declared its state by layer
        (set_layer_state): after a step whose layers_moved is true, its
        state by layer for the layers it holds now (self.layers; as at
        set_layer_state), so that the replica's replacements still catch
        up by layer and it can still shrink onto its survivors
        (resihp_job_commit_layer_state). The same agreement and errors
        as commit_layers; failed=True: this rank's move failed (layers
        and rank are then not looked at)."""
        if failed:
            arrs, ls, n, rb, nr = [], None, 0, None, 0
        else:
            arrs, ls, n, rb, nr = self._layer_state(
                layers, rank, "the layers it holds after the move")
        check(lib.resihp_job_commit_layer_state(self._job(), ls, n, rb, nr,
                                                1 if failed else 0),
              "resihp_job_commit_layer_state")
        if not failed:
            self._state = (arrs, ls, rb)

    def set_state(self, state):
        state = _buf_list(state, "state")
        bufs = _bufs(state)
        check(lib.resihp_job_set_state_list(self._job(), bufs, len(state)),
              "resihp_job_set_state_list")
        self._state = bufs

    def begin_step(self):
        check(lib.resihp_job_begin_step(self._job(), ctypes.byref(self._st)),
              "resihp_job_begin_step")
        return Step(self._st)

    def allreduce(self, addr, count, dtype=FIXED64, op=OP_SUM):
        """Sum (or average) count elements at addr over the replicas.
        Returns None when done, or the list of microbatch ids reassigned
        to this replica (the buffer is untouched: add them, call again)."""
        rc = lib.resihp_job_allreduce_as(self._job(), addr, count, dtype, op)
        if rc == _EREASSIGNED:
            c = self._st
            return [c.extra[i] for i in range(c.nextra)]
        check(rc, "resihp_job_allreduce_as")
        return None

    def end_step(self):
        check(lib.resihp_job_end_step(self._job()), "resihp_job_end_step")

    def report_microbatch(self, mb, seconds, tokens=1.0, sum_l2=None,
                          nseq=1.0):
        """Microbatch mb took seconds of this rank's compute; its workload
        (sum_l2 None: one sequence of `tokens` tokens, tokens**2)."""
        if sum_l2 is None:
            sum_l2 = float(tokens) ** 2
        lib.resihp_job_report_microbatch(self._job(), int(mb), float(tokens),
                                         float(sum_l2), float(nseq),
                                         float(seconds))

    def set_workload_fn(self, fn):
        """fn(step, mb) -> (tokens, sum_l2, nseq), or None when unknown."""

        def call(step, mb, tok, l2, nseq, _ud):
            try:
                w = fn(step, mb)
                if w is None:
                    return 1
                tok[0], l2[0], nseq[0] = (float(x) for x in w)
                return 0
            except Exception:  # never unwind through C
                return 1

        self._workload = _lib.WORKLOAD_FN(call)
        check(lib.resihp_job_set_workload_fn(self._job(), self._workload,
                                             None),
              "resihp_job_set_workload_fn")

    # -- the replica communicator (rank k = shard k): point to point ------
    def _rcomm_or_fail(self):
        comm = self.replica_comm
        if comm is None:
            raise ResihpError(-20, "the job has no replica communicator")
        return comm

    def replica_send(self, shard, addr, nbytes):
        """Send nbytes at addr to rank `shard` of this replica (resihp_send
        over resihp_job_replica_comm). A failed peer raises ResihpError
        (RESIHP_EPEER, RESIHP_ETIMEDOUT): the replica fails as one, leave."""
        self._rcomm_or_fail().send(shard, addr, nbytes)

    def replica_recv(self, shard, addr, nbytes):
        """Receive exactly nbytes from rank `shard` of this replica into
        addr (resihp_recv); errors as replica_send."""
        self._rcomm_or_fail().recv(shard, addr, nbytes)

    def finish(self, result):
        check(lib.resihp_job_finish(self._job(), str(result).encode()),
              "resihp_job_finish")

    def abort(self, reason):
        """Stop the whole run: a program error a spare cannot fix."""
        if self._h:
            lib.resihp_job_abort(self._h, str(reason).encode())

    def close(self):
        if getattr(self, "_rcomm", None) is not None:
            self._rcomm._h = None  # the job's: gone with it
        if self._h:
            lib.resihp_job_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def fixed_frac_bits():
    return lib.resihp_fixed_frac_bits()


def fixed_accumulate_float(acc_addr, src_addr, n, frac_bits):
    lib.resihp_fixed_accumulate_float(acc_addr, src_addr, n, frac_bits)


def fixed_to_float(dst_addr, src_addr, n, frac_bits, divisor=1.0):
    lib.resihp_fixed_to_float(dst_addr, src_addr, n, frac_bits, divisor)


def version():
    return lib.resihp_version().decode()
