#!/usr/bin/env bash
# kvstash bench-engine against llama.cpp's llama-bench on the same GGUF files, back to back in one
# run (issue 32's figures): prefill of P tokens and batch-1 decode of 16 tokens after P tokens, at 1
# and 2 threads (llama-bench -d: its decode after the same context), and the ratio kvstash / llama.cpp of each from the same run.
#
#   LLAMA_BENCH=/path/to/llama-bench [REPEATS=3] [PROMPT=128] scripts/bench/llama_bench_compare.sh BUILD_DIR F.gguf...
#
# llama-bench comes from ../shared/tools/llama-cpp-reference.sh (never built in CI).
set -euo pipefail
build=${1:?usage: LLAMA_BENCH=... $0 BUILD_DIR F.gguf...}
shift
llama_bench=${LLAMA_BENCH:-/tmp/llama.cpp-reference/llama.cpp/build/bin/llama-bench}
[ -x "$llama_bench" ] || { echo "no llama-bench at $llama_bench (set LLAMA_BENCH)" >&2; exit 1; }
repeats=${REPEATS:-3}
prompt=${PROMPT:-128}
tmp=$(mktemp -d /tmp/kvstash-llama-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

printf '%-28s %3s %-8s %12s %12s %7s\n' model thr test llama.cpp kvstash ratio
for model in "$@"; do
  for t in 1 2; do
    # Prefill from an empty context; decode after `prompt` tokens of context (-d), as bench-engine's.
    { "$llama_bench" -m "$model" -p "$prompt" -n 0 -t "$t" -r "$repeats" -o json >"$tmp/lp.json" &&
      "$llama_bench" -m "$model" -p 0 -n 16 -d "$prompt" -t "$t" -r "$repeats" -o json >"$tmp/ld.json"; } 2>"$tmp/l.err" ||
      { echo "llama-bench failed on $model:" >&2; tail -5 "$tmp/l.err" >&2; exit 1; }
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2]))))' \
      "$tmp/lp.json" "$tmp/ld.json" >"$tmp/l.json"
    "$build/kvstash" bench-engine -m "$model" --prompt-tokens "$prompt" --decode-tokens 16 --decode-context "$prompt" \
      --batch 2 -t "$t" --repeats "$repeats" --json >"$tmp/k.json" 2>"$tmp/k.err" ||
      { echo "bench-engine failed on $model:" >&2; tail -5 "$tmp/k.err" >&2; exit 1; }
    python3 - "$model" "$t" "$tmp/l.json" "$tmp/k.json" <<'PY'
import json, os, sys
model, t, lpath, kpath = sys.argv[1:]
runs = json.load(open(lpath))
k = json.load(open(kpath))
lp = next(r["avg_ts"] for r in runs if r["n_prompt"] > 0 and r["n_gen"] == 0)
ld = next(r["avg_ts"] for r in runs if r["n_gen"] > 0 and r["n_prompt"] == 0)
name = os.path.basename(model)
for test, lv, kv in (("prefill", lp, k["prefill_tokens_per_s"]), ("decode", ld, k["decode_tokens_per_s"])):
    print(f"{name:<28} {t:>3} {test:<8} {lv:12.2f} {kv:12.2f} {kv / lv:6.2f}x")
print(f"{name:<28} {t:>3} decode read {k['decode_weight_read_gbs']:.1f} GB/s, {100 * k['decode_vs_stream_read_paired']:.0f}% of the paired streaming read", file=sys.stderr)
PY
  done
done
