"""What every chapter's checks share: matching a learner's result against planted classic mistakes, hints, guards.

Taught in: the exercises at the end of each notebook.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import textwrap
import threading

import numpy as np

from ..exercises import diagnose, not_yours


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


def _matches_everywhere(fn, wrong, cases, pick=lambda out: out) -> bool:
    """Whether `pick(fn(*case))` equals the mistake `wrong(*case)` on every case (an error counts as no)."""
    for c in cases:
        try:
            with np.errstate(all="ignore"):
                if not _same(pick(fn(*c)), wrong, c):
                    return False
        except Exception:
            return False
    return True


def _hint(mistakes, default: str, *, fn=None, cases=(), close=None):
    """A `lab.check` hint: the text of the first mistake `(wrong, text)` whose `wrong(*case)` equals yours, else `default`;
    None when the values agree (a property failed and says why itself).

    With `fn` and `cases`, a mistake that matches on the failing case by coincidence gives way to one that matches
    `fn` on every case (`fn` is run again, only under a failure). `close`: `(text, rtol)`, said when no mistake
    matches and yours agrees with the reference to `rtol` (a precision lost, not a formula wrong)."""

    def everywhere(w):
        return _matches_everywhere(fn, w, cases)

    def hint(case, got, want):
        with np.errstate(all="ignore"):
            if _same(got, want):
                return None
            found = [t for w, t in mistakes if _same(got, w, case)]
            if len(found) > 1 and fn is not None:
                found = [
                    t for w, t in mistakes if t in found and everywhere(w)
                ] or found
            if found:
                return found[0]
            if close and diagnose(got, want, rtol=close[1], atol=close[1]) is None:
                return close[0]
            return default

    return hint


def _fresh(seed: int | None = None):
    """`(rng, seed)`: the generator a check draws its fresh cases from, and its seed (a new one each run unless given)."""
    seed = int(np.random.SeedSequence().entropy % 1_000_000) if seed is None else seed
    return np.random.default_rng(seed), seed


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


# Array libraries other than numpy: while a numpy exercise runs, none of their code may run.
_OTHER_LIBRARIES = ("torch", "jax", "jaxlib", "cupy", "tensorflow", "scipy", "mlx")


def _check_helpers() -> dict:
    """The code of the functions written at the top level of each loaded `lab.checks` module (their references and
    planted mistakes are answers too), except this module's, the instruments handed to a learner (classes) and the
    functions those call, named in the module's `_INSTRUMENT_HELPERS`."""
    codes = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("lab.checks.") or name.endswith(
            ("._support", "._values")
        ):
            continue
        tools = getattr(
            module, "_INSTRUMENT_HELPERS", ()
        )  # what a counting array calls
        for attr, f in vars(module).items():
            if inspect.isfunction(f) and f.__module__ == name and attr not in tools:
                # through any decorator: a @contextmanager's own code is contextlib's, shared by every one
                codes[inspect.unwrap(f).__code__] = f"{name}.{attr}"
    return codes


def _course_code(names) -> dict:
    """The code objects of lab's answers `names` ("attention_bytes", or "tiling.flash_counts" for a module's own), each
    mapped to the name it is shown by: a function's code, a class's methods' code, through any decorator; and the
    checks' own references (`_check_helpers`)."""
    lab, codes = importlib.import_module("lab"), _check_helpers()
    for n in names:
        module, _, attr = n.rpartition(".")
        home = importlib.import_module(f"lab.{module}") if module else lab
        obj = getattr(home, attr, None)
        members = vars(obj).values() if isinstance(obj, type) else [obj]
        for f in members:
            code = getattr(inspect.unwrap(f), "__code__", None) if callable(f) else None
            if code is not None:
                codes[code] = f"lab.{n}"
    return codes


def _body(code) -> tuple:
    """What a function's code does, whatever its name or file: its bytecode, the names, constants and locals it uses."""
    return (code.co_code, code.co_names, code.co_varnames, repr(code.co_consts))


def _shape(code) -> tuple | None:
    """A longer function's bytecode and global names alone: the same answer with its constants edited (its docstring
    dropped, `code.replace(co_consts=...)`) or its locals renamed. None for a short one, which an honest answer may
    match by chance."""
    return (code.co_code, code.co_names) if len(code.co_code) >= 120 else None


def _copies_of(codes: dict) -> dict:
    """`_body` of each answer in `codes` (not the checks' helpers), as lab compiled it and as its source compiles
    afresh in a learner's cell (without lab's `from __future__`): a pasted or exec'd copy is the same answer."""
    out = {}
    for code, shown in codes.items():
        if shown.startswith("lab.checks."):
            continue
        out[_body(code)] = shown
        if _shape(code):
            out[_shape(code)] = shown
        try:
            fresh = compile(
                textwrap.dedent(inspect.getsource(code)),
                "<copy>",
                "exec",
                dont_inherit=True,
            )
        except (OSError, TypeError, SyntaxError):
            continue
        for c in fresh.co_consts:
            if getattr(c, "co_name", None) == code.co_name:
                out[_body(c)] = shown
                if _shape(c):
                    out[_shape(c)] = shown
    return out


def _library(name: str | None) -> bool:
    return bool(name) and name.split(".")[0] in _OTHER_LIBRARIES


def _c_name(fn) -> str | None:
    """`torch.softmax`, `Tensor.softmax` or `torch.nn.functional.scaled_dot_product_attention` for a C function of
    another array library; None for numpy's, Python's or anything else."""
    module = getattr(fn, "__module__", None)
    owner = type(getattr(fn, "__self__", None))
    if _library(module):
        module = module.replace("._C._nn", ".nn.functional").replace("._C", "")
        return f"{module}.{getattr(fn, '__name__', '?')}"
    if _library(owner.__module__):
        return f"{owner.__module__.split('.')[0]}.{owner.__name__}.{getattr(fn, '__name__', '?')}"
    return None


# What runs a learner's work where the profiler cannot see it (another process, a thread started without it, a thread
# started before the check, the profiler switched off for a while), or reads the check's own frames and values.
_ELSEWHERE = dict.fromkeys(
    ("subprocess", "multiprocessing", "_posixsubprocess"), "another process"
)
_WAITS = {
    ("queue", "Queue.get"): "another thread",
    ("threading", "Condition.wait"): "another thread",
    ("threading", "Event.wait"): "another thread",
    ("concurrent.futures._base", "Future.result"): "another thread",
}
_C_EVASIONS = {
    ("sys", "setprofile"): "sys.setprofile",
    ("threading", "setprofile"): "sys.setprofile",
    ("sys", "_getframe"): "the check's frames",
    ("sys", "_current_frames"): "the check's frames",
    ("sys", "exc_info"): "the check's frames",
    ("gc", "get_objects"): "the check's frames",
    ("gc", "get_referrers"): "the check's frames",
    ("gc", "get_referents"): "the check's frames",
    ("posix", "fork"): "another process",
    ("posix", "system"): "another process",
    ("posix", "posix_spawn"): "another process",
    ("posix", "execv"): "another process",
    ("posix", "popen"): "another process",
}


_FRAME_READERS = {"stack", "currentframe", "getouterframes", "trace", "getinnerframes"}


def _theirs(frame) -> bool:
    """True when `frame` runs the learner's code (a notebook cell, their own file), not lab's, a library's or Python's."""
    return not not_yours(frame.f_code.co_filename)


def _evasion(frame, fn) -> str | None:
    """What the C function `fn`, called from `frame`, does to escape `_watching` (see `_C_EVASIONS`), else None. A
    thread started by `threading.Thread.start` is watched (threading.setprofile); one started by `_thread` is not. The
    check's frames count only when the learner's own code reads them (numpy, torch and Python's library read theirs)."""
    module = (
        getattr(fn, "__module__", None) or type(getattr(fn, "__self__", None)).__name__
    )
    name = getattr(fn, "__name__", "")
    if name == "start_new_thread":
        return (
            None
            if frame.f_code.co_qualname == "Thread.start"
            and frame.f_globals.get("__name__") == "threading"
            else "another thread"
        )
    what = _C_EVASIONS.get((module, name))
    if what == "the check's frames" and not _theirs(frame):
        back = frame.f_back  # inspect.stack() and its kind, called by the learner
        reader = (
            frame.f_globals.get("__name__") == "inspect"
            and frame.f_code.co_name in _FRAME_READERS
        )
        return what if reader and back is not None and _theirs(back) else None
    return what


def _running_theirs() -> set:
    """The ids of the other threads (started before the check, unwatched) whose stack runs the learner's code now."""
    here, out = threading.get_ident(), set()
    for ident, frame in sys._current_frames().items():
        while ident != here and frame is not None:
            if _theirs(frame):
                out.add(ident)
                break
            frame = frame.f_back
    return out


@contextlib.contextmanager
def _watching(
    names=(), *, numpy_only: bool = False, forbid=(), reference=None, also=None
):
    """Record, in order, what runs inside the block that a learner's answer must not call: the code of lab's answers
    `names` (by any route: `lab.x`, `lab.module.x`, an alias, a closure, its source run again) as "lab.x" (and the checks' own reference
    functions, e.g. "lab.checks.softmax._softmax"; wrap only the learner's call in the block), and with `numpy_only` any
    function of torch, jax, cupy, tensorflow or scipy (a profile hook sees Python and C calls; torch's
    TorchFunctionMode sees its ops) as e.g. "torch.softmax". Every call still runs. "sys.setprofile" is recorded
    when the block's code replaced the hook. `forbid`: numpy functions that do the exercise's whole work (e.g.
    np.logaddexp), recorded as "numpy.logaddexp.reduce" (a ufunc's methods included)."""
    codes, seen = _course_code(names), []
    banned = {id(f): f"numpy.{f.__name__}" for f in forbid}
    copies = _copies_of(codes)  # lab's source compiled again (exec, a pasted copy)
    codes.update(
        also or {}
    )  # other code refused as itself only, e.g. torch.autograd.grad's, a mod lab builds
    code = getattr(inspect.unwrap(reference), "__code__", None) if reference else None
    if (
        code is not None
    ):  # the check's own reference, reached through its frames (itself only: an honest one-liner may match it)
        codes.setdefault(code, "the check's frames")
    known = {}  # code object -> what it is (a name, or None), decided at its first call

    def note(what):
        if what not in seen:
            seen.append(what)

    def watch(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code not in known:
                known[code] = (
                    codes.get(code)
                    or copies.get(_body(code))
                    or (_shape(code) and copies.get(_shape(code)))
                    or _ELSEWHERE.get(frame.f_globals.get("__name__", "").split(".")[0])
                    or _WAITS.get((frame.f_globals.get("__name__"), code.co_qualname))
                )
            if known[code]:
                note(known[code])
            elif numpy_only and _library(frame.f_globals.get("__name__")):
                note(f"{frame.f_globals['__name__']}.{frame.f_code.co_name}")
        elif (
            event == "c_call"
            and frame.f_globals.get("__name__") != __name__
            and _evasion(frame, arg)
        ):
            note(_evasion(frame, arg))
        if event == "c_call" and (numpy_only or banned):
            owner = banned.get(id(arg)) or banned.get(
                id(getattr(arg, "__self__", None))
            )
            if owner:
                note(owner if id(arg) in banned else f"{owner}.{arg.__name__}")
            what = _c_name(arg) if numpy_only else None
            if what:
                note(what)

    with contextlib.ExitStack() as stack:
        if (
            numpy_only and "torch" in sys.modules
        ):  # never import torch for a numpy notebook
            from torch.overrides import TorchFunctionMode

            class _Ops(TorchFunctionMode):
                def __torch_function__(self, func, types, args=(), kwargs=None):
                    method = "Tensor." if hasattr(func, "__objclass__") else ""
                    note(f"torch.{method}{getattr(func, '__name__', 'op')}")
                    return func(*args, **(kwargs or {}))

            stack.enter_context(_Ops())
        torch_before = "torch" in sys.modules
        before, threads_before = sys.getprofile(), threading.getprofile()
        sys.setprofile(watch)
        threading.setprofile(watch)  # a thread started inside is watched too
        elsewhere = _running_theirs()  # threads already running the learner's code
        try:
            yield seen
        finally:
            if sys.getprofile() is not watch:
                note("sys.setprofile")
            if elsewhere or _running_theirs():
                note("another thread")
            if numpy_only and not torch_before and "torch" in sys.modules:
                # torch's first import starts processes of its own: what the answer did is use torch
                seen[:] = [w for w in seen if w != "another process"]
                note("torch (imported by the answer)")
            sys.setprofile(before)
            threading.setprofile(threads_before)


# Moving data in and out says little; the message names what computed.
_CONVERSIONS = {
    "from_numpy",
    "tensor",
    "as_tensor",
    "asarray",
    "array",
    "numpy",
    "item",
    "tolist",
    "cpu",
    "to",
}
_CONVERSIONS |= {
    "detach",
    "float",
    "double",
    "clone",
    "contiguous",
    "__getitem__",
    "__array__",
    "__init__",
}


def _shown(seen: list) -> str:
    """At most three of the calls `_watching` recorded, the computing ones first, once each: "torch.softmax"."""
    lab = [w for w in seen if w.startswith(("lab.", "numpy."))] or [
        w for w in seen if w in _ESCAPES
    ]
    if lab:
        return lab[0]
    ops, last = [], set()
    for w in seen:
        parts = w.split(".")
        if (
            parts[-1] in _CONVERSIONS
            or any(p.startswith(("_", "<")) for p in parts[1:])  # `<module>`: an import
            or parts[-1][:1].isupper()  # a class built while importing (TorchVersion)
            or "overrides" in parts
        ):
            continue
        if parts[-1] not in last:
            ops.append(w)
            last.add(parts[-1])
    if not ops and seen and all(w.split(".")[0] == "torch" for w in seen):
        return (
            "torch"  # only torch's import was seen: name the library, not its internals
        )
    return ", ".join((ops or seen[:1])[:3])


_ESCAPES = {
    "sys.setprofile": "it replaces the profiler (sys.setprofile) that this check watches with, so the check cannot vouch for it",
    "another process": "it runs work in another process (subprocess, multiprocessing, os.fork), where this check cannot "
    "see what computes your answer: compute it in your function, in this process",
    "another thread": "it hands work to another thread (one started with _thread, or before the check, through a "
    "queue, an Event or a Future), where this check cannot see what computes your answer: compute it in your function",
    "the check's frames": "it reads the check's own frames or objects (sys._getframe, inspect.stack, gc.get_objects, "
    "a traceback), where the expected values live: compute your answer from the arguments alone",
}


def _refusal(seen) -> str:
    """Why the calls recorded by `_watching` (a list, or one name) prove nothing about the learner's own work."""
    what = _shown([seen] if isinstance(seen, str) else seen)
    if what in _ESCAPES:
        return _ESCAPES[what]
    if what.startswith("numpy."):
        return (
            f"it calls {what}, which does the whole of what this exercise asks you to write: write the "
            "steps yourself"
        )
    if what.startswith("lab."):
        return (
            f"it calls {what}, lab's own answer to this exercise (by whatever name reaches it): a check of lab's "
            "code proves nothing about yours, so write it yourself"
        )
    return (
        f"it calls {what}: this exercise asks for numpy, and {what.split('.')[0]}'s result proves nothing about "
        "the code you were asked to write; use numpy arrays and functions only"
    )


_PLAIN = (np.ndarray, np.generic, int, float, complex, str, bytes, dict, type(None))


def _settled(got):
    """`got` with every value that is not a plain one (an array, a number, a tuple or list of them, a torch tensor)
    turned into an array now, inside the watch: an object that computes only when the check converts it (its
    `__array__`, `__float__`, `__index__`) is watched like the rest."""
    if type(got) is tuple:
        return tuple(_settled(g) for g in got)
    if isinstance(got, tuple) and hasattr(got, "_fields"):  # a named tuple
        return type(got)(*(_settled(g) for g in got))
    if type(got) is list:
        return [_settled(g) for g in got]
    if (
        isinstance(got, _PLAIN)
        or callable(got)
        or type(got).__module__.split(".")[0] in ("torch", "lab", "triton")
    ):
        return got
    try:
        return np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return np.asarray(got)


_FICKLE = (
    "it gives another result when run again on the same case (watched, or after a first call): compute the answer "
    "from the arguments, the same each time"
)


def _own_work(*names, numpy_only: bool = False, forbid=()):
    """Property: `fn` leaves its input arrays as they were, runs none of lab's answers `names` by any route (see
    `_watching`), with `numpy_only` calls no other array library (torch, jax, cupy, tensorflow, scipy), and calls none
    of the numpy functions `forbid`."""

    verdicts = {}  # id(case) -> (case, verdict) of the watched run that gave the case's value

    def run(fn, case, reference=None):
        """`fn(*case)`, watched: the value `lab.check` compares is the one the watched run returned, so an answer that
        asks whether it is watched, or remembers an earlier call, gains nothing."""
        args = _copies(case)
        try:
            with _watching(
                names, numpy_only=numpy_only, forbid=forbid, reference=reference
            ) as called:
                got = _settled(getattr(fn, "raw", fn)(*args))
        except Exception:
            if not hasattr(fn, "raw"):
                raise
            got = fn(
                *case
            )  # the same error, with the note its wrapper (`_guarded`) adds
            verdicts[id(case)] = (case, _FICKLE)  # it raised only while watched
            return got
        verdicts[id(case)] = (case, verdict(called, args, case))
        return got

    def verdict(called, args, case):
        if called:
            return _refusal(called)
        if any(
            isinstance(a, np.ndarray) and not np.array_equal(a, b, equal_nan=True)
            for a, b in zip(args, case)
        ):
            return "it changes its input in place (e.g. `s -= m`): compute into a new array and leave the caller's scores alone"
        return None

    def prop(fn, case, got):
        if id(case) in verdicts and verdicts[id(case)][0] is case:
            return verdicts[id(case)][1]
        args = _copies(case)
        with _watching(names, numpy_only=numpy_only, forbid=forbid) as called:
            again = getattr(fn, "raw", fn)(*args)
        if (
            not called
            and got is not None
            and diagnose(again, got, rtol=0, atol=0) is not None
        ):
            return _FICKLE
        return verdict(called, args, case)

    prop.run = run
    return prop


@contextlib.contextmanager
def watch_course(names):
    """Record the names of lab's answers `names` whose code runs inside the block, by any route (`lab.x`, its module,
    an alias, a closure); each call still runs. A check reads the list afterwards to say which it was."""
    with _watching(names) as seen:
        called = []
        yield called
    called.extend(w.removeprefix("lab.") for w in seen)


def _element_hint(names, mistakes, defaults, *, whole=None, fn=None, cases=()):
    """A `lab.check` hint for a tuple answer: for each element that differs, the text of the first mistake
    `(i, wrong, text)` for element `i` whose `wrong(*case)` equals that element, else `defaults[i]`; the texts of
    all the wrong elements joined, each led by its name. `whole`: a `_hint` tried first, for mistakes that
    change several elements at once (None when it falls back to its default). With `fn` and `cases`, a mistake
    that matches on the failing case by coincidence gives way to one that matches `fn` on every case."""

    def everywhere(i, w):
        return _matches_everywhere(fn, w, cases, lambda out: out[i])

    def hint(case, got, want):
        with np.errstate(all="ignore"):
            if _same(got, want):
                return None
            if whole is not None:
                said = whole(case, got, want)
                if said is not None and said != "":
                    return said
            try:
                pairs = list(zip(got, want, strict=True))
            except TypeError:
                return "; ".join(defaults)
            except ValueError:  # a tuple of another length
                return f"it returns {len(got)} values: return {len(want)}: ({', '.join(names)})"
            said = []
            for i, (g, w) in enumerate(pairs):
                if _same(g, w):
                    continue
                found = [
                    (wr, t) for j, wr, t in mistakes if j == i and _same(g, wr, case)
                ]
                if len(found) > 1 and fn is not None:
                    found = [(wr, t) for wr, t in found if everywhere(i, wr)] or found
                found = [t for _, t in found]
                said.append(f"{names[i]}: {found[0] if found else defaults[i]}")
            return "; ".join(said) or "; ".join(defaults)

    return hint
