"""Slider builders: each wraps a pure `lab` function and a drawing from `lab.figures` in ipywidgets.

Every builder returns an `ipywidgets.interactive`; its callback draws one figure, prints one summary
line, and stores its numbers in `.result`, so tests can set a slider's `.value` and read `.result`
(`interactive` itself swallows exceptions raised in callbacks, so the tests are where errors show).
Each notebook shows the static figure of the same drawing beside the slider, so the page reads
without a kernel.

Taught in: every notebook with a slider.
"""

from __future__ import annotations

import ipywidgets
import matplotlib.pyplot as plt

__all__ = ["interactive_figure", "memory_wall"]


def interactive_figure(draw, *, summary=None, **controls) -> ipywidgets.interactive:
    """Sliders `controls` (ipywidgets by keyword) driving `draw(**values) -> result`, which draws a figure.

    `summary(result) -> str`, if given, is printed under the figure. `.result` holds the last result.
    """

    def callback(**values):
        result = draw(**values)
        if summary is not None:
            print(summary(result))
        plt.show()
        return result

    widget = ipywidgets.interactive(callback, {"auto_display": False}, **controls)
    widget.layout = ipywidgets.Layout(width="100%")
    return widget


from .memory import memory_wall  # noqa: E402  (builders below use interactive_figure)
