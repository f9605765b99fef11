"""One call at the top of every notebook: seeds, print options, figure defaults.

Taught in: every notebook's setup cell.
"""

from __future__ import annotations

import random

import numpy as np

__all__ = ["setup_notebook", "SEED"]

SEED = 0


def setup_notebook(seed: int = SEED) -> np.random.Generator:
    """Seed Python, numpy and torch; short print options; figures legible on a projector.

    Returns a seeded `numpy.random.Generator` for the notebook's own draws.
    """
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
    except ImportError:  # torch is a dependency, but the numpy notebooks do not need it
        pass
    else:
        torch.manual_seed(seed)
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    import matplotlib.pyplot as plt

    _inline_figures()
    plt.rcParams.update({
        "figure.figsize": (8, 4.5),
        "figure.dpi": 100,
        "font.size": 12,
        "axes.titlesize": 13,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "savefig.bbox": "tight",
    })
    return np.random.default_rng(seed)


def _inline_figures() -> None:
    """In a Jupyter kernel, draw figures inline as PNG, whatever MPLBACKEND the kernel inherited."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None or getattr(ip, "kernel", None) is None:
        return
    ip.run_line_magic("matplotlib", "inline")
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("png")
