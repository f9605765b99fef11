"""Rung 4, FlashAttention-2 (Dao 2023, arXiv 2307.08691, Algorithm 1) as torch ops, on any device.

Changes against rung 3: the same loops and step as torch ops, each on a whole tile of every (batch × head)
row at once, in one reused buffer (`torch_default_blocks` sizes it); the exponential as exp2 after the
subtraction, as FlashAttention-2's kernels take it.
What it buys: no N×M array on any torch device, and speed near torch's fused SDPA on a CPU. The recorded
`python -m lab.bench` runs in data/runs give the figures per machine (notebook 08 section 6 compares them).

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import math

import torch

__all__ = ["torch_default_blocks", "tiled_forward", "fa2_step", "tile_scores", "layout"]

# Bytes of one tile of scores (all batch × head rows of a query block against one key block) the defaults aim at:
# large enough that Python's per-op overhead vanishes, small enough to stay near a CPU's cache and far below N×M.
_TILE_BYTES = {"cpu": 4 * 2**20, "cuda": 64 * 2**20}
_MAX_ROWS = {"cpu": 1024}  # Br's cap on a CPU
# e^x = 2^(x log2 e), as FlashAttention-2's GPU kernels take it (exp2 is the GPU's native instruction); on a CPU
# whether torch's exp2 beats its exp depends on the vector unit: notebook 08 section 3 measures it.
LOG2E = 1 / math.log(2)


def torch_default_blocks(
    device, N: int, M: int, rows: int = 1, itemsize: int = 4
) -> tuple[int, int]:
    """Default `(block_q, block_k)` for `device`: $B_c$ fixed per device, $B_r$ the largest power of two with rows·$B_r B_c$·itemsize ≤ the tile budget.

    `rows` is the number of (batch × head) rows that share each tile. CPU: Bc = 512, a 4 MiB tile and
    Br ≤ 1024 (more rows make the matmuls no faster, only the tile, Q_i and acc larger); CUDA: Bc = 1024
    and a 64 MiB tile (each op launches one GPU kernel, so fewer, larger steps).
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    kind = torch.device(device).type
    budget = _TILE_BYTES.get(kind, _TILE_BYTES["cpu"])
    Bc = max(1, min(1024 if kind == "cuda" else 512, M))
    Br = 2 ** int(math.log2(max(16, budget // max(1, rows * Bc * itemsize))))
    return max(1, min(Br, N, _MAX_ROWS.get(kind, N))), Bc


def layout(q, k, v, group):
    """q as (Z, G, N, d), k and v as (Z, M, d) and (Z, M, dv) in the accumulator dtype dt (float32, float64 for
    float64 inputs); Z = batch × kv heads. Returns q4, k3, v3, dt."""
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    Z = math.prod(k.shape[:-2])  # batch × kv heads
    q4 = q.reshape(Z, group, N, d)  # (Z, G, N, d), a view
    k3 = k.reshape(Z, M, d).to(dt)  # (Z, M, d); no copy when dt matches
    v3 = v.reshape(Z, M, dv).to(dt)  # (Z, M, dv)
    return q4, k3, v3, dt


def tile_scores(q_i, k_j, buf, i0, i1, j0, j1, ib, jb, plan, m=None):
    """$S_{ij} = \\mathrm{scale}\\,Q_iK_j^\\top$ (`q_i` holds scale·Q_i) into `buf`, score_mod and the mask applied
    (masked entries $-\\infty$); with a reference `m` (rung 5), $S_{ij} - m$: the matmul adds $-m$ as its input (`baddbmm`)."""
    Z, rows, _ = q_i.shape
    n, w = i1 - i0, j1 - j0
    out = buf[: Z * rows * w].view(Z, rows, w)
    if m is not None and plan.score_mod is None:
        s = torch.baddbmm(
            m.unsqueeze(-1), q_i, k_j.transpose(1, 2), beta=-1, out=out
        )  # S_ij - m: (Z, G·Br, Bc)
    else:
        s = torch.bmm(q_i, k_j.transpose(1, 2), out=out)  # S_ij: (Z, G·Br, Bc)
    if not plan.untouched(ib, jb):
        view = s.view(plan.B, plan.H, n, w) if plan.mods else s.view(Z, rows // n, n, w)
        plan.apply(view, i0, i1, j0, j1, ib, jb)  # score_mod, then the mask
    if m is not None and plan.score_mod is not None:
        s.sub_(m.unsqueeze(-1))  # S'_ij - m
    return s


def fa2_step(scores, m, l, acc, v_j):
    """Algorithm 1's update by the tile `scores()` $= S_{ij}$, in place: the running max $m$, then $\\alpha$ on l and acc.
    $m' = \\max(m, \\mathrm{rowmax} S_{ij})$ is a score (or the old m), so $S_{ij} - m'$ carries no rounding of $m$.
    A row with no key yet holds $m$ = the lowest float, not $-\\infty$ ($-\\infty - (-\\infty)$ is NaN), and l = acc = 0.
    Returns $\\alpha$."""
    s = scores()  # S_ij: (Z, G·Br, Bc)
    m_new = torch.maximum(m, s.amax(dim=-1))  # m' = max(m, rowmax S_ij)
    p = s.sub_(m_new.unsqueeze(-1)).mul_(LOG2E).exp2_()  # P_ij = exp(S_ij - m')
    alpha = torch.exp(m - m_new)  # α = exp(m - m')
    l.mul_(alpha).add_(p.sum(dim=-1))  # l = α l + rowsum P_ij
    acc.mul_(alpha.unsqueeze(-1)).baddbmm_(p, v_j)  # acc = α acc + P_ij V_j
    m.copy_(m_new)  # m = m'
    return alpha


def tiled_forward(q, k, v, plan, scale, *, later_step=None, stats=None):
    """The loops of Algorithm 1: for each query block $Q_i$ the state $(m, l, acc)$ starts at (the lowest float, 0, 0),
    each computed key block $K_j, V_j$ updates it by one step, and $o = acc / l$ (0 where l = 0), $lse = m + \\log l$
    ($-\\infty$ where l = 0); returns `(o, lse, counts)`.

    `plan` (`lab._tiles.TilePlan`) holds Br, Bc, the mask and which tiles to compute. A query block's first tile
    takes `fa2_step`; its later tiles take `later_step` (rung 5's lazy step) or, if `None`, `fa2_step` again.
    q (..., Hq, N, d), k (..., Hkv, M, d), v (..., Hkv, M, dv), Hq a multiple of Hkv; the state in float32
    (float64 for float64 inputs); `o` in the input dtype. `stats` (a dict or None) asks for the counts of
    tiles in which some row moved m, which cost one reduction (a sync on a GPU) per tile.
    """
    Br, Bc, group = plan.Br, plan.Bc, q.shape[-3] // k.shape[-3]
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q4, k3, v3, dt = layout(q, k, v, group)  # (Z, G, N, d), (Z, M, d), (Z, M, dv)
    Z = q4.shape[0]
    o = torch.empty(
        q.shape[:-1] + (dv,), dtype=q.dtype, device=q.device
    )  # (..., N, dv)
    lse = torch.empty(q.shape[:-1], dtype=dt, device=q.device)  # (..., N)
    o4, lse3 = o.view(Z, group, N, dv), lse.view(Z, group, N)
    buf = torch.empty(
        Z * group * min(Br, N) * min(Bc, M), dtype=dt, device=q.device
    )  # one tile: S_ij, then P_ij
    count = dict(tiles=0, rescaled=0, recomputed=0)
    for ib, i0 in enumerate(range(0, N, Br)):
        i1 = min(i0 + Br, N)
        n = i1 - i0
        q_i = (q4[:, :, i0:i1].to(dt) * scale).reshape(
            Z, group * n, d
        )  # scale·Q_i: (Z, G·Br, d)
        m = torch.full(
            (Z, group * n), torch.finfo(dt).min, dtype=dt, device=q.device
        )  # m: the lowest float for -∞
        l = torch.zeros(
            (Z, group * n), dtype=dt, device=q.device
        )  # l = Σ_j rowsum P_ij
        acc = torch.zeros(
            (Z, group * n, dv), dtype=dt, device=q.device
        )  # acc = Σ_j P_ij V_j
        for nth, jb in enumerate(plan.keys(ib)):  # empty tiles: K_j, V_j never loaded
            j0, j1 = jb * Bc, min(jb * Bc + Bc, M)
            k_j, v_j = k3[:, j0:j1], v3[:, j0:j1]  # K_j, V_j: (Z, Bc, d), (Z, Bc, dv)
            count["tiles"] += 1

            def scores(ref=None):  # S_ij (- ref), into the one buffer
                return tile_scores(q_i, k_j, buf, i0, i1, j0, j1, ib, jb, plan, ref)

            if nth == 0 or later_step is None:
                alpha = fa2_step(scores, m, l, acc, v_j)
                if nth > 0 and stats is not None:  # did some row's max grow?
                    count["rescaled"] += int(bool((alpha < 1).any()))
            else:
                later_step(scores, m, l, acc, v_j, count)
        seen = l > 0
        o4[:, :, i0:i1] = (acc / l.masked_fill(~seen, 1.0).unsqueeze(-1)).view(
            Z, group, n, dv
        )  # o = acc / l
        lse3[:, :, i0:i1] = torch.where(seen, m + torch.log(l), -math.inf).view(
            Z, group, n
        )  # lse = m + log l
    return o, lse, count
