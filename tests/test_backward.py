"""The backward pass: the tiled numpy backward and the standard one match torch autograd of the reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import attention_inputs, blocks, seeds

import lab
from lab.backward import (
    NumpyFlashAttention,
    attention_backward,
    backward_delta,
    backward_flops,
    flash_attention_backward_numpy,
    saved_tensor_bytes,
    standard_attention_torch,
    time_forward_backward,
)


def autograd_reference(q, k, v, do, causal):
    """dQ, dK, dV by torch autograd through softmax(QKᵀ)V in float64."""
    tq, tk, tv = (
        torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v)
    )
    o = standard_attention_torch(tq, tk, tv, causal=causal)
    o.backward(torch.tensor(do, dtype=torch.float64))
    return o.detach().numpy(), [t.grad.numpy() for t in (tq, tk, tv)]


def grads_close(got, want, tol=1e-9):
    return all(
        g.shape == w.shape and np.allclose(g, w, rtol=tol, atol=tol)
        for g, w in zip(got, want)
    )


@settings(max_examples=40, deadline=None)
@given(attention_inputs(max_len=24), blocks, blocks, st.booleans(), seeds)
def test_tiled_backward_matches_autograd(qkv, Br, Bc, causal, seed):
    q, k, v = qkv
    do = np.random.default_rng(seed).standard_normal(q.shape[:-1] + (v.shape[-1],))
    o_ref, want = autograd_reference(q, k, v, do, causal)
    o, lse = lab.flash_attention_numpy(q, k, v, block_q=Br, block_k=Bc, causal=causal)
    assert np.allclose(o, o_ref, atol=1e-12)
    got = flash_attention_backward_numpy(
        q, k, v, o, lse, do, block_q=Br, block_k=Bc, causal=causal
    )
    assert grads_close(got, want)


@settings(max_examples=30, deadline=None)
@given(attention_inputs(max_len=24), st.booleans(), seeds)
def test_standard_backward_matches_autograd(qkv, causal, seed):
    q, k, v = qkv
    do = np.random.default_rng(seed).standard_normal(q.shape[:-1] + (v.shape[-1],))
    _, want = autograd_reference(q, k, v, do, causal)
    assert grads_close(attention_backward(q, k, v, do, causal=causal), want)


def test_gqa_sums_dk_dv_over_the_group():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 4, 9, 8))  # Hq = 4
    k = rng.standard_normal((1, 2, 11, 8))  # Hkv = 2, G = 2
    v = rng.standard_normal((1, 2, 11, 5))
    do = rng.standard_normal((1, 4, 9, 5))
    o, lse = lab.attention_reference(q, k, v)
    dq, dk, dv = flash_attention_backward_numpy(
        q, k, v, o, lse, do, block_q=4, block_k=3
    )
    # the same problem with K/V repeated per query head (multi-head): dK, dV summed over the group
    k4, v4 = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    dq4, dk4, dv4 = attention_backward(q, k4, v4, do)
    assert dk.shape == k.shape and dv.shape == v.shape
    assert np.allclose(dq, dq4)
    assert np.allclose(dk, dk4.reshape(1, 2, 2, 11, 8).sum(axis=2))
    assert np.allclose(dv, dv4.reshape(1, 2, 2, 11, 5).sum(axis=2))


def test_causal_rows_without_keys_get_zero_gradient():
    rng = np.random.default_rng(2)
    q, k, v = (
        rng.standard_normal((7, 4)),
        rng.standard_normal((3, 4)),
        rng.standard_normal((3, 4)),
    )
    do = rng.standard_normal((7, 4))
    o, lse = lab.attention_reference(q, k, v, causal=True)
    assert np.isneginf(lse[:4]).all()
    dq, dk, dv = flash_attention_backward_numpy(
        q, k, v, o, lse, do, causal=True, block_q=2, block_k=2
    )
    assert np.all(np.isfinite(dq)) and np.all(dq[:4] == 0)
    assert grads_close((dq, dk, dv), autograd_reference(q, k, v, do, True)[1])


def test_float32_inputs_stay_float32_and_close():
    rng = np.random.default_rng(3)
    q, k, v, do = (
        rng.standard_normal((2, 33, 16)).astype(np.float32) for _ in range(4)
    )
    o, lse = lab.flash_attention_numpy(q, k, v, causal=True)
    got = flash_attention_backward_numpy(
        q, k, v, o, lse, do, causal=True, block_q=8, block_k=16
    )
    assert all(g.dtype == np.float32 for g in got)
    _, want = autograd_reference(q, k, v, do, True)
    assert grads_close(got, want, tol=1e-4)


def test_inputs_not_modified():
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((5, 4)) for _ in range(3)]
    do = rng.standard_normal((5, 4))
    o, lse = lab.attention_reference(*arrays, causal=True)
    copies = [a.copy() for a in arrays + [do, o, lse]]
    flash_attention_backward_numpy(
        *arrays, o, lse, do, causal=True, block_q=2, block_k=3
    )
    attention_backward(*arrays, do, causal=True)
    assert all(np.array_equal(a, c) for a, c in zip(arrays + [do, o, lse], copies))


def test_delta_equals_rowsum_p_dp():
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal((6, 4)) for _ in range(4))
    o, _ = lab.attention_reference(q, k, v)
    s = q @ k.T / 2.0
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    assert np.allclose(backward_delta(o, do), (p * (do @ v.T)).sum(axis=-1))


def test_trace_counts_no_n_by_m_array():
    rng = np.random.default_rng(6)
    q, k, v, do = (rng.standard_normal((64, 8)) for _ in range(4))
    o, lse = lab.attention_reference(q, k, v)
    with lab.trace.record() as rec:
        flash_attention_backward_numpy(q, k, v, o, lse, do, block_q=16, block_k=16)
    assert rec.write_by["dk"] == k.nbytes and rec.write_by["dv"] == v.nbytes
    assert rec.read_by["k"] == k.nbytes  # each K_j read once (outer loop)
    assert rec.read_by["q"] == 4 * q.nbytes  # Q read once per key block
    assert rec.op_counts["exp"] == 64 * 64


def test_errors():
    q = np.zeros((4, 8))
    o, lse = lab.attention_reference(q, q, q)
    with pytest.raises(ValueError, match="do"):
        flash_attention_backward_numpy(q, q, q, o, lse, np.zeros((4, 7)))
    with pytest.raises(ValueError, match="lse"):
        flash_attention_backward_numpy(q, q, q, o, lse[:3], q)
    with pytest.raises(ValueError, match="o must"):
        flash_attention_backward_numpy(q, q, q, o[:2], lse, q)
    with pytest.raises(ValueError, match="block_q"):
        flash_attention_backward_numpy(q, q, q, o, lse, q, block_q=0)
    with pytest.raises(TypeError, match="do"):
        attention_backward(q, q, q, np.zeros((4, 8), int))
    with pytest.raises(ValueError, match="do"):
        attention_backward(q, q, q, np.full((4, 8), np.nan))
    with pytest.raises(ValueError, match="multiple"):
        attention_backward(
            np.zeros((1, 3, 4, 8)),
            np.zeros((1, 2, 4, 8)),
            np.zeros((1, 2, 4, 8)),
            np.zeros((1, 3, 4, 8)),
        )
    with pytest.raises(ValueError, match="o and do"):
        backward_delta(np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(TypeError, match="q"):
        standard_attention_torch(np.zeros((2, 2)), torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="N"):
        backward_flops(0)
    with pytest.raises(ValueError, match="min_run_time"):
        time_forward_backward(
            standard_attention_torch,
            *(torch.zeros(4, 4) for _ in range(3)),
            min_run_time=0,
        )


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_numpy_flash_attention(causal):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 6, 2, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: NumpyFlashAttention.apply(a, b, c, causal, 2, 4), (q, k, v)
    )


def test_gradcheck_standard_attention_torch():
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    assert torch.autograd.gradcheck(
        lambda a, b, c: standard_attention_torch(a, b, c, causal=True), (q, k, v)
    )


def test_saved_tensor_bytes_sees_the_n_by_n_matrix():
    N, d = 64, 8
    q, k, v = (torch.randn(1, 1, N, d, requires_grad=True) for _ in range(3))
    r = saved_tensor_bytes(standard_attention_torch, q, k, v)
    assert (1, 1, N, N) in r["shapes"]
    assert r["bytes"] >= N * N * 4
    assert r["bytes"] == r["input_bytes"] + r["extra_bytes"]
    kt = r["shapes"].index((1, d, N))  # Kᵀ: a view of the input k
    assert r["from_input"][kt] and not r["from_input"][r["shapes"].index((1, 1, N, N))]
    r2 = saved_tensor_bytes(NumpyFlashAttention.apply, q, k, v, False, 16, 16)
    assert all(N * N > int(np.prod(s)) for s in r2["shapes"])
    assert r2["extra_bytes"] == N * d * 4 + N * 4  # o and lse, float32
    assert torch.allclose(r2["output"], r["output"], atol=1e-5)


def test_backward_time_lines_flag_a_ratio_far_below_the_flops():
    import lab

    fast = {"forward": 2e-3, "backward": 5e-3, "ratio": 2.5}
    slow = {"forward": 8e-3, "backward": 4e-3, "ratio": 0.5}
    lines = lab.backward_time_lines({"torch SDPA": fast, "standard (torch)": slow})
    assert "FLOPs 2.5" in lines[0] and "FLOPs 2.0" in lines[1] and len(lines) == 4
    assert "⚠ standard (torch)" in lines[2] and "rerun this cell on a quiet" in lines[3]
    assert all(len(line) <= 100 for line in lines)
    assert len(lab.backward_time_lines({"torch SDPA": fast})) == 1
    spread = dict(fast, round_ratios=[2.1, 2.5, 3.4])
    (line,) = lab.backward_time_lines({"torch SDPA": spread})
    assert "(‹2.1›-‹3.4›)" in line and line.endswith("FLOPs 2.5")
    with pytest.raises(ValueError, match="far_below"):
        lab.backward_time_lines({}, far_below=0)


def test_backward_time_lines_summary_says_what_the_run_shows():
    import lab

    held = {"forward": 2e-3, "backward": 5e-3, "ratio": 2.5, "round_ratios": [2.1, 3.4]}
    missed = {
        "forward": 2e-3,
        "backward": 7e-3,
        "ratio": 3.5,
        "round_ratios": [3.1, 4.0],
    }
    lines = lab.backward_time_lines(
        {"lab.flash_attention_torch": held, "torch SDPA": missed}, summary=True
    )
    assert lines[1].startswith(
        "               torch SDPA: fwd"
    )  # padded to the longest name
    assert lines[-1] == (
        "every round: backward ‹2.1› to ‹4.0›× the forward; "
        "FLOP ratio within its kernel's range: ‹1› of 2"
    )
    assert len(lab.backward_time_lines({"torch SDPA": held})) == 1  # no summary unasked


def test_kernel_names_wrap_at_dots_and_underscores():
    from lab.figures.backward import _wrap_name

    assert _wrap_name("lab.flash_attention_torch") == "lab.flash_\nattention_torch"
    assert _wrap_name("standard (torch)") == "standard (torch)"
    assert (
        _wrap_name("a_very_long_kernel name here") == "a_very_long_\nkernel name here"
    )


def test_backward_flops():
    f = backward_flops(128, d=64)
    assert f["forward"] == 4 * 128 * 128 * 64
    assert f["ratio"] == 2.5
    assert backward_flops(128, d=64, causal=True)["backward"] == f["backward"] / 2
    assert (
        backward_flops(8, 16, 4, batch=2, heads=3)["forward"] == 2 * 3 * 8 * 16 * 4 * 4
    )


def test_time_forward_backward_returns_positive_times():
    q, k, v = (torch.randn(1, 1, 32, 8) for _ in range(3))
    t = time_forward_backward(
        standard_attention_torch, q, k, v, rounds=3, min_run_time=0.01
    )
    assert t["forward"] > 0 and t["forward_backward"] > 0
    assert set(t) == {
        "forward",
        "forward_backward",
        "backward",
        "ratio",
        "round_ratios",
    }
    assert len(t["round_ratios"]) == 3 and all(r >= 0 for r in t["round_ratios"])


def test_training_memory_standard_grows_as_n_squared():
    rows = lab.training_memory([64, 128], d=8)
    assert [r["N"] for r in rows] == [64, 128]
    for r in rows:
        assert r["standard"] > r["p_bytes"] > r["flash"]
        assert (
            r["flash"] == (4 * r["N"] * 8 + r["N"]) * 4
        )  # q, k, v, o and lse, float32
    assert rows[1]["p_bytes"] == 4 * rows[0]["p_bytes"]
    with pytest.raises(ValueError, match="Ns"):
        lab.training_memory([0])


def test_figures_return_their_numbers():
    import matplotlib.pyplot as plt

    from lab.figures.backward import (
        draw_backward_tiles,
        draw_backward_time,
        draw_training_memory,
    )

    r = draw_backward_tiles(N=64, block_q=16, block_k=32, causal=True)
    assert (r["tiles"], r["visited"], r["masked"]) == (8, 6, 4)
    assert r["max_err"] < 1e-10 and r["p_bytes"] == 64 * 64 * 4
    assert (
        draw_backward_tiles(N=64, block_q=16, block_k=32, causal=False)["visited"] == 8
    )
    m = draw_training_memory(lab.training_memory([32, 64], d=8))
    assert m["N"] == [32, 64] and m["ratio_last"] > 1
    t = draw_backward_time({"a": {"ratio": 2.0}, "b": {"ratio": 3.0}})
    assert t == {"a": 2.0, "b": 3.0}
    rounds = {"a": {"ratio": 2.0, "round_ratios": [1.5, 2.0, 4.0]}}
    assert draw_backward_time(rounds) == {"a": 2.0}
    ax = plt.gca()
    assert 4.0 < ax.get_ylim()[1] and "3 rounds" in ax.get_title()
    plt.close("all")


def test_backward_tiles_slider_starts_at_the_static_figures_setting():
    w = lab.widgets.backward_tiles()
    r = w.result
    assert (r["N"], r["M"], r["block_q"], r["block_k"], r["causal"]) == (
        192,
        256,
        48,
        64,
        True,
    )


def test_backward_tiles_slider_updates_result():
    w = lab.widgets.backward_tiles(N=256, block_q=64, M=None)
    controls = {c.description: c for c in w.children[:-1]}
    assert w.result["N"] == 256 and w.result["causal"]
    assert (
        "max |tiled − standard| at N = 128, M = 128: ‹" in w.summary_html.value
        and "(&lt; 1e-10: True)" in w.summary_html.value
    )
    controls["N"].value = 128
    assert w.result["N"] == 128 and w.result["tiles"] == 2 * 4  # M stays 256
    controls["M (keys)"].value = 128
    assert w.result["M"] == 128 and w.result["tiles"] == 4
    controls["Br"].value = 16
    assert w.result["block_q"] == 16 and w.result["tiles"] == 16
    assert w.result["checked_N"] == 16 + 64  # a block of each size, at least 32 rows
    controls["causal"].value = False
    assert w.result["visited"] == w.result["tiles"] and w.result["max_err"] < 1e-10


def test_backward_tiles_slider_moves_m_and_keeps_the_gap_in_its_check():
    w = lab.widgets.backward_tiles(N=192, M=256, block_q=64, block_k=64)
    controls = {c.description: c for c in w.children[:-1]}
    assert (w.result["N"], w.result["M"]) == (192, 256)
    assert w.result["tiles"] == 3 * 4 and w.result["visited"] < 12
    assert w.result["kept_ratio"] == pytest.approx(
        (1.25 * 256 + 64) / (64 + 1)
    )  # + mask
    controls["M (keys)"].value = 64  # N > M: the first N − M queries see no key
    r = w.result
    assert r["M"] == 64 and r["tiles"] == 3 and r["checked_M"] < r["checked_N"]
    assert r["max_err"] < 1e-10 and "M = 64" in w.summary_html.value
    assert r["kept_ratio"] == pytest.approx(
        (1.25 * 64 + 64) / (64 + 1)
    )  # causal: + mask


@pytest.mark.parametrize(
    "N, M, check_N, want",
    [(256, 256, 64, (64, 64)), (64, 512, 128, (64, 96)), (512, 64, 128, (128, 64))],
)
def test_the_checked_problem_keeps_the_sign_of_m_minus_n(N, M, check_N, want):
    from lab.figures.backward import _checked_shape

    assert _checked_shape(N, M, check_N) == want


def test_backward_tiles_checks_on_check_n_rows_and_counts_tiles_at_n():
    import matplotlib.pyplot as plt

    from lab.figures.backward import backward_error, draw_backward_tiles

    r = draw_backward_tiles(N=256, block_q=16, block_k=32, causal=True, check_N=64)
    plt.close("all")
    assert r["checked_N"] == 64 and r["tiles"] == 16 * 8
    assert r["max_err"] == backward_error(64, 16, 32, True)
    assert backward_error(64, 16, 32, True) < 1e-10
    assert draw_backward_tiles(N=64, block_q=16, block_k=32)["checked_N"] == 64
    r = draw_backward_tiles(N=192, M=256, block_q=48, block_k=64, causal=True)
    plt.close("all")
    assert (r["M"], r["tiles"], r["visited"], r["masked"]) == (256, 16, 13, 6)
    assert (
        r["standard_bytes"] == (192 * 256 + 192 * 64) * 4 + 192 * 256
    )  # + the bool mask
    assert r["max_err"] < 1e-10


def test_the_kept_bytes_are_what_autograd_saves():
    """The figure's standard bytes beyond q, k, v equal saved_tensor_bytes' count, causal (mask) or not."""
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_backward_tiles

    q, k, v = (torch.randn(1, 1, n, 64, requires_grad=True) for n in (192, 256, 256))
    for causal in (False, True):
        r = draw_backward_tiles(N=192, M=256, block_q=48, block_k=64, causal=causal)
        plt.close("all")
        fn = lambda a, b, c: lab.standard_attention_torch(a, b, c, causal=causal)
        assert r["standard_bytes"] == lab.saved_tensor_bytes(fn, q, k, v)["extra_bytes"]
        fa = lambda a, b, c: lab.flash_attention_torch(a, b, c, causal=causal)
        assert r["flash_bytes"] == lab.saved_tensor_bytes(fa, q, k, v)["extra_bytes"]


def test_the_backward_graph_marks_what_each_design_keeps():
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_backward_graph

    g = draw_backward_graph()
    plt.close("all")
    assert g["roles"]["P"] == "p" and g["roles"]["lse"] == g["roles"]["O"] == "flash"
    assert ("O", "D") in g["backward_edges"] and ("P", "dS") in g["backward_edges"]


def test_the_graph_draws_p_recomputed_and_the_kept_bars_are_linear():
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_backward_graph, draw_backward_tiles

    g = draw_backward_graph()
    plt.close("all")
    assert {("Q", "S"), ("K", "S"), ("S", "P"), ("lse", "P")} <= set(
        g["recompute_edges"]
    )
    _, axes = plt.subplots(1, 2)
    ratios = []
    for N in (64, 128, 256):
        r = draw_backward_tiles(N=N, block_q=32, block_k=32, axes=axes)
        ratios.append(r["kept_ratio"])
        assert r["kept_ratio"] == pytest.approx(
            (1.25 * N + 64) / 65
        )  # causal: + the mask
    assert axes[1].get_yscale() == "linear" and ratios == sorted(ratios)
    plt.close("all")


def test_training_memory_counts_beyond_the_inputs():
    (r,) = lab.training_memory([128], d=16)
    assert r["flash_extra"] == (128 * 16 + 128) * 4  # o and lse
    assert r["standard_extra"] == (128 * 128 + 128 * 16) * 4  # P and scale·q


@pytest.mark.parametrize(
    "N, M, block_q, block_k",
    [(64, 512, 8, 8), (512, 128, 16, 128), (192, 256, 48, 64)],
    ids=["wide", "tall", "default"],
)
def test_the_tile_figure_keeps_its_labels_inside_and_apart(N, M, block_q, block_k):
    """At thin score matrices the legend stays clear of the x label, the line's label sits inside the
    axes, every text inside the figure, and the outlined tile is shaded, not a bare line."""
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_backward_tiles

    draw_backward_tiles(N=N, M=M, block_q=block_q, block_k=block_k, causal=True)
    fig = plt.gcf()
    fig.canvas.draw()
    ren = fig.canvas.get_renderer()
    ax = fig.axes[0]
    frame = fig.bbox
    inside = lambda b: (  # noqa: E731
        b.x0 >= frame.x0 - 1
        and b.x1 <= frame.x1 + 1
        and b.y0 >= frame.y0 - 1
        and b.y1 <= frame.y1 + 1
    )
    (legend,) = fig.legends
    xlabel = ax.xaxis.label.get_window_extent(ren)
    texts = [ax.xaxis.label, ax.yaxis.label, ax.title, fig.axes[1].title]
    assert all(inside(t.get_window_extent(ren)) for t in texts)
    assert inside(legend.get_window_extent(ren))
    assert not legend.get_window_extent(ren).overlaps(xlabel)
    (line_label,) = [t for t in ax.texts if "M − N" in t.get_text()]
    assert ax.bbox.contains(*line_label.get_window_extent(ren).p0)
    assert ax.bbox.contains(*line_label.get_window_extent(ren).p1)
    on_line = ax.transData.transform(line_label.xy)  # a point of j = i + M − N
    assert line_label.get_window_extent(ren).expanded(1.1, 1.2).contains(*on_line)
    assert any(p.get_fill() and p.get_facecolor()[3] > 0 for p in ax.patches)
    plt.close(fig)


def test_the_jacobian_figure_draws_the_matrix_it_is_given():
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_jacobian

    s = np.array([1.0, 2.0, 0.5, -1.0])
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    J = np.diag(p) - np.outer(p, p)
    r = draw_jacobian(J, p)
    assert np.allclose(r["row_sums"], 0) and r["diagonal_positive"]
    assert r["off_diagonal_negative"]
    flipped = draw_jacobian(-J, p)  # what it reports is read from the matrix drawn
    assert not flipped["diagonal_positive"] and not flipped["off_diagonal_negative"]
    with pytest.raises(ValueError, match="J must be"):
        draw_jacobian(J[:3], p)
    plt.close("all")


def test_row_jacobian_slider_starts_at_the_notebooks_row_and_shrinks_as_it_peaks():
    """At scale 1 the slider draws section 3's row (1, 2, 0.5, -1); J's rows sum to 0 at every scale, and
    its largest entry falls toward 0 as the row saturates."""
    import matplotlib.pyplot as plt

    r = lab.figures.backward.draw_row_jacobian(1.0)
    p = lab.softmax_safe(np.array([1.0, 2.0, 0.5, -1.0]))
    assert np.allclose(r["p"], p) and np.allclose(
        r["J"], np.diag(p) - np.outer(p, p), atol=1e-5
    )
    plt.close("all")
    w = lab.widgets.jacobian_explorer()
    assert w.result["scale"] == 1.0 and np.allclose(w.result["p"], p)
    (scale,) = w.children[:-1]
    largest = []
    for c in (0.0, 4.0, 16.0):
        scale.value = c
        assert all(abs(x) < 1e-5 for x in w.result["row_sums"])
        largest.append(w.result["largest"])
    assert largest[0] > largest[1] > largest[2] and largest[2] < 1e-3
    with pytest.raises(ValueError, match="scores"):
        lab.figures.backward.draw_row_jacobian(1.0, scores=[1.0])


def test_the_jacobian_colours_keep_one_scale_as_the_row_saturates():
    """The heatmap spans ±1/4 at every scale (no entry can pass P(1 − P) ≤ 1/4), so a saturated row,
    whose entries read 0.000, is drawn pale, not re-stretched to the full colour range."""
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_jacobian, draw_row_jacobian

    for c in (0.0, 1.0, 16.0):
        r = draw_row_jacobian(c)
        image = plt.gcf().axes[1].images[0]
        assert r["limit"] == 0.25 and r["largest"] <= 0.25
        assert (image.norm.vmin, image.norm.vmax) == (-0.25, 0.25), c
        shade = np.abs(image.norm(r["J"]) - 0.5).max()  # 0 white, 0.5 saturated
        assert (shade < 0.01) if c == 16.0 else (shade > 0.3), (c, shade)
        plt.close("all")
    with pytest.raises(ValueError, match="limit must be positive"):
        draw_jacobian(np.eye(2), np.ones(2) / 2, limit=0)
    plt.close("all")


def test_the_backward_graph_legend_sits_under_it_one_fact_an_entry():
    import matplotlib.pyplot as plt

    from lab.figures.backward import draw_backward_graph

    draw_backward_graph()
    ax = plt.gcf().axes[0]
    legend = ax.get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    plt.gcf().canvas.draw()
    box = legend.get_window_extent().transformed(ax.transAxes.inverted())
    plt.close("all")
    assert box.y1 <= 0.01  # under the graph, not beside it
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 12
    assert "kept by neither design (S)" in texts
    assert not any("scale·q" in t for t in texts)
