"""Notebook 04's exercises: each worked solution passes its own check cell, each planted classic mistake fails
with its diagnosis, and the checks of lab/checks/merge.py behave (one fixed line on a pass, nothing left patched)."""

import contextlib
import io
import re
import textwrap

import nbformat
import numpy as np
import pytest
from exercise_support import ROOT, exercises, run_check

import lab
from lab.checks import merge as checks


@pytest.fixture(autouse=True)
def _close_figures():
    """A check or an exercise cell may draw a figure: close them after each test."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


NAME = "04_merge_order"
EX = {ex.number: ex for ex in exercises(NAME)}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def _fails(number: int, source: str, *says: str) -> str:
    out = run_check(EX[number], _src(source))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"
    assert "  hint: " in out or "calls lab." in out or "calls torch." in out, out
    return out


def _state_check(source: str) -> str:
    """What `check_state_merge` prints for the `my_merge` that `source` defines (section 1's merge, in lab)."""
    ns = {"np": np, "lab": lab}
    exec(compile(_src(source), "<my_merge>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_state_merge(ns["my_merge"])
    return out.getvalue()


def _fails_state(source: str, *says: str) -> str:
    out = _state_check(source)
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"
    assert "  hint: " in out or "calls lab." in out or "calls torch." in out, out
    return out


def test_exercise_1_comes_before_the_merge_it_derives_and_the_reveal_follows_its_check():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    text = [c.source for c in nb.cells]
    ex = next(i for i, t in enumerate(text) if t.startswith("### Exercise 1"))
    reveal = next(
        i
        for i, t in enumerate(text)
        if t.startswith("### The merge of $(o, lse)$, revealed")
    )
    section = next(i for i, t in enumerate(text) if t.startswith("## 2."))
    ex2 = next(i for i, t in enumerate(text) if t.startswith("### Exercise 2"))
    assert (
        section < ex < reveal < ex2
    )  # exercise 2 carries the revealed pair to C terms
    between = text[ex + 1 : reveal]  # exercise 1's own cells, nothing else
    assert "check_pair_merge(merge_pair, empty_pair)" in between[-1]
    assert not any(
        t.lstrip().startswith("#")
        for t, c in zip(between, nb.cells[ex + 1 :])
        if c.cell_type == "markdown"
    )
    before = "\n".join(
        t
        for t, c in zip(text[:ex], nb.cells)
        if "solution" not in c.metadata.get("tags", [])
    )
    assert "merge_output_pair" not in before and "lse_c - lse" not in before


def test_the_notebook_has_five_checked_exercises_and_no_unchecked_question():
    """Exercise 5 turns the old written question into counts a check tests; its worked answer follows it."""
    assert sorted(EX) == [1, 2, 3, 4, 5]
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    texts = [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]
    assert not any(s.strip().startswith("Your answer") for _, s, _ in texts)
    q = next(i for i, (_, s, _) in enumerate(texts) if s.startswith("### Exercise 5"))
    after = texts[q + 1 :]
    answer = "\n".join(
        s for t, s, tags in after if t == "markdown" and "solution" in tags
    )  # the worked answer, in blocks of one idea each
    assert "log_2 C" in answer and "1,290" in answer


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5])
def test_worked_solution_passes_its_check(number):
    out = run_check(EX[number], EX[number].solution)
    assert (
        out.count("✓") == 1 and "✗" not in out and len(out.strip().splitlines()) == 1
    ), out


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


# ------------------------------------------------------------------------------------ section 1's state merge
# (the check of the merge of (m, l, acc), lab.checks.merge.check_state_merge, kept for a state-merge exercise)

MERGE_HEAD = """
def my_merge(a, b):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = np.maximum(m_a, m_b)
"""
WRONG_1 = {
    "no guard for rows neither slice saw": (
        MERGE_HEAD
        + """
    alpha_a, alpha_b = np.exp(m_a - m), np.exp(m_b - m)
    return m, alpha_a * l_a + alpha_b * l_b, alpha_a[:, None] * acc_a + alpha_b[:, None] * acc_b
""",
        ["NaN", "l (element 1)", "row 3 saw no key in either state"],
    ),
    "sums added without rescaling": (
        """
def my_merge(a, b):
    return np.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]
""",
        ["l (element 1)", "expected", "re-express each under the common max"],
    ),
    "l rescaled, acc not": (
        MERGE_HEAD
        + """
    m_use = np.where(np.isneginf(m), 0.0, m)
    alpha_a, alpha_b = np.exp(m_a - m_use), np.exp(m_b - m_use)
    return m, alpha_a * l_a + alpha_b * l_b, acc_a + acc_b
""",
        ["acc (element 2)", "needs the same rescaling"],
    ),
    "e^m without subtracting": (
        MERGE_HEAD
        + """
    m_use = np.where(np.isneginf(m), 0.0, m)
    alpha_a, alpha_b = np.exp(m_a) / np.exp(m_use), np.exp(m_b) / np.exp(m_use)
    return m, alpha_a * l_a + alpha_b * l_b, alpha_a[:, None] * acc_a + alpha_b[:, None] * acc_b
""",
        ["case 5", "NaN", "overflows"],
    ),
    "acc_a changed in place": (
        MERGE_HEAD
        + """
    m_use = np.where(np.isneginf(m), 0.0, m)
    alpha_a, alpha_b = np.exp(m_a - m_use), np.exp(m_b - m_use)
    acc_a *= alpha_a[:, None]
    acc_a += alpha_b[:, None] * acc_b
    return m, alpha_a * l_a + alpha_b * l_b, acc_a
""",
        ["in place"],
    ),
    "rescaled against m_a, not the larger m": (
        MERGE_HEAD
        + """
    r = np.where(np.isneginf(m_a), np.where(np.isneginf(m), 0.0, m), m_a)     # a's max (m where a saw nothing)
    w_a, w_b, back = np.exp(m_a - r), np.exp(m_b - r), np.exp(r - np.where(np.isneginf(m), 0.0, m))
    return m, (w_a * l_a + w_b * l_b) * back, (w_a[:, None] * acc_a + w_b[:, None] * acc_b) * back[:, None]
""",
        [
            "case 6 (m_a, m_b 2000 apart",
            "NaN",
            "rescale both against the larger m = max(m_a, m_b)",
        ],
    ),
    "the merged acc kept in float32": (
        MERGE_HEAD
        + """
    m_use = np.where(np.isneginf(m), 0.0, m)
    alpha_a, alpha_b = np.exp(m_a - m_use), np.exp(m_b - m_use)
    acc = np.zeros(acc_a.shape, dtype=np.float32)
    acc[:] = alpha_a[:, None] * acc_a + alpha_b[:, None] * acc_b
    return m, alpha_a * l_a + alpha_b * l_b, acc
""",
        ["acc (element 2)", "float32's precision", "accumulate in float64"],
    ),
    "alpha times acc without [:, None]": (
        MERGE_HEAD
        + """
    m_use = np.where(np.isneginf(m), 0.0, m)
    alpha_a, alpha_b = np.exp(m_a - m_use), np.exp(m_b - m_use)
    return m, alpha_a * l_a + alpha_b * l_b, alpha_a * acc_a + alpha_b * acc_b
""",
        ["raised ValueError: operands could not be broadcast", "alpha[:, None]"],
    ),
    "the smaller max": (
        """
def my_merge(a, b):
    m, l, acc = lab.merge_states(a, b)
    return np.minimum(a[0], b[0]), l, acc
""",
        ["m (element 0)", "largest score"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_1)
def test_state_merge_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_1[mistake]
    _fails_state(source, *says)


def test_state_merge_passes_the_course_formula():
    out = _state_check(
        MERGE_HEAD
        + """
    m_use = np.where(np.isneginf(m), 0.0, m)
    alpha_a, alpha_b = np.exp(m_a - m_use), np.exp(m_b - m_use)
    return m, alpha_a * l_a + alpha_b * l_b, alpha_a[:, None] * acc_a + alpha_b[:, None] * acc_b
"""
    )
    assert out.count("✓") == 1 and "✗" not in out, out


def test_state_merge_float32_shows_the_digits_that_differ_and_no_rescaling_hint():
    out = _fails_state(WRONG_1["the merged acc kept in float32"][0])
    want, got = re.search(r"expected (\S+), got (\S+);", out).groups()
    assert want != got and "same rescaling" not in out, out


def test_state_merge_refuses_lab_s_merge_by_alias_and_torch():
    out = _state_check(
        "from lab.states import merge_states as join\ndef my_merge(a, b):\n    return join(a, b)\n",
    )
    assert "✗" in out and "calls lab.merge_states" in out, out
    torch_merge = """
import torch
def my_merge(a, b):
    m = torch.maximum(torch.from_numpy(a[0]), torch.from_numpy(b[0])).numpy()
    m0 = np.where(np.isneginf(m), 0.0, m)
    wa, wb = np.exp(a[0] - m0), np.exp(b[0] - m0)
    return m, wa * a[1] + wb * b[1], wa[:, None] * a[2] + wb[:, None] * b[2]
"""
    out = _state_check(torch_merge)
    assert "✗" in out and "calls torch.maximum" in out and "asks for numpy" in out, out


def test_state_merge_refuses_the_course_merge():
    out = _state_check("def my_merge(a, b):\n    return lab.merge_states(a, b)\n")
    assert "✗" in out and "calls lab.merge_states" in out, out


# ------------------------------------------------------------------------------------ exercise 1: the (o, lse) pair

PAIR_HEAD = """
def empty_pair(N, dv):
    return np.zeros((N, dv)), np.full(N, -np.inf)

def merge_pair(x, y):
    (o_x, lse_x), (o_y, lse_y) = x, y
"""
SAFE_W = """
    m = np.maximum(lse_x, lse_y)
    m = np.where(np.isneginf(m), 0.0, m)
    w_x, w_y = np.exp(lse_x - m), np.exp(lse_y - m)
"""
WRONG_PAIR = {
    "weights not normalized": (
        PAIR_HEAD
        + SAFE_W
        + "    return w_x[:, None] * o_x + w_y[:, None] * o_y, m + np.log(w_x + w_y)\n",
        ["case 0 (x ⊕ y equals attention", "o (element 0)", "not renormalized"],
    ),
    "max not subtracted": (
        PAIR_HEAD
        + """
    w_x, w_y = np.exp(lse_x), np.exp(lse_y)
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, np.log(w_x + w_y)
""",
        ["case 6 (lse near +1000 or -1000", "NaN", "the row's largest lse_c"],
    ),
    "log(e^lse_x + e^lse_y), no max taken out": (
        PAIR_HEAD
        + """
    with np.errstate(all="ignore"):
        lse = np.log(np.exp(lse_x) + np.exp(lse_y))
        o = np.exp(lse_x - lse)[:, None] * o_x + np.exp(lse_y - lse)[:, None] * o_y
    return o, lse
""",
        [
            "case 6 (lse near +1000 or -1000",
            "log(e^lse_x + e^lse_y) overflows",
            "e^709.8",
        ],
    ),
    "shares swapped": (
        PAIR_HEAD
        + """
    lse = np.logaddexp(lse_x, lse_y)
    return np.exp(lse_y - lse)[:, None] * o_x + np.exp(lse_x - lse)[:, None] * o_y, lse
""",
        ["case 0 (x ⊕ y equals attention", "o (element 0)", "your weights are swapped"],
    ),
    "lse added instead of log-sum-exp'd": (
        PAIR_HEAD
        + SAFE_W
        + """
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, lse_x + lse_y
""",
        ["lse (element 1)", "masses add, their logs do not"],
    ),
    "lse the larger of the two": (
        PAIR_HEAD
        + SAFE_W
        + """
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, np.maximum(lse_x, lse_y)
""",
        ["lse (element 1)", "your lse is the largest lse_c"],
    ),
    "o the plain average": (
        PAIR_HEAD + SAFE_W + "    return (o_x + o_y) / 2, m + np.log(w_x + w_y)\n",
        ["o (element 0)", "plain average of the o_c"],
    ),
    "the max not added back to lse": (
        PAIR_HEAD
        + SAFE_W
        + """
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, np.log(w_x + w_y)
""",
        ["lse (element 1)", "missing the max you subtracted"],
    ),
    "no guard for a row empty in both": (
        PAIR_HEAD
        + """
    m = np.maximum(lse_x, lse_y)
    w_x, w_y = np.exp(lse_x - m), np.exp(lse_y - m)
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, m + np.log(w_x + w_y)
""",
        ["case 8 (rows 0, 2 empty in x", "NaN", "a row empty in every part"],
    ),
    "x's weight used for both (not commutative)": (
        PAIR_HEAD
        + SAFE_W
        + """
    o = (w_x[:, None] * o_x + (1 - w_x)[:, None] * o_y)
    return o, m + np.log(w_x + w_y)
""",
        ["o (element 0)", "expected"],
    ),
    "the empty pair has lse 0": (
        PAIR_HEAD.replace("np.full(N, -np.inf)", "np.zeros(N)")
        + SAFE_W
        + """
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, m + np.log(w_x + w_y)
""",
        ["case 4 (identity: x ⊕ ∅ gives x back)", "so lse = -inf"],
    ),
    "the empty pair's o is NaN": (
        PAIR_HEAD.replace("np.zeros((N, dv))", "np.full((N, dv), np.nan)")
        + SAFE_W
        + """
    o = (w_x[:, None] * o_x + w_y[:, None] * o_y) / (w_x + w_y)[:, None]
    return o, m + np.log(w_x + w_y)
""",
        ["case 4 (identity", "NaN", "give the empty pair a finite o"],
    ),
    "x changed in place": (
        PAIR_HEAD
        + SAFE_W
        + """
    o_x *= (w_x / (w_x + w_y))[:, None]
    o_x += (w_y / (w_x + w_y))[:, None] * o_y
    return o_x, m + np.log(w_x + w_y)
""",
        ["in place"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_PAIR)
def test_exercise_1_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_PAIR[mistake]
    _fails(1, source, *says)


@pytest.mark.parametrize(
    "cheat",
    [
        "def merge_pair(x, y):\n    return lab.merge_output_pair(x, y)\n",
        "from lab.merge import merge_outputs as mo\n"
        "def merge_pair(x, y):\n    return mo([x[0], y[0]], [x[1], y[1]])\n",
    ],
)
def test_exercise_1_refuses_lab_s_merges(cheat):
    out = run_check(EX[1], PAIR_HEAD.split("def merge_pair")[0] + cheat)
    assert "✗" in out and "calls lab.merge_o" in out, out


def test_exercise_1_cases_are_drawn_fresh_and_their_truth_is_attention():
    a, b = (
        checks._pair_cases(np.random.default_rng(1)),
        checks._pair_cases(np.random.default_rng(2)),
    )
    assert a[0][0] != b[0][0] or not np.array_equal(a[0][2][0], b[0][2][0])
    good = {"np": np}
    exec(_src(EX[1].solution), good)
    for label, make, want in a:
        got = make(good["merge_pair"], good["empty_pair"](3, 4))
        assert all(
            np.allclose(g, w, rtol=1e-12, atol=1e-14) for g, w in zip(got, want)
        ), label


# ------------------------------------------------------------------------------------ exercise 2

STACK = """
def merge_partials(parts):
    O = np.stack([p[0] for p in parts])
    L = np.stack([p[1] for p in parts])
"""
WRONG_2 = {
    "plain average of o": (
        STACK
        + """
    return O.mean(axis=0), np.logaddexp.reduce(L, axis=0)
""",
        ["o (element 0)", "expected", "rtol 1e-09", "plain average"],
    ),
    "e^lse without the max": (
        STACK
        + """
    w = np.exp(L)
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[:, None], np.log(w.sum(axis=0))
""",
        [
            "lse near +1000",
            "o (element 0)",
            "NaN",
            "is inf near lse = +1000",
            "the row's largest lse_c",
        ],
    ),
    "an empty row gives NaN": (
        STACK
        + """
    m = L.max(axis=0)
    w = np.exp(L - m)
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[:, None], m + np.log(w.sum(axis=0))
""",
        ["row 2 empty in every part", "NaN", "-inf - (-inf)"],
    ),
    "lse is the max": (
        STACK
        + """
    m = L.max(axis=0)
    w = np.exp(L - m)
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[:, None], m
""",
        ["lse (element 1)", "largest lse_c"],
    ),
    "not renormalized": (
        STACK
        + """
    m = L.max(axis=0)
    m = np.where(np.isneginf(m), 0.0, m)
    w = np.exp(L - m)
    return (w[..., None] * O).sum(axis=0), m + np.log(w.sum(axis=0))
""",
        ["o (element 0)", "not renormalized"],
    ),
    "lse missing the max": (
        STACK
        + """
    m = L.max(axis=0)
    w = np.exp(L - m)
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[:, None], np.log(w.sum(axis=0))
""",
        ["lse (element 1)", "add it back"],
    ),
    "the first part's lse as the shift": (
        STACK
        + """
    w = np.exp(L - L[0])
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[:, None], L[0] + np.log(w.sum(axis=0))
""",
        ["parts in reversed order", "NaN", "empty part"],
    ),
    "the first part's lse as the shift, guarded": (
        STACK
        + """
    c = np.where(np.isneginf(L[0]), 0.0, L[0])
    w = np.exp(L - c)
    l = w.sum(axis=0)
    o = np.where(l[:, None] > 0, (w[..., None] * O).sum(axis=0) / np.where(l > 0, l, 1.0)[:, None], 0.0)
    return o, np.where(l > 0, c + np.log(np.where(l > 0, l, 1.0)), -np.inf)
""",
        [
            "case 7 (4 parts, lse near +1000 and -1000 in one row",
            "NaN",
            "subtract the row's largest lse_c (the larger m), not any one part's",
        ],
    ),
    "the mean of the finite lse as the shift": (
        STACK
        + """
    seen = np.isfinite(L)
    c = np.where(seen, L, 0.0).sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
    w = np.exp(L - c)
    l = w.sum(axis=0)
    o = np.where(l[:, None] > 0, (w[..., None] * O).sum(axis=0) / np.where(l > 0, l, 1.0)[:, None], 0.0)
    return o, np.where(l > 0, c + np.log(np.where(l > 0, l, 1.0)), -np.inf)
""",
        ["case 7", "NaN", "not any one part's nor their mean"],
    ),
    "one shift for the whole array": (
        STACK
        + """
    c = L.max()
    w = np.exp(L - c)
    l = w.sum(axis=0)
    o = np.where(l[:, None] > 0, (w[..., None] * O).sum(axis=0) / np.where(l > 0, l, 1.0)[:, None], 0.0)
    return o, np.where(l > 0, c + np.log(np.where(l > 0, l, 1.0)), -np.inf)
""",
        ["case 7", "the row's largest lse_c"],
    ),
    "o alone": (
        STACK
        + """
    w = np.exp(L - L.max(axis=0))
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[:, None]
""",
        ["expected a tuple of 2 (o, lse)"],
    ),
    "a part overwritten": (
        """
def merge_partials(parts):
    o, lse = lab.merge_outputs([p[0] for p in parts], [p[1] for p in parts])
    parts[0][0][...] = 0.0
    return o, lse
""",
        ["inputs were changed in place"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_2)
def test_exercise_2_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_2[mistake]
    _fails(2, source, *says)


def test_exercise_2_refuses_the_course_merge():
    for call in (
        "lab.merge_outputs([p[0] for p in parts], [p[1] for p in parts])",
        "lab.reduce_states(parts, merge=lab.merge_output_pair)",
    ):
        out = run_check(EX[2], f"def merge_partials(parts):\n    return {call}\n")
        assert "✗" in out and "calls lab." in out and "write it yourself" in out, out


# ------------------------------------------------------------------------------------ exercise 3

GOOD_CHUNK = """
def chunk_output(q, k_c, v_c):
    s = q @ k_c.T / np.sqrt(q.shape[1])
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    l = p.sum(axis=1)
    return (p @ v_c) / l[:, None], m + np.log(l)
"""
GOOD_LOOP = """
def chunked_attention(q, k, v, chunk):
    return merge_partials([chunk_output(q, k[j:j + chunk], v[j:j + chunk]) for j in range(0, len(k), chunk)])
"""


GOOD_CASCADE = """
def shared_prefix_decode(q, k_pre, v_pre, suffixes):
    o, lse = chunk_output(q, k_pre, v_pre)
    for s, (k_s, v_s) in enumerate(suffixes):
        if len(k_s):
            r = slice(s, s + 1)
            o[r], lse[r] = merge_pair((o[r], lse[r]), chunk_output(q[r], k_s, v_s))
    return o, lse
"""


def _chunk(body: str) -> str:
    return (
        "def chunk_output(q, k_c, v_c):\n    s = q @ k_c.T / np.sqrt(q.shape[1])\n"
        + textwrap.indent(_src(body), "    ")
        + GOOD_CASCADE
    )


def _cascade(body: str) -> str:
    return (
        GOOD_CHUNK
        + "\ndef shared_prefix_decode(q, k_pre, v_pre, suffixes):\n"
        + textwrap.indent(_src(body), "    ")
    )


def _merged_by(merge: str) -> str:
    """The worked cascade with its merge of the two pairs replaced by `merge(a, b)`'s body."""
    return (
        GOOD_CHUNK
        + "\ndef _merge(a, b):\n"
        + textwrap.indent(_src(merge), "    ")
        + GOOD_CASCADE.replace("merge_pair(", "_merge(")
    )


LSE = "np.logaddexp(a[1], b[1])"
WRONG_3 = {
    "chunk: no max subtracted": (
        _chunk("""
        p = np.exp(s)
        return p @ v_c / p.sum(axis=1)[:, None], np.log(p.sum(axis=1))
    """),
        [
            "chunk_output: ✗",
            "scores in the thousands",
            "o_c (element 0)",
            "NaN",
            "overflows",
        ],
    ),
    "chunk: lse without the max": (
        _chunk("""
        m = s.max(axis=1)
        p = np.exp(s - m[:, None])
        return p @ v_c / p.sum(axis=1)[:, None], np.log(p.sum(axis=1))
    """),
        ["lse_c (element 1)", "missing the max"],
    ),
    "chunk: no 1/sqrt(d)": (
        """
def chunk_output(q, k_c, v_c):
    s = q @ k_c.T
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    return p @ v_c / p.sum(axis=1)[:, None], m + np.log(p.sum(axis=1))
"""
        + GOOD_CASCADE,
        ["o_c (element 0)", "1/√d is missing"],
    ),
    "chunk: not normalized": (
        _chunk("""
        m = s.max(axis=1)
        p = np.exp(s - m[:, None])
        return p @ v_c, m + np.log(p.sum(axis=1))
    """),
        ["o_c (element 0)", "not normalized"],
    ),
    "chunk: the course's reference": (
        "def chunk_output(q, k_c, v_c):\n    return lab.attention_reference(q, k_c, v_c)\n"
        + GOOD_CASCADE,
        ["calls lab.attention_reference"],
    ),
    "merge: lse added": (
        _merged_by(f"""
        w_a, w_b = np.exp(a[1] - {LSE}), np.exp(b[1] - {LSE})
        return w_a[:, None] * a[0] + w_b[:, None] * b[0], a[1] + b[1]
    """),
        ["case 0", "lse (element 1)", "lse_pre + lse_suf multiplies the two masses"],
    ),
    "merge: o a plain average": (
        _merged_by(f"""
        return (a[0] + b[0]) / 2, {LSE}
    """),
        ["o (element 0)", "o is not reweighted", "e^(lse_c - lse)"],
    ),
    "merge: o summed": (
        _merged_by(f"""
        return a[0] + b[0], {LSE}
    """),
        ["o (element 0)", "o is not reweighted"],
    ),
    "merge: the suffix left out of o": (
        _merged_by(f"""
        return a[0], {LSE}
    """),
        ["o (element 0)", "the suffix's pair never entered the merge"],
    ),
    "merge: weighed by e^lse itself": (
        _merged_by("""
        w_a, w_b = np.exp(a[1]), np.exp(b[1])
        o = (w_a[:, None] * a[0] + w_b[:, None] * b[0]) / (w_a + w_b)[:, None]
        return o, np.log(w_a + w_b)
    """),
        ["scores in the thousands", "NaN", "never by e^lse_c itself"],
    ),
    "an empty suffix sent to chunk_output": (
        GOOD_CHUNK + GOOD_CASCADE.replace("if len(k_s):", "if True:"),
        ["0 keys", "zero-size array", "the empty pair (o = 0, lse = -inf)"],
    ),
    "an empty suffix merged as NaN": (
        _cascade("""
        o, lse = chunk_output(q, k_pre, v_pre)
        for s, (k_s, v_s) in enumerate(suffixes):
            r = slice(s, s + 1)
            mine = chunk_output(q[r], k_s, v_s) if len(k_s) else (np.full_like(o[r], np.nan), lse[r] * np.nan)
            o[r], lse[r] = merge_pair((o[r], lse[r]), mine)
        return o, lse
    """),
        [
            "sequence 1 has no suffix key yet",
            "NaN",
            "its suffix part is the empty pair",
        ],
    ),
    "suffixes padded with zero keys": (
        _cascade("""
        n = max(len(k) for k, _ in suffixes)
        pad = lambda a: np.concatenate([a, np.zeros((n - len(a), a.shape[1]))])
        return GOOD(q, k_pre, v_pre, [(pad(k), pad(v)) for k, v in suffixes])
    """).replace(
            "def shared_prefix_decode",
            GOOD_CASCADE.replace("shared_prefix_decode", "GOOD")
            + "\n\ndef shared_prefix_decode",
        ),
        ["case 0", "padded to one length with zero keys", "carries mass e^0"],
    ),
    "suffixes cut to the shortest": (
        _cascade("""
        n = min(len(k) for k, _ in suffixes)
        return GOOD(q, k_pre, v_pre, [(k[:n], v[:n]) for k, v in suffixes])
    """).replace(
            "def shared_prefix_decode",
            GOOD_CASCADE.replace("shared_prefix_decode", "GOOD")
            + "\n\ndef shared_prefix_decode",
        ),
        ["cut to the shortest one's length"],
    ),
    "prefix and suffix joined": (
        _cascade("""
        rows = [chunk_output(q[s:s + 1], np.concatenate([k_pre, k]), np.concatenate([v_pre, v]))
                for s, (k, v) in enumerate(suffixes)]
        return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])
    """),
        ["the values agree", "prefix and suffix keys in one call", "never joins them"],
    ),
    "the prefix read once per sequence": (
        _cascade("""
        rows = []
        for s, (k, v) in enumerate(suffixes):
            x = chunk_output(q[s:s + 1], k_pre, v_pre)
            rows.append(merge_pair(x, chunk_output(q[s:s + 1], k, v)) if len(k) else x)
        return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])
    """),
        ["the values agree", "the prefix reached chunk_output 3 times", "read it once"],
    ),
    "every query against every suffix": (
        GOOD_CHUNK
        + GOOD_CASCADE.replace(
            "chunk_output(q[r], k_s, v_s)",
            "tuple(x[r] for x in chunk_output(q, k_s, v_s))",
        ),
        ["the values agree", "suffix reached chunk_output with 3 query rows", "q[0:1]"],
    ),
    "the course's attention for the whole": (
        _cascade("""
        chunk_output(q, k_pre, v_pre)
        rows = [lab.attention_reference(q[s:s + 1], np.concatenate([k_pre, k]), np.concatenate([v_pre, v]))
                for s, (k, v) in enumerate(suffixes)]
        return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])
    """),
        ["calls lab.attention_reference"],
    ),
}


WRONG_3 |= {
    "cascade: every suffix merged into every row": (
        _cascade("""
        o, lse = chunk_output(q, k_pre, v_pre)
        for k_s, v_s in suffixes:
            if len(k_s):
                o, lse = merge_pair((o, lse), chunk_output(q, k_s, v_s))
        return o, lse
    """),
        ["every suffix was merged into every row", "into row s only"],
    ),
    "cascade: suffix s merged into the next row": (
        _cascade("""
        o, lse = chunk_output(q, k_pre, v_pre)
        S = len(suffixes)
        for s, (k_s, v_s) in enumerate(suffixes):
            r = slice((s + 1) % S, (s + 1) % S + 1)
            if len(k_s):
                o[r], lse[r] = merge_pair((o[r], lse[r]), chunk_output(q[r], k_s, v_s))
        return o, lse
    """),
        ["row s got another sequence's suffix", "shifted by one"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_3)
def test_exercise_3_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_3[mistake]
    _fails(3, source, *says)


def test_exercise_3_blames_a_wrong_merge_from_exercise_1():
    wrong_pair = (
        "def merge_pair(x, y):\n    lse = np.maximum(x[1], y[1])\n"
        "    return np.where((x[1] >= y[1])[:, None], x[0], y[0]), lse\n"
    )
    out = _fails(
        3,
        wrong_pair + GOOD_CHUNK + GOOD_CASCADE,
        "shared_prefix_decode: ✗",
        "does not pass exercise 1's check yet",
    )
    assert "lse (element 1)" in out or "o (element 0)" in out


def test_exercise_3_names_the_stub_of_exercise_1():
    stub = "def merge_pair(x, y):\n    raise NotImplementedError\n"
    out = run_check(EX[3], stub + GOOD_CHUNK + GOOD_CASCADE)
    assert "not implemented yet (merge_pair, from an earlier exercise" in out, out


def test_exercise_3_takes_exercise_2s_merge_too():
    two = GOOD_CASCADE.replace(
        "merge_pair((o[r], lse[r]), chunk_output(q[r], k_s, v_s))",
        "merge_partials([(o[r], lse[r]), chunk_output(q[r], k_s, v_s)])",
    )
    assert "merge_partials" in two
    out = run_check(EX[3], GOOD_CHUNK + two)
    assert out.count("✓") == 1 and "✗" not in out, out


def test_exercise_3_cases_are_fresh_and_hold_the_planted_traps():
    """Unequal and empty suffixes, the batch reversed, lse in the thousands; fresh ones differ run to run."""
    fixed = checks._cascade_cases()
    labels = [c[0] for c in fixed]
    assert any("reverse" in lb for lb in labels) and any(
        "0 keys" in lb for lb in labels
    )
    for label, q, k_pre, v_pre, suffixes in fixed:
        assert len(suffixes) == q.shape[0]
        want = checks._per_row(q, k_pre, v_pre, suffixes)
        for s, (k_s, v_s) in enumerate(suffixes):
            k, v = np.concatenate([k_pre, k_s]), np.concatenate([v_pre, v_s])
            o, lse = lab.attention_reference(q[s : s + 1], k, v)
            assert np.allclose(want[0][s], o[0]) and np.isclose(want[1][s], lse[0]), (
                label
            )
    big = next(c for c in fixed if "thousands" in c[0])
    assert np.abs(checks._per_row(*big[1:])[1]).max() > 710  # e^lse overflows there
    a = checks._cascade_cases(np.random.default_rng(1))[len(fixed) :]
    b = checks._cascade_cases(np.random.default_rng(2))[len(fixed) :]
    assert len(a) == 2 and not np.array_equal(a[0][1], b[0][1])
    assert any(len(k) == 0 for k, _ in a[0][4])  # one fresh sequence has no suffix


# ------------------------------------------------------------------------------------ the checks themselves


def _solutions() -> dict:
    ns = {"np": np, "lab": lab}
    for n in (1, 2, 3):
        exec(compile(EX[n].solution, f"<solution {n}>", "exec"), ns)
    return ns


def test_passing_lines_are_fixed_text(capsys):
    ns = _solutions()
    checks.check_pair_merge(ns["merge_pair"], ns["empty_pair"])
    checks.check_merge_partials(ns["merge_partials"])
    checks.check_shared_prefix(ns["shared_prefix_decode"], ns["chunk_output"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "merge_pair: ✓ passed 10 cases (= attention, the laws with empty_pair, lse ±1000, "
        "empty rows)",
        "merge_partials: ✓ passed 10 cases (1 to 7 parts, lse ±1000, empty parts), in any order",
        "shared_prefix_decode: ✓ passed 8 cases (suffixes of unequal length, some empty, "
        "any order; the prefix read once)",
    ]


def test_the_cases_references_are_the_truth():
    """Merge references equal lab.merge_outputs; those built from real chunks equal one-shot attention."""
    for label, parts, want in checks._merge_cases():
        got = lab.merge_outputs([p[0] for p in parts], [p[1] for p in parts])
        assert all(
            np.allclose(g, w, rtol=1e-12, atol=1e-14, equal_nan=True)
            for g, w in zip(got, want)
        ), label
    cases = {label: (parts, want) for label, parts, want in checks._merge_cases()}
    empty_row = cases["3 parts, row 2 empty in every part"][1]
    assert np.isneginf(empty_row[1][2]) and (empty_row[0][2] == 0).all()
    parts, _ = cases[
        "4 parts, lse near +1000 and -1000 in one row; part 0 empty on row 3"
    ]
    L = np.stack([p[1] for p in parts])  # rows: -+++, +---, ----, ∅+++
    assert (
        np.sign(L).T[:3] == [[-1, 1, 1, 1], [1, -1, -1, -1], [-1, -1, -1, -1]]
    ).all() and np.isneginf(L[0, 3])
    assert (
        (L[1:, 3] > 990).all()
        and (parts[0][0][3] == 0).all()
        and (np.abs(L[np.isfinite(L)]) > 980).all()
    )
    apart = checks._state_cases()[-1]
    assert (
        (apart[1][0][:2] < -900).all()
        and (apart[2][0][:2] > 900).all()
        and (apart[1][0][2:] > 900).all()
    )
    for label, a, b, want in checks._state_cases():
        got = lab.merge_states(a, b)
        assert all(
            np.allclose(g, w, rtol=1e-12, atol=1e-14) for g, w in zip(got, want)
        ), label
    big = checks._chunk_cases()[-1]
    s = big[1] @ big[2].T / np.sqrt(8)
    assert np.abs(s).max() > 1000  # e^s overflows float64 there


def test_coverage_reads_the_recorded_calls():
    k = np.random.default_rng(0).standard_normal((10, 3))
    call = lambda j0, j1: (None, k[j0:j1], None)  # noqa: E731
    assert checks._coverage(k, [call(0, 4), call(4, 8), call(8, 10)], 4) is None
    assert "never called" in checks._coverage(k, [], 4)[0]
    problem, hint = checks._coverage(k, [call(0, 4), call(4, 8)], 4)
    assert "keys 8..9 never reached" in problem and "not a multiple of 4" in hint
    assert (
        "key 4 reached chunk_output 2 times"
        in checks._coverage(k, [call(0, 5), call(4, 8), call(8, 10)], 5)[0]
    )
    assert "received 10 keys" in checks._coverage(k, [call(0, 10)], 4)[0]
    assert "a softmax over all M keys" in checks._coverage(k, [call(0, 10)], 4)[1]
    assert (
        "(a slice stops before its end)"
        in checks._coverage(k, [call(0, 5), call(4, 9), call(8, 10)], 4)[1]
    )
    assert (
        "called 4 times"
        in checks._coverage(k, [call(0, 2), call(2, 4), call(4, 8), call(8, 10)], 4)[0]
    )
    assert (
        "key 2 never reached"
        in checks._coverage(k, [call(0, 2), call(3, 6), call(6, 10)], 4)[0]
    )
    assert (
        checks._coverage(k, [(None, k[j : j + 4].copy(), None) for j in (0, 4, 8)], 4)
        is None
    )  # copies, not views


def test_nothing_stays_patched_after_an_error(capsys):
    originals = {n: getattr(lab, n) for n in checks._COURSE}
    ns = {"np": np, "lab": lab}
    exec(
        _src(GOOD_CHUNK)
        + _src("""
        def merge_partials(parts):
            raise ValueError("broken")

        def chunked_attention(q, k, v, chunk):
            return merge_partials([chunk_output(q, k[j:j + chunk], v[j:j + chunk]) for j in range(0, len(k), chunk)])
    """),
        ns,
    )
    before = dict(ns)
    checks.check_chunked_attention(
        ns["chunked_attention"], ns["chunk_output"], ns["merge_partials"]
    )
    out = capsys.readouterr().out
    assert "raised ValueError: broken" in out
    assert all(ns[n] is before[n] for n in before)
    assert all(getattr(lab, n) is f for n, f in originals.items())


def test_state_merge_refuses_a_merge_that_computes_only_when_the_check_converts_it():
    later = """
class _Later:
    def __init__(self, a, b, k):
        self.a, self.b, self.k = a, b, k
    def __array__(self, dtype=None, copy=None):
        return np.asarray(lab.merge_states(self.a, self.b)[self.k], dtype=dtype)
def my_merge(a, b):
    return tuple(_Later(a, b, k) for k in range(3))
"""
    out = _state_check(later)
    assert "✗" in out and "calls lab.merge_states" in out, out


# ------------------------------------------------------------------------------------ loopholes closed


@pytest.mark.parametrize(
    "body",
    [
        "return functools.reduce(merge_pair, parts)",
        "out = parts[0]\n    for p in parts[1:]:\n        out = merge_pair(out, p)\n    return out",
    ],
)
def test_exercise_2_refuses_a_fold_of_exercise_1s_merge(body):
    out = _fails(
        2,
        EX[1].solution
        + f"\nimport functools\n\n\ndef merge_partials(parts):\n    {body}\n",
        "called merge_pair",
        "a fold of pairwise merges",
    )
    assert out.startswith("merge_partials: ✗")


def test_exercise_2_refuses_a_fold_written_inline():
    """merge_pair's body pasted into a loop: one log per merge, C - 1 of them."""
    inline = (
        EX[1].solution.replace("def merge_pair(x, y):", "def _pair(x, y):")
        + "\n\ndef merge_partials(parts):\n    out = parts[0]\n"
        "    for p in parts[1:]:\n        out = _pair(out, p)\n    return out\n"
    )
    _fails(2, inline, "np.log calls for", "a fold of pairwise merges")


CHAIN = """
def tree_rounds(C):
    return [[(0, b)] for b in range(1, C)]
"""
TREE_BODY = """
def tree_rounds(C):
    rounds, live = [], list(range(C))
    while len(live) > 1:
        rounds.append([(live[i], live[i + 1]) for i in range(0, len(live) - 1, 2)])
        live = {keep}
    return rounds
"""


@pytest.mark.parametrize(
    "source, says",
    [
        (CHAIN, ["7 rounds for C = 8; 3 rounds are enough", "sequential chain"]),
        (
            TREE_BODY.format(keep="live[::2] if len(live) % 2 == 0 else live[:-1:2]"),
            ["slots are still live", "the one left over stays live"],
        ),
        (
            "def tree_rounds(C):\n    return [[(0, 1), (1, 2)]] if C > 2 else [[(0, 1)]] * (C - 1)\n",
            ["uses slot 1 in two merges", "disjoint pairs"],
        ),
        (
            "def tree_rounds(C):\n    return [[(0, c) for c in range(1, C)]] if C > 1 else []\n",
            ["uses slot 0 in two merges"],
        ),
        (
            "def tree_rounds(C):\n    return [[(c, c + 1)] for c in range(C - 1)]\n",
            ["already used up", "its part now lives in slot a"],
        ),
        (
            "def tree_rounds(C):\n    return lab.merge_plan(C, 'tree')\n",
            ["calls lab.merge_plan"],
        ),
    ],
)
def test_exercise_4_diagnoses_planted_mistakes(source, says):
    _fails(4, source, *says)


def test_check_merge_steps_still_diagnoses_its_mistakes():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_merge_steps(lambda C: (C - 1, int(np.log2(C))))
    assert "round log2 C up" in out.getvalue()


def test_exercise_2_refuses_logaddexp_reduce():
    _fails(
        2,
        """
        def merge_partials(parts):
            o_c = np.stack([o for o, _ in parts])
            lse_c = np.stack([lse for _, lse in parts])
            lse = np.logaddexp.reduce(lse_c, axis=0)
            w = np.exp(lse_c - np.where(np.isneginf(lse), 0.0, lse))
            return (w[..., None] * o_c).sum(axis=0), lse
        """,
        "numpy.logaddexp",
    )


def test_exercise_1_names_the_larger_chunk_s_output():
    _fails(
        1,
        """
        def empty_pair(N, dv):
            return np.zeros((N, dv)), np.full(N, -np.inf)

        def merge_pair(x, y):
            big = x[1] >= y[1]
            return np.where(big[:, None], x[0], y[0]), np.maximum(x[1], y[1])
        """,
        "the o_c of the chunk with the larger lse",
    )


WORK = """
def merge_work(C, dv):
    return {logs}, {stored}, {once_logs}, {once_stored}
"""
WORK_OK = {
    "logs": "C - 1",
    "stored": "(C - 2) * (dv + 1)",
    "once_logs": "1",
    "once_stored": "0",
}


@pytest.mark.parametrize(
    "changes, says",
    [
        (
            {"logs": "(C - 1).bit_length()"},
            ["case 1 (8, 64)", "tree_logs", "number of rounds"],
        ),
        ({"logs": "C"}, ["case 0 (2, 8)", "C - 1 merges, one log each"]),
        (
            {"stored": "(C - 1) * (dv + 1)"},
            ["case 0 (2, 8)", "tree_stored", "the last merge's result is the output"],
        ),
        (
            {"stored": "(C - 2) * dv"},
            ["case 1 (8, 64)", "a pair: dv values of o and one lse"],
        ),
        (
            {"stored": "C * (dv + 1)"},
            ["case 0", "the C inputs are read by both orders"],
        ),
        ({"once_logs": "C"}, ["case 0", "once_logs", "then one log per row"]),
        (
            {"once_stored": "C * (dv + 1)"},
            ["case 0", "once_stored", "nothing is written out"],
        ),
    ],
)
def test_exercise_5_diagnoses_planted_mistakes(changes, says):
    _fails(5, WORK.format(**{**WORK_OK, **changes}), *says)


def test_exercise_5_template_is_the_worked_solution():
    out = run_check(EX[5], WORK.format(**WORK_OK))
    assert out.startswith("merge_work: ✓ passed 7 cases"), out


def test_exercise_5_refuses_lab_s_merge_plan():
    _fails(
        5,
        "def merge_work(C, dv):\n    n = len(lab.merge_plan(C, 'tree'))\n"
        "    return n, (n - 1) * (dv + 1), 1, 0\n",
        "merge_plan",
    )


def test_exercise_2_names_a_log_per_row_as_rows_not_parts():
    """One log per row in a Python loop: the message counts rows, and asks for one call over all rows."""
    out = _fails(
        2,
        """
        def merge_partials(parts):
            N = len(parts[0][1])
            o, lse = np.zeros((N, len(parts[0][0][0]))), np.full(N, -np.inf)
            for r in range(N):
                L = np.array([p[1][r] for p in parts])
                O = np.stack([p[0][r] for p in parts])
                m = 0.0 if np.isneginf(L.max()) else L.max()
                w = np.exp(L - m)
                if w.sum() > 0:
                    o[r], lse[r] = w @ O / w.sum(), m + np.log(w.sum())
            return o, lse
        """,
        "np.log calls for 7 parts of 3 rows",
        "one np.log call per row, in a loop over the 3 rows",
    )
    assert "fold of pairwise merges" not in out


def test_exercise_2_names_a_log_per_part_without_calling_it_a_fold():
    out = _fails(
        2,
        """
        def merge_partials(parts):
            o_c = np.stack([o for o, _ in parts])
            lse_c = np.stack([lse for _, lse in parts])
            m = lse_c.max(axis=0)
            m = np.where(np.isneginf(m), 0.0, m)
            logw = np.stack([np.log(np.exp(x - m)) for x in lse_c])  # a log per part
            w = np.exp(logw)
            total = w.sum(axis=0)
            seen = total > 0
            total = np.where(seen, total, 1.0)
            o = (w[:, :, None] * o_c).sum(axis=0) / total[:, None]
            return o, np.where(seen, m + np.log(total), -np.inf)
        """,
        "np.log calls for",
        "one np.log call over all rows",
        "a log per part or per pair is more",
    )
    assert "fold of pairwise merges" not in out


def test_exercise_4_names_an_empty_round_at_c_1():
    out = _fails(
        4,
        "def tree_rounds(C):\n"
        "    rounds, live = [], list(range(C))\n"
        "    while True:\n"
        "        rounds.append([(live[i], live[i + 1]) for i in range(0, len(live) - 1, 2)])\n"
        "        live = live[::2]\n"
        "        if len(live) == 1:\n"
        "            return rounds\n",
        "C = 1",
        "round 0 holds no merge",
        "return [], no rounds",
    )
    assert "sequential chain" not in out


ALIASED_CASCADE = """
co = chunk_output  # an alias made in the notebook
def shared_prefix_decode(q, k_pre, v_pre, suffixes, merge=merge_pair):
    o, lse = co(q, k_pre, v_pre)
    for s, (k_s, v_s) in enumerate(suffixes):
        if len(k_s):
            r = slice(s, s + 1)
            part = (lambda f: f(q[r], k_s, v_s))(chunk_output)  # passed as an argument
            o[r], lse[r] = merge((o[r], lse[r]), part)
    return o, lse
"""


def test_exercise_3_follows_its_functions_through_aliases_and_arguments():
    """The calls are traced by the function's code, not read from names: an alias passes."""
    out = run_check(EX[3], GOOD_CHUNK + ALIASED_CASCADE)
    assert out.count("✓") == 1 and "✗" not in out and "never" not in out, out


def test_exercise_3_blames_exercise_1s_merge_reached_by_an_alias():
    wrong_pair = (
        "def merge_pair(x, y):\n    lse = np.maximum(x[1], y[1])\n"
        "    return np.where((x[1] >= y[1])[:, None], x[0], y[0]), lse\n"
    )
    _fails(
        3,
        wrong_pair + GOOD_CHUNK + ALIASED_CASCADE,
        "shared_prefix_decode: ✗",
        "does not pass exercise 1's check yet",
    )


def test_exercise_3_catches_a_missing_merge_behind_an_alias():
    """chunk_output reached through an alias, the suffix's pair computed and dropped: no merge."""
    no_merge = ALIASED_CASCADE.replace(
        "o[r], lse[r] = merge((o[r], lse[r]), part)", "_ = part"
    )
    _fails(3, GOOD_CHUNK + no_merge, "the suffix's pair never entered the merge")


def test_exercise_3_an_alias_never_called_is_still_never_called():
    """A suffix that never reaches chunk_output, however it is named, is caught."""
    skip = ALIASED_CASCADE.replace(
        "part = (lambda f: f(q[r], k_s, v_s))(chunk_output)",
        "part = lab.attention_reference(q[r], k_s, v_s)",
    )
    _fails(3, GOOD_CHUNK + skip, "calls lab.attention_reference")
