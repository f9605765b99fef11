"""tools/grade.py: every exercise a column, a mark that never lies, and a class graded to the end.

The end-to-end test grades a small class on notebook 01 (a correct, a wrong, a blank, a syntax-error, a
dead-kernel learner and a copy of the course's own notebook, worked solutions inside).
"""

import csv
import pathlib
import re
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import grade  # noqa: E402
import student  # noqa: E402

NB = "01_three_pass_softmax"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _blank(stem=NB):
    return student.student_copy(
        nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    )


def _solved(stem=NB):
    """The learner copy with every stub replaced by the worked solution the course has after it."""
    course = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    answers = {}
    for before, cell in zip(course.cells, course.cells[1:]):
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            answers.setdefault(before.source, cell.source.split("\n", 1)[1])
    nb = _blank(stem)
    for c in nb.cells:
        c.source = answers.get(c.source, c.source)
    return nb


def _edit(nb, old, new):
    cell = next(c for c in nb.cells if old in c.source)
    cell.source = cell.source.replace(old, new, 1)
    return nb


def test_the_exercises_are_the_headings_in_one_vocabulary():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        found = grade.exercises(nb)
        assert [e.number for e in found] == list(range(1, len(found) + 1)), path.name
        assert all(e.kind in grade.KINDS for e in found)
        headings = [
            line
            for c in nb.cells
            if c.cell_type == "markdown"
            for line in c.source.splitlines()
            if re.match(r"#+ Exercise \d", line) or re.match(r"\*\*\d+\. ", line)
        ]
        assert len(headings) == len(found), (path.name, headings)


def test_instructors_page_names_every_exercise_as_the_notebook_does():
    text = (ROOT / "INSTRUCTORS.md").read_text()
    rows = re.findall(
        r"^\| (\d\d(?:_\w+)?) \| (\d+) \| (.+?) \| ([\w-]+) \|", text, re.M
    )
    listed = [(nb, int(n), title, kind) for nb, n, title, kind in rows]
    stems = [p.stem for p in NOTEBOOKS]
    shared = {s[:2] for s in stems if sum(t[:2] == s[:2] for t in stems) > 1}
    want = []
    for (
        path
    ) in NOTEBOOKS:  # by number, or whole name where two notebooks share the number
        key = path.stem if path.stem[:2] in shared else path.stem[:2]
        for e in grade.exercises(nbformat.read(path, as_version=4)):
            want.append((key, e.number, e.name.split(" ", 1)[1], e.kind))
    assert listed == want
    assert (
        "make grade" in text and "make student" in text and ".venv/bin/python" in text
    )
    for kind in grade.KINDS:
        assert f"**{kind}**" in text  # the vocabulary is explained


def test_every_checked_exercise_has_a_check_cell_in_the_course():
    for path in NOTEBOOKS:
        course = grade.Course(path)
        for e in course.exercises:
            assert bool(course.checks[e.number]) == (e.kind != "question"), (
                path.name,
                e.number,
            )


def test_a_copy_with_solutions_is_refused_in_one_line():
    course = grade.Course(ROOT / "notebooks" / f"{NB}.ipynb")
    g = grade.run(ROOT / "notebooks" / f"{NB}.ipynb", course)
    assert g.note.startswith("refused") and "\n" not in g.note
    assert {v.mark for v in g.verdicts.values()} == {"✗"}
    # a Colab copy may lose the tags: the hidden form of a solution is enough
    nb = nbformat.read(ROOT / "notebooks" / f"{NB}.ipynb", as_version=4)
    for c in nb.cells:
        c.metadata.pop("tags", None)
    assert grade.solution_cells(nb) >= 3 and grade.solution_cells(_blank()) == 0


def test_untouched_copy_is_not_run_and_is_not_done(tmp_path):
    nbformat.write(_blank(), tmp_path / f"{NB}.ipynb")
    g = grade.run(
        tmp_path / f"{NB}.ipynb", grade.Course(ROOT / "notebooks" / f"{NB}.ipynb")
    )
    assert g.note.startswith("untouched") and {v.mark for v in g.verdicts.values()} == {
        "·"
    }


def _with_a_question() -> str:
    """The first notebook of the course with a question exercise (no check, an answer cell)."""
    return next(
        p.stem
        for p in NOTEBOOKS
        if any(e.kind == "question" for e in grade.Course(p).exercises)
    )


def test_a_question_is_answered_or_not_done():
    stem = _with_a_question()
    course = grade.Course(ROOT / "notebooks" / f"{stem}.ipynb")
    q = next(e for e in course.exercises if e.kind == "question")
    nb = _blank(stem)
    for c in nb.cells:
        c.execution_count = 1 if c.cell_type == "code" else None
    assert grade.judge(course, nb)[q.number].mark == "·"
    mine = grade.exercises(nb)[q.number - 1]
    answer = next(
        nb.cells[i] for i in mine.cells if "Your answer" in nb.cells[i].source
    )
    answer.source = "Your answer: alpha is always 1."
    v = grade.judge(course, nb)[q.number]
    assert v.mark == "✎" and "alpha is always 1" in v.why


def test_only_the_course_check_cell_counts():
    """A learner who prints a check line of their own, or edits the check cell, is not credited."""
    course = grade.Course(ROOT / "notebooks" / f"{NB}.ipynb")
    nb = _blank()
    ex = grade.exercises(nb)[0]
    for i in ex.cells:
        c = nb.cells[i]
        if c.cell_type == "code":
            c.execution_count = 1
            if c.source in course.checks[1]:
                c.source += "  # mine"
            c.outputs = [
                nbformat.v4.new_output(
                    "stream", name="stdout", text="row_overflow: ✓ passed\n"
                )
            ]
    v = grade.judge(course, nb)[1]
    assert v.mark == "✗" and "check cell" in v.why


def test_a_class_is_graded_to_the_end_with_a_report_each(tmp_path):
    cls = tmp_path / "class"
    wrong = _edit(
        _blank(),
        "def row_overflow(name, M):\n    raise NotImplementedError",
        "def row_overflow(name, M):\n    return 88",
    )
    copies = {
        "ana": _solved(),  # correct
        "ben": wrong,  # exercise 2 wrong, 1, 3 and 4 not done
        "cy": _blank(),  # untouched
        "dee": _edit(
            _solved(), "def safe_softmax(x, y, block):", "def safe_softmax(x, y, block)"
        ),  # syntax error
        "eve": _edit(
            _solved(),
            "def log_sum_exp(x):",
            "import os\n\nos._exit(1)\n\n\ndef log_sum_exp(x):",
        ),
        "fay": nbformat.read(
            ROOT / "notebooks" / f"{NB}.ipynb", as_version=4
        ),  # worked solutions inside
    }
    for who, nb in copies.items():
        (cls / who).mkdir(parents=True)
        nbformat.write(nb, cls / who / f"{NB}.ipynb")
    assert grade.main([str(cls), "--only", "01", "--timeout", "120"]) == 0
    with (cls / "grades" / "summary.csv").open(encoding="utf-8") as f:
        marks = {}
        for row in csv.DictReader(f):
            marks.setdefault(row["learner"], []).append(row["mark"])
    assert marks == {
        "ana": ["✓", "✓", "✓", "✓"],
        "ben": ["·", "✗", "·", "·"],
        "cy": ["·", "·", "·", "·"],
        "dee": ["✓", "✓", "✗", "✓"],  # exercise 4 needs nothing of exercise 3
        "eve": [
            "✓",
            "✓",
            "✓",
            "✗",
        ],  # the kernel died in exercise 4; the next was graded
        "fay": ["✗", "✗", "✗", "✗"],  # refused
    }
    summary = (cls / "grades" / "summary.md").read_text()
    assert (
        "| 1 The edges of a format, and of a row | 2 When a row of $M$ equal scores breaks |"
        in summary
    )
    assert "refused" in summary and "kernel died" in summary
    dee = (cls / "grades" / "dee.md").read_text()
    assert "SyntaxError" in dee
    assert "expected 12, got 88" in (cls / "grades" / "ben.md").read_text()
    assert {p.name for p in (cls / "grades").glob("*.md")} == {"summary.md"} | {
        f"{w}.md" for w in copies
    }


def test_a_cell_past_the_timeout_ends_that_notebook_only(tmp_path):
    course_dir, cls = tmp_path / "course", tmp_path / "class"
    course_dir.mkdir()
    nb = nbformat.v4.new_notebook()
    check = nbformat.v4.new_code_cell(
        "print('f: ✓ passed 1 case' if f() == 1 else 'f: ✗ wrong')"
    )
    check.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="f: ✓ passed 1 case\n")
    ]
    nb.cells = [
        nbformat.v4.new_markdown_cell("### Exercise 1 (warm-up): one"),
        nbformat.v4.new_code_cell("def f():\n    raise NotImplementedError"),
        check,
    ]
    nbformat.write(nb, course_dir / "00_demo.ipynb")
    for who, body in (
        ("slow", "import time\n\ntime.sleep(60)"),
        ("fast", "def f():\n    return 1"),
    ):
        (cls / who).mkdir(parents=True)
        mine = nbformat.read(course_dir / "00_demo.ipynb", as_version=4)
        mine.cells[1].source = body
        nbformat.write(mine, cls / who / "00_demo.ipynb")
    assert grade.main([str(cls), "--course", str(course_dir), "--timeout", "3"]) == 0
    text = (cls / "grades" / "summary.md").read_text()
    assert re.search(r"\| slow \| 0/1 \| ✗ \| a cell ran past the 3 s timeout", text)
    assert "| fast | 1/1 | ✓ |" in text


def test_verdicts_reads_check_lines_only():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x")]
    nb.cells[0].outputs = [
        nbformat.v4.new_output(
            "stream",
            name="stdout",
            text="score_bytes: ✓ passed 3 cases\nnoise: 3\nf: ✗ case 0 ...\ng: not implemented yet\n",
        )
    ]
    assert grade.verdicts(nb) == [("score_bytes", "✓"), ("f", "✗"), ("g", "·")]


def test_missing_folder_and_unmatched_only_are_clear_errors(tmp_path, capsys):
    assert grade.main([str(tmp_path / "nope")]) == 2
    assert "make student" in capsys.readouterr().out
    (tmp_path / "me").mkdir()
    nbformat.write(_blank(), tmp_path / "me" / f"{NB}.ipynb")
    assert grade.main([str(tmp_path / "me"), "--only", "05"]) == 2
    assert "only" in capsys.readouterr().out


def test_make_grade_passes_only():
    text = (ROOT / "Makefile").read_text()
    assert re.search(
        r"^grade:.*\n\t.*tools/grade\.py.*\$\(if \$\(ONLY\),--only \$\(ONLY\)",
        text,
        re.M,
    )


@pytest.mark.parametrize("name", ["grade", "student"])
def test_the_tools_say_to_use_the_venvs_python(name):
    doc = (ROOT / "tools" / f"{name}.py").read_text().split('"""')[1]
    assert ".venv/bin/python tools/" in doc


def test_an_old_copy_is_graded_by_exercise_number(tmp_path):
    """A copy made before the headings named their kind (`### Exercise 1: ...`, `**1. ...**`) still grades."""
    course = grade.Course(ROOT / "notebooks" / f"{NB}.ipynb")
    nb = _blank()
    for c in nb.cells:
        c.source = re.sub(
            r"^### Exercise (\d+) \([\w-]+\):",
            r"### Exercise \1:",
            c.source,
            flags=re.M,
        )
        c.execution_count = 1 if c.cell_type == "code" else None
    assert [e.number for e in grade.exercises(nb, loose=True)] == [1, 2, 3, 4]
    verdicts = grade.judge(
        course, nb
    )  # executed, but nothing printed: found, and no verdict
    assert all("no verdict" in v.why for v in verdicts.values())


def test_an_unreadable_copy_is_one_line_and_the_class_goes_on(tmp_path):
    (tmp_path / f"{NB}.ipynb").write_text("{ not json")
    g = grade.run(
        tmp_path / f"{NB}.ipynb", grade.Course(ROOT / "notebooks" / f"{NB}.ipynb")
    )
    assert g.note.startswith("unreadable") and "\n" not in g.note
    assert {v.mark for v in g.verdicts.values()} == {"✗"}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "learner").glob("*.ipynb")), ids=lambda p: p.stem
)
def test_no_learner_copy_holds_what_the_grader_counts_as_a_worked_solution(path):
    """A learner copy the grader would refuse (a worked answer left in it) loses the class that notebook."""
    assert grade.solution_cells(nbformat.read(path, as_version=4)) == 0


FAKE = "print('{name}: ✓ passed')"


@pytest.mark.parametrize(
    "stem, old, new, says",
    [
        (  # the check imported in an earlier cell, then redefined by the learner
            "03_one_pass_attention",
            "def one_pass_rows(Q, K, V, Bc, causal=False):",
            "def check_one_pass_rows(fn):\n    "
            + FAKE.format(name="one_pass_rows")
            + "\n\n\ndef one_pass_rows(Q, K, V, Bc, causal=False):",
            "check_one_pass_rows is not the course's",
        ),
        (  # the check replaced in its module
            NB,
            "def row_edges(",
            "import lab.checks.softmax as _s\n\n_s.check_row_edges = lambda *a, **k: "
            + FAKE.format(name="row_edges")
            + "\n\n\ndef row_edges(",
            "lab.checks.softmax.check_row_edges is not the course's",
        ),
        (  # print rewritten so that a ✗ reads as a ✓
            NB,
            "def row_edges(",
            "import builtins\n\n_p = builtins.print\nbuiltins.print = lambda *a, **k: "
            "_p(*(str(x).replace('✗', '✓') for x in a), **k)\n\n\ndef row_edges(",
            "print or sys.stdout is not the course's",
        ),
    ],
)
def test_a_replaced_check_is_not_credited(tmp_path, stem, old, new, says):
    """A learner's stand-in for a check (redefined, patched into lab's module, or print rewritten) makes the
    check cells it reaches fail, with the reason in the report: no ✓ comes from a stand-in."""
    course = grade.Course(ROOT / "notebooks" / f"{stem}.ipynb")
    path = tmp_path / f"{stem}.ipynb"
    nbformat.write(_edit(_blank(stem), old, new), path)
    g = grade.run(path, course, timeout=120)
    marks = {n: v.mark for n, v in g.verdicts.items()}
    assert "✓" not in marks.values(), g.verdicts
    assert any(says in v.why for v in g.verdicts.values()), g.verdicts
