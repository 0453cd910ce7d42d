#!/bin/bash
# kvstash bench --workload zipf against the same server with and without --response-cache
# (BENCHMARKS.md, issue 11). Usage: [REQUESTS=60 QUESTIONS=20] scripts/bench/response_cache_zipf.sh MODEL.gguf
K=${KVSTASH:-build/kvstash}; K=$(realpath $K)
M=$(realpath ${1:?usage: $0 MODEL.gguf})
W=$(mktemp -d); cd $W
run() {
  name=$1; shift
  $K serve -m $M --port 0 --threads 2 --parallel 4 --no-kv-store --identity ./a.key "$@" > serve-$name.log 2>&1 &
  PID=$!
  for i in $(seq 200); do PORT=$(grep -o 'on http://127.0.0.1:[0-9]*' serve-$name.log | grep -o '[0-9]*$' || true); [ -n "$PORT" ] && break; sleep 0.5; done
  echo "== $name: serve $*"
  $K bench --url http://127.0.0.1:$PORT --workload zipf --questions ${QUESTIONS:-20} --zipf-exponent 1.1 --requests ${REQUESTS:-60} \
     --temperature 0 --input-len 24 --output-len 8 --concurrency 4 --no-progress --out zipf-$name.json
  kill $PID; wait $PID
}
run nocache
run cache --response-cache 256MiB
