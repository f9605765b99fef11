"""An Agg canvas that renders each distinct text once and replays its glyphs afterwards.

A slider's figure is mostly text (tick labels, bar labels, legends), and Agg rasterizes every glyph of
every text at every draw: about 2 ms for a label of 15 characters, most of an update. A text drawn at
an integer pixel origin rasterizes to the same glyph bitmaps wherever it lands, so this renderer
records the bitmaps of each (string, font, angle) the first time and, at later draws, hands them to
Agg's compositor at the new origin in the current colour. The only visible change from stock Agg is
that a text's origin snaps to the pixel grid (at most half a pixel). Math text (`$...$`, which also
draws rules) and anything the recording does not recognise take matplotlib's own path.

Taught in: every notebook with a slider (the sliders' figures).
"""

from __future__ import annotations

import collections

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg

__all__ = ["TextCacheCanvas"]

_GLYPHS: collections.OrderedDict = (
    collections.OrderedDict()
)  # text key -> recorded calls
_HEIGHTS: dict = {}  # (font properties, dpi) -> (ascent, descent, line gap) in pixels
_GLYPHS_KEPT = 4096  # distinct texts kept (a few hundred bytes each)


class _Recorder:
    """Stands in for the C renderer during one text draw: records `draw_text_image`, forwards all."""

    def __init__(self, renderer):
        self._renderer, self.calls = renderer, []

    def draw_text_image(self, image, x, y, angle, gc):
        self.calls.append(
            (
                np.array(image, copy=True) if isinstance(image, np.ndarray) else None,
                x,
                y,
                angle,
            )
        )
        return self._renderer.draw_text_image(image, x, y, angle, gc)

    def __getattr__(self, name):
        self.calls.append((None, 0, 0, 0))  # anything else drawn: not replayable
        return getattr(self._renderer, name)


class TextCacheRenderer(RendererAgg):
    """`RendererAgg` whose `draw_text` replays recorded glyph bitmaps for texts it has drawn before,
    and which keeps each font's height metrics (`Text` asks for them at every layout)."""

    def _get_font_height_metrics(self, prop):
        key = (hash(prop), self.dpi)
        if key not in _HEIGHTS:
            _HEIGHTS[key] = _font_heights(prop, self.dpi)
        return _HEIGHTS[key]

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        xi, yi = round(x), round(y)
        key = (
            s,
            _hashable_values(prop.__dict__.values()),
            angle,
            self.dpi,
            gc.get_antialiased(),
            None if mtext is None else _hashable(mtext.get_fontfeatures()),
            None if mtext is None else mtext.get_language(),
        )
        calls = _GLYPHS.get(key)
        if calls is None:
            inner, recorder = self._renderer, _Recorder(self._renderer)
            self._renderer = recorder
            try:
                super().draw_text(gc, xi, yi, s, prop, angle, ismath, mtext)
            finally:
                self._renderer = inner
            if all(image is not None for image, *_ in recorder.calls):
                _GLYPHS[key] = [
                    (im, cx - xi, cy - yi, a)
                    for im, cx, cy, a in _one_bitmap(recorder.calls)
                ]
                while len(_GLYPHS) > _GLYPHS_KEPT:
                    _GLYPHS.popitem(last=False)
            return None
        _GLYPHS.move_to_end(key)
        for image, dx, dy, a in calls:
            self._renderer.draw_text_image(image, xi + dx, yi + dy, a, gc)
        return None


def _one_bitmap(calls: list) -> list:
    """Upright glyph bitmaps (matplotlib 3.11 draws a text glyph by glyph) merged into one, so that a
    replay composites the text in one call.

    Each bitmap is a coverage mask whose bottom-left pixel sits at (x, y), y counted downwards. Where
    two overlap, coverage a then b composite like one of 1 - (1 - a)(1 - b), which is what is stored.
    """
    if len(calls) < 2 or any(angle != 0 for *_, angle in calls):
        return calls
    x0 = min(x for _, x, _, _ in calls)
    x1 = max(x + im.shape[1] for im, x, _, _ in calls)
    top = min(y - im.shape[0] for im, _, y, _ in calls)
    bottom = max(y for _, _, y, _ in calls)
    clear = np.ones((bottom - top, x1 - x0))  # 1 - coverage
    for im, x, y, _ in calls:
        h, w = im.shape
        clear[y - h - top : y - top, x - x0 : x - x0 + w] *= 1 - im / 255
    merged = np.round(255 * (1 - clear)).astype(np.uint8)
    return [(merged, x0, bottom, 0)]


def _font_heights(prop, dpi: float):
    """Ascent, descent and line gap of `prop`'s font at `dpi`, in pixels, from its OS/2 or hhea table
    (what `Text` reads for every text it lays out), or None where the font has neither."""
    from matplotlib.font_manager import fontManager, get_font

    font = get_font(fontManager._find_fonts_by_props(prop))
    scale = (
        prop.get_size_in_points() * dpi / 72 / font.get_sfnt_table("head")["unitsPerEm"]
    )
    for table, gap, ascent, descent in (
        ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
        ("hhea", "lineGap", "ascent", "descent"),
    ):
        t = font.get_sfnt_table(table)
        if t is not None:
            return t[ascent] * scale, -t[descent] * scale, t[gap] * scale
    return None, None, None


def _hashable_values(values) -> tuple:
    """A font's properties as a key (its family is a list)."""
    return tuple(_hashable(v) for v in values)


def _hashable(value):
    """Font features as a hashable key (matplotlib keeps them as a tuple or None)."""
    return tuple(value) if isinstance(value, list) else value


class TextCacheCanvas(FigureCanvasAgg):
    """Agg canvas drawing with `TextCacheRenderer`."""

    def get_renderer(self):
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = TextCacheRenderer(w, h, self.figure.dpi)
            self._lastKey = key
        return self.renderer
