"""Notebook 05's exercises, in its two parts (05_tiling: the grid and the chip; 05_tiling_traffic: the traffic and
the kernel): each worked solution passes its own check cell, each planted classic mistake fails with its diagnosis,
and the instrument and checks of lab/checks/tiling.py behave."""

import contextlib
import dataclasses
import io

import numpy as np
import pytest
from exercise_support import (
    assert_fails,
    exercises,
    notebook_cells,
    replace_code,
    run_check,
    source,
)

import lab
from lab.checks import tiling
from lab.checks.tiling import BlockLoadArray

NAME, NAME2 = "05_tiling", "05_tiling_traffic"
_PART1 = {ex.number: ex for ex in exercises(NAME)}
_PART2 = {ex.number: ex for ex in exercises(NAME2)}
# the exercises by what they build: part 1's 1 to 4, part 2's 1 to 3
EX = {
    "row": _PART1[1],
    "tiles": _PART1[2],
    "widest": _PART1[3],
    "fits": _PART1[4],
    "bytes": _PART2[1],
    # the full check (the second check cell; the first, the in-class core, leaves out the mask)
    "forward": dataclasses.replace(
        _PART2[2], check="tiling.check_tiled_forward(flash_forward)\n"
    ),
    "fa1bytes": _PART2[3],
}
PASSED = {
    "row": "tile_row: ✓ passed 10 cases: m and l after every tile, the tiles skipped, the output\n",
    "tiles": "causal_tiles: ✓ passed 10 cases\n",
    "bytes": "fa2_bytes: ✓ passed 9 cases\n",
    "widest": "widest_key_block: ✓ passed 9 cases\n",
    "fits": "a100_fits: ✓ passed 37 cases:\n  the 18 candidates at d = 128, 14 steps at a fresh d, "
    "3 at a budget's edge (2 exactly at it), 2 at 16 warps\n",
    "forward": "flash_forward: ✓ passed 14 cases, exact to 1e-9; no N × M array held;\n  K_j, V_j loaded "
    "once per reported tile, at most Bc rows; 35 hidden tiles skipped (fixed cases)\n",
    "fa1bytes": "fa1_bytes: ✓ passed 9 cases\n",
}


def _src(text: str) -> str:
    return source(text)


def _fails(key: str, text: str, *says: str) -> str:
    return assert_fails(EX[key], text, *says)


_cells = notebook_cells


def test_each_part_has_its_checked_exercises():
    """Four function stubs in part 1, three in part 2; part 1's exercise 4 also asks a question, checked, with a
    worked answer."""
    assert sorted(_PART1) == [1, 2, 3, 4] and sorted(_PART2) == [1, 2, 3]
    name, needle = NAME, "28% slower"
    cells = _cells(name)
    q = next(i for i, (_, s, _) in enumerate(cells) if s.startswith("### Exercise 4"))
    nxt = next(
        (
            i
            for i, (_, s, _) in enumerate(cells)
            if i > q and s.startswith(("### Exercise", "## "))
        ),
        len(cells),
    )
    part_cells = cells[q + 1 : nxt]
    assert any(
        ("Your answer" in s) and "solution" not in tags for t, s, tags in part_cells
    )
    assert any(
        "solution" in tags and "A worked answer" in s and needle in s
        for t, s, tags in part_cells
    )
    assert any(
        t == "code" and "solution" not in tags and "tiling.check_" in s
        for t, s, tags in part_cells
    )


@pytest.mark.parametrize("name", [NAME, NAME2])
def test_each_part_states_its_time_and_names_the_other(name):
    cells = _cells(name)
    other = NAME2 if name == NAME else NAME
    assert "**Time: about" in cells[1][1] and f"{other}.ipynb" in cells[1][1]
    assert cells[2][1].startswith("| symbol | meaning |")


@pytest.mark.parametrize("key", list(EX))
def test_worked_solution_passes(key):
    assert run_check(EX[key], EX[key].solution) == PASSED[key]


@pytest.mark.parametrize("key", list(EX))
def test_stub_reports_not_implemented(key):
    assert "not implemented yet" in run_check(EX[key], EX[key].stub)


def test_the_specs_give_no_formula_to_copy():
    """The exercises are derived: no spec names the reference function or prints the answer's formula."""
    for key, ex in EX.items():
        for banned in (
            "Reference:",
            "lab.tile_counts",
            "lab.flash_counts(",
            "lab.fa_block_sizes",
            "step_footprint",
            "tiles.append",
            "j0 <= i1",
        ):
            assert banned not in ex.spec, (key, banned)


@pytest.mark.parametrize("key", ["tiles", "bytes"])
def test_the_exercise_section_needs_only_the_setup(key):
    """The checks build their own cases: nothing from the notebook's body (q, k, v, N, counts, ...) is used."""
    ns = {}
    for src in EX[key].setup + EX[key].before:
        exec(compile(src, "<setup>", "exec"), ns)
    assert "tiling" in ns and not {"q", "k", "v", "N", "counts"} & set(ns)


# ------------------------------------------------------------------------------------ part 1, exercise 1: a row of tiles

ROW_SLIPS = {
    # the classic slips, each planted into the worked solution, and the words its hint must say
    "block max instead of running max": (
        "m_new = np.maximum(m, s.max(axis=1))",
        "m_new = s.max(axis=1)",
        ["not the tile's own max"],
    ),
    "alpha missing": (
        "alpha, p = np.exp(m - m_new),",
        "alpha, p = np.ones_like(m),",
        ["rescaled by"],
    ),
    "alpha inverted": (
        "alpha, p = np.exp(m - m_new),",
        "alpha, p = np.where(np.isinf(m), 0, np.exp(m_new - m)),",
        ["not\n  e^(m' - m)", "e^(m - m') <= 1"],
    ),
    "a dropped partial tile": (
        "for j0 in range(0, M, Bc):",
        "for j0 in range(0, M - M % Bc, Bc):",
        ["the last key block is partial", "tiles computed: yours j ="],
    ),
    "masked tiles not skipped": (
        "if causal and j0 > r1 - 1 + M - N:",
        "if False:",
        ["is skipped: never loaded", "expected j = [0, 1]"],
    ),
    "skipped on the first query": (
        "if causal and j0 > r1 - 1 + M - N:",
        "if causal and j0 > r0 + M - N:",
        ["the block's last query against the tile's first key"],
    ),
    "no mask inside a computed tile": (
        "s[np.arange(j0, j1) > np.arange(r0, r1)[:, None] + M - N] = -np.inf",
        "pass",
        ["must be set to -inf"],
    ),
    "a top-left mask": (
        "if causal and j0 > r1 - 1 + M - N:",
        "if causal and j0 > r1 - 1:",
        ["bottom-right aligned"],
    ),
    "no scale": ("/ np.sqrt(q.shape[1])", "* 1.0", ["s = q·k / sqrt(d)"]),
    "acc not divided by l": (
        "return acc / l[:, None], states",
        "return acc, states",
        ["acc / l"],
    ),
}


@pytest.mark.parametrize("mistake", ROW_SLIPS)
def test_exercise_1_row_mistakes(mistake):
    old, new, says = ROW_SLIPS[mistake]
    if mistake == "a top-left mask":  # both the skip and the mask inside, as one slip
        wrong = replace_code(EX["row"].solution, old, new)
        wrong = replace_code(wrong, "+ M - N] = -np.inf", "] = -np.inf")
    else:
        wrong = replace_code(EX["row"].solution, old, new)
    out = run_check(EX["row"], wrong)
    assert "✗" in out and "✓" not in out, out
    for text in says:
        assert text.replace("\n  ", " ") in out.replace("\n  ", " "), (text, out)


def test_exercise_1_row_in_place_states_and_lab_are_named():
    inplace = replace_code(
        EX["row"].solution,
        "l, acc = alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v[j0:j1]",
        "l *= alpha; l += p.sum(axis=1); acc = alpha[:, None] * acc + p @ v[j0:j1]",
    )
    inplace = replace_code(inplace, "m = m_new", "m[:] = m_new")
    out = run_check(EX["row"], inplace)
    assert "✗" in out and "updated in place" in out and "m.copy()" in out, out
    lab_own = """
def tile_row(q, k, v, i, Br, Bc, causal):
    fill = lab.figures.tiling.tile_fill_state(12, 16, Br, Bc, i, 0, causal)
    return lab.flash_attention_numpy(q, k, v, block_q=Br, block_k=Bc, causal=causal)[0], []
"""
    out = run_check(EX["row"], _src(lab_own))
    assert "✗" in out and "lab's own answer" in out, out
    shape = "def tile_row(q, k, v, i, Br, Bc, causal):\n    return 0\n"
    assert "return a pair (O_i, states)" in run_check(EX["row"], shape)


def test_exercise_1_row_checks_against_the_figure_state():
    """The check's reference is the figure's (m, l) after every tile of the 12 × 16 grid."""
    fill = lab.figures.tiling.tile_fill_state(12, 16, 4, 4, i=1, j=0)
    v = np.ones((16, 2))
    for causal in (False, True):
        _, states = tiling._row_walk(fill["q"], fill["k"], v, 1, 4, 4, causal)
        for j, m, l in states:
            st = lab.figures.tiling.tile_fill_state(
                12, 16, 4, 4, i=1, j=j, causal=causal
            )
            assert np.allclose(m, st["m"][4:8]) and np.allclose(l, st["l"][4:8])
        assert [j for j, *_ in states] == ([0, 1, 2, 3] if not causal else [0, 1, 2])


def test_exercise_1_row_spec_gives_no_update_rule():
    """Derive first: the update appears only in the worked solution and the folded answer after the check."""
    spec = EX["row"].spec
    for banned in ("e^{m - m'}", "np.maximum", "alpha *", r"\alpha l +", "max(m,"):
        assert banned not in spec, banned


def test_ship_hints_ask_rather_than_name_the_next_tile():
    """Each wrong `ship` gets the question that rules it out: the hint names no other candidate tile than its
    own and the two the quoted measurement names."""
    shapes = {f"{a} × {b}" for a in (64, 128, 256) for b in (64, 128, 256)}
    for Br, Bc, w in FITTING - {(128, 64, 4)}:
        hint = tiling._ship_hint(Br, Bc, w)
        named = {s for s in shapes if s in hint} - {
            f"{Br} × {Bc}",
            "128 × 128",
            "256 × 64",
        }
        assert not named, (Br, Bc, w, hint)
        assert "?" in hint and "which tile would you ship" not in hint, hint


# ------------------------------------------------------------------------------------ exercise 1

TILES = """
def causal_tiles(N, M, Br, Bc):
    computed = masked = 0
    for i0 in range(0, {rows}, Br):
        i1 = min(i0 + Br, N)
        for j0 in range(0, {cols}, Bc):
            j1 = {j1}
            if j0 <= {seen}:
                computed += 1
                masked += j1 - 1 > {corner}
    return {ret}
"""
TILES_OK = {
    "rows": "N",
    "cols": "M",
    "j1": "min(j0 + Bc, M)",
    "seen": "i1 - 1 + M - N",
    "corner": "i0 + M - N",
    "ret": "computed, masked",
}

WRONG_1 = {
    "top-left alignment": (
        {"seen": "i1 - 1", "corner": "i0"},
        [
            "case 2 (N = 1000, M = 700, Br = 128, Bc = 48)",
            "computed (element 0)",
            "aligned top-left",
            "c > r + (M - N)",
        ],
    ),
    "partial blocks dropped": (
        {"rows": "N - N % Br", "cols": "M - M % Bc"},
        ["case 1 (N = 200, M = 200, Br = 64, Bc = 32)", "whole blocks only"],
    ),
    "one key too far": (
        {"seen": "i1 + M - N"},
        ["expected 136, got 151", "one key too far"],
    ),
    "one key too few (strict <)": (
        {"seen": "i1 - 2 + M - N"},
        ["one key too few", "compare with <=, not <"],
    ),
    "the closed form for square blocks": (
        """
def causal_tiles(N, M, Br, Bc):
    T = -(-N // Br)
    return T * (T + 1) // 2, T
""",
        [
            "case 1 (N = 200, M = 200, Br = 64, Bc = 32)",
            "T(T+1)/2 holds for N = M and square blocks only",
        ],
    ),
    "masked one key off (the tile's end j1 for its last key)": (
        {"corner": "i0 + M - N - 1"},
        ["masked (element 1)", "one key off", "its end j1"],
    ),
    "masked one key off, the other way": (
        {"corner": "i0 + M - N + 1"},
        ["masked (element 1)", "one key off the other way"],
    ),
    "masked from the wrong corner": (
        {"corner": "i1 - 1 + M - N"},
        ["masked (element 1)", "wrong corner"],
    ),
    "last key block not clipped to M": (
        {"j1": "j0 + Bc"},
        [
            "case 4 (N = 7, M = 7, Br = 3, Bc = 5)",
            "masked (element 1)",
            "ends at M = 7",
            "j1 = min(j0 + Bc, M)",
        ],
    ),
    "one number": (
        {"ret": "computed"},
        ["returned int, expected a tuple of 2 (computed, masked)"],
    ),
    "notebook 11's lab.block_mask": (
        """
def causal_tiles(N, M, Br, Bc):
    kind = lab.block_mask(None, 1, 1, N, M, Br, Bc, causal=True).kind
    return int((kind > 0).sum()), int((kind == 1).sum())
""",
        ["case 0", "calls lab.block_mask", "write it yourself"],
    ),
    "lab's private row counts": (
        """
from lab.tiling import _row_blocks as visited


def causal_tiles(N, M, Br, Bc):
    computed = int(visited(N, M, Br, Bc, True)[1].sum())
    masked = sum(
        min(i0 + Br, N) - 1 + M - N >= j0 and min(j0 + Bc, M) - 1 > i0 + M - N
        for i0 in range(0, N, Br)
        for j0 in range(0, M, Bc)
    )
    return computed, masked
""",
        ["case 0", "calls lab.tiling._row_blocks", "write it yourself"],
    ),
    "notebook 11's private tile classifier": (
        """
def causal_tiles(N, M, Br, Bc):
    kind = lab.masks._tile_kinds(None, 1, 1, N, M, Br, Bc, True)
    return int((kind > 0).sum()), int((kind == 1).sum())
""",
        ["case 0", "calls lab.masks._tile_kinds", "write it yourself"],
    ),
    "only the diagonal tiles masked": (
        """
def causal_tiles(N, M, Br, Bc):
    computed = masked = 0
    for i0 in range(0, N, Br):
        for j0 in range(0, M, Bc):
            if j0 <= min(i0 + Br, N) - 1 + M - N:
                computed += 1
                masked += i0 // Br == j0 // Bc  # the diagonal tiles
    return computed, masked
""",
        [
            "case 1 (N = 200, M = 200, Br = 64, Bc = 32)",
            "masked (element 1)",
            "only the diagonal tiles (i == j)",
            "first query against its last key",
        ],
    ),
    "the hidden pairs of the computed tiles counted": (
        """
def causal_tiles(N, M, Br, Bc):
    computed = masked = 0
    for i0 in range(0, N, Br):
        i1 = min(i0 + Br, N)
        for j0 in range(0, M, Bc):
            if j0 <= i1 - 1 + M - N:
                computed += 1
                for r in range(i0, i1):
                    masked += max(0, min(j0 + Bc, M) - max(j0, r + M - N + 1))
    return computed, masked
""",
        ["case 0", "masked (element 1)", "the pairs the mask hides, not the tiles"],
    ),
    "every hidden pair counted": (
        """
def causal_tiles(N, M, Br, Bc):
    computed = sum(
        j0 <= min(i0 + Br, N) - 1 + M - N
        for i0 in range(0, N, Br)
        for j0 in range(0, M, Bc)
    )
    r, c = np.arange(N)[:, None], np.arange(M)[None, :]
    return computed, int((c > r + M - N).sum())
""",
        ["case 0", "every pair the mask hides", "once"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_1)
def test_exercise_1_mistakes(mistake):
    changes, says = WRONG_1[mistake]
    _fails(
        "tiles",
        changes
        if isinstance(changes, str)
        else TILES.format(**{**TILES_OK, **changes}),
        *says,
    )


# ------------------------------------------------------------------------------------ exercise 2

BYTES = """
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    keys = 0
    for i0 in range(0, N, Br):
        seen = min(i0 + Br, N) if {causal} else N
        keys += {keys}
    return (N * d + 2 * {kv} * d + N * d) * itemsize + N * {lse}
"""
BYTES_OK = {
    "causal": "causal",
    "keys": "min(-(-seen // Bc) * Bc, N)",
    "kv": "keys",
    "lse": "max(itemsize, 4)",
}

WRONG_2 = {
    "lab.tiling.flash_counts under another name": (
        """
from lab.tiling import flash_counts as fc
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    return fc(N, N, d, block_q=Br, block_k=Bc, causal=causal, itemsize=itemsize).total
""",
        ["case 0", "calls lab.flash_counts", "write it yourself"],
    ),
    "the check's own slips module, _fa2_bytes": (
        """
import lab.checks.tiling as t
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    return t._fa2_bytes(N, d, Br, Bc, itemsize, causal)
""",
        ["case 0", "calls lab.checks.tiling._fa2_bytes"],
    ),
    "a table of the fixed cases, filled by lab before the check": (
        """
_FIXED = [(4096, 64, 128, 128, 2, False), (1000, 64, 64, 48, 2, True), (333, 16, 50, 64, 8, True),
          (1000, 64, 128, 128, 4, True), (5, 3, 7, 2, 2, True), (4096, 128, 128, 64, 2, True)]
_TABLE = {c: lab.flash_counts(c[0], c[0], c[1], block_q=c[2], block_k=c[3], causal=c[5], itemsize=c[4]).total
          for c in _FIXED}
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    return _TABLE.get((N, d, Br, Bc, itemsize, causal), 0)
""",
        ["case 6", "got 0", "drawn with seed="],
    ),
    "no causal skipping": (
        {"causal": "False"},
        [
            "case 1 (N = 1000, d = 64, Br = 64, Bc = 48, itemsize = 2, causal = True)",
            "without causal skipping",
        ],
    ),
    "only the visible keys of each query block": (
        {"keys": "seen"},
        ["case 1", "fa2 loads whole key blocks", "not the visible keys"],
    ),
    "only the keys each query sees": (
        """
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    keys = N * (N + 1) // 2 if causal else N * -(-N // Br)
    return (2 * N * d + 2 * keys * d) * itemsize + N * max(itemsize, 4)
""",
        ["case 1", "fa2 loads whole key blocks"],
    ),
    "half the non-causal bytes": (
        """
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    total = (2 * N * d + 2 * N * -(-N // Br) * d) * itemsize + N * max(itemsize, 4)
    return total // 2 if causal else total
""",
        ["case 1", "half the non-causal count", "the diagonal ones too"],
    ),
    "half the non-causal K and V traffic": (
        """
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    kv = 2 * N * -(-N // Br) * d * itemsize
    return 2 * N * d * itemsize + (kv // 2 if causal else kv) + N * max(itemsize, 4)
""",
        ["case 1", "half the non-causal count"],
    ),
    "T_r = N // Br: the partial query block dropped": (
        BYTES.format(**BYTES_OK).replace("range(0, N, Br)", "range(0, N - N % Br, Br)"),
        [
            "case 1",
            "the last query block is partial (40 of N = 1000",
            "T_r = ⌈N / Br⌉ = 16",
        ],
    ),
    "partial key block counted whole": (
        {"keys": "-(-seen // Bc) * Bc"},
        ["case 1", "fewer than Bc keys"],
    ),
    "lse at itemsize": (
        {"lse": "itemsize"},
        [
            "case 0 (N = 4096, d = 64, Br = 128, Bc = 128, itemsize = 2, causal = False)",
            "accumulator's dtype",
        ],
    ),
    "lse left out": ({"lse": "0"}, ["one lse value per query row"]),
    "o left out": (
        BYTES.format(**BYTES_OK).replace(" + N * d) * itemsize", ") * itemsize"),
        ["case 0", "N × d values are missing", "o is written once"],
    ),
    "K and V read once in all": ({"kv": "N"}, ["once per query block"]),
    "the block's first query sets the keys it loads": (
        BYTES.format(**BYTES_OK).replace("min(i0 + Br, N) if", "i0 + 1 if"),
        ["case 1", "counted from the block's FIRST query", "min(i0 + Br, N) - 1"],
    ),
    "lse at 4 bytes for float64 too": (
        {"lse": "4"},
        ["case 2 (N = 333", "itemsize = 8", "lse counted at 4 bytes for float64"],
    ),
    "the (T+1)/2T shortcut for the causal K, V": (
        """
def fa2_bytes(N, d, Br, Bc, itemsize, causal):
    T = -(-N // Br)
    kv = 2 * N * T * d * itemsize
    if causal:
        kv = kv * (T + 1) // (2 * T)
    return 2 * N * d * itemsize + kv + N * max(itemsize, 4)
""",
        ["case 1", "(T+1)/2T is the fraction", "Br = 64, Bc = 48"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_2)
def test_exercise_2_mistakes(mistake):
    changes, says = WRONG_2[mistake]
    _fails(
        "bytes",
        changes
        if isinstance(changes, str)
        else BYTES.format(**{**BYTES_OK, **changes}),
        *says,
    )


# ------------------------------------------------------------------------------------ exercise 3

WIDEST = """
def widest_key_block(sram_bytes, d, Br, itemsize):
    fixed = Br * d * itemsize + {state}
    per_key = 2 * d * itemsize + {tile}
    return max(0, {div})
"""
WIDEST_OK = {
    "state": "(2 * Br + Br * d) * 4",
    "tile": "Br * itemsize + Br * 4",
    "div": "(sram_bytes - fixed) // per_key",
}

WRONG_3 = {
    "lab's step_footprint, tried key by key": (
        """
def widest_key_block(sram_bytes, d, Br, itemsize):
    Bc = 0
    while lab.step_footprint(d, Br, Bc + 1, itemsize=itemsize)["total"] <= sram_bytes:
        Bc += 1
    return Bc
""",
        ["case 0", "calls lab.step_footprint"],
    ),
    "rounded up": (
        {"div": "-(-(sram_bytes - fixed) // per_key)"},
        ["expected 104, got 105", "rounded up", "round the division down"],
    ),
    "S_ij left out": (
        {"tile": "Br * itemsize"},
        ["expected 268, got 446", "S_ij is left out"],
    ),
    "P_ij left out": (
        {"tile": "Br * 4"},
        ["expected 268, got 335", "P_ij is left out", "beside S_ij"],
    ),
    "V_j left out (at d = Br the same Bc as P_ij left out)": (
        WIDEST.format(**WIDEST_OK).replace("2 * d * itemsize", "d * itemsize"),
        ["expected 268, got 335", "K_j or V_j is left out"],
    ),
    "S_ij at itemsize": (
        {"tile": "Br * itemsize + Br * itemsize"},
        ["expected 268, got 335", "S_ij counted at itemsize", "float32 (4 bytes)"],
    ),
    "every buffer at itemsize": (
        {
            "tile": "Br * itemsize + Br * itemsize",
            "state": "(2 * Br + Br * d) * itemsize",
        },
        [
            "expected 268, got 351",
            "every buffer counted at itemsize",
            "m, l, acc stay in float32",
        ],
    ),
    "P_ij in float32": (
        {"tile": "Br * 4 + Br * 4"},
        ["expected 268, got 223", "P_ij counted in float32"],
    ),
    "m and l left out": (
        {"state": "Br * d * 4"},
        ["m and l are left out", "Br floats each"],
    ),
    "S_ij and P_ij left out": (
        {"tile": "0"},
        ["S_ij and P_ij are both left out", "Br · (4 + itemsize) bytes per key"],
    ),
    "S_ij and P_ij left out, the state at itemsize": (
        {"tile": "0", "state": "(2 * Br + Br * d) * itemsize"},
        ["S_ij and P_ij are left out, and m, l, acc counted at itemsize"],
    ),
    "acc at itemsize": (
        {"state": "2 * Br * 4 + Br * d * itemsize"},
        ["expected 268, got 280", "acc counted at itemsize", "in float32"],
    ),
    "state left out": (
        {"state": "0"},
        ["got 294", "the state is left out", "m and l (Br each) and acc"],
    ),
    "rounded to the nearest": (
        {"div": "round((sram_bytes - fixed) / per_key)"},
        ["rounded to the nearest", "round the division down"],
    ),
    "Q_i left out": (
        WIDEST.format(**WIDEST_OK).replace("fixed = Br * d * itemsize + ", "fixed = "),
        ["Q_i is left out"],
    ),
    "a float": (
        {"div": "(sram_bytes - fixed) / per_key"},
        ["case 0", "a float", "whole number of keys"],
    ),
    "a whole float": (
        {"div": "float((sram_bytes - fixed) // per_key)"},
        [
            "case 0 (sram_bytes = 196608, d = 64, Br = 64, itemsize = 2)",
            "returned 268.0, a float",
            "round down (//)",
        ],
    ),
    "negative when nothing fits": (
        WIDEST.format(**WIDEST_OK).replace(
            "max(0, (sram_bytes - fixed) // per_key)", "(sram_bytes - fixed) // per_key"
        ),
        [
            "case 5 (sram_bytes = 4096, d = 64, Br = 64, itemsize = 2)",
            "expected 0, got -",
            "no negative sizes: return 0 when even Bc = 1 does not fit",
        ],
    ),
}


def test_widest_m_and_l_left_out_names_only_that():
    out = _fails("widest", WIDEST.format(**{**WIDEST_OK, "state": "Br * d * 4"}))
    assert "m and l are left out" in out and "rounded up" not in out, out


@pytest.mark.parametrize("mistake", WRONG_3)
def test_exercise_3_mistakes(mistake):
    changes, says = WRONG_3[mistake]
    out = _fails(
        "widest",
        changes
        if isinstance(changes, str)
        else WIDEST.format(**{**WIDEST_OK, **changes}),
        *says,
    )
    assert "— or:" not in out, out  # one diagnosis, the one planted


# ------------------------------------------------------------------------------------ part 2, exercise 2: the tiled forward

FWD = """
def flash_forward(q, k, v, Br, Bc, causal=False):
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    o, lse, tiles = np.zeros((N, v.shape[1])), np.full(N, -np.inf), []
    for i0 in {rows}:
        i1 = min(i0 + Br, N)
        q_i = q[i0:i1] / {scale}
        m, l, acc = np.full(i1 - i0, {m0}), np.zeros(i1 - i0), np.zeros((i1 - i0, v.shape[1]))
        last = {last}
        for j0 in {keys}:
            j1 = min(j0 + Bc, M)
            {report}
            s = q_i @ k[j0:j1].T
            if causal:
                s = np.where(np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None] + {off}, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            m_use = {m_use}
            alpha = np.exp(m - m_use)
            p = np.exp(s - m_use[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v[j0:j1]
            m = m_new
        {finish}
    return o, lse, tiles
"""
FINISH = (
    "seen = l > 0\n        o[i0:i1] = acc / np.where(seen, l, 1.0)[:, None]\n"
    "        lse[i0:i1] = np.where(seen, {lse}, -np.inf)"
)
FWD_OK = {
    "rows": "range(0, N, Br)",
    "scale": "np.sqrt(d)",
    "m0": "-np.inf",
    "last": "min(M, i1 + M - N) if causal else M",
    "keys": "range(0, last, Bc)",
    "off": "M - N",
    "m_use": "np.where(np.isneginf(m_new), 0.0, m_new)",
    "finish": FINISH.format(lse="m + np.log(np.where(seen, l, 1.0))"),
    "report": "tiles.append((i0 // Br, j0 // Bc, j1 - j0))",
}


def _fwd(**changes) -> str:
    return FWD.format(**{**FWD_OK, **changes})


TWO_PASS = _fwd(
    keys="""range(0, last, Bc):
            j1 = min(j0 + Bc, M)
            t = q_i @ k[j0:j1].T
            if causal:
                t = np.where(np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None] + M - N, t, -np.inf)
            m = np.maximum(m, t.max(axis=1))
        for j0 in range(0, last, Bc)"""
)

WRONG_4 = {
    "non-streaming softmax(q kᵀ) v": (
        """
def flash_forward(q, k, v, Br, Bc, causal=False):
    N, M = len(q), len(k)
    s = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N, s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m)
    l = p.sum(axis=1, keepdims=True)
    o = np.where(l > 0, p @ v / np.where(l > 0, l, 1.0), 0.0)
    return o, np.where(l[:, 0] > 0, m[:, 0] + np.log(np.where(l[:, 0] > 0, l[:, 0], 1.0)), -np.inf), []
""",
        [
            "case 0 (Br, Bc divide N, M;",
            "K was loaded whole, all 64 rows at once (k.T)",
            "k[j0:j1]",
        ],
    ),
    "returns lab.attention_reference": (
        """
def flash_forward(q, k, v, Br, Bc, causal=False):
    return (*lab.attention_reference(q, k, v, causal=causal), [])
""",
        [
            "case 0 (Br, Bc divide N, M;",
            "calls lab.attention_reference",
            "write it yourself",
        ],
    ),
    "the key block's own max, not the running max": (
        _fwd().replace("m_new = np.maximum(m, s.max(axis=1))", "m_new = s.max(axis=1)"),
        [
            "case 2 (a key block near +400 before 30 keys near -400;",
            "NaN in yours",
            "m must be the running max",
        ],
    ),
    "torch's SDPA on each query block": (
        """
import torch
def flash_forward(q, k, v, Br, Bc, causal=False):
    o, lse = lab_free_attention(q, k, v, causal)
    return o, lse, []

def lab_free_attention(q, k, v, causal):
    t = [torch.from_numpy(np.asarray(x)) for x in (q, k, v)]
    o = torch.nn.functional.scaled_dot_product_attention(*t).numpy()
    return o, np.zeros(len(q))
""",
        [
            "case 0",
            "calls torch.nn.functional.scaled_dot_product_attention",
            "asks for numpy",
        ],
    ),
    "the check's own reference": (
        """
from lab.checks.tiling import _reference
def flash_forward(q, k, v, Br, Bc, causal=False):
    return (*_reference(q, k, v, lab.causal_mask(len(q), len(k)) if causal else None), [])
""",
        ["case 0", "calls lab.checks.tiling._reference"],
    ),
    "returns lab.flash_attention_numpy": (
        """
def flash_forward(q, k, v, Br, Bc, causal=False):
    o, lse = lab.flash_attention_numpy(q, k, v, block_q=Br, block_k=Bc, causal=causal)
    return o, lse.astype(float), []
""",
        ["calls lab.flash_attention_numpy"],
    ),
    "running max started at 0": (
        _fwd(m0="0.0"),
        ["case 8 (every score near -1100;", "o (element 0)", "start m at -inf (not 0)"],
    ),
    "top-left causal alignment": (
        _fwd(off="0", last="min(M, i1) if causal else M"),
        ["case 4 (causal, N < M;", "aligned top-left", "c > r + (M - N)"],
    ),
    "dropped query tail": (
        _fwd(rows="range(0, N - N % Br, Br)"),
        [
            "case 1 (partial last blocks, dv != d;",
            "expected 0.31215, got 0",
            "the last 2 queries (rows 48 to 49) form a partial query block",
        ],
    ),
    "dropped query tail, short output": (
        _fwd(finish="o[i0:i1] = acc / l[:, None]\n        lse[i0:i1] = m + np.log(l)")
        .replace(
            "np.zeros((N, v.shape[1])), np.full(N, -np.inf)",
            "np.zeros((N - N % Br, v.shape[1])), np.zeros(N - N % Br)",
        )
        .replace("range(0, N, Br)", "range(0, N - N % Br, Br)"),
        ["shape: yours is (48, 4), expected (50, 4)", "yours has no rows for it"],
    ),
    "dropped key tail": (
        _fwd(keys="range(0, last - Bc + 1, Bc)"),
        ["case 1", "the last key block is partial (6 keys)"],
    ),
    "NaN on a row with no key": (
        _fwd(
            m_use="m_new",
            finish="o[i0:i1] = acc / l[:, None]\n        lse[i0:i1] = m + np.log(l)",
        ),
        [
            "case 5 (causal, N > M: queries 0-6 see no key;",
            "NaN in yours",
            "o = 0 and lse = -inf",
        ],
    ),
    "lse off by the max": (
        _fwd(finish=FINISH.format(lse="np.log(np.where(seen, l, 1.0))")),
        ["lse (element 1)", "your lse is log l", "lse = m + log l"],
    ),
    "scores not scaled": (_fwd(scale="1.0"), ["not scaled"]),
    "scores scaled by 1/d": (
        _fwd(scale="d"),
        ["scaled by 1/d", "1/√d", "np.sqrt(d), not d"],
    ),
    "acc returned, / l forgotten": (
        _fwd(
            finish=FINISH.format(lse="m + np.log(np.where(seen, l, 1.0))").replace(
                "acc / np.where(seen, l, 1.0)[:, None]", "acc"
            )
        ),
        ["o is acc, not acc / l", "divide it by l once"],
    ),
    "alpha inverted, e^(m' - m)": (
        _fwd().replace("alpha = np.exp(m - m_use)", "alpha = np.exp(m_use - m)"),
        ["case 0", "α is inverted", "α = e^(m - m′) ≤ 1"],
    ),
    "alpha inverted, its first tile guarded": (
        _fwd().replace(
            "alpha = np.exp(m - m_use)",
            "alpha = np.where(np.isneginf(m), 0.0, np.exp(m_use - m))",
        ),
        ["α is inverted", "α = e^(m - m′) ≤ 1"],
    ),
    "no mask inside the diagonal tiles": (
        _fwd().replace("            if causal:\n", "            if False:\n"),
        ["computed without the mask inside", "c > r + (M - N)"],
    ),
    "keepdims slip: s - m without [:, None]": (
        _fwd().replace("np.exp(s - m_use[:, None])", "np.exp(s - m_use)"),
        [
            "case 0 (Br, Bc divide N, M; N = 64, M = 64, d = 8, dv = 8, Br = 16, Bc = 32",
            "raised ValueError",
            "broadcast",
            "s - m_new[:, None]",
        ],
    ),
    "one query row per block (Br ignored)": (
        _fwd(rows="range(0, N)").replace("i1 = min(i0 + Br, N)", "i1 = i0 + 1"),
        [
            "case 0",
            "K was loaded once per query row: row 0 of k 64 times",
            "Br = 16 rows, q[i0:i0 + Br]",
        ],
    ),
    "mask not applied": (
        _fwd(off="M", last="M"),
        ["case 3 (causal, N = M, partial blocks;", "without the mask"],
    ),
    "two passes over K per query block": (
        TWO_PASS,
        ["K was read 2 times per query block", "row 0 of k was loaded 8 times"],
    ),
    "a strip of K in one load": (
        _fwd(keys="range(0, last, Bc)", last="M").replace(
            "s = q_i @ k[j0:j1].T", "s = q_i @ k[0:M][j0:j1].T"
        ),
        ["64 rows of k were loaded in one access (k[0:64])"],
    ),
    "Algorithm 1's order (key blocks outside)": (
        """
def flash_forward(q, k, v, Br, Bc, causal=False):
    N, M = len(q), len(k)
    m, l, acc = np.full(N, -np.inf), np.zeros(N), np.zeros((N, v.shape[1]))
    for j0 in range(0, M, Bc):
        k_j, v_j = k[j0:j0 + Bc], v[j0:j0 + Bc]
        for i0 in range(0, N, Br):
            i1 = min(i0 + Br, N)
            s = q[i0:i1] @ k_j.T / np.sqrt(q.shape[1])
            if causal:
                s = np.where(np.arange(j0, j0 + len(k_j))[None, :] <= np.arange(i0, i1)[:, None] + M - N, s, -np.inf)
            m_new = np.maximum(m[i0:i1], s.max(axis=1))
            mu = np.where(np.isneginf(m_new), 0.0, m_new)
            a, p = np.exp(m[i0:i1] - mu), np.exp(s - mu[:, None])
            l[i0:i1] = a * l[i0:i1] + p.sum(axis=1)
            acc[i0:i1] = a[:, None] * acc[i0:i1] + p @ v_j
            m[i0:i1] = m_new
    seen = l > 0
    o = acc / np.where(seen, l, 1.0)[:, None]
    return o, np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf), []
""",
        [
            "row 0 of k was loaded 1 time(s), but 4 query blocks see it",
            "query blocks outside",
        ],
    ),
    "all N × M scores stored": (
        """
def flash_forward(q, k, v, Br, Bc, causal=False):
    N, M = len(q), len(k)
    S = np.full((N, M), -np.inf)
    o, lse = np.zeros((N, v.shape[1])), np.full(N, -np.inf)
    tiles = []
    for i0 in range(0, N, Br):
        i1 = min(i0 + Br, N)
        vs = []
        for j0 in range(0, min(M, i1 + M - N) if causal else M, Bc):
            S[i0:i1, j0:j0 + Bc] = q[i0:i1] @ k[j0:j0 + Bc].T / np.sqrt(q.shape[1])
            vs.append(v[j0:j0 + Bc])
            tiles.append((i0 // Br, j0 // Bc, min(j0 + Bc, M) - j0))
        vs.append(np.zeros((M - sum(map(len, vs)), v.shape[1])))  # the keys never loaded
        s = S[i0:i1]
        if causal:
            s = np.where(np.arange(M)[None, :] <= np.arange(i0, i1)[:, None] + M - N, s, -np.inf)
        m = s.max(axis=1)
        mu = np.where(np.isneginf(m), 0.0, m)
        p = np.exp(s - mu[:, None])
        l = p.sum(axis=1)
        o[i0:i1] = np.where(l[:, None] > 0, p @ np.concatenate(vs) / np.where(l > 0, l, 1.0)[:, None], 0.0)
        lse[i0:i1] = np.where(l > 0, mu + np.log(np.where(l > 0, l, 1.0)), -np.inf)
    return o, lse, tiles
""",
        [
            "case 13 (large;",
            "as much as an N × M array of float64 (128 × 4096",
            "one Br × Bc tile",
        ],
    ),
    "a Br × M strip of scores per query block": (
        """
def flash_forward(q, k, v, Br, Bc, causal=False):
    N, M = len(q), len(k)
    o, lse = np.zeros((N, v.shape[1])), np.full(N, -np.inf)
    tiles = []
    for i0 in range(0, N, Br):
        i1 = min(i0 + Br, N)
        ks = range(0, min(M, i1 + M - N) if causal else M, Bc)
        tiles += [(i0 // Br, j0 // Bc, min(j0 + Bc, M) - j0) for j0 in ks]
        s = [q[i0:i1] @ k[j0:j0 + Bc].T / np.sqrt(q.shape[1]) for j0 in ks]
        s = np.concatenate(s + [np.full((i1 - i0, M - min(M, len(ks) * Bc)), -np.inf)], axis=1)
        if causal:
            s = np.where(np.arange(M)[None, :] <= np.arange(i0, i1)[:, None] + M - N, s, -np.inf)
        m = s.max(axis=1)
        mu = np.where(np.isneginf(m), 0.0, m)
        p = np.exp(s - mu[:, None])
        l = p.sum(axis=1)
        pv = sum(p[:, j0:j0 + Bc] @ v[j0:j0 + Bc] for j0 in ks)
        o[i0:i1] = np.where(l[:, None] > 0, pv / np.where(l > 0, l, 1.0)[:, None], 0.0)
        lse[i0:i1] = np.where(l > 0, mu + np.log(np.where(l > 0, l, 1.0)), -np.inf)
    return o, lse, tiles
""",
        ["case 13 (large;", "Br × M strip(s) of float64 (16 × 4096 = 512 KiB)"],
    ),
}

WRONG_4.update(
    {
        "a skipped diagonal tile (only fully visible tiles computed)": (
            _fwd(
                keys="(j0 for j0 in range(0, last, Bc) "
                "if not causal or min(j0 + Bc, M) - 1 <= i0 + M - N)"
            ),
            ["case 3 (causal, N = M, partial blocks;", "skipped the diagonal tiles"],
        ),
        "off-by-one causal boundary in the skip (strict <)": (
            _fwd(last="min(M, i1 - 1 + M - N) if causal else M"),
            ["case 3 (causal, N = M, partial blocks;", "off by one in the skip"],
        ),
        "off-by-one causal boundary in the mask (strict <)": (
            _fwd(off="M - N - 1"),
            ["case 3", "the mask is off by one", "not when c >= r + (M - N)"],
        ),
        "off-by-one causal boundary in the mask (one key too many)": (
            _fwd(off="M - N + 1"),
            ["case 3", "the mask is off by one", "not one more"],
        ),
        "dropped partial key block, causal": (
            _fwd(keys="range(0, last - last % Bc, Bc)"),
            ["the last key block is partial"],
        ),
        "masked tiles loaded (no skipping)": (
            _fwd(last="M"),
            [
                "case 3 (causal, N = M, partial blocks;",
                "tile (0, 2) is computed, but every pair in it is hidden",
                "Skip it",
            ],
        ),
        "one tile too many: the first hidden tile computed": (
            _fwd(last="min(M, i1 + 1 + M - N) if causal else M"),
            ["is computed, but every pair in it is hidden", "Off by one"],
        ),
        "no report": (
            _fwd().replace("return o, lse, tiles", "return o, lse"),
            ["returned tuple of 2", "return (o, lse, tiles)"],
        ),
        "the report gives Bc for a partial block": (
            _fwd(report="tiles.append((i0 // Br, j0 // Bc, Bc))"),
            [
                "case 1 (partial last blocks",
                "n = 6 rows",
                "your report says 32",
                "partial",
            ],
        ),
        "the report gives row offsets, not block indices": (
            _fwd(report="tiles.append((i0, j0, j1 - j0))"),
            ["case 0", "is not on the grid", "i = i0 // Br and j = j0 // Bc"],
        ),
        "the report lists the needed tiles, the kernel loads them all": (
            _fwd(
                last="M",
                report="tiles += [(i0 // Br, j0 // Bc, j1 - j0)] "
                "if not causal or j0 <= i1 - 1 + M - N else []",
            ),
            [
                "case 3",
                "row 10 of k was loaded 5 time(s), but your report lists 4 tile(s)",
            ],
        ),
        "top-left skip with a bottom-right mask": (
            _fwd(last="min(M, i1) if causal else M"),
            ["case 4 (causal, N < M;", "is missing from your report", "query 7"],
        ),
        "the report repeats a tile": (
            _fwd(report="tiles += [(i0 // Br, j0 // Bc, j1 - j0)] * 2"),
            ["tile (0, 0) is reported twice"],
        ),
    }
)


WRONG_4.update(
    {
        "acc not rescaled": (
            _fwd().replace("acc = alpha[:, None] * acc", "acc = acc"),
            ["acc is not", "both shrink by the same α"],
        ),
        "partial blocks dropped": (
            _fwd(
                rows="range(0, N - N % Br, Br)",
                keys="range(0, min(last, M - M % Bc), Bc)",
            ),
            ["the partial last blocks are missing", "range(0, N, Br)"],
        ),
        "a float32 accumulator": (
            _fwd(m0="-np.inf, np.float32")
            .replace(
                "np.zeros(i1 - i0), np.zeros((i1 - i0, v.shape[1]))",
                "np.zeros(i1 - i0, np.float32), np.zeros((i1 - i0, v.shape[1]), np.float32)",
            )
            .replace(
                "s = q_i @ k[j0:j1].T", "s = (q_i @ k[j0:j1].T).astype(np.float32)"
            )
            .replace("p @ v[j0:j1]", "p @ v[j0:j1].astype(np.float32)"),
            ["float32's precision", "keep m, l and acc in float64"],
        ),
        "a tile left out of the report, no mask": (
            _fwd(report="tiles.append((i0 // Br, j0 // Bc, j1 - j0)) if j0 else None"),
            ["is missing from your report"],
        ),
    }
)


def test_a_non_causal_report_gap_is_not_blamed_on_the_mask():
    from lab.checks.tiling import _report_problem

    said = _report_problem(np.array([[0, 1, 4]]), 4, 8, 4, 4, False)
    assert "without the mask every one of the" in said and "diagonal" not in said, said


@pytest.mark.parametrize("mistake", WRONG_4)
def test_exercise_4_mistakes(mistake):
    source, says = WRONG_4[mistake]
    _fails("forward", source, *says)


def test_exercise_4_template_is_the_worked_solution():
    assert run_check(EX["forward"], _fwd()) == PASSED["forward"]


def test_exercise_4_accepts_a_kernel_that_reads_row_by_row_or_reports_an_array():
    by_rows = _fwd().replace(
        "s = q_i @ k[j0:j1].T", "s = q_i @ np.stack([k[j] for j in range(j0, j1)]).T"
    )
    assert run_check(EX["forward"], by_rows) == PASSED["forward"]
    as_array = _fwd().replace("return o, lse, tiles", "return o, lse, np.array(tiles)")
    assert run_check(EX["forward"], as_array) == PASSED["forward"]


def test_exercise_4_reports_a_crash_on_the_counting_arrays():
    out = run_check(
        EX["forward"],
        _fwd().replace(
            "s = q_i @ k[j0:j1].T",
            "s = q_i @ k[j0:j1].T + 0 * len(k.__array_interface__)",
        ),
    )
    assert (
        "with k and v that count the rows you load raised" in out
        and "index k and v by blocks of rows" in out
    )


# ------------------------------------------------------------------------------------ lab/checks/tiling.py


def _brute_kinds(N, M, Br, Bc):
    vis = lab.causal_mask(N, M)
    computed = masked = 0
    for i0 in range(0, N, Br):
        for j0 in range(0, M, Bc):
            t = vis[i0 : i0 + Br, j0 : j0 + Bc]
            computed += bool(t.any())
            masked += bool(t.any() and not t.all())
    return computed, masked


@pytest.mark.parametrize(
    "N, M, Br, Bc",
    [
        (7, 7, 3, 5),
        (12, 5, 4, 2),
        (5, 12, 2, 4),
        (33, 70, 8, 16),
        (64, 64, 64, 64),
        (40, 13, 64, 1),
    ],
)
def test_tile_kinds_match_the_mask_and_the_kernel(N, M, Br, Bc):
    assert tiling._tile_kinds(N, M, Br, Bc) == _brute_kinds(N, M, Br, Bc)
    assert (
        tiling._tile_kinds(N, M, Br, Bc)[0]
        == lab.tile_counts(N, M, Br, Bc, causal=True)["computed"]
    )


@pytest.mark.parametrize(
    "case",
    [
        (4096, 64, 128, 128, 2, False),
        (1000, 64, 64, 48, 2, True),
        (333, 16, 50, 64, 8, True),
        (5, 3, 7, 2, 2, True),
        (100, 8, 9, 7, 4, True),
    ],
)
def test_fa2_bytes_match_the_instrumented_kernel(case):
    N, d, Br, Bc, isz, causal = case
    x = (
        np.random.default_rng(0)
        .standard_normal((3, N, d))
        .astype({2: np.float16, 4: np.float32, 8: np.float64}[isz])
    )
    with lab.trace.record() as rec:
        lab.flash_attention_numpy(
            x[0], x[1], x[2], block_q=Br, block_k=Bc, causal=causal
        )
    assert tiling._fa2_bytes(*case) == rec.total


@pytest.mark.parametrize(
    "case",
    [(192 * 1024, 64, 64, 2), (4096, 64, 64, 2), (100_000, 48, 16, 4), (3000, 4, 4, 2)],
)
def test_widest_is_the_largest_block_that_fits(case):
    sram, d, Br, isz = case
    fits = [
        Bc
        for Bc in range(1, 2000)
        if lab.step_footprint(d, Br, Bc, itemsize=isz)["total"] <= sram
    ]
    assert tiling._widest(*case) == (fits[-1] if fits else 0)


def test_block_load_array_counts_rows_and_whole_uses():
    a = BlockLoadArray(np.arange(12.0).reshape(6, 2), "k")
    assert a.shape == (6, 2) and len(a) == 6 and a.ndim == 2 and a.loads.sum() == 0
    assert np.array_equal(a[1:3], [[2, 3], [4, 5]]) and a[4, 1] == 9
    assert (
        a.loads.tolist() == [0, 1, 1, 0, 1, 0]
        and a.largest == 2
        and a.largest_at == "k[1:3]"
        and a.whole is None
    )
    assert [r.tolist() for r in a][0] == [0, 1] and a.loads.tolist() == [
        1,
        2,
        2,
        1,
        2,
        1,
    ]
    assert (
        np.array_equal(a.T, np.arange(12.0).reshape(6, 2).T)
        and a.whole == "k.T"
        and a.loads.tolist() == [2, 3, 3, 2, 3, 2]
    )
    b = BlockLoadArray(np.ones((3, 2)), "v")
    assert np.array_equal(np.ones((1, 3)) @ b, [[3.0, 3.0]]) and b.whole.startswith(
        "np.asarray(v)"
    )
    c = BlockLoadArray(np.ones((3, 2)), "k")
    assert (
        np.array_equal(c * 2, 2 * np.ones((3, 2)))
        and c.whole == "k whole in an expression"
    )
    d = BlockLoadArray(np.ones((5, 2)), "k")
    d[np.array([0, 4])]
    assert d.loads.tolist() == [1, 0, 0, 0, 1] and d.largest_at == "k[[...]]"


def test_loads_problem_names_each_violation():
    def loaded(pattern, M=8):
        a = BlockLoadArray(np.zeros((M, 2)), "k")
        for sl in pattern:
            a[sl]
        return a

    N, Br, Bc = 8, 4, 4  # Tr = 2 query blocks
    once = [slice(0, 4), slice(4, 8)] * 2
    assert tiling._loads_problem(loaded(once), N, Br, Bc, False) is None
    assert "read 2 times per query block" in tiling._loads_problem(
        loaded(once * 2), N, Br, Bc, False
    )
    assert "in one access (k[0:8])" in tiling._loads_problem(
        loaded([slice(0, 8)] * 2), N, Br, Bc, False
    )
    assert "but 2 query blocks see it" in tiling._loads_problem(
        loaded(once[:2]), N, Br, Bc, False
    )
    causal = [
        slice(0, 4),
        slice(0, 4),
        slice(4, 8),
    ]  # block 0 sees keys 0-3 only (N = M)
    assert tiling._loads_problem(loaded(causal), N, Br, Bc, True) is None
    assert tiling._rows_needed(12, 5, 4, True).tolist() == [
        2,
        1,
        1,
        1,
        1,
    ]  # row 7 sees key 0, row 11 keys 0-4


# ------------------------------------------------------------------------------------ part 1, exercise 3: FA2's tile

FITTING = {
    (64, 64, 4),
    (64, 64, 8),
    (64, 128, 4),
    (64, 128, 8),
    (64, 256, 8),
    (128, 64, 4),
    (128, 64, 8),
    (128, 128, 8),
    (256, 64, 8),
}
WRONG_TILE = {
    "128 × 128 with 4 warps counted as fitting": (
        FITTING | {(128, 128, 4)},
        (128, 64, 4),
        [
            "(128, 128, 4) does not fit",
            "registers 161 of 127.5 KiB",
            "registers budget",
        ],
    ),
    "two copies of K_j, V_j": (
        FITTING - {(64, 256, 8)},
        (128, 64, 4),
        ["(64, 256, 8) fits and is missing", "one copy of K_j, V_j"],
    ),
    "not a candidate": (FITTING | {(32, 64, 4)}, (128, 64, 4), ["is not a candidate"]),
    "8 warps shipped": (
        FITTING,
        (128, 128, 8),
        ["the 9 tiles that fit are right", "28% slower", "measured slower?"],
    ),
    "256 × 64 shipped": (FITTING, (256, 64, 8), ["28% slower"]),
    "the wide tile only 8 warps hold shipped": (
        FITTING,
        (64, 256, 8),
        ["64 × 256 needs 8 warps", "does not measure it", "Br = 64"],
    ),
    "a 4-warp tile shipped with 8 warps": (
        FITTING,
        (64, 64, 8),
        ["4 warps hold this tile too", "no larger tile", "128 × 128 and 256 × 64 only"],
    ),
    "FA2's tile shipped with 8 warps": (
        FITTING,
        (128, 64, 8),
        ["4 warps hold this tile too", "no larger tile"],
    ),
    "a small tile shipped": (
        FITTING,
        (64, 64, 4),
        ["56.5 of their 127.5 KiB", "force a tile this small?"],
    ),
    "the wide tile shipped": (
        FITTING,
        (64, 128, 4),
        [
            "as large as any tile 4 warps hold",
            "how many times are all of K and V read",
            "the fewest among the tiles that fit 4 warps?",
        ],
    ),
    "the set at d = 64 (the same as with P_ij in S_ij's registers)": (
        tiling._fitting_a100(64),
        (128, 64, 4),
        [
            "fit at d = 64",
            "P_ij in S_ij's registers, which are the same set",
            "d = 128",
        ],
    ),
    "one pool for both memories": (
        tiling._pooled(),
        (128, 64, 4),
        ["one 256 KiB pool", "two memories with two budgets"],
    ),
    "ship outside the fitting set": (
        FITTING,
        (256, 128, 8),
        ["not among the tiles that fit"],
    ),
    "not a triple": (FITTING, 128, ["a set of (Br, Bc, warps) triples"]),
}


def _tile_said(fitting, ship, capsys) -> str:
    tiling.check_fa2_tile_choice(fitting, ship)
    return capsys.readouterr().out


@pytest.mark.parametrize("mistake", WRONG_TILE)
def test_fa2_tile_choice_mistakes(mistake, capsys):
    fitting, ship, says = WRONG_TILE[mistake]
    out = _tile_said(fitting, ship, capsys)
    assert "✗" in out and "✓" not in out, out
    for text in says:
        assert text in out, (text, out)
    assert "taller" not in out and "128 × 64" not in out.split("hint:")[-1], out


FITS = """
def a100_fits(d, Br, Bc, warps):
    regs = Br * Bc * (4 + {p}) + {ml} * Br * 4 + Br * d * {acc}
    shared = (Br * d + {kv} * Bc * 2 * d) * 2
    budget = {budget}
    return {verdict}
"""
FITS_OK = {
    "acc": "4",
    "p": "2",
    "ml": "2",
    "kv": "1",
    "budget": "min(256 * 1024, 32 * warps * 255 * 4)",
    "verdict": "regs <= budget and shared <= 163 * 1024",
}
WRONG_FITS = {
    "one pool": (
        {"verdict": "regs + shared <= 256 * 1024"},
        ["it fits", "not one 256 KiB pool"],
    ),
    "no warp limit": ({"budget": "256 * 1024"}, ["it does not fit", "32·w·255·4 B"]),
    "two copies of K, V": ({"kv": "2"}, ["it fits", "one copy of K_j, V_j (n_kv = 1)"]),
    "P in float32": ({"p": "4"}, ["it fits", "P_ij in fp16"]),
    "acc in fp16": (
        {"acc": "2"},
        ["it does not fit", "acc counted in fp16", "stays in float32"],
    ),
    "P_ij left out": ({"p": "0"}, ["it does not fit", "P_ij is left out"]),
    "m and l left out": (
        {"ml": "0"},
        ["case (d = 128, Br = 64, Bc = 254, warps = 4)", "m and l are left out"],
    ),
    "the register budget in registers, not bytes": (
        {"budget": "min(256 * 1024, 32 * warps * 255)"},
        ["it fits", "in registers, not bytes", "32·w·255 registers of 4 bytes"],
    ),
    "no 256 KiB cap": (
        {"budget": "32 * warps * 255 * 4"},
        [
            "case (d = 128, Br = 256, Bc = 128, warps = 16)",
            "it does not fit",
            "from 9 warps on",
        ],
    ),
    "the SM's 164 KiB": (
        {"verdict": "regs <= budget and shared <= 164 * 1024"},
        [
            "it does not fit",
            "within the SM's 164 KiB",
            "163 KiB one thread block may use",
        ],
    ),
}


@pytest.mark.parametrize(
    "verdict, says",
    [
        (
            "regs < budget and shared < 163 * 1024",
            ["case (d = 64, Br = 64, Bc = 296, warps = 4)", "it fits", "<=, not <"],
        ),
        (
            "regs < budget and shared <= 163 * 1024",
            ["case (d = 64, Br = 64, Bc = 296, warps = 4)", "<=, not <"],
        ),
        (
            "regs <= budget and shared < 163 * 1024",
            ["shared memory fill the budget exactly", "<=, not <"],
        ),
    ],
)
def test_a100_fits_strict_at_a_budget_fails(verdict, says):
    _fails("fits", FITS.format(**{**FITS_OK, "verdict": verdict}), *says)


def test_a100_fits_q_in_registers_is_named():
    src = FITS.format(**FITS_OK).replace(
        "+ Br * d * 4\n", "+ Br * d * 4 + Br * d * 2\n"
    )
    src = src.replace("(Br * d + 1 * Bc * 2 * d) * 2", "(1 * Bc * 2 * d) * 2")
    assert "Br * d * 2" in src and "(1 * Bc * 2 * d)" in src, src
    out = _fails("fits", src, "Q_i", "shared memory")
    assert "P_ij in fp16" not in out, out


@pytest.mark.parametrize("mistake", WRONG_FITS)
def test_a100_fits_mistakes_are_named(mistake):
    change, says = WRONG_FITS[mistake]
    out = _fails("fits", FITS.format(**{**FITS_OK, **change}), *says)
    assert "— or:" not in out, out  # one diagnosis, the one planted


def test_a100_fits_right_passes_and_lab_is_refused():
    assert run_check(EX["fits"], FITS.format(**FITS_OK)) == PASSED["fits"]
    cheat = """
def a100_fits(d, Br, Bc, warps):
    return lab.onchip_fits("A100", d, Br, Bc, kv_stages=1, warps=warps)["fits"]
"""
    _fails("fits", cheat, "lab.onchip_fits")
    table = """
hard = {(128, 64, 4), (64, 64, 4), (64, 128, 4), (64, 64, 8), (64, 128, 8), (64, 256, 8),
        (128, 64, 8), (128, 128, 8), (256, 64, 8)}
def a100_fits(d, Br, Bc, warps):
    return (Br, Bc, warps) in hard
"""
    _fails("fits", table, "a100_fits: ✗ case (d = ")


def test_fa2_tile_choice_passes_the_worked_answer_and_reveals_the_source(capsys):
    ns = {"lab": lab}
    cells = _cells(NAME)
    q = next(i for i, (_, s, _) in enumerate(cells) if s.startswith("### Exercise 4"))
    for t, src, tags in cells[q:]:
        if t == "code" and "solution" in tags:
            exec(compile(_src(src), "<solution>", "exec"), ns)
    capsys.readouterr()
    out = _tile_said(ns["fitting"], ns["ship"], capsys)
    assert (
        out.startswith("fa2_tile: ✓ the 9 tiles that fit") and "01afd16d248c" in out
    ), out
    assert "85%" not in out and "spilling" not in out, out
    assert _tile_said(set(), None, capsys).startswith("fa2_tile: not implemented yet")
    assert tiling._fitting_a100() == FITTING


# ------------------------------------------------------------------------------------ part 2, exercise 3: fa1's bytes

FA1 = """
def fa1_bytes(N, d, Br, Bc, itemsize, causal):
    stat = {stat}
    row = {row}
    moved = 2 * N * d * itemsize + {init}
    for i0 in range(0, N, Br):
        r = {r}
        seen = min(i0 + Br, N) if {causal} else N
        tiles = -(-seen // Bc)
        moved += tiles * r * ({per_tile})
    return moved {extra}
"""
FA1_OK = {
    "stat": "8 if itemsize == 8 else 4",
    "row": "d * itemsize + 2 * stat",
    "init": "N * row",
    "r": "min(Br, N - i0)",
    "causal": "causal",
    "per_tile": "d * itemsize + 2 * row",
    "extra": "",
}
WRONG_FA1 = {
    "Q read once, not once per key block": (
        {
            "per_tile": "d * itemsize + 2 * row - d * itemsize",
            "extra": "+ N * d * itemsize",
        },
        ["case 0 (N = 4096", "Q is read once here", "reads Q_i again for every tile"],
    ),
    "the output writes forgotten": (
        {"row": "2 * stat", "per_tile": "2 * d * itemsize + 2 * row"},
        ["case 0", "the output writes are missing", "writes O_i back"],
    ),
    "the initial write forgotten": (
        {"init": "0"},
        ["case 0", "the first write is missing", "O = 0, l = 0, m = -inf"],
    ),
    "O written back but never read": (
        {"per_tile": "2 * row"},
        [
            "case 0",
            "either of two",
            "Q_i, which fa1 reads again",
            "O_i, which it reads back",
        ],
    ),
    "the block's first query sets the tiles": (
        FA1.format(**FA1_OK).replace("min(i0 + Br, N) if", "i0 + 1 if"),
        ["case 1", "counted from the block's FIRST query", "min(i0 + Br, N) - 1"],
    ),
    "T_r key blocks, not T_c": (
        FA1.format(**FA1_OK).replace("-(-seen // Bc)", "-(-seen // Br)"),
        ["case 1 (N = 1000", "in steps of Br", "not T_r = ⌈N/Br⌉"],
    ),
    "Q_i never read": (
        {"per_tile": "(d * itemsize + 2 * stat) + row"},  # O_i, l_i, m_i in and out
        [
            "case 0",
            "either of two",
            "Q_i, which fa1 reads again",
            "O_i, which it reads back",
        ],
    ),
    "l, m at the input's itemsize": (
        {"stat": "itemsize"},
        ["case 0", "accumulator's dtype", "float32 (4 bytes)"],
    ),
    "l, m left out": (
        {"stat": "0"},
        ["case 0", "l and m are missing"],
    ),
    "no causal skipping": (
        {"causal": "False"},
        ["case 1 (N = 1000", "causal = True", "without causal skipping"],
    ),
    "a partial query block counted as Br rows": (
        {"r": "Br"},
        [
            "case 1 (N = 1000, d = 64, Br = 64",
            "partial last query block",
            "not Br per block",
        ],
    ),
    "fa2's count handed in": (
        """
def fa1_bytes(N, d, Br, Bc, itemsize, causal):
    keys = 0
    for i0 in range(0, N, Br):
        seen = min(i0 + Br, N) if causal else N
        keys += min(-(-seen // Bc) * Bc, N)
    return (2 * N * d + 2 * keys * d) * itemsize + N * max(itemsize, 4)
""",
        ["case 0", "that is fa2's count", "reads K and V once"],
    ),
    "lab's count under another name": (
        """
from lab.tiling import flash_counts as fc
def fa1_bytes(N, d, Br, Bc, itemsize, causal):
    return fc(N, N, d, block_q=Br, block_k=Bc, causal=causal, variant="fa1",
              itemsize=itemsize).total
""",
        ["case 0", "calls lab.flash_counts", "write it yourself"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_FA1)
def test_fa1_bytes_mistakes(mistake):
    changes, says = WRONG_FA1[mistake]
    _fails(
        "fa1bytes",
        changes if isinstance(changes, str) else FA1.format(**{**FA1_OK, **changes}),
        *says,
    )


def test_fa1_bytes_template_is_the_worked_solution():
    ns = {}
    exec(FA1.format(**FA1_OK), ns)
    assert run_check(EX["fa1bytes"], FA1.format(**FA1_OK)) == PASSED["fa1bytes"]


def test_the_footprints_are_derived_before_they_are_shown():
    """Part 1's exercise 3 derives the register and shared-memory footprints: the summed formula appears only
    after its check, folded in worked answers tagged `solution` (the learner copy drops them: part 2 is solved
    with the learner's own footprints)."""
    cells = _cells(NAME)
    formula = r"B_r B_c\,(4 + \text{itemsize})"
    check = next(i for i, (_, s, _) in enumerate(cells) if "check_a100_fits" in s)
    assert not any(formula in s for _, s, _ in cells[:check])
    shown = [(s, tags) for _, s, tags in cells[check + 1 :] if formula in s]
    assert shown and all(s.startswith("<details>") for s, _ in shown)
    assert all("solution" in tags for _, tags in shown)


def test_exercise_2_of_part_1_answers_its_question_after_the_check():
    """'By how much is yours smaller?' is answered after the check: the learner's own Bc against Algorithm 1's
    (a cell the learner's copy keeps, which runs on the stub too), then the worked answer (a solution cell)."""
    cells = _cells(NAME)
    chk = next(i for i, (_, s, _) in enumerate(cells) if "check_widest_key_block" in s)
    (_, yours, tags), (_, answer, answer_tags) = cells[chk + 1 : chk + 3]
    assert "solution" not in tags and "solution" in answer_tags
    assert "fa_block_sizes" in yours and "widest_key_block(" in yours
    assert "except NotImplementedError" in yours and "Algorithm 1" in answer
    ns = {"lab": lab, "np": np}
    exec(compile(EX["widest"].stub, "<stub>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(yours, "<yours>", "exec"), ns)
    assert (
        out.getvalue()
        == "yours: not written yet (exercise 3 above); Algorithm 1: Bc = 328\n"
    )


def test_the_fa2_and_fa1_counts_in_code_come_after_their_checks():
    """fa2_equation appears below exercise 1's check; fa1_equation below exercise 3's, as a worked solution."""
    cells = _cells(NAME2)
    at = {
        key: next(i for i, (_, s, _) in enumerate(cells) if key in s)
        for key in ("def fa2_equation", "check_fa2_hbm_bytes", "def fa1_equation")
    }
    assert at["def fa2_equation"] > at["check_fa2_hbm_bytes"]
    assert "solution" in cells[at["def fa1_equation"]][2]


def test_exercise_4_core_check_passes_a_kernel_without_the_mask():
    """The in-class core passes a kernel that ignores `causal`; the full check still fails it."""
    no_mask = _fwd().replace("if causal:", "if False:")
    ns = {"lab": lab, "np": np}
    exec(compile(_src(no_mask), "<no mask>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tiling.check_tiled_forward(ns["flash_forward"], core=True)
    assert out.getvalue().startswith("flash_forward: ✓ the core: passed the 7 cases"), (
        out.getvalue()
    )
    assert "✗" in run_check(EX["forward"], no_mask)
