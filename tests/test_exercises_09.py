"""Notebook 09's exercises, in its two parts (09_backward: the standard backward and D; 09_tiled_backward: the
loop order and the tiled backward): each worked solution passes its check cell; planted classic mistakes fail
with their diagnosis.

The planted solutions are the notebook's own worked solution with one line changed (`_planted` fails
loudly when that line is no longer there), or a short function written for the mistake. Also unit tests
for lab/checks/backward.py.
"""

import ast
import dataclasses
import sys
import tracemalloc

import nbformat
import numpy as np
import pytest
from exercise_support import EVASIONS, ROOT, evading, exercises, replace_code, run_check

import lab
from lab.checks.backward import (
    BACKWARD_MISTAKES,
    arrays_formed,
    backward_with_mistake,
    check_atomic_numbers,
    check_delta,
    check_loop_order,
    check_outer_choice,
    check_p_tile,
    check_row_sum,
    check_softcap_tile,
    check_softmax_jacobian,
    check_standard_backward,
    check_streamed_delta,
    check_tiled_backward,
    query_outer_walk,
)

NAME, NAME2 = "09_backward", "09_tiled_backward"
_PART1 = {ex.number: ex for ex in exercises(NAME)}
_PART2 = {ex.number: ex for ex in exercises(NAME2)}
# the exercises by what they build: part 1's 1 and 2, part 2's 1 and 2
EX = {
    "standard": _PART1[1],
    "delta": _PART1[2],
    "loop": _PART2[1],
    "tiled": _PART2[2],
    "softcap": _PART2[3],
}
STEP = {
    "softmax_jacobian": "standard",
    "my_backward": "standard",
    "delta": "delta",
    "delta_streamed": "delta",
    "query_outer_counts": "loop",
    "atomic_numbers": "loop",
    "p_tile": "tiled",
    "tiled_backward": "tiled",
    "softcap_tile": "softcap",
}
# The worked step (a) and the given delta, for the planted loops written whole below.
STEPS = EX["tiled"].solution.split("def tiled_backward")[0]


def _planted(name: str, old: str, new: str) -> str:
    """The worked solution of the exercise holding `name` with `old` replaced by `new`."""
    return replace_code(EX[STEP[name]].solution, old, new)


def _verdict(out: str, name: str) -> str:
    """The line the check of function `name` printed."""
    return next((line for line in out.splitlines() if line.startswith(f"{name}:")), "")


def test_each_part_has_two_code_exercises():
    assert sorted(_PART1) == [1, 2] and sorted(_PART2) == [1, 2, 3]


@pytest.mark.parametrize("key", list(EX))
def test_worked_solution_passes(key):
    out = run_check(EX[key], EX[key].solution)
    assert "✓" in out and "✗" not in out, out
    if key == "tiled":
        assert all(f"{n}: ✓" in out for n in ("p_tile", "tiled_backward"))
    if key == "standard":
        assert all(f"{n}: ✓" in out for n in ("softmax_jacobian", "my_backward"))


@pytest.mark.parametrize("key", list(EX))
def test_stub_reports_not_implemented(key):
    out = run_check(EX[key], EX[key].stub)
    assert "not implemented yet" in out and "✗" not in out, out


def test_the_tiled_stub_gives_delta_and_asks_for_the_rest():
    ns = {"np": np}
    exec(compile(EX["tiled"].stub, "<stub>", "exec"), ns)
    o, do = np.ones((3, 2)), np.full((3, 2), 2.0)
    np.testing.assert_array_equal(ns["delta"](o, do), [4.0, 4.0, 4.0])
    for name in ("p_tile", "tiled_backward"):
        assert f"def {name}" in EX["tiled"].stub


def test_the_derivations_come_after_the_checks():
    """Part 1 shows dS = P ∘ (dP − D) and D = rowsum(dO ∘ O) only after the exercise that derives them."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    src = [c.source for c in nb.cells]
    ex1 = next(i for i, s in enumerate(src) if s.startswith("### Exercise 1"))
    ex2 = next(i for i, s in enumerate(src) if s.startswith("### Exercise 2"))
    shown_ds = next(i for i, s in enumerate(src) if "dP_{ij} - D_i\\bigr)" in s)
    shown_d = next(i for i, s in enumerate(src) if "= dO_i \\cdot O_i" in s)
    checks = [
        i for i, s in enumerate(src) if "check_standard_backward(my_backward" in s
    ]
    assert ex1 < checks[0] < shown_ds and ex2 < shown_d
    assert not any(
        "dO_i \\cdot O_i" in s or "dO \\circ O" in s or "rowsum(dO" in s
        for s in src[:ex2]
    )


def test_the_tiled_notebook_shows_the_method_and_hides_the_skip():
    """Part 2's text gives P_IJ = exp(S_IJ - lse_I) and the method (cut part 1's sums at the block edges)
    before Exercise 2; the exercise derives what the text does not give, the five tile updates and the causal
    skip, which appear only after the check (collapsed) or in the hidden solution; D_i is defined where it first appears, and the
    symbols sit on one card at the top, m and l among them, with how notebook 05's indices differ."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    src = [c.source for c in nb.cells]
    check_at = next(i for i, s in enumerate(src) if "check_tiled_backward(" in s)
    exercise = next(i for i, s in enumerate(src) if s.startswith("### Exercise 2"))
    tile_rules = (
        "P_{IJ}^\\top dO_I",
        "dO_I V_J^\\top",
        "dS_{IJ} K_J",
        "dS_{IJ}^\\top Q_I",
    )
    for (
        rule
    ) in tile_rules:  # derived in the exercise: shown only after its check, collapsed
        shown_at = [i for i, s in enumerate(src) if rule in s]
        assert shown_at and min(shown_at) > check_at, (rule, shown_at)
        assert all("<details>" in src[i] for i in shown_at)
    p_tile = [i for i, s in enumerate(src) if "\\exp\\bigl(S_{IJ} - lse_I\\bigr)" in s]
    assert (
        p_tile and min(p_tile) > check_at and all("<details>" in src[i] for i in p_tile)
    )
    assert not any(
        "e^{S_{ij} - lse_i}" in s for s in src[:check_at]
    )  # Exercise 2 (a) derives it
    assert any("**Derive, on paper:**" in s and "lse_i" in s for s in src[:exercise])
    hidden = {
        i for i, c in enumerate(nb.cells) if "solution" in c.metadata.get("tags", [])
    }
    skip = ("j_0 > (i_1 - 1)", "j0 > i1 - 1", "i1 - 1 + M - N")
    shown = [
        i for i, s in enumerate(src) if i not in hidden and any(f in s for f in skip)
    ]
    assert shown and min(shown) > check_at, shown
    first_d = next(i for i, s in enumerate(src) if "D_i" in s)
    assert "dO_i \\cdot O_i" in src[first_d] and "P_{ij}\\,dP_{ij}" in src[first_d]
    card = next(i for i, s in enumerate(src) if s.startswith("**Symbols.**"))
    assert card == first_d and card < 4 and "capitals for a block" in src[card]
    assert "m_i = \\max_j" in src[card] and "notebook 05" in src[card]
    assert not any(
        "lab.FlashAttention" in s for s in src
    )  # one name for the torch kernel


def test_the_tiled_worked_solution_is_short_cells_with_prose_between():
    """The worked tiled backward is read in class: pieces of at most 16 lines under their title, each after a
    collapsed hint that says what it does; the code is tagged solution (a learner's copy drops it), the three
    hints are not, and give neither the tile updates nor the skip test."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    stub = next(i for i, c in enumerate(nb.cells) if "def tiled_backward" in c.source)
    check = next(
        i for i, c in enumerate(nb.cells) if "check_tiled_backward(" in c.source
    )
    pieces = nb.cells[stub + 1 : check]
    code = [c for c in pieces if c.cell_type == "code"]
    hints = [c for c in pieces if c.cell_type == "markdown"]
    assert all("solution" in c.metadata.get("tags", []) for c in code)
    assert len(hints) == 3 and all(  # staged hints stay in a learner's copy, collapsed
        "solution" not in c.metadata.get("tags", [])
        and c.source.startswith("<details><summary>Hint")
        for c in hints
    )
    rules = ("P_{IJ}^\\top dO_I", "dS_{IJ} K_J", "j0 > i1 - 1", "j_0 > (i_1 - 1)")
    assert not any(r in c.source for c in hints for r in rules)
    assert len(code) >= 3 and all(len(c.source.splitlines()) <= 17 for c in code)
    kinds = [c.cell_type for c in pieces]
    assert "code" not in {
        a for a, b in zip(kinds, kinds[1:]) if a == b
    }  # prose between
    for name in ("p_tile", "visible", "tile_grads", "tiled_backward"):
        assert (
            f"def {name}" in EX["tiled"].solution
        )  # the pieces, joined, are the solution


def test_the_kept_ratio_names_what_standard_attention_keeps():
    """scale·q is said where it first appears: the forward's new array, the left factor of
    (scale·q) kᵀ, which the backward needs for dK; the cell under the figure reads as the formula."""
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    src = [c.source for c in nb.cells]
    first = next(
        i for i, s in enumerate(src) if "scale}\\cdot q" in s or "scale·q" in s
    )
    assert "left factor" in src[first] and "for $dK$" in src[first], src[first]
    cell = next(s for s in src if "def kept(" in s)
    assert "P (N × M) and scale·q (N × d)" in cell and "o (N × d) and lse (N,)" in cell


def test_a_causal_case_puts_rows_with_and_without_keys_in_one_query_block():
    """A kernel that skips the tiles no row of the block sees meets a row with no key (lse = -inf) only when
    N - M is not a multiple of Br: the check cell must hold such a case, or exp(S - lse) = NaN passes."""
    assign = next(
        node
        for node in ast.parse(EX["tiled"].check).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "cases"
    )
    cases = eval(ast.unparse(assign.value))
    assert any(c[6] and c[0] > c[1] and (c[0] - c[1]) % c[4] for c in cases), cases


def test_the_tiled_spec_allows_per_row_vectors():
    spec = " ".join(EX["tiled"].spec.split())
    assert (
        "per-row vectors such as $D$" in spec
        and "an array spanning all queries" not in spec
    )


def test_the_loop_order_question_has_a_cell_to_answer_in_and_a_worked_answer():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    at = next(
        i for i, c in enumerate(nb.cells) if "check_loop_order(query_outer" in c.source
    )
    after = nb.cells[at + 1 :]
    assert after[0].cell_type == "markdown" and "Your answer" in after[0].source
    assert not after[0].metadata.get("tags")
    assert (
        "solution" in after[1].metadata.get("tags", []) and "atomic" in after[1].source
    )


@pytest.mark.parametrize(
    "N, M, Br, Bc",
    [(64, 96, 16, 32), (100, 37, 16, 8), (7, 300, 64, 48), (33, 33, 32, 32)],
)
def test_the_walk_counts_blocks_with_a_short_last_one(N, M, Br, Bc):
    reads, writes = query_outer_walk(N, M, Br, Bc)
    Tr = -(-N // Br)
    assert reads == {"q": 1, "k": Tr, "v": Tr, "do": 1}
    assert writes == {"dq": 1, "dk": Tr, "dv": Tr}


KEY_OUTER = """
def query_outer_counts(N, M, Br, Bc):
    Tc = -(-M // Bc)
    return {"q": Tc, "do": Tc, "k": 1, "v": 1}, {"dq": Tc, "dk": 1, "dv": 1}
"""
FLOOR = """
def query_outer_counts(N, M, Br, Bc):
    return {"q": 1, "do": 1, "k": N // Br, "v": N // Br}, {"dq": 1, "dk": N // Br, "dv": N // Br}
"""
RATIO = """
def query_outer_counts(N, M, Br, Bc):
    return {"q": 1, "do": 1, "k": N / Br, "v": N / Br}, {"dq": 1, "dk": N / Br, "dv": N / Br}
"""
KEY_BLOCKS = """
def query_outer_counts(N, M, Br, Bc):
    Tc = -(-M // Bc)
    return {"q": 1, "do": 1, "k": Tc, "v": Tc}, {"dq": 1, "dk": Tc, "dv": Tc}
"""
DO_FOR_D = """
def query_outer_counts(N, M, Br, Bc):
    Tr = -(-N // Br)
    return {"q": 1, "do": 2, "k": Tr, "v": Tr}, {"dq": 1, "dk": Tr, "dv": Tr}
"""
HELD = """
def query_outer_counts(N, M, Br, Bc):
    Tr = -(-N // Br)
    return {"q": 1, "do": 1, "k": Tr, "v": Tr}, {"dq": 1, "dk": 1, "dv": 1}
"""
DQ_ADDED = """
def query_outer_counts(N, M, Br, Bc):
    Tr, Tc = -(-N // Br), -(-M // Bc)
    return {"q": 1, "do": 1, "k": Tr, "v": Tr}, {"dq": Tc, "dk": Tr, "dv": Tr}
"""
ONE_DICT = """
def query_outer_counts(N, M, Br, Bc):
    Tr = -(-N // Br)
    return {"q": 1, "do": 1, "k": Tr, "v": Tr, "dq": 1, "dk": Tr, "dv": Tr}
"""
CALLS_WALK = """
from lab.checks.backward import query_outer_walk as count


def query_outer_counts(N, M, Br, Bc):
    return count(N, M, Br, Bc)
"""
TABLE = """
def query_outer_counts(N, M, Br, Bc):
    return {"q": 1, "do": 1, "k": 7, "v": 7}, {"dq": 1, "dk": 7, "dv": 7}
"""


@pytest.mark.parametrize(
    "source, expected",
    [
        (KEY_OUTER, ["case 0", "section 1's order, key blocks outside"]),
        (FLOOR, ["is not a multiple of Br", "not ⌊N/Br⌋"]),
        (RATIO, ["a count of blocks is a whole number"]),
        (KEY_BLOCKS, ["count the query blocks"]),
        (DO_FOR_D, ["D's own pass over dO is not counted"]),
        (HELD, ["once per query block"]),
        (DQ_ADDED, ["dQ_I collects every key block's part", "written once"]),
        (ONE_DICT, ["returned dict", "two dicts"]),
        (TABLE, ["✗ case 0", "wrong: k, v, dk, dv"]),
        (CALLS_WALK, ["✗ case 0", "it calls lab.checks.backward.query_outer_walk"]),
    ],
    ids=[
        "key-outer",
        "floor",
        "ratio",
        "key-blocks",
        "do-for-D",
        "held",
        "dq-added",
        "one-dict",
        "table",
        "calls-the-walk",
    ],
)
def test_planted_loop_order_answer_is_diagnosed(source, expected):
    atomic = "def atomic_numbers" + EX["loop"].solution.split("def atomic_numbers")[1]
    out = run_check(EX["loop"], atomic + source)
    assert "✗" in _verdict(out, "query_outer_counts"), out
    assert all(len(line) <= 100 for line in out.splitlines()), out
    flat = " ".join(out.split())  # the hint is wrapped to the projector's width
    for text in expected:
        assert text in flat, f"{text!r} not in:\n{out}"


def test_the_loop_order_cases_are_drawn_afresh(capsys):
    got = []

    def check(N, M, Br, Bc):
        got.append((N, M, Br, Bc))
        Tr = -(-N // Br)
        return {"q": 1, "k": Tr, "v": Tr, "do": 1}, {"dq": 1, "dk": Tr, "dv": Tr}

    check_loop_order(check, seed=1)
    check_loop_order(check, seed=2)
    first, second = got[: len(got) // 2], got[len(got) // 2 :]
    assert first != second and first[0] == second[0] == (64, 96, 16, 32)
    assert all(N % Br and -(-N // Br) != -(-M // Bc) for N, M, Br, Bc in first[1:])
    assert capsys.readouterr().out.count("check: ✓ passed 6 cases") == 2


PLANTED = [
    # Exercise 2 (a): D streamed over key blocks
    (
        "delta_streamed",
        "no rescale",
        ("alpha, e = np.exp(m - m_new),", "alpha, e = 1.0,"),
        ["✗ case 0", "not rescaled when the running max moves"],
    ),
    (
        "delta_streamed",
        "block max",
        (
            "alpha, e = np.exp(m - m_new), np.exp(s - m_new[:, None])",
            "alpha, e = 1.0, np.exp(s - s.max(axis=-1, keepdims=True))",
        ),
        ["✗ case 0", "that block's own max"],
    ),
    (
        "delta_streamed",
        "no division",
        ("return acc / l", "return acc"),
        ["✗ case 0", "not divided by l_i"],
    ),
    (
        "delta_streamed",
        "last block dropped",
        ("range(0, k.shape[0], Bc)", "range(0, k.shape[0] // Bc * Bc, Bc)"),
        ["✗ case 1", "the last, shorter key block was never visited"],
    ),
    (
        "delta_streamed",
        "alpha inverted",
        ("np.exp(m - m_new),", "np.exp(m_new - m),"),
        ["✗ case 0", "On the first block m = −inf", "the rescale is e^(m_old − m_new)"],
    ),
    (
        "delta_streamed",
        "alpha inverted, the first block guarded",
        (
            "np.exp(m - m_new),",
            "np.where(np.isneginf(m), 0, np.exp(m_new - m)),",
        ),
        ["✗ case 0", "the rescale is inverted", "e^(m_old − m_new) ≤ 1"],
    ),
    (
        "delta_streamed",
        "no max",
        (
            "alpha, e = np.exp(m - m_new), np.exp(s - m_new[:, None])",
            "alpha, e = 1.0, np.exp(s)",
        ),
        ["✗ case 4", "e^S without the max", "overflows"],
    ),
    (
        "delta_streamed",
        "the whole row at once",
        (
            "for j0 in range(0, k.shape[0], Bc):",
            "for j0 in [0]:\n        Bc = k.shape[0]",
        ),
        ["✗ case 5", "formed an array of shape (64, 4096)"],
    ),
    (
        "delta_streamed",
        "max from the block",
        ("m_new = np.maximum(m, s.max(axis=-1))", "m_new = s.max(axis=-1)"),
        ["✗ case 3", "NaN in yours", "each block's own max, not the running max"],
    ),
    (
        "delta_streamed",
        "terms against the block max",
        (
            "np.exp(s - m_new[:, None])  # rescale",
            "np.exp(s - s.max(axis=-1, keepdims=True))  # rescale",
        ),
        ["✗ case 0", "new terms are taken against that block's own max"],
    ),
    (
        "delta_streamed",
        "lab's forward",
        ("return acc / l", "return (lab.attention_reference(q, k, v)[0] * do).sum(-1)"),
        ["✗ case 0", "calls lab.attention_reference"],
    ),
    (
        "delta_streamed",
        "a wrong signature",
        ("def delta_streamed(q, k, v, do, Bc):", "def delta_streamed(q, k, v, do):"),
        ["✗ case 0", "raised TypeError"],
    ),
    # Exercise 1 of part 2: the numbers added into by several outer blocks
    (
        "atomic_numbers",
        "swapped",
        ("return key_outer, query_outer", "return query_outer, key_outer"),
        ["✗ case ", "the two are swapped"],
    ),
    (
        "atomic_numbers",
        "d for dv",
        ("query_outer = M * d + M * dv", "query_outer = 2 * M * d"),
        ["✗ case ", "dV has d_v columns"],
    ),
    (
        "atomic_numbers",
        "dV forgotten",
        ("query_outer = M * d + M * dv", "query_outer = M * d"),
        ["✗ case ", "both dK and dV"],
    ),
    (
        "atomic_numbers",
        "rows",
        ("key_outer = N * d", "key_outer = N"),
        ["✗ case ", "that counts rows"],
    ),
    (
        "atomic_numbers",
        "bytes",
        ("return key_outer, query_outer", "return 4 * key_outer, 4 * query_outer"),
        ["✗ case ", "that counts bytes (4 a number)"],
    ),
    (
        "atomic_numbers",
        "something else",
        ("key_outer = N * d", "key_outer = N * M"),
        ["✗ case ", "walk one outer block"],  # a drawn case with M = d passes it
    ),
    # Exercise 2 (b): D from o and dO
    (
        "delta",
        "keepdims",
        ("(o * do).sum(axis=-1)", "(o * do).sum(axis=-1, keepdims=True)"),
        ["shape: yours is (5, 1)", "keepdims"],
    ),
    (
        "delta",
        "rowsum(dO)",
        ("(o * do).sum(axis=-1)", "do.sum(axis=-1)"),
        ["at index", "that is rowsum(dO)"],
    ),
    (
        "delta",
        "the wrong axis",
        ("(o * do).sum(axis=-1)", "(o * do).sum(axis=-2)"),
        ["shape: yours is (3,)", "axis -2"],
    ),
    (
        "delta",
        "float32 returned",
        ("(o * do).sum(axis=-1)", "(o * do).sum(axis=-1).astype(np.float32)"),
        ["✗ case 0", "your D is float32 (the array you return)", "float64"],
    ),
    (
        "delta",
        "o in float32",
        ("(o * do).sum(axis=-1)", "(o.astype(np.float32) * do).sum(axis=-1)"),
        ["✗ case 0", "o was rounded to float32"],
    ),
    (
        "delta",
        "everything summed",
        ("(o * do).sum(axis=-1)", "(o * do).sum()"),
        ["shape: yours is ()"],
    ),
    # Exercise 1: the standard backward
    (
        "my_backward",
        "no scale in dq",
        ("return scale * ds @ k,", "return ds @ k,"),
        ["dq (element 0)", "√d times too large"],
    ),
    (
        "my_backward",
        "D = rowsum(dO)",
        (
            "(dp - (p * dp).sum(axis=-1, keepdims=True))",
            "(dp - do.sum(axis=-1, keepdims=True))",
        ),
        ["dq (element 0)", "D computed as rowsum(dO)"],
    ),
    (
        "my_backward",
        "P without l",
        ("p /= p.sum(axis=-1, keepdims=True)", "pass"),
        ["dq (element 0)", "not divided by l"],
    ),
    (
        "my_backward",
        "causal top-left",
        ("+ M - N, s, -np.inf)", ", s, -np.inf)"),
        ["case 2", "top-left"],
    ),
    (
        "my_backward",
        "causal off by one",
        ("<= np.arange(N)[:, None] + M - N", "< np.arange(N)[:, None] + M - N"),
        ["case 2", "diagonal is off by one", "hides the key on the line"],
    ),
    (
        "my_backward",
        "causal one past",
        ("+ M - N, s, -np.inf)", "+ M - N + 1, s, -np.inf)"),
        ["case 2", "diagonal is off by one", "one key past the line"],
    ),
    (
        "my_backward",
        "mask after the softmax, not renormalised",
        (
            "p /= p.sum(axis=-1, keepdims=True)  # P: (N, M), kept\n",
            "p /= p.sum(axis=-1, keepdims=True)  # P: (N, M), kept\n"
            "    if causal:  # planted: the mask after the softmax, the row not renormalised\n"
            "        s = scale * q @ k.T\n"
            "        p = np.exp(s - s.max(axis=-1, keepdims=True))\n"
            "        p = p / p.sum(axis=-1, keepdims=True)\n"
            "        seen = np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N\n"
            "        p = np.where(seen, p, 0.0)\n",
        ),
        [
            "✗ case 2",
            "applied after the softmax",
            "not the fault",
            "before the softmax",
        ],
    ),
    (
        "my_backward",
        "sign of dS",
        ("ds = p * (dp - ", "ds = -p * (dp - "),
        ["wrong sign"],
    ),
    (
        "my_backward",
        "dv without transpose",
        ("dv = p.T @ do", "dv = p @ do"),
        ["raised ValueError", "shape", "transpose"],
    ),
    (
        "my_backward",
        "scale √d",
        ("scale = 1 / np.sqrt(d)", "scale = np.sqrt(d)"),
        ["dq (element 0)", "scale = √d in place of 1/√d"],
    ),
    (
        "my_backward",
        "sign of D",
        (
            "(dp - (p * dp).sum(axis=-1, keepdims=True))",
            "(dp + (p * dp).sum(axis=-1, keepdims=True))",
        ),
        ["dq (element 0)", "the sign of D is flipped"],
    ),
    # Exercise 2, step b: one tile of P
    (
        "p_tile",
        "tile max and lse",
        (
            "- lse_I[:, None])",
            "- lse_I[:, None] - (q_I @ k_J.T / np.sqrt(q_I.shape[-1])).max(axis=-1, keepdims=True))",
        ),
        ["case 0", "tile's own max as well", "removes it twice"],
    ),
    (
        "p_tile",
        "written in torch",
        (
            "return np.exp(q_I @ k_J.T / np.sqrt(q_I.shape[-1]) - lse_I[:, None])",
            "import torch\n    t = [torch.from_numpy(a) for a in (q_I, k_J, lse_I)]\n"
            "    return torch.exp(t[0] @ t[1].T / q_I.shape[-1] ** 0.5 - t[2][:, None]).numpy()",
        ),
        ["case 0", "this exercise asks for numpy"],
    ),
    (
        "p_tile",
        "tile max",
        (
            "- lse_I[:, None])",
            "- (q_I @ k_J.T / np.sqrt(q_I.shape[-1])).max(axis=-1, keepdims=True))",
        ),
        ["case 0", "tile's own max"],
    ),
    (
        "p_tile",
        "overflow",
        (
            "np.exp(q_I @ k_J.T / np.sqrt(q_I.shape[-1]) - lse_I[:, None])",
            "np.exp(q_I @ k_J.T / np.sqrt(q_I.shape[-1])) / np.exp(lse_I[:, None])",
        ),
        ["case 4", "queries ×300", "NaN", "overflows"],
    ),
    (
        "p_tile",
        "lse along the columns",
        ("lse_I[:, None]", "lse_I"),
        ["raised ValueError", "shape", "[:, None]"],
    ),
    ("p_tile", "no scale", (" / np.sqrt(q_I.shape[-1])", ""), ["scale is missing"]),
    # Exercise 2, step c: the tiled backward
    (
        "tiled_backward",
        "D = rowsum(dO)",
        ("len(k), delta(o, do)", "len(k), do.sum(axis=-1)"),
        ["dq (element 0)", "D computed as rowsum(dO)"],
    ),
    (
        "tiled_backward",
        "D from the tile",
        (
            "ds = p * (dp - D_I[:, None])",
            "ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))",
        ),
        ["D_I taken as rowsum(P_IJ ∘ dP_IJ) over the current tile only"],
    ),
    (
        "tiled_backward",
        "D missing",
        ("ds = p * (dp - D_I[:, None])", "ds = p * dp"),
        ["dq (element 0)", "with no D"],
    ),
    (
        "tiled_backward",
        "D down the column",
        (
            "ds = p * (dp - D_I[:, None])",
            "ds = p * (dp - (p * dp).sum(axis=0, keepdims=True))",
        ),
        ["summed down a column"],
    ),
    (
        "tiled_backward",
        "float32 accumulators",
        (
            "dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)",
            "dq, dk, dv = (np.zeros(a.shape, np.float32) for a in (q, k, v))",
        ),
        ["your dq is float32", "np.zeros_like(q) keeps q's float64"],
    ),
    (
        "my_backward",
        "D missing",
        ("(dp - (p * dp).sum(axis=-1, keepdims=True))", "dp"),
        ["dq (element 0)", "with no D"],
    ),
    (
        "my_backward",
        "the Jacobian's diagonal only",
        ("(dp - (p * dp).sum(axis=-1, keepdims=True))", "(1 - p) * dp"),
        ["dq (element 0)", "keeps only the Jacobian's diagonal"],
    ),
    (
        "tiled_backward",
        "no scale in dq",
        ("return scale * ds @ k_J,", "return ds @ k_J,"),
        ["dq (element 0)", "√d times too large"],
    ),
    (
        "tiled_backward",
        "no scale in dk",
        ("scale * ds.T @ q_I, p.T", "ds.T @ q_I, p.T"),
        ["dk (element 1)", "√d times too large"],
    ),
    (
        "tiled_backward",
        "P = exp(S - m)",
        (
            "p = p_tile(q[I], k[J], lse[I])",
            "s = q[I] @ k[J].T / np.sqrt(q.shape[1]); "
            "p = np.exp(s - s.max(axis=-1, keepdims=True))",
        ),
        ["case 0", "tile's own max"],
    ),
    (
        "tiled_backward",
        "softmax of the tile",
        (
            "p = p_tile(q[I], k[J], lse[I])",
            "s = q[I] @ k[J].T / np.sqrt(q.shape[1]); "
            "p = np.exp(s - s.max(axis=-1, keepdims=True)); "
            "p = p / p.sum(axis=-1, keepdims=True)",
        ),
        ["case 0", "dq and dv wrong", "so P is wrong", "not a softmax of the tile"],
    ),
    (
        "tiled_backward",
        "dv without transpose",
        ("p.T @ do_I", "p @ do_I"),
        ["case 0", "dv (element 2)", "missing transpose"],
    ),
    (
        "tiled_backward",
        "dk without transpose",
        ("scale * ds.T @ q_I", "scale * ds @ q_I"),
        ["dk (element 1)", "missing transpose"],
    ),
    (
        "tiled_backward",
        "causal top-left",
        (
            "return j <= i + M - N",
            "return j <= i",
        ),
        ["case 2", "top-left"],
    ),
    (
        "tiled_backward",
        "float32 tile",
        ("dp = do_I @ v_J.T", "dp = (do_I @ v_J.T).astype(np.float32)"),
        ["your dq is float64 but agrees only to float32's precision", "tile"],
    ),
    (
        "tiled_backward",
        "causal ignored",
        ("causal=False):", "causal=False):\n    causal = False"),
        ["case 2", "the causal flag is ignored", "never set to −inf"],
    ),
    (
        "tiled_backward",
        "causal skip off by one",
        ("if causal and j0 > i1 - 1 + M - N:", "if causal and j0 >= i1 - 1 + M - N:"),
        ["case 4", "its only visible entry is its bottom-left", "not when j0 ≥ that"],
    ),
    (
        "tiled_backward",
        "causal skip by the first row",
        ("if causal and j0 > i1 - 1 + M - N:", "if causal and j0 > i0 + M - N:"),
        ["skipped by the tile's first row", "j0 > (i1 − 1) + M − N"],
    ),
    (
        "tiled_backward",
        "causal off by one",
        ("return j <= i + M - N", "return j < i + M - N"),
        ["case 2", "diagonal is off by one", "hides the key on the line"],
    ),
    (
        "tiled_backward",
        "P divided by lse",
        (
            "p = p_tile(q[I], k[J], lse[I])",
            "p = np.exp(q[I] @ k[J].T / np.sqrt(q.shape[1])) / lse[I, None]",
        ),
        ["case 0", "P computed as e^S / lse", "log of the row's sum"],
    ),
    (
        "p_tile",
        "divided by lse",
        ("- lse_I[:, None])", ") / lse_I[:, None]"),
        ["case 0", "e^S divided by lse", "inside the exponent"],
    ),
    (
        "tiled_backward",
        "tiles skipped, no mask inside",
        ("if causal:  # hidden entries", "if False:  # hidden entries"),
        ["✗ case 2", "the empty tiles are skipped", "nothing is masked"],
    ),
    (
        "tiled_backward",
        "last query block dropped",
        ("for i0 in range(0, N, Br):", "for i0 in range(0, N - Br + 1, Br):"),
        ["case 1", "Br = 8 does not divide N = 47", "rows 40..46"],
    ),
    (
        "tiled_backward",
        "last key block dropped",
        ("for j0 in range(0, M, Bc):", "for j0 in range(0, M // Bc * Bc, Bc):"),
        ["case 1", "Bc = 16 does not divide M = 61"],
    ),
    (
        "tiled_backward",
        "dq assigned",
        ("dq[I] += dq_I", "dq[I] = dq_I"),
        ["accumulated"],
    ),
    (
        "tiled_backward",
        "dv assigned",
        ("dv[J] + dv_J", "dv_J"),
        ["dV_J is assigned", "accumulated"],
    ),
    (
        "tiled_backward",
        "dk assigned",
        ("dk[J] + dk_J", "dk_J"),
        ["dK_J is assigned", "accumulated"],
    ),
    (
        "tiled_backward",
        "NaN on rows with no key",
        (
            "p = np.where(visible(i0, j0, *p.shape, N, M), p, 0.0)",
            "p = p * visible(i0, j0, *p.shape, N, M)",
        ),
        ["case 3", "NaN in yours", "see no key"],
    ),
    (
        "tiled_backward",
        "keepdims twice",
        ("len(k), delta(o, do)", "len(k), (o * do).sum(axis=-1, keepdims=True)"),
        ["raised ValueError", "shape"],
    ),
    (
        "tiled_backward",
        "a list",
        ("return dq, dk, dv", "return [dq, dk, dv]"),
        ["returned list", "tuple"],
    ),
    # Tiles of a size of the learner's own: the values agree, the structure does not.
    (
        "tiled_backward",
        "one tile larger than the problem",
        ("len(k), delta(o, do)", "len(k), delta(o, do); Br = Bc = 4096"),
        [
            "the values agree on 5 cases",
            "tiles are larger than its block sizes",
            "query rows 1024 at a time (all N: a tile larger than the problem) where Br = 32",
            "keys 1536 at a time (all M",
            "one tile, of shape (1024, 1536) = (N, M)",
            "the arguments Br and Bc",
        ],
    ),
    (
        "tiled_backward",
        "key tiles larger than the problem",
        ("len(k), delta(o, do)", "len(k), delta(o, do); Bc = 4096"),
        [
            "keys 1536 at a time (all M: a tile larger than the problem) where Bc = 64",
            "one tile, of shape (32, 1536) = (Br, M)",
        ],
    ),
    (
        "tiled_backward",
        "tiles of a fixed size",
        ("len(k), delta(o, do)", "len(k), delta(o, do); Br = Bc = 128"),
        [
            "the values agree on 5 cases",
            "query rows 128 at a time where Br = 32 and keys 128 at a time where Bc = 64",
            "at most Br query rows by Bc keys",
        ],
    ),
    (
        "tiled_backward",
        "Br and Bc swapped",
        ("len(k), delta(o, do)", "len(k), delta(o, do); Br, Bc = Bc, Br"),
        ["Br and Bc are swapped", "query rows 64 at a time and keys 32"],
    ),
]


@pytest.mark.filterwarnings(
    "ignore::RuntimeWarning"
)  # a planted NaN warns, as it would for a learner
@pytest.mark.parametrize(
    "name, label, change, expected", PLANTED, ids=[f"{p[0]}-{p[1]}" for p in PLANTED]
)
def test_planted_mistake_is_diagnosed(name, label, change, expected):
    out = run_check(EX[STEP[name]], _planted(name, *change))
    assert "✗" in _verdict(out, name), out
    for text in expected:
        assert text in out, f"{text!r} not in:\n{out}"


# Planted solutions that are not one-line changes: what the property checks must catch.
FULL_S = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    s = q @ k.T / np.sqrt(d)                                    # all of S at once
    if causal:
        s = np.where(np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N, s, -np.inf)
    p = np.exp(s - np.where(np.isneginf(lse), np.inf, lse)[:, None])
    ds = p * (do @ v.T - delta(o, do)[:, None])
    return ds @ k / np.sqrt(d), ds.T @ q / np.sqrt(d), p.T @ do
"""
STRIP = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    lse_safe = np.where(np.isneginf(lse), np.inf, lse)
    for i0 in range(0, N, Br):                                  # a block of rows against all M keys
        q_I, do_I = q[i0:i0 + Br], do[i0:i0 + Br]
        s = q_I @ k.T / np.sqrt(d)
        if causal:
            s = np.where(np.arange(M)[None, :] <= np.arange(i0, i0 + len(q_I))[:, None] + M - N, s, -np.inf)
        p = np.exp(s - lse_safe[i0:i0 + Br, None])
        ds = p * (do_I @ v.T - delta(o[i0:i0 + Br], do_I)[:, None])
        dq[i0:i0 + Br] = ds @ k / np.sqrt(d)
        dk += ds.T @ q_I / np.sqrt(d)
        dv += p.T @ do_I
    return dq, dk, dv
"""
FULL_MASK = """
_tiled = tiled_backward                                         # the worked solution, defined just before
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M = q.shape[0], k.shape[0]
    visible = np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N     # a full N × M mask, made from scratch
    return _tiled(q, k, v, o, lse, do, Br, Bc, causal)
"""
ROWS = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    D = delta(o, do)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for i in range(N):                                          # one query row against all M keys
        s = q[i] @ k.T / np.sqrt(d)
        if causal:
            s = np.where(np.arange(M) <= i + M - N, s, -np.inf)
        p = np.exp(s - (np.inf if np.isneginf(lse[i]) else lse[i]))
        ds = p * (v @ do[i] - D[i])
        dq[i] = ds @ k / np.sqrt(d)
        dk += np.outer(ds, q[i]) / np.sqrt(d)
        dv += np.outer(p, do[i])
    return dq, dk, dv
"""
ROW_BLOCKS = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    D = delta(o, do)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for j0 in range(0, M, Bc):
        k_J, v_J = k[j0:j0 + Bc], v[j0:j0 + Bc]
        for i in range(N):                                      # one query row against a key block
            s = q[i] @ k_J.T / np.sqrt(d)
            if causal:
                s = np.where(np.arange(j0, j0 + len(k_J)) <= i + M - N, s, -np.inf)
            p = np.exp(s - (np.inf if np.isneginf(lse[i]) else lse[i]))
            ds = p * (v_J @ do[i] - D[i])
            dq[i] += ds @ k_J / np.sqrt(d)
            dk[j0:j0 + Bc] += np.outer(ds, q[i]) / np.sqrt(d)
            dv[j0:j0 + Bc] += np.outer(p, do[i])
    return dq, dk, dv
"""
STREAMED_ROWS = """
def delta_streamed(q, k, v, do, Bc):
    D = np.zeros(len(q))
    for i in range(len(q)):                                     # one query row against all M keys
        s = k @ q[i] / np.sqrt(q.shape[1])
        p = np.exp(s - s.max())
        D[i] = (p / p.sum()) @ (v @ do[i])
    return D
"""
CALLS_LAB = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    return lab.flash_attention_backward_numpy(q, k, v, o, lse, do, block_q=Br, block_k=Bc, causal=causal)
"""
CALLS_REFERENCE = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    return lab.attention_backward(q, k, v, do, causal=causal)
"""
SKIPS_EMPTY_TILES_NAN = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    D = delta(o, do)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for j0 in range(0, M, Bc):
        for i0 in range(0, N, Br):
            if causal and j0 > min(i0 + Br, N) - 1 + M - N:     # no row of the block sees a key of the tile: skip it
                continue
            q_I, do_I = q[i0:i0 + Br], do[i0:i0 + Br]
            s = q_I @ k[j0:j0 + Bc].T / np.sqrt(d)
            if causal:
                i, j = np.arange(i0, i0 + len(q_I))[:, None], np.arange(j0, j0 + len(s[0]))[None, :]
                s = np.where(j <= i + M - N, s, -np.inf)
            p = np.exp(s - lse[i0:i0 + Br, None])               # -inf - (-inf) = NaN on a row that sees no key
            ds = p * (do_I @ v[j0:j0 + Bc].T - D[i0:i0 + Br, None])
            dv[j0:j0 + Bc] += p.T @ do_I
            dq[i0:i0 + Br] += ds @ k[j0:j0 + Bc] / np.sqrt(d)
            dk[j0:j0 + Bc] += ds.T @ q_I / np.sqrt(d)
    return dq, dk, dv
"""
AUTOGRAD = """
import torch
def my_backward(q, k, v, do, causal=False):
    t = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    lab.standard_attention_torch(*t, causal=causal).backward(torch.tensor(do))
    return tuple(x.grad.numpy() for x in t)
"""


@pytest.mark.filterwarnings(
    "ignore::RuntimeWarning"
)  # the planted NaN warns, as it would for a learner
@pytest.mark.parametrize(
    "key, source, expected",
    [
        (
            "tiled",
            FULL_S,
            ["the values agree on 5 cases", "shape (1024, 1536) = (N, M)", "all N × M"],
        ),
        (
            "tiled",
            STRIP,
            [
                "the values agree on 5 cases",
                "shape (32, 1536) = (Br, M)",
                "a block of rows against all M keys",
            ],
        ),
        (
            "tiled",
            EX["tiled"].solution + FULL_MASK,
            [
                "the values agree on 5 cases",
                "MiB was allocated",
                "an N × M array (S, P or a mask) was formed",
            ],
        ),
        (
            "tiled",
            ROWS,
            [
                "the values agree on 5 cases",
                "shape (1536,) = (M,)",
                "one query row against all M keys",
            ],
        ),
        (
            "tiled",
            ROW_BLOCKS,
            [
                "the values agree on 5 cases",
                "no (Br, Bc) = (32, 64) tile was formed",
                "one query row at a time against a key block",
            ],
        ),
        (
            "delta",
            STREAMED_ROWS,
            ["✗ case 5", "shape (4096,), one query row", "no key blocks at all"],
        ),
        ("tiled", CALLS_LAB, ["case 0", "calls lab.flash_attention_backward_numpy"]),
        ("tiled", CALLS_REFERENCE, ["case 0", "calls lab.attention_backward"]),
        ("standard", AUTOGRAD, ["case 0", "calls torch autograd"]),
        (
            "tiled",
            SKIPS_EMPTY_TILES_NAN,
            [
                "case 3 (N=50, M=40",
                "NaN in yours",
                "first N − M = 10 queries see no key",
            ],
        ),
    ],
    ids=[
        "full-S",
        "row-strip",
        "full-mask",
        "query-rows",
        "query-rows-against-key-blocks",
        "streamed-query-rows",
        "calls-lab-tiled",
        "calls-lab-standard",
        "autograd",
        "skips-empty-tiles-nan",
    ],
)
def test_planted_property_violation_is_diagnosed(key, source, expected):
    name = {"tiled": "tiled_backward", "delta": "delta_streamed"}.get(
        key, "my_backward"
    )
    if key == "delta":  # the worked delta(o, do) after it, so only step (a) fails
        source += "\n" + EX["delta"].solution.split("def delta_streamed")[0]
        source += (
            "def delta(o, do):" + EX["delta"].solution.split("def delta(o, do):")[1]
        )
    if key == "standard":  # the worked step (a) before it, so only step (b) fails
        source = EX["standard"].solution.split("def my_backward")[0] + source
    out = run_check(
        EX[key],
        (STEPS if key == "tiled" and "def delta" not in source else "") + source,
    )
    assert "✗" in _verdict(out, name), out
    for text in expected:
        assert text in out, f"{text!r} not in:\n{out}"


# ------------------------------------------------------------------------------------ lab/checks/backward.py


def _problem(N, M, d, dv, causal, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v, do = (
        rng.standard_normal((N, d)),
        rng.standard_normal((M, d)),
        rng.standard_normal((M, dv)),
        rng.standard_normal((N, dv)),
    )
    o, lse = lab.attention_reference(q, k, v, causal=causal)
    return q, k, v, o, lse, do


@pytest.mark.parametrize(
    "N, M, Br, Bc, causal",
    [
        (16, 16, 4, 4, False),
        (13, 29, 4, 8, False),
        (11, 23, 5, 7, True),
        (23, 11, 5, 3, True),
    ],
)
def test_backward_with_no_mistake_is_the_backward(N, M, Br, Bc, causal):
    q, k, v, o, lse, do = _problem(N, M, 4, 3, causal)
    got = backward_with_mistake(q, k, v, o, lse, do, Br, Bc, causal)
    for g, w in zip(got, lab.attention_backward(q, k, v, do, causal=causal)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mistake", list(BACKWARD_MISTAKES))
def test_each_mistake_changes_the_gradients(mistake):
    square = "transpose" in mistake  # P dO runs only on a square tile
    N, M, Br, Bc, causal = (16, 16, 4, 4, False) if square else (21, 29, 5, 4, True)
    q, k, v, o, lse, do = _problem(N, M, 4, 4, causal)
    got = backward_with_mistake(q, k, v, o, lse, do, Br, Bc, causal, mistake)
    want = lab.attention_backward(q, k, v, do, causal=causal)
    assert not all(np.allclose(g, w) for g, w in zip(got, want))


def test_unknown_mistake_and_non_square_transpose_raise():
    q, k, v, o, lse, do = _problem(13, 21, 4, 4, False)
    with pytest.raises(ValueError, match="mistake must be None or one of"):
        backward_with_mistake(q, k, v, o, lse, do, 4, 8, False, "typo")
    with pytest.raises(ValueError):
        backward_with_mistake(q, k, v, o, lse, do, 4, 8, False, "dv without transpose")


def test_a_full_array_is_not_called_an_oversized_tile():
    """An answer that slices nothing and forms all of S is told so, not that its tiles are too large."""
    out = run_check(EX["tiled"], STEPS + FULL_S)
    assert "all N × M scores or probabilities at once" in out, out
    assert "larger than its block sizes" not in out and "swapped" not in out, out


def test_the_large_case_must_be_tiled_smaller_than_the_problem():
    worked = lambda *a: None
    for large in [
        (64, 96, 2, 2, 64, 32, False),
        (64, 96, 2, 2, 16, 96, True),
        (64, 96),
    ]:
        with pytest.raises(ValueError, match="large must be .* Br < N and Bc < M"):
            check_tiled_backward(worked, [], large=large)


def test_arrays_formed_records_the_slices_a_loop_takes():
    q, k = np.ones((30, 2)), np.ones((40, 2))
    cuts: dict = {}
    arrays_formed(
        lambda a, b: [a[i : i + 8] @ b[:50].T for i in range(0, 30, 8)], q, k, cuts=cuts
    )
    assert cuts == {30: 8, 40: 40}  # b[:50] takes all 40 keys
    arrays_formed(lambda a, b: a[:, None] @ b.T[None], q, k, cuts=(cuts := {}))
    assert cuts == {}  # a slice without an end is not a tile


def test_arrays_formed_sees_products_and_allocations():
    q, k = np.ones((300, 2)), np.ones((400, 2))
    shapes, _ = arrays_formed(lambda a, b: a @ b.T, q, k, above=1000)
    assert shapes == [(300, 400)]
    shapes, _ = arrays_formed(lambda a, b: a[:10] @ b[:20].T, q, k, above=1000)
    assert shapes == []
    _, peak = arrays_formed(lambda a, b: np.zeros((300, 400)), q, k)
    assert peak >= 300 * 400 * 8
    assert not tracemalloc.is_tracing()


def test_checks_leave_no_profiler_behind(capsys):
    check_standard_backward(
        lambda q, k, v, do, causal=False: lab.attention_backward(
            q, k, v, do, causal=causal
        ),
        [(4, 5, 2, 2)],
        name="b",
    )
    assert "calls lab.attention_backward" in capsys.readouterr().out
    assert sys.getprofile() is None


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("o", "row_sum: ✓"),
        ("O", "row_sum: ✓"),
        ("v", "weights all of V's rows"),
        ("p", "P is what the exercise removes"),
        ("do", "has no dO in it"),
        ("lse", "one number per row"),
        ("x", "is not one of"),
        (None, "not answered yet"),
    ],
)
def test_the_row_sum_question_names_each_wrong_answer(capsys, answer, expected):
    check_row_sum(answer)
    out = capsys.readouterr().out
    assert expected in out and ("✓" in out) == (expected == "row_sum: ✓"), out


def test_the_streamed_delta_is_asked_before_the_substitution_is_shown():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    src = [c.source for c in nb.cells]
    asked = next(i for i, s in enumerate(src) if "check_streamed_delta(delta_str" in s)
    shown = next(i for i, s in enumerate(src) if "= dO_i \\cdot O_i" in s)
    assert asked < shown


def test_the_streamed_delta_cases_are_drawn_afresh(capsys):
    seen = []

    def record(q, k, v, do, Bc):
        seen.append(q.copy())
        raise NotImplementedError

    check_streamed_delta(record, seed=1)
    check_streamed_delta(record, seed=2)
    assert len(seen) == 2 and not np.array_equal(seen[0], seen[1])
    assert capsys.readouterr().out.count("not implemented yet") == 2


def test_the_streamed_delta_refuses_torch(capsys):
    import torch

    def with_torch(q, k, v, do, Bc):
        s = torch.from_numpy(q) @ torch.from_numpy(k).T / q.shape[1] ** 0.5
        p = torch.softmax(s, -1).numpy()
        return (p * (do @ v.T)).sum(-1)

    check_streamed_delta(with_torch, name="t")
    assert "✗ case 0" in capsys.readouterr().out


def test_the_standard_check_names_an_ignored_causal_flag_and_a_wrong_signature():
    ignored = replace_code(EX["standard"].solution, "if causal:", "if False:")
    out = run_check(EX["standard"], ignored)
    assert "✗ case 2" in out and "the causal flag is ignored" in out, out
    assert "blocks" not in out.split("hint:")[1]
    wrong = replace_code(
        EX["standard"].solution,
        "def my_backward(q, k, v, do, causal=False):",
        "def my_backward(q, k, v, causal=False):",
    )
    out = run_check(EX["standard"], wrong)
    assert "raised TypeError" in out and "my_backward(q, k, v, do, causal=False)" in out
    assert "shapes of the tiles" not in out, out


def test_the_standard_check_says_which_case_it_adds():
    out = run_check(EX["standard"], EX["standard"].solution)
    assert "passed your 4 cases, the course's 4 and 1 with scores near +800" in out, out


def test_check_delta_and_p_tile_pass_right_answers(capsys):
    rng = np.random.default_rng(0)
    case = [(rng.standard_normal((4, 3)), rng.standard_normal((4, 3)))]
    check_delta(lambda o, do: (o * do).sum(axis=-1), case, name="delta")
    check_p_tile(
        lambda q_I, k_J, lse_I: np.exp(q_I @ k_J.T / np.sqrt(8) - lse_I[:, None]),
        [(0, 8, 0, 16, 1), (0, 16, 16, 48, 300)],
        name="p_tile",
    )
    out = capsys.readouterr().out
    assert out == "delta: ✓ passed 1 cases\np_tile: ✓ passed 2 cases\n"
    check_delta(
        lab.backward_delta, case, name="delta"
    )  # lab's own answer, passed as the function itself
    assert "calls lab.backward_delta" in capsys.readouterr().out


@pytest.mark.parametrize(
    "body, says",
    [
        (
            "np.diagonal(do @ np.swapaxes(o, -1, -2), axis1=-2, axis2=-1)",
            ["formed a (256, 256) array", "row i's own d_v products"],
        ),
        (
            "np.diagonal(np.einsum('...id,...jd->...ij', do, o), axis1=-2, axis2=-1)",
            ["an N × N product", "row i's own d_v products"],
        ),
        (
            "np.array([o[i] @ do[i] for i in range(len(o))])",  # 2-D only: raises on (2, 6, 5)
            ["your D raised", "any shape (..., N, d_v)"],
        ),
        (
            "(o.astype(np.float64) * do).sum(axis=-1)",
            ["on the check's own float32 case", "float64"],
        ),
        (
            "(o * do).sum(axis=-1, dtype=np.float64)",
            [
                "your cases agree, but on the check's own float32 case",
                "your D is float64",
            ],
        ),
    ],
)
def test_check_delta_refuses_a_square_product_and_a_widened_d(body, says, capsys):
    rng = np.random.default_rng(0)
    case = [(rng.standard_normal((4, 3)), rng.standard_normal((4, 3)))]
    check_delta(eval("lambda o, do: " + body), case, name="delta")
    out = capsys.readouterr().out
    assert "✗" in out, out
    for said in says:
        assert said in out, out


@pytest.mark.parametrize(
    "body",
    [
        "(o * do).sum(axis=-1)",
        "np.einsum('...d,...d->...', o, do)",
        "(o.astype(np.float64) * do).sum(axis=-1).astype(o.dtype)",
    ],
)
def test_check_delta_takes_float32_cases_at_float32_s_rounding(body, capsys):
    rng = np.random.default_rng(0)
    case = [tuple(rng.standard_normal((2, 7, 5)).astype(np.float32) for _ in range(2))]
    check_delta(eval("lambda o, do: " + body), case, name="delta")
    assert capsys.readouterr().out == "delta: ✓ passed 1 cases\n"


def test_check_delta_with_no_cases_is_no_pass(capsys):
    check_delta(lambda o, do: o.sum(axis=-1), [], name="delta")
    out = capsys.readouterr().out
    assert "✗ no cases given" in out and "✓" not in out


UNTILED_TORCH = """
import torch
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    q, k, v, do = (torch.from_numpy(a) for a in (q, k, v, do))
    N, M = q.shape[0], k.shape[0]
    s = q @ k.T / q.shape[1] ** 0.5
    if causal:
        s = s.masked_fill(torch.arange(M)[None, :] > torch.arange(N)[:, None] + M - N, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    dp = do @ v.T
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    return (x.numpy() for x in (ds @ k / q.shape[1] ** 0.5, ds.T @ q / q.shape[1] ** 0.5, p.T @ do))
"""


def test_a_full_untiled_torch_backward_is_refused():
    """tracemalloc sees no torch allocation: the numpy exercise refuses torch instead."""
    out = run_check(EX["tiled"], STEPS + UNTILED_TORCH)
    assert "✗ case 0" in _verdict(out, "tiled_backward"), out
    assert "this exercise asks for numpy" in out and "torch." in out


def test_delta_under_another_name_is_refused():
    out = run_check(
        EX["delta"],
        EX["delta"].solution
        + "\nfrom lab.backward import backward_delta as rowdot\n\n\ndef delta(o, do):\n    return rowdot(o, do)\n",
    )
    line = _verdict(out, "delta")
    assert "✗ case 0" in line and "calls lab.backward_delta" in line, out


def test_standard_backward_without_the_row_max_fails_on_large_scores():
    src = replace_code(
        EX["standard"].solution,
        "p = np.exp(s - s.max(axis=-1, keepdims=True))",
        "p = np.exp(s)",
    )
    out = run_check(EX["standard"], src)
    assert "✗ case 8" in out and "scores near +800" in out, out
    assert "subtract each row's max before the exp" in out


def test_tiled_backward_dropping_both_short_blocks_names_both():
    src = replace_code(
        EX["tiled"].solution,
        "for j0 in range(0, M, Bc):",
        "for j0 in range(0, M - M % Bc, Bc):",
    )
    src = replace_code(
        src, "for i0 in range(0, N, Br):", "for i0 in range(0, N - N % Br, Br):"
    )
    out = run_check(EX["tiled"], src)
    assert "✗ case 1" in out, out
    assert (
        "last query block was never visited" in out
        and "last key block was never visited" in out
    ), out
    assert "P is wrong" not in out


def test_check_tiled_backward_reports_a_crash_on_watched_arrays(capsys):
    ns = {"np": np, "delta": lambda o, do: (o * do).sum(axis=-1)}
    exec(
        compile(EX["tiled"].solution, "<solution>", "exec"), ns
    )  # the worked loop: lab's own is refused

    def fussy(q, k, v, o, lse, do, Br, Bc, causal=False):
        if type(q) is not np.ndarray:
            raise TypeError("plain arrays only")
        return ns["tiled_backward"](q, k, v, o, lse, do, Br, Bc, causal)

    check_tiled_backward(fussy, [(8, 12, 4, 4, 4, 4, True)], name="t")
    out = capsys.readouterr().out
    assert (
        "the values agree on 1 cases" in out
        and "raised TypeError on watched arrays" in out
    )


@pytest.mark.parametrize("how", list(EVASIONS))
@pytest.mark.parametrize(
    "name", ["my_backward", "delta", "p_tile", "softmax_jacobian", "softcap_tile"]
)
def test_an_answer_that_hides_from_the_watch_is_refused(name, how):
    out = run_check(EX[STEP[name]], evading(EX[STEP[name]].solution, name, how))
    assert "✗" in _verdict(out, name) and EVASIONS[how][1] in out, out


def test_the_atomic_numbers_are_drawn_afresh_and_refuse_the_checks_reference(capsys):
    seen = []

    def record(N, M, d, dv):
        seen.append((N, M, d, dv))
        return N * d, M * d + M * dv

    check_atomic_numbers(record, seed=1)
    check_atomic_numbers(record, seed=2)
    assert seen[:5] != seen[-5:] and all(N != M and d != dv for N, M, d, dv in seen)
    assert capsys.readouterr().out.count("✓ passed 5 cases") == 2
    from lab.checks import backward

    check_atomic_numbers(backward._atomic_reference, name="a")
    assert "lab's own answer" in capsys.readouterr().out


def test_a_wrong_atomic_count_names_each_argument_of_its_case(capsys):
    check_atomic_numbers(lambda N, M, d, dv: (M * d + M * dv, N * d), seed=0)
    out = capsys.readouterr().out
    assert (
        "✗ case 0 (N=" in out and ", M=" in out and ", d=" in out and ", dv=" in out
    ), out


# ------------------------------------------------------------------------------------ the causal tiles skipped

NO_SKIP = replace_code(
    EX["tiled"].solution, "if causal and j0 > i1 - 1 + M - N:\n continue", ""
)
BREAKS_EARLY = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, D = len(q), len(k), delta(o, do)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for i0 in range(0, N, Br):                                  # query blocks outside
        i1 = min(i0 + Br, N)
        for j0 in range(0, M, Bc):
            if causal and j0 > i1 - 1 + M - N:
                break                                           # every later key block is past the line too
            j1 = min(j0 + Bc, M)
            p = p_tile(q[i0:i1], k[j0:j1], lse[i0:i1])
            if causal:
                p = np.where(visible(i0, j0, *p.shape, N, M), p, 0.0)
            dq_I, dk_J, dv_J = tile_grads(q[i0:i1], k[j0:j1], v[j0:j1], do[i0:i1], p, D[i0:i1])
            dq[i0:i1] += dq_I
            dk[j0:j1] += dk_J
            dv[j0:j1] += dv_J
    return dq, dk, dv
"""
CONTINUES = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    D = (o * do).sum(axis=-1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    lse_safe = np.where(np.isneginf(lse), np.inf, lse)
    for j0 in range(0, M, Bc):
        k_J, v_J = k[j0:j0 + Bc], v[j0:j0 + Bc]
        for i0 in range(0, N, Br):
            q_I, do_I = q[i0:i0 + Br], do[i0:i0 + Br]
            if causal and j0 > i0 + len(q_I) - 1 + M - N:
                continue                                        # no row of the block sees a key of the tile
            s = np.einsum("id,jd->ij", q_I / np.sqrt(d), k_J)
            if causal:
                i, j = np.arange(i0, i0 + len(q_I))[:, None], np.arange(j0, j0 + len(k_J))
                s = np.where(j <= i + M - N, s, -np.inf)
            p = np.exp(s - lse_safe[i0:i0 + Br, None])
            ds = p * (np.dot(do_I, v_J.T) - D[i0:i0 + Br, None])
            dq[i0:i0 + Br] += ds @ k_J / np.sqrt(d)
            dk[j0:j0 + Bc] += ds.T @ q_I / np.sqrt(d)
            dv[j0:j0 + Bc] += p.T @ do_I
    return dq, dk, dv
"""
SKIPPED = (
    "causal cases: 99 of 150 tiles computed (each with a visible entry), 51 skipped"
)


def test_a_causal_loop_that_never_skips_a_tile_fails_though_its_values_agree():
    out = run_check(EX["tiled"], NO_SKIP)
    line = _verdict(out, "tiled_backward")
    assert "✗ case 2 (N=40, M=56" in line and "a tile no query sees" in line, out
    flat = " ".join(out.split())  # the hint is wrapped to lines a projector shows whole
    assert "the values agree, but tile (0, 2) has no visible entry: skip it" in flat, (
        out
    )
    assert "rows 0:16 against keys 32:48" in flat and "(i1 − 1) + M − N = 31" in flat
    assert "S_IJ = Q_I K_Jᵀ" in flat and all(
        len(s) <= 100 for s in out.splitlines()[2:]
    )


@pytest.mark.parametrize("source", [BREAKS_EARLY, CONTINUES], ids=["break", "continue"])
def test_a_causal_loop_that_skips_the_empty_tiles_passes(source):
    out = run_check(EX["tiled"], STEPS + source)
    assert "✗" not in out and "tiled_backward: ✓ passed your 5 cases" in out, out
    assert f"tiled_backward: ✓ {SKIPPED}" in out, out


def test_the_worked_loop_says_how_many_tiles_it_skipped():
    assert SKIPPED in run_check(EX["tiled"], EX["tiled"].solution)


def test_a_loop_that_forms_a_masked_tile_only_for_dp_is_named():
    src = replace_code(
        EX["tiled"].solution,
        "if causal and j0 > i1 - 1 + M - N:\n continue",
        "if causal and j0 > i1 - 1 + M - N:\n"
        "                _ = do[I] @ v[J].T\n"
        "                continue",
    )
    out = run_check(EX["tiled"], src)
    flat = " ".join(out.split())
    assert "has no visible entry: skip it" in flat and "dP_IJ = dO_I V_Jᵀ" in flat, out


def test_tiles_formed_sees_products_through_views_scales_and_functions():
    from lab.checks.backward import tiles_formed

    def loop(q, k, v, o, lse, do, Br, Bc, causal):
        (q[0:4] * 0.5) @ k[4:8].T  # a scaled block against a transposed one
        np.dot(k[0:2], q[4:8].T)  # S transposed, through np.dot
        np.einsum("id,jd->ij", do[2:6], v[0:3])  # dP through einsum
        np.zeros_like(q) @ k[0:2].T  # a fresh array holds none of q's rows
        q[1] @ k.T  # one row against every key

    q, k, v, o, lse, do = _problem(8, 8, 4, 4, True)
    assert tiles_formed(loop, q, k, v, o, lse, do, 4, 4) == [
        ("S_IJ = Q_I K_Jᵀ", 0, 4, 4, 8),
        ("S_IJ = Q_I K_Jᵀ", 4, 8, 0, 2),
        ("dP_IJ = dO_I V_Jᵀ", 2, 6, 0, 3),
        ("S_IJ = Q_I K_Jᵀ", 1, 2, 0, 8),
    ]


# ------------------------------------------------------------------------------------ part 1's hints, planted


def test_the_standard_check_names_a_wrong_dv_from_an_unnormalized_p():
    src = replace_code(
        EX["standard"].solution,
        "p /= p.sum(axis=-1, keepdims=True)  # P: (N, M), kept\n dv = p.T @ do",
        "dv = p.T @ do\n    p /= p.sum(axis=-1, keepdims=True)",
    )
    out = run_check(EX["standard"], src)
    assert "✗ case 0" in out and "dv (element 2)" in out, out
    assert "dv wrong: dv = Pᵀ dO needs only P and dO, so check P" in out, out


def test_the_standard_check_names_a_scaled_dv():
    src = replace_code(
        EX["standard"].solution, "dv = p.T @ do", "dv = scale * p.T @ do"
    )
    out = run_check(EX["standard"], src)
    assert "✗ case 0" in out and "dv is off by a factor √d" in out, out
    assert "no scale of its own" in out and "applied twice" not in out, out


def test_the_standard_check_names_a_gradient_left_at_zero():
    src = replace_code(
        EX["standard"].solution, "scale * ds.T @ q, dv", "np.zeros_like(k), dv"
    )
    out = run_check(EX["standard"], src)
    assert "✗ case 0" in out and "dk (element 1)" in out, out
    assert "dk is all zeros: is it still the array you started from" in out, out


def test_check_delta_names_a_dtype_that_is_not_the_inputs():
    src = replace_code(
        EX["delta"].solution,
        "(o * do).sum(axis=-1)",
        "(o * do).sum(axis=-1).astype(np.float16)",
    )
    out = run_check(EX["delta"], src)
    assert "✗ case 0" in _verdict(out, "delta"), out
    assert (
        "your D is float16 (the array you return), and o and dO are float64" in out
    ), out
    assert "rounds D; return it in the inputs' dtype, float64" in out, out


@pytest.mark.skipif(
    np.dtype(np.longdouble).itemsize <= 8,
    reason="long double is float64 on this machine",
)
def test_check_delta_names_a_widened_dtype():
    src = replace_code(
        EX["delta"].solution,
        "(o * do).sum(axis=-1)",
        "(o * do).sum(axis=-1, dtype=np.longdouble)",
    )
    out = run_check(EX["delta"], src)
    assert "✗ case 0" in _verdict(out, "delta") and "widened it" in out, out


def _with_cases(ex, first: str, shorter: str):
    """Exercise `ex` with its check cell's case list cut to `shorter` (the list opens with `first`)."""
    start = ex.check.index(first)
    end = ex.check.index("]", start) + 1
    return dataclasses.replace(ex, check=ex.check[:start] + shorter + ex.check[end:])


def test_the_course_cases_run_after_a_shortened_standard_list():
    short = _with_cases(EX["standard"], "cases = [", "cases = [(6, 9, 8, 4, False)]")
    out = run_check(short, EX["standard"].solution)
    assert "passed your 1 cases, the course's 4 and 1 with scores near +800" in out, out
    ignored = replace_code(EX["standard"].solution, "if causal:", "if False:")
    out = run_check(short, ignored)  # the learner's one case has no causal=True
    assert "✗ case 3 (N=6, M=13" in out and "the causal flag is ignored" in out, out


def test_the_course_cases_run_after_a_shortened_tiled_list():
    short = _with_cases(
        EX["tiled"], "cases = [", "cases = [(32, 32, 8, 8, 8, 8, False)]"
    )
    out = run_check(short, EX["tiled"].solution)
    assert "passed your 1 cases and the course's 2" in out, out
    out = run_check(short, NO_SKIP)
    assert "✗ case 1 (N=21, M=29" in out and "no visible entry: skip it" in " ".join(
        out.split()
    )
    off = replace_code(
        EX["tiled"].solution,
        "if causal and j0 > i1 - 1 + M - N:",
        "if causal and j0 >= i1 - 1 + M - N:",
    )
    out = run_check(short, off)
    assert "✗ case 1" in out and "its only visible entry is its bottom-left" in out, out


# ------------------------------------------------------------------ Exercise 1 (a): the softmax's Jacobian

JACOBIAN = "return np.diag(p) - np.outer(p, p)"


@pytest.mark.parametrize(
    "wrong, says",
    [
        ("return np.diag(p * (1 - p))", "only the diagonal"),
        ("return -np.outer(p, p)", "the diagonal lacks its P_j"),
        ("return np.outer(p, p) - np.diag(p)", "every sign is flipped"),
        ("return np.diag(p) + np.outer(p, p)", "the sign off the diagonal is wrong"),
        ("return np.eye(len(p)) - np.outer(p, p)", "the diagonal is 1 − P_j²"),
        ("return np.diag(p) - p * p", "outer product P_j P_j'"),
        ("return np.diag(p)", "differentiate P_j = e^(S_j)"),
        ("return p - p * p", "J of a row of M ="),
    ],
)
def test_softmax_jacobian_mistakes_are_named(wrong, says):
    out = run_check(EX["standard"], _planted("softmax_jacobian", JACOBIAN, wrong))
    line = _verdict(out, "softmax_jacobian")
    assert "✗" in line, out
    assert says in out, out


def test_softmax_jacobian_by_finite_steps_is_refused():
    steps = (
        "s, h = np.log(p), 1e-6\n"
        "    f = lambda s: np.exp(s - s.max()) / np.exp(s - s.max()).sum()\n"
        "    return np.stack([(f(s + h * e) - p) / h for e in np.eye(len(p))], axis=1)"
    )
    out = run_check(EX["standard"], _planted("softmax_jacobian", JACOBIAN, steps))
    assert "✗" in _verdict(out, "softmax_jacobian"), out
    assert "as finite steps are" in out, out


def test_softmax_jacobian_by_torch_is_refused():
    autograd = (
        "import torch\n"
        "    s = torch.log(torch.from_numpy(p))\n"
        "    return torch.autograd.functional.jacobian(lambda x: torch.softmax(x, 0), s).numpy()"
    )
    out = run_check(EX["standard"], _planted("softmax_jacobian", JACOBIAN, autograd))
    assert "✗" in _verdict(out, "softmax_jacobian"), out
    assert "this exercise asks for numpy" in out, out


def test_softmax_jacobian_rows_are_drawn_afresh(capsys):
    seen = []
    check_softmax_jacobian(
        lambda p: seen.append(p.copy()) or np.diag(p) - np.outer(p, p), name="J", seed=1
    )
    check_softmax_jacobian(
        lambda p: seen.append(p.copy()) or np.diag(p) - np.outer(p, p), name="J", seed=2
    )
    assert capsys.readouterr().out.count("J: ✓ passed 6 cases") == 2
    assert not np.allclose(seen[2], seen[8])  # the same case, two seeds


# ------------------------------------------------------------------ Exercise 3: a soft-capped tile


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("* (1 - t**2)", "", "the chain rule has one more step, the cap"),
        (
            "np.exp(cap * t - lse_I[:, None])",
            "np.exp(scale * q_I @ k_J.T - lse_I[:, None])",
            "P taken from the uncapped scores",
        ),
        ("(1 - t**2)", "(1 - (cap * t) ** 2)", "the cap's derivative as 1 − S²"),
        ("(1 - t**2)", "(1 - t)", "tanh′(u) = 1 − tanh²(u), a square"),
        ("* (1 - t**2)", "* cap * (1 - t**2)", "derivative multiplied by cap"),
        ("* (1 - t**2)", "* (1 - t**2) / cap", "derivative divided by cap"),
        (
            "p * (dp - D_I[:, None]) * (1 - t**2)",
            "p * ((1 - t**2) * dp - D_I[:, None])",
            "multiplies dP before D is subtracted",
        ),
        ("p.T @ do_I", "(p * (1 - t**2)).T @ do_I", "dV carries the cap's derivative"),
        ("(dp - D_I[:, None])", "dp", "dS = P ∘ dP with no D"),
        ("(o_I * do_I).sum(axis=-1)", "(p * dp).sum(axis=-1)", "over this tile only"),
        (
            "return scale * dx @ k_J, scale * dx.T @ q_I",
            "return dx @ k_J, dx.T @ q_I",
            "√d times too large",
        ),
    ],
)
def test_softcap_tile_mistakes_are_named(old, new, says):
    out = run_check(EX["softcap"], _planted("softcap_tile", old, new))
    line = _verdict(out, "softcap_tile")
    assert "✗" in line, out
    assert says in out, out


def test_softcap_tile_refuses_lab_and_torch():
    lab_own = (
        EX["softcap"].solution
        + "\nfrom lab.checks.backward import softcap_tile_reference as mine\n\n\n"
        "def softcap_tile(*args):\n    return mine(*args)\n"
    )
    out = run_check(EX["softcap"], lab_own)
    assert "✗" in _verdict(out, "softcap_tile") and "lab's own answer" in out, out
    torch_way = _planted(
        "softcap_tile",
        "t = np.tanh(scale * q_I @ k_J.T / cap)",
        "import torch\n    t = torch.tanh(torch.from_numpy(scale * q_I @ k_J.T / cap)).numpy()",
    )
    out = run_check(EX["softcap"], torch_way)
    assert "✗" in _verdict(out, "softcap_tile") and "asks for numpy" in out, out


def test_softcap_tile_refuses_lab_softcaps_derivative():
    via_lab = _planted(
        "softcap_tile",
        "* (1 - t**2)",
        "* lab.softcap(cap).derivative(scale * q_I @ k_J.T, 0, 0, 0, 0)",
    )
    out = run_check(EX["softcap"], via_lab)
    assert "✗" in _verdict(out, "softcap_tile") and "lab.softcap" in out, out


def test_softcap_tile_reference_sums_to_autograd():
    """The check's reference, added over every tile, is the gradient of the dense capped attention."""
    import torch

    rng = np.random.default_rng(4)
    N, M, d, cap, Br, Bc = 13, 17, 4, 2.5, 5, 6
    q, k, v, do = (rng.standard_normal((n, d)) for n in (N, M, M, N))
    t = [torch.tensor(a, requires_grad=True) for a in (3 * q, k, v)]
    s = cap * torch.tanh(t[0] @ t[1].T / d**0.5 / cap)
    out = torch.softmax(s, -1) @ t[2]
    out.backward(torch.tensor(do))
    o, lse = out.detach().numpy(), torch.logsumexp(s, -1).detach().numpy()
    grads = [np.zeros_like(a) for a in (q, k, v)]
    for i0 in range(0, N, Br):
        for j0 in range(0, M, Bc):
            I, J = slice(i0, i0 + Br), slice(j0, j0 + Bc)
            parts = lab.checks.backward.softcap_tile_reference(
                3 * q[I], k[J], v[J], o[I], do[I], lse[I], cap
            )
            for g, rows, part in zip(grads, (I, J, J), parts):
                g[rows] += part
    for g, x in zip(grads, t):
        np.testing.assert_allclose(g, x.grad.numpy(), atol=1e-12)


def test_softcap_tile_problem_is_drawn_afresh(capsys):
    caps = []

    def spy(q_I, k_J, v_J, o_I, do_I, lse_I, cap):
        caps.append((cap, q_I[0, 0]))
        scale = 1 / np.sqrt(q_I.shape[-1])
        t = np.tanh(scale * q_I @ k_J.T / cap)
        p = np.exp(cap * t - lse_I[:, None])
        dx = p * (do_I @ v_J.T - (o_I * do_I).sum(-1)[:, None]) * (1 - t**2)
        return scale * dx @ k_J, scale * dx.T @ q_I, p.T @ do_I

    check_softcap_tile(spy, name="t", seed=1)
    check_softcap_tile(spy, name="t", seed=2)
    assert capsys.readouterr().out.count("t: ✓ passed 3 cases") == 2
    assert caps[0] != caps[3]


# ------------------------------------------------------------------ the hints added for the commonest slips


DENSE_MAX_NAN = """
def tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    s = q @ k.T / np.sqrt(d)                                    # dense, and its own row max
    if causal:
        s = np.where(np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))               # -inf - (-inf) = NaN on a row with no key
    p /= p.sum(axis=-1, keepdims=True)
    ds = p * (do @ v.T - delta(o, do)[:, None])
    return ds @ k / np.sqrt(d), ds.T @ q / np.sqrt(d), p.T @ do
"""
STREAMED_ROW_BY_ROW = """
def delta_streamed(q, k, v, do, Bc):
    N, scale = q.shape[0], 1 / np.sqrt(q.shape[1])
    D = np.zeros(N)
    for i in range(N):                                          # one row at a time, keys in blocks
        m, l, acc = -np.inf, 0.0, 0.0
        for j0 in range(0, k.shape[0], Bc):
            s = scale * k[j0 : j0 + Bc] @ q[i]
            dp = v[j0 : j0 + Bc] @ do[i]
            m_new = max(m, s.max())
            alpha, e = np.exp(m - m_new), np.exp(s - m_new)
            l, acc, m = alpha * l + e.sum(), alpha * acc + (e * dp).sum(), m_new
        D[i] = acc / l
    return D
"""


def _delta_source(body: str) -> str:
    """A planted delta_streamed followed by the worked delta(o, do), so that only step (a) fails."""
    return (
        body
        + "\n"
        + "def delta(o, do):"
        + EX["delta"].solution.split("def delta(o, do):")[1]
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_dense_backward_with_its_own_row_max_is_told_about_inf_minus_inf():
    out = run_check(EX["tiled"], STEPS + DENSE_MAX_NAN)
    assert "✗" in _verdict(out, "tiled_backward"), out
    assert "NaN in yours" in out and "−inf − (−inf) = NaN" in out, out


def test_a_streamed_delta_taking_rows_one_at_a_time_is_refused():
    out = run_check(EX["delta"], _delta_source(STREAMED_ROW_BY_ROW))
    assert "✗" in _verdict(out, "delta_streamed"), out
    assert "never formed an (N, Bc) block" in out and "all N rows at once" in out, out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "alpha * acc + (e * dp)",
            "acc + (e * dp)",
            "the weighted sum Σ e^(S − m) dP is not",
        ),
        ("l, acc, m = alpha * l +", "l, acc, m = l +", "but l is not"),
        ("np.exp(m - m_new)", "np.exp(m_new - m)", "is the rescale inverted?"),
    ],
)
def test_the_streamed_delta_names_each_rescale_slip(old, new, says):
    out = run_check(EX["delta"], _planted("delta_streamed", old, new))
    assert "✗" in _verdict(out, "delta_streamed"), out
    assert says in out, out


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "np.exp(q_I @ k_J.T / np.sqrt(q_I.shape[-1]) - lse_I[:, None])",
            "q_I @ k_J.T / np.sqrt(q_I.shape[-1]) - lse_I[:, None]",
            "the exponential is missing",
        ),
        (
            "- lse_I[:, None])",
            "+ lse_I[:, None])",
            "lse is added",
        ),
    ],
)
def test_p_tile_names_a_missing_exp_and_an_added_lse(old, new, says):
    out = run_check(EX["tiled"], _planted("p_tile", old, new))
    assert "✗" in _verdict(out, "p_tile"), out
    assert says in out, out


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "* (1 - t**2)",
            "* (1 - np.tanh(scale * q_I @ k_J.T) ** 2)",
            "1 − tanh²(X), or sech²(X)",
        ),
        (
            "* (1 - t**2)",
            "* (1 / np.cosh(cap * t) ** 2)",
            "sech² of the capped scores",
        ),
        (
            "return scale * dx @ k_J, scale * dx.T @ q_I, p.T @ do_I",
            "return np.zeros_like(q_I), scale * dx.T @ q_I, p.T @ do_I",
            "dq_I all zeros",
        ),
    ],
)
def test_softcap_tile_names_a_wrong_argument_and_a_part_left_at_zero(old, new, says):
    out = run_check(EX["softcap"], _planted("softcap_tile", old, new))
    assert "✗" in _verdict(out, "softcap_tile"), out
    assert says in out, out


def test_a_gradient_off_by_more_than_float32_is_not_called_float32():
    """A float64 dv off by 1e-4 relative is a wrong formula, not a float32 step: no float32 hint."""
    planted = _planted("my_backward", "dv = p.T @ do", "dv = p.T @ do * (1 + 1e-4)")
    out = run_check(EX["standard"], planted)
    assert "✗" in _verdict(out, "my_backward"), out
    assert "float32" not in out and "dv wrong" in out, out


def test_the_outer_loop_choice_is_checked(capsys):
    check_outer_choice("key")
    check_outer_choice(" Keys ")
    check_outer_choice(None)
    out = capsys.readouterr().out
    assert out.count("outer: ✓ key blocks outside") == 2 and "not answered yet" in out

    def counts(N, M, d, dv):
        return N * d, M * d + M * dv

    check_outer_choice("query", counts)
    out = capsys.readouterr().out
    assert "outer: ✗ 'query'" in out and "half as many" in out, out
    assert "65,536 with key blocks outside and 131,072" in out, out
    check_outer_choice("diagonal")
    assert 'answer "key" or "query"' in capsys.readouterr().out
    with pytest.raises(TypeError, match="outer must be"):
        check_outer_choice(1)


def test_the_worked_loop_order_picks_key_blocks_outside():
    out = run_check(EX["loop"], EX["loop"].solution)
    assert "outer: ✓" in out, out
    out = run_check(
        EX["loop"], EX["loop"].solution.replace('outer = "key"', 'outer = "query"')
    )
    assert "outer: ✗ 'query'" in out and "with query blocks outside" in out, out
