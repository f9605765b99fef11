"""Write learner copies of the notebooks into exercises/, with the cells tagged `solution` removed.

    python tools/student.py [--out exercises] [--force NAME ...]

A copy is written fresh (outputs cleared) when it is missing or still exactly as this tool last wrote
it. A copy the learner has changed is never overwritten: it is skipped with a message saying how to get
a fresh one. The hashes of the copies as written are kept in `<out>/.written.json`.
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
    args = parser.parse_args(argv)
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
