"""Rung 6, FlashAttention-2's forward as one Triton kernel: compiled on a CUDA tensor, interpreted on a CPU.

Changes against rung 4, whose step it fuses: the loop over key blocks runs inside one kernel, `_attn_fwd`,
one program per (query block, batch·head) keeping Q_i, m, l and acc in registers while it streams K_j, V_j
(`_attn_fwd_step` is rung 4's `fa2_step`); no tile of scores leaves the chip.
What it buys: no traffic of N×M size at all, on the chip where that matters; its speed is a GPU
measurement (`python -m lab.bench --gpu-sweep`, recorded in data/runs). The backward is
`lab/kernels/rung6_triton_backward.py`.

Taught in: notebooks/08_triton_kernel.ipynb, notebooks/09_tiled_backward.ipynb
"""

# Names, as in the rest of the course: a program owns the Br query rows `rows` of
# block Q_i and streams key blocks K_j, V_j of Bc keys `cols`; N counts queries, M
# keys (the public keyword arguments `block_q` and `block_k` are Br and Bc). The
# running state is (m, l, acc) with m in log2 units (see `_attn_fwd`).
#
# How Triton runs here. On a CUDA tensor the kernel is compiled (`@triton.jit`) with
# fixed block sizes (no autotuning). On a CPU tensor it runs through Triton's
# interpreter, which executes the same kernel body one program at a time with numpy:
# correct on small shapes, 0.1-1 GFLOP/s, never a timing. Triton decides between the
# two when a kernel is decorated, from `TRITON_INTERPRET`, and fixes its own library
# functions (tl.max, tl.sum) at its first import; so when no CUDA device is present
# and Triton has not been imported yet, this module sets `TRITON_INTERPRET=1` (an
# existing value is kept) before it imports Triton. If triton was imported earlier
# without it, a CPU call raises a clear RuntimeError saying so. The interpreter's
# bfloat16 `tl.dot` comes out wrong without an error in the Triton versions seen so
# far, so a bfloat16 CPU call is computed by the interpreter in float32 and rounded to
# bfloat16 at the end: correct, and said so in its docstring. Nothing here queries the
# device or autotunes unless `torch.cuda.is_available()`. Where Triton is not
# installed (it publishes wheels for Linux only), the package still imports,
# `flash_attention_triton` raises `TritonUnavailableError` (an `ImportError`) saying
# why, and `triton_status()` gives the sentence notebooks and tests print when they
# skip.
#
# Shapes: q (..., Hq, N, d), k (..., Hkv, M, d), v (..., Hkv, M, dv), Hq % Hkv == 0;
# causal masks key j for query i when j > i + (M - N). Accumulates in float32; `o` in
# the input dtype, `lse` float32.

from __future__ import annotations

import inspect
import math
import os
import sys
import types

import numpy as np
import torch

from ..notebook import measured
from ..validate import (
    check_causal,
    check_choice,
    check_positive,
    check_qkv_shapes,
    check_scale,
)

__all__ = [
    "flash_attention_triton",
    "triton_status",
    "TritonUnavailableError",
    "triton_tile_kinds",
    "triton_kernel_source",
    "triton_traffic",
]

# Triton decides whether its library functions (tl.max, tl.sum, ...) and the kernels below are interpreted
# or compiled when they are defined, so on a machine without CUDA the variable is set before anything
# (torch included) imports triton. An existing value is kept.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl
except (
    Exception
) as exc:  # no wheel for this platform, or a broken install: the kernels are
    _IMPORT_ERROR = (
        str(exc) or type(exc).__name__
    )  # defined, never run, and triton_status() says why
    triton, tl = types.SimpleNamespace(jit=lambda fn: fn), None
else:
    _IMPORT_ERROR = None

_LOG2E = math.log2(
    math.e
)  # scale·log2(e) turns e^x into 2^(x·log2 e): exp becomes exp2
_STATE: dict = {}


class TritonUnavailableError(ImportError):
    """Raised when Triton cannot be imported (it publishes wheels for Linux only)."""


def _load():
    """The kernels to launch, {"triton", "interpreted", "compiled", ...}; TritonUnavailableError saying why if none."""
    if "error" in _STATE:
        raise TritonUnavailableError(_STATE["error"])
    if "kernels" in _STATE:
        return _STATE["kernels"]
    try:
        import triton as triton_module  # the import above, again: it fails here wherever it failed there
        from triton.runtime.interpreter import InterpretedFunction

        if _IMPORT_ERROR is not None:
            raise ImportError(_IMPORT_ERROR)
    except ImportError as exc:  # no wheel for this platform, or a broken install
        _STATE["error"] = (
            f"Triton is not importable here ({exc}); it publishes wheels for Linux only, so the "
            "Triton kernel is skipped on this machine and the torch kernels stand in for it."
        )
        raise TritonUnavailableError(_STATE["error"]) from exc
    from .rung6_triton_backward import (
        _attn_bwd_dkdv,
        _attn_bwd_dq,
    )  # it imports this module: imported here, not at the top

    backward = (_attn_bwd_dkdv, _attn_bwd_dq)
    interpreted = isinstance(
        _attn_fwd, InterpretedFunction
    )  # TRITON_INTERPRET=1 when the kernels were defined
    kernels = {
        "triton": triton_module,
        "interpreted": _attn_fwd if interpreted else None,
        "interpreted_bwd": backward if interpreted else None,
    }
    if torch.cuda.is_available():
        kernels["compiled"], kernels["compiled_bwd"] = (
            _attn_fwd,
            backward,
        )  # interpreted too under TRITON_INTERPRET=1
    _STATE["kernels"] = kernels
    return kernels


def triton_status() -> tuple[bool, str]:
    """(usable, sentence): whether `flash_attention_triton` can run here, and how (compiled, interpreter, or why not).

    Taught in: notebooks/08_triton_kernel.ipynb
    """
    try:
        kernels = _load()
    except TritonUnavailableError as exc:
        return False, str(exc)
    version = measured(
        kernels["triton"].__version__, ""
    )  # differs between machines: masked
    if "compiled" in kernels and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return True, (
            f"Triton {version}: compiled for {measured(torch.cuda.get_device_name(0), '')}; CPU tensors need "
            "TRITON_INTERPRET=1 set before Python starts."
        )
    if kernels["interpreted"] is None:
        return False, (
            "Triton was imported before lab without TRITON_INTERPRET=1, so its interpreter is off in this "
            "process; restart with TRITON_INTERPRET=1 to step through the kernel on the CPU."
        )
    return True, (
        f"Triton {version}: no CUDA device; CPU tensors run in its interpreter, "
        "one program at a time."
    )


# ------------------------------------------------------------------------------------------ the forward kernel


# fmt: off
# The two kernels below are shown as they are (`triton_kernel_source`): the formatter is
# off, so each comment keeps its own line and the argument lists stay a few lines long.
@triton.jit
def _attn_fwd(
    Q, K, V, O, LSE, qk_scale, N, M, G, D, DV,
    stride_qh, stride_qn, stride_kz, stride_kn,
    stride_vz, stride_vn, stride_oh, stride_on,
    CAUSAL: tl.constexpr, Br: tl.constexpr, Bc: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
):
    """One program: the Br rows of block Q_i of one (batch, query head), every key block
    they see."""
    # which query block Q_i, which (batch, query head), and its (batch, kv head):
    # G query heads share K, V
    i = tl.program_id(0)
    bh = tl.program_id(1)
    kv = bh // G
    # the query rows of Q_i (Br,), the d features padded to a power of two,
    # the dv features of v and o
    rows = i * Br + tl.arange(0, Br)
    feats = tl.arange(0, BLOCK_D)
    feats_v = tl.arange(0, BLOCK_DV)
    # the last query block may run past N
    row_ok = rows < N
    # Q_i: (Br, BLOCK_D), loaded once
    q_ptrs = Q + bh * stride_qh + rows[:, None] * stride_qn + feats[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & (feats[None, :] < D), other=0.0)
    # the state of the block's rows: m (log2 units, -inf before any key), l, acc
    m = tl.full([Br], float("-inf"), tl.float32)
    l = tl.zeros([Br], tl.float32)
    acc = tl.zeros([Br, BLOCK_DV], tl.float32)
    # this kv head's keys and values
    K_kv = K + kv * stride_kz
    V_kv = V + kv * stride_vz
    # key blocks before `full` need no mask; those from `band` on are skipped
    full = M // Bc * Bc
    band = M
    if CAUSAL:
        # keys up to the first row's last: seen by every row
        full = tl.maximum(0, i * Br + 1 + M - N) // Bc * Bc
        # keys past the last row's last: seen by none
        band = tl.minimum(M, (i + 1) * Br + M - N)
    # every row sees every key of these blocks: no mask
    for j0 in range(0, full, Bc):
        m, l, acc = _attn_fwd_step(
            q, m, l, acc, K_kv, V_kv, rows, j0, qk_scale, N, M, D, DV,
            stride_kn, stride_vn, False, CAUSAL, Bc, BLOCK_D, BLOCK_DV, PRECISION,
        )
    # the diagonal band, or the partial last block: masked
    for j0 in range(full, band, Bc):
        m, l, acc = _attn_fwd_step(
            q, m, l, acc, K_kv, V_kv, rows, j0, qk_scale, N, M, D, DV,
            stride_kn, stride_vn, True, CAUSAL, Bc, BLOCK_D, BLOCK_DV, PRECISION,
        )
    # the one division, o = acc / l; 0 for a row that sees no key (causal, N > M)
    seen = l > 0
    l_safe = tl.where(seen, l, 1.0)
    o = acc / l_safe[:, None]
    # lse = (m + log2 l)·ln 2, back to natural-log units
    lse = tl.where(seen, (m + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    o_ptrs = O + bh * stride_oh + rows[:, None] * stride_on + feats_v[None, :]
    o_ok = row_ok[:, None] & (feats_v[None, :] < DV)
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=o_ok)
    tl.store(LSE + bh * N + rows, lse, mask=row_ok)


@triton.jit
def _attn_fwd_step(
    q, m, l, acc, K_kv, V_kv, rows, j0, qk_scale, N, M, D, DV, stride_kn, stride_vn,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, Bc: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
):
    """One key block K_j, V_j (keys j0 .. j0 + Bc - 1): (m, l, acc) -> (m', l', acc'),
    m in log2 units."""
    # the keys of K_j (Bc,); the last key block may run past M
    cols = j0 + tl.arange(0, Bc)
    feats = tl.arange(0, BLOCK_D)
    feats_v = tl.arange(0, BLOCK_DV)
    col_ok = cols < M
    # K_j loaded transposed, (BLOCK_D, Bc); V_j (Bc, BLOCK_DV)
    k_ptrs = K_kv + cols[None, :] * stride_kn + feats[:, None]
    k = tl.load(k_ptrs, mask=col_ok[None, :] & (feats[:, None] < D), other=0.0)
    v_ptrs = V_kv + cols[:, None] * stride_vn + feats_v[None, :]
    v = tl.load(v_ptrs, mask=col_ok[:, None] & (feats_v[None, :] < DV), other=0.0)
    # S_ij·log2(e): (Br, Bc)
    s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
    if MASKED:
        # keys past M, and (causal) key j visible to query i only when j <= i + (M - N)
        visible = col_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + (M - N))
        s = tl.where(visible, s, float("-inf"))
    # m' = max(m, rowmax S_ij); a row with no key yet uses 0, so 2^(-inf) = 0, not NaN
    m_new = tl.maximum(m, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    # P_ij = exp(S_ij - m'), α = exp(m - m')
    p = tl.exp2(s - m_use[:, None])
    alpha = tl.exp2(m - m_use)
    # l' = α l + rowsum P_ij;  acc' = α acc + P_ij V_j (tl.dot adds to its 3rd input)
    l = l * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
    return m_new, l, acc
# fmt: on


def triton_tile_kinds(
    N: int, M: int, Br: int, Bc: int, causal: bool = False
) -> np.ndarray:
    """What the forward kernel does with each (query block i, key block j): 2 computes it unmasked, 1 masked, 0 skips it.

    The kernel's own bounds, per query block: key blocks before `full` are seen in full by every row, those
    from `full` to `band` are masked (the causal diagonal band, or the partial last key block), those from
    `band` on are seen by no row of the block. Returns an int array of shape (Tr, Tc) = (⌈N/Br⌉, ⌈M/Bc⌉).
    Taught in: notebooks/08_triton_kernel.ipynb
    """
    for name, x in (("N", N), ("M", M), ("Br", Br), ("Bc", Bc)):
        check_positive(x, name)
    causal = check_causal(causal)
    Tr, Tc = -(-N // Br), -(-M // Bc)
    kinds = np.zeros((Tr, Tc), dtype=int)
    for i in range(Tr):
        full, band = M // Bc * Bc, M
        if causal:
            full = max(0, i * Br + 1 + M - N) // Bc * Bc
            band = min(M, (i + 1) * Br + M - N)
        for j0 in range(0, M, Bc):
            kinds[i, j0 // Bc] = 2 if j0 < full else 1 if j0 < band else 0
    return kinds


def triton_traffic(run, tensors: dict) -> dict:
    """Bytes the Triton kernels launched by `run()` load from and store to memory, counted in the interpreter.

    Every `tl.load` and `tl.store` is watched: its masked-in elements times their size, sorted by the tensor of
    `tensors` (name -> torch tensor) they fall in, "other" for memory outside all of them (outputs `run` allocates).
    Returns {"read": {name: bytes}, "written": {name: bytes}, "value": run()}. Interpreter only (CPU tensors): a
    compiled kernel's loads are not seen, and TritonUnavailableError says so.
    Taught in: notebooks/08_triton_kernel.ipynb
    """
    if not callable(run):
        raise TypeError(
            f"run must be a function of no arguments, got {type(run).__name__}"
        )
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except (ImportError, AttributeError) as exc:
        raise TritonUnavailableError(
            f"Triton's interpreter is not available: {exc}"
        ) from None
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise TritonUnavailableError(
            "triton_traffic counts in Triton's interpreter (TRITON_INTERPRET=1)"
        )
    spans = [
        (name, t.data_ptr(), t.data_ptr() + t.untyped_storage().nbytes())
        for name, t in tensors.items()
    ]
    read = dict.fromkeys([*tensors, "other"], 0)
    written = dict.fromkeys([*tensors, "other"], 0)

    def tally(into, ptrs, mask, size):
        addr = np.asarray(ptrs, np.uint64)
        addr = addr[np.broadcast_to(np.asarray(mask, bool), addr.shape)]
        rest = np.ones(addr.shape, bool)
        for name, lo, hi in spans:
            inside = (addr >= np.uint64(lo)) & (addr < np.uint64(hi))
            into[name] += int(inside.sum()) * size
            rest &= ~inside
        into["other"] += int(rest.sum()) * size

    load, store = (
        InterpreterBuilder.create_masked_load,
        InterpreterBuilder.create_masked_store,
    )

    def watched_load(self, ptrs, mask, *args, **kwargs):
        size = ptrs.get_element_ty().primitive_bitwidth // 8
        tally(read, ptrs.data, mask.data, size)
        return load(self, ptrs, mask, *args, **kwargs)

    def watched_store(self, ptrs, value, mask, *args, **kwargs):
        tally(written, ptrs.data, mask.data, np.asarray(value.data).dtype.itemsize)
        return store(self, ptrs, value, mask, *args, **kwargs)

    InterpreterBuilder.create_masked_load = watched_load
    InterpreterBuilder.create_masked_store = watched_store
    try:
        value = run()
    finally:
        (
            InterpreterBuilder.create_masked_load,
            InterpreterBuilder.create_masked_store,
        ) = load, store
    return {"read": read, "written": written, "value": value}


def triton_kernel_source(name: str = "forward") -> str:
    """The source of a Triton kernel of this module, as compiled: "forward" (`_attn_fwd`), "step" (`_attn_fwd_step`),
    "dkdv" or "dq" (the backward's two kernels).

    Taught in: notebooks/08_triton_kernel.ipynb
    """
    from .rung6_triton_backward import _attn_bwd_dkdv, _attn_bwd_dq

    kernels = {
        "forward": _attn_fwd,
        "step": _attn_fwd_step,
        "dkdv": _attn_bwd_dkdv,
        "dq": _attn_bwd_dq,
    }
    check_choice(name, kernels, "name")
    return inspect.getsource(getattr(kernels[name], "fn", kernels[name])).rstrip("\n")


def _check_block(block, name):
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"{name} must be an integer power of two >= 16, got {block!r}")
    if block < 16 or block & (block - 1):
        raise ValueError(
            f"{name} must be a power of two >= 16 (Triton's tl.arange and tl.dot need it), got {block}"
        )
    return block


def flash_attention_triton(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale=None,
    block_q: int = 64,
    block_k: int = 64,
    return_lse: bool = False,
    num_warps=None,
    num_stages=None,
):
    """Fused FlashAttention-2 forward $o = \\mathrm{softmax}(\\mathrm{scale}\\,QK^\\top)V$, one Triton program per (query block, batch·head).

    Per key block: $S = \\mathrm{scale}\\,Q_iK_j^\\top$, $m' = \\max(m, \\mathrm{rowmax} S)$, $P = e^{S - m'}$,
    $l \\leftarrow e^{m-m'}l + \\mathrm{rowsum}P$, $acc \\leftarrow e^{m-m'}acc + PV_j$; then $o = acc/l$,
    $lse = m + \\log l$ (exp2 with log2(e) folded into the scale, as GPU kernels do; m kept in log2 units and
    lse brought back to the natural log with ln 2). Causal: key blocks every row sees are computed unmasked,
    the diagonal band masked, the blocks after it skipped (`triton_tile_kinds`). Compiled on CUDA
    tensors (float16, bfloat16, float32 with IEEE fp32 dots), Triton's interpreter on CPU tensors
    (bfloat16 there is computed in float32 and rounded at the end, because the interpreter's bfloat16
    dot is wrong). `block_q` is Br, `block_k` is Bc: powers of two >= 16; `num_warps`, `num_stages` apply to the
    compiled kernel only. Returns `o`, or `(o, lse)` with `return_lse=True`. When an input requires grad,
    `o` is differentiable through `TritonFlashAttention` (the Triton backward).
    Taught in: notebooks/08_triton_kernel.ipynb
    """
    causal = check_causal(causal)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(
                f"{name} must be float16, bfloat16 or float32 for the Triton kernel, got {t.dtype}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    scale = check_scale(scale, q.shape[-1])
    Br, Bc = _check_block(block_q, "block_q"), _check_block(block_k, "block_k")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"q must be a CPU tensor (interpreter) or a CUDA tensor (compiled), got {q.device}"
        )
    kernels = _load()
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        from .rung6_triton_backward import TritonFlashAttention

        return TritonFlashAttention.apply(q, k, v, causal, scale, Br, Bc, return_lse)
    triton = kernels["triton"]
    N, M, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    Z = math.prod(k.shape[:-2])  # batch × kv heads
    on_cpu = q.device.type == "cpu"
    work = (
        torch.float32 if (on_cpu and q.dtype == torch.bfloat16) else q.dtype
    )  # the interpreter's bf16 dot is wrong
    q3 = q.reshape(Z * group, N, d).to(work).contiguous()  # (Z·G, N, d)
    k3 = k.reshape(Z, M, d).to(work).contiguous()  # (Z, M, d)
    v3 = v.reshape(Z, M, dv).to(work).contiguous()  # (Z, M, dv)
    o3 = torch.empty((Z * group, N, dv), dtype=work, device=q.device)  # (Z·G, N, dv)
    lse = torch.empty((Z * group, N), dtype=torch.float32, device=q.device)  # (Z·G, N)
    if N > 0 and Z * group > 0:
        kernel = kernels["interpreted"] if on_cpu else kernels.get("compiled")
        if kernel is None and on_cpu:
            raise RuntimeError(
                "Triton's interpreter is off in this process: triton was imported before lab without "
                "TRITON_INTERPRET=1 (or a CUDA device is present), and Triton fixes the mode at its first "
                "import. Start Python with TRITON_INTERPRET=1, or import lab before anything imports triton."
            )
        if kernel is None:
            raise ValueError(
                "a CUDA tensor was given but torch.cuda.is_available() was False when Triton was loaded"
            )
        extra = (
            {}
            if on_cpu
            else {
                k_: v_
                for k_, v_ in (("num_warps", num_warps), ("num_stages", num_stages))
                if v_ is not None
            }
        )
        grid = (triton.cdiv(N, Br), Z * group)  # Tr query blocks × (batch, query head)
        kernel[grid](
            q3,
            k3,
            v3,
            o3,
            lse,
            scale * _LOG2E,
            N,
            M,
            group,
            d,
            dv,  # qk_scale = scale·log2(e)
            q3.stride(0),
            q3.stride(1),
            k3.stride(0),
            k3.stride(1),
            v3.stride(0),
            v3.stride(1),
            o3.stride(0),
            o3.stride(1),
            CAUSAL=causal,
            Br=Br,
            Bc=Bc,
            BLOCK_D=max(16, triton.next_power_of_2(d)),
            BLOCK_DV=max(16, triton.next_power_of_2(dv)),
            PRECISION="ieee" if work == torch.float32 else "tf32",
            **extra,
        )
    o = o3.to(q.dtype).reshape(q.shape[:-1] + (dv,))  # (..., N, dv)
    lse = lse.reshape(q.shape[:-1])  # (..., N)
    return (o, lse) if return_lse else o
