"""Sliders for notebook 10: cache length and splits of flash-decoding; query heads per K/V head.

Taught in: notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.decoding import draw_decode_schedule, draw_gqa_intensity
from . import _ratio_words, interactive_figure

__all__ = ["decode_splits", "gqa_group"]


def _splits_summary(r: dict) -> str:
    fa2, fd = r["fa2"], r["flash_decoding"]
    return (
        f"M = {fd['M']:,}, splits = {fd['splits']}: {fd['busy']} of {fd['slots']} slots busy "
        f"(FA2: {fa2['busy']}); {fd['ticks']} ticks against {fa2['ticks']}, "
        + _ratio_words(fd["speedup"], "fewer")
    )


def decode_splits(M: int = 32768, splits: int = 8) -> ipywidgets.interactive:
    """Sliders over the cache length M and the number of splits; `.result` holds both schedules of `lab.decode_schedule`.

    Taught in: notebooks/10_decoding.ipynb
    """
    return interactive_figure(
        draw_decode_schedule,
        reuse="axes",
        summary=_splits_summary,
        M=ipywidgets.SelectionSlider(
            options=[2**p for p in range(10, 20)],
            value=M,
            description="cache M",
            continuous_update=False,
        ),
        splits=ipywidgets.SelectionSlider(
            options=[1, 2, 4, 8, 16, 17, 24, 28, 29, 32, 33, 34, 64, 128, 255, 256],
            value=splits,
            description="splits",
            continuous_update=False,
        ),
    )


def _group_summary(r: dict) -> str:
    return (
        f"G = {r['group']} query heads per K/V head ({r['kv_heads']} K/V heads): "
        f"{r['intensity']:.1f} FLOP/B (H100 ridge {r['ridge']:.0f}); {r['kib_per_token']:,.0f} KiB per token"
    )


def gqa_group(group: int = 4, itemsize: int = 2) -> ipywidgets.interactive:
    """Sliders over the group size G (query heads per K/V head) and the cache's bytes per element (4: float32,
    2: 16-bit, 1: 8-bit); `.result` holds the intensity and cache bytes.

    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    return interactive_figure(
        draw_gqa_intensity,
        reuse="axes",
        summary=_group_summary,
        group=ipywidgets.SelectionSlider(
            options=[1, 2, 4, 8, 16, 32],
            value=group,
            description="G",
            continuous_update=False,
        ),
        itemsize=ipywidgets.SelectionSlider(
            options=[4, 2, 1],
            value=itemsize,
            description="bytes/element",
            continuous_update=False,
        ),
    )
