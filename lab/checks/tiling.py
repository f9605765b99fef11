"""Checks for the tiling exercises: causal tile counts, fa2's HBM bytes, the widest key block, the tiled FA2 forward.

- `check_tile_row(fn)`          : `fn(q, k, v, i, Br, Bc, causal) -> (O_i, states)`, one query block's row of tiles.
- `check_causal_tile_counts(fn)`: `fn(N, M, Br, Bc) -> (computed, masked)` tiles of a bottom-right causal kernel.
- `check_fa2_hbm_bytes(fn)`     : `fn(N, d, Br, Bc, itemsize, causal) -> bytes` that fa2 moves (N = M, dv = d).
- `check_fa1_hbm_bytes(fn)`     : the same for fa1, the key blocks outside.
- `check_widest_key_block(fn)`  : `fn(sram_bytes, d, Br, itemsize) -> Bc`, the largest whose step fits.
- `check_a100_fits(fn)`         : `fn(d, Br, Bc, warps) -> bool`, one step within an A100 SM's two budgets.
- `check_tiled_forward(fn)`     : `fn(q, k, v, Br, Bc, causal) -> (o, lse, tiles)`, FlashAttention-2's forward with
  causal tile skipping and a per-tile load report: values, then k and v as `BlockLoadArray`s counting the rows
  loaded against the report, then tracemalloc's peak (an N × M or Br × M score array).
Each prints one line on a pass; on a failure the case (parameters named), what differs and where, and a hint.

Taught in: notebooks/05_tiling.ipynb, notebooks/05_tiling_traffic.ipynb
"""

from __future__ import annotations

import warnings

import numpy as np

from ..attention import attention_reference, causal_mask
from ..exercises import diagnose, raised_at, seed_note
from ..memory import peak_bytes
from ..tiling import _row_blocks, flash_counts, onchip_fits, step_footprint
from ._support import _fresh, _refusal, _settled, _watching
from .one_pass import RUNNING_MAX

__all__ = [
    "check_tile_row",
    "check_causal_tile_counts",
    "check_fa2_hbm_bytes",
    "check_widest_key_block",
    "check_a100_fits",
    "check_fa2_tile_choice",
    "check_tiled_forward",
    "check_fa1_hbm_bytes",
    "BlockLoadArray",
]


def _first(alternatives, got, default):
    """The text of the first (answer, text) whose answer equals `got`, else `default`."""
    return next(
        (
            text
            for answer, text in alternatives
            if diagnose(got, answer, rtol=0, atol=0) is None
        ),
        default,
    )


# lab's answers to the tiling exercises, refused by whatever name reaches them
_COURSE = (
    "tile_grid",
    "tile_counts",
    "causal_tiles_formula",
    "standard_traffic",
    "flash_counts",
    "flash_traffic_bytes",
    "theorem2_bytes",
    "flash_peak_bytes",
    "fa_block_sizes",
    "onchip_fits",
    "attention_reference",
    "attention_naive",
    "flash_attention_numpy",
    "one_pass_attention",
    "attention_row_one_pass",
    "online_normalizer",
    "merge_states",
    "merge_outputs",
    "partial_state",
    "block_mask",  # notebook 11's tile classifier: the tile kinds of exercise 1, whole
    "tiling._row_blocks",  # the key blocks each query block visits: tile_counts' own sum
    "masks._tile_kinds",  # block_mask's classifier: empty, partial or full per tile
)


def _check(
    fn,
    reference,
    cases,
    fields,
    hint,
    name=None,
    names=None,
    integer=False,
    seed=None,
    course=_COURSE,
) -> None:
    """Exact answers case by case, each shown with its parameters named (`integer`: an int is due): one line on a pass,
    else what failed; a run of lab's answers `course` is refused by name (`_watching`)."""
    name = name or getattr(fn, "__name__", "your function")
    for i, case in enumerate(cases):
        shown = (
            f"case {i} ("
            + ", ".join(f"{f} = {x}" for f, x in zip(fields.split(), case))
            + ")"
        )
        ok, got = _attempt(name, fn, shown, case, course=course)
        if not ok:
            print(seed_note(seed), end="")
            return
        if isinstance(got, _Refused):
            return print(f"{name}: ✗ {shown}: {_refusal(got.called)}")
        problem = diagnose(got, want := reference(*case), names=names, rtol=0, atol=0)
        if (
            problem is None
            and integer
            and (isinstance(got, bool) or not isinstance(got, (int, np.integer)))
        ):
            problem = f"returned {got!r}, a {type(got).__name__}: the answer is a whole number, an int"
        if problem is not None:
            return print(
                f"{name}: ✗ {shown}: {problem}\n  hint: {hint(case, got, want)}\n"
                + seed_note(seed),
                end="",
            )
    print(f"{name}: ✓ passed {len(cases)} cases")


# ------------------------------------------------------------------------------ part 1, exercise 1: one row of tiles
def _row_walk(q, k, v, i, Br, Bc, causal, slip=None):
    """(O_i, [(j, m, l), ...]): query block i's walk along its row of tiles, fa2's update after each computed tile.

    `slip` plants a classic mistake: "block max" (m' = the tile's max alone), "no alpha" (l, acc not rescaled),
    "alpha inverted" (e^(m' - m)), "no partial" (the last, partial key block dropped), "no skip" (hidden tiles
    computed), "no mask" (the mask left out inside a computed tile), "top-left" (c <= r), "first query" (a tile
    skipped unless its first query sees its first key), "no scale", "unnormalized" (o = acc)."""
    N, M = len(q), len(k)
    r0, r1 = i * Br, min((i + 1) * Br, N)
    off = 0 if slip == "top-left" else M - N
    rows = np.arange(r0, r1)[:, None]
    m, l = np.full(r1 - r0, -np.inf), np.zeros(r1 - r0)
    acc = np.zeros((r1 - r0, v.shape[1]))
    states = []
    scale = 1.0 if slip == "no scale" else 1 / np.sqrt(q.shape[1])
    for j0 in range(0, M - M % Bc if slip == "no partial" else M, Bc):
        j1 = min(j0 + Bc, M)
        last = r0 if slip == "first query" else r1 - 1
        if causal and slip != "no skip" and j0 > last + off:
            continue
        s = q[r0:r1] @ k[j0:j1].T * scale  # (rows, keys)
        if causal and slip != "no mask":
            s = np.where(np.arange(j0, j1)[None, :] <= rows + off, s, -np.inf)
        top = s.max(axis=1)
        m_new = top if slip == "block max" else np.maximum(m, top)
        with np.errstate(invalid="ignore", over="ignore"):
            alpha = {
                "no alpha": np.ones_like(m),
                "alpha inverted": np.exp(m_new - m),
            }.get(slip, np.exp(m - m_new))
            alpha = (
                np.where(np.isfinite(alpha), alpha, 0.0)
                if slip == "alpha inverted"
                else alpha
            )
            p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ v[j0:j1]
        m = m_new
        states.append((j0 // Bc, m.copy(), l.copy()))
    return (acc if slip == "unnormalized" else acc / l[:, None]), states


_ROW_SLIPS = {
    "block max": "m after each tile must be the max over every key seen so far, not the tile's own max: a key "
    "block with larger scores came earlier in this row",
    "no alpha": "when m moves to m', l and acc were summed against the old m: both must be rescaled by "
    "alpha = e^(m - m') before this tile's terms are added",
    "alpha inverted": "alpha rescales sums taken against the old m to the new, larger m': e^(m - m') <= 1, not "
    "e^(m' - m)",
    "no partial": "the last key block is partial: M is not a multiple of Bc, and its last M - (Tc-1)·Bc keys "
    "count too (walk j0 = 0, Bc, 2Bc, ... while j0 < M, and cut the block at M)",
    "no skip": "a tile whose every pair is hidden (its block's last query does not see its first key) is skipped: "
    "never loaded, computed or listed in the states",
    "first query": "a tile is computed when any pair in it is visible: the block's last query against the tile's "
    "first key, not its first query",
    "no mask": "inside a tile the causal line crosses, the hidden pairs (key c > r + M - N) must be set to -inf "
    "before the max and the exponentials",
    "top-left": "the mask is bottom-right aligned, as in notebook 03: key c is visible to query r when "
    "c <= r + (M - N), not c <= r",
    "no scale": "the scores are scaled: s = q·k / sqrt(d)",
    "unnormalized": "acc is Σ e^(s - m) v: the output is acc / l, divided once at the end",
}


def _row_cases(rng):
    """(label, q, k, v, i, Br, Bc, causal): the figure's 12 × 16 grid, then fresh ones (partial tiles, N < M, a high
    key block first or last)."""
    fig = _fill_qk()
    vs = rng.standard_normal((16, 3))  # (M, dv)
    cases = [
        ("the figure's grid, block 1", fig[0], fig[1], vs, 1, 4, 4, False),
        ("the figure's grid, causal, block 0", fig[0], fig[1], vs, 0, 4, 4, True),
        ("the figure's grid, Br = 3, Bc = 6", fig[0], fig[1], vs, 1, 3, 6, True),
        ("the figure's grid, Br = 3, Bc = 2", fig[0], fig[1], vs, 1, 3, 2, True),
    ]
    for label, N, M, Br, Bc, first in (
        ("a high key block first", 12, 16, 4, 4, True),
        ("a high key block last, partial", 10, 14, 4, 4, False),
        ("fresh, partial tiles", 9, 13, 4, 5, None),
    ):
        d = int(rng.integers(3, 7))
        q = rng.standard_normal((N, d)) + (0 if first is None else 1.0)  # (N, d)
        k = rng.standard_normal((M, d)) - (0 if first is None else 0.5)  # (M, d)
        if (
            first is not None
        ):  # one key block far above the rest, for every row of block 1
            at = slice(0, 4) if first else slice(M - M % 4 or M - 4, M)
            k[at] += 2.5
        v = rng.standard_normal((M, int(rng.integers(2, 5))))  # (M, dv)
        i = 1
        cases += [
            (label, q, k, v, i, Br, Bc, False),
            (label + ", causal", q, k, v, i, Br, Bc, True),
        ]
    return cases


def _fill_qk():
    """The q, k of notebook 05's tile-fill figure (N = 12, M = 16, d = 4, seed 0)."""
    from ..figures.tiling import tile_fill_state

    st = tile_fill_state(12, 16, 4, 4, 0, 0)
    return st["q"], st["k"]


def _row_states(got):
    """The learner's states as [(j, m, l)] of ints and float arrays, or a string saying why they are not."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return "return a pair (O_i, states)"
    states = got[1]
    try:
        out = [
            (int(j), np.asarray(m, float), np.asarray(l, float)) for j, m, l in states
        ]
    except (TypeError, ValueError):
        return "states must be a list of (j, m, l), one triple per computed tile"
    return out


def _same_row(got, want, rtol=1e-9) -> bool:
    o, states = got
    wo, ws = want
    if np.shape(o) != np.shape(wo) or [j for j, *_ in states] != [j for j, *_ in ws]:
        return False
    close = lambda a, b: (
        np.shape(a) == np.shape(b)
        and np.allclose(a, b, rtol=rtol, atol=1e-12, equal_nan=True)
    )
    return close(o, wo) and all(
        close(m, a) and close(l, b) for (_, m, l), (_, a, b) in zip(states, ws)
    )


def _row_problem(got, want, case) -> str | None:
    """Where the learner's walk first differs from the reference, in words (None when it does not)."""
    label, q, k, v, i, Br, Bc, causal = case
    o, states = got
    js, wjs = [j for j, *_ in states], [j for j, *_ in want[1]]
    if js != wjs:
        return f"tiles computed: yours j = {js}, expected j = {wjs}"
    for (j, m, l), (_, wm, wl) in zip(states, want[1]):
        for name, a, b in (("m", m, wm), ("l", l, wl)):
            problem = diagnose(a, b, rtol=1e-9, atol=1e-12)
            if problem is not None:
                return f"after tile ({i}, {j}), {name}: {problem}"
    problem = diagnose(np.asarray(o, float), want[0], rtol=1e-9, atol=1e-12)
    return None if problem is None else f"the output O_i: {problem}"


def check_tile_row(fn, *, seed: int | None = None) -> None:
    """Check exercise 1 of 05_tiling: `fn(q, k, v, i, Br, Bc, causal) -> (O_i, states)`, query block i's walk along
    its row of tiles (fa2's inner loop), `states` the list of (j, m, l) after each tile it computes (skipped tiles
    left out). Cases: the tile-fill figure's 12 × 16 grid (its m and l), then fresh ones with partial tiles and one
    key block far above the rest, first or last; each hint names the classic slip it recognises.
    Taught in: notebooks/05_tiling.ipynb"""
    name = getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cases = _row_cases(rng)
    course = _COURSE + ("figures.tiling.tile_fill_state", "checks.tiling._row_walk")
    for n, case in enumerate(cases):
        label, q, k, v, i, Br, Bc, causal = case
        shown = f"case {n}: {label} (N = {len(q)}, M = {len(k)}, i = {i}, Br = {Br}, Bc = {Bc}, causal = {causal})"
        ok, got = _attempt(
            name,
            fn,
            shown,
            (q.copy(), k.copy(), v.copy(), i, Br, Bc, causal),
            course=course,
        )
        if not ok:
            return print(seed_note(seed), end="")
        if isinstance(got, _Refused):
            return print(f"{name}: ✗ {shown}: {_refusal(got.called)}")
        raw = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
        states = _row_states(got)
        if isinstance(states, str):
            return print(f"{name}: ✗ {shown}: {states}\n" + seed_note(seed), end="")
        got = (got[0], states)
        want = _row_walk(q, k, v, i, Br, Bc, causal)
        problem = _row_problem(got, want, case)
        if problem is None:
            continue
        arrays = [m for _, m, _ in raw or []] if raw is not None else []
        shared = len(arrays) > 1 and any(
            isinstance(a, np.ndarray) and any(a is b for b in arrays[:n_])
            for n_, a in enumerate(arrays)
        )
        hint = (
            "your states hold one array, updated in place after every tile: append copies (m.copy(), l.copy())"
            if shared
            else next(
                (
                    t
                    for s, t in _ROW_SLIPS.items()
                    if _same_row(got, _row_walk(q, k, v, i, Br, Bc, causal, s))
                ),
                "compare your m and l after each tile with the figure's (the slider above, at this Br, Bc and mask)",
            )
        )
        return print(
            f"{name}: ✗ {shown}: {problem}\n  hint: {hint}\n" + seed_note(seed), end=""
        )
    print(
        f"{name}: ✓ passed {len(cases)} cases: m and l after every tile, the tiles skipped, the output"
    )


# ------------------------------------------------------------------------------ exercise 1: causal tiles
def _tile_kinds(
    N, M, Br, Bc, off=None, slack=0, whole=False, corner="first", clip=True, mslack=0
):
    """(computed, masked) tiles under the mask j <= i + off: computed when the block's last query sees its
    first key, masked when a computed tile's `corner` query misses its last key. Variants make the classic slips."""
    off = M - N if off is None else off
    i0 = np.arange(0, N - N % Br if whole else N, Br)[:, None]
    j0 = np.arange(0, M - M % Bc if whole else M, Bc)[None, :]
    i1, j1 = np.minimum(i0 + Br, N), np.minimum(j0 + Bc, M) if clip else j0 + Bc
    computed = j0 <= i1 - 1 + off + slack
    masked = computed & (j1 - 1 > (i0 if corner == "first" else i1 - 1) + off + mslack)
    return int(computed.sum()), int(masked.sum())


def _diagonal_masked(N, M, Br, Bc):
    """(computed, masked) with only the diagonal tiles i == j counted as masked (right for N = M, Br = Bc only)."""
    computed, _ = _tile_kinds(N, M, Br, Bc)
    grid = np.arange(-(-M // Bc))[None, :] < _keys_seen(N, M, Br, Bc)[:, None]
    return computed, int(np.trace(grid[:, : grid.shape[0]]))


def _keys_seen(N, M, Br, Bc):
    """Per query block, the key blocks it computes under the causal mask (`lab.tiling._row_blocks`' n_i)."""
    return _row_blocks(N, M, Br, Bc, True)[1]


def _hidden_pairs(N, M, Br, Bc, inside=True):
    """(computed, hidden pairs) with the pairs the mask hides counted in place of the tiles: those inside computed
    tiles (`inside`) or all of them."""
    computed, _ = _tile_kinds(N, M, Br, Bc)
    r = np.arange(N)
    seen = np.clip(r + M - N + 1, 0, M)  # keys 0..seen-1 visible to query r
    end = np.minimum(_keys_seen(N, M, Br, Bc)[r // Br] * Bc, M) if inside else M
    return computed, int(np.maximum(end - seen, 0).sum())


def _tiles_hint(case, got, want):
    alts = [
        (
            _tile_kinds(*case, off=0),
            "that is the count for a mask aligned top-left (key c hidden when "
            "c > r); here key c is hidden from query r when c > r + (M - N)",
        ),
        (
            _tile_kinds(*case, whole=True),
            "that counts whole blocks only: the last query block and the last "
            "key block may be partial, so there are ⌈N/Br⌉ × ⌈M/Bc⌉ tiles",
        ),
        (
            _tile_kinds(*case, slack=1),
            "one key too far: a tile is computed when its first key j0 is visible "
            "to its last query, j0 <= (i1 - 1) + (M - N)",
        ),
        (
            _tile_kinds(*case, slack=-1),
            "one key too few: a tile whose first key is exactly the last one its last "
            "query sees, j0 = (i1 - 1) + (M - N), is computed too: compare with <=, not <",
        ),
        (
            _tile_kinds(*case, clip=False),
            f"the last key block ends at M = {case[1]}: with j1 = j0 + Bc it seems "
            "to hold keys past M, so a tile that needs no mask counts as masked; end it at j1 = min(j0 + Bc, M)",
        ),
        (
            _tile_kinds(*case, mslack=-1),
            "the masked count is one key off: a tile whose last key j1 - 1 is exactly the last one its "
            "first query sees, j1 - 1 = i0 + (M - N), is fully visible and needs no mask: compare "
            "j1 - 1 > i0 + (M - N), with the tile's last key j1 - 1, not its end j1",
        ),
        (
            _tile_kinds(*case, mslack=1),
            "the masked count is one key off the other way: a tile whose last key is one past what its "
            "first query sees, j1 - 1 = i0 + (M - N) + 1, needs the mask: compare j1 - 1 > i0 + (M - N)",
        ),
        (
            _tile_kinds(*case, corner="last"),
            "the masked count looks at the wrong corner: a computed tile "
            "needs the mask when its FIRST query cannot see its LAST key",
        ),
        (
            _hidden_pairs(*case),
            "masked counts the pairs the mask hides, not the tiles: a computed tile needs the mask "
            "when at least one of its pairs is hidden, and it counts once however many are",
        ),
        (
            _hidden_pairs(*case, inside=False),
            "masked counts every pair the mask hides, not the tiles: count each computed tile "
            "that hides at least one pair, once",
        ),
        (
            _diagonal_masked(*case),
            "masked counts only the diagonal tiles (i == j): that holds for N = M and Br = Bc only; "
            "with N != M or Br != Bc the boundary c = r + (M - N) crosses other tiles, and a "
            "diagonal tile may hide nothing: test each computed tile's first query against its last key",
        ),
    ]
    tri = {
        T * (T + 1) // 2 for T in (-(-case[0] // case[2]), -(-case[1] // case[3]))
    }  # the closed form's counts
    if np.ndim(got) == 1 and len(got) == 2 and got[0] != want[0] and got[0] in tri:
        return "T(T+1)/2 holds for N = M and square blocks only: count the key blocks each query block's last query sees"
    return _first(
        alts,
        got,
        "a tile is computed when some query of it sees some key of it (look at one corner), "
        "and needs the mask when some query misses some key (the opposite corner)",
    )


def check_causal_tile_counts(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(N, M, Br, Bc) -> (computed, masked)`, the tiles a causal kernel computes and those it must mask inside.

    Reference: tile (i0:i1, j0:j1) is computed iff $j_0 \\le i_1 - 1 + M - N$, masked iff also $j_1 - 1 > i_0 + M - N$.
    Fixed cases and three drawn afresh each run (`seed` draws the same again). Taught in: notebooks/05_tiling.ipynb"""
    rng, seed = _fresh(seed)
    cases = [
        (1024, 1024, 64, 64),
        (200, 200, 64, 32),
        (1000, 700, 128, 48),
        (300, 1000, 33, 100),
        (7, 7, 3, 5),
        (5, 9, 64, 64),
        (4096, 4096, 16, 512),
    ] + [
        tuple(int(x) for x in (*rng.integers(50, 3000, 2), *rng.integers(3, 200, 2)))
        for _ in range(3)
    ]
    _check(
        fn,
        _tile_kinds,
        cases,
        "N M Br Bc",
        _tiles_hint,
        name,
        names=("computed", "masked"),
        seed=seed,
    )


# ------------------------------------------------------------------------------ exercise 2: fa2's bytes
def _fa2_bytes(
    N,
    d,
    Br,
    Bc,
    itemsize,
    causal,
    *,
    skip=True,
    whole=False,
    lse=None,
    kv_once=False,
    visible=False,
    first=False,
    floor=False,
):
    """fa2's bytes for N = M, dv = d; the keyword variants make the classic slips (`first`: the keys the
    block's first query sees, not its last; `floor`: T_r = N // Br, the partial query block dropped)."""
    keys = 0
    for i0 in range(0, N - N % Br if floor else N, Br):
        end = i0 + 1 if first else min(i0 + Br, N)
        last = (
            end if causal and skip else N
        )  # keys 0..last-1: what the block's queries see
        n = -(-last // Bc)
        keys += n * Bc if whole else last if visible else min(n * Bc, N)
    keys = N if kv_once else keys
    return (2 * N * d + 2 * keys * d) * itemsize + N * (
        max(itemsize, 4) if lse is None else lse
    )


def _bytes_hint(case, got, want):
    N, d, Br, Bc, isz, causal = case
    full, kv = _fa2_bytes(*case, skip=False), 2 * N * d * isz * -(-N // Br)
    half = (
        "half the non-causal count is the triangle's area, not what fa2 loads: a query block loads whole key "
        "blocks, the diagonal ones too, and Q, o, lse move in full; add up the key blocks each query block loads"
    )
    seen = (
        "fa2 loads whole key blocks: query block i loads every key block up to the one holding its last visible "
        "key, masked keys and all (only the last block, at N, may be short); count those, not the visible keys"
    )
    tri = (2 * N * d + N * (N + 1) * d) * isz + N * max(isz, 4)
    stat = max(isz, 4)
    shortcut = (
        "(T+1)/2T is the fraction of tiles computed for N = M and square blocks that divide N "
        f"(part 1); here Br = {Br}, Bc = {Bc}, N = {N}: count the key blocks each query block loads"
    )
    first = (
        "the keys are counted from the block's FIRST query, which sees the fewest: it is its LAST query, r = min(i0 + Br, N) - 1, "
        "that sees the most keys, and the block loads every key block up to the one holding that "
        "query's last visible key"
    )
    frac = [
        2 * N * d * isz + kv * (T + 1) / (2 * T) + N * stat
        for T in {-(-N // Br), -(-N // Bc)}
    ]
    alts = [
        (
            full,
            "that is the count without causal skipping: under the mask, query block "
            "i loads only the key blocks its queries can see",
        ),
        *(
            [
                (full / 2, half),
                (full - kv / 2, half),
                (_fa2_bytes(*case, visible=True), seen),
                (tri, seen),
                *((x, shortcut) for f in frac for x in (f, int(f), round(f))),
                (_fa2_bytes(*case, first=True), first),
            ]
            if causal
            else []
        ),
        *(
            [
                (
                    _fa2_bytes(*case, floor=True),
                    f"the last query block is partial ({N % Br} of N = {N} queries, past "
                    f"{N // Br} whole blocks of Br = {Br}) and yours leaves out its K and V "
                    "loads: it loads key blocks like any other, so T_r = ⌈N / Br⌉ = "
                    f"{-(-N // Br)}, not N // Br = {N // Br}",
                )
            ]
            if N % Br
            else []
        ),
        (
            _fa2_bytes(*case, whole=True),
            "a partial last key block holds fewer than Bc keys: count the keys "
            "loaded, not Bc per block",
        ),
        (
            _fa2_bytes(*case, lse=isz),
            "lse is saved in the accumulator's dtype: float32 (4 bytes) for fp16 and "
            "float32 inputs, float64 for float64",
        ),
        (
            _fa2_bytes(*case, lse=4),
            "lse counted at 4 bytes for float64 inputs: the accumulator follows a float64 input, "
            "so lse is float64 there, 8 bytes a row (4 only for fp16 and float32)",
        ),
        (
            _fa2_bytes(*case, lse=0),
            "the output is o and lse: one lse value per query row is written too",
        ),
        (
            _fa2_bytes(*case) - N * d * isz,
            "N × d values are missing: Q is read once and o is written once, "
            "N × d values at itemsize each",
        ),
        (
            _fa2_bytes(*case, kv_once=True),
            "fa2 reads K and V once per query block (it keeps no copy between "
            "them), not once in all",
        ),
    ]
    return _first(
        alts,
        got,
        "add up what crosses between HBM and the chip: Q once, the K_j and V_j of every "
        "computed tile, o and lse once",
    )


def _check_hbm_bytes(fn, variant: str, fixed: list, hint, name, seed) -> None:
    """`fn(N, d, Br, Bc, itemsize, causal)` against `flash_counts(..., variant=variant).total` on the `fixed`
    cases and three drawn afresh (`seed` draws the same again)."""
    rng, seed = _fresh(seed)
    drawn = [
        (
            int(rng.integers(50, 5000)),
            int(rng.choice([16, 32, 64, 80, 128])),
            *(int(x) for x in rng.integers(8, 200, 2)),
            int(rng.choice([2, 4, 8])),
            causal,
        )
        for causal in (True, False, True)
    ]
    _check(
        fn,
        lambda N, d, Br, Bc, isz, causal: (
            flash_counts(
                N,
                N,
                d,
                block_q=Br,
                block_k=Bc,
                causal=causal,
                variant=variant,
                itemsize=isz,
            ).total
        ),
        fixed + drawn,
        "N d Br Bc itemsize causal",
        hint,
        name,
        seed=seed,
    )


def check_fa2_hbm_bytes(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(N, d, Br, Bc, itemsize, causal)`, fa2's HBM bytes for one head, N = M, dv = d, against `lab.flash_counts`.

    Reference: $\\big(2Nd + 2d\\sum_i K_i\\big)\\cdot\\text{itemsize} + N\\cdot\\max(\\text{itemsize}, 4)$, $K_i$ the keys block i loads.
    Fixed cases and three drawn afresh each run (`seed` draws the same again); lab.flash_counts refused by any name.
    Taught in: notebooks/05_tiling_traffic.ipynb"""
    _check_hbm_bytes(
        fn,
        "fa2",
        [
            (4096, 64, 128, 128, 2, False),
            (1000, 64, 64, 48, 2, True),
            (333, 16, 50, 64, 8, True),
            (1000, 64, 128, 128, 4, True),
            (5, 3, 7, 2, 2, True),
            (4096, 128, 128, 64, 2, True),
        ],
        _bytes_hint,
        name,
        seed,
    )


# ------------------------------------------------------------------------------ exercise 3: widest key block
_footprint = lambda d, Br, Bc, itemsize: step_footprint(d, Br, Bc, itemsize=itemsize)[
    "total"
]  # noqa: E731


def _widest(sram_bytes, d, Br, itemsize):
    """The largest Bc with `step_footprint(d, Br, Bc)` within `sram_bytes`, 0 when Bc = 1 does not fit (the footprint is linear in Bc)."""
    per_key = _footprint(d, Br, 2, itemsize) - _footprint(d, Br, 1, itemsize)
    return max(0, (sram_bytes - _footprint(d, Br, 1, itemsize) + per_key) // per_key)


def _widest_slip(
    sram_bytes,
    d,
    Br,
    itemsize,
    *,
    s=4,
    p=None,
    state=True,
    st=4,
    up=False,
    kv=2,
    acc=None,
    q=True,
    nearest=False,
):
    """`_widest` with a classic slip: S_ij at `s` bytes (0: left out), P_ij at `p` (0: left out), the state left out
    (or m, l left out) or at `st` bytes, acc alone at `acc` bytes, `kv` of K_j, V_j (1: one left out), Q_i left
    out (`q`), or the division rounded up (`up`) or to the nearest (`nearest`)."""
    p = itemsize if p is None else p
    kept = 2 * Br + Br * d if state is True else Br * d if state == "acc" else 0
    fixed = Br * d * itemsize * q + kept * st
    if acc is not None and state is True:
        fixed += Br * d * (acc - st)  # acc at `acc` bytes, m and l at `st`
    per_key = kv * d * itemsize + Br * (s + p)
    room = sram_bytes - fixed
    if nearest:
        return max(0, round(room / per_key))
    return max(0, -(-room // per_key) if up else room // per_key)


_WIDEST_SLIPS = [
    (
        {"up": True},
        "rounded up: a step with one key more than fits does not fit; round the division down (//)",
    ),
    (
        {"nearest": True},
        "rounded to the nearest: a step with one key more than fits does not fit, however close; "
        "round the division down (//)",
    ),
    (
        {"q": False},
        "Q_i is left out: the query block (Br × d, at itemsize) stays on chip for the whole step",
    ),
    (
        {"p": 0},
        "P_ij is left out: the probabilities are a Br × Bc buffer of their own (in the input dtype, "
        "the operand of the second matmul), beside S_ij",
    ),
    (
        {"kv": 1},
        "K_j or V_j is left out: each key brings a row of K_j (d values) and a row of V_j (d_v = d), "
        "both at itemsize, beside its column of S_ij and P_ij",
    ),
    (
        {"s": 0},
        "S_ij is left out: the scores are a Br × Bc buffer in float32, beside P_ij",
    ),
    (
        {"state": "acc"},
        "m and l are left out: beside acc, the state holds m and l, Br floats each (float32)",
    ),
    (
        {"state": False},
        "the state is left out: m and l (Br each) and acc (Br × d) stay on chip for the whole step, in float32",
    ),
    (
        {"p": 4},
        "P_ij counted in float32: it is cast to the input dtype (itemsize bytes) for the second matmul",
    ),
    (
        {"s": "isz"},
        "S_ij counted at itemsize: the scores come out of the first matmul in float32 (4 bytes)",
    ),
    (
        {"s": "isz", "st": "isz"},
        "every buffer counted at itemsize: only Q_i, K_j, V_j and P_ij are in the input dtype; S_ij "
        "(out of the first matmul) and m, l, acc stay in float32, 4 bytes each, whatever the inputs",
    ),
    (
        {"s": 0, "p": 0},
        "S_ij and P_ij are both left out: the scores (Br × Bc, float32) and the probabilities "
        "(Br × Bc, itemsize) are buffers of the step too, Br · (4 + itemsize) bytes per key",
    ),
    (
        {"s": 0, "p": 0, "st": "isz"},
        "S_ij and P_ij are left out, and m, l, acc counted at itemsize: the scores (float32) and "
        "probabilities (itemsize) are Br × Bc buffers of the step, and the state stays in float32",
    ),
    (
        {"st": "isz"},
        "m, l and acc counted at itemsize: the state is kept in float32 (4 bytes), whatever the inputs",
    ),
    (
        {"acc": "isz"},
        "acc counted at itemsize: the output accumulator (Br × d) adds up e^(s - m)·v in float32, "
        "4 bytes a number, whatever the inputs; only Q_i, K_j, V_j and P_ij are at itemsize",
    ),
]


def _slip_value(case, kw):
    """`_widest_slip` on `case`, with "isz" standing for the case's itemsize."""
    return _widest_slip(
        *case, **{k: case[3] if v == "isz" else v for k, v in kw.items()}
    )


def _probe_cases(case, want):
    """Further sizes that tell apart slips giving the same Bc in `case`: the other itemsize, and a budget
    just short of the next key plus m, l (where rounding up is wrong and m, l are not missed)."""
    sram, d, Br, isz = case
    fixed = Br * d * isz + (2 * Br + Br * d) * 4
    per_key = 2 * d * isz + Br * (4 + isz)
    return [
        (fixed + (want + 2) * per_key - 8 * Br - 1, d, Br, isz),
        (sram, d, Br, 6 - isz),
        (2**18, 64, 64, 2),
        (2**18, 64, 64, 4),
        (
            2**18,
            128,
            32,
            2,
        ),  # d ≠ Br: a row of K_j or V_j (d values) is not a column of P_ij (Br)
        (2**18, 32, 128, 2),
    ]


def _widest_hint(case, got, want, probe=None):
    sram, d, Br, isz = case
    if not isinstance(got, (int, np.integer)) or isinstance(got, bool):
        return "a block size is a whole number of keys: round down (//)"
    if got < 0:
        return "no negative sizes: return 0 when even Bc = 1 does not fit (max(0, ...))"
    if got >= 1 and _footprint(d, Br, got, isz) > sram:
        default = (
            f"a step with Bc = {got} takes {_footprint(d, Br, got, isz):,} bytes, more than the {sram:,} there "
            "are: a buffer left out or counted too small?"
        )
    elif _footprint(d, Br, got + 1, isz) <= sram:
        default = (
            f"Bc = {got + 1} still fits ({_footprint(d, Br, got + 1, isz):,} of {sram:,} bytes): "
            "a buffer counted twice or too large?"
        )
    else:
        default = "the largest Bc whose step fits; 0 when even Bc = 1 does not"
    said = [
        (kw, t)
        for kw, t in _WIDEST_SLIPS
        if _slip_value(case, kw) != want and _slip_value(case, kw) == got
    ]
    if probe is not None and said:
        # slips that give this Bc here: ask further sizes and keep the ones the answers follow at all
        # of them (none left: the slip is another, and the hint says what is wrong in general)
        for more in _probe_cases(case, want):
            try:
                again = probe(*more)
            except Exception:
                continue
            said = [(kw, t) for kw, t in said if _slip_value(more, kw) == again]
    return " — or: ".join(t for _, t in said) if said else default


def check_widest_key_block(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(sram_bytes, d, Br, itemsize)`: the largest Bc whose step (every buffer in one memory, dv = d) fits in `sram_bytes`.

    Reference: the largest Bc with `lab.step_footprint(d, Br, Bc, itemsize=itemsize)["total"] <= sram_bytes`, 0 if none.
    Fixed cases and three drawn afresh each run (`seed` draws the same again). Taught in: notebooks/05_tiling.ipynb"""
    rng, seed = _fresh(seed)
    cases = [
        (192 * 1024, 64, 64, 2),
        (228 * 1024, 128, 128, 2),
        (2**20, 64, 128, 4),
        (64 * 1024, 128, 64, 2),
        (100_000, 48, 16, 4),
        (4096, 64, 64, 2),
    ] + [
        (
            int(rng.integers(16, 1024)) * 1024,
            int(rng.choice([32, 64, 96, 128])),
            int(rng.choice([16, 32, 64, 128])),
            int(rng.choice([2, 4])),
        )
        for _ in range(3)
    ]
    _check(
        fn,
        _widest,
        cases,
        "sram_bytes d Br itemsize",
        lambda case, got, want: _widest_hint(case, got, want, probe=fn),
        name,
        integer=True,
        seed=seed,
        course=_COURSE + ("step_footprint", "onchip_footprint"),
    )


# ------------------------------------------------------------------------------ part 1, exercise 4: FA2's tile
_SIZES, _WARPS = (64, 128, 256), (4, 8)
_FA2_COMMIT = "01afd16d248c4c7d0f9aed1914084f16c490eaed"
_FA2_SOURCE = (
    "\n  FlashAttention-2 ships 128 × 64 with 4 warps at d = 128 on sm80 and sm90 without dropout"
    "\n  (run_mha_fwd_hdim128 in csrc/flash_attn/src/flash_fwd_launch_template.h, Dao-AILab/flash-attention"
    f"\n  at commit {_FA2_COMMIT[:12]}); with dropout 128 × 32, and on sm86/sm89 128 × 32 or 64 × 64."
)


def _a100_fit(Br, Bc, warps, d=128):
    """`onchip_fits` on the A100, fp16, one copy of K_j, V_j (as FlashAttention-2 keeps them)."""
    return onchip_fits("A100", d, Br, Bc, itemsize=2, kv_stages=1, warps=warps)


def _fitting_a100(d=128):
    """The (Br, Bc, warps) with Br, Bc in {64, 128, 256}, warps in {4, 8} whose step fits an A100 SM."""
    return {
        (Br, Bc, w)
        for Br in _SIZES
        for Bc in _SIZES
        for w in _WARPS
        if _a100_fit(Br, Bc, w, d)["fits"]
    }


def _fitting_reused() -> set:
    """`_fitting_a100` at d = 128 with P_ij written into S_ij's registers (section 3's other count)."""
    out = set()
    for Br in _SIZES:
        for Bc in _SIZES:
            for w in _WARPS:
                f = _a100_fit(Br, Bc, w)
                regs = f["registers"]["total"] - f["registers"]["P_ij"]
                if regs <= f["register_budget"] and f["fits_shared"]:
                    out.add((Br, Bc, w))
    return out


def _why_not(Br, Bc, w) -> str:
    f = _a100_fit(Br, Bc, w)
    regs, shared = f["registers"]["total"] / 1024, f["shared"]["total"] / 1024
    budgets = f"registers {regs:g} of {f['register_budget'] / 1024:g} KiB, shared {shared:g} of "
    return budgets + f"{f['shared_budget'] / 1024:g} KiB"


def _ship_hint(Br, Bc, w) -> str | None:
    """None for FA2's choice; else the question that rules (Br, Bc, w) out, without naming another tile."""
    if (Br, Bc, w) == (128, 64, 4):
        return None
    if w == 8 and (Br, Bc) in ((128, 128), (256, 64)):
        return (
            f"{Br} × {Bc} with 8 warps fits on paper, and the comment quoted in the exercise measured this very "
            "tile: 28% slower at seqlen = 2k. Would you ship a tile its authors measured slower?"
        )
    if w == 8 and _a100_fit(Br, Bc, 4)["fits"]:
        return (
            "4 warps hold this tile too: what would 8 warps buy? They give no larger tile, only the same step spread "
            "over twice the threads (the comment quoted measures 8 warps on 128 × 128 and 256 × 64 only)"
        )
    if w == 8:
        return (
            f"{Br} × {Bc} needs 8 warps in this count, and the comment quoted does not measure it (it names "
            f"128 × 128 and 256 × 64); but in section 1's fa2 loop, how many times are all of K and V read "
            f"with Br = {Br}, and is that the fewest among the tiles that fit?"
        )
    if (Br, Bc) == (64, 128):
        return (
            "64 × 128 is as large as any tile 4 warps hold (8,192 scores); but in section 1's fa2 loop, "
            "how many times are all of K and V read with Br = 64, and is that the fewest among the tiles "
            "that fit 4 warps?"
        )
    regs = _a100_fit(Br, Bc, 4)["registers"]["total"] / 1024
    return (
        f"{Br} × {Bc} fits 4 warps with {regs:g} of their 127.5 KiB of registers: how many steps does it "
        "take to cover the grid, and does either budget force a tile this small?"
    )


def _pooled(d=128):
    """The candidates that fit if registers and shared memory were one 256 KiB pool (a classic slip)."""
    out = set()
    for Br in _SIZES:
        for Bc in _SIZES:
            for w in _WARPS:
                f = _a100_fit(Br, Bc, w, d)
                if f["registers"]["total"] + f["shared"]["total"] <= 256 * 1024:
                    out.add((Br, Bc, w))
    return out


_FIT_COURSE = _COURSE + ("step_footprint", "onchip_footprint", "fits_table")


def _fit_hint(d, Br, Bc, w, got) -> str:
    """What the learner's verdict `got` on (d, Br, Bc, w) misses, with the two footprints and budgets named."""
    f = _a100_fit(Br, Bc, w, d)
    regs, shared = f["registers"]["total"], f["shared"]["total"]
    budget, room = f["register_budget"], f["shared_budget"]
    sizes = (
        f"registers {regs:,} B of {budget:,} (the budget of {w} warps), "
        f"shared memory {shared:,} B of {room:,}"
    )
    if got:
        if regs > budget and 32 * w * 255 * 4 > 256 * 1024:
            over = (
                f"the registers are over the SM's 256 KiB: {w} warps could address "
                f"32·{w}·255·4 B, but no thread block holds more registers than the SM has"
            )
        elif regs > budget:
            over = (
                "the registers are over min(256 KiB, 32·w·255·4 B): a thread block of w warps holds "
                "no more"
            )
        elif shared <= 164 * 1024:
            over = (
                "Q_i, K_j, V_j are within the SM's 164 KiB but over the 163 KiB one thread block may "
                "use: compare with the per-block limit, not the SM's"
            )
        else:
            over = "Q_i, K_j, V_j are over the 163 KiB of shared memory one thread block may use"
        return f"it does not fit: {sizes}; {over}"
    if regs == budget or shared == room:
        full = "registers" if regs == budget else "shared memory"
        return (
            f"it fits: {sizes}; the {full} fill the budget exactly, and a step that fills a "
            "budget still fits: compare with <=, not <"
        )
    causes = []
    if regs + Br * d * 2 > budget and shared - Br * d * 2 <= room:
        causes.append("Q_i is a tile loaded from HBM: in shared memory, not registers")
    if regs + shared > 256 * 1024:
        causes.append(
            "registers and shared memory are two memories with two budgets, not one 256 KiB pool"
        )
    if shared + Bc * 2 * d * 2 > room:
        causes.append("one copy of K_j, V_j (n_kv = 1) here, not two")
    if regs + Br * Bc * 2 > budget:
        causes.append(
            "P_ij in fp16 (2 bytes), the operand of the second matmul; S_ij in float32"
        )
    if not causes:
        causes.append(
            "count S_ij, P_ij, m, l, acc in registers and Q_i, K_j, V_j in shared memory"
        )
    return f"it fits: {sizes}; " + " — or: ".join(causes)


def _fit_slip(
    d,
    Br,
    Bc,
    w,
    *,
    p=2,
    s=4,
    acc=4,
    ml=2,
    kv=1,
    per_reg=4,
    cap=True,
    limit=163 * 1024,
    pool=False,
    strict=False,
    q_regs=False,
):
    """The verdict of `_a100_fit` made with a classic slip: P_ij at `p` bytes (0: left out), S_ij at `s`, acc at
    `acc`, `ml` of m, l (0: left out), `kv` copies of K_j, V_j, `per_reg` bytes a register (1: the ×4 forgotten),
    the 256 KiB cap dropped (`cap`), shared memory against `limit`, or one pool for both."""
    regs = Br * Bc * (s + p) + ml * Br * 4 + Br * d * acc
    shared = (Br * d + kv * Bc * 2 * d) * 2
    if q_regs:  # Q_i held in registers, not shared memory
        regs, shared = regs + Br * d * 2, shared - Br * d * 2
    budget = 32 * w * 255 * per_reg
    budget = min(256 * 1024, budget) if cap else budget
    if pool:
        return regs + shared <= 256 * 1024
    if strict:
        return regs < budget and shared < limit
    return regs <= budget and shared <= limit


_FIT_SLIPS = [
    (
        {"pool": True},
        "registers and shared memory are two memories with two budgets, not one 256 KiB pool",
    ),
    (
        {"per_reg": 1},
        "the register budget is in registers, not bytes: 32·w·255 registers of 4 bytes each, "
        "so a block of w warps holds 32·w·255·4 B",
    ),
    (
        {"per_reg": 2**20},
        "the registers are over min(256 KiB, 32·w·255·4 B): a thread block of w warps holds no more "
        "(255 registers a thread, 32 threads a warp), not the SM's whole 256 KiB",
    ),
    (
        {"cap": False},
        "the budget is min(256 KiB, 32·w·255·4 B): from 9 warps on, the SM's 256 KiB of registers "
        "binds, not 255 registers a thread",
    ),
    (
        {"p": 0},
        "P_ij is left out: section 3's count gives the probabilities registers of their own, Br × Bc "
        "in fp16 beside S_ij in float32 (conservative: a kernel may write P into S's registers, "
        "but this exercise follows section 3's count)",
    ),
    (
        {"strict": True},
        "a step that fills a budget exactly still fits: compare with <=, not <",
    ),
    (
        {"q_regs": True},
        "Q_i counted in registers: it is a tile loaded from HBM, so it sits in shared memory beside "
        "K_j, V_j; the registers hold S_ij, P_ij, m, l and acc",
    ),
    (
        {"kv": 1},
        "K_j or V_j is left out: each key brings a row of K_j (d values) and a row of V_j (d_v = d), "
        "both at itemsize, beside its column of S_ij and P_ij",
    ),
    (
        {"s": 0},
        "S_ij is left out: the scores are a Br × Bc buffer in registers, float32, beside P_ij",
    ),
    (
        {"p": 4},
        "P_ij in fp16 (2 bytes), the operand of the second matmul; S_ij in float32",
    ),
    (
        {"acc": 2},
        "acc counted in fp16: the accumulator (Br × d) stays in float32, 4 bytes, whatever the inputs; "
        "only P_ij, Q_i, K_j, V_j are fp16",
    ),
    (
        {"ml": 0},
        "m and l are left out: Br floats each, float32, in registers beside acc",
    ),
    (
        {"kv": 2},
        "one copy of K_j, V_j (n_kv = 1) here, not two",
    ),
    (
        {"limit": 164 * 1024},
        "Q_i, K_j, V_j are within the SM's 164 KiB but over the 163 KiB one thread block may use: "
        "compare with the per-block limit, not the SM's",
    ),
]


def _fit_slips_named(fn, cases) -> list[str]:
    """The hints of the slips in `_FIT_SLIPS` whose verdicts equal `fn`'s on every case of `cases`."""
    try:
        got = [bool(fn(*case)) for case in cases]
    except Exception:
        return []
    want = [_a100_fit(Br, Bc, w, d)["fits"] for d, Br, Bc, w in cases]
    return [
        text
        for kw, text in _FIT_SLIPS
        if got == [_fit_slip(*case, **kw) for case in cases] and got != want
    ]


def _edge_cases(d):
    """Two steps at head dimension d with registers well within 8 warps' budget: shared memory at most 163 KiB
    (fits), and over 163 KiB but within the SM's 164 KiB (does not fit a thread block)."""
    out = []
    for limit in (163 * 1024, 164 * 1024):
        n = limit // (2 * d)  # Br + 2·Bc, shared = 2·d·(Br + 2·Bc) bytes
        Br = 16 if n % 2 == 0 else 15
        out.append((d, Br, (n - Br) // 2, 8))
    return out


def _probe_fits():
    """Further steps that tell the slips apart: 16 warps (where the 256 KiB cap binds) and a head dimension
    unlike the key block (P_ij left out and acc in fp16 differ by 2·Br·(d - Bc) bytes)."""
    return [
        (128, 128, 128, 16),
        (64, 256, 128, 16),
        (32, 128, 160, 4),
        (32, 64, 256, 4),
    ]


def check_a100_fits(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(d, Br, Bc, warps) -> bool`: does one step fit an A100 SM, fp16 inputs, dv = d, one copy of K_j, V_j?
    registers = Br·Bc·(4 + 2) + (2·Br + Br·d)·4 within min(256 KiB, 32·warps·255·4 B), and
    shared = (Br·d + 2·Bc·d)·2 within 163 KiB. Every candidate at d = 128, then at a head dimension and blocks
    drawn afresh each run (`seed` draws the same again); lab's footprints refused. Taught in: notebooks/05_tiling.ipynb"""
    name = name or getattr(fn, "__name__", "a100_fits")
    rng, seed = _fresh(seed)
    d_new = int(rng.choice([32, 48, 80, 96, 160, 192, 256]))
    cases = [(128, Br, Bc, w) for Br in _SIZES for Bc in _SIZES for w in _WARPS]
    cases += [
        (d_new, int(Br), int(Bc), int(w))
        for Br, Bc, w in zip(
            rng.choice([16, 32, 64, 96, 128, 192, 256], 12),
            rng.choice([16, 32, 64, 96, 128, 192, 256], 12),
            rng.choice(_WARPS, 12),
        )
    ]
    cases += _edge_cases(d_new)  # shared memory within 163 KiB, and just over it
    # registers 256 B over 4 warps' budget, within it if m and l (8·Br bytes) are left out
    cases += [(128, 64, 254, 4)]
    # exactly at a budget, which still fits: registers 130,560 B = 4 warps' budget; shared 163 KiB
    cases += [(64, 64, 296, 4), (128, 64, 294, 8)]
    # 16 warps: 32·w·255·4 B is 510 KiB, so the SM's 256 KiB binds (322 KiB over it, 161 KiB within)
    cases += [(128, 256, 128, 16), (128, 128, 128, 16)]
    for case in cases:
        shown = "case (d = {}, Br = {}, Bc = {}, warps = {})".format(*case)
        ok, got = _attempt(name, fn, shown, case, course=_FIT_COURSE)
        if not ok:
            return print(seed_note(seed), end="")
        if isinstance(got, _Refused):
            return print(
                f"{name}: ✗ {shown}: {_refusal(got.called)}\n  hint: write the two footprints yourself "
                "(section 3's formulas) and compare each with its budget"
            )
        if not isinstance(got, (bool, np.bool_)):
            return print(f"{name}: ✗ {shown}: returned {got!r}; expected True or False")
        want = _a100_fit(case[1], case[2], case[3], case[0])["fits"]
        if bool(got) != want:
            hint = _fit_hint(*case, bool(got))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                named = _fit_slips_named(fn, cases + _probe_fits())
            if named:  # the slip the learner's verdicts follow on every case
                hint = hint.split("; ")[0] + "; " + " — or: ".join(named)
            return print(
                f"{name}: ✗ {shown}: returned {bool(got)}\n  hint: {hint}\n"
                + seed_note(seed),
                end="",
            )
    print(
        f"{name}: ✓ passed {len(cases)} cases:\n  the 18 candidates at d = 128, 14 steps at a fresh d, "
        "3 at a budget's edge (2 exactly at it), 2 at 16 warps"
    )


def check_fa2_tile_choice(fitting, ship, *, name: str = "fa2_tile") -> None:
    """Check exercise 4 of 05_tiling (part 2): `fitting`, the (Br, Bc, warps) with Br, Bc in {64, 128, 256} and warps in
    {4, 8} whose step fits an A100 SM at d = 128, fp16, one copy of K_j, V_j (`lab.onchip_fits`); `ship`, the one
    FlashAttention-2 should ship. Reveals FA2's own choice and its source comment on a pass.
    Taught in: notebooks/05_tiling.ipynb"""
    if ship is None and not fitting:
        return print(
            f"{name}: not implemented yet (set `fitting` and `ship` above, then run this cell again)"
        )
    try:
        got = {tuple(int(x) for x in t) for t in fitting}
        ship = tuple(int(x) for x in ship)
        if any(len(t) != 3 for t in got) or len(ship) != 3:
            raise ValueError
    except (TypeError, ValueError):
        return print(
            f"{name}: ✗ give `fitting` as a set of (Br, Bc, warps) triples and `ship` as one triple"
        )
    want = _fitting_a100()
    outside = sorted(
        t for t in got if t[0] not in _SIZES or t[1] not in _SIZES or t[2] not in _WARPS
    )
    if outside:
        return print(
            f"{name}: ✗ {outside[0]} is not a candidate: Br, Bc in {{64, 128, 256}}, warps 4 or 8"
        )
    extra, missing = sorted(got - want), sorted(want - got)
    reused = got != want and got == _fitting_reused()
    if got != want and got == _fitting_a100(64):
        also = (
            " — or the tiles that fit with P_ij in S_ij's registers, which are the same set: "
            "this exercise counts P_ij in registers of its own, beside S_ij"
            if reused
            else ""
        )
        return print(
            f"{name}: ✗ these are the tiles that fit at d = 64, section 3's case{also}\n"
            "  hint: this exercise is d = 128: acc holds Br × 128 floats, Q_i, K_j, V_j 128 columns each"
        )
    if reused:
        return print(
            f"{name}: ✗ these are the tiles that fit with P_ij written into S_ij's registers\n"
            "  hint: this exercise counts P_ij in registers of its own (fp16), beside S_ij (float32)"
        )
    if got != want and got == _pooled():
        return print(
            f"{name}: ✗ {len(got)} tiles: you compared registers + shared memory with one 256 KiB pool\n"
            "  hint: they are two memories with two budgets: registers against min(256 KiB, 32·w·255·4 B), "
            "Q_i, K_j, V_j against the 163 KiB of shared memory a thread block may use"
        )
    if extra:
        Br, Bc, w = extra[0]
        f = _a100_fit(Br, Bc, w)
        over = "registers" if not f["fits_registers"] else "shared memory"
        return print(
            f"{name}: ✗ {extra[0]} does not fit: {_why_not(Br, Bc, w)}; over the {over} budget\n"
            f"  hint: the registers hold S_ij (float32), P_ij (fp16), m, l and acc; {w} warps may hold "
            f"min(256 KiB, 32·{w}·255·4 B)"
        )
    if missing:
        Br, Bc, w = missing[0]
        return print(
            f"{name}: ✗ {missing[0]} fits and is missing: {_why_not(Br, Bc, w)} ({len(missing)} missing)\n"
            "  hint: one copy of K_j, V_j in shared memory here (n_kv = 1), and registers for 8 warps are "
            "min(256 KiB, 32·8·255·4 B) = 255 KiB"
        )
    if ship not in want:
        return print(f"{name}: ✗ `ship` = {ship} is not among the tiles that fit")
    hint = _ship_hint(*ship)
    if hint:
        return print(
            f"{name}: ✗ the {len(want)} tiles that fit are right; `ship` = {ship}\n  hint: {hint}"
        )
    print(f"{name}: ✓ the {len(want)} tiles that fit, and FA2's choice.{_FA2_SOURCE}")


# ------------------------------------------------------------------------------ part 2, exercise 3: fa1's bytes
def _fa1_bytes(
    N,
    d,
    Br,
    Bc,
    itemsize,
    causal,
    *,
    skip=True,
    whole=False,
    q_once=False,
    o_read=True,
    init=True,
    o_written=True,
    stats=None,
    first=False,
    per_query_block=False,
):
    """fa1's bytes for N = M, dv = d (K, V once; Q, O, l, m read and O, l, m written per computed tile, O, l, m
    written once at the start); the keyword variants make the classic slips."""
    isz, ssz = itemsize, max(itemsize, 4) if stats is None else stats
    rows = 0  # Σ over computed tiles of their query rows
    for i0 in range(0, N, Br):
        end = i0 + 1 if first else min(i0 + Br, N)
        last = end if causal and skip else N  # keys 0..last-1 seen
        width = (
            Br if per_query_block else Bc
        )  # the T_r-for-T_c slip counts query blocks
        rows += (Br if whole else min(Br, N - i0)) * -(-last // width)
    q = (N if q_once else rows) * d * isz
    reads = 2 * N * d * isz + q + (rows * d * isz if o_read else 0) + 2 * rows * ssz
    passes = (N if init else 0) + rows
    writes = passes * 2 * ssz + (passes * d * isz if o_written else 0)
    return reads + writes


def _fa1_hint(case, got, want):
    N, d, Br, Bc, isz, causal = case
    alts = [
        (
            _fa2_bytes(*case),
            "that is fa2's count: fa1 puts the key blocks outside, so it reads K and V once "
            "and reads Q, O, l, m (and writes O, l, m) once per computed tile",
        ),
        (
            _fa1_bytes(*case, per_query_block=True),
            "the key blocks are counted in steps of Br: a query block meets "
            "T_c = ⌈M/Bc⌉ key blocks (⌈seen/Bc⌉ under the mask), not T_r = ⌈N/Br⌉; "
            "fa1's outer loop runs over key blocks of Bc rows",
        ),
        (
            _fa1_bytes(*case, q_once=True),
            "Q is read once here, but fa1 keeps no Q_i on chip between key blocks: "
            "it reads Q_i again for every tile (i, j) it computes",
        ),
        (
            _fa1_bytes(*case, init=False),
            "the first write is missing: before the first key block fa1 writes "
            "O = 0, l = 0, m = -inf to HBM, N rows of each",
        ),
        (
            _fa1_bytes(*case, o_written=False),
            "the output writes are missing: after each tile (i, j) fa1 writes O_i back "
            "to HBM (and once at the start, O = 0), N × d values per full pass",
        ),
        (
            _fa1_bytes(*case, o_read=False),
            "one read of r × d values per computed tile is missing, and at d = d_v it could "
            "be either of two: Q_i, which fa1 reads again at every tile (i, j), or O_i, which "
            "it reads back from HBM (as key block j - 1 wrote it) before updating it; check both",
        ),
        (
            _fa1_bytes(*case, stats=isz),
            "l and m are kept in the accumulator's dtype: float32 (4 bytes) for fp16 "
            "and float32 inputs, float64 for float64",
        ),
        (
            _fa1_bytes(*case, stats=0),
            "l and m are missing: fa1 reads and writes them with O_i at every tile, "
            "one value each per query row",
        ),
        (
            _fa1_bytes(*case, whole=True),
            "a partial last query block holds fewer than Br rows: count the rows "
            "it moves, not Br per block",
        ),
    ]
    if causal:
        alts.append(
            (
                _fa1_bytes(*case, first=True),
                "the tiles are counted from the block's FIRST query, which sees the fewest keys: it is its LAST query, "
                "r = min(i0 + Br, N) - 1, that sees the most keys; tile (i, j) is computed when that "
                "query sees key block j's first key",
            )
        )
        alts.insert(
            1,
            (
                _fa1_bytes(*case, skip=False),
                "that is the count without causal skipping: under the mask fa1 skips "
                "the tile (i, j) when no query of block i sees a key of block j, and "
                "moves nothing for it",
            ),
        )
    return _first(
        alts,
        got,
        "add up what crosses between HBM and the chip: K, V once; O, l, m written "
        "at the start; for each computed tile (i, j), Q_i, O_i, l_i, m_i read and "
        "O_i, l_i, m_i written",
    )


def check_fa1_hbm_bytes(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(N, d, Br, Bc, itemsize, causal)`, fa1's HBM bytes for one head, N = M, dv = d, against `lab.flash_counts`.

    Fixed cases and three drawn afresh each run (`seed` draws the same again); lab.flash_counts refused by any name.
    Taught in: notebooks/05_tiling_traffic.ipynb"""
    _check_hbm_bytes(
        fn,
        "fa1",
        [
            (4096, 64, 128, 128, 2, False),
            (1000, 64, 64, 48, 2, True),
            (333, 16, 50, 64, 8, True),
            (1000, 64, 128, 96, 4, False),
            (5, 3, 2, 7, 2, True),
            (4096, 128, 64, 128, 2, True),
        ],
        _fa1_hint,
        name,
        seed,
    )


# ------------------------------------------------------------------------------ exercise 4: the tiled forward
class BlockLoadArray:
    """K or V in "HBM" for a check: `a[j0:j1]` returns a copy of those rows and adds one load to each.

    Any use of the whole array (`a.T`, `np.asarray(a)`, `a @ x`, ...) loads every row and is remembered in
    `whole`; `largest` is the most rows one access loaded. `shape`, `len`, `ndim`, `dtype` are free.
    Taught in: notebooks/05_tiling_traffic.ipynb"""

    def __init__(self, values, name: str):
        self._data = np.array(
            values, dtype=np.float64
        )  # a copy: the case's array is never touched
        self.name, self.loads = name, np.zeros(self._data.shape[0], dtype=np.int64)
        self.largest, self.largest_at, self.whole = 0, None, None
        self.shape, self.ndim, self.dtype, self.size = (
            self._data.shape,
            self._data.ndim,
            self._data.dtype,
            self._data.size,
        )

    def __len__(self) -> int:
        return self._data.shape[0]

    def __iter__(self):
        return (self[j] for j in range(len(self)))

    def __getitem__(self, key):
        rows = np.atleast_1d(
            np.arange(len(self))[key[0] if isinstance(key, tuple) else key]
        )
        np.add.at(self.loads, rows, 1)
        if rows.size > self.largest:
            self.largest, self.largest_at = (
                int(rows.size),
                f"{self.name}[{_key_text(key)}]",
            )
        return np.array(self._data[key])

    def _all(self, how: str) -> np.ndarray:
        self.whole = self.whole or how
        self.loads += 1
        return self._data.copy()

    def __array__(self, dtype=None, copy=None):
        a = self._all(
            f"np.asarray({self.name}), or {self.name} whole inside a numpy call"
        )
        return a if dtype is None else a.astype(dtype)

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._all(f"{self.name}.{attr}"), attr)


for _op in (
    "add",
    "radd",
    "sub",
    "rsub",
    "mul",
    "rmul",
    "truediv",
    "rtruediv",
    "matmul",
    "rmatmul",
    "neg",
    "pow",
):
    setattr(
        BlockLoadArray,
        f"__{_op}__",
        lambda self, *other, _op=f"__{_op}__": getattr(
            self._all(f"{self.name} whole in an expression"), _op
        )(*other),
    )


_INSTRUMENT_HELPERS = (
    "_key_text",
)  # called by BlockLoadArray, inside the learner's run


def _key_text(key) -> str:
    """An index as typed: slices as start:stop, anything else by its repr."""
    parts = key if isinstance(key, tuple) else (key,)
    return ", ".join(
        f"{'' if p.start is None else p.start}:{'' if p.stop is None else p.stop}"
        if isinstance(p, slice)
        else repr(p)
        if np.ndim(p) == 0
        else "[...]"
        for p in parts
    )


def _high_first(rng, N, M, Bc, d=8):
    """q, k, v whose first key block of Bc keys scores near +400 for every query and every later key near -400."""
    q = np.zeros((N, d))
    q[:, 0] = 2.0 * np.sqrt(d)
    k = rng.standard_normal((M, d))
    k[:, 0] = (-405.0 + 10.0 * rng.random(M)) / 2.0
    k[:Bc, 0] = (395.0 + 10.0 * rng.random(min(Bc, M))) / 2.0
    return q, k, rng.standard_normal((M, d))


def _fresh_forward_cases(rng):
    """Cases of the fixed kinds drawn afresh: partial blocks, causal with N != M, a high key block before low ones."""
    N, M = (int(x) for x in rng.integers(5, 60, 2))
    Br, Bc = (int(x) for x in rng.integers(2, 17, 2))
    d, dv = (int(x) for x in rng.integers(2, 9, 2))
    r = rng.standard_normal
    return [
        (f"fresh, N = {N}, M = {M}", (r((N, d)), r((M, d)), r((M, dv)), Br, Bc, False)),
        (
            f"fresh, causal, N = {N}, M = {M}",
            (r((N, d)), r((M, d)), r((M, dv)), Br, Bc, True),
        ),
        (
            f"fresh, a key block near +400 before {M + Bc - Bc} keys near -400",
            (*_high_first(rng, N, M + Bc, Bc), Br, Bc, False),
        ),
    ]


def _forward_cases(fresh=None):
    """(label, (q, k, v, Br, Bc, causal)): the classic failure cases, then (with a generator `fresh`) fresh ones of the
    same kinds; the last is large enough to see an N × M array."""
    rng = np.random.default_rng(5)

    def qkv(N, M, d=8, dv=8, spread=1.0):
        return (
            rng.standard_normal((N, d)) * spread,
            rng.standard_normal((M, d)) * spread,
            rng.standard_normal((M, dv)),
        )

    low = (
        -20 + 0.3 * rng.standard_normal((10, 8)),
        20 + 0.3 * rng.standard_normal((24, 8)),
        rng.standard_normal((24, 8)),
    )
    return [
        ("Br, Bc divide N, M", (*qkv(64, 64), 16, 32, False)),
        ("partial last blocks, dv != d", (*qkv(50, 70, 8, 4), 16, 32, False)),
        (
            "a key block near +400 before 30 keys near -400",
            (*_high_first(np.random.default_rng(50), 12, 38, 8), 4, 8, False),
        ),
        ("causal, N = M, partial blocks", (*qkv(37, 37), 8, 5, True)),
        ("causal, N < M", (*qkv(20, 45), 8, 16, True)),
        ("causal, N > M: queries 0-6 see no key", (*qkv(12, 5), 4, 2, True)),
        ("blocks larger than N and M", (*qkv(5, 9), 64, 64, True)),
        ("blocks of one row", (*qkv(6, 7), 1, 1, True)),
        ("every score near -1100", (*low, 4, 8, False)),
        ("scores in the thousands", (*qkv(16, 40, spread=30.0), 8, 8, True)),
        *(_fresh_forward_cases(fresh) if fresh is not None else []),
        ("large", (*qkv(128, 4096), 16, 64, False)),
    ]


_shown = (
    lambda n, label, case: (
        "case {} ({}; N = {}, M = {}, d = {}, dv = {}, Br = {}, Bc = {}, causal={})".format(  # noqa: E731
            n,
            label,
            len(case[0]),
            len(case[1]),
            case[0].shape[1],
            case[2].shape[1],
            *case[3:],
        )
    )
)


def _reference(q, k, v, visible=None, scale=None):
    """float64 (o, lse) of softmax(scale q kᵀ) v with hidden pairs (visible False) at -inf; o = 0, lse = -inf for no key."""
    s = (q @ k.T) * (1 / np.sqrt(q.shape[1]) if scale is None else scale)
    s = s if visible is None else np.where(visible, s, -np.inf)
    m = np.where(np.isneginf(s.max(axis=1)), 0.0, s.max(axis=1))
    p = np.exp(s - m[:, None])
    seen = p.sum(axis=1) > 0
    l1 = np.where(seen, p.sum(axis=1), 1.0)
    return np.where(seen[:, None], (p @ v) / l1[:, None], 0.0), np.where(
        seen, m + np.log(l1), -np.inf
    )


def _alpha_inverted(q, k, v, Br, Bc, causal):
    """The tiled forward with the classic slip α = e^(m′ - m) (guards as in the worked solution): (o, lse)."""
    return _slipped(q, k, v, Br, Bc, causal, "alpha inverted")


def _slipped(q, k, v, Br, Bc, causal, slip):
    """The tiled forward with one classic slip: "alpha inverted" (α = e^(m′ - m)), "acc not rescaled",
    "partial blocks dropped" (the loops stop at the last whole block), "float32" (the state in float32)."""
    N, M, d = len(q), len(k), q.shape[1]
    dt = np.float32 if slip == "float32" else np.float64
    o, lse = np.zeros((N, v.shape[1])), np.full(N, -np.inf)
    n_end = N - N % Br if slip == "partial blocks dropped" else N
    m_end = M - M % Bc if slip == "partial blocks dropped" else M
    with np.errstate(all="ignore"):
        for i0 in range(0, n_end, Br):
            i1 = min(i0 + Br, N)
            m, l = np.full(i1 - i0, -np.inf, dt), np.zeros(i1 - i0, dt)
            acc = np.zeros((i1 - i0, v.shape[1]), dt)
            for j0 in range(0, m_end, Bc):
                j1 = min(j0 + Bc, M)
                s = (q[i0:i1] @ k[j0:j1].T / np.sqrt(d)).astype(dt)
                if causal:
                    hide = (
                        np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None] + M - N
                    )
                    s = np.where(hide, -np.inf, s)
                m_new = np.maximum(m, s.max(axis=1))
                m_use = np.where(np.isneginf(m_new), 0.0, m_new)
                inverted = slip in ("alpha inverted", "alpha inverted, guarded")
                alpha = np.exp(m_use - m if inverted else m - m_use)
                if (
                    slip == "alpha inverted, guarded"
                ):  # the first tile's α set to 0 (l, acc are 0)
                    alpha = np.where(np.isneginf(m), 0.0, alpha)
                p = np.exp(s - m_use[:, None])
                keep = 1.0 if slip == "acc not rescaled" else alpha[:, None]
                l, acc, m = (
                    alpha * l + p.sum(axis=1),
                    keep * acc + p @ v[j0:j1].astype(dt),
                    m_new,
                )
            seen = l > 0
            o[i0:i1] = acc / np.where(seen, l, 1.0)[:, None]
            lse[i0:i1] = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)
    return o, lse


_SLIPS = {
    "acc not rescaled": (
        "l is rescaled by α = e^(m - m′) and acc is not: acc's terms were taken relative to the old m "
        "like l's, so when the max grows both shrink by the same α (acc = α[:, None] * acc + P_ij @ V_j)"
    ),
    "partial blocks dropped": (
        "the partial last blocks are missing (rows past the last whole query block stay 0, and the last "
        "keys are never seen): loop over range(0, N, Br) and range(0, M, Bc), ending each block at "
        "min(i0 + Br, N) and min(j0 + Bc, M)"
    ),
    "float32": (
        "your values agree to about 1e-7, float32's precision: the inputs are float64, so keep m, l and acc in "
        "float64 too (np.zeros and np.full give float64 unless told dtype=np.float32)"
    ),
}


_ALPHA_INVERTED = (
    "α is inverted: when the running max grows from m to m′, the terms already in l and acc were taken "
    "relative to the old m and must shrink, α = e^(m - m′) ≤ 1; e^(m′ - m) grows them instead (and at the "
    "first tile, where m = -inf, it is e^(+inf) = inf, and inf · 0 = NaN)"
)


def _forward_hint(case, got, want) -> str:
    q, k, v, Br, Bc, causal = case
    N, M = len(q), len(k)
    try:
        o, lse = (np.asarray(x, dtype=float) for x in got)
    except (TypeError, ValueError):
        return "return the pair (o, lse): o of shape (N, dv), lse of shape (N,)"
    if o.shape != want[0].shape or lse.shape != want[1].shape:
        if min(len(o), len(lse)) < N and N % Br:
            return (
                f"the last query block is partial (rows {N - N % Br} to {N - 1}) and yours has no rows for it: "
                "loop over range(0, N, Br) and end each block at min(i0 + Br, N)"
            )
        return "o has shape (N, dv) and lse shape (N,): one row per query"
    for slip in (
        _alpha_inverted(q, k, v, Br, Bc, causal),
        _slipped(q, k, v, Br, Bc, causal, "alpha inverted, guarded"),
    ):
        if all(
            np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)
            for a, b in zip((o, lse), slip)
        ):
            return _ALPHA_INVERTED
    if np.asarray(got[0]).dtype == np.float32:
        return _SLIPS["float32"]
    for name, text in _SLIPS.items():
        alt = _slipped(q, k, v, Br, Bc, causal, name)
        tol = (1e-4, 1e-6) if name == "float32" else (1e-9, 1e-12)
        if all(
            np.allclose(a, b, rtol=tol[0], atol=tol[1], equal_nan=True)
            for a, b in zip((o, lse), alt)
        ) and not np.allclose(o, want[0], rtol=1e-9, atol=1e-12):
            return text
    vis = causal_mask(N, M) if causal else np.ones((N, M), bool)
    s = np.where(vis, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    if not causal and M > Bc and s[:, :Bc].min() > 300 and s[:, Bc:].max() < -300:
        return RUNNING_MAX
    full = N - N % Br
    if N % Br and np.allclose(
        o[:full], want[0][:full], rtol=1e-9, atol=1e-12, equal_nan=True
    ):
        return (
            f"the last {N % Br} queries (rows {full} to {N - 1}) form a partial query block, and yours gets "
            "them wrong: loop over range(0, N, Br) and end each block at min(i0 + Br, N)"
        )
    bad = (
        np.isnan(o).any(axis=1)
        | np.isnan(lse)
        | (np.isneginf(lse) & np.isfinite(want[1]))
    )
    if (bad & np.isneginf(want[1])).any():
        return (
            "a query that sees no key (causal, N > M) ends with m = -inf and l = 0: e^(m - m_new) and acc / l are "
            "NaN there. Give it o = 0 and lse = -inf (divide only where l > 0; subtract 0, not -inf)"
        )
    if (bad & (s.max(axis=1) < -700)).any():
        return (
            "every score of this row is below -700, so e^s underflows to 0 unless the running max is subtracted: "
            "start m at -inf (not 0), so that the first key block sets it"
        )
    if bad.any() and np.abs(s[np.isfinite(s)]).max() > 700:
        return "scores this large overflow e^s: subtract the running max m before exp, rescaling l and acc when it grows"
    alts = []
    if causal and N != M:
        alts.append(
            (
                _reference(q, k, v, np.arange(M)[None, :] <= np.arange(N)[:, None]),
                "that is causal attention aligned top-left (key c hidden when c > r); "
                "FlashAttention-2 aligns the mask bottom-right: key c is hidden from query r when c > r + (M - N)",
            )
        )
    if causal:
        alts.append(
            (
                _reference(q, k, v),
                "that is attention without the mask: with causal=True, key c is hidden from "
                "query r when c > r + (M - N)",
            )
        )
    if causal:
        r, c = np.arange(N)[:, None], np.arange(M)[None, :]
        computed = np.zeros(
            (N, M), bool
        )  # every pair of the tiles a causal kernel computes
        for i0 in range(0, N, Br):
            i1 = min(i0 + Br, N)
            computed[i0:i1, : max(0, min(M, i1 + M - N))] = True
        computed = np.repeat(
            np.add.reduceat(computed, np.arange(0, M, Bc), axis=1) > 0,
            np.diff(np.r_[np.arange(0, M, Bc), M]),
            axis=1,
        )
        alts.append(
            (
                _reference(q, k, v, computed),
                "the diagonal tiles are computed without the mask inside: a tile that is partly visible "
                "must still hide its pairs with c > r + (M - N) (set those scores to -inf before the max)",
            )
        )
        alts += [
            (
                _tile_reference(
                    q, k, v, Br, Bc, lambda i0, i1, j0, j1: j1 - 1 <= i0 + M - N
                ),
                "your kernel skipped the diagonal tiles, those partly visible: skip a tile only when every "
                "pair in it is hidden (its first key j0 beyond (i1 - 1) + (M - N)) and compute the diagonal "
                "ones with the mask inside",
            ),
            (
                _tile_reference(
                    q, k, v, Br, Bc, lambda i0, i1, j0, j1: j0 < i1 - 1 + M - N
                ),
                "off by one in the skip: a tile whose first key is j0 = (i1 - 1) + (M - N) holds one visible "
                "pair (the block's last query and that key); compute it: j0 <= (i1 - 1) + (M - N)",
            ),
            (
                _reference(q, k, v, c < r + M - N),
                "the mask is off by one: query r sees key c = r + (M - N) itself; hide c only when "
                "c > r + (M - N), not when c >= r + (M - N)",
            ),
            (
                _reference(q, k, v, c <= r + M - N + 1),
                "the mask is off by one: query r sees keys up to c = r + (M - N), not one more",
            ),
        ]
    d = q.shape[1]
    alts.append(
        (
            _reference(q, k, v, vis, scale=1.0),
            "the scores are not scaled: s = q kᵀ / √d",
        )
    )
    if d > 1:
        alts.append(
            (
                _reference(q, k, v, vis, scale=1.0 / d),
                f"the scores are scaled by 1/d = {1 / d:.4g}; the scale is 1/√d = "
                f"{1 / np.sqrt(d):.4g} for d = {d}: s = q kᵀ / √d (np.sqrt(d), not d)",
            )
        )
    if M % Bc:
        alts.append(
            (
                _reference(q, k, v, vis & (np.arange(M) < M - M % Bc)),
                f"the last key block is partial "
                f"({M % Bc} keys) and yours left it out: loop over range(0, M, Bc), ending at min(j0 + Bc, M)",
            )
        )
    for a, text in alts:
        if np.allclose(o, a[0], rtol=1e-9, atol=1e-12) and np.allclose(
            lse, a[1], rtol=1e-9, atol=1e-12, equal_nan=True
        ):
            return text
    m_end = np.where(
        np.isneginf(want[1]), 0.0, s.max(axis=1)
    )  # the final m of each row
    l_end = np.where(np.isneginf(want[1]), 0.0, np.exp(want[1] - m_end))  # its final l
    if np.abs(l_end - 1).max() > 1e-6 and np.allclose(
        o, want[0] * l_end[:, None], rtol=1e-9, atol=1e-12
    ):
        return (
            "o is acc, not acc / l: acc = Σ e^(s - m) v is the unnormalized sum, so divide it by "
            "l once, after the last key block of the query block (o = acc / l, 0 where l = 0)"
        )
    if np.allclose(o, want[0], rtol=1e-9, atol=1e-12):
        m = np.where(np.isneginf(want[1]), 0.0, s.max(axis=1))
        if np.allclose(lse, want[1] - m, rtol=1e-9, atol=1e-12):
            return "your lse is log l: l was summed as e^(s - m), so lse = m + log l"
        return "o is right and lse is not: lse = log Σ_j e^(s_ij) over the visible keys, m + log l with the final m and l"
    return (
        "check one tile by hand: m starts at -inf, α = e^(m - m′) rescales both l and acc, P_ij = e^(S_ij - m′) "
        "multiplies V_j, and o = acc / l comes once, at the end"
    )


def _rows_needed(N, M, Br, causal):
    """Per key row: how many query blocks have a query that sees it."""
    last = (
        np.minimum(np.arange(0, N, Br) + Br, N) - 1 + (M - N if causal else M)
    )  # the last key each block sees
    return (np.arange(M)[:, None] <= last[None, :]).sum(axis=1)


def _loads_problem(a: BlockLoadArray, N, Br, Bc, causal):
    """What the loads of K (or V) break, in words; None when each row was loaded once per query block that sees it."""
    Tr, big = -(-N // Br), a.name.upper()
    if a.whole:
        return (
            f"{big} was loaded whole, all {len(a)} rows at once ({a.whole}); a tile kernel loads {big} one block of at "
            f"most Bc = {Bc} rows at a time: {a.name}[j0:j1]"
        )
    if a.largest > Bc:
        return (
            f"{a.largest} rows of {a.name} were loaded in one access ({a.largest_at}); a key block holds at most "
            f"Bc = {Bc} rows"
        )
    over = np.flatnonzero(a.loads > Tr)
    if over.size:
        j = int(over[0])
        if Br > 1 and a.loads[j] == N:
            return (
                f"{big} was loaded once per query row: row {j} of {a.name} {N} times for N = {N} queries; a query "
                f"block of Br = {Br} rows, q[i0:i0 + Br], shares each load of {big}_j among its rows"
            )
        per = f"{a.loads[j] // Tr} times" if a.loads[j] % Tr == 0 else "more than once"
        return (
            f"{big} was read {per} per query block: row {j} of {a.name} was loaded {a.loads[j]} times for Tr = {Tr} "
            f"query blocks; one pass loads each {big}_j once per query block and uses it for the max, l and acc alike"
        )
    need = _rows_needed(N, len(a), Br, causal)
    under = np.flatnonzero(a.loads < need)
    if under.size:
        j = int(under[0])
        return (
            f"row {j} of {a.name} was loaded {a.loads[j]} time(s), but {need[j]} query blocks see it: FlashAttention-2 "
            f"loops over the query blocks outside and loads K_j, V_j inside, again for every query block (a tile "
            f"kernel keeps no copy of K or V between query blocks)"
        )
    return None


class _Refused:
    """What `_attempt` returns in place of a result when the learner's function ran lab's answers or torch."""

    def __init__(self, called):
        self.called = called


def _attempt(name, fn, shown, args, what="", course=_COURSE, numpy_only=False):
    """(True, fn(*args)), (True, _Refused(...)) when it ran lab's answers `course` (or with `numpy_only` another array
    library), or (False, None) after printing why it could not run."""
    try:
        with _watching(course, numpy_only=numpy_only) as called:
            got = _settled(fn(*args))
        return True, (_Refused(called) if called else got)
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        print(
            f"{name}: ✗ {shown}{what} raised {type(exc).__name__}: {exc}{raised_at(exc)}"
        )
        hint = (
            "m, l and alpha hold one value per query row, shape (Br,): against a (Br, Bc) tile they need a new "
            "axis, s - m_new[:, None], alpha[:, None] * acc"
            if "broadcast" in str(exc)
            else "index k and v by blocks of rows only (k[j0:j1]) and compute on the tiles you get"
            if what
            else None
        )
        if hint:
            print(f"  hint: {hint}")
    return False, None


_FORWARD_COURSE = _COURSE + ("flash_attention_torch", "attention_row_three_pass")


def _needed_tiles(N, M, Br, Bc, causal):
    """{(i, j): keys}: the tiles fa2 computes, each with the key rows of its K_j, V_j (a partial last block fewer).

    Under the bottom-right causal mask tile (i, j) is needed when its last query r = i1 - 1 sees its first key
    c = j0, that is j0 <= i1 - 1 + (M - N)."""
    return {
        (i0 // Br, j0 // Bc): min(j0 + Bc, M) - j0
        for i0 in range(0, N, Br)
        for j0 in range(0, M, Bc)
        if not causal or j0 <= min(i0 + Br, N) - 1 + M - N
    }


def _tile_reference(q, k, v, Br, Bc, keep):
    """float64 (o, lse) of causal attention over the tiles (i0, i1, j0, j1) for which `keep` is true only."""
    N, M = len(q), len(k)
    vis = causal_mask(N, M).copy()
    for i0 in range(0, N, Br):
        for j0 in range(0, M, Bc):
            i1, j1 = min(i0 + Br, N), min(j0 + Bc, M)
            if not keep(i0, i1, j0, j1):
                vis[i0:i1, j0:j1] = False
    return _reference(q, k, v, vis)


def _report(got):
    """The tile report `got[2]` as an (T, 3) int array of (i, j, keys), or None when it is not one."""
    try:
        r = np.asarray(got[2], dtype=float)
    except (TypeError, ValueError, IndexError):
        return None
    r = r.reshape(0, 3) if r.size == 0 else r
    if r.ndim != 2 or r.shape[1] != 3 or not np.all(r == np.round(r)):
        return None
    return r.astype(np.int64)


_REPORT_SHAPE = (
    "return (o, lse, tiles): tiles is a list with one (i, j, n) per tile computed: "
    "the block indices i = i0 // Br, j = j0 // Bc and n, the rows of K_j (and of V_j) loaded for it"
)


def _report_problem(report, N, M, Br, Bc, causal) -> str | None:
    """What the tile report gets wrong, in words; None when it lists each needed tile once with its key count."""
    need, seen = _needed_tiles(N, M, Br, Bc, causal), {}
    for i, j, n in report.tolist():
        if (i, j) in seen:
            return f"tile ({i}, {j}) is reported twice: each tile of a query block is computed once"
        seen[(i, j)] = n
    Tr, Tc = -(-N // Br), -(-M // Bc)
    for i, j in seen:
        if not (0 <= i < Tr and 0 <= j < Tc):
            return (
                f"tile ({i}, {j}) is not on the grid of Tr × Tc = {Tr} × {Tc} tiles: "
                "report block indices, i = i0 // Br and j = j0 // Bc"
            )
    for i, j in need:
        if (i, j) in seen:
            continue
        i1, j0 = min((i + 1) * Br, N), j * Bc
        corner = j0 == i1 - 1 + M - N
        if not causal:
            return (
                f"tile ({i}, {j}) is missing from your report: without the mask every one of the "
                f"Tr × Tc = {Tr} × {Tc} tiles is computed, so each is loaded and reported once"
                + (
                    "; the last key block is partial and counts too"
                    if j == Tc - 1 and M % Bc
                    else ""
                )
            )
        return (
            f"tile ({i}, {j}) is missing from your report: query {i1 - 1} (the block's last) sees key {j0} "
            "(its first), so the tile is computed. "
            + (
                "Off by one: the last query r = i1 - 1 sees the first key c = j0 when c <= r + (M - N), "
                "with <=, not <"
                if corner
                else "Skip only tiles whose every pair is hidden; a diagonal tile, partly visible, is computed "
                "with the mask inside"
            )
        )
    for i, j in seen:
        if (i, j) in need:
            continue
        i1, j0 = min((i + 1) * Br, N), j * Bc
        return (
            f"tile ({i}, {j}) is computed, but every pair in it is hidden: its first key {j0} lies beyond "
            f"{i1 - 1} + (M - N) = {i1 - 1 + M - N}, the last key the block's last query sees. "
            + (
                "Off by one: compute a tile when j0 <= (i1 - 1) + (M - N), "
                "and skip it (no load) when j0 is one more"
                if j0 == i1 + M - N
                else "Skip it: neither load its K_j, V_j nor report it"
            )
        )
    for (i, j), n in need.items():
        if seen[(i, j)] != n:
            j0 = j * Bc
            part = "; the last key block is partial" if n < Bc else ""
            return (
                f"tile ({i}, {j}) loads keys {j0} to {j0 + n - 1}, n = {n} rows of K_j and V_j, "
                f"and your report says {seen[(i, j)]}{part}: report the rows you loaded, j1 - j0"
            )
    return None


def _report_matches_loads(report, a: BlockLoadArray, Bc) -> str | None:
    """None when the rows of `a` were loaded exactly as often as the reported tiles hold them; else the first row
    that was not."""
    want = np.zeros(len(a), dtype=np.int64)
    for _, j, n in report.tolist():
        want[j * Bc : j * Bc + n] += 1
    off = np.flatnonzero(a.loads != want)
    if not off.size:
        return None
    r = int(off[0])
    return (
        f"row {r} of {a.name} was loaded {a.loads[r]} time(s), but your report lists {want[r]} tile(s) that hold "
        f"it: load K_j and V_j once for each tile you compute, and report each tile you load"
    )


def _forward_or_report_hint(case, got, want) -> str:
    """`_forward_hint`; where it finds no named slip and the output is causal attention over the tiles the report
    lists, what the report gets wrong (a tile skipped that holds visible pairs)."""
    hint = _forward_hint(case, tuple(got[:2]), want)
    q, k, v, Br, Bc, causal = case
    report = _report(got)
    if not hint.startswith("check one tile by hand") or not causal or report is None:
        return hint
    listed = {(i, j) for i, j, _ in report.tolist()}
    alt = _tile_reference(
        q, k, v, Br, Bc, lambda i0, i1, j0, j1: (i0 // Br, j0 // Bc) in listed
    )
    o, lse = (np.asarray(x, dtype=float) for x in got[:2])
    if o.shape == alt[0].shape and np.allclose(o, alt[0], rtol=1e-9, atol=1e-12):
        return _report_problem(report, len(q), len(k), Br, Bc, causal) or hint
    return hint


def check_tiled_forward(
    fn, *, name: str | None = None, seed: int | None = None, core: bool = False
) -> None:
    """Check `fn(q, k, v, Br, Bc, causal) -> (o, lse, tiles)`: FlashAttention-2's forward with causal tile skipping
    and a per-tile load report.

    Values against `attention_reference` on the classic failure cases (rtol 1e-9); then k and v as
    `BlockLoadArray`s: no access of more than Bc rows, `tiles` lists exactly the tiles the mask needs, each
    once with its key count j1 - j0, and each row of K and V was loaded exactly as often as the reported tiles
    hold it; last, the peak of the large case under tracemalloc below half a Br × M strip of float64 scores.
    Lab's answers and other array libraries are refused. Fixed cases and fresh ones each run (`seed` draws the
    same again). `core=True`: only the cases without a mask (the in-class part), the same tests on each.
    Taught in: notebooks/05_tiling_traffic.ipynb"""
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cases = _forward_cases(rng)
    fixed = len(_forward_cases())
    if core:  # the same tests, on the cases without a mask; the large one stays last
        cases, fixed = [c for c in cases if not c[1][5]], 0
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for n, (label, case) in enumerate(cases):
            want = attention_reference(case[0], case[1], case[2], causal=case[5])
            ok, got = _attempt(
                name,
                fn,
                _shown(n, label, case),
                tuple(np.array(a) for a in case[:3]) + case[3:],
                course=_FORWARD_COURSE,
                numpy_only=True,
            )
            if not ok:
                return print(seed_note(seed), end="")
            if isinstance(got, _Refused):
                return print(
                    f"{name}: ✗ {_shown(n, label, case)}: {_refusal(got.called)}"
                )
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                return print(
                    f"{name}: ✗ {_shown(n, label, case)}: returned "
                    f"{type(got).__name__}{f' of {len(got)}' if isinstance(got, (tuple, list)) else ''}"
                    f"\n  hint: {_REPORT_SHAPE}"
                )
            problem = diagnose(
                tuple(got[:2]), want, names=("o", "lse"), rtol=1e-9, atol=1e-12
            )
            if problem is not None:
                return print(
                    f"{name}: ✗ {_shown(n, label, case)}: {problem}\n  hint: "
                    f"{_forward_or_report_hint(case, got, want)}\n" + seed_note(seed),
                    end="",
                )
        skipped = 0
        for n, (label, case) in enumerate(cases):
            q, k, v, Br, Bc, causal = case
            K, V = BlockLoadArray(k, "k"), BlockLoadArray(v, "v")
            ok, got = _attempt(
                name,
                fn,
                _shown(n, label, case),
                (np.array(q), K, V, Br, Bc, causal),
                " with k and v that count the rows you load",
                course=_FORWARD_COURSE,
                numpy_only=True,
            )
            if not ok:
                return print(seed_note(seed), end="")
            if isinstance(got, _Refused):
                return print(
                    f"{name}: ✗ {_shown(n, label, case)}: {_refusal(got.called)}"
                )
            N, M, shown = len(q), len(k), _shown(n, label, case)
            report = _report(got)
            problem = (
                (_REPORT_SHAPE if report is None else None)
                or _loads_problem(K, N, Br, Bc, causal)
                or _loads_problem(V, N, Br, Bc, causal)
                or _report_problem(report, N, M, Br, Bc, causal)
                or _report_matches_loads(report, K, Bc)
                or _report_matches_loads(report, V, Bc)
            )
            if problem:
                return print(f"{name}: ✗ {shown}: {problem}")
            if n < fixed - 1:
                skipped += -(-N // Br) * -(-M // Bc) - len(report)
        peak, _ = peak_bytes(fn, *(np.array(a) for a in case[:3]), *case[3:])
    N, M, strip = len(q), len(k), Br * len(k) * 8
    if peak > strip / 2:
        what = (
            f"as much as an N × M array of float64 ({N} × {M} = {N * M * 8 // 1024:,} KiB)"
            if peak >= 0.9 * N * M * 8
            else f"as much as {max(1, round(peak / strip))} Br × M strip(s) of float64 ({Br} × {M} = {strip // 1024:,} KiB)"
        )
        return print(
            f"{name}: ✗ {_shown(n, label, case)}: held {peak / 1024:,.0f} KiB at once, {what}; a tiled kernel "
            f"holds one Br × Bc tile of scores at a time ({Br * Bc * 8 // 1024} KiB here) besides its output\n"
            "  hint: compute each tile's scores, use them for the running max, l and acc, and let them go"
        )
    if core:
        return print(
            f"{name}: ✓ the core: passed the {len(cases)} cases without a mask, exact to 1e-9; no N × M "
            "array held;\n  K_j, V_j loaded once per reported tile. Next (homework): causal=True, "
            "checked by the next cell"
        )
    print(
        f"{name}: ✓ passed {len(cases)} cases, exact to 1e-9; no N × M array held;\n  K_j, V_j loaded "
        f"once per reported tile, at most Bc rows; {skipped} hidden tiles skipped (fixed cases)"
    )
