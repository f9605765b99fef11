"""Counting memory accesses per element of softmax, by really counting them.

`CountingArray` stands for an array in main memory: every element load (`a[i]`, `a[j0:j1]`) and store
(`a[i] = v`) adds one to that element's counter. The three softmaxes below read their input `x` and
write their output `y` only through it, so the counts are measured, not derived:
  1. naive  : pass 1 $l = \\sum_j e^{x_j}$, pass 2 $y_i = e^{x_i} / l$              -> 2 loads + 1 store
  2. safe   : pass 1 $m$, pass 2 $l = \\sum_j e^{x_j - m}$, pass 3 $y_i = e^{x_i - m} / l$ -> 3 loads + 1 store
  3. online : pass 1 running $(m, l)$ with $\\alpha = e^{m - m'}$, pass 2 $y_i$ -> 2 loads + 1 store
Milakov & Gimelshein (2018, arXiv 1805.02867) count 4 accesses per element for safe softmax and 3 for
the online one.

Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rules import safe_exp_shift
from .validate import as_float_array, check_block, check_choice

__all__ = ["CountingArray", "AccessCount", "count_accesses", "COUNTED_METHODS"]


class CountingArray:
    """A 1-D float64 array in "memory" that counts the loads and stores of each element (`loads`, `stores`) and how
    many loads were issued (`load_calls`: `a[j0:j1]` is one, however many elements it reads).

    Taught in: notebooks/01_three_pass_softmax.ipynb
    """

    def __init__(self, values, name: str = "x"):
        a = as_float_array(values, name)
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
        self.name = name
        self._data = a.astype(np.float64)  # a copy: the caller's array is never touched
        self.loads = np.zeros(a.shape[0], dtype=np.int64)
        self.stores = np.zeros(a.shape[0], dtype=np.int64)
        self.load_calls = 0  # loads as issued: one per index or slice read

    def __len__(self) -> int:
        return self._data.shape[0]

    def _index(self, key):
        if isinstance(key, slice):
            return key
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return int(key)
        raise TypeError(f"{self.name} takes an integer or a slice index, got {key!r}")

    def __getitem__(self, key):
        key = self._index(key)
        self.loads[key] += 1
        self.load_calls += 1
        v = self._data[key]
        return v.copy() if isinstance(v, np.ndarray) else float(v)

    def __setitem__(self, key, value) -> None:
        key = self._index(key)
        self.stores[key] += 1
        self._data[key] = value

    def peek(self) -> np.ndarray:
        """The contents, read without counting (for checking the result, not part of the algorithm)."""
        return self._data.copy()


@dataclass
class AccessCount:
    """Measured accesses of one softmax run: per element of `x` and `y`, the output, and the exponentials evaluated.

    Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
    """

    method: str
    n: int
    y: np.ndarray
    x_loads: np.ndarray
    x_stores: np.ndarray
    y_loads: np.ndarray
    y_stores: np.ndarray
    exp_evaluations: int = (
        0  # exponentials evaluated, one per element of every exp call
    )

    @property
    def reads(self) -> int:
        """Element loads, `x` and `y` together."""
        return int(self.x_loads.sum() + self.y_loads.sum())

    @property
    def writes(self) -> int:
        """Element stores, `x` and `y` together."""
        return int(self.x_stores.sum() + self.y_stores.sum())

    @property
    def per_element(self) -> float:
        """$(\\text{reads} + \\text{writes}) / n$: memory accesses per element of the row."""
        return (self.reads + self.writes) / self.n

    @property
    def uniform(self) -> bool:
        """True when every element was loaded and stored the same number of times."""
        return all(
            len(set(a.tolist())) <= 1
            for a in (self.x_loads, self.y_loads, self.x_stores, self.y_stores)
        )


_EXP_COUNT = [0]


def _exp(a):
    """`np.exp(a)`, adding the number of exponentials it evaluates (one per element) to the running count."""
    out = np.exp(a)
    _EXP_COUNT[0] += int(np.size(out))
    return out


def _naive(x: CountingArray, y: CountingArray, block: int) -> None:
    n = len(x)
    l = 0.0
    for j0 in range(0, n, block):  # pass 1: l = Σ exp(x_j)
        l += float(_exp(x[j0 : j0 + block]).sum())
    for j0 in range(0, n, block):  # pass 2: y = exp(x) / l
        y[j0 : j0 + block] = _exp(x[j0 : j0 + block]) / l


def _safe(x: CountingArray, y: CountingArray, block: int) -> None:
    n = len(x)
    m = -np.inf
    for j0 in range(0, n, block):  # pass 1: m = max_j x_j
        m = max(m, float(x[j0 : j0 + block].max()))
    m_use = safe_exp_shift(m)
    l = 0.0
    for j0 in range(0, n, block):  # pass 2: l = Σ exp(x_j - m)
        l += float(_exp(x[j0 : j0 + block] - m_use).sum())
    for j0 in range(0, n, block):  # pass 3: y = exp(x - m) / l
        e = _exp(x[j0 : j0 + block] - m_use)
        y[j0 : j0 + block] = e / l if l > 0 else np.zeros_like(e)


def _online(x: CountingArray, y: CountingArray, block: int) -> None:
    n = len(x)
    m, l = -np.inf, 0.0
    for j0 in range(0, n, block):  # pass 1: running (m, l)
        x_b = x[j0 : j0 + block]
        m_new = max(m, float(x_b.max()))
        if m_new == -np.inf:
            continue  # only masked entries so far: l stays 0
        alpha = float(_exp(m - m_new))  # α = e^(m − m′)
        l = l * alpha + float(_exp(x_b - m_new).sum())
        m = m_new
    m_use = safe_exp_shift(m)
    for j0 in range(0, n, block):  # pass 2: y = exp(x - m) / l
        e = _exp(x[j0 : j0 + block] - m_use)
        y[j0 : j0 + block] = e / l if l > 0 else np.zeros_like(e)


COUNTED_METHODS = {"naive": _naive, "safe": _safe, "online": _online}


def count_accesses(method: str, x, block: int = 1) -> AccessCount:
    """Run softmax `method` ("naive", "safe" or "online") on a 1-D row through `CountingArray`s and return the counts.

    `block` elements are loaded or stored per access (1: element by element, as in the paper's pseudocode).
    Taught in: notebooks/01_three_pass_softmax.ipynb, notebooks/02_online_softmax.ipynb
    """
    check_choice(method, COUNTED_METHODS, "method")
    a = as_float_array(x, "x")
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"x must be a non-empty 1-D row, got shape {a.shape}")
    if np.isnan(a).any() or np.isposinf(a).any():
        raise ValueError(
            "x must not hold NaN or +inf (-inf, a masked entry, is allowed)"
        )
    block = check_block(block, "block")
    xm = CountingArray(a, "x")
    ym = CountingArray(np.zeros(a.shape[0]), "y")
    _EXP_COUNT[0] = 0
    with np.errstate(over="ignore", invalid="ignore"):
        COUNTED_METHODS[method](xm, ym, block)
    return AccessCount(
        method,
        a.shape[0],
        ym.peek(),
        xm.loads.copy(),
        xm.stores.copy(),
        ym.loads.copy(),
        ym.stores.copy(),
        _EXP_COUNT[0],
    )
