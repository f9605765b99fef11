"""Checks for the exercises of notebook 06. Part 1 (06_flashattention2): one query block in FA1's form
(exercise 1) and in FA2's form (2), the time-share model at peak rates (3), the A100 time model inverted (4),
FA2's operations under a causal mask (5). Part 2 (06_flashattention2_parallelism): split-K inside a thread
block (1), FA1's own loop order with its state in HBM (2). `loop_record` shows a
learner what their two block loops did (when each held the normalized output, and its divides).

- `check_time_share`           : `(t_matmul, t_exp, t_rest, share)` of one unmasked head at peak rates, each unit's
  operations over its rate, against `gpu_time_share` on `flop_split`'s counts (both refused to the answer, by any
  name, with lab's counts and kernels). Hints name the classic slips (matmuls at the FP32 rate, exponentials as
  FP32 operations, the other variant's rescaling, the divides or the softmax's three operations left out, FA2's
  division at every tile, half the matmul FLOPs, a share over the matmul time or of the FLOPs).
- `check_split_k_tile`         : one key block over w warps, warp u owning keys u·c .. (u+1)·c - 1,
  c = ceil(Bc / w): each partial $(m_u, l_u, acc_u)$ against its own keys alone, the merge against the whole
  tile's unnormalized state; watched inputs show that no score array spans more than c keys and that the merged
  acc is computed from the warps' accs; lab's states and attention, and torch, are refused. Hints name the
  classic slips (sums added without moving them to the common max, the factor upside down, a running max across
  warps, normalized partials or merge, c rounded down, no max subtracted, a missing 1/√d).

- `check_affordable_nonmatmul` : the FP32 non-matmul FLOPs per score $f$, besides the score's one exponential,
  that keep the time outside matmuls at `share` on an A100:
  $f/R_{non} + 1/R_{exp} = \\frac{share}{1 - share}\\cdot 4d/R_{mm}$, with the times per score taken from
  `lab.gpu_time_share` (exponentials at the special-function rate `lab.exp_rate("A100")`); negative when the
  exponential alone takes more than `share`. An answer that also charges the exponential's multiply by
  $\\log_2 e$ as one FP32 FLOP (one fewer FLOP per score) is accepted, and the pass line says so.
- `check_causal_fa2_ops`       : FA2's multiplies plus divides, causal, $N = M$, $B_r = B_c = B$, against
  `lab.flash_counts` (which the answer may not run, nor `lab.tile_counts`, `lab.trace.record` or lab's kernels); names the classic miscounts (every tile, the diagonal left
  out, full last block). Both warm-ups add cases drawn afresh on each run to their fixed ones.
- `check_fa1_block`, `check_fa2_block` : one query block against the float64 reference, $(o, m, l)$ and
  $(o, lse)$, on a short last key block, on very large and very negative scores and on a key block near +400
  before blocks near -400 (a block's own max in place of the running one overflows α). Their inputs are
  watched (`Watched`): every array computed from them is recorded, so the checks see that every score array is
  a tile of at most Bc keys, that each score is exponentiated once, and whether the loop held
  the normalized output $\\mathrm{softmax}(S_{:, :j})V_{:j}$ after each key block, as FA1 does, or only after
  the last, as FA2 does; lab's attention, by any name, is refused. Hints name a missing $1/\\sqrt d$ (o equals the output with scale 1) and, in FA1's
  form, $lse = m + \\log l$ returned in place of $l$.
- `check_fa1_keys_outer`       : FA1's loop order on whole q, k, v: `O`, `m`, `l` handed over as `HBM` arrays that
  log every block read and written; the values against the reference (a key block near +400 before blocks near
  -400 among the cases), then the log: key blocks outside, each query block's state written once per key block
  and read back before each update; q, k, v watched, so that no array of scores is larger than one Br × Bc tile
  (all of S, or one block row or column of it, formed at once), and the score tiles are first formed key block
  by key block; then what HBM holds after every key block: O normalized over the keys so far, m and l theirs
  (FA2's unnormalized acc in FA1's order, or final values written ahead, are named). Hints name the query blocks
  outside, a state written once per query block, an `O` kept on chip, the old O rescaled without l_old, the short
  last key block dropped, a missing 1/√d. `hbm_record` runs a loop on such arrays and returns their log.

Taught in: notebooks/06_flashattention2.ipynb (exercises 1 to 5),
notebooks/06_flashattention2_parallelism.ipynb (exercises 1 and 2)
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from ..attention import attention_reference
from ..exercises import check, diagnose, seed_note
from ..tiling import HARDWARE, flash_counts, flop_split, gpu_time_share
from ._support import _fresh, _own_work, _refusal, _settled, _watching

__all__ = [
    "check_affordable_nonmatmul",
    "check_causal_fa2_ops",
    "Watched",
    "check_fa1_block",
    "check_fa2_block",
    "check_split_k_tile",
    "check_time_share",
    "check_fa1_keys_outer",
    "HBM",
    "hbm_record",
    "loop_record",
]

_NOT_YET = "{}: not implemented yet (fill in the stub above, then run this cell again)"


# ------------------------------------------------------------------------------------ Part 1, exercise 3: the time-share model

_UNITS = ("t_matmul", "t_exp", "t_rest", "share")


def _time_counts(N: int, d: int, B: int, variant: str, **slip) -> dict:
    """One unmasked head, $N = M$ a multiple of $B = B_r = B_c$, $d_v = d$: matmul FLOPs, exponentials, the rest.

    $T = N / B$ key blocks; per row-tile FA2 does $d + 1$ multiplies and one $\\alpha$, FA1 $2d + 3$ multiplies,
    $d$ divides and two factors; FA2 divides $N d$ once; every score costs a max, a subtraction and a sum.
    `slip` plants a learner's miscount: `other` (the other variant's rescaling), `no_div`, `no_softmax`,
    `no_alpha`, `div_every_tile`, `half_matmul`."""
    T = N // B
    counted = "fa1" if (variant == "fa1") != bool(slip.get("other")) else "fa2"
    if counted == "fa1":
        exp, mul, div = N * N + 2 * N * T, N * T * (2 * d + 3), N * T * d
    else:
        exp, mul = N * N + N * T, N * T * (d + 1)
        div = N * T * d if slip.get("div_every_tile") else N * d
    if slip.get("no_alpha"):
        exp = N * N
    if (
        slip.get("kept_product") and counted == "fa1"
    ):  # l·e^(m - m′) formed once, not twice
        mul -= N * T
    if slip.get("row_max"):  # max(m, m̃) per row and key block counted too
        mul += N * T
    if slip.get(
        "reciprocal"
    ):  # a division as 1/l and d_v multiplies: one more op a row
        div += N * T if counted == "fa1" else N
    if slip.get("log2e"):  # the exponential's multiply by log2 e, one FP32 op each
        mul += exp
    rest = (0 if slip.get("no_softmax") else 3 * N * N) + mul
    rest += 0 if slip.get("no_div") else div
    matmul = (2 if slip.get("half_matmul") else 4) * N * N * d
    return {"matmul": matmul, "exp": exp, "rest": rest}


def _time_model(N, d, B, variant, chip, **slip) -> tuple:
    """$t_u = F_u / R_u$ per unit and the share $(t_{exp} + t_{rest}) / \\sum_u t_u$; `slip` plants a pricing or
    counting mistake (see `_time_counts`, and `mm_fp32`, `exp_fp32`, `exp_in_rest`, `half_slot`, `over_mm`,
    `mm_share`, `flop_share`)."""
    f, r = _time_counts(N, d, B, variant, **slip), HARDWARE[chip]
    t_mm = f["matmul"] / (r["nonmatmul"] if slip.get("mm_fp32") else r["matmul"])
    t_exp = f["exp"] / (r["nonmatmul"] if slip.get("exp_fp32") else r["exp"])
    t_rest = f["rest"] / r["nonmatmul"] * (2 if slip.get("half_slot") else 1)
    if slip.get("exp_in_rest"):
        t_exp, t_rest = 0.0, t_rest + f["exp"] / r["nonmatmul"]
    share = (t_exp + t_rest) / (t_mm + t_exp + t_rest)
    if slip.get("over_mm"):
        share = (t_exp + t_rest) / t_mm
    if slip.get("mm_share"):
        share = 1 - share
    if slip.get("flop_share"):
        share = (f["exp"] + f["rest"]) / (f["matmul"] + f["exp"] + f["rest"])
    return t_mm, t_exp, t_rest, share


def _time_reference(N, d, B, variant, chip) -> tuple:
    """lab's model: `flop_split`'s counts priced by `gpu_time_share`, the rest = its non-matmul time less the exps'."""
    s = flop_split(N, d=d, block_q=B, block_k=B, variant=variant)
    t = gpu_time_share(s["matmul"], s["nonmatmul"], chip, exp=s["exp"])
    return t["t_matmul"], t["t_exp"], t["t_nonmatmul"] - t["t_exp"], t["share"]


_TIME_SLIPS = (
    (
        {"mm_fp32": True},
        "the matmuls priced at the FP32 rate: they run on the tensor cores, at "
        "lab.chip(chip)['matmul_flops'], 16 times the FP32 rate on an A100",
    ),
    (
        {"exp_fp32": True},
        "the exponentials priced as FP32 operations: they run on the special-function "
        "units, at lab.chip(chip)['exp_per_s'], about 8 times slower than FP32 on an A100",
    ),
    (
        {"exp_in_rest": True},
        "the exponentials counted among the FP32 operations (t_exp = 0): they run on the "
        "special-function units, at lab.chip(chip)['exp_per_s']",
    ),
    (
        {"other": True},
        "the other variant's rescaling counted: per row and key block FA1 does 2 d_v + 3 "
        "multiplies, d_v divides and 2 factors; FA2 d_v + 1 multiplies and one α, and "
        "divides N d_v once (section 2's table)",
    ),
    (
        {"no_div": True},
        "the divides left out: they run on the FP32 units too (FA1 d_v a row at every "
        "key block, FA2 d_v a row once)",
    ),
    (
        {"no_softmax": True},
        "each score's max, subtraction and sum left out of the rest: 3 FP32 operations "
        "a score, most of the rest",
    ),
    (
        {"no_alpha": True},
        "the rescale factors' exponentials left out: FA2 computes one α per row and key "
        "block, FA1 two factors",
    ),
    (
        {"div_every_tile": True},
        "FA2's division at every key block: it divides acc by l once, after the last",
    ),
    (
        {"half_matmul": True},
        "half the matmul FLOPs: QKᵀ and PV each do 2·N·M·d, 4 N² d in all",
    ),
    (
        {"half_slot": True},
        "the rest at one operation a slot (half the FP32 rate): the model charges 2 FLOPs "
        "a slot, as FlashAttention-2's paper does (section 3's first 'Under the hood')",
    ),
    (
        {"over_mm": True},
        "the share as (t_exp + t_rest) / t_matmul: it is the share of the total time, "
        "t_matmul + t_exp + t_rest",
    ),
    ({"mm_share": True}, "the matmuls' share: asked is the time outside them"),
    (
        {"flop_share": True},
        "a share of the FLOPs, not of the time: price each unit at its own rate first",
    ),
)


_TIME_CONVENTIONS = (  # counts that differ from section 2's table by a convention, not a mistake
    (
        {"kept_product": True},
        "2r multiplies a row-tile for FA1's l·e^(m - m′) (the table's 3r: the rule forms it twice)",
    ),
    (
        {"row_max": True},
        "the per-row max(m, m̃) counted, which the spec leaves out",
    ),
    (
        {"reciprocal": True},
        "a division counted as 1/l and d_v multiplies (one more operation a row)",
    ),
    (
        {"log2e": True},
        "the exponential's multiply by log2 e counted (kernels fold it into s - m)",
    ),
)


def _time_convention(case, got) -> tuple | None:
    """`(words, relative change of the share)` of the known convention `got` follows exactly (to 1e-9) where
    section 2's table differs; None when it follows none."""
    try:
        got = tuple(float(x) for x in got)
    except (TypeError, ValueError):
        return None
    if len(got) != 4:
        return None
    want = _time_model(*case)
    for slip, text in _TIME_CONVENTIONS:
        alt = _time_model(*case, **slip)
        if np.allclose(got, alt, rtol=1e-9, atol=0) and not np.allclose(
            alt, want, rtol=1e-9, atol=0
        ):
            return text, abs(alt[3] - want[3]) / want[3]
    return None


def _time_hint(case, got, want):
    try:
        got = tuple(float(x) for x in got)
    except (TypeError, ValueError):
        return None
    if len(got) != 4 or np.allclose(got, want, rtol=1e-9, atol=0):
        return None
    planted = [(_time_model(*case, **slip), text) for slip, text in _TIME_SLIPS]
    whole = next(
        (t for w, t in planted if np.allclose(got, w, rtol=1e-9, atol=0)), None
    )
    if whole:
        return f"yours is {whole}"
    for i in range(4):  # one element wrong, the others right or wrong in their own way
        if np.isclose(got[i], want[i], rtol=1e-9, atol=0):
            continue
        part = next(
            (t for w, t in planted if np.isclose(got[i], w[i], rtol=1e-9, atol=0)),
            None,
        )
        if part:
            return f"your {_UNITS[i]} is {part}"
    if np.isclose(got[3], 100 * want[3], rtol=1e-9, atol=0):
        return "your share is a percent: return it as a fraction of 1 (0.274, not 27.4)"
    N, _, _, _, chip = case
    if np.isclose(
        got[2], want[2] + N * N / HARDWARE[chip]["nonmatmul"], rtol=1e-9, atol=0
    ):
        return (
            "your t_rest counts 4 FP32 operations a score, one more than the max, subtraction and sum: "
            "the 1/√d multiply? Kernels fold it with log2 e into the FMA that forms the exponent, "
            "x·scale - m·scale (flash-attn's softmax.h), and the model already counts that subtraction"
        )
    return (
        "each unit's time is its operations over its rate: 4 N² d matmul FLOPs at "
        "matmul_flops, every exponential at exp_per_s, the rest (3 a score, then the "
        "variant's multiplies and divides) at nonmatmul_flops"
    )


def check_time_share(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(N, d, B, variant, chip)`: `(t_matmul, t_exp, t_rest, share)` of one unmasked head at peak rates.

    Four fixed cases (both variants, both chips), then four drawn afresh on each run (`seed` draws the same
    again), against `gpu_time_share` on `flop_split`'s counts; an answer that runs either, lab's counts, its
    kernels or `time_rows` (by any name) is refused. Taught in: notebooks/06_flashattention2.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (4096, 128, 128, "fa2", "A100"),
        (4096, 128, 128, "fa1", "A100"),
        (1024, 64, 64, "fa1", "H100"),
        (2048, 64, 128, "fa2", "H100"),
    ] + [
        (
            int(B * rng.integers(1, 65)),
            int(rng.choice([32, 64, 128, 256])),
            int(B),
            str(rng.choice(["fa1", "fa2"])),
            str(rng.choice(["A100", "H100"])),
        )
        for B in rng.choice([32, 64, 128], size=4)
    ]
    notes = {}  # a known convention the answer follows exactly: accepted, named, its largest effect

    def reference(*case):
        found = _time_convention(case, seen.get(case))
        if found is None:
            return _time_reference(*case)
        text, off = found
        notes[text] = max(off, notes.get(text, 0.0))
        return _time_model(*case, **_convention_slip(text))

    seen = {}

    def recorded(*case):
        seen[case] = got = fn(*case)
        return got

    recorded.__name__ = getattr(fn, "__name__", "time_share")
    if hasattr(fn, "raw"):
        recorded.raw = lambda *case: _recorded_raw(fn.raw, case, seen)
    shown = name or getattr(fn, "__name__", None) or "time_share"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check(
            recorded,
            reference,
            cases,
            name=shown,
            rtol=1e-2,  # a model: conventions within a percent agree
            atol=0,
            names=_UNITS,
            hint=_time_hint,
            properties=(_own_work(*_TIME_MODEL),),
            seed=seed,
        )
    print(out.getvalue(), end="")
    if "✓" in out.getvalue():
        for text, off in notes.items():
            print(f"  note: your convention differs by up to {off:.2%} in the share:")
            print(f"    {text}")


def _recorded_raw(raw, case, seen):
    """`raw(*case)`, its value remembered for the convention note."""
    seen[case] = got = raw(*case)
    return got


def _convention_slip(note: str) -> dict:
    """The planted convention a note names."""
    return next(slip for slip, text in _TIME_CONVENTIONS if text == note)


# ------------------------------------------------------------------------------------ Part 1, exercise 4: the model inverted


def _affordable_reference(d: int, share: float) -> float:
    """$f = (\\frac{share}{1 - share} t_{mm} - t_{exp}) R_{non}$, the per-score times from `gpu_time_share(4d, 1, exp=1)`."""
    t = gpu_time_share(4 * d, 1, "A100", exp=1)
    return (share / (1 - share) * t["t_matmul"] - t["t_exp"]) * HARDWARE["A100"][
        "nonmatmul"
    ]


def _affordable_hint(case, got, want):
    d, share = case
    r = HARDWARE["A100"]
    mm, exp = (
        r["nonmatmul"] / r["matmul"],
        r["nonmatmul"] / r["exp"],
    )  # 1/16 and about 8: R_non/R_mm, R_non/R_exp
    odds = share / (1 - share)
    slips = [
        (
            odds * 4 * d * mm,
            "the FP32 FLOPs with no exponential charged: each score's exponential runs on the "
            "special-function units, at lab.exp_rate('A100'), about 8 times slower than FP32",
        ),
        (
            odds * 4 * d * mm - 1,
            "the exponential charged as one FP32 FLOP: it runs at lab.exp_rate('A100'), "
            "which is R_non / R_exp ≈ 8 FP32 FLOPs' time",
        ),
        (
            share * 4 * d * mm - exp,
            "share · 4d · R_non/R_mm: the share is t_non over the total time, so "
            "t_non = share/(1 - share) · t_mm",
        ),
        (
            odds * 4 * d / mm - exp,
            "the rates upside down: a non-matmul FLOP is 16 times dearer, so fewer fit",
        ),
        (
            odds * 2 * d * mm - exp,
            "2d matmul FLOPs per score: two matmuls (QK^T and PV), 2d FLOPs each",
        ),
        (
            odds * d * mm - exp,
            "d matmul FLOPs per score: two matmuls (QK^T and PV), 2d FLOPs each",
        ),
    ]
    try:
        g = float(got)
    except (TypeError, ValueError):
        return None
    if np.isclose(
        g, want, rtol=1e-6
    ):  # right, and refused for another reason: that reason says it all
        return None
    if g == 0 and want < 0:
        return (
            "yours is 0 where the answer is negative: the exponential alone already takes more than "
            "`share` of the time here, and the check asks for that negative number, not a clamp"
        )
    return next(
        (
            f"yours is {what}"
            for value, what in slips
            if np.isclose(g, value, rtol=1e-6)
        ),
        "price one score on each unit (its matmul FLOPs, its exponential, your f FP32 FLOPs, each at "
        "its own rate), write the share outside the matmuls from those times, and solve that for f",
    )


def check_affordable_nonmatmul(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(d, share)`: FP32 non-matmul FLOPs per score, besides its exponential, that take `share` of an A100's time.

    Four fixed cases, then four drawn afresh on each run (`seed` draws the same again).
    Taught in: notebooks/06_flashattention2.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [(128, 0.3), (256, 0.5), (64, 0.1), (512, 0.25)] + [
        (int(16 * rng.integers(2, 33)), round(float(rng.uniform(0.05, 0.7)), 3))
        for _ in range(4)
    ]
    charged = []  # cases answered with the exponential's multiply by log2(e) charged too
    model = {case: _affordable_reference(*case) for case in cases}

    def answer(d, share):
        got = fn(d, share)
        try:
            with_mul = np.isclose(float(got), model[d, share] - 1, rtol=1e-6, atol=0)
        except (TypeError, ValueError):
            return got
        if with_mul:  # one FP32 FLOP for the multiply: a defensible model, accepted
            charged.append((d, share))
            return float(got) + 1
        return got

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check(
            answer,
            _affordable_reference,
            cases,
            name=name or getattr(fn, "__name__", None) or "affordable_nonmatmul",
            rtol=1e-6,
            atol=0,
            hint=_affordable_hint,
            seed=seed,
            properties=(_own_work("gpu_time_share"),),
        )
    text = out.getvalue()
    if "✓" in text and charged:
        text = text.rstrip("\n") + (
            " (your multiply by log2 e, one FP32 FLOP more per score: also right)\n"
        )
    print(text, end="")


# ------------------------------------------------------------------------------------ Part 1, exercise 5: causal counts


def _causal_reference(N: int, d: int, B: int) -> int:
    ops = flash_counts(
        N, N, d, block_q=B, block_k=B, causal=True, variant="fa2"
    ).op_counts
    return ops["mul"] + ops["div"]


def _causal_hint(case, got, want):
    if got == want:  # right, and refused for another reason: that reason says it all
        return None
    N, d, B = case
    T = -(-N // B)
    rows = np.minimum(np.arange(1, T + 1) * B, N) - np.arange(T) * B  # r_i
    visits = np.arange(1, T + 1)  # n_i = i + 1
    slips = [
        (
            N * T * (d + 1) + N * d,
            "the count without the mask: query block i computes key blocks 0..i only",
        ),
        (
            int((rows * (visits - 1)).sum()) * (d + 1) + N * d,
            "the diagonal tiles left out: they hold the keys "
            "j <= i and are computed (partly masked)",
        ),
        (
            int((rows * visits).sum()) * (d + 1),
            "without the final division acc / l, N d_v of them",
        ),
        (
            int((rows * (2 * visits - 1)).sum()) * (d + 1) // 2 + N * d,
            "the diagonal tiles counted as half tiles: a tile with at least one unmasked key "
            "is computed in full, masked entries and all",
        ),
        (
            int((rows * visits).sum()) * (3 * d + 3),
            "FA1's 3·d_v + 3 multiplies and divides per row and tile: FA2 does d_v + 1 per row "
            "and tile (α·acc, α·l), and d_v divides once per row at the end",
        ),
        (
            int((rows * visits).sum()) * (3 * d + 3) + N * d,
            "FA1's 3·d_v + 3 per row and tile, plus FA2's final division: FA2 does d_v + 1 "
            "per row and tile (α·acc, α·l), and N·d_v divides once at the end",
        ),
        (
            int((rows * visits).sum()) * (2 * d + 1) + N * d,
            "d_v divides per row and tile: that is FA1; FA2 "
            "divides once per row, at the end",
        ),
        (
            B * T * (T + 1) // 2 * (d + 1) + N * d,
            "every query block counted with B rows: the last one holds N - (T - 1) B",
        ),
        (
            B * (N // B) * (N // B + 1) // 2 * (d + 1) + N * d,
            "the last, shorter query block left out: there are ceil(N / B) of them",
        ),
    ]
    return next(
        (f"yours is {what}" for value, what in slips if got == value != want),
        "per tile of r rows FA2 does r·d_v + r multiplies (α·acc, α·l); per row block r·d_v divides",
    )


def check_causal_fa2_ops(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(N, d, B)`: FA2's multiplies plus divides, one head, causal, N = M, Br = Bc = B, against `flash_counts`.

    Five fixed cases, then four drawn afresh on each run (`seed` draws the same again); an answer that runs
    `lab.flash_counts`, `lab.tile_counts`, `lab.trace.record` or one of lab's kernels (by any name) is refused.
    Taught in: notebooks/06_flashattention2.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (1024, 64, 64),
        (1000, 64, 64),
        (7, 3, 2),
        (4096, 128, 128),
        (100, 16, 128),
    ] + [
        (
            int(rng.integers(2, 3000)),
            int(rng.choice([16, 32, 64, 128])),
            int(rng.choice([16, 32, 48, 64, 128])),
        )
        for _ in range(4)
    ]
    check(
        fn,
        _causal_reference,
        cases,
        name=name or getattr(fn, "__name__", None),
        rtol=0,
        atol=0,
        hint=_causal_hint,
        properties=(_own_work("tile_counts", *_COUNTERS),),
        seed=seed,
    )


# ------------------------------------------------------------------------------------ Part 1, exercises 1 and 2: one query block


class Watched(np.ndarray):
    """An array that records every result computed from it by a ufunc or a numpy function (the results stay
    watched): `log` holds `(name, copy of the result, sources)`, where `sources` is the set of log positions the
    result was computed from, itself included (its provenance). Taught in: notebooks/06_flashattention2.ipynb
    """

    def __array_finalize__(self, obj):
        self.log = getattr(obj, "log", None)
        self.src = getattr(obj, "src", frozenset())

    def _wrap(self, result, src=frozenset()):
        if isinstance(result, tuple):
            return tuple(self._wrap(r, src) for r in result)
        if (
            isinstance(result, np.ndarray)
            and not isinstance(result, Watched)
            and result.dtype.kind == "f"
        ):
            result = result.view(Watched)
            result.log = self.log
        if isinstance(result, Watched):
            result.src = src
        return result

    def _sources(self, arrays) -> frozenset:
        """The provenance of `arrays`: watched ones carry it, plain ones written in place are looked up by id."""
        known = getattr(self.log, "plain", {})
        out = frozenset()
        for x in arrays:
            if isinstance(x, Watched):
                out |= x.src
            elif isinstance(x, np.ndarray) and id(x) in known and known[id(x)][0] is x:
                out |= known[id(x)][1]
            elif isinstance(x, (list, tuple)):
                out |= self._sources(x)
        return out

    def _quotient(self, ufunc, inputs) -> str | None:
        """ "made" for a reciprocal (a number over an array, np.reciprocal, a negative power), "used" for a multiply
        by one, else None."""
        if ufunc is np.reciprocal or (
            ufunc in (np.divide, np.true_divide) and np.ndim(inputs[0]) == 0
        ):
            return "made"
        if ufunc is np.power and np.ndim(inputs[1]) == 0 and float(inputs[1]) < 0:
            return "made"
        made = getattr(self.log, "quotients", {}).get("made", ())
        if ufunc is np.multiply and any(
            isinstance(x, Watched) and x.src and max(x.src) in made for x in inputs
        ):
            return "used"
        return None

    def _record(self, what, result, src) -> frozenset:
        src = src | {len(self.log)}
        self.log.append((what, np.array(result, dtype=float), src))
        return src

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = [x.view(np.ndarray) if isinstance(x, Watched) else x for x in inputs]
        src = self._sources(inputs + (out or ()))
        if out is not None:
            kwargs["out"] = tuple(
                o.view(np.ndarray) if isinstance(o, Watched) else o for o in out
            )
        result = getattr(ufunc, method)(*plain, **kwargs)
        if out is not None:
            result = out[0] if len(out) == 1 else out
        src_out = src
        if method == "__call__" and self.log is not None:
            what = ufunc.__name__
            if ufunc is np.power and np.ndim(plain[0]) == 0:
                what = "exp"  # a number to an array's power, e.g. np.e ** s: an exponential all the same
            quotient = self._quotient(ufunc, inputs)
            for r in result if isinstance(result, tuple) else (result,):
                if isinstance(r, np.ndarray):
                    mine = self._record(what, r, src)
                    if quotient and hasattr(self.log, "quotients"):
                        self.log.quotients[quotient].add(max(mine))
                    if isinstance(r, Watched):
                        r.src = mine
                    elif out is not None and hasattr(self.log, "plain"):
                        self.log.plain[id(r)] = (
                            r,
                            mine,
                        )  # a plain array written in place
                    src_out = mine
            return result if out is not None else self._wrap(result, src_out)
        return result if out is not None else self._wrap(result, src)

    def __array_function__(self, func, types, args, kwargs):
        def plain(x):
            if isinstance(x, Watched):
                return x.view(np.ndarray)
            return type(x)(plain(y) for y in x) if isinstance(x, (list, tuple)) else x

        src = self._sources(list(args) + list(kwargs.values()))
        result = func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})
        if (
            isinstance(result, np.ndarray) and self.log is not None
        ):  # np.einsum, np.dot, np.where, ...
            src = self._record(func.__name__, result, src)
        return self._wrap(result, src)


class _Log(list):
    """The log of a watched call: entries `(name, result, sources)`, and `plain`, the provenance of plain arrays
    written in place (`out += ...` into an `np.zeros` array)."""

    def __init__(self):
        super().__init__()
        self.plain = {}
        self.quotients = {"made": set(), "used": set()}  # log positions


def _watched(a: np.ndarray, log: list) -> Watched:
    w = np.array(a, dtype=np.float64).view(Watched)
    w.log = log
    w.src = frozenset()
    return w


def _block_cases(seed: int = 6):
    """(label, q_i, k, v, Bc, hint for this case): d = 16, d_v = 12, so no other array has the (Br, d_v) shape of O.
    The kinds are fixed, the values drawn from `seed` (a fresh one each run of a check)."""
    rng = np.random.default_rng(seed)

    def qkv(Br, M, shift_q=0.0, shift_k=0.0, scale=1.0):
        return (
            scale * rng.standard_normal((Br, 16)) + shift_q,
            scale * rng.standard_normal((M, 16)) + shift_k,
            rng.standard_normal((M, 12)),
        )

    q, k, v = qkv(
        4, 48, scale=0.3
    )  # scores (40 · ±40) / √16 = ±400: the first key block high, the rest low
    q[:, 0], k[:16, 0], k[16:, 0] = 40.0, 40.0, -40.0
    return [
        (
            "Br = 8, M = 100 keys, Bc = 32: the last key block holds 4",
            *qkv(8, 100),
            32,
            None,
        ),
        (
            "Br = 5, M = 56 keys, Bc = 7: 8 full key blocks",
            *qkv(5, 56, scale=2.0),
            7,
            None,
        ),
        (
            "very large scores, about +900",
            *qkv(4, 40, 15.0, 15.0, 0.3),
            16,
            "e^s overflows past s = 709.8 in float64: exponentiate s - m with m the running max, so every "
            "e^(s - m) <= 1",
        ),
        (
            "very negative scores, about -900",
            *qkv(4, 40, 15.0, -15.0, 0.3),
            16,
            "m must start at -inf: from m = 0, e^(s - m) underflows to 0 for every key and l = 0",
        ),
        (
            "a key block near +400, then blocks near -400",
            q,
            k,
            v,
            16,
            "m must be the running max, m_new = max(m, rowmax(S_ij)): a block's own max lowers m after the high "
            "block, and the rescale e^(m - m_new) = e^800 overflows",
        ),
        ("Bc = 64 > M = 50: one key block", *qkv(3, 50), 64, None),
    ]


def _prefix_outputs(q_i, k, v, Bc):
    """For each key block j: (the normalized output over keys 0..j1-1, its l relative to its own max)."""
    s = q_i @ k.T / np.sqrt(q_i.shape[1])  # (Br, M)
    out = []
    for j1 in [min(j0 + Bc, len(k)) for j0 in range(0, len(k), Bc)]:
        m = s[:, :j1].max(axis=1, keepdims=True)
        p = np.exp(s[:, :j1] - m)
        out.append((p @ v[:j1] / p.sum(axis=1, keepdims=True), p.sum(axis=1)))
    return out


def _normalized_after(log, q_i, k, v, Bc) -> list:
    """The key blocks j after which some (Br, d_v) array of the loop equals the normalized output over keys 0..j1-1."""
    shots = [a for _, a, _ in log if a.shape == (len(q_i), v.shape[1])]
    return [
        j
        for j, (o_j, _) in enumerate(_prefix_outputs(q_i, k, v, Bc))
        if any(np.allclose(a, o_j, rtol=1e-8, atol=1e-12) for a in shots)
    ]


def loop_record(fn, q_i, k, v, Bc: int) -> dict:
    """Run `fn(q_i, k, v, Bc)` on watched inputs and say what its loop did: the key blocks after which one of its
    $(B_r, d_v)$ arrays held the normalized output $\\mathrm{softmax}(S_{:, :j})V_{:j}$ (`normalized_after`), the
    elements it divided into $(B_r, d_v)$ arrays (`divides`; each element multiplied by a reciprocal such as
    `1 / l` counts as a divide) and the number of key blocks $T_c$ (`key_blocks`).
    Taught in: notebooks/06_flashattention2.ipynb
    """
    q_i, k, v = (np.asarray(a, dtype=np.float64) for a in (q_i, k, v))
    log = _Log()
    with np.errstate(all="ignore"):
        fn(*(_watched(a, log) for a in (q_i, k, v)), Bc)
    shape = (len(q_i), v.shape[1])
    used = log.quotients["used"]  # a multiply by 1/l divides all the same
    divides = sum(
        a.size
        for i, (name, a, _) in enumerate(log)
        if a.shape == shape and (name == "divide" or i in used)
    )
    return {
        "normalized_after": _normalized_after(log, q_i, k, v, Bc),
        "divides": int(divides),
        "key_blocks": -(-len(k) // Bc),
    }


def _started_at_zero(log) -> bool:
    """Whether the loop's first running max was max(0, rowmax S): an np.maximum whose result holds a 0 exactly."""
    return any(
        name == "maximum" and a.ndim == 1 and (a == 0).any() for name, a, _ in log[:20]
    )


def _rounding_of(got, want) -> str | None:
    """The hint for an o off by a float16 or float32 rounding (not by a wrong rescale, which is off by far more)."""
    try:
        o, w = np.asarray(got[0], dtype=float), want[0]
        err = float(np.abs(o - w).max() / np.abs(w).max())
    except (TypeError, ValueError, IndexError):
        return None
    if not 1e-8 < err < 1e-2:
        return None
    kind = "float16's (its step is 2^-10 ≈ 1e-3)" if err > 1e-5 else "float32's (1e-7)"
    return (
        f"your o is off by {err:.0e} of its size, a rounding like {kind}, not a wrong rescale: keep O (acc), l "
        "and m in float64 (np.zeros((Br, dv)) is float64; dtype=np.float16 or .astype(np.float32) is not)"
    )


def _hint(problem: str, variant: str, got, want, q_i, k, v, Bc, case_hint, log=()):
    """The missing-scale hint when o is the output with scale 1, the dropped-tail hint when o is the output
    without the short last block, the lse-for-l hint, the case's own hint for NaN or inf, else a hint for the
    tuple element that differs."""
    M, d = k.shape
    if isinstance(got, tuple) and got and np.shape(got[0]) == (len(q_i), v.shape[1]):
        with np.errstate(all="ignore"):
            if np.allclose(
                got[0],
                attention_reference(q_i, k, v, scale=1.0)[0],
                rtol=1e-9,
                atol=1e-12,
            ):
                return (
                    f"your o is the output with scale 1: the 1/√d is missing; S = q_i k^T / sqrt(d), here "
                    f"d = {d}, in every key block"
                )
        cut = M - M % Bc
        if M % Bc and np.allclose(
            got[0], attention_reference(q_i, k[:cut], v[:cut])[0], rtol=1e-9, atol=1e-12
        ):
            return f"your o is the output over the first {cut} keys only: range(0, M, Bc) visits the short last block"
    if (
        variant == "fa1"
        and problem.startswith("l (element 2)")
        and len(got) == 3
        and np.shape(got[2]) == want[2].shape
    ):
        if np.allclose(got[2], want[1] + np.log(want[2]), rtol=1e-9, atol=1e-12):
            return (
                "your l is lse = m + log l, FA2's statistic; FA1 saves m and l = Σ_j e^(s_j - m) separately: "
                "return l itself"
            )
        with np.errstate(all="ignore"):
            unshifted = want[2] * np.exp(want[1])  # Σ_j e^(s_j): l against no max
            if np.allclose(got[2], unshifted, rtol=1e-9, atol=1e-12):
                return (
                    "your l is l·e^m = Σ_j e^(s_j), the sum against no max (e^m multiplied back in?): "
                    "FA1 saves l = Σ_j e^(s_j - m) against the final m, and m beside it"
                )
    if case_hint and ("NaN" in problem or "inf" in problem):
        if case_hint.startswith("m must start at -inf") and not _started_at_zero(log):
            return (
                "every e^(s - m) underflowed to 0 here (scores near -900), so l = 0 and o = 0/0: subtract the "
                "running max m, which starts at -inf and becomes the first block's row max, before the exp"
            )
        return case_hint
    if problem.startswith("m (element 1)") and len(got) == 3:
        last = (q_i @ k[(len(k) - 1) // Bc * Bc :].T / np.sqrt(d)).max(axis=1)
        if np.shape(got[1]) == last.shape and np.allclose(
            got[1], last, rtol=1e-9, atol=1e-12
        ):
            return (
                "your m is the last key block's own max: the running max takes the larger of the old m and "
                "the block's, m′ = max(m, rowmax S_ij), so it never falls"
            )
    with np.errstate(invalid="ignore"):
        above = [
            a
            for name, a, _ in log
            if name in _EXPS and a.ndim == 1 and np.nanmax(a, initial=0) > 1 + 1e-9
        ]
    if above and not problem.startswith("m ("):
        return (
            f"a rescale factor of yours exceeds 1 ({np.nanmax(above[0], initial=0):.3g}): α = e^(m - m′) with "
            "m′ = max(m, ...) >= m is at most 1; e^(m′ - m) is upside down (and at the first block, m = -inf, "
            "e^(m′ - m) is inf)"
        )
    low = _rounding_of(got, want)
    if low:
        return low
    if variant == "fa1" and problem.startswith("o (element 0)"):
        if _matches(got, _fa1_without_tile_factor(q_i, k, v, Bc)):
            return (
                "your O adds the tile's P̃V without its factor e^(m̃ - m′): P̃ = e^(S - m̃) is taken "
                "against the tile's own max m̃, so its sum must move to the new max m′ too, as l′ does"
            )
    hints = {
        "m (element 1)": "m is the row max of all the scores S = q_i k^T / sqrt(d), over every key block",
        "l (element 2)": (
            "l sums e^(s - m) over every key block, rescaled by α = e^(m - m′) whenever m "
            "grows; return it against the final m"
        ),
        "lse (element 1)": "lse = m + log l, with the final m and l (log l alone is relative to m)",
        "o (element 0)": (
            "when m grows, O and l are rescaled by α = e^(m - m′); FA1 also multiplies O by "
            "l_old before dividing by l_new"
            if variant == "fa1"
            else "when m grows, acc and l are rescaled by α = e^(m - m′); o = acc / l at the end"
        ),
    }
    return next((h for key, h in hints.items() if problem.startswith(key)), case_hint)


def _matches(got, o) -> bool:
    """True when `got`'s first element is `o`, to a relative 1e-9."""
    g = got[0] if isinstance(got, tuple) and got else None
    with np.errstate(all="ignore"):
        return np.shape(g) == o.shape and np.allclose(g, o, rtol=1e-9, atol=1e-12)


def _fa1_without_tile_factor(q_i, k, v, Bc) -> np.ndarray:
    """FA1's loop with the tile's own max, its $\tilde P V$ added without $e^{\tilde m - m'}$ (l right)."""
    q_i, k, v = (np.asarray(x).view(np.ndarray) for x in (q_i, k, v))
    m, l = np.full(len(q_i), -np.inf), np.zeros(len(q_i))
    O = np.zeros((len(q_i), v.shape[1]))
    with np.errstate(all="ignore"):
        for j0 in range(0, len(k), Bc):
            s = q_i @ k[j0 : j0 + Bc].T / np.sqrt(q_i.shape[1])
            m_t = s.max(axis=1)
            p = np.exp(s - m_t[:, None])
            m_new = np.maximum(m, m_t)
            a, b = np.exp(m - m_new), np.exp(m_t - m_new)
            l_new = a * l + b * p.sum(axis=1)
            O = ((a * l)[:, None] * O + p @ v[j0 : j0 + Bc]) / l_new[:, None]
            m, l = m_new, l_new
    return O


def _watched_call(fn, name: str, shown: str, arrays, size: int, course, seed):
    """Call `fn(*arrays watched, size)` with lab's `course` refused: `(result, names of lab called, log)`, or None
    once a raised error (or a stub's NotImplementedError) has been reported."""
    log = _Log()
    try:
        args = (*(_watched(a, log) for a in arrays), size)
        with np.errstate(all="ignore"), _watching(course, numpy_only=True) as called:
            return _settled(fn(*args)), called, log
    except NotImplementedError:
        print(_NOT_YET.format(name))
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        print(f"{name}: ✗ {shown} raised {type(exc).__name__}: {exc}")
        print(seed_note(seed), end="")
    return None


def _check_block(fn, variant: str, name: str | None, seed: int | None) -> None:
    name = name or getattr(fn, "__name__", "your function")
    names = ("o", "m", "l") if variant == "fa1" else ("o", "lse")
    _, seed = _fresh(seed)
    cases = _block_cases(seed)
    for i, (label, q_i, k, v, Bc, case_hint) in enumerate(cases):
        run = _watched_call(
            fn, name, f"case {i} ({label})", (q_i, k, v), Bc, _BLOCK_COURSE, seed
        )
        if run is None:
            return
        got, called, log = run
        if isinstance(got, Watched):
            got = got.view(np.ndarray)
        if isinstance(got, tuple):
            got = tuple(
                np.asarray(g).view(np.ndarray) if isinstance(g, np.ndarray) else g
                for g in got
            )
        o, lse = attention_reference(q_i, k, v)
        m = (q_i @ k.T / np.sqrt(q_i.shape[1])).max(axis=1)
        want = (o, m, np.exp(lse - m)) if variant == "fa1" else (o, lse)
        refused = _refusal(called) if called else None  # lab's answer: no hint
        problem = refused or diagnose(got, want, names=names, rtol=1e-9, atol=1e-12)
        hint = (
            None
            if problem is None or refused
            else _hint(problem, variant, got, want, q_i, k, v, Bc, case_hint, log)
        )
        if problem is None:
            problem = _own_work(*_BLOCK_COURSE)(fn, (q_i, k, v, Bc), got) or _property(
                variant, log, q_i, k, v, Bc
            )
        if problem is not None:
            print(f"{name}: ✗ case {i} ({label}): {problem}")
            if hint:
                print(f"  hint: {hint}")
            print(seed_note(seed), end="")
            return
    if variant == "fa1":
        print(
            f"{name}: ✓ passed {len(cases)} cases: tiles of <= Bc keys, one exp a score, "
            "O normalized every block (FA1)"
        )
    else:
        print(
            f"{name}: ✓ passed {len(cases)} cases: tiles of <= Bc keys, one exp a score, "
            "acc normalized once (FA2)"
        )


_COURSE = (  # lab's attention, whole or tiled: calling one proves nothing about the loop
    "attention_reference",
    "attention_naive",
    "one_pass_attention",
    "flash_attention_numpy",
    "flash_attention_torch",
    "attention_row_one_pass",
)
_BLOCK_COURSE = _COURSE + ("partial_state", "merge_states", "finalize", "reduce_states")
_EXPS = ("exp", "exp2", "expm1")
_COUNTERS = (
    (  # lab's counts and the kernels that count into lab.trace: the answer to part 1's exercise 5
        "flash_counts",
        "flop_split",
        "trace.record",
        "trace.Recorder",
        "kernels.rung2_numpy_fa1.fa1_forward",
        "kernels.rung3_numpy_fa2.fa2_forward",
    )
    + _COURSE
)
_TIME_MODEL = (
    "gpu_time_share",
    "tiling.time_rows",
) + _COUNTERS  # part 1's exercise 3 answer


def _tiles(log, q_i, k, v, Bc, variant="fa2") -> str | None:
    """None when every score array was a tile of at most Bc keys and each score was exponentiated once; else what
    the loop did instead. A score array is one with Br rows (or columns) against more than Bc keys."""
    Br, (M, d), dv = len(q_i), k.shape, v.shape[1]
    keys = lambda shape: shape[1] if shape[0] == Br else shape[0]  # noqa: E731
    wide = [
        a.shape
        for _, a, _ in log
        if a.ndim == 2 and Br in a.shape and Bc < keys(a.shape) not in (d, dv)
    ]
    if wide:
        n = keys(wide[0])
        return (
            f"your loop formed a {wide[0]} array, scores of {n} keys at once, where a tile holds at most Bc = {Bc}: "
            f"compute S_ij = q_i K_jᵀ / √d for one key block K_j = k[j0:j0 + Bc] at a time (M = {M} here)"
        )
    full = q_i @ k.T
    for (
        _,
        a,
        _,
    ) in (
        log
    ):  # a row, or a few, against more than Bc keys: rows one at a time is no tiling
        L = a.shape[-1] if a.ndim in (1, 2) else 0
        if Bc < L <= M and L not in (d, dv) and (a.ndim == 1 or a.shape[0] < Br):
            x = a.reshape(-1, L)[0]
            if any(
                np.isclose(t[:, :L], x, rtol=1e-12, atol=1e-12).all(axis=1).any()
                for t in (full, full / np.sqrt(d))
            ):
                return (
                    f"your loop formed the scores of one query row against {L} keys at once, where a tile "
                    f"holds at most Bc = {Bc}: going row by row is still no tiling; compute S_ij = "
                    "q_i K_jᵀ / √d for all the block's rows and one key block K_j = k[j0:j0 + Bc] at a time"
                )
    T = -(-M // Bc)
    taken = sum(a.size for name, a, _ in log if name in _EXPS)
    factors = 2 if variant == "fa1" else 1
    if taken > Br * M + 4 * Br * T:
        what = (
            "two rescale factors, e^(m - m′) and e^(m̃ - m′), per row and key block"
            if variant == "fa1"
            else "one rescale e^(m - m′) per row and key block"
        )
        return (
            f"your loop took {taken} exponentials where one per score, Br·M = {Br * M}, and {what} "
            f"({factors * Br * T}) do, {Br * M + factors * Br * T} in all: some scores were exponentiated "
            "more than once (a tile's exponential taken twice, or the probabilities of earlier key blocks "
            "computed again); each tile's exponential is computed once, and what came before is only "
            "rescaled"
        )
    return None


def _score_tiles(q_i, k, Bc) -> list:
    """Each key block's tile of scores, scaled and unscaled: [(S_ij, q_i K_jᵀ), ...]."""
    raw = [q_i @ k[j0 : j0 + Bc].T for j0 in range(0, len(k), Bc)]
    return [(r / np.sqrt(q_i.shape[1]), r) for r in raw]


def _one_pass(log, q_i, k, v, Bc) -> str | None:
    """None when tile j's scores were exponentiated before tile j + 1's scores were formed, for every j: one
    pass over the key blocks. Else what the loop did instead (a first pass for the max, every tile stored)."""
    first = []
    for tile in _score_tiles(q_i, k, Bc):
        at = next(
            (
                n
                for n, (_, a, _) in enumerate(log)
                if a.shape == tile[0].shape
                and any(np.allclose(a, t, rtol=1e-12, atol=1e-12) for t in tile)
            ),
            None,
        )
        if at is None:
            return None  # scores formed some other way: the other properties judge the loop
        first.append(at)
    for j in range(len(first) - 1):
        if not any(name in _EXPS for name, _, _ in log[first[j] : first[j + 1]]):
            return (
                f"your loop formed the scores of key block {j + 1} before exponentiating those of block {j}: "
                "a first pass over the keys (for the max?) or every score tile kept for later; the loop reads "
                "each K_j, V_j block once, folds it into the state and moves on"
            )
    return None


def _multiple_of(a, o) -> bool:
    """Whether the (Br, d_v) array `a` is o scaled by one factor per row: o's sum under some other max or weight."""
    with np.errstate(all="ignore"):
        c = a[:, :1] / o[:, :1]
        return bool(np.isfinite(c).all()) and np.allclose(
            a, c * o, rtol=1e-9, atol=1e-12
        )


def _carried_o(log, q_i, k, v, Bc) -> str | None:
    """None when FA1's state between key blocks is the normalized O: each O after block j is computed from the
    O after block j - 1, and every rescaled copy of the old output made later comes from that O, not from an
    unnormalized accumulator kept beside it."""
    prefixes = [o for o, _ in _prefix_outputs(q_i, k, v, Bc)]
    dv = (len(q_i), v.shape[1])
    same = [
        [
            n
            for n, (_, a, _) in enumerate(log)
            if a.shape == dv and np.allclose(a, o, rtol=1e-8, atol=1e-12)
        ]
        for o in prefixes
    ]
    for j in range(1, len(prefixes)):
        old, new = set(same[j - 1]), same[j]
        if (
            not old
            or not new
            or np.allclose(prefixes[j], prefixes[j - 1], rtol=1e-8, atol=1e-12)
        ):
            continue  # nothing to tell apart (checked elsewhere), or the later keys weigh nothing
        start = min(old)
        stray = [
            n
            for n, (_, a, src) in enumerate(log)
            if n > start
            and a.shape == dv
            and n not in old
            and not (src & old)
            and _multiple_of(a, prefixes[j - 1])
        ]
        if stray or not any(log[n][2] & old for n in new):
            keys = f"keys {(j - 1) * Bc}..{min(j * Bc, len(k)) - 1}"
            return (
                f"your O after key block {j} was not computed from your O after block {j - 1}: the sum over "
                f"{keys} reached it unnormalized, kept beside O (an FA2 accumulator with O = acc / l on the "
                "side); in FA1 the normalized O is the state, and the next block rescales O itself"
            )
    return None


def _property(variant, log, q_i, k, v, Bc):
    """None, or what the loop did against the form it should have (tiles of at most Bc keys, one exponential per
    score, normalized after every key block / only the last)."""
    if not log:
        return (
            "the check could not watch your loop: q_i, k and v were converted (np.asarray / np.array?); "
            "use them as given"
        )
    tiles = _tiles(log, q_i, k, v, Bc, variant) or _one_pass(log, q_i, k, v, Bc)
    if tiles:
        return tiles
    prefixes = _prefix_outputs(q_i, k, v, Bc)
    done = _normalized_after(log, q_i, k, v, Bc)
    T = len(prefixes)
    if variant == "fa1":
        missing = [j for j in range(T) if j not in done]
        if missing:
            j = missing[0]
            form = (
                " (that is FA2's form: acc normalized only at the end)"
                if done == [T - 1]
                else ""
            )
            return (
                f"after key block {j} (keys {j * Bc}..{min((j + 1) * Bc, len(k)) - 1}) none of your arrays held O "
                f"normalized over the keys so far{form}; FA1 rescales O and divides it by l at every key block"
            )
        return _carried_o(log, q_i, k, v, Bc)
    early = [
        j
        for j in done
        if j < T - 1
        and abs(prefixes[j][1].max() - 1) > 1e-6
        and not np.allclose(prefixes[j][0], prefixes[-1][0], rtol=1e-8, atol=1e-12)
    ]  # a prefix whose output is already the final one (later keys weigh e^-800) proves nothing
    if early:
        j = early[0]
        return (
            f"after key block {j} (keys {j * Bc}..{min((j + 1) * Bc, len(k)) - 1}) your loop already held acc / l, "
            f"the normalized output over the keys so far: that is FA1's form, {T} divisions of the (Br, d_v) block "
            "per query block; FA2 leaves acc unnormalized and divides once, after the last key block"
        )
    return None


def check_fa1_block(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q_i, k, v, Bc) -> (o, m, l)` in FA1's form: values against the reference, O normalized after every key block.

    The cases' kinds are fixed, their values drawn afresh on each run (`seed` draws the same again).
    Taught in: notebooks/06_flashattention2.ipynb
    """
    _check_block(fn, "fa1", name, seed)


def check_fa2_block(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q_i, k, v, Bc) -> (o, lse)` in FA2's form: values against the reference, acc normalized only after the last key block.

    The cases' kinds are fixed, their values drawn afresh on each run (`seed` draws the same again).
    Taught in: notebooks/06_flashattention2.ipynb
    """
    _check_block(fn, "fa2", name, seed)


# ------------------------------------------------------------------------------------ Part 2, exercise 1: split-K in a block

_MERGE = _COURSE + ("partial_state", "merge_states", "finalize", "reduce_states")


def _slices(Bc: int, w: int) -> list:
    """Warp u's keys: u·c .. (u + 1)·c - 1 of the block, c = ceil(Bc / w) (the last warp may hold fewer)."""
    c = -(-Bc // w)
    return [(u * c, min((u + 1) * c, Bc)) for u in range(w)]


def _state(s, v):
    """$(m, l, acc)$ of scores `s` (Br, c) over values `v` (c, d_v), against their own row max."""
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    return m, p.sum(axis=1), p @ v


def _split_cases(seed: int = 2):
    """(label, q_i, k_j, v_j, w): d = 16, d_v = 12; values drawn from `seed`."""
    rng = np.random.default_rng(seed)

    def qkv(Br, Bc, scale=1.0):
        return (
            scale * rng.standard_normal((Br, 16)),
            scale * rng.standard_normal((Bc, 16)),
            rng.standard_normal((Bc, 12)),
        )

    q, k, v = qkv(4, 32, 0.3)  # warp 2's keys near +400, the others near -400
    q[:, 0], k[:, 0], k[16:24, 0] = 40.0, -40.0, 40.0
    return [
        ("Br = 8, Bc = 32, 4 warps of 8 keys", *qkv(8, 32, 1.5), 4),
        ("Br = 5, Bc = 30, 4 warps: the last holds 6 keys", *qkv(5, 30, 1.5), 4),
        ("Br = 3, Bc = 40, 8 warps of 5 keys", *qkv(3, 40, 1.5), 8),
        ("scores near +400 in warp 2, near -400 in the others", q, k, v, 4),
        ("Br = 6, Bc = 64, 2 warps", *qkv(6, 64), 2),
    ]


def _unwatch(x):
    return x.view(np.ndarray) if isinstance(x, Watched) else x


def _split_shape(got, w: int) -> str | None:
    """None when `got` is (partials, merged) with w partials of (m, l, acc) and merged one (m, l, acc)."""
    if not (isinstance(got, tuple) and len(got) == 2):
        return "return (partials, merged): the w warps' (m, l, acc), and the merged (m, l, acc)"
    parts, merged = got
    if not isinstance(parts, (list, tuple)) or len(parts) != w:
        n = len(parts) if isinstance(parts, (list, tuple)) else type(parts).__name__
        return f"partials holds {n}, expected one (m, l, acc) per warp, w = {w}"
    if not all(isinstance(p, tuple) and len(p) == 3 for p in [*parts, merged]):
        return "each partial, and the merged state, is a tuple (m, l, acc)"
    return None


def _keys_held(got, s, v_j, a: int, b: int) -> tuple | None:
    """(a2, b2) when `got` is the state of keys a2..b2 - 1 instead of a..b - 1, one key off at either edge."""
    m, l, _ = got
    for a2 in (a - 1, a, a + 1):
        for b2 in (b - 1, b, b + 1):
            if (a2, b2) != (a, b) and 0 <= a2 < b2 <= len(v_j):
                m2, l2, _ = _state(s[:, a2:b2], v_j[a2:b2])
                if (
                    np.shape(m) == m2.shape
                    and np.allclose(m, m2)
                    and np.allclose(l, l2)
                ):
                    return a2, b2
    return None


def _low_precision(got) -> str | None:
    """The dtype of the first array in `got` that is floating point but narrower than float64, else None."""
    for x in got:
        dt = np.asarray(x).dtype
        if dt.kind == "f" and dt.itemsize < 8:
            return str(dt)
    return None


def _partial_hint(u, got, q_i, k_j, v_j, w, s, parts=()) -> str:
    """What warp u's partial state is instead of its own slice's (m, l, acc)."""
    a, b = _slices(len(k_j), w)[u]
    narrow = _low_precision(got)
    m, l, acc = (np.asarray(x, dtype=float) for x in got)
    own = _state(s[:, a:b], v_j[a:b])
    if narrow and all(
        np.allclose(x, y, rtol=1e-3, atol=1e-6) for x, y in zip((m, l, acc), own)
    ):
        return (
            f"warp {u}'s state is right to {narrow} rounding: it is held in {narrow}. The inputs "
            "are float64, and the check asks for float64 (rtol 1e-9): keep the state in the "
            "inputs' dtype"
        )
    seen = s[:, :b].max(axis=1)  # the max over warps 0..u: a running max
    with np.errstate(all="ignore"):
        raw_l = np.exp(s[:, a:b]).sum(axis=1)  # no max subtracted
        if (
            not np.isfinite(l).all()
            or not np.isfinite(acc).all()
            or (np.shape(l) == raw_l.shape and np.allclose(l, raw_l))
        ):
            return (
                f"warp {u}'s l_u is Σ e^s, with no max subtracted (it overflows past s = 709): "
                "exponentiate s - m_u, m_u the row max of the warp's own slice"
            )
        if (
            np.shape(m) == seen.shape
            and u
            and np.allclose(m, seen)
            and not np.allclose(m, own[0])
        ):
            return (
                f"warp {u}'s m is the max over warps 0..{u}: the warps run at the same time, and each "
                "sees only its own keys; its m is the max of its own slice"
            )
        if np.shape(acc) == own[2].shape and np.allclose(acc, own[2] / own[1][:, None]):
            return (
                f"warp {u}'s acc is divided by its l: the partials stay unnormalized, like FA2's acc "
                "(the merge needs the sums, not the averages)"
            )
        raw = _state(s[:, a:b] * np.sqrt(q_i.shape[1]), v_j[a:b])
        if np.shape(m) == raw[0].shape and np.allclose(m, raw[0]):
            return "the 1/√d is missing: S = q_i K_jᵀ / √d for every warp's slice"
        short = len(k_j) // w  # c rounded down
        c = -(-len(k_j) // w)
        if len(k_j) % w and np.shape(m) == own[0].shape:
            cut = _state(
                s[:, u * short : (u + 1) * short], v_j[u * short : (u + 1) * short]
            )
            if np.allclose(m, cut[0]) and np.allclose(l, cut[1]):
                rest = _state(s[:, (w - 1) * short :], v_j[(w - 1) * short :])
                last = (
                    [np.asarray(_unwatch(x), float) for x in parts[-1][:2]]
                    if parts
                    else ()
                )
                if len(last) == 2 and all(
                    np.shape(x) == y.shape and np.allclose(x, y)
                    for x, y in zip(last, rest)
                ):
                    return (
                        f"warp {u} took keys {u * short}..{(u + 1) * short - 1}: your warps hold "
                        f"Bc // w = {short} keys each and the last {len(k_j) - (w - 1) * short}. That "
                        f"split covers every key, but it is not the spec's: ceil(Bc / w) = {c} keys "
                        f"a warp, the last warp taking what is left ({len(k_j) - (w - 1) * c})"
                    )
                return (
                    f"warp {u} took keys {u * short}..{(u + 1) * short - 1}: Bc // w = {short} leaves "
                    f"the last {len(k_j) - w * short} keys to no warp; ceil(Bc / w) = {c}, "
                    "and the last warp takes what is left"
                )
        held = _keys_held((m, l, acc), s, v_j, a, b)
        if held:
            return (
                f"warp {u}'s state is that of keys {held[0]}..{held[1] - 1}, its keys are "
                f"{a}..{b - 1}: a slice k_j[lo:hi] holds keys lo..hi - 1, so warp u's is "
                "k_j[u·c : (u + 1)·c], c = ceil(Bc / w)"
            )
        if len(k_j) % w and u == w - 1 and np.shape(acc) == own[2].shape:
            c = -(-len(k_j) // w)
            return (
                f"warp {u} (the last) holds keys {a}..{b - 1}: ceil(Bc / w) = {c} keys a warp, "
                "and the last warp takes what is left"
            )
    return (
        f"warp {u}'s state is that of keys {a}..{b - 1} alone: m_u its row max, "
        "l_u = Σ e^(s - m_u), acc_u = Σ e^(s - m_u) v"
    )


def _merged_hint(problem: str, got, parts, want) -> str:
    """What the merged (m, l, acc) is instead of the tile's state."""
    m, l, acc = (np.asarray(x, dtype=float) for x in got)
    ms = np.array([p[0] for p in parts])
    ls = np.array([p[1] for p in parts])
    accs = np.array([p[2] for p in parts])
    with np.errstate(all="ignore"):
        if problem.startswith("m ("):
            if m.shape == ms[0].shape and np.allclose(m, ms[0]):
                return (
                    "your m is warp 0's: the merged m is the largest of the warps' m_u"
                )
            return "the merged m is the largest of the warps' m_u, row by row"
        if problem.startswith("l ("):
            if l.shape == ls[0].shape and np.allclose(l, ls.sum(axis=0)):
                return (
                    "you added the warps' l_u as they are: each is a sum against its own m_u; move "
                    "each to the common m first (by e^(m_u - m), at most 1)"
                )
            if l.shape == ls[0].shape and np.allclose(
                l, (np.exp(m - ms) * ls).sum(axis=0)
            ):
                return "your factor is upside down: e^(m - m_u) >= 1; a sum against m_u moves to m by e^(m_u - m)"
            return "l is the sum over all the warps' keys of e^(s - m), against the merged m"
        if problem.startswith("acc ("):
            if acc.shape == accs[0].shape and np.allclose(acc, accs.sum(axis=0)):
                return (
                    "you added the warps' acc_u as they are: like l_u, each is against its own m_u and "
                    "moves to the common m by e^(m_u - m)"
                )
            if acc.shape == want[2].shape and np.allclose(
                acc, want[2] / want[1][:, None]
            ):
                return (
                    "your merged acc is divided by l: the tile's state stays unnormalized; the thread "
                    "block's loop divides once, after the last key block"
                )
            return "acc is the sum over all the warps' keys of e^(s - m) v, against the merged m"
    return ""


def check_split_k_tile(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q_i, k_j, v_j, w) -> (partials, merged)`: split-K over w warps, each warp's state of its own keys, merged.

    Warp u owns keys u·c .. (u+1)·c - 1 of the block, c = ceil(Bc / w); its partial is $(m_u, l_u, acc_u)$ of those
    keys alone; the merged state is the tile's $(m, l, acc)$, unnormalized. The inputs are watched: no score array
    may span more than c keys, and the merged acc must be computed from the partials. lab's states and attention
    are refused. The cases' kinds are fixed, their values drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    _, seed = _fresh(seed)
    cases = _split_cases(seed)
    for i, (label, q_i, k_j, v_j, w) in enumerate(cases):
        run = _watched_call(
            fn, name, f"case {i} ({label})", (q_i, k_j, v_j), w, _MERGE, seed
        )
        if run is None:
            return
        got, called, log = run
        problem, hint = _refusal(called) if called else None, None
        problem = problem or _split_shape(got, w)
        s = q_i @ k_j.T / np.sqrt(q_i.shape[1])  # (Br, Bc), the tile's scores
        if problem is None:
            parts, merged = got
            for u, (a, b) in enumerate(_slices(len(k_j), w)):
                own = _state(s[:, a:b], v_j[a:b])
                plain = tuple(_unwatch(x) for x in parts[u])
                trouble = diagnose(
                    plain, own, names=("m", "l", "acc"), rtol=1e-9, atol=1e-12
                )
                if trouble:
                    problem = f"warp {u}'s partial, {trouble}"
                    hint = _partial_hint(u, plain, q_i, k_j, v_j, w, s, parts)
                    break
        if problem is None:
            want = _state(s, v_j)
            plain = tuple(_unwatch(x) for x in merged)
            trouble = diagnose(
                plain, want, names=("m", "l", "acc"), rtol=1e-9, atol=1e-12
            )
            if trouble:
                problem = f"the merged state, {trouble}"
                parts_plain = [
                    tuple(np.asarray(_unwatch(x), float) for x in p) for p in parts
                ]
                hint = _merged_hint(trouble, plain, parts_plain, want)
        if problem is None:
            problem = _split_form(log, parts, merged, q_i, k_j, v_j, w)
        if problem is not None:
            print(f"{name}: ✗ case {i} ({label}): {problem}")
            if hint:
                print(f"  hint: {hint}")
            print(seed_note(seed), end="")
            return
    print(
        f"{name}: ✓ passed {len(cases)} cases: each warp's state from its own keys, "
        "merged into the tile's"
    )


def _provenance(x, log):
    if isinstance(x, Watched):
        return x.src
    known = log.plain.get(id(x))
    return known[1] if known and known[0] is x else None


def _split_form(log, parts, merged, q_i, k_j, v_j, w) -> str | None:
    """None when no score array spans more than c keys and the merged acc was computed from every warp's acc."""
    if not log:
        return (
            "the check could not watch your code: q_i, k_j and v_j were converted (np.asarray / np.array?); "
            "use them as given"
        )
    c = -(-len(k_j) // w)
    Br, dv = len(q_i), v_j.shape[1]
    wide = [
        a.shape
        for _, a, _ in log
        if a.ndim == 2
        and a.shape[0] == Br
        and c < a.shape[1] not in (q_i.shape[1], dv, w)
    ]
    if wide:
        return (
            f"your code formed a {wide[0]} array, scores of {wide[0][1]} keys at once, where a warp holds "
            f"ceil(Bc / w) = {c}: each warp computes the scores of its own slice only"
        )
    mine = _provenance(merged[2], log)
    theirs = [_provenance(p[2], log) for p in parts]
    if mine is not None and all(t for t in theirs):
        missing = [u for u, t in enumerate(theirs) if max(t) not in mine]
        if missing:
            return (
                f"your merged acc was not computed from warp {missing[0]}'s acc: the thread block only has "
                "the warps' partial states to combine; merge those"
            )
    return None


# ------------------------------------------------------------------------------------ Part 2, exercise 2: FA1's loop order


class HBM:
    """An array in HBM as one step of FA1's loop sees it: `a[rows]` reads a block (a copy, now on chip) and
    `a[rows] = x` writes one back, each logged as `(name, "read" | "write", first row, rows)`; no arithmetic on the
    whole array. Taught in: notebooks/06_flashattention2_parallelism.ipynb"""

    def __init__(self, a: np.ndarray, log: list, name: str):
        self._a, self._log, self._name = a, log, name
        self.shape, self.dtype = a.shape, a.dtype
        self.written = []  # (first row, rows, a copy of what was written), in order
        self.tamper = None  # (write number, f): after that write the store holds f(what was written)

    def __len__(self) -> int:
        return len(self._a)

    def _rows(self, key) -> tuple:
        idx = np.atleast_1d(
            np.arange(len(self._a))[key[0] if isinstance(key, tuple) else key]
        )
        return (int(idx[0]) if idx.size else 0, int(idx.size))

    def __getitem__(self, key):
        self._log.append((self._name, "read", *self._rows(key)))
        return np.array(self._a[key])

    def __setitem__(self, key, value):
        self._log.append((self._name, "write", *self._rows(key)))
        self._a[key] = value
        self.written.append((*self._rows(key), np.array(self._a[key], dtype=float)))
        if self.tamper and len(self.written) == self.tamper[0] + 1:
            self._a[key] = self.tamper[1](self._a[key])

    def __array__(self, *args, **kwargs):
        raise TypeError(
            f"{self._name} lives in HBM: read a block with {self._name}[rows], "
            f"write one back with {self._name}[rows] = ..."
        )

    def _whole(self, *_):
        """Arithmetic on the whole array: refused with the same words as a conversion."""
        return self.__array__()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _whole
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = _whole
    __iadd__ = __isub__ = __imul__ = __itruediv__ = _whole


def _hbm(N: int, dv: int) -> tuple:
    """`(hbm, log)`: HBM arrays O (N, d_v) = 0, m (N,) = -inf, l (N,) = 0, and the log of their reads and writes."""
    log = []
    start = {"O": np.zeros((N, dv)), "m": np.full(N, -np.inf), "l": np.zeros(N)}
    return {name: HBM(a, log, name) for name, a in start.items()}, log


def hbm_record(fn, q, k, v, Br: int, Bc: int) -> tuple:
    """`(out, log)`: run `fn(q, k, v, Br, Bc, hbm)` on HBM arrays O (N, d_v) = 0, m (N,) = -inf, l (N,) = 0; `out`
    holds their final values as plain arrays, `log` every read and write in order.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    hbm, log = _hbm(len(q), v.shape[1])
    fn(q, k, v, Br, Bc, hbm)
    return {name: a._a for name, a in hbm.items()}, log


def _keys_outer_cases(seed: int):
    rng = np.random.default_rng(seed)
    N, M, d = (
        int(rng.integers(20, 40)),
        int(rng.integers(40, 70)),
        int(rng.integers(4, 9)),
    )
    Br, Bc = int(rng.integers(6, 11)), int(rng.integers(8, 15))
    N, M = (
        N + (N % Br == 0),
        M + (M % Bc == 0),
    )  # the last blocks short, as the label says
    fresh = (
        rng.standard_normal((N, d)),
        rng.standard_normal((M, d)),
        rng.standard_normal((M, d + 1)),
    )
    q = 10 * (
        1 + np.abs(rng.standard_normal((N, d)))
    )  # scores near +400 in the first key block, -400 after
    k = (
        10
        * (1 + np.abs(rng.standard_normal((M, d))))
        * np.where(np.arange(M) < Bc, 1.0, -1.0)[:, None]
    )
    return [
        ("fresh shapes, short last blocks", *fresh, Br, Bc),
        (
            "a key block near +400 before blocks near -400",
            q,
            k,
            rng.standard_normal((M, d)),
            Br,
            Bc,
        ),
        (
            "one query block, one key block",
            *(a[:Br, :] for a in fresh[:1]),
            fresh[1][:Bc],
            fresh[2][:Bc],
            Br,
            Bc,
        ),
    ]


def _order_problem(log, name: str, N: int, M: int, Br: int, Bc: int) -> str | None:
    """Why the writes and reads of `name` are not FA1's: each query block's rows written once per key block, keys
    outside, and read back (from the second key block on) before each write."""
    Tc = -(-M // Bc)
    blocks = [(i0, min(Br, N - i0)) for i0 in range(0, N, Br)]
    writes = [(s, n) for x, kind, s, n in log if x == name and kind == "write"]
    if writes == blocks * Tc:
        reads = [(s, n) for x, kind, s, n in log if x == name and kind == "read"]
        if any(reads.count(b) < Tc - 1 for b in blocks):
            return (
                f"the old {name} of a query block is not read back from HBM: between key blocks FA1's state waits "
                f"there, so each step reads it ({name}[rows]) before it writes it"
            )
        return None
    if len(blocks) > 1 and writes and all(w == (0, N) for w in writes):
        return (
            f"{name} is written all {N} rows at once, {len(writes)} time(s): FA1 walks the query blocks "
            f"inside each key block, {Br} rows at a time, and writes {name}[rows] back for each"
        )
    if writes == [b for b in blocks for _ in range(Tc)]:
        return (
            f"{name} is written key block by key block, but with the query blocks outside: FA1 puts the key blocks "
            "outside and walks every query block for each"
        )
    if len(writes) == len(blocks):
        return (
            f"{name} is written once per query block: FA1 cannot keep every block's state on chip, it writes "
            f"{name}[rows] back after every key block"
        )
    if writes[: len(blocks) * Tc] == blocks * Tc:
        extra = len(writes) - len(blocks) * Tc
        return (
            f"{name} is written {extra} more time(s) after the last key block, {writes[len(blocks) * Tc :][:4]}"
            f"{' ...' if extra > 4 else ''}: a pass after the loop (a final division by l is FA2's rule). "
            f"FA1's {name} is complete when the last key block is done, so nothing is written after it"
        )
    want = blocks * Tc
    at = next(
        (t for t, (a, b) in enumerate(zip(writes, want)) if a != b),
        min(len(writes), len(want)),
    )
    return (
        f"{name}'s writes, in order (first row, rows), part from FA1's at write {at}: yours "
        f"{writes[at : at + 4]}, FA1's {want[at : at + 4]}. FA1 writes each query block's {Br} rows once "
        "per key block, key blocks outside"
    )


def _fa1_outer(
    q,
    k,
    v,
    Br: int,
    Bc: int,
    b_in_pv=True,
    b_in_l=True,
    l_old=True,
    divide=True,
    inverted=False,
    a_in_O=True,
    a_in_l=True,
) -> np.ndarray:
    """FA1's O with its rule, or without the factor e^(m~ - m') on the tile's P~V (`b_in_pv`) or on its sum, or
    with the old O rescaled without multiplying by the old l (`l_old`), or never divided by the new l (`divide`),
    or with both factors upside down, e^(m' - m) and e^(m' - m~), the first block guarded (`inverted`), or
    without the old state's factor e^(m - m') on l O (`a_in_O`) or on l (`a_in_l`)."""
    O, m, l = np.zeros((len(q), v.shape[1])), np.full(len(q), -np.inf), np.zeros(len(q))
    for j0 in range(0, len(k), Bc):
        for i0 in range(0, len(q), Br):
            r = slice(i0, i0 + Br)
            s = q[r] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])
            m_t = s.max(axis=1)
            p = np.exp(s - m_t[:, None])
            m_new = np.maximum(m[r], m_t)
            a, b = np.exp(m[r] - m_new), np.exp(m_t - m_new)
            if inverted:
                a = np.where(np.isneginf(m[r]), 0.0, np.exp(m_new - m[r]))
                b = np.exp(m_new - m_t)
            l_new = (a if a_in_l else 1.0) * l[r] + (b if b_in_l else 1.0) * p.sum(
                axis=1
            )
            pv = (b[:, None] if b_in_pv else 1.0) * (p @ v[j0 : j0 + Bc])
            a_O = (a if a_in_O else 1.0) * (l[r] if l_old else 1.0)
            O[r] = (a_O[:, None] * O[r] + pv) / (l_new[:, None] if divide else 1.0)
            m[r], l[r] = m_new, l_new
    return O


def _keys_outer_hint(log, got, q, k, v, Br: int, Bc: int) -> str | None:
    """The hint for a state never written back, an m that is the last key block's own max, an O never divided by
    l, or a tile's P~ = e^(S - m~) merged without e^(m~ - m')."""
    got_O, got_m = got[0], got[1]
    for x in "ml":
        if not any(n == x and kind == "write" for n, kind, _, _ in log):
            return (
                f"{x} is never written back to HBM: after each step write {x}[rows] = the new {x}, "
                f"or the next key block reads the starting {x} again"
            )
    where = {
        (False, False): "neither the tile's P~V nor its row sum l~ has it",
        (False, True): "the tile's P~V lacks it",
        (True, False): "the tile's row sum l~ lacks it",
    }
    close = lambda a, b: np.allclose(a, b, rtol=1e-7, atol=1e-10, equal_nan=True)  # noqa: E731
    M, d = k.shape
    s = q @ k.T / np.sqrt(d)
    last = s[:, (M - 1) // Bc * Bc :].max(axis=1)  # the last key block's own max m~
    if (
        M > Bc
        and np.shape(got_m) == last.shape
        and close(got_m, last)
        and not close(last, s.max(axis=1))
    ):
        return (
            "your m is the last key block's own max m~: m' = max(m, m~) keeps the largest score of every "
            "key block so far, and O and l are against it"
        )
    if np.isnan(np.asarray(got_O, dtype=float)).any():
        return (
            "NaN in O: at the first key block m = -inf, so a factor e^(m' - m) is inf, and inf · 0 "
            "(l = 0, O = 0 there) is NaN. The old state moves to the larger max by e^(m - m') <= 1, "
            "0 at the first block"
        )
    flat = np.asarray(got_m, dtype=float)
    if flat.size and np.all(flat == flat.flat[0]) and flat.flat[0] in (0.0, -np.inf):
        return (
            f"your m ends as {flat.flat[0]} in every row: it must end as each row's largest score, "
            "m' = max(m, m~) at every key block, and P~ and the old O are taken against it"
        )
    with np.errstate(all="ignore"):
        if np.shape(got_O) == (len(q), v.shape[1]) and close(
            got_O, _fa1_outer(q, k, v, Br, Bc, inverted=True)
        ):
            return (
                "both rescales are upside down, e^(m' - m) and e^(m' - m~): a sum taken against a "
                "smaller max moves to the larger m' by e^(m - m') <= 1, and the tile's by e^(m~ - m')"
            )
        N = len(q)
        if N % Br and N > Br and np.shape(got_O) == (N, v.shape[1]):
            tail = slice(N - N % Br, N)
            if np.all(np.asarray(got_O)[tail] == 0):
                return (
                    f"rows {N - N % Br}..{N - 1} of O are still 0: the short last query block was "
                    f"left out; range(0, N, Br) visits it too (N = {N}, Br = {Br})"
                )
        for kw, what in (
            ({"a_in_O": False}, "on the old l·O"),
            ({"a_in_l": False}, "on the old l"),
            ({"a_in_O": False, "a_in_l": False}, "on the old l·O and on the old l"),
        ):
            if np.shape(got_O) == (N, v.shape[1]) and close(
                got_O, _fa1_outer(q, k, v, Br, Bc, **kw)
            ):
                return (
                    f"the old state's factor e^(m - m') is missing {what}: both the old sum l and "
                    "the old l·O were taken against the old max m, so both move to m' by it"
                )
        o, lse = attention_reference(q, k, v)
        l_final = np.exp(lse - s.max(axis=1))
        undivided = np.shape(got_O) == o.shape and (
            close(got_O, o * l_final[:, None])
            or close(got_O, _fa1_outer(q, k, v, Br, Bc, divide=False))
            or close(got_O, _fa1_outer(q, k, v, Br, Bc, l_old=False, divide=False))
        )
        if undivided:
            return (
                "your O is never divided by l: it is a sum Σ e^(s - m) v. FA1 keeps O normalized at every "
                "step: O' = (e^(m - m') l O + e^(m~ - m') P~V) / l'"
            )
        if close(got_O, attention_reference(q, k, v, scale=1.0)[0]):
            return (
                f"your O is the output with scale 1: the 1/√d is missing; S_ij = q_i K_jᵀ / √d, here d = {d}, "
                "in every tile"
            )
        cut = M - M % Bc
        if M % Bc and close(got_O, attention_reference(q, k[:cut], v[:cut])[0]):
            return (
                f"your O is the output over the first {cut} keys only: range(0, M, Bc) visits the short last "
                f"key block too (M = {M}, Bc = {Bc})"
            )
        if close(got_O, _fa1_outer(q, k, v, Br, Bc, l_old=False)):
            return (
                "the old O is rescaled by e^(m - m') alone: O is a sum divided by the old l, so FA1 multiplies it "
                "by l_old (undoing that division) before moving it to m' and dividing by l_new"
            )
        for (in_pv, in_l), part in where.items():
            wrong = _fa1_outer(q, k, v, Br, Bc, b_in_pv=in_pv, b_in_l=in_l)
            if np.allclose(got_O, wrong, rtol=1e-7, atol=1e-10, equal_nan=True):
                return (
                    "P~ = e^(S - m~) is taken against the tile's own max m~, but merged without the "
                    f"factor e^(m~ - m') that moves it to the new max m' = max(m, m~) ({part})"
                )
    return None


def _sourced(arrays, log) -> tuple:
    """`arrays` watched into `log`, each its own first entry, so that a result's sources say which it came from."""
    out = []
    for name, a in zip("qkv", arrays):
        w = _watched(a, log)
        log.append((name, np.array(a, dtype=float), frozenset({len(log)})))
        w.src = log[-1][2]
        out.append(w)
    return tuple(out)


def _one_tile(log, Br: int, Bc: int, dv: int) -> str | None:
    """None when every 2-D array computed from both q and k (entries 0 and 1 of `log`) fits in one tile, at most
    Br rows (or keys) by Bc keys (or rows); a block of output rows, (<= Br, d_v), is not scores."""
    big = [
        a.shape
        for _, a, src in log[3:]
        if a.ndim == 2
        and {0, 1} <= src
        and not (a.shape[1] == dv and a.shape[0] <= Br)
        and (min(a.shape) > min(Br, Bc) or max(a.shape) > max(Br, Bc))
    ]
    if not big:
        return None
    return (
        f"your loop formed a {big[0]} array of scores, where one tile holds Br × Bc = {Br} × {Bc}: the "
        "kernel never holds S, not even one block row or column of it; compute S_ij = q_i K_jᵀ / √d for one query "
        "block and one key block at a time"
    )


def _tile_order(seen, q, k, Br: int, Bc: int) -> str | None:
    """None when the score tiles S_ij (matched by value among the arrays computed from q and k) were first formed
    key block by key block, every query block for each: j outside, i inside. Else the first tile out of order."""
    d, Tr = q.shape[1], -(-len(q) // Br)
    tiles = {
        (j0 // Bc, i0 // Br): q[i0 : i0 + Br] @ k[j0 : j0 + Bc].T
        for j0 in range(0, len(k), Bc)
        for i0 in range(0, len(q), Br)
    }
    order = []
    for _, a, src in seen[3:]:
        if a.ndim != 2 or not {0, 1} <= src:
            continue
        for ji, t in tiles.items():
            if ji not in order and a.shape == t.shape:
                if any(
                    np.allclose(a, x, rtol=1e-12, atol=1e-12)
                    for x in (t, t / np.sqrt(d))
                ):
                    order.append(ji)
                    break
    if len(order) < len(tiles) or Tr == 1:
        return None  # scores formed some other way: the values and the HBM log judge the loop
    for (j, i), (j1, i1) in zip(order, order[1:]):
        if (j1, i1) < (j, i):
            return (
                f"your loop formed the scores of query block {i1} against key block {j1} after those of query "
                f"block {i} against key block {j}: the tiles came query block by query block, FA2's order. FA1 "
                "forms S_ij key block by key block, every query block i for each j, since its state waits in HBM"
            )
    return None


def _prefix_states(q, k, v, rows: slice, j1: int) -> tuple:
    """Rows `rows` over keys 0..j1-1: (the normalized output, acc = Σ e^(s - m) v unnormalized, m, l)."""
    s = q[rows] @ k[:j1].T / np.sqrt(q.shape[1])
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    acc = p @ v[:j1]
    return acc / p.sum(axis=1)[:, None], acc, m, p.sum(axis=1)


def _held_after_each_block(hbm, q, k, v, Br: int, Bc: int) -> str | None:
    """None when every write of O, m and l holds FA1's state over the keys so far: after key block j, query block
    i's O is normalized over keys 0..j, m and l are their max and sum. The writes are FA1's order already
    (`_order_problem`), so write number t is key block t // Tr, query block t % Tr."""
    Tr = -(-len(q) // Br)
    final = attention_reference(q, k, v)[0]
    close = lambda a, b: np.allclose(a, b, rtol=1e-8, atol=1e-11)  # noqa: E731
    for t, (start, n, got) in enumerate(hbm["O"].written):
        j = t // Tr
        j1, rows = min((j + 1) * Bc, len(k)), slice(start, start + n)
        if j1 == len(k):
            return None
        o, acc, m, l = _prefix_states(q, k, v, rows, j1)
        if (
            close(got, o)
            and close(hbm["m"].written[t][2], m)
            and close(hbm["l"].written[t][2], l)
        ):
            continue
        if close(o, final[rows]):
            continue  # the later keys weigh nothing here: nothing to tell apart
        at = f"after key block {j} (keys 0..{j1 - 1}), rows {start}..{start + n - 1}"
        if close(got, acc):
            return (
                f"{at}: HBM's O holds acc = Σ e^(s - m) v, unnormalized, divided by l only at the last key "
                "block: that is FA2's rule in FA1's loop order. FA1's O is normalized after every key block, "
                "O = softmax(S_i,0..j) V_0..j, so each step divides by the new l"
            )
        if close(got, final[rows]):
            return (
                f"{at}: HBM's O already holds the output over all {len(k)} keys, though only keys 0..{j1 - 1} "
                "have been seen: your loop computed ahead and wrote the final values. At each key block FA1 "
                "knows only the keys so far, and O holds the output normalized over them"
            )
        if not close(got, o):
            return f"{at}: HBM's O is not the output normalized over the keys so far, softmax(S_i,0..j) V_0..j"
        return (
            f"{at}: HBM's m and l are not the max and Σ e^(s - m) of the scores so far"
        )
    return None


# What the check stores in HBM instead of query block 0's state after key block 0: still a state FA1's rule
# can take on from (no NaN, no inf), but not the one written, so a loop that computes from what it reads ends
# elsewhere than one that computes from copies it kept.
_TAMPER = {
    "O": ("adds 0.5 to", lambda x: x + 0.5),
    "m": ("adds 1 to", lambda x: x + 1.0),
    "l": ("doubles", lambda x: 2.0 * x),
}


def _fa1_tampered(q, k, v, Br: int, Bc: int, name: str) -> tuple:
    """FA1's (O, m, l) when HBM's `name` of query block 0 is changed by `_TAMPER[name]` after key block 0."""
    state = {"O": np.zeros((len(q), v.shape[1])), "m": np.full(len(q), -np.inf)}
    state["l"] = np.zeros(len(q))
    O, m, l = state["O"], state["m"], state["l"]
    for j0 in range(0, len(k), Bc):
        for i0 in range(0, len(q), Br):
            r = slice(i0, i0 + Br)
            s = q[r] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])
            m_new = np.maximum(m[r], s.max(axis=1))
            a, p = np.exp(m[r] - m_new), np.exp(s - m_new[:, None])
            l_new = a * l[r] + p.sum(axis=1)
            O[r] = ((a * l[r])[:, None] * O[r] + p @ v[j0 : j0 + Bc]) / l_new[:, None]
            m[r], l[r] = m_new, l_new
            if j0 == 0 and i0 == 0:
                state[name][r] = _TAMPER[name][1](state[name][r])
    return O, m, l


def _reads_its_state(fn, q, k, v, Br: int, Bc: int, want) -> str | None:
    """None when `fn` computes from the O, m and l it reads from HBM: with query block 0's stored O, m or l
    changed after key block 0, its result moves to what FA1's rule gives from the changed state. Else what it
    ignored."""
    if len(k) <= Bc:
        return None  # one key block: nothing is read back
    close = lambda a, b: np.allclose(a, b, rtol=1e-8, atol=1e-11)  # noqa: E731
    rows = f"rows 0..{min(Br, len(q)) - 1}"
    for name, (what, f) in _TAMPER.items():
        hbm, _ = _hbm(len(q), v.shape[1])
        hbm[name].tamper = (0, f)
        try:
            with np.errstate(all="ignore"):
                fn(q.copy(), k.copy(), v.copy(), Br, Bc, hbm)
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            return (
                f"with the {name} stored for {rows} changed after key block 0 (the check {what} "
                f"it), your loop raised {type(exc).__name__}: {exc}"
            )
        got = [hbm[x]._a for x in "Oml"]
        if all(close(a, b) for a, b in zip(got, _fa1_tampered(q, k, v, Br, Bc, name))):
            continue
        if all(close(a, b) for a, b in zip(got, want)):
            return (
                f"your loop ignores the {name} it reads from HBM: the check {what} the {name} "
                f"stored for {rows} after key block 0, and your result did not move. Between key "
                f"blocks FA1's state lives only in HBM: compute each step from {name}[rows] as "
                "read, not from a copy kept in your own variables"
            )
        return (
            f"after the check {what} the {name} stored for {rows} after key block 0, your "
            f"result is not what FA1's rule gives from that state: compute each step from "
            f"the O[rows], m[rows], l[rows] just read, and nothing else"
        )
    return None


def check_fa1_keys_outer(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(q, k, v, Br, Bc, hbm)`, FA1's loop order: O, m, l in `hbm` (`HBM` arrays) end as the output, row
    max and row sum; key blocks outside, each query block's O, m and l read from HBM and written back at every key
    block, holding FA1's state over the keys so far, and each step computed from the state it read (a run with
    query block 0's stored O, m or l changed after key block 0 must follow the change); score tiles formed key
    block by key block, none larger than one Br × Bc tile; lab's attention and torch refused.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb"""
    name = name or getattr(fn, "__name__", "your function")
    _, seed = _fresh(seed)
    cases = _keys_outer_cases(seed)
    for i, (label, q, k, v, Br, Bc) in enumerate(cases):
        hbm, log = _hbm(len(q), v.shape[1])
        seen = _Log()
        given = _sourced((q, k, v), seen)
        try:
            with (
                np.errstate(all="ignore"),
                _watching(_COURSE, numpy_only=True) as called,
            ):
                fn(*given, Br, Bc, hbm)
        except NotImplementedError:
            print(_NOT_YET.format(name))
            return
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            print(f"{name}: ✗ case {i} ({label}) raised {type(exc).__name__}: {exc}")
            print(seed_note(seed), end="")
            return
        o, lse = attention_reference(q, k, v)
        m = (q @ k.T / np.sqrt(q.shape[1])).max(axis=1)
        want = (o, m, np.exp(lse - m))
        got = (hbm["O"]._a, hbm["m"]._a, hbm["l"]._a)
        problem = (
            (_refusal(called) if called else None)
            or diagnose(got, want, names=("O", "m", "l"), rtol=1e-9, atol=1e-12)
            or next(
                (
                    p
                    for x in "Oml"
                    if (p := _order_problem(log, x, len(q), len(k), Br, Bc))
                ),
                None,
            )
            or _one_tile(seen, Br, Bc, v.shape[1])
            or _tile_order(seen, q, k, Br, Bc)
            or _held_after_each_block(hbm, q, k, v, Br, Bc)
            or _reads_its_state(fn, q, k, v, Br, Bc, want)
        )
        if problem is not None:
            print(f"{name}: ✗ case {i} ({label}): {problem}")
            hint = None if called else _keys_outer_hint(log, got, q, k, v, Br, Bc)
            if hint:
                print(f"  hint: {hint}")
            print(seed_note(seed), end="")
            return
    print(
        f"{name}: ✓ {len(cases)} cases: keys outside; O, m, l read from HBM and written back "
        "every key block"
    )
