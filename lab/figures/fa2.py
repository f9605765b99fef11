"""Figures for notebook 06: the operations fa1 and fa2 perform and their time at a chip's peak rates, the split
of one head's tiles across thread blocks, and the split of one tile across warps.

Each function draws one figure from `lab.tiling` numbers and returns those numbers in a dict.

Taught in: notebooks/06_flashattention2.ipynb, notebooks/06_flashattention2_parallelism.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
from matplotlib.patches import Rectangle

from ..hardware import chip as chip_figures
from ..tiling import (
    flash_counts,
    flop_split,
    gpu_time_share,
    tile_counts,
    time_rows,
    warp_split_exchange,
    wave_counts,
)
from ..validate import check_block, check_positive
from .tiling import loop_order

# One colour per kind of work, in both time figures (draw_op_counts' right panel, draw_time_split)
UNIT_COLOURS = {"matmul": "C7", "exp": "C3", "rest": "C9"}
UNIT_LABELS = {"matmul": "matmul", "exp": "exp", "rest": "the rest (FP32)"}

__all__ = [
    "UNIT_COLOURS",
    "draw_op_counts",
    "draw_work_split",
    "draw_waves",
    "draw_loop_order",
    "draw_wave_timeline",
    "draw_warp_split",
    "draw_exchange_cost",
    "draw_time_split",
]


def draw_op_counts(
    N: int = 1024,
    d: int = 64,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    chip: str = "A100",
    ax=None,
    *,
    highlight: str | None = None,
) -> dict:
    """Exps, multiplies and divides of fa1 and fa2 (left) and the time at `chip`'s peak rates (right): matmuls,
    exponentials at the special-function rate, the rest at the FP32 rate (`lab.gpu_time_share`).

    `highlight` ("fa1" or "fa2"): that variant drawn outlined, the other faded (the slider's choice).

    Taught in: notebooks/06_flashattention2.ipynb
    """
    if highlight not in (None, "fa1", "fa2"):
        raise ValueError(f"highlight must be 'fa1', 'fa2' or None, got {highlight!r}")
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    left, right = ax
    look = {
        v: {}
        if highlight is None
        else {"edgecolor": "k", "linewidth": 2}
        if v == highlight
        else {"alpha": 0.3}
        for v in ("fa1", "fa2")
    }
    split = {
        v: flop_split(
            N, N, d, block_q=block_q, block_k=block_k, causal=causal, variant=v
        )
        for v in ("fa1", "fa2")
    }
    kinds = ["exp", "mul", "div"]
    x = np.arange(len(kinds))
    for n, v in enumerate(("fa1", "fa2")):
        vals = [split[v][k] / 1e6 for k in kinds]
        bars = left.bar(
            x + (n - 0.5) * 0.38, vals, 0.38, color=f"C{n + 1}", label=v, **look[v]
        )
        left.bar_label(bars, fmt="%.2f", fontsize=9)
    left.set_xticks(x, kinds)
    left.set(
        ylabel="millions of operations",
        title=f"N = {N}, d = {d}, Br = {block_q}, Bc = {block_k}, "
        + ("causal mask on" if causal else "no mask"),
    )
    handles = [  # solid swatches: the legend names the colours, not the faded bar
        plt.Rectangle((0, 0), 1, 1, facecolor=f"C{n + 1}") for n in range(2)
    ]
    left.legend(handles, ["fa1", "fa2"])
    share = {
        v: gpu_time_share(
            split[v]["matmul"], split[v]["nonmatmul"], chip, exp=split[v]["exp"]
        )
        for v in ("fa1", "fa2")
    }
    for n, v in enumerate(("fa1", "fa2")):
        t_mm, t_exp = share[v]["t_matmul"] * 1e6, share[v]["t_exp"] * 1e6
        t_rest = share[v]["t_nonmatmul"] * 1e6 - t_exp
        start = 0.0
        for unit, width in (("matmul", t_mm), ("exp", t_exp), ("rest", t_rest)):
            right.barh(
                [n],
                [width],
                left=start,
                color=UNIT_COLOURS[unit],
                label=UNIT_LABELS[unit] if n == 0 else None,
                **look[v],
            )
            start += width
        right.text(
            t_mm + t_exp + t_rest,
            n,
            f"  {share[v]['share']:.0%} outside matmuls",
            va="center",
            fontsize=10,
        )
    right.set_yticks([0, 1], ["fa1", "fa2"])
    right.set_xlim(
        0, max(s["t_matmul"] + s["t_nonmatmul"] for s in share.values()) * 1e6 * 1.6
    )
    right.set(
        xlabel="µs at peak rates (one head)",
        title=f"{chip}: time at peak rates, by kind of work",
    )
    right.legend(
        [plt.Rectangle((0, 0), 1, 1, facecolor=UNIT_COLOURS[u]) for u in UNIT_COLOURS],
        [UNIT_LABELS[u] for u in UNIT_COLOURS],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=3,
        fontsize=10,
        frameon=False,
    )
    return {
        "split": split,
        "share": {v: share[v]["share"] for v in share},
        "t_exp": {v: share[v]["t_exp"] for v in share},
    }


def draw_work_split(
    N: int = 512, block_q: int = 64, block_k: int = 64, workers: int = 4, ax=None
) -> dict:
    """How one head's tiles are shared among thread blocks: FlashAttention runs one thread block per (batch, head)
    that walks every tile of the head itself (left: the order it visits them, key blocks outer); FlashAttention-2
    also gives each query block its own thread block (right: colour = which of `workers` SMs runs it).

    Neither splits a query block's keys across thread blocks, so each output block has one writer in both.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12, 5.4))
    Tr, Tc = -(-N // block_q), -(-N // block_k)
    colors = plt.get_cmap("tab10")
    order = {
        c: n for n, c in enumerate(loop_order(N, N, block_q, block_k, False, "fa1"))
    }
    for a, variant in zip(ax, ("fa1", "fa2")):
        for i in range(Tr):
            for j in range(Tc):
                w = 0 if variant == "fa1" else i % workers
                a.add_patch(
                    Rectangle(
                        (j, i), 1, 1, facecolor=colors(w), alpha=0.75, edgecolor="white"
                    )
                )
                if variant == "fa1" and Tr * Tc <= 100:
                    a.text(
                        j + 0.5,
                        i + 0.5,
                        order[(i, j)] + 1,
                        ha="center",
                        va="center",
                        fontsize=9,
                        color="white",
                    )
            a.add_patch(
                Rectangle(
                    (Tc + 0.4, i),
                    1,
                    1,
                    facecolor=colors(0 if variant == "fa1" else i % workers),
                    edgecolor="k",
                )
            )
        a.text(Tc + 0.9, -0.35, "O", ha="center", fontsize=12, weight="bold")
        a.set_xlim(0, Tc + 1.6)
        a.set_ylim(Tr, -0.8)
        a.set_aspect("equal")
        a.grid(False)
        a.set_xticks([])
        a.set_yticks([])
        a.set(xlabel="key blocks j", ylabel="query blocks i")
        a.set_title(
            "FlashAttention: 1 thread block per head\nwalks all its tiles, key blocks outer (numbers: order)"
            if variant == "fa1"
            else f"FlashAttention-2: 1 thread block per query block\n{Tr} per head, colour = one of "
            f"{workers} SMs (a toy GPU; an A100 has 108)",
            fontsize=11,
        )
    return {
        "Tr": Tr,
        "Tc": Tc,
        "workers": workers,
        "thread_blocks_per_head": {"fa1": 1, "fa2": Tr},
        "writers_per_output_block": {"fa1": 1, "fa2": 1},
    }


def draw_waves(
    B: int = 8,
    H: int = 16,
    N: int = 2048,
    block_q: int = 128,
    chip: str = "A100",
    axes=None,
) -> dict:
    """The SMs of `chip` wave by wave: FA1's $BH$ thread blocks (left) against FA2's $BHT_r$ (right).

    Down the page the rounds of one thread block per SM, across it the SMs: coloured busy, grey idle
    (`lab.tiling.wave_counts`, a model in which every thread block takes the same time). The y axes
    count rounds, not time: an FA1 round walks a whole head, $T_r$ times an FA2 round's work, and each
    panel's label says which. Returns each design's counts.
    """
    sms = chip_figures(chip)["sms"]
    Br = check_block(block_q, "block_q")
    B, H, N = (check_positive(x, n) for x, n in ((B, "B"), (H, "H"), (N, "N")))
    counts = {
        "fa1": wave_counts(B * H, sms),
        "fa2": wave_counts(B * H * -(-N // Br), sms),
    }
    made = (
        axes is None
    )  # a figure of its own: laid out here (a slider lays out its own)
    if made:
        _, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    rounds_of = {  # what one round of an SM is: FA1's thread block walks a head, FA2's one query block
        "fa1": "rounds (one head each)",
        "fa2": "rounds (one query block each)",
    }
    for ax, (name, c), colour in zip(axes, counts.items(), ("#e76f51", "#2a9d8f")):
        # every round but the last fills all SMs
        full, last = c["rounds"] - 1, c["last"]
        for x, y, w, h, fill in (
            (0, 0, sms, full, colour),
            (0, full, last, 1, colour),
            (last, full, sms - last, 1, "#dddddd"),  # idle in the last round
        ):
            if w and h:
                ax.add_patch(Rectangle((x, y), w, h, color=fill, lw=0))
        ax.set_xlim(0, sms)
        ax.set_xticks([round(sms * f) for f in (0, 0.25, 0.5, 0.75, 1)])
        ax.fixed_limits = True  # a slider keeps 0 to sms, the chip's SMs (lab.widgets)
        ax.set_ylim(c["rounds"], 0)
        ax.set(
            xlabel=f"SM (of {sms})",
            ylabel=rounds_of[name],
            title=f"{name.upper()}: {c['blocks']:,} thread blocks, {c['waves']:.2f} waves,"
            f" SM use {c['use']:.1%}",
        )
        ax.title.set_fontsize(11)
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(False)
    if made:
        axes[0].figure.tight_layout()
    return {**counts, "sms": sms, "Tr": -(-N // Br)}


def _o_traffic(Tr: int, Tc: int) -> dict:
    """HBM reads and writes of each O_i: FA1 zeroes it, then reads and writes it at each of its Tc tiles;
    FA2 writes it once, after its last tile."""
    return {
        "fa1": {"reads": Tc, "writes": 1 + Tc},
        "fa2": {"reads": 0, "writes": 1},
    }


def draw_loop_order(
    N: int = 256, M: int = 320, block_q: int = 64, block_k: int = 64, ax=None
) -> dict:
    """The order in which FA1 (key blocks outer) and FA2 (query blocks outer) visit one head's tiles, with each
    tile's HBM reads (R) and writes (W) of its output block O_i marked, and each O_i's totals beside the grid.

    FA1 zeroes O_i in HBM, then reads and writes it at every one of its $T_c$ tiles: $T_c$ reads, $1 + T_c$
    writes. FA2 keeps $acc$ on chip and writes O_i once, after its last tile. Returns the orders, the counts
    drawn and each variant's totals over the head. Taught in: notebooks/06_flashattention2.ipynb
    """
    N, M = check_positive(N, "N"), check_positive(M, "M")
    Br, Bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    Tr, Tc = -(-N // Br), -(-M // Bc)
    if Tr * Tc > 64:
        raise ValueError(
            f"draw_loop_order labels every tile: N = {N}, M = {M} with block_q = {Br}, "
            f"block_k = {Bc} make {Tr} × {Tc} tiles, more than 64"
        )
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12, 4.6))
    traffic = _o_traffic(Tr, Tc)
    out = {"Tr": Tr, "Tc": Tc}
    titles = {
        "fa1": "FA1: key blocks outer\n$O_i$ read (R) and written (W) at every tile",
        "fa2": "FA2: query blocks outer\n$O_i$ written (W) once, after its last tile",
    }
    for a, variant, colour in zip(ax, ("fa1", "fa2"), ("#e76f51", "#2a9d8f")):
        order = loop_order(N, M, Br, Bc, False, variant)
        marks = {"R": 0, "W": 0}
        for n, (i, j) in enumerate(order):
            a.add_patch(
                Rectangle((j, i), 1, 1, facecolor=colour, alpha=0.25, edgecolor="k")
            )
            a.text(j + 0.5, i + 0.4, n + 1, ha="center", va="center", fontsize=15)
            tag = "R W" if variant == "fa1" else ("W" if j == Tc - 1 else "")
            for x in tag.split():
                marks[x] += 1
            if tag:
                a.text(j + 0.5, i + 0.78, tag, ha="center", va="center", fontsize=11)
        centres = np.array([(j + 0.5, i + 0.5) for i, j in order])
        a.plot(*centres.T, color=colour, lw=1.5, alpha=0.45, zorder=1.5)
        t = traffic[variant]
        for i in range(Tr):
            a.add_patch(
                Rectangle((Tc + 0.3, i), 1.6, 1, facecolor="white", edgecolor="k")
            )
            text = f"R {t['reads']}\nW {t['writes']}" if t["reads"] else "W 1"
            a.text(Tc + 1.1, i + 0.5, text, ha="center", va="center", fontsize=12)
        a.text(Tc + 1.1, -0.25, "$O_i$ in HBM", ha="center", fontsize=12, weight="bold")
        a.set_xlim(0, Tc + 2)
        a.set_ylim(Tr, -0.6)
        a.set_aspect("equal")
        a.grid(False)
        a.set_xticks(np.arange(Tc) + 0.5, [f"j={j}" for j in range(Tc)], fontsize=11)
        a.set_yticks(np.arange(Tr) + 0.5, [f"i={i}" for i in range(Tr)], fontsize=11)
        a.tick_params(length=0)
        a.set_title(titles[variant], fontsize=13)
        out[variant] = {
            "order": order,
            "marks": marks,
            "O_reads": Tr * t["reads"],
            "O_writes": Tr * t["writes"],
        }
    ax[0].figure.tight_layout()
    return out


def draw_wave_timeline(
    B: int = 8,
    H: int = 16,
    N: int = 2048,
    block_q: int = 128,
    chip: str = "A100",
    axes=None,
    unit_rows: int = 128,
) -> dict:
    r"""The SMs of `chip` over time: FA1's $BH$ thread blocks (left) against FA2's $BHT_r$ (right), each a bar.

    Across the page the SMs, down it time, in one unit: the time of `unit_rows` = 128 query rows against all
    the keys. An FA2 thread block takes $B_r / 128$ units, an FA1 thread block walks a whole head, $T_r$ times
    as long. One thread block per SM at a time, time in proportion to its rows (`lab.tiling.wave_counts`, a
    model). Each panel marks when the last bar ends (`done`) and when the work would end with every SM busy
    (`ideal`). Returns each design's counts with its bar length `unit`.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    sms = chip_figures(chip)["sms"]
    Br, unit_rows = (
        check_block(block_q, "block_q"),
        check_positive(unit_rows, "unit_rows"),
    )
    B, H, N = (check_positive(x, n) for x, n in ((B, "B"), (H, "H"), (N, "N")))
    Tr = -(-N // Br)
    counts = {
        "fa1": {**wave_counts(B * H, sms), "unit": Tr * Br / unit_rows},
        "fa2": {**wave_counts(B * H * Tr, sms), "unit": Br / unit_rows},
    }
    for c in counts.values():
        c["done"] = c["rounds"] * c["unit"]
    ideal = B * H * Tr * Br / unit_rows / sms  # every SM busy until the work is done
    end = max(c["done"] for c in counts.values())
    made = axes is None
    if made:
        _, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, (name, c), colour in zip(axes, counts.items(), ("#e76f51", "#2a9d8f")):
        full, last, u = c["rounds"] - 1, c["last"], c["unit"]
        for x, y, w, h, fill in (
            (0, 0, sms, full * u, colour),
            (0, full * u, last, u, colour),
            (last, full * u, sms - last, u, "#dddddd"),  # idle in the last wave
        ):
            if w and h:
                ax.add_patch(Rectangle((x, y), w, h, color=fill, lw=0))
        if c["rounds"] <= 120:  # a bar's ends: a white line between waves
            for r in range(1, c["rounds"]):
                ax.plot([0, sms], [r * u] * 2, "w", lw=0.8)
        if sms - last >= sms // 4 and u * 4 >= end * 0.1:  # room for a label
            ax.text((last + sms) / 2, (full + 0.5) * u, f"idle: {sms - last} SMs",
                    ha="center", va="center", fontsize=12)  # fmt: skip
        ax.axhline(ideal, color="k", ls="--", lw=1.2, zorder=3)
        # a thin line, not a bar: only the last wave's SMs still work up to it
        ax.axhline(c["done"], color=colour, ls="--", lw=1.2, zorder=3)
        ax.text(sms * 0.98, c["done"] + end * 0.01, f"done at {c['done']:,g}",
                ha="right", va="top", fontsize=11, weight="bold")  # fmt: skip
        ax.set_xlim(0, sms)
        ax.set_xticks([round(sms * f) for f in (0, 0.25, 0.5, 0.75, 1)])
        ax.fixed_limits = True  # a slider keeps 0 to sms and the shared time axis
        ax.set_ylim(end * 1.1, 0)  # room under the last line for its label
        ax.set(
            xlabel=f"SM (of {sms})",
            ylabel=f"time (1 = {unit_rows} query rows' loop)",
            title=f"{name.upper()}: {c['blocks']:,} thread blocks × {u:,g}, "
            f"{c['waves']:.2f} waves",
        )
        ax.title.set_fontsize(12)
        ax.grid(False)
    axes[0].text(sms * 0.02, ideal, f"every SM busy: {ideal:.2f}", va="bottom",
                 fontsize=10)  # fmt: skip
    if made:
        axes[0].figure.tight_layout()
    return {**counts, "sms": sms, "Tr": Tr, "ideal": ideal}


def draw_warp_split(
    block_q: int = 64,
    block_k: int = 64,
    dv: int = 64,
    warps: int = 4,
    ax=None,
    *,
    counts: bool = True,
) -> dict:
    """Inside one thread block: which warp computes which part of a tile S_ij and of the output block, when the
    warps split K_j, V_j (FlashAttention, "split-K", left) or Q_i (FlashAttention-2, "split-Q", right).

    Under split-K every warp holds a partial output for all Br rows (stacked on the left), to be summed through
    shared memory; under split-Q each warp owns whole rows. Counts from `lab.warp_split_exchange`, named in the
    titles unless `counts=False` (the figure drawn before the exercise that counts them).
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(12, 5.2))
    colors = plt.get_cmap("tab10")
    Br, Bc, w = block_q, block_k, warps
    out = {s: warp_split_exchange(Br, Bc, dv, warps=w, split=s) for s in ("K", "Q")}
    gap, ow = 0.15 * Bc, 0.6 * Bc  # space, then the output block's width
    for a, split in zip(ax, ("K", "Q")):
        for n in range(w):
            if split == "K":
                k0, k1 = n * Bc / w, (n + 1) * Bc / w
                a.add_patch(
                    Rectangle(
                        (k0, 0),
                        k1 - k0,
                        Br,
                        facecolor=colors(n),
                        alpha=0.8,
                        edgecolor="white",
                    )
                )
                off = n * 0.06 * Br
                a.add_patch(
                    Rectangle(
                        (Bc + gap + off, off),
                        ow,
                        Br,
                        facecolor=colors(n),
                        alpha=0.8,
                        edgecolor="k",
                    )
                )
            else:
                r0, r1 = n * Br / w, (n + 1) * Br / w
                a.add_patch(
                    Rectangle(
                        (0, r0),
                        Bc,
                        r1 - r0,
                        facecolor=colors(n),
                        alpha=0.8,
                        edgecolor="white",
                    )
                )
                a.add_patch(
                    Rectangle(
                        (Bc + gap, r0),
                        ow,
                        r1 - r0,
                        facecolor=colors(n),
                        alpha=0.8,
                        edgecolor="k",
                    )
                )
        a.text(
            Bc / 2,
            -0.04 * Br,
            f"S_ij ({Br} × {Bc})",
            ha="center",
            va="bottom",
            fontsize=11,
        )
        a.text(
            Bc + gap + ow / 2,
            -0.04 * Br,
            f"acc ({Br} × {dv})",
            ha="center",
            va="bottom",
            fontsize=11,
        )
        a.set_xlim(
            -0.02 * Bc,
            Bc + gap + ow + (w * 0.06 * Br if split == "K" else 0) + 0.05 * Bc,
        )
        a.set_ylim(Br * (1.02 + (w * 0.06 if split == "K" else 0)), -0.15 * Br)
        a.set_aspect("equal")
        a.grid(False)
        a.axis("off")
        e = out[split]
        a.set_title(
            ("FlashAttention, split-K" if split == "K" else "FlashAttention-2, split-Q")
            + f"\neach warp: {e['per_warp_keys']} keys × {e['per_warp_rows']} rows\n"
            + (
                f"{w} partial states merged through shared memory"
                + (
                    f"\n({e['written'] / 1e3:,.1f} kB written, "
                    f"{e['read'] / 1e3:,.1f} kB read per tile)"
                    if counts
                    else ""
                )
                if split == "K"
                else "each warp owns its output rows"
                + ("\n(nothing exchanged)" if counts else "")
            ),
            fontsize=11,
        )
    return {"K": out["K"], "Q": out["Q"]}


def draw_exchange_cost(
    N: int = 4096,
    d: int = 64,
    block_q: int = 64,
    block_k: int = 64,
    warps: int = 4,
    chip: str = "A100",
    ax=None,
) -> dict:
    """Split-K's shared-memory exchange (float32 partials) over one head against the head's HBM traffic (fp16), counted FA1's way and
    FA2's: in MB (left) and in µs at peak bandwidth (right): shared memory at 128 bytes a clock per SM
    (32 banks of 4 bytes), HBM at `chip`'s figure. Counts from `lab.warp_split_exchange` and `lab.flash_counts`.

    Returns `bytes` and `us`, each `{"split-K exchange": ..., "fa1 HBM": ..., "fa2 HBM": ...}`, and `smem_bytes_per_s`.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    e = warp_split_exchange(block_q, block_k, d, warps=warps, split="K")
    tiles = tile_counts(N, N, block_q, block_k)["computed"]
    hbm = {
        v: flash_counts(
            N, N, d, block_q=block_q, block_k=block_k, itemsize=2, variant=v
        ).total
        for v in ("fa1", "fa2")
    }
    c = chip_figures(chip)
    smem = c["sms"] * 128 * c["clock_hz"]  # bytes a second, all SMs
    moved = {
        "split-K exchange": (e["written"] + e["read"]) * tiles,
        "fa1 HBM": hbm["fa1"],
        "fa2 HBM": hbm["fa2"],
    }
    rate = {"split-K exchange": smem, "fa1 HBM": c["hbm_bytes_per_s"]}
    rate["fa2 HBM"] = c["hbm_bytes_per_s"]
    us = {k: b / rate[k] * 1e6 for k, b in moved.items()}
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    colors = ["tab:red", "tab:blue", "tab:green"]
    for a, values, unit in ((ax[0], moved, "MB"), (ax[1], us, "µs")):
        scale = 1e6 if unit == "MB" else 1
        y = [v / scale for v in values.values()]
        a.barh(list(values), y, color=colors)
        for n, v in enumerate(y):
            a.text(v, n, f" {v:,.0f}", va="center", fontsize=11)
        a.set_xlim(0, max(y) * 1.2)
        a.invert_yaxis()
        a.set_xlabel(unit)
    ax[0].set_title(
        f"bytes moved, one head, N = {N:,}, d = {d}\nHBM in fp16; the exchange in fp32 (P·V partials)"
    )
    ax[1].set_title(
        f"time at {chip}'s peak bandwidth\nshared memory {smem / 1e12:.1f} TB/s, "
        f"HBM {c['hbm_bytes_per_s'] / 1e12:.3f} TB/s"
    )
    plt.tight_layout()
    return {"bytes": moved, "us": us, "smem_bytes_per_s": smem}


def draw_time_split(split: dict, chips=("A100", "H100"), ax=None) -> dict:
    """One head's time at peak rates, stacked by unit (matmul, exponentials, the rest), for each variant of
    `split` (`flop_split` results) on each chip: section 3's model, from `lab.tiling.time_rows`.

    Returns `{chip: time_rows(split, chip)}`. Taught in: notebooks/06_flashattention2.ipynb
    """
    rows = {c: time_rows(split, c) for c in chips}
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 3.6))
    labels = [f"{c} {r['variant']}" for c in chips for r in rows[c]]
    flat = [r for c in chips for r in rows[c]]
    left = np.zeros(len(flat))
    # the colours of draw_op_counts' time panel
    for unit, color in UNIT_COLOURS.items():
        widths = np.array([r[unit] for r in flat])
        ax.barh(labels, widths, left=left, color=color, label=UNIT_LABELS[unit])
        left += widths
    for n, r in enumerate(flat):
        ax.text(
            left[n],
            n,
            f" {left[n]:.1f} µs ({r['outside']} outside matmuls)",
            va="center",
        )
    ax.set_xlim(0, left.max() * 1.38)  # room for the labels, no more
    ax.invert_yaxis()
    ax.set_xlabel("µs at peak rates, no overlap")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    ax.set_title("where one head's time goes (the model)")
    plt.tight_layout()
    return rows
