"""tools/grade.py: runs learners' copies and tabulates each exercise's verdict."""

import pathlib
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import grade  # noqa: E402


def _copy(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


def _notebook(answer: str):
    return _copy(
        [
            "import numpy as np\nimport lab",
            f"def double(x):\n    {answer}",
            "lab.check(double, lambda x: 2 * x, [(np.ones(3),)])",
            "def half(x):\n    raise NotImplementedError",
            "lab.check(half, lambda x: x / 2, [(np.ones(3),)])",
        ]
    )


def test_a_class_is_graded_learner_by_learner(tmp_path, capsys):
    for who, answer in (
        ("ana", "return 2 * x"),
        ("ben", "return x + 2"),
        ("cy", "return x[5]"),
    ):
        (tmp_path / who).mkdir()
        nbformat.write(_notebook(answer), tmp_path / who / "00_demo.ipynb")
    assert grade.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["learner", "notebook", "passed"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert (
        "1/2" in rows["ana"] and "✓ double" in rows["ana"] and "· half" in rows["ana"]
    )
    assert "0/2" in rows["ben"] and "✗ double" in rows["ben"]
    assert "✗ double" in rows["cy"]  # an IndexError is reported by the check as ✗


def test_verdicts_reads_check_lines_only():
    nb = _copy(["x"])
    nb.cells[0].outputs = [
        nbformat.v4.new_output(
            "stream",
            name="stdout",
            text="score_bytes: ✓ passed 3 cases\nnoise: 3\nf: ✗ case 0 ...\n",
        )
    ]
    assert grade.verdicts(nb) == [("score_bytes", "✓"), ("f", "✗")]


def test_missing_folder_is_a_clear_error(tmp_path, capsys):
    assert grade.main([str(tmp_path / "nope")]) == 2
    assert "make student" in capsys.readouterr().out


def test_instructors_page_lists_every_notebooks_exercises():
    import re

    text = (ROOT / "INSTRUCTORS.md").read_text()
    listed = {
        m.group(1) for m in re.finditer(r"^\| (\d\d(?:_\w+)?) \| \d+ \|", text, re.M)
    }
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    shared = {s[:2] for s in stems if sum(t[:2] == s[:2] for t in stems) > 1}
    # a notebook is named by its number, or by its whole name where two notebooks share the number
    notebooks = {s if s[:2] in shared else s[:2] for s in stems}
    assert listed == notebooks
    assert "make grade" in text and "make student" in text
