"""One query's attention three ways, then all queries at once: the whole mathematics of FlashAttention.

A ladder for one query row `q (d,)` against keys `k (M, d)` and values `v (M, dv)`:
  1. `attention_row_three_pass` : write the score row s (M numbers), then read it three times: its max m,
     its normalizer l = Σ exp(s - m), and o = Σ exp(s - m) v / l. K and V are read once each.
  2. `attention_row_two_pass`   : no score row: a first pass over K blocks keeps the running (m, l),
     a second pass recomputes each block's scores and adds exp(s - m) v / l. K is read twice.
  3. `attention_row_one_pass`   : V folded into the first pass: the state (m, l, acc) goes to (m', l', acc')
     with alpha = exp(m - m') whenever the max grows, and o = acc / l at the end. K and V are read once
     each and nothing of length M is ever held.
  4. `one_pass_attention`       : rung 3 for every query row at once (a state per row), written as a merge
     of the running state a with one block's state b. Tiling the queries too is the rest (notebooks 05-06).

What is measured and what is declared. Every function reaches K, V (and the three-pass method its score
row s) only through a `SlowRows`, which counts the rows of every slice it hands out or takes in and
reports the bytes to `lab.trace`: passes over K and V and the score row's traffic are counts of the slices
actually taken. Exponentials are counted where `np.exp` is called, by the size of its argument. The peak
bytes a row method holds (`RowRun.held_bytes`) are declared: the sum of the sizes of the working arrays
it keeps alive, added up at each step. `one_pass_buffers` is the analytic count of what
`one_pass_attention` holds, to set against `lab.peak_bytes` (tracemalloc).

Taught in: notebooks/03_one_pass_attention.ipynb
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import trace
from .kernels import causal_mask
from .rules import safe_exp_shift
from .states import SoftmaxState, empty_state, finalize, merge_states, partial_state
from .validate import (
    acc_dtype,
    as_float_array,
    check_block,
    check_finite,
    check_positive,
    check_qkv,
    check_scale,
    group_view,
    ungroup_view,
)

__all__ = [
    "SlowRows",
    "RowRun",
    "ROW_METHODS",
    "attention_row_three_pass",
    "attention_row_two_pass",
    "attention_row_one_pass",
    "compare_row_methods",
    "one_pass_attention",
    "one_pass_buffers",
]


class SlowRows:
    """An array in slow memory (HBM), used only in slices of rows: `load(j0, j1)` hands out rows j0..j1-1 and counts them.

    Rows lie along axis -2 (axis 0 of a 1-D array); `load` returns a view, no copy. `loads[j]` and
    `stores[j]` count the loads and stores of row j; `largest` is the most rows one load handed out;
    each load and store also reports its bytes to `lab.trace` under `name`. `passes` is rows loaded /
    rows: 1.0 for one pass.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """

    def __init__(self, a: np.ndarray, name: str):
        self._a, self.name = a, name
        self._axis = 0 if a.ndim == 1 else a.ndim - 2
        n = a.shape[self._axis]
        self.loads = np.zeros(n, np.int64)
        self.largest = 0  # the most rows handed out by one load
        self._stores = None  # made by the first store: K and V are never written

    @property
    def stores(self) -> np.ndarray:
        """Stores of each row (zeros when nothing was stored)."""
        return np.zeros_like(self.loads) if self._stores is None else self._stores

    @property
    def shape(self) -> tuple:
        """The array's shape; reads nothing."""
        return self._a.shape

    @property
    def passes(self) -> float:
        """Rows loaded divided by rows: how many times the array was read, on average."""
        return float(self.loads.sum()) / max(len(self.loads), 1)

    def _rows(self, j0: int, j1: int):
        return (
            (slice(j0, j1),)
            if self._axis == 0
            else (Ellipsis, slice(j0, j1), slice(None))
        )

    def load(self, j0: int, j1: int) -> np.ndarray:
        """Rows j0..j1-1 (a view), counted once each."""
        block = self._a[self._rows(j0, j1)]
        self.loads[j0:j1] += 1
        self.largest = max(self.largest, block.shape[self._axis])
        trace.read(self.name, trace.nbytes(block))
        return block

    def store(self, j0: int, j1: int, values) -> None:
        """Write `values` into rows j0..j1-1, counted once each."""
        self._a[self._rows(j0, j1)] = values
        if self._stores is None:
            self._stores = np.zeros_like(self.loads)
        self._stores[j0:j1] += 1
        trace.write(self.name, trace.nbytes(self._a[self._rows(j0, j1)]))


def _exp(x, out=None):
    """`np.exp`, counted in `lab.trace` by the number of values it exponentiates."""
    trace.ops("exp", np.size(x))
    return np.exp(x, out=out)


class RowRun(NamedTuple):
    """One row's result and what the run did: `o (dv,)`, `lse`, passes over K and V, bytes held, score-row bytes, per-block steps.

    Passes and score-row bytes are counted by `SlowRows`; `held_bytes` is declared (the working arrays' sizes, added up).
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


def _slow(x, name: str) -> SlowRows:
    """`x` itself when the caller handed in a `SlowRows` (its counts are the caller's to read), else a new one."""
    return x if isinstance(x, SlowRows) else SlowRows(x, name)


def _row_inputs(q, k, v, scale):
    """Checked `q (d,)`, `k (M, d)`, `v (M, dv)`, the scale and the accumulator dtype; all before any work.

    `k` and `v` may be `SlowRows`: the checks look at their arrays without counting a load.
    """
    q = as_float_array(q, "q")
    k = as_float_array(k._a if isinstance(k, SlowRows) else k, "k")
    v = as_float_array(v._a if isinstance(v, SlowRows) else v, "v")
    if q.ndim != 1:
        raise ValueError(f"q must be one query row of shape (d,), got shape {q.shape}")
    if k.ndim != 2 or v.ndim != 2:
        raise ValueError(
            f"k must be (M, d) and v (M, dv), got shapes {k.shape} and {v.shape}"
        )
    if k.shape[1] != q.shape[0]:
        raise ValueError(f"q and k must share d, got q {q.shape} and k {k.shape}")
    if k.shape[0] != v.shape[0]:
        raise ValueError(
            f"k and v must have the same number of keys M, got {k.shape[0]} and {v.shape[0]}"
        )
    if q.shape[0] < 1 or v.shape[1] < 1:
        raise ValueError("q, k and v need a last dim of at least 1")
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_finite(a, name)
    return q, k, v, check_scale(scale, q.shape[0]), acc_dtype(q, k, v)


class _Held:
    """Peak bytes of the working arrays a run keeps alive (inputs and the output excluded), declared at each step."""

    def __init__(self):
        self.peak = 0

    def now(self, *arrays) -> None:
        self.peak = max(self.peak, sum(trace.nbytes(np.asarray(a)) for a in arrays))


def _finish(
    acc,
    l,
    m,
    dt,
    out_dtype,
    K: SlowRows,
    V: SlowRows,
    held,
    steps,
    S: SlowRows | None = None,
) -> RowRun:
    o, lse = finalize(SoftmaxState(np.asarray(m, dt), np.asarray(l, dt), acc))
    s_bytes = 0 if S is None else np.dtype(dt).itemsize
    s_writes = 0 if S is None else int(S.stores.sum()) * s_bytes
    s_reads = 0 if S is None else int(S.loads.sum()) * s_bytes
    return RowRun(
        o.astype(out_dtype, copy=False),
        float(lse),
        K.passes,
        V.passes,
        held.peak,
        s_writes,
        s_reads,
        steps,
    )


def attention_row_three_pass(q, k, v, *, scale=None) -> RowRun:
    """Store the score row $s = \\mathrm{scale}\\,K q$, then $m = \\max s$, $l = \\sum e^{s - m}$, $o = \\sum_j e^{s_j - m} v_j / l$.

    The row s (M numbers) is written once and read three times; K and V are read once.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    k_in, v_in = k, v
    q, k, v, scale, dt = _row_inputs(q, k, v, scale)
    held = _Held()
    M = k.shape[0]
    K, V, S = (
        _slow(k_in, "k"),
        _slow(v_in, "v"),
        SlowRows(np.empty(M, dt), "s"),
    )  # S: the score row, in slow memory
    q_s = q.astype(dt) * dt.type(scale)  # (d,)
    trace.read("q", trace.nbytes(q))
    S.store(0, M, K.load(0, M).astype(dt, copy=False) @ q_s)  # write s (M,)
    trace.ops("mul", M * q.size)
    s = S.load(0, M)  # pass 1: the max
    m = s.max() if M else dt.type(-np.inf)
    m_use = safe_exp_shift(m)
    # pass 2 only sums its exponentials (notebook 01's pass 2): keeping them would store a second
    # row, standard attention's P for N queries; pass 3 computes them again as the weights
    l = _exp(S.load(0, M) - m_use).sum(dtype=dt)  # pass 2: the normalizer
    p = _exp(S.load(0, M) - m_use)  # pass 3: the weights (M,), times V
    acc = p @ V.load(0, M).astype(dt, copy=False)  # (dv,)
    held.now(s, p, acc)
    return _finish(acc, l, m, dt, np.result_type(q, k, v), K, V, held, [], S)


def _blocks(M: int, Bc: int):
    """(j0, j1) of each key block, made one at a time (no list of M / Bc pairs held)."""
    return ((j0, min(j0 + Bc, M)) for j0 in range(0, M, Bc))


def attention_row_two_pass(q, k, v, *, block_k: int = 256, scale=None) -> RowRun:
    """Pass 1 over K blocks: $m' = \\max(m, \\max s_b)$, $l' = e^{m - m'} l + \\sum e^{s_b - m'}$; pass 2: $o = \\sum_b e^{s_b - m} V_b / l$.

    No score row is stored; each block's scores are recomputed in pass 2, so K is read twice.
    `steps` lists pass 1 per block: block max, new m, alpha, l.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    Bc = check_block(block_k, "block_k")
    k_in, v_in = k, v
    q, k, v, scale, dt = _row_inputs(q, k, v, scale)
    held = _Held()
    K, V = (
        _slow(k_in, "k"),
        _slow(v_in, "v"),
    )  # given as SlowRows: the caller reads the counts
    q_s = q.astype(dt) * dt.type(scale)  # (d,)
    steps = []
    trace.read("q", trace.nbytes(q))
    m, l = dt.type(-np.inf), dt.type(0.0)
    for b, (j0, j1) in enumerate(_blocks(k.shape[0], Bc)):  # pass 1: (m, l) only
        s_b = K.load(j0, j1).astype(dt, copy=False) @ q_s  # (Bc,)
        m_new = max(m, s_b.max())
        alpha = _exp(m - m_new)  # α = e^{m - m'}
        l = alpha * l + _exp(s_b - m_new).sum(dtype=dt)
        steps.append(
            {
                "block": b,
                "block_max": float(s_b.max()),
                "m": float(m_new),
                "alpha": float(alpha),
                "l": float(l),
            }
        )
        m = m_new
        held.now(s_b, m, l)
    acc = np.zeros(v.shape[1], dt)  # (dv,)
    for j0, j1 in _blocks(k.shape[0], Bc):  # pass 2: K again, and V
        s_b = K.load(j0, j1).astype(dt, copy=False) @ q_s  # (Bc,) recomputed
        s_b -= m
        acc += _exp(s_b, out=s_b) @ V.load(j0, j1).astype(dt, copy=False)
        held.now(s_b, m, l, acc)
    return _finish(acc, l, m, dt, np.result_type(q, k, v), K, V, held, steps)


def attention_row_one_pass(q, k, v, *, block_k: int = 256, scale=None) -> RowRun:
    """One pass with state $(m, l, acc)$: $m' = \\max(m, \\max s_b)$, $\\alpha = e^{m - m'}$, $l' = \\alpha l + \\sum e^{s_b - m'}$, $acc' = \\alpha\\,acc + e^{s_b - m'} V_b$; $o = acc / l$.

    K and V are read once, block by block; nothing of length M is held. `steps` lists each block:
    block max, new m, alpha, l. `k` and `v` may be given as `SlowRows`, to read their counts yourself.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    Bc = check_block(block_k, "block_k")
    k_in, v_in = k, v
    q, k, v, scale, dt = _row_inputs(q, k, v, scale)
    held = _Held()
    K, V = (
        _slow(k_in, "k"),
        _slow(v_in, "v"),
    )  # given as SlowRows: the caller reads the counts
    q_s = q.astype(dt) * dt.type(scale)  # (d,)
    steps = []
    trace.read("q", trace.nbytes(q))
    m, l = dt.type(-np.inf), dt.type(0.0)
    acc = np.zeros(v.shape[1], dt)  # (dv,)
    for b, (j0, j1) in enumerate(_blocks(k.shape[0], Bc)):
        k_b, v_b = K.load(j0, j1), V.load(j0, j1)  # the same rows of K and V, once each
        s_b = k_b.astype(dt, copy=False) @ q_s  # (Bc,)
        block_max = s_b.max()
        m_new = max(m, block_max)  # m'
        alpha = _exp(m - m_new)  # α = e^{m - m'}
        s_b -= m_new
        p_b = _exp(s_b, out=s_b)  # (Bc,) e^{s_b - m'}, in place of s_b
        l = alpha * l + p_b.sum(dtype=dt)  # l'
        acc = alpha * acc + p_b @ v_b.astype(dt, copy=False)  # acc' (dv,)
        steps.append(
            {
                "block": b,
                "block_max": float(block_max),
                "m": float(m_new),
                "alpha": float(alpha),
                "l": float(l),
            }
        )
        m = m_new
        held.now(p_b, m, l, acc)
    return _finish(acc, l, m, dt, np.result_type(q, k, v), K, V, held, steps)


ROW_METHODS = {
    "three-pass (store s)": attention_row_three_pass,
    "two-pass (online m, l)": attention_row_two_pass,
    "one-pass (m, l, acc)": attention_row_one_pass,
}


def compare_row_methods(q, k, v, *, block_k: int = 256, scale=None) -> list[dict]:
    """Run the three row methods on one query and tabulate what each read, wrote and held, and $\\max|o - o_{ref}|$.

    Passes, score-row bytes and exponentials are counted in the run (`SlowRows`, the counted `np.exp`);
    `working arrays (B)` is each method's declared sum of its working arrays (the block of K and V being read is
    not among them: it is a view of the inputs); `K, V in flight (B)` is the bytes of the largest load of K
    plus the largest of V, counted. The reference is `attention_reference` in float64. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    from .kernels import attention_reference

    check_block(block_k, "block_k")
    q, k, v, scale, _ = _row_inputs(q, k, v, scale)
    ref, _ = attention_reference(q[None, :], k, v, scale=scale)  # (1, dv)
    rows = []
    for name, fn in ROW_METHODS.items():
        kw = {} if fn is attention_row_three_pass else {"block_k": block_k}
        K, V = SlowRows(k, "k"), SlowRows(v, "v")
        with trace.record() as rec:
            run = fn(q, K, V, scale=scale, **kw)
        rows.append(
            {
                "method": name,
                "passes over K": run.passes_k,
                "passes over V": run.passes_v,
                "s written (B)": run.s_writes,
                "s read (B)": run.s_reads,
                "working arrays (B)": run.held_bytes,
                "K, V in flight (B)": (K.largest * k.shape[1] + V.largest * v.shape[1])
                * k.itemsize,
                "exponentials": rec.op_counts["exp"],
                "max |o - ref|": float(np.abs(run.o - ref[0]).max())
                if run.o.size
                else 0.0,
            }
        )
    return rows


def _block_state(
    q5, K: SlowRows, V: SlowRows, j0: int, j1: int, dt, causal: bool, N: int, M: int
) -> SoftmaxState:
    """The state b of keys j0..j1-1 for every query: $S_b = (\\mathrm{scale}\\,Q) K_b^\\top$, masked, then `partial_state`.

    S_b and P_b live only inside this call: what leaves it is the block's (m, l, acc).
    """
    k_b = K.load(j0, j1).astype(dt, copy=False)  # (..., Bc, d)
    v_b = V.load(j0, j1).astype(dt, copy=False)  # (..., Bc, dv)
    s_b = q5 @ np.swapaxes(k_b, -1, -2)  # (..., N, Bc) S_b
    if causal:
        s_b = np.where(causal_mask(N, M, cols=np.arange(j0, j1)), s_b, -np.inf)
    return partial_state(s_b, v_b)  # m_b, l_b (..., N); acc_b (..., N, dv)


def one_pass_attention(q, k, v, *, block_k: int = 64, causal: bool = False, scale=None):
    """All query rows at once, one pass over key blocks: $(m, l, acc) \\leftarrow (m, l, acc) \\oplus \\mathrm{state}(S_b, V_b)$; returns `(o, lse)`.

    Every query keeps its own state a = (m, l, acc); each key block's state b (`partial_state`) is merged
    in (`merge_states`: m = max(m_a, m_b) is the update's m'), and `finalize` gives $o = acc / l$,
    $lse = m + \\log l$. K and V are sliced only through `SlowRows`, which reports every row loaded to
    `lab.trace`. The same shapes, GQA and causal rule as `attention_reference`; `one_pass_buffers` counts
    what it holds. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    Bc = check_block(block_k, "block_k")
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    dt = acc_dtype(q, k, v)
    q_s = np.multiply(
        q, dt.type(scale), dtype=dt
    )  # (..., N, d) the scaled copy of q, made once
    q5, k5, v5 = group_view(q_s, k, v, group)
    K, V = SlowRows(k5, "k"), SlowRows(v5, "v")
    N, M, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    lead = np.broadcast_shapes(q5.shape[:-2], k5.shape[:-2])
    state = empty_state(lead + (N,), dv, dt)  # a: m, l (..., N); acc (..., N, dv)
    for j0, j1 in _blocks(M, Bc):
        state = merge_states(state, _block_state(q5, K, V, j0, j1, dt, causal, N, M))
    o, lse = finalize(state)
    trace.write("o", trace.nbytes(o))
    trace.write("lse", trace.nbytes(lse))
    return ungroup_view(o, q.shape, (dv,)).astype(
        np.result_type(q, k, v), copy=False
    ), ungroup_view(lse, q.shape, ())


def one_pass_buffers(
    N: int,
    M: int,
    d: int,
    dv: int | None = None,
    *,
    block_k: int = 64,
    causal: bool = False,
    itemsize: int = 8,
) -> dict:
    """What `one_pass_attention` holds at each of its peaks, one head, from the shapes: an analytic count in bytes.

    Held throughout: the scaled copy of q (N·d), the running state a (2N + N·dv), and a load count per row
    of K and V (2·M int64), the instrument's (`SlowRows`), not the algorithm's. Inside `partial_state`: $S_b$ and $P_b$ (2·N·Bc) and the block's state b
    (2N + N·dv). Inside `merge_states`: b, the new m, $\\alpha_a$, $\\alpha_b$, l (4N), the new acc and one
    $\\alpha_b\\,acc_b$ product (2·N·dv). With `causal`, the masking step holds $S_b$ twice (before and
    after `np.where`) and an N × Bc boolean mask. Not counted: Python's objects (a few KiB) and the buffers
    numpy allocates for some broadcast operations (64 KiB each, as for $S_b - m$ or the causal mask's
    comparison); with N·Bc and N·dv of hundreds of KiB they stay below the peaks. The peak is the largest phase. Returns the buffers of
    each phase (`held`, `block`, `merge`, `mask`: lists of (what, bytes)), `bytes` per phase, `peak` and
    `peak_phase`. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    N, M, d = check_positive(N, "N"), check_positive(M, "M"), check_positive(d, "d")
    dv = d if dv is None else check_positive(dv, "dv")
    Bc, e = (
        min(check_block(block_k, "block_k"), M),
        check_positive(itemsize, "itemsize"),
    )
    state_b = (
        "block b's state: m_b, l_b (N each), acc_b (N × dv)",
        (2 * N + N * dv) * e,
    )
    parts = {
        "held": [
            ("q · scale (N × d)", N * d * e),
            ("running state: m, l (N each), acc (N × dv)", (2 * N + N * dv) * e),
            ("instrument: SlowRows' load counts of K, V (M int64 each)", 2 * M * 8),
        ],
        "block": [("S_b and P_b (N × Bc each)", 2 * N * Bc * e), state_b],
        "merge": [
            state_b,
            ("m', the factors e^(m - m') and e^(m_b - m'), l' (N each)", 4 * N * e),
            ("acc' and one e^(m_b - m')·acc_b product (N × dv each)", 2 * N * dv * e),
        ],
        "mask": [
            ("S_b before and after the mask (N × Bc each)", 2 * N * Bc * e),
            ("the causal mask (N × Bc booleans)", N * Bc),
        ]
        if causal
        else [],
    }
    phases = ("block", "merge", "mask") if causal else ("block", "merge")
    sizes = {phase: sum(b for _, b in parts["held"] + parts[phase]) for phase in phases}
    peak_phase = max(sizes, key=sizes.get)
    return {
        **parts,
        "bytes": sizes,
        "peak": sizes[peak_phase],
        "peak_phase": peak_phase,
    }
