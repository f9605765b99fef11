"""Checks for notebook 10's exercises: cache bytes, the intensity of a step, splits that fill a machine, flash-decoding.

- `check_cache_per_token(fn)` : bytes of K and V cached per token, $2 \\cdot \\text{layers} \\cdot H_{kv} \\cdot d \\cdot \\text{itemsize}$.
- `check_cache_bytes(fn)`     : the K/V cache of one sequence when local (sliding-window) and global layers alternate.
- `check_largest_window(fn)`  : the largest window of the local layers whose cache fits a budget of bytes.
- `check_step_intensity(fn)`  : FLOPs per byte of one decoding step, K/V at `kv`, q and o at `qo` bytes: $4GMd / (2Md\\,kv + 2Gd\\,qo)$.
- `check_crossing_group(fn)`  : the smallest G at which a step reaches a ridge of R FLOP/B, 0 if none does.
- `check_min_splits(fn)`      : the fewest splits that give each of P processors a work item.
- `check_split_ticks(fn)`     : the ticks of one decoding step in `lab.decode_schedule`'s model (the toy
  machine's picture generalized); `check_split_steps` is its earlier name.
- `check_best_splits(fn)`     : the number of splits with the fewest ticks in `lab.decode_schedule`'s model.
- `check_split_decode(split_decode, decode_chunk)` : `decode_chunk` alone on single chunks, then `split_decode` against
  `attention_reference`, every call to `decode_chunk` recorded (`splits` contiguous chunks of all Hkv heads, each key in
  one); the answer must follow the partials (a second run changes them) and, with G = 16, the memory held (tracemalloc)
  stay below K repeated for the query heads.
- `check_gather_pages(fn)`    : the paged cache, from lab/checks/paged.py. Each prints a verdict; on a failure, a hint.

Taught in: notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from ..attention import attention_reference
from ..decoding import decode_schedule, kv_cache_bytes_per_token, num_splits_heuristic
from ..exercises import check, diagnose
from ..hardware import ridge_point
from ..memory import peak_bytes
from ..merge import merge_outputs
from ._seeded import noting_seed
from ._support import _fresh, _own_work, _refusal, _settled, _watching
from .paged import check_gather_pages, check_paged_decode

__all__ = [
    "check_cache_per_token",
    "check_cache_bytes",
    "check_largest_window",
    "check_step_intensity",
    "check_crossing_group",
    "check_min_splits",
    "check_split_ticks",
    "check_split_steps",
    "check_best_splits",
    "check_split_decode",
    "check_gather_pages",
    "check_paged_decode",
]

RTOL, ATOL = 1e-9, 1e-12
_FAILED = object()
_INSTRUMENT_HELPERS = (
    "_perturb",
)  # run inside the learner's split_decode, between its calls of decode_chunk
_COURSE = (
    "attention_reference",
    "attention_naive",
    "one_pass_attention",
    "flash_attention_numpy",
    "flash_attention_torch",
    "flash_decoding",
    "decode_torch",
    "chunk_state",
    "split_states",
    "chunk_bounds",
    "partial_state",
    "finalize",
    "merge_states",
    "reduce_states",
    "merge_outputs",
    "merge_output_pair",
)
_OVERFLOW = "float64 stops at e^709.8"
_EMPTY = (
    "a chunk with no keys holds no mass: its o_c = 0 and lse_c = -inf (log 0), weight 0 in the merge; the max "
    "of nothing is an error and 0/0 is NaN"
)


def _hint_from(variants, default):
    """A `lab.check` hint: the text of the first known mistake `f(*case)` that equals the learner's answer."""

    def hint(case, got, want):
        try:
            if math.isclose(float(got), float(want), rel_tol=1e-9):
                return None  # right, and refused for another reason, which says it all
        except (TypeError, ValueError, OverflowError):
            pass
        for f, text in variants:
            try:
                if math.isclose(float(got), float(f(*case)), rel_tol=1e-9):
                    return text
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                return default
        return default

    return hint


# ------------------------------------------------------------------------------------ warm-ups


def check_cache_per_token(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(layers, q_heads, kv_heads, head_dim, itemsize)` -> bytes of K and V cached per token; print one verdict.

    Reference: `lab.kv_cache_bytes_per_token` (the query heads play no part). Hints for the query heads counted, V
    forgotten, one layer only, bits or elements instead of bytes. Five fixed cases and four drawn afresh on each run
    (`seed` draws the same again); running `lab.kv_cache_bytes_per_token` (by any name) is refused.
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [
        (32, 32, 32, 128, 2),
        (80, 64, 8, 128, 2),
        (32, 71, 1, 64, 2),
        (126, 128, 8, 128, 4),
        (32, 32, 8, 128, 1),
    ]
    for _ in range(4):  # grouped heads drawn for this run: Hkv divides Hq
        kv = int(rng.choice([1, 2, 4, 8, 16]))
        cases.append(
            (
                int(rng.integers(1, 129)),
                kv * int(rng.integers(1, 9)),
                kv,
                int(rng.choice([32, 64, 80, 96, 128, 256])),
                int(rng.choice([1, 2, 4])),
            )
        )
    hint = _hint_from(
        [
            (
                lambda L, Hq, Hkv, d, i: 2 * L * Hq * d * i,
                "you counted the query heads; the cache keeps K and V, which exist "
                "only for the K/V heads (a step computes its queries fresh)",
            ),
            (
                lambda L, Hq, Hkv, d, i: L * Hkv * d * i,
                "that is K alone: the cache keeps V as well",
            ),
            (
                lambda L, Hq, Hkv, d, i: 2 * Hkv * d * i,
                "that is one layer: every layer keeps its own K and V",
            ),
            (
                lambda L, Hq, Hkv, d, i: 16 * L * Hkv * d * i,
                "that is bits: itemsize counts bytes",
            ),
            (
                lambda L, Hq, Hkv, d, i: 2 * L * Hkv * d,
                "that counts elements: multiply by the bytes of each",
            ),
        ],
        "count what one token adds to the cache: which tensors, of which heads, in how many layers, at what size",
    )
    check(
        fn,
        lambda L, Hq, Hkv, d, i: kv_cache_bytes_per_token(L, Hkv, d, i),
        cases,
        name=name or "cache_per_token",
        hint=hint,
        properties=(_own_work("kv_cache_bytes_per_token", "kv_cache_table"),),
        seed=seed,
    )


def _cache_bytes(T, L, Hkv, d, i, W):
    local = (L + 1) // 2  # layers 0, 2, 4, ... keep the last W tokens only
    return 2 * Hkv * d * i * (local * min(T, W) + (L - local) * T)


def check_cache_bytes(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(tokens, layers, kv_heads, head_dim, itemsize, window)` -> bytes of the K/V cache of one sequence whose layers 0, 2, 4, ... keep a window of the last `window` tokens and the others every token; print one verdict.

    Hints for the window ignored, every layer windowed, a full window kept before the sequence fills it,
    the odd layers taken as the local ones, V forgotten, one token's bytes. Cases drawn afresh on each
    run (`seed` draws the same again), each kind of case among them; `lab.kv_cache_bytes_per_token`
    may be used (section 1's cache per token is a building block, not this answer).
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    rng, seed = _fresh(seed)

    def draw(short, odd):
        W = int(rng.choice([512, 1024, 4096]))
        T = int(rng.integers(2, W)) if short else int(rng.integers(W + 1, 8 * W))
        L = 2 * int(rng.integers(4, 40)) + odd
        kv = int(rng.choice([1, 2, 4, 8, 16]))
        d, i = int(rng.choice([64, 128, 256])), int(rng.choice([1, 2, 4]))
        return (T, L, kv, d, i, W)

    cases = [draw(short, odd) for short in (False, True) for odd in (0, 1)]
    cases += [draw(False, 1), draw(True, 0)]
    hint = _hint_from(
        [
            (
                lambda T, L, Hkv, d, i, W: 2 * L * Hkv * d * i * T,
                "every layer keeps every token: a local layer keeps only the last "
                "`window` tokens, so its cache stops growing once the sequence is longer",
            ),
            (
                lambda T, L, Hkv, d, i, W: 2 * L * Hkv * d * i * min(T, W),
                "every layer is windowed: only layers 0, 2, 4, ... are local, the others keep every token",
            ),
            (
                lambda T, L, Hkv, d, i, W: (
                    2 * Hkv * d * i * ((L + 1) // 2 * W + L // 2 * T)
                ),
                "a local layer keeps at most `window` tokens: a sequence shorter "
                "than the window has cached only the tokens it has",
            ),
            (
                lambda T, L, Hkv, d, i, W: (
                    2 * Hkv * d * i * (L // 2 * min(T, W) + (L + 1) // 2 * T)
                ),
                "layers 0, 2, 4, ... are the local ones: with an odd number of "
                "layers there is one more local layer than global",
            ),
            (
                lambda T, L, Hkv, d, i, W: _cache_bytes(T, L, Hkv, d, i, W) // 2,
                "that is K alone: each layer caches V as well",
            ),
            (
                lambda T, L, Hkv, d, i, W: 2 * L * Hkv * d * i,
                "that is what one token adds to a cache with no window; the question "
                "is the whole cache of a sequence of `tokens` tokens",
            ),
        ],
        "count each layer: how many tokens it keeps, then K and V of its K/V heads for each, at itemsize bytes",
    )
    check(
        fn,
        _cache_bytes,
        cases,
        name=name or "cache_bytes",
        hint=hint,
        properties=(_own_work(),),
        seed=seed,
    )


def _window(budget, T, L, Hkv, d, i):
    """The largest window W <= T whose cache (layers 0, 2, 4, ... local) fits `budget` bytes, 0 if none."""
    local = (L + 1) // 2
    W = (budget // (2 * Hkv * d * i) - (L - local) * T) // local
    return min(T, W) if W >= 1 else 0


def _window_cases(rng):
    """Kinds in a fixed order, values drawn: a budget that needs a window (even and odd layers), one the whole
    cache fits, one the global layers alone overflow, anything."""

    def draw(kind, odd):
        T = int(rng.integers(2048, 65537))
        L = 2 * int(rng.integers(4, 40)) + odd
        kv = int(rng.choice([1, 2, 4, 8, 16]))
        d, i = int(rng.choice([64, 128, 256])), int(rng.choice([1, 2, 4]))
        per, local = 2 * kv * d * i, (L + 1) // 2
        low, full = per * ((L - local) * T + local), per * L * T
        budget = {
            "window": lambda: int(
                rng.integers(low + per * local * 2, full - per * local)
            ),
            "fits": lambda: int(rng.integers(full, 2 * full)),
            "overflow": lambda: int(rng.integers(low // 2, low - per)),
        }[kind]()
        return (budget, T, L, kv, d, i)

    return [
        draw("window", 0),
        draw("window", 1),
        draw("fits", 0),
        draw("overflow", 1),
        draw("window", 1),
        draw(str(rng.choice(["window", "fits", "overflow"])), int(rng.integers(0, 2))),
    ]


def _window_hint(case, got, want):
    budget, T, L, Hkv, d, i = case
    try:
        W = int(got)
        if W != got or W < 0:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        return "return a whole number of tokens, or 0 if no window fits the budget"
    if W == want:
        return None
    used = _cache_bytes(T, L, Hkv, d, i, W) if W else 0
    if want == 0:
        return (
            "no window fits: the global layers alone keep every token and already take more than the "
            "budget; return 0"
        )
    if W > T:
        return f"a window longer than the sequence ({T} tokens) keeps only what there is: cap it at `tokens`"
    if W == T and used > budget:  # a capped answer: the whole cache, which does not fit
        return (
            f"a window of all {T} tokens makes a cache of {used:,} bytes, over the budget of "
            f"{budget:,}: the global layers keep every token, and every layer keeps K and V"
        )
    per, local = 2 * Hkv * d * i, (L + 1) // 2
    variants = (
        (
            (budget // (per // 2) - (L - local) * T) // local,
            "that counts K alone: each layer caches V as well",
        ),
        (
            (budget // per - (L - L // 2) * T) // (L // 2),
            "layers 0, 2, 4, ... are the local ones: "
            "with an odd number of layers there is one more local layer than global",
        ),
        (
            budget // per // L,
            "every layer windowed: only layers 0, 2, 4, ... are local, the others keep every token",
        ),
    )
    for wrong, text in variants:
        if W == max(wrong, 0):
            return text
    if W > want and used > budget:
        return (
            f"a window of {W} tokens makes a cache of {used:,} bytes, over the budget of {budget:,}: "
            + (
                "rounded up; the largest window that fits rounds down"
                if W == want + 1
                else "count the global layers, which keep every token"
            )
        )
    return (
        f"a window of {W} tokens makes a cache of {used:,} bytes against a budget of {budget:,}: count "
        "each layer's tokens (local: the window; global: all), then find the largest window that fits"
    )


def check_largest_window(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(budget, tokens, layers, kv_heads, head_dim, itemsize)` -> the largest window (at most `tokens`) for which a sequence's K/V cache, layers 0, 2, 4, ... local, fits `budget` bytes, 0 if none; print one verdict.

    Hints for the global layers forgotten, every layer windowed, the local layers miscounted, K alone,
    rounding up, no cap at `tokens`, a window returned where the global layers alone overflow. Six cases
    drawn afresh on each run (`seed` draws the same again); `lab.kv_cache_bytes_per_token` may be used.
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    rng, seed = _fresh(seed)
    check(
        fn,
        _window,
        _window_cases(rng),
        name=name or "largest_window",
        rtol=0,
        atol=0,
        hint=_window_hint,
        properties=(_own_work(),),
        seed=seed,
    )


def _intensity(G, d, M, kv, qo):
    return 4 * G * M * d / (2 * M * d * kv + 2 * G * d * qo)


def check_step_intensity(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(G, d, M, kv_itemsize, qo_itemsize)` -> FLOPs per byte of one decoding step of one K/V head; print one verdict.

    Hints for one itemsize for all, K/V read per query head, q and o left out, a multiply-add counted as one FLOP.
    Five cases drawn afresh on each run (`seed` draws the same again): equal itemsizes and G = 1, an 8-bit cache under
    16-bit q and o, a short cache, a large group, a 16-bit cache under 32-bit q and o. Running
    `lab.decode_intensity` (by any name) is refused. Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    rng, seed = _fresh(seed)

    def draw(G, M, kv, qo):
        return (int(G), int(rng.choice([64, 96, 128, 256])), int(M), kv, qo)

    cases = [
        draw(
            1, rng.integers(512, 8193), 2, 2
        ),  # multi-head: one query head per K/V head
        draw(rng.integers(2, 17), rng.integers(512, 8193), 1, 2),
        draw(rng.integers(2, 9), rng.integers(8, 200), 1, 2),
        draw(rng.integers(32, 72), rng.integers(1024, 4097), 1, 2),
        draw(rng.integers(4, 33), rng.integers(8, 64), 2, 4),
    ]
    hint = _hint_from(
        [
            (
                lambda G, d, M, kv, qo: 4 * G * M * d / ((2 * M * d + 2 * G * d) * kv),
                "every byte at kv_itemsize: q and o "
                "are at qo_itemsize, only K and V are stored at kv_itemsize",
            ),
            (
                lambda G, d, M, kv, qo: 4 * G * M * d / ((2 * M * d + 2 * G * d) * qo),
                "every byte at qo_itemsize: K and V are stored at kv_itemsize",
            ),
            (
                lambda G, d, M, kv, qo: (
                    4 * G * M * d / (2 * G * M * d * kv + 2 * G * d * qo)
                ),
                "K and V read once per query "
                "head: the G heads of a group share one read of K and V, which is what grouping buys",
            ),
            (
                lambda G, d, M, kv, qo: 4 * G * M * d / (2 * M * d * kv),
                "q and o are missing: each query head reads its q and writes its o",
            ),
            (
                lambda G, d, M, kv, qo: _intensity(G, d, M, kv, qo) / 2,
                "half the FLOPs: QK^T and PV are each a multiply and an add per "
                "element, 2Md FLOPs each, so 4Md per query head",
            ),
        ],
        "FLOPs: QK^T and PV for the G query heads; bytes: K and V once for the group, q read and o written per query head",
    )
    check(
        fn,
        _intensity,
        cases,
        name=name or "intensity",
        hint=hint,
        properties=(_own_work("decode_intensity", "latent_decode_intensity"),),
        seed=seed,
    )


# Case 0's ridge: the H100's, 989 / 3.35 = 295.2 FLOP/B to one decimal, as the notebook states it.
H100_CASE_RIDGE = round(ridge_point("H100"), 1)


def _crossing(R, d, M, kv, qo):
    """The smallest whole G whose step reaches `R` FLOP/B (`_intensity(G, ...) >= R`), 0 if none: solve
    G (2M - R qo) >= R M kv."""
    if 2 * M <= R * qo:  # I -> 2M / qo as G grows: q and o grow with G as the FLOPs do
        return 0
    G = max(1, math.ceil(R * M * kv / (2 * M - R * qo)))
    while G > 1 and _intensity(G - 1, d, M, kv, qo) >= R:
        G -= 1
    while _intensity(G, d, M, kv, qo) < R:
        G += 1
    return G


def _crossing_cases(rng):
    """Kinds in a fixed order, values drawn: 16-bit and an H100-like ridge, an 8-bit cache of 512-2,048 keys (q and o
    matter), a short cache no
    group lifts to the ridge, a float32 step against a CPU's ridge, anything. A ridge that one G meets exactly
    is drawn again (float rounding would decide it)."""

    def draw(ridge, M, kv, qo):
        while True:
            R, m = round(float(ridge()), 1), int(M())
            d = int(rng.choice([64, 128, 256]))
            if (
                2 * m <= R * qo
                or abs((x := R * m * kv / (2 * m - R * qo)) - round(x)) > 1e-6
            ):
                return (R, d, m, kv, qo)

    return [
        draw(lambda: H100_CASE_RIDGE, lambda: rng.integers(2048, 32769), 2, 2),
        draw(lambda: rng.uniform(150, 320), lambda: rng.integers(512, 2049), 1, 2),
        draw(lambda: rng.uniform(150, 320), lambda: rng.integers(16, 120), 1, 2),
        draw(lambda: rng.uniform(5, 30), lambda: rng.integers(256, 4097), 4, 4),
        draw(
            lambda: rng.uniform(20, 400),
            lambda: rng.integers(64, 8193),
            int(rng.choice([1, 2])),
            int(rng.choice([2, 4])),
        ),
    ]


def _crossing_hint(case, got, want):
    R, d, M, kv, qo = case
    try:
        g = int(got)
        if g != got or g < 0:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        return "return a whole number of query heads per K/V head, or 0 if no group reaches the ridge"
    if g == want:
        return None
    top = 2 * M / qo  # what I approaches as G grows
    if want == 0:
        return (
            f"no group reaches this ridge: as G grows the q and o bytes grow with the FLOPs, and the "
            f"intensity approaches 2M / qo_itemsize = {top:.1f} FLOP/B, below the ridge {R}: return 0"
        )
    at = _intensity(g, d, M, kv, qo) if g > 0 else 0.0
    if g == 0:
        return (
            f"{want} query heads reach it: the intensity grows with G toward {top:.1f} FLOP/B, above the "
            "ridge; if yours never grows, K and V are read once per query head, but the G heads of a "
            "group share one read, which is what grouping buys"
        )
    per_head = (
        "each of the G query heads reads its own q and writes its own o, 2Gd · qo_itemsize bytes "
        f"that grow with G, so {g} query heads do only {at:.2f} FLOP/B"
    )
    left_out, once = math.ceil(R * kv / 2), math.ceil(R * (M * kv + qo) / (2 * M))
    variants = (
        (
            left_out if left_out == once else None,
            "that is where the ridge is met leaving out q and o, or counting them once for the "
            f"whole group: {per_head}",
        ),
        (
            once,
            "you counted q and o once for the whole group, 2d · qo_itemsize bytes: "
            f"{per_head}",
        ),
        (
            left_out,
            "that is where 2G / kv_itemsize reaches the ridge, leaving out q and o: their bytes grow "
            f"with G, so {g} query heads do only {at:.2f} FLOP/B",
        ),
        (
            want - 1,
            f"{g} query heads do {at:.2f} FLOP/B, just short of the ridge {R}: the smallest G that "
            "reaches it is rounded up",
        ),
        (
            _crossing(R, d, M, kv, kv),
            "every byte at kv_itemsize: q and o are at qo_itemsize, only K and V are stored at "
            "kv_itemsize",
        ),
        (
            _crossing(R, d, M, qo, qo),
            "every byte at qo_itemsize: K and V are stored at kv_itemsize",
        ),
        (
            _crossing(2 * R, d, M, kv, qo),
            "half the FLOPs: QK^T and PV are each a multiply and an add per element, 2Md FLOPs "
            "each, so 4Md per query head",
        ),
    )
    for wrong, text in variants:
        if g == wrong:
            return text
    return (
        f"at G = {g} the step does {at:.2f} FLOP/B against a ridge of {R}: count the FLOPs of the G "
        "query heads, K and V read once, q and o per head, then solve for the smallest G that reaches it"
    )


def check_crossing_group(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(ridge, d, M, kv_itemsize, qo_itemsize)` -> the smallest whole G whose decoding step does at least `ridge` FLOP/B, or 0 if none does; print one verdict.

    The step's intensity is $4GMd / (2Md \\cdot kv + 2Gd \\cdot qo)$, so $G = \\lceil R M kv / (2M - R qo) \\rceil$
    when $2M > R \\cdot qo$, else 0. Five cases drawn afresh on each run (`seed` draws the same again): 16-bit against
    the H100's ridge (295.2, the cache length drawn), an 8-bit cache, a short cache that no group lifts to the ridge, float32 against a
    CPU's ridge, anything. Hints for q and o left out or counted once for the group, rounding down, one itemsize for all, half the FLOPs,
    K/V read per query head, a G returned where none reaches the ridge. Running `lab.decode_intensity`
    (by any name) is refused. Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    rng, seed = _fresh(seed)
    check(
        fn,
        _crossing,
        _crossing_cases(rng),
        name=name or "crossing_group",
        rtol=0,
        atol=0,
        hint=_crossing_hint,
        properties=(_own_work("decode_intensity", "latent_decode_intensity"),),
        seed=seed,
    )


def _fills(batch, heads, processors):
    return next(
        s
        for s in range(1, processors + 1)
        if decode_schedule(
            2**20,  # a cache of 8,192 key blocks: every split holds one
            batch=batch,
            heads=heads,
            splits=s,
            processors=processors,
            per_processor=1,
        )["busy"]
        == processors
    )


def _min_splits_cases(rng):
    """Kinds in a fixed order, values drawn: B·H not dividing P, a batch, B·H dividing P, a large batch."""
    P = int(rng.choice([108, 132]))
    H = int(rng.choice([5, 7, 8] if P == 132 else [5, 8]))
    div = [h for h in (1, 2, 3, 4, 6) if P % h == 0]
    return [
        (1, H, P),
        (int(rng.integers(2, 5)), int(rng.choice([3, 5, 8])), 132),
        (1, int(rng.choice(div)), P),
        (int(rng.integers(8, 17)), int(rng.choice([8, 16, 32])), 132),
        (
            int(rng.integers(1, 4)),
            int(rng.integers(1, 17)),
            int(rng.choice([108, 132])),
        ),
    ]


def check_min_splits(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(batch, heads, processors)` -> the first splits at which `lab.decode_schedule` keeps every processor busy; print one verdict.

    Hints for rounding down, a fraction, the batch forgotten, one too many when the items of a split divide
    the processors. Cases drawn afresh on each run (`seed` draws the same again); running
    `lab.decode_schedule` (by any name) is refused. Taught in: notebooks/10_decoding.ipynb
    """
    rng, seed = _fresh(seed)
    hint = _hint_from(
        [
            (
                lambda B, H, P: -(-P // H),
                "each sequence of the batch brings its own work items: B·H per split",
            ),
            (
                lambda B, H, P: P / (B * H),
                "splits come whole: round up to the next whole number",
            ),
            (
                lambda B, H, P: P // (B * H),
                "rounded down: the last processors get no work item; round up",
            ),
            (
                lambda B, H, P: P // (B * H) + 1,
                "one too many when B·H divides P exactly",
            ),
        ],
        "each split gives B·H work items; find the fewest splits with at least one item per processor",
    )
    check(
        fn,
        _fills,
        _min_splits_cases(rng),
        name=name or "min_splits",
        hint=hint,
        properties=(_own_work("decode_schedule", "schedule_table"),),
        seed=seed,
    )


def _steps(M, B, H, P, s):
    """The model's ticks on P slots (one item each; `best_splits` is asked for slots)."""
    return decode_schedule(
        M, batch=B, heads=H, splits=s, processors=P, per_processor=1
    )["ticks"]


def _model_steps(
    M,
    B,
    H,
    P,
    s,
    *,
    write=1,
    up=(True, True),
    floor_keys=False,
    one=False,
    merge_each_wave=False,
    merge=True,
    last_block=True,
    partials=True,
    partials_once=False,
    empty_take_slots=False,
):
    """The model's ticks, or a known mistake's: `write=0` drops the partials and the merge, `up` says
    whether the waves and the chunk round up (or down); `floor_keys` cuts chunks of ⌊M / s⌋ keys (the
    tail of M mod s keys in none), each then rounded up to whole key blocks; `one` charges the partials
    and the merge at 1 split too; `merge_each_wave` charges the merge once per wave; `merge=False`
    keeps the partials but drops the merge; `last_block=False` counts T_c = ⌊M / 128⌋, the partial
    last key block dropped; `partials=False` keeps the merge but drops the partials; `partials_once`
    charges the partials once, not once per wave; `empty_take_slots` gives the chunks without a key block a
    slot too."""

    def rnd(a, b, u):
        return -(-a // b) if u else max(a // b, 1)

    blocks = -(-M // 128) if last_block else max(M // 128, 1)
    held = s if empty_take_slots else min(s, blocks)  # chunks that hold a key block
    waves, chunk = rnd(B * H * held, P, up[0]), rnd(blocks, s, up[1])
    if floor_keys:
        chunk = max(-(-(M // s) // 128), 1)
    if merge_each_wave and s > 1:
        return waves * (chunk + 2 * write)
    if s > 1 and not partials:
        return waves * chunk + write
    if s > 1 and partials_once:
        return waves * chunk + 2 * write
    if s > 1 or one:
        return waves * (chunk + write) + (write if merge else 0)
    return waves * chunk


def _search(M, B, H, P, top=None, **kw):
    top = top or -(-M // 128)
    return min(range(1, top + 1), key=lambda s: (_model_steps(M, B, H, P, s, **kw), s))


def _best_splits(M, batch, heads, processors):
    """The oracle: a search over `lab.decode_schedule`, the fewest splits among the fastest."""
    n = -(-M // 128)  # more splits than key blocks only adds waves
    return min(
        range(1, n + 1), key=lambda s: (_steps(M, batch, heads, processors, s), s)
    )


def _fastest_tie(M, B, H, P):
    """Whether two or more split counts share the fewest ticks of the model."""
    ticks = [_model_steps(M, B, H, P, s) for s in range(1, -(-M // 128) + 1)]
    return ticks.count(min(ticks)) > 1


# caches of 20-59 key blocks on which one sequence's fastest counts tie (8 heads, 264
# processors): 31, 32 and 46-48 blocks have one fastest count, 16, and no tie to test
_TIED_BLOCKS = [n for n in range(20, 60) if _fastest_tie(128 * n, 1, 8, 264)]


def _best_splits_cases(rng):
    """Kinds in a fixed order, values drawn: one sequence on a long cache where the partials decide, a
    batch, a short cache where counts tie, one head on a cache of 129-264 blocks (the best count past
    128, the last block partial, so a search stopped at M // 128 misses it), a batch that already fills
    the machine, anything; then always a cache of 2 key blocks, where 1 split is fastest only if it
    writes no partials and merges nothing, and batch 9, where a merge charged per wave picks 7."""
    return [
        (128 * int(rng.integers(400, 513)), 1, 8, 228),  # 28.5 items a slot: a spill
        (
            128 * int(rng.integers(128, 513)),
            int(rng.integers(2, 5)),
            int(rng.choice([2, 4, 8])),
            264,
        ),
        (128 * int(rng.choice(_TIED_BLOCKS)), 1, 8, 264),
        (128 * int(rng.integers(129, 133)) - int(rng.integers(1, 100)), 1, 1, 264),
        (128 * int(rng.integers(64, 257)), int(rng.integers(17, 33)), 8, 264),
        (
            int(rng.integers(1000, 100_000)),
            int(rng.integers(1, 9)),
            int(rng.choice([1, 2, 4, 8])),
            int(rng.choice([216, 228, 264])),
        ),
        (
            256,
            1,
            8,
            264,
        ),  # 2 key blocks: 1 split wins unless it pays partials and a merge
        (32768, 9, 8, 264),  # 9 waves at 11 splits: a merge charged per wave picks 7
    ]


def _tail_hint(M, B, H, P, s, *, keys=False):
    """The hint for chunks rounded down, in key blocks or (`keys`) in keys: they leave the tail of
    the cache in no chunk."""
    blocks = -(-M // 128)
    longest = -(-blocks // s)  # the longest chunk when every key block is in one
    total, unit = (M, "keys") if keys else (blocks, "key blocks")
    cut = total // s
    what = f"⌊{'M' if keys else 'T_c'} / splits⌋ = ⌊{total} / {s}⌋"
    return (
        f"your chunks drop the tail of the cache: {s} chunks of {what} = {cut} {unit} "
        f"hold {s * cut:,} of the {total:,} {unit}, so the last {total - s * cut:,} are in "
        f"no chunk and never read. Cut evenly with every key block in one chunk, the "
        f"longest chunk holds ⌈T_c / splits⌉ = {longest} key blocks"
    )


def _mistakes(M, B, H, P, want):
    """Each known mistake's answer to the case (M, B, H, P), by name."""
    blocks = -(-M // 128)
    return {
        "short": _search(M, B, H, P, top=want - 1) if want > 1 else None,
        "free": _search(M, B, H, P, write=0),
        "tail blocks": _search(M, B, H, P, up=(True, False)),
        "tail keys": _search(M, B, H, P, floor_keys=True),
        "ties": min(
            range(1, blocks + 1), key=lambda s: (_model_steps(M, B, H, P, s), -s)
        ),
        "batch": _search(M, 1, H, P) if B > 1 else None,
        "waves": _search(M, B, H, P, up=(False, True)),
        "waves and chunk": _search(M, B, H, P, up=(False, False)),
        "fill": min(blocks, max(1, P // (B * H))),
        "one charged": _search(M, B, H, P, one=True),
        "merge each wave": _search(M, B, H, P, merge_each_wave=True),
        "launcher": num_splits_heuristic(B * H, P, blocks, 128),
    }


def _probe(kinds, fn):
    """Which of `kinds` (mistakes whose answers coincide on the failing case) `fn` makes: asked on
    cases where their answers differ, keeping the kinds that match `fn` each time, until one is
    left; None if `fn` answers none of them (or a stopped search's answer and the right one alike:
    then the tick count is wrong, not the search), or if no case tells them apart."""
    rng = np.random.default_rng(0)
    # first one head on 130-264 key blocks, the last partial: the best count passes 128 and M // 128
    fixed = [(128 * n - 7, 1, 1, 264) for n in (130, 131, 264)]
    left, asked = list(kinds), 0
    for i in range(300 + len(fixed)):
        case = (
            fixed[i]
            if i < len(fixed)
            else (
                int(rng.integers(1000, 70_000)),
                int(rng.integers(1, 5)),
                int(rng.choice([1, 2, 4, 8])),
                int(rng.choice([216, 264])),
            )
        )
        want = _search(*case)
        answers = {k: v for k, v in _mistakes(*case, want).items() if k in left}
        if "short" in left:  # a search stopped at 128 splits, or at M // 128
            stops = {
                _search(*case, top=min(t, -(-case[0] // 128)))
                for t in (128, case[0] // 128)
            }
            if len(stops) > 1:
                continue
            answers["short"] = stops.pop()
            answers["right"] = want  # a full search over a wrong tick count
        if len(set(answers.values())) < 2 or asked == 20:
            continue
        try:
            with np.errstate(all="ignore"):
                got = fn(*case)
        except Exception:  # the learner's code: any failure leaves it undecided
            return None
        asked += 1
        left = [k for k, v in answers.items() if v == got]
        if len(left) == 1:
            return None if left[0] == "right" else left[0]
        if not left:
            return None
        left = [k for k in left if k != "right"] + (
            ["right"] if "right" in left else []
        )
    return None


def _best_splits_hint(case, got, want, fn=None):
    M, B, H, P = case
    try:
        s = int(got)
        if s != got or s < 1:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        return "return a whole number of splits, at least 1"
    if s == want:
        return None
    t, t_want = _steps(M, B, H, P, s), _steps(M, B, H, P, want)
    blocks = -(-M // 128)
    answers = _mistakes(M, B, H, P, want)
    fill = answers["fill"]  # the count that fills one wave
    tie = t == t_want
    kinds = [k for k, v in answers.items() if v == s]
    kinds = [
        k
        for k in kinds
        if not (k == "ties" and not tie)  # most splits among the fastest: a tie
        and not (k == "short" and s == fill)  # filling one wave is its own mistake
    ]
    if tie and "ties" not in kinds:
        kinds.append("ties")
    probe = (
        len(kinds) > 1 or "short" in kinds
    )  # a stopped search is told only by asking
    kind = _probe(kinds, fn) if probe and fn is not None else (kinds or [None])[0]
    if kind is None and kinds and "short" not in kinds:
        kind = kinds[0]
    if kind in ("tail blocks", "tail keys"):
        return _tail_hint(M, B, H, P, s, keys=kind == "tail keys")
    if kind == "launcher":
        return (
            f"{s} is what flash-attn's launcher picks (the fewest splits within 0.85 of the best "
            f"wave efficiency, section 3); the model asks for the fewest ticks: {want} splits "
            f"take {t_want}, {s} take {t}. Compute each count's ticks and keep the fewest"
        )
    if kind == "free":
        return (
            "your tick count leaves out what a split costs: each item of a split spends a tick "
            "writing its partial, once per wave, and the merge adds one. Counted, "
            f"{s} splits take {t} ticks, {want} take {t_want}"
            + (" (a tie: take the fewest)" if tie else "")
        )
    if tie and kind in ("ties", "fill"):  # a tie, whatever led to it
        return (
            f"{s} splits take {t} ticks, as {want} do: when counts tie, take the fewest "
            "(each split costs a partial result to write and merge)"
        ) + {
            "fill": "; filling one wave is not the rule: compute each count's ticks",
        }.get(kind, "")
    if kind == "one charged":
        return (
            f"{s} splits take {t} ticks, but 1 split takes {_steps(M, B, H, P, 1)}: one split "
            "writes no partials and merges nothing, so its ticks are waves × T_c alone; "
            "charge the partials and the merge only when splits > 1"
        )
    if kind == "merge each wave":
        return (
            f"{s} splits take {t} ticks, {want} take {t_want}: the merge is one small launch "
            "after the last wave, one tick in all, not one per wave; each wave pays only its "
            "longest chunk and its partials"
        )
    if kind == "batch":
        return "each sequence of the batch brings its own work items: B·H per split"
    if kind == "short":
        floor = (
            f", or at M // 128 = {M // 128}, which rounds the partial last block away"
            if M // 128 < blocks
            else ""
        )
        return (
            f"{s} is the fastest count below {want}, but {want} splits take {t_want} ticks "
            f"against {t}, and your tick count agrees elsewhere: your search stopped "
            f"before {want} (at 128, say{floor}); try every count up to the key blocks "
            f"({blocks} here)"
        )
    if kind in ("waves", "waves and chunk"):
        items = B * H * min(s, M)
        return (
            f"the waves rounded down: {items} items on {P} slots take "
            f"⌈{items} / {P}⌉ = {-(-items // P)} wave(s); a wave only partly full still "
            "costs a whole one"
        ) + (
            "; and a chunk of ⌊T_c / splits⌋ key blocks leaves the tail of the cache in "
            "no chunk: the longest holds ⌈T_c / splits⌉"
            if kind == "waves and chunk"
            else ""
        )
    if kind == "fill":
        return (
            f"{s} splits fill one wave ({B * H * s} items on {P} slots) and take {t} ticks, but "
            f"{want} take {t_want}: the fastest count is not always the one that fills a wave; "
            "compute each count's ticks and keep the fewest"
        )
    waves = -(-B * H * min(s, M) // P)
    return (
        f"{s} splits make {B * H * s} items, {waves} wave(s) on {P} slots, and take {t} ticks; "
        f"{want} take {t_want}: check your tick count (the waves, each one's longest chunk and "
        "its partial, the merge) against section 2's table before the search"
    )


def check_best_splits(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(M, batch, heads, slots)` -> the number of splits with the fewest ticks in `lab.decode_schedule`'s model (ties: the fewest splits); print one verdict.

    Six cases drawn afresh on each run (`seed` draws the same again): one sequence on a long cache, a batch,
    a short cache where counts tie, one head whose best count passes 128, a batch that fills the machine by
    itself, anything; then two fixed: a cache of 2 key blocks (1 split fastest) and batch 9. Hints for the partials forgotten, the
    partials and merge charged at 1 split, the merge charged per wave, the waves rounded down, chunks of ⌊T_c / splits⌋ key
    blocks or ⌊M / splits⌋ keys (the tail of the cache in no chunk), a search stopped short (at 128, at M // 128),
    ties, the batch forgotten, the count that fills one wave taken without computing the ticks. Where two
    mistakes give the same answer, the hint asks `fn` one more case on which they differ. Running
    `lab.decode_schedule` or `lab.schedule_table` (by any name), the check's own oracle, is refused. Taught in: notebooks/10_decoding.ipynb
    """
    rng, seed = _fresh(seed)
    check(
        fn,
        _best_splits,
        _best_splits_cases(rng),
        name=name or "best_splits",
        rtol=0,
        atol=0,
        hint=lambda case, got, want: _best_splits_hint(case, got, want, fn),
        properties=(
            _own_work(
                "decode_schedule",
                "schedule_table",
                "heuristic_table",
                "decoding.refill_ticks",
            ),
        ),
        seed=seed,
    )


# ------------------------------------------------------------------------------------ the build: split_decode


@contextlib.contextmanager
def _spy_chunks(fn, target, change=None):
    """Record the calls of `target` made through `fn`'s global names as [(args, result)]; `change(c, result)` replaces results."""
    g, calls = getattr(fn, "__globals__", {}), []
    saved = {n: v for n, v in g.items() if v is target}

    def wrapper(*args, **kwargs):
        out = target(*args, **kwargs)
        if change is not None:
            out = change(len(calls), out)
        calls.append((args, out))
        return out

    for n in saved:
        g[n] = wrapper
    try:
        yield calls
    finally:
        g.update(saved)


def _attempt(name, fn, args, where, hint=None, courses=_COURSE):
    """`fn(*args)` with the course's answers `courses` watched: (result, lab names called), or `_FAILED` after saying why (and `hint`)."""
    try:
        with np.errstate(all="ignore"), _watching(courses, numpy_only=True) as used:
            raw = fn(*args)
            out = _settled(raw)
    except NotImplementedError as exc:
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        stub = tb.tb_frame.f_code.co_name
        still = f" ({stub} still raises NotImplementedError)" if stub != name else ""
        print(
            f"{name}: not implemented yet{still} (fill in the stub above, then run this cell again)"
        )
        return _FAILED
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        print(
            f"{name}: ✗ case {where} raised {type(exc).__name__}: {exc}"
            + (f"\n  hint: {hint}" if hint else "")
        )
        return _FAILED
    if out is None:
        print(f"{name}: ✗ case {where}: returned None (a missing `return`?)")
        return _FAILED
    if (j := _none_part(raw)) is not None:
        print(
            f"{name}: ✗ case {where}: returned None as element {j} of its tuple, not an array "
            "(a value never computed, or a helper without a `return`?)"
        )
        return _FAILED
    return (tuple(out) if isinstance(out, (tuple, list)) else out), used


def _none_part(raw):
    """The index of a part of a returned tuple that is None, or an array of None (a value never filled in), else None."""
    if not isinstance(raw, (tuple, list)):
        return None
    for j, x in enumerate(raw):
        if x is None or (
            isinstance(x, np.ndarray)
            and x.dtype == object
            and any(e is None for e in x.flat)
        ):
            return j
    return None


def _precision(got, want, names=("o", "lse")) -> str | None:
    """A hint when `got` misses float64's tolerance by float32's rounding only (computed in float32, whatever dtype
    it is returned in): every part within relative 1e-3 of `want`, the largest error named."""
    try:
        g = [np.asarray(x, dtype=float) for x in got]
        w = [np.asarray(x, dtype=float) for x in want]
    except (TypeError, ValueError):
        return None
    if len(g) != len(w) or any(a.shape != b.shape for a, b in zip(g, w)):
        return None
    if not all(np.isfinite(a).all() for a in g):
        return None
    worst, part = 0.0, names[0]
    for a, b, n in zip(g, w, names):
        if not np.allclose(a, b, rtol=1e-3, atol=1e-5):
            return None
        rel = float((np.abs(a - b) / np.maximum(np.abs(b), 1e-30)).max(initial=0.0))
        if rel > worst:
            worst, part = rel, n
    if worst < 1e-8:
        return None
    return (
        f"your error is float32 rounding (largest relative error {worst:.1e}, in {part}), not a "
        "fault in the method: compute in float64, the inputs' dtype (no astype(np.float32), no "
        "float32 arrays or np.float32 constants on the way)"
    )


def _fail(name, where, problem, hint=None) -> None:
    print(f"{name}: ✗ case {where}: {problem}" + (f"\n  hint: {hint}" if hint else ""))


def _close(got, k, want) -> bool:
    """Element k of the tuple `got` equals `want` (loosely): does a known mistake explain the answer?"""
    try:
        g, w = np.asarray(got[k], dtype=float), np.asarray(want, dtype=float)
    except (TypeError, ValueError, IndexError, KeyError):
        return False
    return g.shape == w.shape and bool(
        np.allclose(g, w, rtol=1e-7, atol=1e-10, equal_nan=True)
    )


def _bad(got, problem) -> bool:
    return ("NaN" in problem or "inf in yours" in problem) and isinstance(got, tuple)


def _qkv(rng, Hq, Hkv, N, M, d=8, dv=4, scale=1.0):
    return (
        rng.standard_normal((Hq, N, d)) * scale,
        rng.standard_normal((Hkv, M, d)) * scale,
        rng.standard_normal((Hkv, M, dv)),
    )


def _chunk_cases(seed: int = 100):
    rng = np.random.default_rng(seed)
    return [
        ("one query, 2 query heads per K/V head", *_qkv(rng, 4, 2, 1, 5)),
        ("3 heads, 2 queries", *_qkv(rng, 3, 3, 2, 4)),
        ("6 query heads on 1 K/V head, 3 queries", *_qkv(rng, 6, 1, 3, 7)),
        ("an empty chunk: no keys", *_qkv(rng, 4, 2, 1, 0)),
        ("1 key", *_qkv(rng, 4, 2, 2, 1)),
        ("scores in the thousands", *_qkv(rng, 4, 2, 1, 6, scale=30.0)),
    ]


def _split_cases(seed: int = 101):
    rng = np.random.default_rng(seed)
    return [
        ("", *_qkv(rng, 4, 2, 1, 48), 4),
        ("4 splits do not divide 50 keys", *_qkv(rng, 4, 2, 1, 50), 4),
        ("more splits than keys: 3 keys in 5 splits", *_qkv(rng, 4, 2, 1, 3), 5),
        ("one split", *_qkv(rng, 2, 1, 2, 20), 1),
        ("8 query heads on 2 K/V heads, 3 queries", *_qkv(rng, 8, 2, 3, 37), 3),
        ("scores in the thousands", *_qkv(rng, 4, 2, 1, 30, scale=30.0), 3),
        ("one key per split", *_qkv(rng, 6, 3, 1, 9), 9),
        ("32 query heads on 2 K/V heads", *_qkv(rng, 32, 2, 1, 2048, d=32, dv=32), 2),
    ]


def _shapes(q, k, v, c="") -> str:
    return f"q {tuple(q.shape)}, k{c} {tuple(k.shape)}, v{c} {tuple(v.shape)}"


def _chunk_hint(label, q, k, v, got, problem):
    Hq, Hkv = q.shape[0], k.shape[0]
    if _bad(got, problem) and k.shape[1] == 0:
        return _EMPTY
    if _bad(got, problem) and "thousands" in label:
        return (
            f"e^s overflows for scores in the thousands ({_OVERFLOW}): subtract each row's largest score before "
            "exponentiating, and add it back into lse_c"
        )
    if k.shape[1] == 0:
        return _EMPTY
    if "shape" in problem:
        return "o_c is (Hq, N, dv) and lse_c (Hq, N): a row per query head (not per K/V head) and per query"
    mod = np.arange(Hq) % Hkv  # query head h on K/V head h % Hkv
    if (
        Hkv > 1
        and Hq > Hkv
        and any(
            _close(got, j, attention_reference(q, k[mod], v[mod])[j]) for j in (0, 1)
        )
    ):
        return (
            f"query head 1 read K/V head 1: with G = {Hq // Hkv} query heads per K/V head, query head h reads K/V head "
            f"h // G (heads 0..{Hq // Hkv - 1} share K/V head 0), not h % Hkv"
        )
    if any(_close(got, j, attention_reference(q, k, v, scale=1.0)[j]) for j in (0, 1)):
        return "the scores are q·k / √d: the scale 1/√d is missing"
    s = (
        q @ np.swapaxes(np.repeat(k, Hq // Hkv, axis=0), -1, -2) / np.sqrt(q.shape[-1])
    )  # (Hq, N, Mc), small here
    if problem.startswith("lse_c ") and _close(
        got, 1, attention_reference(q, k, v)[1] - s.max(axis=-1)
    ):
        return "lse_c is missing the max you subtracted: it is the log of the sum of e^s, not of e^(s - m)"
    return (
        "o_c is the attention output of each query head over this chunk's keys alone"
        if problem.startswith("o_c ")
        else "lse_c is the log of the sum of e^s over the chunk's keys, s = q·k / √d"
    )


def _coverage(k, calls, splits):
    """What the recorded decode_chunk calls say about the chunks: (problem, hint) in words, or None."""
    Hkv, M, d = k.shape
    if not calls:
        return (
            "split_decode never called decode_chunk (the check watches calls made through "
            "the global name decode_chunk, not through another name or a closure)",
            "each chunk is its own work item: get its (o_c, lse_c) from "
            "decode_chunk, then merge; never take the softmax over all M keys at once",
        )
    index, seen = {k[:, j].tobytes(): j for j in range(M)}, np.zeros(M, int)
    for args, _ in calls:
        k_c = np.asarray(args[1], dtype=float) if len(args) > 1 else np.zeros(0)
        if k_c.ndim != 3 or k_c.shape[0] != Hkv or k_c.shape[2] != d:
            more = (
                " (K repeated for the query heads: decode_chunk reads K/V head h // G itself, no copy needed)"
                if k_c.ndim == 3 and k_c.shape[0] > Hkv
                else ""
            )
            return (
                f"decode_chunk received k_c of shape {k_c.shape}; a chunk of the cache is (Hkv, Mc, d) = ({Hkv}, Mc, {d})"
                + more,
                "pass k[:, j0:j1] and v[:, j0:j1]: a chunk of the keys of every K/V head",
            )
        js = [index.get(k_c[:, i].tobytes(), -1) for i in range(k_c.shape[1])]
        if -1 in js:
            return (
                "decode_chunk received a key that is not in the cache",
                "pass the cache's keys as they are",
            )
        if js and js != list(range(js[0], js[0] + len(js))):
            return (
                f"decode_chunk received keys {js[:6]}..., not a contiguous run",
                "each chunk is a contiguous run of keys",
            )
        np.add.at(seen, js, 1)
    if (seen == 0).any():
        lost = np.flatnonzero(seen == 0)
        span = f"key {lost[0]}" if len(lost) == 1 else f"keys {lost[0]}..{lost[-1]}"
        tail = (
            f"{M} keys are not a multiple of {splits}: the last chunk takes the keys left over"
            if lost[-1] == M - 1
            else ""
        )
        return (
            f"{span} never reached decode_chunk",
            tail or "every key belongs to one chunk",
        )
    if (seen > 1).any():
        j = int(np.flatnonzero(seen > 1)[0])
        return (
            f"key {j} reached decode_chunk {seen[j]} times",
            "each key belongs to exactly one chunk: chunks do not overlap",
        )
    if len(calls) != splits:
        return (
            f"decode_chunk was called {len(calls)} time{'s' * (len(calls) != 1)} for splits = {splits}",
            "call it once per chunk, splits times; a chunk with no keys (splits > M) is still a work item, of weight 0",
        )
    return None


def _merge_hint(label, calls, got, problem):
    parts = [out for _, out in calls if isinstance(out, tuple) and len(out) == 2]
    if not parts:
        return None
    O, L = (
        np.stack([np.asarray(p[0], float) for p in parts]),
        np.stack([np.asarray(p[1], float) for p in parts]),
    )
    if _bad(got, problem) and "thousands" in label:
        return (
            f"e^lse_c overflows for lse_c in the thousands ({_OVERFLOW}): subtract the largest lse_c before "
            "exponentiating, and add it back to lse"
        )
    if _bad(got, problem) and np.isneginf(L).any():
        return "an empty chunk (lse_c = -inf, o_c = 0) must weigh exactly 0; -inf - (-inf) and 0 · inf are NaN"
    with np.errstate(all="ignore"):
        m = L.max(axis=0)
        w = np.exp(L - m)
        lo = L.min(axis=0)
        inv = np.exp(lo - L)  # e^(-lse_c), scaled: the weights inverted
        swap_o, swap_l = O[0], L[0]  # a running merge with the two factors swapped
        for c in range(1, len(O)):
            new = np.logaddexp(swap_l, L[c])
            swap_o = (
                swap_o * np.exp(L[c] - new)[..., None]
                + O[c] * np.exp(swap_l - new)[..., None]
            )
            swap_l = new
        known = [
            (
                0,
                (inv[..., None] * O).sum(axis=0) / inv.sum(axis=0)[..., None],
                "your weights are inverted: chunk c weighs e^(lse_c - lse), its share of the "
                "mass, so the chunk with the largest lse_c weighs most, not least",
            ),
            (
                0,
                swap_o,
                "your running merge rescales by the wrong lse: the running o keeps the share "
                "e^(lse_run - lse_new) and the new chunk's o_c gets e^(lse_c - lse_new)",
            ),
            (
                0,
                O.mean(axis=0),
                "your o is the plain average of the chunks' o_c: each counts by its share "
                "e^(lse_c - lse) of the total mass, not equally",
            ),
            (
                0,
                (w[..., None] * O).sum(axis=0),
                "your o is not renormalized: divide by the sum of the weights",
            ),
            (
                1,
                m,
                "your lse is the largest lse_c; the merged lse is the log of the chunks' total mass",
            ),
            (
                1,
                np.log(w.sum(axis=0)),
                "your lse is missing the max you subtracted: add it back",
            ),
            (1, L.sum(axis=0), "lse values are logs: masses add, their logs do not"),
            (1, L.mean(axis=0), "lse values are logs: masses add, their logs do not"),
        ]
    k = 0 if problem.startswith("o ") else 1 if problem.startswith("lse ") else None
    text = next((t for j, cand, t in known if j == k and _close(got, j, cand)), None)
    return (
        text
        or "decode_chunk passes on its own and every key reached it once, so the merge is "
        "wrong: lse = log Σ_c e^(lse_c), and o = Σ_c e^(lse_c - lse) o_c"
    )


class _Watched(np.ndarray):
    """An array that logs the shape of every array of more than `above` elements that numpy derives from it."""

    log: list = []
    above = 0

    def __array_finalize__(self, obj):
        if self.size > _Watched.above:
            _Watched.log.append(self.shape)


def _memory(fn, q, k, v, splits):
    """(peak bytes newly held during `fn(q, k, v, splits)`, shapes of large arrays formed from q, k, v)."""
    _Watched.log, _Watched.above = [], k.size
    try:
        with np.errstate(all="ignore"):
            peak, _ = peak_bytes(
                fn, *(a.view(_Watched) for a in (q, k, v)), splits
            )  # tracemalloc sees numpy's buffers
        return peak, list(_Watched.log)
    finally:
        _Watched.log, _Watched.above = [], 0


def _perturb(c, out):
    """A chunk's partial changed on purpose: o_c + (c + 1), lse_c + (c + 1) / 4 (an empty chunk stays empty)."""
    o, lse = (np.asarray(x, dtype=float) for x in out)
    return o + (c + 1) * np.isfinite(lse)[..., None], lse + (c + 1) / 4


def check_split_decode(
    split_decode, decode_chunk, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `decode_chunk(q, k_c, v_c)` on single chunks, then `split_decode(q, k, v, splits)` -> `attention_reference(q, k, v)`; print one verdict.

    Recorded calls to `decode_chunk`: `splits` of them, contiguous chunks of all Hkv heads, each key exactly once. The
    result must follow the partials (a run with them changed), no course answer and no torch op may run (the exercise
    is numpy's: SDPA inside decode_chunk proves nothing), and with G = 16 the
    peak memory must stay below a copy of K repeated for the query heads. The cases' kinds are fixed, their values
    drawn afresh on each run (`seed` draws the same again). Taught in: notebooks/10_decoding.ipynb
    """
    _, seed = _fresh(seed)
    with noting_seed(seed):
        _split_decode_cases(split_decode, decode_chunk, name, seed)


def _split_decode_cases(split_decode, decode_chunk, name, seed) -> None:
    name = name or getattr(split_decode, "__name__", "split_decode")
    sub = getattr(decode_chunk, "__name__", "decode_chunk")
    for i, (label, q, k_c, v_c) in enumerate(_chunk_cases(seed)):
        where = f"{i} ({_shapes(q, k_c, v_c, '_c')}, {label})"
        res = _attempt(
            sub,
            decode_chunk,
            (q, k_c, v_c),
            where,
            _EMPTY if k_c.shape[1] == 0 else None,
        )
        if res is _FAILED:
            return
        if res[1]:
            return _fail(sub, where, _refusal(res[1]))
        problem = diagnose(
            res[0],
            attention_reference(q, k_c, v_c),
            names=("o_c", "lse_c"),
            rtol=RTOL,
            atol=ATOL,
        )
        if problem is not None:
            want = attention_reference(q, k_c, v_c)
            return _fail(
                sub,
                where,
                problem,
                _precision(res[0], want, ("o_c", "lse_c"))
                or _chunk_hint(label, q, k_c, v_c, res[0], problem),
            )
    cases = _split_cases(seed + 1)
    for i, (label, q, k, v, splits) in enumerate(cases):
        where = (
            f"{i} ({_shapes(q, k, v)}, splits={splits}{', ' + label if label else ''})"
        )
        with _spy_chunks(split_decode, decode_chunk) as calls:
            res = _attempt(
                name,
                split_decode,
                (q, k, v, splits),
                where,
                _EMPTY if splits > k.shape[1] else None,
            )
        if res is _FAILED:
            return
        if res[1]:
            return _fail(name, where, _refusal(res[1]))
        cover = _coverage(k, calls, splits)
        problem = diagnose(
            res[0],
            attention_reference(q, k, v),
            names=("o", "lse"),
            rtol=RTOL,
            atol=ATOL,
        )
        if problem is not None:
            return _fail(
                name,
                where,
                problem,
                f"{cover[0]}; {cover[1]}"
                if cover
                else _precision(res[0], attention_reference(q, k, v))
                or _merge_hint(label, calls, res[0], problem),
            )
        if cover is not None:
            return _fail(name, where, f"the values agree, but {cover[0]}", cover[1])
        with _spy_chunks(split_decode, decode_chunk, change=_perturb) as changed:
            res = _attempt(name, split_decode, (q, k, v, splits), where)
        if res is _FAILED:
            return
        parts = [out for _, out in changed]
        if (
            parts
            and diagnose(
                res[0],
                merge_outputs([p[0] for p in parts], [p[1] for p in parts]),
                names=("o", "lse"),
                rtol=RTOL,
                atol=ATOL,
            )
            is not None
        ):
            return _fail(
                name,
                where,
                "the values agree, but with decode_chunk's partials changed on purpose your answer "
                "is not their merge",
                "merge the (o_c, lse_c) that decode_chunk returns; do not recompute the "
                "scores of all M keys",
            )
        if i == len(cases) - 1:
            peak, shapes = _memory(split_decode, q, k, v, splits)
            if peak > 2 * (k.nbytes + v.nbytes):
                G, formed = (
                    q.shape[0] // k.shape[0],
                    max(shapes, key=np.prod, default=None),
                )
                return _fail(
                    name,
                    where,
                    f"the values agree, but your code held {peak / 2**20:.1f} MiB at once; K and V "
                    f"are {(k.nbytes + v.nbytes) / 2**20:.1f} MiB, K repeated for all {q.shape[0]} query heads would "
                    f"be {G * k.nbytes / 2**20:.1f} MiB"
                    + (f"; it formed an array of shape {formed}" if formed else ""),
                    f"the G = {G} query heads of a group share their K/V head: view q as (Hkv, G, N, d) against "
                    "k_c (Hkv, Mc, d) instead of repeating K and V",
                )
    print(
        f"{name}: ✓ passed {len(cases)} cases: uneven, empty chunks, G to 16, huge scores; "
        "merge followed, no copy"
    )


def _split_steps_cases(rng):
    """Kinds in a fixed order, values drawn: 1 split, three waves (where the partials left out, charged once
    and the merge left out give three different counts), a count in one wave, a spill into a second wave,
    s chunks of c key blocks and one partial block more (the chunk then holds c + 1), a partial last
    key block at 1 split, a batch, more splits than key blocks (the empty chunks take no slot); then section 2's
    table row (32 splits on 264 slots)."""
    blocks = int(rng.integers(200, 400))
    s, c = (
        int(rng.integers(3, 28)),
        int(rng.integers(8, 15)),
    )  # s chunks of c blocks, one more key
    return [
        (128 * blocks, 1, 8, 264, 1),
        (128 * blocks, 1, 8, 264, int(rng.integers(67, 100))),  # 536-792 items: 3 waves
        (128 * blocks, 1, 8, 264, int(rng.integers(2, 33))),
        (128 * blocks, 1, 8, 264, int(rng.integers(34, 66))),
        (128 * s * c + int(rng.integers(1, 128)), 1, 8, 228, s),
        (128 * blocks - int(rng.integers(1, 128)), 1, 8, 264, 1),
        (128 * blocks, int(rng.integers(2, 9)), 8, 264, int(rng.integers(2, 40))),
        (
            128 * int(rng.integers(3, 21)),
            1,
            8,
            264,
            int(rng.integers(34, 67)),
        ),  # splits > T_c
        (32768, 1, 8, 264, 32),
    ]


def _split_steps_hint(case, got, want):
    M, B, H, P, s = case
    named = [
        (
            _model_steps(M, B, H, P, s, write=0),
            "the partials and the merge are missing: "
            "with splits > 1 each wave spends one tick writing its partials, and the merge one more",
        ),
        (
            _model_steps(M, B, H, P, s, partials=False),
            "the partials are missing: with splits > 1 each wave spends one tick writing its "
            "partials (o_c, lse_c), and then the merge one more",
        ),
        (
            _model_steps(M, B, H, P, s, partials_once=True),
            "the partials are charged once: the items of each wave write their own, one tick per "
            "wave, before the merge's one tick",
        ),
        (
            _model_steps(M, B, H, P, s, merge=False),
            "the merge is missing: after the last wave one small launch merges the partials, "
            "one tick",
        ),
        (
            _model_steps(M, B, H, P, s, last_block=False),
            "the partial last key block is dropped: T_c = ⌈M / 128⌉, and a partial block "
            "costs a whole tick",
        ),
        (
            _model_steps(M, B, H, P, s, one=True),
            "one split writes no partials and merges "
            "nothing: its ticks are waves × T_c alone",
        ),
        (
            _model_steps(M, B, H, P, s, up=(False, True)),
            "the waves rounded down: a wave only "
            "partly full still costs a whole one, ⌈items / slots⌉",
        ),
        (
            _model_steps(M, B, H, P, s, up=(True, False)),
            "the chunk rounded down: the longest "
            "chunk holds ⌈T_c / splits⌉ key blocks, every key block in one chunk",
        ),
        (
            _model_steps(M, B, H, P, s, merge_each_wave=True),
            "the merge is one small launch "
            "after the last wave, one tick in all, not one per wave",
        ),
        (
            _model_steps(M, 1, H, P, s),
            "each sequence of the batch brings its own work items",
        ),
        (
            _model_steps(M, B, H, P, s, empty_take_slots=True),
            "the chunks left without a key block (more splits than key blocks) take no slot: "
            "the items are B·H·min(splits, T_c)",
        ),
    ]
    fits = [hint for value, hint in named if value == got and value != want]
    if len(fits) == 1:
        return fits[0]
    if fits:  # two mistakes give the same count here: name both
        return "one of these (both give this count here): " + "; or ".join(fits)
    return "count the waves, the longest chunk in key blocks, the partials, the merge"


def check_split_ticks(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(M, batch, heads, slots, splits)` -> the ticks of one decoding step in section 2's model; print one verdict.

    Hints for the partials or the merge left out, the partials alone left out or charged once, the merge
    alone left out, the empty chunks given slots, the partial last key block
    dropped, partials charged at 1 split, the waves or the chunk rounded down, the merge charged per
    wave, the batch forgotten (both named where two give the same count). Cases drawn afresh on each run;
    `lab.decode_schedule` (by any name) is refused. Taught in: notebooks/10_decoding.ipynb
    """
    rng, seed = _fresh(seed)
    check(
        fn,
        lambda M, B, H, P, s: _steps(M, B, H, P, s),
        _split_steps_cases(rng),
        name=name or "split_ticks",
        rtol=0,
        atol=0,
        hint=_split_steps_hint,
        properties=(
            _own_work(
                "decode_schedule",
                "schedule_table",
                "heuristic_table",
                "decoding.refill_ticks",
            ),
        ),
        seed=seed,
    )


check_split_steps = check_split_ticks  # the check's earlier name
