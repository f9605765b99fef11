"""Figures for notebook 09: the tiles the backward visits, and what training keeps between the passes.

Taught in: notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import functools
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullLocator

from ..attention import attention_reference
from ..backward import (
    attention_backward,
    backward_flops,
    flash_attention_backward_numpy,
)
from ..rules import causal_key_end
from ..softmax import softmax_safe

__all__ = [
    "draw_jacobian",
    "draw_backward_tiles",
    "draw_training_memory",
    "draw_backward_time",
    "draw_backward_graph",
]


def _plain_log_axes(ax) -> None:
    """Plain tick labels (1, 2, 4, ...) and no minor ticks on log axes: cheaper to draw than mathtext powers."""
    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.4g}"))
            axis.set_minor_locator(NullLocator())


def _tile_grid(N, M, Br, Bc, causal):
    """visible[i, j] for query block i and key block j: 0 skipped, 1 masked inside, 2 full."""
    nq, nk = math.ceil(N / Br), math.ceil(M / Bc)
    grid = np.full((nq, nk), 2, dtype=int)
    if causal:
        for i in range(nq):
            i0, i1 = i * Br, min((i + 1) * Br, N)
            for j in range(nk):
                j0, j1 = j * Bc, min((j + 1) * Bc, M)
                if j0 >= causal_key_end(i1 - 1, N, M):
                    grid[i, j] = 0  # every key of the tile is in the future
                elif j1 > causal_key_end(i0, N, M):
                    grid[i, j] = 1  # crosses the diagonal: mask inside
    return grid


@functools.lru_cache(maxsize=256)
def backward_error(
    N: int,
    block_q: int,
    block_k: int,
    causal: bool,
    d: int = 64,
    seed: int = 0,
    M: int | None = None,
) -> float:
    """max |dQ, dK, dV of `flash_attention_backward_numpy` − `attention_backward`| on seeded inputs, N queries
    and M keys (default N), kept per setting."""
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((N, d)) for _ in range(2))  # (N, d)
    k, v = (rng.standard_normal((N if M is None else M, d)) for _ in range(2))  # (M, d)
    o, lse = attention_reference(q, k, v, causal=causal)
    got = flash_attention_backward_numpy(
        q, k, v, o, lse, do, block_q=block_q, block_k=block_k, causal=causal
    )
    want = attention_backward(q, k, v, do, causal=causal)
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want))


def _checked_shape(N: int, M: int, check_N: int) -> tuple[int, int]:
    """(n, m): at most `check_N` queries, and n + (M − N) keys with the gap held within ±n/2 (m ≥ 1)."""
    n = min(N, check_N)
    gap = max(-(n // 2), min(n // 2, M - N))
    return n, max(1, min(M, n + gap))


def draw_backward_tiles(
    N: int = 256,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = True,
    d: int = 64,
    seed: int = 0,
    axes=None,
    check_N: int | None = None,
    M: int | None = None,
) -> dict:
    """Left: the backward's tiles (key blocks outer), entry by entry: visible, masked, skipped; one tile (I, J)
    outlined with the row block it adds to (dQ_I) and the key block it adds to (dK_J, dV_J). Right: bytes kept
    for the backward beyond q, k, v (kept by both): P and scale·q (and, causal, the N × M bool mask that
    `standard_attention_torch`'s autograd saves, 1 byte an entry) against o + lse.

    `M` keys (default N), the causal mask bottom-right, $j \\le i + M - N$. The kept ratio is
    $(NM + Nd) / (Nd + N) = (M + d) / (d + 1)$ (with $d_v = d$; causal, $(1.25M + d) / (d + 1)$ in float32). Also runs
    `flash_attention_backward_numpy` at these settings (cached per setting) and returns max |dQ, dK, dV −
    standard| as `max_err`: on the whole problem, or with `check_N` on n = min(N, `check_N`) queries against
    n + (M − N) keys, the gap M − N held within ±n/2 so that its sign (rows with no key when N > M) stays;
    the queries it ran at as `checked_N`, the keys as `checked_M`.
    """
    M = N if M is None else M
    n, m = (N, M) if check_N is None else _checked_shape(N, M, check_N)
    err = backward_error(n, block_q, block_k, bool(causal), d, seed, m)
    grid = _tile_grid(N, M, block_q, block_k, causal)
    if axes is None:
        _, axes = plt.subplots(
            1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [1.1, 1]}
        )
    ax, bx = axes
    nq, nk = grid.shape
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    tile = grid[
        i // block_q, j // block_k
    ]  # (N, M): 0 skipped, 1 masked inside, 2 full
    seen = j < causal_key_end(i, N, M) if causal else np.ones((N, M), bool)
    rgb = np.ones((N, M, 3))  # skipped: white
    rgb[(tile > 0) & seen] = (0.16, 0.62, 0.56)  # computed and visible
    rgb[(tile > 0) & ~seen] = (0.96, 0.64, 0.38)  # computed, then masked to -inf
    thin = not 0.5 <= N / M <= 2  # a thin matrix fills its panel, not a sliver of it
    ax.imshow(
        rgb,
        extent=(0, M, N, 0),
        interpolation="nearest",
        aspect="auto" if thin else "equal",
    )
    ax.vlines(range(0, M + 1, block_k), 0, N, color="black", lw=0.5)  # one collection
    ax.hlines(range(0, N + 1, block_q), 0, M, color="black", lw=0.5)
    if causal and M != N:
        ax.plot([0, M], [N - M, N], color="black", ls=":", lw=1.2)
        x = (max(0, M - N) + M) / 2  # the middle of the line's visible part
        ax.annotate(  # on the line, which its white box interrupts; near the right edge it ends there
            "j = i + M − N",
            (x, x + N - M),
            fontsize=10,
            ha="center" if x <= 0.75 * M else "right",
            va="center",
            bbox=dict(fc="white", ec="black", lw=0.5, alpha=0.9, pad=1.5),
            annotation_clip=True,
        )
    visited = np.argwhere(grid > 0)
    I, J = visited[len(visited) // 2]  # one visited tile, outlined with what it updates
    y0, x0 = I * block_q, J * block_k
    h, w = min(block_q, N - y0), min(block_k, M - x0)
    ax.add_patch(Rectangle((0, y0), M, h, fill=False, ec="#e63946", lw=2, ls="--"))
    ax.add_patch(Rectangle((x0, 0), w, N, fill=False, ec="#7b2cbf", lw=2, ls="--"))
    ax.add_patch(  # shaded too, so that a thin tile still shows
        Rectangle((x0, y0), w, h, fc=(0, 0, 0, 0.3), ec="black", lw=2.5, zorder=3)
    )
    ax.set(
        xlim=(0, M),
        ylim=(N, 0),
        xlabel="key index j  (outer loop over key blocks)",
        ylabel="query index i  (inner loop)",
        title=f"backward tiles: {int((grid > 0).sum())} of {grid.size} visited",
    )
    ax.grid(False)
    handles = [
        Rectangle((0, 0), 1, 1, fc=c, ec="black", ls=ls, fill=f, lw=lw)
        for c, ls, f, lw in (
            ("#2a9d8f", "-", True, 0.5),
            ("#f4a261", "-", True, 0.5),
            ("white", "-", True, 0.5),
            ("#e63946", "--", False, 2),
            ("#7b2cbf", "--", False, 2),
        )
    ]
    for hd, c in zip(handles[3:], ("#e63946", "#7b2cbf")):
        hd.set_edgecolor(c)
    ax.figure.subplots_adjust(left=0.08, right=0.98, bottom=0.26, top=0.87, wspace=0.3)
    box = (
        ax.get_position()
    )  # the panel's box: the legend sits under it, at the figure's foot
    ax.figure.legends.clear()  # a slider redraws on the same figure: one legend at a time
    ax.figure.legend(  # clear of the tiles and of the x label, however thin the matrix
        handles,
        [
            "computed, visible",
            "computed, then masked",
            "tile skipped",
            f"tile ({I}, {J}) reads Q_I, dO_I, lse_I, D_I; adds to dQ_I",
            "reads K_J, V_J; adds to dK_J, dV_J",
        ],
        loc="lower center",
        bbox_to_anchor=((box.x0 + box.x1) / 2, 0.0),
        ncol=2,
        fontsize=9,
        frameon=False,
    )
    kept_p = N * M * 4
    kept_std = kept_p + N * d * 4 + (N * M if causal else 0)  # P, scale·q, bool mask
    kept_flash = (N * d + N) * 4
    bx.bar(
        [
            "P + scale·q" + (" + mask" if causal else "") + "\n(standard)",
            "o + lse\n(flash)",
        ],
        [kept_std / 1024, kept_flash / 1024],
        color=["#e76f51", "#2a9d8f"],
    )
    top = max(kept_std, kept_flash) / 1024
    for x, b in enumerate((kept_std, kept_flash)):  # a linear axis: the gap as it is
        bx.text(
            x, b / 1024 + top * 0.02, f"{b / 1024:,.1f} KiB", ha="center", fontsize=11
        )
    bx.set(
        ylabel="KiB beyond q, k, v (float32)",
        title=f"kept, N = {N}, M = {M}, d = {d}\n"
        f"{'(1.25 M + d)' if causal else '(M + d)'} / (d + 1) = {kept_std / kept_flash:.1f}×",
        ylim=(0, top * 1.15),
    )
    flops = backward_flops(N, d=d, causal=causal)
    return {
        "N": N,
        "block_q": block_q,
        "block_k": block_k,
        "causal": bool(causal),
        "tiles": int(grid.size),
        "visited": int((grid > 0).sum()),
        "masked": int((grid == 1).sum()),
        "M": M,
        "p_bytes": kept_p,
        "standard_bytes": kept_std,
        "flash_bytes": kept_flash,
        "kept_ratio": kept_std / kept_flash,
        "max_err": err,
        "checked_N": n,
        "checked_M": m,
        "backward_flops": flops["backward"],
    }


def draw_jacobian(J, p, axes=None, limit: float = 0.25) -> dict:
    """One row's $P$ (bars) beside its Jacobian $J_{jj'} = \\partial P_j / \\partial S_{j'}$ (a diverging heatmap, 0 white).

    Draws the `J` it is given (the notebook's finite steps): each entry printed in its square, each
    row's sum at its right. The colours span $\\pm$`limit` on every call, 1/4 by default, the most any
    entry can be ($P_j(1 - P_j) \\le 1/4$), so that a smaller J is paler. Returns the row sums, the signs
    of the diagonal and the rest, and `limit`.
    """
    if not limit > 0:
        raise ValueError(f"limit must be positive, got {limit!r}")
    J, p = np.asarray(J, np.float64), np.asarray(p, np.float64)
    if J.ndim != 2 or J.shape != (p.size, p.size):
        raise ValueError(
            f"J must be (M, M) for p of M = {p.size} entries, got {J.shape}"
        )
    if axes is None:
        _, axes = plt.subplots(
            1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [1, 1.6]}
        )
    M, keys = p.size, np.arange(p.size)
    axes[0].bar(keys, p, color="#2a9d8f")
    axes[0].set(xticks=keys, xlabel="key j", ylabel="$P_j$", title="One row of P")
    axes[1].imshow(J, cmap="RdBu_r", vmin=-limit, vmax=limit)  # one scale on every call
    for (r, c), x in np.ndenumerate(J):
        ink = (
            "white" if abs(x) > 0.6 * limit else "black"
        )  # legible on the dark squares
        axes[1].text(
            c, r, f"{x:+.3f}", ha="center", va="center", fontsize=11, color=ink
        )
    sums = J.sum(axis=1)
    for r, x in enumerate(sums):
        shown = round(float(x), 3) + 0.0  # rounding noise prints as 0.000, never -0.000
        axes[1].text(M - 0.3, r, f"sum {shown:.3f}", va="center", fontsize=11)
    axes[1].set(
        xticks=keys,
        yticks=keys,
        xlim=(-0.5, M + 1.2),
        xlabel="score moved: $S_{j'}$",
        ylabel="entry that moves: $P_j$",
        title="$\\partial P_j / \\partial S_{j'}$: red up, blue down",
    )
    off = ~np.eye(M, dtype=bool)
    return {
        "row_sums": sums.tolist(),
        "diagonal_positive": bool((np.diag(J) > 0).all()),
        "off_diagonal_negative": bool((J[off] < 0).all()),
        "limit": float(limit),
    }


def draw_row_jacobian(
    scale: float = 1.0, scores=(1.0, 2.0, 0.5, -1.0), axes=None
) -> dict:
    """The Jacobian of one row's softmax at scores `scale · scores`, by finite steps as in the notebook, drawn
    by `draw_jacobian`: a larger scale peaks the row. Returns the row of P, J, its row sums and its largest
    entry |J| (the most one score moves any P per unit)."""
    s = scale * np.asarray(scores, np.float64)
    if s.ndim != 1 or s.size < 2:
        raise ValueError(
            f"scores must be a row of at least 2, got shape {np.shape(scores)}"
        )
    p = softmax_safe(s)
    h = 1e-6  # column j': how P moves when S_j' moves by h
    J = np.stack([(softmax_safe(s + h * e) - p) / h for e in np.eye(s.size)], axis=1)
    out = draw_jacobian(J, p, axes=axes)
    (axes if axes is not None else plt.gcf().axes)[0].set_ylim(0, 1)
    return {
        **out,
        "scale": scale,
        "p": p.tolist(),
        "J": J,
        "largest": float(np.abs(J).max()),
    }


def draw_training_memory(rows, ax=None) -> dict:
    """Saved bytes beyond the inputs q, k, v against N (log-log) from `lab.training_memory` rows, with the $N^2$ of P."""
    if ax is None:
        _, ax = plt.subplots()
    Ns = np.array([r["N"] for r in rows])
    std = np.array([r["standard_extra"] for r in rows]) / 2**20  # beyond q, k, v
    fla = np.array([r["flash_extra"] for r in rows]) / 2**20
    p = np.array([r["p_bytes"] for r in rows]) / 2**20
    ax.loglog(
        Ns,
        std,
        "o-",
        base=2,
        color="#e76f51",
        label="standard, scale before QKᵀ (P, scale·q)",
    )
    ax.loglog(
        Ns,
        fla,
        "s-",
        base=2,
        color="#2a9d8f",
        label="lab.flash_attention_torch (o, lse)",
    )
    ax.loglog(Ns, p, ":", base=2, color="gray", label="P alone: N²·4 B")
    ax.set(
        xlabel="sequence length N",
        ylabel="MiB saved for the backward, beyond q, k, v",
        title="What autograd keeps beyond the inputs (d = 64, one head)",
    )
    ax.legend(loc="upper left", fontsize=10)
    _plain_log_axes(ax)
    return {
        "N": Ns.tolist(),
        "standard_mib": std.tolist(),
        "flash_mib": fla.tolist(),
        "ratio_last": float(std[-1] / fla[-1]),
    }


def _wrap_name(name: str, width: int = 16) -> str:
    """`name` in lines of at most `width` characters, broken at spaces, or after a dot or an underscore
    (`lab.flash_attention_torch`), a word longer than that being left whole."""
    lines = []
    while len(name) > width:
        cut = max(name.rfind(c, 1, width + 1) for c in " ._")
        if cut < 1:
            break
        keep = cut if name[cut] == " " else cut + 1
        lines.append(name[:keep])
        name = name[keep:].lstrip()
    return "\n".join([*lines, name])


def draw_backward_time(timings: dict, flop_ratios: dict | None = None, ax=None) -> dict:
    """Bars of the measured backward / forward time ratio per kernel (the median), a dot for each round's own ratio
    (`round_ratios`, where given), and a dashed line at each kernel's FLOP ratio.

    `flop_ratios` maps a kernel to its backward / forward FLOP ratio; by default 2.0 for a name with "standard" in it
    (four products, P read back: 4 · 2NMd / 2 · 2NMd) and 2.5 for the others (five, S recomputed).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    names = list(timings)
    ratios = [timings[n]["ratio"] for n in names]
    flop = [
        (flop_ratios or {}).get(n, 2.0 if "standard" in n.lower() else 2.5)
        for n in names
    ]
    labels = [
        f"{_wrap_name(n)}\n(FLOPs {f:g}×)" for n, f in zip(names, flop)
    ]  # the FLOP ratio under the bar, where the measured label cannot overprint it
    ax.bar(labels, ratios, color=["#e76f51", "#2a9d8f", "#264653"][: len(names)])
    rounds = [timings[n].get("round_ratios") or [] for n in names]
    for x, rr in enumerate(rounds):  # each round's own ratio: the spread a rerun shows
        ax.plot(
            [x] * len(rr),
            rr,
            "o",
            ms=5,
            mfc="white",
            mec="black",
            label="one round" if x == 0 and rr else None,
        )
    for x, f in enumerate(flop):
        ax.hlines(
            f,
            x - 0.45,
            x + 0.45,
            color="black",
            ls="--",
            label="FLOP ratio of each kernel" if x == 0 else None,
        )
    for x, (r, f) in enumerate(
        zip(ratios, flop)
    ):  # above the bar, its dashed line and its rounds
        top = max([r, f, *rounds[x]])
        ax.text(x, top * 1.04, f"{r:.1f}×", ha="center", va="bottom", fontsize=11)
    ax.set_ylim(0, max(ratios + flop + [r for rr in rounds for r in rr]) * 1.3)
    n_rounds = max((len(rr) for rr in rounds), default=0)
    ax.set(
        ylabel="backward time / forward time",
        title=f"Measured on this CPU: bar = median of {n_rounds} rounds, dots = each round"
        if n_rounds
        else "Measured on this machine's CPU (noisy)",
    )
    ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=10, frameon=False
    )
    return {n: r for n, r in zip(names, ratios)}


# Node: (x, y, role); role says who keeps it: "input" both, "p" standard keeps / flash recomputes,
# "flash" flash keeps, "computed" the backward forms it.
_GRAPH_NODES = {
    "Q": (0.0, 3.0, "input"),
    "K": (0.0, 2.0, "input"),
    "V": (0.0, 1.0, "input"),
    "S": (1.6, 2.5, "recomputed"),
    "P": (3.2, 2.5, "p"),
    "lse": (3.2, 3.4, "flash"),
    "O": (4.8, 1.8, "flash"),
    "dO": (6.4, 0.4, "given"),
    "D": (4.8, 0.4, "computed"),
    "dP": (4.8, -0.6, "computed"),
    "dV": (6.4, 2.8, "computed"),
    "dS": (3.2, -0.6, "computed"),
    "dK": (1.6, -0.1, "computed"),
    "dQ": (1.6, -1.1, "computed"),
}
_GRAPH_FORWARD = [
    ("Q", "S"),
    ("K", "S"),
    ("S", "P"),
    ("S", "lse"),
    ("P", "O"),
    ("V", "O"),
]
_GRAPH_BACKWARD = [
    ("dO", "dP"),
    ("V", "dP"),
    ("dO", "dV"),
    ("P", "dV"),
    ("dO", "D"),
    ("O", "D"),
    ("dP", "dS"),
    ("P", "dS"),
    ("D", "dS"),
    ("dS", "dQ"),
    ("K", "dQ"),
    ("dS", "dK"),
    ("Q", "dK"),
]
_GRAPH_RECOMPUTE = [  # FlashAttention's backward, before it can form dV and dS
    ("Q", "S"),
    ("K", "S"),
    ("S", "P"),
    ("lse", "P"),
]
_GRAPH_STYLE = {  # role: (face colour, edge style, legend)
    "input": ("#e9ecef", "-", "an input: both designs keep it (q, k, v)"),
    "p": ("#f4a261", "--", "kept by standard attention only (P)"),
    "recomputed": ("white", "--", "kept by neither design (S)"),
    "flash": ("#8ecae6", "-", "FlashAttention keeps it (N·d_v and N numbers)"),
    "given": ("#ffe8a3", "-", "handed to the backward: dO = ∂L/∂O"),
    "computed": ("white", "-", "formed by the backward"),
}


def draw_backward_graph(ax=None) -> dict:
    """Static: what each quantity of attention's forward (top) and backward (bottom) is made from.

    Grey arrows are the forward, $S = \\mathrm{scale}\\cdot QK^\\top$, $P = \\mathrm{softmax}(S)$, $O = PV$; black
    arrows the backward; dashed blue arrows what FlashAttention's backward recomputes first, S from Q, K and
    P from S and lse. Fill and outline say which design keeps a node and which recomputes it. Returns the
    node roles and the backward's edges.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 7.2))
    arrows = (
        (_GRAPH_FORWARD, "#999999", "-", "arc3"),
        (_GRAPH_BACKWARD, "black", "-", "arc3"),
        (
            _GRAPH_RECOMPUTE,
            "#1d6fa5",
            "--",
            "arc3,rad=-0.35",
        ),  # bowed off the forward's
    )
    for edges, colour, ls, path in arrows:
        for a, b in edges:
            (xa, ya, _), (xb, yb, _) = _GRAPH_NODES[a], _GRAPH_NODES[b]
            ax.annotate(
                "",
                xy=(xb, yb),
                xytext=(xa, ya),
                arrowprops=dict(
                    arrowstyle="-|>",
                    color=colour,
                    lw=1.4 if ls == "-" else 1.8,
                    ls=ls,
                    shrinkA=17,
                    shrinkB=17,
                    connectionstyle=path,
                ),
            )
    for name, (x, y, role) in _GRAPH_NODES.items():
        face, ls, _ = _GRAPH_STYLE[role]
        ax.text(
            x,
            y,
            name,
            ha="center",
            va="center",
            fontsize=16,
            bbox=dict(boxstyle="round,pad=0.4", fc=face, ec="black", ls=ls, lw=1.3),
        )
    ax.text(-0.5, 3.9, "forward (grey arrows)", fontsize=13, color="#666666")
    ax.text(-0.5, -1.75, "backward (black arrows)", fontsize=13)
    handles = [
        Rectangle((0, 0), 1, 1, fc=face, ec="black", ls=ls)
        for face, ls, _ in _GRAPH_STYLE.values()
    ] + [
        Line2D([], [], color=c, ls=ls, lw=1.6)
        for c, ls in (("#999999", "-"), ("black", "-"), ("#1d6fa5", "--"))
    ]
    arrow_text = [
        "forward: A → B, B is made from A",
        "backward: A → B, B is made from A",
        "FlashAttention's backward recomputes: S from Q, K; P from S and lse",
    ]
    ax.legend(  # under the graph, in two columns: legible when projected
        handles,
        [text for *_, text in _GRAPH_STYLE.values()] + arrow_text,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=2,
        fontsize=12,
        frameon=False,
    )
    ax.set_xlim(-0.6, 7.0)
    ax.set_ylim(-2.0, 4.1)
    ax.set_axis_off()
    ax.set_title(
        "What the backward reads: dS needs P, dP and D; dQ and dK need dS", fontsize=14
    )
    return {
        "roles": {n: r for n, (*_, r) in _GRAPH_NODES.items()},
        "backward_edges": list(_GRAPH_BACKWARD),
        "recompute_edges": list(_GRAPH_RECOMPUTE),
    }
