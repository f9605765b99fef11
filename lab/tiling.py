"""The IO model of attention: HBM traffic, on-chip footprint, tile counts and op counts, as formulas.

A ladder, as in the FlashAttention paper (Dao et al. 2022, arXiv 2205.14135):
  0. `standard_traffic` : Algorithm 0 writes S and P to HBM and reads them back: Θ(Nd + N²) accesses.
  1. `flash_counts(variant="fa1")` : Algorithm 1, K/V blocks outer; K, V read once, Q_i, O_i, l_i, m_i
     read and O_i, l_i, m_i written once per tile: Θ(N²d²/M) for SRAM size M (Theorem 2).
  2. `flash_counts(variant="fa2")` : FlashAttention-2, Q blocks outer; Q read once, K, V once per query
     block, O and lse written once; one division by l per output element.

Symbols: N queries, M keys, d (dv) the head dim of q/k (v), Br = block_q, Bc = block_k,
Tr = ceil(N/Br), Tc = ceil(M/Bc). The SRAM size, the paper's M, is `sram_bytes` here (M_sram elements
= sram_bytes / itemsize) so that it does not collide with the number of keys.
On chip there are two budgets, not one (`onchip_footprint`, `onchip_fits`): a GPU kernel keeps the score
tile S_ij, P_ij and the state (m, l, acc) in the register file, and stages Q_i, K_j, V_j in shared memory;
their sizes per SM come from `lab.hardware`.
Bytes are counted at the dtype each array has in HBM: q, k, v and o in the input dtype (`itemsize`),
the statistics m, l, lse in the accumulator dtype (`acc_itemsize`, float32 at least).
`flash_counts` predicts, tile by tile, exactly what `lab.trace.record()` counts in an instrumented run
of `lab.flash_attention_numpy`.

Taught in: notebooks/05_tiling.ipynb, notebooks/05_tiling_traffic.ipynb, notebooks/06_flashattention2.ipynb,
notebooks/06_flashattention2_parallelism.ipynb
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from .hardware import CHIPS, exp_rate
from .rules import causal_key_end
from .trace import Recorder
from .validate import check_block, check_causal, check_choice, check_positive

__all__ = [
    "SRAM_BYTES",
    "HARDWARE",
    "cpu_l2_bytes",
    "sram_sizes",
    "fa_block_sizes",
    "step_footprint",
    "onchip_footprint",
    "onchip_fits",
    "fits_table",
    "warp_split_exchange",
    "tile_grid",
    "tile_counts",
    "causal_tiles_formula",
    "standard_traffic",
    "flash_counts",
    "flash_traffic_bytes",
    "theorem2_bytes",
    "flop_split",
    "gpu_time_share",
    "flash_peak_bytes",
]

# Shared memory per streaming multiprocessor (SM), from `lab.hardware` (CUDA C++ Programming Guide, "Compute
# Capabilities": 228 KiB at compute capability 9.0, the H100; 164 KiB at 8.0, the A100, whose 192 KiB of L1 and
# shared memory together are not all available as shared memory). Keys name the chip and the size.
SRAM_BYTES = {
    f"{name} SM ({CHIPS[name]['shared_per_sm'] // 1024} KiB shared)": CHIPS[name][
        "shared_per_sm"
    ]
    for name in ("H100", "A100")
}

# Peak rates per chip in operations per second, from `lab.hardware`: dense FP16/BF16 matmul, FP32 non-matmul,
# and exponentials on the special-function units (SMs × 16 × clock).
HARDWARE = {
    name: {
        "matmul": c["matmul_flops"],
        "nonmatmul": c["nonmatmul_flops"],
        "exp": exp_rate(name),
    }
    for name, c in CHIPS.items()
}

_CPU_L2_FALLBACK = 1024 * 1024


def cpu_l2_bytes(cache_dir="/sys/devices/system/cpu/cpu0/cache") -> tuple[int, str]:
    """Size of this machine's level-2 cache of CPU core 0 in bytes, and where the number came from.

    Reads `index*/level` and `index*/size` under `cache_dir` (Linux sysfs); falls back to 1 MiB, a
    common per-core L2, when the directory is missing or unreadable.
    Taught in: notebooks/05_tiling.ipynb
    """
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    try:
        for index in sorted(Path(cache_dir).glob("index*")):
            if (index / "level").read_text().strip() != "2":
                continue
            size = (index / "size").read_text().strip()
            scale = units.get(size[-1].upper(), 1)
            return int(size.rstrip("KMGkmg")) * scale, str(index / "size")
    except (OSError, ValueError):
        pass
    return _CPU_L2_FALLBACK, "fallback: 1 MiB (no readable sysfs cache entry)"


def sram_sizes(cpu_l2: int | None = None) -> dict[str, int]:
    """On-chip memories to compare a tile step against: H100 and A100 shared memory per SM, and a CPU core's L2.

    `cpu_l2=None` reads this machine's L2 with `cpu_l2_bytes`; pass a number for a reproducible table.
    Taught in: notebooks/05_tiling.ipynb
    """
    l2 = cpu_l2_bytes()[0] if cpu_l2 is None else check_positive(cpu_l2, "cpu_l2")
    return {**SRAM_BYTES, f"CPU core L2 ({l2 // 1024:,} KiB)": l2}


def fa_block_sizes(sram_bytes: int, d: int, itemsize: int = 2) -> tuple[int, int]:
    """FlashAttention's block choice for SRAM of M_sram = sram_bytes/itemsize elements: $B_c = \\lceil M_{sram}/4d \\rceil$, $B_r = \\min(B_c, d)$.

    Algorithm 1 of the FlashAttention paper; returns `(Br, Bc)`.
    Taught in: notebooks/05_tiling.ipynb
    """
    sram_bytes = check_positive(sram_bytes, "sram_bytes")
    d = check_positive(d, "d")
    itemsize = check_positive(itemsize, "itemsize")
    M_sram = sram_bytes // itemsize
    Bc = max(1, math.ceil(M_sram / (4 * d)))
    return min(Bc, d), Bc


def step_footprint(
    d: int,
    block_q: int,
    block_k: int,
    dv: int | None = None,
    itemsize: int = 2,
    acc_itemsize: int = 4,
) -> dict[str, int]:
    """Bytes on chip during one tile step, all in one memory (the paper's single-SRAM model, a CPU's L2): $Q_i, K_j, V_j, P_{ij}$ in the input dtype, $S_{ij}, m, l, acc$ in the accumulator's.

    $B_r d + B_c d + B_c d_v + B_r B_c$ elements of `itemsize`, $B_r B_c + 2 B_r + B_r d_v$ of
    `acc_itemsize` (S_ij is float32; P_ij is cast to the input dtype for the second matmul, as GPU
    kernels do). Returns one entry per buffer and their `"total"`.
    Taught in: notebooks/05_tiling.ipynb
    """
    d = check_positive(d, "d")
    dv = d if dv is None else check_positive(dv, "dv")
    Br, Bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    itemsize, acc_itemsize = (
        check_positive(itemsize, "itemsize"),
        check_positive(acc_itemsize, "acc_itemsize"),
    )
    parts = {
        "Q_i": Br * d * itemsize,
        "K_j": Bc * d * itemsize,
        "V_j": Bc * dv * itemsize,
        "S_ij": Br * Bc * acc_itemsize,
        "P_ij": Br * Bc * itemsize,
        "m": Br * acc_itemsize,
        "l": Br * acc_itemsize,
        "acc": Br * dv * acc_itemsize,
    }
    parts["total"] = sum(parts.values())
    return parts


def onchip_footprint(
    d: int,
    block_q: int,
    block_k: int,
    dv: int | None = None,
    itemsize: int = 2,
    acc_itemsize: int = 4,
    kv_stages: int = 1,
) -> dict:
    """Bytes one thread block keeps on chip, split by where a GPU kernel keeps them: registers and shared memory.

    Registers: $S_{ij}$ ($B_r B_c$, `acc_itemsize`), $P_{ij}$ ($B_r B_c$, `itemsize`, the operand of the
    second matmul), $m$, $l$ ($B_r$ each) and $acc$ ($B_r d_v$), in `acc_itemsize`. Shared memory: $Q_i$
    ($B_r d$) and `kv_stages` copies of $K_j$ ($B_c d$) and $V_j$ ($B_c d_v$) in `itemsize` (2 stages: the
    next key block loads while this one is used). Returns `{"registers": {...}, "shared": {...}}`, each
    with one entry per buffer and its `"total"`.
    Taught in: notebooks/05_tiling.ipynb
    """
    d = check_positive(d, "d")
    dv = d if dv is None else check_positive(dv, "dv")
    Br, Bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    isz, asz = (
        check_positive(itemsize, "itemsize"),
        check_positive(acc_itemsize, "acc_itemsize"),
    )
    stages = check_positive(kv_stages, "kv_stages")
    registers = {
        "S_ij": Br * Bc * asz,
        "P_ij": Br * Bc * isz,
        "m": Br * asz,
        "l": Br * asz,
        "acc": Br * dv * asz,
    }
    shared = {
        "Q_i": Br * d * isz,
        "K_j": stages * Bc * d * isz,
        "V_j": stages * Bc * dv * isz,
    }
    registers["total"], shared["total"] = sum(registers.values()), sum(shared.values())
    return {"registers": registers, "shared": shared}


def onchip_fits(
    chip: str,
    d: int,
    block_q: int,
    block_k: int,
    dv: int | None = None,
    itemsize: int = 2,
    acc_itemsize: int = 4,
    kv_stages: int = 1,
    warps: int = 4,
) -> dict:
    """Whether one thread block of `warps` warps fits `chip`: registers within its budget, shared memory within one block's limit.

    Budgets from `lab.hardware`: registers min(`registers_per_sm`, 32w · 255 · 4 B)
    (256 KiB per SM on the A100 and the H100, and at most 255 registers of 4 bytes per thread: 127.5 KiB for
    4 warps, 255 KiB for 8) and `shared_per_block` (163 KiB on the A100, 227 KiB on the H100: one KiB less
    than `shared_per_sm`). Returns the footprint (`onchip_footprint`), the budgets, `fits_registers`,
    `fits_shared` and `fits` (both).
    Taught in: notebooks/05_tiling.ipynb
    """
    check_choice(chip, CHIPS, "chip")
    w = check_positive(warps, "warps")
    foot = onchip_footprint(d, block_q, block_k, dv, itemsize, acc_itemsize, kv_stages)
    c = CHIPS[chip]
    reg_budget = min(
        c["registers_per_sm"], w * c["warp_size"] * c["registers_per_thread"] * 4
    )
    regs, shared = foot["registers"]["total"], foot["shared"]["total"]
    ok_r, ok_s = regs <= reg_budget, shared <= c["shared_per_block"]
    return {
        **foot,
        "chip": chip,
        "warps": w,
        "register_budget": reg_budget,
        "shared_budget": c["shared_per_block"],
        "shared_per_sm": c["shared_per_sm"],
        "fits_registers": ok_r,
        "fits_shared": ok_s,
        "fits": ok_r and ok_s,
    }


def fits_table(chip: str, d: int, shapes, itemsize: int = 2) -> str:
    """A text table: for each (Br, Bc) in `shapes`, its registers and whether they fit 4 / 8 warps, its shared memory
    and whether it fits with 1 / 2 copies of K_j, V_j (`onchip_fits` on `chip`).

    Taught in: notebooks/05_tiling.ipynb
    """
    head = (
        f"{'Br × Bc':>9} | {'registers':>9} | {'fit 4 / 8 warps':>15} | "
        f"{'shared, 1 / 2 stages':>20} | fit 1 / 2 stages"
    )
    lines = [head]
    for Br, Bc in shapes:
        f = {
            (w, s): onchip_fits(
                chip, d, Br, Bc, itemsize=itemsize, kv_stages=s, warps=w
            )
            for w in (4, 8)
            for s in (1, 2)
        }
        regs = f[4, 1]["registers"]["total"] / 1024
        sh1, sh2 = (f[4, s]["shared"]["total"] / 1024 for s in (1, 2))
        lines.append(
            f"{Br:>4} × {Bc:<4}| {regs:5.1f} KiB | "
            f"{f[4, 1]['fits_registers']!s:>6} / {f[8, 1]['fits_registers']!s:<6} | "
            f"{sh1:9.1f} / {sh2:5.1f} KiB | {f[4, 1]['fits_shared']} / {f[4, 2]['fits_shared']}"
        )
    return "\n".join(lines)


def warp_split_exchange(
    block_q: int,
    block_k: int,
    dv: int,
    warps: int = 4,
    split: str = "Q",
    acc_itemsize: int = 4,
) -> dict:
    """Shared-memory bytes the warps of one thread block exchange per tile step to combine their results.

    `split="K"` (FlashAttention's partition, "split-K"): the warps share $Q_i$ and each takes $B_c/w$ keys of
    $K_j$, $V_j$, so each holds a partial $(m, l, acc)$ for all $B_r$ rows; to combine them every warp writes
    its $B_r (d_v + 2)$ values to shared memory and they are read back and summed:
    $w B_r (d_v + 2)$ values written and read per tile. `split="Q"` (FlashAttention-2, §3.3): each warp owns
    $B_r/w$ rows and sees all of $K_j$, $V_j$; its rows need no one else's values: 0.
    Returns `written`, `read` (bytes), `per_warp_rows` and `per_warp_keys`.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    Br, Bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    dv, w = check_positive(dv, "dv"), check_positive(warps, "warps")
    check_choice(split, ("K", "Q"), "split")
    asz = check_positive(acc_itemsize, "acc_itemsize")
    exchanged = w * Br * (dv + 2) * asz if split == "K" else 0
    return {
        "split": split,
        "warps": w,
        "written": exchanged,
        "read": exchanged,
        "per_warp_rows": Br if split == "K" else -(-Br // w),
        "per_warp_keys": -(-Bc // w) if split == "K" else Bc,
    }


def time_rows(split: dict, chip: str) -> list:
    """Per variant of `split` (`flop_split` results): µs of matmul, exponentials and the rest at `chip`'s peak rates.

    "rest" is priced as the model does, 2 FLOPs an FP32 slot; "rest, 1 op a slot" prices each lone max, add or
    multiply as a whole FMA slot (twice the time). "outside" is the share of time outside matmuls, from
    `gpu_time_share`. Taught in: notebooks/06_flashattention2.ipynb
    """
    rows = []
    for var, s in split.items():
        t = gpu_time_share(s["matmul"], s["nonmatmul"], chip, exp=s["exp"])
        rest = t["t_nonmatmul"] - t["t_exp"]
        rows.append(
            {
                "variant": var,
                "matmul": t["t_matmul"] * 1e6,
                "exp": t["t_exp"] * 1e6,
                "rest": rest * 1e6,
                "rest, 1 op a slot": 2 * rest * 1e6,
                "outside": f"{t['share']:.1%}",
            }
        )
    return rows


def wave_counts(blocks: int, sms: int) -> dict:
    r"""Waves of `blocks` equal thread blocks on `sms` SMs, one at a time per SM: a model.

    `waves` $= blocks / SMs$; `rounds` $= \lceil waves \rceil$; the last round keeps
    `last` $= blocks - (rounds - 1) \cdot SMs$ SMs busy; `use` $= blocks / (rounds \cdot SMs)$, the
    share of SM-time that computes.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    blocks, sms = check_positive(blocks, "blocks"), check_positive(sms, "sms")
    rounds = -(-blocks // sms)
    return {
        "blocks": blocks,
        "waves": blocks / sms,
        "rounds": rounds,
        "last": blocks - (rounds - 1) * sms,
        "use": blocks / (rounds * sms),
    }


def wave_rows(shapes, chip: str = "A100", block_q: int = 128) -> list:
    r"""Thread blocks and waves of FA1 and FA2 for each `(B, H, N)` in `shapes` on `chip`'s SMs.

    FA1 runs $B H$ thread blocks, FA2 $B H T_r$ with $T_r = \lceil N / B_r \rceil$; a wave is one thread block
    per SM, so waves $= blocks / SMs$, and the last wave keeps $blocks - (\lceil waves \rceil - 1) \cdot SMs$
    SMs busy; SM use = blocks / (ceil(waves) SMs), the share of SM-time that computes. One thread block per SM
    at a time, all taking the same time: a model.
    Taught in: notebooks/06_flashattention2_parallelism.ipynb
    """
    sms = CHIPS[check_choice(chip, tuple(CHIPS), "chip")]["sms"]
    Br = check_block(block_q, "block_q")
    rows = []
    for B, H, N in shapes:
        fa1 = wave_counts(B * H, sms)
        fa2 = wave_counts(B * H * -(-N // Br), sms)
        rows.append(
            {
                "B": B,
                "H": H,
                "N": N,
                "FA1 blocks": fa1["blocks"],
                "FA1 waves": f"{fa1['waves']:.2f}",
                "FA1's last wave": f"{fa1['last']} of {sms} SMs",
                "FA1 SM use": f"{fa1['use']:.1%}",
                "FA2 blocks": fa2["blocks"],
                "FA2 waves": f"{fa2['waves']:.1f}",
                "FA2 SM use": f"{fa2['use']:.1%}",
            }
        )
    return rows


def _checked_shape(N, M, block_q, block_k):
    N, M = check_positive(N, "N", 0), check_positive(M, "M", 0)
    return N, M, check_block(block_q, "block_q"), check_block(block_k, "block_k")


def _row_blocks(N: int, M: int, Br: int, Bc: int, causal: bool):
    """Per query block i: rows r_i, key blocks visited n_i, keys loaded K_i = min(n_i Bc, M)."""
    i0 = np.arange(0, N, Br)
    i1 = np.minimum(i0 + Br, N)
    rows = i1 - i0
    visible = (
        causal_key_end(i1 - 1, N, M) if causal else np.full(i0.shape, M)
    )  # keys the block's last row sees
    n = -(-visible // Bc)  # ceil(visible / Bc)
    keys = np.minimum(n * Bc, M)
    return rows.astype(np.int64), n.astype(np.int64), keys.astype(np.int64)


def tile_grid(
    N: int, M: int, block_q: int, block_k: int, causal: bool = False
) -> np.ndarray:
    """Boolean (Tr, Tc) grid: `True` where the kernel computes tile (i, j), i.e. $j B_c < \\min(M, (i+1)B_r + M - N)$ under a causal mask.

    A tile is skipped exactly when every (row, key) pair in it is masked.
    Taught in: notebooks/05_tiling.ipynb
    """
    N, M, Br, Bc = _checked_shape(N, M, block_q, block_k)
    _, n, _ = _row_blocks(N, M, Br, Bc, check_causal(causal))
    Tc = -(-M // Bc)
    return np.arange(Tc)[None, :] < n[:, None]


def tile_counts(
    N: int, M: int, block_q: int, block_k: int, causal: bool = False
) -> dict:
    """$T_r = \\lceil N/B_r \\rceil$, $T_c = \\lceil M/B_c \\rceil$, and the tiles computed: $\\sum_i \\lceil \\mathrm{clip}(\\min((i+1)B_r, N) + M - N, 0, M) / B_c \\rceil$ under a causal mask.

    Returns `Tr`, `Tc`, `total` = Tr·Tc, `computed`, `skipped`, and `fraction` = computed / total.
    Taught in: notebooks/05_tiling.ipynb
    """
    N, M, Br, Bc = _checked_shape(N, M, block_q, block_k)
    _, n, _ = _row_blocks(N, M, Br, Bc, check_causal(causal))
    Tr, Tc = -(-N // Br), -(-M // Bc)
    computed = int(n.sum())
    total = Tr * Tc
    return {
        "Tr": Tr,
        "Tc": Tc,
        "total": total,
        "computed": computed,
        "skipped": total - computed,
        "fraction": computed / total if total else 0.0,
    }


def causal_tiles_formula(N: int, block: int) -> int:
    """Causal tiles computed for N = M and square blocks $B_r = B_c = B$: $T(T+1)/2$ with $T = \\lceil N/B \\rceil$.

    The diagonal tiles plus everything below; the fraction $(T+1)/2T$ tends to 1/2.
    Taught in: notebooks/05_tiling.ipynb
    """
    N, B = check_positive(N, "N", 0), check_block(block, "block")
    T = -(-N // B)
    return T * (T + 1) // 2


def standard_traffic(
    N: int,
    M: int | None = None,
    d: int = 64,
    dv: int | None = None,
    itemsize: int = 2,
    heads: int = 1,
) -> Recorder:
    """HBM traffic of standard attention (the paper's Algorithm 0): reads $Nd + Md + 2NM + Md_v$, writes $2NM + Nd_v$ elements.

    S = QKᵀ is written, read back for P = softmax(S), P is written and read back for O = PV.
    Returns a `lab.trace.Recorder` with bytes per array (`read_by`, `write_by`).
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    N = check_positive(N, "N", 0)
    M = N if M is None else check_positive(M, "M", 0)
    d = check_positive(d, "d")
    dv = d if dv is None else check_positive(dv, "dv")
    b = check_positive(itemsize, "itemsize") * check_positive(heads, "heads")
    rec = Recorder()
    rec.read_by.update(
        {
            "q": N * d * b,
            "k": M * d * b,
            "s": N * M * b,
            "p": N * M * b,
            "v": M * dv * b,
        }
    )
    rec.write_by.update({"s": N * M * b, "p": N * M * b, "o": N * dv * b})
    rec.reads, rec.writes = sum(rec.read_by.values()), sum(rec.write_by.values())
    return rec


def flash_counts(
    N: int,
    M: int,
    d: int,
    dv: int | None = None,
    *,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    variant: str = "fa2",
    itemsize: int = 4,
    acc_itemsize: int | None = None,
    heads: int = 1,
    kv_heads: int | None = None,
) -> Recorder:
    """Bytes read and written per array and exp/mul/div counts of `flash_attention_numpy`, predicted tile by tile.

    With $r_i$ rows in query block i, $n_i$ key blocks it visits and $K_i = \\min(n_i B_c, M)$ keys:
    fa2 reads $Nd + \\sum_i K_i (d + d_v)$, writes $N d_v$ + lse; exp $\\sum_i r_i (K_i + n_i)$,
    mul $\\sum_i r_i n_i (d_v + 1)$, div $N d_v$.
    fa1 reads $M(d + d_v) + \\sum_i r_i n_i (d + d_v)$ + 2 stats, writes $(1 + \\sum_i n_i r_i / N)$ times O, l, m;
    exp $\\sum_i r_i (K_i + 2 n_i)$, mul $\\sum_i r_i n_i (2 d_v + 3)$, div $\\sum_i r_i n_i d_v$.
    `heads` multiplies the q/o/stat terms (batch × query heads), `kv_heads` the k/v terms.
    Returns a `lab.trace.Recorder`, comparable with `==` to what `lab.trace.record()` counts.
    Taught in: notebooks/05_tiling_traffic.ipynb, notebooks/06_flashattention2.ipynb
    """
    N, M, Br, Bc = _checked_shape(N, M, block_q, block_k)
    check_choice(variant, ("fa1", "fa2"), "variant")
    d = check_positive(d, "d")
    dv = d if dv is None else check_positive(dv, "dv")
    isz = check_positive(itemsize, "itemsize")
    ssz = (
        max(isz, 4)
        if acc_itemsize is None
        else check_positive(acc_itemsize, "acc_itemsize")
    )
    H = check_positive(heads, "heads")
    Hk = H if kv_heads is None else check_positive(kv_heads, "kv_heads")
    r, n, K = _row_blocks(N, M, Br, Bc, check_causal(causal))
    tiles_rows = int(
        (r * n).sum()
    )  # Σ_i r_i n_i: query rows summed over computed tiles
    keys = int(K.sum())  # Σ_i K_i: keys loaded, summed over query blocks
    score_entries = int((r * K).sum())  # Σ_i r_i K_i: entries of S computed
    rec = Recorder()
    if variant == "fa2":
        rec.read_by.update(
            {"q": H * N * d * isz, "k": Hk * keys * d * isz, "v": Hk * keys * dv * isz}
        )
        rec.write_by.update({"o": H * N * dv * isz, "lse": H * N * ssz})
        rec.op_counts.update(
            {
                "exp": H * (score_entries + tiles_rows),
                "mul": H * tiles_rows * (dv + 1),
                "div": H * N * dv,
            }
        )
    else:
        rec.read_by.update(
            {
                "k": Hk * M * d * isz,
                "v": Hk * M * dv * isz,
                "q": H * tiles_rows * d * isz,
                "o": H * tiles_rows * dv * isz,
                "l": H * tiles_rows * ssz,
                "m": H * tiles_rows * ssz,
            }
        )
        rec.write_by.update(
            {
                "o": H * (N + tiles_rows) * dv * isz,
                "l": H * (N + tiles_rows) * ssz,
                "m": H * (N + tiles_rows) * ssz,
            }
        )
        rec.op_counts.update(
            {
                "exp": H * (score_entries + 2 * tiles_rows),
                "mul": H * tiles_rows * (2 * dv + 3),
                "div": H * tiles_rows * dv,
            }
        )
    rec.read_by, rec.write_by, rec.op_counts = (
        +rec.read_by,
        +rec.write_by,
        +rec.op_counts,
    )  # drop zeros
    rec.reads, rec.writes = sum(rec.read_by.values()), sum(rec.write_by.values())
    return rec


def flash_traffic_bytes(
    N: int,
    M: int | None = None,
    d: int = 64,
    *,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    variant: str = "fa2",
    itemsize: int = 2,
) -> int:
    """Total HBM bytes (reads + writes) of the tiled kernel for one head: `flash_counts(...).total`.

    Non-causal fa2: $(Nd + T_r M (d + d_v) + N d_v)$·itemsize + N·lse, i.e. Θ(N²d/B_r).
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    M = N if M is None else M
    return flash_counts(
        N,
        M,
        d,
        block_q=block_q,
        block_k=block_k,
        causal=causal,
        variant=variant,
        itemsize=itemsize,
    ).total


def theorem2_bytes(N: int, d: int, sram_bytes: int, itemsize: int = 2) -> float:
    """The order of Theorem 2 in bytes: $N^2 d^2 / M_{sram}$ elements with $M_{sram}$ = sram_bytes/itemsize.

    The constant is left out, as in the theorem; compare slopes, not values.
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    N, d = check_positive(N, "N", 0), check_positive(d, "d")
    M_sram = check_positive(sram_bytes, "sram_bytes") / check_positive(
        itemsize, "itemsize"
    )
    return N * N * d * d / M_sram * itemsize


def flop_split(
    N: int,
    M: int | None = None,
    d: int = 64,
    dv: int | None = None,
    *,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    variant: str = "fa2",
) -> dict:
    """Matmul FLOPs $2 \\cdot S_{entries} (d + d_v)$ and non-matmul FLOPs $3 \\cdot S_{entries}$ + exp + mul + div, one head.

    S_entries is the number of scores computed ($NM$ without a mask); each costs a max, a subtraction
    and a sum besides its exp; exp, mul and div come from `flash_counts`. Returns `matmul`,
    `nonmatmul`, `softmax` (3·S_entries + the exps of the scores), `rescale` (the rest) and the counts.
    Taught in: notebooks/06_flashattention2.ipynb
    """
    M = N if M is None else M
    rec = flash_counts(
        N, M, d, dv, block_q=block_q, block_k=block_k, causal=causal, variant=variant
    )
    dv = d if dv is None else dv
    r, _, K = _row_blocks(N, M, block_q, block_k, check_causal(causal))
    entries = int((r * K).sum())
    ops = Counter(rec.op_counts)
    nonmatmul = 3 * entries + ops["exp"] + ops["mul"] + ops["div"]
    return {
        "matmul": 2 * entries * (d + dv),
        "nonmatmul": nonmatmul,
        "softmax": 4 * entries,
        "rescale": nonmatmul - 4 * entries,
        "entries": entries,
        "exp": ops["exp"],
        "mul": ops["mul"],
        "div": ops["div"],
    }


def gpu_time_share(
    matmul_flops: float, nonmatmul_flops: float, chip: str = "A100", exp: float = 0
) -> dict:
    """Time at peak rates: $t_{mm} = F_{mm}/R_{mm}$, $t_{non} = (F_{non} - E)/R_{non} + E/R_{exp}$; share outside matmuls $t_{non}/(t_{mm} + t_{non})$.

    `exp` = E of the `nonmatmul_flops` are exponentials, charged at the special-function rate
    `lab.exp_rate(chip)` (A100: 108 SMs × 16 × 1.41 GHz ≈ 2.4 T/s: eight times slower than the
    datasheet's 19.5 TFLOP/s, which counts a fused multiply-add as two, and four times slower than
    `lab.fp32_op_rate`'s 9.75 T lone operations/s); the rest at `HARDWARE[chip]["nonmatmul"]`, the
    datasheet's FP32 rate. Rates from `HARDWARE` (that is, `lab.hardware`).
    Returns `t_matmul`, `t_exp`, `t_nonmatmul` (seconds, exponentials included), `share` and `ratio` = R_mm / R_non.
    Taught in: notebooks/06_flashattention2.ipynb
    """
    check_choice(chip, tuple(HARDWARE), "chip")
    if matmul_flops < 0 or nonmatmul_flops < 0 or exp < 0:
        raise ValueError(
            f"FLOP counts must be >= 0, got {matmul_flops}, {nonmatmul_flops}, exp={exp}"
        )
    if exp > nonmatmul_flops:
        raise ValueError(
            f"exp ({exp}) counts among the non-matmul FLOPs ({nonmatmul_flops}): it cannot exceed them"
        )
    rates = HARDWARE[chip]
    t_mm, t_exp = matmul_flops / rates["matmul"], exp / rates["exp"]
    t_non = (nonmatmul_flops - exp) / rates["nonmatmul"] + t_exp
    total = t_mm + t_non
    return {
        "t_matmul": t_mm,
        "t_exp": t_exp,
        "t_nonmatmul": t_non,
        "share": t_non / total if total else 0.0,
        "ratio": rates["matmul"] / rates["nonmatmul"],
    }


def flash_peak_bytes(
    N: int,
    d: int = 64,
    dv: int | None = None,
    block_q: int = 64,
    block_k: int = 64,
    itemsize: int = 4,
) -> int:
    """Memory the tiled kernel holds beyond its inputs: $o$ and $lse$ ($N d_v + N$ elements) plus one tile step.

    Linear in N: the step's buffers (`step_footprint`, everything in `itemsize` here, as the numpy
    kernel keeps P in S's buffer and counts it once) do not grow with N.
    Taught in: notebooks/05_tiling_traffic.ipynb
    """
    N, d = check_positive(N, "N", 0), check_positive(d, "d")
    dv = d if dv is None else check_positive(dv, "dv")
    step = step_footprint(
        d, block_q, block_k, dv, itemsize=itemsize, acc_itemsize=itemsize
    )
    return N * (dv + 1) * itemsize + step["total"] - step["P_ij"]
