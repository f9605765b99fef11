"""Figures for notebook 07: what FP16, BF16, FP8 and TF32 do to online softmax and attention.

Each function draws one figure from `lab.precision_experiments` numbers and returns them in a dict.

Taught in: notebooks/07_precision.ipynb, notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import functools

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np

from ..attention import attention_reference
from ..precision import format_info, round_to
from ..precision_experiments import (
    FA3_TABLE3_RMSE,
    _check_positive,
    _keys,
    gaussian_qkv,
    low_precision_sum,
    matmul_error,
    p_rounding_error,
    p_underflow,
)
from ..validate import check_block

__all__ = [
    "draw_p_error_heatmaps",
    "draw_accumulation",
    "draw_outliers",
    "draw_p_explorer",
    "draw_matmul_error",
    "draw_real_vs_gaussian",
    "draw_number_grid",
    "FORMAT_LABELS",
]

FORMAT_LABELS = {
    "fp32": "FP32",
    "tf32": "TF32",
    "bf16": "BF16",
    "fp16": "FP16",
    "fp8_e4m3": "FP8 e4m3",
    "fp8_e5m2": "FP8 e5m2",
}


def _share(x: float) -> str:
    """A share as a percentage to 0.1, never rounded to 100.0% or 0.0% unless it is exactly that."""
    pct = 100 * x
    if 99.95 <= pct < 100:
        return "> 99.9%"
    if 0 < pct < 0.05:
        return "< 0.1%"
    return f"{pct:.1f}%"


def draw_p_error_heatmaps(grid: dict, Ms, spreads) -> dict:
    """One heatmap per format of $\\log_{10}$ relative error (from `p_error_grid`) over the keys M and the score spread."""
    fmts = list(grid)
    cols = (
        2 if len(fmts) > 2 else len(fmts)
    )  # two a row: each panel wide enough to read its numbers
    rows = -(-len(fmts) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(6.2 * cols, 4.3 * rows),
        sharey=True,
        squeeze=False,
        constrained_layout=True,
    )
    for ax in axes.flat[len(fmts) :]:
        ax.remove()
    axes = axes.flat[: len(fmts)]
    logs = {f: np.log10(np.maximum(grid[f], 1e-12)) for f in fmts}
    lo = min(float(v.min()) for v in logs.values())
    hi = max(float(v.max()) for v in logs.values())
    for ax, f in zip(axes, fmts):
        im = ax.imshow(
            logs[f], origin="lower", aspect="auto", cmap="viridis", vmin=lo, vmax=hi
        )
        for (a, b), val in np.ndenumerate(logs[f]):
            ax.text(
                b,
                a,
                f"{val:.1f}",
                ha="center",
                va="center",
                fontsize=11,
                color="white" if val < (lo + hi) / 2 else "black",
            )
        ax.set_xticks(
            range(len(Ms)),
            [f"{n // 1024}K" if n >= 1024 else str(n) for n in Ms],
            fontsize=11,
        )
        ax.set_yticks(range(len(spreads)), [f"{s:g}" for s in spreads], fontsize=11)
        base = " (baseline: P not rounded)" if f == "fp32" else ""
        ax.set_title(FORMAT_LABELS[f] + base, fontsize=13)
        ax.set_xlabel("M (keys)", fontsize=11)
        ax.grid(False)
    for ax in axes[::cols]:
        ax.set_ylabel("std of the scores", fontsize=11)
    fig.colorbar(im, ax=list(axes), label="log10 relative error of o", shrink=0.9)
    fig.suptitle(
        "P rounded before P·V, m, l, acc in FP32: error against float64", fontsize=13
    )
    return {
        "median": {f: float(np.median(grid[f])) for f in fmts},
        "max": {f: float(grid[f].max()) for f in fmts},
    }


def draw_accumulation(
    M: int | None = 16384,
    block: int = 64,
    formats=("fp32", "bf16", "fp16"),
    *,
    spread: float = 1.0,
    seed: int = 0,
    ax=None,
    N: int | None = None,
) -> dict:
    """Relative error of the running $l = \\sum_j p_j$ over M keys summed in each format, one element at a time
    (solid) and by blocks (dashed); `N` is the older keyword for `M`, and the result holds both."""
    M = _keys(None if N is not None else M, N)
    rng = np.random.default_rng(seed)
    s = rng.standard_normal(M) * spread
    p = np.exp(s - s.max())  # P entries in (0, 1], (M,)
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 4.8))
    out = {"M": int(M), "N": int(M), "block": int(block), "seq": {}, "blocked": {}}
    out["stall"] = {}
    for i, f in enumerate(formats):
        exact = np.cumsum(
            round_to(p, f).astype(np.float64)
        )  # the same rounded p_j, summed exactly
        seq = low_precision_sum(p, f, 1)
        blk = low_precision_sum(p, f, block)
        err = np.abs(seq - exact) / exact
        nb = np.minimum(np.arange(1, blk.size + 1) * block, M)
        errb = np.abs(blk - exact[nb - 1]) / exact[nb - 1]
        show = (
            np.unique(np.geomspace(1, M, 400).astype(int)) - 1
        )  # ~400 points, log-spaced, for drawing only
        showb = np.unique(np.geomspace(1, nb.size, 400).astype(int)) - 1
        ax.loglog(
            show + 1,
            np.maximum(err[show], 1e-9),
            color=f"C{i}",
            lw=1.8,
            label=f"{FORMAT_LABELS[f]}, one at a time",
        )
        ax.loglog(
            nb[showb],
            np.maximum(errb[showb], 1e-9),
            color=f"C{i}",
            lw=1.8,
            ls="--",
            label=f"{FORMAT_LABELS[f]}, blocks of Bc = {block}",
        )
        out["seq"][f], out["blocked"][f] = float(err[-1]), float(errb[-1])
        out["stall"][f] = float(seq[-1])
    ax.set(
        xlabel="elements summed so far (n)",
        ylabel="relative error of l (floor 1e-9)",
        title=f"Summing l = Σ p_j in low precision (M = {M:,} keys, p_j in (0, 1])",
    )
    ax.legend(fontsize=9, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.17))
    ax.set_ylim(1e-9, 3)
    return out


def draw_outliers(measured: dict, paper: dict = FA3_TABLE3_RMSE, ax=None) -> dict:
    """RMSE of standard and tiled attention in FP16 and FP8, measured here (`{(alg, fmt): rmse}`) beside FlashAttention-3's Table 3."""
    keys = [
        ("standard", "fp16"),
        ("tiled", "fp16"),
        ("standard", "fp8_e4m3"),
        ("tiled", "fp8_e4m3"),
    ]
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 4.8))
    x = np.arange(len(keys))
    here = [measured[k] for k in keys]
    theirs = [paper[k] for k in keys]
    ax.bar(x - 0.2, here, 0.4, label="measured here (numpy)", color="C0")
    ax.bar(
        x + 0.2,
        theirs,
        0.4,
        label="FlashAttention-3, Table 3 (H100): paper, different setup (see below)",
        color="C1",
    )
    for xi, a, b in zip(x, here, theirs):
        for xb, h in ((xi - 0.2, a), (xi + 0.2, b)):  # a few points above the bar top
            ax.annotate(
                f"{h:.1e}",
                (xb, h),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=9,
            )
    ax.set_yscale("log")
    names = [
        "standard\nFP16",
        "tiled\nFP16",
        "per-tensor FP8\n(standard)",
        "FA3 FP8\n(tiled)",
    ]
    ax.set_xticks(x, names)
    ax.set(
        ylabel="RMSE against float64",
        title="Inputs with outliers: N(0,1) + N(0,100)·Bernoulli(0.001)",
    )
    ax.set_ylim(min(here + theirs) / 3, max(here + theirs) * 15)  # room for the legend
    ax.legend(fontsize=10, loc="upper left")
    return {"measured": dict(zip(keys, here)), "paper": dict(zip(keys, theirs))}


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(y: float, _pos=None) -> str:
    """Tick label $10^k$ in plain text (no mathtext to lay out at each redraw)."""
    k = round(np.log10(y))
    return f"10{str(k).translate(_SUPERSCRIPT)}" if np.isclose(y, 10.0**k) else ""


def _log_counts_axis(ax) -> None:
    """A log y axis of counts: a tick at each power of ten, labelled 10ᵏ, no minor ticks."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(mticker.LogLocator(base=10, numticks=12))
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(_power_of_ten))
    ax.yaxis.set_minor_locator(mticker.NullLocator())


@functools.lru_cache(maxsize=8)
def _explorer_inputs(M: int, d: int, spread: float, rows: int, seed: int, v_shift):
    """`gaussian_qkv` with v + `v_shift`, and the float64 reference output: one draw per setting of the data.

    A slider that moves the format or Bc reuses them (the arrays are read-only)."""
    q, k, v = gaussian_qkv(M, d, spread, rows, seed)
    v = v + np.float32(v_shift)
    ref = attention_reference(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    )[0]
    for a in (q, k, v, ref):
        a.setflags(write=False)
    return q, k, v, ref


def _decade_above(x: float) -> float:
    """The power of ten at or above x > 0 (a log axis's top that nearby settings share)."""
    return 10.0 ** np.ceil(np.log10(x))


def draw_p_explorer(
    fmt: str = "fp8_e4m3",
    M: int | None = 4096,
    spread: float = 4.0,
    block_k: int = 64,
    *,
    d: int = 64,
    rows: int = 8,
    seed: int = 0,
    v_shift: float = 0.0,
    N: int | None = None,
    ax=None,
) -> dict:
    """Histogram of $\\log_2 P_{ij}$ over M keys as the tiles form them, against the format's subnormal and underflow
    limits; the error of $o$ (values $v$ + `v_shift`) in the title. `N` is the older keyword for `M`; `ax`, an
    Axes to draw on (a new figure by default).

    Entries already 0 in float32 are drawn in the leftmost bin and counted apart (`zero_fp32`) from those the
    format flushes (`flushed`: nonzero in float32, 0 in `fmt`); both are fractions of all entries."""
    M = _keys(None if N is not None else M, N)
    q, k, v, ref = _explorer_inputs(
        check_block(M, "M"),
        check_block(d, "d"),
        _check_positive(spread, "spread"),
        check_block(rows, "rows"),
        int(seed),
        float(v_shift),
    )
    under = p_underflow(q, k, fmt, block_k=block_k)
    err = p_rounding_error(q, k, v, fmt, block_k=block_k, ref=ref)
    info = format_info(fmt)
    lp = np.log2(np.maximum(under["p"].astype(np.float64), 2.0**-160))
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 4.6))
    counts, _, _ = ax.hist(
        lp,
        bins=np.linspace(-160, 1, 162),
        color="C0",
        alpha=0.85,
        histtype="stepfilled",
    )
    sub, tiny = np.log2(info["smallest_subnormal"]), np.log2(info["tiny"])
    ax.axvspan(
        -160,
        sub - 1,
        color="C3",
        alpha=0.15,
        zorder=0,
        label=f"rounds to 0 (≤ 2^{sub - 1:.0f}, ties to even)",
    )
    ax.axvspan(
        sub - 1,
        tiny,
        color="C1",
        alpha=0.2,
        zorder=0,
        label=f"subnormal: fewer bits (< 2^{tiny:.0f})",
    )
    _log_counts_axis(ax)
    # Headroom above every bar for the legend and the box; limits on whole decades and tens, so that a
    # slider's nearby settings share one frame. -162: the 0 bin shows.
    ax.set_ylim(0.5, _decade_above(float(counts.max()) * 300))
    ax.set_xlim(max(-162, 10 * np.floor(min(sub - 12, float(lp.min()) - 2) / 10)), 1)
    ax.set(
        xlabel="log2 P_IJ  (P_IJ = exp(S_IJ − running max))",
        ylabel="entries",
        title=f"{FORMAT_LABELS[fmt]}, M = {M:,} keys, std(s) = {spread:g}, Bc = {block_k}, "
        f"{'v' if v_shift == 0 else f'v + {v_shift:g}'}: relative error {err:.1e}",
    )
    ax.text(
        0.98,
        0.95,
        f"flushed by {FORMAT_LABELS[fmt]}: {_share(under['flushed'])} of the entries\n"
        f"already 0 in float32 (leftmost bin): {_share(under['zero_fp32'])}\n"
        f"0 in all: {_share(under['zero'])}",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=10,
        bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
    )
    ax.legend(fontsize=10, loc="upper left")
    return {
        "fmt": fmt,
        "M": int(M),
        "N": int(M),
        "spread": float(spread),
        "block_k": int(block_k),
        "v_shift": float(v_shift),
        "rel_error": err,
        "flushed": under["flushed"],
        "zero_fp32": under["zero_fp32"],
        "zero": under["zero"],
        "mass_lost": under["mass_lost"],
    }


def draw_matmul_error(
    Ks=(64, 256, 1024, 4096),
    formats=("fp32", "tf32", "bf16", "fp16"),
    *,
    n: int = 64,
    seed: int = 0,
    ax=None,
) -> dict:
    """Relative error of $A B$ with inputs rounded to each format and an FP32 accumulator, against the inner size K."""
    rng = np.random.default_rng(seed)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.6))
    out = {}
    for i, f in enumerate(formats):
        errs = []
        for K in Ks:
            a = rng.standard_normal((n, K)).astype(np.float32)  # (n, K)
            b = rng.standard_normal((K, n)).astype(np.float32)  # (K, n)
            errs.append(matmul_error(a, b, f))
        out[f] = errs
        style = (
            {"ls": "--", "marker": "s", "ms": 11, "mfc": "none", "mew": 2}
            if f == "tf32"
            else {"marker": "o"}
        )
        ax.plot(
            Ks,
            errs,
            color=f"C{i}",
            label=FORMAT_LABELS[f] + (", rounded" if f == "tf32" else ""),
            **style,
        )
    if "tf32" in formats:  # the same products, inputs truncated
        rng = np.random.default_rng(seed)
        errs = []
        for K in Ks:
            a = rng.standard_normal((n, K)).astype(np.float32)
            b = rng.standard_normal((K, n)).astype(np.float32)
            errs.append(matmul_error(a, b, "tf32", truncate=True))
        out["tf32 truncated"] = errs
        ax.plot(Ks, errs, color="C4", ls=":", marker="v", label="TF32, truncated")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(
        xlabel="inner size K",
        ylabel="relative error of A·B",
        title="Inputs rounded (or truncated) to a format, FP32 accumulation\n(TF32 rounded and FP16 coincide: both keep 10 mantissa bits)",
    )
    ax.legend(fontsize=10)
    return {"Ks": list(Ks), "errors": out}


def _spread_label(name: str, r: dict) -> str:
    """A legend entry: the score spread pooled over all heads, and the median and largest head's."""
    heads = r.get("spread_heads")
    if heads is None or len(heads) < 2:
        return f"{name} (std s = {r['spread']:.1f})"
    med, top = float(np.median(heads)), float(np.max(heads))
    return f"{name} (std s: median head {med:.1f}, largest {top:.1f})"


def draw_real_vs_gaussian(results: dict) -> dict:
    """Two panels from `compare_inputs`: the error of rounding P per format, and the RMSE of standard vs tiled attention, per input set."""
    names = list(results)
    fmts = list(next(iter(results.values()))["p"])
    keys = list(next(iter(results.values()))["rmse"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.6), constrained_layout=True)
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        a1.bar(
            np.arange(len(fmts)) + (i - (len(names) - 1) / 2) * w,
            [results[name]["p"][f] for f in fmts],
            w,
            label=_spread_label(name, results[name]),
            color=f"C{i}",
        )
        a2.bar(
            np.arange(len(keys)) + (i - (len(names) - 1) / 2) * w,
            [results[name]["rmse"][k] / results[name]["rms_ref"] for k in keys],
            w,
            label=name,
            color=f"C{i}",
        )
    a1.set_xticks(range(len(fmts)), [FORMAT_LABELS[f] for f in fmts])
    a1.set(
        yscale="log",
        ylabel="relative error of o",
        title="Experiment 1: P rounded, FP32 accumulation",
    )
    a2.set_xticks(
        range(len(keys)),
        [
            f"{alg}\n{'unscaled FP8' if f.startswith('fp8') else FORMAT_LABELS[f]}"
            for alg, f in keys
        ],
    )
    a2.set(
        yscale="log",
        ylabel="RMSE / RMS of o",
        title="Experiment 4b: standard vs tiled, FP16 and unscaled FP8",
    )
    a1.legend(fontsize=9)
    a2.legend(fontsize=9)
    return {
        name: {
            "p": dict(r["p"]),
            "rel_rmse": {k: r["rmse"][k] / r["rms_ref"] for k in keys},
        }
        for name, r in results.items()
    }


def draw_l_stall(
    M: int = 16384,
    blocks=(1, 16, 128, 256),
    fmt: str = "bf16",
    *,
    spread: float = 1.0,
    seed: int = 0,
) -> dict:
    """Where a low-precision $l$ falls behind: top, $l$ in `fmt` (tiles of $B_c$ keys) and the exact sum
    against M; bottom, half a step of the exact $l$ against the typical tile sum $B_c\\,\\bar p$, which is
    lost once it sits below that band. Section 2's row: $p_j = e^{s_j - \\max s}$, $s \\sim N(0, spread^2)$.
    Taught in: notebooks/07_precision.ipynb
    """
    s = np.random.default_rng(seed).standard_normal(M) * spread
    p = np.exp(s - s.max())  # (M,)
    exact = np.cumsum(round_to(p, fmt).astype(np.float64))
    eps = format_info(fmt)["eps"]
    half = eps * 2.0 ** np.floor(np.log2(exact)) / 2  # half a step of l, (M,)
    fig, (top, low) = plt.subplots(2, 1, figsize=(8.5, 6.4), sharex=True)
    top.loglog(np.arange(1, M + 1), exact, color="k", lw=2.2, label="exact sum")
    low.fill_between(
        np.arange(1, M + 1), half, 1e-4, color="0.85", label="below half a step"
    )
    out = {"final": {}, "exact": float(exact[-1]), "mean_p": float(p.mean())}
    for i, bc in enumerate(blocks):
        l_fmt = low_precision_sum(p, fmt, bc)
        ends = np.minimum(np.arange(1, l_fmt.size + 1) * bc, M)
        top.loglog(ends, l_fmt, color=f"C{i}", lw=1.6, label=f"l in {fmt}, Bc = {bc}")
        low.axhline(
            bc * p.mean(),
            color=f"C{i}",
            lw=1.4,
            ls="--",
            label=f"Bc × mean p_j, Bc = {bc}",
        )
        out["final"][bc] = float(l_fmt[-1])
    top.set(ylabel="l", title=f"l in {fmt} against the exact sum (M = {M:,} keys)")
    top.legend(fontsize=9, ncol=2)
    low.set_yscale("log")
    low.set(xlabel="keys summed so far (M)", ylabel="size", ylim=(1e-3, 100))
    low.legend(fontsize=8, ncol=3, loc="upper left")
    fig.tight_layout()
    return out


def draw_number_grid(fmt: str = "fp8_e4m3", starts=(1.0, 2.0, 4.0)) -> dict:
    """Draw a format's numbers in the octaves $[2^E, 2^{E+1})$ from `starts`, the half-step band of rounding
    around each octave's first value, and the share of $p$ that $\\mathrm{fl}(x + p) - x$ keeps for
    $x$ = each start; return {"step": {x: step}, "stall": {x: the largest p with fl(x + p) = x}}.

    The step is $\\epsilon\\,2^E$ (doubling with each octave) and the stall is half of it (a tie goes to the
    even $x$), both read off `round_to`, not typed in.
    Taught in: notebooks/07_precision.ipynb
    """
    if fmt not in FORMAT_LABELS:
        raise ValueError(f"fmt must be one of {sorted(FORMAT_LABELS)}, got {fmt!r}")
    starts = [float(x) for x in starts]
    if not starts or any(x <= 0 or np.log2(x) % 1 for x in starts):
        raise ValueError(f"starts must be positive powers of two, got {starts}")
    t = format_info(fmt)["mantissa_bits"]
    lo, hi = min(starts), 2 * max(starts)
    n = 2**t * int(np.log2(hi / lo))  # values of the format in [lo, hi)
    cand = np.unique(round_to(np.geomspace(lo, hi, 64 * n, endpoint=False), fmt))
    values = cand[(cand >= lo) & (cand < hi)]  # every value of the format there
    step = {x: float(values[values > x].min() - x) for x in starts}
    p = np.geomspace(2.0**-8, 1.0, 3000).astype(np.float32) * hi / 8
    kept = {x: (round_to(np.float32(x) + p, fmt) - np.float32(x)) / p for x in starts}
    stall = {}
    for x in (
        starts
    ):  # the largest x + p that rounds back to x: half a step (the tie goes to x)
        edge = np.float32(x + step[x] / 2)
        past = np.nextafter(edge, np.float32(np.inf))
        assert round_to(edge, fmt) == x < round_to(past, fmt), (fmt, x)
        stall[x] = float(edge - np.float32(x))
    fig, (top, low) = plt.subplots(2, 1, figsize=(10, 6.2))
    top.plot(values, np.zeros_like(values), "|", ms=26, mew=2, color="C0")
    for i, x in enumerate(starts):
        below = (
            float(x - values[values < x].max()) if (values < x).any() else step[x] / 2
        )
        top.axvspan(x - below / 2, x + step[x] / 2, color=f"C{i + 1}", alpha=0.4)
        top.annotate(f"step {step[x]:g}", (x * 1.5, 0.3), ha="center", fontsize=15)
    top.set(yticks=[], ylim=(-0.5, 0.6), xlim=(lo - 0.3, hi + 0.1))
    top.set_xticks(starts + [hi], [f"{x:g}" for x in starts + [hi]], fontsize=14)
    top.set_title(
        f"{FORMAT_LABELS[fmt]}: every value from {lo:g} to {hi:g}; shaded: what rounds to {lo:g}, "
        f"{starts[1] if len(starts) > 1 else lo:g}, ...",
        fontsize=13,
    )
    for i, x in enumerate(starts):
        low.plot(p, kept[x], color=f"C{i + 1}", lw=2.5, label=f"x = {x:g}")
        low.axvline(stall[x], color=f"C{i + 1}", ls=":", lw=2)
    low.set(xscale="log", ylim=(-0.05, 2.1))
    low.set_xlabel("p added to x", fontsize=13)
    low.set_ylabel("share of p kept:\n(fl(x + p) - x) / p", fontsize=12)
    low.legend(fontsize=12, loc="upper left")
    low.set_title(
        "below half a step (dotted) x + p rounds back to x: all of p is lost",
        fontsize=13,
    )
    fig.tight_layout()
    return {"fmt": fmt, "values": values, "step": step, "stall": stall}
