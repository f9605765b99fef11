"""Counting what a kernel does: bytes moved between the full arrays ("HBM") and tiles, and scalar ops.

A numpy kernel moves a tile with the accessors `load` and `store`, which do the move and count its
bytes in one call (`q_i = trace.load("q", q[..., i0:i1, :])`, `trace.store("o", o[..., i0:i1, :], o_i)`),
and reports elementwise work with `ops`; so the kernel's lines read like the paper's "Load Q_i from
HBM to on-chip SRAM" and carry no bookkeeping of their own. With no recorder active only the move
happens; inside `with record() as rec:` the counts add up, so a notebook can compare an instrumented
run with the analytic formula of the IO model. (`read` and `write` count a move done elsewhere.)
`lab.CountingArray` counts per element instead, for the row-by-row algorithms of notebooks 01-02.

Taught in: notebooks/05_tiling.ipynb, notebooks/05_tiling_traffic.ipynb, notebooks/06_flashattention2.ipynb
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Recorder", "record", "load", "store"]


@dataclass
class Recorder:
    """Totals of one instrumented run: `reads`/`writes` in bytes (per array name too) and op counts."""

    reads: int = 0
    writes: int = 0
    read_by: Counter = field(default_factory=Counter)
    write_by: Counter = field(default_factory=Counter)
    op_counts: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Bytes read plus bytes written."""
        return self.reads + self.writes


_active: list[Recorder] = []


@contextlib.contextmanager
def record():
    """`with record() as rec:` counts the bytes and ops of every kernel call inside the block."""
    rec = Recorder()
    _active.append(rec)
    try:
        yield rec
    finally:
        _active.remove(rec)


def load(name: str, tile: np.ndarray, itemsize: int | None = None) -> np.ndarray:
    """Load `tile`, a view of the full array `name` ("HBM"), into the kernel: count its bytes (at `itemsize` per element if given) and return it.

    Taught in: notebooks/05_tiling.ipynb
    """
    read(name, nbytes(tile, itemsize))
    return tile


def store(name: str, dst: np.ndarray, value, itemsize: int | None = None) -> None:
    """Store `value` into `dst`, a view of the full array `name` ("HBM"): `dst[...] = value`, counting the bytes of `dst`.

    Taught in: notebooks/05_tiling.ipynb
    """
    dst[...] = value
    write(name, nbytes(dst, itemsize))


def read(name: str, nbytes: int) -> None:
    """A tile of `nbytes` bytes loaded from the full array `name`."""
    for rec in _active:
        rec.reads += int(nbytes)
        rec.read_by[name] += int(nbytes)


def write(name: str, nbytes: int) -> None:
    """A tile of `nbytes` bytes stored into the full array `name`."""
    for rec in _active:
        rec.writes += int(nbytes)
        rec.write_by[name] += int(nbytes)


def ops(name: str, count: int) -> None:
    """`count` scalar operations of kind `name` ("exp", "mul", "div", "add", "max")."""
    for rec in _active:
        rec.op_counts[name] += int(count)


def active() -> bool:
    """True inside `record()`: kernels skip the bookkeeping arithmetic otherwise."""
    return bool(_active)


def nbytes(a: np.ndarray, itemsize: int | None = None) -> int:
    """Bytes of an array (or of a tile view of one), at `itemsize` bytes per element if given (its dtype's otherwise)."""
    return int(a.size) * (a.dtype.itemsize if itemsize is None else int(itemsize))
