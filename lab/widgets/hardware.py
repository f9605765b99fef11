"""Slider for notebook 08: the Python overhead of a tile loop against its block size, N and the cost of one op."""

from __future__ import annotations

import ipywidgets

from ..figures.hardware import draw_loop_overhead
from . import interactive_figure


def loop_overhead_explorer(
    N: int = 4096, block: int = 256, us_per_op: float = 10.0, factor: int = 2
) -> ipywidgets.interactive:
    """Sliders over N, the query block Br, Bc = Br or 2·Br (`factor`; 2 is the CPU default's shape,
    (256, 512)) and µs per op; `.result` holds `lab.loop_overhead` at those settings.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    return interactive_figure(
        lambda N, block, factor, us_per_op, ax=None: draw_loop_overhead(
            N, us_per_op, block=block, block_k=factor * block, ax=ax
        ),
        reuse=True,
        summary=lambda r: (
            f"N = {r['N']:,}, Br = {r['block']}, Bc = {r['block_k']}: {r['steps']:,} tile steps, Python overhead "
            f"{r['overhead_ms']:,.1f} ms = {100 * r['overhead_fraction']:.1f}% of the forward"
        ),
        N=ipywidgets.SelectionSlider(
            options=[2**p for p in range(10, 15)], value=N, description="N"
        ),
        block=ipywidgets.SelectionSlider(
            options=[2**p for p in range(4, 13)], value=block, description="Br"
        ),
        factor=ipywidgets.ToggleButtons(
            options=[("Bc = Br", 1), ("Bc = 2·Br", 2)], value=factor, description="Bc"
        ),
        us_per_op=ipywidgets.SelectionSlider(
            options=[1.0, 3.0, 10.0, 30.0, 100.0],
            value=us_per_op,
            description="µs per op",
        ),
    )
