"""What standard attention costs in memory traffic (the roofline) and in memory held (bytes of S and P, measured).

Traffic first, because it sets the time. A GPU keeps Q, K, V, S, P and O in its main memory (HBM) and
computes on chip, in SRAM (registers and shared memory) that is an order of magnitude faster and far
smaller (FlashAttention, Dao et al. 2022, arXiv 2205.14135, §1 and §2.1). A kernel that performs F matmul
FLOPs and moves `bytes` through HBM takes at least max(t_compute, bytes / bandwidth): its *arithmetic
intensity* I = F / bytes decides which wins, and the roofline $\\min(\\text{peak}, I \\cdot \\text{bandwidth})$
is the rate it can attain at best. F counts the two matmuls only (4·N·M·d for a forward with d_v = d, as
`lab.attention_flops` and notebook 08 count it); the softmax's operations are non-matmul operations,
priced at their own units' rates in t_compute and left out of F: the exponentials at `lab.exp_rate`, every other
operation at `lab.fp32_op_rate` (one result a lane a clock, half the datasheet's FP32 FLOP/s, which counts a
fused multiply-add as two FLOPs).
  1. `attainable_flops`      : the roofline at intensity I.
  2. `attention_traffic`     : F, the other operations, HBM bytes, intensity and roofline time of each piece of
                               standard attention (S = scale·QKᵀ, P = softmax(S), O = PV, each a kernel that
                               reads its inputs from HBM and writes its output back, FlashAttention's
                               Algorithm 0) and of a fused kernel that reads Q, K, V and writes O only.
Then capacity: `attention_bytes` ($2 \\cdot N \\cdot M \\cdot$ itemsize per head) and `peak_bytes`, which measures it
with `tracemalloc` (numpy's array allocations); `line_peaks` measures it line by line of a function.

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/05_tiling_traffic.ipynb
"""

from __future__ import annotations

import inspect
import sys
import tracemalloc

import numpy as np

from .hardware import chip
from .validate import check_positive

__all__ = [
    "peak_bytes",
    "line_peaks",
    "attention_bytes",
    "measure_peak_memory",
    "SOFTMAX_OPS_PER_ELEMENT",
    "SOFTMAX_EXPS_PER_ELEMENT",
    "FUSED_SOFTMAX_OPS_PER_ELEMENT",
    "FUSED_SOFTMAX_EXPS_PER_ELEMENT",
    "attainable_flops",
    "softmax_peak",
    "attention_traffic",
    "IDEAL_FUSED",
    "chip_rows",
    "traffic_rows",
    "bound_rows",
]

# How notebook 00 shows the `fused: Q, K, V in, O out` row: a lower bound, every input read once. FlashAttention
# itself reads K and V again for every block of queries (notebook 05).
IDEAL_FUSED = "ideal fused: Q, K, V in, O out"

# Operations per element of the safe softmax written as three passes over a row, the exponential counted as one:
# the max (1 compare), l = Σ e^(x - m) (subtract, exp, add) and y = e^(x - m) · (1/l) (subtract, exp, multiply: the
# reciprocal 1/l is computed once per row, so a score pays one multiply, not a division).
SOFTMAX_OPS_PER_ELEMENT = 7
# Of those, the exponentials: they run on the special-function units, at `lab.exp_rate`; the rest at
# `lab.fp32_op_rate`.
SOFTMAX_EXPS_PER_ELEMENT = 2
# A fused kernel keeps each e^(x - m) on chip once computed: max, subtract, exp, add, multiply; one exponential.
FUSED_SOFTMAX_OPS_PER_ELEMENT = 5
FUSED_SOFTMAX_EXPS_PER_ELEMENT = 1


def attainable_flops(intensity, peak: float, bandwidth: float):
    """The roofline: $\\min(\\text{peak}, I \\cdot \\text{bandwidth})$ FLOP/s at arithmetic intensity $I$ (FLOP per byte).

    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    if peak <= 0 or bandwidth <= 0:
        raise ValueError(
            f"peak and bandwidth must be > 0, got peak={peak}, bandwidth={bandwidth}"
        )
    return np.minimum(peak, np.asarray(intensity, dtype=np.float64) * bandwidth)


def softmax_peak(chip_name: str = "A100") -> float:
    """The softmax's compute roof in operations per second: its `SOFTMAX_OPS_PER_ELEMENT` operations per
    element over their time, the exponentials at the chip's exponential rate, the rest at its lone-operation FP32
    rate (`lab.fp32_op_rate`, half the FP32 FLOP/s: an FMA counts as two FLOPs, a lone add as one operation).

    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    c = chip(chip_name)
    exps, rest = (
        SOFTMAX_EXPS_PER_ELEMENT,
        SOFTMAX_OPS_PER_ELEMENT - SOFTMAX_EXPS_PER_ELEMENT,
    )
    return SOFTMAX_OPS_PER_ELEMENT / (
        rest / c["fp32_ops_per_s"] + exps / c["exp_per_s"]
    )


def attention_traffic(
    N: int,
    M: int | None = None,
    d: int = 64,
    dv: int | None = None,
    itemsize: int = 2,
    chip_name: str = "A100",
    softmax_accesses: int = 2,
) -> list[dict]:
    """Per piece of standard attention for one head: $F$, the other operations, HBM bytes, intensity and time.

    $F$ (`flops`) counts the matmuls' FLOPs only, as notebook 08 and FlashAttention-2 §4.1 do: $2NMd$ for
    `S = scale·QKᵀ` (reads Q, K, writes S), $2NMd_v$ for `O = PV` (reads P, V, writes O), none for
    `P = softmax(S)`. The softmax's work is `ops`, non-matmul operations (`SOFTMAX_OPS_PER_ELEMENT`·NM, of
    them `exps` exponentials), priced at the chip's exponential rate and its lone-operation FP32 rate
    (`lab.fp32_op_rate`); `softmax_accesses`
    loads and stores of each of its N·M elements (2: read S once, write P; 4: notebook 01's three passes
    when a row does not stay on chip). Then `standard, total` and `fused: Q, K, V in, O out` (the same
    matmuls, HBM traffic of the inputs and output only, a softmax of `FUSED_SOFTMAX_OPS_PER_ELEMENT`·NM
    operations, each exponential computed once and kept on chip).

    $t_\\text{compute} = F / \\text{peak}_\\text{matmul} + \\sum \\text{ops}_\\text{unit} / \\text{rate}_\\text{unit}$
    (the units not overlapped, a simplification), $t_\\text{memory}$ = bytes / HBM bandwidth; a kernel's `time` is
    the larger and `bound` names it; the standard total adds its kernels' times, and its `bound` is theirs
    when they agree, `"mixed"` when they do not. `intensity` is $F$ / bytes,
    `op_intensity` the other operations per byte. Figures from `lab.hardware`; each row has `piece`, `kind`,
    `flops`, `ops`, `exps`, `bytes`, `intensity`, `op_intensity`, `t_compute`, `t_memory`, `time` (seconds)
    and `bound`. Taught in: notebooks/00_the_memory_wall.ipynb
    """
    M = N if M is None else M
    dv = d if dv is None else dv
    for name, x in (
        ("N", N),
        ("M", M),
        ("d", d),
        ("dv", dv),
        ("itemsize", itemsize),
        ("softmax_accesses", softmax_accesses),
    ):
        check_positive(x, name)
    c = chip(chip_name)
    nm = N * M
    soft = (SOFTMAX_OPS_PER_ELEMENT * nm, SOFTMAX_EXPS_PER_ELEMENT * nm)
    fused_soft = (
        FUSED_SOFTMAX_OPS_PER_ELEMENT * nm,
        FUSED_SOFTMAX_EXPS_PER_ELEMENT * nm,
    )
    qk, pv = 2 * nm * d, 2 * nm * dv  # F of each matmul
    # (piece, kind, F, (non-matmul operations, of them exponentials), HBM bytes)
    kernels = [
        ("S = scale·QKᵀ", "matmul", qk, (0, 0), (N * d + M * d + nm) * itemsize),
        ("P = softmax(S)", "non-matmul", 0, soft, softmax_accesses * nm * itemsize),
        ("O = PV", "matmul", pv, (0, 0), (nm + M * dv + N * dv) * itemsize),
    ]
    fused_bytes = (N * d + M * d + M * dv + N * dv) * itemsize
    rows = [_priced(*k, c) for k in kernels]
    total = _priced(
        "standard, total", "mixed", qk + pv, soft, sum(k[4] for k in kernels), c
    )
    for key in ("t_compute", "t_memory", "time"):  # three kernels in turn: times add
        total[key] = sum(r[key] for r in rows)
    bounds = {r["bound"] for r in rows}  # one word only when every piece agrees
    total["bound"] = bounds.pop() if len(bounds) == 1 else "mixed"
    fused = _priced(
        "fused: Q, K, V in, O out", "mixed", qk + pv, fused_soft, fused_bytes, c
    )
    return rows + [total, fused]


def _priced(piece, kind, flops, ops, nbytes, c) -> dict:
    """One row of `attention_traffic`: F at the matmul peak, the other operations at the lone-operation FP32
    rate and the exponentials at the exponential rate, the bytes at the HBM bandwidth."""
    other, exps = ops
    t_compute = flops / c["matmul_flops"]
    t_compute += (other - exps) / c["fp32_ops_per_s"] + exps / c["exp_per_s"]
    t_memory = nbytes / c["hbm_bytes_per_s"]
    return {
        "piece": piece,
        "kind": kind,
        "flops": int(flops),
        "ops": int(other),
        "exps": int(exps),
        "bytes": int(nbytes),
        "intensity": flops / nbytes,
        "op_intensity": other / nbytes,
        "t_compute": t_compute,
        "t_memory": t_memory,
        "time": max(t_compute, t_memory),
        "bound": "memory" if t_memory > t_compute else "compute",
    }


def chip_rows(names=("A100", "H100")) -> list[dict]:
    """One row per chip for `lab.format_table`: HBM and on-chip bandwidth (TB/s), matmul and FP32 peaks
    (TFLOP/s), lone FP32 operations (T/s, `lab.fp32_op_rate`), exponentials (T/s) and the ridge peak / HBM
    bandwidth (FLOP/B).
    Taught in: notebooks/00_the_memory_wall.ipynb"""
    rows = []
    for name in names:
        c = chip(name)
        sram = c["sram_bytes_per_s"]
        rows.append(
            {
                "chip": name,
                "HBM TB/s": f"{c['hbm_bytes_per_s'] / 1e12:g}",
                "SRAM TB/s": "not published" if sram is None else f"~{sram / 1e12:g}",
                "matmul TFLOP/s": f"{c['matmul_flops'] / 1e12:g}",
                "FP32 TFLOP/s": f"{c['nonmatmul_flops'] / 1e12:g}",
                "FP32 T ops/s": f"{c['fp32_ops_per_s'] / 1e12:.2f}",
                "exp T/s": f"{c['exp_per_s'] / 1e12:.2f}",
                "ridge FLOP/B": f"{c['matmul_flops'] / c['hbm_bytes_per_s']:.0f}",
            }
        )
    return rows


def traffic_rows(
    N: int, d: int = 64, itemsize: int = 2, chip_name: str = "A100"
) -> list[dict]:
    """`attention_traffic`'s rows for `lab.format_table`: F in GFLOP, the softmax's other operations in G,
    MiB moved, t_memory and t_compute in µs, the bound and the time in µs; the fused row labelled
    `IDEAL_FUSED`. Taught in: notebooks/00_the_memory_wall.ipynb"""
    return [
        {
            "piece": IDEAL_FUSED if r["piece"].startswith("fused") else r["piece"],
            "F GFLOP": r["flops"] / 1e9,
            "other G ops": r["ops"] / 1e9,
            "MiB moved": r["bytes"] / 2**20,
            "t_mem µs": r["t_memory"] * 1e6,
            "t_comp µs": r["t_compute"] * 1e6,
            "bound": r["bound"],
            "µs": r["time"] * 1e6,
        }
        for r in attention_traffic(N, d=d, itemsize=itemsize, chip_name=chip_name)
    ]


def bound_rows(
    N: int = 4096, chips=("A100", "H100"), ds=(64, 128), itemsize: int = 2
) -> list[dict]:
    """Per chip and head width: the QKᵀ kernel's intensity and bound, the softmax's memory time over its compute
    time, the share of standard attention's bytes that is S and P (written and read back), and the ideal fused
    kernel's speed-up over standard attention. Taught in: notebooks/00_the_memory_wall.ipynb"""
    rows = []
    for name in chips:
        for d in ds:
            r = {
                x["piece"]: x
                for x in attention_traffic(N, d=d, itemsize=itemsize, chip_name=name)
            }
            qk, soft, std = (
                r["S = scale·QKᵀ"],
                r["P = softmax(S)"],
                r["standard, total"],
            )
            fused = r["fused: Q, K, V in, O out"]
            rows.append(
                {
                    "chip": name,
                    "d": d,
                    "QKᵀ FLOP/B": f"{qk['intensity']:.0f}",
                    "QKᵀ bound": qk["bound"],
                    "softmax t_mem / t_comp": f"{soft['t_memory'] / soft['t_compute']:.2f}",
                    "S, P share of bytes": f"{4 * N * N * itemsize / std['bytes']:.0%}",
                    "ideal fused speed-up": f"{std['time'] / fused['time']:.1f}x",
                }
            )
    return rows


def peak_bytes(fn, *args, **kwargs) -> tuple[int, object]:
    """Run `fn(*args, **kwargs)`; return (peak bytes allocated above the start, result).

    Measured with `tracemalloc`, which sees numpy's buffers (not torch's).
    """
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        result = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return peak - start, result


def line_peaks(fn, *args, **kwargs) -> tuple[list[dict], object]:
    """Run `fn(*args, **kwargs)` and measure, for each line of `fn`'s own body that ran, the peak bytes
    allocated above the start while that line ran; return (rows, result).

    Each row is `{"line": number in the source, "source": the line's text, "peak": bytes}`, in source
    order; a line that ran several times keeps its largest peak. Measured with `tracemalloc` (numpy's
    buffers, not torch's) and a line tracer (`sys.settrace`) on `fn`'s frame only, so the lines of the
    functions it calls count towards the line that called them. Reads `fn`'s source (a Python function
    defined in a file or a notebook cell; without it a line's text is its number, "line 2").
    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TypeError(f"fn must be a Python function, got {type(fn).__name__}")
    try:
        text, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):  # defined by exec, say: each line named by its number
        text, first = None, code.co_firstlineno
    peaks: dict[int, int] = {}
    state = {"line": None, "start": 0}

    def close_line():
        if state["line"] is not None:
            used = tracemalloc.get_traced_memory()[1] - state["start"]
            peaks[state["line"]] = max(peaks.get(state["line"], 0), used)
        tracemalloc.reset_peak()

    def in_fn(frame, event, arg):
        if event in ("line", "return"):
            close_line()
            state["line"] = frame.f_lineno if event == "line" else None
        return in_fn

    def calls(frame, event, arg):
        return in_fn if frame.f_code is code else None

    was_tracing, old_trace = tracemalloc.is_tracing(), sys.gettrace()
    if not was_tracing:
        tracemalloc.start()
    try:
        state["start"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sys.settrace(calls)
        try:
            result = fn(*args, **kwargs)
        finally:
            sys.settrace(old_trace)
    finally:
        if not was_tracing:
            tracemalloc.stop()
    rows = [
        {"line": n, "source": _line(text, n - first), "peak": max(peak, 0)}
        for n, peak in sorted(peaks.items())
        if n >= first
    ]
    return rows, result


def _line(text: list[str] | None, i: int) -> str:
    """Line `i` of a function's source (0 is its `def`), or "line i" where the source is unknown."""
    return text[i].rstrip() if text is not None and i < len(text) else f"line {i}"


def attention_bytes(
    N: int, M: int | None = None, itemsize: int = 4, heads: int = 1
) -> int:
    """Bytes of the score and probability matrices of standard attention: $2 \\cdot N \\cdot M \\cdot$ itemsize per head."""
    M = N if M is None else M
    if N < 0 or M < 0 or itemsize < 1 or heads < 1:
        raise ValueError(
            f"N, M must be >= 0 and itemsize, heads >= 1, got N={N}, M={M}, itemsize={itemsize}, heads={heads}"
        )
    return 2 * N * M * itemsize * heads


def measure_peak_memory(
    N: int, d: int = 64, block_q: int = 256, block_k: int = 256, seed: int = 0
) -> dict:
    """Peak bytes above the inputs of `attention_naive` and `flash_attention_numpy` on float32 inputs (N, d), measured once each.

    Uses `lab.peak_bytes` (tracemalloc). The naive version holds S and P: about $2N^2 \\cdot 4$ bytes,
    2 GiB at N = 16384. Returns `naive`, `flash` and the largest output difference `max_diff`.
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    from .attention import (
        attention_naive,
        flash_attention_numpy,
    )  # the kernels import this module's siblings

    N, d = check_positive(N, "N"), check_positive(d, "d")
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((N, d), dtype=np.float32) for _ in range(3)
    )  # (N, d) each
    naive, o_naive = peak_bytes(attention_naive, q, k, v)
    flash, (o_flash, _) = peak_bytes(
        flash_attention_numpy, q, k, v, block_q=block_q, block_k=block_k
    )
    return {
        "N": N,
        "naive": naive,
        "flash": flash,
        "max_diff": float(np.abs(o_naive - o_flash).max()),
    }
