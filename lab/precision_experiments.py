"""What low-precision formats do to online softmax and attention, measured against float64.

Each function is one experiment, small enough to run in a fraction of a second; the experiments are numbered
across notebook 07_precision (1-3) and notebook 07_precision_in_attention (4-6):
  1. `p_rounding_error`, `p_error_grid` : P rounded to a format before P V, m, l, acc in FP32.
  2. `low_precision_sum`                : l summed in a low-precision format, one element or one block at a time.
  3. `overflow_threshold`, `softmax_in_format` : exp of unshifted scores against each format's largest value.
  4. `outlier_qkv`, `attention_standard_lowp`, `attention_tiled_lowp`, `rmse` : FlashAttention-3's
     outlier inputs, standard attention against the tiled algorithm in FP16 and FP8.
  5. `matmul_error`                     : an FP32 matmul whose inputs are rounded to TF32 (or any format).
  6. `compare_inputs`                   : experiments 1 and 4 on real inputs (`lab.load_activations`) and Gaussian ones.
     `p_error_ablation`                 : experiment 1 per head with Q, K from one set and V from the other.
FlashAttention-3's Table 3 setting, modelled as its §4.3 describes it, is in `lab/precision_fa3.py`.

Taught in: notebooks/07_precision.ipynb, notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from .attention import attention_reference, flash_attention_numpy
from .precision import FORMATS, round_to, truncate_tf32
from .validate import as_float_array, check_block, check_choice, check_finite

__all__ = [
    "gaussian_qkv",
    "relative_error",
    "p_rounding_error",
    "p_error_grid",
    "p_underflow",
    "p_error_parts",
    "low_precision_sum",
    "overflow_threshold",
    "softmax_in_format",
    "outlier_qkv",
    "attention_standard_lowp",
    "attention_tiled_lowp",
    "rmse",
    "matmul_error",
    "p_matmul_error_torch",
    "compare_inputs",
    "p_error_ablation",
    "FA3_TABLE3_RMSE",
]

# FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608), §4.3, Table 3: RMSE against an FP64 reference
# on inputs N(0,1) + N(0,100)·Bernoulli(0.001). Quoted, not measured here.
FA3_TABLE3_RMSE = {
    ("standard", "fp16"): 3.2e-4,
    ("tiled", "fp16"): 1.9e-4,
    ("standard", "fp8_e4m3"): 2.4e-2,
    ("tiled", "fp8_e4m3"): 9.1e-3,
}

_STORAGE = {
    "fp32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


def _check_fmt(fmt, name="fmt"):
    return check_choice(fmt, FORMATS, name)


def _check_positive(x, name):
    x = float(x)
    if not np.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite positive number, got {x}")
    return x


def _keys(M, N, name: str = "M"):
    """The number of keys `M`, also accepted under its older keyword `N` (the same count), checked."""
    if N is not None:
        if M is not None:
            raise ValueError(
                f"pass the number of keys once, as {name}, got both {name} and N"
            )
        M = N
    if M is None:
        raise ValueError(f"{name} (the number of keys) is required")
    return M


def gaussian_qkv(
    M: int | None = None,
    d: int = 64,
    spread: float = 1.0,
    rows: int = 8,
    seed: int = 0,
    *,
    N: int | None = None,
):
    """`rows` queries and `M` keys/values, float32, whose scores $s = q k^\\top/\\sqrt{d}$ have standard deviation `spread`.

    $q \\sim \\mathcal N(0, \\mathrm{spread}^2)$, $k, v \\sim \\mathcal N(0, 1)$; returns `q (rows, d), k (M, d), v (M, d)`.
    `N` is the older keyword for `M`.
    Taught in: notebooks/07_precision.ipynb, notebooks/07_precision_in_attention.ipynb
    """
    M = check_block(_keys(M, N), "M")
    d, rows = check_block(d, "d"), check_block(rows, "rows")
    spread = _check_positive(spread, "spread")
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((rows, d)) * spread).astype(np.float32)  # (rows, d)
    k = rng.standard_normal((M, d)).astype(np.float32)  # (M, d)
    v = rng.standard_normal((M, d)).astype(np.float32)  # (M, d)
    return q, k, v


def _pair(o, ref) -> tuple[np.ndarray, np.ndarray]:
    """`o` and `ref` as float64 arrays of one shape, or a ValueError naming them."""
    o = as_float_array(o, "o").astype(np.float64)
    ref = as_float_array(ref, "ref").astype(np.float64)
    if o.shape != ref.shape:
        raise ValueError(
            f"o and ref must have the same shape, got {o.shape} and {ref.shape}"
        )
    return o, ref


def relative_error(o, ref) -> float:
    """$\\|o - o_{ref}\\|_F / \\|o_{ref}\\|_F$, in float64.

    Taught in: notebooks/07_precision.ipynb, notebooks/07_precision_in_attention.ipynb
    """
    o, ref = _pair(o, ref)
    den = np.linalg.norm(ref)
    return (
        float(np.linalg.norm(o - ref) / den)
        if den > 0
        else float(np.linalg.norm(o - ref))
    )


def rmse(o, ref) -> float:
    """Root-mean-square error $\\sqrt{\\mathrm{mean}((o - o_{ref})^2)}$, in float64 (FlashAttention-3's Table 3 measure).

    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    o, ref = _pair(o, ref)
    return float(np.sqrt(np.mean((o - ref) ** 2)))


def p_rounding_error(q, k, v, fmt: str, *, block_k: int = 128, ref=None) -> float:
    """Relative error of tiled attention with each $P_{ij}$ rounded to `fmt` before $P_{ij} V_j$ (m, l, acc in FP32).

    `q (..., N, d)`, `k (..., M, d)`, `v (..., M, dv)` are taken as float32; `ref` (the float64 output
    of `attention_reference`) may be passed to save recomputing it.
    Taught in: notebooks/07_precision.ipynb
    """
    _check_fmt(fmt)
    q, k, v = (
        as_float_array(a, n).astype(np.float32)
        for a, n in ((q, "q"), (k, "k"), (v, "v"))
    )
    if ref is None:
        ref = attention_reference(
            q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
        )[0]
    o, _ = flash_attention_numpy(
        q, k, v, block_q=max(1, q.shape[-2]), block_k=block_k, p_format=fmt
    )
    return relative_error(o, ref)


def p_error_grid(
    Ms=None,
    spreads=None,
    formats=("fp32", "bf16", "fp16", "fp8_e4m3"),
    *,
    d: int = 64,
    rows: int = 8,
    block_k: int = 128,
    seed: int = 0,
    Ns=None,
) -> dict:
    """Relative error of `p_rounding_error` for every format, spread and number of keys M:
    `{fmt: array (len(spreads), len(Ms))}`.

    The keys of the largest M are drawn once per spread and the first M of them are used for each M.
    `Ns` is the older keyword for `Ms`.
    Taught in: notebooks/07_precision.ipynb
    """
    Ms = [check_block(int(n), "Ms") for n in _keys(Ms, Ns, "Ms")]
    spreads = [_check_positive(s, "spreads") for s in (spreads or [])]
    for f in formats:
        _check_fmt(f, "formats")
    if not Ms or not spreads:
        raise ValueError("Ms and spreads must not be empty")
    grid = {f: np.zeros((len(spreads), len(Ms))) for f in formats}
    for a, spread in enumerate(spreads):
        q, k, v = gaussian_qkv(max(Ms), d, spread, rows, seed)
        for b, M in enumerate(Ms):
            ref = attention_reference(
                q.astype(np.float64), k[:M].astype(np.float64), v[:M].astype(np.float64)
            )[0]
            for f in formats:
                grid[f][a, b] = p_rounding_error(
                    q, k[:M], v[:M], f, block_k=block_k, ref=ref
                )
    return grid


def p_underflow(q, k, fmt: str, *, block_k: int = 128, scale: float = 1.0) -> dict:
    """What rounding to `fmt` does to the tiles' $P_{ij} = e^{S_{ij} - m_{running}}$ of one pass over the keys.

    Returns `p` (every P entry as the kernel forms it, float32, shape `(..., N, M)` flattened), the
    fraction of all entries that are nonzero in float32 and round to 0 in `fmt` (`flushed`), the
    fraction already 0 in float32 (`zero_fp32`: $e^{s - m}$ below float32's smallest subnormal), the
    fraction 0 in `fmt` for either reason (`zero`, = flushed + zero_fp32), and the share of the
    softmax mass the flushed entries held (`mass_lost`, against the final l). `scale`: each $P_{ij}$ is
    multiplied by it before the rounding (FlashAttention-3's FP8 kernel uses 256), as in `p_error_parts`.
    Taught in: notebooks/07_precision.ipynb
    """
    _check_fmt(fmt)
    Bc = check_block(block_k, "block_k")
    q = as_float_array(q, "q").astype(np.float32)
    k = as_float_array(k, "k").astype(np.float32)
    if q.ndim != 2 or k.ndim != 2 or q.shape[1] != k.shape[1]:
        raise ValueError(
            f"q and k must be (N, d) and (M, d), got {q.shape} and {k.shape}"
        )
    check_finite(q, "q")
    check_finite(k, "k")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    s = (q / np.float32(np.sqrt(q.shape[1]))) @ k.T  # S: (N, M)
    m = np.full(q.shape[0], -np.inf, np.float32)  # running max, (N,)
    tiles = []
    for j0 in range(0, k.shape[0], Bc):
        s_j = s[:, j0 : j0 + Bc]  # S_ij: (N, Bc)
        m = np.maximum(m, s_j.max(axis=1))
        tiles.append(np.exp(s_j - m[:, None]))  # P_ij = exp(S_ij - m_running)
    p = np.concatenate(tiles, axis=1)  # P as formed per tile: (N, M)
    weight = np.exp(
        s - s.max(axis=1, keepdims=True)
    )  # its final softmax weight, unnormalized
    rounded = round_to(p * np.float32(scale), fmt)
    zero = (rounded == 0) & (p > 0)
    return {
        "p": p.ravel(),
        "flushed": float(zero.mean()),
        "zero_fp32": float((p == 0).mean()),
        "zero": float((rounded == 0).mean()),
        "mass_lost": float((weight * zero).sum() / weight.sum()),
        "fmt": fmt,
    }


def p_error_parts(q, k, v, fmt: str, *, block_k: int = 128, scale: float = 1.0) -> dict:
    """The relative error of o from rounding each $P_{ij}$ to `fmt`, and its two parts, one pass over the keys.

    `both`: every entry rounded (as `p_rounding_error`); `flush`: only the entries that round to 0 are lost,
    the others kept exact; `mantissa`: every entry rounded except those, kept exact. `scale`: each $P_{ij}$ is
    multiplied by it before the rounding and divided by it after (a per-tensor scale, e.g. 256 for FP8 e4m3,
    so that $P \\le 1$ uses more of the format's range). m, l (from the unrounded P) and acc stay float32.
    Taught in: notebooks/07_precision.ipynb
    """
    _check_fmt(fmt)
    Bc = check_block(block_k, "block_k")
    q, k, v = (
        as_float_array(a, n).astype(np.float32)
        for a, n in ((q, "q"), (k, "k"), (v, "v"))
    )
    if q.ndim != 2 or k.shape != (k.shape[0], q.shape[1]) or len(v) != len(k):
        raise ValueError(
            f"q, k, v must be (N, d), (M, d), (M, dv), got {q.shape}, {k.shape}, {v.shape}"
        )
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    ref = attention_reference(*(a.astype(np.float64) for a in (q, k, v)))[0]
    s = (q / np.float32(np.sqrt(q.shape[1]))) @ k.T  # S: (N, M)
    m = np.full(len(q), -np.inf, np.float32)
    l = np.zeros(len(q), np.float32)
    acc = {part: np.zeros((len(q), v.shape[1]), np.float32) for part in _PARTS}
    sc = np.float32(scale)
    for j0 in range(0, len(k), Bc):
        s_j, v_j = s[:, j0 : j0 + Bc], v[j0 : j0 + Bc]
        m_new = np.maximum(m, s_j.max(axis=1))
        alpha, p = np.exp(m - m_new), np.exp(s_j - m_new[:, None])
        r = round_to(p * sc, fmt) / sc  # fl(P), scaled into the format and back
        lost = (r == 0) & (p > 0)
        kept = {
            "both": r,
            "flush": np.where(lost, 0, p),
            "mantissa": np.where(lost, p, r),
        }
        for part, x in kept.items():
            acc[part] = alpha[:, None] * acc[part] + x.astype(np.float32) @ v_j
        l, m = alpha * l + p.sum(axis=1), m_new
    return {part: relative_error(a / l[:, None], ref) for part, a in acc.items()} | {
        "fmt": fmt,
        "scale": float(scale),
    }


_PARTS = ("both", "flush", "mantissa")


def low_precision_sum(p, fmt: str, block: int = 1) -> np.ndarray:
    """Running $l$ in `fmt`: $l \\leftarrow \\mathrm{fl}(l + \\mathrm{fl}(\\textstyle\\sum_{block} p))$, each block summed in `fmt` too.

    `p (M,)` is first rounded to `fmt`; every addition is rounded to `fmt` (ml_dtypes / numpy
    arithmetic in the format). Returns the running sum after each block, float64, shape `(ceil(M/block),)`.
    With `block=1` it is the plain one-element-at-a-time sum.
    Taught in: notebooks/07_precision.ipynb
    """
    _check_fmt(fmt)
    B = check_block(block, "block")
    p = as_float_array(p, "p")
    if p.ndim != 1:
        raise ValueError(f"p must be one-dimensional, got shape {p.shape}")
    x = round_to(p, fmt)  # (M,)
    nb = -(-x.size // B)
    xb = np.zeros(nb * B, np.float32)
    xb[: x.size] = x
    xb = xb.reshape(nb, B)  # (blocks, block)
    part = (
        _accumulate(xb, fmt, axis=1)[:, -1] if B > 1 else xb[:, 0]
    )  # each block's sum, in fmt
    return _accumulate(part, fmt, axis=0).astype(np.float64)


def _accumulate(x: np.ndarray, fmt: str, axis: int) -> np.ndarray:
    """Running sums along `axis` with every addition rounded to `fmt`; float32 out."""
    if fmt in _STORAGE:
        return np.add.accumulate(x.astype(_STORAGE[fmt]), axis=axis).astype(np.float32)
    # tf32 has no storage type: add in float32 (exact enough: 24 >= 2·11 + 2 bits) and round each step
    x = np.moveaxis(x, axis, 0)
    if (
        x.ndim == 1
    ):  # one running sum: Python floats, the same roundings without an array per step
        total, out = 0.0, []
        for xi in x.tolist():
            total = _tf32_float(total + xi)
            out.append(total)
        return np.array(out, np.float32)
    out = np.empty_like(x)
    total = np.zeros(x.shape[1:], np.float32)
    for i in range(x.shape[0]):
        total = round_to(total + x[i], fmt)
        out[i] = total
    return np.moveaxis(out, 0, axis)


_FP32_MAX = float(np.finfo(np.float32).max)


def _tf32_float(v: float) -> float:
    """`round_to(v, "tf32")` for one Python float: $2^{e-10}$ steps (ties to even), $2^{-136}$ below $2^{-126}$.

    The sum of two TF32 numbers in float64 rounds to the same TF32 value as their float32 sum: exact
    while their exponents differ by at most 13 bits, and beyond that the smaller is under a quarter step."""
    if v == 0.0 or not math.isfinite(v):
        return v
    _, e = math.frexp(v)  # v = f·2^e, f in [0.5, 1)
    quantum_exp = max(e - 1, -126) - 10
    r = math.ldexp(
        round(math.ldexp(v, -quantum_exp)), quantum_exp
    )  # round(): ties to even
    return r if abs(r) <= _FP32_MAX else math.copysign(math.inf, r)


def overflow_threshold(fmt: str) -> float:
    """The largest score $s$ whose $\\mathrm{fl}_{fmt}(e^{s})$ is still finite, found by bisection on `round_to`.

    Close to $\\ln x_{max}$ of the format, a little above: values less than half a step past $x_{max}$ round
    down to it; exactly half a step is a tie, which goes to the even neighbour: $\\infty$ in FP16 (65520),
    but 448 in e4m3 (464: 448's last mantissa bit is 0), whose NaN starts above 464.
    Taught in: notebooks/07_precision.ipynb
    """
    _check_fmt(fmt)
    lo, hi = 0.0, 100.0  # exp(0) fits every format; exp(100) none
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        with np.errstate(over="ignore"):
            ok = np.isfinite(round_to(np.array([np.exp(mid)]), fmt)[0])
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def softmax_in_format(s, fmt: str, *, subtract_max: bool = True) -> np.ndarray:
    """$p = \\mathrm{fl}_{fmt}(e^{s - m}) / \\sum \\mathrm{fl}_{fmt}(e^{s - m})$ over the last axis, with $m = \\max s$ or $m = 0$.

    The exponentials are stored in `fmt` (the sum and division in float32), so without the max
    subtraction a score past `overflow_threshold(fmt)` turns the row into NaN.
    Taught in: notebooks/07_precision.ipynb
    """
    _check_fmt(fmt)
    s = as_float_array(s, "s").astype(np.float32)
    m = (
        s.max(axis=-1, keepdims=True)
        if subtract_max
        else np.zeros(s.shape[:-1] + (1,), np.float32)
    )
    with np.errstate(over="ignore", invalid="ignore"):
        e = round_to(np.exp(s - m), fmt)  # (..., M)
        return e / e.sum(axis=-1, keepdims=True)


def outlier_qkv(
    shape=(4, 512, 64),
    *,
    p: float = 0.001,
    outlier_std: float = 10.0,
    seed: int = 0,
    storage: str | None = "fp16",
):
    """Q, K, V with entries $\\mathcal N(0,1) + \\mathcal N(0, \\sigma^2)\\cdot\\mathrm{Bernoulli}(p)$, as in FlashAttention-3 §4.3.

    Returns three arrays of `shape` (H, N, d): float32 rounded to `storage` (fp16 by default, the model's storage
    format, so every precision starts from the same inputs), or the float64 draws themselves with `storage=None`.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    shape = tuple(check_block(int(s), "shape") for s in shape)
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    outlier_std = float(outlier_std)
    if not np.isfinite(outlier_std) or outlier_std < 0:
        raise ValueError(f"outlier_std must be a finite number >= 0, got {outlier_std}")
    if storage is not None:
        _check_fmt(storage, "storage")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(3):
        x = rng.standard_normal(shape) + rng.standard_normal(shape) * outlier_std * (
            rng.random(shape) < p
        )
        out.append(
            x if storage is None else round_to(x.astype(np.float32), storage)
        )  # (H, N, d)
    return tuple(out)


def _low_inputs(q, k, v, fmt):
    q, k, v = (as_float_array(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    for a, n in ((q, "q"), (k, "k"), (v, "v")):
        check_finite(a, n)
    if (
        q.shape[-1] != k.shape[-1]
        or k.shape[:-1] != v.shape[:-1]
        or q.shape[:-2] != k.shape[:-2]
    ):
        raise ValueError(
            f"q, k, v must be (..., N, d), (..., M, d), (..., M, dv), got {q.shape}, {k.shape}, {v.shape}"
        )
    return tuple(round_to(a, fmt) for a in (q, k, v))


def attention_standard_lowp(
    q, k, v, fmt: str = "fp16", *, store_o: bool = True
) -> np.ndarray:
    """Standard attention with its intermediates stored in low precision: $S$ and $P$ in FP16, $P$ fed to $PV$ in `fmt`.

    $Q, K, V \\leftarrow \\mathrm{fl}_{fmt}$; $S = \\mathrm{fl}_{16}(Q K^\\top/\\sqrt d)$ (FP32 accumulation);
    $P = \\mathrm{fl}_{16}(\\mathrm{softmax}(S))$ (softmax computed in FP32); $O = \\mathrm{fl}_{16}(\\mathrm{fl}_{fmt}(P) V)$ (FP32 accumulation).
    `store_o=False` leaves out the final FP16 store of $O$ (returned in FP32).
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    _check_fmt(fmt)
    q, k, v = _low_inputs(q, k, v, fmt)
    s = round_to(
        (q @ np.swapaxes(k, -1, -2)) / np.float32(np.sqrt(q.shape[-1])), "fp16"
    )  # S: (..., N, M)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = round_to(p / p.sum(axis=-1, keepdims=True), "fp16")  # P: (..., N, M)
    o = round_to(p, fmt) @ v  # (..., N, dv), FP32 accumulation
    return round_to(o, "fp16") if store_o else o


def attention_tiled_lowp(
    q,
    k,
    v,
    fmt: str = "fp16",
    *,
    block_q: int = 64,
    block_k: int = 64,
    store_o: bool = True,
) -> np.ndarray:
    """The tiled kernel with Q, K, V and each block $P_{IJ}$ rounded to `fmt`, $S_{IJ}$, m, l, acc in FP32, and $O$ stored in FP16.

    `store_o=False` leaves out the final FP16 store of $O$ (returned in FP32).

    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    _check_fmt(fmt)
    q, k, v = _low_inputs(q, k, v, fmt)
    o, _ = flash_attention_numpy(
        q, k, v, block_q=block_q, block_k=block_k, p_format=fmt
    )
    return round_to(o, "fp16") if store_o else o  # (..., N, dv)


def matmul_error(a, b, fmt: str = "tf32", *, truncate: bool = False) -> float:
    """Relative error $\\|\\mathrm{fl}_{fmt}(A)\\,\\mathrm{fl}_{fmt}(B) - AB\\|_F / \\|AB\\|_F$, the product accumulated in FP32.

    This is what an FP32 matmul on tensor cores in TF32 mode does: it keeps 10 of the inputs' mantissa
    bits and an FP32 accumulator. `truncate=True` (TF32 only) drops the other bits (`truncate_tf32`)
    instead of rounding to nearest.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    _check_fmt(fmt)
    a = as_float_array(a, "a")
    b = as_float_array(b, "b")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a and b must be (N, K) and (K, M), got {a.shape} and {b.shape}"
        )
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if truncate:
        if fmt != "tf32":
            raise ValueError(f"truncate=True models TF32 only, got fmt={fmt!r}")
        return relative_error(truncate_tf32(a) @ truncate_tf32(b), ref)
    return relative_error(round_to(a, fmt) @ round_to(b, fmt), ref)


def compare_inputs(
    inputs: dict,
    formats=("bf16", "fp16", "fp8_e4m3"),
    *,
    block: int = 64,
    store_o: bool = True,
) -> dict:
    """Experiments 1 and 4b on several input sets: `{name: {"p": {fmt: rel. error}, "rmse": {(alg, fmt): RMSE}, "spread", "rms_ref"}}`.

    `inputs` maps a name to `(q, k, v)` of shapes `(..., N, d)`, `(..., M, d)`, `(..., M, dv)`; "p" rounds
    only P (`p_rounding_error`), "rmse" runs `attention_standard_lowp` and `attention_tiled_lowp` for
    fp16 and fp8_e4m3 (`store_o` passed on: False leaves out their final FP16 store of O), all
    against the float64 `attention_reference`; "spread" is the std of the scores
    $s = qk^\\top/\\sqrt d$ (all heads pooled; "spread_heads" one per head) and "rms_ref" the RMS of the reference output (to compare RMSEs across sets).
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    for f in formats:
        _check_fmt(f, "formats")
    B = check_block(block, "block")
    out = {}
    for name, (q, k, v) in inputs.items():
        q, k, v = (
            as_float_array(a, n).astype(np.float32)
            for a, n in ((q, "q"), (k, "k"), (v, "v"))
        )
        ref, _ = attention_reference(
            q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
        )
        s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) / np.sqrt(
            q.shape[-1]
        )  # (..., N, M)
        out[name] = {
            "p": {f: p_rounding_error(q, k, v, f, block_k=B, ref=ref) for f in formats},
            "rmse": {
                (alg, f): rmse(fn(q, k, v, f, store_o=store_o), ref)
                for f in ("fp16", "fp8_e4m3")
                for alg, fn in (
                    ("standard", attention_standard_lowp),
                    ("tiled", attention_tiled_lowp),
                )
            },
            "spread": float(s.std()),
            "spread_heads": s.std(axis=(-1, -2)).ravel(),  # one std per head
            "rms_ref": rmse(ref, np.zeros_like(ref)),
        }
    return out


def p_error_ablation(real, gauss, fmt: str = "bf16", *, block_k: int = 64) -> dict:
    """Experiment 1 per head with the scores and the values taken from either set: `{(qk, v): errors}`.

    `real` and `gauss` are `(q, k, v)` of one shape `(..., N, d)`; a key `(qk, v)` is a pair of
    `"real"`/`"Gaussian"`, and its value is the array of `p_rounding_error` (P rounded to `fmt`), one per
    head (the leading axes flattened), so that a head whose output is large does not outweigh the others.
    Taught in: notebooks/07_precision_in_attention.ipynb
    """
    _check_fmt(fmt)
    sets = {}
    for name, qkv in (("real", real), ("Gaussian", gauss)):
        q, k, v = (as_float_array(a, n).astype(np.float32) for a, n in zip(qkv, "qkv"))
        if not q.shape == k.shape == v.shape or q.ndim < 2:
            raise ValueError(
                f"{name}: q, k, v must share one shape (..., N, d), "
                f"got {q.shape}, {k.shape}, {v.shape}"
            )
        sets[name] = tuple(a.reshape((-1,) + a.shape[-2:]) for a in (q, k, v))
    if sets["real"][0].shape != sets["Gaussian"][0].shape:
        raise ValueError(
            f"real and gauss must have one shape, got {sets['real'][0].shape} "
            f"and {sets['Gaussian'][0].shape}"
        )
    out = {}
    for qk in ("real", "Gaussian"):
        for vs in ("real", "Gaussian"):
            q, k = sets[qk][:2]
            v = sets[vs][2]
            out[(qk, vs)] = np.array(
                [
                    p_rounding_error(q[h], k[h], v[h], fmt, block_k=block_k)
                    for h in range(q.shape[0])
                ]
            )
    return out


_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn"}


def p_matmul_error_torch(
    fmt: str = "fp16",
    *,
    M: int = 4096,
    rows: int = 16,
    d: int = 64,
    spread: float = 1.0,
    seed: int = 0,
    device: str = "cuda",
) -> dict:
    r"""Experiment 1 through a real matmul: $P$ cast to `fmt` in torch, times $V$, accumulated in FP32.

    $o = \mathrm{fl}(P)V / l$ for one tile of `rows` query rows over all M keys, $P = e^{S - m}$ in float32 and $l$
    summed from the unrounded $P$. $V$ is rounded to `fmt` first and the float64 reference uses that rounded $V$
    too, so the error is $P$'s rounding alone. FP16 and BF16 go through `torch.mm(..., out_dtype=torch.float32)`
    (FP32 output) where the device has it, else both operands upcast to float32 (their products are exact);
    FP8 e4m3 goes through `torch._scaled_mm` (scales 1, FP32 output), which needs a GPU with FP8 tensor cores.
    Returns `torch` (the relative error of o), `numpy` (the same rounding in numpy) and `path` (what ran).
    Taught in: notebooks/07_precision.ipynb
    """
    import torch

    check_choice(fmt, tuple(_TORCH_DTYPES), "fmt")
    q, k, v = gaussian_qkv(M, d, spread, rows, seed)
    s = q.astype(np.float64) @ k.astype(np.float64).T / np.sqrt(d)  # (rows, M)
    p = np.exp(s - s.max(axis=1, keepdims=True)).astype(np.float32)  # (rows, M), <= 1
    l = p.astype(np.float64).sum(axis=1, keepdims=True)
    v_r = round_to(v, fmt)  # (M, d) exactly representable in fmt
    ref = p.astype(np.float64) @ v_r.astype(np.float64) / l
    ours = round_to(p, fmt).astype(np.float64) @ v_r.astype(np.float64) / l
    dtype = getattr(torch, _TORCH_DTYPES[fmt])
    pt = torch.from_numpy(p).to(device).to(dtype)
    vt = torch.from_numpy(v_r).to(device).to(dtype)
    if fmt == "fp8_e4m3":
        one = torch.ones((), device=device)
        vt_col = (
            vt.t().contiguous().t()
        )  # _scaled_mm takes its second operand column-major
        out = torch._scaled_mm(
            pt, vt_col, scale_a=one, scale_b=one, out_dtype=torch.float32
        )
        path = "torch._scaled_mm, FP8 e4m3 inputs, FP32 output"
    else:
        try:
            out = torch.mm(pt, vt, out_dtype=torch.float32)
            path = f"torch.mm, {fmt.upper()} inputs, out_dtype=float32"
        except (RuntimeError, TypeError, NotImplementedError):
            out = pt.float() @ vt.float()
            path = f"{fmt.upper()} inputs upcast to float32, torch.matmul"
    o = out.cpu().double().numpy() / l
    return {
        "torch": relative_error(o, ref),
        "numpy": relative_error(ours, ref),
        "path": path,
    }
