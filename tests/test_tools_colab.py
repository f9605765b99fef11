"""tools/colab.py: the repository address, the Colab cell, and every notebook carrying it first."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import colab  # noqa: E402

URL = colab.repository_url()
NOTEBOOKS = colab.notebook_paths()


def small_notebook(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title")] + [
        nbformat.v4.new_code_cell(s) for s in sources
    ]
    return nb


def test_repository_url_is_one_setting_in_pyproject():
    assert URL.startswith("https://github.com/") and not URL.endswith((".git", "/"))
    assert URL in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize(
    "text",
    [
        '[project]\nname = "x"\n',
        '[project.urls]\nRepository = "http://github.com/a/b"\n',
        '[project.urls]\nRepository = "https://gitlab.com/a/b"\n',
        '[project.urls]\nRepository = "https://github.com/a"\n',
    ],
)
def test_repository_url_rejects_missing_or_malformed(tmp_path, text):
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(ValueError, match="Repository"):
        colab.repository_url(tmp_path / "pyproject.toml")


def test_cell_is_skipped_by_nbval_and_acts_only_on_colab():
    source = colab.cell_source(URL)
    assert source.splitlines()[0] == "# NBVAL_SKIP"
    assert f"git+{URL}.git@v{colab.package_version()}" in source
    assert "--quiet" not in source and "-q" not in source.split()  # pip's output shows
    ast.parse(source)  # plain Python, no magics
    assert "google.colab" not in sys.modules
    namespace = {}
    exec(compile(source, "<colab cell>", "exec"), namespace)  # off Colab: does nothing
    assert "subprocess" not in namespace


def test_cell_on_colab_installs_the_release_and_says_so(monkeypatch, capsys):
    import subprocess
    import types

    calls = []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(
        subprocess, "run", lambda args, check: calls.append((args, check))
    )
    exec(compile(colab.cell_source(URL, "pkg", "9.8.7"), "<colab cell>", "exec"), {})
    pip = [sys.executable, "-m", "pip", "install"]
    assert calls == [
        ([*pip, "--no-deps", f"pkg @ git+{URL}.git@v9.8.7"], True),
        ([*pip, "ml_dtypes"], True),
    ]
    said = capsys.readouterr().out
    assert f"$ pip install --no-deps pkg @ git+{URL}.git@v9.8.7" in said
    assert "installed" in said and "v9.8.7" in said


def test_the_cell_names_a_release_that_exists():
    """The pinned version is the package's, and its tag is in the repository (else Colab's pip fails)."""
    version = colab.package_version()
    tag = colab.release_tag(version)
    for path in NOTEBOOKS:
        first = nbformat.read(path, as_version=4).cells[0].source
        assert f".git@{tag}" in first, path.name
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tags to look up")
    import subprocess

    tags = subprocess.run(
        ["git", "-C", str(ROOT), "tag", "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not tags:
        pytest.skip("this clone carries no tags (cloned without them)")
    assert tag in tags, (
        f"no git tag {tag} for version {version} in pyproject.toml: tag the release "
        f"(`git tag {tag} && git push origin {tag}`) or change the version"
    )


def test_the_cell_is_as_ruff_formats_it():
    import shutil
    import subprocess

    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    source = colab.cell_source(URL, colab.package_name())
    formatted = subprocess.run(
        [ruff, "format", "-"], input=source, capture_output=True, text=True, check=True
    ).stdout
    assert formatted.rstrip("\n") == source


def test_insert_then_refresh_is_idempotent_and_leaves_the_input_alone():
    nb = small_notebook("import lab")
    once = colab.with_colab_cell(nb, URL)
    assert len(nb.cells) == 2 and not colab.first_cell_ok(nb, URL)  # input untouched
    assert colab.first_cell_ok(once, URL) and len(once.cells) == 3
    twice = colab.with_colab_cell(once, URL)
    assert twice == once
    nbformat.validate(twice)


def test_refresh_replaces_a_stale_or_misplaced_cell():
    nb = colab.with_colab_cell(small_notebook("x = 1"), "https://github.com/old/place")
    assert not colab.first_cell_ok(nb, URL)
    nb.cells = nb.cells[1:] + nb.cells[:1]  # moved to the end
    fixed = colab.with_colab_cell(nb, URL)
    assert colab.first_cell_ok(fixed, URL)
    assert [c.source for c in fixed.cells[1:]] == ["# Title", "x = 1"]


def test_links_open_the_learner_copies_and_the_solutions_are_one_link_away():
    assert (
        colab.colab_link("https://github.com/o/r", "learner/00_a.ipynb")
        == "https://colab.research.google.com/github/o/r/blob/main/learner/00_a.ipynb"
    )
    assert (
        colab.binder_link("https://github.com/o/r")
        == "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/learner"
    )
    text = colab.docs_text("https://github.com/o/r", ["notebooks/00_a.ipynb"])
    assert "colab.research.google.com/github/o/r/blob/main/learner/00_a.ipynb" in text
    assert "colab.research.google.com/github/o/r/blob/main/notebooks/" not in text
    assert "(https://github.com/o/r/blob/main/notebooks/00_a.ipynb)" in text
    assert "binder/environment.yml" in text


def test_every_colab_link_in_the_readme_opens_a_committed_learner_copy():
    import re

    readme = (ROOT / "README.md").read_text()
    links = re.findall(
        r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/([^)\s]+)", readme
    )
    assert sorted(links) == sorted(f"learner/{p.name}" for p in NOTEBOOKS)
    for link in links:
        nb = nbformat.read(ROOT / link, as_version=4)
        assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells), link


def test_main_writes_then_check_passes(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\nversion = "1.2.3"\n[project.urls]\nRepository = "https://github.com/o/r"\n'
    )
    (tmp_path / "notebooks").mkdir()
    nbformat.write(small_notebook("x = 1"), tmp_path / "notebooks" / "00_a.ipynb")
    assert colab.main(["--check", "--root", str(tmp_path)]) == 1
    assert colab.main(["--root", str(tmp_path)]) == 0
    assert colab.main(["--check", "--root", str(tmp_path)]) == 0
    nb = nbformat.read(tmp_path / "notebooks" / "00_a.ipynb", as_version=4)
    assert colab.first_cell_ok(nb, "https://github.com/o/r", "pkg", "1.2.3")
    readme = (tmp_path / "README.md").read_text()
    assert readme.count(colab.START) == 1 and "mybinder.org/v2/gh/o/r" in readme


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_starts_with_the_colab_cell(path):
    nb = nbformat.read(path, as_version=4)
    assert colab.first_cell_ok(nb, URL, colab.package_name()), (
        f"{path.name}: run `.venv/bin/python tools/colab.py` to insert or refresh its Colab cell"
    )


def test_readme_section_is_current():
    assert colab.main(["--check"]) == 0, (
        "run `.venv/bin/python tools/colab.py` to refresh README.md"
    )
