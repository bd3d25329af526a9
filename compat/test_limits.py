"""Abuse limits: connections per client address, bytes before SASL authentication, and
the broker-wide bound on request memory (queued.max.request.bytes), against a real
broker process with raw sockets."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tern_harness import Broker, free_port, wait_until


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def closed_by_peer(sock: socket.socket, timeout: float = 3.0) -> bool:
    """True when the broker closed the connection (EOF or reset) within `timeout`."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def api_versions_frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 3) + b"raw"
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes | None:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">i", head)
    body = sock.recv(size, socket.MSG_WAITALL)
    return body if len(body) == size else None


def answers_api_versions(sock: socket.socket) -> bool:
    sock.settimeout(5)
    sock.sendall(api_versions_frame(11))
    body = read_frame(sock)
    return body is not None and struct.unpack(">i", body[:4])[0] == 11


@pytest.mark.broker_args("--max-connections-per-ip", "5")
def test_connections_beyond_the_per_address_limit_are_closed(broker):
    held: list[socket.socket] = []

    def one_more_is_served() -> bool:
        s = connect(broker.port)
        try:
            if answers_api_versions(s):
                held.append(s)
                return True
        except OSError:
            pass
        s.close()
        return False
    # The harness's readiness probe may still hold a place for a moment.
    for _ in range(5):
        wait_until(one_more_is_served, timeout=5, what="a connection within the limit")
    extra = connect(broker.port)
    assert closed_by_peer(extra), "the sixth connection from one address must be closed"
    held.pop().close()
    # The freed place is taken again (the close is seen asynchronously).
    wait_until(one_more_is_served, timeout=5, what="a connection after one closed")
    assert closed_by_peer(connect(broker.port)), "the limit holds again"
    for s in held:
        s.close()


@pytest.fixture
def sasl_broker(tmp_path, request):
    plain, sasl = free_port(), free_port()
    broker = Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=plain, extra_args=[
        "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "--sasl-max-receive-bytes", "65536",
    ])
    request.node._tern_broker = broker
    broker.start()
    try:
        yield broker, sasl
    finally:
        broker.stop()


def test_an_unauthenticated_client_may_send_only_a_small_budget(sasl_broker):
    broker, sasl = sasl_broker
    # A frame bigger than the budget is refused from its size prefix alone.
    big = connect(sasl)
    big.sendall(struct.pack(">i", 1 << 20) + b"\0" * 1024)
    assert closed_by_peer(big)
    # Small frames add up: ApiVersions is answered until the budget is spent.
    chatty = connect(sasl)
    answered = 0
    try:
        for i in range(10_000):
            chatty.sendall(api_versions_frame(11))
            if read_frame(chatty) is None:
                break
            answered += 1
    except (ConnectionResetError, BrokenPipeError):
        pass
    assert 0 < answered < 65536 // len(api_versions_frame(11)) + 1, answered
    # The PLAINTEXT listener has no such budget.
    plain = connect(broker.port)
    assert all(answers_api_versions(plain) for _ in range(3))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def join_group_frame(group: str, metadata_bytes: int, correlation_id: int) -> bytes:
    """JoinGroup v5 with one protocol carrying `metadata_bytes` of metadata."""
    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()
    body = struct.pack(">hhi", 11, 5, correlation_id) + string("flood")
    body += string(group) + struct.pack(">ii", 30000, 60000) + string("") + struct.pack(">h", -1)
    body += string("consumer") + struct.pack(">i", 1) + string("range")
    body += struct.pack(">i", metadata_bytes) + b"\x01" * metadata_bytes
    return struct.pack(">i", len(body)) + body


@pytest.mark.broker_args("--queued-max-request-bytes", str(16 << 20), "--max-request-bytes", str(2 << 20),
                         "--group-initial-rebalance-delay-ms", "20000")
def test_a_flood_of_parked_requests_is_slowed_not_held(broker):
    baseline = rss_bytes(broker.pid)
    sockets = []
    for i in range(300):
        s = connect(broker.port)
        s.setblocking(False)
        sockets.append((s, memoryview(join_group_frame(f"flood-{i}", 1 << 20, i))))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(len(frame) for _, frame in sockets):
        progressed = False
        for index, (s, frame) in enumerate(sockets):
            if not len(frame):
                continue
            try:
                sent = s.send(frame[:256 * 1024])
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                sent = len(frame)
            sockets[index] = (s, frame[sent:])
            progressed = progressed or sent > 0
        if not progressed:
            time.sleep(0.05)
    peak = rss_bytes(broker.pid)
    for s, _ in sockets:
        s.close()
    # Before the bound, this held ~341 MB within a second. Now the broker reads at most
    # 16 MiB of requests ahead of their replies; the rest waits in the sockets.
    print(f"RSS {baseline >> 20} MiB -> {peak >> 20} MiB")
    assert peak - baseline < 100 << 20, f"broker grew by {(peak - baseline) >> 20} MiB"
    assert broker.alive()
