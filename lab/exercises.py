"""Self-checking exercises: a spec, a stub the learner fills in, and `check` printing one verdict line.

A stub raises `NotImplementedError`; `check` reports "not implemented yet" for it instead of an error,
so a learner's copy with the solutions removed still runs top to bottom.

Taught in: the exercises at the end of every notebook.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check"]


def check(fn, reference, cases, *, name: str | None = None, rtol: float = 1e-6, atol: float = 1e-8) -> None:
    """Call `fn(*case)` and `reference(*case)` for every case and print one verdict line.

    `cases` is a list of argument tuples. Results are compared with `np.allclose(rtol, atol)`
    (tuples element by element).
    """
    name = name or getattr(fn, "__name__", "your function")
    for i, case in enumerate(cases):
        try:
            got = fn(*case)
        except NotImplementedError:
            print(f"{name}: not implemented yet (fill in the stub above, then run this cell again)")
            return
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            print(f"{name}: ✗ case {i} raised {type(exc).__name__}: {exc}")
            return
        want = reference(*case)
        if not _close(got, want, rtol, atol):
            print(f"{name}: ✗ case {i} differs from the reference")
            return
    print(f"{name}: ✓ passed {len(cases)} cases")


def _close(got, want, rtol, atol) -> bool:
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(_close(g, w, rtol, atol) for g, w in zip(got, want))
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
