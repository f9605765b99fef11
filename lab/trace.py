"""Counting what a kernel does: bytes moved between the full arrays ("HBM") and tiles, and scalar ops.

The numpy kernels call `read`, `write` and `ops` at each tile load, store and elementwise step. With
no recorder active these are no-ops; inside `with record() as rec:` they add up, so a notebook can
compare an instrumented run with the analytic formula of the IO model.

Taught in: notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Recorder", "record"]


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
