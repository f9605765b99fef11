"""Sliders for notebooks 01 and 02: where naive softmax breaks per dtype, and the online softmax's trace.

Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.softmax import draw_online_trace, draw_overflow
from ..notebook import measured
from ..overflow import WORKS_EPS
from . import interactive_figure

__all__ = ["softmax_overflow", "online_softmax_trace"]


def _ok(v: dict, kind: str) -> str:
    err = v[f"{kind}_err"] / (v["tol"] / WORKS_EPS)  # in units of the format's eps
    return (
        f"✗ broken ({'inf' if err == float('inf') else f'{err:.3g}'} eps)"
        if v[f"{kind}_broken"]
        else "✓"
    )


def _overflow_summary(r: dict) -> str:
    parts = [
        f"{name}: naive {_ok(v, 'naive')}, safe {_ok(v, 'safe')}"
        for name, v in r["results"].items()
    ]
    return (
        f"s = {r['s']:g} (works: error within {WORKS_EPS}·eps of float64)  |  "
        + "  |  ".join(parts)
    )


def softmax_overflow(s: int = 100) -> ipywidgets.interactive:
    """A slider over the largest score s; `.result` holds the naive and safe softmax of (s, s−1, s−2, s−3) per dtype.

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """
    return interactive_figure(
        draw_overflow,
        reuse=True,
        summary=_overflow_summary,
        s=ipywidgets.IntSlider(
            value=s,
            min=-1000,
            max=1000,
            step=1,
            description="largest s",
            continuous_update=False,
            layout=ipywidgets.Layout(width="90%"),
        ),
    )


def _trace_summary(r: dict) -> str:
    return (
        f"block = {r['block']}, shift = {r['shift']:g}, scale = {r['scale']:g}: {len(r['trace']['block'])} block{'s' * (len(r['trace']['block']) > 1)}, "
        f"{r['rescales']} rescales; final m = {r['m']:.3f}, l = {r['l']:.4f}; "
        f"max |online − safe| = {measured(r['max_abs_diff'])}  (< 1e-12: {r['max_abs_diff'] < 1e-12})"
    )


def online_softmax_trace(
    block: int = 8, shift: float = 0.0, scale: float = 1.0
) -> ipywidgets.interactive:
    """Sliders over the block size and the data (x = shift + scale·z); `.result` holds the trace and max |online − safe|.

    Taught in: notebooks/02_online_softmax.ipynb
    """
    return interactive_figure(
        draw_online_trace,
        reuse="axes",
        summary=_trace_summary,
        block=ipywidgets.IntSlider(
            value=block, min=1, max=70, description="block", continuous_update=False
        ),
        shift=ipywidgets.FloatSlider(
            value=shift,
            min=-1000.0,
            max=1000.0,
            step=10.0,
            description="shift",
            continuous_update=False,
        ),
        scale=ipywidgets.FloatSlider(
            value=scale,
            min=0.25,
            max=30.0,
            step=0.25,
            description="scale",
            continuous_update=False,
        ),
    )
