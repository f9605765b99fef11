"""Sliders for notebook 00: where standard attention's time goes on a GPU's roofline, and the bytes of its N×N matrices.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import ipywidgets
import matplotlib.pyplot as plt

from ..figures.memory import draw_attention_roofline
from ..hardware import CHIPS
from ..memory import attention_traffic
from . import interactive_figure

__all__ = ["roofline_explorer"]


def _roofline_summary(r: dict) -> str:
    rows = {row["piece"]: row for row in r["rows"]}
    soft = rows["P = softmax(S)"]
    return (
        f"{r['chip']}, d = {r['d']}: softmax {soft['op_intensity']:.2f} operations/B against a ridge of "
        f"{r['ridge']:.0f} FLOP/B; "
        f"standard {rows['standard, total']['time'] * 1e6:.1f} µs per head ({soft['time'] / rows['standard, total']['time']:.0%} "
        f"of it the softmax), fused {rows['fused: Q, K, V in, O out']['time'] * 1e6:.1f} µs: {r['speedup']:.1f}× less"
    )


def roofline_explorer(
    chip_name: str = "A100", d: int = 64, softmax_accesses: int = 2
) -> ipywidgets.interactive:
    """A chip, the head dimension d and the softmax's accesses per element; the roofline and the time of each piece redraw.

    `.result` holds `draw_attention_roofline`'s rows. Taught in: notebooks/00_the_memory_wall.ipynb
    """
    ds, accesses = [32, 64, 128, 256], [2, 4]

    def draw(chip_name, d, softmax_accesses, ax=None):
        result = draw_attention_roofline(
            chip_name, d, softmax_accesses=softmax_accesses, axes=ax
        )
        # one time axis for every d and softmax on this chip: the bars move against a fixed scale
        # (and the slider redraws only the bars, not the axes)
        longest = max(
            r["time"]
            for dd in ds
            for a in accesses
            for r in attention_traffic(
                4096, d=dd, itemsize=2, chip_name=chip_name, softmax_accesses=a
            )
        )
        (ax if ax is not None else plt.gcf().axes)[1].set_xlim(0, longest * 1e6 * 1.6)
        return result

    return interactive_figure(
        draw,
        summary=_roofline_summary,
        reuse=True,
        chip_name=ipywidgets.ToggleButtons(
            options=list(CHIPS), value=chip_name, description="chip"
        ),
        d=ipywidgets.SelectionSlider(
            options=ds, value=d, description="d", continuous_update=False
        ),
        softmax_accesses=ipywidgets.ToggleButtons(
            options=[("2 (read S, write P)", 2), ("4 (three passes, 01)", 4)],
            value=softmax_accesses,
            description="softmax",
        ),
    )
