"""Sliders for notebook 07: what a format does to the P tiles, and to the running sum l.

Taught in: notebooks/07_precision.ipynb, notebooks/07_precision_in_attention.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.precision import FORMAT_LABELS, draw_accumulation, draw_p_explorer
from ..notebook import measured
from . import interactive_figure

__all__ = ["p_format_explorer", "accumulation_explorer"]

_P_FORMATS = ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
_SUM_FORMATS = ["tf32", "bf16", "fp16", "fp8_e4m3"]


def _p_summary(r: dict) -> str:
    values = "v" if r["v_shift"] == 0 else f"v + {r['v_shift']:g}"
    return (
        f"{FORMAT_LABELS[r['fmt']]}, M = {r['M']:,} keys, std(s) = {r['spread']:g}, "
        f"Bc = {r['block_k']}, values {values}: relative error of o {measured(r['rel_error'])}; "
        f"{measured(100 * r['flushed'], '.1f')}% of the P entries flushed to 0 "
        f"(holding {measured(100 * r['mass_lost'], '.2g')}% of the softmax mass), "
        f"{measured(100 * r['zero_fp32'], '.1f')}% already 0 in float32"
    )


def p_format_explorer(
    fmt: str = "fp8_e4m3",
    M: int | None = 4096,
    spread: float = 4.0,
    block_k: int = 64,
    v_shift: float = 0.0,
    *,
    N: int | None = None,
) -> ipywidgets.interactive:
    """Sliders over format, M (keys), score spread, Bc (`block_k`) and the values' mean (`v_shift`: v or v + 1);
    `.result` holds the error of o and the shares of P flushed and already 0 in float32. `N` is the older
    keyword for `M`.

    Taught in: notebooks/07_precision.ipynb
    """
    if N is not None:
        if M not in (None, 4096):
            raise ValueError("pass the number of keys once, as M, got both M and N")
        M = N
    return interactive_figure(
        draw_p_explorer,
        reuse=True,
        summary=_p_summary,
        fmt=ipywidgets.ToggleButtons(
            options=[(FORMAT_LABELS[f], f) for f in _P_FORMATS],
            value=fmt,
            description="format",
        ),
        M=ipywidgets.SelectionSlider(
            options=[2**p for p in range(8, 15)],
            value=M,
            description="M (keys)",
            continuous_update=False,
        ),
        spread=ipywidgets.SelectionSlider(
            options=[
                1.0,
                2.0,
                3.0,
                4.0,
                8.0,
                10.0,
                16.0,
                30.0,
            ],  # with the heat map's 3 and 10
            value=spread,
            description="std(s)",
            continuous_update=False,
        ),
        block_k=ipywidgets.SelectionSlider(
            options=[16, 32, 64, 128, 256],
            value=block_k,
            description="Bc (block_k)",
            continuous_update=False,
        ),
        v_shift=ipywidgets.ToggleButtons(
            options=[("v (mean 0)", 0.0), ("v + 1 (mean 1)", 1.0)],
            value=float(v_shift),
            description="values",
        ),
    )


def _sum_draw(fmt: str, M: int, block: int, ax=None) -> dict:
    result = draw_accumulation(
        M, block, formats=tuple(dict.fromkeys(("fp32", fmt, "fp16"))), ax=ax
    )
    return {**result, "fmt": fmt}


def _sum_summary(r: dict) -> str:
    fmt = r["fmt"]
    return (
        f"{FORMAT_LABELS[fmt]}, M = {r['M']:,} keys: one at a time, l is off by {measured(100 * r['seq'][fmt], '.2g')}%; "
        f"in blocks of Bc = {r['block']}, by {measured(100 * r['blocked'][fmt], '.2g')}% (FP32: {measured(r['seq']['fp32'])})"
    )


def accumulation_explorer(
    fmt: str = "bf16", M: int | None = 16384, block: int = 64, *, N: int | None = None
) -> ipywidgets.interactive:
    """Sliders over the format of the sum, M (keys) and Bc (keyword `block`); `.result` holds the final relative
    errors of l. `N` is the older keyword for `M`.

    Taught in: notebooks/07_precision.ipynb
    """
    if N is not None:
        if M not in (None, 16384):
            raise ValueError("pass the number of keys once, as M, got both M and N")
        M = N
    return interactive_figure(
        _sum_draw,
        reuse=True,
        summary=_sum_summary,
        fmt=ipywidgets.ToggleButtons(
            options=[(FORMAT_LABELS[f], f) for f in _SUM_FORMATS],
            value=fmt,
            description="format",
        ),
        M=ipywidgets.SelectionSlider(
            options=[2**p for p in range(8, 15)],
            value=M,
            description="M (keys)",
            continuous_update=False,
        ),
        block=ipywidgets.SelectionSlider(
            options=[1, 4, 16, 64, 256, 1024],
            value=block,
            description="Bc (block)",
            continuous_update=False,
        ),
    )
