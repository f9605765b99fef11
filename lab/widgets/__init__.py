"""Slider builders: each wraps a pure `lab` function and a drawing from `lab.figures` in ipywidgets.

Every builder returns a `FigureSliders` (an `ipywidgets.interactive`): its controls come first in
`.children`, and its last child is a box holding a one-line summary (`ipywidgets.HTML`) above the
figure (`ipywidgets.Image`, a JPEG at quality 95 without chroma subsampling: it encodes in a fifth of a
PNG's time, and its rounding stays under what the eye sees in a plot). The callback builds the figure's
artists with matplotlib (Agg, whatever the notebook's backend), renders what the setting changed to image
bytes and stores its numbers
in `.result`; it prints nothing and displays nothing, so the figure lives in widget state and a
notebook's saved output is the same whoever executes it. The same mechanism runs in JupyterLab, the
classic Notebook and Colab (an Image widget, no ipympl). Tests set a control's `.value` and read
`.result` (`interactive` swallows exceptions raised in callbacks, so the tests are where errors show).
Each notebook shows the static figure of the same drawing beside the slider, so the page reads without
a kernel.

Taught in: every notebook with a slider.
"""

from __future__ import annotations

import collections
import html
import importlib
import io

import ipywidgets
import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import PIL.Image  # matplotlib's own image library

from ._canvas import TextCacheCanvas

__all__ = [
    "FigureSliders",
    "interactive_figure",
    "accumulation_explorer",
    "backward_tiles",
    "block_footprint",
    "decode_splits",
    "fa_variants",
    "gqa_group",
    "io_traffic",
    "jacobian_explorer",
    "loop_overhead_explorer",
    "mask_tiles",
    "merge_order_explorer",
    "occupancy_explorer",
    "one_pass_explorer",
    "online_softmax_trace",
    "p_format_explorer",
    "roofline_explorer",
    "softmax_overflow",
    "tile_fill",
    "tile_walk",
    "wave_explorer",
]


class FigureSliders(ipywidgets.interactive):
    """`interactive` whose output is a summary line and a figure (JPEG) held in widgets, not printed output.

    An update calls `draw(**values) -> result`, which builds the figure's artists, and renders only what
    the setting changed: the frame (figure size, Axes boxes, limits, ticks, axis labels, legends) is
    rendered once per distinct frame and kept; each update restores it and draws the content (lines,
    patches, texts, images, titles) over it. Every Axes keeps the box the first drawing laid out. Each
    setting's image, summary and result are kept in `cache` (the controls take discrete values), so a
    setting seen before answers without drawing.

    With `reuse=True` (or the name of `draw`'s keyword for its Axes, such as `reuse="axes"`) the figure
    is built once: later updates remove what the previous drawing added to each Axes (colorbars' Axes
    are kept) and call `draw(**values, ax=axes)` on the same Axes, `axes` being the single Axes or an
    array of them, so no figure, Axes or colorbar is built again.
    """

    CACHE_SIZE = 128  # settings kept (image bytes, summary, result): a few MB
    FRAMES = 16  # rendered frames kept (one RGBA buffer each, 1-4 MB): a slider moved back and forth redraws no frame

    def __init__(self, draw, summary=None, *, reuse: bool | str = False, **controls):
        self.summary_html = ipywidgets.HTML(
            layout=ipywidgets.Layout(min_height="1.5em")
        )
        self.image = ipywidgets.Image(
            format="jpeg", layout=ipywidgets.Layout(max_width="100%")
        )
        self._draw, self._summary, self._reuse = draw, summary, reuse
        self._axes = None  # with reuse: what `draw` gets as `ax`
        self._axes_keyword = reuse if isinstance(reuse, str) else "ax"
        self.figure = None  # the figure of the last update
        self.cache = (
            collections.OrderedDict()
        )  # setting -> (result, image bytes, summary HTML)
        self._frames = (
            collections.OrderedDict()
        )  # frame key -> (background, title positions)
        self._boxes = None  # (figure size, Axes boxes) of the first drawing
        super().__init__(
            self._render, {"auto_display": False}, clear_output=False, **controls
        )
        self.children = self.children[:-1] + (
            ipywidgets.VBox([self.summary_html, self.image]),
        )
        self.layout = ipywidgets.Layout(width="100%")

    def _render(self, **values):
        key = tuple(values.items())
        if key in self.cache:
            self.cache.move_to_end(key)
        else:
            result = self._build(values)
            text = (
                ""
                if self._summary is None
                else f"<code>{html.escape(self._summary(result))}</code>"
            )
            self.cache[key] = (result, self.encode(), text)
            while len(self.cache) > self.CACHE_SIZE:
                self.cache.popitem(last=False)
        result, picture, text = self.cache[key]
        self.image.value = picture
        self.summary_html.value = text
        return result

    def _build(self, values: dict):
        """Call `draw` and take its figure out of pyplot (no cell shows it); its Axes get the first drawing's boxes."""
        if self._reuse and self._axes is not None:
            return self._redraw(values)
        before = set(plt.get_fignums())
        result = self._draw(**values)
        new = [n for n in plt.get_fignums() if n not in before]
        fig = plt.figure(new[-1]) if new else plt.gcf()
        for n in new or [fig.number]:
            plt.close(n)
        TextCacheCanvas(
            fig
        )  # its own Agg canvas, whatever the backend; texts rendered once
        shape = (tuple(fig.get_size_inches()), len(fig.axes))
        if self._boxes is None or self._boxes[0] != shape:
            if fig.get_layout_engine() is None:
                self._lay_out(fig)
            else:
                fig.canvas.draw()  # the layout engine places the Axes once
            self._boxes = (shape, [ax.get_position(original=True) for ax in fig.axes])
            self._frames.clear()
        fig.set_layout_engine("none")
        for ax, box in zip(fig.axes, self._boxes[1]):
            ax.set_position(box)
            _round_axes_out(ax)
        self.figure = fig
        if self._reuse:
            main = [ax for ax in fig.axes if not hasattr(ax, "_colorbar")]
            self._axes = main[0] if len(main) == 1 else np.array(main, dtype=object)
        return result

    def _redraw(self, values: dict):
        """`draw` again on the kept Axes, after taking away what the last drawing added to them."""
        fig = self.figure
        for t in list(fig.texts):
            t.remove()
        for ax in np.ravel(self._axes):
            _clear_content(ax)
        before = set(plt.get_fignums())
        result = self._draw(**values, **{self._axes_keyword: self._axes})
        if set(plt.get_fignums()) - before:
            raise RuntimeError("a drawing made with reuse=True opened a new figure")
        for ax, box in zip(fig.axes, self._boxes[1]):
            ax.set_position(
                box
            )  # the first drawing's boxes, whatever the drawing adjusted
            _round_axes_out(ax)
        return result

    def encode(self) -> bytes:
        """The figure as JPEG bytes: its frame from `_frames` (rendered on a miss), its content drawn over it."""
        fig = self.figure
        key = _frame_key(fig)
        content = [_content(ax) for ax in fig.axes]
        if key in self._frames:
            self._frames.move_to_end(key)
            background, titles = self._frames[key]
            renderer = fig.canvas.get_renderer()
            renderer.restore_region(background)
            for ax, xy in zip(fig.axes, titles):
                ax.title.set_position(
                    xy
                )  # where the frame's draw placed it (above top ticks, if any)
        else:
            for artists in content:
                for a in artists:
                    a.set_animated(True)  # left out of the frame
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            titles = [ax.title.get_position() for ax in fig.axes]
            self._frames[key] = (renderer.copy_from_bbox(fig.bbox), titles)
            while len(self._frames) > self.FRAMES:
                self._frames.popitem(last=False)
        for artists in content:
            for a in sorted(artists, key=lambda a: a.get_zorder()):
                a.draw(renderer)
        buf = io.BytesIO()
        rgba = PIL.Image.frombuffer(
            "RGBA", (int(renderer.width), int(renderer.height)), renderer.buffer_rgba()
        )
        # RGB (the figures are opaque); a PNG's row filtering alone takes ~25 ms at 1500 x 700 pixels
        rgba.convert("RGB").save(buf, format="jpeg", quality=95, subsampling=0)
        return buf.getvalue()

    def _lay_out(self, fig) -> None:
        """Tight layout on the first drawing; later drawings of the same axes reuse its margins (a slider
        moves values, not the figure's structure), which halves the callback's time."""
        key = (len(fig.axes), tuple(fig.get_size_inches()))
        if getattr(self, "_margins", (None, None))[0] != key:
            fig.tight_layout()
            p = fig.subplotpars
            self._margins = (
                key,
                dict(
                    left=p.left,
                    right=p.right,
                    bottom=p.bottom,
                    top=p.top,
                    wspace=p.wspace,
                    hspace=p.hspace,
                ),
            )
        else:
            fig.subplots_adjust(**self._margins[1])


def _frame_key(fig) -> tuple:
    """What a frame shows: figure size, and per Axes its box, limits, scales, ticks and axis labels."""
    key = [
        tuple(fig.get_size_inches()),
        fig.dpi,
        tuple(t.get_text() for t in fig.texts),
    ]
    for ax in fig.axes:
        ax.apply_aspect()
        ticks = []
        for axis in (ax.xaxis, ax.yaxis):
            locs = tuple(axis.get_majorticklocs())
            ticks += [
                locs,
                tuple(axis.get_major_formatter().format_ticks(locs)),
                tuple(axis.get_minorticklocs()),
                axis.get_label_text(),
            ]
        key.append(
            (
                tuple(ax.get_position().bounds),
                ax.get_xlim(),
                ax.get_ylim(),
                ax.get_xscale(),
                ax.get_yscale(),
                ax.axison,
                *ticks,
            )
        )
    return tuple(key)


def _round_axes_out(ax) -> None:
    """Round value axes' limits out to their own major ticks, so that nearby settings share a frame.

    A linear axis from 0 (bars, counts) goes up to `nice_ceiling` of its top instead.

    A log y axis rounds out to its tick powers too (a log x axis, in these figures a fixed range such as
    the sequence lengths, keeps its limits). Left alone: colorbars (their range is the colour map's),
    Axes with images or a fixed aspect (tile grids at their exact extent), axes with fixed tick labels
    (categories), inverted axes, scales other than linear and log, and limits the drawing marked as
    exact: `ax.fixed_limits = True` for both axes, `"x"` or `"y"` for one (an axis of a chip's 108 SMs,
    of the key blocks).
    """
    if hasattr(ax, "_colorbar") or ax.images or ax.get_aspect() != "auto":
        return
    fixed = getattr(ax, "fixed_limits", "")
    fixed = "xy" if fixed is True else fixed or ""
    for name, axis, get, set_ in (
        ("x", ax.xaxis, ax.get_xlim, ax.set_xlim),
        ("y", ax.yaxis, ax.get_ylim, ax.set_ylim),
    ):
        lo, hi = get()
        if (
            name in fixed
            or lo >= hi
            or axis.get_scale() not in ("linear", "log")
            or (axis.get_scale() == "log" and (lo <= 0 or axis is ax.xaxis))
            or isinstance(axis.get_major_formatter(), matplotlib.ticker.FixedFormatter)
        ):
            continue
        if axis.get_scale() == "linear" and lo == 0 and hi > 0:
            set_(
                0, nice_ceiling(hi)
            )  # bars and counts from 0: a few heights per decade
        else:
            set_(*round_out(lo, hi, axis.get_major_locator()))


_NICE_STEPS = (1, 2, 2.5, 5, 10)


def nice_ceiling(x: float) -> float:
    """The least of 1, 2, 2.5 and 5 times a power of ten at or above `x` > 0.

    A value axis from 0 takes one of four heights a decade, so that settings near each other share a
    frame (2.5: a top just past 20 gets 25, not 50).
    """
    power = 10.0 ** np.floor(np.log10(x))
    for m in _NICE_STEPS:
        if m * power >= x * (1 - 1e-9):
            return float(m * power)
    return float(10 * power)


def round_out(lo: float, hi: float, locator) -> tuple[float, float]:
    """(lo, hi) widened to the nearest ticks of `locator` at or beyond them (unchanged where none is)."""
    ticks = np.asarray(locator.tick_values(lo, hi), dtype=float)
    eps = 1e-9 * (hi - lo)  # a tick computed as 2.0000000000000004 is at 2
    below, above = ticks[ticks <= lo + eps], ticks[ticks >= hi - eps]
    return (
        float(below.max()) if below.size else lo,
        float(above.min()) if above.size else hi,
    )


def _clear_content(ax) -> None:
    """Take from `ax` what a drawing added (artists, legend, titles' text) and let its limits follow the next one."""
    for a in list(ax._children):
        a.remove()
    ax.containers.clear()  # bar containers, whose bars went above (a legend would still list them)
    if ax.legend_ is not None:
        ax.legend_.remove()
    for t in (ax.title, ax._left_title, ax._right_title):
        t.set_text("")
    ax.set_autoscale_on(True)
    ax.ignore_existing_data_limits = True
    ax.relim()


def _content(ax) -> list:
    """The artists of `ax` an update draws over its frame: all but the background, spines and axes (legends included)."""
    frame = {ax.patch, ax.xaxis, ax.yaxis, *ax.spines.values()}
    return [a for a in ax.get_children() if a not in frame and a.get_visible()]


def _block_sliders(options, block_q, block_k, **extra) -> dict:
    """The Br and Bc sliders of every tiling widget, as controls `block_q` (Br) and `block_k` (Bc) over the same `options`."""
    return {
        name: ipywidgets.SelectionSlider(
            options=options, value=value, description=label, **extra
        )
        for name, value, label in (
            ("block_q", block_q, "Br"),
            ("block_k", block_k, "Bc"),
        )
    }


def _ratio_words(ratio: float, less: str = "less") -> str:
    """A ratio said the way round that reads: '3.9× less' for 3.9, '1.3× more' for 0.77 (`less`: the word below 1's other side)."""
    return f"{ratio:.1f}× {less}" if ratio >= 1 else f"{1 / ratio:.1f}× more"


def interactive_figure(
    draw, *, summary=None, reuse: bool | str = False, **controls
) -> FigureSliders:
    """Sliders `controls` (ipywidgets by keyword) driving `draw(**values) -> result`, which draws one figure.

    `summary(result) -> str`, if given, is shown above the figure. `.result` holds the last result. With
    `reuse=True` (or `reuse="axes"`, the name of its keyword), `draw` takes `ax=` and draws on the Axes
    it is given after the first time (see `FigureSliders`).
    """
    return FigureSliders(draw, summary, reuse=reuse, **controls)


# Each builder's module, imported the first time a notebook reaches the builder (PEP 562): a notebook
# that shows one slider loads that slider's drawing and kernels only (not torch for the backward's).
_BUILDERS = {
    "backward_tiles": "backward",
    "jacobian_explorer": "backward",
    "decode_splits": "decoding",
    "gqa_group": "decoding",
    "fa_variants": "fa2",
    "loop_overhead_explorer": "hardware",
    "occupancy_explorer": "hardware",
    "mask_tiles": "masks",
    "roofline_explorer": "memory",
    "merge_order_explorer": "merge",
    "one_pass_explorer": "one_pass",
    "accumulation_explorer": "precision",
    "p_format_explorer": "precision",
    "online_softmax_trace": "softmax",
    "softmax_overflow": "softmax",
    "block_footprint": "tiling",
    "io_traffic": "tiling",
    "tile_fill": "tiling",
    "tile_walk": "tiling",
    "wave_explorer": "fa2",
}


def __getattr__(name: str):
    """`lab.widgets.NAME`: import the module of builder NAME (or the submodule NAME) on first use."""
    if name in _BUILDERS:
        value = getattr(importlib.import_module(f".{_BUILDERS[name]}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and name in set(_BUILDERS.values()):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
