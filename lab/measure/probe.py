"""The child process behind `lab.peak_memory` on a CPU: the peak resident memory of each attention call.

    python -m lab.measure.probe '[{"kernel": "torch naive", "B": 1, "H": 1, "N": 2048, "d": 64}]' --threads 1

prints one JSON list, bytes per case (null where Linux's /proc is missing). Each case is called once to
warm up (one-time BLAS buffers are not the kernel's), then Linux's peak resident size is reset
(`5` into /proc/self/clear_refs) and the second call's peak is read: VmHWM after the call minus VmRSS
just before it. `lab.peak_memory` starts it with glibc's mmap threshold at 64 KiB, so each freed buffer
leaves the resident size; started by hand without that (MALLOC_MMAP_THRESHOLD_=65536
MALLOC_TRIM_THRESHOLD_=0), freed memory may stay resident and later peaks read low.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import argparse
import json


def _status(key: str) -> int | None:
    """Bytes of the field `key` (VmRSS, VmHWM) in /proc/self/status, None when it is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current resident size; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def probe(cases) -> list:
    """Peak resident bytes above the inputs of each case {kernel, B, H, N, d, dtype, causal}: VmHWM during the call − VmRSS before it."""
    import torch

    from .kernels import KERNELS, make_inputs

    x = torch.randn(64, 64)
    (
        torch.softmax(x @ x, -1) @ x
    ).sum()  # warm the thread pool and BLAS before any baseline
    out = []
    for case in cases:
        fn, _ = KERNELS[case["kernel"]]
        q, k, v = make_inputs(
            case["kernel"],
            case["B"],
            case["H"],
            case["N"],
            case["d"],
            dtype=case.get("dtype", "float32"),
        )
        causal = case.get("causal", False)
        fn(
            q, k, v, causal
        )  # warm-up call: one-time buffers of the BLAS are not the kernel's
        fresh = _reset_peak()
        base = _status("VmRSS")
        o = fn(q, k, v, causal)
        peak = _status("VmHWM") if fresh else None
        del o
        out.append(None if peak is None or base is None else max(0, peak - base))
    return out


def main(argv=None) -> int:
    """Command line: the cases as a JSON list, torch's thread count; prints the peaks as a JSON list."""
    parser = argparse.ArgumentParser(
        prog="python -m lab.measure.probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "cases", help='JSON list of {"kernel", "B", "H", "N", "d", "dtype", "causal"}'
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice)",
    )
    args = parser.parse_args(argv)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(json.dumps(probe(json.loads(args.cases))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
