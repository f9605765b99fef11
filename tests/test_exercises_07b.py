"""07_precision_in_attention's Exercise 3 (the block quantizer) and Exercise 1's follow-up: the worked solution
passes, each planted classic mistake fails with its own diagnosis, lab's answer is refused; and the rotation
check's two hints the readers met (a ValueError that does not name d, signs fixed by a seed of one's own)."""

import contextlib
import io

import numpy as np
import pytest
from exercise_support import (
    assert_fails,
    exercises,
    notebook_cells,
    replace_code,
    run_check,
)

from lab.checks import precision_attention

EX = {ex.number: ex for ex in exercises("07_precision_in_attention")}
_cells = notebook_cells


@pytest.fixture(autouse=True)
def _close_figures():
    """The notebook's cells run before each check draw figures; close them (pyplot keeps every one)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


BLOCK = """
def block_fp8(x, rows):
    out = np.empty_like(x, dtype=np.float32)
    for r0 in range({stop}):
        g = x[..., r0 : r0 + rows, :]
        amax = {amax}
        s = np.float32({top}) / {guard}
        out[..., r0 : r0 + rows, :] = {ret}
    return out
"""
OK = dict(
    stop="0, x.shape[-2], rows",
    amax="np.abs(g).max(axis=(-1, -2), keepdims=True)",
    guard="np.where(amax > 0, amax, np.float32(1))",
    ret='lab.round_to(g * s, "fp8_e4m3") / s',
    top="448.0",
)


def _block(**change) -> str:
    return BLOCK.format(**{**OK, **change})


def test_the_worked_block_quantizer_and_a_written_one_pass():
    for src in (EX[4].solution, _block()):
        out = run_check(EX[4], src)
        assert "block_fp8: ✓" in out and "✗" not in out, out
    assert "not implemented yet" in run_check(EX[4], EX[4].stub)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "change, says",
    [
        (
            dict(amax="np.abs(x).max(axis=(-1, -2), keepdims=True)"),
            ["per tensor", "`rows` consecutive rows"],
        ),
        (
            dict(amax="np.abs(x).max()"),
            ["one scale for the whole tensor", "every head", "x[h, r0:r0 + rows]"],
        ),
        (
            dict(amax="np.abs(g).max(axis=-2, keepdims=True)"),
            ["a scale per column", "one number", "axis=(-1, -2)"],
        ),
        (
            dict(amax="np.abs(x).max(axis=-2, keepdims=True)"),
            ["a scale per column of the whole matrix", "axis=(-1, -2)"],
        ),
        (dict(amax="np.abs(g).max(axis=-1, keepdims=True)"), ["a scale per row"]),
        (
            dict(amax="np.abs(g).max(keepdims=True)"),
            ["shared by every matrix", "a head"],
        ),
        (dict(amax="g.max(axis=(-1, -2), keepdims=True)"), ["max x, not max |x|"]),
        (dict(ret='lab.round_to(g * s, "fp8_e4m3")'), ["still scaled", "divide by s"]),
        (dict(guard="amax"), ["group of zeros gave NaN", "s = 1"]),
        (dict(stop="0, x.shape[-2] - x.shape[-2] % rows, rows"), ["the last group"]),
        (dict(top="240.0"), ["onto 240, not 448", "s = 448 / max|x|"]),
        (dict(top="464.0"), ["onto 464, not 448", "the tie"]),
        (
            dict(ret='lab.round_to(g / s, "fp8_e4m3") * s'),
            ["upside down", "cast x·s"],
        ),
        (
            dict(
                ret='lab.round_to(g * np.exp2(np.floor(np.log2(s))), "fp8_e4m3")'
                " / np.exp2(np.floor(np.log2(s)))"
            ),
            ["a power-of-two scale", "not the course's model", "s = 448 / max|x|"],
        ),
    ],
    ids=[
        "per tensor",
        "whole tensor",
        "per column",
        "per column of the matrix",
        "per row",
        "across heads",
        "max not abs",
        "not undone",
        "no guard",
        "last group",
        "240 for 448",
        "464 for 448",
        "scale inverted",
        "power of two",
    ],
)
def test_a_planted_block_quantizer_is_named(change, says):
    assert_fails(EX[4], _block(**change), *says)


TORCH_CAST = (
    "torch.from_numpy(np.ascontiguousarray(g * s)).to(torch.{fmt}).float().numpy()"
)


def test_torchs_float8_cast_is_accepted_as_the_same_rounding():
    """The exercise teaches the scale, not the rounding: torch's e4m3fn cast rounds as lab.round_to does
    (they differ only past 448, where torch saturates), so a torch quantizer passes, and its slips are named."""
    torch_block = "import torch\n" + _block(
        ret=TORCH_CAST.format(fmt="float8_e4m3fn") + " / s"
    )
    out = run_check(EX[4], torch_block)
    assert "block_fp8: ✓" in out and "✗" not in out, out
    not_abs = torch_block.replace(
        "np.abs(g).max(axis=(-1, -2), keepdims=True)",
        "g.max(axis=(-1, -2), keepdims=True)",
    )
    assert_fails(EX[4], not_abs, "max x, not max |x|", "torch's cast clips it")
    fnuz = torch_block.replace("float8_e4m3fn)", "float8_e4m3fnuz)")
    assert_fails(EX[4], fnuz, "e4m3fnuz", "448")


def test_labs_quantizer_is_refused():
    src = "def block_fp8(x, rows):\n    return lab.quantize_fp8(x, rows)\n"
    assert_fails(EX[4], src, "calls lab.quantize_fp8")


def _rotation_out(fn) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        precision_attention.check_rotation(fn, seed=1)
    return out.getvalue()


def _hadamard(d, signs):
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return signs[:, None] * h / np.sqrt(d)


def test_a_valueerror_that_does_not_name_d_fails():
    def rotation(d, rng):
        if d & (d - 1):
            raise ValueError("bad size")
        return _hadamard(d, rng.choice([-1.0, 1.0], size=d))

    out = _rotation_out(rotation)
    assert "✗ case d = 6" in out and "does not name d" in out, out


def test_a_rotation_without_validation_fails_on_d_6():
    def rotation(d, rng):
        return _hadamard(d, rng.choice([-1.0, 1.0], size=d))

    out = _rotation_out(rotation)
    assert "✗" in out and "d = 6" in out, out


def test_signs_from_a_fixed_seed_are_not_called_plus_minus_h():
    def rotation(d, rng):
        return _hadamard(d, np.random.default_rng(7).choice([-1.0, 1.0], size=d))

    out = _rotation_out(rotation)
    assert "the same matrix for every rng" in out and "fixed" in out, out
    assert "±H/√d itself" not in out, out


def _peak(predicted) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        precision_attention.check_peak_prediction(
            predicted, {"rows": 0.22, "columns": 1.0}
        )
    return out.getvalue()


def test_a_float64_pipeline_passes_and_is_not_called_fp32():
    out = run_check(EX[1], _pipeline("x.astype(np.float32)", "x.astype(np.float64)"))
    assert "tiled_fp16: ✓" in out and "FP32 or wider" in out, out


def _noted(predicted) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        precision_attention.check_peak_prediction(predicted)  # before the measurement
    return out.getvalue()


def test_the_peak_prediction_is_written_before_it_is_measured():
    """The prediction cell checks only that both numbers are written, and shows nothing measured; the cell
    that measures comes after it (so the learner cannot copy the peaks into the prediction)."""
    assert "not predicted yet" in _noted({"rows": None, "columns": None})
    assert "both" in _noted({"rows": 0.25, "columns": None})
    assert "as a number" in _noted({"rows": "big", "columns": 1.0})
    out = _noted({"rows": 0.25, "columns": 1.0})
    assert "noted" in out and "measured" not in out and "✓" not in out, out
    cells = _cells("07_precision_in_attention")
    wrote = next(
        i
        for i, (t, src, _) in enumerate(cells)
        if 'predicted_peak = {"rows": None' in src
    )
    measures = next(i for i, (t, src, _) in enumerate(cells) if "peaks = {" in src)
    assert wrote < measures and "peaks" not in cells[wrote][1], cells[wrote][1]
    assert "check_peak_prediction(predicted_peak)" in cells[wrote][1]
    assert not any(
        "peaks" in src for _, src, tags in cells[wrote:measures] if "solution" in tags
    )


def test_the_peak_prediction_is_checked():
    assert "not predicted yet" in _peak({"rows": None, "columns": None})
    good = _peak({"rows": 0.3, "columns": 1.0})
    assert good.count("✓") == 2 and "✗" not in good, good
    swapped = _peak({"rows": 1.0, "columns": 0.2})
    assert swapped.count("✗") == 2, swapped
    for flat_or_loose in (0.09, 0.5):  # 1/√d, "perfectly spread", or a loose guess
        out = _peak({"rows": flat_or_loose, "columns": 1.0})
        assert out.count("✗") == 1 and "N(0, 1/d)" in out, out


# ------------------------------------------------------------------- exercise 1: the tiled FP16 pipeline


def _pipeline(old: str, new: str) -> str:
    return replace_code(EX[1].solution, old, new)


def test_the_worked_tiled_pipeline_passes_and_beats_standard():
    out = run_check(EX[1], EX[1].solution)
    assert "tiled_fp16: ✓" in out and "✗" not in out, out
    assert "yours below: True" in out, out
    assert "S_IJ, m, l, acc in FP32 or wider" in out, out  # a float64 kernel passes too
    assert "not implemented yet" in run_check(EX[1], EX[1].stub)


def test_the_reference_pipeline_is_labs_tiled_kernel():
    """`tiled_fp16_planted` with no fault, stored in FP16, is `attention_tiled_lowp` with one query block."""
    import lab

    q, k, v = lab.outlier_qkv((1, 200, 32), seed=3)
    q, k, v = q[0, :64], k[0], v[0]
    got = lab.round_to(precision_attention.tiled_fp16_planted(q, k, v, 48), "fp16")
    want = lab.attention_tiled_lowp(q, k, v, "fp16", block_q=64, block_k=48)
    assert np.mean(got != want) < 0.01  # a rare tie at the FP16 store of O
    assert np.allclose(got, want, rtol=2**-9, atol=1e-6)  # one FP16 ulp


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "q, k, v = (x.astype(np.float32) for x in (q, k, v))",
            "N = q.shape[0]",
            ["S_IJ was stored in FP16", "upcast"],
        ),
        ('lab.round_to(p, "fp16") @', "p @", ["no P_IJ was rounded"]),
        (
            'lab.round_to(p, "fp16") @',
            'lab.round_to(p, "bf16") @',
            ["rounded to BF16, not FP16", "8 significant bits"],
        ),
        (
            'acc = alpha * acc + lab.round_to(p, "fp16") @ v[j : j + Bc]',
            'acc = alpha * acc + lab.round_to(p @ v[j : j + Bc], "fp16")',
            ["the product P_IJ V_J was rounded to FP16, not P_IJ", "before the matmul"],
        ),
        (
            'acc = alpha * acc + lab.round_to(p, "fp16") @ v[j : j + Bc]',
            'acc = lab.round_to(alpha * acc + lab.round_to(p, "fp16") @ v[j:j+Bc], "fp16")',
            ["acc was rounded to FP16"],
        ),
        (
            "l = alpha * l + p.sum(axis=-1, keepdims=True)",
            'l = alpha * l + lab.round_to(p, "fp16").sum(axis=-1, keepdims=True)',
            ["l sums the rounded P_IJ"],
        ),
        (
            "N, d = q.shape",
            "N, d = q.shape\n    Bc = k.shape[0]",
            ["one block of all M"],
        ),
        (
            "range(0, k.shape[0], Bc)",
            "range(0, k.shape[0] - k.shape[0] % Bc, Bc)",
            ["the last, shorter block"],
        ),
        ("return acc / l", 'return lab.round_to(acc / l, "fp16")', ["o was rounded"]),
        (
            "l = alpha * l + p.sum",
            "l = l + p.sum",
            ["more than float32's rounding", "alpha"],
        ),
        (
            "m_new = np.maximum(m, s.max(axis=-1, keepdims=True))",
            "m_new = s.max(axis=-1, keepdims=True)",
            ["m was set to the block's own max", "max(m, rowmax S_IJ)"],
        ),
        (
            "p = np.exp(s - m_new)",
            "p = np.exp(s - s.max(axis=-1, keepdims=True))",
            ["P_IJ was taken against the block's own max", "e^(S_IJ - m')"],
        ),
        (
            "alpha = np.exp(m - m_new)",
            "alpha = np.exp(m_new - m)",
            ["α is inverted", "inf · 0 = NaN", "e^(m - m') ≤ 1"],
        ),
        (
            "alpha = np.exp(m - m_new)",
            "alpha = np.exp(m_new - m) if j else np.float32(0)",
            ["α is inverted", "e^(m - m') ≤ 1"],
        ),
        (
            "s = q @ k[j : j + Bc].T / np.float32(np.sqrt(d))",
            "s = q @ k[j : j + Bc].T",
            ["the scores were not scaled", "1/√d is missing"],
        ),
        (
            "s = q @ k[j : j + Bc].T / np.float32(np.sqrt(d))",
            "s = q @ k[j : j + Bc].T / np.float32(d)",
            ["divided by d", "square root"],
        ),
        (
            "s = q @ k[j : j + Bc].T / np.float32(np.sqrt(d))",
            "s = q @ k[j : j + Bc].T * np.float32(np.sqrt(d))",
            ["multiplied by √d"],
        ),
    ],
    ids=[
        "float16 matmul",
        "P not rounded",
        "P in BF16",
        "P V rounded",
        "acc in FP16",
        "l from rounded P",
        "one block",
        "last block",
        "O in FP16",
        "alpha missing",
        "block max",
        "P against block max",
        "alpha inverted",
        "alpha inverted, guarded",
        "no 1/sqrt(d)",
        "1/d",
        "sqrt(d)",
    ],
)
def test_a_planted_pipeline_is_named(old, new, says):
    assert_fails(EX[1], _pipeline(old, new), *says)


def test_standard_attention_and_labs_kernel_are_refused():
    standard = """
def tiled_fp16(q, k, v, Bc):
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    s = lab.round_to(q @ k.T / np.float32(np.sqrt(q.shape[1])), "fp16")
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return lab.round_to(p / p.sum(axis=-1, keepdims=True), "fp16") @ v
"""
    assert_fails(EX[1], standard, "this is standard attention")
    cheat = """
def tiled_fp16(q, k, v, Bc):
    return lab.attention_tiled_lowp(q, k, v, "fp16", block_q=len(q), block_k=Bc)
"""
    assert_fails(EX[1], cheat, "lab.attention_tiled_lowp")


def _measure_block_fp8(solution: str) -> str:
    """Run the setup, `solution`, then the two cells after exercise 4's check that measure it."""
    cells = _cells("07_precision_in_attention")
    first = next(i for i, (_, s, _) in enumerate(cells) if "Exercise 4, measured" in s)
    ns, out = {}, io.StringIO()
    with contextlib.redirect_stdout(out):
        for src in EX[4].setup:
            exec(compile(src, "<setup>", "exec"), ns)
        exec(compile(solution, "<solution>", "exec"), ns)
        for _, src, _ in cells[first : first + 2]:
            exec(compile(src, "<measure>", "exec"), ns)
    return out.getvalue()


def test_exercise_4_measurement_shows_only_the_block_scale_holds():
    """The worked quantizer holds on all three inputs; one scale per matrix fails the loud group,
    so a quantizer that ignores `rows` is seen to, and the learner copy's stub is told to write it."""
    assert "all three inputs: ['per 64 rows']" in _measure_block_fp8(EX[4].solution)
    per_matrix = EX[4].solution.replace("range(0, x.shape[-2], rows)", "range(0, 1)")
    per_matrix = per_matrix.replace(
        "def block_fp8(x, rows):", "def block_fp8(x, rows):\n    rows = x.shape[-2]"
    )
    assert per_matrix != EX[4].solution
    assert "all three inputs: []" in _measure_block_fp8(per_matrix)
    assert "write block_fp8 first" in _measure_block_fp8(EX[4].stub)


# ------------------------------------------------------------------------------------ exercise 3: the flush gap

GAP = """
def flush_gap(fmt, scale):
    sub = lab.format_info(fmt)["{which}"]
    return float({expr})
"""


def _gap(which="smallest_subnormal", expr="np.log(2 * scale / sub)") -> str:
    return GAP.format(which=which, expr=expr)


def test_the_worked_flush_gap_passes_and_the_stub_is_not_implemented():
    for src in (EX[3].solution, _gap()):
        out = run_check(EX[3], src)
        assert "flush_gap: ✓ passed 4 cases" in out and "✗" not in out, out
    assert "not implemented yet" in run_check(EX[3], EX[3].stub)


@pytest.mark.parametrize(
    "change, says",
    [
        (
            dict(expr="np.log(scale / sub)"),
            ["ln 2 short", "half the smallest subnormal"],
        ),
        (dict(which="tiny"), ["smallest *normal* number", "subnormals still hold"]),
        (dict(expr="np.log(2 / sub)"), ["the scale is missing", "ln(scale)"]),
        (dict(expr="np.log(2 / (sub * scale))"), ["the scale works the wrong way"]),
        (dict(expr="np.log2(2 * scale / sub)"), ["powers of two (log2)", "take ln"]),
        (dict(expr="-np.log(2 * scale / sub)"), ["the sign", "positive"]),
    ],
    ids=["no half", "smallest normal", "no scale", "scale inverted", "log2", "sign"],
)
def test_a_planted_flush_gap_is_named(change, says):
    assert_fails(EX[3], _gap(**change), *says)


def test_a_flush_gap_searched_with_round_to_or_read_from_lab_is_refused():
    search = """
    def flush_gap(fmt, scale):
        lo, hi = 0.0, 200.0
        for _ in range(80):
            mid = (lo + hi) / 2
            y = lab.round_to(np.float32([scale * np.exp(-mid)]), fmt)[0]
            lo, hi = (lo, mid) if y == 0 else (mid, hi)
        return hi
    """
    assert_fails(EX[3], search, "lab.round_to")
    cheat = (
        "from lab.checks.precision_attention import flush_gap_reference as f\n"
        "def flush_gap(fmt, scale):\n    return f(fmt, scale)\n"
    )
    assert_fails(EX[3], cheat, "flush_gap_reference")


def test_the_flush_gap_is_the_edge_of_the_cast():
    """The reference's gap is where fl(scale·e^-g) turns 0: just short of it survives, at and past it not."""
    import lab

    for fmt in ("fp8_e4m3", "fp8_e5m2", "fp16"):
        for scale in (1.0, 256.0):
            g = precision_attention.flush_gap_reference(fmt, scale)
            inside, past = (
                np.float32([scale * np.exp(-g * (1 - 1e-4))]),
                np.float32([scale * np.exp(-g * (1 + 1e-6))]),
            )
            assert lab.round_to(inside, fmt)[0] > 0 and lab.round_to(past, fmt)[0] == 0


def test_the_flush_gap_cases_are_drawn_fresh_and_repeat_with_the_seed(capsys):
    a = precision_attention._flush_cases(np.random.default_rng(1))
    assert a[:3] == [("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0), ("fp8_e4m3", 256.0)]
    wrong = lambda fmt, scale: 1.0  # noqa: E731
    precision_attention.check_flush_gap(wrong, seed=7)
    first = capsys.readouterr().out
    precision_attention.check_flush_gap(wrong, seed=7)
    assert capsys.readouterr().out == first and "seed=7" in first
