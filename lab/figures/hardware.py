"""Figures for notebook 08: time and memory against N, a roofline of measured ceilings, recorded runs, the
Python overhead of a tile loop, the Triton kernel's launch grid and how many of its programs one SM holds. The cost models they draw (`estimated_bytes`, `loop_overhead`) live in
lab/hardware.py.

Taught in: notebooks/08_hardware_runs.ipynb, notebooks/08_triton_kernel.ipynb
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, NullLocator

from ..hardware import estimated_bytes, loop_overhead  # noqa: F401  (cost models; importable from here too)
from ..measure import attention_flops

__all__ = [
    "draw_ratio_strips",
    "draw_sweep",
    "draw_roofline",
    "draw_recorded_memory",
    "draw_loop_overhead",
    "draw_launch_grid",
    "draw_occupancy",
    "KERNEL_STYLE",
]

KERNEL_STYLE = {
    "numpy reference": ("C7", "s", ":"),
    "numpy flash": ("C5", "v", ":"),
    "torch naive": ("C3", "o", "--"),
    "lab torch flash": ("C0", "o", "-"),
    "sdpa math": ("C1", "^", "--"),
    "sdpa flash": ("C2", "D", "-"),
    "sdpa efficient": ("C4", "P", "-"),
    "sdpa cudnn": ("C8", "X", "-"),
    "triton": ("C6", "*", "-"),
}


def _plain_log2_x(ax):
    """Log base-2 x axis labelled with plain numbers (256, 1,024, ...)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))


def _done(rows):
    return [r for r in rows if not r.get("skipped")]


def draw_ratio_strips(
    groups: dict, *, truth: float = 1.0, xlabel: str = "ratio", title: str = "", ax=None
) -> dict:
    """One row of dots per group of `groups` ({label: ratios}), on a log x axis, with a line at `truth`: how far
    each way of timing scatters around the answer it should give. Returns {label: (lowest, highest)}.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if not groups:
        raise ValueError("groups must name at least one group of ratios")
    values = {}
    for label, x in groups.items():
        x = np.atleast_1d(np.asarray(x, dtype=float))
        if x.size == 0 or not np.all(np.isfinite(x) & (x > 0)):
            raise ValueError(f"groups[{label!r}] must hold positive ratios, got {x!r}")
        values[label] = x
    if not truth > 0:
        raise ValueError(f"truth must be positive, got {truth!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.7 + 0.55 * len(values)))
    labels = list(values)[::-1]  # the first group on top
    for row, label in enumerate(labels):
        x = values[label]
        ax.plot(x, np.full(x.size, row), "o", ms=8, alpha=0.7, color=f"C{row % 10}")
        ax.plot([x.min(), x.max()], [row, row], "-", lw=1, color=f"C{row % 10}")
    ax.axvline(truth, color="k", lw=1.5, ls="--")
    ax.set_xscale("log")
    lo = min(min(x.min() for x in values.values()), truth) / 1.15
    hi = max(max(x.max() for x in values.values()), truth) * 1.15
    ax.set_xlim(lo, hi)
    ticks = [t for t in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 10, 20) if lo <= t <= hi]
    ax.xaxis.set_major_locator(plt.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(-0.6, len(labels) - 0.1)
    ax.text(truth, len(labels) - 0.45, f" the right answer, {truth:g}", fontsize=9)
    ax.set(xlabel=xlabel, title=title)
    return {label: (float(x.min()), float(x.max())) for label, x in values.items()}


def draw_sweep(rows, *, what: str = "ms", ax=None) -> dict:
    """One line per kernel of `what` ("ms", "tflops" or "peak_mb") against N, log-log; returns {kernel: [(N, value)]}.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    labels = {
        "ms": "time per call (ms)",
        "tflops": "TFLOP/s (4·B·H·N²·d / time)",
        "peak_mb": "peak MiB above the inputs",
    }
    if what not in labels:
        raise ValueError(f"what must be one of {sorted(labels)}, got {what!r}")
    if ax is None:
        _, ax = plt.subplots()
    out = {}
    for r in _done(rows):
        if r.get(what) is not None:
            out.setdefault(r["kernel"], []).append((r["N"], r[what]))
    for kernel, pts in out.items():
        pts.sort()
        color, marker, ls = KERNEL_STYLE.get(kernel, ("k", "o", "-"))
        ax.plot(*zip(*pts), marker=marker, ls=ls, color=color, label=kernel)
    _plain_log2_x(ax)
    ax.set_yscale("log")
    ax.set(xlabel="sequence length N", ylabel=labels[what])
    if out:
        ax.legend(fontsize=9, loc="best")
    return out


def draw_roofline(ceilings: dict, rows, *, N: int | None = None, ax=None) -> dict:
    """The roofline $\\min(\\text{peak}, I \\cdot \\text{bandwidth})$ of the measured ceilings, with each kernel at
    (estimated intensity $I$ = FLOPs / `estimated_bytes`, measured FLOP/s) at the largest N; returns the points,
    `shares` (each kernel's rate over its roof at its intensity) and `above`, the kernels drawn above the roof (a
    ceiling measured low on a busy machine, or an intensity estimated low).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if ax is None:
        _, ax = plt.subplots()
    peak = ceilings["matmul_fp32_flops"]
    bw = ceilings["bandwidth_bytes_per_s"]
    done = _done(rows)
    N = max(r["N"] for r in done) if N is None else N
    pts = {}
    for r in done:
        if r["N"] != N:
            continue
        itemsize = (
            8
            if r["kernel"] == "numpy reference"
            else {"float64": 8, "float32": 4}.get(r["dtype"], 2)
        )
        flops = attention_flops(r["B"], r["H"], r["N"], r["d"], causal=r["causal"])
        intensity = flops / estimated_bytes(
            r["kernel"], r["B"], r["H"], r["N"], r["d"], itemsize
        )
        pts[r["kernel"]] = (intensity, r["tflops"] * 1e12)
    xs = np.logspace(-1, 4, 200)
    ax.loglog(xs, np.minimum(peak, xs * bw) / 1e9, color="k", lw=2)
    ridge = peak / bw
    ax.axvline(ridge, color="gray", lw=0.8, ls=":")
    ax.text(
        xs[0] * 1.3, peak / 1e9 * 1.12, f"matmul {peak / 1e9:.0f} GFLOP/s", fontsize=10
    )
    ax.text(
        xs[0] * 1.3,
        xs[0] * bw / 1e9 * 3.0,
        f"bandwidth {bw / 1e9:.1f} GB/s",
        fontsize=10,
    )
    for kernel, (x, y) in pts.items():
        color, marker, _ = KERNEL_STYLE.get(kernel, ("k", "o", "-"))
        ax.plot(
            [x], [y / 1e9], marker=marker, color=color, ms=10, ls="none", label=kernel
        )
    ax.set(
        xlabel="arithmetic intensity (FLOP per byte moved, estimated)",
        ylabel="GFLOP/s",
        title=f"Roofline of this machine (measured ceilings), kernels at N = {N:,}",
    )
    ax.set_ylim(
        bottom=min([0.1] + [y / 1e9 / 3 for _, y in pts.values()]), top=peak / 1e9 * 3
    )
    ax.text(
        ridge * 1.15,
        ax.get_ylim()[0] * 2,
        f"ridge {ridge:.1f} FLOP/B",
        color="gray",
        fontsize=10,
    )
    ax.legend(fontsize=9, loc="lower right")
    above = [kernel for kernel, (x, y) in pts.items() if y > min(peak, x * bw)]
    shares = {kernel: y / min(peak, x * bw) for kernel, (x, y) in pts.items()}
    return {
        "shares": shares,
        "peak_flops": peak,
        "bandwidth": bw,
        "ridge": ridge,
        "points": pts,
        "N": N,
        "above": above,
    }


def draw_recorded_memory(runs, *, N: int = 4096, ax=None) -> dict:
    """Peak MiB (2²⁰ bytes) per head at `N` of standard attention against the tiled kernel, for each recorded run that has both.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    standard = ("torch naive", "standard")
    tiled = ("lab torch flash", "python tile loop")
    bars = {}
    all_labels = [run["label"] for run in runs]
    for run in runs:
        name = run["label"]
        if all_labels.count(name) > 1 and run.get("date"):
            name = f"{name}, {run['date'][:16].replace('T', ' ')}"  # same machine, several runs
        vals = {}
        for r in run.get("results", []):
            if r.get("skipped") or r.get("N") != N or r.get("peak_mb") is None:
                continue
            heads = (r.get("B") or 1) * (r.get("H") or 1)
            for group, names in (("standard", standard), ("tiled", tiled)):
                if r["kernel"] in names:
                    vals[group] = r["peak_mb"] / heads
        if len(vals) == 2:
            bars[name] = vals
    if ax is None:
        _, ax = plt.subplots(figsize=(max(8, 3.2 * len(bars)), 4.8))
    labels = list(bars)
    x = np.arange(len(labels))
    for i, (group, color) in enumerate((("standard", "C3"), ("tiled", "C0"))):
        ys = [bars[k][group] for k in labels]
        ax.bar(
            x + (i - 0.5) * 0.38,
            ys,
            0.38,
            color=color,
            label=f"{group} attention"
            if group == "standard"
            else "tiled (flash) kernel",
        )
        top = max([v for b in bars.values() for v in b.values()] + [1.0])
        for xi, y in zip(x, ys):
            ax.text(
                xi + (i - 0.5) * 0.38,
                y + top * 0.02,
                f"{y:,.1f}",
                ha="center",
                fontsize=10,
            )
    for xi, k in zip(x, labels):  # a linear axis: the gap is drawn to scale, and named
        ratio = bars[k]["standard"] / bars[k]["tiled"]
        ax.text(xi, top * 1.12, f"{ratio:,.0f}× less", ha="center", fontsize=11)
    ax.set_ylim(0, top * 1.55)  # room for the ratios, and above them the legend
    ax.set_xticks(x, [textwrap.fill(k, 30) for k in labels], fontsize=9)
    ax.set(
        ylabel="peak MiB per head",
        title=f"Peak memory at N = {N:,}, d = 64, recorded runs",
    )
    ax.legend(fontsize=10, loc="upper right")
    return bars


def draw_loop_overhead(
    N: int = 4096,
    us_per_op: float = 10.0,
    *,
    block: int = 256,
    block_k: int | None = None,
    ops_per_step: int = 21,
    d: int = 64,
    heads: int = 8,
    flops_per_s: float = 155e9,
    ax=None,
) -> dict:
    """The share of a forward's time the tile loop spends on Python overhead, against the query block Br (log2 x):
    one curve with Bc = Br, one with Bc = 2·Br (the CPU default's shape, (256, 512)); marks (`block`, `block_k`,
    Br by default); returns `lab.loop_overhead` at it. The model has no cache term: see `lab.loop_overhead`.
    `ops_per_step`: torch calls a tile step, 21 by default (`lab.measure.ops_per_tile_step()` counts them);
    `flops_per_s`: the products' rate (`lab.loop_overhead`'s default; notebook 08 passes its measured peak).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if ax is None:
        _, ax = plt.subplots()
    model = dict(
        d=d,
        heads=heads,
        us_per_op=us_per_op,
        ops_per_step=ops_per_step,
        flops_per_s=flops_per_s,
    )
    blocks = [2**p for p in range(4, 13) if 2**p <= max(N, 16)]
    for factor, style in ((1, "o-"), (2, "s--")):
        share = [
            100 * loop_overhead(N, b, block_k=factor * b, **model)["overhead_fraction"]
            for b in blocks
        ]
        name = "Bc = Br" if factor == 1 else "Bc = 2·Br"
        ax.plot(blocks, share, style, color="C3" if factor == 1 else "C1", label=name)
    here = loop_overhead(N, block, block_k=block_k, **model)
    _plain_log2_x(ax)
    ax.xaxis.set_minor_locator(NullLocator())  # no minor ticks: quicker in the slider
    ax.set_ylim(0, 105)
    ax.plot(
        [block],
        [100 * here["overhead_fraction"]],
        "o",
        ms=14,
        mfc="none",
        mec="k",
        mew=2,
        label=f"Br = {block}, Bc = {here['block_k']}: {here['steps']:,} tile steps, "
        f"{here['overhead_ms']:,.1f} ms of overhead",
    )
    ax.set(
        xlabel="query block Br (the curves: key block Bc = Br, and Bc = 2·Br)",
        ylabel="Python overhead, % of the forward",
        title=f"Tile loop at N = {N:,}, H = {heads}, d = {d}: {us_per_op:g} µs per op, "
        f"{ops_per_step} ops a step, matmuls {here['matmul_ms']:,.0f} ms at {flops_per_s / 1e9:,.0f} GFLOP/s",
    )
    ax.title.set_fontsize(10)
    ax.legend(fontsize=9, loc="upper right")
    return here


def draw_launch_grid(
    N: int, M: int, Br: int, Bc: int, causal: bool = True, *, ax=None
) -> dict:
    """The Triton forward's launch grid for one (batch, head): a row per program (query block i, `program_id(0)`),
    a column per key block j, each tile coloured by what the program does with it (`lab.triton_tile_kinds`): no
    mask, masked, skipped; each row ends with its program's bytes of K and V read, fp32, d = 64.
    Returns {"kinds": the (Tr, Tc) array, "counts": tiles of each kind}.

    Taught in: notebooks/08_triton_kernel.ipynb
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from ..kernels.rung6_triton import triton_tile_kinds

    kinds = triton_tile_kinds(N, M, Br, Bc, causal)
    Tr, Tc = kinds.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12, 2 + 0.7 * Tc), min(7, 1.2 + 0.55 * Tr)))
    colors = ["#f2f2f2", "#f4a259", "#3d7ea6"]  # skipped, masked, no mask
    ax.imshow(kinds, cmap=ListedColormap(colors), vmin=0, vmax=2, aspect="auto")
    ax.set_xticks(np.arange(Tc) - 0.5, minor=True)
    ax.set_yticks(np.arange(Tr) - 0.5, minor=True)
    ax.grid(
        False, which="major"
    )  # the notebooks' style draws a major grid: not over tiles
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(range(Tc), [f"K_{j}" for j in range(Tc)], fontsize=9)
    ax.set_yticks(range(Tr), [f"program {i}: Q_{i}" for i in range(Tr)], fontsize=9)
    for i in range(Tr):  # K_j and V_j: Bc rows of d = 64 fp32 each, per tile computed
        kib = int((kinds[i] > 0).sum()) * 2 * Bc * 64 * 4 / 1024
        ax.text(Tc - 0.4, i, f"  reads {kib:,.0f} KiB of K, V", va="center", fontsize=9)
    counts = {
        name: int((kinds == k).sum())
        for k, name in ((2, "no mask"), (1, "masked"), (0, "skipped"))
    }
    ax.legend(
        handles=[
            Patch(color=colors[k], label=f"{name}: {counts[name]}")
            for k, name in ((2, "no mask"), (1, "masked"), (0, "skipped"))
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.08),
        ncol=3,
        fontsize=9,
    )
    ax.set_title(
        f"Launch grid, one (batch, head): N = {N}, M = {M}, Br = {Br}, Bc = {Bc}"
        + (", causal" if causal else "")
        + " (reads: d = 64, fp32)",
        fontsize=10,
    )
    ax.set_xlim(-0.5, Tc + 2.6)
    return {"kinds": kinds, "counts": counts}


def draw_occupancy(
    Br: int = 128,
    Bc: int = 64,
    d: int = 64,
    *,
    num_warps: int = 4,
    num_stages: int = 2,
    dtype: str = "float16",
    chip: str = "A100",
    B: int = 4,
    H: int = 16,
    N: int = 4096,
    ax=None,
) -> dict:
    """Left: one program's shared memory (Q_i, then K_j and V_j per stage) against what one SM of `chip` has and
    what one program may take; right: how many programs per SM each limit allows, the one that decides in red.
    Returns `lab.occupancy.occupancy` at these settings; `ax`: a pair of Axes to draw on.

    Taught in: notebooks/08_triton_kernel.ipynb
    """
    from ..occupancy import occupancy

    r = occupancy(
        Br, Bc, d, num_warps=num_warps, num_stages=num_stages, dtype=dtype,
        chip=chip, B=B, H=H, N=N,
    )  # fmt: skip
    if ax is None:
        _, ax = plt.subplots(
            1, 2, figsize=(11, 3.2), gridspec_kw={"width_ratios": [3, 2]}
        )
    left, right = ax
    kib = 1024
    parts = [("Q_i", r["q_tile_bytes"], "C0")]
    parts += [
        (f"K,V {s + 1}", r["kv_stage_bytes"], "C1" if s % 2 == 0 else "C2")
        for s in range(num_stages)
    ]
    start, wide = 0.0, 0.09 * r["shared_per_sm"] / kib  # a label fits a part this wide
    for name, size, color in parts:
        left.barh([0], [size / kib], left=[start], color=color, edgecolor="k")
        if size / kib >= wide and start + size / kib <= 1.25 * r["shared_per_sm"] / kib:
            left.text(
                start + size / kib / 2, 0, name, ha="center", va="center", fontsize=9
            )
        start += size / kib
    per_sm, per_program = r["shared_per_sm"] / kib, r["shared_per_block"] / kib
    left.axvline(per_sm, color="k", lw=1.5)
    left.text(
        per_sm,
        0.45,
        f"per SM: {per_sm:,.0f} KiB, one program: {per_program:,.0f} at most ",
        fontsize=9,
        va="bottom",
        ha="right",
    )
    right_edge = (
        1.25 * r["shared_per_sm"] / kib
    )  # fixed per chip: the frame is drawn once
    if start > right_edge:
        left.text(
            right_edge,
            -0.45,
            f"→ {start:,.0f} KiB  ",
            ha="right",
            fontsize=9,
            color="C3",
        )
    left.set_xlim(0, right_edge)
    left.set_ylim(-0.6, 0.8)
    left.set_yticks([])
    left.set_xlabel("shared memory of one program (KiB)")
    left.set_title(
        f"{chip}, {dtype}: Br = {Br}, Bc = {Bc}, d = {d}, num_stages = {num_stages}: "
        f"{r['shared_bytes'] / kib:,.0f} KiB",
        fontsize=10,
    )
    names = list(r["limits"])
    values = [min(r["limits"][n], 33) for n in names]
    colors = ["C3" if r["limits"][n] == r["programs_per_sm"] else "0.7" for n in names]
    rows = np.arange(len(names))
    right.barh(rows, values, color=colors, edgecolor="k")
    for y, n in enumerate(names):
        right.text(values[y] + 0.3, y, f"{r['limits'][n]}", va="center", fontsize=9)
    right.set_yticks(rows, names, fontsize=9)
    right.set_xlim(0, 36)
    right.set_ylim(len(names) - 0.5, -0.5)
    right.set_xlabel("programs per SM this limit allows")
    right.set_title(
        f"num_warps = {num_warps}: {r['programs_per_sm']} per SM, "
        f"{r['in_flight']:,} in flight, grid {r['grid']:,}",
        fontsize=10,
    )
    return r
