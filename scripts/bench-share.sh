#!/usr/bin/env bash
# Peer-sharing TTFT benchmark (issue 13): the first request of a 4,096-token document (followed by
# a 16-token question) on node A, which computes it (cold), then on node E, which never saw it and
# loads the document's KV from A through the DHT; same run, same binary, same flags. TTFT is the
# server's own figure (its request log line).
#
#   [QUESTION=N] scripts/bench-share.sh [BUILD_DIR] [MODEL]
#
# MODEL defaults to a qwen2.5-0.5b-shaped q8_0 model made by `kvstash gen-model` (random weights).
set -euo pipefail
build=${1:-build}
model=${2:-/tmp/kvstash-bench/qwen2.5-0.5b-q8_0.gguf}
tokens=4096    # the document: 16 chunks of 256
question=${QUESTION:-16}  # tokens after it: what E computes itself (QUESTION=0: the document alone)
work=$(mktemp -d /tmp/kvstash-bench-share.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$build/kvstash" gen-model --preset qwen2.5-0.5b --type q8_0 --out "$model" >/dev/null
fi

flags=(-m "$model" --host 127.0.0.1 --port 0 --ctx 4352 --parallel 1 --kv-pool-tokens 8192 --threads 2
       --cache-ram 1GiB --dht-port 0 --kv-load-timeout-ms 20000 --alias bench)
# Waits (bounded) for "pattern" in a log; prints what follows it.
wait_log() {
  for _ in $(seq 600); do
    if grep -q "$2" "$1" 2>/dev/null; then grep -o "$2[0-9]*" "$1" | head -1 | sed "s|$2||"; return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1
}
"$build/kvstash" serve "${flags[@]}" --identity "$work/a.key" 2>"$work/a.log" &
pids+=($!)
a_port=$(wait_log "$work/a.log" "on http://127.0.0.1:")
a_dht=$(wait_log "$work/a.log" "on udp port ")
a_key=$(grep -o "identity: ed25519 [0-9a-f]*" "$work/a.log" | awk '{print $3}')
echo "$a_key" > "$work/trust"
"$build/kvstash" serve "${flags[@]}" --identity "$work/e.key" --trust-keys "$work/trust" \
  --dht-bootstrap "127.0.0.1:$a_dht" 2>"$work/e.log" &
pids+=($!)
e_port=$(wait_log "$work/e.log" "on http://127.0.0.1:")

python3 - "$tokens" "$question" > "$work/request.json" <<'EOF'
import json, sys
n = int(sys.argv[1]) + int(sys.argv[2]); x = 12345; ids = []
for _ in range(n):
    x = (x * 1664525 + 1013904223) % 2**32
    ids.append(3 + (x >> 8) % 400)
print(json.dumps({"model": "bench", "prompt": ids, "max_tokens": 1, "temperature": 0}))
EOF
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
ttft() { grep -o "ttft=[0-9.]*s" "$1" | tail -1 | tr -d 'ttft=s'; }
for _ in $(seq 200); do [ "$(metric "$e_port" kvstash_share_dht_nodes)" != "0" ] && break; sleep 0.1; done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
curl -s --max-time 900 -o "$work/a.json" -H 'Content-Type: application/json' -d @"$work/request.json" "http://127.0.0.1:$a_port/v1/completions"
cold=$(ttft "$work/a.log")
for _ in $(seq 600); do
  [ "$(metric "$a_port" 'kvstash_share_announcements_total{result="ok"}')" -ge $((tokens / 256)) ] 2>/dev/null && break
  sleep 0.1
done
curl -s --max-time 900 -o "$work/e.json" -H 'Content-Type: application/json' -d @"$work/request.json" "http://127.0.0.1:$e_port/v1/completions"
peers=$(ttft "$work/e.log")
echo "cold TTFT on A (computes ${tokens} + ${question} tokens):     ${cold} s"
echo "first TTFT on E (KV from peers):                    ${peers} s"
echo "cached tokens on E: $(jq '.usage.prompt_tokens_details.cached_tokens' "$work/e.json")," \
     "peer hits: $(metric "$e_port" 'kvstash_kv_tier_hits_total{tier="peers"}')," \
     "fetched bytes: $(metric "$e_port" kvstash_share_fetched_bytes_total)"
echo "same answer: $([ "$(jq -c '.choices[0].text' "$work/a.json")" = "$(jq -c '.choices[0].text' "$work/e.json")" ] && echo yes || echo NO)"
python3 -c "print(f'ratio peers/cold: {float(\"$peers\") / float(\"$cold\"):.4f}')"
