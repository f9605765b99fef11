"""Tests of notebook 00's traffic model: the roofline, the FLOPs and bytes of standard attention's pieces, the figure
and the slider built on them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

import lab
from lab.figures.memory import draw_attention_roofline


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_attainable_flops_is_the_lower_roof():
    np.testing.assert_allclose(
        lab.attainable_flops([1.0, 10.0, 1000.0], 100.0, 10.0), [10.0, 100.0, 100.0]
    )
    assert lab.attainable_flops(
        lab.ridge_point("A100"),
        lab.chip("A100")["matmul_flops"],
        lab.chip("A100")["hbm_bytes_per_s"],
    ) == pytest.approx(lab.chip("A100")["matmul_flops"])
    with pytest.raises(ValueError, match="bandwidth"):
        lab.attainable_flops(1.0, 1.0, 0.0)


@pytest.mark.parametrize(
    "N, M, d, dv, itemsize",
    [(4096, 4096, 64, 64, 2), (1000, 3000, 128, 32, 4), (17, 5, 8, 3, 8)],
)
def test_attention_traffic_counts(N, M, d, dv, itemsize):
    rows = {
        r["piece"]: r
        for r in lab.attention_traffic(N, M, d=d, dv=dv, itemsize=itemsize)
    }
    s, p, o = rows["S = scale·QKᵀ"], rows["P = softmax(S)"], rows["O = PV"]
    std, fused = rows["standard, total"], rows["fused: Q, K, V in, O out"]
    # F counts the matmuls only, as notebook 08's lab.attention_flops does; the softmax's are other ops
    assert s["flops"] == 2 * N * M * d and o["flops"] == 2 * N * M * dv
    assert p["flops"] == 0 and p["ops"] == lab.SOFTMAX_OPS_PER_ELEMENT * N * M
    assert s["ops"] == o["ops"] == 0
    assert s["bytes"] == (N * d + M * d + N * M) * itemsize
    assert p["bytes"] == 2 * N * M * itemsize
    assert o["bytes"] == (N * M + M * dv + N * dv) * itemsize
    assert std["flops"] == s["flops"] + o["flops"] and std["ops"] == p["ops"]
    if d == dv:
        assert std["flops"] == lab.attention_flops(1, 1, N, d, M=M)
    # the fused kernel: the same matmuls, each exponential computed once and kept on chip
    assert fused["flops"] == std["flops"]
    assert fused["ops"] == lab.memory.FUSED_SOFTMAX_OPS_PER_ELEMENT * N * M
    assert std["bytes"] == s["bytes"] + p["bytes"] + o["bytes"]
    assert fused["bytes"] == (N * d + M * d + M * dv + N * dv) * itemsize
    assert std["time"] == pytest.approx(s["time"] + p["time"] + o["time"])
    for r in rows.values():
        assert r["intensity"] == pytest.approx(r["flops"] / r["bytes"])
        assert r["op_intensity"] == pytest.approx(r["ops"] / r["bytes"])
        assert r["time"] >= max(r["t_compute"], r["t_memory"]) * (1 - 1e-12)


@pytest.mark.parametrize("chip_name", list(lab.CHIPS))
@pytest.mark.parametrize("d", [64, 128])
def test_standard_attention_is_memory_bound_and_the_fused_kernel_is_not(chip_name, d):
    rows = {
        r["piece"]: r for r in lab.attention_traffic(4096, d=d, chip_name=chip_name)
    }
    ridge = lab.ridge_point(chip_name)
    assert (
        rows["P = softmax(S)"]["bound"] == "memory"
        and rows["P = softmax(S)"]["intensity"] < ridge / 50
    )
    assert (
        rows["S = scale·QKᵀ"]["bound"] == "memory"
        and rows["S = scale·QKᵀ"]["intensity"] < ridge
    )
    assert rows["standard, total"]["bound"] == "memory"
    assert rows["fused: Q, K, V in, O out"]["bound"] == "compute"
    fused = rows["fused: Q, K, V in, O out"]
    assert fused["time"] < rows["standard, total"]["time"] / 1.5
    # below the matmul roof: its softmax runs at the FP32 and exponential rates, not overlapped
    assert fused["flops"] / fused["time"] < lab.chip(chip_name)["matmul_flops"]
    assert fused["t_compute"] > fused["flops"] / lab.chip(chip_name)["matmul_flops"]


def test_the_standard_total_names_one_bound_only_when_its_pieces_agree():
    rows = {r["piece"]: r for r in lab.attention_traffic(4096, d=256, chip_name="A100")}
    pieces = [rows[p] for p in ("S = scale·QKᵀ", "P = softmax(S)", "O = PV")]
    assert {r["bound"] for r in pieces} == {"compute", "memory"}
    total = rows["standard, total"]
    assert total["bound"] == "mixed"
    assert total["time"] == pytest.approx(sum(r["time"] for r in pieces))


def test_the_softmax_prices_its_exponentials_at_the_exponential_rate():
    c = lab.chip("A100")
    soft = {r["piece"]: r for r in lab.attention_traffic(1024, d=64)}["P = softmax(S)"]
    nm, exps = 1024 * 1024, lab.memory.SOFTMAX_EXPS_PER_ELEMENT * 1024 * 1024
    # a lone max, subtract, add or multiply: 108 SMs × 64 FP32 lanes × 1.41 GHz, not the FMA-counting 19.5e12
    lone = 108 * 64 * 1.41e9
    want = (7 * nm - exps) / lone + exps / c["exp_per_s"]
    assert soft["t_compute"] == pytest.approx(want)
    assert soft["t_compute"] > 7 * nm / lone  # slower than FP32 alone
    ratio = soft["t_memory"] / soft["t_compute"]
    assert ratio == pytest.approx((4 / 1.555e12) / (5 / lone + 2 / (108 * 16 * 1.41e9)))
    assert round(ratio, 2) == 1.93
    assert soft["t_compute"] == pytest.approx(7 * nm / lab.memory.softmax_peak("A100"))


def test_the_fused_kernel_exponentiates_each_score_once():
    c, nm = lab.chip("A100"), 4096 * 4096
    rows = {r["piece"]: r for r in lab.attention_traffic(4096, d=64)}
    fused, s = rows["fused: Q, K, V in, O out"], rows["S = scale·QKᵀ"]
    ops = lab.memory.FUSED_SOFTMAX_OPS_PER_ELEMENT
    assert lab.memory.FUSED_SOFTMAX_EXPS_PER_ELEMENT == 1
    want = 2 * s["t_compute"] + (ops - 1) * nm / c["fp32_ops_per_s"]
    assert fused["t_compute"] == pytest.approx(want + nm / c["exp_per_s"])


def test_more_passes_over_s_cost_time_in_proportion():
    two = {r["piece"]: r for r in lab.attention_traffic(4096, softmax_accesses=2)}[
        "P = softmax(S)"
    ]
    four = {r["piece"]: r for r in lab.attention_traffic(4096, softmax_accesses=4)}[
        "P = softmax(S)"
    ]
    assert four["ops"] == two["ops"] and four["time"] == pytest.approx(2 * two["time"])


def test_attention_traffic_errors():
    with pytest.raises(ValueError, match="d"):
        lab.attention_traffic(16, d=0)
    with pytest.raises(ValueError, match="chip"):
        lab.attention_traffic(16, chip_name="V100")


def test_roofline_figure_and_slider():
    r = draw_attention_roofline("H100", d=128, softmax_accesses=4)
    assert r["chip"] == "H100" and r["sram"] is None and r["speedup"] > 1
    assert len(r["rows"]) == 5
    w = lab.widgets.memory.roofline_explorer()
    chip_name, d, accesses = w.children[:-1]
    t64 = {x["piece"]: x for x in w.result["rows"]}
    d.value = 128
    t128 = {x["piece"]: x for x in w.result["rows"]}
    assert t128["S = scale·QKᵀ"]["flops"] == 2 * t64["S = scale·QKᵀ"]["flops"]
    assert "operations/B" in w.summary_html.value
    accesses.value = 4
    assert w.result["softmax_accesses"] == 4
    chip_name.value = "H100"
    assert (
        w.result["chip"] == "H100"
        and "H100" in w.summary_html.value
        and "ridge" in w.summary_html.value
    )


def _sources(name: str) -> list[str]:
    import json
    import pathlib

    path = (
        pathlib.Path(__file__).resolve().parent.parent / "notebooks" / f"{name}.ipynb"
    )
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]


def test_notebook_00_states_bandwidth_and_the_roofline_before_any_capacity_figure():
    cells = _sources("00_the_memory_wall")
    first = lambda *marks: next(
        i for i, c in enumerate(cells) if any(m in c for m in marks)
    )
    bandwidth = first("lab.chip(")
    roofline = first("draw_attention_roofline")
    capacity = first("attention_bytes(", "peak_bytes(", "GiB")
    assert bandwidth < roofline < capacity
    assert (
        "sram_bytes_per_s" in cells[bandwidth] and "hbm_bytes_per_s" in cells[bandwidth]
    )


@pytest.mark.parametrize(
    "name", ["00_the_memory_wall", "01_three_pass_softmax", "02_online_softmax"]
)
def test_notebooks_00_to_02_use_one_set_of_symbols(name):
    text = "\n".join(_sources(name))
    for old in ("m_{old}", "m_{new}", "m_old", "l_{old}", "l_old"):
        assert old not in text, (name, old)


def test_traffic_rows_show_f_and_the_other_operations_apart_within_100_characters():
    rows = lab.traffic_rows(4096, d=64)
    soft = rows[1]
    assert soft["F GFLOP"] == 0 and soft["other G ops"] == pytest.approx(
        0.117, rel=0.01
    )
    assert rows[3]["F GFLOP"] == pytest.approx(
        lab.attention_flops(1, 1, 4096, 64) / 1e9
    )
    table = lab.format_table(rows, floats=".3g")
    assert max(len(line) for line in table.splitlines()) <= 100


@pytest.mark.parametrize("chip_name", list(lab.CHIPS))
def test_the_memory_picture_draws_lab_s_figures_and_cites_their_sources(chip_name):
    """Capacities in binary units on both sides: the A100's HBM 867 times its on-chip SRAM (40 GiB / 47.25 MiB)."""
    c = lab.chip(chip_name)
    r = lab.figures.memory.draw_memory_hierarchy(chip_name, N=4096, itemsize=2)
    fig = plt.gcf()
    assert r["sram"] == c["sms"] * (c["registers_per_sm"] + c["l1_shared_per_sm"])
    # NVIDIA's GB of HBM read as GiB, binary like the L2's MB: the ratio divides bytes by bytes
    assert (
        r["hbm"] == c["hbm_bytes"] / 1e9 * 2**30 and r["hbm_bw"] == c["hbm_bytes_per_s"]
    )
    assert r["s_bytes"] == 4096 * 4096 * 2
    texts = [t.get_text() for t in fig.axes[0].texts] + [fig.axes[0].get_title()]
    drawn = "\n".join(texts)
    assert f"{c['hbm_bytes'] / 1e9:.0f} GiB" in drawn
    assert f"HBM {r['hbm'] / r['sram']:,.0f}× larger" in drawn
    assert f"{c['hbm_bytes_per_s'] / 1e12:g} TB/s" in drawn
    assert f"{r['sram'] / 2**20:.0f} MiB" in drawn and "32 MiB" in drawn
    assert ("not published" in drawn) == (c["sram_bytes_per_s"] is None)
    # every figure drawn has its source, and the sources are on the figure
    assert set(r["sources"]) <= set(lab.hardware.SOURCES[chip_name])
    assert all(cited in drawn for cited in r["cited"]) and r["cited"]
    assert "not published" not in " ".join(r["cited"])
    if chip_name == "A100":
        assert "HBM 867× larger" in drawn
    # legible projected: no text under 12 points, the message in 15 or more
    sizes = [t.get_fontsize() for t in fig.axes[0].texts if t.get_text()]
    assert min(sizes) >= 12 and sorted(sizes)[len(sizes) // 2] >= 15


def test_the_memory_picture_follows_the_hardware_table(monkeypatch):
    monkeypatch.setitem(lab.hardware.CHIPS["A100"], "hbm_bytes", 80e9)
    r = lab.figures.memory.draw_memory_hierarchy("A100")
    drawn = "\n".join(t.get_text() for t in plt.gcf().axes[0].texts)
    assert r["hbm"] == 80 * 2**30 and "80 GiB" in drawn


def test_the_memory_picture_names_a_bad_argument():
    with pytest.raises(ValueError, match="N"):
        lab.figures.memory.draw_memory_hierarchy("A100", N=0)
    with pytest.raises(ValueError, match="chip"):
        lab.figures.memory.draw_memory_hierarchy("V100")


def test_the_roofline_slider_draws_the_figure_s_numbers_on_one_frame():
    """Every setting draws `draw_attention_roofline`'s rows, its bars as long as their times, against
    axes that keep one range for every chip and d (so a move renders no new frame)."""
    from lab.widgets.memory import frame_limits

    w = lab.widgets.memory.roofline_explorer()
    chip_name, d, accesses = w.children[:3]
    (lo, top), (zero, longest) = frame_limits()
    for name, dv, a in (("A100", 64, 2), ("H100", 256, 4), ("A100", 32, 4)):
        chip_name.value, d.value, accesses.value = name, dv, a
        want = draw_attention_roofline(name, d=dv, softmax_accesses=a)
        plt.close("all")
        assert (
            w.result["rows"] == want["rows"] and w.result["speedup"] == want["speedup"]
        )
        roof, bars = w.figure.axes[:2]
        assert roof.get_ylim() == (lo, top) and bars.get_xlim() == (zero, longest)
        widths = sorted(round(p.get_width(), 9) for p in bars.patches)
        times = [r[k] * 1e6 for r in want["rows"] for k in ("t_memory", "t_compute")]
        assert widths == sorted(round(t, 9) for t in times)
        title = roof.get_title()
        assert name in title and f"d = {dv}" in title
    assert len(w._frames) == 1  # one frame rendered, whatever the chip, d or accesses


def test_line_peaks_measures_each_line_of_a_function():
    from lab.memory import line_peaks

    def three_arrays(q, k, v):
        s = q @ k.T
        p = np.exp(s - s.max(axis=-1, keepdims=True))  # s, s - max, exp of it
        s += 0  # in place: nothing new
        return p @ v

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((512, 16)) for _ in range(3))
    rows, o = line_peaks(three_arrays, q, k, v)
    one = 512 * 512 * 8
    arrays = {r["source"].strip().split()[0]: r["peak"] / one for r in rows}
    assert [r["source"].strip().split()[0] for r in rows] == ["s", "p", "s", "return"]
    assert 0.95 < arrays["s"] < 2.2 and 2.9 < arrays["p"] < 3.2
    assert rows[2]["peak"] / one < 2.2  # s and p alive, no third array
    np.testing.assert_allclose(o, three_arrays(q, k, v))
    with pytest.raises(TypeError, match="fn must be a Python function"):
        line_peaks(np.exp, q)


def test_the_line_figure_draws_each_line_and_says_what_is_not_written():
    from lab.figures.memory import draw_line_peaks

    def lean(q, k, v):
        s = q @ k.T
        np.exp(s, out=s)
        return s @ v

    def stub(q, k, v):
        raise NotImplementedError

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((256, 8)).astype(np.float32) for _ in range(3))
    out = draw_line_peaks([lean, stub], q, k, v)
    assert out["stub"]["peak_arrays"] is None
    assert len(out["lean"]["rows"]) == 3 and 0.95 < out["lean"]["peak_arrays"] < 1.3
    ax = plt.gcf().axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "s = q @ k.T"
    with pytest.raises(TypeError, match="fns"):
        draw_line_peaks([], q, k, v)
