#!/usr/bin/env bash
# Issue 16's "decode tokens/s at 16k context with the budget vs full attention", one process:
# bench-engine prefills the context once and times decode steps of both sides interleaved
# (engine/budget_bench.h). Records the load average before, every minute during, and after.
#   scripts/bench/kv_budget_decode.sh BUILD MODEL.gguf OUT_DIR [CONTEXT] [BUDGET] [STEPS] [THREADS]
set -euo pipefail
build=$1 model=$2 out=$3 context=${4:-16384} budget=${5:-2048} steps=${6:-64} threads=${7:-2}
mkdir -p "$out"
echo "$(date -u +%FT%TZ) before: $(cat /proc/loadavg)" > "$out/load.txt"
( while sleep 60; do echo "$(date -u +%FT%TZ) during: $(cat /proc/loadavg)" >> "$out/load.txt"; done ) &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
cmd=("$build/kvstash" bench-engine -m "$model" -t "$threads" --decode-context "$context" --decode-tokens "$steps"
     --kv-budget "$budget" --json)
echo "${cmd[*]}" > "$out/command.txt"
start=$(date +%s)
"${cmd[@]}" > "$out/result.json"
echo "$(date -u +%FT%TZ) after: $(cat /proc/loadavg) ($(( $(date +%s) - start )) s)" >> "$out/load.txt"
cat "$out/load.txt" "$out/result.json"
