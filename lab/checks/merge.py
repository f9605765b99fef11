"""Checks for notebook 04's exercises: merging partial results exactly, in any order, at any scale.

- `check_state_merge(fn)`    : `fn(a, b)` is the state $(m, l, acc)$ over both slices' keys, the one `partial_state`
  computes on all of them; rows one or both slices never saw, maxes near ±1000 and 2000 apart, a and b unchanged.
- `check_pair_merge(fn, empty)` : `fn(x, y)` merges two pairs $(o, lse)$ into the pair over both chunks' keys, and
  `empty(N, dv)` is its identity: equal to attention over all the keys, commutative and associative (each side against
  the truth), `x ⊕ ∅ = ∅ ⊕ x = x`, lse near ±1000 and 2000 apart in one row, empty rows, inputs unchanged.
- `check_merge_partials(fn)` : `fn(parts)` merges $(o_c, lse_c)$ into $(o, lse)$: 1 to 7 parts, lse near ±1000 (in one
  row too), empty parts and rows, every case also on the parts reversed and shuffled, the parts left unchanged.
- `check_chunked_attention(fn, chunk_output, merge_partials)` : `chunk_output` on single chunks, then `fn(q, k, v,
  chunk)` against `attention_reference`, each key reaching `chunk_output` once, in ceil(M / chunk) chunks.
- `check_shared_prefix(fn, chunk_output)` : `chunk_output` on single chunks, then `fn(q, k_pre, v_pre, suffixes)`
  against attention of each row over the shared prefix and its own suffix; the prefix read once, for all rows.
- `check_merge_work(fn)`     : `fn(C, dv)` counts, per query row, the logs and the numbers stored between rounds of a
  tree of pairwise merges and of the all-at-once merge.

Each prints one line on a pass; a failure says the case, the element ("o", "lse"), expected against got (with the
digits that tell them apart) and a hint for the exercise's classic mistakes. A call into the course's own merge or
attention (`lab.merge_outputs`, `lab.attention_reference`, ...) fails the check: the exercise is to write it.

Taught in: notebooks/04_merge_order.ipynb
"""

from __future__ import annotations

import contextlib
import io
import traceback
import types

import numpy as np

from ..attention import attention_reference
from ..exercises import check, diagnose, raised_at, seed_note
from ..merge import merge_output_pair, merge_outputs, random_chunk_bounds
from ..states import partial_state
from ._support import _fresh, _own_work, _refusal, _settled, _watching
from ._values import FLOAT32, sharpen

__all__ = [
    "check_state_merge",
    "check_pair_merge",
    "check_merge_partials",
    "check_chunked_attention",
    "check_shared_prefix",
    "check_merge_steps",
    "check_tree_rounds",
    "check_merge_work",
]

RTOL, ATOL = 1e-9, 1e-12
_FAILED = object()
_COURSE = (
    "attention_reference",
    "attention_naive",
    "one_pass_attention",
    "flash_attention_numpy",
    "flash_decoding",
    "attention_row_one_pass",
    "chunk_state",
    "split_states",
    "partial_state",
    "finalize",
    "merge_states",
    "reduce_states",
    "merge_outputs",
    "merge_output_pair",
    "merge_plan",
    "merge_depth",
)
_OVERFLOW = "float64 stops at e^709.8, and e^-1000 is 0"
_BROADCAST = (
    "a factor per row, alpha of shape (N,), times acc of shape (N, dv) needs alpha[:, None]: numpy lines up "
    "shapes from the right, so (N,) meets the dv axis"
)

_NO_KEYS = (
    "a chunk of 0 keys has no max: a sequence with no suffix key yet has no suffix part to "
    "compute; its part is the empty pair (o = 0, lse = -inf), or skip it"
)


@contextlib.contextmanager
def _spy_globals(fn, targets, results=None):
    """Record the calls of `targets` made while `fn` runs: {id(target): [args, ...]}, and, given a dict `results`,
    what each call returned: {id(target): [result, ...]}.

    A function of the learner's is recorded by the function object itself, so a call through any name counts:
    an alias (`m = merge_pair`), a default argument, a function passed in. Anything else (a closure, a builtin,
    a callable object) is recorded through `fn`'s global names that hold it."""
    calls = {id(t): [] for t in targets}
    if results is not None:
        results.update({id(t): [] for t in targets})

    def spy(f, key=None):
        key = id(f) if key is None else key

        def called(*args, **kwargs):
            calls[key].append(args)
            out = f(*args, **kwargs)
            if results is not None:
                results[key].append(out)
            return out

        return called

    trapped, g = [], getattr(fn, "__globals__", {})
    with contextlib.ExitStack() as stack:
        for t in targets:
            if isinstance(t, types.FunctionType) and not t.__closure__:
                stack.enter_context(_trapped(t, spy(_twin(t), id(t))))
                trapped.append(t)
        saved = {
            n: v
            for n, v in g.items()
            if any(v is t for t in targets if not any(t is x for x in trapped))
        }
        for n, f in saved.items():
            g[n] = spy(f)
        try:
            yield calls
        finally:
            g.update(saved)


def _twin(f):
    """A copy of the function `f`: its code, globals, defaults, name."""
    twin = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__)
    twin.__kwdefaults__, twin.__qualname__ = f.__kwdefaults__, f.__qualname__
    return twin


@contextlib.contextmanager
def _trapped(f, spy):
    """Meanwhile the function object `f` itself runs `spy(*args, **kwargs)`, by whatever name it is reached."""

    def trap(*args, _spy_=spy, **kwargs):
        return _spy_(*args, **kwargs)

    saved = f.__code__, f.__defaults__, f.__kwdefaults__
    f.__code__, f.__defaults__, f.__kwdefaults__ = (
        trap.__code__,
        None,
        trap.__kwdefaults__,
    )
    try:
        yield
    finally:
        f.__code__, f.__defaults__, f.__kwdefaults__ = saved


_LOGADDEXP = np.logaddexp  # the ufunc itself, before any counting wraps it
_LOGS = ("log", "log1p", "log2", "log10", "logaddexp", "logaddexp2")


@contextlib.contextmanager
def _counting_logs():
    """Count the calls to numpy's logarithms (`np.log`, `np.logaddexp`, ...) made meanwhile: yields a list, one
    name per call."""
    saved, count = {n: getattr(np, n) for n in _LOGS}, []

    class counted:  # the ufunc, its calls counted; .reduce, .outer, ... pass through
        def __init__(self, name, f):
            self.name, self.f = name, f

        def __call__(self, *args, **kwargs):
            count.append(self.name)
            return self.f(*args, **kwargs)

        def __getattr__(self, attr):
            return getattr(self.f, attr)

    for n, f in saved.items():
        setattr(np, n, counted(n, f))
    try:
        yield count
    finally:
        for n, f in saved.items():
            setattr(np, n, f)


def _attempt(name, fn, args, where, forbid=()):
    """`fn(*args)` with the course's answers (and the numpy functions `forbid`) watched: (result, names called), or
    `_FAILED` after saying why."""
    try:
        with (
            np.errstate(all="ignore"),
            _watching(_COURSE, numpy_only=True, forbid=forbid) as used,
        ):
            out = _settled(fn(*args))
    except NotImplementedError as exc:
        stub = traceback.extract_tb(exc.__traceback__)[-1].name
        still = (
            f" ({stub}, from an earlier exercise, still raises NotImplementedError)"
            if stub not in (name, "<lambda>")
            else ""
        )
        print(
            f"{name}: not implemented yet{still} (fill in the stub above, then run this cell again)"
        )
        return _FAILED
    except Exception as exc:  # a learner's bug: report it, do not stop the notebook
        _fail(
            name,
            where,
            f"raised {type(exc).__name__}: {exc}{raised_at(exc)}",
            _BROADCAST
            if "could not be broadcast" in str(exc)
            else _NO_KEYS
            if "zero-size array" in str(exc)
            else None,
        )
        return _FAILED
    if out is None:
        return _fail(name, where, "returned None (a missing `return`?)") or _FAILED
    return (tuple(out) if isinstance(out, (tuple, list)) else out), used


def _judge(name, where, got, used, want, names, hint, before=(), after=()) -> bool:
    """Print the first thing wrong (values, then inputs changed, then a call to the course's answer); True if none."""
    problem = sharpen(
        diagnose(got, want, names=names, rtol=RTOL, atol=ATOL), got, want, names
    )
    changed = not all(np.array_equal(b, np.asarray(a)) for b, a in zip(before, after))
    if problem is not None:
        _fail(name, where, problem, hint(got, problem))
    elif changed:
        _fail(
            name,
            where,
            "the inputs were changed in place; what the function is given must stay as it was",
            "compute new arrays: x = x * w makes a new one, x *= w overwrites the caller's",
        )
    elif used:
        fold = any(u.startswith("numpy.logaddexp") for u in used)
        other = any(not u.startswith(("numpy.", "lab.")) for u in used)
        _fail(
            name,
            where,
            _refusal(used),
            "np.logaddexp.reduce folds the lse_c two at a time, a log at every step: a pairwise fold "
            "inside one call; take one max over the C values of lse_c, the C weights, one sum, one log"
            if fold
            else "write it with numpy alone (np.maximum, np.exp, np.log, np.where): another array "
            "library's ops are refused, whatever they compute"
            if other
            else None,
        )
    return problem is None and not changed and not used


def _fail(name, where, problem, hint=None) -> None:
    print(f"{name}: ✗ case {where}: {problem}" + (f"\n  hint: {hint}" if hint else ""))


def _close(got, k, want, rtol=1e-7) -> bool:
    """Element k of the tuple `got` equals `want` (loosely): does a planted mistake explain the answer?"""
    try:
        g = np.asarray(got[k], dtype=float)
    except (TypeError, ValueError, IndexError, KeyError):
        return False
    w = np.asarray(want, dtype=float)
    return g.shape == w.shape and bool(
        np.allclose(g, w, rtol=rtol, atol=1e-10, equal_nan=True)
    )


def _bad_rows(got, problem) -> list:
    """Rows (first axis) holding NaN or +inf in the element that `problem` names."""
    if "NaN" not in problem and "inf in yours" not in problem:
        return []
    k = int(problem.split("(element ")[1][0]) if "(element " in problem else 0
    a = np.asarray(got[k], dtype=float)
    bad = np.isnan(a) | np.isposinf(a)
    return (
        [int(r) for r in np.flatnonzero(bad.reshape(a.shape[0], -1).any(axis=1))]
        if a.ndim
        else []
    )


# ------------------------------------------------------------------------------------ section 1's merge of two states


def _state_cases(fresh=None):
    """The fixed cases, then (with a generator `fresh`) two of the same kinds drawn from it: sizes, and maxes apart."""
    rng, no, up = (
        np.random.default_rng(40),
        -np.inf,
        np.array([1000.0, 1000, -1000, -1000]),
    )  # rows 0-1 up
    out = []
    drawn = []
    if fresh is not None:
        na, nb = (int(n) for n in fresh.integers(1, 12, 2))
        apart = 1000.0 * fresh.choice([-1.0, 1.0], 4)
        drawn = [
            (f"fresh, {na} keys | {nb} keys", na, nb, 0, 0),
            (
                f"fresh, maxes 2000 apart by row ({apart[0]:+g} in a for row 0)",
                nb,
                na,
                apart,
                -apart,
            ),
        ]
    specs = (
        ("3 keys | 7 keys", 3, 7, 0, 0),
        ("1 key | 12 keys", 1, 12, 0, 0),
        (
            "rows 0-1 saw no key in a, rows 2-3 none in b",
            5,
            6,
            [no, no, 0, 0],
            [0, 0, no, no],
        ),
        ("row 3 saw no key in either", 4, 4, [0, 0, 0, no], [0, 0, 0, no]),
        ("no key anywhere", 2, 3, no, no),
        ("maxes near +1000 (rows 0-1) and -1000 (rows 2-3)", 5, 5, up, up),
        (
            "m_a, m_b 2000 apart: a near -1000, b near +1000 (rows 0-1), the reverse (rows 2-3)",
            4,
            6,
            -up,
            up,
        ),
    )
    for which, (label, na, nb, off_a, off_b) in [(rng, x) for x in specs] + [
        (fresh, x) for x in drawn
    ]:
        sa, sb = (which.standard_normal((4, n)) * 10 for n in (na, nb))
        for s in (sa, sb):
            s[which.random(s.shape) < 0.2] = -np.inf
        sa, sb = (
            sa + np.reshape(off_a, (-1, 1)),
            sb + np.reshape(off_b, (-1, 1)),
        )  # a row offset -inf: no key
        va, vb = which.standard_normal((na, 3)), which.standard_normal((nb, 3))
        want = tuple(
            partial_state(np.concatenate([sa, sb], axis=1), np.concatenate([va, vb]))
        )
        out.append(
            (label, tuple(partial_state(sa, va)), tuple(partial_state(sb, vb)), want)
        )
    return out


def _state_hint(label, a, b, got, want, problem):
    both = np.isneginf(a[0]) & np.isneginf(b[0])
    rows = [r for r in _bad_rows(got, problem) if r < len(both) and both[r]]
    if rows:
        return (
            f"row {rows[0]} saw no key in either state (m_a = m_b = -inf), so m_a - m there is -inf - (-inf) = NaN; "
            "such a row must stay the empty state m = -inf, l = 0, acc = 0"
        )
    if _bad_rows(got, problem) and "apart" in label:
        return (
            "rescale both against the larger m = max(m_a, m_b), not against m_a or m_b: with the two 2000 apart, "
            "e^(m_b - m_a) overflows to inf and inf · e^(m_a - m) = inf · 0 is NaN"
        )
    if _bad_rows(got, problem) and "1000" in label:
        return f"e^m alone overflows or vanishes at m near ±1000 ({_OVERFLOW}): only differences such as m_a - m may go into exp"
    if all(_close(got, k, want[k], rtol=1e-5) for k in range(3)):
        return FLOAT32
    if problem.startswith("m "):
        return "m is the largest score either slice saw"
    if problem.startswith("l ") and _close(got, 1, a[1] + b[1]):
        return "l_a and l_b are sums under different maxes m_a and m_b: re-express each under the common max before adding"
    if problem.startswith("acc ") and _close(got, 1, want[1]):
        return "l is right, acc is not: acc is a sum under the same max as l and needs the same rescaling"
    return "the merged state is the one partial_state computes on both slices' keys at once"


def check_state_merge(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(a, b)` -> the state (m, l, acc) over both slices' keys (`partial_state` on all of them); print one verdict.

    Cases: random slices with masked keys, rows one or both slices never saw, no key at all, maxes near ±1000;
    fixed and drawn afresh each run (`seed` draws the same again); a and b must stay unchanged; lab's answers and other
    array libraries refused. Taught in: notebooks/04_merge_order.ipynb
    """
    name = name or getattr(fn, "__name__", "my_merge")
    rng, seed = _fresh(seed)
    cases = _state_cases(rng)
    for i, (label, a, b, want) in enumerate(cases):
        before = [x.copy() for x in a + b]
        res = _attempt(name, fn, (a, b), f"{i} ({label})")
        if res is _FAILED or not _judge(
            name,
            f"{i} ({label})",
            *res,
            want,
            ("m", "l", "acc"),
            lambda got, p: _state_hint(label, a, b, got, want, p),
            before,
            a + b,
        ):
            print(seed_note(seed), end="")
            return
    print(
        f"{name}: ✓ passed {len(cases)} cases (rows one or both slices never saw, maxes near ±1000, 2000 apart in one "
        "row); a and b unchanged"
    )


# ------------------------------------------------------------------------------------ exercise 1: the (o, lse) pair


def _pair_cases(fresh):
    """Law cases `(label, make, want)`: `make(merge, e)` builds the learner's answer from its merge and identity `e`."""
    rng = np.random.default_rng(44) if fresh is None else fresh
    N, M = 3, int(rng.integers(12, 40))
    q, k, v = (
        rng.standard_normal((N, 8)),
        rng.standard_normal((M, 8)) * 1.5,
        rng.standard_normal((M, 4)),
    )
    (j0, j1), (j2, _) = sorted(rng.choice(np.arange(1, M), 2, replace=False)), (M, 0)
    x, y, z = (
        attention_reference(q, k[a:b], v[a:b]) for a, b in ((0, j0), (j0, j1), (j1, j2))
    )
    xy, xyz = attention_reference(q, k[:j1], v[:j1]), attention_reference(q, k, v)
    big = _synthetic(rng, 2, 1000.0 * rng.choice([-1.0, 1.0], (2, 4)))
    apart = _synthetic(rng, 2, 1000.0 * np.array([[-1.0, 1, -1, 1], [1, -1, 1, -1]]))
    holes = _synthetic(
        rng, 2, np.array([[-np.inf, 0, -np.inf, 0], [0, -np.inf, -np.inf, 0]])
    )
    truth = lambda parts: merge_outputs([p[0] for p in parts], [p[1] for p in parts])  # noqa: E731
    keys = f"keys 0..{j0 - 1} | {j0}..{j1 - 1}"
    return [
        (f"x ⊕ y equals attention over both chunks ({keys})", lambda f, e: f(x, y), xy),
        (
            f"commutative: y ⊕ x, the same chunks the other way ({keys})",
            lambda f, e: f(y, x),
            xy,
        ),
        (
            f"associative: (x ⊕ y) ⊕ z, three chunks of {M} keys",
            lambda f, e: f(f(x, y), z),
            xyz,
        ),
        (
            f"associative: x ⊕ (y ⊕ z), three chunks of {M} keys",
            lambda f, e: f(x, f(y, z)),
            xyz,
        ),
        ("identity: x ⊕ ∅ gives x back", lambda f, e: f(x, e), x),
        ("identity: ∅ ⊕ x gives x back", lambda f, e: f(e, x), x),
        (
            "lse near +1000 or -1000, the same in both pairs",
            lambda f, e: f(*big),
            truth(big),
        ),
        (
            "lse near +1000 and -1000 in one row, pairs 2000 apart",
            lambda f, e: f(*apart),
            truth(apart),
        ),
        (
            "rows 0, 2 empty in x, rows 1, 2 in y: row 2 empty in both",
            lambda f, e: f(*holes),
            truth(holes),
        ),
        (
            "∅ ⊕ ∅: no keys at all, o = 0, lse = -inf",
            lambda f, e: f(e, e),
            (np.zeros((3, 4)), np.full(3, -np.inf)),
        ),
    ]


def _pair_hint(label, parts, got, problem, e):
    if label.startswith(("identity", "∅ ⊕ ∅")) and e is not None:
        o_e, lse_e = (np.asarray(t, dtype=float) for t in e)
        if not np.isneginf(lse_e).all():
            return (
                "∅ is the pair of no keys: no mass, e^lse = 0, so lse = -inf; "
                f"your empty pair has lse = {lse_e.ravel()[0]:g}"
            )
        if not np.isfinite(o_e).all():
            return "∅'s o meets a weight of 0, and 0 · NaN (or 0 · inf) is NaN: give the empty pair a finite o, zeros"
    return _merge_hint(label, parts, got, problem)


def check_pair_merge(
    fn, empty, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(x, y)` -> the pair (o, lse) over both pairs' keys, and its identity `empty(N, dv)`; print one verdict.

    $e^{lse}$ is a chunk's mass and $o$ its mass-weighted average of the values, so
    $lse = \\log(e^{lse_x} + e^{lse_y})$ and $o = e^{lse_x - lse} o_x + e^{lse_y - lse} o_y$. Cases drawn afresh each
    run (`seed` draws the same again): equal to attention over all the keys, commutative, associative (each
    grouping against the truth), `x ⊕ ∅ = ∅ ⊕ x = x`, lse near ±1000 and 2000 apart, rows empty in one pair or both;
    the inputs must stay unchanged; lab's merges refused. Taught in: notebooks/04_merge_order.ipynb
    """
    name = name or getattr(fn, "__name__", "merge_pair")
    ename = getattr(empty, "__name__", "empty_pair")
    rng, seed = _fresh(seed)
    cases = _pair_cases(rng)
    e = None
    res = _attempt(ename, empty, (3, 4), "0 (an empty pair of 3 rows, dv = 4)")
    if res is _FAILED:
        return
    e, used = res
    shapes = [np.shape(t) for t in e] if isinstance(e, tuple) else None
    if shapes != [(3, 4), (3,)] or used:
        return _fail(
            ename,
            "0 (an empty pair of 3 rows, dv = 4)",
            f"returned {shapes or type(e).__name__}; expected (o, lse) of shapes (3, 4) and (3,)"
            if not used
            else _refusal(used),
        )
    e = tuple(np.asarray(t, dtype=float) for t in e)
    for i, (label, make, want) in enumerate(cases):
        where, given = f"{i} ({label})", []

        def logged(x, y, _given=given):
            _given.append((x, y))
            return fn(x, y)

        arrays = lambda: [t for pair in given for part in pair for t in part]  # noqa: E731
        make(lambda x, y: given.append((x, y)) or x, e)  # a dry run: which pairs go in
        before, given[:] = [np.array(t, copy=True) for t in arrays()], []
        res = _attempt(name, lambda: make(logged, e), (), where)
        if (
            res is _FAILED
            or not _judge(
                name,
                where,
                *res,
                want,
                ("o", "lse"),
                lambda got, p: _pair_hint(label, list(given[-1]), got, p, e),
                before[:4],  # the first call's x and y
                arrays()[:4],
            )
        ):
            print(seed_note(seed), end="")
            return
    print(
        f"{name}: ✓ passed {len(cases)} cases (= attention, the laws with {ename}, lse ±1000, "
        "empty rows)"
    )


# ------------------------------------------------------------------------------------ exercise 2: (o, lse) parts


def _synthetic(rng, C, shift=0.0):
    """C parts of 4 rows, lse_c near `shift` (per part and row, broadcast to (C, 4)); -inf there: empty, o_c = 0."""
    parts = [
        (rng.standard_normal((4, 5)), s + 3.0 * rng.standard_normal(4))
        for s in np.broadcast_to(shift, (C, 4))
    ]
    for o, lse in parts:
        o[np.isneginf(lse)] = 0.0
    return parts


def _merge_cases(fresh=None):
    """The fixed cases, then (with a generator `fresh`) real chunks of a fresh attention and lse 2000 apart by row."""
    rng, no = np.random.default_rng(41), -np.inf
    q, k, v = (
        rng.standard_normal((3, 8)),
        rng.standard_normal((60, 8)) * 1.5,
        rng.standard_normal((60, 4)),
    )
    real = {
        C: [
            attention_reference(q, k[j0:j1], v[j0:j1])
            for j0, j1 in random_chunk_bounds(60, C, seed=C)
        ]
        for C in (2, 7)
    }
    cases = [
        ("2 parts, real chunks of one attention", real[2]),
        ("1 part", _synthetic(rng, 1)),
        ("7 parts of uneven sizes", real[7]),
        ("4 parts, lse near +1000", _synthetic(rng, 4, 1000.0)),
        ("4 parts, lse near -1000", _synthetic(rng, 4, -1000.0)),
        (
            "5 parts, the last one empty: lse_c = -inf, o_c = 0",
            _synthetic(rng, 5, [[0], [0], [0], [0], [no]]),
        ),
        ("3 parts, row 2 empty in every part", _synthetic(rng, 3, [0, 0, no, 0])),
        (
            "4 parts, lse near +1000 and -1000 in one row; part 0 empty on row 3",  # rows: -+++, +---, ----, ∅+++
            _synthetic(
                rng,
                4,
                1000.0
                * np.array(
                    [[-1, 1, -1, no], [1, -1, -1, 1], [1, -1, -1, 1], [1, -1, -1, 1]]
                ),
            ),
        ),
    ]
    one_shot = attention_reference(q, k, v)
    out = [
        (
            label,
            parts,
            one_shot
            if label.startswith(("2 parts", "7 parts"))
            else merge_outputs([p[0] for p in parts], [p[1] for p in parts]),
        )
        for label, parts in cases
    ]
    if fresh is not None:
        C, M = int(fresh.integers(3, 7)), int(fresh.integers(20, 70))
        q, k, v = (
            fresh.standard_normal((3, 8)),
            fresh.standard_normal((M, 8)),
            fresh.standard_normal((M, 4)),
        )
        bounds = random_chunk_bounds(M, C, seed=int(fresh.integers(1_000_000)))
        real = [attention_reference(q, k[j0:j1], v[j0:j1]) for j0, j1 in bounds]
        out.append(
            (
                f"fresh, {C} parts, real chunks of one attention over {M} keys",
                real,
                attention_reference(q, k, v),
            )
        )
        C = int(fresh.integers(2, 6))
        parts = _synthetic(fresh, C, 1000.0 * fresh.choice([-1.0, 1.0], (C, 4)))
        out.append(
            (
                f"fresh, {C} parts, lse near +1000 and -1000 in one row",
                parts,
                merge_outputs([p[0] for p in parts], [p[1] for p in parts]),
            )
        )
    return out


def _merge_hint(label, parts, got, problem):
    O, L = (
        np.stack([p[0] for p in parts]),
        np.stack([p[1] for p in parts]),
    )  # (C, N, dv), (C, N)
    rows = _bad_rows(got, problem)
    if any(np.isneginf(L[:, r]).all() for r in rows):
        return "a row empty in every part has max lse_c = -inf, and -inf - (-inf) is NaN; such a row must come out o = 0, lse = -inf"
    if "in one row" in label:  # what passed every other case fails on the mix alone
        return (
            "subtract the row's largest lse_c (the larger m), not any one part's nor their mean: parts of one row "
            "lie 2000 apart, so e^(lse_c - shift) overflows (or all vanish) for any other shift"
        )
    if "1000" in label:
        try:
            lse_got = np.asarray(got[1], dtype=float).reshape(-1)
        except (TypeError, ValueError, IndexError):
            lse_got = None
        seen = ~np.isneginf(L).all(axis=0)  # rows whose merged lse is finite
        if lse_got is not None and lse_got.shape == seen.shape:
            if (~np.isfinite(lse_got[seen])).any():
                total = "e^lse_x + e^lse_y" if len(parts) == 2 else "Σ e^lse_c"
                return (
                    f"your lse is inf or -inf where the merged lse is finite: log({total}) "
                    f"overflows, since e^lse is inf near lse = +1000 and 0 near -1000 ({_OVERFLOW}); "
                    "take the row's largest lse_c, m, out first: lse = m + log(Σ e^(lse_c - m))"
                )
        if rows:
            return (
                f"e^{{lse_c}} is inf near lse = +1000 and 0 near -1000 ({_OVERFLOW}), and inf/inf or 0/0 "
                "is NaN: subtract the row's largest lse_c before exponentiating"
            )
    if rows and np.isneginf(L).any():
        return "an empty part (lse_c = -inf, o_c = 0) must weigh exactly 0; subtracting its -inf from anything gives NaN"
    with np.errstate(all="ignore"):
        m = L.max(axis=0)
        w = np.exp(L - np.where(np.isneginf(m), 0.0, m))  # (C, N)
        top = np.take_along_axis(O, L.argmax(axis=0)[None, :, None], axis=0)[0]
        share = w / np.where(w.sum(axis=0) > 0, w.sum(axis=0), 1.0)  # (C, N)
        known = [
            (
                0,
                (share[::-1, :, None] * O).sum(axis=0) if len(parts) == 2 else None,
                "your weights are swapped: o_x must go with x's own share e^(lse_x - lse) and o_y "
                "with e^(lse_y - lse); yours gives each o the other chunk's share",
            ),
            (
                0,
                top,
                "your o is the o_c of the chunk with the larger lse: that chunk holds most of the mass, "
                "not all of it; every chunk with mass counts, weighted by its share e^{lse_c} / e^{lse}",
            ),
            (
                0,
                O.mean(axis=0),
                "your o is the plain average of the o_c: each chunk counts by its share of the total "
                "mass e^{lse_c}, not equally",
            ),
            (
                0,
                (w[..., None] * O).sum(axis=0),
                "your o is not renormalized: the weights e^{lse_c - m} do not sum to 1",
            ),
            (
                0,
                (np.exp(L)[..., None] * O).sum(axis=0),
                "your o is not renormalized: divide by the sum of the weights",
            ),
            (
                1,
                m,
                "your lse is the largest lse_c; the merged lse is the log of the total mass of all chunks, above "
                "each part's when two parts hold mass",
            ),
            (
                1,
                np.log(w.sum(axis=0)),
                "your lse is missing the max you subtracted: add it back",
            ),
            (1, L.sum(axis=0), "lse values are logs: masses add, their logs do not"),
            (1, L.mean(axis=0), "lse values are logs: masses add, their logs do not"),
        ]
    k = 0 if problem.startswith("o ") else 1 if problem.startswith("lse ") else None
    text = next(
        (
            t
            for j, cand, t in known
            if j == k and cand is not None and _close(got, k, cand)
        ),
        None,
    )
    return text or {
        0: "o is the average of the o_c, each weighted by its chunk's share e^{lse_c} of the total mass",
        1: "lse is the log of the chunks' total mass",
    }.get(k, "return the tuple (o, lse)")


def check_merge_partials(
    fn, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `fn(parts)` -> (o, lse) over all parts: $lse = \\log \\sum_c e^{lse_c}$, $o = \\sum_c e^{lse_c - lse} o_c$; print one verdict.

    Cases: 1, 2 and 7 parts (real chunks of one attention against its one-shot answer), lse near ±1000, an
    empty part, a row empty in every part, fixed and drawn afresh each run (`seed` draws the same again); each also
    reversed and shuffled; the parts must stay unchanged. Taught in: notebooks/04_merge_order.ipynb
    """
    name = name or getattr(fn, "__name__", "merge_partials")
    rng, seed = _fresh(seed)
    cases, shuffle = _merge_cases(rng), np.random.default_rng(7)
    for i, (label, parts, want) in enumerate(cases):
        orders = [("", parts)] + (
            [
                (", parts in reversed order", parts[::-1]),
                (
                    ", parts shuffled",
                    [parts[j] for j in shuffle.permutation(len(parts))],
                ),
            ]
            if len(parts) > 1
            else []
        )
        for how, given in orders:
            before, where = [x.copy() for p in given for x in p], f"{i} ({label}{how})"
            pair = [
                f
                for n, f in getattr(fn, "__globals__", {}).items()
                if n == "merge_pair"
            ]
            with _spy_globals(fn, pair) as pairs, _counting_logs() as logs:
                res = _attempt(
                    name, fn, ([tuple(p) for p in given],), where, (_LOGADDEXP,)
                )
            folded = sum(len(c) for c in pairs.values())
            C, N = len(given), int(np.shape(given[0][1])[0])
            if res is not _FAILED and (folded or (C >= 3 and len(logs) > 2)):
                if folded or len(logs) == C - 1:  # one log a pairwise merge
                    hint = (
                        "that is a fold of pairwise merges, each a complete normalized result; merge all "
                        "C parts at once: one max over the C values of lse_c per row, the C weights, one "
                        "sum, one np.log call over all rows"
                    )
                elif len(logs) == N:
                    hint = (
                        f"that is one np.log call per row, in a loop over the {N} rows: take one np.log "
                        "call of the (N,) array of total masses, all rows at once, as a GPU's final step does"
                    )
                else:
                    hint = (
                        "the merge needs one np.log call over all rows, of each row's total mass: a log "
                        "per part or per pair is more (the weights e^(lse_c - m) need none, and lse_c is "
                        "already a log)"
                    )
                _fail(
                    name,
                    where,
                    f"your merge_partials called merge_pair {folded} times for {C} parts"
                    if folded
                    else f"your merge_partials made {len(logs)} np.log calls for {C} parts of {N} rows "
                    "(one call over all rows is asked)",
                    hint,
                )
                print(seed_note(seed), end="")
                return
            if res is _FAILED or not _judge(
                name,
                where,
                *res,
                want,
                ("o", "lse"),
                lambda got, p: _merge_hint(label, given, got, p),
                before,
                [x for p in given for x in p],
            ):
                print(seed_note(seed), end="")
                return
    print(
        f"{name}: ✓ passed {len(cases)} cases (1 to 7 parts, lse ±1000, empty parts), "
        "in any order"
    )


# ------------------------------------------------------------------------------------ exercise 3: chunked attention


def _qkv(rng, N, M, scale=1.0):
    return (
        rng.standard_normal((N, 8)) * scale,
        rng.standard_normal((M, 8)) * scale,
        rng.standard_normal((M, 4)),
    )


def _chunk_cases(fresh=None):
    rng = np.random.default_rng(42)
    drawn = []
    if fresh is not None:
        N, M = int(fresh.integers(1, 6)), int(fresh.integers(2, 20))
        drawn = [
            (f"fresh, {M} keys", *_qkv(fresh, N, M)),
            ("fresh, scores in the thousands", *_qkv(fresh, N, M, scale=30.0)),
        ]
    return [
        ("5 keys", *_qkv(rng, 3, 5)),
        ("1 key", *_qkv(rng, 3, 1)),
        ("one query, 16 keys", *_qkv(rng, 1, 16)),
        ("scores in the thousands", *_qkv(rng, 3, 6, scale=30.0)),
    ] + drawn


def _attention_cases(fresh=None):
    rng = np.random.default_rng(43)
    drawn = []
    if fresh is not None:
        chunk = int(fresh.integers(2, 9))
        M = chunk * int(fresh.integers(2, 6)) + int(fresh.integers(1, chunk))
        drawn = [
            (
                f"fresh, {M} keys in chunks of {chunk}",
                *_qkv(fresh, int(fresh.integers(1, 5)), M),
                chunk,
            ),
            ("fresh, scores in the thousands", *_qkv(fresh, 3, M, scale=30.0), chunk),
        ]
    return [
        ("", *_qkv(rng, 3, 48), 16),
        ("50 keys in chunks of 16: the last chunk has 2", *_qkv(rng, 3, 50), 16),
        ("chunks of 1 key", *_qkv(rng, 2, 9), 1),
        ("one chunk larger than M", *_qkv(rng, 2, 20), 64),
        ("one query", *_qkv(rng, 1, 37), 5),
        ("scores in the thousands", *_qkv(rng, 3, 30, scale=30.0), 7),
    ] + drawn


_shapes = lambda q, k, v: f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"  # noqa: E731


def _chunk_hint(label, q, k_c, v_c, got, problem):
    if _bad_rows(got, problem) and "thousands" in label:
        return (
            f"e^s overflows for scores in the thousands ({_OVERFLOW}): subtract the row's largest score before "
            "exponentiating, and count it back into lse_c"
        )
    s = q @ k_c.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    unscaled = attention_reference(q, k_c, v_c, scale=1.0)
    if _close(got, 0, unscaled[0]) or _close(got, 1, unscaled[1]):
        return "the scores are q·k / √d: the scale 1/√d is missing"
    if problem.startswith("lse_c ") and _close(got, 1, np.log(p.sum(axis=1))):
        return "lse_c is missing the max you subtracted: it is the log of the sum of e^s, not of e^(s - m)"
    if problem.startswith("o_c ") and _close(got, 0, p @ v_c):
        return "o_c is not normalized: divide by the sum of the weights"
    return (
        "o_c is the attention output of the queries over this chunk's keys alone"
        if problem.startswith("o_c ")
        else "lse_c is the log of the sum of e^s over the chunk's keys, s = q·k / √d"
    )


_WHOLE = "flash-decoding never takes a softmax over all M keys at once: each chunk is computed on its own keys"


def _coverage(k, calls, chunk):
    """What the recorded chunk_output calls say about the chunks: (problem, hint) in words, or None."""
    M = k.shape[0]
    if not calls:
        return "chunk_output was never called", _WHOLE + ", by chunk_output"
    sizes = [
        np.shape(args[1])[0] if len(args) > 1 and np.ndim(args[1]) == 2 else -1
        for args in calls
    ]
    if max(sizes) > chunk:
        return (
            f"chunk_output received {max(sizes)} keys in one call; a chunk holds at most chunk_size = {chunk}",
            _WHOLE
            if max(sizes) == M
            else "k[j0:j0 + chunk_size] holds `chunk_size` keys already (a slice stops before its end)"
            if max(sizes) == chunk + 1
            else "cut the keys, in order, into chunks of at most `chunk_size` keys",
        )
    index, seen = {row.tobytes(): j for j, row in enumerate(k)}, np.zeros(M, int)
    for args in calls:
        for row in np.asarray(args[1], dtype=float):
            seen[index.get(row.tobytes(), M - 1)] += row.tobytes() in index
    if (seen == 0).any() and seen.any():
        lost = np.flatnonzero(seen == 0)
        span = (
            f"key {lost[0]}"
            if len(lost) == 1
            else f"keys {lost[0]}..{lost[-1]}"
            if np.ptp(lost) == len(lost) - 1
            else f"{len(lost)} keys ({', '.join(map(str, lost[:3]))}, ...)"
        )
        tail = lost[-1] == M - 1 and M % chunk
        short = chunk > 1 and all(
            j % chunk == chunk - 1 for j in lost if j < M - M % chunk
        )
        return f"{span} never reached chunk_output", (
            f"{M} keys are not a multiple of {chunk}: the last chunk is shorter "
            "and still counts"
            if tail and len(lost) < chunk
            else f"the last key of every chunk is lost: k[j0:j0 + chunk_size] already holds {chunk} keys "
            "(a slice stops before its end), so do not subtract 1"
            if short
            else "every key belongs to one chunk"
        )
    if (seen > 1).any():
        j = int(np.flatnonzero(seen > 1)[0])
        return (
            f"key {j} reached chunk_output {seen[j]} times",
            "each key belongs to exactly one chunk: chunks do not overlap",
        )
    if len(calls) != -(-M // chunk):
        return (
            f"chunk_output was called {len(calls)} times; {M} keys in chunks of {chunk} make {-(-M // chunk)} chunks",
            "cut the keys, in order, into chunks of exactly `chunk_size` keys; only the last may be shorter",
        )
    return None


_BUILT = (
    "the answer is built from the chunks: pass the list of chunk_output's results, one per chunk, to "
    "merge_partials and return what it gives"
)


def _same(a, b) -> bool:
    try:
        return all(
            np.shape(x) == np.shape(y) and np.array_equal(x, y, equal_nan=True)
            for x, y in zip(a, b, strict=True)
        )
    except (TypeError, ValueError):
        return False


def _merged_chunks(merges, merged, outputs, answer) -> str | None:
    """None when one call of merge_partials received exactly the results chunk_output returned (one part per
    chunk, each as returned) and its result is the answer; else what happened instead, in words."""
    for args, result in zip(merges, merged):
        parts = list(args[0]) if args and isinstance(args[0], (list, tuple)) else []
        left = list(outputs)
        for part in parts:
            j = next((n for n, out in enumerate(left) if _same(part, out)), None)
            if j is None:
                break
            left.pop(j)
        else:
            if not left and _same(tuple(answer), tuple(result)):
                return None
            if not left:
                return "your answer is not what merge_partials returned for the chunks"
    sizes = [len(a[0]) if a and isinstance(a[0], (list, tuple)) else 0 for a in merges]
    return (
        f"merge_partials received {', '.join(map(str, sizes))} part(s) where chunk_output returned "
        f"{len(outputs)} results: no call merged exactly the chunks' results"
    )


def _passes(check, fn) -> bool:
    """True when `check(fn)` passes; what it prints is swallowed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check(fn)
    return "✓" in out.getvalue()


def _chunk_output_passes(chunk_output, sub: str, rng, seed) -> bool:
    """`chunk_output(q, k_c, v_c)` -> (o_c, lse_c) against attention on single chunks; prints the verdict of a failure."""
    for i, (label, q, k_c, v_c) in enumerate(_chunk_cases(rng)):
        where = f"{i} ({_shapes(q, k_c, v_c)}, {label})"
        res = _attempt(sub, chunk_output, (q, k_c, v_c), where)
        if res is _FAILED or not _judge(
            sub,
            where,
            *res,
            attention_reference(q, k_c, v_c),
            ("o_c", "lse_c"),
            lambda got, p: _chunk_hint(label, q, k_c, v_c, got, p),
        ):
            print(seed_note(seed), end="")
            return False
    return True


def check_chunked_attention(
    fn,
    chunk_output,
    merge_partials,
    *,
    name: str | None = None,
    seed: int | None = None,
) -> None:
    """Check `chunk_output(q, k_c, v_c)` on single chunks, then `fn(q, k, v, chunk_size)` -> `attention_reference(q, k, v)`; print one verdict.

    The calls `fn` makes to `chunk_output` and `merge_partials` are recorded: every key must reach
    `chunk_output` exactly once, in ceil(M / chunk_size) chunks of at most `chunk_size` keys, and the results must go
    through `merge_partials`. Cases: chunk not dividing M, chunk 1, chunk > M, one query, scores in the
    thousands, fixed and drawn afresh each run (`seed` draws the same again). Taught in: notebooks/04_merge_order.ipynb
    """
    name = name or getattr(fn, "__name__", "chunked_attention")
    sub = getattr(chunk_output, "__name__", "chunk_output")
    rng, seed = _fresh(seed)
    if not _chunk_output_passes(chunk_output, sub, rng, seed):
        return
    cases = _attention_cases(rng)
    for i, (label, q, k, v, chunk) in enumerate(cases):
        where = f"{i} ({_shapes(q, k, v)}, chunk_size={chunk}{', ' + label if label else ''})"
        returned: dict = {}
        with _spy_globals(fn, (chunk_output, merge_partials), returned) as calls:
            res = _attempt(name, fn, (q, k, v, chunk), where)
        if res is _FAILED:
            return
        cover = _coverage(k, calls[id(chunk_output)], chunk)
        problem = sharpen(
            diagnose(
                res[0],
                want := attention_reference(q, k, v),
                names=("o", "lse"),
                rtol=RTOL,
                atol=ATOL,
            ),
            res[0],
            want,
            ("o", "lse"),
        )
        if problem is not None:
            return _fail(
                name,
                where,
                problem,
                f"{cover[0]}; {cover[1]}"
                if cover
                else "chunk_output passes on its own and every key reached it once: look at the merge"
                if _passes(check_merge_partials, merge_partials)
                else "your merge_partials does not pass exercise 2's check yet: fix it first",
            )
        if cover is not None:
            return _fail(name, where, f"the values agree, but {cover[0]}", cover[1])
        if not calls[id(merge_partials)]:
            return _fail(
                name,
                where,
                "the values agree, but the chunks' results never went through merge_partials",
                "this exercise builds on exercise 2: merge the chunks with your merge_partials",
            )
        merged = _merged_chunks(
            calls[id(merge_partials)],
            returned[id(merge_partials)],
            returned[id(chunk_output)],
            res[0],
        )
        if merged is not None:
            return _fail(name, where, f"the values agree, but {merged}", _BUILT)
        if not _judge(
            name,
            where,
            *res,
            attention_reference(q, k, v),
            ("o", "lse"),
            lambda got, p: None,
        ):
            return
    print(
        f"{name}: ✓ passed {len(cases)} cases; each key reached chunk_output once, "
        "merge_partials merged"
    )


# ------------------------------------------------------------------------------------ exercise 3: a shared prefix


def _cascade_case(rng, S, P, lengths, scale=1.0):
    """q (S, 8), the shared prefix k_pre (P, 8), v_pre (P, 4), and one suffix (k_s, v_s) per sequence."""
    q, k_pre, v_pre = _qkv(rng, S, P, scale)
    suffixes = [tuple(_qkv(rng, 1, n, scale)[1:]) for n in lengths]
    return q, k_pre, v_pre, suffixes


def _cascade_cases(fresh=None):
    rng = np.random.default_rng(45)
    base = _cascade_case(rng, 3, 20, (5, 12, 2))
    q, k_pre, v_pre, suffixes = base
    cases = [
        ("suffixes of 5, 12 and 2 keys", *base),
        ("the same batch, its sequences in reverse order", q[::-1].copy(), k_pre,
         v_pre, suffixes[::-1]),
        ("sequence 1 has no suffix key yet (0 keys)", *_cascade_case(rng, 3, 9, (7, 0, 3))),
        ("one sequence", *_cascade_case(rng, 1, 16, (9,))),
        ("a prefix of 1 key", *_cascade_case(rng, 2, 1, (4, 1))),
        ("scores in the thousands", *_cascade_case(rng, 3, 6, (4, 0, 7), scale=30.0)),
    ]  # fmt: skip
    if fresh is not None:
        S, P = int(fresh.integers(2, 6)), int(fresh.integers(3, 30))
        lengths = [int(n) for n in fresh.integers(0, 16, S)]
        lengths[int(fresh.integers(S))] = 0  # one sequence has no suffix yet
        cases += [
            (f"fresh, suffixes of {lengths} keys", *_cascade_case(fresh, S, P, lengths)),
            ("fresh, scores in the thousands",
             *_cascade_case(fresh, S, P, lengths, scale=30.0)),
        ]  # fmt: skip
    return cases


def _per_row(q, k_pre, v_pre, suffixes, cut=None, pad=None):
    """Attention of each query row s over the prefix and its suffix: (o (S, dv), lse (S,)). `cut`: every suffix
    cut to its first `cut` keys; `pad`: every suffix padded with zero keys and values to `pad` keys."""
    rows = []
    for s, (k_s, v_s) in enumerate(suffixes):
        if cut is not None:
            k_s, v_s = k_s[:cut], v_s[:cut]
        if pad is not None:
            z = pad - len(k_s)
            k_s = np.concatenate([k_s, np.zeros((z, k_s.shape[1]))])
            v_s = np.concatenate([v_s, np.zeros((z, v_s.shape[1]))])
        k, v = np.concatenate([k_pre, k_s]), np.concatenate([v_pre, v_s])
        rows.append(attention_reference(q[s : s + 1], k, v))
    return np.concatenate([o for o, _ in rows]), np.concatenate(
        [lse for _, lse in rows]
    )


def _parts(q, k_pre, v_pre, suffixes):
    """The prefix's (o, lse) for every row, and each row's suffix (o, lse) ((0, -inf) for an empty suffix)."""
    pre = attention_reference(q, k_pre, v_pre)
    o_s, lse_s = np.zeros_like(pre[0]), np.full(len(suffixes), -np.inf)
    for s, (k_s, v_s) in enumerate(suffixes):
        if len(k_s):
            o, lse = attention_reference(q[s : s + 1], k_s, v_s)
            o_s[s], lse_s[s] = o[0], lse[0]
    return pre, (o_s, lse_s)


def _cascade_hint(label, case, got, problem, g, uses=()):
    """What the planted mistakes of exercise 3 would have returned, against `got`: the mistake, in words."""
    q, k_pre, v_pre, suffixes = case
    (o_p, lse_p), (o_s, lse_s) = _parts(*case)
    some = np.isfinite(lse_s)  # rows with a suffix
    lengths = [len(k) for k, _ in suffixes]
    empty = [s for s, n in enumerate(lengths) if n == 0]
    bad = _bad_rows(got, problem)
    if bad and "thousands" in label:
        return (
            f"lse is in the thousands here and e^lse overflows ({_OVERFLOW}): weigh the two parts by "
            "e^(lse_c - m), m the larger lse of the row, never by e^lse_c itself"
        )
    if bad and set(bad) <= set(empty):
        return (
            f"sequence {bad[0]} has no suffix key yet: its suffix part is the empty pair (o = 0, "
            "lse = -inf), which weighs nothing, so the row is the prefix's pair alone"
        )

    pair, empty_pair = g.get("merge_pair"), g.get("empty_pair")
    if callable(pair) and callable(empty_pair) and "merge_pair" in uses:
        if not _passes(lambda f: check_pair_merge(f, empty_pair), pair):
            return "your merge_pair does not pass exercise 1's check yet: fix it first"

    def like(k, want):
        try:
            g_ = np.asarray(got[k], dtype=float)
        except (TypeError, ValueError, IndexError):
            return False
        return g_.shape == np.shape(want) and bool(
            np.allclose(g_[some], np.asarray(want)[some], rtol=1e-7, atol=1e-10)
        )

    if some.any() and like(1, lse_p + lse_s):
        return (
            "lse_pre + lse_suf multiplies the two masses: masses add, so lse = "
            "log(e^lse_pre + e^lse_suf), computed as m + log(e^(lse_pre - m) + e^(lse_suf - m))"
        )
    if some.any() and like(0, o_p) and not like(0, o_s):
        return "o is the prefix's o alone: the suffix's pair never entered the merge"
    if some.any() and (like(0, (o_p + o_s) / 2) or like(0, o_p + o_s)):
        return (
            "o is not reweighted: each part's o counts by its share of the mass, e^(lse_c - lse), "
            "where lse is the row's total; not 1/2 each, not 1 each"
        )
    S = len(suffixes)
    if S > 1 and any(lengths):
        k_all = np.concatenate([k_pre] + [k for k, _ in suffixes])
        v_all = np.concatenate([v_pre] + [v for _, v in suffixes])
        if _close(got, 0, attention_reference(q, k_all, v_all)[0]):
            return (
                "every suffix was merged into every row: suffix s belongs to sequence s alone, so merge "
                "the pair of q[s] over k_s into row s only, not into all S rows"
            )
        for name_, order in (
            ("in reverse", suffixes[::-1]),
            ("shifted by one", suffixes[1:] + suffixes[:1]),
            ("shifted by one", suffixes[-1:] + suffixes[:-1]),
        ):
            if any(len(a[0]) != len(b[0]) or not np.array_equal(a[0], b[0])
                   for a, b in zip(order, suffixes)) and _close(
                got, 0, _per_row(q, k_pre, v_pre, order)[0]
            ):  # fmt: skip
                return (
                    f"row s got another sequence's suffix (the suffixes {name_}): merge suffix s "
                    "into row s, the pair of q[s] over k_s, and keep the rows in the order given"
                )
    if len(set(lengths)) > 1:
        if _close(got, 0, _per_row(*case, pad=max(lengths))[0]):
            return (
                "the suffixes were padded to one length with zero keys: a zero key is not absent, it "
                "scores 0 and carries mass e^0; attend to each suffix's own M_s keys"
            )
        if _close(got, 0, _per_row(*case, cut=min(lengths))[0]):
            return (
                "every suffix was cut to the shortest one's length: the suffixes differ in length, "
                "and each sequence keeps all of its M_s keys"
            )
        if _close(got, 0, _per_row(*case, cut=lengths[0])[0]):
            return (
                "every suffix was cut to the first one's length: the suffixes differ in length, "
                "and each sequence keeps all of its M_s keys"
            )
    if "reverse" in label and _close(got, 0, _per_row(*_cascade_cases()[0][1:])[0]):
        return "row s belongs to sequence s of this call: q[s] with suffixes[s], in the order given"
    return (
        "row s is attention of q[s] over the prefix and suffix s together: the prefix's pair of "
        "row s merged with the suffix's pair, as in exercise 1"
    )


def _prefix_calls(case, calls) -> tuple[str, str] | None:
    """What the recorded chunk_output calls say about the reads of the prefix and the suffixes, or None."""
    q, k_pre, v_pre, suffixes = case
    S = q.shape[0]
    rows = lambda a: {r.tobytes() for r in np.asarray(a, dtype=float)}  # noqa: E731
    pre = rows(k_pre)
    suf = [rows(k) for k, _ in suffixes]
    keys = [rows(a[1]) if len(a) > 1 and np.ndim(a[1]) == 2 else set() for a in calls]
    n_q = [np.shape(a[0])[0] if a and np.ndim(a[0]) == 2 else -1 for a in calls]
    with_pre = [i for i, ks in enumerate(keys) if ks & pre]
    joined = [i for i in with_pre if any(keys[i] & ss for ss in suf)]
    if not calls:
        return (
            "chunk_output was never called",
            "the prefix's part and each suffix's part come from chunk_output",
        )
    if joined:
        return (
            "chunk_output received prefix and suffix keys in one call",
            "a cascade never joins them: one call for the shared prefix, one for each suffix, "
            "then merge the pairs",
        )
    if len(with_pre) > 1:
        return (
            f"the prefix reached chunk_output {len(with_pre)} times",
            f"the prefix is shared: read it once, in one call with all {S} query rows against "
            "k_pre, not once per sequence",
        )
    if not with_pre:
        return (
            "the prefix never reached chunk_output",
            "the prefix's part, (o, lse) of all S queries against k_pre, comes from chunk_output",
        )
    if n_q[with_pre[0]] != S:
        return (
            f"the prefix's call of chunk_output had {n_q[with_pre[0]]} query rows, not {S}",
            "the prefix is read once for the whole batch: pass every sequence's query, all of q",
        )
    for s, ss in enumerate(suf):
        got = [i for i, ks in enumerate(keys) if ks & ss]
        if ss and not got:
            return (
                f"sequence {s}'s suffix never reached chunk_output",
                "each suffix's part comes from chunk_output too",
            )
        if any(n_q[i] != 1 for i in got):
            return (
                f"sequence {s}'s suffix reached chunk_output with "
                f"{max(n_q[i] for i in got)} query rows",
                f"only query s attends to suffix s: pass q[{s}:{s + 1}], one row, not all of q",
            )
    return None


def check_shared_prefix(
    fn, chunk_output, *, name: str | None = None, seed: int | None = None
) -> None:
    """Check `chunk_output(q, k_c, v_c)` on single chunks, then `fn(q, k_pre, v_pre, suffixes)`; print one verdict.

    S sequences share a prefix of keys (k_pre, v_pre) and each has its own suffix `suffixes[s] = (k_s, v_s)`,
    0 or more keys: row s of the answer is attention of q[s] over the prefix and suffix s. The calls `fn` makes to
    `chunk_output` are recorded: the prefix must be read once, with all S query rows; each suffix with its own
    query row, never joined with the prefix. Cases: unequal and empty suffixes, the batch reversed, one sequence,
    a prefix of 1 key, scores in the thousands, fixed and drawn afresh each run (`seed` draws the same again).
    Taught in: notebooks/04_merge_order.ipynb
    """
    name = name or getattr(fn, "__name__", "shared_prefix_decode")
    sub = getattr(chunk_output, "__name__", "chunk_output")
    rng, seed = _fresh(seed)
    if not _chunk_output_passes(chunk_output, sub, rng, seed):
        return
    cases = _cascade_cases(rng)
    g = getattr(fn, "__globals__", {})
    pair = [f for f in (g.get("merge_pair"),) if callable(f) and f is not chunk_output]
    for i, (label, *case) in enumerate(cases):
        q, k_pre = case[0], case[1]
        where = (
            f"{i} ({q.shape[0]} sequences, a prefix of {k_pre.shape[0]} keys, {label})"
        )
        with _spy_globals(fn, (chunk_output, *pair)) as calls:
            res = _attempt(name, fn, tuple(case), where)
        # exercise 1's merge took part, by whatever name it was reached
        uses = ("merge_pair",) if pair and calls[id(pair[0])] else ()
        if res is _FAILED:
            print(seed_note(seed), end="")
            return
        want = _per_row(*case)
        ok = _judge(
            name,
            where,
            *res,
            want,
            ("o", "lse"),
            lambda got, p: _cascade_hint(label, case, got, p, g, uses),
        )
        reads = _prefix_calls(case, calls[id(chunk_output)]) if ok else None
        if reads is not None:
            _fail(name, where, f"the values agree, but {reads[0]}", reads[1])
        if not ok or reads is not None:
            print(seed_note(seed), end="")
            return
    print(
        f"{name}: ✓ passed {len(cases)} cases (suffixes of unequal length, some empty, "
        "any order; the prefix read once)"
    )


# ------------------------------------------------------------------------------------ exercise 4: steps of each order


def _steps_reference(C: int) -> tuple[int, int]:
    """(sequential, tree) steps for C parts with unlimited processors: the chain's C - 1, the tree's ceil(log2 C)."""
    return C - 1, (C - 1).bit_length()


def _steps_hint(case, got, want):
    (C,) = case
    if isinstance(got, (tuple, list)) and tuple(got) == tuple(want):
        return None  # right, and refused for another reason: that reason says it all
    try:
        seq, tree = (float(x) for x in got)
    except (TypeError, ValueError):
        return "return two numbers: (steps of the sequential order, steps of the tree)"
    if seq != want[0]:
        return (
            "C parts need C - 1 merges, and in the chain each waits for the one before it"
            if seq == C
            else "the chain's merges wait for one another: count the merges"
        )
    if tree == C - 1:
        return "C - 1 is the tree's number of merges; its steps are its rounds, each merging disjoint pairs at once"
    if tree == np.log2(C) or tree == int(np.log2(C)):
        return f"at C = {C}, not a power of two, the last round still takes a step: round log2 C up"
    return "each round of the tree halves the number of live parts, rounded up"


def check_merge_steps(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(C)` -> (steps of the sequential order, steps of the tree) for C parts, one merge per processor per
    step and as many processors as wanted: $(C - 1, \\lceil \\log_2 C \\rceil)$; print one verdict.

    Fixed cases (1, 2, 8, 16, 32 and C not a power of two), then three drawn afresh each run (`seed` draws the same
    again); `lab.merge_depth` and `lab.merge_plan` are refused. Taught in: notebooks/04_merge_order.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [(1,), (2,), (8,), (16,), (32,), (12,), (100,)] + [
        (int(c),) for c in rng.integers(3, 5000, 3)
    ]
    check(
        fn,
        _steps_reference,
        cases,
        name=name or getattr(fn, "__name__", None) or "merge_steps",
        rtol=0,
        atol=0,
        names=("sequential", "tree"),
        hint=_steps_hint,
        properties=(_own_work("merge_depth", "merge_plan", "reduce_states"),),
        seed=seed,
    )


# ------------------------------------------------------------------------------------ exercise 4: the tree's rounds
def _n_rounds(n: int) -> str:
    """'1 round', '3 rounds'."""
    return f"{n} round" + ("" if n == 1 else "s")


def _rounds_problem(C, rounds):
    """What is wrong with `rounds` as a schedule of C parts, (problem, hint) in words, or None; also the one live
    slot left at the end."""
    try:
        rounds = [[(int(a), int(b)) for a, b in r] for r in rounds]
    except (TypeError, ValueError):
        return (
            "returned something that is not a list of rounds of pairs (a, b)",
            "return a list with one list per round, each holding pairs (a, b) of slot indices",
        ), None
    live = set(range(C))
    for n, r in enumerate(rounds):
        used = [s for pair in r for s in pair]
        bad = next((s for s in used if not 0 <= s < C), None)
        if bad is not None:
            return (
                f"round {n} names slot {bad}; the slots are 0..{C - 1}",
                "slot c holds part c at the start; a pair (a, b) names two live slots",
            ), None
        twice = next((s for s in used if used.count(s) > 1), None)
        if twice is not None:
            return (
                f"round {n} uses slot {twice} in two merges",
                "the merges of one round run at the same time, so they need disjoint pairs: "
                "a slot merged in this round is ready only for the next",
            ), None
        dead = next((s for s in used if s not in live), None)
        if dead is not None:
            return (
                f"round {n} merges slot {dead}, already used up",
                "after (a, b) slot b is empty: its part now lives in slot a",
            ), None
        live -= {b for _, b in r}
    if len(live) != 1:
        return (
            f"after your {_n_rounds(len(rounds))} {len(live)} slots are still live",
            "keep pairing the live slots until one is left; with an odd number of live slots the one "
            "left over stays live and waits for the next round",
        ), None
    want = (C - 1).bit_length()
    empty = next((n for n, r in enumerate(rounds) if not r), None)
    if empty is not None:
        return (
            f"round {empty} holds no merge",
            "a round with no pair does nothing and still counts as a step: leave it out"
            + (" (C = 1 is already merged: return [], no rounds)" if C == 1 else ""),
        ), None
    if len(rounds) > want:
        one = all(len(r) <= 1 for r in rounds)
        return (
            f"{_n_rounds(len(rounds))} for C = {C}; {_n_rounds(want)} "
            + ("is" if want == 1 else "are")
            + " enough",
            "one merge a round is the sequential chain: in each round pair up all the live slots at once"
            if one
            else "pair up every live slot in each round (with an odd count, one waits): each round then "
            "halves the live slots, rounded up",
        ), None
    return None, live.pop()


def check_tree_rounds(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(C)` -> the rounds of a tree reduction of C parts: a list of rounds, each a list of pairs `(a, b)`
    (slot a becomes a ⊕ b, slot b is used up), disjoint within a round, ending with one live slot, in
    $\\lceil \\log_2 C \\rceil$ rounds; the schedule is then run with the course's merge on C real chunks and must
    give attention over all keys. Print one verdict.

    Fixed C (1, 2, 3, 8, 12, 16) and three drawn afresh (`seed` draws the same again); lab's merge plans are
    refused. Taught in: notebooks/04_merge_order.ipynb
    """
    name = name or getattr(fn, "__name__", "tree_rounds")
    rng, seed = _fresh(seed)
    sizes = [1, 2, 3, 8, 12, 16] + [int(c) for c in rng.integers(5, 300, 3)]
    for C in sizes:
        where = f"C = {C}"
        res = _attempt(name, fn, (C,), where)
        if res is _FAILED:
            print(seed_note(seed), end="")
            return
        rounds, used = res
        if used:
            return _fail(name, where, _refusal(used))
        problem, last = _rounds_problem(C, rounds)
        if problem is not None:
            _fail(name, where, *problem)
            print(seed_note(seed), end="")
            return
        q, k, v = _qkv(rng, 2, 3 * C)
        parts = [
            attention_reference(q, k[3 * c : 3 * c + 3], v[3 * c : 3 * c + 3])
            for c in range(C)
        ]
        slots = list(parts)
        for r in rounds:
            for a, b in r:
                slots[int(a)], slots[int(b)] = (
                    merge_output_pair(slots[int(a)], slots[int(b)]),
                    None,
                )
        o, lse = slots[last]
        o_ref, lse_ref = attention_reference(q, k, v)
        if not (
            np.allclose(o, o_ref, rtol=RTOL, atol=1e-10) and np.allclose(lse, lse_ref)
        ):
            return _fail(
                name, where, "your schedule's merge is not attention over all the keys"
            )
    print(
        f"{name}: ✓ passed {len(sizes)} sizes of C (disjoint pairs, ceil(log2 C) rounds, "
        "= attention when run)"
    )


# ------------------------------------------------------------------------------------ exercise 5: what a tree costs
def _work_reference(C: int, dv: int) -> tuple[int, int, int, int]:
    """Per query row: (tree logs, tree numbers stored between rounds, all-at-once logs, all-at-once stored).

    A tree of C - 1 pairwise merges takes one log per merge and writes each result but the last, a pair of
    dv + 1 numbers, out for the next round; the all-at-once merge takes one log and keeps what it needs on chip.
    """
    return C - 1, (C - 2) * (dv + 1), 1, 0


def _work_hint(case, got, want):
    C, dv = case
    try:
        got = tuple(int(x) for x in got)
    except (TypeError, ValueError):
        return "return four numbers: (tree_logs, tree_stored, once_logs, once_stored)"
    if len(got) != 4:
        return "return four numbers: (tree_logs, tree_stored, once_logs, once_stored)"
    logs, stored, once_logs, once_stored = got
    rounds = (C - 1).bit_length()
    if logs != want[0]:
        if logs == rounds:
            return (
                "that is the number of rounds: each round merges several pairs, and every "
                "pairwise merge takes its own log, C - 1 merges in all"
            )
        if logs == C:
            return "C chunks need C - 1 merges, one log each"
        return "each pairwise merge returns a finished (o, lse): count the merges"
    if stored != want[1]:
        if stored == (C - 1) * (dv + 1):
            return (
                "the last merge's result is the output, which the all-at-once merge writes "
                "too: count only the results written out and read back by a later round"
            )
        if stored == (C - 2) * dv:
            return "each result written out is a pair: dv values of o and one lse"
        if stored == C * (dv + 1):
            return (
                "the C inputs are read by both orders: count what is stored in between"
            )
        return "each merge but the last writes its (o, lse) out for a later round to read back"
    if once_logs != want[2]:
        return (
            "the all-at-once merge takes one max and one sum over all C chunks first, "
            "then one log per row"
        )
    if once_stored != want[3]:
        return (
            "the all-at-once merge keeps its max, weights and sums on chip: nothing is "
            "written out and read back before the output"
        )
    return None


def check_merge_work(fn, *, name: str | None = None, seed: int | None = None) -> None:
    """Check `fn(C, dv)` -> per query row (tree logs, tree numbers stored between rounds, all-at-once logs,
    all-at-once stored) for C >= 2 chunks: $(C - 1, (C - 2)(d_v + 1), 1, 0)$; print one verdict.

    Fixed cases and three drawn afresh each run (`seed` draws the same again); lab's merge plans are refused.
    Taught in: notebooks/04_merge_order.ipynb
    """
    rng, seed = _fresh(seed)
    cases = [(2, 8), (8, 64), (12, 128), (3, 1)] + [
        (int(c), int(v))
        for c, v in zip(rng.integers(5, 500, 3), rng.integers(1, 257, 3))
    ]
    check(
        fn,
        _work_reference,
        cases,
        name=name or getattr(fn, "__name__", None) or "merge_work",
        rtol=0,
        atol=0,
        names=("tree_logs", "tree_stored", "once_logs", "once_stored"),
        hint=_work_hint,
        properties=(_own_work("merge_depth", "merge_plan", "reduce_states"),),
        seed=seed,
    )
