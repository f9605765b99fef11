"""Slider builders: each wraps a pure `lab` function and a drawing from `lab.figures` in ipywidgets.

Every builder returns a `FigureSliders` (an `ipywidgets.interactive`): its controls come first in
`.children`, and its last child is a box holding a one-line summary (`ipywidgets.HTML`) above the
figure (`ipywidgets.Image`, a PNG). The callback draws the figure with matplotlib, renders it to PNG
bytes and stores its numbers in `.result`; it prints nothing and displays nothing, so the figure lives
in widget state and a notebook's saved output is the same whoever executes it. Tests set a control's
`.value` and read `.result` (`interactive` swallows exceptions raised in callbacks, so the tests are
where errors show). Each notebook shows the static figure of the same drawing beside the slider, so
the page reads without a kernel.

Taught in: every notebook with a slider.
"""

from __future__ import annotations

import html
import io

import ipywidgets
import matplotlib.pyplot as plt

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
    "loop_overhead_explorer",
    "mask_tiles",
    "merge_order_explorer",
    "one_pass_explorer",
    "online_softmax_trace",
    "p_format_explorer",
    "roofline_explorer",
    "softmax_overflow",
    "tile_fill",
    "tile_walk",
]


class FigureSliders(ipywidgets.interactive):
    """`interactive` whose output is a summary line and a PNG figure held in widgets, not printed output."""

    def __init__(self, draw, summary=None, **controls):
        self.summary_html = ipywidgets.HTML(
            layout=ipywidgets.Layout(min_height="1.5em")
        )
        self.image = ipywidgets.Image(
            format="png", layout=ipywidgets.Layout(max_width="100%")
        )
        self._draw, self._summary = draw, summary
        super().__init__(
            self._render, {"auto_display": False}, clear_output=False, **controls
        )
        self.children = self.children[:-1] + (
            ipywidgets.VBox([self.summary_html, self.image]),
        )
        self.layout = ipywidgets.Layout(width="100%")

    def _render(self, **values):
        before = set(plt.get_fignums())
        result = self._draw(**values)
        new = [n for n in plt.get_fignums() if n not in before]
        fig = plt.figure(new[-1]) if new else plt.gcf()
        buf = io.BytesIO()
        if fig.get_layout_engine() is None:
            self._lay_out(fig)
        fig.savefig(buf, format="png", bbox_inches=fig.bbox_inches)
        for n in new or [fig.number]:
            plt.close(n)
        self.image.value = buf.getvalue()
        if self._summary is not None:
            self.summary_html.value = (
                f"<code>{html.escape(self._summary(result))}</code>"
            )
        return result

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


def interactive_figure(draw, *, summary=None, **controls) -> FigureSliders:
    """Sliders `controls` (ipywidgets by keyword) driving `draw(**values) -> result`, which draws one figure.

    `summary(result) -> str`, if given, is shown above the figure. `.result` holds the last result.
    """
    return FigureSliders(draw, summary, **controls)


from .backward import backward_tiles  # noqa: E402
from .decoding import decode_splits, gqa_group  # noqa: E402
from .fa2 import fa_variants  # noqa: E402
from .hardware import loop_overhead_explorer  # noqa: E402
from .masks import mask_tiles  # noqa: E402
from .memory import roofline_explorer  # noqa: E402  (builders below use interactive_figure)
from .merge import merge_order_explorer  # noqa: E402
from .one_pass import one_pass_explorer  # noqa: E402
from .precision import accumulation_explorer, p_format_explorer  # noqa: E402
from .softmax import online_softmax_trace, softmax_overflow  # noqa: E402
from .tiling import block_footprint, io_traffic, tile_fill, tile_walk  # noqa: E402
