"""How long each slider takes to answer, over a grid of its settings: a benchmark, printed, never a test.

    .venv/bin/python tools/slider_times.py [--combos 12] [--only NAME ...] [--cold]

Builds every slider in `lab.widgets` and times one update (computation, figure and image encoding included) at
each setting of a grid: every option of each control in turn, the others at their values of the
moment (a reader moving one slider after another), then `combos` seeded combinations of all the
controls, the first and the last option of every control among them. A discrete control contributes
all its options; an integer or float slider nine evenly spaced values of its range. A setting is timed
the first time it comes up (a setting seen before answers from the slider's cache). Prints per slider
the time to build it, the first update after building, the median and the worst update (the first
included) and how many updates were timed. `import` is the first use of the builder, which imports
its module and what that needs (in this one process a module another slider imported comes free).
With `--cold` each slider is also built in a fresh interpreter, as a learner's new kernel meets it:
the time of `import lab.widgets` and the builder's import, of the build, and the heavy libraries
(torch, triton) loaded on the way. The course aims at a median at or under 100 ms and a
worst at or under 250 ms (wall time), so that sliders answer at once on a projector. On a loaded
machine the CPU time of this process, printed beside them, tells the slider's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import ipywidgets
import matplotlib

matplotlib.use("Agg")

import lab  # noqa: E402
from lab import widgets  # noqa: E402

MEDIAN_AIM, WORST_AIM = 0.100, 0.250


def builders() -> list[str]:
    """Names of the slider builders in `lab.widgets`."""
    return [
        n for n in widgets.__all__ if n not in ("FigureSliders", "interactive_figure")
    ]


def control_grid(control) -> list:
    """The settings of one control: all options of a discrete one, nine points of a slider's range."""
    if isinstance(control, ipywidgets.Checkbox):
        return [False, True]
    if hasattr(control, "_options_values"):
        return list(control._options_values)
    lo, hi, step = control.min, control.max, control.step
    points = [lo + (hi - lo) * f / 8 for f in range(9)]
    if isinstance(control, ipywidgets.IntSlider):
        return sorted({int(lo + round((p - lo) / step) * step) for p in points})
    return sorted({round(lo + round((p - lo) / step) * step, 10) for p in points})


def _set(w, values: dict) -> None:
    """Set controls without the widget redrawing (the timed `update` draws once for all of them)."""
    for c in w.kwargs_widgets:
        c.unobserve(w.update, names="value")
    try:
        for c, v in values.items():
            c.value = v  # a slider whose range follows another control clamps it
    finally:
        for c in w.kwargs_widgets:
            c.observe(w.update, names="value")


def settings(w, combos: int, seed: int = 0) -> list[dict]:
    """The grid: each control through its options in turn, then `combos` combinations (corners first)."""
    controls = list(w.kwargs_widgets)
    out = []
    for c in controls:
        for v in control_grid(c):
            out.append({c: v})
        out.append({c: c.value})  # back where it was
    rng = random.Random(seed)
    corners = [
        {c: control_grid(c)[0] for c in controls},
        {c: control_grid(c)[-1] for c in controls},
    ]
    for k in range(combos):
        out.append(
            corners[k] if k < 2 else {c: rng.choice(control_grid(c)) for c in controls}
        )
    return out


def time_slider(name: str, combos: int = 12) -> dict:
    """Build slider `name`, then time `update` over its grid; seconds of the build, the first update and each update."""
    lab.setup_notebook()
    t0 = time.perf_counter()
    builder = getattr(widgets, name)  # its module is imported on first use
    t1 = time.perf_counter()
    w = builder()
    build, first_use = time.perf_counter() - t1, t1 - t0
    runs, cpu = [], []
    seen = {tuple((c, c.value) for c in w.kwargs_widgets)}
    for s in settings(w, combos):
        _set(w, s)
        setting = tuple((c, c.value) for c in w.kwargs_widgets)
        t0, c0 = time.perf_counter(), time.process_time()
        w.update()
        if (
            setting not in seen
        ):  # a setting seen before answers from the widget's cache: not timed
            runs.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            seen.add(setting)
    return {
        "import": first_use,
        "build": build,
        "first": runs[0],
        "runs": runs,
        "cpu": cpu,
        "cache": len(w.cache),
    }


HEAVY = (
    "torch",
    "triton",
)  # libraries a slider should load only if its drawing needs them

_COLD = """
import json, sys, time
t0 = time.perf_counter()
import matplotlib
matplotlib.use("Agg")
import lab
lab.setup_notebook()
t1 = time.perf_counter()
builder = getattr(lab.widgets, sys.argv[1])
t2 = time.perf_counter()
w = builder()
t3 = time.perf_counter()
print(json.dumps({"setup": t1 - t0, "import": t2 - t1, "build": t3 - t2,
    "heavy": [m for m in sys.argv[2:] if m in sys.modules],
    "widget_modules": sorted(m for m in sys.modules if m.startswith("lab.widgets."))}))
"""


def cold_build(name: str) -> dict:
    """Build slider `name` in a fresh interpreter: seconds of `import lab` and setup, of the builder's
    import, of the build; the `HEAVY` libraries and the `lab.widgets` modules it loaded."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p
    )}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", _COLD, name, *HEAVY],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return json.loads(out.stdout.splitlines()[-1])


def slider_times(combos: int = 12, only=None) -> dict[str, dict]:
    """`time_slider` for each slider builder in `lab.widgets` (or those named in `only`)."""
    return {name: time_slider(name, combos) for name in (only or builders())}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--combos", type=int, default=12)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument(
        "--cold", action="store_true", help="also build each in a fresh interpreter"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at the start")
    print(
        f"{'slider':>24}  {'import':>7}  {'build':>7}  {'first':>7}  {'median':>7}  {'worst':>7}  updates"
        "  (CPU time of this process: median, worst)"
    )
    rows = slider_times(args.combos, args.only)
    for name, r in sorted(
        rows.items(), key=lambda kv: statistics.median(kv[1]["runs"])
    ):
        med, worst = statistics.median(r["runs"]), max(r["runs"])
        aim = "" if med <= MEDIAN_AIM and worst <= WORST_AIM else "  (over the aim)"
        print(
            f"{name:>24}  {r['import'] * 1e3:5.0f}ms  {r['build'] * 1e3:5.0f}ms  {r['first'] * 1e3:5.0f}ms  "
            f"{med * 1e3:5.0f}ms  {worst * 1e3:5.0f}ms  {len(r['runs']):5d}    "
            f"({statistics.median(r['cpu']) * 1e3:4.0f}ms, {max(r['cpu']) * 1e3:4.0f}ms){aim}"
        )
    if args.cold:
        print(
            f"\n{'fresh interpreter':>24}  {'import':>7}  {'build':>7}  heavy libraries loaded"
        )
        for name in sorted(rows):
            c = cold_build(name)
            heavy = ", ".join(c["heavy"]) or "none"
            print(
                f"{name:>24}  {c['import'] * 1e3:5.0f}ms  {c['build'] * 1e3:5.0f}ms  {heavy}"
            )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"aim: median <= {MEDIAN_AIM * 1e3:.0f} ms, worst <= {WORST_AIM * 1e3:.0f} ms; load average {load:.2f} at the end"
    )


if __name__ == "__main__":
    main()
