"""DescribeConfigs v1 and v3 and IncrementalAlterConfigs v0 as raw Kafka requests, one connection
each, no client logic in between.

librdkafka and kafka-python both refuse a BROKER resource whose name is not a broker id,
so neither can address the cluster-wide default ("" = Kafka's `<default>`) that the Java
admin client and kafka-configs.sh --entity-default use: these helpers do, and they show
the synonyms in order (confluent-kafka keys them by name, which merges the levels of one
config).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

BROKER = 4
TOPIC = 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _s16(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def _ns16(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else _s16(text)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return v[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s


def _call(address: str, api_key: int, version: int, body: bytes, timeout: float = 10) -> _Reader:
    header = struct.pack(">hhi", api_key, version, 11) + _s16("tern-compat-raw")
    frame = header + body
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        data = sock.recv(size, socket.MSG_WAITALL)
    r = _Reader(data)
    assert r.take(">i") == 11, "correlation id"
    return r


@dataclass
class Entry:
    name: str
    value: str | None
    read_only: bool
    source: int
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)
    sensitive: bool = False
    config_type: int | None = None  # v3+
    documentation: str | None = None  # v3+ with include_documentation


@dataclass
class Described:
    error_code: int
    error_message: str | None
    configs: dict[str, Entry]


def describe(address: str, resource_type: int, name: str, keys: list[str] | None = None,
             documentation: bool = False) -> Described:
    """DescribeConfigs with include_synonyms for one resource: v1, or v3 (config types
    and, with `documentation`, each config's documentation)."""
    keys_part = struct.pack(">i", -1) if keys is None else (
        struct.pack(">i", len(keys)) + b"".join(_s16(k) for k in keys))
    version = 3 if documentation else 1
    flags = b"\x01\x01" if documentation else b"\x01"
    body = struct.pack(">i", 1) + struct.pack(">b", resource_type) + _s16(name) + keys_part + flags
    r = _call(address, 32, version, body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1, "one result"
    error_code, error_message = r.take(">h"), r.string()
    r.take(">b")
    r.string()
    configs = {}
    for _ in range(r.take(">i")):
        e = Entry(name=r.string(), value=r.string(), read_only=bool(r.take(">b")),
                  source=r.take(">b"))
        e.sensitive = bool(r.take(">b"))
        for _ in range(r.take(">i")):
            e.synonyms.append((r.string(), r.string(), r.take(">b")))
        if version >= 3:
            e.config_type, e.documentation = r.take(">b"), r.string()
        configs[e.name] = e
    return Described(error_code, error_message, configs)


def incremental_alter(address: str, resource_type: int, name: str,
                      ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 on one resource: (error code, error message)."""
    configs = b"".join(_s16(n) + struct.pack(">b", op) + _ns16(v) for n, op, v in ops)
    body = (struct.pack(">i", 1) + struct.pack(">b", resource_type) + _s16(name)
            + struct.pack(">i", len(ops)) + configs + (b"\x01" if validate_only else b"\x00"))
    r = _call(address, 44, 0, body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1, "one response"
    return r.take(">h"), r.string()
