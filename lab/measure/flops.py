"""Work, counted: the matmul FLOPs of one attention forward, the numerator of every TFLOP/s the course prints.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations


def attention_flops(
    B: int, H: int, N: int, d: int, *, M=None, causal: bool = False
) -> float:
    """Matmul FLOPs of an attention forward: $4 \\cdot B \\cdot H \\cdot N \\cdot M \\cdot d$, halved for causal (FlashAttention-2 §4.1).

    Two products, S = Q·Kᵀ and O = P·V, of 2·N·M·d FLOPs each per head; the softmax is not counted.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    M = N if M is None else M
    for name, x in (("B", B), ("H", H), ("N", N), ("M", M), ("d", d)):
        if int(x) != x or x < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {x!r}")
    flops = 4.0 * B * H * N * M * d
    return flops / 2 if causal else flops
