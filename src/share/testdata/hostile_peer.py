#!/usr/bin/env python3
"""A hostile kvstash peer for the bounded-peer-I/O tests (issue 31).

Listens on 127.0.0.1 (port from argv[1], 0 = any), prints "PORT <n>" on stdout, then answers every
peer request (GET /v1/kv/chunks|responses|fragments/..., PUT /v1/kv/fragments/...) by misbehaving
on the wire, per the current mode:
  trickle-headers  "HTTP/1.1 200 OK" then one header byte every 100 ms, never ending the head
  trickle-body     a complete head (Content-Length 1 MB, under any cap) then one body byte every 100 ms
  endless          a complete head without a length (close-delimited), then 64 KiB blocks as fast
                   as the client reads, forever
  chunked          a well-formed chunked answer: "hello, bounded world" in three chunks
  chunked-endless  a chunked answer whose chunks never end
  chunked-flood    a chunked answer of one-byte chunks sent as fast as the socket takes them
  chunked-longline a chunk-size line whose extension never ends
  notfound         404 at once (well behaved)
Control (from the test): GET /__mode/<mode> sets the mode; GET /__stats answers JSON counters:
open (connections being answered now), by kind (chunk, response, fragment-get, fragment-put)
and bytes_sent. Every misbehaving answer stops when the client closes or after 120 s.
"""
import json
import socket
import sys
import threading
import time

STATE = {"mode": "notfound", "open": 0, "bytes_sent": 0, "chunk": 0, "response": 0,
         "fragment-get": 0, "fragment-put": 0, "max_open": 0}
LOCK = threading.Lock()


def count(key, delta=1):
    with LOCK:
        STATE[key] += delta
        if key == "open":
            STATE["max_open"] = max(STATE["max_open"], STATE["open"])


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None, None
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target = lines[0].split(" ")[:2]
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        rest += piece
    return method, target


def answer_plain(conn, status, body):
    body = body.encode()
    conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % (status, len(body)) + body)


def misbehave(conn, mode):
    deadline = time.time() + 120
    if mode == "notfound":
        answer_plain(conn, 404, "{}")
        return
    if mode == "trickle-headers":
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: ")
        while time.time() < deadline:
            conn.sendall(b"a")
            count("bytes_sent")
            time.sleep(0.1)
        return
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    head += b"X-Kvstash-Manifest: 00\r\nX-Kvstash-Fragment-Set: 00\r\n"
    if mode == "trickle-body":
        conn.sendall(head + b"Content-Length: 1000000\r\n\r\n")
        while time.time() < deadline:
            conn.sendall(b"x")
            count("bytes_sent")
            time.sleep(0.1)
        return
    if mode == "chunked":
        conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n"
                     b"7\r\nhello, \r\n8;ext=1\r\nbounded \r\n5\r\nworld\r\n0\r\n\r\n")
        return
    if mode == "chunked-endless":
        conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
        block = b"10000\r\n" + b"z" * 65536 + b"\r\n"
        while time.time() < deadline:
            conn.sendall(block)
            count("bytes_sent", len(block))
        return
    if mode == "chunked-flood":
        conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
        block = b"1\r\nA\r\n" * 10000
        while time.time() < deadline:
            conn.sendall(block)
            count("bytes_sent", len(block))
        return
    if mode == "chunked-longline":
        conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n1;x=")
        block = b"y" * 4096
        while time.time() < deadline:
            conn.sendall(block)
            count("bytes_sent", len(block))
        return
    if mode == "endless":
        conn.sendall(head + b"Connection: close\r\n\r\n")
        block = b"y" * 65536
        while time.time() < deadline:
            conn.sendall(block)
            count("bytes_sent", len(block))


def serve(conn):
    count("open")
    try:
        method, target = read_request(conn)
        if method is None:
            return
        if target.startswith("/__mode/"):
            with LOCK:
                STATE["mode"] = target[len("/__mode/"):]
            answer_plain(conn, 200, "{}")
            return
        if target == "/__stats":
            with LOCK:
                body = json.dumps(STATE)
            answer_plain(conn, 200, body)
            return
        if target.startswith("/v1/kv/chunks/"):
            count("chunk")
        elif target.startswith("/v1/kv/responses/"):
            count("response")
        elif target.startswith("/v1/kv/fragments/"):
            count("fragment-put" if method == "PUT" else "fragment-get")
        else:
            answer_plain(conn, 404, "{}")
            return
        with LOCK:
            mode = STATE["mode"]
        misbehave(conn, mode)
    except OSError:
        pass  # the client gave up: what a bounded client does
    finally:
        count("open", -1)
        conn.close()


def main():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0))
    server.listen(128)
    print("PORT %d" % server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
