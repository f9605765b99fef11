"""Masks and score modifiers: which (query, key) pairs attention keeps, and how their scores change.

FlexAttention's two hooks, as plain functions of broadcastable integer index arrays (numpy arrays in
the numpy kernels, torch tensors in the torch one): `score_mod(s, b, h, i, j) -> s'` changes the scaled
scores, `mask_mod(b, h, i, j) -> bool` keeps key j for query i. `h` is the query head. Order, in every
kernel: $s = \\mathrm{scale}\\,q k^\\top$, $s \\leftarrow$ score_mod, mask ($-\\infty$ where not kept), softmax.

A ladder (each rung: what changed):
  0. `attention_reference(..., mask_mod=, score_mod=)` : the mods on the full N×M matrix; the oracle.
  1. `block_mask` : the mask summarized per (query block, key block) tile: 0 empty, 1 partial, 2 full.
  2. the tiled kernels : skip empty tiles (K_j, V_j never loaded), evaluate the mask on partial tiles
     only, apply score_mod to every computed tile before the running max.

Builders (each returns a mod for both numpy and torch): `sliding_window`, `document_mask`, `and_masks`,
`alibi`, `softcap`; `prefix_lm` and `dilated_window` are the specs of two exercises; `clipped_alibi` is ALiBi with a maximum distance.
Offsets follow flash-attn's bottom-right alignment, `off = M - N`.

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import contextlib
import math
import numbers
import sys

import numpy as np

from .rules import causal_key_end
from .validate import check_block

__all__ = [
    "sliding_window",
    "document_mask",
    "and_masks",
    "alibi",
    "alibi_slopes",
    "softcap",
    "prefix_lm",
    "dilated_window",
    "clipped_alibi",
    "block_mask",
    "BlockMask",
]

KINDS = {0: "empty", 1: "partial", 2: "full"}


class _Mod:
    """A mod made by a builder: the function, the shapes it was built for, and (score mods) its derivative."""

    def __init__(self, fn, name: str, needs=(), derivative=None):
        self.fn, self.name, self.needs, self.derivative = (
            fn,
            name,
            tuple(needs),
            derivative,
        )

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self):
        return self.name


def _is_torch(x) -> bool:
    """Whether x is a torch tensor; torch is never imported for numpy inputs."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _torch():
    """torch, for a mod given torch tensors (it is loaded already: a tensor reached the mod)."""
    import torch

    return torch


def _table(values: np.ndarray, like, dtype=None):
    """`values` as an array of `like`'s kind: numpy as it is, or a torch tensor on `like`'s device."""
    if _is_torch(like):
        return _torch().as_tensor(values, dtype=dtype, device=like.device)
    return values if dtype is None else values.astype(dtype)


def _length(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {n!r}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return int(n)


def _window_side(w, name: str):
    if w is None:
        return None
    if isinstance(w, bool) or not isinstance(w, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative integer or None, got {w!r}")
    if w < 0:
        raise ValueError(f"{name} must be >= 0 (None for unbounded), got {w}")
    return int(w)


def _ids(x, name: str) -> np.ndarray:
    """A 1-D integer numpy array from a list, array or tensor of document ids."""
    a = x.detach().cpu().numpy() if _is_torch(x) else np.asarray(x)
    if a.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one document id per position), got shape {a.shape}"
        )
    if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")
    return a.astype(np.int64)


def sliding_window(left, right, N: int, M: int):
    """Mask: keep iff $i + off - left \\le j \\le i + off + right$, `off = M - N` (None: that side unbounded).

    `sliding_window(None, 0, N, M)` is causal; `left=W-1, right=0` is a causal window of W keys.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    left, right = _window_side(left, "left"), _window_side(right, "right")
    N, M = _length(N, "N"), _length(M, "M")
    off = M - N

    def mask_mod(b, h, i, j):
        keep = (i >= 0) & (j >= 0)  # all True, broadcast to (.., n, m)
        if left is not None:
            keep = keep & (j >= i + (off - left))
        if right is not None:
            keep = keep & (j <= i + (off + right))
        return keep

    return _Mod(
        mask_mod,
        f"sliding_window({left}, {right}, N={N}, M={M})",
        needs=(("N", N), ("M", M)),
    )


def document_mask(q_doc, k_doc):
    """Mask: keep iff `q_doc[i] == k_doc[j]`: packed documents never see each other.

    `q_doc` (length N) and `k_doc` (length M) are 1-D integer arrays of document ids.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    q_doc, k_doc = _ids(q_doc, "q_doc"), _ids(k_doc, "k_doc")

    def mask_mod(b, h, i, j):
        return _table(q_doc, i)[i] == _table(k_doc, j)[j]

    return _Mod(
        mask_mod,
        f"document_mask({len(q_doc)} query ids, {len(k_doc)} key ids)",
        needs=(("N", len(q_doc), "q_doc"), ("M", len(k_doc), "k_doc")),
    )


def and_masks(*mask_mods):
    """Mask: keep where every one of `mask_mods` keeps (no argument: keep all).

    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    for n, mod in enumerate(mask_mods):
        if not callable(mod):
            raise TypeError(
                f"mask_mods[{n}] must be callable, got {type(mod).__name__}"
            )

    def mask_mod(b, h, i, j):
        keep = (i >= 0) & (j >= 0)
        for mod in mask_mods:
            keep = keep & mod(b, h, i, j)
        return keep

    needs = [need for mod in mask_mods for need in getattr(mod, "needs", ())]
    return _Mod(
        mask_mod, "and_masks(" + ", ".join(map(repr, mask_mods)) + ")", needs=needs
    )


def alibi_slopes(H: int) -> np.ndarray:
    """ALiBi's head slopes: for H a power of two, $2^{-8k/H}$ for k = 1..H (Press et al. 2022, §3).

    Otherwise the slopes of the nearest lower power of two, then every other slope of the next one.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    H = _length(H, "H")
    if H == 0:
        return np.zeros(0)
    p = 2 ** int(math.floor(math.log2(H)))
    base = [2.0 ** (-8.0 * k / p) for k in range(1, p + 1)]
    extra = [2.0 ** (-8.0 * k / (2 * p)) for k in range(1, 2 * p + 1)][0::2][: H - p]
    return np.array(base + extra)


def alibi(slopes, N: int, M: int):
    """Score mod: $s - \\mathrm{slopes}[h]\\,|i + off - j|$, `off = M - N`; its derivative in s is 1.

    `slopes` has one entry per query head (see `alibi_slopes`).
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    if _is_torch(slopes) and slopes.requires_grad:
        raise ValueError(
            "alibi: slopes must not require grad (the kernels do not return gradients for them)"
        )
    slopes = slopes.detach().cpu().numpy() if _is_torch(slopes) else np.asarray(slopes)
    if (
        slopes.ndim != 1
        or not np.issubdtype(slopes.dtype, np.number)
        or not np.isfinite(slopes).all()
    ):
        raise ValueError(
            f"alibi: slopes must be a 1-D array of finite numbers, got {slopes!r}"
        )
    slopes = slopes.astype(np.float64)
    N, M = _length(N, "N"), _length(M, "M")
    off = M - N

    def score_mod(s, b, h, i, j):
        return s - _table(slopes, s, s.dtype)[h] * abs(i + off - j)

    return _Mod(
        score_mod,
        f"alibi({len(slopes)} slopes, N={N}, M={M})",
        needs=(("H", len(slopes), "slopes"), ("N", N), ("M", M)),
        derivative=lambda s, b, h, i, j: None,
    )


def softcap(cap):
    """Score mod: $\\mathrm{cap}\\cdot\\tanh(s/\\mathrm{cap})$, so every score lies in (-cap, cap); derivative $1 - \\tanh^2(s/\\mathrm{cap})$.

    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real):
        raise TypeError(f"cap must be a positive number, got {cap!r}")
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError(f"cap must be a finite number > 0, got {cap}")
    cap = float(cap)

    def tanh(x):
        return _torch().tanh(x) if _is_torch(x) else np.tanh(x)

    return _Mod(
        lambda s, b, h, i, j: cap * tanh(s / cap),
        f"softcap({cap:g})",
        derivative=lambda s, b, h, i, j: 1 - tanh(s / cap) ** 2,
    )


def prefix_lm(prefix: int, N: int, M: int):
    """Mask of a prefix LM: every query sees the first `prefix` keys, and the other keys causally (bottom-right).

    Taught in: notebooks/11_masks_and_score_mods.ipynb (its exercises)
    """
    prefix, N, M = _length(prefix, "prefix"), _length(N, "N"), _length(M, "M")
    return _Mod(
        lambda b, h, i, j: (j < prefix) | (j <= i + (M - N)),
        f"prefix_lm({prefix}, N={N}, M={M})",
        needs=(("N", N), ("M", M)),
    )


def dilated_window(window: int, dilation: int, N: int, M: int):
    """Mask: a causal window of `window` keys of which every `dilation`-th, counted back from the query, is kept.

    Bottom-right aligned, as every mask of the course. Taught in:
    notebooks/11_masks_and_score_mods.ipynb (its exercises)
    """
    window, dilation, N, M = (
        _length(window, "window"),
        _length(dilation, "dilation"),
        _length(N, "N"),
        _length(M, "M"),
    )
    if dilation < 1:
        raise ValueError(f"dilation must be >= 1, got {dilation}")
    off = M - N
    return _Mod(
        lambda b, h, i, j: (
            (j <= i + off) & (j > i + off - window) & ((i + off - j) % dilation == 0)
        ),
        f"dilated_window({window}, {dilation}, N={N}, M={M})",
        needs=(("N", N), ("M", M)),
    )


def clipped_alibi(slopes, max_distance: int, N: int, M: int):
    """Score mod: ALiBi whose penalty stops growing at the distance `max_distance` (bottom-right aligned).

    Taught in: notebooks/11_masks_and_score_mods.ipynb (its exercises)
    """
    base = alibi(slopes, N, M)
    D = _length(max_distance, "max_distance")
    slopes, off = np.asarray(slopes, dtype=np.float64), M - N

    def score_mod(s, b, h, i, j):
        dist = abs(i + off - j)
        dist = _torch().clamp(dist, max=D) if _is_torch(dist) else np.minimum(dist, D)
        return s - _table(slopes, s, s.dtype)[h] * dist

    return _Mod(
        score_mod,
        f"clipped_alibi({len(slopes)} slopes, {D}, N={N}, M={M})",
        needs=base.needs,
        derivative=base.derivative,
    )


# ------------------------------------------------------------------------------------ checks and index arrays


def index_arrays(B: int, H: int, i0: int, i1: int, j0: int, j1: int, like=None):
    """`(b, h, i, j)` shaped (B,1,1,1), (1,H,1,1), (1,1,n,1), (1,1,1,m): numpy, or torch on `like`'s device."""
    if _is_torch(like):
        ar = lambda *a: _torch().arange(*a, device=like.device)  # noqa: E731
    else:
        ar = np.arange
    return (
        ar(B).reshape(B, 1, 1, 1),
        ar(H).reshape(1, H, 1, 1),
        ar(i0, i1).reshape(1, 1, -1, 1),
        ar(j0, j1).reshape(1, 1, 1, -1),
    )


def _kept(mask_mod, causal: bool, N: int, M: int, idx):
    """The kept elements of one tile, `mask_mod & causal`, broadcastable to (B, H, n, m); None means all kept."""
    b, h, i, j = idx
    keep = None if mask_mod is None else mask_mod(b, h, i, j)
    if causal:
        c = j < causal_key_end(i, N, M)
        keep = c if keep is None else keep & c
    return keep


def check_mods(
    mask_mod, score_mod, q_shape, k_shape, like=None, grad: bool = False
) -> None:
    """Raise a clear error for mods that cannot work on these shapes, before any work.

    Checks: 4-D inputs, callables, the shapes a builder was made for, and one probe tile: the mask is
    boolean and broadcasts to (B, H, n, m); the score mod returns s's shape and acts elementwise.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    if mask_mod is None and score_mod is None:
        return
    if len(q_shape) != 4 or len(k_shape) != 4:
        raise ValueError(
            f"mask_mod and score_mod need 4-D q, k, v of shape (B, H, N, d), got q of rank {len(q_shape)}"
        )
    dims = dict(B=q_shape[0], H=q_shape[1], N=q_shape[2], M=k_shape[2])
    for name, mod in (("mask_mod", mask_mod), ("score_mod", score_mod)):
        if mod is None:
            continue
        if not callable(mod):
            raise TypeError(f"{name} must be callable, got {type(mod).__name__}")
        for axis, want, *label in getattr(mod, "needs", ()):
            if dims[axis] != want:
                what = (
                    f": {label[0]} has length {want}"
                    if label
                    else f" is built for {axis} = {want}"
                )
                raise ValueError(
                    f"{name} {mod!r}{what}, but the inputs have {axis} = {dims[axis]}"
                )
    B, H, N, M = dims["B"], dims["H"], dims["N"], dims["M"]
    n, m = min(N, 3), min(M, 4)
    if n == 0 or m == 0:
        return
    idx = index_arrays(B, H, 0, n, 0, m, like)
    if mask_mod is not None:
        _probe_mask(mask_mod, idx, (B, H, n, m))
    if score_mod is not None:
        _probe_score(score_mod, idx, (B, H, n, m), like, grad)


def _probe_mask(mask_mod, idx, shape) -> None:
    keep = mask_mod(*idx)
    if _is_torch(keep):
        dtype, boolean = keep.dtype, keep.dtype == _torch().bool
    else:
        dtype = np.asarray(keep).dtype
        boolean = dtype == np.dtype(bool)
    if not boolean:
        raise TypeError(
            f"mask_mod must return booleans (True keeps the key), got {dtype}"
        )
    try:
        ok = np.broadcast_shapes(tuple(np.shape(keep)), shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask_mod must return a shape that broadcasts to {shape}, got {tuple(np.shape(keep))}"
        )


def _numpy(x) -> np.ndarray:
    return (
        x.detach().cpu().double().numpy()
        if _is_torch(x)
        else np.asarray(x, dtype=np.float64)
    )


def _probe_score(score_mod, idx, shape, like, grad: bool) -> None:
    if _is_torch(like):
        torch = _torch()
        dt = torch.float64 if like.dtype == torch.float64 else torch.float32
        s = torch.linspace(
            -3.0, 3.0, math.prod(shape), dtype=dt, device=like.device
        ).reshape(shape)
    else:
        s = np.linspace(-3.0, 3.0, math.prod(shape)).reshape(shape)
    # a learnable bias shows as requires_grad only with grad on (torch loaded: a mod may use it)
    grad_on = (
        _torch().enable_grad() if "torch" in sys.modules else contextlib.nullcontext()
    )
    with grad_on:
        out = score_mod(s, *idx)
    if tuple(np.shape(out)) != shape:
        raise ValueError(
            f"score_mod must return an array of s's shape {shape}, got {tuple(np.shape(out))}"
        )
    if (
        grad
        and getattr(out, "requires_grad", False)
        and getattr(score_mod, "derivative", None) is None
    ):
        raise ValueError(
            "score_mod uses a tensor that requires grad (a learnable bias?): the kernel's backward "
            "returns gradients for q, k and v only; detach it or use attention_reference_torch"
        )
    part = score_mod(s[..., :1], *idx[:3], idx[3][..., :1])
    if not np.allclose(_numpy(part), _numpy(out)[..., :1], rtol=1e-5, atol=1e-6):
        raise ValueError(
            "score_mod must act elementwise: its value at (b, h, i, j) may depend on s[b, h, i, j] and "
            "the indices only (a reduction over a tile would change with the block size)"
        )


# ------------------------------------------------------------------------------------ tiles


class BlockMask:
    """The tiles of a mask: `kind[b, h, i, j]` is 0 (empty), 1 (partial) or 2 (full), `counts` their totals.

    `tiles` is the number of (query block, key block) pairs a kernel that handles all batches and
    heads at once computes: `int((kind > 0).any(axis=(0, 1)).sum())`.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """

    def __init__(self, kind, mask_mod, block_q: int, block_k: int, causal: bool):
        self.kind, self.mask_mod, self.block_q, self.block_k, self.causal = (
            kind,
            mask_mod,
            block_q,
            block_k,
            causal,
        )
        self.counts = {name: int((kind == k).sum()) for k, name in KINDS.items()}
        self.tiles = int((kind > 0).any(axis=(0, 1)).sum())

    def __repr__(self):
        return f"BlockMask(kind {self.kind.shape}, {self.counts}, tiles={self.tiles})"


def _broadcast(keep, shape):
    """`keep` broadcast up to at least `shape` (a mask that ignores b and h stays (1, 1, n, m))."""
    if _is_torch(keep):
        torch = _torch()
        return torch.broadcast_to(keep, torch.broadcast_shapes(keep.shape, shape))
    return np.broadcast_to(keep, np.broadcast_shapes(np.shape(keep), shape))


def _tile_kinds(mask_mod, B, H, N, M, Br, Bc, causal, like=None) -> np.ndarray:
    """`kind` (B, H, Tr, Tc) by evaluating the mask a few query blocks at a time and counting kept elements per tile."""
    Tr, Tc = -(-N // Br), -(-M // Bc)
    kind = np.zeros((B, H, Tr, Tc), np.int8)
    widths = np.minimum(Bc, M - Bc * np.arange(Tc))  # the last key block may be partial
    rows = (
        max(1, (2**20 // max(M, 1)) // Br) * Br
    )  # about a million mask elements per call
    for r0 in range(0, N, rows):
        r1 = min(r0 + rows, N)
        keep = _kept(mask_mod, causal, N, M, index_arrays(B, H, r0, r1, 0, M, like))
        if keep is not None:
            keep = _broadcast(keep, (1, 1, r1 - r0, M))
        else:
            kind[:, :, r0 // Br : -(-r1 // Br)] = 2
            continue
        for i0 in range(r0, r1, Br):
            i1 = min(i0 + Br, N)
            cols = keep[..., i0 - r0 : i1 - r0, :].sum(
                -2
            )  # kept per key column: (B', H', M)
            cols = cols.cpu().numpy() if _is_torch(cols) else np.asarray(cols)
            cols = np.broadcast_to(cols, cols.shape[:-1] + (M,))
            padded = np.zeros(cols.shape[:-1] + (Tc * Bc,), np.int64)
            padded[..., :M] = cols
            kept = padded.reshape(cols.shape[:-1] + (Tc, Bc)).sum(
                -1
            )  # kept per tile: (B', H', Tc)
            row = np.where(kept == 0, 0, np.where(kept == (i1 - i0) * widths, 2, 1))
            kind[:, :, i0 // Br] = np.broadcast_to(row, (B, H, Tc))
    return kind


def block_mask(
    mask_mod,
    B: int,
    H: int,
    N: int,
    M: int,
    block_q: int,
    block_k: int,
    causal: bool = False,
) -> BlockMask:
    """Classify each (block_q × block_k) tile of `mask_mod & causal`: empty (0), partial (1) or full (2).

    `mask_mod=None` keeps everything (then only `causal` masks). Returns a `BlockMask`.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    B, H, N, M = (
        _length(x, name) for x, name in ((B, "B"), (H, "H"), (N, "N"), (M, "M"))
    )
    Br, Bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    check_mods(mask_mod, None, (B, H, N, 1), (B, H, M, 1))
    return BlockMask(
        _tile_kinds(mask_mod, B, H, N, M, Br, Bc, bool(causal)),
        mask_mod,
        Br,
        Bc,
        bool(causal),
    )
