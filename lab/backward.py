"""The backward pass of attention: from the one that keeps P to the one that recomputes it tile by tile.

A ladder (each rung: what changed, what it no longer keeps):
  0. `attention_backward`             : the standard backward. The forward kept P (N×M); the backward
     reads it: $dV = P^\\top dO$, $dP = dO\\,V^\\top$, $dS = P \\circ (dP - D)$, $dQ = dS\\,K \\cdot$ scale,
     $dK = dS^\\top Q \\cdot$ scale.
  1. `flash_attention_backward_numpy` : FlashAttention-2's backward. The forward kept only `o` and
     `lse` (N numbers per row block, not N×M); each tile recomputes $P_{ij} = e^{S_{ij} - lse_i}$, and
     $D = \\mathrm{rowsum}(dO \\circ O)$, computed once before the loop, replaces $\\mathrm{rowsum}(P \\circ dP)$,
     which would need a whole row of P. Key blocks in the outer loop: $dK_j$, $dV_j$ stay in the tile,
     $dQ_i$ is added into the full array.

Grouped-query attention: query heads `h` of a group share K/V head `h // G`, so $dK$ and $dV$ are
summed over the G query heads of each group. Causal masks key j for query i when j > i + (M - N).

Around them: `NumpyFlashAttention` (a `torch.autograd.Function` running both numpy kernels, so
`torch.autograd.gradcheck` can test the backward against finite differences), `standard_attention_torch`
(softmax(QKᵀ)V in torch, which autograd differentiates by keeping P), `saved_tensor_bytes` (the bytes
autograd keeps between forward and backward, counted exactly with `saved_tensors_hooks`),
`backward_flops` and `time_forward_backward`.

Taught in: notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import trace
from ._tiles import TilePlan
from .kernels import causal_mask, flash_attention_numpy, safe_exp_shift
from .kernels.rung1_naive import standard_attention_torch
from .kernels.rung2_numpy_fa1 import tile_scores
from .validate import (
    acc_dtype,
    as_float_array,
    check_block,
    check_causal,
    check_grads,
    check_qkv,
    check_same_shape,
    check_sizes,
    group_view,
)

__all__ = [
    "attention_backward",
    "flash_attention_backward_numpy",
    "backward_delta",
    "NumpyFlashAttention",
    "standard_attention_torch",
    "saved_tensor_bytes",
    "training_memory",
    "backward_flops",
    "time_forward_backward",
    "backward_time_lines",
]


def _group_sum(x5, k_shape, grouped: bool):
    """dK or dV from the grouped view (..., Hkv, G, M, ·): sum the G query heads that share each K/V head."""
    if not grouped:
        return x5.reshape(k_shape[:-1] + x5.shape[-1:])
    return x5.sum(axis=-3).reshape(tuple(k_shape[:-1]) + x5.shape[-1:])


def backward_delta(o, do) -> np.ndarray:
    """$D = \\mathrm{rowsum}(dO \\circ O)$, shape `(..., N)`; equals $\\mathrm{rowsum}(P \\circ dP)$ without P.

    Taught in: notebooks/09_backward.ipynb
    """
    o = as_float_array(o, "o")
    do = as_float_array(do, "do")
    check_same_shape(o, do, "o and do")
    dt = acc_dtype(o, do)
    return (do.astype(dt) * o.astype(dt)).sum(axis=-1)  # (..., N)


def attention_backward(q, k, v, do, *, causal: bool = False, scale=None):
    """Standard backward from the kept P: $dV = P^\\top dO$, $dS = P \\circ (dP - D)$, $dQ = dS K s$, $dK = dS^\\top Q s$.

    Recomputes the forward's S and P (N×M, as standard attention keeps them), in float32 at least;
    returns `(dq, dk, dv)` in the input dtype, dk and dv summed over each group of query heads.
    Taught in: notebooks/09_backward.ipynb
    """
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    do, _, _ = check_grads(q, k, v, do)
    dt = acc_dtype(q, k, v, do)
    out = np.result_type(q.dtype, k.dtype, v.dtype)
    q5, k5, v5 = group_view(q.astype(dt), k.astype(dt), v.astype(dt), group)
    do5 = do.astype(dt).reshape(q5.shape[:-1] + (v.shape[-1],))  # (..., N, dv)
    N, M = q.shape[-2], k.shape[-2]
    s = scale * (q5 @ np.swapaxes(k5, -1, -2))  # S: (..., N, M)
    if causal:
        s = np.where(causal_mask(N, M), s, -np.inf)
    m = s.max(axis=-1) if M > 0 else np.full(s.shape[:-1], -np.inf, dt)
    p = np.exp(s - safe_exp_shift(m)[..., None])  # (..., N, M)
    l = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, l, out=np.zeros_like(p), where=l > 0)  # P: kept for the backward
    dv5 = np.swapaxes(p, -1, -2) @ do5  # dV = Pᵀ dO: (..., M, dv)
    dp = do5 @ np.swapaxes(v5, -1, -2)  # dP = dO Vᵀ: (..., N, M)
    D = (p * dp).sum(axis=-1, keepdims=True)  # D = rowsum(P ∘ dP): (..., N, 1)
    ds = p * (dp - D)  # dS: (..., N, M)
    dq5 = scale * (ds @ k5)  # (..., N, d)
    dk5 = scale * (np.swapaxes(ds, -1, -2) @ q5)  # (..., M, d)
    grouped = q.ndim > 2
    return (
        dq5.reshape(q.shape).astype(out),
        _group_sum(dk5, k.shape, grouped).astype(out),
        _group_sum(
            np.broadcast_to(dv5, dk5.shape[:-1] + dv5.shape[-1:]), v.shape, grouped
        ).astype(out),
    )


def flash_attention_backward_numpy(
    q,
    k,
    v,
    o,
    lse,
    do,
    *,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    scale=None,
):
    """Tiled backward from `o` and `lse` only; returns `(dq, dk, dv)` equal to `attention_backward`'s.

    $D = \\mathrm{rowsum}(dO \\circ O)$ once; then for each key block $j$ (Bc rows) and each query block $i$
    (Br rows): $P_{ij} = e^{S_{ij} - lse_i}$, $dV_j \\mathrel{+}= P_{ij}^\\top dO_i$, $dP_{ij} = dO_i V_j^\\top$,
    $dS_{ij} = P_{ij} \\circ (dP_{ij} - D_i)$, $dQ_i \\mathrel{+}= dS_{ij} K_j s$, $dK_j \\mathrel{+}= dS_{ij}^\\top Q_i s$.
    No N×M array is formed; accumulates in float32 at least, returns the input dtype.
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    Br = check_block(block_q, "block_q")
    Bc = check_block(block_k, "block_k")
    q, k, v, group, scale = check_qkv(q, k, v, scale, causal)
    do, o, lse = check_grads(q, k, v, do, o, lse)
    dt = acc_dtype(q, k, v, do, o)
    out = np.result_type(q.dtype, k.dtype, v.dtype)
    q5, k5, v5 = group_view(q.astype(dt), k.astype(dt), v.astype(dt), group)
    N, M, d, dv_dim = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    plan = TilePlan(
        (1, 1, N, M), Br, Bc, causal
    )  # the forward's plan: tiles no query sees are skipped
    do5 = do.astype(dt).reshape(q5.shape[:-1] + (dv_dim,))  # (..., N, dv)
    lse5 = safe_exp_shift(
        lse.astype(dt).reshape(q5.shape[:-1])
    )  # (..., N); a row with no key: S = -inf, P = 0
    D = np.empty(q5.shape[:-1], dt)  # D = rowsum(dO ∘ O): (..., N), in HBM
    trace.store(
        "D",
        D,
        backward_delta(trace.load("o", o), trace.load("do", do)).reshape(D.shape),
    )
    lead = np.broadcast_shapes(q5.shape[:-2], k5.shape[:-2])
    dq5 = np.zeros(q5.shape, dt)  # dQ lives in HBM, added to tile by tile
    dk5, dv5 = (
        np.empty(k5.shape, dt),
        np.empty(v5.shape, dt),
    )  # dK, dV in HBM: one per K/V head
    grouped = q5.ndim > 2
    for jb, j0 in enumerate(range(0, M, Bc)):
        j1 = min(j0 + Bc, M)
        k_j = trace.load("k", k5[..., j0:j1, :])  # (..., Bc, d)
        v_j = trace.load("v", v5[..., j0:j1, :])  # (..., Bc, dv)
        dk_j = np.zeros(lead + (j1 - j0, d), dt)  # dK_j, dV_j stay in the tile
        dv_j = np.zeros(lead + (j1 - j0, dv_dim), dt)
        for ib in plan.queries(jb):  # query blocks above the diagonal see none of K_j
            i0, i1 = ib * Br, min(ib * Br + Br, N)
            q_i, do_i = (
                trace.load("q", q5[..., i0:i1, :]),
                trace.load("do", do5[..., i0:i1, :]),
            )  # (..., Br, d), (..., Br, dv)
            lse_i, D_i = (
                trace.load("lse", lse5[..., i0:i1]),
                trace.load("D", D[..., i0:i1]),
            )  # (..., Br)
            s = tile_scores(
                scale * (q_i @ np.swapaxes(k_j, -1, -2)), plan, i0, i1, j0, j1, ib, jb
            )  # S_ij: (..., Br, Bc)
            p = np.exp(s - lse_i[..., None])  # P_ij = exp(S_ij - lse_i), recomputed
            dv_j += np.swapaxes(p, -1, -2) @ do_i  # dV_j += P_ijᵀ dO_i
            dp = do_i @ np.swapaxes(v_j, -1, -2)  # dP_ij = dO_i V_jᵀ: (..., Br, Bc)
            ds = p * (dp - D_i[..., None])  # dS_ij = P_ij ∘ (dP_ij − D_i)
            dq_i = trace.load("dq", dq5[..., i0:i1, :])
            trace.store(
                "dq", dq5[..., i0:i1, :], dq_i + scale * (ds @ k_j)
            )  # dQ_i += dS_ij K_j · scale
            dk_j += scale * (
                np.swapaxes(ds, -1, -2) @ q_i
            )  # dK_j += dS_ijᵀ Q_i · scale
            trace.ops("exp", p.size)
            trace.ops("mul", 2 * p.size)
        trace.store(
            "dk",
            dk5[..., j0:j1, :],
            dk_j.sum(axis=-3, keepdims=True) if grouped else dk_j,
        )  # summed over the group
        trace.store(
            "dv",
            dv5[..., j0:j1, :],
            dv_j.sum(axis=-3, keepdims=True) if grouped else dv_j,
        )
    return (
        dq5.reshape(q.shape).astype(out),
        dk5.reshape(k.shape).astype(out),
        dv5.reshape(v.shape).astype(out),
    )


class NumpyFlashAttention(torch.autograd.Function):
    """`NumpyFlashAttention.apply(q, k, v, causal, block_q, block_k)`: numpy forward, tiled numpy backward.

    The forward saves $q, k, v, o, lse$ (no N×M array); the backward calls `flash_attention_backward_numpy`.
    Torch CPU tensors in and out, so `torch.autograd.gradcheck` can check the backward.
    Taught in: notebooks/09_tiled_backward.ipynb
    """

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        qn, kn, vn = (t.detach().cpu().numpy() for t in (q, k, v))
        o, lse = flash_attention_numpy(
            qn, kn, vn, block_q=block_q, block_k=block_k, causal=causal
        )
        o_t = torch.from_numpy(np.ascontiguousarray(o)).to(q.dtype)  # (..., N, dv)
        lse_t = torch.from_numpy(np.ascontiguousarray(lse))  # (..., N)
        ctx.save_for_backward(q, k, v, o_t, lse_t)
        ctx.opts = (check_causal(causal), block_q, block_k)
        return o_t

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        """The gradients once; a second derivative raises (the kernel's backward is not itself differentiable)."""
        q, k, v, o, lse = ctx.saved_tensors
        causal, block_q, block_k = ctx.opts
        dq, dk, dv = flash_attention_backward_numpy(
            *(t.detach().cpu().numpy() for t in (q, k, v, o, lse, do)),
            block_q=block_q,
            block_k=block_k,
            causal=causal,
        )
        grads = (
            torch.from_numpy(np.ascontiguousarray(g)).to(q.dtype) for g in (dq, dk, dv)
        )
        return (*grads, None, None, None)


def _saved_label(t, known: dict) -> str:
    """The name in `known` whose tensor has `t`'s shape (leading 1s dropped) and values (to float32 rounding); "?" if none."""
    shape = tuple(n for n in t.shape if n != 1)
    for name, c in known.items():
        if tuple(n for n in c.shape if n != 1) == shape and torch.allclose(
            t.detach().reshape(shape), c.detach().reshape(shape), rtol=1e-4, atol=1e-5
        ):
            return name
    return "?"


def saved_tensor_bytes(fn, *args, known: dict | None = None, **kwargs) -> dict:
    """Run `fn(*args, **kwargs)` and count the bytes autograd saves for the backward: $\\sum$ nbytes of distinct saved storages.

    Counted exactly with `torch.autograd.graph.saved_tensors_hooks` (each storage once, views included),
    so the number is deterministic. Returns `{"bytes", "input_bytes", "extra_bytes", "shapes", "from_input",
    "labels", "output"}`: `labels[n]` names saved tensor `n` by the entry of `known` (name: tensor) equal to
    it in shape and values ("?" when none is); `input_bytes` are the saved tensors that are the leaf inputs themselves (or views of them, such
    as Kᵀ), `extra_bytes` the rest; `from_input[n]` says whether saved tensor `n` is one of them.
    Taught in: notebooks/09_backward.ipynb
    """
    seen: dict = {}
    shapes: list = []
    from_input: list = []
    saved: list = []
    inputs = {
        t.untyped_storage().data_ptr()
        for t in list(args) + list(kwargs.values())
        if isinstance(t, torch.Tensor)
    }

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen[key] = t.untyped_storage().nbytes()
            shapes.append(tuple(t.shape))
            from_input.append(key in inputs)
            saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = fn(*args, **kwargs)
    total = sum(seen.values())
    input_bytes = sum(b for key, b in seen.items() if key in inputs)
    return {
        "bytes": total,
        "input_bytes": input_bytes,
        "extra_bytes": total - input_bytes,
        "shapes": shapes,
        "from_input": from_input,
        "labels": [_saved_label(t, known or {}) for t in saved],
        "output": output,
    }


def training_memory(
    Ns,
    d: int = 64,
    *,
    heads: int = 1,
    causal: bool = False,
    dtype=torch.float32,
    seed: int = 0,
) -> list[dict]:
    """Bytes autograd keeps between forward and backward, standard attention against `lab.flash_attention_torch`, for each N.

    Standard keeps P ($N^2$ per head, plus its inputs); FlashAttention keeps $q, k, v, o$ and $lse$
    ($4Nd + N$ per head). Counted with `saved_tensor_bytes` (exact, not a reading of the process);
    `standard_extra`, `flash_extra` are the bytes beyond the inputs q, k, v and their views (P and
    scale·q; o and lse). Taught in: notebooks/09_backward.ipynb
    """
    from .torch_kernels import FlashAttention

    g = torch.Generator().manual_seed(seed)
    rows = []
    for N in Ns:
        N = int(N)
        if N < 1:
            raise ValueError(f"every N in Ns must be >= 1, got {N}")
        q, k, v = (
            torch.randn(1, heads, N, d, generator=g, dtype=dtype).requires_grad_()
            for _ in range(3)
        )
        std = saved_tensor_bytes(standard_attention_torch, q, k, v, causal=causal)
        fla = saved_tensor_bytes(FlashAttention.apply, q, k, v, causal)
        itemsize = torch.finfo(dtype).bits // 8
        rows.append(
            dict(
                N=N,
                standard=std["bytes"],
                flash=fla["bytes"],
                standard_extra=std["extra_bytes"],  # beyond the inputs q, k, v
                flash_extra=fla["extra_bytes"],
                p_bytes=heads * N * N * itemsize,
                flash_shapes=fla["shapes"],
                standard_shapes=std["shapes"],
            )
        )
    return rows


def backward_flops(
    N: int,
    M: int | None = None,
    d: int = 64,
    *,
    batch: int = 1,
    heads: int = 1,
    causal: bool = False,
    dv: int | None = None,
) -> dict:
    """Matmul FLOPs of attention: forward $2NMd + 2NMd_v$ ($QK^\\top$, $PV$), backward 5 matmuls, $2.5\\times$ for $d_v = d$.

    Backward: $dV = P^\\top dO$, $dP = dO V^\\top$ and the recomputed $S = QK^\\top$ (each $2NMd$), then $dQ$
    and $dK$ (each $2NMd$). Causal with $N = M$ halves every count. Returns forward, backward and their ratio.
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    M = N if M is None else M
    dv = d if dv is None else dv
    check_sizes(N=N, M=M, d=d, dv=dv, batch=batch, heads=heads)
    frac = 0.5 if causal else 1.0
    per = batch * heads * N * M * frac
    fwd = per * (2 * d + 2 * dv)
    bwd = per * (2 * d + 2 * dv + 2 * dv + 2 * d + 2 * d)  # S, dV, dP, dQ, dK
    return {"forward": fwd, "backward": bwd, "ratio": bwd / fwd}


def time_forward_backward(
    attn, q, k, v, *, causal: bool = False, rounds: int = 5, min_run_time: float = 0.05
) -> dict:
    """Median seconds of `attn(q, k, v, causal=causal)` forward, and of forward + backward, timed in alternating rounds (`lab.measure.time_rounds`).

    Returns `{"forward", "forward_backward", "backward", "ratio", "round_ratios"}`: medians over the rounds,
    backward = their difference, ratio = backward / forward, and `round_ratios` the same ratio in each round
    (the spread a single round could have reported).
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    from .measure import time_rounds

    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be > 0, got {min_run_time}")
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    do = torch.ones_like(attn(*leaves, causal=causal))

    def fwd():
        with torch.no_grad():
            attn(*leaves, causal=causal)

    def fwd_bwd():
        torch.autograd.grad(attn(*leaves, causal=causal), leaves, do)

    s = time_rounds(
        {"forward": fwd, "forward_backward": fwd_bwd},
        device=str(q.device),
        rounds=rounds,
        min_run_time=min_run_time,
    )
    f, fb = s["forward"], s["forward_backward"]  # one time per round each
    t = {"forward": float(np.median(f)), "forward_backward": float(np.median(fb))}
    t["backward"] = max(t["forward_backward"] - t["forward"], 0.0)
    t["ratio"] = t["backward"] / t["forward"] if t["forward"] > 0 else math.nan
    t["round_ratios"] = [float(max(b - a, 0.0) / a) for a, b in zip(f, fb)]
    return t


def _flop_ratio(name: str) -> float:
    """Backward / forward matrix FLOPs: 2.0 for standard attention (4 products, P read back), else 2.5 (5 products)."""
    return 2.0 if "standard" in name.lower() else 2.5


def backward_time_lines(
    timings: dict, *, far_below: float = 0.5, summary: bool = False
) -> list[str]:
    """The lines to print for `{kernel: time_forward_backward(...)}`: forward and backward time, the measured ratio
    (median, and its range over the rounds) beside the FLOP ratio, and a warning for each ratio under `far_below` × its FLOP ratio.

    With `summary`, one more line says what the run shows: the range of every round's ratio, and for how many
    kernels that range holds the FLOP ratio (masked: both are the machine's).
    A backward that does 2-2.5× the forward's matrix FLOPs yet takes well under their time is not telling the
    arithmetic: the forward ran slower than its FLOPs say (vector kernels off, a fallback path, threads fighting).
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    from .notebook import measured

    if not 0 < far_below <= 1:
        raise ValueError(f"far_below must be in (0, 1], got {far_below}")
    lines, flagged = [], []
    width = max((len(n) for n in timings), default=0)
    for name, t in timings.items():
        flops = _flop_ratio(name)
        line = (
            f"{name:>{width}}: fwd {measured(t['forward'] * 1e3, '5.1f', 'ms')}, "
            f"bwd {measured(t['backward'] * 1e3, '5.1f', 'ms')}; "
            f"bwd / fwd {measured(t['ratio'], '3.1f')}"
        )
        rr = t.get("round_ratios")
        if rr:  # the range over the rounds, beside the median
            line += f" ({measured(min(rr), '3.1f')}-{measured(max(rr), '3.1f')})"
        lines.append(f"{line}, FLOPs {flops:.1f}")
        if t["ratio"] < far_below * flops:
            flagged.append(name)
    for name in flagged:  # what the ratio is not, and what to do next
        lines.append(
            f"  ⚠ {name}: a time ratio under {far_below:g}× its FLOP ratio, not the backward's cost:"
        )
        lines.append(
            "    rerun this cell on a quiet machine (one thread, nothing else running)"
        )
    ranges = {n: t["round_ratios"] for n, t in timings.items() if t.get("round_ratios")}
    if summary and ranges:
        every = [r for rr in ranges.values() for r in rr]
        held = sum(min(rr) <= _flop_ratio(n) <= max(rr) for n, rr in ranges.items())
        lines.append(
            f"every round: backward {measured(min(every), '.1f')} to {measured(max(every), '.1f')}× "
            f"the forward; FLOP ratio within its kernel's range: {measured(held, 'd')} of {len(ranges)}"
        )
    return lines
