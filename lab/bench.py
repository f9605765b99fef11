"""`python -m lab.bench`: the attention kernels timed and measured on this machine, and the run recorded.

  python -m lab.bench                       # CPU sweep over N (B=1, H=8, d=64, fp32) + the course's CPU claims
  python -m lab.bench --N 512 1024 --d 64 128 --dtype float32 bfloat16 --causal both
  python -m lab.bench --verify              # max |flash - standard| at four (B, N, d), on this machine
  python -m lab.bench --gpu-sweep           # on a machine with an NVIDIA GPU: fp16/bf16, d 64/128, N 1K-16K

Every run prints a table (ms, TFLOP/s = 4·B·H·N²·d per second, halved for causal; peak MB above
the inputs; throughput relative to SDPA) and writes a JSON record (schema in lab/data/README.md) into
your own runs folder, `lab.user_runs_dir()`, outside the repository, unless `--no-record`;
`--record-dir lab/data/runs` adds it to the runs the course ships. Kernels are timed interleaved, round by round, so a busy
machine slows them alike. The claims are printed as measured ratios, never asserted. Triton's
interpreter is never timed (it is for stepping through a kernel, not a performance).

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import argparse
import sys

import torch

from . import measure

__all__ = ["main", "cpu_targets", "gpu_sweep"]

CPU_KERNELS = ["numpy reference", "numpy flash", "torch naive", "lab torch flash", "sdpa math", "sdpa flash"]
GPU_KERNELS = ["torch naive", "lab torch flash", "sdpa math", "sdpa flash", "sdpa efficient", "sdpa cudnn", "triton"]


def cpu_targets(*, rounds: int = 5, min_run_time: float = 0.3, memory: bool = True, progress: bool = True,
                threads: int | None = None) -> dict:
    """The course's CPU claims, measured: throughput of `lab` torch flash relative to SDPA and to naive at B=1, H=8,
    N=4096, d=64 fp32, interleaved; and its extra peak memory relative to naive's at H=1, N=8192 (`CPU_CLAIMS`).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    from tqdm.auto import tqdm

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _cpu_targets(rounds, min_run_time, memory, progress, tqdm)
    finally:
        torch.set_num_threads(before)


def _cpu_targets(rounds, min_run_time, memory, progress, tqdm):
    fns = {}
    for name in ("lab torch flash", "sdpa flash", "torch naive"):
        q, k, v = measure.make_inputs(name, 1, 8, 4096, 64)
        fns[name] = (lambda fn=measure.KERNELS[name][0], q=q, k=k, v=v: fn(q, k, v, False))
    with tqdm(total=2 if memory else 1, desc="targets", disable=not progress, leave=False) as bar:
        t = measure.time_interleaved(fns, rounds=rounds, min_run_time=min_run_time)
        bar.update(1)
        out = {"threads": torch.get_num_threads(), "time_s": t, "vs_sdpa": t["sdpa flash"] / t["lab torch flash"], "vs_naive": t["torch naive"] / t["lab torch flash"]}
        if memory:
            flash, naive = measure.peak_memory([dict(kernel=k, B=1, H=1, N=8192, d=64) for k in ("lab torch flash", "torch naive")])
            out.update(peak_flash_mb=None if flash is None else flash / 2**20, peak_naive_mb=None if naive is None else naive / 2**20,
                       memory_fraction=None if not (flash and naive) else flash / naive)
            bar.update(1)
    return out


# What the course claims of its default torch kernel on a CPU, each checked against this machine's measurement.
CPU_CLAIMS = {"vs_sdpa": 0.85, "vs_naive": 2.5, "memory_fraction": 1 / 80}


def _targets_text(t: dict) -> str:
    holds = lambda ok: "holds here" if ok else "does not hold here"
    lines = [f"The course's CPU claims, measured (interleaved, {t['threads']} torch thread{'s' if t['threads'] != 1 else ''}; "
             "a benchmark, never asserted):",
             f"  B=1 H=8 N=4096 d=64 fp32: lab torch flash at {t['vs_sdpa']:.2f}x SDPA's throughput "
             f"(claim >= {CPU_CLAIMS['vs_sdpa']}x: {holds(t['vs_sdpa'] >= CPU_CLAIMS['vs_sdpa'])}), "
             f"{t['vs_naive']:.2f}x naive's (claim >= {CPU_CLAIMS['vs_naive']:g}x: {holds(t['vs_naive'] >= CPU_CLAIMS['vs_naive'])})"]
    if t.get("memory_fraction") is not None:
        lines.append(f"  H=1 N=8192 d=64: extra peak memory {t['peak_flash_mb']:.1f} MB vs naive's {t['peak_naive_mb']:.1f} MB "
                     f"= 1/{1 / t['memory_fraction']:.0f} (claim <= 1/{1 / CPU_CLAIMS['memory_fraction']:.0f}: "
                     f"{holds(t['memory_fraction'] <= CPU_CLAIMS['memory_fraction'])})")
    return "\n".join(lines)


def gpu_sweep(*, Ns=(1024, 2048, 4096, 8192, 16384), d=(64, 128), dtypes=("float16", "bfloat16"), B: int = 4, H: int = 16,
              causal=(False, True), rounds: int = 3, progress: bool = True) -> tuple[list, dict]:
    """The GPU sweep: every kernel that runs there, plus the summary of the course's GPU claim
    (Triton forward TFLOP/s over SDPA flash's at d = 64, 128 and N = 4096-16384; the claim is ≥ 0.7).

    Taught in: notebooks/08_hardware_runs.ipynb
    """
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device here (torch.cuda.is_available() is False): the GPU sweep needs one")
    rows = measure.run_sweep(Ns, d=d, dtypes=dtypes, causal=causal, B=B, H=H, kernels=GPU_KERNELS, device="cuda",
                             rounds=rounds, min_run_time=0.1, memory=True, progress=progress)
    summary = {}
    done = [r for r in rows if not r.get("skipped")]
    for r in done:
        if r["kernel"] != "triton" or r["N"] < 4096:
            continue
        base = [s for s in done if s["kernel"] == "sdpa flash" and all(s[k] == r[k] for k in ("dtype", "N", "d", "causal"))]
        if base:
            summary[f"{r['dtype']} d={r['d']} N={r['N']}{' causal' if r['causal'] else ''}"] = r["tflops"] / base[0]["tflops"]
    return rows, summary


def _parser():
    p = argparse.ArgumentParser(prog="python -m lab.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--N", type=int, nargs="+", default=[512, 1024, 2048, 4096], help="sequence lengths (N = M)")
    p.add_argument("--d", type=int, nargs="+", default=[64], help="head dims")
    p.add_argument("--dtype", nargs="+", default=["float32"], choices=["float16", "bfloat16", "float32", "float64"])
    p.add_argument("--causal", choices=["no", "yes", "both"], default="no")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--kernels", nargs="+", default=None, choices=sorted(measure.KERNELS), metavar="KERNEL",
                   help=f"any of: {', '.join(measure.KERNELS)}")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice, all cores)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    p.add_argument("--min-run-time", type=float, default=0.1, help="seconds per kernel per round")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--no-targets", action="store_true", help="skip the measurements of the course's CPU claims")
    p.add_argument("--no-record", action="store_true", help="do not write a JSON record")
    p.add_argument("--record-dir", default=None,
                   help="folder for the JSON record (default: your own runs folder, lab.user_runs_dir(), outside the "
                        "repository; lab/data/runs to add a run to the ones the course ships)")
    p.add_argument("--out", default=None, help="path of the JSON record (overrides --record-dir)")
    p.add_argument("--label", default=None, help="a label for the record")
    p.add_argument("--verify", action="store_true", help="only the accuracy table: max |flash - standard| at four (B, N, d)")
    p.add_argument("--gpu-sweep", action="store_true", help="the prepared GPU sweep (needs an NVIDIA GPU)")
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
        torch.set_num_threads(args.threads)                 # the ceilings, the sweep and the memory child alike
    machine = measure.describe_machine()
    gpu = (machine.get("gpu") or {}).get("name")
    print(f"machine: {machine['cpu']} ({machine['cores']} cores, {machine['torch_threads']} torch threads, "
          f"BLAS {machine['blas'].get('blas_info', '?')}); GPU: {gpu or 'none'}; torch {machine['versions']['torch']}, "
          f"triton {machine['versions']['triton']}")
    if args.verify:
        device = "cuda" if args.device == "cuda" or (args.gpu_sweep and torch.cuda.is_available()) else "cpu"
        rows = measure.verify_accuracy(device=device, progress=progress)
        print(measure.accuracy_table(rows))
        print("910B3: max |flash - standard| of a reported run on an Ascend 910B3 (CANN 8.0.1), fp32.")
        if not args.no_record:
            path = measure.record_run([], settings={"mode": "verify", "device": device}, machine=machine, label=args.label,
                                      path=args.out, runs_dir=args.record_dir, extra={"accuracy": rows})
            print(f"recorded: {path}")
        return 0
    if args.gpu_sweep:
        if not torch.cuda.is_available():
            print("no CUDA device here (torch.cuda.is_available() is False): the GPU sweep needs an NVIDIA GPU and a CUDA build of torch.")
            return 2
        ceilings = measure.measure_ceilings("cuda")
        rows, summary = gpu_sweep(progress=progress)
        print(measure.results_table(rows))
        print("The course's GPU claim: Triton forward TFLOP/s / SDPA flash's >= 0.70:")
        for key, ratio in summary.items():
            print(f"  {key}: {ratio:.2f} ({'met' if ratio >= 0.7 else 'not met'})")
        if not args.no_record:
            path = measure.record_run(rows, settings={"mode": "gpu-sweep", "B": 4, "H": 16}, machine=machine, ceilings=ceilings,
                                      label=args.label, path=args.out, runs_dir=args.record_dir, extra={"targets": {"triton_vs_sdpa_flash": summary}})
            print(f"recorded: {path}")
        return 0
    causal = {"no": (False,), "yes": (True,), "both": (False, True)}[args.causal]
    kernels = args.kernels or (CPU_KERNELS if args.device == "cpu" else GPU_KERNELS)
    ceilings = measure.measure_ceilings(args.device)
    rows = measure.run_sweep(args.N, d=args.d, dtypes=args.dtype, causal=causal, B=args.B, H=args.H, kernels=kernels,
                             device=args.device, rounds=args.rounds, min_run_time=args.min_run_time,
                             memory=not args.no_memory, progress=progress, threads=args.threads)
    print(measure.results_table(rows))
    print(f"ceilings: matmul fp32 {ceilings['matmul_fp32_flops'] / 1e9:.0f} GFLOP/s, "
          f"memory bandwidth {ceilings['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s")
    targets = None
    if args.device == "cpu" and not args.no_targets:
        targets = cpu_targets(memory=not args.no_memory, progress=progress, threads=args.threads)
        print(_targets_text(targets))
    if not args.no_record:
        settings = {"mode": "sweep", "N": args.N, "d": args.d, "dtypes": args.dtype, "causal": list(causal), "B": args.B,
                    "H": args.H, "device": args.device, "threads": args.threads or torch.get_num_threads(), "rounds": args.rounds, "min_run_time": args.min_run_time}
        path = measure.record_run(rows, settings=settings, machine=machine, ceilings=ceilings, label=args.label,
                                  path=args.out, runs_dir=args.record_dir, extra={"targets": targets})
        print(f"recorded: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
