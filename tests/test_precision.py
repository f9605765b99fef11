"""round_to against the libraries bit for bit, TF32 against a bit-level oracle written here, format_info."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lab

LIB = {
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}
TORCH = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


def same_bits(a, b) -> np.ndarray:
    """Elementwise: identical float32 bit patterns, or both NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def tf32_oracle(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to 10 mantissa bits on the uint32 pattern: drop 13 bits, carrying into the exponent."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0x0FFF + lsb) & ~np.uint64(0x1FFF)).astype(np.uint32)
    out = rounded.view(np.float32)
    return np.where(np.isfinite(x), out, x)  # inf and NaN pass through


def special_values(fmt: str) -> np.ndarray:
    """Zeros, subnormals, the largest value and its neighbours, ties, out-of-range and non-finite values."""
    info = lab.format_info(fmt)
    big, tiny, sub, eps = (
        info["max"],
        info["tiny"],
        info["smallest_subnormal"],
        info["eps"],
    )
    with np.errstate(over="ignore"):
        vals = [
            0.0,
            -0.0,
            1.0,
            1 + eps / 2,
            1 + eps,
            1 + 1.5 * eps,
            1 + eps / 4,
            sub,
            sub / 2,
            sub * 0.75,
            sub * 1.5,
            sub * 2.5,
            tiny,
            tiny * (1 - eps),
            tiny / 2,
            big,
            big * (1 + eps / 4),
            big * (1 + eps / 2),
            big * (1 + eps),
            big * 2,
            big * (1 - eps / 4),
            np.finfo(np.float32).max,
            np.finfo(np.float32).tiny,
            2.0**-149,
            1e30,
            1e-30,
            np.inf,
            -np.inf,
            np.nan,
        ]
        x = np.array(vals, np.float64)
        return np.concatenate([x, -x]).astype(np.float32)


def random_values(seed: int, n: int = 4000) -> np.ndarray:
    """Random signs and significands across the whole float32 range, subnormals included."""
    rng = np.random.default_rng(seed)
    mant = rng.random(n) + 1.0
    exps = rng.integers(-150, 129, n)
    with np.errstate(over="ignore"):
        return (np.where(rng.random(n) < 0.5, -1, 1) * np.ldexp(mant, exps)).astype(
            np.float32
        )


@pytest.mark.parametrize("fmt", sorted(LIB))
@pytest.mark.parametrize("kind", ["random", "special", "normal"])
def test_round_to_is_bit_exact_with_ml_dtypes(fmt, kind):
    x = {
        "random": random_values(1),
        "special": special_values(fmt),
        "normal": np.random.default_rng(2).standard_normal(5000).astype(np.float32)
        * 100,
    }[kind]
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(LIB[fmt]).astype(np.float32)
    got = lab.round_to(x, fmt)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert same_bits(got, want).all()


@pytest.mark.parametrize("fmt", sorted(TORCH))
def test_round_to_matches_torch_within_range(fmt):
    # torch saturates e4m3fn at ±448 where ml_dtypes gives NaN; inside the range both round to nearest even
    info = lab.format_info(fmt)
    x = np.concatenate([random_values(3), special_values(fmt)])
    with np.errstate(invalid="ignore"):
        inside = np.isfinite(x) & (np.abs(x) <= info["max"])
    want = torch.from_numpy(x[inside]).to(TORCH[fmt]).float().numpy()
    assert same_bits(lab.round_to(x[inside], fmt), want).all()


def test_e4m3_out_of_range_is_nan_and_e5m2_is_inf():
    got8 = lab.round_to(
        np.array([449.0, 464.0, 465.0, 1e6, np.inf], np.float32), "fp8_e4m3"
    )
    assert (
        got8[0] == 448 and got8[1] == 448
    )  # up to the midpoint: rounds down to the max
    assert np.isnan(got8[2:]).all()
    got5 = lab.round_to(np.array([61439.0, 61440.0, -1e6], np.float32), "fp8_e5m2")
    assert got5[0] == 57344 and np.isposinf(got5[1]) and np.isneginf(got5[2])


@pytest.mark.parametrize("kind", ["random", "special"])
def test_tf32_matches_the_bit_level_oracle(kind):
    x = random_values(4) if kind == "random" else special_values("tf32")
    assert same_bits(lab.round_to(x, "tf32"), tf32_oracle(x)).all()


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(max_dims=3, max_side=9),
        elements=st.floats(width=32),
    )
)
def test_tf32_oracle_on_any_float32(x):
    assert same_bits(lab.round_to(x, "tf32"), tf32_oracle(x)).all()


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(max_dims=2, max_side=12),
        elements=st.floats(width=32),
    ),
    st.sampled_from(sorted(LIB)),
)
def test_any_float32_matches_the_library(x, fmt):
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(LIB[fmt]).astype(np.float32)
    assert same_bits(lab.round_to(x, fmt), want).all()


def test_tf32_known_values():
    eps = 2.0**-10
    x = np.array(
        [1 + eps / 2, 1 + 1.5 * eps, 1 + eps / 2 + 2.0**-20, 2.0**-140, 3 * 2.0**-137],
        np.float32,
    )
    got = lab.round_to(x, "tf32")
    np.testing.assert_array_equal(
        got, np.array([1.0, 1 + 2 * eps, 1 + eps, 0.0, 2.0**-135], np.float32)
    )  # 2^-140 < half the quantum 2^-136
    big = np.float32(lab.format_info("fp32")["max"])
    assert np.isposinf(lab.round_to(np.array([big]), "tf32")[0])
    assert (
        lab.round_to(np.array([lab.format_info("tf32")["max"]], np.float32), "tf32")[0]
        == lab.format_info("tf32")["max"]
    )


@pytest.mark.parametrize("fmt", lab.FORMATS)
def test_round_to_is_idempotent_and_fp32_is_identity(fmt):
    x = random_values(5)
    once = lab.round_to(x, fmt)
    assert same_bits(lab.round_to(once, fmt), once).all()
    if fmt == "fp32":
        assert same_bits(once, x).all()


@pytest.mark.parametrize("fmt", lab.FORMATS)
def test_round_to_never_modifies_its_input(fmt):
    x = random_values(6)
    before = x.copy()
    lab.round_to(x, fmt)
    assert same_bits(x, before).all()
    x64 = np.linspace(-3, 3, 11)
    b64 = x64.copy()
    out = lab.round_to(x64, fmt)
    np.testing.assert_array_equal(x64, b64)
    assert out.dtype == np.float32


def test_round_to_takes_float64_through_float32_and_lists():
    assert lab.round_to([1.0 + 2.0**-30], "fp32")[0] == 1.0
    assert lab.round_to(np.float64(1e300), "fp16") == np.inf


def test_round_to_errors():
    with pytest.raises(ValueError, match="fmt"):
        lab.round_to(np.ones(3, np.float32), "fp4")
    with pytest.raises(TypeError, match="x"):
        lab.round_to(np.ones(3, np.int32), "bf16")


@pytest.mark.parametrize("fmt", lab.FORMATS)
def test_format_info_describes_the_rounding(fmt):
    info = lab.format_info(fmt)
    big, eps, sub = info["max"], info["eps"], info["smallest_subnormal"]
    assert eps == 2.0 ** -info["mantissa_bits"]
    r = lambda v: lab.round_to(np.array([v], np.float64), fmt)[0]  # noqa: E731
    assert r(big) == np.float32(big)  # the largest value is representable
    assert not np.isfinite(r(big * (1 + eps)))  # one step past it is not
    assert (
        r(1 + eps) == np.float32(1 + eps) and r(1 + eps / 2) == 1.0
    )  # a tie rounds to even
    assert r(sub) == np.float32(sub) and r(sub * 0.4) == 0.0
    assert r(info["tiny"]) == np.float32(info["tiny"])
    assert info["bits"] == 1 + info["exponent_bits"] + info["mantissa_bits"]


def test_format_info_errors():
    with pytest.raises(ValueError, match="fmt"):
        lab.format_info("fp64")


def test_truncate_tf32_cuts_toward_zero_and_keeps_specials():
    x = np.array(
        [
            1 + 2.0**-10 + 2.0**-11,
            -(1 + 2.0**-10 + 2.0**-11),
            1 + 2.0**-11,
            np.inf,
            -0.0,
            np.nan,
        ],
        np.float32,
    )
    got = lab.truncate_tf32(x)
    assert got.dtype == np.float32
    assert got[0] == np.float32(1 + 2.0**-10) and got[1] == -np.float32(
        1 + 2.0**-10
    )  # rounding would go up
    assert (
        got[2] == 1.0 and lab.round_to(x[2:3], "tf32")[0] == 1.0
    )  # a tie: both give 1
    assert (
        np.isposinf(got[3]) and got[4] == 0 and np.signbit(got[4]) and np.isnan(got[5])
    )
    v = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert np.array_equal(lab.truncate_tf32(lab.truncate_tf32(v)), lab.truncate_tf32(v))
    assert (np.abs(lab.truncate_tf32(v)) <= np.abs(v)).all()
    assert np.array_equal(
        lab.round_to(lab.truncate_tf32(v), "tf32"), lab.truncate_tf32(v)
    )  # a TF32 value


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "bf16", "fp16"])
def test_number_grid_steps_double_and_the_stall_is_half_a_step(fmt):
    import matplotlib.pyplot as plt

    from lab.figures.precision import draw_number_grid

    out = draw_number_grid(fmt)
    plt.close("all")
    info = lab.format_info(fmt)
    assert out["step"] == {x: info["eps"] * x for x in (1.0, 2.0, 4.0)}
    assert out["stall"] == {x: info["eps"] * x / 2 for x in (1.0, 2.0, 4.0)}
    assert len(out["values"]) == 3 * 2 ** info["mantissa_bits"]  # 2^t values an octave
    with pytest.raises(ValueError, match="fmt"):
        draw_number_grid("fp12")
    with pytest.raises(ValueError, match="starts"):
        draw_number_grid(fmt, starts=(1.0, 3.0))
