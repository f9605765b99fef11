"""Notebook 11's exercises: lab's own answers refused by any route, and a learner's mod run in the numpy and torch
kernels and in flex_attention, as the notebook's objective promises (the planted mistakes of each mod are in
tests/test_masks.py)."""

import contextlib
import io
import re
import sys
import types

import pytest
from exercise_support import EVASIONS, evading, exercises, replace_code, source

NAME = "11_masks_and_score_mods"
EX = {ex.number: ex for ex in exercises(NAME)}


def run_check(ex, solution: str) -> str:
    """exercise_support.run_check, with the cells run in a real module `__exercise__`: flex_attention's tracing reads
    a mod's globals through its module, as it reads `__main__` in a notebook."""
    module = types.ModuleType("__exercise__")
    ns, out = module.__dict__, io.StringIO()
    saved = sys.modules.get("__exercise__")
    sys.modules["__exercise__"] = module
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for src in ex.setup + ex.before:
                exec(compile(src, "<setup>", "exec"), ns)
        with contextlib.redirect_stdout(out):
            exec(compile(solution, "<solution>", "exec"), ns)
            exec(compile(ex.check, "<check>", "exec"), ns)
    finally:
        if saved is None:
            sys.modules.pop("__exercise__", None)
        else:
            sys.modules["__exercise__"] = saved
    return out.getvalue()


def _refused(number: int, text: str, *says: str) -> str:
    out = run_check(EX[number], source(text))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"
    return out


def test_the_notebook_has_five_checked_exercises():
    assert sorted(EX) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_worked_solutions_pass_in_every_kernel(number):
    out = run_check(EX[number], EX[number].solution)
    assert out.count("✓") == 1 and "✗" not in out, out
    if number > 1:
        assert "the numpy and torch kernels" in out


@pytest.mark.parametrize(
    "text, says",
    [
        (
            """
            def window_tiles(N, W, Br, Bc):
                return lab.window_tile_counts(N, N, W - 1, 0, Br, Bc)["computed"]
            """,
            "calls lab.window_tile_counts",
        ),
        (
            """
            from lab.mask_experiments import window_tile_counts as counts
            window_tiles = lambda N, W, Br, Bc: counts(N, N, W - 1, 0, Br, Bc)["computed"]
            """,
            "calls lab.window_tile_counts",
        ),
        (
            """
            def window_tiles(N, W, Br, Bc):
                mask = lab.sliding_window(W - 1, 0, N, N)
                return int((lab.block_mask(mask, 1, 1, N, N, Br, Bc).kind > 0).sum())
            """,
            "calls lab.block_mask",
        ),
    ],
    ids=["lab's count", "its module, an alias", "lab's block mask"],
)
def test_window_tiles_by_labs_count_is_refused(text, says):
    _refused(1, text, "case 0", says, "write it yourself")


@pytest.mark.parametrize(
    "number, text, says",
    [
        (2, "prefix_lm = lab.prefix_lm\n", "calls lab.prefix_lm"),
        (
            2,
            """
            from lab.masks import prefix_lm as spec
            def prefix_lm(prefix, N, M):
                mod = spec(prefix, N, M)
                return lambda b, h, i, j: mod(b, h, i, j) | False
            """,
            "calls lab.prefix_lm",
        ),
        (
            2,
            """
            CASES = [(3, 12, 12), (0, 9, 9), (40, 20, 30), (4, 30, 20), (20, 64, 80)]
            BUILT = {c: lab.prefix_lm(*c).fn for c in CASES}  # built before the check, kept in a table
            prefix_lm = lambda *c: BUILT[c]
            """,
            "calls lab.prefix_lm",
        ),
        (
            3,
            "import lab.masks\ndilated_window = lab.masks.dilated_window\n",
            "calls lab.dilated_window",
        ),
        (
            4,
            """
            from lab.masks import clipped_alibi as ca
            def clipped_alibi(slopes, max_distance, N, M):
                return ca(slopes, max_distance, N, M)
            """,
            "calls lab.clipped_alibi",
        ),
    ],
    ids=[
        "the spec itself",
        "wrapped, an alias",
        "built beforehand",
        "through its module",
        "score: an alias",
    ],
)
def test_mods_built_by_lab_are_refused(number, text, says):
    _refused(number, text, "case 0", says)


def test_a_table_of_the_fixed_window_cases_fails_on_a_drawn_one():
    import lab

    table = {
        c: lab.window_tile_counts(c[0], c[0], c[1] - 1, 0, c[2], c[3])["computed"]
        for c in [
            (256, 64, 32, 32),
            (1000, 100, 64, 48),
            (8192, 256, 256, 256),
            (77, 1, 8, 13),
            (300, 1000, 64, 64),
            (256, 33, 32, 32),
            (100, 17, 16, 16),
            (256, 65, 32, 32),
            (256, 34, 32, 32),
            (240, 49, 16, 48),
            (240, 50, 16, 48),
        ]
    }
    out = run_check(
        EX[1],
        "TABLE = "
        + repr(table)
        + "\nwindow_tiles = lambda N, W, Br, Bc: TABLE.get((N, W, Br, Bc), 0)\n",
    )
    assert re.search(r"✗ case 1[1-4] ", out) and "seed=" in out, out


def test_a_numpy_only_score_mod_is_told_how_to_run_in_torch():
    """The form the worked answer had before: right on numpy arrays, a TypeError on torch tensors."""
    out = _refused(
        4,
        """
        def clipped_alibi(slopes, max_distance, N, M):
            slopes, off = np.asarray(slopes), M - N
            return lambda s, b, h, i, j: s - slopes[h] * np.minimum(np.abs(i + off - j), max_distance)
        """,
        "the scores agree, but lab.flash_attention_torch refused yours: TypeError",
        "torch.as_tensor(slopes, dtype=s.dtype, device=s.device)",
    )
    assert "flash_attention_numpy" not in out


def test_a_numpy_only_mask_mod_is_told_how_to_run_in_torch():
    out = _refused(
        2,
        """
        def prefix_lm(prefix, N, M):
            return lambda b, h, i, j: np.logical_or(j < prefix, j <= i + M - N).astype(bool)
        """,
        "the masks agree, but lab.flash_attention_torch",
    )
    assert "abs(x), x.clip(max=D)" in out or "differs from the reference" in out


@pytest.mark.parametrize("how", list(EVASIONS))
@pytest.mark.parametrize("number, name", [(1, "window_tiles"), (2, "prefix_lm")])
def test_an_answer_that_hides_from_the_watch_is_refused(number, name, how):
    out = run_check(EX[number], evading(EX[number].solution, name, how))
    assert "✗" in out and "✓" not in out and EVASIONS[how][1] in out, out


# ------------------------------------------------------------------ Exercise 5: the hooks inside the tiled loop


def _verdict(out: str, name: str) -> str:
    return next((line for line in out.splitlines() if line.startswith(f"{name}:")), "")


def _run5(solution: str) -> str:
    """Exercise 5's check on `solution`, after the notebook's setup only: the loop needs none of the earlier
    exercises' cells (whose checks run flex_attention, slowly)."""
    ns, out = {"__name__": "__exercise__"}, io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()):
        for src in EX[5].setup:
            exec(compile(src, "<setup>", "exec"), ns)
    with contextlib.redirect_stdout(out):
        exec(compile(solution, "<solution>", "exec"), ns)
        exec(compile(EX[5].check, "<check>", "exec"), ns)
    return out.getvalue()


def test_the_worked_loop_passes_both_checks():
    out = _run5(EX[5].solution)
    assert "tile_kinds: ✓" in out and "masked_attention: ✓" in out and "✗" not in out, (
        out
    )
    assert "empty ones skipped" in out and "score_mod before the mask" in out


def test_the_loop_stub_reports_not_implemented():
    out = _run5(EX[5].stub)
    assert out.count("not implemented yet") == 2 and "✗" not in out, out


MASK_FIRST = (
    "s = score_mod(s, 0, 0, i, j)",
    "pass",
)
LOOP_PLANTED = [
    (
        "alpha inverted",
        [("np.exp(m - shift)", "np.exp(shift - m)")],
        "masked_attention",
        ["the rescale is inverted"],
    ),
    (
        "mask before score_mod",
        [
            MASK_FIRST,
            (
                "m_new = np.maximum(m, s.max(axis=1, keepdims=True))",
                "s = score_mod(s, 0, 0, i, j)\n            m_new = np.maximum(m, s.max(axis=1, keepdims=True))",
            ),
        ],
        "masked_attention",
        ["soft-cap", "the mask was applied before score_mod", "−cap"],
    ),
    (
        "max before the mask",
        [
            ("s = score_mod(s, 0, 0, i, j)", "s = raw = score_mod(s, 0, 0, i, j)"),
            (
                "m_new = np.maximum(m, s.max(axis=1, keepdims=True))",
                "m_new = np.maximum(m, raw.max(axis=1, keepdims=True))",
            ),
        ],
        "masked_attention",
        ["+1000", "running max must be taken after the mask"],
    ),
    (
        "partial tile skipped",
        [
            (
                "kinds[I, J] = 2 if tile.all() else 1 if tile.any() else 0",
                "kinds[I, J] = 2 if tile.all() else 0",
            )
        ],
        "masked_attention",
        ["skipped tile", "which is partial", "only empty tiles may be skipped"],
    ),
    (
        "empty tiles computed",
        [("if kinds[I, J] == 0:", "if False:")],
        "masked_attention",
        ["of them empty", "skip the empty tiles"],
    ),
    (
        "no guard, o = acc / l",
        [
            ("shift = np.where(np.isneginf(m_new), 0.0, m_new)", "shift = m_new"),
            (
                "o[i0 : i0 + len(i)][seen] = acc[seen] / l[seen]",
                "o[i0 : i0 + len(i)] = acc / l",
            ),
            (
                "lse[i0 : i0 + len(i)][seen] = m[seen, 0] + np.log(l[seen, 0])",
                "lse[i0 : i0 + len(i)] = (m + np.log(l))[:, 0]",
            ),
        ],
        "masked_attention",
        ["NaN in row", "e^(−∞ − (−∞)) is NaN", "guard"],
    ),
    (
        "the mask skipped on partial tiles",
        [("if kinds[I, J] == 1:", "if kinds[I, J] == 3:")],
        "masked_attention",
        ["the mask was not applied inside the tiles you computed"],
    ),
    (
        "block mask by floor division",
        [
            (
                "kinds = np.zeros((-(-N // Br), -(-M // Bc)), dtype=int)",
                "kinds = np.zeros((N // Br, M // Bc), dtype=int)",
            )
        ],
        "tile_kinds",
        ["expected", "(ceil(N / Br), ceil(M / Bc))"],
    ),
    (
        "full tiles called partial",
        [
            (
                "kinds[I, J] = 2 if tile.all() else 1 if tile.any() else 0",
                "kinds[I, J] = 1 if tile.any() else 0",
            )
        ],
        "tile_kinds",
        ["so it is full (2); yours says 1"],
    ),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "label, changes, name, says", LOOP_PLANTED, ids=[p[0] for p in LOOP_PLANTED]
)
def test_a_planted_loop_is_diagnosed(label, changes, name, says):
    src = EX[5].solution
    for old, new in changes:
        src = replace_code(src, old, new)
    out = _run5(src)
    line = _verdict(out, name)
    assert "✗" in line, out
    for text in says:
        assert text in out, f"{text!r} not in:\n{out}"


UNTILED = """
def tile_kinds(mask_mod, N, M, Br, Bc):
    raise NotImplementedError


def masked_attention(q, k, v, score_mod, mask_mod, Br, Bc):
    N, M = q.shape[0], k.shape[0]
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    s = np.where(mask_mod(0, 0, i, j), score_mod(q @ k.T / np.sqrt(q.shape[1]), 0, 0, i, j), -np.inf)
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - np.where(np.isneginf(m), 0, m))
    l = p.sum(axis=1, keepdims=True)
    return np.where(l > 0, p @ v / np.where(l > 0, l, 1), 0), np.where(l[:, 0] > 0, (m + np.log(np.where(l > 0, l, 1)))[:, 0], -np.inf)
"""
CALLS_LAB = """
def tile_kinds(mask_mod, N, M, Br, Bc):
    return lab.block_mask(mask_mod, 1, 1, N, M, Br, Bc).kind[0, 0]


def masked_attention(q, k, v, score_mod, mask_mod, Br, Bc):
    o, lse = lab.flash_attention_numpy(q[None, None], k[None, None], v[None, None], block_q=Br, block_k=Bc,
                                       score_mod=score_mod, mask_mod=mask_mod)
    return o[0, 0], lse[0, 0]
"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_an_untiled_answer_is_refused():
    out = _run5(UNTILED)
    assert "✗" in _verdict(out, "masked_attention"), out
    assert "which is not one tile" in out


def test_labs_block_mask_and_kernel_are_refused():
    out = _run5(CALLS_LAB)
    assert "calls lab.block_mask" in _verdict(out, "tile_kinds"), out
    assert "calls lab.flash_attention_numpy" in _verdict(out, "masked_attention"), out


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("last = (i1 - 1) // Bc", "last = i0 // Bc", ["taken from its first row"]),
        (
            "for i0 in range(\n        0, N, Br\n    ):",
            "for i0 in range(0, N - N % Br, Br):",
            ["without the last, shorter query block", "does not divide N"],
        ),
    ],
    ids=["last key block from the first row", "short query block dropped"],
)
def test_a_planted_window_count_is_named(old, new, says):
    out = run_check(EX[1], replace_code(EX[1].solution, old, new))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"


def test_a_prefix_lm_derived_by_cases_passes():
    """Exercise 2 asks for the mask derived by the query's position: the case split is the same mask."""
    old = "return lambda b, h, i, j: (j < prefix) | (j <= i + off)"
    new = (
        "return lambda b, h, i, j: ((i + off < prefix) & (j < prefix)) | (j <= i + off)"
    )
    out = run_check(EX[2], replace_code(EX[2].solution, old, new))
    assert "prefix_lm: ✓" in out and "✗" not in out, out


def test_a_top_left_prefix_lm_is_named():
    old = "return lambda b, h, i, j: (j < prefix) | (j <= i + off)"
    new = "return lambda b, h, i, j: (j < prefix) | (j <= i)"
    out = run_check(EX[2], replace_code(EX[2].solution, old, new))
    assert "✗ case 3" in out and "aligned top-left" in out, out


def test_a_top_left_clipped_alibi_is_named():
    old = "abs(i + off - j)"
    new = "abs(i - j)"
    out = run_check(EX[4], replace_code(EX[4].solution, old, new))
    assert "✗ case 1" in out and "aligned top-left" in out, out


def test_the_per_block_window_count_equals_the_interval_arithmetic():
    import numpy as np

    import lab
    from lab.checks.masks import _window_computed

    rng = np.random.default_rng(0)
    for _ in range(200):
        N, W = int(rng.integers(1, 600)), int(rng.integers(1, 700))
        Br, Bc = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        want = lab.window_tile_counts(N, N, W - 1, 0, Br, Bc)["computed"]
        assert _window_computed(N, W, Br, Bc) == want, (N, W, Br, Bc)


CORNERS = """
def tile_kinds(mask_mod, N, M, Br, Bc):
    kinds = np.zeros((-(-N // Br), -(-M // Bc)), dtype=int)
    for I in range(kinds.shape[0]):
        for J in range(kinds.shape[1]):
            i = np.array([[I * Br], [min((I + 1) * Br, N) - 1]])
            j = np.array([[J * Bc, min((J + 1) * Bc, M) - 1]])
            corners = np.broadcast_to(mask_mod(0, 0, i, j), (2, 2))
            kinds[I, J] = 2 if corners.all() else 1 if corners.any() else 0
    return kinds
"""


@pytest.mark.parametrize("seed", range(6))
def test_a_corner_only_block_mask_fails_on_every_draw(seed):
    from lab.checks.masked_loop import check_tile_kinds

    ns = {}
    exec("import numpy as np\n" + CORNERS, ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check_tile_kinds(ns["tile_kinds"], seed=seed)
    assert "✗" in out.getvalue(), out.getvalue()


FULL_SOFTMAX_PER_TILE = """
def tile_kinds(mask_mod, N, M, Br, Bc):
    raise NotImplementedError


def masked_attention(q, k, v, score_mod, mask_mod, Br, Bc):
    N, M = q.shape[0], k.shape[0]
    S = np.full((N, M), -np.inf)  # the whole score matrix, filled tile by tile
    for i0 in range(0, N, Br):
        for j0 in range(0, M, Bc):
            i = np.arange(i0, min(i0 + Br, N))[:, None]
            j = np.arange(j0, min(j0 + Bc, M))[None, :]
            keep = np.broadcast_to(mask_mod(0, 0, i, j), (len(i), j.shape[1]))
            if keep.any():
                s = score_mod(q[i0 : i0 + Br] @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1]), 0, 0, i, j)
                S[i0 : i0 + Br, j0 : j0 + Bc] = np.where(keep, s, -np.inf)
    m = S.max(axis=1, keepdims=True)
    p = np.exp(S - np.where(np.isneginf(m), 0, m))
    l = p.sum(axis=1, keepdims=True)
    o = np.where(l > 0, p @ v / np.where(l > 0, l, 1), 0)
    return o, np.where(l[:, 0] > 0, (m + np.log(np.where(l > 0, l, 1)))[:, 0], -np.inf)
"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_whole_softmax_that_calls_the_hooks_per_tile_is_caught():
    src = FULL_SOFTMAX_PER_TILE.replace("raise NotImplementedError", "return None")
    out = _run5(src)
    assert "✗" in _verdict(out, "masked_attention"), out
    assert "N × M float64 array" in out and "online softmax" in out, out


LOOP_HINTS = [
    (
        "no scale",
        [
            (
                "scale = q.shape[0], k.shape[0], 1 / np.sqrt(q.shape[1])",
                "scale = q.shape[0], k.shape[0], 1.0",
            )
        ],
        ["without the scale", "√d"],
    ),
    (
        "float32 state",
        [
            (
                "acc = np.zeros((len(i), v.shape[1]))",
                "acc = np.zeros((len(i), v.shape[1]), np.float32)",
            ),
            (
                "p, alpha = np.exp(s - shift), np.exp(m - shift)",
                "p, alpha = np.exp(s - shift).astype(np.float32), np.exp(m - shift)",
            ),
        ],
        ["float32 rounding", "float64"],
    ),
    (
        "float16 state",
        [
            (
                "acc = np.zeros((len(i), v.shape[1]))",
                "acc = np.zeros((len(i), v.shape[1]), np.float16)",
            ),
            (
                "p, alpha = np.exp(s - shift), np.exp(m - shift)",
                "p, alpha = np.exp(s - shift).astype(np.float16), np.exp(m - shift)",
            ),
        ],
        ["about 3 significant digits", "float16", "float64"],
    ),
    (
        "last block not clipped",
        [
            (
                "i = np.arange(i0, min(i0 + Br, N))[:, None]",
                "i = np.arange(i0, i0 + Br)[:, None]",
            ),
        ],
        ["raised", "the last block may be shorter"],
    ),
    (
        "lse without m",
        [
            (
                "lse[i0 : i0 + len(i)][seen] = m[seen, 0] + np.log(l[seen, 0])",
                "lse[i0 : i0 + len(i)][seen] = np.log(l[seen, 0])",
            )
        ],
        ["o is right but lse is not", "yours is log l, without m"],
    ),
    (
        "lse plus one",
        [
            (
                "lse[i0 : i0 + len(i)][seen] = m[seen, 0] + np.log(l[seen, 0])",
                "lse[i0 : i0 + len(i)][seen] = m[seen, 0] + np.log(l[seen, 0]) + 1",
            )
        ],
        ["lse is off by +1 on every row"],
    ),
    (
        "lse 0 on a row with no key",
        [("np.full(N, -np.inf)", "np.zeros(N)")],
        ["sees no key and got lse = 0", "keeps lse = −∞"],
    ),
    (
        "tile-local indices",
        [
            ("s = score_mod(s, 0, 0, i, j)", "s = score_mod(s, 0, 0, i - i0, j - j0)"),
            (
                "s = np.where(mask_mod(0, 0, i, j), s, -np.inf)",
                "s = np.where(mask_mod(0, 0, i - i0, j - j0), s, -np.inf)",
            ),
        ],
        ["starting at 0", "local", "global ones"],
    ),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "label, changes, says", LOOP_HINTS, ids=[h[0] for h in LOOP_HINTS]
)
def test_a_planted_loop_gets_its_own_hint(label, changes, says):
    src = EX[5].solution
    for old, new in changes:
        src = replace_code(src, old, new)
    out = _run5(src)
    assert "✗" in _verdict(out, "masked_attention"), out
    for text in says:
        assert text in out, f"{text!r} not in:\n{out}"


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "first = max(0, i0 - (W - 1)) // Bc",
            "first = max(0, i1 - 1 - (W - 1)) // Bc",
            ["taken from its last row's window", "i0 - (W - 1)"],
        ),
        (
            "first = max(0, i0 - (W - 1)) // Bc",
            "first = (i0 - (W - 1)) // Bc",
            ["no max(0, ·)", "before key 0"],
        ),
    ],
    ids=["first key block from the last row", "no clamp at key 0"],
)
def test_a_planted_window_start_is_named(old, new, says):
    out = run_check(EX[1], replace_code(EX[1].solution, old, new))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"


def test_an_estimated_window_count_is_told_to_count_exactly():
    estimate = (
        "def window_tiles(N, W, Br, Bc):\n"
        "    return round(-(-N // Br) * (W / Bc + 1))\n"
    )
    out = run_check(EX[1], estimate)
    assert "✗" in out and "an estimate" in out and "exact" in out, out


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("(j > i + off - window)", "(j >= i + off - window)", ["a window one wider"]),
        ("(j > i + off - window)", "(j > i + off - window + 1)", ["one narrower"]),
        (
            "((i + off - j) % dilation == 0)",
            "(j % dilation == 0)",
            ["counted from key 0", "i + off - j"],
        ),
    ],
    ids=["one wider", "one narrower", "dilation from key 0"],
)
def test_a_planted_dilated_window_is_diagnosed(old, new, says):
    out = run_check(EX[3], replace_code(EX[3].solution, old, new))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"


@pytest.mark.parametrize(
    "number, old, new, says",
    [
        (2, "(j < prefix)", "(j <= prefix)", ["one prefix key too many", "j < prefix"]),
        (
            2,
            "(j < prefix) | (j",
            "(j < prefix) & (j",
            ["joins the two conditions with &", "|"],
        ),
        (
            4,
            "return s - table[h]",
            "return s + table[h]",
            ["yours adds the penalty", "s - slope * distance"],
        ),
        (
            4,
            "abs(i + off - j).clip(max=max_distance)",
            "(abs(i + off - j) * (abs(i + off - j) <= max_distance))",
            ["beyond max_distance no penalty", "slope * max_distance"],
        ),
        (
            2,
            "(j < prefix) | (j <= i + off)",
            "((i < prefix) & (j < prefix)) | (j <= i + off)",
            ["tests whether the query is in the prompt with i", "i + off < prefix"],
        ),
        (
            2,
            "(j < prefix) | (j <= i + off)",
            "((i + off < prefix) & (j < prefix)) | ((j <= i + off) & (j >= prefix))",
            ["a query after the prompt does not see the prompt"],
        ),
        (
            2,
            "(j < prefix) | (j <= i + off)",
            "(j <= i + off)",
            ["yours is the causal mask", "j < prefix"],
        ),
    ],
    ids=[
        "prefix j <= prefix",
        "prefix & for |",
        "alibi sign",
        "alibi zero beyond",
        "prefix test on i",
        "prefix hidden after",
        "causal alone",
    ],
)
def test_a_planted_mod_gets_its_own_hint(number, old, new, says):
    out = run_check(EX[number], replace_code(EX[number].solution, old, new))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_loop_without_the_guard_is_named():
    old = "shift = np.where(\n                np.isneginf(m_new), 0.0, m_new\n            )"
    src = replace_code(EX[5].solution, old, "shift = m_new")
    out = _run5(src)
    assert "✗" in _verdict(out, "masked_attention"), out
    assert "guard" in out and "e^(−∞ − (−∞)) is NaN" in out, out
