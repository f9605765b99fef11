"""Worked solutions stay hidden until opened (JupyterLab, Colab, GitHub, the site); tools/solutions.py hides them."""

import pathlib
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import solutions  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_solution_cell_is_hidden_until_opened(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if solutions.is_solution(c)]
    assert cells, "every notebook has worked solutions"
    shown = [c.source.splitlines()[0] for c in cells if not solutions.is_hidden(c)]
    assert not shown, (
        f"run `python tools/solutions.py {path.relative_to(ROOT)}`: shown solutions {shown}"
    )


def test_hide_is_idempotent_and_keeps_the_code():
    code = nbformat.v4.new_code_cell(
        "# Solution\ndef f():\n    return 1", metadata={"tags": ["solution"]}
    )
    text = nbformat.v4.new_markdown_cell(
        "Because **l** only grows.", metadata={"tags": ["solution"]}
    )
    for cell in (code, text):
        solutions.hide(cell)
        once = cell.source
        solutions.hide(cell)
        assert cell.source == once and solutions.is_hidden(cell)
    assert code.source.startswith("# @title Worked solution") and code.source.endswith(
        "def f():\n    return 1"
    )
    assert (
        code.metadata["jupyter"]["source_hidden"] is True
        and code.metadata["cellView"] == "form"
    )
    assert (
        text.source.startswith("<details>")
        and "Because **l** only grows." in text.source
    )
    ns = {}
    exec(code.source, ns)
    assert ns["f"]() == 1
