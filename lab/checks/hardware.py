"""Checks for notebook 08's exercises: a throughput from a timing, the roofline bound, the tiles of a causal
loop, and the key-block loop of a Triton FlashAttention-2 forward kernel.

- `check_attention_tflops(fn)`  : `fn(B, H, N, d, causal, ms)`, the TFLOP/s of a forward, F = 4BHN²d (halved
  when causal) over ms·10⁻³ s; hints for a missed causal halving, one matmul counted, ms taken as seconds.
- `check_roofline(fn)`          : `fn(intensity, peak, bandwidth, overlap)`: F / t per intensity, t the larger of
  F / peak and W / bandwidth (overlap: min(peak, I·bandwidth)) or their sum (no overlap), on a list too, returned
  as an array; hints for max in place of min, a missing roof, I / bandwidth, rates added, the other case.
- `check_causal_tile_steps(fn)` : `fn(N, M, Br, Bc, causal)`, the (i, j) tiles the loop visits when key j is
  visible to query i iff j <= i + (M - N); says when yours is the count of a classic mistake (top-left
  alignment, the block's first row, a dropped tail, negative counts for rows that see no key).
- `check_triton_attention(kernel)` : a `@triton.jit` kernel with the notebook's signature against `attention_reference`,
  on one and several key blocks, N and M that no block divides (NaN stored after K and V, every load watched by the
  interpreter: a read past M fails even when tl.where hides it), unequal blocks, scores near -200 (a running max
  that starts at 0) and +200 (no max subtracted), a high key block before low ones (a block's own max in place of
  the running one). Every load of K and V must read at most Bc rows (the loop steps over key blocks), each program
  read each key row once (one pass, not a pass for the max and another for the sums), and lab's own
  kernel code (`_attn_fwd_step`) may not run inside the learner's. Through Triton's interpreter on CPU tensors;
  compiled on CUDA, where only the NaN shows.
  Also caught: a key mask applied to p after the exp (a ragged case near -200), a state kept in 16 bits, a loop
  range that misses key blocks, alpha applied after the new block was added.
- `check_causal_band(fn)` : `fn(i, N, M, Br, Bc)` = (full, seen), the key blocks every row of causal query block i
  sees whole and those some row sees, against an element mask; hints for the deciding rows swapped, j < i + (M - N),
  top-left alignment, the rounding of either, negative counts, a short last key block counted full or dropped; a
  right pair from every row or key (a mask, a loop over rows) fails on a block of 1,024 rows, its work watched.
- `check_p_from_lse(fn)` : `fn(t, lse)` = 2^(t - lse·log2 e), P of one tile of keys from log2-unit scores
  t = S·log2 e and the whole row's natural-log lse (the tile alone does not sum to 1); hints for the tile normalised
  by itself, lse left in natural-log units, t converted twice, ln 2 for log2 e, exp for exp2, lse along keys;
  np.exp (or math.exp) and torch refused: the kernel's own exponential is exp2.
- `launch_attention_kernel`, `triton_or_standins` : the host side of that kernel, and the modules to write it.

Taught in: notebooks/08_hardware_runs.ipynb (the first three), notebooks/08_triton_kernel.ipynb (the kernel, the band)
"""

from __future__ import annotations

import inspect
import math
import os
import sys
import types
import warnings

import numpy as np
import torch

from ..attention import attention_reference
from ..exercises import check, diagnose
from ..kernels.rung6_triton import triton_status
from ..measure import attention_flops
from ._support import _fresh, _own_work

__all__ = [
    "check_attention_tflops",
    "check_roofline",
    "check_causal_tile_steps",
    "check_triton_attention",
    "check_causal_band",
    "check_p_from_lse",
    "launch_attention_kernel",
    "triton_or_standins",
]

_TODO = "not implemented yet (fill in the stub above, then run this cell again)"


def _explained(fn, hints):
    """`fn` whose errors carry a hint: `hints` maps a piece of an error message to the sentence added to it."""

    def wrapped(*args):
        try:
            return fn(*args)
        except NotImplementedError:
            raise
        except Exception as exc:
            extra = next((h for key, h in hints.items() if key in str(exc)), None)
            if extra is None:
                raise
            raise type(exc)(f"{exc} ({extra})") from None

    wrapped.__name__ = getattr(fn, "__name__", "your function")
    wrapped.__wrapped__ = fn
    return wrapped


def _near(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=0))


# ------------------------------------------------------------------------------- exercise 1: TFLOP/s
def _tflops(B, H, N, d, causal, ms):
    return attention_flops(B, H, N, d, causal=causal) / (ms * 1e-3) / 1e12


def _tflops_hint(case, got, want):
    if _near(got, want):  # right, and refused for another reason, which says it all
        return None
    try:
        ratio = float(got) / want
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    causal = case[4]
    texts = []
    for r, text in (
        (
            2.0,
            "twice the expected: a causal forward computes half the scores, so F is halved"
            if causal
            else "twice the expected: each of the two matmuls, QKᵀ and PV, counts once",
        ),
        (
            0.5,
            "half the expected: F counts both matmuls, 2Nd FLOPs per score in QKᵀ and as many in PV"
            + ("" if causal else "; only a causal forward is halved"),
        ),
        (
            1e3,
            "1000× the expected: a rate in GFLOP/s (÷ 10⁹), or a time 1000× too short; "
            "a TFLOP is 10¹² FLOP, and ms·10⁻³ is the time in seconds",
        ),
        (
            1e-3,
            "1/1000 of the expected: ms is in milliseconds; convert ms to seconds (ms·10⁻³) before dividing",
        ),
        (1e6, "10⁶× the expected: a TFLOP is 10¹² FLOP"),
        (1e-6, "10⁻⁶× the expected: a TFLOP is 10¹² FLOP"),
    ):
        if math.isclose(ratio, r, rel_tol=1e-6):
            texts.append(text)
    B, H, N, d = case[:4]
    for count, letter, what in (
        (N, "N", "keys each query scores: a head has N² scores, not N"),
        (d, "d", "multiply-adds of each score's dot product"),
    ):
        if count > 1 and math.isclose(ratio, 1 / count, rel_tol=1e-6):
            texts.append(f"1/{letter} of the expected: F counts the {what}")
    for count, letter, what in ((H, "H", "heads"), (B, "B", "sequences")):
        if count > 1 and math.isclose(ratio, 1 / count, rel_tol=1e-6):
            texts.append(
                f"1/{letter} of the expected: F counts every one of the {letter} = {count} {what}"
            )
    if texts:  # two mistakes can give the same ratio: name both
        return "yours is " + "; or it is ".join(texts[:2])
    if B * H > 1 and math.isclose(ratio, 1 / (B * H), rel_tol=1e-6):
        return "yours is the rate of one head of one sequence: F counts all B·H of them"
    if causal and math.isclose(ratio, (case[2] + 1) / case[2], rel_tol=1e-9):
        return "yours counts the kept scores exactly, N(N+1)/2 per head; section 1 counts a causal forward as half: F / 2"
    return (
        f"yours is {ratio:.3g}× the expected, a factor none of the usual slips gives: count F "
        "again from section 1, the multiply-adds of QKᵀ and of PV at 2 FLOPs each, and ask "
        "which of B, H, N, d your count leaves out or repeats; then seconds, then 10¹²"
    )


def check_attention_tflops(fn, *, seed: int | None = None) -> None:
    """Check `fn(B, H, N, d, causal, ms)` = F / (ms·10⁻³) / 10¹² with F = 4BHN²d, halved when causal; print one verdict.

    Four fixed cases and four drawn afresh on each run (`seed` draws the same again); running
    `lab.attention_flops` (by any name) is refused. Taught in: notebooks/08_hardware_runs.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (1, 8, 4096, 64, False, 300.0),
        (2, 16, 1024, 128, True, 1.5),
        (1, 1, 17, 16, False, 0.01),
        (4, 32, 8192, 128, True, 41.0),
    ] + [
        (
            int(rng.integers(1, 9)),
            int(rng.choice([1, 8, 12, 16, 32])),
            int(rng.integers(16, 16384)),
            int(rng.choice([32, 64, 80, 128])),
            bool(c),
            round(float(rng.uniform(0.05, 500.0)), 3),
        )
        for c in (False, True, False, True)
    ]
    check(
        fn,
        _tflops,
        cases,
        rtol=1e-6,  # a rate computed in float32 is as right as float64's: a count, not a dtype
        atol=0,
        hint=_tflops_hint,
        properties=(_own_work("attention_flops", "backward_flops"),),
        seed=seed,
    )


# ------------------------------------------------------------------------------- exercise 2: the roof
def _roof(intensity, peak, bandwidth, overlap):
    """F / t per FLOP: t = max(F / peak, W / bandwidth) when the two overlap, their sum when they do not."""
    i = np.asarray(intensity, dtype=float)
    if overlap:
        return np.minimum(peak, i * bandwidth)
    return 1.0 / (1.0 / peak + 1.0 / (i * bandwidth))


def _roof_hint(case, got, want):
    if _near(
        got, want
    ):  # right (a list, or refused for another reason, which says it all)
        return None
    intensity, peak, bandwidth, overlap = case
    intensity = np.asarray(intensity, dtype=float)
    slope = intensity * bandwidth
    both = "time for the arithmetic and time for the traffic"
    known = [
        (
            np.maximum(peak, slope),
            "the larger of the two rates; the kernel needs both its "
            f"{both}, so the longer time decides: the lower rate",
        ),
        (
            slope,
            "I·bandwidth everywhere; past the ridge point the arithmetic takes longer",
        ),
        (
            np.minimum(peak, intensity / bandwidth),
            "min(peak, I / bandwidth); W = F / I bytes take F / (I·bandwidth) seconds",
        ),
        (
            peak + slope,
            "the sum of the two rates; without overlap the two times add, not the rates",
        ),
        (
            _roof(intensity, peak, bandwidth, not overlap),
            "the other case's answer: "
            + (
                f"with overlap the {both} run at once, t = max of the two"
                if overlap
                else "without overlap the arithmetic waits for the traffic: t = the sum of the two"
            ),
        ),
    ]
    for value, text in known:
        if _near(got, value):
            return f"yours is {text}"
    return (
        "per intensity: the arithmetic takes F / peak seconds, the traffic (F / I) / bandwidth; "
        "rate = F / t with t the larger (overlap) or the sum (no overlap)"
    )


def check_roofline(fn, *, seed: int | None = None) -> None:
    """Check `fn(intensity, peak, bandwidth, overlap)` per intensity (arrays and lists); print one verdict.

    With `overlap` the rate is min(peak, I·bandwidth) (the roofline); without it F over the sum of the two times,
    1 / (1/peak + 1/(I·bandwidth)). Four fixed cases and four drawn afresh on each run (`seed` draws the same
    again); running `lab.attainable_flops` (by any name) is refused. Taught in: notebooks/08_hardware_runs.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (np.array([0.5, 10.0, 1000.0]), 1.6e11, 1.0e10, True),
        (np.array([0.5, 16.0, 1000.0]), 1.6e11, 1.0e10, False),
        (np.array([8.0, 63.0, 295.0, 1e4]), 9.89e14, 3.35e12, True),
        ([1.0, 16.0, 64.0], 2.0e11, 2.0e10, False),
    ] + [
        (
            np.round(10 ** rng.uniform(-1, 4, int(rng.integers(2, 7))), 2),
            float(f"{10 ** rng.uniform(11, 15):.3g}"),
            float(f"{10 ** rng.uniform(10, 13):.3g}"),
            overlap,
        )
        for overlap in (True, False, False, True)
    ]
    fn = _explained(
        fn,
        {
            "truth value": "Python's min, max and if compare single numbers; np.minimum works element by element",
            "sequence": "intensity may come as a list: np.asarray(intensity) makes it an array",
            "positional argument": "the function takes four arguments: intensity, peak, bandwidth, overlap",
        },
    )
    is_array = lambda f, case, got: (
        None
        if isinstance(got, np.ndarray)
        else f"returned a {type(got).__name__}, expected an "
        "array: np.asarray(...) of your rates, or numpy's element-wise functions"
    )
    check(
        fn,
        _roof,
        cases,
        rtol=1e-6,  # float32 arithmetic is as right as float64: the roof is a formula, not a dtype
        atol=0,
        hint=_roof_hint,
        properties=(_own_work("attainable_flops"), is_array),
        seed=seed,
    )


# ------------------------------------------------------------------------------- exercise 3: tile steps
def _tiles(
    N,
    M,
    Br,
    Bc,
    causal,
    *,
    offset=None,
    row="last",
    rows_up=True,
    keys_up=True,
    clamp=True,
):
    """Tiles visited, with the knobs of the classic mistakes: `offset` the alignment (M - N is right), `row` the
    block row that decides, `rows_up`/`keys_up` False drop a short last query block / a partly visible key
    block, `clamp` False lets a block whose rows see no key subtract tiles."""
    offset = M - N if offset is None else offset
    steps = 0  # the tiles visited, summed over query blocks
    for i in range(-(-N // Br) if rows_up else N // Br):
        first, last = i * Br, min((i + 1) * Br, N) - 1
        seen = (
            M if not causal else (last if row == "last" else first) + 1 + offset
        )  # keys 0 .. seen-1 visible
        seen = max(0, min(M, seen)) if clamp else min(M, seen)
        steps += -(-seen // Bc) if keys_up else seen // Bc
    return steps


def _tiles_reference(N, M, Br, Bc, causal):
    """Every (i, j) tile, kept when some row i of the block sees some key j of it: j0 <= last row + (M - N)."""
    return sum(
        1
        for i0 in range(0, N, Br)
        for j0 in range(0, M, Bc)
        if not causal or j0 <= min(i0 + Br, N) - 1 + M - N
    )


def _tiles_hint(case, got, want):
    if got == want:  # right, and refused for another reason, which says it all
        return None
    N, M, Br, Bc, causal = case
    known = [
        (
            _tiles(N, M, Br, Bc, False) / 2,
            "half the full count, as a causal forward's FLOPs are counted; the loop computes "
            "every tile on the diagonal whole, so it visits more than half: count per query block",
        ),
        (
            _tiles(N, M, Br, Bc, causal, offset=M - N - 1),
            "the count for j < i + (M - N): query i sees key i + (M - N) too (its own key "
            "when N = M), so visible means j <= i + (M - N)",
        ),
        (
            _tiles(N, M, Br, Bc, causal, offset=0),
            "the count of a causal mask aligned top-left (key j visible when "
            "j <= i); here query i sees keys up to i + (M - N)",
        ),
        (
            _tiles(N, M, Br, Bc, causal, row="first"),
            "the count decided by each block's first row; the block's "
            "last row sees the most keys, and a tile is visited if any row needs it",
        ),
        (
            _tiles(N, M, Br, Bc, causal, rows_up=False),
            "the count without the short last query block: N // Br "
            "drops the last N % Br rows; round up",
        ),
        (
            _tiles(N, M, Br, Bc, causal, keys_up=False),
            "the count without the key blocks that are only partly "
            "visible: a tile is visited if any of its keys is; round up",
        ),
        (
            _tiles(N, M, Br, Bc, causal, rows_up=False, keys_up=False),
            "the count without the short blocks: "
            "round N / Br and the visible keys / Bc up",
        ),
        (
            _tiles(N, M, Br, Bc, causal, clamp=False),
            "a count in which blocks whose rows see no key subtract tiles: "
            "with N > M the first N - M rows see none, and visit nothing",
        ),
        (_tiles(N, M, Br, Bc, False), "the count without causal skipping"),
        (
            _tiles(N, N, Br, Bc, causal),
            "the count for N keys: the key blocks are M's, ⌈M / Bc⌉ of them",
        ),
    ]
    texts = [text for value, text in known if got == value and value != want]
    if texts:  # two mistakes can give the same count: name both
        return "yours is " + "; or it is ".join(texts[:2])
    return "count, for each query block, the key blocks up to the last key its last row sees, at least none"


def check_causal_tile_steps(fn, *, seed: int | None = None) -> None:
    """Check `fn(N, M, Br, Bc, causal)`, the (i, j) tiles visited when key j is visible to query i iff j <= i + (M - N).

    Eight fixed cases and four drawn afresh on each run (`seed` draws the same again); running
    `lab.tile_counts`, `lab.tile_grid` or `lab.flash_counts` (by any name) is refused. Taught in: notebooks/08_hardware_runs.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (4096, 4096, 256, 512, False),
        (4096, 4096, 256, 512, True),
        (300, 333, 64, 48, False),
        (300, 333, 64, 48, True),
        (64, 512, 16, 32, False),
        (64, 512, 16, 32, True),
        (100, 20, 16, 8, True),
        (17, 17, 1, 1, True),
    ] + [
        (
            int(rng.integers(1, 2000)),
            int(rng.integers(1, 2000)),
            int(rng.choice([16, 32, 64, 128])),
            int(rng.choice([16, 32, 48, 64])),
            bool(c),
        )
        for c in (True, True, False, True)
    ]
    check(
        fn,
        _tiles_reference,
        cases,
        rtol=0,
        atol=0,
        hint=_tiles_hint,
        properties=(
            _own_work(
                "tile_counts",
                "tile_grid",
                "flash_counts",
                "triton_tile_kinds",
                "block_mask",
            ),
        ),
        seed=seed,
    )


# ------------------------------------------------------------------------------- exercise 5: a Triton kernel
def triton_or_standins():
    """`(triton, triton.language)`; where Triton does not import, stand-ins that let a kernel be defined, never run.

    Taught in: notebooks/08_triton_kernel.ipynb
    """
    usable, _ = triton_status()
    if usable or not _standin_needed():
        import triton
        import triton.language as tl

        return triton, tl

    def jit(fn=None, **_):
        return fn if fn is not None else (lambda f: f)

    return (
        types.SimpleNamespace(jit=jit, cdiv=lambda a, b: -(-a // b), standin=True),
        types.SimpleNamespace(constexpr=int, standin=True),
    )


def _standin_needed() -> bool:
    try:
        import triton.language  # noqa: F401
    except Exception:
        return True
    return False


def launch_attention_kernel(
    kernel, q, k, v, *, block_q: int = 16, block_k: int = 16, block_m=None, block_n=None
):
    """`o` from `kernel[grid](Q, K, V, O, scale, N, M, strides..., Br, Bc, d)`: one program per (query block, head).

    q (H, N, d), k and v (H, M, d), float32, each row contiguous; `block_q` is Br, `block_k` is Bc (`block_m`,
    `block_n`: older names of the same); the grid is (⌈N/Br⌉, H), scale = 1/√d. Returns o (H, N, d).
    Taught in: notebooks/08_triton_kernel.ipynb
    """
    import triton

    Br = block_q if block_m is None else block_m
    Bc = block_k if block_n is None else block_n
    H, N, d = q.shape
    M = k.shape[1]
    o = torch.empty((H, N, d), dtype=torch.float32, device=q.device)  # (H, N, d)
    grid = (triton.cdiv(N, Br), H)  # Tr query blocks × H heads
    kernel[grid](
        q,
        k,
        v,
        o,
        1.0 / math.sqrt(d),
        N,
        M,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        o.stride(0),
        o.stride(1),
        Br=Br,
        Bc=Bc,
        d=d,
    )
    return o


_D, _PAD = 16, 64  # head dimension; rows of NaN after K and V (more than a key block)

_CASES = [  # name, H, N, M, Br, Bc, score bias, hint when this case is the first to fail
    (
        "one key block",
        1,
        16,
        16,
        16,
        16,
        0,
        "with a single key block nothing is rescaled yet: check S = scale · q Kᵀ (tl.trans(k) inside tl.dot), "
        "p = exp(S - m_new), and that tl.max and tl.sum run along the keys, axis=1",
    ),
    (
        "very large scores (all near +200)",
        1,
        16,
        16,
        16,
        16,
        200,
        "every score here is near +200, and exp overflows float32 past about 88.7: exponentiate S - m_new, never S",
    ),
    (
        "several key blocks",
        2,
        32,
        64,
        16,
        16,
        0,
        "one key block was right: what carries over between blocks is wrong. When the running max moves, l and acc must "
        "shrink by alpha = exp(m - m_new) before the new block's sums are added, and then m = m_new",
    ),
    (
        "N and M not multiples of the blocks",
        1,
        20,
        37,
        16,
        16,
        0,
        "the last key block has slots past M: load K and V there with a mask and other=0.0, and give those slots a score "
        "of -inf (tl.where) before the max and the exp; a zero-filled key still scores 0 and adds e^(0 - m) to l",
    ),
    (
        "Br = 32 query rows, Bc = 16 keys",
        2,
        40,
        24,
        32,
        16,
        0,
        "the query block and the key block differ in size here: step over the keys by Bc, key offsets tl.arange(0, Bc)",
    ),
    (
        "very negative scores (all near -200)",
        1,
        16,
        48,
        16,
        16,
        -200,
        "every score here is near -200. A running max that starts at 0 stays 0 (max(0, -200) = 0), exp(S - 0) "
        "underflows to 0, so l = 0 and o = 0/0: start m at float('-inf')",
    ),
    (
        "a key block near +200, then blocks near -200",
        1,
        16,
        48,
        16,
        16,
        (200, -200),
        "m must be the running max, m_new = tl.maximum(m, tl.max(s, axis=1)): a block's own max lowers m after a high "
        "block, and alpha = exp(m - m_new) = e^400 overflows",
    ),
    (
        "ragged M, scores near -200",
        1,
        20,
        37,
        16,
        16,
        -200,
        "the slots past M load K as zeros and score 0, above every real score here (near -200): if they reach "
        "the max, m_new = 0 and every real e^(s - 0) underflows. Masking p (or l) after the exp is too late: "
        "give those slots a score of -inf with tl.where before tl.max and the exp",
    ),
]


def _case_inputs(H, N, M, bias, seed, device="cpu", Bc=16):
    """q (H, N, d) and views k, v (H, M, d) into buffers whose rows M .. M+_PAD-1 hold NaN; `bias` (or a pair: the first
    key block's, the other blocks') shifts every score by about that much."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(H, N, _D, generator=g),
        torch.randn(H, M, _D, generator=g),
        torch.randn(H, M, _D, generator=g),
    )
    if bias:  # scale · (40 · ±20) = ±200 in every score
        first, rest = bias if isinstance(bias, tuple) else (bias, bias)
        q[..., 0], k[:, :Bc, 0], k[:, Bc:, 0] = (
            40.0,
            20.0 * np.sign(first),
            20.0 * np.sign(rest),
        )
    kb, vb = (
        torch.full((H, M + _PAD, _D), math.nan),
        torch.full((H, M + _PAD, _D), math.nan),
    )
    kb[:, :M], vb[:, :M] = k, v
    return q.to(device), kb.to(device)[:, :M], vb.to(device)[:, :M]


def _unwrap(exc):
    """The learner's own error inside Triton's InterpreterError (which keeps it as __cause__)."""
    return (
        exc.__cause__
        if type(exc).__name__ == "InterpreterError" and exc.__cause__ is not None
        else exc
    )


def _is_stub(kernel) -> bool:
    """Whether the kernel still raises NotImplementedError (read from its code, so without running it)."""
    fn = getattr(kernel, "fn", kernel)
    if "NotImplementedError" in getattr(getattr(fn, "__code__", None), "co_names", ()):
        return True
    try:
        src = (
            kernel.src
            if isinstance(getattr(kernel, "src", None), str)
            else inspect.getsource(fn)
        )
    except (OSError, TypeError):
        return False
    return "raise NotImplementedError" in src


def _is_jit(kernel) -> bool:
    """Whether `kernel` is a Triton JIT function (what `@triton.jit` makes), not any object with a `[grid]`."""
    from triton.runtime.jit import JITFunction

    try:  # under TRITON_INTERPRET=1, @triton.jit makes an InterpretedFunction
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        InterpretedFunction = JITFunction
    return isinstance(kernel, (JITFunction, InterpretedFunction))


_ERROR_HINTS = {
    "not subscriptable": "keep @triton.jit above the def: the check launches kernel[grid](...)",
    "is not defined": "the skeleton's last lines divide acc by l: keep those names for the running sums",
    "dot": "tl.dot(a, b) multiplies a (P, Q) by b (Q, R): K_j enters transposed, tl.dot(q, tl.trans(k))",
    "shape": "q is (Br, d), a key block (Bc, d): S = q Kᵀ is (Br, Bc), and m, l run over axis=1",
}


def check_triton_attention(kernel, *, name: str | None = None) -> None:
    """Check a Triton attention kernel (the notebook's signature) against `attention_reference`; print one verdict.

    Cases: one and several key blocks, N and M that no block divides (NaN stored after K and V, and on the CPU every
    load watched: the check says which array was read past row M - 1), unequal block sizes, scores near
    -200 (a running max started at 0 gives 0/0) and +200 (exp without the max overflows), a block near +200 before
    blocks near -200 (a block's own max in place of the running max overflows α). A failure names the
    case, the worst value's index (head, query row, feature), the error against the tolerance, and a hint.
    Taught in: notebooks/08_triton_kernel.ipynb
    """
    name = name or getattr(getattr(kernel, "fn", kernel), "__name__", "your kernel")
    usable, why = triton_status()
    if not usable:
        first = _TODO + "; " if _is_stub(kernel) else ""
        print(f"{name}: {first}skipped: {why}")
        return
    if _is_stub(kernel):
        print(f"{name}: {_TODO}")
        return
    if not _is_jit(kernel):
        print(
            f"{name}: ✗ is a {type(kernel).__name__}, not a Triton kernel; "
            "hint: keep @triton.jit above the def, and compute o inside it with tl ops"
        )
        return
    narrow = _narrow_state(kernel)
    compiled = (
        torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
    )
    device = "cuda" if compiled else "cpu"
    tol = 1e-2 if compiled else 1e-4  # a compiled fp32 tl.dot rounds its inputs to TF32
    for i, (label, H, N, M, Br, Bc, bias, hint) in enumerate(_CASES):
        shown = f"case {i} ({label}: H = {H}, N = {N}, M = {M}, Br = {Br}, Bc = {Bc}, d = {_D})"
        q, k, v = _case_inputs(H, N, M, bias, seed=i, device=device, Bc=Bc)

        def run(k_, v_, q=q, Br=Br, Bc=Bc):
            with (
                np.errstate(all="ignore"),
                warnings.catch_warnings(),
            ):  # the interpreter's numpy on NaN and inf
                warnings.simplefilter("ignore")
                return (
                    launch_attention_kernel(kernel, q, k_, v_, block_q=Br, block_k=Bc)
                    .double()
                    .cpu()
                    .numpy()
                )

        try:
            got, read, widest, called = _run_watched(run, k, v, M)
        except Exception as exc:
            inner = _unwrap(exc)
            if isinstance(inner, NotImplementedError) or "NotImplementedError" in str(
                exc
            ):
                print(f"{name}: {_TODO}")
                return
            text = str(inner).strip().splitlines()[-1] if str(inner).strip() else ""
            print(f"{name}: ✗ {shown} raised {type(inner).__name__}: {text}")
            extra = next(
                (
                    h
                    for key, h in _ERROR_HINTS.items()
                    if key in f"{type(inner).__name__} {inner}"
                ),
                None,
            )
            if extra:
                print(f"  hint: {extra}")
            return
        if called:
            print(
                f"{name}: ✗ {shown}: it runs lab's kernel code {called[0]} (Triton runs it inside yours): the "
                "check would be testing lab's loop, not yours; write the key-block step in your kernel"
            )
            return
        args = [t.double().cpu().numpy() for t in (q, k, v)]
        want, _ = attention_reference(*args)
        problem = diagnose(got, want, rtol=tol, atol=tol)
        wide = next(
            ((t, n) for t, n in widest.items() if " " not in t and n > Bc), None
        )
        again = next(
            (
                (t[0], widest[t] / (-(-N // Br) * H * M))
                for t in ("K rows", "V rows")
                if widest.get(t, 0) > -(-N // Br) * H * M
            ),
            None,
        )
        if problem is None and again:
            print(
                f"{name}: ✗ {shown}: o is right, but each program read {again[0]} {again[1]:.3g} times over, where "
                f"one pass reads each key row once per query block: keep the running max, l and acc and rescale "
                "them by alpha as m grows, instead of a first pass for the max and a second for the sums"
            )
            return
        if problem is None and wide:
            print(
                f"{name}: ✗ {shown}: o is right, but one tl.load read {wide[1]} rows of {wide[0]}, where a key "
                f"block holds Bc = {Bc}: step over the keys in blocks, for j0 in range(0, M, Bc), loading K_j and "
                "V_j (Bc rows each) at every step; all M keys at once do not fit in a program's registers and "
                "shared memory for long sequences"
            )
            return
        # the share of the key rows each program read (1 in one pass); None where no load was watched
        visited = (
            widest["K rows"] / (-(-N // Br) * H * M) if "K rows" in widest else None
        )
        if problem is None and not read and narrow:
            print(
                f"{name}: ✗ {shown}: o is right here, but {narrow}: the interpreter promotes it to float32 "
                "without a word, where compiled Triton refuses a loop variable whose type changes. Keep m, l "
                "and acc in tl.float32"
            )
            return
        if problem is None and not read:
            continue
        print(
            f"{name}: ✗ {shown}: "
            + (f"o[head, query, feature]: {problem}" if problem else "o is right, but")
        )
        where = (
            (
                f"it reads {' and '.join(read)} past row M - 1 = {M - 1}, where this check stores NaN (on a GPU: "
                "another tensor's data, or a crash; a tl.where after the load hides the values, not the read). Load "
                "with mask=(key rows < M)[:, None] and other=0.0"
            )
            if read
            else _what_it_matches(got, want, args, N, M, Bc, tol)
        )
        if where:
            print(f"  {where}")
        if problem and visited is not None and visited < 1:
            hint = (
                f"your loop read {visited:.0%} of the M = {M} key rows per query block: its range must "
                "start at key 0 and reach key M - 1, for j0 in range(0, M, Bc) (the last block may be short)"
            )
        elif problem and narrow:
            hint = (
                f"{narrow}: float16 keeps 11 bits, so each step rounds the running sums by about 5e-4. "
                "Keep m, l and acc in tl.float32 (tl.dot accumulates in float32 already)"
            )
        elif problem and _alpha_after(got, args, Bc, tol):
            hint = (
                "yours multiplies by alpha after adding the new block, (acc + P_ij V_j)·alpha: that rescales "
                "the new block's own terms, and at the first block alpha = e^(-inf) = 0 wipes them. Rescale the "
                "old sums, then add: acc = alpha·acc + P_ij V_j, l = alpha·l + rowsum P_ij"
            )
        elif i == 0 and problem and np.isnan(got).any():
            hint = (
                "NaN already with one key block: the first step rescales the empty state (acc = 0, l = 0) by "
                "alpha, which must be exp(m - m_new) = exp(-inf) = 0 there; exp(m_new - m) is inf, and inf · 0 "
                "is NaN. Or alpha multiplies the sums after adding the new block: (l + rowsum P)·0 = 0 and "
                "o = 0/0; rescale the old sums, then add. Check also p = exp(S - m_new) and the masked slots' -inf"
            )
        print(f"  hint: {hint}")
        return
    print(
        f"{name}: ✓ passed {len(_CASES)} cases\n"
        "  (1 and more key blocks, ragged N and M, Br ≠ Bc, scores ±200, a high block first)"
    )


def _narrow_state(kernel) -> str | None:
    """A sentence when the kernel's source makes a running state in 16 bits (tl.zeros / tl.full of float16 or
    bfloat16) or rounds a value to 16 bits (`.to(tl.float16)`); None otherwise."""
    import re

    fn = getattr(kernel, "fn", kernel)
    try:
        src = (
            kernel.src
            if isinstance(getattr(kernel, "src", None), str)
            else inspect.getsource(fn)
        )
    except (OSError, TypeError):  # no source (exec'd code): the names its code reads
        names = set(getattr(getattr(fn, "__code__", None), "co_names", ()))
        narrow = sorted(names & {"float16", "bfloat16"})
        return f"it uses tl.{narrow[0]} for a value of the loop" if narrow else None
    src = re.sub(r"#.*", "", src)
    made = re.search(r"tl\.(zeros|full)\([^)]*tl\.(b?float16)", src)
    if made:
        return f"a running state starts as tl.{made.group(2)} (tl.{made.group(1)})"
    cast = re.search(r"\.to\(\s*tl\.(b?float16)", src)
    if cast:
        return f"a value is rounded to tl.{cast.group(1)} in the loop"
    return None


def _alpha_after(got, args, Bc, tol) -> bool:
    """Whether `got` is the online loop with alpha applied after the new block was added (numpy, float64)."""
    q, k, v = args
    scale = 1.0 / math.sqrt(q.shape[-1])
    M = k.shape[-2]
    for l_after, acc_after in ((True, True), (False, True), (True, False)):
        m = np.full(q.shape[:-1], -np.inf)
        l, acc = np.zeros(q.shape[:-1]), np.zeros(q.shape)
        with np.errstate(all="ignore"):
            for j0 in range(0, M, Bc):
                s = scale * q @ np.swapaxes(k[:, j0 : j0 + Bc], -1, -2)
                m_new = np.maximum(m, s.max(-1))
                p = np.exp(s - m_new[..., None])
                alpha = np.exp(m - m_new)
                l = (l + p.sum(-1)) * alpha if l_after else alpha * l + p.sum(-1)
                pv = p @ v[:, j0 : j0 + Bc]
                acc = (
                    (acc + pv) * alpha[..., None]
                    if acc_after
                    else alpha[..., None] * acc + pv
                )
                m = m_new
            bug = acc / l[..., None]
        if np.isnan(bug).all():  # all NaN: an alpha upside down gives that too
            continue
        if np.array_equal(np.isnan(bug), np.isnan(got)) and np.allclose(
            np.nan_to_num(bug), np.nan_to_num(got), rtol=tol, atol=tol
        ):
            return True
    return False


def _lab_kernels() -> set:
    """(file, name) of every `@triton.jit` function of lab's kernels: Triton's interpreter runs a copy of each one's code
    (rewritten from its source), so the copy is known by where it came from, not by its code object."""
    import importlib

    out = set()
    for module in ("rung6_triton", "rung6_triton_backward"):
        try:
            m = importlib.import_module(f"lab.kernels.{module}")
        except Exception:  # Triton missing: nothing of lab's to call either
            continue
        for f in vars(m).values():
            code = getattr(getattr(f, "fn", None), "__code__", None)
            if code is not None and hasattr(f, "run"):
                out.add((code.co_filename, code.co_name))
    return out


def _run_watched(run, k, v, M):
    """`(run(k, v), which of K and V it loads past row M - 1, the most rows of K and of V one load reads, lab's
    kernels it called)`: in Triton's interpreter every load is watched, so a read that tl.where hides afterwards is
    still seen; compiled, no load is seen ([], {}, [])."""
    try:
        from triton.runtime.interpreter import InterpreterBuilder

        original = InterpreterBuilder.create_masked_load
    except (ImportError, AttributeError):
        return run(k, v), [], {}, []
    spans = [
        (
            name,
            t.data_ptr() + (h * t.stride(0) + M * t.stride(1)) * t.element_size(),
            _PAD * t.stride(1) * t.element_size(),
        )
        for name, t in (("K", k), ("V", v))
        for h in range(t.shape[0])
    ]  # the rows after each head's M keys
    heads = [
        (
            name,
            t.data_ptr() + h * t.stride(0) * t.element_size(),
            t.stride(1) * t.element_size(),
        )
        for name, t in (("K", k), ("V", v))
        for h in range(t.shape[0])
    ]  # each head's rows 0 .. M - 1
    seen, widest, total = set(), {"K": 0, "V": 0}, {"K": 0, "V": 0}

    def load(self, ptrs, mask, *args, **kwargs):
        addr = np.asarray(ptrs.data, np.uint64)[
            np.broadcast_to(np.asarray(mask.data, bool), np.shape(ptrs.data))
        ]
        seen.update(
            name
            for name, lo, size in spans
            if ((addr >= np.uint64(lo)) & (addr < np.uint64(lo + size))).any()
        )
        for name, lo, row in heads:
            inside = addr[(addr >= np.uint64(lo)) & (addr < np.uint64(lo + M * row))]
            rows = len(np.unique((inside - np.uint64(lo)) // np.uint64(row)))
            widest[name] = max(widest[name], rows)
            total[name] += rows
        return original(self, ptrs, mask, *args, **kwargs)

    ours, called = _lab_kernels(), []

    def watch(frame, event, arg):
        if event == "call":
            where = (frame.f_code.co_filename, frame.f_code.co_name)
            if where in ours and where[1] not in called:
                called.append(where[1])

    InterpreterBuilder.create_masked_load = load
    before = sys.getprofile()
    sys.setprofile(watch)
    try:
        return (
            run(k, v),
            sorted(seen),
            widest | {f"{n} rows": t for n, t in total.items()},
            called,
        )
    finally:
        sys.setprofile(before)
        InterpreterBuilder.create_masked_load = original


def _what_it_matches(got, want, args, N, M, Bc, tol):
    """A sentence when `got` is attention without the scale, or over the first or the last key block alone."""
    q, k, v = args
    d = q.shape[-1]
    last = (max(0, (M - 1) // Bc * Bc), M)
    first, rest = (k[:, :Bc], v[:, :Bc]), (k[:, last[0] :], v[:, last[0] :])
    known = [
        (
            (lambda: attention_reference(q, k, v, scale=1.0)[0]),
            f"yours is attention with scale 1: multiply S = q Kᵀ by scale = 1/√d = {1 / math.sqrt(d):g}",
        ),
        (
            (lambda: attention_reference(q, *first)[0]),
            "yours is attention over the first key block alone: loop over "
            "every key block, 0 to M",
        ),
        (
            (lambda: attention_reference(q, *rest)[0]),
            "yours is attention over the last key block alone: each step "
            "forgets the blocks before it",
        ),
    ]
    padded = -(-M // Bc) * Bc
    if padded > M:  # the slots past M taken as keys of zeros, score 0
        zeros = np.zeros(k.shape[:-2] + (padded - M, d))
        known.append(
            (
                (
                    lambda: attention_reference(
                        q,
                        np.concatenate([k, zeros], -2),
                        np.concatenate([v, zeros], -2),
                    )[0]
                ),
                f"yours is attention with the {padded - M} slots past M counted as keys of score 0: give them a "
                "score of -inf (tl.where) before the max and the exp",
            )
        )
    for value, text in known:
        if M > Bc or "scale" in text or "slots" in text:
            if diagnose(got, value(), rtol=tol, atol=tol) is None:
                return text
    return None


# ------------------------------------------------------------------------ 08_triton_kernel exercise 2: the causal band
def _band_reference(i, N, M, Br, Bc):
    """(full, seen) of causal query block i from its element mask: query r sees key j iff j <= r + (M - N); `full`
    counts the whole key blocks, from block 0, that every row sees, `seen` the key blocks up to the last one any
    row sees."""
    rows = np.arange(i * Br, min((i + 1) * Br, N))
    seen = np.arange(M)[None, :] <= rows[:, None] + (M - N)  # (rows, keys)
    every, some = seen.all(axis=0), seen.any(axis=0)
    full = 0
    while (full + 1) * Bc <= M and every[full * Bc : (full + 1) * Bc].all():
        full += 1
    blocks = [j for j, j0 in enumerate(range(0, M, Bc)) if some[j0 : j0 + Bc].any()]
    return full, (blocks[-1] + 1 if blocks else 0)


def _named(known, value, default):
    """The texts of the mistakes in `known` ((value, text) pairs) whose value is `value`, else `default`."""
    texts = [text for v, text in known if v == value]
    return "; or ".join(texts[:3]) if texts else default


def _band_hint(case, got, want):
    i, N, M, Br, Bc = case
    first, last = i * Br, min((i + 1) * Br, N) - 1
    o = M - N
    try:
        full, seen = (int(x) for x in got)
    except (TypeError, ValueError):
        return "return two integers, (full, seen)"
    if (full, seen) == tuple(want):
        return None
    up = lambda keys: -(-keys // Bc)  # noqa: E731
    hints = []
    short = M % Bc  # keys in a last key block shorter than Bc (0: none)
    if short and full == up(M) and first + 1 + o >= M:
        hints.append(
            f"full counting the last key block, {short} keys where Bc = {Bc}, as whole: its "
            f"slots past M = {M} must be masked, so a short last block is never full, "
            "even when every row sees all its keys; count whole blocks only, M // Bc at most"
        )
    elif full != want[0]:
        known = [
            (
                max(0, first + o) // Bc,
                "full for j < r + (M - N): query r sees key r + (M - N) too",
            ),
            (
                max(0, last + 1 + o) // Bc,
                "full from the block's last row: the first row sees the fewest keys, and a "
                "block needs no mask only when every row, the first too, sees all of it",
            ),
            (
                up(max(0, min(M, first + 1 + o))),
                "full rounded up: a key block the first row sees only in part still needs "
                "the mask, so round down",
            ),
            (
                max(0, first + 1) // Bc,
                "full with the mask aligned top-left; query r sees keys up to r + (M - N)",
            ),
            (
                (first + 1 + o) // Bc,
                "a negative full: when N > M the first rows see no key at all, full is 0",
            ),
        ]
        hints.append(
            _named(
                known,
                full,
                "full: the keys every row sees are those the first row sees, 0 .. first + "
                "(M - N); count the whole key blocks among them",
            )
        )
    if short and seen == M // Bc == want[1] - 1 and last + 1 + o > M - short:
        hints.append(
            f"seen dropping the last key block, {short} keys where Bc = {Bc}: the last row sees "
            f"keys up to {min(M, last + 1 + o) - 1}, inside that short block, so it is loaded "
            "(with the mask); seen counts it, ⌈M / Bc⌉ blocks at most"
        )
    elif seen != want[1]:
        known = [
            (
                up(max(0, min(M, last + o))),
                "seen for j < r + (M - N): query r sees key r + (M - N) too",
            ),
            (
                up(max(0, min(M, first + 1 + o))),
                "seen from the block's first row: the last row sees the most keys, and a "
                "block is computed when any row sees any of its keys",
            ),
            (
                max(0, min(M, last + 1 + o)) // Bc,
                "seen rounded down: a key block the last row sees only in part is still "
                "computed (masked), so round up",
            ),
            (
                up(max(0, min(M, last + 1))),
                "seen with the mask aligned top-left; query r sees keys up to r + (M - N)",
            ),
            (
                up(min(M, last + 1 + o)),
                "a negative seen: when N > M the first rows see no key, seen is 0",
            ),
            (
                up(max(0, (i + 1) * Br + o)),
                "seen past M: the last key block is block ⌈M / Bc⌉ - 1",
            ),
        ]
        hints.append(
            _named(
                known,
                seen,
                "seen: the last row (row N - 1 at most) sees keys 0 .. last + (M - N); "
                "count the key blocks that hold any of them",
            )
        )
    return "yours has " + "; and ".join(hints)


_WORK_CASE = (
    1,
    2048,
    2048,
    1024,
    1024,
)  # a block of 1,024 rows against 2,048 keys, in 2 key blocks
_WORK_LINES = 400  # Python lines one call may run: a formula takes a few, a loop over rows or keys thousands
_WORK_BYTES = (
    4 * 1024
)  # memory one call may hold at once: an array of the block's rows or keys is 8 KiB or more


class _TooMuchWork(Exception):
    """Raised inside the learner's function once it has run more lines than `_WORK_LINES`."""


def _work(fn, case) -> tuple[int, int]:
    """(Python lines run, peak bytes allocated) of one call `fn(*case)`, the lines counted up to `_WORK_LINES` + 1."""
    import tracemalloc

    lines = 0

    def count(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
            if lines > _WORK_LINES:
                raise _TooMuchWork
        return count

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: count)
    try:
        fn(*case)
    except _TooMuchWork:
        pass
    finally:
        sys.settrace(previous)
        peak = tracemalloc.get_traced_memory()[1] - before
        if started:
            tracemalloc.stop()
    return lines, max(0, peak)


def _band_work(fn, case, got):
    """Property: on `_WORK_CASE`, the pair comes from the two rows that decide, not from every row or key."""
    if tuple(case) != _WORK_CASE:
        return None
    lines, peak = _work(fn, case)
    if lines <= _WORK_LINES and peak <= _WORK_BYTES:
        return None
    did = (
        f"it ran more than {_WORK_LINES} Python lines"
        if lines > _WORK_LINES
        else f"it held {peak / 1024:,.0f} KiB of arrays"
    )
    return (
        f"the pair is right, but for one block of 1,024 rows against 2,048 keys {did}: it looks "
        "at every row or every key (a mask, or a loop over them). The kernel cannot afford that, "
        "and needs none of it: two rows decide. Find which row of the block sees the fewest keys "
        "and which the most, write how many each sees from its index, and round to key blocks"
    )


def check_causal_band(fn, *, seed: int | None = None) -> None:
    """Check `fn(i, N, M, Br, Bc)` = (full, seen): the key blocks every row of causal query block i sees in full,
    and the key blocks some row of it sees, against an element mask (query r sees key j iff j <= r + M - N).

    Twelve fixed cases and five drawn afresh on each run (`seed` draws the same again); running
    `lab.triton_tile_kinds`, `lab.block_mask` or `lab.tile_counts` (by any name) is refused. On one block of
    1,024 rows the work is watched: more than `_WORK_LINES` Python lines or `_WORK_BYTES` of arrays held at once
    (an element mask, a loop over rows or keys) fails, since two rows decide the pair.
    Taught in: notebooks/08_triton_kernel.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (0, 256, 256, 64, 32),
        (3, 256, 256, 64, 32),
        (1, 96, 256, 32, 64),
        (0, 100, 40, 16, 16),
        (6, 100, 40, 16, 16),
        (2, 50, 50, 16, 16),
        (1, 40, 72, 32, 16),
        (0, 63, 64, 16, 16),  # the last row sees exactly one key of block 1
        (1, 49, 64, 16, 16),  # the first row sees block 1 to its last key
        (
            2,
            33,
            40,
            16,
            16,
        ),  # one row, which sees all 40 keys: the short last block is not full
        (4, 65, 50, 16, 16),  # the same with N > M
        _WORK_CASE,  # large: the work is watched (`_band_work`)
    ]
    for _ in range(5):
        N, M = int(rng.integers(1, 600)), int(rng.integers(1, 600))
        Br, Bc = int(rng.choice([16, 32, 64])), int(rng.choice([16, 32, 64]))
        cases.append((int(rng.integers(0, -(-N // Br))), N, M, Br, Bc))
    as_pair = lambda f, case, got: (
        None
        if isinstance(got, (tuple, list)) and len(got) == 2
        else f"returned {type(got).__name__}, expected a pair (full, seen)"
    )
    check(
        fn,
        _band_reference,
        cases,
        rtol=0,
        atol=0,
        hint=_band_hint,
        names=("full", "seen"),
        properties=(
            _own_work("triton_tile_kinds", "block_mask", "tile_counts", "tile_grid"),
            as_pair,
            _band_work,
        ),
        seed=seed,
    )


# --------------------------------------------------------------- 08_triton_kernel exercise 3: log2 units
_LOG2E = 1.4426950408889634


def _p_from_lse(t, lse):
    """$P = 2^{t - lse \\cdot \\log_2 e}$: t the scores in log2 units (S·log2 e), lse each row's natural-log lse."""
    return np.exp2(np.asarray(t) - np.asarray(lse)[:, None] * _LOG2E)


def _p_from_lse_hint(case, got, want):
    t, lse = (np.asarray(a, dtype=float) for a in case)
    got = np.asarray(got, dtype=float)
    if got.shape != want.shape:
        return f"P has one value per score: shape {want.shape}, yours {got.shape}"
    if np.allclose(got, want, rtol=1e-6, atol=1e-12):
        return None  # the value is right: the failure says what else is wrong
    own = np.exp2(t - t.max(axis=1, keepdims=True))
    wrong = {
        "yours makes each row of the tile sum to 1, but the tile holds only some of the row's keys: "
        "only lse, saved over the whole row, accounts for the others": own
        / own.sum(axis=1, keepdims=True),
        "yours is 2^(t - the tile's max): one tile's max is not the row's, and the row's sum is "
        "missing; lse holds both for the whole row": own,
        "yours subtracts lse in natural-log units from t in log2 units: convert it, lse·log2 e": np.exp2(
            t - lse[:, None]
        ),
        "yours multiplies t by log2 e again, but t already holds S·log2 e: convert only lse": np.exp2(
            (t - lse[:, None]) * _LOG2E
        ),
        "yours converts lse with ln 2, which goes the wrong way: a natural log becomes log2 units "
        "times log2 e = 1 / ln 2": np.exp2(t - lse[:, None] * math.log(2)),
        "yours takes exp of a log2-unit score: with t = S·log2 e the kernel's exponential is exp2": np.exp(
            t - lse[:, None] * _LOG2E
        ),
        "yours subtracts lse along the keys: it holds one value per query row, a column lse[:, None]": (
            np.exp2(t - lse[None, : t.shape[1]] * _LOG2E)
            if t.shape[1] <= lse.size
            else None
        ),
    }
    for text, value in wrong.items():
        if (
            value is not None
            and value.shape == got.shape
            and np.allclose(got, value, rtol=1e-6, atol=1e-12)
        ):
            return text
    return "P = e^(S - lse) with S = t·ln 2: write the exponent in log2 units, then use exp2"


_NATURAL_EXP = {
    "exp",
    "expm1",
}  # np.exp, math.exp, torch.exp, np.expm1 by attribute or name


def _names_read(code) -> set:
    """The global and attribute names that `code` and the functions defined inside it read."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names_read(const)
    return out


def _natural_exps() -> dict:
    """id -> name of every natural exponential a learner could reach by another name."""
    found = {np.exp: "numpy.exp", np.expm1: "numpy.expm1", math.exp: "math.exp"}
    found.update({math.expm1: "math.expm1", torch.exp: "torch.exp"})
    return {id(f): name for f, name in found.items()}


def _natural_exp_in(fn, depth: int = 2) -> list:
    """The natural exponentials `fn`'s code reaches by name (exp, expm1, or an alias such as
    `from numpy import exp as ex`), and those of the learner's own functions it calls."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names = _names_read(code)
    used = sorted(names & _NATURAL_EXP)
    scope = dict(getattr(fn, "__globals__", {}))
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        scope[name] = cell.cell_contents if cell.cell_contents is not None else None
    natural = _natural_exps()
    for name in sorted(names):
        if name not in _NATURAL_EXP and id(scope.get(name)) in natural:
            used.append(f"{name}, which is {natural[id(scope[name])]},")
    for name in sorted(names) if depth else ():
        helper = scope.get(name)
        if (
            isinstance(helper, types.FunctionType)
            and helper is not fn
            and getattr(helper, "__module__", "") == getattr(fn, "__module__", None)
        ):
            used += _natural_exp_in(helper, depth - 1)
    return used


class _Traced(np.ndarray):
    """An array that records the ufuncs applied to it and to every array computed from it."""

    def __array_finalize__(self, obj):
        self.ops = getattr(obj, "ops", None)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        ops = next(x.ops for x in inputs if isinstance(x, _Traced))
        plain = [x.view(np.ndarray) if isinstance(x, _Traced) else x for x in inputs]
        ops.append((ufunc, plain))
        if "out" in kwargs:
            kwargs["out"] = tuple(
                o.view(np.ndarray) if isinstance(o, _Traced) else o
                for o in kwargs["out"]
            )
        out = getattr(ufunc, method)(*plain, **kwargs)
        results = out if isinstance(out, tuple) else (out,)
        traced = tuple(_traced(r, ops) for r in results)
        return traced if isinstance(out, tuple) else traced[0]


def _traced(a, ops):
    if not isinstance(a, np.ndarray):
        return a
    out = a.view(_Traced)
    out.ops = ops
    return out


def _natural_exp_applied(fn, case) -> str | None:
    """The natural exponential `fn` applies to its inputs, or to what it computes from them:
    np.exp or np.expm1 by any name, or a power whose base is not 2 (`math.e ** x`)."""
    ops = []
    args = [_traced(np.array(a), ops) for a in case]
    try:
        fn(*args)
    except Exception:
        return None  # the check's own run reports the error
    for ufunc, inputs in ops:
        if ufunc in (np.exp, np.expm1):
            return f"numpy.{ufunc.__name__}"
        if ufunc in (np.power, np.float_power) and not np.all(
            np.asarray(inputs[0]) == 2
        ):
            return f"a power of base {np.ravel(inputs[0])[0]:.6g} (`**`, np.power)"
    return None


def _uses_exp2(fn, case, got):
    """Property: `fn` exponentiates with exp2 as the kernel does, never with the natural exp."""
    raw = getattr(fn, "raw", fn)
    used = _natural_exp_in(raw) or [_natural_exp_applied(raw, case)]
    if used[0]:
        return (
            f"P is right, but it calls {used[0]} (the natural exponential): the "
            "kernel's exponential is exp2 (tl.exp2, the one a GPU's special-function units "
            "return natively), so this exercise asks for np.exp2 on the log2-unit exponent, "
            "t - lse·log2 e"
        )
    return None


def check_p_from_lse(fn, *, seed: int | None = None) -> None:
    """Check `fn(t, lse)` = $2^{t - lse \\log_2 e}$ = $e^{S - lse}$ for t = S·log2 e on one tile of keys and lse each
    row's natural-log log-sum-exp over its whole row. The tile holds only some of the row's keys (at least one key
    outside it carries as much weight as the tile's largest), so its rows sum to less than 1 and normalising the tile
    by its own sum fails. Three fixed cases and three drawn afresh on each run (scores up to ±200, more keys than
    rows and fewer); hints for the tile normalised by itself, lse left in natural-log units, t converted twice, ln 2
    in place of log2 e, exp for exp2, lse broadcast along the keys. The natural exp (np.exp, math.exp) and torch are
    refused: the exercise asks for the kernel's own exponential, exp2. Taught in: notebooks/08_triton_kernel.ipynb
    """
    rng, seed = _fresh(seed)
    shapes = [(4, 8, 1.0), (8, 4, 30.0), (16, 16, 200.0)]
    shapes += [
        (
            int(rng.integers(2, 20)),
            int(rng.integers(2, 20)),
            float(rng.choice([1, 10, 200])),
        )
        for _ in range(3)
    ]
    cases = []
    for rows, keys, spread in shapes:
        tile = rng.uniform(-spread, spread, size=(rows, keys))  # S_ij, one tile of keys
        # the rest of each row: keys before and after the tile, one as large as the tile's max
        rest = rng.uniform(
            -spread, spread, size=(rows, int(rng.integers(1, 2 * keys + 1)))
        )
        rest[:, 0] = tile.max(axis=1) + rng.uniform(0.0, 1.0, size=rows)
        row = np.concatenate([rest, tile], axis=1)
        peak = row.max(axis=1)
        lse = peak + np.log(
            np.exp(row - peak[:, None]).sum(axis=1)
        )  # natural-log units
        cases.append((tile * _LOG2E, lse))
    fn = _explained(
        fn,
        {
            "broadcast": "lse holds one value per query row: subtract it as a column, lse[:, None]",
        },
    )
    check(
        fn,
        _p_from_lse,
        cases,
        rtol=1e-6,
        atol=1e-12,
        hint=_p_from_lse_hint,
        properties=(
            _own_work("attention_reference", "flash_attention_triton", numpy_only=True),
            _uses_exp2,
        ),
        seed=seed,
    )
