#!/usr/bin/env bash
# Cold start (issue 37): seconds from launching the server until /health answers 200, then until
# the first token of a one-token /v1/completions request, with the page cache dropped before each
# start ("cold", needs root: /proc/sys/vm/drop_caches) and without ("warm").
#
#   [RUNS=3] [LLAMA_SERVER=path] scripts/bench/coldstart.sh [BUILD_DIR] [MODEL]
#
# Modes: "prepared" (the default flags, after one start has written the prepared weights),
# "first" (the default flags on a very first start: the model under a path never seen, a hard link
# of it, so no fingerprint is remembered, and an empty weights cache; with FIRST_BEFORE=1 also
# "first-before", the same with --prepare-before-serving: every weight copied before listening, as
# before the background copy), "no-cache" (--weights-cache
# off: every start copies and interleaves the weights, as before issue 37; the fingerprint
# remembered), "mmap" (--mmap-weights), and llama-server on the same file when LLAMA_SERVER names
# one. The modes take turns within each run (each mode's cold start, then its warm one), so that
# each run's figures share the disk's state (a cloud disk's throughput moves by 2x within
# minutes): read ratios within a run.
set -euo pipefail
build=${1:-build}
model=${2:-/tmp/kvstash-bench/qwen2.5-0.5b-f16.gguf}
runs=${RUNS:-3}
port=18437
work=$(mktemp -d /tmp/kvstash-coldstart.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$build/kvstash" gen-model --preset qwen2.5-0.5b --type f16 --out "$model" >/dev/null
fi
can_drop=0
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then can_drop=1; else echo "# cannot drop the page cache (not root?): cold runs skipped"; fi

now() { date +%s.%N; }
# One start: prints "health_s first_token_s" (first token counted from /health).
start_once() {
  local t0 t1 t2
  t0=$(now)
  "$@" >"$work/server.log" 2>&1 &
  pid=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do
    kill -0 "$pid" 2>/dev/null || { echo "server exited:" >&2; cat "$work/server.log" >&2; exit 1; }
    sleep 0.005
  done
  t1=$(now)
  curl -sf -o /dev/null "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"bench","prompt":"Hello","max_tokens":1,"temperature":0}'
  t2=$(now)
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  echo "$t0 $t1 $t2" | awk '{printf "%.3f %.3f\n", $2 - $1, $3 - $2}'
}

kvstash=("$build/kvstash" serve -m "$model" --host 127.0.0.1 --port "$port" --no-kv-store --ctx 4096 --parallel 1 --alias bench)
cache_dir="$work/weights"
declare -A cmd
cmd[prepared]="${kvstash[*]} --weights-cache $cache_dir"
cmd[no-cache]="${kvstash[*]} --weights-cache off"
cmd[mmap]="${kvstash[*]} --mmap-weights"
modes=(prepared first ${FIRST_BEFORE:+first-before} no-cache mmap)
if [ -n "${LLAMA_SERVER:-}" ] && [ -x "$LLAMA_SERVER" ]; then
  cmd[llama-server]="$LLAMA_SERVER -m $model --host 127.0.0.1 --port $port -c 4096 -np 1"
  modes+=(llama-server)
fi

# Prime: the fingerprint sidecar and the prepared-weights file (written after listening).
# shellcheck disable=SC2086
start_once ${cmd[prepared]} >/dev/null
for _ in $(seq 600); do ls "$cache_dir"/*.kvw >/dev/null 2>&1 && break; sleep 0.1; done
ls "$cache_dir"/*.kvw >/dev/null 2>&1 || { echo "no prepared-weights file written" >&2; exit 1; }

echo "mode cache run health_s first_token_after_s"
for r in $(seq "$runs"); do
  for mode in "${modes[@]}"; do
    for cache in cold warm; do  # warm: the page cache as the same mode's cold start left it
      [ "$cache" = cold ] && [ "$can_drop" = 0 ] && continue
      line=${cmd[$mode]:-}
      case "$mode" in first*)  # a path never seen (no fingerprint sidecar), nothing prepared
        ln -f "$model" "$work/$mode-$r-$cache.gguf"
        line="${kvstash[*]/$model/$work/$mode-$r-$cache.gguf} --weights-cache $work/$mode-$r-$cache"
        [ "$mode" = first-before ] && line+=" --prepare-before-serving";;
      esac
      [ "$cache" = cold ] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
      # shellcheck disable=SC2086
      echo "$mode $cache $r $(start_once $line)"
      case "$mode" in first*) rm -rf "$work/$mode-$r-$cache.gguf" "$work/$mode-$r-$cache";; esac
    done
  done
done
