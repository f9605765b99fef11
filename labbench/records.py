"""The JSON record of a benchmark run: what was measured, on which machine, with which settings.

Schema (version 1) in data/README.md; `lab.load_runs` reads records back. A run goes to
`<runs_dir>/<UTC date>_<cpu|gpu>_<machine>[_<mode>].json`, `runs_dir` defaulting to
`lab.user_runs_dir()`, outside the repository: only `--record-dir data/runs` adds a run to the
ones the course ships.

Used by: `python -m lab.bench` (labbench/cli.py); read in notebooks/08_hardware_runs.ipynb.
"""

from __future__ import annotations

import json
import os
import re

from lab.measure import describe_machine, user_runs_dir

__all__ = ["record_run", "record_path"]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def record_path(machine: dict, settings: dict, runs_dir: str) -> str:
    """`<runs_dir>/<UTC date>_<cpu|gpu>_<machine>[_<mode>].json` for a run of `settings["mode"]` (no suffix for a sweep)."""
    gpu = (machine.get("gpu") or {}).get("name")
    stamp = (machine.get("date") or "undated").replace(":", "").replace("-", "")[:13]
    mode = settings.get("mode", "sweep")
    suffix = "" if mode == "sweep" else f"_{_slug(mode)}"
    return os.path.join(
        runs_dir,
        f"{stamp}_{'gpu' if gpu else 'cpu'}_{_slug(gpu or machine.get('cpu') or 'machine')}{suffix}.json",
    )


def record_run(
    rows,
    *,
    settings: dict,
    machine: dict | None = None,
    ceilings: dict | None = None,
    label: str | None = None,
    path: str | None = None,
    extra: dict | None = None,
    runs_dir: str | None = None,
) -> str:
    """Write one run as JSON (schema in data/README.md) to `path` or `record_path(...)` in `runs_dir`; return the path written.

    `runs_dir` defaults to `lab.user_runs_dir()`, outside the repository; `machine` to
    `lab.describe_machine()`; `label` to the GPU's name, else the CPU with its cores and torch threads.
    """
    machine = describe_machine() if machine is None else machine
    gpu = (machine.get("gpu") or {}).get("name")
    label = label or (
        f"{gpu} (GPU)"
        if gpu
        else f"{machine.get('cpu')} ({machine.get('cores')} CPU cores, {machine.get('torch_threads')} torch "
        f"thread{'' if machine.get('torch_threads') == 1 else 's'})"
    )
    record = {
        "schema": 1,
        "kind": "measured",
        "label": label,
        "date": machine.get("date"),
        "machine": machine,
        "settings": settings,
        "ceilings": ceilings,
        "results": list(rows),
    }
    record.update(extra or {})
    if path is None:
        runs_dir = user_runs_dir() if runs_dir is None else runs_dir
        os.makedirs(runs_dir, exist_ok=True)
        path = record_path(machine, settings, runs_dir)
    with open(path, "w") as f:
        json.dump(record, f, indent=1, default=float)
        f.write("\n")
    return path
