#!/usr/bin/env bash
# Decode across the background weight copy of a first start (issue 37, "serve while preparing"):
# a very first start of MODEL (a hard link under a path never seen, an empty weights cache) answers
# at once from the file mapping while the weights that keep their layout are copied into huge pages;
# this times one greedy request of N tokens right after /health (while the copy runs, or after it
# for a model the SIMD path interleaves whole), the same request once the log says the copy was
# swapped in (and the prepared file written, the cost model measured), and the same again on a
# later start that reads the prepared file. Prints each
# request's decode tokens/s and the ratios: after the swap against the prepared start (decode
# "reaches the prepared speed by itself": about 1), before it against after.
#
#   [TOKENS=128] [ROUNDS=3] scripts/bench/swap_decode.sh [BUILD_DIR] MODEL
set -euo pipefail
build=${1:-build}
model=${2:?usage: swap_decode.sh [BUILD_DIR] MODEL}
tokens=${TOKENS:-128}
rounds=${ROUNDS:-3}
port=18438
work=$(mktemp -d /tmp/kvstash-swapdecode.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

start() {  # start MODEL_PATH CACHE_DIR: serve in the background, wait for /health
  "$build/kvstash" serve -m "$1" --host 127.0.0.1 --port "$port" --no-kv-store --ctx 4096 --parallel 1 \
    --alias bench --weights-cache "$2" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 6000); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/health" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  echo "server did not start:" >&2; cat "$work/server.log" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
# One greedy request; prints its decode tokens/s: (completion tokens - 1) over the time after the
# first token (streamed: the first chunk's arrival and the last one's).
decode_rate() {
  curl -sN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"bench\",\"prompt\":\"Once upon a time\",\"max_tokens\":$tokens,\"temperature\":0,\"stream\":true,\"ignore_eos\":true}" |
    while IFS= read -r line; do
      case "$line" in "data: {"*) echo "$(date +%s.%N)";; esac
    done | awk 'NR == 1 {first = $1} {last = $1; n++} END {if (n < 2) {print "nan"} else printf "%.2f\n", (n - 1) / (last - first)}'
}

echo "round before_swap_tok_s after_swap_tok_s prepared_tok_s after/prepared before/after"
for r in $(seq "$rounds"); do
  ln -f "$model" "$work/m-$r.gguf"
  start "$work/m-$r.gguf" "$work/cache-$r"
  preparing=$(grep -c "while a background thread copies" "$work/server.log" || true)
  before=$(decode_rate)
  for _ in $(seq 600); do grep -q "swapped in" "$work/server.log" && break; sleep 0.1; done
  [ "$preparing" = 0 ] || grep -q "swapped in" "$work/server.log" || { echo "no swap logged" >&2; cat "$work/server.log" >&2; exit 1; }
  # The rest of a first start's background work ends too before "after": the prepared file's
  # write and the step budget's cost model (both wait for the engine to idle).
  for _ in $(seq 600); do grep -q "weights cache: written" "$work/server.log" && break; sleep 0.1; done
  for _ in $(seq 600); do grep -q "step budget: cost model" "$work/server.log" && break; sleep 0.1; done
  after=$(decode_rate)
  stop
  start "$work/m-$r.gguf" "$work/cache-$r"
  grep -q "weights cache: read" "$work/server.log" || { echo "the prepared file was not read" >&2; cat "$work/server.log" >&2; exit 1; }
  prepared=$(decode_rate)
  stop
  rm -rf "$work/m-$r.gguf" "$work/cache-$r"
  echo "$r $before $after $prepared" | awk '{printf "%s %s %s %s %.3f %.3f\n", $1, $2, $3, $4, $3 / $4, $2 / $3}'
  [ "$preparing" = 0 ] && echo "# round $r: nothing was left to a background copy (every matrix interleaved on this SIMD path)"
done
