"""What every chapter's checks share: matching a learner's result against planted classic mistakes, hints, guards.

Taught in: the exercises at the end of each notebook.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys

import numpy as np

from ..exercises import diagnose


def _same(got, wrong, case=None) -> bool:
    """True when `got` equals `wrong(*case)` (or `wrong` itself, without a case) to rounding, NaN matching NaN."""
    try:
        return (
            diagnose(
                got, wrong if case is None else wrong(*case), rtol=1e-9, atol=1e-12
            )
            is None
        )
    except Exception:
        return False


def _hint(mistakes, default: str):
    """A `lab.check` hint: the text of the first mistake `(wrong, text)` whose `wrong(*case)` equals yours, else `default`;
    None when the values agree (a property failed and says why itself)."""

    def hint(case, got, want):
        with np.errstate(all="ignore"):
            return (
                None
                if _same(got, want)
                else next((t for w, t in mistakes if _same(got, w, case)), default)
            )

    return hint


def _copies(case) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in case]


def _guarded(fn, default: str, notes=None):
    """`fn` on copies of the case (so an in-place change cannot reach the reference), named `default` if a lambda; a
    ValueError whose message holds a key of `notes` gets that note appended."""

    def run(*case):
        try:
            return fn(*_copies(case))
        except ValueError as exc:
            note = next((n for k, n in (notes or {}).items() if k in str(exc)), None)
            if note is None:
                raise
            raise ValueError(f"{exc} ({note})") from None

    name = getattr(fn, "__name__", "<")
    run.__name__, run.raw = (default if name.startswith("<") else name), fn
    return run


def _own_work(*names):
    """Property: `fn` leaves its input arrays as they were and runs none of `lab.<names>`, lab's own version, by any
    route (`lab.x`, `lab.module.x`, a name imported earlier): a profile hook watches for their code while `fn` runs."""

    def prop(fn, case, got):
        lab, args, called = importlib.import_module("lab"), _copies(case), []
        codes = {
            getattr(inspect.unwrap(getattr(lab, n)), "__code__", None): n for n in names
        }
        before = sys.getprofile()

        def watch(frame, event, arg):
            if event == "call" and frame.f_code in codes:
                called.append(codes[frame.f_code])

        sys.setprofile(watch)
        try:
            getattr(fn, "raw", fn)(*args)
        finally:
            sys.setprofile(before)
        if called:
            return f"it calls lab.{called[0]}, which does what this exercise asks you to write: use numpy instead"
        if any(
            isinstance(a, np.ndarray) and not np.array_equal(a, b, equal_nan=True)
            for a, b in zip(args, case)
        ):
            return "it changes its input in place (e.g. `s -= m`): compute into a new array and leave the caller's scores alone"
        return None

    return prop


@contextlib.contextmanager
def watch_course(names):
    """Record the calls made through `lab.<name>` for each of `names` (the course's own answers) inside the block;
    each call still runs. A check reads the list afterwards to say which of lab's answers a learner called."""
    lab = importlib.import_module("lab")
    called, saved = [], {n: getattr(lab, n) for n in names if hasattr(lab, n)}

    def spy(n, f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            called.append(n)
            return f(*args, **kwargs)

        return wrapper

    for n, f in saved.items():
        setattr(lab, n, spy(n, f))
    try:
        yield called
    finally:
        for n, f in saved.items():
            setattr(lab, n, f)
