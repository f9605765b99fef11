"""Figures for notebooks 01 and 02: where naive softmax breaks per dtype, accesses per element, the online trace.

Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..access_count import count_accesses
from ..overflow import (
    GAPS,
    SOFTMAX_DTYPES,
    WORKS_EPS,
    break_points,
    exp_limits,
    naive_vs_safe,
)
from ..softmax_steps import demo_scores, online_trace, online_vs_safe

__all__ = ["draw_overflow", "draw_access_counts", "draw_online_trace", "draw_rescale"]


def _fmt_p(p: np.ndarray) -> str:
    return (
        "["
        + ", ".join(
            "nan" if np.isnan(v) else "inf" if np.isinf(v) else f"{v:.2f}" for v in p
        )
        + "]"
    )


def draw_overflow(s: float = 100.0, dtypes=tuple(SOFTMAX_DTYPES), ax=None) -> dict:
    """Per dtype, the range of largest scores s where the naive softmax of (s, s−1, s−2, s−3) works, with s marked.

    Works: every entry within `WORKS_EPS`·eps of the format, relative, of the float64 softmax of the same stored row.
    Green from the first broken s going down to the first going up (`lab.overflow.break_points`, s 0.01 apart);
    hatched below it, down to the lowest s that still works by luck. A tick marks log(smallest normal) on each bar.
    Returns `naive_vs_safe(s)` plus the break points `above`, `below` and `lowest_working`.
    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.2))
    res = naive_vs_safe(s, dtypes)
    lo_lim, hi_lim = -1000, 1000
    breaks = {}
    for i, name in enumerate(dtypes):
        y = len(dtypes) - 1 - i
        edges = break_points(name, GAPS)  # a grid of s 0.01 apart, not only integers
        above, below, luck = edges["above"], edges["below"], edges["lowest_working"]
        breaks[name] = {"above": above, "below": below, "lowest_working": luck}
        bar = {"height": 0.55}
        ax.barh(y, above - below, left=below, color="C2", alpha=0.35, **bar)
        # below the edge some s still work, by luck of the subnormal grid: hatched
        ax.barh(y, below - luck, left=luck, color="C1", alpha=0.3, hatch="//", **bar)
        ax.barh(y, luck - lo_lim, left=lo_lim, color="C3", alpha=0.25, **bar)
        ax.barh(y, hi_lim - above, left=above, color="C3", alpha=0.25, **bar)
        for edge in (below, above):
            ax.text(
                edge,
                y + 0.33,
                f"{edge:+.2f}",
                ha="center",
                va="bottom",
                fontsize=11,
                bbox={"fc": "white", "ec": "none", "pad": 0.5},
            )
        normal = exp_limits(name)["log_normal"]
        ax.plot([normal, normal], [y - 0.3, y + 0.3], color="k", lw=1.2, ls=":")
        r = res[name]
        for dy, kind in ((0.16, "naive"), (-0.16, "safe")):
            bad = r[f"{kind}_broken"]
            ax.text(
                hi_lim * 1.25,
                y + dy,
                f"{kind:>5} {_fmt_p(r[kind])} {'✗' if bad else '✓'}",
                va="center",
                fontsize=11,
                color="C3" if bad else "black",
                family="monospace",
            )
    ax.axvline(s, color="k", lw=2)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(lo_lim, hi_lim)
    ax.set_ylim(-0.6, len(dtypes) - 0.2)
    ax.set_yticks(range(len(dtypes)), list(dtypes)[::-1])
    ax.grid(axis="y", visible=False)
    ax.set(
        xlabel="largest score s (symlog axis); row x = (s, s−1, s−2, s−3); dotted: log(smallest normal);"
        " hatched: some s work",
        title=f"Naive softmax within {WORKS_EPS}·eps of float64 in green (s = {s:g} marked); safe everywhere",
    )
    return {"s": float(s), "results": res, "breaks": breaks}


def draw_access_counts(n: int = 256, block: int = 1, seed: int = 0, ax=None) -> dict:
    """Measured loads and stores per element of the naive, safe and online softmax on one row of n scores (stacked bars).

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    x = demo_scores(n, seed=seed)
    counts = {m: count_accesses(m, x, block) for m in ("naive", "safe", "online")}
    names = list(counts)
    reads = np.array([counts[m].reads / n for m in names])
    writes = np.array([counts[m].writes / n for m in names])
    ax.bar(names, reads, color="C0", label="loads per element")
    ax.bar(names, writes, bottom=reads, color="C1", label="stores per element")
    for i, tot in enumerate(reads + writes):
        ax.text(i, tot + 0.08, f"{tot:g}", ha="center", fontsize=13, weight="bold")
    ax.set(
        ylabel="memory accesses per element",
        ylim=(0, 5),
        title=f"Counted accesses, one row of M = {n} scores (block = {block})",
    )
    ax.legend(loc="upper right", fontsize=10)
    return {
        "n": n,
        "block": block,
        "per_element": {m: counts[m].per_element for m in names},
        "reads": {m: counts[m].reads for m in names},
        "writes": {m: counts[m].writes for m in names},
    }


def draw_online_trace(
    block: int = 8,
    shift: float = 0.0,
    scale: float = 1.0,
    n: int = 64,
    seed: int = 0,
    axes=None,
) -> dict:
    """The row's scores with the running max m′ after each block (top) and l′ after each block (bottom).

    Returns the trace, the final (m, l), max |online − safe|, and the blocks that raised m (`raised`) and where l fell
    (`fell`).
    Taught in: notebooks/02_online_softmax.ipynb
    """
    x = demo_scores(n, shift, scale, seed)
    tr = online_trace(x, block)
    cmp = online_vs_safe(x, block)
    if axes is None:
        _, axes = plt.subplots(
            2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
        )
    ax_m, ax_l = axes
    j = np.arange(n)
    for b, (a, z) in enumerate(zip(tr["start"], tr["stop"])):
        if b % 2:
            ax_m.axvspan(a - 0.5, z - 0.5, color="gray", alpha=0.12, lw=0)
            ax_l.axvspan(a - 0.5, z - 0.5, color="gray", alpha=0.12, lw=0)
    ax_m.plot(j, x, "o", ms=4, color="C0", label="scores x_j")
    ends = tr["stop"] - 1  # m′ is known once the block's last score is read
    ax_m.step(
        np.r_[ends, n - 0.5],
        np.r_[tr["m_new"], tr["m_new"][-1]],
        where="post",
        color="C3",
        lw=2.5,
        label="running max m′ (from each block's end)",
    )
    # where m′ ends up (one block, Bc ≥ n, has no steps to draw: this line is its m′)
    ax_m.axhline(tr["m_new"][-1], color="C3", lw=1, ls=":", label="final m")
    grew = tr["alpha"] < 1
    grew[0] = False  # the first block has nothing to rescale
    # ring the score that raised the max (the block's largest), so the dot stays visible inside
    top = np.array(
        [a + int(np.argmax(x[a:z])) for a, z in zip(tr["start"], tr["stop"])]
    )
    ax_m.plot(
        top[grew],
        x[top[grew]],
        "o",
        ms=11,
        mfc="none",
        mew=2,
        color="C3",
        label=f"m′ > m: the score that raised the max ({int(grew.sum())}×)",
    )
    ax_m.set_ylabel("score")
    ax_m.ticklabel_format(axis="y", useOffset=False)  # 1000.4, not 0.4 and "+1e3"
    ax_m.set_title(
        f"Online softmax, M = {n}, Bc = {block}: "
        f"{len(tr['block'])} block{'s' * (len(tr['block']) > 1)}; "
        f"max |online − safe| = {cmp['max_abs_diff']:.1e}",
        pad=26,  # the legend sits between the title and the plot, on none of the dots
    )
    ax_m.legend(
        loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=9, frameon=False
    )
    centers = (tr["start"] + tr["stop"] - 1) / 2
    ax_l.bar(  # each bar spans its block's scores, j = start to stop - 1
        tr["start"] - 0.4,
        tr["l_new"],
        width=tr["stop"] - tr["start"] - 0.2,
        align="edge",
        color="C2",
        label="l′ after the block",
    )
    ax_l.plot(
        centers, tr["l_direct"], "k_", ms=12, mew=2, label="Σ exp(x_j − m′) recomputed"
    )
    fell = tr["l_new"] < tr["l"]  # l′ < l: the block left a smaller sum than it found
    if len(tr["block"]) <= 16:
        for c, lv in zip(centers[fell], tr["l_new"][fell]):
            ax_l.text(c, lv, "l fell", ha="center", va="bottom", fontsize=9)
    elif (
        fell.any()
    ):  # too many blocks for a word each: a mark above each bar where l fell
        ax_l.plot(
            centers[fell],
            tr["l_new"][fell] * 1.08,
            "v",
            ms=5,
            color="k",
            label="l′ < l: l fell",
        )
    ax_l.set(xlabel="index j of the score x_j (shaded: alternate blocks)", ylabel="l′")
    top = float(max(tr["l_new"].max(), tr["l_direct"].max()))
    ax_l.set_ylim(0, 1.4 * top)  # headroom: the legend sits above the bars, not on them
    ax_l.legend(loc="upper left", ncol=2, fontsize=9)
    return {
        "block": block,
        "shift": float(shift),
        "scale": float(scale),
        "n": n,
        "trace": tr,
        "m": cmp["m"],
        "l": cmp["l"],
        "max_abs_diff": cmp["max_abs_diff"],
        "rescales": int(grew.sum()),
        "raised": [int(b) for b in tr["block"][grew]],
        "fell": [int(b) for b in tr["block"][fell]],
    }


def draw_rescale(
    block: int = 8, step: int = 5, n: int = 64, seed: int = 0, axes=None
) -> dict:
    """One online step drawn as its terms: each old term $e^{x_j - m}$ before the block (left), and after it
    (right) the same terms times $\\alpha = e^{m - m'}$ beside the block's own terms $e^{x_j - m'}$.

    The bars' heights add up to $l$ (left) and $l' = \\alpha\\, l + \\sum_{j \\in blk} e^{x_j - m'}$ (right).
    Returns m, m′, α, l, l′ and the block's sum. Taught in: notebooks/02_online_softmax.ipynb
    """
    x = demo_scores(n, seed=seed)
    tr = online_trace(x, block)
    a, z = int(tr["start"][step]), int(tr["stop"][step])
    m, m_new, alpha = (
        float(tr["m"][step]),
        float(tr["m_new"][step]),
        float(tr["alpha"][step]),
    )
    old = np.exp(x[:a] - m)  # the old terms, against the old max
    new = np.exp(x[a:z] - m_new)  # the block's terms, against the new max
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    ax0, ax1 = axes
    j_old, j_new = np.arange(a), np.arange(a, z)
    ax0.bar(j_old, old, color="C0", width=0.8, label="old terms e^(x_j − m)")
    ax0.set(
        title=f"before block b = {step}: m = {m:.3f}, l = Σ = {old.sum():.2f}",
        xlabel="index j",
        ylabel="term",
    )
    ax1.bar(j_old, old, color="none", edgecolor="C0", width=0.8, ls=":", label="before")
    ax1.bar(j_old, alpha * old, color="C0", width=0.8, label=f"old × α = {alpha:.3f}")
    ax1.bar(j_new, new, color="C1", width=0.8, label="block's terms e^(x_j − m′)")
    l_new = alpha * old.sum() + new.sum()
    ax1.set(
        title=f"after it: m′ = {m_new:.3f}, l′ = α·l + {new.sum():.2f} = {l_new:.2f}",
        xlabel="index j",
    )
    for ax in axes:
        ax.set_ylim(
            0, 1.75
        )  # headroom: the legend sits above the tallest term, e^0 = 1
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    axes[0].legend(loc="upper left", fontsize=10, frameon=False)
    axes[1].legend(loc="upper left", fontsize=10, frameon=False)
    return {
        "m": m,
        "m_new": m_new,
        "alpha": alpha,
        "l": float(old.sum()),
        "l_new": float(l_new),
        "block_sum": float(new.sum()),
    }
