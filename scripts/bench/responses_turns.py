#!/usr/bin/env python3
"""A conversation through the Responses API on the KV cache against full chat histories without one.

Issue 35's figure: 6 turns of a conversation that grows to about 1,500 prompt tokens. Server A
(kvstash serve, default flags: the engine's prefix cache and the KV store) gets each turn as
`POST /v1/responses` with `previous_response_id` and only the new user message; server B (the same
binary and model with `--no-prefix-cache --no-kv-store`, so nothing is reused) gets each turn as
`POST /v1/chat/completions` with the whole history. Both decode the same number of tokens per turn
(ignore_eos). Prints each turn's prompt tokens, cached tokens and seconds, and the ratio of the total
times (the issue's target: <= 0.3). Standard library only; loopback only; starts and stops its own
servers (ports --port and --port+1).

  scripts/bench/responses_turns.py --kvstash build/kvstash -m MODEL.gguf --chat-template-file T.jinja
"""
import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from restart import Server  # noqa: E402

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu river stone cloud forest").split()


def post(url, path, body):
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=3600)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    elapsed = time.perf_counter() - t0
    if resp.status != 200:
        raise RuntimeError("%s: HTTP %d: %s" % (path, resp.status, data[:300]))
    return json.loads(data), elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvstash", default="build/kvstash")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--chat-template-file", default="")
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--words-per-turn", type=int, default=140, help="words of each user message (~1.7 tokens each: 6 turns reach ~1,500 tokens)")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens each answer decodes")
    ap.add_argument("--instructions-words", type=int, default=0,
                    help="words of instructions (an agent's system prompt) sent with every turn: A's `instructions`, "
                         "B's system message (default 0: none, six equal turns)")
    args = ap.parse_args()
    rng = random.Random(7)
    instructions = " ".join(rng.choice(WORDS) for _ in range(args.instructions_words))
    messages = [" ".join(rng.choice(WORDS) for _ in range(args.words_per_turn)) for _ in range(args.turns)]
    common = ["--ctx", "4096", "--alias", "bench"] + (["--chat-template-file", args.chat_template_file]
                                                     if args.chat_template_file else [])
    work = tempfile.mkdtemp(prefix="kvstash-responses-turns.")
    rows = []
    # Both servers up at once and the turns alternated (A's turn i, then B's), so that a change of
    # the machine's load during the run falls on both alike.
    a = Server(args.kvstash, args.model, args.port, common, os.path.join(work, "a.log"))
    b = None
    try:
        b = Server(args.kvstash, args.model, args.port + 1, common + ["--no-prefix-cache", "--no-kv-store"],
                   os.path.join(work, "b.log"))
        previous = None
        history = [{"role": "system", "content": instructions}] if instructions else []
        for i, text in enumerate(messages):
            body = {"model": "bench", "input": text, "max_output_tokens": args.max_tokens, "temperature": 0,
                    "ignore_eos": True}
            if previous:
                body["previous_response_id"] = previous
            if instructions:
                body["instructions"] = instructions
            r, s = post(a.url, "/v1/responses", body)
            previous = r["id"]
            u = r["usage"]
            row = {"turn": i + 1, "a_input_tokens": u["input_tokens"],
                   "a_cached_tokens": u["input_tokens_details"]["cached_tokens"], "a_s": s}
            history.append({"role": "user", "content": text})
            r, s = post(b.url, "/v1/chat/completions", {"model": "bench", "messages": history, "max_tokens": args.max_tokens,
                                                         "temperature": 0, "ignore_eos": True})
            history.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
            row.update({"b_prompt_tokens": r["usage"]["prompt_tokens"],
                        "b_cached_tokens": r["usage"]["prompt_tokens_details"]["cached_tokens"], "b_s": s})
            rows.append(row)
    finally:
        a.stop()
        if b:
            b.stop()
    print("| turn | A: input tokens | A: cached | A: s | B (full history, no cache): prompt tokens | B: cached | B: s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %d | %d | %d | %.3f | %d | %d | %.3f |" % (r["turn"], r["a_input_tokens"], r["a_cached_tokens"], r["a_s"],
                                                         r["b_prompt_tokens"], r["b_cached_tokens"], r["b_s"]))
    ta, tb = sum(r["a_s"] for r in rows), sum(r["b_s"] for r in rows)
    print("\ntotal: A %.3f s, B %.3f s: A/B = %.3f (issue 35's target <= 0.3)" % (ta, tb, ta / tb))
    # Each turn after the first prefills only its new input: what the previous turns left is cached.
    for prev, cur in zip(rows, rows[1:]):
        print("turn %d: cached %d of %d input tokens; the previous turn's whole conversation was %d tokens"
              % (cur["turn"], cur["a_cached_tokens"], cur["a_input_tokens"], prev["a_input_tokens"]))


if __name__ == "__main__":
    main()
