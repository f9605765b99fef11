"""Input checks shared by every kernel: each raises before any work, naming the argument."""

from __future__ import annotations

import numpy as np


def as_float_array(x, name: str) -> np.ndarray:
    """Return `x` as a floating numpy array (no copy when it already is one), or raise TypeError."""
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{name} must have a floating dtype, got {a.dtype}")
    return a


def check_finite(a: np.ndarray, name: str) -> None:
    """Raise ValueError when `a` holds NaN or ±inf."""
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite (no NaN or ±inf)")


def check_block(block, name: str) -> int:
    """A block size is an integer >= 1."""
    return check_positive(block, name)


def check_causal(causal, name: str = "causal") -> bool:
    """`causal` is a bool (numpy's bool too); a string such as "no" is an error, not a truthy value."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool (True or False), got {causal!r}")
    return bool(causal)


def check_axis(x: np.ndarray, axis: int, name: str = "axis") -> int:
    """Normalize `axis` for `x`, or raise ValueError."""
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{name}={axis} is out of range for an array of rank {x.ndim}")
    return axis % x.ndim


def check_choice(value, choices, name: str):
    """Raise ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_qkv_shapes(q_shape, k_shape, v_shape) -> int:
    """Check `q (..., Hq, N, d)`, `k (..., Hkv, M, d)`, `v (..., Hkv, M, dv)`; return the group size Hq // Hkv.

    Leading dims must match, except that at axis -3 the query heads may be a multiple of the key/value
    heads (grouped-query attention).
    """
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) < 2:
            raise ValueError(f"{name} must have shape (..., length, dim), got rank {len(shape)}")
    if not (len(q_shape) == len(k_shape) == len(v_shape)):
        raise ValueError(f"q, k and v must have the same rank, got {len(q_shape)}, {len(k_shape)}, {len(v_shape)}")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(f"q and k must share the last dim d, got q {tuple(q_shape)} and k {tuple(k_shape)}")
    if k_shape[:-1] != v_shape[:-1]:
        raise ValueError(f"k and v must agree on all dims but the last, got k {tuple(k_shape)} and v {tuple(v_shape)}")
    if q_shape[-1] < 1 or v_shape[-1] < 1:
        raise ValueError("q, k and v need a last dim of at least 1")
    if len(q_shape) == 2:
        return 1
    if q_shape[:-3] != k_shape[:-3]:
        raise ValueError(f"q and k must share their batch dims, got q {tuple(q_shape)} and k {tuple(k_shape)}")
    hq, hkv = q_shape[-3], k_shape[-3]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"the query heads of q (axis -3: {hq}) must be a multiple of the key/value heads of k ({hkv})")
    return hq // hkv


def check_scale(scale, d: int) -> float:
    """`None` means 1/sqrt(d); otherwise a finite positive number."""
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    scale = float(scale)
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite positive number, got {scale}")
    return scale


def acc_dtype(*arrays) -> np.dtype:
    """Accumulators are float32 at least, float64 when any input is float64."""
    return np.result_type(np.float32, *[a.dtype for a in arrays])


def check_float_tensors(**tensors) -> None:
    """Each argument is a floating torch.Tensor, or raise TypeError naming it."""
    import torch

    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")


def check_positive(value, name: str, minimum: int = 1) -> int:
    """`value` as an int, or a TypeError (not an integer) or ValueError (below `minimum`) naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)
