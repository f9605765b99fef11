"""The `(o, lse)` form of a partial result, merge orders, and flash-decoding.

A ladder:
  1. `reduce_states`  : fold a list of partial states `(m, l, acc)` with `merge_states` in any order
     (sequential, shuffled, tree); the merge is a monoid, so every order gives one answer.
  2. `merge_outputs`  : the same merge on the normalized form that flash-decoding stores per chunk:
     $o_c = acc_c / l_c$ and $lse_c = m_c + \\log l_c$ (one number per row instead of two);
     $lse = \\log \\sum_c e^{lse_c}$, $o = \\sum_c e^{lse_c - lse} o_c$.
  3. `flash_decoding` : one (or a few) query tokens against a long K/V cache cut into `splits` chunks,
     each chunk's `(o_c, lse_c)` computed independently, then merged. With grouped-query heads the
     G = Hq/Hkv query heads of a key/value head are computed together, against one read of each chunk.

FlashAttention-2's own parallelism (batch, head, query block) needs no merge: each query block runs over
all of its keys. The merge is for splitting one query's keys: split-KV decoding, sequence parallelism.

Shapes as in `lab.attention`: q (..., Hq, N, d) with N usually 1, k (..., Hkv, M, d), v (..., Hkv, M, dv),
Hq a multiple of Hkv (grouped-query attention); causal masks key j for query i when j > i + (M - N).

Taught in: notebooks/04_merge_order.ipynb
"""

from __future__ import annotations

import numpy as np

from . import trace
from .one_pass import SlowRows
from .rules import causal_mask, safe_exp_shift
from .states import SoftmaxState, finalize, merge_states, partial_state
from .validate import (
    acc_dtype,
    as_float_array,
    check_choice,
    check_qkv,
    group_view,
    ungroup_view,
)

__all__ = [
    "ORDERS",
    "chunk_bounds",
    "random_chunk_bounds",
    "merge_plan",
    "merge_depth",
    "reduce_states",
    "chunk_state",
    "split_states",
    "merge_output_pair",
    "merge_outputs",
    "flash_decoding",
]

ORDERS = ("sequential", "shuffled", "tree")


def _check_splits(splits) -> int:
    if isinstance(splits, bool) or not isinstance(splits, (int, np.integer)):
        raise TypeError(f"splits must be an integer >= 1, got {splits!r}")
    if splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    return int(splits)


def chunk_bounds(M: int, splits: int) -> list[tuple[int, int]]:
    """Cut keys `0..M-1` into `splits` contiguous chunks $[j_0, j_1)$ whose sizes differ by at most one (some empty when splits > M).

    Taught in: notebooks/04_merge_order.ipynb
    """
    splits = _check_splits(splits)
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 0:
        raise ValueError(f"M must be an integer >= 0, got {M!r}")
    edges = [int(M) * c // splits for c in range(splits + 1)]
    return list(zip(edges[:-1], edges[1:]))


def merge_plan(
    n: int, order: str = "sequential", *, seed: int = 0
) -> list[tuple[int, int]]:
    """The merges of `n` parts, as pairs of slot indices `(a, b)`: slot a becomes merge(a, b) and slot b is used up.

    `sequential`: ((0 ⊕ 1) ⊕ 2) ⊕ ...; `shuffled`: the same on a random permutation (seeded);
    `tree`: pairwise rounds, as a parallel reduction does. Taught in: notebooks/04_merge_order.ipynb
    """
    check_choice(order, ORDERS, "order")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if order == "tree":
        plan, live = [], list(range(n))
        while len(live) > 1:
            plan += [(live[i], live[i + 1]) for i in range(0, len(live) - 1, 2)]
            live = live[::2]
        return plan
    perm = (
        list(range(n))
        if order == "sequential"
        else [int(i) for i in np.random.default_rng(seed).permutation(n)]
    )
    return [(perm[0], b) for b in perm[1:]]


def merge_depth(n: int, order: str = "sequential", *, seed: int = 0) -> int:
    """The longest chain of merges in `merge_plan(n, order)` that must run one after another.

    Each merge waits for the merges that made its two parts: depth(a ⊕ b) = max(depth a, depth b) + 1.
    $n - 1$ for a chain, $\\lceil \\log_2 n \\rceil$ for the tree. Taught in: notebooks/04_merge_order.ipynb
    """
    depth = [0] * n if isinstance(n, (int, np.integer)) and n >= 1 else None
    for a, b in merge_plan(n, order, seed=seed):
        depth[a] = max(depth[a], depth[b]) + 1
    return max(depth)


def reduce_states(
    parts, order: str = "sequential", *, seed: int = 0, merge=merge_states
):
    """Fold `parts` with the binary `merge` (default `merge_states`) following `merge_plan(len(parts), order)`.

    $\\bigoplus_c s_c$ in the chosen order; any order gives the same result up to rounding because
    $\\oplus$ is associative and commutative. Taught in: notebooks/04_merge_order.ipynb
    """
    parts = list(parts)
    if not parts:
        raise ValueError("parts must hold at least one state")
    slots = list(parts)
    first = None
    for a, b in merge_plan(len(parts), order, seed=seed):
        slots[a] = merge(slots[a], slots[b])
        slots[b] = None
        first = a
    return slots[0] if first is None else slots[first]


def chunk_state(
    q,
    k_c,
    v_c,
    *,
    start: int = 0,
    total: int | None = None,
    causal: bool = False,
    scale=None,
) -> SoftmaxState:
    """The partial state of every query against one key chunk `k_c (..., Mc, d)`, `v_c (..., Mc, dv)` holding keys `start..start+Mc-1` of `total`.

    $S = \\mathrm{scale}\\,Q K_c^\\top$ (masked with the global key index when causal), then
    `partial_state(S, V_c)`: $m$, $l$ `(..., Hq, N)`, $acc$ `(..., Hq, N, dv)`, float32 at least. The
    G = Hq/Hkv query heads of a group share one read of their key/value head's chunk (one work item).
    Taught in: notebooks/04_merge_order.ipynb
    """
    q, k_c, v_c, group, scale = check_qkv(q, k_c, v_c, scale, causal)
    Mc, N = k_c.shape[-2], q.shape[-2]
    total = start + Mc if total is None else int(total)
    if start < 0 or start + Mc > total:
        raise ValueError(
            f"the chunk [start, start + Mc) = [{start}, {start + Mc}) must lie inside 0..total={total}"
        )
    dt = acc_dtype(q, k_c, v_c)
    q5, k5, v5 = group_view(
        q.astype(dt) * dt.type(scale),
        k_c.astype(dt, copy=False),
        v_c.astype(dt, copy=False),
        group,
    )
    s = q5 @ np.swapaxes(k5, -1, -2)  # (..., Hkv, G, N, Mc)
    if causal:
        s = np.where(
            causal_mask(N, total, cols=np.arange(start, start + Mc)), s, -np.inf
        )
    m, l, acc = partial_state(s, v5)
    dv = v_c.shape[-1]
    return SoftmaxState(
        ungroup_view(m, q.shape, ()),
        ungroup_view(l, q.shape, ()),
        ungroup_view(acc, q.shape, (dv,)),
    )


def split_states(
    q, k, v, *, splits: int, causal: bool = False, scale=None, bounds=None
) -> list[SoftmaxState]:
    """One `chunk_state` per chunk of `chunk_bounds(M, splits)` (or of `bounds`, contiguous chunks covering 0..M), each computed on its own.

    K and V are sliced through `SlowRows`, so `lab.trace` counts the rows each chunk was handed.

    Taught in: notebooks/04_merge_order.ipynb
    """
    splits = _check_splits(splits)
    q, k, v, _, scale = check_qkv(q, k, v, scale, causal)
    M = k.shape[-2]
    if bounds is None:
        bounds = chunk_bounds(M, splits)
    else:
        bounds = [(int(a), int(b)) for a, b in bounds]
        edges = [a for a, _ in bounds] + [bounds[-1][1]] if bounds else []
        if (
            len(bounds) != splits
            or edges[0] != 0
            or edges[-1] != M
            or any(b != a2 for (_, b), (a2, _) in zip(bounds, bounds[1:]))
            or any(b < a for a, b in bounds)
        ):
            raise ValueError(
                f"bounds must be {splits} contiguous chunks (j0, j1) covering 0..M={M}, got {bounds}"
            )
    K, V = (
        SlowRows(k, "k"),
        SlowRows(v, "v"),
    )  # counts the rows each chunk is handed, into lab.trace
    return [
        chunk_state(
            q,
            K.load(j0, j1),
            V.load(j0, j1),
            start=j0,
            total=M,
            causal=causal,
            scale=scale,
        )
        for j0, j1 in bounds
    ]


def _checked_parts(o_parts, lse_parts):
    o = [as_float_array(x, "o_parts") for x in o_parts]
    lse = [as_float_array(x, "lse_parts") for x in lse_parts]
    if not o:
        raise ValueError("o_parts must hold at least one part")
    if len(o) != len(lse):
        raise ValueError(
            f"o_parts and lse_parts must have the same number of parts, got {len(o)} and {len(lse)}"
        )
    for oc, lc in zip(o, lse):
        if oc.shape != o[0].shape or lc.shape != lse[0].shape:
            raise ValueError(
                f"all parts must share shapes, got o {oc.shape} vs {o[0].shape}, lse {lc.shape} vs {lse[0].shape}"
            )
        if oc.ndim < 1 or oc.shape[:-1] != lc.shape:
            raise ValueError(
                f"each o part must be (..., N, dv) with its lse part (..., N), got {oc.shape} and {lc.shape}"
            )
        if np.isnan(lc).any() or np.isposinf(lc).any():
            raise ValueError(
                "lse_parts must not hold NaN or +inf (-inf marks an empty part)"
            )
        if not np.isfinite(oc).all():
            raise ValueError("o_parts must be finite")
    return o, lse


def merge_output_pair(a, b):
    """Merge two normalized partial results `a = (o_a, lse_a)`, `b = (o_b, lse_b)`.

    $lse = \\log(e^{lse_a} + e^{lse_b})$, $o = e^{lse_a - lse} o_a + e^{lse_b - lse} o_b$; an empty part
    ($lse = -\\infty$) is the identity. Taught in: notebooks/04_merge_order.ipynb
    """
    return merge_outputs([a[0], b[0]], [a[1], b[1]])


def merge_outputs(o_parts, lse_parts):
    """Merge the stored form of flash-decoding: $lse = \\log \\sum_c e^{lse_c}$, $o = \\sum_c e^{lse_c - lse}\\, o_c$; returns `(o, lse)`.

    `o_parts` is a sequence (or an array stacked on axis 0) of `(..., N, dv)`, `lse_parts` of `(..., N)`.
    Parts with $lse_c = -\\infty$ (no visible key) weigh nothing; rows empty in every part give
    o = 0, lse = -inf. Computed in float32 at least. Taught in: notebooks/04_merge_order.ipynb
    """
    o, lse = _checked_parts(o_parts, lse_parts)
    dt = acc_dtype(*o, *lse)
    o = np.stack(o).astype(dt, copy=False)  # (C, ..., N, dv)
    lse = np.stack(lse).astype(dt, copy=False)  # (C, ..., N)
    m = lse.max(axis=0)  # (..., N)
    m_use = safe_exp_shift(m)
    w = np.exp(lse - m_use)  # (C, ..., N) weights e^{lse_c - m}
    total = w.sum(axis=0)  # (..., N)
    seen = total > 0
    lse_out = np.where(
        seen, m_use + np.log(total, out=np.zeros_like(total), where=seen), -np.inf
    )
    o_out = np.divide(
        (w[..., None] * o).sum(axis=0),
        total[..., None],
        out=np.zeros(o.shape[1:], dt),
        where=seen[..., None],
    )
    return o_out, lse_out


def flash_decoding(
    q,
    k,
    v,
    *,
    splits: int,
    causal: bool = False,
    scale=None,
    order: str = "sequential",
    seed: int = 0,
):
    """Split the keys into `splits` chunks, compute each chunk's $(o_c, lse_c)$ independently, merge them; returns `(o, lse)`.

    Per chunk: $o_c = acc_c / l_c$, $lse_c = m_c + \\log l_c$ (`finalize`); then `merge_output_pair`
    folded in `order` (`merge_plan`). Equal to `attention_reference` up to rounding for any `splits`
    (chunks beyond M are empty and merge as the identity). `o` in the input dtype, `lse` float32 at least.
    Taught in: notebooks/04_merge_order.ipynb
    """
    splits = _check_splits(splits)
    check_choice(order, ORDERS, "order")
    q, k, v, _, scale = check_qkv(q, k, v, scale, causal)
    parts = [
        finalize(st)
        for st in split_states(q, k, v, splits=splits, causal=causal, scale=scale)
    ]
    for o_c, lse_c in parts:
        trace.write("o_parts", trace.nbytes(o_c))
        trace.write("lse_parts", trace.nbytes(lse_c))
    o, lse = reduce_states(parts, order, seed=seed, merge=merge_output_pair)
    return o.astype(np.result_type(q, k, v), copy=False), lse


def random_chunk_bounds(M: int, splits: int, *, seed: int = 0) -> list[tuple[int, int]]:
    """Cut keys `0..M-1` at `splits - 1` distinct random points (seeded): `splits` non-empty chunks $[j_0, j_1)$ of uneven sizes.

    Taught in: notebooks/04_merge_order.ipynb
    """
    splits = _check_splits(splits)
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < splits:
        raise ValueError(f"M must be an integer >= splits={splits}, got {M!r}")
    cuts = (
        np.sort(
            np.random.default_rng(seed).choice(
                np.arange(1, M), size=splits - 1, replace=False
            )
        )
        if splits > 1
        else []
    )
    edges = [0, *(int(c) for c in cuts), int(M)]
    return list(zip(edges[:-1], edges[1:]))
