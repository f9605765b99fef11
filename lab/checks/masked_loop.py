"""Checks for notebook 11's build exercise: the hooks inside a tiled online-softmax loop, empty tiles skipped.

`check_tile_kinds` checks a learner's block mask (0 empty, 1 partial, 2 full per tile) against `lab.block_mask`;
`check_masked_attention` runs a learner's tiled loop on fresh cases with recording hooks: it must equal the
reference (o and lse), compute exactly the non-empty tiles (each `score_mod` call is one tile), leave no NaN on
rows that see no key, apply `score_mod` before the mask (a soft cap after the mask un-masks keys:
cap·tanh(−∞/cap) = −cap) and take the running max after the mask (a dropped key scoring +1000 must not raise m).

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np

from ..masks import block_mask, document_mask, sliding_window, softcap
from ..notebook import measured
from ._seeded import noting_seed
from ._support import _fresh, _refusal, _settled, _watching

__all__ = ["check_tile_kinds", "check_masked_attention"]

_LAB_ANSWERS = (
    "block_mask",
    "masks._tile_kinds",
    "flash_attention_numpy",
    "attention_reference",
    "flash_attention_torch",
    "flex_reference",
)
_INSTRUMENT_HELPERS = ("_identity",)  # a hook handed to the learner calls it


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _kinds(mask_mod, N, M, Br, Bc) -> np.ndarray:
    """The reference block mask of one head: (ceil(N/Br), ceil(M/Bc)) ints, 0 empty, 1 partial, 2 full."""
    return block_mask(mask_mod, 1, 1, N, M, Br, Bc).kind[0, 0]


def _keep(mask_mod, N, M) -> np.ndarray:
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    return np.broadcast_to(np.asarray(mask_mod(0, 0, i, j), dtype=bool), (N, M))


def _run(name, fn, args, shown):
    """`fn(*args)` watched (lab's kernels, block mask and references refused), or None after printing why."""
    try:
        with (
            np.errstate(all="ignore"),
            warnings.catch_warnings(),
            _watching(_LAB_ANSWERS, numpy_only=True) as seen,
        ):
            warnings.simplefilter("ignore")
            got = _settled(fn(*args))
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return None
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        text = str(exc)
        extra = (
            " (on arrays, use & | ~ instead of and / or / not)"
            if "truth value" in text
            else " (the last block may be shorter than Br or Bc: take its indices up to N and M, "
            "e.g. np.arange(i0, min(i0 + Br, N)))"
            if "broadcast" in text
            or "did not match" in text
            or isinstance(exc, IndexError)
            else ""
        )
        print(f"{name}: ✗ {shown} raised {type(exc).__name__}: {exc}{extra}")
        return None
    if seen:
        print(f"{name}: ✗ {shown}: {_refusal(seen)}")
        return None
    return got


# ---------------------------------------------------------------------------------------------- the block mask


def _mask_cases(rng) -> list:
    """(label, N, M, Br, Bc, mask_mod): windows, documents with a document that sees no key, causal with N > M."""
    out = []
    for _ in range(2):
        N, M = int(rng.integers(30, 90)), int(rng.integers(30, 90))
        Br, Bc = int(rng.choice([8, 12, 16])), int(rng.choice([8, 10, 16]))
        W = int(rng.integers(3, 20))
        out.append(
            (
                f"sliding_window({W - 1}, 0, {N}, {M})",
                N,
                M,
                Br,
                Bc,
                sliding_window(W - 1, 0, N, M),
            )
        )
    N, M = int(rng.integers(60, 100)), int(rng.integers(20, 50))
    out.append(
        (
            f"causal, N = {N} > M = {M}",
            N,
            M,
            16,
            8,
            sliding_window(None, 0, N, M),
        )
    )
    out.append(_band_case(rng))
    q_doc, k_doc = _documents(rng)
    out.append(
        (
            "documents",
            len(q_doc),
            len(k_doc),
            16,
            16,
            document_mask(q_doc, k_doc),
        )
    )
    return out


def _band(c: int):
    """Mask: keep the two diagonals i - j = c and c + 1 (5 <= c <= 10): with 16 × 16 tiles the band crosses
    tiles without touching any tile's corners or centre, so a classifier that looks at a few elements misses it."""

    def band(b, h, i, j):
        return (i - j >= c) & (i - j <= c + 1)

    return band


def _band_case(rng) -> tuple:
    """(label, N, M, Br, Bc, mask_mod) of a thin diagonal band, 16 × 16 tiles."""
    c = int(rng.integers(5, 11))
    N, M = int(rng.integers(50, 90)), int(rng.integers(50, 90))
    return (f"a band of 2 diagonals, i - j = {c} or {c + 1}", N, M, 16, 16, _band(c))


def _documents(rng):
    """Packed documents; document 7 has queries and no keys (rows that see nothing)."""
    lengths_q = [int(x) for x in rng.integers(8, 30, size=3)]
    lengths_k = [int(x) for x in rng.integers(8, 30, size=3)]
    empty = int(rng.integers(5, 20))
    q_doc = np.repeat([0, 1, 7, 2], [lengths_q[0], lengths_q[1], empty, lengths_q[2]])
    k_doc = np.repeat([0, 1, 2], lengths_k)
    return q_doc, k_doc


def check_tile_kinds(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(mask_mod, N, M, Br, Bc)`, the kind of every tile (0 empty, 1 partial, 2 full); print one verdict.

    Cases drawn fresh each run (`seed` draws the same again): windows, documents with rows that see no key,
    causal with N > M, block sizes that do not divide N or M. Says the first tile classified wrong, with how
    many of its elements the mask keeps; running `lab.block_mask` (or lab's kernels) is refused.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    name = name or getattr(fn, "__name__", "tile_kinds")
    rng, seed = _fresh(seed)
    cases = _mask_cases(rng)
    with noting_seed(seed):
        for n, (label, N, M, Br, Bc, mod) in enumerate(cases):
            shown = f"case {n} ({label}, Br = {Br}, Bc = {Bc})"
            got = _run(name, fn, (mod, N, M, Br, Bc), shown)
            if got is None:
                return
            want = _kinds(mod, N, M, Br, Bc)
            if np.shape(got) != want.shape:
                print(
                    f"{name}: ✗ {shown}: shape {np.shape(got)}, expected {want.shape} = "
                    f"(ceil(N / Br), ceil(M / Bc)): a last, shorter block is still a tile"
                )
                return
            got = np.asarray(got)
            if not np.array_equal(got, want):
                I, J = (int(x) for x in np.argwhere(got != want)[0])
                keep = _keep(mod, N, M)[I * Br : (I + 1) * Br, J * Bc : (J + 1) * Bc]
                kinds = {0: "empty", 1: "partial", 2: "full"}
                print(
                    f"{name}: ✗ {shown}: tile (I = {I}, J = {J}) keeps {int(keep.sum())} of its "
                    f"{keep.size} elements, so it is {kinds[int(want[I, J])]} ({int(want[I, J])}); "
                    f"yours says {got[I, J]}"
                    + (
                        " (the last block is shorter: count only the rows and keys it has)"
                        if I == want.shape[0] - 1 or J == want.shape[1] - 1
                        else ""
                    )
                )
                return
        print(
            f"{name}: ✓ passed {len(cases)} cases (windows, a thin band, documents, causal with N > M)"
        )


# ----------------------------------------------------------------------------------------------- the tiled loop


class _Hooks:
    """Recording hooks around a score_mod and a mask_mod: which tiles each was called on, in order."""

    def __init__(self, score_mod, mask_mod):
        self.score, self.mask = score_mod, mask_mod
        self.calls = []  # ("score" | "mask", i0, i1, j0, j1)

    def _note(self, what, i, j):
        i, j = np.asarray(i), np.asarray(j)
        self.calls.append(
            (what, int(i.min()), int(i.max()) + 1, int(j.min()), int(j.max()) + 1)
        )

    def score_mod(self, s, b, h, i, j):
        self._note("score", i, j)
        return self.score(s, b, h, i, j)

    def mask_mod(self, b, h, i, j):
        self._note("mask", i, j)
        return self.mask(b, h, i, j)


def _identity(s, b, h, i, j):
    return s + 0.0


def _loop_cases(rng) -> list:
    """(label, N, M, d, Br, Bc, score_mod, mask_mod, spread), drawn fresh."""
    out = []
    N, M = int(rng.integers(40, 90)), int(rng.integers(40, 90))
    W = int(rng.integers(8, 30))
    out.append(
        (
            f"sliding window of {W} keys",
            N,
            M,
            8,
            16,
            12,
            _identity,
            sliding_window(W - 1, 0, N, M),
            1.0,
        )
    )
    slope = float(rng.uniform(0.1, 0.5))
    N, M = int(rng.integers(40, 90)), int(rng.integers(40, 90))

    def alibi_like(s, b, h, i, j, off=M - N, slope=slope):
        return s - slope * abs(i + off - j)

    out.append(
        (
            f"ALiBi-like slope {slope:.2f}, causal",
            N,
            M,
            8,
            12,
            16,
            alibi_like,
            sliding_window(None, 0, N, M),
            1.0,
        )
    )
    cap = float(rng.uniform(2.0, 4.0))
    N = M = int(rng.integers(50, 90))
    out.append(
        (
            f"soft-cap {cap:.1f}, window of 12 keys",
            N,
            M,
            8,
            16,
            8,
            softcap(cap),
            sliding_window(11, 0, N, M),
            2.0,
        )
    )
    label, N, M, Br, Bc, band = _band_case(rng)
    out.append((label, N, M, 8, Br, Bc, _identity, band, 1.0))
    q_doc, k_doc = _documents(rng)
    out.append(
        (
            "documents, one with no keys",
            len(q_doc),
            len(k_doc),
            8,
            16,
            16,
            _identity,
            document_mask(q_doc, k_doc),
            1.0,
        )
    )
    N, M = int(rng.integers(60, 90)), int(rng.integers(20, 45))
    out.append(
        (
            f"causal, N = {N} > M = {M}",
            N,
            M,
            8,
            16,
            8,
            _identity,
            sliding_window(None, 0, N, M),
            1.0,
        )
    )
    N = M = int(rng.integers(40, 70))

    def decoy(s, b, h, i, j):  # the keys the mask drops score +1000
        return s + 1000.0 * (j % 2 == 1)

    def even(b, h, i, j):
        return j % 2 == 0

    out.append(
        ("odd keys dropped, each scoring +1000", N, M, 8, 16, 16, decoy, even, 1.0)
    )
    return out


def _reference(q, k, v, score_mod, mask_mod, in_tiles=None, mistake=None):
    """o, lse of one head with the hooks applied whole; with `in_tiles` (the elements of the non-empty tiles) a
    classic mistake of a loop instead: `mistake="mask first"` (the mask applied before score_mod) or
    `"no mask"` (the mask never applied inside the computed tiles)."""
    N, M = q.shape[0], k.shape[0]
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    s = q @ k.T / np.sqrt(q.shape[-1])
    keep = _keep(mask_mod, N, M)
    with np.errstate(all="ignore"):
        if in_tiles is None:
            s = np.where(keep, score_mod(s, 0, 0, i, j), -np.inf)
        elif mistake == "mask first":
            s = np.where(keep, s, -np.inf)
            s = np.where(in_tiles, score_mod(s, 0, 0, i, j), -np.inf)
        else:  # "no mask"
            s = np.where(in_tiles, score_mod(s, 0, 0, i, j), -np.inf)
        m = s.max(axis=-1, keepdims=True)
        m = np.where(np.isneginf(m), 0.0, m)
        p = np.exp(s - m)
        l = p.sum(axis=-1, keepdims=True)  # noqa: E741
        o = np.where(l > 0, p @ v / np.where(l > 0, l, 1.0), 0.0)
        seen = l[:, 0] > 0
        lse = np.where(seen, m[:, 0] + np.log(np.where(seen, l[:, 0], 1.0)), -np.inf)
    return o, lse


def _loop_with(q, k, v, score_mod, mask_mod, Br, Bc, mistake):
    """o of a tiled online softmax with one classic mistake of the update planted: `"tile max"` (m' taken
    from the tile alone, not max(m, rowmax)) or `"alpha inverted"` (the rescale e^(m' - m) for e^(m - m'),
    NaN from the first tile's e^(m' + ∞) · 0; `", guarded"`: with m = −∞ read as m')."""
    N, M, scale = q.shape[0], k.shape[0], 1 / np.sqrt(q.shape[1])
    o = np.zeros((N, v.shape[1]))
    with np.errstate(all="ignore"):
        for i0 in range(0, N, Br):
            i = np.arange(i0, min(i0 + Br, N))[:, None]
            m, l = np.full((len(i), 1), -np.inf), np.zeros((len(i), 1))
            acc = np.zeros((len(i), v.shape[1]))
            for j0 in range(0, M, Bc):
                j = np.arange(j0, min(j0 + Bc, M))[None, :]
                keep = np.broadcast_to(mask_mod(0, 0, i, j), (len(i), j.shape[1]))
                if not keep.any():
                    continue
                s = score_mod(scale * q[i0 : i0 + Br] @ k[j0 : j0 + Bc].T, 0, 0, i, j)
                raw = s
                s = np.where(keep, s, -np.inf)
                tile = (raw if mistake == "max before mask" else s).max(
                    axis=1, keepdims=True
                )
                m_new = tile if mistake == "tile max" else np.maximum(m, tile)
                shift = np.where(np.isneginf(m_new), 0.0, m_new)
                if mistake.startswith(
                    "alpha inverted"
                ):  # e^(m' - m); the guarded form sets m = m' first
                    m_old = (
                        np.where(np.isneginf(m), shift, m)
                        if "guarded" in mistake
                        else m
                    )
                    alpha = np.exp(shift - m_old)
                else:
                    alpha = np.exp(m - shift)
                p = np.exp(s - shift)
                l = alpha * l + p.sum(axis=1, keepdims=True)  # noqa: E741
                acc, m = alpha * acc + p @ v[j0 : j0 + Bc], m_new
            o[i0 : i0 + len(i)] = np.where(l > 0, acc / np.where(l > 0, l, 1.0), 0.0)
    return o


_UPDATE_MISTAKES = {
    "tile max": "the running max was replaced by the tile's own max, m' = rowmax S'_IJ: it must be "
    "m' = max(m, rowmax S'_IJ). With the tile's own max, a later tile of smaller scores makes "
    "α = e^(m - m') > 1, which overflows once the scores are hundreds apart, and a row whose tile "
    "keeps no key gets m' = -inf and α = inf: the rescale is exact only while α <= 1",
    "alpha inverted, guarded": "the rescale is inverted, e^(m' - m) in place of α = e^(m - m'): when m rises to m', "
    "the old acc and l were measured against the smaller m, so they shrink by e^(m - m') ≤ 1",
    "alpha inverted": "the rescale is inverted, e^(m' - m) in place of α = e^(m - m'): when m rises to m', "
    "the old acc and l were measured against the smaller m, so they shrink by e^(m - m') ≤ 1",
}


def _one_tile(call, Br, Bc, N, M) -> bool:
    """Whether a recorded hook call covered exactly one tile."""
    _, i0, i1, j0, j1 = call
    return not (i0 % Br or j0 % Bc) and i1 == min(i0 + Br, N) and j1 == min(j0 + Bc, M)


def _tiles_of(calls, what, Br, Bc, N, M):
    """The tiles a hook was called on, or (None, the call) for a call that is not one tile."""
    tiles = []
    for kind, i0, i1, j0, j1 in calls:
        if kind != what:
            continue
        if i0 % Br or j0 % Bc or i1 != min(i0 + Br, N) or j1 != min(j0 + Bc, M):
            return None, (i0, i1, j0, j1)
        tiles.append((i0 // Br, j0 // Bc))
    return tiles, None


def _local_indices(calls, mask_mod, N, M, Br, Bc) -> str | None:
    """A hint when every score_mod call saw query (or key) indices starting at 0 although the non-empty tiles
    span several query (or key) blocks: the hooks were given the tile's own r, c, not the global i, j."""
    score = [c for c in calls if c[0] == "score"]
    kinds = _kinds(mask_mod, N, M, Br, Bc)
    rows, cols = np.nonzero(kinds)
    for what, start, blocks, idx in (
        ("query", 1, len(set(rows.tolist())), "i = i0 + r"),
        ("key", 3, len(set(cols.tolist())), "j = j0 + c"),
    ):
        if len(score) > 1 and blocks > 1 and all(c[start] == 0 for c in score):
            return (
                f"every score_mod call saw {what} indices starting at 0, though the tiles to compute "
                f"span {blocks} {what} blocks: those are the tile's own (local) indices; the hooks "
                f"take global ones, {idx} (a mask or a bias depends on where the tile sits)"
            )
    return None


def _lse_problem(lse, want_lse, q, k, score_mod, mask_mod) -> str:
    """Why a right o comes with a wrong lse."""
    fin = ~np.isneginf(want_lse)
    if not np.isneginf(lse[~fin]).all():
        r = int(np.argwhere(~fin & ~np.isneginf(lse))[0, 0])
        return (
            f"o is right but row {r} sees no key and got lse = {lse[r]:.4g}: a row with l = 0 "
            "keeps lse = −∞"
        )
    if not fin.any() or not np.isfinite(lse[fin]).all():
        return "o is right but lse is not: lse = m + log l, finite on every row that sees a key"
    diff = lse[fin] - want_lse[fin]
    e = float(np.abs(diff).max())
    N, M = q.shape[0], k.shape[0]
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    with np.errstate(all="ignore"):
        s = score_mod(q @ k.T / np.sqrt(q.shape[-1]), 0, 0, i, j)
        row_max = np.where(_keep(mask_mod, N, M), s, -np.inf).max(axis=1)
    if np.allclose(lse[fin], want_lse[fin] - row_max[fin], rtol=1e-9, atol=1e-12):
        return (
            f"o is right but lse is not (max |lse - ref| = {e:.2e}): yours is log l, without m; "
            "lse = m + log l, with m the row's final running max"
        )
    if np.ptp(diff) < 1e-9:
        return (
            f"o is right but lse is off by {float(diff[0]):+.3g} on every row: lse = m + log l, "
            "nothing added"
        )
    return (
        f"o is right but lse is not (max |lse - ref| = {e:.2e}): lse = m + log l, with m the "
        "row's final running max and l its final sum"
    )


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    same_inf = np.isneginf(a) == np.isneginf(b)
    fin = ~np.isneginf(b)
    return bool(
        a.shape == b.shape
        and same_inf.all()
        and np.allclose(a[fin], b[fin], rtol=1e-9, atol=1e-12)
    )


def _loop_problem(got, case, q, k, v, Br, Bc) -> str | None:
    """Why a learner's (o, lse) and its hook calls fail case `case`, or None."""
    label, N, M, d, _, _, score_mod, mask_mod, _ = case
    hooks = got["hooks"]
    out = got["out"]
    if not (isinstance(out, tuple) and len(out) == 2):
        return f"returned {type(out).__name__}, not the pair (o, lse)"
    narrow = next(
        (str(np.asarray(x).dtype) for x in out if np.asarray(x).dtype == np.float16),
        None,
    )
    o, lse = (np.asarray(x, dtype=float) for x in out)
    if o.shape != (N, v.shape[1]) or lse.shape != (N,):
        return f"o has shape {o.shape} and lse {lse.shape}; expected ({N}, {v.shape[1]}) and ({N},)"
    local = _local_indices(hooks.calls, mask_mod, N, M, Br, Bc)
    if local:
        return local
    tiles, bad = _tiles_of(hooks.calls, "score", Br, Bc, N, M)
    if tiles is None:
        i0, i1, j0, j1 = bad
        return (
            f"score_mod was called on rows {i0}..{i1 - 1} against keys {j0}..{j1 - 1}, which is not one tile of "
            f"{Br} × {Bc}: the hooks act on one tile at a time, inside the loop"
        )
    kinds = _kinds(mask_mod, N, M, Br, Bc)
    keep = _keep(mask_mod, N, M)
    needed = {(int(a), int(b)) for a, b in np.argwhere(kinds > 0)}
    done = set(tiles)
    if len(tiles) != len(done):
        return (
            "score_mod was called twice on one tile: apply it once per tile you compute"
        )
    empty_done = sorted(done - needed)
    if empty_done:
        I, J = empty_done[0]
        return (
            f"computed {len(done)} tiles, {len(empty_done)} of them empty (first: I = {I}, J = {J}, which "
            f"keeps none of its elements): skip the empty tiles of your block mask, {len(needed)} are needed"
        )
    missed = sorted(needed - done)
    if missed:
        I, J = missed[0]
        part = keep[I * Br : (I + 1) * Br, J * Bc : (J + 1) * Bc]
        kind = "partial" if kinds[I, J] == 1 else "full"
        return (
            f"skipped tile (I = {I}, J = {J}), which is {kind}: it keeps {int(part.sum())} of its "
            f"{part.size} elements; only empty tiles may be skipped"
        )
    rows_none = ~keep.any(axis=1)
    want_o = _reference(q, k, v, score_mod, mask_mod)[0]
    masked, _ = _tiles_of(
        [c for c in hooks.calls if _one_tile(c, Br, Bc, N, M)], "mask", Br, Bc, N, M
    )
    unmasked = sorted(
        (int(a), int(b))
        for a, b in np.argwhere(kinds == 1)
        if (a, b) not in set(masked)
    )
    if masked and unmasked and not _close(o, want_o):
        I, J = unmasked[0]
        part = keep[I * Br : (I + 1) * Br, J * Bc : (J + 1) * Bc]
        return (
            f"tile (I = {I}, J = {J}) is partial (it keeps {int(part.sum())} of its {part.size} elements) "
            "but mask_mod was never called on it: does your block mask call it full? (look at every "
            "element of a tile, not a few)"
        )
    if (
        not _close(o, want_o) and "+1000" not in label
    ):  # there: the max before the mask, below
        for mistake, text in _UPDATE_MISTAKES.items():
            alt = _loop_with(q, k, v, score_mod, mask_mod, Br, Bc, mistake)
            if not _close(alt, want_o) and np.allclose(
                o, alt, rtol=1e-9, equal_nan=True
            ):
                return text
    nan_rows = np.isnan(o).any(axis=1) | np.isnan(lse)
    if nan_rows.any():
        r = int(np.argwhere(nan_rows)[0, 0])
        if rows_none[r]:
            return (
                f"NaN in row {r}, which sees no key ({int(rows_none.sum())} such rows): its running max stays "
                "−∞ and e^(s − m) = e^(−∞ − (−∞)) is NaN; subtract 0 where m = −∞ (notebooks 02-03's guard), "
                "and give a row with l = 0 the output o = 0, lse = −∞"
            )
        if "+1000" in label:
            hint = (
                "the running max was taken before the mask, so a dropped key's +1000 raised m and every kept "
                "e^(s − m) underflowed to 0; mask first, then take the max"
            )
        else:
            hint = (
                "a tile where all of this row's keys are dropped leaves m = −∞, and e^(−∞ − (−∞)) is NaN, "
                "which then spreads to the rest of the row; subtract 0 where m = −∞ (notebooks 02-03's guard)"
            )
        return f"NaN in row {r}, which sees {int(keep[r].sum())} keys: {hint}"
    want_o, want_lse = _reference(q, k, v, score_mod, mask_mod)
    if _close(o, want_o) and _close(lse, want_lse):
        return None
    if _close(o, want_o):
        return _lse_problem(lse, want_lse, q, k, score_mod, mask_mod)
    in_tiles = np.kron(kinds > 0, np.ones((Br, Bc), dtype=bool))[:N, :M]
    if _close(o, _reference(q, k, v, score_mod, mask_mod, in_tiles, "no mask")[0]):
        return (
            "the mask was not applied inside the tiles you computed: a partial tile keeps only some of its "
            "elements, so its dropped scores must become −∞ (only a full tile may skip the mask)"
        )
    if rows_none.any() and not (
        np.all(o[rows_none] == 0) and np.all(np.isneginf(lse[rows_none]))
    ):
        r = int(np.argwhere(rows_none)[0, 0])
        return (
            f"row {r} sees no key: its o must be 0 and its lse −∞ (yours: lse = {lse[r]:.4g}; is the mask "
            "applied on every partial tile?)"
        )
    wrong_o, _ = _reference(q, k, v, score_mod, mask_mod, in_tiles, "mask first")
    if "soft-cap" in label and _close(o, wrong_o):
        return (
            "the mask was applied before score_mod: cap·tanh(−∞ / cap) = −cap, so every dropped key came "
            "back with the score −cap; apply score_mod to the tile's scores first, then the mask"
        )
    before = _loop_with(q, k, v, score_mod, mask_mod, Br, Bc, "max before mask")
    if "+1000" in label and np.allclose(o, before, rtol=1e-9, equal_nan=True):
        return (
            "o differs where a dropped key scores +1000: the running max must be taken after the mask "
            "(a dropped key never raises m)"
        )
    if _close(o, _reference(q * np.sqrt(d), k, v, score_mod, mask_mod)[0]):
        return "o is the reference without the scale: S = Q Kᵀ / √d, scaled before score_mod"
    if np.allclose(o, want_o, rtol=1e-4, atol=1e-5):
        err = float(np.nanmax(np.abs(o - want_o)))
        return (
            f"o is right to about float32 rounding only (max |o - ref| = {err:.1e}): keep m, l, acc "
            "and o in float64, the inputs' dtype"
        )
    if np.allclose(o, want_o, rtol=1e-2, atol=1e-2):
        err = float(np.nanmax(np.abs(o - want_o)))
        held = (
            f"yours is {narrow}"
            if narrow
            else "is one of m, l, acc held in float16 or bfloat16?"
        )
        return (
            f"o is right to about 3 significant digits only (max |o - ref| = {err:.1e}), float16's "
            f"rounding ({held}): keep m, l, acc and o in float64, the inputs' dtype"
        )
    lost = ~rows_none & np.all(o == 0, axis=1) & np.isneginf(lse)
    if lost.any():
        r = int(np.argwhere(lost)[0, 0])
        return (
            f"row {r} sees {int(keep[r].sum())} keys but got o = 0, lse = −∞: a tile that drops all of "
            "its keys came first, so m' = −∞ there and e^(s − m') = e^(−∞ − (−∞)) is NaN, which made l "
            "NaN (and l > 0 false) for the rest of the row; subtract 0 where m' = −∞ (notebooks 02-03's "
            "guard)"
        )
    err = float(np.nanmax(np.abs(o - want_o)))
    r = int(np.argmax(np.nanmax(np.abs(o - want_o), axis=1)))
    return f"max |o - ref| = {err:.2e}, largest in row {r}, which sees {int(keep[r].sum())} keys"


def _streams(name, fn, rng, N: int = 768, B: int = 64) -> bool:
    """Whether `fn` runs causal attention at N = M = `N` without holding an N × M float array (tracemalloc's
    peak below 6·N·M bytes: the boolean mask on the whole grid, N·M bytes a copy, fits; float64 scores, 8·N·M,
    do not); prints the verdict if not. A full softmax that only calls the hooks tile by tile fails here."""
    q, k, v = (rng.standard_normal((N, 8)) for _ in range(3))
    causal = sliding_window(None, 0, N, N)
    if started := not tracemalloc.is_tracing():
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        out = _run(name, fn, (q, k, v, _identity, causal, B, B), f"causal, N = M = {N}")
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()
    if out is None:
        return False
    if peak >= 6 * N * N:
        print(
            f"{name}: ✗ causal, N = M = {N}, Br = Bc = {B}: your function held {peak / 2**20:.1f} MiB at its "
            f"peak, and one N × M float64 array is {8 * N * N / 2**20:.1f} MiB: the scores must live one tile "
            "at a time, in an online softmax (m, l, acc per row), not in a whole S or P; only the boolean "
            "mask may be N × M, and only as booleans (a whole-grid count or sum of it in int32 or int64, in "
            "tile_kinds too, is 4 or 8 bytes an entry: count per tile instead)"
        )
        return False
    want_o, want_lse = _reference(q, k, v, _identity, causal)
    o, lse = out
    if not (_close(o, want_o) and _close(lse, want_lse)):
        print(
            f"{name}: ✗ causal, N = M = {N}, Br = Bc = {B}: o or lse differs from the reference"
        )
        return False
    return True


def check_masked_attention(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(q, k, v, score_mod, mask_mod, Br, Bc) -> (o, lse)`, a tiled loop with the hooks; print one verdict.

    Six cases drawn fresh each run (`seed` draws the same again): a window, ALiBi-like with causal, a soft cap
    under a window (catches the mask applied before score_mod), documents with rows that see no key, causal with
    N > M, and dropped keys scoring +1000 (catches the max taken before the mask). The hooks given are recording
    wrappers: each score_mod call must be exactly one tile, and the tiles it was called on must be the non-empty
    tiles, none more (an empty tile skipped) and none fewer (a partial tile skipped). o and lse must equal the
    reference, rows that see no key o = 0 and lse = −∞ without NaN. lab's kernels, block mask and references are
    refused. Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    name = name or getattr(fn, "__name__", "masked_attention")
    rng, seed = _fresh(seed)
    cases = _loop_cases(rng)
    computed = skipped = 0
    with noting_seed(seed):
        for n, case in enumerate(cases):
            label, N, M, d, Br, Bc, score_mod, mask_mod, spread = case
            q = rng.standard_normal((N, d)) * spread
            k = rng.standard_normal((M, d)) * spread
            v = rng.standard_normal((M, d))
            hooks = _Hooks(score_mod, mask_mod)
            shown = f"case {n} ({label}; N = {N}, M = {M}, Br = {Br}, Bc = {Bc})"
            args = (
                q.copy(),
                k.copy(),
                v.copy(),
                hooks.score_mod,
                hooks.mask_mod,
                Br,
                Bc,
            )
            out = _run(name, fn, args, shown)
            if out is None:
                return
            problem = _loop_problem({"out": out, "hooks": hooks}, case, q, k, v, Br, Bc)
            if problem:
                print(f"{name}: ✗ {shown}: {problem}")
                return
            kinds = _kinds(mask_mod, N, M, Br, Bc)
            computed += int((kinds > 0).sum())
            skipped += int((kinds == 0).sum())
        if not _streams(name, fn, rng):
            return
        print(
            f"{name}: ✓ passed {len(cases)} cases: o, lse exact; {measured(computed, 'd')} tiles "
            f"computed, {measured(skipped, 'd')} empty ones skipped\n"
            "  no NaN on rows without a key; score_mod before the mask, the max after it;\n"
            "  at N = M = 768 no N × M array of scores held"
        )
