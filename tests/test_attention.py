"""Properties of the numpy attention kernels against the float64 oracle."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import attention_inputs, blocks

import lab

SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(attention_inputs(), blocks, blocks, st.booleans(), st.sampled_from(lab.VARIANTS))
def test_flash_matches_reference_for_any_blocks(qkv, Br, Bc, causal, variant):
    q, k, v = qkv
    o_ref, lse_ref = lab.attention_reference(q, k, v, causal=causal)
    o, lse = lab.flash_attention_numpy(
        q, k, v, block_q=Br, block_k=Bc, causal=causal, variant=variant
    )
    assert o.shape == o_ref.shape and lse.shape == lse_ref.shape
    np.testing.assert_allclose(o, o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[fin], lse_ref[fin], rtol=1e-10, atol=1e-12)


@SETTINGS
@given(attention_inputs(), blocks, blocks, st.booleans())
def test_fa1_equals_fa2(qkv, Br, Bc, causal):
    q, k, v = qkv
    o1, lse1 = lab.flash_attention_numpy(
        q, k, v, block_q=Br, block_k=Bc, causal=causal, variant="fa1"
    )
    o2, lse2 = lab.flash_attention_numpy(
        q, k, v, block_q=Br, block_k=Bc, causal=causal, variant="fa2"
    )
    np.testing.assert_allclose(o1, o2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse1, lse2, rtol=1e-10, atol=1e-12)


@SETTINGS
@given(attention_inputs(dtype=np.float32), st.booleans())
def test_float32_inputs_stay_float32_and_close(qkv, causal):
    q, k, v = qkv
    o, lse = lab.flash_attention_numpy(q, k, v, block_q=7, block_k=5, causal=causal)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    o_ref, _ = lab.attention_reference(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=causal
    )
    np.testing.assert_allclose(o, o_ref, rtol=1e-4, atol=1e-5)


def test_float16_inputs_accumulate_in_float32():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 300, 32)).astype(np.float16) for _ in range(3))
    o, lse = lab.flash_attention_numpy(q, k, v)
    assert o.dtype == np.float16 and lse.dtype == np.float32
    o_ref, _ = lab.attention_reference(q, k, v)
    assert np.abs(o.astype(np.float64) - o_ref.astype(np.float64)).max() < 2e-3


@pytest.mark.parametrize("variant", lab.VARIANTS)
@pytest.mark.parametrize("N, M", [(5, 3), (1, 4), (7, 7), (3, 10)])
def test_causal_rows_without_keys_give_zero_and_minus_inf(variant, N, M):
    rng = np.random.default_rng(1)
    q, k, v = (
        rng.standard_normal((N, 8)),
        rng.standard_normal((M, 8)),
        rng.standard_normal((M, 4)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o, lse = lab.flash_attention_numpy(
            q, k, v, block_q=2, block_k=3, causal=True, variant=variant
        )
        o_ref, lse_ref = lab.attention_reference(q, k, v, causal=True)
        o_naive = lab.attention_naive(q, k, v, causal=True)
    empty = np.arange(N) + (M - N) < 0  # query i sees no key when i + M - N < 0
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    np.testing.assert_array_equal(o[empty], 0.0)
    assert np.isneginf(lse[empty]).all() and np.isneginf(lse_ref[empty]).all()
    assert np.isfinite(lse[~empty]).all()
    np.testing.assert_allclose(o, o_ref, atol=1e-12)
    np.testing.assert_allclose(o_naive, o_ref, atol=1e-12)


def test_causal_is_bottom_right_aligned():
    rng = np.random.default_rng(2)
    N, M = 3, 6
    q, k, v = (
        rng.standard_normal((N, 4)),
        rng.standard_normal((M, 4)),
        rng.standard_normal((M, 2)),
    )
    o, _ = lab.flash_attention_numpy(q, k, v, causal=True)
    # the last query sees every key; the first sees keys 0..M-N
    np.testing.assert_allclose(
        o[-1], lab.attention_reference(q[-1:], k, v)[0][0], atol=1e-12
    )
    np.testing.assert_allclose(
        o[0],
        lab.attention_reference(q[:1], k[: M - N + 1], v[: M - N + 1])[0][0],
        atol=1e-12,
    )


@settings(max_examples=25, deadline=None)
@given(
    attention_inputs(spread=None),
    st.sampled_from([1e2, 1e3, 1e4]),
    st.booleans(),
    st.sampled_from(lab.VARIANTS),
)
def test_huge_scores_stay_finite(qkv, magnitude, causal, variant):
    q, k, v = qkv
    # scores up to about ±magnitude: q·k·scale with |q|, |k| chosen so that the largest |s| reaches it
    q = q / np.abs(q).max() * np.sqrt(magnitude * np.sqrt(q.shape[-1]))
    k = k / np.abs(k).max() * np.sqrt(magnitude * np.sqrt(q.shape[-1]))
    o, lse = lab.flash_attention_numpy(
        q, k, v, block_q=3, block_k=4, causal=causal, variant=variant
    )
    o_ref, lse_ref = lab.attention_reference(q, k, v, causal=causal)
    assert np.isfinite(o).all()
    np.testing.assert_allclose(o, o_ref, rtol=1e-8, atol=1e-9)
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[fin], lse_ref[fin], rtol=1e-10)


def test_scores_of_1e4_in_float32():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((64, 16)).astype(np.float32) * 40
    k = rng.standard_normal((64, 16)).astype(np.float32) * 40
    v = rng.standard_normal((64, 16)).astype(np.float32)
    s = q.astype(np.float64) @ k.T.astype(np.float64) / 4
    assert np.abs(s).max() > 5e3
    o, lse = lab.flash_attention_numpy(q, k, v, block_q=16, block_k=16)
    o_ref, lse_ref = lab.attention_reference(q, k, v)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    np.testing.assert_allclose(o, o_ref, atol=1e-3)


@SETTINGS
@given(attention_inputs(gqa=True), st.booleans(), st.sampled_from(lab.VARIANTS))
def test_grouped_query_heads_match_repeated_kv(qkv, causal, variant):
    q, k, v = qkv
    G = q.shape[-3] // k.shape[-3]
    k_rep, v_rep = np.repeat(k, G, axis=-3), np.repeat(v, G, axis=-3)
    o, lse = lab.flash_attention_numpy(
        q, k, v, block_q=5, block_k=3, causal=causal, variant=variant
    )
    o_rep, lse_rep = lab.flash_attention_numpy(
        q, k_rep, v_rep, block_q=5, block_k=3, causal=causal, variant=variant
    )
    np.testing.assert_allclose(o, o_rep, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, lse_rep, rtol=1e-12, atol=1e-14)
    o_ref, _ = lab.attention_reference(q, k_rep, v_rep, causal=causal)
    np.testing.assert_allclose(
        lab.attention_reference(q, k, v, causal=causal)[0], o_ref, atol=1e-12
    )


@settings(max_examples=20, deadline=None)
@given(attention_inputs(), st.booleans())
def test_attention_naive_matches_reference(qkv, causal):
    q, k, v = qkv
    np.testing.assert_allclose(
        lab.attention_naive(q, k, v, causal=causal),
        lab.attention_reference(q, k, v, causal=causal)[0],
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda q, k, v: lab.attention_reference(q, k, v, causal=True),
        lambda q, k, v: lab.attention_naive(q, k, v, causal=True),
        lambda q, k, v: lab.flash_attention_numpy(
            q, k, v, block_q=3, block_k=2, causal=True, variant="fa1"
        ),
        lambda q, k, v: lab.flash_attention_numpy(
            q, k, v, block_q=3, block_k=2, causal=True, p_format="bf16"
        ),
    ],
)
def test_inputs_are_never_modified(fn):
    rng = np.random.default_rng(4)
    q, k, v = (
        rng.standard_normal((2, 9, 4)),
        rng.standard_normal((2, 11, 4)),
        rng.standard_normal((2, 11, 3)),
    )
    copies = [a.copy() for a in (q, k, v)]
    fn(q, k, v)
    for a, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, c)


def test_scale_defaults_to_inverse_sqrt_d():
    rng = np.random.default_rng(5)
    q, k, v = (
        rng.standard_normal((6, 16)),
        rng.standard_normal((6, 16)),
        rng.standard_normal((6, 2)),
    )
    a, _ = lab.flash_attention_numpy(q, k, v)
    b, _ = lab.flash_attention_numpy(q, k, v, scale=0.25)
    c, _ = lab.flash_attention_numpy(q, k, v, scale=0.5)
    np.testing.assert_allclose(a, b, atol=1e-14)
    assert np.abs(a - c).max() > 1e-3


def test_lse_is_log_sum_exp_of_scaled_scores():
    rng = np.random.default_rng(6)
    q, k, v = (
        rng.standard_normal((4, 8)),
        rng.standard_normal((10, 8)),
        rng.standard_normal((10, 3)),
    )
    _, lse = lab.flash_attention_numpy(q, k, v, block_k=3)
    s = q @ k.T / np.sqrt(8)
    np.testing.assert_allclose(lse, np.log(np.exp(s).sum(-1)), rtol=1e-12)


def test_p_format_rounds_p_and_changes_the_error_in_order():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((256, 64)).astype(np.float32) for _ in range(3))
    o_ref, _ = lab.attention_reference(q.astype(np.float64), k, v)
    err = {
        f: np.abs(lab.flash_attention_numpy(q, k, v, p_format=f)[0] - o_ref).max()
        for f in ("fp32", "fp16", "bf16", "fp8_e4m3")
    }
    assert err["fp32"] < err["fp16"] < err["bf16"] < err["fp8_e4m3"]
    assert err["fp8_e4m3"] < 0.1


def test_trace_counts_reads_of_every_tile():
    q, k, v = (np.ones((10, 4), np.float32) for _ in range(3))
    with lab.trace.record() as rec:
        lab.flash_attention_numpy(q, k, v, block_q=4, block_k=3)
    Tr = 3
    assert rec.read_by["q"] == q.nbytes
    assert rec.read_by["k"] == Tr * k.nbytes and rec.read_by["v"] == Tr * v.nbytes
    assert rec.write_by["o"] == q.nbytes
    lab.flash_attention_numpy(q, k, v)  # outside the block: nothing recorded
    assert rec.read_by["q"] == q.nbytes
