"""Around the masks: a differentiable torch twin of the reference, PyTorch's own FlexAttention as a second
oracle, the tile count of a sliding window by arithmetic, and a timing of the window (the exercise checks
are in lab/checks/masks.py).

- `attention_reference_torch` : softmax(score_mod(S), masked) V with torch autograd, for gradient checks.
- `flex_reference`            : `torch.nn.attention.flex_attention.flex_attention`, run eagerly (it
  materializes the scores on a CPU without `torch.compile`; fine for checking, not for speed).
- `window_tile_counts`        : empty/partial/full tiles of a sliding window with no mask evaluated.
- `time_window_attention`     : the torch kernel with a sliding window against full attention and SDPA.

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from .attention import attention_reference
from .masks import (
    _kept,
    _length,
    _window_side,
    block_mask,
    check_mods,
    index_arrays,
    sliding_window,
    softcap,
)
from .precision import round_to
from .validate import check_block, check_float_tensors, check_qkv_shapes, check_scale

__all__ = [
    "attention_reference_torch",
    "flex_reference",
    "window_tile_counts",
    "softcap_fixed_reference_error",
    "softcap_fixed_reference_detail",
    "softcap_experiment_inputs",
    "time_window_attention",
]


def attention_reference_torch(
    q, k, v, *, causal: bool = False, scale=None, mask_mod=None, score_mod=None
):
    """The reference's torch twin, differentiable by autograd: $o = \\mathrm{softmax}(\\mathrm{mask}(\\mathrm{score\\_mod}(\\mathrm{scale}\\,QK^\\top)))V$; returns `(o, lse)`.

    Computes in the input dtype (use float64 for checks); grouped K/V heads are repeated to the query
    heads; a row with no kept key gives o = 0, lse = -inf and zero (finite) gradients.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    check_float_tensors(q=q, k=k, v=v)
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    scale = check_scale(scale, q.shape[-1])
    check_mods(mask_mod, score_mod, tuple(q.shape), tuple(k.shape), like=q)
    if group > 1:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    N, M = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale  # S: (..., N, M)
    if mask_mod is None and score_mod is None:
        idx = (
            None,
            None,
            torch.arange(N, device=q.device)[:, None],
            torch.arange(M, device=q.device)[None, :],
        )
    else:
        idx = index_arrays(q.shape[0], q.shape[1], 0, N, 0, M, like=q)
    if score_mod is not None:
        s = score_mod(s, *idx)
    keep = _kept(mask_mod, causal, N, M, idx)
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf)
    m = (
        s.amax(dim=-1, keepdim=True).detach()
        if M > 0
        else s.new_zeros(s.shape[:-1] + (1,))
    )
    m = torch.where(
        torch.isfinite(m), m, torch.zeros_like(m)
    )  # rows with no key: any shift
    p = torch.exp(s - m)  # (..., N, M)
    l = p.sum(dim=-1, keepdim=True)
    seen = l > 0
    l_safe = torch.where(
        seen, l, torch.ones_like(l)
    )  # no log(0) even in the unused branch
    o = (p @ v) / l_safe
    lse = torch.where(seen, m + torch.log(l_safe), torch.full_like(l, -math.inf))
    return o, lse.squeeze(-1)


def flex_reference(
    q, k, v, *, causal: bool = False, scale=None, mask_mod=None, score_mod=None
):
    """PyTorch's `flex_attention` on the same mods, eagerly (no compile); returns `(o, lse)`, lse in natural log.

    The mask (mask_mod and causal) becomes a FlexAttention block mask on q's device; grouped heads use
    `enable_gqa`. A second, independent oracle for the course's kernels.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    from torch.nn.attention.flex_attention import (
        AuxRequest,
        create_block_mask,
        flex_attention,
    )

    check_float_tensors(q=q, k=k, v=v)
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    check_mods(mask_mod, score_mod, tuple(q.shape), tuple(k.shape), like=q)
    B, H, N, M = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    blocks = None
    if mask_mod is not None or causal:

        def keep(b, h, i, j):
            return _kept(mask_mod, causal, N, M, (b, h, i, j))

        blocks = create_block_mask(keep, B, H, N, M, device=q.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile.*")
        o, aux = flex_attention(
            q,
            k,
            v,
            score_mod=score_mod,
            block_mask=blocks,
            scale=scale,
            enable_gqa=group > 1,
            return_aux=AuxRequest(lse=True),
        )
    return o, aux.lse


def window_tile_counts(N: int, M: int, left, right, block_q: int, block_k: int) -> dict:
    """Empty, partial and full tiles of `sliding_window(left, right, N, M)` from interval arithmetic, no mask evaluated.

    Tile rows i0..i1-1, columns j0..j1-1: non-empty iff $j_1 - 1 \\ge i_0 + off - left$ and $j_0 \\le i_1 - 1 + off + right$;
    full iff $j_0 \\ge i_1 - 1 + off - left$ and $j_1 - 1 \\le i_0 + off + right$. Cost: one number per tile.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    left, right = _window_side(left, "left"), _window_side(right, "right")
    Br, Bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    N, M = _length(N, "N"), _length(M, "M")
    off = M - N
    i0 = np.arange(0, N, Br)[:, None]
    i1 = np.minimum(i0 + Br, N)
    j0 = np.arange(0, M, Bc)[None, :]
    j1 = np.minimum(j0 + Bc, M)
    lo, hi = (
        (N + M if left is None else left),
        (N + M if right is None else right),
    )  # None: past every index
    some = (j1 - 1 >= i0 + off - lo) & (j0 <= i1 - 1 + off + hi)
    full = (j0 >= i1 - 1 + off - lo) & (j1 - 1 <= i0 + off + hi)
    return {
        "empty": int(some.size - some.sum()),
        "partial": int((some & ~full).sum()),
        "full": int(full.sum()),
        "computed": int(some.sum()),
        "tiles": int(some.size),
    }


def softcap_experiment_inputs(
    *, N: int = 256, d: int = 64, spread: float = 3.0, seed: int = 0
) -> tuple:
    r"""The soft-cap experiment's seeded `(q, k, v)`, each (1, 1, N, d): standard normal, q times `spread`.

    The raw scores $s = q k^\top / \sqrt d$ then have standard deviation about `spread`.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 1, N, d)) for _ in range(3))
    return q * spread, k, v


def softcap_fixed_reference_detail(
    cap: float,
    fmt: str = "fp32",
    *,
    fixed: bool = True,
    N: int = 256,
    d: int = 64,
    spread: float = 3.0,
    seed: int = 0,
) -> dict:
    """Soft-capped attention whose $P = e^{s' - m}$ is rounded to `fmt`, against the float64 reference: the error and why.

    `fixed=True` takes the constant $m = \\mathrm{cap}$ (no running max: $s' < \\mathrm{cap}$ always, so $P \\le 1$);
    `fixed=False` the row max, as the kernels do. Scores $s = q k^\\top/\\sqrt d$ have standard deviation
    about `spread`. P is computed in float32 (numpy keeps subnormals) and l is summed from that P before
    the rounding to `fmt`, as GPU kernels do, so a row whose rounded P is all 0 gives o = 0 (an error of
    |ref|, order 1), and only a row whose l itself underflows to 0 gives 0/0 (an error of inf).
    Returns `err` (max |o - ref|, inf if some o is not finite), `below_cap` (cap minus the smallest row
    max of s': how far under the cap the lowest row sits), `rows_p_zero` (rows whose rounded P is all 0)
    and `rows_l_zero` (rows whose l is 0).
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    q, k, v = softcap_experiment_inputs(N=N, d=d, spread=spread, seed=seed)
    mod = softcap(cap)
    ref, _ = attention_reference(q, k, v, score_mod=mod)
    s = mod((q[0, 0] @ k[0, 0].T / np.sqrt(d)).astype(np.float32), 0, 0, 0, 0).astype(
        np.float32
    )  # S': (N, N)
    m = np.float32(cap) if fixed else s.max(axis=-1, keepdims=True)
    with np.errstate(under="ignore"):
        p = np.exp(s - m)  # float32, every entry <= 1
    l = p.sum(axis=-1, keepdims=True)
    p_fmt = round_to(p, fmt).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = (p_fmt @ v[0, 0].astype(np.float32)) / l
    err = np.abs(o - ref[0, 0]).max()
    return {
        "err": float(err) if np.isfinite(err) else float("inf"),
        "below_cap": float(cap - s.max(axis=-1).min()),
        "rows_p_zero": int((p_fmt == 0).all(axis=-1).sum()),
        "rows_l_zero": int((l == 0).sum()),
    }


def softcap_fixed_reference_error(
    cap: float,
    fmt: str = "fp32",
    *,
    fixed: bool = True,
    N: int = 256,
    d: int = 64,
    spread: float = 3.0,
    seed: int = 0,
) -> float:
    """max |o - ref| of soft-capped attention whose $P = e^{s' - m}$ is rounded to `fmt`, against the float64 reference.

    `fixed=True` takes the constant $m = \\mathrm{cap}$, `fixed=False` the row max (see
    `softcap_fixed_reference_detail`). l is summed from the float32 P before rounding, so a row whose
    rounded P is all 0 gives o = 0 and an error of |ref| (order 1); the error is inf only where l itself
    underflows to 0: every $s' - \\mathrm{cap}$ of the row below about $-104$, where even FP32's smallest
    subnormal, $e^{-103.3}$, is out of reach (half of it rounds to 0).
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    return softcap_fixed_reference_detail(
        cap, fmt, fixed=fixed, N=N, d=d, spread=spread, seed=seed
    )["err"]


# ------------------------------------------------------------------------------------ timing


def time_window_attention(
    N: int = 8192,
    window: int = 256,
    *,
    heads: int = 1,
    d: int = 64,
    block: int = 256,
    rounds: int = 2,
    threads: int | None = None,
    seed: int = 0,
) -> dict:
    """Seconds per call of a causal sliding window of `window` keys by the torch kernel, against full attention and SDPA.

    Candidates (float32, batch 1): the torch kernel with the window (its block mask built once, outside the
    timing, as a boolean mask is for SDPA), the torch kernel on full attention, SDPA with the window as an
    explicit (N, N) boolean mask, and SDPA on full attention. Each is run once untimed (a warm-up: first-call
    allocations), then timed once per round with `time.perf_counter`, the candidates alternating; the result
    is the fastest round of each. `threads` sets torch's thread count for the whole call (None: leave it;
    1 keeps the comparison steady when other programs share the cores). Also returns the tiles each kernel
    run computed and the window's max |o - SDPA|. Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if threads is not None and _length(threads, "threads") < 1:
        raise ValueError(
            f"threads must be >= 1 (None: leave torch's setting), got {threads}"
        )
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _time_window(N, window, heads, d, block, rounds, seed)
    finally:
        torch.set_num_threads(before)


def _time_window(N, window, heads, d, block, rounds, seed) -> dict:
    import time

    from .torch_kernels import flash_attention_torch

    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(1, heads, N, d, generator=g) for _ in range(3)
    )  # (1, H, N, d)
    mod = sliding_window(window - 1, 0, N, N)
    blocks = block_mask(mod, 1, heads, N, N, block, block)
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allowed = (j <= i) & (j >= i - (window - 1))  # (N, N) bool, for SDPA
    sdpa = torch.nn.functional.scaled_dot_product_attention
    stats = {"window": {}, "full": {}}
    fns = {
        "kernel, window": lambda: flash_attention_torch(
            q, k, v, mask_mod=mod, block_mask=blocks, stats=stats["window"]
        ),
        "kernel, full": lambda: flash_attention_torch(
            q, k, v, block_q=block, block_k=block, stats=stats["full"]
        ),
        "SDPA, boolean window mask": lambda: sdpa(q, k, v, attn_mask=allowed),
        "SDPA, full": lambda: sdpa(q, k, v),
    }
    with torch.no_grad():
        err = float(
            (fns["kernel, window"]() - fns["SDPA, boolean window mask"]()).abs().max()
        )  # also their warm-up
        fns["kernel, full"]()
        fns["SDPA, full"]()
        times = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {
        "seconds": {name: min(ts) for name, ts in times.items()},
        "tiles": {"window": stats["window"]["tiles"], "full": stats["full"]["tiles"]},
        "counts": blocks.counts,
        "max_err": err,
        "N": N,
        "window": window,
        "block": block,
        "heads": heads,
        "d": d,
        "threads": torch.get_num_threads(),
    }
