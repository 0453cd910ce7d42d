#!/usr/bin/env python3
"""Hostile and heavy connection loads against a running `kvstash serve` (or any OpenAI-compatible
server), for BENCHMARKS.md. Standard library only; loopback only; every wait is bounded.

  http_load.py --port P half-headers --connections 1000
      N connections each send half a request header and stay idle; meanwhile GET /health and a
      1-token completion are timed (each 20 times, fresh connections).
  http_load.py --port P idle --connections 5000 --pid PID
      N keep-alive connections each make one GET /health and stay open; reports how many are
      still open after --hold seconds and the server's RSS growth (VmRSS of PID).
  http_load.py --port P sse --streams 500 --max-tokens 32
      N concurrent streaming completions; counts those that end with data: [DONE].
  http_load.py --port P overhead --requests 500
      sequential 1-token completions on one keep-alive connection: mean and p50/p99 latency.
"""
import argparse
import asyncio
import json
import resource
import statistics
import time
import urllib.request

HOST = "127.0.0.1"


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


MODEL = None  # the id the server serves (GET /v1/models), set in main(): generation requests name it


def post(path, body, close=False):
    if path.startswith("/v1/") and MODEL is not None:
        body = {"model": MODEL, **body}
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n")
    return head.encode() + data


async def read_response(reader):
    """Reads one HTTP/1.1 answer (Content-Length or chunked); returns (status, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, body
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    n = int(headers.get("content-length", "0"))
    return status, await reader.readexactly(n)


async def timed_request(port, payload, timeout):
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
        writer.write(payload)
        status, _ = await asyncio.wait_for(read_response(reader), timeout)
        writer.close()
        return status, (time.perf_counter() - t0) * 1000
    except Exception as e:  # noqa: BLE001 - a failure is a measurement here
        return type(e).__name__, (time.perf_counter() - t0) * 1000


async def open_many(port, n, first_bytes):
    conns = []
    failed = 0
    for i in range(n):
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port), 5)
            if first_bytes:
                w.write(first_bytes)
            conns.append((r, w))
        except Exception:  # noqa: BLE001
            failed += 1
    return conns, failed


def summary(samples):
    ok = [ms for status, ms in samples if status == 200]
    bad = [status for status, _ in samples if status != 200]
    if not ok:
        return f"0/{len(samples)} ok, errors {bad}"
    return (f"{len(ok)}/{len(samples)} ok, p50 {statistics.median(ok):.1f} ms, max {max(ok):.1f} ms"
            + (f", errors {bad}" if bad else ""))


async def half_headers(args):
    conns, failed = await open_many(args.port, args.connections, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    await asyncio.sleep(0.5)
    health = [await timed_request(args.port, f"GET /health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode(), args.timeout)
              for _ in range(20)]
    completion = [await timed_request(args.port, post("/v1/completions", {"prompt": "hi", "max_tokens": 1,
                                                                         "temperature": 0}), args.timeout)
                  for _ in range(20)]
    print(f"half-headers: {len(conns)} held ({failed} failed to connect)")
    print(f"  /health:             {summary(health)}")
    print(f"  1-token completion:  {summary(completion)}")
    for _, w in conns:
        w.close()


async def idle(args):
    before = rss_kib(args.pid) if args.pid else -1
    conns = []
    failed = 0
    for i in range(args.connections):
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(HOST, args.port), 5)
            w.write(f"GET /health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
            status, _ = await asyncio.wait_for(read_response(r), args.timeout)
            if status != 200:
                failed += 1
            conns.append((r, w))
        except Exception:  # noqa: BLE001
            failed += 1
    await asyncio.sleep(args.hold)
    after = rss_kib(args.pid) if args.pid else -1
    # Still open: a read with a tiny timeout that neither returns EOF nor data.
    open_count = 0
    for r, _ in conns:
        try:
            data = await asyncio.wait_for(r.read(1), 0.001)
            if data:
                open_count += 1
        except asyncio.TimeoutError:
            open_count += 1
        except Exception:  # noqa: BLE001
            pass
    print(f"idle: {len(conns)} connections answered /health ({failed} failed), {open_count} still open "
          f"after {args.hold} s")
    if args.pid:
        print(f"  server RSS {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB: +{(after - before) / 1024:.1f} MiB")
    for _, w in conns:
        w.close()


async def one_stream(port, max_tokens, timeout):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
        w.write(post("/v1/completions", {"prompt": "x", "max_tokens": max_tokens, "ignore_eos": True,
                                          "stream": True}))
        status, body = await asyncio.wait_for(read_response(r), timeout)
        w.close()
        return status == 200 and body.rstrip().endswith(b"data: [DONE]")
    except Exception:  # noqa: BLE001
        return False


async def sse(args):
    t0 = time.perf_counter()
    results = await asyncio.gather(*[one_stream(args.port, args.max_tokens, args.timeout) for _ in range(args.streams)])
    print(f"sse: {sum(results)}/{args.streams} streams of {args.max_tokens} tokens complete with [DONE] "
          f"in {time.perf_counter() - t0:.1f} s")


async def overhead(args):
    r, w = await asyncio.open_connection(HOST, args.port)
    samples = []
    reconnects = 0
    payload = post("/v1/completions", {"prompt": "hi", "max_tokens": 1, "temperature": 0})
    for _ in range(args.requests):
        t0 = time.perf_counter()
        for attempt in range(2):
            try:
                w.write(payload)
                status, _ = await asyncio.wait_for(read_response(r), args.timeout)
                break
            except (asyncio.IncompleteReadError, ConnectionError):
                # The server closed the keep-alive connection (cpp-httplib does after 5 requests):
                # reconnect and retry, as a client must.
                w.close()
                r, w = await asyncio.open_connection(HOST, args.port)
                reconnects += 1
        samples.append((time.perf_counter() - t0) * 1000)
        assert status == 200
    w.close()
    samples.sort()
    print(f"overhead: {args.requests} sequential 1-token completions, mean {statistics.mean(samples):.3f} ms, "
          f"p50 {samples[len(samples) // 2]:.3f} ms, p99 {samples[int(len(samples) * 0.99)]:.3f} ms, "
          f"{reconnects} reconnects")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=30)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("half-headers")
    s.add_argument("--connections", type=int, default=1000)
    s = sub.add_parser("idle")
    s.add_argument("--connections", type=int, default=5000)
    s.add_argument("--pid", type=int, default=0)
    s.add_argument("--hold", type=float, default=5)
    s = sub.add_parser("sse")
    s.add_argument("--streams", type=int, default=500)
    s.add_argument("--max-tokens", type=int, default=32)
    s = sub.add_parser("overhead")
    s.add_argument("--requests", type=int, default=500)
    args = p.parse_args()
    raise_fd_limit()
    global MODEL
    with urllib.request.urlopen(f"http://{HOST}:{args.port}/v1/models", timeout=args.timeout) as r:
        MODEL = json.load(r)["data"][0]["id"]
    asyncio.run({"half-headers": half_headers, "idle": idle, "sse": sse, "overhead": overhead}[args.mode](args))


if __name__ == "__main__":
    main()
