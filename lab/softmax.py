"""Softmax three ways, from the one that overflows to the one that streams.

A ladder, each rung removing one thing the previous needed:
  1. `softmax_naive`  : exp(x) / sum(exp(x)); overflows once exp(x) exceeds the dtype's max.
  2. `softmax_safe`   : subtract m = max(x) first; three passes (max, sum, normalize).
  3. `softmax_online` : one pass keeps a running (m, l) over blocks, fixing l by α = e^(m − m′)
                        whenever the max grows from m to m′ (code: `alpha = exp(m - m_new)`); a second pass normalizes. No pass needs the whole max first.

Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .rules import safe_exp_shift
from .validate import as_float_array, check_axis, check_block

__all__ = ["softmax_naive", "softmax_safe", "softmax_online", "online_normalizer"]


# Floating types numpy's own dtype tree does not list (np.issubdtype(bfloat16, np.floating) is False).
_ML_FLOATS = (np.dtype(ml_dtypes.bfloat16),)


def _float_array(x, name: str = "x") -> np.ndarray:
    """`x` as a floating array: numpy's float types, or bfloat16 from ml_dtypes."""
    a = np.asarray(x)
    return a if a.dtype in _ML_FLOATS else as_float_array(a, name)


def _rows(x, axis: int) -> tuple[np.ndarray, int]:
    """Checked float array and normalized axis."""
    a = _float_array(x, "x")
    if np.isnan(a).any() or np.isposinf(a).any():
        raise ValueError(
            "x must not hold NaN or +inf (-inf, a masked entry, is allowed)"
        )
    return a, check_axis(a, axis)


def _work_dtype(a: np.ndarray) -> np.dtype:
    return np.result_type(a.dtype, np.float32)


def softmax_naive(x, axis: int = -1) -> np.ndarray:
    """$\\mathrm{softmax}(x)_i = e^{x_i} / \\sum_j e^{x_j}$ in the dtype of `x`, no max subtracted.

    Overflows on purpose once e^{x_i} exceeds the dtype's largest finite value (inf / inf = nan).
    Accepts bfloat16 (ml_dtypes) as well as numpy's float types.
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    a = _float_array(x, "x")
    axis = check_axis(a, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(a)
        return e / e.sum(axis=axis, keepdims=True, dtype=a.dtype)


def softmax_safe(x, axis: int = -1) -> np.ndarray:
    """$m = \\max_j x_j$, $l = \\sum_j e^{x_j - m}$, $\\mathrm{softmax}(x)_i = e^{x_i - m} / l$ (three passes).

    A row of only -inf (all masked) gives zeros. Accumulates in float32 at least; returns x's dtype.
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    a, axis = _rows(x, axis)
    w = a.astype(_work_dtype(a), copy=False)
    m = w.max(axis=axis, keepdims=True)  # pass 1: the max
    m = safe_exp_shift(m)  # all-masked rows: exp(-inf - 0) = 0
    e = np.exp(w - m)
    l = e.sum(axis=axis, keepdims=True)  # pass 2: the normalizer
    out = np.divide(e, l, out=np.zeros_like(e), where=l > 0)  # pass 3: normalize
    return out.astype(a.dtype, copy=False)


def online_normalizer(x, block: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """One pass over blocks of `block` elements keeping $(m, l)$ with $l = \\sum_j e^{x_j - m}$.

    For each block b: $m' = \\max(m, \\max b)$, $l \\leftarrow l\\,e^{m - m'} + \\sum_{j \\in b} e^{x_j - m'}$.
    Returns `(m, l)` shaped like `x` without `axis` (float32 at least).
    Taught in: notebooks/02_online_softmax.ipynb
    """
    a, axis = _rows(x, axis)
    block = check_block(block, "block")
    w = np.moveaxis(a, axis, -1).astype(_work_dtype(a), copy=False)
    m = np.full(w.shape[:-1], -np.inf, dtype=w.dtype)
    l = np.zeros(w.shape[:-1], dtype=w.dtype)
    for j0 in range(0, w.shape[-1], block):
        x_b = w[..., j0 : j0 + block]
        m_new = np.maximum(m, x_b.max(axis=-1))
        m_use = safe_exp_shift(m_new)  # nothing seen yet: keep l = 0
        alpha = np.exp(m - m_use)  # α = e^(m − m′)
        l = l * alpha + np.exp(x_b - m_use[..., None]).sum(axis=-1)
        m = m_new
    return m, l


def softmax_online(x, block: int, axis: int = -1) -> np.ndarray:
    """Two passes: `online_normalizer` gives $(m, l)$, then $\\mathrm{softmax}(x)_i = e^{x_i - m} / l$.

    Taught in: notebooks/02_online_softmax.ipynb
    """
    a, axis = _rows(x, axis)
    m, l = online_normalizer(a, block, axis)
    w = np.moveaxis(a, axis, -1).astype(m.dtype, copy=False)
    m_use = safe_exp_shift(m)[..., None]
    e = np.exp(w - m_use)
    out = np.divide(e, l[..., None], out=np.zeros_like(e), where=l[..., None] > 0)
    return np.moveaxis(out, -1, axis).astype(a.dtype, copy=False)
