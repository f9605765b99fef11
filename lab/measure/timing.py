"""Time, measured fairly: the median seconds of one call, and of several candidates in alternating rounds.

On the CPU `torch.utils.benchmark` handles warm-up, threads and repeats; on a GPU
`triton.testing.do_bench` (CUDA events and an L2 flush), or plain CUDA events where Triton is missing.
`time_interleaved` alternates the candidates round by round, so a noisy, shared machine slows them all
alike and their ratios stay fair.

Taught in: notebooks/08_hardware_runs.ipynb (the sweep); notebooks/09_backward.ipynb and
notebooks/10_decoding_and_gqa.ipynb time through it (`lab.time_forward_backward`, `lab.time_decoding`).
"""

from __future__ import annotations

import numpy as np
import torch


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_call(
    fn, *, device: str = "cpu", min_run_time: float = 0.2, warmup: bool = True
) -> float:
    """Median seconds of one `fn()`: `torch.utils.benchmark` on the CPU, `triton.testing.do_bench` (or CUDA events) on a GPU.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if torch.device(device).type == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            return _cuda_events(fn, min_run_time)
        return (
            do_bench(
                fn,
                warmup=25,
                rep=max(1, int(min_run_time * 1000)),
                return_mode="median",
            )
            / 1e3
        )
    from torch.utils import benchmark

    if warmup:
        fn()  # warm-up: first-call allocations, lazy inits
    timer = benchmark.Timer(
        stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
    )
    return timer.blocked_autorange(min_run_time=min_run_time).median


def _cuda_events(fn, min_run_time):
    """Median of CUDA-event times of `fn()`, at least 5 calls and `min_run_time` seconds of them."""
    fn()
    torch.cuda.synchronize()
    times = []
    budget = 0.0
    while budget < min_run_time or len(times) < 5:
        start, end = (
            torch.cuda.Event(enable_timing=True),
            torch.cuda.Event(enable_timing=True),
        )
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        budget += times[-1]
    return float(np.median(times))


def time_interleaved(
    fns: dict, *, device: str = "cpu", rounds: int = 5, min_run_time: float = 0.1
) -> dict:
    """Median seconds per call of each `fns[name]()`, measured in alternating rounds so that noise hits them all alike.

    Each round times every candidate once (`time_call` with `min_run_time`); the result per name is
    the median over the rounds. Taught in: notebooks/08_hardware_runs.ipynb
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm every candidate once, outside the rounds
    _sync(device)
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(
                time_call(fn, device=device, min_run_time=min_run_time, warmup=False)
            )
    return {name: float(np.median(s)) for name, s in samples.items()}
