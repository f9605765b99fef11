"""Sliders for notebooks 03-04: the one-pass state against block size and length; merges against splits and order."""

from __future__ import annotations

import ipywidgets

from ..decoding import ORDERS
from ..figures.states import draw_merge_orders, draw_one_pass
from ..notebook import measured
from . import interactive_figure

__all__ = ["one_pass_explorer", "merge_order_explorer"]


def one_pass_explorer(M: int = 4096, block_k: int = 256) -> ipywidgets.interactive:
    """Sliders over the sequence length M and the key block size Bc; `.result` holds the traffic table and the errors."""
    return interactive_figure(
        draw_one_pass,
        summary=lambda r: (f"M = {r['M']:,}, Bc = {r['block_k']}: {r['blocks']} blocks, {r['rescalings']} rescalings; "
                           f"largest |o - ref| of the three methods = {measured(r['max_err'])}  (< 1e-12: {r['max_err'] < 1e-12})"),
        M=ipywidgets.SelectionSlider(options=[2**p for p in range(8, 15)], value=M, description="M"),
        block_k=ipywidgets.SelectionSlider(options=[2**p for p in range(4, 11)], value=block_k, description="Bc"),
    )


def merge_order_explorer(splits: int = 8, order: str = "tree") -> ipywidgets.interactive:
    """Sliders over the number of chunks and the merge order; `.result` holds the depth and the error of every order."""
    return interactive_figure(
        draw_merge_orders,
        summary=lambda r: (f"{r['splits']} chunks merged {r['order']}: depth {r['depth']}; "
                           + ", ".join(f"{k} {measured(v)}" for k, v in r["errors"].items())
                           + f"  (all < 1e-12: {max(r['errors'].values()) < 1e-12})"),
        splits=ipywidgets.IntSlider(value=splits, min=1, max=32, description="splits"),
        order=ipywidgets.ToggleButtons(options=list(ORDERS), value=order, description="order"),
    )
