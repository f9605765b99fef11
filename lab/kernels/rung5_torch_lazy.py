"""Rung 5, lazy rescaling (a variant of FlashAttention-4's conditional rescaling) as torch ops.

Changes against rung 4: after a query block's first tile, m is a reference that moves only for rows whose
tile sum outgrows $e^\\tau$ (τ = `LOG_BOUND`); riding in the first matmul, it saves the row max, the
subtraction and α of most tiles; a tile that would overflow is recomputed with rung 4's step.
What it buys: fewer passes per tile, paid for with torch's exp in place of exp2 (its exponents reach τ,
where exp2's premultiplication would round). Which rung is faster depends on the CPU: 1.06-1.12× rung
4's time on a 2-core AMD EPYC, 0.87× on a 2-core Intel Xeon (B = 1, H = 8, N = 4096, d = 64, float32).

Taught in: notebooks/06_flashattention2_parallelism.ipynb (FA3/FA4), notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import math

import torch

from .rung4_torch_fa2 import fa2_step

__all__ = ["LOG_BOUND", "lazy_step", "rescale_rows"]

# τ: the lazy forward exponentiates each tile against the reference it has, and lets a row's sum of P_ij grow
# to e^τ ≈ 2981 before it moves that row's reference: far from float32's overflow near e^88.
LOG_BOUND = 8.0


def lazy_step(scores, m, l, acc, v_j, count):
    """The lazily rescaled update, in place: $P_{ij} = e^{S_{ij} - m}$ against the reference the rows have, then
    $l \\leftarrow l + \\mathrm{rowsum} P_{ij}$ and $acc \\leftarrow acc + P_{ij}V_j$; no row max and no α unless a row sum
    outgrows $e^\\tau$ (`rescale_rows`) or the exponential overflows (then rung 4's `fa2_step`).
    `count` receives `"rescaled"` and `"recomputed"`."""
    s = scores(m)  # S_ij - m, m riding in the matmul
    p_sum = s.exp_().sum(dim=-1)  # P_ij = exp(S_ij - m); rowsum P_ij
    top = float(p_sum.amax())  # the largest row sum (a sync on a GPU)
    if not math.isfinite(top):  # overflow, or a row's first key: exactly
        count["recomputed"] += 1
        fa2_step(scores, m, l, acc, v_j)
        return
    if top > math.exp(LOG_BOUND):  # some rows outgrew e^τ: they move m
        count["rescaled"] += 1
        p_sum = rescale_rows(s, p_sum, m, l, acc, math.exp(LOG_BOUND))
    l.add_(p_sum)  # l = l + rowsum P_ij
    acc.baddbmm_(s, v_j)  # acc = acc + P_ij V_j


def rescale_rows(p, p_sum, m, l, acc, bound: float):
    """Rows of $p = e^{S_{ij} - m}$ whose sum $r$ exceeds `bound` move their reference to $m' = m + \\log r$: $p$, l and
    acc are multiplied by $\\alpha = e^{m - m'}$ (other rows by 1), in place; returns $\\mathrm{rowsum}\\,p$ after.
    $\\alpha$ comes from the stored $m'$ (rounded by up to 5e-4 at $|m| = 10^4$ in float32), not $1/r$: the rounding
    then cancels in $o = acc / l$ instead of weighting the tiles before and after the move differently."""
    m_new = torch.where(
        p_sum > bound, m + torch.log(p_sum), m
    )  # m' = m + log r, as stored
    alpha = torch.exp(m - m_new)  # α = exp(m - m'), exact for that m'
    m.copy_(m_new)
    p.mul_(alpha.unsqueeze(-1))
    l.mul_(alpha)
    acc.mul_(alpha.unsqueeze(-1))
    return p_sum * alpha
