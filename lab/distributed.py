"""Sequence-parallel attention across real processes: the merge of partial states over `torch.distributed`.

`sequence_parallel_attention` starts `world_size` worker processes on this machine (torch.multiprocessing,
gloo backend on 127.0.0.1 at a free port). Rank r holds only its slice of the keys and values,
`k[..., j0:j1, :]` and `v[..., j0:j1, :]`, and computes its partial state `(m, l, acc)` of every query
(`lab.chunk_state`); the states are all-gathered and merged (`lab.reduce_states`), and rank 0 hands
`(o, lse)` back. The function starts and stops the workers itself and cleans up on error or timeout.

The worker lives here, not in a notebook: a new process imports it by name. With the default start method
"forkserver", one server process imports torch and `lab.distributed` once, and every worker is forked from
it; the server stays up for later calls and exits with this process. "spawn" starts each worker as a fresh
interpreter that imports everything itself (a few seconds each on a small machine).

Taught in: notebooks/04_merge_order.ipynb
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from datetime import timedelta

import numpy as np

from .merge import ORDERS, chunk_bounds, chunk_state, reduce_states
from .states import SoftmaxState, finalize
from .validate import check_choice, check_qkv

__all__ = ["sequence_parallel_attention", "free_port", "WORLD_SIZES", "START_METHODS"]

WORLD_SIZES = (2, 3, 4)
START_METHODS = ("forkserver", "spawn")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that the operating system reports free right now (bind to port 0, read the port back).

    Taught in: notebooks/04_merge_order.ipynb
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _preload_forkserver() -> None:
    """Have the forkserver (if not started yet) import this module, so forked workers start without imports."""
    import multiprocessing
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is None:
        multiprocessing.get_context("forkserver").set_forkserver_preload([__name__])


def _worker(
    rank, world_size, port, slices, q, causal, scale, total, order, out_dir, timeout_s
):
    """One rank: its key/value slice -> partial state -> all_gather -> merge (rank 0 saves (o, lse))."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        j0, j1, k_r, v_r = slices[rank]  # this rank's keys j0..j1-1 only
        del slices
        st = chunk_state(q, k_r, v_r, start=j0, total=total, causal=causal, scale=scale)
        gathered = []
        for part in st:  # m, l: (..., N); acc: (..., N, dv)
            t = torch.from_numpy(np.ascontiguousarray(part))
            bucket = [torch.empty_like(t) for _ in range(world_size)]
            dist.all_gather(bucket, t)
            gathered.append([b.numpy() for b in bucket])
        states = [SoftmaxState(*(g[r] for g in gathered)) for r in range(world_size)]
        o, lse = finalize(reduce_states(states, order))
        m_local = np.asarray(st.m)
        info = np.array(
            [
                rank,
                os.getpid(),
                j0,
                j1,
                float(m_local.max()) if m_local.size else -np.inf,
            ]
        )
        infos = [torch.empty(5, dtype=torch.float64) for _ in range(world_size)]
        dist.all_gather(infos, torch.from_numpy(info.astype(np.float64)))
        if rank == 0:
            np.savez(
                os.path.join(out_dir, "result.npz"),
                o=o,
                lse=lse,
                info=np.stack([i.numpy() for i in infos]),
            )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def sequence_parallel_attention(
    q,
    k,
    v,
    *,
    world_size: int = 2,
    causal: bool = False,
    scale=None,
    order: str = "tree",
    timeout_s: float = 60.0,
    return_ranks: bool = False,
    start_method: str = "forkserver",
):
    """Attention with the keys split across `world_size` processes: rank r computes $(m_r, l_r, acc_r)$ on its slice, the states are gathered and merged, $o = acc / l$.

    Returns `(o, lse)` equal to `attention_reference` up to rounding (`o` in the input dtype); with
    `return_ranks=True` also a list of dicts, one per rank: `rank`, `pid`, `keys` (j0, j1) and the local max `m`.
    Starts and joins the workers itself; a worker's error is re-raised here, and workers still alive after
    `timeout_s` seconds are terminated. `start_method` is "forkserver" (workers forked from a server that
    imported torch and lab once) or "spawn" (each worker a fresh interpreter).
    Taught in: notebooks/04_merge_order.ipynb
    """
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)):
        raise TypeError(
            f"world_size must be an integer in {WORLD_SIZES}, got {world_size!r}"
        )
    if world_size not in WORLD_SIZES:
        raise ValueError(f"world_size must be one of {WORLD_SIZES}, got {world_size}")
    check_choice(order, ORDERS, "order")
    check_choice(start_method, START_METHODS, "start_method")
    timeout_s = float(timeout_s)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    q, k, v, _, scale = check_qkv(q, k, v, scale, causal)
    import torch.multiprocessing as mp

    if start_method == "forkserver":
        _preload_forkserver()
    M = k.shape[-2]
    slices = [
        (
            j0,
            j1,
            np.ascontiguousarray(k[..., j0:j1, :]),
            np.ascontiguousarray(v[..., j0:j1, :]),
        )
        for j0, j1 in chunk_bounds(M, int(world_size))
    ]
    with tempfile.TemporaryDirectory(prefix="lab-sp-") as out_dir:
        ctx = mp.start_processes(
            _worker,
            args=(
                int(world_size),
                free_port(),
                slices,
                q,
                bool(causal),
                scale,
                M,
                order,
                out_dir,
                timeout_s,
            ),
            nprocs=int(world_size),
            join=False,
            start_method=start_method,
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=0.1):  # re-raises a worker's exception
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"sequence_parallel_attention: workers still running after {timeout_s:.0f} s"
                    )
        finally:
            for p in ctx.processes:  # clean up on error or timeout
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
        with np.load(os.path.join(out_dir, "result.npz")) as f:
            o, lse, info = f["o"], f["lse"], f["info"]
    o = o.astype(np.result_type(q, k, v), copy=False)
    if not return_ranks:
        return o, lse
    ranks = [
        {
            "rank": int(r[0]),
            "pid": int(r[1]),
            "keys": (int(r[2]), int(r[3])),
            "m": float(r[4]),
        }
        for r in info
    ]
    return o, lse, ranks
