"""Grade learners' copies: run each notebook and read the verdict of every exercise.

    .venv/bin/python tools/grade.py exercises/                 one learner's copies (a folder of notebooks)
    .venv/bin/python tools/grade.py class/ --only 03 05        a class: one sub-folder of copies per learner
    make grade [DIR=class/] [ONLY="03 05"]                     the same (DIR defaults to exercises/)

The exercises are the notebook's headings `### Exercise N (kind): title`, kind one of warm-up, build or
question, as in the course's notebook (notebooks/NN_*.ipynb) and INSTRUCTORS.md. Each is a column, marked

    ✓  its check passed             ✗  its check failed, a cell of the exercise raised, or it never ran
    ·  not done (the stub is left)  ✎  a question answered (no check: read the answer in the report)

A copy is run top to bottom in its own kernel, its saved outputs cleared first, errors allowed; a kernel
that dies or a cell that runs past the timeout ends that notebook (what did not run is ✗) and grading goes
on with the next. A check counts only from the course's own check cell, unchanged, calling the course's
own check: one redefined, replaced in lab's modules, or under a replaced print fails its cell. A copy that still holds
the worked solutions (a copy of notebooks/, not of exercises/) is refused, every exercise ✗, with the reason.
A copy whose cells are exactly the blank learner copy's is not run: every exercise is ·.

Written into --out (default: <folder>/grades/): a report per learner, <folder>/grades/<learner>.md, every
verdict with its diagnosis or answer; and the class's <folder>/grades/summary.md (the tables, also printed)
and <folder>/grades/summary.csv (a row per learner, notebook and exercise).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

try:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
except ImportError:  # run outside the course's virtual environment
    sys.exit(
        "grade.py needs the course's environment: run it as `.venv/bin/python tools/grade.py` "
        "(or `make grade`), after `make setup`"
    )

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from student import student_copy  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
KINDS = ("warm-up", "build", "question")
HEADING = re.compile(
    r"^### Exercise (?P<number>\d+) \((?P<kind>[\w-]+)\): (?P<title>.+?)\s*$"
)
# a learner's copy made from an earlier version of the course may head an exercise `### Exercise N: title`
# or `**N. Title.**`: its cells are still found by number
LOOSE = re.compile(r"^#{2,4} Exercise (?P<number>\d+)\b|^\*\*(?P<bold>\d+)\. ")
VERDICT = re.compile(r"^(?P<name>[\w<>.]+): (?P<verdict>✓|✗|not implemented yet)")
MARKS = {"✓": "✓", "✗": "✗", "not implemented yet": "·"}
SUMMARY = "summary"  # the class's table: <folder>/grades/summary.md and .csv
LEGEND = "✓ passed, ✗ wrong or did not run, · not done, ✎ question answered (read it in the report)"


@dataclass
class Exercise:
    """One `### Exercise N (kind): title` of a notebook and the indices of the cells under it."""

    number: int
    kind: str
    title: str
    cells: list = field(default_factory=list)

    @property
    def name(self) -> str:
        """The exercise as INSTRUCTORS.md names it: `N Title`."""
        return f"{self.number} {self.title[:1].upper()}{self.title[1:]}"


@dataclass
class Verdict:
    mark: str  # ✓ ✗ · ✎
    why: str = ""  # the check's lines, the error, or the learner's answer


@dataclass
class Graded:
    exercises: list  # [Exercise], the course's
    verdicts: dict  # {number: Verdict}
    note: str = ""  # one line: refused, untouched, kernel died, ...
    seconds: float = 0.0


def exercises(nb, loose: bool = False) -> list[Exercise]:
    """The notebook's exercises in order, each with the cells from its heading to the next heading.

    `loose`: also find the headings of an earlier version of the course (a learner's old copy), kind "?"."""
    out, current = [], None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                m = HEADING.match(line)
                old = LOOSE.match(line) if loose and not m else None
                if old:
                    number = int(old["number"] or old["bold"])
                    current = Exercise(number, "?", line.strip("#* "))
                    out.append(current)
                elif m:
                    if m["kind"] not in KINDS:
                        raise ValueError(
                            f"exercise {m['number']}: kind {m['kind']!r} is none of {', '.join(KINDS)}"
                        )
                    current = Exercise(int(m["number"]), m["kind"], m["title"])
                    out.append(current)
                elif line.startswith(("# ", "## ", "### ")):
                    current = None
        if current is not None:
            current.cells.append(i)
    return out


def check_lines(cell) -> list[tuple[str, str]]:
    """(name, mark) for every line `name: ✓ ...`, `name: ✗ ...`, `name: not implemented yet` a cell printed."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            for line in o.get("text", "").splitlines():
                m = VERDICT.match(line)
                if m:
                    out.append((m["name"], MARKS[m["verdict"]]))
    return out


def verdicts(nb) -> list[tuple[str, str]]:
    """(check name, mark) for every check line in an executed notebook, in order."""
    return [v for c in nb.cells if c.cell_type == "code" for v in check_lines(c)]


def solution_cells(nb) -> int:
    """How many cells hold a worked solution: tagged `solution`, or hidden as tools/solutions.py hides one."""
    return sum(
        "solution" in c.get("metadata", {}).get("tags", [])
        or (
            c.source.startswith("# @title ")
            and "solution" in c.source.partition("\n")[0].lower()
        )
        or c.source.lstrip().startswith("<details><summary>Worked answer")
        for c in nb.cells
    )


def fingerprint(nb) -> str:
    """A hash of the cells' types and sources (outputs, counts and metadata left out)."""
    text = "\0".join(f"{c.cell_type}\1{c.source}" for c in nb.cells)
    return hashlib.sha256(text.encode()).hexdigest()


class Course:
    """The course's notebook for one copy: its exercises, its check cells, and its blank learner copy."""

    def __init__(self, path: pathlib.Path):
        self.nb = nbformat.read(path, as_version=4)
        self.blank = student_copy(self.nb)
        self.exercises = exercises(self.nb)
        blank_ex = {e.number: e for e in exercises(self.blank)}
        # a check cell: a cell of the exercise whose committed output has a check line
        self.checks = {
            e.number: {
                self.nb.cells[i].source
                for i in e.cells
                if self.nb.cells[i].cell_type == "code"
                and check_lines(self.nb.cells[i])
            }
            for e in self.exercises
        }
        self.blank_sources = {
            n: [self.blank.cells[i].source for i in e.cells]
            for n, e in blank_ex.items()
        }
        self.blank_hash = fingerprint(self.blank)


def _error_line(o) -> str:
    value = str(o.get("evalue", "")).strip().splitlines()
    return f"{o.get('ename', 'Error')}: {value[0] if value else ''}".strip()


def judge(course: Course, nb, stopped: str = "") -> dict[int, Verdict]:
    """The verdict of every exercise of the course in an executed copy `nb` (`stopped`: why the run ended early)."""
    mine = {e.number: e for e in exercises(nb, loose=True)}
    out = {}
    for ex in course.exercises:
        if ex.number not in mine:
            out[ex.number] = Verdict(
                "✗", f"no heading `### Exercise {ex.number} (...)` in this copy"
            )
            continue
        cells = [nb.cells[i] for i in mine[ex.number].cells]
        code = [c for c in cells if c.cell_type == "code"]
        errors = [
            (c, o)
            for c in code
            for o in c.get("outputs", [])
            if o.get("output_type") == "error"
        ]
        unrun = [c for c in code if c.get("execution_count") is None]
        if ex.kind == "question" and not course.checks[ex.number]:
            changed = [
                c.source
                for c in cells
                if c.source not in course.blank_sources.get(ex.number, [])
            ]
            out[ex.number] = (
                Verdict("✎", "\n\n".join(changed)) if changed else Verdict("·")
            )
            continue
        checks = [c for c in code if c.source in course.checks[ex.number]]
        lines = [v for c in checks for v in check_lines(c)]
        said = "\n".join(
            o.get("text", "").strip()
            for c in checks
            for o in c.get("outputs", [])
            if o.get("output_type") == "stream"
        )
        if errors:
            c, o = errors[0]
            where = "the check" if c in checks else "your cell"
            out[ex.number] = Verdict("✗", f"{where} raised {_error_line(o)}")
        elif unrun:
            out[ex.number] = Verdict("✗", f"never ran ({stopped or 'not executed'})")
        elif not checks:
            out[ex.number] = Verdict(
                "✗",
                "its check cell is missing or was changed: only the course's own check counts",
            )
        elif not lines:
            out[ex.number] = Verdict(
                "✗", f"the check printed no verdict. {said}".strip()
            )
        else:
            marks = {m for _, m in lines}
            mark = "✗" if "✗" in marks else "·" if "·" in marks else "✓"
            out[ex.number] = Verdict(mark, said)
    return out


# Run first in every copy's kernel, before the learner's cells: the course's check functions as imported, to
# hold each check cell to them. A learner who redefines a check, replaces one in lab's modules, or replaces
# print or sys.stdout gets an error in the check cell (✗), not the verdict a stand-in would print.
GUARD = r"""
import builtins as _b, importlib as _il, pkgutil as _pk, sys as _sys, types as _ty

import lab.checks as _checks

for _info in _pk.iter_modules(_checks.__path__):
    _il.import_module(f"lab.checks.{_info.name}")


def _course_functions():
    return {
        (name, attr): val
        for name, mod in list(_sys.modules.items())
        if (name == "lab" or name.startswith("lab.")) and isinstance(mod, _ty.ModuleType)
        for attr, val in list(vars(mod).items())
        if callable(val)
    }


def _course_guard(ns, names, _first=_course_functions(), _print=print, _out=_sys.stdout):
    known = {id(v) for v in _first.values()}
    by_name = {attr: val for (_, attr), val in _first.items()}
    wrong = [f"{m}.{a}" for (m, a), v in _course_functions().items()
             if ((m, a) in _first and _first[m, a] is not v)
             or ((m, a) not in _first and a.startswith("check") and id(v) not in known)]
    wrong += [n for n in names
              if n.startswith("check") and n in by_name and n in ns and ns[n] is not by_name[n]]
    if _b.print is not _print or _sys.stdout is not _out:
        wrong.append("print or sys.stdout")
    if wrong:
        raise RuntimeError(
            f"{', '.join(wrong[:3])} is not the course's: it was redefined or replaced, "
            "and only the course's own check counts"
        )


_b.__course_guard__ = _course_guard
del _course_guard, _info
"""


def _guarded(source: str) -> str:
    """A check cell's source with the guard's call first, on the names the cell uses."""
    names = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", source)))
    return f"__course_guard__(globals(), {names!r})\n{source}"


def run(path: pathlib.Path, course: Course, timeout: int = 300) -> Graded:
    """Grade one copy: refuse it, pass it as untouched, or run it (outputs cleared) and judge it."""
    start = time.perf_counter()
    every = course.exercises
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # not JSON, or not a notebook
        why = f"unreadable: {type(err).__name__}: {str(err).strip().splitlines()[0]}"
        return Graded(every, {e.number: Verdict("✗", why) for e in every}, why)
    held = solution_cells(nb)
    if held:
        why = (
            f"refused: it holds {held} worked-solution cell(s), so its checks would test the course's answers "
            "(a copy of notebooks/; work in a learner copy: `make student`, or the README's Colab links)"
        )
        return Graded(every, {e.number: Verdict("✗", why) for e in every}, why)
    if fingerprint(nb) == course.blank_hash:
        return Graded(
            every,
            {e.number: Verdict("·") for e in every},
            "untouched (the blank copy): not run",
            time.perf_counter() - start,
        )
    checks = set().union(*course.checks.values())
    originals = {}  # each check cell, its source before the guard's call went first
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if cell.source in checks:
                originals[id(cell)] = cell.source
                cell.source = _guarded(cell.source)
    guard = nbformat.v4.new_code_cell(GUARD)
    nb.cells.insert(0, guard)
    stopped = ""
    try:
        NotebookClient(
            nb,
            timeout=timeout,
            # the guard imports lab's checks (and torch): its seconds are the grader's, not the learner's
            timeout_func=lambda cell: (
                max(timeout, 300) if cell.source == GUARD else timeout
            ),
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(ROOT / "notebooks")}},
        ).execute(
            stderr=subprocess.DEVNULL
        )  # the kernel's own log, not the learner's output
    except DeadKernelError:
        stopped = "the kernel died"
    except CellTimeoutError:
        stopped = f"a cell ran past the {timeout} s timeout"
    except (
        Exception
    ) as err:  # the kernel did not start, or the notebook is not one nbclient can run
        stopped = f"the run stopped: {type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    nb.cells.remove(guard)
    for cell in nb.cells:
        cell.source = originals.get(id(cell), cell.source)
    if stopped:
        ran = [c for c in nb.cells if c.cell_type == "code" and c.execution_count]
        stopped += f" after {len(ran)} cell(s)"
    return Graded(
        every, judge(course, nb, stopped), stopped, time.perf_counter() - start
    )


def learners(folder: pathlib.Path) -> dict[str, list[pathlib.Path]]:
    """{learner: notebooks}: the folder itself when it holds notebooks, else each sub-folder that does."""
    own = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if own:
        return {folder.name: own}
    return {
        d.name: sorted(d.glob("[0-9][0-9]_*.ipynb"))
        for d in sorted(folder.iterdir())
        if d.is_dir() and any(d.glob("[0-9][0-9]_*.ipynb"))
    }


def selected(path: pathlib.Path, only) -> bool:
    """Whether `--only` keeps this notebook: its name starts with one of the given numbers or names."""
    return not only or any(path.name.startswith(p) for p in only)


def _score(g: Graded) -> str:
    checked = [e for e in g.exercises if e.kind != "question"]
    questions = [e for e in g.exercises if e.kind == "question"]
    text = f"{sum(g.verdicts[e.number].mark == '✓' for e in checked)}/{len(checked)}"
    if questions:
        text += f", ✎ {sum(g.verdicts[e.number].mark == '✎' for e in questions)}/{len(questions)}"
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary(results: dict[tuple[str, str], Graded]) -> str:
    """A Markdown table per notebook: a row per learner, a column per exercise (named as in INSTRUCTORS.md)."""
    parts = [f"Marks: {LEGEND}.", ""]
    for stem in sorted({nb for _, nb in results}):
        rows = [(who, g) for (who, nb), g in results.items() if nb == stem]
        names = [
            e.name + (" (question)" if e.kind == "question" else "")
            for e in rows[0][1].exercises
        ]
        parts += [
            f"### {stem}",
            "",
            "| learner | passed | " + " | ".join(_cell(n) for n in names) + " | note |",
            "| --- | --- | " + " | ".join(":-:" for _ in names) + " | --- |",
        ]
        for who, g in rows:
            marks = " | ".join(g.verdicts[e.number].mark for e in g.exercises)
            parts.append(f"| {_cell(who)} | {_score(g)} | {marks} | {_cell(g.note)} |")
        parts.append("")
    return "\n".join(parts)


def report(who: str, results: dict[tuple[str, str], Graded]) -> str:
    """One learner's report: per notebook, every exercise's mark and why (the check's words, the error, the answer)."""
    parts = [f"# {who}", "", f"Marks: {LEGEND}.", ""]
    for (name, stem), g in results.items():
        if name != who:
            continue
        parts += [f"## {stem}: {_score(g)}", ""]
        if g.note:
            parts += [f"*{g.note}*", ""]
        for e in g.exercises:
            v = g.verdicts[e.number]
            parts.append(f"- {v.mark} **{e.name}** ({e.kind})")
            if v.why and not (g.note and v.why == g.note):
                parts += [
                    "",
                    "  ```text",
                    *[f"  {line}" for line in v.why.splitlines()],
                    "  ```",
                ]
        parts.append("")
    return "\n".join(parts)


def write_csv(path: pathlib.Path, results: dict[tuple[str, str], Graded]) -> None:
    """The class's CSV: a row per learner, notebook and exercise."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["learner", "notebook", "exercise", "title", "kind", "mark", "why"])
        for (who, stem), g in results.items():
            for e in g.exercises:
                v = g.verdicts[e.number]
                w.writerow(
                    [
                        who,
                        stem,
                        e.number,
                        e.name.split(" ", 1)[1],
                        e.kind,
                        v.mark,
                        v.why or g.note,
                    ]
                )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=LEGEND,
    )
    parser.add_argument(
        "folder", type=pathlib.Path, nargs="?", default=ROOT / "exercises"
    )
    parser.add_argument(
        "--only", nargs="*", default=None, help="notebook numbers or names (e.g. 03 05)"
    )
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=None,
        help="where the reports go (default: FOLDER/grades)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=300,
        help="seconds one cell may run (default 300)",
    )
    parser.add_argument(
        "--course",
        type=pathlib.Path,
        default=ROOT / "notebooks",
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(
            f"folder: {args.folder} is not a folder of copies (make one with `make student`)"
        )
        return 2
    found = learners(args.folder)
    if not found:
        print(f"folder: no notebooks NN_*.ipynb in {args.folder} or its sub-folders")
        return 2
    courses, results, start = {}, {}, time.perf_counter()
    for who, paths in found.items():
        for path in paths:
            if not selected(path, args.only):
                continue
            source = args.course / path.name
            if not source.exists():
                print(
                    f"skipped {who}/{path.name}: no notebook of that name in {args.course}",
                    file=sys.stderr,
                )
                continue
            if path.name not in courses:
                courses[path.name] = Course(source)
            g = run(path, courses[path.name], args.timeout)
            results[(who, path.stem)] = g
            print(
                f"graded {who}/{path.name}: {_score(g)} in {g.seconds:.1f} s {g.note}".rstrip(),
                file=sys.stderr,
            )
    if not results:
        print(f"only: no notebook of {args.folder} matches {' '.join(args.only or [])}")
        return 2
    out = args.out or args.folder / "grades"
    out.mkdir(parents=True, exist_ok=True)
    table = summary(results)
    (out / f"{SUMMARY}.md").write_text(table + "\n", encoding="utf-8")
    write_csv(out / f"{SUMMARY}.csv", results)
    for who in dict.fromkeys(w for w, _ in results):
        (out / f"{who}.md").write_text(report(who, results) + "\n", encoding="utf-8")
    print(table)
    print(
        f"{len(results)} notebook(s) of {len(dict.fromkeys(w for w, _ in results))} learner(s) graded in "
        f"{time.perf_counter() - start:.0f} s; reports in {out}/ ({SUMMARY}.md and .csv, and one per learner)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
