"""`python -m lab.bench_numpy`: the numpy kernels' throughput, `flash_attention_numpy` (default 64×64 tiles)
against plain float32 numpy standard attention, softmax(Q Kᵀ) V. A benchmark, printed, never a test.

    python -m lab.bench_numpy [--BH 8] [--N 2048] [--d 64] [--causal]

FLOPs of one forward: 4·B·H·N²·d (halved for causal). Timed with `torch.utils.benchmark`, the two
kernels measured in turn in one run, so the ratio is fair on a noisy machine. The command lives here,
in `labbench` beside the `lab` package; `lab/bench_numpy.py` keeps its name.

Taught in: notebooks/00_the_memory_wall.ipynb (the same two kernels, their memory)
"""

from __future__ import annotations

import argparse

import numpy as np

from lab.attention import attention_naive, flash_attention_numpy

__all__ = ["numpy_throughput", "main"]


def numpy_throughput(
    BH: int = 8,
    N: int = 2048,
    d: int = 64,
    causal: bool = False,
    min_run_time: float = 2.0,
    seed: int = 0,
) -> dict:
    """Median seconds and GFLOP/s ($4 \\cdot BH \\cdot N^2 \\cdot d$ / s / 10⁹) of the flash and the standard numpy kernels on (BH, N, d) float32 inputs."""
    from torch.utils import benchmark

    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((BH, N, d)).astype(np.float32) for _ in range(3)
    )  # (BH, N, d) each
    o_flash, _ = flash_attention_numpy(q, k, v, causal=causal)
    o_std = attention_naive(q, k, v, causal=causal)
    flops = 4 * BH * N * N * d / (2 if causal else 1)
    results = {
        "BH": BH,
        "N": N,
        "d": d,
        "causal": causal,
        "max_abs_diff": float(np.abs(o_flash - o_std).max()),
    }
    for name, stmt in (
        ("standard", "attention_naive(q, k, v, causal=causal)"),
        ("flash", "flash_attention_numpy(q, k, v, causal=causal)"),
    ):
        timer = benchmark.Timer(
            stmt=stmt,
            globals={
                "attention_naive": attention_naive,
                "q": q,
                "k": k,
                "v": v,
                "flash_attention_numpy": flash_attention_numpy,
                "causal": causal,
            },
            label="numpy attention",
            description=name,
        )
        m = timer.blocked_autorange(min_run_time=min_run_time)
        results[name] = {"seconds": m.median, "gflops": flops / m.median / 1e9}
    results["flash_over_standard"] = (
        results["flash"]["gflops"] / results["standard"]["gflops"]
    )
    return results


def main(argv=None) -> None:
    """Command line entry point: prints both kernels' time and GFLOP/s, their throughput ratio and largest difference."""
    parser = argparse.ArgumentParser(
        prog="python -m lab.bench_numpy",
        description="flash_attention_numpy against standard numpy attention",
    )
    parser.add_argument("--BH", type=int, default=8, help="batch × heads")
    parser.add_argument("--N", type=int, default=2048)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--min-run-time", type=float, default=2.0)
    args = parser.parse_args(argv)
    r = numpy_throughput(args.BH, args.N, args.d, args.causal, args.min_run_time)
    print(
        f"B·H = {r['BH']}, N = {r['N']}, d = {r['d']}, causal = {r['causal']}, float32, numpy"
    )
    print(
        f"  standard softmax(QKᵀ)V : {r['standard']['seconds'] * 1e3:8.1f} ms  {r['standard']['gflops']:6.1f} GFLOP/s"
    )
    print(
        f"  flash_attention_numpy : {r['flash']['seconds'] * 1e3:8.1f} ms  {r['flash']['gflops']:6.1f} GFLOP/s  (64×64 tiles)"
    )
    print(
        f"  flash / standard throughput: {r['flash_over_standard']:.2f}x   max |o_flash - o_standard| = {r['max_abs_diff']:.1e}"
    )


if __name__ == "__main__":
    main()
