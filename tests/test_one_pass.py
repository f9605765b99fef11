"""One query's attention three ways (lab.one_pass), all queries at once, and the notebook 03 slider."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lab
from lab import trace
from lab.figures.one_pass import draw_holdings, draw_one_pass, row_inputs
from lab.widgets import one_pass_explorer
from tests.strategies import attention_inputs, blocks, dims, seeds

ROW_FNS = [
    lab.attention_row_three_pass,
    lab.attention_row_two_pass,
    lab.attention_row_one_pass,
]


def _kw(fn, block):
    return {} if fn is lab.attention_row_three_pass else {"block_k": block}


@st.composite
def rows(draw, max_len: int = 60):
    rng = np.random.default_rng(draw(seeds))
    M, d, dv = draw(st.integers(1, max_len)), draw(dims), draw(dims)
    spread = draw(st.sampled_from([0.5, 1.0, 5.0]))
    return (
        rng.standard_normal(d) * spread,
        rng.standard_normal((M, d)) * spread,
        rng.standard_normal((M, dv)),
    )


@settings(max_examples=40, deadline=None)
@given(rows(), blocks)
def test_row_methods_match_reference(qkv, block):
    q, k, v = qkv
    ref, lse_ref = lab.attention_reference(q[None], k, v)
    for fn in ROW_FNS:
        run = fn(q, k, v, **_kw(fn, block))
        np.testing.assert_allclose(run.o, ref[0], rtol=1e-10, atol=1e-12)
        assert run.lse == pytest.approx(float(lse_ref[0]), rel=1e-12, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(rows(), blocks)
def test_passes_and_score_row_traffic_are_counted(qkv, block):
    q, k, v = qkv
    M = k.shape[0]
    three = lab.attention_row_three_pass(q, k, v)
    two = lab.attention_row_two_pass(q, k, v, block_k=block)
    one = lab.attention_row_one_pass(q, k, v, block_k=block)
    assert (three.passes_k, three.passes_v) == (1, 1)
    assert (two.passes_k, two.passes_v) == (2, 1)
    assert (one.passes_k, one.passes_v) == (1, 1)
    assert three.s_writes == M * 8 and three.s_reads == 3 * M * 8
    assert two.s_writes == two.s_reads == one.s_writes == one.s_reads == 0
    n_blocks = math.ceil(M / block)
    assert len(one.steps) == len(two.steps) == n_blocks


def test_held_bytes_grow_with_M_only_for_the_stored_row():
    small, large = row_inputs(256, 16, seed=1), row_inputs(4096, 16, seed=1)
    held = {
        fn.__name__: [fn(*x, **_kw(fn, 64)).held_bytes for x in (small, large)]
        for fn in ROW_FNS
    }
    assert (
        held["attention_row_three_pass"][1] > 10 * held["attention_row_three_pass"][0]
    )
    assert held["attention_row_one_pass"][0] == held["attention_row_one_pass"][1]
    assert held["attention_row_two_pass"][0] == held["attention_row_two_pass"][1]
    # the one-pass state: one block of scores, m, l and acc (float64)
    assert held["attention_row_one_pass"][0] == 8 * (64 + 1 + 1 + 16)


def test_steps_follow_the_alpha_rule():
    q, k, v = row_inputs(1000, 32, seed=3)
    run = lab.attention_row_one_pass(q, k, v, block_k=100)
    s = k @ q / np.sqrt(32)
    m_prev = -np.inf
    for b, step in enumerate(run.steps):
        assert step["block_max"] == pytest.approx(s[b * 100 : (b + 1) * 100].max())
        assert step["m"] == pytest.approx(max(m_prev, step["block_max"]))
        assert step["alpha"] == pytest.approx(np.exp(m_prev - step["m"]))
        m_prev = step["m"]
    assert run.steps[0]["alpha"] == 0.0
    assert run.steps[-1]["m"] == pytest.approx(s.max())
    assert run.steps[-1]["l"] == pytest.approx(np.exp(s - s.max()).sum())


def test_row_trace_reaches_an_outer_recorder():
    q, k, v = row_inputs(128, 8, seed=0)
    with trace.record() as rec:
        lab.attention_row_two_pass(q, k, v, block_k=32)
    assert rec.read_by["k"] == 2 * k.nbytes and rec.read_by["v"] == v.nbytes
    assert rec.op_counts["exp"] == 2 * 128 + 4


def test_float32_rows_stay_float32_and_inputs_are_untouched():
    q, k, v = (a.astype(np.float32) for a in row_inputs(300, 16, seed=2))
    copies = [a.copy() for a in (q, k, v)]
    ref, _ = lab.attention_reference(q[None], k, v)
    for fn in ROW_FNS:
        run = fn(q, k, v, **_kw(fn, 64))
        assert run.o.dtype == np.float32
        np.testing.assert_allclose(run.o, ref[0], atol=1e-5)
    for a, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(a, c)


def test_bad_row_input_raises_before_work():
    q, k, v = row_inputs(10, 4)
    with pytest.raises(ValueError, match="q must be one query row"):
        lab.attention_row_one_pass(q[None], k, v)
    with pytest.raises(ValueError, match="share d"):
        lab.attention_row_three_pass(q[:3], k, v)
    with pytest.raises(ValueError, match="same number of keys"):
        lab.attention_row_two_pass(q, k, v[:5])
    with pytest.raises(ValueError, match="block_k"):
        lab.attention_row_one_pass(q, k, v, block_k=0)
    with pytest.raises(TypeError, match="k must have a floating dtype"):
        lab.attention_row_one_pass(q, k.astype(int), v)
    bad = v.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="v must be finite"):
        lab.attention_row_three_pass(q, k, bad)


def test_compare_row_methods_and_format_table():
    q, k, v = row_inputs(512, 16, seed=0)
    table = lab.compare_row_methods(q, k, v, block_k=64)
    assert [r["method"] for r in table] == list(lab.ROW_METHODS)
    assert [r["passes over K"] for r in table] == [1, 2, 1]
    assert table[0]["working arrays (B)"] > table[2]["working arrays (B)"]
    assert max(r["max |o - ref|"] for r in table) < 1e-12
    text = lab.format_table(table)
    assert "passes over K" in text and "three-pass" in text and "4,096" in text
    assert len(text.splitlines()) == 2 + len(table)
    assert lab.format_table([]) == ""
    masked = lab.format_table(table, measured=["max |o - ref|"]).splitlines()
    assert all(
        line.endswith("›") and "‹" in line for line in masked[2:]
    )  # zeros too: ‹0.0e+00›
    assert len({len(line) for line in masked}) == 1  # the same width on every machine
    with pytest.raises(ValueError, match="measured"):
        lab.format_table(table, measured=["no such column"])


@settings(max_examples=40, deadline=None)
@given(attention_inputs(), blocks, st.booleans())
def test_one_pass_attention_matches_reference(qkv, block, causal):
    q, k, v = qkv
    o_ref, lse_ref = lab.attention_reference(q, k, v, causal=causal)
    o, lse = lab.one_pass_attention(q, k, v, block_k=block, causal=causal)
    np.testing.assert_allclose(o, o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-10, atol=1e-12)


def test_one_pass_attention_empty_causal_rows_and_errors():
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((1, 6, 4)),
        rng.standard_normal((1, 3, 4)),
        rng.standard_normal((1, 3, 2)),
    )
    o, lse = lab.one_pass_attention(q, k, v, block_k=2, causal=True)
    assert (
        np.all(o[0, :3] == 0)
        and np.all(np.isneginf(lse[0, :3]))
        and np.isfinite(lse[0, 3:]).all()
    )
    with pytest.raises(ValueError, match="block_k"):
        lab.one_pass_attention(q, k, v, block_k=-1)
    with pytest.raises(ValueError, match="multiple"):
        lab.one_pass_attention(
            rng.standard_normal((1, 3, 6, 4)),
            rng.standard_normal((1, 2, 3, 4)),
            rng.standard_normal((1, 2, 3, 2)),
        )


def test_draw_one_pass_returns_its_numbers():
    r = draw_one_pass(M=1024, block_k=64)
    assert r["blocks"] == 16 and 1 <= r["rescalings"] <= 16 and r["max_err"] < 1e-12
    assert [row["passes over K"] for row in r["rows"]] == [1, 2, 1]


def test_draw_one_pass_keeps_an_axis_for_a_single_block():
    """M <= Bc is one block: the trace still spans a readable range of block numbers, not a dot's width."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    r = draw_one_pass(M=256, block_k=512, axes=axes)
    lo, hi = axes[0].get_xlim()
    plt.close(fig)
    assert r["blocks"] == 1 and hi - lo >= 1.0


def test_one_pass_explorer_reacts_to_its_sliders():
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # a warning would print to stderr under the slider
        w = one_pass_explorer()
    M, block = w.children[:2]
    assert w.result["M"] == 4096 and w.result["blocks"] == 16
    block.value = 1024
    assert w.result["block_k"] == 1024 and w.result["blocks"] == 4
    M.value = 256
    assert w.result["M"] == 256 and w.result["blocks"] == 1
    assert w.result["max_err"] < 1e-12
    text = w.summary_html.value
    assert "M = 256" in text and "1 block, m grew at 0 blocks;" in text, text
    assert "largest |o - ref| ‹" in text, text


def test_one_pass_explorer_shows_what_changes_with_Bc_and_M():
    """The summary is not the same line at every setting: what each method holds and the exponentials move."""
    w = one_pass_explorer()
    M, block = w.children[:2]
    seen = {}
    for m, b in ((4096, 256), (4096, 16), (16384, 16)):
        M.value, block.value = m, b
        seen[m, b] = (dict(w.result["held"]), dict(w.result["exponentials"]))
        assert f"one-pass {w.result['held']['one-pass']:,} B" in w.summary_html.value
    assert seen[4096, 16][0]["one-pass"] < seen[4096, 256][0]["one-pass"]
    assert seen[4096, 16][1]["one-pass"] == 4096 + 256  # one α a block
    assert seen[16384, 16][0]["three-pass"] > 3 * seen[4096, 16][0]["three-pass"]


def test_draw_one_pass_labels_at_most_four_rescales_apart():
    """At Bc = 16 the α labels do not pile up near block 0: at most 4, each 1/8 of the axis apart."""
    r = draw_one_pass(M=16384, block_k=16)
    got = r["labelled"]
    assert 1 <= len(got) <= 4 and len(got) <= r["rescalings"]
    assert all(b - a >= r["blocks"] / 8 for a, b in zip(got, got[1:])), got


def test_one_pass_explorer_keeps_the_blocks_axis_at_every_setting():
    """The live figure's block axis spans the blocks, as the static one does (not rounded out past them)."""
    w = one_pass_explorer()
    M, block = w.children[:2]
    for m, b in ((16384, 16), (256, 1024), (4096, 64)):
        M.value, block.value = m, b
        assert w._axes[0].get_xlim() == (-0.5, max(m // b - 0.5, 1.5)), (m, b)


def test_draw_holdings_counts_what_each_method_holds():
    r = draw_holdings(Ms=(256, 1024), block_k=64, d=8)
    three, two, one = r["held"].values()
    assert three[1] > 3 * three[0]
    assert two[0] == two[1] and one[0] == one[1] == 8 * (64 + 1 + 1 + 8)


def test_slow_rows_counts_the_rows_of_every_slice_and_reports_them_to_trace():
    a = np.arange(24.0).reshape(2, 6, 2)  # rows along axis -2
    rows = lab.SlowRows(a, "k")
    with trace.record() as rec:
        block = rows.load(1, 4)
        rows.load(3, 6)
    assert block.shape == (2, 3, 2) and np.shares_memory(
        block, a
    )  # a view: no copy held
    assert rows.loads.tolist() == [0, 1, 1, 2, 1, 1] and rows.passes == 1.0
    assert rec.read_by["k"] == (3 + 3) * 2 * 2 * 8
    s = lab.SlowRows(np.zeros(5), "s")  # a 1-D row: rows along axis 0
    with trace.record() as rec:
        s.store(0, 5, np.arange(5.0))
        s.load(0, 5)
        s.load(0, 5)
    assert s.stores.tolist() == [1] * 5 and s.loads.tolist() == [2] * 5
    assert rec.write_by["s"] == 40 and rec.read_by["s"] == 80
    assert lab.SlowRows(np.ones((3, 2)), "v").stores.tolist() == [0, 0, 0]


def test_the_row_methods_count_what_they_slice_not_what_they_declare(monkeypatch):
    q, k, v = row_inputs(64, 8, seed=0)
    loads = []
    real = lab.SlowRows.load

    def spy(self, j0, j1):
        loads.append((self.name, j0, j1))
        return real(self, j0, j1)

    monkeypatch.setattr(lab.SlowRows, "load", spy)
    run = lab.attention_row_two_pass(q, k, v, block_k=16)
    assert (
        run.passes_k == sum(j1 - j0 for name, j0, j1 in loads if name == "k") / 64 == 2
    )
    loads.clear()
    lab.one_pass_attention(q[None], k, v, block_k=16)
    assert sorted(loads) == sorted(
        [(n, j0, j0 + 16) for n in "kv" for j0 in range(0, 64, 16)]
    )


def test_exp_calls_are_counted_where_np_exp_runs():
    q, k, v = row_inputs(100, 8, seed=0)
    rows = lab.compare_row_methods(q, k, v, block_k=32)
    assert [r["exponentials"] for r in rows] == [2 * 100, 2 * 100 + 4, 100 + 4]


@pytest.mark.parametrize(
    "N, M, d, causal",
    [(512, 512, 64, False), (512, 2048, 32, False), (1024, 1024, 32, True)],
)
def test_one_pass_buffers_counts_what_one_pass_attention_holds(N, M, d, causal):
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((N, d)),
        rng.standard_normal((M, d)),
        rng.standard_normal((M, d)),
    )
    lab.one_pass_attention(q, k, v, block_k=16)  # first calls warm numpy's caches
    for block in (16, 64, 256, M):
        held, _ = lab.peak_bytes(
            lab.one_pass_attention, q, k, v, block_k=block, causal=causal
        )
        count = lab.one_pass_buffers(N, M, d, block_k=block, causal=causal)
        assert 0.99 < held / count["peak"] < 1.05, (block, held, count)
    small, large = (lab.one_pass_buffers(N, M, d, block_k=b) for b in (8, 512))
    assert small["peak_phase"] == "merge" and large["peak_phase"] == "block"
    assert (
        large["bytes"]["block"] - small["bytes"]["block"]
        == 2 * N * (min(512, M) - 8) * 8
    )


def test_one_pass_buffers_checks_its_arguments():
    with pytest.raises(ValueError, match="block_k"):
        lab.one_pass_buffers(8, 8, 4, block_k=0)
    with pytest.raises(TypeError, match="N"):
        lab.one_pass_buffers(8.0, 8, 4)
    assert (
        lab.one_pass_buffers(4, 3, 2, block_k=100)["block"][0][1] == 2 * 4 * 3 * 8
    )  # Bc capped at M


def test_row_methods_take_slow_rows_and_the_caller_reads_the_counts():
    q, k, v = row_inputs(100, 8, seed=0)
    for fn, want_k in (
        (lab.attention_row_three_pass, 1),
        (lab.attention_row_two_pass, 2),
        (lab.attention_row_one_pass, 1),
    ):
        K, V = lab.SlowRows(k, "k"), lab.SlowRows(v, "v")
        run = fn(q, K, V, **_kw(fn, 32))
        assert K.loads.tolist() == [want_k] * 100 and V.loads.tolist() == [1] * 100
        assert run.passes_k == want_k and np.allclose(
            run.o, fn(q, k, v, **_kw(fn, 32)).o
        )


@pytest.mark.parametrize("N, M, Bc", [(6, 10, 4), (10, 6, 4), (8, 8, 3)])
def test_causal_geometry_is_the_reference_s_bottom_right_mask(N, M, Bc):
    from lab.figures.one_pass import causal_geometry

    g = causal_geometry(N, M, Bc)
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((N, 4)), rng.standard_normal((M, 4)), np.eye(M)
    o, _ = lab.attention_reference(q, k, v, causal=True)  # o[i, j] > 0: key j used
    assert np.array_equal(g["allowed"], o > 0)
    assert list(g["empty_rows"]) == list(range(max(N - M, 0)))
    assert g["block_edges"][-1] == M and g["block_edges"][1] == Bc
    for b, (a, e) in enumerate(zip(g["block_edges"][:-1], g["block_edges"][1:])):
        assert np.array_equal(g["skipped"][:, b], ~g["allowed"][:, a:e].any(axis=1))


def test_draw_causal_blocks_draws_each_shape_and_rejects_a_bad_block():
    import matplotlib.pyplot as plt

    from lab.figures.one_pass import causal_geometry, draw_causal_blocks

    out = draw_causal_blocks(((6, 10), (10, 6)), block_k=4)
    assert [g["allowed"].shape for g in out] == [(6, 10), (10, 6)]
    assert len(out[0]["empty_rows"]) == 0 and len(out[1]["empty_rows"]) == 4
    plt.close("all")
    with pytest.raises(ValueError, match="block_k"):
        causal_geometry(4, 4, 0)


def test_rescale_trace_cuts_each_step_in_two_and_the_rescale_leaves_o_alone():
    from lab.figures.one_pass import state_rescale_trace

    q, k, v = row_inputs(M=1000, d=8, seed=3)  # a short last block: 1000 = 3·256 + 232
    tr = state_rescale_trace(q, k, v, block_k=256, components=(0, 2))
    s = k @ q / np.sqrt(8)
    l_prev, acc_prev = 0.0, np.zeros(v.shape[1])
    for b, j1 in enumerate((256, 512, 768, 1000)):  # the state against its definition
        m = s[:j1].max()
        p = np.exp(s[:j1] - m)
        assert tr["m"][b] == m and np.isclose(tr["l"][b], p.sum(), rtol=1e-12)
        assert np.isclose(tr["l_scaled"][b], tr["alpha"][b] * l_prev, rtol=1e-12)
        norm_a = tr["alpha"][b] * np.linalg.norm(acc_prev)
        assert np.isclose(tr["acc_norm_scaled"][b], norm_a, rtol=1e-12)
        assert np.isclose(tr["acc_norm"][b], np.linalg.norm(p @ v[:j1]), rtol=1e-12)
        assert np.allclose(tr["o_seen"][b], (p @ v[:j1])[[0, 2]] / p.sum(), rtol=1e-12)
        if b:  # the rescale multiplies acc and l by the same alpha: acc / l stays put
            assert np.allclose(tr["o_scaled"][b], tr["o_seen"][b - 1], rtol=1e-12)
        l_prev, acc_prev = p.sum(), p @ v[:j1]
    assert np.isnan(tr["o_scaled"][0]).all()  # no key before block 0
    assert tr["rose"] == [b for b in range(1, 4) if tr["alpha"][b] < 1]
    for b in tr["rose"]:  # where m rose, l and |acc| shrank before the block was added
        assert tr["l_scaled"][b] < tr["l"][b - 1]
    o_ref = lab.attention_reference(q[None], k, v)[0][0]
    assert np.allclose(tr["o"], o_ref, rtol=1e-12)
    block_max = [s[j0 : j0 + 256].max() for j0 in range(0, 1000, 256)]
    assert tr["rose"] == [b for b in range(1, 4) if block_max[b] > max(block_max[:b])]
    ascending = np.argsort(s)  # keys sorted by score: m rises at every block
    tr_up = state_rescale_trace(q, k[ascending], v[ascending], block_k=100)
    assert tr_up["rose"] == list(range(1, 10))
    assert (tr_up["l_scaled"][1:] < tr_up["l"][:-1]).all()
    with pytest.raises(ValueError, match="block_k"):
        state_rescale_trace(q, k, v, block_k=0)


def test_draw_rescale_draws_the_numbers_it_returns():
    import matplotlib.pyplot as plt

    from lab.figures.one_pass import draw_state_rescale

    tr = draw_state_rescale(M=2048, block_k=128, d=16, seed=1)
    axes = plt.gcf().axes
    assert len(axes) == 4 and len(tr["m"]) == 16 and tr["rose"]
    step, dots = axes[0].lines[:2]  # panel m: the staircase and the block maxima
    assert np.array_equal(step.get_ydata(), tr["m"])
    assert np.array_equal(dots.get_ydata(), tr["block_max"])
    for ax, key in ((axes[1], "l"), (axes[2], "acc_norm")):
        path, after, shrunk = ax.lines[:3]
        assert np.array_equal(after.get_ydata(), tr[key])  # a dot after each block
        assert np.array_equal(shrunk.get_ydata(), tr[key + "_scaled"][tr["rose"]])
        assert np.array_equal(shrunk.get_xdata(), np.array(tr["rose"]) - 0.4)
        assert len(path.get_xdata()) == len(tr["m"]) + len(tr["rose"])
    drawn_o = [ln.get_ydata() for ln in axes[3].lines]
    for i, c in enumerate(
        tr["components"]
    ):  # each component's dots, and its final line
        assert any(np.array_equal(y, tr["o_seen"][:, i]) for y in drawn_o)
        assert any(np.array_equal(y, [tr["o"][c]] * 2) for y in drawn_o)
    assert np.array_equal(drawn_o[-1], tr["o_scaled"][tr["rose"]].ravel())
    title = axes[0].get_title()
    assert "m rose at blocks " + ", ".join(map(str, tr["rose"])) in title
    plt.close("all")
