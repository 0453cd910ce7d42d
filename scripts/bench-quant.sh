#!/bin/sh
# Issue 14's figures: bench-engine on the qwen2.5-0.5b and llama-3.2-1b presets in F16, Q8_0, Q6_K,
# Q5_K_M and Q4_K_M, one JSON per model under OUT, then a Markdown table of the ratios (each ratio from
# one run: weights bytes/s over the streaming read, prefill over sgemm on the same shapes; and the
# decode steps each over a streaming read of the same bytes right after it, the median pair).
# Each model is also decoded on one thread (`-t 1`, a 16-token prompt), paired the same way: on
# this project's 2-vCPU VMs two threads read memory at ~31 or ~62 GB/s from one second to the next
# (the two vCPUs at times share one core's memory bandwidth), one thread at ~30 throughout, so the
# one-thread pair is the steadier measure of how close the kernels come to what a core can read.
#
#   scripts/bench-quant.sh BUILD_DIR MODELS_DIR OUT_DIR
# MODELS_DIR must hold PRESET-f16.gguf; the quantized files are made with `kvstash quantize` when
# missing.
set -eu
build=$1 models=$2 out=$3
mkdir -p "$out"
for preset in qwen2.5-0.5b llama-3.2-1b; do
  [ -f "$models/$preset-f16.gguf" ] || "$build/kvstash" gen-model --preset "$preset" --type f16 --out "$models/$preset-f16.gguf"
  for type in q8_0 q6_k q5_k_m q4_k_m; do
    [ -f "$models/$preset-$type.gguf" ] || "$build/kvstash" quantize "$models/$preset-f16.gguf" "$models/$preset-$type.gguf" "$type"
  done
done
for preset in qwen2.5-0.5b llama-3.2-1b; do
  for type in f16 q8_0 q6_k q5_k_m q4_k_m; do
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $preset $type" >&2
    "$build/kvstash" bench-engine -m "$models/$preset-$type.gguf" --json > "$out/$preset-$type.json"
    "$build/kvstash" bench-engine -m "$models/$preset-$type.gguf" -t 1 --prompt-tokens 16 --repeats 1 --batch 2 --json \
      > "$out/$preset-$type-t1.json"
  done
done
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
print("| model | type | weights MB/token | decode b1 tok/s (median) | GB/s | stream GB/s | **decode / stream** (median step) | fastest step / stream | paired read GB/s | **decode / paired stream** (median pair) | 1 thread: decode GB/s | paired read GB/s | **decode / paired stream** | prefill tok/s | GFLOP/s | sgemm GFLOP/s | **prefill / sgemm** | batch 8 tok/s |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for preset in ["qwen2.5-0.5b", "llama-3.2-1b"]:
    for t in ["f16", "q8_0", "q6_k", "q5_k_m", "q4_k_m"]:
        p = os.path.join(out, f"{preset}-{t}.json")
        if not os.path.exists(p): continue
        j = json.load(open(p))
        p1 = os.path.join(out, f"{preset}-{t}-t1.json")
        j1 = json.load(open(p1)) if os.path.exists(p1) else None
        one = (f"{j1['decode_weight_read_gbs']:.1f} | {j1['stream_read_paired_gbs']:.1f} | **{100*j1['decode_vs_stream_read_paired']:.0f}%**"
               if j1 else "- | - | -")
        print(f"| {preset} | {t} | {j['weight_bytes_per_token']/1e6:.0f} | {j['decode_tokens_per_s']:.1f} | {j['decode_weight_read_gbs']:.1f} | "
              f"{j['stream_read_gbs']:.1f} | **{100*j['decode_vs_stream_read']:.0f}%** | {100*j['decode_best_step_vs_stream_read']:.0f}% | {j['stream_read_paired_gbs']:.1f} | **{100*j['decode_vs_stream_read_paired']:.0f}%** | {one} | {j['prefill_tokens_per_s']:.1f} | "
              f"{j['prefill_gflops']:.1f} | {j['gemm_peak_gflops']:.1f} | **{100*j['prefill_vs_gemm_peak']:.0f}%** | {j['decode_batch8_tokens_per_s']:.1f} |")
PY
