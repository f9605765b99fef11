"""Rung 3, FlashAttention-2 (Dao 2023, Algorithm 1) in numpy: the loops swapped, the state kept in the tile.

Changes against rung 2: query blocks outside, key blocks inside; the state (m, l, acc) of a query block
stays on chip for its row of tiles, rescaled by α = e^{m − m′} at each step, divided by l once at the
end, and lse = m + log l written beside o (for the backward, notebook 09).
What it buys: 8.92 MB moved (0.27 MB of it written) against rung 2's 13.6 MB (4.6 MB written), and 1.13 M
multiplies and divides against rung 2's 3.19 M, at about rung 2's memory, 0.37 MB (one float32 head,
N = M = 1024, d = 64, Br = Bc = 64; tests/test_kernels.py counts them again). `flash_attention_numpy`'s
`variant` picks rung 2 ("fa1") or this one ("fa2").

Taught in: notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb, notebooks/07_precision.ipynb,
notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import numpy as np

from .. import trace
from .._tiles import TilePlan
from ..masks import check_mods
from ..precision import FORMATS, round_to
from ..rules import safe_exp_shift
from ..states import SoftmaxState, finalize
from ..validate import (
    acc_dtype,
    check_block,
    check_block_mask_rank,
    check_choice,
    check_qkv,
    check_stats,
    group_view,
    ungroup_view,
)
from .rung2_numpy_fa1 import fa1_forward, lowered, tile_scores

__all__ = ["flash_attention_numpy", "VARIANTS"]


def fa2_forward(q5, k5, v5, plan, scale, dt, p_format=None):
    """FlashAttention-2: for each query block Q_i, stream the K_j, V_j of its computed tiles keeping (m, l, acc) in the tile; returns `(o, lse)`.

    Taught in: notebooks/06_flashattention2.ipynb
    """
    N, M, dv, Br, Bc = q5.shape[-2], k5.shape[-2], v5.shape[-1], plan.Br, plan.Bc
    o = np.empty(q5.shape[:-1] + (dv,), dt)  # o and lse in HBM
    lse = np.empty(q5.shape[:-1], dt)
    io = q5.dtype.itemsize  # q, k, v, o sit in HBM in the input dtype
    for ib, i0 in enumerate(range(0, N, Br)):
        i1 = min(i0 + Br, N)
        q_i = trace.load("q", q5[..., i0:i1, :]).astype(dt) * dt.type(
            scale
        )  # load Q_i: (..., Br, d)
        m = np.full(q_i.shape[:-1], -np.inf, dt)  # (..., Br): the state, on chip
        l = np.zeros(q_i.shape[:-1], dt)
        acc = np.zeros(q_i.shape[:-1] + (dv,), dt)  # (..., Br, dv)
        for jb in plan.keys(ib):  # empty tiles are skipped: K_j, V_j never loaded
            j0, j1 = jb * Bc, min(jb * Bc + Bc, M)
            k_j = trace.load(
                "k", k5[..., j0:j1, :], io
            )  # load K_j, V_j (k5, v5 are upcast copies: count
            v_j = trace.load(
                "v", v5[..., j0:j1, :], io
            )  # the input dtype, as they sit in HBM)
            s = tile_scores(
                q_i @ np.swapaxes(k_j, -1, -2), plan, i0, i1, j0, j1, ib, jb
            )  # S_ij: (..., Br, Bc)
            m_new = np.maximum(m, s.max(axis=-1))  # m' = max(m, rowmax S_ij)
            m_use = safe_exp_shift(m_new)
            alpha = np.exp(m - m_use)  # α = exp(m - m')
            s -= m_use[..., None]
            p = np.exp(s, out=s)  # P_ij = exp(S_ij - m')
            l *= alpha
            l += p.sum(axis=-1)  # l' = α l + rowsum P_ij (from P before any rounding)
            acc *= alpha[..., None]
            acc += lowered(p, p_format) @ v_j  # acc' = α acc + P_ij V_j
            m = m_new
            trace.ops("exp", p.size + alpha.size)
            trace.ops("mul", acc.size + l.size)
        o_i, lse_i = finalize(
            SoftmaxState(m, l, acc)
        )  # the one division: o = acc / l, lse = m + log l
        trace.ops("div", acc.size)
        trace.store("o", o[..., i0:i1, :], o_i, io)  # write O_i and lse_i to HBM
        trace.store("lse", lse[..., i0:i1], lse_i)
    return o, lse


VARIANTS = ("fa1", "fa2")
_KERNELS = {"fa1": fa1_forward, "fa2": fa2_forward}


def flash_attention_numpy(
    q,
    k,
    v,
    *,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    scale=None,
    variant: str = "fa2",
    p_format=None,
    qkv_format=None,
    mask_mod=None,
    score_mod=None,
    stats: dict | None = None,
    block_mask=None,
):
    """Tiled one-pass attention; returns `(o, lse)` equal to `attention_reference` up to rounding.

    Query blocks of `block_q` (Br) rows and key blocks of `block_k` (Bc) rows; the last may be partial.
    Per tile: $S_{ij} = \\mathrm{scale}\\,Q_i K_j^\\top$, $m' = \\max(m, \\mathrm{rowmax} S_{ij})$,
    $P_{ij} = e^{S_{ij} - m'}$, $l \\leftarrow e^{m - m'} l + \\mathrm{rowsum} P_{ij}$,
    $acc \\leftarrow e^{m - m'} acc + P_{ij} V_j$; finally $o = acc / l$, $lse = m + \\log l$.
    `variant="fa1"` runs rung 2 (FlashAttention's Algorithm 1), `"fa2"` rung 3 (FlashAttention-2).
    Accumulates in float32 at least; `o` in the input dtype, `lse` in the accumulator dtype.
    `p_format` rounds each P_ij to a low-precision format before $P_{ij} V_j$ (l is summed from the
    unrounded P, as GPU kernels do); `qkv_format` rounds q, k, v first. Both in `lab.FORMATS`.
    `score_mod` and `mask_mod` (4-D inputs) act on each tile after $S_{ij}$, before the running max;
    tiles that `lab.block_mask` finds empty are skipped (a precomputed `block_mask` may be passed), and
    `stats["tiles"]` receives the number of (query block, key block) pairs computed.
    Taught in: notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb, notebooks/07_precision.ipynb,
    notebooks/11_masks_and_score_mods.ipynb
    """
    check_choice(variant, VARIANTS, "variant")
    for name, fmt in (("p_format", p_format), ("qkv_format", qkv_format)):
        if fmt is not None:
            check_choice(fmt, FORMATS, name)
    Br = check_block(block_q, "block_q")
    Bc = check_block(block_k, "block_k")
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    check_stats(stats)
    check_mods(mask_mod, score_mod, q.shape, k.shape)
    check_block_mask_rank(block_mask, q)
    shape = (
        tuple(q.shape[:2]) + (q.shape[-2], k.shape[-2])
        if q.ndim == 4
        else (1, 1, q.shape[-2], k.shape[-2])
    )
    plan = TilePlan(shape, Br, Bc, causal, mask_mod, score_mod, block_mask)
    dt = acc_dtype(q, k, v)
    if qkv_format is not None:
        q, k, v = (round_to(a, qkv_format).astype(a.dtype) for a in (q, k, v))
    q5, k5, v5 = group_view(
        q, k.astype(dt, copy=False), v.astype(dt, copy=False), group
    )
    o, lse = _KERNELS[variant](q5, k5, v5, plan, scale, dt, p_format)
    if stats is not None:
        stats["tiles"] = plan.visited
    out_dtype = np.result_type(q.dtype, k.dtype, v.dtype)
    return ungroup_view(o, q.shape, (v.shape[-1],)).astype(
        out_dtype, copy=False
    ), ungroup_view(lse, q.shape, ())
