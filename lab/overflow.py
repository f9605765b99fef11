"""Where the naive softmax breaks, per dtype: exp's overflow and underflow thresholds, measured.

A ladder of evidence, each step computed rather than typed in:
  1. `exp_limits`           : $\\log(\\max)$ and $\\log(\\text{smallest subnormal})$ of each dtype, from finfo.
  2. `first_exp_overflow`   : the first integer s with exp(s) = inf when computed in that dtype.
  3. `first_broken_score`   : the first integer largest score s where `softmax_naive` of a row gives
                              NaN/inf or sums far from 1 (the sum can overflow before any single term).
  4. `naive_vs_safe`        : both softmaxes of one row, per dtype, for the slider.

Taught in: notebooks/01_three_pass_softmax.ipynb
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ._checks import check_choice
from .softmax import softmax_naive, softmax_safe

__all__ = ["SOFTMAX_DTYPES", "GAPS", "exp_limits", "first_exp_overflow", "score_row", "softmax_broken",
           "naive_vs_safe", "first_broken_score", "overflow_table"]

SOFTMAX_DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32, "fp64": np.float64}

# The row every experiment here uses: the largest score s, then s - 1, s - 2, s - 3.
GAPS = (0.0, 1.0, 2.0, 3.0)

_BROKEN_SUM = 0.1   # a softmax whose entries sum to 1 ± more than this is broken, not rounded


def _dtype(dtype: str):
    return SOFTMAX_DTYPES[check_choice(dtype, SOFTMAX_DTYPES, "dtype")]


def _finfo(dtype: str):
    dt = _dtype(dtype)
    return ml_dtypes.finfo(dt) if dt is ml_dtypes.bfloat16 else np.finfo(dt)


def exp_limits(dtype: str) -> dict:
    """$s_{over} = \\log(\\max)$ and $s_{under} = \\log(\\text{smallest subnormal})$: exp(s) is finite and nonzero between them.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    fi = _finfo(dtype)
    return {"dtype": dtype, "max": float(fi.max), "log_max": float(np.log(float(fi.max))),
            "smallest_subnormal": float(fi.smallest_subnormal),
            "log_smallest": float(np.log(float(fi.smallest_subnormal)))}


def first_exp_overflow(dtype: str, limit: int = 2000) -> int:
    """The smallest integer $s \\ge 0$ with $e^s = \\infty$ when exp is computed in `dtype` (scanned, not derived).

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    s = np.arange(0, limit + 1)                                      # (limit + 1,)
    with np.errstate(over="ignore"):
        e = np.exp(s.astype(_dtype(dtype)))                          # (limit + 1,) in dtype
    hit = np.flatnonzero(np.isinf(e.astype(np.float64)))
    if hit.size == 0:
        raise ValueError(f"exp did not overflow in {dtype} for s <= limit={limit}")
    return int(s[hit[0]])


def score_row(s, dtype: str = "fp64", gaps=GAPS) -> np.ndarray:
    """The row $x = (s - g_0, s - g_1, \\dots)$ in `dtype`; `s` may be an array of largest scores (one row each).

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    s = np.asarray(s, dtype=np.float64)
    if not np.isfinite(s).all():
        raise ValueError("s must be finite")
    gaps = np.asarray(gaps, dtype=np.float64)
    if gaps.ndim != 1 or gaps.size == 0 or (gaps < 0).any() or gaps.min() != 0:
        raise ValueError("gaps must be a non-empty 1-D sequence of values >= 0 that contains 0")
    return (s[..., None] - gaps).astype(_dtype(dtype))               # (..., n)


def softmax_broken(p) -> np.ndarray:
    """True for each row of softmax output `p (..., n)` that is not a distribution: a NaN/inf entry, or $|\\sum_i p_i - 1| > 0.1$.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    p = np.asarray(p).astype(np.float64)                             # (..., n)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(p).all(axis=-1) | ~(np.abs(p.sum(axis=-1) - 1.0) <= _BROKEN_SUM)


def naive_vs_safe(s: float, dtypes=tuple(SOFTMAX_DTYPES), gaps=GAPS) -> dict:
    """Per dtype: `softmax_naive` and `softmax_safe` of `score_row(s)` (as float64) and whether each is broken.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    out = {}
    ref = softmax_safe(score_row(s, "fp64", gaps))
    for name in dtypes:
        x = score_row(s, name, gaps)                                 # (n,) in the dtype
        naive = softmax_naive(x).astype(np.float64)
        safe = softmax_safe(x).astype(np.float64)
        out[name] = {"naive": naive, "safe": safe,
                     "naive_broken": bool(softmax_broken(naive)), "safe_broken": bool(softmax_broken(safe)),
                     "safe_err": float(np.abs(safe - ref).max())}
    return out


def first_broken_score(dtype: str, gaps=GAPS, direction: int = +1, limit: int = 2000) -> int:
    """The first integer largest score s (counting up from 0, or down when `direction=-1`) where the naive softmax breaks.

    Broken means a NaN/inf entry or entries summing to 1 ± more than 0.1. Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    s = direction * np.arange(0, limit + 1)                          # (limit + 1,)
    p = softmax_naive(score_row(s, dtype, gaps))                     # (limit + 1, n)
    hit = np.flatnonzero(softmax_broken(p))
    if hit.size == 0:
        raise ValueError(f"the naive softmax did not break in {dtype} for |s| <= limit={limit}")
    return int(s[hit[0]])


def overflow_table(dtypes=tuple(SOFTMAX_DTYPES), gaps=GAPS) -> list[dict]:
    """One row per dtype: `exp_limits`, `first_exp_overflow`, and where the naive softmax breaks above and below.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    rows = []
    for name in dtypes:
        row = exp_limits(name)
        row["first_exp_inf"] = first_exp_overflow(name)
        row["naive_breaks_above"] = first_broken_score(name, gaps, +1)
        row["naive_breaks_below"] = first_broken_score(name, gaps, -1)
        rows.append(row)
    return rows
