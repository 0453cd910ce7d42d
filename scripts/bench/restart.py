#!/usr/bin/env python3
"""Cached KV across a restart and across nodes: issue 10's "restart" figures, in one run.

Disk: a round of D documents (--doc-len token ids each, a question of --question-len ids appended)
on a cold server with a fresh --cache-disk directory; the server is stopped (SIGTERM, so its
write-behind queue drains) and started again on the same directory with an empty memory tier;
the same documents are asked again, each with a new question. The figure is the second round's
total time over the first's (and the same for the sum of TTFTs).

Redis: node A (its own disk-less store, a real redis-server on loopback) computes one document
of --redis-doc-len ids; node B, a fresh process on the same Redis, gets the same document with a
new question. The figure is B's TTFT over A's cold TTFT.

Every request streams /v1/completions over token ids with temperature 0; the answers of the hit
round are compared with the same prompts computed cold, token for token. Python 3 standard
library only; starts and stops its own servers (ports --port, --port+1, --redis-port).
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cached_ttft import stream_ttft  # noqa: E402


def wait_ready(url, proc, log_path, limit_s=120):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + open(log_path).read()[-2000:])
        try:
            with urllib.request.urlopen(url + "/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready after %d s: %s" % (limit_s, log_path))


def port_is_free(port):
    import socket
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class Server:
    def __init__(self, binary, model, port, extra, log_path):
        if not port_is_free(port):
            raise RuntimeError("port %d is in use (a server left from an earlier run?)" % port)
        self.url = "http://127.0.0.1:%d" % port
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", str(port), "--parallel", "2",
                                      "--log-format", "text"] + extra, stdout=self.log, stderr=subprocess.STDOUT)
        wait_ready(self.url, self.proc, log_path)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)
        self.log.close()


def ask(url, prompt, max_tokens):
    """TTFT, total seconds, usage and the answer's tokens (non-streaming timing from the stream)."""
    t0 = time.perf_counter()
    ttft, usage, tokens = stream_ttft(url, prompt, max_tokens=max_tokens, want_tokens=True)
    return ttft, time.perf_counter() - t0, usage, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvstash", default="build/kvstash")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--documents", type=int, default=6)
    ap.add_argument("--doc-len", type=int, default=500)
    ap.add_argument("--question-len", type=int, default=16)
    ap.add_argument("--redis-doc-len", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--chunk-tokens", type=int, default=64)
    ap.add_argument("--port", type=int, default=18310)
    ap.add_argument("--redis-port", type=int, default=18319)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--id-range", type=int, nargs=2, default=[1000, 30000])
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ids = lambda n: [rng.randrange(*args.id_range) for _ in range(n)]
    work = tempfile.mkdtemp(prefix="kvstash-restart-")
    common = ["--chunk-tokens", str(args.chunk_tokens), "--identity", os.path.join(work, "node.key")]
    out = {"model": args.model, "documents": args.documents, "doc_len": args.doc_len,
           "question_len": args.question_len, "max_tokens": args.max_tokens, "load_avg_start": os.getloadavg()}
    try:
        # Disk across a restart.
        docs = [ids(args.doc_len) for _ in range(args.documents)]
        first_q = [ids(args.question_len) for _ in docs]
        second_q = [ids(args.question_len) for _ in docs]
        disk = ["--cache-disk", os.path.join(work, "disk"), "--cache-ram", "0"]
        a = Server(args.kvstash, args.model, args.port, common + disk, os.path.join(work, "a.log"))
        cold = [ask(a.url, d + q, args.max_tokens) for d, q in zip(docs, first_q)]
        a.stop()
        b = Server(args.kvstash, args.model, args.port, common + disk, os.path.join(work, "b.log"))
        warm = [ask(b.url, d + q, args.max_tokens) for d, q in zip(docs, second_q)]
        b.stop()
        # The second round's answers must be those of the same prompts computed without any cache.
        ref = Server(args.kvstash, args.model, args.port, common + ["--no-kv-store", "--no-prefix-cache"],
                     os.path.join(work, "ref.log"))
        same = [ask(ref.url, d + q, args.max_tokens)[3] == w[3] for d, q, w in zip(docs, second_q, warm)]
        ref.stop()
        out["disk"] = {
            "cold_total_s": sum(c[1] for c in cold), "restart_total_s": sum(w[1] for w in warm),
            "cold_ttft_sum_s": sum(c[0] for c in cold), "restart_ttft_sum_s": sum(w[0] for w in warm),
            "restart_cached_tokens": [w[2]["prompt_tokens_details"]["cached_tokens"] for w in warm],
            "same_tokens_as_uncached": same}
        d = out["disk"]
        d["total_ratio"] = d["restart_total_s"] / d["cold_total_s"]
        d["ttft_ratio"] = d["restart_ttft_sum_s"] / d["cold_ttft_sum_s"]
        print(json.dumps({"disk": d}), file=sys.stderr)

        # A second node on the same Redis.
        redis = subprocess.Popen(["redis-server", "--port", str(args.redis_port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):  # bounded: up to 10 s for redis-server to accept connections
            if subprocess.run(["redis-cli", "-p", str(args.redis_port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.1)
        try:
            shared = ["--cache-redis", "redis://127.0.0.1:%d" % args.redis_port, "--cache-ram", "0"]
            doc = ids(args.redis_doc_len)
            node_a = Server(args.kvstash, args.model, args.port, common + shared, os.path.join(work, "node-a.log"))
            a_ttft, a_total, _, _ = ask(node_a.url, doc + ids(args.question_len), args.max_tokens)
            node_a.stop()  # drains its writes into Redis
            node_b = Server(args.kvstash, args.model, args.port + 1,
                            ["--chunk-tokens", str(args.chunk_tokens), "--identity", os.path.join(work, "b.key")] + shared,
                            os.path.join(work, "node-b.log"))
            q = ids(args.question_len)
            b_ttft, b_total, b_usage, b_tokens = ask(node_b.url, doc + q, args.max_tokens)
            node_b.stop()
            ref = Server(args.kvstash, args.model, args.port, common + ["--no-kv-store", "--no-prefix-cache"],
                         os.path.join(work, "ref2.log"))
            same = ask(ref.url, doc + q, args.max_tokens)[3] == b_tokens
            ref.stop()
        finally:
            redis.terminate()
            redis.wait()
        out["redis"] = {"cold_ttft_s": a_ttft, "second_node_ttft_s": b_ttft, "ttft_ratio": b_ttft / a_ttft,
                        "second_node_cached_tokens": b_usage["prompt_tokens_details"]["cached_tokens"],
                        "same_tokens_as_uncached": same}
        out["load_avg_end"] = os.getloadavg()
        print(json.dumps(out, indent=1))
    finally:
        if not os.environ.get("KVSTASH_BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept " + work, file=sys.stderr)


if __name__ == "__main__":
    main()
