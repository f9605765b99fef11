"""Figures for notebook 00: the roofline of standard attention's pieces, and the time of each piece.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..hardware import chip
from ..memory import IDEAL_FUSED, attainable_flops, attention_traffic, softmax_peak

__all__ = ["draw_attention_roofline"]

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
    bandwidth) with each piece of standard attention at its intensity and at the rate its time implies,
    FLOPs / time (on a roof when one term sets the time; the fused kernel below it). Right: each piece's
    time, memory against compute.

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
        label=f"softmax roof: {soft_peak / 1e12:.1f} TFLOP/s (exp at "
        f"{c['exp_per_s'] / 1e12:.2f} T/s, the rest FP32)",
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
        labels.setdefault(round(r["intensity"], 9), []).append(r)
    for group in labels.values():
        r = group[0]
        color, marker = _PIECE_STYLE[r["piece"]]
        y = (
            r["flops"] / r["time"] / 1e12
        )  # the rate its time implies: on a roof, or below
        ax.plot(
            [r["intensity"]],
            [y],
            marker=marker,
            color=color,
            ms=16 if marker == "*" else 12,
            ls="none",
        )
        i = r["intensity"]
        text = (
            " and ".join(shown[g["piece"]] for g in group) + f"\n{i:,.0f} FLOP/B"
            if i >= 10
            else shown[r["piece"]] + f"\n{i:.2f} FLOP/B"
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
        xlabel="arithmetic intensity (FLOP per byte of HBM traffic)",
        ylabel="attainable TFLOP/s",
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
        label="compute: FLOPs / each unit's peak",
    )
    for yv, r in zip(yy, rows):
        ax_t.text(
            r["time"] * 1e6 * 1.03,
            yv,
            f"{r['time'] * 1e6:.1f} µs, {r['bound']}",
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
