"""The sweep: every kernel timed (interleaved) and its peak memory measured at each (N, d, dtype, causal), as rows and a table.

A row's throughput is `attention_flops` (4·B·H·N²·d, halved for causal) per second; `vs_sdpa` divides
SDPA's time by the kernel's at the same setting. `python -m lab.bench` runs a sweep and records it;
notebook 08 runs a small one live.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import numpy as np
import torch

from .flops import attention_flops
from .kernels import KERNELS, kernel_available, make_inputs
from .memory import peak_memory
from .timing import spread, time_rounds

# The kernels too slow for large N on a CPU: above these N they are skipped (and the table says so).
NUMPY_MAX_N = 1024


def run_sweep(
    Ns,
    *,
    d=(64,),
    dtypes=("float32",),
    causal=(False,),
    B: int = 1,
    H: int = 8,
    kernels=None,
    device: str = "cpu",
    rounds: int = 3,
    min_run_time: float = 0.1,
    memory: bool = True,
    max_n: dict | None = None,
    progress: bool = True,
    threads: int | None = None,
) -> list:
    """Time (interleaved per setting) and peak memory of each kernel at each (N, d, dtype, causal); one dict per row.

    Row: kernel, device, dtype, B, H, N, d, causal, ms, tflops ($4BHN^2d$, halved for causal, per
    second, in units of 10¹²), ms_rounds (each round's ms; ms is their median, `rounds` >= 3),
    spread ((max - min) / median of the rounds), peak_mb (above the inputs), vs_sdpa (throughput relative to SDPA's flash
    backend, or the first SDPA backend available). Kernels that cannot run say why in `skipped`.
    `threads` sets torch's CPU threads for the sweep (restored after): on a busy, shared machine each
    multi-threaded op waits for its slowest thread, which punishes kernels made of many small ops.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if threads is None:
        return _run_sweep(
            Ns,
            d,
            dtypes,
            causal,
            B,
            H,
            kernels,
            device,
            rounds,
            min_run_time,
            memory,
            max_n,
            progress,
        )
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        return _run_sweep(
            Ns,
            d,
            dtypes,
            causal,
            B,
            H,
            kernels,
            device,
            rounds,
            min_run_time,
            memory,
            max_n,
            progress,
        )
    finally:
        torch.set_num_threads(before)


def _run_sweep(
    Ns,
    d,
    dtypes,
    causal,
    B,
    H,
    kernels,
    device,
    rounds,
    min_run_time,
    memory,
    max_n,
    progress,
):
    from tqdm.auto import tqdm

    kernels = list(KERNELS) if kernels is None else list(kernels)
    for kname in kernels:
        if kname not in KERNELS:
            raise ValueError(
                f"kernels must be names from lab.KERNELS ({sorted(KERNELS)}), got {kname!r}"
            )
    Ns = [int(n) for n in Ns]
    if not Ns or min(Ns) < 1:
        raise ValueError(f"Ns must be a non-empty list of lengths >= 1, got {Ns}")
    limits = {"numpy reference": NUMPY_MAX_N, "numpy flash": NUMPY_MAX_N}
    if int(rounds) != rounds or rounds < 3:
        raise ValueError(
            f"rounds must be an integer >= 3 (a median of 2 rounds is their mean), got {rounds!r}"
        )
    if torch.device(device).type == "cuda":
        limits.update({"torch naive": 8192, "sdpa math": 8192})
    limits.update(max_n or {})
    settings = [(n, dd, dt, c) for dt in dtypes for dd in d for c in causal for n in Ns]
    rows, skipped = [], {}
    bar = tqdm(
        total=len(settings) * len(kernels),
        desc="bench",
        disable=not progress,
        leave=False,
    )
    for N, dd, dt, c in settings:
        fns = {}
        for kname in kernels:
            ok, why = kernel_available(kname, device, dt)
            if ok and N > limits.get(kname, N):
                ok, why = (
                    False,
                    f"skipped above N = {limits[kname]} (too slow or too large here)",
                )
            if not ok:
                skipped.setdefault(kname, why)
                bar.update(1)
                continue
            fn = KERNELS[kname][0]
            q, k, v = make_inputs(kname, B, H, N, dd, dtype=dt, device=device)
            fns[kname] = lambda fn=fn, q=q, k=k, v=v: fn(q, k, v, c)
        bar.set_postfix_str(f"N={N} d={dd} {dt}{' causal' if c else ''}")
        samples = (
            time_rounds(fns, device=device, rounds=rounds, min_run_time=min_run_time)
            if fns
            else {}
        )
        bar.update(len(fns))
        flops = attention_flops(B, H, N, dd, causal=c)
        for kname, s in samples.items():
            t = float(np.median(s))
            rows.append(
                {
                    "kernel": kname,
                    "device": torch.device(device).type,
                    "dtype": dt,
                    "B": B,
                    "H": H,
                    "N": N,
                    "d": dd,
                    "causal": c,
                    "ms": t * 1e3,
                    "ms_rounds": [float(x) * 1e3 for x in s],
                    "spread": spread(s),
                    "tflops": flops / t / 1e12,
                    "peak_mb": None,
                    "threads": torch.get_num_threads(),
                }
            )
        fns.clear()
    bar.close()
    if memory and rows:
        cases = [
            {k: r[k] for k in ("kernel", "B", "H", "N", "d", "dtype", "causal")}
            for r in rows
        ]
        for r, b in zip(rows, peak_memory(cases, device=device)):
            r["peak_mb"] = None if b is None else b / 2**20
    _add_ratios(rows)
    for r in rows:
        r["skipped"] = None
    for kname, why in skipped.items():
        rows.append(
            {"kernel": kname, "device": torch.device(device).type, "skipped": why}
        )
    return rows


def _add_ratios(rows):
    """vs_sdpa = SDPA's time / this kernel's time at the same setting (throughput ratio)."""
    key = lambda r: (r["dtype"], r["N"], r["d"], r["causal"])  # noqa: E731
    base = {}
    for pref in (
        "sdpa math",
        "sdpa efficient",
        "sdpa cudnn",
        "sdpa flash",
    ):  # the last one present wins
        for r in rows:
            if r["kernel"] == pref:
                base[key(r)] = r["ms"]
    for r in rows:
        r["vs_sdpa"] = base[key(r)] / r["ms"] if key(r) in base else None


def results_table(rows) -> str:
    """The sweep as a fixed-width text table: the dtype of each kernel's arithmetic (the float64 oracle's, not its
    inputs'), ms (median of the rounds), its spread across rounds, TFLOP/s, peak MiB and the throughput ratio to SDPA; skipped kernels listed below.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    head = f"{'kernel':<16} {'dtype':<8} {'N':>6} {'d':>4} {'causal':>6} {'ms':>10} {'spread':>7} {'TFLOP/s':>8} {'peak MiB':>9} {'vs SDPA':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("skipped"):
            continue
        mb = "-" if r.get("peak_mb") is None else f"{r['peak_mb']:.1f}"
        ratio = "-" if r.get("vs_sdpa") is None else f"{r['vs_sdpa']:.2f}x"
        sp = "-" if r.get("spread") is None else f"{100 * r['spread']:.0f}%"
        dtype = _COMPUTES.get(r["kernel"], r["dtype"])
        lines.append(
            f"{r['kernel']:<16} {dtype:<8} {r['N']:>6} {r['d']:>4} {str(r['causal']):>6} "
            f"{r['ms']:>10.2f} {sp:>7} {r['tflops']:>8.4f} {mb:>9} {ratio:>8}"
        )
    for name, dtype in _COMPUTES.items():
        inputs = sorted({r["dtype"] for r in rows if r["kernel"] == name and "ms" in r})
        if inputs:
            lines.append(
                f"  {name}: computes in {dtype} ({', '.join(inputs)} in and out)"
            )
    for r in rows:
        if r.get("skipped"):
            lines.append(f"  {r['kernel']}: {r['skipped']}")
    return "\n".join(lines)


# Kernels whose arithmetic is in another dtype than their inputs: the table prints the arithmetic's
_COMPUTES = {"numpy reference": "float64"}  # attention_reference: S, P and O in float64
