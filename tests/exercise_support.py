"""Run a notebook's exercises outside Jupyter: its setup, a worked or planted solution, and its check cell.

Each exercise in a notebook is a stub cell (raises NotImplementedError), a worked solution tagged
`solution`, and the check cell after it, in the `## Exercises` section or under an `### Exercise N`
heading inside a section (derive before the reveal), up to the next heading.
`exercises(name)` finds them; `run_check(ex, solution_source)` runs the notebook's setup, then the given source in place of the worked solution, then the check cell,
and returns what the check printed. Tests feed it the worked solution (must pass) and planted wrong
solutions (must fail, each with its diagnosis).
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import textwrap
from dataclasses import dataclass

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent


@dataclass
class Exercise:
    number: int
    spec: str  # the markdown cells between the previous exercise and this stub
    stub: str
    solution: str
    check: str
    setup: list  # the notebook's setup code (imports, lab.setup_notebook()), in order
    before: list  # the exercise section's code before this stub: earlier solutions and checks


def _runnable(source: str) -> str:
    """Drop IPython-only lines (magics, shell escapes) so plain exec runs the cell."""
    return "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
    )


def exercises(name: str) -> list[Exercise]:
    """The exercises of notebooks/<name>.ipynb, in order (stub, worked solution, check)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    setup, started, out, spec, before = [], False, [], [], []
    in_section = False  # inside the closing `## Exercises` section
    cells = nb.cells
    for c in cells:
        if c.cell_type == "markdown" and c.source.startswith("## "):
            break
        if c.cell_type == "code" and "NBVAL_SKIP" not in c.source:
            setup.append(_runnable(c.source))
    i = 0
    while i < len(cells):
        c = cells[i]
        if c.cell_type == "markdown":
            heads = [ln.strip() for ln in c.source.splitlines() if ln.startswith("#")]
            closing = "## Exercises" in heads
            if closing or any(h.startswith("### Exercise") for h in heads):
                started = (
                    True  # the exercises' section, or an exercise inside a section
                )
                in_section = in_section or closing
            elif any(h.startswith(("## ", "### ")) for h in heads) and not in_section:
                started = False  # the main text again: its cells are not an exercise's
        if started and c.cell_type == "markdown":
            spec.append(c.source)
        is_stub = (
            "raise NotImplementedError" in c.source
            and "solution" not in c.metadata.get("tags", [])
        )
        if started and c.cell_type == "code" and not is_stub:
            before.append(_runnable(c.source))
        if started and c.cell_type == "code" and is_stub:
            sol = next(
                j
                for j in range(i + 1, len(cells))
                if "solution" in cells[j].metadata.get("tags", [])
            )
            chk = next(
                j
                for j in range(sol + 1, len(cells))
                if cells[j].cell_type == "code"
                and "solution" not in cells[j].metadata.get("tags", [])
            )
            number = int(
                (
                    re.search(r"[Ee]xercise (\d+)", c.source)
                    or re.search(r"(\d+)", str(len(out) + 1))
                ).group(1)
            )
            out.append(
                Exercise(
                    number,
                    "\n".join(spec),
                    c.source,
                    # a solution may span cells (prose between): its code cells, joined
                    "\n".join(
                        _runnable(cells[j].source)
                        for j in range(sol, chk)
                        if cells[j].cell_type == "code"
                    ),
                    _runnable(cells[chk].source),
                    setup,
                    list(before),
                )
            )
            before += [
                _runnable(cells[j].source)
                for j in range(i + 1, chk + 1)
                if cells[j].cell_type == "code"
            ]
            spec, i = [], chk
        i += 1
    return out


def notebook_cells(name: str) -> list[tuple[str, str, list[str]]]:
    """(cell type, source, tags) of each cell of notebooks/NAME.ipynb."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]


def run_check(ex: Exercise, solution: str, extra: dict | None = None) -> str:
    """Run the setup and the section's earlier cells, then `solution` (source defining the learner's function),
    then the check cell; return what the check printed."""
    ns: dict = {"__name__": "__exercise__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for src in ex.setup + ex.before:
            exec(compile(src, "<setup>", "exec"), ns)
    ns.update(extra or {})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(solution, "<solution>", "exec"), ns)
        exec(compile(ex.check, "<check>", "exec"), ns)
    return out.getvalue()


def replace_code(source: str, old: str, new: str, count: int = 1) -> str:
    """`source` with `old` replaced by `new` (`count` times, 0 for all), whitespace matched loosely:
    the formatter may space or break a line differently from how a test quotes it."""
    pattern = r"\s*".join(re.escape(ch) for ch in old if not ch.isspace())
    assert re.search(pattern, source), f"the worked solution no longer contains {old!r}"
    return re.sub(pattern, lambda _: new, source, count=count)


def source(text: str) -> str:
    """A planted solution written indented inside a test, as a cell's source."""
    return textwrap.dedent(text).strip() + "\n"


def assert_says(out: str, *says: str | tuple[str, ...]) -> None:
    """Every phrase in `says` is in `out`; a tuple of phrases is met by any one of them (a fault that a case drawn
    for the run can make look like another, each hint naming it)."""
    for s in says:
        either = s if isinstance(s, tuple) else (s,)
        assert any(e in out for e in either), f"{s!r} not in:\n{out}"


def assert_fails(ex: Exercise, text: str, *says: str | tuple[str, ...]) -> str:
    """Run a planted wrong solution through the exercise's check: it must print ✗ and every phrase in `says`
    (`assert_says`)."""
    out = run_check(ex, source(text))
    assert "✗" in out and "✓" not in out, out
    assert_says(out, *says)
    return out


# Wrappers a learner could put around any answer to hide what it runs from a check's watch, each with the words of the
# refusal it must get: the profiler switched off for the call, the work done in a thread started by `_thread`, the
# check's frames read.
EVASIONS = {
    "the profiler switched off": (
        """
        import functools as _ft, sys as _sys
        def _evade(f):
            @_ft.wraps(f)
            def w(*a, **k):
                hook = _sys.getprofile()
                _sys.setprofile(None)
                try:
                    return f(*a, **k)
                finally:
                    _sys.setprofile(hook)
            return w
        """,
        "replaces the profiler (sys.setprofile)",
    ),
    "a _thread": (
        """
        import _thread, functools as _ft, time as _time
        def _evade(f):
            @_ft.wraps(f)
            def w(*a, **k):
                box = []
                _thread.start_new_thread(lambda: box.append(f(*a, **k)), ())
                while not box:
                    _time.sleep(0.0005)
                return box[0]
            return w
        """,
        "hands work to another thread",
    ),
    "the check's frames": (
        """
        import functools as _ft, inspect as _inspect
        def _evade(f):
            @_ft.wraps(f)
            def w(*a, **k):
                _inspect.stack()
                return f(*a, **k)
            return w
        """,
        "reads the check's own frames",
    ),
}


def evading(solution: str, name: str, how: str) -> str:
    """`solution` with its function `name` wrapped by the evasion `how` of `EVASIONS`."""
    return f"{solution}\n{source(EVASIONS[how][0])}\n{name} = _evade({name})\n"
