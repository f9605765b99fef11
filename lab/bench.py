"""`python -m lab.bench`: the attention kernels timed and measured on this machine, and the run recorded.

The command is tooling beside the package, `labbench/cli.py` (its options, the sweeps it runs, the
record it writes); this module keeps its name, so `python -m lab.bench` and `lab.bench.main`,
`lab.bench.cpu_targets`, `lab.bench.gpu_sweep` work as before. `python -m lab.bench --help` lists the options.

Taught in: notebooks/08_hardware_runs.ipynb
"""

import sys

from labbench.claims import CPU_CLAIMS, CPU_KERNELS, GPU_KERNELS, cpu_targets, gpu_sweep  # noqa: F401
from labbench.cli import main

__all__ = ["main", "cpu_targets", "gpu_sweep"]

if __name__ == "__main__":
    sys.exit(main())
