"""Write learner copies of the notebooks, with the cells tagged `solution` removed.

    .venv/bin/python tools/student.py [--out exercises] [--force NAME ...]   your copies (`make student`)
    .venv/bin/python tools/student.py --publish [--check]                    the committed copies in learner/

A copy in exercises/ is written fresh (outputs cleared) when it is missing or still exactly as this tool
last wrote it. A copy the learner has changed is never overwritten: it is skipped with a message saying
how to get a fresh one. The hashes of the copies as written are kept in `<out>/.written.json`.

learner/ holds the same copies, committed: the Colab and Binder links open them, so a learner working there
never has the worked solutions in the notebook they run. `--publish` rewrites them from notebooks/;
`--publish --check` changes nothing and exits 1 naming any copy that is out of step (a test runs it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
MANIFEST = ".written.json"
PUBLISHED = ROOT / "learner"


def student_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without its `solution` cells, every output and execution count cleared."""
    copy = nbformat.from_dict(json.loads(json.dumps(nb)))
    copy.cells = [
        c for c in copy.cells if "solution" not in c.get("metadata", {}).get("tags", [])
    ]
    for cell in copy.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    copy.metadata.pop("widgets", None)
    return copy


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_copies(
    src: pathlib.Path, out: pathlib.Path, force=(), log=print
) -> dict[str, str]:
    """Write a learner copy of every `src/*.ipynb` into `out`; return {name: "written" | "unchanged" | "skipped"}."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST
    written = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    status = {}
    for nb_path in sorted(src.glob("*.ipynb")):
        target = out / nb_path.name
        text = (
            nbformat.writes(student_copy(nbformat.read(nb_path, as_version=4))) + "\n"
        )
        if target.exists() and nb_path.name not in force:
            current = _digest(target)
            if current != written.get(nb_path.name):
                log(
                    f"skipped {target}: you have changed it. To get a fresh copy, rename or delete it "
                    f"and run `make student` again (or `make student FORCE={nb_path.name}`)."
                )
                status[nb_path.name] = "skipped"
                continue
            if target.read_text() == text:
                status[nb_path.name] = "unchanged"
                continue
        target.write_text(text)
        written[nb_path.name] = _digest(target)
        status[nb_path.name] = "written"
        log(f"wrote {target}")
    manifest_path.write_text(json.dumps(written, indent=1, sort_keys=True) + "\n")
    return status


def copy_text(path: pathlib.Path) -> str:
    """The learner copy of the notebook at `path`, as the file text this tool writes."""
    return nbformat.writes(student_copy(nbformat.read(path, as_version=4))) + "\n"


def publish(
    src: pathlib.Path = ROOT / "notebooks", out: pathlib.Path = PUBLISHED, check=False
) -> list[str]:
    """Make `out` hold exactly the learner copy of every `src/*.ipynb`; return the names that were out of step."""
    wanted = {p.name: copy_text(p) for p in sorted(src.glob("*.ipynb"))}
    present = {p.name for p in out.glob("*.ipynb")} if out.is_dir() else set()
    stale = sorted(
        n
        for n in wanted.keys() | present
        if n not in wanted
        or n not in present
        or (out / n).read_text(encoding="utf-8") != wanted[n]
    )
    if not check:
        out.mkdir(parents=True, exist_ok=True)
        for name in stale:
            if name in wanted:
                (out / name).write_text(wanted[name], encoding="utf-8")
            else:
                (out / name).unlink()
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=pathlib.Path, default=ROOT / "notebooks")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "exercises")
    parser.add_argument(
        "--force",
        nargs="*",
        default=[],
        help="notebook names to overwrite even if changed",
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="rewrite the committed copies in learner/ (the Colab and Binder links open them)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --publish: change nothing, exit 1 if out of step",
    )
    args = parser.parse_args(argv)
    if args.publish:
        stale = publish(args.src, PUBLISHED, check=args.check)
        verb = "out of step" if args.check else "written"
        for name in stale:
            print(f"{verb}: learner/{name}")
        if args.check and stale:
            print(
                "run `.venv/bin/python tools/student.py --publish` and commit learner/"
            )
        print(f"learner/: {len(stale)} copy(ies) {verb}")
        return 1 if (args.check and stale) else 0
    status = write_copies(args.src, args.out, force=set(args.force))
    counts = {
        k: sum(v == k for v in status.values())
        for k in ("written", "unchanged", "skipped")
    }
    print(
        f"{args.out}: {counts['written']} written, {counts['unchanged']} unchanged, {counts['skipped']} skipped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
