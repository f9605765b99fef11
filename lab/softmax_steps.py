"""The online softmax's first pass, one block at a time: what `online_normalizer` does, written down.

Each block b with scores $x_b$ takes the state $(m, l)$ to $(m', l')$ (code: `m`, `l` to `m_new`, `l_new`):
$m' = \\max(m, \\max x_b)$, $\\alpha = e^{m - m'}$, $l' = \\alpha\\,l + \\sum_{j \\in b} e^{x_j - m'}$. The rescale is
exact because $e^{x - m'} = e^{x - m}\\,\\alpha$, so after every block $l' = \\sum_{j < \\text{stop}} e^{x_j - m'}$;
the trace recomputes that sum directly (`l_direct`) to show it.

Taught in: notebooks/02_online_softmax.ipynb
"""

from __future__ import annotations

import numpy as np

from .rules import safe_exp_shift
from .softmax import online_normalizer, softmax_online, softmax_safe
from .validate import as_float_array, check_block

__all__ = ["online_trace", "trace_table", "demo_scores", "online_vs_safe"]


def _row(x) -> np.ndarray:
    a = as_float_array(x, "x")
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"x must be a non-empty 1-D row, got shape {a.shape}")
    if np.isnan(a).any() or np.isposinf(a).any():
        raise ValueError(
            "x must not hold NaN or +inf (-inf, a masked entry, is allowed)"
        )
    return a.astype(np.result_type(a.dtype, np.float32))


def online_trace(x, block: int) -> dict:
    """Per block of a 1-D row, the update $(m, l) \\to (m', l')$: `block_max`, `m`, `l`, `m_new`, `alpha` $= e^{m - m'}$,
    `l_new`, and `l_direct` $= \\sum_{j<stop} e^{x_j - m'}$ recomputed from every score so far.

    Arrays of length ceil(n / block); `start`/`stop` bound each block; `m`, `l` of the first block are the empty state
    $(-\\infty, 0)$, and `m_new`, `l_new` of the last are the row's $(m, l)$.
    Taught in: notebooks/02_online_softmax.ipynb
    """
    a = _row(x)
    block = check_block(block, "block")
    n = a.shape[0]
    starts = np.arange(0, n, block)
    cols = {
        k: []
        for k in (
            "block",
            "start",
            "stop",
            "block_max",
            "m",
            "l",
            "m_new",
            "alpha",
            "l_new",
            "l_direct",
        )
    }
    m, l = -np.inf, 0.0
    for b, j0 in enumerate(starts):
        x_b = a[j0 : j0 + block]  # (≤ block,)
        m_new = max(m, float(x_b.max()))
        m_use = safe_exp_shift(m_new)  # nothing seen yet: l stays 0
        alpha = float(np.exp(m - m_use))  # α = e^(m − m′); 0 on the first block
        l_new = l * alpha + float(np.exp(x_b - m_use).sum())
        for k, v in (
            ("block", b),
            ("start", j0),
            ("stop", min(j0 + block, n)),
            ("block_max", float(x_b.max())),
            ("m", m),
            ("l", l),
            ("m_new", m_new),
            ("alpha", alpha),
            ("l_new", l_new),
            ("l_direct", float(np.exp(a[: j0 + block] - m_use).sum())),
        ):
            cols[k].append(v)
        m, l = m_new, l_new
    out = {k: np.array(v) for k, v in cols.items()}
    for k in ("block", "start", "stop"):
        out[k] = out[k].astype(np.int64)
    return out


def trace_table(trace: dict, max_rows: int = 8) -> str:
    """The trace as a text table (block number b, range, block max, m, m′, α, l′); at most `max_rows` rows, then a count of the rest.

    Taught in: notebooks/02_online_softmax.ipynb
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    head = f"{'b':>5}  {'scores j':>9}  {'block max':>9}  {'m':>9}  {'m′':>9}  {'α':>14}  {'l′':>10}"
    lines = [head, "-" * len(head)]
    nb = len(trace["block"])
    for i in range(min(nb, max_rows)):
        rng = f"{trace['start'][i]}–{trace['stop'][i] - 1}"
        lines.append(
            f"{trace['block'][i]:>5}  {rng:>9}  {trace['block_max'][i]:>9.3f}  {trace['m'][i]:>9.3f}  "
            f"{trace['m_new'][i]:>9.3f}  {trace['alpha'][i]:>14.4f}  {trace['l_new'][i]:>10.4f}"
        )
    if nb > max_rows:
        lines.append(f"... {nb - max_rows} more blocks")
    return "\n".join(lines)


def demo_scores(
    n: int = 64, shift: float = 0.0, scale: float = 1.0, seed: int = 0
) -> np.ndarray:
    """The slider's row: $x = \\text{shift} + \\text{scale}\\cdot z$ with $z$ seeded standard normal (float64, shape (n,)).

    Taught in: notebooks/02_online_softmax.ipynb
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not (np.isfinite(shift) and np.isfinite(scale)) or scale <= 0:
        raise ValueError(
            f"shift must be finite and scale finite and > 0, got shift={shift}, scale={scale}"
        )
    z = np.random.default_rng(seed).standard_normal(int(n))  # (n,)
    return shift + scale * z


def online_vs_safe(x, block: int) -> dict:
    """$\\max_i |\\mathrm{online}_i - \\mathrm{safe}_i|$ for one row, with the final (m, l) of both ways of computing it.

    Taught in: notebooks/02_online_softmax.ipynb
    """
    a = _row(x)
    block = check_block(block, "block")
    p_online = softmax_online(a, block)
    p_safe = softmax_safe(a)
    m, l = online_normalizer(a, block)
    m_safe = float(a.max())
    l_safe = float(np.exp(a - m_safe).sum()) if np.isfinite(m_safe) else 0.0
    return {
        "max_abs_diff": float(np.abs(p_online - p_safe).max()),
        "m": float(m),
        "l": float(l),
        "m_safe": m_safe,
        "l_safe": l_safe,
        "p": p_online,
    }
