"""Sequence-parallel attention over torch.distributed (gloo): one small run, and the argument checks."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lab


def test_sequence_parallel_matches_reference_and_each_rank_holds_a_slice():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 5, 8))  # (B, Hq, N, d)
    k = rng.standard_normal(
        (1, 2, 37, 8)
    )  # (B, Hkv, M, d): GQA, 2 query heads per kv head
    v = rng.standard_normal((1, 2, 37, 3))  # (B, Hkv, M, dv)
    o_ref, lse_ref = lab.attention_reference(q, k, v, causal=True)
    o, lse, ranks = lab.sequence_parallel_attention(
        q, k, v, world_size=2, causal=True, order="shuffled", return_ranks=True
    )
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-12, atol=1e-12)
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["keys"] for r in ranks] == lab.chunk_bounds(37, 2)
    pids = {r["pid"] for r in ranks}
    assert len(pids) == 2 and os.getpid() not in pids
    s = np.einsum("bhnd,bhmd->bhnm", q, np.repeat(k, 2, axis=1)) / np.sqrt(8)
    for r in ranks:
        j0, j1 = r["keys"]
        visible = lab.causal_mask(5, 37)[:, j0:j1]
        assert r["m"] == pytest.approx(np.where(visible, s[..., j0:j1], -np.inf).max())


def test_sequence_parallel_checks_arguments_before_starting_workers():
    q, k, v = np.zeros((2, 4)), np.zeros((6, 4)), np.zeros((6, 3))
    with pytest.raises(ValueError, match="world_size"):
        lab.sequence_parallel_attention(q, k, v, world_size=1)
    with pytest.raises(TypeError, match="world_size"):
        lab.sequence_parallel_attention(q, k, v, world_size=2.0)
    with pytest.raises(ValueError, match="order"):
        lab.sequence_parallel_attention(q, k, v, order="spiral")
    with pytest.raises(ValueError, match="start_method"):
        lab.sequence_parallel_attention(q, k, v, start_method="fork")
    with pytest.raises(ValueError, match="timeout_s"):
        lab.sequence_parallel_attention(q, k, v, timeout_s=0)
    with pytest.raises(ValueError, match="share the last dim"):
        lab.sequence_parallel_attention(q, k[:, :2], v)


def test_free_port_is_a_port_number():
    assert 1024 <= lab.free_port() < 65536


class _FakeProcess:
    def __init__(self):
        self.alive, self.terminated, self.joined = True, False, False

    def is_alive(self):
        return self.alive

    def terminate(self):
        self.terminated, self.alive = True, False

    def join(self, timeout=None):
        self.joined = True


class _FailingContext:
    def __init__(self):
        self.processes = [_FakeProcess(), _FakeProcess()]

    def join(self, timeout=None):
        raise RuntimeError("worker 1 failed")


def test_workers_are_stopped_when_a_worker_fails(monkeypatch):
    import torch.multiprocessing as mp

    ctx = _FailingContext()
    monkeypatch.setattr(mp, "start_processes", lambda *a, **kw: ctx)
    q, k, v = np.zeros((2, 4)), np.zeros((6, 4)), np.zeros((6, 3))
    with pytest.raises(RuntimeError, match="worker 1 failed"):
        lab.sequence_parallel_attention(q, k, v, world_size=2)
    assert all(p.terminated and p.joined for p in ctx.processes)


def test_workers_are_stopped_after_the_timeout(monkeypatch):
    import torch.multiprocessing as mp

    ctx = _FailingContext()
    ctx.join = lambda timeout=None: False  # never finishes
    monkeypatch.setattr(mp, "start_processes", lambda *a, **kw: ctx)
    q, k, v = np.zeros((2, 4)), np.zeros((6, 4)), np.zeros((6, 3))
    with pytest.raises(TimeoutError, match="still running"):
        lab.sequence_parallel_attention(q, k, v, world_size=2, timeout_s=0.3)
    assert all(p.terminated for p in ctx.processes)
