"""Attention in numpy, from the oracle to the tiled one-pass algorithm.

A ladder (each rung: what changed, what it no longer materializes):
  0. `attention_reference`  : float64, the full N×M score matrix S and probabilities P; the oracle.
  1. `attention_naive`      : the same in the input dtype: softmax(Q Kᵀ) V, S and P both N×M in memory.
  2. `flash_attention_numpy(variant="fa1")` : FlashAttention's Algorithm 1: K/V blocks in the outer
     loop, O, l, m kept in the full arrays and rescaled (and divided by l) at every step; no N×M array.
  3. `flash_attention_numpy(variant="fa2")` : FlashAttention-2: query blocks in the outer loop, the
     state (m, l, acc) stays in the tile, one division by l at the end, only lse = m + log l saved.

Shapes: q (..., Hq, N, d), k (..., Hkv, M, d), v (..., Hkv, M, dv), with Hq % Hkv == 0.
Causal masks key j for query i when j > i + (M - N) (bottom-right alignment).

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/03_one_pass_attention.ipynb,
notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb
"""

from __future__ import annotations

import numpy as np

from . import trace
from ._checks import acc_dtype, as_float_array, check_block, check_causal, check_choice, check_finite, check_qkv_shapes, check_scale
from ._tiles import TilePlan
from .masks import _kept, check_mods, index_arrays
from .precision import FORMATS, round_to
from .states import SoftmaxState, finalize

__all__ = ["attention_reference", "attention_naive", "flash_attention_numpy", "causal_mask", "VARIANTS"]

VARIANTS = ("fa1", "fa2")


def _checked(q, k, v, scale, causal=False):
    """Arrays, group size, scale; every check (`causal` a bool included) before any work."""
    check_causal(causal)
    q = as_float_array(q, "q")
    k = as_float_array(k, "k")
    v = as_float_array(v, "v")
    group = check_qkv_shapes(q.shape, k.shape, v.shape)
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_finite(a, name)
    return q, k, v, group, check_scale(scale, q.shape[-1])


def _grouped(q, k, v, group):
    """View q as (..., Hkv, G, N, d) and k, v as (..., Hkv, 1, M, ·) so matmul broadcasts over the group."""
    if q.ndim == 2:
        return q, k, v
    q5 = q.reshape(q.shape[:-3] + (k.shape[-3], group) + q.shape[-2:])
    return q5, k[..., None, :, :], v[..., None, :, :]


def _ungrouped(x, q_shape, trailing):
    """Back from the grouped view to q's leading dims."""
    return x.reshape(tuple(q_shape[:-1]) + trailing)


def causal_mask(N: int, M: int, rows=None, cols=None) -> np.ndarray:
    """Boolean `visible[i, j] = j <= i + (M - N)` for query rows `rows` and key columns `cols`.

    Taught in: notebooks/05_tiling.ipynb
    """
    rows = np.arange(N) if rows is None else np.asarray(rows)
    cols = np.arange(M) if cols is None else np.asarray(cols)
    return cols[None, :] <= rows[:, None] + (M - N)


def attention_reference(q, k, v, *, causal: bool = False, scale=None, mask_mod=None, score_mod=None):
    """$S = \\mathrm{scale}\\,Q K^\\top$, $P = \\mathrm{softmax}(S)$, $O = P V$, in float64; returns `(o, lse)`.

    The oracle: materializes S and P (N×M each). `o` comes back in the input dtype, `lse` (natural log)
    in float64. Rows with no visible key give o = 0, lse = -inf. With 4-D inputs, `score_mod(s, b, h, i, j)`
    changes S and `mask_mod(b, h, i, j)` (and `causal`) masks it before the softmax.
    Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    q, k, v, group, scale = _checked(q, k, v, scale, causal)
    check_mods(mask_mod, score_mod, q.shape, k.shape)
    out_dtype = np.result_type(q.dtype, k.dtype, v.dtype)
    q5, k5, v5 = _grouped(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), group)
    s = scale * (q5 @ np.swapaxes(k5, -1, -2))                  # (..., N, M)
    N, M = q.shape[-2], k.shape[-2]
    if mask_mod is not None or score_mod is not None:
        s = _modded(s, q.shape[:2], N, M, causal, mask_mod, score_mod)
    elif causal:
        s = np.where(causal_mask(N, M), s, -np.inf)
    m = s.max(axis=-1) if M > 0 else np.full(s.shape[:-1], -np.inf)
    m_use = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m_use[..., None])                           # (..., N, M)
    o, lse = finalize(SoftmaxState(m, p.sum(axis=-1), p @ v5))
    return _ungrouped(o, q.shape, (v.shape[-1],)).astype(out_dtype), _ungrouped(lse, q.shape, ())


def _modded(s, BH, N, M, causal, mask_mod, score_mod):
    """score_mod, then mask_mod and causal, on the full score matrix s (B, Hkv, G, N, M) viewed as (B, Hq, N, M)."""
    s4 = s.reshape(tuple(BH) + (N, M))
    idx = index_arrays(BH[0], BH[1], 0, N, 0, M)
    if score_mod is not None:
        out = score_mod(s4, *idx)
        if np.shape(out) != s4.shape:
            raise ValueError(f"score_mod must return an array of s's shape {s4.shape}, got {np.shape(out)}")
        s4 = np.asarray(out, dtype=np.float64)
    keep = _kept(mask_mod, causal, N, M, idx)
    if keep is not None:
        s4 = np.where(keep, s4, -np.inf)
    return s4.reshape(s.shape)


def attention_naive(q, k, v, *, causal: bool = False, scale=None) -> np.ndarray:
    """Standard attention $O = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top) V$ in the input dtype.

    Holds two N×M arrays at its peak: the scores S and the probabilities P (2·N·M·itemsize bytes
    per head). Returns `o` only.
    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    q, k, v, group, scale = _checked(q, k, v, scale, causal)
    dt = np.result_type(q.dtype, k.dtype, v.dtype)
    q5, k5, v5 = _grouped(q, k, v, group)
    s = (q5 * dt.type(scale)) @ np.swapaxes(k5, -1, -2)        # S: (..., N, M)
    N, M = q.shape[-2], k.shape[-2]
    if causal:
        s[..., ~causal_mask(N, M)] = -np.inf
    m = s.max(axis=-1, keepdims=True) if M > 0 else np.zeros(s.shape[:-1] + (1,), dt)
    m[np.isneginf(m)] = 0.0
    p = s - m                                                  # P: (..., N, M), the second N×M array
    np.exp(p, out=p)
    l = p.sum(axis=-1, keepdims=True)
    np.divide(p, l, out=p, where=l > 0)
    p[(l == 0)[..., 0]] = 0.0
    return _ungrouped(p @ v5, q.shape, (v.shape[-1],))


def _masked(s, i0, i1, j0, j1, N, M, causal):
    """Set masked scores of tile (i0:i1, j0:j1) to -inf, only when the tile crosses the diagonal."""
    if causal and j1 - 1 > i0 + (M - N):
        s[..., ~causal_mask(N, M, np.arange(i0, i1), np.arange(j0, j1))] = -np.inf
    return s


def _tile_scores(s, plan, i0, i1, j0, j1, ib, jb):
    """Tile (ib, jb) of S: score_mod and the mask applied in place when the plan says so (a full tile with no mods is left alone)."""
    plan.visited += 1
    if not plan.untouched(ib, jb):
        plan.apply(s.reshape((plan.B, plan.H) + s.shape[-2:]) if plan.mods else s, i0, i1, j0, j1, ib, jb)
    return s


def _fa2(q5, k5, v5, Br, Bc, plan, scale, dt, p_format=None):
    """FlashAttention-2: for each query block Q_i, stream the K_j, V_j of its computed tiles keeping (m, l, acc) in the tile."""
    N, M, dv = q5.shape[-2], k5.shape[-2], v5.shape[-1]
    o = np.empty(q5.shape[:-1] + (dv,), dt)
    lse = np.empty(q5.shape[:-1], dt)
    counting = trace.active()
    io = q5.dtype.itemsize                                     # q, k, v, o sit in HBM in the input dtype
    for ib, i0 in enumerate(range(0, N, Br)):
        i1 = min(i0 + Br, N)
        q_i = q5[..., i0:i1, :]
        trace.read("q", trace.nbytes(q_i))
        q_i = q_i.astype(dt) * dt.type(scale)                  # (..., Br, d)
        m = np.full(q_i.shape[:-1], -np.inf, dt)              # (..., Br)
        l = np.zeros(q_i.shape[:-1], dt)
        acc = np.zeros(q_i.shape[:-1] + (dv,), dt)            # (..., Br, dv)
        for jb in plan.keys(ib):                               # empty tiles are skipped: K_j, V_j never read
            j0, j1 = jb * Bc, min(jb * Bc + Bc, M)
            k_j, v_j = k5[..., j0:j1, :], v5[..., j0:j1, :]
            trace.read("k", trace.nbytes(k_j, io))          # k5, v5 are upcast copies: count the input dtype
            trace.read("v", trace.nbytes(v_j, io))
            s = _tile_scores(q_i @ np.swapaxes(k_j, -1, -2), plan, i0, i1, j0, j1, ib, jb)  # S_ij: (..., Br, Bc)
            m_new = np.maximum(m, s.max(axis=-1))
            m_use = np.where(np.isneginf(m_new), 0.0, m_new)
            alpha = np.exp(m - m_use)                          # α = exp(m_old - m_new)
            s -= m_use[..., None]
            p = np.exp(s, out=s)                               # P_ij = exp(S_ij - m_new)
            l *= alpha
            l += p.sum(axis=-1)                                # l from P before any rounding, as GPU kernels do
            acc *= alpha[..., None]
            acc += _lowered(p, p_format) @ v_j
            m = m_new
            if counting:
                trace.ops("exp", p.size + alpha.size)
                trace.ops("mul", acc.size + l.size)
        o_i, lse_i = finalize(SoftmaxState(m, l, acc))         # the one division by l
        if counting:
            trace.ops("div", acc.size)
        o[..., i0:i1, :] = o_i
        lse[..., i0:i1] = lse_i
        trace.write("o", trace.nbytes(o[..., i0:i1, :], io))
        trace.write("lse", trace.nbytes(lse[..., i0:i1]))
    return o, lse


def _fa1(q5, k5, v5, Br, Bc, plan, scale, dt, p_format=None):
    """FlashAttention (Algorithm 1): for each K_j, V_j, visit every Q_i and rescale O_i, l_i, m_i in place."""
    N, M, dv = q5.shape[-2], k5.shape[-2], v5.shape[-1]
    lead = np.broadcast_shapes(q5.shape[:-2], k5.shape[:-2])
    o = np.zeros(lead + (N, dv), dt)                           # O, l, m live in the full arrays ("HBM")
    l = np.zeros(lead + (N,), dt)
    m = np.full(lead + (N,), -np.inf, dt)
    io = q5.dtype.itemsize                                     # q, k, v, o sit in HBM in the input dtype
    trace.write("o", trace.nbytes(o, io))
    trace.write("l", trace.nbytes(l))
    trace.write("m", trace.nbytes(m))
    counting = trace.active()
    for jb, j0 in enumerate(range(0, M, Bc)):
        j1 = min(j0 + Bc, M)
        rows = plan.queries(jb)                                # the query blocks with a kept element in K_j
        if not rows:
            continue                                           # a key block no query sees is never read
        k_j, v_j = k5[..., j0:j1, :], v5[..., j0:j1, :]
        trace.read("k", trace.nbytes(k_j, io))
        trace.read("v", trace.nbytes(v_j, io))
        for ib in rows:
            i0 = ib * Br
            i1 = min(i0 + Br, N)
            q_i = q5[..., i0:i1, :]
            o_i, l_i, m_i = o[..., i0:i1, :], l[..., i0:i1], m[..., i0:i1]
            for name, a, size in (("q", q_i, io), ("o", o_i, io), ("l", l_i, None), ("m", m_i, None)):
                trace.read(name, trace.nbytes(a, size))
            s = _tile_scores((q_i.astype(dt) * dt.type(scale)) @ np.swapaxes(k_j, -1, -2), plan, i0, i1, j0, j1, ib, jb)
            m_t = s.max(axis=-1)                               # m̃_ij
            p = np.exp(s - np.where(np.isneginf(m_t), 0.0, m_t)[..., None])  # P̃_ij
            l_t = p.sum(axis=-1)                               # l̃_ij
            m_new = np.maximum(m_i, m_t)
            m_use = np.where(np.isneginf(m_new), 0.0, m_new)
            a_old, a_new = np.exp(m_i - m_use), np.exp(m_t - m_use)
            l_new = a_old * l_i + a_new * l_t
            num = (l_i * a_old)[..., None] * o_i + a_new[..., None] * (_lowered(p, p_format) @ v_j)
            o[..., i0:i1, :] = np.divide(num, l_new[..., None], out=np.zeros_like(num), where=l_new[..., None] > 0)
            l[..., i0:i1], m[..., i0:i1] = l_new, m_new
            for name, a, size in (("o", o_i, io), ("l", l_i, None), ("m", m_i, None)):
                trace.write(name, trace.nbytes(a, size))
            if counting:
                trace.ops("exp", p.size + a_old.size + a_new.size)
                trace.ops("mul", 2 * o_i.size + 3 * l_i.size)
                trace.ops("div", o_i.size)
    seen = l > 0
    lse = np.where(seen, m + np.log(l, out=np.zeros_like(l), where=seen), -np.inf)  # lse = m + log l
    return o, lse


def _lowered(p, fmt):
    """P as fed to the second matmul: rounded to `fmt` (values only; the product accumulates in float32+)."""
    return p if fmt is None else round_to(p, fmt).astype(p.dtype, copy=False)


def flash_attention_numpy(q, k, v, *, block_q: int = 64, block_k: int = 64, causal: bool = False,
                          scale=None, variant: str = "fa2", p_format=None, qkv_format=None,
                          mask_mod=None, score_mod=None, stats: dict | None = None, block_mask=None):
    """Tiled one-pass attention; returns `(o, lse)` equal to `attention_reference` up to rounding.

    Query blocks of `block_q` (Br) rows and key blocks of `block_k` (Bc) rows; the last may be partial.
    Per tile: $S_{ij} = \\mathrm{scale}\\,Q_i K_j^\\top$, $m' = \\max(m, \\mathrm{rowmax} S_{ij})$,
    $P_{ij} = e^{S_{ij} - m'}$, $l \\leftarrow e^{m - m'} l + \\mathrm{rowsum} P_{ij}$,
    $acc \\leftarrow e^{m - m'} acc + P_{ij} V_j$; finally $o = acc / l$, $lse = m + \\log l$.
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
    q, k, v, group, scale = _checked(q, k, v, scale, causal)
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be a dict or None, got {type(stats).__name__}")
    check_mods(mask_mod, score_mod, q.shape, k.shape)
    if block_mask is not None and q.ndim != 4:
        raise ValueError(f"block_mask needs 4-D q, k, v of shape (B, H, N, d), got q of rank {q.ndim}")
    shape = tuple(q.shape[:2]) + (q.shape[-2], k.shape[-2]) if q.ndim == 4 else (1, 1, q.shape[-2], k.shape[-2])
    plan = TilePlan(shape, Br, Bc, causal, mask_mod, score_mod, block_mask)
    dt = acc_dtype(q, k, v)
    if qkv_format is not None:
        q, k, v = (round_to(a, qkv_format).astype(a.dtype) for a in (q, k, v))
    q5, k5, v5 = _grouped(q, k.astype(dt, copy=False), v.astype(dt, copy=False), group)
    kernel = _fa2 if variant == "fa2" else _fa1
    o, lse = kernel(q5, k5, v5, Br, Bc, plan, scale, dt, p_format)
    if stats is not None:
        stats["tiles"] = plan.visited
    out_dtype = np.result_type(q.dtype, k.dtype, v.dtype)
    return _ungrouped(o, q.shape, (v.shape[-1],)).astype(out_dtype, copy=False), _ungrouped(lse, q.shape, ())
