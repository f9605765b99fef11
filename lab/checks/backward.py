"""Checks for the backward exercises: $D = \\mathrm{rowsum}(dO \\circ O)$, a tile $P_{ij} = e^{S_{ij} - lse_i}$, the
standard backward and the tiled one; each prints one verdict and names the classic mistake it sees.

- `check_delta`, `check_p_tile`, `check_standard_backward` : against `lab.backward_delta`, the full softmax
  and `lab.attention_backward` (causal aligned bottom-right).
- `check_tiled_backward` : against `lab.attention_backward` too, with block sizes that do not divide N or M
  and rows that see no key; then a large case on watched arrays (`arrays_formed`) fails when an N×M array,
  a block of rows against all M keys, a query row against all M keys, or rows one at a time (no (Br, Bc)
  tile) are formed.
- `check_streamed_delta` : $D_i = \\sum_j P_{ij}\\,dP_{ij}$ built by streaming key blocks (a running max, sum and
  weighted sum), against `lab.backward_delta`; the block max without a rescale, a max reset to each block's own,
  a missing division by l, a dropped last block and an inverted rescale are named, and a large case fails an
  N×M array and a query row against all M keys.
- `check_loop_order` : the reads and writes of the tiled backward with the query blocks outside, against the
  counts of that loop walked block by block; the key-outer answer, a floor for a shorter last block and the
  two block counts swapped are named.
- `check_atomic_numbers` : how many entries of the full gradients several outer blocks add into (atomic adds on a
  GPU), key blocks outside against query blocks outside; the two swapped, d for d_v, dV forgotten and rows for
  entries are named.
- `check_softmax_jacobian` : one row's $J = \\mathrm{diag}(P) - PP^\\top$ from P alone, exactly (finite steps fail);
  the diagonal alone, a flipped sign, 1 − P² on the diagonal and p * p for the outer product are named.
- `check_softcap_tile` : one tile's parts of dQ, dK, dV for soft-capped scores, against `softcap_tile_reference`;
  the cap's derivative missing or wrong, P from the raw scores, D from one tile and a missing scale are named.
- `backward_with_mistake` : the tiled backward with one of `BACKWARD_MISTAKES` planted; an answer equal to
  one of them is told which.

Taught in: notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import textwrap
import tracemalloc

import numpy as np
import torch

from ..attention import attention_reference, causal_mask
from ..backward import (
    attention_backward,
    backward_delta,
)
from ..exercises import check, diagnose
from ._seeded import noting_seed
from ._support import _fresh, _hint, _own_work, _refusal, _settled, _watching

__all__ = [
    "check_delta",
    "check_p_tile",
    "check_standard_backward",
    "check_tiled_backward",
    "check_loop_order",
    "check_atomic_numbers",
    "check_outer_choice",
    "check_row_sum",
    "check_streamed_delta",
    "check_softmax_jacobian",
    "check_softcap_tile",
    "softcap_tile_reference",
    "SOFTCAP_MISTAKES",
    "backward_with_mistake",
    "BACKWARD_MISTAKES",
    "arrays_formed",
]

RTOL, ATOL = 1e-7, 1e-10
NAMES = ("dq", "dk", "dv")

BACKWARD_MISTAKES = {
    "D = rowsum(dO)": "D computed as rowsum(dO): D_i = Σ_j P_ij dP_ij, which can be turned into a sum over row i "
    "of dO ∘ O, not of dO alone",
    "D from one tile": "D_I taken as rowsum(P_IJ ∘ dP_IJ) over the current tile only: D_i sums over all keys of row i; "
    "rowsum(dO ∘ O) gives it before the loop, without P",
    "D missing": "dS = P ∘ dP with no D: the softmax's backward subtracts D_i = Σ_j P_ij dP_ij from every dP_ij "
    "of row i, dS = P ∘ (dP − D)",
    "D down the column": "D summed down a column of the tile (over the query rows, axis 0): D_i is one number per "
    "query row, the sum over that row's keys, D_i = rowsum(dO_i ∘ O_i)",
    "P = exp(S - tile max)": "P recomputed as exp(S − m) with m the tile's own max and no l: lse_i = m_i + log l_i holds "
    "the row's final max and sum, so P_ij = exp(S_ij − lse_i) needs nothing else",
    "P = exp(S - row max)": "P = exp(S − m) with the row max m but not divided by l, the row's sum of exp(S − m); "
    "in the tiled backward, subtracting lse_i = m_i + log l_i does both",
    "dv without transpose": "dv: a missing transpose, P dO in place of Pᵀ dO (it runs only because the tile is square)",
    "dk without transpose": "dk: a missing transpose, dS Q in place of dSᵀ Q (it runs only because the tile is square)",
    "causal top-left": "the causal mask is aligned top-left (key j ≤ i); it is aligned bottom-right, j ≤ i + M − N, "
    "so that the last query sees every key when N ≠ M",
    "causal ignored": "the causal flag is ignored: the masked scores were never set to −inf, so P = e^(S − lse) "
    "is not 0 past the line; with causal=True query i sees key j only when j ≤ i + M − N (mask inside each tile)",
    "causal off by one": "the causal mask's diagonal is off by one: j < i + M − N hides the key on the line "
    "itself; query i sees key j when j ≤ i + M − N (with N = M, query i sees key i)",
    "causal one past": "the causal mask's diagonal is off by one: j ≤ i + M − N + 1 lets each query see one "
    "key past the line; query i sees key j when j ≤ i + M − N",
    "causal skip off by one": "a tile was skipped that a query sees: its only visible entry is its bottom-left "
    "corner, (i1 − 1, j0), on the line j = i + M − N itself. Skip tile (I, J) only when j0 > (i1 − 1) + M − N "
    "(its first key past its last row's line), not when j0 ≥ that",
    "causal skip without mask": "the empty tiles are skipped, but inside a tile the line j = i + M − N "
    "crosses nothing is masked: there P must be 0 past the line, P = np.where(j <= i + M − N, P, 0), "
    "or the keys a query does not see still add to its gradients",
    "causal mask after the softmax": "the mask is applied after the softmax, to P, and the rows are not "
    "renormalised: the mask's alignment is not the fault, but each masked row of P now sums to less than 1. "
    "Mask the scores before the softmax (S = −inf where j > i + M − N), so each row is normalised over the "
    "keys it sees",
    "causal skip by first row": "tiles were skipped by the tile's first row: a tile is empty only when its first "
    "key lies past the line of its last row, j0 > (i1 − 1) + M − N; a later row of the tile sees more keys",
    "P = exp(S) / lse": "P computed as e^S / lse: lse_i = log Σ_j e^(S_ij) is the log of the row's sum, not the "
    "sum; it is subtracted inside the exponent, P_ij = e^(S_ij − lse_i)",
    "last query block dropped": "the last query block was never visited: Br = {Br} does not divide N = {N}, so "
    "rows {N_tail}..{N_last} form a shorter block",
    "last key block dropped": "the last key block was never visited: Bc = {Bc} does not divide M = {M}, so "
    "keys {M_tail}..{M_last} form a shorter block",
    "Jacobian diagonal only": "dS = P ∘ (1 − P) ∘ dP keeps only the Jacobian's diagonal: raising S_ij' also "
    "lowers every other P_ij of the row (the −P_ij P_ij' off the diagonal), and summing those terms over j gives "
    "dS = P ∘ (dP − D) with D_i = Σ_j P_ij dP_ij",
    "D added": "dS = P ∘ (dP + D): the sign of D is flipped; dS_ik = Σ_j dP_ij P_ij (δ_jk − P_ik) = P_ik dP_ik "
    "− P_ik Σ_j P_ij dP_ij, so D is subtracted",
    "scale √d": "scale = √d in place of 1/√d: S = QKᵀ/√d, so scale = 1/√d, and the chain rule multiplies dQ and "
    "dK by that same 1/√d",
    "dq assigned": "dQ_I is assigned (=) in each tile, not accumulated (+=): every key block adds its part to dQ_I",
    "dk, dv assigned": "dK_J and dV_J are assigned (=) in each tile, not accumulated (+=): every query block adds its part",
    "dv assigned": "dV_J is assigned (=) in each tile, not accumulated (+=): every query block adds its part, so "
    "yours keeps the last one's alone",
    "dk assigned": "dK_J is assigned (=) in each tile, not accumulated (+=): every query block adds its part, so "
    "yours keeps the last one's alone",
}


def backward_with_mistake(
    q, k, v, o, lse, do, Br: int, Bc: int, causal: bool = False, mistake=None
):
    """One head's tiled backward, $P_{ij} = e^{S_{ij} - lse_i}$, $D = \\mathrm{rowsum}(dO \\circ O)$, with `mistake` (a key of `BACKWARD_MISTAKES`) planted.

    `mistake` may be a tuple of keys; `None` is the correct loop (key blocks outside). Returns `(dq, dk, dv)`; a
    transpose mistake on a tile that is not square raises ValueError, as it would in the learner's code.
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    planted = {mistake} if isinstance(mistake, str) else set(mistake or ())
    if not planted <= set(BACKWARD_MISTAKES):
        raise ValueError(
            f"mistake must be None or one of {sorted(BACKWARD_MISTAKES)} (or a tuple of them), got {mistake!r}"
        )
    N, M, d = q.shape[0], k.shape[0], q.shape[1]
    scale = np.sqrt(d) if "scale √d" in planted else 1.0 / np.sqrt(d)
    D = (
        do.sum(axis=-1) if "D = rowsum(dO)" in planted else (do * o).sum(axis=-1)
    )  # (N,)
    lse_safe = np.where(np.isneginf(lse), np.inf, lse)  # no key: P = 0
    offset = M - N + ("causal one past" in planted) - ("causal off by one" in planted)
    offset = 0 if "causal top-left" in planted else offset
    masked = causal and "causal ignored" not in planted
    after = (
        "causal mask after the softmax" in planted
    )  # P of the unmasked row, zeroed after
    inner = masked and "causal skip without mask" not in planted and not after
    skip_gap = (  # tile (I, J) skipped when j0 > (i1 - 1) + offset - skip_gap
        1 if "causal skip off by one" in planted else 0
    )
    dq, dk, dv = (
        np.zeros_like(q, dtype=float),
        np.zeros_like(k, dtype=float),
        np.zeros_like(v, dtype=float),
    )
    N_end = N - N % Br if "last query block dropped" in planted else N
    M_end = M - M % Bc if "last key block dropped" in planted else M
    with np.errstate(invalid="ignore", over="ignore"):
        if after:  # the unmasked rows' lse: a check may form (N, M), a kernel not
            s_all = scale * (q @ k.T)
            top = s_all.max(axis=-1)
            lse_safe = np.log(np.exp(s_all - top[:, None]).sum(axis=-1)) + top
        if "P = exp(S - row max)" in planted:
            s_all = scale * (q @ k.T)  # (N, M): a check may
            if causal:  # form it, a kernel not
                s_all = np.where(causal_mask(N, M), s_all, -np.inf)
            row_max = np.nan_to_num(s_all.max(axis=-1), neginf=0.0)
        for j0 in range(0, M_end, Bc):
            j1 = min(j0 + Bc, M)
            for i0 in range(0, N_end, Br):
                i1 = min(i0 + Br, N)
                last = i0 if "causal skip by first row" in planted else i1 - 1
                if masked and j0 > last + offset - skip_gap:
                    continue  # no entry of the tile visible (or a planted skip)
                s = scale * (q[i0:i1] @ k[j0:j1].T)  # S_ij: (Br, Bc)
                if inner:
                    s = np.where(
                        np.arange(j0, j1)[None, :]
                        <= np.arange(i0, i1)[:, None] + offset,
                        s,
                        -np.inf,
                    )
                if "P = exp(S - tile max)" in planted:
                    p = np.exp(
                        s - np.nan_to_num(s.max(axis=-1, keepdims=True), neginf=0.0)
                    )
                elif "P = exp(S - row max)" in planted:
                    p = np.exp(s - row_max[i0:i1, None])
                elif "P = exp(S) / lse" in planted:
                    p = np.exp(s) / lse_safe[i0:i1, None]
                else:
                    p = np.exp(s - lse_safe[i0:i1, None])  # P_ij from lse
                if after and masked:  # zeroed past the line, not renormalised
                    seen = (
                        np.arange(j0, j1)[None, :]
                        <= np.arange(i0, i1)[:, None] + offset
                    )
                    p = np.where(seen, p, 0.0)
                dp = do[i0:i1] @ v[j0:j1].T  # dP_ij: (Br, Bc)
                D_i = (
                    (p * dp).sum(axis=-1) if "D from one tile" in planted else D[i0:i1]
                )
                ds = p * (dp - D_i[:, None])  # dS_ij
                if "D missing" in planted:
                    ds = p * dp
                elif "D added" in planted:
                    ds = p * (dp + D_i[:, None])
                elif "Jacobian diagonal only" in planted:
                    ds = p * (1 - p) * dp
                elif "D down the column" in planted:
                    ds = p * (dp - (p * dp).sum(axis=0, keepdims=True))
                dv_part = (
                    p @ do[i0:i1]
                    if "dv without transpose" in planted
                    else p.T @ do[i0:i1]
                )
                dk_part = scale * (
                    ds @ q[i0:i1]
                    if "dk without transpose" in planted
                    else ds.T @ q[i0:i1]
                )
                dq_part = scale * (ds @ k[j0:j1])
                keep_q = "dq assigned" not in planted  # += or =
                keep_k = not planted & {"dk, dv assigned", "dk assigned"}
                keep_v = not planted & {"dk, dv assigned", "dv assigned"}
                dq[i0:i1] = dq_part + keep_q * dq[i0:i1]
                dk[j0:j1], dv[j0:j1] = (
                    dk_part + keep_k * dk[j0:j1],
                    dv_part + keep_v * dv[j0:j1],
                )
    return dq, dk, dv


# ------------------------------------------------------------------------------------ instrumented arrays


class _Watched(np.ndarray):
    """An array that logs the shape of every array numpy derives from it (ufunc results, products, views) above a
    size, and the length of every slice of its first axis with an explicit end (a loop's `q[i0 : i0 + Br]`)."""

    log: dict = {}
    cuts: dict = {}  # first-axis length -> the longest explicit slice taken of it
    above = 0

    def __array_finalize__(self, obj):
        if self.size > _Watched.above:  # each shape once: the log stays small
            _Watched.log[self.shape] = None

    def __getitem__(self, key):
        first = key[0] if isinstance(key, tuple) and key else key
        if isinstance(first, slice) and first.stop is not None and self.ndim:
            n = self.shape[0]
            taken = len(range(*first.indices(n)))  # q[0:2048] of 1024 rows takes 1024
            _Watched.cuts[n] = max(_Watched.cuts.get(n, 0), taken)
        return super().__getitem__(key)


def arrays_formed(fn, *args, above: int = 0, cuts: dict | None = None):
    """Run `fn(*args)` with its numpy array arguments watched; return `(shapes, peak_bytes)`.

    `shapes`: the distinct shapes, in the order first seen, of the arrays of more than `above` elements that
    numpy computed from a watched one (through ufuncs, `@`, views); `peak_bytes`: the peak of memory newly
    allocated during the call, from `tracemalloc` (numpy reports its allocations to it), which also sees arrays
    made from scratch (`np.zeros((N, M))`). A dict passed as `cuts` is filled with, for each first-axis length
    that was sliced with an explicit end (`q[i0 : i0 + Br]`), the most elements one such slice took: the tile
    sizes a loop used. Taught in: notebooks/09_tiled_backward.ipynb
    """
    args = [
        a.astype(float).view(_Watched) if isinstance(a, np.ndarray) else a for a in args
    ]
    if started := not tracemalloc.is_tracing():
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    _Watched.log, _Watched.cuts, _Watched.above = {}, {}, above
    try:
        fn(*args)
        if cuts is not None:
            cuts.update(_Watched.cuts)
        return list(_Watched.log), tracemalloc.get_traced_memory()[1] - base
    finally:
        _Watched.log, _Watched.cuts, _Watched.above = {}, {}, 0
        if started:
            tracemalloc.stop()


# ------------------------------------------------------------------------------------ the tiles a loop computes


class _Rows(np.ndarray):
    """An input that knows which of its source's rows it holds, `rows = (name, lo, hi)`: a slice or an index of its
    first axis narrows them, a view (a transpose) keeps them, an elementwise op of one such array (`q_I * scale`)
    passes them on. A product (`@`, `np.dot`, `np.einsum`, ...) of a block of q with a block of k, or of dO with V,
    logs the tile it forms in `_Rows.seen`: `(what, i0, i1, j0, j1)`."""

    seen: list = []

    def __array_finalize__(self, obj):
        self.rows = getattr(obj, "rows", None)

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(out, _Rows):
            out.rows = self._narrowed(key)
        return out

    def _narrowed(self, key):
        first = key[0] if isinstance(key, tuple) and key else key
        if self.rows is None or not self.ndim or first is None or first is Ellipsis:
            return self.rows
        name, lo, hi = self.rows
        if (
            self.shape[0] != hi - lo
        ):  # a transposed view: its first axis is not the rows
            return self.rows
        try:
            idx = np.arange(lo, hi)[first]
        except (IndexError, TypeError, ValueError):
            return None
        if idx.ndim > 1 or not idx.size:
            return None
        return (name, int(idx.min()), int(idx.max()) + 1)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        tags = {x.rows for x in inputs if isinstance(x, _Rows) and x.rows is not None}
        if ufunc is np.matmul or (ufunc is np.multiply and len(tags) > 1):
            _Rows._log(tags)
        plain = [x.view(np.ndarray) if isinstance(x, _Rows) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(
                x.view(np.ndarray) if isinstance(x, _Rows) else x for x in kwargs["out"]
            )
        result = getattr(ufunc, method)(*plain, **kwargs)
        if not isinstance(result, np.ndarray) or ufunc is np.matmul:
            return result
        out = result.view(_Rows)  # one source's rows, elementwise: still those rows
        (tag,) = tags if len(tags) == 1 else (None,)
        keeps = tag is not None and out.ndim and out.shape[0] == tag[2] - tag[1]
        out.rows = tag if keeps else None
        return out

    def __array_function__(self, func, types, args, kwargs):
        if func in _PRODUCTS:
            _Rows._log({a.rows for a in _flat(args) if isinstance(a, _Rows) and a.rows})
        result = super().__array_function__(func, types, args, kwargs)
        if isinstance(result, _Rows) and (func in _PRODUCTS or func in _LIKE):
            result.rows = None  # np.zeros_like(q) holds none of q's rows
        return result

    @staticmethod
    def _log(tags):
        by = {name: (lo, hi) for name, lo, hi in tags}
        for what, a, b in (
            ("S_IJ = Q_I K_Jᵀ", "q", "k"),
            ("dP_IJ = dO_I V_Jᵀ", "do", "v"),
        ):
            if a in by and b in by:
                _Rows.seen.append((what, *by[a], *by[b]))


_PRODUCTS = {np.dot, np.einsum, np.inner, np.tensordot, np.outer, np.matmul, np.vdot}
_LIKE = {np.zeros_like, np.ones_like, np.empty_like, np.full_like}


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def tiles_formed(fn, q, k, v, o, lse, do, Br, Bc, causal=True):
    """Run `fn(q, k, v, o, lse, do, Br, Bc, causal)` with q, k, v and dO tracked; return the tiles whose
    $S_{IJ} = Q_I K_J^T$ or $dP_{IJ} = dO_I V_J^T$ it formed, as `(what, i0, i1, j0, j1)` in the order formed
    (a product traced through `@`, `np.matmul`, `np.dot`, `np.einsum`, `np.inner`, `np.tensordot`, `np.outer`
    or a broadcast `*`). Taught in: notebooks/09_tiled_backward.ipynb
    """
    tracked = []
    for name, a in (("q", q), ("k", k), ("v", v), ("do", do)):
        t = np.array(a, dtype=float).view(_Rows)
        t.rows = (name, 0, len(a))
        tracked.append(t)
    tq, tk, tv, tdo = tracked
    _Rows.seen = []
    try:
        fn(tq, tk, tv, np.array(o), np.array(lse), tdo, Br, Bc, causal)
        return list(_Rows.seen)
    finally:
        _Rows.seen = []


def _tile_violation(fn, q, k, v, o, lse, do, Br, Bc) -> tuple[str | None, tuple | None]:
    """On a causal case whose values agreed: `(problem, None)` when the loop formed a tile with no visible entry,
    else `(None, (computed, total))` counted on the (Br, Bc) grid; `(None, None)` when the tiles it formed could not
    be traced (a product this tracker does not see), so that nothing is claimed about them."""
    N, M = len(q), len(k)
    try:
        seen = tiles_formed(fn, q, k, v, o, lse, do, Br, Bc)
    except Exception:  # the values agreed on plain arrays: the tracking is what failed
        return None, None
    last_seen = lambda i1: i1 - 1 + M - N  # the last key row i1 - 1 sees
    for what, i0, i1, j0, j1 in seen:
        if j0 > last_seen(i1):
            I, J = i0 // Br, j0 // Bc
            return (
                f"tile ({I}, {J}) has no visible entry: skip it. It is rows {i0}:{i1} against keys "
                f"{j0}:{j1}, and its first key, j0 = {j0}, lies past the line of its last row, "
                f"(i1 − 1) + M − N = {last_seen(i1)}; yet your loop formed its {what}, work the mask "
                "then throws away"
            ), None
    Tr, Tc = -(-N // Br), -(-M // Bc)
    touched = {
        (I, J)
        for _, i0, i1, j0, j1 in seen
        for I in range(i0 // Br, -(-i1 // Br))
        for J in range(j0 // Bc, -(-j1 // Bc))
    }
    visible = {
        (I, J)
        for I in range(Tr)
        for J in range(Tc)
        if J * Bc <= last_seen(min((I + 1) * Br, N))
    }
    if not visible <= touched:  # a tile it needed was formed out of sight
        return None, None
    return None, (len(touched), Tr * Tc)


def _spans(shape, n: int, widths) -> bool:
    """Whether `shape` has an axis of `n` and is not an (n, width) array like an input or output (or a
    per-row vector of them, axes of 1 aside)."""
    core = tuple(x for x in shape if x != 1)
    if n not in core:
        return False
    rest = list(core)
    rest.remove(n)
    return not (len(rest) == 1 and rest[0] in widths)


def _formed_violation(fn, N, M, d, dv, Br, Bc, causal) -> str | None:
    """None when the tiled backward keeps to tiles on a large case; else what it formed, in words."""
    q, k, v, do, o, lse = _problem(N, M, d, dv, causal, seed=7)
    limit = max(N, M) * max(d, dv)  # the largest input or output
    cuts: dict = {}
    shapes, peak = arrays_formed(fn, q, k, v, o, lse, do, Br, Bc, causal, cuts=cuts)
    rows, keys = cuts.get(N), cuts.get(M)  # the longest slices of q's rows, of k's
    oversized = _oversized(N, M, Br, Bc, rows, keys)
    sizes = {"N": N, "M": M, "Br": Br, "Bc": Bc, "d": d, "dv": dv}
    label = lambda shape: (
        "("
        + ", ".join(
            next((k for k, x in sizes.items() if x == n), str(n)) for n in shape
        )
        + ("," if len(shape) == 1 else "")
        + ")"
    )
    sizes_of = f"with N = {N}, M = {M}, Br = {Br}, Bc = {Bc}"
    tiles = "the tiled backward holds one (Br, Bc) tile of S, P, dP and dS at a time"
    big = [
        s
        for s in shapes
        if len(s) >= 2 and max(s) >= min(N, M) and int(np.prod(s)) > limit
    ]
    if big:
        s = max(big, key=lambda s: int(np.prod(s)))
        what = (
            "all N × M scores or probabilities at once"
            if N in s and M in s
            else "a block of rows against all M keys"
            if M in s
            else "a block of keys against all N queries"
        )
        if (
            oversized
        ):  # a loop, but its one tile was the whole problem (or a whole axis)
            return (
                f"{oversized}; so one tile, of shape {s} = {label(s)}, held {what}, {sizes_of}: "
                f"{_OWN_SIZE}"
            )
        return f"an array of shape {s} = {label(s)} was formed ({what}), {sizes_of}; {tiles}"
    row = next((s for s in shapes if _spans(s, M, (d, dv))), None)
    if row is not None:
        return (
            f"an array of shape {row} = {label(row)} was formed (one query row against all M keys), "
            f"{sizes_of}: that loop has no tiles; {tiles}"
        )
    if oversized:
        if oversized.startswith("Br and Bc"):
            return f"{oversized}, {sizes_of}: a tile is Br query rows by Bc keys"
        return f"{oversized}, {sizes_of}: {_OWN_SIZE}; a tile is at most Br query rows by Bc keys"
    if shapes and (Br, Bc) not in shapes and (Bc, Br) not in shapes:
        strips = [s for s in shapes if tuple(x for x in s if x != 1) == (Bc,)]
        if strips:
            return (
                f"no (Br, Bc) = ({Br}, {Bc}) tile was formed, only rows of shape {strips[0]} = "
                f"{label(strips[0])}: one query row at a time against a key block, {sizes_of}; "
                f"the query rows come in blocks of Br too: {tiles}"
            )
    if peak > N * M // 2:
        return (
            f"{peak / 2**20:.1f} MiB was allocated during the call, where an N × M array takes {N * M / 2**20:.1f} MiB "
            f"as bool and {8 * N * M / 2**20:.0f} MiB as float64, and a tiled backward needs well under "
            f"{N * M / 2**21:.2f} MiB: an N × M array (S, P or a mask) was formed; form them a tile at a time"
        )
    return None


def _oversized(N, M, Br, Bc, rows, keys) -> str | None:
    """In words, how a loop's slices overran the block sizes: `rows` and `keys` are the longest slices it took
    of the query rows and of the keys (None: not sliced); None when they keep to Br and Bc."""
    if N == M:  # the two axes cannot be told apart: only the larger block size binds
        rows = keys = max(rows or 0, keys or 0) or None
        Br = Bc = max(Br, Bc)
    if not ((rows or 0) > Br or (keys or 0) > Bc):
        return None
    if rows == Bc and keys == Br and Br != Bc:
        return f"Br and Bc are swapped: your loop took query rows {rows} at a time and keys {keys}"
    said = []
    for n, size, got, what in ((N, Br, rows, "query rows"), (M, Bc, keys, "keys")):
        if got is not None and got > size:
            axis, block = ("N", "Br") if what == "query rows" else ("M", "Bc")
            whole = f" (all {axis}: a tile larger than the problem)" if got == n else ""
            said.append(f"{what} {got} at a time{whole} where {block} = {size}")
    return "your loop's tiles are larger than its block sizes: it took " + " and ".join(
        said
    )


_OWN_SIZE = "size each tile by the arguments Br and Bc, not by a size of your own"


# ------------------------------------------------------------------------------------ the checks


def _problem(N, M, d, dv, causal, seed, score=0.0):
    """Random q, k, v, dO and the forward's o, lse; `score` > 0 shifts every score to about `score` (q₀ = k₀ = √(score √d))."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((N, d)), rng.standard_normal((M, d))  # (N, d), (M, d)
    if score:
        q[:, 0] = k[:, 0] = np.sqrt(score * np.sqrt(d))
    v, do = (
        rng.standard_normal((M, dv)),
        rng.standard_normal((N, dv)),
    )  # (M, dv), (N, dv)
    o, lse = attention_reference(q, k, v, causal=causal)  # (N, dv), (N,)
    return q, k, v, do, o, lse


def _close(a, b) -> bool:
    try:
        return np.shape(a) == np.shape(b) and bool(
            np.allclose(a, b, rtol=RTOL, atol=ATOL)
        )
    except (TypeError, ValueError):  # a ragged or non-numeric answer
        return False


_LAB_BACKWARDS = (
    "attention_backward",
    "flash_attention_backward_numpy",
    "NumpyFlashAttention",
)


def _run(name, fn, args, shown, hint_error, numpy_only=False):
    """`fn(*args)`, watched for calls of lab's backward or torch autograd (with `numpy_only`, any torch op: the tiled
    backward is numpy's, and tracemalloc does not see torch's memory); prints and returns None when it failed."""
    if numpy_only:
        return _run_numpy(name, fn, args, shown, hint_error)
    also = {
        torch.autograd.grad.__code__: "torch.autograd.grad",
        torch.autograd.backward.__code__: "torch autograd",
    }
    try:
        with _watching(_LAB_BACKWARDS, also=also) as seen:
            out = _settled(fn(*args))
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return None
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        print(f"{name}: ✗ case {shown} raised {type(exc).__name__}: {exc}")
        print(f"  hint: {hint_error(str(exc))}")
        return None
    if seen and not all(w.startswith(("lab.", "torch")) for w in seen):
        print(f"{name}: ✗ case {shown}: {_refusal(seen)}")
        return None
    if seen:
        print(
            f"{name}: ✗ case {shown} calls {', '.join(sorted(seen))}: the check compares with lab's backward, "
            f"so calling a backward proves nothing; write the gradients yourself"
        )
        return None
    if out is None:
        print(f"{name}: ✗ case {shown}: returned None (a missing `return`?)")
    return out


def _run_numpy(name, fn, args, shown, hint_error):
    """`_run` for a numpy exercise: lab's backwards refused by any route, and any op of torch (or another array library)."""
    try:
        with _watching(_LAB_BACKWARDS, numpy_only=True) as seen:
            out = _settled(fn(*args))
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return None
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        print(f"{name}: ✗ case {shown} raised {type(exc).__name__}: {exc}")
        print(f"  hint: {hint_error(str(exc))}")
        return None
    if seen:
        print(f"{name}: ✗ case {shown}: {_refusal(seen)}")
        return None
    if out is None:
        print(f"{name}: ✗ case {shown}: returned None (a missing `return`?)")
    return out


_SIGNATURES = {
    "standard": "my_backward(q, k, v, do, causal=False) -> (dq, dk, dv)",
    "tiled": "tiled_backward(q, k, v, o, lse, do, Br, Bc, causal=False) -> (dq, dk, dv)",
    "p_tile": "p_tile(q_I, k_J, lse_I) -> the (Br, Bc) tile",
}


def _error_hint(text: str, kind: str = "tiled") -> str:
    """A hint for an exception raised by the learner's function; `kind` names the exercise."""
    if "positional argument" in text or "unexpected keyword argument" in text:
        return f"the check calls {_SIGNATURES[kind]}: give your function that signature"
    if "mismatch in its core dimension" in text or "not aligned" in text:
        if kind == "standard":
            return (
                "shape: a matrix product's inner sizes differ, a missing or extra transpose: S = q kᵀ is "
                "(N, M), dV = Pᵀ dO is (M, dv), dP = dO vᵀ is (N, M), dK = dSᵀ q is (M, d)"
            )
        return (
            "shape: a matrix product's inner sizes differ, a missing or extra transpose: S_IJ = Q_I K_Jᵀ is (Br, Bc), "
            "dV_J += P_IJᵀ dO_I is (Bc, dv), dK_J += dS_IJᵀ Q_I is (Bc, d)"
        )
    if "broadcast" in text:
        if kind == "standard":
            return (
                "shape: a per-row vector (D or the row max, shape (N,)) met an (N, M) array: give it an "
                "axis, [:, None], once (a sum with keepdims=True already has it)"
            )
        return (
            "shape: a per-row vector (lse_I or D_I, shape (Br,)) met a (Br, Bc) tile: give it an axis, [:, None], once "
            "(a sum with keepdims=True already has it; a second [:, None] makes it (Br, 1, 1))"
        )
    if kind == "standard":
        return "run your function on the case above by hand and print the shapes of S, P, dP and dS"
    return (
        "run your function on the case above by hand and print the shapes of the tiles"
    )


def _close_f32(a, b) -> bool:
    """Equal to float32's rounding (float32's epsilon is 1.2e-7; a few hundred roundings, relative to
    the array's largest entry) but not to float64's: the sign of a float32 step on the way."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or not np.isfinite(a).all():
        return False
    return bool(np.abs(a - b).max() <= 2e-5 * np.abs(b).max() + 1e-9)


def _float32_hint(name: str, dtype) -> str:
    """The hint for a gradient right to float32's rounding only: which array is float32, and what keeps float64."""
    given = {"dq": "q", "dk": "k", "dv": "v"}[name]
    if dtype != np.float64:
        return (
            f"your {name} is {dtype}, and the inputs are float64: the array you add into was made {dtype} "
            f"(np.zeros(shape, np.float32)?); np.zeros_like({given}) keeps {given}'s float64"
        )
    return (
        f"your {name} is float64 but agrees only to float32's precision: a tile on the way (S, P, dP or dS) "
        "was made float32 (an astype(np.float32)?); keep every tile in the inputs' float64"
    )


def _backward_hint(got, want, case, variants) -> str:
    N, M, d, causal = case["N"], case["M"], case["d"], case["causal"]
    if isinstance(got, tuple) and len(got) == 3:
        for mistake, alt in variants:
            if all(_close(g, a) for g, a in zip(got, alt)):
                named = (
                    [mistake]
                    if isinstance(mistake, str)
                    else [m for m in mistake if "dropped" in m] or [mistake[0]]
                )  # D from P follows a wrong P; both short blocks dropped are both named
                return "yours matches a classic mistake: " + "; and ".join(
                    BACKWARD_MISTAKES[m].format(**case) for m in named
                )
        for g, w, name in zip(got, want, NAMES):
            if _close(g, w):
                continue
            if np.isnan(np.asarray(g, dtype=float)).any():
                if case.get("score"):
                    return (
                        f"NaN on scores near +{case['score']:.0f}: e^S overflows float64 past S = 709.8, and inf / inf "
                        "is NaN; subtract each row's max before the exp, P = exp(S − rowmax S) / rowsum"
                    )
                if causal and N > M:
                    return (
                        f"NaN: with causal and N > M the first N − M = {N - M} queries see no key, and two "
                        "routes make NaN there. A row max of S taken under the mask is −inf, and S − max "
                        "is −inf − (−inf) = NaN. Or the forward's lse = −inf makes e^(S − lse) +inf, and a "
                        "0/1 mask multiplied in leaves inf · 0 = NaN. Use P from lse (no max), and give "
                        "those rows P = 0 with np.where(visible, P, 0), not P * visible (their gradients are 0)"
                    )
                return "NaN: an inf − inf or a 0/0 (a row of S all −inf?); P = exp(S − lse) needs no max and no division"
            if np.shape(g) != np.shape(w):
                return "shape: dq has q's shape (N, d), dk k's (M, d), dv v's (M, dv) (a keepdims=True or a transpose?)"
            if name == "dv" and any(
                _close(g, f * np.asarray(w)) for f in (np.sqrt(d), 1 / np.sqrt(d))
            ):
                return (
                    "dv is off by a factor √d: dv = Pᵀ dO carries no scale of its own; the "
                    "scale 1/√d reaches dv only through P"
                )
            for factor, text in (
                (
                    np.sqrt(d),
                    "√d times too large: S = scale·QKᵀ with scale = 1/√d, so the chain rule "
                    f"multiplies {name} by the scale",
                ),
                (1 / np.sqrt(d), "√d times too small: the scale 1/√d is applied twice"),
                (-1.0, "of the wrong sign: dS = P ∘ (dP − D)"),
            ):
                if _close(g, factor * np.asarray(w)):
                    return f"{name} is {text}"
            if np.asarray(g).dtype != np.float64 or _close_f32(g, w):
                return _float32_hint(name, np.asarray(g).dtype)
            if causal and all(_close(g, u) for g, u in zip(got, case["unmasked"])):
                return (
                    "yours equals the backward without the mask: the causal flag is ignored; with causal=True "
                    "query i sees key j only when j ≤ i + M − N (set the others to −inf before the softmax)"
                )
            if causal and N != M:
                return (
                    f"{name} differs on a causal case with N ≠ M: is the mask aligned bottom-right (key j ≤ i + M − N)?"
                    + (
                        " Are the last, shorter blocks visited?"
                        if case["tiled"]
                        else ""
                    )
                )
            if not np.any(np.asarray(g, dtype=float)):
                return f"{name} is all zeros: is it still the array you started from, never added into?"
            if not case["tiled"] and (name == "dv" or not _close(got[2], want[2])):
                return (  # the standard backward: no lse, no tiles
                    f"{name}{' and dv' * (name != 'dv')} wrong: dv = Pᵀ dO needs only P and dO, so check P "
                    "(softmax of scale·q kᵀ by rows, each row summing to 1, masked where causal) and the "
                    "transpose, Pᵀ dO, with no factor of its own"
                )
            if name == "dv" or not _close(
                got[2], want[2]
            ):  # dv = Pᵀ dO: a wrong dv means a wrong P
                return (
                    f"{name}{' and dv' * (name != 'dv')} wrong, and dv depends only on P and dO, so P is wrong: check P = "
                    "exp(S − lse) (the forward's lse, one per query row; not a softmax of the tile) and the transpose, Pᵀ dO"
                )
            return f"{name} is wrong and dv right, so P is right: check dP = dO Vᵀ, D (one per query row), the transposes, the scale"
    return "return the tuple (dq, dk, dv), in that order"


_DENSE = [
    "D = rowsum(dO)",
    "D missing",
    "D added",
    "Jacobian diagonal only",
    "scale √d",
    "D down the column",
    ("P = exp(S - row max)", "D from one tile"),
    ("causal top-left", "D from one tile"),
    ("causal off by one", "D from one tile"),
    ("causal one past", "D from one tile"),
    ("causal mask after the softmax", "D from one tile"),
    "dv without transpose",
    "dk without transpose",
]


_MASK_SHIFTS = {  # the diagonal offset of each planted mask: key j seen when j <= i + offset
    "causal top-left": lambda N, M: 0,
    "causal off by one": lambda N, M: M - N - 1,
    "causal one past": lambda N, M: M - N + 1,
}


def _masked_lse(q, k, offset):
    """lse of the dense scores under the mask j <= i + offset (−inf for a row that sees no key)."""
    j, i = np.arange(len(k)), np.arange(len(q))[:, None]
    s = np.where(j <= i + offset, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    m = np.nan_to_num(s.max(axis=-1), neginf=0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(s - m[:, None]).sum(axis=-1)) + m


def _variants(q, k, v, o, lse, do, case, tiled, want) -> list:
    """(mistake, gradients) for each planted mistake that changes the answer; a dense P is normalized under its own mask."""
    out = []
    for mistake in (
        [
            *BACKWARD_MISTAKES,
            *((m, "D from one tile") for m in BACKWARD_MISTAKES if m[0] == "P"),
            ("last query block dropped", "last key block dropped"),
        ]
        if tiled
        else _DENSE
    ):
        lse_m, o_m = lse, o
        if not tiled and "scale √d" in mistake:  # the forward of √d·QKᵀ
            o_m, lse_m = attention_reference(
                q * q.shape[1], k, v, causal=case["causal"]
            )  # (d·q)·kᵀ/√d = √d·q·kᵀ
        shift = _MASK_SHIFTS.get(next((m for m in _MASK_SHIFTS if m in mistake), ""))
        if not tiled and shift is not None:  # a softmax over the keys of that mask
            lse_m = _masked_lse(q, k, shift(len(q), len(k)))
        try:
            alt = backward_with_mistake(
                q, k, v, o_m, lse_m, do, case["Br"], case["Bc"], case["causal"], mistake
            )
        except ValueError:
            continue
        if not all(_close(a, w) for a, w in zip(alt, want)):
            out.append((mistake, alt))
    return out


def _backward_cases(
    name, fn, cases, tiled, large_scores=(), seed=0, tiles=None
) -> bool:
    """Compare `fn` with lab.attention_backward on each case, then on each of `large_scores` (same form) with every
    score near +800, case n's arrays drawn from `seed + n`; print a diagnosis and return False at the first failure.
    With a list as `tiles`, a tiled causal case whose values agree is run again with its tiles traced
    (`_tile_violation`), and appended: the verdict when it formed a tile with no visible entry (printed by the
    caller after the structure is checked, which names a loop without tiles better), else `(computed, total)`, or
    None when its tiles could not be traced."""
    cases = [(c, 0.0) for c in cases] + [(c, 800.0) for c in large_scores]
    for n, (c, score) in enumerate(cases):
        N, M, d, dv = c[:4]
        Br, Bc, causal = (
            (c[4], c[5], bool(c[6]) if len(c) > 6 else False)
            if tiled
            else (N, M, bool(c[4]) if len(c) > 4 else False)
        )
        case = dict(
            N=N,
            M=M,
            d=d,
            dv=dv,
            Br=Br,
            Bc=Bc,
            causal=causal,
            N_tail=N - N % Br,
            N_last=N - 1,
            M_tail=M - M % Bc,
            M_last=M - 1,
            score=score,
            tiled=tiled,
        )
        shown = (
            f"{n} (N={N}, M={M}, d={d}, dv={dv}"
            + (f", Br={Br}, Bc={Bc}" if tiled else "")
            + f", causal={causal}"
            + (f", scores near +{score:.0f}" if score else "")
            + ")"
        )
        q, k, v, do, o, lse = _problem(N, M, d, dv, causal, seed=seed + n, score=score)
        args = (q, k, v, o, lse, do, Br, Bc, causal) if tiled else (q, k, v, do, causal)
        got = _run(
            name,
            fn,
            [a.copy() if isinstance(a, np.ndarray) else a for a in args],
            shown,
            lambda text: _error_hint(text, "tiled" if tiled else "standard"),
            numpy_only=tiled,
        )
        if got is None:
            return False
        want = attention_backward(q, k, v, do, causal=causal)
        case["unmasked"] = attention_backward(q, k, v, do) if causal else want
        problem = diagnose(got, want, names=NAMES, rtol=RTOL, atol=ATOL)
        if problem is None and tiled and causal and tiles is not None:
            wasted, counts = _tile_violation(fn, q, k, v, o, lse, do, Br, Bc)
            tiles.append(
                (
                    f"{name}: ✗ case {shown}: a tile no query sees\n"
                    + _wrapped("hint: the values agree, but " + wasted)
                )
                if wasted
                else counts
            )
        if problem is None:
            continue
        print(f"{name}: ✗ case {shown}: {problem}")
        print(
            f"  hint: {_backward_hint(got, want, case, _variants(q, k, v, o, lse, do, case, tiled, want))}"
        )
        return False
    return True


COURSE_STANDARD_CASES = (  # run after the learner's own list, which may have been edited
    (5, 11, 4, 3, False),
    (3, 3, 8, 8, False),
    (6, 13, 4, 4, True),
    (9, 9, 8, 2, True),
)


def check_standard_backward(
    fn, cases, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(q, k, v, do, causal)` (one head, keeps P) against `lab.attention_backward`; print one verdict.

    `cases`: tuples `(N, M, d, dv[, causal])`; the arrays are drawn afresh on each run (`seed` draws the same
    again). The course's `COURSE_STANDARD_CASES` (two causal) run after them, so that a shortened list cannot
    pass a backward that ignores `causal`; one more case has every score near +800, where e^S without the row max overflows. A failure names dq, dk or dv, the worst
    element and the mistake it matches. Taught in: notebooks/09_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your backward")
    _, seed = _fresh(seed)
    with noting_seed(seed):
        passed = _backward_cases(
            name,
            fn,
            list(cases) + list(COURSE_STANDARD_CASES),
            tiled=False,
            large_scores=[(6, 10, 8, 4)],
            seed=seed,
        )
    if passed:
        print(
            f"{name}: ✓ passed your {len(cases)} cases, the course's {len(COURSE_STANDARD_CASES)} "
            "and 1 with scores near +800 (dq, dk, dv)"
        )


COURSE_TILED_CASES = (  # causal, Br not dividing M − N: tiles whose one visible entry is a corner
    (21, 29, 8, 4, 5, 4, True),
    (45, 37, 4, 4, 8, 6, True),
)


def check_tiled_backward(
    fn,
    cases,
    *,
    large=(1024, 1536, 2, 3, 32, 64, True),
    name: str | None = None,
    seed: int | None = None,
) -> None:
    """Check `fn(q, k, v, o, lse, do, Br, Bc, causal)` against `lab.attention_backward`, then that it keeps to tiles; print one verdict.

    `cases`: tuples `(N, M, d, dv, Br, Bc, causal)`, their arrays drawn afresh on each run (`seed` draws the same
    again), then `COURSE_TILED_CASES`: causal, with tiles whose only visible entry is their bottom-left corner, so
    that a causal skip off by one fails even when the learner's own list has none. After the values agree, `large` (same form) is run
    on watched arrays (`arrays_formed`): forming an N×M array, or a block of rows against all M keys, fails,
    as do tiles larger than Br × Bc (named apart from an N×M array when the loop's one tile was the whole
    problem; `large` must have Br < N and Bc < M), and so does calling lab's backward or any torch op (tracemalloc does not see torch's memory; the exercise is
    numpy's). On each causal case the values agree on, the tiles the loop forms are traced (`tiles_formed`): one
    with no visible entry fails ("tile (I, J) has no visible entry: skip it"), once the structure has passed; the
    verdict then counts the tiles computed and skipped. Taught in: notebooks/09_tiled_backward.ipynb
    """
    if len(large) != 7 or not (0 < large[4] < large[0] and 0 < large[5] < large[1]):
        raise ValueError(
            "large must be (N, M, d, dv, Br, Bc, causal) with Br < N and Bc < M, so that one tile "
            f"is not the whole problem; got {large!r}"
        )
    name = name or getattr(fn, "__name__", "your backward")
    _, seed = _fresh(seed)
    with noting_seed(seed):
        tiles: list = []
        passed = _backward_cases(
            name,
            fn,
            list(cases) + list(COURSE_TILED_CASES),
            tiled=True,
            seed=seed,
            tiles=tiles,
        )
    if not passed:
        return
    try:
        problem = _formed_violation(fn, *large)
    except Exception as exc:  # the values agreed, so this is the watched run itself
        problem = f"raised {type(exc).__name__} on watched arrays: {exc}"
    if problem:
        print(
            f"{name}: ✗ the values agree on {len(cases)} cases, but on N = {large[0]}, M = {large[1]}: {problem}"
        )
        return
    wasted = next((t for t in tiles if isinstance(t, str)), None)
    if wasted:  # the values agree and the loop keeps to tiles, but computes empty ones
        print(wasted)
        return
    print(
        f"{name}: ✓ passed your {len(cases)} cases and the course's {len(COURSE_TILED_CASES)} "
        "(corner-only tiles) (dq, dk, dv)"
    )
    if tiles and None not in tiles:  # every causal case's tiles were traced
        done, total = (sum(c[i] for c in tiles) for i in (0, 1))
        print(
            f"{name}: ✓ causal cases: {done} of {total} tiles computed (each with a visible "
            f"entry), {total - done} skipped"
        )
    print(
        f"{name}: ✓ N = {large[0]}, M = {large[1]}: no array beyond a tile and the (N, ·), (M, ·) ones"
    )


# ------------------------------------------------------------------------------------ D and one tile of P


def _delta_hint(case, got, want) -> str | None:
    (o, do), g = case, np.asarray(got, dtype=float)
    if g.shape == want.shape and _close(
        g, want
    ):  # right, and refused for another reason
        return None
    if g.shape == want.shape + (1,):
        return "shape: keepdims=True leaves an axis of 1; D is one number per query row, shape (..., N)"
    if g.shape == o.shape[:-2] + o.shape[-1:]:
        return "shape: that sums over the rows (axis -2); D_i sums over the last axis, one number per query row"
    if g.shape != want.shape:
        return "shape: D has one number per query row, shape (..., N): sum over the last axis only"
    if _close(g, do.sum(axis=-1)):
        return "that is rowsum(dO): D_i = Σ_j P_ij dP_ij, rewritten with O_i in place of Σ_j P_ij V_j"
    given = np.result_type(o, do)
    if np.asarray(got).dtype != given:  # the dtype, not the arithmetic, is what differs
        return _delta_dtype(None, case, got)
    f32 = lambda a: a.astype(np.float32).astype(float)
    for cast, which in (
        ((f32(o), do), "o was"),
        ((o, f32(do)), "dO was"),
        ((f32(o), f32(do)), "o and dO were"),
    ):
        if _close_f32(g, want) and _close(g, (cast[0] * cast[1]).sum(axis=-1)):
            return (
                f"right to float32's precision only: {which} rounded to float32 on the way "
                f"(an astype(np.float32)?); o and dO are {given}, keep them so"
            )
    if _close_f32(g, want):
        return (
            "right to float32's precision only: a product or sum on the way was float32; "
            f"o and dO are {given}, keep every step in {given}"
        )
    return "D_i = Σ_j P_ij dP_ij; write dP_ij = dO_i · V_j and move the sum over j inside: what is Σ_j P_ij V_j?"


def check_delta(fn, cases, *, name: str | None = None) -> None:
    """Check `fn(o, do)` against $D = \\mathrm{rowsum}(dO \\circ O)$ (`lab.backward_delta`); print one verdict.

    A keepdims slip or a sum over the wrong axis is a "shape"; rowsum(dO) is named; running `lab.backward_delta` (by
    any name) is refused. Taught in: notebooks/09_backward.ipynb
    """
    if not list(cases):
        shown = name or getattr(fn, "__name__", "your function")
        print(f"{shown}: ✗ no cases given: pass at least one (o, dO) pair")
        return
    check(
        fn,
        backward_delta,
        cases,
        name=name or getattr(fn, "__name__", None),
        rtol=RTOL,
        atol=ATOL,
        tolerance=_delta_tolerance,
        hint=_delta_hint,
        properties=(
            _own_work("backward_delta", numpy_only=True),
            _delta_dtype,
            _delta_float32,
            _delta_rowwise,
        ),
    )


def _delta_tolerance(case) -> tuple:
    """A float32 case is held to float32's rounding, whatever the order of the sum; float64 to `RTOL`."""
    return (1e-5, 1e-6) if np.result_type(*case) == np.float32 else (RTOL, ATOL)


def _delta_float32(fn, case, got) -> str | None:
    """Property: on float32 o and dO, D comes back in float32 too (to float32's rounding), whatever the
    notebook's cases are."""
    run = getattr(fn, "raw", fn)
    rng = np.random.default_rng(9)
    o, do = (rng.standard_normal((2, 6, 5)).astype(np.float32) for _ in range(2))
    try:
        have = np.asarray(run(o, do))
    except Exception as exc:  # noqa: BLE001 - a learner's bug: report it as a verdict
        return (
            f"on the check's own float32 case (o and dO of shape (2, 6, 5)) your D raised "
            f"{type(exc).__name__}: {exc}; "
            "D = rowsum(dO ∘ O) takes arrays of any shape (..., N, d_v)"
        )
    want = backward_delta(o.astype(float), do.astype(float))
    if have.dtype != np.float32:
        return (
            "your cases agree, but on the check's own float32 case (o and dO of shape (2, 6, 5)) "
            f"your D is {have.dtype}: D comes back in the inputs' dtype (a sum with dtype=, an "
            "astype or a float64 constant widened it)"
        )
    if have.shape != want.shape or not np.allclose(have, want, rtol=1e-5, atol=1e-5):
        return (
            "your cases agree, but on the check's own float32 case (o and dO of shape (2, 6, 5)) "
            "your D is not rowsum(dO ∘ O)"
        )
    return None


def _delta_rowwise(fn, case, got, N: int = 256) -> str | None:
    """Property: D is formed row by row, from each row's own d_v products: no (N, N) array on the way
    (the diagonal of dO Oᵀ is right, at N² products for N numbers)."""
    run = getattr(fn, "raw", fn)
    rng = np.random.default_rng(3)
    o, do = (rng.standard_normal((N, 4)) for _ in range(2))
    try:
        shapes, peak = arrays_formed(run, o, do, above=4 * N)
    except Exception as exc:  # noqa: BLE001 - a learner's bug: report it as a verdict
        return (
            f"on o and dO of shape ({N}, 4) your D raised {type(exc).__name__}: {exc}"
        )
    square = [sh for sh in shapes if len(sh) >= 2 and sh[-2:] == (N, N)]
    if not square and peak < N * N * 8 // 2:  # einsum's (N, N) is seen by its memory
        return None
    formed = f"formed a {square[0]} array" if square else f"held {peak / 2**20:.2f} MiB"
    return (
        f"on o and dO of shape ({N}, 4) your D {formed}, an N × N product: the diagonal of "
        "dO Oᵀ is D, but it takes N² products to keep N of them; D_i = Σ_c dO_ic O_ic "
        "needs only row i's own d_v products"
    )


def _delta_dtype(fn, case, got) -> str | None:
    """Property: D comes back in the inputs' dtype (float64 here), not rounded to float32."""
    want = np.result_type(*case)
    have = np.asarray(got).dtype
    if have == want:
        return None
    if np.dtype(have).itemsize > np.dtype(want).itemsize:  # wider than the inputs
        return (
            f"your D is {have} (the array you return), and o and dO are {want}: D comes back in the "
            f"inputs' dtype, {want} (a sum with dtype={have}, or an astype, widened it)"
        )
    return (
        f"your D is {have} (the array you return), and o and dO are {want}: an astype or a "
        f"{have} accumulator rounds D; return it in the inputs' dtype, {want}"
    )


def _streamed_with(q, k, v, do, Bc, mistake=None):
    """$D_i = \\sum_j P_{ij}\\,dP_{ij}$ by key blocks of `Bc`: running max m, sum l, and a = Σ e^(S−m) dP, with
    `mistake` (one of `STREAMED_MISTAKES`) planted; None is the right loop."""
    N, M = q.shape[0], k.shape[0]
    m, l, a = np.full(N, -np.inf), np.zeros(N), np.zeros(N)  # (N,) each
    end = M - M % Bc if mistake == "last block dropped" and M % Bc else M
    for j0 in range(0, end, Bc):
        s = q @ k[j0 : j0 + Bc].T / np.sqrt(q.shape[1])  # (N, Bc)
        dp = do @ v[j0 : j0 + Bc].T  # dP: (N, Bc)
        m_new = (
            s.max(axis=-1)
            if mistake in ("block max", "max from the block")
            else np.maximum(m, s.max(-1))
        )
        alpha = np.exp(m - m_new)
        if (
            mistake == "alpha inverted"
        ):  # e^(m_new − m), 0 on the first block (l = 0 there)
            alpha = np.where(
                np.isneginf(m), 0.0, np.exp(m_new - np.where(np.isneginf(m), 0, m))
            )
        if mistake in ("block max", "no rescale"):
            alpha = np.ones(N)
        beta = (
            np.ones(N) if mistake == "acc not rescaled" else alpha
        )  # for the sum with dP
        if mistake == "l not rescaled":
            alpha, beta = np.ones(N), alpha
        e = np.exp(s if mistake == "no max" else s - m_new[:, None])  # (N, Bc)
        if mistake == "terms against the block max":
            e = np.exp(s - s.max(axis=-1, keepdims=True))
        l, a, m = alpha * l + e.sum(-1), beta * a + (e * dp).sum(-1), m_new
    return a if mistake == "no division" else a / l  # the mistakes are planted


STREAMED_MISTAKES = {
    "no max": "e^S without the max: on scores near +800 e^S overflows float64 (past 709.8) and inf / inf is NaN; "
    "subtract the running max m before the exponential",
    "block max": "each block's exponentials taken against that block's own max and added as they are: l and "
    "the weighted sum must be against the running max, so rescale both by e^(m_old − m_new) when it moves",
    "no rescale": "l and the weighted sum are not rescaled when the running max moves: what was summed "
    "against m_old is multiplied by e^(m_old − m_new) before the block's terms, taken against m_new, are added",
    "no division": "the weighted sum Σ_j e^(S_ij − m_i) dP_ij is not divided by l_i = Σ_j e^(S_ij − m_i): "
    "P_ij = e^(S_ij − m_i) / l_i",
    "max from the block": "m is set to each block's own max, not the running max: when a later block's scores "
    "are lower, e^(m_old − m_new) > 1, and where the scores fall along the row by more than about 709 it "
    "overflows to inf; keep m = max(m_old, block max), so the rescale is at most 1",
    "terms against the block max": "l and the weighted sum are rescaled to the running max, but each block's "
    "new terms are taken against that block's own max: take them against the running max too, e^(S − m_new)",
    "last block dropped": "the last, shorter key block was never visited: Bc does not divide M",
    "acc not rescaled": "l is rescaled when the running max moves, but the weighted sum Σ e^(S − m) dP "
    "is not: both were summed against m_old, so both are multiplied by e^(m_old − m_new)",
    "l not rescaled": "the weighted sum is rescaled when the running max moves, but l is not: both were "
    "summed against m_old, so both are multiplied by e^(m_old − m_new)",
    "alpha inverted": "the rescale is inverted: when the max moves from m_old to m_new, what was summed "
    "against m_old is multiplied by e^(m_old − m_new) ≤ 1",
}


def _streamed_reference(q, k, v, do, Bc):
    return backward_delta(attention_reference(q, k, v)[0], do)  # D = rowsum(dO ∘ O)


_FALLING = 3  # the case whose scores fall along the row, from about +600 to −600


def _streamed_cases(rng) -> list:
    """(q, k, v, do, Bc): a block size that divides M, one that does not, keys whose scores rise block by block,
    scores that fall along the row from about +600 to −600 (each block's max below the running max), every score
    near +800, and a large case (N = 64, M = 4096) that the check watches for N × M arrays and rows of M."""
    out = []
    for N, M, d, dv, Bc, kind in (
        (4, 12, 4, 3, 4, ""),
        (5, 19, 8, 5, 6, ""),
        (6, 24, 4, 4, 8, "rising"),
        (5, 32, 4, 4, 8, "falling"),
        (3, 10, 4, 4, 4, "large scores"),
        (64, 4096, 8, 8, 128, ""),
    ):
        q, k = rng.standard_normal((N, d)), rng.standard_normal((M, d))
        if kind == "rising":  # a later block's scores beat every earlier one's
            q[:, 0], k[:, 0] = 2.0, np.linspace(-3, 3, M)
        if (
            kind == "falling"
        ):  # S_ij ≈ 600 (1 − 2j / (M − 1)): each block below the first
            q[:, 0] = np.sqrt(600 * np.sqrt(d))
            k[:, 0] = np.sqrt(600 * np.sqrt(d)) * np.linspace(1, -1, M)
        if kind == "large scores":
            q[:, 0] = k[:, 0] = np.sqrt(800 * np.sqrt(d))
        out.append(
            (q, k, rng.standard_normal((M, dv)), rng.standard_normal((N, dv)), Bc)
        )
    return out


def _tiles_only(fn, case, got) -> str | None:
    """Property: on the large case, no (N, M) array, no block of rows against all M keys, no row of M."""
    q, k, v, do, Bc = case
    N, M = q.shape[0], k.shape[0]
    if M < 1024:
        return None
    limit = max(N, M) * max(q.shape[1], v.shape[1])  # the largest input
    shapes, peak = arrays_formed(getattr(fn, "raw", fn), q, k, v, do, Bc, above=M - 1)
    big = [s for s in shapes if len(s) >= 2 and int(np.prod(s)) > limit]
    row = next((s for s in shapes if _spans(s, M, (q.shape[1], v.shape[1]))), None)
    held = "the streamed loop holds one (N, Bc) block of S, P and dP at a time"
    if big or peak > 4 * N * M:
        return (
            f"on N = {N}, M = {M}, Bc = {Bc} it formed "
            + (
                f"an array of shape {big[0]}"
                if big
                else f"{peak / 2**20:.1f} MiB at once"
            )
            + f": {held}"
        )
    if row is not None:
        return (
            f"on N = {N}, M = {M}, Bc = {Bc} it formed an array of shape {row}, one query row "
            f"against all M = {M} keys: no key blocks at all; {held}, all rows together"
        )
    if not any(len(s) == 2 and N in s and min(s) <= Bc for s in shapes):
        return (
            f"on N = {N}, M = {M}, Bc = {Bc} it never formed an (N, Bc) block: the rows went one at "
            f"a time; each step takes one block of keys for all N rows at once, S_J = scale·q K_Jᵀ"
        )
    return None


def check_streamed_delta(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(q, k, v, do, Bc)`, $D_i = \\sum_j P_{ij}\\,dP_{ij}$ streamed over key blocks, against
    `lab.backward_delta`; print one verdict.

    The arrays are drawn afresh on each run (`seed` draws the same again): a block size that does not divide M, keys
    whose scores rise block by block, scores that fall along the row by about 1200 (a max taken per block, not
    running, overflows there), every score near +800, and N = 64, M = 4096, where an N × M array, a block of rows
    against all M keys or one query row against all M keys (no key blocks) fails. A wrong answer is told which of
    `STREAMED_MISTAKES` it matches; calling lab's forward or `lab.backward_delta` is refused.
    Taught in: notebooks/09_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cases = _streamed_cases(rng)
    mistakes = [
        (lambda *c, m=m: _streamed_with(*c, mistake=m), text)
        for m, text in STREAMED_MISTAKES.items()
    ]
    default = (
        "D_i = Σ_j P_ij dP_ij with P_ij = e^(S_ij − m_i) / l_i: keep per row a running max m, a running "
        "l = Σ e^(S − m) and a running Σ e^(S − m) dP, both rescaled by e^(m_old − m_new) when m moves "
        "(notebook 02), and divide by l after the last block"
    )
    named = _hint(mistakes, default, fn=fn, cases=cases)

    def hint(case, got, want):  # inf or NaN where the scores fall: the max was reset
        falling = case is cases[_FALLING]
        finite = np.isfinite(np.asarray(got, dtype=float)).all()
        if falling and not finite:
            return STREAMED_MISTAKES["max from the block"]
        if not finite and np.abs(case[0] @ case[1].T).max() < 600:
            return (  # ordinary scores: an inf from the rescale on the first block
                "inf or NaN on ordinary scores: is the rescale inverted? On the first block m = −inf, so "
                "e^(m_new − m) is inf, and inf times l = 0 is NaN; the rescale is e^(m_old − m_new), which "
                "is 0 there, at most 1 after"
            )
        return named(case, got, want)

    with np.errstate(over="ignore", invalid="ignore"):
        check(
            fn,
            _streamed_reference,
            cases,
            name=name,
            rtol=RTOL,
            atol=ATOL,
            hint=hint,
            properties=(
                _own_work(
                    "backward_delta",
                    "attention_reference",
                    "attention_backward",
                    "flash_attention_numpy",
                    numpy_only=True,
                ),
                _tiles_only,
            ),
            seed=seed,
        )


_ROW_SUM_HINTS = {
    "p": "P is what the exercise removes; Σ_j P_ij V_j is a row of a product the forward computed from P",
    "v": "V_j is one key's row; Σ_j P_ij V_j weights all of V's rows by row i of P: a row of which product?",
    "dp": "dP_ij = dO_i · V_j is already substituted; Σ_j P_ij V_j has no dO in it",
    "do": "dO is the incoming gradient; Σ_j P_ij V_j has no dO in it: it is a row of the forward's P V",
    "lse": "lse_i is one number per row; Σ_j P_ij V_j is a vector of d_v numbers, a row of P V",
    "q": "Q enters only through S and P; Σ_j P_ij V_j is a row of P V",
    "k": "K enters only through S and P; Σ_j P_ij V_j is a row of P V",
}


def check_row_sum(answer) -> None:
    """Check the name of the saved array that equals $\\sum_j P_{ij} V_j$ (row $i$ of it); print one verdict.

    `answer` is one of "q", "k", "v", "o", "lse", "p", "do", "dp" (case ignored). A wrong name gets a hint
    that says why it cannot be. Taught in: notebooks/09_backward.ipynb
    """
    if answer is None:
        print(
            'row_sum: not answered yet (set it to the name of one array, such as "v")'
        )
        return
    got = str(answer).strip().lower().replace("_i", "")
    if got == "o":
        print("row_sum: ✓ Σ_j P_ij V_j = O_i, row i of O = P V, saved by the forward")
        return
    hint = _ROW_SUM_HINTS.get(
        got, f"{answer!r} is not one of q, k, v, o, lse, p, do, dp"
    )
    print(f"row_sum: ✗ {answer!r}\n  hint: {hint}")


_OUTER = {
    "key": "key",
    "keys": "key",
    "k": "key",
    "query": "query",
    "queries": "query",
    "q": "query",
}


def check_outer_choice(outer, atomic_numbers=None) -> None:
    """Check the loop order picked for a GPU backward at $N = M$, $d_v = d$: `outer` is "key" (key blocks
    outside) or "query"; print one verdict.

    The order with the fewest numbers that several outer blocks add into, atomically, is key blocks outside
    ($dQ$, $Nd$ numbers, against $dK$ and $dV$, $Md + Md_v$). With `atomic_numbers` (the learner's function
    of Exercise 1), a wrong choice is told what that function counts at $N = M = 1024$, $d = d_v = 64$.
    Taught in: notebooks/09_tiled_backward.ipynb
    """
    if outer is None:
        print(
            'outer: not answered yet (set it to "key" or "query", the blocks of the outer loop)'
        )
        return
    if not isinstance(outer, str):
        raise TypeError(
            f'outer must be the string "key" or "query", got {type(outer).__name__}'
        )
    got = _OUTER.get(outer.strip().lower().replace(" blocks", "").replace("-outer", ""))
    if got is None:
        print(
            f'outer: ✗ {outer!r}\n  hint: answer "key" or "query": which blocks the outer loop walks'
        )
        return
    if got == "key":
        print(
            "outer: ✓ key blocks outside: only dQ (N·d numbers) is added into by several blocks"
        )
        return
    counted = ""
    if atomic_numbers is not None:
        try:
            key_outer, query_outer = atomic_numbers(1024, 1024, 64, 64)
            counted = (
                f" Your atomic_numbers(1024, 1024, 64, 64) gives {key_outer:,} with key blocks "
                f"outside and {query_outer:,} with query blocks outside."
            )
        except Exception:  # noqa: BLE001 - the stub or a bug: the hint stands without it
            counted = ""
    hint = (
        "with query blocks outside, every query block adds into dK and dV, M·d + M·d_v numbers, "
        "by atomic adds; with key blocks outside only dQ, N·d: half as many at N = M, d_v = d."
        + counted
    )
    print(f"outer: ✗ {outer!r}\n" + _wrapped("hint: " + hint))


def _p_tile_hint(got, s, lse, i0, i1, j0, j1) -> str:
    g, tile = np.asarray(got, dtype=float), s[i0:i1, j0:j1]
    if g.shape != tile.shape:
        return f"shape: the tile is (Br, Bc) = ({i1 - i0}, {j1 - j0}): Q_I K_Jᵀ, with lse_I[:, None] subtracted from each row"
    if not np.isfinite(g).all():
        return (
            f"inf or NaN with scores up to {tile.max():.0f}: e^S overflows past S ≈ 709 before lse can be divided "
            "out; subtract lse_i inside the exponent, where S − lse ≤ 0"
        )
    m = tile.max(axis=-1, keepdims=True)
    known = [
        (
            np.exp(tile - m - lse[i0:i1, None]),
            "exp(S − m − lse) with m the tile's own max as well: lse_i already holds the row's max, "
            "so subtracting m removes it twice",
        ),
        (
            np.exp(tile - m),
            "exp(S − m) with m the tile's own max: lse_i = m_i + log l_i already holds the max and the sum "
            "of the whole row",
        ),
        (
            np.exp(tile - m) / np.exp(tile - m).sum(axis=-1, keepdims=True),
            "each "
            "row of your tile sums to 1: that is the softmax of this tile alone; P's rows sum to 1 over all keys",
        ),
        (
            np.exp(tile * np.sqrt(8) - lse[i0:i1, None]),
            "the scale is missing: S_ij = Q_i K_jᵀ / √d, as in the forward",
        ),
        (
            tile - lse[i0:i1, None],
            "the exponential is missing: S − lse is the log of P; P_ij = e^(S_ij − lse_i)",
        ),
        (
            np.exp(tile + lse[i0:i1, None]),
            "lse is added: P_ij = e^(S_ij) / Σ_j' e^(S_ij'), and dividing by that sum subtracts its log, "
            "lse_i, inside the exponent",
        ),
        (
            np.exp(tile) / lse[i0:i1, None],
            "e^S divided by lse: lse_i = log Σ_j e^(S_ij) is the log of the row's sum, not the sum; "
            "subtract it inside the exponent, P_ij = e^(S_ij − lse_i)",
        ),
        (
            np.exp(tile - lse[i0:i1, None].T)
            if tile.shape[0] == tile.shape[1]
            else None,
            "lse_I is subtracted along the columns: it is one number per query row, lse_I[:, None]",
        ),
    ]
    for alt, text in known:
        if alt is not None and _close(g, alt):
            return text
    return "the block must equal the same block of softmax(Q Kᵀ/√d) over all keys, from lse_i alone"


def check_p_tile(
    fn, cases, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(q_I, k_J, lse_I)` against the same block of the full softmax (N = 32, M = 48, d = 8); print one verdict.

    `cases`: tuples `(i0, i1, j0, j1, spread)`: rows i0:i1 and keys j0:j1 of a problem whose queries are
    multiplied by `spread` (300 makes e^S overflow). Names a tile max used for lse, a tile normalized on its
    own, an overflow and lse subtracted along the wrong axis. The arrays are drawn afresh on each run (`seed` draws
    the same again). Taught in: notebooks/09_tiled_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your p_tile")
    rng, seed = _fresh(seed)
    with noting_seed(seed):
        _p_tile_cases(name, fn, cases, rng)


def _p_tile_cases(name, fn, cases, rng) -> None:
    q, k, v = (
        rng.standard_normal((32, 8)),
        rng.standard_normal((48, 8)),
        rng.standard_normal((48, 8)),
    )
    for n, (i0, i1, j0, j1, spread) in enumerate(cases):
        qs = q * spread
        s, (_, lse) = (
            qs @ k.T / np.sqrt(8),
            attention_reference(qs, k, v),
        )  # S: (32, 48), lse: (32,)
        want = np.exp(s - s.max(axis=-1, keepdims=True))
        want = (want / want.sum(axis=-1, keepdims=True))[
            i0:i1, j0:j1
        ]  # the block of the softmax
        shown = (
            f"{n} (rows {i0}:{i1}, keys {j0}:{j1}"
            + (f", queries ×{spread}" if spread != 1 else "")
            + ")"
        )
        with np.errstate(over="ignore", invalid="ignore"):
            got = _run(
                name,
                fn,
                (qs[i0:i1].copy(), k[j0:j1].copy(), lse[i0:i1].copy()),
                shown,
                lambda text: _error_hint(text, "p_tile"),
                numpy_only=True,
            )
            if got is None:
                return
            problem = diagnose(got, want, rtol=RTOL, atol=ATOL)
            if problem is not None:
                print(f"{name}: ✗ case {shown}: {problem}")
                print(f"  hint: {_p_tile_hint(got, s, lse, i0, i1, j0, j1)}")
                return
    print(f"{name}: ✓ passed {len(cases)} cases")


# ------------------------------------------------------------------------------------ the loop order

READS, WRITES = ("q", "k", "v", "do"), ("dq", "dk", "dv")


def query_outer_walk(N: int, M: int, Br: int, Bc: int) -> tuple[dict, dict]:
    """The reads of q, k, v, dO and the writes of dq, dk, dv (in whole arrays) of the tiled backward with the
    query blocks outside, counted by walking its blocks: for each $Q_I$ (rows $i_0 .. i_0 + B_r$), every $K_J$,
    $V_J$ loaded and every $dK_J$, $dV_J$ added into, then $dQ_I$ written once. Taught in:
    notebooks/09_tiled_backward.ipynb"""
    rows = dict.fromkeys(READS + WRITES, 0)
    for i0 in range(0, N, Br):
        n = min(Br, N - i0)  # the last query block may be shorter
        rows["q"] += n
        rows["do"] += n
        for j0 in range(0, M, Bc):
            m = min(Bc, M - j0)
            for name in ("k", "v", "dk", "dv"):
                rows[name] += m
        rows["dq"] += n
    size = {"q": N, "do": N, "dq": N, "k": M, "v": M, "dk": M, "dv": M}
    whole = {n: rows[n] // size[n] for n in rows}
    return {n: whole[n] for n in READS}, {n: whole[n] for n in WRITES}


def _loop_order_hint(N, M, Br, Bc, reads, writes, want) -> str:
    Tr, Tc = -(-N // Br), -(-M // Bc)
    key_outer = ({"q": Tc, "do": Tc, "k": 1, "v": 1}, {"dq": Tc, "dk": 1, "dv": 1})
    if (reads, writes) == key_outer:
        return (
            "that is section 1's order, key blocks outside: with query blocks outside, which arrays does "
            "the outer loop load once, and which again for every outer block?"
        )
    if any(
        isinstance(x, float) and x != int(x)
        for x in (*reads.values(), *writes.values())
    ):
        return "a count of blocks is a whole number: the last, shorter block counts as one, ⌈N/Br⌉"
    floor = N // Br
    if floor != Tr and floor in (reads["k"], writes["dk"]):
        return (
            f"N = {N} is not a multiple of Br = {Br}: the last, shorter query block is a block too, "
            f"⌈N/Br⌉ = {Tr} query blocks, not ⌊N/Br⌋ = {floor}"
        )
    if Tc != Tr and Tc in (reads["k"], reads["v"]):
        return (
            "K and V are loaded again for every query block (the outer loop): count the query blocks, "
            "⌈N/Br⌉, not the key blocks"
        )
    if reads["do"] == 2:
        return "D's own pass over dO is not counted (it is the same in both orders): the loop reads dO_I once"
    if writes["dk"] == 1 or writes["dv"] == 1:
        return (
            "the tile now holds dQ_I to the end; dK_J and dV_J collect a part from every query block, so "
            "each is written into the full array once per query block"
        )
    if writes["dq"] != 1:
        return "dQ_I collects every key block's part while Q_I is the outer block: it is written once"
    wrong = [n for n in READS if reads[n] != want[0][n]] + [
        n for n in WRITES if writes[n] != want[1][n]
    ]
    return f"wrong: {', '.join(wrong)}; walk one outer block and count what it loads and adds into"


def _wrapped(text: str) -> str:
    """`text` indented under a verdict, in lines a projector shows whole (at most 100 characters)."""
    return textwrap.fill(text, 100, initial_indent="  ", subsequent_indent="  ")


def check_loop_order(
    fn, *, cases: int = 6, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(N, M, Br, Bc) -> (reads, writes)` for the tiled backward with query blocks outside against
    `query_outer_walk`; print one verdict.

    The cases are drawn afresh on each run (`seed` draws the same again): $N \ne M$, $B_r \ne B_c$, block sizes
    that divide and that do not. A wrong answer is told which classic slip it matches; running the check's own
    walk is refused. Taught in: notebooks/09_tiled_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    drawn = [(64, 96, 16, 32)]  # blocks that divide: the two counts still differ
    while len(drawn) < cases:
        N, M = (int(x) for x in rng.integers(40, 400, size=2))
        Br, Bc = (
            int(x) for x in rng.choice([8, 16, 24, 32, 48, 64], size=2, replace=False)
        )
        if N % Br and -(-N // Br) != -(
            -M // Bc
        ):  # a shorter last query block, and Tr != Tc
            drawn.append((N, M, Br, Bc))
    for i, (N, M, Br, Bc) in enumerate(drawn):
        shown = f"case {i} (N={N}, M={M}, Br={Br}, Bc={Bc})"
        try:
            with _watching(("checks.backward.query_outer_walk",)) as called:
                got = fn(N, M, Br, Bc)
        except NotImplementedError:
            print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
            return
        except Exception as exc:  # a learner's bug: report it
            print(
                f"{name}: ✗ {shown} raised {type(exc).__name__}:\n{_wrapped(str(exc))}"
            )
            return
        if called:
            print(f"{name}: ✗ {shown}:\n{_wrapped(_refusal(called))}")
            return
        if not (
            isinstance(got, tuple)
            and len(got) == 2
            and all(isinstance(x, dict) for x in got)
            and set(got[0]) == set(READS)
            and set(got[1]) == set(WRITES)
        ):
            what = (
                "return (reads, writes), two dicts, reads with the keys "
                '"q", "k", "v", "do" and writes with "dq", "dk", "dv"'
            )
            print(f"{name}: ✗ {shown} returned {type(got).__name__}:\n{_wrapped(what)}")
            return
        want = query_outer_walk(N, M, Br, Bc)
        if got != want:
            print(
                f"{name}: ✗ {shown}:\n{_wrapped(_loop_order_hint(N, M, Br, Bc, *got, want))}"
            )
            print(
                f"  (seed {seed}: check_loop_order(fn, seed={seed}) draws these cases again)"
            )
            return
    print(
        f"{name}: ✓ passed {len(drawn)} cases (reads of q, k, v, dO; writes of dq, dk, dv)"
    )


# ------------------------------------------------------------------------------------ the atomic adds


def _atomic_reference(N, M, d, dv):
    """Entries added into by several outer blocks: $N d$ of dQ (key blocks outside), $M d + M d_v$ of dK, dV."""
    return N * d, M * d + M * dv


_ATOMIC_MISTAKES = (
    [
        (
            lambda N, M, d, dv: (M * d + M * dv, N * d),
            "the two are swapped: with key blocks outside, each outer block holds its own dK_J, dV_J, and "
            "every one of them adds into the rows of dQ",
        ),
        (
            lambda N, M, d, dv: (N * d, 2 * M * d),
            "dV has d_v columns, not d: M·d of dK and M·d_v of dV (the cases have d ≠ d_v)",
        ),
        (
            lambda N, M, d, dv: (N * d, M * d),
            "with query blocks outside both dK and dV collect a part from every query block",
        ),
        (
            lambda N, M, d, dv: (N * dv, M * d + M * dv),
            "dQ has q's shape, (N, d): its rows have d numbers, not d_v",
        ),
    ]
    + [
        (
            rows,
            "that counts rows: the question asks for numbers, and a row of dQ holds d of them",
        )
        for rows in (
            lambda N, M, d, dv: (N, 2 * M),
            lambda N, M, d, dv: (N, M * d + M * dv),
            lambda N, M, d, dv: (N * d, 2 * M),
        )
    ]
    + [
        (
            lambda N, M, d, dv, b=b: (b * N * d, b * (M * d + M * dv)),
            f"that counts bytes ({b} a number): the question asks for numbers, N·d of dQ and so on",
        )
        for b in (2, 4, 8)
    ]
)


def check_atomic_numbers(
    fn, *, cases: int = 5, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(N, M, d, dv) -> (key_outer, query_outer)`: the entries of the full gradient arrays that several outer
    blocks add into, with key blocks outside ($N d$ of dQ) and with query blocks outside ($M d + M d_v$ of dK, dV);
    print one verdict. The cases ($N \\ne M$, $d \\ne d_v$) are drawn afresh on each run. Taught in:
    notebooks/09_tiled_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    drawn = []
    while len(drawn) < cases:
        N, M = (int(x) for x in rng.integers(40, 400, size=2))
        d, dv = (
            int(x) for x in rng.choice([16, 32, 48, 64, 128], size=2, replace=False)
        )
        if N != M:
            drawn.append((N, M, d, dv))
    default = (
        "walk one outer block: which gradients does it hold to the end, and which does it add into rows that "
        "the other outer blocks, running at the same time, add into too? Count their numbers"
    )
    check(
        fn,
        _atomic_reference,
        drawn,
        name=name,
        rtol=0,
        atol=0,
        names=("key_outer", "query_outer"),
        labels=("N", "M", "d", "dv"),
        hint=_hint(_ATOMIC_MISTAKES, default, fn=fn, cases=drawn),
        properties=(_own_work(),),
        seed=seed,
    )


# ------------------------------------------------------------------------------------ the softmax's Jacobian


def _jacobian_reference(p):
    """$J_{jj'} = P_j(\\delta_{jj'} - P_{j'})$, that is $\\mathrm{diag}(P) - P P^\\top$."""
    return np.diag(p) - np.outer(p, p)


_JACOBIAN_MISTAKES = [
    (
        lambda p: np.diag(p * (1 - p)),
        "only the diagonal, P_j (1 − P_j): raising S_j' also lowers every other P_j of the row, "
        "so off the diagonal ∂P_j/∂S_j' = −P_j P_j'",
    ),
    (
        lambda p: -np.outer(p, p),
        "the diagonal lacks its P_j: for j' = j the quotient rule differentiates the numerator "
        "e^(S_j) as well, which adds P_j there",
    ),
    (
        lambda p: np.outer(p, p) - np.diag(p),
        "every sign is flipped: raising S_j raises P_j (a positive diagonal) and lowers the others",
    ),
    (
        lambda p: np.diag(p) + np.outer(p, p),
        "the sign off the diagonal is wrong: raising S_j' takes share from every other P_j, "
        "so ∂P_j/∂S_j' = −P_j P_j' < 0",
    ),
    (
        lambda p: np.eye(len(p)) - np.outer(p, p),
        "the diagonal is 1 − P_j², where it is P_j (1 − P_j): δ_jj' is multiplied by P_j too, "
        "J = P_j (δ_jj' − P_j')",
    ),
    (
        lambda p: np.diag(p) - p * p,
        "p * p is a vector of M squares, broadcast along each row; the term off the diagonal is "
        "the M × M outer product P_j P_j' (np.outer(p, p))",
    ),
]


def _jacobian_hint(named):
    """`named`, after a hint for a J of the wrong shape: one column per score it is differentiated by."""

    def hint(case, got, want):
        (p,) = case
        shape = np.shape(got)
        if shape != (len(p), len(p)):
            return (
                f"J of a row of M = {len(p)} keys is {len(p)} × {len(p)}, one column per score S_j' "
                f"(yours has shape {shape}): the off-diagonal term is np.outer(p, p), not p * p"
            )
        return named(case, got, want)

    return hint


def check_softmax_jacobian(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(p) -> J`, the softmax's Jacobian $J_{jj'} = \\partial P_j/\\partial S_{j'}$ from one row of P
    alone, against $\\mathrm{diag}(P) - PP^\\top$; print one verdict.

    The rows are drawn afresh on each run (`seed` draws the same again): a single key, a flat row, ordinary
    rows and a peaked one. Held to 1e-10, so finite steps (right to about 1e-6) fail and are named, as are
    the diagonal alone, a missing or flipped sign, 1 − P² on the diagonal and p * p for the outer product;
    torch is refused. Taught in: notebooks/09_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cases = []
    for M, spread in ((1, 1.0), (4, 0.0), (4, 1.0), (7, 1.5), (12, 1.0), (6, 6.0)):
        s = rng.standard_normal(M) * spread
        p = np.exp(s - s.max())
        cases.append((p / p.sum(),))
    close = (
        "right to about 1e-6 only, as finite steps are: derive J on paper from "
        "P_j = e^(S_j) / Σ e^(S_j'') and form it from P alone, exactly",
        1e-4,
    )
    default = (
        "differentiate P_j = e^(S_j) / Σ_j'' e^(S_j'') by S_j', once for j' = j and once for j' ≠ j, "
        "and write both with P alone; every row of J sums to 0"
    )
    check(
        fn,
        _jacobian_reference,
        cases,
        name=name,
        rtol=1e-10,
        atol=1e-12,
        labels=("p",),
        hint=_jacobian_hint(
            _hint(_JACOBIAN_MISTAKES, default, fn=fn, cases=cases, close=close)
        ),
        properties=(_own_work(numpy_only=True),),
        seed=seed,
    )


# ------------------------------------------------------------------------------------ a soft-capped tile


def softcap_tile_reference(q_I, k_J, v_J, o_I, do_I, lse_I, cap):
    """Tile $(I, J)$'s parts of dQ, dK, dV for soft-capped scores $S = c\\tanh(\\mathrm{scale}\\,QK^\\top/c)$:
    $dS^{raw} = P \\circ (dP - D) \\circ (1 - \\tanh^2)$, $D = \\mathrm{rowsum}(dO \\circ O)$.

    Returns `(dq_I, dk_J, dv_J)`. Taught in: notebooks/09_tiled_backward.ipynb
    """
    return _softcap_with(q_I, k_J, v_J, o_I, do_I, lse_I, cap)


def _softcap_with(q_I, k_J, v_J, o_I, do_I, lse_I, cap, mistake=None):
    """`softcap_tile_reference` with `mistake` (a key of `SOFTCAP_MISTAKES`) planted."""
    d = q_I.shape[-1]
    scale = 1.0 if mistake == "scale missing" else 1 / np.sqrt(d)
    raw = scale * (q_I @ k_J.T)  # scale · Q_I K_Jᵀ: (Br, Bc)
    t = np.tanh(raw / cap)
    s = cap * t  # the capped scores S_IJ
    p = np.exp((raw if mistake == "P from raw scores" else s) - lse_I[:, None])
    dp = do_I @ v_J.T  # dP_IJ: (Br, Bc)
    D = (p * dp).sum(axis=-1) if mistake == "D from one tile" else (o_I * do_I).sum(-1)
    ds = p * (dp - D[:, None])  # dS_IJ, against the capped scores
    if mistake == "D missing":
        ds = p * dp
    slope = {
        "no derivative": 1.0,
        "derivative 1 - S²": 1 - s**2,
        "derivative 1 - tanh": 1 - t,
        "derivative times cap": cap * (1 - t**2),
        "derivative over cap": (1 - t**2) / cap,
        "tanh of X, not X / cap": 1 - np.tanh(raw) ** 2,
        "tanh of S": 1 - np.tanh(s) ** 2,
    }.get(mistake, 1 - t**2)  # d S / d raw
    ds_raw = ds * slope
    if mistake == "derivative inside the bracket":
        ds_raw = p * ((1 - t**2) * dp - D[:, None])
    dv_p = p * (1 - t**2) if mistake == "derivative on dV" else p
    unscaled = mistake in ("scale missing", "scale once missing")
    f = 1.0 if unscaled else scale
    return f * (ds_raw @ k_J), f * (ds_raw.T @ q_I), dv_p.T @ do_I


SOFTCAP_MISTAKES = {
    "no derivative": "dS is passed to dQ and dK as it is: the chain rule has one more step, the cap. "
    "S = cap·tanh(X / cap) with X = scale·QKᵀ, so dX = dS ∘ dS/dX, and dS/dX = 1 − tanh²(X / cap)",
    "P from raw scores": "P taken from the uncapped scores, e^(X − lse): the forward's softmax ran on the "
    "capped scores S = cap·tanh(X / cap), and lse is theirs, so P = e^(S − lse)",
    "derivative 1 - S²": "the cap's derivative as 1 − S²: d/dX of cap·tanh(X / cap) is 1 − tanh²(X / cap) "
    "= 1 − (S / cap)²; the cap cancels against the 1 / cap of the inner step",
    "derivative 1 - tanh": "the cap's derivative as 1 − tanh: tanh′(u) = 1 − tanh²(u), a square",
    "derivative times cap": "the cap's derivative multiplied by cap: cap·tanh(X / cap) gives "
    "cap · (1 / cap) · (1 − tanh²), and the two cancel",
    "derivative over cap": "the cap's derivative divided by cap: cap·tanh(X / cap) gives "
    "cap · (1 / cap) · (1 − tanh²), and the two cancel",
    "tanh of X, not X / cap": "the cap's derivative as 1 − tanh²(X), or sech²(X): the inner step divides "
    "by the cap first, so it is 1 − tanh²(X / cap) = sech²(X / cap)",
    "tanh of S": "the cap's derivative as 1 − tanh²(S), sech² of the capped scores: its argument is "
    "X / cap, the raw score over the cap, so it is 1 − tanh²(X / cap) = 1 − (S / cap)²",
    "derivative inside the bracket": "the cap's derivative multiplies dP before D is subtracted: the "
    "softmax's backward gives dS = P ∘ (dP − D) against the capped scores first; the cap's step comes "
    "after it, dX = dS ∘ (1 − tanh²)",
    "derivative on dV": "dV carries the cap's derivative: dV = Pᵀ dO does not pass through the scores, "
    "so nothing of the cap enters it beyond P",
    "D missing": "dS = P ∘ dP with no D: the softmax's backward subtracts D_i from every dP_ij of row i",
    "D from one tile": "D taken as rowsum(P ∘ dP) over this tile only: D_i sums over every key of row i. "
    "Does D = rowsum(dO ∘ O) still hold with the cap? O is still P V",
    "scale missing": "the scale is missing: the raw scores are X = QKᵀ / √d before the cap, and the chain "
    "rule multiplies dQ and dK by that 1 / √d",
    "scale once missing": "dQ and dK are √d times too large: X = scale·QKᵀ, so dQ = scale · dX K and "
    "dK = scale · dXᵀ Q",
}


def _softcap_problem(rng, N, M, d, dv, cap):
    """q, k, v, dO of one head and the soft-capped forward's o, lse (all keys, dense: a check may)."""
    q = rng.standard_normal((N, d)) * 3  # scores past the cap, so that tanh bends
    k, v = rng.standard_normal((M, d)), rng.standard_normal((M, dv))
    do = rng.standard_normal((N, dv))
    s = cap * np.tanh(q @ k.T / np.sqrt(d) / cap)  # (N, M), every entry in (−cap, cap)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(axis=-1, keepdims=True)))[:, 0]  # (N,)
    o = (e / e.sum(axis=-1, keepdims=True)) @ v  # (N, dv)
    return q, k, v, o, do, lse


def check_softcap_tile(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q_I, k_J, v_J, o_I, do_I, lse_I, cap) -> (dq_I, dk_J, dv_J)`, one tile's parts of the
    gradients of soft-capped attention, against `softcap_tile_reference`; print one verdict.

    The problem (N = 24, M = 40, d = 8, d_v = 5, the cap drawn in [2, 6]) is drawn afresh on each run
    (`seed` draws the same again); the tiles are not square, at the problem's edges and inside it. A wrong
    answer is told which of `SOFTCAP_MISTAKES` it matches; lab's backwards, `lab.softcap` and torch are
    refused. Taught in: notebooks/09_tiled_backward.ipynb
    """
    name = name or getattr(fn, "__name__", "your function")
    rng, seed = _fresh(seed)
    cap = float(np.round(rng.uniform(2, 6), 2))
    q, k, v, o, do, lse = _softcap_problem(rng, 24, 40, 8, 5, cap)
    cases = []
    for I, J in (
        (slice(0, 8), slice(0, 12)),
        (slice(8, 14), slice(12, 30)),
        (slice(18, 24), slice(33, 40)),
    ):
        cases.append((q[I], k[J], v[J], o[I], do[I], lse[I], cap))
    mistakes = [
        (lambda *c, m=m: _softcap_with(*c, mistake=m), text)
        for m, text in SOFTCAP_MISTAKES.items()
    ]
    default = (
        "go backwards one line at a time: P from the capped scores and lse; dV = Pᵀ dO; "
        "dS = P ∘ (dP − D) against the capped scores; then the cap's own step, "
        "dX = dS ∘ d(cap·tanh(X / cap))/dX; then dQ, dK from X = scale·QKᵀ"
    )
    named = _hint(mistakes, default, fn=fn, cases=cases)

    def hint(case, got, want):
        parts = got if isinstance(got, tuple) else ()
        zero = [n for n, g in zip(("dq_I", "dk_J", "dv_J"), parts) if not np.any(g)]
        if zero and named(case, got, want) is not None:
            return (
                f"{', '.join(zero)} all zeros: every tile adds a part, nonzero wherever P is; "
                "is it still the np.zeros you started from, never assigned?"
            )
        return named(case, got, want)

    check(
        fn,
        softcap_tile_reference,
        cases,
        name=name,
        rtol=RTOL,
        atol=ATOL,
        names=("dq_I", "dk_J", "dv_J"),
        labels=("q_I", "k_J", "v_J", "o_I", "do_I", "lse_I", "cap"),
        hint=hint,
        properties=(
            _own_work(
                "attention_backward",
                "flash_attention_backward_numpy",
                "NumpyFlashAttention",
                "softcap",
                "softcap_tile_reference",
                numpy_only=True,
            ),
        ),
        seed=seed,
    )
