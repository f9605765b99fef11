"""`python -m lab.bench_numpy`: the numpy tiled kernel's throughput against plain numpy attention, printed.

The benchmark is tooling beside the package, `labbench/numpy_cli.py`; this module keeps its name, so
`python -m lab.bench_numpy` and `lab.bench_numpy.numpy_throughput` work as before.

Taught in: notebooks/00_the_memory_wall.ipynb (the same two kernels, their memory)
"""

from labbench.numpy_cli import main, numpy_throughput

__all__ = ["numpy_throughput"]

if __name__ == "__main__":
    main()
