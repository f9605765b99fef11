"""The course's performance claims, measured on this machine: the CPU targets and the GPU sweep's summary.

A claim is printed with the measured ratio and whether it holds here, never asserted: a benchmark
depends on the machine and its load. The kernels of a setting are timed interleaved (`lab.time_interleaved`),
so a busy machine slows them alike.

Used by: `python -m lab.bench` (labbench/cli.py); the recorded targets are read in
notebooks/08_hardware_runs.ipynb.
"""

from __future__ import annotations

import torch

from lab import measure

__all__ = [
    "cpu_targets",
    "gpu_sweep",
    "targets_text",
    "CPU_CLAIMS",
    "CPU_KERNELS",
    "GPU_KERNELS",
]

# The kernels `python -m lab.bench` sweeps unless told `--kernels`: on a CPU, and on a GPU (the GPU sweep too).
CPU_KERNELS = [
    "numpy reference",
    "numpy flash",
    "torch naive",
    "lab torch flash",
    "sdpa math",
    "sdpa flash",
]
GPU_KERNELS = [
    "torch naive",
    "lab torch flash",
    "sdpa math",
    "sdpa flash",
    "sdpa efficient",
    "sdpa cudnn",
    "triton",
]


def cpu_targets(
    *,
    rounds: int = 5,
    min_run_time: float = 0.3,
    memory: bool = True,
    progress: bool = True,
    threads: int | None = None,
) -> dict:
    """The course's CPU claims, measured: throughput of `lab` torch flash relative to SDPA and to naive at B=1, H=8,
    N=4096, d=64 fp32, interleaved; and its extra peak memory relative to naive's at H=1, N=8192 (`CPU_CLAIMS`).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    from tqdm.auto import tqdm

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _cpu_targets(rounds, min_run_time, memory, progress, tqdm)
    finally:
        torch.set_num_threads(before)


def _cpu_targets(rounds, min_run_time, memory, progress, tqdm):
    fns = {}
    for name in ("lab torch flash", "sdpa flash", "torch naive"):
        q, k, v = measure.make_inputs(name, 1, 8, 4096, 64)
        fns[name] = lambda fn=measure.KERNELS[name][0], q=q, k=k, v=v: fn(
            q, k, v, False
        )
    with tqdm(
        total=2 if memory else 1, desc="targets", disable=not progress, leave=False
    ) as bar:
        t = measure.time_interleaved(fns, rounds=rounds, min_run_time=min_run_time)
        bar.update(1)
        out = {
            "threads": torch.get_num_threads(),
            "time_s": t,
            "vs_sdpa": t["sdpa flash"] / t["lab torch flash"],
            "vs_naive": t["torch naive"] / t["lab torch flash"],
        }
        if memory:
            flash, naive = measure.peak_memory(
                [
                    dict(kernel=k, B=1, H=1, N=8192, d=64)
                    for k in ("lab torch flash", "torch naive")
                ]
            )
            out.update(
                peak_flash_mb=None if flash is None else flash / 2**20,
                peak_naive_mb=None if naive is None else naive / 2**20,
                memory_fraction=None if not (flash and naive) else flash / naive,
            )
            bar.update(1)
    return out


# What the course claims of its default torch kernel on a CPU, each checked against this machine's measurement.
CPU_CLAIMS = {"vs_sdpa": 0.85, "vs_naive": 2.5, "memory_fraction": 1 / 80}


def targets_text(t: dict) -> str:
    """The measured CPU targets `t` (from `cpu_targets`) as lines of text, each claim with its verdict here."""
    holds = lambda ok: "holds here" if ok else "does not hold here"
    lines = [
        f"The course's CPU claims, measured (interleaved, {t['threads']} torch thread{'s' if t['threads'] != 1 else ''}; "
        "a benchmark, never asserted):",
        f"  B=1 H=8 N=4096 d=64 fp32: lab torch flash at {t['vs_sdpa']:.2f}x SDPA's throughput "
        f"(claim >= {CPU_CLAIMS['vs_sdpa']}x: {holds(t['vs_sdpa'] >= CPU_CLAIMS['vs_sdpa'])}), "
        f"{t['vs_naive']:.2f}x naive's (claim >= {CPU_CLAIMS['vs_naive']:g}x: {holds(t['vs_naive'] >= CPU_CLAIMS['vs_naive'])})",
    ]
    if t.get("memory_fraction") is not None:
        lines.append(
            f"  H=1 N=8192 d=64: extra peak memory {t['peak_flash_mb']:.1f} MB vs naive's {t['peak_naive_mb']:.1f} MB "
            f"= 1/{1 / t['memory_fraction']:.0f} (claim <= 1/{1 / CPU_CLAIMS['memory_fraction']:.0f}: "
            f"{holds(t['memory_fraction'] <= CPU_CLAIMS['memory_fraction'])})"
        )
    return "\n".join(lines)


def gpu_sweep(
    *,
    Ns=(1024, 2048, 4096, 8192, 16384),
    d=(64, 128),
    dtypes=("float16", "bfloat16"),
    B: int = 4,
    H: int = 16,
    causal=(False, True),
    rounds: int = 3,
    progress: bool = True,
) -> tuple[list, dict]:
    """The GPU sweep: every kernel that runs there, plus the summary of the course's GPU claim
    (Triton forward TFLOP/s over SDPA flash's at d = 64, 128 and N = 4096-16384; the claim is ≥ 0.7).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device here (torch.cuda.is_available() is False): the GPU sweep needs one"
        )
    rows = measure.run_sweep(
        Ns,
        d=d,
        dtypes=dtypes,
        causal=causal,
        B=B,
        H=H,
        kernels=GPU_KERNELS,
        device="cuda",
        rounds=rounds,
        min_run_time=0.1,
        memory=True,
        progress=progress,
    )
    summary = {}
    done = [r for r in rows if not r.get("skipped")]
    for r in done:
        if r["kernel"] != "triton" or r["N"] < 4096:
            continue
        base = [
            s
            for s in done
            if s["kernel"] == "sdpa flash"
            and all(s[k] == r[k] for k in ("dtype", "N", "d", "causal"))
        ]
        if base:
            summary[
                f"{r['dtype']} d={r['d']} N={r['N']}{' causal' if r['causal'] else ''}"
            ] = r["tflops"] / base[0]["tflops"]
    return rows, summary
