"""Sliders for notebook 06: the operations of fa1 and fa2 and their time at the A100's peak rates.

The slider also runs the chosen variant of the numpy kernel under `lab.trace.record()` at N = min(N, 256)
(the same d, Br, Bc and causal) and reports whether its op counts equal the formula.

`wave_explorer` fills the A100's SMs with FA1's and FA2's thread blocks over time, wave by wave.

Taught in: notebooks/06_flashattention2.ipynb, notebooks/06_flashattention2_parallelism.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.fa2 import draw_op_counts, draw_wave_timeline
from . import interactive_figure
from .tiling import CHECK_N, _instrumented, _instrumented_sliders

__all__ = ["fa_variants", "wave_explorer"]


def fa_variants(
    N: int = 4096,
    d: int = 128,
    block_q: int = 128,
    block_k: int = 128,
    variant: str = "fa2",
    causal: bool = False,
) -> ipywidgets.interactive:
    """Sliders over N, d, Br, Bc, the variant and causal; `.result` holds op counts (formula and instrumented) and A100 time shares (exponentials at the special-function rate).

    The instrumented run (`measured`, against `formula`) is at N = `checked_N` = min(N, 256).
    Taught in: notebooks/06_flashattention2.ipynb
    """

    def draw(N, d, block_q, block_k, variant, causal, ax=None):
        result = draw_op_counts(
            N, d, block_q, block_k, causal, ax=ax, highlight=variant
        )
        n = min(N, CHECK_N)
        rec, formula = _instrumented(n, d, block_q, block_k, causal, variant, "float32")
        return {
            **result,
            "variant": variant,
            "checked_N": n,
            "measured": dict(rec.op_counts),
            "formula": dict(formula.op_counts),
            "equal": rec == formula,
        }

    return interactive_figure(
        draw,
        reuse=True,
        summary=lambda r: (
            f"{r['variant']}: instrumented run at N = {r['checked_N']}: exp/mul/div = "
            + "/".join(f"{r['measured'].get(k, 0):,}" for k in ("exp", "mul", "div"))
            + f", equal to the formula: {r['equal']}; A100 time outside matmuls: "
            f"fa1 {r['share']['fa1']:.0%}, fa2 {r['share']['fa2']:.0%}"
        ),
        **_variant_sliders(N, d, block_q, block_k),
        variant=ipywidgets.ToggleButtons(
            options=["fa1", "fa2"], value=variant, description="variant"
        ),
        causal=ipywidgets.Checkbox(value=causal, description="causal"),
    )


def _variant_sliders(N, d, block_q, block_k) -> dict:
    """The instrumented sliders, with N up to 4096 (the counts are formulas; the run stays at N <= 256)."""
    sliders = _instrumented_sliders(min(N, 2048), d, block_q, block_k)
    sliders["N"] = _choice([128, 256, 512, 1024, 2048, 4096], N, "N = M")
    return sliders


def _choice(options, value, description):
    return ipywidgets.SelectionSlider(
        options=options, value=value, description=description, continuous_update=False
    )


def wave_explorer(
    B: int = 8, H: int = 16, N: int = 2048, block_q: int = 128
) -> ipywidgets.interactive:
    """Sliders over the batch B, the heads H, the sequence length N and Br; `.result` holds FA1's and FA2's
    thread blocks, waves, SM use and finish time on the A100 (`lab.figures.fa2.draw_wave_timeline`).

    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    return interactive_figure(
        draw_wave_timeline,
        reuse="axes",
        summary=lambda r: (
            f"FA1: {r['fa1']['blocks']:,} thread blocks, SM use {r['fa1']['use']:.1%}, "
            f"done at {r['fa1']['done']:,g}; FA2: {r['fa2']['blocks']:,} (T_r = {r['Tr']:,} "
            f"a head), SM use {r['fa2']['use']:.1%}, done at {r['fa2']['done']:,g}"
        ),
        B=_choice([1, 2, 4, 8, 16, 32], B, "batch B"),
        H=_choice([1, 4, 8, 16, 32, 64], H, "heads H"),
        N=_choice([2**p for p in range(9, 18)], N, "N"),
        block_q=_choice([64, 128], block_q, "Br"),
    )
