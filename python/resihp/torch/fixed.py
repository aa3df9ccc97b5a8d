# SPDX-License-Identifier: BSD-3-Clause
"""Deterministic fixed point for tensors on any device.

libresihp defines the bits (resihp_fixed_*, fixed_point.c's scalar
reference): value = (int64) round_half_even(x * 2^frac_bits), NaN -> 0,
INT64_MAX for x * 2^frac_bits >= 2^63 (+inf included), INT64_MIN below
-2^63 (-inf included); the accumulator adds modulo 2^64. Back:
(float) ((double) value * (2^-frac_bits / divisor)), rounded to nearest even.

On the CPU these are the C calls themselves. Elsewhere (a CUDA device: the
C library only sees host memory) the same arithmetic is written with torch
ops, each of them exact or rounding to nearest even as the C code does:
float32 -> float64 and the power-of-two scale are exact, torch.round rounds
half to even, the out-of-range and NaN cases are masks, int64 -> float64
and float64 -> float32 round to nearest even. The torch version works on
the CPU too, so a test compares it with the C reference anywhere."""
import torch

from .. import job as _job

_TWO63 = 9223372036854775808.0
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
# elements per piece: bounds the float64 temporaries (8 bytes each)
_CHUNK = 1 << 24


def _pieces(n):
    return ((lo, min(n, lo + _CHUNK)) for lo in range(0, n, _CHUNK))


def to_fixed_emulated(src, frac_bits):
    """int64 fixed point of the float tensor src, on src's device."""
    r = src.double().mul_(2.0 ** frac_bits).round_()
    hi = r >= _TWO63
    lo = r < -_TWO63
    out = r.masked_fill_(hi | lo | torch.isnan(r), 0.0).to(torch.int64)
    return out.masked_fill_(hi, _INT64_MAX).masked_fill_(lo, _INT64_MIN)


def accumulate_emulated(acc, src, frac_bits):
    """acc (int64) += fixed point of src (float32), with torch ops."""
    a, s = acc.view(-1), src.view(-1)
    for lo, hi in _pieces(s.numel()):
        a[lo:hi].add_(to_fixed_emulated(s[lo:hi], frac_bits))


def to_float_emulated(dst, src, frac_bits, divisor=1.0):
    """dst (float32) = src (int64 fixed point) as floats, with torch ops."""
    k = 2.0 ** -frac_bits / divisor
    d, s = dst.view(-1), src.view(-1)
    for lo, hi in _pieces(s.numel()):
        d[lo:hi].copy_(s[lo:hi].double().mul_(k))


def _check(a, b):
    if a.numel() != b.numel() or a.device != b.device:
        raise ValueError("fixed point: %s elements on %s and %s on %s" %
                         (a.numel(), a.device, b.numel(), b.device))


def accumulate(acc, src, frac_bits):
    """acc (int64) += fixed point of src (float32); contiguous, same
    device. The C library on the CPU, torch ops elsewhere."""
    _check(acc, src)
    if acc.device.type == "cpu":
        _job.fixed_accumulate_float(acc.data_ptr(), src.data_ptr(),
                                    src.numel(), frac_bits)
    else:
        accumulate_emulated(acc, src, frac_bits)


def to_float(dst, src, frac_bits):
    """dst (float32) = src (int64 fixed point); contiguous, same device."""
    _check(dst, src)
    if dst.device.type == "cpu":
        _job.fixed_to_float(dst.data_ptr(), src.data_ptr(), src.numel(),
                            frac_bits)
    else:
        to_float_emulated(dst, src, frac_bits)
