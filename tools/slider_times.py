"""How long each slider's callback takes at its default settings: a benchmark, printed, never a test.

    .venv/bin/python tools/slider_times.py [--repeat 5]

Builds every slider in `lab.widgets`, calls its callback `repeat` times at the default settings and
prints the median wall time (figure drawing and PNG rendering included). The course aims at 200 ms so
that sliders respond at once on a projector.
"""

from __future__ import annotations

import argparse
import statistics
import time

import matplotlib

matplotlib.use("Agg")

import lab  # noqa: E402
from lab import widgets  # noqa: E402


def slider_times(repeat: int = 5) -> dict[str, float]:
    """Median seconds of one callback at default settings, per slider builder in `lab.widgets`."""
    lab.setup_notebook()
    times = {}
    for name in widgets.__all__:
        builder = getattr(widgets, name)
        if name in ("FigureSliders", "interactive_figure") or not callable(builder):
            continue
        w = builder()
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            w.update()
            runs.append(time.perf_counter() - t0)
        times[name] = statistics.median(runs)
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    times = slider_times(args.repeat)
    for name, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(
            f"{name:>24}: {t * 1e3:6.0f} ms  {'(< 200 ms)' if t < 0.2 else '(over 200 ms)'}"
        )


if __name__ == "__main__":
    main()
