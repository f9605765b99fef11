"""`python -m lab.bench`: the attention kernels timed and measured on this machine, and the run recorded.

  python -m lab.bench                       # CPU sweep over N (B=1, H=8, d=64, fp32) + the course's CPU claims
  python -m lab.bench --N 512 1024 --d 64 128 --dtype float32 bfloat16 --causal both
  python -m lab.bench --verify              # max |flash - standard| at four (B, N, d), on this machine
  python -m lab.bench --gpu-sweep           # on a machine with an NVIDIA GPU: fp16/bf16, d 64/128, N 1K-16K

Every run prints a table (ms, TFLOP/s = 4·B·H·N²·d per second, halved for causal; peak MiB above
the inputs; throughput relative to SDPA) and writes a JSON record (schema in data/README.md) into
your own runs folder, `lab.user_runs_dir()`, outside the repository, unless `--no-record`;
`--record-dir data/runs` adds it to the runs the course ships. Kernels are timed interleaved, round by round, so a busy
machine slows them alike. The claims are printed as measured ratios, never asserted. Triton's
interpreter is never timed (it is for stepping through a kernel, not a performance).

The command lives here, in `labbench` beside the `lab` package; `lab/bench.py` keeps the name
`python -m lab.bench` (`python -m labbench.cli` is the same). The measurements are `lab.measure`'s.
Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import argparse
import sys

import torch

from lab import measure

from .claims import CPU_KERNELS, GPU_KERNELS, cpu_targets, gpu_sweep, targets_text
from .records import record_run

__all__ = ["main"]


def _parser():
    """The command's options."""
    p = argparse.ArgumentParser(
        prog="python -m lab.bench", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--N",
        type=int,
        nargs="+",
        default=[512, 1024, 2048, 4096],
        help="sequence lengths (N = M)",
    )
    p.add_argument("--d", type=int, nargs="+", default=[64], help="head dims")
    p.add_argument(
        "--dtype",
        nargs="+",
        default=["float32"],
        choices=["float16", "bfloat16", "float32", "float64"],
    )
    p.add_argument("--causal", choices=["no", "yes", "both"], default="no")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=8)
    p.add_argument(
        "--kernels",
        nargs="+",
        default=None,
        choices=sorted(measure.KERNELS),
        metavar="KERNEL",
        help=f"any of: {', '.join(measure.KERNELS)}",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice, all cores)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved timing rounds (at least 3: the median of 2 is their mean)",
    )
    p.add_argument(
        "--min-run-time", type=float, default=0.1, help="seconds per kernel per round"
    )
    p.add_argument(
        "--no-memory", action="store_true", help="skip the peak-memory measurement"
    )
    p.add_argument(
        "--no-targets",
        action="store_true",
        help="skip the measurements of the course's CPU claims",
    )
    p.add_argument(
        "--no-record", action="store_true", help="do not write a JSON record"
    )
    p.add_argument(
        "--record-dir",
        default=None,
        help="folder for the JSON record (default: your own runs folder, lab.user_runs_dir(), outside the "
        "repository; data/runs to add a run to the ones the course ships)",
    )
    p.add_argument(
        "--out", default=None, help="path of the JSON record (overrides --record-dir)"
    )
    p.add_argument("--label", default=None, help="a label for the record")
    p.add_argument(
        "--verify",
        action="store_true",
        help="only the accuracy table: max |flash - standard| at four (B, N, d)",
    )
    p.add_argument(
        "--gpu-sweep",
        action="store_true",
        help="the prepared GPU sweep (needs an NVIDIA GPU)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    """Command line entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    progress = not args.quiet
    if args.threads is not None:
        if args.threads < 1:
            print(f"--threads must be >= 1, got {args.threads}")
            return 2
        torch.set_num_threads(
            args.threads
        )  # the ceilings, the sweep and the memory child alike
    machine = measure.describe_machine()
    gpu = (machine.get("gpu") or {}).get("name")
    print(
        f"machine: {machine['cpu']} ({machine['cores']} cores, {machine['torch_threads']} torch threads, "
        f"BLAS {machine['blas'].get('blas_info', '?')}); GPU: {gpu or 'none'}; torch {machine['versions']['torch']}, "
        f"triton {machine['versions']['triton']}"
    )
    if args.verify:
        device = (
            "cuda"
            if args.device == "cuda" or (args.gpu_sweep and torch.cuda.is_available())
            else "cpu"
        )
        rows = measure.verify_accuracy(device=device, progress=progress)
        print(measure.accuracy_table(rows))
        print(
            "910B3: max |flash - standard| of a reported run on an Ascend 910B3 (CANN 8.0.1), fp32."
        )
        if not args.no_record:
            path = record_run(
                [],
                settings={"mode": "verify", "device": device},
                machine=machine,
                label=args.label,
                path=args.out,
                runs_dir=args.record_dir,
                extra={"accuracy": rows},
            )
            print(f"recorded: {path}")
        return 0
    if args.gpu_sweep:
        if not torch.cuda.is_available():
            print(
                "no CUDA device here (torch.cuda.is_available() is False): the GPU sweep needs an NVIDIA GPU and a CUDA build of torch."
            )
            return 2
        ceilings = measure.measure_ceilings("cuda")
        rows, summary = gpu_sweep(progress=progress)
        print(measure.results_table(rows))
        print("The course's GPU claim: Triton forward TFLOP/s / SDPA flash's >= 0.70:")
        for key, ratio in summary.items():
            print(f"  {key}: {ratio:.2f} ({'met' if ratio >= 0.7 else 'not met'})")
        if not args.no_record:
            path = record_run(
                rows,
                settings={"mode": "gpu-sweep", "B": 4, "H": 16},
                machine=machine,
                ceilings=ceilings,
                label=args.label,
                path=args.out,
                runs_dir=args.record_dir,
                extra={"targets": {"triton_vs_sdpa_flash": summary}},
            )
            print(f"recorded: {path}")
        return 0
    causal = {"no": (False,), "yes": (True,), "both": (False, True)}[args.causal]
    kernels = args.kernels or (CPU_KERNELS if args.device == "cpu" else GPU_KERNELS)
    ceilings = measure.measure_ceilings(args.device)
    rows = measure.run_sweep(
        args.N,
        d=args.d,
        dtypes=args.dtype,
        causal=causal,
        B=args.B,
        H=args.H,
        kernels=kernels,
        device=args.device,
        rounds=args.rounds,
        min_run_time=args.min_run_time,
        memory=not args.no_memory,
        progress=progress,
        threads=args.threads,
    )
    print(measure.results_table(rows))
    print(
        f"ceilings: matmul fp32 {ceilings['matmul_fp32_flops'] / 1e9:.0f} GFLOP/s, "
        f"memory bandwidth {ceilings['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s"
    )
    targets = None
    if args.device == "cpu" and not args.no_targets:
        targets = cpu_targets(
            memory=not args.no_memory, progress=progress, threads=args.threads
        )
        print(targets_text(targets))
    if not args.no_record:
        settings = {
            "mode": "sweep",
            "N": args.N,
            "d": args.d,
            "dtypes": args.dtype,
            "causal": list(causal),
            "B": args.B,
            "H": args.H,
            "device": args.device,
            "threads": args.threads or torch.get_num_threads(),
            "rounds": args.rounds,
            "min_run_time": args.min_run_time,
        }
        path = record_run(
            rows,
            settings=settings,
            machine=machine,
            ceilings=ceilings,
            label=args.label,
            path=args.out,
            runs_dir=args.record_dir,
            extra={"targets": targets},
        )
        print(f"recorded: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
