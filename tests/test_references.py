"""The course cites only what a learner can open: files in this repository and public sources.

Every path a notebook, a module, a tool or a README names must exist in the repository; names of
documents that were never part of it (a facts sheet, a contract, the drafts the course grew from) must
not appear at all. Public sources are listed, with their sections, in REFERENCES.md.
"""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = sorted(
    [
        *ROOT.glob("notebooks/*.ipynb"),
        *ROOT.glob("lab/**/*.py"),
        *ROOT.glob("tools/*.py"),
        *ROOT.glob("tools/*.sh"),
        ROOT / "README.md",
        ROOT / "REFERENCES.md",
        ROOT / "data/README.md",
        ROOT / "Makefile",
    ]
)
# Documents a learner cannot open, and phrases that point at them.
UNREACHABLE = re.compile(
    r"FACTS\.md|API\.md|STYLE\.md|\.\./shared|shared/seeds|seed write-up|write-up's|"
    r"the issue's|API contract|the contract\b",
    re.I,
)
# A path: at least one folder and a file name with an extension a course file has.
PATH = re.compile(
    r"(?<![\w/.:-])((?:\.\.?/)*(?:[\w.-]+/)+[\w.-]+\.(?:md|py|ipynb|json|npz|sh|cfg|ya?ml|toml|txt))\b"
)
BARE_MD = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")
# Paths that exist only after a command has run, or outside the repository by design.
MADE_LATER = ("build/", "exercises/", ".venv/", "aten/src/", "/tmp/", "~/")


def _text(path: pathlib.Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join(
        "".join(c["source"]) for c in cells
    )  # what the course says, not what it printed


def _without_urls(text: str) -> str:
    return re.sub(r"https?://\S+", " ", text)


@pytest.mark.parametrize(
    "path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES]
)
def test_no_reference_to_a_document_outside_the_repository(path):
    hits = sorted({m.group(0) for m in UNREACHABLE.finditer(_text(path))})
    assert not hits, (
        f"{path.relative_to(ROOT)} cites what a learner cannot open: {hits}"
    )


@pytest.mark.parametrize(
    "path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES]
)
def test_every_named_file_exists(path):
    text = _without_urls(_text(path))
    missing = []
    for ref in {m.group(1) for m in PATH.finditer(text)}:
        if ref.lstrip("./").startswith(MADE_LATER) or re.search(
            r"NN_|\d\d_x\.", ref
        ):  # made later, or a pattern
            continue
        if not ((ROOT / ref).exists() or (path.parent / ref).exists()):
            missing.append(ref)
    files = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    missing += [m.group(1) for m in BARE_MD.finditer(text) if m.group(1) not in files]
    assert not missing, (
        f"{path.relative_to(ROOT)} names files that are not in the repository: {sorted(set(missing))}"
    )


def test_references_page_lists_the_primary_sources():
    text = (ROOT / "REFERENCES.md").read_text()
    for source in (
        "2205.14135",
        "2307.08691",
        "2407.08608",
        "1805.02867",
    ):  # FlashAttention 1-3, online softmax
        assert source in text


NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_links_between_notebooks_are_to_siblings(path):
    """A link from one notebook to another names the sibling file, so that it opens the copy beside it in
    exercises/ or learner/ as well as in notebooks/; each linked notebook exists."""
    links = re.findall(r"\]\(([^)\s]+\.ipynb)(?:#[^)]*)?\)", _text(path))
    assert not [x for x in links if "/" in x], f"{path.name} links by a folder: {links}"
    assert all((path.parent / x).exists() for x in links), links


def _sections(path: pathlib.Path) -> set:
    cells = json.loads(path.read_text())["cells"]
    heads = (re.match(r"## (\d+)\.", "".join(c["source"])) for c in cells)
    return {int(m.group(1)) for m in heads if m}


def test_references_name_notebook_sections_that_exist():
    """REFERENCES.md's "Notebook NN_name (§k)" names one notebook (a bare NN only where one notebook has
    that number) and sections it has."""
    secs = {p.stem: _sections(p) for p in NOTEBOOKS}
    text = (ROOT / "REFERENCES.md").read_text()
    wrong = []
    for m in re.finditer(r"\b(\d\d[a-z_]*) \(§([^)]*)\)", text):
        name, where = m.group(1), m.group(2).split("exercise")[0]
        named = [n for n in secs if n == name or (name.isdigit() and n[:2] == name)]
        nums = {int(x) for x in re.findall(r"\d+", where)}
        if len(named) != 1 or not nums <= secs[named[0]] | set(
            range(1, max(secs[named[0]]) + 1)
        ):
            wrong.append(m.group(0))
    assert not wrong, wrong
