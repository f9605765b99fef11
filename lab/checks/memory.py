"""Checks for the exercises of notebook 00: the bytes of S and P, standard attention, the largest N that fits, HBM traffic.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import math

import numpy as np

from ..attention import attention_reference
from ..exercises import check
from ..memory import attention_bytes, attention_traffic
from ._support import _fresh, _guarded, _hint, _own_work

__all__ = [
    "check_score_bytes",
    "check_standard_attention",
    "check_largest_n",
    "check_hbm_bytes",
]


def check_score_bytes(fn, *, seed: int | None = None) -> None:
    """Check `fn(B, H, N, M, itemsize)`, the bytes of S and P: $2 \\cdot B \\cdot H \\cdot N \\cdot M \\cdot \\text{itemsize}$;
    four fixed cases and three drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    rng, seed = _fresh(seed)
    cases = [
        (3, 4, 5, 7, 8),
        (1, 1, 4096, 4096, 4),
        (8, 32, 2048, 2048, 2),
        (4, 16, 1000, 3000, 2),
    ] + [
        (
            *(int(x) for x in rng.integers(2, 33, 2)),
            *(int(x) for x in rng.integers(100, 9000, 2)),
            int(rng.choice([1, 2, 4, 8])),
        )
        for _ in range(3)
    ]
    fixed = [
        (
            lambda B, H, N, M, s, k=k: 2 * B * H * N * M * k,
            f"that is {k} bytes per number whatever the format: use the argument itemsize",
        )
        for k in (1, 2, 4, 8)
    ]
    mistakes = [
        (
            lambda B, H, N, M, s: B * H * N * M * s,
            "that is S alone: P = softmax(S) is held at the same time, at the same size",
        ),
        (
            lambda B, H, N, M, s: 2 * N * M * s,
            "that is one head: all B·H heads of the batch are computed at once",
        ),
        (
            lambda B, H, N, M, s: 2 * H * N * M * s,
            "that is the H heads of one sequence: the batch has B of them",
        ),
        (
            lambda B, H, N, M, s: 2 * B * N * M * s,
            "that is one head of each sequence: each of the B sequences has H heads",
        ),
        (
            lambda B, H, N, M, s: 2 * B * H * N * N * s,
            "that uses N × N: S has a row per query (N) and a column per key (M)",
        ),
        (
            lambda B, H, N, M, s: 16 * B * H * N * M * s,
            "that is in bits: itemsize is already in bytes",
        ),
        (
            lambda B, H, N, M, s: 2 * B * H * N * M,
            "that counts numbers, not bytes: each takes itemsize bytes",
        ),
    ] + fixed
    guarded = _guarded(fn, "score_bytes")
    check(
        guarded,
        lambda B, H, N, M, s: attention_bytes(N, M, s, heads=B * H),
        cases,
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_bytes")],
        hint=_hint(
            mistakes,
            "count the numbers in S and in P for one head, times the heads at once, times bytes per number",
            fn=guarded,
            cases=cases,
        ),
    )


def _attention(q, k, v, *, scale=None, shift="row", axis=-1):
    """Standard attention with a choice of classic mistakes: the scale, what is subtracted, the softmax axis."""
    s = q @ k.T * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    e = np.exp(
        s - {"row": s.max(axis=axis, keepdims=True), "all": s.max(), "none": 0.0}[shift]
    )
    return e / e.sum(axis=axis, keepdims=True) @ v


def check_standard_attention(fn, *, seed: int | None = None) -> None:
    """Check `fn(q, k, v)`, one head of standard attention: $O = \\mathrm{softmax}(QK^\\top/\\sqrt{d})\\,V$, row by row, in numpy;
    cases with N != M, d_v != d and scores in the thousands, fixed and drawn afresh each run (`seed` draws the same
    again). Taught in: notebooks/00_the_memory_wall.ipynb"""
    rng = np.random.default_rng(1)
    fresh, seed = _fresh(seed)
    cases = [
        (
            rng.standard_normal((5, 8)),
            rng.standard_normal((7, 8)),
            rng.standard_normal((7, 3)),
        ),
        (
            40 * rng.standard_normal((4, 16)),
            40 * rng.standard_normal((6, 16)),
            rng.standard_normal((6, 16)),
        ),
        (
            rng.standard_normal((1, 4)),
            rng.standard_normal((9, 4)),
            rng.standard_normal((9, 2)),
        ),
    ]
    for scale in (1.0, 40.0):
        N, M, d, dv = (int(x) for x in fresh.integers(2, 12, 4))
        cases.append(
            (
                scale * fresh.standard_normal((N, d)),
                scale * fresh.standard_normal((M, d)),
                fresh.standard_normal((M, dv)),
            )
        )
    mistakes = [
        (
            lambda q, k, v: _attention(q, k, v, shift="none"),
            "e^s overflowed (these scores reach the thousands): subtract each row's max before exp, so every exponent is <= 0",
        ),
        (
            lambda q, k, v: _attention(q, k, v, shift="all"),
            "you subtracted the max of all of S: rows far below it underflow to 0/0; each row needs its own max",
        ),
        (
            lambda q, k, v: _attention(q, k, v, scale=1.0),
            "the scores are not scaled: S = QKᵀ/√d",
        ),
        (
            lambda q, k, v: _attention(q, k, v, scale=1 / q.shape[-1]),
            "the scale is 1/√d, not 1/d",
        ),
        (
            lambda q, k, v: _attention(q, k, v, scale=1 / math.sqrt(v.shape[-1])),
            "d is the width of q and k (the length of each dot product), not of v",
        ),
        (
            lambda q, k, v: _attention(q, k, v, axis=0),
            "each column of P sums to 1: softmax each query's row of scores (axis=-1)",
        ),
    ]
    guarded = _guarded(fn, "my_attention")
    check(
        guarded,
        lambda q, k, v: attention_reference(q, k, v)[0],
        cases,
        rtol=1e-9,
        atol=1e-12,
        seed=seed,
        hint=_hint(
            mistakes,
            "S = scale·QKᵀ is (N, M); softmax each row; O = PV is (N, d_v)",
            fn=guarded,
            cases=cases,
            close=(
                "the formula is right, but the digits are float32's (about 7): keep the float64 of q, k and v all "
                "the way (no .astype(np.float32), no np.float32 buffers)",
                1e-3,
            ),
        ),
        properties=[
            _own_work(
                "attention_reference",
                "attention_naive",
                "flash_attention_numpy",
                "softmax_safe",
                "softmax_naive",
                "softmax_online",
                numpy_only=True,
            )
        ],
    )


def check_largest_n(fn, *, seed: int | None = None) -> None:
    """Check `fn(gib, itemsize)`, the largest N whose S and P fit in `gib` GiB:
    $2 N^2 \\cdot \\text{itemsize} \\le \\text{gib} \\cdot 2^{30}$; six fixed cases and three drawn afresh each run (`seed`
    draws the same again). Taught in: notebooks/00_the_memory_wall.ipynb"""
    rng, seed = _fresh(seed)
    cases = [(80, 4), (80, 2), (16, 2), (141, 2), (1, 8), (24, 1)] + [
        (int(rng.integers(2, 300)), int(rng.choice([1, 2, 4, 8]))) for _ in range(3)
    ]
    mistakes = [
        (
            lambda g, s: math.isqrt(g * 2**30 // s),
            "that N fits S alone: P needs as much again",
        ),
        (
            lambda g, s: math.isqrt(g * 10**9 // (2 * s)),
            "that budget is in GB (10⁹ bytes): a GiB is 2³⁰ bytes",
        ),
        (
            lambda g, s: math.isqrt(g * 2**30 // (2 * s)) + 1,
            "one too many: at that N, 2·N²·itemsize exceeds the budget",
        ),
        (
            lambda g, s: math.sqrt(g * 2**30 / (2 * s)),
            "not a whole number: N counts tokens, so round down",
        ),
        (
            lambda g, s: math.isqrt(g * 2**30 // 2),
            "that leaves out itemsize: each number takes itemsize bytes",
        ),
    ]

    def whole(fn, case, got):
        if isinstance(got, (int, np.integer)) and not isinstance(got, bool):
            return None
        return (
            f"it returns {got!r}, a {type(got).__name__}: N counts tokens, so return an integer (math.isqrt keeps "
            "the whole computation in integers)"
        )

    guarded = _guarded(fn, "largest_n")
    check(
        guarded,
        lambda g, s: math.isqrt(g * 2**30 // (2 * s)),
        cases,
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work(), whole],
        hint=_hint(
            mistakes,
            "the largest N with 2·N²·itemsize <= gib·2³⁰ bytes: it fits, N + 1 does not",
            fn=guarded,
            cases=cases,
        ),
    )


def check_hbm_bytes(fn, *, seed: int | None = None) -> None:
    """Check `fn(N, M, d, dv, itemsize)`, the HBM bytes `(s, p, o, fused)` of standard attention's three kernels and of a
    fused kernel (`lab.attention_traffic`, softmax reading S once); three fixed cases and three drawn afresh each run
    (`seed` draws the same again). Taught in: notebooks/00_the_memory_wall.ipynb"""
    rng, seed = _fresh(seed)
    cases = [(4096, 4096, 64, 64, 2), (1000, 3000, 128, 32, 4), (7, 5, 3, 2, 8)] + [
        (
            *(int(x) for x in rng.integers(2, 5000, 2)),
            *(int(x) for x in rng.choice([16, 32, 64, 80, 128], 2, replace=False)),
            int(rng.choice([1, 2, 4, 8])),
        )
        for _ in range(3)
    ]

    def want(N, M, d, dv, it):
        return tuple(
            r["bytes"]
            for r in attention_traffic(N, M, d=d, dv=dv, itemsize=it)
            if r["piece"] != "standard, total"
        )

    mistakes = [
        (
            lambda N, M, d, dv, it: ((N * d + M * d) * it,) + want(N, M, d, dv, it)[1:],
            "S = scale·QKᵀ also writes S, N·M numbers, back to HBM",
        ),
        (
            lambda N, M, d, dv, it: (
                (want(N, M, d, dv, it)[0], N * M * it) + want(N, M, d, dv, it)[2:]
            ),
            "the softmax reads S and writes P: N·M numbers each way",
        ),
        (
            lambda N, M, d, dv, it: (
                (want(N, M, d, dv, it)[0], 4 * N * M * it) + want(N, M, d, dv, it)[2:]
            ),
            "that is 4 accesses per element of S, a softmax that reads S from HBM three times (once per pass); "
            "this one reads S once and writes P: 2·N·M numbers",
        ),
        (
            lambda N, M, d, dv, it: tuple(x // it for x in want(N, M, d, dv, it)),
            "those are numbers: times itemsize",
        ),
        (
            lambda N, M, d, dv, it: want(N, N, d, dv, it),
            "S and P are N × M, and K, V have M rows",
        ),
        (
            lambda N, M, d, dv, it: want(N, M, d, d, it),
            "V and O have d_v columns, not d",
        ),
    ]
    guarded = _guarded(fn, "hbm_bytes")
    check(
        guarded,
        want,
        cases,
        names=("s", "p", "o", "fused"),
        rtol=0,
        atol=0,
        seed=seed,
        properties=[_own_work("attention_traffic")],
        hint=_hint(
            mistakes,
            "each kernel reads its inputs from HBM and writes its output; the fused kernel reads Q, K, "
            "V and writes O only",
            fn=guarded,
            cases=cases,
        ),
    )
