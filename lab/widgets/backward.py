"""Sliders for notebook 09: the softmax's Jacobian of one row as its scores are scaled (09_backward); N, M,
block sizes and the causal mask of the tiled backward (09_tiled_backward).

Taught in: notebooks/09_backward.ipynb, notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.backward import draw_backward_tiles, draw_row_jacobian
from ..notebook import measured
from . import _block_sliders, interactive_figure

__all__ = ["backward_tiles", "jacobian_explorer"]


def _summary(r: dict) -> str:
    return (
        f"N = {r['N']}, M = {r['M']}, Br = {r['block_q']}, Bc = {r['block_k']}, "
        f"causal = {r['causal']}: {r['visited']} of {r['tiles']} tiles visited "
        f"({r['masked']} masked inside); beyond q, k, v: P + scale·q "
        f"{r['standard_bytes'] / 1024:,.0f} KiB, o + lse {r['flash_bytes'] / 1024:,.1f} KiB "
        f"({r['kept_ratio']:.1f}×); max |tiled − standard| at N = {r['checked_N']}, "
        f"M = {r['checked_M']}: {measured(r['max_err'])}  (< 1e-10: {r['max_err'] < 1e-10})"
    )


def backward_tiles(
    N: int = 192,
    block_q: int = 48,
    block_k: int = 64,
    causal: bool = True,
    M: int | None = 256,
) -> ipywidgets.interactive:
    """Sliders over N, M (None: N), Br, Bc and causal, starting at the static figure's setting; `.result` holds the tile counts, the bytes kept and the
    tiled backward's error.

    The tiled backward is checked against the standard one on `checked_N` = min(N, max(32, Br + Bc))
    queries (a block of each size, so a shorter last block where one is smaller) and `checked_M` keys,
    M − N held within ±checked_N / 2 (at most about 50 tiles, cached per setting), so that each move
    answers quickly. Taught in: notebooks/09_tiled_backward.ipynb
    """
    sizes = [8, 16, 32, 48, 64, 128]  # 48: the static figure's Br
    lengths = [64, 128, 192, 256, 384, 512]
    return interactive_figure(
        lambda N, M, block_q, block_k, causal, axes=None: draw_backward_tiles(
            N,
            block_q,
            block_k,
            causal,
            check_N=max(32, block_q + block_k),
            axes=axes,
            M=M,
        ),
        reuse="axes",
        summary=_summary,
        N=ipywidgets.SelectionSlider(
            options=lengths, value=N, description="N", continuous_update=False
        ),
        M=ipywidgets.SelectionSlider(
            options=lengths,
            value=N if M is None else M,
            description="M (keys)",
            continuous_update=False,
        ),
        **_block_sliders(sizes, block_q, block_k, continuous_update=False),
        causal=ipywidgets.Checkbox(value=causal, description="causal"),
    )


def jacobian_explorer(scale: float = 1.0) -> ipywidgets.interactive:
    """A slider over the scale of one row of 4 scores, (1, 2, 0.5, -1) times it: the row of P and its Jacobian
    $\\partial P_j / \\partial S_{j'}$ by finite steps (`lab.figures.backward.draw_row_jacobian`); `.result`
    holds P, J, its row sums and its largest entry.

    Taught in: notebooks/09_backward.ipynb
    """
    return interactive_figure(
        draw_row_jacobian,
        reuse="axes",
        summary=lambda r: (
            f"scores × {r['scale']:g}: largest P {max(r['p']):.3f}, largest |J| {r['largest']:.3f}; "
            f"every row of J sums to 0: {all(abs(x) < 1e-5 for x in r['row_sums'])}"
        ),
        scale=ipywidgets.SelectionSlider(
            options=[0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0],
            value=scale,
            description="scale",
        ),
    )
