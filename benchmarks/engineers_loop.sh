#!/usr/bin/env bash
# The serving engineer's CPU loop (issue 47 item 6), as docs/results/2026-12-06-engineers-loop.md
# runs it: calibrate --endpoint against batchlab's own server, refit with the server's step
# table (--server-run), then validate both profiles on another workload (the Azure
# conversation trace's first 180 s, lengths / SCALE) against a second server, each replay
# levelled by idle speed probes. Run on a quiet machine (about 20 minutes).
#     [WORKLOAD=azure_conv] [WINDOW=180] [SCALE=8] [REPEATS=3] \
#         bash benchmarks/engineers_loop.sh WORKDIR [PORT]
# SCALE: pick it so the workload keeps the tiny model busy but stable on the CPU at hand
# (`batchlab simulate --profile probes-server.json ... --length-scale S` says stable), and
# so that replies keep more than a token or two (the code trace's are short: SCALE 12+).
# Servers bind 127.0.0.1 and are stopped by their process ids (SIGINT: they write their
# tables as they stop).
set -euo pipefail
work=${1:?usage: engineers_loop.sh WORKDIR [PORT]}
port=${2:-8017}
workload=${WORKLOAD:-azure_conv}
window=${WINDOW:-180}
scale=${SCALE:-8}
repeats=${REPEATS:-3}
url=http://127.0.0.1:$port
mkdir -p "$work" && cd "$work"
serve() {  # serve OUTDIR: start a server, wait until /health answers
    python -m batchlab serve --model batchlab-tiny --threads 1 --max-num-seqs 16 \
        --host 127.0.0.1 --port "$port" --out "$1" --no-progress > "$1.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do
        curl -sf "$url/health" > /dev/null && return 0
        kill -0 "$pid" 2> /dev/null || { cat "$1.log"; exit 1; }
        sleep 1
    done
    echo "server $1 did not come up" >&2; kill -INT "$pid"; exit 1
}
stop() { kill -INT "$pid"; wait "$pid" || true; }
trap 'kill -INT "$pid" 2> /dev/null || true' EXIT
echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): probes"
serve srv
python -m batchlab calibrate --endpoint "$url" --out probes
stop
serve srv2
echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): refit with the server's steps"
python -m batchlab calibrate --from-replay probes --server-run srv --metrics "$url" \
    --out probes-server.json
for profile in probes/profile.json probes-server.json; do
    name=$(basename "$profile" .json)
    echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): validate $name"
    python -m batchlab validate --endpoint "$url" --profile "$profile" \
        --workload "$workload" --window-duration "$window" --length-scale "$scale" --max-num-seqs 16 \
        --repeats "$repeats" --out "val-$name" || true  # a miss exits 1: keep going
done
stop
echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg): done"
