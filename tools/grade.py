"""Grade learners' copies: run each notebook and read the verdict of every exercise check.

    python tools/grade.py exercises/                 one learner's copies (a folder of notebooks)
    python tools/grade.py class/                     a class: one sub-folder of copies per learner
    make grade [DIR=class/]                          the same (DIR defaults to exercises/)

Each notebook runs top to bottom in its own kernel, errors allowed (a learner's bug must not stop the
grading). Every line a check prints, `name: ✓ ...`, `name: ✗ ...` or `name: not implemented yet`, is one
exercise's verdict. The table has a row per learner and notebook and a column per exercise, in order;
a cell that raised counts as ✗ for the checks it never reached.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
VERDICT = re.compile(r"^(?P<name>[\w<>.]+): (?P<verdict>✓|✗|not implemented yet)")
MARKS = {"✓": "✓", "✗": "✗", "not implemented yet": "·"}


def verdicts(nb) -> list[tuple[str, str]]:
    """(exercise name, mark) for every check line in an executed notebook, in order; ✓ passed, ✗ failed, · not done."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            for line in (
                o.get("text", "").splitlines()
                if o.get("output_type") == "stream"
                else []
            ):
                m = VERDICT.match(line)
                if m:
                    out.append((m["name"], MARKS[m["verdict"]]))
    return out


def run(path: pathlib.Path, timeout: int = 600) -> list[tuple[str, str]]:
    """Execute one learner's notebook (errors allowed) in the course's notebooks/ folder; return its verdicts."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    ).execute()
    return verdicts(nb)


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


def table(results: dict[tuple[str, str], list[tuple[str, str]]]) -> str:
    """Rows `learner  notebook  passed/total  name mark ...`, aligned."""
    rows = []
    for (who, nb), vs in results.items():
        done = sum(mark == "✓" for _, mark in vs)
        rows.append(
            (
                who,
                nb,
                f"{done}/{len(vs)}",
                "  ".join(f"{mark} {name}" for name, mark in vs),
            )
        )
    widths = [
        max(len(r[k]) for r in rows + [("learner", "notebook", "passed", "")])
        for k in range(3)
    ]
    head = (
        "learner",
        "notebook",
        "passed",
        "exercises (✓ passed, ✗ wrong, · not done)",
    )
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3]
        for r in [head] + rows
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "folder", type=pathlib.Path, nargs="?", default=ROOT / "exercises"
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="notebook names or prefixes (e.g. 03 05)",
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
    results = {}
    for who, paths in found.items():
        for path in paths:
            if args.only and not any(path.name.startswith(p) for p in args.only):
                continue
            results[(who, path.stem)] = run(path)
            print(f"graded {who}/{path.name}", file=sys.stderr)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
