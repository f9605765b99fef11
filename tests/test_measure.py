"""Measurement (`lab.measure`): FLOP counts, the kernel registry, timing plumbing, child-process peak memory, machine, ceilings."""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import lab
import lab.measure


def test_attention_flops():
    assert lab.attention_flops(1, 8, 4096, 64) == 4 * 8 * 4096**2 * 64
    assert lab.attention_flops(2, 1, 10, 16, M=30) == 4 * 2 * 10 * 30 * 16
    assert (
        lab.attention_flops(1, 1, 128, 64, causal=True)
        == lab.attention_flops(1, 1, 128, 64) / 2
    )
    with pytest.raises(ValueError, match="N"):
        lab.attention_flops(1, 1, -1, 64)


@pytest.mark.parametrize("kernel", sorted(lab.KERNELS))
def test_every_available_kernel_matches_the_reference(kernel):
    ok, why = lab.kernel_available(kernel, "cpu")
    if not ok:
        assert isinstance(why, str) and len(why) > 10
        pytest.skip(why)
    q, k, v = lab.make_inputs(kernel, 1, 2, 33, 16, seed=1)
    fn, kind = lab.KERNELS[kernel]
    o = fn(q, k, v, True)
    o = np.asarray(o) if kind == "numpy" else o.numpy()
    qn, kn, vn = lab.make_inputs("numpy reference", 1, 2, 33, 16, seed=1)
    np.testing.assert_allclose(
        o, lab.attention_reference(qn, kn, vn, causal=True)[0], atol=1e-5
    )


def test_make_inputs_kinds_and_errors():
    q, k, v = lab.make_inputs("lab torch flash", 2, 3, 5, 4, dtype="bfloat16", seed=0)
    assert q.dtype == torch.bfloat16 and tuple(q.shape) == (2, 3, 5, 4)
    qn, _, _ = lab.make_inputs("numpy flash", 2, 3, 5, 4, dtype="bfloat16", seed=0)
    assert isinstance(qn, np.ndarray) and qn.dtype == np.float32
    np.testing.assert_array_equal(qn, q.float().numpy())
    assert not torch.equal(
        q, lab.make_inputs("lab torch flash", 2, 3, 5, 4, dtype="bfloat16", seed=1)[0]
    )
    with pytest.raises(ValueError, match="kernel"):
        lab.make_inputs("nope", 1, 1, 1, 1)
    with pytest.raises(ValueError, match="dtype"):
        lab.make_inputs("torch naive", 1, 1, 1, 1, dtype="int8")
    with pytest.raises(ValueError, match="kernel"):
        lab.kernel_available("nope")


def test_gpu_only_kernels_say_why_on_a_cpu():
    ok, why = lab.kernel_available("triton", "cpu")
    assert not ok and "interpreter" in why
    if not torch.cuda.is_available():
        ok, why = lab.kernel_available("sdpa flash", "cuda")
        assert not ok and "CUDA" in why


def test_time_call_and_interleaved_return_positive_medians():
    calls = []
    t = lab.time_call(lambda: calls.append(1), min_run_time=0.01)
    assert t > 0 and len(calls) > 1
    times = lab.time_interleaved(
        {"a": lambda: sum(range(100)), "b": lambda: sum(range(10000))},
        rounds=3,
        min_run_time=0.01,
    )
    assert (
        set(times) == {"a", "b"} and times["b"] > times["a"] > 0
    )  # 100× the work; never a time threshold
    with pytest.raises(ValueError, match="rounds"):
        lab.time_interleaved({"a": lambda: None}, rounds=0)


def test_peak_memory_in_a_child_sees_torch_allocations():
    N = 2048
    got = lab.peak_memory(
        [
            dict(kernel="torch naive", B=1, H=1, N=N, d=16),
            dict(kernel="lab torch flash", B=1, H=1, N=N, d=16),
        ]
    )
    if got[0] is None:
        pytest.skip("no /proc/self/status on this system")
    naive, flash = got
    sp = 2 * N * N * 4  # S and P of standard attention in float32
    assert 0.9 * sp < naive < 3 * sp  # torch naive holds at least S and P at its peak
    assert flash < naive / 4
    assert lab.peak_memory([]) == []
    with pytest.raises(ValueError, match="kernel"):
        lab.peak_memory([dict(kernel="nope", B=1, H=1, N=1, d=1)])


def test_the_probe_is_a_module_run_on_its_own():
    """`python -m lab.measure.probe` is what `peak_memory` starts on a CPU: a JSON list of bytes, one per case."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc/self/status on this system")
    cases = [
        dict(kernel="torch naive", B=1, H=1, N=1024, d=16),
        dict(kernel="lab torch flash", B=1, H=1, N=1024, d=16),
    ]
    env = dict(os.environ, **lab.measure.memory.PROBE_ENV)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.measure.probe",
            json.dumps(cases),
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-1500:]
    naive, flash = json.loads(run.stdout.strip().splitlines()[-1])
    assert (
        naive >= 2 * 1024 * 1024 * 4 * 0.9 and flash < naive
    )  # S and P of 1024 × 1024 in float32, at least
    assert "RuntimeWarning" not in run.stderr  # not imported before it runs as __main__


def test_lab_exports_every_measure_name():
    """`lab.measure` is a package of modules; its public names are the same objects at the top level."""
    for name in lab.measure.__all__:
        assert getattr(lab, name) is getattr(lab.measure, name)
    importlib.import_module(
        "lab.memory"
    )  # the module lab/memory.py, whatever ran before
    assert lab.memory.__name__ == "lab.memory"  # not shadowed by lab.measure.memory
    assert {
        "load_runs",
        "user_runs_dir",
        "RUNS_DIR",
        "measure_ceilings",
        "KERNELS",
    } <= set(lab.measure.__all__)


def test_describe_machine_has_the_fields_a_record_needs():
    m = lab.describe_machine()
    for key in (
        "cpu",
        "cores",
        "torch_threads",
        "blas",
        "gpu",
        "versions",
        "date",
        "os",
    ):
        assert key in m
    assert m["versions"]["torch"] == torch.__version__ and m["cores"] >= 1
    assert (m["gpu"] is None) == (not torch.cuda.is_available())


def test_measure_ceilings_small():
    c = lab.measure_ceilings("cpu", n=128, mbytes=4, min_run_time=0.02)
    assert c["matmul_fp32_flops"] > 1e6 and c["bandwidth_bytes_per_s"] > 1e6
    with pytest.raises(ValueError, match="n and mbytes"):
        lab.measure_ceilings("cpu", n=-1)
    with pytest.raises(ValueError, match="repeats"):
        lab.measure_ceilings("cpu", repeats=0)


def test_measure_ceilings_keeps_the_fastest_repeat(monkeypatch):
    times = iter(
        [3.0, 1.0, 2.0, 4.0, 2.0, 8.0]
    )  # matmul's three, then the copy's three
    monkeypatch.setattr(lab.measure.machine, "time_call", lambda fn, **kw: next(times))
    c = lab.measure_ceilings("cpu", n=4, mbytes=1, repeats=3)
    assert c["matmul_fp32_flops"] == 2.0 * 4**3 / 1.0
    assert c["bandwidth_bytes_per_s"] == 2.0 * 2**20 / 2.0


# --- figures and the slider of notebook 08 -------------------------------------------------------

ROWS = (
    [
        {
            "kernel": "torch naive",
            "dtype": "float32",
            "B": 1,
            "H": 2,
            "N": n,
            "d": 64,
            "causal": False,
            "ms": 0.01 * n,
            "tflops": lab.attention_flops(1, 2, n, 64) / (1e-5 * n) / 1e12,
            "peak_mb": 8e-6 * n * n,
            "skipped": None,
        }
        for n in (256, 512)
    ]
    + [
        {
            "kernel": "lab torch flash",
            "dtype": "float32",
            "B": 1,
            "H": 2,
            "N": n,
            "d": 64,
            "causal": False,
            "ms": 0.005 * n,
            "tflops": lab.attention_flops(1, 2, n, 64) / (5e-6 * n) / 1e12,
            "peak_mb": 1e-3 * n,
            "skipped": None,
        }
        for n in (256, 512)
    ]
    + [{"kernel": "triton", "device": "cpu", "skipped": "interpreter"}]
)


def test_draw_sweep_returns_each_kernels_points():
    import matplotlib.pyplot as plt

    from lab.figures.hardware import draw_sweep

    for what in ("ms", "tflops", "peak_mb"):
        got = draw_sweep(ROWS, what=what)
        assert set(got) == {"torch naive", "lab torch flash"} and [
            n for n, _ in got["torch naive"]
        ] == [256, 512]
        plt.close("all")
    assert draw_sweep(ROWS, what="peak_mb")["torch naive"][1][1] == pytest.approx(
        8e-6 * 512**2
    )
    plt.close("all")
    with pytest.raises(ValueError, match="what"):
        draw_sweep(ROWS, what="speed")


def test_draw_roofline_places_points_under_the_roof():
    import matplotlib.pyplot as plt

    from lab.figures.hardware import draw_roofline

    ceilings = {"matmul_fp32_flops": 1e11, "bandwidth_bytes_per_s": 1e10}
    got = draw_roofline(ceilings, ROWS)
    plt.close("all")
    assert got["N"] == 512 and got["ridge"] == pytest.approx(10.0)
    assert set(got["points"]) == {"torch naive", "lab torch flash"}
    for x, y in got["points"].values():
        assert x > 0 and y > 0


def test_draw_recorded_memory_uses_runs_with_both_kernels():
    import matplotlib.pyplot as plt

    from lab.figures.hardware import draw_recorded_memory

    runs = [
        {"label": "here", "results": [dict(r, N=4096) for r in ROWS]},
        {"label": "empty", "results": []},
    ]
    got = draw_recorded_memory(runs)
    plt.close("all")
    assert list(got) == ["here"] and got["here"]["standard"] == pytest.approx(
        8e-6 * 512**2 / 2
    )
    assert got["here"]["tiled"] < got["here"]["standard"]


def test_time_rounds_warms_each_candidate_then_times_one_sample_per_round():
    calls = []
    samples = lab.time_rounds(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        rounds=4,
        min_run_time=0.001,
    )
    assert calls[:2] == ["a", "b"]  # the warm-up, before any round
    firsts = [c for i, c in enumerate(calls[2:], 2) if c != calls[i - 1]]
    assert firsts[:3] == ["b", "a", "b"] or firsts[:3] == ["a", "b", "a"]
    assert {n: s.shape for n, s in samples.items()} == {"a": (4,), "b": (4,)}
    assert all((s > 0).all() for s in samples.values())
    with pytest.raises(ValueError, match="rounds"):
        lab.time_rounds({"a": lambda: None}, rounds=2.5)
    with pytest.raises(ValueError, match="fns"):
        lab.time_rounds({}, rounds=3)


def test_spread_is_the_range_over_the_median():
    assert lab.spread([1.0, 2.0, 4.0]) == pytest.approx(1.5)
    assert lab.spread([3.0, 3.0, 3.0]) == 0.0
    with pytest.raises(ValueError, match="samples"):
        lab.spread([1.0, 0.0, 2.0])


def test_run_sweep_refuses_fewer_than_three_rounds_and_keeps_each_round():
    with pytest.raises(ValueError, match="rounds must be an integer >= 3"):
        lab.run_sweep([16], kernels=["torch naive"], rounds=2, memory=False)
    rows = lab.run_sweep(
        [16],
        H=1,
        kernels=["torch naive"],
        rounds=3,
        min_run_time=0.001,
        memory=False,
        progress=False,
    )
    r = rows[0]
    assert len(r["ms_rounds"]) == 3 and r["ms"] == pytest.approx(
        np.median(r["ms_rounds"])
    )
    assert r["spread"] == pytest.approx(lab.spread(r["ms_rounds"]))
    assert "spread" in lab.results_table(rows).splitlines()[0]


def test_results_table_prints_the_oracles_float64_arithmetic():
    """The float64 oracle takes float32 inputs: the table names the dtype it computes in, and says so."""
    rows = lab.run_sweep(
        [16],
        H=1,
        kernels=["numpy reference", "torch naive"],
        rounds=3,
        min_run_time=0.001,
        memory=False,
        progress=False,
    )
    lines = lab.results_table(rows).splitlines()
    ref = next(ln for ln in lines if ln.startswith("numpy reference "))
    naive = next(ln for ln in lines if ln.startswith("torch naive "))
    assert ref.split()[2] == "float64" and naive.split()[2] == "float32"
    assert "  numpy reference: computes in float64 (float32 in and out)" in lines
    assert rows[0]["dtype"] == "float32"  # the record keeps the inputs' dtype


def test_time_once_calls_once_without_warm_up():
    calls = []
    assert lab.time_once(lambda: calls.append(1)) > 0 and calls == [1]


def test_other_programs_start_and_are_stopped():
    with lab.other_programs(2, limit_s=30) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(ValueError, match="n must be"):
        with lab.other_programs(-1):
            pass


def test_count_torch_ops_counts_each_tile_step_alike():
    """Each extra key block adds the same torch operations to lab's tiled loop."""
    q = torch.randn(1, 2, 32, 16)
    kv = lambda M: (torch.randn(1, 2, M, 16), torch.randn(1, 2, M, 16))
    total = lambda M: sum(
        lab.count_torch_ops(
            lambda: lab.flash_attention_torch(q, *kv(M), block_q=32, block_k=16)
        ).values()
    )
    one, two, three = total(32), total(48), total(64)
    assert three - two == two - one > 0
    ops = lab.count_torch_ops(lambda: torch.mm(torch.ones(2, 2), torch.ones(2, 2)))
    assert ops["mm"] == 1


def _machine(unit="AVX512", load=0.5, cores=4):
    m = lab.describe_machine()
    m["blas"] = dict(m["blas"], cpu_capability=unit)
    m["load_average"], m["cores"] = [load, load, load], cores
    return m


def test_fairness_names_vector_kernels_off_and_a_busy_machine():
    assert lab.fairness(_machine()) == []
    off = lab.fairness(_machine(unit="DEFAULT"))
    assert len(off) == 1 and "vector kernels are OFF" in off[0]
    busy = lab.fairness(_machine(load=3.5, cores=4))
    assert len(busy) == 1 and "load average 3.5 on 4 cores" in busy[0]
    assert len(lab.fairness(_machine(unit="default", load=9.0))) == 2


def test_machine_report_masks_every_value_and_ends_in_one_verdict_line():
    lines = lab.machine_report(_machine()).splitlines()
    assert lines[-1] == "fit to time: ‹yes›" and "vector unit ‹AVX512›" in lines[1]
    warned = lab.machine_report(_machine(unit="DEFAULT")).splitlines()
    assert len(warned) == len(lines) and warned[-1].startswith(
        "fit to time: ‹WARNING: "
    )


def test_latest_sweeps_keep_the_last_run_per_machine_and_threads():
    rows = lambda ms: [  # noqa: E731
        {
            "kernel": k,
            "N": 4096,
            "d": 64,
            "dtype": "float32",
            "ms": m,
            "vs_sdpa": 100 / m,
        }
        for k, m in (
            ("lab torch flash", ms),
            ("torch naive", 400.0),
            ("sdpa flash", 100.0),
        )
    ]
    run = lambda date, cpu, ms, spread=None: {  # noqa: E731
        "kind": "measured",
        "date": date,
        "machine": {"cpu": cpu, "cores": 2, "gpu": None, "load_average": [0.5]},
        "settings": {"threads": 1},
        "ceilings": {"matmul_fp32_flops": 1e11},
        "results": [dict(r, spread=spread) for r in rows(ms)],
    }
    runs = [
        run("2026-01-02", "X", 200.0, 0.1),
        run("2026-01-01", "X", 300.0),
        run("2026-01-01", "Y", 150.0),
    ]
    kept = lab.latest_sweeps(runs)
    assert [(r["machine"]["cpu"], r["date"]) for r in kept] == [
        ("X", "2026-01-02"),
        ("Y", "2026-01-01"),
    ]
    text = lab.sweep_lines(kept[0])
    assert (
        "loop 200 ms ±5%" in text and "0.50x SDPA" in text and "2.0x standard" in text
    )
    assert "±" not in lab.sweep_lines(kept[1])  # no spread recorded: none shown


def test_at_threads_sets_and_restores_torch_threads():
    seen = []
    fns = lab.at_threads({"k": lambda: seen.append(torch.get_num_threads())}, (1, 2))
    before = torch.get_num_threads()
    for fn in fns.values():
        fn()
    assert list(fns) == ["k, 1 thread", "k, 2 threads"] and seen == [1, 2]
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="counts"):
        lab.at_threads({"k": lambda: None}, (0,))


def test_describe_rounds_and_thread_ratios_mask_their_numbers():
    text = lab.describe_rounds([0.010, 0.012, 0.011])
    assert text == "median ‹11.00› ms over 3 rounds, ‹10.00›-‹12.00› (spread ‹18› %)"
    quiet = {"k, 1 thread": np.array([2.0]), "k, 4 threads": np.array([1.0])}
    busy = {"k, 1 thread": np.array([2.0]), "k, 4 threads": np.array([6.0])}
    assert lab.thread_ratios(quiet, busy, ["k"], 4) == (
        "    k: 4 threads / 1 thread = ‹0.50› quiet, ‹3.00› with every core busy"
    )


def test_round_ratios_says_within_noise_only_when_the_rounds_disagree():
    assert "within noise" in lab.round_ratios([1.0, 1.2], [1.1, 1.1], "x", "y")
    assert "y faster in every round" in lab.round_ratios(
        [2.0, 3.0], [1.0, 1.0], "x", "y"
    )
    assert "x faster in every round" in lab.round_ratios(
        [1.0, 1.0], [2.0, 3.0], "x", "y"
    )
    assert "within noise" in lab.round_ratios([0.7, 0.99], [1.0, 1.0], "x", "y")
    assert "‹" in lab.round_ratios([1.0], [2.0])


def test_ops_per_tile_step_is_the_default_of_the_overhead_model():
    """The loop's tile step, recounted: its ops by name, and their sum is `loop_overhead`'s default op count."""
    import inspect

    from lab.measure import ops_per_tile_step, step_op_lines

    step = ops_per_tile_step(block_q=32, block_k=16, heads=2, d=16)
    assert step["bmm"] == step["baddbmm_"] == step["amax"] == 1
    default = inspect.signature(lab.loop_overhead).parameters["ops_per_step"].default
    assert sum(step.values()) == default
    figure = lab.figures.hardware.draw_loop_overhead
    assert inspect.signature(figure).parameters["ops_per_step"].default == default
    lines = step_op_lines(step)
    assert lines.endswith(f"torch operations per tile step: {default}")
    with pytest.raises(ValueError, match="block_k"):
        ops_per_tile_step(block_k=0)


def test_notebook_verdict_helpers():
    from lab.measure import exp_ulp, thread_verdicts, tiled_verdicts

    by_exp, by_exp2 = exp_ulp(-8, 0, n=1001)
    assert 0 <= by_exp <= 1 < by_exp2
    with pytest.raises(ValueError, match="lo must"):
        exp_ulp(1, 0)
    quiet = {"loop, 1 thread": [2.0, 2.1], "loop, 2 threads": [1.0, 1.1]}
    text = thread_verdicts(quiet, ["loop"], 2, load=0.5)
    assert (
        "helped in the quiet run: ‹True›" in text and "loaded machine: ‹False›" in text
    )
    busy = {"loop, 1 thread": [2.0], "loop, 2 threads": [1.0]}
    quiet2 = {**quiet, "sdpa, 1 thread": [2.0], "sdpa, 2 threads": [1.0]}
    busy2 = {**busy, "sdpa, 1 thread": [2.0], "sdpa, 2 threads": [1.8]}
    text = thread_verdicts(quiet2, ["loop", "sdpa"], 2, load=3.0, busy=busy2)
    assert "hurt more by the busy cores: ‹sdpa›" in text
    assert "loaded machine: ‹True›" in text
    busy2["loop, 2 threads"] = [3.0]
    text = thread_verdicts(quiet2, ["loop", "sdpa"], 2, load=0.5, busy=busy2)
    assert "hurt more by the busy cores: ‹loop›" in text
    busy2["loop, 2 threads"] = [1.02]  # the loop's ratio held at 0.51, sdpa's rose 80 %
    text = thread_verdicts(quiet2, ["loop", "sdpa"], 2, load=0.5, busy=busy2)
    assert "hurt more by the busy cores: ‹sdpa›" in text
    busy2["sdpa, 2 threads"] = [1.04]  # sdpa's rose 4 %: within the noise
    text = thread_verdicts(quiet2, ["loop", "sdpa"], 2, load=0.5, busy=busy2)
    assert "hurt more by the busy cores: ‹neither (within 5%)›" in text
    for load, loaded in (
        (1.4, False),
        (1.6, True),
    ):  # 3/4 of 2 cores, as fit-to-time warns
        text = thread_verdicts(quiet2, ["loop", "sdpa"], 2, load=load, busy=busy2)
        assert f"loaded machine: ‹{loaded}›" in text
    row = lambda k, N, ms: dict(kernel=k, N=N, ms=ms, spread=0.1)  # noqa: E731
    rows = [row("tiled", 256, 1.0), row("std", 256, 2.0), row("tiled", 512, 3.0)]
    text = tiled_verdicts(rows, [("tiled", "std")])
    assert text == "N =  256: tiled faster than std: ‹True›, clearly: ‹True›"


# --- the copy that measures bandwidth exceeds the last-level cache --------------------------------


def _fake_cache(tmp_path, *levels):
    """A sysfs cache folder: one index per (level, size text)."""
    for i, (level, size) in enumerate(levels):
        index = tmp_path / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "size").write_text(f"{size}\n")
    return str(tmp_path)


def test_last_level_cache_is_the_highest_level(tmp_path):
    where = _fake_cache(tmp_path, (1, "48K"), (1, "32K"), (2, "2048K"), (3, "32M"))
    assert lab.measure.last_level_cache(where) == 32 * 2**20
    assert lab.measure.last_level_cache(str(tmp_path / "absent")) is None


def test_copy_is_twice_the_last_level_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(lab.measure.machine, "_memory_total", lambda: 64 * 2**30)
    big = _fake_cache(tmp_path / "a", (2, "1024K"), (3, "266240K"))
    assert lab.measure.copy_mib(big) == 520  # 2 × 260 MiB
    small = _fake_cache(tmp_path / "b", (2, "512K"), (3, "8192K"))
    assert lab.measure.copy_mib(small) == 64  # 2 × 8 MiB is under the floor
    assert (
        lab.measure.copy_mib(str(tmp_path / "absent")) == 64
    )  # no sysfs: the fallback
    assert lab.measure.copy_mib(str(tmp_path / "absent"), fallback=16) == 16
    with pytest.raises(ValueError, match="fallback"):
        lab.measure.copy_mib(big, fallback=0)


def test_copy_leaves_most_of_the_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(lab.measure.machine, "_memory_total", lambda: 2 * 2**30)
    big = _fake_cache(tmp_path, (3, "1G"))
    assert lab.measure.copy_mib(big) == 256  # 1/8 of 2 GiB, not 2 GiB


def test_measure_ceilings_copies_beyond_the_cache_by_default(monkeypatch):
    monkeypatch.setattr(lab.measure.machine, "copy_mib", lambda: 3)
    monkeypatch.setattr(lab.measure.machine, "time_call", lambda fn, **kw: 1.0)
    c = lab.measure_ceilings("cpu", n=4, repeats=1)
    assert c["copy_mb"] == 3 and c["bandwidth_bytes_per_s"] == 2.0 * 3 * 2**20


def test_copy_line_names_the_cache_it_exceeds(tmp_path):
    where = _fake_cache(tmp_path / "a", (3, "32M"))
    line = lab.measure.copy_line({"copy_mb": 64}, where)
    assert line == "copy of ‹64› MiB a buffer, ‹2.0›× the ‹32› MiB last-level cache"
    none = lab.measure.copy_line({"copy_mb": 64}, str(tmp_path / "absent"))
    assert none == "copy of ‹64› MiB a buffer, no cache size readable here"


def test_exp2_without_vector_units_times_both_and_refuses_bad_counts():
    got = lab.measure.exp2_without_vector_units(rounds=1, calls=1)
    assert got["vector"] > 0 and got["default"] > 0
    assert got["ratio"] == pytest.approx(got["default"] / got["vector"])
    for bad in (dict(rounds=0), dict(calls=1.5)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            lab.measure.exp2_without_vector_units(**bad)
