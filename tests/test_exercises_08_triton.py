"""Notebook 08_triton_kernel's exercises: the causal band (exercise 1), the kernel's loop (exercise 2) and the
backward's weights in log2 units (exercise 3); each worked
solution passes its check cell, planted classic mistakes fail with their diagnosis, and the host side and the check's
skip without Triton behave."""

import contextlib
import io

import numpy as np
import pytest
import torch
from exercise_support import exercises, replace_code, run_check

import lab
import lab.checks.hardware as ct

NAME = "08_triton_kernel"
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


def _say(fn, *args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return buf.getvalue()


def test_the_exercises_are_found_and_their_checks_pass_the_worked_solutions():
    assert sorted(EX) == [1, 2, 3]
    out = run_check(EX[1], EX[1].stub)
    assert "not implemented yet" in out and "✗" not in out, out
    out = run_check(EX[1], EX[1].solution)
    assert "✓" in out and "✗" not in out, out
    out = run_check(EX[2], EX[2].stub)
    assert "not implemented yet" in out and "✗" not in out, out
    if USABLE:
        out = run_check(EX[2], EX[2].solution)
        assert "✓" in out and "✗" not in out, out
    out = run_check(EX[3], EX[3].stub)
    assert "not implemented yet" in out and "✗" not in out, out
    out = run_check(EX[3], EX[3].solution)
    assert "✓" in out and "✗" not in out, out


def test_labs_step_is_printed_only_after_the_exercise():
    """`_attn_fwd_step` is nearly the exercise's answer: the notebook prints it only after the check."""
    import nbformat
    from exercise_support import ROOT

    cells = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4).cells
    check = next(
        i
        for i, c in enumerate(cells)
        if "check_triton_attention(attention_kernel)" in c.source
        and c.source.lstrip().startswith("# Check")
    )
    shown = [
        i
        for i, c in enumerate(cells)
        if c.cell_type == "code" and "triton_kernel_source" in c.source
    ]
    assert shown and min(shown) > check


# ---------------------------------------------------------------------------------------- exercise 1: the band

BAND_MISTAKES = {
    "first and last rows swapped": (
        ("full = max(0, first + 1 + M - N)", "full = max(0, last + 1 + M - N)"),
        (
            "seen = -(-max(0, min(M, last + 1 + M - N))",
            "seen = -(-max(0, min(M, first + 1 + M - N))",
        ),
        ("full from the block's last row", "seen from the block's first row"),
    ),
    "strict <": (
        ("full = max(0, first + 1 + M - N)", "full = max(0, first + M - N)"),
        (
            "seen = -(-max(0, min(M, last + 1 + M - N))",
            "seen = -(-max(0, min(M, last + M - N))",
        ),
        ("for j < r + (M - N)",),
    ),
    "top-left": (
        ("full = max(0, first + 1 + M - N)", "full = max(0, first + 1)"),
        (
            "seen = -(-max(0, min(M, last + 1 + M - N))",
            "seen = -(-max(0, min(M, last + 1))",
        ),
        ("aligned top-left",),
    ),
    "seen rounded down": (
        (
            "seen = -(-max(0, min(M, last + 1 + M - N)) // Bc)",
            "seen = max(0, min(M, last + 1 + M - N)) // Bc",
        ),
        ("seen rounded down",),
    ),
    "full rounded up": (
        (
            "full = max(0, first + 1 + M - N) // Bc",
            "full = -(-max(0, first + 1 + M - N) // Bc)",
        ),
        ("full rounded up",),
    ),
    "negative counts": (
        ("full = max(0, first + 1 + M - N)", "full = (first + 1 + M - N)"),
        ("a negative full",),
    ),
    "short last key block counted full": (
        (
            "full = max(0, first + 1 + M - N) // Bc",
            "full = (-(-M // Bc) if first + 1 + M - N >= M"
            " else max(0, first + 1 + M - N) // Bc)",
        ),
        ("full counting the last key block", "a short last block is never full"),
    ),
    "short last key block dropped": (
        (
            "seen = -(-max(0, min(M, last + 1 + M - N)) // Bc)",
            "seen = min(M // Bc, -(-max(0, min(M, last + 1 + M - N)) // Bc))",
        ),
        ("seen dropping the last key block", "inside that short block"),
    ),
}


def test_the_short_block_hints_do_not_blame_the_rounding():
    """A dropped short last key block is told so, not that a partly seen block must be rounded up."""
    *edits, _ = BAND_MISTAKES["short last key block dropped"]
    out = run_check(EX[1], planted(EX[1], *edits))
    assert "rounded down" not in out and "seen past M" not in out, out


@pytest.mark.parametrize("name", list(BAND_MISTAKES))
def test_band_mistakes(name):
    *edits, says = BAND_MISTAKES[name]
    assert_fails(run_check(EX[1], planted(EX[1], *edits)), *says)


def test_band_from_labs_tile_kinds_is_refused():
    src = (
        "import lab.kernels.rung6_triton as r6\n"
        "def key_blocks(i, N, M, Br, Bc):\n"
        "    row = r6.triton_tile_kinds(N, M, Br, Bc, True)[i]\n"
        "    return int((row == 2).sum()), int((row > 0).sum())\n"
    )
    assert_fails(
        run_check(EX[1], src), "calls lab.triton_tile_kinds", "write it yourself"
    )


BRUTE_FORCE_BANDS = {
    "the full N x M mask": (
        "def key_blocks(i, N, M, Br, Bc):\n"
        "    mask = np.arange(M)[None, :] <= np.arange(N)[:, None] + (M - N)\n"
        "    rows = mask[i * Br : min((i + 1) * Br, N)]\n"
        "    every, some = rows.all(0), rows.any(0)\n"
        "    full = 0\n"
        "    while (full + 1) * Bc <= M and every[full * Bc : (full + 1) * Bc].all():\n"
        "        full += 1\n"
        "    cols = np.nonzero(some)[0]\n"
        "    return full, (int(cols[-1]) // Bc + 1 if cols.size else 0)\n",
        "it held",
    ),
    "the block's own mask": (
        "def key_blocks(i, N, M, Br, Bc):\n"
        "    rows = np.arange(i * Br, min((i + 1) * Br, N))\n"
        "    seen = (np.arange(M)[None, :] <= rows[:, None] + (M - N)).sum(1)\n"
        "    return int(seen.min()) // Bc, -(-int(seen.max()) // Bc)\n",
        "it held",
    ),
    "a loop over the rows": (
        "def key_blocks(i, N, M, Br, Bc):\n"
        "    rows = range(i * Br, min((i + 1) * Br, N))\n"
        "    n = [max(0, min(M, r + 1 + M - N)) for r in rows]\n"
        "    return min(n) // Bc, -(-max(n) // Bc)\n",
        "Python lines",
    ),
}


@pytest.mark.parametrize("name", list(BRUTE_FORCE_BANDS))
def test_a_right_band_from_every_row_or_key_is_refused(name):
    """The pair from an element mask, or a loop over the rows, is right and still fails: two rows decide."""
    src, says = BRUTE_FORCE_BANDS[name]
    assert_fails(
        run_check(EX[1], "import numpy as np\n" + src),
        "the pair is right, but for one block of 1,024 rows",
        says,
        "two rows decide",
        "which row of the block sees the fewest keys",
    )


def test_a_band_from_a_loop_over_key_blocks_passes():
    """Looking at each key block's edges (a few blocks) is work the kernel's bounds allow: it passes."""
    src = (
        "def key_blocks(i, N, M, Br, Bc):\n"
        "    first, last = i * Br, min((i + 1) * Br, N) - 1\n"
        "    full = seen = 0\n"
        "    for j in range(-(-M // Bc)):\n"
        "        lo, hi = j * Bc, min((j + 1) * Bc, M) - 1\n"
        "        if hi - lo + 1 == Bc and hi <= first + M - N and full == j:\n"
        "            full += 1\n"
        "        if lo <= last + M - N:\n"
        "            seen = j + 1\n"
        "    return full, seen\n"
    )
    out = run_check(EX[1], src)
    assert "✓" in out and "✗" not in out, out


def test_the_band_work_watch_restores_the_tracer_and_tracemalloc():
    import sys
    import tracemalloc

    before = sys.gettrace()
    lines, peak = ct._work(lambda *a: sum(range(10)), ct._WORK_CASE)
    assert sys.gettrace() is before and not tracemalloc.is_tracing()
    assert lines <= ct._WORK_LINES and peak <= ct._WORK_BYTES


def test_band_reference_agrees_with_the_kernels_bounds():
    import itertools

    for N, M, Br, Bc in itertools.product(
        [1, 17, 40, 100], [1, 16, 33, 64], [16, 32], [16, 32]
    ):
        kinds = lab.triton_tile_kinds(N, M, Br, Bc, True)
        for i, row in enumerate(kinds):
            assert ct._band_reference(i, N, M, Br, Bc) == (
                int((row == 2).sum()),
                int((row > 0).sum()),
            ), (i, N, M, Br, Bc)


# ---------------------------------------------------------------------------------------- exercise 2: the kernel

KERNEL_MISTAKES = [
    (
        [
            (
                "k = tl.load(k_ptrs, mask=col_ok[:, None], other=0.0)",
                "k = tl.load(k_ptrs)",
            ),
            (
                "v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)",
                "v = tl.load(v_ptrs)",
            ),
        ],
        ("N and M not multiples", "reads K and V past row M - 1 = 36", "stores NaN"),
    ),
    (
        [
            (
                "k = tl.load(k_ptrs, mask=col_ok[:, None], other=0.0)",
                "k = tl.load(k_ptrs)",
            )
        ],
        # tl.where hides the NaN read
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
            ('        s = tl.where(col_ok[None, :], s, float("-inf"))', ""),
            (
                "p = tl.exp(s - m_new[:, None])",
                "p = tl.exp(s - m_new[:, None]) * col_ok[None, :]",
            ),
        ],  # the key mask applied to p after the exp: right unless the padded 0 is the max
        ("ragged M, scores near -200", "Masking p (or l) after the exp is too late"),
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
        [
            (
                "acc = acc * alpha[:, None] + tl.dot(p, v)",
                "acc = (acc + tl.dot(p, v)) * alpha[:, None]",
            )
        ],
        ("one key block", "multiplies by alpha after adding the new block"),
    ),
    (
        [
            (
                "acc = acc * alpha[:, None] + tl.dot(p, v)",
                "acc = (acc + tl.dot(p, v)) * alpha[:, None]",
            ),
            (
                "l = alpha * l + tl.sum(p, axis=1)",
                "l = (l + tl.sum(p, axis=1)) * alpha",
            ),
        ],
        (
            "one key block",
            "NaN already with one key block",
            "alpha multiplies the sums after adding",
        ),
    ),
    (
        [("range(0, M, Bc)", "range(0, M - Bc, Bc)")],
        (
            "one key block",
            "your loop read 0% of the M = 16 key rows",
            "range(0, M, Bc)",
        ),
    ),
    (
        [
            (
                "acc = tl.zeros([Br, d], tl.float32)",
                "acc = tl.zeros([Br, d], tl.float16)",
            )
        ],
        (
            "o is right here, but it uses tl.float16",
            "Keep m, l and acc in tl.float32",
        ),
    ),
    (
        [
            (
                "acc = acc * alpha[:, None] + tl.dot(p, v)",
                "acc = (acc * alpha[:, None] + tl.dot(p, v)).to(tl.float16)",
            )
        ],
        ("it uses tl.float16", "Keep m, l and acc in tl.float32"),
    ),
    (
        [("p = tl.exp(s - m_new[:, None])", "p = tl.exp(s)")],
        ("very large scores", "overflows float32"),
    ),
    (
        [("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(q, tl.trans(k))")],
        ("one key block", "yours is attention with scale 1"),
    ),
    ([("        m = m_new\n", "")], ("several key blocks", "last key block alone")),
    (
        [("range(0, M, Bc)", "range(0, M, Br)")],
        ("Br = 32 query rows", "range(0, M, Bc)"),
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
        "key mask on p",
        "m starts at 0",
        "no rescale of acc",
        "alpha after adding, acc",
        "alpha after adding, both",
        "loop stops a block early",
        "fp16 acc",
        "acc rounded to fp16",
        "no max subtracted",
        "no scale",
        "m never updated",
        "steps by Br",
        "max over queries",
        "block max",
    ],
)
def test_kernel_mistakes(edits, diagnosis):
    assert_fails(run_check(EX[2], planted(EX[2], *edits)), *diagnosis)


@needs_triton
def test_kernel_with_alpha_upside_down_is_told_about_the_first_rescale():
    out = run_check(
        EX[2],
        planted(EX[2], ("alpha = tl.exp(m - m_new)", "alpha = tl.exp(m_new - m)")),
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
        EX[2],
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
    out = run_check(EX[2], src)
    assert_fails(out, "case 0", "runs lab's kernel code _attn_fwd_step")


@needs_triton
def test_kernel_loading_every_key_at_once_is_refused():
    """One block of 128 slots, masked past M: right values on every case, but not a loop over key blocks."""
    src = planted(
        EX[2],
        ("for j0 in range(0, M, Bc):", "for j0 in range(0, 1):"),
        ("cols = j0 + tl.arange(0, Bc)", "cols = tl.arange(0, 128)"),
    )
    out = run_check(EX[2], src)
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
        EX[2],
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
    out = run_check(EX[2], src)
    assert_fails(
        out,
        "case 0 (one key block",
        "o is right, but each program read K 2 times over",
    )


@needs_triton
def test_kernel_without_jit_is_told_to_keep_it():
    out = run_check(EX[2], EX[2].solution.replace("@triton.jit\n", ""))
    assert_fails(out, "keep @triton.jit")


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
    exec(EX[2].solution, ns)
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
    exec(EX[2].solution, ns)
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


class _SoftmaxInTorch:
    """A `[grid]` that writes o with torch's softmax: no Triton at all."""

    def __getitem__(self, grid):
        def launch(q, k, v, o, scale, *args, **kwargs):
            o.copy_(torch.softmax(scale * q @ k.transpose(-1, -2), dim=-1) @ v)

        return launch


@needs_triton
def test_an_object_with_a_grid_that_is_no_triton_kernel_is_refused():
    out = _say(ct.check_triton_attention, _SoftmaxInTorch())
    assert_fails(out, "not a Triton kernel", "keep @triton.jit")


# ------------------------------------------------------------------------------ exercise 3: log2 units

LOG2_MISTAKES = {
    "lse left in natural-log units": (
        ("t - lse[:, None] * log2e", "t - lse[:, None]"),
        "yours subtracts lse in natural-log units",
    ),
    "t converted twice": (
        ("t - lse[:, None] * log2e", "(t - lse[:, None]) * log2e"),
        "yours multiplies t by log2 e again, but t already holds S·log2 e",
    ),
    "ln 2 for log2 e": (
        ("t - lse[:, None] * log2e", "t - lse[:, None] * 0.6931471805599453"),
        "yours converts lse with ln 2, which goes the wrong way",
    ),
    "exp for exp2": (
        ("np.exp2(", "np.exp("),
        "the kernel's exponential is exp2",
    ),
    "the tile normalised by its own row sum, lse ignored": (
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "e = np.exp2(t - t.max(axis=1, keepdims=True))\n"
            "    return e / e.sum(axis=1, keepdims=True)",
        ),
        "yours makes each row of the tile sum to 1, but the tile holds only some of the row's keys",
    ),
    "the tile's own max in place of lse": (
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "return np.exp2(t - t.max(axis=1, keepdims=True))",
        ),
        "one tile's max is not the row's",
    ),
    "lse along the keys": (
        ("lse[:, None]", "lse"),
        "subtract it as a column, lse[:, None]",
    ),
    "the natural exp, right value": (
        (
            "np.exp2(t - lse[:, None] * log2e)",
            "np.exp(t / log2e - lse[:, None])",
        ),
        "it calls exp (the natural exponential): the kernel's exponential is exp2",
    ),
    "math.exp, right value": (
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "import math\n    return np.vectorize(math.exp)(t / log2e - lse[:, None])",
        ),
        "it calls exp (the natural exponential)",
    ),
    "math.e ** x, right value": (
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "import math\n    return math.e ** (t / log2e - lse[:, None])",
        ),
        "it calls a power of base 2.71828",
    ),
    "numpy's exp under another name, right value": (
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "from numpy import exp as ex\n    return ex(t / log2e - lse[:, None])",
        ),
        "it calls exp (the natural exponential)",
    ),
    "torch's exp2": (
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "import torch\n    t, lse = torch.from_numpy(t), torch.from_numpy(lse)\n"
            "    return torch.exp2(t - lse[:, None] * log2e).numpy()",
        ),
        "this exercise asks for numpy",
    ),
}


@pytest.mark.parametrize("name", list(LOG2_MISTAKES))
def test_log2_mistakes(name):
    edit, says = LOG2_MISTAKES[name]
    assert_fails(run_check(EX[3], planted(EX[3], edit)), says)


def test_the_natural_exp_is_refused_through_a_helper_too():
    """np.exp hidden in a helper of the learner's own is found as well."""
    src = planted(
        EX[3],
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "return natural(t / log2e - lse[:, None])",
        ),
    )
    out = run_check(EX[3], "def natural(x):\n    return np.exp(x)\n\n\n" + src)
    assert_fails(out, "it calls exp (the natural exponential)")


def test_the_natural_exp_is_refused_under_a_global_alias():
    """`from numpy import exp as ex` at the top of the notebook, and np.power with base e."""
    src = planted(
        EX[3],
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "return ex(t / log2e - lse[:, None])",
        ),
    )
    out = run_check(EX[3], "from numpy import exp as ex\n\n\n" + src)
    assert_fails(out, "ex, which is numpy.exp")
    src = planted(
        EX[3],
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "return np.power(np.e, t / log2e - lse[:, None])",
        ),
    )
    assert_fails(run_check(EX[3], src), "a power of base 2.71828")


def test_a_power_of_two_is_the_kernel_s_exponential():
    src = planted(
        EX[3],
        (
            "return np.exp2(t - lse[:, None] * log2e)",
            "return 2.0 ** (t - lse[:, None] * log2e)",
        ),
    )
    out = run_check(EX[3], src)
    assert "✓" in out and "✗" not in out, out


def test_log2_cases_are_tiles_whose_rows_sum_to_less_than_one():
    """Every case is a tile of some of a row's keys, lse over the whole row: P's rows sum to less than 1."""
    seen = []

    def record(t, lse):
        seen.append(np.exp2(t - lse[:, None] * 1.4426950408889634))
        return seen[-1]

    for seed in range(20):
        seen.clear()
        _say(lambda f: ct.check_p_from_lse(f, seed=seed), record)
        assert len(seen) >= 6  # each case at least once
        assert all(p.sum(axis=1).max() < 0.99 for p in seen)


def test_log2_cases_are_drawn_fresh_and_a_table_fails():
    """A table of the answers to one run's cases fails the next run's: the cases are drawn afresh."""
    seen = {}

    def record(t, lse):
        seen[t.shape, float(t.flat[0])] = ct._p_from_lse(t, lse)
        return seen[t.shape, float(t.flat[0])]

    _say(ct.check_p_from_lse, record)
    table = dict(seen)
    out = _say(
        lambda f: ct.check_p_from_lse(f, seed=12345),
        lambda t, lse: table.get((t.shape, float(t.flat[0])), np.zeros_like(t)),
    )
    assert "✗" in out, out
