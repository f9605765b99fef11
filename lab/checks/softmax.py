"""Checks for the exercises on the three-pass softmax and the online softmax.

Each `check_*` runs a learner's function on its cases, the classic failure cases among them (scores in the thousands, rows
of only -inf, very negative scores, a short last block): one line when all pass; else the case, expected against got and
where (`lab.diagnose`), and a hint naming the classic mistake whose result matches the learner's. Beyond the numbers: the
input is not changed in place, lab's own version is not called, the online pass reads each score once without holding the
row (`lab.CountingArray`, `tracemalloc`).

Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
"""

from __future__ import annotations

import contextlib
import math

import ml_dtypes
import numpy as np
from numpy import inf

from ..access_count import CountingArray
from ..exercises import check, describe_case, diagnose, raised_at, seed_note
from ..memory import peak_bytes
from ..overflow import (
    GAPS,
    SOFTMAX_DTYPES,
    exp_limits,
    first_exp_overflow,
    overflow_table,
)
from ..softmax import online_normalizer, softmax_naive
from ..softmax_steps import demo_scores

__all__ = [
    "check_row_edges",
    "check_row_overflow",
    "check_rescale_predictions",
    "check_safe_softmax",
    "check_log_sum_exp",
    "check_online_step",
    "check_online_pass",
    "check_online_softmax",
    "check_merge_ml",
    "check_online_entropy",
    "check_count_rescales",
]

from . import _support
from ._support import (
    _copies,
    _element_hint,
    _fresh,
    _guarded,
    _hint,
    _own_work,
    _same,
    _settled,
    _watching,
)


def _refusal(seen) -> str:
    """`_support._refusal`, with a torch imported inside the learner's function named plainly "torch": its import
    runs torch's module code, whose internals (torch.<module>, TorchVersion, SymInt) say nothing to a learner."""
    seen = [seen] if isinstance(seen, str) else list(seen)
    if any(w.startswith("torch") and "<module>" in w for w in seen):
        seen = ["torch"]
    return _support._refusal(seen)


# ------------------------------------------------------------------------------------ 01 three-pass softmax


@contextlib.contextmanager
def _fresh_names(rng, count: int = 2, among=tuple(SOFTMAX_DTYPES)):
    """Add `count` fresh names to `lab.SOFTMAX_DTYPES` for the block (each another name of one of the formats `among`),
    so that no table of answers passes: yields {fresh name: the format's own name}."""
    names = {
        f"format_{int(rng.integers(100, 1000))}{chr(97 + i)}": n
        for i, n in enumerate(rng.choice(list(among), count, replace=False))
    }
    SOFTMAX_DTYPES.update({a: SOFTMAX_DTYPES[n] for a, n in names.items()})
    try:
        yield names
    finally:
        for a in names:
            SOFTMAX_DTYPES.pop(a, None)


def _edges(name: str) -> tuple:
    """(log Ω, log Ω - log Σ_g e^(-g), log(smallest normal)) of format `name`: where e^s overflows, where the sum of
    section 2's row (s, s-1, s-2, s-3) does, and where e^s starts to lose precision."""
    lim = exp_limits(name)
    crowd = float(np.exp(-np.asarray(GAPS, dtype=np.float64)).sum())
    return lim["log_max"], lim["log_max"] - math.log(crowd), lim["log_normal"]


def _say_row_prediction(predicted) -> None:
    """One line: the learner's first broken integer s of fp16's four-score row against the scan."""
    want = next(
        r["naive_breaks_above"] for r in overflow_table() if r["dtype"] == "fp16"
    )
    if predicted is None or predicted is Ellipsis:
        print(
            "  your prediction (fp16, first s that breaks): not written yet (shown once you write yours)"
        )
        return
    verdict = "✓" if predicted == want else f"✗ (off by {predicted - want:+d})"
    print(
        f"  your prediction (fp16, first s that breaks): s = {predicted}; the scan: s = {want} {verdict}"
    )


def _say_fp8_prediction(predicted) -> None:
    """One line: the learner's first integer s at which float8_e4m3fn's four-score row sum passes its Ω = 448, a
    format the text did not work, against $\\lfloor \\log \\Omega - \\log(1 + e^{-1} + e^{-2} + e^{-3}) \\rfloor + 1$."""
    top = math.log(float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max))
    want = math.floor(top - math.log(sum(math.exp(-j) for j in range(4)))) + 1
    what = "fp8 e4m3, first s that breaks"
    if predicted is None or predicted is Ellipsis:
        print(
            f"  your prediction ({what}): not written yet (shown once you write yours)"
        )
        return
    verdict = "✓" if predicted == want else f"✗ (off by {predicted - want:+d})"
    print(
        f"  your prediction ({what}): s = {predicted}; the right value: s = {want} {verdict}"
    )


def check_row_edges(
    fn, *, seed: int | None = None, predicted=None, predicted_fp8=None
) -> None:
    """Check `fn(name)`, the three edges of format `name`: $\\log \\Omega$, $\\log \\Omega - \\log(1 + e^{-1} + e^{-2} +
    e^{-3})$ and $\\log(\\text{smallest normal})$, for fp16, bf16, fp32, fp64 and two fresh names added to
    `lab.SOFTMAX_DTYPES` for the run (`seed` draws them again). `predicted`: the learner's first integer s at which
    fp16's row (s, s-1, s-2, s-3) breaks, compared with the scan; `predicted_fp8`: the same for float8_e4m3fn, a
    format the text did not work. Taught in: notebooks/01_three_pass_softmax.ipynb"""
    rng, seed = _fresh(seed)
    with _fresh_names(rng) as fresh:
        own = lambda n: fresh.get(n, n)  # noqa: E731
        lim = lambda n: exp_limits(own(n))  # noqa: E731
        cases = [(n,) for n in ("fp16", "bf16", "fp32", "fp64", *fresh)]
        right = lambda n: _edges(own(n))  # noqa: E731
        # one mistake per element, each said for the element it is in
        mistakes = [
            (
                0,
                lambda n: math.log2(lim(n)["max"]),
                "that is log2 Ω; e^s needs the natural log, np.log",
            ),
            (
                0,
                lambda n: math.log10(lim(n)["max"]),
                "that is log10 Ω; e^s needs the natural log, np.log",
            ),
            (
                1,
                lambda n: lim(n)["log_max"],
                "that is where e^s alone overflows; the row's sum e^s(1 + e^-1 + e^-2 + e^-3) is larger "
                "than e^s, so it overflows first",
            ),
            (
                1,
                lambda n: lim(n)["log_max"] - math.log(4),
                "log 4 counts four terms of e^s each; the terms fall by a factor e each, so the sum is "
                "e^s(1 + e^-1 + e^-2 + e^-3)",
            ),
            (
                1,
                lambda n: 2 * lim(n)["log_max"] - right(n)[1],
                "the shift points the wrong way; a sum larger than e^s overflows at a smaller s, so "
                "subtract its log",
            ),
            (
                2,
                lambda n: lim(n)["log_smallest"],
                "that is the smallest subnormal, where e^s rounds to 0; precision is lost earlier, below "
                "the smallest normal (finfo's smallest_normal)",
            ),
            (
                2,
                lambda n: math.log(lim(n)["eps"]),
                "that is log ε, the spacing of numbers near 1; the question is the smallest normal number "
                "(finfo's smallest_normal)",
            ),
            (
                2,
                lambda n: math.log2(lim(n)["smallest_normal"]),
                "that is log2 of the smallest normal; e^s needs the natural log, np.log",
            ),
        ]
        together = [
            (
                lambda n: _edges("fp32"),
                "that is fp32's answer for every name: look each format up, lab.SOFTMAX_DTYPES[name]",
            ),
        ]
        defaults = (
            "e^s overflows past log Ω, the natural log of finfo's max",
            "the row's sum is e^s·(1 + e^-1 + e^-2 + e^-3): it passes Ω where s is log Ω minus the "
            "log of that factor",
            "e^s keeps full precision down to the smallest normal number: the natural log of finfo's "
            "smallest_normal",
        )
        guarded = _guarded(
            fn,
            "row_edges",
            {"not inexact": "numpy's finfo does not know bf16: ml_dtypes.finfo does"},
        )

        def named(n):
            try:
                return guarded(n)
            except KeyError:
                if n in fresh:
                    raise KeyError(
                        f"{n!r}: the check adds names like this one to lab.SOFTMAX_DTYPES for the run, so that no "
                        "table of answers passes; look the dtype up in lab.SOFTMAX_DTYPES[name]"
                    ) from None
                raise

        named.__name__, named.raw = "row_edges", getattr(guarded, "raw", fn)
        check(
            named,
            right,
            cases,
            names=("log Ω", "the row's edge", "log(smallest normal)"),
            rtol=1e-9,
            atol=1e-9,
            seed=seed,
            hint=_element_hint(
                ("log Ω", "the row's edge", "log(smallest normal)"),
                mistakes,
                defaults,
                whole=_hint(together, None, fn=named, cases=cases),
                fn=named,
                cases=cases,
            ),
            properties=[
                _own_work(
                    "exp_limits",
                    "overflow_table",
                    "first_exp_overflow",
                    "first_broken_score",
                    "break_points",
                    "softmax_naive",
                )
            ],
        )
    if predicted is not None:
        _say_row_prediction(predicted)
    if predicted_fp8 is not None:
        _say_fp8_prediction(predicted_fp8)


# The formats whose computed sum of n equal terms overflows where n·e^s does: summed in bf16, a long sum stalls
# (a term below half an ulp of the sum adds nothing), so its break moves with the summation order instead.
_ROW_FORMATS = ("fp16", "fp32", "fp64")


def _row_breaks(name: str, k: int) -> int:
    """Scanned: the smallest integer $s \\ge 0$ at which `lab.softmax_naive` of M equal scores s in format `name`
    stops being 1/M each (its sum overflowed: e^s / inf = 0, or inf / inf = NaN)."""
    dtype = SOFTMAX_DTYPES[name]

    def broken(s):
        p = softmax_naive(np.full(k, s, dtype=dtype)).astype(np.float64)
        return not (np.isfinite(p).all() and (p > 0).all())

    lo, hi = (
        -1,
        first_exp_overflow(name),
    )  # broken(hi); a break only grows more likely with s: bisect
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if broken(mid) else (mid, hi)
    return hi


def _row_case(rng, name: str) -> tuple:
    """(name, M) with M drawn from 2 to about 8000 and log(max) - log M at least 0.02 from an integer."""
    log_max = math.log(exp_limits(name)["max"])
    while True:
        k = int(math.exp(rng.uniform(math.log(2), 9.0)))
        t = log_max - math.log(k)
        if k >= 2 and abs(t - round(t)) > 0.02:
            return name, k


def _say_prediction(predicted, name: str = "fp16", k: int = 4096) -> None:
    """One line: the learner's predicted break of M equal scores in `name` against the scan."""
    scanned = _row_breaks(name, k)
    if predicted is None or predicted is Ellipsis:
        print(
            f"  your prediction ({name}, M = {k}): not written yet (predicted_4096, above the stub)"
        )
        return
    verdict = "✓" if predicted == scanned else f"✗ (off by {predicted - scanned:+d})"
    print(
        f"  your prediction ({name}, M = {k}): s = {predicted}; the scan: s = {scanned} {verdict}"
    )


def check_row_overflow(fn, *, seed: int | None = None, predicted=None) -> None:
    """Check `fn(name, M)`, the smallest integer $s \\ge 0$ at which the naive softmax of a row of M equal scores s
    breaks in format `name` (its sum $k e^s$ overflows), against a scan of `lab.softmax_naive`: fp16, fp32 and fp64,
    row lengths drawn afresh each run and two fresh names added to `lab.SOFTMAX_DTYPES` for the run (`seed` draws the
    same again). `predicted`: the learner's written prediction for fp16, M = 4096, compared with the scan on a line of
    its own. Taught in: notebooks/01_three_pass_softmax.ipynb"""
    _check_row_overflow(fn, seed)
    if predicted is not None:
        _say_prediction(predicted)


def _check_row_overflow(fn, seed) -> None:
    rng, seed = _fresh(seed)
    with _fresh_names(rng, among=_ROW_FORMATS) as fresh:
        own = lambda n: fresh.get(n, n)  # noqa: E731
        log_max = lambda n: math.log(exp_limits(own(n))["max"])  # noqa: E731
        # ("fp16", 100): log Ω - log M = 6.48, whose round() is below the break while the factor 1.553
        # kept beside M is not: the two slips differ on a fixed case, not only on a lucky draw
        cases = [("fp16", 1), ("fp16", 4096), ("fp32", 1000), ("fp64", 100_000)]
        cases += [("fp16", 100)]
        cases += [_row_case(rng, n) for n in _ROW_FORMATS]
        cases += [(a, _row_case(rng, n)[1]) for a, n in fresh.items()]
        mistakes = [
            (
                lambda n, k: first_exp_overflow(own(n)),
                "that is where e^s alone overflows: the sum of M equal terms is M·e^s, and it overflows first",
            ),
            (
                lambda n, k: math.floor(log_max(n) - math.log(k)),
                "M·e^s is still finite at yours: it is the last integer below log Ω - log M; the break is "
                "the next one",
            ),
            (
                lambda n, k: math.ceil(log_max(n) - math.log(k)) + 1,
                "one too many: yours is ceil(log Ω - log M) + 1, but ceil already gives the first integer "
                "above log Ω - log M (never an integer here); at your s - 1 the sum M·e^s is already past Ω",
            ),
            (
                lambda n, k: round(log_max(n) - math.log(k)),
                "round() gives the nearest integer, which is below log Ω - log M when its fraction is under "
                "a half: M·e^s is still finite there; take the first integer above it",
            ),
            (
                lambda n, k: math.floor(log_max(n) - math.log(1.553)) + 1,
                "that is the four-score row (s, s-1, s-2, s-3) of section 2: here the M terms are all equal, "
                "so the sum is M·e^s",
            ),
            (
                lambda n, k: math.floor(log_max(n) - math.log(k) - math.log(1.553)) + 1,
                "that keeps exercise 1's factor 1.553 beside M: that factor is the sum of the four-score "
                "row (s, s-1, s-2, s-3); here the M terms are all equal, so the sum is M·e^s exactly",
            ),
            (
                lambda n, k: math.floor(log_max(n) - math.log2(k)) + 1,
                "that subtracts log2(M): e^s needs the natural log",
            ),
            (
                lambda n, k: math.floor(log_max(n) - math.log10(k)) + 1,
                "that subtracts log10(M): e^s needs the natural log",
            ),
            (
                lambda n, k: max(0, math.floor(log_max(n) - k) + 1),
                "that subtracts M: a factor M in the sum is log M in the exponent",
            ),
            (
                lambda n, k: math.floor(log_max("fp32") - math.log(k)) + 1,
                "that is fp32's Ω for every format: look each one up, "
                "np.finfo(lab.SOFTMAX_DTYPES[name]).max",
            ),
        ]
        guarded = _guarded(
            fn,
            "row_overflow",
            {"not inexact": "numpy's finfo does not know bf16: ml_dtypes.finfo does"},
        )

        def named(n, k):
            try:
                return guarded(n, k)
            except KeyError:
                if n in fresh:
                    raise KeyError(
                        f"{n!r}: the check adds names like this one to lab.SOFTMAX_DTYPES for the run, so that no "
                        "table of answers passes; look the dtype up in lab.SOFTMAX_DTYPES[name]"
                    ) from None
                raise

        named.__name__, named.raw = "row_overflow", getattr(guarded, "raw", fn)
        check(
            named,
            lambda n, k: _row_breaks(own(n), k),
            cases,
            rtol=0,
            atol=0,
            seed=seed,
            hint=_consistent(
                mistakes,
                "the naive softmax breaks once its sum M·e^s exceeds Ω, the format's largest finite value",
                named,
                cases,
            ),
            properties=[
                _own_work(
                    "first_exp_overflow",
                    "exp_limits",
                    "overflow_table",
                    "first_broken_score",
                    "break_points",
                    "softmax_naive",
                )
            ],
        )


def _consistent(mistakes, default: str, fn, cases):
    """A hint that names a mistake only when it gives the learner's answer on every case (a table of answers that
    matches one slip on one case by chance gets `default`)."""

    def hint(case, got, want):
        if _hint([], default)(case, got, want) is None:
            return None
        for wrong, text in mistakes:
            try:
                with np.errstate(all="ignore"):
                    if all(fn(*c) == wrong(*c) for c in cases):
                        return text
            except Exception:
                continue
        return default

    return hint


def _shift(s, how: str = "row", masked: str = "zero"):
    """e^(s - shift), each row's l and the shift (row max, max of all, column max, min, none); masked rows shifted by 0 or not."""
    m = {
        "row": s.max(axis=-1, keepdims=True),
        "all": s.max(),
        "column": s.max(axis=0, keepdims=True),
        "min": s.min(axis=-1, keepdims=True),
        "none": np.zeros((s.shape[0], 1)),
    }[how]
    m = np.where(np.isneginf(m), 0.0, m) if masked == "zero" else m
    e = np.exp(s - m)
    return e, e.sum(axis=-1, keepdims=True), m


def _softmax(s, how="row", masked="zero"):
    e, l, _ = _shift(s, how, masked)
    return (
        np.divide(e, l, out=np.zeros_like(e), where=l > 0)
        if masked == "zero"
        else e / l
    )


def _lse(s, how="row", masked="zero", add_m=True):
    _, l, m = _shift(s, how, masked)
    with np.errstate(divide="ignore"):  # log 0 = -inf for a row of only -inf
        return ((m if add_m else 0.0) + np.log(l))[:, 0]


def _lse_with_inf(s):
    """`_lse`, with +inf for a row holding a +inf score (its Σ e^x is infinite)."""
    up = np.isposinf(s).any(axis=-1)
    with np.errstate(invalid="ignore"):
        out = _lse(np.where(up[:, None], 0.0, s))
    out[up] = np.inf
    return out


def _lse_minus_inf_guard_only(s):
    """The log-sum-exp whose shift guards a row of only -inf but not a +inf score: NaN on such a row."""
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        return m[:, 0] + np.log(np.exp(s - m).sum(axis=-1))


def _uniform_masked(s):
    """The softmax with each row of only -inf made uniform, 1/M (what -inf replaced by a large finite number gives)."""
    p = _softmax(s)
    p[np.isneginf(s).all(axis=-1)] = 1 / s.shape[-1]
    return p


def _no_hidden_nan(fn, case, got):
    """Property: `fn` runs without an invalid operation (0/0, -inf - (-inf)) whose NaN a later step hides."""
    try:
        with np.errstate(invalid="raise"):
            getattr(fn, "raw", fn)(*_copies(case))
    except FloatingPointError:
        return (
            "the values are right, but on the way it makes a NaN (0/0 or -inf - (-inf)) and then hides it: avoid the "
            "NaN instead of cleaning it up (shift a row of only -inf by 0; divide only where l > 0, "
            "np.divide(e, l, out=..., where=l > 0))"
        )
    return None


_MASKED = "a row of only -inf (fully masked): its max is -inf and -inf - (-inf) is NaN; it has nothing to {}: shift it by 0"
_GLOBAL = "you subtracted the max of the whole array: a row far below it underflows to 0/0; each row needs its own max"


def _fresh_scores(rng) -> list:
    """Fresh cases of each fixed kind: plain scores, scores in the thousands far apart by row, some -inf, a masked row."""
    N, M = (int(x) for x in rng.integers(2, 9, 2))
    far = 1000.0 * rng.standard_normal((N, M))
    far[: N // 2] -= 3000.0
    some = rng.standard_normal((N, M))
    some[rng.random((N, M)) < 0.3] = -inf
    some[int(rng.integers(N)), :] = -inf
    return [(rng.standard_normal((N, M)),), (far,), (some,)]


def _three_pass(
    x, block, *, shift="max", masked="zero", l_from="final", y_from="final"
):
    """The softmax of one row, with a choice of classic mistakes: no max (`shift="none"`), the first block's max
    (`shift="first"`), a masked row shifted by
    -inf (`masked="nan"`), l summed against the running max without a rescale (`l_from="running"`), each block's
    terms of l against that block's own max (`l_from="block"`), pass 3's outputs against each block's own max
    (`y_from="block"`)."""
    x = np.asarray(x, dtype=np.float64)
    if shift == "block":  # every block shifted by its own max, in l and in y
        with np.errstate(all="ignore"):
            tops = [float(x[j : j + block].max()) for j in range(0, len(x), block)]
            tops = [0.0 if t == -inf else t for t in tops]
            e = np.concatenate(
                [
                    np.exp(x[j : j + block] - t)
                    for j, t in zip(range(0, len(x), block), tops)
                ]
            )
            l = float(e.sum())
            return np.zeros_like(e) if l == 0 else e / l
    if shift == "none":
        m = 0.0
    elif shift == "first":
        m = float(x[:block].max())
        m = 0.0 if m == -inf and masked == "zero" else m
    else:
        m = float(x.max())
        m = 0.0 if m == -inf and masked == "zero" else m
    with np.errstate(all="ignore"):
        if l_from == "block":
            l = 0.0
            for j0 in range(0, len(x), block):
                top = float(x[j0 : j0 + block].max())
                l += float(
                    np.exp(x[j0 : j0 + block] - (0.0 if top == -inf else top)).sum()
                )
        elif l_from == "running":
            l, run = 0.0, -inf
            for j0 in range(0, len(x), block):
                run = max(run, float(x[j0 : j0 + block].max()))
                l += float(
                    np.exp(x[j0 : j0 + block] - (0.0 if run == -inf else run)).sum()
                )
        else:
            l = float(np.exp(x - m).sum())
        e = np.exp(x - m)
        if y_from == "block":
            for j0 in range(0, len(x), block):
                top = float(x[j0 : j0 + block].max())
                top = 0.0 if top == -inf else top
                e[j0 : j0 + block] = np.exp(x[j0 : j0 + block] - top)
        if masked == "zero" and l == 0:
            return np.zeros_like(e)
        return e / l


_THREE_MISTAKES = [
    (
        lambda x, b: _three_pass(x, b, shift="block"),
        "each block was shifted by its own max, in l and in y: terms shifted by different amounts "
        "are not comparable; pass 1 finds the row's max m, and every term is e^(x_j - m) with that m",
    ),
    (
        lambda x, b: _three_pass(x, b, shift="first"),
        "m is the max of the first block only: a later, larger score's e^(x - m) overflows; pass 1 reads "
        "every block before m is known",
    ),
    (
        lambda x, b: _three_pass(x, b, masked="nan"),
        _MASKED.format("weigh, so its probabilities are 0").replace(
            "shift it by 0", "shift it by 0, store zeros"
        ),
    ),
    (
        lambda x, b: _three_pass(x, b, shift="none"),
        "e^x overflowed (e^1000 = inf) or underflowed (e^-1000 = 0), giving inf/inf or 0/0: pass 1 finds the row's "
        "max m, and passes 2 and 3 use e^(x - m), every exponent <= 0",
    ),
    (
        lambda x, b: _three_pass(x, b, l_from="running"),
        "l was summed against the max found so far, which grew after some terms were added: pass 2 starts only "
        "once pass 1 has seen every score (notebook 02 repairs a growing max with a rescale)",
    ),
    (
        lambda x, b: _three_pass(x, b, y_from="block"),
        "m and l are right, but pass 3 shifted each block by its own max: y_j = e^(x_j - m) / l "
        "needs the same m that l was summed against, the row's max from pass 1, in every block",
    ),
    (
        lambda x, b: _three_pass(x, b, l_from="block"),
        "l added each block's terms against that block's own max: terms shifted by different amounts cannot "
        "be added; every term of l is e^(x_j - m) with the row's m from pass 1",
    ),
]

_FLOAT32 = (
    "yours agrees only to about float32's rounding (1e-7 relative), and the check compares with a float64 "
    "reference to {}: {} is float32 somewhere (np.float32, a float32 accumulator, or torch, whose tensors "
    "are float32 by default); keep {} as Python floats or float64"
)


def _three_pass_problem(x: CountingArray, y: CountingArray, block: int, row=None):
    """What the accesses of one run did wrong, and a hint: not three loads per score, a load of y, stores into x,
    not one store per output, loads not block by block. A `row` of only -inf may skip pass 3's loads: with
    l = 0 its zeros need no score."""
    per_pass = -(-len(x) // block)
    if x.stores.any():
        return "it writes into x; the scores are input only", None
    if y.loads.any():
        j = int(np.flatnonzero(y.loads)[0])
        return (
            f"it loads y (y[{j}] loaded {int(y.loads[j])}×): y is output only",
            "store each y_i once, in pass 3, computed from x: e^(x_i - m) / l",
        )
    if (y.stores != 1).any():
        j = int(np.flatnonzero(y.stores != 1)[0])
        return (
            f"y[{j}] was stored {int(y.stores[j])} times; each output is stored once",
            "pass 3 writes y[j0:j0 + block] = e^(x - m) / l, block by block, the last block too"
            if y.stores[j] == 0
            else "store e^(x - m) / l once, in pass 3, not e^(x - m) first and the quotient after",
        )
    loads = x.loads
    empty = row is not None and np.isneginf(np.asarray(row, dtype=float)).all()
    if empty and (loads == 2).all():
        loads = (
            loads + 1
        )  # pass 3 stored the zeros of l = 0 without loading the scores: as good
    if (loads != 3).any():
        j = int(np.flatnonzero(loads != 3)[0])
        times = f"{int(loads[j])} time" + ("" if loads[j] == 1 else "s")
        said = f"x[{j}] was loaded {times}; three passes load each score 3 times"
        if loads[j] == 2:
            return said, (
                "two passes are the naive softmax (no max) or notebook 02's online one; here build the three: "
                "pass 1 loads x for m, pass 2 for l, pass 3 for y"
            )
        if loads[j] < 2:
            return said, (
                "between passes keep only m and l: a copy of the row (or of its exponentials) is what a "
                "kernel whose row does not fit on chip cannot hold; load x again in each pass"
            )
        return (
            said,
            "one load per score per pass: m in pass 1, l in pass 2, y in pass 3",
        )
    if x.load_calls != 3 * per_pass and not (empty and x.load_calls == 2 * per_pass):
        return (
            f"x was read in {x.load_calls} loads; three passes in blocks of {block} take {3 * per_pass}",
            "load one block per step, x[j0:j0 + block], not score by score",
        )
    return None, None


_THREE_COURSE = (
    "softmax_safe",
    "softmax_naive",
    "softmax_online",
    "online_normalizer",
    "count_accesses",
)


def _report_raised(
    name: str, shown: str, exc: Exception, seed: int, usage: str
) -> None:
    """What a learner's function that raised gets told: not written yet, or the error, where, and how a
    counting array is used (`usage`) when the error looks like numpy called on one."""
    if isinstance(exc, NotImplementedError):
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return
    extra = f" ({usage})" if isinstance(exc, (AttributeError, TypeError)) else ""
    print(
        f"{name}: ✗ {shown} raised {type(exc).__name__}: {exc}{raised_at(exc)}{extra}"
    )
    print(seed_note(seed), end="")


def _drawn_rows(fresh) -> list:
    """Three rows drawn for this run, around 0, +1000 and -1000, a fifth of their scores -inf: `(x, block)`."""
    rows = []
    for level in (0.0, 1000.0, -1000.0):
        n = int(fresh.integers(5, 40))
        row = level + 3 * fresh.standard_normal(n)
        row[fresh.random(n) < 0.2] = -inf
        rows.append((row, int(fresh.integers(2, 9))))
    return rows


def _check_row_softmax(
    fn,
    cases,
    *,
    rng,
    seed,
    long_n: int,
    long_block: int,
    name: str,
    course,
    reference,
    mistakes,
    rule: str,
    nan_hint: str,
    accesses,
    held_hint: str,
    passed: str,
) -> None:
    """The shared body of the row-softmax checks: `fn(x, y, block)` against `reference(x, block)` on `cases`,
    then NaNs hidden on the way, then the loads and stores (`accesses(xs, ys, block)` -> (problem, hint)), then
    the bytes held on a row of `long_n` scores; one verdict printed."""
    name, access = _guarded(fn, name).__name__, None
    for i, (x, block) in enumerate(cases):
        shown = f"case {i} {describe_case((x, block))}"
        xs, ys = CountingArray(x), CountingArray(np.zeros(len(x)), "y")
        try:
            with (
                np.errstate(all="ignore"),
                _watching(course, numpy_only=True, forbid=(np.logaddexp,)) as called,
            ):
                _settled(fn(xs, ys, block))
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            _report_raised(
                name,
                shown,
                exc,
                seed,
                "x and y are counting arrays: use len(x), x[j0:j1] and y[j0:j1] = values, "
                "not numpy on x itself",
            )
            return
        if called:
            print(f"{name}: ✗ {shown}: {_refusal(called)}")
            return
        got, want = ys.peek(), reference(x, block)
        problem = diagnose(got, want, rtol=1e-9, atol=1e-12)
        hint = _hint(
            mistakes,
            rule,
            close=(_FLOAT32.format("1e-9", "your l (or y)", "m and l"), 1e-5),
        )((x, block), got, want)
        unstored = np.flatnonzero(ys.stores == 0)
        if problem is not None and unstored.size == len(x):
            problem, hint = (
                "y was never stored into",
                "write y[j0:j0 + block] = ...; the function returns nothing",
            )
        elif problem is not None and unstored.size:
            problem = (
                f"y[{int(unstored[0])}] was never stored ({unstored.size} of {len(x)}); "
                + problem
            )
            hint = "the last, shorter block was left out: range(0, len(x), block) reaches it"
        if problem is not None:
            print(
                f"{name}: ✗ {shown}: {problem}" + (f"\n  hint: {hint}" if hint else "")
            )
            print(seed_note(seed), end="")
            return
        try:
            with np.errstate(invalid="raise"):
                fn(CountingArray(x), CountingArray(np.zeros(len(x)), "y"), block)
        except FloatingPointError:
            print(
                f"{name}: ✗ {shown}: the values are right, but on the way it makes a NaN "
                f"(-inf - (-inf) or 0/0) and then hides it\n  hint: {nan_hint}"
            )
            print(seed_note(seed), end="")
            return
        # the accesses are reported once the values are right everywhere: a wrong formula says more
        if access is None:
            said, why = accesses(xs, ys, block, x)
            if said is not None:
                access = f"{name}: ✗ {shown}: {said}" + (
                    f"\n  hint: {why}" if why else ""
                )
    if access is not None:
        print(access)
        print(seed_note(seed), end="")
        return
    x = rng.standard_normal(long_n)
    fn(
        CountingArray(x), CountingArray(np.zeros(long_n), "y"), long_block
    )  # once unmeasured: a first call's set-up
    held, _ = peak_bytes(
        fn, CountingArray(x), CountingArray(np.zeros(long_n), "y"), long_block
    )
    if held > x.nbytes // 4:
        print(
            f"{name}: ✗ on a row of {long_n} scores in blocks of {long_block}, it held {held:,} bytes "
            f"at once; the row itself is {x.nbytes:,} bytes and one block {long_block * 8} bytes\n"
            f"  hint: {held_hint}"
        )
        return
    print(f"{name}: ✓ passed {len(cases)} cases; {passed}; no row held")


def check_safe_softmax(
    fn, *, long_n: int = 20_000, long_block: int = 50, seed: int | None = None
) -> None:
    """Check `fn(x, y, block)`, the safe softmax of one row in three passes: $m = \\max_j x_j$, then
    $l = \\sum_j e^{x_j - m}$, then $y_i = e^{x_i - m} / l$ stored into y.

    `x` and `y` are `lab.CountingArray`s. Beyond the values (scores of ±1000, -inf entries, a row of only -inf, which
    gives zeros): each score loaded exactly 3 times, `block` at a time; each y_i stored once and y never loaded; x never
    written; less than a quarter of the row's bytes held on a row of `long_n` scores (tracemalloc); none of lab's
    softmaxes, no other array library. Fixed cases and three drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/01_three_pass_softmax.ipynb"""
    rng = np.random.default_rng(2)
    fresh, seed = _fresh(seed)
    cases = [
        (rng.standard_normal(10), 4),
        (np.array([1000.0, 999.0, -1000.0, 998.0]), 2),
        (np.array([-1000.0, -1001.0, -1002.0, -1003.0, -1004.0]), 3),
        (np.array([-inf, 0.0, 2.0, -inf, 3.0, 1.0]), 4),
        (np.full(5, -inf), 2),
        (np.r_[rng.standard_normal(6), 800.0 + rng.standard_normal(6)], 3),
        (300 * rng.standard_normal(40), 7),
        (rng.standard_normal(3), 100),
    ]
    _check_row_softmax(
        fn,
        cases + _drawn_rows(fresh),
        rng=rng,
        seed=seed,
        long_n=long_n,
        long_block=long_block,
        name="safe_softmax",
        course=_THREE_COURSE,
        reference=_three_pass,
        mistakes=_THREE_MISTAKES,
        rule="three passes: m = the row's max, then l = the sum of e^(x - m), then y = e^(x - m) / l",
        nan_hint="avoid the NaN instead: shift a row of only -inf by 0, and store zeros where l = 0",
        accesses=lambda xs, ys, block, x: _three_pass_problem(xs, ys, block, x),
        held_hint="keep only m and l between passes: no copy of the row, no list of its exponentials",
        passed="each score loaded 3 times, each y_i stored once",
    )


def check_log_sum_exp(fn, *, seed: int | None = None) -> None:
    """Check `fn(x)`, $\\log \\sum_j e^{x_{ij}}$ for each row of an (N, M) array, shape (N,): finite at ±1e4, -inf for a masked row,
    +inf for a row holding a +inf score;
    fixed cases and fresh ones each run (`seed` draws the same again); numpy only.
    Taught in: notebooks/01_three_pass_softmax.ipynb"""
    rng = np.random.default_rng(3)
    fresh, seed = _fresh(seed)
    cases = [
        (np.array([[0.0, 0.0], [1.0, 2.0], [-3.0, 5.0]]),),
        (np.array([[1e4, 1e4 - 1, -1e4], [-1e4, -1e4, -1e4 - 1]]),),
        (np.array([[-inf, -inf], [0.0, -inf]]),),
        (50 * rng.standard_normal((3, 100)),),
        (
            np.array([[1.0, 2.0], [inf, 0.0], [-inf, -inf]]),
        ),  # a case the text did not work
    ] + [(10 * c[0],) for c in _fresh_scores(fresh)]
    mistakes = [
        (
            _lse_minus_inf_guard_only,
            "a row with a +∞ score: m = +∞ and x - m = ∞ - ∞ = NaN; Σ e^x is infinite, so its lse is "
            "+∞: shift that row by 0 too (np.isinf(m), not only np.isneginf(m))",
        ),
        (
            lambda s: _lse(s, masked="nan"),
            _MASKED.format("sum, and its log-sum-exp is log 0 = -inf"),
        ),
        (
            lambda s: _lse(s, "none", "nan"),
            "e^x overflowed to inf (or every term underflowed to 0, and log 0 = -inf): take "
            "each row's max out first, as in your safe_softmax",
        ),
        (
            lambda s: _lse(s, add_m=False),
            "that is log l alone: l was summed relative to m, so add m back",
        ),
        (
            lambda s: _lse(s, "all"),
            "you subtracted the max of the whole array: each row needs its own",
        ),
        (
            lambda s: _lse(s.T),
            "that is one number per column: the max and the sum ran down axis 0; each row's M scores "
            "lie along axis -1, so take both with axis=-1 (the answer has shape (N,))",
        ),
        (
            lambda s: _lse(s)[:, None],
            "one number per row: shape (N,), not (N, 1) (drop keepdims at the end)",
        ),
    ]
    guarded = _guarded(
        fn,
        "log_sum_exp",
        {
            "broadcast": "keep the row axis while subtracting: s.max(axis=-1, keepdims=True)"
        },
    )
    check(
        guarded,
        _lse_with_inf,
        cases,
        rtol=1e-12,
        atol=1e-12,
        seed=seed,
        hint=_hint(
            mistakes,
            "log Σ e^x = m + log Σ e^(x - m) for any shift m: pick the one that cannot overflow",
            close=(_FLOAT32.format("1e-12", "a step", "the arithmetic"), 1e-5),
            fn=guarded,
            cases=cases,
        ),
        properties=[
            _own_work(
                "online_normalizer",
                "softmax_safe",
                "attention_reference",
                numpy_only=True,
                forbid=(np.logaddexp,),
            )
        ],
    )


# ------------------------------------------------------------------------------------ 02 online softmax


def _step(
    m,
    l,
    x_b,
    *,
    alpha=True,
    sign=1,
    terms="new",
    keep_m=True,
    skip_empty=True,
    alpha_new=False,
    m_out="new",
    alpha_to="new",
):
    """One online step (m, l) -> (m_new, l_new), with a choice of classic mistakes: `terms` the new terms
    against the new max, the old m ("old"), the block's own max ("block") or no max at all ("none"), or
    against the block's own max and then moved to the new max ("paper": right, but NaN for a block of only
    -inf after a finite m, which has no max of its own to subtract);
    `alpha_new` the factor on the new terms too; `m_out="block"` the block's max returned as m;
    `alpha_to="block"` the old l rescaled to the block's max instead of the new running max."""
    top = float(np.max(x_b))
    m_new = max(m, top) if keep_m else top
    if skip_empty and m_new == -inf:
        return m, l
    if terms == "none":  # no max anywhere: l is the sum of e^x itself
        return m_new, l + float(np.exp(x_b).sum())
    to = top if alpha_to == "block" else m_new
    a = float(np.exp(sign * (m - to))) if alpha else 1.0
    against = {"new": m_new, "old": m, "block": top, "paper": top}[terms]
    new = float(np.exp(x_b - against).sum())
    if terms == "paper":  # the block's sum against its own max, then moved to m_new
        new *= float(np.exp(top - m_new))
    l_new = a * (l + new) if alpha_new else a * l + new
    return (top if m_out == "block" else m_new), l_new


_STEP_MISTAKES = [  # (keyword arguments of _step, what went wrong)
    (
        {"skip_empty": False},
        "a block of only -inf seen from the empty state: m_new is -inf and e^(-inf - (-inf)) is NaN; "
        "such a block adds nothing, so keep (m, l)",
    ),
    (
        {"alpha": False},
        "the old l was not rescaled: it is a sum relative to the old m; when m grows, each old term "
        "e^(x - m) must become e^(x - m_new)",
    ),
    (
        {"sign": -1},
        "the rescaling points the wrong way: moving the old sum to a larger m must shrink it (a factor <= 1)",
    ),
    (
        {"terms": "old"},
        "the new terms are relative to the old m: l must be a sum of e^(x - m) for the new m",
    ),
    (
        {"keep_m": False},
        "m is the max of this block only: it must be the max of every score seen, the old m included",
    ),
    (
        {"keep_m": False, "alpha": False},
        "m is this block's max, and the old l was kept as it was: the state's m is the max of "
        "every score seen (max(m, the block's max)), and the old l must be rescaled to it",
    ),
    (
        {"alpha_to": "block"},
        "the old l was rescaled by e^(m - the block's max), not e^(m - m_new): when the block's "
        "max is below m that factor is above 1; rescale to the running max m_new",
    ),
    (
        {"terms": "paper"},
        "your form is right: the block's sum against its own max m_b, moved to the new max by "
        "e^(m_b - m_new). Only the guard is missing: a block of only -inf has m_b = -inf, and "
        "e^(-inf - (-inf)) is NaN; such a block adds nothing, so keep (m, l)",
    ),
    (
        {"terms": "block"},
        "the block's terms are relative to the block's own max: every term of l must be "
        "e^(x - m) for one m, the max of everything seen",
    ),
    (
        {"alpha_new": True},
        "the block's terms were multiplied by the factor too: they are already taken "
        "against the new max; only the old sum needs converting",
    ),
    (
        {"m_out": "block"},
        "l is right, but the m returned is the block's max: the state's m is the max of "
        "every score seen, the one l is measured against",
    ),
    (
        {"terms": "none"},
        "no max was subtracted: l summed e^x itself, which overflows near +1000 and is 0 "
        "near -1000; the state's l is a sum of e^(x - m) against its own m",
    ),
]


def check_online_step(fn, *, seed: int | None = None) -> None:
    """Check `fn(m, l, x_block)`: the state $(m, l = \\sum e^{x_j - m})$ of the scores seen, with `x_block` added; cases from the
    empty state $(-\\infty, 0)$ and with blocks of only -inf, fixed and drawn afresh each run (`seed` draws the same
    again). Taught in: notebooks/02_online_softmax.ipynb"""
    rng = np.random.default_rng(4)
    fresh, seed = _fresh(seed)
    cases = [
        (-inf, 0.0, np.array([1.0, 2.0])),
        (3.0, 2.5, np.array([1.0, 0.0])),
        (0.0, 1.0, np.array([5.0, 4.0, 6.0])),
        (-inf, 0.0, np.array([-inf, -inf])),
        (2.0, 1.7, np.array([-inf, -inf])),
        (-inf, 0.0, np.array([-1000.0, -1001.0])),
        (10.0, 4.0, 20 * rng.standard_normal(9)),
    ]
    for level in (
        0.0,
        300.0,
        -300.0,
    ):  # a block above the state's m, below it, and far below
        m = float(fresh.normal(0.0, 5.0))
        x = level + m + 5 * fresh.standard_normal(int(fresh.integers(1, 9)))
        cases.append((m, float(1.0 + 9 * fresh.random()), x))
    cases.append((-inf, 0.0, 5 * fresh.standard_normal(int(fresh.integers(1, 9)))))
    guarded = _guarded(fn, "online_step")
    check(
        guarded,
        _step,
        cases,
        names=("m", "l"),
        rtol=1e-12,
        atol=1e-12,
        seed=seed,
        hint=_hint(
            [
                (lambda m, l, x, kw=kw: _step(m, l, x, **kw), t)
                for kw, t in _STEP_MISTAKES
            ],
            "(m, l) must describe every score seen: m their max, l the sum of e^(x - m) over them",
            close=(_FLOAT32.format("1e-12", "your state", "m and l"), 1e-5),
            fn=guarded,
            cases=cases,
        ),
        properties=[
            _own_work(
                "merge_states",
                "partial_state",
                "online_normalizer",
                "online_trace",
                numpy_only=True,
                forbid=(np.logaddexp,),
            )
        ],
    )


def _pass(x, block, *, m0=-inf, tail=True, overlap=0, **step):
    """The online pass over a plain array, with a choice of classic mistakes (the start, the last block,
    blocks that overlap by `overlap` scores, the step's)."""
    m, l = m0, 0.0
    for j0 in range(0, len(x) if tail else len(x) // block * block, block):
        m, l = _step(m, l, x[j0 : j0 + block + overlap], **step)
    return m, l


_PASS_MISTAKES = [
    (
        lambda x, b: _pass(x, b, m0=0.0),
        "m started at 0: scores all below 0 never raise it, so m stays 0 and "
        "l sums e^(x - 0); the state of no scores is m = -inf, l = 0",
    ),
    (
        lambda x, b: _pass(x, b, tail=False),
        "the last, shorter block was left out: range(0, len(x), block) reaches it",
    ),
]
_PASS_MISTAKES += [
    (
        lambda x, b: _pass(x, b, overlap=1),
        "the blocks overlap: x[j0:j0 + block + 1] also takes the next block's first score, "
        "so it is counted twice in l; block j0 is x[j0:j0 + block]",
    ),
]
_PASS_MISTAKES += [
    (lambda x, b, kw=kw: _pass(x, b, **kw), text) for kw, text in _STEP_MISTAKES
]


def _read_problem(row: CountingArray):
    """What the reads of one run did wrong, and a hint: a score read twice or never, a store into x."""
    twice, never = np.flatnonzero(row.loads > 1), np.flatnonzero(row.loads == 0)
    if twice.size:
        j = int(twice[0])
        return (
            f"x[{j}] was read {int(row.loads[j])} times ({twice.size} of {len(row)} scores read more than once); one pass "
            "reads each score once",
            "keep (m, l) up to date block by block instead of finding m first and summing after",
        )
    if never.size:
        return (
            f"x[{int(never[0])}] was never read ({never.size} of {len(row)} scores)",
            None,
        )
    return (
        ("it writes into x; the row is input only", None)
        if row.stores.any()
        else (None, None)
    )


_PASS_COURSE = (
    "online_normalizer",
    "softmax_online",
    "softmax_safe",
    "online_trace",
    "merge_states",
    "partial_state",
)


def check_online_pass(
    fn, *, long_n: int = 20_000, long_block: int = 50, seed: int | None = None
) -> None:
    """Check `fn(x, block)` -> (m, l) of a row, $m = \\max_j x_j$, $l = \\sum_j e^{x_j - m}$, read once in blocks.

    `x` is a `lab.CountingArray` (len, x[j], x[j0:j1]). Beyond the values: every score is loaded exactly once, nothing is
    written into x, on a row of `long_n` scores the function holds less than a quarter of the row's bytes (tracemalloc),
    and it loads `block` scores at a time: ⌈len(x) / block⌉ loads per row, not one per score; it calls none of lab's
    online passes (on a block or the row) and no other array library. Fixed cases and three drawn afresh each run
    (`seed` draws the same again). Taught in: notebooks/02_online_softmax.ipynb
    """
    rng = np.random.default_rng(5)
    fresh, seed = _fresh(seed)
    z = demo_scores(24)
    cases = [
        (rng.standard_normal(10), 4),
        (z, 6),
        (-1000.0 + z[:16], 5),
        (np.r_[np.full(3, -inf), rng.standard_normal(7)], 3),
        (np.r_[rng.standard_normal(4), np.full(4, -inf), z[:3]], 4),
        (np.full(5, -inf), 2),
        (1000.0 * rng.standard_normal(7), 100),
        (rng.standard_normal(1), 3),
    ]
    for level in (0.0, 1000.0, -1000.0):
        n = int(fresh.integers(5, 40))
        cases.append((level + 3 * fresh.standard_normal(n), int(fresh.integers(2, 9))))
    name, piecewise = _guarded(fn, "online_pass").__name__, None
    for i, (x, block) in enumerate(cases):
        shown, row = f"case {i} {describe_case((x, block))}", CountingArray(x)
        try:
            with _watching(_PASS_COURSE, numpy_only=True) as called:
                got = _settled(fn(row, block))
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            _report_raised(
                name,
                shown,
                exc,
                seed,
                "x is a counting array: use len(x), x[j] and x[j0:j1], not x.shape or numpy on x itself",
            )
            return
        if called:
            print(f"{name}: ✗ {shown}: {_refusal(called)}")
            return
        want = _pass(x, block)
        problem = diagnose(got, want, names=("m", "l"), rtol=1e-10, atol=1e-12)
        hint = _hint(
            _PASS_MISTAKES,
            "after each block, m must be the max of the scores read so far and l the sum of "
            "e^(x - m) over them",
            close=(_FLOAT32.format("1e-10", "your state", "m and l"), 1e-5),
        )((x, block), got, want)
        if problem is None:
            problem, hint = _read_problem(row)
        if problem is not None:
            print(
                f"{name}: ✗ {shown}: {problem}" + (f"\n  hint: {hint}" if hint else "")
            )
            print(seed_note(seed), end="")
            return
        if piecewise is None and row.load_calls != -(
            -len(x) // block
        ):  # reported after the memory test, which says more
            piecewise = (
                f"{name}: ✗ {shown}: x was read in {row.load_calls} loads; {block} scores at a time, it takes "
                f"{-(-len(x) // block)}\n  hint: load one block per step, x[j0:j0 + block], not score by score"
            )
    x = rng.standard_normal(long_n)
    fn(
        CountingArray(x), long_block
    )  # once unmeasured: what a first call sets up (imports, caches) is not the pass's
    held, _ = peak_bytes(fn, CountingArray(x), long_block)
    if held > x.nbytes // 4:
        print(
            f"{name}: ✗ on a row of {long_n} scores in blocks of {long_block}, it held {held:,} bytes at once; the row "
            f"itself is {x.nbytes:,} bytes and one block {long_block * 8} bytes\n"
            "  hint: load `block` scores at a time, x[j0:j0 + block], and keep only (m, l) between "
            "blocks: no list or array of all the scores or of their exponentials"
        )
        return
    if piecewise is not None:
        print(piecewise)
        return
    print(
        f"{name}: ✓ passed {len(cases)} cases; each score read once; no row-sized array held"
    )


def _two_pass(x, block, *, divide="l", **mistake):
    """The two-pass online softmax of one row, y = e^(x - m) / l with (m, l) from the online pass, and a
    choice of classic mistakes (the pass's, a masked row left as NaN, y against each block's own max)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        m, l = _pass(x, block, **mistake)
        if divide == "nan":  # a row of only -inf: e^(-inf - (-inf)) / 0
            return np.exp(x - m) / l
        if l == 0:
            return np.zeros_like(x)
        if divide == "block":  # pass 2 against each block's own max
            y = np.empty_like(x)
            for j0 in range(0, len(x), block):
                b = x[j0 : j0 + block]
                y[j0 : j0 + block] = np.exp(b - b.max()) / l
            return y
        return np.exp(x - m) / l


_TWO_MISTAKES = [
    (
        lambda x, b: _two_pass(x, b, divide="nan"),
        "a row of only -inf: its state stays (-inf, 0) and e^(-inf - (-inf)) / 0 is NaN; "
        "it has nothing to weigh, so store zeros where l = 0",
    ),
    (
        lambda x, b: _two_pass(x, b, divide="block"),
        "pass 2 used each block's own max: every y_j is e^(x_j - m) / l with the row's m, "
        "the one pass 1 ends with",
    ),
]
_TWO_MISTAKES += [
    (lambda x, b, w=w: _y_of(w(x, b), x), text) for w, text in _PASS_MISTAKES
]


def _y_of(state, x):
    """y = e^(x - m) / l for a state (m, l) of the row `x`; zeros unless l > 0 (as a guarded pass 2 gives,
    a NaN l included)."""
    m, l = state
    with np.errstate(all="ignore"):
        return np.exp(np.asarray(x) - m) / l if l > 0 else np.zeros(len(x))


def _two_pass_problem(x: CountingArray, y: CountingArray, block: int):
    """What the accesses of one run did wrong, and a hint: not two loads per score, a load of y, stores into
    x, not one store per output, loads not `block` at a time."""
    per_pass = -(-len(x) // block)
    if x.stores.any():
        return "it writes into x; the scores are input only", None
    if y.loads.any():
        j = int(np.flatnonzero(y.loads)[0])
        return (
            f"it loads y (y[{j}] loaded {int(y.loads[j])}×): y is output only",
            "store each y_j once, in pass 2, computed from x and the final (m, l)",
        )
    if (y.stores != 1).any():
        j = int(np.flatnonzero(y.stores != 1)[0])
        return (
            f"y[{j}] was stored {int(y.stores[j])} times; each output is stored once",
            "pass 2 writes y[j0:j0 + block] once per block, the last block too",
        )
    if x.load_calls < per_pass:
        return (
            f"x was read in {x.load_calls} load"
            + ("" if x.load_calls == 1 else "s")
            + f"; in blocks of {block} one pass alone takes {per_pass}",
            "load `block` scores at a time, x[j0:j0 + block], not the whole row at once: "
            "a row too long for the chip arrives block by block",
        )
    if (x.loads != 2).any():
        j = int(np.flatnonzero(x.loads != 2)[0])
        times = f"{int(x.loads[j])} time" + ("" if x.loads[j] == 1 else "s")
        said = f"x[{j}] was loaded {times}; the two-pass online softmax loads each score twice"
        if x.loads[j] > 2:
            return said, (
                "pass 1 finds m and l together, block by block (your online_step); "
                "pass 2 loads each block once more to write y"
            )
        return said, (
            "between the passes keep only (m, l), not the row or its exponentials: "
            "load x again in pass 2"
        )
    if x.load_calls != 2 * per_pass:
        return (
            f"x was read in {x.load_calls} loads; two passes in blocks of {block} take "
            f"{2 * per_pass}",
            "load `block` scores at a time, x[j0:j0 + block]: not the whole row at once, "
            "not score by score",
        )
    return None, None


def check_online_softmax(
    fn, *, long_n: int = 20_000, long_block: int = 50, seed: int | None = None
) -> None:
    """Check `fn(x, y, block)`, the two-pass online softmax of one row: pass 1 the state $(m, l)$ block by
    block, pass 2 $y_j = e^{x_j - m} / l$ stored into y.

    `x` and `y` are `lab.CountingArray`s. Beyond the values (scores of ±1000, -inf entries, a row of only
    -inf, which gives zeros): each score loaded exactly twice, `block` at a time; each y_j stored once and y
    never loaded; x never written; less than a quarter of the row's bytes held on a row of `long_n` scores
    (tracemalloc); none of lab's softmaxes, no other array library. Fixed cases and three drawn afresh each
    run (`seed` draws the same again). Taught in: notebooks/02_online_softmax.ipynb"""
    rng = np.random.default_rng(7)
    fresh, seed = _fresh(seed)
    z = demo_scores(24)
    cases = [
        (rng.standard_normal(10), 4),
        (z, 6),
        (-1000.0 + z[:16], 5),
        (np.r_[np.full(3, -inf), rng.standard_normal(7)], 3),
        (np.full(5, -inf), 2),
        (np.r_[rng.standard_normal(6), 800.0 + rng.standard_normal(6)], 3),
        (1000.0 * rng.standard_normal(7), 100),
        (rng.standard_normal(1), 3),
    ]
    _check_row_softmax(
        fn,
        cases + _drawn_rows(fresh),
        rng=rng,
        seed=seed,
        long_n=long_n,
        long_block=long_block,
        name="online_softmax",
        course=_THREE_COURSE + _PASS_COURSE,
        reference=_two_pass,
        mistakes=_TWO_MISTAKES,
        rule="pass 1: after each block m is the max of the scores read so far and l the sum "
        "of e^(x - m) over them; pass 2: y = e^(x - m) / l with the final (m, l)",
        nan_hint="avoid the NaN instead: a block of only -inf leaves (m, l) as it is, and y is 0 "
        "where l = 0",
        # a row of only -inf may skip pass 2's loads
        accesses=lambda xs, ys, block, x: (
            (None, None) if np.isneginf(x).all() else _two_pass_problem(xs, ys, block)
        ),
        held_hint="keep only (m, l) between the passes, no copy of the row and no list of its "
        "exponentials; load `block` scores at a time, x[j0:j0 + block], in each pass",
        passed="each score loaded twice, each output stored once",
    )


def check_merge_ml(fn, *, seed: int | None = None) -> None:
    """Check `fn(m_left, l_left, m_right, l_right)` -> the state of a whole row from its halves' states, against the row's own online pass;
    cases with halves of only -inf, fixed and drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/02_online_softmax.ipynb"""
    rng = np.random.default_rng(6)
    fresh, seed = _fresh(seed)
    rows = [
        rng.standard_normal(10),
        np.r_[rng.standard_normal(5), 3 + rng.standard_normal(6)],
        100 * rng.standard_normal(7),
        -1000 + rng.standard_normal(12),
        np.r_[rng.standard_normal(4), np.full(4, -inf)],
        np.full(6, -inf),
    ]
    # halves alike, right far above left, far below, and too far apart for e^(m_right - m_left) to exist
    for gap in (0.0, 50.0, -50.0, 800.0, -800.0):
        na, nb = (int(n) for n in fresh.integers(1, 9, 2))
        rows.append(np.r_[fresh.standard_normal(na), gap + fresh.standard_normal(nb)])
    table = {}
    for r in rows:
        (m_left, l_left), (m_right, l_right) = (
            online_normalizer(r[: len(r) // 2], 3),
            online_normalizer(r[len(r) // 2 :], 3),
        )
        table[(float(m_left), float(l_left), float(m_right), float(l_right))] = r
    cases = list(table)

    def merged(
        m_left, l_left, m_right, l_right, left=True, right=True, sign=1, skip=True
    ):
        m = max(m_left, m_right)
        if skip and m == -inf:
            return m, 0.0
        return m, float(
            (np.exp(sign * (m_left - m)) if left else 1) * l_left
            + (np.exp(sign * (m_right - m)) if right else 1) * l_right
        )

    mistakes = [
        (
            lambda *c: merged(*c, skip=False),
            "two halves of only -inf: e^(-inf - (-inf)) is NaN; the merge of nothing is (-inf, 0)",
        ),
        (
            lambda *c: merged(*c, left=False),
            "l_left was added as it is, but here m_left < m: l_left is a sum relative to m_left; "
            "bring it to m",
        ),
        (
            lambda *c: merged(*c, right=False),
            "l_right was added as it is, but here m_right < m: l_right is a sum relative to m_right; "
            "bring it to m",
        ),
        (
            lambda *c: merged(*c, sign=-1),
            "the rescaling points the wrong way: moving a sum to a larger m must shrink it",
        ),
        (
            lambda m_left, l_left, m_right, l_right: merged(
                m_left, l_left, m_right, 1.0
            ),
            "the right half counted as one score m_right: it stands for l_right of them",
        ),
        (_via_left, _VIA_LEFT),
    ]
    guarded = _guarded(fn, "merge_ml")
    value_hint = _hint(
        mistakes,
        "the merged state must describe both halves: m the max of all, l the sum of e^(x - m) over all",
        close=(_FLOAT32.format("1e-10", "your merge", "m and l"), 1e-5),
        fn=guarded,
        cases=cases,
    )

    def hint(case, got, want):  # a broken law has its words in the problem itself
        return value_hint(case, got, want) if _state_differs(got, want) else None

    check(
        guarded,
        lambda *c: tuple(float(v) for v in online_normalizer(table[c], 5)),
        cases,
        names=("m", "l"),
        rtol=1e-10,
        atol=1e-12,
        seed=seed,
        hint=hint,
        properties=[
            _own_work(
                "merge_states",
                "online_normalizer",
                numpy_only=True,
                forbid=(np.logaddexp,),
            ),
            _merge_laws(mistakes),
        ],
    )


_VIA_LEFT = (
    "l_right was brought to m_left first, then the total to m: e^(m_right - m_left) overflows "
    "when m_right is far above m_left, or m_left is -inf (inf · 0 = NaN); bring each sum straight "
    "to the common m"
)


def _via_left(m_left, l_left, m_right, l_right):
    """The merge that converts l_right to m_left first, then the total to m (overflows far apart)."""
    m = max(m_left, m_right)
    if m == -inf:
        return m, 0.0
    with np.errstate(all="ignore"):
        return m, float(
            (l_left + np.exp(m_right - m_left) * l_right) * np.exp(m_left - m)
        )


def _state_differs(got, want) -> bool:
    """`got` is not the state `want` to the merge check's tolerance."""
    try:
        return not all(
            np.allclose(float(g), float(w), rtol=1e-10, atol=1e-12, equal_nan=True)
            for g, w in zip(got, want, strict=True)
        )
    except (TypeError, ValueError):
        return True


def _merge_laws(mistakes):
    """The property `_laws` of a merge, naming the value mistake a swapped merge makes (`mistakes`)."""
    return lambda fn, case, got: _laws(fn, case, got, mistakes)


class _NotAState(Exception):
    """A merge called by the laws' cases returned something other than (m, l), or raised."""


def _laws(fn, case, got, mistakes):
    """`_merge_laws_of`, with a merge that returns no (m, l) or raises in one of the laws' calls named."""
    try:
        return _merge_laws_of(fn, case, got, mistakes)
    except _NotAState as exc:
        return str(exc)


def _merge_laws_of(fn, case, got, mistakes):
    """Property of a merge: the laws that let any number of workers merge in any order. (-inf, 0) changes
    nothing, on either side (exactly); the order of the two states does not matter (exactly: + commutes);
    the grouping of three does not matter (to rounding)."""
    raw = getattr(fn, "raw", fn)

    def run(*args):
        shown = ", ".join(f"{a:.6g}" for a in args)
        try:
            out = raw(*args)
        except Exception as exc:  # a learner's bug: name the call
            raise _NotAState(
                f"merge({shown}) raised {type(exc).__name__}: {exc}; the laws' cases merge a state "
                "with the empty state (-inf, 0), the two states swapped, and three states"
            ) from None
        try:
            m, l = (float(v) for v in out)
        except (TypeError, ValueError):
            raise _NotAState(
                f"merge({shown}) returned {out!r}: return (m, l), two numbers, from every branch "
                "(here the laws' cases: a state with the empty state (-inf, 0), the states swapped, "
                "three states)"
            ) from None
        return m, l

    m_left, l_left, m_right, l_right = case
    left, right = (m_left, l_left), (m_right, l_right)
    top = max(m_left, m_right)
    third = (top + 0.5, 2.0) if top > -inf else (0.0, 1.0)  # a third worker's state
    with np.errstate(all="ignore"):
        for first, second in ((left, (-inf, 0.0)), ((-inf, 0.0), left)):
            out = tuple(float(v) for v in run(*first, *second))
            if out != (float(m_left), float(l_left)) and not (
                np.isnan(out[1]) and np.isnan(l_left)
            ):
                said = (
                    f"merged with the empty state (-inf, 0), ({m_left:.17g}, {l_left:.17g}) came "
                    f"back as ({out[0]:.17g}, {out[1]:.17g}): a worker that saw no score must "
                    "change nothing, so the merge must give the other state back exactly"
                )
                if np.isnan(out[1]) and _same(out, _via_left(*first, *second)):
                    said += "\n  hint: " + _VIA_LEFT
                return said
        swapped = tuple(float(v) for v in run(*right, *left))
        if _state_differs(swapped, got):  # wrong in one order: a value mistake
            said = (
                f"merge(left, right) is correct, but with the two states swapped "
                f"merge(right, left) = ({swapped[0]:.6g}, {swapped[1]:.6g}), not "
                f"({float(got[0]):.6g}, {float(got[1]):.6g}): the merge must not assume "
                "which state holds the max"
            )
            why = next(
                (t for w, t in mistakes if _same(swapped, w(*right, *left))), None
            )
            return said + (f"\n  hint: {why}" if why else "")
        if swapped != tuple(float(v) for v in got):
            return (
                f"merge(right, left) = ({swapped[0]:.17g}, {swapped[1]:.17g}) but "
                f"merge(left, right) = ({float(got[0]):.17g}, {float(got[1]):.17g}): which "
                "worker reports first must not matter; treat the two states alike (the same "
                "formula for each)"
            )
        grouped_first = run(*run(*left, *right), *third)
        grouped_last = run(*left, *run(*right, *third))
    if _state_differs(grouped_first, grouped_last):
        return (
            f"three workers grouped as merge(merge(left, right), third) give "
            f"({float(grouped_first[0]):.6g}, {float(grouped_first[1]):.6g}), as "
            f"merge(left, merge(right, third)) give ({float(grouped_last[0]):.6g}, "
            f"{float(grouped_last[1]):.6g}): the grouping must not matter"
        )
    return None


def _rescales(
    x, block, *, first=False, ties=False, previous=False, tail=True, frozen=False
):
    """Blocks after the first that raise the running max (α < 1), with a choice of classic mistakes
    (`frozen`: m never updated after the first block)."""
    maxima = [
        float(np.max(x[j0 : j0 + block]))
        for j0 in range(0, len(x) if tail else len(x) // block * block, block)
    ]
    count, m = int(first), maxima[0]
    for prev, b in zip(maxima, maxima[1:]):
        count += int(
            b >= (prev if previous else m) if ties else b > (prev if previous else m)
        )
        m = m if frozen else max(m, b)
    return count


def check_count_rescales(fn, *, seed: int | None = None) -> None:
    """Check `fn(x, block)`, the blocks after the first whose scores raise the running max ($\\alpha = e^{m - m'} < 1$);
    fixed cases (ties among them) and three drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/02_online_softmax.ipynb"""
    fresh, seed = _fresh(seed)
    cases = [
        (demo_scores(24), 6),
        (np.arange(10.0), 3),
        (np.arange(10.0)[::-1].copy(), 2),
        (np.ones(6), 2),
        (np.array([5.0, 1.0, 3.0, 2.0, 4.0]), 1),
        (demo_scores(64), 8),
    ]
    for _ in range(
        3
    ):  # small whole numbers, so that ties between block maxima happen; a rise in the last block
        n, b = int(fresh.integers(8, 40)), int(fresh.integers(2, 7))
        x = fresh.integers(0, 12, n).astype(float)
        x[-1] = x.max() + 1.0
        cases.append((x, b))
    mistakes = [
        (
            lambda x, b: _rescales(x, b, first=True),
            "that counts the first block: it sets m from -inf, nothing is rescaled",
        ),
        (
            lambda x, b: _rescales(x, b, first=True, ties=True),
            "two faults. It counts the first block, which sets m from -inf and rescales nothing. "
            "It counts a block whose max only equals m: α = e^0 = 1, no rescale",
        ),
        (
            lambda x, b: _rescales(x, b, ties=True),
            "that counts a block whose max only equals m: α = e^0 = 1, no rescale",
        ),
        (
            lambda x, b: _rescales(x, b, previous=True),
            "that compares with the previous block's max: m is the max of "
            "everything read so far",
        ),
        (
            lambda x, b: _rescales(x, b, frozen=True),
            "m was never updated: every block is compared with the first block's max; after a "
            "block raises m, m is that block's max, and later blocks must beat it",
        ),
        (
            lambda x, b: _rescales(x, b, tail=False),
            "the last, shorter block was left out",
        ),
        (  # last: on one case it can agree with a specific fault by coincidence
            lambda x, b: _rescales(x, 1),
            "that counts score by score: the running max is compared once per block of `block` scores, "
            "x[j0:j0 + block], so a rise inside a block is one rescale at most",
        ),
    ]
    guarded = _guarded(fn, "count_rescales")
    check(
        guarded,
        _rescales,
        cases,
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work("online_trace", "online_normalizer")],
        hint=_hint(
            mistakes,
            "a rescale happens where a block's max is above every score read before it",
            fn=guarded,
            cases=cases,
        ),
    )


# ------------------------------------------------------------------------------------ 02 exercise 3: entropy


def _entropy(x) -> float:
    """The float64 entropy $H = -\\sum_j p_j \\log p_j$ of the softmax of one row, from the whole row; 0.0 for a
    row of only -inf (nothing to weigh)."""
    x = np.asarray(x, dtype=np.float64)
    seen = x[x > -inf]
    if seen.size == 0:
        return 0.0
    m = float(seen.max())
    e = np.exp(seen - m)
    l = float(e.sum())
    return float(np.log(l) + (e * (m - seen)).sum() / l)  # log l + Σ p_j (m - x_j) >= 0


def _entropy_pass(
    x,
    block,
    *,
    form="t",
    rescale=True,
    sign=1,
    terms="new",
    drop_masked=True,
    add_m=True,
    over_l=True,
    negate=False,
    shift_term=True,
    empty_guard=True,
    row_guard=True,
):
    """The one-pass entropy of one row with a choice of classic mistakes. `form="t"` carries
    $t = \\sum e^{x_j - m} x_j$ and ends with $H = m + \\log l - t / l$; `form="u"` carries
    $u = \\sum e^{x_j - m} (m - x_j)$ and ends with $H = \\log l + u / l$. Mistakes: `rescale` the old sum's
    factor left out, `sign=-1` it inverted, `terms` the block's terms against the block's own max ("block")
    or no max ("none"), `drop_masked` -inf scores kept in the sum (0 · -inf = NaN), `add_m` the m of the t form
    left out, `over_l` t not divided by l, `negate` -H, `shift_term` the u form's (m' - m)·l left out,
    `empty_guard` the u form's first block from the empty state (inf · 0 = NaN), `row_guard` a row of only -inf
    not returned as 0."""
    x = np.asarray(x, dtype=np.float64)
    m, l, s = -inf, 0.0, 0.0  # s is t or u
    with np.errstate(all="ignore"):
        for j0 in range(0, len(x), block):
            x_b = x[j0 : j0 + block]
            if drop_masked:
                x_b = x_b[x_b > -inf]
            top = float(np.max(x_b)) if x_b.size else -inf
            if top == -inf:  # nothing to add, masked or not
                continue
            m_new = max(m, top)
            a = float(np.exp(m - m_new))
            against = {"new": m_new, "block": top, "none": 0.0}[terms]
            e = np.exp(x_b - against)
            if form == "t":
                old = (float(np.exp(sign * (m - m_new))) if rescale else 1.0) * s
            else:
                gap = (m_new - m) * l if shift_term else 0.0
                old = (a if rescale else 1.0) * (s + gap)
            if empty_guard and m == -inf:
                old = 0.0  # the empty state: nothing to convert
            s = old + float((e * (x_b if form == "t" else m_new - x_b)).sum())
            l = a * l + float(np.exp(x_b - m_new).sum())
            m = m_new
        if l == 0 and row_guard:
            return 0.0
        if form == "t":
            h = (m if add_m else 0.0) + np.log(l) - (s / l if over_l else s)
        else:
            h = np.log(l) + s / l
    return float(-h if negate else h)


_EMPTY_ROW = (
    "a row of only -inf has nothing to weigh: l = 0, and log 0 or a division by l fails; return "
    "0.0 for it"
)

_ZERO_LOG_ZERO = (
    "your H is NaN, the right H is finite: this row has finite scores so far below its max that "
    "e^(x_j - m) underflows to 0, and in floating point 0 · log 0 = 0 · (-inf) is NaN (its limit, "
    "0, is what H needs); never take the log of an exponential: log p_j = x_j - m - log l"
)


def _underflows(x) -> bool:
    """Whether a finite score of row `x` lies so far below the row's max that its e^(x_j - m) is 0 in float64."""
    x = np.asarray(x, dtype=np.float64)
    seen = x[np.isfinite(x)]
    with np.errstate(under="ignore"):
        return bool(seen.size) and bool((np.exp(seen - seen.max()) == 0).any())


_ENTROPY_MISTAKES = [
    (
        {"rescale": False},
        "the weighted sum was added to as it was when a block raised the max: its old terms were "
        "taken against the old m, exactly as l's were; they need the same conversion",
    ),
    (
        {"sign": -1},
        "the factor on the old weighted sum points the wrong way: moving terms to a larger max must "
        "shrink them (a factor <= 1)",
    ),
    (
        {"terms": "block"},
        "the block's terms of the weighted sum were taken against the block's own max: every term "
        "must be against the one running max, the m that l is measured against",
    ),
    (
        {"terms": "none"},
        "no max was subtracted in the weighted sum: e^x overflows near +1000 and is 0 near -1000; "
        "take its terms against the running m, as l's",
    ),
    (
        {"drop_masked": False},
        "a masked score (-inf) makes a term e^(-inf - m) · (-inf) = 0 · (-inf) = NaN: its probability "
        "is 0 and so is its share of H; leave the -inf scores out of that sum (x_b[x_b > -np.inf])",
    ),
    (
        {"add_m": False},
        "yours is H - m: log p_j = x_j - m - log l, and the m does not cancel from -Σ p_j log p_j",
    ),
    (
        {"over_l": False},
        "the weighted sum was used as it is: Σ p_j x_j is that sum divided by l, since p_j = "
        "e^(x_j - m) / l",
    ),
    ({"negate": True}, "yours is -H: the entropy is -Σ p_j log p_j, and it is >= 0"),
    ({"row_guard": False}, _EMPTY_ROW),
    (
        {"form": "u", "shift_term": False},
        "you carry Σ e^(x_j - m)(m - x_j): when the max rises to m', each old term's (m - x_j) "
        "grows by m' - m too, not only its exponential; the old sum gains (m' - m)·l before the factor",
    ),
    (
        {"form": "u", "empty_guard": False},
        "NaN from the first block on: from the empty state (m = -inf, l = 0, your sum 0) a product "
        "∞ · 0 is NaN, (m' - m)·l or an inverted factor e^(m' - m); the empty state has nothing to "
        "convert, so start the sums from the first block's terms (and moving to a larger max must "
        "shrink a sum: a factor <= 1)",
    ),
    (
        {"form": "u", "rescale": False},
        "the old sum Σ e^(x_j - m)(m - x_j) was not rescaled when a block raised the max: its "
        "exponentials were taken against the old m",
    ),
]


def check_online_entropy(
    fn, *, long_n: int = 20_000, long_block: int = 50, seed: int | None = None
) -> None:
    """Check `fn(x, block)` -> the entropy $H = -\\sum_j p_j \\log p_j$ of the softmax of one row, read once in
    blocks.

    `x` is a `lab.CountingArray` (len, x[j0:j1]). Beyond the value (to 1e-9 relative, 1e-10 absolute, against
    float64 from the whole row): each score loaded exactly once, `block` at a time, nothing written into x; on a
    row of `long_n` scores less than a quarter of the row's bytes held (tracemalloc); none of lab's softmaxes or
    online passes, no other array library. Cases: the max rising late, ascending scores, scores near ±1000,
    equal scores (H = log M), masked scores, a row of only -inf (H = 0); three drawn afresh each run (`seed`
    draws the same again). Taught in: notebooks/02_online_softmax.ipynb"""
    rng = np.random.default_rng(8)
    fresh, seed = _fresh(seed)
    z = demo_scores(24)
    cases = [
        (rng.standard_normal(10), 4),
        (z, 6),
        (np.r_[rng.standard_normal(6), 800.0 + rng.standard_normal(6)], 3),
        (np.sort(rng.standard_normal(12)), 4),
        (-1000.0 + z[:16], 5),
        (np.full(8, 2.5), 3),
        (np.array([-inf, -inf, 1.5, -inf]), 2),
        (np.r_[rng.standard_normal(4), np.full(4, -inf), z[:3]], 4),
        (np.full(5, -inf), 2),
        (1000.0 * rng.standard_normal(7), 100),
    ] + _drawn_rows(fresh)
    mistakes = [
        (lambda x, b, kw=kw: _entropy_pass(x, b, **kw), t)
        for kw, t in _ENTROPY_MISTAKES
    ]
    name = _guarded(fn, "online_entropy").__name__
    course = _PASS_COURSE + ("softmax_naive", "count_accesses")
    piecewise = None
    for i, (x, block) in enumerate(cases):
        shown, row = f"case {i} {describe_case((x, block))}", CountingArray(x)
        try:
            with (
                np.errstate(all="ignore"),
                _watching(course, numpy_only=True) as called,
            ):
                got = _settled(fn(row, block))
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            _report_raised(
                name,
                shown,
                exc,
                seed,
                "x is a counting array: use len(x) and x[j0:j1], not x.shape or numpy on x itself",
            )
            if np.isneginf(x).all() and not isinstance(exc, NotImplementedError):
                print("  hint: " + _EMPTY_ROW)
            return
        if called:
            print(f"{name}: ✗ {shown}: {_refusal(called)}")
            return
        want = _entropy(x)
        if not np.ndim(got) == 0:
            print(
                f"{name}: ✗ {shown}: it returned {got!r}; return H, one number for the row"
            )
            print(seed_note(seed), end="")
            return
        problem = diagnose(float(got), want, names=("H",), rtol=1e-9, atol=1e-10)
        hint = _hint(
            mistakes,
            "H = -Σ p_j log p_j with p_j = e^(x_j - m) / l: write log p_j with m and l, and carry "
            "the one sum besides l that H then needs, against the running m",
            close=(_FLOAT32.format("1e-9", "your sum", "m, l and the sum"), 1e-5),
            fn=lambda x, b: float(fn(CountingArray(x), b)),
            cases=cases,
        )((x, block), float(got), want)
        if np.isnan(got) and np.isfinite(want) and _underflows(x):
            hint = _ZERO_LOG_ZERO
        if problem is None:
            problem, hint = _read_problem(row)
        if problem is not None:
            print(
                f"{name}: ✗ {shown}: {problem}" + (f"\n  hint: {hint}" if hint else "")
            )
            print(seed_note(seed), end="")
            return
        if piecewise is None and row.load_calls != -(-len(x) // block):
            piecewise = (
                f"{name}: ✗ {shown}: x was read in {row.load_calls} loads; {block} scores at a "
                f"time, it takes {-(-len(x) // block)}\n  hint: load one block per step, "
                "x[j0:j0 + block], not score by score"
            )
    x = rng.standard_normal(long_n)
    fn(CountingArray(x), long_block)  # once unmeasured: a first call's imports, caches
    held, _ = peak_bytes(fn, CountingArray(x), long_block)
    if held > x.nbytes // 4:
        print(
            f"{name}: ✗ on a row of {long_n} scores in blocks of {long_block}, it held {held:,} "
            f"bytes at once; the row itself is {x.nbytes:,} bytes and one block {long_block * 8}\n"
            "  hint: keep only a few numbers between blocks (m, l and one more sum): no list or "
            "array of the scores, their exponentials or their probabilities"
        )
        return
    if piecewise is not None:
        print(piecewise)
        return
    print(
        f"{name}: ✓ passed {len(cases)} cases; each score read once; no row-sized array held"
    )


_ORDERS = ("as drawn", "ascending", "descending")


def _pair_problem(got, blocks) -> str | None:
    """What is wrong with the shape of one written prediction: not a pair of whole numbers (a string, whose
    characters a tuple() would split; a single number; three values; 2.5 rescales), else None."""
    pair = (
        f"a pair of whole numbers, (rescales at Bc = {blocks[0]}, at Bc = {blocks[1]})"
    )
    if isinstance(got, str):
        return f"{got!r} is a string: write {pair}, such as (2, 1), without quotes"
    if not isinstance(got, (tuple, list)):
        return f"{got!r} is one value: write {pair}, such as (2, 1)"
    if len(got) != 2:
        return f"{tuple(got)!r} has {len(got)} values: write {pair}"
    for v in got:
        if v is Ellipsis or v is None:
            continue
        whole = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
        if not whole and not (isinstance(v, float) and v.is_integer()):
            return f"{v!r} is not a whole number: a count of rescales is one"
    return None


def check_rescale_predictions(predicted, *, n: int = 64, blocks=(1, 4)) -> None:
    """Compare written predictions `{order: (rescales at Bc = 1, at Bc = 4)}` (a dict, or a function returning one)
    for `lab.demo_scores(n)` as drawn, sorted ascending and sorted descending with the counts of lab's reference.
    One line per predicted order: the prediction, ✓ or ✗, and the count, shown once both sorted orders (which
    can be derived) are right; an order not yet predicted shows no count.
    Taught in: notebooks/02_online_softmax.ipynb"""
    name = "predicted_rescales"
    if callable(predicted):
        name = getattr(predicted, "__name__", name)
        try:
            predicted = predicted()
        except NotImplementedError:
            print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
            return
    if not isinstance(predicted, dict):
        print(
            f"predictions: return a dict with the keys {', '.join(map(repr, _ORDERS))}"
        )
        return
    x = demo_scores(n)
    rows = {"as drawn": x, "ascending": np.sort(x), "descending": np.sort(x)[::-1]}
    missing = [o for o in _ORDERS if o not in predicted]
    if missing:
        print(
            f"predictions: write one (Bc = {blocks[0]}, Bc = {blocks[1]}) pair for {', '.join(missing)}"
        )
        return
    # the counts are shown only once both sorted orders, which can be derived, are right
    sorted_right = all(
        _pair_problem(predicted[o], blocks) is None
        and tuple(predicted[o]) == tuple(_rescales(rows[o], b) for b in blocks)
        for o in ("ascending", "descending")
    )
    right = written = 0
    for order in _ORDERS:
        want = tuple(_rescales(rows[order], b) for b in blocks)
        problem = _pair_problem(predicted[order], blocks)
        if problem is not None:
            print(f"{order:>10}: ✗ {problem}")
            continue
        got = tuple(
            v if v is Ellipsis or v is None else int(v) for v in predicted[order]
        )
        if Ellipsis in got or None in got:
            print(f"{order:>10}: not predicted yet")
            continue
        if (
            order == "as drawn"
        ):  # a guess: no mark to find it by trial; its count once shown
            each = [
                f"Bc = {b}: {g} guessed" + (f", {w} counted" if sorted_right else "")
                for b, g, w in zip(blocks, got, want)
            ]
            print(f"{order:>10}: " + "; ".join(each) + " (not marked)")
            continue
        ok = got == want
        right, written = right + ok, written + 1
        each = [
            f"Bc = {b}: {g} predicted, {w} counted {'✓' if g == w else '✗'}"
            if sorted_right
            else f"Bc = {b}: {g} predicted {'✓' if g == w else '✗'}"
            for b, g, w in zip(blocks, got, want)
        ]
        print(f"{order:>10}: " + "; ".join(each))
    if written:
        print(
            f"{right} of {written} sorted orders predicted right at both Bc = {blocks[0]}"
            f" and Bc = {blocks[1]}"
        )
    if written and not sorted_right:
        print("(the counts are shown once both sorted orders are right)")
    # the verdict: the sorted orders can be derived; "as drawn" is a guess and is only shown
    derived = [
        _pair_problem(predicted[o], blocks) is None
        and tuple(predicted[o]) == tuple(_rescales(rows[o], b) for b in blocks)
        for o in ("ascending", "descending")
    ]
    shapes = [o for o in _ORDERS if _pair_problem(predicted[o], blocks) is not None]
    if shapes:
        print(
            f"{name}: ✗ write {', '.join(shapes)} as a pair of whole numbers "
            "(see above)"
        )
    elif all(derived):
        print(
            f"{name}: ✓ both sorted orders derived right (as drawn is a guess, not graded:"
            " its true counts are above)"
        )
    else:
        print(
            f"{name}: ✗ predict the sorted orders again: in each order, at which step does a"
            " block first hold a score above every one before it, and how often after that?"
            " (The first block sets m: there is nothing to rescale yet.)"
            if written
            else f"{name}: ✗ no prediction written yet"
        )
