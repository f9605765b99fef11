"""Notebook 10's exercises, in its two parts (10_decoding: the split of the keys; 10_gqa_and_paging: the
grouped, paged cache): each worked solution passes its own check cell, each planted classic mistake fails with
its diagnosis, and the checks of lab/checks/decoding.py and lab/checks/paged.py behave (one fixed line on a
pass, nothing left patched)."""

import dataclasses
import re
import textwrap

import numpy as np
import pytest
from exercise_support import (
    EVASIONS,
    Exercise,
    assert_says,
    evading,
    exercises,
    run_check,
)

import lab
from lab.checks import decoding as checks
from lab.checks import paged

NAME, NAME2 = "10_decoding", "10_gqa_and_paging"
_PART1 = {ex.number: ex for ex in exercises(NAME)}
# exercise 1's one stub holds (a) the tick count, checked first, and (b) the search, checked next
_EX1 = _PART1[1]
_CHECK_1B = "check_best_splits(best_splits)"
_STEPS = _EX1
_SEARCH = dataclasses.replace(
    _EX1, check=_CHECK_1B, before=[*_EX1.before, _EX1.solution, _EX1.check]
)
_PART2 = {ex.number: ex for ex in exercises(NAME2)}
# the exercises by what they build: part 1's 1 and 2, part 2's 1 to 4
EX = {
    "window": _PART2[1],
    "crossing": _PART2[2],
    "steps": _STEPS,
    "splits": _SEARCH,
    "append": _PART2[3],
    "paged": _PART2[4],
    "split": _PART1[2],
}

# Exercises the notebook retired (the cache per token, the intensity of a step, the cache with local layers, the
# gather through a block table): their checks stay in lab and are still tested, on the worked solutions they had.
OLD_SOLUTIONS = {
    6: "# @title Exercise 1: a worked solution (double-click or 'show code' to open)\ndef cache_bytes(tokens, layers, kv_heads, head_dim, itemsize, window):\n    per_token_layer = 2 * kv_heads * head_dim * itemsize  # K and V of the K/V heads\n    local = (layers + 1) // 2  # layers 0, 2, 4, ...: one more than the global if odd\n    kept = local * min(tokens, window) + (layers - local) * tokens  # tokens, all layers\n    return per_token_layer * kept",
    2: "# @title Exercise 2: a worked solution (double-click or 'show code' to open)\ndef intensity(G, d, M, kv_itemsize, qo_itemsize):\n    flops = G * 2 * (2 * M * d)  # per query head: QK^T and PV, a multiply and an add\n    kv_bytes = 2 * M * d * kv_itemsize  # K and V, read once for the whole group\n    qo_bytes = 2 * G * d * qo_itemsize  # each query head reads its q and writes its o\n    return flops / (kv_bytes + qo_bytes)",
    1: "# @title Exercise 1: a worked solution (double-click or 'show code' to open)\ndef cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n    # K and V, of the K/V heads only (queries are not cached), in every layer\n    return 2 * layers * kv_heads * head_dim * itemsize",
    5: "# @title Exercise 5: a worked solution (double-click or 'show code' to open)\ndef gather_pages(pages, block_row, length):\n    size = pages.shape[2]\n    n = -(-length // size)  # blocks in use: a partly filled last page counts\n    blocks = [\n        pages[block_row[i]] for i in range(n)\n    ]  # logical block i lives in physical page block_row[i]\n    return np.concatenate(blocks, axis=1)[\n        :, :length\n    ]  # (Hkv, n * size, d), cut before the stale slots",
}
OLD_CHECKS = {
    6: "from lab.checks.decoding import check_cache_bytes\ncheck_cache_bytes(cache_bytes)\n",
    2: "from lab.checks.decoding import check_step_intensity\ncheck_step_intensity(intensity)\n",
    1: "from lab.checks.decoding import check_cache_per_token\ncheck_cache_per_token(cache_per_token)\n",
    5: "from lab.checks.paged import check_gather_pages\ncheck_gather_pages(gather_pages)\n",
}
OLD = {
    n: Exercise(n, "", "", OLD_SOLUTIONS[n], OLD_CHECKS[n], EX["window"].setup, [])
    for n in OLD_SOLUTIONS
}
# the exercises' earlier forms: the intensity of a step, the cache with local layers
RETIRED = {"intensity": OLD[2], "cache": OLD[6]}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def _fails(number, source: str, *says: str | tuple[str, ...]) -> str:
    """`number`: an exercise of the notebook, or a retired one (`OLD[n]`); `says` as in `assert_says`."""
    ex = {**EX, **RETIRED}[number] if isinstance(number, str) else number
    out = run_check(ex, _src(source))
    assert "✗" in out and "✓" not in out, out
    assert_says(out, *says)
    assert "  hint: " in out or "proves nothing" in out, (
        out
    )  # a refusal says why itself
    return out


def test_the_two_parts_have_two_and_four_checked_exercises():
    assert sorted(_PART1) == [1, 2] and sorted(_PART2) == [1, 2, 3, 4]
    assert _EX1.check.strip().endswith("check_split_ticks(split_ticks)")
    assert any(
        _CHECK_1B in b for b in exercises(NAME)[1].before
    )  # the search's check cell


@pytest.mark.parametrize("number", list(EX))
def test_worked_solution_passes_its_check(number):
    out = run_check(EX[number], EX[number].solution)
    assert (
        out.count("✓") == 1 and "✗" not in out and len(out.strip().splitlines()) == 1
    ), out


@pytest.mark.parametrize("number", list(EX))
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_specs_do_not_print_the_formula_or_the_reference():
    for key in ("window", "crossing", "splits"):
        spec = EX[key].spec
        assert "Reference:" not in spec and "lceil" not in spec
        # the local-layer cache may use section 1's cache per token (its spec says so): the window is its question
        assert key == "window" or "lab.kv_cache_bytes_per_token" not in spec
        assert "4GMd" not in spec and "2 \\cdot" not in spec


# ------------------------------------------------------------------------------------ warm-ups

WRONG_OLD_1 = {
    "the query heads": (
        "def cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n"
        "    return 2 * layers * q_heads * head_dim * itemsize\n",
        ["case 1", "counted the query heads"],
    ),
    "K alone": (
        "def cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n"
        "    return layers * kv_heads * head_dim * itemsize\n",
        ["case 0", "K alone"],
    ),
    "one layer": (
        "def cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n"
        "    return 2 * kv_heads * head_dim * itemsize\n",
        ["one layer"],
    ),
    "bits": (
        "def cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n"
        "    return 2 * layers * kv_heads * head_dim * itemsize * 8\n",
        ["bits"],
    ),
}
WRONG_2 = {
    "one itemsize": (
        "def intensity(G, d, M, kv_itemsize, qo_itemsize):\n"
        "    return 4 * G * M * d / ((2 * M * d + 2 * G * d) * kv_itemsize)\n",
        ["case 1", "every byte at kv_itemsize"],
    ),
    "K/V per query head": (
        "def intensity(G, d, M, kv_itemsize, qo_itemsize):\n"
        "    return 4 * G * M * d / (2 * G * M * d * kv_itemsize + 2 * G * d * qo_itemsize)\n",
        # G = qo_itemsize / kv_itemsize in a draw makes it the same number as every byte at qo_itemsize
        ["case 1", ("share one read of K and V", "every byte at qo_itemsize")],
    ),
    "no q and o": (
        "def intensity(G, d, M, kv_itemsize, qo_itemsize):\n"
        "    return 4 * G * M * d / (2 * M * d * kv_itemsize)\n",
        ["case 0", "q and o are missing"],
    ),
    "one product": (
        "def intensity(G, d, M, kv_itemsize, qo_itemsize):\n"
        "    return 2 * G * M * d / (2 * M * d * kv_itemsize + 2 * G * d * qo_itemsize)\n",
        ["half the FLOPs"],
    ),
}
_BS = "def best_splits(M, batch, heads, processors):\n"
_T = (
    "    K = -(-M // 128)\n"
    "    def t(s):\n"
    "        w = -(-batch * heads * min(s, M) // processors)\n"
    "        return w * (-(-K // s) + 1) + 1 if s > 1 else w * K\n"
)
WRONG_3 = {
    "min_splits: a second wave": (
        _BS + "    return -(-processors // (batch * heads))\n",
        ["case 0", "check your tick count"],
    ),
    "the partials and the merge left out": (
        _BS
        + "    K = -(-M // 128)\n"
        + "    def t(s):\n"
        + "        return -(-batch * heads * min(s, M) // processors) * -(-K // s)\n"
        + "    return min(range(1, K + 1), key=lambda s: (t(s), s))\n",
        ["leaves out what a split costs", "writing its partial"],
    ),
    "a search stopped at 128 splits": (
        _BS
        + _T
        + "    return min(range(1, min(K, 128) + 1), key=lambda s: (t(s), s))\n",
        ["case 3", "your search stopped before"],
    ),
    "a search stopped at M // 128 (rounded down)": (
        _BS + _T + "    return min(range(1, M // 128 + 1), key=lambda s: (t(s), s))\n",
        ["case 3", "your search stopped before", "M // 128 ="],
    ),
    "waves and chunks rounded down": (
        _BS
        + "    K = -(-M // 128)\n"
        + "    def t(s):\n"
        + "        w = max(batch * heads * min(s, M) // processors, 1)\n"
        + "        return w * (max(K // s, 1) + 1) + 1 if s > 1 else w * K\n"
        + "    return min(range(1, K + 1), key=lambda s: (t(s), s))\n",
        ["the waves rounded down"],
    ),
    "chunks of floor(T_c / splits) key blocks: the tail dropped": (
        _BS
        + _T.replace("-(-K // s)", "K // s")
        + "    return min(range(1, K + 1), key=lambda s: (t(s), s))\n",
        ["your chunks drop the tail of the cache", "⌊T_c / splits⌋", "never read"],
    ),
    "chunks of floor(M / splits) keys: the tail dropped": (
        _BS
        + _T.replace("-(-K // s)", "-(-(M // s) // 128)")
        + "    return min(range(1, K + 1), key=lambda s: (t(s), s))\n",
        ["your chunks drop the tail of the cache", "⌊M / splits⌋", "never read"],
    ),
    "ties to the most splits": (
        _BS + _T + "    return min(range(1, K + 1), key=lambda s: (t(s), -s))\n",
        ["when counts tie, take the fewest"],
    ),
    "the partials and the merge charged at 1 split too": (
        _BS
        + "    K = -(-M // 128)\n"
        + "    def t(s):\n"
        + "        w = -(-batch * heads * min(s, M) // processors)\n"
        + "        return w * (-(-K // s) + 1) + 1\n"
        + "    return min(range(1, K + 1), key=lambda s: (t(s), s))\n",
        ["case 6 (256, 1, 8, 264)", "one split writes no partials and merges nothing"],
    ),
    "the merge charged once per wave": (
        _BS
        + "    K = -(-M // 128)\n"
        + "    def t(s):\n"
        + "        w = -(-batch * heads * min(s, M) // processors)\n"
        + "        return w * (-(-K // s) + 2) if s > 1 else w * K\n"
        + "    return min(range(1, K + 1), key=lambda s: (t(s), s))\n",
        ["the merge is one small launch after the last wave, one tick in all"],
    ),
}


_CG = "import math\ndef crossing_group(ridge, d, M, kv_itemsize, qo_itemsize):\n"
WRONG_C = {
    "q and o left out (G = ridge kv / 2)": (
        _CG + "    return math.ceil(ridge * kv_itemsize / 2)\n",
        ["case 0", "leaving out q and o"],
    ),
    "rounded down": (
        _CG
        + "    room = 2 * M - ridge * qo_itemsize\n"
        + "    return max(1, int(ridge * M * kv_itemsize / room)) if room > 0 else 0\n",
        ["case 0", "just short of the ridge", "rounded up"],
    ),
    "one itemsize for all": (
        _CG
        + "    room = 2 * M - ridge * kv_itemsize\n"
        + "    return max(1, math.ceil(ridge * M * kv_itemsize / room)) if room > 0 else 0\n",
        ["case 1", "every byte at kv_itemsize"],
    ),
    "half the FLOPs": (
        _CG
        + "    room = M - ridge * qo_itemsize\n"
        + "    return max(1, math.ceil(ridge * M * kv_itemsize / room)) if room > 0 else 0\n",
        ["case 0", "half the FLOPs", "4Md per query head"],
    ),
    "K/V read per query head: never grows with G": (
        _CG + "    return 0\n",
        ["case 0", "K and V are read once per query head"],
    ),
    "a G returned where none reaches the ridge": (
        _CG
        + "    room = 2 * M - ridge * qo_itemsize\n"
        + "    return max(1, math.ceil(ridge * M * kv_itemsize / abs(room)))\n",
        ["case 2", "no group reaches this ridge", "return 0"],
    ),
}


def test_crossing_group_by_labs_intensity_is_refused():
    _fails(
        "crossing",
        "import lab\n"
        + _CG
        + "    at = (lab.decode_intensity(g, d, M, kv_itemsize) for g in range(1, 2**16))\n"
        + "    return next((g for g, x in enumerate(at, 1) if x >= ridge), 0)\n",
        "case 0",
        "lab.decode_intensity",
    )


def test_crossing_group_search_over_an_own_intensity_passes():
    out = run_check(
        EX["crossing"],
        _CG
        + "    def i(G):\n"
        + "        return 4 * G * M * d / (2 * M * d * kv_itemsize + 2 * G * d * qo_itemsize)\n"
        + "    if 2 * M <= ridge * qo_itemsize:\n"
        + "        return 0\n"
        + "    g = 1\n"
        + "    while i(g) < ridge:\n"
        + "        g += 1\n"
        + "    return g\n",
    )
    assert "✓" in out and "✗" not in out, out


def test_crossing_group_cases_are_drawn_fresh_so_a_table_fails():
    _fails(
        "crossing",
        _CG + "    return {(295.2, 128, 4096, 2, 2): 319}.get((ridge, d, M), 300)\n",
    )


_LW = "def largest_window(budget, tokens, layers, kv_heads, head_dim, itemsize):\n"
_PER = "    per = 2 * kv_heads * head_dim * itemsize\n"
WRONG_W = {
    "the global layers forgotten": (
        _LW + _PER + "    return min(tokens, budget // per // ((layers + 1) // 2))\n",
        ["case 0", ("count the global layers", "the global layers keep every token")],
    ),
    "every layer windowed": (
        _LW + _PER + "    return min(tokens, budget // per // layers)\n",
        ["case 0", "every layer windowed"],
    ),
    "the odd layers taken as local": (
        _LW
        + _PER
        + "    w = (budget // per - (layers - layers // 2) * tokens) // (layers // 2)\n"
        + "    return min(tokens, w) if w >= 1 else 0\n",
        ["case 1", "one more local layer"],
    ),
    "rounded up": (
        _LW
        + _PER
        + "    local = (layers + 1) // 2\n"
        + "    w = -(-(budget // per - (layers - local) * tokens) // local)\n"
        + "    return min(tokens, w) if w >= 1 else 0\n",
        [("rounded up", "over the budget")],
    ),
    "no cap at tokens": (
        _LW
        + _PER
        + "    local = (layers + 1) // 2\n"
        + "    w = (budget // per - (layers - local) * tokens) // local\n"
        + "    return w if w >= 1 else 0\n",
        ["case 2", "cap it at `tokens`"],
    ),
    "a window where none fits": (
        _LW
        + _PER
        + "    local = (layers + 1) // 2\n"
        + "    w = (budget // per - (layers - local) * tokens) // local\n"
        + "    return min(tokens, max(w, 1))\n",
        ["case 3", "no window fits"],
    ),
    "K alone": (
        _LW
        + "    per = kv_heads * head_dim * itemsize\n"
        + "    local = (layers + 1) // 2\n"
        + "    w = (budget // per - (layers - local) * tokens) // local\n"
        + "    return min(tokens, w) if w >= 1 else 0\n",
        ["case 0", ("K alone", "every layer keeps K and V")],
    ),
}


def test_largest_window_may_use_section_1s_cache_per_token():
    out = run_check(
        EX["window"],
        "from lab.decoding import kv_cache_bytes_per_token as kv\n"
        + _LW
        + "    local = (layers + 1) // 2\n"
        + "    w = (budget // kv(1, kv_heads, head_dim, itemsize) - (layers - local) * tokens) // local\n"
        + "    return min(tokens, w) if w >= 1 else 0\n",
    )
    assert "✓" in out and "✗" not in out, out


_CB = "def cache_bytes(tokens, layers, kv_heads, head_dim, itemsize, window):\n"
_LOCAL = "    local = (layers + 1) // 2\n"
WRONG_1 = {
    "the window ignored": (
        _CB + "    return 2 * layers * kv_heads * head_dim * itemsize * tokens\n",
        ["case 0", "every layer keeps every token"],
    ),
    "every layer windowed": (
        _CB
        + "    return 2 * layers * kv_heads * head_dim * itemsize * min(tokens, window)\n",
        ["case 0", "every layer is windowed"],
    ),
    "a full window before the sequence fills it": (
        _CB
        + _LOCAL
        + "    return 2 * kv_heads * head_dim * itemsize * (local * window + (layers - local) * tokens)\n",
        ["case 2", "shorter than the window"],
    ),
    "the odd layers taken as local": (
        _CB
        + "    local = layers // 2\n"
        + "    return 2 * kv_heads * head_dim * itemsize * (local * min(tokens, window) + (layers - local) * tokens)\n",
        ["case 1", "one more local layer"],
    ),
    "K alone": (
        _CB
        + _LOCAL
        + "    return kv_heads * head_dim * itemsize * (local * min(tokens, window) + (layers - local) * tokens)\n",
        ["case 0", "K alone"],
    ),
    "one token": (
        _CB + "    return 2 * layers * kv_heads * head_dim * itemsize\n",
        ["case 0", "one token adds"],
    ),
}


@pytest.mark.parametrize(
    "number,mistake",
    [("cache", m) for m in WRONG_1]
    + [("intensity", m) for m in WRONG_2]
    + [("splits", m) for m in WRONG_3]
    + [("crossing", m) for m in WRONG_C]
    + [("window", m) for m in WRONG_W],
)
def test_warm_ups_diagnose_planted_mistakes(number, mistake):
    source, says = {
        "cache": WRONG_1,
        "intensity": WRONG_2,
        "splits": WRONG_3,
        "crossing": WRONG_C,
        "window": WRONG_W,
    }[number][mistake]
    _fails(number, source, *says)


@pytest.mark.parametrize("mistake", WRONG_OLD_1)
def test_cache_per_token_check_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_OLD_1[mistake]
    _fails(OLD[1], source, *says)


def test_cache_bytes_may_use_section_3s_cache_per_token():
    out = run_check(
        RETIRED["cache"],
        "from lab.decoding import kv_cache_bytes_per_token as kv\n"
        + _CB
        + _LOCAL
        + "    kept = local * min(tokens, window) + (layers - local) * tokens\n"
        + "    return kv(1, kv_heads, head_dim, itemsize) * kept\n",
    )
    assert "✓" in out and "✗" not in out, out


def test_cache_bytes_spec_says_section_3s_helper_may_be_used():
    assert "lab.kv_cache_bytes_per_token" in EX["window"].spec


TABLE_2 = (
    "def intensity(G, d, M, kv_itemsize, qo_itemsize):\n"
    "    table = {(1, 128, 4096, 2, 2): 0.9995, (8, 128, 4096, 1, 2): 3.98}\n"
    "    return table.get((G, d, M, kv_itemsize, qo_itemsize), 1.0)\n"
)


def test_intensity_cases_are_drawn_fresh_so_a_table_fails():
    _fails("intensity", TABLE_2, "case 0")
    a = checks._fresh(None)[0]
    assert a is not None


def test_intensity_cases_repeat_with_the_seed(capsys):
    def wrong(G, d, M, kv, qo):
        return 1.0

    checks.check_step_intensity(wrong, seed=7)
    first = capsys.readouterr().out
    checks.check_step_intensity(wrong, seed=7)
    assert capsys.readouterr().out == first and "seed=7" in first
    checks.check_step_intensity(wrong, seed=8)
    assert capsys.readouterr().out != first


def test_intensity_by_labs_own_answer_is_refused():
    _fails(
        "intensity",
        "import lab\n"
        "def intensity(G, d, M, kv_itemsize, qo_itemsize):\n"
        "    if kv_itemsize == qo_itemsize:\n"
        "        return lab.decode_intensity(G, d, M, kv_itemsize)\n"
        "    return 4 * G * M * d / (2 * M * d * kv_itemsize + 2 * G * d * qo_itemsize)\n",
        "case 0",
        "lab.decode_intensity",
    )


def test_best_splits_ties_to_the_most_splits_says_so_on_every_seed(capsys):
    ns: dict = {}
    exec(WRONG_3["ties to the most splits"][0], ns)
    for seed in range(200):  # every run's cases hold a tie (the short cache's)
        checks.check_best_splits(ns["best_splits"], seed=seed)
        out = capsys.readouterr().out
        assert "✗" in out and "when counts tie, take the fewest" in out, (seed, out)


def test_best_splits_with_the_batch_forgotten_says_so(capsys):
    def best_splits(M, batch, heads, processors):
        K = -(-M // 128)

        def t(s):
            w = -(-heads * min(s, M) // processors)
            return w * (-(-K // s) + 1) + 1 if s > 1 else w * K

        return min(range(1, K + 1), key=lambda s: (t(s), s))

    checks.check_best_splits(
        best_splits, seed=0
    )  # a seed whose batch case tells them apart
    out = capsys.readouterr().out
    assert "✗" in out and "each sequence of the batch" in out, out


def test_best_splits_that_fills_one_wave_says_the_fastest_count_need_not(capsys):
    def best_splits(M, batch, heads, processors):
        return min(-(-M // 128), max(1, processors // (batch * heads)))

    checks.check_best_splits(best_splits, seed=4)  # 28 splits of 228 slots tie with 27
    out = capsys.readouterr().out
    assert "✗" in out and "filling one wave is not the rule" in out, out
    checks.check_best_splits(best_splits, seed=1)
    out = capsys.readouterr().out
    assert "when counts tie" in out and "filling one wave is not the rule" in out, out


def test_best_splits_by_the_checks_own_oracle_is_refused():
    _fails(
        "splits",
        "import lab\n"
        "def best_splits(M, batch, heads, processors):\n"
        "    def t(s):\n"
        "        return lab.decode_schedule(M, batch=batch, heads=heads, splits=s, processors=processors, per_processor=1)['steps']\n"
        "    return min(range(1, M // 128 + 2), key=lambda s: (t(s), s))\n",
        "case 0",
        "lab.decode_schedule",
    )


def test_best_splits_by_the_refilled_schedule_is_refused():
    _fails(
        "splits",
        "import lab\n"
        "def best_splits(M, batch, heads, processors):\n"
        "    def t(s):\n"
        "        return lab.decoding.refill_ticks(M, batch=batch, heads=heads, splits=s, processors=processors, per_processor=1)\n"
        "    return min(range(1, M // 128 + 2), key=lambda s: (t(s), s))\n",
        "case 0",
        "lab.decoding.refill_ticks",
    )


def test_best_splits_cases_are_drawn_fresh_so_a_table_fails():
    _fails(
        "splits",
        "def best_splits(M, batch, heads, processors):\n"
        "    return {(32768, 1, 8, 132): 16}.get((M, batch, heads, processors), 16)\n",
    )


def test_min_splits_cases_drawn_fresh_and_oracle_refused(capsys):
    checks.check_min_splits(lambda B, H, P: -(-P // (B * H)), seed=1)
    assert "✓" in capsys.readouterr().out
    import lab as _lab

    def cheat(B, H, P):
        return next(
            s
            for s in range(1, P + 1)
            if _lab.decode_schedule(
                4096, batch=B, heads=H, splits=s, processors=P, per_processor=1
            )["busy"]
            == P
        )

    checks.check_min_splits(cheat)
    out = capsys.readouterr().out
    assert "✗" in out and "lab.decode_schedule" in out, out


# ------------------------------------------------------------------------------------ part 2, exercise 3: append_token

AT_HEAD = """
def append_token(cache, free, b, k_new, v_new):
    S, row = cache.page_size, cache.block_table[b]
    length = int(cache.lengths[b])
    block, slot = divmod(length, S)
"""
AT_TAKE = """
if slot == 0:
    row[block] = free.pop()
"""
AT_WRITE = """
page = row[block]
cache.pages_k[page, :, slot] = k_new
cache.pages_v[page, :, slot] = v_new
"""
AT_GROW = """
cache.lengths[b] = length + 1
"""


def _at(take=AT_TAKE, write=AT_WRITE, grow=AT_GROW, head=AT_HEAD) -> str:
    body = "".join(textwrap.indent(_src(x), "    ") for x in (take, write, grow))
    return _src(head) + body


WRONG_AT = {
    "a page one token early (>= for >)": (
        _at(
            take="""
            used = int((row >= 0).sum())
            if length + 1 >= used * S:
                row[used] = free.pop()
            """
        ),
        ["case 1", "a page taken one token early"],
    ),
    "a page one token late (> for >=)": (
        _at(
            take="""
            used = int((row >= 0).sum())
            if length > used * S:
                row[used] = free.pop()
            """
        ),
        ["case 2", "a page taken one token late"],
    ),
    "a page for every token": (
        _at(take="row[block] = free.pop()\n"),
        ["case 0", "a page taken for every token"],
    ),
    "a new sequence left without a page": (
        _at(
            take="""
            if slot == 0 and length > 0:
                row[block] = free.pop()
            """
        ),
        ["case 4", "a new sequence (length 0) owns no page"],
    ),
    "the length not updated": (
        _at(grow=""),
        ["case 0", "length not updated"],
    ),
    "every sequence's length grown": (
        _at(grow="cache.lengths[:] += 1\n"),
        ["case 0", "only sequence b = 0 grows"],
    ),
    "the free list not popped": (
        _at(
            take="""
            if slot == 0:
                row[block] = free[-1]
            """
        ),
        ["case 2", "the free list not popped"],
    ),
    "a page popped for every token, recorded when needed": (
        _at(
            take="""
            page = free.pop()
            if slot == 0:
                row[block] = page
            """
        ),
        ["case 0", "leave free as it is when no page is taken"],
    ),
    "the new page recorded one entry too far": (
        _at(
            take="""
            if slot == 0:
                row[block + 1] = free.pop()
            """
        ),
        ["case 2", "record the new page at entry"],
    ),
    "the slot of the grown length: a stale slot": (
        _at(
            head="""
            def append_token(cache, free, b, k_new, v_new):
                S, row = cache.page_size, cache.block_table[b]
                cache.lengths[b] += 1
                length = int(cache.lengths[b])
                block, slot = divmod(length, S)
            """,
            grow="",
        ),
        ["case 0", "a stale slot past the token's place"],
    ),
    "the slot before the token's: a slot in use": (
        _at(
            write="""
            page = row[block]
            cache.pages_k[page, :, (length - 1) % S] = k_new
            cache.pages_v[page, :, (length - 1) % S] = v_new
            """
        ),
        ["case 0", "a slot in use: it holds the sequence's token"],
    ),
    "block_row[-1] taken for the last page": (
        _at(
            write="""
            page = row[-1]
            cache.pages_k[page, :, slot] = k_new
            cache.pages_v[page, :, slot] = v_new
            """
        ),
        ["block_row[-1] is the row's last entry", "the pool's last page"],
    ),
    "v not written": (
        _at(
            write="""
            page = row[block]
            cache.pages_k[page, :, slot] = k_new
            """
        ),
        ["case 0", "v_new is nowhere in pages_v"],
    ),
    "the position as the slot": (
        _at(
            write="""
            page = row[block]
            cache.pages_k[page, :, length] = k_new
            cache.pages_v[page, :, length] = v_new
            """
        ),
        ["case 0", "raised IndexError", "slots, 0 to page_size - 1"],
    ),
    "a free page written besides: the next page cleared ahead of time": (
        _at(
            write="""
            page = row[block]
            cache.pages_k[page, :, slot] = k_new
            cache.pages_v[page, :, slot] = v_new
            if slot == S - 1:  # the page is full now: ready the next one
                cache.pages_k[free[-1]] = 0
                cache.pages_v[free[-1]] = 0
            """
        ),
        [
            "case 1",
            "a write into a page the sequence does not own",
            "a free page: no sequence owns it",
        ],
    ),
    "a new cache returned, the given one untouched": (
        """
        def append_token(cache, free, b, k_new, v_new):
            lengths = cache.lengths.copy()
            lengths[b] += 1
            return cache._replace(lengths=lengths)
        """,
        ["case 0", "the cache is unchanged", "changed in place"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_AT)
def test_append_token_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_AT[mistake]
    _fails("append", source, *says)


def test_append_token_hints_each_name_their_own_mistake():
    """The phrase each planted mistake is tested for is said for that mistake only: a check without that hint
    would fail its test."""
    outs = {m: run_check(EX["append"], _src(s)) for m, (s, _) in WRONG_AT.items()}
    for m, (_, says) in WRONG_AT.items():
        phrase = says[-1]
        assert [n for n, out in outs.items() if phrase in out] == [m], (m, phrase)


@pytest.mark.parametrize("seed", range(12))
def test_append_token_catches_a_write_through_the_minus_one_entry(capsys, seed):
    """The token written through block_row's -1 entry before the page is taken (the pool's last page),
    then again in its own page: the right slot holds it, so only a look at the pages the sequence does
    not own catches it, free or another's, on every draw."""
    ns = {}
    source = _at(
        write="""
        cache.pages_k[row[block], :, slot] = k_new  # row[block] is -1 before a page is taken
        cache.pages_v[row[block], :, slot] = v_new
        if slot == 0:
            row[block] = free.pop()
            cache.pages_k[row[block], :, slot] = k_new
            cache.pages_v[row[block], :, slot] = v_new
        """,
        take="",
    )
    exec(source, ns)
    paged.check_append_token(ns["append_token"], seed=seed)
    out = capsys.readouterr().out
    assert "✗" in out and "before it held a page" in out and "pages_k[-1]" in out, out


@pytest.mark.parametrize(
    "source",
    [
        "from lab.checks.paged import _append as append_token\n",
        "import lab\n"
        + _at(
            write="""
            lab.gather_pages(cache.pages_k, row, max(length, 1))
            page = row[block]
            cache.pages_k[page, :, slot] = k_new
            cache.pages_v[page, :, slot] = v_new
            """
        ),
        "import torch\n"
        + _at(
            write="""
            page = row[block]
            torch.from_numpy(cache.pages_k)[page, :, slot] = torch.from_numpy(k_new)
            cache.pages_v[page, :, slot] = v_new
            """
        ),
    ],
    ids=["the check's reference", "lab.gather_pages", "torch"],
)
def test_append_token_by_labs_answer_or_torch_is_refused(source):
    out = _fails("append", source, "case 0")
    assert "proves nothing" in out, out
    assert any(
        w in out for w in ("lab.checks.paged._append", "lab.gather_pages", "torch")
    ), out


@pytest.mark.parametrize(
    "change",
    [
        (
            "row[block] = free.pop()",
            "row[block] = free.pop(0)",
        ),  # any free page will do
        (
            "row[block] = free.pop()",
            "row[block] = free.pop()\n        cache.pages_k[row[block]] = 0.0",
        ),  # the new page's stale slots cleared first
        ("cache.lengths[b] = length + 1", "cache.lengths[b] += 1\n    return None"),
    ],
    ids=["free.pop(0)", "the new page cleared", "return None"],
)
def test_append_token_other_honest_forms_pass(change):
    source = _at().replace(*change)
    assert change[1] in source
    out = run_check(EX["append"], source)
    assert out.count("✓") == 1 and "✗" not in out, out


def test_append_token_cases_hold_what_the_check_says():
    for seed in range(5):
        cache, free, steps = paged._append_trace(seed)
        S = cache.page_size
        assert S >= 4 and cache.pages_v.shape[-1] == cache.pages_k.shape[-1] + 1
        lengths = cache.lengths.copy()
        slots = []
        for b, _, _ in steps[:5]:
            slots.append((b, int(lengths[b]) % S, int(lengths[b])))
            lengths[b] += 1
        # mid-page, the last slot, after a full page; a sequence with one full page; a new sequence
        assert slots == [
            (0, S - 2, 2 * S - 2),
            (0, S - 1, 2 * S - 1),
            (0, 0, 2 * S),
            (1, 0, S),
            (2, 0, 0),
        ]
        owned = [int(p) for p in cache.block_table[cache.block_table >= 0]]
        assert sorted(owned + free) == list(
            range(cache.pages_k.shape[0])
        )  # every page once
        assert len(free) >= 3 and len(steps) == 17


def test_append_token_cases_are_drawn_fresh_and_repeat_with_the_seed(capsys):
    assert paged._append_trace(1)[0].pages_k.shape != paged._append_trace(2)[
        0
    ].pages_k.shape or not (
        np.array_equal(paged._append_trace(1)[2][0][1], paged._append_trace(2)[2][0][1])
    )
    ns = {"np": np}
    exec(WRONG_AT["the length not updated"][0], ns)
    paged.check_append_token(ns["append_token"], seed=4)
    first = capsys.readouterr().out
    paged.check_append_token(ns["append_token"], seed=4)
    assert (
        capsys.readouterr().out == first and "seed=4" in first and "✗ case 0" in first
    )


def test_append_token_spec_does_not_give_the_rule():
    spec = EX["append"].spec
    assert (
        "% page_size" not in spec
        and "// page_size" not in spec
        and "divmod" not in spec
    )
    assert (
        "free.pop()" in spec
    )  # how to take a page is given; when to take one is the exercise


# ------------------------------------------------------------------------------------ exercise 4: paged decode

PD = "def paged_decode(q, pages_k, pages_v, block_row, length):\n"
PD_HEAD = """
def paged_decode(q, pages_k, pages_v, block_row, length):
    Hq, N, d = q.shape
    Hkv, S, dv = pages_k.shape[1], pages_k.shape[2], pages_v.shape[3]
    qg = q.reshape(Hkv, Hq // Hkv * N, d)
    m = np.full(qg.shape[:2], -np.inf)
    l, acc = np.zeros(qg.shape[:2]), np.zeros(qg.shape[:2] + (dv,))
"""
PD_STEP = """
        s = qg @ np.swapaxes(pages_k[page, :, :valid], 1, 2) / np.sqrt(d)
        m_new = np.maximum(m, s.max(axis=2))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[..., None])
        l = alpha * l + p.sum(axis=2)
        acc = alpha[..., None] * acc + p @ pages_v[page, :, :valid]
        m = m_new
"""
PD_TAIL = """
    return (acc / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)
"""


def _pd(loop: str, step: str = PD_STEP, tail: str = PD_TAIL) -> str:
    return (
        _src(PD_HEAD)
        + textwrap.indent(_src(loop), "    ")
        + textwrap.indent(_src(step), "        ")
        + textwrap.indent(_src(tail), "    ")
    )


GOOD_LOOP = """
for i in range(-(-length // S)):
    page, valid = block_row[i], min(S, length - i * S)
"""

WRONG_PD = {
    "stale slots read": (
        _pd("""
        for i in range(-(-length // S)):
            page, valid = block_row[i], S
        """),
        ["case 0", "every slot of the last page", "stale"],
    ),
    "every entry of the row read, -1 included": (
        _pd("""
        for page in block_row:
            valid = S
        """),
        ["case 0", "entries past the sequence's last block are -1"],
    ),
    "page i for logical block i": (
        _pd("""
        for i in range(-(-length // S)):
            page, valid = i, min(S, length - i * S)
        """),
        ["case 0", "you read page i for logical block i"],
    ),
    "pages in the wrong order": (
        _pd("""
        for i, page in enumerate(sorted(block_row[: -(-length // S)])):
            valid = min(S, length - i * S)
        """),
        # sorted physical pages are the identity order when a draw puts sequence 0 on pages 0..n-1
        [("the pages in the wrong order", "you read page i for logical block i")],
    ),
    "running max not rescaled": (
        _pd(
            GOOD_LOOP,
            PD_STEP.replace("alpha = np.exp(m - m_new)", "alpha = np.ones_like(m)"),
        ),
        ["rescaled by e^(m_old - m_new)"],
    ),
    "alpha inverted": (
        _pd(GOOD_LOOP, PD_STEP.replace("np.exp(m - m_new)", "np.exp(m_new - m)")),
        ["α is inverted", "e^(+inf): the NaN"],
    ),
    "alpha inverted, the first page guarded (finite, no NaN)": (
        _pd(
            GOOD_LOOP,
            PD_STEP.replace(
                "alpha = np.exp(m - m_new)",
                "alpha = np.exp(m_new - m) if i else np.zeros_like(m)",
            ),
        ),
        ["case 0", "α is inverted", "e^(m_new - m_old) ≥ 1", "e^(m_old - m_new) ≤ 1"],
    ),
    "alpha inverted, -inf masked with np.where": (
        _pd(
            GOOD_LOOP,
            PD_STEP.replace(
                "alpha = np.exp(m - m_new)",
                "alpha = np.where(np.isfinite(m), np.exp(m_new - m), 1.0)",
            ),
        ),
        ["case 0", "α is inverted", "e^(m_old - m_new) ≤ 1"],
    ),
    "alpha missing on acc": (
        _pd(GOOD_LOOP, PD_STEP.replace("alpha[..., None] * acc", "acc")),
        ["rescaled l but not acc"],
    ),
    "the mask one slot too many": (
        _pd("""
        for i in range(-(-length // S)):
            page, valid = block_row[i], min(S, length - i * S + 1)
        """),
        ["case 0", "one slot too many"],
    ),
    "the mask one slot short": (
        _pd("""
        for i in range(-(-length // S)):
            page, valid = block_row[i], min(S, length - i * S - 1)
        """),
        ["case 0", "drops the last valid token"],
    ),
    "the partial last page dropped": (
        _pd("""
        for i in range(length // S):
            page, valid = block_row[i], S
        """),
        ["case 0", "dropped the partly filled last page"],
    ),
    "lse in base 2": (
        _pd(
            GOOD_LOOP,
            tail=PD_TAIL.replace("(m + np.log(l))", "((m + np.log(l)) / np.log(2))"),
        ),
        ["case 0", "lse is in base 2"],
    ),
    "lse mixing bases": (
        _pd(GOOD_LOOP, tail=PD_TAIL.replace("np.log(l)", "np.log2(l)")),
        ["case 0", "mixes bases"],
    ),
    "N = 1 assumed": (
        _pd(
            GOOD_LOOP,
            tail="""
        o, lse = (acc / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)
        return np.repeat(o[:, :1], N, axis=1), np.repeat(lse[:, :1], N, axis=1)
        """,
        ),
        ["case 3", "answer of the first"],
    ),
    "each page against its own max": (
        _pd(
            GOOD_LOOP,
            PD_STEP.replace(
                "m_new = np.maximum(m, s.max(axis=2))", "m_new = s.max(axis=2)"
            ).replace("alpha = np.exp(m - m_new)", "alpha = np.ones_like(m)"),
        ),
        ["case 0", "that page's own max"],
    ),
    "a page's own max, rescaled": (
        _pd(
            GOOD_LOOP,
            PD_STEP.replace(
                "m_new = np.maximum(m, s.max(axis=2))", "m_new = s.max(axis=2)"
            ),
        ),
        ["case 4", "NaN in yours", "m is the page's own max, not the running one"],
    ),
    "lse without m": (
        _pd(GOOD_LOOP, tail=PD_TAIL.replace("(m + np.log(l))", "np.log(l)")),
        ["case 0", "lse is missing the running max"],
    ),
    "no scale": (
        _pd(GOOD_LOOP, PD_STEP.replace(" / np.sqrt(d)", "")),
        ["case 0", "scale 1/√d is missing"],
    ),
    "h % Hkv": (
        _pd(GOOD_LOOP).replace("def paged_decode(", "def _one_head(")
        + PD
        + "    Hkv = pages_k.shape[1]\n"
        + "    parts = [\n"
        + "        _one_head(q[h : h + 1], pages_k[:, h % Hkv : h % Hkv + 1],\n"
        + "                  pages_v[:, h % Hkv : h % Hkv + 1], block_row, length)\n"
        + "        for h in range(q.shape[0])\n"
        + "    ]\n"
        + "    return np.concatenate([o for o, _ in parts]), np.concatenate([x for _, x in parts])\n",
        ["not h % Hkv"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_PD)
def test_paged_decode_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_PD[mistake]
    _fails("paged", source, *says)


def test_paged_decode_without_the_max_overflows_and_says_so():
    out = _fails(
        "paged",
        PD
        + "    n = -(-length // pages_k.shape[2])\n"
        + "    ks = [pages_k[block_row[i]] for i in range(n)]\n"
        + "    vs = [pages_v[block_row[i]] for i in range(n)]\n"
        + "    k, v = np.concatenate(ks, 1)[:, :length], np.concatenate(vs, 1)[:, :length]\n"
        + "    Hq, N, d = q.shape\n"
        + "    qg = q.reshape(k.shape[0], -1, d)\n"
        + "    e = np.exp(qg @ k.transpose(0, 2, 1) / np.sqrt(d))\n"
        + "    o = (e @ v) / e.sum(-1)[..., None]\n"
        + "    return o.reshape(Hq, N, -1), np.log(e.sum(-1)).reshape(Hq, N)\n",
        "scores in the thousands",
        "subtract the running max",
    )
    assert "NaN" in out or "inf" in out, out


@pytest.mark.parametrize(
    "how",
    ["a contiguous copy", "all M scores at once"],
)
def test_paged_decode_that_copies_the_cache_fails_on_memory(how):
    gather = (
        "    n = -(-length // pages_k.shape[2])\n"
        "    k = np.concatenate([pages_k[block_row[i]] for i in range(n)], 1)[:, :length]\n"
        "    v = np.concatenate([pages_v[block_row[i]] for i in range(n)], 1)[:, :length]\n"
    )
    scores = (
        "    S, n = pages_k.shape[2], -(-length // pages_k.shape[2])\n"
        "    parts = [pages_k[block_row[i], :, : min(S, length - i * S)] for i in range(n)]\n"
        "    vparts = [pages_v[block_row[i], :, : min(S, length - i * S)] for i in range(n)]\n"
        "    qg = q.reshape(pages_k.shape[1], -1, q.shape[-1])\n"
        "    s = np.concatenate([qg @ p.transpose(0, 2, 1) for p in parts], -1) / np.sqrt(q.shape[-1])\n"
        "    m = s.max(-1, keepdims=True)\n"
        "    e = np.exp(s - m)\n"
        "    o = sum(e[..., i * S : i * S + p.shape[1]] @ p for i, p in enumerate(vparts))\n"
        "    l = e.sum(-1)\n"
        "    return (o / l[..., None]).reshape(q.shape[0], q.shape[1], -1), (m[..., 0] + np.log(l)).reshape(q.shape[:2])\n"
    )
    full = (
        gather
        + "    qg = q.reshape(k.shape[0], -1, q.shape[-1])\n"
        + "    s = qg @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])\n"
        + "    m = s.max(-1, keepdims=True)\n"
        + "    e = np.exp(s - m)\n"
        + "    o, l = e @ v, e.sum(-1)\n"
        + "    return (o / l[..., None]).reshape(q.shape[0], q.shape[1], -1), (m[..., 0] + np.log(l)).reshape(q.shape[:2])\n"
    )
    body = full if how == "a contiguous copy" else scores
    _fails(
        "paged",
        PD + body,
        "case 7",
        "the values agree, but your code held",
        "running (m, l, acc)",
    )


@pytest.mark.parametrize(
    "source",
    [
        "import lab\n"
        + PD
        + "    o, lse = lab.decode_paged(q[None], pages_k, pages_v, np.asarray(block_row)[None], np.array([length]))\n    return o[0], lse[0]\n",
        "from lab.decoding import gather_pages as g\nfrom lab import attention_reference as ref\n"
        + PD
        + "    return ref(q, g(pages_k, block_row, length), g(pages_v, block_row, length))\n",
        "import torch\n" + PD + "    n = -(-length // pages_k.shape[2])\n"
        "    k = torch.tensor(np.concatenate([pages_k[block_row[i]] for i in range(n)], 1)[:, :length])\n"
        "    v = torch.tensor(np.concatenate([pages_v[block_row[i]] for i in range(n)], 1)[:, :length])\n"
        "    o = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), k, v, enable_gqa=True)\n"
        "    return o.numpy(), np.zeros(q.shape[:2])\n",
    ],
    ids=["lab.decode_paged", "gather and reference", "torch"],
)
def test_paged_decode_by_labs_answer_or_torch_is_refused(source):
    out = _fails("paged", source, "case 0")
    assert "proves nothing" in out or "torch" in out or "lab." in out, out


def test_paged_decode_in_float32_passes_at_float32_tolerance():
    source = (
        _pd(GOOD_LOOP)
        .replace(
            "    qg = q.reshape(Hkv, Hq // Hkv * N, d)\n",
            "    qg = q.reshape(Hkv, Hq // Hkv * N, d).astype(np.float32)\n",
        )
        .replace("[page, :, :valid]", "[page, :, :valid].astype(np.float32)")
    )
    source = source.replace(
        "    return (acc / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)",
        "    o, lse = (acc / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)\n"
        "    return o.astype(np.float32), lse.astype(np.float32)",
    )
    assert "astype(np.float32), lse" in source
    source = source.replace(
        "np.zeros(qg.shape[:2])", "np.zeros(qg.shape[:2], np.float32)"
    )
    source = source.replace(
        "np.zeros(qg.shape[:2] + (dv,))", "np.zeros(qg.shape[:2] + (dv,), np.float32)"
    )
    out = run_check(EX["paged"], source)
    assert "✓" in out, out


def test_paged_decode_repeating_each_page_for_the_group_passes_on_memory():
    source = (
        _pd(GOOD_LOOP)
        .replace(
            "s = qg @ np.swapaxes(pages_k[page, :, :valid], 1, 2) / np.sqrt(d)",
            "kr = np.repeat(pages_k[page, :, :valid], Hq // Hkv, axis=0)  # a page per query head\n"
            "        vr = np.repeat(pages_v[page, :, :valid], Hq // Hkv, axis=0)\n"
            "        s = (q @ np.swapaxes(kr, 1, 2) / np.sqrt(d)).reshape(Hkv, -1, valid)",
        )
        .replace(
            "p @ pages_v[page, :, :valid]",
            "(p.reshape(Hq, N, valid) @ vr).reshape(Hkv, -1, dv)",
        )
    )
    out = run_check(EX["paged"], source)
    assert "✓" in out, out


def test_paged_cases_hold_what_their_labels_say():
    cases = paged._decode_cases(3)
    labels = [c[0] for c in cases]
    part = cases[0]
    assert (
        part[5] % part[2].shape[2] and "partial" in labels[0]
    )  # a partly filled last page
    assert cases[1][5] % cases[1][2].shape[2] == 0 and cases[2][5] == 1
    big = cases[4]
    s = big[1] @ np.swapaxes(np.repeat(big[6], 2, axis=0), 1, 2) / np.sqrt(8)
    assert np.abs(s).max() > 710  # e^s overflows float64 there
    for _, _, pk, _, row, length, _, _ in cases:
        n = -(-length // pk.shape[2])
        assert sorted(row[:n].tolist()) != list(range(n)) or n == 1  # pages scattered
        assert (row[n:] == -1).all() and len(set(row[:n].tolist())) == n
    last = cases[-1]
    assert last[1].shape[0] == 16 and last[6].shape[0] == 1 and last[5] == 16000


# ------------------------------------------------------------------------------------ exercise 4: the build

GOOD_CHUNK = EX["split"].solution.split("def split_decode")[0]
GOOD_SPLIT = "def split_decode" + EX["split"].solution.split("def split_decode")[1]
CHUNK_HEAD = """
def decode_chunk(q, k_c, v_c):
    Hq, N, d = q.shape
    Hkv, Mc, dv = v_c.shape
    G = Hq // Hkv
"""
SPLIT_HEAD = """
def split_decode(q, k, v, splits):
    M = k.shape[1]
    edges = [M * c // splits for c in range(splits + 1)]
    parts = [decode_chunk(q, k[:, j0:j1], v[:, j0:j1]) for j0, j1 in zip(edges[:-1], edges[1:])]
    O = np.stack([o for o, _ in parts])
    L = np.stack([lse for _, lse in parts])
"""


def _chunk(body: str) -> str:
    return _src(CHUNK_HEAD) + textwrap.indent(_src(body), "    ") + "\n" + GOOD_SPLIT


def _split(body: str) -> str:
    return GOOD_CHUNK + _src(SPLIT_HEAD) + textwrap.indent(_src(body), "    ")


SAFE_CHUNK_TAIL = """
    if Mc == 0:
        return np.zeros((Hq, N, dv)), np.full((Hq, N), -np.inf)
    m = s.max(axis=-1)
    p = np.exp(s - m[..., None])
    l = p.sum(axis=-1)
    return ((p @ v_c) / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)
"""
MERGE = """
    m = L.max(axis=0)
    w = np.exp(L - m)
    return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[..., None], m + np.log(w.sum(axis=0))
"""

WRONG_4 = {
    "merge: weights inverted": (
        _split("""
        lo = L.min(axis=0)
        w = np.exp(lo - L)
        lse = np.logaddexp.reduce(L, axis=0)
        return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[..., None], lse
    """),
        ["split_decode: ✗ case 0", "your weights are inverted"],
    ),
    "merge: running merge rescaled by the wrong lse": (
        _split("""
        o, lse = O[0], L[0]
        for c in range(1, len(O)):
            new = np.logaddexp(lse, L[c])
            o = o * np.exp(L[c] - new)[..., None] + O[c] * np.exp(lse - new)[..., None]
            lse = new
        return o, lse
    """),
        ["split_decode: ✗ case 0", "rescales by the wrong lse"],
    ),
    "merge: plain average of the chunks' o": (
        _split("""
        return O.mean(axis=0), np.logaddexp.reduce(L, axis=0)
    """),
        ["split_decode: ✗ case 0", "o (element 0)", "rtol 1e-09", "plain average"],
    ),
    "merge: exp(lse) without the max": (
        _split("""
        w = np.exp(L)
        return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[..., None], np.log(w.sum(axis=0))
    """),
        ["scores in the thousands", "NaN", "subtract the largest lse_c"],
    ),
    "merge: not renormalized": (
        _split("""
        m = L.max(axis=0)
        w = np.exp(L - m)
        return (w[..., None] * O).sum(axis=0), m + np.log(w.sum(axis=0))
    """),
        ["o (element 0)", "not renormalized"],
    ),
    "merge: lse is the largest lse_c": (
        _split("""
        m = L.max(axis=0)
        w = np.exp(L - m)
        return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[..., None], m
    """),
        ["lse (element 1)", "largest lse_c"],
    ),
    "merge: the first chunk's lse as the shift": (
        _split("""
        w = np.exp(L - L[0])
        return (w[..., None] * O).sum(axis=0) / w.sum(axis=0)[..., None], L[0] + np.log(w.sum(axis=0))
    """),
        ["more splits than keys", "NaN", "must weigh exactly 0"],
    ),
    "split: the last partial chunk dropped": (
        GOOD_CHUNK
        + _src("""
        def split_decode(q, k, v, splits):
            c = k.shape[1] // splits
            parts = [decode_chunk(q, k[:, i * c:(i + 1) * c], v[:, i * c:(i + 1) * c]) for i in range(splits)]
            O = np.stack([o for o, _ in parts])
            L = np.stack([lse for _, lse in parts])
    """)
        + textwrap.indent(_src(MERGE), "    "),
        [
            "case 1",
            "o (element 0)",
            "keys 48..49 never reached decode_chunk",
            "not a multiple of 4",
        ],
    ),
    "split: empty chunks skipped": (
        GOOD_CHUNK
        + _src("""
        def split_decode(q, k, v, splits):
            c = -(-k.shape[1] // splits)
            parts = [decode_chunk(q, k[:, j:j + c], v[:, j:j + c]) for j in range(0, k.shape[1], c)]
            O = np.stack([o for o, _ in parts])
            L = np.stack([lse for _, lse in parts])
    """)
        + textwrap.indent(_src(MERGE), "    "),
        [
            "case 2",
            "the values agree",
            "called 3 times for splits = 5",
            "still a work item",
        ],
    ),
    "split: the scores recomputed over all M keys": (
        GOOD_CHUNK
        + _src("""
        def split_decode(q, k, v, splits):
            M = k.shape[1]
            edges = [M * c // splits for c in range(splits + 1)]
            parts = [decode_chunk(q, k[:, j0:j1], v[:, j0:j1]) for j0, j1 in zip(edges[:-1], edges[1:])]
            Hq, N, d = q.shape
            s = q.reshape(k.shape[0], -1, d) @ np.swapaxes(k, 1, 2) / np.sqrt(d)    # all M scores at once
            m = s.max(axis=-1)
            p = np.exp(s - m[..., None])
            l = p.sum(axis=-1)
            return ((p @ v) / l[..., None]).reshape(Hq, N, -1), (m + np.log(l)).reshape(Hq, N)
    """),
        ["case 0", "the values agree", "changed on purpose", "do not recompute"],
    ),
    "split: one call with every key": (
        GOOD_CHUNK
        + _src("""
        def split_decode(q, k, v, splits):
            return decode_chunk(q, k, v)
    """),
        ["the values agree", "called 1 time for splits = 4"],
    ),
    "split: K repeated before chunking": (
        GOOD_CHUNK
        + _src("""
        def split_decode(q, k, v, splits):
            G = q.shape[0] // k.shape[0]
            k, v = np.repeat(k, G, axis=0), np.repeat(v, G, axis=0)
            M = k.shape[1]
            edges = [M * c // splits for c in range(splits + 1)]
            parts = [decode_chunk(q, k[:, j0:j1], v[:, j0:j1]) for j0, j1 in zip(edges[:-1], edges[1:])]
            O = np.stack([o for o, _ in parts])
            L = np.stack([lse for _, lse in parts])
    """)
        + textwrap.indent(_src(MERGE), "    "),
        ["the values agree", "received k_c of shape (4, 12, 8)", "K repeated"],
    ),
    "split: the course's flash_decoding": (
        GOOD_CHUNK
        + _src("""
        def split_decode(q, k, v, splits):
            return lab.flash_decoding(q, k, v, splits=splits)
    """),
        ["calls lab.flash_decoding"],
    ),
    "chunk: NaN in an empty chunk": (
        _chunk("""
        s = q.reshape(Hkv, G * N, d) @ np.swapaxes(k_c, 1, 2) / np.sqrt(d)
        m = s.max(axis=-1, initial=-np.inf)
        p = np.exp(s - m[..., None])
        l = p.sum(axis=-1)
        return ((p @ v_c) / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)
    """),
        [
            "decode_chunk: ✗ case 3",
            "an empty chunk",
            "o_c (element 0)",
            "NaN",
            "no mass",
        ],
    ),
    "chunk: the max of an empty chunk": (
        _chunk("""
        s = q.reshape(Hkv, G * N, d) @ np.swapaxes(k_c, 1, 2) / np.sqrt(d)
        m = s.max(axis=-1)
        p = np.exp(s - m[..., None])
        l = p.sum(axis=-1)
        return ((p @ v_c) / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)
    """),
        [
            "decode_chunk: ✗ case 3 (q (4, 1, 8), k_c (2, 0, 8)",
            "raised ValueError",
            "no mass",
        ],
    ),
    "chunk: query head h reads K/V head h % Hkv": (
        _chunk("""
        if Mc == 0:
            return np.zeros((Hq, N, dv)), np.full((Hq, N), -np.inf)
        s = q.reshape(G, Hkv, N, d) @ np.swapaxes(k_c, 1, 2)[None] / np.sqrt(d)   # head g*Hkv + i reads K/V head i
        m = s.max(axis=-1)
        p = np.exp(s - m[..., None])
        l = p.sum(axis=-1)
        return ((p @ v_c[None]) / l[..., None]).reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)
    """),
        ["decode_chunk: ✗ case 0", "o_c (element 0)", "h // G", "not h % Hkv"],
    ),
    "chunk: no max subtracted": (
        _chunk("""
        if Mc == 0:
            return np.zeros((Hq, N, dv)), np.full((Hq, N), -np.inf)
        s = q.reshape(Hkv, G * N, d) @ np.swapaxes(k_c, 1, 2) / np.sqrt(d)
        p = np.exp(s)
        l = p.sum(axis=-1)
        return ((p @ v_c) / l[..., None]).reshape(Hq, N, dv), np.log(l).reshape(Hq, N)
    """),
        ["case 5", "scores in the thousands", "NaN", "overflows"],
    ),
    "chunk: lse_c without the max": (
        _chunk(
            """
        s = q.reshape(Hkv, G * N, d) @ np.swapaxes(k_c, 1, 2) / np.sqrt(d)
    """
            + SAFE_CHUNK_TAIL.replace("(m + np.log(l))", "np.log(l)")
        ),
        ["lse_c (element 1)", "missing the max"],
    ),
    "chunk: no 1/sqrt(d)": (
        _chunk(
            """
        s = q.reshape(Hkv, G * N, d) @ np.swapaxes(k_c, 1, 2)
    """
            + SAFE_CHUNK_TAIL
        ),
        ["o_c (element 0)", "1/√d is missing"],
    ),
    "chunk: K repeated for every query head": (
        _chunk("""
        k_r, v_r = np.repeat(k_c, G, axis=0), np.repeat(v_c, G, axis=0)
        if Mc == 0:
            return np.zeros((Hq, N, dv)), np.full((Hq, N), -np.inf)
        s = q @ np.swapaxes(k_r, 1, 2) / np.sqrt(d)
        m = s.max(axis=-1)
        p = np.exp(s - m[..., None])
        l = p.sum(axis=-1)
        return (p @ v_r) / l[..., None], m + np.log(l)
    """),
        [
            "case 7",
            "the values agree",
            "MiB at once",
            "32 query heads would be 16.0 MiB",
            "shape (32, 1024, 32)",
            "view q as",
        ],
    ),
    "chunk: the course's reference": (
        "def decode_chunk(q, k_c, v_c):\n    return lab.attention_reference(q, k_c, v_c)\n"
        + GOOD_SPLIT,
        ["calls lab.attention_reference"],
    ),
    "chunk: torch's SDPA": (
        _src("""
        import torch
        import torch.nn.functional as F
        def decode_chunk(q, k_c, v_c):
            Hq, N, d = q.shape
            Hkv, Mc, dv = v_c.shape
            if Mc == 0:
                return np.zeros((Hq, N, dv)), np.full((Hq, N), -np.inf)
            G = Hq // Hkv
            t = lambda a: torch.from_numpy(np.repeat(a, G, axis=0))
            o = F.scaled_dot_product_attention(torch.from_numpy(q), t(k_c), t(v_c)).numpy()
            s = q @ np.swapaxes(np.repeat(k_c, G, axis=0), 1, 2) / np.sqrt(d)
            m = s.max(axis=-1)
            return o, m + np.log(np.exp(s - m[..., None]).sum(axis=-1))
        """)
        + GOOD_SPLIT,
        ["case 0", "scaled_dot_product_attention", "asks for numpy"],
    ),
    "chunk: the reference reached through its module": (
        "from lab.kernels.rung0_reference import attention_reference as ref\n"
        "def decode_chunk(q, k_c, v_c):\n    return ref(q, k_c, v_c)\n" + GOOD_SPLIT,
        ["calls lab.attention_reference"],
    ),
}


@pytest.mark.parametrize("mistake", WRONG_4)
def test_split_decode_check_diagnoses_planted_mistakes(mistake):
    source, says = WRONG_4[mistake]
    _fails("split", source, *says)


@pytest.mark.parametrize(
    "source",
    [
        GOOD_CHUNK
        + "from lab import flash_decoding as decode_by_chunks\n"
        + "def split_decode(q, k, v, splits):\n"
        + "    return decode_by_chunks(q, k, v, splits=splits)\n",
        GOOD_CHUNK
        + "import lab\n"
        + "join = lab.merge_outputs\n"
        + "def split_decode(q, k, v, splits):\n"
        + "    M = k.shape[1]\n"
        + "    edges = [M * c // splits for c in range(splits + 1)]\n"
        + "    parts = [decode_chunk(q, k[:, a:b], v[:, a:b]) for a, b in zip(edges, edges[1:])]\n"
        + "    return join([o for o, _ in parts], [lse for _, lse in parts])\n",
    ],
    ids=["flash_decoding renamed", "merge_outputs renamed"],
)
def test_split_decode_by_labs_answer_under_another_name_is_refused(source):
    _fails(
        "split",
        source,
        "case 0",
        ("calls lab.flash_decoding", "calls lab.merge_outputs"),
    )


def test_the_merge_appears_only_after_its_exercise():
    """Exercise 2 of part 1 builds the split and the merge: no cell a learner sees above its check prints the
    chunk's state or the merge's formula; the worked answer is a solution cell."""
    import nbformat
    from exercise_support import ROOT

    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    check = next(
        i
        for i, s in enumerate(sources)
        if "check_split_decode(split_decode, decode_chunk)" in s
    )
    formulas = ("lse_c - lse", "\\sum_c e^{lse_c}", "acc_c}{l_c", "m_c + \\log l_c")
    shown = [i for i, s in enumerate(sources) if any(f in s for f in formulas)]
    assert shown and min(shown) > check, shown
    assert all("solution" in nb.cells[i].metadata.get("tags", []) for i in shown), shown


def test_split_decode_check_names_the_stub_still_left():
    out = run_check(
        EX["split"],
        GOOD_CHUNK
        + "def split_decode(q, k, v, splits):\n    raise NotImplementedError\n",
    )
    assert out.startswith("split_decode: not implemented yet"), out
    out = run_check(
        EX["split"],
        "def decode_chunk(q, k_c, v_c):\n    raise NotImplementedError\n" + GOOD_SPLIT,
    )
    assert out.startswith("decode_chunk: not implemented yet"), out


# ------------------------------------------------------------------------------------ the checks themselves


def _solutions() -> dict:
    ns = {"np": np, "lab": lab}
    for key, ex in EX.items():
        exec(compile(ex.solution, f"<solution {key}>", "exec"), ns)
    for n in (1, 2, 5, 6):
        exec(compile(OLD[n].solution, f"<retired solution {n}>", "exec"), ns)
    return ns


def test_passing_lines_are_fixed_text(capsys):
    ns = _solutions()
    checks.check_cache_bytes(ns["cache_bytes"])
    checks.check_largest_window(ns["largest_window"])
    checks.check_cache_per_token(ns["cache_per_token"])
    checks.check_step_intensity(ns["intensity"])
    checks.check_crossing_group(ns["crossing_group"])
    checks.check_split_ticks(ns["split_ticks"])
    checks.check_best_splits(ns["best_splits"])
    paged.check_paged_decode(ns["paged_decode"])
    checks.check_split_decode(ns["split_decode"], ns["decode_chunk"])
    assert capsys.readouterr().out.splitlines() == [
        "cache_bytes: ✓ passed 6 cases",
        "largest_window: ✓ passed 6 cases",
        "cache_per_token: ✓ passed 9 cases",
        "intensity: ✓ passed 5 cases",
        "crossing_group: ✓ passed 5 cases",
        "split_ticks: ✓ passed 9 cases",
        "best_splits: ✓ passed 8 cases",
        "paged_decode: ✓ passed 8 sequences on scattered pages: stale slots masked, no copy of the cache",
        "split_decode: ✓ passed 8 cases: uneven, empty chunks, G to 16, huge scores; "
        "merge followed, no copy",
    ]


def test_the_references_are_the_course_figures():
    for G, d, M, kv, qo in [(1, 128, 4096, 2, 2), (8, 64, 100, 1, 1)]:
        assert checks._intensity(G, d, M, kv, qo) == pytest.approx(
            lab.decode_intensity(G, d, M, kv, qo_itemsize=qo), rel=1e-12
        )
    assert [
        checks._fills(*c)
        for c in [(1, 8, 132), (4, 8, 132), (2, 2, 132), (16, 32, 132)]
    ] == [17, 5, 33, 1]


def test_the_cases_hold_what_their_labels_say():
    big = checks._chunk_cases()[-1]
    s = big[1] @ np.swapaxes(np.repeat(big[2], 2, axis=0), 1, 2) / np.sqrt(8)
    assert np.abs(s).max() > 710  # e^s overflows float64 there
    assert checks._chunk_cases()[3][2].shape[1] == 0
    cases = checks._split_cases()
    assert cases[1][2].shape[1] % cases[1][4] and cases[2][4] > cases[2][2].shape[1]
    last = cases[-1]
    assert last[1].shape[0] // last[2].shape[0] == 16 and 16 * last[2].nbytes > 4 * (
        last[2].nbytes + last[3].nbytes
    )


def test_coverage_reads_the_recorded_calls():
    k = np.random.default_rng(0).standard_normal((2, 10, 3))
    call = lambda j0, j1: ((None, k[:, j0:j1], None), None)  # noqa: E731
    assert checks._coverage(k, [call(0, 4), call(4, 8), call(8, 10)], 3) is None
    assert (
        checks._coverage(k, [call(0, 5), call(5, 10), call(10, 10)], 3) is None
    )  # an empty chunk is a call
    assert "never called decode_chunk" in checks._coverage(k, [], 3)[0]
    problem, hint = checks._coverage(k, [call(0, 3), call(3, 6), call(6, 9)], 3)
    assert "key 9 never reached" in problem and "not a multiple of 3" in hint
    assert (
        "key 4 reached decode_chunk 2 times"
        in checks._coverage(k, [call(0, 5), call(4, 8), call(8, 10)], 3)[0]
    )
    assert (
        "called 2 times for splits = 3"
        in checks._coverage(k, [call(0, 5), call(5, 10)], 3)[0]
    )
    problem, _ = checks._coverage(k, [((None, np.repeat(k, 2, axis=0), None), None)], 1)
    assert "shape (4, 10, 3)" in problem and "K repeated" in problem
    assert (
        "not a contiguous run"
        in checks._coverage(k, [((None, k[:, ::2], None), None), call(1, 2)], 2)[0]
    )


def test_memory_sees_a_repeated_k():
    q, k, v, splits = checks._split_cases()[-1][1:]
    ns = _solutions()
    peak, shapes = checks._memory(ns["split_decode"], q, k, v, splits)
    assert peak < 2 * (k.nbytes + v.nbytes) and not shapes
    peak, shapes = checks._memory(
        lambda q, k, v, s: np.repeat(k, 16, axis=0) @ np.ones(32), q, k, v, splits
    )
    assert peak >= 16 * k.nbytes and (32, 2048, 32) in shapes


def test_nothing_stays_patched_after_an_error(capsys):
    originals = {n: getattr(lab, n) for n in checks._COURSE if hasattr(lab, n)}
    ns = _solutions()
    exec(
        "def split_decode(q, k, v, splits):\n    decode_chunk(q, k, v)\n    raise ValueError('broken')\n",
        ns,
    )
    before = dict(ns)
    checks.check_split_decode(ns["split_decode"], ns["decode_chunk"])
    assert "raised ValueError: broken" in capsys.readouterr().out
    assert all(ns[n] is before[n] for n in before)
    assert all(getattr(lab, n) is f for n, f in originals.items())


def test_the_paged_check_is_still_importable_from_decoding():
    assert checks.check_gather_pages is paged.check_gather_pages


# ------------------------------------------------------------------------------------ the paged cache

WRONG_5 = {
    "the partial last page dropped (off by one)": (
        """
        def gather_pages(pages, block_row, length):
            n = length // pages.shape[2]
            return np.concatenate([pages[block_row[i]] for i in range(n)], axis=1)[:, :length]
        """,
        ["case 0", "only partly full is still a block"],
    ),
    "the logical block read as the physical page": (
        """
        def gather_pages(pages, block_row, length):
            n = -(-length // pages.shape[2])
            return np.concatenate([pages[i] for i in range(n)], axis=1)[:, :length]
        """,
        [
            "you read page i for logical block i"
        ],  # the pages are drawn afresh: any sequence may show it
    ),
    "the length mask ignored": (
        """
        def gather_pages(pages, block_row, length):
            n = -(-length // pages.shape[2])
            return np.concatenate([pages[block_row[i]] for i in range(n)], axis=1)
        """,
        ["case 0", "stale data", "Cut the result at `length`"],
    ),
    "the blocks in reverse order": (
        """
        def gather_pages(pages, block_row, length):
            n = -(-length // pages.shape[2])
            return np.concatenate([pages[block_row[i]] for i in reversed(range(n))], axis=1)[:, :length]
        """,
        ["case 0"],
    ),
}


@pytest.mark.parametrize("mistake", sorted(WRONG_5))
def test_gather_pages_mistakes_fail_with_their_diagnosis(mistake):
    source, says = WRONG_5[mistake]
    _fails(OLD[5], source, *says)


def test_gather_pages_check_catches_a_wrong_order_that_keeps_the_values():
    # a gather that returns the right keys for the check's first pass but permutes positions within a page is caught
    out = run_check(
        OLD[5],
        _src("""
        def gather_pages(pages, block_row, length):
            n = -(-length // pages.shape[2])
            return np.concatenate([pages[block_row[i]][:, ::-1] for i in range(n)], axis=1)[:, :length]
        """),
    )
    assert "✗" in out and "✓" not in out, out


@pytest.mark.parametrize(
    "source",
    [
        "from lab.decoding import gather_pages as gp\ndef gather_pages(pages, block_row, length):\n"
        "    return gp(pages, block_row, length)\n",
        "import lab\ng = lab.gather_pages\ngather_pages = lambda pages, block_row, length: g(pages, block_row, length).copy()\n",
    ],
)
def test_gather_pages_by_labs_own_answer_is_refused(source):
    _fails(OLD[5], source, "case 0", "calls lab.gather_pages")


def test_cache_per_token_by_labs_own_answer_or_a_table_is_refused():
    _fails(
        OLD[1],
        "from lab.decoding import kv_cache_bytes_per_token as kv\n"
        "def cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n"
        "    return kv(layers, kv_heads, head_dim, itemsize)\n",
        "case 0",
        "calls lab.kv_cache_bytes_per_token",
    )
    table = {
        (32, 32, 32, 128, 2): 524288,
        (80, 64, 8, 128, 2): 327680,
        (32, 71, 1, 64, 2): 8192,
        (126, 128, 8, 128, 4): 1032192,
        (32, 32, 8, 128, 1): 65536,
    }
    out = run_check(
        OLD[1],
        "def cache_per_token(layers, q_heads, kv_heads, head_dim, itemsize):\n"
        "    return TABLE[layers, q_heads, kv_heads, head_dim, itemsize]\n",
        extra={"TABLE": table},
    )
    assert re.search(r"✗ case [5-8] ", out), out
    assert "raised KeyError" in out and "seed" in out, out


def test_cache_per_token_fresh_cases_repeat_with_the_seed(capsys):
    known = {(32, 32, 32, 128, 2): 524288}
    wrong = lambda *case: known.get(case, 0)  # noqa: E731
    lab.checks.decoding.check_cache_per_token(wrong, seed=4)
    first = capsys.readouterr().out
    lab.checks.decoding.check_cache_per_token(wrong, seed=4)
    assert capsys.readouterr().out == first and "case 1" in first and "seed=4" in first


def test_paged_decode_spec_does_not_give_the_rule():
    spec = EX["paged"].spec
    assert "alpha" not in spec and "m - m'" not in spec and "block_row[i]" not in spec
    assert "min(" not in EX["window"].spec and "// 2" not in EX["window"].spec


@pytest.mark.parametrize("how", list(EVASIONS))
@pytest.mark.parametrize(
    "number, name",
    [
        ("splits", "best_splits"),
        ("window", "largest_window"),
        ("crossing", "crossing_group"),
        ("paged", "paged_decode"),
        ("append", "append_token"),
        ("split", "split_decode"),
    ],
)
def test_an_answer_that_hides_from_the_watch_is_refused(number, name, how):
    out = run_check(EX[number], evading(EX[number].solution, name, how))
    assert "✗" in out and "✓" not in out and EVASIONS[how][1] in out, out


def test_the_intensity_formula_appears_only_after_its_exercise():
    """Exercise 2 of part 2 derives the step's intensity: no cell above its check prints the formula."""
    import nbformat
    from exercise_support import ROOT

    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    check = next(
        i for i, s in enumerate(sources) if "check_crossing_group(crossing_group)" in s
    )
    shown = [i for i, s in enumerate(sources) if "4GMd" in s.replace(" ", "")]
    assert shown and min(shown) > check, shown


def test_the_tick_count_appears_only_after_its_exercise():
    """Exercise 1 of part 1 derives the model's tick count from the toy's picture: no cell above its
    checks states the rules or the formula; the rules come after, in a cell the learner keeps."""
    import nbformat
    from exercise_support import ROOT

    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    check = next(
        i for i, s in enumerate(sources) if "check_best_splits(best_splits)" in s
    )
    picture = next(i for i, s in enumerate(sources) if "draw_tick_timeline(" in s)
    assert picture < check
    shown = [i for i, s in enumerate(sources) if "\\text{ticks} =" in s]
    assert shown and min(shown) > check, shown
    # the worked answer: a solution cell (hidden until opened, dropped from the learner's copy)
    assert all("solution" in nb.cells[i].metadata.get("tags", []) for i in shown), shown
    rules = [i for i, s in enumerate(sources) if "combine* kernel" in s]
    assert rules and min(rules) > check, rules
    assert all("solution" not in nb.cells[i].metadata.get("tags", []) for i in rules)
    # one meaning of "step": a decoding step is one new token; the schedule's unit is the tick
    for i, cell in enumerate(nb.cells):
        outs = [o.get("text", "") for o in cell.get("outputs", [])]
        text = re.sub(r"decoding steps?\b", "", "\n".join([cell.source, *outs]))
        assert not re.search(r"\bsteps?\b", text), (
            i,
            re.findall(r".{30}\bsteps?\b.{30}", text),
        )


def test_best_splits_hint_names_where_the_search_stopped():
    case = (
        128 * 131 - 5,
        1,
        1,
        132,
    )  # 131 key blocks, the last one partial: 131 is best
    assert checks._best_splits(*case) == 131
    for top in (128, 130):  # a cap at 128, or M // 128: both answer 66 (4 steps)
        got = checks._search(*case, top=top)
        hint = checks._best_splits_hint(case, got, 131)
        assert f"{got} is the fastest count below 131" in hint, hint
        assert "stopped before 131" in hint and "M // 128 = 130" in hint, hint


# ------------------------------------------------------------------------------------ exercise 1a: the tick count

_SS = (
    "def split_ticks(M, batch, heads, slots, splits):\n"
    "    T = -(-M // 128)\n"
    "    w = -(-batch * heads * min(splits, T) // slots)\n"
    "    c = -(-T // splits)\n"
)


@pytest.mark.parametrize(
    "body, says",
    [
        ("    return w * (c + 1) + 1 if splits > 1 else w * T\n", "✓"),
        ("    return w * c\n", "the partials and the merge are missing"),
        ("    return w * (c + 1) + 1\n", "one split writes no partials"),
        (
            "    w = max(batch * heads * splits // slots, 1)\n"
            "    return w * (c + 1) + 1 if splits > 1 else w * T\n",
            "the waves rounded down",
        ),
        (
            "    c = max(T // splits, 1)\n"
            "    return w * (c + 1) + 1 if splits > 1 else w * T\n",
            "the chunk rounded down",
        ),
        ("    return w * (c + 2) if splits > 1 else w * T\n", "not one per wave"),
        ("    return w * (c + 1) if splits > 1 else w * T\n", "the merge is missing"),
        ("    return w * c + 1 if splits > 1 else w * T\n", "the partials are missing"),
        (
            "    return w * c + 2 if splits > 1 else w * T\n",
            "the partials are charged once",
        ),
        (
            "    w = -(-batch * heads * splits // slots)\n"
            "    return w * (c + 1) + 1 if splits > 1 else w * T\n",
            "take no slot",
        ),
        (
            "    T = M // 128\n"
            "    c = -(-T // splits)\n"
            "    return w * (c + 1) + 1 if splits > 1 else w * T\n",
            "the partial last key block is dropped",
        ),
    ],
)
def test_split_steps_names_each_planted_mistake(capsys, body, says):
    ns = {}
    exec(_SS + body, ns)
    checks.check_split_ticks(ns["split_ticks"], seed=3)
    out = capsys.readouterr().out
    assert says in out, out


def test_split_steps_refuses_the_oracle(capsys):
    import lab as _lab

    checks.check_split_ticks(
        lambda M, B, H, P, s: _lab.decode_schedule(
            M, batch=B, heads=H, splits=s, processors=P, per_processor=1
        )["steps"]
    )
    assert "lab.decode_schedule" in capsys.readouterr().out


@pytest.mark.parametrize("seed", range(20))
def test_split_steps_catches_a_dropped_last_block_on_every_draw(capsys, seed):
    """T_c = M // 128 fails on every run, not only on some draws."""
    ns = {}
    exec(
        _SS.replace("T = -(-M // 128)", "T = M // 128")
        + "    return w * (c + 1) + 1 if splits > 1 else w * T\n",
        ns,
    )
    checks.check_split_ticks(ns["split_ticks"], seed=seed)
    out = capsys.readouterr().out
    assert "✗" in out and "partial last key block" in out, out


def test_split_steps_names_both_mistakes_that_give_one_count():
    """61 key blocks in 6 chunks, one wave: no merge (1 · 12) and the chunk rounded down (1 · 11 + 1)
    give the same 12 steps, so the hint names both rather than blaming one."""
    case = (128 * 61, 1, 8, 264, 6)
    got = checks._model_steps(*case, merge=False)
    assert got == checks._model_steps(*case, up=(True, False)) == 12
    hint = checks._split_steps_hint(case, got, checks._model_steps(*case))
    assert "the merge is missing" in hint and "the chunk rounded down" in hint, hint


def test_part2_gives_each_letter_one_meaning_and_folds_the_crossing():
    """W is the sliding window in part 2 (and notebook 11), not a bandwidth; exercise 2's solved
    inequality sits after the predictions' answer, folded in a details block."""
    import nbformat
    from exercise_support import ROOT

    nb = nbformat.read(ROOT / "notebooks" / f"{NAME2}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    for i, s in enumerate(sources):
        assert "/W" not in s and "W_gpu" not in s and "F/W" not in s, i
    check = next(
        i for i, s in enumerate(sources) if "check_crossing_group(crossing_group)" in s
    )
    solved = next(i for i, s in enumerate(sources) if "**Solving for the group.**" in s)
    search = next(
        i for i, s in enumerate(sources) if "the smallest G that reaches the ridge" in s
    )
    assert check < search < solved
    folded = sources[solved]
    assert folded.index("<details>") < folded.index("Solving for the group")
    assert folded.index("Solving for the group") < folded.index("</details>")


# ------------------------------------------------------------------------------------ precision and None named


def test_split_decode_in_float32_is_told_its_error_is_rounding():
    """decode_chunk computed in float32 (returned as float64, so its dtype cannot tell) misses float64's
    tolerance by rounding only: the hint names float32 and says to compute in float64."""
    chunk = GOOD_CHUNK.replace(
        "    Hq, N, d = q.shape\n",
        "    Hq, N, d = q.shape\n"
        "    q, k_c, v_c = (a.astype(np.float32) for a in (q, k_c, v_c))\n",
    ).replace(
        "    return o_c.reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)",
        "    o_c, lse_c = o_c.reshape(Hq, N, dv), (m + np.log(l)).reshape(Hq, N)\n"
        "    return o_c.astype(np.float64), lse_c.astype(np.float64)",
    )
    assert "astype(np.float32)" in chunk and "astype(np.float64)" in chunk
    _fails(
        "split",
        chunk + GOOD_SPLIT,
        "decode_chunk: ✗",
        "float32 rounding",
        "compute in float64",
    )


def test_split_decode_with_a_float32_merge_is_told_its_error_is_rounding():
    source = _split("""
        m = L.max(axis=0).astype(np.float32)
        w = np.exp(L.astype(np.float32) - m)
        o = (w[..., None] * O.astype(np.float32)).sum(axis=0) / w.sum(axis=0)[..., None]
        return o, m + np.log(w.sum(axis=0))
    """)
    _fails("split", source, "split_decode: ✗", "float32 rounding", "compute in float64")


def test_decode_chunk_returning_none_is_told_so_not_nan():
    out = run_check(
        EX["split"],
        "def decode_chunk(q, k_c, v_c):\n    o_c = lse_c = None\n    return o_c, lse_c\n"
        + GOOD_SPLIT,
    )
    assert "returned None as element 0" in out and "NaN" not in out, out
    out = run_check(
        EX["split"],
        "def decode_chunk(q, k_c, v_c):\n"
        "    o_c = np.zeros((q.shape[0], q.shape[1], v_c.shape[2]))\n"
        "    return o_c, np.full(q.shape[:2], None)\n" + GOOD_SPLIT,
    )
    assert "returned None as element 1" in out and "NaN" not in out, out


def test_paged_decode_computed_in_float32_returned_in_float64_is_told_its_error_is_rounding():
    source = (
        _pd(GOOD_LOOP)
        .replace(
            "    qg = q.reshape(Hkv, Hq // Hkv * N, d)\n",
            "    qg = q.reshape(Hkv, Hq // Hkv * N, d).astype(np.float32)\n",
        )
        .replace("[page, :, :valid]", "[page, :, :valid].astype(np.float32)")
    )
    assert source.count("astype(np.float32)") >= 2
    _fails("paged", source, "case 0", "float32 rounding", "compute in float64")


def test_crossing_group_with_q_and_o_counted_once_is_named():
    source = (
        _CG
        + "    bytes_ = lambda G: 2 * M * d * kv_itemsize + 2 * d * qo_itemsize  # q, o once\n"
        + "    return next(G for G in range(1, 10**6) if G * 4 * M * d >= ridge * bytes_(G))\n"
    )
    _fails(
        "crossing",
        source,
        "case 0",
        ("counting them once for the whole group", "counted q and o once"),
        "reads its own q and writes its own o",
    )


def test_crossing_group_case_0_is_the_h100_ridge_the_notebook_states():
    """The prediction and its reveal use 295.2 (989 / 3.35): the check's first case uses the same ridge."""
    assert checks.H100_CASE_RIDGE == 295.2 == round(lab.ridge_point("H100"), 1)
    rng = np.random.default_rng(3)
    assert checks._crossing_cases(rng)[0][0] == 295.2
    assert checks._crossing(295.2, 128, 4096, 2, 2) == 319
