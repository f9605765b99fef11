"""Figures for notebook 04: partial states of one query merged in any order, and the merge tree.

Taught in: notebooks/04_merge_order.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection, PolyCollection

from ..attention import attention_reference
from ..merge import (
    merge_output_pair,
    merge_plan,
    random_chunk_bounds,
    reduce_states,
    split_states,
)
from ..states import SoftmaxState, finalize, partial_state

__all__ = [
    "merge_depths",
    "leaf_order",
    "draw_merge_orders",
    "draw_pair_merge",
    "draw_work_items",
]


def leaf_order(n: int, order: str, *, seed: int = 0) -> list[int]:
    """The parts in the order they first enter a merge of `merge_plan`: drawn left to right, a chain never crosses itself."""
    seen: list[int] = []
    for a, b in merge_plan(n, order, seed=seed):
        seen += [c for c in (a, b) if c not in seen]
    return seen + [c for c in range(n) if c not in seen]


def merge_depths(n: int, order: str, *, seed: int = 0) -> tuple[list, list[int]]:
    """The merge tree of `n` parts as line segments `(x0, y0, x1, y1)` and each slot's height; the max height is the longest chain of merges.
    Part c sits at x = its place in `leaf_order` (for the tree and the sequential chain, c itself)."""
    place = {c: i for i, c in enumerate(leaf_order(n, order, seed=seed))}
    xs, ys = [float(place[i]) for i in range(n)], [0] * n
    segs = []
    for a, b in merge_plan(n, order, seed=seed):
        x, y = (xs[a] + xs[b]) / 2, max(ys[a], ys[b]) + 1
        segs += [(xs[a], ys[a], x, y), (xs[b], ys[b], x, y)]
        xs[a], ys[a] = x, y
    return segs, ys


def draw_merge_orders(
    splits: int = 8,
    order: str = "tree",
    M: int = 3000,
    seed: int = 1,
    axes=None,
    dtype: str = "float64",
    runs: int = 10,
) -> dict:
    """Top: one query's scores cut at random into `splits` chunks, each chunk's weight $e^{lse_c - lse}$; bottom: the merge tree of `order`.

    `dtype="float32"` rounds the chunks' states to float32 first, as a GPU keeps them. `runs` merges of
    `order` (a fresh shuffle each run for "shuffled") give `distinct`, the number of bit-different outputs.
    """
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    rng = np.random.default_rng(seed)
    d = 32
    q = rng.standard_normal((1, d))  # (N=1, d)
    k = rng.standard_normal((M, d)) * 1.5  # (M, d)
    v = rng.standard_normal((M, d))  # (M, dv)
    bounds = random_chunk_bounds(M, splits, seed=seed)
    states = split_states(q, k, v, splits=splits, bounds=bounds)
    if dtype == "float32":  # each of m, l, acc rounded to float32
        states = [
            SoftmaxState(
                st.m.astype(np.float32),
                st.l.astype(np.float32),
                st.acc.astype(np.float32),
            )
            for st in states
        ]
    o_ref, lse_ref = attention_reference(q, k, v)
    outs = [
        finalize(reduce_states(states, order, seed=seed + r))[0] for r in range(runs)
    ]  # run r of a shuffled order finishes its chunks in a fresh order
    distinct = len({o.tobytes() for o in outs})
    spread = max((float(np.abs(o - outs[0]).max()) for o in outs), default=0.0)
    errs = {}
    for name in ("sequential", "shuffled", "tree"):
        o, _ = finalize(reduce_states(states, name, seed=seed))
        errs[name] = float(np.abs(o - o_ref).max())
    lse_c = np.array([float(finalize(st)[1][0]) for st in states])
    w = np.exp(lse_c - lse_ref[0])
    if axes is None:
        fig, axes = plt.subplots(
            2,
            1,
            figsize=(11, 6.2),
            gridspec_kw={"height_ratios": [1, 1.1]},
            layout="tight",
        )
    ax, bx = axes
    # neighbouring chunks in two contrasting tones, told apart on a projector at any
    # count; which chunk is which is its label c0, c1, ..., written in both panels
    colour = [("tab:blue", "tab:orange")[c % 2] for c in range(splits)]
    s = (k @ q[0]) / np.sqrt(d)
    ax.plot(s, ".", ms=1.5, color="0.55")
    upright = (
        splits <= 12
    )  # more chunks: labels stand on end, narrow chunks go unlabelled
    narrow = 0
    # the chunks as one collection of bands the axes' height (x in keys, y in axes fractions)
    ax.add_collection(
        PolyCollection(
            [[(j0, 0), (j1, 0), (j1, 1), (j0, 1)] for j0, j1 in bounds],
            facecolors=colour,
            edgecolors=colour,
            alpha=0.35,
            transform=ax.get_xaxis_transform(),
        )
    )
    for c, (j0, j1) in enumerate(bounds):
        wide = j1 - j0 >= M / 30
        if not upright and j1 - j0 < M / 80:  # too narrow for a 7-point label
            narrow += 1
            continue
        flat = upright and wide
        ax.text(
            (j0 + j1) / 2,
            s.max() * 1.08,
            f"c{c}\n{w[c]:.2f}" if flat else f"c{c} {w[c]:.2f}",
            ha="center",
            va="baseline" if flat else "bottom",
            fontsize=9 if flat else 8,
            rotation=0 if flat else 90,
        )
    ax.set_ylim(s.min() * 1.1, s.max() * 1.75)
    unlabelled = f" ({narrow} too narrow to label)" if narrow else ""
    ax.set(
        xlabel="key index j",
        ylabel="score s_j",
        title=(f"{splits} random chunks" if splits > 1 else "1 chunk")
        + unlabelled
        + f"\nby each label c: the chunk's share of the softmax mass (sum {w.sum():.3f})",
    )
    depth = _draw_merge_tree(bx, splits, order, seed, colour)
    bx.set_title(
        f"order: {order}, depth {depth}, {dtype}; max |o - o_one-shot| = {errs[order]:.1e}; "
        f"{distinct} bit-different result{'s' if distinct != 1 else ''} in {runs} runs"
    )
    return {
        "splits": int(splits),
        "order": order,
        "depth": int(depth),
        "errors": errs,
        "max_err": errs[order],
        "weights": w,
        "weight_sum": float(w.sum()),
        "dtype": dtype,
        "runs": int(runs),
        "distinct": int(distinct),
        "spread": spread,
    }


def _draw_merge_tree(bx, splits: int, order: str, seed: int, colour) -> int:
    """The merge tree on `bx` in unit coordinates: leaf slot p at x = (p + 1/2) / splits, height h at y = h / depth.

    Its depth and leaf labels are texts, not ticks, so every setting shares one frame (axes, limits,
    labels) and a slider redraws only the tree. Returns the depth.
    """
    segs, ys = merge_depths(splits, order, seed=seed)
    depth = max(ys) if splits > 1 else 0
    sx, sy = 1 / splits, 1 / max(depth, 1)
    bx.set(xlim=(0, 1), ylim=(-0.06, 1.06), xticks=[], yticks=[])
    step = 1 if depth <= 12 else 4
    levels = range(0, depth + 1, step)
    bx.add_collection(
        LineCollection(
            [[(0, h * sy), (1, h * sy)] for h in levels], colors="0.9", linewidths=1
        )
    )
    left = bx.get_yaxis_transform()  # x in axes fractions, y in data
    for h in levels:
        bx.text(-0.01, h * sy, str(h), transform=left, ha="right", va="center")
    bx.add_collection(
        LineCollection(
            [
                [((x0 + 0.5) * sx, y0 * sy), ((x1 + 0.5) * sx, y1 * sy)]
                for x0, y0, x1, y1 in segs
            ],
            colors="0.3",
            linewidths=2,
        )
    )
    leaves = leaf_order(splits, order, seed=seed)
    # each leaf in its chunk's colour: the link to the top panel when the order moves it
    xs = [(p + 0.5) * sx for p in range(splits)]
    bx.scatter(xs, [0] * splits, s=90, c=[colour[c] for c in leaves], zorder=3)
    below = bx.get_xaxis_transform()  # x in data, y in axes fractions
    for p in range(0, splits, 1 if splits <= 16 else 2):
        bx.text(
            xs[p],
            -0.03,
            f"c{leaves[p]}",
            transform=below,
            ha="center",
            va="top",
            fontsize=9 if splits <= 16 else 7,
        )
    bx.set_xlabel("chunk (labelled as above)", labelpad=16)
    bx.set_ylabel("merge depth", labelpad=30)
    return int(depth)


def draw_work_items(
    B: int = 1, H_kv: int = 2, splits: int = 4, G: int = 4, ax=None
) -> dict:
    """Flash-decoding's work items as a grid: one cell per (batch, key/value head, chunk), $B \\cdot H_{kv} \\cdot splits$
    in all, each serving the $G$ query heads of its group; one column of chunks per (batch, key/value head)."""
    for name, n in (("B", B), ("H_kv", H_kv), ("splits", splits), ("G", G)):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    if ax is None:
        _, ax = plt.subplots(
            figsize=(1.6 + 1.3 * B * H_kv, 0.9 + 0.45 * splits), layout="tight"
        )
    cols = [(b, h) for b in range(B) for h in range(H_kv)]
    for x, (b, h) in enumerate(cols):
        for c in range(splits):
            ax.add_patch(
                plt.Rectangle(
                    (x + 0.05, c + 0.05), 0.9, 0.9, color=f"C{h % 10}", alpha=0.35
                )
            )
            ax.text(
                x + 0.5, c + 0.5, f"({b},{h},{c})", ha="center", va="center", fontsize=8
            )
    ax.set_xlim(0, len(cols))
    ax.set_ylim(splits, 0)
    ax.set_xticks(
        [x + 0.5 for x in range(len(cols))],
        [f"b{b} kv{h}\n{G} q heads" for b, h in cols],
        fontsize=8,
    )
    ax.set_yticks(
        [c + 0.5 for c in range(splits)],
        [f"chunk {c}" for c in range(splits)],
        fontsize=8,
    )
    items = B * H_kv * splits
    ax.set_title(
        f"{B} × {H_kv} × {splits} = {items} work items (batch, kv head, chunk)",
        fontsize=10,
    )
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    return {"work_items": items, "query_rows_each": G, "columns": len(cols)}


def draw_pair_merge(
    shift: float = 1.0, n_x: int = 40, n_y: int = 60, seed: int = 4, ax=None
) -> dict:
    """Two chunks of one query row with one value coordinate, on a number line: each chunk's $o_c$ sized by
    its share $e^{lse_c - lse}$ of the mass, and the merged $o$ at their share-weighted average.

    Chunk y's scores are raised by `shift`, which moves mass from x to y. Taught in:
    notebooks/04_merge_order.ipynb
    """
    for name, n in (("n_x", n_x), ("n_y", n_y)):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    if not np.isfinite(shift):
        raise ValueError(f"shift must be a finite number, got {shift!r}")
    rng = np.random.default_rng(seed)
    s_x, s_y = rng.standard_normal(n_x), rng.standard_normal(n_y) + shift  # scores
    v_x = rng.normal(-1.0, 0.35, (n_x, 1))  # (n_x, dv = 1) values of chunk x
    v_y = rng.normal(1.0, 0.35, (n_y, 1))  # (n_y, dv = 1) values of chunk y
    x = finalize(partial_state(s_x[None], v_x))  # (o_x (1, 1), lse_x (1,))
    y = finalize(partial_state(s_y[None], v_y))
    o, lse = merge_output_pair(x, y)
    share = {c: float(np.exp(p[1][0] - lse[0])) for c, p in (("x", x), ("y", y))}
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 2.8), layout="tight")
    top = np.exp(max(s_x.max(), s_y.max()) - lse[0])  # the largest key's share
    for c, vals, s, part in (("x", v_x, s_x, x), ("y", v_y, s_y, y)):
        w = np.exp(s - lse[0]) / top  # each key's share of the row's mass, <= 1
        col = "C0" if c == "x" else "C1"
        ax.vlines(vals[:, 0], 0, w * 0.35, color=col, alpha=0.35, lw=1)
        ax.scatter(part[0][0, 0], 0.6, s=2000 * share[c], color=col, alpha=0.8)
        ax.annotate(
            f"$o_{c}$, share {share[c]:.2f}",
            (part[0][0, 0], 0.6),
            xytext=(0, 26),
            textcoords="offset points",
            ha="center",
            fontsize=9,
        )
    ax.plot([x[0][0, 0], y[0][0, 0]], [0.6, 0.6], color="0.6", lw=1, zorder=0)
    ax.plot([float(o[0, 0])], [0.6], marker="v", ms=14, color="k")
    ax.annotate(
        "merged $o$",
        (float(o[0, 0]), 0.6),
        xytext=(0, -24),
        textcoords="offset points",
        ha="center",
        fontsize=9,
    )
    ax.set_ylim(-0.05, 1.05)
    ax.set_yticks([])
    ax.set_xlabel(
        "value (one coordinate); thin lines: each key's value, height its weight"
    )
    raised = f" (chunk y's scores raised by {shift:g})" if shift else ""
    ax.set_title(
        f"the merged o: the chunks' o_c weighted by their shares of the mass{raised}",
        fontsize=10,
    )
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    weighted = share["x"] * x[0][0, 0] + share["y"] * y[0][0, 0]
    return {"share": share, "o": float(o[0, 0]), "weighted": float(weighted)}
