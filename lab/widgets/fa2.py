"""Sliders for notebook 06: the operations of fa1 and fa2 and their time at the A100's peak rates.

The slider also runs the chosen variant of the numpy kernel under `lab.trace.record()` at N = min(N, 256)
(the same d, Br, Bc and causal) and reports whether its op counts equal the formula.

Taught in: notebooks/06_flashattention2.ipynb
"""

from __future__ import annotations

import ipywidgets

from ..figures.fa2 import draw_op_counts
from . import interactive_figure
from .tiling import CHECK_N, _instrumented, _instrumented_sliders

__all__ = ["fa_variants"]


def fa_variants(
    N: int = 512,
    d: int = 64,
    block_q: int = 64,
    block_k: int = 64,
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
        **_instrumented_sliders(N, d, block_q, block_k),
        variant=ipywidgets.ToggleButtons(
            options=["fa1", "fa2"], value=variant, description="variant"
        ),
        causal=ipywidgets.Checkbox(value=causal, description="causal"),
    )
