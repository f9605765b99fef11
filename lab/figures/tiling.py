"""Figures for notebook 05: the score matrix filled tile by tile, the tile grid, the on-chip footprint, HBM
traffic and peak memory. Notebook 06's figures (op counts, the split of work) are in `lab.figures.fa2`.

Each function draws one figure from `lab.tiling` numbers and returns those numbers in a dict.

Taught in: notebooks/05_tiling.ipynb, notebooks/05_tiling_traffic.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, PathPatch, Rectangle
from matplotlib.path import Path
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..hardware import CHIPS
from ..rules import causal_mask
from ..tiling import (
    flash_counts,
    onchip_fits,
    standard_traffic,
    theorem2_bytes,
    tile_counts,
    tile_grid,
)

__all__ = [
    "loop_order",
    "tile_fill_state",
    "draw_tile_fill",
    "draw_tile_grid",
    "draw_footprint",
    "draw_hbm_traffic",
    "draw_peak_memory",
]

_DONE, _TODO, _NOW, _SKIP = "#6fa8dc", "#d9e8f5", "#e69138", "#eeeeee"
_MASKED = "#555555"  # the dots on a computed tile that the mask enters


def _plain_log_labels(*axes, n_axis=None):
    """Tick labels of log axes as plain numbers (1,024 rather than 2^10): readable, and fast to lay out.

    On `n_axis` (an Axes whose x axis is a length N) powers of two from 1024 up read 1K, 2K, ...
    """
    plain = FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 1 else f"{x:.2g}")
    kilo = FuncFormatter(lambda x, _: f"{x / 1024:,.0f}K" if x >= 1024 else f"{x:,.0f}")
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log":
                axis.set_major_formatter(
                    kilo if (ax is n_axis and axis is ax.xaxis) else plain
                )
                axis.set_minor_formatter(NullFormatter())


def add_tiles(
    ax, boxes, facecolors, *, lw: float, hatch=None, edgecolor="black"
) -> None:
    """Draw rectangles `boxes` (x, y, width, height rows) with `edgecolor` edges and their own `facecolors`, at once.

    Unhatched, one collection; hatched, one compound path (Agg draws a hatch per path, so thousands of
    hatched tiles drawn one by one take seconds). The picture is the same as one patch per tile.
    """
    if not len(boxes):
        return
    x, y, w, h = np.asarray(boxes, dtype=float).T
    verts = np.stack(
        [np.stack(c, axis=1) for c in ((x, y), (x + w, y), (x + w, y + h), (x, y + h))],
        axis=1,
    )  # (tiles, 4 corners, xy)
    if hatch is None:
        ax.add_collection(
            PolyCollection(verts, facecolors=facecolors, edgecolors=edgecolor, lw=lw),
            autolim=False,
        )
    else:
        ax.add_patch(
            PathPatch(
                Path.make_compound_path_from_polys(verts),
                facecolor=facecolors[0],
                edgecolor=edgecolor,
                lw=lw,
                hatch=hatch,
            )
        )


def loop_order(
    N: int,
    M: int,
    block_q: int,
    block_k: int,
    causal: bool = False,
    variant: str = "fa2",
) -> list:
    """The computed tiles (i, j) in the order the kernel visits them: rows outer for fa2, key blocks outer for fa1.

    Taught in: notebooks/05_tiling.ipynb
    """
    grid = tile_grid(N, M, block_q, block_k, causal)
    cells = [tuple(int(x) for x in c) for c in np.argwhere(grid)]  # row-major: (i, j)
    return cells if variant == "fa2" else sorted(cells, key=lambda c: (c[1], c[0]))


def tile_fill_state(
    N: int = 12,
    M: int = 16,
    block_q: int = 4,
    block_k: int = 4,
    i: int = 0,
    j: int = 0,
    causal: bool = False,
    d: int = 4,
    seed: int = 0,
) -> dict:
    """The score matrix S and each row's running (m, l) after tile (i, j) of FlashAttention-2's loop (rows outer).

    Tiles (i', j') with i' < i, or i' = i and j' <= j, are done (those with every pair hidden skipped); for a row of a
    finished query block m and l are final, for a row of block i they cover key blocks 0..j, for later rows
    they are NaN (not started). $m = \\max s$, $l = \\sum e^{s - m}$ over the visible keys seen.
    S = q kᵀ/√d on seeded standard normal q, k of head dim `d` (both returned, as "q" and "k").
    Taught in: notebooks/05_tiling.ipynb
    """
    grid = tile_grid(N, M, block_q, block_k, causal)
    Tr, Tc = grid.shape
    i, j = int(min(max(i, 0), Tr - 1)), int(min(max(j, 0), Tc - 1))
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((N, d)), rng.standard_normal((M, d))  # (N, d), (M, d)
    s = q @ k.T / np.sqrt(d)  # S: (N, M)
    visible = causal_mask(N, M) if causal else np.ones((N, M), bool)
    bi, bj = np.arange(N)[:, None] // block_q, np.arange(M)[None, :] // block_k
    seen = ((bi < i) | ((bi == i) & (bj <= j))) & grid[
        bi, bj
    ]  # entries of computed tiles so far
    use = seen & visible
    started = use.any(axis=1)
    m = np.where(started, np.where(use, s, -np.inf).max(axis=1), np.nan)
    l = np.where(
        started,
        np.where(use, np.exp(s - np.where(started, m, 0)[:, None]), 0).sum(axis=1),
        np.nan,
    )
    return {
        "S": s,
        "q": q,
        "k": k,
        "seen": seen,
        "visible": visible,
        "m": m,
        "l": l,
        "tile": (i, j),
        "computed": bool(grid[i, j]),
        "rows": (i * block_q, min((i + 1) * block_q, N)),
        "keys": (j * block_k, min((j + 1) * block_k, M)),
        "Tr": Tr,
        "Tc": Tc,
        "N": N,
        "M": M,
        "Br": block_q,
        "Bc": block_k,
        "causal": bool(causal),
    }


def _box(x0, y0, w, h, N, M) -> list:
    """The corners of the w × h tile at (x0, y0), cut at the matrix's edge (M columns, N rows)."""
    x1, y1 = min(x0 + w, M), min(y0 + h, N)
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]


def draw_tile_fill(
    N: int = 12,
    M: int = 16,
    block_q: int = 4,
    block_k: int = 4,
    i: int = 1,
    j: int = 2,
    causal: bool = False,
    ax=None,
) -> dict:
    """The N × M score matrix filled tile by tile up to tile (i, j), with each query row's running m and l beside it.

    Computed scores are coloured, entries the mask hides inside a computed tile grey, the current tile outlined in
    orange when it is computed (a skipped one is never on chip: no frame), the rest blank; skipped tiles (every pair
    hidden by the causal mask) are filled light grey and hatched. A dot marks each row's running maximum. Numbers
    from `tile_fill_state`.
    Taught in: notebooks/05_tiling.ipynb
    """
    st = tile_fill_state(N, M, block_q, block_k, i, j, causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.36 * N + 1.6))
    S = np.ma.masked_where(~st["seen"] | ~st["visible"], st["S"])
    im = ax.imshow(
        S,
        cmap="RdBu_r",
        vmin=-2.5,
        vmax=2.5,
        extent=(0, M, N, 0),
        interpolation="nearest",
    )
    if (
        getattr(ax, "colorbar_of_scores", None) is None
    ):  # once per Axes (a slider redraws on it)
        ax.colorbar_of_scores = ax.figure.colorbar(
            im,
            ax=ax,
            fraction=0.025,
            pad=0.02,
            extend="both",
            label="score $s_{rc}$ computed so far (colour clipped at ±2.5)",
        )
    hidden = st["seen"] & ~st["visible"]  # computed tiles' entries the mask hides
    if hidden.any():
        ax.imshow(
            np.ma.masked_where(~hidden, np.ones(hidden.shape)),
            cmap=ListedColormap(["#a6a6a6"]),  # grey: masked inside a computed tile
            extent=(0, M, N, 0),
            interpolation="nearest",
        )
    grid = tile_grid(N, M, block_q, block_k, causal)
    for computed in (True, False):  # tile outlines; skipped tiles grey and hatched
        boxes = [
            _box(b * block_k, a * block_q, block_k, block_q, N, M)
            for a, b in zip(*np.nonzero(grid == computed))
        ]
        if boxes:
            ax.add_collection(
                PolyCollection(
                    boxes,
                    facecolors="none" if computed else _SKIP,
                    edgecolors="black",
                    linewidths=1.2,
                    hatch=None if computed else "//",
                ),
                autolim=False,
            )
    (r0, r1), (k0, k1) = st["rows"], st["keys"]
    # the step's tile: orange, on chip, when computed; a skipped one is never loaded, so no frame
    if st["computed"]:
        ax.add_patch(
            Rectangle((k0, r0), k1 - k0, r1 - r0, fill=False, edgecolor=_NOW, lw=4)
        )
    band = (
        "#fde9d4" if st["computed"] else _SKIP
    )  # the rows whose (m, l) the step holds
    ax.add_patch(
        Rectangle((M + 0.3, r0), 5.4, r1 - r0, facecolor=band, edgecolor="none")
    )
    use = st["seen"] & st["visible"]
    rows = np.flatnonzero(~np.isnan(st["m"]))
    cols = [int(np.argmax(np.where(use[r], st["S"][r], -np.inf))) for r in rows]
    ax.plot(np.add(cols, 0.5), rows + 0.5, "o", color="black", ms=5)
    for row in rows:
        bold = "bold" if r0 <= row < r1 else "normal"
        ax.text(
            M + 1.5,
            row + 0.5,
            f"{st['m'][row]:.2f}",
            ha="center",
            va="center",
            fontsize=12,
            weight=bold,
        )
        ax.text(
            M + 4.3,
            row + 0.5,
            f"{st['l'][row]:.2f}",
            ha="center",
            va="center",
            fontsize=12,
            weight=bold,
        )
    ax.text(M + 1.5, -0.4, "m", ha="center", va="bottom", fontsize=14, weight="bold")
    ax.text(M + 4.3, -0.4, "l", ha="center", va="bottom", fontsize=14, weight="bold")
    ax.set_xlim(0, M + 6)
    ax.set_ylim(N, -0.9)
    ax.set_aspect("equal")
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xticks(np.arange(0, M + 1, block_k))
    ax.set_yticks(np.arange(0, N + 1, block_q))
    ax.tick_params(labelsize=11)
    ax.set_xlabel(f"key c (ticks every Bc = {block_k} keys)", fontsize=13)
    ax.set_ylabel(f"query r (ticks every Br = {block_q} queries)", fontsize=13)
    what = (
        "skipped (grey): every pair hidden, never loaded"
        if not st["computed"]
        else f"S[{r0}:{r1}, {k0}:{k1}] on chip"
    )
    # the key blocks block i has computed: up to j, or under the mask up to the last one it sees
    seen = (r1 - 1 + M - N) // block_k if causal else st["tile"][1]
    last = min(st["tile"][1], seen)
    held = f"over key blocks 0..{last}" if last >= 0 else "over no key block yet"
    ax.set_title(
        f"tile (i, j) = ({st['tile'][0]}, {st['tile'][1]}): {what}\n"
        f"rows {r0}-{r1 - 1} hold (m, l) {held}; rows above: final; below: not started",
        fontsize=13,
    )
    return {k: v for k, v in st.items() if k not in ("S", "q", "k", "visible")}


def draw_tile_grid(
    N: int = 256,
    M: int | None = None,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = True,
    step: int = 1,
    variant: str = "fa2",
    ax=None,
) -> dict:
    """The Tr × Tc tiles of S in element coordinates: done, on chip at `step` (1 for the first tile), still to do,
    skipped (every pair hidden by the mask); dots mark a computed tile that hides some pairs (masked inside).

    Partial last tiles are drawn at their real size; the causal boundary j = i + (M - N) is the red line.
    Taught in: notebooks/05_tiling.ipynb
    """
    M = N if M is None else M
    Br, Bc = block_q, block_k
    counts = tile_counts(N, M, Br, Bc, causal)
    order = loop_order(N, M, Br, Bc, causal, variant)
    step = int(min(max(step, 1), max(len(order), 1)))
    now = order[step - 1] if order else None
    done = set(order[: step - 1])
    grid = tile_grid(N, M, Br, Bc, causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 6.5))
    tiles = {
        True: ([], []),
        False: ([], []),
    }  # skipped (hatched) or not: boxes, colours
    masked = []  # computed tiles that hide some pairs: the mask applied inside (dotted)
    for i in range(counts["Tr"]):
        for j in range(counts["Tc"]):
            i0, j0 = i * Br, j * Bc
            h, w = min(Br, N - i0), min(Bc, M - j0)
            if causal and grid[i, j] and j0 + w - 1 > i0 + M - N:
                masked.append((j0, i0, w, h))  # its first query misses its last key
            color = (
                _SKIP
                if not grid[i, j]
                else _NOW
                if (i, j) == now
                else _DONE
                if (i, j) in done
                else _TODO
            )
            boxes, colors = tiles[not grid[i, j]]
            boxes.append((j0, i0, w, h))
            colors.append(color)
    add_tiles(ax, *tiles[False], lw=0.8)
    add_tiles(ax, *tiles[True], lw=0.8, hatch="//")
    add_tiles(ax, masked, ["none"], lw=0, hatch="..", edgecolor=_MASKED)
    if causal:
        ax.plot([M - N + 0.5, M + 0.5], [0, N], color="C3", lw=2)
    ax.set_xlim(0, M)
    ax.set_ylim(N, 0)
    ax.set_aspect("equal")
    ax.grid(False)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    ax.set(
        xlabel="key c  (tiles Bc keys wide)", ylabel="query r  (tiles Br queries tall)"
    )
    result = {
        **counts,
        "N": N,
        "M": M,
        "Br": Br,
        "Bc": Bc,
        "causal": bool(causal),
        "variant": variant,
        "step": step,
        "steps": len(order),
        "tile": now,
        "partial_rows": N % Br,
        "partial_cols": M % Bc,
        "masked": len(masked),  # computed tiles that hide some pairs (dotted)
    }
    if now is not None:
        i, j = now
        result["rows"] = (i * Br, min((i + 1) * Br, N))
        result["keys"] = (j * Bc, min((j + 1) * Bc, M))
        title = (
            f"step {step} of {len(order)}: tile ({i}, {j}) on chip = "
            f"Q[{result['rows'][0]}:{result['rows'][1]}] × K[{result['keys'][0]}:{result['keys'][1]}]"
        )
    else:
        title = "no tile to compute"
    ax.set_title(
        f"{title}\n{counts['Tr']} × {counts['Tc']} tiles, {counts['computed']} computed "
        f"({counts['fraction']:.0%}), {variant}: {'rows' if variant == 'fa2' else 'key blocks'} outer",
        fontsize=11,
    )
    ax.legend(
        handles=[
            Patch(facecolor=_DONE, edgecolor="k", label="done"),
            Patch(facecolor=_NOW, edgecolor="k", label="on chip now"),
            Patch(facecolor=_TODO, edgecolor="k", label="to do"),
            Patch(
                facecolor=_SKIP,
                edgecolor="k",
                hatch="//",
                label="skipped (every pair hidden)",
            ),
            Patch(
                facecolor=_TODO,
                edgecolor=_MASKED,
                hatch="..",
                label="masked (computed, some pairs hidden)",
            ),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=3,
        fontsize=10,
        frameon=False,
    )
    return result


def draw_footprint(
    d: int = 64,
    block_q: int = 64,
    block_k: int = 128,
    itemsize: int = 2,
    kv_stages: int = 1,
    blocks=(16, 32, 64, 128, 256, 512),
    warps: int = 4,
    ax=None,
) -> dict:
    """Left: one step's bytes in registers and in shared memory, buffer by buffer, against the A100's and H100's
    budgets for a thread block of `warps` warps; right: which (Br, Bc) fit which chip. Budgets from
    `lab.hardware` via `lab.onchip_fits`.

    Taught in: notebooks/05_tiling.ipynb
    """
    chips = ("A100", "H100")
    res = {
        c: onchip_fits(
            c, d, block_q, block_k, itemsize=itemsize, kv_stages=kv_stages, warps=warps
        )
        for c in chips
    }
    foot = res["A100"]
    if ax is None:
        _, ax = plt.subplots(
            1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.3, 1]}
        )
    left, right = ax
    colors = {
        "S_ij": "C0",
        "P_ij": "C1",
        "m": "C2",
        "l": "C3",
        "acc": "C4",
        "Q_i": "C5",
        "K_j": "C6",
        "V_j": "C8",
    }
    labelled = set()  # a buffer in both rows has one legend entry
    for y, where in ((1, "registers"), (0, "shared")):
        bottom = 0.0
        for name, b in foot[where].items():
            if name == "total":
                continue
            left.barh(
                [y],
                [b / 1024],
                height=0.5,
                left=bottom,
                color=colors[name],
                label=None if name in labelled else name,
            )
            labelled.add(name)
            bottom += b / 1024
    budgets = [(1, foot["register_budget"], f"A100 and H100, {warps} warps", "-")]
    budgets += [
        (0, res[c]["shared_budget"], c, ls) for c, ls in zip(chips, ("--", ":"))
    ]
    for k, (y, b, who, ls) in enumerate(budgets):
        left.plot([b / 1024] * 2, [y - 0.38, y + 0.38], color="k", ls=ls, lw=2)
        below = k == 2  # the H100's label under its line, clear of the A100's
        left.text(
            b / 1024,
            y - 0.42 if below else y + 0.42,
            f"{who}: {b / 1024:g} KiB",
            fontsize=10,
            ha="center",
            va="top" if below else "bottom",
        )
    xmax = (
        1.15
        * max(
            foot["registers"]["total"],
            foot["shared"]["total"],
            foot["register_budget"],
            res["H100"]["shared_budget"],
        )
        / 1024
    )
    left.set_xlim(0, xmax)
    left.set_ylim(-0.6, 1.9)
    left.set_yticks([0, 1], ["shared\nmemory", "registers"])
    left.set(
        xlabel="KiB per thread block",
        title=f"Br={block_q}, Bc={block_k}, d={d}, {itemsize}-byte Q, K, V, {kv_stages} K/V stage(s)",
    )
    left.legend(ncol=4, fontsize=9, loc="upper left")
    table = np.zeros(
        (len(blocks), len(blocks)), int
    )  # 2: fits the A100 (and so the H100); 1: H100 only; 0: none
    for a, Br in enumerate(blocks):
        for b, Bc in enumerate(blocks):
            ok = [
                onchip_fits(
                    c, d, Br, Bc, itemsize=itemsize, kv_stages=kv_stages, warps=warps
                )["fits"]
                for c in chips
            ]
            table[a, b] = 2 if ok[0] else 1 if ok[1] else 0
    palette = ["#dddddd", "#fee08b", "#1b7837"]
    right.imshow(
        table, cmap=ListedColormap(palette), vmin=-0.5, vmax=2.5, origin="lower"
    )
    right.set_xticks(range(len(blocks)), blocks)
    right.set_yticks(range(len(blocks)), blocks)
    right.grid(False)
    right.set(
        xlabel="Bc (keys per block)",
        ylabel="Br (queries per block)",
        title=f"which chip holds a step, d={d}, {warps} warps",
    )
    if block_q in blocks and block_k in blocks:
        right.plot(
            [blocks.index(block_k)],
            [blocks.index(block_q)],
            "s",
            ms=18,
            mfc="none",
            mec="C3",
            mew=2.5,
        )
    kinds = [(2, "A100 and H100"), (1, "H100 only"), (0, "neither")]
    right.legend(
        handles=[
            Patch(facecolor=palette[k], label=name)
            for k, name in kinds
            if (table == k).any()
        ],
        fontsize=9,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=3,
        frameon=False,
    )
    return {
        "registers": foot["registers"],
        "shared": foot["shared"],
        "warps": warps,
        "register_budget": foot["register_budget"],
        "total": foot["registers"]["total"] + foot["shared"]["total"],
        "fits": {c: res[c]["fits"] for c in chips},
        "table": table,
    }


def draw_hbm_traffic(
    N: int = 4096,
    d: int = 64,
    block_q: int = 64,
    block_k: int = 64,
    itemsize: int = 2,
    sram_bytes: int | None = None,
    Ns=None,
    causal: bool = False,
    ax=None,
    limits=None,
) -> dict:
    """Left: HBM bytes of standard attention and the tiled kernels against N for the chosen blocks; right: against SRAM size.

    On the right each SRAM size gets FlashAttention's blocks `fa_block_sizes(bytes, d)`, which work in
    M_sram = bytes / itemsize elements; Theorem 2's order N²d²/M_sram is drawn through the fa1 curve's first
    point (the theorem fixes no constant); the vertical line is `sram_bytes` (default: an A100 SM's shared
    memory, from `lab.hardware`); every line is in the legend. With `causal` the tiled kernels skip the masked tiles (close to half the
    traffic for tiles small against N); standard attention computes and stores all of S. `limits`,
    if given, fixes the axes: ((x0, x1), (y0, y1)) of the left panel in N and MB, (y0, y1) of the
    right in MB (a slider passes the widest of its settings, so that they share one frame).
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    from ..tiling import fa_block_sizes

    if (
        Ns is None
    ):  # from N = 256 (or the chosen N, if smaller: its marker then sits on the curves)
        Ns = [2**p for p in range(8, 17)]
        Ns = sorted({N, *Ns}) if N < Ns[0] else Ns
    Ns = np.array(Ns)
    sram_bytes = CHIPS["A100"]["shared_per_sm"] if sram_bytes is None else sram_bytes
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(13, 4.8))
    left, right = ax
    mb = 1e6

    def fa(n, variant, Br, Bc):
        return flash_counts(
            int(n),
            int(n),
            d,
            block_q=Br,
            block_k=Bc,
            variant=variant,
            itemsize=itemsize,
            causal=causal,
        ).total

    std = np.array([standard_traffic(int(n), d=d, itemsize=itemsize).total for n in Ns])
    left.loglog(Ns, std / mb, "o-", base=2, color="C3", label="standard: Θ(Nd + N²)")
    for variant, marker, color in (("fa1", "s-", "C1"), ("fa2", "^-", "C0")):
        left.loglog(
            Ns,
            np.array([fa(n, variant, block_q, block_k) for n in Ns]) / mb,
            marker,
            base=2,
            color=color,
            label=f"{variant}, Br={block_q}, Bc={block_k}",
        )
    left.axvline(N, color="k", lw=0.8, label=f"N = {N:,} (the right panel's N)")
    left.set(
        xlabel="sequence length N (= M keys)",
        ylabel="bytes requested, MB (one head)",
        title=f"against N: d={d}, {itemsize}-byte inputs,\nboth tiled at {block_q} × {block_k}"
        + (", causal" if causal else ""),
    )
    left.legend(fontsize=10)
    srams = np.array([2**p * 1024 for p in range(4, 11)])  # 16 KiB .. 1 MiB
    blocks = [fa_block_sizes(int(m), d, itemsize) for m in srams]
    fa1 = np.array([fa(N, "fa1", Br, Bc) for Br, Bc in blocks])
    theorem = np.array([theorem2_bytes(N, d, int(m), itemsize) for m in srams])
    right.loglog(
        srams / 1024,
        np.full(len(srams), standard_traffic(N, d=d, itemsize=itemsize).total) / mb,
        "o-",
        base=2,
        color="C3",
        label="standard",
    )
    right.loglog(
        srams / 1024,
        fa1 / mb,
        "s-",
        base=2,
        color="C1",
        label="fa1, Bc = ⌈M_sram/4d⌉, Br = min(Bc, d)",
    )
    right.loglog(
        srams / 1024,
        theorem * fa1[0] / theorem[0] / mb,
        "--",
        base=2,
        color="gray",
        label="∝ N²d²/M_sram (Theorem 2)",
    )
    right.axvline(
        sram_bytes / 1024,
        color="k",
        lw=0.8,
        label=f"{sram_bytes // 1024} KiB: an A100 SM's shared memory",
    )
    right.set(
        xlabel=f"SRAM size, KiB (M_sram: these bytes ÷ {itemsize}, in elements)",
        ylabel="bytes requested, MB",
        title=f"against SRAM: N={N:,}, d={d};\nfa1 at Algorithm 1's blocks"
        + (", causal" if causal else ""),
    )
    right.legend(fontsize=10)
    if limits is not None:
        (left_x, left_y), right_y = limits
        left.set(xlim=left_x, ylim=left_y)
        right.set_ylim(right_y)
    _plain_log_labels(left, right, n_axis=left)
    here = {
        "standard": standard_traffic(N, d=d, itemsize=itemsize).total,
        "fa1": fa(N, "fa1", block_q, block_k),
        "fa2": fa(N, "fa2", block_q, block_k),
    }
    Br_M, Bc_M = fa_block_sizes(sram_bytes, d, itemsize)
    return {
        "N": N,
        "causal": bool(causal),
        **here,
        "ratio_fa2": here["standard"] / here["fa2"],
        "ratio_fa1": here["standard"] / here["fa1"],
        "paper_blocks": (Br_M, Bc_M),
        "fa1_paper_blocks": fa(N, "fa1", Br_M, Bc_M),
        "sram_sizes": [int(m) for m in srams],
        "fa1_by_sram": [int(x) for x in fa1],
    }


def draw_peak_memory(Ns, naive, flash, naive_formula, flash_formula, ax=None) -> dict:
    """Measured peak bytes (markers) of standard and tiled attention against N, beside their formulas (lines).

    The formulas cover every N in `Ns`; the measurements may stop earlier (the first len(naive) values).
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    Ns = np.asarray(Ns)
    Nm = Ns[: len(naive)]
    if ax is None:
        _, ax = plt.subplots()
    mib = 2**20
    ax.loglog(
        Ns,
        np.asarray(naive_formula) / mib,
        "-",
        base=2,
        color="C3",
        label="formula: S and P, 2·N²·4 B, and o",
    )
    ax.loglog(
        Nm,
        np.asarray(naive) / mib,
        "o",
        base=2,
        color="C3",
        ms=9,
        label="measured: attention_naive",
    )
    ax.loglog(
        Ns,
        np.asarray(flash_formula) / mib,
        "-",
        base=2,
        color="C0",
        label="formula: o, lse + one tile step",
    )
    ax.loglog(
        Nm,
        np.asarray(flash) / mib,
        "^",
        base=2,
        color="C0",
        ms=9,
        label="measured: flash_attention_numpy",
    )
    ax.set(
        xlabel="sequence length N",
        ylabel="peak MiB above the inputs (float32, one head)",
        title="Quadratic against nearly linear",
    )
    ax.legend(fontsize=10)
    _plain_log_labels(ax, n_axis=ax)
    return {"N": [int(n) for n in Nm], "ratio": [a / b for a, b in zip(naive, flash)]}


def __getattr__(name):
    """Notebook 06's figures, once drawn from here, now live in `lab.figures.fa2`: the old names still work."""
    if name in ("draw_op_counts", "draw_work_split", "draw_warp_split"):
        from . import fa2

        return getattr(fa2, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
