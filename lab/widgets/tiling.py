"""Sliders for notebook 05: fill the score matrix tile by tile, walk the tile loop, size a tile step, count HBM
bytes. Notebook 06's op-count slider is in `lab.widgets.fa2`.

The traffic slider draws the formula's bytes at the chosen setting and confirms them with the numpy
kernel under `lab.trace.record()` at the same d, Br, Bc, dtype and causal on N = min(N, 256) (the formula
is exact at every N; the confirmation runs small enough to answer while the slider moves).

Taught in: notebooks/05_tiling.ipynb
"""

from __future__ import annotations

import functools

import ipywidgets
import numpy as np

from .. import trace
from ..attention import flash_attention_numpy
from ..figures.tiling import (
    draw_footprint,
    draw_hbm_traffic,
    draw_tile_fill,
    draw_tile_grid,
)
from ..tiling import flash_counts, standard_traffic, theorem2_bytes, tile_counts
from . import _block_sliders, _ratio_words, interactive_figure

__all__ = ["tile_fill", "tile_walk", "block_footprint", "io_traffic"]

_BLOCKS = [8, 16, 32, 64, 128, 256]
CHECK_N = (
    256  # the instrumented run's N (at most): a float16 run at N = 2048 takes seconds
)


def _instrumented_sliders(N, d, block_q, block_k) -> dict:
    """N, d, Br and Bc for the sliders that run the instrumented numpy kernel (`io_traffic`, `fa_variants`)."""
    return dict(
        N=ipywidgets.SelectionSlider(
            options=[128, 256, 512, 1024, 2048], value=N, description="N = M"
        ),
        d=ipywidgets.SelectionSlider(
            options=[16, 32, 64, 128], value=d, description="d"
        ),
        **_block_sliders(_BLOCKS[1:], block_q, block_k),
    )


@functools.lru_cache(maxsize=512)
def _instrumented(
    N: int, d: int, block_q: int, block_k: int, causal: bool, variant: str, dtype: str
):
    """Counts of one instrumented run of `flash_attention_numpy` on seeded (N, d) inputs, and the formula's (kept per setting)."""
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((N, d)).astype(dtype) for _ in range(3)
    )  # (N, d) each
    with trace.record() as rec:
        flash_attention_numpy(
            q, k, v, block_q=block_q, block_k=block_k, causal=causal, variant=variant
        )
    formula = flash_counts(
        N,
        N,
        d,
        block_q=block_q,
        block_k=block_k,
        causal=causal,
        variant=variant,
        itemsize=np.dtype(dtype).itemsize,
    )
    return rec, formula


def tile_fill(
    N: int = 12,
    M: int = 16,
    block_q: int = 4,
    block_k: int = 4,
    i: int = 1,
    j: int = 2,
    causal: bool = False,
) -> ipywidgets.interactive:
    """Sliders over the step (query block i, key block j), Br, Bc and causal; `.result` holds each row's (m, l) after that tile.

    The i and j sliders' ranges follow Tr and Tc. N and M are fixed when the slider is built.
    Taught in: notebooks/05_tiling.ipynb
    """
    blocks = [2, 3, 4, 6, 8]
    controls = dict(
        i=ipywidgets.IntSlider(
            value=i, min=0, max=10_000, description="i (query block)"
        ),
        j=ipywidgets.IntSlider(value=j, min=0, max=10_000, description="j (key block)"),
        **_block_sliders(blocks, block_q, block_k),
        causal=ipywidgets.Checkbox(value=causal, description="causal"),
    )
    style = {"description_width": "initial"}
    for w in controls.values():
        w.style = style

    def resize(_=None):
        controls["i"].max = -(-N // controls["block_q"].value) - 1
        controls["j"].max = -(-M // controls["block_k"].value) - 1

    resize()
    for name in ("block_q", "block_k"):
        controls[name].observe(resize, names="value")
    return interactive_figure(
        lambda i, j, block_q, block_k, causal, ax=None: draw_tile_fill(
            N, M, block_q, block_k, i, j, causal, ax=ax
        ),
        reuse=True,
        summary=lambda r: (
            f"tile ({r['tile'][0]}, {r['tile'][1]}) of {r['Tr']} × {r['Tc']}: rows "
            f"{r['rows'][0]}-{r['rows'][1] - 1} against keys {r['keys'][0]}-{r['keys'][1] - 1}"
            + ("" if r["computed"] else " (skipped: every pair hidden)")
        ),
        **controls,
    )


def tile_walk(
    N: int = 200,
    block_q: int = 64,
    block_k: int = 32,
    causal: bool = True,
    step: int = 1,
    variant: str = "fa2",
) -> ipywidgets.interactive:
    """Sliders over N, Br, Bc, causal, loop order and the step; `.result` holds the tile counts and the tile on chip.

    The step slider counts from 1 (the first tile) to the number of computed tiles, and its range follows it.
    Taught in: notebooks/05_tiling.ipynb
    """
    controls = dict(
        N=ipywidgets.IntSlider(value=N, min=16, max=512, step=8, description="N = M"),
        **_block_sliders(_BLOCKS, block_q, block_k),
        causal=ipywidgets.Checkbox(value=causal, description="causal"),
        variant=ipywidgets.ToggleButtons(
            options=["fa2", "fa1"], value=variant, description="loop"
        ),
        step=ipywidgets.IntSlider(value=step, min=1, max=10_000, description="step"),
    )

    def resize(_=None):
        c = {name: w.value for name, w in controls.items()}
        computed = tile_counts(c["N"], c["N"], c["block_q"], c["block_k"], c["causal"])[
            "computed"
        ]
        controls["step"].max = max(computed, 1)

    resize()
    for name in ("N", "block_q", "block_k", "causal"):
        controls[name].observe(resize, names="value")
    return interactive_figure(
        draw_tile_grid,
        reuse=True,
        summary=lambda r: (
            f"{r['Tr']} × {r['Tc']} tiles, {r['computed']} computed, {r['skipped']} skipped "
            f"({r['fraction']:.0%} computed); last tile {r['partial_rows'] or r['Br']} × "
            f"{r['partial_cols'] or r['Bc']}; step {r['step']} of {r['steps']}: tile {r['tile']}"
        ),
        **controls,
    )


def block_footprint(
    d: int = 128,
    block_q: int = 128,
    block_k: int = 64,
    dtype: str = "float16",
    kv_stages: int = 1,
    warps: int = 4,
) -> ipywidgets.interactive:
    """Sliders over d, Br, Bc, the input dtype, the K/V stages and the warps; `.result` holds one step's registers and shared memory and which chips hold it.

    Taught in: notebooks/05_tiling.ipynb
    """
    options = [16, 32, 64, 128, 256, 512]

    def draw(d, block_q, block_k, dtype, kv_stages, warps, ax=None):
        return draw_footprint(
            d,
            block_q,
            block_k,
            itemsize=np.dtype(dtype).itemsize,
            kv_stages=kv_stages,
            blocks=tuple(options),
            warps=warps,
            ax=ax,
        )

    return interactive_figure(
        draw,
        reuse=True,
        summary=lambda r: (
            f"registers {r['registers']['total'] / 1024:,.1f} of {r['register_budget'] / 1024:g} KiB, shared memory "
            f"{r['shared']['total'] / 1024:,.1f} KiB; fits "
            + (
                ", ".join(name for name, ok in r["fits"].items() if ok)
                or "neither chip"
            )
        ),
        d=ipywidgets.SelectionSlider(
            options=[32, 64, 128, 256], value=d, description="d"
        ),
        **_block_sliders(options, block_q, block_k),
        dtype=ipywidgets.ToggleButtons(
            options=["float16", "float32"], value=dtype, description="inputs"
        ),
        kv_stages=ipywidgets.ToggleButtons(
            options=[1, 2], value=kv_stages, description="K/V stages"
        ),
        warps=ipywidgets.ToggleButtons(
            options=[4, 8], value=warps, description="warps"
        ),
    )


@functools.cache
def _traffic_limits(d: int, itemsize: int):
    """`draw_hbm_traffic`'s axes at head size `d` and `itemsize`, widened over N, the blocks and causal.

    One frame per (d, inputs), so moving N, Br, Bc or causal moves only the curves. Bytes grow with
    N, so the extremes lie at the ends of each panel's N: left, the slider's smallest N and 2^16
    (every N draws the curves out to it); right, the slider's smallest and largest N. The blocks
    and causal are searched. Right: every SRAM size (16 KiB to 1 MiB), Theorem 2's line through fa1.
    Computed once per (d, inputs), when the slider first shows it (a few hundred closed-form counts).
    """
    from ..tiling import fa_block_sizes

    Ns = _instrumented_sliders(1024, 64, 128, 128)["N"].options
    srams = [2**p * 1024 for p in range(4, 11)]
    ends = (
        min(Ns),
        2**16,
    )  # the left panel's smallest and largest N, whatever N is set
    left = [
        flash_counts(n, n, d, block_q=br, block_k=bc, variant=v, itemsize=itemsize,
                     causal=causal).total
        for n in ends for causal in (False, True) for v in ("fa1", "fa2")
        for br in _BLOCKS[1:] for bc in _BLOCKS[1:]
    ] + [standard_traffic(n, d=d, itemsize=itemsize).total for n in ends]  # fmt: skip
    right = []
    for N in (min(Ns), max(Ns)):  # the right panel is drawn at the slider's N
        for causal in (False, True):
            fa1 = [
                flash_counts(N, N, d, variant="fa1", itemsize=itemsize, causal=causal,
                             block_q=br, block_k=bc).total
                for br, bc in (fa_block_sizes(m, d, itemsize) for m in srams)
            ]  # fmt: skip
            theorem = [theorem2_bytes(N, d, m, itemsize) for m in srams]
            std = standard_traffic(N, d=d, itemsize=itemsize).total
            right += fa1 + [std] + [t * fa1[0] / theorem[0] for t in theorem]
    lo_hi = [  # (lo, hi) in MB, out to powers of two
        tuple(
            float(2.0 ** f(np.log2(g(v) / 1e6)))
            for f, g in ((np.floor, min), (np.ceil, max))
        )
        for v in (left, right)
    ]
    return ((min(Ns) / 1.25, 2**16 * 1.25), lo_hi[0]), lo_hi[1]


def io_traffic(
    N: int = 1024,
    d: int = 64,
    block_q: int = 128,
    block_k: int = 128,
    dtype: str = "float16",
    causal: bool = False,
) -> ipywidgets.interactive:
    """Sliders over N, d, Br, Bc, dtype, causal; `.result` holds the formula's HBM bytes and an instrumented run's.

    The instrumented run (`measured`, against `formula`) is at N = `checked_N` = min(N, 256).
    With causal the figure's tiled curves and the instrumented run skip the masked tiles.
    Taught in: notebooks/05_tiling_traffic.ipynb
    """

    def draw(N, d, block_q, block_k, dtype, causal, ax=None):
        result = draw_hbm_traffic(
            N,
            d,
            block_q,
            block_k,
            itemsize=np.dtype(dtype).itemsize,
            causal=causal,
            ax=ax,
            limits=_traffic_limits(d, np.dtype(dtype).itemsize),
        )
        n = min(N, CHECK_N)
        rec, formula = _instrumented(n, d, block_q, block_k, causal, "fa2", dtype)
        return {
            **result,
            "checked_N": n,
            "measured": rec.total,
            "formula": formula.total,
            "equal": rec == formula,
        }

    return interactive_figure(
        draw,
        reuse=True,
        summary=lambda r: (
            f"N = {r['N']}{', causal' if r['causal'] else ''}: standard {r['standard'] / 1e6:,.2f} MB, "
            f"fa2 {r['fa2'] / 1e6:,.2f} MB "
            f"({_ratio_words(r['ratio_fa2'])}); instrumented fa2 run at N = {r['checked_N']}: {r['measured']:,} B, "
            f"formula {r['formula']:,} B, equal: {r['equal']}"
        ),
        **_instrumented_sliders(N, d, block_q, block_k),
        dtype=ipywidgets.ToggleButtons(
            options=["float16", "float32"], value=dtype, description="inputs"
        ),
        causal=ipywidgets.Checkbox(value=causal, description="causal"),
    )
