#!/usr/bin/env bash
# Issue 14 item 6 in one short run on the GPU machine: calibrate batchlab-small on cuda, then
# validate two workloads of different shapes (open-loop chat; the Azure code trace's bursty
# window), both policies, each served twice (the noise floor), at a load the fresh profile's
# simulation sizes (pick_rate.py). Prepare here with fetch.sh, then with the device tool:
#   run(command="bash benchmarks/gpu/check.sh", carry=[".gpu"], timeout_s=560)
# A dry run of the same steps on this CPU (a minute or two):
#   DEVICE=cpu MODEL=batchlab-tiny GRID=quick OUT=/tmp/gpu_dry bash benchmarks/gpu/check.sh
# What comes back ($OUT, at most 8 files): env.txt, profile.json, calibrate.txt,
# validate_chat.txt, validate_code.txt, runs.tgz (every run's tables).
set -uo pipefail
DEVICE=${DEVICE:-cuda}; MODEL=${MODEL:-batchlab-small}; GRID=${GRID:-default}
OUT=${OUT:-out/gpu_check}; N=${N:-64}; KV=${KV:-4GiB}
export BATCHLAB_TRACES="${BATCHLAB_TRACES:-$PWD/.gpu/traces}"
. benchmarks/gpu/wheels.sh
mkdir -p "$OUT/work"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
t0=$SECONDS
timeout 330 python3 -m batchlab calibrate --model "$MODEL" --device "$DEVICE" --grid "$GRID" \
  --kv-memory "$KV" --out "$OUT/profile.json" --no-progress 2>&1 | tee "$OUT/calibrate.txt"
[ -s "$OUT/profile.json" ] || { echo "check.sh: calibration wrote no profile"; exit 1; }
echo "calibrated in $((SECONDS - t0)) s"
common=(--model "$MODEL" --device "$DEVICE" --kv-memory "$KV" --profile "$OUT/profile.json"
        --repeats 2 --policy continuous --policy chunked --no-progress)
run_validate() {  # NAME, workload args...: size the load, then serve and judge it
  local name=$1; shift
  local rate
  rate=$(python3 benchmarks/gpu/pick_rate.py "$OUT/profile.json" -- "$@" --num-requests "$N") || return
  echo "== $name at $rate requests/s: $*"
  timeout 150 python3 -m batchlab validate "$@" --num-requests "$N" --rate "$rate" "${common[@]}" \
    --out "$OUT/work/$name" 2>&1 | tee "$OUT/validate_$name.txt"
  python3 -m batchlab validate --real "$OUT/work/$name" --profile "$OUT/profile.json" \
    2>&1 | sed -n '/^over /,$p' | tee -a "$OUT/validate_$name.txt"
}
run_validate chat --workload chat --max-output-len 256
run_validate code --workload azure_code --window-start 180
tar czf "$OUT/runs.tgz" -C "$OUT" work && rm -rf "$OUT/work"
echo "check.sh: done in $((SECONDS - t0)) s; files in $OUT"
