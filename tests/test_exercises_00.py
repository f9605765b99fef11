"""Notebook 00's exercises: each worked solution passes its own check cell, each planted classic mistake fails
with its diagnosis, and the checks of lab/checks/memory.py used there behave when called directly."""

import contextlib
import functools
import inspect
import io
import math
import subprocess
import sys

import nbformat
import numpy as np
import pytest
from exercise_support import ROOT, assert_fails, exercises, run_check, source

import lab
from lab.checks import _support as support
from lab.checks import memory as checks

NAME = "00_the_memory_wall"
EX = {ex.number: ex for ex in exercises(NAME)}
_UNWRITTEN = "  your prediction ({}): not written yet (shown once you write yours)\n"
PASSED = {
    1: "softmax_balance: ✓ passed 6 cases\n"
    + _UNWRITTEN.format("A100, float16, 2 accesses"),
    2: "my_attention: ✓ passed 4 cases\n"
    + "  your count (N×M arrays alive at its peak): not written yet (measured once you write yours)\n",
    3: "lean_attention: ✓ passed 4 cases\n" + _UNWRITTEN.format("N×M float32 arrays"),
    4: "largest_n: ✓ passed 9 cases\n"
    + _UNWRITTEN.format("80 GiB, float16, 32 layers"),
    5: "hbm_bytes: ✓ passed 6 cases\n",
    6: "qk_ridge: ✓ passed 9 cases\n"
    + _UNWRITTEN.format("A100, N = M = 4096, float16"),
}


def _src(text: str) -> str:
    return source(text)


def _fails(number: int, text: str, *says: str) -> str:
    return assert_fails(EX[number], text, *says)


def test_the_notebook_has_six_checked_exercises():
    assert sorted(EX) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6])
def test_worked_solution_passes(number):
    assert run_check(EX[number], EX[number].solution) == PASSED[number]


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6])
def test_stub_reports_not_implemented(number):
    assert "not implemented yet" in run_check(EX[number], EX[number].stub)


def test_exercise_4_has_a_stub_and_a_worked_answer_in_place_of_a_cell_that_computes_it():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "the cell below computes it" not in text
    assert "def largest_n" in EX[4].stub
    assert any("by hand" in b and "predicted_n = ..." in b for b in EX[4].before)
    answer = [
        c
        for c in nb.cells
        if c.cell_type == "markdown" and "Exercise 4, worked answer" in c.source
    ]
    assert (
        len(answer) == 1
        and "solution" in answer[0].metadata.get("tags", [])
        and "36{,}076" in answer[0].source
    )


_HBM = """
            def hbm_bytes(N, M, d, dv, itemsize):
                s = (N * d + M * d + N * M) * itemsize
                p = (N * M + N * M) * itemsize
                o = (N * M + M * dv + N * dv) * itemsize
                fused = (N * d + M * d + M * dv + N * dv) * itemsize   # in and out only
                return s, p, o, fused
            """

_MY_OBVIOUS = """
def my_attention(q, k, v):
    s = q @ k.T * q.shape[-1] ** -0.5
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    return p @ v
"""
_MY_LEAN = """
def my_attention(q, k, v):
    s = q @ k.T
    s *= q.shape[-1] ** -0.5
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s @ v
"""

# check_score_bytes (the bytes of S and P for a batch, from the code): called directly, as a learner's
# function would be
SCORE_BYTES_PLANTED = [
    (
        "S only",
        """
            def score_bytes(B, H, N, M, itemsize):
                return B * H * N * M * itemsize
            """,
        ["case 0 (3, 4, 5, 7, 8)", "expected 6720, got 3360", "S alone"],
    ),
    (
        "one head",
        """
            def score_bytes(B, H, N, M, itemsize):
                return 2 * N * M * itemsize
            """,
        ["expected 6720, got 560", "one head"],
    ),
    (
        "the batch left out",
        """
            def score_bytes(B, H, N, M, itemsize):
                return 2 * H * N * M * itemsize
            """,
        [
            "case 0 (3, 4, 5, 7, 8)",
            "expected 6720, got 2240",
            "the H heads of one sequence",
        ],
    ),
    (
        "the heads left out",
        """
            def score_bytes(B, H, N, M, itemsize):
                return 2 * B * N * M * itemsize
            """,
        ["expected 6720, got 1680", "one head of each sequence"],
    ),
    (
        "N by N",
        """
            def score_bytes(B, H, N, M, itemsize):
                return 2 * B * H * N * N * itemsize
            """,
        ["got 4800", "N × N"],
    ),
    (
        "bits",
        """
            def score_bytes(B, H, N, M, itemsize):
                return 2 * B * H * N * M * itemsize * 8
            """,
        ["in bits"],
    ),
    (
        "calls lab",
        """
            def score_bytes(B, H, N, M, itemsize):
                return lab.attention_bytes(N, M, itemsize, heads=B * H)
            """,
        ["calls lab.attention_bytes"],
    ),
    (
        "calls lab's module",
        """
            import lab.memory
            def score_bytes(B, H, N, M, itemsize):
                return lab.memory.attention_bytes(N, M, itemsize, heads=B * H)
            """,
        ["calls lab.attention_bytes"],
    ),
    (
        "calls an imported name",
        """
            from lab.memory import attention_bytes
            def score_bytes(B, H, N, M, itemsize):
                return attention_bytes(N, M, itemsize, heads=B * H)
            """,
        ["calls lab.attention_bytes"],
    ),
    (
        "itemsize fixed at 2 bytes",
        """
            def score_bytes(B, H, N, M, itemsize):
                return 2 * B * H * N * M * 2
            """,
        ["case 0 (3, 4, 5, 7, 8)", "2 bytes per number whatever the format"],
    ),
    (
        "a table of the fixed cases",
        """
            def score_bytes(B, H, N, M, itemsize):
                table = {(3, 4, 5, 7, 8): 6720, (1, 1, 4096, 4096, 4): 134217728,
                         (8, 32, 2048, 2048, 2): 4294967296, (4, 16, 1000, 3000, 2): 768000000}
                return table.get((B, H, N, M, itemsize), 0)
            """,
        ["case 4", "expected", "got 0", "drawn with seed="],
    ),
    (
        "lab's answer by alias, from its module",
        """
            from lab.memory import attention_bytes as count
            def score_bytes(B, H, N, M, itemsize):
                return count(N, M, itemsize, heads=B * H)
            """,
        ["calls lab.attention_bytes", "write it yourself"],
    ),
]


def _score_bytes_fails(text: str, *says) -> str:
    """Run a planted `score_bytes` through `check_score_bytes`: it must print ✗ and every phrase in `says`."""
    ns = {"lab": lab, "np": np, "__name__": "__exercise__"}
    exec(compile(_src(text), "<solution>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check_score_bytes(ns["score_bytes"])
    text = out.getvalue()
    assert "✗" in text and "✓" not in text, text
    for said in says:
        assert said in text, (said, text)
    return text


@pytest.mark.parametrize(
    "source, says",
    [(s, says) for _, s, says in SCORE_BYTES_PLANTED],
    ids=[name for name, _, _ in SCORE_BYTES_PLANTED],
)
def test_a_planted_score_bytes_mistake_is_diagnosed(source, says):
    _score_bytes_fails(source, *says)


PLANTED = {
    2: [
        (
            "no scale",
            """
            def my_attention(q, k, v):
                s = q @ k.T
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                return p / p.sum(axis=-1, keepdims=True) @ v
            my_arrays = 3
            """,
            ["case 0", "not scaled", "measured once your function passes"],
        ),
        (
            "softmax down the columns",
            """
            def my_attention(q, k, v):
                s = q @ k.T * q.shape[-1] ** -0.5
                p = np.exp(s - s.max(axis=0, keepdims=True))
                return p / p.sum(axis=0, keepdims=True) @ v
            """,
            ["case 0", "each column of P sums to 1"],
        ),
        (
            "float64 out for float32 in",
            """
            def my_attention(q, k, v):
                s = q @ k.T / np.sqrt(q.shape[-1])
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                return p / p.sum(axis=-1, keepdims=True) @ v
            """,
            ["returns float64 for float32 inputs", "NEP 50"],
        ),
        (
            "the row's max not subtracted",
            """
            def my_attention(q, k, v):
                s = q @ k.T * q.shape[-1] ** -0.5
                p = np.exp(s)
                return p / p.sum(axis=-1, keepdims=True) @ v
            my_arrays = 2
            """,
            ["case 2", "NaN or inf in yours", "subtract each row's max"],
        ),
        (
            "lab's naive attention under another name",
            """
            from lab.attention import attention_naive as mine
            def my_attention(q, k, v):
                return mine(q, k, v)
            my_arrays = 2
            """,
            ["calls lab.attention_naive", "write it yourself"],
        ),
    ],
    3: [
        (
            "attention_naive's shape: a new array at each step",
            """
            def lean_attention(q, k, v):
                s = q @ k.T * q.shape[-1] ** -0.5
                p = np.exp(s)
                return p / p.sum(axis=-1, keepdims=True) @ v
            """,
            [
                "case 0",
                "× one N×M array of float32",
                "the bound is 1.25×",
                "new arrays",
            ],
        ),
        (
            "two arrays alive: a scaled copy, then in place",
            """
            def lean_attention(q, k, v):
                s = q @ k.T * q.shape[-1] ** -0.5
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return s @ v
            """,
            ["case 0", "two N×M arrays were alive at once", "write into s itself"],
        ),
        (
            "np.sqrt upcasts to float64",
            """
            def lean_attention(q, k, v):
                s = q @ k.T / np.sqrt(q.shape[-1])
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return s @ v
            """,
            ["case 0", "returns float64 for float32 inputs", "NEP 50"],
        ),
        (
            "np.sqrt upcast, cast back at the end",
            """
            def lean_attention(q, k, v):
                s = q @ k.T / np.sqrt(q.shape[-1])
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return (s @ v).astype(q.dtype)
            """,
            ["case 0", "a float64 copy of a float32 array", "np.sqrt"],
        ),
        (
            "no scale",
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return s @ v
            """,
            ["case 0", "expected", "not scaled"],
        ),
        (
            "d taken from v",
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                s *= v.shape[-1] ** -0.5
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return s @ v
            """,
            ["case 0", "width of q and k"],
        ),
        (
            "softmax down the columns",
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                s *= q.shape[-1] ** -0.5
                np.exp(s, out=s)
                s /= s.sum(axis=0, keepdims=True)
                return s @ v
            """,
            ["case 0", "each column of P sums to 1"],
        ),
        (
            "computed in float64 with astype",
            """
            def lean_attention(q, k, v):
                s = q.astype(np.float64) @ k.T.astype(np.float64)
                s *= q.shape[-1] ** -0.5
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return s @ v
            """,
            ["case 0", "returns float64 for float32 inputs", ".astype(np.float64)"],
        ),
        (
            "no normalisation",
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                s *= q.shape[-1] ** -0.5
                np.exp(s, out=s)
                return s @ v
            """,
            ["case 0", "not divided by their sums"],
        ),
        (
            "normalised by the whole matrix",
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                s *= q.shape[-1] ** -0.5
                np.exp(s, out=s)
                s /= s.sum()
                return s @ v
            """,
            ["case 0", "sum of the whole matrix"],
        ),
        (
            "lab's naive attention",
            """
            def lean_attention(q, k, v):
                return lab.attention_naive(q, k, v)
            """,
            ["calls lab.attention_naive"],
        ),
        (
            "lab's answer through a closure",
            """
            def _make():
                answer = lab.attention.attention_reference
                return lambda q, k, v: answer(q, k, v)[0].astype(q.dtype)
            lean_attention = _make()
            """,
            ["calls lab.attention_reference", "write it yourself"],
        ),
        (
            "torch's softmax, whose memory tracemalloc does not see",
            """
            import torch
            def lean_attention(q, k, v):
                s = torch.from_numpy(q @ k.T) * q.shape[-1] ** -0.5
                return torch.softmax(s, dim=-1).numpy() @ v
            """,
            ["calls torch", "asks for numpy"],
        ),
        (
            "lean only when measured",
            """
            import tracemalloc
            def lean_attention(q, k, v):
                if tracemalloc.is_tracing():
                    return np.zeros((q.shape[0], v.shape[1]), q.dtype)
                s = q @ k.T
                s *= q.shape[-1] ** -0.5
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                return s @ v
            """,
            ["another result when its memory is measured"],
        ),
        (
            "a raise in the learner's own line",
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                return s @ v.T
            """,
            ["raised ValueError", "(line 3 of your code)", "drawn with seed="],
        ),
    ],
    4: [
        (
            "the S of the last layer forgotten",
            """
            import math
            def largest_n(gib, itemsize, layers):
                return math.isqrt(gib * 2**30 // (layers * itemsize))
            """,
            [
                "case 0 (80, 2, 32)",
                "expected 36076, got 36635",
                "not the S of the layer",
            ],
        ),
        (
            "every layer's S kept too",
            """
            import math
            def largest_n(gib, itemsize, layers):
                return math.isqrt(gib * 2**30 // (2 * layers * itemsize))
            """,
            ["got 25905", "keeps every layer's S as well"],
        ),
        (
            "inference, not training",
            """
            import math
            def largest_n(gib, itemsize, layers):
                return math.isqrt(gib * 2**30 // (2 * itemsize))
            """,
            ["got 146542", "one layer's S and P, inference"],
        ),
        (
            "GB",
            """
            def largest_n(gib, itemsize, layers):
                return int(np.sqrt(gib * 1e9 / ((layers + 1) * itemsize)))
            """,
            ["got 34815", "GB (10⁹ bytes)"],
        ),
        (
            "rounded up",
            """
            import math
            def largest_n(gib, itemsize, layers):
                return math.ceil(math.sqrt(gib * 2**30 / ((layers + 1) * itemsize)))
            """,
            ["got 36077", "one too many"],
        ),
        (
            "not rounded",
            """
            def largest_n(gib, itemsize, layers):
                return np.sqrt(gib * 2**30 / ((layers + 1) * itemsize))
            """,
            ["largest |error| 3.81e-01", "not a whole number"],
        ),
        (
            "itemsize left out",
            """
            import math
            def largest_n(gib, itemsize, layers):
                return math.isqrt(gib * 2**30 // (layers + 1))
            """,
            ["got 51019", "leaves out itemsize"],
        ),
        (
            "a whole number, as a float",
            """
            import math
            def largest_n(gib, itemsize, layers):
                return float(math.isqrt(gib * 2**30 // ((layers + 1) * itemsize)))
            """,
            ["case 0 (80, 2, 32)", "36076.0, a float", "return an integer"],
        ),
        (
            "a table of the fixed cases",
            """
            import math
            def largest_n(gib, itemsize, layers):
                fixed = [(80, 2, 32), (80, 4, 1), (16, 2, 12), (141, 2, 80), (1, 8, 3), (24, 1, 2)]
                table = {c: math.isqrt(c[0] * 2**30 // ((c[2] + 1) * c[1])) for c in fixed}
                return table[gib, itemsize, layers]
            """,
            ["case 6", "raised KeyError"],
        ),
    ],
    1: [
        (
            "exponentials at the FP32 rate",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (accesses * itemsize / bandwidth) / (7 / op_rate)
            """,
            [
                "case 0 (4, 2,",
                "expected 3.86096, got 7.16582",
                "exponentials at the FP32 rate",
            ],
        ),
        (
            "all at the exp rate",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (accesses * itemsize / bandwidth) / (7 / exp_rate)
            """,
            ["only the exponentials run on those units"],
        ),
        (
            "inverted",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (5 / op_rate + 2 / exp_rate) / (accesses * itemsize / bandwidth)
            """,
            ["compute time over memory time"],
        ),
        (
            "2 accesses always",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (2 * itemsize / bandwidth) / (5 / op_rate + 2 / exp_rate)
            """,
            ["case 1 (2, 4,", "2 accesses whatever the argument"],
        ),
        (
            "itemsize left out",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (accesses / bandwidth) / (5 / op_rate + 2 / exp_rate)
            """,
            ["case 0 (4, 2,", "leaves out itemsize"],
        ),
        (
            "accesses left out",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (itemsize / bandwidth) / (5 / op_rate + 2 / exp_rate)
            """,
            ["case 0 (4, 2,", "counts one access per score"],
        ),
        (
            "bits",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (8 * accesses * itemsize / bandwidth) / (5 / op_rate + 2 / exp_rate)
            """,
            ["that counts bits"],
        ),
        (
            "the slower unit only",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (accesses * itemsize / bandwidth) / max(5 / op_rate, 2 / exp_rate)
            """,
            ["adds the units' times"],
        ),
        (
            "the fused kernel's operations",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (accesses * itemsize / bandwidth) / (4 / op_rate + 1 / exp_rate)
            """,
            ["computes each exponential once, as a fused kernel does"],
        ),
        (
            "op_rate halved again, as if it were the FLOP rate",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                return (accesses * itemsize / bandwidth) / (5 / (op_rate / 2) + 2 / exp_rate)
            """,
            ["halves op_rate"],
        ),
        (
            "lab's table",
            """
            def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
                row = lab.attention_traffic(64, 64, itemsize=itemsize)[1]
                return (accesses * itemsize / bandwidth) / (5 / op_rate + 2 / exp_rate)
            """,
            ["calls lab.attention_traffic"],
        ),
    ],
    5: [
        (
            "S not written",
            _HBM.replace("N * d + M * d + N * M", "N * d + M * d"),
            ["case 0 (4096, 4096, 64, 64, 2)", "s (element 0)", "also writes S"],
        ),
        (
            "softmax reads only",
            _HBM.replace("(N * M + N * M) * itemsize", "N * M * itemsize"),
            ["p (element 1)", "reads S and writes P"],
        ),
        (
            "softmax at 4 accesses per element",
            _HBM.replace("(N * M + N * M) * itemsize", "4 * N * M * itemsize"),
            [
                "p (element 1)",
                "4 accesses per element of S",
                "reads S once and writes P",
            ],
        ),
        ("numbers, not bytes", _HBM.replace(") * itemsize", ")"), ["times itemsize"]),
        (
            "N by N",
            _HBM.replace("M", "N").replace("(N, N,", "(N, M,"),
            ["case 1 (1000, 3000, 128, 32, 4)", "N × M"],
        ),
        (
            "d for d_v",
            _HBM.replace("dv", "d").replace("d, d, itemsize", "d, dv, itemsize"),
            ["case 1", "d_v columns"],
        ),
        (
            "fused writes S and P",
            _HBM.replace(
                "M * dv + N * dv) * itemsize   #",
                "M * dv + N * dv + 2 * N * M) * itemsize   #",
            ),
            ["fused (element 3)", "fused kernel reads Q, K, V and writes O only"],
        ),
        (
            "s: Q not read",
            _HBM.replace("(N * d + M * d + N * M)", "(M * d + N * M)"),
            ["s (element 0)", "s: the kernel reads Q, N·d numbers"],
        ),
        (
            "s: K not read",
            _HBM.replace("(N * d + M * d + N * M)", "(N * d + N * M)"),
            ["s: the kernel reads K, M·d numbers"],
        ),
        (
            "o: P not read",
            _HBM.replace("(N * M + M * dv + N * dv)", "(M * dv + N * dv)"),
            ["o: the kernel reads P, N·M numbers"],
        ),
        (
            "o: V not read",
            _HBM.replace("(N * M + M * dv + N * dv)", "(N * M + N * dv)"),
            ["o: the kernel reads V, M·d_v numbers"],
        ),
        (
            "fused: Q not read",
            _HBM.replace(
                "(N * d + M * d + M * dv + N * dv)", "(M * d + M * dv + N * dv)"
            ),
            ["fused: the fused kernel still reads Q"],
        ),
        (
            "fused: K not read",
            _HBM.replace(
                "(N * d + M * d + M * dv + N * dv)", "(N * d + M * dv + N * dv)"
            ),
            ["fused: the fused kernel still reads K"],
        ),
        (
            "fused: V not read",
            _HBM.replace(
                "(N * d + M * d + M * dv + N * dv)", "(N * d + M * d + N * dv)"
            ),
            ["fused: the fused kernel still reads V"],
        ),
        (
            "fused: O not written",
            _HBM.replace(
                "(N * d + M * d + M * dv + N * dv)", "(N * d + M * d + M * dv)"
            ),
            ["fused: the fused kernel still writes O"],
        ),
        (
            "two kernels wrong at once: each named",
            _HBM.replace("(N * d + M * d + N * M)", "(M * d + N * M)").replace(
                "(N * d + M * d + M * dv + N * dv)", "(N * d + M * d + M * dv)"
            ),
            ["s: the kernel reads Q", "fused: the fused kernel still writes O"],
        ),
        (
            "calls lab",
            """
            def hbm_bytes(N, M, d, dv, itemsize):
                rows = lab.attention_traffic(N, M, d=d, dv=dv, itemsize=itemsize)
                return tuple(r["bytes"] for r in rows if r["piece"] != "standard, total")
            """,
            ["calls lab.attention_traffic"],
        ),
        (
            "read off lab's recorder of standard attention's traffic",
            """
            from lab.tiling import standard_traffic as traffic
            def hbm_bytes(N, M, d, dv, itemsize):
                r, w = traffic(N, M, d=d, dv=dv, itemsize=itemsize).read_by, None
                w = traffic(N, M, d=d, dv=dv, itemsize=itemsize).write_by
                s = r["q"] + r["k"] + w["s"]
                p = r["s"] + w["p"]
                o = r["p"] + r["v"] + w["o"]
                return s, p, o, r["q"] + r["k"] + r["v"] + w["o"]
            """,
            ["calls lab.standard_traffic"],
        ),
    ],
}


@pytest.mark.parametrize(
    "number, source, says",
    [(n, s, says) for n, cases in PLANTED.items() for _, s, says in cases],
    ids=[f"{n}-{name}" for n, cases in PLANTED.items() for name, _, _ in cases],
)
def test_planted_mistake_is_diagnosed(number, source, says):
    _fails(number, source, *says)


# ------------------------------------------------------------------------------------ the checks, called directly


def softmax_row(N, M, itemsize, bandwidth):
    return 7 * N * M, 2 * N * M * itemsize, 2 * N * M * itemsize / bandwidth


@pytest.mark.parametrize(
    "wrong, says",
    [
        (
            lambda N, M, it, bw: (7 * N * M, N * M * it, N * M * it / bw),
            "also writes P",
        ),
        (
            lambda N, M, it, bw: (7 * N * M, 4 * N * M * it, 4 * N * M * it / bw),
            "4 accesses per score",
        ),
        (lambda N, M, it, bw: (7 * N * M, 2 * N * M, 2 * N * M / bw), "are numbers"),
        (
            lambda N, M, it, bw: (2 * N * M,) + softmax_row(N, M, it, bw)[1:],
            "7 operations per score",
        ),
        (
            lambda N, M, it, bw: softmax_row(N, M, it, bw)[:2] + (7 * N * M / bw,),
            "divides the bytes, not the operations",
        ),
        (
            lambda N, M, it, bw: (5 * N * M,) + softmax_row(N, M, it, bw)[1:],
            "the fused kernel's count",
        ),
        (
            lambda N, M, it, bw: (
                softmax_row(N, M, it, bw)[:2] + (softmax_row(N, M, it, bw)[2] * 1e6,)
            ),
            "in microseconds",
        ),
        (lambda N, M, it, bw: softmax_row(N, N, it, bw), "that uses N × N"),
        (
            lambda N, M, it, bw: (7 * N * M, 16 * N * M * it, 16 * N * M * it / bw),
            "that counts bits",
        ),
    ],
)
def test_the_softmax_row_check_names_each_planted_mistake(capsys, wrong, says):
    checks.check_softmax_row(softmax_row)
    assert capsys.readouterr().out == "softmax_row: ✓ passed 5 cases\n"
    checks.check_softmax_row(wrong)
    out = capsys.readouterr().out
    assert "✗" in out and says in out, out


def _qk_ridge(N, itemsize, ridge):
    r = ridge * itemsize
    if N == math.inf:
        return r / 2
    return math.inf if N <= r else r * N / (2 * (N - r))


def _loop(N, itemsize, ridge):
    """A search over integer d, as a learner who does not solve the inequality writes it."""
    if N == math.inf:
        return math.nan
    for d in range(1, 100_000):
        if 2 * N * N * d >= ridge * itemsize * (2 * N * d + N * N):
            return d
    return math.inf


@pytest.mark.parametrize(
    "wrong, says",
    [
        (lambda N, it, R: R * it / 2, "the limit as N grows"),
        (lambda N, it, R: _qk_ridge(N, 1, R), "counts numbers, not bytes"),
        (
            lambda N, it, R: _qk_ridge(N, it / 2, R),
            "counts 4·N·M·d FLOPs, the forward's two products",
        ),
        (
            lambda N, it, R: (
                x if (x := _qk_ridge(N, it, R)) == math.inf else math.ceil(x)
            ),
            "return the real threshold",
        ),
        (_loop, "return the real threshold"),
        (
            lambda N, it, R: (
                (R * it * N / (2 * (N - R * it)) if N > R * it else math.inf)
                if N != math.inf
                else math.nan
            ),
            "take its limit as N grows",
        ),
        (
            lambda N, it, R: R * it if N == math.inf else _qk_ridge(N, it, R),
            "tends to r/2, not r",
        ),
        (
            lambda N, it, R: (
                R * it
                if N == math.inf
                else (R * it * N / (N - 2 * R * it) if N > 2 * R * it else math.inf)
            ),
            "that is N·M·d FLOPs",
        ),
        (
            lambda N, it, R: (
                R * it / 2 if N == math.inf else R * it * N / (2 * abs(N - R * it))
            ),
            "no d gets there, return math.inf",
        ),
    ],
    ids=[
        "limit",
        "numbers",
        "4NMd",
        "ceil",
        "loop",
        "inf-over-inf",
        "r",
        "flops",
        "never",
    ],
)
def test_the_qk_ridge_check_names_each_planted_mistake(capsys, wrong, says):
    checks.check_qk_ridge(_qk_ridge)
    assert capsys.readouterr().out == "_qk_ridge: ✓ passed 9 cases\n"
    checks.check_qk_ridge(wrong)
    out = capsys.readouterr().out
    assert "✗" in out and says in out, out


def test_the_qk_ridge_check_refuses_lab_s_traffic():
    def qk_ridge(N, itemsize, ridge):
        lab.attention_traffic(64, d=64, itemsize=itemsize)  # a look at lab's table
        r = ridge * itemsize
        if N == math.inf:
            return r / 2
        return math.inf if N <= r else r * N / (2 * (N - r))

    out = run_check(EX[6], source(inspect.getsource(qk_ridge)))
    assert "calls lab.attention_traffic" in out, out


@pytest.mark.parametrize(
    "check, fn, right, wrong, shown",
    [
        ("check_softmax_row", softmax_row, 1.75, 3.5, "1.75"),
        (
            "check_softmax_balance",
            lambda it, a, bw, f, e: (a * it / bw) / (5 / f + 2 / e),
            1.93,
            7.17,
            "1.93",
        ),
        (
            "check_largest_n",
            lambda g, s, L: math.isqrt(g * 2**30 // ((L + 1) * s)),
            36076,
            146542,
            "36,076",
        ),
        ("check_qk_ridge", _qk_ridge, 223, 201, "223"),
    ],
)
def test_a_written_prediction_is_compared_and_the_right_value_shown(
    capsys, check, fn, right, wrong, shown
):
    getattr(checks, check)(fn, predicted=right)
    out = capsys.readouterr().out
    assert out.count("✓") == 2 and f"the right value: {shown}" in out, out
    getattr(checks, check)(fn, predicted=wrong)
    out = capsys.readouterr().out
    assert out.count("✓") == 1 and "✗" in out and f"the right value: {shown}" in out, (
        out
    )


_PREDICTION_CASES = [
    ("check_softmax_row", 1.75, "1.75"),
    ("check_softmax_balance", 1.93, "1.93"),
    ("check_largest_n", 36076, "36,076"),
    ("check_qk_ridge", 223, "223"),
    ("check_lean_attention", 6, "6"),
]


def _stub(*args):
    raise NotImplementedError


def _wrong(*args):
    return 0.5  # a function that runs and fails every case


@pytest.mark.parametrize("check, right, shown", _PREDICTION_CASES)
@pytest.mark.parametrize("fn", [_stub, _wrong], ids=["stub", "wrong function"])
@pytest.mark.parametrize("placeholder", [0, 1, -3.0])
def test_a_prediction_written_before_the_function_passes_reveals_nothing(
    capsys, check, right, shown, fn, placeholder
):
    getattr(checks, check)(fn, predicted=placeholder)
    out = capsys.readouterr().out
    assert "the right value:" not in out and "why 6" not in out, out
    assert "shown once your function passes" in out and "✗" in out, out


@pytest.mark.parametrize("check, right, shown", _PREDICTION_CASES)
def test_a_right_prediction_is_confirmed_before_the_function_works(
    capsys, check, right, shown
):
    getattr(checks, check)(_stub, predicted=right)
    out = capsys.readouterr().out
    assert f"the right value: {shown} ✓" in out, out


def test_the_lean_prediction_is_compared_and_explained_when_wrong():
    right = run_check(EX[3], EX[3].solution, extra={"predicted_arrays": 6})
    assert "the right value: 6 ✓" in right, right
    wrong = run_check(EX[3], EX[3].solution, extra={"predicted_arrays": 3})
    assert "the right value: 6 ✗" in wrong, wrong
    assert "np.sqrt(d) is a numpy float64 scalar" in wrong, wrong


def test_the_softmax_row_check_refuses_lab_s_table(capsys):
    def softmax_row(N, M, itemsize, bandwidth):
        r = lab.attention_traffic(N, M, itemsize=itemsize)[1]
        return r["ops"], r["bytes"], r["bytes"] / bandwidth

    checks.check_softmax_row(softmax_row)
    assert "calls lab.attention_traffic" in capsys.readouterr().out


def test_checks_print_one_line_on_pass_and_a_hint_on_failure(capsys):
    checks.check_score_bytes(lambda B, H, N, M, s: 2 * B * H * N * M * s)
    checks.check_largest_n(lambda g, s, L: math.isqrt(g * 2**30 // ((L + 1) * s)))
    checks.check_score_bytes(lambda B, H, N, M, s: B * H * N * M * s)
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0] == "score_bytes: ✓ passed 7 cases"
        and out[1] == "largest_n: ✓ passed 9 cases"
    )  # a lambda: the exercise's name
    assert out[2].startswith("score_bytes: ✗ case 0") and out[3].startswith(
        "  hint: that is S alone"
    )


def test_own_work_property_restores_lab_even_when_the_function_raises():
    before = lab.attention_reference
    prop = support._own_work("attention_reference")

    def boom(q, k, v):
        lab.attention_reference(q, k, v)
        raise RuntimeError("learner bug")

    profile = sys.getprofile()
    with pytest.raises(RuntimeError):
        prop(boom, (np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2))), None)
    assert lab.attention_reference is before and sys.getprofile() is profile


def test_guarded_hands_the_learner_copies_and_adds_a_note_to_known_errors():
    seen = []

    def f(s):
        seen.append(s)
        s[0] = 99.0
        raise ValueError("operands could not be broadcast together")

    x = np.zeros(3)
    with pytest.raises(ValueError, match=r"broadcast together \(keep the row axis\)"):
        support._guarded(f, "f", {"broadcast": "keep the row axis"})(x)
    assert seen[0] is not x and (x == 0).all()


def test_hint_names_the_matching_mistake_and_stays_quiet_when_values_agree():
    hint = support._hint([(lambda a: a + 1, "off by one")], "generic")
    assert (
        hint((1,), 2, 1) == "off by one"
        and hint((1,), 5, 1) == "generic"
        and hint((1,), 1, 1) is None
    )


def test_the_checks_module_exports_check_names_only():
    assert all(n.startswith("check_") for n in checks.__all__)


# ------------------------------------------------------------------------- the guard every check uses, directly


def _honest_softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


_S = (np.random.default_rng(0).standard_normal((3, 5)),)


def _alias(s):
    from lab.softmax import softmax_safe as mine

    return mine(s)


def _module_path(s):
    import lab.softmax

    return lab.softmax.softmax_safe(s)


def _closure():
    f = lab.softmax_safe
    return lambda s: f(s)


def _source_copy():
    import inspect

    import lab.softmax

    ns = dict(vars(lab.softmax))
    exec(inspect.getsource(lab.softmax.softmax_safe), ns)  # lab's text, compiled afresh
    return ns["softmax_safe"]


def _in_a_thread(s):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lab.softmax_safe, s).result()


def _torch(name):
    import torch

    def use(s):
        t = torch.from_numpy(s)
        if name == "softmax":
            return torch.softmax(t, -1).numpy()
        if name == "method":
            return t.softmax(-1).numpy()
        if name == "logsumexp":
            return np.exp(s - torch.logsumexp(t, -1, keepdim=True).numpy())
        q = t[None]
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)[0].numpy()

    return use


@pytest.mark.parametrize(
    "cheat, says",
    [
        (_alias, "calls lab.softmax_safe"),
        (_module_path, "calls lab.softmax_safe"),
        (_closure(), "calls lab.softmax_safe"),
        (functools.partial(lab.softmax_safe), "calls lab.softmax_safe"),
        (_in_a_thread, "calls lab.softmax_safe"),
        (_source_copy(), "calls lab.softmax_safe"),
        (_torch("softmax"), "calls torch.softmax:"),
        (_torch("method"), "calls torch.Tensor.softmax"),
        (_torch("logsumexp"), "calls torch.logsumexp:"),
        (_torch("sdpa"), "calls torch.nn.functional.scaled_dot_product_attention:"),
    ],
    ids=[
        "alias",
        "module",
        "closure",
        "partial",
        "thread",
        "source copy",
        "softmax",
        "method",
        "lse",
        "sdpa",
    ],
)
def test_the_guard_refuses_lab_s_answer_by_any_route_and_torch_in_a_numpy_exercise(
    cheat, says
):
    prop = support._own_work("softmax_safe", numpy_only=True)
    said = prop(cheat, _S, None)
    assert said is not None and says in said, said
    assert ("lab's own answer" in said) == says.startswith("calls lab.")
    assert "use numpy instead" not in said
    assert prop(_honest_softmax, _S, None) is None


def test_the_guard_allows_torch_where_numpy_is_not_asked_and_names_a_replaced_profiler():
    assert support._own_work("softmax_safe")(_torch("softmax"), _S, None) is None

    def unhooks(s):
        sys.setprofile(None)
        return lab.softmax_safe(s)

    said = support._own_work("softmax_safe")(unhooks, _S, None)
    assert "sys.setprofile" in said


def test_the_guard_of_a_numpy_exercise_never_imports_torch():
    code = (
        "import sys, numpy as np; from lab.checks import _support as s; "
        "p = s._own_work('softmax_safe', numpy_only=True); "
        "print(p(lambda x: np.exp(x) / np.exp(x).sum(), (np.ones(3),), None), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["None", "False"], out.stderr


def test_the_guard_finds_a_module_s_own_answer_and_a_class_s_methods():
    codes = support._course_code(["tiling.flash_counts", "CountingArray"])
    assert "lab.tiling.flash_counts" in codes.values()
    assert "lab.CountingArray" in codes.values()


def test_watch_course_records_lab_s_answers_by_code_whatever_name_reaches_them():
    from lab.attention import attention_reference as hidden

    q = np.ones((2, 4))
    with support.watch_course(["attention_reference", "softmax_safe"]) as used:
        hidden(q, q, q)
        _closure()(q)
    assert used == ["attention_reference", "softmax_safe"]
    with support.watch_course(["attention_reference"]) as used:
        _honest_softmax(q)
    assert used == [] and lab.attention_reference is hidden


def test_a_learner_s_exception_is_shown_with_the_line_of_their_code_that_raised_it():
    out = run_check(
        EX[3],
        source(
            """
            def lean_attention(q, k, v):
                s = q @ k.T
                return s @ v.T
            """
        ),
    )
    assert "raised ValueError" in out and "(line 3 of your code)" in out, out


def test_fresh_cases_differ_between_runs_and_a_seed_draws_them_again(capsys):
    asked = []

    def spy(B, H, N, M, itemsize):
        asked.append((B, H, N, M, itemsize))
        return 0

    for seed in (11, 11, 12):
        checks.check_score_bytes(
            lambda *a: spy(*a) or 2 * a[0] * a[1] * a[2] * a[3] * a[4], seed=seed
        )
    # each case runs once: its value is the guarded run's
    runs = [asked[i : i + 7] for i in range(0, len(asked), 7)]
    assert (
        runs[0] == runs[1] and runs[0][4:] != runs[2][4:] and runs[0][:4] == runs[2][:4]
    )
    checks.check_largest_n(lambda g, s: 0, seed=5)
    assert "seed=5" in capsys.readouterr().out


_LAB_BYTES = "lab.attention_bytes(N, M, itemsize, heads=B * H)"
_EVASIONS = {
    "asks whether it is watched": (
        """
        import sys
        def score_bytes(B, H, N, M, itemsize):
            return LAB if sys.getprofile() is None else 0
        """,
        ["expected 6720, got 0"],
    ),
    "remembers a first call": (
        """
        _seen = {}
        def score_bytes(B, H, N, M, itemsize):
            key = (B, H, N, M, itemsize)
            if key not in _seen:
                _seen[key] = LAB
            return _seen[key]
        """,
        ["calls lab.attention_bytes"],
    ),
    "switches the profiler off and back on": (
        """
        import sys
        def score_bytes(B, H, N, M, itemsize):
            hook = sys.getprofile()
            sys.setprofile(None)
            try:
                return LAB
            finally:
                sys.setprofile(hook)
        """,
        ["replaces the profiler (sys.setprofile)"],
    ),
    "a _thread": (
        """
        import _thread, time
        def score_bytes(B, H, N, M, itemsize):
            box = []
            _thread.start_new_thread(lambda: box.append(LAB), ())
            while not box:
                time.sleep(0.001)
            return box[0]
        """,
        ["hands work to another thread"],
    ),
    "a thread started before the check": (
        """
        import queue, threading
        _ask, _answer = queue.Queue(), queue.Queue()
        def _worker():  # answers one case, then ends
            B, H, N, M, itemsize = _ask.get()
            _answer.put(LAB)
        threading.Thread(target=_worker, daemon=True).start()
        def score_bytes(B, H, N, M, itemsize):
            _ask.put((B, H, N, M, itemsize))
            return _answer.get()
        """,
        ["hands work to another thread"],
    ),
    "a thread started before the check, busy-waiting": (
        """
        import threading, time
        _box = {"ask": None, "answer": None}
        def _worker():  # answers one case, then ends
            while _box["ask"] is None:
                time.sleep(0.0001)
            B, H, N, M, itemsize = _box["ask"]
            _box["answer"] = LAB
        threading.Thread(target=_worker, daemon=True).start()
        def score_bytes(B, H, N, M, itemsize):
            _box["ask"] = (B, H, N, M, itemsize)
            while _box["answer"] is None:
                pass
            return _box["answer"]
        """,
        ["hands work to another thread"],
    ),
    "a subprocess": (
        """
        import subprocess, sys
        def score_bytes(B, H, N, M, itemsize):
            code = f"import lab; print(lab.attention_bytes({N}, {M}, {itemsize}, heads={B * H}))"
            return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        """,
        ["runs work in another process"],
    ),
    "lab's code with its docstring edited": (
        """
        import types
        _c = lab.attention_bytes.__code__
        _consts = tuple("" if isinstance(c, str) and c.startswith("Bytes") else c for c in _c.co_consts)
        _f = types.FunctionType(_c.replace(co_consts=_consts), lab.attention_bytes.__globals__)
        def score_bytes(B, H, N, M, itemsize):
            return _f(N, M, itemsize, B * H)
        """,
        ["calls lab.attention_bytes"],
    ),
    "an object that computes when the check converts it": (
        """
        class _Later:
            def __init__(self, *args):
                self.args = args
            def __array__(self, dtype=None, copy=None):
                return np.asarray(lab.attention_bytes(*self.args), dtype=dtype)
            def __float__(self):
                return float(lab.attention_bytes(*self.args))
        def score_bytes(B, H, N, M, itemsize):
            return _Later(N, M, itemsize, B * H)
        """,
        ["calls lab.attention_bytes"],
    ),
    "the check's reference from its frame": (
        """
        import sys
        def score_bytes(B, H, N, M, itemsize):
            return sys._getframe(2).f_locals["reference"](B, H, N, M, itemsize)
        """,
        ["calls lab.attention_bytes"],
    ),
}


@pytest.mark.parametrize("how", list(_EVASIONS))
def test_an_answer_that_escapes_the_watch_is_refused(how):
    text, says = _EVASIONS[how]
    _score_bytes_fails(text.replace("LAB", _LAB_BYTES), *says)


def test_the_reference_of_a_check_without_a_lab_answer_is_refused_through_a_traceback():
    assert_fails(
        EX[4],
        """
        def largest_n(gib, itemsize, layers):
            try:
                raise RuntimeError
            except RuntimeError as e:
                frame = e.__traceback__.tb_frame
            while "reference" not in frame.f_locals:
                frame = frame.f_back
            return frame.f_locals["reference"](gib, itemsize, layers)
        """,
        (
            "reads the check's own frames or objects",
            "lab's own answer to this exercise",
        ),
    )


@pytest.mark.parametrize(
    "text",
    [
        """
        def lean_attention(q, k, v):
            s = q @ k.T
            s /= np.sqrt(q.shape[-1])  # in place: float32 stays float32
            np.exp(s, out=s)
            return (s @ v) / s.sum(axis=-1, keepdims=True)
        """,
        """
        def lean_attention(q, k, v):
            o = np.empty((q.shape[0], v.shape[1]), q.dtype)
            for i in range(q.shape[0]):  # one row of M scores at a time
                s = k @ q[i]
                s *= q.shape[-1] ** -0.5
                np.exp(s, out=s)
                o[i] = s @ v / s.sum()
            return o
        """,
    ],
    ids=["in place, normalized after PV", "a row at a time"],
)
def test_exercise_3_accepts_other_lean_versions(text):
    assert run_check(EX[3], source(text)) == PASSED[3]


def _hbm(N, M, d, dv, it):
    s = (N * d + M * d + N * M) * it
    return (
        s,
        2 * N * M * it,
        (N * M + M * dv + N * dv) * it,
        (N * d + M * d + M * dv + N * dv) * it,
    )


@pytest.mark.parametrize(
    "wrong, says",
    [
        (
            lambda *a: (
                _hbm(*a)[:2] + ((a[0] * a[1] + a[1] * a[3]) * a[4],) + _hbm(*a)[3:]
            ),
            "also writes its result O",
        ),
        (
            lambda *a: _hbm(*a)[:3] + (sum(_hbm(*a)[:3]),),
            "adds the three kernels' bytes",
        ),
        (
            lambda N, M, d, dv, it: (
                ((2 * N * d + N * M) * it,) + _hbm(N, M, d, dv, it)[1:]
            ),
            "M·d numbers, not N·d",
        ),
    ],
    ids=["no O write", "fused = sum", "K as N·d"],
)
def test_the_hbm_bytes_check_names_the_new_planted_mistakes(capsys, wrong, says):
    checks.check_hbm_bytes(_hbm)
    assert capsys.readouterr().out == "_hbm: ✓ passed 6 cases\n"
    checks.check_hbm_bytes(wrong)
    out = capsys.readouterr().out
    assert "✗" in out and says in out, out


def test_the_score_bytes_check_names_three_arrays(capsys):
    checks.check_score_bytes(lambda B, H, N, M, s: 3 * B * H * N * M * s)
    out = capsys.readouterr().out
    assert "✗" in out and "three N×M arrays per head" in out, out


@pytest.mark.parametrize(
    "check, wrong",
    [
        (
            "check_softmax_balance",
            lambda *case: checks._softmax_balance(*case),
        ),
        ("check_largest_n", lambda g, s, L: checks._largest_n(g, s, L)),
    ],
)
def test_the_derived_exercises_refuse_lab_s_own_answer(capsys, check, wrong):
    getattr(checks, check)(wrong)
    assert "lab's own answer to this exercise" in capsys.readouterr().out


def test_the_balance_check_says_when_float32_lost_the_digits(capsys):
    def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
        t = np.float32(accesses * itemsize / bandwidth)
        return float(t / np.float32(5 / op_rate + 2 / exp_rate))

    checks.check_softmax_balance(softmax_balance)
    out = capsys.readouterr().out
    assert "✗" in out and "a step ran in float32" in out, out


@pytest.mark.parametrize("length", [3, 5])
def test_the_hbm_bytes_check_names_the_expected_length_of_a_wrong_tuple(capsys, length):
    checks.check_hbm_bytes(lambda *a: _hbm(*a)[:3] + (0,) * (length - 3))
    out = capsys.readouterr().out
    assert "✗" in out and f"it returns {length} values: return 4" in out, out


def test_the_largest_n_check_refuses_a_search_over_lab_s_formula(capsys):
    def largest_n(gib, itemsize, layers):
        lo, hi = 0, 10**7
        while lo < hi:
            mid = (lo + hi + 1) // 2
            held = (layers - 1) * mid * mid * itemsize
            held += lab.attention_bytes(mid, itemsize=itemsize)
            lo, hi = (mid, hi) if held <= gib * 2**30 else (lo, mid - 1)
        return lo

    checks.check_largest_n(largest_n)
    out = capsys.readouterr().out
    assert "✗" in out and "calls lab.attention_bytes" in out, out


def test_the_ridge_check_refuses_a_search_at_a_large_n_for_the_limit(capsys):
    """A bisection on d at N = 1e12 comes within 1e-9 of r/2, not to it: the limit is asked exactly."""

    def qk_ridge(N, itemsize, ridge):
        N = 1e12 if N == math.inf else N
        if N <= ridge * itemsize:
            return math.inf
        lo, hi = 0.0, 1e6
        for _ in range(200):
            mid = (lo + hi) / 2
            ok = 2 * N * N * mid >= ridge * (2 * N * mid + N * N) * itemsize
            lo, hi = (lo, mid) if ok else (mid, hi)
        return hi

    checks.check_qk_ridge(qk_ridge)
    out = capsys.readouterr().out
    assert "✗ case 1 (inf," in out and "a search at a large finite N" in out, out


def test_the_balance_check_s_fallback_hint_does_not_give_the_formula(capsys):
    checks.check_softmax_balance(lambda *case: (case[0] * 2.1 + case[1]) / 3)
    out = capsys.readouterr().out
    assert "✗" in out and "count the three passes' operations" in out, out
    assert "5 / op_rate" not in out and "2 / exp_rate" not in out, out


@pytest.mark.parametrize("typed", [1.93, 2.39])
def test_the_balance_check_says_a_typed_in_number_is_one(capsys, typed):
    """A number typed in matches some slip on some case by chance: the hint says what it is instead."""
    checks.check_softmax_balance(lambda *case: typed)
    out = capsys.readouterr().out
    assert "✗" in out and f"it returns {typed} whatever its arguments" in out, out
    assert "one access per score" not in out, out


def test_the_balance_check_refuses_lab_s_operation_counts(capsys):
    def softmax_balance(itemsize, accesses, bandwidth, op_rate, exp_rate):
        ops, exps = lab.SOFTMAX_OPS_PER_ELEMENT, lab.memory.SOFTMAX_EXPS_PER_ELEMENT
        t_memory = accesses * itemsize / bandwidth
        return t_memory / ((ops - exps) / op_rate + exps / exp_rate)

    checks.check_softmax_balance(softmax_balance)
    out = capsys.readouterr().out
    assert "✗" in out and "reads lab's count" in out, out
    assert "SOFTMAX_OPS_PER_ELEMENT" in out and "SOFTMAX_EXPS_PER_ELEMENT" in out, out


def test_the_balance_prediction_at_the_flop_rate_is_named(capsys):
    """2.39 is the ratio with the lone operations at 19.5 T, the FLOP rate that counts an FMA as two."""

    def mine(it, a, bw, f, e):
        return (a * it / bw) / (5 / f + 2 / e)

    checks.check_softmax_balance(mine, predicted=2.39)
    out = capsys.readouterr().out
    assert "the right value: 1.93 ✗" in out, out
    assert "at the FP32 FLOP rate, 19.5 T" in out and "half, 9.75 T/s" in out, out
    checks.check_softmax_balance(mine, predicted=1.93)
    assert "FLOP rate" not in capsys.readouterr().out


def test_the_measured_prediction_of_exercise_3_stays_in_the_learner_copy_and_runs_on_the_stub():
    """The cell that measures the three versions, the learner's lean_attention among them, is feedback on the
    learner's own function: not a solution cell, and it says 'not written yet' for a stub."""
    sys.path.insert(0, str(ROOT / "tools"))
    import student

    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    title = "# Exercise 3: the prediction, measured"
    kept = [c.source for c in student.student_copy(nb).cells if title in c.source]
    assert len(kept) == 1, "the learner's copy drops the measured prediction"
    ns = {"lab": lab, "np": np, "rng": np.random.default_rng(0)}
    exec(compile(EX[3].stub, "<stub>", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(kept[0], "<measured>", "exec"), ns)
    assert "lean_attention   : not written yet (exercise 3 above)" in out.getvalue()
    assert "upcast_attention : " in out.getvalue()


@pytest.mark.parametrize(
    "fused, says, never",
    [
        ("N * d + M * d + M * dv + N * dv", ["hint: o: O = PV also writes"], "fused"),
        (
            "N * d + M * d + M * dv",
            ["hint: o and fused are wrong here; o: ", "; fused: "],
            None,
        ),
    ],
)
def test_the_hbm_bytes_hint_names_only_the_wrong_elements(capsys, fused, says, never):
    """O's write left out of o alone: the hint names o only; left out of o and fused: it says both are wrong."""

    def hbm_bytes(N, M, d, dv, itemsize):
        s = (N * d + M * d + N * M) * itemsize
        p = 2 * N * M * itemsize
        return s, p, (N * M + M * dv) * itemsize, eval(fused) * itemsize

    checks.check_hbm_bytes(hbm_bytes)
    out = capsys.readouterr().out
    assert "✗ case 0" in out and all(s in out for s in says), out
    assert never is None or never not in out.split("hint:")[1], out


# ------------------------------------------------------------------ section 2: kernel 1 priced by hand

_N, _d, _it = 4096, 64, 2
_F = 2 * _N * _N * _d
_BYTES = (2 * _N * _d + _N * _N) * _it
_HBM, _PEAK = 1.555e12, 312e12
_RIGHT = dict(
    F=_F, nbytes=_BYTES, t_memory=_BYTES / _HBM, t_compute=_F / _PEAK, bound="memory"
)


def _priced(**wrong):
    return {**_RIGHT, **wrong}


def test_the_qk_row_check_agrees_with_lab_s_row():
    row = lab.attention_traffic(4096, d=64, itemsize=2, chip_name="A100")[0]
    assert (row["flops"], row["bytes"], row["bound"]) == (_F, _BYTES, "memory")
    assert row["t_memory"] == pytest.approx(_RIGHT["t_memory"])
    assert row["t_compute"] == pytest.approx(_RIGHT["t_compute"])


def test_the_qk_row_check_passes_a_hand_computation_to_three_figures(capsys):
    checks.check_qk_row(
        F=2.15e9, nbytes=3.46e7, t_memory=2.23e-5, t_compute=6.88e-6, bound="Memory"
    )
    out = capsys.readouterr().out
    assert "✗" not in out and out.count("✓") == 6, out
    assert "all five match lab's row" in out, out


@pytest.mark.parametrize(
    "wrong, field, says",
    [
        (dict(F=_N * _N * _d), "F", "counts multiply-adds"),
        (dict(F=4 * _N * _N * _d), "F", "both matmuls"),
        (dict(F=_F + 7 * _N * _N), "F", "the softmax's operations"),
        (dict(F=_F / 1e9), "F", "in GFLOP"),
        (dict(nbytes=2 * _N * _d * _it), "nbytes", "leaves out the write of S"),
        (dict(nbytes=_BYTES * 2), "nbytes", "float32"),
        (dict(nbytes=_BYTES / 2), "nbytes", "those are numbers"),
        (dict(nbytes=_N * _N * _it), "nbytes", "reads Q and K"),
        (dict(nbytes=_BYTES + _N * _N * _it), "nbytes", "reads S back"),
        (dict(nbytes=_BYTES / 2**20), "nbytes", "in MiB"),
        (dict(t_memory=_BYTES / 19e12), "t_memory", "SRAM's bandwidth"),
        (dict(t_memory=_BYTES / 2.039e12), "t_memory", "80 GB A100"),
        (dict(t_memory=_BYTES / _HBM * 1e6), "t_memory", "in µs"),
        (dict(t_compute=_F / 19.5e12), "t_compute", "FP32 rate"),
        (dict(t_compute=_F / 989e12), "t_compute", "H100"),
        (dict(t_compute=_F / _PEAK * 1e6), "t_compute", "in µs"),
        (dict(bound="compute"), "bound", "the larger of the two times"),
        (dict(bound="slow"), "bound", 'write "memory" or "compute"'),
        # a time worked from a wrong count is traced to it; a wrong rate on a wrong count still named
        (
            dict(nbytes=2 * _N * _d * _it, t_memory=2 * _N * _d * _it / _HBM),
            "t_memory",
            "right from your nbytes",
        ),
        (
            dict(F=_N * _N * _d, t_compute=_N * _N * _d / 19.5e12),
            "t_compute",
            "FP32 rate",
        ),
        (
            dict(t_memory=1e-6, bound="compute"),
            "bound",
            "right from your times",
        ),
    ],
)
def test_the_qk_row_check_names_each_planted_mistake(capsys, wrong, field, says):
    checks.check_qk_row(**_priced(**wrong))
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith(field))
    at = out.index(line)
    assert "✗" in line and says in " ".join(out[at:].split()), out
    assert "all five match" not in out, out
    assert "lab's" not in line, out  # a wrong number never reveals lab's row


def test_the_qk_row_check_says_what_is_not_written_and_shows_nothing_of_lab_s_row(
    capsys,
):
    checks.check_qk_row(F=..., nbytes=..., t_memory=..., t_compute=..., bound=...)
    out = capsys.readouterr().out
    assert "not written yet" in out and "the table after this check" in out
    assert "2.147" not in out and "e+" not in out and "✓" not in out, out
    checks.check_qk_row(**_priced(t_compute=..., bound=...))
    out = capsys.readouterr().out
    assert "not written yet: t_compute, bound" in out and "all five" not in out, out
    checks.check_qk_row(**_priced(F="2e9"))
    assert "write a number" in capsys.readouterr().out


def test_the_qk_row_check_prints_lines_a_room_can_read(capsys):
    checks.check_qk_row(F=1.0, nbytes=2.0, t_memory=3.0, t_compute=4.0, bound="compute")
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out


def test_the_notebook_prices_kernel_1_before_the_table_and_works_it_after():
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    check = next(i for i, s in enumerate(sources) if "check_qk_row(" in s)
    table = next(i for i, s in enumerate(sources) if "lab.traffic_rows(" in s)
    ex1 = next(i for i, s in enumerate(sources) if s.startswith("### Exercise 1"))
    assert check < ex1 < table
    assert "qk_F = ..." in sources[check - 1] and "qk_bound = ..." in sources[check - 1]
    # the worked row follows the table that reveals it (not a solution: it sits before the exercises)
    answer = [i for i, s in enumerate(sources) if "Kernel 1, worked" in s]
    assert answer == [table + 1]
    # nothing above the check gives its numbers away
    above = "\n".join(sources[:check])
    for given in ("34,603,008", "34{,}603{,}008", "22.3", "6.88", "2.15"):
        assert given not in above, given


def test_exercise_2_shows_the_measured_count_beside_a_right_one():
    out = run_check(EX[2], EX[2].solution + "\nmy_arrays = 3\n")
    assert out.startswith("my_attention: ✓ passed 4 cases\n"), out
    assert "N×M arrays at its peak; your count: 3 ✓" in out and "hint" not in out, out
    # an in-place version, counted right, passes too: the count is of the learner's own code
    out = run_check(EX[2], _src(_MY_LEAN) + "my_arrays = 1\n")
    assert "your count: 1 ✓" in out, out


def test_exercise_2_hides_the_measured_count_until_one_is_written():
    out = run_check(EX[2], EX[2].solution)
    assert "not written yet" in out and "measured (float32" not in out, out


def test_exercise_2_names_a_count_that_is_not_a_number():
    with pytest.raises(TypeError, match="predicted must be a number"):
        run_check(EX[2], EX[2].solution + "\nmy_arrays = 'three'\n")


def test_exercise_2_measures_the_learner_s_function_not_lab_s():
    # a lean body that hands the work to lab's attention only when it is measured is refused
    out = run_check(
        EX[2],
        _src(
            """
            import tracemalloc
            def my_attention(q, k, v):
                if tracemalloc.is_tracing():
                    return lab.attention_naive(q, k, v)
                s = q @ k.T * q.shape[-1] ** -0.5
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                return p / p.sum(axis=-1, keepdims=True) @ v
            my_arrays = 2
            """
        ),
    )
    assert "✗" in out and "calls lab.attention_naive" in out, out


# Exercise 2's count, wrong for a right function: the check passes the function, marks the count ✗ and says why
COUNT_PLANTED = [
    (
        "the obvious code, counted as 2",
        _MY_OBVIOUS + "my_arrays = 2\n",
        [
            "my_attention: ✓ passed",
            "your count: 2 ✗",
            "holds more than you counted",
            "alive at the same moment",
        ],
    ),
    (
        "an in-place version, counted as 3",
        _MY_LEAN + "my_arrays = 3\n",
        [
            "my_attention: ✓ passed",
            "your count: 3 ✗",
            "holds fewer than you counted",
            "(`out=`, `s /= l`)",
        ],
    ),
    (
        "np.sqrt's float64 copies, cast back, counted as 3",
        """
            def my_attention(q, k, v):
                s = q @ k.T / np.sqrt(q.shape[-1])
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                return (p / p.sum(axis=-1, keepdims=True) @ v).astype(q.dtype)
            my_arrays = 3
            """,
        ["your count: 3 ✗", "float64 copies", "NEP 50"],
    ),
]


@pytest.mark.parametrize(
    "source, says",
    [(s, says) for _, s, says in COUNT_PLANTED],
    ids=[name for name, _, _ in COUNT_PLANTED],
)
def test_a_wrong_count_of_a_right_function_is_explained(source, says):
    out = " ".join(
        run_check(EX[2], _src(source)).split()
    )  # hints wrap at 100 characters
    assert "✗" in out and "hint:" in out, out
    for said in says:
        assert said in out, (said, out)
