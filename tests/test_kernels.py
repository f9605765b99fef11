"""The kernel ladder in lab/kernels: its table points at real modules, functions and notebooks; every figure a
rung's docstring states is measured again here; the shared rules (causal visibility, the -inf guard, the counting
accessors) hold."""

import importlib
import pathlib
import re

import numpy as np
import pytest

import lab
from lab import kernels, trace
from lab._tiles import TilePlan

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = [row for row in kernels.__doc__.splitlines() if re.match(r"\| \d \|", row)]
NUMPY_RUNGS = ["rung0_reference", "rung1_naive", "rung2_numpy_fa1", "rung3_numpy_fa2"]
RUNGS = NUMPY_RUNGS + ["rung4_torch_fa2", "rung5_torch_lazy", "rung6_triton"]


def test_the_ladder_table_has_seven_rungs_in_order():
    assert [int(row.split("|")[1]) for row in TABLE] == list(range(7))


@pytest.mark.parametrize("row", TABLE)
def test_each_rung_points_at_a_real_module_function_and_notebooks(row):
    _, rung, module, function, _, notebooks, _ = (
        cell.strip() for cell in row.split("|")
    )
    path = ROOT / module.strip("`")
    assert path.exists(), f"rung {rung}: {path} does not exist"
    name = re.match(r"`(\w+)", function).group(1)
    mod = importlib.import_module(
        module.strip("`").removesuffix(".py").replace("/", ".")
    )
    assert callable(getattr(mod, name)), f"rung {rung}: {module} has no {name}"
    for nn in notebooks.split(", "):
        assert list((ROOT / "notebooks").glob(f"{nn}_*.ipynb")), (
            f"rung {rung}: no notebook {nn}"
        )


@pytest.mark.parametrize("n, module", list(enumerate(RUNGS)))
def test_each_rung_opens_with_what_it_changes(n, module):
    doc = importlib.import_module(f"lab.kernels.{module}").__doc__
    assert doc.startswith(f"Rung {n}")
    below = (
        4 if module == "rung6_triton" else n - 1
    )  # the fused kernel fuses rung 4's step
    if n:
        assert f"Changes against rung {below}" in doc and "What it buys" in doc


def _inputs(N=1024, d=64):
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((N, d), dtype=np.float32) for _ in range(3))


def _peak(fn, **kw):
    return min(lab.peak_bytes(fn, *_inputs(), **kw)[0] for _ in range(2))


def _counts(variant):
    with trace.record() as rec:
        lab.flash_attention_numpy(*_inputs(), variant=variant)
    return rec


MEMORY = [  # (module, figure as written, measure): peak bytes above the inputs, N = M = 1024, d = 64, float32
    ("rung0_reference", "26.7 MB", lambda: _peak(lab.attention_reference)),
    ("rung1_naive", "8.66 MB", lambda: _peak(lab.attention_naive)),
    ("rung1_naive", "26.7 MB", lambda: _peak(lab.attention_reference)),
    (
        "rung2_numpy_fa1",
        "0.39 MB",
        lambda: _peak(lab.flash_attention_numpy, variant="fa1"),
    ),
    (
        "rung3_numpy_fa2",
        "0.37 MB",
        lambda: _peak(lab.flash_attention_numpy, variant="fa2"),
    ),
]
COUNTS = [  # (module, figure as written, count): exact counts of lab.trace, same head, Br = Bc = 64
    ("rung0_reference", "25.2 MB", lambda: 3 * 1024 * 1024 * 8),
    ("rung1_naive", "8.39 MB", lambda: lab.attention_bytes(1024)),
    ("rung2_numpy_fa1", "13.6 MB moved", lambda: _counts("fa1").total),
    ("rung2_numpy_fa1", "(4.6 MB of it written)", lambda: _counts("fa1").writes),
    (
        "rung2_numpy_fa1",
        "3.19 M multiplies and divides",
        lambda: _mul_div(_counts("fa1")),
    ),
    (
        "rung2_numpy_fa1",
        "8.92 MB (0.27 MB written) and 1.13 M",
        lambda: (_counts("fa2").total, _counts("fa2").writes, _mul_div(_counts("fa2"))),
    ),
    (
        "rung3_numpy_fa2",
        "8.92 MB moved (0.27 MB of it written)",
        lambda: (_counts("fa2").total, _counts("fa2").writes),
    ),
    (
        "rung3_numpy_fa2",
        "13.6 MB (4.6 MB written), and 1.13 M multiplies and divides against rung 2's 3.19 M",
        lambda: (
            _counts("fa1").total,
            _counts("fa1").writes,
            _mul_div(_counts("fa2")),
            _mul_div(_counts("fa1")),
        ),
    ),
]


def _mul_div(rec):
    return rec.op_counts["mul"] + rec.op_counts["div"]


def _figures(text):
    return [float(x) * 1e6 for x in re.findall(r"(\d+(?:\.\d+)?) M", text)]


@pytest.mark.parametrize("module, text, measure", MEMORY)
def test_stated_memory_figures_are_measured_again(module, text, measure):
    doc = " ".join(importlib.import_module(f"lab.kernels.{module}").__doc__.split())
    assert text in doc
    (stated,) = _figures(text)
    assert measure() == pytest.approx(
        stated, rel=0.1
    )  # tracemalloc readings vary a little with numpy's version


@pytest.mark.parametrize("module, text, count", COUNTS)
def test_stated_counts_are_counted_again(module, text, count):
    doc = " ".join(importlib.import_module(f"lab.kernels.{module}").__doc__.split())
    assert text in doc
    got = count()
    got = got if isinstance(got, tuple) else (got,)
    assert got == pytest.approx(
        tuple(_figures(text)), rel=0.02
    )  # exact counts, written with two or three digits


def test_the_counts_are_the_formulas():
    for variant in ("fa1", "fa2"):
        assert _counts(variant) == lab.flash_counts(
            1024, 1024, 64, block_q=64, block_k=64, variant=variant
        )


@pytest.mark.parametrize("N, M", [(5, 5), (3, 8), (8, 3), (0, 4), (4, 0), (1, 1)])
def test_causal_key_end_is_the_first_hidden_key(N, M):
    for i in range(N):
        visible = [j for j in range(M) if j <= i + (M - N)]
        end = lab.causal_key_end(i, N, M)
        assert isinstance(end, int) and visible == list(range(end))
    assert (
        lab.causal_key_end(np.arange(N), N, M)
        == [lab.causal_key_end(i, N, M) for i in range(N)]
    ).all()
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    assert (lab.causal_mask(N, M) == (j <= i + (M - N))).all()
    assert (
        lab.causal_mask(N, M, rows=[N - 1], cols=np.arange(M)[1:])
        == lab.causal_mask(N, M)[N - 1 :, 1:]
    ).all()


def test_causal_key_end_takes_torch_index_tensors():
    torch = pytest.importorskip("torch")
    i = torch.arange(6)
    assert lab.causal_key_end(i, 6, 4).tolist() == [
        lab.causal_key_end(int(x), 6, 4) for x in i
    ]


@pytest.mark.parametrize(
    "N, M, Br, Bc",
    [(10, 10, 3, 4), (5, 13, 2, 3), (13, 5, 4, 2), (8, 8, 8, 8), (7, 3, 1, 1)],
)
def test_tile_plan_computes_and_masks_exactly_the_tiles_the_mask_asks(N, M, Br, Bc):
    plan = TilePlan((1, 1, N, M), Br, Bc, True)
    vis = lab.causal_mask(N, M)
    for ib, i0 in enumerate(range(0, N, Br)):
        for jb, j0 in enumerate(range(0, M, Bc)):
            tile = vis[i0 : i0 + Br, j0 : j0 + Bc]
            assert (
                plan.computed[ib, jb] == tile.any() and plan.full[ib, jb] == tile.all()
            )


def test_safe_exp_shift_replaces_only_minus_inf():
    m = np.array([-np.inf, -3.0, 0.0, 2.5], np.float32)
    shift = lab.safe_exp_shift(m)
    assert shift.dtype == np.float32 and shift.tolist() == [0.0, -3.0, 0.0, 2.5]
    s = np.full(4, -np.inf, np.float32)
    assert (np.exp(s - shift) == 0).all()  # no NaN for a row that saw no key
    assert (
        lab.safe_exp_shift(np.float32(-np.inf)) == 0
        and np.ndim(lab.safe_exp_shift(-np.inf)) == 0
    )


def test_load_and_store_move_the_tile_and_count_its_bytes():
    a = np.arange(24, dtype=np.float32).reshape(2, 6, 2)
    with trace.record() as rec:
        tile = trace.load("a", a[..., 1:3, :])
        trace.store("a", a[..., 4:6, :], tile + 100, itemsize=2)
    assert np.shares_memory(tile, a) and (a[..., 4:6, :] == a[..., 1:3, :] + 100).all()
    assert rec.read_by["a"] == 8 * 4 and rec.write_by["a"] == 8 * 2 and rec.total == 48
    trace.store("a", a[..., :1, :], 0.0)  # outside a recorder: the move alone
    assert (a[..., 0, :] == 0).all()


@pytest.mark.parametrize(
    "module",
    [
        "lab.kernels.rung0_reference",
        "lab.kernels.rung1_naive",
        "lab.kernels.rung2_numpy_fa1",
        "lab.kernels.rung3_numpy_fa2",
        "lab.backward",
    ],
)
def test_kernels_use_the_shared_rules_not_copies(module):
    text = pathlib.Path(importlib.import_module(module).__file__).read_text()
    assert (
        "isneginf" not in text and "M - N" not in text.split('"""', 2)[2]
    )  # the guard and the causal rule: lab/rules.py
    assert (
        "trace.read(" not in text and "trace.write(" not in text
    )  # tiles move through trace.load / store


def test_old_names_still_import():
    from lab.attention import (
        VARIANTS,
        _checked,
        _grouped,
        _ungrouped,
        attention_reference,
        causal_mask,
    )
    from lab.validate import check_qkv, group_view, ungroup_view

    assert (_checked, _grouped, _ungrouped) == (check_qkv, group_view, ungroup_view)
    assert (
        attention_reference is kernels.attention_reference
        and causal_mask is kernels.causal_mask
    )
    assert VARIANTS == ("fa1", "fa2")
