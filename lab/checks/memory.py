"""Checks for notebook 00's exercises: the QKᵀ kernel priced by hand, the softmax kernel's cost, the bytes of
S and P, the N×M arrays a learner's own attention holds, the memory attention holds, the largest N that fits, HBM traffic, the head width at which QKᵀ
reaches the ridge.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import textwrap

import numpy as np

from ..attention import attention_reference
from ..exercises import check, diagnose
from ..memory import attention_bytes, attention_traffic, peak_bytes
from ..notebook import measured
from ._support import (
    _copies,
    _element_hint,
    _fresh,
    _guarded,
    _hint,
    _own_work,
    _refusal,
    _watching,
)

__all__ = [
    "check_qk_row",
    "check_softmax_balance",
    "check_softmax_row",
    "check_score_bytes",
    "check_my_attention",
    "check_lean_attention",
    "check_largest_n",
    "check_hbm_bytes",
    "check_qk_ridge",
]


def _passes(run, *args, **kwargs) -> bool:
    """Run the check `run(*args)`, print what it prints, and say whether the learner's function passed it."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run(*args, **kwargs)
    text = buf.getvalue()
    print(text, end="")
    return "✓ passed" in text and "✗" not in text and "not implemented" not in text


def _say_prediction(
    what: str, predicted, want, ok: bool, unit: str = "", passed: bool = True
) -> bool:
    """One line after a check: the learner's written prediction, and the right value beside it only once it is
    right or the learner's function has passed (a placeholder typed before the function works reveals nothing).
    Returns whether the right value was shown."""
    if predicted is None or predicted is Ellipsis:
        print(
            f"  your prediction ({what}): not written yet (shown once you write yours)"
        )
        return False
    if not ok and not passed:
        shown = f"{predicted:,}" if _number(predicted) else repr(predicted)
        print(
            f"  your prediction ({what}): {shown}{unit} ✗ (the right value is shown once "
            "your function passes)"
        )
        return False
    verdict = "✓" if ok else "✗"
    print(
        f"  your prediction ({what}): {predicted:,}{unit}; the right value: {want:,}{unit} {verdict}"
    )
    return True


# The QKᵀ kernel a learner prices by hand: the 40 GB A100, N = M = 4096, d = 64, float16
QK_ROW_CASE = {"N": 4096, "M": 4096, "d": 64, "itemsize": 2, "chip_name": "A100"}
_QK_FIELDS = ("F", "nbytes", "t_memory", "t_compute", "bound")
_QK_UNITS = {"F": "FLOP", "nbytes": "B", "t_memory": "s", "t_compute": "s"}
_QK_RTOL = 0.01  # a hand computation to three figures


def _qk_mistakes(F=None, nbytes=None) -> dict:
    """For each number of the QKᵀ row, the values its classic mistakes give, each with what it means;
    the times' from `F` and `nbytes` where given (the learner's own), else from the right ones."""
    from ..hardware import chip

    N, M, d, it = (QK_ROW_CASE[k] for k in ("N", "M", "d", "itemsize"))
    c = chip(QK_ROW_CASE["chip_name"])
    right_F, numbers = 2 * N * M * d, N * d + M * d + N * M
    F = right_F if F is None else F
    right_bytes = numbers * it
    nbytes = right_bytes if nbytes is None else nbytes
    hbm, peak = c["hbm_bytes_per_s"], c["matmul_flops"]
    S = "S, N·M numbers"
    return {
        "F": [
            (
                N * M * d,
                "that counts multiply-adds: a multiply and an add are 2 FLOPs, so 2·N·M·d",
            ),
            (
                4 * N * M * d,
                "that is both matmuls, the forward's F: this kernel is QKᵀ alone, 2·N·M·d",
            ),
            (
                2 * N * M,
                "that leaves out d: each of the N·M scores is a dot product of length d",
            ),
            (
                right_F + 7 * N * M,
                "that adds the softmax's operations: they are the next kernel's, and never in F",
            ),
            (right_F / 1e9, "that is in GFLOP: write FLOPs"),
        ],
        "nbytes": [
            (2 * numbers * it, "that is 4 bytes a number, float32: float16 takes 2"),
            (numbers, "those are numbers: float16 takes 2 bytes each"),
            (
                (N * d + M * d) * it,
                f"that leaves out the write of {S}, the kernel's result",
            ),
            (
                N * M * it,
                "that is S alone: the kernel also reads Q and K, N·d + M·d numbers",
            ),
            (
                (numbers + N * M) * it,
                "that reads S back as well: the softmax kernel reads it; this one writes it once",
            ),
            (
                (numbers + M * d) * it,
                "this kernel reads Q and K and writes S: V and O are the O = PV kernel's",
            ),
            (right_bytes / 2**20, "that is in MiB: write bytes"),
            (right_bytes / 1e6, "that is in MB: write bytes"),
        ],
        "t_memory": [
            (
                nbytes / c["sram_bytes_per_s"],
                "that is the SRAM's bandwidth: the operands come from HBM",
            ),
            (nbytes / 2.039e12, "that is the 80 GB A100's HBM: this is the 40 GB part"),
            (nbytes / (hbm / 1e12 * 2**40), "a TB/s is 10¹² bytes a second, not 2⁴⁰"),
            (nbytes / hbm * 1e6, "that is in µs: write seconds"),
            (
                nbytes * hbm,
                "the time is the bytes divided by the bandwidth, bytes per second",
            ),
        ],
        "t_compute": [
            (
                F / c["nonmatmul_flops"],
                "that is the FP32 rate: a matmul runs on the tensor cores, at the matmul peak",
            ),
            (
                F / c["fp32_ops_per_s"],
                "that is the FP32 units' rate for lone operations: a matmul runs on the tensor "
                "cores, at the matmul peak",
            ),
            (
                F / c["exp_per_s"],
                "that is the exponential units' rate: a matmul runs on the tensor cores",
            ),
            (F / 989e12, "that is the H100's matmul peak: this is the A100"),
            (F / peak * 1e6, "that is in µs: write seconds"),
            (F * peak, "the time is F divided by the rate, FLOPs per second"),
        ],
    }


def _number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, bool
    )


def _close(x, want) -> bool:
    return _number(x) and math.isfinite(x) and abs(x - want) <= _QK_RTOL * abs(want)


def check_qk_row(
    *, F=None, nbytes=None, t_memory=None, t_compute=None, bound=None
) -> None:
    """Check the QKᵀ kernel priced by hand (the 40 GB A100, N = M = 4096, d = 64, float16, `QK_ROW_CASE`)
    against lab's row of `lab.attention_traffic`: $F = 2NMd$ FLOPs, the bytes of Q and K read and S written,
    $t_\\text{memory}$ = bytes / HBM bandwidth, $t_\\text{compute}$ = F / the matmul peak, and `bound`, the
    larger time ("memory" or "compute"); each number to 1 %. A value left `...` is not written yet; a
    wrong one is named with the classic mistake it matches, never with lab's value (the table after the
    check shows it).
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    got = dict(zip(_QK_FIELDS, (F, nbytes, t_memory, t_compute, bound)))
    row = attention_traffic(
        QK_ROW_CASE["N"],
        QK_ROW_CASE["M"],
        d=QK_ROW_CASE["d"],
        itemsize=QK_ROW_CASE["itemsize"],
        chip_name=QK_ROW_CASE["chip_name"],
    )[0]
    want = {
        "F": row["flops"],
        "nbytes": row["bytes"],
        "t_memory": row["t_memory"],
        "t_compute": row["t_compute"],
        "bound": row["bound"],
    }
    unwritten = [k for k, v in got.items() if v is None or v is Ellipsis]
    print("your QKᵀ row (A100 40 GB, N = M = 4096, d = 64, float16):")
    if len(unwritten) == len(_QK_FIELDS):
        print("  not written yet (lab's row is the table after this check)")
        return
    mistakes, lines = _qk_mistakes(), []
    # the times' mistakes made from the learner's own F and bytes too (a number, else the right ones)
    theirs = _qk_mistakes(
        *(got[k] if _number(got[k]) and got[k] > 0 else None for k in ("F", "nbytes"))
    )
    bw = want["nbytes"] / want["t_memory"]  # the HBM bandwidth
    peak = want["F"] / want["t_compute"]  # the matmul peak
    upstream = {
        "t_memory": ("nbytes", lambda b: b / bw),
        "t_compute": ("F", lambda f: f / peak),
    }
    for k in _QK_FIELDS:
        if k in unwritten:
            continue
        g, w = got[k], want[k]
        if k == "bound":
            said = _bound_said(g, w, got)
        elif not _number(g):
            said = f"✗ {g!r}: write a number, in {_QK_UNITS[k]}"
        elif _close(g, w):
            said = f"✓ {g:.4g} {_QK_UNITS[k]}"
        else:
            known = mistakes[k] + (theirs[k] if k in upstream else [])
            why = next((text for value, text in known if _close(g, value)), None)
            if why is None and k in upstream:
                name, follow = upstream[k]
                mine = got[name]
                if (
                    _number(mine)
                    and not _close(mine, want[name])
                    and _close(g, follow(mine))
                ):
                    why = f"right from your {name}, which is off: fix it first"
            if why is None:
                why = {
                    "F": "count the dot products and the FLOPs of each",
                    "nbytes": "count what the kernel reads and writes, 2 bytes a number",
                    "t_memory": "the bytes over the HBM bandwidth, in seconds",
                    "t_compute": "F over the rate of the units a matmul runs on, in seconds",
                }[k]
            said = f"✗ {g:.4g} {_QK_UNITS[k]}: {why}"
        lines.append(f"{k:<10} {said}")
    if unwritten:
        lines.append("not written yet: " + ", ".join(unwritten))
    for line in lines:
        print(textwrap.fill(line, 98, initial_indent="  ", subsequent_indent=" " * 13))
    if not unwritten and all(s.split()[1] == "✓" for s in lines):
        print(
            "  ✓ all five match lab's row: the table below prints it beside the others"
        )


def _bound_said(g, w, got) -> str:
    """The line for the learner's bound: right, a word other than the two, or wrong (from their times or not)."""
    word = g.strip().lower() if isinstance(g, str) else g
    if word not in ("memory", "compute"):
        return f'✗ {g!r}: write "memory" or "compute"'
    if word == w:
        return f"✓ {word}"
    tm, tc = got["t_memory"], got["t_compute"]
    if _number(tm) and _number(tc) and (tm > tc) == (word == "memory"):
        return f"✗ {word}: right from your times, which are off"
    return f"✗ {word}: the larger of the two times sets the bound"


def _softmax_row(N, M, itemsize, bandwidth):
    """The softmax kernel's (operations, HBM bytes, memory time): 7·N·M, 2·N·M·itemsize, bytes / bandwidth
    (its operations are non-matmul ones: none of them is in F)."""
    nbytes = 2 * N * M * itemsize
    return 7 * N * M, nbytes, nbytes / bandwidth


def check_softmax_row(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(N, M, itemsize, bandwidth)`, the softmax kernel's `(ops, bytes, seconds)`: $7NM$ operations,
    $2NM\\cdot$itemsize bytes (read S once, write P), and bytes / bandwidth; two fixed cases and three drawn afresh
    each run (`seed` draws the same again). `predicted`: the learner's operations per byte for N = M = 4096 in
    float16, shown against the right value once written. Taught in: notebooks/00_the_memory_wall.ipynb"""
    passed = _passes(_check_softmax_row, fn, seed)
    if predicted is not None:
        want = 7 / (2 * 2)
        ok = isinstance(predicted, (int, float)) and abs(predicted - want) <= 0.01
        what = "ops per byte, N = M = 4096, float16"
        _say_prediction(what, predicted, want, ok, passed=passed)


def _check_softmax_row(fn, seed) -> None:
    rng, seed = _fresh(seed)
    cases = [(4096, 4096, 2, 1.555e12), (1000, 3000, 4, 3.35e12)] + [
        (
            *(int(x) for x in rng.integers(100, 9000, 2)),
            int(rng.choice([1, 2, 4, 8])),
            float(rng.choice([1.555e12, 2.039e12, 3.35e12])),
        )
        for _ in range(3)
    ]

    def with_bytes(nbytes):
        return lambda N, M, it, bw: (7 * N * M, nbytes(N, M, it), nbytes(N, M, it) / bw)

    mistakes = [
        (
            with_bytes(lambda N, M, it: N * M * it),
            "that counts S read only: the kernel also writes P, N·M numbers more",
        ),
        (
            with_bytes(lambda N, M, it: 4 * N * M * it),
            "that is 4 accesses per score (each pass reading S again): this kernel keeps a row "
            "on chip, reads S once and writes P once",
        ),
        (
            with_bytes(lambda N, M, it: 2 * N * M),
            "those bytes are numbers: each takes itemsize bytes",
        ),
        (
            lambda N, M, it, bw: (2 * N * M,) + _softmax_row(N, M, it, bw)[1:],
            "the softmax does 7 operations per score (max; subtract, exp, add; subtract, exp, "
            "divide), not 2",
        ),
        (
            lambda N, M, it, bw: _softmax_row(N, M, it, bw)[:2] + (7 * N * M / bw,),
            "the time divides the bytes, not the operations, by the bandwidth (bytes per second)",
        ),
        (
            lambda N, M, it, bw: (5 * N * M,) + _softmax_row(N, M, it, bw)[1:],
            "5 operations per score is a kernel that keeps each e^(S - m) (the fused kernel's count); this "
            "row charges the three passes, which compute the exponential twice: 7",
        ),
        (
            lambda N, M, it, bw: (
                _softmax_row(N, M, it, bw)[:2] + (_softmax_row(N, M, it, bw)[2] * 1e6,)
            ),
            "that time is in microseconds: return seconds (bytes over bytes per second)",
        ),
        (
            lambda N, M, it, bw: _softmax_row(N, N, it, bw),
            "that uses N × N: S has a row per query (N) and a column per key (M)",
        ),
        (
            with_bytes(lambda N, M, it: 16 * N * M * it),
            "that counts bits: itemsize is already in bytes",
        ),
    ]
    guarded = _guarded(fn, "softmax_row")
    check(
        guarded,
        _softmax_row,
        cases,
        names=("ops", "bytes", "seconds"),
        rtol=1e-9,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_traffic", "softmax_peak")],
        hint=_hint(
            mistakes,
            "7 operations per score (none of them in F); bytes = S read once and P written once, "
            "itemsize each; "
            "time = bytes / bandwidth",
            fn=guarded,
            cases=cases,
        ),
    )


def _softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
    """The softmax kernel's $t_\\text{memory} / t_\\text{compute}$ per score: accesses·itemsize/bandwidth over
    5/op_rate + 2/exp_rate (N·M cancels)."""
    return (accesses * itemsize / bandwidth) / (5 / op_rate + 2 / exp_rate)


# The course's own counts of the softmax's operations: an answer that reads them was not counted by its author
_COUNTS = re.compile(r"(FUSED_)?SOFTMAX_(OPS|EXPS)_PER_ELEMENT")


def _names_in(code) -> set:
    """Every name and string constant a code object and the code nested in it use."""
    names = set(code.co_names) | {c for c in code.co_consts if isinstance(c, str)}
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _names_in(c)
    return names


def _counts_its_own(fn, case, got):
    """Property: `fn` does not read lab's operation counts (`lab.memory.SOFTMAX_OPS_PER_ELEMENT` and its kin)."""
    code = getattr(getattr(fn, "raw", fn), "__code__", None)
    read = sorted(n for n in _names_in(code) if _COUNTS.search(n)) if code else []
    if read:
        return (
            f"it reads lab's count ({', '.join(read)}): count the three passes' operations "
            "yourself and write the numbers"
        )
    return None


def check_softmax_balance(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(itemsize, accesses, bandwidth, op_rate, exp_rate)`, the softmax kernel's memory time over its compute
    time: $\\frac{a \\cdot \\text{itemsize} / \\text{bandwidth}}{5/\\text{op\\_rate} + 2/\\text{exp\\_rate}}$ (N·M cancels), `op_rate`
    the FP32 units' lone operations per second (`lab.fp32_op_rate`); two fixed cases and four drawn afresh each run
    (`seed` draws the same again). `predicted`: the learner's ratio for the 40 GB A100 in float16 at 2 accesses,
    shown against the right value once written; a ratio priced at the FP32 FLOP rate is named.
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    passed = _passes(_check_softmax_balance, fn, seed)
    if predicted is not None:
        from ..hardware import chip

        a = chip("A100")
        rates = (a["hbm_bytes_per_s"], a["fp32_ops_per_s"], a["exp_per_s"])
        want = _softmax_balance(2, 2, *rates)
        ok = _number(predicted) and abs(predicted - want) <= 0.05
        what = "A100, float16, 2 accesses"
        shown = _say_prediction(what, predicted, round(want, 2), ok, passed=passed)
        flops = _softmax_balance(
            2, 2, a["hbm_bytes_per_s"], a["nonmatmul_flops"], rates[2]
        )
        near = _number(predicted) and abs(predicted - flops) <= 0.05
        if shown and not ok and near:
            print(
                f"  {predicted} prices the lone operations at the FP32 FLOP rate, "
                f"{a['nonmatmul_flops'] / 1e12:g} T: it counts a multiply-add as 2 FLOPs, "
                f"so a lone operation runs at half, {a['fp32_ops_per_s'] / 1e12:.2f} T/s"
            )


def _check_softmax_balance(fn, seed) -> None:
    rng, seed = _fresh(seed)
    # itemsize and accesses differ in the fixed cases, so a missing one is told from the other
    cases = [(4, 2, 1.555e12, 9.75e12, 2.44e12), (2, 4, 3.35e12, 33.5e12, 3.86e12)] + [
        (
            int(rng.choice([1, 2, 4, 8])),
            int(rng.choice([2, 3, 4, 5])),
            float(rng.uniform(0.5, 5.0)) * 1e12,
            float(rng.uniform(5, 50)) * 1e12,
            float(rng.uniform(1, 8)) * 1e12,
        )
        for _ in range(4)
    ]
    t_mem = lambda it, a, bw: a * it / bw  # noqa: E731
    mistakes = [
        (
            lambda it, a, bw, f, e: t_mem(it, a, bw) / (7 / f),
            "that prices the exponentials at the FP32 rate: they run on their own units, at exp_rate",
        ),
        (
            lambda it, a, bw, f, e: t_mem(it, a, bw) / (7 / e),
            "that prices every operation at exp_rate: only the exponentials run on those units, the rest "
            "at op_rate",
        ),
        (
            lambda it, a, bw, f, e: 1 / _softmax_balance(it, a, bw, f, e),
            "that is compute time over memory time: the ratio asked for is t_memory / t_compute",
        ),
        (
            lambda it, a, bw, f, e: _softmax_balance(it, 2, bw, f, e),
            "that is 2 accesses whatever the argument: the kernel moves accesses·itemsize bytes per score",
        ),
        (
            lambda it, a, bw, f, e: _softmax_balance(1, a, bw, f, e),
            "that leaves out itemsize: each access moves itemsize bytes",
        ),
        (
            lambda it, a, bw, f, e: _softmax_balance(it, 1, bw, f, e),
            "that counts one access per score: each score is touched `accesses` times, "
            "itemsize bytes each time",
        ),
        (
            lambda it, a, bw, f, e: 8 * _softmax_balance(it, a, bw, f, e),
            "that counts bits: itemsize is already in bytes",
        ),
        (
            lambda it, a, bw, f, e: t_mem(it, a, bw) / max(5 / f, 2 / e),
            "that takes the slower unit's time: the model adds the units' times, as if they never overlap",
        ),
        (
            lambda it, a, bw, f, e: t_mem(it, a, bw) / (4 / f + 1 / e),
            "that computes each exponential once, as a fused kernel does: this kernel's three passes "
            "compute e^(S - m) in two of them; count its operations again",
        ),
        (
            lambda it, a, bw, f, e: t_mem(it, a, bw) / (5 / (f / 2) + 2 / e),
            "that halves op_rate: it is already lone operations a second, the FLOP rate "
            "halved once",
        ),
    ]
    guarded = _guarded(fn, "softmax_balance")
    check(
        guarded,
        _softmax_balance,
        cases,
        rtol=1e-9,
        atol=0,
        seed=seed,
        properties=[
            _own_work("attention_traffic", "bound_rows", "softmax_peak"),
            _counts_its_own,
        ],
        hint=_constant_hint(
            guarded,
            cases,
            _hint(
                mistakes,
                "per score: t_memory is one score's bytes over the bandwidth; t_compute adds each unit's "
                "operations over its rate (count the three passes' operations, and which are exponentials); "
                "N·M cancels in the ratio",
                fn=guarded,
                cases=cases,
                close=(
                    "yours agrees to about 1e-7, not 1e-9: a step ran in float32; work in Python floats",
                    1e-5,
                ),
            ),
        ),
    )


def _constant_hint(fn, cases, hint):
    """`hint`, but a function that returns one number whatever its case is told so first (a number typed in
    matches some slip on some case by chance, and that slip's hint would mislead)."""

    def said(case, got, want):
        if diagnose(got, want, rtol=1e-9, atol=0) is None:
            return hint(case, got, want)
        try:
            with np.errstate(all="ignore"):
                outs = {float(fn(*c)) for c in cases}
        except Exception:
            return hint(case, got, want)
        if len(outs) == 1:
            return (
                f"it returns {outs.pop():.4g} whatever its arguments: compute the ratio from "
                "itemsize, accesses and the rates, per score"
            )
        return hint(case, got, want)

    return said


def check_score_bytes(fn, *, seed: int | None = None) -> None:
    """Check `fn(B, H, N, M, itemsize)`, the bytes of S and P: $2 \\cdot B \\cdot H \\cdot N \\cdot M \\cdot \\text{itemsize}$;
    four fixed cases and three drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    rng, seed = _fresh(seed)
    cases = [
        (3, 4, 5, 7, 8),
        (1, 1, 4096, 4096, 4),
        (8, 32, 2048, 2048, 2),
        (4, 16, 1000, 3000, 2),
    ] + [
        (
            *(int(x) for x in rng.integers(2, 33, 2)),
            *(int(x) for x in rng.integers(100, 9000, 2)),
            int(rng.choice([1, 2, 4, 8])),
        )
        for _ in range(3)
    ]
    fixed = [
        (
            lambda B, H, N, M, s, k=k: 2 * B * H * N * M * k,
            f"that is {k} bytes per number whatever the format: use the argument itemsize",
        )
        for k in (1, 2, 4, 8)
    ]
    mistakes = [
        (
            lambda B, H, N, M, s: B * H * N * M * s,
            "that is S alone: P = softmax(S) is held at the same time, at the same size",
        ),
        (
            lambda B, H, N, M, s: 3 * B * H * N * M * s,
            "that is three N×M arrays per head (S, P and a temporary): attention_naive writes "
            "its exponentials and division into P itself, so S and P are all it holds: 2",
        ),
        (
            lambda B, H, N, M, s: 2 * N * M * s,
            "that is one head: all B·H heads of the batch are computed at once",
        ),
        (
            lambda B, H, N, M, s: 2 * H * N * M * s,
            "that is the H heads of one sequence: the batch has B of them",
        ),
        (
            lambda B, H, N, M, s: 2 * B * N * M * s,
            "that is one head of each sequence: each of the B sequences has H heads",
        ),
        (
            lambda B, H, N, M, s: 2 * B * H * N * N * s,
            "that uses N × N: S has a row per query (N) and a column per key (M)",
        ),
        (
            lambda B, H, N, M, s: 16 * B * H * N * M * s,
            "that is in bits: itemsize is already in bytes",
        ),
        (
            lambda B, H, N, M, s: 2 * B * H * N * M,
            "that counts numbers, not bytes: each takes itemsize bytes",
        ),
    ] + fixed
    guarded = _guarded(fn, "score_bytes")
    check(
        guarded,
        lambda B, H, N, M, s: attention_bytes(N, M, s, heads=B * H),
        cases,
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_bytes")],
        hint=_hint(
            mistakes,
            "count the numbers in S and in P for one head, times the heads at once, times bytes per number",
            fn=guarded,
            cases=cases,
        ),
    )


# The bound of exercise 2: at its peak, at most this many N×M arrays of the input's dtype (one, plus the output
# and a few vectors of length N, which the cases keep under a quarter of one N×M array: N, M >= 16·max(d, d_v)).
LEAN_BOUND = 1.25

_ATTENTION_ANSWERS = (
    "attention_reference",
    "attention_naive",
    "flash_attention_numpy",
    "one_pass_attention",
    "softmax_safe",
    "softmax_naive",
    "softmax_online",
)


def _lean_cases(rng, large: bool = False) -> list:
    """Float32 cases (and one float64) with N != M, d != d_v, and N, M >= 16·max(d, d_v): arrays the size of
    q, k, v and o then stay under a quarter of one N×M array. The scores are of order 1; with `large`, the third
    case's are all shifted by +200 (q and k share a constant first column), which leaves P as it was but
    overflows float32's e^s unless each row's max is subtracted."""
    cases = []
    for n, dtype in enumerate((np.float32, np.float32, np.float32, np.float64)):
        d, dv = (int(x) for x in rng.choice([16, 24, 32, 40, 48, 64], 2, replace=False))
        low = 16 * max(d, dv)
        N, M = (
            int(rng.integers(low, low + 320)),
            int(rng.integers(low + 352, low + 720)),
        )
        q, k, v = (rng.standard_normal(s) for s in ((N, d), (M, d), (M, dv)))
        if large and n == 2:  # every score shifted by +200, past float32's e^88.7:
            q[:, 0] = k[:, 0] = math.sqrt(200 * math.sqrt(d))  # softmax ignores a shift
        cases.append(tuple(x.astype(dtype) for x in (q, k, v)))
    return cases


def _held(peak: int, q, k) -> str:
    """What a peak of `peak` bytes says about a version of attention on q (N, d), k (M, d)."""
    unit = q.shape[0] * k.shape[0] * q.itemsize
    ratio = peak / unit
    said = (
        f"at its peak it held {peak / 2**20:.2f} MiB, {ratio:.2f}× one N×M array of "
        f"{q.dtype} ({unit / 2**20:.2f} MiB); the bound is {LEAN_BOUND}×"
    )
    if ratio < 2.6:
        why = (
            "two N×M arrays were alive at once: `np.exp(s)`, `s - m`, `s / c`, `s * c` "
            "each make a new N×M array while s is still alive; write into s itself "
            "(`s *= c`, `np.exp(s, out=s)`, `s /= l`)"
        )
    else:
        why = (
            "three N×M arrays' worth: new arrays made while s is alive (`np.exp(s)`, "
            "`s / c`), or a float64 copy of a float32 array, 8 bytes a number: numpy 2 "
            "turns `x / np.sqrt(d)` into float64 (np.sqrt returns a numpy float64 "
            "scalar, NEP 50), while a Python float (`d ** -0.5`) keeps float32"
        )
    return f"{said}: {why}"


def check_lean_attention(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(q, k, v)`, one head of attention $O = \\mathrm{softmax}(QK^\\top/\\sqrt{d})\\,V$ in numpy
    that holds at most `LEAN_BOUND` N×M arrays of the input's dtype at its peak, measured with
    `lab.peak_bytes` on the learner's own function; float32 and float64 cases drawn afresh each
    run (`seed` draws the same again). `predicted`: the learner's count of N×M float32 arrays that the
    `np.sqrt` / `np.exp` version holds (3 float64 ones: 6), shown against it once written.
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    passed = _passes(_check_lean_attention, fn, seed)
    if predicted is not None:
        ok = isinstance(predicted, (int, float)) and abs(predicted - 6) <= 0.5
        shown = _say_prediction("N×M float32 arrays", predicted, 6, ok, passed=passed)
        if ok or not shown:
            return
        print(
            "    why 6: np.sqrt(d) is a numpy float64 scalar, so s is float64 (2 float32 arrays' "
            "worth);\n    np.exp(s) and p / p.sum(...) are two more float64 N×M arrays while s is alive"
        )


# Exercise 2's measured case: float32, N != M, d != d_v, with N, M >= 16·max(d, d_v) so that q, k, v, o and the
# row statistics stay under a quarter of one N×M array; the same case in float64 tells a float64 copy apart
MY_CASE = {"N": 768, "M": 1024, "d": 48, "dv": 32}
MY_TOLERANCE = 0.5  # a count of whole arrays: the O(N·d) rest keeps the measured one within a quarter


def _arrays_held(fn, dtype) -> float:
    """The peak of `fn` on `MY_CASE` in `dtype`, in N×M arrays of `dtype` (`lab.peak_bytes`)."""
    c = MY_CASE
    rng = np.random.default_rng(0)
    shapes = ((c["N"], c["d"]), (c["M"], c["d"]), (c["M"], c["dv"]))
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in shapes)
    with _watching(_ATTENTION_ANSWERS, numpy_only=True) as called:
        peak, _ = peak_bytes(getattr(fn, "raw", fn), q, k, v)
    if called:
        raise RuntimeError(_refusal(called))
    return peak / (c["N"] * c["M"] * np.dtype(dtype).itemsize)


def check_my_attention(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(q, k, v)`, the learner's own standard attention in numpy, in the input's dtype (float32
    and float64 cases drawn afresh each run; `seed` draws the same again); once it passes, measure with
    `lab.peak_bytes` how many N×M arrays of the input's dtype it holds at its peak, and set that beside
    `predicted`, the learner's count read from their own code (right within `MY_TOLERANCE`), with the
    reason for a wrong count. The measured count is shown only once a count is written.
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    if predicted is not None and predicted is not Ellipsis and not _number(predicted):
        raise TypeError(
            f"predicted must be a number of N×M arrays (such as 2), got {predicted!r}"
        )
    passed = _passes(_check_lean_attention, fn, seed, lean=False)
    what = "N×M arrays alive at its peak"
    if predicted is None or predicted is Ellipsis:
        print(f"  your count ({what}): not written yet (measured once you write yours)")
        return
    if not passed:
        print(
            f"  your count ({what}): {predicted:g} (measured once your function passes)"
        )
        return
    try:
        held, held64 = (_arrays_held(fn, t) for t in (np.float32, np.float64))
    except RuntimeError as refused:
        print(f"  ✗ while measured, {refused}")
        return
    ok = abs(predicted - held) <= MY_TOLERANCE
    c = MY_CASE
    print(
        f"  measured (float32, N = {c['N']}, M = {c['M']}): {measured(held, '.2f')} N×M "
        f"arrays at its peak; your count: {predicted:g} {'✓' if ok else '✗'}"
    )
    if ok:
        return
    if held > held64 + 0.75:
        why = (
            f"in float64 it holds {measured(held64, '.2f')} arrays, in float32 more: a step "
            "made float64 copies (8 bytes a number: 2 float32 arrays' worth each). np.sqrt(d) "
            "is a numpy float64 scalar, and under numpy 2 (NEP 50) `s / np.sqrt(d)` is float64"
        )
    elif predicted < held:
        why = (
            "it holds more than you counted: `s - m`, `np.exp(x)` and `p / l` each make a new "
            "N×M array while their operand is still alive, and `p = p / l` frees the old p "
            "only once the new one exists. Count the arrays alive at the same moment"
        )
    else:
        why = (
            "it holds fewer than you counted: a step written into an existing array "
            "(`out=`, `s /= l`) makes none, a row's max or sum, (N, 1), is not N×M, and an "
            "array no name holds any more is freed at once"
        )
    print(
        textwrap.fill(
            f"hint: {why}", 100, initial_indent="  ", subsequent_indent="    "
        )
    )


def _check_lean_attention(fn, seed, lean: bool = True) -> None:
    rng, seed = _fresh(seed)
    cases = _lean_cases(rng, large=not lean)  # exercise 2 asks for the max, 3 not
    own = _own_work(*_ATTENTION_ANSWERS, numpy_only=True)

    def same_dtype(fn, case, got):
        if got.dtype == case[0].dtype:
            return None
        why = (
            ": something made it float64 (an `.astype(np.float64)`, a float64 array, or "
            "a numpy float64 scalar such as `np.sqrt(d)`, which under numpy 2 (NEP 50) "
            "turns a float32 array into float64); compute in the input's dtype and scale "
            "by a Python float (`d ** -0.5`)"
            if got.dtype == np.float64
            else ""
        )
        return f"it returns {got.dtype} for {case[0].dtype} inputs{why}"

    def lean_held(fn, case, got):
        with _watching(_ATTENTION_ANSWERS, numpy_only=True) as called:
            peak, again = peak_bytes(getattr(fn, "raw", fn), *_copies(case))
        if called:
            return _refusal(called)
        if diagnose(again, got, rtol=0, atol=0) is not None:
            return "it gives another result when its memory is measured: compute the same each time"
        if peak <= LEAN_BOUND * case[0].shape[0] * case[1].shape[0] * case[0].itemsize:
            return None
        return _held(peak, case[0], case[1])

    mistakes = [
        (
            lambda q, k, v: _lean(q, k, v, scale=1.0),
            "the scores are not scaled: S = QKᵀ/√d",
        ),
        (
            lambda q, k, v: _lean(q, k, v, scale=1 / math.sqrt(v.shape[-1])),
            "d is the width of q and k (the length of each dot product), not of v",
        ),
        (
            lambda q, k, v: _lean(q, k, v, axis=0),
            "each column of P sums to 1: softmax each query's row of scores (axis=-1)",
        ),
        (
            lambda q, k, v: _lean(q, k, v, normalize=False),
            "the rows of P are not divided by their sums: after exp, divide each row by "
            "its own sum (`s /= s.sum(axis=-1, keepdims=True)`)",
        ),
        (
            lambda q, k, v: _lean(q, k, v, normalize="all"),
            "P is divided by the sum of the whole matrix: each query's row is divided by "
            "its own sum (axis=-1, keepdims=True)",
        ),
    ]
    tol = {"rtol": 2e-4, "atol": 1e-5}  # float32's digits, summed over M keys

    def hint(case, got, want):
        if diagnose(got, want, **tol) is None:
            return None  # a property failed, and says why itself
        if not np.isfinite(got).all() and np.isfinite(want).all():
            top = float(
                np.abs(case[0] @ case[1].T).max() / math.sqrt(case[0].shape[-1])
            )
            return (
                f"NaN or inf in yours: the scores reach {top:.0f} here, and e^s overflows "
                f"{case[0].dtype} past {math.log(np.finfo(case[0].dtype).max):.1f}; subtract "
                "each row's max before the exponential (notebook 01)"
            )
        for wrong, text in mistakes:
            w = wrong(
                *case
            )  # float32 rounding scales with the values: an atol to match
            if (
                diagnose(got, w, rtol=2e-3, atol=max(1e-4, 1e-5 * np.abs(w).max()))
                is None
            ):
                return text
        return "S = scale·QKᵀ is (N, M); softmax each row; O = PV is (N, d_v)"

    check(
        _guarded(fn, "lean_attention" if lean else "my_attention"),
        lambda q, k, v: attention_reference(q, k, v)[0],
        cases,
        **tol,
        seed=seed,
        hint=hint,
        properties=[own, same_dtype, lean_held] if lean else [own, same_dtype],
    )


def _lean(q, k, v, *, scale=None, axis=-1, normalize=True):
    """Attention in float64 with a choice of classic mistakes: the scale, the softmax axis, the division
    (`normalize=False`: none, `"all"`: by the whole matrix's sum)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.T * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    # the unnormalized versions as a learner writes them, without the max (which normalizing would cancel)
    e = np.exp(s - s.max(axis=axis, keepdims=True)) if normalize is True else np.exp(s)
    if normalize == "all":
        return e / e.sum() @ v
    return (e / e.sum(axis=axis, keepdims=True) if normalize else e) @ v


def _largest_n(gib, itemsize, layers):
    """The largest N with $(L + 1) N^2 \\cdot \\text{itemsize} \\le \\text{gib} \\cdot 2^{30}$: L saved P's and the S of the layer
    being computed."""
    return math.isqrt(gib * 2**30 // ((layers + 1) * itemsize))


def check_largest_n(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(gib, itemsize, layers)`, the largest N at which training one head per layer fits in `gib` GiB: autograd
    keeps each layer's P (N×N) until the backward pass, and the layer being computed holds its S as well, so
    $(L + 1) N^2 \\cdot \\text{itemsize} \\le \\text{gib} \\cdot 2^{30}$; six fixed cases and three drawn afresh each run
    (`seed` draws the same again). `predicted`: the learner's N for 80 GiB, float16, 32 layers, worked by hand, shown
    against the right one once written. Taught in: notebooks/00_the_memory_wall.ipynb"""
    passed = _passes(_check_largest_n, fn, seed)
    if predicted is not None:
        want = _largest_n(80, 2, 32)
        what = "80 GiB, float16, 32 layers"
        _say_prediction(what, predicted, want, predicted == want, passed=passed)


def _check_largest_n(fn, seed) -> None:
    rng, seed = _fresh(seed)
    cases = [
        (80, 2, 32),
        (80, 4, 1),
        (16, 2, 12),
        (141, 2, 80),
        (1, 8, 3),
        (24, 1, 2),
    ] + [
        (
            int(rng.integers(2, 300)),
            int(rng.choice([1, 2, 4, 8])),
            int(rng.integers(2, 97)),
        )
        for _ in range(3)
    ]
    mistakes = [
        (
            lambda g, s, L: math.isqrt(g * 2**30 // (L * s)),
            "that holds the L saved P's but not the S of the layer being computed: during its softmax S and P "
            "are both alive, L + 1 arrays",
        ),
        (
            lambda g, s, L: math.isqrt(g * 2**30 // (2 * L * s)),
            "that keeps every layer's S as well: autograd saves P (the softmax's and PV's backward need it), "
            "not S (QKᵀ's backward needs Q and K), so L + 1 arrays",
        ),
        (
            lambda g, s, L: math.isqrt(g * 2**30 // (2 * s)),
            "that is one layer's S and P, inference: training keeps every layer's P until the backward pass",
        ),
        (
            lambda g, s, L: math.isqrt(g * 10**9 // ((L + 1) * s)),
            "that budget is in GB (10⁹ bytes): a GiB is 2³⁰ bytes",
        ),
        (
            lambda g, s, L: _largest_n(g, s, L) + 1,
            "one too many: at that N, (L + 1)·N²·itemsize exceeds the budget",
        ),
        (
            lambda g, s, L: math.sqrt(g * 2**30 / ((L + 1) * s)),
            "not a whole number: N counts tokens, so round down",
        ),
        (
            lambda g, s, L: math.isqrt(g * 2**30 // (L + 1)),
            "that leaves out itemsize: each number takes itemsize bytes",
        ),
    ]

    def whole(fn, case, got):
        if isinstance(got, (int, np.integer)) and not isinstance(got, bool):
            return None
        return (
            f"it returns {got!r}, a {type(got).__name__}: N counts tokens, so return an integer (math.isqrt keeps "
            "the whole computation in integers)"
        )

    guarded = _guarded(fn, "largest_n")
    check(
        guarded,
        _largest_n,
        cases,
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_bytes"), whole],
        hint=_hint(
            mistakes,
            "the largest N with (L + 1)·N²·itemsize <= gib·2³⁰ bytes (L saved P's, one S): it fits, N + 1 does not",
            fn=guarded,
            cases=cases,
        ),
    )


def check_hbm_bytes(fn, *, seed: int | None = None) -> None:
    """Check `fn(N, M, d, dv, itemsize)`, the HBM bytes `(s, p, o, fused)` of standard attention's three kernels and of a
    fused kernel (`lab.attention_traffic`, softmax reading S once); three fixed cases and three drawn afresh each run
    (`seed` draws the same again). Taught in: notebooks/00_the_memory_wall.ipynb"""
    rng, seed = _fresh(seed)
    cases = [(4096, 4096, 64, 64, 2), (1000, 3000, 128, 32, 4), (7, 5, 3, 2, 8)] + [
        (
            *(int(x) for x in rng.integers(2, 5000, 2)),
            *(int(x) for x in rng.choice([16, 32, 64, 80, 128], 2, replace=False)),
            int(rng.choice([1, 2, 4, 8])),
        )
        for _ in range(3)
    ]

    def want(N, M, d, dv, it):
        return tuple(
            r["bytes"]
            for r in attention_traffic(N, M, d=d, dv=dv, itemsize=it)
            if r["piece"] != "standard, total"
        )

    # one mistake per element: each term of each kernel left out, or counted with the wrong shape
    Q, K, V, O, S = (
        lambda N, M, d, dv: N * d,
        lambda N, M, d, dv: M * d,
        lambda N, M, d, dv: M * dv,
        lambda N, M, d, dv: N * dv,
        lambda N, M, d, dv: N * M,
    )

    def less(i, *terms):
        """Element i of the right answer without the given terms."""
        return lambda N, M, d, dv, it: (
            want(N, M, d, dv, it)[i] - sum(t(N, M, d, dv) for t in terms) * it
        )

    def left_out(i, term, text):
        return (i, less(i, term), text)

    mistakes = [
        left_out(0, Q, "the kernel reads Q, N·d numbers, from HBM"),
        left_out(0, K, "the kernel reads K, M·d numbers (a row per key), from HBM"),
        left_out(0, S, "the kernel also writes S, N·M numbers, back to HBM"),
        (
            0,
            less(0, K, Q, S),
            "that counts S only: the kernel also reads Q (N·d) and K (M·d)",
        ),
        (
            0,
            lambda N, M, d, dv, it: (2 * N * d + N * M) * it,
            "K has a row per key: M·d numbers, not N·d",
        ),
        left_out(1, S, "the softmax reads S and writes P: N·M numbers each way"),
        (
            1,
            lambda N, M, d, dv, it: 4 * N * M * it,
            "that is 4 accesses per element of S, a "
            "softmax reading S once per pass; this one reads S once and writes P: 2·N·M numbers",
        ),
        left_out(2, S, "the kernel reads P, N·M numbers, from HBM"),
        left_out(2, V, "the kernel reads V, M·d_v numbers, from HBM"),
        left_out(2, O, "O = PV also writes its result O, N·d_v numbers, back to HBM"),
        left_out(3, Q, "the fused kernel still reads Q, N·d numbers, once"),
        left_out(3, K, "the fused kernel still reads K, M·d numbers, once"),
        left_out(3, V, "the fused kernel still reads V, M·d_v numbers, once"),
        left_out(3, O, "the fused kernel still writes O, N·d_v numbers, once"),
        (
            3,
            lambda N, M, d, dv, it: sum(want(N, M, d, dv, it)[:3]),
            "that adds the three kernels' bytes: a fused kernel never writes S or P, so it moves only Q, K, "
            "V in and O out",
        ),
        (
            3,
            lambda N, M, d, dv, it: want(N, M, d, dv, it)[3] + 2 * N * M * it,
            "the fused kernel reads Q, K, V and writes O only: S and P never leave the chip",
        ),
    ]
    together = [
        (
            lambda N, M, d, dv, it: tuple(x // it for x in want(N, M, d, dv, it)),
            "those are numbers: times itemsize",
        ),
        (
            lambda N, M, d, dv, it: want(N, N, d, dv, it),
            "S and P are N × M, and K, V have M rows",
        ),
        (
            lambda N, M, d, dv, it: want(N, M, d, d, it),
            "V and O have d_v columns, not d",
        ),
    ]
    defaults = (
        "the S kernel reads Q (N, d) and K (M, d) and writes S (N, M)",
        "the softmax reads S (N, M) once and writes P (N, M)",
        "the PV kernel reads P (N, M) and V (M, d_v) and writes O (N, d_v)",
        "the fused kernel reads Q, K, V and writes O, once each",
    )
    guarded = _guarded(fn, "hbm_bytes")
    names = ("s", "p", "o", "fused")
    each = _element_hint(
        names,
        mistakes,
        defaults,
        whole=_hint(together, None, fn=guarded, cases=cases),
        fn=guarded,
        cases=cases,
    )

    def hint(case, got, want):
        """The elements' hints, led by which elements are wrong when the line above names only the first."""
        said = each(case, got, want)
        try:
            wrong = [n for n, g, w in zip(names, got, want, strict=True) if g != w]
        except (TypeError, ValueError):
            return said
        if len(wrong) > 1 and said and said.startswith(f"{wrong[0]}: "):
            listed = ", ".join(wrong[:-1]) + f" and {wrong[-1]}"
            return f"{listed} are wrong here; " + said
        return said

    check(
        guarded,
        want,
        cases,
        names=names,
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_traffic", "standard_traffic")],
        hint=hint,
    )


def _qk_ridge(N, itemsize, ridge):
    """The real head width $d^*$ at which the QKᵀ kernel with N = M reaches `ridge` FLOP/B: its intensity
    $2N^2d / ((2Nd + N^2)\\cdot\\text{itemsize}) \\ge R$ gives $d \\ge rN / (2(N - r))$,
    $r = R\\cdot\\text{itemsize}$;
    `math.inf` for $N \\le r$, and the limit $r / 2$ for $N = \\infty$."""
    r = ridge * itemsize
    if N == math.inf:
        return r / 2
    return math.inf if N <= r else r * N / (2 * (N - r))


def _ridge_case(rng) -> tuple:
    """(N, itemsize, ridge) drawn afresh: N a power of two or infinite, ridge real."""
    N = rng.choice([512, 1024, 2048, 4096, 8192, 16384, 65536, math.inf])
    N = math.inf if N == math.inf else int(N)
    return N, int(rng.choice([1, 2, 4])), float(rng.uniform(40.0, 400.0))


def check_qk_ridge(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(N, itemsize, ridge)`, the real head width $d^*$ at which the QKᵀ kernel with N = M reaches the
    ridge: `math.inf` when no d gets there, and its limit as N grows for `N = math.inf` (a case a loop over d cannot
    answer); fixed cases and five drawn afresh each run (`seed` draws the same again). `predicted`: the learner's
    smallest integer d for the A100 at N = M = 4096 in float16, shown against the right one.
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    from ..hardware import ridge_point

    rng, seed = _fresh(seed)
    a100 = ridge_point("A100")
    cases = [(4096, 2, a100), (math.inf, 2, a100), (256, 2, a100), (8192, 4, 295.2)]
    cases += [_ridge_case(rng) for _ in range(5)]

    def finite(f):
        """`f` on a finite N, the limit itself at N = ∞ (for mistakes about finite N only)."""
        return lambda N, it, R: _qk_ridge(N, it, R) if N == math.inf else f(N, it, R)

    mistakes = [
        (
            finite(lambda N, it, R: R * it / 2),
            "that is the limit as N grows (the bytes of S alone): at a finite N the kernel also reads "
            "Q and K, 2·N·d numbers, which lowers its intensity",
        ),
        (
            lambda N, it, R: _qk_ridge(N, 1, R),
            "that counts numbers, not bytes: each takes itemsize bytes",
        ),
        (
            lambda N, it, R: _qk_ridge(N, it / 2, R),
            "that counts 4·N·M·d FLOPs, the forward's two products: this kernel computes QKᵀ "
            "alone, 2·N·M·d",
        ),
        (
            lambda N, it, R: (
                math.ceil(x) if (x := _qk_ridge(N, it, R)) != math.inf else x
            ),
            "that is rounded up to an integer: return the real threshold d* (the first whole head width is "
            "its ceiling, your prediction)",
        ),
        (
            lambda N, it, R: math.nan if N == math.inf else _qk_ridge(N, it, R),
            "at N = ∞ the formula r·N / (2(N − r)) is ∞/∞: take its limit as N grows",
        ),
        (
            lambda N, it, R: R * it if N == math.inf else _qk_ridge(N, it, R),
            "at N = ∞: r·N / (2(N − r)) tends to r/2, not r",
        ),
        (
            lambda N, it, R: (
                R * it
                if N == math.inf
                else math.inf
                if N <= 2 * R * it
                else R * it * N / (N - 2 * R * it)
            ),
            "that is N·M·d FLOPs: each of the N·M dot products of length d is d multiplies and d adds, "
            "2·N·M·d",
        ),
    ]

    def exact_limit(fn, case, got):
        """At N = ∞ the limit r/2 itself, to rounding: a search at a large finite N lands near it only."""
        N, it, R = case
        if N != math.inf or abs(got - R * it / 2) <= 1e-14 * R * it:
            return None
        return (
            f"at N = ∞ yours is {got!r}, the limit is {R * it / 2!r}: off by "
            f"{abs(got / (R * it / 2) - 1):.1e} relative, the gap a search at a large finite N "
            "leaves; let N grow in your formula for d* and write the limit itself"
        )

    def hint(case, got, want):
        if want == math.inf and got != math.inf:
            N, it, R = case
            return (
                f"even as d → ∞ the intensity only approaches N / itemsize = {N / it:.0f} FLOP/B (the "
                f"bytes of S alone), below this ridge of {R:.1f}: no d gets there, return math.inf"
            )
        return _hint(
            mistakes,
            "intensity = 2·N²·d / ((2·N·d + N²)·itemsize) for N = M; solve intensity >= ridge for d, "
            "then let N grow for N = ∞",
            fn=guarded,
            cases=cases,
        )(case, got, want)

    guarded = _guarded(fn, "qk_ridge")
    passed = _passes(
        check,
        guarded,
        _qk_ridge,
        cases,
        rtol=1e-9,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_traffic", "ridge_point"), exact_limit],
        hint=hint,
    )
    if predicted is not None:
        want = math.ceil(_qk_ridge(4096, 2, a100))
        what = "A100, N = M = 4096, float16"
        _say_prediction(what, predicted, want, predicted == want, passed=passed)
