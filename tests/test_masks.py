"""Masks and score mods: builders, block_mask, the kernels against the reference and FlexAttention, gradients, errors."""

import math
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import attention_inputs, blocks, seeds

import lab

ROOT = pathlib.Path(__file__).resolve().parent.parent

SETTINGS = settings(max_examples=25, deadline=None)


def _t(*arrays, dtype=torch.float64, grad=False):
    return tuple(torch.tensor(a, dtype=dtype, requires_grad=grad) for a in arrays)


def _docs(rng, n, ndocs):
    """Sorted document ids of a packed sequence of length n (some ids may be absent)."""
    return np.sort(rng.integers(0, ndocs, n))


def _then(first, second):
    """Two score mods composed as functions: `second` applied to `first`'s scores."""
    return lambda s, b, h, i, j: second(first(s, b, h, i, j), b, h, i, j)


def _mods(case, q, k, rng):
    """One named case of keyword arguments (mask_mod, score_mod, causal) for shapes of q (B, Hq, N, d) and k."""
    B, H, N, _ = q.shape
    M = k.shape[2]
    left, right = int(rng.integers(0, 6)), int(rng.integers(0, 6))
    docs = _docs(rng, N, 3), _docs(rng, M, 3)
    return {
        "causal": dict(causal=True),
        "window": dict(mask_mod=lab.sliding_window(left, right, N, M)),
        "causal window": dict(mask_mod=lab.sliding_window(left, 0, N, M)),
        "window, no left": dict(
            mask_mod=lab.sliding_window(None, right, N, M), causal=True
        ),
        "alibi": dict(score_mod=lab.alibi(lab.alibi_slopes(H), N, M), causal=True),
        "softcap": dict(score_mod=lab.softcap(1.5)),
        "documents": dict(mask_mod=lab.document_mask(*docs)),
        "window and documents": dict(
            mask_mod=lab.and_masks(
                lab.sliding_window(left, right, N, M), lab.document_mask(*docs)
            )
        ),
        "softcap, alibi window": dict(
            score_mod=_then(lab.alibi(lab.alibi_slopes(H), N, M), lab.softcap(2.0)),
            mask_mod=lab.sliding_window(left, right, N, M),
        ),
    }[case]


CASES = [
    "causal",
    "window",
    "causal window",
    "window, no left",
    "alibi",
    "softcap",
    "documents",
    "window and documents",
    "softcap, alibi window",
]


def _close(o, lse, o_ref, lse_ref, rtol=1e-10, atol=1e-11):
    np.testing.assert_allclose(o, o_ref, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse[fin], lse_ref[fin], rtol=rtol, atol=atol)


def _want_tiles(kw, shape, Br, Bc):
    B, H, N, M = shape
    kind = lab.block_mask(
        kw.get("mask_mod"), B, H, N, M, Br, Bc, causal=kw.get("causal", False)
    ).kind
    return int((kind > 0).any(axis=(0, 1)).sum())


# ------------------------------------------------------------------------------------ builders


def test_builders_follow_their_formulas():
    N, M = 5, 8
    b, h, i, j = lab.masks.index_arrays(1, 3, 0, N, 0, M)
    off = M - N
    keep = np.broadcast_to(lab.sliding_window(2, 1, N, M)(b, h, i, j), (1, 3, N, M))
    assert (keep == ((j >= i + off - 2) & (j <= i + off + 1))).all()
    assert (
        lab.sliding_window(None, 0, N, M)(b, h, i, j) == lab.causal_mask(N, M)
    ).all()
    assert lab.sliding_window(None, None, N, M)(b, h, i, j).all()
    qd, kd = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 2, 2, 2, 3])
    assert (
        lab.document_mask(qd, kd)(b, h, i, j)[0, 0] == (qd[:, None] == kd[None, :])
    ).all()
    both = lab.and_masks(lab.sliding_window(2, 1, N, M), lab.document_mask(qd, kd))(
        b, h, i, j
    )
    assert (both == (keep & (qd[:, None] == kd[None, :]))).all()
    assert lab.and_masks()(b, h, i, j).all()
    s = np.random.default_rng(0).standard_normal((1, 3, N, M)) * 10
    slopes = np.array([0.5, 0.25, 0.125])
    np.testing.assert_array_equal(
        lab.alibi(slopes, N, M)(s, b, h, i, j),
        s - slopes[None, :, None, None] * np.abs(i + off - j),
    )
    capped = lab.softcap(4.0)(s, b, h, i, j)
    np.testing.assert_allclose(capped, 4.0 * np.tanh(s / 4.0))
    assert np.abs(capped).max() < 4.0


def test_alibi_slopes_are_press_et_al_geometric_sequence():
    np.testing.assert_allclose(lab.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_allclose(lab.alibi_slopes(4), 2.0 ** (-2.0 * np.arange(1, 5)))
    s12 = lab.alibi_slopes(12)  # 8 of a power of two, then every other slope of 16
    np.testing.assert_allclose(s12[:8], lab.alibi_slopes(8))
    np.testing.assert_allclose(s12[8:], lab.alibi_slopes(16)[0::2][:4])


def test_builders_work_on_torch_tensors_too():
    N, M = 4, 6
    b, h, i, j = lab.masks.index_arrays(1, 2, 0, N, 0, M, like=torch.zeros(1))
    s = torch.randn(1, 2, N, M, dtype=torch.float64)
    mods = [
        lab.sliding_window(1, 1, N, M),
        lab.document_mask([0, 0, 1, 1], [0, 0, 0, 1, 1, 1]),
    ]
    for mod in mods + [lab.and_masks(*mods)]:
        out = mod(b, h, i, j)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.bool
        assert (out.numpy() == mod(*lab.masks.index_arrays(1, 2, 0, N, 0, M))).all()
    for mod in (lab.alibi([0.5, 0.25], N, M), lab.softcap(2.0)):
        out = mod(s, b, h, i, j)
        assert out.dtype == s.dtype and out.shape == s.shape
        np.testing.assert_allclose(
            out.numpy(), mod(s.numpy(), *lab.masks.index_arrays(1, 2, 0, N, 0, M))
        )


# ------------------------------------------------------------------------------------ block_mask


@SETTINGS
@given(
    st.integers(1, 50),
    st.integers(1, 50),
    st.one_of(st.none(), st.integers(0, 60)),
    st.one_of(st.none(), st.integers(0, 60)),
    blocks,
    blocks,
)
def test_window_tile_counts_equal_block_mask(N, M, left, right, Br, Bc):
    counts = lab.window_tile_counts(N, M, left, right, Br, Bc)
    bm = lab.block_mask(lab.sliding_window(left, right, N, M), 1, 1, N, M, Br, Bc)
    assert {k: counts[k] for k in ("empty", "partial", "full")} == bm.counts
    assert counts["computed"] == bm.tiles and counts["tiles"] == bm.kind.size


@SETTINGS
@given(st.integers(1, 40), st.integers(1, 40), blocks, blocks, st.booleans(), seeds)
def test_block_mask_kinds_match_the_elements(N, M, Br, Bc, causal, seed):
    rng = np.random.default_rng(seed)
    docs = _docs(rng, N, 3), _docs(rng, M, 3)
    mod = lab.and_masks(
        lab.document_mask(*docs), lambda b, h, i, j: (i + j + h) % 4 != 0
    )
    bm = lab.block_mask(mod, 2, 2, N, M, Br, Bc, causal=causal)
    visible = lab.causal_mask(N, M) if causal else np.ones((N, M), bool)
    full = (
        np.broadcast_to(mod(*lab.masks.index_arrays(2, 2, 0, N, 0, M)), (2, 2, N, M))
        & visible
    )
    assert bm.kind.shape == (2, 2, -(-N // Br), -(-M // Bc))
    for ti in range(bm.kind.shape[2]):
        for tj in range(bm.kind.shape[3]):
            tile = full[:, :, ti * Br : (ti + 1) * Br, tj * Bc : (tj + 1) * Bc]
            want = np.where(
                ~tile.any(axis=(2, 3)), 0, np.where(tile.all(axis=(2, 3)), 2, 1)
            )
            np.testing.assert_array_equal(bm.kind[:, :, ti, tj], want)
    assert sum(bm.counts.values()) == bm.kind.size
    assert bm.tiles == int((bm.kind > 0).any(axis=(0, 1)).sum())


def test_block_mask_of_causal_alone_and_of_nothing():
    bm = lab.block_mask(None, 1, 1, 8, 8, 4, 4, causal=True)
    np.testing.assert_array_equal(bm.kind[0, 0], [[1, 0], [2, 1]])
    assert bm.counts == {"empty": 1, "partial": 2, "full": 1} and bm.tiles == 3
    assert lab.block_mask(None, 1, 1, 8, 8, 4, 4).counts == {
        "empty": 0,
        "partial": 0,
        "full": 4,
    }


# ------------------------------------------------------------------------------------ kernels against the reference


@SETTINGS
@given(attention_inputs(max_len=33), st.sampled_from(CASES), blocks, blocks, seeds)
def test_numpy_kernels_match_reference_and_count_tiles(qkv, case, Br, Bc, seed):
    q, k, v = qkv
    kw = _mods(case, q, k, np.random.default_rng(seed))
    o_ref, lse_ref = lab.attention_reference(q, k, v, **kw)
    for variant in ("fa2", "fa1"):
        stats = {}
        o, lse = lab.flash_attention_numpy(
            q, k, v, block_q=Br, block_k=Bc, variant=variant, stats=stats, **kw
        )
        _close(o, lse, o_ref, lse_ref)
        assert stats["tiles"] == _want_tiles(
            kw, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]), Br, Bc
        )


@SETTINGS
@given(
    attention_inputs(max_len=33),
    st.sampled_from(CASES),
    st.one_of(st.none(), blocks),
    st.one_of(st.none(), blocks),
    seeds,
)
def test_torch_kernel_matches_reference_and_counts_tiles(qkv, case, Br, Bc, seed):
    q, k, v = qkv
    kw = _mods(case, q, k, np.random.default_rng(seed))
    o_ref, lse_ref = lab.attention_reference(q, k, v, **kw)
    stats = {}
    o, lse = lab.flash_attention_torch(
        *_t(q, k, v), block_q=Br, block_k=Bc, return_lse=True, stats=stats, **kw
    )
    _close(o.numpy(), lse.numpy(), o_ref, lse_ref)
    Br, Bc = lab.torch_kernels._blocks(torch.tensor(q), torch.tensor(k), Br, Bc, 1)
    assert stats["tiles"] == _want_tiles(
        kw, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]), Br, Bc
    )


@pytest.mark.parametrize("case", CASES)
def test_kernels_match_pytorch_flex_attention(case):
    rng = np.random.default_rng(CASES.index(case))
    q = (
        rng.standard_normal((2, 6, 45, 16)) * 2
    )  # (B, Hq, N, d): N ≠ M, 3 query heads per K/V head
    k = rng.standard_normal((2, 2, 61, 16)) * 2  # (B, Hkv, M, d)
    v = rng.standard_normal((2, 2, 61, 8))
    kw = _mods(case, q, k, rng)
    o_flex, lse_flex = lab.flex_reference(*_t(q, k, v), **kw)
    o_ref, lse_ref = lab.attention_reference(q, k, v, **kw)
    _close(o_flex.numpy(), lse_flex.numpy(), o_ref, lse_ref)
    o_np, lse_np = lab.flash_attention_numpy(q, k, v, block_q=16, block_k=24, **kw)
    o_t, lse_t = lab.flash_attention_torch(
        *_t(q, k, v), block_q=13, block_k=16, return_lse=True, **kw
    )
    _close(o_np, lse_np, o_flex.numpy(), lse_flex.numpy())
    _close(o_t.numpy(), lse_t.numpy(), o_flex.numpy(), lse_flex.numpy())


@settings(max_examples=12, deadline=None)
@given(attention_inputs(max_len=30), st.sampled_from(CASES), blocks, blocks, seeds)
def test_kernels_match_flex_attention_on_random_shapes(qkv, case, Br, Bc, seed):
    q, k, v = qkv
    kw = _mods(case, q, k, np.random.default_rng(seed))
    o_flex, lse_flex = lab.flex_reference(*_t(q, k, v), **kw)
    o_np, lse_np = lab.flash_attention_numpy(q, k, v, block_q=Br, block_k=Bc, **kw)
    o_t, lse_t = lab.flash_attention_torch(
        *_t(q, k, v), block_q=Br, block_k=Bc, return_lse=True, **kw
    )
    _close(o_np, lse_np, o_flex.numpy(), lse_flex.numpy())
    _close(o_t.numpy(), lse_t.numpy(), o_flex.numpy(), lse_flex.numpy())


def test_a_row_seeing_its_first_key_late_gets_an_exact_reference_in_float32():
    """With a window, a row may see nothing in its block's first tile; its reference must come from real scores.

    ALiBi at slope 8 puts the kept scores near -100, where e^{s - 0} underflows float32: a lazy step from the
    placeholder m = 0 would lose the row."""
    rng = np.random.default_rng(3)
    N = 96
    q, k, v = (rng.standard_normal((1, 2, N, 16)).astype(np.float32) for _ in range(3))
    kw = dict(
        mask_mod=lab.sliding_window(20, 0, N, N), score_mod=lab.alibi([8.0, 6.0], N, N)
    )
    kw2 = dict(
        mask_mod=lab.and_masks(
            lab.sliding_window(20, 0, N, N), lambda b, h, i, j: (i - j) >= 12
        ),
        score_mod=kw["score_mod"],
    )
    for mods in (kw, kw2):
        o_ref, lse_ref = lab.attention_reference(q, k, v, **mods)
        o, lse = lab.flash_attention_torch(
            *_t(q, k, v, dtype=torch.float32),
            block_q=8,
            block_k=8,
            return_lse=True,
            **mods,
        )
        assert np.abs(o.numpy() - o_ref).max() < 1e-5
        fin = np.isfinite(lse_ref)
        assert (
            np.array_equal(np.isfinite(lse.numpy()), fin)
            and np.abs(lse.numpy()[fin] - lse_ref[fin]).max() < 1e-4
        )


@pytest.mark.parametrize("magnitude", [30.0, 300.0])
def test_rescaled_and_recomputed_tiles_honour_the_mods(magnitude):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 2, 70, 8)) * magnitude
    k = rng.standard_normal((1, 2, 70, 8)) * magnitude
    v = rng.standard_normal((1, 2, 70, 8))
    kw = dict(
        mask_mod=lab.sliding_window(30, 3, 70, 70),
        score_mod=lab.alibi([0.5, 2.0], 70, 70),
    )
    o_ref, lse_ref = lab.attention_reference(q, k, v, **kw)
    stats = {}
    o, lse = lab.flash_attention_torch(
        *_t(q, k, v), block_q=16, block_k=8, return_lse=True, stats=stats, **kw
    )
    _close(o.numpy(), lse.numpy(), o_ref, lse_ref, rtol=1e-9, atol=1e-9)
    assert stats["rescaled"] + stats["recomputed"] > 0


def test_fully_masked_rows_give_zero_and_minus_inf_and_finite_gradients():
    rng = np.random.default_rng(5)
    q, k, v = (
        rng.standard_normal((1, 2, 12, 4)),
        rng.standard_normal((1, 2, 10, 4)),
        rng.standard_normal((1, 2, 10, 4)),
    )
    mod = lab.document_mask(
        [0] * 4 + [7] * 3 + [1] * 5, [0] * 5 + [1] * 5
    )  # document 7 has no keys
    for o, lse in (
        lab.attention_reference(q, k, v, mask_mod=mod),
        lab.flash_attention_numpy(q, k, v, block_q=4, block_k=4, mask_mod=mod),
        tuple(
            t.detach().numpy()
            for t in lab.flash_attention_torch(
                *_t(q, k, v), block_q=4, block_k=4, mask_mod=mod, return_lse=True
            )
        ),
    ):
        assert (
            (o[:, :, 4:7] == 0).all()
            and np.isneginf(lse[:, :, 4:7]).all()
            and np.isfinite(lse[:, :, [0, 8]]).all()
        )
    qt, kt, vt = _t(q, k, v, grad=True)
    o = lab.flash_attention_torch(
        qt, kt, vt, block_q=4, block_k=4, mask_mod=mod, score_mod=lab.softcap(1.0)
    )
    o.sum().backward()
    for g in (qt.grad, kt.grad, vt.grad):
        assert torch.isfinite(g).all()
    assert (qt.grad[:, :, 4:7] == 0).all()


def test_precomputed_block_mask_is_reused_and_checked():
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 2, 40, 8)) for _ in range(3))
    mod = lab.sliding_window(6, 0, 40, 40)
    bm = lab.block_mask(mod, 1, 2, 40, 40, 8, 8)
    o_ref, _ = lab.attention_reference(q, k, v, mask_mod=mod)
    stats = {}
    o = lab.flash_attention_torch(
        *_t(q, k, v), block_mask=bm, stats=stats
    )  # block sizes and mask_mod from bm
    np.testing.assert_allclose(o.numpy(), o_ref, rtol=1e-12, atol=1e-12)
    assert stats["tiles"] == bm.tiles
    o_np, _ = lab.flash_attention_numpy(
        q, k, v, block_q=8, block_k=8, mask_mod=mod, block_mask=bm
    )
    np.testing.assert_allclose(o_np, o_ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="block_mask"):
        lab.flash_attention_torch(*_t(q, k, v), block_mask=bm, block_q=16)
    with pytest.raises(ValueError, match="block_mask"):
        lab.flash_attention_numpy(
            q,
            k,
            v,
            block_q=8,
            block_k=8,
            mask_mod=lab.sliding_window(6, 0, 40, 40),
            block_mask=bm,
        )
    with pytest.raises(ValueError, match="block_mask"):
        lab.flash_attention_numpy(
            q, k, v, block_q=8, block_k=8, causal=True, block_mask=bm
        )
    with pytest.raises(TypeError, match="block_mask"):
        lab.flash_attention_numpy(q, k, v, block_mask=bm.kind)


def test_skipped_tiles_are_never_read():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 1, 64, 8)).astype(np.float32) for _ in range(3))
    mod = lab.sliding_window(7, 0, 64, 64)
    with lab.trace.record() as rec:
        lab.flash_attention_numpy(q, k, v, block_q=8, block_k=8, mask_mod=mod)
    tile = 8 * 8 * 4  # one K_j block: 8 keys × d = 8 × float32
    assert (
        rec.read_by["k"]
        == lab.block_mask(mod, 1, 1, 64, 64, 8, 8).tiles * tile
        == 15 * tile
    )


def test_inputs_are_never_modified():
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((1, 2, 20, 4)) for _ in range(3))
    copies = [a.copy() for a in (q, k, v)]
    kw = dict(mask_mod=lab.sliding_window(3, 3, 20, 20), score_mod=lab.softcap(1.0))
    lab.attention_reference(q, k, v, **kw)
    lab.flash_attention_numpy(q, k, v, block_q=8, block_k=8, **kw)
    qt, kt, vt = _t(q, k, v, grad=True)
    lab.flash_attention_torch(qt, kt, vt, block_q=8, block_k=8, **kw).sum().backward()
    for a, c, t in zip((q, k, v), copies, (qt, kt, vt)):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(t.detach().numpy(), c)


# ------------------------------------------------------------------------------------ gradients


def _grads(fn, q, k, v, do, **kw):
    qt, kt, vt = _t(q, k, v, grad=True)
    o = fn(qt, kt, vt, **kw)
    o = o[0] if isinstance(o, tuple) else o
    return torch.autograd.grad(o, (qt, kt, vt), torch.tensor(do))


@settings(max_examples=20, deadline=None)
@given(
    attention_inputs(max_len=24),
    st.sampled_from(CASES),
    st.one_of(st.none(), blocks),
    st.one_of(st.none(), blocks),
    seeds,
)
def test_gradients_match_autograd_through_the_torch_reference(qkv, case, Br, Bc, seed):
    q, k, v = qkv
    rng = np.random.default_rng(seed)
    kw = _mods(case, q, k, rng)
    do = rng.standard_normal(q.shape[:-1] + (v.shape[-1],))
    got = _grads(lab.flash_attention_torch, q, k, v, do, block_q=Br, block_k=Bc, **kw)
    want = _grads(lab.attention_reference_torch, q, k, v, do, **kw)
    for name, g, w in zip("qkv", got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10, msg=f"d{name}")


def test_gradients_of_a_user_score_mod_come_from_autograd_on_the_tile():
    rng = np.random.default_rng(9)
    q, k, v = (
        rng.standard_normal((1, 4, 30, 8)),
        rng.standard_normal((1, 2, 37, 8)),
        rng.standard_normal((1, 2, 37, 8)),
    )
    do = rng.standard_normal((1, 4, 30, 8))
    kw = dict(
        score_mod=lambda s, b, h, i, j: (
            s * (1 + 0.25 * h) + torch.sin(s) - 0.01 * (i - j) ** 2
        ),
        mask_mod=lambda b, h, i, j: (i + j) % 5 != 1,
    )
    got = _grads(lab.flash_attention_torch, q, k, v, do, block_q=8, block_k=16, **kw)
    want = _grads(lab.attention_reference_torch, q, k, v, do, **kw)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)


def test_gradcheck_against_finite_differences():
    rng = np.random.default_rng(10)
    q, k, v = _t(
        rng.standard_normal((1, 2, 9, 4)),
        rng.standard_normal((1, 1, 11, 4)),
        rng.standard_normal((1, 1, 11, 3)),
        grad=True,
    )
    kw = dict(
        block_q=4,
        block_k=3,
        mask_mod=lab.sliding_window(4, 2, 9, 11),
        score_mod=lab.softcap(1.5),
    )
    assert torch.autograd.gradcheck(
        lambda a, b, c: lab.flash_attention_torch(a, b, c, **kw), (q, k, v)
    )


def test_backward_refuses_a_score_mod_it_cannot_differentiate():
    rng = np.random.default_rng(11)
    q, k, v = _t(*(rng.standard_normal((1, 1, 8, 4)) for _ in range(3)), grad=True)
    o = lab.flash_attention_torch(
        q, k, v, score_mod=lambda s, b, h, i, j: s.detach() * 2
    )
    with pytest.raises(ValueError, match="score_mod.*derivative"):
        o.sum().backward()
    bias = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="requires grad"):
        lab.flash_attention_torch(q, k, v, score_mod=lambda s, b, h, i, j: s + bias)
    with torch.no_grad():  # forward only: the captured tensor is fine
        lab.flash_attention_torch(q, k, v, score_mod=lambda s, b, h, i, j: s + bias)


# ------------------------------------------------------------------------------------ errors


def _qkv(ndim=4, N=5, M=6):
    rng = np.random.default_rng(12)
    shape = (1, 2)[: ndim - 2]
    return tuple(rng.standard_normal(shape + (n, 4)) for n in (N, M, M))


def _torchified(mod):
    """A mod written with numpy, called on torch tensors: arguments to numpy, the result back to torch."""

    def wrapped(*args):
        return torch.as_tensor(
            mod(*(a.numpy() if isinstance(a, torch.Tensor) else a for a in args))
        )

    return wrapped


BAD_MODS = [
    (
        dict(mask_mod=lambda b, h, i, j: (j <= i) * 1),
        TypeError,
        "mask_mod must return booleans",
    ),
    (
        dict(mask_mod=lambda b, h, i, j: np.ones((3, 3), bool)),
        ValueError,
        "mask_mod must return a shape",
    ),
    (dict(mask_mod="causal"), TypeError, "mask_mod must be callable"),
    (
        dict(score_mod=lambda s, b, h, i, j: s[..., :1]),
        ValueError,
        "score_mod must return an array of s's shape",
    ),
    (
        dict(score_mod=lambda s, b, h, i, j: s.sum()),
        ValueError,
        "score_mod must return an array of s's shape",
    ),
    (
        dict(score_mod=lambda s, b, h, i, j: s - s.max(axis=-1, keepdims=True)),
        ValueError,
        "score_mod must act elementwise",
    ),
    (
        dict(mask_mod=lab.document_mask([0, 0, 1], [0] * 6)),
        ValueError,
        "q_doc has length 3",
    ),
    (
        dict(mask_mod=lab.document_mask([0] * 5, [0] * 7)),
        ValueError,
        "k_doc has length 7",
    ),
    (
        dict(mask_mod=lab.sliding_window(1, 1, 6, 6)),
        ValueError,
        "sliding_window.*N = 6",
    ),
    (
        dict(score_mod=lab.alibi([1.0, 2.0, 3.0], 5, 6)),
        ValueError,
        "slopes has length 3",
    ),
]


@pytest.mark.parametrize("kw, error, match", BAD_MODS)
@pytest.mark.parametrize("fn", ["reference", "numpy", "torch"])
def test_bad_mods_are_named_before_any_work(kw, error, match, fn):
    q, k, v = _qkv()
    if fn == "torch":  # the same numpy-written mods, on torch tensors
        kw = {
            name: _torchified(mod)
            if callable(mod) and not isinstance(mod, lab.masks._Mod)
            else mod
            for name, mod in kw.items()
        }
    with lab.trace.record() as rec, pytest.raises(error, match=match):
        {
            "reference": lambda: lab.attention_reference(q, k, v, **kw),
            "numpy": lambda: lab.flash_attention_numpy(
                q, k, v, block_q=2, block_k=2, **kw
            ),
            "torch": lambda: lab.flash_attention_torch(
                *_t(q, k, v), block_q=2, block_k=2, **kw
            ),
        }[fn]()
    assert rec.total == 0  # no tile was read


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize(
    "kw",
    [dict(mask_mod=lab.sliding_window(1, 1, 5, 6)), dict(score_mod=lab.softcap(1.0))],
)
def test_mods_need_4d_inputs(ndim, kw):
    q, k, v = _qkv(ndim)
    for call in (
        lambda: lab.attention_reference(q, k, v, **kw),
        lambda: lab.flash_attention_numpy(q, k, v, **kw),
        lambda: lab.flash_attention_torch(*_t(q, k, v), **kw),
        lambda: lab.attention_reference_torch(*_t(q, k, v), **kw),
    ):
        with pytest.raises(ValueError, match="4-D"):
            call()


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: lab.sliding_window(-1, 0, 4, 4), ValueError, "left must be >= 0"),
        (lambda: lab.sliding_window(0, -3, 4, 4), ValueError, "right must be >= 0"),
        (lambda: lab.sliding_window(1.5, 0, 4, 4), TypeError, "left must be"),
        (lambda: lab.sliding_window(1, 0, -4, 4), ValueError, "N must be >= 0"),
        (
            lambda: lab.document_mask([0.0, 1.0], [0, 1]),
            TypeError,
            "q_doc must hold integers",
        ),
        (
            lambda: lab.document_mask([0, 1], [True, False]),
            TypeError,
            "k_doc must hold integers",
        ),
        (lambda: lab.document_mask([[0, 1]], [0, 1]), ValueError, "q_doc must be 1-D"),
        (
            lambda: lab.and_masks(lab.sliding_window(1, 1, 4, 4), 3),
            TypeError,
            r"mask_mods\[1\] must be callable",
        ),
        (lambda: lab.alibi([[1.0]], 4, 4), ValueError, "slopes must be a 1-D array"),
        (
            lambda: lab.alibi([1.0, math.nan], 4, 4),
            ValueError,
            "slopes must be a 1-D array",
        ),
        (
            lambda: lab.alibi(torch.ones(2, requires_grad=True), 4, 4),
            ValueError,
            "slopes must not require grad",
        ),
        (lambda: lab.softcap(0.0), ValueError, "cap must be a finite number > 0"),
        (lambda: lab.softcap(math.inf), ValueError, "cap must be a finite number > 0"),
        (lambda: lab.softcap("50"), TypeError, "cap must be a positive number"),
        (
            lambda: lab.block_mask(None, 1, 1, 4, 4, 0, 2),
            ValueError,
            "block_q must be >= 1",
        ),
        (
            lambda: lab.block_mask(None, 1, 1, 4, 4, 2, 2, causal="yes"),
            TypeError,
            "causal must be a bool",
        ),
        (
            lambda: lab.block_mask(lambda b, h, i, j: i - j, 1, 1, 4, 4, 2, 2),
            TypeError,
            "mask_mod must return booleans",
        ),
        (
            lambda: lab.window_tile_counts(4, 4, -2, 0, 2, 2),
            ValueError,
            "left must be >= 0",
        ),
        (
            lambda: lab.flash_attention_numpy(*_qkv(), stats=[]),
            TypeError,
            "stats must be a dict",
        ),
        (
            lambda: lab.flash_attention_torch(*_t(*_qkv()), stats=[]),
            TypeError,
            "stats must be a dict",
        ),
    ],
)
def test_builder_errors_name_the_argument(build, error, match):
    with pytest.raises(error, match=match):
        build()


# ------------------------------------------------------------------------------------ exercise checks


def _notebook_cells(tag=None, prefix=None) -> list:
    """Sources of notebook 11's cells tagged `tag` or starting with `prefix`."""
    import nbformat

    nb = nbformat.read(
        ROOT / "notebooks" / "11_masks_and_score_mods.ipynb", as_version=4
    )
    return [
        c.source
        for c in nb.cells
        if c.cell_type == "code"
        and (
            (tag and tag in c.get("metadata", {}).get("tags", []))
            or (prefix and c.source.startswith(prefix))
        )
    ]


def _notebook_solutions() -> dict:
    """The worked solutions of notebook 11 (its cells tagged `solution`), executed: name -> function."""
    namespace = {"np": np, "lab": lab, "torch": torch}
    for source in _notebook_cells(tag="solution"):
        exec(compile(source, "<solution cell>", "exec"), namespace)
    return namespace


def clipped_alibi(slopes, max_distance, N, M):
    """A score_mod the course's score check is tried on: ALiBi with the distance capped."""
    off = M - N

    def score_mod(s, b, h, i, j):  # numpy arrays or torch tensors alike
        table = np.asarray(slopes)
        if isinstance(s, torch.Tensor):
            table = torch.as_tensor(slopes, dtype=s.dtype, device=s.device)
        return s - table[h] * abs(i + off - j).clip(max=max_distance)

    return score_mod


SOLUTIONS = {**_notebook_solutions(), "clipped_alibi": clipped_alibi}
CHECK_CELLS = {
    k: _notebook_cells(prefix=f"# Exercise {k}: check") for k in (1, 2, 3, 4)
}
# lab.check_score_mod, run as a notebook's check cell would run it
CHECK_CELLS["score"] = [
    """lab.check_score_mod(
    clipped_alibi,
    lab.clipped_alibi,
    [
        (np.array([0.5, 0.25]), 4, 12, 12),
        (np.array([1.0, 0.1]), 2, 9, 15),
        (np.array([0.5, 2.0]), 3, 20, 12),
        (np.array([0.3, 0.3]), 100, 40, 40),
    ],
)
"""
]
EXERCISE_NAMES = {
    1: "window_tiles",
    2: "prefix_lm",
    3: "dilated_window",
    4: "document_tiles",
    "score": "clipped_alibi",
}


def _run_check(k: int | str, fn, capsys) -> str:
    """Run the notebook's own check cell of exercise k with `fn` as the learner's answer; return what it printed."""
    (source,) = CHECK_CELLS[k]
    exec(
        compile(source, f"<exercise {k} check>", "exec"),
        {"np": np, "lab": lab, "torch": torch, EXERCISE_NAMES[k]: fn},
    )
    return capsys.readouterr().out


def _tiles_shifted(shift):
    """window_tiles whose window starts `shift` keys too early (+1: W + 1 keys) or too late (-1: W - 1 keys)."""

    def window_tiles(N, W, Br, Bc):
        return sum(
            (min(i0 + Br, N) - 1) // Bc - max(0, i0 - (W - 1) - shift) // Bc + 1
            for i0 in range(0, N, Br)
        )

    return window_tiles


WRONG_TILES = {
    "ignores the edges": (lambda N, W, Br, Bc: -(-N // Br) * (W // Bc + 1), "expected"),
    "full attention": (
        lambda N, W, Br, Bc: -(-N // Br) * -(-N // Bc),
        "full attention's count",
    ),
    "window of W + 1 keys, no clamp": (
        lambda N, W, Br, Bc: sum(
            (min(i + Br, N) - 1) // Bc - (i - W) // Bc + 1 for i in range(0, N, Br)
        ),
        "expected",
    ),
    "window of W + 1 keys": (
        _tiles_shifted(1),
        "yours 21, expected 15 (+6 tiles); that is the count for a window of W + 1 keys",
    ),
    "window of W - 1 keys": (
        _tiles_shifted(-1),
        "case 3 window_tiles(N=77, W=1, Br=8, Bc=13): yours 14, expected 15",
    ),
    "the last query block not cut at N": (
        lambda N, W, Br, Bc: sum(
            (i0 + Br - 1) // Bc - max(0, i0 - (W - 1)) // Bc + 1
            for i0 in range(0, N, Br)
        ),
        "the last query block's rows running to i0 + Br",
    ),
    "a float": (
        lambda N, W, Br, Bc: _tiles_shifted(0)(N, W, Br, Bc) + 0.5,
        "yours 21.5, expected 21",
    ),
    "an array": (lambda N, W, Br, Bc: np.array([1, 2]), "not a number of tiles"),
}
WRONG_PREFIX = {
    "off by one": (
        lambda p, N, M: lambda b, h, i, j: (j <= p) | (j <= i + M - N),
        "the spec drops it",
    ),
    "top-left aligned": (
        lambda p, N, M: lambda b, h, i, j: (j < p) | (j <= i),
        "case 3 (4, 30, 20)",
    ),
    "offset |M - N|": (
        lambda p, N, M: lambda b, h, i, j: (j < p) | (j <= i + abs(M - N)),
        "case 3 (4, 30, 20)",
    ),
    "offset max(0, M - N)": (
        lambda p, N, M: lambda b, h, i, j: (j < p) | (j <= i + max(0, M - N)),
        "case 3 (4, 30, 20)",
    ),
    "python or": (
        lambda p, N, M: lambda b, h, i, j: (j < p) or (j <= i + M - N),
        "use & | ~",
    ),
    "integers": (
        lambda p, N, M: lambda b, h, i, j: ((j < p) | (j <= i + M - N)) * 1,
        "not bool",
    ),
    "prefix only": (lambda p, N, M: lambda b, h, i, j: j < p, "the spec keeps it"),
    "no return": (lambda p, N, M: None, "returned None"),
}


def _dilated(off):
    """dilated_window with the offset `off(N, M)` in place of M - N."""
    return lambda w, d, N, M: (
        lambda b, h, i, j: (
            (j <= i + off(N, M))
            & (j > i + off(N, M) - w)
            & ((i + off(N, M) - j) % d == 0)
        )
    )


WRONG_DILATED = {
    "no causal": (
        lambda w, d, N, M: (
            lambda b, h, i, j: (j > i + M - N - w) & ((i + M - N - j) % d == 0)
        ),
        "misclassified",
    ),
    "window one too wide": (
        lambda w, d, N, M: (
            lambda b, h, i, j: (
                (j <= i + M - N) & (j >= i + M - N - w) & ((i + M - N - j) % d == 0)
            )
        ),
        "keeps",
    ),
    "dilation on j": (
        lambda w, d, N, M: (
            lambda b, h, i, j: (j <= i + M - N) & (j > i + M - N - w) & (j % d == 0)
        ),
        "yours",
    ),
    "offset |M - N|": (_dilated(lambda N, M: abs(M - N)), "case 3 (8, 2, 30, 20)"),
    "offset max(0, M - N)": (
        _dilated(lambda N, M: max(0, M - N)),
        "case 3 (8, 2, 30, 20)",
    ),
}


def _clipped(off):
    """clipped_alibi with the offset `off(N, M)` in place of M - N."""
    return lambda sl, D, N, M: (
        lambda s, b, h, i, j: (
            s - np.asarray(sl)[h] * np.minimum(np.abs(i + off(N, M) - j), D)
        )
    )


WRONG_SCORE = {
    "no clipping": (lambda sl, D, N, M: lab.alibi(sl, N, M), "largest difference"),
    "wrong sign": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: (
                s + np.asarray(sl)[h] * np.minimum(np.abs(i + M - N - j), D)
            )
        ),
        "largest difference",
    ),
    "the penalty clipped, not the distance": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: (
                s - np.minimum(np.asarray(sl)[h] * np.abs(i + M - N - j), D)
            )
        ),
        "clip the distance",
    ),
    "a signed distance": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: s - np.asarray(sl)[h] * np.minimum(i + M - N - j, D)
        ),
        "the distance is |i + off - j|",
    ),
    "clipped one short": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: (
                s - np.asarray(sl)[h] * np.minimum(np.abs(i + M - N - j), D - 1)
            )
        ),
        "clips at max_distance - 1",
    ),
    "slope of the batch": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: (
                s - np.asarray(sl)[b] * np.minimum(np.abs(i + M - N - j), D)
            )
        ),
        "head 1",
    ),
    "in place": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: np.subtract(
                s, np.asarray(sl)[h] * np.minimum(np.abs(i + M - N - j), D), out=s
            )
        ),
        "in place",
    ),
    "one row": (
        lambda sl, D, N, M: lambda s, b, h, i, j: s[..., :1, :],
        "returned shape",
    ),
    "built-in min": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: s - sl[h] * min(abs(i + M - N - j), D)
        ),
        "np.minimum",
    ),
    "offset |M - N|": (
        _clipped(lambda N, M: abs(M - N)),
        "case 2 (np.array([0.5, 2.0]), 3, 20, 12)",
    ),
    "offset max(0, M - N)": (
        _clipped(lambda N, M: max(0, M - N)),
        "case 2 (np.array([0.5, 2.0]), 3, 20, 12)",
    ),
    "float32 scores": (
        lambda sl, D, N, M: (
            lambda s, b, h, i, j: (
                s - np.asarray(sl)[h] * np.minimum(np.abs(i + M - N - j), D)
            ).astype(np.float32)
        ),
        "largest difference",
    ),
}


def test_exercise_checks_pass_the_notebooks_worked_solutions(capsys):
    for k, name in EXERCISE_NAMES.items():
        out = _run_check(k, SOLUTIONS[name], capsys)
        assert out.count("✓") == 1 and "✗" not in out, out


def test_checks_report_a_stub_as_not_implemented(capsys):
    def stub(*args):
        raise NotImplementedError

    for k in EXERCISE_NAMES:
        assert "not implemented yet" in _run_check(k, stub, capsys)


@pytest.mark.parametrize("name", WRONG_TILES)
def test_window_tiles_check_catches_planted_errors(name, capsys):
    wrong, says = WRONG_TILES[name]
    out = _run_check(1, wrong, capsys)
    assert "✗" in out and "✓" not in out and says in out, out
    assert "window_tiles(N=" in out


def test_window_tiles_check_needs_the_block_edge_cases(capsys):
    """The first five cases alone let a window one key too wide or too narrow pass; the edge cases catch both."""
    cases = [
        (256, 64, 32, 32),
        (1000, 100, 64, 48),
        (8192, 256, 256, 256),
        (300, 1000, 64, 64),
    ]
    for shift in (1, -1):
        lab.check_window_tiles(_tiles_shifted(shift), cases, fresh=0)
        assert "✓" in capsys.readouterr().out
    assert (
        "(256, 33, 32, 32)" in CHECK_CELLS[1][0]
        and "(256, 34, 32, 32)" in CHECK_CELLS[1][0]
    )


def test_window_tiles_check_names_the_wider_window_on_a_key_block_edge(capsys):
    lab.check_window_tiles(_tiles_shifted(1), [(256, 33, 32, 32)], fresh=0)
    out = capsys.readouterr().out
    assert out.strip() == (
        "window_tiles: ✗ case 0 window_tiles(N=256, W=33, Br=32, Bc=32): yours 21, expected 15 "
        "(+6 tiles); that is the count for a window of W + 1 keys: a causal window of W keys starts "
        "at key i - (W - 1), not i - W"
    )
    for case, got, want in (((100, 17, 16, 16), 18, 13), ((256, 65, 32, 32), 26, 21)):
        lab.check_window_tiles(_tiles_shifted(1), [case])
        assert f"yours {got}, expected {want}" in capsys.readouterr().out
    lab.check_window_tiles(_tiles_shifted(-1), [(256, 34, 32, 32)])
    assert (
        "yours 15, expected 21 (-6 tiles); that is the count for a window of W - 1 keys"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize("name", WRONG_PREFIX)
def test_mask_check_catches_planted_prefix_lm_errors(name, capsys):
    wrong, says = WRONG_PREFIX[name]
    out = _run_check(2, wrong, capsys)
    assert "✗" in out and "✓" not in out and says in out, out


@pytest.mark.parametrize("name", WRONG_DILATED)
def test_mask_check_catches_planted_dilated_window_errors(name, capsys):
    wrong, says = WRONG_DILATED[name]
    out = _run_check(3, wrong, capsys)
    assert "✗" in out and "✓" not in out and says in out and "query i =" in out, out


@pytest.mark.parametrize("name", WRONG_SCORE)
def test_score_check_catches_planted_errors(name, capsys):
    wrong, says = WRONG_SCORE[name]
    out = _run_check("score", wrong, capsys)
    assert "✗" in out and "✓" not in out and says in out, out


def test_score_check_prints_the_digits_that_differ(capsys):
    spec, mine = lab.clipped_alibi, SOLUTIONS["clipped_alibi"]
    near = lambda sl, D, N, M: (
        lambda s, b, h, i, j: mine(sl, D, N, M)(s, b, h, i, j) * (1 + 1e-7)
    )  # noqa: E731
    lab.check_score_mod(near, spec, [(np.array([0.5, 0.25]), 4, 12, 12)])
    out = capsys.readouterr().out
    yours, theirs = out.split("(yours ")[1].split(", from s")[0].split(", the spec's ")
    assert yours != theirs and float(yours) != float(theirs), out


def test_mask_tiles_slider_says_whether_documents_are_on():
    w = lab.widgets.mask_tiles()
    assert (
        "no documents" in w.summary_html.value
        and w.result["kernel_tiles"] == w.result["tiles"]
    )
    w.children[2].value = True
    assert w.result["documents"] and "∧ 4 documents" in w.summary_html.value
    assert w.result["kernel_tiles"] == w.result["tiles"]


def test_exercise_specs_agree_with_flex_attention():
    rng = np.random.default_rng(13)
    q, k, v = _t(
        rng.standard_normal((1, 2, 20, 8)),
        rng.standard_normal((1, 2, 25, 8)),
        rng.standard_normal((1, 2, 25, 8)),
    )
    for kw in (
        dict(mask_mod=lab.prefix_lm(5, 20, 25)),
        dict(mask_mod=lab.dilated_window(8, 3, 20, 25)),
        dict(score_mod=lab.clipped_alibi([0.5, 1.0], 4, 20, 25), causal=True),
    ):
        o_flex, lse_flex = lab.flex_reference(q, k, v, **kw)
        o, lse = lab.flash_attention_torch(
            q, k, v, block_q=6, block_k=7, return_lse=True, **kw
        )
        _close(o.numpy(), lse.numpy(), o_flex.numpy(), lse_flex.numpy())


# ------------------------------------------------------------------------------------ figures and numerics


def test_window_tiles_legend_shows_the_colours_drawn():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    fig, ax = plt.subplots()
    lab.figures.masks.draw_window_tiles(
        N=256, window=64, block=32, ax=ax
    )  # empty, partial and full tiles
    drawn = {
        to_hex(c) for c in np.unique(ax.images[0].get_array().reshape(-1, 3), axis=0)
    }
    legend = {to_hex(h.get_facecolor()) for h in ax.get_legend().legend_handles}
    plt.close(fig)
    assert drawn == legend


def test_the_documents_toggle_cuts_tiles():
    """The slider's four documents have boundaries inside tiles, so the tile
    kinds differ from the window's alone; the kernel computes exactly the non-empty tiles."""
    import matplotlib.pyplot as plt

    for block in (8, 16, 32):  # (at 64 the default window keeps no tile full)
        fig, axes = plt.subplots(1, 2)
        alone = lab.figures.masks.draw_window_tiles(256, 64, block, ax=axes[0])
        docs = lab.figures.masks.draw_window_tiles(256, 64, block, True, ax=axes[1])
        plt.close(fig)
        kinds = ("empty", "partial", "full")
        assert [docs[k] for k in kinds] != [alone[k] for k in kinds], (block, docs)
        assert docs["kernel_tiles"] == docs["partial"] + docs["full"]


def test_softcap_fixed_reference_error_is_inf_only_where_l_underflows():
    fp16 = lab.softcap_fixed_reference_detail(
        30.0, "fp16"
    )  # P rounded to FP16 loses rows; l (FP32) does not
    assert (
        fp16["rows_p_zero"] > 0 and fp16["rows_l_zero"] == 0 and 0.1 < fp16["err"] < 10
    )
    near = lab.softcap_fixed_reference_detail(
        90.0, "fp32"
    )  # every row within FP32's normal range of the cap
    assert near["below_cap"] < 87.3 and near["err"] < 1e-4
    sub = lab.softcap_fixed_reference_detail(
        100.0, "fp32"
    )  # the lowest row's P is subnormal: fewer bits
    assert (
        87.4 < sub["below_cap"] < 103
        and sub["rows_l_zero"] == 0
        and 1e-4 < sub["err"] < 1e-2
    )
    lost = lab.softcap_fixed_reference_detail(
        110.0, "fp32"
    )  # past the smallest subnormal: l = 0, o = 0/0
    assert (
        lost["below_cap"] > 104 and lost["rows_l_zero"] > 0 and lost["err"] == math.inf
    )
    assert lab.softcap_fixed_reference_error(110.0, "fp32") == math.inf


# ------------------------------------------------------------------------------------ timing


def test_time_window_attention_runs_and_counts_tiles():
    before = torch.get_num_threads()
    r = lab.time_window_attention(512, 64, heads=1, d=16, block=64, rounds=1, threads=1)
    assert (
        r["threads"] == 1 and torch.get_num_threads() == before
    )  # restored afterwards
    with pytest.raises(ValueError, match="threads must be >= 1"):
        lab.time_window_attention(512, 64, threads=0)
    assert set(r["seconds"]) == {
        "kernel, window",
        "kernel, full",
        "SDPA, boolean window mask",
        "SDPA, full",
    }
    assert all(t > 0 for t in r["seconds"].values())
    assert r["tiles"] == {
        "window": lab.window_tile_counts(512, 512, 63, 0, 64, 64)["computed"],
        "full": 64,
    }
    assert r["max_err"] < 1e-5


def test_kernel_problem_names_a_refusal_and_a_difference_and_passes_the_spec():
    from lab.checks.masks import _kernel_problem

    spec = lab.clipped_alibi
    case = (np.array([0.5, 0.25]), 4, 12, 12)
    assert _kernel_problem(spec, spec, "score_mod", case, 2, "scores") is None
    off = lambda *c: lambda s, b, h, i, j: spec(*c)(s, b, h, i, j) + 1.0 * (j == 0)  # noqa: E731
    assert "differs from the reference" in _kernel_problem(
        off, spec, "score_mod", case, 2, "scores"
    )
    assert "refused yours" in _kernel_problem(
        lambda *c: "not a mod", spec, "score_mod", case, 2, "scores"
    )


def test_the_gallery_says_alibi_drops_nothing_and_whose_share_is_kept():
    """ALiBi is a bias: its line gives the causal mask's share, and says so, never 'ALiBi keeps x %'."""
    import matplotlib.pyplot as plt

    info = lab.figures.masks.draw_mask_gallery(N=32, window=8, docs=(10, 12, 10))
    plt.close("all")
    lines = dict(line.split(": ", 1) for line in lab.figures.masks.gallery_lines(info))
    lines = {name.strip(): text for name, text in lines.items()}
    assert info["ALiBi (causal)"]["kept"] == info["causal"]["kept"]
    alibi = lines["ALiBi (causal)"]
    assert "it drops none" in alibi and "causal keeps" in alibi, alibi
    assert f"{info['causal']['kept']:.1%}" in alibi, alibi
    assert "none dropped" in lines["soft-cap 5"], lines
    assert lines["causal"].endswith("of the scores kept"), lines
