#!/bin/bash
# Server-side latency of exact memory-tier response-cache hits (non-streaming) from the server's JSON log
# (total_s of lines with cache=hit), and client-side curl times. BENCHMARKS.md, issue 11.
# Usage: scripts/bench/response_cache_hit_latency.sh MODEL.gguf   (KVSTASH=path/to/kvstash)
set -e
K=${KVSTASH:-build/kvstash}; K=$(realpath $K)
M=$(realpath ${1:?usage: $0 MODEL.gguf})
W=$(mktemp -d); cd $W
$K serve -m $M --port 0 --threads 2 --response-cache 256MiB --no-kv-store --log-format json --identity ./a.key --alias bench > hit.log 2>&1 &
PID=$!
for i in $(seq 200); do PORT=$(grep -o 'on http://127.0.0.1:[0-9]*' hit.log | grep -o '[0-9]*$' || true); [ -n "$PORT" ] && break; sleep 0.5; done
BODY='{"model":"bench","messages":[{"role":"user","content":"What is the capital of France? Answer in one word."}],"temperature":0,"max_tokens":32}'
curl -s -o /dev/null -D - localhost:$PORT/v1/chat/completions -d "$BODY" | grep -i x-kvstash-cache:
for i in $(seq 500); do curl -s -o /dev/null -w '%{time_total}\n' localhost:$PORT/v1/chat/completions -d "$BODY"; done > client_times.txt
kill $PID; wait $PID || true
python3 - <<'PY'
import json
hits=[];miss=[]
for line in open('hit.log'):
    line=line.strip()
    if not line.startswith('{') : 
        i=line.find('{')
        if i<0: continue
        line=line[i:]
    try: j=json.loads(line)
    except Exception: continue
    if j.get('cache')=='hit': hits.append(j['total_s']*1000)
    elif j.get('cache')=='miss': miss.append(j['total_s']*1000)
hits.sort()
def p(v,q): return v[min(len(v)-1,int(q*len(v)))]
print(f"server-side hit latency: n={len(hits)} p50={p(hits,.5):.3f} ms p90={p(hits,.9):.3f} ms p99={p(hits,.99):.3f} ms max={hits[-1]:.3f} ms")
print(f"server-side miss latency: n={len(miss)} {miss}")
c=sorted(float(x)*1000 for x in open('client_times.txt'))
print(f"client-side (curl, new connection each) p50={p(c,.5):.3f} ms p99={p(c,.99):.3f} ms")
PY
