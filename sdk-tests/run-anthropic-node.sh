#!/usr/bin/env bash
# Runs sdk-tests/anthropic-node/messages_api.mjs (the official Anthropic TypeScript SDK, pinned by
# its lockfile) against a `kvstash serve` of a generated model (random weights, Qwen2's vocabulary,
# Qwen2.5's chat template) on 127.0.0.1, with an API key the SDK sends as x-api-key. ctest runs it
# (sdk_anthropic_node_test) from the build folder:
#   sdk-tests/run-anthropic-node.sh BUILD_DIR SHARED_DIR
# A missing SDK install (scripts/install-deps.sh runs `npm ci` here) is a failure, never a skip.
set -euo pipefail
build=$(cd "$1" && pwd)
shared=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
sdk="$here/anthropic-node"
[ -f "$sdk/node_modules/@anthropic-ai/sdk/package.json" ] ||
  { echo "FAILED: the Anthropic SDK is not installed in $sdk (run scripts/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$build/kvstash" gen-model --preset tiny --vocab "$shared/vocab/ggml-vocab-qwen2.gguf" --out "$work/model.gguf" >/dev/null
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/kvstash" serve -m "$work/model.gguf" --host 127.0.0.1 --port "$port" --alias tiny --api-key sdk-test-key \
  --chat-template-file "$shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja" > "$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do  # up to 60 s (a sanitizer build starts slowly)
  curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; echo "FAILED: kvstash serve exited" >&2; exit 1; }
  sleep 0.1
done
curl -fs "http://127.0.0.1:$port/health" >/dev/null || { cat "$work/serve.log" >&2; echo "FAILED: no /health in 60 s" >&2; exit 1; }
if ! node "$sdk/messages_api.mjs" "http://127.0.0.1:$port" sdk-test-key; then
  echo "--- kvstash serve log (last 40 lines)" >&2
  tail -n 40 "$work/serve.log" >&2
  exit 1
fi
