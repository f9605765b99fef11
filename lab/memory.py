"""Peak memory of a Python call, as numpy sees it: `tracemalloc` records numpy's array allocations.

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/05_tiling.ipynb
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from ._checks import check_positive

__all__ = ["peak_bytes", "attention_bytes", "measure_peak_memory"]


def peak_bytes(fn, *args, **kwargs) -> tuple[int, object]:
    """Run `fn(*args, **kwargs)`; return (peak bytes allocated above the start, result).

    Measured with `tracemalloc`, which sees numpy's buffers (not torch's).
    """
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        result = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return peak - start, result


def attention_bytes(N: int, M: int | None = None, itemsize: int = 4, heads: int = 1) -> int:
    """Bytes of the score and probability matrices of standard attention: $2 \\cdot N \\cdot M \\cdot$ itemsize per head."""
    M = N if M is None else M
    if N < 0 or M < 0 or itemsize < 1 or heads < 1:
        raise ValueError(f"N, M must be >= 0 and itemsize, heads >= 1, got N={N}, M={M}, itemsize={itemsize}, heads={heads}")
    return 2 * N * M * itemsize * heads


def measure_peak_memory(N: int, d: int = 64, block_q: int = 256, block_k: int = 256, seed: int = 0) -> dict:
    """Peak bytes above the inputs of `attention_naive` and `flash_attention_numpy` on float32 inputs (N, d), measured once each.

    Uses `lab.peak_bytes` (tracemalloc). The naive version holds S and P: about $2N^2 \\cdot 4$ bytes,
    2 GiB at N = 16384. Returns `naive`, `flash` and the largest output difference `max_diff`.
    Taught in: notebooks/05_tiling.ipynb
    """
    from .attention import attention_naive, flash_attention_numpy   # the kernels import this module's siblings

    N, d = check_positive(N, "N"), check_positive(d, "d")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((N, d), dtype=np.float32) for _ in range(3))   # (N, d) each
    naive, o_naive = peak_bytes(attention_naive, q, k, v)
    flash, (o_flash, _) = peak_bytes(flash_attention_numpy, q, k, v, block_q=block_q, block_k=block_k)
    return {"N": N, "naive": naive, "flash": flash, "max_diff": float(np.abs(o_naive - o_flash).max())}
