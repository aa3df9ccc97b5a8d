# SPDX-License-Identifier: BSD-3-Clause
"""ctypes binding of libresihp's public C API (libresihp/include/resihp/).

Only the C ABI is used: no tie to a Python or torch version. The library is
found through RESIHP_LIBRARY (a path), then the directory make install
wrote into _installed.py, then the dynamic loader's search path."""
import ctypes
import os

try:  # written by make install; absent in the source tree
    from ._installed import LIBDIR as _LIBDIR
except ImportError:
    _LIBDIR = ""

_SONAME = "libresihp.so.0"


def _load():
    tried = []
    env = os.environ.get("RESIHP_LIBRARY")
    candidates = [env] if env else []
    if _LIBDIR:
        candidates.append(os.path.join(_LIBDIR, _SONAME))
    candidates.append(_SONAME)
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "resihp: cannot load libresihp: tried " + "; ".join(tried) +
        ". Install resihp (make install) or set RESIHP_LIBRARY to the path "
        "of libresihp.so")


lib = _load()

c_int, c_long, c_double, c_size_t = (ctypes.c_int, ctypes.c_long,
                                     ctypes.c_double, ctypes.c_size_t)
c_void_p, c_char_p = ctypes.c_void_p, ctypes.c_char_p


class JobBuf(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("bytes", c_size_t)]


class JobOpts(ctypes.Structure):
    _fields_ = [("microbatches", c_int), ("steps", c_long),
                ("coordinator", c_char_p), ("replica", c_int),
                ("secret_file", c_char_p), ("inject", c_char_p),
                ("timeout_ms", c_int), ("ranks_per_replica", c_int),
                ("state", ctypes.POINTER(JobBuf)), ("nstate", c_int)]


class JobStep(ctypes.Structure):
    _fields_ = [("step", c_long), ("done", c_int), ("catching_up", c_int),
                ("nmbs", c_int), ("mbs", ctypes.POINTER(c_int)),
                ("nextra", c_int), ("extra", ctypes.POINTER(c_int)),
                ("epoch", ctypes.c_uint32), ("nreplicas", c_int),
                ("catchup_bytes", c_size_t), ("catchup_seconds", c_double),
                ("layers_moved", c_int)]


class JobLayerState(ctypes.Structure):  # resihp_job_layer_state_t
    _fields_ = [("bufs", ctypes.POINTER(JobBuf)), ("nbufs", c_int)]


WORKLOAD_FN = ctypes.CFUNCTYPE(c_int, c_long, c_int,
                               ctypes.POINTER(c_double),
                               ctypes.POINTER(c_double),
                               ctypes.POINTER(c_double), c_void_p)


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_JOB = c_void_p
_proto("resihp_version", c_char_p)
_proto("resihp_strerror", c_char_p, c_int)
_proto("resihp_err_name", c_char_p, c_int)
_proto("resihp_job_opts_init", None, ctypes.POINTER(JobOpts))
_proto("resihp_job_join", c_int, ctypes.POINTER(JobOpts),
       ctypes.POINTER(_JOB))
_proto("resihp_job_set_state_list", c_int, _JOB, ctypes.POINTER(JobBuf),
       c_int)
_proto("resihp_job_begin_step", c_int, _JOB, ctypes.POINTER(JobStep))
_proto("resihp_job_allreduce_as", c_int, _JOB, c_void_p, c_size_t, c_int,
       c_int)
_proto("resihp_job_end_step", c_int, _JOB)
_proto("resihp_job_report_microbatch", None, _JOB, c_int, c_double,
       c_double, c_double, c_double)
_proto("resihp_job_set_workload_fn", c_int, _JOB, WORKLOAD_FN, c_void_p)
_proto("resihp_job_replica", c_int, _JOB)
_proto("resihp_job_shard", c_int, _JOB)
_proto("resihp_job_shards", c_int, _JOB)
_proto("resihp_job_set_layers", c_int, _JOB, c_int,
       ctypes.POINTER(c_size_t), ctypes.POINTER(c_int), c_int)
_proto("resihp_job_layers", c_int, _JOB, ctypes.POINTER(c_int),
       ctypes.POINTER(c_int))
_proto("resihp_job_partition", c_int, _JOB, ctypes.POINTER(c_int), c_int)
_proto("resihp_job_set_layers_movable", c_int, _JOB)
_proto("resihp_job_commit_layers", c_int, _JOB, ctypes.POINTER(JobBuf), c_int,
       c_int)
_proto("resihp_job_shrunk_partition", c_int, _JOB, ctypes.POINTER(c_int),
       c_int)
_proto("resihp_job_set_layer_state", c_int, _JOB,
       ctypes.POINTER(JobLayerState), c_int, ctypes.POINTER(JobBuf), c_int)
_proto("resihp_job_commit_layer_state", c_int, _JOB,
       ctypes.POINTER(JobLayerState), c_int, ctypes.POINTER(JobBuf), c_int,
       c_int)
_proto("resihp_job_finish", c_int, _JOB, c_char_p)
_proto("resihp_job_destroy", None, _JOB)
_proto("resihp_fixed_frac_bits", c_int)
_proto("resihp_fixed_accumulate_float", None, c_void_p, c_void_p, c_size_t,
       c_int)
_proto("resihp_fixed_to_float", None, c_void_p, c_void_p, c_size_t, c_int,
       c_double)
_proto("resihp_job_abort", c_int, _JOB, c_char_p)


class CommOpts(ctypes.Structure):  # resihp_comm_opts_t (allreduce.h)
    _fields_ = [("rank", c_int), ("nranks", c_int),
                ("endpoints", ctypes.POINTER(c_char_p)), ("listen_fd", c_int),
                ("secret", c_void_p), ("secret_len", c_size_t),
                ("detect_timeout_ms", c_int), ("heartbeat_ms", c_int),
                ("connect_timeout_ms", c_int), ("op_timeout_ms", c_int),
                ("chunk_bytes", c_long), ("deterministic", c_int),
                ("transport", c_int), ("unprotected", c_int),
                ("mac_data", c_int), ("small_max", c_long),
                ("single_copy", c_int), ("setup_abort", c_void_p),
                ("setup_abort_arg", c_void_p)]


_COMM = c_void_p
_proto("resihp_job_replica_comm", _COMM, _JOB)
_proto("resihp_comm_opts_init", None, ctypes.POINTER(CommOpts))
_proto("resihp_comm_create", c_int, ctypes.POINTER(CommOpts),
       ctypes.POINTER(_COMM))
_proto("resihp_comm_destroy", None, _COMM)
_proto("resihp_comm_rank", c_int, _COMM)
_proto("resihp_comm_size", c_int, _COMM)
_proto("resihp_allreduce", c_int, _COMM, c_void_p, c_size_t, c_int, c_int)
_proto("resihp_bcast", c_int, _COMM, c_int, c_void_p, c_size_t)
_proto("resihp_block", None, c_size_t, c_int, c_int, ctypes.POINTER(c_size_t),
       ctypes.POINTER(c_size_t))
_proto("resihp_reduce_scatter", c_int, _COMM, c_void_p, c_void_p, c_size_t,
       c_int, c_int)
_proto("resihp_allgather", c_int, _COMM, c_void_p, c_void_p, c_size_t, c_int)
_proto("resihp_send", c_int, _COMM, c_int, c_void_p, c_size_t)
_proto("resihp_recv", c_int, _COMM, c_int, c_void_p, c_size_t)
