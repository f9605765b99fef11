"""Slider for notebook 04: merges of partial states against the number of chunks and the order."""

from __future__ import annotations

import ipywidgets

from ..figures.merge import draw_merge_orders
from ..merge import ORDERS
from ..notebook import measured
from . import interactive_figure

__all__ = ["merge_order_explorer"]


def merge_order_explorer(
    splits: int = 8, order: str = "tree"
) -> ipywidgets.interactive:
    """Sliders over the number of chunks and the merge order; `.result` holds the depth and the error of every order."""
    return interactive_figure(
        draw_merge_orders,
        reuse="axes",
        summary=lambda r: (
            (
                f"{r['splits']} chunks merged {r['order']}: depth {r['depth']}; "
                if r["splits"] > 1
                else "1 chunk: nothing to merge, depth 0; "
            )
            + ", ".join(f"{k} {measured(v)}" for k, v in r["errors"].items())
            + f"  (all < 1e-12: {max(r['errors'].values()) < 1e-12})"
        ),
        splits=ipywidgets.IntSlider(value=splits, min=1, max=32, description="splits"),
        order=ipywidgets.ToggleButtons(
            options=list(ORDERS), value=order, description="order"
        ),
    )
