"""Rung 1, standard attention: softmax(scale·Q Kᵀ) V in the input's own dtype, as most code writes it.

Changes against rung 0: the input dtype instead of float64, and P made from S in one second array, so
two N×M arrays are alive at the peak, $2 \\cdot N \\cdot M \\cdot$ itemsize bytes per head (`lab.attention_bytes`).
What it buys: a third of rung 0's memory: 8.66 MB above the inputs against 26.7 MB (one float32 head,
N = M = 1024, d = 64; 8.39 MB of it S and P by the formula); tests/test_kernels.py measures it. Its memory
still grows as N·M: the memory wall of notebook 00. `standard_attention_torch` is this rung in torch, the
baseline every torch rung is measured against.

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/08_hardware_runs.ipynb, notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import numpy as np

from ..rules import causal_mask, safe_exp_shift
from ..validate import (
    check_causal,
    check_qkv,
    check_qkv_tensors,
    check_scale,
    group_view,
    ungroup_view,
)

__all__ = ["attention_naive", "standard_attention_torch"]


def attention_naive(q, k, v, *, causal: bool = False, scale=None) -> np.ndarray:
    """Standard attention $O = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top) V$ in the input dtype.

    Holds two N×M arrays at its peak: the scores S and the probabilities P (2·N·M·itemsize bytes
    per head). Returns `o` only.
    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    dt = np.result_type(q.dtype, k.dtype, v.dtype)
    q5, k5, v5 = group_view(q, k, v, group)
    s = (q5 * dt.type(scale)) @ np.swapaxes(k5, -1, -2)  # S: (..., N, M)
    N, M = q.shape[-2], k.shape[-2]
    if causal:
        s[..., ~causal_mask(N, M)] = -np.inf
    m = s.max(axis=-1, keepdims=True) if M > 0 else np.zeros(s.shape[:-1] + (1,), dt)
    p = s - safe_exp_shift(m)  # P: (..., N, M), the second N×M array
    np.exp(p, out=p)
    l = p.sum(axis=-1, keepdims=True)
    np.divide(p, l, out=p, where=l > 0)
    p[(l == 0)[..., 0]] = 0.0
    return ungroup_view(p @ v5, q.shape, (v.shape[-1],))


def standard_attention_torch(q, k, v, *, causal: bool = False, scale=None):
    """Standard attention in torch, $O = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top) V$; autograd keeps P (N×M) for the backward.

    GQA: K/V heads are repeated to the query heads (`Hq % Hkv == 0`). Rows with no visible key give 0.
    The torch twin of `attention_naive`: under `torch.no_grad()` it is the naive rung on any device
    (`lab.attention_torch_naive`). Taught in: notebooks/08_hardware_runs.ipynb, notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
    """
    import torch  # here, so that the numpy rungs never load it

    causal = check_causal(causal)
    group = check_qkv_tensors(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    if group > 1:
        k = k.repeat_interleave(group, dim=-3)  # (..., Hq, M, d)
        v = v.repeat_interleave(group, dim=-3)  # (..., Hq, M, dv)
    N, M = q.shape[-2], k.shape[-2]
    s = (q * scale) @ k.transpose(-1, -2)  # S: (..., N, M)
    if causal:
        visible = torch.from_numpy(causal_mask(N, M)).to(s.device)
        s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1)  # P: (..., N, M), saved by autograd
    if causal and N > M:
        p = torch.nan_to_num(p, nan=0.0)  # rows with no visible key: 0, not NaN
    return p @ v  # (..., N, dv)
