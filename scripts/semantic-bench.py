#!/usr/bin/env python3
"""Semantic cache latency: miss vs exact hit vs semantic hit, in one run against one server.

Usage: scripts/semantic-bench.py --url http://127.0.0.1:8080 --log SERVER_LOG [--max-tokens 32]

The server must run with --response-cache, --semantic-cache and --log-format json (its stderr in SERVER_LOG). For each of the questions below the
script sends the question (a miss: the engine answers and the answer is stored), the same question
again (an exact hit) and a near-duplicate (the question with "?" replaced by " ?!", no literal
changed: a semantic hit when its cosine passes the threshold). Latency is the server's own `total=`
of each request's log line (server side, no client or network time), matched by response id.
"""
import argparse, json, re, statistics, time, urllib.request

QUESTIONS = [
    "What is the capital of France?", "Who wrote the play Hamlet?", "Why is the sky blue?",
    "How do vaccines train the immune system?", "What does a compiler do?", "Explain photosynthesis briefly?",
    "What is the difference between a list and a tuple in Python?", "How does a hash table work?",
    "What causes the seasons on Earth?", "Who painted the Mona Lisa?", "What is machine learning?",
    "How do airplanes stay in the air?", "What is the tallest mountain on Earth?", "What is a black hole?",
    "How does the stock market work?", "What is the speed of light used for in physics?",
    "Why do cats purr?", "What is the role of mitochondria in a cell?", "How do I make a good cup of tea?",
    "What is the meaning of the word serendipity?",
]

def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return r.headers.get("x-kvstash-cache"), json.load(r)["id"]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    sent = []  # (kind, cache header, id)
    for q in QUESTIONS:
        model = json.load(urllib.request.urlopen(a.url + "/v1/models"))["data"][0]["id"]
        body = lambda text: {"model": model, "messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": a.max_tokens}
        sent.append(("miss",) + post(a.url, body(q)))
        time.sleep(0.2)  # the record's write-behind and indexing
        sent.append(("exact",) + post(a.url, body(q)))
        sent.append(("near",) + post(a.url, body(q.replace("?", " ?!"))))
    time.sleep(0.5)
    log = open(a.log, encoding="utf-8", errors="replace").read()
    total = {m.group(1): float(m.group(2)) * 1000 for m in re.finditer(r'"id":"(chatcmpl-[0-9a-f]+)".*?"total_s":([0-9.e+-]+)', log)}
    by_header = {}
    for kind, header, rid in sent:
        by_header.setdefault(header, []).append(total[rid])
    print("| x-kvstash-cache (what the server answered) | requests | server p50 ms | server mean ms | max ms |")
    print("|---|---|---|---|---|")
    for header in ["miss", "hit", "semantic-hit"]:
        v = by_header.get(header, [])
        if v:
            print(f"| {header} | {len(v)} | {statistics.median(v):.2f} | {statistics.mean(v):.2f} | {max(v):.2f} |")
    near = [h for k, h, _ in sent if k == "near"]
    print(f"\nnear-duplicates answered as semantic hits: {near.count('semantic-hit')}/{len(near)}; "
          f"first askings answered as semantic hits (another question over the threshold): "
          f"{[h for k, h, _ in sent if k == 'miss'].count('semantic-hit')}/{len(QUESTIONS)}")

if __name__ == "__main__":
    main()
