"""The slider benchmark builds every slider and times it (no time is asserted)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import slider_times  # noqa: E402

from lab import widgets  # noqa: E402


def test_every_slider_is_timed():
    times = slider_times.slider_times(repeat=1)
    builders = [
        n for n in widgets.__all__ if n not in ("FigureSliders", "interactive_figure")
    ]
    assert sorted(times) == sorted(builders)
    assert all(t > 0 for t in times.values())
