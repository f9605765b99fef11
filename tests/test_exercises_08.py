"""Notebook 08's exercises: each worked solution passes its check cell, planted classic mistakes fail with their
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
    assert sorted(EX) == [1, 2, 3, 5]


@pytest.mark.parametrize("number", [1, 2, 3, pytest.param(5, marks=needs_triton)])
def test_worked_solution_passes(number):
    out = run_check(EX[number], EX[number].solution)
    assert "✓" in out and "✗" not in out, out


@pytest.mark.parametrize("number", [1, 2, 3, 5])
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
        ([("/ 1e12", "/ 1e9")], "1000× the expected"),
        (
            [
                (
                    "N * N * d / (2 if causal else 1)",
                    "d * (N * (N + 1) / 2 if causal else N * N)",
                )
            ],
            "counts the kept scores exactly",
        ),
    ],
    ids=[
        "no causal halving",
        "one matmul",
        "ms as seconds",
        "GFLOP/s",
        "exact causal count",
    ],
)
def test_tflops_mistakes(edits, diagnosis):
    assert_fails(run_check(EX[1], planted(EX[1], *edits)), diagnosis)


# ---------------------------------------------------------------------------------------- exercise 2


@pytest.mark.parametrize(
    "source, diagnosis",
    [
        (
            "def attainable(intensity, peak, bandwidth):\n    return np.maximum(peak, np.asarray(intensity) * bandwidth)\n",
            "the larger of the two ceilings",
        ),
        (
            "def attainable(intensity, peak, bandwidth):\n    return np.asarray(intensity) * bandwidth\n",
            "capped at the peak",
        ),
        (
            "def attainable(intensity, peak, bandwidth):\n    return min(peak, np.asarray(intensity) * bandwidth)\n",
            "np.minimum works element by element",
        ),
        (
            "def attainable(intensity, peak, bandwidth):\n    return np.minimum(peak, intensity * bandwidth)\n",
            "np.asarray(intensity)",
        ),
        (
            "def attainable(intensity, peak, bandwidth):\n    return np.minimum(peak, np.asarray(intensity) / bandwidth)\n",
            "FLOP/s = I·bandwidth",
        ),
    ],
    ids=["max", "no roof", "python min", "list input", "divided"],
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
            2,
            "from lab.memory import attainable_flops as roof\n"
            "def attainable(intensity, peak, bandwidth):\n"
            "    return np.asarray(roof(np.asarray(intensity, dtype=float), peak, bandwidth))\n",
            "calls lab.attainable_flops",
        ),
        (
            3,
            "import lab.tiling as t\n"
            "def tile_steps(N, M, Br, Bc, causal):\n"
            "    return t.tile_counts(N, M, Br, Bc, causal)['computed']\n",
            "calls lab.tile_counts",
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
    out = run_check(
        EX[3],
        "def tile_steps(N, M, Br, Bc, causal):\n    return TABLE.get((N, M, Br, Bc, causal), 0)\n",
        extra={"TABLE": table},
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
    loop = "def attainable(intensity, peak, bandwidth):\n    return {}([min(peak, i * bandwidth) for i in intensity])\n"
    out = run_check(EX[2], loop.format("np.array"))
    assert out == "attainable: ✓ passed 5 cases\n", out
    assert_fails(
        run_check(EX[2], loop.format("")),
        "case 0",
        "returned a list, expected an array",
    )


# ---------------------------------------------------------------------------------------- exercise 3


@pytest.mark.parametrize(
    "edits, diagnosis",
    [
        ([("last_row + 1 + M - N", "last_row + 1")], "aligned top-left"),
        (
            [("last_row + 1 + M - N", "i0 + 1 + M - N")],
            "decided by each block's first row",
        ),
        (
            [("range(0, N, Br)", "range(0, N - Br + 1, Br)")],
            "without the short last query block",
        ),
        ([("-(-visible // Bc)", "visible // Bc")], "only partly visible"),
        (
            [("max(0, min(M, last_row + 1 + M - N))", "min(M, last_row + 1 + M - N)")],
            "see no key",
        ),
        ([("M if not causal else", "M if True else")], "without causal skipping"),
        (
            [("visible = (M if not causal", "visible = (N if not causal")],
            "the count for N keys",
        ),  # square attention assumed
    ],
    ids=[
        "top-left",
        "first row",
        "dropped row tail",
        "dropped key tail",
        "negative",
        "no skipping",
        "N keys",
    ],
)
def test_tile_steps_mistakes(edits, diagnosis):
    assert_fails(run_check(EX[3], planted(EX[3], *edits)), diagnosis)


# ---------------------------------------------------------------------------------------- exercise 4 (open)


def _cells():
    return nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells


def test_open_question_has_a_place_to_answer_and_a_worked_answer():
    cells = _cells()
    at = next(
        i
        for i, c in enumerate(cells)
        if c.cell_type == "markdown" and c.source.startswith("### Exercise 4 ")
    )
    after = cells[at + 1 : at + 3]
    assert "Your answer:" in after[0].source and "solution" not in after[
        0
    ].metadata.get("tags", [])
    assert (
        "solution" in after[1].metadata.get("tags", []) and "d = 128" in after[1].source
    )


# ---------------------------------------------------------------------------------------- all specs


def test_specs_give_no_reference_code():
    for ex in EX.values():
        assert (
            "Reference:" not in ex.spec
            and "np.minimum" not in ex.spec
            and "sum(1 for" not in ex.spec
        )


# ---------------------------------------------------------------------------------------- exercise 5

KERNEL_MISTAKES = [
    (
        [("mask=col_ok[:, None], other=0.0, )", ")")],
        ("N and M not multiples", "reads K and V past row M - 1 = 36", "stores NaN"),
    ),
    (
        [
            ("mask=col_ok[:, None], other=0.0, )  # K_j", ")  # K_j")
        ],  # tl.where hides the NaN read
        (
            "N and M not multiples",
            "o is right, but",
            "reads K past row M - 1 = 36",
            "hides the values, not the read",
        ),
    ),
    (
        [('        s = tl.where(col_ok[None, :], s, float("-inf"))', "")],
        (
            "N and M not multiples",
            "11 slots past M counted as keys of score 0",
            "a score of -inf (tl.where)",
        ),
    ),
    (
        [
            (
                'm = tl.full([Br], float("-inf"), tl.float32)',
                "m = tl.zeros([Br], tl.float32)",
            )
        ],
        ("very negative scores", "NaN in yours", "start m at float('-inf')"),
    ),
    (
        [("acc = acc * alpha[:, None] + tl.dot(p, v)", "acc = acc + tl.dot(p, v)")],
        ("several key blocks", "alpha = exp(m - m_new)"),
    ),
    (
        [("p = tl.exp(s - m_new[:, None])", "p = tl.exp(s)")],
        ("very large scores", "overflows float32"),
    ),
    ([(") * scale", ")")], ("one key block", "yours is attention with scale 1")),
    ([("        m = m_new\n", "")], ("several key blocks", "last key block alone")),
    (
        [("range(0, M, Bc)", "range(0, M, Br)")],
        ("Br = 32 query rows", "differ in size"),
    ),
    (
        [("tl.max(s, axis=1)", "tl.max(s, axis=0)")],
        ("raised ValueError", "m, l run over axis=1"),
    ),
    (
        [
            ("m_new = tl.maximum(m, tl.max(s, axis=1))", "m_new = tl.max(s, axis=1)")
        ],  # the block's max, not the running one
        (
            "a key block near +200, then blocks near -200",
            "the running max",
            "e^400 overflows",
        ),
    ),
]


@needs_triton
@pytest.mark.parametrize(
    "edits, diagnosis",
    KERNEL_MISTAKES,
    ids=[
        "no load mask",
        "no mask on K, where hides it",
        "no -inf for padded keys",
        "m starts at 0",
        "no rescale of acc",
        "no max subtracted",
        "no scale",
        "m never updated",
        "steps by Br",
        "max over queries",
        "block max",
    ],
)
def test_kernel_mistakes(edits, diagnosis):
    assert_fails(run_check(EX[5], planted(EX[5], *edits)), *diagnosis)


@needs_triton
def test_kernel_with_alpha_upside_down_is_told_about_the_first_rescale():
    out = run_check(
        EX[5],
        planted(EX[5], ("alpha = tl.exp(m - m_new)", "alpha = tl.exp(m_new - m)")),
    )
    assert_fails(
        out, "case 0 (one key block", "NaN already with one key block", "exp(m - m_new)"
    )
    assert "nothing is rescaled yet" not in out


@needs_triton
def test_kernel_calling_labs_step_is_refused():
    """lab's own key-block step, called inside the learner's kernel: Triton's interpreter runs a copy of its code,
    known by the file and name it came from."""
    src = planted(
        EX[5],
        (
            "for j0 in range(0, M, Bc):",
            "for j0 in range(0, M, Bc):\n"
            "        m, l, acc = lab_step(q, m, l, acc, K + h * stride_kh, V + h * stride_vh, rows, j0, "
            "scale * 1.4426950408889634, N, M, d, d, stride_kn, stride_vn, True, False, Bc, d, d, 'ieee')\n"
            "    for j0 in range(0, 0, Bc):",
        ),
    )
    src = (
        "from lab.kernels.rung6_triton import _attn_fwd_step as lab_step\n"
        + src.replace("    o = acc / l[:, None]", "    o = acc / l[:, None]", 1)
    )
    out = run_check(EX[5], src)
    assert_fails(out, "case 0", "runs lab's kernel code _attn_fwd_step")


@needs_triton
def test_kernel_loading_every_key_at_once_is_refused():
    """One block of 128 slots, masked past M: right values on every case, but not a loop over key blocks."""
    src = planted(
        EX[5],
        ("for j0 in range(0, M, Bc):", "for j0 in range(0, 1):"),
        ("cols = j0 + tl.arange(0, Bc)", "cols = tl.arange(0, 128)"),
    )
    out = run_check(EX[5], src)
    assert_fails(
        out,
        "case 2 (several key blocks",
        "o is right, but one tl.load read 64 rows of K",
        "Bc = 16",
    )


@needs_triton
def test_kernel_with_a_pass_for_the_max_and_one_for_the_sums_is_refused():
    """Right values, Bc rows a load, but K read twice: a first loop for the row max, a second for l and acc."""
    src = planted(
        EX[5],
        (
            "for j0 in range(0, M, Bc):",
            "for j0 in range(0, M, Bc):  # pass 1: the max\n"
            "        cols = j0 + tl.arange(0, Bc)\n"
            "        col_ok = cols < M\n"
            "        k = tl.load(K + h * stride_kh + cols[:, None] * stride_kn + feats[None, :], "
            "mask=col_ok[:, None], other=0.0)\n"
            "        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, float('-inf'))\n"
            "        m = tl.maximum(m, tl.max(s, axis=1))\n"
            "    for j0 in range(0, M, Bc):  # pass 2: the sums",
        ),
    )
    out = run_check(EX[5], src)
    assert_fails(
        out,
        "case 0 (one key block",
        "o is right, but each program read K 2 times over",
    )


@needs_triton
def test_kernel_without_jit_is_told_to_keep_it():
    out = run_check(EX[5], EX[5].solution.replace("@triton.jit\n", ""))
    assert_fails(out, "keep @triton.jit")


def _say(fn, *args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return buf.getvalue()


def test_without_triton_the_check_skips_with_a_sentence(monkeypatch):
    monkeypatch.setattr(
        ct,
        "triton_status",
        lambda: (False, "Triton is not importable here (no module)."),
    )
    monkeypatch.setattr(ct, "_standin_needed", lambda: True)
    triton, tl = ct.triton_or_standins()
    assert getattr(triton, "standin", False) and tl.constexpr is int
    ns = {"triton": triton, "tl": tl}
    exec(EX[5].solution, ns)
    out = _say(ct.check_triton_attention, ns["attention_kernel"])
    assert (
        out == "attention_kernel: skipped: Triton is not importable here (no module).\n"
    )

    def stub(Q):
        raise NotImplementedError

    out = _say(ct.check_triton_attention, triton.jit(stub))
    assert "not implemented yet" in out and "skipped" in out and "✗" not in out


@needs_triton
def test_launch_runs_the_worked_kernel_on_strided_views():
    import numpy as np
    import torch

    triton, tl = ct.triton_or_standins()
    ns = {"triton": triton, "tl": tl}
    exec(EX[5].solution, ns)
    q, k, v = ct._case_inputs(2, 20, 37, 0, seed=1)
    assert (
        not k.is_contiguous()
        and torch.isnan(k.as_strided((2, 37 + ct._PAD, 16), k.stride())[:, 37:]).all()
    )
    o = ct.launch_attention_kernel(
        ns["attention_kernel"], q, k, v, block_q=16, block_k=16
    )
    want, _ = lab.attention_reference(*(t.double().numpy() for t in (q, k, v)))
    assert o.shape == (2, 20, 16) and np.abs(o.double().numpy() - want).max() < 1e-5
    older = ct.launch_attention_kernel(
        ns["attention_kernel"], q, k, v, block_m=16, block_n=16
    )  # the older names
    assert torch.equal(o, older)


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
    def broken(intensity, peak, bandwidth):
        raise ValueError(
            "The truth value of an array with more than one element is ambiguous"
        )

    out = _say(ct.check_roofline, broken)
    assert "✗" in out and "np.minimum works element by element" in out
    assert (
        _say(
            ct.check_roofline,
            lambda i, p, b: (_ for _ in ()).throw(NotImplementedError),
        ).count("not implemented")
        == 1
    )
