"""Slider for notebook 03: the one-pass state against the key block size Bc and the length M."""

from __future__ import annotations

import ipywidgets

from ..figures.one_pass import _count, draw_one_pass
from ..notebook import measured
from . import interactive_figure

__all__ = ["one_pass_explorer"]


def one_pass_explorer(M: int = 4096, block_k: int = 256) -> ipywidgets.interactive:
    """Sliders over the sequence length M and the key block size Bc; `.result` holds the traffic table and the errors.

    The summary names what changes with them: the blocks and rescales, the bytes each method holds on
    chip, and the exponentials the two-pass and one-pass methods take.
    """
    return interactive_figure(
        draw_one_pass,
        reuse="axes",
        summary=lambda r: (
            f"M = {r['M']:,}, Bc = {r['block_k']}: {_count(r['blocks'], 'block')}, "
            f"m grew at {_count(r['rescalings'], 'block')}; on chip: three-pass "
            f"{r['held']['three-pass']:,} B, one-pass {r['held']['one-pass']:,} B; "
            f"exponentials: two-pass {r['exponentials']['two-pass']:,}, "
            f"one-pass {r['exponentials']['one-pass']:,}; "
            f"largest |o - ref| {measured(r['max_err'])}"
        ),
        M=ipywidgets.SelectionSlider(
            options=[2**p for p in range(8, 15)], value=M, description="M"
        ),
        block_k=ipywidgets.SelectionSlider(
            options=[2**p for p in range(4, 11)], value=block_k, description="Bc"
        ),
    )
