"""Figures for notebook 11: the masks and biases, the tiles they leave (empty, partial, full), the work saved, soft-capping.

Each function draws one figure from `lab` numbers and returns those numbers in a dict.

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from ..attention import flash_attention_numpy
from ..mask_experiments import softcap_fixed_reference_error, window_tile_counts
from ..masks import (
    alibi,
    alibi_slopes,
    and_masks,
    block_mask,
    document_mask,
    index_arrays,
    sliding_window,
    softcap,
)
from ..rules import causal_key_end

__all__ = [
    "gallery_mods",
    "draw_mask_gallery",
    "gallery_lines",
    "draw_tile_kinds",
    "draw_window_tiles",
    "draw_work_saved",
    "draw_softcap_numerics",
]

_KIND_COLORS = ["#f3f3f3", "#f6b26b", "#6fa8dc"]  # empty, partial, full
_KEPT_COLORS = [
    "#cccccc",
    "#b45f06",
    "#1c4587",
]  # a kept element inside each kind of tile


def gallery_mods(
    N: int = 48, window: int = 12, docs=(14, 20, 14), cap: float = 5.0, heads: int = 8
) -> dict:
    """The notebook's six cases at length N: name -> keyword arguments for the kernels (mask_mod, score_mod, causal).

    The packed documents are joined with causal, as a decoder uses them (`causal=True` with `document_mask`).

    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    ids = np.repeat(np.arange(len(docs)), docs)[:N]
    ids = np.concatenate([ids, np.full(N - len(ids), len(docs) - 1)])
    return {
        "causal": dict(causal=True),
        f"sliding window, {window} keys": dict(
            mask_mod=sliding_window(window - 1, 0, N, N)
        ),
        "ALiBi (causal)": dict(score_mod=alibi(alibi_slopes(heads), N, N), causal=True),
        f"soft-cap {cap:g}": dict(score_mod=softcap(cap)),
        f"causal ∧ documents {tuple(docs)}": dict(
            mask_mod=document_mask(ids, ids), causal=True
        ),
        "window ∧ documents": dict(
            mask_mod=and_masks(
                sliding_window(window - 1, 0, N, N), document_mask(ids, ids)
            )
        ),
    }


def _kept(kw, N, M, heads=1):
    """The kept elements (N, M) of head 0 for keyword arguments kw (mask_mod and causal)."""
    b, h, i, j = index_arrays(1, heads, 0, N, 0, M)
    keep = np.ones((1, heads, N, M), bool)
    if kw.get("mask_mod") is not None:
        keep = keep & kw["mask_mod"](b, h, i, j)
    if kw.get("causal"):
        keep = keep & (j < causal_key_end(i, N, M))
    return keep[0, 0]


def draw_mask_gallery(
    N: int = 48,
    window: int = 12,
    docs=(14, 20, 14),
    cap: float = 5.0,
    heads: int = 8,
    axes=None,
) -> dict:
    """Six panels: causal, sliding window, ALiBi's bias (head 0), the soft-cap curve, causal ∧ documents, window ∧ documents.

    Masks are drawn kept (dark) / dropped (light); ALiBi as its bias $-\\sigma_0 |i - j|$ on the kept elements.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    mods = gallery_mods(N, window, docs, cap, heads)
    if axes is None:
        _, axes = plt.subplots(2, 3, figsize=(13, 8.8), layout="constrained")
    axes = np.asarray(axes).ravel()
    result = {}
    binary = ListedColormap(["#f3f3f3", "#1c4587"])
    for ax, (name, kw) in zip(axes, mods.items()):
        ax.grid(False)
        if name.startswith("soft-cap"):
            s = np.linspace(-4 * cap, 4 * cap, 401)
            ax.plot(s, s, color="gray", ls="--", lw=1, label="s (no cap)")
            ax.plot(
                s,
                kw["score_mod"](s, 0, 0, 0, 0),
                color="C3",
                lw=2,
                label=f"{cap:g}·tanh(s/{cap:g})",
            )
            ax.axhline(cap, color="C3", ls=":", lw=1)
            ax.axhline(-cap, color="C3", ls=":", lw=1)
            ax.set(
                xlabel="score s", ylabel="modified score s'", ylim=(-2 * cap, 2 * cap)
            )
            ax.legend(fontsize=9, loc="upper left")
            ax.grid(True)
            result[name] = {"bound": cap}
        else:
            keep = _kept(kw, N, N, heads)
            if kw.get("score_mod") is not None:
                b, h, i, j = index_arrays(1, heads, 0, N, 0, N)
                bias = kw["score_mod"](np.zeros((1, heads, N, N)), b, h, i, j)[0, 0]
                im = ax.imshow(
                    np.where(keep, bias, np.nan),
                    cmap="viridis",
                    interpolation="nearest",
                )
                plt.colorbar(
                    im,
                    ax=ax,
                    fraction=0.046,
                    pad=0.04,
                    label="bias added to s (head 0)",
                )
                result[name] = {
                    "kept": float(keep.mean()),  # the mask's (causal), not the bias's
                    "biased": True,  # a score_mod: it moves scores, it drops none
                    "min_bias": float(np.nanmin(np.where(keep, bias, np.nan))),
                }
            else:
                ax.imshow(keep, cmap=binary, vmin=0, vmax=1, interpolation="nearest")
                result[name] = {"kept": float(keep.mean())}
            ax.set(xlabel="key j", ylabel="query i")
            ax.xaxis.set_label_position("top")
            ax.xaxis.tick_top()
        ax.set_title(name, fontsize=11)
    return result


def _kind_image(keep, kind, Br, Bc):
    """An (N, M, 3) image: each element coloured by its tile's kind, darker where it is kept."""
    N, M = keep.shape
    tile = np.repeat(np.repeat(kind, Br, axis=0), Bc, axis=1)[
        :N, :M
    ]  # (N, M) kind of each element's tile
    light = np.array([plt.matplotlib.colors.to_rgb(c) for c in _KIND_COLORS])
    dark = np.array([plt.matplotlib.colors.to_rgb(c) for c in _KEPT_COLORS])
    return np.where(keep[..., None], dark[tile], light[tile])


def _kind_legend() -> list:
    """Legend patches as `_kind_image` colours them: an element is dark where kept, light where dropped, in its tile's hue."""
    return [
        Patch(
            facecolor=_KIND_COLORS[0],
            edgecolor="gray",
            label="empty tile: all dropped, skipped",
        ),
        Patch(
            facecolor=_KEPT_COLORS[1],
            edgecolor="gray",
            label="partial tile: kept element",
        ),
        Patch(
            facecolor=_KEPT_COLORS[2],
            edgecolor="gray",
            label="full tile: every element kept",
        ),
        Patch(
            facecolor=_KIND_COLORS[1],
            edgecolor="gray",
            label="partial tile: dropped element",
        ),
    ]


def draw_tile_kinds(
    kw: dict,
    N: int,
    M: int,
    block_q: int,
    block_k: int,
    *,
    title: str = "",
    heads: int = 1,
    ax=None,
) -> dict:
    """The mask of kw (head 0) over its tiles: empty (never computed), partial (mask evaluated per element), full.

    Returns `lab.block_mask`'s counts and its `tiles` (the (query block, key block) pairs computed).
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    bm = block_mask(
        kw.get("mask_mod"),
        1,
        heads,
        N,
        M,
        block_q,
        block_k,
        causal=kw.get("causal", False),
    )
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 5.6))
    ax.imshow(
        _kind_image(_kept(kw, N, M, heads), bm.kind[0, 0], block_q, block_k),
        interpolation="nearest",
        extent=(0, M, N, 0),
    )
    for x in range(block_k, M, block_k):
        ax.axvline(x, color="white", lw=0.8)
    for y in range(block_q, N, block_q):
        ax.axhline(y, color="white", lw=0.8)
    ax.grid(False)
    ax.set(xlim=(0, M), ylim=(N, 0), xlabel="key j", ylabel="query i")
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    c = bm.counts
    ax.set_title(
        f"{title}\n{c['empty']} empty, {c['partial']} partial, {c['full']} full of {bm.kind[0, 0].size}",
        fontsize=11,
    )
    return {**c, "tiles": bm.tiles, "kind": bm.kind[0, 0]}


def draw_window_tiles(
    N: int = 256, window: int = 64, block: int = 32, documents: bool = False, ax=None
) -> dict:
    """The tiles of a causal sliding window of `window` keys (optionally ∧ four packed documents of unequal length, whose boundaries cut through tiles), with the kernel's count.

    Each element is coloured by its tile's kind (grey empty, orange partial, blue full), dark where the mask
    keeps it and light where it drops it; the legend says so.

    Runs `flash_attention_numpy` on seeded (1, 1, N, 16) inputs with `stats={}` and returns its computed tiles
    beside `block_mask`'s non-empty count and the interval count of `lab.window_tile_counts`.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    mod = sliding_window(window - 1, 0, N, N)
    if documents:  # 4 documents of unequal length, so that boundaries cut through tiles
        ids = np.searchsorted(
            (np.array([3, 5, 8]) * N) // 11, np.arange(N), side="right"
        )
        mod = and_masks(mod, document_mask(ids, ids))
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 6.6))
    keys = "key" if window == 1 else "keys"
    name = f"causal window of {window} {keys}" + (" ∧ 4 documents" if documents else "")
    result = draw_tile_kinds(
        dict(mask_mod=mod),
        N,
        N,
        block,
        block,
        title=f"{name}, N = {N}, {block}×{block} tiles",
        ax=ax,
    )
    q, k, v = (
        np.random.default_rng(0).standard_normal((3, 1, 1, N, 16)).astype(np.float32)
    )
    stats = {}
    flash_attention_numpy(
        q, k, v, block_q=block, block_k=block, mask_mod=mod, stats=stats
    )
    ax.legend(
        handles=_kind_legend(),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=2,
        fontsize=10,
        frameon=False,
    )
    result.update(
        N=N,
        window=window,
        block=block,
        documents=documents,
        kernel_tiles=stats["tiles"],
        interval_counts=None
        if documents
        else window_tile_counts(N, N, window - 1, 0, block, block),
    )
    return result


def draw_work_saved(
    windows=(512, 4096),
    Ns=tuple(2**p for p in range(11, 18)),
    block: int = 128,
    axes=None,
) -> dict:
    """Computed tiles of a causal sliding window against causal and full attention, as N grows (`window_tile_counts`).

    Left: tiles computed as a fraction of full attention's; right: how many times fewer than causal.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    left, right = axes
    rows = {}
    causal = [window_tile_counts(N, N, None, 0, block, block)["computed"] for N in Ns]
    full = [window_tile_counts(N, N, None, None, block, block)["computed"] for N in Ns]
    left.plot(Ns, np.array(causal) / np.array(full), "k--", marker="s", label="causal")
    for n, W in enumerate(windows):
        comp = [
            window_tile_counts(N, N, W - 1, 0, block, block)["computed"] for N in Ns
        ]
        rows[W] = {
            N: {"window": c, "causal": ca, "full": f}
            for N, c, ca, f in zip(Ns, comp, causal, full)
        }
        left.plot(
            Ns,
            np.array(comp) / np.array(full),
            marker="o",
            color=f"C{n}",
            label=f"window {W:,}",
        )
        right.plot(
            Ns,
            np.array(causal) / np.array(comp),
            marker="o",
            color=f"C{n}",
            label=f"window {W:,}",
        )
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1024:,.0f}K"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(f"sequence length N  ({block}×{block} tiles)")
        ax.legend(fontsize=10)
    left.set_yscale("log")
    left.yaxis.set_major_locator(
        LogLocator(base=10, subs=(1.0, 2.0, 5.0))
    )  # 0.5 readable
    left.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.3g}"))
    left.set(
        ylabel="tiles computed / full attention's",
        title="work left: a window grows as N, full as N²",
    )
    right.set(
        ylabel="× fewer tiles than causal", title="saved against causal attention"
    )
    return rows


STRATEGIES = {
    "running max m, P in FP16": ("fp16", False),
    "running max m, P in BF16": ("bf16", False),
    "m = cap, P in FP32": ("fp32", True),
    "m = cap, P in BF16": ("bf16", True),
    "m = cap, P in FP16": ("fp16", True),
}


def draw_softcap_numerics(
    cap: float = 30.0,
    N: int = 512,
    block: int = 64,
    outlier: float = 400.0,
    caps=(2, 5, 10, 20, 30, 50, 100, 200),
    ax=None,
) -> dict:
    """Left: one row's running max over key tiles, raw and soft-capped; right: the error of a fixed reference m = cap.

    Left: seeded scores with a few outliers of size `outlier`; capped, every score and so m stays below
    `cap`. Right: `lab.softcap_fixed_reference_error` for each cap in `caps`, with P in FP32, BF16 and FP16,
    against the running max with P in FP16 and in BF16 (l summed from the FP32 P before P is rounded). An error of inf (a row whose l underflowed to 0, so o = 0/0) is drawn at 10.
    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    rng = np.random.default_rng(1)
    s = rng.standard_normal(N) * 3.0
    s[rng.choice(N, 4, replace=False)] = outlier * np.array([1.0, 0.6, -0.8, 0.3])
    capped = softcap(cap)(s, 0, 0, 0, 0)
    ends = np.arange(block, N + block, block)
    run = {
        name: np.maximum.accumulate(x.reshape(-1, block).max(axis=1))
        for name, x in (("raw", s), ("capped", capped))
    }
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12.5, 4.4), layout="constrained")
    left, right = ax
    left.step(
        ends, run["raw"], where="post", color="gray", label="running max m, raw scores"
    )
    left.step(
        ends,
        run["capped"],
        where="post",
        color="C3",
        label=f"running max m, soft-cap {cap:g}",
    )
    left.axhline(cap, color="C3", ls=":", lw=1)
    left.set(
        xlabel=f"keys seen (blocks of {block})",
        ylabel="m",
        title=f"tanh bounds the running max\n(one row: {N} scores of std 3, 4 outliers up to {outlier:g})",
    )
    left.legend(fontsize=9)
    errors = {}
    for n, (name, (fmt, fixed)) in enumerate(STRATEGIES.items()):
        errors[name] = [
            softcap_fixed_reference_error(c, fmt, fixed=fixed) for c in caps
        ]
        shown = [min(e, 10.0) for e in errors[name]]
        right.plot(
            caps,
            shown,
            marker="o",
            color=["k", "C1", "C0", "C2", "C3"][n],
            ls="--" if not fixed else "-",
            label=name,
        )
    right.set_xscale("log")
    right.set_yscale("log")
    for axis in (right.xaxis, right.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        axis.set_minor_locator(NullLocator())
    right.set_xticks(list(caps))
    mid = [
        n for n, c in enumerate(caps) if c in (10, 30, 50)
    ]  # the caps the table prints
    times = [  # the shortcut against the same format done the usual way
        errors["m = cap, P in BF16"][n] / errors["running max m, P in BF16"][n]
        for n in mid
    ]
    spread = f"{min(times):.1f}-{max(times):.1f}×" if times else "several times"
    right.set(xlabel="cap", ylabel="max |o - ref|  (inf drawn at 10)")
    right.set_title(
        "m = cap instead of the running max: FP32 and BF16 lose no row\n(o = 0) below a cap "
        f"near 90; FP16 errs from about 15; BF16's error\nis {spread} that of BF16 with the "
        "running max at caps 10, 30, 50",
        fontsize=10,
    )
    right.legend(fontsize=9)
    return {
        "max_raw": float(s.max()),
        "max_capped": float(capped.max()),
        "run_raw": run["raw"],
        "run_capped": run["capped"],
        "caps": list(caps),
        "errors": errors,
    }


def gallery_lines(info: dict) -> list[str]:
    """One line per panel of `draw_mask_gallery`'s result: the share of scores a mask keeps; for a score
    modifier under a mask (ALiBi, causal), that it drops none and that the share kept is the mask's;
    for the soft cap, the range of the modified scores.

    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    lines = []
    for name, r in info.items():
        if "bound" in r:
            what = f"every score in ({-r['bound']:g}, {r['bound']:g}), none dropped"
        elif r.get("biased"):
            what = (
                f"a bias on every score causal keeps ({r['kept']:.1%}); it drops none"
            )
        else:
            what = f"{r['kept']:.1%} of the scores kept"
        lines.append(f"{name:>31}: {what}")
    return lines
