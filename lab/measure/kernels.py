"""The kernels a benchmark compares, by name, each with seeded inputs and a sentence when it cannot run here.

`KERNELS` maps a name to (callable(q, k, v, causal) -> o, input kind): the course's numpy and torch
kernels, PyTorch's `scaled_dot_product_attention` pinned to each backend, and the Triton kernel. The
timing, memory and sweep modules beside this one take their kernels from here.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import torch


def _sdpa(backend_name):
    def run(q, k, v, causal):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal
            )

    return run


def _numpy_reference(q, k, v, causal):
    from ..attention import attention_reference

    return attention_reference(q, k, v, causal=causal)[0]


def _numpy_flash(q, k, v, causal):
    from ..attention import flash_attention_numpy

    return flash_attention_numpy(q, k, v, causal=causal, block_q=128, block_k=128)[0]


def _torch_naive(q, k, v, causal):
    from ..torch_kernels import attention_torch_naive

    return attention_torch_naive(q, k, v, causal=causal)


def _torch_flash(q, k, v, causal):
    from ..torch_kernels import flash_attention_torch_forward

    return flash_attention_torch_forward(q, k, v, causal=causal)[0]


def _triton(q, k, v, causal):
    from ..kernels.rung6_triton import flash_attention_triton

    # fixed, hand-picked launch settings (no autotuning): 128×64 tiles (Br × Bc), more warps for d = 128
    return flash_attention_triton(
        q,
        k,
        v,
        causal=causal,
        block_q=128,
        block_k=64,
        num_warps=4 if q.shape[-1] <= 64 else 8,
        num_stages=3,
    )


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

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def check_kernel(kernel: str) -> None:
    """Raise ValueError unless `kernel` is a name in `KERNELS`."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")


def make_inputs(
    kernel: str,
    B: int,
    H: int,
    N: int,
    d: int,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    seed: int = 0,
):
    """Seeded standard-normal q, k, v of shape (B, H, N, d) for `kernel` (numpy arrays or torch tensors on `device`).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    check_kernel(kernel)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    g = torch.Generator().manual_seed(seed)
    qkv = [
        torch.randn((B, H, N, d), generator=g).to(DTYPES[dtype]) for _ in range(3)
    ]  # (B, H, N, d) each
    if KERNELS[kernel][1] == "numpy":
        if dtype in ("float16", "bfloat16"):
            qkv = [
                t.float() for t in qkv
            ]  # numpy has no bfloat16 matmul; the numpy kernels accumulate in fp32 anyway
        return tuple(t.numpy() for t in qkv)
    return tuple(t.to(device) for t in qkv)


def kernel_available(
    kernel: str, device: str = "cpu", dtype: str = "float32"
) -> tuple[bool, str]:
    """(True, "") when `kernel` can run on `device` in `dtype` here, else (False, the reason in a sentence).

    Probes each SDPA backend once on a tiny input; the Triton kernel counts only compiled on a GPU
    (the interpreter is not a timing). Taught in: notebooks/08_hardware_runs.ipynb
    """
    check_kernel(kernel)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return False, "no CUDA device here (torch.cuda.is_available() is False)"
    kind = KERNELS[kernel][1]
    if kind == "numpy" and dev.type != "cpu":
        return False, "the numpy kernels run on the CPU only"
    if kernel == "triton":
        if dev.type != "cuda":
            return (
                False,
                "Triton on a CPU tensor runs in its interpreter, which is for stepping through, not a timing",
            )
        from ..kernels.rung6_triton import triton_status

        ok, why = triton_status()
        if not ok:
            return False, why
        if dtype == "float64":
            return False, "the Triton kernel takes float16, bfloat16 or float32"
    if kernel.startswith("sdpa"):
        try:
            q = torch.zeros((1, 1, 8, 16), dtype=DTYPES[dtype], device=dev)
            KERNELS[kernel][0](q, q, q, False)
        except RuntimeError as exc:
            first = (
                (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                .split(". ")[0]
                .rstrip(".")
            )
            return (
                False,
                f"torch {torch.__version__} has no {kernel} backend for {dtype} on {dev.type} here ({first})",
            )
    return True, ""
