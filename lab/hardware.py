"""Every hardware figure the course quotes, in one table, each with its primary source.

`CHIPS[chip][field]` is a number in base units (FLOP/s, bytes/s, bytes, Hz, counts); `SOURCES[chip][field]`
names where it comes from (datasheet, whitepaper, paper section, CUDA programming guide table). Derived
figures (the exponential rate, the ridge point) are computed from the table, never typed in:

- exponentials per second = SMs × special-function units per SM × clock (the units return 16 `exp2f`
  results per SM per clock: CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table, compute
  capability 8.0 and 9.0; e^x is one exp2 of x · log2(e), a multiply more);
- lone FP32 operations per second = SMs × FP32 lanes per SM × the FP32 clock (one add, subtract, multiply or
  compare a lane a clock: 64 results per SM per clock at compute capability 8.0, 128 at 9.0, CUDA C++ Programming
  Guide, "Arithmetic Instructions" throughput table). The datasheets' FP32 TFLOP/s is twice it: they count a
  fused multiply-add as two FLOPs;
- ridge point = matmul FLOP/s ÷ HBM bytes/s: the arithmetic intensity above which a kernel is compute-bound.

On chip, a FlashAttention kernel keeps the score tile S, its exponentials P and the output accumulator
in the *register file* of the streaming multiprocessors (SMs), and stages the Q, K and V tiles in *shared
memory*; both are SRAM. Chapters: 00 (HBM and SRAM bandwidth, the roofline), 05 (what fits on chip),
06 (the cost of non-matmul work), 08 (this machine against them), 10 (the ridge in decoding).

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb,
notebooks/08_hardware_runs.ipynb, notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
"""

from __future__ import annotations

from .validate import check_choice

__all__ = [
    "CHIPS",
    "SOURCES",
    "chip",
    "exp_rate",
    "fp32_op_rate",
    "ridge_point",
    "hardware_table",
    "estimated_bytes",
    "loop_overhead",
    "intensity_lines",
]

KiB = 1024

_A100_WP = (
    "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), Table 1 / SM section"
)
_H100_WP = (
    "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), H100 SXM5 column"
)
_H100_DS = (
    "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (dense, without sparsity)"
)
_CUDA_CC = (
    'CUDA C++ Programming Guide, "Compute Capabilities", technical specifications table'
)
_CUDA_TP = 'CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table (special functions)'
_CUDA_FP32 = (
    'CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table '
    "(32-bit floating-point add, multiply, multiply-add: results per clock per SM)"
)
_FA1 = "FlashAttention (Dao et al. 2022, arXiv 2205.14135), §2.1"
_FA2 = "FlashAttention-2 (Dao 2023, arXiv 2307.08691), §3.1"

CHIPS = {
    "A100": {
        "sms": 108,
        "clock_hz": 1.41e9,
        "sfu_per_sm": 16,
        "matmul_flops": 312e12,
        "nonmatmul_flops": 19.5e12,
        "fp32_lanes_per_sm": 64,
        "fp32_clock_hz": 1.41e9,
        "hbm_bytes_per_s": 1.555e12,
        "hbm_bytes": 40e9,
        "sram_bytes_per_s": 19e12,
        "l2_bytes": 40 * KiB * KiB,
        "registers_per_sm": 256 * KiB,
        "l1_shared_per_sm": 192 * KiB,
        "shared_per_sm": 164 * KiB,
        "shared_per_block": 163 * KiB,
        "registers_per_thread": 255,
        "warp_size": 32,
    },
    "H100": {
        "sms": 132,
        "clock_hz": 1.83e9,
        "sfu_per_sm": 16,
        "matmul_flops": 989e12,
        "nonmatmul_flops": 67e12,
        "fp32_lanes_per_sm": 128,
        "fp32_clock_hz": 1.98e9,
        "hbm_bytes_per_s": 3.35e12,
        "hbm_bytes": 80e9,
        "sram_bytes_per_s": None,
        "l2_bytes": 50 * KiB * KiB,
        "registers_per_sm": 256 * KiB,
        "l1_shared_per_sm": 256 * KiB,
        "shared_per_sm": 228 * KiB,
        "shared_per_block": 227 * KiB,
        "registers_per_thread": 255,
        "warp_size": 32,
    },
}

SOURCES = {
    "A100": {
        "sms": _A100_WP,
        "clock_hz": _A100_WP + " (boost clock)",
        "sfu_per_sm": _CUDA_TP + ", compute capability 8.0",
        "matmul_flops": _FA2 + " and " + _A100_WP + " (FP16/BF16 tensor cores, dense)",
        "nonmatmul_flops": _FA2 + " (FP32)",
        "fp32_lanes_per_sm": _CUDA_FP32
        + ", compute capability 8.0 (64); "
        + _A100_WP
        + " (64 FP32 cores per SM)",
        "fp32_clock_hz": _A100_WP
        + " (boost clock: 19.5 TFLOP/s = 108 × 64 FP32 cores × 2 FLOP × 1.41 GHz)",
        "hbm_bytes_per_s": _A100_WP
        + " (A100 40GB; the 80GB SXM part has 2.039 TB/s, A100 datasheet); "
        + _FA1
        + " gives 1.5-2.0 TB/s",
        "hbm_bytes": _A100_WP + " (40 GB of HBM2; the 80GB parts have twice it)",
        "sram_bytes_per_s": _FA1 + ' ("estimated around 19 TB/s")',
        "l2_bytes": _A100_WP
        + ' ("40 MB L2 cache"; the CUDA device query reports 40 MiB)',
        "registers_per_sm": _A100_WP + " (65,536 32-bit registers)",
        "l1_shared_per_sm": _A100_WP,
        "shared_per_sm": _CUDA_CC + ", compute capability 8.0",
        "shared_per_block": _CUDA_CC + ", compute capability 8.0",
        "registers_per_thread": _CUDA_CC
        + ", compute capability 8.0 (maximum 32-bit registers per thread)",
        "warp_size": _CUDA_CC + ", compute capability 8.0",
    },
    "H100": {
        "sms": _H100_WP,
        "clock_hz": "the tensor-core clock behind the datasheet's 989 TFLOP/s dense FP16: "
        + _H100_DS
        + " ÷ (132 SMs"
        " × 4,096 FLOP per SM per clock, "
        + _H100_WP
        + ") = 1.83 GHz; FlashAttention-3 (Shah et al. 2024,"
        " arXiv 2407.08608), §3.1, quotes the 3.9 T exp/s it gives. The FP32 figure runs at a higher"
        " clock: 67 TFLOP/s = 132 × 128 FP32 units × 2 × 1.98 GHz",
        "sfu_per_sm": _CUDA_TP + ", compute capability 9.0",
        "matmul_flops": _H100_DS + " (FP16/BF16 tensor cores)",
        "nonmatmul_flops": _H100_DS + " (FP32)",
        "fp32_lanes_per_sm": _CUDA_FP32
        + ", compute capability 9.0 (128); "
        + _H100_WP
        + " (128 FP32 cores per SM)",
        "fp32_clock_hz": "the clock behind the datasheet's 67 TFLOP/s FP32: "
        + _H100_DS
        + " ÷ (132 SMs × 128 FP32 cores × 2 FLOP per fused multiply-add) = 1.98 GHz",
        "hbm_bytes_per_s": _H100_DS + " (HBM3)",
        "hbm_bytes": _H100_DS + " (GPU memory: 80GB of HBM3)",
        "sram_bytes_per_s": "not published",
        "l2_bytes": _H100_WP
        + ' ("50 MB L2 cache"; the CUDA device query reports 50 MiB)',
        "registers_per_sm": _H100_WP + " (65,536 32-bit registers)",
        "l1_shared_per_sm": _H100_WP,
        "shared_per_sm": _CUDA_CC + ", compute capability 9.0",
        "shared_per_block": _CUDA_CC + ", compute capability 9.0",
        "registers_per_thread": _CUDA_CC
        + ", compute capability 9.0 (maximum 32-bit registers per thread)",
        "warp_size": _CUDA_CC + ", compute capability 9.0",
    },
}


def chip(name: str) -> dict:
    """The figures of chip `name` ("A100" or "H100"), with the derived `exp_per_s`, `fp32_ops_per_s` and
    `ridge_flops_per_byte`."""
    check_choice(name, CHIPS, "chip")
    out = dict(CHIPS[name])
    out["exp_per_s"] = exp_rate(name)
    out["fp32_ops_per_s"] = fp32_op_rate(name)
    out["ridge_flops_per_byte"] = ridge_point(name)
    return out


def exp_rate(name: str) -> float:
    """Exponentials per second on the special-function units: SMs × units per SM × clock."""
    check_choice(name, CHIPS, "chip")
    c = CHIPS[name]
    return c["sms"] * c["sfu_per_sm"] * c["clock_hz"]


def fp32_op_rate(name: str) -> float:
    """Lone FP32 operations (an add, a subtract, a multiply, a compare) per second: SMs × FP32 lanes per SM × FP32
    clock, one result a lane a clock. Half the datasheet's FP32 FLOP/s, which counts a fused multiply-add as two.

    Taught in: notebooks/00_the_memory_wall.ipynb
    """
    check_choice(name, CHIPS, "chip")
    c = CHIPS[name]
    return c["sms"] * c["fp32_lanes_per_sm"] * c["fp32_clock_hz"]


def ridge_point(name: str) -> float:
    """FLOPs per byte of HBM traffic where chip `name` turns from memory-bound to compute-bound: matmul FLOP/s ÷ HBM bytes/s."""
    check_choice(name, CHIPS, "chip")
    return CHIPS[name]["matmul_flops"] / CHIPS[name]["hbm_bytes_per_s"]


def hardware_table(
    fields=(
        "matmul_flops",
        "nonmatmul_flops",
        "exp_per_s",
        "hbm_bytes_per_s",
        "sram_bytes_per_s",
        "registers_per_sm",
        "shared_per_sm",
    ),
) -> str:
    """The table as aligned text, one row per figure, one column per chip, then each figure's source."""
    scale = {
        "flops": (1e12, "TFLOP/s"),
        "exp_per_s": (1e12, "T exp/s"),
        "ops_per_s": (1e12, "T ops/s"),
        "lanes_per_sm": (1, ""),
        "bytes_per_s": (1e12, "TB/s"),
        "per_sm": (KiB, "KiB"),
        "per_block": (KiB, "KiB"),
        "clock_hz": (1e9, "GHz"),
    }
    rows = []
    for f in fields:
        div, unit = next(
            ((d, u) for key, (d, u) in scale.items() if f.endswith(key)), (1, "")
        )
        cells = []
        for name in CHIPS:
            x = chip(name)[f]
            cells.append("—" if x is None else f"{x / div:,.4g} {unit}".strip())
        rows.append((f, *cells))
    w = [
        max(len(r[i]) for r in rows + [("figure", *CHIPS)])
        for i in range(len(CHIPS) + 1)
    ]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(("figure", *CHIPS)))]
    lines += ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    lines.append("sources:")
    for f in fields:
        for name in CHIPS:
            src = SOURCES[name].get(
                f,
                "computed: "
                + {
                    "exp_per_s": "SMs × units per SM × clock",
                    "fp32_ops_per_s": "SMs × FP32 lanes per SM × FP32 clock",
                }.get(f, "matmul FLOP/s ÷ HBM bytes/s"),
            )
            lines.append(f"  {name} {f}: {src}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ cost models
# What a kernel costs, estimated from its loop structure: numbers, not drawings (lab/figures/hardware.py
# draws them). Taught in: notebooks/08_hardware_runs.ipynb


def estimated_bytes(
    kernel: str, B: int, H: int, N: int, d: int, itemsize: int = 4, block_q: int = 256
) -> float:
    """Bytes each kernel moves through memory, estimated: naive $\\approx s(4BHNd + 4BHN^2)$ (S written, read, P written, read);
    the tiled loops add $2BHNd + 2BHNd\\,N/B_r$ (Q read and O written once, K and V once per query block) to their passes
    over each tile: the numpy loop eight ($8BHN^2$: the matmul writes the tile, the row max reads it, the subtraction and
    the exp read and write it, the row sum and the second matmul read it), the torch loop's default rung ten (its
    exponential is exp2 after a multiplication by log2 e, one more read and write); fused kernels only those
    $2BHNd + 2BHNd\\,N/B_r$. `block_q` is Br; `itemsize` is s, the bytes of one value.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    bh, n2, nd = B * H, float(N) * N, float(N) * d
    kv = 2 * nd * max(1.0, N / block_q)
    if kernel in ("torch naive", "sdpa math", "numpy reference"):
        return itemsize * bh * (4 * nd + 4 * n2)
    if kernel == "numpy flash":
        return itemsize * bh * (2 * nd + kv + 8 * n2)
    if kernel == "lab torch flash":
        return itemsize * bh * (2 * nd + kv + 10 * n2)
    return itemsize * bh * (2 * nd + kv)


def intensity_lines(kernels, B: int, H: int, N: int, ds, ridge: float) -> str:
    """One line per kernel: its estimated intensity $I = F / W$ at each head dimension d, and its side of the ridge $I^*$.

    $F$ is `attention_flops`, $W$ is `estimated_bytes` in fp32; $I$ is analytic, the side depends on this machine's
    ridge and prints masked. Taught in: notebooks/08_hardware_runs.ipynb
    """
    from .measure.flops import attention_flops
    from .notebook import measured

    kernels, ds = list(kernels), list(ds)
    if not kernels or not ds:
        raise ValueError("kernels and ds must each name at least one")
    if not ridge > 0:
        raise ValueError(f"ridge must be positive, got {ridge!r}")
    lines = []
    for kernel in kernels:
        cells = []
        for d in ds:
            i = attention_flops(B, H, N, d) / estimated_bytes(kernel, B, H, N, d)
            side = measured("past" if i > ridge else "below", ">5")
            cells.append(f"d = {d}: I = {i:5.1f}, {side} the ridge")
        lines.append(f"{kernel:<16} " + "; ".join(cells))
    return "\n".join(lines)


def loop_overhead(
    N: int,
    block: int,
    *,
    block_k: int | None = None,
    d: int = 64,
    heads: int = 8,
    ops_per_step: int = 21,
    us_per_op: float = 10.0,
    flops_per_s: float = 155e9,
) -> dict:
    """Cost model of a Python-level tile loop: steps $= \\lceil N/B_r \\rceil \\lceil N/B_c \\rceil$ ($B_r$ = block, $B_c$ = block_k, block by default),
    overhead = steps · ops_per_step · us_per_op, matmul time = $4 \\cdot heads \\cdot N^2 d$ / flops_per_s.

    The default `ops_per_step`, 21, is what `lab.measure.ops_per_tile_step()` counts in rung 4's tile step (14 ops
    that compute, 7 views; tests/test_hardware.py recounts it). The default 155 GFLOP/s is a round figure between the fp32 matmul ceilings recorded on the course's 2-core
    AMD EPYC (94 GFLOP/s on one torch thread, 195 on two; torch 2.13.0 CPU build, data/runs). Taught in: notebooks/08_hardware_runs.ipynb
    """
    for name, x in (
        ("N", N),
        ("block", block),
        ("d", d),
        ("heads", heads),
        ("block_k", block if block_k is None else block_k),
        ("ops_per_step", ops_per_step),
    ):
        if int(x) != x or x < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    if not us_per_op > 0 or not flops_per_s > 0:
        raise ValueError("us_per_op and flops_per_s must be positive")
    Bc = block if block_k is None else int(block_k)
    steps = (-(-N // block)) * (-(-N // Bc))  # ceil(N / Br) · ceil(N / Bc)
    overhead_s = steps * ops_per_step * us_per_op * 1e-6
    matmul_s = (
        4.0 * heads * N * N * d / flops_per_s
    )  # F = 4·B·H·N²·d at B = 1, as lab.attention_flops
    return {
        "N": int(N),
        "block": int(block),
        "block_k": Bc,
        "steps": int(steps),
        "overhead_ms": overhead_s * 1e3,
        "matmul_ms": matmul_s * 1e3,
        "overhead_fraction": overhead_s / (overhead_s + matmul_s),
    }
