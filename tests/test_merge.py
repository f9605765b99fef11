"""The merge of partial states (lab.states) in any order, the (o, lse) form, flash-decoding, and the notebook 04 slider."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lab
from lab.figures.merge import draw_merge_orders, merge_depths
from lab.widgets import merge_order_explorer
from tests.strategies import attention_inputs, score_rows, seeds


@st.composite
def states(draw, n_states: int = 3):
    """`n_states` partial states over the same query rows, from scores with some masked (-inf) keys."""
    rng = np.random.default_rng(draw(seeds))
    rows, dv = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    out = []
    for _ in range(n_states):
        Mb = draw(st.integers(0, 12))
        s = rng.standard_normal((rows, Mb)) * draw(st.sampled_from([1.0, 10.0, 50.0]))
        s[rng.random((rows, Mb)) < 0.25] = -np.inf
        out.append(lab.partial_state(s, rng.standard_normal((Mb, dv))))
    return out


def _final(st_):
    return lab.finalize(st_)


def _assert_same(a, b):
    oa, la = _final(a)
    ob, lb = _final(b)
    np.testing.assert_allclose(oa, ob, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(la, lb, rtol=1e-12, atol=1e-12)


# ---- lab.states: the merge is a monoid -------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(states(3))
def test_merge_is_associative(sts):
    a, b, c = sts
    _assert_same(
        lab.merge_states(lab.merge_states(a, b), c),
        lab.merge_states(a, lab.merge_states(b, c)),
    )


@settings(max_examples=60, deadline=None)
@given(states(2))
def test_merge_is_commutative(sts):
    a, b = sts
    _assert_same(lab.merge_states(a, b), lab.merge_states(b, a))


@settings(max_examples=60, deadline=None)
@given(states(1))
def test_empty_state_is_the_identity(sts):
    (a,) = sts
    e = lab.empty_state(a.m.shape, a.acc.shape[-1])
    for merged in (lab.merge_states(a, e), lab.merge_states(e, a)):
        np.testing.assert_array_equal(merged.m, a.m)
        np.testing.assert_allclose(merged.l, a.l, rtol=0, atol=0)
        np.testing.assert_allclose(merged.acc, a.acc, rtol=0, atol=0)


@settings(max_examples=30, deadline=None)
@given(score_rows(max_len=80), st.integers(1, 12), seeds, st.integers(1, 6))
def test_every_merge_order_equals_one_shot_for_random_cuts(s, splits, seed, dv):
    rng = np.random.default_rng(seed)
    M = s.shape[-1]
    splits = min(splits, M)
    v = rng.standard_normal((M, dv))
    one_shot = lab.partial_state(s, v)
    bounds = lab.random_chunk_bounds(M, splits, seed=seed)
    parts = [lab.partial_state(s[:, j0:j1], v[j0:j1]) for j0, j1 in bounds]
    for order in lab.ORDERS:
        _assert_same(lab.reduce_states(parts, order, seed=seed), one_shot)


def test_finalize_of_empty_rows_gives_zero_and_minus_inf_without_warnings():
    e = lab.empty_state((2, 3), 4)
    s = np.array([[-np.inf, -np.inf], [0.5, -np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            o, lse = lab.finalize(e)
            masked = lab.finalize(lab.partial_state(s, np.ones((2, 4))))
            merged = lab.finalize(
                lab.merge_states(
                    lab.partial_state(s, np.ones((2, 4))), lab.empty_state((2,), 4)
                )
            )
    assert np.all(o == 0) and np.all(np.isneginf(lse)) and o.shape == (2, 3, 4)
    assert np.all(masked[0][0] == 0) and np.isneginf(masked[1][0])
    assert masked[1][1] == pytest.approx(0.5) and np.allclose(masked[0][1], 1.0)
    np.testing.assert_array_equal(merged[0], masked[0])


# ---- chunks and merge plans -----------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 200), st.integers(1, 40))
def test_chunk_bounds_cover_the_keys_evenly(M, splits):
    b = lab.chunk_bounds(M, splits)
    assert len(b) == splits and b[0][0] == 0 and b[-1][1] == M
    assert all(x1 == y0 for (_, x1), (y0, _) in zip(b, b[1:]))
    sizes = [j1 - j0 for j0, j1 in b]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 300), st.integers(1, 30), seeds)
def test_random_chunk_bounds_are_nonempty_and_cover(M, splits, seed):
    splits = min(splits, M)
    b = lab.random_chunk_bounds(M, splits, seed=seed)
    assert (
        len(b) == splits
        and b[0][0] == 0
        and b[-1][1] == M
        and all(j1 > j0 for j0, j1 in b)
    )
    assert all(x1 == y0 for (_, x1), (y0, _) in zip(b, b[1:]))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.sampled_from(lab.ORDERS), seeds)
def test_merge_plan_uses_every_part_once(n, order, seed):
    plan = lab.merge_plan(n, order, seed=seed)
    assert len(plan) == n - 1
    consumed = [b for _, b in plan]
    assert len(set(consumed)) == n - 1 and all(
        a not in consumed[: i + 1] for i, (a, _) in enumerate(plan)
    )
    _, ys = merge_depths(n, order, seed=seed)
    assert max(ys) == (math.ceil(math.log2(n)) if order == "tree" else n - 1)
    assert lab.merge_depth(n, order, seed=seed) == max(ys)


def test_chunk_and_plan_errors():
    with pytest.raises(ValueError, match="splits"):
        lab.chunk_bounds(10, 0)
    with pytest.raises(TypeError, match="splits"):
        lab.chunk_bounds(10, 2.5)
    with pytest.raises(ValueError, match="M must be"):
        lab.random_chunk_bounds(3, 5)
    with pytest.raises(ValueError, match="order"):
        lab.merge_plan(4, "random")
    with pytest.raises(ValueError, match="at least one"):
        lab.reduce_states([])


# ---- the (o, lse) form ------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(states(4))
def test_merge_outputs_equals_the_merge_of_states(sts):
    parts = [lab.finalize(s) for s in sts]
    o, lse = lab.merge_outputs([p[0] for p in parts], [p[1] for p in parts])
    o_ref, lse_ref = lab.finalize(lab.reduce_states(sts))
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-12, atol=1e-12)
    o2, lse2 = lab.merge_outputs(
        np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])
    )
    np.testing.assert_array_equal(o2, o)
    np.testing.assert_array_equal(lse2, lse)


def test_merge_outputs_identity_empty_rows_and_errors():
    rng = np.random.default_rng(0)
    o_a, lse_a = rng.standard_normal((3, 2)), rng.standard_normal(3)
    empty = (np.zeros((3, 2)), np.full(3, -np.inf))
    o, lse = lab.merge_output_pair((o_a, lse_a), empty)
    np.testing.assert_allclose(o, o_a, rtol=1e-15)
    np.testing.assert_allclose(lse, lse_a, rtol=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o, lse = lab.merge_outputs([empty[0]] * 3, [empty[1]] * 3)
    assert np.all(o == 0) and np.all(np.isneginf(lse))
    with pytest.raises(ValueError, match="same number of parts"):
        lab.merge_outputs([o_a, o_a], [lse_a])
    with pytest.raises(ValueError, match="lse_parts"):
        lab.merge_outputs([o_a], [np.full(3, np.nan)])
    with pytest.raises(ValueError, match="share shapes"):
        lab.merge_outputs([o_a, o_a[:2]], [lse_a, lse_a[:2]])
    with pytest.raises(TypeError, match="o_parts"):
        lab.merge_outputs([o_a.astype(int)], [lse_a])


# ---- flash-decoding ---------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    attention_inputs(), st.integers(1, 50), st.sampled_from(lab.ORDERS), st.booleans()
)
def test_flash_decoding_matches_reference(qkv, splits, order, causal):
    q, k, v = qkv
    o_ref, lse_ref = lab.attention_reference(q, k, v, causal=causal)
    o, lse = lab.flash_decoding(q, k, v, splits=splits, causal=causal, order=order)
    np.testing.assert_allclose(o, o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-10, atol=1e-12)


def test_flash_decoding_one_token_gqa_float32():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 8, 1, 16)).astype(np.float32)  # (B, Hq, N=1, d)
    k = rng.standard_normal((2, 2, 1000, 16)).astype(np.float32)  # (B, Hkv, M, d)
    v = rng.standard_normal((2, 2, 1000, 8)).astype(np.float32)  # (B, Hkv, M, dv)
    copies = [a.copy() for a in (q, k, v)]
    o_ref, lse_ref = lab.attention_reference(q, k, v)
    o, lse = lab.flash_decoding(q, k, v, splits=7)
    assert o.dtype == np.float32 and o.shape == (2, 8, 1, 8) and lse.shape == (2, 8, 1)
    np.testing.assert_allclose(o, o_ref, atol=1e-5)
    np.testing.assert_allclose(lse, lse_ref, atol=1e-4)
    for a, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, c)


def test_flash_decoding_and_split_states_errors():
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((1, 4)),
        rng.standard_normal((9, 4)),
        rng.standard_normal((9, 3)),
    )
    with pytest.raises(ValueError, match="splits"):
        lab.flash_decoding(q, k, v, splits=0)
    with pytest.raises(ValueError, match="order"):
        lab.flash_decoding(q, k, v, splits=2, order="zigzag")
    with pytest.raises(ValueError, match="share the last dim"):
        lab.flash_decoding(q, k[:, :3], v, splits=2)
    with pytest.raises(ValueError, match="bounds"):
        lab.split_states(q, k, v, splits=2, bounds=[(0, 4), (5, 9)])
    with pytest.raises(ValueError, match="inside"):
        lab.chunk_state(q, k, v, start=3, total=9)
    parts = lab.split_states(q, k, v, splits=3, bounds=[(0, 1), (1, 8), (8, 9)])
    o, lse = lab.finalize(lab.reduce_states(parts, "tree"))
    o_ref, lse_ref = lab.attention_reference(q, k, v)
    np.testing.assert_allclose(o, o_ref, atol=1e-12)


# ---- figure and slider -----------------------------------------------------------------------------------


def test_draw_merge_orders_returns_its_numbers():
    r = draw_merge_orders(splits=5, order="sequential", M=500)
    assert r["depth"] == 4 and r["weight_sum"] == pytest.approx(1.0)
    assert max(r["errors"].values()) < 1e-12 and len(r["weights"]) == 5


def test_merge_order_explorer_reacts_to_its_sliders():
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # a warning would print to stderr under the slider
        w = merge_order_explorer()
    splits, order = w.children[:2]
    assert w.result["splits"] == 8 and w.result["depth"] == 3
    order.value = "sequential"
    assert w.result["order"] == "sequential" and w.result["depth"] == 7
    splits.value = 17
    assert w.result["splits"] == 17 and w.result["depth"] == 16
    order.value = "tree"
    assert w.result["depth"] == 5
    assert max(w.result["errors"].values()) < 1e-12
    assert (
        "tree ‹" in w.summary_html.value
        and "(all &lt; 1e-12: True)" in w.summary_html.value
    )  # errors masked
    splits.value = 1
    assert (
        w.result["depth"] == 0
        and "1 chunk: nothing to merge, depth 0;" in w.summary_html.value
    )


def test_flash_decoding_reads_each_key_value_row_once_per_group_whatever_the_splits():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 1, 16)).astype(
        np.float32
    )  # 8 query heads on 2 key/value heads
    k, v = (rng.standard_normal((1, 2, 100, 16)).astype(np.float32) for _ in range(2))
    for splits in (1, 7, 100, 130):
        with lab.trace.record() as rec:
            lab.flash_decoding(q, k, v, splits=splits)
        assert rec.read_by["k"] == k.nbytes and rec.read_by["v"] == v.nbytes


def test_leaf_order_keeps_chains_uncrossed():
    from lab.figures.merge import leaf_order

    assert leaf_order(8, "tree") == list(range(8))
    assert leaf_order(8, "sequential") == list(range(8))
    order = leaf_order(20, "shuffled", seed=3)
    assert sorted(order) == list(range(20))
    segs, _ = merge_depths(20, "shuffled", seed=3)
    # a chain drawn in leaf order: each merge joins the running result to the next leaf on its right
    assert all(x1 >= x0 for x0, _, x1, _ in segs[::2])


def test_draw_work_items_counts_the_grid():
    from lab.figures.merge import draw_work_items

    r = draw_work_items(B=1, H_kv=2, splits=4, G=4)
    assert r == {"work_items": 8, "query_rows_each": 4, "columns": 2}
    assert draw_work_items(B=2, H_kv=3, splits=5)["work_items"] == 30
    with pytest.raises(ValueError, match="splits"):
        draw_work_items(splits=0)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_draw_pair_merge_puts_o_at_the_share_weighted_average():
    import matplotlib.pyplot as plt

    from lab.figures.merge import draw_pair_merge

    flat, raised = draw_pair_merge(shift=0.0), draw_pair_merge(shift=3.0)
    for r in (flat, raised):
        assert sum(r["share"].values()) == pytest.approx(1.0, abs=1e-12)
        assert r["o"] == pytest.approx(r["weighted"], abs=1e-12)
    # raising chunk y's scores moves mass, and the merged o, towards y
    assert raised["share"]["y"] > flat["share"]["y"] and raised["o"] > flat["o"]
    with pytest.raises(ValueError, match="n_x"):
        draw_pair_merge(n_x=0)
    with pytest.raises(ValueError, match="shift"):
        draw_pair_merge(shift=float("nan"))
    plt.close("all")


def test_merge_order_explorer_float32_toggle_counts_bit_different_runs():
    """The dtype toggle shows the float32 lesson: a shuffled order differs run to run, a tree does not,
    and float32's spread is far above float64's."""
    w = merge_order_explorer()
    splits, order, dtype = w.children[:3]
    spread = {}
    for dt in ("float64", "float32"):
        dtype.value, order.value = dt, "shuffled"
        assert w.result["dtype"] == dt and w.result["runs"] == 10
        assert w.result["distinct"] >= 2, w.result["distinct"]
        assert "bit-different results in 10 runs" in w.summary_html.value
        spread[dt] = w.result["spread"]
        order.value = "tree"
        assert w.result["distinct"] == 1 and w.result["spread"] == 0.0
    assert spread["float32"] > 1e4 * spread["float64"] > 0
    assert "(all &lt; 1e-05: True)" in w.summary_html.value


def test_draw_merge_orders_refuses_an_unknown_dtype():
    with pytest.raises(ValueError, match="dtype"):
        draw_merge_orders(splits=4, dtype="float16")
