"""Figures for notebook 00: the chip's two memories (SRAM on chip, HBM off it), the roofline of standard
attention's pieces, the time of each piece, and the N×M arrays a version of attention holds, line by line.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np

from ..hardware import SOURCES, chip
from ..memory import (
    IDEAL_FUSED,
    attainable_flops,
    attention_traffic,
    line_peaks,
    softmax_peak,
)

__all__ = ["draw_memory_hierarchy", "draw_attention_roofline", "draw_line_peaks"]

# The figures the memory picture draws, each with its source in `lab.hardware.SOURCES`
HIERARCHY_FIELDS = (
    "sms",
    "registers_per_sm",
    "l1_shared_per_sm",
    "sram_bytes_per_s",
    "hbm_bytes",
    "hbm_bytes_per_s",
)


def _short_source(text: str) -> str:
    """A source's title and section, its remarks in parentheses and after a semicolon left out."""
    return re.match(r"[^(;]*(\([^)]*\))?[^(;]*", text).group(0).strip(" ,")


def draw_memory_hierarchy(
    chip_name: str = "A100", N: int = 4096, itemsize: int = 2, ax=None
) -> dict:
    """Two boxes: the SRAM on chip (registers and L1 / shared memory of every SM) and the HBM off chip,
    each with its capacity and bandwidth from `lab.hardware`, and what lives in each: standard attention's
    S and P (N×M each, `itemsize` bytes a number) in HBM, FlashAttention's tiles on chip.

    Returns the figures drawn, in bytes and bytes/s, and their sources.
    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    for name, x in (("N", N), ("itemsize", itemsize)):
        if int(x) != x or x < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    c = chip(chip_name)
    regs, shared = c["sms"] * c["registers_per_sm"], c["sms"] * c["l1_shared_per_sm"]
    # NVIDIA's "40 GB" of HBM2 is 5 stacks of 8 GiB, binary like the L2's "40 MB" (40 MiB): the capacity is
    # drawn in GiB, so that the ratio to the on-chip MiB divides bytes by bytes
    sram, hbm = regs + shared, c["hbm_bytes"] / 1e9 * 2**30
    sram_bw, hbm_bw = c["sram_bytes_per_s"], c["hbm_bytes_per_s"]
    s_bytes = N * N * itemsize
    MiB = 2**20
    if ax is None:
        _, ax = plt.subplots(figsize=(14, 6.4), layout="constrained")
    ax.set(xlim=(0, 14), ylim=(0, 6.4))
    ax.axis("off")
    big, mid = 18, 15
    boxes = (  # x, width, colour, heading, figures, what lives there
        (
            0.2,
            5.0,
            "#d9ead3",
            "on chip: SRAM",
            f"{c['sms']} SMs × ({c['registers_per_sm'] // 1024} KiB registers\n"
            f"+ {c['l1_shared_per_sm'] // 1024} KiB L1 / shared memory)\n"
            f"= {sram / MiB:.0f} MiB in all",
            "FlashAttention keeps here:\ntiles of Q, K, V (shared memory),\n"
            "tiles of S, P and the output (registers)",
        ),
        (
            8.3,
            5.5,
            "#f4cccc",
            "off chip: HBM",
            f"{hbm / 2**30:.0f} GiB",
            f"Q, K, V, O: N × d each\nstandard attention writes here\n"
            f"S and P: {s_bytes / MiB:,.0f} MiB each per head (N = M = {N:,})",
        ),
    )
    for x, w, colour, heading, figures, holds in boxes:
        ax.add_patch(plt.Rectangle((x, 0.9), w, 4.6, fc=colour, ec="0.25", lw=2))
        ax.text(
            x + w / 2,
            5.05,
            heading,
            ha="center",
            va="center",
            fontsize=big,
            weight="bold",
        )
        ax.text(x + w / 2, 3.95, figures, ha="center", va="center", fontsize=mid)
        ax.text(
            x + w / 2,
            1.95,
            holds,
            ha="center",
            va="center",
            fontsize=mid,
            style="italic",
        )
    sram_said = (
        "not published"
        if sram_bw is None
        else f"~{sram_bw / 1e12:.0f} TB/s (estimated)"
    )
    ax.text(
        2.7, 0.55, f"bandwidth {sram_said}", ha="center", fontsize=mid, weight="bold"
    )
    ax.text(
        11.05,
        0.55,
        f"bandwidth {hbm_bw / 1e12:g} TB/s",
        ha="center",
        fontsize=mid,
        weight="bold",
    )
    ax.annotate(
        "",
        (8.25, 3.2),
        (5.25, 3.2),
        arrowprops=dict(arrowstyle="<->", lw=3, color="0.25"),
    )
    ax.text(
        6.75,
        3.5,
        "every operand\nand result\ncrosses here",
        ha="center",
        va="bottom",
        fontsize=mid,
    )
    faster = "" if sram_bw is None else f"SRAM {sram_bw / hbm_bw:.0f}× faster, "
    ax.set_title(
        f"{chip_name}: {faster}HBM {hbm / sram:,.0f}× larger",
        fontsize=big + 2,
        weight="bold",
    )
    # the figures drawn and their sources (an unpublished figure has none to cite)
    sources = {f: SOURCES[chip_name][f] for f in HIERARCHY_FIELDS if c[f] is not None}
    cited = list(dict.fromkeys(_short_source(t) for t in sources.values()))
    ax.text(
        0.2, 0.0, "Sources: " + "; ".join(cited), fontsize=12, color="0.35", wrap=True
    )
    return {
        "chip": chip_name,
        "registers": regs,
        "l1_shared": shared,
        "sram": sram,
        "hbm": hbm,
        "sram_bw": sram_bw,
        "hbm_bw": hbm_bw,
        "s_bytes": s_bytes,
        "sources": sources,
        "cited": cited,
    }


_PIECE_STYLE = {
    "S = scale·QKᵀ": ("C0", "o"),
    "P = softmax(S)": ("C3", "s"),
    "O = PV": ("C1", "D"),
    "standard, total": ("C4", "v"),
    "fused: Q, K, V in, O out": ("C2", "*"),
}


def draw_attention_roofline(
    chip_name: str = "A100",
    d: int = 64,
    N: int = 4096,
    itemsize: int = 2,
    softmax_accesses: int = 2,
    axes=None,
) -> dict:
    """Left: the roofline of `chip_name` (matmul and softmax peaks, HBM and, where published, SRAM
    bandwidth) with each piece of standard attention at its intensity and at the rate its time implies:
    F / time for the matmuls and the fused kernel (below the matmul roof: its softmax adds time, not F),
    the softmax's own operations per byte and per second under its own roof. Right: each piece's time,
    memory against compute.

    Returns the rows of `attention_traffic` and the chip's figures. Taught in: notebooks/00_the_memory_wall.ipynb
    """
    c = chip(chip_name)
    rows = attention_traffic(
        N,
        d=d,
        itemsize=itemsize,
        chip_name=chip_name,
        softmax_accesses=softmax_accesses,
    )
    if axes is None:
        _, axes = plt.subplots(
            1,
            2,
            figsize=(15, 7),
            gridspec_kw={"width_ratios": [1.2, 1]},
            layout="constrained",
        )
    ax, ax_t = axes
    xs = np.logspace(-1, 4, 300)
    hbm, sram = c["hbm_bytes_per_s"], c["sram_bytes_per_s"]
    ax.loglog(
        xs,
        attainable_flops(xs, c["matmul_flops"], hbm) / 1e12,
        color="k",
        lw=2.5,
        label=f"matmul roof: {c['matmul_flops'] / 1e12:g} TFLOP/s, HBM {hbm / 1e12:g} TB/s",
    )
    soft_peak = softmax_peak(chip_name)
    ax.loglog(
        xs,
        attainable_flops(xs, soft_peak, hbm) / 1e12,
        color="k",
        lw=1.8,
        ls="--",
        label=f"softmax roof: {soft_peak / 1e12:.2f} T operations/s, not FLOP/s (exp at "
        f"{c['exp_per_s'] / 1e12:.2f} T/s, the rest at {c['fp32_ops_per_s'] / 1e12:.2f} T/s)",
    )
    if sram:
        ax.loglog(
            xs,
            attainable_flops(xs, c["matmul_flops"], sram) / 1e12,
            color="C2",
            lw=1.5,
            ls=":",
            label=f"if the operands were in SRAM: {sram / 1e12:g} TB/s",
        )
    else:  # a legend line that says why there is no SRAM roof
        ax.plot(
            [],
            [],
            color="C2",
            lw=1.5,
            ls=":",
            label=f"no SRAM roof: {chip_name}'s on-chip bandwidth is not published",
        )
    ridge = c["ridge_flops_per_byte"]
    ax.axvline(ridge, color="gray", lw=1, ls=":")
    ax.text(ridge * 1.15, 0.15, f"ridge\n{ridge:.0f} FLOP/B", color="gray", fontsize=12)
    labels = {}  # pieces at the same intensity share one label
    shown = {r["piece"]: r["piece"] for r in rows} | {rows[4]["piece"]: IDEAL_FUSED}
    for r in rows[:3] + rows[4:]:
        x = r["intensity"] or r["op_intensity"]  # the softmax has no F: its operations
        labels.setdefault(round(x, 9), []).append(r)
    for group in labels.values():
        r = group[0]
        color, marker = _PIECE_STYLE[r["piece"]]
        # the rate its time implies, on a roof or below: F / time, the softmax's operations / time
        y = (r["flops"] or r["ops"]) / r["time"] / 1e12
        i = r["intensity"] or r["op_intensity"]
        ax.plot(
            [i],
            [y],
            marker=marker,
            color=color,
            ms=16 if marker == "*" else 12,
            ls="none",
        )
        text = (
            " and ".join(shown[g["piece"]] for g in group) + f"\n{i:,.0f} FLOP/B"
            if r["flops"]
            else shown[r["piece"]] + f"\n{i:.2f} operations/B"
        )
        if (
            r["kind"] == "mixed"
        ):  # below the matmul roof: its softmax is not on tensor cores
            text += f", {y:.0f} TFLOP/s"
        fused, matmul = r["kind"] == "mixed", r["kind"] == "matmul"
        # the matmuls' label sits above the SRAM roof's flat part, with a leader line, and the softmax's below its roof,
        # so that no roof crosses a label
        xytext, ha, va = (
            ((0, -18), "center", "top")
            if fused
            else ((-12, 48), "right", "bottom")
            if matmul
            else ((14, -6), "left", "top")
        )
        ax.annotate(
            text,
            (i, y),
            textcoords="offset points",
            xytext=xytext,
            ha=ha,
            va=va,
            fontsize=12,
            color=color,
            arrowprops=dict(arrowstyle="-", color=color, lw=0.8, shrinkB=8)
            if matmul
            else None,
        )
    ax.set_ylim(0.1, c["matmul_flops"] / 1e12 * 30)
    ax.set(
        xlabel="intensity: F (softmax: its operations) per byte of HBM traffic",
        ylabel="attainable TFLOP/s\n(softmax: T operations/s)",
        title=f"{chip_name}: standard attention's pieces, d = {d}, N = M = {N:,}",
    )
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        fontsize=11,
        ncol=1,
        frameon=False,
    )
    names = [shown[r["piece"]] for r in rows]
    yy = np.arange(len(rows))[::-1]
    ax_t.barh(
        yy + 0.2,
        [r["t_memory"] * 1e6 for r in rows],
        0.4,
        color="C0",
        label="bytes / HBM bandwidth",
    )
    ax_t.barh(
        yy - 0.2,
        [r["t_compute"] * 1e6 for r in rows],
        0.4,
        color="C1",
        label="compute: F and other operations, each at its unit's peak",
    )
    for yv, r in zip(yy, rows):
        ax_t.text(
            r["time"] * 1e6 * 1.03,
            yv,
            f"{r['time'] * 1e6:.1f} µs, "
            + ("each piece its own bound" if r["bound"] == "mixed" else r["bound"]),
            va="center",
            fontsize=12,
        )
    ax_t.set_yticks(yy, names, fontsize=12)
    ax_t.set_xlim(0, max(r["time"] for r in rows) * 1e6 * 1.6)
    ax_t.set(
        xlabel="µs per head (the larger bar is the time)",
        title=f"Time per piece ({np.dtype({2: 'float16', 4: 'float32'}.get(itemsize, 'float64')).name}, "
        f"softmax {softmax_accesses} accesses/element)",
    )
    ax_t.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        fontsize=11,
        ncol=2,
        frameon=False,
    )
    ax_t.grid(axis="y", visible=False)
    return {
        "chip": chip_name,
        "d": d,
        "N": N,
        "itemsize": itemsize,
        "softmax_accesses": softmax_accesses,
        "rows": rows,
        "ridge": ridge,
        "hbm": hbm,
        "sram": sram,
        "speedup": rows[3]["time"] / rows[4]["time"],
    }


def draw_line_peaks(fns, q, k, v, axes=None) -> dict:
    """One panel per function of `fns` (each `f(q, k, v)`, a version of attention): a bar per line of
    its body, as long as the peak memory while that line ran (`lab.memory.line_peaks`), counted in
    N×M arrays of q's dtype. A function that raises NotImplementedError gets a panel that says so.

    Returns, per function name, its `rows` (with `arrays`, the peak in N×M arrays) and its largest
    `peak_arrays`, or None where it is not written yet.
    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    fns = list(fns)
    if not fns or not all(callable(f) for f in fns):
        raise TypeError("fns must be a non-empty list of functions f(q, k, v)")
    unit = q.shape[0] * k.shape[0] * q.dtype.itemsize  # one N×M array, in bytes
    if axes is None:
        height = 1.1 + 0.45 * max(_body_lines(f) for f in fns)
        _, axes = plt.subplots(
            len(fns), 1, figsize=(12, height * len(fns)), layout="constrained"
        )
    axes = np.atleast_1d(axes)
    out = {}
    for ax, fn in zip(axes, fns):
        name = getattr(fn, "__name__", "your function")
        try:
            rows, _ = line_peaks(fn, q, k, v)
        except NotImplementedError:
            ax.axis("off")
            ax.text(0.5, 0.5, f"{name}: not written yet", ha="center", fontsize=14)
            out[name] = {"rows": [], "peak_arrays": None}
            continue
        for r in rows:
            r["arrays"] = r["peak"] / unit
        y = np.arange(len(rows))[::-1]
        ax.barh(y, [r["arrays"] for r in rows], 0.6, color="C3")
        for yy, r in zip(y, rows):
            ax.text(
                r["arrays"] + 0.05, yy, f"{r['arrays']:.2f}", va="center", fontsize=12
            )
        labels = [r["source"].split("  #")[0].strip()[:60] for r in rows]  # no comment
        ax.set_yticks(y, labels, fontsize=12, family="monospace")
        peak = max((r["arrays"] for r in rows), default=0.0)
        ax.set_xlim(0, max(3.5, peak * 1.15))
        ax.axvline(1, color="0.6", lw=1, ls=":")
        ax.set(
            xlabel=f"peak while the line runs, in N×M arrays of {q.dtype} "
            f"(N = {q.shape[0]:,}, M = {k.shape[0]:,})",
            title=f"{name}: {peak:.2f} N×M arrays at its peak",
        )
        ax.grid(axis="y", visible=False)
        out[name] = {"rows": rows, "peak_arrays": peak}
    return out


def _body_lines(fn) -> int:
    """How many lines of source `fn` has (a panel's height), 4 where its source cannot be read."""
    import inspect

    try:
        return len(inspect.getsourcelines(fn)[0])
    except (OSError, TypeError):
        return 4
