"""Decoding one token against a long K/V cache: grouped-query heads, arithmetic intensity, and splitting the keys.

A ladder:
  1. `MODEL_CONFIGS`, `kv_cache_bytes_per_token`, `kv_cache_table` : what a K/V cache costs per token for
     multi-head (Hkv = Hq), grouped-query (1 < Hkv < Hq) and multi-query (Hkv = 1) layouts of published
     models, each row with its source.
  2. `decode_intensity` : FLOPs per byte of one decoding step; the G = Hq / Hkv query heads of a group
     read the same K/V, so the intensity grows with G.
  3. `decode_schedule` : a model of how many processors each scheme keeps busy. FlashAttention-2 splits
     the work over (batch, heads, query blocks); one query token is one query block, so a small batch
     leaves most processors idle. Flash-decoding also splits the keys into `splits` chunks, each a work
     item, and merges the chunks' `(o, lse)` (`lab.merge_outputs`, notebook 04).
  4. `decode_torch`, `time_decoding` : the same split in torch on this machine's cores: each chunk's
     `(o_c, lse_c)` on a worker thread, then merged; timed with `torch.utils.benchmark`.

Shapes: q (B, Hq, N, d) with N = 1 when decoding, k (B, Hkv, M, d), v (B, Hkv, M, dv), Hq % Hkv == 0.

Taught in: notebooks/10_decoding_and_gqa.ipynb
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ._checks import check_block, check_float_tensors, check_qkv_shapes, check_scale
from .merge import chunk_bounds, merge_outputs

__all__ = [
    "MODEL_CONFIGS",
    "PROCESSORS",
    "H100_RIDGE",
    "attention_layout",
    "kv_cache_bytes_per_token",
    "kv_cache_table",
    "decode_intensity",
    "decode_schedule",
    "decode_torch",
    "time_decoding",
]

_LLAMA2 = 'Touvron et al. 2023, "Llama 2", arXiv 2307.09288, §2.2 and the released config.json'
_LLAMA3 = 'Llama Team 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 3'
_MISTRAL = "Jiang et al. 2023, Mistral 7B, arXiv 2310.06825, Table 1"
_FALCON = "tiiuae/falcon-7b config.json; Almazrouei et al. 2023, arXiv 2311.16867"

# Published configurations: layers, query heads Hq, K/V heads Hkv, head dim d, and where each is stated.
MODEL_CONFIGS = {
    "Llama 2 7B": dict(layers=32, q_heads=32, kv_heads=32, head_dim=128, source=_LLAMA2),
    "Llama 2 70B": dict(layers=80, q_heads=64, kv_heads=8, head_dim=128, source=_LLAMA2),
    "Mistral 7B": dict(layers=32, q_heads=32, kv_heads=8, head_dim=128, source=_MISTRAL),
    "Llama 3 8B": dict(layers=32, q_heads=32, kv_heads=8, head_dim=128, source=_LLAMA3),
    "Llama 3 70B": dict(layers=80, q_heads=64, kv_heads=8, head_dim=128, source=_LLAMA3),
    "Llama 3 405B": dict(layers=126, q_heads=128, kv_heads=8, head_dim=128, source=_LLAMA3),
    "Falcon-7B": dict(layers=32, q_heads=71, kv_heads=1, head_dim=64, source=_FALCON),
}

# Streaming multiprocessors of an H100 SXM5: 132 (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022).
PROCESSORS = 132

# FLOPs per byte where an H100 SXM turns from memory-bound to compute-bound: 989 TFLOP/s dense
# BF16/FP16 over 3.35 TB/s of HBM3 (NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column; the
# datasheet's 1,979 TFLOP/s is with 2:4 sparsity, twice the dense figure).
H100_RIDGE = 989e12 / 3.35e12


_positive_int = check_block                                    # the same check: an integer >= 1, named


def attention_layout(q_heads: int, kv_heads: int) -> str:
    """"MHA" when $H_{kv} = H_q$, "MQA" when $H_{kv} = 1 < H_q$, "GQA" otherwise; requires $H_q \\bmod H_{kv} = 0$.

    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    q_heads, kv_heads = _positive_int(q_heads, "q_heads"), _positive_int(kv_heads, "kv_heads")
    if q_heads % kv_heads:
        raise ValueError(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")
    return "MHA" if kv_heads == q_heads else "MQA" if kv_heads == 1 else "GQA"


def kv_cache_bytes_per_token(layers: int, kv_heads: int, head_dim: int, itemsize: int = 2) -> int:
    """Bytes of K and V cached per token: $2 \\cdot \\text{layers} \\cdot H_{kv} \\cdot d \\cdot$ itemsize.

    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    for name, x in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim), ("itemsize", itemsize)):
        _positive_int(x, name)
    return 2 * int(layers) * int(kv_heads) * int(head_dim) * int(itemsize)


def kv_cache_table(itemsize: int = 2, tokens: int = 8192, configs=None) -> list[dict]:
    """One row per model: layout, group $G = H_q / H_{kv}$, cache bytes per token and for `tokens` tokens, and the multi-head bytes ($H_{kv} = H_q$) it saves against.

    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    _positive_int(tokens, "tokens")
    rows = []
    for name, c in (MODEL_CONFIGS if configs is None else configs).items():
        per_token = kv_cache_bytes_per_token(c["layers"], c["kv_heads"], c["head_dim"], itemsize)
        mha = kv_cache_bytes_per_token(c["layers"], c["q_heads"], c["head_dim"], itemsize)
        rows.append(dict(model=name, layout=attention_layout(c["q_heads"], c["kv_heads"]),
                         q_heads=c["q_heads"], kv_heads=c["kv_heads"], group=c["q_heads"] // c["kv_heads"],
                         bytes_per_token=per_token, mha_bytes_per_token=mha, saving=mha / per_token,
                         cache_bytes=per_token * tokens, source=c["source"]))
    return rows


def decode_intensity(group, head_dim: int = 128, M: int = 4096, itemsize: int = 2):
    """FLOPs per byte of one decoding step of one K/V head: $\\frac{4 G M d}{(2 M d + 2 G d)\\,\\text{itemsize}}$ ($\\approx 2G/\\text{itemsize}$).

    The $G$ query heads of a group each do $QK^\\top$ and $PV$ ($2Md$ FLOPs each) against the same K and V,
    read once ($2Md$ elements); q and o add $2Gd$. Accepts an array of group sizes.
    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    for name, x in (("head_dim", head_dim), ("M", M), ("itemsize", itemsize)):
        _positive_int(x, name)
    G = np.asarray(group)
    if not np.issubdtype(G.dtype, np.number) or np.any(G < 1):
        raise ValueError(f"group must be >= 1, got {group!r}")
    G = G.astype(np.float64)
    flops = 4.0 * G * M * head_dim
    nbytes = (2.0 * M * head_dim + 2.0 * G * head_dim) * itemsize
    out = flops / nbytes
    return float(out) if out.ndim == 0 else out


def decode_schedule(M: int, *, batch: int = 1, heads: int = 8, splits: int = 1, N: int = 1,
                    block_q: int = 128, block_k: int = 128, processors: int = PROCESSORS) -> dict:
    """How many processors a decoding step keeps busy: work items $= B \\cdot H \\cdot \\lceil N / B_r \\rceil \\cdot$ splits, busy $= \\min(\\text{items}, P)$.

    `heads` counts the heads that each get their own work item (the K/V heads when a kernel packs a
    group's G query heads into the rows of one query block). Time, in key blocks one processor works
    through: waves $\\lceil \\text{items} / P \\rceil$ times $\\lceil \\lceil M/B_c \\rceil / \\text{splits} \\rceil$,
    plus one merge step when splits > 1; `fa2_steps` is the same for `splits=1` (FlashAttention-2's
    schedule) and `speedup` their ratio.
    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    for name, x in (("M", M), ("batch", batch), ("heads", heads), ("splits", splits), ("N", N),
                    ("block_q", block_q), ("block_k", block_k), ("processors", processors)):
        _positive_int(x, name)
    items = batch * heads * math.ceil(N / block_q) * splits
    busy = min(items, processors)
    waves = math.ceil(items / processors)
    key_blocks = math.ceil(M / block_k)
    steps = waves * math.ceil(key_blocks / splits) + (1 if splits > 1 else 0)
    fa2_items = batch * heads * math.ceil(N / block_q)
    fa2_steps = math.ceil(fa2_items / processors) * key_blocks
    return dict(M=M, splits=splits, items=items, busy=busy, busy_fraction=busy / processors, waves=waves,
                steps=steps, fa2_steps=fa2_steps, speedup=fa2_steps / steps, processors=processors)


def _chunk_part(q, k_c, v_c, scale):
    """(o_c, lse_c) of one chunk of keys, torch, all query rows of a K/V head at once."""
    s = (q @ k_c.transpose(-1, -2)) * scale                   # (B, Hkv, G·N, Mc)
    lse_c = torch.logsumexp(s, dim=-1)                        # (B, Hkv, G·N)
    o_c = torch.softmax(s, dim=-1) @ v_c                      # (B, Hkv, G·N, dv)
    return o_c, lse_c


def decode_torch(q, k, v, *, splits: int = 1, workers: int = 1, scale=None):
    """Flash-decoding in torch: keys cut into `splits` chunks, each chunk's $(o_c, lse_c)$ on one of `workers` threads, merged by `lab.merge_outputs`; returns `(o, lse)`.

    The G = Hq / Hkv query heads of a K/V head are packed as rows of one (G·N, d) block, so each chunk
    of K and V is read once for the whole group. Non-causal (the new token sees the whole cache).
    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    check_float_tensors(q=q, k=k, v=v)
    if q.dim() != 4:
        raise ValueError(f"q must have shape (B, Hq, N, d), got {tuple(q.shape)}")
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    splits, workers = _positive_int(splits, "splits"), _positive_int(workers, "workers")
    scale = check_scale(scale, q.shape[-1])
    B, Hq, N, d = q.shape
    Hkv, M = k.shape[1], k.shape[2]
    qg = q.reshape(B, Hkv, group * N, d)                      # (B, Hkv, G·N, d): a group's rows together
    bounds = [(j0, j1) for j0, j1 in chunk_bounds(M, splits) if j1 > j0]
    if not bounds:
        raise ValueError("k must hold at least one key")
    if workers == 1:
        parts = [_chunk_part(qg, k[:, :, j0:j1], v[:, :, j0:j1], scale) for j0, j1 in bounds]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(lambda b: _chunk_part(qg, k[:, :, b[0]:b[1]], v[:, :, b[0]:b[1]], scale), bounds))
    if len(parts) == 1:
        o, lse = parts[0]
    else:
        o, lse = merge_outputs([p[0].cpu().numpy() for p in parts], [p[1].cpu().numpy() for p in parts])
        o, lse = torch.from_numpy(o).to(q.device), torch.from_numpy(lse).to(q.device)  # the merge reads splits rows only
    return o.reshape(B, Hq, N, v.shape[-1]).to(q.dtype), lse.reshape(B, Hq, N)


def time_decoding(M: int, *, runs=((1, 1), (2, 2)), batch: int = 1, q_heads: int = 8, kv_heads: int = 8,
                  d: int = 64, dtype=torch.float32, rounds: int = 3, min_run_time: float = 0.1, seed: int = 0) -> list[dict]:
    """Median seconds of one decoding step (`decode_torch`) for each `(splits, workers)` in `runs`, torch intra-op threads set to 1, timed in alternating rounds (`lab.measure.time_interleaved`).

    Returns one dict per run: splits, workers, seconds, and the K/V bytes read per second.
    Taught in: notebooks/10_decoding_and_gqa.ipynb
    """
    from .measure import time_interleaved

    for name, x in (("M", M), ("batch", batch), ("q_heads", q_heads), ("kv_heads", kv_heads), ("d", d)):
        _positive_int(x, name)
    if q_heads % kv_heads:
        raise ValueError(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be > 0, got {min_run_time}")
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, 1, d, generator=g, dtype=dtype)   # (B, Hq, 1, d)
    k = torch.randn(batch, kv_heads, M, d, generator=g, dtype=dtype)  # (B, Hkv, M, d)
    v = torch.randn(batch, kv_heads, M, d, generator=g, dtype=dtype)  # (B, Hkv, M, d)
    kv_bytes = k.nbytes + v.nbytes
    fns = {(s, w): (lambda s=s, w=w: decode_torch(q, k, v, splits=s, workers=w)) for s, w in runs}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                                  # parallelism comes from the workers only
    try:
        t = time_interleaved(fns, rounds=rounds, min_run_time=min_run_time)
    finally:
        torch.set_num_threads(threads)
    return [dict(splits=s, workers=w, seconds=t[(s, w)], gb_per_s=kv_bytes / t[(s, w)] / 1e9) for s, w in runs]
