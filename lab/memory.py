"""Peak memory of a Python call, as numpy sees it: `tracemalloc` records numpy's array allocations.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import tracemalloc

__all__ = ["peak_bytes", "attention_bytes"]


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
