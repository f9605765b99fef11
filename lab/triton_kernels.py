"""FlashAttention-2's forward as one Triton kernel: compiled on a CUDA tensor, interpreted on a CPU tensor.

A ladder (each rung: what changed, what it no longer materializes):
  0. `lab.attention_reference` : numpy float64, the full N×M scores; the oracle.
  1. `lab.flash_attention_torch_forward` : the same tiling as a Python loop of torch ops; each op
     reads and writes its Br×Bc tile through memory.
  2. `flash_attention_triton` : one fused kernel. One program per (query block, head) keeps Q_i, m, l
     and acc in registers while it streams K_j, V_j: no tile of scores ever leaves the chip; o and
     lse are written once.
  3. `flash_attention_triton_backward` / `TritonFlashAttention` : FlashAttention-2's backward as two
     kernels, one per key block (dK_j, dV_j) and one per query block (dQ_i), each recomputing
     P = exp(S - lse) tile by tile; no atomics and no N×M array.

How Triton runs here. On a CUDA tensor the kernel is compiled (`triton.jit`) with fixed block sizes
(no autotuning). On a CPU tensor it runs through Triton's interpreter
(`triton.runtime.interpreter.InterpretedFunction`), which executes the same kernel body one program
at a time with numpy: correct on small shapes, 0.1-1 GFLOP/s, never a timing. Triton reads
`TRITON_INTERPRET` when its own library functions (tl.max, tl.sum) are defined, at its first import,
so when no CUDA device is present and Triton has not been imported yet, `import lab` sets
`TRITON_INTERPRET=1` (an existing value is kept); Triton itself is imported only at the first call.
If triton was imported earlier without it, a CPU call raises a clear RuntimeError saying so. The interpreter's bfloat16 `tl.dot` comes out wrong without an error in the Triton
versions seen so far, so a bfloat16 CPU call is computed by the interpreter in float32 and rounded to
bfloat16 at the end: correct, and said so in its docstring. Nothing here queries the device or
autotunes unless `torch.cuda.is_available()`. Where Triton is not installed (macOS, Windows),
`flash_attention_triton` raises `TritonUnavailableError` (an `ImportError`) saying why, and
`triton_status()` gives the sentence notebooks and tests print when they skip.

Shapes: q (..., Hq, N, d), k (..., Hkv, M, d), v (..., Hkv, M, dv), Hq % Hkv == 0; causal masks key
j for query i when j > i + (M - N). Accumulates in float32; `o` in the input dtype, `lse` float32.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import math
import os
import sys

import torch
from torch.autograd.function import once_differentiable

from ._checks import check_causal, check_qkv_shapes, check_scale
from .notebook import measured

__all__ = ["flash_attention_triton", "flash_attention_triton_backward", "TritonFlashAttention", "triton_status",
           "TritonUnavailableError"]

# Triton decides at its first import whether its own library functions (tl.max, tl.sum, ...) are
# interpreted or compiled, so on a machine without CUDA the variable is set here, when lab is
# imported, before anything (torch included) imports triton. An existing value is kept.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
_STATE: dict = {}


class TritonUnavailableError(ImportError):
    """Raised when Triton cannot be imported (it publishes wheels for Linux only)."""


def _load():
    """Import triton once (setting TRITON_INTERPRET=1 first on a machine without CUDA) and wrap the kernel."""
    if "kernels" in _STATE or "error" in _STATE:
        if "error" in _STATE:
            raise TritonUnavailableError(_STATE["error"])
        return _STATE["kernels"]
    cuda = torch.cuda.is_available()
    if "triton" not in sys.modules and not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")   # before the first import: Triton reads it when kernels are defined
    try:
        import triton
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError as exc:                           # no wheel for this platform, or a broken install
        _STATE["error"] = (f"Triton is not importable here ({exc}); it publishes wheels for Linux only, so the "
                           "Triton kernel is skipped on this machine and the torch kernels stand in for it.")
        raise TritonUnavailableError(_STATE["error"]) from exc
    globals()["tl"] = tl                                 # the kernel body below reads `tl` from this module
    from triton.runtime.jit import JITFunction
    kernels_interpretable = not isinstance(getattr(tl.standard, "max", None), JITFunction)
    kernels = {"triton": triton, "interpreted": InterpretedFunction(_attn_fwd) if kernels_interpretable else None}
    kernels["interpreted_bwd"] = ((InterpretedFunction(_attn_bwd_dkdv), InterpretedFunction(_attn_bwd_dq))
                                  if kernels_interpretable else None)
    if cuda:
        kernels["compiled"] = triton.jit(_attn_fwd)     # an InterpretedFunction too when TRITON_INTERPRET=1
        kernels["compiled_bwd"] = (triton.jit(_attn_bwd_dkdv), triton.jit(_attn_bwd_dq))
    _STATE["kernels"] = kernels
    return kernels


def triton_status() -> tuple[bool, str]:
    """(usable, sentence): whether `flash_attention_triton` can run here, and how (compiled, interpreter, or why not).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    try:
        kernels = _load()
    except TritonUnavailableError as exc:
        return False, str(exc)
    version = measured(kernels["triton"].__version__, "")                 # differs between machines: masked
    if "compiled" in kernels and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return True, (f"Triton {version}: compiled for {measured(torch.cuda.get_device_name(0), '')}; CPU tensors need "
                      "TRITON_INTERPRET=1 set before Python starts.")
    if kernels["interpreted"] is None:
        return False, ("Triton was imported before lab without TRITON_INTERPRET=1, so its interpreter is off in this "
                       "process; restart with TRITON_INTERPRET=1 to step through the kernel on the CPU.")
    return True, (f"Triton {version}: no CUDA device, so CPU tensors run through Triton's interpreter "
                  "(numpy, one program at a time): correct on small shapes, never a timing.")


def _attn_fwd(Q, K, V, O, LSE, qk_scale, N, M, G, D, DV,
              stride_qh, stride_qn, stride_kz, stride_kn, stride_vz, stride_vn, stride_oh, stride_on,
              CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # noqa: F821
              BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr):  # noqa: F821
    """One program: query block `pid_m` of query head `pid_h` against every visible key block of its kv head."""
    pid_m = tl.program_id(0)
    pid_h = tl.program_id(1)
    kv = pid_h // G                                                   # grouped-query heads share K, V
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)                  # query rows i
    offs_n = tl.arange(0, BLOCK_N)                                    # key columns j within a block
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = offs_m < N
    q = tl.load(Q + pid_h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :],
                mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)             # Q_i: (BLOCK_M, BLOCK_D)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)                              # m, in log2 units
    l_i = tl.zeros([BLOCK_M], tl.float32)                                            # l
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)                                  # acc: (BLOCK_M, BLOCK_DV)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid_m + 1) * BLOCK_M + M - N)             # keys past it are masked for every row
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < M
        k = tl.load(K + kv * stride_kz + cols[None, :] * stride_kn + offs_d[:, None],
                    mask=col_ok[None, :] & (offs_d[:, None] < D), other=0.0)         # K_jᵀ: (BLOCK_D, BLOCK_N)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale                       # S_ij·log2(e)
        visible = col_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + (M - N))
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))                          # m' = max(m, rowmax S_ij)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_use[:, None])                                # P_ij = exp(S_ij - m')
        alpha = tl.exp2(m_i - m_use)                                   # α = exp(m - m')
        l_i = l_i * alpha + tl.sum(p, 1)                               # l = α l + rowsum P_ij
        v = tl.load(V + kv * stride_vz + cols[:, None] * stride_vn + offs_dv[None, :],
                    mask=col_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)       # V_j: (BLOCK_N, BLOCK_DV)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)  # acc = α acc + P_ij V_j
        m_i = m_new
    seen = l_i > 0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]                        # o = acc / l, 0 where no key is visible
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(O + pid_h * stride_oh + offs_m[:, None] * stride_on + offs_dv[None, :], o.to(O.dtype.element_ty),
             mask=row_ok[:, None] & (offs_dv[None, :] < DV))
    tl.store(LSE + pid_h * N + offs_m, lse, mask=row_ok)


def _attn_bwd_dkdv(Q, K, V, DO, LSE, DEL, DK, DV_, scale, N, M, G, D, DV,
                   stride_qh, stride_qn, stride_kz, stride_kn, stride_vz, stride_vn, stride_oh, stride_on,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # noqa: F821
                   BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr):  # noqa: F821
    """One program: dK_j, dV_j of key block `pid_n` of kv head `z`, over every query row of its G query heads."""
    pid_n = tl.program_id(0)
    z = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)                    # key columns j
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    col_ok = cols < M
    k = tl.load(K + z * stride_kz + cols[:, None] * stride_kn + offs_d[None, :],
                mask=col_ok[:, None] & (offs_d[None, :] < D), other=0.0)            # K_j: (BLOCK_N, BLOCK_D)
    v = tl.load(V + z * stride_vz + cols[:, None] * stride_vn + offs_dv[None, :],
                mask=col_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)          # V_j: (BLOCK_N, BLOCK_DV)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    lo = 0
    if CAUSAL:
        lo = tl.maximum(0, pid_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M  # rows before it see no key here
    for g in range(0, G):
        h = z * G + g
        for start_m in range(lo, N, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            row_ok = rows < N
            q = tl.load(Q + h * stride_qh + rows[:, None] * stride_qn + offs_d[None, :],
                        mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)    # Q_i: (BLOCK_M, BLOCK_D)
            do = tl.load(DO + h * stride_oh + rows[:, None] * stride_on + offs_dv[None, :],
                         mask=row_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)  # dO_i: (BLOCK_M, BLOCK_DV)
            lse = tl.load(LSE + h * N + rows, mask=row_ok, other=float("inf"))     # +inf where no key is visible
            delta = tl.load(DEL + h * N + rows, mask=row_ok, other=0.0)            # D_i = rowsum(dO_i ∘ O_i)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale         # S_ij: (BLOCK_M, BLOCK_N)
            visible = row_ok[:, None] & col_ok[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= rows[:, None] + (M - N))
            p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)                  # P_ij = exp(S_ij - lse_i)
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)  # dV_j += P_ijᵀ dO_i
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)               # dP_ij = dO_i V_jᵀ
            ds = p * (dp - delta[:, None])                                        # dS_ij = P_ij ∘ (dP_ij - D_i)
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION) * scale  # dK_j += scale dS_ijᵀ Q_i
    tl.store(DK + z * stride_kz + cols[:, None] * stride_kn + offs_d[None, :], dk.to(DK.dtype.element_ty),
             mask=col_ok[:, None] & (offs_d[None, :] < D))
    tl.store(DV_ + z * stride_vz + cols[:, None] * stride_vn + offs_dv[None, :], dv.to(DV_.dtype.element_ty),
             mask=col_ok[:, None] & (offs_dv[None, :] < DV))


def _attn_bwd_dq(Q, K, V, DO, LSE, DEL, DQ, scale, N, M, G, D, DV,
                 stride_qh, stride_qn, stride_kz, stride_kn, stride_vz, stride_vn, stride_oh, stride_on,
                 CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # noqa: F821
                 BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr):  # noqa: F821
    """One program: dQ_i of query block `pid_m` of query head `pid_h`, over every visible key block."""
    pid_m = tl.program_id(0)
    pid_h = tl.program_id(1)
    z = pid_h // G
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = rows < N
    q = tl.load(Q + pid_h * stride_qh + rows[:, None] * stride_qn + offs_d[None, :],
                mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)
    do = tl.load(DO + pid_h * stride_oh + rows[:, None] * stride_on + offs_dv[None, :],
                 mask=row_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)
    lse = tl.load(LSE + pid_h * N + rows, mask=row_ok, other=float("inf"))
    delta = tl.load(DEL + pid_h * N + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, (pid_m + 1) * BLOCK_M + M - N)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < M
        k = tl.load(K + z * stride_kz + cols[:, None] * stride_kn + offs_d[None, :],
                    mask=col_ok[:, None] & (offs_d[None, :] < D), other=0.0)
        v = tl.load(V + z * stride_vz + cols[:, None] * stride_vn + offs_dv[None, :],
                    mask=col_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        visible = row_ok[:, None] & col_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + (M - N))
        p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION) * scale          # dQ_i += scale dS_ij K_j
    tl.store(DQ + pid_h * stride_qh + rows[:, None] * stride_qn + offs_d[None, :], dq.to(DQ.dtype.element_ty),
             mask=row_ok[:, None] & (offs_d[None, :] < D))


def _check_block(block, name):
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"{name} must be an integer power of two >= 16, got {block!r}")
    if block < 16 or block & (block - 1):
        raise ValueError(f"{name} must be a power of two >= 16 (Triton's tl.arange and tl.dot need it), got {block}")
    return block


def flash_attention_triton(q, k, v, *, causal: bool = False, scale=None, block_q: int = 64, block_k: int = 64,
                           return_lse: bool = False, num_warps=None, num_stages=None):
    """Fused FlashAttention-2 forward $o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$, one Triton program per (query block, head).

    Per key block: $S = \\mathrm{scale}\\,Q_iK_j^\\top$, $m' = \\max(m, \\mathrm{rowmax} S)$, $P = e^{S - m'}$,
    $l \\leftarrow e^{m-m'}l + \\mathrm{rowsum}P$, $acc \\leftarrow e^{m-m'}acc + PV_j$; then $o = acc/l$,
    $lse = m + \\log l$ (exp2 with log2(e) folded into the scale, as GPU kernels do). Compiled on CUDA
    tensors (float16, bfloat16, float32 with IEEE fp32 dots), Triton's interpreter on CPU tensors
    (bfloat16 there is computed in float32 and rounded at the end, because the interpreter's bfloat16
    dot is wrong). `block_q`, `block_k`: powers of two >= 16; `num_warps`, `num_stages` apply to the
    compiled kernel only. Returns `o`, or `(o, lse)` with `return_lse=True`. When an input requires grad,
    `o` is differentiable through `TritonFlashAttention` (the Triton backward).
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    causal = check_causal(causal)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(f"{name} must be float16, bfloat16 or float32 for the Triton kernel, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    scale = check_scale(scale, q.shape[-1])
    Br, Bc = _check_block(block_q, "block_q"), _check_block(block_k, "block_k")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q must be a CPU tensor (interpreter) or a CUDA tensor (compiled), got {q.device}")
    kernels = _load()
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        o = TritonFlashAttention.apply(q, k, v, causal, scale, Br, Bc)
        return (o, o.grad_fn.saved_tensors[4].detach()) if return_lse else o
    triton = kernels["triton"]
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    Z = math.prod(k.shape[:-2])                                       # batch × kv heads
    on_cpu = q.device.type == "cpu"
    work = torch.float32 if (on_cpu and q.dtype == torch.bfloat16) else q.dtype   # the interpreter's bf16 dot is wrong
    q3 = q.reshape(Z * group, N, d).to(work).contiguous()             # (Z·G, N, d)
    k3 = k.reshape(Z, M, d).to(work).contiguous()                     # (Z, M, d)
    v3 = v.reshape(Z, M, dv).to(work).contiguous()                    # (Z, M, dv)
    o3 = torch.empty((Z * group, N, dv), dtype=work, device=q.device)  # (Z·G, N, dv)
    lse = torch.empty((Z * group, N), dtype=torch.float32, device=q.device)  # (Z·G, N)
    if N > 0 and Z * group > 0:
        kernel = kernels["interpreted"] if on_cpu else kernels.get("compiled")
        if kernel is None and on_cpu:
            raise RuntimeError("Triton's interpreter is off in this process: triton was imported before lab without "
                               "TRITON_INTERPRET=1 (or a CUDA device is present), and Triton fixes the mode at its first "
                               "import. Start Python with TRITON_INTERPRET=1, or import lab before anything imports triton.")
        if kernel is None:
            raise ValueError("a CUDA tensor was given but torch.cuda.is_available() was False when Triton was loaded")
        extra = {} if on_cpu else {k_: v_ for k_, v_ in (("num_warps", num_warps), ("num_stages", num_stages)) if v_ is not None}
        grid = (triton.cdiv(N, Br), Z * group)
        kernel[grid](
            q3, k3, v3, o3, lse, scale * _LOG2E, N, M, group, d, dv,
            q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
            o3.stride(0), o3.stride(1),
            CAUSAL=causal, BLOCK_M=Br, BLOCK_N=Bc,
            BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_DV=max(16, triton.next_power_of_2(dv)),
            PRECISION="ieee" if work == torch.float32 else "tf32", **extra)
    o = o3.to(q.dtype).reshape(q.shape[:-1] + (dv,))                  # (..., N, dv)
    lse = lse.reshape(q.shape[:-1])                                   # (..., N)
    return (o, lse) if return_lse else o


def flash_attention_triton_backward(q, k, v, o, lse, do, *, causal: bool = False, scale=None, block_q: int = 64,
                                    block_k: int = 64):
    """FlashAttention-2 backward as two Triton kernels; returns `(dq, dk, dv)` in the input dtype.

    $D = \\mathrm{rowsum}(dO \\circ O)$ on the host; one kernel per key block accumulates
    $dV_j = \\sum_i P_{ij}^\\top dO_i$ and $dK_j = \\mathrm{scale} \\sum_i dS_{ij}^\\top Q_i$ (over the G query heads of its
    kv head), another per query block $dQ_i = \\mathrm{scale} \\sum_j dS_{ij} K_j$, with
    $P_{ij} = e^{\\mathrm{scale}\\,Q_iK_j^\\top - lse_i}$ recomputed and $dS_{ij} = P_{ij} \\circ (dO_iV_j^\\top - D_i)$: no atomics,
    no N×M array. Same devices and dtypes as `flash_attention_triton`.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    causal = check_causal(causal)
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(f"{name} must be float16, bfloat16 or float32 for the Triton kernel, got {t.dtype}")
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    if o.shape != q.shape[:-1] + v.shape[-1:] or do.shape != o.shape:
        raise ValueError(f"o and do must have shape {tuple(q.shape[:-1] + v.shape[-1:])}, got {tuple(o.shape)} and {tuple(do.shape)}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}")
    scale = check_scale(scale, q.shape[-1])
    Br, Bc = _check_block(block_q, "block_q"), _check_block(block_k, "block_k")
    kernels = _load()
    triton = kernels["triton"]
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    Z = math.prod(k.shape[:-2])
    on_cpu = q.device.type == "cpu"
    work = torch.float32 if (on_cpu and q.dtype == torch.bfloat16) else q.dtype
    q3 = q.reshape(Z * group, N, d).to(work).contiguous()               # (Z·G, N, d)
    k3 = k.reshape(Z, M, d).to(work).contiguous()                       # (Z, M, d)
    v3 = v.reshape(Z, M, dv).to(work).contiguous()                      # (Z, M, dv)
    do3 = do.reshape(Z * group, N, dv).to(work).contiguous()            # (Z·G, N, dv)
    delta = (do3.float() * o.reshape(Z * group, N, dv).float()).sum(-1).contiguous()   # D = rowsum(dO ∘ O): (Z·G, N)
    lse3 = lse.reshape(Z * group, N).float().masked_fill(lse.reshape(Z * group, N) == -math.inf, math.inf).contiguous()
    dq3, dk3, dv3 = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
    if N > 0 and M > 0 and Z * group > 0:
        pair = kernels["interpreted_bwd"] if on_cpu else kernels.get("compiled_bwd")
        if pair is None:
            raise RuntimeError("Triton's interpreter is off in this process (triton was imported before lab without "
                               "TRITON_INTERPRET=1); start Python with TRITON_INTERPRET=1.")
        args = (scale, N, M, group, d, dv, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1),
                v3.stride(0), v3.stride(1), do3.stride(0), do3.stride(1))
        meta = dict(CAUSAL=causal, BLOCK_M=Br, BLOCK_N=Bc, BLOCK_D=max(16, triton.next_power_of_2(d)),
                    BLOCK_DV=max(16, triton.next_power_of_2(dv)), PRECISION="ieee" if work == torch.float32 else "tf32")
        pair[0][(triton.cdiv(M, Bc), Z)](q3, k3, v3, do3, lse3, delta, dk3, dv3, *args, **meta)
        pair[1][(triton.cdiv(N, Br), Z * group)](q3, k3, v3, do3, lse3, delta, dq3, *args, **meta)
    else:
        dq3.zero_(), dk3.zero_(), dv3.zero_()
    return dq3.to(q.dtype).reshape(q.shape), dk3.to(k.dtype).reshape(k.shape), dv3.to(v.dtype).reshape(v.shape)


class TritonFlashAttention(torch.autograd.Function):
    """`TritonFlashAttention.apply(q, k, v, causal=False, scale=None, block_q=64, block_k=64) -> o`: the Triton forward,
    saving q, k, v, o and lse; the Triton backward recomputing P tile by tile.

    Taught in: notebooks/08_hardware_runs.ipynb
    """

    @staticmethod
    def forward(ctx, q, k, v, causal=False, scale=None, block_q=64, block_k=64):
        o, lse = flash_attention_triton(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k,
                                        return_lse=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.settings = dict(causal=check_causal(causal), scale=scale, block_q=block_q, block_k=block_k)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        """The gradients once; a second derivative raises (the kernel's backward is not itself differentiable)."""
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_triton_backward(q, k, v, o, lse, do.contiguous(), **ctx.settings)
        return dq, dk, dv, None, None, None, None
