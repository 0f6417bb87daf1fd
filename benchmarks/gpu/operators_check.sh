#!/usr/bin/env bash
# Issue 28 item 6 (run on an H200 on 2026-12-04: docs/results/2026-12-04-h200-backend-check.md):
# calibrate batchlab's own backend on the GPU with a Llama-3-8B-shaped model
# (llama-3-8b/config.json: the shape of meta-llama/Meta-Llama-3-8B's config.json, seeded
# random weights drawn on the GPU), then price its measured steps with the GPU profile
# fitted on public operator timings for the same GPU, or the nearest measured one scaled
# by datasheet ratios (compare_operators.py). Prepare with fetch.sh (wheels for simpy and
# pydantic), then with the device tool:
#   run(command="bash benchmarks/gpu/operators_check.sh", carry=[".gpu"], timeout_s=450)
# If the 8B model cannot be built or calibrated, batchlab-small (bfloat16) is calibrated
# instead, so the lease still brings back one profile.
# A dry run of the same steps on this CPU (the figures mean nothing; it checks the plumbing):
#   DEVICE=cpu DTYPE=float32 MODEL=batchlab-tiny GRID=quick GPU=a100-80gb OUT=/tmp/ops_dry \
#     bash benchmarks/gpu/operators_check.sh
# What comes back ($OUT): env.txt, profile.json (+ its .jsonl of raw timings), calibrate.txt,
# compare.txt, and the public profile refined on these steps (refined.json, refine.txt;
# refused on a CPU dry run).
set -uo pipefail
DEVICE=${DEVICE:-cuda}; MODEL=${MODEL:-benchmarks/gpu/llama-3-8b}; GRID=${GRID:-default}
DTYPE=${DTYPE:-bfloat16}; GPU=${GPU:-auto}; OUT=${OUT:-out/operators_check}; KV=${KV:-8GiB}
. benchmarks/gpu/wheels.sh
mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv 2>&1 | head -3
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
  nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
t0=$SECONDS
calibrate() {  # MODEL: one calibration, the serving phase kept even if the host looked busy
  timeout "$1" python3 -m batchlab calibrate --model "$2" --device "$DEVICE" --dtype "$DTYPE" \
    --grid "$GRID" --kv-memory "$KV" --out "$OUT/profile.json" --on-contention keep \
    --no-progress 2>&1 | tee -a "$OUT/calibrate.txt"
}
calibrate 330 "$MODEL"
if [ ! -s "$OUT/profile.json" ]; then
  echo "operators_check.sh: $MODEL wrote no profile; calibrating batchlab-small instead" | tee -a "$OUT/calibrate.txt"
  [ -f "$OUT/profile.jsonl" ] && mv "$OUT/profile.jsonl" "$OUT/partial.jsonl"  # what was timed
  calibrate 200 batchlab-small
fi
[ -s "$OUT/profile.json" ] || { echo "operators_check.sh: calibration wrote no profile"; exit 1; }
echo "calibrated in $((SECONDS - t0)) s"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1 | head -2 >> "$OUT/env.txt"
python3 benchmarks/gpu/compare_operators.py "$OUT/profile.json" --gpu "$GPU" 2>&1 | tee "$OUT/compare.txt"
PRESET=$(python3 benchmarks/gpu/compare_operators.py "$OUT/profile.json" --gpu "$GPU" --print-preset)
python3 -m batchlab calibrate --from-operators "$OUT/profile.json" --gpu "$PRESET" \
  --out "$OUT/refined.json" 2>&1 | tee "$OUT/refine.txt"
