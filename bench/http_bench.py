#!/usr/bin/env python3
"""Benchmark of tern's HTTP publish/subscribe API (stdlib only).

    python3 bench/http_bench.py                       # starts target/release/tern itself
    python3 bench/http_bench.py --url http://127.0.0.1:8082   # an already running broker

Creates a topic, subscribes one consumer, publishes N messages of --size bytes from
--threads threads (each its own keep-alive http.client connection), then reads them all
back with GET /message?max=100 on one keep-alive connection. Prints msgs/s and p50/p99
latency for publish and for GET. Bounded: --messages (default 2000) and --timeout seconds
(default 120) for the whole run; a started broker is stopped (SIGTERM, then SIGKILL) at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class Conn:
    """One keep-alive HTTP/1.1 connection; reconnects once if the server closed it."""

    def __init__(self, host: str, port: int, timeout: float):
        self.host, self.port, self.timeout = host, port, timeout
        self.c = http.client.HTTPConnection(host, port, timeout=timeout)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in (0, 1):
            try:
                self.c.request(method, path, body=data, headers=headers)
                r = self.c.getresponse()
                raw = r.read()
                return r.status, json.loads(raw) if raw else {}
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.c.close()
                self.c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.c.close()


def pct(sorted_vals: list[float], p: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[i]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(binary: Path, data_dir: str) -> tuple[subprocess.Popen, int, Path]:
    kafka_port, http_port = free_port(), free_port()
    while http_port == kafka_port:
        http_port = free_port()
    log = Path(data_dir) / "tern.log"
    cmd = [str(binary), "serve", "--data-dir", str(Path(data_dir) / "data"), "--listen", f"127.0.0.1:{kafka_port}",
           "--node-id", "1", "--http", f"127.0.0.1:{http_port}", "--metrics", "127.0.0.1:0"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True, env=dict(os.environ, NO_COLOR="1"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tern exited with {proc.returncode}; log: {log}")
        try:
            with socket.create_connection(("127.0.0.1", http_port), timeout=0.5):
                return proc, http_port, log
        except OSError:
            time.sleep(0.05)
    stop_broker(proc)
    raise SystemExit(f"tern's HTTP API did not come up within 30 s; log: {log}")


def stop_broker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def run(host: str, port: int, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    admin = Conn(host, port, 30)
    topic = f"http-bench-{os.getpid()}-{time.time_ns()}"
    status, doc = admin.call("POST", "/create_topic",
                             {"publisher_id": 1, "topic_name": topic, "partitions": args.partitions})
    if status != 200:
        print(f"create_topic: {status} {doc}", file=sys.stderr)
        return 1
    tid = doc["topic_id"]
    consumer = os.getpid()
    status, doc = admin.call("POST", "/subscribe", {"consumer_id": consumer, "topic_id": tid})
    if status != 200:
        print(f"subscribe: {status} {doc}", file=sys.stderr)
        return 1

    payload = ("x" * args.size)
    n, threads = args.messages, max(1, args.threads)
    per_thread = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
    pub_lat: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []

    def publisher(i: int) -> None:
        c = Conn(host, port, 30)
        try:
            for j in range(per_thread[i]):
                if time.monotonic() > deadline:
                    errors.append(f"publisher {i}: out of time after {j} messages")
                    return
                t = time.perf_counter()
                body = {"topic_id": tid, "message_content": payload}
                if args.keyed:
                    body["key"] = f"{i}-{j}"
                st, d = c.call("POST", "/publish_message", body)
                pub_lat[i].append(time.perf_counter() - t)
                if st != 200:
                    errors.append(f"publish: {st} {d}")
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"publisher {i}: {e!r}")
        finally:
            c.close()

    t0 = time.perf_counter()
    ths = [threading.Thread(target=publisher, args=(i,), daemon=True) for i in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
    pub_s = time.perf_counter() - t0
    published = sum(len(x) for x in pub_lat)
    if errors:
        print("publish errors:", *errors[:5], sep="\n  ", file=sys.stderr)

    # Read everything back, 100 at a time (each GET commits what the previous one returned).
    reader = Conn(host, port, 40)
    get_lat: list[float] = []
    got = 0
    q = urllib.parse.urlencode({"consumer_id": consumer, "topic_id": tid, "max": 100, "wait_ms": 1000})
    t0 = time.perf_counter()
    while got < published and time.monotonic() < deadline:
        t = time.perf_counter()
        st, d = reader.call("GET", f"/message?{q}")
        get_lat.append(time.perf_counter() - t)
        if st != 200:
            print(f"GET /message: {st} {d}", file=sys.stderr)
            break
        batch = d.get("messages", [])
        if not batch:
            break
        got += len(batch)
    get_s = time.perf_counter() - t0
    reader.call("GET", f"/message?{urllib.parse.urlencode({'consumer_id': consumer, 'topic_id': tid, 'max': 1})}")
    reader.close()
    admin.call("POST", "/unsubscribe", {"consumer_id": consumer, "topic_id": tid})
    admin.close()

    pl = sorted(x for xs in pub_lat for x in xs)
    gl = sorted(get_lat)
    ms = lambda v: f"{v * 1000:.2f} ms"  # noqa: E731
    print(f"topic {topic} (id {tid}, {args.partitions} partitions), {args.size} B "
          f"{'keyed' if args.keyed else 'unkeyed'} messages, {threads} publisher threads")
    print(f"publish: {published}/{n} msgs in {pub_s:.2f} s = {published / pub_s if pub_s else 0:.0f} msgs/s, "
          f"p50 {ms(pct(pl, 50))}, p99 {ms(pct(pl, 99))}")
    print(f"GET /message?max=100: {got} msgs in {len(gl)} requests, {get_s:.2f} s = "
          f"{got / get_s if get_s else 0:.0f} msgs/s, p50 {ms(pct(gl, 50))}, p99 {ms(pct(gl, 99))}")
    ok = not errors and published == n and got == published
    if not ok:
        print(f"INCOMPLETE: published {published} of {n}, read {got}", file=sys.stderr)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="base URL of a running broker's HTTP API (default: start target/release/tern)")
    ap.add_argument("--bin", default=os.environ.get("TERN_BIN", str(REPO / "target" / "release" / "tern")))
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1024, help="message size in bytes (default 1 KiB)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--keyed", action="store_true",
                    help="give each message its own key, so messages spread over every partition "
                         "(in a cluster, most then go to another broker's partitions)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole run")
    args = ap.parse_args()
    if args.url:
        u = urllib.parse.urlparse(args.url)
        return run(u.hostname or "127.0.0.1", u.port or 80, args)
    with tempfile.TemporaryDirectory(prefix="tern-http-bench-") as d:
        proc, port, _log = start_broker(Path(args.bin), d)
        try:
            return run("127.0.0.1", port, args)
        finally:
            stop_broker(proc)


if __name__ == "__main__":
    sys.exit(main())
