"""Attention in torch, on any device: the public entry of the torch rungs (4 and 5 of `lab/kernels/`), their backward, and autograd.

  * `flash_attention_torch_forward(..., variant=)` : the checks, the tile plan, then rung 4's loops
    (`lab/kernels/rung4_torch_fa2.py`) with its step on every tile (`variant="fa2"`, the default on every device:
    the textbook rung; `DEFAULT_VARIANT` says what was measured) or rung 5's lazy step after a query block's first tile (`variant="lazy"`,
    `lab/kernels/rung5_torch_lazy.py`). Returns `(o, lse)`.
  * `flash_attention_torch_backward` : FlashAttention-2's backward (Dao 2023, Algorithm 2): D = rowsum(dO ∘ O)
    once, then for each tile the scores are recomputed from q, k and the saved lse (P = exp(S - lse)),
    dS = P ∘ (dP - D); no N×M array either. Shared by both forwards.
  * `FlashAttention` / `flash_attention_torch` : the forward and the backward joined as a `torch.autograd.Function`.
  * `attention_torch_naive` : rung 1 in torch without autograd, the baseline the torch rungs are measured against.

Shapes: q (..., Hq, N, d), k (..., Hkv, M, d), v (..., Hkv, M, dv), with Hq % Hkv == 0 (grouped-query
heads: query head h reads key/value head h // (Hq / Hkv)). Causal masks key j for query i when
j > i + (M - N) (bottom-right alignment). Accumulators are float32 (float64 for float64 inputs);
`o` comes back in the input dtype, `lse` in the accumulator dtype.

Taught in: notebooks/08_hardware_runs.ipynb, notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ._tiles import TilePlan, score_mod_grad
from .kernels.rung1_naive import standard_attention_torch
from .kernels.rung4_torch_fa2 import layout, tiled_forward, torch_default_blocks
from .kernels.rung5_torch_lazy import lazy_step
from .masks import check_mods, index_arrays
from .validate import (
    check_block,
    check_causal,
    check_choice,
    check_qkv_tensors,
    check_scale,
)

__all__ = [
    "flash_attention_torch",
    "flash_attention_torch_forward",
    "flash_attention_torch_backward",
    "attention_torch_naive",
    "FlashAttention",
]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

VARIANTS = ("fa2", "lazy")  # the forward's rungs, textbook first
# variant=None is "fa2" on every device: the textbook rung. Neither rung is the faster everywhere (B = 1,
# H = 8, N = 4096, d = 64, float32, two threads): "lazy" took 1.06-1.12x "fa2"'s time on a 2-core AMD EPYC
# and 0.87x (286 against 330 ms) on a 2-core Intel Xeon with AVX-512, whose exp is relatively faster.
DEFAULT_VARIANT = "fa2"


def _blocks(q, k, block_q, block_k, group, blocks=None):
    N, M = q.shape[-2], k.shape[-2]
    if blocks is not None:  # a precomputed block mask fixes the tile sizes
        block_q = getattr(blocks, "block_q", None) if block_q is None else block_q
        block_k = getattr(blocks, "block_k", None) if block_k is None else block_k
    rows = max(1, math.prod(q.shape[:-2]))  # batch × query heads sharing a tile
    Br, Bc = torch_default_blocks(q.device, max(N, 1), max(M, 1), rows=rows)
    return (
        Br if block_q is None else check_block(block_q, "block_q"),
        Bc if block_k is None else check_block(block_k, "block_k"),
    )


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
        raise ValueError(
            f"block_mask needs 4-D q, k, v of shape (B, H, N, d), got q of rank {q.dim()}"
        )
    N, M = q.shape[-2], k.shape[-2]
    shape = (q.shape[0], q.shape[1], N, M) if q.dim() == 4 else (1, 1, N, M)
    return TilePlan(shape, Br, Bc, causal, mask_mod, score_mod, blocks, like=q)


def _variant(variant):
    return (
        DEFAULT_VARIANT
        if variant is None
        else check_choice(variant, VARIANTS, "variant")
    )


@torch.no_grad()
def flash_attention_torch_forward(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale=None,
    block_q=None,
    block_k=None,
    stats: dict | None = None,
    mask_mod=None,
    score_mod=None,
    block_mask=None,
    variant=None,
):
    """Tiled FlashAttention-2 forward; returns `(o, lse)` with $o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$ and $lse = m + \\log l$.

    For each query block $Q_i$ ($B_r$ rows, all heads at once) the state $m, l, acc$ starts at (the lowest
    float, 0, 0), each computed key block $K_j, V_j$ ($B_c$ rows) updates it by one step, and finally
    $o = acc / l$ (0 where l = 0), $lse = m + \\log l$ ($-\\infty$ where l = 0). `variant="fa2"` (`None`, the
    default on every device; `DEFAULT_VARIANT`): Algorithm 1's step on every tile. `variant="lazy"`: that step
    on a query block's first tile, then the lazy step, which moves m only for rows whose tile sum $r$ exceeds
    $e^\\tau$ (τ = `LOG_BOUND`), to $m + \\log r$; a tile whose exponential overflows, or in which a row meets
    its first key, is recomputed with Algorithm 1's step (rung 4's `fa2_step`, rung 5's `lazy_step`, in
    `lab/kernels/`). `None` block sizes: `torch_default_blocks`.
    `stats` receives the counts of tiles, `"tiles"`; of later tiles in which some row moved m, `"rescaled"`
    (fa2: its running max grew; lazy: its tile sum outgrew $e^\\tau$); of tiles recomputed, `"recomputed"`.
    `score_mod` and `mask_mod` (4-D inputs) act on each tile before its step; empty tiles of `lab.block_mask`
    are skipped (a precomputed `block_mask` may be passed). No input is changed.
    Taught in: notebooks/08_hardware_runs.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    variant = _variant(variant)
    _, Br, Bc, scale = _check_common(
        q, k, v, block_q, block_k, scale, block_mask, stats
    )
    plan = _plan(q, k, Br, Bc, check_causal(causal), mask_mod, score_mod, block_mask)
    o, lse, count = tiled_forward(
        q,
        k,
        v,
        plan,
        scale,
        later_step=lazy_step if variant == "lazy" else None,
        stats=stats,
    )
    if stats is not None:
        stats.update(count)
    return o, lse


@torch.no_grad()
def flash_attention_torch_backward(
    q,
    k,
    v,
    o,
    lse,
    do,
    *,
    causal: bool = False,
    scale=None,
    block_q=None,
    block_k=None,
    mask_mod=None,
    score_mod=None,
    block_mask=None,
):
    """FlashAttention-2 backward from the saved `lse`; returns `(dq, dk, dv)` in the input dtype.

    $D = \\mathrm{rowsum}(dO \\circ O)$; per tile $P_{ij} = e^{\\mathrm{scale}\\,Q_iK_j^\\top - lse_i}$,
    $dV_j \\mathrel{+}= P_{ij}^\\top dO_i$, $dP_{ij} = dO_i V_j^\\top$, $dS_{ij} = P_{ij} \\circ (dP_{ij} - D_i)$,
    $dQ_i \\mathrel{+}= \\mathrm{scale}\\, dS_{ij} K_j$, $dK_j \\mathrel{+}= \\mathrm{scale}\\, dS_{ij}^\\top Q_i$
    (summed over the query heads of a group). Key blocks outside, query blocks inside.
    With mods, P is recomputed from the modified, masked scores and $dS$ is carried back through
    score_mod: $dS_{ij} \\leftarrow dS_{ij} \\circ \\partial s'/\\partial s$ (1 for ALiBi, $1 - \\tanh^2(s/\\mathrm{cap})$ for
    softcap, torch autograd on the tile for any other score_mod); empty tiles are skipped.
    Taught in: notebooks/09_tiled_backward.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    group, Br, Bc, scale = _check_common(q, k, v, block_q, block_k, scale, block_mask)
    if o.shape != q.shape[:-1] + v.shape[-1:] or do.shape != o.shape:
        raise ValueError(
            f"o and do must have shape {tuple(q.shape[:-1] + v.shape[-1:])}, got {tuple(o.shape)} and {tuple(do.shape)}"
        )
    if lse.shape != q.shape[:-1]:
        raise ValueError(
            f"lse must have shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}"
        )
    causal = check_causal(causal)
    plan = _plan(q, k, Br, Bc, causal, mask_mod, score_mod, block_mask)
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q4, k3, v3, dt = layout(q, k, v, group)
    Z, G = q4.shape[0], group
    do4 = do.reshape(Z, G, N, dv).to(dt)  # (Z, G, N, dv)
    D = (do4 * o.reshape(Z, G, N, dv).to(dt)).sum(
        dim=-1
    )  # D = rowsum(dO ∘ O): (Z, G, N)
    lse_use = lse.reshape(Z, G, N).to(dt)
    lse_use = lse_use.masked_fill(
        lse_use == -math.inf, math.inf
    )  # rows with no key: P = 0
    dq = torch.zeros((Z, G, N, d), dtype=dt, device=q.device)  # (Z, G, N, d)
    dk = torch.zeros((Z, M, d), dtype=dt, device=q.device)  # (Z, M, d)
    dv_ = torch.zeros((Z, M, dv), dtype=dt, device=q.device)  # (Z, M, dv)
    for jb, j0 in enumerate(range(0, M, Bc)):
        j1 = min(j0 + Bc, M)
        w = j1 - j0
        k_j, v_j = k3[:, j0:j1], v3[:, j0:j1]  # (Z, Bc, d), (Z, Bc, dv)
        dk_j, dv_j = dk[:, j0:j1], dv_[:, j0:j1]  # views, accumulated in place
        for ib in plan.queries(jb):  # query blocks with a kept element here
            i0, i1 = ib * Br, min(ib * Br + Br, N)
            n = i1 - i0
            q_i = q4[:, :, i0:i1].to(dt).reshape(Z, G * n, d)  # (Z, G·Br, d)
            do_i = do4[:, :, i0:i1].reshape(Z, G * n, dv)  # (Z, G·Br, dv)
            s = torch.bmm(q_i, k_j.transpose(1, 2)).mul_(scale)  # S_ij: (Z, G·Br, Bc)
            raw = (
                s.clone() if plan.score_mod is not None else None
            )  # score_mod's derivative needs S_ij
            keep = None
            if not plan.untouched(ib, jb):
                view = s.view(plan.B, plan.H, n, w) if plan.mods else s.view(Z, G, n, w)
                keep = plan.apply(
                    view, i0, i1, j0, j1, ib, jb
                )  # S'_ij: score_mod, then the mask
            p = s.sub_(
                lse_use[:, :, i0:i1].reshape(Z, G * n, 1)
            ).exp_()  # P_ij = exp(S'_ij - lse_i)
            dv_j.baddbmm_(p.transpose(1, 2), do_i)  # dV_j += P_ijᵀ dO_i
            dp = torch.bmm(do_i, v_j.transpose(1, 2))  # dP_ij: (Z, G·Br, Bc)
            ds = dp.sub_(D[:, :, i0:i1].reshape(Z, G * n, 1)).mul_(
                p
            )  # dS'_ij = P_ij ∘ (dP_ij - D_i)
            if raw is not None:  # dS_ij = dS'_ij ∘ ∂s'/∂s
                shape4 = (plan.B, plan.H, n, w)
                idx = index_arrays(plan.B, plan.H, i0, i1, j0, j1, q)
                g = score_mod_grad(
                    plan.score_mod, raw.view(shape4), ds.view(shape4), idx
                )
                ds = (g if keep is None else g.masked_fill(~keep, 0.0)).reshape(
                    Z, G * n, w
                )
            dq[:, :, i0:i1] += (
                torch.bmm(ds, k_j).view(Z, G, n, d) * scale
            )  # dQ_i += scale dS_ij K_j
            dk_j.baddbmm_(
                ds.transpose(1, 2), q_i, alpha=scale
            )  # dK_j += scale dS_ijᵀ Q_i
            del s, p, dp, ds  # free the tiles before the next ones
    return (
        dq.reshape(q.shape).to(q.dtype),
        dk.reshape(k.shape).to(k.dtype),
        dv_.reshape(v.shape).to(v.dtype),
    )


class FlashAttention(torch.autograd.Function):
    """`FlashAttention.apply(q, k, v, causal=False, scale=None, block_q=None, block_k=None, mask_mod=None, score_mod=None, stats=None, block_mask=None, variant=None, return_lse=False) -> o`.

    Forward: `flash_attention_torch_forward` (either variant), saving only q, k, v, o and lse (no N×M array; no other
    tensor of shape (..., N)); with `return_lse=True` it returns `(o, lse)`, lse marked non-differentiable.
    Backward: `flash_attention_torch_backward`, recomputing P tile by tile.
    The tiles' kinds are found once, in the forward, and reused by the backward.
    Taught in: notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """

    @staticmethod
    def forward(
        ctx,
        q,
        k,
        v,
        causal=False,
        scale=None,
        block_q=None,
        block_k=None,
        mask_mod=None,
        score_mod=None,
        stats=None,
        block_mask=None,
        variant=None,
        return_lse=False,
    ):
        variant = _variant(variant)
        _, Br, Bc, _ = _check_common(
            q, k, v, block_q, block_k, scale, block_mask, stats
        )
        causal = check_causal(causal)
        blocks = _plan(q, k, Br, Bc, causal, mask_mod, score_mod, block_mask).blocks
        o, lse = flash_attention_torch_forward(
            q,
            k,
            v,
            causal=causal,
            scale=scale,
            block_q=Br,
            block_k=Bc,
            stats=stats,
            mask_mod=mask_mod,
            score_mod=score_mod,
            block_mask=blocks,
            variant=variant,
        )
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.settings = dict(
            causal=causal,
            scale=scale,
            block_q=Br,
            block_k=Bc,
            mask_mod=mask_mod,
            score_mod=score_mod,
            block_mask=blocks,
        )
        if not return_lse:
            return o
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, do, *_):
        """The gradients once (none through lse); a second derivative raises (the kernel's backward is not itself
        differentiable)."""
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_torch_backward(
            q, k, v, o, lse, do.contiguous(), **ctx.settings
        )
        return (dq, dk, dv) + (None,) * 10


def flash_attention_torch(
    q,
    k,
    v,
    *,
    block_q=None,
    block_k=None,
    causal: bool = False,
    scale=None,
    return_lse: bool = False,
    mask_mod=None,
    score_mod=None,
    stats: dict | None = None,
    block_mask=None,
    variant=None,
):
    """$o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$ by the tiled kernel, differentiable through `FlashAttention`.

    Torch tensors on any device; `None` block sizes mean `torch_default_blocks` for the device.
    `return_lse=True` returns `(o, lse)` (lse is not differentiable). No input is changed.
    `score_mod(s, b, h, i, j)` and `mask_mod(b, h, i, j)` (4-D inputs; `h` the query head) act on each tile
    before the softmax, empty tiles are skipped (`block_mask`: a precomputed `lab.block_mask`), `stats`
    receives the forward's counts, and `variant` picks its rung, "fa2" or "lazy"; `None` is "fa2" on every device (the textbook rung:
    neither is the faster on every CPU, see `DEFAULT_VARIANT`).
    Taught in: notebooks/08_hardware_runs.ipynb, notebooks/11_masks_and_score_mods.ipynb
    """
    variant = _variant(variant)  # errors before any work
    _check_common(q, k, v, block_q, block_k, scale, block_mask, stats)
    check_causal(causal)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    check_mods(mask_mod, score_mod, tuple(q.shape), tuple(k.shape), like=q, grad=grad)
    if return_lse and not grad:
        return flash_attention_torch_forward(
            q,
            k,
            v,
            causal=causal,
            scale=scale,
            block_q=block_q,
            block_k=block_k,
            stats=stats,
            mask_mod=mask_mod,
            score_mod=score_mod,
            block_mask=block_mask,
            variant=variant,
        )
    return FlashAttention.apply(
        q,
        k,
        v,
        causal,
        scale,
        block_q,
        block_k,
        mask_mod,
        score_mod,
        stats,
        block_mask,
        variant,
        return_lse,
    )


def attention_torch_naive(q, k, v, *, causal: bool = False, scale=None):
    """Standard attention $o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$ in torch, in the input dtype: S and P both N×M.

    The naive rung's torch twin (`lab.standard_attention_torch`) with no autograd: the baseline every torch
    rung is measured against. Grouped-query heads are expanded to the query heads first, as plain code would.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    with torch.no_grad():
        return standard_attention_torch(q, k, v, causal=causal, scale=scale)
