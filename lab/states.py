"""Partial softmax-attention states and their merge: the algebra that lets the keys be split anywhere.

A state over a slice of keys is $(m, l, acc)$ with $m$ the row max of the scores, $l = \\sum e^{s - m}$
and $acc = \\sum e^{s - m} v$. Two states merge exactly; the merge is associative and commutative, and the empty
state ($m = -\\infty$, $l = 0$, $acc = 0$) is its identity: a commutative monoid, so any grouping (associativity) and
any order (commutativity) agree: sequential, shuffled and tree.

Taught in: notebooks/03_one_pass_attention.ipynb, notebooks/04_merge_order.ipynb
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .rules import safe_exp_shift
from .validate import as_float_array

__all__ = ["SoftmaxState", "empty_state", "partial_state", "merge_states", "finalize"]


class SoftmaxState(NamedTuple):
    """A partial result over a slice of keys: `m`, `l` shaped `(..., N)`, `acc` shaped `(..., N, dv)`."""

    m: np.ndarray
    l: np.ndarray
    acc: np.ndarray


def empty_state(shape, dv: int, dtype=np.float64) -> SoftmaxState:
    """The identity of `merge_states`: $m = -\\infty$, $l = 0$, $acc = 0$ for rows of `shape`."""
    shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    return SoftmaxState(
        np.full(shape, -np.inf, dtype),
        np.zeros(shape, dtype),
        np.zeros(shape + (dv,), dtype),
    )


_use = safe_exp_shift  # the max to subtract: 0 where no key was seen (m = -inf), so exp(-inf - 0) = 0


def partial_state(s, v) -> SoftmaxState:
    """State of scores `s (..., N, Mb)` against values `v (..., Mb, dv)`.

    $m = \\max_j s_j$, $p = e^{s - m}$, $l = \\sum_j p_j$, $acc = p\\,v$; `-inf` scores (masked keys) allowed.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    s = as_float_array(s, "s")
    v = as_float_array(v, "v")
    if s.ndim < 2 or v.ndim < 2:
        raise ValueError(
            f"s must be (..., N, Mb) and v (..., Mb, dv), got ranks {s.ndim} and {v.ndim}"
        )
    if s.shape[-1] != v.shape[-2]:
        raise ValueError(
            f"s has {s.shape[-1]} keys on its last axis but v has {v.shape[-2]} rows"
        )
    if np.isnan(s).any() or np.isposinf(s).any():
        raise ValueError("s must not hold NaN or +inf (-inf marks a masked key)")
    if not np.isfinite(v).all():
        raise ValueError("v must be finite (no NaN or ±inf)")
    dt = np.result_type(s.dtype, v.dtype, np.float32)
    s = s.astype(dt, copy=False)
    if s.shape[-1] == 0:
        m = np.full(s.shape[:-1], -np.inf, dt)
    else:
        m = s.max(axis=-1)
    p = s - _use(m)[..., None]  # (..., N, Mb) a new array: s stays as it was
    np.exp(p, out=p)  # P = e^{S - m}, in place of the shifted scores
    return SoftmaxState(m, p.sum(axis=-1), p @ v.astype(dt, copy=False))


def merge_states(a: SoftmaxState, b: SoftmaxState) -> SoftmaxState:
    """Merge two states over disjoint key slices.

    $m = \\max(m_a, m_b)$, $l = e^{m_a - m} l_a + e^{m_b - m} l_b$, $acc = e^{m_a - m} acc_a + e^{m_b - m} acc_b$.
    When a is a running state and b one more block, $m$ is notebook 03's $m'$ and $e^{m_a - m}$ its $\\alpha$.
    Taught in: notebooks/04_merge_order.ipynb
    """
    for name, st in (("a", a), ("b", b)):
        if len(st) != 3:
            raise ValueError(f"{name} must be a SoftmaxState (m, l, acc)")
    m_a, l_a, acc_a = (np.asarray(t) for t in a)
    m_b, l_b, acc_b = (np.asarray(t) for t in b)
    for name, (m_, l_, acc_) in (("a", (m_a, l_a, acc_a)), ("b", (m_b, l_b, acc_b))):
        if l_.shape != m_.shape or acc_.ndim < 1 or acc_.shape[:-1] != m_.shape:
            raise ValueError(
                f"{name} must have m, l shaped (..., N) and acc (..., N, dv), "
                f"got {m_.shape}, {l_.shape}, {acc_.shape}"
            )
    if m_a.shape != m_b.shape or acc_a.shape != acc_b.shape:
        raise ValueError(
            f"a and b must have the same shapes, got m {m_a.shape} vs {m_b.shape}, acc {acc_a.shape} vs {acc_b.shape}"
        )
    m = np.maximum(m_a, m_b)  # (..., N)
    alpha_a = np.exp(m_a - _use(m))  # (..., N) e^{m_a - m}: 0 where a saw no key
    alpha_b = np.exp(m_b - _use(m))
    l = alpha_a * l_a + alpha_b * l_b
    dt = np.result_type(alpha_a, acc_a, alpha_b, acc_b)
    # alpha[..., None] * acc, written with einsum: the same products, without the 64 KiB buffer numpy's
    # broadcasting multiply allocates; the second product is added in place, so one (..., N, dv) temporary.
    acc = np.einsum("...,...d->...d", alpha_a, acc_a, dtype=dt)  # (..., N, dv)
    acc += np.einsum("...,...d->...d", alpha_b, acc_b, dtype=dt)
    return SoftmaxState(m, l, acc)


def finalize(state: SoftmaxState) -> tuple[np.ndarray, np.ndarray]:
    """$o = acc / l$ and $lse = m + \\log l$; rows with $l = 0$ give $o = 0$, $lse = -\\infty$.

    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    m, l, acc = (np.asarray(t) for t in state)
    seen = l > 0
    o = np.divide(acc, l[..., None], out=np.zeros_like(acc), where=seen[..., None])
    log_l = np.log(l, out=np.full_like(l, -np.inf), where=seen)
    lse = np.where(seen, m + log_l, -np.inf)
    return o, lse
