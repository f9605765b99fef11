"""The numpy benchmark (labbench/numpy_cli.py, run as `python -m lab.bench_numpy`) runs and reports consistent numbers (no time is asserted)."""

import subprocess
import sys

import lab.bench_numpy as bench


def test_numpy_throughput_reports_both_kernels(capsys):
    r = bench.numpy_throughput(BH=2, N=96, d=16, min_run_time=0.01)
    assert r["max_abs_diff"] < 1e-5
    for name in ("standard", "flash"):
        assert r[name]["seconds"] > 0
        assert (
            abs(r[name]["gflops"] * r[name]["seconds"] * 1e9 - 4 * 2 * 96 * 96 * 16) < 1
        )
    assert (
        abs(r["flash_over_standard"] - r["standard"]["seconds"] / r["flash"]["seconds"])
        < 1e-9
    )
    bench.main(
        ["--BH", "1", "--N", "64", "--d", "8", "--min-run-time", "0.01", "--causal"]
    )
    assert "flash / standard throughput" in capsys.readouterr().out


def test_module_runs_from_the_command_line():
    run = subprocess.run(
        [sys.executable, "-m", "lab.bench_numpy", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "--BH" in run.stdout and "--causal" in run.stdout
