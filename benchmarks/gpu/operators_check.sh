#!/usr/bin/env bash
# Issue 28 item 6, prepared and not yet run (no GPU was lent to the session that wrote it):
# calibrate batchlab's own backend on the GPU, then price its measured steps with the GPU
# profile fitted on public operator timings for the same GPU (compare_operators.py). Prepare
# with fetch.sh (wheels for simpy and pydantic), then with the device tool:
#   run(command="bash benchmarks/gpu/operators_check.sh", carry=[".gpu"], timeout_s=420)
# A dry run of the same steps on this CPU (the figures mean nothing; it checks the plumbing):
#   DEVICE=cpu DTYPE=float32 MODEL=batchlab-tiny GRID=quick GPU=a100-80gb OUT=/tmp/ops_dry \
#     bash benchmarks/gpu/operators_check.sh
# What comes back ($OUT): env.txt, profile.json, calibrate.txt, compare.txt, and the public
# profile refined on these steps (refined.json, refine.txt; refused on a CPU dry run).
set -uo pipefail
DEVICE=${DEVICE:-cuda}; MODEL=${MODEL:-batchlab-small}; GRID=${GRID:-default}
DTYPE=${DTYPE:-bfloat16}; GPU=${GPU:-auto}; OUT=${OUT:-out/operators_check}; KV=${KV:-4GiB}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if [ -d .gpu/wheels ] && ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/wheels/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
fi
mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } \
  > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 330 python3 -m batchlab calibrate --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" \
  --grid "$GRID" --kv-memory "$KV" --out "$OUT/profile.json" --no-progress 2>&1 | tee "$OUT/calibrate.txt"
[ -s "$OUT/profile.json" ] || { echo "operators_check.sh: calibration wrote no profile"; exit 1; }
python3 benchmarks/gpu/compare_operators.py "$OUT/profile.json" --gpu "$GPU" 2>&1 | tee "$OUT/compare.txt"
PRESET=$(python3 benchmarks/gpu/compare_operators.py "$OUT/profile.json" --gpu "$GPU" --print-preset)
python3 -m batchlab calibrate --from-operators "$OUT/profile.json" --gpu "$PRESET" \
  --out "$OUT/refined.json" 2>&1 | tee "$OUT/refine.txt"
