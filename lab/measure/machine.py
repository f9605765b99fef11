"""The machine a run was measured on, and its ceilings: the most matmul FLOP/s and memory bandwidth it reaches.

`describe_machine` names the CPU, cores, threads, BLAS, memory, GPU and versions (it goes into every
recorded run); `measure_ceilings` measures the two roofs of a roofline on this machine, not quoted
from a datasheet (the datasheet figures of the A100 and H100 are in `lab.hardware`).

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re

import numpy as np
import torch

from .timing import time_call


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas() -> dict:
    """torch's BLAS, LAPACK, OpenMP and CPU capability (from `torch.__config__.show()`), threadpoolctl's pools when installed."""
    config = torch.__config__.show()
    info = {
        key.lower(): m.group(1)
        for key in ("BLAS_INFO", "LAPACK_INFO", "USE_OPENMP", "USE_MKLDNN")
        if (m := re.search(key + r"=([^,\s]+)", config))
    }
    if m := re.search(r"CPU capability usage: (\S+)", config):
        info["cpu_capability"] = m.group(1)
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = [
            {k: p.get(k) for k in ("internal_api", "num_threads", "version")}
            for p in threadpool_info()
        ]
    except ImportError:
        pass
    return info


def _memory_total() -> int | None:
    """Total memory in bytes from /proc/meminfo, None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None


def describe_machine() -> dict:
    """The machine a run was measured on: CPU model and cores, threads, BLAS, memory, GPU name and memory, versions.

    `load_average` (1, 5, 15 minutes) says how busy the machine was: on a shared machine, programs that
    launch many small multi-threaded ops slow down far more than one large fused call.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "name": props.name,
            "memory_gb": round(props.total_memory / 1e9, 1),
            "capability": f"{props.major}.{props.minor}",
            "sms": props.multi_processor_count,
            "cuda": torch.version.cuda,
        }
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gb": None if (m := _memory_total()) is None else round(m / 1e9, 1),
        "blas": _blas(),
        "gpu": gpu,
        "os": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "versions": versions,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def fairness(machine: dict) -> list:
    """What makes timings on `machine` (a `describe_machine` dict) unfit to publish, in words: torch's vector
    kernels off (`ATEN_CPU_CAPABILITY=default`: SDPA 3-5× and exp2 10-45× slower) or a 1-minute load
    average above 3/4 of the cores (other programs hold the CPU). Empty when neither."""
    problems = []
    unit = str(machine.get("blas", {}).get("cpu_capability", "")).upper()
    if unit == "DEFAULT":
        problems.append(
            "torch's vector kernels are OFF (ATEN_CPU_CAPABILITY): unset it, restart"
        )
    load, cores = machine.get("load_average"), machine.get("cores") or 1
    if load and load[0] > 0.75 * cores:
        problems.append(
            f"load average {load[0]:.1f} on {cores} cores: other programs hold the CPU"
        )
    return problems


def machine_report(machine: dict) -> str:
    """The lines a notebook prints about `machine`, measured values masked, ending in one masked verdict line:
    "fit to time: ‹yes›", or "‹WARNING: ...›" for each problem `fairness` finds."""
    from ..notebook import measured

    gpu = machine.get("gpu")
    blas = machine.get("blas", {})
    where = (
        f"{gpu['name']}, {gpu['memory_gb']} GB"
        if gpu
        else "none (torch.cuda.is_available() is False)"
    )
    load = (machine.get("load_average") or ["?"])[0]
    problems = fairness(machine)
    verdict = " | ".join(f"WARNING: {p}" for p in problems) or "yes"
    return "\n".join(
        [
            f"CPU: {measured(machine['cpu'], '')}, {measured(machine['cores'], '')} cores, "
            f"load average {measured(load, '')}",
            f"BLAS: {measured(blas.get('blas_info'), '')}, "
            f"vector unit {measured(blas.get('cpu_capability'), '')}",
            f"GPU: {measured(where, '')}",
            "versions: "
            + measured(
                ", ".join(f"{k} {v}" for k, v in machine["versions"].items()), ""
            ),
            f"fit to time: {measured(verdict, '')}",
        ]
    )


_SYS_CACHE = "/sys/devices/system/cpu/cpu0/cache"
_COPY_FALLBACK_MIB = 64  # where no cache size can be read (macOS, Windows)


def _size_bytes(text: str) -> int:
    """A sysfs cache size ("48K", "2048K", "32M") in bytes."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def last_level_cache(cache_dir: str = _SYS_CACHE) -> int | None:
    """The size in bytes of the highest cache level of cpu0 (`index*/level`, `index*/size` in sysfs), None
    where sysfs has no cache (macOS, Windows) or a size cannot be read.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    import glob

    levels = {}
    for index in glob.glob(os.path.join(cache_dir, "index*")):
        try:
            with open(os.path.join(index, "level")) as f:
                level = int(f.read())
            with open(os.path.join(index, "size")) as f:
                size = _size_bytes(f.read())
        except (OSError, ValueError):
            continue
        levels[level] = max(size, levels.get(level, 0))
    return levels[max(levels)] if levels else None


def copy_mib(cache_dir: str = _SYS_CACHE, *, fallback: int = _COPY_FALLBACK_MIB) -> int:
    """MiB of the copy that measures memory bandwidth: 2 × the last-level cache, at least `fallback`
    (also used where no cache size can be read), at most 1/8 of the memory.

    A copy that fits in the cache measures the cache: its "bandwidth" is not memory's.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if int(fallback) != fallback or fallback < 1:
        raise ValueError(f"fallback must be an integer >= 1 (MiB), got {fallback!r}")
    llc = last_level_cache(cache_dir)
    mib = max(int(fallback), -(-2 * llc // 2**20) if llc else 0)
    total = _memory_total()
    if total:  # two buffers of `mib` each: leave the machine most of its memory
        mib = min(mib, max(1, total // 8 // 2**20))
    return mib


def copy_line(ceilings: dict, cache_dir: str = _SYS_CACHE) -> str:
    """ "copy of ‹m› MiB a buffer, ‹r›× the ‹c› MiB last-level cache": the size a `measure_ceilings` bandwidth
    was measured with beside the cache it must exceed, masked (the cache unnamed where none is readable)."""
    from ..notebook import measured

    mib, llc = ceilings["copy_mb"], last_level_cache(cache_dir)
    line = f"copy of {measured(mib, ',d')} MiB a buffer"
    if llc is None:
        return line + ", no cache size readable here"
    ratio, llc_mib = measured(mib * 2**20 / llc, ".1f"), measured(llc / 2**20, ",.0f")
    return line + f", {ratio}× the {llc_mib} MiB last-level cache"


def measure_ceilings(
    device: str = "cpu",
    *,
    n: int | None = None,
    mbytes: int | None = None,
    min_run_time: float = 0.3,
    repeats: int = 3,
) -> dict:
    """Measured matmul FLOP/s ($2n^3$ per n×n product) and memory bandwidth (bytes read + written by a large copy, per second).

    CPU: fp32 n = 1024 and a copy of `copy_mib()` MiB by default (twice the last-level cache, so that it
    measures memory, not the cache); CUDA: fp16 n = 8192 (and fp32) and a 1 GiB copy.
    Each is the fastest of `repeats` medians: a ceiling is the most the machine reaches, and other programs
    on a shared machine can only slow a measurement down, never speed it up. Every repeat's rate is kept too,
    under the key + "_repeats" (their range is the ceiling's own spread).
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False")
    n = n or (8192 if cuda else 1024)
    mbytes = mbytes or (1024 if cuda else copy_mib())
    if n < 1 or mbytes < 1:
        raise ValueError(f"n and mbytes must be >= 1, got n={n}, mbytes={mbytes}")
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")

    def best(fn, key, work):
        """The fastest of `repeats` medians; every repeat's rate is kept under `key + "_repeats"`."""
        times = [
            time_call(fn, device=device, min_run_time=min_run_time)
            for _ in range(int(repeats))
        ]
        out[f"{key}_repeats"] = [work / t for t in times]
        return min(times)

    out = {"device": dev.type, "n": n, "copy_mb": mbytes}  # MiB of each buffer
    dtypes = [("fp32", torch.float32)] + (
        [("fp16", torch.float16), ("bf16", torch.bfloat16)] if cuda else []
    )
    for name, dt in dtypes:
        a = torch.randn(n, n, device=dev).to(dt)
        b = torch.randn(n, n, device=dev).to(dt)
        c = torch.empty(n, n, device=dev, dtype=dt)
        key = f"matmul_{name}_flops"
        t = best(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), key, 2.0 * n**3)
        out[key] = 2.0 * n**3 / t
        del a, b, c
    x = torch.full((mbytes * 2**20 // 4,), 1.0, device=dev)  # touched: no lazy pages
    y = torch.empty_like(x)
    t = best(lambda: y.copy_(x), "bandwidth_bytes_per_s", 2.0 * x.numel() * 4)
    out["bandwidth_bytes_per_s"] = 2.0 * x.numel() * 4 / t
    return out
