"""The recorded runs: the ones the course ships (data/runs) and the folder of this machine's own, read back.

The committed runs ship inside the package (read through importlib.resources), so an installed course
has them too. A learner's own runs go to a per-user folder, never into the package or the repository:
`python -m lab.bench` writes there (its writer is `labbench.records`, beside the package) unless told
`--record-dir`. The schema of a record is in data/README.md.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import json
import os

import platformdirs

from .._data import data_path

RUNS_DIR = str(data_path("runs"))


def user_runs_dir() -> str:
    """Where this machine's own runs are recorded: $FLASH_COURSE_RUNS, else the per-user data folder.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    return os.environ.get("FLASH_COURSE_RUNS") or os.path.join(
        platformdirs.user_data_dir("flash-attention-course", appauthor=False), "runs"
    )


def load_runs(runs_dir: str | None = None) -> list:
    """Every recorded run in `runs_dir` (default: the committed runs shipped with `lab`), oldest first.

    Each record gets its file name under "file". `load_runs(lab.user_runs_dir())` reads your own runs.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    runs_dir = RUNS_DIR if runs_dir is None else runs_dir
    out = []
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        if name.endswith(".json"):
            with open(os.path.join(runs_dir, name)) as f:
                rec = json.load(f)
            rec["file"] = name
            out.append(rec)
    return sorted(out, key=lambda r: (r.get("date") or "", r["file"]))


def record_run(rows, **kwargs) -> str:
    """Write one run as JSON and return its path: `labbench.records.record_run`, the benchmark's writer, under its old name here.

    Keyword arguments as there: `settings`, `machine`, `ceilings`, `label`, `path`, `extra`, `runs_dir`
    (default `user_runs_dir()`, outside the repository).
    """
    from labbench.records import record_run as write

    return write(rows, **kwargs)
