"""Checks for the exercises of notebook 07_precision_in_attention: FP8 block quantization.

- `check_quantize_blocks` : $\\mathrm{fl}_{e4m3}(x \\cdot s) / s$ with $s = 448 / \\max|x|$ over each head's block of
  `block` rows (FlashAttention-3's block quantization, arXiv 2407.08608 §4.3), against `lab.quantize_fp8(x, block)`,
  on a short last block, a block of zeros, one row per block and a block longer than N; names the classic mistake a
  wrong answer equals (one scale per tensor, per row or for all heads, the last block dropped, the scale not undone,
  no scale, a block of zeros made NaN)
  and refuses answers that run `lab.quantize_fp8` (by any name: its module, an alias).

Taught in: notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import numpy as np

from ..exercises import diagnose
from ..precision import round_to
from ..precision_fa3 import quantize_fp8
from .precision import _call

__all__ = ["check_quantize_blocks"]


def _block_cases() -> list:
    """(label, (x, block)): 2 heads of 10 rows, d = 8, with an outlier in head 0's first block and in head 1's last."""
    x = np.random.default_rng(7).standard_normal((2, 10, 8)).astype(np.float32)
    x[0, 1, 3], x[1, 9, 0] = 300.0, -40.0
    zeros = x.copy()
    zeros[0, 4:8] = 0.0
    return [
        ("blocks of 4 rows, the last one of 2", (x, 4)),
        ("a block of zeros", (zeros, 4)),
        ("one row per block, values near 1e-3", (x * np.float32(1e-3), 1)),
        ("a block longer than N", (x, 16)),
    ]


def _one_scale_per_block_for_all_heads(x, block) -> np.ndarray:
    """The answer whose `np.abs(tile).max()` has no axis: one scale per block of rows, shared by every head."""
    out = np.empty_like(x)
    for r0 in range(0, x.shape[-2], block):
        tile = x[..., r0 : r0 + block, :]
        amax = np.abs(tile).max()
        s = np.float32(448) / (amax if amax > 0 else np.float32(1))
        out[..., r0 : r0 + block, :] = round_to(tile * s, "fp8_e4m3") / s
    return out


def _block_hint(x, block, got) -> str:
    """The classic mistake `got` equals, in words (else the rule again)."""
    got = np.asarray(got, np.float64)
    amax = np.abs(x)
    variants = [
        (
            np.isnan(got).any() and not np.isnan(quantize_fp8(x, block)).any(),
            "NaN where a block is all zeros: its max is 0, so 448 / max is inf; keep the scale finite there (any scale "
            "leaves 0 at 0)",
        ),
        (
            block < x.shape[-2]
            and got.shape == x.shape
            and np.array_equal(got, quantize_fp8(x)),
            "one scale for the whole matrix: each block of `block` rows of each head needs its own, 448 / max|x| over the "
            "block",
        ),
        (
            block > 1
            and got.shape == x.shape
            and np.array_equal(got, quantize_fp8(x, 1)),
            "one scale per row: a block is `block` consecutive rows sharing one scale (the last block may be shorter)",
        ),
        (
            got.shape == x.shape
            and np.array_equal(
                got, quantize_fp8(x.reshape(-1, x.shape[-1])).reshape(x.shape)
            ),
            "one scale for all heads: each head's block gets its own scale, from that head's rows only",
        ),
        (
            x.ndim > 2
            and got.shape == x.shape
            and np.array_equal(got, _one_scale_per_block_for_all_heads(x, block)),
            "one scale per block shared by all heads: np.abs(tile).max() with no axis takes the maximum over every head; "
            "take it over the block's rows and columns only, axis=(-1, -2) with keepdims=True",
        ),
        (
            got.shape == x.shape
            and x.shape[-2] % block > 0
            and not got[..., x.shape[-2] // block * block :, :].any(),
            "the last, shorter block is missing: range(0, N, block) visits it; a slice past N stops at N",
        ),
        (
            got.shape == x.shape
            and np.allclose(got, round_to(x, "fp8_e4m3"), rtol=0, atol=0),
            "the cast without a scale: small values round to 0 and the largest past 448 are lost; scale, cast, unscale",
        ),
        (
            got.shape == x.shape
            and np.isclose(np.abs(got).max(), 448)
            and amax.max() < 448,
            "the values are still scaled: divide by the scale after the cast",
        ),
    ]
    return next(
        (text for hit, text in variants if hit),
        "per head and per block of `block` rows: s = 448 / max|x| over the block, then round_to(x * s, "
        "'fp8_e4m3') / s",
    )


def check_quantize_blocks(fn, *, name: str | None = None) -> None:
    """Check `fn(x, block)`, FP8 e4m3 with one scale per block of `block` rows of each head, against `quantize_fp8(x, block)`.

    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    cases = _block_cases()
    for i, (label, (x, block)) in enumerate(cases):
        ok, got = _call(
            name, fn, (x.copy(), block), f"{i} ({label})", [], ("quantize_fp8",)
        )
        if not ok:
            return
        problem = diagnose(got, quantize_fp8(x, block), rtol=1e-6, atol=0)
        if problem is not None:
            print(f"{name}: ✗ case {i} ({label}): {problem}")
            print(f"  hint: {_block_hint(x, block, got)}")
            return
    print(
        f"{name}: ✓ passed {len(cases)} cases (a short last block, a block of zeros, one row per block, one block "
        "for all rows; each head scaled on its own)"
    )
