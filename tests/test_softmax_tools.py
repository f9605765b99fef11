"""Tests of the tools behind notebooks 01 and 02: overflow scans, counted accesses, the online trace, figures, sliders."""

from __future__ import annotations

import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import blocks, seeds

import lab
from lab.figures.softmax import (
    draw_access_counts,
    draw_online_trace,
    draw_overflow,
    draw_rescale,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --- overflow ---------------------------------------------------------------------------------------


def test_exp_limits_come_from_finfo():
    assert lab.exp_limits("fp16")["max"] == 65504.0
    assert lab.exp_limits("fp16")["log_max"] == pytest.approx(np.log(65504.0))
    assert lab.exp_limits("bf16")["max"] == float(
        ml_dtypes.finfo(ml_dtypes.bfloat16).max
    )
    assert lab.exp_limits("fp64")["log_max"] == pytest.approx(709.782712893384)
    assert lab.exp_limits("fp32")["log_smallest"] == pytest.approx(
        np.log(float(np.finfo(np.float32).smallest_subnormal))
    )
    assert (
        lab.exp_limits("fp16")["smallest_normal"]
        == float(np.finfo(np.float16).smallest_normal)
        == 2.0**-14
    )
    assert lab.exp_limits("bf16")["eps"] == 2.0**-7
    assert lab.works_tolerance("fp32") == lab.WORKS_EPS * float(
        np.finfo(np.float32).eps
    )
    assert lab.works_tolerance(np.float16) == lab.works_tolerance("fp16")


@pytest.mark.parametrize("dtype", list(lab.SOFTMAX_DTYPES))
def test_first_exp_overflow_is_just_past_log_max(dtype):
    s = lab.first_exp_overflow(dtype)
    t = lab.exp_limits(dtype)["log_max"]
    assert s - 1 < t + 0.01 and s > t - 0.01  # the first integer at or past log(max)
    dt = lab.SOFTMAX_DTYPES[dtype]
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(np.array([s], dtype=dt)).astype(np.float64)).all()
        assert np.isfinite(np.exp(np.array([s - 1], dtype=dt)).astype(np.float64)).all()


def test_known_break_points():
    assert lab.first_exp_overflow("fp16") == 12
    assert lab.first_exp_overflow("fp32") == 89
    assert lab.first_exp_overflow("fp64") == 710
    # the row (s, s-1, s-2, s-3) sums to about 1.55·exp(s): in fp16 the sum overflows one step earlier
    assert lab.first_broken_score("fp16") == 11
    assert lab.first_broken_score("fp16", gaps=(0.0,)) == 12
    assert lab.first_broken_score("fp16", direction=-1) < 0


@pytest.mark.parametrize(
    "dtype, s",
    [("fp16", -17), ("fp32", -103), ("fp16", -12), ("bf16", -88), ("fp64", -709)],
)
def test_finite_rows_summing_to_one_can_still_be_broken(dtype, s):
    """At s = -17 in fp16 (and -103 in fp32) the naive softmax is [1, 0, 0, 0]: finite, sums to 1, and 0.36 off."""
    r = lab.naive_vs_safe(float(s), dtypes=(dtype,))[dtype]
    assert np.isfinite(r["naive"]).all() and abs(r["naive"].sum() - 1) < 1e-2
    assert r["naive_broken"] and r["naive_err"] > r["tol"]
    assert not r["safe_broken"]
    if s in (-17, -103):
        np.testing.assert_array_equal(r["naive"], [1.0, 0.0, 0.0, 0.0])
        assert abs(r["naive"][0] - r["ref"][0]) > 0.35


@pytest.mark.parametrize("dtype", list(lab.SOFTMAX_DTYPES))
def test_lower_edge_is_near_the_smallest_normal_not_the_smallest_subnormal(dtype):
    lim = lab.exp_limits(dtype)
    below = lab.first_broken_score(dtype, direction=-1)
    assert lim["log_normal"] - 3 < below < lim["log_normal"] + 3
    assert below > lim["log_smallest"] + 3


@pytest.mark.parametrize("dtype", list(lab.SOFTMAX_DTYPES))
def test_naive_breaks_exactly_at_first_broken_score(dtype):
    up = lab.first_broken_score(dtype)
    down = lab.first_broken_score(dtype, direction=-1)
    for s, broken in (
        (up - 1, False),
        (up, True),
        (down + 1, False),
        (down, True),
        (0, False),
    ):
        r = lab.naive_vs_safe(float(s), dtypes=(dtype,))[dtype]
        assert r["naive_broken"] is broken, (dtype, s)
        assert r["safe_broken"] is False


def test_overflow_table_rows():
    rows = lab.overflow_table()
    assert [r["dtype"] for r in rows] == ["fp16", "bf16", "fp32", "fp64"]
    assert [(r["naive_breaks_below"], r["naive_breaks_above"]) for r in rows] == [
        (-12, 11),
        (-88, 89),
        (-88, 89),
        (-709, 710),
    ]
    for r in rows:
        assert (
            r["naive_breaks_below"] < 0 < r["naive_breaks_above"] <= r["first_exp_inf"]
        )
        assert r["tol"] == lab.works_tolerance(r["dtype"])


def _narrow_sums(e: np.ndarray, dt) -> list[np.ndarray]:
    """Row sums of `e (..., n)` in `dt` three ways: left to right, right to left, and in float64 rounded once."""
    sums = []
    for order in (range(e.shape[-1]), range(e.shape[-1] - 1, -1, -1)):
        order = list(order)
        acc = e[..., order[0] : order[0] + 1]
        for j in order[1:]:
            acc = (acc + e[..., j : j + 1]).astype(dt)
        sums.append(acc)
    sums.append(e.astype(np.float64).sum(axis=-1, keepdims=True).astype(dt))
    return sums


@pytest.mark.parametrize("dtype", list(lab.SOFTMAX_DTYPES))
def test_overflow_verdicts_cannot_flip_on_another_cpu(dtype):
    """Notebook 01's thresholds and broken/ok counts hold for any exp within 4 ulps of its working precision, any sum order.

    numpy computes exp of fp16 and bf16 in float32 and rounds; libm and SIMD exps differ by an ulp or two (float32 or
    float64), and a reduction may add in any order. If every integer s in [-1000, 1000] keeps its verdict (error
    against float64 within 8·eps or not) when every exponential moves by 4 ulps before rounding to the format, and
    under three summation orders, no CPU can print another count.
    """
    dt = lab.SOFTMAX_DTYPES[dtype]
    s = np.arange(-1000, 1001)
    x = lab.score_row(s, dtype)  # (2001, 4) in the dtype
    ref = lab.softmax_safe(x.astype(np.float64))
    want = lab.softmax_broken(lab.softmax_naive(x), ref, dtype)
    first_inf = lab.first_exp_overflow(dtype)
    ulp = float(np.finfo(np.float64 if dtype == "fp64" else np.float32).eps)
    for rel in (-4 * ulp, 4 * ulp):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = (np.exp(x.astype(np.float64)) * (1 + rel)).astype(
                dt
            )  # exp off by 4 ulps, rounded to the dtype
            e_s = (np.exp(s.astype(np.float64)) * (1 + rel)).astype(dt)
            assert (
                int(s[np.flatnonzero(np.isinf(e_s.astype(np.float64)))[0]]) == first_inf
            ), rel
            for total in _narrow_sums(e, dt):
                p = (e / total).astype(dt)
                got = lab.softmax_broken(p, ref, dtype)
                assert (got == want).all(), (rel, s[np.flatnonzero(got != want)])


@settings(max_examples=30, deadline=None)
@given(s=st.integers(-1000, 1000))
def test_safe_softmax_never_breaks(s):
    res = lab.naive_vs_safe(float(s))
    for r in res.values():
        assert not r["safe_broken"]
        assert np.isfinite(r["safe"]).all()
    assert res["fp64"]["safe_err"] == 0.0


def test_score_row_and_overflow_errors():
    np.testing.assert_array_equal(lab.score_row(5.0), [5.0, 4.0, 3.0, 2.0])
    assert lab.score_row([1.0, 2.0], "bf16").shape == (2, 4)
    with pytest.raises(ValueError, match="dtype"):
        lab.exp_limits("fp8")
    with pytest.raises(ValueError, match="gaps"):
        lab.score_row(1.0, gaps=(1.0, 2.0))
    with pytest.raises(ValueError, match="s must be finite"):
        lab.score_row(np.inf)
    with pytest.raises(ValueError, match="direction"):
        lab.first_broken_score("fp32", direction=0)
    with pytest.raises(ValueError, match="limit"):
        lab.first_exp_overflow("fp64", limit=100)


# --- counted accesses ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=seeds, n=st.integers(1, 60), block=blocks)
def test_counted_softmaxes_are_right_and_count_3_4_3(seed, n, block):
    x = np.random.default_rng(seed).standard_normal(n) * 10
    before = x.copy()
    want = {"naive": 3.0, "safe": 4.0, "online": 3.0}
    for method, per in want.items():
        c = lab.count_accesses(method, x, block)
        np.testing.assert_allclose(c.y, lab.softmax_safe(x), rtol=1e-12, atol=1e-15)
        assert c.per_element == per
        assert c.uniform
        assert (
            (c.x_stores == 0).all()
            and (c.y_stores == 1).all()
            and (c.y_loads == 0).all()
        )
        assert (c.x_loads == per - 1).all()
    np.testing.assert_array_equal(x, before)


def test_counting_array_counts_each_element():
    a = lab.CountingArray(np.arange(5.0), "x")
    assert a[1] == 1.0
    a[2:4]
    a[3] = 7.0
    np.testing.assert_array_equal(a.loads, [0, 1, 1, 1, 0])
    np.testing.assert_array_equal(a.stores, [0, 0, 0, 1, 0])
    assert a.peek()[3] == 7.0
    np.testing.assert_array_equal(a.loads, [0, 1, 1, 1, 0])  # peek does not count
    with pytest.raises(TypeError, match="x"):
        a[[1, 2]]
    with pytest.raises(ValueError, match="1-D"):
        lab.CountingArray(np.ones((2, 2)), "x")


def test_counted_online_with_masked_entries():
    x = np.array([-np.inf, -np.inf, 1.0, -np.inf, 3.0])
    c = lab.count_accesses("online", x, block=2)
    np.testing.assert_allclose(c.y, lab.softmax_safe(x))
    assert lab.count_accesses("safe", np.full(3, -np.inf)).y.tolist() == [0.0, 0.0, 0.0]


def test_count_accesses_errors():
    with pytest.raises(ValueError, match="method"):
        lab.count_accesses("fast", np.ones(3))
    with pytest.raises(ValueError, match="x"):
        lab.count_accesses("safe", np.ones((2, 3)))
    with pytest.raises(TypeError, match="x"):
        lab.count_accesses("safe", np.arange(3))
    with pytest.raises(ValueError, match="block"):
        lab.count_accesses("safe", np.ones(3), block=0)
    with pytest.raises(ValueError, match="NaN"):
        lab.count_accesses("online", np.array([np.nan]))


# --- online trace -------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    seed=seeds,
    n=st.integers(1, 60),
    block=blocks,
    scale=st.sampled_from([0.5, 3.0, 50.0]),
)
def test_trace_matches_online_normalizer_and_is_exact(seed, n, block, scale):
    x = lab.demo_scores(n, shift=2.0, scale=scale, seed=seed % 1000)
    tr = lab.online_trace(x, block)
    nb = -(-n // block)
    assert len(tr["block"]) == nb and tr["stop"][-1] == n and tr["start"][0] == 0
    m, l = lab.online_normalizer(x, block)
    assert tr["m_new"][-1] == m and tr["l_new"][-1] == pytest.approx(
        float(l), rel=1e-12
    )
    np.testing.assert_allclose(
        tr["l_new"], tr["l_direct"], rtol=1e-12
    )  # e^(x − m′) = e^(x − m)·α
    assert (
        tr["m"][0] == -np.inf and tr["l"][0] == 0.0 and tr["alpha"][0] == 0.0
    )  # the empty state before block 0
    np.testing.assert_array_equal(
        tr["m"][1:], tr["m_new"][:-1]
    )  # each update starts where the last ended
    np.testing.assert_array_equal(tr["l"][1:], tr["l_new"][:-1])
    assert ((tr["alpha"] > 0) & (tr["alpha"] <= 1))[1:].all()
    np.testing.assert_allclose(tr["alpha"][1:], np.exp(tr["m"][1:] - tr["m_new"][1:]))
    assert (np.diff(tr["m_new"]) >= 0).all()
    np.testing.assert_array_equal(tr["m_new"], np.maximum.accumulate(tr["block_max"]))


def test_trace_table_text():
    tr = lab.online_trace(np.array([0.0, 2.0, 1.0, 5.0, -1.0]), 2)
    text = lab.trace_table(tr)
    lines = text.splitlines()
    assert len(lines) == 2 + 3
    assert "α" in lines[0] and "5.000" in lines[-1]
    assert "more blocks" in lab.trace_table(
        lab.online_trace(np.zeros(10), 1), max_rows=3
    )
    with pytest.raises(ValueError, match="max_rows"):
        lab.trace_table(tr, max_rows=0)


def test_demo_scores_and_online_vs_safe():
    x = lab.demo_scores(32, shift=5.0, scale=2.0, seed=3)
    z = lab.demo_scores(32, seed=3)
    np.testing.assert_allclose(x, 5.0 + 2.0 * z)
    r = lab.online_vs_safe(x, 7)
    assert r["max_abs_diff"] < 1e-15
    assert r["m"] == r["m_safe"] and r["l"] == pytest.approx(r["l_safe"], rel=1e-12)
    with pytest.raises(ValueError, match="scale"):
        lab.demo_scores(8, scale=0.0)
    with pytest.raises(ValueError, match="n"):
        lab.demo_scores(0)
    with pytest.raises(ValueError, match="block"):
        lab.online_trace(x, 0)
    with pytest.raises(ValueError, match="1-D"):
        lab.online_vs_safe(np.ones((2, 2)), 1)


# --- figures ------------------------------------------------------------------------------------------


def test_figures_return_their_numbers():
    r = draw_overflow(100)
    assert (
        r["results"]["fp16"]["naive_broken"]
        and not r["results"]["fp64"]["naive_broken"]
    )
    # the bars are drawn to the fine scan, not to the first broken integers (11 and -12)
    from lab.overflow import break_points

    fine = break_points("fp16")
    assert r["breaks"]["fp16"] == {
        k: fine[k] for k in ("above", "below", "lowest_working")
    }
    assert 10.6 < fine["above"] < 11 and -9.7 < fine["below"] < -9.2
    assert fine["lowest_working"] < -11  # some s below the edge work, by luck
    r = draw_access_counts(n=64, block=4)
    assert r["per_element"] == {"naive": 3.0, "safe": 4.0, "online": 3.0}
    r = draw_online_trace(block=8)
    assert len(r["trace"]["block"]) == 8 and r["max_abs_diff"] < 1e-15


def test_the_rescale_figure_adds_up_to_the_step_of_the_trace():
    """The bars of draw_rescale are the step: alpha * l + the block's sum is the trace's l' at that block."""
    x = lab.demo_scores(64)
    tr = lab.online_trace(x, 8)
    r = draw_rescale(block=8, step=5)
    assert r["alpha"] == tr["alpha"][5] < 1 and r["m_new"] == tr["m_new"][5] > r["m"]
    assert np.isclose(r["l"], tr["l"][5], rtol=1e-13)
    assert np.isclose(r["l_new"], tr["l_new"][5], rtol=1e-13)
    assert np.isclose(r["alpha"] * r["l"] + r["block_sum"], r["l_new"], rtol=1e-13)


def test_the_rescale_figure_keeps_its_legends_inside_the_axes():
    import matplotlib.pyplot as plt

    lab.setup_notebook()
    draw_rescale(block=8, step=5)
    fig = plt.gcf()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        box, frame = (
            ax.get_legend().get_window_extent(renderer),
            ax.get_window_extent(renderer),
        )
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 + 1, ax.get_title()
    plt.close(fig)


def test_the_trace_figure_writes_shifted_scores_without_an_offset():
    import matplotlib.pyplot as plt

    draw_online_trace(shift=1000.0, scale=0.25)
    fig = plt.gcf()
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.yaxis.get_offset_text().get_text() == ""
    assert any(
        float(t.get_text().replace("−", "-")) > 900 for t in ax.get_yticklabels()
    )
    plt.close(fig)


# --- sliders ------------------------------------------------------------------------------------------


def test_overflow_slider_follows_the_largest_score():
    w = lab.widgets.softmax_overflow()
    (s,) = w.children[:-1]
    assert w.result["s"] == 100.0 and w.result["results"]["fp32"]["naive_broken"]
    s.value = 50
    assert w.result["s"] == 50.0
    res = w.result["results"]
    assert (
        res["fp16"]["naive_broken"]
        and not res["fp32"]["naive_broken"]
        and not res["bf16"]["naive_broken"]
    )
    s.value = 5
    assert not any(r["naive_broken"] for r in w.result["results"].values())
    s.value = -120
    assert (
        w.result["results"]["fp32"]["naive_broken"]
        and not w.result["results"]["fp64"]["naive_broken"]
    )
    assert "fp16" in w.summary_html.value


def test_trace_slider_changes_the_trace_not_the_result():
    w = lab.widgets.online_softmax_trace()
    block, shift, scale = w.children[:-1]
    assert len(w.result["trace"]["block"]) == 8
    m0, l0 = w.result["m"], w.result["l"]
    block.value = 5
    assert len(w.result["trace"]["block"]) == 13 and w.result["max_abs_diff"] < 1e-12
    assert w.result["m"] == m0 and w.result["l"] == pytest.approx(l0, rel=1e-12)
    shift.value = 500.0
    assert w.result["m"] == pytest.approx(m0 + 500.0) and w.result[
        "l"
    ] == pytest.approx(l0, rel=1e-9)
    assert w.result["max_abs_diff"] < 1e-12
    scale.value = 10.0
    assert w.result["scale"] == 10.0 and w.result["max_abs_diff"] < 1e-12
    assert w.result["l"] < l0  # a sharper row: one score dominates
    assert (
        "max |online − safe| = ‹" in w.summary_html.value
    )  # masked: it varies by machine
    assert "(&lt; 1e-12: True)" in w.summary_html.value


def test_softmax_error_and_broken_rows():
    ref = np.array(
        [
            [0.5, 0.5],
            [0.5, 0.5],
            [0.5, 0.5],
            [0.25, 0.75],
            [0.3, 0.7],
            [0.0, 1.0],
            [0.0, 1.0],
        ]
    )
    p = np.array(
        [
            [0.5, 0.5],
            [np.nan, 0.0],
            [0.0, 0.0],
            [0.25, np.inf],
            [0.3 * (1 + 1e-5), 0.7],
            [0.0, 1.0],
            [1e-9, 1.0],
        ]
    )
    err = lab.softmax_error(p, ref)
    assert (
        err[0] == 0
        and np.isinf(err[[1, 3]]).all()
        and err[2] == 1
        and err[4] == pytest.approx(1e-5)
        and err[5] == 0
        and np.isinf(err[6])
    )
    assert lab.softmax_broken(p, ref, "fp64").tolist() == [
        False,
        True,
        True,
        True,
        True,
        False,
        True,
    ]
    assert lab.softmax_broken(p, ref, "fp16").tolist() == [
        False,
        True,
        True,
        True,
        False,
        False,
        True,
    ]
    bf = np.array([0.25, 0.75], dtype=ml_dtypes.bfloat16)
    assert lab.softmax_broken(bf, np.array([0.25, 0.75])).shape == ()
    with pytest.raises(ValueError, match="same shape"):
        lab.softmax_error(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="dtype"):
        lab.works_tolerance(np.int32)


@pytest.mark.parametrize("n, block", [(10, 1), (4096, 128), (7, 3), (5, 100)])
def test_count_accesses_counts_the_exponentials_evaluated(n, block):
    """Two exponentials per score in the naive and the safe softmax; the online one adds one α per block."""
    x = np.random.default_rng(n).standard_normal(n)
    blocks = -(-n // block)
    counts = {
        m: lab.count_accesses(m, x, block).exp_evaluations
        for m in ("naive", "safe", "online")
    }
    assert counts == {"naive": 2 * n, "safe": 2 * n, "online": 2 * n + blocks}
