"""Self-checking exercises: a spec, a stub the learner fills in, and `check` printing a verdict.

A stub raises `NotImplementedError`; `check` reports "not implemented yet" for it instead of an error,
so a learner's copy with the solutions removed still runs top to bottom. A pass is one line. A failure
says what is wrong and where: the case (small inputs shown, large ones by shape and dtype), which
element of a returned tuple differs (by name), a shape or a NaN in words, expected against got at the
worst element with the largest absolute and relative errors, a property the answer must have (read K
once, hold no array of length M, ...), and a hint written for the exercise's classic mistakes.

Taught in: the exercises at the end of every notebook.
"""

from __future__ import annotations

import functools
import linecache
import pathlib
import sysconfig
import traceback

import numpy as np

__all__ = ["check", "diagnose", "describe_case"]


def check(
    fn,
    reference,
    cases,
    *,
    name: str | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    names=None,
    hint=None,
    properties=(),
    seed: int | None = None,
    tolerance=None,
    labels=None,
) -> None:
    """Call `fn(*case)` and `reference(*case)` for every case; print one line when all agree, a diagnosis when not.

    `cases`: a list of argument tuples. Results agree when `np.allclose(got, want, rtol, atol)` holds
    (tuples element by element, named by `names`, e.g. `("o", "lse")`). `properties`: callables
    `prop(fn, case, got) -> None | str`, each returning a violation in words (run on every case after the
    values agree; a property with a `run(fn, case)` gives the value too, e.g. one that watches what `fn` calls). `hint`: a string, or `hint(case, got, want) -> None | str`, printed under a failure. `seed`: the
    seed the cases were drawn with, named under a failure so that the same cases can be asked again.
    `tolerance`: `tolerance(case) -> (rtol, atol)`, a case's own in place of `rtol`, `atol` (float32 cases
    among float64 ones). `labels`: the arguments' names, shown in a failing case (`N=40, M=96`).
    """
    name = name or getattr(fn, "__name__", "your function")
    run = next((p.run for p in properties if hasattr(p, "run")), None)
    for i, case in enumerate(cases):
        try:
            got = run(fn, case, reference) if run else fn(*case)
        except NotImplementedError:
            print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
            return
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            print(
                f"{name}: ✗ case {i} {describe_case(case, labels=labels)} raised {type(exc).__name__}: {exc}{raised_at(exc)}"
            )
            print(seed_note(seed), end="")
            return
        want = reference(*case)
        tol = tolerance(case) if tolerance else (rtol, atol)
        problem = diagnose(got, want, names=names, rtol=tol[0], atol=tol[1])
        if problem is None:
            problem = next(
                (p for p in (prop(fn, case, got) for prop in properties) if p), None
            )
        if problem is not None:
            print(f"{name}: ✗ case {i} {describe_case(case, labels=labels)}: {problem}")
            text = hint(case, got, want) if callable(hint) else hint
            if text:
                print(f"  hint: {text}")
            print(seed_note(seed), end="")
            return
    print(f"{name}: ✓ passed {len(cases)} cases")


def seed_note(seed: int | None) -> str:
    """The line under a failure that names the seed of the run's fresh cases ("" without one)."""
    if seed is None:
        return ""
    return f"  (the cases were drawn with seed={seed}: pass seed={seed} to the check to ask the same ones again)\n"


_NOT_YOURS = tuple(
    str(pathlib.Path(p).resolve())
    for p in (
        pathlib.Path(__file__).parent,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    )
)


@functools.lru_cache(maxsize=4096)
def not_yours(filename: str) -> bool:
    """True when `filename` is lab's, an installed library's or Python's own, compared by its real path (a venv or
    home reached through a symbolic link names the same files by another path); "<...>" names (cells) are yours."""
    if filename.startswith("<"):
        return False
    return str(pathlib.Path(filename).resolve()).startswith(_NOT_YOURS)


def raised_at(exc: BaseException) -> str:
    """Where in the learner's code `exc` was raised: " (line 3 of your code: `return e / s`)", the innermost frame
    outside lab, numpy and Python's own library; "" when there is none (lab raised it, given bad input)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename
        if not_yours(name):
            continue
        text = (frame.line or linecache.getline(name, frame.lineno)).strip()
        return f" (line {frame.lineno} of your code" + (f": `{text}`)" if text else ")")
    return ""


def describe_case(case, small: int = 8, labels=None) -> str:
    """The arguments of a case in a few words: numbers as they are, arrays with at most `small` values shown, larger ones by shape and dtype; each named when `labels` gives the names."""
    parts = [_describe(a, small) for a in case]
    if labels:
        parts = [f"{n}={p}" for n, p in zip(labels, parts)]
    return "(" + ", ".join(parts) + ")"


def _describe(a, small: int) -> str:
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return (
            type(a).__name__
            + "("
            + ", ".join(f"{f}={_describe(x, small)}" for f, x in zip(a._fields, a))
            + ")"
        )
    if isinstance(a, (tuple, list)) and not all(np.isscalar(x) for x in a):
        return "[" + ", ".join(_describe(x, small) for x in a) + "]"
    if callable(a):
        return getattr(a, "__name__", "a function")
    arr = np.asarray(a) if not isinstance(a, str) else None
    if arr is None or arr.dtype == object:
        return repr(a)
    if arr.ndim == 0 or (isinstance(a, (tuple, list)) and arr.size <= small):
        return repr(a)
    if arr.size <= small:
        return np.array2string(arr, precision=4, separator=", ")
    return f"array {arr.shape} {arr.dtype}"


def diagnose(
    got, want, *, names=None, rtol: float = 1e-6, atol: float = 1e-8
) -> str | None:
    """None when `got` agrees with `want` (tuples element by element); else what differs, in words.

    Names the differing tuple element (`names`), a type, length or shape mismatch, NaN or inf where the
    reference has none, and otherwise expected against got at the worst element, with the largest
    absolute and relative errors against the tolerance.
    """
    if isinstance(want, tuple):
        label = f"a tuple of {len(want)}" + (f" ({', '.join(names)})" if names else "")
        if not isinstance(got, tuple):
            return f"returned {type(got).__name__}, expected {label}"
        if len(got) != len(want):
            return f"returned a tuple of {len(got)}, expected {label}"
        for k, (g, w) in enumerate(zip(got, want)):
            problem = diagnose(g, w, rtol=rtol, atol=atol)
            if problem is not None:
                which = (
                    f"{names[k]} (element {k})"
                    if names and k < len(names)
                    else f"element {k} of the tuple"
                )
                return f"{which}: {problem}"
        return None
    try:
        g = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return f"returned {type(got).__name__}, expected numbers"
    w = np.asarray(want, dtype=float)
    if g.shape != w.shape:
        return f"shape: yours is {g.shape}, expected {w.shape}"
    for bad, word in ((np.isnan, "NaN"), (np.isinf, "inf")):
        extra = bad(g) & ~bad(w)
        if extra.any():
            at = tuple(int(x) for x in np.argwhere(extra)[0])
            shown = word if word == "NaN" else f"{g[at]:g}"
            return f"{shown} in yours {_at(at)}({int(extra.sum())} of {g.size}) where the reference has no {word}"
        lost = bad(w) & ~bad(g)
        if lost.any():
            at = tuple(int(x) for x in np.argwhere(lost)[0])
            return f"{_at(at)}the reference has {w[at]:g}, yours {g[at]:.6g}"
    both = np.isfinite(g) & np.isfinite(w)
    alike = (np.isnan(g) & np.isnan(w)) | (
        np.isinf(g) & (g == w)
    )  # NaN against NaN, inf against the same inf
    with np.errstate(invalid="ignore"):
        err = np.where(
            both, np.abs(g - w), np.where(alike, 0.0, np.inf)
        )  # an inf of the wrong sign is the worst
    excess = err - (
        atol + rtol * np.abs(np.where(both, w, 0.0))
    )  # np.allclose: |g - w| <= atol + rtol |w|
    if not (excess > 0).any():
        return None
    at = np.unravel_index(int(np.argmax(excess)), g.shape) if g.ndim else ()
    at = tuple(int(x) for x in at)
    outside = f"{int((excess > 0).sum())} of {g.size} values outside the tolerance (rtol {rtol:g}, atol {atol:g})"
    if not np.isfinite(err[at]):
        return f"{_at(at)}expected {_num(w[at])}, got {_num(g[at])}; {outside}"
    nonzero = both & (w != 0)  # a relative error against 0 means nothing
    rel = (
        f"largest relative error {(err[nonzero] / np.abs(w[nonzero])).max():.2e}; "
        if nonzero.any()
        else ""
    )
    return (
        f"{_at(at)}expected {_num(w[at])}, got {_num(g[at])}; largest |error| {err.max():.2e}, "
        f"{rel}{outside}"
    )


def _num(x) -> str:
    """A value as a learner compares it: whole numbers exactly (34619400), others to 6 significant digits."""
    x = float(x)
    return (
        f"{int(x)}"
        if np.isfinite(x) and x.is_integer() and abs(x) < 1e15
        else f"{x:.6g}"
    )


def _at(index: tuple) -> str:
    return f"at index {list(index)} " if index else ""
