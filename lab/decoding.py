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
     `num_splits_heuristic`, `flash_attn_num_splits` : how flash-attn itself picks the number of splits
     (a port of `num_splits_heuristic` in flash-attn's csrc/flash_attn/flash_api.cpp), beside the model.
  2b. `MLA_CONFIGS`, `latent_decode_intensity` : multi-head latent attention (DeepSeek-V2/V3) decodes as
     multi-query attention over one shared latent K/V, so every query head of a layer is one group.
  4. `decode_torch`, `time_decoding` : the same split in torch on this machine's cores: each chunk's
     `(o_c, lse_c)` on a worker thread, then merged; timed with `torch.utils.benchmark`.
     `cpu_speedup_model`, `decode_timing_table` : the cores as the processors, each streaming its share.
     `stream_bandwidth` : what that share is on this machine: a large read on 1 thread and on every core.
  5. `paged_kv`, `gather_pages`, `decode_paged` : the cache no longer contiguous. K and V live in fixed-size
     pages of `page_size` tokens anywhere in a pool; a block table maps each sequence's logical block i to
     a physical page (vLLM's PagedAttention, Kwon et al. 2023, arXiv 2309.06180, §4.1-4.2). A decoding
     step reads its keys through the table, page by page, with the running (m, l, acc) of notebook 02.

Shapes: q (B, Hq, N, d) with N = 1 when decoding, k (B, Hkv, M, d), v (B, Hkv, M, dv), Hq % Hkv == 0.

Taught in: notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import torch

from .hardware import CHIPS, ridge_point
from .merge import chunk_bounds, merge_outputs
from .validate import (
    as_float_array,
    check_block,
    check_finite,
    check_float_tensors,
    check_qkv_shapes,
    check_scale,
)

__all__ = [
    "MODEL_CONFIGS",
    "PROCESSORS",
    "H100_RIDGE",
    "attention_layout",
    "kv_cache_bytes_per_token",
    "kv_cache_table",
    "cache_table",
    "decode_intensity",
    "decode_schedule",
    "refill_ticks",
    "key_block_chunks",
    "schedule_table",
    "heuristic_table",
    "num_splits_heuristic",
    "flash_attn_num_splits",
    "MLA_CONFIGS",
    "latent_decode_intensity",
    "decode_torch",
    "time_decoding",
    "cpu_speedup_model",
    "decode_timing_table",
    "PagedCache",
    "paged_kv",
    "gather_pages",
    "decode_paged",
]

_LLAMA2 = 'Touvron et al. 2023, "Llama 2", arXiv 2307.09288, §2.2 and the released config.json'
_LLAMA3 = 'Llama Team 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 3'
_MISTRAL = "Jiang et al. 2023, Mistral 7B, arXiv 2310.06825, Table 1"
_FALCON = "tiiuae/falcon-7b config.json; Almazrouei et al. 2023, arXiv 2311.16867"

# Published configurations: layers, query heads Hq, K/V heads Hkv, head dim d, and where each is stated.
MODEL_CONFIGS = {
    "Llama 2 7B": dict(
        layers=32, q_heads=32, kv_heads=32, head_dim=128, source=_LLAMA2
    ),
    "Llama 2 70B": dict(
        layers=80, q_heads=64, kv_heads=8, head_dim=128, source=_LLAMA2
    ),
    "Mistral 7B": dict(
        layers=32, q_heads=32, kv_heads=8, head_dim=128, source=_MISTRAL
    ),
    "Llama 3 8B": dict(layers=32, q_heads=32, kv_heads=8, head_dim=128, source=_LLAMA3),
    "Llama 3 70B": dict(
        layers=80, q_heads=64, kv_heads=8, head_dim=128, source=_LLAMA3
    ),
    "Llama 3 405B": dict(
        layers=126, q_heads=128, kv_heads=8, head_dim=128, source=_LLAMA3
    ),
    "Falcon-7B": dict(layers=32, q_heads=71, kv_heads=1, head_dim=64, source=_FALCON),
}

_DSV2 = 'DeepSeek-AI 2024, "DeepSeek-V2", arXiv 2405.04434, §2.1 and Appendix (d_c = 4 d_h, d_R = d_h / 2)'
_DSV3 = 'DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv 2412.19437, §4.2'

# Multi-head latent attention: per layer and token the cache holds one latent c of `latent_dim` elements, from
# which every head's K and V are rebuilt, and one RoPE key of `rope_dim` elements shared by all heads.
MLA_CONFIGS = {
    "DeepSeek-V2": dict(
        layers=60, q_heads=128, head_dim=128, latent_dim=512, rope_dim=64, source=_DSV2
    ),
    "DeepSeek-V3": dict(
        layers=61, q_heads=128, head_dim=128, latent_dim=512, rope_dim=64, source=_DSV3
    ),
}

# Streaming multiprocessors of an H100 SXM5, read from the course's one table of GPU figures (`lab.hardware`,
# with its source: NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022).
PROCESSORS = CHIPS["H100"]["sms"]

# FLOPs per byte where an H100 SXM turns from memory-bound to compute-bound: dense BF16/FP16 matmul FLOP/s
# over HBM3 bytes/s, both from `lab.hardware` (NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column; the
# datasheet's sparse figure is twice the dense one). The same number as `lab.ridge_point("H100")`.
H100_RIDGE = ridge_point("H100")


_positive_int = check_block  # the same check: an integer >= 1, named


def attention_layout(q_heads: int, kv_heads: int) -> str:
    """ "MHA" when $H_{kv} = H_q$, "MQA" when $H_{kv} = 1 < H_q$, "GQA" otherwise; requires $H_q \\bmod H_{kv} = 0$.

    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    q_heads, kv_heads = (
        _positive_int(q_heads, "q_heads"),
        _positive_int(kv_heads, "kv_heads"),
    )
    if q_heads % kv_heads:
        raise ValueError(
            f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})"
        )
    return "MHA" if kv_heads == q_heads else "MQA" if kv_heads == 1 else "GQA"


def kv_cache_bytes_per_token(
    layers: int, kv_heads: int, head_dim: int, itemsize: int = 2
) -> int:
    """Bytes of K and V cached per token: $2 \\cdot \\text{layers} \\cdot H_{kv} \\cdot d \\cdot$ itemsize.

    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    for name, x in (
        ("layers", layers),
        ("kv_heads", kv_heads),
        ("head_dim", head_dim),
        ("itemsize", itemsize),
    ):
        _positive_int(x, name)
    return 2 * int(layers) * int(kv_heads) * int(head_dim) * int(itemsize)


def kv_cache_table(itemsize: int = 2, tokens: int = 8192, configs=None) -> list[dict]:
    """One row per model: layout, group $G = H_q / H_{kv}$, cache bytes per token and for `tokens` tokens, and the multi-head bytes ($H_{kv} = H_q$) it saves against.

    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    _positive_int(tokens, "tokens")
    rows = []
    for name, c in (MODEL_CONFIGS if configs is None else configs).items():
        per_token = kv_cache_bytes_per_token(
            c["layers"], c["kv_heads"], c["head_dim"], itemsize
        )
        mha = kv_cache_bytes_per_token(
            c["layers"], c["q_heads"], c["head_dim"], itemsize
        )
        rows.append(
            dict(
                model=name,
                layout=attention_layout(c["q_heads"], c["kv_heads"]),
                q_heads=c["q_heads"],
                kv_heads=c["kv_heads"],
                group=c["q_heads"] // c["kv_heads"],
                bytes_per_token=per_token,
                mha_bytes_per_token=mha,
                saving=mha / per_token,
                cache_bytes=per_token * tokens,
                source=c["source"],
            )
        )
    return rows


def cache_table(itemsize: int = 2, tokens: int = 8192) -> str:
    """`kv_cache_table` as text: one row per model, its layout, heads, cache per token and for `tokens` tokens.

    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    rows = [
        f"{'model':>12} | layout | Hq/Hkv | per token |    if MHA | {tokens:,} tokens"
    ]
    for r in kv_cache_table(itemsize=itemsize, tokens=tokens):
        heads = f"{r['q_heads']:>3}/{r['kv_heads']:<2}"
        rows.append(
            f"{r['model']:>12} | {r['layout']:>6} | {heads:>6} | "
            f"{r['bytes_per_token'] / 1024:>5,.0f} KiB | {r['mha_bytes_per_token'] / 1024:>5,.0f} KiB | "
            f"{r['cache_bytes'] / 2**30:>8.2f} GiB"
        )
    return "\n".join(rows)


def decode_intensity(
    group, head_dim: int = 128, M: int = 4096, itemsize: int = 2, qo_itemsize=None
):
    """FLOPs per byte of one decoding step of one K/V head: $\\frac{4 G M d}{2 M d\\,\\text{itemsize} + 2 G d\\,\\text{qo\\_itemsize}}$ ($\\approx 2G/\\text{itemsize}$).

    The $G$ query heads of a group each do $QK^\\top$ and $PV$ ($2Md$ FLOPs each) against the same K and V,
    read once ($2Md$ elements at `itemsize` bytes); q and o add $2Gd$ elements at `qo_itemsize` bytes. By
    default q and o have the cache's itemsize, but stay 16-bit (2 bytes) when the cache is quantised to
    8 bits. Accepts an array of group sizes.
    Taught in: notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
    """
    for name, x in (("head_dim", head_dim), ("M", M), ("itemsize", itemsize)):
        _positive_int(x, name)
    if qo_itemsize is None:
        qo_itemsize = max(itemsize, 2)  # an 8-bit cache keeps q and o in 16 bits
    _positive_int(qo_itemsize, "qo_itemsize")
    G = np.asarray(group)
    if not np.issubdtype(G.dtype, np.number) or np.any(G < 1):
        raise ValueError(f"group must be >= 1, got {group!r}")
    G = G.astype(np.float64)
    flops = 4.0 * G * M * head_dim
    nbytes = 2.0 * M * head_dim * itemsize + 2.0 * G * head_dim * qo_itemsize
    out = flops / nbytes
    return float(out) if out.ndim == 0 else out


def decode_schedule(
    M: int,
    *,
    batch: int = 1,
    heads: int = 8,
    splits: int = 1,
    N: int = 1,
    block_q: int = 128,
    block_k: int = 128,
    processors: int = PROCESSORS,
    per_processor: int = 2,
) -> dict:
    """How many slots a decoding step keeps busy: work items $= B \\cdot H \\cdot \\lceil N / B_r \\rceil \\cdot$ splits, busy $= \\min(\\text{working}, \\text{slots})$.

    A model, with its simplifications: `per_processor` work items resident on each processor at a time,
    slots $= P \\cdot$ `per_processor` (2, as flash-attn's launcher counts for its split-K/V kernel), each
    slot streaming at an even share of the bandwidth;
    the $\\lceil M/B_c \\rceil$ key blocks dealt out evenly into `splits` chunks (flash-attn cuts at key-block
    boundaries too; `lab.flash_decoding` cuts the keys themselves); a chunk with no key block (more splits
    than key blocks) is launched but idle, so `working` items, not `items`, occupy processors. `heads` counts the heads that each get their own work item: the query
    heads for a prompt, the K/V heads when a kernel packs a group's G query heads into the rows of one
    query block. Time, in *ticks* (one tick: one slot streams one key block): waves
    $\\lceil \\text{working} / \\text{slots} \\rceil$ times $\\lceil \\lceil M/B_c \\rceil / \\text{splits} \\rceil$;
    when splits > 1 each item also spends one tick writing its partial $(o_c, lse_c)$ (so waves $\\times$
    (chunk + 1)) and the merge adds one tick: a coarse charge for what a split costs (the write, a second
    launch), not a measured one; `fa2_ticks` is the same for `splits=1` (FlashAttention-2's schedule) and
    `speedup` their ratio. `steps` and `fa2_steps` are the same numbers under their earlier names.
    Taught in: notebooks/10_decoding.ipynb
    """
    for name, x in (
        ("M", M),
        ("batch", batch),
        ("heads", heads),
        ("splits", splits),
        ("N", N),
        ("block_q", block_q),
        ("block_k", block_k),
        ("processors", processors),
        ("per_processor", per_processor),
    ):
        _positive_int(x, name)
    slots = processors * per_processor  # work items resident at once
    items = batch * heads * math.ceil(N / block_q) * splits
    key_blocks = math.ceil(M / block_k)
    working = (
        batch * heads * math.ceil(N / block_q) * min(splits, key_blocks)
    )  # a split holds a key block
    busy = min(working, slots)
    waves = math.ceil(working / slots)
    chunk = math.ceil(key_blocks / splits)  # key blocks of the longest chunk
    ticks = (
        waves * (chunk + 1) + 1 if splits > 1 else waves * chunk
    )  # partials written, merge
    fa2_items = batch * heads * math.ceil(N / block_q)
    fa2_ticks = math.ceil(fa2_items / slots) * key_blocks
    return dict(
        M=M,
        splits=splits,
        items=items,
        working=working,
        busy=busy,
        busy_fraction=busy / slots,
        waves=waves,
        ticks=ticks,
        fa2_ticks=fa2_ticks,
        speedup=fa2_ticks / ticks,
        steps=ticks,  # the earlier names of ticks and fa2_ticks
        fa2_steps=fa2_ticks,
        processors=processors,
        slots=slots,
    )


def key_block_chunks(key_blocks: int, splits: int) -> list[tuple[int, int]]:
    """The key blocks `[a, b)` of each chunk that holds one: `key_blocks` dealt out evenly into `splits` chunks
    (sizes differ by at most 1), as `decode_schedule` deals them; a chunk left empty is dropped."""
    edges = [key_blocks * c // splits for c in range(splits + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def refill_ticks(
    M: int,
    *,
    batch: int = 1,
    heads: int = 8,
    splits: int = 1,
    block_k: int = 128,
    processors: int = PROCESSORS,
    per_processor: int = 2,
) -> int:
    """Ticks of one decoding step when a slot takes the next work item as soon as it frees, not at the wave's end.

    The same items as `decode_schedule` (the key blocks dealt out evenly into `splits` chunks, a chunk with no
    key block launched but idle, one tick per key block, one more for each item's partial when splits > 1, one
    for the merge), placed in order, each on the slot that frees first: how a GPU hands out thread blocks.
    `decode_schedule` instead lets every item of a wave wait for the wave's longest, so its ticks are never fewer.
    Taught in: notebooks/10_decoding.ipynb
    """
    import heapq

    for name, x in (
        ("M", M),
        ("batch", batch),
        ("heads", heads),
        ("splits", splits),
        ("block_k", block_k),
        ("processors", processors),
        ("per_processor", per_processor),
    ):
        _positive_int(x, name)
    chunks = [b - a for a, b in key_block_chunks(math.ceil(M / block_k), splits)]
    free = [0] * min(processors * per_processor, batch * heads * len(chunks))
    for _ in range(batch * heads):
        for n in chunks:
            start = heapq.heappop(free)  # the slot that frees first
            heapq.heappush(free, start + n + (splits > 1))  # its blocks, its partial
    return max(free) + (splits > 1)  # the merge waits for the last item


def schedule_table(
    M: int, splits=(1, 2, 4, 8, 16, 32, 64), *, batch: int = 1, heads: int = 8
) -> str:
    """`decode_schedule` for each count in `splits`, one row each: items, busy processors, waves, ticks.

    Taught in: notebooks/10_decoding.ipynb
    """
    rows = ["splits | items | busy | waves | ticks | ticks against FA2"]
    for n in splits:
        r = decode_schedule(M, batch=batch, heads=heads, splits=n)
        ratio = r["speedup"]
        versus = f"{ratio:.1f}× fewer" if ratio > 1 else f"{1 / ratio:.1f}× more"
        versus = "the same" if r["ticks"] == r["fa2_ticks"] else versus
        rows.append(
            f"{n:>6} | {r['items']:>5} | {r['busy']:>4} | {r['waves']:>5} | "
            f"{r['ticks']:>5} | {versus}"
        )
    return "\n".join(rows)


def heuristic_table(
    M: int,
    splits=(8, 16, 28, 29, 32, 33),
    *,
    batch: int = 1,
    heads: int = 8,
    head_dim: int = 128,
) -> str:
    """Beside the model, what flash-attn's `num_splits_heuristic` sees for each count: slots filled, eligibility, wave efficiency.

    Taught in: notebooks/10_decoding.ipynb
    """
    fa = flash_attn_num_splits(M, batch=batch, heads=heads, head_dim=head_dim)
    base, slots, nb = fa["items"] // fa["splits"], fa["slots"], fa["key_blocks"]
    rows = [
        f"splits | model ticks | flash-attn: items of {slots} slots | eligible | wave efficiency"
    ]
    for n in splits:
        model = decode_schedule(M, batch=batch, heads=heads, splits=n)["ticks"]
        ok = n == 1 or -(-nb // n) != -(-nb // (n - 1))
        waves = base * n / slots
        eff = waves / math.ceil(waves)
        rows.append(
            f"{n:>6} | {model:>11} | {base * n:>29} | {str(ok):>8} | {eff:>15.0%}"
        )
    return "\n".join(rows)


def num_splits_heuristic(
    batch_nheads_mblocks: int, num_SMs: int, num_n_blocks: int, max_splits: int
) -> int:
    """flash-attn's choice of splits: the fewest eligible splits whose wave efficiency $n / \\lceil n \\rceil$, $n = \\text{items} \\cdot s / \\text{SMs}$, reaches 85% of the best.

    A port of `num_splits_heuristic` in flash-attn's csrc/flash_attn/flash_api.cpp (v2.x): 1 split when the
    items already reach 80% of `num_SMs`; at most min(max_splits, num_SMs, num_n_blocks) splits; a count s
    is eligible when it gives each split fewer key blocks than s - 1 does (else a split would be empty).
    Taught in: notebooks/10_decoding.ipynb
    """
    for name, x in (
        ("batch_nheads_mblocks", batch_nheads_mblocks),
        ("num_SMs", num_SMs),
        ("num_n_blocks", num_n_blocks),
        ("max_splits", max_splits),
    ):
        _positive_int(x, name)
    if batch_nheads_mblocks >= 0.8 * num_SMs:
        return 1
    efficiency = _wave_efficiency(
        batch_nheads_mblocks, num_SMs, num_n_blocks, max_splits
    )
    best = max(efficiency.values())
    return next(s for s, e in efficiency.items() if e >= 0.85 * best)


def _wave_efficiency(items, slots, n_blocks, max_splits) -> dict:
    """{splits: n / ⌈n⌉, n = items · splits / slots} over the eligible counts <= min(max_splits, slots, n_blocks)."""
    out = {}
    for s in range(1, min(max_splits, slots, n_blocks) + 1):
        if s == 1 or -(-n_blocks // s) != -(
            -n_blocks // (s - 1)
        ):  # else a split is empty
            n_waves = items * s / slots
            out[s] = n_waves / math.ceil(n_waves)
    return out


def flash_attn_num_splits(
    M: int,
    *,
    batch: int = 1,
    heads: int = 8,
    N: int = 1,
    head_dim: int = 128,
    processors: int = PROCESSORS,
) -> dict:
    """The splits flash-attn's decoding launch picks (`set_params_splitkv`): `num_splits_heuristic` of $B \\cdot H \\cdot \\lceil N/64 \\rceil$ items on 2 × SMs slots.

    As flash-attn's csrc/flash_attn/flash_api.cpp calls it: key blocks of 256 keys for d <= 64, 128 for
    d <= 128, else 64; query blocks of 64 rows (`N` rows per head: G·N when a group is packed, as
    flash-attn does for one new token); twice the SMs, "to hard-code the fact that we're using 128 threads
    per block" (two items resident per SM); at most 128 splits. Returns the splits, the slots and the
    wave efficiency of that choice.
    Taught in: notebooks/10_decoding.ipynb
    """
    for name, x in (
        ("M", M),
        ("batch", batch),
        ("heads", heads),
        ("N", N),
        ("head_dim", head_dim),
        ("processors", processors),
    ):
        _positive_int(x, name)
    block_n = 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64
    items = batch * heads * math.ceil(N / 64)
    slots = 2 * processors
    n_blocks = math.ceil(M / block_n)
    splits = num_splits_heuristic(items, slots, n_blocks, 128)
    eff = _wave_efficiency(items, slots, n_blocks, 128)
    n_waves = items * splits / slots
    return dict(
        splits=splits,
        items=items * splits,
        slots=slots,
        key_blocks=n_blocks,
        efficiency=n_waves / math.ceil(n_waves),
        best_efficiency=max(eff.values()),
        most_efficient_splits=max(eff, key=eff.get),
    )


def latent_decode_intensity(
    q_heads: int = 128,
    latent_dim: int = 512,
    rope_dim: int = 64,
    M: int = 4096,
    itemsize: int = 2,
    N: int = 1,
) -> float:
    """FLOPs per byte of one MLA decoding step of one layer: $\\frac{2 h N M (d_k + d_v)}{(M d_k + h N (d_k + d_v))\\,\\text{itemsize}}$, $d_k = d_c + d_R$, $d_v = d_c$.

    With the up-projections absorbed into q and o, MLA decodes as multi-query attention: all `q_heads`
    query heads (times `N` new tokens) score one shared key of $d_c + d_R$ elements per cached token and
    average one shared value, the first $d_c$ of them, read once. About $2 h N$ FLOP/B in 16 bits, the
    ratio FlashMLA's deep-dive derives (https://github.com/deepseek-ai/FlashMLA/blob/main/docs/20250422-new-kernel-deep-dive.md).
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    for name, x in (
        ("q_heads", q_heads),
        ("latent_dim", latent_dim),
        ("rope_dim", rope_dim),
        ("M", M),
        ("itemsize", itemsize),
        ("N", N),
    ):
        _positive_int(x, name)
    d_k, d_v, rows = latent_dim + rope_dim, latent_dim, q_heads * N
    flops = 2.0 * rows * M * (d_k + d_v)  # QK^T and PV of every query row
    nbytes = (M * d_k + rows * (d_k + d_v)) * itemsize  # the latent once; q and o
    return flops / nbytes


def _chunk_part(q, k_c, v_c, scale):
    """(o_c, lse_c) of one chunk of keys, torch, all query rows of a K/V head at once."""
    s = (q @ k_c.transpose(-1, -2)) * scale  # (B, Hkv, G·N, Mc)
    lse_c = torch.logsumexp(s, dim=-1)  # (B, Hkv, G·N)
    o_c = torch.softmax(s, dim=-1) @ v_c  # (B, Hkv, G·N, dv)
    return o_c, lse_c


def decode_torch(q, k, v, *, splits: int = 1, workers: int = 1, scale=None):
    """Flash-decoding in torch: keys cut into `splits` chunks, each chunk's $(o_c, lse_c)$ on one of `workers` threads, merged by `lab.merge_outputs`; returns `(o, lse)`.

    The G = Hq / Hkv query heads of a K/V head are packed as rows of one (G·N, d) block, so each chunk
    of K and V is read once for the whole group. Non-causal (the new token sees the whole cache).
    Taught in: notebooks/10_decoding.ipynb
    """
    check_float_tensors(q=q, k=k, v=v)
    if q.dim() != 4:
        raise ValueError(f"q must have shape (B, Hq, N, d), got {tuple(q.shape)}")
    group = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    splits, workers = _positive_int(splits, "splits"), _positive_int(workers, "workers")
    scale = check_scale(scale, q.shape[-1])
    B, Hq, N, d = q.shape
    Hkv, M = k.shape[1], k.shape[2]
    qg = q.reshape(B, Hkv, group * N, d)  # (B, Hkv, G·N, d): a group's rows together
    bounds = [(j0, j1) for j0, j1 in chunk_bounds(M, splits) if j1 > j0]
    if not bounds:
        raise ValueError("k must hold at least one key")
    if workers == 1:
        parts = [
            _chunk_part(qg, k[:, :, j0:j1], v[:, :, j0:j1], scale) for j0, j1 in bounds
        ]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(
                pool.map(
                    lambda b: _chunk_part(
                        qg, k[:, :, b[0] : b[1]], v[:, :, b[0] : b[1]], scale
                    ),
                    bounds,
                )
            )
    if len(parts) == 1:
        o, lse = parts[0]
    else:
        o, lse = merge_outputs(
            [p[0].cpu().numpy() for p in parts], [p[1].cpu().numpy() for p in parts]
        )
        o, lse = (
            torch.from_numpy(o).to(q.device),
            torch.from_numpy(lse).to(q.device),
        )  # the merge reads splits rows only
    return o.reshape(B, Hq, N, v.shape[-1]).to(q.dtype), lse.reshape(B, Hq, N)


def time_decoding(
    M: int,
    *,
    runs=((1, 1), (2, 2)),
    batch: int = 1,
    q_heads: int = 8,
    kv_heads: int = 8,
    d: int = 64,
    dtype=torch.float32,
    rounds: int = 3,
    min_run_time: float = 0.1,
    seed: int = 0,
) -> list[dict]:
    """Median seconds of one decoding step (`decode_torch`) for each `(splits, workers)` in `runs`, torch intra-op threads set to 1, timed in alternating rounds (`lab.measure.time_interleaved`).

    Returns one dict per run: splits, workers, seconds, the K/V bytes read per second, and the torch
    threads it ran on (1), the count a ceiling from `lab.measure_ceilings` must be measured on to compare.
    Taught in: notebooks/10_decoding.ipynb, notebooks/10_gqa_and_paging.ipynb
    """
    from .measure import time_interleaved

    for name, x in (
        ("M", M),
        ("batch", batch),
        ("q_heads", q_heads),
        ("kv_heads", kv_heads),
        ("d", d),
    ):
        _positive_int(x, name)
    if q_heads % kv_heads:
        raise ValueError(
            f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})"
        )
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be > 0, got {min_run_time}")
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, 1, d, generator=g, dtype=dtype)  # (B, Hq, 1, d)
    k = torch.randn(batch, kv_heads, M, d, generator=g, dtype=dtype)  # (B, Hkv, M, d)
    v = torch.randn(batch, kv_heads, M, d, generator=g, dtype=dtype)  # (B, Hkv, M, d)
    kv_bytes = k.nbytes + v.nbytes
    fns = {
        (s, w): (lambda s=s, w=w: decode_torch(q, k, v, splits=s, workers=w))
        for s, w in runs
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # parallelism comes from the workers only
    try:
        timed_on = torch.get_num_threads()  # the count a roofline ceiling must share
        t = time_interleaved(fns, rounds=rounds, min_run_time=min_run_time)
    finally:
        torch.set_num_threads(threads)
    return [
        dict(
            splits=s,
            workers=w,
            seconds=t[(s, w)],
            gb_per_s=kv_bytes / t[(s, w)] / 1e9,
            threads=timed_on,
        )
        for s, w in runs
    ]


def stream_bandwidth(
    threads=(1, None), *, mbytes: int | None = None, rounds: int = 5
) -> dict:
    """Bytes per second of a large streaming read, $\text{bytes} / t$ of one `x.sum()`, at each torch thread count in `threads` (None: every core).

    The tensor holds `mbytes` MiB of float32 (default `lab.copy_mib()`: twice the last-level cache, so
    the read comes from memory, not the cache); the counts are timed in alternating rounds
    (`lab.measure.time_interleaved`), torch's own count restored. A decoding step is such a read: its
    time is the cache's bytes over this rate. Returns {threads: bytes per second}.
    Taught in: notebooks/10_decoding.ipynb
    """
    import os

    from .measure.machine import copy_mib
    from .measure.pitfalls import at_threads
    from .measure.timing import time_interleaved

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = cores or os.cpu_count() or 1
    counts = [cores if n is None else _positive_int(n, "threads") for n in threads]
    if not counts:
        raise ValueError(
            "threads must hold at least one thread count (None: every core)"
        )
    mbytes = _positive_int(mbytes or copy_mib(), "mbytes")
    _positive_int(rounds, "rounds")
    x = torch.ones(mbytes * 2**20 // 4)  # written once: no lazily mapped pages
    fns = at_threads({"read": x.sum}, sorted(set(counts)))
    t = time_interleaved(fns, rounds=rounds, min_run_time=0.1)
    by = {int(name.split(", ")[1].split()[0]): sec for name, sec in t.items()}
    return {n: x.nbytes / by[n] for n in counts}


def cpu_speedup_model(splits: int, workers: int) -> int:
    """Speed-up of a decoding step over one chunk on one worker when each busy core streams its own share: $\\min(\\text{splits}, \\text{workers})$.

    One chunk keeps one core busy however many workers wait; `splits` chunks on `workers` threads keep
    $\\min(\\text{splits}, \\text{workers})$ busy. The model assumes that many free cores, and a memory system
    that does not saturate before they all stream: a ceiling, not a prediction.
    Taught in: notebooks/10_decoding.ipynb
    """
    return min(_positive_int(splits, "splits"), _positive_int(workers, "workers"))


def decode_timing_table(runs) -> str:
    """`time_decoding`'s runs, one row each: time, K/V bytes per second, speed-up over the first run, the model's.

    Times and measured speed-ups are printed between ‹ and › (`lab.measured`): they vary by machine and
    load. The model's column (`cpu_speedup_model`) is exact.
    Taught in: notebooks/10_decoding.ipynb
    """
    from .notebook import measured

    runs = list(runs)
    if not runs:
        raise ValueError("runs must hold at least one run of time_decoding")
    base = runs[0]
    model0 = cpu_speedup_model(base["splits"], base["workers"])
    first = f"({base['splits']}, {base['workers']})"
    rows = [
        f"splits | workers | ms per step |  K/V read at | speed-up over {first} | model"
    ]
    for r in runs:
        ms = measured(r["seconds"] * 1e3, "6.1f")
        bw = measured(r["gb_per_s"], "5.1f", "GB/s")
        up = measured(base["seconds"] / r["seconds"], "4.2f") + "×"
        model = cpu_speedup_model(r["splits"], r["workers"]) / model0
        rows.append(
            f"{r['splits']:>6} | {r['workers']:>7} | {ms:>11} | {bw:>12} | "
            f"{up:>{15 + len(first)}} | {model:.2f}×"
        )
    return "\n".join(rows)


# ------------------------------------------------------------------------------------ paged K/V cache


class PagedCache(NamedTuple):
    """A K/V cache in pages: `pages_k (P, Hkv, page_size, d)`, `pages_v (P, Hkv, page_size, dv)`, `block_table (B, T)`
    (row b: the physical page of each logical block of sequence b, -1 past its last block), `lengths (B,)` tokens."""

    pages_k: np.ndarray
    pages_v: np.ndarray
    block_table: np.ndarray
    lengths: np.ndarray
    page_size: int


def _sequences(x, name):
    """A list of per-sequence arrays (Hkv, M_b, d) from a list of 3-D arrays or one 4-D array (B, Hkv, M, d)."""
    if isinstance(x, np.ndarray) or torch.is_tensor(x):
        x = as_float_array(np.asarray(x), name)
        if x.ndim != 4:
            raise ValueError(
                f"{name} must be (B, Hkv, M, d) or a list of (Hkv, M_b, d) arrays, got shape {x.shape}"
            )
        return list(x)
    seqs = [as_float_array(a, f"{name}[{b}]") for b, a in enumerate(x)]
    if not seqs:
        raise ValueError(f"{name} must hold at least one sequence")
    for b, a in enumerate(seqs):
        if (
            a.ndim != 3
            or a.shape[:1] + a.shape[2:] != seqs[0].shape[:1] + seqs[0].shape[2:]
        ):
            raise ValueError(
                f"{name}[{b}] must be (Hkv, M_b, d) like {name}[0] {seqs[0].shape}, got {a.shape}"
            )
    return seqs


def paged_kv(
    k, v, page_size: int, seed: int = 0, *, spare_pages: int = 0
) -> PagedCache:
    """Store each sequence's K and V in pages of `page_size` tokens, scattered over a shared pool; return a `PagedCache`.

    `k`, `v`: lists of per-sequence arrays `(Hkv, M_b, d)` and `(Hkv, M_b, dv)` (lengths may differ), or 4-D arrays
    `(B, Hkv, M, ·)`. Sequence b takes $\\lceil M_b / \\text{page\\_size} \\rceil$ pages; the pool holds those plus
    `spare_pages` free ones, handed out in a random order (`seed`), as an allocator serving many requests would. Slots
    past a sequence's length hold stale values (random numbers here), as a reused page does: a reader must mask them.
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    page_size = check_block(page_size, "page_size")
    if (
        isinstance(spare_pages, bool)
        or not isinstance(spare_pages, (int, np.integer))
        or spare_pages < 0
    ):
        raise ValueError(f"spare_pages must be an integer >= 0, got {spare_pages!r}")
    ks, vs = _sequences(k, "k"), _sequences(v, "v")
    if len(ks) != len(vs) or any(a.shape[:2] != b.shape[:2] for a, b in zip(ks, vs)):
        raise ValueError(
            f"k and v must hold the same sequences, got {[a.shape for a in ks]} and {[b.shape for b in vs]}"
        )
    for b, a in enumerate(ks):
        check_finite(a, f"k[{b}]")
        if a.shape[1] < 1:
            raise ValueError(
                f"k[{b}] must hold at least one token, got shape {a.shape}"
            )
    Hkv, d, dv = ks[0].shape[0], ks[0].shape[2], vs[0].shape[2]
    lengths = np.array([a.shape[1] for a in ks], np.int64)
    blocks = -(-lengths // page_size)  # pages per sequence
    P = int(blocks.sum()) + spare_pages
    rng = np.random.default_rng(seed)
    dtype = np.result_type(*ks, *vs)
    pages_k = rng.standard_normal((P, Hkv, page_size, d)).astype(
        dtype
    )  # stale contents everywhere at first
    pages_v = rng.standard_normal((P, Hkv, page_size, dv)).astype(dtype)
    free = rng.permutation(P)  # the allocator's order of free pages
    table = np.full((len(ks), int(blocks.max())), -1, np.int64)
    nxt = 0
    for b, (kb, vb) in enumerate(zip(ks, vs)):
        for i in range(blocks[b]):  # logical block i of sequence b
            page = int(free[nxt])
            nxt += 1
            table[b, i] = page
            t0, t1 = i * page_size, min((i + 1) * page_size, lengths[b])
            pages_k[page, :, : t1 - t0] = kb[:, t0:t1]  # (Hkv, ≤ page_size, d)
            pages_v[page, :, : t1 - t0] = vb[:, t0:t1]
    return PagedCache(pages_k, pages_v, table, lengths, page_size)


def _check_table(pages, block_table, lengths):
    pages = as_float_array(pages, "pages")
    if pages.ndim != 4:
        raise ValueError(
            f"pages must be (P, Hkv, page_size, d), got shape {pages.shape}"
        )
    table = np.asarray(block_table)
    if not np.issubdtype(table.dtype, np.integer) or table.ndim != 2:
        raise ValueError(
            f"block_table must be a 2-D integer array (B, T), got {table.dtype} {table.shape}"
        )
    lengths = np.asarray(lengths)
    if not np.issubdtype(lengths.dtype, np.integer) or lengths.shape != table.shape[:1]:
        raise ValueError(
            f"lengths must be integers of shape ({table.shape[0]},), got {lengths.dtype} {lengths.shape}"
        )
    size = pages.shape[2]
    for b, L in enumerate(lengths):
        n = -(-int(L) // size)
        if L < 1 or n > table.shape[1]:
            raise ValueError(
                f"lengths[{b}] = {L} needs {n} blocks of {size}; block_table has {table.shape[1]} per row"
            )
        row = table[b, :n]
        if (row < 0).any() or (row >= pages.shape[0]).any():
            raise ValueError(
                f"block_table[{b}, :{n}] = {row.tolist()} must index the {pages.shape[0]} pages"
            )
    return pages, table, lengths


def gather_pages(pages, block_row, length: int) -> np.ndarray:
    """The contiguous `(Hkv, length, d)` keys (or values) of one sequence, read through its row of the block table.

    Logical block i is physical page `block_row[i]`; the last block holds `length - (n - 1) * page_size` tokens.
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    pages, table, lengths = _check_table(
        pages, np.asarray(block_row)[None], np.array([length])
    )
    n = -(-int(length) // pages.shape[2])
    return np.concatenate([pages[table[0, i]] for i in range(n)], axis=1)[
        :, :length
    ]  # (Hkv, length, d)


def decode_paged(q, pages_k, pages_v, block_table, lengths, *, scale=None):
    """Decoding through a block table: each sequence's queries against its keys, read page by page; returns `(o, lse)`.

    `q (B, Hq, N, d)`: the N new tokens of each sequence (each sees all its cached keys); `pages_k (P, Hkv, S, d)`,
    `pages_v (P, Hkv, S, dv)`, `block_table (B, T)`, `lengths (B,)` as `paged_kv` returns them. For each logical block
    i the kernel reads page `block_table[b, i]`, masks the slots past `lengths[b]`, and updates the running
    $(m, l, acc)$: $m' = \\max(m, \\max_j s_j)$, $\\alpha = e^{m - m'}$, $l' = \\alpha l + \\sum_j e^{s_j - m'}$,
    $acc' = \\alpha\\,acc + \\sum_j e^{s_j - m'} v_j$. Output `o (B, Hq, N, dv)`, `lse (B, Hq, N)`, in the dtype of the inputs.
    Taught in: notebooks/10_gqa_and_paging.ipynb
    """
    q = as_float_array(q, "q")
    pages_k, table, lengths = _check_table(pages_k, block_table, lengths)
    pages_v = as_float_array(pages_v, "pages_v")
    if pages_v.ndim != 4 or pages_v.shape[:3] != pages_k.shape[:3]:
        raise ValueError(
            f"pages_v must be (P, Hkv, page_size, dv) like pages_k {pages_k.shape}, got {pages_v.shape}"
        )
    if q.ndim != 4 or q.shape[0] != table.shape[0] or q.shape[-1] != pages_k.shape[-1]:
        raise ValueError(
            f"q must be (B, Hq, N, d) with B = {table.shape[0]}, d = {pages_k.shape[-1]}, got {q.shape}"
        )
    B, Hq, N, d = q.shape
    Hkv, S, dv = pages_k.shape[1], pages_k.shape[2], pages_v.shape[3]
    if Hq % Hkv:
        raise ValueError(
            f"the query heads of q ({Hq}) must be a multiple of the K/V heads of the pages ({Hkv})"
        )
    G, scale = Hq // Hkv, check_scale(scale, d)
    dt = np.result_type(q, pages_k, pages_v, np.float32)
    o, lse = np.zeros((B, Hq, N, dv), dt), np.zeros((B, Hq, N), dt)
    for b in range(B):
        qg = q[b].reshape(Hkv, G * N, d).astype(dt)  # a group's query rows together
        m = np.full((Hkv, G * N), -np.inf, dt)
        l = np.zeros((Hkv, G * N), dt)
        acc = np.zeros((Hkv, G * N, dv), dt)
        for i in range(-(-int(lengths[b]) // S)):  # logical blocks of sequence b
            page = table[b, i]  # its physical page
            valid = min(S, int(lengths[b]) - i * S)  # the last page may be partial
            k_i, v_i = (
                pages_k[page, :, :valid],
                pages_v[page, :, :valid],
            )  # (Hkv, valid, d), (Hkv, valid, dv)
            s = scale * qg @ np.swapaxes(k_i, -1, -2)  # (Hkv, G·N, valid)
            m_new = np.maximum(m, s.max(axis=-1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[..., None])
            l = alpha * l + p.sum(axis=-1)
            acc = alpha[..., None] * acc + p @ v_i
            m = m_new
        o[b] = (acc / l[..., None]).reshape(Hq, N, dv)
        lse[b] = (m + np.log(l)).reshape(Hq, N)
    out_dt = np.result_type(q, pages_k, pages_v)
    return o.astype(out_dt), lse
