"""Sliders for notebook 11: the tiles of a sliding window (empty, partial, full) as the window and the block size move.

The callback also runs the numpy kernel at the chosen setting and reports whether the tiles it computed
equal `block_mask`'s non-empty count.

Taught in: notebooks/11_masks_and_score_mods.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.masks import draw_window_tiles
from . import interactive_figure

__all__ = ["mask_tiles"]


def _summary(r: dict) -> str:
    docs = " ∧ 4 documents" if r["documents"] else ", no documents"
    return (
        f"window {r['window']}{docs}, {r['block']}×{r['block']} tiles: {r['empty']} empty, {r['partial']} partial, "
        f"{r['full']} full; computed by the kernel (stats): {r['kernel_tiles']}, non-empty in block_mask: "
        f"{r['tiles']}, equal: {r['kernel_tiles'] == r['tiles']}"
    )


def mask_tiles(
    N: int = 256, window: int = 64, block: int = 32, documents: bool = False
) -> ipywidgets.interactive:
    """Sliders over the window (keys each query sees), the block size and packed documents; `.result` holds the tile counts.

    Taught in: notebooks/11_masks_and_score_mods.ipynb
    """
    return interactive_figure(
        lambda window, block, documents, ax=None: draw_window_tiles(
            N, window, block, documents, ax=ax
        ),
        reuse=True,
        summary=_summary,
        window=ipywidgets.SelectionSlider(
            options=[1, 8, 16, 32, 48, 64, 96, 128, 192, 256],
            value=window,
            description="window",
            continuous_update=False,
        ),
        block=ipywidgets.SelectionSlider(
            options=[8, 16, 32, 64, 128],
            value=block,
            description="block",
            continuous_update=False,
        ),
        documents=ipywidgets.Checkbox(value=documents, description="∧ 4 documents"),
    )
