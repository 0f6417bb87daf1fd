#!/usr/bin/env bash
# Issue 28 item 6, second half (run on an H200 on 2026-12-04:
# docs/results/2026-12-04-h200-backend-check.md): the GPU time of batchlab's backend steps,
# kernel by kernel (kernel_times.py), for the steps operators_check.sh timed whole. Price it here afterwards
# with compare_kernels.py. Prepare with fetch.sh, then with the device tool:
#   run(command="bash benchmarks/gpu/kernels_check.sh", carry=[".gpu"], timeout_s=360)
# A dry run on this CPU (no kernels to count; it checks the plumbing):
#   DEVICE=cpu DTYPE=float32 MODEL=batchlab-tiny KV=1GiB OUT=/tmp/kt_dry LIMIT=4 \
#     bash benchmarks/gpu/kernels_check.sh
set -uo pipefail
DEVICE=${DEVICE:-cuda}; MODEL=${MODEL:-benchmarks/gpu/llama-3-8b}; DTYPE=${DTYPE:-bfloat16}
OUT=${OUT:-out/kernels_check}; KV=${KV:-24GiB}; LIMIT=${LIMIT:-0}
. benchmarks/gpu/wheels.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv 2>&1 | head -2
timeout 300 python3 benchmarks/gpu/kernel_times.py --model "$MODEL" --device "$DEVICE" \
  --dtype "$DTYPE" --kv-memory "$KV" --out "$OUT" --extra --limit "$LIMIT" --regions "${REGIONS:-decode,prefill,mixed}" --profiled-reps "${PREPS:-5}" 2>&1 \
  | grep -v '^USDT\|^STAGE:' | tee "$OUT/kernel_times.txt"
