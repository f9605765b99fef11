"""Every error in API.md is raised before any work, with a message naming the argument."""

import numpy as np
import pytest

import lab

rng = np.random.default_rng(0)
Q, K, V = (
    rng.standard_normal((2, 4, 8)),
    rng.standard_normal((2, 5, 8)),
    rng.standard_normal((2, 5, 3)),
)
KERNELS = [
    lambda *a, **kw: lab.attention_reference(*a, **kw),
    lambda *a, **kw: lab.attention_naive(*a, **kw),
    lambda *a, **kw: lab.flash_attention_numpy(*a, **kw),
    lambda *a, **kw: lab.flash_attention_numpy(*a, variant="fa1", **kw),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "args, match",
    [
        ((Q, K[..., :7], V), "q and k must share the last dim"),
        ((Q, K, V[:, :4]), "k and v must agree"),
        ((Q[0], K, V), "same rank"),
        ((np.ones(3), np.ones(3), np.ones(3)), "q must have shape"),
        (
            (Q[None].repeat(3, 1), K[None].repeat(2, 1), V[None].repeat(2, 1)),
            "multiple of the key/value heads",
        ),
        ((Q[None], K[None].repeat(2, 0), V[None].repeat(2, 0)), "batch dims"),
    ],
)
def test_shape_errors(kernel, args, match):
    with pytest.raises(ValueError, match=match):
        kernel(*args)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("which", [0, 1, 2])
def test_non_floating_dtype_is_a_type_error(kernel, which):
    args = [Q, K, V]
    args[which] = args[which].astype(np.int32)
    with pytest.raises(TypeError, match="qkv"[which] + " must have a floating dtype"):
        kernel(*args)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_nan_or_inf_inputs_are_rejected(kernel, bad, which):
    args = [a.copy() for a in (Q, K, V)]
    args[which][0, 0, 0] = bad
    with pytest.raises(ValueError, match="qkv"[which] + " must be finite"):
        kernel(*args)


@pytest.mark.parametrize("name", ["block_q", "block_k"])
@pytest.mark.parametrize("value", [0, -3])
def test_block_sizes_below_one(name, value):
    with pytest.raises(ValueError, match=name):
        lab.flash_attention_numpy(Q, K, V, **{name: value})


def test_unknown_variant_and_formats():
    with pytest.raises(ValueError, match="variant"):
        lab.flash_attention_numpy(Q, K, V, variant="fa3")
    with pytest.raises(ValueError, match="p_format"):
        lab.flash_attention_numpy(Q, K, V, p_format="fp4")
    with pytest.raises(ValueError, match="fmt"):
        lab.round_to(np.ones(3, np.float32), "int8")


def test_errors_come_before_work():
    with lab.trace.record() as rec, pytest.raises(ValueError):
        lab.flash_attention_numpy(Q, K, V, block_q=0)
    assert rec.total == 0


def test_softmax_and_state_errors():
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        lab.softmax_safe(np.arange(4))
    with pytest.raises(ValueError, match="block"):
        lab.softmax_online(np.ones(4), block=0)
    with pytest.raises(ValueError, match="axis"):
        lab.softmax_safe(np.ones(4), axis=3)
    with pytest.raises(ValueError, match="s has 3 keys"):
        lab.partial_state(np.ones((2, 3)), np.ones((4, 2)))
    a = lab.partial_state(np.ones((2, 3)), np.ones((3, 2)))
    b = lab.partial_state(np.ones((3, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="same shapes"):
        lab.merge_states(a, b)


def test_merge_states_checks_b_as_it_checks_a():
    a = lab.partial_state(np.ones((2, 3)), np.ones((3, 2)))
    bad_l = lab.SoftmaxState(
        a.m, np.ones((1,)), a.acc
    )  # would broadcast into a wrong l
    for args, name in (((a, bad_l), "b"), ((bad_l, a), "a")):
        with pytest.raises(ValueError, match=f"^{name} must have m, l shaped"):
            lab.merge_states(*args)
    bad_acc = lab.SoftmaxState(a.m, a.l, np.ones((3, 2)))
    with pytest.raises(ValueError, match="^b must have m, l shaped"):
        lab.merge_states(a, bad_acc)


CAUSAL_TAKERS = KERNELS + [
    lambda *a, **kw: lab.one_pass_attention(*a, **kw),
    lambda *a, **kw: lab.attention_backward(*a, a[0], **kw),
    lambda *a, **kw: lab.flash_decoding(*a, splits=2, **kw),
    lambda *a, **kw: lab.flash_attention_torch(
        *(__import__("torch").from_numpy(x) for x in a), **kw
    ),
    lambda *a, **kw: lab.FlashAttention.apply(
        *(__import__("torch").from_numpy(x) for x in a), kw["causal"]
    ),
    lambda *a, **kw: lab.tile_counts(4, 5, 2, 2, **kw),
    lambda *a, **kw: lab.standard_attention_torch(
        *(__import__("torch").from_numpy(x) for x in a), **kw
    ),
]


@pytest.mark.parametrize("kernel", CAUSAL_TAKERS)
@pytest.mark.parametrize("causal", ["no", 1, None])
def test_causal_must_be_a_bool(kernel, causal):
    with pytest.raises(TypeError, match="causal must be a bool"):
        kernel(Q, K, V[..., :8], causal=causal)


def test_numpy_bool_is_a_bool():
    o, _ = lab.flash_attention_numpy(Q, K, V, causal=np.bool_(True))
    assert np.allclose(o, lab.attention_reference(Q, K, V, causal=True)[0])


def test_double_backward_raises_instead_of_returning_wrong_gradients():
    import torch

    q, k, v = (torch.tensor(x, requires_grad=True) for x in (Q, K, V))
    g = torch.ones(
        2, 4, 3, dtype=torch.float64, requires_grad=True
    )  # a gradient that itself needs grad
    for fn in (
        lambda: lab.FlashAttention.apply(q, k, v, False),
        lambda: lab.NumpyFlashAttention.apply(q, k, v),
    ):
        (dq,) = torch.autograd.grad(fn(), q, grad_outputs=g, create_graph=True)
        with pytest.raises(RuntimeError, match="differentiate twice"):
            dq.sum().backward()


def test_torch_inputs_have_one_check():
    import torch

    from lab.validate import check_qkv_tensors

    q = torch.from_numpy(Q)
    for args, error, match in [
        ((Q, q, q), TypeError, "q must be a torch.Tensor"),
        (
            (q.long(), q.long(), q.long()),
            TypeError,
            "q must have a floating dtype, got torch.int64",
        ),
        ((q, q.float(), q), TypeError, "share one dtype"),
        ((q, q[..., :3], q), ValueError, "q and k must share the last dim"),
    ]:
        with pytest.raises(error, match=match):
            check_qkv_tensors(*args)
        with pytest.raises(error, match=match):
            lab.standard_attention_torch(*args)
    with pytest.raises(
        TypeError,
        match=r"k must have a floating dtype \(float16, float32\) for the kernel, got torch.float64",
    ):
        check_qkv_tensors(
            q.half(),
            q,
            q,
            dtypes=(torch.float16, torch.float32),
            kernel="for the kernel",
        )
    assert check_qkv_tensors(q[None].repeat(1, 2, 1, 1), q[None], q[None]) == 2
