"""Notebook 07's exercises and those of its sequel 07_precision_in_attention: each worked solution passes its own
check cell, each planted classic mistake fails with its diagnosis, the open question has a place to answer and a
worked answer, and the oracles and checks of lab/checks/precision.py and lab/checks/precision_attention.py behave."""

import contextlib
import io

import ml_dtypes
import nbformat
import numpy as np
import pytest
from exercise_support import ROOT, assert_fails, exercises, run_check, source

import lab
from lab.checks import precision as checks
from lab.checks import precision_attention

NAME = "07_precision"
NAME2 = "07_precision_in_attention"
EX = {ex.number: ex for ex in exercises(NAME)}
EX2 = {ex.number: ex for ex in exercises(NAME2)}
PASSED = {
    1: "blocked_sum: ✓ passed 8 cases\n",
    2: "round_nearest_even: ✓ passed 8 cases, bit for bit (ties, subnormals, overflow, a layout no library has)\n",
    3: "rms_delta_uniform: ✓ passed 6 cases (t = 7, 10, 23 and 3 drawn for this run; to 0.1%)\n",
}
PASSED2 = (
    "quantize_blocks: ✓ passed 4 cases (a short last block, a block of zeros, one row per block, one block for all "
    "rows; each head scaled on its own)\n"
)


def _src(text: str) -> str:
    return source(text)


def _fails(number: int, text: str, *says: str) -> str:
    return assert_fails(EX[number], text, *says)


def _cells(name: str = NAME):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]


def test_the_notebook_has_three_checked_exercises_and_links_its_sequel():
    assert sorted(EX) == [1, 2, 3]
    cells = _cells()
    assert not any(s.startswith("### Exercise 4") for _, s, _ in cells)
    assert not any("cell below" in s for _, s, _ in cells)
    assert "07_precision_in_attention.ipynb" in cells[-1][1]


def test_the_sequel_has_one_checked_exercise_and_an_open_question():
    assert sorted(EX2) == [1]
    cells = _cells(NAME2)
    q = next(i for i, (_, s, _) in enumerate(cells) if s.startswith("### Exercise 2"))
    after = cells[q + 1 :]
    assert (
        after[0][0] == "code" and "lab.widgets.p_format_explorer()" in after[0][1]
    )  # the slider it asks about
    assert (
        after[1][0] == "markdown"
        and "Your answer:" in after[1][1]
        and "solution" not in after[1][2]
    )
    assert any("solution" in tags for _, _, tags in after)
    assert not any("cell below" in s for _, s, _ in cells)
    assert (
        "07_precision.ipynb" in cells[3][1] and "08_hardware_runs.ipynb" in cells[-1][1]
    )


def test_the_sequel_opens_like_every_notebook():
    cells = _cells(NAME2)
    assert "colab-setup" in cells[0][2] and "NBVAL_SKIP" in cells[0][1]
    assert cells[1][1].startswith("# 07 · ") and "*About 45 minutes" in cells[1][1]
    assert "lab.setup_notebook()" in cells[2][1]
    assert [
        s.split("\n")[0] for t, s, _ in cells if t == "markdown" and s.startswith("## ")
    ][:3] == [
        "## 1. Outliers: standard attention against the tiled algorithm",
        "## 2. TF32: the FP32 matmul that is not quite FP32",
        "## 3. Real attention inputs",
    ]


def test_the_open_question_answer_runs():
    cells = _cells(NAME2)
    q = next(i for i, (_, s, _) in enumerate(cells) if s.startswith("### Exercise 2"))
    answer = next(s for t, s, tags in cells[q:] if t == "code" and "solution" in tags)
    ns, out = {}, io.StringIO()
    with contextlib.redirect_stdout(out):
        for src in EX2[1].setup:
            exec(compile(src, "<setup>", "exec"), ns)
        exec(compile(answer, "<answer>", "exec"), ns)
    assert "the share rounded to 0 grows with block_k: True" in out.getvalue()


@pytest.mark.parametrize("number", [1, 2, 3])
def test_worked_solution_passes_with_one_fixed_line(number):
    assert run_check(EX[number], EX[number].solution) == PASSED[number]


@pytest.mark.parametrize("number", [1, 2, 3])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_the_exercise_section_needs_only_the_setup():
    ns = {}
    for src in EX[1].setup + EX[1].before[:1]:
        exec(compile(src, "<setup>", "exec"), ns)
    assert {
        "check_blocked_sum",
        "check_round_nearest_even",
        "check_rms_delta_uniform",
    } <= set(ns)
    assert not {"q", "k", "v", "grid", "acc"} & set(ns)


def test_the_sequel_exercise_section_needs_only_the_setup():
    ns = {}
    for src in EX2[1].setup + EX2[1].before[:1]:
        exec(compile(src, "<setup>", "exec"), ns)
    assert "check_quantize_blocks" in ns and not {
        "q4",
        "k4",
        "acts",
        "measured",
        "t3",
    } & set(ns)


# ------------------------------------------------------------------------------------ exercise 1

BLOCKED = """
def blocked_sum(p, fmt, block):
    x = {x}
    total = 0.0
    for b0 in range(0, {stop}, {step}):
        part = 0.0
        for xi in x[b0:b0 + {step}]:
            part = {inner}
        total = {outer}
    return float(total)
"""
RND = "lab.round_to(np.array([{}]), fmt)[0]"
OK = dict(
    x="lab.round_to(p, fmt)",
    stop="len(p)",
    step="block",
    inner=RND.format("part + xi"),
    outer=RND.format("total + part"),
)


def _blocked(**change):
    return BLOCKED.format(**{**OK, **change})


def test_blocked_sum_in_float64_arithmetic_passes():
    """Adding in float64 before each rounding gives the same bits as adding in float32 (both exact, then one rounding)."""
    assert run_check(EX[1], _src(_blocked())) == PASSED[1]


@pytest.mark.parametrize(
    "change, says",
    [
        (
            dict(inner="part + xi", outer="total + part"),
            (
                "case 0 (np.ones(600), 'bf16', block=1)",
                "expected 256, got 600",
                "exact sum of the rounded p",
            ),
        ),
        (
            dict(step="1"),
            ("case 1 (600 random p", "one-element-at-a-time sum: `block` was ignored"),
        ),
        (
            dict(stop="len(p) - len(p) % block"),
            (
                "case 1",
                "without the last, shorter block (600 = 37 blocks of 16 and one of 8)",
            ),
        ),
        (
            dict(x="p"),
            (
                "case 3 (p = [1, then 2^-8 + 2^-20",
                "expected 2, got 2.10938",
                "round p to the format first",
            ),
        ),
        (
            dict(inner="part + xi", outer=RND.format("total + part")),
            ("each block summed exactly",),
        ),
        (dict(outer="total + part"), ("block sums added exactly",)),
    ],
)
def test_blocked_sum_mistakes(change, says):
    _fails(1, _blocked(**change), *says)


def test_blocked_sum_rounding_once_at_the_end():
    _fails(
        1,
        "def blocked_sum(p, fmt, block):\n    return float(lab.round_to(np.array([lab.round_to(p, fmt).astype(float).sum()]), fmt)[0])\n",
        "rounded once at the end",
    )


def test_blocked_sum_may_not_call_the_library():
    _fails(
        1,
        "def blocked_sum(p, fmt, block):\n    return float(lab.low_precision_sum(p, fmt, block)[-1])\n",
        "calls lab.low_precision_sum",
    )


def test_blocked_sum_may_not_call_the_library_from_its_module():
    _fails(
        1,
        """
        from lab.precision_experiments import low_precision_sum as summed
        def blocked_sum(p, fmt, block):
            return float(summed(p, fmt, block)[-1])
        """,
        "calls lab.low_precision_sum",
        "write it yourself",
    )


def test_blocked_sum_may_not_reach_the_library_through_a_closure():
    _fails(
        1,
        """
        import importlib
        def _make():
            f = getattr(importlib.import_module("lab.precision_experiments"), "low_precision_sum")
            return lambda p, fmt, block: float(f(p, fmt, block)[-1])
        blocked_sum = _make()
        """,
        "calls lab.low_precision_sum",
    )


def test_blocked_sum_returning_an_array():
    _fails(
        1,
        _blocked().replace("return float(total)", "return np.array([total])"),
        "shape: yours is (1,), expected ()",
    )


def test_every_classic_blocked_mistake_fails_more_than_one_case():
    """The old check let a wrong sum through 4 cases out of 5: now each classic mistake is caught at least twice."""
    caught = {}
    for _, (p, fmt, block) in checks._blocked_cases():
        want = float(lab.low_precision_sum(p, fmt, block)[-1])
        for key, (total, _) in checks._blocked_variants(p, fmt, block).items():
            caught.setdefault(key, []).append(total != want)
    assert all(sum(hits) >= 2 for hits in caught.values()), caught


# ------------------------------------------------------------------------------------ exercise 2

ROUND = """
def round_nearest_even(x, e, t):
    x = np.asarray(x, np.float32).astype(np.float64)
    bias = 2 ** (e - 1) - 1
    largest = (2 - 2.0**-t) * 2.0**bias
    a = np.abs(x)
    _, ex = np.frexp(a)
    step = np.ldexp(1.0, {exp} - t)
    n = np.floor(a / step)
    rest = a / step - n
    n = {n}
    y = {y}
    return np.copysign(y, x).astype(np.float32)
"""
ROUND_OK = dict(
    exp="np.maximum(ex - 1, 1 - bias)",
    n="n + ((rest > 0.5) | ((rest == 0.5) & (n % 2 == 1)))",
    y="np.where(n * step > largest, np.inf, n * step)",
)


def _round(**change):
    return ROUND.format(**{**ROUND_OK, **change})


def test_round_written_with_log2_passes_once_it_keeps_inf():
    src = (
        _round()
        .replace("    _, ex = np.frexp(a)\n", "")
        .replace(
            "step = np.ldexp(1.0, np.maximum(ex - 1, 1 - bias) - t)",
            "step = 2.0 ** (np.maximum(np.floor(np.log2(a)), 1 - bias) - t)",
        )
    )
    assert "log2" in src
    _fails(
        2, src, "x = inf: expected inf, got nan", "it stays ±inf"
    )  # log2(inf) = inf: inf / inf = NaN
    src = src.replace(
        "    return np.copysign",
        "    y = np.where(np.isinf(a), np.inf, y)\n    return np.copysign",
    )
    assert run_check(EX[2], _src(src)) == PASSED[2]


@pytest.mark.parametrize(
    "change, says",
    [
        (
            dict(n="np.floor(a / step + 0.5)"),
            (
                "case 2 (fp16: ties",
                "x = 1.00048828125: expected 1.0, got 1.0009765625",
                "exactly halfway between 1.0 and 1.0009765625",
                "last mantissa bit is 0",
            ),
        ),
        (dict(n="n"), ("case 0", "cut toward zero")),
        (
            dict(exp="(ex - 1)"),
            ("case 3 (fp16: below the smallest normal", "subnormals", "spacing 2^-24"),
        ),
        (
            dict(y="np.minimum(n * step, largest)"),
            (
                "case 4 (fp16: around the largest finite value 65504)",
                "x = 65520.0",
                "up to x_max + half a step (65520)",
            ),
        ),
        (
            dict(y="np.where(a > largest, np.inf, n * step)"),
            ("x = 65519.0: expected 65504.0, got inf",),
        ),
        (
            dict(exp="np.maximum(ex - 1, -bias)"),
            ("case 3", "not a value of this format"),
        ),
    ],
)
def test_round_mistakes(change, says):
    _fails(2, _round(**change), *says)


def test_round_may_not_call_round_to():
    _fails(
        2,
        "def round_nearest_even(x, e, t):\n    return lab.round_to(x, {(5, 10): 'fp16', (8, 7): 'bf16'}.get((e, t), 'fp8_e5m2'))\n",
        "calls lab.round_to, lab's own answer",
    )


def test_round_may_not_call_round_to_under_another_name():
    _fails(
        2,
        """
        from lab.precision import round_to as cast
        LAYOUT = {(5, 10): "fp16", (8, 7): "bf16"}
        def round_nearest_even(x, e, t):
            return cast(x, LAYOUT.get((e, t), "fp8_e5m2"))
        """,
        "calls lab.round_to",
    )


@pytest.mark.parametrize(
    "n, says",
    [
        ("np.rint(a / step)", "np.rint"),
        ("np.round(a / step)", "np.round"),
        ("np.around(a / step)", "np.around"),
        ("np.vectorize(round)(a / step)", "Python's round"),
    ],
)
def test_round_may_not_let_a_library_settle_ties(n, says):
    _fails(2, _round(n=n), f"{says}, which applies the tie rule for you")


def test_round_by_the_array_method_is_not_seen_and_the_notebook_says_so():
    assert (
        run_check(EX[2], _src(_round(n="(a / step).round()"))) == PASSED[2]
    )  # a C method: cannot be replaced
    assert ".round()" in EX[2].spec and "Python's `round`" in EX[2].spec


def test_round_through_a_library_fails_on_the_layout_no_library_has():
    src = """
    import ml_dtypes
    def round_nearest_even(x, e, t):
        kinds = {(5, 10): np.float16, (8, 7): ml_dtypes.bfloat16, (5, 2): ml_dtypes.float8_e5m2}
        return np.asarray(x, np.float32).astype(kinds.get((e, t), np.float16)).astype(np.float32)
    """
    _fails(2, src, "case 7 (a layout no library has, e=6, t=5")


def test_round_losing_inf():
    src = _round().replace(
        "    x = np.asarray(x, np.float32).astype(np.float64)\n",
        "    x = np.asarray(x, np.float32).astype(np.float64)\n    x = np.where(np.isinf(x), np.nan, x)\n",
    )
    _fails(2, src, "x = inf", "it stays ±inf")


def test_format_grid_is_every_value_of_the_library_formats():
    dtypes = {
        (5, 10): np.float16,
        (8, 7): ml_dtypes.bfloat16,
        (5, 2): ml_dtypes.float8_e5m2,
    }
    for name, et in (
        ("float8_e3m4", (3, 4)),
        ("float8_e4m3", (4, 3)),
    ):  # IEEE-style fp8s of newer ml_dtypes
        if hasattr(ml_dtypes, name):
            dtypes[et] = getattr(ml_dtypes, name)
    for (e, t), dt in dtypes.items():
        bits = np.arange(2 ** (1 + e + t), dtype=np.uint16 if e + t > 7 else np.uint8)
        with np.errstate(invalid="ignore"):
            values = bits.view(dt).astype(np.float64)
        finite = np.unique(values[np.isfinite(values) & (values >= 0)])
        assert np.array_equal(checks.format_grid(e, t), finite), (e, t)


@pytest.mark.parametrize(
    "fmt, e, t", [("fp16", 5, 10), ("bf16", 8, 7), ("fp8_e5m2", 5, 2), ("tf32", 8, 10)]
)
def test_round_by_grid_matches_the_libraries_bit_for_bit(fmt, e, t):
    rng = np.random.default_rng(3)
    x = np.ldexp(1 + rng.random(20000), rng.integers(-150, 129, 20000)) * rng.choice(
        [-1, 1], 20000
    )
    with np.errstate(over="ignore"):
        x = np.concatenate(
            [
                x.astype(np.float32),
                checks._rounding_cases()[2][1],
                checks._rounding_cases()[4][1],
            ]
        )
    got, want = checks.round_by_grid(x, e, t), lab.round_to(x, fmt)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (
        np.isnan(got) & np.isnan(want)
    )
    assert same.all(), x[~same][:5]


def test_round_by_grid_on_a_layout_with_inf_of_newer_ml_dtypes():
    if not hasattr(ml_dtypes, "float8_e3m4"):
        pytest.skip("ml_dtypes without float8_e3m4")
    x = np.linspace(-20, 20, 40001).astype(np.float32)
    want = x.astype(ml_dtypes.float8_e3m4).astype(np.float32)
    assert np.array_equal(checks.round_by_grid(x, 3, 4), want, equal_nan=True)


# ------------------------------------------------------------------------------------ exercise 3


@pytest.mark.parametrize(
    "expr, says",
    [
        ("2.0**-t * np.sqrt(3 / (8 * np.log(2))) / np.sqrt(12)", "log scale"),
        ("2.0**-t / np.sqrt(12)", "absolute error in steps"),
        ("2.0**-t / np.sqrt(6)", "whole step either side"),
        ("2.0**-(t + 1) / np.sqrt(24)", "ε taken as half the step"),
        ("2.0**-t * np.log(2) / np.sqrt(12)", "average 1/x² itself"),
        ("2.0**-t / 4", "the error is uniform over half a step"),
    ],
)
def test_rms_delta_mistakes(expr, says):
    _fails(3, f"def rms_delta_uniform(t):\n    return {expr}\n", "case 0 (t = 7)", says)


def test_rms_table_of_the_fixed_cases_fails_on_the_drawn_ones():
    """A table of the three fixed answers (or the value of one, hard-coded) passes no drawn t."""
    table = "{7: 2.0**-7 / 24**0.5, 10: 2.0**-10 / 24**0.5, 23: 2.0**-23 / 24**0.5}"
    out = _fails(
        3,
        f"def rms_delta_uniform(t):\n    return {table}.get(t, 0.0)\n",
        "case 3",
        "seed",
    )
    assert "expected" in out
    _fails(3, "def rms_delta_uniform(t):\n    return 0.001594\n", "case 1 (t = 10)")


def test_rms_drawn_cases_repeat_with_the_seed(capsys):
    wrong = lambda t: {7: 2.0**-7 / 24**0.5}.get(t, 1.0)  # noqa: E731
    checks.check_rms_delta_uniform(wrong, seed=3)
    first = capsys.readouterr().out
    checks.check_rms_delta_uniform(wrong, seed=3)
    assert capsys.readouterr().out == first
    assert "seed=3" in first and "case 1 (t = 10)" in first


def test_rms_reference_agrees_with_a_measurement():
    """Round x uniform on [1, 2) to bf16 and fp16 with the library: the rms of δ is the first-order formula to 1%."""
    x = (1 + np.random.default_rng(0).random(400_000)).astype(np.float32)
    for fmt, t in (("bf16", 7), ("fp16", 10)):
        delta = lab.round_to(x, fmt).astype(np.float64) / x - 1
        assert np.sqrt(np.mean(delta**2)) == pytest.approx(
            checks._rms_reference(t), rel=0.01
        )


# ------------------------------------------------------------------------------------ 07_precision_in_attention, exercise 1

BLOCKS = """
def quantize_blocks(x, block):
    x = np.asarray(x, np.float32)
    out = np.empty_like(x)
    for r0 in range({start}, x.shape[-2] - {cut}, block):
        tile = x[..., r0:r0 + block, :]
        amax = np.abs(tile).max(axis={axes}, keepdims=True)
        s = np.float32(448) / {guard}
        out[..., r0:r0 + block, :] = {cast}
    return out
"""


def _blocks(
    start="0",
    cut="0",
    axes="(-1, -2)",
    guard="np.where(amax > 0, amax, np.float32(1))",
    cast='lab.round_to(tile * s, "fp8_e4m3") / s',
) -> str:
    return BLOCKS.format(start=start, cut=cut, axes=axes, guard=guard, cast=cast)


def test_quantize_blocks_worked_solution_and_stub():
    assert run_check(EX2[1], EX2[1].solution) == PASSED2
    assert run_check(EX2[1], _blocks()) == PASSED2
    assert "not implemented yet" in run_check(EX2[1], EX2[1].stub)


@pytest.mark.parametrize(
    "text, says",
    [
        (
            _blocks(guard="amax"),
            ["case 1 (a block of zeros)", "NaN", "keep the scale finite"],
        ),
        (_blocks(axes="-1"), ["case 0", "one scale per row"]),
        (_blocks(axes="None"), ["case 0", "one scale per block shared by all heads"]),
        (
            _blocks().replace(".max(axis=(-1, -2), keepdims=True)", ".max()"),
            ["case 0", "one scale per block shared by all heads"],
        ),
        (
            _blocks(
                cut="x.shape[-2] % block", cast='lab.round_to(tile * s, "fp8_e4m3") / s'
            ).replace("np.empty_like", "np.zeros_like"),
            ["case 0", "the last, shorter block is missing"],
        ),
        (
            _blocks(cast='lab.round_to(tile * s, "fp8_e4m3")'),
            ["case 0", "still scaled"],
        ),
        (
            "def quantize_blocks(x, block):\n    return lab.round_to(x, 'fp8_e4m3')\n",
            ["case 0", "the cast without a scale"],
        ),
        (
            "def quantize_blocks(x, block):\n    a = np.abs(x).max(axis=(-1, -2), keepdims=True)\n"
            "    return lab.round_to(x * (448 / a), 'fp8_e4m3') / (448 / a)\n",
            ["case 0", "one scale for the whole matrix"],
        ),
        (
            "def quantize_blocks(x, block):\n    s = np.float32(448) / np.abs(x).max()\n"
            "    return lab.round_to(x * s, 'fp8_e4m3') / s\n",
            ["case 0", "one scale for all heads"],
        ),
        (
            "def quantize_blocks(x, block):\n    return lab.quantize_fp8(x, block)\n",
            ["calls lab.quantize_fp8"],
        ),
        (
            "from lab.precision_fa3 import quantize_fp8 as q8\n"
            "def quantize_blocks(x, block):\n    return q8(x, block)\n",
            ["calls lab.quantize_fp8", "write it yourself"],
        ),
        (
            "import lab.precision_fa3 as fa3\n"
            "def quantize_blocks(x, block):\n    return np.asarray(fa3.quantize_fp8(x.copy(), block))\n",
            ["calls lab.quantize_fp8"],
        ),
    ],
)
def test_quantize_blocks_mistakes(text, says):
    assert_fails(EX2[1], text, *says)


def test_quantize_blocks_check_names_the_source():
    text = open(precision_attention.__file__).read()
    assert "2407.08608" in text
    assert "quantize_fp8" not in EX2[1].spec.replace("lab.quantize_fp8(x, block)", "")
