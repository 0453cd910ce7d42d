#!/usr/bin/env bash
# Two kvstash builds measured in one run, alternating: `kvstash bench` throughput at concurrency 16
# against each one's server, and `bench-engine` decode. Prints the figures and the after/before ratios.
#   scripts/bench/before_after.sh BEFORE/kvstash AFTER/kvstash MODEL.gguf [ROUNDS]
set -euo pipefail
before=$1 after=$2 model=$3 rounds=${4:-2}
port=18190
out=$(mktemp -d)
serve_and_bench() {  # bin tag round
  "$1" serve -m "$model" --host 127.0.0.1 --port $port --ctx 2048 --parallel 16 --no-kv-store > "$out/$2-$3.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.5; done
  "$after" bench --url "http://127.0.0.1:$port" --workload random --input-len 128 --output-len 32 --ignore-eos \
    --concurrency 16 --requests 32 --seed "$3" --no-progress --out "$out/$2-$3.json" > /dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true
  "$1" bench-engine -m "$model" --json --prompt-tokens 256 --decode-tokens 32 --repeats 1 > "$out/$2-$3-engine.json" 2>/dev/null
}
for r in $(seq 1 "$rounds"); do
  serve_and_bench "$before" before "$r"
  serve_and_bench "$after" after "$r"
done
python3 - "$out" "$rounds" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
def load(tag, key):
    vals = []
    for r in range(1, rounds + 1):
        s = json.load(open(f"{out}/{tag}-{r}.json"))["summary"]
        e = json.load(open(f"{out}/{tag}-{r}-engine.json"))
        vals.append((s, e))
    return vals
for tag in ("before", "after"):
    rows = load(tag, None)
    tput = [s["output_throughput"] for s, _ in rows]
    dec1 = [e["decode_tokens_per_s"] for _, e in rows]
    print(f"{tag}: output tokens/s at concurrency 16 {[round(x,1) for x in tput]}, bench-engine decode batch 1 tokens/s {[round(x,1) for x in dec1]}")
    globals()[tag] = (statistics.median(tput), statistics.median(dec1))
print(f"after/before: throughput {after[0]/before[0]:.3f}, decode batch 1 {after[1]/before[1]:.3f}")
PY
echo "raw results: $out"
