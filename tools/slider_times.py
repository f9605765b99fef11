"""How long each slider takes to answer, over a grid of its settings: a benchmark, printed, never a test.

    .venv/bin/python tools/slider_times.py [--combos 12] [--only NAME ...]

Builds every slider in `lab.widgets` and times one update (computation, figure and image encoding included) at
each setting of a grid: every option of each control in turn, the others at their values of the
moment (a reader moving one slider after another), then `combos` seeded combinations of all the
controls, the first and the last option of every control among them. A discrete control contributes
all its options; an integer or float slider nine evenly spaced values of its range. A setting is timed
the first time it comes up (a setting seen before answers from the slider's cache). Prints per slider
the time to build it, the first update after building, the median and the worst update (the first
included) and how many updates were timed. The course aims at a median at or under 100 ms and a
worst at or under 250 ms (wall time), so that sliders answer at once on a projector. On a loaded
machine the CPU time of this process, printed beside them, tells the slider's own cost.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
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
    w = getattr(widgets, name)()
    build = time.perf_counter() - t0
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
    return {"build": build, "first": runs[0], "runs": runs, "cpu": cpu}


def slider_times(combos: int = 12, only=None) -> dict[str, dict]:
    """`time_slider` for each slider builder in `lab.widgets` (or those named in `only`)."""
    return {name: time_slider(name, combos) for name in (only or builders())}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--combos", type=int, default=12)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at the start")
    print(
        f"{'slider':>24}  {'build':>7}  {'first':>7}  {'median':>7}  {'worst':>7}  updates"
        "  (CPU time of this process: median, worst)"
    )
    rows = slider_times(args.combos, args.only)
    for name, r in sorted(
        rows.items(), key=lambda kv: statistics.median(kv[1]["runs"])
    ):
        med, worst = statistics.median(r["runs"]), max(r["runs"])
        aim = "" if med <= MEDIAN_AIM and worst <= WORST_AIM else "  (over the aim)"
        print(
            f"{name:>24}  {r['build'] * 1e3:5.0f}ms  {r['first'] * 1e3:5.0f}ms  "
            f"{med * 1e3:5.0f}ms  {worst * 1e3:5.0f}ms  {len(r['runs']):5d}    "
            f"({statistics.median(r['cpu']) * 1e3:4.0f}ms, {max(r['cpu']) * 1e3:4.0f}ms){aim}"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"aim: median <= {MEDIAN_AIM * 1e3:.0f} ms, worst <= {WORST_AIM * 1e3:.0f} ms; load average {load:.2f} at the end"
    )


if __name__ == "__main__":
    main()
