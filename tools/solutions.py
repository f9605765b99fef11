"""Hide the worked solutions until a learner opens them, in JupyterLab, on Colab and on GitHub.

    python tools/solutions.py notebooks/*.ipynb        (rewrites the notebooks in place; outputs untouched)

A code cell tagged `solution` gets JupyterLab's collapsed input (`metadata.jupyter.source_hidden`) and
Colab's form view (`metadata.cellView = "form"` with a first line `# @title ...`: Colab then shows the
title and a "show code" link). A markdown solution is wrapped in `<details>`, which JupyterLab, Colab,
GitHub and the static site all render closed. `make student` drops these cells altogether.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import nbformat

TITLE = "# @title "
DETAILS = "<details><summary>Worked answer (click to open)</summary>\n\n"


def is_solution(cell) -> bool:
    """A cell tagged `solution`."""
    return "solution" in cell.get("metadata", {}).get("tags", [])


def hide(cell) -> None:
    """Mark one solution cell hidden until opened (in place; idempotent)."""
    if cell.cell_type == "code":
        cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        cell.metadata["cellView"] = "form"
        first, _, rest = cell.source.partition("\n")
        if not first.startswith(TITLE):
            title = first.lstrip("# ").strip() if first.startswith("#") else ""
            if not title or title.lower() == "solution":
                title = "Worked solution"
            body = rest if first.startswith("#") else cell.source
            cell.source = (
                f"{TITLE}{title} (double-click or 'show code' to open)\n{body}"
            )
    elif cell.cell_type == "markdown" and not cell.source.lstrip().startswith(
        "<details>"
    ):
        cell.source = f"{DETAILS}{cell.source.strip()}\n\n</details>"


def is_hidden(cell) -> bool:
    """Whether a solution cell is already hidden as `hide` leaves it."""
    if cell.cell_type == "code":
        return (
            cell.metadata.get("jupyter", {}).get("source_hidden") is True
            and cell.metadata.get("cellView") == "form"
            and cell.source.startswith(TITLE)
        )
    return cell.source.lstrip().startswith(
        "<details>"
    ) and cell.source.rstrip().endswith("</details>")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=pathlib.Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        cells = [c for c in nb.cells if is_solution(c) and not is_hidden(c)]
        for cell in cells:
            hide(cell)
        if cells:
            nbformat.write(nb, path)
        print(f"{path}: {len(cells)} solution cell(s) hidden")
    return 0


if __name__ == "__main__":
    sys.exit(main())
