#!/usr/bin/env bash
# Issue 12's figures: four `kvstash serve` workers behind `kvstash route`, a multi-turn workload
# (16 users x 6 rounds) per policy against fresh workers each time, the same workload against one
# worker directly, and the routing overhead at 200 requests/s of short requests: as the router
# measures it (/metrics), and end to end (one worker, direct vs through the router, same run).
#
#   scripts/bench/router_bench.sh [BUILD_DIR] [PRESET] [OUT_DIR]     (defaults: build tiny /tmp/r12)
#
# ONLY_OVERHEAD=1 runs the last part only; ONLY_MULTI_TURN=1 the first part only; SINGLE=0 skips
# its one-worker leg; POLICIES="a b" picks the policies. MODEL_FILE=PATH uses
# that GGUF instead of generating PRESET (e.g. a qwen2.5-0.5b q8_0 file: the tiny preset's 16-wide
# heads make its decode steps cost as much per token as prefill, unlike any real model). Ports 18610 (router) and 18611-18614 (workers) must be free. Prints one summary per run; the
# JSON results land in OUT_DIR. The end-to-end part runs its direct and routed legs one after the
# other, then both at the same time.
set -euo pipefail
BUILD=${1:-build}
PRESET=${2:-tiny}
OUT=${3:-/tmp/r12}
KV="$BUILD/kvstash"
mkdir -p "$OUT"
MODEL=${MODEL_FILE:-$OUT/$PRESET.gguf}
[ -f "$MODEL" ] || "$KV" gen-model --preset "$PRESET" --out "$MODEL" >/dev/null
WORKLOAD=(--workload multi-turn --users "${USERS:-16}" --rounds "${ROUNDS:-6}" --input-len "${INPUT_LEN:-512}" --question-len 32
          --output-len 16 --ignore-eos --api chat --concurrency "${USERS:-16}" --no-progress --timeout 600)
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
start_workers() {  # $1 = how many
  for i in $(seq 1 "$1"); do
    "$KV" serve -m "$MODEL" --port $((18610 + i)) --threads "${WORKER_THREADS:-1}" --parallel 16 --cache-ram 256MiB \
      --identity "$OUT/w$i.key" >"$OUT/w$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq 1 "$1"); do wait_port $((18610 + i)); done
}
start_router() {  # $1 = policy
  local workers=()
  for i in 1 2 3 4; do workers+=(--worker "http://127.0.0.1:$((18610 + i))"); done
  "$KV" route -m "$MODEL" --port 18610 --policy "$1" "${workers[@]}" ${ROUTE_FLAGS:-} >"$OUT/router-$1.log" 2>&1 &
  pids+=($!)
  wait_port 18610
  sleep 1  # the event subscriptions connect
}

if [ -z "${ONLY_OVERHEAD:-}" ]; then
if [ "${SINGLE:-1}" != 0 ]; then  # SINGLE=0 skips the one-worker reference
echo "== single worker, direct"
start_workers 1
"$KV" bench --url http://127.0.0.1:18611 "${WORKLOAD[@]}" --out "$OUT/single.json" || echo "(bench: some requests failed)"
cleanup
fi

for policy in ${POLICIES:-cache-aware round-robin least-loaded prefix-hash}; do
  echo "== 4 workers, router --policy $policy"
  start_workers 4
  start_router "$policy"
  "$KV" bench --url http://127.0.0.1:18610 "${WORKLOAD[@]}" --out "$OUT/$policy.json" || echo "(bench: some requests failed)"
  curl -s http://127.0.0.1:18610/metrics >"$OUT/metrics-$policy.txt" || echo "no /metrics" >&2
  grep -E '^kvstash_router_(requests_total|predicted|actual|overhead_quantile)' "$OUT/metrics-$policy.txt" || true
  cleanup
done

fi  # ONLY_OVERHEAD
if [ -n "${ONLY_MULTI_TURN:-}" ]; then echo "uptime: $(uptime)"; exit 0; fi

echo "== routing overhead: 200 req/s of short requests (max_tokens 1), cache-aware"
start_workers 4
start_router cache-aware
"$KV" bench --url http://127.0.0.1:18610 --workload random --input-len 16 --output-len 1 --ignore-eos \
  --api completions --rate 200 --requests "${OVERHEAD_REQUESTS:-2000}" --no-progress --out "$OUT/overhead.json" ||
  echo "(bench: some requests failed)"
curl -s http://127.0.0.1:18610/metrics >"$OUT/metrics-overhead.txt" || echo "no /metrics" >&2
grep -E '^kvstash_router_(overhead|queue|decision|return)_quantile|^kvstash_router_upstream' "$OUT/metrics-overhead.txt" || true
cleanup

# End to end, the same run: one worker, the short workload straight to it, then through a router
# in front of it (policy cache-aware), then straight again; router-added TTFT = through - direct.
echo "== router-added TTFT end to end: one worker, direct vs through the router, 200 req/s"
SHORT=(--workload random --input-len 16 --output-len 1 --ignore-eos --api completions --rate 200
       --requests "${OVERHEAD_REQUESTS:-2000}" --no-progress)
start_workers 1
"$KV" route -m "$MODEL" --port 18610 --policy cache-aware --worker http://127.0.0.1:18611 ${ROUTE_FLAGS:-} \
  >"$OUT/router-e2e.log" 2>&1 &
pids+=($!)
wait_port 18610
sleep 1
for leg in direct1:18611 router:18610 direct2:18611; do
  echo "-- ${leg%%:*}"
  "$KV" bench --url "http://127.0.0.1:${leg##*:}" "${SHORT[@]}" --out "$OUT/e2e-${leg%%:*}.json" 2>&1 |
    grep -E 'TTFT p(50|99)|throughput|completed|router-added' || echo "(bench: some requests failed)"
done
curl -s http://127.0.0.1:18610/metrics >"$OUT/metrics-e2e.txt" || echo "no /metrics" >&2
grep -E '^kvstash_router_(overhead|queue|decision|return)_quantile' "$OUT/metrics-e2e.txt" || true
# The same two legs at the same time (each at the rate above, so the worker sees twice it): both
# meet the same machine load, which the sequential legs above do not on a shared machine.
echo "== router-added TTFT end to end, legs at the same time: direct and through the router"
"$KV" bench --url http://127.0.0.1:18611 "${SHORT[@]}" --out "$OUT/e2e-concurrent-direct.json" >"$OUT/e2e-concurrent-direct.txt" 2>&1 &
bench_direct=$!
"$KV" bench --url http://127.0.0.1:18610 "${SHORT[@]}" --out "$OUT/e2e-concurrent-router.json" >"$OUT/e2e-concurrent-router.txt" 2>&1 || true
wait "$bench_direct" || true
for leg in direct router; do
  echo "-- $leg"
  grep -E 'TTFT p(50|99)|completed|router-added' "$OUT/e2e-concurrent-$leg.txt" || true
done
cleanup
echo "uptime: $(uptime)"
