#!/usr/bin/env bash
# Runs one official client SDK's test against a `kvstash serve` of a generated model (random
# weights, Qwen2's vocabulary, Qwen2.5's chat template) on 127.0.0.1. ctest runs it from the build
# folder:
#   sdk-tests/run-node-sdk.sh BUILD_DIR SHARED_DIR openai-node     (sdk_openai_node_test)
#   sdk-tests/run-node-sdk.sh BUILD_DIR SHARED_DIR openai-node-qwen3 (sdk_openai_node_qwen3_test; also
#                                 -llama3.1, -llama3.2, -hermes3, -mistral: other templates)
#   sdk-tests/run-node-sdk.sh BUILD_DIR SHARED_DIR anthropic-node  (sdk_anthropic_node_test)
#   sdk-tests/run-node-sdk.sh BUILD_DIR SHARED_DIR openai-responses (sdk_openai_responses_test)
#   sdk-tests/run-node-sdk.sh BUILD_DIR SHARED_DIR openai-agents   (sdk_openai_agents_test)
# openai-node: agent_api.mjs, the OpenAI Node SDK (issue 33's agent API). openai-responses:
# openai-node/responses_api.mjs, the same SDK on the Responses API (issue 35). anthropic-node:
# messages_api.mjs, the Anthropic TypeScript SDK (issue 35's Messages API and prompt caching), with
# an API key the SDK sends as x-api-key. openai-agents: agent_run.mjs, the OpenAI Agents SDK running
# a function-tool agent through the Responses API (issue 35). Each SDK is pinned by its folder's lockfile; a missing
# install (scripts/install-deps.sh runs `npm ci` in each folder) is a failure, never a skip.
set -euo pipefail
build=$(cd "$1" && pwd)
shared=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# The agent API runs once per template family issue 33 names: openai-node with Qwen2.5's, and
# openai-node-TEMPLATE with the others (each with a vocabulary that has the template's tokens).
template=Qwen-Qwen2.5-7B-Instruct.jinja
vocab=ggml-vocab-qwen2.gguf
case "$3" in
  openai-node-llama3.1) template=meta-llama-Llama-3.1-8B-Instruct.jinja vocab=ggml-vocab-llama-bpe.gguf ;;
  openai-node-llama3.2) template=meta-llama-Llama-3.2-3B-Instruct.jinja vocab=ggml-vocab-llama-bpe.gguf ;;
  openai-node-hermes3) template=NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja vocab=ggml-vocab-llama-bpe.gguf ;;
  openai-node-mistral) template=mistralai-Mistral-Nemo-Instruct-2407.jinja vocab=ggml-vocab-llama-spm.gguf ;;
  openai-node-qwen3) template=Qwen-Qwen3-0.6B.jinja ;;
esac
case "$3" in
  openai-node | openai-node-*) dir=openai-node; package=openai; script=agent_api.mjs; key=() ;;
  openai-responses) dir=openai-node; package=openai; script=responses_api.mjs; key=() ;;
  openai-agents) dir=openai-agents; package=@openai/agents; script=agent_run.mjs; key=() ;;
  anthropic-node) dir=anthropic-node; package=@anthropic-ai/sdk; script=messages_api.mjs; key=(--api-key sdk-test-key) ;;
  *) echo "FAILED: unknown SDK test '$3' (openai-node[-llama3.1|-llama3.2|-hermes3|-mistral|-qwen3], openai-responses, openai-agents, anthropic-node)" >&2; exit 1 ;;
esac
sdk="$here/$dir"
[ -f "$sdk/node_modules/$package/package.json" ] ||
  { echo "FAILED: the $package SDK is not installed in $sdk (run scripts/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$build/kvstash" gen-model --preset tiny --vocab "$shared/vocab/$vocab" --out "$work/model.gguf" >/dev/null
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/kvstash" serve -m "$work/model.gguf" --host 127.0.0.1 --port "$port" --alias tiny "${key[@]}" \
  --chat-template-file "$shared/templates/$template" > "$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do  # up to 60 s (a sanitizer build starts slowly)
  curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; echo "FAILED: kvstash serve exited" >&2; exit 1; }
  sleep 0.1
done
curl -fs "http://127.0.0.1:$port/health" >/dev/null || { cat "$work/serve.log" >&2; echo "FAILED: no /health in 60 s" >&2; exit 1; }
script_arg=sdk-test-key
case "$3" in openai-node-*) script_arg=single ;; esac
if ! node "$sdk/$script" "http://127.0.0.1:$port" "$script_arg"; then
  echo "--- kvstash serve log (last 40 lines)" >&2
  tail -n 40 "$work/serve.log" >&2
  exit 1
fi
