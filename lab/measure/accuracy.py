"""Accuracy, measured: max |flash − standard| of the course's kernels in each dtype, beside a reported run's figures.

"standard" is softmax(QKᵀ)V in the same dtype on the same device; the float64 oracle
(`attention_reference`) gives a second error, `vs_fp64`. The shapes are those of a reported run on an
Ascend 910B3, whose figures are kept here to print beside ours (`data/runs/ascend-910b3_reported.json`
holds the whole record).

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import numpy as np
import torch

from .kernels import DTYPES

# A reported run's accuracy table (Ascend 910B3, CANN 8.0.1, fp32), as reported: max |flash - standard|.
REPORTED_910B3_ACCURACY = {
    (1, 256, 64): 1.19e-7,
    (1, 512, 64): 1.34e-7,
    (1, 1024, 64): 1.79e-7,
    (4, 512, 64): 2.09e-7,
}


def verify_accuracy(
    device: str = "cpu",
    dtypes=("float32", "float16", "bfloat16"),
    shapes=None,
    interpreter: bool = True,
    progress: bool = True,
) -> list:
    """max |flash − standard| at the reported run's (B, N, d) shapes, each kernel and dtype available here, beside its figure.

    "standard" is softmax(QKᵀ)V in the same dtype on the same device (`attention_torch_naive`), as the
    write-up compared; `vs_fp64` is the error against the float64 oracle. H = 1. Triton runs compiled
    on a GPU, or through its interpreter on the CPU when `interpreter` (float32/float16 there: slow, not
    a timing). Taught in: notebooks/08_hardware_runs.ipynb
    """
    from tqdm.auto import tqdm

    from ..attention import attention_naive, attention_reference, flash_attention_numpy
    from ..torch_kernels import attention_torch_naive, flash_attention_torch_forward

    shapes = list(REPORTED_910B3_ACCURACY) if shapes is None else list(shapes)
    kernels = [("numpy flash", "float32"), ("numpy flash", "float64")]
    kernels += [("lab torch flash", dt) for dt in dtypes]
    tri_ok = False
    try:
        from ..kernels.rung6_triton import flash_attention_triton, triton_status

        tri_ok = triton_status()[0] and (
            torch.device(device).type == "cuda" or interpreter
        )
    except ImportError:
        pass
    if tri_ok:
        kernels += [
            ("triton", dt)
            for dt in dtypes
            if torch.device(device).type == "cuda" or dt != "bfloat16"
        ]
    rows = []
    for kname, dt in tqdm(kernels, desc="verify", disable=not progress, leave=False):
        for B, N, d in shapes:
            g = torch.Generator().manual_seed(0)
            q, k, v = (
                torch.randn((B, 1, N, d), generator=g).to(DTYPES[dt]) for _ in range(3)
            )  # (B, 1, N, d)
            ref = attention_reference(*(t.double().numpy() for t in (q, k, v)))[0]
            if kname == "numpy flash":
                o = torch.from_numpy(
                    flash_attention_numpy(*(t.numpy() for t in (q, k, v)))[0]
                )
                std = torch.from_numpy(
                    np.asarray(attention_naive(*(t.numpy() for t in (q, k, v))))
                )
            else:
                qd, kd, vd = (t.to(device) for t in (q, k, v))
                if kname == "triton":
                    o = flash_attention_triton(qd, kd, vd)
                else:
                    o = flash_attention_torch_forward(qd, kd, vd)[0]
                std = attention_torch_naive(qd, kd, vd)
            o, std = o.double().cpu(), std.double().cpu()
            rows.append(
                {
                    "kernel": kname
                    + (
                        " (interpreter)"
                        if kname == "triton" and torch.device(device).type == "cpu"
                        else ""
                    ),
                    "dtype": dt,
                    "B": B,
                    "N": N,
                    "d": d,
                    "vs_standard": float((o - std).abs().max()),
                    "vs_fp64": float((o - torch.from_numpy(ref)).abs().max()),
                    "reported_910b3": REPORTED_910B3_ACCURACY.get((B, N, d))
                    if dt == "float32"
                    else None,
                }
            )
    return rows


def accuracy_table(rows) -> str:
    """The `verify_accuracy` rows as a fixed-width table.

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    head = f"{'kernel':<26} {'dtype':<9} {'(B, N, d)':<15} {'vs standard':>12} {'vs fp64':>9} {'910B3 (rep.)':>13}"
    lines = [head, "-" * len(head)]
    for r in rows:
        seed = "-" if r["reported_910b3"] is None else f"{r['reported_910b3']:.2e}"
        shape = f"({r['B']}, {r['N']}, {r['d']})"
        lines.append(
            f"{r['kernel']:<26} {r['dtype']:<9} {shape:<15} {r['vs_standard']:>12.2e} {r['vs_fp64']:>9.2e} {seed:>13}"
        )
    return "\n".join(lines)
