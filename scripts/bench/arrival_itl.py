#!/usr/bin/env python3
"""Streams' inter-token gaps while a cold long prompt arrives, and that prompt's TTFT (issue 34).

First a cold --prompt-len prompt is sent to the idle server (its idle TTFT). Then --streams
streaming greedy completions start and decode; after --baseline-s seconds of their decoding a
second cold prompt of the same length arrives (its TTFT under load). The streams' gaps (time
between two tokens of one stream) are split into those that ended before the arrival (baseline)
and those that ended between its send and its first token plus one gap (during). Prompts are
random token ids (POST /v1/completions), so their lengths are exact and nothing is cached.
Prints one JSON object: gap percentiles of both windows, both TTFTs and the two ratios.

With --cached-prefix-len N both prompts start with an N-token prefix of their own (fixed by
--seed): run once with --warm-only against a server with a shared store (e.g. --cache-redis
redis://... --cache-ram 0), which stores them; restart the server (so its pool holds nothing);
then measure: the prefixes load from the store, the rest is prefilled.

Python 3 standard library only.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


_models = {}


def model_of(url):
    """The server's first model id (GET /v1/models): the API requires `model`."""
    if url not in _models:
        u = urllib.parse.urlparse(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError("GET /v1/models: HTTP %d" % resp.status)
        _models[url] = json.loads(resp.read())["data"][0]["id"]
        conn.close()
    return _models[url]


def post_stream(url, prompt, max_tokens, on_token):
    """A streaming greedy completion; calls on_token(t) at each token event. Returns the usage."""
    u = urllib.parse.urlparse(url)
    model = model_of(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    usage = None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("choices"):
            on_token(time.perf_counter())
        if event.get("usage"):
            usage = event["usage"]
    conn.close()
    return usage


def ttft(url, prompt):
    t0 = time.perf_counter()
    first = []
    post_stream(url, prompt, 2, lambda t: first.append(t))
    return first[0] - t0


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--prompt-len", type=int, default=1500)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--stream-prompt-len", type=int, default=32)
    ap.add_argument("--stream-tokens", type=int, default=600)
    ap.add_argument("--baseline-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cached-prefix-len", type=int, default=0)
    ap.add_argument("--warm-only", action="store_true", help="send the two prefixes once each, then exit")
    # Ordinary (non-special) ids in the Qwen2 and Llama 3 vocabularies.
    ap.add_argument("--id-range", type=int, nargs=2, default=[1000, 30000])
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ids = lambda n: [rng.randrange(*args.id_range) for _ in range(n)]
    prefix_rng = random.Random(args.seed + 1000)
    prefixes = [[prefix_rng.randrange(*args.id_range) for _ in range(args.cached_prefix_len)] for _ in range(2)]
    if args.warm_only:
        for p in prefixes:
            post_stream(args.url, p + ids(1), 1, lambda t: None)
        print("stored two prefixes of %d tokens" % args.cached_prefix_len, file=sys.stderr)
        return
    tail = args.prompt_len - args.cached_prefix_len

    idle_ttft = ttft(args.url, prefixes[0] + ids(tail))
    print("idle TTFT %.3f s" % idle_ttft, file=sys.stderr)

    times = [[] for _ in range(args.streams)]
    threads = []
    for i in range(args.streams):
        prompt = ids(args.stream_prompt_len)
        th = threading.Thread(target=post_stream, args=(args.url, prompt, args.stream_tokens, times[i].append), daemon=True)
        th.start()
        threads.append(th)
    while any(len(t) < 2 for t in times):
        time.sleep(0.05)
    time.sleep(args.baseline_s)
    sent = time.perf_counter()
    loaded_ttft = ttft(args.url, prefixes[1] + ids(tail))
    first_token = sent + loaded_ttft
    print("loaded TTFT %.3f s" % loaded_ttft, file=sys.stderr)
    time.sleep(1.0)  # the gap that spans the first token ends after it
    streaming_until = min(t[-1] for t in times)
    if streaming_until < first_token:
        sys.exit("a stream ended before the arrival's first token: raise --stream-tokens")

    baseline, during = [], []
    for t in times:
        start = t[0]
        for a, b in zip(t, t[1:]):
            if a < start + 1.0:
                continue  # the streams' own prefills and the first second
            if b <= sent:
                baseline.append(b - a)
            elif b > sent and a < first_token:
                during.append(b - a)
    out = {"prompt_len": args.prompt_len, "cached_prefix_len": args.cached_prefix_len, "streams": args.streams,
           "idle_ttft_s": idle_ttft, "loaded_ttft_s": loaded_ttft, "ttft_ratio": loaded_ttft / idle_ttft,
           "baseline_gaps": len(baseline), "during_gaps": len(during)}
    for name, gaps in (("baseline", baseline), ("during", during)):
        for p in (50, 90, 99):
            out["%s_gap_p%d_s" % (name, p)] = percentile(gaps, p)
        out["%s_gap_max_s" % name] = max(gaps) if gaps else None
    if baseline and during:
        out["gap_p99_ratio"] = out["during_gap_p99_s"] / out["baseline_gap_p99_s"]
    print(json.dumps(out, indent=1))
    for th in threads:
        th.join(timeout=0)  # daemon threads: the streams end with the process


if __name__ == "__main__":
    main()
