"""Notebook 01's exercises: each worked solution passes its own check cell, each planted classic mistake fails
with its diagnosis, and the checks of lab/checks/softmax.py used there behave when called directly."""

import numpy as np
import pytest
from exercise_support import assert_fails, exercises, run_check, source

import lab
from lab.checks import softmax as checks

NAME = "01_three_pass_softmax"
EX = {ex.number: ex for ex in exercises(NAME)}
PASSED = {
    1: "first_overflow: ✓ passed 6 cases\n",
    2: "safe_softmax: ✓ passed 8 cases\n",
    3: "log_sum_exp: ✓ passed 7 cases\n",
}


def _src(text: str) -> str:
    return source(text)


def _fails(number: int, text: str, *says: str) -> str:
    return assert_fails(EX[number], text, *says)


def test_the_notebook_has_three_checked_exercises():
    assert sorted(EX) == [1, 2, 3]


@pytest.mark.parametrize("number", [1, 2, 3])
def test_worked_solution_passes(number):
    assert run_check(EX[number], EX[number].solution) == PASSED[number]


@pytest.mark.parametrize("number", [1, 2, 3])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_the_build_spec_states_properties_not_the_code():
    spec, solution = EX[2].spec, EX[2].solution
    assert (
        "(build)" in spec
        and "row of only $-\\infty$" in spec
        and "stays as it was" in spec
    )
    code = [line.split("#")[0].strip() for line in solution.splitlines()[2:]]
    assert not any(len(line) > 4 and line in spec for line in code)  # not `)`


_FINFO = """
            import ml_dtypes
            def _max(name):
                dtype = lab.SOFTMAX_DTYPES[name]
                return float((ml_dtypes.finfo(dtype) if dtype is ml_dtypes.bfloat16 else np.finfo(dtype)).max)
            """

PLANTED = {
    1: [
        (
            "rounded down",
            _FINFO
            + """
            def first_overflow(name):
                return int(np.floor(np.log(_max(name))))
            """,
            ["case 0 ('fp16')", "expected 12, got 11", "the next one"],
        ),
        (
            "log2",
            _FINFO
            + """
            def first_overflow(name):
                return int(np.ceil(np.log2(_max(name))))
            """,
            ["got 16", "log2(max)"],
        ),
        (
            "calls the scan",
            """
            def first_overflow(name):
                return lab.first_exp_overflow(name)
            """,
            ["calls lab.first_exp_overflow"],
        ),
        (
            "a table of the four answers",
            """
            def first_overflow(name):
                return {"fp16": 12, "bf16": 89, "fp32": 89, "fp64": 710}[name]
            """,
            [
                "case 4 ('format_",
                "raised KeyError",
                "no table of the four answers passes",
            ],
        ),
        (
            "its own table of dtypes",
            """
            import ml_dtypes
            def first_overflow(name):
                dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32, "fp64": np.float64}[name]
                return int(np.ceil(np.log(float(ml_dtypes.finfo(dtype).max))))
            """,
            ["case 4", "lab.SOFTMAX_DTYPES[name]"],
        ),
        (
            "the scan, by its module and another name",
            """
            from lab.overflow import first_exp_overflow as scan
            def first_overflow(name):
                return scan(name)
            """,
            ["calls lab.first_exp_overflow", "write it yourself"],
        ),
    ],
    2: [
        (
            "e^(s - lse) with numpy's log-sum-exp",
            """
            def safe_softmax(s):
                with np.errstate(divide="ignore", invalid="ignore"):
                    lse = np.logaddexp.reduce(s, axis=-1, keepdims=True)
                    return np.nan_to_num(np.exp(s - lse))
            """,
            ["calls numpy.logaddexp.reduce", "write the steps yourself"],
        ),
        (
            "no max subtracted",
            """
            def safe_softmax(s):
                e = np.exp(s)
                return e / e.sum(axis=-1, keepdims=True)
            """,
            ["case 1", "NaN in yours", "subtract each row's max first"],
        ),
        (
            "one max for the whole array",
            """
            def safe_softmax(s):
                e = np.exp(s - s.max())
                return e / e.sum(axis=-1, keepdims=True)
            """,
            ["case 1", "NaN in yours at index [1, 0]", "max of the whole array"],
        ),
        (
            "max without keepdims",
            """
            def safe_softmax(s):
                e = np.exp(s - s.max(axis=-1))
                return e / e.sum(axis=-1, keepdims=True)
            """,
            ["case 0", "raised ValueError", "keepdims=True"],
        ),
        (
            "fully masked row gives NaN",
            """
            def safe_softmax(s):
                e = np.exp(s - s.max(axis=-1, keepdims=True))
                return e / e.sum(axis=-1, keepdims=True)
            """,
            [
                "case 3",
                "NaN in yours at index [0, 0]",
                "a row of only -inf",
                "shift it by 0",
            ],
        ),
        (
            "softmax down the columns",
            """
            def safe_softmax(s):
                e = np.exp(s - s.max(axis=0, keepdims=True))
                return e / e.sum(axis=0, keepdims=True)
            """,
            ["case 0", "each column sums to 1"],
        ),
        (
            "changes s in place",
            """
            def safe_softmax(s):
                m = s.max(axis=-1, keepdims=True)
                s -= np.where(np.isneginf(m), 0.0, m)
                e = np.exp(s)
                l = e.sum(axis=-1, keepdims=True)
                return np.divide(e, l, out=np.zeros_like(e), where=l > 0)
            """,
            ["case 0", "changes its input in place"],
        ),
        (
            "a masked row made uniform",
            """
            def safe_softmax(s):
                s = np.nan_to_num(s)                     # -inf becomes the most negative float
                e = np.exp(s - s.max(axis=-1, keepdims=True))
                return e / e.sum(axis=-1, keepdims=True)
            """,
            ["case 3", "expected 0, got 0.333333", "came out uniform"],
        ),
        (
            "the NaN made, then hidden",
            """
            def safe_softmax(s):
                e = np.exp(s - s.max(axis=-1, keepdims=True))
                return np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
            """,
            ["case 3", "makes a NaN", "hides it", "where=l > 0"],
        ),
        (
            "calls lab",
            """
            def safe_softmax(s):
                return lab.softmax_safe(s)
            """,
            ["calls lab.softmax_safe"],
        ),
        (
            "torch's softmax",
            """
            import torch
            def safe_softmax(s):
                return torch.softmax(torch.from_numpy(s), dim=-1).nan_to_num(0.0).numpy()
            """,
            ["calls torch.softmax", "asks for numpy"],
        ),
        (
            "a Tensor method",
            """
            import torch
            def safe_softmax(s):
                return torch.tensor(s).softmax(-1).nan_to_num(0.0).numpy()
            """,
            ["calls torch.Tensor.softmax", "asks for numpy"],
        ),
        (
            "a shift of 0 hides a NaN: np.nan_to_num",
            """
            def safe_softmax(s):
                m = s.max(axis=-1, keepdims=True)
                e = np.exp(s - m)
                return np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
            """,
            ["makes a NaN", "hides it"],
        ),
    ],
    3: [
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


def _numpy_knows_bf16() -> bool:
    """Whether the installed numpy's `finfo` describes ml_dtypes' bf16 (newer releases of the two do)."""
    import ml_dtypes

    try:
        return float(np.finfo(ml_dtypes.bfloat16).max) == float(
            ml_dtypes.finfo(ml_dtypes.bfloat16).max
        )
    except ValueError:
        return False


def test_numpy_finfo_for_bf16_follows_the_installed_numpy():
    """np.finfo for every format is right where numpy knows bf16 and a diagnosed mistake where it does not:
    the check follows what the library does, on every version the course's ranges admit."""
    text = """
        def first_overflow(name):
            return int(np.ceil(np.log(float(np.finfo(lab.SOFTMAX_DTYPES[name]).max))))
        """
    if _numpy_knows_bf16():
        out = run_check(EX[1], source(text))
        assert "✓" in out and "✗" not in out, out
    else:
        _fails(1, text, "case 1 ('bf16') raised ValueError", "ml_dtypes.finfo does")


# ------------------------------------------------------------------------------------ the checks, called directly


def test_safe_softmax_check_passes_lab_shaped_answers_and_names_a_lambda(capsys):
    def ok(s):
        m = s.max(axis=-1, keepdims=True)
        m = np.where(np.isneginf(m), 0.0, m)
        e = np.exp(s - m)
        l = e.sum(axis=-1, keepdims=True)
        return np.divide(e, l, out=np.zeros_like(e), where=l > 0)

    checks.check_safe_softmax(ok)
    checks.check_log_sum_exp(lambda s: np.log(np.exp(s).sum(axis=-1)))
    checks.check_first_overflow(
        lambda name: {"fp16": 12, "bf16": 89, "fp32": 89, "fp64": 710}[name]
    )
    out = capsys.readouterr().out
    assert out.startswith("ok: ✓ passed 8 cases\nlog_sum_exp: ✗ case 1")
    assert "first_overflow: ✗ case 4 ('format_" in out and "✓ passed 6" not in out
    assert list(lab.SOFTMAX_DTYPES) == ["fp16", "bf16", "fp32", "fp64"]


def test_checks_never_print_numpy_warnings_of_their_own_references(recwarn):
    checks.check_log_sum_exp(lambda s: np.full(s.shape[0], 0.0))
    checks.check_safe_softmax(lambda s: np.zeros_like(s))
    assert not [w for w in recwarn if "lab/checks" in w.filename]
