"""Checks for the exercises of notebook 07_precision_in_attention: the random-sign Hadamard rotation, the
FP8 layout for P, and the block quantizer.

- `check_block_fp8` : `fn(x, rows)` must be the course's model of FlashAttention-3's block quantization (one scale 448/max|x| per group
  of `rows` rows), equal to `lab.quantize_fp8(x, rows)` on fresh outlier inputs; names the classic mistakes.

- `check_fp8_layout` : exercise 3's three predictions (which layout flushes fewer P entries, which errs less
  with values of mean 0, and of mean 1), each compared with a measurement on inputs drawn fresh for the run, pooled over draws until
  the layouts are 25% apart (one answer per question, never both).

- `check_rotation` : `fn(d, rng)` must be FlashAttention-3's incoherent processing matrix (arXiv 2407.08608, §3.3):
  orthogonal ($R R^\\top = I$), every entry of size $1/\\sqrt d$ (so one outlier entry is spread over all d), random
  signs drawn from `rng` (the same rng seed gives the same matrix, another seed another), and no fixed input left
  concentrated (a row of Sylvester's Hadamard matrix, the worst case of a fixed rotation, comes out spread). Then
  the error it buys is measured on fresh outlier inputs: the FP8 model of FlashAttention-3 with the learner's
  rotation must beat the same model without it. Names the classic mistake (the 1/√d missing, an orthogonal matrix
  that does not spread, no signs, signs on the output side, signs not from `rng`) and refuses `lab.random_hadamard`
  by any route.

Taught in: notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from ..attention import attention_reference
from ..exercises import seed_note
from ..notebook import measured
from ..precision import round_to
from ..precision_experiments import (
    gaussian_qkv,
    outlier_qkv,
    p_rounding_error,
    p_underflow,
    rmse,
)
from ..precision_fa3 import _tiled_p_rounded, quantize_fp8
from ._support import _fresh
from .precision import _call

__all__ = [
    "check_block_fp8",
    "check_tiled_fp16",
    "tiled_fp16_planted",
    "check_rotation",
    "check_peak_prediction",
    "sylvester",
    "fp8_error_with_rotation",
    "check_fp8_layout",
    "fp8_layout_measured",
    "check_flush_gap",
    "flush_gap_reference",
]


def sylvester(d: int) -> np.ndarray:
    """Sylvester's Hadamard matrix $H_d$ (entries ±1, $H_{2n} = [[H_n, H_n], [H_n, -H_n]]$), d a power of 2."""
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def fp8_error_with_rotation(q, k, v, R=None, *, block: int = 64, ref=None) -> float:
    """RMSE of the FP8 model of FlashAttention-3 (`attention_fp8_fa3`'s steps) with `q`, `k` rotated by `R` (None: not
    rotated), against the float64 reference of the unrotated inputs (`ref`, computed if not given)."""
    ref = attention_reference(q, k, v)[0] if ref is None else ref
    if R is not None:
        R = np.asarray(R, np.float64)
        q, k = q @ R, k @ R  # (QR)(KR)ᵀ = QKᵀ when R is orthogonal
    q, k, v = (quantize_fp8(a, block) for a in (q, k, v))
    return rmse(_tiled_p_rounded(q, k, v, "fp8_e4m3", block), ref)


def _get(name, fn, d, seed, label):
    """`(ok, R)`: the learner's matrix for `d` from `np.random.default_rng(seed)`, as float64 (d, d)."""
    ok, R = _call(
        name, fn, (d, np.random.default_rng(seed)), label, [], ("random_hadamard",)
    )
    if not ok:
        return False, None
    R = np.asarray(R, dtype=np.float64)
    if R.shape != (d, d) or not np.isfinite(R).all():
        print(
            f"{name}: ✗ case {label}: expected a finite ({d}, {d}) matrix, got shape {R.shape}"
        )
        return False, None
    return True, R


def _fault(R, d, again, other) -> str | None:
    """What is wrong with `R` (from one seed; `again` the same seed, `other` another), in words; None if nothing."""
    eye = np.eye(d)
    H = sylvester(d)
    if np.allclose(R @ R.T, d * eye, atol=1e-6 * d):
        return "R Rᵀ = d·I, not I: the rows of a ±1 Hadamard matrix have length √d; divide by √d"
    if not np.allclose(R @ R.T, eye, atol=1e-6):
        return (
            "R is not orthogonal (R Rᵀ ≠ I), so (QR)(KR)ᵀ ≠ QKᵀ: build H_2n = [[H_n, H_n], [H_n, -H_n]] "
            "from H_1 = [1], then scale by 1/√d"
        )
    if not np.allclose(np.abs(R), 1 / np.sqrt(d), rtol=1e-6, atol=0):
        return (
            "orthogonal, but its entries differ in size (largest "
            f"{np.abs(R).max():.3f}, 1/√d = {1 / np.sqrt(d):.3f}): an outlier in entry i of a row becomes row i "
            "of R, spread evenly only if every entry of R is ±1/√d (a Hadamard matrix)"
        )
    if not np.array_equal(R, again):
        return "two calls with the same rng seed gave different matrices: draw the signs from the `rng` argument"
    if np.array_equal(R, other):
        same = np.allclose(np.abs(R @ H.T), np.sqrt(d) * eye, atol=1e-6) or np.allclose(
            np.abs(R.T @ H.T), np.sqrt(d) * eye, atol=1e-6
        )
        plain = np.allclose(np.abs(R.T @ H), np.sqrt(d) * eye, atol=1e-6) and (
            np.allclose(R, H / np.sqrt(d)) or np.allclose(R, -H / np.sqrt(d))
        )
        return (
            "the same matrix for every rng: no random signs"
            + (
                " (it is ±H/√d itself)"
                if plain
                else " (its signs are fixed: drawn from a seed of your own, not from `rng`)"
                if same
                else ""
            )
            + "; draw one sign per row from the `rng` argument"
        )
    # each row of H, unit length, rotated; with random signs first its largest entry is about sqrt(2 ln d / d),
    # past 0.5 with a chance below 1e-6 from d = 128 on (a fixed H or signs after it give exactly 1)
    spread = np.abs((H / np.sqrt(d)) @ R).max()
    if d >= 128 and spread > 0.5:
        return (
            f"a row of Sylvester's H (length 1) comes out with an entry of {spread:.2f}: the signs are applied "
            "after H (R = H·D), which only flips the signs of H's output; apply them first, R = D·H (row i of "
            "H times sign i), so that no fixed input lines up with H"
        )
    return None


def _refuses_six(name, fn) -> bool:
    """Whether `fn(6, rng)` raises ValueError (no Hadamard matrix of order 6 exists); prints the verdict if not."""
    try:
        with np.errstate(all="ignore"):
            R = fn(6, np.random.default_rng(0))
    except ValueError as exc:
        if re.search(r"\bd\b", str(exc)):
            return True
        print(
            f"{name}: ✗ case d = 6 raised ValueError({str(exc)!r}), which does not name d: say which "
            "argument is wrong and why (d must be a power of 2), before any work"
        )
        return False
    except NotImplementedError:
        raise
    except Exception as exc:
        print(
            f"{name}: ✗ case d = 6 raised {type(exc).__name__}: {exc}; no Hadamard matrix of order 6 exists "
            "(Sylvester's are of order 2^n): raise a ValueError that names d"
        )
        return False
    print(
        f"{name}: ✗ case d = 6 returned a matrix of shape {np.shape(R)}: no Hadamard matrix of order 6 exists "
        "(Sylvester's are of order 2^n); raise a ValueError that names d"
    )
    return False


def check_rotation(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(d, rng)`: a random-sign Hadamard rotation, orthogonal, flat, random from `rng`, spreading every input,
    and better in FP8 than no rotation on fresh outlier inputs.

    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    dims = [int(rng.choice([16, 32])), 64, 128]
    draws = [int(x) for x in rng.integers(0, 2**31, size=2)]
    for i, d in enumerate(dims):
        label = f"{i} (d = {d})"
        got = []
        for s in (draws[0], draws[0], draws[1]):
            ok, R = _get(name, fn, d, s, label)
            if not ok:
                print(seed_note(seed), end="")
                return
            got.append(R)
        fault = _fault(got[0], d, got[1], got[2])
        if fault:
            print(f"{name}: ✗ case {label}: {fault}")
            print(seed_note(seed), end="")
            return
    if not _refuses_six(name, fn):
        print(seed_note(seed), end="")
        return
    ratios = []
    for j in range(2):
        q, k, v = outlier_qkv(
            (2, 512, 128), seed=int(rng.integers(2**31)), storage=None
        )
        ok, R = _get(name, fn, 128, int(rng.integers(2**31)), f"measure {j} (d = 128)")
        if not ok:
            print(seed_note(seed), end="")
            return
        ref = attention_reference(q, k, v)[0]
        ratios.append(
            fp8_error_with_rotation(q, k, v, R, ref=ref)
            / fp8_error_with_rotation(q, k, v, ref=ref)
        )
    if np.mean(ratios) >= 0.95:
        print(
            f"{name}: ✗ your rotation does not lower the FP8 error on outlier inputs: rotated / not rotated = "
            f"{', '.join(f'{r:.2f}' for r in ratios)}"
        )
        print(seed_note(seed), end="")
        return
    print(
        f"{name}: ✓ passed {len(dims)} sizes and d = 6 (orthogonal, entries ±1/√d, signs from rng, "
        "every input spread)"
    )
    print(
        "  in FP8 on 2 fresh outlier draws, RMSE rotated / not rotated: "
        + ", ".join(measured(100 * r, ".0f", "%") for r in ratios)
    )


_LAYOUTS = ("fp8_e4m3", "fp8_e5m2")
_QUESTIONS = {
    "flushes fewer": "which layout flushes fewer P entries to 0",
    "smaller error, v": "which layout gives the smaller error of o for values of mean zero",
    "smaller error, v + 1": "which layout gives the smaller error of o for values of mean 1",
}
_WHY = {
    "flushes fewer": "e5m2's subnormals reach 2^-16, e4m3's only 2^-9: compare the ranges, not the mantissas",
    "smaller error, v": "with mean-zero values the flushed terms cancel, so the mantissa (ε) sets the error",
    "smaller error, v + 1": "with a mean the flushed mass is lost coherently, so the share flushed sets the error",
}


def _layout_scores(seed: int, rows: int = 16) -> dict:
    """Each question's measured value per layout on one draw of `rows` query rows at Exercise 3's setting
    (M = 4096, std(s) = 4, Bc = 64): the share of P_IJ flushed, the error of o for v and for v + 1."""
    q, k, v = gaussian_qkv(4096, 64, 4.0, rows, seed)
    flushed = {f: p_underflow(q, k, f, block_k=64)["flushed"] for f in _LAYOUTS}
    err = {
        (f, shift): p_rounding_error(q, k, v + np.float32(shift), f, block_k=64)
        for f in _LAYOUTS
        for shift in (0, 1)
    }
    return {
        "flushes fewer": flushed,
        "smaller error, v": {f: err[(f, 0)] for f in _LAYOUTS},
        "smaller error, v + 1": {f: err[(f, 1)] for f in _LAYOUTS},
    }


def fp8_layout_measured(seed: int, *, margin: float = 1.25, max_draws: int = 6) -> dict:
    """Exercise 3's three answers measured at its setting (M = 4096, std(s) = 4, Bc = 64): one layout per
    question, never both. Draws of 16 query rows (seeded from `seed`, so one seed gives one answer) are pooled,
    each question's values averaged over the draws so far, until the two layouts are `margin` apart on every
    question (or `max_draws` draws are in): one draw of 16 rows can put them close, the average of several
    cannot, and a wrong answer never passes as a tie."""
    rng = np.random.default_rng(seed)
    pooled = {key: dict.fromkeys(_LAYOUTS, 0.0) for key in _QUESTIONS}
    for _ in range(max_draws):
        for key, values in _layout_scores(int(rng.integers(2**31))).items():
            for f, x in values.items():
                pooled[key][f] += x
        if all(_apart(values, margin) for values in pooled.values()):
            break
    return {key: min(values, key=values.get) for key, values in pooled.items()}


def _apart(values: dict, margin: float) -> bool:
    """True when the larger of the two layouts' values is over `margin` times the smaller."""
    lo, hi = sorted(values.values())
    return hi > margin * lo


def check_fp8_layout(prediction: dict, *, seed: int | None = None) -> None:
    """Exercise 3: `prediction` maps each question of `_QUESTIONS` to "fp8_e4m3" or "fp8_e5m2"; each is compared
    with the layout measured on inputs drawn fresh for this run (`fp8_layout_measured`)."""
    if not isinstance(prediction, dict):
        print(
            f"check_fp8_layout: ✗ expected a dict of answers, got {type(prediction).__name__}"
        )
        return
    missing = [key for key in _QUESTIONS if prediction.get(key) is None]
    if len(missing) == len(_QUESTIONS):
        print(
            "check_fp8_layout: not answered yet: fill in the three layouts of `prediction`"
        )
        return
    bad = [key for key in _QUESTIONS if prediction.get(key) not in (None, *_LAYOUTS)]
    if missing or bad:
        key = (missing or bad)[0]
        print(
            f"check_fp8_layout: ✗ {key!r} ({_QUESTIONS[key]}) must be 'fp8_e4m3' or 'fp8_e5m2', "
            f"got {prediction.get(key)!r}"
        )
        return
    rng, seed = _fresh(seed)
    truth = fp8_layout_measured(int(rng.integers(1_000_000)))
    wrong = [key for key in _QUESTIONS if prediction[key] != truth[key]]
    if wrong:
        for key in wrong:
            print(
                f"check_fp8_layout: ✗ {key!r}: measured {truth[key]}, you said {prediction[key]} "
                f"({_WHY[key]})"
            )
        print(seed_note(seed), end="")
        return
    print(
        "check_fp8_layout: ✓ all three layouts agree with a fresh measurement at M = 4096, std(s) = 4"
    )


# ------------------------------------------------------------------------- exercise 3: the flush gap


def flush_gap_reference(fmt: str, scale: float = 1.0) -> float:
    """$g = \\ln(2\\,\\mathrm{scale} / x_{sub})$: an entry $p = e^{s - m}$ cast as $\\mathrm{fl}(\\mathrm{scale}\\cdot p)$
    rounds to 0 exactly when $m - s \\ge g$ ($x_{sub}$ the format's smallest subnormal; half of it is a tie,
    which goes to the even neighbour 0)."""
    from ..precision import format_info

    return float(np.log(2 * scale / format_info(fmt)["smallest_subnormal"]))


def _flush_variants(fmt: str, scale: float) -> dict:
    """{mistake: (g, hint)} for the classic wrong gaps."""
    from ..precision import format_info

    info = format_info(fmt)
    sub, tiny = info["smallest_subnormal"], info["tiny"]
    g = flush_gap_reference(fmt, scale)
    return {
        "no half": (
            np.log(scale / sub),
            "ln 2 short: an entry flushes up to half the smallest subnormal (the tie at exactly half goes "
            "to 0), not up to the subnormal itself",
        ),
        "normal": (
            np.log(2 * scale / tiny),
            "the gap to the smallest *normal* number: below it the subnormals still hold nonzero values; "
            "only under half the smallest subnormal is an entry lost",
        ),
        "normal no half": (
            np.log(scale / tiny),
            "the gap to the smallest *normal* number: below it the subnormals still hold nonzero values; "
            "only under half the smallest subnormal is an entry lost",
        ),
        "no scale": (
            np.log(2 / sub),
            "the scale is missing: the cast sees scale·p, so the gap grows by ln(scale)",
        ),
        "scale inverted": (
            np.log(2 / (sub * scale)),
            "the scale works the wrong way: scale·p is larger than p, so a scale above 1 lets *more* "
            "of the row survive: the gap grows by ln(scale)",
        ),
        "log2": (
            g / np.log(2),
            "a gap in powers of two (log2): the scores are in e's units, p = e^(s - m), so take ln",
        ),
        "sign": (
            -g,
            "the sign: m - s >= 0 for every key, and the gap is positive",
        ),
    }


def _flush_cases(rng) -> list:
    """(fmt, scale): the two FP8 layouts unscaled and at FlashAttention-3's 256, then a fresh format and scale."""
    fresh = (
        str(rng.choice(["fp16", "fp8_e4m3", "fp8_e5m2"])),
        float(rng.choice([4.0, 32.0, 100.0, 448.0 / 2])),
    )
    return [("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0), ("fp8_e4m3", 256.0), fresh]


def check_flush_gap(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(fmt, scale)`: the score gap $m - s$ from which on $\\mathrm{fl}(\\mathrm{scale}\\cdot e^{s-m}) = 0$.

    Compared with `flush_gap_reference` to 1e-9 and by its property: entries just past the gap round to 0 in
    the format, entries just short of it do not (`round_to`). Names the classic mistakes (`_flush_variants`);
    `round_to`, `p_underflow` and `flush_gap_reference` are refused (the gap is derived from the layout).
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cases = _flush_cases(rng)
    for fmt, scale in cases:
        label = f"({fmt!r}, scale={scale:g})"
        ok, got = _call(
            name,
            fn,
            (fmt, scale),
            label,
            [],
            ("round_to", "p_underflow", "flush_gap_reference"),
        )
        if not ok:
            print(seed_note(seed), end="")
            return
        try:
            got = float(got)
        except (TypeError, ValueError):
            print(
                f"{name}: ✗ case {label}: returned {got!r}, expected one number (a gap m - s)"
            )
            return
        want = flush_gap_reference(fmt, scale)
        if abs(got - want) <= 1e-9 * abs(want):
            continue
        hint = next(
            (
                text
                for g, text in _flush_variants(fmt, scale).values()
                if abs(got - g) <= 1e-6 * abs(g)
            ),
            "an entry p = e^(s - m) is cast as fl(scale·p); find the largest p that rounds to 0 "
            "from the layout (lab.format_info(fmt)), then solve for m - s",
        )
        below = round_to(np.float32([scale * np.exp(-got)]), fmt)[0]
        print(
            f"{name}: ✗ case {label}: gap {got:.4g}, expected {want:.4g}; at your gap "
            f"fl(scale·e^(-gap)) = {below:.3g}\n  hint: yours is {hint}"
        )
        print(seed_note(seed), end="")
        return
    print(
        f"{name}: ✓ passed {len(cases)} cases (e4m3 and e5m2 unscaled, e4m3 at 256, "
        "a fresh format and scale): the gap, to 1e-9"
    )


# ------------------------------------------------------------------------- exercise 4: the block quantizer


def _e4m3(x, variant="fn") -> np.ndarray:
    """fl(x) in OCP e4m3fn as `lab.round_to` has it (NaN past 464); "saturated": as torch's
    `.to(torch.float8_e4m3fn)` has it (±448 past 448, the same rounding inside); "fnuz": in e4m3fnuz,
    another FP8 format (largest 240, NaN past it), as ml_dtypes and torch have it."""
    if variant == "saturated":
        return round_to(np.clip(x, -448, 448), "fp8_e4m3")
    if variant == "fnuz":
        with np.errstate(all="ignore"):
            return (
                np.asarray(x, np.float32)
                .astype(ml_dtypes.float8_e4m3fnuz)
                .astype(np.float32)
            )
    return round_to(x, "fp8_e4m3")


def _groups_scaled(
    x,
    rows,
    *,
    absolute=True,
    undo=True,
    guard=True,
    top=448.0,
    cast="fn",
    per_matrix=True,
    columns=False,
    inverted=False,
    pow2=False,
) -> np.ndarray:
    """A planted variant of the block quantizer: `absolute=False` scales by max x (not max |x|), `undo=False`
    returns fl(x·s) without dividing by s, `guard=False` divides by a group's max even when it is 0, `top`
    maps max |x| onto another value than e4m3's largest, 448; `cast` is the rounding (`_e4m3`);
    `per_matrix=False` shares each group's scale across the leading axes (the heads); `columns` gives each column
    of a group its own scale; `inverted` casts x / s and multiplies back, the scale upside down; `pow2` rounds the
    scale down to a power of two."""
    x = np.asarray(x, np.float32)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        for r0 in range(0, x.shape[-2], rows):
            g = x[..., r0 : r0 + rows, :]
            amax = (np.abs(g) if absolute else g).max(
                axis=-2 if columns else (-1, -2), keepdims=True
            )
            if not per_matrix:  # one scale per group, shared by every matrix (head)
                amax = amax.max(axis=tuple(range(g.ndim - 2)), keepdims=True)
            if guard:
                amax = np.where(amax > 0, amax, np.float32(1))
            s = np.float32(top) / amax
            if pow2:
                s = np.exp2(np.floor(np.log2(s))).astype(np.float32)
            if inverted:
                out[..., r0 : r0 + rows, :] = _e4m3(g / s, cast) * s
                continue
            y = _e4m3(g * s, cast)
            out[..., r0 : r0 + rows, :] = y / s if undo else y
    return out


_BLOCK_MISTAKES = {
    "per tensor": "one scale for the whole matrix (per tensor): a group is `rows` consecutive rows, each "
    "with its own scale 448 / max|x| over the group",
    "whole tensor": "one scale for the whole tensor, every head and every row: a group is `rows` "
    "consecutive rows of one matrix (x[h, r0:r0 + rows]), each group with its own scale 448 / max|x| "
    "over that group",
    "per column": "a scale per column: a group's scale is one number, 448 / max|x| over all of the "
    "group's rows and columns (axis=(-1, -2)), not one per column (axis=-2)",
    "per column of the matrix": "a scale per column of the whole matrix: a group is `rows` consecutive "
    "rows, and its one scale is 448 / max|x| over all of that group's rows and columns "
    "(axis=(-1, -2))",
    "per row": "a scale per row: a group is `rows` consecutive rows sharing one scale",
    "across heads": "one scale per group shared by every matrix: x (…, N, d) holds one matrix per "
    "leading index (a head), and each matrix's groups have their own scale: take max|x| over the "
    "group's rows and columns only (axis=(-1, -2))",
    "max not abs": "the scale uses max x, not max |x|: in a group whose largest entry is negative, "
    "x·s passes ±448 and e4m3 has no room above 448",
    "max not abs, saturated": "the scale uses max x, not max |x|: in a group whose largest entry is "
    "negative, x·s passes -448, and torch's cast clips it to -448 (ml_dtypes gives NaN): e4m3 has "
    "no room above 448",
    "fnuz": "the rounding is to e4m3fnuz (largest value 240, another FP8 variant), not to the OCP "
    "e4m3 of the exercise (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn), whose largest value is 448",
    "not undone": "returned fl(x·s), still scaled: divide by s to come back to x's size",
    "no guard": "a group of zeros gave NaN (0 · 448/0): keep s = 1 where max|x| = 0",
    "top 240": "the scale maps max|x| onto 240, not 448: 240 is the largest value of e4m3fnuz, another "
    "FP8 variant; the e4m3 here (OCP e4m3fn, ml_dtypes.float8_e4m3fn) reaches 448, so s = 448 / max|x|",
    "top 464": "the scale maps max|x| onto 464, not 448: 464 is where rounding down to 448 stops (the "
    "tie), not a value e4m3 holds; its largest value is 448, so s = 448 / max|x|",
    "inverted": "the scale is upside down: yours casts x / s and multiplies back; cast x·s with "
    "s = 448 / max|x|, so the group's largest magnitude lands on 448, then divide by s",
    "power of two": "a power-of-two scale, 2^floor(log2(448 / max|x|)): exact to apply, and a sound "
    "choice (the OCP Microscaling formats share one), but not the course's model, which puts the "
    "group's largest magnitude exactly on 448 with s = 448 / max|x| (yours leaves it up to 2x lower)",
}


def _block_cases(rng) -> list:
    """(label, x, rows): fresh outlier matrices whose N is not a multiple of rows, one group all zeros, one
    group whose largest magnitude is negative."""
    out = []
    for n in range(3):
        rows = int(rng.choice([8, 16, 32]))
        N = rows * int(rng.integers(2, 6)) + int(
            rng.integers(1, rows)
        )  # a shorter last group
        d = int(rng.choice([16, 32, 64]))
        x = outlier_qkv((2, N, d), seed=int(rng.integers(2**31)), storage=None)[0]
        x = x.astype(np.float32)
        if n == 1:
            x[:, rows : 2 * rows] = 0.0  # a group of zeros
        if n == 2:
            r, c = int(rng.integers(0, rows)), int(rng.integers(0, d))
            x[:, r, c] = (
                -4 * np.abs(x[:, :rows]).max()
            )  # the group's largest magnitude, negative
        out.append((f"{n} (x of shape {x.shape}, rows = {rows})", x, rows))
    return out


def _nan_only_in_zero_groups(got, x, rows) -> bool:
    """Whether every NaN of `got` lies in a group of `rows` rows of `x` whose largest |x| is 0 (0 · 448/0);
    a NaN elsewhere is an entry never written (np.empty), not a missing guard."""
    n, d = x.shape[-2], x.shape[-1]
    xs, nan = np.abs(x).reshape(-1, n, d), np.isnan(got).reshape(-1, n, d).any(axis=-1)
    group = np.arange(n) // rows
    zero = np.stack(
        [xs[:, group == g].max(axis=(-1, -2)) == 0 for g in range(group[-1] + 1)],
        axis=1,
    )[:, group]  # (lead, n): the row's group is all zeros
    return bool(np.all(zero[nan]))


def check_block_fp8(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(x, rows)`, the course's model of FlashAttention-3's block quantization: fl_e4m3(x·s)/s with one s = 448/max|x| per
    group of `rows` consecutive rows (the last may be shorter, a group of zeros keeps s = 1); print one verdict.

    Cases drawn fresh each run on outlier inputs; names the classic mistakes (one scale per matrix, for the whole
    tensor, per column or per row or shared across the heads, max x for max |x|, the scale not undone or upside down, 240 or 464 for 448, no guard for a group of zeros, e4m3fnuz for e4m3) and refuses
    `lab.quantize_fp8`. The rounding itself is not the exercise: `lab.round_to`, ml_dtypes'
    `float8_e4m3fn` and torch's `.to(torch.float8_e4m3fn)` are the same rounding to nearest even to the
    same format (they differ only past 448, which a right scale never reaches), so each is accepted.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cases = _block_cases(rng)
    for label, x, rows in cases:
        ok, got = _call(name, fn, (x.copy(), rows), label, [], ("quantize_fp8",))
        if not ok:
            print(seed_note(seed), end="")
            return
        got = np.asarray(got, dtype=np.float64)
        want = quantize_fp8(x, rows).astype(np.float64)
        if got.shape != want.shape:
            print(f"{name}: ✗ case {label}: shape {got.shape}, expected {want.shape}")
            print(seed_note(seed), end="")
            return
        if np.allclose(got, want, rtol=1e-6, atol=0, equal_nan=False):
            continue
        planted = {
            "per tensor": quantize_fp8(x),
            # one group of all N rows: shared by the heads too, or split by column
            "whole tensor": _groups_scaled(x, x.shape[-2], per_matrix=False),
            "per column": _groups_scaled(x, rows, columns=True),
            "per column of the matrix": _groups_scaled(x, x.shape[-2], columns=True),
            "per row": quantize_fp8(x, 1),
            "across heads": _groups_scaled(x, rows, per_matrix=False),
            "max not abs": _groups_scaled(x, rows, absolute=False),
            "max not abs, saturated": _groups_scaled(
                x, rows, absolute=False, cast="saturated"
            ),
            "fnuz": _groups_scaled(x, rows, cast="fnuz"),
            "not undone": _groups_scaled(x, rows, undo=False),
            "no guard": _groups_scaled(x, rows, guard=False),
            "top 240": _groups_scaled(x, rows, top=240.0),
            "top 464": _groups_scaled(x, rows, top=464.0),
            "inverted": _groups_scaled(x, rows, inverted=True),
            "power of two": _groups_scaled(x, rows, pow2=True),
        }
        fault = next(
            (
                text
                for key, text in _BLOCK_MISTAKES.items()
                if np.allclose(got, planted[key], rtol=1e-6, atol=0, equal_nan=True)
            ),
            None,
        )
        if (
            fault is None
            and np.isnan(got).any()
            and _nan_only_in_zero_groups(got, x, rows)
        ):
            fault = _BLOCK_MISTAKES["no guard"]
        if fault is None:
            bad = np.argwhere(~np.isclose(got, want, rtol=1e-6, atol=0))[0]
            r = int(bad[-2])
            fault = (
                f"first wrong entry at row {r} (group {r // rows}), column {int(bad[-1])}: yours "
                f"{got[tuple(bad)]:.6g}, expected {want[tuple(bad)]:.6g}"
                + (
                    " (the last group is shorter)"
                    if r // rows == (x.shape[-2] - 1) // rows
                    else ""
                )
            )
        print(f"{name}: ✗ case {label}: {fault}")
        print(seed_note(seed), end="")
        return
    print(
        f"{name}: ✓ passed {len(cases)} fresh cases, equal to the course's model of block quantization\n"
        "  (a shorter last group, a group of zeros, a negative largest entry)"
    )


def check_peak_prediction(
    predicted: dict, measured: dict | None = None, d: int = 128
) -> None:
    """Exercise 2's follow-up: `predicted` and `measured` map "rows" and "columns" to max|x R| / ‖x‖ for x a row
    of Sylvester's H. Without `measured` (the prediction's own cell, before anything is measured) it says only
    whether both numbers are written. With it: signs on the columns must be predicted at 1 (within 0.05); signs
    on the rows near the largest of d entries of about N(0, 1/d): 2 to 4 standard deviations 1/√d. Prints one
    line per side."""
    if not isinstance(predicted, dict) or all(
        predicted.get(k) is None for k in ("rows", "columns")
    ):
        print(
            "predicted_peak: not predicted yet: write your two numbers, then run the cell again"
            if measured is None
            else "predicted_peak: not predicted yet: write your two numbers in the cell above, run it, "
            "then this one"
        )
        return
    if measured is None:
        said = {k: predicted.get(k) for k in ("rows", "columns")}
        if any(x is None for x in said.values()):
            return print("predicted_peak: predict both, the rows and the columns")
        try:
            said = {k: float(x) for k, x in said.items()}
        except (TypeError, ValueError):
            return print(
                "predicted_peak: write each prediction as a number, max|x R| / ‖x‖ (a float)"
            )
        return print(
            f"predicted_peak: noted (signs on the rows {said['rows']:.2f}, on the columns "
            f"{said['columns']:.2f}); the next cell measures both"
        )
    for side in ("rows", "columns"):
        p, m = predicted.get(side), measured[side]
        if p is None:
            print(f"signs on the {side:<7}: measured {m:.2f}; you predicted nothing")
            continue
        if side == "columns":
            ok = abs(float(p) - 1.0) <= 0.05
            why = "the whole norm in one entry: 1"
        else:
            sd = 1 / np.sqrt(d)
            ok = 2 * sd <= float(p) <= 4 * sd
            why = (
                f"the largest of d entries of about N(0, 1/d): 2 to 4 times 1/√d = {sd:.3f}, "
                f"{2 * sd:.2f} to {4 * sd:.2f}"
            )
        mark = "✓" if ok else "✗"
        print(
            f"signs on the {side:<7}: measured {m:.2f}, you said {float(p):.2f} {mark}\n  ({why})"
        )


# ------------------------------------------------------------------- exercise 1: the tiled FP16 pipeline


def tiled_fp16_planted(q, k, v, Bc, fault=None) -> np.ndarray:
    """The tiled kernel's FP16 pipeline, one query block: $S_{ij}$, m, l, acc in FP32, each $P_{ij}$ rounded to
    FP16 before $P_{ij}V_j$, l summed from the unrounded $P_{ij}$; returns $o = acc/l$ in FP32. `fault` plants a
    mistake: "S in FP16", "P not rounded", "P in BF16", "PV rounded" (the product P_ij V_j rounded to FP16,
    not P_ij), "acc in FP16", "l from rounded P", "one block", "last block dropped",
    "O in FP16", "standard" (standard attention: S and the normalized P stored in FP16); the update's slips
    "block max" (m' = rowmax S_IJ, not max(m, rowmax S_IJ)), "P against block max" (P_IJ = e^(S_IJ - rowmax
    S_IJ) while l, acc follow the running max), "alpha inverted" (e^(m' - m): NaN from the first block's
    e^(m' + inf) · 0) and "alpha inverted, guarded" (the same, the first block's factor taken as 0); the
    scale's slips "no 1/sqrt(d)", "1/d for 1/sqrt(d)" and "sqrt(d) for 1/sqrt(d)"."""
    q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    scale = np.float32(1 / np.sqrt(q.shape[-1]))
    if fault in _SCALE_SLIPS:
        scale, fault = np.float32(_SCALE_SLIPS[fault](q.shape[-1])), None
    if fault == "standard":
        s = round_to(q @ k.T * scale, "fp16")
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return round_to(p / p.sum(axis=-1, keepdims=True), "fp16") @ v
    M = k.shape[0]
    Bc = M if fault == "one block" else Bc
    stop = M - M % Bc if fault == "last block dropped" and M % Bc else M
    m = np.full((q.shape[0], 1), -np.inf, np.float32)
    l = np.zeros((q.shape[0], 1), np.float32)
    acc = np.zeros((q.shape[0], v.shape[1]), np.float32)
    for j in range(0, stop, Bc):
        s = q @ k[j : j + Bc].T * scale  # S_IJ: (N, Bc), FP32
        if fault == "S in FP16":
            s = round_to(s, "fp16")
        top = s.max(axis=-1, keepdims=True)  # rowmax S_IJ
        m_new = top if fault == "block max" else np.maximum(m, top)
        p = np.exp(s - (top if fault == "P against block max" else m_new))  # P_IJ <= 1
        p16 = (
            p
            if fault in ("P not rounded", "PV rounded")
            else round_to(p, "bf16" if fault == "P in BF16" else "fp16")
        )
        alpha = np.exp(m - m_new)
        if fault == "alpha inverted":
            alpha = np.exp(m_new - m)  # inf at the first block, where m = -inf
        if fault == "alpha inverted, guarded":
            alpha = np.where(np.isneginf(m), np.float32(0), np.exp(m_new - m))
        l = alpha * l + (p16 if fault == "l from rounded P" else p).sum(
            -1, keepdims=True
        )
        pv = p16 @ v[j : j + Bc]
        acc = alpha * acc + (round_to(pv, "fp16") if fault == "PV rounded" else pv)
        if fault == "acc in FP16":
            acc = round_to(acc, "fp16")
        m = m_new
    o = acc / l
    return round_to(o, "fp16") if fault == "O in FP16" else o


_SCALE_SLIPS = {
    "no 1/sqrt(d)": lambda d: 1.0,
    "1/d for 1/sqrt(d)": lambda d: 1.0 / d,
    "sqrt(d) for 1/sqrt(d)": lambda d: np.sqrt(d),
}

_PIPELINE_FAULTS = {
    "no 1/sqrt(d)": "the scores were not scaled: S_IJ = Q_I K_Jᵀ / √d (the 1/√d is missing, so every "
    "row of P is far more peaked than the softmax's)",
    "1/d for 1/sqrt(d)": "the scores were divided by d: S_IJ = Q_I K_Jᵀ / √d, the square root of d",
    "sqrt(d) for 1/sqrt(d)": "the scores were multiplied by √d: S_IJ = Q_I K_Jᵀ / √d, divided by it",
    "S in FP16": "S_IJ was stored in FP16 (as standard attention stores S; a float16 matmul does it too): "
    "upcast Q_I, K_J to float32 and keep S_IJ, m in FP32; only P_IJ is rounded",
    "P not rounded": "no P_IJ was rounded to FP16: this is the FP32 kernel; round P_IJ = e^(S_IJ - m) "
    "to FP16 before P_IJ V_J",
    "P in BF16": "P_IJ was rounded to BF16, not FP16: BF16 keeps FP32's range with 8 significant "
    "bits, FP16 has 11; round with lab.round_to(p, 'fp16') or astype(np.float16)",
    "PV rounded": "the product P_IJ V_J was rounded to FP16, not P_IJ: round the operand "
    "P_IJ = e^(S_IJ - m) before the matmul; the product adds into acc in FP32",
    "acc in FP16": "acc was rounded to FP16 after each block: the accumulator stays in FP32 (only the "
    "operand P_IJ of the matmul is FP16)",
    "l from rounded P": "l sums the rounded P_IJ: GPU kernels take the row sum of P_IJ in FP32, before "
    "it is converted for the matmul",
    "one block": "this is one block of all M keys: loop over blocks of Bc keys, rounding each "
    "P_IJ = e^(S_IJ - m) against the running m of its own step",
    "last block dropped": "the last, shorter block of keys is missing (M is not a multiple of Bc)",
    "O in FP16": "o was rounded to FP16: return acc / l in FP32 here (the final FP16 store is the same "
    "in both kernels and left out)",
    "standard": "this is standard attention (S and the normalized P stored in FP16): build the tiled "
    "pipeline",
    "block max": "m was set to the block's own max, m' = rowmax S_IJ: the running max is m' = max(m, "
    "rowmax S_IJ), the largest score seen so far. With the block's max, a block of smaller scores lowers "
    "m, α = e^(m - m') exceeds 1 (and overflows once the blocks' maxima differ by 88), and P_IJ is "
    "rounded against another m than the kernel's",
    "P against block max": "P_IJ was taken against the block's own max, e^(S_IJ - rowmax S_IJ), while l "
    "and acc are kept against the running max m': a block whose max is below m' is added too large by "
    "e^(m' - rowmax S_IJ); take P_IJ = e^(S_IJ - m')",
    "alpha inverted": "α is inverted, e^(m' - m) for e^(m - m'): at the first block m = -inf, so it is "
    "e^(+inf) = inf and inf · 0 = NaN in l and acc. When the max rises from m to m', what was summed "
    "against m shrinks by α = e^(m - m') ≤ 1",
    "alpha inverted, guarded": "α is inverted, e^(m' - m) for e^(m - m'): when the max rises from m to "
    "m', what was summed against m must shrink by α = e^(m - m') ≤ 1, not grow",
}


def _pipeline_cases(rng) -> list:
    """(label, q, k, v, Bc): fresh outlier inputs in float16, M not a multiple of Bc, the running max rising
    in the last block (a large score planted there), so each fault moves o by far more than float32's noise."""
    out = []
    for n in range(3):
        Bc = int(rng.choice([16, 32, 64]))
        M = Bc * int(rng.integers(3, 6)) + int(rng.integers(1, Bc))
        N, d = int(rng.choice([32, 48, 64])), int(rng.choice([16, 64]))  # √d exact
        q, k, v = outlier_qkv((1, max(N, M), d), seed=int(rng.integers(2**31)))
        q, k, v = q[0, :N], k[0, :M], v[0, :M]
        k[-1] = 3 * q.mean(axis=0) / max(np.linalg.norm(q.mean(axis=0)), 1e-3) * 4
        q, k, v = (round_to(a, "fp16").astype(np.float16) for a in (q, k, v))
        out.append((f"{n} (N = {N}, M = {M}, d = {d}, Bc = {Bc})", q, k, v, Bc))
    return out


def _rel(a, b) -> float:
    """The median over rows of $\\|a_r - b_r\\| / \\|b_r\\|$: a fault moves every row, while float32's rounding
    in another order (a division for a multiplication, another matmul order) flips the FP16 rounding of a few
    $P_{ij}$ only, and so moves a few rows."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.median(np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)))


def _distance(got, planted) -> float:
    """`_rel` over the rows finite in both, when `got` and `planted` hold NaN at the same entries (0 when
    both are NaN everywhere: an inverted α); inf when their NaN differ."""
    got, planted = np.asarray(got, np.float64), np.asarray(planted, np.float64)
    if not np.array_equal(np.isnan(got), np.isnan(planted)):
        return np.inf
    rows = np.isfinite(got).all(axis=-1) & np.isfinite(planted).all(axis=-1)
    if not rows.any():
        return 0.0 if np.isnan(got).all() else np.inf
    return _rel(got[rows], planted[rows])


def check_tiled_fp16(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q, k, v, Bc)`, the tiled kernel's FP16 pipeline (`tiled_fp16_planted` without a fault), on
    fresh outlier inputs stored in float16: equal to it within float32's rounding, each planted fault named;
    then its error against float64 set beside standard attention's. Refuses lab's kernels.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    banned = (
        "attention_tiled_lowp",
        "attention_standard_lowp",
        "flash_attention_numpy",
    )
    cases = _pipeline_cases(rng)
    for label, q, k, v, Bc in cases:
        ok, got = _call(name, fn, (q.copy(), k.copy(), v.copy(), Bc), label, [], banned)
        if not ok:
            print(seed_note(seed), end="")
            return
        got = np.asarray(got, dtype=np.float64)
        want = tiled_fp16_planted(q, k, v, Bc).astype(np.float64)
        if got.shape != want.shape:
            print(f"{name}: ✗ case {label}: shape {got.shape}, expected {want.shape}")
            print(seed_note(seed), end="")
            return
        far = _rel(got, want) if np.all(np.isfinite(got)) else np.inf
        if far < 1.5e-6:  # float32's own noise: below 5e-7 (d = 32, 64)
            continue
        with np.errstate(all="ignore"):
            dist = {
                f: _distance(got, tiled_fp16_planted(q, k, v, Bc, f))
                for f in _PIPELINE_FAULTS
            }
        near = min(dist, key=dist.get)
        if dist[near] < min(far, 1) / 4:
            fault = _PIPELINE_FAULTS[near]
        else:
            fault = (
                f"o differs from the tiled FP16 pipeline by {far:.1e} (relative, the median row), more than "
                "float32's rounding: check the online softmax (m, alpha = e^(m - m'), l, acc)"
            )
        print(f"{name}: ✗ case {label}: {fault}")
        print(seed_note(seed), end="")
        return
    q, k, v = outlier_qkv((1, 512, 64), seed=int(rng.integers(2**31)))
    q, k, v = (a[0].astype(np.float16) for a in (q, k, v))
    ok, got = _call(
        name, fn, (q, k, v, 64), "(N = M = 512, d = 64, Bc = 64)", [], banned
    )
    if not ok:
        print(seed_note(seed), end="")
        return
    ref = attention_reference(*(a.astype(np.float64) for a in (q, k, v)))[0]
    ti = rmse(np.asarray(got, np.float64), ref)
    st = rmse(tiled_fp16_planted(q, k, v, 64, "standard"), ref)
    print(
        f"{name}: ✓ passed {len(cases)} fresh cases: only P_IJ rounded, to FP16; S_IJ, m, l, acc in "
        "FP32 or wider"
    )
    print(
        f"  a fresh outlier input (N = M = 512, d = 64), RMSE of o against float64: yours {measured(ti)}"
    )
    print(
        f"  standard attention (S, P stored in FP16) {measured(st)}, {measured(st / ti, '.0f')}x yours;"
        f" yours below: {ti < st}"
    )
