"""The experiments of notebook 07, their figures and sliders, and the real activations file."""

from __future__ import annotations

import hashlib
import shutil

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import seeds

import lab
from lab.figures import precision as figs
from lab.widgets import accumulation_explorer, p_format_explorer


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# -- inputs and error measures ------------------------------------------------------------------


def test_gaussian_qkv_shapes_and_spread():
    q, k, v = lab.gaussian_qkv(4096, 64, spread=5.0, rows=16, seed=1)
    assert q.shape == (16, 64) and k.shape == (4096, 64) and v.shape == (4096, 64)
    assert q.dtype == k.dtype == v.dtype == np.float32
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) / 8.0
    assert 4.5 < s.std() < 5.5
    again = lab.gaussian_qkv(4096, 64, spread=5.0, rows=16, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), again))


@pytest.mark.parametrize(
    "kwargs, err",
    [
        ({"N": 0}, ValueError),
        ({"spread": 0.0}, ValueError),
        ({"spread": np.inf}, ValueError),
        ({"rows": 1.5}, TypeError),
    ],
)
def test_gaussian_qkv_errors(kwargs, err):
    args = {"N": 8, "d": 4, "spread": 1.0, "rows": 2} | kwargs
    with pytest.raises(err):
        lab.gaussian_qkv(**args)


def test_relative_error_and_rmse():
    ref = np.array([3.0, 4.0])
    assert lab.relative_error(ref + np.array([0.3, 0.4]), ref) == pytest.approx(0.1)
    assert lab.rmse(np.array([1.0, 3.0]), np.array([0.0, 0.0])) == pytest.approx(
        np.sqrt(5.0)
    )
    assert lab.relative_error(np.zeros(2), np.zeros(2)) == 0.0
    with pytest.raises(ValueError, match="shape"):
        lab.relative_error(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        lab.rmse(np.zeros(2), np.zeros(3))
    with pytest.raises(TypeError, match="o"):
        lab.rmse(np.zeros(2, int), np.zeros(2))


# -- experiment 1 ---------------------------------------------------------------------------------


def test_p_rounding_error_orders_the_formats():
    q, k, v = lab.gaussian_qkv(1024, 32, 1.0, 4, seed=3)
    before = [a.copy() for a in (q, k, v)]
    err = {
        f: lab.p_rounding_error(q, k, v, f, block_k=64)
        for f in ("fp32", "fp16", "bf16", "fp8_e4m3")
    }
    assert err["fp32"] < 1e-5 < err["fp16"] < err["bf16"] < err["fp8_e4m3"] < 0.1
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), before))
    with pytest.raises(ValueError, match="fmt"):
        lab.p_rounding_error(q, k, v, "fp4")


def test_p_error_grid_matches_single_runs():
    Ns, spreads = [64, 256], [1.0, 10.0]
    grid = lab.p_error_grid(
        Ns, spreads, ("fp32", "bf16"), d=16, rows=2, block_k=32, seed=4
    )
    assert set(grid) == {"fp32", "bf16"} and grid["bf16"].shape == (2, 2)
    q, k, v = lab.gaussian_qkv(256, 16, 10.0, 2, seed=4)
    assert grid["bf16"][1, 0] == pytest.approx(
        lab.p_rounding_error(q, k[:64], v[:64], "bf16", block_k=32)
    )
    assert (grid["bf16"] > grid["fp32"]).all()
    with pytest.raises(ValueError, match="formats"):
        lab.p_error_grid(Ns, spreads, ("fp64",))
    with pytest.raises(ValueError, match="empty"):
        lab.p_error_grid([], spreads)


def test_p_underflow_counts_flushed_entries():
    q, k, _ = lab.gaussian_qkv(2048, 32, 20.0, 4, seed=5)
    fp8 = lab.p_underflow(q, k, "fp8_e4m3", block_k=64)
    bf16 = lab.p_underflow(q, k, "bf16", block_k=64)
    assert fp8["p"].shape == (4 * 2048,) and fp8["p"].max() <= 1.0
    assert (
        fp8["flushed"] > 0.5 > bf16["flushed"] and bf16["mass_lost"] < 1e-30
    )  # bf16 keeps fp32's range
    assert 0 < fp8["mass_lost"] < 0.5
    with pytest.raises(ValueError, match="q and k"):
        lab.p_underflow(q, k[:, :8], "fp16")


# -- experiment 2 ---------------------------------------------------------------------------------


def test_low_precision_sum_stagnates_and_blocks_help():
    ones = np.ones(1024, np.float32)
    assert (
        lab.low_precision_sum(ones, "bf16")[-1] == 256.0
    )  # 256 + 1 rounds back to 256 (8 significant bits)
    assert lab.low_precision_sum(ones, "fp16")[-1] == 1024.0
    assert lab.low_precision_sum(np.ones(4096), "fp16")[-1] == 2048.0
    assert lab.low_precision_sum(ones, "bf16", block=64)[-1] == 1024.0
    assert lab.low_precision_sum(ones, "fp32").shape == (1024,)
    assert lab.low_precision_sum(ones, "fp32", block=100).shape == (11,)


def _loop_sum(p, fmt):
    total, out = np.float32(0), []
    for x in lab.round_to(p, fmt):
        total = lab.round_to(np.array([total + x], np.float32), fmt)[0]
        out.append(total)
    return np.array(out, np.float64)


@settings(max_examples=25, deadline=None)
@given(
    seeds,
    st.sampled_from(["fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]),
    st.integers(1, 300),
)
def test_low_precision_sum_rounds_every_addition(seed, fmt, n):
    p = np.random.default_rng(seed).random(n).astype(np.float32)
    np.testing.assert_array_equal(lab.low_precision_sum(p, fmt), _loop_sum(p, fmt))


def test_low_precision_sum_errors_and_input_untouched():
    p = np.linspace(0, 1, 10)
    before = p.copy()
    lab.low_precision_sum(p, "bf16", block=3)
    np.testing.assert_array_equal(p, before)
    with pytest.raises(ValueError, match="block"):
        lab.low_precision_sum(p, "bf16", block=0)
    with pytest.raises(ValueError, match="one-dimensional"):
        lab.low_precision_sum(p.reshape(2, 5), "bf16")


# -- experiment 3 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", lab.FORMATS)
def test_overflow_threshold_is_where_exp_stops_fitting(fmt):
    t = lab.overflow_threshold(fmt)
    log_max = np.log(lab.format_info(fmt)["max"])
    assert log_max <= t < log_max + 0.1
    with np.errstate(over="ignore"):
        assert np.isfinite(lab.round_to(np.array([np.exp(t - 1e-9)]), fmt)).all()
        assert not np.isfinite(lab.round_to(np.array([np.exp(t + 1e-6)]), fmt)).any()


def test_overflow_threshold_fp16_is_11_09():
    assert 11.0898 < lab.overflow_threshold("fp16") < 11.0902


def test_softmax_in_format_breaks_without_the_max():
    s = np.array([[12.0, 11.0, 0.0], [3.0, 2.0, 1.0]])
    safe = lab.softmax_in_format(s, "fp16")
    assert np.isfinite(safe).all() and np.allclose(safe.sum(axis=-1), 1, atol=1e-3)
    naive = lab.softmax_in_format(s, "fp16", subtract_max=False)
    assert np.isnan(naive[0]).any() and np.allclose(naive[1], safe[1], atol=1e-3)
    assert np.isfinite(lab.softmax_in_format(s, "fp32", subtract_max=False)).all()


# -- experiment 4 ---------------------------------------------------------------------------------


def test_outlier_qkv():
    q, k, v = lab.outlier_qkv((2, 200, 16), p=0.05, outlier_std=10.0, seed=7)
    assert q.shape == k.shape == v.shape == (2, 200, 16) and q.dtype == np.float32
    np.testing.assert_array_equal(lab.round_to(q, "fp16"), q)  # stored as fp16 values
    assert (np.abs(q) > 5).mean() > 0.01  # outliers present
    calm = lab.outlier_qkv((2, 200, 16), p=0.0, seed=7)[0]
    assert (np.abs(calm) > 5).mean() == 0
    with pytest.raises(ValueError, match="p"):
        lab.outlier_qkv(p=1.5)
    with pytest.raises(ValueError, match="outlier_std"):
        lab.outlier_qkv(outlier_std=-1)


def test_tiled_beats_standard_on_outliers():
    q, k, v = lab.outlier_qkv((2, 256, 32), seed=8)
    before = [a.copy() for a in (q, k, v)]
    ref = lab.attention_reference(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    )[0]
    e = {
        (alg, f): lab.rmse(fn(q, k, v, f), ref)
        for f in ("fp16", "fp8_e4m3")
        for alg, fn in (
            ("standard", lab.attention_standard_lowp),
            ("tiled", lab.attention_tiled_lowp),
        )
    }
    assert e[("tiled", "fp16")] < e[("standard", "fp16")] < 1e-3
    assert e[("tiled", "fp8_e4m3")] < e[("standard", "fp8_e4m3")] < 0.1
    assert e[("standard", "fp16")] < e[("tiled", "fp8_e4m3")]
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), before))
    # in FP32 the tiled kernel is exact up to the FP16 output
    assert lab.rmse(lab.attention_tiled_lowp(q, k, v, "fp32"), ref) < 1e-3 * lab.rmse(
        ref, 0 * ref
    )


def test_lowp_attention_errors():
    q = np.zeros((2, 8, 4), np.float32)
    with pytest.raises(ValueError, match="q, k, v"):
        lab.attention_standard_lowp(q, q[:, :, :3], q)
    with pytest.raises(ValueError, match="fmt"):
        lab.attention_tiled_lowp(q, q, q, "int8")
    with pytest.raises(ValueError, match="finite"):
        lab.attention_standard_lowp(q + np.nan, q, q)


def test_fa3_table_is_quoted():
    assert lab.FA3_TABLE3_RMSE[("standard", "fp16")] == 3.2e-4
    assert lab.FA3_TABLE3_RMSE[("tiled", "fp8_e4m3")] == 9.1e-3


# -- experiment 5 ---------------------------------------------------------------------------------


def test_matmul_error_by_format():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((32, 256)).astype(np.float32)
    b = rng.standard_normal((256, 32)).astype(np.float32)
    e = {f: lab.matmul_error(a, b, f) for f in ("fp32", "tf32", "bf16")}
    assert e["fp32"] < 1e-6 < 1e-4 < e["tf32"] < 1e-3 < e["bf16"] < 1e-2
    with pytest.raises(ValueError, match="a and b"):
        lab.matmul_error(a, a, "tf32")


# -- experiment 6: the data file --------------------------------------------------------------------


def test_load_activations_checks_the_file(tmp_path):
    acts = lab.load_activations()
    assert acts.q.shape == acts.k.shape == acts.v.shape == (2, 12, 444, 32)
    assert acts.q.dtype == np.float32 and np.isfinite(acts.q).all()
    assert acts.meta["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "Apache-2.0" in acts.meta["model_licence"]
    assert (
        lab.file_sha256(lab.ACTIVATIONS_PATH)
        == hashlib.sha256(lab.ACTIVATIONS_PATH.read_bytes()).hexdigest()
    )
    acts.q[...] = 0  # the caller's copy, not the file's
    assert np.abs(lab.load_activations().q).max() > 0
    bad = tmp_path / "changed.npz"
    shutil.copy(lab.ACTIVATIONS_PATH, bad)
    with open(bad, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="sha256"):
        lab.load_activations(bad)
    assert lab.load_activations(bad, sha256=None).q.shape == acts.q.shape
    with pytest.raises(FileNotFoundError, match="path"):
        lab.load_activations(tmp_path / "missing.npz")
    np.savez(tmp_path / "partial.npz", q=acts.q)
    with pytest.raises(ValueError, match="lacks"):
        lab.load_activations(tmp_path / "partial.npz", sha256=None)


def test_compare_inputs_on_a_slice_of_the_real_inputs():
    acts = lab.load_activations()
    real = tuple(a[1, :2, :128] for a in (acts.q, acts.k, acts.v))
    gauss = lab.gaussian_qkv(128, 32, 1.0, 128, seed=10)
    out = lab.compare_inputs({"real": real, "gauss": gauss}, ("fp16", "fp8_e4m3"))
    for r in out.values():
        assert r["p"]["fp16"] < r["p"]["fp8_e4m3"] < 0.1
        assert r["rmse"][("tiled", "fp16")] < r["rmse"][("standard", "fp8_e4m3")]
        assert r["rms_ref"] > 0 and r["spread"] > 0
    assert abs(out["gauss"]["spread"] - 1.0) < 0.2
    with pytest.raises(ValueError, match="formats"):
        lab.compare_inputs({"g": gauss}, ("fp64",))


# -- figures and sliders ------------------------------------------------------------------------------


def test_figures_return_their_numbers():
    grid = lab.p_error_grid([64, 128], [1.0, 4.0], ("fp32", "fp16"), d=16, rows=2)
    r = figs.draw_p_error_heatmaps(grid, [64, 128], [1.0, 4.0])
    assert r["max"]["fp16"] == grid["fp16"].max()
    r = figs.draw_accumulation(N=1024, block=32, formats=("fp32", "bf16"))
    assert r["seq"]["bf16"] > r["blocked"]["bf16"] > r["seq"]["fp32"]
    r = figs.draw_outliers({k: 1e-3 for k in lab.FA3_TABLE3_RMSE})
    assert r["paper"][("standard", "fp16")] == 3.2e-4
    r = figs.draw_p_explorer("fp16", N=512, spread=2.0, block_k=64)
    assert 0 < r["rel_error"] < 1e-3
    r = figs.draw_matmul_error(Ks=(16, 64), formats=("fp32", "tf32"), n=8)
    assert r["errors"]["tf32"][0] > r["errors"]["fp32"][0]
    res = lab.compare_inputs(
        {"g": lab.gaussian_qkv(64, 16, 1.0, 64, seed=1)}, ("fp16",)
    )
    r = figs.draw_real_vs_gaussian(res)
    assert r["g"]["p"]["fp16"] == res["g"]["p"]["fp16"]


@pytest.mark.parametrize(
    "fmts, panels", [(("fp32", "fp16"), 2), (("fp32", "bf16", "fp16"), 3)]
)
def test_error_heatmaps_two_a_row_and_no_empty_panel(fmts, panels):
    import matplotlib.pyplot as plt

    grid = lab.p_error_grid([64, 128], [1.0, 4.0], fmts, d=16, rows=2)
    figs.draw_p_error_heatmaps(grid, [64, 128], [1.0, 4.0])
    fig = plt.gcf()
    heat = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert len(heat) == panels
    assert (
        {round(ax.get_position().x0, 2) for ax in heat}
        == {  # at most two columns
            round(ax.get_position().x0, 2) for ax in heat[:2]
        }
    )
    assert fig.get_size_inches()[0] <= 12.5
    plt.close(fig)


def test_p_format_explorer_slider():
    w = p_format_explorer(M=512)
    w.update()
    first = w.result
    assert (
        first["fmt"] == "fp8_e4m3" and first["M"] == 512 and first["rel_error"] > 1e-3
    )
    fmt, M, spread, block, values = w.children[:-1]
    assert M.description == "M (keys)" and values.description == "values"
    fmt.value = "fp16"
    assert w.result["fmt"] == "fp16" and w.result["rel_error"] < first["rel_error"]
    spread.value = 30.0
    assert w.result["spread"] == 30.0 and w.result["flushed"] > 0
    r = w.result  # flushed and already-zero are disjoint shares of all entries
    assert r["zero"] == pytest.approx(r["flushed"] + r["zero_fp32"])
    block.value = 16
    assert w.result["block_k"] == 16
    M.value = 1024
    assert w.result["M"] == 1024
    values.value = 1.0
    assert w.result["v_shift"] == 1.0 and "v + 1" in w.summary_html.value
    assert "FP16" in w.summary_html.value and len(w.image.value) > 1000
    assert (
        "relative error of o ‹" in w.summary_html.value
    )  # machine-dependent numbers are masked
    old = p_format_explorer(N=256)  # the older keyword still names M
    old.update()
    assert old.result["M"] == 256


def test_flushed_share_counts_float32_zeros_apart():
    """Past std(s) ~ 16 many P entries are 0 already in float32: the share that is 0 rises with the spread."""
    zeros = []
    for spread in (4.0, 8.0, 16.0, 30.0):
        q, k, _ = lab.gaussian_qkv(2048, 64, spread, 4, seed=0)
        u = lab.p_underflow(q, k, "fp8_e4m3", block_k=64)
        assert u["zero"] == pytest.approx(u["flushed"] + u["zero_fp32"])
        zeros.append(u["zero"])
    assert zeros == sorted(zeros) and u["zero_fp32"] > 0.2


def test_accumulation_explorer_slider():
    w = accumulation_explorer(M=1024)
    w.update()
    fmt, M, block = w.children[:-1]
    assert (
        w.result["M"] == 1024
        and w.result["fmt"] == "bf16"
        and list(w.result["seq"]) == ["fp32", "bf16", "fp16"]
    )
    block.value = 1
    assert w.result["blocked"]["bf16"] == w.result["seq"]["bf16"]
    fmt.value = "fp16"
    assert w.result["fmt"] == "fp16" and list(w.result["seq"]) == ["fp32", "fp16"]
    M.value = 4096
    assert (
        w.result["M"] == 4096 and w.result["seq"]["fp16"] > 0.1
    )  # 2048 + 1 rounds back in FP16
    assert "FP16" in w.summary_html.value and "(FP32: ‹" in w.summary_html.value


# ------------------------------------------------------------------------------------ the outlier inputs


def test_outlier_qkv_unrounded_draws():
    q, k, v = lab.outlier_qkv((2, 64, 16), seed=3, storage=None)
    assert q.dtype == np.float64
    q16 = lab.outlier_qkv((2, 64, 16), seed=3)[0]
    np.testing.assert_array_equal(lab.round_to(q.astype(np.float32), "fp16"), q16)
    with pytest.raises(ValueError):
        lab.outlier_qkv((2, 8, 4), storage="fp12")


def test_matmul_error_truncated_tf32_is_larger_than_rounded():
    g = np.random.default_rng(0)
    a = g.standard_normal((32, 256)).astype(np.float32)
    b = g.standard_normal((256, 32)).astype(np.float32)
    rounded, cut = (
        lab.matmul_error(a, b, "tf32"),
        lab.matmul_error(a, b, "tf32", truncate=True),
    )
    assert 1.5 * rounded < cut < 5 * rounded
    with pytest.raises(ValueError, match="TF32 only"):
        lab.matmul_error(a, b, "fp16", truncate=True)


def test_keys_are_named_M_and_the_older_keyword_N_still_works():
    a = lab.gaussian_qkv(M=64, d=8, rows=2, seed=3)
    b = lab.gaussian_qkv(N=64, d=8, rows=2, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and a[1].shape == (64, 8)
    with pytest.raises(ValueError, match="once"):
        lab.gaussian_qkv(64, N=64)
    g1 = lab.p_error_grid([32, 64], [1.0], ("fp16",), d=8, rows=2)
    g2 = lab.p_error_grid(Ns=[32, 64], spreads=[1.0], formats=("fp16",), d=8, rows=2)
    assert np.array_equal(g1["fp16"], g2["fp16"])


def test_p_error_ablation_swaps_the_values_between_sets():
    rng = np.random.default_rng(0)
    real = tuple(rng.standard_normal((2, 32, 8)).astype(np.float32) for _ in range(3))
    gauss = tuple(rng.standard_normal((2, 32, 8)).astype(np.float32) for _ in range(3))
    out = lab.p_error_ablation(real, gauss, "bf16", block_k=16)
    assert set(out) == {
        (a, b) for a in ("real", "Gaussian") for b in ("real", "Gaussian")
    }
    want = lab.p_rounding_error(real[0][1], real[1][1], gauss[2][1], "bf16", block_k=16)
    assert out[("real", "Gaussian")].shape == (2,)
    assert out[("real", "Gaussian")][1] == want
    with pytest.raises(ValueError, match="one shape"):
        lab.p_error_ablation(real, tuple(x[:, :16] for x in gauss))


def test_values_with_a_mean_lose_the_flushed_mass():
    """Notebook 07's claim: with v + 1 the FP8 error is about the flushed share of the mass; with v, far less."""
    q, k, v = lab.gaussian_qkv(M=2048, d=32, spread=4.0, rows=4, seed=1)
    lost = lab.p_underflow(q, k, "fp8_e4m3", block_k=64)["mass_lost"]
    e0 = lab.p_rounding_error(q, k, v, "fp8_e4m3", block_k=64)
    e1 = lab.p_rounding_error(q, k, v + 1, "fp8_e4m3", block_k=64)
    assert e0 < lost / 2 and 0.5 * lost < e1 < 1.5 * lost


def test_p_matmul_error_torch_matches_numpy_on_the_cpu():
    """The torch path (upcast on the CPU, _scaled_mm for FP8) gives numpy's error of a rounded P."""
    from lab.precision_experiments import p_matmul_error_torch

    for fmt, eps in (("fp16", 2.0**-10), ("bf16", 2.0**-7)):
        r = p_matmul_error_torch(fmt, M=1024, device="cpu")
        assert abs(r["torch"] / r["numpy"] - 1) < 1e-3, (fmt, r)
        assert 0.1 * eps < r["numpy"] < 0.4 * eps  # about 0.21 eps
    with pytest.raises(ValueError, match="fmt"):
        p_matmul_error_torch("fp64", device="cpu")


def test_the_counts_axis_labels_powers_of_ten_in_plain_text():
    from lab.figures.precision import _power_of_ten

    assert [_power_of_ten(y) for y in (1.0, 10.0, 1e8, 1e-3)] == [
        "10⁰",
        "10¹",
        "10⁸",
        "10⁻³",
    ]
    assert _power_of_ten(30.0) == ""  # no label off the powers of ten
    r = figs.draw_p_explorer("fp16", M=512, spread=2.0, block_k=64)
    ax = plt.gcf().axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all(t.startswith("10") and "$" not in t for t in labels)
    assert ax.yaxis.get_minorticklocs().size == 0 and r["M"] == 512


def test_lowp_store_o_leaves_out_only_the_final_store():
    """`store_o=False` returns the FP32 output whose FP16 rounding is the default result."""
    q, k, v = lab.outlier_qkv((2, 40, 16), seed=3)
    for fn in (lab.attention_standard_lowp, lab.attention_tiled_lowp):
        o32, o16 = fn(q, k, v, "fp16", store_o=False), fn(q, k, v, "fp16")
        assert not np.array_equal(o32, o16)
        assert np.array_equal(lab.round_to(o32, "fp16"), o16)


def test_tf32_running_sum_rounds_every_step_as_round_to_does():
    """One running TF32 sum in Python floats gives the same bits as rounding each float32 sum with round_to."""
    from lab.precision import round_to
    from lab.precision_experiments import _accumulate

    rng = np.random.default_rng(3)
    wide = rng.standard_normal(3000) * 10.0 ** rng.uniform(
        -45, 38, 3000
    )  # signs, subnormals, overflow
    for p in (rng.random(5000) * np.exp(-rng.uniform(0, 100, 5000)), wide):
        x = round_to(p.astype(np.float32), "tf32")
        total, want = np.zeros((), np.float32), []
        with np.errstate(over="ignore", invalid="ignore"):
            for xi in x:
                total = round_to(total + xi, "tf32")
                want.append(total[()])
        np.testing.assert_array_equal(
            _accumulate(x, "tf32", 0), np.array(want, np.float32)
        )


def test_p_error_parts_splits_the_rounding_error_of_o():
    """`both` is the kernel's error (p_rounding_error); the flushed entries and the mantissa each give a
    part, adding in quadrature; a scale of 256 before the e4m3 cast keeps the small entries."""
    from lab.precision_experiments import p_error_parts

    q, k, v = lab.gaussian_qkv(M=1024, d=64, spread=4.0, rows=4, seed=1)
    e = p_error_parts(q, k, v, "fp8_e4m3", block_k=64)
    kernel = lab.p_rounding_error(q, k, v, "fp8_e4m3", block_k=64)
    assert abs(e["both"] / kernel - 1) < 1e-3
    assert 0 < e["flush"] < e["both"] and 0 < e["mantissa"] < e["both"]
    assert abs(np.hypot(e["flush"], e["mantissa"]) / e["both"] - 1) < 0.2
    scaled = p_error_parts(q, k, v, "fp8_e4m3", block_k=64, scale=256)
    assert scaled["flush"] < e["flush"] / 10
    assert p_error_parts(q, k, v, "fp32", block_k=64)["flush"] < 1e-5  # nothing flushed


def test_p_error_parts_names_bad_arguments():
    from lab.precision_experiments import p_error_parts

    q, k, v = lab.gaussian_qkv(M=64, d=8, spread=1.0, rows=2, seed=0)
    with pytest.raises(ValueError, match="scale"):
        p_error_parts(q, k, v, "fp16", scale=0)
    with pytest.raises(ValueError, match="q, k, v"):
        p_error_parts(q, k[:, :4], v, "fp16")


def test_compare_inputs_passes_store_o_on():
    """`store_o=False` reaches both kernels: the FP8 and FP16 RMSEs are those of the unstored outputs."""
    g = np.random.default_rng(3)
    qkv = tuple(g.standard_normal((1, 64, 16)).astype(np.float32) for _ in range(3))
    ref, _ = lab.attention_reference(*(x.astype(np.float64) for x in qkv))
    out = lab.compare_inputs({"g": qkv}, ("fp16",), store_o=False)["g"]["rmse"]
    o32 = lab.attention_tiled_lowp(*qkv, "fp16", store_o=False)
    assert out[("tiled", "fp16")] == lab.rmse(o32, ref)


def test_draw_l_stall_matches_the_exact_sum_and_low_precision_sum():
    """The figure's numbers: the exact sum of the rounded row and l in BF16 at the last key."""

    out = lab.figures.precision.draw_l_stall(M=2048, blocks=(1, 64), fmt="bf16")
    plt.close("all")
    s = np.random.default_rng(0).standard_normal(2048)
    p = np.exp(s - s.max())
    assert out["final"][64] == lab.low_precision_sum(p, "bf16", 64)[-1]
    assert out["final"][1] < out["exact"]


def test_shares_never_round_to_all_or_none():
    from lab.figures.precision import _share

    assert _share(0.99974) == "> 99.9%" and _share(1.0) == "100.0%"
    assert (
        _share(0.0002) == "< 0.1%"
        and _share(0.0) == "0.0%"
        and _share(0.934) == "93.4%"
    )
