#!/usr/bin/env bash
# Records golden outputs of llama.cpp on kvstash's generated tiny models, for model/golden_test.cc.
#
# For each preset: `kvstash gen-model --type f32` writes the model (the same bytes the tests'
# test_model_path() writes: same preset, seed and built-in vocabulary), llama-server serves it with
# F32 KV and no flash attention (so that an F32 engine agrees to ~1e-4, ../shared/design/MODELS.md),
# and each of 5 fixed prompts, given as token ids (no BOS, no tokenizer involved), gets 32 greedy
# tokens with the top-5 log-probabilities at every step (/completion, n_probs 5, temperature 0).
# llama-server reports no probabilities for a token whose text ends inside a UTF-8 character (it
# waits for the rest of the character), so the tokens that are not whole UTF-8 on their own (the
# built-in vocabularies' single bytes 0x80..0xFF) are banned with logit_bias: the greedy token is
# the best of the others, and the reported log-probabilities are the raw distribution's (before
# the bias), which the test recomputes the same way. The banned ids go into the fixture.
# Writes src/model/testdata/golden/<preset>.json with the file's SHA-256, the llama.cpp commit,
# the tokens and the log-probabilities.
#
# Never run in CI: it needs a llama.cpp build (../shared/tools/llama-cpp-reference.sh).
# The test that reads the fixtures waits as src/model/golden_test.cc.pending until they are
# recorded (a test without its fixtures could only fail or skip): after the first recording,
# `git mv src/model/golden_test.cc.pending src/model/golden_test.cc` and commit both.
#
# usage: scripts/record-golden.sh [KVSTASH_BINARY] [LLAMA_CPP_DIR] [PRESET...]
#   KVSTASH_BINARY  default build/kvstash
#   LLAMA_CPP_DIR   default /tmp/llama.cpp-reference/llama.cpp (a source tree with build/bin/llama-server)
#   PRESET          default: every preset with a fixture (qwen3-tiny ... mistral3-tiny)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVSTASH=${1:-$ROOT/build/kvstash}
LLAMA_DIR=${2:-/tmp/llama.cpp-reference/llama.cpp}
shift $(( $# > 2 ? 2 : $# )) || true
PRESETS=("$@")
[ ${#PRESETS[@]} -eq 0 ] && PRESETS=(qwen3-tiny qwen3moe-tiny gemma3-tiny tiny phi3-tiny gpt-oss-tiny mistral3-tiny)
SERVER=$LLAMA_DIR/build/bin/llama-server
OUT_DIR=$ROOT/src/model/testdata/golden
PORT=${GOLDEN_PORT:-18931}

[ -x "$KVSTASH" ] || { echo "record-golden: no kvstash binary at $KVSTASH" >&2; exit 1; }
[ -x "$SERVER" ] || { echo "record-golden: no llama-server at $SERVER" >&2; exit 1; }
COMMIT=$(git -C "$LLAMA_DIR" rev-parse HEAD 2>/dev/null || "$SERVER" --version 2>&1 | head -1)
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$OUT_DIR"

for preset in "${PRESETS[@]}"; do
  model=$WORK/$preset-f32.gguf
  "$KVSTASH" gen-model --preset "$preset" --type f32 --out "$model"
  # One slot, one thread pair, a context far above the longest prompt + 32; the prompt cache off
  # so that every request is a fresh prefill.
  "$SERVER" -m "$model" --port "$PORT" --host 127.0.0.1 -ctk f32 -ctv f32 -fa off -c 1024 -np 1 -t 2 \
    --no-warmup >"$WORK/server-$preset.log" 2>&1 &
  SERVER_PID=$!
  python3 - "$PORT" "$model" "$preset" "$COMMIT" "$OUT_DIR/$preset.json" <<'EOF'
import hashlib, json, sys, time, urllib.request

port, model, preset, commit, out = sys.argv[1:6]
base = f"http://127.0.0.1:{port}"
for _ in range(600):
    try:
        with urllib.request.urlopen(base + "/health", timeout=2) as r:
            if r.status == 200:
                break
    except Exception:
        pass
    time.sleep(0.5)
else:
    sys.exit("record-golden: llama-server did not become healthy")

# The tokens that are not whole UTF-8 text by themselves (llama-server shows them as U+FFFD).
with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
    n_vocab = json.load(r)["data"][0]["meta"]["n_vocab"]
banned = []
for tid in range(n_vocab):
    req = urllib.request.Request(base + "/detokenize", data=json.dumps({"tokens": [tid]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        if "\ufffd" in json.load(r)["content"]:
            banned.append(tid)

# Five fixed prompts of 5 to 71 byte-level tokens (ids 3..252: plain tokens of every built-in
# vocabulary), lengths crossing kvstash's 16-token KV blocks.
prompts = [[(j * 7919 + i * 131 + 17) % 250 + 3 for j in range(n)] for i, n in enumerate([5, 12, 23, 40, 71])]
records = []
for prompt in prompts:
    body = {"prompt": prompt, "n_predict": 32, "n_probs": 5, "temperature": 0.0, "return_tokens": True,
            "cache_prompt": False, "ignore_eos": True, "samplers": ["temperature"],
            "logit_bias": [[t, False] for t in banned]}
    req = urllib.request.Request(base + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        res = json.load(r)
    probs = res["completion_probabilities"]
    tokens = [p["id"] for p in probs]
    if res.get("tokens") and res["tokens"] != tokens:
        sys.exit("record-golden: tokens and completion_probabilities disagree")
    if len(tokens) != 32:
        sys.exit(f"record-golden: {len(tokens)} tokens generated, expected 32")
    top = [[[t["id"], round(t["logprob"], 6)] for t in p["top_logprobs"]] for p in probs]
    records.append({"prompt": prompt, "tokens": tokens, "top_logprobs": top})

sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
doc = {
    "preset": preset,
    "model": f"kvstash gen-model --preset {preset} --type f32 (default seed, built-in vocabulary)",
    "model_sha256": sha,
    "llama_cpp_commit": commit,
    "llama_server": "-ctk f32 -ctv f32 -fa off; /completion n_probs 5, temperature 0, prompts as token ids, banned ids never sampled",
    "banned": banned,
    "prompts": records,
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"record-golden: {preset}: wrote {out}")
EOF
  kill "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
done
