#!/usr/bin/env bash
# The prepared GPU run: for a session lent an NVIDIA GPU. Run from the repository root:
#   bash tools/run_gpu.sh            (PYTHON=... to choose the interpreter; default .venv/bin/python)
# It needs a CUDA build of torch and triton on that machine (the course's .venv holds the CPU build).
# It records, into lab/data/runs/ (the runs the course ships): the GPU sweep (fp16/bf16, d 64 and 128, N 1K-16K, B=4, H=16, causal and
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
"$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))"
# 1. the Triton kernels (forward and backward) against the oracle on the GPU, small shapes (seconds)
timeout 120 "$PY" - <<'PYEOF'
import numpy as np, torch, lab
for dt in (torch.float16, torch.bfloat16, torch.float32):
    for causal in (False, True):
        for N, M, d in ((1, 1, 16), (17, 64, 64), (200, 200, 128), (1000, 777, 64)):
            g = torch.Generator().manual_seed(0)
            q = torch.randn(2, 4, N, d, generator=g); k, v = (torch.randn(2, 2, M, d, generator=g) for _ in range(2))
            ref = lab.attention_reference(q.numpy(), k.numpy(), v.numpy(), causal=causal)[0]
            o = lab.flash_attention_triton(*(t.to(dt).cuda() for t in (q, k, v)), causal=causal)
            err = float(np.abs(o.double().cpu().numpy() - ref).max())
            print(f"triton {dt} causal={causal} N={N} M={M} d={d}: max |o - ref| = {err:.1e}")
q, k, v = (torch.randn(2, 4, 300, 64, device="cuda", requires_grad=True) for _ in range(3))
do = torch.randn(2, 4, 300, 64, device="cuda")
got = torch.autograd.grad(lab.flash_attention_triton(q, k, v, causal=True), (q, k, v), do)
want = torch.autograd.grad(lab.flash_attention_torch(q, k, v, causal=True), (q, k, v), do)
print("triton backward vs torch kernel, fp32 (IEEE dots):", ", ".join(f"d{n} {float((a - b).abs().max()):.1e}" for n, a, b in zip("qkv", got, want)))
PYEOF
# 2. the sweep, recorded
timeout 540 "$PY" -m lab.bench --gpu-sweep --quiet --record-dir lab/data/runs
# 3. the accuracy table on the GPU, recorded
timeout 180 "$PY" -m lab.bench --verify --device cuda --quiet --record-dir lab/data/runs
ls -l lab/data/runs/
