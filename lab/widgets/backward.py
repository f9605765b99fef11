"""Slider for notebook 09: N, M, block sizes and the causal mask of the tiled backward.

Taught in: notebooks/09_tiled_backward.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.backward import draw_backward_tiles
from ..notebook import measured
from . import _block_sliders, interactive_figure

__all__ = ["backward_tiles"]


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
