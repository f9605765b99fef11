"""Rung 2, FlashAttention (Dao et al. 2022, Algorithm 1) in numpy: tiles, and no N×M array.

Changes against rung 1: key blocks K_j, V_j of Bc keys in the outer loop, query blocks Q_i of Br rows in
the inner one; each tile's S_ij is merged into O_i, l_i, m_i, which go to HBM and back at every step
(O_i rescaled and divided by l′ each time); tiles a mask hides entirely are skipped.
What it buys: memory that no longer grows as N·M, 0.39 MB above the inputs against rung 1's 8.66 MB (one
float32 head, N = M = 1024, d = 64, Br = Bc = 64). What it costs: 13.6 MB moved (4.6 MB of it written)
and 3.19 M multiplies and divides, against rung 3's 8.92 MB (0.27 MB written) and 1.13 M
(`lab.trace.record()`; `lab.flash_counts` is the formula; tests/test_kernels.py counts them again).

Taught in: notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb
"""

from __future__ import annotations

import numpy as np

from .. import trace
from ..precision import round_to
from ..rules import safe_exp_shift

__all__: list[str] = []  # the public entry is flash_attention_numpy(variant="fa1")


def tile_scores(s, plan, i0, i1, j0, j1, ib, jb):
    """Tile (ib, jb) of S: score_mod and the mask applied in place when the plan says so (a full tile with no mods is left alone)."""
    plan.visited += 1
    if not plan.untouched(ib, jb):
        plan.apply(
            s.reshape((plan.B, plan.H) + s.shape[-2:]) if plan.mods else s,
            i0,
            i1,
            j0,
            j1,
            ib,
            jb,
        )
    return s


def lowered(p, fmt):
    """P as fed to the second matmul: rounded to `fmt` (values only; the product accumulates in float32+)."""
    return p if fmt is None else round_to(p, fmt).astype(p.dtype, copy=False)


def fa1_forward(q5, k5, v5, plan, scale, dt, p_format=None):
    """FlashAttention's Algorithm 1: for each K_j, V_j, visit every Q_i and rescale O_i, l_i, m_i in HBM; returns `(o, lse)`.

    Taught in: notebooks/06_flashattention2.ipynb
    """
    N, M, dv, Br, Bc = q5.shape[-2], k5.shape[-2], v5.shape[-1], plan.Br, plan.Bc
    lead = np.broadcast_shapes(q5.shape[:-2], k5.shape[:-2])
    io = q5.dtype.itemsize  # q, k, v, o sit in HBM in the input dtype
    o, l, m = (
        np.empty(lead + (N, dv), dt),
        np.empty(lead + (N,), dt),
        np.empty(lead + (N,), dt),
    )
    trace.store("o", o, 0.0, io)  # O = 0, l = 0, m = -inf in HBM
    trace.store("l", l, 0.0)
    trace.store("m", m, -np.inf)
    for jb, j0 in enumerate(range(0, M, Bc)):
        j1 = min(j0 + Bc, M)
        rows = plan.queries(jb)  # the query blocks with a kept element in K_j
        if not rows:
            continue  # a key block no query sees is never loaded
        k_j = trace.load(
            "k", k5[..., j0:j1, :], io
        )  # load K_j, V_j (k5, v5 are upcast copies: count
        v_j = trace.load(
            "v", v5[..., j0:j1, :], io
        )  # the input dtype, as they sit in HBM)
        for ib in rows:
            i0, i1 = ib * Br, min(ib * Br + Br, N)
            q_i = trace.load(
                "q", q5[..., i0:i1, :], io
            )  # load Q_i, O_i, l_i, m_i: (..., Br, d)
            o_i = trace.load("o", o[..., i0:i1, :], io)  # (..., Br, dv)
            l_i, m_i = trace.load("l", l[..., i0:i1]), trace.load("m", m[..., i0:i1])
            s = tile_scores(
                (q_i.astype(dt) * dt.type(scale)) @ np.swapaxes(k_j, -1, -2),
                plan,
                i0,
                i1,
                j0,
                j1,
                ib,
                jb,
            )
            m_t = s.max(axis=-1)  # m̃_ij = rowmax(S_ij)
            p = np.exp(
                s - safe_exp_shift(m_t)[..., None]
            )  # P̃_ij = exp(S_ij - m̃_ij): (..., Br, Bc)
            l_t = p.sum(axis=-1)  # l̃_ij = rowsum(P̃_ij)
            m_new = np.maximum(m_i, m_t)  # m_i^new
            m_use = safe_exp_shift(m_new)
            a_old, a_new = np.exp(m_i - m_use), np.exp(m_t - m_use)
            l_new = a_old * l_i + a_new * l_t  # l_i^new
            num = (l_i * a_old)[..., None] * o_i + a_new[..., None] * (
                lowered(p, p_format) @ v_j
            )
            o_new = np.divide(
                num,
                l_new[..., None],
                out=np.zeros_like(num),
                where=l_new[..., None] > 0,
            )
            trace.store(
                "o", o[..., i0:i1, :], o_new, io
            )  # write O_i = diag(l_i^new)^-1 num to HBM
            trace.store("l", l[..., i0:i1], l_new)  # write l_i, m_i to HBM
            trace.store("m", m[..., i0:i1], m_new)
            trace.ops("exp", p.size + a_old.size + a_new.size)
            trace.ops("mul", 2 * o_i.size + 3 * l_i.size)
            trace.ops("div", o_i.size)
    seen = l > 0  # a row with no visible key keeps l = 0: lse = -inf
    lse = np.where(
        seen, m + np.log(l, out=np.zeros_like(l), where=seen), -np.inf
    )  # lse = m + log l
    return o, lse
