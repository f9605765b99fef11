"""Sliders for notebook 00: where standard attention's time goes on a GPU's roofline, and the bytes of its N×N matrices.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.memory import draw_attention_roofline
from ..hardware import CHIPS, chip
from ..memory import attention_traffic
from . import interactive_figure

__all__ = ["roofline_explorer"]

_DS, _ACCESSES, _N = (32, 64, 128, 256), (2, 4), 4096


def _roofline_summary(r: dict) -> str:
    rows = {row["piece"]: row for row in r["rows"]}
    soft = rows["P = softmax(S)"]
    return (
        f"{r['chip']}, d = {r['d']}: softmax {soft['op_intensity']:.2f} operations/B against a ridge of "
        f"{r['ridge']:.0f} FLOP/B; "
        f"standard {rows['standard, total']['time'] * 1e6:.1f} µs per head ({soft['time'] / rows['standard, total']['time']:.0%} "
        f"of it the softmax), fused {rows['fused: Q, K, V in, O out']['time'] * 1e6:.1f} µs: {r['speedup']:.1f}× less"
    )


def frame_limits() -> tuple[tuple[float, float], tuple[float, float]]:
    """The slider's two fixed ranges, the same for every chip, d and count of accesses: the roofline's
    rate axis (TFLOP/s) and the time axis (µs).

    One frame for every setting: an update redraws the points and bars only (no axes, ticks or legend
    frame are rendered again), and the bars of two chips compare against one scale.
    """
    top = max(chip(name)["matmul_flops"] for name in CHIPS) / 1e12 * 30
    longest = max(
        r["time"]
        for name in CHIPS
        for d in _DS
        for a in _ACCESSES
        for r in attention_traffic(
            _N, d=d, itemsize=2, chip_name=name, softmax_accesses=a
        )
    )
    return (0.1, top), (0.0, longest * 1e6 * 1.6)


def roofline_explorer(
    chip_name: str = "A100", d: int = 64, softmax_accesses: int = 2
) -> ipywidgets.interactive:
    """A chip, the head dimension d and the softmax's accesses per element; the roofline and the time of each piece redraw.

    `.result` holds `draw_attention_roofline`'s rows. Both axes keep one range for every setting
    (`frame_limits`), so a move redraws the content over a frame rendered once.
    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    rates, times = frame_limits()  # computed once, at build

    def draw(chip_name, d, softmax_accesses, ax=None):
        result = draw_attention_roofline(
            chip_name, d, N=_N, softmax_accesses=softmax_accesses, axes=ax
        )
        if ax is None:  # the first drawing made the figure: its two Axes
            import matplotlib.pyplot as plt

            ax = plt.gcf().axes[:2]
        roof, bars = ax
        roof.set_ylim(*rates)
        bars.set_xlim(*times)
        roof.fixed_limits, bars.fixed_limits = "y", "x"
        return result

    return interactive_figure(
        draw,
        summary=_roofline_summary,
        reuse=True,
        chip_name=ipywidgets.ToggleButtons(
            options=list(CHIPS), value=chip_name, description="chip"
        ),
        d=ipywidgets.SelectionSlider(
            options=list(_DS), value=d, description="d", continuous_update=False
        ),
        softmax_accesses=ipywidgets.ToggleButtons(
            options=[("2 (read S, write P)", 2), ("4 (three passes, 01)", 4)],
            value=softmax_accesses,
            description="softmax",
        ),
    )
