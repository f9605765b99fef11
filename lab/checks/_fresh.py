"""Cases drawn afresh on every run of a check: a seed drawn per run (or given), so no table of answers passes, and a
learner who reruns with the seed a failure printed sees the same cases.

Taught in: the exercises of notebooks 06 to 11.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

__all__ = ["fresh_rng", "said_with_seed"]


def fresh_rng(seed: int | None = None) -> tuple[np.random.Generator, int]:
    """`(rng, seed)`: a generator seeded by `seed`, or by a seed drawn for this run when `seed` is None."""
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % 2**31)
    return np.random.default_rng(seed), seed


@contextlib.contextmanager
def said_with_seed(call: str, seed: int):
    """Print what the block printed; after a failure (a ✗), one line more: the seed that draws the same cases again."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        yield
    text = out.getvalue()
    print(text, end="")
    if "✗" in text:
        print(
            f"  (random cases drawn with seed {seed}: {call}(..., seed={seed}) draws them again)"
        )
