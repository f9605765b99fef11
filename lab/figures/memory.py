"""Figures for notebook 00: the memory wall of standard attention.

Taught in: notebooks/00_the_memory_wall.ipynb
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from ..tiling import step_footprint
from ..memory import attention_bytes

__all__ = ["draw_memory_wall", "flash_tile_bytes"]


def flash_tile_bytes(d: int = 64, block_q: int = 64, block_k: int = 64, itemsize: int = 4) -> int:
    """Working set of one tile step of the flash kernel (`lab.step_footprint`), accumulators at float32 or wider."""
    return step_footprint(d, block_q, block_k, itemsize=itemsize, acc_itemsize=max(4, itemsize))["total"]


def _human(mib: float, _pos=None) -> str:
    """Axis label for a size given in MiB: KiB, MiB, GiB or TiB."""
    for unit, scale in (("TiB", 2**20), ("GiB", 2**10), ("MiB", 1), ("KiB", 2**-10)):
        if mib >= scale:
            return f"{mib / scale:g} {unit}"
    return f"{mib * 2**20:g} B"


def draw_memory_wall(N: int, dtype: str = "float32", d: int = 64, Ns=None, ax=None) -> dict:
    """Bytes of S and P ($2N^2$·itemsize) against N, log-log, with the flash kernel's tile footprint; marks N."""
    itemsize = np.dtype(dtype).itemsize
    Ns = np.array([2**p for p in range(8, 18)] if Ns is None else Ns)
    if ax is None:
        _, ax = plt.subplots()
    std = [attention_bytes(int(n), itemsize=itemsize) / 2**20 for n in Ns]
    flash = flash_tile_bytes(d, itemsize=itemsize) / 2**20
    ax.loglog(Ns, std, "o-", base=2, label=f"standard: S and P, 2·N²·{itemsize} B")
    ax.axhline(flash, color="C2", ls="--", label=f"flash: one 64×64 tile step ({flash * 1024:.0f} KiB)")
    for gib in (16, 80):
        ax.axhline(gib * 1024, color="gray", lw=0.8)
        ax.text(Ns[0], gib * 1024 * 1.25, f"{gib} GiB accelerator", color="gray", fontsize=10, ha="left")
    here = attention_bytes(int(N), itemsize=itemsize) / 2**20
    ax.plot([N], [here], "o", ms=12, mfc="none", mec="C3", mew=2, label=f"N = {N:,}: {_human(here)}")
    ax.yaxis.set_major_locator(LogLocator(base=32))
    ax.yaxis.set_major_formatter(FuncFormatter(_human))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda n, _pos: f"{n / 1024:g}K" if n >= 1024 else f"{n:g}"))
    ax.set(xlabel="sequence length N", ylabel="bytes per head", title=f"Memory of attention's N×N matrices ({dtype})")
    ax.legend(loc="lower right", fontsize=10)
    return {"N": int(N), "dtype": dtype, "bytes": attention_bytes(int(N), itemsize=itemsize),
            "flash_bytes": flash_tile_bytes(d, itemsize=itemsize)}
