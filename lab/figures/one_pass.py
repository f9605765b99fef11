"""Figures for notebook 03: the one-pass state of one query row, step by step, and what it holds.

Taught in: notebooks/03_one_pass_attention.ipynb
"""

from __future__ import annotations

import functools

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from ..one_pass import ROW_METHODS, attention_row_one_pass, compare_row_methods

__all__ = [
    "row_inputs",
    "draw_one_pass",
    "state_rescale_trace",
    "draw_state_rescale",
    "draw_holdings",
    "causal_geometry",
    "draw_causal_blocks",
]


def row_inputs(M: int = 4096, d: int = 64, dv: int | None = None, seed: int = 0):
    """One query `q (d,)`, keys `k (M, d)` and values `v (M, dv)` drawn from a seeded standard normal (read-only, cached)."""
    return _row_inputs(int(M), int(d), int(d if dv is None else dv), int(seed))


@functools.lru_cache(maxsize=8)
def _row_inputs(M: int, d: int, dv: int, seed: int):
    rng = np.random.default_rng(seed)
    out = (
        rng.standard_normal(d),
        rng.standard_normal((M, d)),
        rng.standard_normal((M, dv)),
    )
    for a in out:
        a.setflags(write=False)  # shared between calls: nobody may change them
    return out


def _count(n: int, noun: str) -> str:
    """'1 block', '2 blocks'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def draw_one_pass(
    M: int = 4096, block_k: int = 256, d: int = 64, seed: int = 0, axes=None
) -> dict:
    """Left: the one-pass state per key block (block max, running m, the blocks where m grew and their alpha); right: bytes each row method reads, writes and holds."""
    q, k, v = row_inputs(M, d, seed=seed)
    rows = compare_row_methods(q, k, v, block_k=block_k)
    steps = attention_row_one_pass(q, k, v, block_k=block_k).steps
    if axes is None:
        fig, axes = plt.subplots(
            1,
            2,
            figsize=(11, 4.2),
            gridspec_kw={"width_ratios": [1.25, 1]},
            layout="tight",
        )
    ax, bx = axes
    b = np.array([s["block"] for s in steps])
    alphas = np.array([s["alpha"] for s in steps])
    ax.plot(
        b,
        [s["block_max"] for s in steps],
        "o",
        color="C0",
        ms=5,
        label="block max of s_b",
    )
    ax.step(
        b, [s["m"] for s in steps], where="post", color="C3", lw=2, label="running m"
    )
    grew = [i for i in range(1, len(steps)) if alphas[i] < 1]
    ax.plot(
        b[grew],
        [steps[i]["m"] for i in grew],
        "^",
        color="C2",
        ms=9,
        label="m grew: acc, l times α < 1",
    )
    # label the (at most 4) largest rescales, the smallest α, at least 1/8 of the axis apart
    gap, shown = len(steps) / 8, []
    for i in sorted(grew, key=lambda i: alphas[i]):
        if len(shown) < 4 and all(abs(b[i] - b[j]) >= gap for j in shown):
            shown.append(i)
    for n, i in enumerate(sorted(shown)):
        ax.annotate(
            f"α={alphas[i]:.2f}",
            (b[i], steps[i]["m"]),
            textcoords="offset points",
            xytext=(4, 6 + 14 * (n % 2)),  # alternate heights: no two touch
            fontsize=10,
            color="C2",
        )
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.2 * (hi - lo))
    ax.set_xlim(
        -0.5, max(len(steps) - 0.5, 1.5)
    )  # one block (M <= Bc) still has an axis
    ax.fixed_limits = "x"  # a slider keeps the blocks' own axis (lab.widgets)
    ax.set(
        xlabel=f"key block b (Bc = {block_k}, {_count(len(steps), 'block')})",
        ylabel="score",
    )
    ax.legend(  # above the plot, so that no α label hides under it
        loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=9, frameon=False
    )
    ax.set_title(
        f"one pass over M = {M:,} keys: m grew at {_count(len(grew), 'block')}", pad=24
    )
    names = list(ROW_METHODS)
    short = ["three-pass", "two-pass", "one-pass"]
    kb = k.nbytes
    kv_read = np.array(
        [
            (r["passes over K"] * kb + r["passes over V"] * v.nbytes) / 2**20
            for r in rows
        ]
    )
    s_io = np.array([(r["s written (B)"] + r["s read (B)"]) / 2**20 for r in rows])
    x = np.arange(len(names))
    bx.bar(x, kv_read, color="C0", label="K, V read")
    bx.bar(x, s_io, bottom=kv_read, color="C1", label="score row s written + read")
    for i, r in enumerate(rows):
        bx.text(
            i,
            kv_read[i] + s_io[i],
            f"on chip {r['working arrays (B)'] / 1024:,.1f} KiB\n"
            f"+ K, V {r['K, V in flight (B)'] / 1024:,.0f} KiB",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    bx.set_xticks(x, short)
    bx.grid(False)
    bx.set_ylim(0, 1.6 * float((kv_read + s_io).max()))
    bx.set(
        ylabel="MiB moved (float64)",
        title="traffic of one query row; on top, what lab's version holds",
    )
    bx.legend(loc="upper left", fontsize=10)
    for a in (ax, bx):
        a.yaxis.set_major_locator(
            MaxNLocator(5)
        )  # fewer labels to lay out: a cheaper slider frame
    return {
        "M": int(M),
        "block_k": int(block_k),
        "blocks": len(steps),
        "rescalings": len(grew),
        "labelled": [int(i) for i in sorted(shown)],
        "rows": rows,
        "held": {n: r["working arrays (B)"] for n, r in zip(short, rows)},
        "exponentials": {n: r["exponentials"] for n, r in zip(short, rows)},
        "max_err": max(r["max |o - ref|"] for r in rows),
    }


def state_rescale_trace(q, k, v, block_k: int = 256, components=(0, 1, 2)) -> dict:
    r"""Section 3's loop for one query, each block's step cut in two: after the rescale
    ($\alpha l$, $\alpha\, acc$) and after the block's terms are added ($l'$, $acc'$).

    Per block b it records `block_max`, `m`, `alpha`, `l_scaled` $= \alpha l$, `l` $= l'$, the lengths
    `acc_norm_scaled` $= \lVert \alpha\, acc \rVert$ and `acc_norm` $= \lVert acc' \rVert$, and
    `o_scaled` $= \alpha\, acc / (\alpha l)$ and `o_seen` $= acc' / l'$ at `components` (block 0's
    `o_scaled` is NaN: no key yet). `rose` lists the blocks after the first where $m$ rose, and
    `o` is $acc / l$ after the last block. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    if int(block_k) != block_k or block_k < 1:
        raise ValueError(f"block_k must be a positive integer, got {block_k!r}")
    cols = list(components)
    scale = 1 / np.sqrt(q.shape[0])
    m, l, acc = -np.inf, 0.0, np.zeros(v.shape[1])  # the state of no keys
    names = ("block_max", "m", "alpha", "l_scaled", "l", "acc_norm_scaled", "acc_norm")
    rec = {key: [] for key in (*names, "o_scaled", "o_seen")}
    for j0 in range(0, len(k), block_k):
        s_b = scale * (k[j0 : j0 + block_k] @ q)  # (Bc,)
        m_new = max(m, s_b.max())
        alpha = np.exp(m - m_new)  # 0 at the first block
        l_a, acc_a = alpha * l, alpha * acc  # step 1: the old sums against m'
        p = np.exp(s_b - m_new)  # (Bc,)
        l, acc, m = l_a + p.sum(), acc_a + p @ v[j0 : j0 + block_k], m_new  # step 2
        o_a = acc_a[cols] / l_a if l_a > 0 else np.full(len(cols), np.nan)
        vals = (s_b.max(), m, alpha, l_a, l, np.linalg.norm(acc_a), np.linalg.norm(acc))
        for key, val in zip(rec, (*vals, o_a, acc[cols] / l)):
            rec[key].append(val)
    out = {key: np.array(val) for key, val in rec.items()}
    out["rose"] = [int(b) for b in np.flatnonzero(out["alpha"][1:] < 1) + 1]
    return out | {"components": tuple(components), "o": acc / l}


def _two_step(rose, scaled, after):
    """The path of a state: at each block b its value after the block, (b, after[b]), preceded
    at each block in `rose` by the value just after the rescale, (b - 0.4, scaled[b])."""
    xs, ys = [], []
    for b, y in enumerate(after):
        if b in rose:
            xs.append(b - 0.4)
            ys.append(scaled[b])
        xs.append(b)
        ys.append(y)
    return np.array(xs), np.array(ys)


def draw_state_rescale(
    M: int = 4096,
    block_k: int = 256,
    d: int = 64,
    seed: int = 0,
    components=(0, 1, 2),
    axes=None,
) -> dict:
    r"""Four panels on one axis of key blocks: the running max $m$; $l$ and $\lVert acc \rVert$,
    each block's step drawn in two (times $\alpha$, then plus the block's terms); and
    $o = acc / l$ at `components`, which the rescale leaves where it is, against the final output.

    Returns `state_rescale_trace` of the row it drew. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    tr = state_rescale_trace(
        *row_inputs(M, d, seed=seed), block_k=block_k, components=components
    )
    if axes is None:
        _, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True, layout="tight")
    ax_m, ax_l, ax_a, ax_o = axes
    b = np.arange(len(tr["m"]))
    ax_m.step(b, tr["m"], where="post", color="C3", lw=2.5, label="running max m")
    ax_m.plot(b, tr["block_max"], "o", color="C0", ms=6, label="block max of s_b")
    for r in tr["rose"]:
        ax_m.annotate(
            f"α = {tr['alpha'][r]:.2f}", (r, tr["m"][r]), xytext=(6, -18),
            textcoords="offset points", fontsize=13, color="C3",
        )  # fmt: skip
    for ax, key, color, label in (
        (ax_l, "l", "C0", "l"),
        (ax_a, "acc_norm", "C1", "‖acc‖"),
    ):
        x, y = _two_step(tr["rose"], tr[key + "_scaled"], tr[key])
        ax.plot(x, y, "-", color=color, lw=2, label=f"{label} after each block")
        ax.plot(b, tr[key], "o", color=color, ms=7)
        ax.plot(
            np.array(tr["rose"]) - 0.4, tr[key + "_scaled"][tr["rose"]], "v",
            color="C3", ms=11, label=f"× α: {label} shrinks",
        )  # fmt: skip
    for i, (c, color) in enumerate(zip(tr["components"], ("C0", "C1", "C4"))):
        x, y = _two_step(tr["rose"], tr["o_scaled"][:, i], tr["o_seen"][:, i])
        ax_o.plot(x, y, "-", lw=2, color=color, label=f"acc[{c}] / l")
        ax_o.plot(b, tr["o_seen"][:, i], "o", ms=5, color=color)
        ax_o.axhline(tr["o"][c], color=color, ls=":", lw=1.5)
    ax_o.plot(
        np.repeat(np.array(tr["rose"]) - 0.4, len(tr["components"])),
        tr["o_scaled"][tr["rose"]].ravel(), "v", color="C3", ms=9,
        label="× α: unchanged",
    )  # fmt: skip
    for ax, what in zip(axes, ("m", "l", "‖acc‖", "acc / l")):
        for r in tr["rose"]:
            ax.axvspan(r - 0.5, r - 0.3, color="C3", alpha=0.15, lw=0)
        ax.set_ylabel(what, fontsize=14)
        ax.legend(loc="upper left", fontsize=12, frameon=False, ncol=4)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + 0.3 * (hi - lo))  # room for the legend
    axes[0].set_title(
        f"one query, M = {M:,} keys, Bc = {block_k}: m rose at blocks "
        f"{', '.join(map(str, tr['rose'])) or 'none'} (shaded: the step × α)",
        fontsize=13,
    )
    ax_o.set_xlabel(
        "key block b   (dotted: the exact output o over all M keys)", fontsize=13
    )
    ax_o.xaxis.set_major_locator(MaxNLocator(integer=True))
    return tr


def draw_holdings(
    Ms=(256, 1024, 4096, 16384), block_k: int = 256, d: int = 64, seed: int = 0, ax=None
) -> dict:
    """Peak bytes each row method holds against the number of keys M, log-log: its declared sum of the working arrays alive, taken in a run."""
    held = {name: [] for name in ROW_METHODS}
    for M in Ms:
        q, k, v = row_inputs(int(M), d, seed=seed)
        for name, fn in ROW_METHODS.items():
            kw = (
                {}
                if fn is ROW_METHODS["three-pass (store s)"]
                else {"block_k": block_k}
            )
            held[name].append(fn(q, k, v, **kw).held_bytes)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.2), layout="tight")
    for (name, b), (style, ms, fill) in zip(
        held.items(), (("o-", 7, "C0"), ("s--", 12, "none"), ("^-", 7, "C2"))
    ):
        ax.plot(Ms, np.array(b) / 1024, style, label=name, ms=ms, mfc=fill, mew=1.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(
        xlabel="number of keys M",
        ylabel="KiB held at the peak",
        title=f"working arrays one query row holds (float64, d = {d}, Bc = {block_k})",
    )
    ax.legend(fontsize=10)
    return {"Ms": [int(M) for M in Ms], "held": held}


def causal_geometry(N: int, M: int, block_k: int) -> dict:
    """The causal mask of N queries against M keys, swept in blocks of `block_k` keys: query i sees
    key j when $j \\le i + M - N$ (the queries are the last N of the M positions).

    Returns `allowed` (N, M) booleans, `empty_rows` (the queries that see no key: $i < N - M$),
    `block_edges` (the first key of each block and M) and `skipped` (N, blocks) booleans, True where
    a query sees no key of a block. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    for name, x in (("N", N), ("M", M), ("block_k", block_k)):
        if int(x) != x or x < 1:
            raise ValueError(f"{name} must be a positive integer, got {x!r}")
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    allowed = j <= i + M - N
    edges = list(range(0, M, block_k)) + [M]
    skipped = np.stack(
        [~allowed[:, a:b].any(axis=1) for a, b in zip(edges[:-1], edges[1:])], axis=1
    )
    empty = np.flatnonzero(~allowed.any(axis=1))
    return {
        "allowed": allowed,
        "empty_rows": empty,
        "block_edges": edges,
        "skipped": skipped,
    }


def draw_causal_blocks(shapes=((6, 10), (10, 6)), block_k: int = 4, axes=None) -> list:
    """For each (N, M) in `shapes`: the keys each query may use under the bottom-right causal mask
    (shaded), the blocks of `block_k` keys the loop sweeps (vertical lines; the last block shorter
    when `block_k` does not divide M), and the queries that see no key (red rows, when N > M).

    Returns `causal_geometry` of each shape. Taught in: notebooks/03_one_pass_attention.ipynb
    """
    if axes is None:
        _, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4.8))
    axes = np.atleast_1d(axes)
    out = []
    for ax, (N, M) in zip(axes, shapes):
        g = causal_geometry(N, M, block_k)
        image = np.where(g["allowed"], 1.0, 0.0)
        image[g["empty_rows"]] = 0.35  # a row with no key at all
        cmap = plt.matplotlib.colors.ListedColormap(["white", "#e8a0a0", "C0"])
        ax.imshow(image, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for e in g["block_edges"][1:-1]:
            ax.axvline(e - 0.5, color="k", lw=2)
        ax.set_xticks(np.arange(M), [str(x) for x in range(M)], fontsize=9)
        ax.set_yticks(np.arange(N), [str(x) for x in range(N)], fontsize=9)
        ax.set_xticks(np.arange(M + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(N + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="0.8", lw=0.5)
        ax.grid(which="major", visible=False)
        ax.tick_params(which="minor", length=0)
        title = f"N = {N} queries, M = {M} keys, blocks of {block_k}"
        if len(g["empty_rows"]):
            title += f"\n(red: the first N - M = {N - M} queries see no key)"
        ax.set(xlabel="key j", ylabel="query i", title=title)
        out.append(g)
    return out
