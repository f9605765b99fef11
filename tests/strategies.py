"""Shared hypothesis strategies: shapes, block sizes and attention inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

# Block sizes that matter: 1, primes, powers of two, and sizes larger than any N drawn here.
blocks = st.sampled_from([1, 2, 3, 5, 7, 13, 16, 31, 64, 200])
lengths = st.integers(min_value=1, max_value=40)
dims = st.sampled_from([1, 4, 8, 16])
seeds = st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def attention_inputs(
    draw, dtype=np.float64, max_len: int = 40, gqa: bool = True, spread=None
):
    """(q, k, v) of shapes (B, Hq, N, d), (B, Hkv, M, d), (B, Hkv, M, dv), Hq a multiple of Hkv."""
    rng = np.random.default_rng(draw(seeds))
    B = draw(st.integers(1, 2))
    Hkv = draw(st.integers(1, 2))
    G = draw(st.integers(1, 3)) if gqa else 1
    N = draw(st.integers(1, max_len))
    M = draw(st.integers(1, max_len))
    d, dv = draw(dims), draw(dims)
    scale = draw(st.sampled_from([0.5, 1.0, 3.0])) if spread is None else spread
    q = (rng.standard_normal((B, Hkv * G, N, d)) * scale).astype(dtype)
    k = (rng.standard_normal((B, Hkv, M, d)) * scale).astype(dtype)
    v = rng.standard_normal((B, Hkv, M, dv)).astype(dtype)
    return q, k, v


@st.composite
def score_rows(draw, max_len: int = 60, dtype=np.float64):
    """A (rows, n) array of scores, some rows with -inf (masked) entries."""
    rng = np.random.default_rng(draw(seeds))
    rows, n = draw(st.integers(1, 4)), draw(st.integers(1, max_len))
    x = rng.standard_normal((rows, n)) * draw(st.sampled_from([1.0, 10.0, 100.0]))
    x[rng.random((rows, n)) < draw(st.sampled_from([0.0, 0.2]))] = -np.inf
    return x.astype(dtype)
