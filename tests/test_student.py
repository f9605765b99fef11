"""Learner copies: solutions removed, changed copies kept, and every copy runs with the stubs unsolved."""

import json
import pathlib
import sys

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import student  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _tags(nb):
    return [t for c in nb.cells for t in c.get("metadata", {}).get("tags", [])]


def test_copies_drop_solutions_and_outputs(tmp_path):
    status = student.write_copies(ROOT / "notebooks", tmp_path, log=lambda *_: None)
    assert set(status) == {p.name for p in NOTEBOOKS} and set(status.values()) == {
        "written"
    }
    for p in NOTEBOOKS:
        copy = nbformat.read(tmp_path / p.name, as_version=4)
        original = nbformat.read(p, as_version=4)
        assert "solution" not in _tags(copy)
        assert len(copy.cells) == len(original.cells) - _tags(original).count(
            "solution"
        )
        assert all(not c.outputs for c in copy.cells if c.cell_type == "code")


def test_changed_copies_are_never_overwritten(tmp_path):
    messages = []
    student.write_copies(ROOT / "notebooks", tmp_path, log=messages.append)
    name = NOTEBOOKS[0].name
    mine = tmp_path / name
    mine.write_text(
        mine.read_text().replace(
            "NotImplementedError", "NotImplementedError  # my attempt", 1
        )
    )
    kept = mine.read_text()
    status = student.write_copies(ROOT / "notebooks", tmp_path, log=messages.append)
    assert status[name] == "skipped" and mine.read_text() == kept
    assert any("skipped" in m and "fresh copy" in m for m in messages)
    assert all(s == "unchanged" for n, s in status.items() if n != name)
    status = student.write_copies(
        ROOT / "notebooks", tmp_path, force={name}, log=messages.append
    )
    assert status[name] == "written" and mine.read_text() != kept
    assert json.loads((tmp_path / student.MANIFEST).read_text())[name]


def _exercises_start(nb) -> int:
    """Index of the markdown cell that opens the first exercise: `## Exercises`, or an `### Exercise N`
    heading inside a section (an exercise placed before the reveal it derives)."""
    for i, c in enumerate(nb.cells):
        if c.cell_type == "markdown" and any(
            line.strip() == "## Exercises" or line.startswith("### Exercise")
            for line in c.source.splitlines()
        ):
            return i
    raise AssertionError("no '## Exercises' heading")


def _setup_cells(nb) -> list:
    """The code cells before the first section: imports and `lab.setup_notebook()` (the Colab cell left out)."""
    out = []
    for c in nb.cells:
        if c.cell_type == "markdown" and c.source.startswith("## "):
            break
        if c.cell_type == "code" and "NBVAL_SKIP" not in c.source:
            out.append(c)
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_student_copy_runs_and_reports_unsolved_stubs(path):
    """A copy differs from the course only in its exercises; those run on the setup alone and report their stubs.

    Everything before the exercises is the course's own cells, unchanged, which strict nbval executes; so
    the learner's copy is run from its setup cell straight into the exercises (each notebook runs once).
    """
    original = nbformat.read(path, as_version=4)
    nb = student.student_copy(original)
    start = _exercises_start(nb)
    assert [c.source for c in nb.cells[:start]] == [
        c.source for c in original.cells[:start]
    ], (
        "a solution cell before the exercises: the copy would differ from what nbval runs"
    )
    stubs = sum(
        "raise NotImplementedError" in c.source
        for c in nb.cells[start:]
        if c.cell_type == "code"
    )
    if (
        "## Exercises" in nb.cells[start].source
    ):  # the exercises close the notebook: run them alone
        nb.cells = _setup_cells(nb) + nb.cells[start:]
    else:  # an exercise inside a section: the main text after it needs what came before
        nb.cells = [c for c in nb.cells if "NBVAL_SKIP" not in c.source]
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    ).execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors, errors[0].get("ename") if errors else ""
    text = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert stubs >= 1 and text.count("not implemented yet") >= min(stubs, 2)


# ------------------------------------------------------------------ learner/: the copies Colab and Binder open


def test_committed_learner_copies_are_in_step_with_the_notebooks():
    stale = student.publish(check=True)
    assert not stale, (
        f"learner/ is out of step with notebooks/ ({', '.join(stale)}): run "
        "`.venv/bin/python tools/student.py --publish` and commit learner/"
    )


def test_publish_writes_removes_and_then_finds_nothing_to_do(tmp_path):
    out = tmp_path / "learner"
    out.mkdir()
    (out / "99_gone.ipynb").write_text("{}")
    stale = student.publish(ROOT / "notebooks", out)
    assert set(stale) == {p.name for p in NOTEBOOKS} | {"99_gone.ipynb"}
    assert not (out / "99_gone.ipynb").exists()
    assert student.publish(ROOT / "notebooks", out, check=True) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_learner_copy_is_a_valid_notebook_without_solutions(path):
    copy = nbformat.read(ROOT / "learner" / path.name, as_version=4)
    nbformat.validate(copy)
    assert "solution" not in _tags(copy)
    assert "@title" not in "".join(c.source for c in copy.cells)
    assert all(not c.outputs for c in copy.cells if c.cell_type == "code")
    assert (
        copy.metadata.kernelspec
        == nbformat.read(path, as_version=4).metadata.kernelspec
    )


# ------------------------------------------------ opening a notebook in JupyterLab leaves git status clean


def _installed_kernelspec():
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager().get_kernel_spec("python3")


@pytest.mark.parametrize(
    "path",
    NOTEBOOKS + sorted((ROOT / "learner").glob("*.ipynb")),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_kernelspec_is_what_jupyterlab_writes(path):
    """JupyterLab rewrites the kernelspec to the running kernel's on save; committed as that, autosave changes nothing."""
    spec = _installed_kernelspec()
    assert nbformat.read(path, as_version=4).metadata.kernelspec == {
        "display_name": spec.display_name,
        "language": spec.language,
        "name": "python3",  # what nbval and tools/grade.py start
    }
