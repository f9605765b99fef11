"""The two rules every attention kernel shares: which keys a query sees, and the guard for a row that has seen none.

- Causal visibility, bottom-right aligned (FlashAttention-2's convention): key j is visible to query i
  iff $j \\le i + (M - N)$. `causal_key_end(i, N, M)` is the first key hidden from query i, so query i
  sees keys `0 .. causal_key_end(i) - 1`; `causal_mask` is the boolean matrix built from it. Every
  numpy kernel, the backward and the tile plan (`lab._tiles.TilePlan`) ask these two.
- The $-\\infty$ guard: a row's running max m is $-\\infty$ until it sees a key (and stays so when every
  key is masked). Subtracting it would give $e^{-\\infty - (-\\infty)} = e^{\\mathrm{NaN}}$; subtracting
  `safe_exp_shift(m)` (m, or 0 where m = $-\\infty$) gives $e^{-\\infty - 0} = 0$: the row adds
  nothing, and its l stays 0.

Taught in: notebooks/03_one_pass_attention.ipynb, notebooks/05_tiling.ipynb, notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import numpy as np

__all__ = ["causal_key_end", "causal_mask", "safe_exp_shift"]


def causal_key_end(i, N: int, M: int):
    """First key hidden from query `i` under the causal mask: $\\mathrm{clip}(i + 1 + M - N, 0, M)$.

    Query i sees keys $j <$ `causal_key_end(i, N, M)`, i.e. $j \\le i + (M - N)$. `i` may be an int, a
    numpy integer array or a torch integer tensor (on any device); the result has its type.
    Taught in: notebooks/05_tiling.ipynb
    """
    if isinstance(i, (int, np.integer)):
        return min(max(int(i) + 1 + (M - N), 0), M)
    i = i if hasattr(i, "clip") else np.asarray(i)
    return (i + (1 + M - N)).clip(0, M)


def causal_mask(N: int, M: int, rows=None, cols=None) -> np.ndarray:
    """Boolean `visible[i, j] = j < causal_key_end(i, N, M)` (i.e. $j \\le i + M - N$) for query rows `rows` and key columns `cols`.

    Taught in: notebooks/05_tiling.ipynb
    """
    rows = np.arange(N) if rows is None else np.asarray(rows)
    cols = np.arange(M) if cols is None else np.asarray(cols)
    return cols[None, :] < causal_key_end(rows, N, M)[:, None]


def safe_exp_shift(m):
    """The max to subtract before exp: `m`, or 0 where $m = -\\infty$ (no key seen), so $e^{s - 0} = 0$ there, not NaN.

    `m` an array (the result has its dtype) or a scalar (the result is a numpy scalar).
    Taught in: notebooks/03_one_pass_attention.ipynb
    """
    return np.where(np.isneginf(m), 0.0, m)[()]
