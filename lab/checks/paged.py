"""Check for notebook 10's paged-cache exercise: one sequence's keys gathered through its block-table row.

- `check_gather_pages(fn)` : one sequence's contiguous `(Hkv, length, d)` keys read through its block-table row, on
  scattered pages, partial and full last pages, a one-token sequence; then a decode through it against contiguous
  decoding. Prints one line on a pass, else what is wrong, where, and a hint.

Taught in: notebooks/10_decoding_and_gqa.ipynb
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from ..attention import attention_reference
from ..decoding import gather_pages, paged_kv
from ..exercises import check
from ._seeded import noting_seed
from ._support import _fresh, _own_work

__all__ = ["check_gather_pages"]

RTOL, ATOL = 1e-9, 1e-12


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
    Taught in: notebooks/10_decoding_and_gqa.ipynb
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
