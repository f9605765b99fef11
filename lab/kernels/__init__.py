"""The kernel ladder: attention from the float64 oracle to a fused Triton kernel, every rung kept side by side.

Each rung's module opens with what it changes against the rung below and what that buys, measured:
rungs 1-3's memory and traffic by `lab.peak_bytes` and `lab.trace.record()` (`tests/test_kernels.py`
measures every such figure again), rungs 4-5's speed and memory by `python -m lab.bench` (benchmarks,
recorded in `data/runs`, never tests). Read them in order; each is tested against rung 0.

| rung | module | function | what changes | notebook |
| --- | --- | --- | --- | --- |
| 0 | `lab/kernels/rung0_reference.py` | `attention_reference` | the definition in float64: S and P, N×M each | 00, 11 |
| 1 | `lab/kernels/rung1_naive.py` | `attention_naive` | the input dtype: S and P, 2·N·M·itemsize bytes | 00 |
| 2 | `lab/kernels/rung2_numpy_fa1.py` | `fa1_forward`, run by `flash_attention_numpy(variant="fa1")` | tiles, K/V outer loop, O, l, m rescaled in HBM: no N×M array | 05, 06 |
| 3 | `lab/kernels/rung3_numpy_fa2.py` | `flash_attention_numpy(variant="fa2")`, its step `fa2_forward` | Q outer loop, (m, l, acc) kept in the tile, one division, lse saved | 05, 06 |
| 4 | `lab/kernels/rung4_torch_fa2.py` | `tiled_forward` with its step `fa2_step`, run by `flash_attention_torch(variant="fa2")` | rung 3 as batched torch ops on any device, every head in each op, exp as exp2 | 08 |
| 5 | `lab/kernels/rung5_torch_lazy.py` | `lazy_step`, run by `flash_attention_torch(variant="lazy")` | m a reference moved only when a row sum outgrows e^τ: no row max, no α on most tiles | 06, 08 |
| 6 | `lab/kernels/rung6_triton.py` | `flash_attention_triton`, its kernel `_attn_fwd` | one fused kernel: the tile never leaves the chip | 08 |

The public entry of rungs 4 and 5, with their backward and autograd, is `lab/torch_kernels.py`
(`flash_attention_torch`, `flash_attention_torch_forward`, `FlashAttention`); rung 6's backward is
`lab/kernels/rung6_triton_backward.py`.

(`block_q` is Br, `block_k` is Bc.) The rules every rung shares sit in `lab/rules.py`: which keys a query sees (`causal_key_end`, `causal_mask`) and the guard for a row that has seen no key
(`safe_exp_shift`); the input checks in `lab/validate.py`; the tile plan (which tiles to compute, which
to mask) in `lab/_tiles.py`; the byte and op counting in `lab/trace.py` (`trace.load`, `trace.store`).
The backward passes have their own ladder in `lab/backward.py` (notebook 09).

Taught in: notebooks/00_the_memory_wall.ipynb, notebooks/05_tiling.ipynb, notebooks/06_flashattention2.ipynb,
notebooks/08_hardware_runs.ipynb
"""

from ..rules import causal_key_end, causal_mask, safe_exp_shift
from .rung0_reference import attention_reference
from .rung1_naive import attention_naive
from .rung3_numpy_fa2 import VARIANTS, flash_attention_numpy

__all__ = [
    "attention_reference",
    "attention_naive",
    "flash_attention_numpy",
    "VARIANTS",
    "causal_key_end",
    "causal_mask",
    "safe_exp_shift",
]
