"""Notebook 11's exercises: lab's own answers refused by any route, and a learner's mod run in the numpy and torch
kernels and in flex_attention, as the notebook's objective promises (the planted mistakes of each mod are in
tests/test_masks.py)."""

import contextlib
import dataclasses
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


@pytest.mark.parametrize("number", [1, 2, 3])
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
    ],
    ids=[
        "the spec itself",
        "wrapped, an alias",
        "built beforehand",
        "through its module",
    ],
)
def test_mods_built_by_lab_are_refused(number, text, says):
    _refused(number, text, "case 0", says)


# ---------------------------------------------- lab.check_score_mod, on a clipped ALiBi (lab.clipped_alibi)

CLIPPED_ALIBI = """
def clipped_alibi(slopes, max_distance, N, M):
    off = M - N

    def score_mod(s, b, h, i, j):  # numpy arrays or torch tensors alike
        table = np.asarray(slopes)
        if isinstance(s, torch.Tensor):
            table = torch.as_tensor(slopes, dtype=s.dtype, device=s.device)
        return s - table[h] * abs(i + off - j).clip(max=max_distance)

    return score_mod
"""
SCORE_CHECK = """
lab.check_score_mod(
    clipped_alibi,
    lab.clipped_alibi,
    [
        (np.array([0.5, 0.25]), 4, 12, 12),
        (np.array([1.0, 0.1]), 2, 9, 15),
        (np.array([0.5, 2.0]), 3, 20, 12),
        (np.array([0.3, 0.3]), 100, 40, 40),
    ],
)
"""


def _score_check(solution: str) -> str:
    """lab.check_score_mod on `solution` (defining clipped_alibi), after the notebook's setup."""
    return run_check(dataclasses.replace(EX[1], check=SCORE_CHECK, before=[]), solution)


def test_the_score_check_passes_a_clipped_alibi():
    out = _score_check(CLIPPED_ALIBI)
    assert "clipped_alibi: ✓" in out and "✗" not in out, out
    assert "the numpy and torch kernels" in out


def test_a_score_mod_built_by_lab_is_refused():
    out = _score_check(
        source(
            """
            from lab.masks import clipped_alibi as ca
            def clipped_alibi(slopes, max_distance, N, M):
                return ca(slopes, max_distance, N, M)
            """
        )
    )
    assert "✗ case 0" in out and "calls lab.clipped_alibi" in out, out


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
    out = _score_check(
        source(
            """
            def clipped_alibi(slopes, max_distance, N, M):
                slopes, off = np.asarray(slopes), M - N
                return lambda s, b, h, i, j: s - slopes[h] * np.minimum(np.abs(i + off - j), max_distance)
            """
        )
    )
    assert "✗" in out and "✓" not in out, out
    assert (
        "the scores agree, but lab.flash_attention_torch refused yours: TypeError"
        in out
    )
    assert "torch.as_tensor(slopes, dtype=s.dtype, device=s.device)" in out
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
    out = _score_check(replace_code(CLIPPED_ALIBI, old, new))
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
        (
            "last = (i1 - 1) // Bc",
            "last = i1 // Bc",
            ["taken from key i1, one past the block", "i1 - 1"],
        ),
    ],
    ids=["first key block from the last row", "no clamp at key 0", "last key from i1"],
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
        (
            "(j > i + off - window)",
            "(j > i + off - window * dilation)",
            ["taps spread over window · dilation", "i + off - j < window"],
        ),
    ],
    ids=["one wider", "one narrower", "dilation from key 0", "window taps"],
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
        (
            2,
            "off = M - N",
            "off = N - M",
            ["shifts the diagonal the wrong way", "off = M - N"],
        ),
    ],
    ids=[
        "prefix j <= prefix",
        "prefix & for |",
        "prefix test on i",
        "prefix hidden after",
        "causal alone",
        "prefix offset reversed",
    ],
)
def test_a_planted_mod_gets_its_own_hint(number, old, new, says):
    out = run_check(EX[number], replace_code(EX[number].solution, old, new))
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "return s - table[h]",
            "return s + table[h]",
            ["yours adds the penalty", "s - slope * distance"],
        ),
        (
            "abs(i + off - j).clip(max=max_distance)",
            "(abs(i + off - j) * (abs(i + off - j) <= max_distance))",
            ["beyond max_distance no penalty", "slope * max_distance"],
        ),
    ],
    ids=["alibi sign", "alibi zero beyond"],
)
def test_a_planted_score_mod_gets_its_own_hint(old, new, says):
    out = _score_check(replace_code(CLIPPED_ALIBI, old, new))
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


# -------------------------------------------------- Exercise 4: the tiles of a causal document mask


def _run4(solution: str, check: str | None = None) -> str:
    """Exercise 4's check (or `check`) on `solution`, after the notebook's setup only: the count needs none of
    the earlier exercises' cells (whose checks run flex_attention, slowly)."""
    ns, out = {"__name__": "__exercise__"}, io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()):
        for src in EX[4].setup:
            exec(compile(src, "<setup>", "exec"), ns)
    with contextlib.redirect_stdout(out):
        exec(compile(solution, "<solution>", "exec"), ns)
        exec(compile(check or EX[4].check, "<check>", "exec"), ns)
    return out.getvalue()


def test_the_worked_document_count_passes():
    out = _run4(EX[4].solution)
    assert out.count("✓") == 1 and "✗" not in out, out
    assert (
        "case 0, (32, 32, 64) in tiles of 32 × 32: 11 empty, 4 partial, 1 full" in out
    )
    assert "(plain causal: 6, 4, 6)" in out and "N = 10,000,000 within 3 s" in out


def test_the_document_stub_reports_not_implemented():
    out = _run4(EX[4].stub)
    assert "document_tiles: not implemented yet" in out and "✗" not in out, out


LAST_FULL = "last = (i0 + 1) // Bc - 1 if i0 + 1 < N else -(-N // Bc) - 1"
DOCUMENT_PLANTED = [
    (
        "plain causal",
        [
            (
                "key_blocks(i0, min(i0 + Br, N), s, e, N, Bc)",
                "key_blocks(i0, min(i0 + Br, N), 0, N, N, Bc)",
            )
        ],
        ["✗ case 0 ", "the plain causal mask", "its own document"],
    ),
    (
        "a boundary across the rows ignored",
        [("if i1 > e:", "if False:")],
        ["✗ case 3 ", "a document boundary crosses", "no full tile"],
    ),
    (
        "a boundary across the keys ignored",
        [("first = -(-s // Bc)", "first = s // Bc")],
        ["✗ case 2 ", "ceil(s / Bc), not s // Bc"],
    ),
    (
        "the diagonal tile full",
        [(LAST_FULL, "last = i1 // Bc - 1 if i1 < N else -(-N // Bc) - 1")],
        ["✗ case 0 ", "the tile on the diagonal as full", "FIRST row i0"],
    ),
    (
        "the first row's own key left out",
        [(LAST_FULL, "last = i0 // Bc - 1")],
        ["✗ case 5 ", "j1 - 1 <= i0, not j1 <= i0"],
    ),
    (
        "off by one at a boundary",
        [("while ends[d] <= i0:", "while ends[d] < i0:")],
        [
            "✗ case 0 ",
            "the first token of a document in the previous one",
            "end is > i",
        ],
    ),
    (
        "the document of the last row",
        [("while ends[d] <= i0:", "while ends[d] <= min(i0 + Br, N) - 1:")],
        ["✗ case 3 ", "document from its LAST row", "the document of row i0"],
    ),
    (
        "the last, shorter key block never full",
        [(LAST_FULL, "last = (i0 + 1) // Bc - 1")],
        ["✗ case 7 ", "the last, shorter key block as full", "ends at key N - 1"],
    ),
    (
        "floor for ceil",
        [("tiles = -(-N // Br) * -(-N // Bc)", "tiles = (N // Br) * (N // Bc)")],
        ["✗ case 1 ", "yours add up to 36 tiles", "49", "a floor", "(ceil)"],
    ),
    (
        "the counts in another order",
        [
            (
                "return tiles - computed, computed - full, full",
                "return full, computed - full, tiles - computed",
            )
        ],
        [
            "✗ case 0 ",
            "yours (empty, partial, full) = (1, 4, 11), expected (11, 4, 1)",
            "another order",
        ],
    ),
]


@pytest.mark.parametrize(
    "label, changes, says", DOCUMENT_PLANTED, ids=[p[0] for p in DOCUMENT_PLANTED]
)
def test_a_planted_document_count_gets_its_own_hint(label, changes, says):
    src = EX[4].solution
    for old, new in changes:
        src = replace_code(src, old, new)
    out = _run4(src)
    assert "✗" in out and "✓" not in out, out
    for text in says:
        assert text in out, f"{text!r} not in:\n{out}"


@pytest.mark.parametrize(
    "text, says",
    [
        (
            """
            def document_tiles(lengths, Br, Bc):
                doc = np.repeat(np.arange(len(lengths)), lengths)
                N = len(doc)
                c = lab.block_mask(lab.document_mask(doc, doc), 1, 1, N, N, Br, Bc, causal=True).counts
                return c["empty"], c["partial"], c["full"]
            """,
            "calls lab.document_mask",
        ),
        (
            """
            from lab.masks import block_mask as bm
            def document_tiles(lengths, Br, Bc):
                doc = np.repeat(np.arange(len(lengths)), lengths)
                N = len(doc)
                keep = lambda b, h, i, j: doc[i] == doc[j]
                kind = bm(keep, 1, 1, N, N, Br, Bc, causal=True).kind
                return tuple(int((kind == k).sum()) for k in (0, 1, 2))
            """,
            "calls lab.block_mask",
        ),
        (
            """
            import lab.masks
            def document_tiles(lengths, Br, Bc):
                doc = np.repeat(np.arange(len(lengths)), lengths)
                N = len(doc)
                kind = lab.masks._tile_kinds(lambda b, h, i, j: doc[i] == doc[j], 1, 1, N, N, Br, Bc, True)
                return tuple(int((kind == k).sum()) for k in (0, 1, 2))
            """,
            "calls lab._tile_kinds",
        ),
        (
            "from lab.checks.masks import _document_counts as document_tiles\n",
            "calls lab.checks.masks._document_counts",
        ),
    ],
    ids=[
        "lab's document mask",
        "its block mask, an alias",
        "the block mask's helper",
        "the check's reference",
    ],
)
def test_labs_masks_and_the_checks_reference_are_refused(text, says):
    out = _run4(source(text))
    assert "✗ case 0 " in out and "✓" not in out and says in out, out


WHOLE_MASK = """
def document_tiles(lengths, Br, Bc):
    doc = np.repeat(np.arange(len(lengths)), lengths)
    N = len(doc)
    keep = (doc[:, None] == doc[None, :]) & (np.arange(N)[None, :] <= np.arange(N)[:, None])
    counts = [0, 0, 0]
    for i0 in range(0, N, Br):
        for j0 in range(0, N, Bc):
            tile = keep[i0 : i0 + Br, j0 : j0 + Bc]
            counts[2 if tile.all() else 1 if tile.any() else 0] += 1
    return tuple(counts)
"""
PER_TILE = """
def document_tiles(lengths, Br, Bc):
    doc = np.repeat(np.arange(len(lengths)), lengths)
    N, counts = len(doc), [0, 0, 0]
    for i0 in range(0, N, Br):
        for j0 in range(0, N, Bc):
            i = np.arange(i0, min(i0 + Br, N))[:, None]
            j = np.arange(j0, min(j0 + Bc, N))[None, :]
            tile = (doc[i] == doc[j]) & (j <= i)
            counts[2 if tile.all() else 1 if tile.any() else 0] += 1
    return tuple(counts)
"""
TILE_BY_TILE = """
import bisect


def document_tiles(lengths, Br, Bc):
    ends = np.cumsum(lengths).tolist()
    N, counts = ends[-1], [0, 0, 0]
    for i0 in range(0, N, Br):
        i1 = min(i0 + Br, N)
        d0, d1 = bisect.bisect_right(ends, i0), bisect.bisect_right(ends, i1 - 1)
        s = ends[d0] - lengths[d0]
        for j0 in range(0, N, Bc):
            j1 = min(j0 + Bc, N)
            full = d0 == d1 and j0 >= s and j1 - 1 <= i0
            counts[2 if full else 1 if s <= j1 - 1 and j0 <= i1 - 1 else 0] += 1
    return tuple(counts)
"""


@pytest.mark.parametrize(
    "text, says",
    [
        (
            WHOLE_MASK,
            [
                "✗ the memory case",
                "one tile of booleans is 1.00 MiB",
                "document boundaries",
            ],
        ),
        (
            PER_TILE,
            [
                "✗ the memory case",
                "one tile of booleans",
                "without evaluating the mask on a tile",
            ],
        ),
        (
            TILE_BY_TILE,
            ["✗ the speed case", "still running after 3 s", "count per query block"],
        ),
    ],
    ids=["the whole mask", "the mask tile by tile", "interval arithmetic tile by tile"],
)
def test_a_count_that_evaluates_the_mask_or_walks_every_tile_is_refused(text, says):
    out = _run4(text)
    assert "✗" in out and "✓" not in out, out
    for s in says:
        assert s in out, f"{s!r} not in:\n{out}"


def test_the_mask_tile_by_tile_passes_the_small_cases():
    """What the memory case refuses is right on the fixed cases: the memory, not the counts, refuses it."""
    check = EX[4].check.replace("check_document_tiles(document_tiles, cases)", "")
    check += "\ncheck_document_tiles(document_tiles, [c for c in cases if sum(c[0]) < 10**4], fresh=0)\n"
    out = _run4(PER_TILE, check)
    assert "✗ the memory case" in out and "✗ case" not in out, out


def _drawn_cases(seed: int) -> list:
    """The cases check_document_tiles gives a (correct) answer with `seed`, fixed ones included."""
    from lab.checks.masks import check_document_tiles

    ns, seen = {"__name__": "__exercise__"}, []
    exec("import numpy as np\n" + EX[4].solution, ns)
    count = ns["document_tiles"]

    def document_tiles(lengths, Br, Bc):
        seen.append((tuple(lengths), Br, Bc))
        return count(lengths, Br, Bc)

    with contextlib.redirect_stdout(io.StringIO()) as out:
        check_document_tiles(document_tiles, [((32, 32, 64), 32, 32)], seed=seed)
    assert "✓" in out.getvalue(), out.getvalue()
    return seen


def test_the_drawn_document_cases_repeat_with_their_seed():
    first, again, other = _drawn_cases(7), _drawn_cases(7), _drawn_cases(8)
    assert first == again and first != other
    assert (
        len(first) == 1 + 4 + 1 + 2
    )  # the fixed case, four drawn, a long one drawn, memory and speed
    assert 10**6 <= sum(first[-1][0]) < 10**7


def test_a_table_of_the_fixed_document_cases_fails_on_a_drawn_one():
    ns = {}
    exec("import numpy as np\n" + EX[4].solution, ns)
    fixed = re.findall(r"\(\([\d, _*]+\), \d+, \d+\)", EX[4].check)
    table = {eval(c)[0]: ns["document_tiles"](*eval(c)) for c in fixed if "**" not in c}
    out = _run4(
        "TABLE = "
        + repr(table)
        + "\ndocument_tiles = lambda L, Br, Bc: TABLE.get(tuple(L), (0, 0, 0))\n"
    )
    assert re.search(r"✗ case 1[1-4] ", out) and "seed=" in out, out


@pytest.mark.parametrize("how", list(EVASIONS))
def test_a_document_count_that_hides_from_the_watch_is_refused(how):
    out = _run4(evading(EX[4].solution, "document_tiles", how))
    assert "✗" in out and "✓" not in out and EVASIONS[how][1] in out, out


def test_the_checks_document_count_equals_the_block_mask():
    import numpy as np

    import lab
    from lab.checks.masks import _document_counts

    rng = np.random.default_rng(0)
    for n in range(300):
        high = 4 if n % 3 == 0 else 60  # a third with documents of 1 to 3 tokens
        lengths = rng.integers(1, high, size=int(rng.integers(1, 8)))
        Br, Bc, N = (
            int(rng.integers(1, 40)),
            int(rng.integers(1, 40)),
            int(lengths.sum()),
        )
        doc = np.repeat(np.arange(len(lengths)), lengths)
        c = lab.block_mask(
            lab.document_mask(doc, doc), 1, 1, N, N, Br, Bc, causal=True
        ).counts
        assert _document_counts(lengths, Br, Bc) == (
            c["empty"],
            c["partial"],
            c["full"],
        ), (lengths, Br, Bc)
