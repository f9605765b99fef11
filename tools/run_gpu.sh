#!/usr/bin/env bash
# The prepared GPU run: for a session lent an NVIDIA GPU. Run from the repository root:
#   bash tools/run_gpu.sh            (PYTHON=... to choose the interpreter; default .venv/bin/python)
# It needs a CUDA build of torch and triton on that machine (the course's .venv holds the CPU build).
# The steps are the benchmark tooling beside the package (labbench/: gpu_check.py, cli.py as `python -m lab.bench`).
# It records, into data/runs/ (the runs the course ships): the GPU sweep (fp16/bf16, d 64 and 128, N 1K-16K, B=4, H=16, causal and
# not; every SDPA backend, torch naive, lab torch flash, Triton compiled) and the accuracy table.
# Takes about 5-8 minutes on an H100/H200; each step has its own time limit.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible to $PY (torch.cuda.is_available() is False): nothing to record."
  exit 0
fi
# 1. the Triton kernels (forward and backward) against the oracle on the GPU, small shapes (seconds)
timeout 120 "$PY" -m labbench.gpu_check
# 2. the sweep, recorded
timeout 540 "$PY" -m lab.bench --gpu-sweep --quiet --record-dir data/runs
# 3. the accuracy table on the GPU, recorded
timeout 180 "$PY" -m lab.bench --verify --device cuda --quiet --record-dir data/runs
ls -l data/runs/
