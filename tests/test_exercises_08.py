"""Notebook 08_hardware_runs's exercises: each worked solution passes its check cell, planted classic mistakes fail with their
diagnosis, the open question has an answer, and the helpers of lab/checks/hardware.py behave."""

import contextlib
import io
import itertools
import re

import nbformat
import pytest
from exercise_support import ROOT, exercises, replace_code, run_check

import lab
import lab.checks.hardware as ct

NAME = "08_hardware_runs"
EX = {ex.number: ex for ex in exercises(NAME)}
USABLE, WHY = lab.triton_status()
needs_triton = pytest.mark.skipif(not USABLE, reason=WHY)


def planted(ex, *edits):
    """The worked solution with each (old, new) replacement made; every `old` must be in it."""
    src = ex.solution
    for old, new in edits:
        src = replace_code(src, old, new, count=0)
    return src


def assert_fails(out, *pieces):
    assert "✗" in out and "✓" not in out, out
    for piece in pieces:
        assert piece in out, (piece, out)


def test_the_exercises_are_found():
    assert sorted(EX) == [1, 2, 3, 4]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_worked_solution_passes(number):
    out = run_check(EX[number], EX[number].solution)
    assert "✓" in out and "✗" not in out, out


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_stub_reports_not_implemented(number):
    out = run_check(EX[number], EX[number].stub)
    assert "not implemented yet" in out and "✗" not in out, out


# ---------------------------------------------------------------------------------------- exercise 1


@pytest.mark.parametrize(
    "edits, diagnosis",
    [
        (
            [("/ (2 if causal else 1)", "")],
            "twice the expected: a causal forward computes half the scores",
        ),
        ([("4 * B", "2 * B")], "half the expected"),
        (
            [("(ms * 1e-3)", "ms")],
            "1/1000 of the expected: ms is in milliseconds; convert ms to seconds (ms·10⁻³) before",
        ),
        ([("/ 1e12", "/ 1e9")], "1000× the expected: a rate in GFLOP/s"),
        ([("4 * B * H", "4 * B")], "1/H of the expected: F counts every one of the H"),
        ([("4 * B * H", "4 * H")], "1/B of the expected"),
        (
            [
                (
                    "N * N * d / (2 if causal else 1)",
                    "d * (N * (N + 1) / 2 if causal else N * N)",
                )
            ],
            "counts the kept scores exactly",
        ),
        ([("N * N * d", "N * d")], "1/N of the expected"),
        ([("N * N * d", "N * N")], "1/d of the expected"),
    ],
    ids=[
        "no causal halving",
        "one matmul",
        "ms as seconds",
        "GFLOP/s",
        "no H",
        "no B",
        "exact causal count",
        "N for N squared",
        "no d",
    ],
)
def test_tflops_mistakes(edits, diagnosis):
    assert_fails(run_check(EX[1], planted(EX[1], *edits)), diagnosis)


@pytest.mark.parametrize(
    "edits",
    [[("N * N * d", "N * N * N")], [("return flops", "return 0 * flops")]],
    ids=["d for N", "zero"],
)
def test_tflops_generic_hint_points_without_the_formula(edits):
    """A wrong rate no known slip explains gets a hint that names what to recount, not F itself."""
    out = run_check(EX[1], planted(EX[1], *edits))
    assert_fails(out, "none of the usual slips", "which of B, H, N, d")
    for formula in ("4BHN", "4·B·H", "N²·d", "N²d"):
        assert formula not in out, out


# ---------------------------------------------------------------------------------------- exercise 2


ROOF = "def attainable(intensity, peak, bandwidth, overlap):\n    i = np.asarray(intensity, dtype=float)\n"
SERIAL = "1.0 / (1.0 / peak + 1.0 / (i * bandwidth))"


@pytest.mark.parametrize(
    "source, diagnosis",
    [
        (
            ROOF
            + f"    return np.maximum(peak, i * bandwidth) if overlap else {SERIAL}\n",
            "the larger of the two rates",
        ),
        (
            ROOF + f"    return i * bandwidth if overlap else {SERIAL}\n",
            "past the ridge point the arithmetic takes longer",
        ),
        (
            ROOF + f"    return min(peak, i * bandwidth) if overlap else {SERIAL}\n",
            "np.minimum works element by element",
        ),
        (
            "def attainable(intensity, peak, bandwidth, overlap):\n"
            "    return np.minimum(peak, intensity * bandwidth) if overlap else "
            "1 / (1 / peak + 1 / (intensity * bandwidth))\n",
            "np.asarray(intensity)",
        ),
        (
            ROOF
            + f"    return np.minimum(peak, i / bandwidth) if overlap else {SERIAL}\n",
            "W = F / I bytes take F / (I·bandwidth) seconds",
        ),
        (
            ROOF + "    return np.minimum(peak, i * bandwidth)\n",
            "the other case's answer: without overlap the arithmetic waits",
        ),
        (
            ROOF
            + "    return np.minimum(peak, i * bandwidth) if overlap else peak + i * bandwidth\n",
            "the sum of the two rates; without overlap the two times add, not the rates",
        ),
        (
            ROOF
            + f"    return {SERIAL} if overlap else np.minimum(peak, i * bandwidth)\n",
            "the other case's answer: with overlap",
        ),
        (
            "def attainable(intensity, peak, bandwidth):\n    return np.minimum(peak, np.asarray(intensity) * bandwidth)\n",
            "four arguments: intensity, peak, bandwidth, overlap",
        ),
    ],
    ids=[
        "max",
        "no roof",
        "python min",
        "list input",
        "divided",
        "overlap ignored",
        "rates added",
        "cases swapped",
        "three arguments",
    ],
)
def test_roofline_mistakes(source, diagnosis):
    assert_fails(run_check(EX[2], source), diagnosis)


@pytest.mark.parametrize(
    "number, source, says",
    [
        (
            1,
            "from lab.measure.flops import attention_flops as af\n"
            "def tflops(B, H, N, d, causal, ms):\n"
            "    return af(B, H, N, d, causal=causal) / (ms * 1e-3) / 1e12\n",
            "calls lab.attention_flops",
        ),
        (
            1,
            "import lab\nF = lab.attention_flops\n"
            "def tflops(B, H, N, d, causal, ms):\n    return F(B, H, N, d, causal=causal) / ms / 1e9\n",
            "calls lab.attention_flops",
        ),
        (
            1,
            "import lab\n"
            "def tflops(B, H, N, d, causal, ms):\n"
            "    f = lab.backward_flops(N, N, d, batch=B, heads=H, causal=causal)\n"
            "    return f['forward'] / (ms * 1e-3) / 1e12\n",
            "calls lab.backward_flops",
        ),
        (
            2,
            "from lab.memory import attainable_flops as roof\n"
            "def attainable(intensity, peak, bandwidth, overlap):\n"
            "    return np.asarray(roof(np.asarray(intensity, dtype=float), peak, bandwidth))\n",
            "calls lab.attainable_flops",
        ),
    ],
)
def test_labs_own_answer_under_another_name_is_refused(number, source, says):
    out = run_check(EX[number], source)
    assert_fails(out, says, "write it yourself")


def test_a_table_of_the_fixed_cases_fails_on_a_drawn_one():
    table = {
        c: ct._tiles_reference(*c)
        for c in [
            (4096, 4096, 256, 512, False),
            (4096, 4096, 256, 512, True),
            (300, 333, 64, 48, False),
            (300, 333, 64, 48, True),
            (64, 512, 16, 32, False),
            (64, 512, 16, 32, True),
            (100, 20, 16, 8, True),
            (17, 17, 1, 1, True),
        ]
    }
    out = _say(
        ct.check_causal_tile_steps,
        lambda N, M, Br, Bc, causal: table.get((N, M, Br, Bc, causal), 0),
    )
    assert_fails(out, "seed")
    assert re.search(r"✗ case (8|9|10|11) ", out), out
    out = _say(ct.check_attention_tflops, lambda *a: 1.0)
    assert "seed" in out and out == _say(
        lambda f: ct.check_attention_tflops(
            f, seed=int(out.split("seed=")[1].split(":")[0])
        ),
        lambda *a: 1.0,
    )


def test_roofline_spec_asks_for_no_loop_the_check_cannot_see():
    """A loop is not forbidden (the check could not see it reliably): one over the intensities passes when it
    returns an array, as the spec asks, and a bare list is refused."""
    assert "Python loop" not in EX[2].spec
    loop = (
        "def attainable(intensity, peak, bandwidth, overlap):\n"
        "    return {}([min(peak, i * bandwidth) if overlap else "
        "1 / (1 / peak + 1 / (i * bandwidth)) for i in intensity])\n"
    )
    out = run_check(EX[2], loop.format("np.array"))
    assert out == "attainable: ✓ passed 8 cases\n", out
    assert_fails(
        run_check(EX[2], loop.format("")),
        "case 0",
        "returned a list, expected an array",
    )


# ------------------------------------------------------------- the tile-step check (no longer an exercise here)

TILE_STEPS = """
def tile_steps(N, M, Br, Bc, causal):
    steps = 0
    for i0 in range(0, N, Br):
        last_row = min(i0 + Br, N) - 1
        visible = (M if not causal else max(0, min(M, last_row + 1 + M - N)))
        steps += -(-visible // Bc)
    return steps
"""


def _tile_check(source):
    """What `lab.checks.hardware.check_causal_tile_steps` prints for the `tile_steps` that `source` defines."""
    ns = {}
    exec(compile(source, "<tile_steps>", "exec"), ns)
    return _say(ct.check_causal_tile_steps, ns["tile_steps"])


# ---------------------------------------------------------------------------------------- exercise 3


@pytest.mark.parametrize(
    "edits, diagnosis",
    [
        ([("math.ceil(excess)", "math.floor(excess)")], "one call short"),
        ([("math.ceil(excess)", "math.ceil(excess) + 1")], "already bring the mean"),
        ([("max(1, math.ceil(excess))", "math.ceil(excess)")], "at least one call"),
        (
            [("(cold - warm) / (tolerance * warm)", "cold / (tolerance * warm)")],
            "cold − warm",
        ),
        (
            [("(cold - warm) / (tolerance * warm)", "(cold - warm) / tolerance")],
            "not the bare",
        ),
        (
            [("max(1, math.ceil(excess))", "float(max(1, math.ceil(excess)))")],
            "expected an int",
        ),
        ([("(cold - warm)", "(cold - 2 * warm)")], "too few"),
    ],
    ids=[
        "floor",
        "one more",
        "below one",
        "whole first call",
        "bare tolerance",
        "float",
        "other",
    ],
)
def test_warmup_calls_mistakes(edits, diagnosis):
    assert_fails(run_check(EX[3], planted(EX[3], *edits)), diagnosis)


def test_warmup_calls_check_draws_fresh_cases_and_refuses_a_table():
    import numpy as np

    from lab.checks.measuring import _calls_reference, _warmup_cases

    first, again = (_warmup_cases(np.random.default_rng(s)) for s in (1, 2))
    assert first[:3] == again[:3] and first[3:] != again[3:]
    table = {c: _calls_reference(*c) for c in first[:3]}
    out = run_check(
        EX[3],
        "def calls_until_warm(cold, warm, tolerance):\n"
        "    return TABLE.get((cold, warm, tolerance), 1)\n",
        extra={"TABLE": table},
    )
    assert_fails(out, "seed")


@pytest.mark.parametrize("helper", ["_calls_reference", "_lingers"])
def test_warmup_calls_refuses_the_checks_own_answer(helper):
    body = {
        "_calls_reference": "    return answer(cold, warm, tolerance)\n",
        "_lingers": (
            "    n = 1\n"
            "    while answer(cold, warm, tolerance, n):\n"
            "        n += 1\n"
            "    return n\n"
        ),
    }[helper]
    out = run_check(
        EX[3],
        f"from lab.checks.measuring import {helper} as answer\n\n"
        "def calls_until_warm(cold, warm, tolerance):\n" + body,
    )
    assert_fails(out, f"lab.checks.measuring.{helper}")


def test_warmup_reference_is_the_fewest_calls():
    from lab.checks.measuring import _calls_reference, _lingers

    for cold, warm, tol in [(32.1e-3, 1.3e-3, 0.05), (5.0, 1.0, 0.1), (0.9, 1.0, 0.05)]:
        n = _calls_reference(cold, warm, tol)
        assert n >= 1 and not _lingers(cold, warm, tol, n)
        assert n == 1 or _lingers(cold, warm, tol, n - 1)


def test_warmup_calls_on_this_machine_runs_outside_every_check():
    """The cell that applies exercise 3 to mistake 1's timings follows both, under a heading of its own, so no
    check runs it (a check's cells are run without section 3's globals); it runs when the function is a stub."""
    cells = _cells()
    at = next(i for i, c in enumerate(cells) if "= calls_until_warm(cold" in c.source)
    mistake = next(i for i, c in enumerate(cells) if "cold = lab.time_once" in c.source)
    check = next(
        i
        for i, c in enumerate(cells)
        if "check_warmup_calls(calls_until_warm)" in c.source
    )
    assert mistake < check < at and "NotImplementedError" in cells[at].source
    assert (
        cells[at - 1].source.startswith("### ")
        and "Exercise" not in cells[at - 1].source
    )
    for ex in EX.values():
        assert not any("= calls_until_warm(cold" in src for src in ex.before)


def test_the_harness_follows_the_mistakes_it_guards_against():
    """Exercise 4 closes the section that makes the four timing mistakes, before any kernel is swept."""
    cells = _cells()
    heading = next(
        i for i, c in enumerate(cells) if c.source.startswith("### Exercise 4 ")
    )
    mistakes = [i for i, c in enumerate(cells) if c.source.startswith("### Mistake ")]
    sweep = next(i for i, c in enumerate(cells) if "lab.run_sweep(" in c.source)
    assert len(mistakes) == 4 and max(mistakes) < heading < sweep


# ---------------------------------------------------------------------------------------- exercise 5 (open)


def _cells():
    return nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells


def test_open_question_has_a_place_to_answer_and_a_worked_answer():
    cells = _cells()
    at = next(
        i
        for i, c in enumerate(cells)
        if c.cell_type == "markdown" and c.source.startswith("### Exercise 5 ")
    )
    after = cells[at + 1 : at + 3]
    assert "Your answer:" in after[0].source and "solution" not in after[
        0
    ].metadata.get("tags", [])
    assert (
        "solution" in after[1].metadata.get("tags", []) and "d = 128" in after[1].source
    )


# ---------------------------------------------------------------------------------------- exercise 4

HARNESS = """
def compare(a, b, measure, rounds):
{body}
"""

HARNESS_MISTAKES = {
    "back to back": (
        """    a(); b()
    t_a = [measure(a) for _ in range(rounds)]
    t_b = [measure(b) for _ in range(rounds)]
    return float(np.median(t_a) / np.median(t_b))""",
        (
            "other programs start halfway",
            "measured all of a's rounds, then all of b's",
            "other programs started at measurement 7",
            "measure them in alternating rounds",
        ),
    ),
    "mean": (
        """    a(); b()
    t_a, t_b = [], []
    for _ in range(rounds):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.mean(t_a) / np.mean(t_b))""",
        (
            "descheduled thread",
            "the mean of a's rounds over the mean of b's",
            "b's measurement 2, 30x slow",
        ),
    ),
    "one sample": (
        """    a(); b()
    return measure(a) / measure(b)""",
        ("one round only", "measured a and b 1 time(s)", "once per round, 5 rounds"),
    ),
    "no warm-up": (
        """    t_a, t_b = [], []
    for _ in range(rounds):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.median(t_a) / np.median(t_b))""",
        (
            "measured cold, the first measurement before any call",
            "call (or measure) each",
        ),
    ),
    "first round dropped as the warm-up": (
        """    t_a, t_b = [], []
    for _ in range(rounds):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.median(t_a[1:]) / np.median(t_b[1:]))""",
        ("measured cold", "a first round dropped as the warm-up leaves only 4"),
    ),
    "always a first": (
        """    a(); b()
    t_a, t_b = [], []
    for _ in range(rounds):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.median(t_a) / np.median(t_b))""",
        (
            "the second timing of each pair faster",
            "your rounds time a before b every time",
            "so b gains in every round",
            "alternate which goes first",
        ),
    ),
    "always b first": (
        """    a(); b()
    t_a, t_b = [], []
    for _ in range(rounds):
        t_b.append(measure(b)); t_a.append(measure(a))
    return float(np.median(t_a) / np.median(t_b))""",
        ("your rounds time b before a every time", "so a gains in every round"),
    ),
    "one round's ratio kept": (
        """    a(); b()
    ratios = []
    for r in range(rounds):
        if r % 2 == 0:
            ratios.append(measure(a) / measure(b))
        else:
            t_b = measure(b)
            ratios.append(measure(a) / t_b)
    return ratios[0]""",
        ("descheduled thread", "yours is one round's ratio"),
    ),
    "inverted": (
        """    a(); b()
    t_a, t_b = [], []
    for _ in range(rounds):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.median(t_b) / np.median(t_a))""",
        ("yours is time(b) / time(a)",),
    ),
    "lab's harness": (
        """    t = lab.time_interleaved({"a": a, "b": b}, rounds=rounds, min_run_time=0.001)
    return t["a"] / t["b"]""",
        ("it ran lab's own timing", "time_interleaved"),
    ),
    "its own timer": (
        """    import time
    a(); b()
    t0 = time.perf_counter(); a(); t1 = time.perf_counter(); b(); t2 = time.perf_counter()
    return (t1 - t0) / (t2 - t1)""",
        ("measured a and b 0 time(s)",),
    ),
    "a number of rounds of its own": (
        """    a(); b()
    t_a, t_b = [], []
    for _ in range(3):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.median(t_a) / np.median(t_b))""",
        ("3 time(s)", "5 rounds"),
    ),
    "ten times the rounds allowed": (
        """    a(); b()
    t_a, t_b = [], []
    for _ in range(10 * rounds):
        t_a.append(measure(a)); t_b.append(measure(b))
    return float(np.median(t_a) / np.median(t_b))""",
        ("measured a and b 50 times", "as many as you may"),
    ),
}


def test_the_order_machine_slows_no_harness_that_alternates():
    """Alternating the order over an even number of rounds makes each candidate second as often."""
    from lab.checks.measuring import _Machine

    machine = _Machine({"a": 2.0, "b": 1.0}, second=0.7)
    a, b = machine.kernels["a"], machine.kernels["b"]
    times = {a: [], b: []}
    for r in range(6):
        for f in (a, b) if r % 2 == 0 else (b, a):
            times[f].append(machine.measure(f))
    assert sum(times[a]) / sum(times[b]) == pytest.approx(2.0)
    assert min(times[a]) == pytest.approx(1.4) and max(times[a]) == pytest.approx(2.0)


def test_a_median_of_per_round_ratios_over_alternated_rounds_is_accepted(capsys):
    """Section 2's statistic, the median of t_a / t_b round by round, with the order alternated: a fair harness."""
    import statistics

    from lab.checks.measuring import check_fair_comparison

    def compare(a, b, measure, rounds):
        a(), b()
        ratios = []
        for r in range(rounds):
            if r % 2 == 0:
                t_a, t_b = measure(a), measure(b)
            else:
                t_b, t_a = measure(b), measure(a)
            ratios.append(t_a / t_b)
        return float(statistics.median(ratios))

    for seed in range(20):
        check_fair_comparison(compare, seed=seed)
        assert "✓ passed 5" in capsys.readouterr().out


def test_a_warm_up_by_measurement_is_accepted():
    """Measuring each candidate once before the rounds and dropping that time is a real warm-up."""
    body = """    measure(a); measure(b)
    t_a, t_b = [], []
    for r in range(rounds):
        for f, t in ((a, t_a), (b, t_b)) if r % 2 == 0 else ((b, t_b), (a, t_a)):
            t.append(measure(f))
    return float(np.median(t_a) / np.median(t_b))"""
    out = run_check(EX[4], HARNESS.format(body=body))
    assert "✓" in out and "✗" not in out, out


@pytest.mark.parametrize("name", list(HARNESS_MISTAKES))
def test_harness_mistakes_are_refused(name):
    body, says = HARNESS_MISTAKES[name]
    assert_fails(run_check(EX[4], HARNESS.format(body=body)), *says)


def test_harness_check_draws_new_costs_and_refuses_a_remembered_answer():
    import numpy as np

    from lab.checks.measuring import _scenarios

    first = [m.costs for _, m, _, _ in _scenarios(np.random.default_rng(1))]
    again = [m.costs for _, m, _, _ in _scenarios(np.random.default_rng(2))]
    assert first != again
    remembered = HARNESS.format(body="    a(); b()\n    return 1.0")
    assert_fails(run_check(EX[4], remembered), "measure each candidate once per round")


def test_harness_on_this_machine_runs_after_the_check():
    """The cell after the check runs the learner's harness on real kernels, with lab.time_call as `measure`."""
    cells = _cells()
    at = next(
        i for i, c in enumerate(cells) if "check_fair_comparison(compare)" in c.source
    )
    assert "lab.time_call(f, warmup=False" in cells[at + 1].source
    assert "compare(" in cells[at + 1].source


# ---------------------------------------------------------------------------------------- all specs


def test_specs_give_no_reference_code():
    for ex in EX.values():
        assert (
            "Reference:" not in ex.spec
            and "np.minimum" not in ex.spec
            and "sum(1 for" not in ex.spec
        )


def _say(fn, *args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------- helpers


@pytest.mark.parametrize("causal", [False, True])
def test_tile_count_knobs_default_to_the_reference(causal):
    for N, M, Br, Bc in itertools.product(
        [1, 5, 16, 17, 40], [1, 7, 16, 33], [1, 4, 16], [1, 3, 16]
    ):
        assert ct._tiles(N, M, Br, Bc, causal) == ct._tiles_reference(
            N, M, Br, Bc, causal
        ), (N, M, Br, Bc)


def test_tile_reference_counts_tiles_with_a_visible_score():
    import numpy as np

    for N, M, Br, Bc in itertools.product([3, 8, 13], [2, 8, 11], [2, 4], [3, 4]):
        seen = np.arange(M)[None, :] <= np.arange(N)[:, None] + (M - N)
        tiles = sum(
            seen[i : i + Br, j : j + Bc].any()
            for i in range(0, N, Br)
            for j in range(0, M, Bc)
        )
        assert ct._tiles_reference(N, M, Br, Bc, True) == tiles


def test_error_hints_are_added_to_the_message():
    def broken(intensity, peak, bandwidth, overlap):
        raise ValueError(
            "The truth value of an array with more than one element is ambiguous"
        )

    out = _say(ct.check_roofline, broken)
    assert "✗" in out and "np.minimum works element by element" in out
    assert (
        _say(
            ct.check_roofline,
            lambda i, p, b, o: (_ for _ in ()).throw(NotImplementedError),
        ).count("not implemented")
        == 1
    )


def test_tflops_in_float32_is_accepted():
    """A rate computed in float32 (relative error ~1e-7) is as right as in float64."""
    source = (
        "def tflops(B, H, N, d, causal, ms):\n"
        "    f = np.float32(4) * B * H * np.float32(N) ** 2 * d / (2 if causal else 1)\n"
        "    return np.float32(f / (np.float32(ms) * np.float32(1e-3)) / np.float32(1e12))\n"
    )
    out = run_check(EX[1], source)
    assert "✓" in out and "✗" not in out, out


def test_roofline_in_float32_is_accepted():
    """The roof computed in float32 (relative error ~1e-8) is as right as in float64."""
    source = (
        "def attainable(intensity, peak, bandwidth, overlap):\n"
        "    i, p, b = np.asarray(intensity, dtype=np.float32), np.float32(peak), np.float32(bandwidth)\n"
        "    return np.minimum(p, i * b) if overlap else 1 / (1 / p + 1 / (i * b))\n"
    )
    out = run_check(EX[2], source)
    assert "✓" in out and "✗" not in out, out
