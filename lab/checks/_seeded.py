"""The seed line under a check's failure, for checks that print their own verdicts (not through `lab.check`).

Taught in: the exercises of notebooks 09 and 10.
"""

from __future__ import annotations

import contextlib
import io

from ..exercises import seed_note

__all__ = ["noting_seed"]


@contextlib.contextmanager
def noting_seed(seed: int | None):
    """Print what the block printed, and after a failure (a ✗) the line that names the seed of its fresh cases."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        yield
    print(out.getvalue(), end="")
    if "✗" in out.getvalue():
        print(seed_note(seed), end="")
