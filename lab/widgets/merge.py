"""Slider for notebook 04: merges of partial states against the number of chunks and the order."""

from __future__ import annotations

import ipywidgets

from ..figures.merge import draw_merge_orders
from ..merge import ORDERS
from ..notebook import measured
from . import interactive_figure

__all__ = ["merge_order_explorer"]


def merge_order_explorer(
    splits: int = 8, order: str = "tree", dtype: str = "float64"
) -> ipywidgets.interactive:
    """Sliders over the number of chunks, the merge order and the states' dtype; `.result` holds the depth, the
    error of every order and `distinct`, the bit-different results of 10 runs of the chosen order."""

    def summary(r):
        if r["splits"] == 1:
            head = "1 chunk: nothing to merge, depth 0; "
        else:
            head = f"{r['splits']} chunks merged {r['order']} in {r['dtype']}: depth {r['depth']}; "
        tol = 1e-12 if r["dtype"] == "float64" else 1e-5
        return (
            head
            + f"{measured(r['distinct'], 'd')} bit-different results in {r['runs']} runs, "
            + f"spread {measured(r['spread'])}; errors "
            + ", ".join(f"{k} {measured(v)}" for k, v in r["errors"].items())
            + f"  (all < {tol:g}: {max(r['errors'].values()) < tol})"
        )

    return interactive_figure(
        draw_merge_orders,
        reuse="axes",
        summary=summary,
        splits=ipywidgets.IntSlider(value=splits, min=1, max=32, description="splits"),
        order=ipywidgets.ToggleButtons(
            options=list(ORDERS), value=order, description="order"
        ),
        dtype=ipywidgets.ToggleButtons(
            options=["float64", "float32"], value=dtype, description="states"
        ),
    )
