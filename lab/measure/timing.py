"""Time, measured fairly: the median seconds of one call, and of several candidates in alternating rounds.

On the CPU `torch.utils.benchmark` handles warm-up, threads and repeats; on a GPU
`triton.testing.do_bench` (CUDA events and an L2 flush), or plain CUDA events where Triton is missing.
`time_rounds` times the candidates round by round (each round in turn reversed), so a noisy, shared
machine slows them all alike and their ratios stay fair; `time_interleaved` keeps each one's median and
`spread` says how far its rounds lie apart.

Taught in: notebooks/08_hardware_runs.ipynb (the sweep); notebooks/09_tiled_backward.ipynb,
notebooks/10_decoding.ipynb and notebooks/10_gqa_and_paging.ipynb time through it (`lab.time_forward_backward`,
`lab.time_decoding`).
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


def time_rounds(
    fns: dict, *, device: str = "cpu", rounds: int = 5, min_run_time: float = 0.1
) -> dict:
    """Seconds per call of each `fns[name]()` in each of `rounds` alternating rounds: one array per name.

    Every candidate is called once first (warm-up, outside the rounds); then each round times every
    candidate once with `time_call`, so noise during a round hits them all alike, in the given order in
    even rounds and reversed in odd ones, so that none is always timed first. The spread of a
    name's array is the run-to-run noise a single measurement would have hidden.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if not fns:
        raise ValueError("fns must name at least one callable")
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm every candidate once, outside the rounds
    _sync(device)
    order = list(fns)
    for r in range(int(rounds)):
        for name in (
            order if r % 2 == 0 else order[::-1]
        ):  # a, b, then b, a: no one always first
            fn = fns[name]
            samples[name].append(
                time_call(fn, device=device, min_run_time=min_run_time, warmup=False)
            )
    return {name: np.array(s) for name, s in samples.items()}


def time_interleaved(
    fns: dict, *, device: str = "cpu", rounds: int = 5, min_run_time: float = 0.1
) -> dict:
    """Median seconds per call of each `fns[name]()`, measured in alternating rounds (`time_rounds`).

    Within a round `torch.utils.benchmark` keeps the median of its blocks; a call slower than
    `min_run_time` is a block of one, so the result is then a median over rounds of single calls:
    use 3 rounds or more (of 2 the median is their mean). Taught in: notebooks/08_hardware_runs.ipynb
    """
    t = time_rounds(fns, device=device, rounds=rounds, min_run_time=min_run_time)
    return {name: float(np.median(s)) for name, s in t.items()}


def spread(samples) -> float:
    """(max - min) / median of one candidate's per-round times: the range a single round could have reported."""
    s = np.asarray(samples, dtype=float)
    if s.ndim != 1 or s.size < 1 or not np.all(s > 0):
        raise ValueError(
            f"samples must be a 1-D array of positive times, got {samples!r}"
        )
    return float((s.max() - s.min()) / np.median(s))


def measured_matmul_share(
    N: int = 4096, d: int = 128, *, H: int = 16, device: str = "cuda", seed: int = 0
) -> dict:
    r"""Measured share of an attention forward's time spent outside its matmuls, in FP16.

    $share = 1 - \\frac{4 H N^2 d / R_{mm}}{t}$: $t$ the median time of
    `torch.nn.functional.scaled_dot_product_attention` (its default backend) on (1, H, N, d) inputs, $R_{mm}$
    the FLOP rate of a large FP16 matmul timed on the same device: the time the two matmuls would take at that
    rate, against the whole. Returns `t`, `matmul_flops` ($R_{mm}$), `attention_flops` ($4HN^2d / t$), `share`.
    Taught in: notebooks/06_flashattention2.ipynb
    """
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(8192, 8192, device=device, dtype=torch.float16, generator=g)
    r_mm = 2 * 8192**3 / time_call(lambda: a @ a, device=device)
    q, k, v = (
        torch.randn(1, H, N, d, device=device, dtype=torch.float16, generator=g)
        for _ in range(3)
    )  # (1, H, N, d) each
    sdpa = torch.nn.functional.scaled_dot_product_attention
    t = time_call(lambda: sdpa(q, k, v), device=device)
    work = 4 * H * N * N * d
    return {
        "t": t,
        "matmul_flops": r_mm,
        "attention_flops": work / t,
        "share": 1 - work / r_mm / t,
    }
