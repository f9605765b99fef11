"""The slider benchmark sweeps every slider over a grid of its settings and times it (no time is asserted)."""

import pathlib
import sys

import ipywidgets

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import slider_times  # noqa: E402

from lab import widgets  # noqa: E402


def test_every_slider_builder_is_swept():
    assert sorted(slider_times.builders()) == sorted(
        n for n in widgets.__all__ if n not in ("FigureSliders", "interactive_figure")
    )


def test_the_grid_holds_every_option_of_a_discrete_control_and_a_range_of_a_slider():
    sel = ipywidgets.SelectionSlider(options=[8, 16, 32], value=16)
    toggle = ipywidgets.ToggleButtons(options=[("two", 2), ("four", 4)], value=2)
    ints = ipywidgets.IntSlider(value=3, min=1, max=17, step=2)
    floats = ipywidgets.FloatSlider(value=1.0, min=0.25, max=20.0, step=0.25)
    assert slider_times.control_grid(sel) == [8, 16, 32]
    assert slider_times.control_grid(toggle) == [2, 4]
    assert slider_times.control_grid(ipywidgets.Checkbox()) == [False, True]
    got = slider_times.control_grid(ints)
    assert got[0] == 1 and got[-1] == 17 and all((g - 1) % 2 == 0 for g in got)
    got = slider_times.control_grid(floats)
    assert got[0] == 0.25 and got[-1] == 20.0 and len(got) == 9


def test_a_sweep_visits_every_option_of_every_control_and_times_each_new_setting():
    w = widgets.gqa_group()
    grid = slider_times.settings(w, combos=3)
    for c in w.kwargs_widgets:
        assert {s[c] for s in grid if c in s} >= set(slider_times.control_grid(c))
    r = slider_times.time_slider("gqa_group", combos=3)
    assert r["build"] > 0 and r["first"] == r["runs"][0]
    assert all(t > 0 for t in r["runs"]) and len(r["cpu"]) == len(r["runs"])
    assert len(r["runs"]) <= len(grid)


def test_the_sweep_times_the_builders_import_apart_from_its_build():
    r = slider_times.time_slider("gqa_group", combos=0)
    assert r["import"] >= 0 and r["build"] > 0 and r["cache"] == len(r["runs"]) + 1


def test_a_fresh_interpreter_builds_the_traffic_slider_without_torch_or_other_sliders():
    """The traffic slider, built first in a new kernel, loads its own module only: no torch."""
    r = slider_times.cold_build("io_traffic")
    assert r["heavy"] == [] and r["widget_modules"] == [
        "lab.widgets._canvas",
        "lab.widgets.tiling",
    ]
    assert r["import"] > 0 and r["build"] > 0
