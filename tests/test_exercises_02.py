"""Notebook 02's exercises: each worked solution passes its own check cell, each planted classic mistake fails
with its diagnosis (the online pass's check reads through lab.CountingArray and measures what is held), and the
checks of lab/checks/softmax.py used there behave when called directly."""

import nbformat
import numpy as np
import pytest
from exercise_support import ROOT, assert_fails, exercises, run_check, source

from lab.checks import softmax as checks

NAME = "02_online_softmax"
EX = {ex.number: ex for ex in exercises(NAME)}
PASSED = {
    1: "online_step: ✓ passed 11 cases\n",
    2: "online_softmax: ✓ passed 11 cases; each score loaded twice, each output stored once; no row held\n",
    3: "online_entropy: ✓ passed 13 cases; each score read once; no row-sized array held\n",
    4: "  as drawn: Bc = 1: 6 guessed, 6 counted; Bc = 4: 5 guessed, 5 counted (not marked)\n"
    " ascending: Bc = 1: 63 predicted, 63 counted ✓; Bc = 4: 15 predicted, 15 counted ✓\n"
    "descending: Bc = 1: 0 predicted, 0 counted ✓; Bc = 4: 0 predicted, 0 counted ✓\n"
    "2 of 2 sorted orders predicted right at both Bc = 1 and Bc = 4\n"
    "predicted_rescales: ✓ both sorted orders derived right (as drawn is a guess, not graded:"
    " its true counts are above)\n",
}


def _src(text: str) -> str:
    return source(text)


def _fails(number: int, text: str, *says: str) -> str:
    return assert_fails(EX[number], text, *says)


def test_the_notebook_has_four_checked_exercises_and_an_answer_cell_for_the_open_part():
    assert sorted(EX) == [1, 2, 3, 4]
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    q = next(i for i, c in enumerate(cells) if c.source.startswith("### Exercise 4"))
    after = cells[q + 1 :]
    assert any(
        c.cell_type == "markdown"
        and c.source.startswith("Your answer:")
        and "solution" not in c.metadata.get("tags", [])
        for c in after
    )
    assert any(
        c.cell_type == "markdown"
        and "solution" in c.metadata.get("tags", [])
        and "Exercise 4, worked answer" in c.source
        for c in after
    )


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_worked_solution_passes(number):
    assert run_check(EX[number], EX[number].solution) == PASSED[number]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_the_online_step_spec_gives_the_invariant_not_the_update():
    spec = EX[1].spec
    assert (
        "e^{x_j - m}" in spec
        and "alpha" not in spec
        and "m_{old}" not in spec
        and "e^{m - m'}" not in spec
    )


_LOOP = """
            def online_pass(x, block):
                m, l = {start}, 0.0
                for j0 in range(0, {stop}, block):
                    m, l = {step}(m, l, x[j0:j0 + block])
                return m, l
            """
_TWO = """
            def online_softmax(x, y, block):
                m, l = -np.inf, 0.0
                for j0 in range(0, len(x), block):  # 1
                    m, l = online_step(m, l, {load})
                for j0 in range(0, len(x), block):
                    y[j0 : j0 + block] = {y} if l > 0 else 0.0
            """
_NAN_STEP = """
            def nan_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                return m_new, float(np.exp(m - m_new) * l + np.exp(x_block - m_new).sum())
            """

_ENT = """
            def online_entropy(x, block):
                m, l, t = -np.inf, 0.0, 0.0
                for j0 in range(0, len(x), block):
                    x_b = x[j0 : j0 + block]
                    x_b = x_b[x_b > -np.inf]
                    if x_b.size == 0:
                        continue
                    m_new, l = online_step(m, l, x_b)
                    t = float({t})
                    m = m_new
                return float(m + np.log(l) - t / l) if l > 0 else 0.0
            """
_T = "np.exp(m - m_new) * t + (np.exp(x_b - m_new) * x_b).sum()"
_U = """
            def online_entropy(x, block):
                m, l, u = -np.inf, 0.0, 0.0
                for j0 in range(0, len(x), block):
                    x_b = x[j0 : j0 + block]
                    x_b = x_b[x_b > -np.inf]
                    if x_b.size == 0:
                        continue
                    m_new, l_new = online_step(m, l, x_b)
                    u = float({old} + (np.exp(x_b - m_new) * (m_new - x_b)).sum())
                    m, l = m_new, l_new
                return float(np.log(l) + u / l) if l > 0 else 0.0
            """

PLANTED = {
    1: [
        (
            "the step read off lab's trace of the state's scores",
            """
            def online_step(m, l, x_block):
                if m == -np.inf:
                    tr = lab.online_trace(np.asarray(x_block, float), len(x_block))
                    return float(tr["m_new"][-1]), float(tr["l_new"][-1])
                tr = lab.online_trace(np.r_[m + np.log(l), x_block], len(x_block) + 1)
                return float(tr["m_new"][-1]), float(tr["l_new"][-1])
            """,
            ["calls lab.online_trace"],
        ),
        (
            "the state kept in float32",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                a = np.float32(np.exp(m - m_new))
                terms = np.exp(x_block - m_new).astype(np.float32)
                return m_new, float(a * np.float32(l) + terms.sum())
            """,
            ["case 0", "float32's rounding", "to 1e-12", "float64"],
        ),
        (
            "torch, float32 by default",
            """
            import torch
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                t = torch.tensor(x_block.tolist())
                a = torch.exp(torch.tensor(m - m_new))
                return m_new, float(a * l + torch.exp(t - m_new).sum())
            """,
            ["float32's rounding", "torch, whose tensors are float32 by default"],
        ),
        (
            "a block of only -inf gives NaN",
            _NAN_STEP.replace("nan_step", "online_step"),
            [
                "case 3 (-inf, 0.0, [-inf, -inf])",
                "l (element 1): NaN in yours",
                "a block of only -inf",
            ],
        ),
        (
            "old l not rescaled",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(l + np.exp(x_block - m_new).sum())
            """,
            ["case 2", "l (element 1): expected 1.50569, got 2.50321", "not rescaled"],
        ),
        (
            "rescaled the wrong way",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(np.exp(m_new - m) * l + np.exp(x_block - m_new).sum())
            """,
            ["case 0", "l (element 1)", "wrong way"],
        ),
        (
            "new terms against the old m",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(np.exp(m - m_new) * l + np.exp(x_block - m).sum())
            """,
            ["l (element 1)", "relative to the old m"],
        ),
        (
            "m of the block only",
            """
            def online_step(m, l, x_block):
                m_new = float(np.max(x_block))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(np.exp(m - m_new) * l + np.exp(x_block - m_new).sum())
            """,
            ["case 1", "m (element 0): expected 3, got 1", "the old m included"],
        ),
        (
            "the block's max as m, the old l kept",
            """
            def online_step(m, l, x_block):
                m_new = float(np.max(x_block))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(l + np.exp(x_block - m_new).sum())
            """,
            [
                "case 1",
                "m (element 0): expected 3, got 1",
                "the old l was kept as it was",
            ],
        ),
        (
            "the old l rescaled to the block's max",
            """
            def online_step(m, l, x_block):
                top = float(np.max(x_block))
                m_new = max(m, top)
                if m_new == -np.inf:
                    return m, l
                return m_new, float(np.exp(m - top) * l + np.exp(x_block - m_new).sum())
            """,
            ["case 1", "l (element 1)", "e^(m - the block's max)", "above 1"],
        ),
        (
            "the block's terms against the block's own max",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(np.exp(m - m_new) * l + np.exp(x_block - x_block.max()).sum())
            """,
            ["case 1", "the block's own max"],
        ),
        (
            "alpha on the block's terms too",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                a = np.exp(m - m_new)
                return m_new, float(a * l + a * np.exp(x_block - m_new).sum())
            """,
            ["case 0", "multiplied by the factor too"],
        ),
        (
            "the block's max returned as m",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                l_new = np.exp(m - m_new) * l + np.exp(x_block - m_new).sum()
                return float(np.max(x_block)), float(l_new)
            """,
            [
                "case 1",
                "m (element 0): expected 3, got 1",
                "l is right, but the m returned",
            ],
        ),
        (
            "no max at all",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                return m_new, float(l + np.exp(x_block).sum())
            """,
            ["case 0", "no max was subtracted"],
        ),
        (
            "returns a list",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return [m, l]
                return [m_new, float(np.exp(m - m_new) * l + np.exp(x_block - m_new).sum())]
            """,
            ["returned list, expected a tuple of 2 (m, l)"],
        ),
        (
            "the new terms folded in by np.logaddexp",
            """
            def online_step(m, l, x_block):
                m_new = max(m, float(np.max(x_block)))
                if m_new == -np.inf:
                    return m, l
                lse = np.logaddexp.reduce(np.r_[m + np.log(l) if l > 0 else -np.inf, x_block])
                return m_new, float(np.exp(lse - m_new))
            """,
            ["calls numpy.logaddexp.reduce", "write the steps yourself"],
        ),
    ],
    2: [
        (
            "blocks that overlap by one score",
            _TWO.format(
                load="x[j0 : j0 + block + 1]", y="np.exp(x[j0 : j0 + block] - m) / l"
            ),
            ["case 0", "the blocks overlap", "counted twice in l"],
        ),
        (
            "m starts at 0",
            _TWO.format(
                load="x[j0 : j0 + block]", y="np.exp(x[j0 : j0 + block] - m) / l"
            ).replace("m, l = -np.inf, 0.0", "m, l = 0.0, 0.0"),
            ["case 2", "m started at 0"],
        ),
        (
            "the last block dropped in pass 1",
            _TWO.format(
                load="x[j0 : j0 + block]", y="np.exp(x[j0 : j0 + block] - m) / l"
            ).replace(
                "range(0, len(x), block):  # 1",
                "range(0, len(x) // block * block, block):",
            ),
            ["case 0", "the last, shorter block was left out"],
        ),
        (
            "a row of only -inf gives NaN",
            _TWO.format(
                load="x[j0 : j0 + block]", y="np.exp(x[j0 : j0 + block] - m) / l"
            ).replace(" if l > 0 else 0.0", ""),
            ["case 4", "NaN in yours", "store zeros where l = 0"],
        ),
        (
            "a step that makes NaN on a block of only -inf",
            _NAN_STEP
            + _TWO.format(
                load="x[j0 : j0 + block]", y="np.exp(x[j0 : j0 + block] - m) / l"
            ).replace("online_step(", "nan_step("),
            ["case 3", "a block of only -inf"],
        ),
        (
            "pass 2 against each block's own max",
            _TWO.format(
                load="x[j0 : j0 + block]",
                y="np.exp(x[j0 : j0 + block] - x[j0 : j0 + block].max()) / l",
            ),
            ["case 0", "each block's own max"],
        ),
        (
            "three passes: m, then l, then y",
            """
            def online_softmax(x, y, block):
                m = -np.inf
                for j0 in range(0, len(x), block):
                    m = max(m, float(x[j0:j0 + block].max()))
                m0 = 0.0 if m == -np.inf else m
                l = 0.0
                for j0 in range(0, len(x), block):
                    l += float(np.exp(x[j0:j0 + block] - m0).sum())
                for j0 in range(0, len(x), block):
                    y[j0:j0 + block] = np.exp(x[j0:j0 + block] - m0) / l if l > 0 else 0.0
            """,
            ["case 0", "x[0] was loaded 3 times", "m and l together"],
        ),
        (
            "the whole row in one load",
            """
            def online_softmax(x, y, block):
                row = x[0:len(x)]
                m, l = online_step(-np.inf, 0.0, row)
                y[0:len(x)] = np.exp(row - m) / l if l > 0 else 0.0
            """,
            ["case 0", "x was read in 1 load", "load `block` scores at a time"],
        ),
        (
            "the row copied out in pass 1",
            """
            def online_softmax(x, y, block):
                row = np.concatenate([x[j0:j0 + block] for j0 in range(0, len(x), block)])
                m, l = -np.inf, 0.0
                for j0 in range(0, len(x), block):
                    m, l = online_step(m, l, row[j0:j0 + block])
                for j0 in range(0, len(x), block):
                    y[j0:j0 + block] = np.exp(x[j0:j0 + block] - m) / l if l > 0 else 0.0
            """,
            [
                "on a row of 20000 scores",
                "the row itself is 160,000 bytes",
                "no copy of the row",
            ],
        ),
        (
            "the row kept between the passes",
            """
            def online_softmax(x, y, block):
                blocks = [x[j0:j0 + block] for j0 in range(0, len(x), block)]
                m, l = -np.inf, 0.0
                for b in blocks:
                    m, l = online_step(m, l, b)
                for j0, b in zip(range(0, len(x), block), blocks):
                    y[j0:j0 + block] = np.exp(b - m) / l if l > 0 else 0.0
            """,
            ["case 0", "x[0] was loaded 1 time", "load x again in pass 2"],
        ),
        (
            "score by score",
            """
            def online_softmax(x, y, block):
                m, l = -np.inf, 0.0
                for j in range(len(x)):
                    m, l = online_step(m, l, np.array([x[j]]))
                for j in range(len(x)):
                    y[j] = np.exp(x[j] - m) / l if l > 0 else 0.0
            """,
            [
                "case 0",
                "x was read in 20 loads; two passes in blocks of 4 take 6",
                "not score by score",
            ],
        ),
        (
            "y read back",
            _TWO.format(
                load="x[j0 : j0 + block]", y="np.exp(x[j0 : j0 + block] - m) / l"
            )
            + "    y[0:1] = y[0:1]\n",
            ["case 0", "it loads y", "y is output only"],
        ),
        (
            "lab's two-pass softmax",
            """
            from lab.softmax import softmax_online as mine
            def online_softmax(x, y, block):
                y[0:len(x)] = mine(x.peek(), block)
            """,
            ["case 0", "calls lab.softmax_online"],
        ),
    ],
    3: [
        (
            "the old weighted sum not rescaled when the max rises",
            _ENT.format(t="t + (np.exp(x_b - m_new) * x_b).sum()"),
            [
                "case 0",
                "expected 1.76434",
                "was added to as it was when a block raised the max",
            ],
        ),
        (
            "the factor inverted, the first block guarded (finite and wrong)",
            _ENT.format(
                t="(np.exp(m_new - m) * t if m > -np.inf else 0.0)"
                " + (np.exp(x_b - m_new) * x_b).sum()"
            ),
            ["case 0", "points the wrong way"],
        ),
        (
            "the factor inverted: inf · 0 from the empty state",
            _ENT.format(t="np.exp(m_new - m) * t + (np.exp(x_b - m_new) * x_b).sum()"),
            ["case 0", "NaN in yours", "∞ · 0 is NaN"],
        ),
        (
            "the block's terms against the block's own max",
            _ENT.format(
                t="np.exp(m - m_new) * t + (np.exp(x_b - x_b.max()) * x_b).sum()"
            ),
            ["case 1", "against the block's own max"],
        ),
        (
            "masked scores kept in the weighted sum: 0 · (-inf)",
            _ENT.format(t=_T)
            .replace("x_b = x_b[x_b > -np.inf]", "")
            .replace("if x_b.size == 0:", "if np.max(x_b) == -np.inf:"),
            ["case 6", "NaN in yours", "0 · (-inf) = NaN"],
        ),
        (
            "the m of H left out",
            _ENT.format(t=_T).replace("float(m + np.log(l)", "float(np.log(l)"),
            ["case 0", "yours is H - m"],
        ),
        (
            "the weighted sum not divided by l",
            _ENT.format(t=_T).replace("- t / l)", "- t)"),
            ["case 0", "Σ p_j x_j is that sum divided by l"],
        ),
        (
            "the sign of H",
            _ENT.format(t=_T).replace(
                "return float(m + np.log(l) - t / l)",
                "return float(t / l - m - np.log(l))",
            ),
            ["case 0", "yours is -H"],
        ),
        (
            "a row of only -inf left unguarded",
            _ENT.format(t=_T).replace(" if l > 0 else 0.0", ""),
            ["case 8", "ZeroDivisionError", "a row of only -inf has nothing to weigh"],
        ),
        (
            "the sum against m' - x_j without its shift term",
            _U.format(old="np.exp(m - m_new) * u"),
            ["case 0", "each old term's (m - x_j) grows by m' - m too"],
        ),
        (
            "the sum against m' - x_j: inf · 0 from the empty state",
            _U.format(old="np.exp(m - m_new) * (u + (m_new - m) * l)"),
            ["case 0", "∞ · 0 is NaN", "nothing to convert"],
        ),
        (
            "m found first, then the sums: two passes",
            """
            def online_entropy(x, block):
                starts = range(0, len(x), block)
                m = max(float(np.max(x[j0 : j0 + block])) for j0 in starts)
                if m == -np.inf:
                    return 0.0
                l = t = 0.0
                for j0 in starts:
                    x_b = x[j0 : j0 + block]
                    x_b = x_b[x_b > -np.inf]
                    l, t = l + np.exp(x_b - m).sum(), t + (np.exp(x_b - m) * x_b).sum()
                return float(m + np.log(l) - t / l)
            """,
            ["case 0", "read 2 times", "one pass reads each score once"],
        ),
        (
            "the probabilities of the whole row held",
            """
            def online_entropy(x, block):
                row = np.concatenate([x[j0 : j0 + block] for j0 in range(0, len(x), block)])
                row = row[row > -np.inf]
                if row.size == 0:
                    return 0.0
                p = np.exp(row - row.max())
                p = p / p.sum()
                return float(-(p[p > 0] * np.log(p[p > 0])).sum())
            """,
            [
                "on a row of 20000 scores",
                "one more sum",
                "no list or array of the scores",
            ],
        ),
        (
            "lab's softmax on the whole row",
            """
            def online_entropy(x, block):
                p = lab.softmax_safe(np.concatenate([x[j0 : j0 + block] for j0 in range(0, len(x), block)]))
                p = p[p > 0]
                return float(-(p * np.log(p)).sum())
            """,
            ["case 0", "calls lab.softmax_safe"],
        ),
        (
            "torch's softmax and entr",
            """
            import torch
            def online_entropy(x, block):
                row = torch.tensor(np.concatenate([x[j0 : j0 + block] for j0 in range(0, len(x), block)]))
                return float(torch.special.entr(torch.softmax(row, 0)).sum())
            """,
            ["case 0", "this exercise asks for numpy"],
        ),
        (
            "the log of an exponential that underflowed: 0 · log 0 = NaN",
            """
            def online_entropy(x, block):
                m, l, u = -np.inf, 0.0, 0.0  # u = Σ e^(x_j - m) (m - x_j), as -e log e
                for j0 in range(0, len(x), block):
                    x_b = x[j0 : j0 + block]
                    x_b = x_b[x_b > -np.inf]
                    if x_b.size == 0:
                        continue
                    m_new, l_new = online_step(m, l, x_b)
                    e = np.exp(x_b - m_new)
                    old = np.exp(m - m_new) * (u + (m_new - m) * l) if l > 0 else 0.0
                    u = float(old - (e * np.log(e)).sum())
                    m, l = m_new, l_new
                return float(np.log(l) + u / l) if l > 0 else 0.0
            """,
            [
                "NaN in yours",
                "0 · log 0",
                "underflows to 0",
                "log p_j = x_j - m - log l",
            ],
        ),
    ],
}
# lab.checks.softmax.check_merge_ml was exercise 3 before the entropy: its planted mistakes run through the check
# called directly, with exercise 1's worked online_step in reach.
PLANTED_MERGE = [
    (
        "sums added as they are",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                return max(m_left, m_right), l_left + l_right
            """,
        [
            "case 0",
            "l (element 1): expected 4.36778, got 5.09479",
            "l_right was added as it is",
        ],
    ),
    (
        "two empty halves give NaN",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                return m, float(np.exp(m_left - m) * l_left + np.exp(m_right - m) * l_right)
            """,
        [
            "case 5 (-inf, 0.0, -inf, 0.0)",
            "NaN in yours",
            "the merge of nothing is (-inf, 0)",
        ],
    ),
    (
        "rescaled the wrong way",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m == -np.inf:
                    return m, 0.0
                return m, float(np.exp(m - m_left) * l_left + np.exp(m - m_right) * l_right)
            """,
        ["case 0", "wrong way"],
    ),
    (
        "only l_right rescaled",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m == -np.inf:
                    return m, 0.0
                return m, float(l_left + np.exp(m_right - m) * l_right)
            """,
        [
            "case 0",
            "with the two states swapped merge(right, left)",
            "l_left was added as it is, but here m_left < m",
        ],
    ),
    (
        "l_right brought to m_left first: overflows, and NaN beside an empty state",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m == -np.inf:
                    return m, 0.0
                return m, float((l_left + np.exp(m_right - m_left) * l_right) * np.exp(m_left - m))
            """,
        [
            "case 0",
            "merged with the empty state (-inf, 0)",
            "came back as",
            "nan",
            "l_right was brought to m_left first",
        ],
    ),
    (
        "an empty first half empties the merge (breaks the identity law)",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m_left == -np.inf:
                    return -np.inf, 0.0
                return m, float(np.exp(m_left - m) * l_left + np.exp(m_right - m) * l_right)
            """,
        ["case 0", "came back as (-inf, 0)", "must change nothing"],
    ),
    (
        "the two states treated differently (breaks the order law)",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m == -np.inf:
                    return m, 0.0
                if m_left >= m_right:  # left holds the max: add right's sum to left's
                    return m, float(l_left + np.exp(m_right - m) * l_right)
                return m, float(l_right + np.exp(m_left - m) * l_left * (1 + 2**-40))
            """,
        ["merge(right, left) =", "but merge(left, right) =", "must not matter"],
    ),
    (
        "no return in the branch for an empty left half (the laws' call gets None)",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m_left == -np.inf:
                    pass
                elif m == -np.inf:
                    return m, 0.0
                else:
                    return m, float(np.exp(m_left - m) * l_left + np.exp(m_right - m) * l_right)
            """,
        ["returned None", "from every branch"],
    ),
    (
        "an error raised in the laws' call",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                m = max(m_left, m_right)
                if m_left > -np.inf and m_right == -np.inf:
                    return m, l_left / 0
                if m == -np.inf:
                    return m, 0.0
                return m, float(np.exp(m_left - m) * l_left + np.exp(m_right - m) * l_right)
            """,
        ["raised ZeroDivisionError", "the empty state (-inf, 0)"],
    ),
    (
        "the right half taken as one score",
        """
            def merge_ml(m_left, l_left, m_right, l_right):
                return online_step(m_left, l_left, np.array([m_right]))
            """,
        [
            "case 0",
            "l (element 1): expected 4.36778, got 2.86833",
            "it stands for l_right of them",
        ],
    ),
]
# lab.checks.softmax.check_count_rescales is no longer a notebook exercise (exercise 4 predicts the counts): its
# planted mistakes run through the check called directly.
PLANTED_COUNT = [
    (
        "the first block counted",
        """
            def count_rescales(x, block):
                m, count = -np.inf, 0
                for j0 in range(0, len(x), block):
                    top = float(np.max(x[j0:j0 + block]))
                    if top > m:
                        count, m = count + 1, top
                return count
            """,
        ["case 0", "expected 2, got 3", "counts the first block"],
    ),
    (
        "the first block and ties counted",
        """
            def count_rescales(x, block):
                m, count = -np.inf, 0
                for j0 in range(0, len(x), block):
                    top = float(np.max(x[j0:j0 + block]))
                    if top >= m:
                        count, m = count + 1, top
                return count
            """,
        [
            "expected 2, got 3",
            "two faults",
            "counts the first block",
            "only equals m: α = e^0 = 1",
        ],
    ),
    (
        "ties counted",
        """
            def count_rescales(x, block):
                m, count = float(np.max(x[:block])), 0
                for j0 in range(block, len(x), block):
                    top = float(np.max(x[j0:j0 + block]))
                    if top >= m:
                        count, m = count + 1, top
                return count
            """,
        [
            "case 3 ([1., 1., 1., 1., 1., 1.], 2)",
            "expected 0, got 2",
            "α = e^0 = 1",
        ],
    ),
    (
        "compared with the previous block",
        """
            def count_rescales(x, block):
                prev, count = float(np.max(x[:block])), 0
                for j0 in range(block, len(x), block):
                    top = float(np.max(x[j0:j0 + block]))
                    count += top > prev
                    prev = top
                return count
            """,
        ["case 4", "previous block's max"],
    ),
    (
        "m never updated after the first block",
        """
            def count_rescales(x, block):
                m, count = float(np.max(x[:block])), 0
                for j0 in range(block, len(x), block):
                    count += float(np.max(x[j0:j0 + block])) > m
                return count
            """,
        ["expected 3, got 5", "m was never updated", "the first block's max"],
    ),
    (
        "the last block dropped",
        """
            def count_rescales(x, block):
                m, count = float(np.max(x[:block])), 0
                for j0 in range(block, len(x) // block * block, block):
                    top = float(np.max(x[j0:j0 + block]))
                    if top > m:
                        count, m = count + 1, top
                return count
            """,
        ["case 1", "expected 3, got 2", "last, shorter block"],
    ),
    (
        "counted by lab's trace",
        """
            def count_rescales(x, block):
                return int((lab.online_trace(x, block)["alpha"][1:] < 1).sum())
            """,
        ["calls lab.online_trace"],
    ),
    (
        "block ignored: score by score",
        """
            def count_rescales(x, block):
                m, count = float(x[0]), 0
                for top in x[1:]:
                    if top > m:
                        count, m = count + 1, float(top)
                return count
            """,
        ["case 0", "counts score by score", "once per block"],
    ),
    (
        "a table of the fixed cases",
        """
            def count_rescales(x, block):
                return {(24, 6): 2, (10, 3): 3, (10, 2): 0, (6, 2): 0, (5, 1): 0, (64, 8): 3}.get((len(x), block), 0)
            """,
        ["expected", "drawn with seed="],
    ),
]


@pytest.mark.parametrize(
    "number, source, says",
    [(n, s, says) for n, cases in PLANTED.items() for _, s, says in cases],
    ids=[f"{n}-{name}" for n, cases in PLANTED.items() for name, _, _ in cases],
)
def test_planted_mistake_is_diagnosed(number, source, says):
    _fails(number, source, *says)


def _fails_count(text: str, *says: str) -> str:
    import contextlib
    import io

    import lab

    ns = {"np": np, "lab": lab}
    exec(compile(_src(text), "<planted>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_count_rescales(ns["count_rescales"])
    out = out.getvalue()
    assert "✗" in out, out
    for said in says:
        assert said in out, out
    return out


@pytest.mark.parametrize(
    "source, says",
    [(s, says) for _, s, says in PLANTED_COUNT],
    ids=[name for name, _, _ in PLANTED_COUNT],
)
def test_planted_count_mistake_is_diagnosed(source, says):
    _fails_count(source, *says)


def _merge_out(text: str) -> str:
    """What check_merge_ml prints for a planted merge, with exercise 1's worked online_step in reach."""
    import contextlib
    import io

    import lab

    ns = {"np": np, "lab": lab}
    exec(compile(EX[1].solution, "<exercise 1>", "exec"), ns)
    exec(compile(_src(text), "<planted>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_merge_ml(ns["merge_ml"])
    return out.getvalue()


@pytest.mark.parametrize(
    "source, says",
    [(s, says) for _, s, says in PLANTED_MERGE],
    ids=[name for name, _, _ in PLANTED_MERGE],
)
def test_planted_merge_mistake_is_diagnosed(source, says):
    out = _merge_out(source)
    assert "✗" in out, out
    for said in says:
        assert said in out, out


def test_the_merge_check_passes_the_merge_and_its_hints_name_left_and_right():
    import re

    good = """
        def merge_ml(m_left, l_left, m_right, l_right):
            m = max(m_left, m_right)
            if m == -np.inf:
                return m, 0.0
            return m, float(np.exp(m_left - m) * l_left + np.exp(m_right - m) * l_right)
        """
    assert _merge_out(good) == "merge_ml: ✓ passed 11 cases\n"
    hints = " ".join(_merge_out(s) for _, s, _ in PLANTED_MERGE)
    assert "left" in hints and not re.search(r"\b[ml]_[ab]\b|merge\((a|b), ", hints)


# ------------------------------------------------------------------------------------ the checks, called directly


def _reference_pass(x, block):
    m, l = -np.inf, 0.0
    for j0 in range(0, len(x), block):
        b = np.asarray(x[j0 : j0 + block])
        m_new = max(m, float(b.max()))
        if m_new > -np.inf:
            m, l = m_new, l * np.exp(m - m_new) + float(np.exp(b - m_new).sum())
    return m, l


def test_the_check_s_own_reference_is_refused_as_lab_s_answer(capsys):
    def uses_the_check(x, block):
        m, l = -np.inf, 0.0
        for j0 in range(0, len(x), block):
            m, l = checks._step(m, l, x[j0 : j0 + block])
        return m, l

    checks.check_online_pass(uses_the_check)
    assert "calls lab.checks.softmax._step" in capsys.readouterr().out


def test_online_pass_check_reads_through_a_counting_array_and_names_a_lambda(capsys):
    checks.check_online_pass(lambda x, b: _reference_pass(x, b))
    seen = []
    checks.check_online_pass(
        lambda x, b: seen.append(type(x).__name__) or _reference_pass(x, b)
    )
    out = capsys.readouterr().out
    assert out.startswith("online_pass: ✓ passed 11 cases;") and set(seen) == {
        "CountingArray"
    }


def test_online_pass_check_reports_a_store_into_x_and_a_score_never_read(capsys):
    def writes(x, block):
        result = _reference_pass(x, block)
        x[0] = 0.0
        return result

    checks.check_online_pass(writes)
    checks.check_online_pass(
        lambda x, b: _reference_pass(x.peek(), b)
    )  # peek() reads without counting
    out = [line for line in capsys.readouterr().out.splitlines() if "✗" in line]
    assert out[0].endswith("it writes into x; the row is input only")
    assert out[1].endswith("x[0] was never read (10 of 10 scores)")


def test_online_pass_memory_bound_leaves_room_for_the_streaming_answer():
    import lab

    held, _ = lab.peak_bytes(
        _reference_pass,
        lab.CountingArray(np.random.default_rng(0).standard_normal(20_000)),
        50,
    )
    assert (
        held < 20_000 * 8 // 16
    )  # under half the check's bound of a quarter of the row (tracemalloc counts a few interpreter buffers too)


def test_step_and_pass_references_follow_the_definition():
    rng = np.random.default_rng(1)
    for n, block in ((1, 1), (10, 3), (64, 8), (7, 100)):
        x = 30 * rng.standard_normal(n)
        m, l = checks._pass(x, block)
        assert m == x.max() and np.isclose(l, np.exp(x - x.max()).sum(), rtol=1e-13)
    assert checks._pass(np.full(4, -np.inf), 2) == (-np.inf, 0.0)
    assert (
        checks._rescales(np.arange(10.0), 3) == 3
        and checks._rescales(np.arange(10.0), 3, tail=False) == 2
    )


def test_the_first_block_and_ties_are_not_told_they_count_score_by_score():
    out = _fails_count(
        """
        def count_rescales(x, block):
            m, count = -np.inf, 0
            for j0 in range(0, len(x), block):
                top = float(np.max(x[j0:j0 + block]))
                count, m = count + (top >= m), max(m, top)
            return count
        """,
        "two faults",
    )
    assert "score by score" not in out, out


def test_a_count_against_zero_reports_no_relative_error():
    out = _fails_count(
        """
        def count_rescales(x, block):
            m, count = float(np.max(x[:block])), 0
            for j0 in range(block, len(x), block):
                top = float(np.max(x[j0:j0 + block]))
                if top >= m:
                    count, m = count + 1, top
            return count
        """,
        "expected 0, got 2",
    )
    assert "relative error" not in out and "e+307" not in out, out


def test_the_step_is_shown_only_after_exercise_1():
    """Derive before the reveal: no cell above exercise 1's stub holds the update rule, in code names or in math;
    the first cell after its check that does is the section that reveals it."""
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    stub = next(
        i for i, c in enumerate(cells) if c.source.startswith("# Exercise 1: your code")
    )
    rule = ("np.exp(m - m_new)", "e^{m - m'}", "e^(m − m′)", "alpha l", "\\alpha\\, l")
    above = [c.source for c in cells[:stub]]
    assert not any(r in s for r in rule for s in above)
    assert not any("m_new" in s or "l_new" in s for s in above)  # nor the code's names
    after = [
        c.source for c in cells[stub:] if "solution" not in c.metadata.get("tags", [])
    ]
    assert any("## 3. The step, revealed" in s and "\\alpha\\, l" in s for s in after)


def test_exercise_2_writes_the_pass_no_cell_above_prints_in_code():
    """Exercise 2 builds the loop over blocks: no teaching cell above its stub prints the step in the code's
    names (`m_new`, `alpha = np.exp(m - m_new)`) for the learner to copy."""
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    stub = next(
        i for i, c in enumerate(cells) if c.source.startswith("# Exercise 2: your code")
    )
    above = [
        c.source for c in cells[:stub] if "solution" not in c.metadata.get("tags", [])
    ]
    assert not any("np.exp(m - m_new)" in s or "m_new =" in s for s in above)


def test_the_rule_for_when_l_falls_is_tested_not_asserted():
    """The notebook's condition for l' < l, (1 - α) l > the block's own sum, holds on every step of many rows."""
    import lab

    for seed in range(10):
        for block in (1, 2, 5, 8):
            x = lab.demo_scores(64, seed=seed)
            tr = lab.online_trace(x, block)
            added = np.array(
                [
                    np.exp(x[a:z] - m).sum()
                    for a, z, m in zip(tr["start"], tr["stop"], tr["m_new"])
                ]
            )
            fell = tr["l_new"] < tr["l"]
            assert np.array_equal(fell, (1 - tr["alpha"]) * tr["l"] > added)
            assert not (fell & (tr["alpha"] == 1)).any()


def test_rescale_predictions_are_compared_with_the_counts(capsys):
    right = {"as drawn": (6, 5), "ascending": (63, 15), "descending": (0, 0)}
    checks.check_rescale_predictions(right)
    out = capsys.readouterr().out
    assert out.count("✓") == 5 and "2 of 2 sorted orders predicted right" in out
    assert "ascending: Bc = 1: 63 predicted, 63 counted ✓; Bc = 4: 15 predicted" in out
    checks.check_rescale_predictions(right | {"as drawn": (6, 4)})
    out = capsys.readouterr().out
    assert "Bc = 4: 4 guessed, 5 counted (not marked)" in out and "2 of 2" in out
    assert "✗" not in out  # a guess is not marked: no trial and error to its count


def test_the_counts_are_withheld_until_both_sorted_orders_are_right(capsys):
    """A retry is not free: no count is printed while a sorted order is wrong or missing; each sorted pair
    is still marked ✓ or ✗, the guess as drawn never."""
    checks.check_rescale_predictions(
        {"as drawn": (1, 1), "ascending": (..., ...), "descending": (5, 5)}
    )
    out = capsys.readouterr().out
    assert "as drawn: Bc = 1: 1 guessed; Bc = 4: 1 guessed (not marked)" in out
    assert "descending: Bc = 1: 5 predicted ✗" in out
    assert "ascending: not predicted yet" in out
    assert "counted" not in out and "63" not in out and " 6 " not in out
    assert "the counts are shown once both sorted orders are right" in out
    checks.check_rescale_predictions(
        {"as drawn": (1, 1), "ascending": (64, 16), "descending": (0, 0)}
    )
    out = capsys.readouterr().out
    assert "counted" not in out and "ascending: Bc = 1: 64 predicted ✗" in out
    last = out.splitlines()[-1]  # a question to think again with, not the answer
    assert "first hold a score above every one before it" in last
    assert "every step after the first" not in last and "meets it first" not in last
    checks.check_rescale_predictions(
        {"as drawn": (1, 1), "ascending": (63, 15), "descending": (0, 0)}
    )
    out = capsys.readouterr().out
    assert "as drawn: Bc = 1: 1 guessed, 6 counted" in out


def test_the_paper_form_of_the_step_is_told_only_of_its_missing_guard():
    """The block's sum against its own max, moved to m_new by e^(m_b - m_new), is right (the FlashAttention
    paper's form); without a guard for a block of only -inf it makes NaN, and the hint says just that."""
    text = """
def online_step(m, l, x_b):
    m_b = float(np.max(x_b))
    m_new = max(m, m_b)
    if m_new == -np.inf:
        return m, l
    l_b = float(np.exp(x_b - m_b).sum())
    return m_new, float(np.exp(m - m_new) * l + np.exp(m_b - m_new) * l_b)
"""
    out = run_check(EX[1], source(text))
    assert (
        "✗" in out
        and "your form is right" in out
        and "Only the guard is missing" in out
    )
    assert "every term of l must be" not in out
    guarded = text.replace("if m_new == -np.inf:", "if m_b == -np.inf:")
    assert run_check(EX[1], source(guarded)) == PASSED[1]


@pytest.mark.parametrize(
    "written, says",
    [
        ("63, 15", "'63, 15' is a string: write a pair of whole numbers"),
        (63, "63 is one value: write a pair of whole numbers"),
        ((63, 15, 0), "(63, 15, 0) has 3 values"),
        ((63, 7.5), "7.5 is not a whole number"),
    ],
)
def test_a_prediction_not_written_as_a_pair_is_refused_with_a_hint(
    written, says, capsys
):
    """A string is not split into characters: it is refused, and so is every other shape."""
    right = {"as drawn": (6, 5), "ascending": (63, 15), "descending": (0, 0)}
    checks.check_rescale_predictions(right | {"ascending": written})
    out = capsys.readouterr().out
    assert f"ascending: ✗ {says}" in out, out
    assert "('6'," not in out and "15 counted" not in out
    assert out.splitlines()[-1].startswith(
        "predicted_rescales: ✗ write ascending as a pair of whole numbers"
    )


def test_predictions_from_a_stub_say_not_implemented(capsys):
    def predicted_rescales():
        raise NotImplementedError

    checks.check_rescale_predictions(predicted_rescales)
    assert "predicted_rescales: not implemented yet" in capsys.readouterr().out
    checks.check_rescale_predictions(lambda: 5)
    assert "return a dict" in capsys.readouterr().out


def test_unwritten_predictions_do_not_give_the_counts_away(capsys):
    checks.check_rescale_predictions(
        {o: (..., ...) for o in ("as drawn", "ascending", "descending")}
    )
    out = capsys.readouterr().out
    assert "not predicted yet" in out and "63" not in out and "counted" not in out
    assert "predicted right" not in out
    checks.check_rescale_predictions({"as drawn": (6, 5)})
    assert (
        "write one (Bc = 1, Bc = 4) pair for ascending, descending"
        in capsys.readouterr().out
    )


def test_sections_1_and_2_say_their_rows_are_one_draw():
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    text = {i: c.source for i, c in enumerate(cells)}
    one = next(i for i, s in text.items() if s.startswith("## 1."))
    two = next(i for i, s in text.items() if s.startswith("## 2."))
    assert "lab.demo_scores(64)" in text[one] and "$B_c = 8$" in text[one]
    assert "follows this one row" in text[one]
    assert "lab.demo_scores(64)" in text[two] and "section 1's row" in text[two]
    # one row and one block size from the table to the trace: no other row is drawn
    code = "\n".join(c for i, c in text.items() if cells[i].cell_type == "code")
    assert "demo_scores(24)" not in code and "block=6" not in code


def test_exercises_3_and_4_ask_for_something_exercise_1_did_not():
    """Exercise 3 carries a statistic the text does not work (the entropy) and asks for its derivation first,
    no rule printed; exercise 4 is a prediction, not a second running-max loop."""
    spec = EX[3].spec
    assert "The text has not worked this statistic: derive it first" in spec
    assert "**On paper first.**" in spec and "**Predict:**" in spec
    assert "t = " not in spec and "m + \\log l - " not in spec and "alpha" not in spec
    assert "def online_entropy(x, block)" in EX[3].stub
    assert (
        "**Predict, before anything counts them" in EX[4].spec
        and "count_rescales" not in EX[4].spec
    )
    assert "def predicted_rescales" in EX[4].stub


def test_the_entropy_rule_appears_only_after_its_check():
    """H = m + log l - t / l is in the worked solution and the worked answer, after the stub, never above it."""
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    stub = next(
        i for i, c in enumerate(cells) if c.source.startswith("# Exercise 3: your code")
    )
    above = "\n".join(c.source for c in cells[:stub])
    assert "m + \\log l - \\frac{t}{l}" not in above and "t / l" not in above
    after = "\n".join(c.source for c in cells[stub:])
    assert "m + \\log l - \\frac{t}{l}" in after


def test_the_entropy_check_refuses_its_own_reference_and_rejects_a_non_number(capsys):
    def uses_the_check(x, block):
        return checks._entropy(
            np.concatenate([x[j : j + block] for j in range(0, len(x), block)])
        )

    checks.check_online_entropy(uses_the_check, seed=0)
    assert "calls lab.checks.softmax._entropy" in capsys.readouterr().out
    checks.check_online_entropy(lambda x, block: (0.0, 1.0), seed=0)
    assert "return H, one number for the row" in capsys.readouterr().out


def test_the_entropy_references_agree_with_the_definition():
    """The one-pass reference (both forms) equals -Σ p log p from the whole row; masked scores count 0."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = 5 * rng.standard_normal(int(rng.integers(1, 30)))
        x[rng.random(x.size) < 0.2] = -np.inf
        p = (
            np.exp(x - x.max()) / np.exp(x - x.max()).sum()
            if np.isfinite(x).any()
            else x * 0
        )
        p = p[p > 0]
        want = float(-(p * np.log(p)).sum())
        block = int(rng.integers(1, 8))
        for form in ("t", "u"):
            assert np.isclose(
                checks._entropy_pass(x, block, form=form), want, atol=1e-12
            )
        assert np.isclose(checks._entropy(x), want, atol=1e-12)


def test_rescale_predictions_end_in_one_verdict_the_grader_reads(capsys):
    """✓ when both sorted orders (which can be derived) are right, whatever the guess as drawn; ✗ otherwise."""
    guess = {"as drawn": (2, 2), "ascending": (63, 15), "descending": (0, 0)}
    checks.check_rescale_predictions(guess)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("predicted_rescales: ✓")
    checks.check_rescale_predictions(guess | {"descending": (1, 1)})
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("predicted_rescales: ✗")
    checks.check_rescale_predictions({o: (..., ...) for o in guess})
    assert "predicted_rescales: ✗ no prediction written yet" in capsys.readouterr().out


def test_the_rescale_prediction_asks_for_counts_no_cell_above_prints():
    """Section 2 prints the count as drawn at Bc = 8; exercise 4 asks for Bc = 1 and Bc = 4."""
    assert "$B_c = 1$ and at $B_c = 4$" in EX[4].spec
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    stub = next(
        i
        for i, c in enumerate(cells)
        if c.source.startswith("# Exercise 4: your predictions")
    )
    shown = "\n".join(
        "".join(o.get("text", ""))
        for c in cells[:stub]
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "Bc = 4" not in shown and "(6, 5)" not in shown


def test_the_online_step_hint_is_a_nudge_not_the_derivation():
    assert "**A nudge:**" in EX[1].spec and "which terms go" in EX[1].spec
    assert "write one old term against the new max" not in EX[1].spec


def test_b_is_a_block_number_only():
    """b numbers the blocks (as in notebook 03): no m_a, l_b or half b in the notebook."""
    import re

    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells)
    assert "| $b$ | a block's number" in text
    for other in (
        r"\b[ml]_[abc]\b",
        r"\$[ml]_[abc]\$",
        r"merge\$?\(\$?a, \$?b",
        "half b",
    ):
        assert not re.search(other, text), other
