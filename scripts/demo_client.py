#!/usr/bin/env python3
"""Sends the demo's cold and warm requests to a kvstash server and prints what each one cost.

Both requests share a long system prompt (a made-up product manual); the second one asks a different
question, so only the shared prefix can come from the cache. Prints time to first token and
usage.prompt_tokens_details.cached_tokens for each.
"""
import http.client
import json
import sys
import time

host, port = sys.argv[1], int(sys.argv[2])
manual = " ".join(
    f"Section {i}: the stash unit keeps attention keys and values for every prompt it has seen, "
    f"so that request number {i} never recomputes a prefix another request already paid for."
    for i in range(40))


def ask(question):
    body = json.dumps({
        "model": "kvstash",
        "messages": [{"role": "system", "content": manual}, {"role": "user", "content": question}],
        "max_tokens": 16, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    })
    conn = http.client.HTTPConnection(host, port, timeout=300)
    start = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"server answered {resp.status}: {resp.read().decode()}")
    ttft, usage, text = None, None, ""
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            content = choice.get("delta", {}).get("content")
            if content:
                if ttft is None:
                    ttft = time.monotonic() - start
                text += content
    return ttft or 0.0, usage, text


for label, question in (("cold", "What does the stash unit keep?"), ("warm", "Which requests recompute a prefix?")):
    ttft, usage, text = ask(question)
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    print(f"{label}: time to first token {ttft * 1000:8.1f} ms | prompt {usage['prompt_tokens']} tokens, "
          f"{cached} served from the KV cache | {usage['completion_tokens']} generated")
print("(random weights: the generated text is meaningless, its timing is real)")
