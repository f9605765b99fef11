"""`python -m labbench.gpu_check`: the Triton kernels, compiled on an NVIDIA GPU, against the float64 oracle.

The first step of `bash tools/run_gpu.sh`, in seconds: the forward in float16, bfloat16 and float32, causal
and not, at small shapes with N ≠ M, grouped-query heads (Hq = 4 query heads over Hkv = 2) and partial
tiles, each printed as max |o − ref|; then the backward's dQ, dK, dV against the torch kernel's, float32.
It prints, never asserts: the recorded runs and the tests judge. Without a CUDA device it says so and exits 2.

Taught in: notebooks/08_hardware_runs.ipynb (the Triton kernel's GPU run)
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import lab

__all__ = ["forward_errors", "backward_errors", "main"]

SHAPES = ((1, 1, 16), (17, 64, 64), (200, 200, 128), (1000, 777, 64))  # (N, M, d)


def forward_errors(
    dtypes=(torch.float16, torch.bfloat16, torch.float32), shapes=SHAPES
) -> list:
    """max |o − ref| of `flash_attention_triton` on CUDA against `attention_reference` (float64), per dtype, causal and (N, M, d).

    q is (2, 4, N, d), k and v (2, 2, M, d): four query heads share two key/value heads.
    """
    rows = []
    for dt in dtypes:
        for causal in (False, True):
            for N, M, d in shapes:
                g = torch.Generator().manual_seed(0)
                q = torch.randn(2, 4, N, d, generator=g)  # (B, Hq, N, d)
                k, v = (
                    torch.randn(2, 2, M, d, generator=g) for _ in range(2)
                )  # (B, Hkv, M, d)
                ref = lab.attention_reference(
                    q.numpy(), k.numpy(), v.numpy(), causal=causal
                )[0]
                o = lab.flash_attention_triton(
                    *(t.to(dt).cuda() for t in (q, k, v)), causal=causal
                )
                err = float(np.abs(o.double().cpu().numpy() - ref).max())
                rows.append(
                    {
                        "dtype": str(dt).removeprefix("torch."),
                        "causal": causal,
                        "N": N,
                        "M": M,
                        "d": d,
                        "max_err": err,
                    }
                )
    return rows


def backward_errors(N: int = 300, d: int = 64) -> dict:
    """max |dX_triton − dX_torch| for X in q, k, v: the Triton backward against the torch kernel's, float32, causal."""
    q, k, v = (
        torch.randn(2, 4, N, d, device="cuda", requires_grad=True) for _ in range(3)
    )  # (B, H, N, d)
    do = torch.randn(2, 4, N, d, device="cuda")
    got = torch.autograd.grad(
        lab.flash_attention_triton(q, k, v, causal=True), (q, k, v), do
    )
    want = torch.autograd.grad(
        lab.flash_attention_torch(q, k, v, causal=True), (q, k, v), do
    )
    return {f"d{n}": float((a - b).abs().max()) for n, a, b in zip("qkv", got, want)}


def main(argv=None) -> int:
    """Command line entry point: prints each error; 2 without a CUDA device."""
    if not torch.cuda.is_available():
        print(
            "no CUDA device here (torch.cuda.is_available() is False): the Triton kernels' GPU check needs one."
        )
        return 2
    print(
        "torch",
        torch.__version__,
        "CUDA",
        torch.version.cuda,
        torch.cuda.get_device_name(0),
    )
    for r in forward_errors():
        print(
            f"triton {r['dtype']} causal={r['causal']} N={r['N']} M={r['M']} d={r['d']}: max |o - ref| = {r['max_err']:.1e}"
        )
    grads = backward_errors()
    print(
        "triton backward vs torch kernel, fp32 (IEEE dots):",
        ", ".join(f"{n} {e:.1e}" for n, e in grads.items()),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
