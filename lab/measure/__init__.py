"""Honest measurement on a CPU or an NVIDIA GPU, one module per thing measured:

- `flops`: the work of an attention forward, `attention_flops` (4·B·H·N·M·d, halved for causal).
- `kernels`: the kernels compared, by name (`KERNELS`), their seeded inputs and whether each runs here.
- `timing`: median seconds of a call, and of candidates in alternating rounds (`time_call`, `time_rounds`, `time_interleaved`, `spread`).
- `pitfalls`: what goes wrong, shown: one cold call, busy programs, threads, torch's op count
  (`time_once`, `other_programs`, `at_threads`, `thread_ratios`, `describe_rounds`, `round_ratios`, `ceiling_spread`, `count_torch_ops`);
  the helpers behind its printed lines, reached as `lab.measure.NAME` (`ops_per_tile_step`, `step_op_lines`,
  `thread_verdicts`, `tiled_verdicts`, `exp_ulp`).
- `memory`: peak bytes of a torch call above its inputs (`peak_memory`); on a CPU through the child
  process `python -m lab.measure.probe`.
- `machine`: the machine a run was measured on, whether it is fit to time on, and its ceilings
  (`describe_machine`, `fairness`, `machine_report`, `measure_ceilings`; the copy's size beyond the
  last-level cache, `lab.measure.copy_mib`, `last_level_cache`, `copy_line`).
- `sweep`: every kernel at each setting, as rows and a table (`run_sweep`, `results_table`).
- `accuracy`: max |flash − standard| in each dtype beside a reported run (`verify_accuracy`, `accuracy_table`).
- `runs`: the recorded runs, shipped and your own (`load_runs`, `user_runs_dir`, `RUNS_DIR`), the latest
  sweep of each machine (`latest_sweeps`, `sweep_lines`).

The names in `__all__` are the public ones, and `import lab` exports them all (`lab.run_sweep`, ...); the
notebook helpers named above are not among them. The command line that runs a sweep and writes its record,
`python -m lab.bench`, is tooling beside the package: `labbench/`.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from .accuracy import REPORTED_910B3_ACCURACY, accuracy_table, verify_accuracy
from .flops import attention_flops
from .kernels import KERNELS, kernel_available, make_inputs
from .machine import (
    copy_line as copy_line,
)  # notebook helpers, as lab.measure.NAME only
from .machine import copy_mib as copy_mib
from .machine import describe_machine, fairness, machine_report, measure_ceilings
from .machine import last_level_cache as last_level_cache
from .memory import peak_memory
from .pitfalls import (
    at_threads,
    ceiling_spread,
    count_torch_ops,
    describe_rounds,
    other_programs,
    round_ratios,
    thread_ratios,
    time_once,
)
from .pitfalls import exp2_without_vector_units as exp2_without_vector_units
from .pitfalls import exp_ulp as exp_ulp  # notebook helpers, as lab.measure.NAME only
from .pitfalls import ops_per_tile_step as ops_per_tile_step
from .pitfalls import step_op_lines as step_op_lines
from .pitfalls import thread_verdicts as thread_verdicts
from .pitfalls import tiled_verdicts as tiled_verdicts
from .runs import (
    RUNS_DIR,
    accuracy_lines,
    latest_sweeps,
    load_runs,
    record_run,
    sweep_lines,
    user_runs_dir,
)
from .sweep import results_table, run_sweep
from .timing import spread, time_call, time_interleaved, time_rounds

__all__ = [
    "KERNELS",
    "attention_flops",
    "make_inputs",
    "kernel_available",
    "time_call",
    "time_interleaved",
    "time_rounds",
    "spread",
    "time_once",
    "other_programs",
    "count_torch_ops",
    "at_threads",
    "thread_ratios",
    "describe_rounds",
    "round_ratios",
    "ceiling_spread",
    "fairness",
    "machine_report",
    "latest_sweeps",
    "sweep_lines",
    "accuracy_lines",
    "peak_memory",
    "describe_machine",
    "measure_ceilings",
    "run_sweep",
    "results_table",
    "record_run",
    "load_runs",
    "verify_accuracy",
    "accuracy_table",
    "RUNS_DIR",
    "user_runs_dir",
    "REPORTED_910B3_ACCURACY",
]
