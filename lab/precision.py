"""Rounding to the low-precision formats of attention kernels, through maintained libraries.

bf16, fp16 and the fp8 formats are cast by `ml_dtypes` (round to nearest even, each format's overflow:
fp16, bf16 and e5m2 overflow to ±inf, e4m3fn has no inf and gives NaN). TF32 has no storage type in
any library: it is fp32 with 10 mantissa bits, so `round_to` rounds the significand with numpy's
round-half-even `rint` at the format's quantum, in float64 where every step is exact.

Taught in: notebooks/07_precision.ipynb
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .validate import as_float_array, check_choice

__all__ = ["round_to", "truncate_tf32", "FORMATS", "format_info"]

FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")

_DTYPES = {
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """fp32 with an 11-bit significand: quantum $2^{e-10}$ for $x \\in [2^e, 2^{e+1})$, $2^{-136}$ below $2^{-126}$."""
    x64 = x.astype(np.float64)
    _, e = np.frexp(x64)  # x = f·2^e, f in [0.5, 1)
    quantum_exp = (
        np.maximum(e - 1, -126) - 10
    )  # e - 1 is the exponent of the leading bit
    rounded = np.ldexp(np.rint(np.ldexp(x64, -quantum_exp)), quantum_exp)
    with np.errstate(over="ignore"):
        return rounded.astype(np.float32)  # past fp32's max: ±inf, as TF32 overflows


def round_to(x, fmt: str) -> np.ndarray:
    """$\\mathrm{fl}_{fmt}(x)$: round float32 values `x` to `fmt` (round to nearest even) and return them as float32.

    `fmt` in {"fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}; `x` is first taken as float32.
    Past the largest finite value: ±inf for tf32, bf16, fp16 and fp8_e5m2, NaN for fp8_e4m3 (which has
    no infinity); values between the largest finite value and the midpoint to the next power round down
    to it. The input is never modified.
    Taught in: notebooks/07_precision.ipynb
    """
    check_choice(fmt, FORMATS, "fmt")
    with np.errstate(over="ignore"):
        a = as_float_array(x, "x").astype(
            np.float32
        )  # a copy: the input is never touched
    if fmt == "fp32":
        return a
    if fmt == "tf32":
        return _round_tf32(a)
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(_DTYPES[fmt]).astype(np.float32)


def truncate_tf32(x) -> np.ndarray:
    """TF32 by truncation: float32 values `x` with their 13 lowest mantissa bits cleared (toward zero), as float32.

    Triton documents that its default `tl.dot` on FP32 inputs "may" truncate them to TF32 "without
    rounding"; `round_to(x, "tf32")` is the rounding alternative. ±inf, NaN and ±0 stay as they are.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    with np.errstate(over="ignore"):
        a = as_float_array(x, "x").astype(
            np.float32
        )  # a copy: the input is never touched
    bits = a.view(np.uint32) & np.uint32(
        0xFFFFE000
    )  # sign, 8 exponent bits, the top 10 mantissa bits
    return np.where(np.isnan(a), a, bits.view(np.float32))


def format_info(fmt: str) -> dict:
    """Largest finite value $x_{max}$, smallest normal, smallest subnormal, $\\epsilon = 2^{-\\text{mantissa bits}}$ of `fmt`.

    From `ml_dtypes.finfo` / `numpy.finfo`; TF32 is FP32's exponent range with 10 mantissa bits, so its
    largest value is $(2 - 2^{-10})\\,2^{127}$ and its smallest subnormal $2^{-136}$.
    Taught in: notebooks/07_precision.ipynb
    """
    check_choice(fmt, FORMATS, "fmt")
    if fmt == "tf32":
        return {
            "max": float((2 - 2.0**-10) * 2.0**127),
            "tiny": 2.0**-126,
            "smallest_subnormal": 2.0**-136,
            "eps": 2.0**-10,
            "mantissa_bits": 10,
            "exponent_bits": 8,
            "bits": 19,
        }
    fi = np.finfo(np.float32) if fmt == "fp32" else ml_dtypes.finfo(_DTYPES[fmt])
    return {
        "max": float(fi.max),
        "tiny": float(fi.tiny),
        "smallest_subnormal": float(fi.smallest_subnormal),
        "eps": float(fi.eps),
        "mantissa_bits": int(fi.nmant),
        "exponent_bits": int(fi.nexp),
        "bits": int(fi.bits),
    }
