"""`python -m lab.bench` (labbench/cli.py): the sweep, its table and JSON record, --verify, the GPU sweep's clean refusal on a CPU."""

import json
import os
import subprocess
import sys

import pytest
import torch

import lab
from lab import bench, measure

TINY = [
    "--N",
    "32",
    "64",
    "--H",
    "1",
    "--rounds",
    "3",
    "--min-run-time",
    "0.01",
    "--quiet",
    "--no-targets",
]


def test_sweep_prints_a_table_and_records_json(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert (
        bench.main(
            TINY
            + [
                "--kernels",
                "torch naive",
                "lab torch flash",
                "sdpa flash",
                "triton",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "lab torch flash" in text and "TFLOP/s" in text and "vs SDPA" in text
    assert (
        "triton: Triton on a CPU tensor runs in its interpreter" in text
    )  # skipped, with the reason
    rec = json.loads(out.read_text())
    for key in (
        "schema",
        "kind",
        "label",
        "date",
        "machine",
        "settings",
        "ceilings",
        "results",
    ):
        assert key in rec
    assert rec["kind"] == "measured" and rec["settings"]["N"] == [32, 64]
    done = [r for r in rec["results"] if not r.get("skipped")]
    assert {r["kernel"] for r in done} == {
        "torch naive",
        "lab torch flash",
        "sdpa flash",
    } and len(done) == 6
    for r in done:
        assert (
            r["ms"] > 0
            and r["tflops"] > 0
            and r["peak_mb"] is not None
            and r["peak_mb"] >= 0
        )
        assert r["tflops"] == pytest.approx(
            lab.attention_flops(1, 1, r["N"], 64) / (r["ms"] / 1e3) / 1e12
        )
    sdpa = [r for r in done if r["kernel"] == "sdpa flash"]
    assert all(r["vs_sdpa"] == pytest.approx(1.0) for r in sdpa)


def test_run_sweep_skips_slow_kernels_above_their_limit():
    rows = measure.run_sweep(
        [16, 48],
        H=1,
        kernels=["numpy flash", "lab torch flash"],
        rounds=3,
        min_run_time=0.01,
        memory=False,
        progress=False,
        max_n={"numpy flash": 20},
        causal=(True,),
    )
    done = [(r["kernel"], r["N"]) for r in rows if not r.get("skipped")]
    assert done == [
        ("numpy flash", 16),
        ("lab torch flash", 16),
        ("lab torch flash", 48),
    ]
    assert any(r.get("skipped", "") and "above N = 20" in r["skipped"] for r in rows)
    assert all(r["causal"] for r in rows if not r.get("skipped"))
    with pytest.raises(ValueError, match="kernels"):
        measure.run_sweep([16], kernels=["nope"])
    with pytest.raises(ValueError, match="Ns"):
        measure.run_sweep([], kernels=["torch naive"])


def test_verify_prints_the_reported_figures(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        measure.accuracy,
        "REPORTED_910B3_ACCURACY",
        {(1, 64, 16): 1.19e-7, (2, 32, 16): 2.09e-7},
    )
    out = tmp_path / "verify.json"
    assert bench.main(["--verify", "--quiet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "910B3" in text and "1.19e-07" in text and "lab torch flash" in text
    rows = json.loads(out.read_text())["accuracy"]
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    assert fp32 and all(r["vs_fp64"] < 1e-5 for r in fp32)
    bf16 = [r for r in rows if r["dtype"] == "bfloat16"]
    assert (
        bf16
        and all(r["vs_fp64"] < 5e-2 for r in bf16)
        and all(r["reported_910b3"] is None for r in bf16)
    )


def test_load_runs_reads_the_committed_records():
    runs = lab.load_runs()
    assert runs, "data/runs holds at least the reported 910B3 figures and one CPU run"
    kinds = {r["kind"] for r in runs}
    assert {"measured", "reported"} <= kinds
    ascend = [r for r in runs if r["kind"] == "reported"][0]
    assert "910B3" in ascend["label"] and "reported run" in ascend["label"]
    assert lab.load_runs("/nonexistent") == []


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU"
)
def test_gpu_sweep_refuses_cleanly_without_a_gpu(capsys):
    assert bench.main(["--gpu-sweep", "--quiet", "--no-record"]) == 2
    assert "no CUDA device" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="no CUDA device"):
        bench.gpu_sweep()
    from labbench import gpu_check  # step 1 of tools/run_gpu.sh

    assert gpu_check.main() == 2 and "no CUDA device" in capsys.readouterr().out


def test_module_runs_from_the_command_line():
    run = subprocess.run(
        [sys.executable, "-m", "lab.bench", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        run.returncode == 0 and "--verify" in run.stdout and "--gpu-sweep" in run.stdout
    )


def test_threads_setting_is_applied_recorded_and_restored():
    before = torch.get_num_threads()
    rows = measure.run_sweep(
        [16],
        H=1,
        kernels=["lab torch flash"],
        rounds=3,
        min_run_time=0.01,
        memory=False,
        progress=False,
        threads=1,
    )
    assert rows[0]["threads"] == 1 and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        measure.run_sweep([16], kernels=["lab torch flash"], threads=0)
    assert bench.main(["--threads", "0", "--quiet", "--no-record"]) == 2


def test_a_bench_run_records_outside_the_repository(tmp_path, monkeypatch, capsys):
    """By default a run goes to the learner's own runs folder; the committed runs are untouched."""
    monkeypatch.delenv("FLASH_COURSE_RUNS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    shipped = sorted(
        p.name for p in __import__("pathlib").Path(measure.RUNS_DIR).iterdir()
    )
    assert lab.user_runs_dir().startswith(str(tmp_path / "xdg"))
    assert bench.main(TINY + ["--kernels", "torch naive", "--no-memory"]) == 0
    recorded = [
        line.split("recorded: ")[1]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("recorded: ")
    ]
    assert len(recorded) == 1 and recorded[0].startswith(lab.user_runs_dir())
    assert (
        sorted(p.name for p in __import__("pathlib").Path(measure.RUNS_DIR).iterdir())
        == shipped
    )
    assert [r["file"] for r in lab.load_runs(lab.user_runs_dir())] == [
        recorded[0].rsplit("/", 1)[1]
    ]
    monkeypatch.setenv("FLASH_COURSE_RUNS", str(tmp_path / "mine"))
    assert lab.user_runs_dir() == str(tmp_path / "mine")
    assert (
        bench.main(
            TINY
            + [
                "--kernels",
                "torch naive",
                "--no-memory",
                "--record-dir",
                str(tmp_path / "there"),
            ]
        )
        == 0
    )
    assert (
        len(list((tmp_path / "there").glob("*.json"))) == 1
        and not (tmp_path / "mine").exists()
    )


def test_the_record_writer_is_tooling_and_lab_keeps_its_name(tmp_path):
    """`labbench.records` writes a record; `lab.record_run` is the same writer; `lab.load_runs` reads it back."""
    from labbench import records

    machine = {
        "cpu": "Some CPU 9000",
        "cores": 4,
        "torch_threads": 2,
        "gpu": None,
        "date": "2026-01-02T03:04:05Z",
    }
    path = lab.record_run(
        [],
        settings={"mode": "verify"},
        machine=machine,
        runs_dir=str(tmp_path / "runs"),
    )
    assert os.path.basename(path) == "20260102T0304_cpu_some-cpu-9000_verify.json"
    rec = json.loads(open(path).read())
    assert (
        rec["label"] == "Some CPU 9000 (4 CPU cores, 2 torch threads)"
        and rec["kind"] == "measured"
    )
    assert [r["file"] for r in lab.load_runs(str(tmp_path / "runs"))] == [
        os.path.basename(path)
    ]
    gpu = dict(machine, gpu={"name": "NVIDIA H100 80GB HBM3"})
    assert records.record_path(gpu, {"mode": "sweep"}, "here") == os.path.join(
        "here", "20260102T0304_gpu_nvidia-h100-80gb-hbm3.json"
    )
    assert records.record_run(
        [], settings={"mode": "gpu-sweep"}, machine=gpu, path=str(tmp_path / "x.json")
    ) == str(tmp_path / "x.json")


def test_lab_bench_keeps_its_names():
    """`lab.bench` is the entry point kept under its old name; the command and the claims are labbench's."""
    import labbench.claims
    import labbench.cli

    assert (
        bench.main is labbench.cli.main
        and bench.cpu_targets is labbench.claims.cpu_targets
    )
    assert (
        bench.gpu_sweep is labbench.claims.gpu_sweep
        and bench.CPU_CLAIMS is labbench.claims.CPU_CLAIMS
    )
