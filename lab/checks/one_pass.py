"""Checks for the one-pass exercises: (o, lse) right, K and V read once in blocks of Bc, nothing of length M held.

`CountingRows` hands K and V to the learner's function as arrays in slow memory (a 2-D `CountingArray`):
every row load is counted and the size of every load recorded; using the whole array at once (`k @ q`,
`k.T`, `np.asarray(k)`, a lab function on k) counts as one load of all M rows. `check_one_pass_row` (one
query) and `check_one_pass_rows` (all queries, optionally causal) run the learner's function on the
classic failure cases (Bc that does not divide M, one block larger than M, scores near -1000 and +1000,
causal with N < M and with N > M) and print one verdict, checking in this order:
  1. the pass: no whole or oversized load, no row of K or V read twice ("K was read 2 times");
  2. the values: `(o, lse)` against `lab.attention_reference` (by `lab.diagnose`), with a hint read from
     the counts and the case (a dropped tail, m started at 0, a fully masked row, the causal alignment);
  3. every row read, in ceil(M / Bc) loads; on the large case, the peak bytes held (tracemalloc) below
     half of a float64 array of length M (for all queries, a few N × Bc tiles: 8 float64 tiles and numpy's
     64 KiB of scratch, so an N × M/2 boolean array fails).

Taught in: notebooks/03_one_pass_attention.ipynb
"""

from __future__ import annotations

import math
import re
import warnings
from typing import NamedTuple

import numpy as np

from ..access_count import CountingArray
from ..attention import attention_reference
from ..exercises import check, diagnose, raised_at, seed_note
from ..memory import peak_bytes
from ._support import _fresh, _guarded, _own_work, _refusal, _settled, _watching
from ._support import _hint as _mistake_hint
from ._values import FLOAT32, sharpen

__all__ = [
    "CountingRows",
    "check_normalized_step",
    "check_one_pass_row",
    "check_one_pass_rows",
    "check_expected_rescales",
]

_TOL = {"rtol": 1e-9, "atol": 1e-12}


class CountingRows(CountingArray):
    """A 2-D array `(M, d)` in slow memory: `a[j0:j1]` returns a numpy block and adds one to each row's count in `loads`.

    `sizes` lists the rows of every load in order. `shape`, `len` and `dtype` read nothing; using the
    whole array (`a @ x`, `a.T`, `np.asarray(a)`) is one load of all M rows, and `whole` is set.
    Taught in: notebooks/03_one_pass_attention.ipynb
    """

    def __init__(self, values, name: str = "K"):
        a = np.array(
            values, dtype=np.float64
        )  # a copy: the caller's array is never touched
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D (M, d), got shape {a.shape}")
        self.name, self._data = name, a
        self.loads = np.zeros(a.shape[0], dtype=np.int64)
        self.stores = np.zeros(a.shape[0], dtype=np.int64)
        self.sizes: list[int] = []
        self.whole = False

    shape = property(lambda self: self._data.shape, doc="(M, d); reads nothing")
    ndim = property(lambda self: 2, doc="2")
    dtype = property(lambda self: self._data.dtype, doc="float64")

    def __getitem__(self, key):
        first = key[0] if isinstance(key, tuple) else key
        if not isinstance(first, (slice, int, np.integer)) or isinstance(first, bool):
            raise TypeError(
                f"{self.name} takes a row index or a slice of rows (e.g. {self.name}[j0:j1]), got {key!r}"
            )
        M = self._data.shape[0]
        if isinstance(first, slice):
            rows = range(
                *first.indices(M)
            )  # no array of length M: the count must not cost memory
        elif -M <= first < M:
            rows = range(first % M, first % M + 1)
        else:
            raise IndexError(f"row {first} of {self.name} is past its end (M = {M})")
        self.loads[first] += 1
        self.sizes.append(len(rows))
        return np.array(
            self._data[key]
        )  # a copy of the block: it now lives in fast memory

    def __setitem__(self, key, value):
        raise TypeError(
            f"{self.name} is read-only here: keep your results in your own arrays"
        )

    def _load_whole(self) -> np.ndarray:
        self.loads += 1
        self.sizes.append(self._data.shape[0])
        self.whole = True
        return self._data.copy()

    def __array__(self, dtype=None, copy=None):
        a = self._load_whole()
        return a if dtype is None else a.astype(dtype)

    @property
    def T(self) -> np.ndarray:
        """The transpose: a load of the whole array."""
        return self._load_whole().T


class _Case(NamedTuple):
    label: str
    q: np.ndarray  # (d,) for one query, (N, d) for all
    k: np.ndarray  # (M, d)
    v: np.ndarray  # (M, dv)
    Bc: int
    causal: bool = False
    kind: str = ""  # "negative", "positive", "masked", "memory", "high first"


# lab's answers to these exercises, refused by whatever name reaches them
_COURSE = (
    "attention_reference",
    "attention_naive",
    "flash_attention_numpy",
    "attention_row_three_pass",
    "attention_row_two_pass",
    "attention_row_one_pass",
    "one_pass_attention",
    "softmax_safe",
    "softmax_online",
    "online_normalizer",
    "partial_state",
    "merge_states",
    "finalize",
    "chunk_state",
    "reduce_states",
    "merge_outputs",
    "merge_output_pair",
    "split_states",
    "flash_decoding",
)

HALF = (
    "yours agrees with the reference to about 3 significant digits, a 16-bit float's precision "
    "(float16, bfloat16), not float64's (rtol 1e-9): keep the state and the scores in float64"
)
RUNNING_MAX = (
    "m must be the running max, m' = max(m, the block's max), the largest score seen so far: with the block's own "
    "max, a block near -400 after one near +400 rescales l and acc by e^(m - m') = e^800 = inf"
)


def _scores_near(rng, level: float, M: int, d: int, dv: int, N: int | None):
    """q, k, v whose scores k_j . q / sqrt(d) lie in [level, level + 10] (first coordinate only)."""
    q = np.zeros(d if N is None else (N, d))
    q[..., 0] = 2.0 * math.sqrt(d)
    k = rng.standard_normal((M, d))
    k[:, 0] = (level + 10.0 * rng.random(M)) / 2.0
    return q, k, rng.standard_normal((M, dv))


def _high_first(rng, M: int, Bc: int, d: int, dv: int, N: int | None):
    """q, k, v whose first block of Bc keys scores near +400 and every later key near -400 (first coordinate only)."""
    q, k, v = _scores_near(rng, -405.0, M, d, dv, N)
    k[:Bc, 0] = (395.0 + 10.0 * rng.random(min(Bc, M))) / 2.0
    return q, k, v


def _fresh_row_cases(rng) -> list[_Case]:
    """Cases of the fixed kinds drawn afresh: a plain one (Bc not dividing M) and a high block before low ones."""
    d, dv = (int(x) for x in rng.integers(2, 9, 2))
    Bc = int(rng.integers(2, 8))
    M = Bc * int(rng.integers(2, 7)) + int(rng.integers(1, Bc))
    r = rng.standard_normal
    return [
        _Case(f"fresh, M = {M}, Bc = {Bc}", r(d), r((M, d)), r((M, dv)), Bc),
        _Case(
            f"fresh, a block near +400 before {M - Bc} keys near -400, Bc = {Bc}",
            *_high_first(rng, M, Bc, d, dv, None),
            Bc,
            kind="high first",
        ),
    ]


def _fresh_rows_cases(rng) -> list[_Case]:
    """Cases of the fixed kinds drawn afresh: plain, causal with N < M and N > M, a high block before low ones."""
    d, dv = (int(x) for x in rng.integers(2, 9, 2))
    Bc = int(rng.integers(2, 8))
    M = Bc * int(rng.integers(2, 6)) + int(rng.integers(1, Bc))
    N, r = int(rng.integers(2, 9)), rng.standard_normal
    few = int(rng.integers(1, 4))
    return [
        _Case(
            f"fresh, N = {N}, M = {M}, Bc = {Bc}", r((N, d)), r((M, d)), r((M, dv)), Bc
        ),
        _Case(
            f"fresh, causal, N = {N} < M = {M + N}, Bc = {Bc}",
            r((N, d)),
            r((M + N, d)),
            r((M + N, dv)),
            Bc,
            True,
        ),
        _Case(
            f"fresh, causal, N = {few + 3} > M = {few}, Bc = 2: queries 0-2 see no key",
            r((few + 3, d)),
            r((few, d)),
            r((few, dv)),
            2,
            True,
            "masked",
        ),
        _Case(
            f"fresh, a block near +400 before {M - Bc} keys near -400, N = {N}, Bc = {Bc}",
            *_high_first(rng, M, Bc, d, dv, N),
            Bc,
            kind="high first",
        ),
    ]


def _row_cases() -> list[_Case]:
    rng = np.random.default_rng(3)
    r = rng.standard_normal
    return [
        _Case("M = 10, Bc = 4", r(4), r((10, 4)), r((10, 3)), 4),
        _Case("M = 50, Bc = 7", r(8), r((50, 8)), r((50, 3)), 7),
        _Case(
            "a block near +400 before 20 keys near -400",
            *_high_first(np.random.default_rng(30), 24, 4, 4, 2, None),
            4,
            kind="high first",
        ),
        _Case("Bc = 1", r(4), r((9, 4)), r((9, 2)), 1),
        _Case("one block, Bc = 64 > M = 33", r(4), r((33, 4)), r((33, 2)), 64),
        _Case(
            "every score near +1000",
            *_scores_near(rng, 1000.0, 20, 4, 2, None),
            6,
            kind="positive",
        ),
        _Case(
            "every score near -1000",
            *_scores_near(rng, -1010.0, 20, 4, 2, None),
            6,
            kind="negative",
        ),
        _Case(
            "M = 16384, Bc = 32", r(2), r((16384, 2)), r((16384, 2)), 32, kind="memory"
        ),
    ]


def _rows_cases() -> list[_Case]:
    rng = np.random.default_rng(4)
    r = rng.standard_normal
    return [
        _Case("N = 5, M = 40, Bc = 8", r((5, 8)), r((40, 8)), r((40, 4)), 8),
        _Case("N = 13, M = 50, Bc = 7", r((13, 8)), r((50, 8)), r((50, 4)), 7),
        _Case(
            "a block near +400 before 20 keys near -400",
            *_high_first(np.random.default_rng(40), 24, 4, 4, 2, 3),
            4,
            kind="high first",
        ),
        _Case("causal, N = M = 6, Bc = 4", r((6, 4)), r((6, 4)), r((6, 3)), 4, True),
        _Case(
            "causal, N = 4 < M = 11, Bc = 3", r((4, 4)), r((11, 4)), r((11, 3)), 3, True
        ),
        _Case(
            "causal, N = 7 > M = 3, Bc = 2: queries 0-3 see no key",
            r((7, 4)),
            r((3, 4)),
            r((3, 2)),
            2,
            True,
            "masked",
        ),
        _Case(
            "every score near +1000",
            *_scores_near(rng, 1000.0, 20, 4, 2, 3),
            6,
            kind="positive",
        ),
        _Case(
            "every score near -1000",
            *_scores_near(rng, -1010.0, 20, 4, 2, 3),
            6,
            kind="negative",
        ),
        _Case(
            "causal, N = 64, M = 16384, Bc = 32",
            r((64, 4)),
            r((16384, 4)),
            r((16384, 4)),
            32,
            True,
            "memory",
        ),
    ]


def _dense(q, k, v, keep=None, scale=None, divide=True):
    """Softmax attention on the whole score matrix, o and lse; rows with no kept key give o = 0, lse = -inf.

    With `divide=False`, o is acc (the sum of e^(s_j - m) v_j, m the row's max) instead of acc / l."""
    s = (q @ k.T) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    with np.errstate(all="ignore"):
        m = s.max(axis=-1)
        m0 = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(s - m0[..., None])
        l = p.sum(axis=-1)
        if not divide:
            return p @ v, None
        o = np.where(
            l[..., None] > 0, (p @ v) / np.where(l > 0, l, 1.0)[..., None], 0.0
        )
        return o, np.where(l > 0, m0 + np.log(np.where(l > 0, l, 1.0)), -np.inf)


def _unrescaled(q, k, v, Bc):
    """o of the one-pass loop that never multiplies l and acc by alpha when the max grows (no mask)."""
    s, m = (q @ k.T) / math.sqrt(q.shape[-1]), np.full(q.shape[0], -np.inf)
    l, acc = np.zeros(q.shape[0]), np.zeros((q.shape[0], v.shape[1]))
    with np.errstate(all="ignore"):
        for j0 in range(0, k.shape[0], Bc):
            m = np.maximum(m, s[:, j0 : j0 + Bc].max(axis=1))
            p = np.exp(s[:, j0 : j0 + Bc] - m[:, None])
            l, acc = l + p.sum(axis=1), acc + p @ v[j0 : j0 + Bc]
        return acc / l[:, None]


def _block_max(q, k, v, Bc, keep=None):
    """(o, lse) of the one-pass loop whose m is each block's own max, not the running max (the classic slip)."""
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m, l = np.full(q.shape[0], -np.inf), np.zeros(q.shape[0])
    acc = np.zeros((q.shape[0], v.shape[1]))
    with np.errstate(all="ignore"):
        for j0 in range(0, k.shape[0], Bc):
            b = s[:, j0 : j0 + Bc]
            m_new = b.max(axis=1)
            alpha, p = np.exp(m - m_new), np.exp(b - m_new[:, None])
            l, acc, m = (
                alpha * l + p.sum(axis=1),
                alpha[:, None] * acc + p @ v[j0 : j0 + Bc],
                m_new,
            )
        return acc / l[:, None], m + np.log(l)


def _slipped(
    q,
    k,
    v,
    Bc,
    keep=None,
    *,
    rescale_acc=True,
    rescale_l=True,
    inverted=None,
    own=False,
):
    """o of the one-pass loop with one classic slip: acc or l not rescaled, the factor inverted
    (`inverted="raw"`, or `"guarded"` with 0 at the first block), or the block's terms against the
    block's own max with no factor to the running max (`own`)."""
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    N = q.shape[0]
    m, l, acc = np.full(N, -np.inf), np.zeros(N), np.zeros((N, v.shape[1]))
    with np.errstate(all="ignore"):
        for j0 in range(0, k.shape[0], Bc):
            b = s[:, j0 : j0 + Bc]
            m_new = np.maximum(m, b.max(axis=1))
            sh = np.where(np.isneginf(m_new), 0.0, m_new)
            alpha = np.exp(m - sh)
            if inverted == "raw":
                alpha = np.exp(sh - m)
            elif inverted == "guarded":
                alpha = np.where(np.isneginf(m), 0.0, np.exp(sh - m))
            top = b.max(axis=1)
            p = np.exp(
                b - (np.where(np.isneginf(top), 0.0, top) if own else sh)[:, None]
            )
            l = (alpha if rescale_l else 1.0) * l + p.sum(axis=1)
            acc = (alpha[:, None] if rescale_acc else 1.0) * acc + p @ v[j0 : j0 + Bc]
            m = m_new
        # a row with l = 0 saw no key (o = 0); a NaN l stays NaN, as the slip makes it
        return np.where(l[:, None] == 0, 0.0, acc / np.where(l == 0, 1.0, l)[:, None])


_SLIPS = (
    (
        {"rescale_acc": False},
        "l was rescaled when the max grew, acc was not: acc is a sum of e^(s_j - m) v_j "
        "against the same running m as l, so it needs the same correction",
    ),
    (
        {"rescale_l": False},
        "acc was rescaled when the max grew, l was not: l is a sum of e^(s_j - m) against "
        "the same running m as acc, so it needs the same correction",
    ),
    (
        {"inverted": "raw"},
        "the correction points the wrong way: moving the old sums from m to a larger m' "
        "must shrink them, a factor of at most 1 (the inverted one is inf at the first "
        "block, where m = -inf)",
    ),
    (
        {"inverted": "guarded"},
        "the correction points the wrong way: moving the old sums from m to a larger m' "
        "must shrink them, a factor of at most 1",
    ),
    (
        {"own": True},
        "the block's terms were taken against the block's own max, and added as they are: "
        "before they join l and acc they must be measured against the running max m', "
        "like the old terms",
    ),
)


def _span(rows) -> str:
    rows = [int(x) for x in rows]
    if len(rows) == 1:
        return f"row {rows[0]}"
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"rows {rows[0]}-{rows[-1]}"
    return f"{len(rows)} rows (the first, row {rows[0]})"


def _indices(what: str, idx) -> str:
    """`idx` in words: "query 3", "keys 0-5", "7 keys (0, 1, 2, 4, ...)", "no key"."""
    idx = [int(x) for x in idx]
    one, many = what.split("/")
    if not idx:
        return f"no {one}"
    if len(idx) == 1:
        return f"{one} {idx[0]}"
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"{many} {idx[0]}-{idx[-1]}"
    shown = ", ".join(map(str, idx[:5])) + (", ..." if len(idx) > 5 else "")
    return f"{len(idx)} {many} ({shown})"


def _mask_rows(N: int, M: int, keep) -> str:
    """Where a wrong causal mask `keep` differs from j <= i + M - N: the queries, and the first one's keys."""
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    right, keep = j <= i + M - N, np.broadcast_to(keep, (N, M))
    wrong = np.flatnonzero((keep != right).any(axis=1))
    if not len(wrong):
        return "the mask is right"
    q = int(wrong[0])
    seen = [_indices("key/keys", np.flatnonzero(r[q])) for r in (right, keep)]
    return f"{_indices('query/queries', wrong)} wrong: query {q} must see {seen[0]}, yours used {seen[1]}"


def _pass_problem(mem: CountingRows, Bc: int) -> str | None:
    """How a run's loads of one array break the one-pass rule (a whole or oversized load, a row read twice), or None."""
    M = mem.shape[0]
    if mem.whole:
        return (
            f"{mem.name} was used whole (all M = {M} rows in one load, as {mem.name} @ q, {mem.name}.T, "
            f"np.asarray({mem.name}) or a lab function on it do), so an array of length M was held; one pass "
            f"loads blocks of at most Bc = {Bc} rows"
        )
    big = max(mem.sizes, default=0)
    if big > Bc:
        return (
            f"{mem.name} was loaded {big} rows at once; one pass loads blocks of at most Bc = {Bc} rows, "
            f"so that nothing of length M is held"
        )
    n = int(mem.loads.max(initial=0))
    if n > 1:
        again = np.flatnonzero(mem.loads == n)
        where = "" if len(again) == M else f" ({_span(again)} of {M})"
        return f"{mem.name} was read {n} times{where}; one pass reads it once"
    return None


def _order_problem(mem: CountingRows, Bc: int) -> str | None:
    """Rows never read, or a pass in other pieces than ceil(M / Bc) blocks; None when the loads are the blocks."""
    M = mem.shape[0]
    unread = np.flatnonzero(mem.loads == 0)
    if len(unread):
        return f"{_span(unread)} of {mem.name} (of {M}) never read"
    want = -(-M // Bc)
    if len(mem.sizes) != want:
        return (
            f"{mem.name} was loaded in {len(mem.sizes)} pieces; in blocks of Bc = {Bc} rows that is {want} loads "
            f"(the last one shorter when Bc does not divide M = {M})"
        )
    return None


def _show(case: _Case) -> str:
    (M, d), dv = case.k.shape, case.v.shape[1]
    q = "q" if case.q.ndim == 1 else "Q"
    return (
        f"case ({case.label}; {q} {case.q.shape}, K ({M}, {d}), V ({M}, {dv}), Bc = {case.Bc}"
        + (", causal" if case.causal else "")
        + ")"
    )


def _hint(case: _Case, got, want, K: CountingRows, V: CountingRows) -> str:
    """One line for the classic mistake the failure points to, read from the counts, the case and the answer."""
    k = "k" if case.q.ndim == 1 else "K"
    unread = np.flatnonzero(K.loads == 0)
    if len(unread):
        return (
            f"{_span(unread)} of K never read: with M = {K.shape[0]} and Bc = {case.Bc} the last block is shorter "
            f"than Bc (range(0, M, Bc) reaches it; {k}[j0:j0 + Bc] stops at M by itself)"
        )
    lse_shape = f"of shape {np.shape(want[1])}" if np.ndim(want[1]) else "one number"
    shapes = f"o of shape {np.shape(want[0])} and lse {lse_shape}"
    try:
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError
        o, lse = np.asarray(got[0], dtype=float), np.asarray(got[1], dtype=float)
    except (TypeError, ValueError):
        return f"return a tuple (o, lse): {shapes}"
    if o.shape != np.shape(want[0]) or lse.shape != np.shape(want[1]):
        return f"return {shapes}"
    if np.allclose(o, want[0], rtol=1e-5, atol=1e-7) and np.allclose(
        lse, want[1], rtol=1e-5, atol=1e-7
    ):
        return FLOAT32
    args = (np.atleast_2d(case.q), case.k, case.v)
    N, M = args[0].shape[0], case.k.shape[0]
    keep = (
        (np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N)
        if case.causal
        else None
    )
    alt_o, alt_lse = _block_max(*args, case.Bc, keep)
    like = lambda a, b: diagnose(a, np.reshape(b, np.shape(a)), **_TOL) is None  # noqa: E731
    if case.kind == "high first" or (like(o, alt_o) and like(lse, alt_lse)):
        return RUNNING_MAX
    if case.kind == "negative":
        return (
            "every score is near -1000: a running max started at 0 stays above them all, so each e^(s - m) "
            "underflows to 0 and l = 0; start from nothing seen: m = -inf, l = 0, acc = 0"
        )
    if case.kind == "positive":
        return "scores near +1000: e^s overflows; exponentiate scores minus the running max, never the scores"
    args = (np.atleast_2d(case.q), case.k, case.v)
    N, M, d = args[0].shape[0], case.k.shape[0], case.k.shape[1]
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    o2 = np.nan_to_num(o.reshape(N, -1), nan=0.0)
    if case.kind == "masked":
        empty = np.isneginf(np.atleast_1d(want[1]))
        unmasked = _dense(*args)[0][empty]
        if np.isfinite(o2[empty]).all() and (
            np.allclose(o2[empty], case.v.mean(axis=0), rtol=1e-5)  # -1e9 + s keeps
            or np.allclose(o2[empty], unmasked, rtol=1e-5)
        ):  # s to 1e-7 only
            return (
                f"mask with -inf, not a finite number such as -1e9: queries 0-{int(empty.sum()) - 1} see no key, and "
                "with a finite value the masked scores still get weights (the largest e^0 = 1), so a query that "
                "sees no key averages the masked values instead of getting o = 0 and lse = -inf"
            )
        if np.allclose(o, want[0], **_TOL):
            return (
                f"o is right, lse is not: queries 0-{int(empty.sum()) - 1} see no key, and the log of their empty "
                "sum is lse = -inf"
            )
        return (
            f"queries 0-{int(empty.sum()) - 1} see no key: they get o = 0 and lse = -inf (the log of an empty sum), "
            "and no NaN: while a row's max is still -inf, e^(m - m') is e^(-inf + inf) = NaN and acc / l is 0 / 0, "
            "so shift by 0 while the max is -inf and divide only where l > 0"
        )
    if np.allclose(o, want[0], **_TOL):
        return (
            "o is right, lse is not: lse is the log of the whole normalizer, the sum over all j of e^(s_j), "
            "while l is measured against the max m"
        )
    keep = (j <= i + M - N) if case.causal else None
    rule = f"s_j = k_j . q / sqrt(d), the scale 1/sqrt(d) = {1 / math.sqrt(d):.4g} for d = {d} (the length of q)"
    alternatives = [
        ((_dense(*args, keep=keep, scale=c)[0]), f"yours {how}: the scores are {rule}")
        for c, how in (
            (1.0, "leaves the scores unscaled"),
            (1.0 / d, "scales the scores by 1/d"),
            (math.sqrt(d), "multiplies the scores by sqrt(d)"),
        )
    ]
    alternatives.append(
        (
            _dense(*args, keep=keep, divide=False)[0],
            "yours is acc, not acc / l: o = acc / l, one division by the normalizer after the last block",
        )
    )
    if case.causal:
        alternatives += [
            (
                _dense(*args, keep=j < i + M - N)[0],
                "yours hides the diagonal key j = i + M - N: it is "
                "visible, keep j <= i + M - N (with N = M, j <= i: a query sees its own key); "
                + _mask_rows(N, M, j < i + M - N),
            ),
            (
                _dense(*args, keep=j <= i + M - N + 1)[0],
                "yours lets each query see one key too many, j <= i + M - N + 1: the key just "
                "after the diagonal is in the future; "
                + _mask_rows(N, M, j <= i + M - N + 1),
            ),
            (
                _dense(*args, keep=j <= i)[0],
                "yours keeps keys j <= i (the mask's top-left corner); with "
                "N != M query i sees keys j <= i + M - N, so the last query sees every key; "
                + _mask_rows(N, M, j <= i),
            ),
            (
                _dense(*args, keep=j <= i + N - M)[0],
                "yours offsets the mask by N - M, the wrong way round: the queries are the last N "
                "of the M positions, so query i sees keys j <= i + M - N; "
                + _mask_rows(N, M, j <= i + N - M),
            ),
            (
                _dense(*args, keep=j % case.Bc <= i + M - N)[0],
                "yours compares the key's place inside its block (0 to Bc - 1) with the query: the "
                "mask needs the key's place in the whole row, j = j0 + its place in the block; "
                + _mask_rows(N, M, j % case.Bc <= i + M - N),
            ),
            (
                _dense(*args)[0],
                "yours ignores the mask: with causal=True query i sees keys j <= i + M - N",
            ),
        ]
    else:
        alternatives.append(
            (
                _unrescaled(*args, case.Bc),
                "when a block raises the max from m to m', what l and acc "
                "summed against m must be multiplied by e^(m - m') before the block's terms are added",
            )
        )
    for o_alt, text in alternatives:
        if np.allclose(o2, o_alt, **_TOL):
            return text
    o_raw = o.reshape(N, -1)
    for kw, text in _SLIPS:
        o_alt = _slipped(*args, case.Bc, keep, **kw)
        if o_alt.shape == o_raw.shape and np.allclose(
            o_raw, o_alt, equal_nan=True, **_TOL
        ):
            return text
    if not (np.isfinite(o).all() and np.isfinite(lse[np.isfinite(want[1])]).all()):
        return "a NaN or inf: look for e^(-inf + inf), 0 / 0 or an overflowing exponential in the first block"
    if np.allclose(o, want[0], rtol=1e-2, atol=1e-3) and np.allclose(
        lse, want[1], rtol=1e-2, atol=1e-3
    ):
        return HALF
    return (
        "go back to what the state means: after each block m is the largest score seen, l and acc the sums of "
        "e^(s_j - m) and e^(s_j - m) v_j over the keys seen; when m grows to m', both are multiplied by "
        "e^(m - m'); at the end o = acc / l and lse = m + log l"
    )


def _call(fn, case: _Case, K, V, masks: bool, called=None):
    """`fn(q, K, V, Bc)`, with `causal=` when the exercise takes a mask; warnings silenced, the verdict says what is wrong.
    With a list `called`, what the call ran of lab's answers or of torch is added to it (`_watching`)."""
    kw, q = ({"causal": case.causal} if masks else {}), case.q.copy()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if called is None:
            return fn(q, K, V, case.Bc, **kw)
        with _watching(_COURSE, numpy_only=True) as seen:
            try:
                return _settled(fn(q, K, V, case.Bc, **kw))
            finally:
                called.extend(seen)


def _run(fn, case: _Case, masks: bool):
    """The learner's answer on fresh CountingRows for K and V: (K, V, result, lab's answers or torch called), or
    (K, V, exception, ...)."""
    K, V, called = CountingRows(case.k, "K"), CountingRows(case.v, "V"), []
    try:
        return K, V, _call(fn, case, K, V, masks, called), called
    except NotImplementedError:
        raise
    except Exception as exc:  # a learner's bug: reported, the notebook goes on
        return K, V, exc, called


def _check(
    fn,
    cases,
    reference,
    limit,
    held_what,
    name: str,
    passed: str,
    masks: bool,
    seed: int | None = None,
) -> None:
    for case in cases:
        try:
            K, V, got, called = _run(fn, case, masks)
        except NotImplementedError:
            print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
            return
        if isinstance(got, Exception):
            note = ""
            if "CountingRows" in str(got) or "read-only" in str(got):
                note = (
                    " (K and V arrive as CountingRows: load a block with K[j0:j1], a numpy array; K.shape and "
                    "len(K) read nothing)"
                )
            print(
                f"{name}: ✗ {_show(case)} raised {type(got).__name__}: {got}{raised_at(got)}{note}"
            )
            print(seed_note(seed), end="")
            return
        if called:
            print(f"{name}: ✗ {_show(case)}: {_refusal(called)}")
            return
        want = reference(case)
        problem = _pass_problem(K, case.Bc) or _pass_problem(V, case.Bc)
        hint = None
        if problem is None:
            problem = sharpen(
                diagnose(got, want, names=("o", "lse"), **_TOL), got, want, ("o", "lse")
            )
            hint = problem and _hint(case, got, want, K, V)
        if problem is None:
            problem = _order_problem(K, case.Bc) or _order_problem(V, case.Bc)
        if problem is None and case.kind == "memory":
            held, _ = peak_bytes(
                _call,
                fn,
                case,
                CountingRows(case.k, "K"),
                CountingRows(case.v, "V"),
                masks,
            )
            cap = limit(case)
            if held > cap:
                problem = (
                    f"held {held:,} bytes at once, more than {held_what(case)} ({cap:,} bytes); one pass "
                    f"holds one block and the state (m, l, acc), whatever M is"
                )
                hint = (
                    "nothing as long as M may outlive its block: no list of blocks or scores, no mask or bias "
                    "for all M keys built up front; fold each block into (m, l, acc), then drop it"
                )
        if problem is not None:
            print(f"{name}: ✗ {_show(case)}: {problem}")
            if hint:
                print(f"  hint: {hint}")
            print(seed_note(seed), end="")
            return
    print(f"{name}: ✓ passed {len(cases)} cases; {passed}")


def _row_reference(case: _Case):
    o, lse = attention_reference(case.q[None, :], case.k, case.v)  # (1, dv), (1,)
    return o[0], float(lse[0])


def check_one_pass_row(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q, k, v, Bc) -> (o, lse)`, one query's attention in one pass over blocks of Bc keys; print one verdict.

    K and V arrive as `CountingRows`. Passes when o and lse match `attention_reference` (rtol 1e-9), each row of
    K and V is read exactly once in ceil(M / Bc) loads of at most Bc rows, and at M = 16384 the run holds less
    than half of an array of length M; a block near +400 before keys near -400 asks for the running max; lab's answers
    and other array libraries are refused. Fixed cases and fresh ones each run (`seed` draws the same again).
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    rng, seed = _fresh(seed)
    cases = _row_cases()
    _check(
        fn,
        cases[:-1] + _fresh_row_cases(rng) + cases[-1:],
        _row_reference,
        lambda c: 4 * c.k.shape[0],
        lambda c: f"half an array of length M = {c.k.shape[0]} in float64",
        name or getattr(fn, "__name__", "your function"),
        "K and V read once each, in blocks of Bc; nothing of length M held",
        masks=False,
        seed=seed,
    )


def _rows_reference(case: _Case):
    return attention_reference(case.q, case.k, case.v, causal=case.causal)


# The memory bound of exercise 2, "a few N × Bc tiles": 8 float64 tiles (the worked solution holds about 2) and the
# 64 KiB buffer numpy allocates for some broadcast operations. At the memory case (N = 64, M = 16384, Bc = 32)
# that is 192 KiB; an N × M/2 array of booleans is 512 KiB.
_TILES, _SCRATCH = 8, 64 * 1024


def _tiles_cap(c: _Case) -> int:
    """Bytes exercise 2 may hold at once: `_TILES` float64 tiles of N × Bc plus `_SCRATCH`."""
    return _TILES * c.q.shape[0] * c.Bc * 8 + _SCRATCH


def check_one_pass_rows(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(Q, K, V, Bc, causal=False) -> (o, lse)`, every query in one pass over blocks of Bc keys; print one verdict.

    K and V arrive as `CountingRows`; causal keeps key j for query i when j <= i + M - N, and a query with no
    key gets o = 0, lse = -inf. Passes when o and lse match `attention_reference` (rtol 1e-9), each row of K and
    V is read exactly once in ceil(M / Bc) loads, and at N = 64, M = 16384, Bc = 32 the run holds at most
    `_TILES` float64 tiles of N × Bc plus numpy's scratch (`_SCRATCH`), 192 KiB, a few tiles, whatever M is (an
    N × M/2 array of booleans, 512 KiB, fails); a block near +400 before keys near -400 asks for the running max; lab's answers and
    other array libraries are refused. Fixed cases and fresh ones each run (`seed` draws the same again).
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    rng, seed = _fresh(seed)
    cases = _rows_cases()

    def held_what(c: _Case) -> str:
        N, Bc = c.q.shape[0], c.Bc
        return f"{_TILES} float64 tiles of N × Bc ({N} × {Bc}) and {_SCRATCH // 1024} KiB of numpy scratch"

    _check(
        fn,
        cases[:-1] + _fresh_rows_cases(rng) + cases[-1:],
        _rows_reference,
        _tiles_cap,
        held_what,
        name or getattr(fn, "__name__", "your function"),
        "one pass for all queries, blocks of Bc; no NaN; never N × M held",
        masks=True,
        seed=seed,
    )


# ------------------------------------------------------------------ the normalized state (FlashAttention-1's form)
_STEP_ANSWERS = (
    "attention_reference",
    "attention_row_one_pass",
    "attention_row_two_pass",
    "attention_row_three_pass",
    "one_pass_attention",
    "merge_states",
    "partial_state",
    "finalize",
    "flash_attention_numpy",
    "softmax_safe",
    "softmax_online",
    # notebook 04's merges: the same step in other variables
    "merge_output_pair",
    "merge_outputs",
    "reduce_states",
    "chunk_state",
    "split_states",
    "flash_decoding",
)


def _seen_state(scores, values):
    """The normalized state of every key seen: $m = \\max s$, $l = \\sum e^{s - m}$, $o = \\sum e^{s - m} v / l$."""
    m = scores.max()
    p = np.exp(scores - m)
    return m, p.sum(), p @ values / p.sum()


def _step_blocks(rng) -> list:
    """Blocks of (s_b, v_b) for one query: the classic cases, then fresh ones."""
    dv = int(rng.integers(2, 6))
    cases = []
    for shift, n_blocks in ((0.0, 5), (1000.0, 4), (-1000.0, 4)):
        sizes = rng.integers(2, 9, n_blocks)  # two keys or more: l > 1 after a block
        s = [shift + 2 * rng.standard_normal(n) for n in sizes]
        s[1] = (
            s[1] + 6.0
        )  # a larger max in the second block: the state must be rescaled
        cases.append([(x, rng.standard_normal((len(x), dv))) for x in s])
    low_later = [
        np.array([3.0, 1.0]),
        np.array([-2.0, -5.0, 0.5]),
    ]  # max first, then lower
    cases.append([(x, rng.standard_normal((len(x), dv))) for x in low_later])
    return cases


def _step_problem(got, want) -> str | None:
    for name, g, w in zip(("m'", "l'", "o'"), got, want):
        problem = diagnose(np.asarray(g, dtype=float), w, **_TOL)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def _same_state(got, wrong) -> bool:
    """`got` equals the state `wrong` component by component, NaN and inf included."""
    try:
        return all(
            np.allclose(np.asarray(g, float), np.asarray(w, float), equal_nan=True)
            for g, w in zip(got, wrong, strict=True)
        )
    except (TypeError, ValueError):
        return False


def _stepped(
    m, l, o, s, v, *, m_new=None, rescale=True, weigh=True, divide="new", shift=True
):
    """One normalized step with a choice of classic mistakes (the checks' own, for the hints):
    `rescale="inverted"` uses e^(m' - m), `shift=False` exponentiates the scores with no max."""
    m_new = max(m, s.max()) if m_new is None else m_new
    if (
        not shift
    ):  # l = Σ e^s, no max anywhere; o, an average, is unchanged by the shift
        p = np.exp(s)
        l_new = l + p.sum()
        return m_new, l_new, (l * o + p @ v) / l_new
    alpha = {True: np.exp(m - m_new), False: 1.0, "inverted": np.exp(m_new - m)}[
        rescale
    ]
    p = np.exp(s - m_new)
    l_new = alpha * l + p.sum()
    total = alpha * (l if weigh else 1.0) * o + p @ v
    by = {"new": l_new, "old": l if l > 0 else l_new, "none": 1.0}[divide]
    return m_new, l_new, total / by


def _split_step(m, l, o, s, v, *, unrescaled=False):
    """Two slips of the divided form: $o' = \\alpha o + \\sum e^{s_b - m'} v / l'$ (the old average kept at
    weight α), or, with `unrescaled`, the right sum divided by $l + \\sum e^{s_b - m'}$, an $l'$ without α."""
    m_new = max(m, s.max())
    alpha, p = np.exp(m - m_new), np.exp(s - m_new)
    l_new = alpha * l + p.sum()
    if unrescaled:
        return m_new, l_new, (alpha * l * o + p @ v) / (l + p.sum())
    return m_new, l_new, alpha * o + p @ v / l_new


def _mean_step(m, l, o, s, v, *, on_l=False):
    """One block's step with the block's terms averaged (`.mean`) instead of summed: in o's new
    terms, and in l's too when `on_l`."""
    m_new = max(m, s.max())
    alpha, p = np.exp(m - m_new), np.exp(s - m_new)
    l_new = alpha * l + (p.mean() if on_l else p.sum())
    return m_new, l_new, (alpha * l * o + (p[:, None] * v).mean(axis=0)) / l_new


_MEAN = (
    "the block's terms are averaged (.mean), not summed: o' = (α·l·o + Σ_j e^(s_j - m') v_j) / l', "
    "the block's B_c terms added up, p @ v_b; a mean divides them by B_c"
)

_STEP_MISTAKES = (
    (_mean_step, _MEAN),
    (
        _split_step,
        "o' = α·o + (the block's Σ e^(s_b - m') v) / l' keeps the old average at weight α, but in "
        "the new average the old keys weigh α·l / l': o' = (α·l·o + Σ e^(s_b - m') v) / l'",
    ),
    (
        lambda m, l, o, s, v: _split_step(m, l, o, s, v, unrescaled=True),
        "o' was divided by l + Σ e^(s_b - m'), an l' whose old l was not rescaled by α: divide by "
        "the l' you return, α·l + Σ e^(s_b - m')",
    ),
    (lambda m, l, o, s, v: _mean_step(m, l, o, s, v, on_l=True), _MEAN),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, rescale="inverted"),
        "α is inverted: e^(m' - m) >= 1 grows the old terms (and is inf at the first block, "
        "where m = -inf, which makes NaN); moving the old terms to the larger m' shrinks "
        "them: α = e^(m - m') <= 1",
    ),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, shift=False),
        "that l' is Σ e^s with no max subtracted: the state's l is Σ e^(s - m) against the "
        "running max (near +1000, e^s overflows); rescale the old l by α = e^(m - m') and "
        "add e^(s_b - m')",
    ),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, weigh=False, divide="none"),
        "that is acc, the unnormalized sum: the state here keeps o = acc / l, so "
        "divide by l' after every block (and undo the division by l before adding)",
    ),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, divide="old"),
        "divided by the old l: o' is an average over every key seen, including the "
        "block's, so divide by l'",
    ),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, weigh=False),
        "the old o was divided by l already: rescaled by α alone it weighs 1, not "
        "l·α; multiply it by l·α before adding the block's sum, then divide by l'",
    ),
    (
        lambda m, l, o, s, v: (
            max(m, s.max()),
            np.exp(m - max(m, s.max())) * l + np.exp(s - max(m, s.max())).sum(),
            o + np.exp(s - max(m, s.max())) @ v,
        ),
        "o' is not an average any more: that adds the block's weighted values to o "
        "without re-weighting; o' = (the old sum, rescaled, + the block's sum) / l'",
    ),
    (
        lambda m, l, o, s, v: _half_rescaled(m, l, o, s, v, on="o"),
        "α was forgotten on l: l' = l + Σ e^(s_b - m') adds terms against m' to an old l "
        "still taken against m; l' = α·l + Σ e^(s_b - m'), with the same α as the old l·o",
    ),
    (
        lambda m, l, o, s, v: _half_rescaled(m, l, o, s, v, on="l"),
        "α was forgotten on o: the old sum l·o is still taken against m; multiply it by "
        "α = e^(m - m') before adding the block's Σ e^(s_b - m') v, as you did for l",
    ),
    (
        lambda m, l, o, s, v: _block_divided(m, l, o, s, v, average=False),
        "o' was divided by the block's own sum Σ e^(s_b - m'), not by l': o' averages over "
        "every key seen, so divide by l' = α·l + Σ e^(s_b - m')",
    ),
    (
        lambda m, l, o, s, v: _block_divided(m, l, o, s, v, average=True),
        "the block's sum was divided by its own Σ e^(s_b - m') and added as an average: "
        "that weighs the block as much as all the old keys together; add the block's "
        "unnormalized Σ e^(s_b - m') v to α·l·o, then divide the total once by l'",
    ),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, rescale=False),
        "l and o were taken against the old max m: when the block raises the max "
        "to m', multiply the old terms by α = e^(m - m')",
    ),
    (
        lambda m, l, o, s, v: _stepped(m, l, o, s, v, m_new=s.max()),
        "m' is the block's max: it must be the max of every score seen, max(m, max s_b)",
    ),
    (
        lambda m, l, o, s, v: _block_terms(m, l, o, s, v),
        "the block's terms were taken against the block's own max: every term of l and "
        "of l·o must be e^(s_j - m') with one m', the max of everything seen",
    ),
)


def _half_rescaled(m, l, o, s, v, *, on: str):
    """The normalized step with α applied to one of the two old sums only: `on="o"` leaves l' = l + Σ p
    (α forgotten on l), `on="l"` leaves the old l·o unscaled (α forgotten on o)."""
    m_new = max(m, s.max())
    alpha, p = np.exp(m - m_new), np.exp(s - m_new)
    l_new = (alpha if on == "l" else 1.0) * l + p.sum()
    total = (alpha if on == "o" else 1.0) * l * o + p @ v
    return m_new, l_new, total / l_new


def _block_divided(m, l, o, s, v, *, average: bool):
    """The normalized step divided by the block's own sum Σ p: the whole of o' (`average=False`), or the
    block's sum alone, its average added to the old o (`average=True`)."""
    m_new = max(m, s.max())
    alpha, p = np.exp(m - m_new), np.exp(s - m_new)
    l_new = alpha * l + p.sum()
    if average:
        return m_new, l_new, alpha * l * o / l_new + p @ v / p.sum()
    return m_new, l_new, (alpha * l * o + p @ v) / p.sum()


def _block_terms(m, l, o, s, v):
    """The normalized step whose new terms are e^(s_j - max s_b), not e^(s_j - m')."""
    m_new = max(m, s.max())
    alpha, p = np.exp(m - m_new), np.exp(s - s.max())
    l_new = alpha * l + p.sum()
    return m_new, l_new, (alpha * l * o + p @ v) / l_new


def _step_hint(got, state) -> str:
    """The hint of the mistake in `_STEP_MISTAKES` that `got` equals: one equal to the check's own
    tolerance first, then one equal to `np.allclose` (NaN and inf matching), so two mistakes that
    agree to 1e-5 on this block (a small α·l) are told apart by the tighter match."""
    with np.errstate(all="ignore"):
        wrongs = [(wrong(*state), text) for wrong, text in _STEP_MISTAKES]
    for matches in (_step_problem, lambda g, w: None if _same_state(g, w) else "no"):
        with np.errstate(all="ignore"):
            found = next((t for w, t in wrongs if matches(got, w) is None), None)
        if found is not None:
            return found
    return "from the meaning of the state: rescale the old sums to m', add the block's, divide by l'"


def check_normalized_step(fn, *, seed: int | None = None) -> None:
    """Check `fn(m, l, o, s_b, v_b) -> (m', l', o')`, one block's update of the state with $o$ kept
    normalized: after every block, $m = \\max s$, $l = \\sum e^{s - m}$ and $o = \\sum e^{s - m} v / l$
    over the keys seen so far. The check runs the loop itself from the empty state
    $(-\\infty, 0, 0)$ and compares each step with the definition; blocks near +1000 and -1000, a
    larger max in the second block, and fresh cases each run (`seed` draws the same again).
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    rng, seed = _fresh(seed)
    name = getattr(fn, "__name__", "your function")
    cases = _step_blocks(rng)
    for i, blocks in enumerate(cases):
        dv = blocks[0][1].shape[1]
        m, l, o = -np.inf, 0.0, np.zeros(dv)
        for b, (s_b, v_b) in enumerate(blocks):
            args = (m, l, o.copy(), s_b.copy(), v_b.copy())
            where = (
                f"case {i}, block {b} (scores near {s_b.mean():.0f}, {len(s_b)} keys)"
            )
            try:
                with _watching(_STEP_ANSWERS, numpy_only=True) as called:
                    got = _settled(fn(*args))
            except NotImplementedError:
                print(
                    f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
                )
                return
            except Exception as exc:
                print(
                    f"{name}: ✗ {where} raised {type(exc).__name__}: {exc}{raised_at(exc)}"
                )
                print(seed_note(seed), end="")
                return
            seen_s = np.concatenate([x for x, _ in blocks[: b + 1]])
            seen_v = np.concatenate([y for _, y in blocks[: b + 1]])
            want = _seen_state(seen_s, seen_v)
            problem = _refusal(called) if called else None
            if problem is None and not (isinstance(got, tuple) and len(got) == 3):
                problem = "it must return the new state as a tuple (m', l', o')"
            if problem is None and not all(
                np.array_equal(a, c) for a, c in zip(args[2:], (o, s_b, v_b))
            ):
                problem = "it changes its input in place: return a new state instead"
            hint = None
            if problem is None:
                problem = _step_problem(got, want)
                if problem is not None:
                    hint = _step_hint(got, (m, l, o, s_b, v_b))
                    kept = np.asarray(got[0], dtype=float)
                    if kept.shape == () and kept == m and want[0] > m:
                        hint = (
                            "m' is still the old m, though this block holds a larger score: "
                            "m' = max(m, max s_b), and l and o are re-expressed against it"
                        )
                    elif (
                        kept.shape == () and kept != want[0] and hint.startswith("from")
                    ):
                        hint = (
                            f"m' is {float(kept):.6g}, but the largest score seen so far is "
                            f"{float(want[0]):.6g}: the state's m is the max of every score "
                            "seen, and l and o are measured against it"
                        )
                    elif b == 0 and hint.startswith("from"):
                        hint = (
                            "the first block starts from m = -inf, l = 0, o = 0: α = e^(m - m') "
                            "is 0 there (and at most 1 after), so l·o = 0 stays 0, no NaN"
                        )
            if problem is not None:
                print(f"{name}: ✗ {where}: {problem}")
                if hint:
                    print(f"  hint: {hint}")
                print(seed_note(seed), end="")
                return
            m, l, o = (float(got[0]), float(got[1]), np.asarray(got[2], dtype=float))
    problem = _handed_over(fn, rng, dv=cases[-1][0][1].shape[1])
    if problem is not None:
        print(f"{name}: ✗ {problem}")
        print(seed_note(seed), end="")
        return
    n = sum(len(b) for b in cases)
    print(
        f"{name}: ✓ passed {len(cases)} cases, {n} blocks; o an average after every block"
    )


def _handed_over(fn, rng, dv: int) -> str | None:
    """None when `fn` continues a state it did not build: (m, l, o) of keys it never saw, then one block.
    A step that keeps the scores of its earlier calls (a closure, a global) answers for those instead."""
    s_old, v_old = 1.5 * rng.standard_normal(7), rng.standard_normal((7, dv))
    s_b, v_b = 1.5 * rng.standard_normal(4) + 1.0, rng.standard_normal((4, dv))
    m, l, o = _seen_state(s_old, v_old)
    given = (
        "given a state it did not build, (m, l, o) of 7 keys it never saw, and a block of 4, "
        "your step"
    )
    rule = (
        "the step may use only (m, l, o) and the new block (a closure or a global that keeps "
        "earlier calls' scores answers for those)"
    )
    try:
        with np.errstate(all="ignore"):
            got = _settled(fn(float(m), float(l), np.array(o), s_b.copy(), v_b.copy()))
    except Exception as exc:  # noqa: BLE001 - a learner's bug: report it
        return f"{given} raised {type(exc).__name__}: {exc}; {rule}"
    want = _seen_state(np.r_[s_old, s_b], np.r_[v_old, v_b])
    if isinstance(got, tuple) and len(got) == 3 and _step_problem(got, want) is None:
        return None
    return f"{given} does not return the state of all 11: {rule}"


def _rescales(n_blocks):
    """Expected rescales after block 0 over `n_blocks` i.i.d. blocks: $\\sum_{b=1}^{n-1} 1/(b+1)$."""
    return sum(1 / (b + 1) for b in range(1, n_blocks))


def check_expected_rescales(fn, *, seed: int | None = None) -> None:
    """Check `fn(n_blocks)`, the expected number of blocks after the first that raise the running max
    when the scores are independent and identically distributed: block b holds the largest score of
    blocks 0..b with probability 1/(b + 1), so $\\sum_{b=1}^{n-1} 1/(b+1)$; four fixed cases and three
    drawn afresh each run (`seed` draws the same again). Taught in: notebooks/03_one_pass_attention.ipynb"""
    rng, seed = _fresh(seed)
    cases = [(1,), (2,), (16,), (256,)] + [(int(n),) for n in rng.integers(3, 2000, 3)]
    mistakes = [
        (
            lambda n: _rescales(n) + 1,
            "that counts block 0 too: it sets the first max, there is nothing to rescale yet",
        ),
        (
            lambda n: sum(1 / b for b in range(1, n)),
            "block b is the (b + 1)-th block: it holds the largest of b + 1 blocks with "
            "probability 1/(b + 1), not 1/b",
        ),
        (
            lambda n: n - 1,
            "that is every block after the first: the worst row, not random data",
        ),
        (
            lambda n: math.log(n),
            "log n is how it grows, not its value: add the chances block by block",
        ),
        (
            lambda n: _rescales(n + 1),
            "one block too many at the end: with n blocks numbered 0 to n - 1, the last "
            "one that can rescale is block n - 1",
        ),
        (
            lambda n: _rescales(n - 1) if n > 1 else 0.0,
            "one block too few at the end: the last block, n - 1, can raise the max too",
        ),
        (
            lambda n: (n - 1) / 2,
            "(n - 1)/2 gives each block a chance of 1/2: that is beating the one block "
            "before it; to raise the running max a block must beat every block before it",
        ),
    ]
    guarded = _guarded(fn, "expected_rescales")
    check(
        guarded,
        _rescales,
        cases,
        rtol=1e-9,
        atol=1e-12,
        seed=seed,
        properties=[_own_work()],
        hint=_mistake_hint(
            mistakes,
            "add, over the blocks after the first, the chance that a block holds the largest "
            "score seen so far",
            fn=guarded,
            cases=cases,
        ),
    )


_KNOWN_MAX_KEYS = (
    "state with m known",
    "alpha at every block",
    "passes over K, m found first",
    "exponentials saved, Bc = 16",
)


def _names(got) -> set | None:
    """The names in `got`: a string such as "l, acc", or a tuple, list or set of strings; None otherwise."""
    if isinstance(got, str):
        got = re.split(r"[\s,()]+", got)
    if not isinstance(got, (tuple, list, set, frozenset)):
        return None
    return {str(n).strip().lower().replace("α", "alpha") for n in got} - {""}


def _state_hint(got) -> str | None:
    """None when `got` names the state (l, acc), else what is wrong with it."""
    names = _names(got)
    if names is None:
        return 'name the loop\'s variables, as a string ("x, y") or a tuple of strings'
    if names == {"l", "acc"}:
        return None
    if "m" in names:
        return "m is known before the pass: it is a constant the loop reads, not state it updates"
    if "alpha" in names:
        return "α = e^(m - m') is not state: it is a factor computed at each step, and with m known it is gone"
    if "o" in names:
        return "o = acc / l is computed once after the last block: the loop carries acc and l"
    if names == {"acc"}:
        return "acc alone cannot give o = acc / l: the loop must still sum l"
    if names == {"l"}:
        return "l is only the normalizer: the output needs the weighted sum acc as well"
    return "the loop still adds each block's e^(s_j - m) and e^(s_j - m) v_j: which sums are those?"


def _number(x) -> float | None:
    """`x` as a float when it is a real number (a bool or a string is not), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    return float(x)


def check_known_max(fn) -> None:
    """Check exercise 4's answers, `fn() -> dict`: the state left when the max m is known before the pass
    ((l, acc)), α at every block then (1), the passes over K when m is first found by a pass of its own (2:
    section 2's two-pass method), and the exponentials the oracle saves over the 256 blocks of M = 4096 keys
    at Bc = 16 (256: one α a block). Numbers must be numbers, not strings. One line per answer, ✓ or ✗ with
    the mistake named; the right value is not printed.
    Taught in: notebooks/03_one_pass_attention.ipynb"""
    name = getattr(fn, "__name__", "known_max_answers")
    try:
        got = fn()
    except NotImplementedError:
        print(
            f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
        )
        return
    if not isinstance(got, dict):
        print(
            f"{name}: ✗ return a dict with the keys {', '.join(map(repr, _KNOWN_MAX_KEYS))}"
        )
        return
    missing = [k for k in _KNOWN_MAX_KEYS if k not in got or got[k] is Ellipsis]
    if missing:
        print(f"{name}: not answered yet: {', '.join(map(repr, missing))}")
        return
    M, Bc = 4096, 16
    n_blocks = M // Bc
    NOT_A_NUMBER = "give a number (an int or a float), not a string or a bool"

    def alpha_hint(x):
        a = _number(x)
        if a is None:
            return NOT_A_NUMBER
        if a == 1:
            return None
        if a == 0:
            return "0 is α at block 0 of the loop that does not know m (e^(-inf)); with m known, m' = m always"
        return "α = e^(m - m'): with m known from the start, m' = m at every block"

    def passes_hint(x):
        p = _number(x)
        if p is None:
            return NOT_A_NUMBER
        if p == 2:
            return None
        if p == 1:
            return (
                "m is the max over all M scores: the first block's terms e^(s_j - m) need it, so "
                "every key is read once before the oracle's loop can start"
            )
        if p == 3:
            return (
                "that is section 1's method, which stores the row s and reads it back; here "
                "nothing is stored: K is read once for m, then again for the sums"
            )
        if p == 0:
            return "m = max_j s_j needs every score, and every score needs its key"
        return (
            "one pass finds m; how many more does the oracle's loop then need over K?"
        )

    def saved_hint(x):
        c = _number(x)
        if c is None:
            return NOT_A_NUMBER
        if c != int(c):
            return "a count is a whole number: exponentials evaluated"
        if c == n_blocks:
            return None
        if c == n_blocks - 1:
            return "block 0 evaluates α too (e^(-inf) = 0): the loop computes one α at every block"
        if c == M // 256:
            return "that is for Bc = 256 (16 blocks); Bc = 16 makes 256 blocks"
        if c >= M:
            return (
                "each key's e^(s_j - m) is still needed with m known: only the α's go"
            )
        if c == 0:
            return "with m known α is 1 and is not computed: each block saves one exponential"
        return "the loop evaluates the M keys' terms plus one α a block: which of these go?"

    hints = (_state_hint, alpha_hint, passes_hint, saved_hint)
    right = 0
    for key, hint in zip(_KNOWN_MAX_KEYS, hints):
        why = hint(got[key])
        right += why is None
        print(f"{key:>28}: " + ("✓" if why is None else f"✗ hint: {why}"))
    print(f"{name}: {'✓' if right == 4 else '✗'} {right} of 4 right")
