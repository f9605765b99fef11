"""Finish a lock file written by pip-compile: torch's pin without its build label.

    .venv/bin/python tools/lock.py locks/linux-x86_64-py3.11.txt      (run by `make lock`)

pip-compile records the torch build it resolved, `torch==2.13.0+cpu`; the lock pins the release alone,
`torch==2.13.0`, so the same lock serves the CPU build and every CUDA build of that release.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LABEL = re.compile(r"^(torch==[^\s;+]+)\+[\w.]+", re.MULTILINE)


def without_build_label(text: str) -> str:
    """The lock's text with `torch==X+label` written `torch==X`."""
    return LABEL.sub(r"\1", text)


def main(argv: list[str] | None = None) -> int:
    (path,) = argv if argv is not None else sys.argv[1:]
    lock = Path(path)
    lock.write_text(without_build_label(lock.read_text()))
    print(f"{lock}: torch pinned without a build label")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
