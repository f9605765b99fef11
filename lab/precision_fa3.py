"""FlashAttention-3's Table 3, reproduced on the CPU: FP16 and FP8 attention on inputs with outliers, against FP64.

FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608), §4.3 and Table 3, measures the RMSE of attention against an
FP64 reference on inputs drawn from N(0,1) + N(0,100)·Bernoulli(0.001), for standard attention in FP16, the tiled
kernel in FP16, a baseline FP8 attention with a scale per tensor, and FlashAttention-3 in FP8 with its two
techniques, block quantization (a scale per block of rows) and incoherent processing (Q and K rotated by a random
Hadamard matrix, §3.3), each also switched off. This module models every column as far as §4.3 describes it:
  `quantize_fp8`           : a scaled cast to FP8 e4m3 and back, one scale per tensor or per block of rows.
  `random_hadamard`        : the random orthogonal matrix of incoherent processing.
  `attention_fp8_baseline` : standard attention, FP8 inputs and P with a scale per tensor, S and P stored in FP16.
  `attention_fp8_fa3`      : the tiled kernel, Q and K rotated, inputs cast per block, 256·P_ij (<= 256) in e4m3.
  `fa3_table3`             : every column, with the RMSE taken against the draws and against the FP16-cast inputs.
The paper's figures are quoted in `FA3_TABLE3_RMSE` (lab/precision_experiments.py) and `FA3_TABLE3_ABLATION_RMSE`.

Taught in: notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import numpy as np

from .attention import attention_reference
from .precision import round_to
from .precision_experiments import (
    FA3_TABLE3_RMSE,
    _low_inputs,
    attention_standard_lowp,
    outlier_qkv,
    rmse,
)
from .validate import as_float_array, check_block, check_finite

__all__ = [
    "FA3_TABLE3_ABLATION_RMSE",
    "quantize_fp8",
    "random_hadamard",
    "attention_fp8_baseline",
    "attention_fp8_fa3",
    "fa3_table3",
]

# The same table's two ablations of FlashAttention-3 in FP8: without block quantization (one scale per tensor),
# and without incoherent processing (no Hadamard rotation of Q and K). Quoted, not measured here.
FA3_TABLE3_ABLATION_RMSE = {
    "no block quantization": 9.3e-3,
    "no incoherent processing": 2.4e-2,
}

_E4M3_MAX = 448.0


def quantize_fp8(x, block: int | None = None) -> np.ndarray:
    """Scaled cast to FP8 e4m3 and back: $\\mathrm{fl}_{e4m3}(x \\cdot s) / s$ with $s = 448 / \\max|x|$ over each group.

    `x (..., N, d)`; a group is one whole matrix (the last two axes: a scale per tensor, per head) with `block=None`,
    or `block` consecutive rows (FlashAttention-3's block quantization, a scale per tile). Returns float32.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    x = as_float_array(x, "x").astype(np.float32)
    if x.ndim < 2:
        raise ValueError(f"x must be (..., N, d), got shape {x.shape}")
    check_finite(x, "x")
    if block is None:
        amax = np.abs(x).max(axis=(-1, -2), keepdims=True)  # (..., 1, 1)
    else:
        B = check_block(block, "block")
        N = x.shape[-2]
        nb = -(-N // B)
        pad = np.zeros(x.shape[:-2] + (nb * B, x.shape[-1]), np.float32)
        pad[..., :N, :] = np.abs(x)
        amax = pad.reshape(x.shape[:-2] + (nb, B * x.shape[-1])).max(
            axis=-1
        )  # (..., nb)
        amax = np.repeat(amax, B, axis=-1)[..., :N, None]  # (..., N, 1)
    s = np.float32(_E4M3_MAX) / np.where(amax > 0, amax, np.float32(1))
    return round_to(x * s, "fp8_e4m3") / s


def random_hadamard(d: int, seed: int = 0) -> np.ndarray:
    """A random orthogonal $d \\times d$ matrix $M = \\mathrm{diag}(\\pm 1)\\, H_d / \\sqrt d$ ($H_d$ Sylvester's Hadamard matrix, d a power of 2).

    $(QM)(KM)^\\top = QK^\\top$; a row's outlier is spread over all d entries of $QM$ (FlashAttention-3 §3.3).
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    d = check_block(d, "d")
    if d & (d - 1):
        raise ValueError(f"d must be a power of 2 for a Hadamard matrix, got {d}")
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=d)
    return signs[:, None] * h / np.sqrt(d)  # (d, d), orthogonal


def _qkv64(q, k, v):
    q, k, v = (as_float_array(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    for a, n in ((q, "q"), (k, "k"), (v, "v")):
        check_finite(a, n)
    if (
        q.shape[-1] != k.shape[-1]
        or k.shape[:-1] != v.shape[:-1]
        or q.shape[:-2] != k.shape[:-2]
        or q.ndim < 2
    ):
        raise ValueError(
            f"q, k, v must be (..., N, d), (..., M, d), (..., M, dv), got {q.shape}, {k.shape}, {v.shape}"
        )
    return q, k, v


def _tiled_p_rounded(q, k, v, fmt: str, Bc: int, p_scale: float = 1.0) -> np.ndarray:
    """The tiled kernel's output with each $P_{ij} = e^{S_{ij} - m}$ ($m$ the running max after key block j) rounded to
    `fmt`, all key blocks at once: $o = \\sum_j e^{m_j - m}\\,\\mathrm{fl}(P_{ij}) V_j / \\sum_j e^{m_j - m}\\,\\mathrm{rowsum}(P_{ij})$.

    The model of `flash_attention_numpy(..., p_format=fmt)` with S scaled after the product and the sums taken in
    another order: the same rounding steps, so errors of the same size (not the same bits), much faster. float32.
    `p_scale`: each $P_{ij}$ is multiplied by it before the rounding and divided by it after, as FlashAttention-3's
    FP8 kernel forms $2^8 e^{S_{ij} - m}$ (its `Max_offset` = 8) and divides l by $2^8$ at the end.
    """
    q, k, v = (a.astype(np.float32) for a in (q, k, v))
    M = k.shape[-2]
    nb = -(-M // Bc)
    s = (q @ np.swapaxes(k, -1, -2)) / np.float32(
        np.sqrt(q.shape[-1])
    )  # S: (..., N, M), FP32
    sb = np.full(s.shape[:-1] + (nb * Bc,), -np.inf, np.float32)
    sb[..., :M] = s
    sb = sb.reshape(s.shape[:-1] + (nb, Bc))  # (..., N, Tc, Bc)
    m_run = np.maximum.accumulate(
        sb.max(axis=-1), axis=-1
    )  # running max after each key block
    p = np.exp(sb - m_run[..., None])  # P_ij against the running max, <= 1
    w = np.exp(m_run - m_run[..., -1:])  # alpha products: e^(m_j - m_final)
    l = (w * p.sum(axis=-1)).sum(axis=-1)  # (..., N), from the unrounded P
    sc = np.float32(p_scale)
    pr = (round_to(p * sc, fmt) / sc * w[..., None]).reshape(s.shape[:-1] + (nb * Bc,))[
        ..., :M
    ]
    return (pr @ v) / l[..., None]  # (..., N, dv)


def attention_fp8_baseline(q, k, v) -> np.ndarray:
    """FlashAttention-3's FP8 baseline (§4.3): standard attention with a scale per tensor, FP32 accumulation, softmax kept in FP16.

    $\\tilde Q, \\tilde K, \\tilde V$ = `quantize_fp8(·)` (one scale per head); $S = \\mathrm{fl}_{16}(\\tilde Q \\tilde K^\\top/\\sqrt d)$;
    $P = \\mathrm{fl}_{16}(\\mathrm{softmax}(S))$; $O = \\mathrm{fl}_{16}(\\tilde P \\tilde V)$ with $\\tilde P$ = `quantize_fp8(P)` (P
    scaled into e4m3's range per tensor, as its inputs are: our reading of "per-tensor scaling").
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    q, k, v = (quantize_fp8(a) for a in _qkv64(q, k, v))
    s = round_to(
        (q @ np.swapaxes(k, -1, -2)) / np.float32(np.sqrt(q.shape[-1])), "fp16"
    )  # S: (..., N, M)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = round_to(
        p / p.sum(axis=-1, keepdims=True), "fp16"
    )  # P: (..., N, M), normalized, FP16
    return round_to(quantize_fp8(p) @ v, "fp16")  # (..., N, dv)


def attention_fp8_fa3(
    q,
    k,
    v,
    *,
    block: int = 64,
    block_quant: bool = True,
    incoherent: bool = True,
    seed: int = 0,
    p_scale: float = 256.0,
) -> np.ndarray:
    """A model of FlashAttention-3 in FP8: Q and K rotated by `random_hadamard` (incoherent processing), Q, K, V cast with
    a scale per block of `block` rows (block quantization; per tensor with `block_quant=False`), then the tiled kernel
    with each $P_{ij}$ in e4m3 and $S_{ij}$, m, l, acc in FP32; O stored in FP16. `p_scale`: P is cast as
    $\\mathrm{fl}(p_{scale} P_{ij})/p_{scale}$; the released kernel's 256 (`Max_offset` = 8 in hopper/softmax.h,
    exp2 of $x - \\max + 8$, "so that the value after exp2 is in the range of [0, 256]") is the default, and
    `p_scale=1` casts $P_{ij} \\le 1$ as it is.

    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    q, k, v = _qkv64(q, k, v)
    B = check_block(block, "block")
    if incoherent:
        M = random_hadamard(q.shape[-1], seed)
        q, k = q @ M, k @ M  # (QM)(KM)ᵀ = QKᵀ
    g = B if block_quant else None
    q, k, v = quantize_fp8(q, g), quantize_fp8(k, g), quantize_fp8(v, g)
    if not (np.isfinite(p_scale) and p_scale > 0):
        raise ValueError(f"p_scale must be a positive number, got {p_scale!r}")
    p8 = _tiled_p_rounded(q, k, v, "fp8_e4m3", B, p_scale)
    return round_to(p8, "fp16")  # (..., N, dv)


def fa3_table3(
    N: int = 1024, d: int = 128, heads: int = 4, *, seed: int = 0, columns=None
) -> dict:
    """Every column of FlashAttention-3's Table 3, modelled here, with the RMSE taken two ways.

    Inputs: `outlier_qkv((heads, N, d), storage=None)` (float64 draws). "before cast": each method gets the float64
    draws (cast inside it) and the reference is `attention_reference` of the draws, as an FP64 reference of the
    generated inputs is; "after cast" (FP16 columns only): inputs first stored in FP16 and the reference taken from
    those, as experiment 4 does. Returns `{column: {"before cast": rmse, "after cast": rmse, "paper": quoted or None}}`
    and "rms_o", the RMS of the reference output. The tiled columns sum the tiles all at once (`block` 64). `columns`
    (names) restricts the work to those columns.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    q, k, v = outlier_qkv((heads, N, d), storage=None, seed=seed)  # float64 draws
    q16, k16, v16 = (round_to(a.astype(np.float32), "fp16") for a in (q, k, v))
    ref = attention_reference(q, k, v)[0]
    ref16 = None
    cols = {
        "FP16 inputs alone (exact attention)": (
            lambda a, b, c: attention_reference(
                *(
                    round_to(x.astype(np.float32), "fp16").astype(np.float64)
                    for x in (a, b, c)
                )
            )[0],
            None,
        ),
        "standard FP16": (
            lambda a, b, c: attention_standard_lowp(a, b, c, "fp16"),
            FA3_TABLE3_RMSE[("standard", "fp16")],
        ),
        "tiled FP16 (FA2/FA3)": (
            lambda a, b, c: round_to(
                _tiled_p_rounded(*_low_inputs(a, b, c, "fp16"), "fp16", 64), "fp16"
            ),
            FA3_TABLE3_RMSE[("tiled", "fp16")],
        ),
        "per-tensor FP8 (baseline)": (
            attention_fp8_baseline,
            FA3_TABLE3_RMSE[("standard", "fp8_e4m3")],
        ),
        "FA3 FP8": (attention_fp8_fa3, FA3_TABLE3_RMSE[("tiled", "fp8_e4m3")]),
        "FA3 FP8, no block quantization": (
            lambda a, b, c: attention_fp8_fa3(a, b, c, block_quant=False),
            FA3_TABLE3_ABLATION_RMSE["no block quantization"],
        ),
        "FA3 FP8, no incoherent processing": (
            lambda a, b, c: attention_fp8_fa3(a, b, c, incoherent=False),
            FA3_TABLE3_ABLATION_RMSE["no incoherent processing"],
        ),
    }
    if columns is not None:
        unknown = set(columns) - set(cols)
        if unknown:
            raise ValueError(
                f"columns must be among {list(cols)}, got {sorted(unknown)}"
            )
        cols = {c: cols[c] for c in columns}
    out = {}
    for name, (fn, paper) in cols.items():
        out[name] = {"before cast": rmse(fn(q, k, v), ref), "paper": paper}
        if "FP8" not in name:  # FP8's own rounding swamps FP16's
            if ref16 is None:
                ref16 = attention_reference(
                    *(a.astype(np.float64) for a in (q16, k16, v16))
                )[0]
            out[name]["after cast"] = rmse(fn(q16, k16, v16), ref16)
    out["rms_o"] = rmse(ref, np.zeros_like(ref))
    return out
