"""Colab and Binder: the first cell of every notebook, and the text that tells how to open the course there.

    .venv/bin/python tools/colab.py            insert or refresh the Colab cell in notebooks/*.ipynb
                                               and the Colab/Binder section of README.md
    .venv/bin/python tools/colab.py --check    change nothing; exit 1 and name what is out of date

The course's repository address is one setting: `Repository` under `[project.urls]` in pyproject.toml.
The Colab cell, the Colab links and the Binder link are all built from it. The cell installs the release
`v<version>` (the git tag of `[project] version`), never whatever `main` is; the links open the learner
copies in learner/ (tools/student.py --publish), the worked solutions one link away in notebooks/.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import tomllib

ROOT = Path(__file__).resolve().parent.parent
CELL_ID = "colab-setup"
TAGS = ["colab-setup"]  # nbval skips it by its first line, "# NBVAL_SKIP"
BRANCH = "main"
LEARNER = "learner"  # the committed learner copies (tools/student.py --publish)


def repository_url(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The course's repository address, from `[project.urls] Repository` in pyproject.toml."""
    data = tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))
    try:
        url = data["project"]["urls"]["Repository"]
    except KeyError:
        raise ValueError(f"{pyproject}: no Repository under [project.urls]") from None
    parsed = urlparse(url)
    if (
        parsed.scheme != "https"
        or parsed.netloc != "github.com"
        or len(parsed.path.strip("/").split("/")) != 2
    ):
        raise ValueError(
            f"Repository must read https://github.com/OWNER/NAME, got {url!r}"
        )
    return url.rstrip("/").removesuffix(".git")


def package_name(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The distribution name under [project] (what `pip install` calls the course's package)."""
    return tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"]["name"]


def package_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The course's version under [project]; its release is the git tag `v<version>`."""
    return tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"][
        "version"
    ]


def release_tag(version: str) -> str:
    """The git tag of a release: `v` and the version (v0.1.0)."""
    return f"v{version}"


def cell_source(
    url: str, package: str = "flash-attention-lab", version: str | None = None
) -> str:
    """The source of the Colab cell: on Colab, pip-install release `version` of the course from `url`, showing
    pip's output; elsewhere, nothing."""
    tag = release_tag(version or package_version())
    return "\n".join(
        [
            "# NBVAL_SKIP",
            f"# On Colab only: install the course's `lab` package, release {tag}, from its repository.",
            "# Elsewhere this cell does nothing.",
            "import sys",
            "",
            'if "google.colab" in sys.modules:',
            "    import subprocess",
            "",
            "    # Colab has numpy, torch, triton, matplotlib, ipywidgets, tqdm: keep its builds.",
            f'    course = "{package} @ git+{url}.git@{tag}"',
            '    for args in (["--no-deps", course], ["ml_dtypes"]):',
            '        command = [sys.executable, "-m", "pip", "install", *args]',
            '        print("$ pip install", *args, flush=True)',
            "        subprocess.run(command, check=True)",
            "    print(\"installed: the course's lab package, release " + tag + '")',
        ]
    )


def colab_cell(
    url: str, package: str = "flash-attention-lab", version: str | None = None
) -> nbformat.NotebookNode:
    """The Colab cell as an nbformat code cell, tagged so nbval skips it and this tool can find it."""
    cell = nbformat.v4.new_code_cell(
        cell_source(url, package, version), metadata={"tags": list(TAGS)}
    )
    cell["id"] = CELL_ID
    return cell


def is_colab_cell(cell) -> bool:
    """Whether `cell` is a Colab cell this tool wrote (by its tag or its id)."""
    return (
        CELL_ID in cell.get("metadata", {}).get("tags", []) or cell.get("id") == CELL_ID
    )


def with_colab_cell(
    nb, url: str, package: str = "flash-attention-lab", version: str | None = None
):
    """A copy of notebook `nb` whose first cell is the Colab cell and which has no other Colab cell."""
    nb = copy.deepcopy(nb)
    cell = colab_cell(url, package, version)
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):  # cell ids came with nbformat 4.5
        del cell["id"]
    old = [c for c in nb.cells if is_colab_cell(c)]
    if old and old[0].source == cell.source:  # a metadata refresh: keep its run
        cell.execution_count, cell.outputs = (
            old[0].get("execution_count"),
            old[0].get("outputs", []),
        )
    nb.cells = [cell] + [c for c in nb.cells if not is_colab_cell(c)]
    return nb


def first_cell_ok(
    nb, url: str, package: str = "flash-attention-lab", version: str | None = None
) -> bool:
    """Whether the notebook's first cell is exactly the Colab cell this tool writes (and no other is)."""
    if not nb.cells:
        return False
    want, first = colab_cell(url, package, version), nb.cells[0]
    return (
        first.cell_type == "code"
        and first.source == want.source
        and first.get("metadata", {}).get("tags", []) == want.metadata["tags"]
        and sum(is_colab_cell(c) for c in nb.cells) == 1
    )


def colab_link(url: str, notebook: str, branch: str = BRANCH) -> str:
    """Open-in-Colab address of `notebook` (a path such as learner/00_x.ipynb) on `branch`."""
    owner_name = urlparse(url).path.strip("/")
    return f"https://colab.research.google.com/github/{owner_name}/blob/{branch}/{notebook}"


def github_link(url: str, notebook: str, branch: str = BRANCH) -> str:
    """The notebook's page on GitHub (its committed outputs shown)."""
    return f"{url}/blob/{branch}/{notebook}"


def binder_link(url: str, branch: str = BRANCH, folder: str = LEARNER) -> str:
    """mybinder.org address that builds the repository (from binder/environment.yml) and opens JupyterLab on
    the learner copies."""
    owner_name = urlparse(url).path.strip("/")
    return f"https://mybinder.org/v2/gh/{owner_name}/{branch}?urlpath=lab/tree/{folder}"


START, END = (
    "<!-- colab-binder:start (written by tools/colab.py) -->",
    "<!-- colab-binder:end -->",
)


def docs_text(
    url: str, notebooks: list[str], branch: str = BRANCH, tag: str | None = None
) -> str:
    """The README's section on Colab and Binder: per notebook, a Colab link to the learner copy (learner/,
    no worked solutions) and a link to the course's notebook with them."""
    tag = tag or release_tag(package_version())
    lines = [
        "### On Colab or Binder",
        "",
        "**Colab.** Open your copy of a notebook from the links below and run its cells from the top. These",
        "are the learner copies in `learner/`: every exercise is a stub for you to fill in, and the worked",
        "solutions are not in the notebook you run (in a copy that holds them, the hidden solution cell would",
        "redefine your function before its check, and the grader refuses such a copy). The worked solutions",
        "are one link away, in the course's notebook on GitHub with its outputs. The first cell installs the",
        f"course's `lab` package, release `{tag}`, from [the repository]({url}) and shows pip's output (it",
        'does nothing anywhere else, and the tests skip it). Save your copy to your Drive ("File > Save a',
        "copy in Drive\") to keep your work. Your copy draws its figures when you run it; in the course's",
        "notebook every slider has a static figure just above it, drawn at the slider's default settings.",
        "",
    ]
    if notebooks:
        lines += [
            "| notebook | your copy on Colab | with the worked solutions |",
            "| --- | --- | --- |",
        ]
        badge = "https://colab.research.google.com/assets/colab-badge.svg"
        for nb in notebooks:
            name = Path(nb).name
            lines.append(
                f"| `{name}` | [![Open in Colab]({badge})]({colab_link(url, f'{LEARNER}/{name}', branch)}) "
                f"| [notebooks/{name}]({github_link(url, f'notebooks/{name}', branch)}) |"
            )
        lines.append("")
    lines += [
        "**Binder.** [![Binder](https://mybinder.org/badge_logo.svg)]"
        f"({binder_link(url, branch)}) builds the environment from `binder/environment.yml`, installs the",
        f"course with `binder/postBuild`, and opens JupyterLab on the learner copies in `{LEARNER}/` (the course's",
        "notebooks, with the worked solutions, are in `notebooks/` beside them); the first build takes several",
        "minutes, later ones start from the cache. Binder sessions are temporary: download a notebook to keep",
        "your changes.",
        "",
    ]
    return "\n".join(lines)


def notebook_paths(root: Path = ROOT) -> list[Path]:
    """The course's notebooks, in order."""
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if anything is out of date",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the repository root (default: this checkout)",
    )
    args = parser.parse_args(argv)
    pyproject = args.root / "pyproject.toml"
    url, package, version = (
        repository_url(pyproject),
        package_name(pyproject),
        package_version(pyproject),
    )
    stale = []
    for path in notebook_paths(args.root):
        nb = nbformat.read(path, as_version=4)
        if first_cell_ok(nb, url, package, version):
            continue
        stale.append(path.relative_to(args.root))
        if not args.check:
            nbformat.write(with_colab_cell(nb, url, package, version), path)
    readme = args.root / "README.md"
    text = docs_text(
        url,
        [p.relative_to(args.root).as_posix() for p in notebook_paths(args.root)],
        tag=release_tag(version),
    )
    current = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if START not in current or END not in current:
        current = current.rstrip("\n") + f"\n\n{START}\n{END}\n"
    head, rest = current.split(START, 1)
    updated = f"{head}{START}\n{text}{END}{rest.split(END, 1)[1]}"
    if updated != (readme.read_text(encoding="utf-8") if readme.exists() else None):
        stale.append(readme.relative_to(args.root))
        if not args.check:
            readme.write_text(updated, encoding="utf-8")
    verb = "out of date" if args.check else "updated"
    for path in stale:
        print(f"{verb}: {path}")
    print(
        f"repository: {url}, release {release_tag(version)}; {len(stale)} file(s) {verb}"
    )
    if stale and not args.check:
        print(
            "then refresh the learner copies: .venv/bin/python tools/student.py --publish"
        )
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
