# SPDX-License-Identifier: BSD-3-Clause
"""A communicator of libresihp (resihp/allreduce.h), for Python: the K ranks
of a sharded replica (Job.replica_comm, owned by the job), or one made here
(Comm.create: a single replica of K processes without resihp-run, as the
tests run it).

    comm = job.replica_comm
    lo, n = comm.block(count)               # this rank's block
    comm.reduce_scatter(src, dst, count, resihp.FIXED64)   # dst: n elements
    comm.allgather(src_block, dst, count, resihp.FLOAT32)  # dst: count

Buffers are addresses with element counts, as in job.py. Every call is
collective over the communicator's members. A member that dies or hangs
makes the call raise ResihpError (RESIHP_EPEER or RESIHP_ETIMEDOUT) on every
member; the input is never written. On a replica communicator that fails
the replica: let the error end the process, resihp-run replaces it."""
import ctypes

from . import _lib
from ._lib import lib
from .errors import ResihpError, check


def block(count, n, i):
    """(first element, elements) of block i of count cut into n blocks
    (resihp_block: count // n each, one more for the first count % n)."""
    lo, ln = ctypes.c_size_t(), ctypes.c_size_t()
    lib.resihp_block(int(count), int(n), int(i), ctypes.byref(lo),
                     ctypes.byref(ln))
    return lo.value, ln.value


class Comm:
    def __init__(self, handle, owner=None):
        self._h = handle
        self._owner = owner  # the Job that owns the handle (None: ours)

    @classmethod
    def create(cls, rank, endpoints, secret, deterministic=True,
               detect_timeout_ms=0, connect_timeout_ms=0, listen_fd=-1):
        """Join the communicator of len(endpoints) ranks ("host:port"),
        authenticated with secret (bytes, the same on every rank);
        listen_fd: a socket already listening on endpoints[rank] (-1: bind
        it here)."""
        o = _lib.CommOpts()
        lib.resihp_comm_opts_init(ctypes.byref(o))
        eps = (ctypes.c_char_p * len(endpoints))(
            *[e.encode() for e in endpoints])
        sec = ctypes.create_string_buffer(bytes(secret), len(secret))
        o.rank, o.nranks, o.endpoints = int(rank), len(endpoints), eps
        o.listen_fd = int(listen_fd)
        o.secret = ctypes.cast(sec, ctypes.c_void_p)
        o.secret_len = len(secret)
        o.deterministic = 1 if deterministic else 0
        o.detect_timeout_ms = int(detect_timeout_ms)
        o.connect_timeout_ms = int(connect_timeout_ms)
        h = ctypes.c_void_p()
        check(lib.resihp_comm_create(ctypes.byref(o), ctypes.byref(h)),
              "resihp_comm_create")
        return cls(h)

    def _comm(self):
        if not self._h:
            raise ResihpError(-20, "the communicator was closed")
        return self._h

    @property
    def rank(self):
        return lib.resihp_comm_rank(self._comm())

    @property
    def size(self):
        return lib.resihp_comm_size(self._comm())

    def block(self, count):
        """(first element, elements) of this rank's block of count."""
        return block(count, self.size, self.rank)

    def allreduce(self, addr, count, dtype, op=0):
        check(lib.resihp_allreduce(self._comm(), addr, count, dtype, op),
              "resihp_allreduce")

    def reduce_scatter(self, src, dst, count, dtype, op=0):
        """dst (this rank's block of count) = that block of the sum of
        every member's src (count elements)."""
        check(lib.resihp_reduce_scatter(self._comm(), src, dst, count, dtype,
                                        op), "resihp_reduce_scatter")

    def allgather(self, src, dst, count, dtype):
        """dst (count elements) = every member's block; src is this rank's
        block (it may be dst's own block: in place)."""
        check(lib.resihp_allgather(self._comm(), src, dst, count, dtype),
              "resihp_allgather")

    def bcast(self, root, addr, nbytes):
        check(lib.resihp_bcast(self._comm(), int(root), addr, int(nbytes)),
              "resihp_bcast")

    def send(self, peer, addr, nbytes):
        """nbytes at addr to member peer (resihp_send)."""
        check(lib.resihp_send(self._comm(), int(peer), addr, int(nbytes)),
              "resihp_send")

    def recv(self, peer, addr, nbytes):
        """Exactly nbytes from member peer into addr (resihp_recv)."""
        check(lib.resihp_recv(self._comm(), int(peer), addr, int(nbytes)),
              "resihp_recv")

    def close(self):
        """Destroy a communicator made by create (the job owns its own)."""
        if self._h and self._owner is None:
            lib.resihp_comm_destroy(self._h)
        self._h = None

    def __del__(self):
        self.close()
