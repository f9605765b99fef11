"""Checks written for one notebook's exercises, one module per chapter.

Each builds on `lab.check` and `lab.diagnose` (lab/exercises.py) and adds what that exercise teaches:
instrumented inputs (`lab.CountingArray`, `lab.trace`) that catch a second pass over K or a stored row
of scores, the classic failure cases (a fully masked row, very negative scores, causal with N != M,
block sizes that do not divide N), and hints for the classic mistakes.

Taught in: the exercises at the end of each notebook.
"""

from .._lazy import submodules_on_first_use

__getattr__ = submodules_on_first_use(__name__)
