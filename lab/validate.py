"""Input checks shared by every kernel: each raises before any work, naming the argument.

`check_qkv` is the one entry of the numpy attention kernels (forward, backward, merge, decoding): arrays,
shapes, finiteness, `causal` and `scale` in one call; `check_grads` does the same for a backward's
`do`, `o`, `lse`. `group_view` / `ungroup_view` give the grouped-query view every numpy kernel computes
on (each query head beside the key/value head it reads).
"""

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
            raise ValueError(
                f"{name} must have shape (..., length, dim), got rank {len(shape)}"
            )
    if not (len(q_shape) == len(k_shape) == len(v_shape)):
        raise ValueError(
            f"q, k and v must have the same rank, got {len(q_shape)}, {len(k_shape)}, {len(v_shape)}"
        )
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(
            f"q and k must share the last dim d, got q {tuple(q_shape)} and k {tuple(k_shape)}"
        )
    if k_shape[:-1] != v_shape[:-1]:
        raise ValueError(
            f"k and v must agree on all dims but the last, got k {tuple(k_shape)} and v {tuple(v_shape)}"
        )
    if q_shape[-1] < 1 or v_shape[-1] < 1:
        raise ValueError("q, k and v need a last dim of at least 1")
    if len(q_shape) == 2:
        return 1
    if q_shape[:-3] != k_shape[:-3]:
        raise ValueError(
            f"q and k must share their batch dims, got q {tuple(q_shape)} and k {tuple(k_shape)}"
        )
    hq, hkv = q_shape[-3], k_shape[-3]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(
            f"the query heads of q (axis -3: {hq}) must be a multiple of the key/value heads of k ({hkv})"
        )
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


def check_qkv_tensors(q, k, v, dtypes=None, kernel: str = "") -> int:
    """q, k, v are torch tensors of one floating dtype (one of `dtypes` when given) on one device, with compatible shapes; returns Hq // Hkv.

    The torch and Triton kernels' one check of their inputs; `kernel` ends the dtype message ("for the Triton kernel").
    """
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point() or (dtypes is not None and t.dtype not in dtypes):
            allowed = (
                ""
                if dtypes is None
                else " ("
                + ", ".join(str(d).removeprefix("torch.") for d in dtypes)
                + ")"
            )
            raise TypeError(
                f"{name} must have a floating dtype{allowed}{' ' + kernel if kernel else ''}, got {t.dtype}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    return check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))


def check_positive(value, name: str, minimum: int = 1) -> int:
    """`value` as an int, or a TypeError (not an integer) or ValueError (below `minimum`) naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_qkv(q, k, v, scale, causal=False):
    """`(q, k, v, group, scale)`: float arrays, the group size Hq // Hkv and the scale; every check (`causal` a bool included) before any work."""
    check_causal(causal)
    q = as_float_array(q, "q")
    k = as_float_array(k, "k")
    v = as_float_array(v, "v")
    group = check_qkv_shapes(q.shape, k.shape, v.shape)
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_finite(a, name)
    return q, k, v, group, check_scale(scale, q.shape[-1])


def check_grads(q, k, v, do, o=None, lse=None):
    """Check `do` (and `o`, `lse`) against checked q, k, v: shapes of o and of one lse per query row; return float arrays.

    `lse` may hold -inf (a row with no visible key), never NaN or +inf.
    """
    do = as_float_array(do, "do")
    want_o = tuple(q.shape[:-1]) + (v.shape[-1],)
    if do.shape != want_o:
        raise ValueError(f"do must have the shape of o, {want_o}, got {do.shape}")
    check_finite(do, "do")
    if o is None:
        return do, None, None
    o = as_float_array(o, "o")
    lse = as_float_array(lse, "lse")
    if o.shape != want_o:
        raise ValueError(f"o must have shape {want_o}, got {o.shape}")
    if lse.shape != tuple(q.shape[:-1]):
        raise ValueError(
            f"lse must have shape {tuple(q.shape[:-1])} (one per query row), got {lse.shape}"
        )
    check_finite(o, "o")
    if np.isnan(lse).any() or np.isposinf(lse).any():
        raise ValueError(
            "lse must not hold NaN or +inf (-inf marks a row with no visible key)"
        )
    return do, o, lse


def check_same_shape(a: np.ndarray, b: np.ndarray, names: str) -> None:
    """Raise ValueError unless `a` and `b` have one shape; `names` is how the message calls them ("o and do")."""
    if a.shape != b.shape:
        raise ValueError(
            f"{names} must have the same shape, got {a.shape} and {b.shape}"
        )


def check_sizes(**sizes) -> None:
    """Each keyword is an integer >= 1 (a bool is not), or a ValueError naming it: sizes of a formula (N, M, d, ...)."""
    for name, x in sizes.items():
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {x!r}")


def check_stats(stats) -> None:
    """`stats` is a dict (the kernel fills it) or None."""
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be a dict or None, got {type(stats).__name__}")


def check_block_mask_rank(block_mask, q: np.ndarray) -> None:
    """A precomputed `block_mask` needs 4-D inputs (B, H, N, d), as the mods do."""
    if block_mask is not None and q.ndim != 4:
        raise ValueError(
            f"block_mask needs 4-D q, k, v of shape (B, H, N, d), got q of rank {q.ndim}"
        )


def group_view(q, k, v, group: int):
    """View q as (..., Hkv, G, N, d) and k, v as (..., Hkv, 1, M, ·) so matmul broadcasts over the G query heads of a group."""
    if q.ndim == 2:
        return q, k, v
    q5 = q.reshape(q.shape[:-3] + (k.shape[-3], group) + q.shape[-2:])
    return q5, k[..., None, :, :], v[..., None, :, :]


def ungroup_view(x, q_shape, trailing):
    """Back from the grouped view to q's leading dims: shape `q_shape[:-1] + trailing`."""
    return x.reshape(tuple(q_shape[:-1]) + trailing)
