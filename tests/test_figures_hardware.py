"""Notebook 08's cost models (lab/hardware.py, end) and the figure and slider that draw them."""

import matplotlib.pyplot as plt
import pytest

import lab


def test_cost_models_live_in_lab_hardware_and_are_importable_from_the_figures():
    import lab.figures.hardware as figs
    import lab.hardware as hw

    for name in ("estimated_bytes", "loop_overhead"):
        assert name in hw.__all__ and name not in figs.__all__
        assert getattr(lab, name) is getattr(hw, name) is getattr(figs, name)


def test_intensity_lines_place_each_kernel_against_the_ridge():
    text = lab.intensity_lines(
        ["torch naive", "sdpa flash"], 1, 8, 4096, (64, 128), 20.0
    )
    naive, fused = text.splitlines()
    F = lab.attention_flops(1, 8, 4096, 64)
    assert f"I = {F / lab.estimated_bytes('torch naive', 1, 8, 4096, 64):5.1f}" in naive
    assert (
        "below" in naive.split(";")[0] and "past" in naive.split(";")[1]
    )  # 15.8, 31.0
    assert fused.count("past") == 2 and "below" not in fused
    for bad in (dict(ds=()), dict(ridge=0.0)):
        args = dict(ds=(64,), ridge=10.0) | bad
        with pytest.raises(ValueError, match="ds|ridge"):
            lab.intensity_lines(["sdpa flash"], 1, 8, 4096, **args)


def test_estimated_bytes_orders_the_kernels():
    naive, loop, fused = (
        lab.estimated_bytes(k, 1, 8, 4096, 64)
        for k in ("torch naive", "lab torch flash", "sdpa flash")
    )
    assert fused < naive and fused < loop
    assert naive == 4 * 8 * (4 * 4096 * 64 + 4 * 4096**2)
    assert (
        loop - lab.estimated_bytes("numpy flash", 1, 8, 4096, 64) == 2 * 4 * 8 * 4096**2
    )  # torch's × log2 e: a read, a write
    assert (
        lab.estimated_bytes("sdpa flash", 1, 8, 4096, 64, block_q=128) > fused
    )  # K, V read once per query block


def test_loop_overhead_model():
    r = lab.loop_overhead(2048, 64, heads=1, ops_per_step=10, us_per_op=33.3)
    assert r["steps"] == 1024 and r["overhead_ms"] == pytest.approx(341, rel=0.01)
    assert r["matmul_ms"] == pytest.approx(
        lab.attention_flops(1, 1, 2048, 64) / 155e9 * 1e3
    )
    assert (
        lab.loop_overhead(4096, 256)["overhead_fraction"]
        < lab.loop_overhead(4096, 16)["overhead_fraction"]
    )
    assert lab.loop_overhead(100, 64)["steps"] == 4
    r = lab.loop_overhead(4096, 256, block_k=512)  # the CPU default blocks at H = 8
    assert r["steps"] == 16 * 8 and r["block_k"] == 512
    assert lab.loop_overhead(4096, 256)["overhead_ms"] == pytest.approx(
        2 * r["overhead_ms"]
    )  # twice the steps with Bc = Br = 256
    with pytest.raises(ValueError, match="block_k"):
        lab.loop_overhead(100, 16, block_k=0)
    with pytest.raises(ValueError, match="block"):
        lab.loop_overhead(100, 0)
    with pytest.raises(ValueError, match="positive"):
        lab.loop_overhead(100, 16, us_per_op=0.0)


def test_draw_loop_overhead_labels_the_block_in_the_course_symbols():
    here = lab.figures.hardware.draw_loop_overhead(1024, 10.0, block=64)
    ax = plt.gca()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close("all")
    assert here == lab.loop_overhead(1024, 64)
    assert ax.get_xlabel().startswith("query block Br") and any(
        t.startswith("Br = 64, Bc = 64:") for t in labels
    )
    here = lab.figures.hardware.draw_loop_overhead(4096, 10.0, block=256, block_k=512)
    labels = [t.get_text() for t in plt.gca().get_legend().get_texts()]
    plt.close("all")
    assert here["steps"] == 16 * 8 and any(
        t.startswith("Br = 256, Bc = 512: 128 tile steps") for t in labels
    )


def test_draw_loop_overhead_takes_the_machines_matmul_rate():
    here = lab.figures.hardware.draw_loop_overhead(
        4096, 10.0, block=256, block_k=512, flops_per_s=130e9
    )
    title = plt.gca().get_title()
    plt.close("all")
    assert here == lab.loop_overhead(4096, 256, block_k=512, flops_per_s=130e9)
    assert title.endswith("at 130 GFLOP/s")


def test_loop_overhead_slider_updates_its_result():
    import lab.widgets

    w = lab.widgets.loop_overhead_explorer()
    r = w.result  # the CPU default's shape: Br = 256, Bc = 512
    assert (r["block"], r["block_k"], r["steps"]) == (256, 512, 16 * 8)
    controls = {c.description: c for c in w.children[:-1]}
    assert set(controls) == {"N", "Br", "Bc", "µs per op"}
    assert max(controls["Br"].options) <= min(controls["N"].options)  # Br never past N
    controls["Bc"].value = 1
    controls["Br"].value = 64
    assert w.result["steps"] == 64**2 and w.result["overhead_ms"] > 0
    controls["µs per op"].value = 100.0
    assert w.result["overhead_ms"] == pytest.approx(
        64**2 * 21 * 100e-3
    )  # 21 torch ops per tile step
    controls["N"].value = 1024
    assert w.result["N"] == 1024 and w.result["steps"] == 16**2
    plt.close("all")


def test_loop_overhead_slider_opens_at_its_static_figure_with_the_same_rate():
    """Given the figure's op count and matmul rate, the slider's first result is the figure's."""
    import lab.widgets

    model = dict(ops_per_step=19, flops_per_s=63e9)
    w = lab.widgets.loop_overhead_explorer(**model)
    figure = lab.figures.hardware.draw_loop_overhead(
        4096, 10.0, block=256, block_k=512, **model
    )
    plt.close("all")
    assert w.result == figure
    assert w.result == lab.loop_overhead(4096, 256, block_k=512, **model)


def test_draw_launch_grid_draws_the_kernels_tile_kinds():
    got = lab.figures.hardware.draw_launch_grid(256, 256, 64, 32, causal=True)
    plt.close("all")
    assert (got["kinds"] == lab.triton_tile_kinds(256, 256, 64, 32, True)).all()
    assert got["counts"] == {"no mask": 12, "masked": 8, "skipped": 12}


def test_ratio_strips_draw_one_row_per_group_and_refuse_bad_input():
    fig, ax = plt.subplots()
    got = lab.figures.hardware.draw_ratio_strips(
        {"quiet": [0.9, 1.1], "busy": [1.4, 2.5, 0.8]}, ax=ax
    )
    assert got == {"quiet": (0.9, 1.1), "busy": (0.8, 2.5)}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["busy", "quiet"]
    assert ax.get_xlim()[0] < 0.8 and ax.get_xlim()[1] > 2.5
    plt.close(fig)
    for bad, word in (({}, "groups"), ({"x": [0.0]}, "groups"), ({"x": []}, "groups")):
        with pytest.raises(ValueError, match=word):
            lab.figures.hardware.draw_ratio_strips(bad)
    with pytest.raises(ValueError, match="truth"):
        lab.figures.hardware.draw_ratio_strips({"x": [1.0]}, truth=0)
