"""What goes wrong when timing on a shared CPU, shown: one cold call, other programs, and torch's op count.

- `time_once(fn)`: seconds of one call with no warm-up (stdlib `timeit`, `number=1`): the naive measurement
  notebook 08 sets beside `lab.time_call`.
- `other_programs(n)`: a context in which `n` busy Python processes compete for the cores, so that a timing
  taken inside it shows what a busy machine does to it.
- `count_torch_ops(fn)`: the torch operations `fn()` dispatches (`TorchDispatchMode`), by name.
- `ops_per_tile_step()`: those of one tile step of the torch loop (rung 4), by name, and `step_op_lines` to print them.
- `thread_verdicts`, `tiled_verdicts`, `exp_ulp`: the verdicts and errors notebook 08 prints, computed here.
- `exp2_without_vector_units()`: `torch.exp2` timed with torch's vector kernels and without (two child processes).

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import time
import timeit

import numpy as np

_SPIN = (
    "import time\nend = time.monotonic() + {0}\nwhile time.monotonic() < end: pass\n"
)


def time_once(fn) -> float:
    """Seconds of one `fn()`, cold: no warm-up, no repeat (`timeit.timeit(fn, number=1)`). Shown, never used."""
    return timeit.timeit(fn, number=1)


@contextlib.contextmanager
def other_programs(n: int | None = None, *, limit_s: float = 60.0):
    """Run the block while `n` busy processes (default: one per core) compete for the CPU; stopped on exit.

    Each spins for at most `limit_s` seconds, so none outlives a crashed notebook for long.
    """
    n = os.cpu_count() or 1 if n is None else n
    if int(n) != n or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if not limit_s > 0:
        raise ValueError(f"limit_s must be positive, got {limit_s!r}")
    procs = [
        subprocess.Popen([sys.executable, "-c", _SPIN.format(float(limit_s))])
        for _ in range(int(n))
    ]
    try:
        time.sleep(0.05)  # let them start spinning
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


def count_torch_ops(fn) -> collections.Counter:
    """The aten operations `fn()` runs, counted by name (`torch.utils._python_dispatch.TorchDispatchMode`)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = collections.Counter()

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        fn()
    return counts


def at_threads(fns: dict, counts) -> dict:
    """Each `fns[name]` run at each torch thread count in `counts`: {"name, n threads": fn}, torch's count restored."""
    import torch

    def pinned(fn, n):
        def run():
            before = torch.get_num_threads()
            torch.set_num_threads(n)
            try:
                return fn()
            finally:
                torch.set_num_threads(before)

        return run

    out = {}
    for name, fn in fns.items():
        for n in counts:
            if int(n) != n or n < 1:
                raise ValueError(f"counts must be thread counts >= 1, got {n!r}")
            out[f"{name}, {int(n)} thread{'s' * (n > 1)}"] = pinned(fn, int(n))
    return out


def describe_rounds(samples, unit: str = "ms") -> str:
    """ "median ‹t› ms over k rounds, ‹lo›-‹hi› (spread ‹s %›)": one candidate's `time_rounds` samples, masked."""
    from ..notebook import measured
    from .timing import spread

    scale = {"ms": 1e3, "µs": 1e6, "s": 1.0}[unit]
    s = np.asarray(samples, dtype=float) * scale
    return (
        f"median {measured(np.median(s), '.2f')} {unit} over {s.size} rounds, "
        f"{measured(s.min(), '.2f')}-{measured(s.max(), '.2f')} "
        f"(spread {measured(100 * spread(s), '.0f')} %)"
    )


def thread_ratios(quiet: dict, busy: dict, names, cores: int) -> str:
    """One line per kernel of `names`: its median time on `cores` threads over its time on 1, quiet and busy
    (`time_rounds` results of `at_threads(..., (1, cores))`), masked."""
    from ..notebook import measured

    label = lambda n, c: f"{n}, {c} thread{'s' * (c > 1)}"  # noqa: E731
    lines = []
    for n in names:
        r = [
            np.median(t[label(n, cores)]) / np.median(t[label(n, 1)])
            for t in (quiet, busy)
        ]
        lines.append(
            f"{n:>5}: {cores} threads / 1 thread = {measured(r[0], '.2f')} quiet, "
            f"{measured(r[1], '.2f')} with every core busy"
        )
    return "\n".join(lines)


def ceiling_spread(
    ceilings: dict, key: str = "matmul_fp32_flops", unit: float = 1e9, fmt: str = ",.0f"
) -> str:
    """ "best ‹x› of ‹k› repeats, ‹lo›-‹hi›": a `measure_ceilings` ceiling beside the range of its repeats, masked."""
    from ..notebook import measured

    rates = np.asarray(ceilings.get(f"{key}_repeats", [ceilings[key]]), float) / unit
    return (
        f"best {measured(rates.max(), fmt)} of {rates.size} repeats, "
        f"{measured(rates.min(), fmt)}-{measured(rates.max(), fmt)}"
    )


def round_ratios(t_a, t_b, a: str = "a", b: str = "b") -> str:
    """ "a / b per round ‹lo›-‹hi›, median ‹r›: ‹verdict›" for two candidates timed in the same rounds; the verdict
    says which was faster in every round by more than 2 %, or that the rounds disagree (the range reaches
    within 2 % of 1: within noise)."""
    from ..notebook import measured

    r = np.asarray(t_a, dtype=float) / np.asarray(
        t_b, dtype=float
    )  # one ratio per round
    if (
        r.min() <= 1.02 and r.max() >= 0.98
    ):  # some round within 2 % of a tie, or both sides
        verdict = "within noise: the rounds disagree"
    else:
        verdict = f"{b if r.min() > 1 else a} faster in every round"
    return (
        f"{a} / {b} per round {measured(r.min(), '.2f')}-{measured(r.max(), '.2f')}, "
        f"median {measured(np.median(r), '.2f')}: {measured(verdict, '')}"
    )


# The aten ops that move no data: a new view of the same memory
_VIEWS = {"slice", "view", "transpose", "unsqueeze", "expand", "select", "reshape", "t"}


def ops_per_tile_step(
    *, block_q: int = 256, block_k: int = 512, heads: int = 8, d: int = 64
) -> collections.Counter:
    """The torch operations of one tile step of `lab.flash_attention_torch` (rung 4), by name: one query block
    against 4 key blocks, less one against 2, halved (what the two runs share cancels)."""
    import torch

    from ..torch_kernels import flash_attention_torch

    for name, x in (
        ("block_q", block_q),
        ("block_k", block_k),
        ("heads", heads),
        ("d", d),
    ):
        if int(x) != x or x < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, block_q, d, generator=g)
    counts = {}
    for blocks in (2, 4):
        k, v = (
            torch.randn(1, heads, blocks * block_k, d, generator=g) for _ in range(2)
        )
        run = lambda k=k, v=v: flash_attention_torch(  # noqa: E731
            q, k, v, block_q=block_q, block_k=block_k
        )
        counts[blocks] = count_torch_ops(run)
    step = collections.Counter()
    for name in counts[4]:
        extra, odd = divmod(counts[4][name] - counts[2][name], 2)
        if odd:
            raise RuntimeError(f"{name}: an odd count over two tile steps")
        if extra:
            step[name] = extra
    return step


def step_op_lines(step) -> str:
    """`ops_per_tile_step()`'s count in two lines: the ops that compute, and the views that move no data."""
    views = {n: c for n, c in sorted(step.items()) if n in _VIEWS}
    work = {n: c for n, c in sorted(step.items()) if n not in _VIEWS}
    line = lambda ops: ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in ops.items())  # noqa: E731
    return (
        f"compute, {sum(work.values())}: {line(work)}\n"
        f"views, {sum(views.values())}: {line(views)}\n"
        f"torch operations per tile step: {sum(step.values())}"
    )


def thread_verdicts(
    quiet: dict,
    names,
    cores: int,
    load: float,
    *,
    busy: dict | None = None,
    noise: float = 0.05,
) -> str:
    """Whether every core beat one thread in `quiet` (`time_rounds` of `at_threads`), per kernel, by the medians;
    with `busy` (the same, timed under `other_programs`), which kernel's many-thread ratio the busy cores raised
    more (rise = busy ratio / quiet ratio), or neither when the rises differ by less than `noise`; and whether
    the 1-minute `load`, read just before the quiet run, already exceeded 3/4 of the cores (the threshold of
    `lab.measure.machine.fairness`). The verdicts are masked: they vary by machine."""
    from ..notebook import measured

    label = lambda n, c: f"{n}, {c} thread{'s' * (c > 1)}"  # noqa: E731
    med = lambda t, n, c: float(np.median(t[label(n, c)]))  # noqa: E731
    lines = [
        f"{n:>5}: {cores} threads helped in the quiet run: "
        + measured(med(quiet, n, cores) < med(quiet, n, 1), "")
        for n in names
    ]
    if busy is not None:
        ratio = lambda t, n: med(t, n, cores) / med(t, n, 1)  # noqa: E731
        rise = {n: ratio(busy, n) / ratio(quiet, n) for n in names}
        worst, best = max(rise, key=rise.get), min(rise, key=rise.get)
        if rise[worst] < (1 + noise) * rise[best]:
            worst = f"neither (within {noise:.0%})"
        lines.append(f"hurt more by the busy cores: {measured(worst, '')}")
    lines.append(  # the threshold of `describe_machine`'s fit-to-time verdict
        "the quiet run was taken on a loaded machine: "
        + measured(load > 0.75 * cores, "")
    )
    return "\n".join(lines)


def tiled_verdicts(rows, pairs) -> str:
    """For each (tiled, standard) pair and each N of the sweep `rows`: is the tiled kernel's median faster, and
    clearly so (the two times apart by half their spreads)? One line each, the verdicts masked."""
    from ..notebook import measured

    at = {(r["kernel"], r["N"]): r for r in rows if not r.get("skipped")}
    lines = []
    for tiled, standard in pairs:
        for N in sorted(n for name, n in at if name == tiled and (standard, n) in at):
            a, b = at[tiled, N], at[standard, N]
            faster = a["ms"] < b["ms"]
            clearly = a["ms"] * (1 + a["spread"] / 2) < b["ms"] * (1 - b["spread"] / 2)
            lines.append(
                f"N = {N:>4}: {tiled} faster than {standard}: "
                f"{measured(faster, '')}, clearly: {measured(clearly, '')}"
            )
    return "\n".join(lines)


def exp_ulp(lo: float, hi: float, n: int = 100_001) -> tuple[float, float]:
    """Worst float32 error, in ulp of $e^x$, over n points of [lo, hi]: of `torch.exp(x)` and of
    `torch.exp2(x·log2 e)` (x·log2 e rounded to float32 first), both against float64."""
    import torch

    if not lo < hi:
        raise ValueError(f"lo must be below hi, got lo={lo!r}, hi={hi!r}")
    x = torch.linspace(lo, hi, int(n))
    exact = torch.exp(x.double())
    ulp = (torch.nextafter(x.exp(), torch.tensor(np.inf)) - x.exp()).double()
    worst = lambda y: float(((y.double() - exact).abs() / ulp).max())  # noqa: E731
    return worst(torch.exp(x)), worst(torch.exp2(x * 1.4426950408889634))


_EXP2_TIMING = """
import statistics, time, torch
torch.set_num_threads(1)
x, out = torch.randn(8, 256, 512), torch.empty(8, 256, 512)
torch.exp2(x, out=out)
times = []
for _ in range({rounds}):
    t0 = time.perf_counter()
    for _ in range({calls}):
        torch.exp2(x, out=out)
    times.append((time.perf_counter() - t0) / {calls})
print(statistics.median(times))
"""


def exp2_without_vector_units(rounds: int = 5, calls: int = 5) -> dict:
    """Seconds of one `torch.exp2` on a default tile, 8 × 256 × 512 fp32, on one thread, in two child
    processes: with torch's vector kernels as this machine picks them, and with `ATEN_CPU_CAPABILITY=default`
    (none); each the median of `rounds` rounds of `calls` calls. Returns {"vector": s, "default": s, "ratio"}.
    Taught in: notebooks/08_hardware_runs.ipynb
    """
    for name, value in (("rounds", rounds), ("calls", calls)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    code = _EXP2_TIMING.format(rounds=int(rounds), calls=int(calls))
    out = {}
    for key, capability in (("vector", None), ("default", "default")):
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        out[key] = float(done.stdout.split()[-1])
    out["ratio"] = out["default"] / out["vector"]
    return out
