"""Sliders for notebook 08: the Python overhead of a tile loop against its block size, N and the cost of one op;
how many programs of the Triton forward one SM holds, against its launch configuration."""

from __future__ import annotations

import ipywidgets

from ..figures.hardware import draw_loop_overhead, draw_occupancy
from . import interactive_figure


def loop_overhead_explorer(
    N: int = 4096,
    block: int = 256,
    us_per_op: float = 10.0,
    factor: int = 2,
    *,
    ops_per_step: int = 21,
    flops_per_s: float = 155e9,
) -> ipywidgets.interactive:
    """Sliders over N, the query block Br (16 to 1024, N's smallest), Bc = Br or 2·Br (`factor`; 2 is the CPU default's shape,
    (256, 512)) and µs per op; `.result` holds `lab.loop_overhead` at those settings. `ops_per_step`
    and `flops_per_s` are fixed, as in `draw_loop_overhead`: pass the same ones as its static figure
    (notebook 08 passes its counted ops and measured peak) and both show the same numbers.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    model = dict(ops_per_step=ops_per_step, flops_per_s=flops_per_s)
    return interactive_figure(
        lambda N, block, factor, us_per_op, ax=None: draw_loop_overhead(
            N, us_per_op, block=block, block_k=factor * block, ax=ax, **model
        ),
        reuse=True,
        summary=lambda r: (
            f"N = {r['N']:,}, Br = {r['block']}, Bc = {r['block_k']}: {r['steps']:,} tile steps, Python overhead "
            f"{r['overhead_ms']:,.1f} ms = {100 * r['overhead_fraction']:.1f}% of the forward"
        ),
        N=ipywidgets.SelectionSlider(
            options=[2**p for p in range(10, 15)], value=N, description="N"
        ),
        block=ipywidgets.SelectionSlider(
            options=[2**p for p in range(4, 11)], value=block, description="Br"
        ),  # up to N's smallest, 1024: a query block past N is the whole of Q
        factor=ipywidgets.ToggleButtons(
            options=[("Bc = Br", 1), ("Bc = 2·Br", 2)], value=factor, description="Bc"
        ),
        us_per_op=ipywidgets.SelectionSlider(
            options=[1.0, 3.0, 10.0, 30.0, 100.0],
            value=us_per_op,
            description="µs per op",
        ),
    )


def occupancy_explorer(
    Br: int = 128,
    Bc: int = 64,
    d: int = 64,
    num_stages: int = 2,
    num_warps: int = 4,
    dtype: str = "float16",
    chip: str = "A100",
    *,
    B: int = 4,
    H: int = 16,
    N: int = 4096,
) -> ipywidgets.interactive:
    """Sliders over the Triton forward's launch configuration (Br, Bc, d, num_stages, num_warps, dtype, chip) at
    B·H sequences-heads of N queries; `.result` holds `lab.occupancy.occupancy` at that setting.

    Taught in: notebooks/08_triton_kernel.ipynb
    """
    blocks = [16, 32, 64, 128, 256]
    return interactive_figure(
        lambda ax=None, **kw: draw_occupancy(**kw, B=B, H=H, N=N, ax=ax),
        reuse=True,
        summary=_occupancy_line,
        Br=ipywidgets.SelectionSlider(options=blocks, value=Br, description="Br"),
        Bc=ipywidgets.SelectionSlider(options=blocks, value=Bc, description="Bc"),
        d=ipywidgets.SelectionSlider(
            options=[32, 64, 128, 256], value=d, description="d"
        ),
        num_stages=ipywidgets.SelectionSlider(
            options=[1, 2, 3, 4, 5], value=num_stages, description="num_stages"
        ),
        num_warps=ipywidgets.SelectionSlider(
            options=[1, 2, 4, 8, 16], value=num_warps, description="num_warps"
        ),
        dtype=ipywidgets.ToggleButtons(
            options=["float16", "bfloat16", "float32"], value=dtype, description="dtype"
        ),
        chip=ipywidgets.ToggleButtons(
            options=["A100", "H100"], value=chip, description="chip"
        ),
    )


def _occupancy_line(r: dict) -> str:
    """The slider's summary: programs per SM, what bounds them, the waves of the grid (or why none fits)."""
    if not r["programs_per_sm"]:
        return (
            f"one program needs {r['shared_bytes'] / 1024:,.0f} KiB of shared memory, more than the "
            f"{r['shared_per_block'] / 1024:,.0f} KiB a program may take: Triton refuses the launch "
            "(OutOfResources)"
        )
    spills = ", registers spill" if r["spills"] else ""
    return (
        f"{r['programs_per_sm']} programs per SM (bound: {r['bound']}{spills}) x {r['sms']} SMs = "
        f"{r['in_flight']:,} in flight; grid {r['grid']:,} = {r['waves']} waves, the last "
        f"{100 * r['last_wave_fill']:.0f} % full"
    )
