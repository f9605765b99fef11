"""Where the course's data live: data/ at the top of the repository, shipped in the wheel as `lab.data`.

Read through importlib.resources, so a checkout (an editable install maps `lab.data` to data/), an
installed wheel and Colab read the same files.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(*parts: str) -> Path:
    """The path of `data/<parts...>`: the package `lab.data`, or data/ beside lab/ in a plain checkout."""
    try:
        path = resources.files(
            "lab.data"
        )  # a namespace package: joined one part at a time
    except ModuleNotFoundError:  # a checkout on sys.path that was never installed
        path = Path(__file__).resolve().parent.parent / "data"
    for part in parts:
        path = path.joinpath(part)
    return Path(str(path))
