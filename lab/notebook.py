"""One call at the top of every notebook: seeds, print options, figure defaults.

Taught in: every notebook's setup cell.
"""

from __future__ import annotations

import random
import sys

import numpy as np

__all__ = [
    "setup_notebook",
    "SEED",
    "measured",
    "report",
    "format_table",
    "folded",
    "MEASURED_OPEN",
    "MEASURED_CLOSE",
]

SEED = 0


def setup_notebook(seed: int = SEED) -> np.random.Generator:
    """Seed Python, numpy and torch (if the notebook imported it); short print options; figures legible on a projector.

    Returns a seeded `numpy.random.Generator` for the notebook's own draws.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch = sys.modules.get(
        "torch"
    )  # seeded when the notebook uses it; never imported here
    if torch is not None:
        torch.manual_seed(seed)
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    import matplotlib.pyplot as plt

    _inline_figures()
    plt.rcParams.update(
        {
            "figure.figsize": (8, 4.5),
            "figure.dpi": 100,
            "font.size": 12,
            "axes.titlesize": 13,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "savefig.bbox": "tight",
        }
    )
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


# ---------------------------------------------------------------------------------------------------
# What strict nbval compares, and what it does not.
#
# A committed notebook must pass strict nbval on any learner's machine. So a printed line holds two
# kinds of text:
#   - the same everywhere: verdicts (`< 1e-06: True`), exact counts, shapes, analytic figures;
#   - machine-dependent: rounding errors of float32/float64 results, times, memory readings and their
#     ratios. These change with the CPU, its BLAS, the thread count and the load.
# Machine-dependent numbers are printed through `measured` (or `report`, which uses it): they appear
# between ‹ and ›, and tests/sanitize.cfg replaces everything between those marks before comparing.
# Never print such a number bare, and never put a verdict inside the marks.
# ---------------------------------------------------------------------------------------------------

MEASURED_OPEN, MEASURED_CLOSE = "‹", "›"

_OPS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}


def measured(value, fmt: str = ".1e", unit: str = "") -> str:
    """`value` formatted with `fmt` between ‹ and ›: a number that varies by machine, masked by strict nbval.

    Put any width inside `fmt` (`">8.1f"`), so the masked text has the same width on every machine.
    """
    text = format(value, fmt) + (f" {unit}" if unit else "")
    return f"{MEASURED_OPEN}{text}{MEASURED_CLOSE}"


def report(
    name: str, value, bound=None, *, op: str = "<", fmt: str = ".1e", unit: str = ""
) -> bool | None:
    """Print `name = ‹value›  (op bound: verdict)` and return the verdict (None without a bound).

    The value varies by machine and is masked; the verdict `value op bound` is what strict nbval compares,
    so choose a bound with room on every machine (an error of 3e-16 against `< 1e-12`, not `< 1e-15`).
    """
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    line = f"{name} = {measured(value, fmt, unit)}"
    if bound is None:
        print(line)
        return None
    verdict = bool(_OPS[op](float(value), float(bound)))
    print(f"{line}  ({op} {bound:g}: {verdict})")
    return verdict


def format_table(rows: list[dict], floats: str = ".1e", measured=()) -> str:
    """Rows of equal keys as an aligned text table; floats with format `floats`, integers with thousands separators.

    Columns named in `measured` (rounding errors, times: numbers that vary by machine) are printed through
    `lab.measured` as `‹3.1e-17›` with format `floats`, zeros included, so strict nbval masks them and
    the table keeps the same width on every machine.
    Taught in: notebooks/03_one_pass_attention.ipynb, notebooks/04_merge_order.ipynb
    """
    if not rows:
        return ""
    cols = list(rows[0])
    measured = {measured} if isinstance(measured, str) else set(measured)
    unknown = measured - set(cols)
    if unknown:
        raise ValueError(
            f"measured names columns the rows do not have: {sorted(unknown)}"
        )

    def cell(x, masked=False):
        if masked:
            return _measured_value(float(x), floats)
        if isinstance(x, (bool, np.bool_)):
            return str(bool(x))
        if isinstance(x, (int, np.integer)):
            return f"{int(x):,}"
        if isinstance(x, (float, np.floating)):
            return (
                f"{float(x):g}"
                if float(x).is_integer() and abs(x) < 1e6
                else format(float(x), floats)
            )
        return str(x)

    cells = [[cell(r[c], c in measured) for c in cols] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cols, widths))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append(
            "  ".join(
                x.ljust(w) if i == 0 else x.rjust(w)
                for i, (x, w) in enumerate(zip(r, widths))
            )
        )
    return "\n".join(lines)


_measured_value = (
    measured  # format_table's argument `measured` names columns; this is the function
)


class _Folded:
    """A long text shown folded: in Jupyter a `<details>` block that opens on a click, elsewhere its summary."""

    def __init__(self, text: str, summary: str):
        self.text, self.summary = text, summary

    def __repr__(self) -> str:
        return f"{self.summary} ({self.text.count(chr(10)) + 1} lines, folded)"

    def _repr_html_(self) -> str:
        import html

        return (
            f"<details><summary>{html.escape(self.summary)}</summary>"
            f"<pre>{html.escape(self.text)}</pre></details>"
        )


def folded(text: str, summary: str) -> _Folded:
    """`text` (e.g. a kernel's source) folded under a one-line `summary`, for a cell's last line: a projected
    page shows the summary, a click shows the whole text."""
    if not isinstance(text, str) or not isinstance(summary, str):
        raise TypeError("folded: text and summary must be strings")
    return _Folded(text, summary)
