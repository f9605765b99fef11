"""The committed outputs were made on the machine's own vector unit, never under a portability setting."""

import pathlib
import re

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
UNIT = re.compile(r"vector unit ‹(\w+)›")


def _printed(path: pathlib.Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )


def test_no_committed_notebook_ran_with_torch_vector_kernels_off():
    """`ATEN_CPU_CAPABILITY=default` (make test-portability) makes SDPA 3-5x and exp2 10-45x slower: a
    published timing taken that way misleads, so notebook 08's record of the vector unit must not say it."""
    units = {p.name: UNIT.findall(_printed(p)) for p in NOTEBOOKS}
    assert units["08_hardware_runs.ipynb"], (
        "notebook 08 prints the vector unit it ran on"
    )
    for name, found in units.items():
        assert all(u.upper() != "DEFAULT" for u in found), (
            f"{name} was executed with torch's vector kernels off ({found}): run `make execute`"
        )
