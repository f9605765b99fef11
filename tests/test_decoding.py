"""Decoding and grouped-query attention: cache bytes, intensity, the processor model, torch flash-decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lab
from lab.decoding import (
    MODEL_CONFIGS,
    attention_layout,
    decode_intensity,
    decode_schedule,
    decode_torch,
    kv_cache_bytes_per_token,
    kv_cache_table,
    time_decoding,
)


def test_model_configs_have_sources_and_divide():
    assert len(MODEL_CONFIGS) >= 5
    for name, c in MODEL_CONFIGS.items():
        assert c["q_heads"] % c["kv_heads"] == 0, name
        assert "arXiv" in c["source"] or "config.json" in c["source"]


def test_kv_cache_bytes_known_values():
    # Llama 2 7B in fp16: 2 (K and V) × 32 layers × 32 heads × 128 × 2 bytes = 512 KiB per token
    assert kv_cache_bytes_per_token(32, 32, 128, 2) == 512 * 1024
    rows = {r["model"]: r for r in kv_cache_table()}
    assert rows["Llama 2 7B"]["layout"] == "MHA" and rows["Llama 2 7B"]["saving"] == 1
    assert rows["Llama 2 70B"]["layout"] == "GQA" and rows["Llama 2 70B"]["saving"] == 8
    assert (
        rows["Falcon-7B"]["layout"] == "MQA"
        and rows["Falcon-7B"]["bytes_per_token"] == 2 * 32 * 64 * 2
    )
    assert (
        rows["Mistral 7B"]["cache_bytes"]
        == rows["Mistral 7B"]["bytes_per_token"] * 8192
    )
    assert (
        kv_cache_table(itemsize=1)[0]["bytes_per_token"] * 2
        == kv_cache_table()[0]["bytes_per_token"]
    )


def test_attention_layout():
    assert attention_layout(32, 32) == "MHA"
    assert attention_layout(32, 8) == "GQA"
    assert attention_layout(71, 1) == "MQA"
    assert attention_layout(1, 1) == "MHA"
    with pytest.raises(ValueError, match="multiple"):
        attention_layout(6, 4)


@given(
    st.integers(1, 128),
    st.sampled_from([64, 128]),
    st.integers(1, 2**16),
    st.sampled_from([1, 2, 4]),
)
def test_decode_intensity_grows_with_group(G, d, M, itemsize):
    a, b = decode_intensity(G, d, M, itemsize), decode_intensity(G + 1, d, M, itemsize)
    assert b > a
    assert a <= 2 * G / itemsize  # never above the q/o-free bound
    assert np.isclose(
        decode_intensity(G, d, 2**30, itemsize), 2 * G / itemsize, rtol=1e-6
    )


def test_decode_intensity_array_and_errors():
    out = decode_intensity(np.array([1, 2, 4]), 128, 4096, 2)
    assert out.shape == (3,) and np.all(np.diff(out) > 0)
    with pytest.raises(ValueError, match="group"):
        decode_intensity(0)
    with pytest.raises(ValueError, match="M"):
        decode_intensity(2, M=0)


def test_decode_intensity_of_an_8_bit_cache_keeps_q_and_o_16_bit():
    G, d, M = 8, 128, 4096
    want = 4 * G * M * d / (2 * M * d * 1 + 2 * G * d * 2)  # K, V at 1 byte; q, o at 2
    assert decode_intensity(G, d, M, 1) == pytest.approx(want, rel=1e-12)
    assert decode_intensity(G, d, M, 1, qo_itemsize=2) == decode_intensity(G, d, M, 1)
    all_8 = 4 * G * M * d / ((2 * M * d + 2 * G * d) * 1)
    assert decode_intensity(G, d, M, 1, qo_itemsize=1) == pytest.approx(all_8)
    assert decode_intensity(G, d, M, 1) < all_8
    # 16 and 32 bits: q and o as the cache
    for size in (2, 4):
        same = 4 * G * M * d / ((2 * M * d + 2 * G * d) * size)
        assert decode_intensity(G, d, M, size) == pytest.approx(same, rel=1e-12)
    with pytest.raises(ValueError, match="qo_itemsize"):
        decode_intensity(G, d, M, 1, qo_itemsize=0)


@given(st.integers(1, 2**17), st.integers(1, 8), st.integers(1, 64), st.integers(1, 64))
def test_decode_schedule_invariants(M, batch, heads, splits):
    s = decode_schedule(M, batch=batch, heads=heads, splits=splits)
    assert s["items"] == batch * heads * splits
    blocks = -(-M // 128)
    assert s["working"] == batch * heads * min(splits, blocks)  # no key block: it idles
    assert (
        s["busy"] == min(s["working"], s["slots"]) and s["slots"] == 2 * s["processors"]
    )
    assert 0 < s["busy_fraction"] <= 1
    one = decode_schedule(M, batch=batch, heads=heads, splits=1)
    assert one["steps"] == one["fa2_steps"] == s["fa2_steps"]


def test_decode_schedule_one_query_leaves_processors_idle():
    fa2 = decode_schedule(32768, batch=1, heads=8, splits=1)
    assert fa2["busy"] == 8 and fa2["busy_fraction"] < 0.1
    fd = decode_schedule(32768, batch=1, heads=8, splits=16)
    assert fd["busy"] == 128 and fd["speedup"] > 10
    # prefill: many query blocks already fill the machine
    assert decode_schedule(32768, heads=8, N=32768)["busy"] == 264  # every slot
    with pytest.raises(ValueError, match="splits"):
        decode_schedule(10, splits=0)
    with pytest.raises(TypeError, match="heads"):
        decode_schedule(10, heads=2.5)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 60),
    st.integers(1, 9),
    st.integers(1, 3),
    st.integers(0, 2**31),
)
def test_decode_torch_matches_reference(G, M, splits, workers, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2 * G, 1, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, M, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, M, 5, generator=g, dtype=torch.float64)
    o, lse = decode_torch(q, k, v, splits=splits, workers=workers)
    o_ref, lse_ref = lab.attention_reference(q.numpy(), k.numpy(), v.numpy())
    assert o.shape == q.shape[:-1] + (5,) and lse.shape == q.shape[:-1]
    assert np.allclose(o.numpy(), o_ref, atol=1e-12) and np.allclose(
        lse.numpy(), lse_ref, atol=1e-12
    )


def test_decode_torch_errors_and_no_input_change():
    q, k, v = (
        torch.randn(1, 4, 1, 8),
        torch.randn(1, 2, 16, 8),
        torch.randn(1, 2, 16, 8),
    )
    copies = [t.clone() for t in (q, k, v)]
    decode_torch(q, k, v, splits=3, workers=2)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), copies))
    with pytest.raises(ValueError, match="multiple"):
        decode_torch(torch.randn(1, 3, 1, 8), k, v)
    with pytest.raises(ValueError, match="q must"):
        decode_torch(q[0], k[0], v[0])
    with pytest.raises(TypeError, match="q"):
        decode_torch(q.numpy(), k, v)
    with pytest.raises(ValueError, match="splits"):
        decode_torch(q, k, v, splits=0)
    with pytest.raises(ValueError, match="at least one key"):
        decode_torch(q, k[:, :, :0], v[:, :, :0])


def test_time_decoding_shape_of_result():
    threads = torch.get_num_threads()
    runs = time_decoding(256, runs=((1, 1), (2, 2)), rounds=1, min_run_time=0.01)
    assert torch.get_num_threads() == threads
    assert [(r["splits"], r["workers"]) for r in runs] == [(1, 1), (2, 2)]
    assert all(r["seconds"] > 0 and r["gb_per_s"] > 0 for r in runs)
    assert all(r["threads"] == 1 for r in runs)  # whatever the caller's count
    with pytest.raises(ValueError, match="multiple"):
        time_decoding(16, q_heads=3, kv_heads=2)


def test_cpu_speedup_model_counts_one_busy_core_per_chunk_up_to_the_workers():
    from lab.decoding import cpu_speedup_model

    runs = ((1, 1), (1, 2), (2, 1), (2, 2), (8, 2))
    assert [cpu_speedup_model(s, w) for s, w in runs] == [1, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="splits"):
        cpu_speedup_model(0, 1)
    with pytest.raises(ValueError, match="workers"):
        cpu_speedup_model(1, 0)


def test_decode_timing_table_masks_what_was_measured_and_not_the_model():
    import re

    from lab.decoding import decode_timing_table

    runs = [
        dict(splits=1, workers=1, seconds=0.02, gb_per_s=10.0),
        dict(splits=1, workers=2, seconds=0.04, gb_per_s=5.0),
        dict(splits=2, workers=2, seconds=0.01, gb_per_s=20.0),
    ]
    lines = decode_timing_table(runs).splitlines()
    assert len(lines) == 4 and all(len(ln) <= 100 for ln in lines)
    assert "‹0.50›×" in lines[2] and lines[2].endswith("| 1.00×")
    assert "‹2.00›×" in lines[3] and lines[3].endswith("| 2.00×")
    masked = [re.sub("‹[^›]*›", "‹…›", ln) for ln in lines]
    assert len({len(ln) for ln in masked[1:]}) == 1  # the same width on every machine
    with pytest.raises(ValueError, match="runs"):
        decode_timing_table([])


def test_decoding_figures_return_their_numbers():
    import matplotlib.pyplot as plt

    from lab.figures.decoding import (
        draw_decode_schedule,
        draw_decode_timings,
        draw_gqa_intensity,
        draw_kv_cache,
    )

    kv = draw_kv_cache()
    assert kv["Llama 2 7B"] == 512 * 1024 and len(kv) == len(MODEL_CONFIGS)
    s = draw_decode_schedule(M=4096, splits=4)
    assert s["fa2"]["busy"] == 8 and s["flash_decoding"]["busy"] == 32
    g = draw_gqa_intensity(group=8)
    assert g["kv_heads"] == 4 and g["kib_per_token"] == 64
    with pytest.raises(ValueError, match="group"):
        draw_gqa_intensity(group=3)
    t = draw_decode_timings([dict(splits=1, workers=1, seconds=0.01)])
    assert list(t.values()) == [pytest.approx(10.0)]
    plt.close("all")


def test_decode_splits_slider_updates_result():
    w = lab.widgets.decode_splits()
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["flash_decoding"]["splits"] == 8
    controls["splits"].value = 16
    assert w.result["flash_decoding"]["busy"] == 128
    controls["cache M"].value = 2**12
    assert w.result["fa2"]["steps"] == 32 and w.result["flash_decoding"]["M"] == 4096


def test_gqa_group_slider_updates_result():
    w = lab.widgets.gqa_group()
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["group"] == 4
    controls["G"].value = 32
    assert w.result["kv_heads"] == 1 and w.result["kib_per_token"] == 16
    before = w.result["intensity"]
    controls[
        "bytes/element"
    ].value = 1  # an 8-bit cache: half the bytes, twice the FLOPs per byte
    assert w.result["intensity"] > 1.9 * before and w.result["kib_per_token"] == 8


# ------------------------------------------------------------------------------------ paged K/V cache


def _sequences(lengths, Hkv=2, d=8, dv=4, seed=0):
    rng = np.random.default_rng(seed)
    return (
        [rng.standard_normal((Hkv, L, d)) for L in lengths],
        [rng.standard_normal((Hkv, L, dv)) for L in lengths],
    )


def test_paged_kv_table_and_pages():
    lengths = [45, 16, 1, 33]
    k, v = _sequences(lengths)
    c = lab.paged_kv(k, v, page_size=16, seed=3, spare_pages=2)
    assert c.block_table.shape == (4, 3) and c.pages_k.shape == (
        3 + 1 + 1 + 3 + 2,
        2,
        16,
        8,
    )
    assert c.lengths.tolist() == lengths and c.page_size == 16
    used = c.block_table[c.block_table >= 0]
    assert len(set(used.tolist())) == used.size == 8  # every page owned by one block
    assert (c.block_table[1, 1:] == -1).all() and (c.block_table[2, 1:] == -1).all()
    assert not (
        np.diff(c.block_table[0]) == 1
    ).all()  # scattered, not laid out in order
    for b, L in enumerate(lengths):
        for name, pages, x in (("k", c.pages_k, k), ("v", c.pages_v, v)):
            got = lab.gather_pages(pages, c.block_table[b], L)
            assert np.array_equal(got, x[b]), (name, b)


@pytest.mark.parametrize("page_size", [1, 5, 16, 64])
def test_decode_paged_equals_contiguous_decoding(page_size):
    lengths = [45, 16, 1, 33]  # partial last pages, one-token sequence
    k, v = _sequences(lengths, Hkv=2)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, 6, 2, 8))  # (B, Hq, N, d): 3 query heads per K/V head
    c = lab.paged_kv(k, v, page_size=page_size, seed=2, spare_pages=3)
    o, lse = lab.decode_paged(q, c.pages_k, c.pages_v, c.block_table, c.lengths)
    assert o.shape == (4, 6, 2, 4) and lse.shape == (4, 6, 2)
    for b in range(4):
        o_ref, lse_ref = lab.attention_reference(q[b], k[b], v[b])
        np.testing.assert_allclose(o[b], o_ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(lse[b], lse_ref, rtol=1e-10, atol=1e-12)


def test_decode_paged_reads_no_stale_slot_and_keeps_dtype():
    k, v = _sequences([7], Hkv=1)
    c = lab.paged_kv(k, v, page_size=4)
    pk = c.pages_k.copy()
    pk[c.block_table[0, 1], :, 3:] = 1e6  # the unused slot of the last page
    q = np.random.default_rng(0).standard_normal((1, 1, 1, 8))
    a = lab.decode_paged(q, c.pages_k, c.pages_v, c.block_table, c.lengths)[0]
    b = lab.decode_paged(q, pk, c.pages_v, c.block_table, c.lengths)[0]
    assert np.array_equal(a, b)
    k32 = [x.astype(np.float32) for x in k]
    v32 = [x.astype(np.float32) for x in v]
    c32 = lab.paged_kv(k32, v32, page_size=4)
    o32, _ = lab.decode_paged(
        q.astype(np.float32), c32.pages_k, c32.pages_v, c32.block_table, c32.lengths
    )
    assert o32.dtype == np.float32
    np.testing.assert_allclose(
        o32[0], lab.attention_reference(q[0], k[0], v[0])[0], rtol=1e-5, atol=1e-6
    )


def test_paged_errors():
    k, v = _sequences([5, 3])
    with pytest.raises(ValueError, match="page_size"):
        lab.paged_kv(k, v, page_size=0)
    with pytest.raises(ValueError, match="same sequences"):
        lab.paged_kv(k, v[:1], page_size=2)
    c = lab.paged_kv(k, v, page_size=2)
    q = np.zeros((2, 2, 1, 8))
    with pytest.raises(ValueError, match="block_table"):
        lab.decode_paged(q, c.pages_k, c.pages_v, c.block_table, np.array([9, 3]))
    bad = c.block_table.copy()
    bad[0, 0] = 99
    with pytest.raises(ValueError, match="index"):
        lab.decode_paged(q, c.pages_k, c.pages_v, bad, c.lengths)
    with pytest.raises(ValueError, match="multiple"):
        lab.decode_paged(
            np.zeros((2, 3, 1, 8)), c.pages_k, c.pages_v, c.block_table, c.lengths
        )
    with pytest.raises(ValueError, match="integer"):
        lab.decode_paged(
            q, c.pages_k, c.pages_v, c.block_table.astype(float), c.lengths
        )


def test_hardware_figures_come_from_the_table():
    assert lab.PROCESSORS == lab.CHIPS["H100"]["sms"] == 132
    assert lab.H100_RIDGE == lab.ridge_point("H100")


def test_decode_schedule_does_not_count_empty_splits_busy():
    s = lab.decode_schedule(
        384, heads=8, splits=16
    )  # 16 chunks of 3 key blocks: 13 hold none
    assert s["items"] == 128 and s["working"] == 24 and s["busy"] == 24
    partial = lab.decode_schedule(
        3, heads=8, splits=16
    )  # 3 keys: one partial block, in one chunk
    assert partial["working"] == 8 and partial["steps"] == 1 * (1 + 1) + 1


def test_num_splits_heuristic_is_flash_attns():
    # the example in flash-attn's comment: 48 items on 108 SMs take 2 splits (efficiency 0.89, not 0.67)
    assert lab.num_splits_heuristic(48, 108, 64, 128) == 2
    assert lab.num_splits_heuristic(120, 132, 64, 128) == 1  # already 80% of the SMs
    # an H100 decoding step, batch 1, 8 K/V heads, M = 32,768, d = 128: 29 splits, not the model's 16
    fa = lab.flash_attn_num_splits(32768, batch=1, heads=8, head_dim=128)
    assert fa["splits"] == 29 and fa["slots"] == 264 and fa["key_blocks"] == 256
    assert fa["efficiency"] == pytest.approx(232 / 264)
    assert (
        fa["most_efficient_splits"] == 32
        and fa["efficiency"] >= 0.85 * fa["best_efficiency"]
    )
    # d = 64 takes key blocks of 256: 128 of them, and 29 would leave a split empty
    assert lab.flash_attn_num_splits(32768, heads=8, head_dim=64)["splits"] == 32
    with pytest.raises(ValueError, match="num_SMs"):
        lab.num_splits_heuristic(8, 0, 10, 128)


@given(st.integers(1, 64), st.integers(1, 300), st.integers(1, 512))
def test_num_splits_heuristic_properties(items, sms, blocks):
    s = lab.num_splits_heuristic(items, sms, blocks, 128)
    assert 1 <= s <= max(1, min(128, sms, blocks))
    if (
        s > 1
    ):  # an eligible count: each split gets fewer blocks than with one split less
        assert -(-blocks // s) != -(-blocks // (s - 1))


def test_latent_decode_intensity():
    x = lab.latent_decode_intensity(128, 512, 64, M=4096, itemsize=2)
    flops = 2 * 128 * 4096 * (576 + 512)
    assert x == pytest.approx(flops / ((4096 * 576 + 128 * 1088) * 2))
    # about 2·h·N FLOP/B in 16 bits for a long cache (FlashMLA's ratio h·(d_k + d_v)/d_k)
    assert lab.latent_decode_intensity(M=10**8) == pytest.approx(
        128 * 1088 / 576, rel=1e-4
    )
    assert (
        lab.latent_decode_intensity(N=2)
        > lab.H100_RIDGE
        > lab.latent_decode_intensity()
    )
    assert set(lab.MLA_CONFIGS) == {"DeepSeek-V2", "DeepSeek-V3"}
    with pytest.raises(ValueError, match="rope_dim"):
        lab.latent_decode_intensity(rope_dim=0)


def test_schedule_tables_print_the_model_and_the_heuristic():
    t = lab.schedule_table(32768, splits=(1, 16, 32)).splitlines()
    assert len(t) == 4 and t[2].split("|")[4].strip() == "18"
    assert t[1].endswith("the same") and t[2].endswith("14.2× fewer")
    h = lab.heuristic_table(32768, splits=(28, 29)).splitlines()
    assert "264" in h[0] and "False" in h[1] and "True" in h[2] and "88%" in h[2]


def test_cache_table_text():
    t = lab.cache_table(itemsize=2, tokens=8192).splitlines()
    assert len(t) == 1 + len(MODEL_CONFIGS) and all(len(line) <= 100 for line in t)
    assert "Llama 2 70B" in t[2] and "320 KiB" in t[2] and "2.50 GiB" in t[2]


def test_decode_splits_slider_reaches_the_cliff_and_never_loses_to_fa2():
    w = lab.widgets.decode_splits()
    sliders = {c.description: c for c in w.kwargs_widgets}
    splits, cache = list(sliders["splits"].options), list(sliders["cache M"].options)
    assert {16, 17, 29, 33, 34, 255, 256} <= set(splits)  # the text asks for each
    for (
        M
    ) in cache:  # a split costs its partials, so some counts lose; the best never does
        best = max(lab.decode_schedule(M, heads=8, splits=s)["speedup"] for s in splits)
        assert best >= 1, M


def test_stream_bandwidth_reads_at_each_thread_count_and_restores_torch():
    import torch

    before = torch.get_num_threads()
    bw = lab.stream_bandwidth(threads=(1, None), mbytes=8, rounds=1)
    assert 1 in bw and all(v > 0 for v in bw.values())
    assert max(bw) >= 1 and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        lab.stream_bandwidth(threads=(0,), mbytes=8)
    with pytest.raises(ValueError, match="mbytes"):
        lab.stream_bandwidth(mbytes=-1)


def test_schedule_title_fits_its_panel_at_every_slider_setting():
    import matplotlib.pyplot as plt

    w = lab.widgets.decode_splits()
    splits = {c.description: c for c in w.kwargs_widgets}["splits"].options
    for s in (1, 17, max(splits)):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        lab.figures.decoding.draw_decode_schedule(524288, s, axes=axes)
        fig.canvas.draw()
        box = axes[0].title.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width / 2, s  # in its half, not cut
        plt.close(fig)


def test_the_schedule_figure_counts_only_chunks_that_hold_a_key_block():
    import matplotlib.pyplot as plt

    plt.close("all")
    lab.figures.decoding.draw_decode_schedule(1024, 256)  # 8 key blocks, 256 splits
    title = plt.gcf().axes[0].get_title()
    assert title.startswith("64 items on 264 slots") and "1,984 empty chunks" in title
    plt.close("all")
    lab.figures.decoding.draw_decode_schedule(32768, 8)
    assert "empty" not in plt.gcf().axes[0].get_title()
    plt.close("all")


def test_the_tick_timeline_draws_the_models_count():
    """The toy's picture is the model: each panel's ticks are decode_schedule's; a wave ends with its
    longest chunk; with splits > 1 each wave has a partials tick and one merge tick ends the step."""
    import matplotlib.pyplot as plt

    from lab.figures.decoding import _timeline, draw_tick_timeline

    assert draw_tick_timeline() == {1: 11, 3: 6, 4: 9}
    plt.close("all")
    for blocks, heads, slots, s in [(11, 2, 6, 4), (7, 3, 4, 9), (30, 1, 5, 2)]:
        r = _timeline(blocks, heads, slots, s)
        want = lab.decode_schedule(
            128 * blocks, heads=heads, splits=s, processors=slots, per_processor=1
        )
        assert r["ticks"] == want["ticks"] == want["steps"], (blocks, heads, slots, s)
        kinds = [k for _, _, k, _ in r["cells"]]
        assert (
            kinds.count("block") == heads * blocks
        )  # every key block streamed once a head
        assert kinds.count("merge") == slots and kinds.count("partial") == r["items"]
    one = _timeline(11, 2, 6, 1)
    assert {k for _, _, k, _ in one["cells"]} == {"block"}  # no partials, no merge


def test_schedule_tables_count_ticks():
    """The schedule's unit is the tick (a decoding step is one new token): the tables say so."""
    assert (
        lab.schedule_table(32768, splits=(1,)).splitlines()[0].split(" | ")[4]
        == "ticks"
    )
    assert "model ticks" in lab.heuristic_table(32768, splits=(8,))
    r = lab.decode_schedule(32768, splits=32)
    assert (r["ticks"], r["fa2_ticks"]) == (10, 256) == (r["steps"], r["fa2_steps"])


def test_refill_ticks_never_exceed_the_waves_and_keep_the_fastest_count():
    """Slots refilled as they free: the toy's 4 splits take 8 ticks, not the waves' 9; no count is slower than in
    waves; the fastest count stays 3 on the toy and 32 on the H100's 264 slots; the picture draws the same count."""
    import matplotlib.pyplot as plt

    from lab.decoding import refill_ticks
    from lab.figures.decoding import _timeline, draw_tick_timeline

    toy = dict(heads=2, processors=6, per_processor=1)
    assert refill_ticks(11 * 128, splits=4, **toy) == 8
    assert (
        refill_ticks(11 * 128, splits=1, **toy) == 11
    )  # 2 items, no partials, no merge
    for M, kw in ((11 * 128, toy), (32768, {}), (32768, dict(batch=17))):
        counts = range(1, -(-M // 128) + 1)
        waves = {s: lab.decode_schedule(M, splits=s, **kw)["ticks"] for s in counts}
        refill = {s: refill_ticks(M, splits=s, **kw) for s in counts}
        assert all(refill[s] <= waves[s] for s in counts), M
        best = [min(counts, key=lambda s: (t[s], s)) for t in (waves, refill)]
        assert best[0] == best[1], (M, kw, best)
    assert (
        refill_ticks(32768, splits=34)
        == 18
        < lab.decode_schedule(32768, splits=34)["ticks"]
    )
    assert draw_tick_timeline(splits=(4,), refill=True) == {4: 8}
    plt.close("all")
    r = _timeline(11, 2, 6, 4, refill=True)
    kinds = [k for _, _, k, _ in r["cells"]]
    assert kinds.count("block") == 22 and kinds.count("partial") == 8
    busy = {(t, s) for t, s, k, _ in r["cells"] if k != "merge"}
    assert len(busy) == 30  # no slot holds two cells in one tick
    with pytest.raises(ValueError, match="splits"):
        refill_ticks(1024, splits=0)


def test_key_block_chunks_deal_every_block_once_and_drop_empty_chunks():
    assert lab.decoding.key_block_chunks(11, 3) == [(0, 3), (3, 7), (7, 11)]
    assert lab.decoding.key_block_chunks(11, 4) == [(0, 2), (2, 5), (5, 8), (8, 11)]
    assert lab.decoding.key_block_chunks(2, 5) == [(0, 1), (1, 2)]  # 3 chunks empty
    for blocks, splits in ((256, 33), (310, 31), (7, 7)):
        chunks = lab.decoding.key_block_chunks(blocks, splits)
        sizes = [b - a for a, b in chunks]
        assert sum(sizes) == blocks and max(sizes) - min(sizes) <= 1
        assert max(sizes) == -(-blocks // splits)  # decode_schedule's longest chunk
