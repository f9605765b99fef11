"""Drawing functions shared by notebooks and sliders: each draws one figure from `lab` numbers and returns them.

Taught in: every notebook with a figure.
"""

from .._lazy import submodules_on_first_use

__getattr__ = submodules_on_first_use(__name__)
