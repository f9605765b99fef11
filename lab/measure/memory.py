"""Peak memory of a torch attention call: its output and every temporary, above the inputs, on a GPU or a CPU.

CUDA: `torch.cuda.max_memory_allocated` above the allocation just before the call. CPU: `tracemalloc`
does not see torch's buffers, so the cases run in a fresh child process, `python -m lab.measure.probe`,
which reads the peak resident size (VmHWM) of each call. The child starts with a fixed malloc mmap
threshold, so every large buffer is its own mapping and returns to the system when freed: each peak is
the call's own. (numpy's allocations, seen by `tracemalloc`, are measured by `lab.peak_bytes`.)

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from .kernels import KERNELS, check_kernel, make_inputs

# glibc malloc: every block of 64 KiB or more gets its own mmap, and freed memory is trimmed at once
PROBE_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
PROBE_MODULE = __package__ + ".probe"


def peak_memory(cases, *, device: str = "cpu") -> list:
    """Peak bytes above the inputs of each case {kernel, B, H, N, d, dtype, causal}: output and every temporary.

    CUDA: `torch.cuda.max_memory_allocated` above the allocation before the call. CPU: all cases in
    one fresh child process (`python -m lab.measure.probe`), each called once to warm up (one-time BLAS
    buffers), then read as the peak resident size during a second call minus the resident size just
    before it (VmHWM reset with /proc/self/clear_refs; None where Linux's /proc is missing).
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    cases = [dict(c) for c in cases]
    for c in cases:
        c.setdefault("dtype", "float32")
        c.setdefault("causal", False)
        check_kernel(c.get("kernel"))
    if not cases:
        return []
    if torch.device(device).type == "cuda":
        return [_cuda_peak(c, device) for c in cases]
    if not os.path.exists("/proc/self/status"):
        return [None] * len(cases)
    return _run_probe(cases, torch.get_num_threads())


def _cuda_peak(case, device) -> int:
    """`max_memory_allocated` during one call minus `memory_allocated` before it, in bytes."""
    fn, _ = KERNELS[case["kernel"]]
    q, k, v = make_inputs(
        case["kernel"],
        case["B"],
        case["H"],
        case["N"],
        case["d"],
        dtype=case["dtype"],
        device=device,
    )
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o = fn(q, k, v, case["causal"])
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated() - base)
    del o, q, k, v
    return peak


def _run_probe(cases, threads: int) -> list:
    """The CPU cases measured in one child process `python -m lab.measure.probe`; its last output line is the JSON list."""
    env = dict(os.environ, **PROBE_ENV)
    root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )  # the folder holding `lab`
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            PROBE_MODULE,
            json.dumps(cases),
            "--threads",
            str(threads),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if run.returncode != 0:
        raise RuntimeError(
            f"the memory probe ({PROBE_MODULE}) failed: {run.stderr[-1500:]}"
        )
    return json.loads(run.stdout.strip().splitlines()[-1])
