"""The IO model: its formulas equal what an instrumented run of the numpy kernels counts, exactly."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import attention_inputs, blocks

import lab
from lab.figures import tiling as fig

variants = st.sampled_from(["fa1", "fa2"])


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _heads(q, k):
    return int(np.prod(q.shape[:-2])), int(np.prod(k.shape[:-2]))


@settings(max_examples=120, deadline=None)
@given(
    attention_inputs(dtype=np.float64),
    blocks,
    blocks,
    st.booleans(),
    variants,
    st.sampled_from([np.float16, np.float32, np.float64]),
)
def test_instrumented_counts_equal_the_formula(qkv, Br, Bc, causal, variant, dtype):
    q, k, v = (a.astype(dtype) for a in qkv)
    with lab.trace.record() as rec:
        lab.flash_attention_numpy(
            q, k, v, block_q=Br, block_k=Bc, causal=causal, variant=variant
        )
    H, Hk = _heads(q, k)
    want = lab.flash_counts(
        q.shape[-2],
        k.shape[-2],
        q.shape[-1],
        v.shape[-1],
        block_q=Br,
        block_k=Bc,
        causal=causal,
        variant=variant,
        itemsize=np.dtype(dtype).itemsize,
        heads=H,
        kv_heads=Hk,
    )
    assert rec.read_by == want.read_by
    assert rec.write_by == want.write_by
    assert rec.op_counts == want.op_counts
    assert (rec.reads, rec.writes) == (want.reads, want.writes)
    assert rec == want


def test_counts_for_a_worked_shape():
    # N = M = 10, d = dv = 4, Br = 4, Bc = 3, float32: Tr = 3, Tc = 4, fa2 reads K and V once per query block.
    rec = lab.flash_counts(10, 10, 4, block_q=4, block_k=3, variant="fa2", itemsize=4)
    assert rec.read_by == {"q": 160, "k": 3 * 160, "v": 3 * 160}
    assert rec.write_by == {"o": 160, "lse": 40}
    assert rec.op_counts == {"exp": 10 * 10 + 10 * 4, "mul": 10 * 4 * 5, "div": 40}
    fa1 = lab.flash_counts(10, 10, 4, block_q=4, block_k=3, variant="fa1", itemsize=4)
    assert (
        fa1.read_by["k"] == 160 and fa1.read_by["q"] == 4 * 160
    )  # Q re-read once per key block
    assert fa1.write_by["o"] == (1 + 4) * 160  # zero-init, then once per key block
    assert fa1.op_counts["div"] == 4 * 40


def test_instrumented_counts_ignore_p_format_and_scale():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((33, 8)).astype(np.float32) for _ in range(3))
    want = lab.flash_counts(33, 33, 8, block_q=16, block_k=7, causal=True, itemsize=4)
    with lab.trace.record() as rec:
        lab.flash_attention_numpy(
            q, k, v, block_q=16, block_k=7, causal=True, p_format="bf16", scale=0.3
        )
    assert rec == want


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), blocks, blocks, st.booleans())
def test_tile_grid_skips_exactly_the_fully_masked_tiles(N, M, Br, Bc, causal):
    grid = lab.tile_grid(N, M, Br, Bc, causal)
    assert grid.shape == (math.ceil(N / Br), math.ceil(M / Bc))
    visible = lab.causal_mask(N, M) if causal else np.ones((N, M), bool)
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            assert (
                grid[i, j]
                == visible[i * Br : (i + 1) * Br, j * Bc : (j + 1) * Bc].any()
            )
    counts = lab.tile_counts(N, M, Br, Bc, causal)
    assert (
        counts["computed"] == grid.sum() and counts["skipped"] == grid.size - grid.sum()
    )
    assert counts["total"] == counts["Tr"] * counts["Tc"]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.sampled_from([1, 3, 16, 64, 128, 500]))
def test_causal_tile_formula_for_square_blocks(N, B):
    counts = lab.tile_counts(N, N, B, B, causal=True)
    T = math.ceil(N / B)
    assert lab.causal_tiles_formula(N, B) == counts["computed"] == T * (T + 1) // 2
    assert counts["fraction"] == pytest.approx((T + 1) / (2 * T))


def test_causal_fraction_tends_to_one_half():
    fractions = [
        lab.tile_counts(n, n, 64, 64, True)["fraction"] for n in (256, 4096, 65536)
    ]
    assert fractions[0] > fractions[1] > fractions[2] > 0.5
    assert fractions[2] < 0.505


def test_fa_block_sizes_follow_algorithm_1():
    assert lab.fa_block_sizes(192 * 1024, 64, 2) == (
        64,
        384,
    )  # A100: M = 98304 elements
    assert lab.fa_block_sizes(228 * 1024, 128, 2) == (
        128,
        228,
    )  # H100: ceil(116736 / 512)
    assert lab.fa_block_sizes(1000, 4, 4) == (
        4,
        16,
    )  # ceil(250 / 16) = 16, Br = min(16, d)
    assert lab.fa_block_sizes(64, 64, 4) == (1, 1)
    with pytest.raises(ValueError, match="sram_bytes"):
        lab.fa_block_sizes(0, 64)
    with pytest.raises(TypeError, match="d"):
        lab.fa_block_sizes(1024, 6.5)


def test_step_footprint_counts_every_buffer():
    parts = lab.step_footprint(64, 64, 128, itemsize=2, acc_itemsize=4)
    assert parts["Q_i"] == 64 * 64 * 2 and parts["K_j"] == parts["V_j"] == 128 * 64 * 2
    assert parts["S_ij"] == 64 * 128 * 4 and parts["P_ij"] == 64 * 128 * 2
    assert parts["m"] == parts["l"] == 64 * 4 and parts["acc"] == 64 * 64 * 4
    assert parts["total"] == sum(b for name, b in parts.items() if name != "total")
    assert lab.step_footprint(64, 64, 64, dv=32)["V_j"] == 64 * 32 * 2
    with pytest.raises(ValueError, match="block_k"):
        lab.step_footprint(64, 64, 0)


def test_standard_traffic_is_algorithm_0():
    rec = lab.standard_traffic(100, d=8, itemsize=2)
    assert rec.read_by == {"q": 1600, "k": 1600, "s": 20000, "p": 20000, "v": 1600}
    assert rec.write_by == {"s": 20000, "p": 20000, "o": 1600}
    assert rec.total == 4 * 100 * 100 * 2 + 4 * 100 * 8 * 2
    assert (
        lab.standard_traffic(100, 50, d=8, dv=4, heads=3).read_by["v"] == 3 * 50 * 4 * 2
    )


def test_theorem_2_order_against_sram_size():
    # With Algorithm 1's blocks, fa1's traffic times M / (N² d²) stays within constant bounds over M.
    N, d = 8192, 64
    ratios = []
    for kib in (16, 32, 64, 128, 256):
        Br, Bc = lab.fa_block_sizes(kib * 1024, d, 2)
        traffic = lab.flash_counts(
            N, N, d, block_q=Br, block_k=Bc, variant="fa1", itemsize=2
        ).total
        ratios.append(traffic / lab.theorem2_bytes(N, d, kib * 1024, 2))
    assert max(ratios) / min(ratios) < 1.6
    assert (
        lab.flash_traffic_bytes(N, d=d, block_q=64, block_k=384, variant="fa1")
        < lab.standard_traffic(N, d=d).total / 5
    )


def test_flash_traffic_bytes_is_the_recorder_total():
    assert (
        lab.flash_traffic_bytes(300, d=16, block_q=32, block_k=48, causal=True)
        == lab.flash_counts(
            300, 300, 16, block_q=32, block_k=48, causal=True, itemsize=2
        ).total
    )


def test_flop_split_of_the_seed_demo():
    # One head, N = 4096, d = 128, Br = Bc = 128: fa1 rescales O (2 mul + 1 div per element) at every step.
    fa1 = lab.flop_split(4096, d=128, block_q=128, block_k=128, variant="fa1")
    fa2 = lab.flop_split(4096, d=128, block_q=128, block_k=128, variant="fa2")
    N, d, Tc = 4096, 128, 32
    assert fa1["matmul"] == fa2["matmul"] == 4 * N * N * d
    assert fa1["div"] == N * d * Tc and fa2["div"] == N * d
    assert fa1["mul"] == N * Tc * (2 * d + 3) and fa2["mul"] == N * Tc * (d + 1)
    assert fa2["nonmatmul"] < fa1["nonmatmul"]
    assert fa1["softmax"] == fa2["softmax"] == 4 * N * N
    share1 = lab.gpu_time_share(fa1["matmul"], fa1["nonmatmul"], exp=fa1["exp"])[
        "share"
    ]
    share2 = lab.gpu_time_share(fa2["matmul"], fa2["nonmatmul"], exp=fa2["exp"])[
        "share"
    ]
    assert 0.25 < share2 < share1 < 0.35
    a100 = lab.gpu_time_share(fa2["matmul"], fa2["nonmatmul"], "A100", exp=fa2["exp"])
    fp32_only = lab.gpu_time_share(fa2["matmul"], fa2["nonmatmul"], "A100")
    assert (
        a100["t_exp"] > fp32_only["t_nonmatmul"]
    )  # the exponentials alone outweigh the FP32-only estimate


def test_gpu_time_share():
    r = lab.gpu_time_share(312e12, 19.5e12, "A100")
    assert r["t_matmul"] == pytest.approx(1.0) and r["t_nonmatmul"] == pytest.approx(
        1.0
    )
    assert r["share"] == pytest.approx(0.5) and r["ratio"] == pytest.approx(16.0)
    assert lab.gpu_time_share(0, 0)["share"] == 0.0
    e = lab.gpu_time_share(0, 10, "A100", exp=4)
    assert e["t_exp"] == pytest.approx(4 / lab.exp_rate("A100"))
    assert (
        e["t_nonmatmul"] == pytest.approx(6 / 19.5e12 + 4 / lab.exp_rate("A100"))
        and e["share"] == 1.0
    )
    assert (
        lab.HARDWARE["H100"]["exp"] == lab.exp_rate("H100")
        and lab.HARDWARE["A100"]["matmul"] == 312e12
    )
    with pytest.raises(ValueError, match="exp"):
        lab.gpu_time_share(1, 1, exp=2)
    with pytest.raises(ValueError, match="chip"):
        lab.gpu_time_share(1, 1, "TPU")
    with pytest.raises(ValueError, match="FLOP"):
        lab.gpu_time_share(-1, 1)


def test_cpu_l2_bytes_reads_sysfs_and_falls_back(tmp_path):
    for n, (level, size) in enumerate((("1", "48K"), ("2", "2048K"), ("3", "32M"))):
        (tmp_path / f"index{n}").mkdir()
        (tmp_path / f"index{n}" / "level").write_text(level + "\n")
        (tmp_path / f"index{n}" / "size").write_text(size + "\n")
    size, source = lab.cpu_l2_bytes(tmp_path)
    assert size == 2048 * 1024 and source.endswith("index1/size")
    size, source = lab.cpu_l2_bytes(tmp_path / "missing")
    assert size == 1024 * 1024 and "fallback" in source
    assert lab.cpu_l2_bytes()[0] > 0


def test_sram_sizes():
    sizes = lab.sram_sizes(cpu_l2=512 * 1024)
    assert (
        sizes["H100 SM (228 KiB shared)"] == 228 * 1024
        and sizes["A100 SM (164 KiB shared)"] == 164 * 1024
    )
    assert set(lab.SRAM_BYTES.values()) == {
        lab.chip(c)["shared_per_sm"] for c in ("A100", "H100")
    }
    assert sizes["CPU core L2 (512 KiB)"] == 512 * 1024
    with pytest.raises(ValueError, match="cpu_l2"):
        lab.sram_sizes(cpu_l2=0)


def test_peak_memory_is_quadratic_for_naive_and_linear_for_flash():
    small, big = lab.measure_peak_memory(256, d=16), lab.measure_peak_memory(1024, d=16)
    assert small["naive"] >= lab.attention_bytes(256) and big[
        "naive"
    ] >= lab.attention_bytes(1024)
    assert big["naive"] / small["naive"] > 12
    assert big["flash"] < big["naive"] / 4 and big["max_diff"] < 1e-5
    assert (
        lab.flash_peak_bytes(2048, 16, block_q=256, block_k=256)
        - lab.flash_peak_bytes(1024, 16, block_q=256, block_k=256)
        == 1024 * 17 * 4
    )


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="variant"):
        lab.flash_counts(4, 4, 4, variant="fa3")
    with pytest.raises(ValueError, match="block_q"):
        lab.tile_counts(4, 4, 0, 4)
    with pytest.raises(ValueError, match="N"):
        lab.tile_grid(-1, 4, 2, 2)
    with pytest.raises(TypeError, match="heads"):
        lab.flash_counts(4, 4, 4, heads=1.5)
    with pytest.raises(ValueError, match="block"):
        lab.causal_tiles_formula(8, 0)


def test_loop_order_and_tile_grid_figure():
    order = fig.loop_order(200, 200, 64, 32, True, "fa2")
    assert order[:3] == [(0, 0), (0, 1), (1, 0)]
    assert fig.loop_order(200, 200, 64, 32, True, "fa1")[:3] == [(0, 0), (1, 0), (2, 0)]
    r = fig.draw_tile_grid(
        200, block_q=64, block_k=32, causal=True, step=6
    )  # steps count from 1
    assert (r["Tr"], r["Tc"], r["computed"], r["steps"]) == (4, 7, 19, 19)
    assert (
        r["step"] == 6
        and r["tile"] == order[5]
        and r["partial_rows"] == 8
        and r["partial_cols"] == 8
    )
    assert r["rows"] == (64, 128) and r["keys"] == (96, 128)
    assert (
        fig.draw_tile_grid(200, step=10_000)["step"] == fig.draw_tile_grid(200)["steps"]
    )
    assert (
        fig.draw_tile_grid(200, step=0)["tile"]
        == fig.draw_tile_grid(200)["tile"]
        == (0, 0)
    )


def test_tile_grid_figure_dots_the_masked_tiles_and_names_both_kinds():
    """Skipped (every pair hidden, hatched) and masked (computed, some pairs hidden, dotted): the words of
    05_tiling's exercise 1, and as many dotted tiles as the exercise's reference counts."""
    from lab.checks.tiling import _tile_kinds

    plt.close("all")
    for N, Br, Bc in ((200, 64, 32), (200, 32, 64), (512, 16, 16)):
        r = fig.draw_tile_grid(N, block_q=Br, block_k=Bc, causal=True)
        assert (r["computed"], r["masked"]) == _tile_kinds(N, N, Br, Bc)
    labels = [t.get_text() for t in plt.gca().get_legend().get_texts()]
    assert "skipped (every pair hidden)" in labels
    assert "masked (computed, some pairs hidden)" in labels
    assert fig.draw_tile_grid(200, causal=False)["masked"] == 0
    plt.close("all")


def test_other_figures_return_their_numbers():
    r = fig.draw_footprint(128, 128, 64, itemsize=2)
    assert r["registers"] == lab.onchip_footprint(128, 128, 64)["registers"] and r[
        "fits"
    ] == {"A100": True, "H100": True}
    assert (
        r["warps"] == 4 and r["register_budget"] == 128 * 255 * 4
    )  # 4 warps: 127.5 KiB of registers
    assert fig.draw_footprint(128, 128, 128, itemsize=2)["fits"] == {
        "A100": False,
        "H100": False,
    }
    assert fig.draw_footprint(128, 128, 128, itemsize=2, warps=8)["fits"] == {
        "A100": True,
        "H100": True,
    }
    assert r["total"] == r["registers"]["total"] + r["shared"]["total"]
    assert fig.draw_footprint(128, 256, 256, itemsize=4)["fits"] == {
        "A100": False,
        "H100": False,
    }
    # shared memory alone decides at d = 256, 128 × 64 with two stages and 8 warps: 192 KiB fits the H100 (227), not the A100 (163)
    r = fig.draw_footprint(256, 128, 64, itemsize=2, kv_stages=2, warps=8)
    assert r["shared"]["total"] == 192 * 1024 and r["fits"] == {
        "A100": False,
        "H100": True,
    }
    h = fig.draw_hbm_traffic(2048, 64, 64, 64, itemsize=2)
    assert h["standard"] == lab.standard_traffic(2048, d=64).total and h[
        "paper_blocks"
    ] == (64, 328)  # Algorithm 1 for 164 KiB
    assert h["fa1_paper_blocks"] < h["fa1"] < h["standard"]
    ops = lab.figures.fa2.draw_op_counts(512, 64, 64, 64)
    assert (
        lab.figures.tiling.draw_op_counts is lab.figures.fa2.draw_op_counts
    )  # the old name still works
    assert ops["share"]["fa2"] < ops["share"]["fa1"]
    split = lab.figures.fa2.draw_work_split(512, 64, 64, workers=4)
    assert split["thread_blocks_per_head"] == {"fa1": 1, "fa2": 8}
    assert split["writers_per_output_block"] == {"fa1": 1, "fa2": 1}
    warp = lab.figures.fa2.draw_warp_split(64, 64, 64, warps=4)
    assert warp["K"]["written"] == 4 * 64 * 66 * 4 and warp["Q"]["written"] == 0
    bare = lab.figures.fa2.draw_warp_split(64, 64, 64, warps=4, counts=False)
    assert bare == warp  # the counts left out of the titles, not out of the result
    cost = lab.figures.fa2.draw_exchange_cost(4096, 64, 64, 64, warps=4)
    tiles = lab.tile_counts(4096, 4096, 64, 64)["computed"]
    assert cost["bytes"]["split-K exchange"] == 2 * warp["K"]["written"] * tiles
    assert (
        cost["bytes"]["fa2 HBM"] == lab.flash_counts(4096, 4096, 64, itemsize=2).total
    )
    assert cost["bytes"]["split-K exchange"] > cost["bytes"]["fa1 HBM"]  # more bytes
    assert cost["us"]["split-K exchange"] < cost["us"]["fa1 HBM"]  # yet less time
    peak = fig.draw_peak_memory(
        [1024, 2048], [8e6, 32e6], [1e6, 1.2e6], [8e6, 32e6], [1e6, 1.2e6]
    )
    assert peak["ratio"] == pytest.approx([8.0, 32e6 / 1.2e6])


def test_tile_walk_slider():
    w = lab.widgets.tile_walk()
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["computed"] == 19 and (
        controls["step"].min,
        controls["step"].max,
    ) == (1, 19)  # 1-based
    controls["N = M"].value = 64
    assert (
        w.result["N"] == 64 and w.result["computed"] == 2 and controls["step"].max == 2
    )  # one row block
    controls["Bc"].value = 8
    controls["causal"].value = False
    assert w.result["computed"] == 8 and controls["step"].max == 8
    controls["step"].value = 8
    assert w.result["tile"] == (0, 7)
    controls["loop"].value = "fa1"
    assert w.result["variant"] == "fa1"


def test_block_footprint_slider():
    w = lab.widgets.block_footprint()
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["fits"] == {"A100": True, "H100": True}
    controls["Br"].value = 512
    controls["inputs"].value = "float32"
    assert (
        w.result["registers"]
        == lab.onchip_footprint(128, 512, 64, itemsize=4)["registers"]
    )
    assert w.result["fits"] == {"A100": False, "H100": False}
    controls["Br"].value = 128
    controls["K/V stages"].value = 2
    assert (
        w.result["shared"]
        == lab.onchip_footprint(128, 128, 64, itemsize=4, kv_stages=2)["shared"]
    )
    controls["inputs"].value = "float16"
    controls["Bc"].value = 128
    assert not w.result["fits"]["A100"] and w.result["register_budget"] == 127.5 * 1024
    controls["warps"].value = 8
    assert w.result["fits"]["A100"] and w.result["register_budget"] == 255 * 1024


def test_io_traffic_slider_agrees_with_instrumented_runs():
    w = lab.widgets.io_traffic(N=256)
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["equal"] and w.result["measured"] == w.result["formula"]
    before = w.result["measured"]
    controls["Br"].value = 16
    controls["causal"].value = True
    controls["inputs"].value = "float16"
    assert w.result["equal"] and w.result["measured"] != before
    assert w.result["causal"]
    full, causal = (
        lab.flash_counts(
            256, 256, 64, block_q=16, block_k=128, itemsize=2, causal=c
        ).total
        for c in (False, True)
    )
    assert (
        w.result["fa2"] == w.result["formula"] == causal < full
    )  # the drawn traffic skips the masked tiles


def test_io_traffic_slider_starts_where_the_notebook_says():
    w = lab.widgets.io_traffic()
    assert w.kwargs == {
        "N": 1024,
        "d": 64,
        "block_q": 128,
        "block_k": 128,
        "dtype": "float16",
        "causal": False,
    }
    assert (
        w.result["fa2"] == fig.draw_hbm_traffic(1024, 64, 128, 128, itemsize=2)["fa2"]
    )


def test_fa_variants_slider_agrees_with_instrumented_runs():
    w = lab.widgets.fa_variants(N=256, d=64)
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["equal"] and w.result["variant"] == "fa2"
    controls["variant"].value = "fa1"
    controls["Bc"].value = 32
    assert w.result["equal"] and w.result["variant"] == "fa1"
    assert w.result["measured"]["div"] == 256 * 64 * 8


def test_onchip_model_separates_registers_from_shared_memory():
    foot = lab.onchip_footprint(128, 128, 64, kv_stages=2)
    assert foot["registers"] == {
        "S_ij": 128 * 64 * 4,
        "P_ij": 128 * 64 * 2,
        "m": 512,
        "l": 512,
        "acc": 128 * 128 * 4,
        "total": 128 * 64 * 6 + 1024 + 128 * 128 * 4,
    }
    assert foot["shared"] == {
        "Q_i": 128 * 128 * 2,
        "K_j": 2 * 64 * 128 * 2,
        "V_j": 2 * 64 * 128 * 2,
        "total": 128 * 128 * 2 + 4 * 64 * 128 * 2,
    }
    fits = lab.onchip_fits("A100", 128, 128, 128, kv_stages=2, warps=8)
    assert fits["shared_budget"] == lab.chip("A100")["shared_per_block"] == 163 * 1024
    assert (
        fits["register_budget"] == 8 * 32 * 255 * 4
        and fits["shared_per_sm"] == 164 * 1024
    )  # 255 KiB
    # the register budget is min(256 KiB per SM, threads × 255 registers × 4 B)
    assert (
        lab.onchip_fits("A100", 64, 64, 64)["register_budget"] == 4 * 32 * 255 * 4
    )  # 127.5 KiB, the default 4 warps
    assert (
        lab.onchip_fits("A100", 64, 64, 64, warps=16)["register_budget"] == 256 * 1024
    )  # the SM's register file
    # FlashAttention-2's tile at d = 128 (128 × 64, 4 warps) fits; 128 × 128 needs 8 warps; twice the rows does not (registers)
    assert lab.onchip_fits("A100", 128, 128, 64, kv_stages=2)["fits"]
    assert (
        not lab.onchip_fits("A100", 128, 128, 128, kv_stages=2)["fits_registers"]
        and fits["fits"]
    )
    big = lab.onchip_fits("A100", 128, 256, 128, warps=8)
    assert not big["fits_registers"] and big["fits_shared"]
    with pytest.raises(ValueError, match="warps"):
        lab.onchip_fits("A100", 64, 64, 64, warps=0)
    with pytest.raises(ValueError, match="chip"):
        lab.onchip_fits("TPU", 64, 64, 64)
    with pytest.raises(ValueError, match="kv_stages"):
        lab.onchip_footprint(64, 64, 64, kv_stages=0)


def test_warp_split_exchange():
    k = lab.warp_split_exchange(128, 64, 128, warps=4, split="K")
    assert k["written"] == k["read"] == 4 * 128 * 130 * 4 and (
        k["per_warp_rows"],
        k["per_warp_keys"],
    ) == (128, 16)
    q = lab.warp_split_exchange(128, 64, 128, warps=4, split="Q")
    assert q["written"] == q["read"] == 0 and (
        q["per_warp_rows"],
        q["per_warp_keys"],
    ) == (32, 64)
    with pytest.raises(ValueError, match="split"):
        lab.warp_split_exchange(64, 64, 64, split="V")


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 20),
    st.integers(1, 20),
    st.integers(1, 6),
    st.integers(1, 6),
    st.booleans(),
    st.data(),
)
def test_tile_fill_state_is_the_online_state(N, M, Br, Bc, causal, data):
    Tr, Tc = math.ceil(N / Br), math.ceil(M / Bc)
    i, j = data.draw(st.integers(0, Tr - 1)), data.draw(st.integers(0, Tc - 1))
    st_ = fig.tile_fill_state(N, M, Br, Bc, i, j, causal)
    S, vis = st_["S"], st_["visible"]
    for row in range(N):
        block = row // Br
        keys = M if block < i else min((j + 1) * Bc, M) if block == i else 0
        seen = vis[row, :keys]
        if not seen.any():
            assert np.isnan(st_["m"][row]) and np.isnan(st_["l"][row])
            continue
        s = S[row, :keys][seen]
        assert st_["m"][row] == s.max()
        assert st_["l"][row] == pytest.approx(np.exp(s - s.max()).sum(), rel=1e-12)
    assert st_["computed"] == bool(lab.tile_grid(N, M, Br, Bc, causal)[i, j])


def test_tile_fill_figure_and_slider():
    r = fig.draw_tile_fill(12, 16, 4, 4, i=1, j=2)
    assert r["tile"] == (1, 2) and r["rows"] == (4, 8) and r["keys"] == (8, 12)
    assert not np.isnan(r["m"][:8]).any() and np.isnan(r["m"][8:]).all()
    last = fig.tile_fill_state(12, 16, 4, 4, i=2, j=3)
    assert np.allclose(
        last["m"] + np.log(last["l"]), np.log(np.exp(last["S"]).sum(axis=1))
    )
    w = lab.widgets.tile_fill()
    controls = {c.description: c for c in w.children[:-1]}
    assert (
        w.result["tile"] == (1, 2)
        and controls["i (query block)"].max == 2
        and controls["j (key block)"].max == 3
    )
    controls["Bc"].value = 3
    assert controls["j (key block)"].max == 5
    controls["j (key block)"].value = 5
    controls["causal"].value = True
    assert (
        w.result["tile"] == (1, 5) and not w.result["computed"]
    )  # above the causal boundary: skipped
    controls["i (query block)"].value = 2
    assert w.result["computed"] and w.result["keys"] == (15, 16)


def test_add_tiles_draws_every_tile_in_one_artist():
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import PathPatch

    from lab.figures.tiling import add_tiles

    _, ax = plt.subplots()
    boxes = [(0, 0, 4, 4), (4, 0, 4, 4), (0, 4, 3, 4)]
    add_tiles(ax, boxes, ["red", "green", "blue"], lw=0.8)
    add_tiles(ax, boxes[:2], ["#eeeeee"] * 2, lw=0.8, hatch="//")
    add_tiles(ax, [], [], lw=0.8)  # nothing to draw
    (tiles,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(tiles.get_paths()) == 3 and len(tiles.get_facecolors()) == 3
    assert tiles.get_paths()[2].get_extents().bounds == (0, 4, 3, 4)
    (hatched,) = [p for p in ax.patches if isinstance(p, PathPatch)]
    assert hatched.get_hatch() == "//"
    assert hatched.get_path().get_extents().bounds == (0, 0, 8, 4)
    plt.close("all")


def test_fits_table_lays_out_onchip_fits_row_by_row():
    shapes = [(64, 64), (128, 128), (256, 128)]
    lines = lab.tiling.fits_table("A100", 128, shapes).splitlines()
    assert len(lines) == 1 + len(shapes) and "registers" in lines[0]
    for (Br, Bc), line in zip(shapes, lines[1:]):
        f = {
            (w, s): lab.onchip_fits("A100", 128, Br, Bc, kv_stages=s, warps=w)
            for w in (4, 8)
            for s in (1, 2)
        }
        cells = [c.strip() for c in line.split("|")]
        assert cells[0] == f"{Br} × {Bc}"
        assert cells[1] == f"{f[4, 1]['registers']['total'] / 1024:.1f} KiB"
        assert cells[2] == f"{f[4, 1]['fits_registers']} / {f[8, 1]['fits_registers']}"
        assert cells[4] == f"{f[4, 1]['fits_shared']} / {f[4, 2]['fits_shared']}"
    assert lines[-1].endswith(
        "True / False"
    )  # 256 × 128: 192 KiB with two copies of K_j, V_j
    with pytest.raises(ValueError, match="chip"):
        lab.tiling.fits_table("TPU", 128, shapes)


def test_tile_fill_shows_masked_entries_grey_and_names_single_keys():
    """Under the causal mask the entries a computed tile hides get their own grey layer, distinct from the blank
    'not yet computed'; the axes name a single key c and query r."""
    _, ax = plt.subplots()
    fig.draw_tile_fill(12, 16, 4, 4, i=2, j=3, causal=True, ax=ax)
    layers = ax.get_images()
    assert len(layers) == 2  # the scores, then the hidden entries
    hidden = ~np.ma.getmaskarray(layers[1].get_array())
    visible = lab.causal_mask(12, 16)
    tiles = lab.tile_grid(12, 16, 4, 4, causal=True).repeat(4, 0).repeat(4, 1)
    assert (hidden == (tiles & ~visible)).all() and hidden.any()
    assert ax.get_xlabel().startswith("key c") and ax.get_ylabel().startswith("query r")
    plt.close(ax.figure)


def test_wave_rows_counts_fa1_and_fa2_waves():
    from lab.tiling import wave_rows

    (row,) = wave_rows([(8, 16, 2048)], "A100", block_q=128)
    assert row["FA1 blocks"] == 128 and row["FA2 blocks"] == 2048
    assert row["FA1 waves"] == "1.19" and row["FA2 waves"] == "19.0"
    assert row["FA1's last wave"] == "20 of 108 SMs"
    assert row["FA1 SM use"] == f"{128 / 216:.1%}" and row["FA2 SM use"] == "99.8%"


def test_time_rows_price_the_rest_both_ways():
    from lab.tiling import time_rows

    split = {
        "fa2": lab.flop_split(4096, d=128, block_q=128, block_k=128, variant="fa2")
    }
    (row,) = time_rows(split, "A100")
    assert row["rest, 1 op a slot"] == pytest.approx(2 * row["rest"])
    assert row["outside"] == "27.4%"


def test_op_counts_outline_the_highlighted_variant_and_fade_the_other():
    plt.close("all")
    lab.figures.fa2.draw_op_counts(256, 64, 64, 64, highlight="fa1")
    left = plt.gcf().axes[0]
    fa1, fa2 = left.containers
    assert all(b.get_linewidth() == 2 and b.get_alpha() is None for b in fa1)
    assert all(b.get_alpha() == 0.3 for b in fa2)
    plt.close("all")
    lab.figures.fa2.draw_op_counts(256, 64, 64, 64)  # no highlight: both alike
    assert {b.get_alpha() for c in plt.gcf().axes[0].containers for b in c} == {None}
    with pytest.raises(ValueError, match="highlight"):
        lab.figures.fa2.draw_op_counts(256, 64, 64, 64, highlight="fa3")


def test_time_split_figure_stacks_the_time_rows():
    from lab.tiling import time_rows

    plt.close("all")
    split = {
        v: lab.flop_split(4096, d=128, block_q=128, block_k=128, variant=v)
        for v in ("fa1", "fa2")
    }
    rows = lab.figures.fa2.draw_time_split(split)
    assert (
        rows["A100"] == time_rows(split, "A100")
        and rows["A100"][1]["outside"] == "27.4%"
    )
    ax = plt.gcf().axes[0]
    assert len(ax.patches) == 3 * 4  # matmul, exp, rest for 2 variants on 2 chips
    plt.close("all")


def test_both_time_figures_give_each_kind_of_work_one_colour():
    """The op-count figure's time panel and the time-split figure colour matmul, exp and the rest alike."""
    from matplotlib.colors import to_hex

    def colours(ax):
        handles, labels = ax.get_legend_handles_labels()
        return {
            lab_: to_hex(h.patches[0].get_facecolor())
            for h, lab_ in zip(handles, labels)
        }

    plt.close("all")
    lab.figures.fa2.draw_op_counts(256, 64, 64, 64)
    ops = colours(plt.gcf().axes[1])
    plt.close("all")
    split = {
        v: lab.flop_split(1024, d=64, block_q=64, block_k=64, variant=v)
        for v in ("fa1", "fa2")
    }
    lab.figures.fa2.draw_time_split(split)
    times = colours(plt.gcf().axes[0])
    plt.close("all")
    assert ops == times and len(ops) == 3, (ops, times)
    assert set(ops.values()) == {
        to_hex(c) for c in lab.figures.fa2.UNIT_COLOURS.values()
    }


def test_wave_counts_fill_the_sms_round_by_round():
    from lab.tiling import wave_counts

    c = wave_counts(128, 108)  # FA1 at B = 8, H = 16 on an A100
    assert (c["rounds"], c["last"]) == (2, 20)
    assert c["use"] == pytest.approx(128 / 216)
    assert wave_counts(108, 108)["last"] == 108 and wave_counts(108, 108)["use"] == 1
    assert wave_counts(1, 108)["rounds"] == 1
    with pytest.raises(ValueError, match="blocks"):
        wave_counts(0, 108)


def test_the_wave_figure_and_its_slider_count_fa1_and_fa2():
    import matplotlib.pyplot as plt

    plt.close("all")
    r = lab.figures.fa2.draw_waves(1, 16, 16384, block_q=128)
    assert r["fa1"]["blocks"] == 16 and r["fa2"]["blocks"] == 16 * 128
    fa1_ax, fa2_ax = plt.gcf().axes  # rounds, not time: each axis says what a round is
    assert "one head" in fa1_ax.get_ylabel()
    assert "one query block" in fa2_ax.get_ylabel()
    assert r["Tr"] == 128 and r["sms"] == 108
    with pytest.raises(ValueError, match="block_q"):
        lab.figures.fa2.draw_waves(block_q=0)
    plt.close("all")
    w = lab.widgets.wave_explorer()
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["fa1"]["last"] == 20  # 128 blocks: one full round and 20
    controls["N"].value = 4096  # FA2's blocks double; FA1's stay B·H
    assert w.result["fa2"]["blocks"] == 4096 and w.result["fa1"]["blocks"] == 128
    controls["batch B"].value = 1
    assert w.result["fa1"]["use"] == pytest.approx(16 / 108)


def test_the_wave_slider_draws_the_sms_from_0_to_108_at_every_setting():
    """The live figure keeps the static one's frame: no SM axis rounded out past the chip's 108."""
    w = lab.widgets.wave_explorer()
    controls = {c.description: c for c in w.children[:-1]}
    for N in (2048, 512, 131072):
        controls["N"].value = N
        for ax in w._axes:
            assert ax.get_xlim() == (0, 108), (N, ax.get_xlim())


def test_tile_fill_greys_a_skipped_tile_and_never_frames_it_on_chip():
    """A skipped tile (every pair hidden) is never loaded: no orange 'on chip' frame, a grey fill, 'skipped'."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle

    from lab.figures.tiling import _NOW, _SKIP

    def frames(ax):
        return [
            p
            for p in ax.patches
            if isinstance(p, Rectangle) and p.get_edgecolor() == to_rgba(_NOW)
        ]

    _, ax = plt.subplots()
    r = fig.draw_tile_fill(12, 16, 3, 6, i=1, j=2, causal=True, ax=ax)
    assert not r["computed"] and not frames(ax)
    title = ax.get_title()
    assert "skipped" in title and "masked" not in title and "on chip" not in title
    (hatched,) = [
        c for c in ax.collections if isinstance(c, PolyCollection) and c.get_hatch()
    ]
    assert (hatched.get_facecolors() == to_rgba(_SKIP)).all()
    plt.close(ax.figure)
    _, ax = plt.subplots()
    r = fig.draw_tile_fill(12, 16, 3, 6, i=1, j=1, causal=True, ax=ax)
    assert r["computed"] and len(frames(ax)) == 1 and "on chip" in ax.get_title()
    plt.close(ax.figure)
