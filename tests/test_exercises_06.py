"""Notebook 06's exercises, in its two parts (06_flashattention2: the arithmetic and its time;
06_flashattention2_parallelism: the parallel work): each worked solution passes its own check cell, each planted
classic mistake fails with its diagnosis, and the instrument and checks of lab/checks/fa2.py behave."""

import contextlib
import io
import re

import nbformat
import numpy as np
import pytest
from exercise_support import (
    EVASIONS,
    ROOT,
    assert_fails,
    evading,
    exercises,
    notebook_cells,
    run_check,
    source,
)

import lab
from lab.checks import fa2 as checks
from lab.checks._support import _fresh
from lab.checks.fa2 import Watched

NAME, NAME2 = "06_flashattention2", "06_flashattention2_parallelism"
_PART1 = {ex.number: ex for ex in exercises(NAME)}
_PART2 = {ex.number: ex for ex in exercises(NAME2)}
# the exercises by what they build: part 1's 1 to 5, part 2's 1 and 2
EX = {
    "fa1": _PART1[1],
    "fa2": _PART1[2],
    "time": _PART1[3],
    "afford": _PART1[4],
    "causal": _PART1[5],
    "split_k": _PART2[1],
    "keys_outer": _PART2[2],
}
PASSED = {
    "time": "time_share: ✓ passed 8 cases\n",
    "afford": "affordable_nonmatmul: ✓ passed 8 cases\n",
    "causal": "causal_fa2_ops: ✓ passed 9 cases\n",
    "fa1": "fa1_block: ✓ passed 6 cases: tiles of <= Bc keys, one exp a score, "
    "O normalized every block (FA1)\n",
    "fa2": "fa2_block: ✓ passed 6 cases: tiles of <= Bc keys, one exp a score, "
    "acc normalized once (FA2)\n",
    "split_k": "split_k_tile: ✓ passed 5 cases: each warp's state from its own keys, "
    "merged into the tile's\n",
    "keys_outer": "fa1_keys_outer: ✓ 3 cases: keys outside; O, m, l read from HBM and written back "
    "every key block\n",
}


def _src(text: str) -> str:
    return source(text)


def _fails(key: str, text: str, *says: str) -> str:
    return assert_fails(EX[key], text, *says)


_cells = notebook_cells


def test_each_part_has_its_checked_exercises():
    assert sorted(_PART1) == [1, 2, 3, 4, 5] and sorted(_PART2) == [1, 2]


@pytest.mark.parametrize("name", [NAME, NAME2])
def test_each_part_states_its_time_and_names_the_other(name):
    cells = _cells(name)
    other = NAME2 if name == NAME else NAME
    assert "**Time: about" in cells[1][1] and f"{other}.ipynb" in cells[1][1]
    assert cells[2][1].startswith("| symbol | meaning |")


def test_part_2_opens_with_a_recap_of_part_1():
    """Five lines on what part 1 found, before the question of part 2."""
    header = _cells(NAME2)[1][1]
    recap = header.split("Part 1 in five lines:")[1].split("\n\n")[1]
    assert len([ln for ln in recap.splitlines() if ln.startswith("- ")]) == 5


@pytest.mark.parametrize("key", list(EX))
def test_worked_solution_passes_with_one_fixed_line(key):
    assert run_check(EX[key], EX[key].solution) == PASSED[key]


@pytest.mark.parametrize("key", list(EX))
def test_stub_reports_not_implemented(key):
    assert "not implemented yet" in run_check(EX[key], EX[key].stub)


def test_the_exercise_section_needs_only_the_setup():
    """The checks build their own cases: nothing from the notebook's body (q, k, v, split, ...) is used."""
    ns = {}
    for key, names in (
        (
            "causal",
            {
                "check_affordable_nonmatmul",
                "check_causal_fa2_ops",
                "check_fa1_block",
                "check_time_share",
            },
        ),
        ("keys_outer", {"check_fa1_keys_outer", "check_split_k_tile"}),
    ):
        ns = {}
        for src in EX[key].setup + EX[key].before:
            exec(compile(src, "<setup>", "exec"), ns)
        assert names <= set(ns)
        assert not {"q", "k", "v", "split", "whole"} & set(ns)


def test_part_2_exercise_1_comes_before_the_exchange_it_counts():
    """Split-K's exchange, w·Br·(d_v + 2) values, is stated only after the exercise that builds it."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    text = [c.source for c in nb.cells]
    start = next(i for i, t in enumerate(text) if t.startswith("## 2."))
    ex2 = next(i for i, t in enumerate(text) if t.startswith("### Exercise 1"))
    cost = next(i for i, t in enumerate(text) if t.startswith("### What the exchange"))
    assert start < ex2 < cost and "d_v + 2" in text[cost]
    shown = "\n".join(
        t
        for t, c in zip(text[:cost], nb.cells)
        if "solution" not in c.metadata.get("tags", [])
    )
    assert "d_v + 2" not in shown and "dv + 2" not in shown


def test_exercises_1_and_2_come_before_the_rules_they_derive():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    text = [c.source for c in nb.cells]
    first = next(i for i, t in enumerate(text) if t.startswith("### Exercise 1"))
    second = next(i for i, t in enumerate(text) if t.startswith("### Exercise 2"))
    reveal = next(
        i for i, t in enumerate(text) if t.startswith("### The two rules, revealed")
    )
    assert (
        first
        < second
        < reveal
        < next(i for i, t in enumerate(text) if t.startswith("## 2."))
    )
    shown = "\n".join(
        t
        for t, c in zip(text[:reveal], nb.cells)
        if "solution" not in c.metadata.get("tags", [])
    )
    rules = (
        "acc'",
        "alpha =",
        "alpha *",
        "\\alpha =",
        "m_new",
        "diag(l')",
        "e^{m - m'}",
    )
    for rule in rules + ("l' =",):
        assert rule not in shown, rule


def test_exercise_4_accepts_the_exponential_s_multiply_charged():
    with_multiply = """
def affordable_nonmatmul(d, share):
    a100 = lab.chip("A100")
    t_mm = 4 * d / a100["matmul_flops"]
    t_non = share / (1 - share) * t_mm
    t_exp = 1 / lab.exp_rate("A100") + 1 / a100["nonmatmul_flops"]  # exp2 and x * log2(e)
    return (t_non - t_exp) * a100["nonmatmul_flops"]
"""
    out = run_check(EX["afford"], _src(with_multiply))
    assert "✓ passed 8 cases" in out and "multiply by log2 e" in out, out


# ------------------------------------------------------------------------------------ part 1, exercise 3: the time-share model


TIME_SHARE = """
def time_share(N, d, B, variant, chip):
    T, rate = N // B, lab.chip(chip)
    fa1 = variant == "fa1"
    n_exp = N * N + (2 if fa1 else 1) * N * T
    n_mul = N * T * ((2 * d + 3) if fa1 else (d + 1))
    n_div = N * T * d if fa1 else N * d
    t_matmul = 4 * N * N * d / rate["matmul_flops"]
    t_exp = n_exp / rate["exp_per_s"]
    t_rest = (3 * N * N + n_mul + n_div) / rate["nonmatmul_flops"]
    share = (t_exp + t_rest) / (t_matmul + t_exp + t_rest)
    return t_matmul, t_exp, t_rest, share
"""


def _time(old: str, new: str) -> str:
    assert old in TIME_SHARE, old
    return "import lab\n" + TIME_SHARE.replace(old, new)


def test_time_share_written_otherwise_passes():
    assert run_check(EX["time"], _src("import lab\n" + TIME_SHARE)) == PASSED["time"]


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            '/ rate["matmul_flops"]',
            '/ rate["nonmatmul_flops"]',
            "matmuls priced at the FP32",
        ),
        (
            'n_exp / rate["exp_per_s"]',
            'n_exp / rate["nonmatmul_flops"]',
            "exponentials priced as FP32",
        ),
        ('fa1 = variant == "fa1"', "fa1 = True", "the other variant's rescaling"),
        (" + n_div) /", ") /", "the divides left out"),
        ("(3 * N * N + n_mul", "(n_mul", "max, subtraction and sum left out"),
        ("(2 if fa1 else 1) * N * T", "0", "rescale factors' exponentials left out"),
        (
            "N * T * d if fa1 else N * d",
            "N * T * d",
            "FA2's division at every key block",
        ),
        ("t_matmul = 4 *", "t_matmul = 2 *", "half the matmul FLOPs"),
        (
            '/ rate["nonmatmul_flops"]\n',
            '/ rate["nonmatmul_flops"] * 2\n',
            "one operation a slot",
        ),
        ("/ (t_matmul + t_exp + t_rest)", "/ t_matmul", "share of the total time"),
        ("share = (t_exp", "share = 1 - (t_exp", "the matmuls' share"),
    ],
)
def test_time_share_mistakes(old, new, says):
    _fails("time", _time(old, new), "✗ case", says)


def test_time_share_exponentials_folded_into_the_rest_are_named():
    src = _time('t_exp = n_exp / rate["exp_per_s"]', "t_exp = 0.0").replace(
        "(3 * N * N + n_mul", "(3 * N * N + n_exp + n_mul"
    )
    _fails("time", src, "exponentials counted among the FP32 operations")


def test_time_share_fa1_counts_for_fa2_only_are_named():
    """FA1's rescaling used for FA2 (and FA2 right for FA1 where it is right): the hint names the variant's count."""
    src = _time('fa1 = variant == "fa1"', "fa1 = True")
    out = run_check(EX["time"], _src(src))
    assert "✗ case 0" in out and "other variant's rescaling" in out, out


def test_time_share_flop_share_is_named():
    src = _time(
        "share = (t_exp + t_rest) / (t_matmul + t_exp + t_rest)",
        "share = (n_exp + 3 * N * N + n_mul + n_div) / (4 * N * N * d + n_exp + 3 * N * N + n_mul + n_div)",
    )
    _fails("time", src, "a share of the FLOPs, not of the time")


def test_time_share_returning_one_number_is_told_the_shape():
    out = _fails(
        "time",
        _time("return t_matmul, t_exp, t_rest, share", "return share"),
        "✗ case 0",
    )
    assert "hint" not in out or "yours is" not in out


@pytest.mark.parametrize(
    "src, says",
    [
        (
            """
            import lab
            def time_share(N, d, B, variant, chip):
                s = lab.flop_split(N, d=d, block_q=B, block_k=B, variant=variant)
                t = lab.gpu_time_share(s["matmul"], s["nonmatmul"], chip, exp=s["exp"])
                return t["t_matmul"], t["t_exp"], t["t_nonmatmul"] - t["t_exp"], t["share"]
            """,
            "calls lab.",
        ),
        (
            """
            import lab
            from lab.tiling import gpu_time_share as model
            def time_share(N, d, B, variant, chip):
                T, rate = N // B, lab.chip(chip)
                fa1 = variant == "fa1"
                e = N * N + (2 if fa1 else 1) * N * T
                rest = 3 * N * N + N * T * ((2 * d + 3) if fa1 else (d + 1))
                rest += N * T * d if fa1 else N * d
                t = model(4 * N * N * d, rest + e, chip, exp=e)
                return t["t_matmul"], t["t_exp"], t["t_nonmatmul"] - t["t_exp"], t["share"]
            """,
            "calls lab.gpu_time_share",
        ),
        (
            """
            import lab
            from lab.tiling import time_rows
            def time_share(N, d, B, variant, chip):
                s = lab.flop_split(N, d=d, block_q=B, block_k=B, variant=variant)
                r = time_rows({variant: s}, chip)[0]
                share = (r["exp"] + r["rest"]) / (r["matmul"] + r["exp"] + r["rest"])
                return r["matmul"] / 1e6, r["exp"] / 1e6, r["rest"] / 1e6, share
            """,
            "calls lab.",
        ),
    ],
)
def test_time_share_through_lab_s_model_is_refused(src, says):
    _fails("time", src, says)


def test_time_share_reference_is_the_closed_form():
    """The check's planted model without a slip is lab's: flop_split's counts priced by gpu_time_share."""
    for case in [
        (4096, 128, 128, "fa2", "A100"),
        (1024, 64, 64, "fa1", "H100"),
        (96, 32, 32, "fa1", "A100"),
    ]:
        assert np.allclose(
            checks._time_model(*case), checks._time_reference(*case), rtol=1e-12, atol=0
        )
    t = checks._time_reference(4096, 128, 128, "fa2", "A100")
    assert round(t[3], 3) == 0.274  # section 3's table: 27.4 %


def test_time_share_fresh_cases_come_again_from_the_seed(capsys):
    wrong = lambda N, d, B, variant, chip: checks._time_model(
        N, d, B, variant, chip, no_div=True
    )  # noqa: E731
    checks.check_time_share(wrong, seed=7)
    first = capsys.readouterr().out
    checks.check_time_share(wrong, seed=7)
    assert capsys.readouterr().out == first and "seed=7" in first


def test_time_share_table_of_fixed_cases_fails_on_the_fresh_ones():
    table = {
        c: checks._time_reference(*c)
        for c in [
            (4096, 128, 128, "fa2", "A100"),
            (4096, 128, 128, "fa1", "A100"),
            (1024, 64, 64, "fa1", "H100"),
            (2048, 64, 128, "fa2", "H100"),
        ]
    }
    out = run_check(
        EX["time"],
        "def time_share(N, d, B, variant, chip):\n    return TABLE.get((N, d, B, variant, chip), (0, 0, 0, 0))\n",
        extra={"TABLE": table},
    )
    assert re.search(r"✗ case [4-7] ", out) and "seed" in out, out


def test_exercise_3_comes_before_the_model_it_builds():
    """lab.gpu_time_share and the time table appear only after exercise 3's check."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    text = [c.source for c in nb.cells]
    start = next(i for i, t in enumerate(text) if t.startswith("## 3."))
    ex = next(i for i, t in enumerate(text) if t.startswith("### Exercise 3"))
    reveal = next(
        i for i, t in enumerate(text) if t.startswith("### The model, revealed")
    )
    assert start < ex < reveal
    shown = "\n".join(
        t
        for t, c in zip(text[:reveal], nb.cells)
        if "solution" not in c.metadata.get("tags", [])
    )
    for name in ("gpu_time_share", "time_rows", "t_matmul =", "t_rest ="):
        assert name not in shown, name


# ------------------------------------------------------------------------------------ part 1, exercise 4: the time model inverted


_A100 = "R_mm, R_non, R_exp = 312e12, 19.5e12, lab.exp_rate('A100')\n    odds = share / (1 - share)\n    "


@pytest.mark.parametrize(
    "body, says",
    [
        ("return odds * 4 * d * R_non / R_mm", "no exponential charged"),
        (
            "return odds * 4 * d * R_non / R_mm - 1",
            "exponential charged as one FP32 FLOP",
        ),
        (
            "return share * 4 * d * R_non / R_mm - R_non / R_exp",
            "share · 4d · R_non/R_mm",
        ),
        ("return odds * 4 * d * R_mm / R_non - R_non / R_exp", "rates upside down"),
        (
            "return odds * 2 * d * R_non / R_mm - R_non / R_exp",
            "2d matmul FLOPs per score",
        ),
        ("return (odds * 4 * d / R_mm - 1 / R_exp) * R_mm", "solve that for f"),
    ],
)
def test_affordable_nonmatmul_mistakes(body, says):
    _fails(
        "afford",
        f"import lab\ndef affordable_nonmatmul(d, share):\n    {_A100}{body}\n",
        "case 0 (128, 0.3)",
        "expected 5.71094",
        says,
    )


def test_affordable_reference_is_the_closed_form_and_inverts_the_time_model():
    exp = lab.exp_rate("A100")
    for d, share in [(64, 0.1), (128, 0.3), (256, 0.5)]:
        closed = (share / (1 - share) * 4 * d / 312e12 - 1 / exp) * 19.5e12
        f = checks._affordable_reference(d, share)
        assert f == pytest.approx(closed, rel=1e-12)
        if f > 0:  # the model gives back the share it was solved for
            assert lab.gpu_time_share(4 * d, f + 1, "A100", exp=1)[
                "share"
            ] == pytest.approx(share, rel=1e-12)
    assert (
        checks._affordable_reference(64, 0.1) < 0
    )  # at d = 64 the exponential alone takes more than 10%


# ------------------------------------------------------------------------------------ part 1, exercise 5: causal counts


CAUSAL = """
def causal_fa2_ops(N, d, B):
    T = -(-N // B)
    rows = [min((i + 1) * B, N) - i * B for i in range(T)]
    return {expr}
"""


@pytest.mark.parametrize(
    "expr, says",
    [
        ("N * T * (d + 1) + N * d", "without the mask"),
        (
            "sum(r * i for i, r in enumerate(rows)) * (d + 1) + N * d",
            "diagonal tiles left out",
        ),
        (
            "sum(r * (i + 1) for i, r in enumerate(rows)) * (d + 1)",
            "without the final division",
        ),
        (
            "sum(r * (i + 1) for i, r in enumerate(rows)) * (2 * d + 1) + N * d",
            "that is FA1",
        ),
        ("B * T * (T + 1) // 2 * (d + 1) + N * d", "counted with B rows"),
        (
            "B * (N // B) * (N // B + 1) // 2 * (d + 1) + N * d",
            "shorter query block left out",
        ),
    ],
)
def test_causal_fa2_ops_mistakes(expr, says):
    _fails("causal", CAUSAL.format(expr=expr), says)


def test_causal_reference_matches_section_2_table():
    """N = M = 1024, d = 64, 64 × 64 tiles, causal: 565,760 multiplies and 65,536 divides."""
    assert checks._causal_reference(1024, 64, 64) == 565_760 + 65_536


# ------------------------------------------------------------------------------------ part 1, exercise 1: FA1's block

FA1 = """
def fa1_block(q_i, k, v, Bc):
    Br, d = q_i.shape
    m = {m0}
    l = np.zeros(Br)
    O = np.zeros((Br, v.shape[1]))
    for j0 in range(0, {stop}, Bc):
        s = q_i @ k[j0:j0 + Bc].T / np.sqrt(d)
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l_new = alpha * l + p.sum(axis=1)
        O = ({old} * O + p @ v[j0:j0 + Bc]) / l_new[:, None]
        m, l = m_new, {l_next}
    return O, m, l
"""
FA1_OK = dict(
    m0="np.full(Br, -np.inf)", stop="len(k)", old="(alpha * l)[:, None]", l_next="l_new"
)


def _fa1(**change):
    return FA1.format(**{**FA1_OK, **change})


def test_fa1_in_fa2_style_exponents_passes():
    """FA1 written with P = e^(S - m_new) (not the tile's own max) is FA1 all the same."""
    assert run_check(EX["fa1"], _src(_fa1())) == PASSED["fa1"]


def test_fa1_submitted_in_fa2_form_is_refused():
    _fails(
        "fa1",
        """
        def fa1_block(q_i, k, v, Bc):
            Br, d = q_i.shape
            m, l, acc = np.full(Br, -np.inf), np.zeros(Br), np.zeros((Br, v.shape[1]))
            for j0 in range(0, len(k), Bc):
                s = q_i @ k[j0:j0 + Bc].T / np.sqrt(d)
                m_new = np.maximum(m, s.max(axis=1))
                alpha = np.exp(m - m_new)
                p = np.exp(s - m_new[:, None])
                l = alpha * l + p.sum(axis=1)
                acc = alpha[:, None] * acc + p @ v[j0:j0 + Bc]
                m = m_new
            return acc / l[:, None], m, l
        """,
        "after key block 0 (keys 0..31)",
        "that is FA2's form",
        "FA1 rescales O and divides it by l at every key block",
    )


def test_fa1_running_max_from_zero_gives_nan_on_very_negative_scores():
    _fails(
        "fa1",
        _fa1(m0="np.zeros(Br)"),
        "case 3 (very negative scores",
        "NaN",
        "m must start at -inf",
    )


def test_fa1_dropped_last_key_block():
    _fails(
        "fa1",
        _fa1(stop="len(k) - len(k) % Bc"),
        "case 0",
        "first 96 keys only",
        "range(0, M, Bc)",
    )


def test_fa1_without_l_old():
    _fails("fa1", _fa1(old="alpha[:, None]"), "o (element 0)", "multiplies O by l_old")


def test_fa1_returns_the_last_tiles_sum_as_l():
    out = _fails(
        "fa1",
        _fa1().replace("return O, m, l", "return O, m, p.sum(axis=1)"),
        "l (element 2)",
    )
    assert "rescaled by α = e^(m - m′)" in out


def test_fa1_without_the_scale_is_named():
    """Scores without 1/√d: o is the output with scale 1, and the hint says so (not the rescaling hint)."""
    out = _fails(
        "fa1",
        _fa1().replace(" / np.sqrt(d)", ""),
        "case 0",
        "o (element 0)",
        "output with scale 1",
        "1/√d is missing",
    )
    assert "rescaled" not in out and "l_old" not in out


def test_fa1_returning_lse_for_l_is_named():
    out = _fails(
        "fa1",
        _fa1().replace("return O, m, l", "return O, m, m + np.log(l)"),
        "l (element 2)",
        "your l is lse = m + log l",
        "return l itself",
    )
    assert "rescaled by α = e^(m - m′)" not in out


def test_fa1_converted_inputs_cannot_be_watched():
    src = _fa1().replace(
        "    Br, d = q_i.shape\n",
        "    q_i, k, v = np.asarray(q_i), np.asarray(k), np.asarray(v)\n    Br, d = q_i.shape\n",
    )
    _fails("fa1", src, "could not watch your loop")


# ------------------------------------------------------------------------------------ part 1, exercise 2: FA2's block

FA2 = """
def fa2_block(q_i, k, v, Bc):
    Br, d = q_i.shape
    m = {m0}
    l = np.zeros(Br)
    acc = np.zeros((Br, v.shape[1]))
    for j0 in range(0, {stop}, Bc):
        s = q_i @ k[j0:j0 + Bc].T / np.sqrt(d)
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = {rescale}acc + p @ v[j0:j0 + Bc]
        m = m_new
    return {ret}
"""
FA2_OK = dict(
    m0="np.full(Br, -np.inf)",
    stop="len(k)",
    rescale="alpha[:, None] * ",
    ret="acc / l[:, None], m + np.log(l)",
)


def _fa2(**change):
    return FA2.format(**{**FA2_OK, **change})


def test_fa2_with_in_place_updates_and_a_reciprocal_passes():
    src = _fa2(rescale="", ret="acc * (1 / l)[:, None], m + np.log(l)").replace(
        "        acc = acc + p @ v[j0:j0 + Bc]\n",
        "        acc *= alpha[:, None]\n        acc += p @ v[j0:j0 + Bc]\n",
    )
    assert "acc *= alpha" in src
    assert run_check(EX["fa2"], _src(src)) == PASSED["fa2"]


def test_fa2_submitted_in_fa1_form_is_refused():
    src = (
        _fa1()
        .replace("def fa1_block", "def fa1_inner")
        .replace("return O, m, l", "return O, m + np.log(l)")
    )
    out = _fails(
        "fa2",
        src + "\n\nfa2_block = fa1_inner\n",
        "that is FA1's form",
        "divides once, after the last key block",
    )
    assert "after key block 0 (keys 0..31)" in out


def test_fa2_normalizing_a_copy_every_step_is_refused():
    src = _fa2().replace(
        "        m = m_new\n", "        m = m_new\n        o = acc / l[:, None]\n"
    )
    _fails("fa2", src, "already held acc / l")


def test_fa2_an_unused_debug_peek_at_acc_over_l_is_refused_as_the_spec_says():
    """A mid-loop acc / l, computed only to look at it, is FA1's form to the check; the spec says so."""
    src = _fa2().replace(
        "        m = m_new\n",
        "        m = m_new\n        _ = acc / l[:, None]  # a peek\n",
    )
    _fails("fa2", src, "already held acc / l", "that is FA1's form")
    spec = " ".join(EX["fa2"].spec.split())
    assert "debug `acc / l` inside the loop, used or not" in spec, spec


def test_fa2_returns_fa1_statistics():
    _fails(
        "fa2",
        _fa2(ret="acc / l[:, None], m, l"),
        "returned a tuple of 3, expected a tuple of 2 (o, lse)",
    )


def test_fa2_lse_without_m():
    _fails(
        "fa2",
        _fa2(ret="acc / l[:, None], np.log(l)"),
        "lse (element 1)",
        "lse = m + log l",
    )


def test_fa2_without_alpha():
    _fails("fa2", _fa2(rescale=""), "o (element 0)", "rescaled by α")


def test_fa2_without_the_scale_is_named():
    out = _fails(
        "fa2",
        _fa2().replace(" / np.sqrt(d)", ""),
        "case 0",
        "o (element 0)",
        "output with scale 1",
        "1/√d is missing",
    )
    assert "rescaled by α" not in out


def test_fa2_running_max_from_zero():
    _fails(
        "fa2",
        _fa2(m0="np.zeros(Br)"),
        "very negative scores",
        "NaN",
        "m must start at -inf",
    )


def test_fa2_dropped_last_key_block():
    _fails("fa2", _fa2(stop="len(k) - len(k) % Bc"), "first 96 keys only")


def test_fa2_returning_the_reference_is_refused():
    """Calling the reference gives the right numbers: the guard names it."""
    _fails(
        "fa2",
        "def fa2_block(q_i, k, v, Bc):\n    return lab.attention_reference(np.asarray(q_i), np.asarray(k), np.asarray(v))\n",
        "calls lab.attention_reference",
    )


def test_fa2_kernel_call_is_refused():
    """The course's own kernel normalizes at the end too: the guard names it."""
    _fails(
        "fa2",
        "def fa2_block(q_i, k, v, Bc):\n    return lab.flash_attention_numpy(q_i, k, v, block_q=len(q_i), block_k=Bc)\n",
        "calls lab.flash_attention_numpy",
    )


def test_fa2_kernel_under_another_name_is_refused():
    _fails(
        "fa2",
        """
        from lab.kernels.rung3_numpy_fa2 import flash_attention_numpy as kern
        def fa2_block(q_i, k, v, Bc):
            return kern(q_i, k, v, block_q=len(q_i), block_k=Bc)
        """,
        "calls lab.flash_attention_numpy",
    )


UNTILED = """
def fa2_block(q_i, k, v, Bc):
    s = q_i @ k.T / np.sqrt(q_i.shape[1])
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    l = p.sum(axis=1)
    return p @ v / l[:, None], m + np.log(l)
"""


def test_fa2_plain_untiled_softmax_is_refused():
    """Right values and one division at the end, but no tile: the scores of all M keys at once."""
    _fails(
        "fa2",
        UNTILED,
        "case 0",
        "(8, 100) array, scores of 100 keys at once",
        "Bc = 32",
    )


def test_fa1_recomputing_the_prefix_softmax_at_every_block_is_refused():
    _fails(
        "fa1",
        """
        def fa1_block(q_i, k, v, Bc):
            d = q_i.shape[1]
            for j0 in range(0, len(k), Bc):
                s = q_i @ k[: j0 + Bc].T / np.sqrt(d)  # every key so far
                m = s.max(axis=1)
                p = np.exp(s - m[:, None])
                l = p.sum(axis=1)
                O = p @ v[: j0 + Bc] / l[:, None]
            return O, m, l
        """,
        "case 0",
        "scores of 64 keys at once",
    )


def test_fa1_recomputing_every_earlier_tile_is_refused():
    """Tiles of Bc keys, but the earlier ones exponentiated again at each block: more than one exponential a score."""
    _fails(
        "fa1",
        """
        def fa1_block(q_i, k, v, Bc):
            Br, d = q_i.shape
            m = np.full(Br, -np.inf)
            for j0 in range(0, len(k), Bc):
                m = np.maximum(m, (q_i @ k[j0:j0 + Bc].T / np.sqrt(d)).max(axis=1))
                l, acc = np.zeros(Br), np.zeros((Br, v.shape[1]))
                for t0 in range(0, j0 + 1, Bc):  # every tile so far, again
                    p = np.exp(q_i @ k[t0:t0 + Bc].T / np.sqrt(d) - m[:, None])
                    l, acc = l + p.sum(axis=1), acc + p @ v[t0:t0 + Bc]
                O = acc / l[:, None]
            return O, m, l
        """,
        "case 0",
        "exponentials where one per score",
        "computed again",
    )


def test_recomputing_earlier_tiles_with_powers_of_e_is_counted_too():
    _fails(
        "fa2",
        """
        def fa2_block(q_i, k, v, Bc):
            Br, d = q_i.shape
            m = np.full(Br, -np.inf)
            for j0 in range(0, len(k), Bc):
                m = np.maximum(m, (q_i @ k[j0:j0 + Bc].T / np.sqrt(d)).max(axis=1))
            l, acc = np.zeros(Br), np.zeros((Br, v.shape[1]))
            for j0 in range(0, len(k), Bc):  # a second pass over K: every tile again, as np.e ** (s - m)
                for t0 in range(0, j0 + 1, Bc):
                    p = np.e ** (q_i @ k[t0:t0 + Bc].T / np.sqrt(d) - m[:, None])
                    if t0 == j0:
                        l, acc = l + p.sum(axis=1), acc + p @ v[t0:t0 + Bc]
            return acc / l[:, None], m + np.log(l)
        """,
        "exponentials where one per score",
    )


def test_a_failure_names_the_seed_that_draws_its_values_again(capsys):
    wrong = lambda q_i, k, v, Bc: (q_i[:, :12] * 0, q_i[:, 0] * 0)  # noqa: E731
    checks.check_fa2_block(wrong, seed=17)
    first = capsys.readouterr().out
    checks.check_fa2_block(wrong, seed=17)
    assert capsys.readouterr().out == first and "seed=17" in first
    a, b = checks._block_cases(1), checks._block_cases(2)
    assert not np.array_equal(a[0][1], b[0][1]) and a[0][0] == b[0][0]


def test_block_max_in_place_of_the_running_max_overflows_on_a_high_block_first():
    """FA2's lse is right with a block's own max until a high block comes before low ones: α = e^800."""
    _fails(
        "fa2",
        _fa2().replace("np.maximum(m, s.max(axis=1))", "s.max(axis=1)"),
        "case 4 (a key block near +400, then blocks near -400)",
        "NaN",
        "m must be the running max",
    )
    _fails(  # FA1 returns m: the last block's max is wrong already
        "fa1",
        _fa1().replace("np.maximum(m, s.max(axis=1))", "s.max(axis=1)"),
        "case 0",
        "m (element 1)",
        "last key block's own max",
    )


def test_raw_exponentials_with_m_from_minus_inf_are_told_about_the_overflow():
    """exp(s) with no max subtracted (m tracked from -inf all the same): the hint names e^s, not the start of m."""
    src = """
    def fa1_block(q_i, k, v, Bc):
        Br, d = q_i.shape
        m, l, O = np.full(Br, -np.inf), np.zeros(Br), np.zeros((Br, v.shape[1]))
        for j0 in range(0, len(k), Bc):
            s = q_i @ k[j0:j0 + Bc].T / np.sqrt(d)
            m = np.maximum(m, s.max(axis=1))
            p = np.exp(s)
            l_new = l + p.sum(axis=1)
            O = (l[:, None] * O + p @ v[j0:j0 + Bc]) / l_new[:, None]
            l = l_new
        return O, m, l * np.exp(-m)
    """
    out = _fails(
        "fa1", src, "case 2 (very large scores", "e^s overflows", "exponentiate s - m"
    )
    assert "m must start at -inf" not in out


def test_float16_accumulator_is_told_about_its_rounding():
    src = _fa2().replace(
        "acc = np.zeros((Br, v.shape[1]))",
        "acc = np.zeros((Br, v.shape[1]), np.float16)",
    )
    src = src.replace(
        "p @ v[j0:j0 + Bc]\n",
        "(p @ v[j0:j0 + Bc])\n        acc = acc.astype(np.float16)\n",
    )
    assert "astype(np.float16)" in src
    out = _fails(
        "fa2",
        src,
        "case 0",
        "o (element 0)",
        "float16",
        "keep O (acc), l and m in float64",
    )
    assert "rescaled by α" not in out


def test_causal_fa2_ops_through_flash_counts_under_another_name_is_refused():
    _fails(
        "causal",
        """
        from lab.tiling import flash_counts as fc
        def causal_fa2_ops(N, d, B):
            ops = fc(N, N, d, block_q=B, block_k=B, causal=True, variant="fa2").op_counts
            return ops["mul"] + ops["div"]
        """,
        "calls lab.flash_counts",
    )


def test_a_table_of_the_fixed_cases_fails_on_the_fresh_ones():
    table = {
        c: checks._causal_reference(*c)
        for c in [
            (1024, 64, 64),
            (1000, 64, 64),
            (7, 3, 2),
            (4096, 128, 128),
            (100, 16, 128),
        ]
    }
    out = run_check(
        EX["causal"],
        "def causal_fa2_ops(N, d, B):\n    return TABLE.get((N, d, B), 0)\n",
        extra={"TABLE": table},
    )
    assert re.search(r"✗ case [5-8] ", out) and "seed" in out, out


def test_fresh_cases_are_drawn_again_from_the_seed(capsys):
    wrong = lambda N, d, B: {(1024, 64, 64): 565_760 + 65_536}.get((N, d, B), 0)  # noqa: E731
    checks.check_causal_fa2_ops(wrong, seed=11)
    first = capsys.readouterr().out
    checks.check_causal_fa2_ops(wrong, seed=11)
    assert capsys.readouterr().out == first and "seed=11" in first
    ok = lambda N, d, B: (  # noqa: E731
        sum(
            (min((i + 1) * B, N) - i * B) * (i + 1) * (d + 1) for i in range(-(-N // B))
        )
        + N * d
    )
    cases = set()
    for seed in (1, 2):
        rng, _ = _fresh(seed)
        cases.add(int(rng.integers(2, 3000)))
    assert len(cases) == 2
    checks.check_causal_fa2_ops(ok, seed=5)
    assert "✓ passed 9 cases" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ the instrument


def test_watched_records_results_and_stays_watched():
    log = []
    v = checks._watched(np.arange(12.0).reshape(4, 3), log)
    p = np.ones((2, 4))
    acc = p @ v[0:4]  # a plain array @ a watched slice
    assert isinstance(acc, Watched) and log[-1][0] == "matmul"
    out = np.zeros((2, 3))
    out += acc  # in place into a plain array: recorded
    assert log[-1][0] == "add" and np.array_equal(log[-1][1], out)
    assert isinstance(
        np.concatenate([acc, acc]), Watched
    )  # numpy functions keep it watched
    n = len(log)
    float(acc.sum())  # reductions are not recorded
    assert len(log) == n
    assert (
        type(np.asarray(acc)) is np.ndarray
    )  # np.asarray drops the watch (the check says so)


def test_prefix_outputs_end_at_the_reference():
    label, q_i, k, v, Bc, _ = checks._block_cases()[0]
    prefixes = checks._prefix_outputs(q_i, k, v, Bc)
    assert len(prefixes) == 4
    assert np.allclose(
        prefixes[-1][0], lab.attention_reference(q_i, k, v)[0], rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("how", list(EVASIONS))
@pytest.mark.parametrize(
    "key, name",
    [
        ("fa2", "fa2_block"),
        ("split_k", "split_k_tile"),
        ("afford", "affordable_nonmatmul"),
        ("causal", "causal_fa2_ops"),
    ],
)
def test_an_answer_that_hides_from_the_watch_is_refused(key, name, how):
    out = run_check(EX[key], evading(EX[key].solution, name, how))
    assert "✗" in out and "✓" not in out and EVASIONS[how][1] in out, out


# ------------------------------------------------------------------------------------ the form, fooled no more


FA2_ACC_WITH_O = """
def fa1_block(q_i, k, v, Bc):
    Br, d = q_i.shape
    m, l, acc = np.full(Br, -np.inf), np.zeros(Br), np.zeros((Br, v.shape[1]))
    O = np.zeros((Br, v.shape[1]))
    for j0 in range(0, len(k), Bc):
        s = q_i @ k[j0:j0 + Bc].T / np.sqrt(d)
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ v[j0:j0 + Bc]
        O = {o_step}
        m = m_new
    return O, m, l
"""


@pytest.mark.parametrize("o_step", ["acc / l[:, None]", "O * 0 + acc / l[:, None]"])
def test_fa1_as_an_fa2_accumulator_normalized_on_the_side_is_refused(o_step):
    """O = acc / l after every block holds FA1's invariant, but the state carried is FA2's acc."""
    _fails(
        "fa1",
        FA2_ACC_WITH_O.format(o_step=o_step),
        "your O after key block 1 was not computed from your O after block 0",
        "kept beside O",
    )


def test_fa1_in_place_updates_of_a_plain_o_pass():
    """O rescaled and divided in place (an np.zeros array, never watched itself) is FA1 all the same."""
    src = _fa1().replace(
        "O = ((alpha * l)[:, None] * O + p @ v[j0:j0 + Bc]) / l_new[:, None]",
        "O *= (alpha * l)[:, None]\n        O += p @ v[j0:j0 + Bc]\n        O /= l_new[:, None]",
    )
    assert "O *=" in src
    assert run_check(EX["fa1"], _src(src)) == PASSED["fa1"]


def test_fa1_rescale_factor_upside_down_is_named():
    for alpha in (
        "np.exp(m_new - m)",
        "np.where(np.isneginf(m), 0.0, np.exp(m_new - m))",
    ):
        _fails(
            "fa1",
            _fa1().replace("np.exp(m - m_new)", alpha),
            "exceeds 1",
            "upside down",
        )


def test_fa1_block_max_for_the_running_max_is_named():
    _fails(
        "fa1",
        _fa1().replace("np.maximum(m, s.max(axis=1))", "s.max(axis=1)"),
        "m (element 1)",
        "last key block's own max",
        "never falls",
    )


def test_fa2_exponentials_in_torch_are_refused():
    src = _fa2().replace(
        "p = np.exp(s - m_new[:, None])",
        "import torch\n        p = torch.exp(torch.from_numpy(np.asarray(s - m_new[:, None]))).numpy()",
    )
    _fails("fa2", src, "torch.")


def test_fa2_two_passes_max_first_is_refused():
    src = _fa2().replace(
        "    for j0 in range(0, len(k), Bc):\n        s = q_i",
        "    for j0 in range(0, len(k), Bc):\n"
        "        m = np.maximum(m, (q_i @ k[j0:j0 + Bc].T / np.sqrt(d)).max(axis=1))\n"
        "    for j0 in range(0, len(k), Bc):\n        s = q_i",
    )
    assert src.count("for j0") == 2
    _fails("fa2", src, "before exponentiating those of block 0", "first pass")


def test_fa2_every_score_tile_stored_then_walked_is_refused():
    _fails(
        "fa2",
        """
        def fa2_block(q_i, k, v, Bc):
            Br, d = q_i.shape
            tiles = [q_i @ k[j0:j0 + Bc].T / np.sqrt(d) for j0 in range(0, len(k), Bc)]
            m, l, acc = np.full(Br, -np.inf), np.zeros(Br), np.zeros((Br, v.shape[1]))
            for j, s in enumerate(tiles):
                m_new = np.maximum(m, s.max(axis=1))
                alpha = np.exp(m - m_new)
                p = np.exp(s - m_new[:, None])
                l = alpha * l + p.sum(axis=1)
                acc = alpha[:, None] * acc + p @ v[j * Bc:(j + 1) * Bc]
                m = m_new
            return acc / l[:, None], m + np.log(l)
        """,
        "formed the scores of key block 1 before exponentiating those of block 0",
        "every score tile kept",
    )


def test_watched_carries_provenance():
    log = checks._Log()
    a = checks._watched(np.ones((2, 3)), log)
    b = checks._watched(np.ones((2, 3)), log)
    c = a * 2.0
    d = np.zeros((2, 3))
    d += b  # a plain array written in place: its provenance is kept by id
    e = c + d
    assert c.src == {0} and log.plain[id(d)][1] == {1}
    assert e.src == {0, 1, 2} and log[2][2] == e.src


# ------------------------------------------------------------------------------------ part 1, exercise 1, more hints


def test_fa1_returning_l_times_e_to_the_m_is_named():
    out = _fails(
        "fa1",
        _fa1().replace("return O, m, l", "return O, m, l * np.exp(m)"),
        "l (element 2)",
        "l·e^m",
        "against the final m",
    )
    assert "exceeds 1" not in out


def test_affordable_nonmatmul_by_bisection_on_the_model_is_refused():
    """A bisection through lab.gpu_time_share gets the positive cases right: refused all the same."""
    out = _fails(
        "afford",
        """
        import lab
        def affordable_nonmatmul(d, share):
            lo, hi = 0.0, 1e6
            for _ in range(200):
                mid = (lo + hi) / 2
                t = lab.gpu_time_share(4 * d, mid + 1, "A100", exp=1)
                lo, hi = (mid, hi) if t["share"] < share else (lo, mid)
            return lo
        """,
        "case 0",
        "calls lab.gpu_time_share",
    )
    assert "hint" not in out


@pytest.mark.parametrize(
    "expr, says",
    [
        (
            "sum(r * (2 * i + 1) for i, r in enumerate(rows)) * (d + 1) // 2 + N * d",
            "diagonal tiles counted as half tiles",
        ),
        (
            "sum(r * (i + 1) for i, r in enumerate(rows)) * (3 * d + 3)",
            "FA1's 3·d_v + 3",
        ),
        (
            "sum(r * (i + 1) for i, r in enumerate(rows)) * (3 * d + 3) + N * d",
            "plus FA2's final division",
        ),
    ],
)
def test_causal_fa2_ops_more_mistakes(expr, says):
    _fails("causal", CAUSAL.format(expr=expr), says)


# ------------------------------------------------------------------------------------ part 2, exercise 1: split-K

SPLIT = """
def split_k_tile(q_i, k_j, v_j, w):
    Br, d = q_i.shape
    c = {c}
    partials = []
    for u in range(w):
        s = q_i @ k_j[u * c : (u + 1) * c].T / np.sqrt(d)
        m = {m}
        p = np.exp(s - m[:, None])
        partials.append((m, p.sum(axis=1), {pacc}))
    m = {M}
    a = [{a} for m_u, _, _ in partials]
    l = sum({la} * l_u for a_u, (_, l_u, _) in zip(a, partials))
    acc = sum({aa} * acc_u for a_u, (_, _, acc_u) in zip(a, partials))
    return partials, (m, l, {ret})
"""
SPLIT_OK = dict(
    c="-(-len(k_j) // w)",
    m="s.max(axis=1)",
    pacc="p @ v_j[u * c : (u + 1) * c]",
    M="np.max([m_u for m_u, _, _ in partials], axis=0)",
    a="np.exp(m_u - m)",
    la="a_u",
    aa="a_u[:, None]",
    ret="acc",
)


def _split(**change):
    return SPLIT.format(**{**SPLIT_OK, **change})


def test_split_k_template_passes():
    assert run_check(EX["split_k"], _src(_split())) == PASSED["split_k"]


@pytest.mark.parametrize(
    "change, says",
    [
        (dict(la="1"), "you added the warps' l_u as they are"),
        (dict(aa="1"), "you added the warps' acc_u as they are"),
        (dict(ret="acc / l[:, None]"), "merged acc is divided by l"),
        (
            dict(
                m="np.maximum(s.max(axis=1), partials[-1][0] if partials else -np.inf)"
            ),
            "warp 1's m is the max over warps 0..1",
        ),
        (
            dict(pacc="p @ v_j[u * c : (u + 1) * c] / p.sum(axis=1)[:, None]"),
            "warp 0's acc is divided by its l",
        ),
        (dict(c="len(k_j) // w"), "Bc // w = 7 leaves the last 2 keys to no warp"),
        (dict(M="partials[0][0]"), "your m is warp 0's"),
        (dict(a="np.exp(m - m_u)"), "upside down"),
        (dict(m="s.max(axis=1) * 0"), "no max subtracted"),
    ],
)
def test_split_k_mistakes(change, says):
    _fails("split_k", _split(**change), says)


def test_split_k_floor_split_with_the_rest_to_the_last_warp_is_told_it_is_another_split():
    src = _split(c="len(k_j) // w").replace(
        "k_j[u * c : (u + 1) * c]", "k_j[u * c : (u + 1) * c if u < w - 1 else None]"
    )
    src = src.replace(
        "v_j[u * c : (u + 1) * c]", "v_j[u * c : (u + 1) * c if u < w - 1 else None]"
    )
    out = _fails(
        "split_k", src, "That split covers every key, but it is not the spec's"
    )
    assert "to no warp" not in out


@pytest.mark.parametrize("edge", ["(u + 1) * c - 1", "(u + 1) * c - (u == w - 1)"])
def test_split_k_a_key_dropped_at_a_slice_edge_is_named(edge):
    src = _split().replace("(u + 1) * c]", f"{edge}]")
    _fails("split_k", src, "a slice k_j[lo:hi] holds keys lo..hi - 1")


def test_split_k_float32_state_is_told_its_dtype():
    src = _split().replace(
        "s = q_i @ k_j[u * c : (u + 1) * c].T / np.sqrt(d)",
        "s = (q_i @ k_j[u * c : (u + 1) * c].T / np.sqrt(d)).astype(np.float32)",
    )
    _fails(
        "split_k",
        src,
        "right to float32 rounding",
        "keep the state in the inputs' dtype",
    )


def test_split_k_spec_says_the_state_stays_float64():
    """The float32 state the check refuses (above) is ruled out by the spec, not only by the hint."""
    spec = " ".join(EX["split_k"].spec.split())
    assert "The inputs are float64 and the state stays in the inputs' dtype" in spec, (
        spec
    )


def test_the_homework_exercises_say_they_are_homework():
    """Exercises 4 and 5 of part 1 close the notebook as homework: no "warm-up" label on them."""
    for key, number in (("afford", 4), ("causal", 5)):
        spec = EX[key].spec
        head = next(ln for ln in spec.splitlines() if ln.startswith("### Exercise"))
        assert head.startswith(f"### Exercise {number} (build):"), head
        assert "*Homework: about 15 minutes" in spec, spec


def test_split_k_without_the_scale_is_named():
    _fails("split_k", _split().replace(" / np.sqrt(d)", ""), "1/√d is missing")


def test_split_k_whole_tile_scores_are_refused():
    src = """
    def split_k_tile(q_i, k_j, v_j, w):
        Br, d = q_i.shape
        c = -(-len(k_j) // w)
        s = q_i @ k_j.T / np.sqrt(d)
        parts = []
        for u in range(w):
            su = s[:, u * c : (u + 1) * c]
            m = su.max(axis=1)
            p = np.exp(su - m[:, None])
            parts.append((m, p.sum(axis=1), p @ v_j[u * c : (u + 1) * c]))
        m = s.max(axis=1)
        p = np.exp(s - m[:, None])
        return parts, (m, p.sum(axis=1), p @ v_j)
    """
    _fails(
        "split_k", src, "(8, 32) array, scores of 32 keys at once", "ceil(Bc / w) = 8"
    )


def test_split_k_merged_state_not_from_the_partials_is_refused():
    """The merged state from an online pass over the slices, beside the partials: right values, no merge."""
    src = """
    def split_k_tile(q_i, k_j, v_j, w):
        Br, d = q_i.shape
        c = -(-len(k_j) // w)
        parts = []
        M, L, A = np.full(Br, -np.inf), np.zeros(Br), np.zeros((Br, v_j.shape[1]))
        for u in range(w):
            su = q_i @ k_j[u * c : (u + 1) * c].T / np.sqrt(d)
            m = su.max(axis=1)
            p = np.exp(su - m[:, None])
            parts.append((m, p.sum(axis=1), p @ v_j[u * c : (u + 1) * c]))
            s2 = q_i @ k_j[u * c : (u + 1) * c].T / np.sqrt(d)
            mn = np.maximum(M, s2.max(axis=1))
            al, p2 = np.exp(M - mn), np.exp(s2 - mn[:, None])
            L, A, M = al * L + p2.sum(axis=1), al[:, None] * A + p2 @ v_j[u * c : (u + 1) * c], mn
        return parts, (M, L, A)
    """
    _fails("split_k", src, "merged acc was not computed from warp 0's acc")


def test_split_k_through_lab_states_is_refused():
    src = """
    def split_k_tile(q_i, k_j, v_j, w):
        Br, d = q_i.shape
        c = -(-len(k_j) // w)
        st = [lab.partial_state(q_i @ k_j[u * c : (u + 1) * c].T / np.sqrt(d),
                                v_j[u * c : (u + 1) * c]) for u in range(w)]
        mg = st[0]
        for x in st[1:]:
            mg = lab.merge_states(mg, x)
        return [tuple(x) for x in st], tuple(mg)
    """
    _fails("split_k", src, "calls lab.partial_state")


def test_split_k_in_torch_is_refused():
    src = _split(m="s.max(axis=1)").replace(
        "        p = np.exp(s - m[:, None])\n",
        "        p = torch.exp(torch.from_numpy(np.asarray(s - m[:, None]))).numpy()\n",
    )
    _fails("split_k", "import torch\n" + src, "torch")


def test_split_k_wrong_return_shape_is_named():
    _fails(
        "split_k",
        _split().replace("return partials, (m, l, acc)", "return (m, l, acc)"),
        "return (partials, merged)",
    )


def test_split_k_stub_and_failure_name_the_seed(capsys):
    ns = {"np": np}
    exec(_split(la="1"), ns)
    checks.check_split_k_tile(ns["split_k_tile"], seed=4)
    assert "seed=4" in capsys.readouterr().out


def test_split_k_count_cell_counts_the_learners_partials(capsys):
    """The cell after the check counts Br·(d_v + 2) values a warp and w·Br·(d_v + 2) in all from the learner's
    partials, and prints the course's model beside them; without a solution it says so, still runs, and
    keeps the model's count back (the prediction above it asks for that count)."""
    ex = EX[
        "keys_outer"
    ]  # its `before` holds part 2's exercise 1 cells, the count cell among them
    cell = next(src for src in ex.before if "per_warp = [sum(np.size(x)" in src)
    for answer, says in (
        (
            EX["split_k"].solution,
            "each warp writes (float32 on a GPU): [4224, 4224, 4224, 4224]; all 4: 16896",
        ),
        (EX["split_k"].stub, "split_k_tile is not written yet"),
    ):
        ns = {"np": np, "lab": lab}
        exec(compile(answer, "<answer>", "exec"), ns)
        exec(compile(cell, "<count>", "exec"), ns)
        out = capsys.readouterr().out
        model = "the course's model: 4224 a warp (of 4), 16896 for all 4" in out
        assert says in out and model == (answer == EX["split_k"].solution), out
    assert (
        lab.warp_split_exchange(64, 64, 64, warps=4, split="K")["written"] // 4
        == 4 * 64 * 66
    )


def test_loop_record_tells_the_two_forms_apart():
    """FA1 holds the normalized output after every key block and divides T_c·Br·d_v times; FA2 once, Br·d_v."""
    ns = {}
    for key in ("fa1", "fa2"):
        exec(compile(EX[key].solution, "<solution>", "exec"), {"np": np} | ns, ns)
    g = np.random.default_rng(3)
    q_i, k, v = (g.standard_normal(s) for s in ((8, 16), (100, 16), (100, 12)))
    fa1 = checks.loop_record(ns["fa1_block"], q_i, k, v, 32)
    fa2 = checks.loop_record(ns["fa2_block"], q_i, k, v, 32)
    assert fa1 == {
        "normalized_after": [0, 1, 2, 3],
        "divides": 4 * 8 * 12,
        "key_blocks": 4,
    }
    assert fa2 == {"normalized_after": [3], "divides": 8 * 12, "key_blocks": 4}


# ------------------------------------------------------------------------------------ part 2, exercise 2: FA1's loop order


def _keys_outer(change: dict | None = None) -> str:
    """The worked solution of part 2's exercise 2 with each `old: new` of `change` applied (each must occur)."""
    src = EX["keys_outer"].solution
    for old, new in (change or {}).items():
        assert old in src, old
        src = src.replace(old, new)
    return src


def test_keys_outer_with_the_query_blocks_outside_is_named():
    src = _keys_outer(
        {
            "    for j0 in range(0, len(k), Bc):  # key blocks outside\n"
            "        for rows in (slice(i0, i0 + Br) for i0 in range(0, len(q), Br)):\n": (
                "    for rows in (slice(i0, i0 + Br) for i0 in range(0, len(q), Br)):\n"
                "        for j0 in range(0, len(k), Bc):\n"
            )
        }
    )
    _fails("keys_outer", src, "with the query blocks outside")


def test_keys_outer_keeping_o_on_chip_is_named():
    src = _keys_outer(
        {
            "    O, m, l = hbm": "    on_chip = {}\n    O, m, l = hbm",
            "O_old = m[rows], l[rows], O[rows]": (
                "O_old = m[rows], l[rows], on_chip.get(rows.start, 0.0)"
            ),
            "            O[rows] = ((a": "            O[rows] = on_chip[rows.start] = ((a",
        }
    )
    _fails("keys_outer", src, "the old O of a query block is not read back from HBM")


def test_keys_outer_writing_o_once_per_query_block_is_named():
    src = """
    def fa1_keys_outer(q, k, v, Br, Bc, hbm):
        for i0 in range(0, len(q), Br):
            s = q[i0 : i0 + Br] @ k.T / np.sqrt(q.shape[1])
            m = s.max(axis=1)
            p = np.exp(s - m[:, None])
            hbm["O"][i0 : i0 + Br] = p @ v / p.sum(axis=1)[:, None]
            hbm["m"][i0 : i0 + Br], hbm["l"][i0 : i0 + Br] = m, p.sum(axis=1)
    """
    _fails("keys_outer", src, "O is written once per query block")


@pytest.mark.parametrize(
    "change, says",
    [
        ({"m_new = np.maximum(m_old, m_tile)": "m_new = m_tile"}, "m (element 1)"),
        (
            {
                "l_new = a * l_old + b * p_tile.sum(axis=1)": "l_new = l_old + p_tile.sum(axis=1)"
            },
            "O (element 0)",
        ),
        ({"(a * l_old)[:, None] * O_old": "a[:, None] * O_old"}, "O (element 0)"),
    ],
)
def test_keys_outer_wrong_rule_fails_on_values(change, says):
    _fails("keys_outer", _keys_outer(change), says)


@pytest.mark.parametrize(
    "old, new",
    [
        ("m[rows], l[rows] = m_new, l_new", "m[rows], l[rows] = m_tile, l_new"),
        ("m_new = np.maximum(m_old, m_tile)", "m_new = m_tile"),
    ],
)
def test_keys_outer_block_max_for_the_running_max_is_named(old, new):
    _fails(
        "keys_outer",
        _keys_outer({old: new}),
        "your m is the last key block's own max m~",
    )


@pytest.mark.parametrize(
    "new",
    [
        "O[rows] = a[:, None] * O_old + pv",
        "O[rows] = (a * l_old)[:, None] * O_old + pv",
    ],
)
def test_keys_outer_o_never_divided_by_l_is_named(new):
    old = "O[rows] = ((a * l_old)[:, None] * O_old + pv) / l_new[:, None]"
    _fails("keys_outer", _keys_outer({old: new}), "your O is never divided by l")


def test_keys_outer_both_rescales_upside_down_are_named():
    old = "a, b = np.exp(m_old - m_new), np.exp(m_tile - m_new)"
    new = (
        "a = np.where(np.isneginf(m_old), 0.0, np.exp(m_new - m_old))\n"
        "            b = np.exp(m_new - m_tile)"
    )
    _fails("keys_outer", _keys_outer({old: new}), "both rescales are upside down")


def test_keys_outer_no_max_at_all_is_named():
    src = _keys_outer({"m_tile = s.max(axis=1)": "m_tile = np.zeros(len(s))"})
    _fails("keys_outer", src, "your m ends as 0.0 in every row")


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "O[rows] = ((a * l_old)[:, None] * O_old + pv) / l_new[:, None]",
            "O[rows] = (l_old[:, None] * O_old + pv) / l_new[:, None]",
            "missing on the old l·O",
        ),
        (
            "l_new = a * l_old + b * p_tile.sum(axis=1)",
            "l_new = l_old + b * p_tile.sum(axis=1)",
            "missing on the old l",
        ),
        (
            "for rows in (slice(i0, i0 + Br) for i0 in range(0, len(q), Br)):",
            "for rows in (slice(i0, i0 + Br) for i0 in range(0, len(q) - len(q) % Br, Br)):",
            "the short last query block was left out",
        ),
    ],
)
def test_keys_outer_a_missing_old_factor_and_a_dropped_last_block_are_named(
    old, new, says
):
    _fails("keys_outer", _keys_outer({old: new}), says)


def test_keys_outer_an_inverted_old_factor_is_told_where_its_nan_comes_from():
    old = "a, b = np.exp(m_old - m_new), np.exp(m_tile - m_new)"
    new = "a, b = np.exp(m_new - m_old), np.exp(m_tile - m_new)"
    _fails("keys_outer", _keys_outer({old: new}), "NaN in O", "e^(m - m') <= 1")


def test_keys_outer_a_division_after_the_loop_is_named():
    src = _keys_outer(
        {
            "O[rows] = ((a * l_old)[:, None] * O_old + pv) / l_new[:, None]": (
                "O[rows] = a[:, None] * O_old + pv"
            )
        }
    )
    src += (
        "\n    for i0 in range(0, len(q), Br):\n"
        "        O[i0 : i0 + Br] = O[i0 : i0 + Br] / l[i0 : i0 + Br][:, None]\n"
    )
    out = _fails(
        "keys_outer", src, "more time(s) after the last key block", "FA2's rule"
    )
    assert "begin" not in out


def test_keys_outer_may_not_call_lab_or_compute_on_a_whole_hbm_array():
    _fails(
        "keys_outer",
        """
        def fa1_keys_outer(q, k, v, Br, Bc, hbm):
            o, lse = lab.attention_reference(q, k, v)
            hbm["O"][:] = o
        """,
        "calls lab.attention_reference",
    )
    _fails(
        "keys_outer",
        _keys_outer(
            {
                "O_old = m[rows], l[rows], O[rows]": "O_old = m[rows], l[rows], (O * 1)[rows]"
            }
        ),
        "raised TypeError",
        "O lives in HBM: read a block with O[rows]",
    )


def test_hbm_array_refuses_conversion_and_logs_rows():
    log = []
    a = checks.HBM(np.zeros((5, 2)), log, "O")
    a[1:3] = 1.0
    assert a[2:5].sum() == 2.0 and log == [("O", "write", 1, 2), ("O", "read", 2, 3)]
    with pytest.raises(TypeError, match="O lives in HBM"):
        np.asarray(a)
    for whole in (lambda x: x * 2.0, lambda x: 2.0 * x, lambda x: x / 3, lambda x: -x):
        with pytest.raises(
            TypeError, match="O lives in HBM"
        ):  # arithmetic on all of it
            whole(a)
    with pytest.raises(TypeError, match="O lives in HBM"):
        a *= 2.0


@pytest.mark.parametrize(
    "reciprocal",
    [
        "* (1 / l_new)[:, None]",
        "* np.reciprocal(l_new)[:, None]",
        "* (l_new**-1)[:, None]",
    ],
)
def test_fa1_multiplying_by_a_reciprocal_passes_and_counts_as_divides(reciprocal):
    """A multiply by 1/l normalizes as a divide does: the check passes it, and the count cell after the
    exercises counts its T_c·Br·d_v multiplies by 1/l as divides, as it does FA2's."""
    src = _fa1().replace(") / l_new[:, None]", ") " + reciprocal)
    assert reciprocal in src
    assert run_check(EX["fa1"], _src(src)) == PASSED["fa1"]
    ns = {}
    exec(compile(_src(src), "<fa1>", "exec"), {"np": np} | ns, ns)
    fa2_src = _fa2(ret="acc * (1 / l)[:, None], m + np.log(l)")
    exec(compile(_src(fa2_src), "<fa2>", "exec"), {"np": np} | ns, ns)
    g = np.random.default_rng(3)
    q_i, k, v = (g.standard_normal(s) for s in ((8, 16), (100, 16), (100, 12)))
    assert checks.loop_record(ns["fa1_block"], q_i, k, v, 32)["divides"] == 4 * 8 * 12
    assert checks.loop_record(ns["fa2_block"], q_i, k, v, 32)["divides"] == 8 * 12


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {
                "pv = b[:, None] * (p_tile @ v[j0 : j0 + Bc])": "pv = p_tile @ v[j0 : j0 + Bc]",
                "l_new = a * l_old + b * p_tile.sum(axis=1)": (
                    "l_new = a * l_old + p_tile.sum(axis=1)"
                ),
            },
            "neither the tile's P~V nor its row sum l~ has it",
        ),
        (
            {
                "pv = b[:, None] * (p_tile @ v[j0 : j0 + Bc])": "pv = p_tile @ v[j0 : j0 + Bc]"
            },
            "the tile's P~V lacks it",
        ),
        (
            {
                "l_new = a * l_old + b * p_tile.sum(axis=1)": (
                    "l_new = a * l_old + p_tile.sum(axis=1)"
                )
            },
            "the tile's row sum l~ lacks it",
        ),
    ],
)
def test_keys_outer_tile_max_without_the_correction_is_named(change, says):
    """P~ against the tile's own max, merged without e^(m~ - m'): the hint names the missing factor."""
    _fails(
        "keys_outer",
        _keys_outer(change),
        "hint: P~ = e^(S - m~) is taken against the tile's own max",
        says,
    )


@pytest.mark.parametrize("x", ["l", "m"])
def test_keys_outer_state_not_written_back_is_named(x):
    keep = {"l": "m[rows] = m_new", "m": "l[rows] = l_new"}[x]
    src = _keys_outer({"m[rows], l[rows] = m_new, l_new": keep})
    _fails("keys_outer", src, f"hint: {x} is never written back to HBM")


@pytest.mark.parametrize(
    "body, says",
    [
        (
            """
            with lab.trace.record() as rec:
                q = np.zeros((N, d), np.float32)
                lab.flash_attention_numpy(q, q, q, block_q=B, block_k=B, causal=True)
            return rec.op_counts["mul"] + rec.op_counts["div"]
            """,
            "calls lab.trace.record",
        ),
        (
            """
            from lab.tiling import flop_split as split
            s = split(N, d=d, block_q=B, block_k=B, causal=True, variant="fa2")
            return s["mul"] + s["div"]
            """,
            "calls lab.",
        ),
        (
            """
            from lab.kernels.rung3_numpy_fa2 import flash_attention_numpy as run
            with lab.trace.record() as rec:
                q = np.zeros((N, d), np.float32)
                run(q, q, q, block_q=B, block_k=B, causal=True)
            return rec.op_counts["mul"] + rec.op_counts["div"]
            """,
            "calls lab.",
        ),
    ],
)
def test_causal_fa2_ops_through_lab_trace_or_a_kernel_is_refused(body, says):
    """Part 1's exercise 5 is to count: lab's instrument, its kernels and its counts are refused."""
    lines = "\n".join("    " + x for x in source(body).splitlines())
    _fails("causal", f"def causal_fa2_ops(N, d, B):\n{lines}\n", says)


@pytest.mark.parametrize(
    "change",
    [
        {  # the whole of S, once, then sliced tile by tile
            "    for j0 in range(0, len(k), Bc):  # key blocks outside\n": (
                "    S = q @ k.T / np.sqrt(q.shape[1])\n"
                "    for j0 in range(0, len(k), Bc):  # key blocks outside\n"
            ),
            "s = q[rows] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])": (
                "s = S[rows, j0 : j0 + Bc]"
            ),
        },
        {  # one key block's column of S for every query
            "s = q[rows] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])": (
                "s = (q @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1]))[rows]"
            ),
        },
        {  # one query block's row of S, against every key
            "s = q[rows] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])": (
                "s = (q[rows] @ k.T / np.sqrt(q.shape[1]))[:, j0 : j0 + Bc]"
            ),
        },
    ],
)
def test_keys_outer_holding_more_scores_than_one_tile_is_refused(change):
    """Right values, right order of reads and writes, but more of S at once than one Br × Bc tile."""
    _fails(
        "keys_outer",
        _keys_outer(change),
        "array of scores, where one tile holds Br × Bc",
    )


def test_keys_outer_scaling_q_once_is_not_a_score_array():
    src = _keys_outer(
        {
            "    for j0 in range(0, len(k), Bc):  # key blocks outside\n": (
                "    q = q / np.sqrt(q.shape[1])\n"
                "    for j0 in range(0, len(k), Bc):  # key blocks outside\n"
            ),
            "s = q[rows] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])": (
                "s = q[rows] @ k[j0 : j0 + Bc].T"
            ),
        }
    )
    assert run_check(EX["keys_outer"], src) == PASSED["keys_outer"]


def test_keys_outer_fa2_rule_in_fa1_order_is_named():
    """FA2's unnormalized acc kept in HBM's O and divided by l only at the last key block: the final values and
    the traffic are FA1's, but what HBM holds between key blocks is not."""
    src = _keys_outer(
        {
            "            O[rows] = ((a * l_old)[:, None] * O_old + pv) / l_new[:, None]\n": (
                "            last = j0 + Bc >= len(k)  # divide only at the last key block\n"
                "            acc = a[:, None] * O_old + pv\n"
                "            O[rows] = acc / l_new[:, None] if last else acc\n"
            )
        }
    )
    _fails("keys_outer", src, "HBM's O holds acc", "FA2's rule in FA1's loop order")


def test_keys_outer_final_values_written_in_keys_outer_order_are_named():
    """The whole answer computed on chip in FA2's order, then the final values written keys-outer."""
    src = """
    def fa1_keys_outer(q, k, v, Br, Bc, hbm):
        done = {}
        for i0 in range(0, len(q), Br):
            m = np.full(len(q[i0 : i0 + Br]), -np.inf)
            l, acc = np.zeros_like(m), np.zeros((len(m), v.shape[1]))
            for j0 in range(0, len(k), Bc):
                s = q[i0 : i0 + Br] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])
                mn = np.maximum(m, s.max(axis=1))
                a, p = np.exp(m - mn), np.exp(s - mn[:, None])
                l, acc, m = a * l + p.sum(axis=1), a[:, None] * acc + p @ v[j0 : j0 + Bc], mn
            done[i0] = (acc / l[:, None], m, l)
        for j0 in range(0, len(k), Bc):
            for i0 in range(0, len(q), Br):
                r = slice(i0, i0 + Br)
                _ = hbm["O"][r], hbm["m"][r], hbm["l"][r]
                hbm["O"][r], hbm["m"][r], hbm["l"][r] = done[i0]
    """
    _fails("keys_outer", src, "the tiles came query block by query block")


def test_keys_outer_final_values_with_tiles_in_order_are_named():
    """Tiles formed keys-outer, every query block's state kept on chip, then the final values written keys-outer
    in a second pass: the traffic is FA1's, what HBM holds after the first key block is not."""
    src = """
    def fa1_keys_outer(q, k, v, Br, Bc, hbm):
        st, blocks = {}, range(0, len(q), Br)
        for j0 in range(0, len(k), Bc):
            for i0 in blocks:
                s = q[i0 : i0 + Br] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])
                m, l, acc = st.get(i0, (-np.inf, 0.0, 0.0))
                mn = np.maximum(m, s.max(axis=1))
                a, p = np.exp(m - mn), np.exp(s - mn[:, None])
                st[i0] = (mn, a * l + p.sum(axis=1), a[:, None] * acc + p @ v[j0 : j0 + Bc])
        for j0 in range(0, len(k), Bc):
            for i0 in blocks:
                r, (m, l, acc) = slice(i0, i0 + Br), st[i0]
                _ = hbm["O"][r], hbm["m"][r], hbm["l"][r]
                hbm["O"][r], hbm["m"][r], hbm["l"][r] = acc / l[:, None], m, l
    """
    _fails("keys_outer", src, "HBM's O already holds the output over all")


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"(a * l_old)[:, None] * O_old": "a[:, None] * O_old"},
            "hint: the old O is rescaled by e^(m - m') alone",
        ),
        (
            {
                "range(0, len(k), Bc):  # key": "range(0, len(k) - len(k) % Bc, Bc):  # key"
            },
            "hint: your O is the output over the first",
        ),
        (
            {" / np.sqrt(q.shape[1])  # (Br, Bc)": "  # (Br, Bc)"},
            "hint: your O is the output with scale 1",
        ),
    ],
)
def test_keys_outer_value_slips_get_hints(change, says):
    _fails("keys_outer", _keys_outer(change), says)


def test_affordable_nonmatmul_generic_hint_keeps_the_formula_back():
    out = _fails(
        "afford",
        f"import lab\ndef affordable_nonmatmul(d, share):\n    {_A100}return max(0.0, 2 * d * share)\n",
        "solve that for f",
    )
    assert "share / (1 - share)" not in out and "t_mm = 4d" not in out


def test_affordable_nonmatmul_clamped_at_zero_is_named():
    body = "f = (odds * 4 * d / R_mm - 1 / R_exp) * R_non\n    return max(f, 0.0)"
    ns = {"lab": lab}
    exec(f"def fn(d, share):\n    {_A100}{body}\n", ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_affordable_nonmatmul(ns["fn"], seed=0)
    text = out.getvalue()
    assert "✗" in text, text
    if "yours is 0 where the answer is negative" not in text:
        assert "case" in text and "0.1" in text, text


def test_causal_ops_through_tile_counts_is_refused():
    src = """
    def causal_fa2_ops(N, d, B):
        t = lab.tile_counts(N, N, B, B, causal=True)["computed"]
        short = (-N) % B  # rows the last query block lacks, in each of its tiles
        return (t * B - short * (-(-N // B))) * (d + 1) + N * d
    """
    _fails("causal", src, "lab.tile_counts")


@pytest.mark.parametrize(
    "slip, says",
    [
        ("share * 100", "your share is a percent"),
        ("share", "4 FP32 operations a score"),
    ],
)
def test_time_share_percent_and_fourth_operation_are_named(slip, says):
    src = EX["time"].solution
    if slip == "share * 100":
        src = src.replace(
            "return t_matmul, t_exp, t_rest, share",
            "return t_matmul, t_exp, t_rest, 100 * share",
        )
    else:
        src = src.replace("(3 * N * N + n_mul", "(4 * N * N + n_mul")
        src = src.replace("    share = (t_exp", "    share = (t_exp")
    _fails("time", src, says)


def test_fa1_exponential_budget_quotes_fa1s_two_factors():
    src = EX["fa1"].solution.replace(
        "p_tile = np.exp(s - m_tile[:, None])",
        "p_tile = np.exp(s - m_tile[:, None]) * 0 + np.exp(s - m_tile[:, None])",
    )
    assert "* 0 + np.exp" in src
    _fails("fa1", src, "two rescale factors", "exponentiated more than once")


def test_fa1_row_by_row_is_named_as_no_tiling():
    src = """
    def fa1_block(q_i, k, v, Bc):
        o, m, l = [], [], []
        for r in range(len(q_i)):
            s = q_i[r : r + 1] @ k.T / np.sqrt(q_i.shape[1])  # (1, M): one row, every key
            mr = s.max(axis=1)
            p = np.exp(s - mr[:, None])
            o.append(p @ v / p.sum(axis=1)[:, None])
            m.append(mr)
            l.append(p.sum(axis=1))
        return np.vstack(o), np.concatenate(m), np.concatenate(l)
    """
    _fails("fa1", src, "one query row against", "row by row is still no tiling")


@pytest.mark.parametrize(
    "name, read, kept",
    [
        (
            "O",
            "O_old = m[rows], l[rows], O[rows]",
            "O_old = chip.get(rows.start, O_old)",
        ),
        (
            "m",
            "O_old = m[rows], l[rows], O[rows]",
            "m_old = chip.get(rows.start, m_old)",
        ),
        (
            "l",
            "O_old = m[rows], l[rows], O[rows]",
            "l_old = chip.get(rows.start, l_old)",
        ),
    ],
)
def test_keys_outer_reading_the_state_but_computing_from_a_kept_copy_is_named(
    name, read, kept
):
    """A loop that reads O, m, l from HBM at every step (so the log of reads is FA1's) but computes from its
    own copy of one of them: the check changes the stored state after key block 0 and sees nothing move."""
    new = {"O": "O_new", "m": "m_new", "l": "l_new"}[name]
    src = _keys_outer(
        {
            "    O, m, l = hbm": "    chip = {}\n    O, m, l = hbm",
            read: f"{read}\n            {kept}",
            "            m[rows], l[rows] = m_new, l_new": (
                "            m[rows], l[rows] = m_new, l_new\n"
                f"            chip[rows.start] = {new}"
            ),
        }
    )
    if name == "O":  # O's new value has no name of its own in the solution: give it one
        src = src.replace("O[rows] = ((a", "O[rows] = O_new = ((a")
    _fails(
        "keys_outer",
        src,
        f"your loop ignores the {name} it reads from HBM",
        f"compute each step from {name}[rows] as read",
    )


def test_hbm_tamper_changes_what_is_stored_not_what_was_written():
    log = []
    a = checks.HBM(np.zeros((4, 2)), log, "O")
    a.tamper = (1, lambda x: x + 0.5)  # after the second write
    a[0:2] = 1.0
    a[2:4] = 2.0
    assert a[0:4].tolist() == [[1.0, 1.0]] * 2 + [[2.5, 2.5]] * 2
    assert [w[2].max() for w in a.written] == [1.0, 2.0]


def test_loop_order_figure_draws_the_o_traffic_the_kernels_do():
    """The figure's R and W marks and its per-block totals are what lab's fa1 and fa2 read and write of o,
    counted by lab.trace: FA1 reads each O_i T_c times and writes it 1 + T_c times, FA2 writes it once."""
    import matplotlib.pyplot as plt

    plt.close("all")
    N, M, Br, Bc, dv = 256, 320, 64, 64, 8
    r = lab.figures.fa2.draw_loop_order(N, M, Br, Bc)
    Tr, Tc = 4, 5
    assert (r["Tr"], r["Tc"]) == (Tr, Tc)
    assert r["fa1"]["order"][:Tr] == [(i, 0) for i in range(Tr)]  # key blocks outer
    assert r["fa2"]["order"][:Tc] == [(0, j) for j in range(Tc)]  # query blocks outer
    assert r["fa1"]["marks"] == {"R": Tr * Tc, "W": Tr * Tc}
    assert r["fa2"]["marks"] == {"R": 0, "W": Tr}
    texts = [t.get_text() for ax in plt.gcf().axes for t in ax.texts]
    assert texts.count(f"R {Tc}\nW {Tc + 1}") == Tr and texts.count("W 1") == Tr
    g = np.random.default_rng(0)
    q, k = (
        g.standard_normal((N, 16), np.float32),
        g.standard_normal((M, 16), np.float32),
    )
    v = g.standard_normal((M, dv), np.float32)
    block = Br * dv * 4  # bytes of one O_i, float32
    for var in ("fa1", "fa2"):
        with lab.trace.record() as rec:
            lab.flash_attention_numpy(q, k, v, block_q=Br, block_k=Bc, variant=var)
        assert rec.read_by.get("o", 0) == r[var]["O_reads"] * block, var
        assert rec.write_by["o"] == r[var]["O_writes"] * block, var
    with pytest.raises(ValueError, match="more than 64"):
        lab.figures.fa2.draw_loop_order(1024, 1024, 64, 64)
    with pytest.raises(ValueError, match="block_k"):
        lab.figures.fa2.draw_loop_order(block_k=0)
    plt.close("all")


def test_wave_timeline_draws_each_design_in_time_with_its_last_partial_wave():
    """128 thread blocks of T_r = 16 units on 108 SMs: 1.19 waves, done at 32; FA2's 2,048 of 1 unit are done
    at 19, just after the 18.96 of every SM busy. The busy bars cover exactly blocks × unit SM-time, the grey
    last-wave gap the rest."""
    import matplotlib.pyplot as plt

    plt.close("all")
    r = lab.figures.fa2.draw_wave_timeline(8, 16, 2048, block_q=128)
    assert r["sms"] == 108 and r["Tr"] == 16
    assert (r["fa1"]["blocks"], r["fa1"]["unit"], r["fa1"]["done"]) == (128, 16, 32)
    assert (r["fa2"]["blocks"], r["fa2"]["unit"], r["fa2"]["done"]) == (2048, 1, 19)
    assert f"{r['fa1']['waves']:.2f}" == "1.19" and r["fa1"]["last"] == 20
    assert r["ideal"] == pytest.approx(2048 / 108)
    for ax, name in zip(plt.gcf().axes, ("fa1", "fa2")):
        c = r[name]
        area = {}
        for p in ax.patches:
            grey = p.get_facecolor()[:3] == pytest.approx((0xDD / 255,) * 3)
            area[grey] = area.get(grey, 0) + p.get_width() * p.get_height()
        assert area[False] == c["blocks"] * c["unit"], name  # every work item's bar
        idle = (c["rounds"] * r["sms"] - c["blocks"]) * c["unit"]
        assert area.get(True, 0) == idle, name  # the last wave's idle SMs
        assert ax.get_ylim()[0] >= 32 and "time" in ax.get_ylabel()
        assert f"done at {c['done']:g}" in [t.get_text() for t in ax.texts]
    with pytest.raises(ValueError, match="block_q"):
        lab.figures.fa2.draw_wave_timeline(block_q=0)
    plt.close("all")
    w = lab.widgets.wave_explorer()
    assert (w.result["fa1"]["done"], w.result["fa2"]["done"]) == (32, 19)
    controls = {c.description: c for c in w.children[:-1]}
    controls["N"].value, controls["batch B"].value = 512, 1
    controls["Br"].value = 64  # twice the thread blocks, each half as long: same finish
    assert w.result["fa2"]["blocks"] == 128 and w.result["fa2"]["done"] == 1.0
    assert w.result["fa1"]["done"] == 4.0  # a head of 512 rows: 4 units


def test_part_2_exercise_2_shows_fa1_s_rule_only_after_its_check():
    """The exercise states what FA1's state means; the rule it derives from that appears after the check."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    text = [c.source for c in nb.cells]
    ex = next(i for i, t in enumerate(text) if t.startswith("### Exercise 2"))
    check = next(i for i, t in enumerate(text) if t.startswith("# Exercise 2: check"))
    rule = next(i for i, t in enumerate(text) if "O_i' = \\frac" in t)
    assert ex < check < rule
    assert "normalized over those keys" in text[ex]  # the invariant, stated
    shown = "\n".join(
        t
        for t, c in zip(text[:check], nb.cells)
        if "solution" not in c.metadata.get("tags", [])
    )
    for formula in ("O_i' =", "l' =", "e^{m - m'}", "diag(l')"):
        assert formula not in shown, formula


# ------------------------------------------------------------------------------------ conventions and refusals


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("((2 * d + 3) if fa1", "((2 * d + 2) if fa1", "2r multiplies a row-tile"),
        ("(3 * N * N + n_mul", "(3 * N * N + n_exp + n_mul", "multiply by log2 e"),
        ("(3 * N * N + n_mul", "(3 * N * N + N * T + n_mul", "max(m, m̃) counted"),
    ],
)
def test_time_share_another_convention_passes_and_is_named(old, new, says):
    """A count that follows a known convention passes, and the note says by how much it differs."""
    out = run_check(EX["time"], _src(_time(old, new)))
    assert out.startswith(PASSED["time"]), out
    assert "your convention differs by up to" in out and says in out, out


def test_time_share_within_a_percent_passes_without_a_note():
    src = _time('/ rate["nonmatmul_flops"]\n', '/ rate["nonmatmul_flops"] * 1.004\n')
    assert run_check(EX["time"], _src(src)) == PASSED["time"]


def test_time_share_two_percent_off_fails():
    src = _time('/ rate["nonmatmul_flops"]\n', '/ rate["nonmatmul_flops"] * 1.03\n')
    _fails("time", src, "✗ case", "t_rest")


def test_fa1_without_the_tile_factor_on_pv_is_named():
    """P̃V added under the tile's own max, without e^(m̃ - m′): the hint names that factor, not l_old."""
    src = FA1_TILE.replace("b[:, None] * pv", "pv")
    out = _fails("fa1", src, "o (element 0)", "without its factor e^(m̃ - m′)")
    assert "l_old" not in out, out


FA1_TILE = """
def fa1_block(q_i, k, v, Bc):
    m, l = np.full(len(q_i), -np.inf), np.zeros(len(q_i))
    O = np.zeros((len(q_i), v.shape[1]))
    for j0 in range(0, len(k), Bc):
        s = q_i @ k[j0 : j0 + Bc].T / np.sqrt(q_i.shape[1])
        m_tile = s.max(axis=1)
        p_tile = np.exp(s - m_tile[:, None])
        m_new = np.maximum(m, m_tile)
        a, b = np.exp(m - m_new), np.exp(m_tile - m_new)
        l_new = a * l + b * p_tile.sum(axis=1)
        pv = p_tile @ v[j0 : j0 + Bc]
        O = ((a * l)[:, None] * O + b[:, None] * pv) / l_new[:, None]
        m, l = m_new, l_new
    return O, m, l
"""


@pytest.mark.parametrize("key", ["fa1", "fa2"])
def test_block_through_lab_s_states_is_refused_without_a_misleading_hint(key):
    """lab.partial_state and lab.merge_states inside the loop: the standard refusal, no hint about key blocks."""
    ret = (
        "o, lse = lab.finalize(st)\n    return o, st[0], st[1]"
        if key == "fa1"
        else ("return lab.finalize(st)")
    )
    src = f"""
import lab
def {key}_block(q_i, k, v, Bc):
    st = None
    for j0 in range(0, len(k), Bc):
        s = q_i @ k[j0 : j0 + Bc].T / np.sqrt(q_i.shape[1])
        part = lab.partial_state(s, v[j0 : j0 + Bc])
        st = part if st is None else lab.merge_states(st, part)
    {ret}
"""
    out = _fails(key, src, "lab's own answer")
    assert "hint:" not in out, out


def test_keys_outer_all_query_rows_at_once_is_named():
    """Key blocks outside, but every query row in one step: named as such, not as one write per query block."""
    src = """
    def fa1_keys_outer(q, k, v, Br, Bc, hbm):
        rows = slice(0, len(q))
        for j0 in range(0, len(k), Bc):
            s = q @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])
            m_tile = s.max(axis=1)
            p_tile = np.exp(s - m_tile[:, None])
            m_old, l_old, O_old = hbm["m"][rows], hbm["l"][rows], hbm["O"][rows]
            m_new = np.maximum(m_old, m_tile)
            a, b = np.exp(m_old - m_new), np.exp(m_tile - m_new)
            l_new = a * l_old + b * p_tile.sum(axis=1)
            pv = b[:, None] * (p_tile @ v[j0 : j0 + Bc])
            hbm["O"][rows] = ((a * l_old)[:, None] * O_old + pv) / l_new[:, None]
            hbm["m"][rows], hbm["l"][rows] = m_new, l_new
    """
    out = _fails("keys_outer", src, "rows at once")
    assert "once per query block" not in out, out
