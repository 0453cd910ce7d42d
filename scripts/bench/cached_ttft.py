#!/usr/bin/env python3
"""TTFT of a long prompt whose leading tokens the server has cached, against the same prompt cold.

For each repetition: a fresh random prefix of --cached-len token ids (so nothing is cached from
earlier runs) plus --prompt-len - --cached-len further ids is sent cold; then the same prefix with
different trailing ids is sent, which can reuse the prefix's KV. TTFT is the time from sending the
request to the first streamed token. Prompts are token ids (POST /v1/completions), so their
lengths are exact. Prints one JSON object with every measurement, the medians and their ratio.

Python 3 standard library only.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import time
import urllib.parse
import urllib.request

_served = {}


def served_model(url):
    """The id the server at url serves (its first GET /v1/models entry): requests must name it."""
    if url not in _served:
        with urllib.request.urlopen(url + "/v1/models", timeout=60) as r:
            _served[url] = json.load(r)["data"][0]["id"]
    return _served[url]


def stream_ttft(url, prompt, max_tokens=2, want_tokens=False):
    """Sends a streaming greedy completion; returns (ttft_s, usage), plus the streamed texts when
    want_tokens."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    body = json.dumps({"model": served_model(url), "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    ttft = None
    usage = None
    texts = []
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("choices"):
            if ttft is None:
                ttft = time.perf_counter() - t0
            texts.append(event["choices"][0].get("text", ""))
        if event.get("usage"):
            usage = event["usage"]
    conn.close()
    return (ttft, usage, texts) if want_tokens else (ttft, usage)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--prompt-len", type=int, default=2000)
    ap.add_argument("--cached-len", type=int, default=1984)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    # Ordinary (non-special) ids in the Qwen2 and Llama 3 vocabularies.
    ap.add_argument("--id-range", type=int, nargs=2, default=[1000, 30000])
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ids = lambda n: [rng.randrange(*args.id_range) for _ in range(n)]
    tail = args.prompt_len - args.cached_len
    cold, cached, runs = [], [], []
    for rep in range(args.reps):
        prefix = ids(args.cached_len)
        t_cold, u_cold = stream_ttft(args.url, prefix + ids(tail))
        t_hit, u_hit = stream_ttft(args.url, prefix + ids(tail))
        cold.append(t_cold)
        cached.append(t_hit)
        runs.append({"rep": rep, "cold_ttft_s": t_cold, "cached_ttft_s": t_hit,
                     "cold_cached_tokens": (u_cold or {}).get("prompt_tokens_details", {}).get("cached_tokens"),
                     "hit_cached_tokens": (u_hit or {}).get("prompt_tokens_details", {}).get("cached_tokens"),
                     "prompt_tokens": (u_hit or {}).get("prompt_tokens")})
        print(json.dumps(runs[-1]), file=sys.stderr)
    out = {"prompt_len": args.prompt_len, "cached_len": args.cached_len, "runs": runs,
           "cold_ttft_median_s": statistics.median(cold), "cached_ttft_median_s": statistics.median(cached)}
    out["ratio"] = out["cached_ttft_median_s"] / out["cold_ttft_median_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
