#!/usr/bin/env bash
# Issue 45 on the GPU machine, in one short run: the backend's fast path (paged attention
# read in place, fused elementwise, CUDA graphs for decode) against the reference path:
# exactness (greedy outputs token for token, one mixed step's logits) and decode timing
# (graphs on and off, kernels' time, the copy-bandwidth bound). Prepare with fetch.sh,
# then with the device tool:
#   run(command="bash benchmarks/gpu/engine_check.sh", carry=[".gpu"], timeout_s=540)
# What comes back ($OUT): env.txt, engine.txt, engine.json. Write them up under
# docs/results/ (docs/results/2026-12-06-backend-engine.md says what each figure is).
# Smaller and quicker: MODEL=batchlab-small DTYPE=float16 KV=4GiB bash benchmarks/gpu/engine_check.sh
set -uo pipefail
MODEL=${MODEL:-benchmarks/gpu/llama-3-8b}; DTYPE=${DTYPE:-bfloat16}; KV=${KV:-16GiB}
OUT=${OUT:-out/engine_check}; BS=${BS:-16}
. benchmarks/gpu/wheels.sh
mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | head -3
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 500 python3 benchmarks/gpu/engine_check.py --model "$MODEL" --dtype "$DTYPE" --kv "$KV" \
  --bs "$BS" --out "$OUT" ${PARTS:+--parts "$PARTS"} 2>&1 | grep -v '^USDT\|^STAGE:' | tee "$OUT/engine.txt"
