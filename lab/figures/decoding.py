"""Figures for notebook 10: K/V cache per token of published models, busy processors when decoding, GQA's intensity,
and a paged K/V cache's block table.

Taught in: notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
"""

from __future__ import annotations

import functools
import math
import os

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullLocator

from ..decoding import (
    H100_RIDGE,
    PROCESSORS,
    cpu_speedup_model,
    decode_intensity,
    decode_schedule,
    key_block_chunks,
    kv_cache_bytes_per_token,
    kv_cache_table,
    refill_ticks,
)
from .tiling import add_tiles

__all__ = [
    "draw_kv_cache",
    "draw_decode_schedule",
    "draw_tick_timeline",
    "draw_gqa_intensity",
    "draw_decode_timings",
    "draw_block_table",
]

_LAYOUT_COLORS = {"MHA": "#e76f51", "GQA": "#2a9d8f", "MQA": "#264653"}


def _plain_log_axes(ax) -> None:
    """Plain tick labels (1, 2, 4, ...) and no minor ticks on log axes: cheaper to draw than mathtext powers."""
    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_major_formatter(
                FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 1 else f"{x:.4g}")
            )
            axis.set_minor_locator(NullLocator())


def draw_kv_cache(itemsize: int = 2, tokens: int = 8192, ax=None) -> dict:
    """Horizontal bars: K/V cache KiB per token of each model in `lab.MODEL_CONFIGS`, with its multi-head size outlined."""
    rows = kv_cache_table(itemsize=itemsize, tokens=tokens)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.8))
    names = [r["model"] for r in rows][::-1]
    rows_r = rows[::-1]
    y = np.arange(len(rows_r))
    ax.barh(
        y,
        [r["mha_bytes_per_token"] / 1024 for r in rows_r],
        color="none",
        edgecolor="gray",
        ls="--",
        label=r"if multi-head ($H_{kv} = H_q$)",
    )
    for layout in ("MHA", "GQA", "MQA"):
        idx = [i for i, r in enumerate(rows_r) if r["layout"] == layout]
        ax.barh(
            y[idx],
            [rows_r[i]["bytes_per_token"] / 1024 for i in idx],
            color=_LAYOUT_COLORS[layout],
            label=layout,
        )
    top = max(r["mha_bytes_per_token"] for r in rows) / 1024
    for i, r in enumerate(rows_r):
        kib, ratio = (
            r["bytes_per_token"] / 1024,
            r["mha_bytes_per_token"] / r["bytes_per_token"],
        )
        less = "multi-head" if ratio == 1 else f"{ratio:.0f}× less than multi-head"
        ax.text(
            max(kib, r["mha_bytes_per_token"] / 1024) * 1.1,
            i,
            f"{kib:,.0f} KiB ({r['q_heads']}q/{r['kv_heads']}kv, {less})",
            va="center",
            fontsize=9,
        )
    low = min(r["bytes_per_token"] for r in rows) / 1024
    ax.set_xscale("log")  # Falcon-7B's 8 KiB and a 2,560 KiB multi-head bar on one page
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yticks(y, names)
    ax.set(
        xlabel=f"K/V cache per token, KiB ({itemsize}-byte elements, all layers; log axis)",
        title="K/V cache per token of published configurations",
        xlim=(low / 2, top * 70),  # room right of the longest bar for its label
    )
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=4,
        fontsize=9,
        frameon=False,
    )
    ax.figure.subplots_adjust(left=0.14, right=0.98, bottom=0.22, top=0.93)
    ax.grid(axis="y", visible=False)
    return {r["model"]: r["bytes_per_token"] for r in rows}


def _against_fa2(speedup: float) -> str:
    """ "3.9× fewer than FA2" or, when splitting costs ticks, "2.1× more than FA2"."""
    if speedup >= 1:
        return f"{speedup:.1f}× fewer than FA2"
    return f"{1 / speedup:.1f}× more than FA2"


@functools.lru_cache(maxsize=32)
def _ticks_by_splits(M: int, batch: int, heads: int, processors: int) -> tuple:
    """Modeled ticks for every split count from 1 up to the key blocks (at most 1,024): `(splits, ticks)`.

    Every count, so a count one past a full wave shows."""
    top = min(max(256, math.ceil(M / 128)), 1024)
    ss = tuple(range(1, top + 1))
    ticks = tuple(
        decode_schedule(M, batch=batch, heads=heads, splits=s, processors=processors)[
            "ticks"
        ]
        for s in ss
    )
    return ss, ticks


def draw_decode_schedule(
    M: int = 32768,
    splits: int = 8,
    *,
    batch: int = 1,
    heads: int = 8,
    processors: int = PROCESSORS,
    axes=None,
) -> dict:
    """Left: which of the processors one decoding step keeps busy with `splits` key chunks; right: modeled ticks against splits."""
    fa2 = decode_schedule(M, batch=batch, heads=heads, splits=1, processors=processors)
    fd = decode_schedule(
        M, batch=batch, heads=heads, splits=splits, processors=processors
    )
    if axes is None:
        _, axes = plt.subplots(
            1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [1, 1.2]}
        )
    ax, bx = axes
    cols = 24  # two slots a processor: a row of 12 processors
    slots = fd["slots"]
    rows = math.ceil(slots / cols)
    colors = [
        "#264653" if p < fa2["busy"] else "#2a9d8f" if p < fd["busy"] else "#eeeeee"
        for p in range(slots)
    ]
    r, c = np.divmod(np.arange(slots), cols)
    boxes = np.stack([c, rows - 1 - r, np.full(slots, 0.9), np.full(slots, 0.9)], 1)
    add_tiles(  # one collection of squares, not a patch each: drawn at once
        ax, boxes, colors, lw=plt.rcParams["patch.linewidth"], edgecolor="white"
    )
    extra = fd["working"] - slots * (fd["waves"] - 1)  # the last wave's items
    last = "" if fd["waves"] == 1 else f"; last: {extra} of {slots} busy"
    waves = f"{fd['waves']} wave{'s' * (fd['waves'] > 1)}"
    ax.set(xlim=(-0.1, cols), ylim=(-0.1, rows), aspect="equal", xticks=[], yticks=[])
    # two short lines: the panel is narrow, and a slider keeps its first axes box
    empty = fd["items"] - fd["working"]  # chunks without a key block: no slot
    idle = f"; {empty:,} empty chunks, no slot" if empty else ""
    ax.set_title(
        f"{fd['working']:,} items on {slots} slots ({processors} processors)\n"
        f"{waves}{last}{idle}",
        fontsize=10,
    )
    ax.grid(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [
        Rectangle((0, 0), 1, 1, facecolor=c) for c in ("#264653", "#2a9d8f", "#eeeeee")
    ]
    ax.legend(
        handles,
        [
            f"busy with FA2 (splits = 1): {fa2['busy']}",
            f"also busy with splits = {splits}: {fd['busy'] - fa2['busy']} more ({fd['busy']} in all)",
            "idle",
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        fontsize=9,
        ncol=1,
        frameon=False,
    )
    ss, ticks = _ticks_by_splits(M, batch, heads, processors)
    bx.loglog(ss, ticks, "-", base=2, color="#2a9d8f", label="flash-decoding (model)")
    bx.axhline(
        fa2["ticks"], color="#264653", ls="--", label=f"FA2: {fa2['ticks']} ticks"
    )
    bx.plot(
        [splits],
        [fd["ticks"]],
        "o",
        ms=13,
        mfc="none",
        mec="C3",
        mew=2,
        label=f"splits = {splits}: {fd['ticks']} ticks ({_against_fa2(fd['speedup'])})",
    )
    bx.set(
        xlabel="splits of the K/V cache",
        ylabel="ticks (key blocks + partials + merge)",
        title=f"M = {M:,} keys, batch {batch}, {heads} K/V heads",
    )
    bx.set_ylim(min(ticks) / 2, fa2["ticks"] * 12)
    bx.legend(loc="upper right", fontsize=9)
    _plain_log_axes(bx)
    bx.figure.subplots_adjust(left=0.05, right=0.97, bottom=0.2, top=0.88, wspace=0.18)
    return {"fa2": fa2, "flash_decoding": fd}


def _timeline(
    key_blocks: int, heads: int, slots: int, splits: int, refill: bool = False
) -> dict:
    """One decoding step of a toy machine, tick by tick: each work item's key blocks, partial and the merge.

    Waves by default: every item of a wave starts when the wave before has ended. `refill=True`: an item takes
    the slot that frees first, as soon as it frees. Returns `cells`, a list of (tick, slot, kind, label) with
    kind "block", "partial" or "merge", and the counts.
    """
    chunks = key_block_chunks(key_blocks, splits)  # dealt out evenly, none empty
    items = [(h, a, b) for h in range(heads) for a, b in chunks]
    longest = max(b - a for a, b in chunks)
    wave_len = longest + (splits > 1)  # the partials: one tick per wave
    waves = -(-len(items) // slots)
    cells, free = [], [0] * slots  # when each slot frees (refill)
    for n, (h, a, b) in enumerate(items):
        wave, slot = divmod(n, slots)
        start = wave * wave_len
        if refill:  # the slot that frees first, the lowest on a tie
            slot = min(range(slots), key=lambda j: (free[j], j))
            start = free[slot]
        cells += [(start + t, slot, "block", f"{h}:{a + t}") for t in range(b - a)]
        end = start + (b - a if refill else longest)  # waves: wait for the longest
        if splits > 1:
            cells.append((end, slot, "partial", "p"))
        free[slot] = end + (splits > 1)
    ticks = (max(free) if refill else waves * wave_len) + (
        splits > 1
    )  # the merge: one tick at the end
    if splits > 1:
        cells += [(ticks - 1, slot, "merge", "") for slot in range(slots)]
    return dict(
        cells=cells, items=len(items), waves=waves, longest=longest, ticks=ticks
    )


def draw_tick_timeline(
    key_blocks: int = 11,
    heads: int = 2,
    slots: int = 6,
    splits=(1, 3, 4),
    axes=None,
    *,
    refill: bool = False,
) -> dict:
    """A toy machine's slots against time, one panel per count in `splits`: what a tick of the model is.

    Each cell is one tick of one slot: a key block streamed (labelled head:block), a partial
    $(o_c, lse_c)$ written (p), or the merge. One sequence, `heads` K/V heads, `key_blocks` blocks.
    Returns {splits: the ticks of the panel}, which equal `lab.decode_schedule`'s (in waves), or with
    `refill=True` (each item on the slot that frees first) `lab.decoding.refill_ticks`'s.
    Taught in: notebooks/10_decoding.ipynb
    """
    splits = tuple(splits)
    runs = {s: _timeline(key_blocks, heads, slots, s, refill) for s in splits}
    for s, r in runs.items():  # the picture and the model agree, or the figure is wrong
        kw = dict(heads=heads, splits=s, processors=slots, per_processor=1)
        if refill:
            assert r["ticks"] == refill_ticks(128 * key_blocks, **kw), s
            continue
        model = decode_schedule(128 * key_blocks, **kw)
        assert r["ticks"] == model["ticks"] and r["waves"] == model["waves"], s
    if axes is None:
        _, axes = plt.subplots(
            len(splits), 1, figsize=(10, 1.35 * len(splits) * slots / 6 + 1.0)
        )
    axes = np.atleast_1d(axes)
    top = max(r["ticks"] for r in runs.values())
    head_colors = ("#2a9d8f", "#e9c46a", "#90be6d", "#f4a261")
    kind_colors = {"partial": "#e76f51", "merge": "#264653"}
    for ax, (s, r) in zip(axes, runs.items()):
        boxes, colors = [], []
        for tick, slot, kind, label in r["cells"]:
            boxes.append((tick + 0.04, slots - 1 - slot + 0.06, 0.92, 0.88))
            head = int(label.split(":")[0]) if kind == "block" else 0
            colors.append(kind_colors.get(kind, head_colors[head % 4]))
            if kind != "merge":
                ax.text(
                    tick + 0.5,
                    slots - 0.5 - slot,
                    label,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if label == "p" else "black",
                )
        add_tiles(ax, boxes, colors, lw=0.5, edgecolor="white")
        if s > 1:
            ax.text(
                r["ticks"] - 0.5,
                slots / 2,
                "merge",
                rotation=90,
                ha="center",
                va="center",
                fontsize=8,
                color="white",
            )
        waves = f"{r['waves']} wave{'s' * (r['waves'] > 1)}"
        if refill:
            waves = "each slot refilled as it frees"
        ax.set_title(
            f"splits = {s}: {r['items']} items on {slots} slots, {waves}, "
            f"longest chunk {r['longest']} key blocks: {r['ticks']} ticks",
            fontsize=10,
            loc="left",
        )
        ax.set(xlim=(0, top), ylim=(0, slots), aspect="auto")
        ax.set_xticks(np.arange(top) + 0.5, [str(t) for t in range(top)], fontsize=8)
        ax.set_yticks(
            np.arange(slots) + 0.5,
            [f"slot {slots - 1 - i}" for i in range(slots)],
            fontsize=8,
        )
        ax.grid(False)
    axes[-1].set_xlabel("tick (one tick: one slot streams one key block)")
    axes[0].figure.suptitle(
        "h:j = K/V head h streams key block j;  p = its partial (o_c, lse_c) written;  "
        "merge = the second launch",
        fontsize=9,
        y=0.995,
    )
    axes[0].figure.subplots_adjust(
        left=0.08, right=0.98, top=0.9, bottom=0.1, hspace=0.6
    )
    return {s: r["ticks"] for s, r in runs.items()}


def draw_gqa_intensity(
    group: int = 4,
    M: int = 4096,
    *,
    q_heads: int = 32,
    layers: int = 32,
    head_dim: int = 128,
    itemsize: int = 2,
    axes=None,
) -> dict:
    """Left: FLOPs per byte of decoding against the group size G (with the H100's ridge); right: K/V cache per token for $H_{kv} = H_q / G$."""
    groups = [g for g in range(1, q_heads + 1) if q_heads % g == 0]
    if group not in groups:
        raise ValueError(f"group must divide q_heads = {q_heads}, got {group}")
    inten = decode_intensity(np.array(groups), head_dim, M, itemsize)
    kib = [
        kv_cache_bytes_per_token(layers, q_heads // g, head_dim, itemsize) / 1024
        for g in groups
    ]
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ax, bx = axes
    ax.loglog(
        groups,
        inten,
        "o-",
        base=2,
        color="#2a9d8f",
        label="decoding, one K/V head's group",
    )
    ax.axhline(
        H100_RIDGE, color="gray", ls="--", label=f"H100 ridge: {H100_RIDGE:.0f} FLOP/B"
    )
    here = decode_intensity(group, head_dim, M, itemsize)
    ax.plot(
        [group],
        [here],
        "o",
        ms=13,
        mfc="none",
        mec="C3",
        mew=2,
        label=f"G = {group}: {here:.1f} FLOP/B",
    )
    ax.set(
        xlabel="query heads per K/V head, G",
        ylabel="FLOPs per byte",
        ylim=(0.5, 5000),
        # the cache's bytes per element: q and o stay 16-bit under an 8-bit cache
        title=f"Arithmetic intensity (M = {M:,}, d = {head_dim}, {itemsize}-byte K/V)",
    )
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=4,
        fontsize=9,
        frameon=False,
    )
    ax.figure.subplots_adjust(left=0.14, right=0.98, bottom=0.22, top=0.93)
    bx.bar(
        [str(g) for g in groups],
        kib,
        color=["C3" if g == group else "#2a9d8f" for g in groups],
    )
    for i, b in enumerate(kib):
        bx.text(i, b * 1.02, f"{b:,.0f}", ha="center", fontsize=10)
    bx.set(
        xlabel=r"$G$  ($H_{kv} = H_q \,/\, G$)",
        ylabel=f"KiB per token, {layers} layers",
        title=f"K/V cache per token, $H_q$ = {q_heads}",
    )
    _plain_log_axes(ax)
    ax.figure.subplots_adjust(left=0.08, right=0.98, bottom=0.13, top=0.92, wspace=0.25)
    return {
        "group": group,
        "kv_heads": q_heads // group,
        "intensity": here,
        "ridge": H100_RIDGE,
        "kib_per_token": kib[groups.index(group)],
        "groups": groups,
    }


def draw_decode_timings(runs, ax=None) -> dict:
    """Bars of the measured speed-up of each (splits, workers) of `lab.time_decoding` over the first run, beside the
    model's (`lab.cpu_speedup_model`: one busy core per chunk, up to the workers). Returns the milliseconds by label."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    labels = [f"splits {r['splits']}\nworkers {r['workers']}" for r in runs]
    ms = [r["seconds"] * 1e3 for r in runs]
    model0 = cpu_speedup_model(runs[0]["splits"], runs[0]["workers"])
    model = [cpu_speedup_model(r["splits"], r["workers"]) / model0 for r in runs]
    x = np.arange(len(runs))
    ax.bar(x - 0.2, [ms[0] / t for t in ms], 0.4, color="#2a9d8f", label="measured")
    ax.bar(
        x + 0.2,
        model,
        0.4,
        color="none",
        edgecolor="#264653",
        hatch="//",
        label="model: one busy core per chunk",
    )
    for i, t in enumerate(ms):
        ax.text(
            i - 0.2, ms[0] / t * 1.02, f"{ms[0] / t:.2f}×", ha="center", fontsize=10
        )
    ax.set_xticks(x, labels)
    ax.set(
        ylabel=f"speed-up over splits {runs[0]['splits']}, workers {runs[0]['workers']}",
        ylim=(0, 1.25 * max(max(model), max(ms[0] / t for t in ms))),
        title=f"One decoding step on this machine's {os.cpu_count()} CPU cores (noisy)",
    )
    ax.legend(loc="upper left")
    return {lab: t for lab, t in zip(labels, ms)}


def draw_block_table(cache, axes=None) -> dict:
    """Left: each sequence's logical blocks, labelled with the physical page the block table maps them to, filled to
    the share of the page's slots in use; right: the pool of physical pages, coloured by the sequence that owns each up
    to the share of its slots in use (the rest of a page is stale slots, never read)."""
    table, lengths, S = cache.block_table, cache.lengths, cache.page_size
    B, T = table.shape
    P = cache.pages_k.shape[0]
    if axes is None:
        _, axes = plt.subplots(
            1,
            2,
            figsize=(11, 0.7 * B + 1.8),
            gridspec_kw={"width_ratios": [T + 1, max(P, T) + 1]},
        )
    ax, ax2 = axes
    colors = plt.cm.tab10(np.arange(B) % 10)
    owner = {}
    for b in range(B):
        n = -(-int(lengths[b]) // S)
        for i in range(n):
            page = int(table[b, i])
            used = min(S, int(lengths[b]) - i * S) / S
            owner[page] = (b, i, used)
            ax.add_patch(
                Rectangle((i, B - 1 - b), 1, 0.8, facecolor="white", edgecolor="black")
            )
            ax.add_patch(
                Rectangle((i, B - 1 - b), used, 0.8, facecolor=colors[b], alpha=0.6)
            )
            ax.text(
                i + 0.5,
                B - 1 - b + 0.4,
                f"{page}",
                ha="center",
                va="center",
                fontsize=12,
            )
    ax.set_xlim(0, T)
    ax.set_ylim(-0.2, B)
    ax.set_xticks(np.arange(T) + 0.5, [str(i) for i in range(T)])
    ax.set_yticks(
        np.arange(B) + 0.4,
        [
            f"seq {b}: {lengths[b]} token{'s' if lengths[b] != 1 else ''}"
            for b in range(B)
        ][::-1],
    )
    ax.set_xlabel("logical block i\n(number: its physical page)")
    ax.set_title(f"block table, pages of {S} tokens")
    ax.grid(False)
    # horizontal labels, as large as a page's box allows (12 pt up to 12 pages: legible projected)
    label = 12 if P <= 12 else max(7, 144 // P)
    for page in range(P):
        b, i, used = owner.get(page, (None, None, 0.0))
        ax2.add_patch(
            Rectangle((page, 0), 0.9, 0.8, facecolor="white", edgecolor="black")
        )
        if b is not None:  # filled to the share of its slots in use, from the bottom
            ax2.add_patch(
                Rectangle((page, 0), 0.9, 0.8 * used, facecolor=colors[b], alpha=0.6)
            )
        ax2.text(
            page + 0.45,
            0.4,
            "free" if b is None else f"{b}·{i}",
            ha="center",
            va="center",
            fontsize=label,
        )
    ax2.set_xlim(0, P)
    ax2.set_ylim(-0.2, 1.2)
    ax2.set_yticks([])
    ax2.set_xticks(np.arange(P) + 0.45, [str(p) for p in range(P)], fontsize=label)
    ax2.set_xlabel(
        "physical page\n(label: sequence · logical block; coloured: slots in use)"
    )
    ax2.set_title("the pool of pages")
    ax2.grid(False)
    for a in (ax, ax2):
        for side in ("top", "right", "left"):
            a.spines[side].set_visible(False)
    plt.tight_layout()
    slots = int((-(-lengths // S)).sum()) * S
    return {
        "pages": P,
        "used_pages": len(owner),
        "slots": slots,
        "tokens": int(lengths.sum()),
        "unused_slots": slots - int(lengths.sum()),
    }
