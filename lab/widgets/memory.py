"""Slider for notebook 00: the bytes of standard attention's N×N matrices against N and dtype."""

from __future__ import annotations

import ipywidgets

from ..figures.memory import draw_memory_wall
from . import interactive_figure


def memory_wall(N: int = 4096, dtype: str = "float32") -> ipywidgets.interactive:
    """Sliders over N (a power of two) and dtype; `.result` holds the bytes of S and P at that N."""
    return interactive_figure(
        draw_memory_wall,
        summary=lambda r: (f"N = {r['N']:,}, {r['dtype']}: S and P take {r['bytes'] / 2**20:,.1f} MiB per head; "
                           f"the tiles of the flash kernel take {r['flash_bytes'] / 2**20:,.2f} MiB"),
        N=ipywidgets.SelectionSlider(options=[2**p for p in range(8, 18)], value=N, description="N"),
        dtype=ipywidgets.ToggleButtons(options=["float16", "float32", "float64"], value=dtype, description="dtype"),
    )
