"""One query's attention three ways, then all queries at once: the whole mathematics of FlashAttention.

A ladder for one query row `q (d,)` against keys `k (M, d)` and values `v (M, dv)`:
  1. `attention_row_three_pass` : write the score row s (M numbers), then read it three times: its max m,
     its normalizer l = Σ exp(s - m), and o = Σ exp(s - m) v / l. K and V are read once each.
  2. `attention_row_two_pass`   : no score row: a first pass over K blocks keeps the running (m, l),
     a second pass recomputes each block's scores and adds exp(s - m) v / l. K is read twice.
  3. `attention_row_one_pass`   : V folded into the first pass: the state (m, l, acc) is rescaled by
     alpha = exp(m_old - m_new) whenever m grows, and o = acc / l at the end. K and V are read once each
     and nothing of length M is ever held.
  4. `one_pass_attention`       : rung 3 for every query row at once (a state per row), written as a merge
     of one partial state per key block. Tiling the queries too is the rest (notebooks 05-06).

Each row function reports into `lab.trace` (bytes of k, v, s read and written) and returns a `RowRun`
that also carries the passes over K and V and the peak bytes it held, counted during the run.

Taught in: notebooks/03_one_pass_attention.ipynb
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import trace
from ._checks import acc_dtype, as_float_array, check_block, check_finite, check_qkv, check_scale, group_view, ungroup_view
from .kernels import causal_mask
from .states import SoftmaxState, empty_state, finalize, merge_states, partial_state

__all__ = ["RowRun", "ROW_METHODS", "attention_row_three_pass", "attention_row_two_pass",
           "attention_row_one_pass", "compare_row_methods", "one_pass_attention"]


class RowRun(NamedTuple):
    """One row's result and what the run did: `o (dv,)`, `lse`, passes over K and V, bytes held, score-row bytes, per-block steps.

    Taught in: notebooks/03_one_pass_attention.ipynb
    """

    o: np.ndarray
    lse: float
    passes_k: float
    passes_v: float
    held_bytes: int
    s_writes: int
    s_reads: int
    steps: list


def _row_inputs(q, k, v, scale):
    """Checked `q (d,)`, `k (M, d)`, `v (M, dv)`, the scale and the accumulator dtype; all before any work."""
    q = as_float_array(q, "q")
    k = as_float_array(k, "k")
    v = as_float_array(v, "v")
    if q.ndim != 1:
        raise ValueError(f"q must be one query row of shape (d,), got shape {q.shape}")
    if k.ndim != 2 or v.ndim != 2:
        raise ValueError(f"k must be (M, d) and v (M, dv), got shapes {k.shape} and {v.shape}")
    if k.shape[1] != q.shape[0]:
        raise ValueError(f"q and k must share d, got q {q.shape} and k {k.shape}")
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"k and v must have the same number of keys M, got {k.shape[0]} and {v.shape[0]}")
    if q.shape[0] < 1 or v.shape[1] < 1:
        raise ValueError("q, k and v need a last dim of at least 1")
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_finite(a, name)
    return q, k, v, check_scale(scale, q.shape[0]), acc_dtype(q, k, v)


class _Held:
    """Peak bytes of the working arrays a run keeps alive (inputs and the output excluded)."""

    def __init__(self):
        self.peak = 0

    def now(self, *arrays) -> None:
        self.peak = max(self.peak, sum(trace.nbytes(np.asarray(a)) for a in arrays))


def _finish(acc, l, m, dt, out_dtype, rec, k, v, held, steps) -> RowRun:
    o, lse = finalize(SoftmaxState(np.asarray(m, dt), np.asarray(l, dt), acc))
    kb, vb = max(trace.nbytes(k), 1), max(trace.nbytes(v), 1)
    return RowRun(o.astype(out_dtype, copy=False), float(lse), rec.read_by["k"] / kb, rec.read_by["v"] / vb,
                  held.peak, rec.write_by["s"], rec.read_by["s"], steps)


def attention_row_three_pass(q, k, v, *, scale=None) -> RowRun:
    """Store the score row $s = \\mathrm{scale}\\,K q$, then $m = \\max s$, $l = \\sum e^{s - m}$, $o = \\sum_j e^{s_j - m} v_j / l$.

    The row s (M numbers) is written once and read three times; K and V are read once.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    q, k, v, scale, dt = _row_inputs(q, k, v, scale)
    held = _Held()
    with trace.record() as rec:
        trace.read("q", trace.nbytes(q))
        trace.read("k", trace.nbytes(k))
        s = (k.astype(dt) @ q.astype(dt)) * dt.type(scale)     # (M,) the stored score row
        trace.write("s", trace.nbytes(s))
        trace.ops("mul", s.size * q.size)
        trace.read("s", trace.nbytes(s))                      # pass 1: the max
        m = s.max() if s.size else dt.type(-np.inf)
        m_use = 0.0 if np.isneginf(m) else m
        trace.read("s", trace.nbytes(s))                      # pass 2: the normalizer
        l = np.exp(s - m_use).sum(dtype=dt)
        trace.read("s", trace.nbytes(s))                      # pass 3: weights times V
        trace.read("v", trace.nbytes(v))
        p = np.exp(s - m_use)                                 # (M,)
        acc = p @ v.astype(dt)                                # (dv,)
        trace.ops("exp", 2 * s.size)
        held.now(s, p, acc)
        return _finish(acc, l, m, dt, np.result_type(q, k, v), rec, k, v, held, [])


def _blocks(M: int, Bc: int):
    return [(j0, min(j0 + Bc, M)) for j0 in range(0, M, Bc)]


def attention_row_two_pass(q, k, v, *, block_k: int = 256, scale=None) -> RowRun:
    """Pass 1 over K blocks: $m' = \\max(m, \\max s_b)$, $l \\leftarrow e^{m - m'} l + \\sum e^{s_b - m'}$; pass 2: $o = \\sum_b e^{s_b - m} V_b / l$.

    No score row is stored; each block's scores are recomputed in pass 2, so K is read twice.
    `steps` lists pass 1 per block: block max, new m, alpha, l.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    Bc = check_block(block_k, "block_k")
    q, k, v, scale, dt = _row_inputs(q, k, v, scale)
    held = _Held()
    q_s = q.astype(dt) * dt.type(scale)                       # (d,)
    steps = []
    with trace.record() as rec:
        trace.read("q", trace.nbytes(q))
        m, l = dt.type(-np.inf), dt.type(0.0)
        for b, (j0, j1) in enumerate(_blocks(k.shape[0], Bc)):   # pass 1: (m, l) only
            k_b = k[j0:j1]
            trace.read("k", trace.nbytes(k_b))
            s_b = k_b.astype(dt) @ q_s                        # (Bc,)
            m_new = max(m, s_b.max())
            alpha = np.exp(m - m_new)                         # α = exp(m_old - m_new)
            l = alpha * l + np.exp(s_b - m_new).sum(dtype=dt)
            trace.ops("exp", s_b.size + 1)
            steps.append({"block": b, "block_max": float(s_b.max()), "m": float(m_new), "alpha": float(alpha), "l": float(l)})
            m = m_new
            held.now(s_b, m, l)
        acc = np.zeros(v.shape[1], dt)                        # (dv,)
        for j0, j1 in _blocks(k.shape[0], Bc):                 # pass 2: K again, and V
            k_b, v_b = k[j0:j1], v[j0:j1]
            trace.read("k", trace.nbytes(k_b))
            trace.read("v", trace.nbytes(v_b))
            s_b = k_b.astype(dt) @ q_s                        # (Bc,) recomputed
            s_b -= m
            acc += np.exp(s_b, out=s_b) @ v_b.astype(dt)
            trace.ops("exp", s_b.size)
            held.now(s_b, m, l, acc)
        return _finish(acc, l, m, dt, np.result_type(q, k, v), rec, k, v, held, steps)


def attention_row_one_pass(q, k, v, *, block_k: int = 256, scale=None) -> RowRun:
    """One pass with state $(m, l, acc)$: $m' = \\max(m, \\max s_b)$, $\\alpha = e^{m - m'}$, $l \\leftarrow \\alpha l + \\sum e^{s_b - m'}$, $acc \\leftarrow \\alpha\\,acc + e^{s_b - m'} V_b$; $o = acc / l$.

    K and V are read once, block by block; nothing of length M is held. `steps` lists each block:
    block max, new m, alpha, l.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    Bc = check_block(block_k, "block_k")
    q, k, v, scale, dt = _row_inputs(q, k, v, scale)
    held = _Held()
    q_s = q.astype(dt) * dt.type(scale)                       # (d,)
    steps = []
    with trace.record() as rec:
        trace.read("q", trace.nbytes(q))
        m, l = dt.type(-np.inf), dt.type(0.0)
        acc = np.zeros(v.shape[1], dt)                        # (dv,)
        for b, (j0, j1) in enumerate(_blocks(k.shape[0], Bc)):
            k_b, v_b = k[j0:j1], v[j0:j1]
            trace.read("k", trace.nbytes(k_b))
            trace.read("v", trace.nbytes(v_b))
            s_b = k_b.astype(dt) @ q_s                        # (Bc,)
            block_max = s_b.max()
            m_new = max(m, block_max)
            alpha = np.exp(m - m_new)                         # α = exp(m_old - m_new)
            s_b -= m_new
            p_b = np.exp(s_b, out=s_b)                        # (Bc,) exp(s_b - m_new), in place of s_b
            l = alpha * l + p_b.sum(dtype=dt)
            acc = alpha * acc + p_b @ v_b.astype(dt)          # (dv,)
            trace.ops("exp", p_b.size + 1)
            steps.append({"block": b, "block_max": float(block_max), "m": float(m_new), "alpha": float(alpha), "l": float(l)})
            m = m_new
            held.now(p_b, m, l, acc)
        return _finish(acc, l, m, dt, np.result_type(q, k, v), rec, k, v, held, steps)


ROW_METHODS = {
    "three-pass (store s)": attention_row_three_pass,
    "two-pass (online m, l)": attention_row_two_pass,
    "one-pass (m, l, acc)": attention_row_one_pass,
}


def compare_row_methods(q, k, v, *, block_k: int = 256, scale=None) -> list[dict]:
    """Run the three row methods on one query and tabulate what each read, wrote and held, and $\\max|o - o_{ref}|$.

    The reference is `attention_reference` in float64. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    from .kernels import attention_reference

    check_block(block_k, "block_k")
    q, k, v, scale, _ = _row_inputs(q, k, v, scale)
    ref, _ = attention_reference(q[None, :], k, v, scale=scale)  # (1, dv)
    rows = []
    for name, fn in ROW_METHODS.items():
        kw = {} if fn is attention_row_three_pass else {"block_k": block_k}
        with trace.record() as rec:
            run = fn(q, k, v, scale=scale, **kw)
        rows.append({
            "method": name,
            "passes over K": run.passes_k,
            "passes over V": run.passes_v,
            "s written (B)": run.s_writes,
            "s read (B)": run.s_reads,
            "held (B)": run.held_bytes,
            "exp calls": rec.op_counts["exp"],
            "max |o - ref|": float(np.abs(run.o - ref[0]).max()) if run.o.size else 0.0,
        })
    return rows



def one_pass_attention(q, k, v, *, block_k: int = 64, causal: bool = False, scale=None):
    """All query rows at once, one pass over key blocks: $(m, l, acc) \\leftarrow \\mathrm{merge}((m, l, acc), \\mathrm{state}(S_{:,b}, V_b))$; returns `(o, lse)`.

    Every query keeps its own state; each key block's partial state (`partial_state`) is merged in
    (`merge_states`), and `finalize` gives $o = acc / l$, $lse = m + \\log l$. The same shapes, GQA and
    causal rule as `attention_reference`. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    Bc = check_block(block_k, "block_k")
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    dt = acc_dtype(q, k, v)
    q5, k5, v5 = group_view(q.astype(dt) * dt.type(scale), k.astype(dt, copy=False), v.astype(dt, copy=False), group)
    N, M, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    lead = np.broadcast_shapes(q5.shape[:-2], k5.shape[:-2])
    state = empty_state(lead + (N,), dv, dt)                  # m, l: (..., N); acc: (..., N, dv)
    for j0, j1 in _blocks(M, Bc):
        k_b, v_b = k5[..., j0:j1, :], v5[..., j0:j1, :]
        trace.read("k", trace.nbytes(k_b))
        trace.read("v", trace.nbytes(v_b))
        s_b = q5 @ np.swapaxes(k_b, -1, -2)                   # (..., N, Bc)
        if causal:
            s_b = np.where(causal_mask(N, M, cols=np.arange(j0, j1)), s_b, -np.inf)
        state = merge_states(state, partial_state(s_b, v_b))
    o, lse = finalize(state)
    trace.write("o", trace.nbytes(o))
    trace.write("lse", trace.nbytes(lse))
    return ungroup_view(o, q.shape, (dv,)).astype(np.result_type(q, k, v), copy=False), ungroup_view(lse, q.shape, ())
