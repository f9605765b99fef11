"""Notebook 03's exercises: each worked solution passes its own check cell, each planted classic mistake fails
with its diagnosis, and the instrument and checks of lab/checks/one_pass.py behave."""

import contextlib
import io
import re

import nbformat
import numpy as np
import pytest
from exercise_support import ROOT, assert_fails, exercises, run_check, source

import lab
from lab.checks import one_pass as checks
from lab.checks.one_pass import CountingRows

NAME = "03_one_pass_attention"
EX = {ex.number: ex for ex in exercises(NAME)}
PASSED = {
    1: "normalized_step: ✓ passed 4 cases, 15 blocks; o an average after every block\n",
    2: "one_pass_rows: ✓ passed 13 cases; one pass for all queries, blocks of Bc; no NaN; "
    "never N × M held\n",
    3: "expected_rescales: ✓ passed 7 cases\n",
    4: "          state with m known: ✓\n"
    "        alpha at every block: ✓\n"
    "passes over K, m found first: ✓\n"
    " exponentials saved, Bc = 16: ✓\n"
    "known_max_answers: ✓ 4 of 4 right\n",
}


def _src(text: str) -> str:
    return source(text)


def _fails(number: int, text: str, *says: str) -> str:
    return assert_fails(EX[number], text, *says)


def _fails_row(text: str, *says: str) -> str:
    """A planted `one_pass_row` through `check_one_pass_row`, called directly (the check of one query's
    whole pass, which the notebook's exercise 2 grows into all queries)."""
    ns = {"np": np, "lab": lab, "__name__": "__exercise__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source(text), "<solution>", "exec"), ns)
        checks.check_one_pass_row(ns["one_pass_row"])
    out = out.getvalue()
    assert "✗" in out and "✓" not in out, out
    for said in says:
        assert said in out, f"{said!r} not in:\n{out}"
    return out


def _cells():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]


def test_the_notebook_has_four_checked_exercises_and_an_open_question():
    assert sorted(EX) == [1, 2, 3, 4]
    cells = _cells()
    q = next(i for i, (_, s, _) in enumerate(cells) if s.startswith("### Exercise 4"))
    after = cells[q + 1 :]
    assert any(
        t == "markdown" and "Your answer:" in s and "solution" not in tags
        for t, s, tags in after
    )
    assert any(
        t == "markdown"
        and "solution" in tags
        and "A worked answer" in s
        and "1/(b + 1)" in s
        for t, s, tags in after
    )


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_worked_solution_passes_with_one_fixed_line(number):
    assert run_check(EX[number], EX[number].solution) == PASSED[number]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_the_exercise_section_needs_only_the_setup():
    """The checks build their own cases: nothing from the notebook's body (q, k, v, Bc, run1, ...) is used."""
    ns = {"__name__": "__exercise__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for src in EX[2].setup + EX[2].before:
            exec(compile(src, "<setup>", "exec"), ns)
    assert {"CountingRows", "check_normalized_step", "check_one_pass_rows"} <= set(ns)


def test_exercise_1_comes_before_the_step_for_acc_is_shown():
    """Section 3 states the invariant, then exercise 1; acc' is shown only after its check."""
    cells = _cells()
    where = {
        k: next(i for i, (_, s, _) in enumerate(cells) if s.startswith(p))
        for k, p in (
            ("section", "## 3. One pass"),
            ("exercise", "### Exercise 1"),
            ("check", "# Exercise 1: check"),
            ("reveal", "### The step for $(m, l, acc)$, revealed"),
        )
    }
    assert where["section"] < where["exercise"] < where["check"] < where["reveal"]
    before = "\n".join(s for _, s, _ in cells[: where["check"]])
    assert "acc' =" not in before and "alpha * acc" not in before


def test_the_known_max_format_hint_does_not_give_the_state_away():
    text = "def known_max_answers():\n    return " + repr(
        _RIGHT_4 | {"state with m known": 3}
    )
    out = run_check(EX[4], text)
    line = next(ln for ln in out.splitlines() if "state with m known" in ln)
    assert "✗" in line and "name the loop's variables" in line, out
    assert '"acc"' not in line and "'acc'" not in line and '"l"' not in line, line


@pytest.mark.parametrize("written", ["l, acc", "(l, acc)", ("acc", "l"), ["l", "acc"]])
def test_the_known_max_check_takes_the_state_as_a_string_or_a_tuple(written):
    text = "def known_max_answers():\n    return " + repr(
        _RIGHT_4 | {"state with m known": written}
    )
    assert run_check(EX[4], text) == PASSED[4]


@pytest.mark.parametrize(
    "key", ["alpha at every block", "passes over K, m found first"]
)
@pytest.mark.parametrize("value", ["1", True])
def test_the_known_max_check_wants_numbers_not_strings(key, value):
    text = "def known_max_answers():\n    return " + repr(_RIGHT_4 | {key: value})
    out = run_check(EX[4], text)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith(key))
    assert "✗" in line and "give a number" in line, out


# ------------------------------------------------------------------------------------ exercise 1

ROW_LOOP = """
def one_pass_row(q, k, v, Bc):
    m, l, acc = {m0}, 0.0, np.zeros(v.shape[1])
    for j0 in {blocks}:
        s = k[j0:j0 + Bc] @ q / np.sqrt(q.shape[0])
        m_new = max(m, s.max())
        alpha = {alpha}
        p = np.exp(s - m_new)
        l = alpha * l + p.sum()
        acc = alpha * acc + p @ v[j0:j0 + Bc]
        m = m_new
    return acc / l, {lse}
"""
GOOD = {
    "m0": "-np.inf",
    "blocks": "range(0, k.shape[0], Bc)",
    "alpha": "np.exp(m - m_new)",
    "lse": "m + np.log(l)",
}


def _row(**changes) -> str:
    return ROW_LOOP.format(**{**GOOD, **changes})


WRONG_1 = {
    "non-streaming softmax(k @ q) @ v": (
        """
def one_pass_row(q, k, v, Bc):
    s = k @ q / np.sqrt(q.shape[0])
    p = np.exp(s - s.max())
    return p @ v / p.sum(), s.max() + np.log(p.sum())
""",
        [
            "case (M = 10, Bc = 4;",
            "K was used whole (all M = 10 rows in one load",
            "an array of length M was held",
        ],
    ),
    "returns lab.attention_reference": (
        """
def one_pass_row(q, k, v, Bc):
    o, lse = lab.attention_reference(q[None, :], k, v)
    return o[0], lse[0]
""",
        ["case (M = 10, Bc = 4;", "calls lab.attention_reference", "write it yourself"],
    ),
    "returns lab.attention_row_one_pass": (
        """
def one_pass_row(q, k, v, Bc):
    run = lab.attention_row_one_pass(q, k, v, block_k=Bc)
    return run.o, run.lse
""",
        ["calls lab.attention_row_one_pass"],
    ),
    "the block's own max, not the running max": (
        _row().replace("m_new = max(m, s.max())", "m_new = s.max()"),
        [
            "a block near +400 before 20 keys near -400",
            "NaN in yours",
            "m must be the running max",
            "e^800 = inf",
        ],
    ),
    "lab's one pass on each block, by its module path": (
        """
import lab.one_pass
def one_pass_row(q, k, v, Bc):
    m, l, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    for j0 in range(0, k.shape[0], Bc):
        run = lab.one_pass.attention_row_one_pass(q, k[j0:j0 + Bc], v[j0:j0 + Bc], block_k=Bc)
        m_b = run.lse
        m_new = max(m, m_b)
        l, acc, m = l * np.exp(m - m_new) + np.exp(m_b - m_new), acc * np.exp(m - m_new) + np.exp(m_b - m_new) * run.o, m_new
    return acc / l, m + np.log(l)
""",
        ["calls lab.attention_row_one_pass", "write it yourself"],
    ),
    "torch on each block": (
        """
import torch
def one_pass_row(q, k, v, Bc):
    m, l, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    for j0 in range(0, k.shape[0], Bc):
        s = torch.from_numpy(k[j0:j0 + Bc]) @ torch.from_numpy(q) / np.sqrt(q.shape[0])
        m_new = max(m, float(s.max()))
        p = torch.exp(s - m_new).numpy()
        l, acc = np.exp(m - m_new) * l + p.sum(), np.exp(m - m_new) * acc + p @ v[j0:j0 + Bc]
        m = m_new
    return acc / l, m + np.log(l)
""",
        ["calls torch.", "asks for numpy"],
    ),
    "running max started at 0": (
        _row(m0="0.0"),
        [
            "every score near -1000",
            "o (element 0): NaN in yours",
            "a running max started at 0",
            "m = -inf",
        ],
    ),
    "two passes: (m, l) first, then K again with V": (
        """
def one_pass_row(q, k, v, Bc):
    m, l = -np.inf, 0.0
    for j0 in range(0, len(k), Bc):
        s = k[j0:j0 + Bc] @ q / np.sqrt(len(q))
        m_new = max(m, s.max())
        l = np.exp(m - m_new) * l + np.exp(s - m_new).sum()
        m = m_new
    acc = np.zeros(v.shape[1])
    for j0 in range(0, len(k), Bc):
        acc += np.exp(k[j0:j0 + Bc] @ q / np.sqrt(len(q)) - m) @ v[j0:j0 + Bc]
    return acc / l, m + np.log(l)
""",
        ["K was read 2 times; one pass reads it once"],
    ),
    "the tail block dropped": (
        _row(blocks="range(0, k.shape[0] - Bc + 1, Bc)"),
        [
            "o (element 0): at index",
            "largest |error|",
            "(rtol 1e-09, atol 1e-12)",
            "rows 8-9 of K never read",
            "the last block is shorter",
        ],
    ),
    "no rescaling when the max grows": (
        _row(alpha="1.0"),
        ["o (element 0)", "multiplied by e^(m - m')"],
    ),
    "lse without the max": (
        _row(lse="np.log(l)"),
        ["lse (element 1)", "o is right, lse is not"],
    ),
    "scores exponentiated without a shift": (
        """
def one_pass_row(q, k, v, Bc):
    l, acc = 0.0, np.zeros(v.shape[1])
    for j0 in range(0, len(k), Bc):
        p = np.exp(k[j0:j0 + Bc] @ q / np.sqrt(len(q)))
        l, acc = l + p.sum(), acc + p @ v[j0:j0 + Bc]
    return acc / l, np.log(l)
""",
        ["every score near +1000", "NaN", "e^s overflows"],
    ),
    "every block's scores kept, softmax at the end": (
        """
def one_pass_row(q, k, v, Bc):
    scores, values = [], []
    for j0 in range(0, len(k), Bc):
        scores.append(k[j0:j0 + Bc] @ q / np.sqrt(len(q)))
        values.append(v[j0:j0 + Bc])
    s = np.concatenate(scores)
    p = np.exp(s - s.max())
    return p @ np.concatenate(values) / p.sum(), s.max() + np.log(p.sum())
""",
        [
            "case (M = 16384, Bc = 32;",
            "more than half an array of length M = 16384 in float64",
            "no list of blocks or scores",
        ],
    ),
    "key by key, ignoring Bc": (
        """
def one_pass_row(q, k, v, Bc):
    m, l, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    for j in range(len(k)):
        s = k[j] @ q / np.sqrt(len(q))
        m_new = max(m, s)
        alpha, p = np.exp(m - m_new), np.exp(s - m_new)
        l, acc, m = alpha * l + p, alpha * acc + p * v[j], m_new
    return acc / l, m + np.log(l)
""",
        ["K was loaded in 10 pieces; in blocks of Bc = 4 rows that is 3 loads"],
    ),
    "dv taken from a row of v": (
        _row().replace("np.zeros(v.shape[1])", "np.zeros_like(v[0])"),
        ["V was read 2 times (row 0 of 10)"],
    ),
    "scores not scaled": (
        _row().replace(" / np.sqrt(q.shape[0])", ""),
        ["leaves the scores unscaled"],
    ),
    "o alone returned": (
        _row(lse="0.0").replace("return acc / l, 0.0", "return acc / l"),
        ["returned ndarray, expected a tuple of 2 (o, lse)", "return a tuple (o, lse)"],
    ),
    "scores scaled by 1/d": (
        _row().replace("/ np.sqrt(q.shape[0])", "/ q.shape[0]"),
        ["o (element 0)", "scales the scores by 1/d", "1/sqrt(d) = 0.5 for d = 4"],
    ),
    "no division by l at the end": (
        _row().replace("return acc / l,", "return acc,"),
        ["o (element 0)", "yours is acc, not acc / l"],
    ),
    "the state kept in float32": (
        _row()
        .replace("np.zeros(v.shape[1])", "np.zeros(v.shape[1], dtype=np.float32)")
        .replace("p = np.exp(s - m_new)", "p = np.exp(s - m_new).astype(np.float32)"),
        ["o (element 0)", "float32's precision", "accumulate in float64"],
    ),
    "K used as a whole array": (
        """
def one_pass_row(q, k, v, Bc):
    return k.sum(), 0.0
""",
        ["raised AttributeError", "K and V arrive as CountingRows"],
    ),
}


@pytest.mark.parametrize("case", list(WRONG_1), ids=list(WRONG_1))
def test_one_pass_row_check_planted_mistakes(case):
    source, says = WRONG_1[case]
    _fails_row(source, *says)


# ------------------------------------------------------------------------------------ exercise 2

ROWS_LOOP = """
def one_pass_rows(Q, K, V, Bc, causal=False):
    N, M = Q.shape[0], K.shape[0]
    m, l, acc = np.full(N, {m0}), np.zeros(N), np.zeros((N, V.shape[1]))
    for j0 in range(0, {M}, Bc):
        S = Q @ K[j0:j0 + Bc].T / np.sqrt(Q.shape[1])
        if causal:
            j = np.arange(j0, j0 + S.shape[1])
            S = np.where(j[None, :] <= np.arange(N)[:, None] + {offset}, S, -np.inf)
        m_new = np.maximum(m, S.max(axis=1))
        shift = {shift}
        alpha, P = np.exp(m - shift), np.exp(S - shift[:, None])
        l, acc, m = alpha * l + P.sum(axis=1), alpha[:, None] * acc + P @ V[j0:j0 + Bc], m_new
    seen = l > 0
    l1 = {l1}
    return acc / l1[:, None], {lse}
"""
GOOD_2 = {
    "m0": "-np.inf",
    "M": "M",
    "offset": "M - N",
    "shift": "np.where(np.isneginf(m_new), 0.0, m_new)",
    "l1": "np.where(seen, l, 1.0)",
    "lse": "np.where(seen, m + np.log(l1), -np.inf)",
}


def _rows(**changes) -> str:
    return ROWS_LOOP.format(**{**GOOD_2, **changes})


WRONG_2 = {
    "section 3's row loop called once per query": (
        ROW_LOOP.format(**GOOD)
        + """
def one_pass_rows(Q, K, V, Bc, causal=False):
    o, lse = zip(*(one_pass_row(q, K, V, Bc) for q in Q))
    return np.array(o), np.array(lse)
""",
        ["case (N = 5, M = 40, Bc = 8;", "K was read 5 times; one pass reads it once"],
    ),
    "no guard for a query that sees no key": (
        _rows(shift="m_new", l1="l", lse="m + np.log(l)"),
        [
            "N = 7 > M = 3",
            "o (element 0): NaN in yours",
            "queries 0-3 see no key",
            "e^(-inf + inf) = NaN",
        ],
    ),
    "top-left causal alignment": (
        _rows(offset="0"),
        [
            "causal, N = 4 < M = 11",
            "o (element 0)",
            "the mask's top-left corner",
            "j <= i + M - N",
        ],
    ),
    "the diagonal key hidden": (
        _rows().replace("<= np.arange(N)", "< np.arange(N)"),
        [
            "causal, N = M = 6",
            "hides the diagonal key j = i + M - N",
            "queries 0-5 wrong: query 0 must see key 0, yours used no key",
        ],
    ),
    "one key past the diagonal": (
        _rows(offset="M - N + 1"),
        [
            "causal, N = M = 6",
            "one key too many, j <= i + M - N + 1",
            "queries 0-4 wrong: query 0 must see key 0, yours used keys 0-1",
        ],
    ),
    "the offset the wrong way round": (
        _rows(offset="N - M"),
        [
            "causal, N = 4 < M = 11",
            "offsets the mask by N - M, the wrong way round",
            "query 0 must see keys 0-7, yours used no key",
        ],
    ),
    "the key's place inside its block": (
        _rows().replace(
            "j = np.arange(j0, j0 + S.shape[1])", "j = np.arange(S.shape[1])"
        ),
        [
            "causal, N = M = 6",
            "the key's place inside its block",
            "query 0 must see key 0, yours used 2 keys (0, 4)",
        ],
    ),
    "the diagonal key hidden, no guard": (
        _rows(shift="m_new", l1="l", lse="m + np.log(l)").replace(
            "<= np.arange(N)", "< np.arange(N)"
        ),
        ["causal, N = M = 6", "NaN in yours", "hides the diagonal key"],
    ),
    "masked with -1e9": (
        _rows().replace("S, -np.inf)", "S, -1e9)"),
        [
            "queries 0-3 see no key",
            "expected 0, got",
            "mask with -inf",
            "averages the masked values",
        ],
    ),
    "masked with -1e30": (
        _rows().replace("S, -np.inf)", "S, -1e30)"),
        ["N = 7 > M = 3", "mask with -inf"],
    ),
    "a bias of -1e9 added": (
        _rows().replace("S, -np.inf)", "S, S - 1e9)"),
        ["N = 7 > M = 3", "mask with -inf"],
    ),
    "the state kept in float32": (
        _rows()
        .replace(
            "np.zeros((N, V.shape[1]))", "np.zeros((N, V.shape[1]), dtype=np.float32)"
        )
        .replace(
            "np.exp(S - shift[:, None])",
            "np.exp(S - shift[:, None]).astype(np.float32)",
        ),
        ["N = 5, M = 40", "float32's precision"],
    ),
    "the state made float32 and updated in place": (
        _rows(m0="-np.inf, dtype=np.float32")
        .replace(
            "np.zeros(N), np.zeros((N, V.shape[1]))",
            "np.zeros(N, np.float32), np.zeros((N, V.shape[1]), np.float32)",
        )
        .replace(
            "l, acc, m = alpha * l + P.sum(axis=1), alpha[:, None] * acc + P @ V[j0:j0 + Bc], m_new",
            "l[:], acc[:] = alpha * l + P.sum(axis=1), alpha[:, None] * acc + P @ V[j0:j0 + Bc]\n"
            "        m[:] = m_new",
        ),
        ["N = 5, M = 40", "float32's precision", "dtype=np.float32"],
    ),
    "Q, K and V cast to float32": (
        _rows()
        .replace(
            "S = Q @ K[j0:j0 + Bc].T",
            "S = Q.astype(np.float32) @ K[j0:j0 + Bc].astype(np.float32).T",
        )
        .replace("P @ V[j0:j0 + Bc]", "P @ V[j0:j0 + Bc].astype(np.float32)"),
        ["N = 5, M = 40", "float32's precision"],
    ),
    "the state kept in float16": (
        _rows(m0="-np.inf, dtype=np.float16")
        .replace(
            "np.zeros(N), np.zeros((N, V.shape[1]))",
            "np.zeros(N, np.float16), np.zeros((N, V.shape[1]), np.float16)",
        )
        .replace(
            "l, acc, m = alpha * l + P.sum(axis=1), alpha[:, None] * acc + P @ V[j0:j0 + Bc], m_new",
            "l[:], acc[:] = alpha * l + P.sum(axis=1), alpha[:, None] * acc + P @ V[j0:j0 + Bc]\n"
            "        m[:] = m_new",
        ),
        ["N = 5, M = 40", "3 significant digits", "float16"],
    ),
    "causal ignored": (
        _rows().replace("if causal:", "if False:"),
        ["causal, N = M = 6", "ignores the mask"],
    ),
    "running max started at 0": (
        _rows(m0="0.0"),
        ["every score near -1000", "a running max started at 0"],
    ),
    "lse of an empty row 0, not -inf": (
        _rows(lse="np.where(seen, m + np.log(l1), 0.0)"),
        ["lse (element 1)", "the reference has", "o is right", "lse = -inf"],
    ),
    "the tail block dropped": (
        _rows(M="M - Bc + 1"),
        [
            "N = 13, M = 50, Bc = 7",
            "row 49 of K never read",
            "K[j0:j0 + Bc] stops at M",
        ],
    ),
    "the whole score matrix": (
        """
def one_pass_rows(Q, K, V, Bc, causal=False):
    return lab.attention_reference(Q, K, V, causal=causal)
""",
        ["case (N = 5, M = 40, Bc = 8;", "calls lab.attention_reference"],
    ),
    "the block's own max, not the running max": (
        _rows().replace(
            "m_new = np.maximum(m, S.max(axis=1))", "m_new = S.max(axis=1)"
        ),
        [
            "a block near +400 before 20 keys near -400",
            "m must be the running max",
        ],
    ),
    "acc not rescaled": (
        _rows().replace("alpha[:, None] * acc + P", "acc + P"),
        [
            "case (N = 5, M = 40, Bc = 8;",
            "l was rescaled when the max grew, acc was not",
        ],
    ),
    "l not rescaled": (
        _rows().replace("alpha * l + P.sum", "l + P.sum"),
        [
            "case (N = 5, M = 40, Bc = 8;",
            "acc was rescaled when the max grew, l was not",
        ],
    ),
    "alpha inverted": (
        _rows().replace("np.exp(m - shift)", "np.exp(shift - m)"),
        [
            "case (N = 5, M = 40, Bc = 8;",
            "NaN in yours",
            "the correction points the wrong way",
        ],
    ),
    "alpha inverted, guarded at the first block": (
        _rows().replace(
            "np.exp(m - shift)", "np.where(np.isneginf(m), 0.0, np.exp(shift - m))"
        ),
        ["case (N = 5, M = 40, Bc = 8;", "the correction points the wrong way"],
    ),
    "the block's terms against its own max, no factor": (
        _rows().replace(
            "np.exp(S - shift[:, None])",
            "np.exp(S - np.where(np.isneginf(S.max(axis=1)), 0.0, S.max(axis=1))[:, None])",
        ),
        ["case (N = 5, M = 40, Bc = 8;", "the block's own max, and added as they are"],
    ),
    "exercise 1's answer as lab's, aliased": (
        """
from lab.kernels import attention_reference as ref
def one_pass_rows(Q, K, V, Bc, causal=False):
    return ref(Q, K, V, causal=causal)
""",
        ["calls lab.attention_reference"],
    ),
    "a float N x M mask built up front": (
        _rows()
        .replace(
            "S = Q @ K[j0:j0 + Bc].T / np.sqrt(Q.shape[1])",
            "S = Q @ K[j0:j0 + Bc].T / np.sqrt(Q.shape[1]) + bias[:, j0:j0 + Bc]",
        )
        .replace(
            "    for j0",
            "    bias = np.where(np.arange(M)[None] <= np.arange(N)[:, None] + M - N, 0.0, -np.inf) if causal "
            "else np.zeros((N, M))\n    for j0",
        ),
        [
            "N = 64, M = 16384",
            "more than 8 float64 tiles of N × Bc (64 × 32) and 64 KiB of numpy scratch (196,608 bytes)",
            "no mask or bias for all M keys",
        ],
    ),
    "a boolean N x M mask built up front": (
        _rows()
        .replace(
            "S = np.where(j[None, :] <= np.arange(N)[:, None] + M - N, S, -np.inf)",
            "S = np.where(visible[:, j0:j0 + S.shape[1]], S, -np.inf)",
        )
        .replace(
            "    for j0",
            "    visible = np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N        # (N, M) bool\n    for j0",
        ),
        [
            "causal, N = 64, M = 16384",
            "more than 8 float64 tiles of N × Bc (64 × 32)",
            "no mask or bias for all M keys",
        ],
    ),
    "an N x M/2 intermediate held through the loop": (
        _rows().replace(
            "    for j0",
            "    half = np.ones((N, M // 2), bool)  # N·M/2 bytes, no use at all\n    for j0",
        ),
        [
            "causal, N = 64, M = 16384",
            "more than 8 float64 tiles of N × Bc (64 × 32)",
            "fold each block into (m, l, acc), then drop it",
        ],
    ),
}


@pytest.mark.parametrize("case", list(WRONG_2), ids=list(WRONG_2))
def test_exercise_2_planted_mistakes(case):
    source, says = WRONG_2[case]
    _fails(2, source, *says)


def test_a_float32_state_that_numpy_upcasts_is_float64_and_passes():
    """A state created as float32 but rebound (`acc = alpha * acc + ...`) is float64 from the first
    block on: numpy promotes it, nothing is lost, and the check passes it."""
    planted = _rows(m0="-np.inf, dtype=np.float32").replace(
        "np.zeros(N), np.zeros((N, V.shape[1]))",
        "np.zeros(N, np.float32), np.zeros((N, V.shape[1]), np.float32)",
    )
    assert "np.float32" in planted
    assert run_check(EX[2], _src(planted)) == PASSED[2]


# ------------------------------------------------------------------------------------ the instrument and the checks


def test_counting_rows_counts_each_row_and_each_load():
    a = np.arange(12.0).reshape(6, 2)
    K = CountingRows(a, "K")
    assert K.shape == (6, 2) and len(K) == 6 and K.ndim == 2 and K.dtype == np.float64
    block = K[4:8]  # stops at M, as a numpy slice
    assert (
        np.array_equal(block, a[4:6])
        and K.sizes == [2]
        and K.loads.tolist() == [0, 0, 0, 0, 1, 1]
    )
    block[:] = -1.0  # a copy: the memory is unchanged
    assert np.array_equal(K.peek(), a)
    assert np.array_equal(K[-1], a[-1]) and K.loads[-1] == 2 and K.sizes == [2, 1]
    assert np.array_equal(K[1:3, 0], a[1:3, 0]) and K.loads[1:3].tolist() == [1, 1]
    assert not K.whole


@pytest.mark.parametrize(
    "use", [np.asarray, lambda K: K @ np.ones(2), lambda K: K.T, lambda K: np.exp(K)]
)
def test_counting_rows_counts_a_whole_use_as_one_load_of_every_row(use):
    K = CountingRows(np.ones((5, 2)))
    use(K)
    assert K.whole and K.loads.tolist() == [1] * 5 and K.sizes == [5]


def test_counting_rows_refuses_writes_bad_indices_and_rows_past_the_end():
    K = CountingRows(np.ones((3, 2)), "K")
    with pytest.raises(TypeError, match="read-only"):
        K[0] = 1.0
    with pytest.raises(TypeError, match="a slice of rows"):
        K[[0, 1]]
    with pytest.raises(IndexError, match="past its end"):
        K[3]
    with pytest.raises(ValueError, match="2-D"):
        CountingRows(np.ones(3))


def test_pass_and_order_problems_in_words():
    K = CountingRows(np.ones((10, 2)), "K")
    for j0 in range(0, 10, 4):
        K[j0 : j0 + 4]
    assert checks._pass_problem(K, 4) is None and checks._order_problem(K, 4) is None
    K[0:4]
    assert (
        checks._pass_problem(K, 4)
        == "K was read 2 times (rows 0-3 of 10); one pass reads it once"
    )
    V = CountingRows(np.ones((10, 2)), "V")
    V[0:8]
    assert "V was loaded 8 rows at once" in checks._pass_problem(V, 4)
    assert checks._order_problem(V, 8) == "rows 8-9 of V (of 10) never read"


def test_a_function_raising_not_implemented_is_reported_as_such(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    checks.check_one_pass_row(stub)
    checks.check_one_pass_rows(stub)
    assert capsys.readouterr().out == (
        "stub: not implemented yet (fill in the stub above, then run this cell again)\n"
        * 2
    )


def test_the_fresh_cases_change_with_the_seed_and_plant_a_high_block_first():
    rng = np.random.default_rng
    a, b = checks._fresh_rows_cases(rng(1)), checks._fresh_rows_cases(rng(2))
    assert [c.label for c in a] != [c.label for c in b] or not np.array_equal(
        a[0].k, b[0].k
    )
    for cases in (
        checks._fresh_row_cases(rng(3)),
        a,
        checks._row_cases(),
        checks._rows_cases(),
    ):
        c = next(c for c in cases if c.kind == "high first")
        s = np.atleast_2d(c.q) @ c.k.T / np.sqrt(c.k.shape[1])
        assert (s[:, : c.Bc] > 390).all() and (s[:, c.Bc :] < -390).all()


def test_the_cases_cover_the_classic_failures():
    rows, many = checks._row_cases(), checks._rows_cases()
    for cases in (rows, many):
        assert any(c.k.shape[0] % c.Bc for c in cases)  # a tail block
        for kind, sign in (("negative", -1), ("positive", 1)):
            c = next(c for c in cases if c.kind == kind)
            s = np.atleast_2d(c.q) @ c.k.T / np.sqrt(c.k.shape[1])
            assert (sign * s > 990).all()
    assert any(c.Bc > c.k.shape[0] for c in rows)
    causal = [(c.q.shape[0], c.k.shape[0]) for c in many if c.causal]
    assert (
        any(N < M for N, M in causal)
        and any(N > M for N, M in causal)
        and any(N == M for N, M in causal)
    )
    o, lse = lab.attention_reference(
        *next(c for c in many if c.kind == "masked")[1:4], causal=True
    )
    assert np.isneginf(lse).sum() == 4 and not np.isnan(o).any()


def test_the_memory_limit_is_a_few_tiles_refuses_half_an_n_by_m_mask_and_leaves_the_worked_solution_room():
    """Exercise 2 says "a few N × Bc tiles": the bound is 8 float64 tiles and numpy's 64 KiB scratch, far below an
    N × M/2 array of booleans, and the worked solution holds well under it."""
    case = next(c for c in checks._rows_cases() if c.kind == "memory")
    N, M, Bc = case.q.shape[0], case.k.shape[0], case.Bc
    limit = checks._tiles_cap(case)
    assert limit == 8 * N * Bc * 8 + 64 * 1024 == 196_608
    ns = {"np": np, "lab": lab}
    exec(compile(EX[2].solution, "<solution 2>", "exec"), ns)
    held, _ = lab.peak_bytes(
        checks._call,
        ns["one_pass_rows"],
        case,
        CountingRows(case.k),
        CountingRows(case.v),
        True,
    )
    assert 4 * held < 3 * limit and np.ones((N, M // 2), bool).nbytes > 2 * limit


def test_the_exercise_text_states_the_bound_the_check_applies():
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    text = "\n".join(c.source for c in cells)
    assert "about one $N \\times B_c$ tile" not in text and "N M / 2$ bytes" not in text
    assert "8 float64 tiles" in text and "64 KiB" in text


@pytest.mark.parametrize(
    "name, module", [(NAME, "one_pass"), ("04_merge_order", "merge")]
)
def test_one_set_of_symbols_in_notebooks_03_04_and_their_code(name, module):
    """The update is (m, l, acc) -> (m', l', acc') with alpha = e^(m - m'); in notebook 04 two merged states
    are x and y (b is notebook 03's block number), with m_x, l_x, acc_x."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    for f in (
        f"lab/{module}.py",
        "lab/states.py",
        f"lab/figures/{module}.py",
        f"lab/widgets/{module}.py",
        f"lab/checks/{module}.py",
    ):
        text += (ROOT / f).read_text()
    for old in (
        "m_{old}",
        "m_{new}",
        "m_old",
        "ma, la",
        "mb, lb",
        "acca",
        "accb",
    ):
        assert old not in text, f"{name} or its code still writes {old}"
    if module == "merge":
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        for old in (r"a \\oplus b", r"\bm_a\b", r"\bl_a\b", r"\bacc_b\b"):
            assert not re.search(old, prose), (
                f"{name} still writes {old} for two states"
            )


def _shown(out: str) -> tuple[str, str]:
    found = re.search(r"expected (\S+), got (\S+);", out)
    assert found, out
    return found.group(1), found.group(2)


@pytest.mark.parametrize("number", [1, 2])
def test_a_float32_answer_shows_the_digits_that_differ(number):
    """Two values that agree to 6 significant digits are printed with as many digits as it takes to tell them apart."""
    source = (
        WRONG_1["the state kept in float32"][0]
        if number == 1
        else WRONG_2["the state kept in float32"][0]
    )
    out = _fails_row(source, "float32") if number == 1 else _fails(2, source, "float32")
    want, got = _shown(out)
    assert want != got and float(want) != float(got)


def test_no_relative_error_against_an_expected_zero():
    """A query that should see no key expects o = 0: the relative error there is meaningless and is not printed."""
    out = _fails(2, WRONG_2["masked with -1e9"][0], "expected 0, got")
    line = out.split("hint:")[0]
    assert "largest |error|" in line and (
        "relative error" not in line or "where the expected value is not 0" in line
    ), out


# ------------------------------------------------------------------------------------ exercise 1: the normalized step

STEP = """
def normalized_step(m, l, o, s_b, v_b):
    m_new = {m_new}
    alpha = {alpha}
    p = np.exp(s_b - m_new)
    l_new = {l_new}
    return m_new, l_new, {o_new}
"""
STEP_GOOD = {
    "m_new": "max(m, s_b.max())",
    "alpha": "np.exp(m - m_new)",
    "l_new": "alpha * l + p.sum()",
    "o_new": "(alpha * l * o + p @ v_b) / l_new",
}


def _step(**changes) -> str:
    return STEP.format(**{**STEP_GOOD, **changes})


WRONG_STEP = {
    "acc kept, not o": (
        _step(o_new="alpha * o + p @ v_b"),
        ["block 0", "o':", "that is acc, the unnormalized sum"],
    ),
    "divided by the old l": (
        _step(o_new="(alpha * l * o + p @ v_b) / (l if l > 0 else l_new)"),
        ["block 1", "divided by the old l"],
    ),
    "old o rescaled by alpha alone": (
        _step(o_new="(alpha * o + p @ v_b) / l_new"),
        ["block 1", "weighs 1, not l·α"],
    ),
    "the old average kept at weight alpha": (
        _step(o_new="alpha * o + p @ v_b / l_new"),
        ["block 1", "o':", "keeps the old average at weight α", "α·l / l'"],
    ),
    "divided by an l' without alpha": (
        _step(o_new="(alpha * l * o + p @ v_b) / (l + p.sum())"),
        ["block 1", "o':", "an l' whose old l was not rescaled by α"],
    ),
    "alpha forgotten on l": (
        _step(l_new="l + p.sum()"),
        ["block 1", "l':", "α was forgotten on l", "l' = α·l + Σ e^(s_b - m')"],
    ),
    "alpha forgotten on o": (
        _step(o_new="(l * o + p @ v_b) / l_new"),
        ["block 1", "o':", "α was forgotten on o", "multiply it by α"],
    ),
    "divided by the block's own sum": (
        _step(o_new="(alpha * l * o + p @ v_b) / p.sum()"),
        ["block 1", "o':", "divided by the block's own sum", "divide by l'"],
    ),
    "the block's average added": (
        _step(o_new="alpha * l * o / l_new + p @ v_b / p.sum()"),
        ["block 1", "o':", "added as an average", "divide the total once by l'"],
    ),
    "no rescale when the max grows": (
        _step(alpha="1.0"),
        ["block 1", "l':", "multiply the old terms by α"],
    ),
    "the block's values averaged (.mean), not summed": (
        _step(o_new="(alpha * l * o + (p[:, None] * v_b).mean(axis=0)) / l_new"),
        ["block 0", "o':", "averaged (.mean), not summed", "p @ v_b"],
    ),
    "the block's terms averaged in l and o": (
        _step(
            l_new="alpha * l + p.mean()",
            o_new="(alpha * l * o + (p[:, None] * v_b).mean(axis=0)) / l_new",
        ),
        ["block 0", "averaged (.mean), not summed"],
    ),
    "the block's max": (
        _step(m_new="s_b.max()"),
        ["m':", "max(m, max s_b)"],
    ),
    "alpha inverted": (
        _step(alpha="np.exp(m_new - m)"),
        ["block 0", "NaN in yours", "α is inverted", "α = e^(m - m') <= 1"],
    ),
    "m never updated": (
        _step(m_new="m"),
        ["block 0", "m' is still the old m"],
    ),
    "no max subtracted": (
        """
        def normalized_step(m, l, o, s_b, v_b):
            p = np.exp(s_b)
            l_new = l + p.sum()
            return max(m, s_b.max()), l_new, (l * o + p @ v_b) / l_new
        """,
        ["block 0", "l':", "no max subtracted"],
    ),
    "the block's terms against the block's own max": (
        _step().replace("p = np.exp(s_b - m_new)", "p = np.exp(s_b - s_b.max())"),
        ["block 2", "l':", "the block's own max"],
    ),
    "no max at all, m' = 0": (
        """
        def normalized_step(m, l, o, s_b, v_b):
            p = np.exp(s_b)
            l_new = l + p.sum()
            return 0.0, l_new, (l * o + p @ v_b) / l_new
        """,
        ["block 0", "m':", "m' is 0, but the largest score seen so far is"],
    ),
    "lab's merge": (
        """
        def normalized_step(m, l, o, s_b, v_b):
            from lab.states import SoftmaxState
            a = SoftmaxState(np.array([m]), np.array([l]), (l * o)[None])
            b = lab.partial_state(s_b[None], v_b)
            st = lab.merge_states(a, b)
            return float(st.m[0]), float(st.l[0]), st.acc[0] / st.l[0]
        """,
        ["calls lab."],
    ),
    "notebook 04's merge of (o, lse) pairs": (
        """
        def normalized_step(m, l, o, s_b, v_b):
            m_b = s_b.max()
            p = np.exp(s_b - m_b)
            pair = (p @ v_b / p.sum())[None], np.array([m_b + np.log(p.sum())])
            if l == 0:
                o_new, lse = pair
            else:
                o_new, lse = lab.merge_output_pair((o[None], np.array([m + np.log(l)])), pair)
            m_new = max(m, m_b)
            return m_new, float(np.exp(lse[0] - m_new)), o_new[0]
        """,
        ["calls lab.merge_output_pair", "lab's own answer to this exercise"],
    ),
    "notebook 04's merge of many parts": (
        """
        from lab.merge import merge_outputs as combine
        def normalized_step(m, l, o, s_b, v_b):
            m_b = s_b.max()
            p = np.exp(s_b - m_b)
            pair = (p @ v_b / p.sum())[None], np.array([m_b + np.log(p.sum())])
            if l == 0:
                o_new, lse = pair
            else:
                o_new, lse = combine([o[None], pair[0]], [np.array([m + np.log(l)]), pair[1]])
            m_new = max(m, m_b)
            return m_new, float(np.exp(lse[0] - m_new)), o_new[0]
        """,
        ["calls lab.merge_outputs", "lab's own answer to this exercise"],
    ),
    "torch": (
        """
        import torch
        def normalized_step(m, l, o, s_b, v_b):
            m_new = max(m, s_b.max())
            alpha = np.exp(m - m_new)
            p = torch.exp(torch.from_numpy(s_b - m_new)).numpy()
            l_new = alpha * l + p.sum()
            return m_new, l_new, (alpha * l * o + p @ v_b) / l_new
        """,
        ["calls torch", "asks for numpy"],
    ),
    "in place": (
        """
        def normalized_step(m, l, o, s_b, v_b):
            m_new = max(m, s_b.max())
            alpha = np.exp(m - m_new)
            s_b -= m_new
            p = np.exp(s_b)
            l_new = alpha * l + p.sum()
            o *= alpha * l
            o += p @ v_b
            o /= l_new
            return m_new, l_new, o
        """,
        ["changes its input in place"],
    ),
    "two values": (
        _step().replace("return m_new, l_new, ", "return m_new, "),
        ["a tuple (m', l', o')"],
    ),
}


@pytest.mark.parametrize("case", list(WRONG_STEP), ids=list(WRONG_STEP))
def test_exercise_1_planted_mistakes(case):
    text, says = WRONG_STEP[case]
    _fails(1, text, *says)


@pytest.mark.parametrize("seed", [284494, 906176])
def test_exercise_1_tells_the_average_added_from_the_block_divided_where_they_agree_to_1e5(
    seed,
):
    """At these seeds α·l is tiny against the block's Σ e^(s_b - m'), so the two mistakes agree to 1e-5: the
    hint is the one the function equals to the check's own tolerance."""
    ns = {"np": np}
    exec(WRONG_STEP["the block's average added"][0], ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_normalized_step(ns["normalized_step"], seed=seed)
    assert "added as an average" in out.getvalue(), out.getvalue()


def test_exercise_1_accepts_the_step_written_from_acc():
    text = """
        def normalized_step(m, l, o, s_b, v_b):
            m_new = max(m, s_b.max())
            p = np.exp(s_b - m_new)
            acc = np.exp(m - m_new) * (l * o) + p @ v_b  # l·o is acc
            l_new = np.exp(m - m_new) * l + p.sum()
            return m_new, l_new, acc / l_new
        """
    assert run_check(EX[1], source(text)) == PASSED[1]


def test_exercise_1_refuses_a_step_that_keeps_the_earlier_blocks():
    """A closure over every block it was given recomputes the softmax of all of them: right on the check's
    own loop, wrong on a state handed over from keys it never saw."""
    text = """
        def normalized_step(m, l, o, s_b, v_b, _seen=[]):
            if m == -np.inf:
                _seen.clear()
            _seen.append((s_b, v_b))
            s = np.concatenate([x for x, _ in _seen])
            v = np.concatenate([y for _, y in _seen])
            p = np.exp(s - s.max())
            return s.max(), p.sum(), p @ v / p.sum()
        """
    _fails(1, text, "given a state it did not build", "may use only (m, l, o)")


def test_the_normalized_step_cases_change_with_the_seed_and_raise_the_max_in_block_1():
    first = checks._step_blocks(np.random.default_rng(1))
    again = checks._step_blocks(np.random.default_rng(1))
    other = checks._step_blocks(np.random.default_rng(2))
    assert all(np.array_equal(a[0][0], b[0][0]) for a, b in zip(first, again))
    assert not np.array_equal(first[0][0][0], other[0][0][0])
    for blocks in first[:3]:
        assert blocks[1][0].max() > blocks[0][0].max()


WRONG_RESCALES = {
    "right": (
        "def expected_rescales(n_blocks):\n    return sum(1 / (b + 1) for b in range(1, n_blocks))",
        ["✓ passed 7 cases"],
    ),
    "block 0 counted": (
        "def expected_rescales(n_blocks):\n    return sum(1 / (b + 1) for b in range(n_blocks))",
        ["case 0 (1)", "counts block 0 too"],
    ),
    "1/b": (
        "def expected_rescales(n_blocks):\n    return sum(1 / b for b in range(1, n_blocks))",
        ["case 1 (2)", "probability 1/(b + 1), not 1/b"],
    ),
    "every block": (
        "def expected_rescales(n_blocks):\n    return n_blocks - 1",
        ["the worst row"],
    ),
    "log n": (
        "import math\ndef expected_rescales(n_blocks):\n    return math.log(n_blocks)",
        ["log n is how it grows"],
    ),
    "one block too many at the end": (
        "def expected_rescales(n_blocks):\n"
        "    return sum(1 / (b + 1) for b in range(1, n_blocks + 1))",
        ["case 0 (1)", "one block too many at the end"],
    ),
    "one block too few at the end": (
        "def expected_rescales(n_blocks):\n"
        "    return sum(1 / (b + 1) for b in range(1, n_blocks - 1))",
        ["case 1 (2)", "one block too few at the end"],
    ),
    "a chance of 1/2 per block": (
        "def expected_rescales(n_blocks):\n    return (n_blocks - 1) / 2",
        ["case 2 (16)", "beat every block before it"],
    ),
}


@pytest.mark.parametrize("case", list(WRONG_RESCALES), ids=list(WRONG_RESCALES))
def test_the_expected_rescales_check_names_each_planted_mistake(case, capsys):
    from lab.checks.one_pass import check_expected_rescales

    text, says = WRONG_RESCALES[case]
    ns = {}
    exec(compile(text, "<planted>", "exec"), ns)
    check_expected_rescales(ns["expected_rescales"])
    out = capsys.readouterr().out
    assert out.count("✓") + out.count("✗") == 1, out
    for said in says:
        assert said in out, out


_RIGHT_4 = {
    "state with m known": ("l", "acc"),
    "alpha at every block": 1,
    "passes over K, m found first": 2,
    "exponentials saved, Bc = 16": 256,
}
PASSES, SAVED = "passes over K, m found first", "exponentials saved, Bc = 16"
WRONG_4 = {  # (the answer changed, what the check must say)
    "m kept in the state": (
        {"state with m known": ("m", "l", "acc")},
        "a constant the loop reads, not state it updates",
    ),
    "o in place of acc": (
        {"state with m known": ("l", "o")},
        "o = acc / l is computed once",
    ),
    "acc alone": ({"state with m known": ("acc",)}, "the loop must still sum l"),
    "alpha in the state": (
        {"state with m known": ("l", "acc", "alpha")},
        "is not state: it is a factor",
    ),
    "alpha of block 0": ({"alpha at every block": 0}, "0 is α at block 0"),
    "passes: one, as if m were free": ({PASSES: 1}, "every key is read once before"),
    "passes: three, the stored row": ({PASSES: 3}, "that is section 1's method"),
    "passes: none": ({PASSES: 0}, "every score needs its key"),
    "passes: a string": ({PASSES: "2"}, "give a number"),
    "alpha: a string": ({"alpha at every block": "1"}, "give a number"),
    "saved: block 0 left out": ({SAVED: 255}, "block 0 evaluates α too"),
    "saved: for 16 blocks": ({SAVED: 16}, "that is for Bc = 256 (16 blocks)"),
    "saved: every exponential": (
        {SAVED: 4352},
        "each key's e^(s_j - m) is still needed",
    ),
    "saved: none": ({SAVED: 0}, "each block saves one exponential"),
    "saved: the count at Bc = 256 read off the table": (
        {SAVED: 4112},
        "each key's e^(s_j - m) is still needed",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_4))
def test_the_known_max_check_names_each_planted_mistake(case):
    change, says = WRONG_4[case]
    answers = _RIGHT_4 | change
    text = "def known_max_answers():\n    return " + repr(answers)
    out = run_check(EX[4], text)
    assert "known_max_answers: ✗ 3 of 4 right" in out and says in out, out
    right = {k: v for k, v in _RIGHT_4.items() if k not in change}
    assert all(f"{k}: ✓" in out for k in right), out


def test_the_known_max_check_waits_for_every_answer_and_hides_the_values():
    text = "def known_max_answers():\n    return " + repr(_RIGHT_4 | {SAVED: ...})
    out = run_check(EX[4], text)
    assert f"not answered yet: '{SAVED}'" in out and "✓" not in out
    wrong = run_check(
        EX[4], "def known_max_answers():\n    return " + repr(_RIGHT_4 | {SAVED: 7})
    )
    assert "✗" in wrong and "256" not in wrong.split(f"{SAVED}:")[1]
    assert "return a dict" in run_check(EX[4], "def known_max_answers():\n    return 5")


def test_the_known_max_answers_are_derived_not_read_off_the_page():
    """Item 4 asks for a number no cell above prints: the saving at Bc = 16."""
    assert (
        "predicted rescales" not in EX[4].spec and "counted rescales" not in EX[4].spec
    )
    assert "block_k=16).steps" not in EX[4].spec
    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    stub = next(
        i
        for i, c in enumerate(cells)
        if c.source.startswith("# Exercise 4: your answers")
    )
    shown = "\n".join(
        "".join(o.get("text", ""))
        for c in cells[:stub]
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "4,352" not in shown and "4352" not in shown
