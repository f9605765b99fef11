"""The package as a whole: public names, docstrings that point at real notebooks, no side effects on import."""

import importlib
import pathlib
import pkgutil
import re
import warnings

import pytest

import lab

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_NAMES = [
    "softmax_naive",
    "softmax_safe",
    "softmax_online",
    "online_normalizer",
    "SoftmaxState",
    "partial_state",
    "merge_states",
    "finalize",
    "attention_reference",
    "flash_attention_numpy",
    "flash_attention_torch",
    "FlashAttention",
    "flash_attention_triton",
    "round_to",
    "setup_notebook",
]
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(lab.__path__, "lab.")
    if not m.name.endswith("__main__")
)


@pytest.mark.parametrize("name", API_NAMES)
def test_api_names_are_importable_from_the_top_level(name):
    obj = getattr(lab, name)
    assert obj.__doc__ and obj.__doc__.strip()


@pytest.mark.parametrize("module", MODULES)
def test_modules_compile_cleanly_and_name_real_notebooks(module):
    path = pathlib.Path(importlib.import_module(module).__file__)
    text = path.read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. invalid escapes in LaTeX docstrings
        compile(text, str(path), "exec")
    for ref in re.findall(r"notebooks/(\d\d_[A-Za-z0-9_]+\.ipynb)", text):
        assert (ROOT / "notebooks" / ref).exists(), (
            f"{module} names notebooks/{ref}, which does not exist"
        )


@pytest.mark.parametrize("module", MODULES)
def test_public_functions_have_docstrings(module):
    mod = importlib.import_module(module)
    for name in getattr(mod, "__all__", []):
        obj = getattr(mod, name)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), (
                f"{module}.{name} has no docstring"
            )


def test_no_two_modules_export_the_same_name():
    """A name exported twice must be one object re-exported (lab.attention re-exports lab.kernels), never two."""
    owners = {}
    for module in MODULES:
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", []):
            owners.setdefault(name, {}).setdefault(id(getattr(mod, name)), []).append(
                module
            )
    clashes = {
        n: m
        for n, m in owners.items()
        if len(m) > 1
        and not all(x.startswith("lab.widgets") for ms in m.values() for x in ms)
    }
    assert not clashes
