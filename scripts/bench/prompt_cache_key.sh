#!/usr/bin/env bash
# Issue 35's prompt_cache_key figure: four `kvstash serve` workers behind `kvstash route --policy
# cache-aware`, a multi-turn workload (8 users x 5 turns) sent twice against fresh workers: once
# with a prompt_cache_key per user (`kvstash bench --prompt-cache-key`), once without. For each run:
# the share of each user's turns on its most used worker (the target: >= 95 % with keys), the
# turns' cached-token ratio, and TTFT.
#
#   scripts/bench/prompt_cache_key.sh [BUILD_DIR] [PRESET] [OUT_DIR]    (defaults: build tiny /tmp/pck)
#
# Ports 18620 (router) and 18621-18624 (workers) must be free. MODEL_FILE=PATH uses that GGUF.
set -euo pipefail
BUILD=${1:-build}
PRESET=${2:-tiny}
OUT=${3:-/tmp/pck}
KV="$BUILD/kvstash"
mkdir -p "$OUT"
MODEL=${MODEL_FILE:-$OUT/$PRESET.gguf}
[ -f "$MODEL" ] || "$KV" gen-model --preset "$PRESET" --out "$MODEL" >/dev/null
USERS=${USERS:-8}
WORKLOAD=(--workload multi-turn --users "$USERS" --rounds "${ROUNDS:-5}" --input-len "${INPUT_LEN:-512}" --question-len 32
          --output-len 16 --ignore-eos --api chat --concurrency "$USERS" --no-progress --timeout 600)
# shellcheck source=scripts/bench/lib.sh
source "$(dirname "$0")/lib.sh"
start() {
  local workers=()
  for i in 1 2 3 4; do
    "$KV" serve -m "$MODEL" --port $((18620 + i)) --threads 1 --parallel 16 --cache-ram 256MiB \
      --identity "$OUT/w$i.key" >"$OUT/w$i.log" 2>&1 &
    pids+=($!)
    workers+=(--worker "http://127.0.0.1:$((18620 + i))")
  done
  for i in 1 2 3 4; do wait_port $((18620 + i)); done
  "$KV" route -m "$MODEL" --port 18620 --policy cache-aware "${workers[@]}" >"$OUT/router.log" 2>&1 &
  pids+=($!)
  wait_port 18620
  sleep 1  # the event subscriptions connect
}
for leg in keys no-keys; do
  echo "== 4 workers, cache-aware, $leg"
  start
  flag=()
  [ "$leg" = keys ] && flag=(--prompt-cache-key)
  "$KV" bench --url http://127.0.0.1:18620 "${WORKLOAD[@]}" "${flag[@]}" --out "$OUT/$leg.json" >"$OUT/$leg.txt" 2>&1 ||
    echo "(bench: some requests failed)"
  cleanup
done
python3 - "$OUT" <<'PY'
import json, sys, collections
out = sys.argv[1]
for leg in ("keys", "no-keys"):
    r = json.load(open(f"{out}/{leg}.json"))
    by_user = collections.defaultdict(list)
    for rec in r["records"]:
        by_user[rec["session_id"]].append(rec["worker"])
    turns = sum(len(w) for w in by_user.values())
    on_main = sum(collections.Counter(w).most_common(1)[0][1] for w in by_user.values())
    workers = len({w for ws in by_user.values() for w in ws})
    s = r["summary"]
    print(f"{leg:8s} turns on each user's main worker {on_main}/{turns} = {on_main / turns:.3f}  "
          f"workers used {workers}  cached-token ratio {s['cached_token_ratio']:.3f}  "
          f"TTFT p50 {s['ttft_ms']['p50']:.1f} ms p99 {s['ttft_ms']['p99']:.1f} ms  errors {sum(s['errors'].values()) if isinstance(s['errors'], dict) else s['errors']}")
PY
echo "uptime: $(uptime)"
