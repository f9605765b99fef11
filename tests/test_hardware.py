"""The one table of hardware figures: every figure has a source, derived figures are computed from it."""

import pytest

import lab
from lab.hardware import CHIPS, SOURCES


def test_every_figure_names_its_source():
    for name, figures in CHIPS.items():
        assert set(SOURCES[name]) == set(figures), name
        assert all(SOURCES[name][f] for f in figures)


def test_exponential_rate_is_units_times_sms_times_clock():
    assert lab.exp_rate("A100") == pytest.approx(
        108 * 16 * 1.41e9
    )  # about 2.4e12 per second
    assert lab.exp_rate("H100") == pytest.approx(
        132 * 16 * 1.83e9
    )  # about 3.9e12 per second
    # on the A100 the exponential is eight times dearer than an FP32 operation
    assert lab.chip("A100")["nonmatmul_flops"] / lab.exp_rate("A100") == pytest.approx(
        8.0, rel=0.01
    )


def test_lone_fp32_operations_are_lanes_times_sms_times_clock():
    # one add, subtract, multiply or compare a lane a clock: 64 lanes per SM at cc 8.0, 128 at 9.0
    assert lab.fp32_op_rate("A100") == pytest.approx(108 * 64 * 1.41e9)  # 9.75e12
    assert lab.fp32_op_rate("H100") == pytest.approx(132 * 128 * 1.98e9)  # 33.5e12
    for name in CHIPS:
        c = lab.chip(name)
        assert c["fp32_ops_per_s"] == lab.fp32_op_rate(name)
        # the datasheet's FP32 FLOP/s counts a fused multiply-add as two FLOPs: twice the lone rate
        assert 2 * c["fp32_ops_per_s"] == pytest.approx(c["nonmatmul_flops"], rel=0.002)
        assert "Arithmetic Instructions" in SOURCES[name]["fp32_lanes_per_sm"]
    assert "T ops/s" in lab.hardware_table(
        fields=("fp32_ops_per_s", "fp32_lanes_per_sm")
    )
    with pytest.raises(ValueError, match="chip"):
        lab.fp32_op_rate("V100")


def test_clocks_match_the_published_rates():
    # the clock in the table is the tensor cores': 4,096 dense FP16 FLOP per SM per clock on the H100, 2,048 on the A100
    assert 132 * 4096 * CHIPS["H100"]["clock_hz"] == pytest.approx(
        CHIPS["H100"]["matmul_flops"], rel=0.01
    )
    assert 108 * 2048 * CHIPS["A100"]["clock_hz"] == pytest.approx(
        CHIPS["A100"]["matmul_flops"], rel=0.01
    )
    # the H100's FP32 figure is at a higher clock: 128 FP32 units per SM, one FMA (2 FLOP) each per clock, at 1.98 GHz
    assert 132 * 128 * 2 * 1.98e9 == pytest.approx(
        CHIPS["H100"]["nonmatmul_flops"], rel=0.01
    )
    assert (
        "989" in SOURCES["H100"]["clock_hz"]
        and "FP32/FP64" not in SOURCES["H100"]["clock_hz"]
    )


def test_per_thread_register_cap_and_warp_size():
    for name in CHIPS:
        assert (
            CHIPS[name]["registers_per_thread"] == 255
            and CHIPS[name]["warp_size"] == 32
        )
        assert "Compute Capabilities" in SOURCES[name]["registers_per_thread"]


def test_ridge_point_and_on_chip_sizes():
    assert lab.ridge_point("H100") == pytest.approx(989e12 / 3.35e12)
    a100 = lab.chip("A100")
    assert a100["shared_per_sm"] == 164 * 1024 < a100["l1_shared_per_sm"] == 192 * 1024
    assert a100["registers_per_sm"] == 256 * 1024


def test_table_prints_every_chip_and_source():
    text = lab.hardware_table()
    assert (
        "A100" in text
        and "H100" in text
        and "164 KiB" in text
        and "arXiv 2205.14135" in text
    )


def test_unknown_chip_is_named():
    with pytest.raises(ValueError, match="chip"):
        lab.chip("V100")
