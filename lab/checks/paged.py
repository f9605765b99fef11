"""Checks for notebook 10's paged cache: a token appended to it, decoding through a block table, and one sequence
gathered through it.

- `check_append_token(fn)` : one token of one sequence appended in place to a pool of pages: a page taken from the
  free list exactly when the sequence's last page is full (or it has none) and recorded in its block-table row,
  the token's k and v written in the slot of position `length`, the length grown by one, nothing else touched.
- `check_paged_decode(fn)` : one decoding step of one sequence read page by page through its block-table row,
  with the running (m, l, acc) of notebook 02: exact against contiguous decoding, stale slots of the last page
  masked, pages looked up in the table, scores in the thousands, the max rising page by page, and a long
  sequence decoded while holding far less than its K and V (no contiguous copy, no row of all M scores).
- `check_gather_pages(fn)` : one sequence's contiguous `(Hkv, length, d)` keys read through its block-table row, on
  scattered pages, partial and full last pages, a one-token sequence; then a decode through it against contiguous
  decoding. Prints one line on a pass, else what is wrong, where, and a hint.

Taught in: notebooks/10_gqa_and_paging.ipynb
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from ..attention import attention_reference
from ..decoding import PagedCache, gather_pages, paged_kv
from ..exercises import check, diagnose
from ..memory import peak_bytes
from ._seeded import noting_seed
from ._support import _fresh, _own_work, _refusal, _watching

__all__ = ["check_append_token", "check_paged_decode", "check_gather_pages"]

RTOL, ATOL = 1e-9, 1e-12
F32_RTOL, F32_ATOL = (
    1e-4,
    1e-5,
)  # an answer computed in float32 is held to float32's precision


def _f32_rtol(q, k) -> float:
    """float32's tolerance for a case: `F32_RTOL`, or more where scores are large. A score s rounded to float32 is
    off by up to |s|·2⁻²⁴, and e^(s - m) by that relative amount; |s| <= max‖q‖·max‖k‖/√d."""
    d = q.shape[-1]
    bound = (
        np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max() / np.sqrt(d)
    )
    return max(F32_RTOL, 8 * float(bound) * 2.0**-24)


def _float32(got) -> bool:
    """Whether the answer (o, lse) came back in float32 (either part)."""
    try:
        return any(np.asarray(x).dtype == np.float32 for x in got)
    except (TypeError, ValueError):
        return False


def _allowed(q, pages_k, pages_v) -> int:
    """What a correct page-at-a-time decode may hold: 4 pages of K and V repeated for the G query heads of
    each K/V head, plus the running (m, l, acc) and one page of scores, in float64."""
    Hq, N, _ = q.shape
    _, Hkv, S, d = pages_k.shape
    dv = pages_v.shape[3]
    G = Hq // Hkv
    pages = 4 * G * Hkv * S * (d + dv) * 8
    state = Hq * N * (dv + 2 + 2 * S) * 8
    return pages + state


def _paged_cases(seed: int = 10):
    """(pages, block_row, length) of four sequences sharing one pool of scattered pages of 8 tokens (2 K/V heads, d = 4)."""
    rng, lengths = (
        np.random.default_rng(seed),
        [21, 16, 1, 40],
    )  # partial last page, a full one, one token, five pages
    k = [rng.standard_normal((2, L, 4)) for L in lengths]
    c = paged_kv(k, k, page_size=8, seed=seed + 4, spare_pages=3)
    return c, k, [(c.pages_k, c.block_table[b], L) for b, L in enumerate(lengths)]


def _gather_hint(case, got, want):
    (pages, _, length), shape = case, np.shape(got)
    if shape == want.shape and np.array_equal(
        got, want
    ):  # right, refused for another reason
        return None
    S, n = pages.shape[2], -(-length // pages.shape[2])
    if len(shape) == 3 and shape[:1] == want.shape[:1] and shape[1] != length:
        if shape[1] == n * S:  # every slot of the last page kept
            return (
                f"you kept every slot of the last page: it holds {length - (n - 1) * S} of its {S} slots; the rest "
                "is stale data of an earlier sequence. Cut the result at `length`"
            )
        if shape[1] == (length // S) * S:
            return f"you read {length // S} blocks: a last page only partly full is still a block; use ⌈length / page_size⌉"
        return f"the sequence has {length} tokens in ⌈{length} / {S}⌉ = {n} blocks"
    logical = np.concatenate([pages[i] for i in range(n)], axis=1)[:, :length]
    if shape == logical.shape and np.allclose(got, logical):
        return (
            "you read page i for logical block i: the block table maps logical block i to physical page "
            "block_row[i], and the pages of a sequence lie anywhere in the pool"
        )
    return "logical block i of the sequence is physical page block_row[i]; keys j of block i are slots j - i·page_size"


def check_gather_pages(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(pages, block_row, length)` -> the contiguous `(Hkv, length, d)` keys of one sequence; print one verdict.

    Four sequences of 21, 16, 1 and 40 tokens on scattered pages of 8 (partial, full and one-token last pages), against
    `lab.gather_pages`, then one decoding step through `fn` against contiguous decoding. Hints for the partial last
    page dropped, the stale slots of the last page kept, logical instead of physical page numbers; running
    `lab.gather_pages` or `lab.decode_paged` (by any name) is refused. The keys and the pages they land on are
    drawn afresh on each run (`seed` draws the same again).
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    _, seed = _fresh(seed)
    with noting_seed(seed):
        _gather_cases(fn, name or getattr(fn, "__name__", "gather_pages"), seed)


def _gather_cases(fn, name, seed) -> None:
    _, k, cases = _paged_cases(seed)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        check(
            fn,
            gather_pages,
            cases,
            name=name,
            rtol=0,
            atol=0,
            hint=_gather_hint,
            properties=(_own_work("gather_pages", "decode_paged"),),
        )
    if "✓" not in out.getvalue():
        return print(out.getvalue(), end="")
    q = np.random.default_rng(seed + 1).standard_normal(
        (6, 1, 4)
    )  # 6 query heads on 2 K/V heads, one new token
    for b, (pages, row, length) in enumerate(cases):
        keys = fn(pages, row, length)
        if not np.allclose(
            attention_reference(q, keys, keys)[0],
            attention_reference(q, k[b], k[b])[0],
            RTOL,
            ATOL,
        ):
            return print(
                f"{name}: ✗ sequence {b}: decoding through your gather differs from contiguous decoding\n"
                "  hint: the keys must come back in the order of their positions in the sequence"
            )
    print(
        f"{name}: ✓ passed {len(cases)} sequences on scattered pages (partial, full and one-token last pages), "
        "and decoding through it equals contiguous decoding"
    )


# ------------------------------------------------------------------------------------ the build: paged_decode


def _pool(rng, lengths, Hq, Hkv, d, dv, S, scale=1.0, rising=False, falling=False):
    """A pool holding `lengths` sequences on scattered pages (2 spare), the new tokens' q of sequence 0, and its K, V."""
    k = [rng.standard_normal((Hkv, L, d)) * scale for L in lengths]
    v = [rng.standard_normal((Hkv, L, dv)) for L in lengths]
    page = np.arange(lengths[0]) // S
    if rising:  # the keys of each later page score higher: the running max moves up page by page
        k[0] = k[0] * (1 + page)[None, :, None]
    if falling:  # each later page scores far lower: a page's own max lies hundreds below the running one
        k[0] = k[0] * (1 + page.max() - page)[None, :, None]
    c = paged_kv(k, v, page_size=S, seed=int(rng.integers(1 << 30)), spare_pages=2)
    return c, k[0], v[0]


def _decode_cases(seed: int):
    """(label, q, pages_k, pages_v, block_row, length, k, v): sequence 0 of a pool shared with others."""
    rng, out = np.random.default_rng(seed), []
    for label, lengths, Hq, Hkv, N, S, kw in (
        ("a partial last page", [21, 40, 9], 4, 2, 1, 8, {}),
        ("a full last page", [16, 5, 30], 4, 2, 1, 8, {}),
        ("one token", [1, 24], 6, 3, 1, 8, {}),
        ("3 new tokens, 4 query heads per K/V head", [37, 12, 50], 8, 2, 3, 8, {}),
        ("scores in the thousands", [29, 17], 4, 2, 1, 8, dict(scale=30.0)),
        ("the max rises page by page", [45, 20], 4, 2, 1, 8, dict(rising=True)),
        (
            "the max falls page by page, by hundreds",
            [33, 20],
            4,
            2,
            1,
            8,
            dict(scale=30.0, falling=True),
        ),
        ("16 query heads on 1 K/V head, 16,000 tokens", [16000, 100], 16, 1, 1, 16, {}),
    ):
        d = dv = 16 if lengths[0] > 1000 else 8  # the long case: wider heads
        c, k, v = _pool(rng, lengths, Hq, Hkv, d, dv, S, **kw)
        q = rng.standard_normal((Hq, N, d)) * kw.get("scale", 1.0)  # (Hq, N, d)
        out.append(
            (label, q, c.pages_k, c.pages_v, c.block_table[0], int(lengths[0]), k, v)
        )
    return out


def _loop(
    q,
    pages_k,
    pages_v,
    order,
    length,
    *,
    alpha=True,
    mask=True,
    lse_m=True,
    carry=True,
    shift=0,
    rescale="both",
    own_max=False,
):
    """The running (m, l, acc) over `order` (physical pages, in the order read); variants for the hints
    (`carry=False`: each page's terms taken against that page's own max, never rescaled; `shift`: the last
    page's valid slots off by that many; `rescale`: "both", "l" (acc never rescaled), "inverted" (NaN
    from the first page on) or "inverted, first page guarded" (finite, and wrong once the max rises);
    `own_max`: m set to each page's own max and the state rescaled by e^(m_old - m_new), above 1 when a
    page scores lower than an earlier one: exact in real numbers, inf once the scores differ by hundreds)."""
    Hq, N, d = q.shape
    Hkv, S, dv = pages_k.shape[1], pages_k.shape[2], pages_v.shape[3]
    qg = q.reshape(Hkv, Hq // Hkv * N, d)
    m = np.full(qg.shape[:2], -np.inf)
    l, acc = np.zeros(qg.shape[:2]), np.zeros(qg.shape[:2] + (dv,))
    for i, page in enumerate(order):
        valid = (
            min(S, length - i * S + (shift if i == len(order) - 1 else 0))
            if mask
            else S
        )
        if valid <= 0:
            continue
        s = qg @ np.swapaxes(pages_k[page, :, :valid], -1, -2) / np.sqrt(d)
        own = own_max or not carry  # the page's own max, not the running one
        m_new = s.max(axis=-1) if own else np.maximum(m, s.max(axis=-1))
        a = np.exp(m - m_new) if alpha and carry else np.ones_like(m)
        if rescale == "inverted":
            a = np.exp(m_new - m)  # e^(+inf) on the first page: NaN follows
        if rescale == "inverted, first page guarded":  # finite: l = acc = 0 there
            a = np.where(np.isfinite(m), np.exp(m_new - m), 0.0)
        p = np.exp(s - m_new[..., None])
        a_acc = np.ones_like(a) if rescale == "l" else a
        l, acc, m = (
            a * l + p.sum(-1),
            a_acc[..., None] * acc + p @ pages_v[page, :, :valid],
            m_new,
        )
    lse = (m if lse_m else 0) + np.log(l)
    return (acc / l[..., None]).reshape(Hq, N, dv), lse.reshape(Hq, N)


def _matches(got, want, tol) -> bool:
    """Whether the answer equals a planted mistake's, NaN where it has NaN."""
    try:
        return all(
            np.shape(g) == np.shape(w)
            and np.allclose(np.asarray(g, float), w, tol[0], tol[1], equal_nan=True)
            for g, w in zip(got, want, strict=True)
        )
    except (TypeError, ValueError):
        return False


def _base2(q, k, v):
    """m + log2 l: the running max in natural units, the sum's log in base 2."""
    s = np.einsum(
        "hnd,hmd->hnm", q, np.repeat(k, q.shape[0] // k.shape[0], 0)
    ) / np.sqrt(q.shape[2])
    m = s.max(-1)
    return m + np.log2(np.exp(s - m[..., None]).sum(-1))


def _first_row(q, k, v):
    """The first new query's answer, given to all N."""
    o, lse = attention_reference(q[:, :1], k, v)
    N = q.shape[1]
    return np.repeat(o, N, axis=1), np.repeat(lse, N, axis=1)


def _paged_hint(case, got, loose=False):
    """The first planted mistake whose answer equals `got`, in words; else a general pointer."""
    label, q, pk, pv, row, length, k, v = case
    S = pk.shape[2]
    try:
        bad = any(not np.isfinite(np.asarray(x, dtype=float)).all() for x in got)
    except (TypeError, ValueError):
        bad = False
    n = -(-length // S)
    used = [int(p) for p in row[:n]]
    tol = (1e-3, 1e-4) if loose else (1e-7, 1e-10)
    with np.errstate(all="ignore"):
        own = _loop(q, pk, pv, used, length, own_max=True)
    if _matches(got, own, tol) and not _matches(got, attention_reference(q, k, v), tol):
        return (
            "m is the page's own max, not the running one: when a page scores lower than an earlier "
            "one, α = e^(m_old - m_new) is above 1, and with scores hundreds apart it overflows to inf "
            "(float64 stops at e^709.8). Keep m_new = max(m_old, the page's max), so that α ≤ 1"
        )
    if bad and "thousands" in label:
        return (
            "e^s overflows for scores in the thousands (float64 stops at e^709.8): subtract the running "
            "max before exponentiating, and rescale what was summed when the max rises"
        )
    partial = length % S
    o_ref, lse_ref = attention_reference(q, k, v)
    with np.errstate(all="ignore"):
        known = [
            (
                _loop(q, pk, pv, used, length, shift=1),
                f"your mask keeps one slot too many: the last page holds {length - (n - 1) * S} valid "
                f"slots, positions (n - 1)·page_size .. length - 1; slot length - (n - 1)·page_size is stale",
            ),
            (
                _loop(q, pk, pv, used, length, shift=-1),
                f"your mask drops the last valid token: the last page holds {length - (n - 1) * S} valid "
                "slots, up to and including position length - 1",
            ),
        ]
        if partial:
            known.append(
                (
                    _loop(q, pk, pv, used[:-1], length),
                    f"you dropped the partly filled last page: {length} tokens take ⌈{length} / {S}⌉ = {n} "
                    f"blocks, the last holding {partial} tokens; use ⌈length / page_size⌉, not length // page_size",
                )
            )
        inverted = (
            "α is inverted: you rescale by e^(m_new - m_old) ≥ 1, which grows l and acc when a "
            "page raises the max; what was summed against the old max must shrink: "
            "α = e^(m_old - m_new) ≤ 1"
        )
        known += [
            (
                _loop(q, pk, pv, used, length, rescale="inverted"),
                inverted
                + " (on the first page m_old = -inf, so yours is e^(+inf): the NaN)",
            ),
            (
                _loop(q, pk, pv, used, length, rescale="inverted, first page guarded"),
                inverted,
            ),
            (
                _loop(q, pk, pv, used, length, rescale="l"),
                "you rescaled l but not acc: acc was summed against the old max too, so it takes the same "
                "α = e^(m_old - m_new) before this page's terms are added",
            ),
            (
                (o_ref, lse_ref / np.log(2)),
                "lse is in base 2: the spec asks the natural log, lse = m + ln l (if you worked in base 2, "
                "multiply by ln 2)",
            ),
            (
                (o_ref, _base2(q, k, v)),
                "lse mixes bases: m is a natural-log score, so lse = m + ln l, not m + log2 l",
            ),
            (
                _first_row(q, k, v),
                "every new query got the answer of the first: q holds N new tokens, q[h, n] for n < N, "
                "and each attends on its own (group the rows as (Hkv, G·N, d))",
            ),
            (
                _loop(q, pk, pv, used, length, mask=False),
                f"you read every slot of the last page: it holds {length - (n - 1) * S} of its {S} slots, "
                "the rest is stale data of an earlier sequence; mask the slots at positions >= length",
            ),
            (
                _loop(q, pk, pv, [int(p) for p in row], length, mask=False),
                "you read every entry of block_row: entries past the sequence's last block are -1 "
                "(pages_k[-1] is the pool's last page), and the last used page holds stale slots",
            ),
            (
                _loop(q, pk, pv, list(range(n)), length),
                "you read page i for logical block i: the block table maps logical block i to physical "
                "page block_row[i], and a sequence's pages lie anywhere in the pool",
            ),
            (
                _loop(q, pk, pv, sorted(used), length),
                "you read the pages in the wrong order: the partial page is the one of the last logical "
                "block, block_row[n - 1], not the last one you happened to visit",
            ),
            (
                _loop(q, pk, pv, used, length, alpha=False),
                "when a page raises the running max, l and acc (summed against the old max) must be "
                "rescaled by e^(m_old - m_new) before this page's terms are added",
            ),
            (
                _loop(q, pk, pv, used, length, carry=False),
                "each page's terms are taken against that page's own max: the state must carry one running "
                "max m over all pages read, and rescale l and acc by e^(m_old - m_new) when a page raises it",
            ),
            (
                _loop(q, pk, pv, used, length, lse_m=False),
                "lse is missing the running max: it is m + log l",
            ),
            (
                attention_reference(q, k, v, scale=1.0),
                "the scores are q·k / √d: the scale 1/√d is missing",
            ),
        ]
        Hq, Hkv = q.shape[0], k.shape[0]
        if Hq > Hkv > 1:
            mod = np.arange(Hq) % Hkv
            known.append(
                (
                    attention_reference(q, k[mod], v[mod]),
                    f"query head h reads K/V head h // G (G = {Hq // Hkv}: heads 0..{Hq // Hkv - 1} share "
                    "K/V head 0), not h % Hkv",
                )
            )
    for want, text in known:
        if _matches(got, want, tol):
            return text
    for j, part in ((0, "o"), (1, "lse")):
        try:
            if np.shape(got[j]) == np.shape(attention_reference(q, k, v)[j]):
                continue
        except (TypeError, IndexError):
            pass
        return f"{part} has the shape ({'Hq, N, dv' if j == 0 else 'Hq, N'}): a row per query head and new token"
    return (
        "o is attention over the sequence's first `length` tokens, read page by page; lse = m + log l of "
        "the running state after the last page"
    )


def check_paged_decode(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(q, pages_k, pages_v, block_row, length)` -> `(o, lse)` of one sequence decoded through its block-table row; print one verdict.

    Seven sequences on scattered pages of a shared pool (a partial last page, a full one, one token, three new
    tokens with G = 4, scores in the thousands, a max that rises page by page, 16,000 tokens with G = 16)
    against `attention_reference` on the contiguous K and V, at float64's tolerance, or float32's when the
    answer comes back in float32. Hints for the mask off by one, the partial last page dropped, stale slots
    read, -1 entries read, logical for physical pages, pages in the wrong order, α inverted, missing, or
    missing on acc, m the page's own max instead of the running one, lse without m or in base 2, the first query's answer given to all N, the scale, h % Hkv.
    On the long case the memory held (tracemalloc) must stay below what a page-at-a-time decode needs (4 pages
    of K and V repeated for the G query heads, and the running state): a contiguous copy, or all M scores at
    once, fails. No course answer and no torch op may run. Values are
    drawn afresh on each run (`seed` draws the same again). Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    _, seed = _fresh(seed)
    with noting_seed(seed):
        _paged_decode_cases(fn, name or getattr(fn, "__name__", "paged_decode"), seed)


def _paged_decode_cases(fn, name, seed) -> None:
    from .decoding import _COURSE, _FAILED, _attempt, _fail, _precision

    banned = (*_COURSE, "decode_paged", "gather_pages")
    cases = _decode_cases(seed)
    for i, case in enumerate(cases):
        label, q, pk, pv, row, length, k, v = case
        where = f"{i} ({label}: q {q.shape}, pool {pk.shape}, length {length})"
        args = (q, pk, pv, row.copy(), length)
        res = _attempt(name, fn, args, where, courses=banned)
        if res is _FAILED:
            return
        if res[1]:
            return _fail(name, where, _refusal(res[1]))
        loose = _float32(res[0])
        rtol, atol = (_f32_rtol(q, k), F32_ATOL) if loose else (RTOL, ATOL)
        problem = diagnose(
            res[0],
            attention_reference(q, k, v),
            names=("o", "lse"),
            rtol=rtol,
            atol=atol,
        )
        if problem is not None:
            exact = None if loose else _precision(res[0], attention_reference(q, k, v))
            return _fail(
                name, where, problem, exact or _paged_hint(case, res[0], loose)
            )
        if i == len(cases) - 1:
            with np.errstate(all="ignore"):
                peak, _ = peak_bytes(fn, *args)
            held, allowed = k.nbytes + v.nbytes, _allowed(q, pk, pv)
            if peak > allowed:
                what = (
                    "the size of a contiguous copy (of its K and V, in whatever dtype), or of a row "
                    "of all M scores"
                    if peak >= held / 4
                    else "more than a few pages at a time, even repeated for the G query heads"
                )
                return _fail(
                    name,
                    where,
                    f"the values agree, but your code held {peak / 2**20:.2f} MiB at once, {what}: this "
                    f"sequence's K and V are {held / 2**20:.2f} MiB; a page-at-a-time decode needs at most "
                    f"{allowed / 2**20:.2f} MiB (4 pages of K and V repeated for the G = {q.shape[0] // pk.shape[1]} "
                    "query heads, and the running state)",
                    "read one page at a time through the table (a view such as pages_k[page, :, :valid]) and "
                    "keep only the running (m, l, acc): no contiguous copy of the sequence, no row of all M scores",
                )
    print(
        f"{name}: ✓ passed {len(cases)} sequences on scattered pages: stale slots masked, "
        "no copy of the cache"
    )


# ------------------------------------------------------------------------------------ the build: append_token


def _append(cache, free, b, k_new, v_new) -> None:
    """The check's reference: token `lengths[b]` of sequence b written into its slot, a page popped from `free`
    first when the last page is full or the sequence has none."""
    block, slot = divmod(int(cache.lengths[b]), cache.page_size)
    if slot == 0:
        cache.block_table[b, block] = free.pop()
    page = cache.block_table[b, block]
    cache.pages_k[page, :, slot], cache.pages_v[page, :, slot] = k_new, v_new
    cache.lengths[b] += 1


def _append_trace(seed: int):
    """A pool of stale pages holding three sequences (2·S - 2 tokens, S tokens, none), its free list, and the appends
    to check: a token mid-page, one that fills the last slot, one after a full page, on each kind of sequence, then
    twelve more in a random order."""
    rng = np.random.default_rng(seed)
    S, Hkv, d = (
        int(rng.choice([4, 5, 8])),
        int(rng.integers(1, 3)),
        int(rng.integers(3, 6)),
    )
    start, order = [2 * S - 2, S, 0], [0, 0, 0, 1, 2, *rng.integers(0, 3, 12).tolist()]
    final = [n + order.count(b) for b, n in enumerate(start)]
    P = sum(-(-n // S) for n in final) + 3  # the pages the trace needs, and three spare
    T = -(-max(final) // S) + 2  # a row of the table wider than any sequence needs
    cache = PagedCache(
        rng.standard_normal((P, Hkv, S, d)),  # stale values in every slot
        rng.standard_normal((P, Hkv, S, d + 1)),  # (P, Hkv, S, dv), dv = d + 1
        np.full((len(start), T), -1, np.int64),
        np.zeros(len(start), np.int64),
        S,
    )
    free = [int(p) for p in rng.permutation(P)]
    fill = [b for b, n in enumerate(start) for _ in range(n)]
    for b in rng.permutation(
        fill
    ):  # the sequences grown so far, their pages interleaved
        _append(
            cache,
            free,
            int(b),
            rng.standard_normal((Hkv, d)),
            rng.standard_normal((Hkv, d + 1)),
        )
    steps = [
        (b, rng.standard_normal((Hkv, d)), rng.standard_normal((Hkv, d + 1)))
        for b in order
    ]
    return cache, free, steps


def _owners(table, lengths, S) -> dict:
    """{physical page: (sequence, logical block)} of the pages in use."""
    return {
        int(table[c, i]): (c, i)
        for c in range(len(lengths))
        for i in range(-(-int(lengths[c]) // S))
    }


def _where_written(pages, before, x, page, slot, owners, b, block, last_entry):
    """Where `x` (k_new or v_new) landed instead of page `page`, slot `slot`, in words; None if nowhere."""
    S = pages.shape[2]
    hits = [
        (p, s)
        for p in range(pages.shape[0])
        for s in range(S)
        if np.array_equal(pages[p, :, s], x) and not np.array_equal(before[p, :, s], x)
    ]
    if not hits:
        return None
    p, s = hits[0]
    c, i = owners.get(p, (None, None))
    if p == page:
        if s < slot:
            return (
                f"you wrote slot {s} of the token's page, a slot in use: it holds the sequence's token "
                f"{block * S + s}. The new token takes the page's first free slot, {slot}"
            )
        return (
            f"you wrote slot {s} of the token's page, a stale slot past the token's place: the new token "
            f"takes the page's first free slot, {slot}; a reader of length + 1 tokens never reads slot {s}"
        )
    note = ""
    if p == pages.shape[0] - 1 and last_entry == -1:
        note = f" block_row[-1] is the row's last entry, -1 here: pages_k[-1] is the pool's last page, {p}."
    if c == b:
        return (
            f"you wrote into page {p}, the sequence's logical block {i}: this token lies in logical block "
            f"{block}, page {page}.{note}"
        )
    held = (
        f"it holds sequence {c}'s block {i}"
        if c is not None
        else "no sequence holds it"
    )
    return (
        f"you wrote into page {p}, a page sequence {b} does not own ({held}): the token goes in the page "
        f"its block_row records for logical block {block}, page {page}.{note}"
    )


def _append_fault(pre, cache, free, b, k_new, v_new, out):
    """(what is wrong, hint) with the cache and free list after one call, or None when the call did what it must."""
    pk0, pv0, table0, len0, free0 = pre
    S = cache.page_size
    table, lengths = cache.block_table, cache.lengths
    L0 = int(len0[b])
    block, slot = divmod(L0, S)
    owners = _owners(table0, len0, S)
    same = [
        np.array_equal(a, a0)
        for a, a0 in (
            (cache.pages_k, pk0),
            (cache.pages_v, pv0),
            (table, table0),
            (lengths, len0),
        )
    ]
    if all(same) and list(free) == free0:
        told = (
            " (it returned a value: the caller keeps the cache it passed)"
            if out is not None
            else ""
        )
        return (
            f"the cache is unchanged after your call{told}",
            "the pool is changed in place: write into cache.pages_k and cache.pages_v, set cache.lengths[b] "
            "and cache.block_table[b, i], take pages with free.pop(); return nothing",
        )
    for c in range(len(len0)):
        said = (
            [f"length {len0[c]} -> {lengths[c]}"]
            if c != b and lengths[c] != len0[c]
            else []
        )
        if c != b and not np.array_equal(table[c], table0[c]):
            said.append(f"block_row {table0[c].tolist()} -> {table[c].tolist()}")
        if said:
            return (
                f"sequence {c} changed ({', '.join(said)}), though the token is sequence {b}'s",
                f"only sequence b = {b} grows: leave the other sequences' lengths and rows as they are",
            )
    if lengths[b] == L0:
        return (
            f"lengths[{b}] is still {L0} after the call",
            "length not updated: grow cache.lengths[b] by one, or the sequence's next token takes the same "
            "slot and overwrites this one, and a reader never sees it",
        )
    if lengths[b] != L0 + 1:
        return (
            f"lengths[{b}] went from {L0} to {lengths[b]}",
            "one token makes the sequence one longer",
        )
    new = [i for i in range(table.shape[1]) if table[b, i] != table0[b, i]]
    took = f"it took page {table[b, new[0]]}" if new else ""
    if slot == 0 and not new:
        if L0 == 0:
            return (
                f"sequence {b} had no page and still has none: its block_row is {table[b].tolist()}",
                "a new sequence (length 0) owns no page: its first token needs one, taken from free",
            )
        return (
            f"sequence {b}'s last page was full ({L0} tokens in pages of {S}) and no page was taken",
            f"a page taken one token late: {L0} tokens fill {block} pages to the last slot, so this token "
            "needs a new page; the test for a full page is off by one",
        )
    if slot and new:
        if slot == S - 1:
            return (
                f"{took}, but the last page holds {slot} of its {S} tokens: slot {slot} is free",
                "a page taken one token early: a page is full once all its slots hold tokens; this token "
                "goes in the last page's last slot, and the next token takes the new page",
            )
        return (
            f"{took}, but the last page holds {slot} of its {S} tokens",
            "a page taken for every token: take one only when the sequence's last page is full (or it has "
            "none); until then each token takes the next slot of that page",
        )
    if new and new != [block]:
        return (
            f"block_row changed at entries {new}: {table0[b].tolist()} -> {table[b].tolist()}",
            f"record the new page at entry {block}, this token's logical block (the row's first -1); the "
            "entries before it map the sequence's earlier blocks and stay as they are",
        )
    if new:
        page = int(table[b, block])
        if page not in free0:
            held = (
                f"sequence {owners[page][0]}'s block {owners[page][1]}"
                if page in owners
                else "a page that is not free"
            )
            return (
                f"the page recorded for block {block}, {page}, is not in free: it holds {held}",
                "take the new page from the free list: the other pages belong to sequences",
            )
        if sorted(free) == sorted(free0):
            return (
                f"page {page} is still in free after your call: free is {list(free)}",
                "the free list not popped: remove the page you take (free.pop(), on the list you were given), "
                "or the next sequence that needs a page gets the same one and overwrites this one's tokens",
            )
        rest = list(free0)
        rest.remove(page)
        if sorted(free) != sorted(rest):
            return (
                f"free went from {free0} to {list(free)}",
                f"take one page, the one you record: free loses page {page} and nothing else",
            )
    elif list(free) != free0:
        return (
            f"free changed ({free0} -> {list(free)}) though the token fits in the last page",
            "leave free as it is when no page is taken",
        )
    page = int(table[b, block])
    for x, pages, before, name in (
        (k_new, cache.pages_k, pk0, "k"),
        (v_new, cache.pages_v, pv0, "v"),
    ):
        if not np.array_equal(pages[page, :, slot], x):
            told = _where_written(
                pages, before, x, page, slot, owners, b, block, table0[b, -1]
            )
            return (
                f"page {page}, slot {slot} does not hold {name}_new (token {L0} of sequence {b})",
                told
                or f"{name}_new is nowhere in pages_{name}: write it into pages_{name}[page, :, slot], "
                "every K/V head at once, in the page and slot of the token",
            )
    for p, (c, i) in owners.items():
        n = min(S, int(len0[c]) - i * S)
        for pages, before in ((cache.pages_k, pk0), (cache.pages_v, pv0)):
            moved = [
                s
                for s in range(n)
                if not np.array_equal(pages[p, :, s], before[p, :, s])
            ]
            if moved:
                return (
                    f"token {i * S + moved[0]} of sequence {c} (page {p}, slot {moved[0]}) changed",
                    "write the new token's slot only: the slots in use hold the sequences' earlier tokens"
                    + _last_page_note(p, cache.pages_k.shape[0], table0[b, block]),
                )
    return _foreign_write(pk0, pv0, cache, owners, b, table0[b, block])


def _last_page_note(p, n_pages, entry) -> str:
    """The words for a write through block_row's -1 entry (the pool's last page), or ""."""
    if p != n_pages - 1 or entry != -1:
        return ""
    return (
        ". You indexed the pool with block_row's entry before it held a page: -1 there, and "
        f"pages_k[-1] is the pool's last page, {p}. Take the page first"
    )


def _foreign_write(pk0, pv0, cache, owners, b, entry):
    """(what is wrong, hint) for a write into a page sequence b does not own after the call (a free page, or
    another sequence's stale slots), or None."""
    mine = {int(p) for p in cache.block_table[b] if p >= 0}
    n_pages = cache.pages_k.shape[0]
    for p in range(n_pages):
        if p in mine:
            continue
        for pages, before, name in (
            (cache.pages_k, pk0, "k"),
            (cache.pages_v, pv0, "v"),
        ):
            moved = [
                s
                for s in range(cache.page_size)
                if not np.array_equal(pages[p, :, s], before[p, :, s])
            ]
            if not moved:
                continue
            note = _last_page_note(p, n_pages, entry)
            if p in owners:
                c, i = owners[p]
                what = f"sequence {c}'s block {i}, its stale slot {moved[0]}"
            else:
                what = "a free page: no sequence owns it"
            return (
                f"pages_{name}[{p}], slot {moved[0]} changed, and page {p} is not sequence {b}'s "
                f"({what})",
                "a write into a page the sequence does not own: a sequence writes only into the pages "
                "its block_row records; a free page belongs to the pool, which may hand it to another "
                "sequence at the same moment. Write the token's slot of its own page alone"
                + note,
            )
    return None


def _append_raised(exc) -> str | None:
    if isinstance(exc, IndexError):
        return (
            "a page has page_size slots, 0 to page_size - 1, and a row of block_table one entry per logical "
            "block: the token at position `length` lies in logical block length // page_size"
        )
    return None


def check_append_token(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(cache, free, b, k_new, v_new)`, which appends one token of sequence b to a paged cache in place;
    print one verdict.

    Seventeen appends to three sequences on one pool of stale pages (a page partly filled, one full, a new sequence;
    the first five: a token mid-page, one into the last slot, one after a full page on each kind), each call
    checked on what it changed: `lengths[b]` one more, a page taken from `free` (and removed from it) exactly when
    the last page is full or the sequence has none and recorded at its logical block, k_new and v_new in the page
    and slot of position `lengths[b]`, no other sequence's row, length or tokens changed. Hints for a page taken
    one token early or late, a page for every token, a new sequence left without a page, the length not updated,
    the free list not popped, a write into a slot in use, a stale slot, or a page the sequence does not own
    (block_row[-1]), also when the token lands right and a free page or another sequence's stale slot is
    written besides. lab's paged cache (`paged_kv`, `gather_pages`, `decode_paged`), the check's own reference and
    torch are refused. Values, page size, head counts and the pool's order are drawn afresh on each run (`seed`
    draws the same again). Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    _, seed = _fresh(seed)
    with noting_seed(seed):
        _append_cases(fn, name or getattr(fn, "__name__", "append_token"), seed)


def _append_cases(fn, name, seed) -> None:
    from .decoding import _fail

    cache, free, steps = _append_trace(seed)
    for i, (b, k_new, v_new) in enumerate(steps):
        L0, row = int(cache.lengths[b]), cache.block_table[b]
        where = (
            f"{i} (sequence {b}: length {L0}, page_size {cache.page_size}, block_row {row.tolist()}, "
            f"{len(free)} free pages)"
        )
        pre = tuple(a.copy() for a in cache[:4]) + (list(free),)
        try:
            with np.errstate(all="ignore"), _watching(_PAGED, numpy_only=True) as used:
                out = fn(cache, free, b, k_new.copy(), v_new.copy())
        except NotImplementedError:
            return print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            hint = _append_raised(exc)
            return print(
                f"{name}: ✗ case {where} raised {type(exc).__name__}: {exc}"
                + (f"\n  hint: {hint}" if hint else "")
            )
        if used:
            return _fail(name, where, _refusal(used))
        fault = _append_fault(pre, cache, free, b, k_new, v_new, out)
        if fault is not None:
            return _fail(name, where, *fault)
    print(
        f"{name}: ✓ passed {len(steps)} appends to {len(cache.lengths)} sequences: a page taken only "
        "when the last is full"
    )


_PAGED = ("paged_kv", "gather_pages", "decode_paged")
