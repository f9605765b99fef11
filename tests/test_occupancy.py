"""The launch-configuration model of notebook 08_triton_kernel: shared memory, registers and threads per program,
programs per SM, the waves of the grid; its figure and slider."""

import time

import matplotlib.pyplot as plt
import pytest

import lab
from lab.occupancy import PER_SM, occupancy


def test_shared_memory_is_the_q_tile_and_num_stages_k_and_v_tiles():
    r = occupancy(128, 64, 64, num_stages=3, dtype="float16")
    assert r["q_tile_bytes"] == 128 * 64 * 2
    assert r["kv_stage_bytes"] == 2 * 64 * 64 * 2
    assert r["shared_bytes"] == 16384 + 3 * 16384  # 64 KiB
    assert (
        occupancy(128, 64, 64, num_stages=3, dtype="float32")["shared_bytes"]
        == 2 * 65536
    )


def test_programs_per_sm_by_hand_on_an_a100_and_an_h100():
    # A100: 164 KiB per SM // 64 KiB = 2; registers (8192 + 8192 + 4096) / 128 threads = 160 each,
    # 65,536 // (160·128) = 3; threads 2,048 // 128 = 16; block slots 32
    r = occupancy(
        128, 64, 64, num_warps=4, num_stages=3, chip="A100", B=4, H=16, N=4096
    )
    assert r["registers_per_thread"] == 160 and not r["spills"]
    assert r["limits"] == {
        "shared memory": 2,
        "registers": 3,
        "threads": 16,
        "block slots": 32,
    }
    assert r["programs_per_sm"] == 2 and r["bound"] == "shared memory"
    assert r["in_flight"] == 216 and r["grid"] == 32 * 64 and r["waves"] == 10
    assert r["last_wave_fill"] == pytest.approx((2048 - 9 * 216) / 216)
    h = occupancy(128, 64, 64, num_warps=4, num_stages=3, chip="H100")
    assert (
        h["limits"]["shared memory"] == 3
        and h["bound"] == "shared memory and registers"
    )


def test_more_stages_never_fit_more_programs_and_small_tiles_hit_the_block_slots():
    fits = [occupancy(64, 64, 64, num_stages=s)["programs_per_sm"] for s in range(1, 6)]
    assert fits == sorted(fits, reverse=True)
    tiny = occupancy(16, 16, 32, num_warps=1, num_stages=1)
    assert (
        tiny["programs_per_sm"] == PER_SM["blocks"] and tiny["bound"] == "block slots"
    )
    assert occupancy(16, 16, 32, num_warps=16)["limits"]["threads"] == 4


def test_a_program_past_the_shared_memory_a_program_may_take_does_not_launch():
    r = occupancy(128, 256, 128, num_stages=3, dtype="float32")
    assert r["shared_bytes"] > r["shared_per_block"]
    assert r["programs_per_sm"] == 0 and r["in_flight"] == 0 and r["waves"] == 0
    assert r["bound"].startswith("shared memory")


def test_registers_past_255_a_thread_spill_and_cap_the_count():
    r = occupancy(256, 256, 128, num_warps=1, num_stages=1)
    assert r["spills"] and r["limits"]["registers"] == 65536 // (255 * 32)


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(Br=48), "Br"),
        (dict(Bc=8), "Bc"),
        (dict(d=80), "d"),
        (dict(num_warps=3), "num_warps"),
        (dict(num_stages=0), "num_stages"),
        (dict(dtype="int8"), "dtype"),
        (dict(N=0), "N"),
        (dict(chip="V100"), "V100"),
    ],
)
def test_bad_settings_name_their_argument(kw, name):
    with pytest.raises(ValueError, match=name):
        occupancy(**kw)


def test_the_figure_returns_the_model_and_draws_both_panels():
    r = lab.figures.hardware.draw_occupancy(128, 64, 64, num_stages=3)
    fig = plt.gcf()
    assert r == occupancy(128, 64, 64, num_stages=3) and len(fig.axes) == 2
    plt.close(fig)


def test_the_slider_answers_each_setting_with_the_model_quickly():
    s = lab.widgets.hardware.occupancy_explorer()
    controls = {c.description: c for c in s.children[:-1]}
    for name, value in (
        ("num_stages", 3),
        ("chip", "H100"),
        ("Bc", 256),
        ("dtype", "float32"),
    ):
        start = time.perf_counter()
        controls[name].value = value
        assert (
            time.perf_counter() - start < 2.0
        )  # 50 ms on a quiet machine; a loaded CI is slower
    want = occupancy(128, 256, 64, num_stages=3, dtype="float32", chip="H100")
    assert s.result == want and "OutOfResources" in s.summary_html.value
