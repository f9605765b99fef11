"""The torch kernels against the float64 oracle and torch autograd: forward, lse, backward, errors."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import attention_inputs, blocks, seeds
from test_masks import CASES, _close, _mods, _want_tiles

import lab

SETTINGS = settings(max_examples=30, deadline=None)
VARIANTS = pytest.mark.parametrize(
    "variant", ["fa2", "lazy"]
)  # the forward's two rungs


def _t(*arrays, dtype=torch.float64, grad=False):
    return tuple(torch.tensor(a, dtype=dtype, requires_grad=grad) for a in arrays)


def _reference_autograd(q, k, v, causal, scale=None):
    """softmax(scale·QKᵀ)V by torch autograd, grouped heads expanded, fully masked rows set to 0."""
    group = q.shape[-3] // k.shape[-3] if q.dim() > 2 else 1
    if group > 1:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        N, M = q.shape[-2], k.shape[-2]
        s = s.masked_fill(
            torch.arange(M)[None, :] > torch.arange(N)[:, None] + (M - N), -math.inf
        )
    return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v


@VARIANTS
@SETTINGS
@given(
    attention_inputs(),
    st.one_of(st.none(), blocks),
    st.one_of(st.none(), blocks),
    st.booleans(),
)
def test_forward_matches_reference_in_float64(variant, qkv, Br, Bc, causal):
    o_ref, lse_ref = lab.attention_reference(*qkv, causal=causal)
    o, lse = lab.flash_attention_torch_forward(
        *_t(*qkv), causal=causal, block_q=Br, block_k=Bc, variant=variant
    )
    assert o.dtype == torch.float64 and lse.dtype == torch.float64
    assert tuple(o.shape) == o_ref.shape and tuple(lse.shape) == lse_ref.shape
    np.testing.assert_allclose(o.numpy(), o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse.numpy()), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse.numpy()[fin], lse_ref[fin], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "dtype, tol", [(torch.float32, 2e-6), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)]
)
@pytest.mark.parametrize("causal", [False, True])
@VARIANTS
def test_low_precision_inputs_accumulate_in_fp32(dtype, tol, causal, variant):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 4, n, 64)) for n in (200, 137, 137))
    q, k, v = (torch.tensor(a).to(dtype) for a in (q, k, v))
    o_ref, lse_ref = lab.attention_reference(
        *(a.double().numpy() for a in (q, k, v)), causal=causal
    )
    o, lse = lab.flash_attention_torch(
        q, k, v, causal=causal, block_q=64, block_k=48, return_lse=True, variant=variant
    )
    assert o.dtype == dtype and lse.dtype == torch.float32
    # the only rounding above float32's is the final cast of o to the input dtype
    assert (o.double().numpy() - o_ref).__abs__().max() < tol
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(
        lse.double().numpy()[fin], lse_ref[fin], rtol=1e-5, atol=1e-5
    )


@VARIANTS
@SETTINGS
@given(
    attention_inputs(max_len=24),
    st.one_of(st.none(), blocks),
    st.one_of(st.none(), blocks),
    st.booleans(),
)
def test_gradients_match_autograd_in_float64(variant, qkv, Br, Bc, causal):
    q, k, v = _t(*qkv, grad=True)
    o = lab.flash_attention_torch(
        q, k, v, causal=causal, block_q=Br, block_k=Bc, variant=variant
    )
    do = torch.tensor(np.random.default_rng(0).standard_normal(tuple(o.shape)))
    got = torch.autograd.grad(o, (q, k, v), do)
    q2, k2, v2 = _t(*qkv, grad=True)
    want = torch.autograd.grad(
        _reference_autograd(q2, k2, v2, causal), (q2, k2, v2), do
    )
    for name, g, w in zip("qkv", got, want):
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10, msg=f"d{name}")


@pytest.mark.parametrize("causal", [False, True])
@VARIANTS
def test_gradients_in_float32_within_1e_2(causal, variant):
    rng = np.random.default_rng(2)
    qkv = [
        rng.standard_normal((1, 4, 100, 16)),
        rng.standard_normal((1, 2, 77, 16)),
        rng.standard_normal((1, 2, 77, 16)),
    ]
    q, k, v = _t(*qkv, dtype=torch.float32, grad=True)
    o = lab.flash_attention_torch(
        q, k, v, causal=causal, block_q=32, block_k=16, variant=variant
    )
    do = torch.ones_like(o)
    got = torch.autograd.grad(o, (q, k, v), do)
    q2, k2, v2 = _t(*qkv, grad=True)
    want = torch.autograd.grad(
        _reference_autograd(q2, k2, v2, causal), (q2, k2, v2), do.double()
    )
    for g, w in zip(got, want):
        assert g.dtype == torch.float32
        assert (g.double() - w).abs().max() < 1e-2
        assert (g.double() - w).abs().max() < 1e-4  # in practice far inside the bound


@VARIANTS
def test_gradcheck_float64_with_causal_gqa(variant):
    rng = np.random.default_rng(3)
    q, k, v = _t(
        rng.standard_normal((1, 2, 5, 3)),
        rng.standard_normal((1, 1, 7, 3)),
        rng.standard_normal((1, 1, 7, 2)),
        grad=True,
    )
    apply = lambda a, b, c: lab.FlashAttention.apply(
        a, b, c, True, None, 2, 3, None, None, None, None, variant
    )
    assert torch.autograd.gradcheck(apply, (q, k, v))


@VARIANTS
def test_forward_saves_q_k_v_o_and_lse_only(variant):
    rng = np.random.default_rng(4)
    q, k, v = _t(
        rng.standard_normal((2, 3, 9, 4)),
        rng.standard_normal((2, 3, 11, 4)),
        rng.standard_normal((2, 3, 11, 5)),
        grad=True,
    )
    o = lab.FlashAttention.apply(q, k, v, True, *[None] * 7, variant)
    saved = o.grad_fn.saved_tensors
    assert len(saved) == 5
    assert saved[0] is q or torch.equal(saved[0], q)
    assert torch.equal(saved[3], o.detach())
    lse = saved[4]
    _, lse_ref = lab.attention_reference(
        q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), causal=True
    )
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse.numpy()[fin], lse_ref[fin], rtol=1e-12)
    assert (
        sum(tuple(t.shape) == tuple(q.shape[:-1]) for t in saved) == 1
    )  # lse, and no other (..., N) tensor
    assert not any(t.shape[-2:] == (9, 11) for t in saved)  # no N×M matrix


@VARIANTS
def test_return_lse_with_grad_gives_the_forwards_lse_as_an_output(variant):
    # lse is the Function's second output, marked non-differentiable: not read back from autograd's saved tensors
    rng = np.random.default_rng(5)
    q, k, v = _t(*rng.standard_normal((3, 1, 2, 6, 4)), grad=True)
    o, lse = lab.flash_attention_torch(
        q, k, v, causal=True, return_lse=True, variant=variant
    )
    assert o.requires_grad and not lse.requires_grad
    assert torch.equal(lse, o.grad_fn.saved_tensors[4])
    o_ng, lse_ng = lab.flash_attention_torch(
        *(t.detach() for t in (q, k, v)), causal=True, return_lse=True, variant=variant
    )
    assert torch.equal(o.detach(), o_ng) and torch.equal(lse, lse_ng)
    (o.sum() + lse.sum()).backward()  # lse adds nothing to the gradients
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    lab.flash_attention_torch(q, k, v, causal=True, variant=variant).sum().backward()
    assert all(torch.equal(a, t.grad) for a, t in zip(grads, (q, k, v)))


@VARIANTS
def test_fully_masked_rows_give_zero_and_minus_inf(variant):
    # N > M with causal: query rows i < N - M see no key at all.
    q, k, v = (
        torch.randn(1, 1, n, 8, dtype=torch.float64, requires_grad=True)
        for n in (6, 2, 2)
    )
    o, lse = lab.flash_attention_torch(
        q, k, v, causal=True, return_lse=True, variant=variant
    )
    assert torch.isfinite(o).all() and (o[0, 0, :4] == 0).all()
    assert torch.isneginf(lse[0, 0, :4]).all() and torch.isfinite(lse[0, 0, 4:]).all()
    o.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@VARIANTS
def test_inputs_unchanged_and_naive_matches(variant):
    rng = np.random.default_rng(5)
    q, k, v = _t(
        rng.standard_normal((2, 4, 33, 8)),
        rng.standard_normal((2, 2, 40, 8)),
        rng.standard_normal((2, 2, 40, 8)),
    )
    before = [t.clone() for t in (q, k, v)]
    o = lab.flash_attention_torch(
        q, k, v, causal=True, block_q=8, block_k=8, variant=variant
    )
    o_naive = lab.attention_torch_naive(q, k, v, causal=True)
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b)
    torch.testing.assert_close(o, o_naive, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        o_naive,
        torch.tensor(
            lab.attention_reference(q.numpy(), k.numpy(), v.numpy(), causal=True)[0]
        ),
    )


def _scores_qkv(first, later, *, N=5, Bc=4, d=8):
    """q, k, v (float64) whose scores are `first` on the first key block of Bc keys and `later` on the next."""
    q = torch.zeros(1, 1, N, d, dtype=torch.float64)
    q[..., 0] = math.sqrt(d)  # scale·q·k = k[..., 0]
    k = (
        torch.randn(
            1,
            1,
            2 * Bc,
            d,
            dtype=torch.float64,
            generator=torch.Generator().manual_seed(6),
        )
        * 1e-3
    )
    k[..., 0] = (
        torch.tensor([first] * Bc + [later] * Bc, dtype=torch.float64) + k[..., 0]
    )
    v = torch.randn(
        1, 1, 2 * Bc, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7)
    )
    return q, k, v


@pytest.mark.parametrize(
    "first, later, rescaled, recomputed",
    [
        (0.0, 2.0, 0, 0),  # the second block's row sums stay under e^τ: nothing moves
        (
            0.0,
            20.0,
            3,
            0,
        ),  # they reach 4·e^20: those rows move their reference, one multiplication
        (0.0, 1000.0, 0, 3),  # exp(1000) overflows: the tile is recomputed exactly
        (
            -1000.0,
            -1000.5,
            0,
            0,
        ),  # exp against m = 0 would underflow: the first block sets m = its rowmax
        (-1000.0, 500.0, 0, 3),
        (700.0, -700.0, 0, 0),
    ],
)
@VARIANTS
def test_forward_exact_wherever_the_reference_moves(
    first, later, rescaled, recomputed, variant
):
    q, k, v = _scores_qkv(first, later)
    o_ref, lse_ref = lab.attention_reference(q.numpy(), k.numpy(), v.numpy())
    stats = {}
    o, lse = lab.flash_attention_torch_forward(
        q, k, v, block_q=2, block_k=4, stats=stats, variant=variant
    )
    if variant == "fa2":  # the running max moves wherever it grows
        rescaled, recomputed = (3 if later > first else 0), 0
    assert stats == {
        "tiles": 6,
        "rescaled": rescaled,
        "recomputed": recomputed,
    }  # 3 query blocks × 2 key blocks
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    np.testing.assert_allclose(o.numpy(), o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), lse_ref, rtol=1e-12)


def test_each_step_keeps_what_m_l_acc_represent():
    # l·e^m and acc·e^m are the sums the state stands for: a step adds its tile's share, moving m changes nothing.
    from lab.kernels.rung4_torch_fa2 import fa2_step as _fa2_step
    from lab.kernels.rung5_torch_lazy import rescale_rows as _rescale_rows

    g = torch.Generator().manual_seed(8)
    m = torch.randn(2, 3, dtype=torch.float64, generator=g)
    l = torch.rand(2, 3, dtype=torch.float64, generator=g) + 0.5
    acc = torch.randn(2, 3, 4, dtype=torch.float64, generator=g)
    v_j = torch.randn(2, 6, 4, dtype=torch.float64, generator=g)
    S = torch.randn(2, 3, 6, dtype=torch.float64, generator=g) * 3 + m.unsqueeze(-1)
    S[0, 0] = -math.inf  # a row with every key masked
    m1, l1, acc1 = m.clone(), l.clone(), acc.clone()
    _fa2_step(lambda: S.clone(), m1, l1, acc1, v_j)
    assert (m1 >= m).all() and m1[0, 0] == m[0, 0]
    torch.testing.assert_close(
        m1, torch.maximum(m, S.amax(-1))
    )  # m' = max(m, rowmax S): a stored score
    torch.testing.assert_close(l1 * m1.exp(), l * m.exp() + S.exp().sum(-1))
    torch.testing.assert_close(
        acc1 * m1.exp().unsqueeze(-1), acc * m.exp().unsqueeze(-1) + S.exp() @ v_j
    )
    # _rescale_rows on p = exp(S - m): rows summing above the bound end with sum 1, the rest untouched
    p = (S - m.unsqueeze(-1)).exp()
    r = p.sum(-1)
    bound = float(r.median())
    m3, l3, acc3, p3 = m.clone(), l.clone(), acc.clone(), p.clone()
    after = _rescale_rows(p3, r, m3, l3, acc3, bound)
    big = r > bound
    torch.testing.assert_close(after, torch.where(big, 1.0, r).to(r.dtype))
    torch.testing.assert_close(p3, (S - m3.unsqueeze(-1)).exp())
    assert torch.equal(m3[~big], m[~big]) and (m3[big] > m[big]).all()
    torch.testing.assert_close(l3 * m3.exp(), l * m.exp())
    torch.testing.assert_close(
        acc3 * m3.exp().unsqueeze(-1), acc * m.exp().unsqueeze(-1)
    )
    # a row that has seen no key holds m = the lowest float and l = acc = 0: the step sets m = rowmax S
    lowest = torch.finfo(torch.float64).min
    m2, l2, acc2 = (
        torch.full((2, 3), lowest, dtype=torch.float64),
        torch.zeros_like(l),
        torch.zeros_like(acc),
    )
    _fa2_step(lambda: S.clone(), m2, l2, acc2, v_j)
    torch.testing.assert_close(
        m2, S.amax(-1).masked_fill(S.amax(-1) == -math.inf, lowest)
    )
    assert (
        l2[0, 0] == 0 and (acc2[0, 0] == 0).all()
    )  # still nothing seen: o = 0, lse = -inf
    torch.testing.assert_close(l2[1], (S[1] - m2[1].unsqueeze(-1)).exp().sum(-1))


def test_default_blocks_per_device():
    assert lab.torch_default_blocks("cpu", 4096, 4096, rows=8) == (256, 512)
    assert lab.torch_default_blocks("cpu", 8192, 8192, rows=1) == (
        1024,
        512,
    )  # Br capped: a 2 MiB tile
    assert lab.torch_default_blocks("cuda", 4096, 4096, rows=8) == (2048, 1024)
    assert lab.torch_default_blocks("cpu", 10, 3, rows=1) == (
        10,
        3,
    )  # never larger than N, M
    Br, Bc = lab.torch_default_blocks("cpu", 8192, 8192, rows=1)
    assert Br * Bc * 4 <= 4 * 2**20


@pytest.mark.parametrize(
    "call, err, words",
    [
        (
            lambda q: lab.flash_attention_torch(q.numpy(), q, q),
            TypeError,
            "q must be a torch.Tensor",
        ),
        (
            lambda q: lab.flash_attention_torch(q.long(), q.long(), q.long()),
            TypeError,
            "floating dtype",
        ),
        (
            lambda q: lab.flash_attention_torch(q, q.float(), q),
            TypeError,
            "share one dtype",
        ),
        (
            lambda q: lab.flash_attention_torch(q, q[..., :3], q),
            ValueError,
            "last dim d",
        ),
        (
            lambda q: lab.flash_attention_torch(q, q[:, :3], q[:, :3]),
            ValueError,
            "multiple",
        ),
        (
            lambda q: lab.flash_attention_torch(q, q, q, block_q=0),
            ValueError,
            "block_q",
        ),
        (
            lambda q: lab.flash_attention_torch(q, q, q, block_k=2.5),
            TypeError,
            "block_k",
        ),
        (lambda q: lab.flash_attention_torch(q, q, q, scale=-1.0), ValueError, "scale"),
        (
            lambda q: lab.flash_attention_torch_forward(q, q, q, stats=[]),
            TypeError,
            "stats",
        ),
        (
            lambda q: lab.flash_attention_torch_backward(
                q, q, q, q, q[..., 0], q[..., :2]
            ),
            ValueError,
            "do",
        ),
        (
            lambda q: lab.flash_attention_torch_backward(q, q, q, q, q[..., :1], q),
            ValueError,
            "lse",
        ),
        (
            lambda q: lab.attention_torch_naive(q, q.float(), q),
            TypeError,
            "share one dtype",
        ),
    ],
)
def test_bad_input_raises_clear_errors(call, err, words):
    q = torch.zeros(1, 4, 5, 4, dtype=torch.float64)
    with pytest.raises(err, match=words):
        call(q)


def _far_apart_scores(seed, level=1e4):
    """Scores near -level in the first key block, then blocks near +level that move the reference (block size 4)."""
    g = torch.Generator().manual_seed(seed)
    blocks = [
        -level + torch.rand(4, generator=g),
        level + 0.1 * torch.rand(4, generator=g),
    ]
    blocks += [level + 7.9 + 0.1 * torch.rand(4, generator=g) for _ in range(2)]
    q = torch.ones(1, 1, 8, 1)
    k = torch.cat(blocks).reshape(1, 1, 16, 1)
    v = torch.randn(1, 1, 16, 4, generator=g)
    return q, k, v


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", [1e2, 1e4])
@VARIANTS
def test_moving_the_reference_keeps_flash_attn_accuracy_rule(seed, level, variant):
    """flash-attn's rule: the kernel's error against float64 is at most twice a same-dtype reference's (plus a few
    float32 units of the output, as these tiny problems can leave the reference luckily exact)."""
    q, k, v = _far_apart_scores(seed, level)
    ref = torch.tensor(
        lab.attention_reference(
            q.double().numpy(), k.double().numpy(), v.double().numpy(), scale=1.0
        )[0]
    )
    same_dtype = (torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v).double()
    stats = {}
    o, _ = lab.flash_attention_torch_forward(
        q, k, v, scale=1.0, block_q=4, block_k=4, stats=stats, variant=variant
    )
    assert variant == "fa2" or stats["rescaled"] >= 1  # the lazy reference did move
    slack = 4 * torch.finfo(torch.float32).eps * ref.abs().max()
    assert (o.double() - ref).abs().max() <= 2 * (same_dtype - ref).abs().max() + slack


def test_variant_is_checked_before_any_work_and_none_is_the_default():
    q = torch.zeros(1, 2, 5, 4, dtype=torch.float64)
    calls = (
        lambda **kw: lab.flash_attention_torch(q, q, q, **kw),
        lambda **kw: lab.flash_attention_torch_forward(q, q, q, **kw),
        lambda **kw: lab.FlashAttention.apply(
            q, q, q, False, *[None] * 7, kw["variant"]
        ),
    )
    for call in calls:
        for bad in ("textbook", "FA2", 2):
            with pytest.raises(ValueError, match="variant"):
                call(variant=bad)
    with pytest.raises(ValueError, match="variant"):  # before the mods are even called
        lab.flash_attention_torch(q, q, q, mask_mod=lambda *a: 1 / 0, variant="fast")
    assert lab.torch_kernels.DEFAULT_VARIANT in lab.torch_kernels.VARIANTS
    q, k, v = _t(*np.random.default_rng(9).standard_normal((3, 1, 2, 20, 4)))
    default = lab.flash_attention_torch_forward(q, k, v, block_q=8, block_k=8)
    named = lab.flash_attention_torch_forward(
        q, k, v, block_q=8, block_k=8, variant=lab.torch_kernels.DEFAULT_VARIANT
    )
    assert all(torch.equal(a, b) for a, b in zip(default, named))


@VARIANTS
@settings(max_examples=15, deadline=None)
@given(
    attention_inputs(max_len=33),
    st.sampled_from(CASES),
    st.one_of(st.none(), blocks),
    st.one_of(st.none(), blocks),
    seeds,
)
def test_both_rungs_honour_masks_and_score_mods(variant, qkv, case, Br, Bc, seed):
    """tests/test_masks.py runs the default rung on every mask case; this runs both."""
    q, k, v = qkv
    kw = _mods(case, q, k, np.random.default_rng(seed))
    o_ref, lse_ref = lab.attention_reference(q, k, v, **kw)
    stats = {}
    o, lse = lab.flash_attention_torch(
        *_t(q, k, v),
        block_q=Br,
        block_k=Bc,
        return_lse=True,
        stats=stats,
        variant=variant,
        **kw,
    )
    _close(o.numpy(), lse.numpy(), o_ref, lse_ref)
    Br, Bc = lab.torch_kernels._blocks(torch.tensor(q), torch.tensor(k), Br, Bc, 1)
    assert stats["tiles"] == _want_tiles(
        kw, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]), Br, Bc
    )


@VARIANTS
def test_a_row_meeting_its_first_key_late_in_float32(variant):
    """ALiBi at slope 8 puts a window's kept scores near -100, where e^{s - m} underflows float32 for a placeholder m;
    large scores of one head make the lazy reference move and overflow."""
    rng = np.random.default_rng(3)
    N = 96
    q, k, v = (rng.standard_normal((1, 2, N, 16)).astype(np.float32) for _ in range(3))
    q[:, 1] *= 30
    kw = dict(
        mask_mod=lab.and_masks(
            lab.sliding_window(20, 0, N, N), lambda b, h, i, j: (i - j) >= 12
        ),
        score_mod=lab.alibi([8.0, 6.0], N, N),
    )
    o_ref, lse_ref = lab.attention_reference(q, k, v, **kw)
    o, lse = lab.flash_attention_torch(
        *_t(q, k, v, dtype=torch.float32),
        block_q=8,
        block_k=8,
        return_lse=True,
        variant=variant,
        **kw,
    )
    assert np.abs(o.numpy() - o_ref).max() < 1e-5
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isfinite(lse.numpy()), fin) and np.abs(
        lse.numpy()[fin] - lse_ref[fin]
    ).max() < 1e-4 * max(1, np.abs(lse_ref[fin]).max())
