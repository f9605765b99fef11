"""Attention in torch, on any device: FlashAttention-2's tiled forward in two rungs, and its recomputing backward.

A ladder (each rung: what changed, what it no longer materializes, what that buys):
  0. `lab.attention_reference` : numpy float64, the full N×M scores; the oracle.
  1. `attention_torch_naive`   : softmax(scale·Q Kᵀ) V in torch, S and P both N×M in memory.
  2. `flash_attention_torch_forward(variant="fa2")`, the default: Algorithm 1 of FlashAttention-2 (Dao
     2023, arXiv 2307.08691). Query blocks Q_i outside, key/value blocks K_j, V_j inside, the state
     (m, l, acc) per query block, one division by l at the end, only lse = m + log l kept. No N×M array:
     one Br×Bc tile of scores at a time, in one buffer. Per tile: two matmuls, a row max, a subtraction,
     an exponential (as exp2, `_LOG2E`), a row sum. Buys: an extra peak of 1/110 of naive's (H=1, N=8192,
     d=64), and at B=1, H=8, N=4096, d=64, fp32, two threads, 2.3-2.9× naive's throughput and 0.65-0.92×
     SDPA's, the low end while other programs share the cores (measured on a 2-core AMD EPYC, see
     `python -m lab.bench`); the two matmuls take most of the time.
  3. `flash_attention_torch_forward(variant="lazy")` : m is a reference, not the running max: it rides in
     the first matmul (`baddbmm` adds -m) and moves only for rows whose tile sum outgrows e^τ, so a later
     tile skips the row max, the subtraction and α. But its exponents reach τ, where exp2's premultiplication
     by log2 e rounds by ~τ float32 units, so it keeps torch's exp, 2.6× slower than exp2 here, and the
     passes it saves (~4% of a tile's time) do not pay for that: it takes 1.06-1.09× rung 2's time (measured
     on a 2-core AMD EPYC, the rungs timed interleaved; rung 2 with exp takes 1.08-1.10×).
  4. `flash_attention_torch_backward` : FlashAttention-2 backward: D = rowsum(dO ∘ O) once, then for
     each tile the scores are recomputed from q, k and the saved lse (P = exp(S - lse)),
     dS = P ∘ (dP - D); no N×M array either. Shared by both forwards.
  5. `FlashAttention` / `flash_attention_torch` : 2 or 3, and 4, joined as a `torch.autograd.Function`.

A Python loop can be fast: with blocks of hundreds of rows each step is a few batched, in-place ops over a
whole tile (a millisecond each, against microseconds of Python); unlike a fused kernel (Triton, CUDA, the
C++ SDPA kernel) it cannot keep a tile in registers between ops: each op streams the tile through the cache.

Shapes: q (..., Hq, N, d), k (..., Hkv, M, d), v (..., Hkv, M, dv), with Hq % Hkv == 0 (grouped-query
heads: query head h reads key/value head h // (Hq / Hkv)). Causal masks key j for query i when
j > i + (M - N) (bottom-right alignment). Accumulators are float32 (float64 for float64 inputs);
`o` comes back in the input dtype, `lse` in the accumulator dtype.

Taught in: notebooks/08_hardware_runs.ipynb, notebooks/09_backward.ipynb
"""

from __future__ import annotations

import functools
import math

import torch
from torch.autograd.function import once_differentiable

from ._checks import check_block, check_causal, check_choice, check_qkv_tensors, check_scale
from ._tiles import TilePlan, score_mod_grad
from .kernels.rung1_naive import standard_attention_torch
from .masks import check_mods, index_arrays

__all__ = ["flash_attention_torch", "flash_attention_torch_forward", "flash_attention_torch_backward",
           "attention_torch_naive", "FlashAttention", "torch_default_blocks"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# Bytes of one tile of scores (all batch × head rows of a query block against one key block) the defaults aim at:
# large enough that Python's per-op overhead vanishes, small enough to stay near a CPU's cache and far below N×M.
_TILE_BYTES = {"cpu": 4 * 2**20, "cuda": 64 * 2**20}
_MAX_ROWS = {"cpu": 1024}                                             # Br's cap on a CPU

# τ: the lazy forward exponentiates each tile against the reference it has, and lets a row's sum of P_ij grow
# to e^τ ≈ 2981 before it moves that row's reference: far from float32's overflow near e^88.
LOG_BOUND = 8.0
# e^x = 2^(x log2 e): torch's exp2 ran 2.6× faster than its exp on a 2-core AMD EPYC (AVX-512), and
# FlashAttention-2's own kernels exponentiate the same way. Multiplying after the subtraction keeps x exact.
_LOG2E = 1 / math.log(2)

VARIANTS = ("fa2", "lazy")                                            # the forward's rungs, textbook first
DEFAULT_VARIANT = "fa2"                                               # the faster on a 2-core AMD EPYC


def torch_default_blocks(device, N: int, M: int, rows: int = 1, itemsize: int = 4) -> tuple[int, int]:
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


def _layout(q, k, v, group):
    """q as (Z, G, N, d), k and v as (Z, M, d) and (Z, M, dv) in the accumulator dtype dt (float32, float64 for
    float64 inputs); Z = batch × kv heads. Returns q4, k3, v3, dt."""
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    Z = math.prod(k.shape[:-2])                                       # batch × kv heads
    q4 = q.reshape(Z, group, N, d)                                    # (Z, G, N, d), a view
    k3 = k.reshape(Z, M, d).to(dt)                                    # (Z, M, d); no copy when dt matches
    v3 = v.reshape(Z, M, dv).to(dt)                                   # (Z, M, dv)
    return q4, k3, v3, dt


def _blocks(q, k, block_q, block_k, group, blocks=None):
    N, M = q.shape[-2], k.shape[-2]
    if blocks is not None:                                            # a precomputed block mask fixes the tile sizes
        block_q = getattr(blocks, "block_q", None) if block_q is None else block_q
        block_k = getattr(blocks, "block_k", None) if block_k is None else block_k
    rows = max(1, math.prod(q.shape[:-2]))                            # batch × query heads sharing a tile
    Br, Bc = torch_default_blocks(q.device, max(N, 1), max(M, 1), rows=rows)
    return (Br if block_q is None else check_block(block_q, "block_q"), Bc if block_k is None else check_block(block_k, "block_k"))


def _check_common(q, k, v, block_q, block_k, scale, blocks=None, stats=None):
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be a dict or None, got {type(stats).__name__}")
    group = check_qkv_tensors(q, k, v, dtypes=_FLOATS)
    Br, Bc = _blocks(q, k, block_q, block_k, group, blocks)
    return group, Br, Bc, check_scale(scale, q.shape[-1])


def _plan(q, k, Br, Bc, causal, mask_mod, score_mod, blocks, grad=False) -> TilePlan:
    """Check the mods (before any work) and plan the tiles: which to compute, which need mask work."""
    check_mods(mask_mod, score_mod, tuple(q.shape), tuple(k.shape), like=q, grad=grad)
    if blocks is not None and q.dim() != 4:
        raise ValueError(f"block_mask needs 4-D q, k, v of shape (B, H, N, d), got q of rank {q.dim()}")
    N, M = q.shape[-2], k.shape[-2]
    shape = (q.shape[0], q.shape[1], N, M) if q.dim() == 4 else (1, 1, N, M)
    return TilePlan(shape, Br, Bc, causal, mask_mod, score_mod, blocks, like=q)


def _scores(q_i, k_j, buf, i0, i1, j0, j1, ib, jb, plan, m=None):
    """$S_{ij} = \\mathrm{scale}\\,Q_iK_j^\\top$ (`q_i` holds scale·Q_i) into `buf`, score_mod and the mask applied
    (masked entries $-\\infty$); with a reference `m`, $S_{ij} - m$: the matmul adds $-m$ as its input (`baddbmm`)."""
    Z, rows, _ = q_i.shape
    n, w = i1 - i0, j1 - j0
    out = buf[: Z * rows * w].view(Z, rows, w)
    if m is not None and plan.score_mod is None:
        s = torch.baddbmm(m.unsqueeze(-1), q_i, k_j.transpose(1, 2), beta=-1, out=out)  # S_ij - m: (Z, G·Br, Bc)
    else:
        s = torch.bmm(q_i, k_j.transpose(1, 2), out=out)                  # S_ij: (Z, G·Br, Bc)
    if not plan.untouched(ib, jb):
        view = s.view(plan.B, plan.H, n, w) if plan.mods else s.view(Z, rows // n, n, w)
        plan.apply(view, i0, i1, j0, j1, ib, jb)                          # score_mod, then the mask
    if m is not None and plan.score_mod is not None:
        s.sub_(m.unsqueeze(-1))                                           # S'_ij - m
    return s


def _fa2_step(scores, m, l, acc, v_j):
    """Algorithm 1's update by the tile `scores()` $= S_{ij}$, in place: the running max $m$, then $\\alpha$ on l and acc.
    $m' = \\max(m, \\mathrm{rowmax} S_{ij})$ is a score (or the old m), so $S_{ij} - m'$ carries no rounding of $m$.
    A row with no key yet holds $m$ = the lowest float, not $-\\infty$ ($-\\infty - (-\\infty)$ is NaN), and l = acc = 0."""
    s = scores()                                                          # S_ij: (Z, G·Br, Bc)
    m_new = torch.maximum(m, s.amax(dim=-1))                              # m' = max(m, rowmax S_ij)
    p = s.sub_(m_new.unsqueeze(-1)).mul_(_LOG2E).exp2_()                  # P_ij = exp(S_ij - m')
    alpha = torch.exp(m - m_new)                                          # α = exp(m - m')
    l.mul_(alpha).add_(p.sum(dim=-1))                                     # l = α l + rowsum P_ij
    acc.mul_(alpha.unsqueeze(-1)).baddbmm_(p, v_j)                        # acc = α acc + P_ij V_j
    m.copy_(m_new)                                                        # m = m'
    return alpha


def _lazy_step(scores, m, l, acc, v_j, count):
    """The lazily rescaled update, in place: $P_{ij} = e^{S_{ij} - m}$ against the reference the rows have, then
    $l \\leftarrow l + \\mathrm{rowsum} P_{ij}$ and $acc \\leftarrow acc + P_{ij}V_j$; no row max and no α unless a row sum
    outgrows $e^\\tau$ (`_rescale_rows`) or the exponential overflows (then Algorithm 1's step, `_fa2_step`)."""
    s = scores(m)                                                         # S_ij - m, m riding in the matmul
    p_sum = s.exp_().sum(dim=-1)                                          # P_ij = exp(S_ij - m); rowsum P_ij
    top = float(p_sum.amax())                                             # the largest row sum (a sync on a GPU)
    if not math.isfinite(top):                                            # overflow, or a row's first key: exactly
        count["recomputed"] += 1
        return _fa2_step(scores, m, l, acc, v_j)
    if top > math.exp(LOG_BOUND):                                         # some rows outgrew e^τ: they move m
        count["rescaled"] += 1
        p_sum = _rescale_rows(s, p_sum, m, l, acc, math.exp(LOG_BOUND))
    l.add_(p_sum)                                                         # l = l + rowsum P_ij
    acc.baddbmm_(s, v_j)                                                  # acc = acc + P_ij V_j


def _rescale_rows(p, p_sum, m, l, acc, bound: float):
    """Rows of $p = e^{S_{ij} - m}$ whose sum $r$ exceeds `bound` move their reference to $m' = m + \\log r$: $p$, l and
    acc are multiplied by $\\alpha = e^{m - m'}$ (other rows by 1), in place; returns $\\mathrm{rowsum}\\,p$ after.
    $\\alpha$ comes from the stored $m'$ (rounded by up to 5e-4 at $|m| = 10^4$ in float32), not $1/r$: the rounding
    then cancels in $o = acc / l$ instead of weighting the tiles before and after the move differently."""
    m_new = torch.where(p_sum > bound, m + torch.log(p_sum), m)               # m' = m + log r, as stored
    alpha = torch.exp(m - m_new)                                              # α = exp(m - m'), exact for that m'
    m.copy_(m_new)
    p.mul_(alpha.unsqueeze(-1))
    l.mul_(alpha)
    acc.mul_(alpha.unsqueeze(-1))
    return p_sum * alpha


def _variant(variant):
    return DEFAULT_VARIANT if variant is None else check_choice(variant, VARIANTS, "variant")


@torch.no_grad()
def flash_attention_torch_forward(q, k, v, *, causal: bool = False, scale=None, block_q=None, block_k=None,
                                  stats: dict | None = None, mask_mod=None, score_mod=None, block_mask=None,
                                  variant=None):
    """Tiled FlashAttention-2 forward; returns `(o, lse)` with $o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$ and $lse = m + \\log l$.

    For each query block $Q_i$ ($B_r$ rows, all heads at once) the state $m, l, acc$ starts at (the lowest
    float, 0, 0), each computed key block $K_j, V_j$ ($B_c$ rows) updates it by one step, and finally
    $o = acc / l$ (0 where l = 0), $lse = m + \\log l$ ($-\\infty$ where l = 0). `variant="fa2"` (`None`, the
    default: the faster on a 2-core AMD EPYC): Algorithm 1's step on every tile. `variant="lazy"`: that step
    on a query block's first tile, then `_lazy_step`, which moves m only for rows whose tile sum $r$ exceeds
    $e^\\tau$ (τ = `LOG_BOUND`), to $m + \\log r$; a tile whose exponential overflows, or in which a row meets
    its first key, is recomputed with Algorithm 1's step. `None` block sizes: `torch_default_blocks`.
    `stats` receives the counts of tiles, `"tiles"`; of later tiles in which some row moved m, `"rescaled"`
    (fa2: its running max grew; lazy: its tile sum outgrew $e^\\tau$); of tiles recomputed, `"recomputed"`.
    `score_mod` and `mask_mod` (4-D inputs) act on each tile before its step; empty tiles of `lab.block_mask`
    are skipped (a precomputed `block_mask` may be passed). No input is changed.
    Taught in: notebooks/08_hardware_runs.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    variant = _variant(variant)
    group, Br, Bc, scale = _check_common(q, k, v, block_q, block_k, scale, block_mask, stats)
    causal = check_causal(causal)
    plan = _plan(q, k, Br, Bc, causal, mask_mod, score_mod, block_mask)
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q4, k3, v3, dt = _layout(q, k, v, group)
    Z, G = q4.shape[0], group
    o = torch.empty(q.shape[:-1] + (dv,), dtype=q.dtype, device=q.device)     # (..., N, dv)
    lse = torch.empty(q.shape[:-1], dtype=dt, device=q.device)               # (..., N)
    o4, lse3 = o.view(Z, G, N, dv), lse.view(Z, G, N)
    buf = torch.empty(Z * G * min(Br, N) * min(Bc, M), dtype=dt, device=q.device)  # one tile: S_ij, then P_ij
    count = dict(tiles=0, rescaled=0, recomputed=0)
    for ib, i0 in enumerate(range(0, N, Br)):
        i1 = min(i0 + Br, N)
        n = i1 - i0
        q_i = (q4[:, :, i0:i1].to(dt) * scale).reshape(Z, G * n, d)          # scale·Q_i: (Z, G·Br, d)
        m = torch.full((Z, G * n), torch.finfo(dt).min, dtype=dt, device=q.device)  # m: the lowest float for -∞
        l = torch.zeros((Z, G * n), dtype=dt, device=q.device)               # l = Σ_j rowsum P_ij
        acc = torch.zeros((Z, G * n, dv), dtype=dt, device=q.device)         # acc = Σ_j P_ij V_j
        for nth, jb in enumerate(plan.keys(ib)):                             # empty tiles: K_j, V_j never loaded
            j0, j1 = jb * Bc, min(jb * Bc + Bc, M)
            count["tiles"] += 1
            scores = functools.partial(_scores, q_i, k3[:, j0:j1], buf, i0, i1, j0, j1, ib, jb, plan)  # S_ij (- m)
            if variant == "fa2" or nth == 0:
                alpha = _fa2_step(scores, m, l, acc, v3[:, j0:j1])
                if nth > 0 and stats is not None:                            # fa2: did some row's max grow?
                    count["rescaled"] += int(bool((alpha < 1).any()))
            else:
                _lazy_step(scores, m, l, acc, v3[:, j0:j1], count)
        seen = l > 0
        o4[:, :, i0:i1] = (acc / l.masked_fill(~seen, 1.0).unsqueeze(-1)).view(Z, G, n, dv)  # o = acc / l
        lse3[:, :, i0:i1] = torch.where(seen, m + torch.log(l), -math.inf).view(Z, G, n)      # lse = m + log l
    if stats is not None:
        stats.update(count)
    return o, lse


@torch.no_grad()
def flash_attention_torch_backward(q, k, v, o, lse, do, *, causal: bool = False, scale=None,
                                   block_q=None, block_k=None, mask_mod=None, score_mod=None, block_mask=None):
    """FlashAttention-2 backward from the saved `lse`; returns `(dq, dk, dv)` in the input dtype.

    $D = \\mathrm{rowsum}(dO \\circ O)$; per tile $P_{ij} = e^{\\mathrm{scale}\\,Q_iK_j^\\top - lse_i}$,
    $dV_j \\mathrel{+}= P_{ij}^\\top dO_i$, $dP_{ij} = dO_i V_j^\\top$, $dS_{ij} = P_{ij} \\circ (dP_{ij} - D_i)$,
    $dQ_i \\mathrel{+}= \\mathrm{scale}\\, dS_{ij} K_j$, $dK_j \\mathrel{+}= \\mathrm{scale}\\, dS_{ij}^\\top Q_i$
    (summed over the query heads of a group). Key blocks outside, query blocks inside.
    With mods, P is recomputed from the modified, masked scores and $dS$ is carried back through
    score_mod: $dS_{ij} \\leftarrow dS_{ij} \\circ \\partial s'/\\partial s$ (1 for ALiBi, $1 - \\tanh^2(s/\\mathrm{cap})$ for
    softcap, torch autograd on the tile for any other score_mod); empty tiles are skipped.
    Taught in: notebooks/09_backward.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    group, Br, Bc, scale = _check_common(q, k, v, block_q, block_k, scale, block_mask)
    if o.shape != q.shape[:-1] + v.shape[-1:] or do.shape != o.shape:
        raise ValueError(f"o and do must have shape {tuple(q.shape[:-1] + v.shape[-1:])}, got {tuple(o.shape)} and {tuple(do.shape)}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}")
    causal = check_causal(causal)
    plan = _plan(q, k, Br, Bc, causal, mask_mod, score_mod, block_mask)
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q4, k3, v3, dt = _layout(q, k, v, group)
    Z, G = q4.shape[0], group
    do4 = do.reshape(Z, G, N, dv).to(dt)                                      # (Z, G, N, dv)
    D = (do4 * o.reshape(Z, G, N, dv).to(dt)).sum(dim=-1)                     # D = rowsum(dO ∘ O): (Z, G, N)
    lse_use = lse.reshape(Z, G, N).to(dt)
    lse_use = lse_use.masked_fill(lse_use == -math.inf, math.inf)             # rows with no key: P = 0
    dq = torch.zeros((Z, G, N, d), dtype=dt, device=q.device)                 # (Z, G, N, d)
    dk = torch.zeros((Z, M, d), dtype=dt, device=q.device)                    # (Z, M, d)
    dv_ = torch.zeros((Z, M, dv), dtype=dt, device=q.device)                  # (Z, M, dv)
    for jb, j0 in enumerate(range(0, M, Bc)):
        j1 = min(j0 + Bc, M)
        w = j1 - j0
        k_j, v_j = k3[:, j0:j1], v3[:, j0:j1]                                 # (Z, Bc, d), (Z, Bc, dv)
        dk_j, dv_j = dk[:, j0:j1], dv_[:, j0:j1]                              # views, accumulated in place
        for ib in plan.queries(jb):                                           # query blocks with a kept element here
            i0, i1 = ib * Br, min(ib * Br + Br, N)
            n = i1 - i0
            q_i = q4[:, :, i0:i1].to(dt).reshape(Z, G * n, d)                 # (Z, G·Br, d)
            do_i = do4[:, :, i0:i1].reshape(Z, G * n, dv)                     # (Z, G·Br, dv)
            s = torch.bmm(q_i, k_j.transpose(1, 2)).mul_(scale)               # S_ij: (Z, G·Br, Bc)
            raw = s.clone() if plan.score_mod is not None else None           # score_mod's derivative needs S_ij
            keep = None
            if not plan.untouched(ib, jb):
                view = s.view(plan.B, plan.H, n, w) if plan.mods else s.view(Z, G, n, w)
                keep = plan.apply(view, i0, i1, j0, j1, ib, jb)              # S'_ij: score_mod, then the mask
            p = s.sub_(lse_use[:, :, i0:i1].reshape(Z, G * n, 1)).exp_()       # P_ij = exp(S'_ij - lse_i)
            dv_j.baddbmm_(p.transpose(1, 2), do_i)                            # dV_j += P_ijᵀ dO_i
            dp = torch.bmm(do_i, v_j.transpose(1, 2))                         # dP_ij: (Z, G·Br, Bc)
            ds = dp.sub_(D[:, :, i0:i1].reshape(Z, G * n, 1)).mul_(p)         # dS'_ij = P_ij ∘ (dP_ij - D_i)
            if raw is not None:                                               # dS_ij = dS'_ij ∘ ∂s'/∂s
                shape4 = (plan.B, plan.H, n, w)
                idx = index_arrays(plan.B, plan.H, i0, i1, j0, j1, q)
                g = score_mod_grad(plan.score_mod, raw.view(shape4), ds.view(shape4), idx)
                ds = (g if keep is None else g.masked_fill(~keep, 0.0)).reshape(Z, G * n, w)
            dq[:, :, i0:i1] += torch.bmm(ds, k_j).view(Z, G, n, d) * scale    # dQ_i += scale dS_ij K_j
            dk_j.baddbmm_(ds.transpose(1, 2), q_i, alpha=scale)               # dK_j += scale dS_ijᵀ Q_i
            del s, p, dp, ds                                                  # free the tiles before the next ones
    return (dq.reshape(q.shape).to(q.dtype), dk.reshape(k.shape).to(k.dtype), dv_.reshape(v.shape).to(v.dtype))


class FlashAttention(torch.autograd.Function):
    """`FlashAttention.apply(q, k, v, causal=False, scale=None, block_q=None, block_k=None, mask_mod=None, score_mod=None, stats=None, block_mask=None, variant=None) -> o`.

    Forward: `flash_attention_torch_forward` (either variant), saving only q, k, v, o and lse (no N×M array; no other
    tensor of shape (..., N)). Backward: `flash_attention_torch_backward`, recomputing P tile by tile.
    The tiles' kinds are found once, in the forward, and reused by the backward.
    Taught in: notebooks/09_backward.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """

    @staticmethod
    def forward(ctx, q, k, v, causal=False, scale=None, block_q=None, block_k=None, mask_mod=None, score_mod=None,
                stats=None, block_mask=None, variant=None):
        variant = _variant(variant)
        _, Br, Bc, _ = _check_common(q, k, v, block_q, block_k, scale, block_mask, stats)
        causal = check_causal(causal)
        blocks = _plan(q, k, Br, Bc, causal, mask_mod, score_mod, block_mask).blocks
        o, lse = flash_attention_torch_forward(q, k, v, causal=causal, scale=scale, block_q=Br, block_k=Bc, stats=stats,
                                               mask_mod=mask_mod, score_mod=score_mod, block_mask=blocks, variant=variant)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.settings = dict(causal=causal, scale=scale, block_q=Br, block_k=Bc, mask_mod=mask_mod, score_mod=score_mod,
                            block_mask=blocks)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        """The gradients once; a second derivative raises (the kernel's backward is not itself differentiable)."""
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_torch_backward(q, k, v, o, lse, do.contiguous(), **ctx.settings)
        return (dq, dk, dv) + (None,) * 9


def flash_attention_torch(q, k, v, *, block_q=None, block_k=None, causal: bool = False, scale=None,
                          return_lse: bool = False, mask_mod=None, score_mod=None, stats: dict | None = None,
                          block_mask=None, variant=None):
    """$o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$ by the tiled kernel, differentiable through `FlashAttention`.

    Torch tensors on any device; `None` block sizes mean `torch_default_blocks` for the device.
    `return_lse=True` returns `(o, lse)` (lse is not differentiable). No input is changed.
    `score_mod(s, b, h, i, j)` and `mask_mod(b, h, i, j)` (4-D inputs; `h` the query head) act on each tile
    before the softmax, empty tiles are skipped (`block_mask`: a precomputed `lab.block_mask`), `stats`
    receives the forward's counts, and `variant` picks its rung, "fa2" or "lazy" (`None`: "fa2").
    Taught in: notebooks/08_hardware_runs.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    variant = _variant(variant)                                              # errors before any work
    _check_common(q, k, v, block_q, block_k, scale, block_mask, stats)
    check_causal(causal)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    check_mods(mask_mod, score_mod, tuple(q.shape), tuple(k.shape), like=q, grad=grad)
    if return_lse and not grad:
        return flash_attention_torch_forward(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k, stats=stats,
                                             mask_mod=mask_mod, score_mod=score_mod, block_mask=block_mask, variant=variant)
    o = FlashAttention.apply(q, k, v, causal, scale, block_q, block_k, mask_mod, score_mod, stats, block_mask, variant)
    return (o, o.grad_fn.saved_tensors[4].detach()) if return_lse else o    # the lse saved for backward


def attention_torch_naive(q, k, v, *, causal: bool = False, scale=None):
    """Standard attention $o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$ in torch, in the input dtype: S and P both N×M.

    The naive rung's torch twin (`lab.standard_attention_torch`) with no autograd: the baseline every torch
    rung is measured against. Grouped-query heads are expanded to the query heads first, as plain code would.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    with torch.no_grad():
        return standard_attention_torch(q, k, v, causal=causal, scale=scale)
