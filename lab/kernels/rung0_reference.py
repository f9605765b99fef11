"""Rung 0, the oracle: attention in float64 with the whole score matrix in memory.

The definition, $S = \\mathrm{scale}\\,Q K^\\top$, $P = \\mathrm{softmax}(S)$, $O = P V$, in float64 whatever
the input dtype, masks and score mods applied to the full S; every other rung is tested against it.
What it costs: 26.7 MB above the inputs on one float32 head, N = M = 1024, d = 64 (`lab.peak_bytes`),
25.2 MB of it three N×M float64 arrays alive at once (S, S − m, P); tests/test_kernels.py measures it.

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import numpy as np

from ..masks import _kept, check_mods, index_arrays
from ..rules import causal_mask, safe_exp_shift
from ..states import SoftmaxState, finalize
from ..validate import check_qkv, group_view, ungroup_view

__all__ = ["attention_reference"]


def attention_reference(
    q, k, v, *, causal: bool = False, scale=None, mask_mod=None, score_mod=None
):
    """$S = \\mathrm{scale}\\,Q K^\\top$, $P = \\mathrm{softmax}(S)$, $O = P V$, in float64; returns `(o, lse)`.

    The oracle: materializes S and P (N×M each). `o` comes back in the input dtype, `lse` (natural log)
    in float64. Rows with no visible key give o = 0, lse = -inf. With 4-D inputs, `score_mod(s, b, h, i, j)`
    changes S and `mask_mod(b, h, i, j)` (and `causal`) masks it before the softmax.
    Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    check_mods(mask_mod, score_mod, q.shape, k.shape)
    out_dtype = np.result_type(q.dtype, k.dtype, v.dtype)
    q5, k5, v5 = group_view(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), group
    )
    s = scale * (q5 @ np.swapaxes(k5, -1, -2))  # S: (..., N, M)
    N, M = q.shape[-2], k.shape[-2]
    if mask_mod is not None or score_mod is not None:
        s = _modded(s, q.shape[:2], N, M, causal, mask_mod, score_mod)
    elif causal:
        s = np.where(causal_mask(N, M), s, -np.inf)
    m = s.max(axis=-1) if M > 0 else np.full(s.shape[:-1], -np.inf)
    p = np.exp(s - safe_exp_shift(m)[..., None])  # P before the division: (..., N, M)
    o, lse = finalize(SoftmaxState(m, p.sum(axis=-1), p @ v5))
    return ungroup_view(o, q.shape, (v.shape[-1],)).astype(out_dtype), ungroup_view(
        lse, q.shape, ()
    )


def _modded(s, BH, N, M, causal, mask_mod, score_mod):
    """score_mod, then mask_mod and causal, on the full score matrix s (B, Hkv, G, N, M) viewed as (B, Hq, N, M)."""
    s4 = s.reshape(tuple(BH) + (N, M))
    idx = index_arrays(BH[0], BH[1], 0, N, 0, M)
    if score_mod is not None:
        out = score_mod(s4, *idx)
        if np.shape(out) != s4.shape:
            raise ValueError(
                f"score_mod must return an array of s's shape {s4.shape}, got {np.shape(out)}"
            )
        s4 = np.asarray(out, dtype=np.float64)
    keep = _kept(mask_mod, causal, N, M, idx)
    if keep is not None:
        s4 = np.where(keep, s4, -np.inf)
    return s4.reshape(s.shape)
