"""`labbench`: the course's benchmark tooling, beside the `lab` package and shipped in the same wheel.

`lab` measures (`lab.measure`: time, memory, the machine and its ceilings, sweeps, accuracy); this
package runs those measurements from a terminal and keeps the record of a run:

- `cli`: `python -m lab.bench`, the sweep, `--verify` and `--gpu-sweep`, printed and recorded.
- `claims`: the course's performance claims, measured (the CPU targets, the GPU sweep's summary).
- `records`: the JSON record of a run (schema in data/README.md), written into your own runs
  folder (`lab.user_runs_dir()`) unless told another; `lab.load_runs` reads records back.
- `numpy_cli`: `python -m lab.bench_numpy`, the numpy tiled kernel against plain numpy attention.
- `gpu_check`: `python -m labbench.gpu_check`, the Triton kernels compiled on a GPU against the oracle
  (the first step of `bash tools/run_gpu.sh`).

Benchmarks print and record; they never pass or fail. Used by notebooks/08_hardware_runs.ipynb,
which tells the learner to run `python -m lab.bench` and lists the records.
"""
