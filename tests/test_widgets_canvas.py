"""The slider canvas that renders each text once: its replays equal its first draw, and it looks like Agg."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.figure  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from lab.widgets import _canvas  # noqa: E402


def _figure(label="exp(88.7) = 3.3e38"):
    fig = matplotlib.figure.Figure(figsize=(4, 3), dpi=100)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1])
    ax.set(xlabel="key j", ylabel="row max m", title=label)
    ax.text(0.3, 0.6, label, rotation=30)
    ax.text(0.1, 0.2, "$e^{s-m}$")
    return fig


def _pixels(fig, canvas) -> np.ndarray:
    canvas(fig)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).astype(int)


def test_replayed_texts_draw_what_the_first_draw_drew():
    _canvas._GLYPHS.clear()
    first = _pixels(_figure(), _canvas.TextCacheCanvas)
    kept = len(_canvas._GLYPHS)
    again = _pixels(_figure(), _canvas.TextCacheCanvas)
    assert kept > 5  # tick labels, axis labels, title, the rotated text
    assert len(_canvas._GLYPHS) == kept  # the second draw recorded nothing new
    assert np.array_equal(first, again)


def test_cached_texts_look_like_agg_up_to_half_a_pixel():
    stock = _pixels(_figure(), FigureCanvasAgg)
    cached = _pixels(_figure(), _canvas.TextCacheCanvas)
    differ = np.abs(stock - cached).max(axis=2) > 32
    assert differ.mean() < 0.02  # glyph edges only: origins snap to whole pixels
    moved = _pixels(_figure("a different title"), _canvas.TextCacheCanvas)
    assert not np.array_equal(moved, cached)  # the key holds the string


def test_math_text_is_never_recorded():
    _canvas._GLYPHS.clear()
    _pixels(_figure(), _canvas.TextCacheCanvas)
    assert not any(key[0].startswith("$") for key in _canvas._GLYPHS)


def test_merged_glyphs_composite_like_one_glyph_after_another():
    a = np.full((2, 3), 128, np.uint8)  # coverage 1/2, bottom-left pixel at (0, 2)
    b = np.full(
        (2, 2), 255, np.uint8
    )  # full coverage at (2, 3): overlaps a at one pixel
    ((merged, x, y, angle),) = _canvas._one_bitmap([(a, 0, 2, 0), (b, 2, 3, 0)])
    assert (x, y, angle) == (0, 3) + (0,) and merged.shape == (3, 4)
    assert merged[0, 0] == 128 and merged[1, 2] == 255  # a alone; a under b
    assert merged[2, 0] == 0 and merged[2, 3] == 255  # neither; b alone
    c = np.full((1, 1), 128, np.uint8)
    two = _canvas._one_bitmap([(c, 0, 1, 0), (c, 0, 1, 0)])[0][0]
    assert two[0, 0] == round(255 * (1 - (1 - 128 / 255) ** 2))  # 1 - (1 - a)(1 - b)
    rotated = [(a, 0, 2, 30), (b, 2, 3, 30)]
    assert _canvas._one_bitmap(rotated) == rotated  # left as recorded


def test_font_heights_are_the_ones_text_layout_reads():
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(size=12)
    ascent, descent, gap = _canvas._font_heights(prop, 100)
    assert ascent > descent > 0 and gap >= 0
    a2, d2, _ = _canvas._font_heights(FontProperties(size=24), 100)
    assert np.isclose(a2, 2 * ascent) and np.isclose(d2, 2 * descent)
