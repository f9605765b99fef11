"""Honest measurement: time, peak memory, the machine, and its ceilings, on a CPU or an NVIDIA GPU.

- Time: `torch.utils.benchmark` on the CPU (it handles warm-up, threads and repeats);
  `triton.testing.do_bench` on a GPU (CUDA events and an L2 flush), CUDA events where Triton is
  missing. `time_interleaved` alternates the candidates round by round, so a noisy, shared machine
  slows them all alike and their ratios stay fair.
- Peak memory: CUDA's `max_memory_allocated`; on the CPU `tracemalloc` does not see torch's buffers,
  so each case runs in a fresh child process and we read its peak resident size (`VmHWM`, reset
  through `/proc/self/clear_refs`, minus the resident size just before the call). The child runs with
  a fixed malloc mmap threshold, so every large buffer is its own mapping and returns to the system
  when freed: the peak is the call's own.
- The machine: CPU model and cores, BLAS, GPU name and memory, versions.
- Ceilings for a roofline: matmul FLOP/s and memory bandwidth, measured, not quoted.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
from importlib import resources

import numpy as np
import platformdirs
import torch

__all__ = [
    "KERNELS",
    "attention_flops",
    "make_inputs",
    "kernel_available",
    "time_call",
    "time_interleaved",
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


def attention_flops(B: int, H: int, N: int, d: int, *, M=None, causal: bool = False) -> float:
    """Matmul FLOPs of an attention forward: $4 \\cdot B \\cdot H \\cdot N \\cdot M \\cdot d$, halved for causal (FlashAttention-2 §4.1).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    M = N if M is None else M
    for name, x in (("B", B), ("H", H), ("N", N), ("M", M), ("d", d)):
        if int(x) != x or x < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {x!r}")
    flops = 4.0 * B * H * N * M * d
    return flops / 2 if causal else flops


def _sdpa(backend_name):
    def run(q, k, v, causal):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def _numpy_reference(q, k, v, causal):
    from .attention import attention_reference
    return attention_reference(q, k, v, causal=causal)[0]


def _numpy_flash(q, k, v, causal):
    from .attention import flash_attention_numpy
    return flash_attention_numpy(q, k, v, causal=causal, block_q=128, block_k=128)[0]


def _torch_naive(q, k, v, causal):
    from .torch_kernels import attention_torch_naive
    return attention_torch_naive(q, k, v, causal=causal)


def _torch_flash(q, k, v, causal):
    from .torch_kernels import flash_attention_torch_forward
    return flash_attention_torch_forward(q, k, v, causal=causal)[0]


def _triton(q, k, v, causal):
    from .triton_kernels import flash_attention_triton
    # fixed, hand-picked launch settings (no autotuning): 128×64 tiles, more warps for d = 128
    return flash_attention_triton(q, k, v, causal=causal, block_q=128, block_k=64,
                                  num_warps=4 if q.shape[-1] <= 64 else 8, num_stages=3)


# name -> (callable(q, k, v, causal), input kind: "numpy" or "torch")
KERNELS = {
    "numpy reference": (_numpy_reference, "numpy"),
    "numpy flash": (_numpy_flash, "numpy"),
    "torch naive": (_torch_naive, "torch"),
    "lab torch flash": (_torch_flash, "torch"),
    "sdpa math": (_sdpa("MATH"), "torch"),
    "sdpa flash": (_sdpa("FLASH_ATTENTION"), "torch"),
    "sdpa efficient": (_sdpa("EFFICIENT_ATTENTION"), "torch"),
    "sdpa cudnn": (_sdpa("CUDNN_ATTENTION"), "torch"),
    "triton": (_triton, "torch"),
}

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def make_inputs(kernel: str, B: int, H: int, N: int, d: int, *, dtype: str = "float32", device: str = "cpu", seed: int = 0):
    """Seeded standard-normal q, k, v of shape (B, H, N, d) for `kernel` (numpy arrays or torch tensors on `device`).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    g = torch.Generator().manual_seed(seed)
    qkv = [torch.randn((B, H, N, d), generator=g).to(_DTYPES[dtype]) for _ in range(3)]   # (B, H, N, d) each
    if KERNELS[kernel][1] == "numpy":
        if dtype in ("float16", "bfloat16"):
            qkv = [t.float() for t in qkv]   # numpy has no bfloat16 matmul; the numpy kernels accumulate in fp32 anyway
        return tuple(t.numpy() for t in qkv)
    return tuple(t.to(device) for t in qkv)


def kernel_available(kernel: str, device: str = "cpu", dtype: str = "float32") -> tuple[bool, str]:
    """(True, "") when `kernel` can run on `device` in `dtype` here, else (False, the reason in a sentence).

    Probes each SDPA backend once on a tiny input; the Triton kernel counts only compiled on a GPU
    (the interpreter is not a timing). Taught in: notebooks/08_hardware_runs.ipynb
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return False, "no CUDA device here (torch.cuda.is_available() is False)"
    kind = KERNELS[kernel][1]
    if kind == "numpy" and dev.type != "cpu":
        return False, "the numpy kernels run on the CPU only"
    if kernel == "triton":
        if dev.type != "cuda":
            return False, "Triton on a CPU tensor runs in its interpreter, which is for stepping through, not a timing"
        from .triton_kernels import triton_status
        ok, why = triton_status()
        if not ok:
            return False, why
        if dtype == "float64":
            return False, "the Triton kernel takes float16, bfloat16 or float32"
    if kernel.startswith("sdpa"):
        try:
            q = torch.zeros((1, 1, 8, 16), dtype=_DTYPES[dtype], device=dev)
            KERNELS[kernel][0](q, q, q, False)
        except RuntimeError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0].rstrip(".")
            return False, f"torch {torch.__version__} has no {kernel} backend for {dtype} on {dev.type} here ({first})"
    return True, ""


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_call(fn, *, device: str = "cpu", min_run_time: float = 0.2, warmup: bool = True) -> float:
    """Median seconds of one `fn()`: `torch.utils.benchmark` on the CPU, `triton.testing.do_bench` (or CUDA events) on a GPU.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if torch.device(device).type == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            return _cuda_events(fn, min_run_time)
        return do_bench(fn, warmup=25, rep=max(1, int(min_run_time * 1000)), return_mode="median") / 1e3
    from torch.utils import benchmark

    if warmup:
        fn()                                               # warm-up: first-call allocations, lazy inits
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def _cuda_events(fn, min_run_time):
    fn()
    torch.cuda.synchronize()
    times = []
    budget = 0.0
    while budget < min_run_time or len(times) < 5:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        budget += times[-1]
    return float(np.median(times))


def time_interleaved(fns: dict, *, device: str = "cpu", rounds: int = 5, min_run_time: float = 0.1) -> dict:
    """Median seconds per call of each `fns[name]()`, measured in alternating rounds so that noise hits them all alike.

    Each round times every candidate once (`time_call` with `min_run_time`); the result per name is
    the median over the rounds. Taught in: notebooks/08_hardware_runs.ipynb
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()                                               # warm every candidate once, outside the rounds
    _sync(device)
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(time_call(fn, device=device, min_run_time=min_run_time, warmup=False))
    return {name: float(np.median(s)) for name, s in samples.items()}


_CHILD = r"""
import json, sys, time
cases = json.loads(sys.argv[1])
import torch
torch.set_num_threads(int(sys.argv[2]))
from lab.measure import KERNELS, make_inputs

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None

def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False

x = torch.randn(64, 64)
(torch.softmax(x @ x, -1) @ x).sum()          # warm the thread pool and BLAS before any baseline
out = []
for case in cases:
    fn, _ = KERNELS[case["kernel"]]
    q, k, v = make_inputs(case["kernel"], case["B"], case["H"], case["N"], case["d"], dtype=case["dtype"])
    fn(q, k, v, case["causal"])                   # warm-up call: one-time buffers of the BLAS are not the kernel's
    fresh = reset_peak()
    base = status("VmRSS")
    o = fn(q, k, v, case["causal"])
    peak = status("VmHWM") if fresh else None
    del o
    out.append(None if peak is None or base is None else max(0, peak - base))
print(json.dumps(out))
"""


def peak_memory(cases, *, device: str = "cpu") -> list:
    """Peak bytes above the inputs of each case {kernel, B, H, N, d, dtype, causal}: output and every temporary.

    CUDA: `torch.cuda.max_memory_allocated` above the allocation before the call. CPU: all cases in
    one fresh child process, each called once to warm up (one-time BLAS buffers), then read as the
    peak resident size during a second call minus the resident size just before it (VmHWM reset with
    /proc/self/clear_refs; None where Linux's /proc is missing). Taught in: notebooks/08_hardware_runs.ipynb
    """
    cases = [dict(c) for c in cases]
    for c in cases:
        c.setdefault("dtype", "float32")
        c.setdefault("causal", False)
        if c.get("kernel") not in KERNELS:
            raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {c.get('kernel')!r}")
    if not cases:
        return []
    if torch.device(device).type == "cuda":
        out = []
        for c in cases:
            fn, _ = KERNELS[c["kernel"]]
            q, k, v = make_inputs(c["kernel"], c["B"], c["H"], c["N"], c["d"], dtype=c["dtype"], device=device)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            o = fn(q, k, v, c["causal"])
            torch.cuda.synchronize()
            out.append(int(torch.cuda.max_memory_allocated() - base))
            del o, q, k, v
        return out
    if not os.path.exists("/proc/self/status"):
        return [None] * len(cases)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases), str(torch.get_num_threads())],
                         capture_output=True, text=True, env=env, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(f"the memory child process failed: {run.stderr[-1500:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas() -> dict:
    config = torch.__config__.show()
    info = {key.lower(): m.group(1) for key in ("BLAS_INFO", "LAPACK_INFO", "USE_OPENMP", "USE_MKLDNN")
            if (m := re.search(key + r"=([^,\s]+)", config))}
    if (m := re.search(r"CPU capability usage: (\S+)", config)):
        info["cpu_capability"] = m.group(1)
    try:
        from threadpoolctl import threadpool_info
        info["threadpools"] = [{k: p.get(k) for k in ("internal_api", "num_threads", "version")} for p in threadpool_info()]
    except ImportError:
        pass
    return info


def _memory_total() -> int | None:
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
    versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    try:
        import triton
        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "memory_gb": round(props.total_memory / 1e9, 1),
               "capability": f"{props.major}.{props.minor}", "sms": props.multi_processor_count,
               "cuda": torch.version.cuda}
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gb": None if (m := _memory_total()) is None else round(m / 1e9, 1),
        "blas": _blas(),
        "gpu": gpu,
        "os": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "versions": versions,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def measure_ceilings(device: str = "cpu", *, n: int | None = None, mbytes: int | None = None, min_run_time: float = 0.3,
                     repeats: int = 3) -> dict:
    """Measured matmul FLOP/s ($2n^3$ per n×n product) and memory bandwidth (bytes read + written by a large copy, per second).

    CPU: fp32 n = 1024 and a 64 MB copy by default; CUDA: fp16 n = 8192 (and fp32) and a 1 GB copy.
    Each is the fastest of `repeats` medians: a ceiling is the most the machine reaches, and other programs
    on a shared machine can only slow a measurement down, never speed it up.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False")
    n = n or (8192 if cuda else 1024)
    mbytes = mbytes or (1024 if cuda else 64)
    if n < 1 or mbytes < 1:
        raise ValueError(f"n and mbytes must be >= 1, got n={n}, mbytes={mbytes}")
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    best = lambda fn: min(time_call(fn, device=device, min_run_time=min_run_time) for _ in range(int(repeats)))
    out = {"device": dev.type, "n": n, "copy_mb": mbytes}
    dtypes = [("fp32", torch.float32)] + ([("fp16", torch.float16), ("bf16", torch.bfloat16)] if cuda else [])
    for name, dt in dtypes:
        a = torch.randn(n, n, device=dev).to(dt)
        b = torch.randn(n, n, device=dev).to(dt)
        c = torch.empty(n, n, device=dev, dtype=dt)
        t = best(lambda: torch.mm(a, b, out=c))
        out[f"matmul_{name}_flops"] = 2.0 * n**3 / t
        del a, b, c
    x = torch.empty(mbytes * 2**20 // 4, device=dev).normal_()
    y = torch.empty_like(x)
    t = best(lambda: y.copy_(x))
    out["bandwidth_bytes_per_s"] = 2.0 * x.numel() * 4 / t
    return out


# ---------------------------------------------------------------------------------------------
# Sweeps, records and the accuracy check behind `python -m lab.bench`.

# The committed runs ship inside the package (lab/data/runs, read through importlib.resources), so an
# installed course has them too. A learner's own runs go to a per-user folder, never into the package
# or the repository: `python -m lab.bench` writes there unless told `--record-dir`.
RUNS_DIR = str(resources.files("lab") / "data" / "runs")


def user_runs_dir() -> str:
    """Where this machine's own runs are recorded: $FLASH_COURSE_RUNS, else the per-user data folder.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    return os.environ.get("FLASH_COURSE_RUNS") or os.path.join(
        platformdirs.user_data_dir("flash-attention-course", appauthor=False), "runs")

# The kernels too slow for large N on a CPU: above these N they are skipped (and the table says so).
NUMPY_MAX_N = 1024


def run_sweep(Ns, *, d=(64,), dtypes=("float32",), causal=(False,), B: int = 1, H: int = 8, kernels=None,
              device: str = "cpu", rounds: int = 3, min_run_time: float = 0.1, memory: bool = True,
              max_n: dict | None = None, progress: bool = True, threads: int | None = None) -> list:
    """Time (interleaved per setting) and peak memory of each kernel at each (N, d, dtype, causal); one dict per row.

    Row: kernel, device, dtype, B, H, N, d, causal, ms, tflops ($4BHN^2d$, halved for causal, per
    second, in units of 10¹²), peak_mb (above the inputs), vs_sdpa (throughput relative to SDPA's flash
    backend, or the first SDPA backend available). Kernels that cannot run say why in `skipped`.
    `threads` sets torch's CPU threads for the sweep (restored after): on a busy, shared machine each
    multi-threaded op waits for its slowest thread, which punishes kernels made of many small ops.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if threads is None:
        return _run_sweep(Ns, d, dtypes, causal, B, H, kernels, device, rounds, min_run_time, memory, max_n, progress)
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        return _run_sweep(Ns, d, dtypes, causal, B, H, kernels, device, rounds, min_run_time, memory, max_n, progress)
    finally:
        torch.set_num_threads(before)


def _run_sweep(Ns, d, dtypes, causal, B, H, kernels, device, rounds, min_run_time, memory, max_n, progress):
    from tqdm.auto import tqdm

    kernels = list(KERNELS) if kernels is None else list(kernels)
    for kname in kernels:
        if kname not in KERNELS:
            raise ValueError(f"kernels must be names from lab.KERNELS ({sorted(KERNELS)}), got {kname!r}")
    Ns = [int(n) for n in Ns]
    if not Ns or min(Ns) < 1:
        raise ValueError(f"Ns must be a non-empty list of lengths >= 1, got {Ns}")
    limits = {"numpy reference": NUMPY_MAX_N, "numpy flash": NUMPY_MAX_N}
    if torch.device(device).type == "cuda":
        limits.update({"torch naive": 8192, "sdpa math": 8192})
    limits.update(max_n or {})
    settings = [(n, dd, dt, c) for dt in dtypes for dd in d for c in causal for n in Ns]
    rows, skipped = [], {}
    bar = tqdm(total=len(settings) * len(kernels), desc="bench", disable=not progress, leave=False)
    for N, dd, dt, c in settings:
        fns = {}
        for kname in kernels:
            ok, why = kernel_available(kname, device, dt)
            if ok and N > limits.get(kname, N):
                ok, why = False, f"skipped above N = {limits[kname]} (too slow or too large here)"
            if not ok:
                skipped.setdefault(kname, why)
                bar.update(1)
                continue
            fn = KERNELS[kname][0]
            q, k, v = make_inputs(kname, B, H, N, dd, dtype=dt, device=device)
            fns[kname] = (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v, c))
        bar.set_postfix_str(f"N={N} d={dd} {dt}{' causal' if c else ''}")
        times = time_interleaved(fns, device=device, rounds=rounds, min_run_time=min_run_time) if fns else {}
        bar.update(len(fns))
        flops = attention_flops(B, H, N, dd, causal=c)
        for kname, t in times.items():
            rows.append({"kernel": kname, "device": torch.device(device).type, "dtype": dt, "B": B, "H": H,
                         "N": N, "d": dd, "causal": c, "ms": t * 1e3, "tflops": flops / t / 1e12, "peak_mb": None,
                         "threads": torch.get_num_threads()})
        fns.clear()
    bar.close()
    if memory and rows:
        cases = [{k: r[k] for k in ("kernel", "B", "H", "N", "d", "dtype", "causal")} for r in rows]
        for r, b in zip(rows, peak_memory(cases, device=device)):
            r["peak_mb"] = None if b is None else b / 2**20
    _add_ratios(rows)
    for r in rows:
        r["skipped"] = None
    for kname, why in skipped.items():
        rows.append({"kernel": kname, "device": torch.device(device).type, "skipped": why})
    return rows


def _add_ratios(rows):
    """vs_sdpa = SDPA's time / this kernel's time at the same setting (throughput ratio)."""
    key = lambda r: (r["dtype"], r["N"], r["d"], r["causal"])  # noqa: E731
    base = {}
    for pref in ("sdpa math", "sdpa efficient", "sdpa cudnn", "sdpa flash"):   # the last one present wins
        for r in rows:
            if r["kernel"] == pref:
                base[key(r)] = r["ms"]
    for r in rows:
        r["vs_sdpa"] = base[key(r)] / r["ms"] if key(r) in base else None


def results_table(rows) -> str:
    """The sweep as a fixed-width text table: ms, TFLOP/s, peak MB and the throughput ratio to SDPA; skipped kernels listed below.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    head = f"{'kernel':<16} {'dtype':<8} {'N':>6} {'d':>4} {'causal':>6} {'ms':>10} {'TFLOP/s':>8} {'peak MB':>9} {'vs SDPA':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("skipped"):
            continue
        mb = "-" if r.get("peak_mb") is None else f"{r['peak_mb']:.1f}"
        ratio = "-" if r.get("vs_sdpa") is None else f"{r['vs_sdpa']:.2f}x"
        lines.append(f"{r['kernel']:<16} {r['dtype']:<8} {r['N']:>6} {r['d']:>4} {str(r['causal']):>6} "
                     f"{r['ms']:>10.2f} {r['tflops']:>8.4f} {mb:>9} {ratio:>8}")
    for r in rows:
        if r.get("skipped"):
            lines.append(f"  {r['kernel']}: {r['skipped']}")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def record_run(rows, *, settings: dict, machine: dict | None = None, ceilings: dict | None = None,
               label: str | None = None, path: str | None = None, extra: dict | None = None,
               runs_dir: str | None = None) -> str:
    """Write one run as JSON (schema in lab/data/README.md) to `path` or <runs_dir>/<date>_<device>_<machine>.json.

    `runs_dir` defaults to `user_runs_dir()`, outside the repository; returns the path written.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    machine = describe_machine() if machine is None else machine
    gpu = (machine.get("gpu") or {}).get("name")
    label = label or (f"{gpu} (GPU)" if gpu else
                      f"{machine.get('cpu')} ({machine.get('cores')} CPU cores, {machine.get('torch_threads')} torch "
                      f"thread{'' if machine.get('torch_threads') == 1 else 's'})")
    record = {"schema": 1, "kind": "measured", "label": label, "date": machine.get("date"), "machine": machine,
              "settings": settings, "ceilings": ceilings, "results": list(rows)}
    record.update(extra or {})
    if path is None:
        runs_dir = user_runs_dir() if runs_dir is None else runs_dir
        os.makedirs(runs_dir, exist_ok=True)
        stamp = (machine.get("date") or "undated").replace(":", "").replace("-", "")[:13]
        mode = settings.get("mode", "sweep")
        suffix = "" if mode == "sweep" else f"_{_slug(mode)}"
        path = os.path.join(runs_dir, f"{stamp}_{'gpu' if gpu else 'cpu'}_{_slug(gpu or machine.get('cpu') or 'machine')}{suffix}.json")
    with open(path, "w") as f:
        json.dump(record, f, indent=1, default=float)
        f.write("\n")
    return path


def load_runs(runs_dir: str | None = None) -> list:
    """Every recorded run in `runs_dir` (default: the committed runs shipped with `lab`), oldest first.

    Each record gets its file name under "file". `load_runs(lab.user_runs_dir())` reads your own runs.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    runs_dir = RUNS_DIR if runs_dir is None else runs_dir
    out = []
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        if name.endswith(".json"):
            with open(os.path.join(runs_dir, name)) as f:
                rec = json.load(f)
            rec["file"] = name
            out.append(rec)
    return sorted(out, key=lambda r: (r.get("date") or "", r["file"]))


# A reported run's accuracy table (Ascend 910B3, CANN 8.0.1, fp32), as reported: max |flash - standard|.
REPORTED_910B3_ACCURACY = {(1, 256, 64): 1.19e-7, (1, 512, 64): 1.34e-7, (1, 1024, 64): 1.79e-7, (4, 512, 64): 2.09e-7}


def verify_accuracy(device: str = "cpu", dtypes=("float32", "float16", "bfloat16"), shapes=None,
                    interpreter: bool = True, progress: bool = True) -> list:
    """max |flash − standard| at the reported run's (B, N, d) shapes, each kernel and dtype available here, beside its figure.

    "standard" is softmax(QKᵀ)V in the same dtype on the same device (`attention_torch_naive`), as the
    write-up compared; `vs_fp64` is the error against the float64 oracle. H = 1. Triton runs compiled
    on a GPU, or through its interpreter on the CPU when `interpreter` (float32/float16 there: slow, not
    a timing). Taught in: notebooks/08_hardware_runs.ipynb
    """
    from tqdm.auto import tqdm

    from .attention import attention_reference, flash_attention_numpy
    from .torch_kernels import attention_torch_naive, flash_attention_torch_forward

    shapes = list(REPORTED_910B3_ACCURACY) if shapes is None else list(shapes)
    kernels = [("numpy flash", "float32"), ("numpy flash", "float64")]
    kernels += [("lab torch flash", dt) for dt in dtypes]
    tri_ok = False
    try:
        from .triton_kernels import flash_attention_triton, triton_status
        tri_ok = triton_status()[0] and (torch.device(device).type == "cuda" or interpreter)
    except ImportError:
        pass
    if tri_ok:
        kernels += [("triton", dt) for dt in dtypes if torch.device(device).type == "cuda" or dt != "bfloat16"]
    rows = []
    for kname, dt in tqdm(kernels, desc="verify", disable=not progress, leave=False):
        for B, N, d in shapes:
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn((B, 1, N, d), generator=g).to(_DTYPES[dt]) for _ in range(3))  # (B, 1, N, d)
            ref = attention_reference(*(t.double().numpy() for t in (q, k, v)))[0]
            if kname == "numpy flash":
                o = torch.from_numpy(flash_attention_numpy(*(t.numpy() for t in (q, k, v)))[0])
                std = torch.from_numpy(np.asarray(_numpy_standard(*(t.numpy() for t in (q, k, v)))))
            else:
                qd, kd, vd = (t.to(device) for t in (q, k, v))
                if kname == "triton":
                    o = flash_attention_triton(qd, kd, vd)
                else:
                    o = flash_attention_torch_forward(qd, kd, vd)[0]
                std = attention_torch_naive(qd, kd, vd)
            o, std = o.double().cpu(), std.double().cpu()
            rows.append({"kernel": kname + (" (interpreter)" if kname == "triton" and torch.device(device).type == "cpu" else ""),
                         "dtype": dt, "B": B, "N": N, "d": d,
                         "vs_standard": float((o - std).abs().max()), "vs_fp64": float((o - torch.from_numpy(ref)).abs().max()),
                         "reported_910b3": REPORTED_910B3_ACCURACY.get((B, N, d)) if dt == "float32" else None})
    return rows


def _numpy_standard(q, k, v):
    from .attention import attention_naive
    return attention_naive(q, k, v)


def accuracy_table(rows) -> str:
    """The `verify_accuracy` rows as a fixed-width table.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    head = f"{'kernel':<26} {'dtype':<9} {'(B, N, d)':<15} {'vs standard':>12} {'vs fp64':>9} {'910B3 (rep.)':>13}"
    lines = [head, "-" * len(head)]
    for r in rows:
        seed = "-" if r["reported_910b3"] is None else f"{r['reported_910b3']:.2e}"
        shape = f"({r['B']}, {r['N']}, {r['d']})"
        lines.append(f"{r['kernel']:<26} {r['dtype']:<9} {shape:<15} {r['vs_standard']:>12.2e} {r['vs_fp64']:>9.2e} {seed:>13}")
    return "\n".join(lines)
