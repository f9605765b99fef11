"""The Triton kernel against the float64 oracle: through the interpreter on CPU tensors (tiny shapes), and
compiled to a GPU binary without a GPU (the CUDA path at least builds)."""

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import lab

USABLE, WHY = lab.triton_status()
needs_triton = pytest.mark.skipif(not USABLE, reason=WHY)

SHAPES = [  # (B, Hq, Hkv, N, M, d): the interpreter runs 0.1-1 GFLOP/s, so N stays in {1, 17, 64, 200}
    (1, 1, 1, 1, 1, 16),
    (2, 2, 1, 17, 17, 16),
    (1, 2, 2, 64, 64, 64),
    (1, 1, 1, 200, 200, 64),
    (1, 4, 2, 17, 64, 16),  # N < M, grouped heads
    (1, 2, 1, 64, 17, 64),  # N > M: causal rows with no visible key
]
TOL = {torch.float32: 2e-6, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _inputs(B, Hq, Hkv, N, M, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = torch.tensor(rng.standard_normal((B, Hq, N, d))).to(dtype)
    k = torch.tensor(rng.standard_normal((B, Hkv, M, d))).to(dtype)
    v = torch.tensor(rng.standard_normal((B, Hkv, M, d))).to(dtype)
    return q, k, v


@needs_triton
@pytest.mark.parametrize(
    "shape", SHAPES, ids=lambda s: "B{}-Hq{}-Hkv{}-N{}-M{}-d{}".format(*s)
)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_interpreter_matches_reference(shape, causal, dtype):
    q, k, v = _inputs(*shape, dtype)
    o_ref, lse_ref = lab.attention_reference(
        *(a.double().numpy() for a in (q, k, v)), causal=causal
    )
    o, lse = lab.flash_attention_triton(q, k, v, causal=causal, return_lse=True)
    assert (
        o.dtype == dtype
        and lse.dtype == torch.float32
        and tuple(o.shape) == o_ref.shape
    )
    assert np.abs(o.double().numpy() - o_ref).max() < TOL[dtype]
    np.testing.assert_array_equal(np.isneginf(lse.numpy()), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse.numpy()[fin], lse_ref[fin], rtol=1e-5, atol=1e-5)
    if causal and shape[3] > shape[4]:
        assert (
            o[..., : shape[3] - shape[4], :] == 0
        ).all()  # rows with no visible key give 0


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16_in_the_interpreter_is_correct(causal):
    q, k, v = _inputs(1, 2, 1, 64, 64, 64, torch.bfloat16, seed=1)
    o_ref, _ = lab.attention_reference(
        *(a.double().numpy() for a in (q, k, v)), causal=causal
    )
    o = lab.flash_attention_triton(q, k, v, causal=causal, block_q=16, block_k=32)
    assert o.dtype == torch.bfloat16
    assert np.abs(o.double().numpy() - o_ref).max() < TOL[torch.bfloat16]


@needs_triton
def test_block_sizes_and_scale_agree_with_the_torch_kernel():
    q, k, v = _inputs(1, 2, 2, 64, 64, 16, torch.float32, seed=2)
    o_torch = lab.flash_attention_torch(q, k, v, causal=True, scale=0.3)
    for Br, Bc in ((16, 16), (32, 64), (128, 16)):
        o = lab.flash_attention_triton(
            q, k, v, causal=True, scale=0.3, block_q=Br, block_k=Bc
        )
        assert (o - o_torch).abs().max() < 2e-6


@needs_triton
def test_inputs_unchanged_and_2d_inputs():
    q, k, v = _inputs(1, 1, 1, 17, 17, 16, torch.float32, seed=3)
    before = [t.clone() for t in (q, k, v)]
    o = lab.flash_attention_triton(q[0, 0], k[0, 0], v[0, 0])
    assert tuple(o.shape) == (17, 16)
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b)
    o_ref, _ = lab.attention_reference(
        q[0, 0].numpy(), k[0, 0].numpy(), v[0, 0].numpy()
    )
    assert np.abs(o.numpy() - o_ref).max() < 2e-6


@needs_triton
@pytest.mark.parametrize(
    "call, err, words",
    [
        (
            lambda q: lab.flash_attention_triton(q.numpy(), q, q),
            TypeError,
            "torch.Tensor",
        ),
        (
            lambda q: lab.flash_attention_triton(q.double(), q.double(), q.double()),
            TypeError,
            "float16, bfloat16 or float32",
        ),
        (
            lambda q: lab.flash_attention_triton(q, q.half(), q),
            TypeError,
            "share one dtype",
        ),
        (
            lambda q: lab.flash_attention_triton(q, q[:, :3], q[:, :3]),
            ValueError,
            "multiple",
        ),
        (
            lambda q: lab.flash_attention_triton(q, q, q, block_q=24),
            ValueError,
            "power of two",
        ),
        (
            lambda q: lab.flash_attention_triton(q, q, q, block_k=8),
            ValueError,
            "block_k",
        ),
        (lambda q: lab.flash_attention_triton(q, q, q, scale=0.0), ValueError, "scale"),
    ],
)
def test_bad_input_raises_clear_errors(call, err, words):
    q = torch.zeros(1, 4, 5, 16)
    with pytest.raises(err, match=words):
        call(q)


_COMPILE = """
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
from lab.kernels import rung6_triton as triton_kernels, rung6_triton_backward as triton_backward
# the forward at the launch settings lab.bench uses at d = 128 (128×64 tiles, 8 warps, 3 stages), then both
# backward kernels at the defaults (64×64, 4 warps)
jobs = [(triton_kernels._attn_fwd, 128, 64, 128, 8), (triton_backward._attn_bwd_dkdv, 64, 64, 64, 4),
        (triton_backward._attn_bwd_dq, 64, 64, 64, 4)]
sizes = []
for fn, Br, Bc, bd, warps in jobs:
    assert isinstance(fn, JITFunction), type(fn)               # @triton.jit, compiled: TRITON_INTERPRET is unset
    sig = {name: "i32" for name in fn.arg_names}
    sig.update({name: "*bf16" for name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV_") if name in fn.arg_names})
    sig.update({name: "*fp32" for name in ("LSE", "DEL") if name in fn.arg_names})
    sig.update({name: "fp32" for name in ("qk_scale", "scale") if name in fn.arg_names})
    const = {"CAUSAL": True, "Br": Br, "Bc": Bc, "BLOCK_D": bd, "BLOCK_DV": bd, "PRECISION": "tf32"}
    sig.update({c: "constexpr" for c in const})
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(c),): v for c, v in const.items()})
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": 3})
    except RuntimeError as exc:
        print("SKIP", exc); sys.exit(0)
    sizes.append(f"{len(k.asm['cubin'])} {k.metadata.shared}")
print("CUBIN", " ".join(sizes))
"""


@needs_triton
def test_kernel_compiles_to_a_gpu_binary_without_a_gpu():
    """The CUDA path cannot run here, but Triton can build the kernel for an sm_90 target offline.

    In a fresh process: the interpreter patches `triton.language` in the process that ran it.
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    run = subprocess.run(
        [sys.executable, "-c", _COMPILE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.startswith("SKIP"):
        pytest.skip(f"this Triton build cannot compile for CUDA offline: {run.stdout}")
    words = run.stdout.split()
    assert (
        words[0] == "CUBIN" and len(words) == 7
    )  # three kernels: cubin bytes, shared bytes
    for cubin, shared in zip(words[1::2], words[2::2]):
        assert (
            int(cubin) > 0 and 0 < int(shared) <= 228 * 1024
        )  # shared memory fits an H100/H200 SM


def test_without_triton_the_kernel_says_why(monkeypatch):
    """Where triton cannot be imported (macOS, Windows), a clear ImportError and a sentence to skip with."""
    from lab.kernels import rung6_triton as triton_kernels

    monkeypatch.setattr(triton_kernels, "_STATE", {})
    monkeypatch.setitem(
        sys.modules, "triton", None
    )  # `import triton` now raises ImportError
    usable, why = lab.triton_status()
    assert not usable and "Linux only" in why and "skipped" in why
    with pytest.raises(ImportError, match="Triton is not importable"):
        lab.flash_attention_triton(
            torch.zeros(1, 16, 16), torch.zeros(1, 16, 16), torch.zeros(1, 16, 16)
        )
    assert issubclass(lab.TritonUnavailableError, ImportError)


def _autograd_reference(q, k, v, causal):
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        N, M = q.shape[-2], k.shape[-2]
        s = s.masked_fill(
            torch.arange(M)[None, :] > torch.arange(N)[:, None] + (M - N), -math.inf
        )
    return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v


@needs_triton
@pytest.mark.parametrize(
    "shape",
    [
        (1, 2, 1, 17, 30, 16),
        (1, 2, 2, 64, 64, 64),
        (1, 4, 2, 64, 17, 16),
        (1, 1, 1, 1, 1, 16),
    ],
    ids=lambda s: "B{}-Hq{}-Hkv{}-N{}-M{}-d{}".format(*s),
)
@pytest.mark.parametrize("causal", [False, True])
def test_interpreter_gradients_match_autograd(shape, causal):
    q, k, v = (t.requires_grad_() for t in _inputs(*shape, torch.float32, seed=4))
    o = lab.flash_attention_triton(q, k, v, causal=causal, block_q=16, block_k=32)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(0))
    got = torch.autograd.grad(o, (q, k, v), do)
    q2, k2, v2 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(
        _autograd_reference(q2, k2, v2, causal), (q2, k2, v2), do.double()
    )
    for g, w in zip(got, want):
        assert g.dtype == torch.float32 and g.shape == w.shape
        assert (g.double() - w).abs().max() < 1e-4


@needs_triton
def test_return_lse_with_grad_is_a_non_differentiable_output():
    q, k, v = (
        t.requires_grad_() for t in _inputs(1, 2, 1, 32, 32, 16, torch.float32, seed=6)
    )
    o, lse = lab.flash_attention_triton(
        q, k, v, causal=True, block_q=16, block_k=16, return_lse=True
    )
    assert o.requires_grad and not lse.requires_grad
    o_ng, lse_ng = lab.flash_attention_triton(
        *(t.detach() for t in (q, k, v)),
        causal=True,
        block_q=16,
        block_k=16,
        return_lse=True,
    )
    assert torch.equal(o.detach(), o_ng) and torch.equal(lse, lse_ng)
    o.sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))


@needs_triton
def test_backward_in_low_precision_and_against_the_torch_kernel():
    q, k, v = _inputs(1, 2, 1, 64, 64, 16, torch.float32, seed=5)
    do = torch.randn(1, 2, 64, 16, generator=torch.Generator().manual_seed(1))
    o, lse = lab.flash_attention_torch(q, k, v, causal=True, return_lse=True)
    want = lab.flash_attention_torch_backward(q, k, v, o, lse, do, causal=True)
    for dtype, tol in (
        (torch.float32, 1e-5),
        (torch.float16, 2e-2),
        (torch.bfloat16, 1e-1),
    ):
        args = [t.to(dtype) for t in (q, k, v, o)] + [lse] + [do.to(dtype)]
        got = lab.flash_attention_triton_backward(
            *args, causal=True, block_q=32, block_k=16
        )
        for g, w in zip(got, want):
            assert g.dtype == dtype and (g.double() - w.double()).abs().max() < tol
    with pytest.raises(ValueError, match="lse"):
        lab.flash_attention_triton_backward(q, k, v, o, lse[..., :3], do)
    with pytest.raises(ValueError, match="do"):
        lab.flash_attention_triton_backward(q, k, v, o, lse, do[..., :3])


@pytest.mark.parametrize("causal", [False, True])
def test_tile_kinds_are_the_numpy_kernels_tiles(causal):
    """The forward's bounds compute the tiles the numpy kernel computes, unmasked where every score of the tile
    is kept (except a partial last key block, which the Triton kernel masks at M)."""
    from lab._tiles import TilePlan

    for N, M, Br, Bc in [
        (256, 256, 64, 32),
        (80, 33, 16, 32),
        (17, 64, 16, 16),
        (64, 17, 16, 16),
        (100, 100, 16, 64),
        (1, 1, 16, 16),
    ]:
        kinds = lab.triton_tile_kinds(N, M, Br, Bc, causal)
        plan = TilePlan((1, 1, N, M), Br, Bc, causal)
        assert kinds.shape == plan.computed.shape
        np.testing.assert_array_equal(kinds > 0, plan.computed)
        whole = np.arange(0, M, Bc) + Bc <= M  # key blocks that end before M
        np.testing.assert_array_equal(kinds == 2, plan.full & whole[None, :])
    with pytest.raises(ValueError, match="Br"):
        lab.triton_tile_kinds(16, 16, 0, 16)


@needs_triton
def test_the_forward_never_reads_the_keys_a_block_skips():
    """NaN in the values of the last key block: the query blocks whose rows see none of it must not read it
    (0·NaN is NaN)."""
    q, k, v = _inputs(1, 1, 1, 64, 64, 16, torch.float32, seed=6)
    v[..., 48:, :] = math.nan
    o = lab.flash_attention_triton(q, k, v, causal=True, block_q=16, block_k=16)
    assert lab.triton_tile_kinds(64, 64, 16, 16, True)[:3, 3].tolist() == [0, 0, 0]
    assert torch.isfinite(o[..., :48, :]).all() and torch.isnan(o[..., 48:, :]).all()
    o_ref, _ = lab.attention_reference(
        q[..., :48, :].numpy(),
        k[..., :48, :].numpy(),
        v[..., :48, :].numpy(),
        causal=True,
    )
    assert np.abs(o[..., :48, :].numpy() - o_ref).max() < 2e-6


def test_kernel_source_is_the_jit_function():
    src = lab.triton_kernel_source()
    assert src.startswith("@triton.jit\ndef _attn_fwd(") and "_attn_fwd_step(" in src
    step = lab.triton_kernel_source("step")
    assert step.startswith("@triton.jit\ndef _attn_fwd_step(") and "tl.exp2" in step
    for name in ("BLOCK_M", "BLOCK_N", "offs_m", "offs_n", "globals("):
        assert all(
            name not in lab.triton_kernel_source(part)
            for part in ("forward", "step", "dkdv", "dq")
        ), name
    with pytest.raises(ValueError, match="name"):
        lab.triton_kernel_source("fwd")


def test_lab_imports_without_triton():
    """Where `import triton` fails, lab still imports, and the Triton kernel says why it cannot run."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import lab\n"
        "usable, why = lab.triton_status()\n"
        "assert not usable and 'Linux only' in why, why\n"
        "assert lab.triton_kernel_source('step').startswith('@triton.jit')\n"
        "print('ok')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_notebook_08_triton_quotes_both_kernels_verbatim():
    """The side-by-side table of notebook 08_triton_kernel: every numpy snippet is in the numpy rung's loop, every Triton snippet
    in the forward kernel, as written there."""
    import inspect

    import nbformat

    from lab.kernels import rung3_numpy_fa2

    nb = nbformat.read(
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "notebooks",
            "08_triton_kernel.ipynb",
        ),
        as_version=4,
    )
    table = next(
        c.source
        for c in nb.cells
        if c.cell_type == "markdown" and "| numpy rung | Triton kernel |" in c.source
    )
    numpy_src = inspect.getsource(rung3_numpy_fa2.fa2_forward)
    triton_src = lab.triton_kernel_source("forward") + lab.triton_kernel_source("step")
    rows = [
        line.split(" | ")
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith(("| |", "| ---"))
    ]
    assert len(rows) == 8

    def code(text):  # the code's tokens, however the formatter broke its lines
        return re.sub(r",\)", ")", "".join(text.split()))

    for row in rows:
        numpy_part, triton_part = row[1], row[2]
        for snippet in re.findall(r"`([^`]+)`", numpy_part):
            assert code(snippet) in code(numpy_src), snippet
        for snippet in re.findall(r"`([^`]+)`", triton_part):
            assert code(snippet) in code(triton_src), snippet


@pytest.mark.skipif(
    not USABLE or os.environ.get("TRITON_INTERPRET", "0") != "1",
    reason="counts loads in Triton's interpreter",
)
@pytest.mark.parametrize("causal", [False, True])
def test_triton_traffic_counts_q_once_kv_per_query_block_and_stores_only_o_and_lse(
    causal,
):
    g = torch.Generator().manual_seed(0)
    N, d, B = 96, 32, 32
    q, k, v = (torch.randn(1, 1, N, d, generator=g) for _ in range(3))
    moved = lab.triton_traffic(
        lambda: lab.flash_attention_triton(
            q, k, v, causal=causal, block_q=B, block_k=B
        ),
        {"Q": q, "K": k, "V": v},
    )
    tiles = int((lab.triton_tile_kinds(N, N, B, B, causal) > 0).sum())
    assert moved["read"]["Q"] == q.nbytes and moved["read"]["other"] == 0
    assert moved["read"]["K"] == moved["read"]["V"] == tiles * B * d * 4
    assert moved["written"]["other"] == N * d * 4 + N * 4  # o and lse, nothing else
    assert moved["written"]["Q"] == moved["written"]["K"] == 0
    with pytest.raises(TypeError, match="run"):
        lab.triton_traffic(None, {})
