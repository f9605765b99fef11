"""What the checks of notebooks 03 and 04 add to `diagnose`'s line: the digits that tell two values apart, no relative
error against an expected 0, and the hint for a state kept in float32.

Taught in: notebooks/03_one_pass_attention.ipynb, notebooks/04_merge_order.ipynb
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["FLOAT32", "sharpen"]

FLOAT32 = (
    "yours agrees with the reference to about 7 significant digits, float32's precision, not float64's "
    "(rtol 1e-9): accumulate in float64 (np.zeros(n) is float64; an array made with dtype=np.float32, or "
    "computed from float32 arrays, is not)"
)


_DIFF = re.compile(r"(at index \[([\d, ]*)\] )?expected (\S+), got (\S+);")


def sharpen(problem: str | None, got, want, names, rtol: float = 1e-9) -> str | None:
    """`diagnose`'s line, with as many digits as it takes to tell expected from got, and no relative error against an
    expected 0 (there it is meaningless: the absolute error says it)."""
    if not problem:
        return problem
    k = next(
        (
            i
            for i, n in enumerate(names or ())
            if problem.startswith(f"{n} (element {i})")
        ),
        None,
    )
    try:
        g = np.asarray(got if k is None else got[k], dtype=float)
        w = np.asarray(want if k is None else want[k], dtype=float)
    except (TypeError, ValueError, IndexError):
        return problem
    if g.shape != w.shape:
        return problem
    found = _DIFF.search(problem)
    if found and found.group(3) == found.group(4):
        at = tuple(int(x) for x in found.group(2).split(",")) if found.group(2) else ()
        gv, wv = float(g[at]), float(w[at])
        digits = next((n for n in range(7, 18) if f"{wv:#.{n}g}" != f"{gv:#.{n}g}"), 17)
        problem = problem.replace(
            found.group(0),
            f"{found.group(1) or ''}expected {wv:#.{digits}g}, got {gv:#.{digits}g};",
        )
    with np.errstate(all="ignore"):
        ok = np.isfinite(g) & np.isfinite(w)
        if "largest relative error" in problem and (ok & (w == 0) & (g != 0)).any():
            nonzero = ok & (w != 0)
            rel = (np.abs(g - w)[nonzero] / np.abs(w[nonzero])).max(initial=0.0)
            problem = re.sub(
                r", largest relative error [^;\s]+",
                f", largest relative error {rel:.2e} where the expected value is not 0"
                if rel > rtol
                else "",
                problem,
            )
    return problem
