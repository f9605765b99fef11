"""The Colab path: the course installed as a wheel, outside the checkout, runs every notebook without an error.

Colab installs `lab` from the repository and opens one notebook on its own, with no repository beside it.
So: build the wheel, install it into a fresh folder (no editable link back to this checkout), copy the
notebooks into another folder, and execute each there with that folder first on the kernel's path.
Run by `make test-installed` (CI); `make test` skips it.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
pytestmark = pytest.mark.installed


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder holding the installed `lab`, the wheel's file names)."""
    wheels, site = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        pip
        + [
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = wheels.glob("*.whl")
    subprocess.run(
        pip + ["install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
    )
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    return site, names


def test_the_wheel_carries_the_data_the_notebooks_read(installed):
    site, names = installed
    # data/ of the repository is the package lab.data in the wheel
    assert "lab/data/minilm_qkv.npz" in names and "lab/data/README.md" in names
    assert (
        sum(n.startswith("lab/data/runs/") and n.endswith(".json") for n in names) >= 2
    )
    assert not any(n.startswith(("tests/", "notebooks/", "tools/")) for n in names)
    code = "import lab, sys; print(lab.__file__); lab.load_activations(); print(len(lab.load_runs()))"
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=site.parent,
        env=dict(os.environ, PYTHONPATH=str(site)),
        check=True,
    )
    path, count = run.stdout.split()
    assert pathlib.Path(path).is_relative_to(site) and int(count) >= 2


def test_the_benchmark_runs_from_the_wheel_beside_lab(installed, tmp_path):
    """`labbench` ships beside `lab`: `python -m lab.bench` and `python -m lab.bench_numpy` run from the installed
    wheel, the CPU memory probe (`python -m lab.measure.probe`) starts from it, and a run is recorded where asked."""
    site, names = installed
    assert {
        "labbench/cli.py",
        "labbench/records.py",
        "labbench/numpy_cli.py",
        "lab/measure/probe.py",
    } <= set(names)
    env = dict(
        os.environ, PYTHONPATH=str(site), FLASH_COURSE_RUNS=str(tmp_path / "mine")
    )
    run = lambda *args: subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # noqa: E731
        env=env,
        timeout=600,
    )
    for module, flag in (("lab.bench", "--gpu-sweep"), ("lab.bench_numpy", "--BH")):
        r = run("-m", module, "--help")
        assert r.returncode == 0 and flag in r.stdout, r.stderr[-1500:]
    r = run(
        "-m",
        "lab.bench",
        "--N",
        "32",
        "--H",
        "1",
        "--rounds",
        "3",
        "--min-run-time",
        "0.01",
        "--quiet",
        "--no-targets",
        "--kernels",
        "torch naive",
        "lab torch flash",
    )
    assert r.returncode == 0, r.stderr[-1500:]
    recorded = [
        line.split("recorded: ", 1)[1]
        for line in r.stdout.splitlines()
        if line.startswith("recorded: ")
    ]
    assert len(recorded) == 1 and pathlib.Path(recorded[0]).parent == tmp_path / "mine"
    record = json.loads(pathlib.Path(recorded[0]).read_text())
    assert {row["kernel"] for row in record["results"]} == {
        "torch naive",
        "lab torch flash",
    }
    if os.path.exists("/proc/self/status"):  # the memory probe ran from the wheel
        assert all(row["peak_mb"] is not None for row in record["results"])
    code = "import lab, labbench.cli; print(lab.__file__); print(labbench.cli.__file__)"
    where = run("-c", code).stdout.split()
    assert len(where) == 2 and all(pathlib.Path(w).is_relative_to(site) for w in where)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_runs_from_the_installed_package(installed, path, tmp_path):
    site, _ = installed
    work = tmp_path / "course"
    work.mkdir()
    shutil.copy(path, work / path.name)
    nb = nbformat.read(work / path.name, as_version=4)
    nb.cells.insert(
        0, nbformat.v4.new_code_cell("import lab; print('lab from', lab.__file__)")
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    client = NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    old = dict(os.environ)
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    where = nb.cells[0].outputs[0]["text"].split("lab from ", 1)[1].strip()
    assert pathlib.Path(where).is_relative_to(site), (
        f"the kernel imported lab from {where}, not the installed wheel"
    )
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors, f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else ""
