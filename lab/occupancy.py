"""How many programs of the Triton forward one SM holds at once, and how many waves the launch grid takes.

A model of a launch configuration, on paper (no GPU needed): Triton's `triton.Config` takes the block sizes
as meta-parameters and `num_warps`, `num_stages` beside them
(https://triton-lang.org/main/python-api/generated/triton.Config.html):

- shared memory of one program = the Q_i tile + `num_stages` × (one K_j tile + one V_j tile), each tile
  (rows × d) elements of the input dtype: with `num_stages` = s the loop holds s buffers of K_j, V_j, one
  being computed while the loads of the next s - 1 are in flight;
- registers of one program, spread over its `num_warps` × 32 threads: the fp32 block values that live for
  the whole loop, acc (Br × d) and the score tile S_ij, then P_ij (Br × Bc), and Q_i as a matmul operand
  (Br × d of the input dtype, packed: two fp16 or bf16 values a 32-bit register); the compiler adds registers of its own (pointers, indices), so this is a floor,
  and past 255 a thread spills the rest to local memory, in HBM (`spills`);
- programs per SM = the least of what shared memory, registers, threads (2,048 per SM) and block slots
  (32 per SM) allow; programs in flight = that × SMs; the grid is ⌈N / Br⌉ × B·H programs, run in
  ⌈grid / in flight⌉ waves.

The per-SM limits are the CUDA C++ Programming Guide's ("Compute Capabilities", technical specifications,
compute capability 8.0 for the A100 and 9.0 for the H100) and, through `lab.hardware.CHIPS`, the A100 and
H100 whitepapers. Taught in: notebooks/08_triton_kernel.ipynb
"""

from __future__ import annotations

import math

from .hardware import chip as chip_figures
from .validate import check_choice

__all__ = ["ITEMSIZE", "PER_SM", "occupancy"]

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}

# Limits per SM that lab.hardware does not hold, the same at compute capability 8.0 (A100) and 9.0 (H100):
# CUDA C++ Programming Guide, "Compute Capabilities", technical specifications table.
PER_SM = {"threads": 2048, "blocks": 32}

_WARPS = (1, 2, 4, 8, 16)


def _power_of_two(value, name: str, least: int) -> int:
    if not isinstance(value, int) or value < least or value & (value - 1):
        raise ValueError(
            f"{name} must be a power of two, at least {least}, got {value!r}"
        )
    return value


def occupancy(
    Br: int = 128,
    Bc: int = 64,
    d: int = 64,
    *,
    num_warps: int = 4,
    num_stages: int = 2,
    dtype: str = "float16",
    chip: str = "A100",
    B: int = 4,
    H: int = 16,
    N: int = 4096,
) -> dict:
    """What one SM of `chip` holds of the forward with blocks (Br, Bc) at head dimension d, and the grid's waves.

    shared = (Br + 2·num_stages·Bc)·d·itemsize; registers per thread ≥ ⌈(Br·d + Br·Bc + Br·d·itemsize/4) /
    (32·num_warps)⌉; programs per SM = min over shared memory, registers, threads and block slots; grid =
    ⌈N / Br⌉·B·H, waves = ⌈grid / (programs per SM · SMs)⌉. Returns those numbers and `bound`, the limit
    that decides (ties joined by 'and'; 0 programs when one program needs more shared memory than a program may
    take: Triton then refuses the launch with `OutOfResources`). Taught in: notebooks/08_triton_kernel.ipynb
    """
    _power_of_two(Br, "Br", 16)
    _power_of_two(Bc, "Bc", 16)
    _power_of_two(d, "d", 16)
    check_choice(num_warps, _WARPS, "num_warps")
    check_choice(dtype, ITEMSIZE, "dtype")
    for name, value in (("num_stages", num_stages), ("B", B), ("H", H), ("N", N)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    figures = chip_figures(chip)
    size = ITEMSIZE[dtype]
    q_tile = Br * d * size
    kv_stage = 2 * Bc * d * size  # one K_j tile and one V_j tile
    shared = q_tile + num_stages * kv_stage
    threads = 32 * num_warps
    values = (
        Br * d + Br * Bc + Br * d * size / 4
    )  # 32-bit registers: acc, S_ij / P_ij, Q_i
    per_thread = math.ceil(values / threads)
    registers = figures["registers_per_sm"] // 4  # 32-bit registers per SM
    limits = {
        "shared memory": (
            figures["shared_per_sm"] // shared
            if shared <= figures["shared_per_block"]
            else 0
        ),
        # past the most a thread may have, the compiler spills the rest to local memory (in HBM)
        "registers": registers
        // (min(per_thread, figures["registers_per_thread"]) * threads),
        "threads": PER_SM["threads"] // threads,
        "block slots": PER_SM["blocks"],
    }
    per_sm = min(limits.values())
    bound = " and ".join(k for k, v in limits.items() if v == per_sm)
    grid = math.ceil(N / Br) * B * H
    in_flight = per_sm * figures["sms"]
    waves = math.ceil(grid / in_flight) if in_flight else 0
    return {
        "chip": chip,
        "q_tile_bytes": q_tile,
        "kv_stage_bytes": kv_stage,
        "shared_bytes": shared,
        "shared_per_sm": figures["shared_per_sm"],
        "shared_per_block": figures["shared_per_block"],
        "threads": threads,
        "registers_per_thread": per_thread,
        "spills": per_thread > figures["registers_per_thread"],
        "limits": limits,
        "programs_per_sm": per_sm,
        "bound": bound,
        "sms": figures["sms"],
        "in_flight": in_flight,
        "grid": grid,
        "waves": waves,
        "last_wave_fill": (grid - (waves - 1) * in_flight) / in_flight
        if in_flight
        else 0.0,
    }
