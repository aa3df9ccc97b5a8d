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


def _bufs(state):
    arr = (_lib.JobBuf * max(1, len(state)))()
    for i, (addr, nbytes) in enumerate(state):
        arr[i].data = addr
        arr[i].bytes = nbytes
    return arr


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
        elems, counts = [int(e) for e in elems], [int(c) for c in counts]
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

    def set_state(self, state):
        state = list(state)
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
