#!/usr/bin/env bash
# The demo: installs what is needed, builds kvstash, generates a model with the exact shapes of
# Qwen2.5-0.5B (random weights, the real Qwen2 tokenizer), serves it, and sends a cold and a warm
# request that share a long system prompt. Prints each one's time to first token and cached tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
mkdir -p models
MODEL=models/qwen2.5-0.5b-q8_0.gguf
VOCAB=../shared/vocab/ggml-vocab-qwen2.gguf
if [ ! -f "$MODEL" ]; then
  if [ -f "$VOCAB" ]; then
    build/kvstash gen-model --preset qwen2.5-0.5b --type q8_0 --vocab "$VOCAB" --out "$MODEL"
  else
    echo "no $VOCAB beside this clone: the model gets the generator's built-in vocabulary instead of Qwen2's"
    build/kvstash gen-model --preset qwen2.5-0.5b --type q8_0 --out "$MODEL"
  fi
fi
PORT=${PORT:-18080}
# --alias kvstash: the name demo_client.py asks for (another name would get 404 model_not_found).
build/kvstash serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --ctx 4096 --alias kvstash > models/demo-server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  kill -0 $SERVER 2>/dev/null || { cat models/demo-server.log; exit 1; }
  sleep 0.5
done
python3 scripts/demo_client.py 127.0.0.1 "$PORT"
echo "server log: models/demo-server.log"
