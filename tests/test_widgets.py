"""The sliders' drawing: a moved slider shows what a fresh drawing of that setting shows, a setting seen
before answers from the cache, and the frame is reused where only the content moves (no time is asserted)."""

import io

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import pytest
from matplotlib.ticker import MaxNLocator

import lab
from lab import widgets
from lab.widgets import _frame_key, round_out

BUILDERS = [
    n for n in widgets.__all__ if n not in ("FigureSliders", "interactive_figure")
]


def _pixels(picture: bytes) -> np.ndarray:
    """The image's red, green and blue in [0, 1] (the figures are opaque)."""
    return np.asarray(PIL.Image.open(io.BytesIO(picture)).convert("RGB")) / 255


def _full_render(fig) -> np.ndarray:
    """The figure drawn whole, frame and content together, as the widget's image would hold it."""
    for a in fig.findobj():
        a.set_animated(False)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float) / 255


def _move(w):
    """Set the first control with more than one setting to its last option (or its maximum)."""
    for c in w.kwargs_widgets:
        if isinstance(c, ipywidgets.Checkbox):
            c.value = not c.value
            return c
        values = getattr(c, "_options_values", None)
        if values and len(values) > 1:
            c.value = values[-1] if c.value != values[-1] else values[0]
            return c
        if hasattr(c, "max") and c.max > c.min:
            c.value = c.max if c.value != c.max else c.min
            return c
    raise AssertionError("no control to move")


@pytest.mark.parametrize("name", BUILDERS)
def test_a_moved_slider_shows_the_fresh_drawing_of_its_setting(name):
    lab.setup_notebook()
    open_before = plt.get_fignums()
    w = getattr(widgets, name)()
    first = w.image.value
    _move(w)
    assert w.image.value != first  # the update drew something else
    got = _pixels(w.image.value)
    want = _full_render(w.figure)
    assert got.shape == want.shape
    differs = (np.abs(got - want).max(axis=2) > 0.15).mean()
    # the content is drawn over the frame, so grid lines under a bar or behind a legend may differ
    assert differs < 0.01, f"{differs:.2%} of the pixels differ"
    assert (
        plt.get_fignums() == open_before
    )  # no figure left in pyplot for a cell to show


def test_a_setting_seen_before_answers_from_the_cache_and_agrees_with_a_fresh_slider():
    w = widgets.decode_splits()
    start = (w.result, w.image.value, w.summary_html.value)
    splits = next(c for c in w.kwargs_widgets if c.description == "splits")
    splits.value = 64
    moved = w.summary_html.value
    assert moved != start[2] and w.result["flash_decoding"]["splits"] == 64
    splits.value = 8
    assert (w.result, w.image.value, w.summary_html.value) == start
    assert w.result is start[0]  # from the cache, not recomputed
    fresh = widgets.decode_splits()  # its first drawing lays out the frame, as w's did
    next(c for c in fresh.kwargs_widgets if c.description == "splits").value = 64
    assert fresh.summary_html.value == moved
    w.cache.clear()
    splits.value = 64  # drawn afresh over a kept frame
    assert w.summary_html.value == moved
    assert np.abs(_pixels(w.image.value) - _pixels(fresh.image.value)).max() < 0.5


def test_the_frame_is_reused_when_only_the_content_moves():
    w = widgets.tile_walk()
    step = next(c for c in w.kwargs_widgets if c.description == "step")
    key = _frame_key(w.figure)
    step.value = 3
    assert _frame_key(w.figure) == key and len(w._frames) == 1
    assert w.result["step"] == 3
    n = next(c for c in w.kwargs_widgets if c.description == "N = M")
    n.value = 64  # new limits: a new frame
    assert _frame_key(w.figure) != key and len(w._frames) == 2


def test_the_cache_holds_at_most_its_size():
    w = widgets.softmax_overflow()
    w.CACHE_SIZE = 3
    s = w.kwargs_widgets[0]
    for v in (1, 2, 3, 4, 5):
        s.value = v
    assert len(w.cache) == 3 and (("s", 5),) in w.cache and (("s", 1),) not in w.cache


def test_round_out_widens_limits_to_the_ticks_beyond_them():
    loc = MaxNLocator()
    assert round_out(0.0, 157.0, loc) == (0.0, 160.0)
    lo, hi = round_out(995.3, 1004.2, loc)  # an offset range keeps its scale
    assert 994 <= lo <= 995.3 and 1004.2 <= hi <= 1006
    assert round_out(-2.5, 7.3, loc) == (-3.0, 8.0)
    assert round_out(2.0, 8.0, MaxNLocator(nbins=6)) == (2.0, 8.0)  # already on ticks
    assert round_out(0.1 + 0.2, 0.9, MaxNLocator(nbins=6)) == pytest.approx((0.3, 0.9))


def test_decode_splits_summary_never_says_fewer_for_more_steps():
    from lab.widgets import _ratio_words

    assert _ratio_words(2.0, "fewer") == "2.0× fewer"
    assert _ratio_words(0.5, "fewer") == "2.0× more"
    assert (
        _ratio_words(3.9) == "3.9× less"
    )  # io_traffic: fa2 against standard attention
    assert _ratio_words(1 / 1.3) == "1.3× more"


@pytest.mark.parametrize("name", [n for n in BUILDERS if getattr(widgets, n)()._reuse])
def test_a_reused_figure_after_many_settings_draws_what_a_fresh_one_draws(name):
    """A slider that draws on its kept Axes carries nothing over from the settings it passed through."""
    lab.setup_notebook()
    w = getattr(widgets, name)()
    assert w._reuse
    controls = list(w.kwargs_widgets)
    path = []
    for c in controls:  # each control to its other end and half way back
        values = getattr(c, "_options_values", None)
        if isinstance(c, ipywidgets.Checkbox):
            path += [(c, not c.value)]
        elif values and len(values) > 1:
            path += [(c, values[-1]), (c, values[len(values) // 2])]
        elif hasattr(c, "max") and c.max > c.min:
            path += [(c, c.max), (c, (c.min + c.max) // 2)]
    for c, v in path:
        c.value = v
    final = {c.description: c.value for c in controls}
    fresh = getattr(widgets, name)()
    fresh_controls = {c.description: c for c in fresh.kwargs_widgets}
    for c in (
        fresh.kwargs_widgets
    ):  # clamped ranges follow their controls: set in the same order
        fresh_controls[c.description].value = final[c.description]
    assert w.summary_html.value == fresh.summary_html.value
    got, want = _pixels(w.image.value), _pixels(fresh.image.value)
    assert got.shape == want.shape
    differs = (np.abs(got - want).max(axis=2) > 0.15).mean()
    assert differs < 0.002, f"{differs:.2%} of the pixels differ"


def test_nice_ceiling_takes_four_steps_a_decade_and_leaves_under_half_empty():
    from lab.widgets import nice_ceiling

    assert [
        nice_ceiling(x) for x in (0.16, 2.3, 5.0, 7.0, 1e-3, 10.0, 21.0, 8.1)
    ] == pytest.approx([0.2, 2.5, 5.0, 10.0, 1e-3, 10.0, 25.0, 10.0])
    x = np.geomspace(1e-3, 1e3, 2001)
    tops = np.array([nice_ceiling(v) for v in x])
    assert (tops >= x * (1 - 1e-9)).all() and (x / tops > 1 / 2 - 1e-9).all()


def test_io_traffic_limits_hold_every_setting_of_their_frame():
    from lab.widgets.tiling import _traffic_limits

    (left_x, left_y), right_y = _traffic_limits(64, 2)
    for N, br, bc, causal in ((128, 256, 256, True), (2048, 16, 16, False)):
        r = lab.figures.tiling.draw_hbm_traffic(
            N, 64, br, bc, itemsize=2, causal=causal
        )
        plt.close("all")
        mb = [r[k] / 1e6 for k in ("standard", "fa1", "fa2")]
        assert left_y[0] <= min(mb) and max(mb) <= left_y[1]
        fa1 = [b / 1e6 for b in r["fa1_by_sram"]]
        assert right_y[0] <= min(fa1) and max(fa1 + mb[:1]) <= right_y[1]
        assert left_x[0] < N < left_x[1]


def test_every_builder_is_reached_through_its_module_on_first_use():
    """`lab.widgets` imports a builder's module when a notebook first reaches the builder."""
    assert sorted(widgets._BUILDERS) == sorted(BUILDERS)
    for name, module in widgets._BUILDERS.items():
        builder = getattr(widgets, name)
        assert builder.__module__ == f"lab.widgets.{module}"
    assert widgets.memory.roofline_explorer is widgets.roofline_explorer
    with pytest.raises(AttributeError, match="no_such_slider"):
        widgets.no_such_slider  # noqa: B018


@pytest.mark.parametrize("name", BUILDERS)
def test_building_a_slider_computes_only_its_starting_setting(name):
    w = getattr(widgets, name)()
    assert len(w.cache) == 1 and len(w._frames) == 1


def test_io_traffic_builds_one_setting_and_each_frame_when_first_shown(monkeypatch):
    """Building the traffic slider draws once, runs one instrumented kernel and computes the axes of
    one (d, inputs); a setting computes what it needs when it is first shown, no other."""
    from lab.widgets import tiling

    calls = {"draw": 0, "counts": 0}

    def counted(key, f):
        def wrapper(*args, **kwargs):
            calls[key] += 1
            return f(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        tiling, "draw_hbm_traffic", counted("draw", tiling.draw_hbm_traffic)
    )
    for module in (tiling, lab.figures.tiling):
        monkeypatch.setattr(
            module, "flash_counts", counted("counts", module.flash_counts)
        )
    tiling._traffic_limits.cache_clear()
    tiling._instrumented.cache_clear()
    w = widgets.io_traffic()
    assert calls["draw"] == 1 and len(w.cache) == 1
    assert tiling._traffic_limits.cache_info().misses == 1
    assert tiling._instrumented.cache_info().misses == 1
    # a few hundred closed-form counts, against 2,000 settings of the sliders times ~40 counts each
    assert calls["counts"] < 500
    c = {x.description: x for x in w.kwargs_widgets}
    c["N = M"].value = 2048  # the same frame, the same instrumented run (at N = 256)
    assert calls["draw"] == 2 and tiling._traffic_limits.cache_info().misses == 1
    assert tiling._instrumented.cache_info().misses == 1
    c["d"].value = 128  # a new frame: its axes computed now
    assert calls["draw"] == 3 and tiling._traffic_limits.cache_info().misses == 2
    assert tiling._instrumented.cache_info().misses == 2


def test_every_slider_cell_calls_a_slider():
    """A cell headed `# Slider` shows one: its source calls `lab.widgets.<name>(...)`, a widget lab has."""
    import json
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parent.parent
    seen = 0
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or not source.lstrip().startswith(
                "# Slider"
            ):
                continue
            seen += 1
            calls = re.findall(
                r"^\s*(?:\w+\s*=\s*)?lab\.widgets\.([\w.]+)\(", source, re.M
            )
            assert calls, f"{path.name}: a '# Slider' cell calls no lab.widgets slider"
            for name in calls:  # `memory.roofline_explorer` too: a module's slider
                target = lab.widgets
                for part in name.split("."):
                    target = getattr(target, part)
                assert callable(target), (path.name, name)
    assert seen >= 18
