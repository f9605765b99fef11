"""Properties of lab/softmax.py against a float64 reference: naive, safe, online, and the online normalizer."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import blocks, score_rows, seeds

import lab


def ref_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Float64 softmax written independently of lab; an all -inf row gives zeros."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def ref_normalizer(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max, Σ exp(x − max)) along the last axis in float64; an all -inf row gives (-inf, 0)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1)
    mu = np.where(np.isfinite(m), m, 0.0)
    return m, np.exp(x - mu[..., None]).sum(axis=-1)


@settings(max_examples=60, deadline=None)
@given(x=score_rows(), block=blocks)
def test_safe_and_online_match_float64_reference(x, block):
    ref = ref_softmax(x)
    np.testing.assert_allclose(lab.softmax_safe(x), ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        lab.softmax_online(x, block), ref, rtol=1e-12, atol=1e-15
    )


@settings(max_examples=40, deadline=None)
@given(
    x=score_rows(max_len=50),
    b1=blocks,
    b2=st.sampled_from([1, 2, 3, 5, 7, 11, 13, 17, 51, 1000]),
)
def test_online_is_independent_of_block_size(x, b1, b2):
    """Block 1, primes, powers of two and blocks longer than the row all give the same result."""
    np.testing.assert_allclose(
        lab.softmax_online(x, b1), lab.softmax_online(x, b2), rtol=1e-12, atol=1e-15
    )
    m1, l1 = lab.online_normalizer(x, b1)
    m2, l2 = lab.online_normalizer(x, b2)
    np.testing.assert_array_equal(m1, m2)  # the max is exact, whatever the order
    np.testing.assert_allclose(l1, l2, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(x=score_rows(), block=blocks)
def test_online_normalizer_matches_reference(x, block):
    m, l = lab.online_normalizer(x, block)
    m_ref, l_ref = ref_normalizer(x)
    assert m.shape == l.shape == x.shape[:-1]
    np.testing.assert_array_equal(m, m_ref)
    np.testing.assert_allclose(l, l_ref, rtol=1e-12)
    assert (l >= 1.0 - 1e-12)[
        np.isfinite(m)
    ].all()  # the max term alone contributes exp(0) = 1


@settings(max_examples=40, deadline=None)
@given(
    seed=seeds, n=st.integers(1, 40), block=blocks, big=st.sampled_from([1e2, 1e3, 1e4])
)
def test_scores_up_to_1e4_stay_finite(seed, n, block, big):
    """Scores of ±1e4 overflow exp in every dtype; the safe and online softmax never see them unshifted."""
    x = np.random.default_rng(seed).uniform(-big, big, size=(3, n))
    x[0, 0] = big  # a row whose max is the extreme score
    for dtype in (np.float32, np.float64):
        xd = x.astype(dtype)
        for p in (lab.softmax_safe(xd), lab.softmax_online(xd, block)):
            assert p.dtype == dtype
            assert np.isfinite(p).all()
            np.testing.assert_allclose(
                p.sum(axis=-1), 1.0, rtol=1e-5 if dtype == np.float32 else 1e-12
            )
            np.testing.assert_allclose(
                p, ref_softmax(xd), atol=1e-6 if dtype == np.float32 else 1e-13
            )


@pytest.mark.parametrize("fn", [lab.softmax_safe, lambda x: lab.softmax_online(x, 3)])
def test_all_masked_row_gives_zeros_and_partly_masked_rows_ignore_masked(fn):
    x = np.array(
        [
            [-np.inf, -np.inf, -np.inf, -np.inf],
            [0.5, -np.inf, 2.0, -np.inf],
            [-np.inf, -np.inf, -np.inf, 7.0],
        ]
    )
    p = fn(x)
    np.testing.assert_array_equal(p[0], 0.0)
    assert p[1, 1] == p[1, 3] == 0.0
    np.testing.assert_allclose(
        p[1, [0, 2]], ref_softmax(np.array([0.5, 2.0])), rtol=1e-12
    )
    np.testing.assert_array_equal(p[2], [0.0, 0.0, 0.0, 1.0])


def test_online_normalizer_of_masked_rows():
    m, l = lab.online_normalizer(
        np.array([[-np.inf] * 5, [-np.inf, -np.inf, 1.0, -np.inf, 1.0]]), block=2
    )
    assert m[0] == -np.inf and l[0] == 0.0
    assert m[1] == 1.0 and l[1] == pytest.approx(2.0)


@settings(max_examples=25, deadline=None)
@given(
    x=score_rows(max_len=20), block=blocks, shift=st.sampled_from([-50.0, 3.0, 700.0])
)
def test_shift_invariance(x, block, shift):
    """softmax(x + c) = softmax(x): the max subtraction cancels any shift (masked entries stay masked)."""
    np.testing.assert_allclose(
        lab.softmax_safe(x + shift), lab.softmax_safe(x), atol=1e-9
    )
    np.testing.assert_allclose(
        lab.softmax_online(x + shift, block), lab.softmax_online(x, block), atol=1e-9
    )


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_axis_argument(axis):
    x = np.random.default_rng(1).standard_normal((3, 4, 5)) * 5
    want = np.moveaxis(ref_softmax(np.moveaxis(x, axis, -1)), -1, axis)
    np.testing.assert_allclose(lab.softmax_safe(x, axis=axis), want, rtol=1e-12)
    np.testing.assert_allclose(lab.softmax_online(x, 2, axis=axis), want, rtol=1e-12)
    np.testing.assert_allclose(lab.softmax_naive(x, axis=axis), want, rtol=1e-12)
    m, l = lab.online_normalizer(x, 2, axis=axis)
    assert m.shape == tuple(np.delete(np.array(x.shape), axis % 3))


@settings(max_examples=30, deadline=None)
@given(x=score_rows(), block=blocks)
def test_inputs_are_not_modified(x, block):
    before = x.copy()
    lab.softmax_naive(x)
    lab.softmax_safe(x)
    lab.softmax_online(x, block)
    lab.online_normalizer(x, block)
    np.testing.assert_array_equal(x, before)


def test_naive_matches_for_small_scores_and_overflows_for_large():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(lab.softmax_naive(x), ref_softmax(x), rtol=1e-14)
    with np.errstate(all="ignore"):
        assert np.isnan(
            lab.softmax_naive(np.array([100.0, 0.0], dtype=np.float32))
        ).any()  # exp(100) > fp32 max
        assert np.isnan(
            lab.softmax_naive(np.array([12.0, 0.0], dtype=np.float16))
        ).any()  # exp(12) > fp16 max
        assert np.isfinite(
            lab.softmax_naive(np.array([11.0], dtype=np.float16))
        ).all()  # exp(11) < 65504
    assert np.isfinite(lab.softmax_safe(np.array([100.0, 0.0], dtype=np.float32))).all()


def test_dtypes_preserved_and_bfloat16_accepted():
    x = np.array([[3.0, 1.0, -2.0, 0.5]])
    for dtype in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16):
        xd = x.astype(dtype)
        for p in (
            lab.softmax_naive(xd),
            lab.softmax_safe(xd),
            lab.softmax_online(xd, 2),
        ):
            assert p.dtype == np.dtype(dtype)
            np.testing.assert_allclose(p.astype(np.float64), ref_softmax(x), rtol=2e-2)
    m, l = lab.online_normalizer(x.astype(np.float16), 2)
    assert m.dtype == l.dtype == np.float32  # accumulators are float32 at least


def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="x"):
        lab.softmax_naive(np.arange(3))
    with pytest.raises(TypeError, match="x"):
        lab.softmax_safe(np.arange(3))
    with pytest.raises(TypeError, match="x"):
        lab.online_normalizer(np.arange(3), 1)
    with pytest.raises(ValueError, match="NaN"):
        lab.softmax_safe(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"\+inf"):
        lab.softmax_online(np.array([1.0, np.inf]), 1)
    with pytest.raises(ValueError, match="block"):
        lab.softmax_online(np.ones(3), 0)
    with pytest.raises(TypeError, match="block"):
        lab.online_normalizer(np.ones(3), 2.5)
    with pytest.raises(ValueError, match="axis"):
        lab.softmax_naive(np.ones(3), axis=1)
    with pytest.raises(ValueError, match="axis"):
        lab.online_normalizer(np.ones((2, 3)), 1, axis=-3)
    with pytest.raises(ValueError, match="dimension"):
        lab.softmax_safe(np.float64(1.0))
