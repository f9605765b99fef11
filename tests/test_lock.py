"""The lock files: what `make setup` installs, and tools/lock.py, which finishes them."""

import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lock  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

LOCKS = sorted((ROOT / "locks").glob("*.txt"))
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", re.MULTILINE)


def _pins(path: pathlib.Path) -> dict[str, str]:
    return {n.lower().replace("_", "-"): v for n, v in PIN.findall(path.read_text())}


def test_torch_loses_its_build_label_and_nothing_else_changes():
    text = "numpy==2.4.6\ntorch==2.13.0+cpu\n    # via lab\ntriton==3.9.0 ; x\n"
    assert lock.without_build_label(text) == text.replace("+cpu", "")
    assert (
        lock.without_build_label("torch==2.13.0+cu128 ; y\n") == "torch==2.13.0 ; y\n"
    )


def test_there_is_a_lock_for_the_machine_the_course_is_tested_on():
    assert (ROOT / "locks" / "linux-x86_64-py3.11.txt") in LOCKS


@pytest.mark.parametrize("path", LOCKS, ids=[p.name for p in LOCKS])
def test_every_dependency_is_pinned_within_pyproject_ranges(path):
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins(path)
    extras = project["optional-dependencies"]
    for req in map(
        Requirement, project["dependencies"] + extras["test"] + extras["ui"]
    ):
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} missing from {path.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    assert "+" not in pins["torch"]


def test_the_installed_versions_are_the_locked_ones():
    """The environment running these tests is the one the lock describes (where a lock matches it)."""
    import platform
    from importlib import metadata

    name = f"{platform.system().lower()}-{platform.machine()}-py{sys.version_info[0]}.{sys.version_info[1]}.txt"
    path = ROOT / "locks" / name
    if not path.exists():
        pytest.skip(f"no lock for this machine ({name})")
    for pkg in (
        "numpy",
        "ml-dtypes",
        "matplotlib",
        "ipywidgets",
        "nbval",
        "pytest",
        "ruff",
    ):
        assert metadata.version(pkg) == _pins(path)[pkg], pkg
    assert metadata.version("torch").split("+")[0] == _pins(path)["torch"]
