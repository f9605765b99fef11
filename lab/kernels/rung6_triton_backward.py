"""FlashAttention-2's backward as two Triton kernels, the host code that launches them, and the autograd Function.

The backward of `lab/kernels/rung6_triton.py`'s forward (FlashAttention-2, Dao 2023, Algorithm 2): the forward saved
o and lse = m + log l per query row, so no N×M array is kept. The host computes D_i = rowsum(dO_i ∘ O_i);
then two kernels recompute P_ij = exp(S_ij - lse_i) tile by tile:
  `_attn_bwd_dkdv` : one program per key block K_j, V_j (and kv head) walks every query block Q_i of its G
                     query heads and accumulates dV_j += P_ijᵀ dO_i and dK_j += scale·dS_ijᵀ Q_i;
  `_attn_bwd_dq`   : one program per query block Q_i walks the key blocks it sees and accumulates
                     dQ_i += scale·dS_ij K_j,
with dP_ij = dO_i V_jᵀ and dS_ij = P_ij ∘ (dP_ij - D_i). Each program owns what it writes: no atomics.
`flash_attention_triton_backward` launches the pair; `TritonFlashAttention` wraps forward and backward as a
`torch.autograd.Function`. Same devices, dtypes and interpreter rules as the forward (see its docstring):
compiled on CUDA tensors, Triton's interpreter on CPU tensors. `block_q` is Br, `block_k` is Bc.

Taught in: notebooks/09_tiled_backward.ipynb (and used by notebooks/08_triton_kernel.ipynb)
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ..validate import check_causal, check_qkv_shapes, check_scale
from .rung6_triton import _check_block, _load, flash_attention_triton, tl, triton

__all__ = ["flash_attention_triton_backward", "TritonFlashAttention"]


# ------------------------------------------------------------------------------------------ the backward kernels


@triton.jit
def _attn_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DEL,
    DK,
    DV_,
    scale,
    N,
    M,
    G,
    D,
    DV,
    stride_qh,
    stride_qn,
    stride_kz,
    stride_kn,
    stride_vz,
    stride_vn,
    stride_oh,
    stride_on,
    CAUSAL: tl.constexpr,
    Br: tl.constexpr,
    Bc: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """One program: dK_j, dV_j of key block K_j of one (batch, kv head), over every query row of its G query heads."""
    j = tl.program_id(0)  # which key block K_j
    kv = tl.program_id(1)  # which (batch, kv head)
    cols = j * Bc + tl.arange(0, Bc)  # the keys of K_j: (Bc,)
    feats = tl.arange(0, BLOCK_D)
    feats_v = tl.arange(0, BLOCK_DV)
    col_ok = cols < M
    k = tl.load(
        K + kv * stride_kz + cols[:, None] * stride_kn + feats[None, :],
        mask=col_ok[:, None] & (feats[None, :] < D),
        other=0.0,
    )  # K_j: (Bc, BLOCK_D)
    v = tl.load(
        V + kv * stride_vz + cols[:, None] * stride_vn + feats_v[None, :],
        mask=col_ok[:, None] & (feats_v[None, :] < DV),
        other=0.0,
    )  # V_j: (Bc, BLOCK_DV)
    dk = tl.zeros([Bc, BLOCK_D], tl.float32)
    dv = tl.zeros([Bc, BLOCK_DV], tl.float32)
    lo = 0
    if CAUSAL:
        lo = (
            tl.maximum(0, j * Bc - (M - N)) // Br * Br
        )  # query blocks before it see no key of K_j
    for g in range(0, G):
        bh = kv * G + g  # the (batch, query head)
        for i0 in range(lo, N, Br):
            rows = i0 + tl.arange(0, Br)  # the query rows of Q_i: (Br,)
            row_ok = rows < N
            q = tl.load(
                Q + bh * stride_qh + rows[:, None] * stride_qn + feats[None, :],
                mask=row_ok[:, None] & (feats[None, :] < D),
                other=0.0,
            )  # Q_i: (Br, BLOCK_D)
            do = tl.load(
                DO + bh * stride_oh + rows[:, None] * stride_on + feats_v[None, :],
                mask=row_ok[:, None] & (feats_v[None, :] < DV),
                other=0.0,
            )  # dO_i: (Br, BLOCK_DV)
            lse = tl.load(
                LSE + bh * N + rows, mask=row_ok, other=float("inf")
            )  # +inf where no key is visible
            delta = tl.load(
                DEL + bh * N + rows, mask=row_ok, other=0.0
            )  # D_i = rowsum(dO_i ∘ O_i)
            s = (
                tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            )  # S_ij: (Br, Bc)
            visible = row_ok[:, None] & col_ok[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= rows[:, None] + (M - N))
            p = tl.where(
                visible, tl.exp(s - lse[:, None]), 0.0
            )  # P_ij = exp(S_ij - lse_i)
            dv += tl.dot(
                tl.trans(p.to(do.dtype)), do, input_precision=PRECISION
            )  # dV_j += P_ijᵀ dO_i
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # dP_ij = dO_i V_jᵀ
            ds = p * (dp - delta[:, None])  # dS_ij = P_ij ∘ (dP_ij - D_i)
            dk += (
                tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION) * scale
            )  # dK_j += scale dS_ijᵀ Q_i
    tl.store(
        DK + kv * stride_kz + cols[:, None] * stride_kn + feats[None, :],
        dk.to(DK.dtype.element_ty),
        mask=col_ok[:, None] & (feats[None, :] < D),
    )
    tl.store(
        DV_ + kv * stride_vz + cols[:, None] * stride_vn + feats_v[None, :],
        dv.to(DV_.dtype.element_ty),
        mask=col_ok[:, None] & (feats_v[None, :] < DV),
    )


@triton.jit
def _attn_bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DEL,
    DQ,
    scale,
    N,
    M,
    G,
    D,
    DV,
    stride_qh,
    stride_qn,
    stride_kz,
    stride_kn,
    stride_vz,
    stride_vn,
    stride_oh,
    stride_on,
    CAUSAL: tl.constexpr,
    Br: tl.constexpr,
    Bc: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """One program: dQ_i of query block Q_i of one (batch, query head), over every key block it sees."""
    i = tl.program_id(0)  # which query block Q_i
    bh = tl.program_id(1)  # which (batch, query head)
    kv = bh // G
    rows = i * Br + tl.arange(0, Br)
    feats = tl.arange(0, BLOCK_D)
    feats_v = tl.arange(0, BLOCK_DV)
    row_ok = rows < N
    q = tl.load(
        Q + bh * stride_qh + rows[:, None] * stride_qn + feats[None, :],
        mask=row_ok[:, None] & (feats[None, :] < D),
        other=0.0,
    )
    do = tl.load(
        DO + bh * stride_oh + rows[:, None] * stride_on + feats_v[None, :],
        mask=row_ok[:, None] & (feats_v[None, :] < DV),
        other=0.0,
    )
    lse = tl.load(LSE + bh * N + rows, mask=row_ok, other=float("inf"))
    delta = tl.load(DEL + bh * N + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([Br, BLOCK_D], tl.float32)
    band = M
    if CAUSAL:
        band = tl.minimum(
            M, (i + 1) * Br + M - N
        )  # keys past the last row's last: seen by none
    for j0 in range(0, band, Bc):
        cols = j0 + tl.arange(0, Bc)
        col_ok = cols < M
        k = tl.load(
            K + kv * stride_kz + cols[:, None] * stride_kn + feats[None, :],
            mask=col_ok[:, None] & (feats[None, :] < D),
            other=0.0,
        )
        v = tl.load(
            V + kv * stride_vz + cols[:, None] * stride_vn + feats_v[None, :],
            mask=col_ok[:, None] & (feats_v[None, :] < DV),
            other=0.0,
        )
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        visible = row_ok[:, None] & col_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + (M - N))
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += (
            tl.dot(ds.to(k.dtype), k, input_precision=PRECISION) * scale
        )  # dQ_i += scale dS_ij K_j
    tl.store(
        DQ + bh * stride_qh + rows[:, None] * stride_qn + feats[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=row_ok[:, None] & (feats[None, :] < D),
    )


def flash_attention_triton_backward(
    q,
    k,
    v,
    o,
    lse,
    do,
    *,
    causal: bool = False,
    scale=None,
    block_q: int = 64,
    block_k: int = 64,
):
    """FlashAttention-2 backward as two Triton kernels; returns `(dq, dk, dv)` in the input dtype.

    $D = \\mathrm{rowsum}(dO \\circ O)$ on the host; one kernel per key block accumulates
    $dV_j = \\sum_i P_{ij}^\\top dO_i$ and $dK_j = \\mathrm{scale} \\sum_i dS_{ij}^\\top Q_i$ (over the G query heads of its
    kv head), another per query block $dQ_i = \\mathrm{scale} \\sum_j dS_{ij} K_j$, with
    $P_{ij} = e^{\\mathrm{scale}\\,Q_iK_j^\\top - lse_i}$ recomputed and $dS_{ij} = P_{ij} \\circ (dO_iV_j^\\top - D_i)$: no atomics,
    no N×M array. Same devices and dtypes as `flash_attention_triton`.
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    causal = check_causal(causal)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(
                f"{name} must be float16, bfloat16 or float32 for the Triton kernel, got {t.dtype}"
            )
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    if o.shape != q.shape[:-1] + v.shape[-1:] or do.shape != o.shape:
        raise ValueError(
            f"o and do must have shape {tuple(q.shape[:-1] + v.shape[-1:])}, got {tuple(o.shape)} and {tuple(do.shape)}"
        )
    if lse.shape != q.shape[:-1]:
        raise ValueError(
            f"lse must have shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}"
        )
    scale = check_scale(scale, q.shape[-1])
    Br, Bc = _check_block(block_q, "block_q"), _check_block(block_k, "block_k")
    kernels = _load()
    triton = kernels["triton"]
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    Z = math.prod(k.shape[:-2])
    on_cpu = q.device.type == "cpu"
    work = torch.float32 if (on_cpu and q.dtype == torch.bfloat16) else q.dtype
    q3 = q.reshape(Z * group, N, d).to(work).contiguous()  # (Z·G, N, d)
    k3 = k.reshape(Z, M, d).to(work).contiguous()  # (Z, M, d)
    v3 = v.reshape(Z, M, dv).to(work).contiguous()  # (Z, M, dv)
    do3 = do.reshape(Z * group, N, dv).to(work).contiguous()  # (Z·G, N, dv)
    delta = (
        (do3.float() * o.reshape(Z * group, N, dv).float()).sum(-1).contiguous()
    )  # D = rowsum(dO ∘ O): (Z·G, N)
    lse3 = (
        lse.reshape(Z * group, N)
        .float()
        .masked_fill(lse.reshape(Z * group, N) == -math.inf, math.inf)
        .contiguous()
    )
    dq3, dk3, dv3 = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
    if N > 0 and M > 0 and Z * group > 0:
        pair = kernels["interpreted_bwd"] if on_cpu else kernels.get("compiled_bwd")
        if pair is None:
            raise RuntimeError(
                "Triton's interpreter is off in this process (triton was imported before lab without "
                "TRITON_INTERPRET=1); start Python with TRITON_INTERPRET=1."
            )
        args = (
            scale,
            N,
            M,
            group,
            d,
            dv,
            q3.stride(0),
            q3.stride(1),
            k3.stride(0),
            k3.stride(1),
            v3.stride(0),
            v3.stride(1),
            do3.stride(0),
            do3.stride(1),
        )
        meta = dict(
            CAUSAL=causal,
            Br=Br,
            Bc=Bc,
            BLOCK_D=max(16, triton.next_power_of_2(d)),
            BLOCK_DV=max(16, triton.next_power_of_2(dv)),
            PRECISION="ieee" if work == torch.float32 else "tf32",
        )
        pair[0][(triton.cdiv(M, Bc), Z)](
            q3, k3, v3, do3, lse3, delta, dk3, dv3, *args, **meta
        )
        pair[1][(triton.cdiv(N, Br), Z * group)](
            q3, k3, v3, do3, lse3, delta, dq3, *args, **meta
        )
    else:
        dq3.zero_(), dk3.zero_(), dv3.zero_()
    return (
        dq3.to(q.dtype).reshape(q.shape),
        dk3.to(k.dtype).reshape(k.shape),
        dv3.to(v.dtype).reshape(v.shape),
    )


class TritonFlashAttention(torch.autograd.Function):
    """`TritonFlashAttention.apply(q, k, v, causal=False, scale=None, block_q=64, block_k=64, return_lse=False) -> o`: the
    Triton forward, saving q, k, v, o and lse (returned too, non-differentiable, with `return_lse=True`); the Triton
    backward recomputing P tile by tile.

    Taught in: notebooks/09_tiled_backward.ipynb
    """

    @staticmethod
    def forward(
        ctx, q, k, v, causal=False, scale=None, block_q=64, block_k=64, return_lse=False
    ):
        o, lse = flash_attention_triton(
            q,
            k,
            v,
            causal=causal,
            scale=scale,
            block_q=block_q,
            block_k=block_k,
            return_lse=True,
        )
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.settings = dict(
            causal=check_causal(causal), scale=scale, block_q=block_q, block_k=block_k
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
        dq, dk, dv = flash_attention_triton_backward(
            q, k, v, o, lse, do.contiguous(), **ctx.settings
        )
        return dq, dk, dv, None, None, None, None, None
