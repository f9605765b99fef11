"""Subpackages whose chapter modules load on first use: `lab.figures.tiling` imports lab/figures/tiling.py
the first time a notebook reaches it (PEP 562), so a package import costs nothing."""

from __future__ import annotations

import importlib


def submodules_on_first_use(package: str):
    """A module `__getattr__` for `package`: `package.NAME` imports the submodule NAME."""

    def __getattr__(name: str):
        if not name.startswith("__"):
            try:
                return importlib.import_module(f".{name}", package)
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
