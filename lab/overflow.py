"""Where the naive softmax breaks, per dtype: exp's limits from finfo, and "works" judged by error against float64.

A ladder of evidence, each step computed rather than typed in:
  1. `exp_limits`           : $\\log(\\max)$, $\\log(\\text{smallest normal})$ and $\\log(\\text{smallest subnormal})$
                              of each dtype, and its machine epsilon, from finfo.
  2. `first_exp_overflow`   : the first integer s with exp(s) = inf when computed in that dtype.
  3. `softmax_error`        : a softmax's largest relative error per entry against the float64 softmax of the same
                              stored scores; `softmax_broken` compares it with `works_tolerance(dtype)` = 8·eps.
  4. `first_broken_score`   : the first integer largest score s, going up or down, where `softmax_naive` of a row
                              is broken by that rule (the sum can overflow before any single term; subnormal
                              exponentials lose relative precision long before they reach 0).
  4b. `break_points`        : the same edges on a fine grid of s (0.01 apart): an integer scan flatters the lower
                              edge, where some s still work by luck of the subnormal grid below the real break.
  5. `naive_vs_safe`        : both softmaxes of one row, per dtype, with their errors, for the slider.

"Works" is an error bound, not "finite and sums to about 1": at s = -17 in fp16 the naive softmax of
(s, s-1, s-2, s-3) is [1, 0, 0, 0]: finite, summing to 1, and 0.36 too large in its first entry (the true value is 0.64).

Taught in: notebooks/01_three_pass_softmax.ipynb
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from .notebook import measured
from .softmax import softmax_naive, softmax_safe
from .validate import check_choice

__all__ = [
    "SOFTMAX_DTYPES",
    "GAPS",
    "WORKS_EPS",
    "exp_limits",
    "works_tolerance",
    "first_exp_overflow",
    "score_row",
    "softmax_error",
    "softmax_broken",
    "naive_vs_safe",
    "first_broken_score",
    "break_points",
    "overflow_table",
    "overflow_rows",
]

SOFTMAX_DTYPES = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp32": np.float32,
    "fp64": np.float64,
}

# The row every experiment here uses: the largest score s, then s - 1, s - 2, s - 3.
GAPS = (0.0, 1.0, 2.0, 3.0)

# A softmax computed in a format works when every entry is within WORKS_EPS units of that format's epsilon of the
# float64 answer, relative to the entry. With a correctly rounded exp each step (exp, sum, divide) rounds by at most
# eps/2, about 3·eps in all; a library's exp is not correctly rounded and adds a few ulp (numpy's float32 exp, a
# little over 3·eps at worst here). 8·eps leaves room for another CPU's exp and summation order, and still catches a
# subnormal exponential (which keeps fewer bits).
WORKS_EPS = 8


def _dtype(dtype):
    if isinstance(dtype, str):
        return SOFTMAX_DTYPES[check_choice(dtype, SOFTMAX_DTYPES, "dtype")]
    dt = np.dtype(dtype)
    if dt not in {np.dtype(v) for v in SOFTMAX_DTYPES.values()}:
        raise ValueError(
            f"dtype must be one of {list(SOFTMAX_DTYPES)} (or their numpy dtypes), got {dtype!r}"
        )
    return dt.type


def _finfo(dtype):
    dt = _dtype(dtype)
    return ml_dtypes.finfo(dt) if dt is ml_dtypes.bfloat16 else np.finfo(dt)


def exp_limits(dtype: str) -> dict:
    """$\\log(\\max)$, $\\log(\\text{smallest normal})$, $\\log(\\text{smallest subnormal})$ and eps of `dtype`, from its finfo.

    $e^s$ is finite while $s < \\log(\\max)$, keeps the format's full precision while $s \\ge \\log(\\text{smallest
    normal})$, and is nonzero while $s > \\log(\\text{smallest subnormal})$ (roughly: rounding decides the last step).
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    fi = _finfo(dtype)
    return {
        "dtype": dtype,
        "max": float(fi.max),
        "log_max": float(np.log(float(fi.max))),
        "eps": float(fi.eps),
        "smallest_normal": float(fi.smallest_normal),
        "log_normal": float(np.log(float(fi.smallest_normal))),
        "smallest_subnormal": float(fi.smallest_subnormal),
        "log_smallest": float(np.log(float(fi.smallest_subnormal))),
    }


def works_tolerance(dtype) -> float:
    """The largest relative error per entry at which a softmax in `dtype` still works: `WORKS_EPS` · eps of the format.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    return WORKS_EPS * float(_finfo(dtype).eps)


def first_exp_overflow(dtype: str, limit: int = 2000) -> int:
    """The smallest integer $s \\ge 0$ with $e^s = \\infty$ when exp is computed in `dtype` (scanned, not derived).

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    s = np.arange(0, limit + 1)  # (limit + 1,)
    with np.errstate(over="ignore"):
        e = np.exp(s.astype(_dtype(dtype)))  # (limit + 1,) in dtype
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
        raise ValueError(
            "gaps must be a non-empty 1-D sequence of values >= 0 that contains 0"
        )
    return (s[..., None] - gaps).astype(_dtype(dtype))  # (..., n)


def softmax_error(p, ref) -> np.ndarray:
    """Per row, $\\max_i |p_i - r_i| / r_i$: the largest relative error of softmax output `p (..., n)` against `ref`.

    `ref` is the float64 softmax of the same stored scores. An entry with $r_i = 0$ (a masked score) counts as exact
    when $p_i = 0$ and as infinitely wrong otherwise; a NaN or inf in `p` makes the row's error inf.
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    p = np.asarray(p).astype(np.float64)  # (..., n)
    ref = np.asarray(ref, dtype=np.float64)  # (..., n)
    if p.shape != ref.shape:
        raise ValueError(
            f"p and ref must have the same shape, got {p.shape} and {ref.shape}"
        )
    pos = ref > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(
            pos,
            np.abs(p - ref) / np.where(pos, ref, 1.0),
            np.where(p == 0, 0.0, np.inf),
        )
    err = np.where(np.isfinite(p), err, np.inf)
    return err.max(axis=-1)


def softmax_broken(p, ref, dtype=None) -> np.ndarray:
    """True for each row of `p (..., n)` whose `softmax_error` against `ref` exceeds `works_tolerance(dtype)`.

    `dtype` is the format the softmax was computed in (default: `p`'s own dtype).
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    tol = works_tolerance(np.asarray(p).dtype if dtype is None else dtype)
    return ~(softmax_error(p, ref) <= tol)


def _reference(x) -> np.ndarray:
    """The float64 softmax of the scores as stored in their format: it measures the softmax, not the rounding of x."""
    return softmax_safe(np.asarray(x).astype(np.float64))


def naive_vs_safe(s: float, dtypes=tuple(SOFTMAX_DTYPES), gaps=GAPS) -> dict:
    """Per dtype: `softmax_naive` and `softmax_safe` of `score_row(s)` (as float64), their errors and whether each is broken.

    `naive_err` and `safe_err` are `softmax_error` against the float64 softmax of the stored row; `tol` is
    `works_tolerance(dtype)`, and a softmax is broken when its error exceeds it.
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    out = {}
    for name in dtypes:
        x = score_row(s, name, gaps)  # (n,) in the dtype
        ref = _reference(x)  # (n,) float64
        naive = softmax_naive(x).astype(np.float64)
        safe = softmax_safe(x).astype(np.float64)
        naive_err, safe_err = (
            float(softmax_error(naive, ref)),
            float(softmax_error(safe, ref)),
        )
        tol = works_tolerance(name)
        out[name] = {
            "naive": naive,
            "safe": safe,
            "ref": ref,
            "tol": tol,
            "naive_err": naive_err,
            "safe_err": safe_err,
            "naive_broken": not naive_err <= tol,
            "safe_broken": not safe_err <= tol,
        }
    return out


def first_broken_score(
    dtype: str, gaps=GAPS, direction: int = +1, limit: int = 2000
) -> int:
    """The first integer largest score s (counting up from 0, or down when `direction=-1`) where the naive softmax breaks.

    Broken: an entry off by more than `works_tolerance(dtype)` relative to the float64 softmax of the same stored row
    (NaN and inf included). Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    s = direction * np.arange(0, limit + 1)  # (limit + 1,)
    x = score_row(s, dtype, gaps)  # (limit + 1, n) in the dtype
    hit = np.flatnonzero(softmax_broken(softmax_naive(x), _reference(x), dtype))
    if hit.size == 0:
        raise ValueError(
            f"the naive softmax did not break in {dtype} for |s| <= limit={limit}"
        )
    return int(s[hit[0]])


@functools.lru_cache(maxsize=32)
def _break_points(dtype: str, gaps: tuple, step: float, limit: float) -> dict:
    k = int(round(limit / step))
    out = {}
    for key, direction in (("above", +1), ("below", -1)):
        s = np.round(direction * np.arange(0, k + 1) * step, 10)  # (k + 1,)
        x = score_row(s, dtype, gaps)  # (k + 1, n) in the dtype
        broken = softmax_broken(softmax_naive(x), _reference(x), dtype)  # (k + 1,)
        if not broken.any():
            raise ValueError(
                f"the naive softmax did not break in {dtype} for |s| <= limit={limit}"
            )
        first = int(np.argmax(broken))
        out[key] = float(s[first])
        if direction < 0:
            works = np.flatnonzero(~broken[first:]) + first  # below the edge, by luck
            last = int(works.max()) if works.size else first - 1
            out["lowest_working"] = float(s[last])
            between = broken[first : last + 1]  # empty when none works below the edge
            out["share_broken"] = float(between.mean()) if between.size else 1.0
    return out


def break_points(
    dtype: str, gaps=GAPS, step: float = 0.01, limit: float = 800.0
) -> dict:
    """Where the naive softmax of `score_row(s)` breaks, scanned on a grid of s `step` apart (not only integers).

    `above`: the first broken s counting up from 0 (the sum overflows); `below`: the first broken s counting down,
    the lower edge that holds for every s above it (just above $\\log(\\text{smallest normal})$); `lowest_working`:
    the lowest s that still works, by luck of the subnormal grid; `share_broken`: the share of the grid's s from
    `below` down to `lowest_working` that are broken. Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    if not step > 0 or not limit > step:
        raise ValueError(f"step must be > 0 and limit > step, got {step=}, {limit=}")
    name = dtype if isinstance(dtype, str) else np.dtype(_dtype(dtype)).name
    _dtype(dtype)  # a clear error for an unknown format
    gaps = tuple(float(g) for g in np.atleast_1d(gaps))
    return dict(_break_points(name, gaps, float(step), float(limit)))


def overflow_table(dtypes=tuple(SOFTMAX_DTYPES), gaps=GAPS) -> list[dict]:
    """One row per dtype: `exp_limits`, `works_tolerance`, `first_exp_overflow`, and where the naive softmax breaks above and below.

    `naive_breaks_above`/`below` are the first broken integers; `breaks_above`, `breaks_below`, `lowest_working` the
    `break_points` of a grid 0.01 apart.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    rows = []
    for name in dtypes:
        row = exp_limits(name)
        row["tol"] = works_tolerance(name)
        row["first_exp_inf"] = first_exp_overflow(name)
        row["naive_breaks_above"] = first_broken_score(name, gaps, +1)
        row["naive_breaks_below"] = first_broken_score(name, gaps, -1)
        fine = break_points(name, gaps)
        row["breaks_above"], row["breaks_below"] = fine["above"], fine["below"]
        row["lowest_working"] = fine["lowest_working"]
        rows.append(row)
    return rows


def overflow_rows() -> list[dict]:
    """`overflow_table`'s rows laid out for `lab.format_table`: eps, log Ω, the first broken s going up, log(smallest
    normal), the first broken s going down, the lowest s that still works by luck, and log(smallest subnormal), for
    the row (s, s-1, s-2, s-3) on a grid of s 0.01 apart. The scanned edges go through `lab.measured`: near an edge
    the verdict turns on the last bit of the library's exp, which differs by CPU. Taught in: notebooks/01_three_pass_softmax.ipynb"""
    return [
        {
            "dtype": r["dtype"],
            "eps": f"{r['eps']:.1e}",
            "log Ω": f"{r['log_max']:.2f}",
            "1st break up": measured(r["breaks_above"], ".2f"),
            "log(normal)": f"{r['log_normal']:.2f}",
            "1st break down": measured(r["breaks_below"], ".2f"),
            "lowest working": measured(r["lowest_working"], ".2f"),
            "log(subnormal)": f"{r['log_smallest']:.2f}",
        }
        for r in overflow_table()
    ]
