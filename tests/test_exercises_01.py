"""Notebook 01's exercises: each worked solution passes its own check cell, each planted classic mistake fails
with its diagnosis, and the checks of lab/checks/softmax.py used there behave when called directly."""

import nbformat
import numpy as np
import pytest
from exercise_support import (
    EVASIONS,
    ROOT,
    assert_fails,
    evading,
    exercises,
    run_check,
    source,
)

import lab
from lab.checks import softmax as checks

NAME = "01_three_pass_softmax"
EX = {ex.number: ex for ex in exercises(NAME)}
PASSED = {
    1: "row_edges: ✓ passed 6 cases\n"
    "  your prediction (fp16, first s that breaks): not written yet (shown once you write yours)\n",
    2: "row_overflow: ✓ passed 10 cases\n"
    "  your prediction (fp16, M = 4096): not written yet (predicted_4096, above the stub)\n",
    3: "safe_softmax: ✓ passed 11 cases; each score loaded 3 times, each y_i stored once; no row held\n",
    4: "log_sum_exp: ✓ passed 8 cases\n",
}


def _src(text: str) -> str:
    return source(text)


def _fails(number: int, text: str, *says: str) -> str:
    return assert_fails(EX[number], text, *says)


def test_the_notebook_has_four_checked_exercises():
    assert sorted(EX) == [1, 2, 3, 4]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_worked_solution_passes(number):
    assert run_check(EX[number], EX[number].solution) == PASSED[number]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_the_build_spec_states_properties_not_the_code():
    spec, solution = EX[3].spec, EX[3].solution
    assert (
        "(build)" in spec
        and "row of only $-\\infty$" in " ".join(spec.split())
        and "exactly 3 times" in spec
        and "CountingArray" in spec
    )
    code = [line.split("#")[0].strip() for line in solution.splitlines()[2:]]
    assert not any(len(line) > 4 and line in spec for line in code)  # not `)`


def test_exercise_2_is_a_transfer_not_the_table():
    """Exercise 2 asks for a row the text did not work (M equal scores), with M drawn afresh by its check."""
    spec = EX[2].spec
    assert "$M$ equal scores" in spec and "drawn afresh" in spec
    assert "log M" not in spec and "np.log(M)" not in spec


_FINFO = """
            import ml_dtypes
            def _max(name):
                dtype = lab.SOFTMAX_DTYPES[name]
                return float((ml_dtypes.finfo(dtype) if dtype is ml_dtypes.bfloat16 else np.finfo(dtype)).max)
            """

_LIMIT = """
            def _max(name):
                return float(np.finfo(lab.SOFTMAX_DTYPES[name]).max)
            """

PLANTED = {
    2: [
        (
            "ceil + 1: one too many",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(np.ceil(np.log(_max(name)) - np.log(k))) + 1
            """,
            ["case 0 ('fp16', 1)", "expected 12, got 13", "ceil(log Ω - log M) + 1"],
        ),
        (
            "rounded to the nearest",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(round(np.log(_max(name)) - np.log(k)))
            """,
            ["round() gives the nearest integer"],
        ),
        (
            "exercise 1's factor kept beside M",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(np.floor(np.log(_max(name)) - np.log(k) - np.log(1.553))) + 1
            """,
            ["keeps exercise 1's factor 1.553 beside M"],
        ),
        (
            "ignores k: where e^s alone overflows",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(np.floor(np.log(_max(name)))) + 1
            """,
            ["case 1 ('fp16', 4096)", "expected 3, got 12", "M·e^s"],
        ),
        (
            "rounded down",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(np.floor(np.log(_max(name)) - np.log(k)))
            """,
            ["case 0 ('fp16', 1)", "expected 12, got 11", "the next one"],
        ),
        (
            "the four-score row of section 2",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(np.floor(np.log(_max(name)) - np.log(1.553))) + 1
            """,
            ["case 0 ('fp16', 1)", "four-score row"],
        ),
        (
            "log2 of k",
            _LIMIT
            + """
            def row_overflow(name, k):
                return int(np.floor(np.log(_max(name)) - np.log2(k))) + 1
            """,
            ["case 1 ('fp16', 4096)", "log2(M)"],
        ),
        (
            "subtracts k",
            _LIMIT
            + """
            def row_overflow(name, k):
                return max(0, int(np.floor(np.log(_max(name)) - k)) + 1)
            """,
            ["case 0 ('fp16', 1)", "expected 12, got 11", "subtracts M"],
        ),
        (
            "calls the scan",
            """
            def row_overflow(name, k):
                return lab.first_exp_overflow(name) if k == 1 else 0
            """,
            ["calls lab.first_exp_overflow"],
        ),
        (
            "a table of the fixed answers",
            """
            def row_overflow(name, k):
                return {("fp16", 1): 12, ("fp16", 4096): 3, ("fp32", 1000): 82, ("fp64", 100_000): 699}[(name, k)]
            """,
            ["case 4", "raised KeyError"],
        ),
        (
            "its own table of dtypes",
            """
            def row_overflow(name, k):
                dtype = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[name]
                return int(np.floor(np.log(float(np.finfo(dtype).max)) - np.log(k))) + 1
            """,
            ["case 8 ('format_", "lab.SOFTMAX_DTYPES[name]"],
        ),
        (
            "tries values with lab's naive softmax",
            """
            def row_overflow(name, k):
                s = 0
                while np.isfinite(lab.softmax_naive(np.full(k, s, dtype=lab.SOFTMAX_DTYPES[name]))).all() and s < 800:
                    s += 1
                return s
            """,
            ["calls lab.softmax_naive"],
        ),
    ],
    3: [
        (
            "l summed in float32",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                m = max(float(np.max(x[j0 : j0 + block])) for j0 in starts)
                m = 0.0 if m == -np.inf else m
                l = np.float32(0.0)
                for j0 in starts:
                    l += np.exp(x[j0 : j0 + block] - m).astype(np.float32).sum()
                for j0 in starts:
                    e = np.exp(x[j0 : j0 + block] - m)
                    y[j0 : j0 + block] = e / l if l > 0 else np.zeros_like(e)
            """,
            [
                "case 0",
                "float32's rounding",
                "float64 reference to 1e-9",
                "accumulator",
            ],
        ),
        (
            "each block's own max in the sum",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                m = max(float(np.max(x[j0 : j0 + block])) for j0 in starts)
                m = 0.0 if m == -np.inf else m
                l = 0.0
                for j0 in starts:
                    b = x[j0 : j0 + block]
                    top = float(np.max(b))
                    l += float(np.exp(b - (0.0 if top == -np.inf else top)).sum())
                for j0 in starts:
                    e = np.exp(x[j0 : j0 + block] - m)
                    y[j0 : j0 + block] = e / l if l > 0 else np.zeros_like(e)
            """,
            ["case 0", "that block's own max", "the row's m from pass 1"],
        ),
        (
            "no max subtracted (the naive two passes)",
            """
            def safe_softmax(x, y, block):
                l = sum(float(np.exp(x[j0:j0 + block]).sum()) for j0 in range(0, len(x), block))
                for j0 in range(0, len(x), block):
                    y[j0:j0 + block] = np.exp(x[j0:j0 + block]) / l
            """,
            ["case 1", "NaN in yours", "pass 1 finds the row's max m"],
        ),
        (
            "passes 1 and 2 fused: l against the max so far",
            """
            def safe_softmax(x, y, block):
                m, l = -np.inf, 0.0
                for j0 in range(0, len(x), block):
                    x_b = x[j0:j0 + block]
                    m = max(m, float(np.max(x_b)))
                    l += float(np.exp(x_b - (0.0 if m == -np.inf else m)).sum())
                for j0 in range(0, len(x), block):
                    e = np.exp(x[j0:j0 + block] - (0.0 if m == -np.inf else m))
                    y[j0:j0 + block] = e / l if l > 0 else 0 * e
            """,
            ["case 0", "summed against the max found so far"],
        ),
        (
            "two passes that rescale: notebook 02's answer, not this one",
            """
            def safe_softmax(x, y, block):
                m, l = -np.inf, 0.0
                for j0 in range(0, len(x), block):
                    x_b = x[j0:j0 + block]
                    m_new = max(m, float(np.max(x_b)))
                    if m_new > -np.inf:
                        l, m = l * np.exp(m - m_new) + float(np.exp(x_b - m_new).sum()), m_new
                m = 0.0 if m == -np.inf else m
                for j0 in range(0, len(x), block):
                    e = np.exp(x[j0:j0 + block] - m)
                    y[j0:j0 + block] = e / l if l > 0 else 0 * e
            """,
            ["x[0] was loaded 2 times", "here build the three"],
        ),
        (
            "the max of the first block only",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                m = float(np.max(x[0:block]))
                m = 0.0 if m == -np.inf else m
                for j0 in starts[1:]:
                    x[j0:j0 + block]
                l = sum(float(np.exp(x[j0:j0 + block] - m).sum()) for j0 in starts)
                for j0 in starts:
                    e = np.exp(x[j0:j0 + block] - m)
                    y[j0:j0 + block] = e / l if l > 0 else 0 * e
            """,
            ["case 5", "NaN in yours", "the max of the first block only"],
        ),
        (
            "a masked row's NaN made, then hidden",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                m = max(float(np.max(x[j0:j0 + block])) for j0 in starts)
                l = sum(float(np.exp(x[j0:j0 + block] - m).sum()) for j0 in starts)
                for j0 in starts:
                    e = np.exp(x[j0:j0 + block] - m)
                    y[j0:j0 + block] = np.nan_to_num(e / l)
            """,
            ["case 4", "makes a NaN", "hides it", "shift a row of only -inf by 0"],
        ),
        (
            "one load, the row kept",
            """
            def safe_softmax(x, y, block):
                row = x[0:len(x)]
                m = row.max()
                e = np.exp(row - (0.0 if m == -np.inf else m))
                l = e.sum()
                for j0 in range(0, len(x), block):
                    y[j0:j0 + block] = e[j0:j0 + block] / l if l > 0 else 0.0
            """,
            ["x[0] was loaded 1 time;", "keep only m and l"],
        ),
        (
            "the max recomputed for every block of pass 3",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                top = lambda: max(float(np.max(x[j0:j0 + block])) for j0 in starts)
                m = top()
                m = 0.0 if m == -np.inf else m
                l = sum(float(np.exp(x[j0:j0 + block] - m).sum()) for j0 in starts)
                for j0 in starts:
                    m2 = top()
                    m2 = 0.0 if m2 == -np.inf else m2
                    e = np.exp(x[j0:j0 + block] - m2)
                    y[j0:j0 + block] = e / l if l > 0 else 0 * e
            """,
            [
                "times; three passes load each score 3 times",
                "one load per score per pass",
            ],
        ),
        (
            "e stored in y, then y read back",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                m = max(float(np.max(x[j0:j0 + block])) for j0 in starts)
                m = 0.0 if m == -np.inf else m
                l = 0.0
                for j0 in starts:
                    e = np.exp(x[j0:j0 + block] - m)
                    y[j0:j0 + block] = e
                    l += float(e.sum())
                for j0 in starts:
                    y[j0:j0 + block] = y[j0:j0 + block] / l if l > 0 else 0.0
            """,
            ["it loads y", "y is output only"],
        ),
        (
            "score by score",
            """
            def safe_softmax(x, y, block):
                n = len(x)
                m = max(x[j] for j in range(n))
                m = 0.0 if m == -np.inf else m
                l = sum(float(np.exp(x[j] - m)) for j in range(n))
                for j in range(n):
                    y[j] = np.exp(x[j] - m) / l if l > 0 else 0.0
            """,
            ["x was read in", "load one block per step"],
        ),
        (
            "fully masked row gives NaN",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x), block)
                m = max(float(np.max(x[j0:j0 + block])) for j0 in starts)
                l = sum(float(np.exp(x[j0:j0 + block] - m).sum()) for j0 in starts)
                for j0 in starts:
                    y[j0:j0 + block] = np.exp(x[j0:j0 + block] - m) / l
            """,
            ["case 4", "NaN in yours", "a row of only -inf", "store zeros"],
        ),
        (
            "the last, shorter block left out",
            """
            def safe_softmax(x, y, block):
                starts = range(0, len(x) // block * block, block)
                m = max(float(np.max(x[j0:j0 + block])) for j0 in starts)
                m = 0.0 if m == -np.inf else m
                l = sum(float(np.exp(x[j0:j0 + block] - m).sum()) for j0 in starts)
                for j0 in starts:
                    e = np.exp(x[j0:j0 + block] - m)
                    y[j0:j0 + block] = e / l if l > 0 else 0 * e
            """,
            ["case 0", "was never stored", "the last, shorter block"],
        ),
        (
            "returns the softmax instead of storing it",
            """
            def safe_softmax(x, y, block):
                row = x[0:len(x)]
                e = np.exp(row - row.max())
                return e / e.sum()
            """,
            ["y was never stored into", "returns nothing"],
        ),
        (
            "calls lab",
            """
            def safe_softmax(x, y, block):
                for _ in range(3):
                    row = x[0:len(x)]
                y[0:len(x)] = lab.softmax_safe(row)
            """,
            ["calls lab.softmax_safe"],
        ),
        (
            "torch's softmax",
            """
            import torch
            def safe_softmax(x, y, block):
                for _ in range(3):
                    row = x[0:len(x)]
                y[0:len(x)] = torch.softmax(torch.from_numpy(row), dim=-1).nan_to_num(0.0).numpy()
            """,
            ["calls torch.softmax", "asks for numpy"],
        ),
        (
            "numpy's logaddexp.reduce",
            """
            def safe_softmax(x, y, block):
                for _ in range(3):
                    row = x[0:len(x)]
                with np.errstate(all="ignore"):
                    y[0:len(x)] = np.nan_to_num(np.exp(row - np.logaddexp.reduce(row)))
            """,
            ["calls numpy.logaddexp.reduce"],
        ),
    ],
    4: [
        (
            "the wrong axis",
            """
            def log_sum_exp(s):
                m = s.max(axis=0, keepdims=True)
                m = np.where(np.isneginf(m), 0.0, m)
                with np.errstate(divide="ignore"):
                    return m[0] + np.log(np.exp(s - m).sum(axis=0))
            """,
            ["case 0", "one number per column", "axis=-1"],
        ),
        (
            "as written",
            """
            def log_sum_exp(s):
                return np.log(np.exp(s).sum(axis=-1))
            """,
            ["case 1", "inf in yours", "take each row's max out first"],
        ),
        (
            "m not added back",
            """
            def log_sum_exp(s):
                m = s.max(axis=-1, keepdims=True)
                m = np.where(np.isneginf(m), 0.0, m)
                return np.log(np.exp(s - m).sum(axis=-1))
            """,
            ["case 0", "expected 5.00034, got 0.000335406", "add m back"],
        ),
        (
            "fully masked row gives NaN",
            """
            def log_sum_exp(s):
                m = s.max(axis=-1, keepdims=True)
                return m[:, 0] + np.log(np.exp(s - m).sum(axis=-1))
            """,
            ["case 2", "NaN in yours at index [0]", "log 0 = -inf"],
        ),
        (
            "a +inf score: only -inf guarded",
            """
            def log_sum_exp(s):
                m = s.max(axis=-1, keepdims=True)
                m = np.where(np.isneginf(m), 0.0, m)
                with np.errstate(divide="ignore", invalid="ignore"):
                    return m[:, 0] + np.log(np.exp(s - m).sum(axis=-1))
            """,
            ["case 4", "a row with a +∞ score", "np.isinf(m)"],
        ),
        (
            "keeps the row axis",
            """
            def log_sum_exp(s):
                m = s.max(axis=-1, keepdims=True)
                m = np.where(np.isneginf(m), 0.0, m)
                return m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True))
            """,
            ["shape: yours is (3, 1), expected (3,)", "drop keepdims"],
        ),
        (
            "torch's logsumexp",
            """
            import torch
            def log_sum_exp(s):
                return torch.logsumexp(torch.from_numpy(s), dim=-1).numpy()
            """,
            ["calls torch.logsumexp", "asks for numpy"],
        ),
        (
            "numpy's logaddexp.reduce",
            """
            def log_sum_exp(s):
                return np.logaddexp.reduce(s, axis=-1)
            """,
            ["calls numpy.logaddexp.reduce", "write the steps yourself"],
        ),
    ],
}


@pytest.mark.parametrize(
    "number, source, says",
    [(n, s, says) for n, cases in PLANTED.items() for _, s, says in cases],
    ids=[f"{n}-{name}" for n, cases in PLANTED.items() for name, _, _ in cases],
)
def test_planted_mistake_is_diagnosed(number, source, says):
    _fails(number, source, *says)


# ------------------------------------------------------------------------------------ the checks, called directly


def test_checks_called_directly_name_a_lambda_and_leave_the_formats_as_they_were(
    capsys,
):
    def ok(x, y, block):
        starts = range(0, len(x), block)
        m = max(float(np.max(x[j0 : j0 + block])) for j0 in starts)
        m = 0.0 if m == -np.inf else m
        l = sum(float(np.exp(x[j0 : j0 + block] - m).sum()) for j0 in starts)
        for j0 in starts:
            e = np.exp(x[j0 : j0 + block] - m)
            y[j0 : j0 + block] = e / l if l > 0 else 0 * e

    checks.check_safe_softmax(ok)
    checks.check_log_sum_exp(lambda s: np.log(np.exp(s).sum(axis=-1)))
    checks.check_row_overflow(
        lambda name, k: {"fp16": 12, "fp32": 89, "fp64": 710}[name]
    )
    out = capsys.readouterr().out
    assert out.startswith("ok: ✓ passed 11 cases")
    assert "log_sum_exp: ✗ case 1" in out
    assert "row_overflow: ✗ case 1 ('fp16', 4096)" in out
    assert list(lab.SOFTMAX_DTYPES) == ["fp16", "bf16", "fp32", "fp64"]


@pytest.mark.parametrize("seed", range(40))
def test_row_overflow_cases_drawn_afresh_agree_with_the_formula(seed, capsys):
    """The scan the check compares with, and the formula the worked solution uses, agree on every drawn case."""
    ns = {"np": np, "lab": lab}
    exec(EX[2].solution, ns)
    checks.check_row_overflow(ns["row_overflow"], seed=seed)
    assert capsys.readouterr().out == "row_overflow: ✓ passed 10 cases\n"


def test_row_overflow_reference_is_a_scan_of_the_naive_softmax():
    """The reference breaks exactly where lab.softmax_naive of k equal scores first stops giving 1/k."""
    for name, k in (("fp16", 4096), ("fp32", 3), ("fp64", 1)):
        s = checks._row_breaks(name, k)
        dtype = lab.SOFTMAX_DTYPES[name]
        before = lab.softmax_naive(np.full(k, s - 1, dtype=dtype)).astype(np.float64)
        at = lab.softmax_naive(np.full(k, s, dtype=dtype)).astype(np.float64)
        assert np.allclose(before, 1 / k, rtol=1e-2) and not np.allclose(at, 1 / k)


def test_safe_softmax_check_counts_stores_into_x(capsys):
    def writes_x(x, y, block):
        starts = range(0, len(x), block)
        m = max(float(np.max(x[j0 : j0 + block])) for j0 in starts)
        m = 0.0 if m == -np.inf else m
        l = sum(float(np.exp(x[j0 : j0 + block] - m).sum()) for j0 in starts)
        for j0 in starts:
            e = np.exp(x[j0 : j0 + block] - m)
            y[j0 : j0 + block] = e / l if l > 0 else 0 * e
        x[0] = 0.0

    checks.check_safe_softmax(writes_x)
    assert "it writes into x" in capsys.readouterr().out


def test_checks_never_print_numpy_warnings_of_their_own_references(recwarn):
    checks.check_log_sum_exp(lambda s: np.full(s.shape[0], 0.0))
    checks.check_safe_softmax(lambda x, y, block: None)
    assert not [w for w in recwarn if "lab/checks" in w.filename]


def test_no_cell_above_exercise_2_works_a_row_of_n_equal_scores():
    import nbformat
    from exercise_support import ROOT

    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    stub = next(
        i for i, c in enumerate(cells) if c.source.startswith("# Exercise 2: your code")
    )
    assert not any("log M" in c.source or "np.log(M)" in c.source for c in cells[:stub])


@pytest.mark.parametrize("how", sorted(EVASIONS))
@pytest.mark.parametrize(
    "number, name, cheat",
    [
        (
            1,
            "row_edges",
            "def row_edges(name):\n"
            "    e = lab.exp_limits(name)\n"
            "    crowd = float(np.exp(-np.arange(4.0)).sum())\n"
            "    return e['log_max'], e['log_max'] - np.log(crowd), e['log_normal']\n",
        ),
        (
            2,
            "row_overflow",
            "def row_overflow(name, k):\n    return checks._row_breaks(name, k)\n",
        ),
        (
            3,
            "safe_softmax",
            "def safe_softmax(x, y, block):\n"
            "    for _ in range(3):\n"
            "        row = x[0:len(x)]\n"
            "    y[0:len(x)] = lab.softmax_safe(row)\n",
        ),
    ],
)
def test_lab_s_answer_is_refused_behind_an_evasion(number, name, cheat, how):
    out = run_check(EX[number], evading(cheat, name, how), {"checks": checks})
    assert "✗" in out and "✓" not in out, out
    assert EVASIONS[how][1] in out or "calls lab." in out, out


@pytest.mark.parametrize(
    "predicted, says",
    [(3, "s = 3; the scan: s = 3 ✓"), (4, "✗ (off by +1)"), (12, "✗ (off by +9)")],
)
def test_the_written_prediction_is_compared_with_the_scan(predicted, says, capsys):
    ns = {"np": np, "lab": lab}
    exec(EX[2].solution, ns)
    checks.check_row_overflow(ns["row_overflow"], predicted=predicted)
    out = capsys.readouterr().out
    assert out.startswith("row_overflow: ✓ passed 10 cases\n") and says in out, out


def test_an_unwritten_prediction_does_not_give_the_answer_away(capsys):
    checks.check_row_overflow(lambda name, k: 0, predicted=...)
    out = capsys.readouterr().out
    assert "not written yet" in out and "s = 3" not in out


_EDGES = """
            import math
            import ml_dtypes
            def row_edges(name):
                info = ml_dtypes.finfo(lab.SOFTMAX_DTYPES[name])
                top = math.log(float(info.max))
                crowd = 1 + math.exp(-1) + math.exp(-2) + math.exp(-3)
                return TOP, ROW, LOW
            """


@pytest.mark.parametrize(
    "top, row, low, says",
    [
        (
            "math.log2(float(info.max))",
            "top - math.log(crowd)",
            "math.log(float(info.smallest_normal))",
            "log2 Ω",
        ),
        (
            "top",
            "top",
            "math.log(float(info.smallest_normal))",
            "where e^s alone overflows",
        ),
        (
            "top",
            "top - math.log(4)",
            "math.log(float(info.smallest_normal))",
            "log 4 counts four terms",
        ),
        (
            "top",
            "top + math.log(crowd)",
            "math.log(float(info.smallest_normal))",
            "the shift points the wrong way",
        ),
        (
            "top",
            "top - math.log(crowd)",
            "math.log(float(info.smallest_subnormal))",
            "the smallest subnormal",
        ),
        ("top", "top - math.log(crowd)", "math.log(float(info.eps))", "that is log ε"),
    ],
    ids=["log2", "no shift", "log 4", "sign", "subnormal", "eps"],
)
def test_the_row_edges_check_names_each_planted_mistake(top, row, low, says):
    text = _EDGES.replace("TOP", top).replace("ROW", row).replace("LOW", low)
    _fails(1, text, says)


def test_the_row_edges_hint_names_only_the_wrong_element():
    """One wrong element: its hint alone, not the three facts; two wrong: each named with its own."""
    one = _EDGES.replace("TOP", "top").replace("ROW", "top - math.log(4)")
    out = _fails(1, one.replace("LOW", "math.log(float(info.smallest_normal))"), "")
    hint = out.split("hint: ")[1].splitlines()[0]
    assert hint.startswith("the row's edge: log 4 counts four terms"), hint
    assert "log Ω:" not in hint and "smallest normal" not in hint, hint
    two = one.replace("LOW", "math.log(float(info.eps))")
    out = _fails(1, two, "the row's edge: log 4 counts four terms")
    hint = out.split("hint: ")[1].splitlines()[0]
    assert "log(smallest normal): that is log ε" in hint and "log Ω:" not in hint, hint


def test_the_row_edges_check_names_one_format_for_every_name():
    _fails(
        1,
        """
        import math
        import numpy as np
        def row_edges(name):
            info = np.finfo(np.float32)
            top = math.log(float(info.max))
            crowd = 1 + math.exp(-1) + math.exp(-2) + math.exp(-3)
            return top, top - math.log(crowd), math.log(float(info.smallest_normal))
        """,
        "fp32's answer for every name",
    )


def test_a_table_of_edges_fails_on_the_fresh_names():
    ns = {"np": np, "lab": lab}
    exec(EX[1].solution, ns)
    table = {n: ns["row_edges"](n) for n in ("fp16", "bf16", "fp32", "fp64")}
    out = run_check(
        EX[1], "def row_edges(name):\n    return TABLE[name]\n", {"TABLE": table}
    )
    assert "✗" in out and "look the dtype up in lab.SOFTMAX_DTYPES[name]" in out, out


@pytest.mark.parametrize(
    "predicted, says",
    [(11, "s = 11; the scan: s = 11 ✓"), (12, "✗ (off by +1)")],
)
def test_the_row_edges_prediction_is_compared_with_the_scan(predicted, says):
    out = run_check(EX[1], EX[1].solution, {"predicted_fp16": predicted})
    assert out.startswith("row_edges: ✓ passed 6 cases\n") and says in out, out


def test_a_table_of_row_breaks_gets_no_misleading_hint(capsys):
    table = {
        ("fp16", 1): 12,
        ("fp16", 4096): 3,
        ("fp32", 1000): 82,
        ("fp64", 100_000): 699,
    }
    checks.check_row_overflow(lambda n, k: table.get((n, k), 5))
    out = capsys.readouterr().out
    assert "✗" in out and "log2" not in out and "M·e^s exceeds Ω" in out, out


def test_one_format_s_omega_for_every_name_is_named(capsys):
    big = float(np.finfo(np.float32).max)
    checks.check_row_overflow(lambda n, k: int(np.floor(np.log(big) - np.log(k))) + 1)
    out = capsys.readouterr().out
    assert "✗" in out and "fp32's Ω for every format" in out, out


def test_each_block_s_own_max_is_named(capsys):
    def own_max(x, y, block):
        starts = range(0, len(x), block)
        tops = [float(np.max(x[j : j + block])) for j in starts]
        tops = [0.0 if t == -np.inf else t for t in tops]
        l = sum(float(np.exp(x[j : j + block] - t).sum()) for j, t in zip(starts, tops))
        for j in starts:
            top = float(np.max(x[j : j + block]))
            e = np.exp(x[j : j + block] - (0.0 if top == -np.inf else top))
            y[j : j + block] = e / l if l > 0 else 0 * e

    checks.check_safe_softmax(own_max)
    out = capsys.readouterr().out
    assert "✗" in out and "shifted by its own max, in l and in y" in out, out


def test_a_block_max_in_pass_3_only_is_named(capsys):
    """m and l right (passes 1 and 2), but pass 3 shifts each block by its own max."""

    def pass_3_own_max(x, y, block):
        starts = range(0, len(x), block)
        m = max(float(np.max(x[j : j + block])) for j in starts)
        m = 0.0 if m == -np.inf else m
        l = sum(float(np.exp(x[j : j + block] - m).sum()) for j in starts)
        for j in starts:
            top = float(np.max(x[j : j + block]))
            e = np.exp(x[j : j + block] - (0.0 if top == -np.inf else top))
            y[j : j + block] = e / l if l > 0 else 0 * e

    checks.check_safe_softmax(pass_3_own_max)
    out = capsys.readouterr().out
    assert "✗" in out and "m and l are right, but pass 3 shifted each block" in out, out
    assert "in l and in y" not in out, out


@pytest.mark.parametrize(
    "predicted, says", [(6, "the right value: s = 6 ✓"), (7, "✗ (off by +1)")]
)
def test_the_fp8_prediction_is_compared_with_the_derived_edge(predicted, says, capsys):
    """fp8 e4m3 (Ω = 448) is a format the text does not work: its row breaks at 6, e^s alone at 7."""
    ns = {"np": np, "lab": lab}
    exec(EX[1].solution, ns)
    checks.check_row_edges(ns["row_edges"], predicted=11, predicted_fp8=predicted)
    out = capsys.readouterr().out
    assert out.startswith("row_edges: ✓ passed 6 cases\n") and says in out, out
    assert np.exp(6) < 448 < np.exp(7)


def test_the_opening_states_both_low_regimes_and_a_cell_computes_where_each_begins():
    """Very negative scores: finite, summing to 1 and wrong in the subnormal band, then 0/0 = NaN once every
    e^x rounds to 0. The opening says both; the scan cell prints where each begins, as lab computes it."""
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    opening = next(c.source for c in cells if c.source.startswith("# 01"))
    assert "subnormal" in opening and "0/0" in opening and "sum to 1" in opening
    scans = [
        c
        for c in cells
        if c.source.startswith(("# fp16 going down", "# fp16, the same"))
    ]
    assert len(scans) == 2
    printed = "".join(o.get("text", "") for c in scans for o in c.outputs)
    s = np.round(np.arange(0, -20, -0.01), 2)
    x = lab.score_row(s, "fp16")
    y = lab.softmax_naive(x).astype(np.float64)
    broken = lab.softmax_broken(y, lab.softmax_safe(x.astype(np.float64)), "fp16")
    first_nan = s[np.isnan(y).any(axis=1)].max()
    assert f"first NaN s: ‹{first_nan:.2f}›; NaN below it: True" in printed, printed
    first = s[broken.argmax()]
    assert f"first broken s: ‹{first:.2f}›, just above -9.70: True" in printed, printed
    # an integer scan flatters fp16: -10 and -11 work, -10.25 between them does not
    assert "s = -10: works, -10.25: broken, -11: works" in printed


def test_the_fine_scan_finds_the_lower_edge_an_integer_scan_misses():
    """`break_points` scans s 0.01 apart: fp16's first break going down sits just above log(smallest normal),
    above the integer scan's, and some s below it still work."""
    from lab.overflow import break_points

    for name in lab.SOFTMAX_DTYPES:
        fine, lim = break_points(name), lab.exp_limits(name)
        assert 0 < fine["below"] - lim["log_normal"] < 0.5, (name, fine)
        # the integers are on the grid: the fine edge is never below the integer one
        assert fine["below"] >= lab.first_broken_score(name, direction=-1)
        if name != "bf16":  # bf16's coarse grid of s leaves no lucky s below its edge
            assert fine["lowest_working"] < fine["below"], (name, fine)
        crowd = float(np.log(np.exp(-np.arange(4.0)).sum()))
        assert abs(fine["above"] - (lim["log_max"] - crowd)) < 0.05, (name, fine)
    assert (
        break_points("fp16")["below"] > lab.first_broken_score("fp16", direction=-1) + 2
    )
    with pytest.raises(ValueError, match="step"):
        break_points("fp16", step=0)
    with pytest.raises(ValueError, match="dtype"):
        break_points("fp12")


def test_exercise_3_a_masked_row_may_skip_pass_3_s_loads():
    """A row of only -inf has l = 0: its zeros need no score, so a pass 3 that stores them without loading
    x passes."""
    skip = """
        def safe_softmax(x, y, block):
            starts = range(0, len(x), block)
            m = max(float(np.max(x[j0 : j0 + block])) for j0 in starts)
            m = 0.0 if m == -np.inf else m
            l = sum(float(np.exp(x[j0 : j0 + block] - m).sum()) for j0 in starts)
            for j0 in starts:
                n = min(block, len(x) - j0)
                y[j0 : j0 + block] = np.exp(x[j0 : j0 + block] - m) / l if l > 0 else np.zeros(n)
        """
    assert "✓" in run_check(EX[3], source(skip))


def test_the_safe_shift_is_asked_for_before_it_is_shown():
    """Section 3 asks which shift c keeps every term <= 1 and the sum >= 1; the answer (the row's max, the
    shifted sum, the guard for a masked row) appears only after exercise 3's check."""
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    text = [c.source for c in cells]
    stub = next(
        i for i, s in enumerate(text) if s.startswith("# Exercise 3: your code")
    )
    check_cell = next(
        i for i, s in enumerate(text) if s.startswith("# Exercise 3: check")
    )
    revealed = next(
        i for i, s in enumerate(text) if s.startswith("### The shift, revealed")
    )
    above = "\n".join(text[:stub])
    assert "**Which $c$**" in above
    assert "e^{x_i - m}" not in above and "e^{x_j - m}" not in above
    assert (
        "max first" not in above and "A fully masked row needs one guard" not in above
    )
    assert revealed > check_cell and "m = \\max_j x_j" in text[revealed]


def test_a_torch_imported_inside_the_function_is_named_plainly():
    """A first `import torch` inside the learner's function records torch's own module code; the refusal says
    "torch", not its internals."""
    from lab.checks.softmax import _refusal

    seen = ["torch.<module>", "torch.torch_version.TorchVersion", "torch.SymInt"]
    said = _refusal(seen)
    assert said.startswith("it calls torch:") and "asks for numpy" in said
    assert "TorchVersion" not in said and "<module>" not in said
    assert "calls torch.softmax" in _refusal(
        ["torch.softmax"]
    )  # an op, when seen, is named
