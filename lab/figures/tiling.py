"""Figures for notebooks 05 and 06: the tile grid, the on-chip footprint, HBM traffic, op counts, work split.

Each function draws one figure from `lab.tiling` numbers and returns those numbers in a dict.

Taught in: notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.ticker import FuncFormatter, NullFormatter
from matplotlib.patches import Patch, Rectangle

from ..tiling import (flash_counts, flop_split, gpu_time_share, standard_traffic, step_footprint,
                        theorem2_bytes, tile_counts, tile_grid)

__all__ = ["loop_order", "draw_tile_grid", "draw_footprint", "draw_hbm_traffic", "draw_peak_memory",
           "draw_op_counts", "draw_work_split"]

_DONE, _TODO, _NOW, _SKIP = "#6fa8dc", "#d9e8f5", "#e69138", "#eeeeee"


def _plain_log_labels(*axes, n_axis=None):
    """Tick labels of log axes as plain numbers (1,024 rather than 2^10): readable, and fast to lay out.

    On `n_axis` (an Axes whose x axis is a length N) powers of two from 1024 up read 1K, 2K, ...
    """
    plain = FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 1 else f"{x:.2g}")
    kilo = FuncFormatter(lambda x, _: f"{x / 1024:,.0f}K" if x >= 1024 else f"{x:,.0f}")
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log":
                axis.set_major_formatter(kilo if (ax is n_axis and axis is ax.xaxis) else plain)
                axis.set_minor_formatter(NullFormatter())


def loop_order(N: int, M: int, block_q: int, block_k: int, causal: bool = False, variant: str = "fa2") -> list:
    """The computed tiles (i, j) in the order the kernel visits them: rows outer for fa2, key blocks outer for fa1.

    Taught in: notebooks/05_tiling.ipynb
    """
    grid = tile_grid(N, M, block_q, block_k, causal)
    cells = [tuple(int(x) for x in c) for c in np.argwhere(grid)]    # row-major: (i, j)
    return cells if variant == "fa2" else sorted(cells, key=lambda c: (c[1], c[0]))


def draw_tile_grid(N: int = 256, M: int | None = None, block_q: int = 64, block_k: int = 64, causal: bool = True,
                   step: int = 0, variant: str = "fa2", ax=None) -> dict:
    """The Tr × Tc tiles of S in element coordinates: done, on chip at `step`, still to do, skipped by the mask.

    Partial last tiles are drawn at their real size; the causal boundary j = i + (M - N) is the red line.
    Taught in: notebooks/05_tiling.ipynb
    """
    M = N if M is None else M
    Br, Bc = block_q, block_k
    counts = tile_counts(N, M, Br, Bc, causal)
    order = loop_order(N, M, Br, Bc, causal, variant)
    step = int(min(max(step, 0), max(len(order) - 1, 0)))
    now = order[step] if order else None
    done = set(order[:step])
    grid = tile_grid(N, M, Br, Bc, causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 6.5))
    for i in range(counts["Tr"]):
        for j in range(counts["Tc"]):
            i0, j0 = i * Br, j * Bc
            h, w = min(Br, N - i0), min(Bc, M - j0)
            color = _SKIP if not grid[i, j] else _NOW if (i, j) == now else _DONE if (i, j) in done else _TODO
            ax.add_patch(Rectangle((j0, i0), w, h, facecolor=color, edgecolor="black", lw=0.8,
                                   hatch="//" if not grid[i, j] else None))
    if causal:
        ax.plot([M - N + 0.5, M + 0.5], [0, N], color="C3", lw=2)
    ax.set_xlim(0, M)
    ax.set_ylim(N, 0)
    ax.set_aspect("equal")
    ax.grid(False)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    ax.set(xlabel="key index j  (blocks of Bc)", ylabel="query index i  (blocks of Br)")
    result = {**counts, "N": N, "M": M, "Br": Br, "Bc": Bc, "causal": bool(causal), "variant": variant,
              "step": step, "steps": len(order), "tile": now, "partial_rows": N % Br, "partial_cols": M % Bc}
    if now is not None:
        i, j = now
        result["rows"] = (i * Br, min((i + 1) * Br, N))
        result["keys"] = (j * Bc, min((j + 1) * Bc, M))
        title = (f"step {step + 1} of {len(order)}: tile ({i}, {j}) on chip = "
                 f"Q[{result['rows'][0]}:{result['rows'][1]}] × K[{result['keys'][0]}:{result['keys'][1]}]")
    else:
        title = "no tile to compute"
    ax.set_title(f"{title}\n{counts['Tr']} × {counts['Tc']} tiles, {counts['computed']} computed "
                 f"({counts['fraction']:.0%}), {variant}: {'rows' if variant == 'fa2' else 'key blocks'} outer",
                 fontsize=11)
    ax.legend(handles=[Patch(facecolor=_DONE, edgecolor="k", label="done"),
                       Patch(facecolor=_NOW, edgecolor="k", label="on chip now"),
                       Patch(facecolor=_TODO, edgecolor="k", label="to do"),
                       Patch(facecolor=_SKIP, edgecolor="k", hatch="//", label="skipped (masked)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4, fontsize=10, frameon=False)
    return result


def draw_footprint(d: int = 64, block_q: int = 64, block_k: int = 64, itemsize: int = 2, srams: dict | None = None,
                   blocks=(16, 32, 64, 128, 256, 512), ax=None) -> dict:
    """Left: the bytes of one tile step, buffer by buffer, against on-chip memories; right: which (Br, Bc) fit where.

    Taught in: notebooks/05_tiling.ipynb
    """
    from ..tiling import sram_sizes

    srams = sram_sizes() if srams is None else srams
    parts = step_footprint(d, block_q, block_k, itemsize=itemsize)
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.3, 1]})
    left, right = ax
    bottom = 0.0
    for n, (name, b) in enumerate((k, v) for k, v in parts.items() if k != "total"):
        left.barh([0.25], [b / 1024], height=0.5, left=bottom, color=f"C{n}", label=name)
        bottom += b / 1024
    names = sorted(srams, key=srams.get)
    xmax = 1.3 * max(parts["total"], *(b for b in srams.values() if b <= 512 * 1024)) / 1024
    off_scale = []
    for n, name in enumerate(names):
        if srams[name] / 1024 <= xmax:
            left.axvline(srams[name] / 1024, color="k", ls=["--", ":", "-."][n % 3], lw=1.5)
            left.text(srams[name] / 1024, 0.78, f" {name}", fontsize=10, rotation=90, va="top", ha="right")
        else:
            off_scale.append(f"{name}: off scale")
    left.set_xlim(0, xmax)
    left.set_ylim(-0.6, 0.8)
    left.set_yticks([])
    left.set(xlabel="KiB on chip" + (f"   ({'; '.join(off_scale)})" if off_scale else ""),
             title=f"one step, Br={block_q}, Bc={block_k}, d={d}, {itemsize}-byte inputs: {parts['total'] / 1024:,.1f} KiB")
    left.legend(ncol=4, fontsize=9, loc="lower right")
    table = np.zeros((len(blocks), len(blocks)), int)           # k: fits names[k-1] first; 0: fits none
    for a, Br in enumerate(blocks):
        for b, Bc in enumerate(blocks):
            total = step_footprint(d, Br, Bc, itemsize=itemsize)["total"]
            fits = [k for k, name in enumerate(names) if total <= srams[name]]
            table[a, b] = fits[0] + 1 if fits else 0
    palette = ["#dddddd", "#1b7837", "#7fbf7b", "#fee08b", "#fdae61"][: len(names) + 1]
    cmap = ListedColormap(palette)
    right.imshow(table, cmap=cmap, vmin=-0.5, vmax=len(palette) - 0.5, origin="lower")
    right.set_xticks(range(len(blocks)), blocks)
    right.set_yticks(range(len(blocks)), blocks)
    right.grid(False)
    right.set(xlabel="Bc (keys per block)", ylabel="Br (queries per block)", title="smallest memory that holds a step")
    if block_q in blocks and block_k in blocks:
        right.plot([blocks.index(block_k)], [blocks.index(block_q)], "s", ms=18, mfc="none", mec="C3", mew=2.5)
    handles = [Patch(facecolor=palette[k + 1], label=name) for k, name in enumerate(names)]
    right.legend(handles=handles + [Patch(facecolor=palette[0], label="none")], fontsize=9, loc="upper center",
                 bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return {"parts": parts, "total": parts["total"], "fits": {name: parts["total"] <= b for name, b in srams.items()}}


def draw_hbm_traffic(N: int = 4096, d: int = 64, block_q: int = 64, block_k: int = 64, itemsize: int = 2,
                     sram_bytes: int = 192 * 1024, Ns=None, ax=None) -> dict:
    """Left: HBM bytes of standard attention and the tiled kernels against N for the chosen blocks; right: against SRAM size.

    On the right each SRAM size M gets FlashAttention's blocks `fa_block_sizes(M, d)`; Theorem 2's
    order N²d²/M is drawn through the fa1 curve's first point (the theorem fixes no constant).
    Taught in: notebooks/05_tiling.ipynb
    """
    from ..tiling import fa_block_sizes

    Ns = np.array([2**p for p in range(8, 17)] if Ns is None else Ns)
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(13, 4.8))
    left, right = ax
    mb = 1e6

    def fa(n, variant, Br, Bc):
        return flash_counts(int(n), int(n), d, block_q=Br, block_k=Bc, variant=variant, itemsize=itemsize).total

    std = np.array([standard_traffic(int(n), d=d, itemsize=itemsize).total for n in Ns])
    left.loglog(Ns, std / mb, "o-", base=2, color="C3", label="standard: Θ(Nd + N²)")
    for variant, marker, color in (("fa1", "s-", "C1"), ("fa2", "^-", "C0")):
        left.loglog(Ns, np.array([fa(n, variant, block_q, block_k) for n in Ns]) / mb, marker, base=2, color=color,
                    label=f"{variant}, Br={block_q}, Bc={block_k}")
    left.axvline(N, color="k", lw=0.8)
    left.set(xlabel="sequence length N (= M keys)", ylabel="HBM traffic, MB (one head)",
             title=f"against N: d={d}, {itemsize}-byte inputs")
    left.legend(fontsize=10)
    srams = np.array([2**p * 1024 for p in range(4, 11)])                     # 16 KiB .. 1 MiB
    blocks = [fa_block_sizes(int(m), d, itemsize) for m in srams]
    fa1 = np.array([fa(N, "fa1", Br, Bc) for Br, Bc in blocks])
    theorem = np.array([theorem2_bytes(N, d, int(m), itemsize) for m in srams])
    right.loglog(srams / 1024, np.full(len(srams), standard_traffic(N, d=d, itemsize=itemsize).total) / mb, "o-",
                 base=2, color="C3", label="standard")
    right.loglog(srams / 1024, fa1 / mb, "s-", base=2, color="C1", label="fa1, Bc = ⌈M/4d⌉, Br = min(Bc, d)")
    right.loglog(srams / 1024, theorem * fa1[0] / theorem[0] / mb, "--", base=2, color="gray",
                 label="∝ N²d²/M (Theorem 2)")
    right.axvline(sram_bytes / 1024, color="k", lw=0.8)
    right.set(xlabel="SRAM size M (KiB)", ylabel="HBM traffic, MB", title=f"against SRAM size: N={N:,}, d={d}")
    right.legend(fontsize=10)
    _plain_log_labels(left, right, n_axis=left)
    here = {"standard": standard_traffic(N, d=d, itemsize=itemsize).total,
            "fa1": fa(N, "fa1", block_q, block_k), "fa2": fa(N, "fa2", block_q, block_k)}
    Br_M, Bc_M = fa_block_sizes(sram_bytes, d, itemsize)
    return {"N": N, **here, "ratio_fa2": here["standard"] / here["fa2"], "ratio_fa1": here["standard"] / here["fa1"],
            "paper_blocks": (Br_M, Bc_M), "fa1_paper_blocks": fa(N, "fa1", Br_M, Bc_M)}


def draw_peak_memory(Ns, naive, flash, naive_formula, flash_formula, ax=None) -> dict:
    """Measured peak bytes (markers) of standard and tiled attention against N, beside their formulas (lines).

    The formulas cover every N in `Ns`; the measurements may stop earlier (the first len(naive) values).
    Taught in: notebooks/05_tiling.ipynb
    """
    Ns = np.asarray(Ns)
    Nm = Ns[: len(naive)]
    if ax is None:
        _, ax = plt.subplots()
    mib = 2**20
    ax.loglog(Ns, np.asarray(naive_formula) / mib, "-", base=2, color="C3", label="formula: 2·N²·4 B (S and P)")
    ax.loglog(Nm, np.asarray(naive) / mib, "o", base=2, color="C3", ms=9, label="measured: attention_naive")
    ax.loglog(Ns, np.asarray(flash_formula) / mib, "-", base=2, color="C0", label="formula: o, lse + one tile step")
    ax.loglog(Nm, np.asarray(flash) / mib, "^", base=2, color="C0", ms=9, label="measured: flash_attention_numpy")
    ax.set(xlabel="sequence length N", ylabel="peak MiB above the inputs (float32, one head)",
           title="The quadratic wall against the linear line")
    ax.legend(fontsize=10)
    _plain_log_labels(ax, n_axis=ax)
    return {"N": [int(n) for n in Nm], "ratio": [a / b for a, b in zip(naive, flash)]}


def draw_op_counts(N: int = 1024, d: int = 64, block_q: int = 64, block_k: int = 64, causal: bool = False,
                   chip: str = "A100", ax=None) -> dict:
    """Exps, multiplies and divides of fa1 and fa2 (left) and the share of time outside matmuls on `chip` (right).

    Taught in: notebooks/06_flashattention2.ipynb
    """
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    left, right = ax
    split = {v: flop_split(N, N, d, block_q=block_q, block_k=block_k, causal=causal, variant=v) for v in ("fa1", "fa2")}
    kinds = ["exp", "mul", "div"]
    x = np.arange(len(kinds))
    for n, v in enumerate(("fa1", "fa2")):
        vals = [split[v][k] / 1e6 for k in kinds]
        bars = left.bar(x + (n - 0.5) * 0.38, vals, 0.38, color=f"C{n + 1}", label=v)
        left.bar_label(bars, fmt="%.2f", fontsize=9)
    left.set_xticks(x, kinds)
    left.set(ylabel="millions of operations", title=f"N = {N}, d = {d}, Br = {block_q}, Bc = {block_k}")
    left.legend()
    share = {v: gpu_time_share(split[v]["matmul"], split[v]["nonmatmul"], chip) for v in ("fa1", "fa2")}
    for n, v in enumerate(("fa1", "fa2")):
        t_mm, t_non = share[v]["t_matmul"] * 1e6, share[v]["t_nonmatmul"] * 1e6
        right.barh([n], [t_mm], color="C7", label="matmul" if n == 0 else None)
        right.barh([n], [t_non], left=t_mm, color=f"C{n + 1}", label=None)
        right.text(t_mm + t_non, n, f"  {share[v]['share']:.0%} outside matmuls", va="center", fontsize=10)
    right.set_yticks([0, 1], ["fa1", "fa2"])
    right.set_xlim(0, max(s["t_matmul"] + s["t_nonmatmul"] for s in share.values()) * 1e6 * 1.6)
    right.set(xlabel="µs at peak rates (one head)", title=f"{chip}: matmul (grey) and the rest")
    right.legend(loc="lower right", fontsize=10)
    return {"split": split, "share": {v: share[v]["share"] for v in share}}


def draw_work_split(N: int = 512, block_q: int = 64, block_k: int = 64, workers: int = 4, ax=None) -> dict:
    """Which worker computes each tile when fa1 splits key blocks (left) and fa2 splits query blocks (right).

    The extra column is O: each of its blocks is written by one worker under fa2, by every worker under fa1.
    Taught in: notebooks/06_flashattention2.ipynb
    """
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12, 5.4))
    Tr, Tc = -(-N // block_q), -(-N // block_k)
    colors = plt.get_cmap("tab10")
    writers = {}
    for a, variant in zip(ax, ("fa1", "fa2")):
        for i in range(Tr):
            for j in range(Tc):
                w = (j if variant == "fa1" else i) % workers
                a.add_patch(Rectangle((j, i), 1, 1, facecolor=colors(w), alpha=0.75, edgecolor="white"))
            if variant == "fa2":
                a.add_patch(Rectangle((Tc + 0.4, i), 1, 1, facecolor=colors(i % workers), edgecolor="k"))
            else:
                a.add_patch(Rectangle((Tc + 0.4, i), 1, 1, facecolor="white", edgecolor="k", hatch="xx"))
        writers[variant] = min(workers, Tc) if variant == "fa1" else 1
        a.text(Tc + 0.9, -0.35, "O", ha="center", fontsize=12, weight="bold")
        a.set_xlim(0, Tc + 1.6)
        a.set_ylim(Tr, -0.8)
        a.set_aspect("equal")
        a.grid(False)
        a.set_xticks([])
        a.set_yticks([])
        a.set(xlabel="key blocks j", ylabel="query blocks i")
        how = ("fa1 split by key blocks:\nevery O_i has " + f"{writers['fa1']} writers (needs atomics)"
               if variant == "fa1" else "fa2 split by query blocks:\neach O_i has 1 writer (no synchronization)")
        a.set_title(how, fontsize=11)
    return {"Tr": Tr, "Tc": Tc, "workers": workers, "writers_per_output_block": writers}
