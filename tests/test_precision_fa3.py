"""FlashAttention-3's Table 3 as modelled in lab/precision_fa3.py: the scaled FP8 cast, the Hadamard rotation,
the FP8 baseline and FlashAttention-3 models, and the table's columns."""

from __future__ import annotations

import numpy as np
import pytest

import lab


def test_quantize_fp8_scales_into_range():
    rng = np.random.default_rng(0)
    x = (
        rng.standard_normal((2, 10, 8)).astype(np.float32) * 1e-3
    )  # tiny values: an unscaled cast flushes them
    q = lab.quantize_fp8(x)
    assert (
        np.abs(q - x).max() <= 2**-4 * np.abs(x).max()
    )  # half a step of e4m3 at the group's max
    assert (lab.round_to(x, "fp8_e4m3") == 0).mean() > 0.5 and (q == 0).mean() < 0.05
    big = x.copy()
    big[0, 0, 0] = 300.0  # one outlier in head 0's first block of 4 rows
    per_tensor, per_block = lab.quantize_fp8(big), lab.quantize_fp8(big, block=4)
    rest = np.s_[0, 4:]
    assert (
        np.abs(per_block[rest] - big[rest]).max()
        < np.abs(per_tensor[rest] - big[rest]).max()
    )
    np.testing.assert_array_equal(
        per_block[1], lab.quantize_fp8(x[1:], block=4)[0]
    )  # heads scale alone
    assert np.isfinite(lab.quantize_fp8(np.zeros((3, 4)))).all()
    with pytest.raises(ValueError):
        lab.quantize_fp8(np.ones(4))


def test_random_hadamard_is_orthogonal_and_spreads_an_outlier():
    M = lab.random_hadamard(64, seed=2)
    np.testing.assert_allclose(M @ M.T, np.eye(64), atol=1e-12)
    e = np.zeros(64)
    e[5] = 10.0
    np.testing.assert_allclose(
        np.abs(e @ M), 10 / 8
    )  # spread evenly over all 64 entries
    with pytest.raises(ValueError, match="power of 2"):
        lab.random_hadamard(48)


def test_fp8_models_and_the_table():
    q, k, v = lab.outlier_qkv((2, 128, 32), storage=None, seed=1)
    ref = lab.attention_reference(q, k, v)[0]
    base = lab.rmse(lab.attention_fp8_baseline(q, k, v), ref)
    fa3 = lab.rmse(lab.attention_fp8_fa3(q, k, v, block=32), ref)
    assert 1e-3 < fa3 < base < 0.1
    # the fast tiled model and the numpy kernel make errors of the same size
    from lab.precision_fa3 import _tiled_p_rounded

    a = lab.rmse(_tiled_p_rounded(q, k, v, "fp8_e4m3", 32), ref)
    b = lab.rmse(
        lab.flash_attention_numpy(
            q.astype(np.float32),
            k.astype(np.float32),
            v.astype(np.float32),
            block_q=32,
            block_k=32,
            p_format="fp8_e4m3",
        )[0],
        ref,
    )
    assert 0.8 < a / b < 1.25
    t = lab.fa3_table3(N=128, d=32, heads=2)
    assert t["FP16 inputs alone (exact attention)"]["after cast"] == 0
    assert t["FA3 FP8"]["paper"] == 9.1e-3 and t["standard FP16"]["paper"] == 3.2e-4
    for name in ("standard FP16", "tiled FP16 (FA2/FA3)"):
        assert (
            t[name]["before cast"] > t[name]["after cast"] > 0
        )  # the inputs' rounding counted only before
    assert "after cast" not in t["FA3 FP8"]
    only = lab.fa3_table3(N=64, d=16, heads=1, columns=["FA3 FP8"])
    assert set(only) == {"FA3 FP8", "rms_o"}
    with pytest.raises(ValueError, match="columns"):
        lab.fa3_table3(N=64, d=16, heads=1, columns=["FA4"])
