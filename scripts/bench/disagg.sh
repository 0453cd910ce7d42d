#!/usr/bin/env bash
# Issue 34's two-worker figure: prefill/decode disaggregation against colocated serving on one
# machine. A redis-server, two `kvstash serve` workers (--threads 1 each, --cache-redis) and
# `kvstash route`, in three legs, each with fresh processes (empty pools, an empty redis):
#
#   idle        one prefill + one decode worker (serve --role), the streams only (no arrivals):
#               the decode worker's streams' gap (ITL) p99 when nothing else happens;
#   disagg      the same two workers, the mixed load: streaming users + Poisson long-prompt
#               arrivals; the arrivals are prefilled on the prefill worker (the router's hop),
#               loaded from redis and decoded on the decode worker, beside its streams;
#   colocated   two ordinary workers (--role colocated), cache-aware routing, the same load.
#
# Each leg runs `kvstash bench --workload mixed` through the router and prints, per class
# (stream, arrival): TTFT p50/p99, ITL p50/p99, goodput at --slo $SLO (requests meeting both
# objectives), and the router's prefill-hop counters; then the ratio the issue asks for: the
# disagg leg's stream ITL p99 over the idle leg's (target <= 1.25), beside the colocated leg's.
#
#   scripts/bench/disagg.sh [BUILD_DIR] [OUT_DIR]          (defaults: build /tmp/disagg)
#
# Model: MODEL_FILE=PATH, else the qwen2.5-0.5b preset, F16, with Qwen2's vocabulary
# (VOCAB=../shared/vocab/ggml-vocab-qwen2.gguf), generated into OUT_DIR once. The load (env):
# USERS=4 streams of ROUNDS=4 rounds of OUTPUT_LEN=128 tokens (prompts INPUT_LEN=64, questions
# 32), ARRIVALS=6 arrivals of ARRIVAL_LEN=1500 prompt tokens and ARRIVAL_OUTPUT_LEN=16 answer
# tokens at ARRIVAL_RATE=0.03 per second (Poisson) after ARRIVAL_DELAY=5 s, SLO=ttft:60000,itl:500
# (ms), PREFILL_MIN=1024 (route --prefill-min-tokens). LEGS="idle disagg colocated" picks legs.
# WORKER_NICE=N starts the workers at that nice value (default 0): on a machine whose cores the
# workers fill, the router's threads otherwise wait for a core behind them (the router-added TTFT
# measures that wait as much as the router's work); a deployment that shares cores would do the same.
# The defaults suit the 2-vCPU development VM, where one 1,500-token prefill takes about a
# minute on one thread: the arrival rate keeps the prefill worker about busy. Ports 18640
# (router), 18641-18642 (workers) and 18649 (redis) must be free. JSON results land in OUT_DIR.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/disagg}
KV="$BUILD/kvstash"
mkdir -p "$OUT"
VOCAB=${VOCAB:-../shared/vocab/ggml-vocab-qwen2.gguf}
MODEL=${MODEL_FILE:-$OUT/qwen2.5-0.5b-f16.gguf}
[ -f "$MODEL" ] || "$KV" gen-model --preset qwen2.5-0.5b --type f16 --vocab "$VOCAB" --out "$MODEL" >/dev/null
SLO=${SLO:-ttft:60000,itl:500}
ARRIVALS=${ARRIVALS:-6}
LOAD=(--workload mixed --users "${USERS:-4}" --rounds "${ROUNDS:-4}" --input-len "${INPUT_LEN:-64}" --question-len 32
      --output-len "${OUTPUT_LEN:-128}" --arrival-len "${ARRIVAL_LEN:-1500}"
      --arrival-output-len "${ARRIVAL_OUTPUT_LEN:-16}" --arrival-rate "${ARRIVAL_RATE:-0.03}"
      --arrival-delay "${ARRIVAL_DELAY:-5}" --ignore-eos --api chat --temperature 0 --slo "$SLO" --no-progress
      --timeout 1800)
ROUTER=18640
REDIS=18649
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"

start() {  # $1 $2 = the two workers' --role; the router takes the roles they report
  redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no >"$OUT/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$REDIS" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local workers=() i=1
  for role in "$1" "$2"; do
    nice -n "${WORKER_NICE:-0}" "$KV" serve -m "$MODEL" --port $((ROUTER + i)) --threads 1 --role "$role" --cache-redis "redis://127.0.0.1:$REDIS" \
      --identity "$OUT/w$i.key" >"$OUT/w$i-$role.log" 2>&1 &
    pids+=($!)
    workers+=(--worker "http://127.0.0.1:$((ROUTER + i))")
    i=$((i + 1))
  done
  wait_port $((ROUTER + 1))
  wait_port $((ROUTER + 2))
  "$KV" route -m "$MODEL" --port "$ROUTER" --policy cache-aware --prefill-min-tokens "${PREFILL_MIN:-1024}" "${workers[@]}" \
    >"$OUT/router.log" 2>&1 &
  pids+=($!)
  wait_port "$ROUTER"
  # The workers' roles reach the router with their /v1/kv/info (bounded wait).
  for _ in $(seq 100); do
    [ "$(curl -fs "http://127.0.0.1:$ROUTER/admin/workers" | grep -o '"reported_role":"[a-z]*"' | wc -l)" = 2 ] && return 0
    sleep 0.1
  done
  echo "the workers' roles never reached the router" >&2
  return 1
}

for leg in ${LEGS:-idle disagg colocated}; do
  case "$leg" in
    idle) start prefill decode; arrivals=0 ;;
    disagg) start prefill decode; arrivals=$ARRIVALS ;;
    colocated) start colocated colocated; arrivals=$ARRIVALS ;;
    *) echo "unknown leg $leg (idle, disagg, colocated)" >&2; exit 1 ;;
  esac
  echo "== $leg: $(curl -fs "http://127.0.0.1:$ROUTER/admin/workers" | grep -o '"role":"[a-z]*"' | tr '\n' ' ')"
  "$KV" bench --url "http://127.0.0.1:$ROUTER" "${LOAD[@]}" --arrivals "$arrivals" --out "$OUT/$leg.json" \
    >"$OUT/$leg.txt" 2>&1 || echo "(bench: some requests failed; $OUT/$leg.txt)"
  curl -fs "http://127.0.0.1:$ROUTER/metrics" >"$OUT/router-metrics-$leg.txt" || true
  grep -E '^kvstash_router_prefill_total' "$OUT/router-metrics-$leg.txt" | tr '\n' ' ' || true
  echo
  cleanup
done

python3 - "$OUT" ${LEGS:-idle disagg colocated} <<'PY'
import json, os, sys
out, legs = sys.argv[1], sys.argv[2:]
itl99 = {}
for leg in legs:
    path = f"{out}/{leg}.json"
    if not os.path.exists(path):
        print(f"{leg}: no result ({path})")
        continue
    r = json.load(open(path))
    classes = r["summary"].get("classes") or r.get("classes") or {}
    for name in ("stream", "arrival"):
        c = classes.get(name)
        if not c:
            continue
        t, i = c["ttft_ms"], c["itl_ms"]
        if name == "stream":
            itl99[leg] = i["p99"]
        print(f"{leg:9s} {name:7s} n={c['completed']}/{c['requests']}  TTFT p50 {t['p50']:9.1f} p99 {t['p99']:9.1f} ms  "
              f"ITL p50 {i['p50']:7.1f} p99 {i['p99']:7.1f} ms  good {c['good_requests']} goodput {c['goodput']:.4f} req/s")
    s = r["summary"]
    ra = s.get("router_added_ms") or {}
    print(f"{leg:9s} all     goodput {s['goodput']:.4f} req/s  errors {s['errors']}  "
          f"router-added TTFT p99 {ra.get('p99', float('nan')):.2f} ms")
for leg in ("disagg", "colocated"):
    if leg in itl99 and itl99.get("idle"):
        print(f"streams' ITL p99, {leg} / idle decode worker: {itl99[leg]:.1f} / {itl99['idle']:.1f} ms = "
              f"{itl99[leg] / itl99['idle']:.2f}x" + ("  (target <= 1.25x)" if leg == "disagg" else ""))
PY
echo "uptime: $(uptime)"
