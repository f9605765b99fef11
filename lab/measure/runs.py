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


def _at(run, N, d):
    """A recorded sweep's fp32 rows at (N, d), by kernel."""
    return {
        r["kernel"]: r
        for r in run.get("results") or []
        if not r.get("skipped") and (r["N"], r["d"], r["dtype"]) == (N, d, "float32")
    }


def latest_sweeps(runs, *, N: int = 4096, d: int = 64) -> list:
    """The latest measured CPU sweep of each (CPU, thread count) among `runs` that timed the tiled loop and
    standard attention at (N, d) in fp32, oldest machine first.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    latest = {}
    for run in sorted(runs, key=lambda r: r.get("date") or ""):
        if (
            run.get("kind") == "measured"
            and not run["machine"].get("gpu")
            and {"lab torch flash", "torch naive", "sdpa flash"} <= set(_at(run, N, d))
        ):
            latest[run["machine"]["cpu"], run["settings"]["threads"]] = run
    return list(latest.values())


def sweep_lines(run, *, N: int = 4096, d: int = 64) -> str:
    """Two lines on a recorded sweep at (N, d): the machine, threads, load and matmul ceiling; then the tiled loop's
    ms against SDPA's and standard attention's (with each time's spread across rounds where it was recorded).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    row, machine = _at(run, N, d), run["machine"]
    threads = run["settings"]["threads"]
    load = (machine.get("load_average") or ["?"])[0]
    ceiling = run["ceilings"]["matmul_fp32_flops"] / 1e9
    ms = lambda k: (
        f"{row[k]['ms']:,.0f} ms"
        + (  # noqa: E731
            f" ±{50 * row[k]['spread']:.0f}%"
            if row[k].get("spread") is not None
            else ""
        )
    )
    loop, naive, sdpa = (
        row[k] for k in ("lab torch flash", "torch naive", "sdpa flash")
    )
    return (
        f"{machine['cpu']} ({machine['cores']} cores), {threads} thread{'s' * (threads > 1)}, "
        f"load {load}, fp32 matmul {ceiling:.0f} GFLOP/s:\n"
        f"  loop {ms('lab torch flash')}, SDPA {ms('sdpa flash')}, standard {ms('torch naive')}; "
        f"loop {loop['vs_sdpa']:.2f}x SDPA, {naive['ms'] / loop['ms']:.1f}x standard, "
        f"SDPA {naive['ms'] / sdpa['ms']:.1f}x standard"
    )


def accuracy_lines(run, *, dtype: str = "float32") -> str:
    """A table of a `--verify` record's errors in `dtype`: a row per (B, N, d), a column per kernel, each cell
    "max |o − fp32 standard| / max |o − fp64 oracle|".

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    rows = [a for a in run["accuracy"] if a["dtype"] == dtype]
    kernels = list(dict.fromkeys(a["kernel"].split(" (")[0] for a in rows))
    shapes = list(dict.fromkeys((a["B"], a["N"], a["d"]) for a in rows))
    cell = {
        (a["kernel"].split(" (")[0], (a["B"], a["N"], a["d"])): (
            f"{a['vs_standard']:.1e} / {a['vs_fp64']:.1e}"
        )
        for a in rows
    }
    lines = [f"{'(B, N, d)':<14}" + "".join(f"{k:>20}" for k in kernels)]
    for shape in shapes:
        lines.append(
            f"{str(shape):<14}"
            + "".join(f"{cell.get((k, shape), '-'):>20}" for k in kernels)
        )
    return "\n".join(lines)
