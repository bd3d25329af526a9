"""The Parquet archive (issue 14): what retention would delete is first written as Parquet
objects in Hive-style folders, to a directory or to S3 (moto's server here), and DuckDB
reads them back exactly as they were produced.

What is asserted: with every codec, DuckDB over the archive directory finds each
archived record once, with its key, value, headers and timestamp; the objects' names,
date folders, manifests and `tern archive ls` agree with their rows; S3 holds the same;
an archive target that is down holds retention back (nothing is deleted) until it comes
back, unless the topic says archive.on.failure=delete; kill -9 of the exporting broker,
alone or as a partition's leader in a cluster, leaves no gap and no duplicate once the
export has finished; `tern archive restore` produces the records back as they were;
message_status says "archived" and where; archive.enable and archive.on.failure are topic
configs like any other.

Records become archivable by the recipe in produce_archivable(): a topic with
retention.ms = 1 h and internal.segment.bytes = 1024, N records stamped two hours ago, then two
fresh sentinels too big to share a segment, so exactly the N old records sit in sealed,
expired segments. Archived, they leave the broker (ListOffsets earliest == N).

DuckDB reserves the word OFFSET: its queries quote the column ("offset"). topic and
partition come from the Hive path only (the files do not repeat them), so pyarrow and
pandas read the whole directory too. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote, urlparse

import boto3
import duckdb
import pyarrow.parquet as pq
import pytest
from botocore.config import Config as BotoConfig
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigSource, NewTopic, ResourceType

import ck
import tern_harness
from http_client import Http, message_id_of
from test_cluster import FAILOVER_BOUND_S, Cluster
from test_configs import admin_for, describe, incremental, low_watermark, value_and_source
from tern_harness import Broker, BrokerError, free_port, port_accepts, tern_bin, wait_until

HOUR_MS = 3_600_000
# The recipe's topic: old records expire, and small segments seal often.
ARCHIVED_TOPIC = {"retention.ms": str(HOUR_MS), "internal.segment.bytes": "1024"}
# A sentinel's batch (~970 bytes, uncompressed) fits in a segment (a bigger one is refused:
# RECORD_LIST_TOO_LARGE, as in Kafka) but not beside anything else: each one seals the
# segment before it.
SENTINEL_BYTES = 900
# The exporter and retention look often, so a test waits well under a second for either.
ARCHIVE_ARGS = ["--archive-interval-ms", "300", "--log-retention-check-interval-ms", "200"]
ENABLED = ["--archive-enable", "true", *ARCHIVE_ARGS]
# An export of ~200 KB of log then takes seconds, in many small objects.
SLOW_EXPORT = ["--archive-io-max-bytes-per-second", "20000", "--archive-memory-bytes", "8192"]
# Several records per batch, in many batches (and so many segments).
BATCHING = {"linger.ms": 20, "batch.num.messages": 7}

S3_KEY_ID, S3_SECRET, S3_REGION = "testing", "testing", "us-east-1"
BUCKET = "tern-archive"

# The spec's query, with OFFSET quoted (unquoted, DuckDB's parser refuses it).
SPEC_QUERY = ("SELECT count(*), min(\"offset\"), max(\"offset\") "
              "FROM read_parquet('{root}/topic={topic}/**/*.parquet', hive_partitioning=true)")


# ---------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Rec:
    """A record as produced, where the broker put it."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int  # CreateTime, ms


def make_messages(n: int, partitions: int = 1, value_size: int = 0) -> list[dict]:
    """n messages for ck.produce_all, stamped two hours ago (1 ms apart, in order): distinct
    keys but one null, distinct values (not UTF-8) but one null, no headers on every third
    and two on the others (one with a null value). value_size adds incompressible bytes."""
    base = int(time.time() * 1000) - 2 * HOUR_MS
    return [{
        "partition": i % partitions,
        "key": None if i == 3 else b"key-%d" % i,
        "value": None if i == 5 else b"value-%d-\x00\xff" % i + random.Random(i).randbytes(value_size),
        "headers": [] if i % 3 == 0 else [("trace", b"t-%d" % i), ("nothing", None)],
        "timestamp": base + i,
    } for i in range(n)]


def produce_archivable(address: str, topic: str, n: int, partitions: int = 1, config: dict | None = None,
                       value_size: int = 0) -> list[Rec]:
    """Produces n old records into a fresh topic of ARCHIVED_TOPIC configs, then two
    sentinels per partition (one uncompressed batch each, now). Returns the old records,
    which are exactly what retention would delete, sorted by (partition, offset)."""
    messages = make_messages(n, partitions, value_size)
    reports = ck.produce_all(address, topic, messages, {**BATCHING, **(config or {})})
    assert all(err is None for _, err, _, _ in reports), [r for r in reports if r[1]][:3]
    recs = sorted((Rec(p, offset, messages[i]["key"], messages[i]["value"], tuple(messages[i]["headers"]),
                       messages[i]["timestamp"]) for i, _, p, offset in reports),
                  key=lambda r: (r.partition, r.offset))
    for p, count in ends_of(recs).items():
        assert [r.offset for r in recs if r.partition == p] == list(range(count)), f"partition {p}'s offsets"
        for _ in range(2):
            (report,) = ck.produce_all(address, topic, [{"partition": p, "value": os.urandom(SENTINEL_BYTES)}],
                                       {**(config or {}), "compression.type": "none"})
            assert report[1] is None, report
    return recs


def ends_of(recs: list[Rec]) -> dict[int, int]:
    """partition -> the log start offset once its records are archived (and their count)."""
    return dict(sorted(Counter(r.partition for r in recs).items()))


def create_topic(address: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": address, "socket.timeout.ms": 10000})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
                        operation_timeout=10)[name].result(timeout=15)


def wait_log_start(address: str, topic: str, recs: list[Rec], timeout: float = 30.0) -> None:
    """Until ListOffsets earliest of every partition is past its archivable records."""
    ends = ends_of(recs)
    wait_until(lambda: all(low_watermark(address, topic, p)[0] == n for p, n in ends.items()), timeout,
               interval=0.2, what=f"log start offsets {ends} of {topic}")


def assert_sentinels_readable(address: str, topic: str, recs: list[Rec]) -> None:
    messages, errors, watermarks = ck.consume_all(address, topic)
    assert not errors, errors
    for p, n in ends_of(recs).items():
        assert watermarks[p] == (n, n + 2), watermarks
        assert [m.offset() for m in messages if m.partition() == p] == [n, n + 1]


# ---------------------------------------------------------------------------- the archive


def _httpfs_extension() -> str:
    """DuckDB's httpfs extension, from the duckdb-extension-httpfs wheel (INSTALL would
    download it; DuckDB checks its signature on LOAD)."""
    import duckdb_extension_httpfs
    root = Path(duckdb_extension_httpfs.__file__).parent
    found = sorted(root.glob(f"extensions/v{duckdb.__version__}/httpfs.duckdb_extension"))
    assert found, f"no httpfs extension for duckdb {duckdb.__version__} in {root} (compat/requirements.txt)"
    return str(found[0])


class DirArchive:
    """An archive in a local directory (--archive-dir)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = str(self.root)

    def flags(self) -> list[str]:
        return ["--archive-dir", str(self.root)]

    def read(self, rel: str) -> bytes | None:
        try:
            return (self.root / rel).read_bytes()
        except FileNotFoundError:
            return None

    def size(self, rel: str) -> int:
        return (self.root / rel).stat().st_size

    def block(self, topic: str) -> Path:
        """A regular file where the topic's folder goes: every write under it fails (the
        tests run as root, so permissions would not stop one)."""
        self.root.mkdir(parents=True, exist_ok=True)
        blocker = self.root / f"topic={topic}"
        blocker.write_text("not a directory\n")
        return blocker

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        return duckdb.connect()


class Moto:
    """moto's S3 server on 127.0.0.1:port (started by start(), not before), with boto3."""

    def __init__(self, log_dir: Path, port: int | None = None):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_dir = Path(log_dir)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "Moto":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "moto.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        tern_harness._STARTED.append(self.proc)  # killed at exit, should a test be cut short
        wait_until(lambda: self.proc.poll() is None and port_accepts(self.port), timeout, what=f"moto on {self.endpoint}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def s3(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=S3_REGION, aws_access_key_id=S3_KEY_ID,
                            aws_secret_access_key=S3_SECRET,
                            config=BotoConfig(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2}))

    def create_bucket(self, name: str) -> None:
        self.s3().create_bucket(Bucket=name)


class S3Archive:
    """An archive in moto's S3 (--archive-url s3://BUCKET/PREFIX and its endpoint flags)."""

    def __init__(self, moto: Moto, bucket: str = BUCKET, prefix: str = "tern/archive"):
        self.moto = moto
        self.bucket, self.prefix = bucket, prefix
        self.url = f"s3://{bucket}/{prefix}"

    def flags(self) -> list[str]:
        return ["--archive-url", self.url, "--archive-s3-endpoint", self.moto.endpoint,
                "--archive-s3-allow-http", "true", "--archive-s3-region", S3_REGION,
                "--archive-s3-access-key-id", S3_KEY_ID, "--archive-s3-secret-access-key", S3_SECRET]

    def read(self, rel: str) -> bytes | None:
        s3 = self.moto.s3()
        try:
            return s3.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")["Body"].read()
        except s3.exceptions.NoSuchKey:
            return None

    def size(self, rel: str) -> int:
        return self.moto.s3().head_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")["ContentLength"]

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute(f"LOAD '{_httpfs_extension()}'")
        con.execute(f"CREATE SECRET moto (TYPE s3, KEY_ID '{S3_KEY_ID}', SECRET '{S3_SECRET}', REGION '{S3_REGION}', "
                    f"ENDPOINT '127.0.0.1:{self.moto.port}', URL_STYLE 'path', USE_SSL false)")
        return con


def manifest(archive, topic: str, partition: int) -> dict | None:
    raw = archive.read(f"topic={topic}/partition={partition}/_manifest.json")
    return None if raw is None else json.loads(raw)


def next_offset(archive, topic: str, partition: int = 0) -> int:
    """The manifest's next_offset (0 before there is a manifest)."""
    return (manifest(archive, topic, partition) or {}).get("next_offset", 0)


def archive_rows(archive, topic: str) -> list[dict]:
    """Every row DuckDB reads from the topic's archive (hive keys included), in (partition,
    offset) order, each as a dict; `headers` is a list of {"key", "value"} dicts."""
    con = archive.duckdb()
    cur = con.execute(
        f"SELECT topic, partition, \"offset\", key, value, headers, epoch_ms(\"timestamp\") AS ts, timestamp_type, "
        f"producer_id, producer_epoch, leader_epoch, filename "
        f"FROM read_parquet('{archive.url}/topic={topic}/**/*.parquet', hive_partitioning=true, filename=true) "
        f"ORDER BY partition, \"offset\"")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def plant_orphan(archive: DirArchive, topic: str, first: Rec) -> Path:
    """An object for records first.offset.. that no manifest lists (its rows copied from a
    listed object): what a crash between an object's write and its manifest's leaves."""
    listed = manifest(archive, topic, first.partition)["entries"][0]["path"]
    orphan = (archive.root / f"topic={topic}/partition={first.partition}/date={utc_date(first.timestamp)}"
              / f"{first.offset:020}-{first.offset + 3:020}.parquet")
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes((archive.root / listed).read_bytes())
    return orphan


def utc_date(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)).strftime("%Y-%m-%d")


def assert_archive_holds(archive, topic: str, recs: list[Rec]) -> None:
    """The topic's archive holds exactly `recs`, as DuckDB reads it: each (partition, offset)
    once and nothing else, with the key, value, headers, timestamp and timestamp type it
    was produced with; the spec's query counts them; each object's name, date folder and
    manifest entry agree with its rows, every manifest reaches its partition's end, and no
    object is left that a manifest does not list."""
    rows = archive_rows(archive, topic)
    got = [(r["partition"], r["offset"]) for r in rows]
    dupes = sorted(k for k, c in Counter(got).items() if c > 1)
    assert not dupes, f"{len(dupes)} records archived more than once, e.g. {dupes[:5]}"
    want = [(r.partition, r.offset) for r in recs]
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    assert not missing and not extra, f"missing {len(missing)} (e.g. {missing[:5]}), extra {len(extra)} (e.g. {extra[:5]})"
    for rec, row in zip(recs, rows):
        headers = tuple((h["key"], h["value"]) for h in row["headers"])
        assert (row["topic"], row["key"], row["value"], headers, row["ts"], row["timestamp_type"]) == (
            topic, rec.key, rec.value, rec.headers, rec.timestamp, "CreateTime"), (rec, row)
        # No idempotent producer here: no producer id or epoch.
        assert (row["producer_id"], row["producer_epoch"]) == (-1, -1), row
        assert isinstance(row["leader_epoch"], int) and row["leader_epoch"] >= 0, row
    counted = archive.duckdb().execute(SPEC_QUERY.format(root=archive.url, topic=topic)).fetchone()
    assert counted == (len(recs), min(r.offset for r in recs), max(r.offset for r in recs)), counted
    assert_objects_match_manifests(archive, topic, rows, ends_of(recs))


def assert_objects_match_manifests(archive, topic: str, rows: list[dict], ends: dict[int, int]) -> None:
    """Manifests (contiguous entries up to each partition's end) and objects (one run of
    offsets each, named and dated by its rows) agree, object by object."""
    listed: dict[str, dict] = {}
    for p, n in ends.items():
        m = manifest(archive, topic, p)
        assert m is not None, f"no manifest for {topic}/{p}"
        assert (m["topic"], m["partition"], m["next_offset"]) == (topic, p, n), {k: m[k] for k in m if k != "entries"}
        at = 0
        for e in m["entries"]:
            assert e["first_offset"] == at and e["first_offset"] <= e["last_offset"] < e["end_offset"], (at, e)
            assert e["path"].startswith(f"topic={topic}/partition={p}/date="), e
            assert e["bytes"] == archive.size(e["path"]) and e["log_bytes"] > 0, e
            at = e["end_offset"]
            listed[e["path"]] = e
        assert at == n, f"partition {p}: the manifest's entries end at {at}, not {n}"
    by_object: dict[str, list[dict]] = {}
    for r in rows:
        assert r["filename"].startswith(archive.url + "/"), r["filename"]
        by_object.setdefault(r["filename"][len(archive.url) + 1:], []).append(r)
    assert set(by_object) == set(listed), (f"objects not in a manifest (orphans): {sorted(set(by_object) - set(listed))}; "
                                           f"listed but unread: {sorted(set(listed) - set(by_object))}")
    for path, object_rows in by_object.items():
        e = listed[path]
        offsets = [r["offset"] for r in object_rows]
        first, last = offsets[0], offsets[-1]
        assert offsets == list(range(first, last + 1)), f"{path} is not one run of offsets"
        assert path.rsplit("/", 1)[1] == f"{first:020}-{last:020}.parquet", path
        assert f"/partition={object_rows[0]['partition']}/date={utc_date(object_rows[0]['ts'])}/" in path, \
            "the date folder is the UTC day of the object's first record"
        stamps = [r["ts"] for r in object_rows]
        assert (e["first_offset"], e["last_offset"], e["records"], e["min_timestamp"], e["max_timestamp"]) == (
            first, last, len(object_rows), min(stamps), max(stamps)), e


def assert_ls(archive, topic: str, recs: list[Rec]) -> None:
    """`tern archive ls` reads the same archive: per partition, objects covering 0..n-1."""
    doc = json.loads(tern_cli("archive", "ls", topic, *archive.flags(), "--json"))
    assert doc["topic"] == topic, doc
    parts = {p["partition"]: p for p in doc["partitions"]}
    ends = ends_of(recs)
    assert set(parts) == set(ends), doc
    for p, n in ends.items():
        objects = parts[p]["objects"]
        assert parts[p]["next_offset"] == n and sum(o["records"] for o in objects) == n, parts[p]
        ranges = sorted((o["first_offset"], o["last_offset"]) for o in objects)
        assert ranges[0][0] == 0 and ranges[-1][1] == n - 1, ranges
        assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:])), f"gaps or overlaps: {ranges}"
        assert all(o["path"].startswith(f"topic={topic}/partition={p}/") for o in objects), objects
    assert tern_cli("archive", "ls", topic, *archive.flags()).strip(), "the table is empty"


# Parquet leaf columns (list levels dropped) -> physical type, and STRING or not.
SCHEMA = {
    "offset": ("INT64", False), "timestamp": ("INT64", False), "timestamp_type": ("BYTE_ARRAY", True),
    "key": ("BYTE_ARRAY", False), "value": ("BYTE_ARRAY", False),
    "headers.key": ("BYTE_ARRAY", True), "headers.value": ("BYTE_ARRAY", False),
    "producer_id": ("INT64", False), "producer_epoch": ("INT32", False), "leader_epoch": ("INT32", False),
}
# topic and partition are the Hive path's keys, never file columns: a file column that
# repeats a path key breaks Spark (duplicate column) and pyarrow/pandas directory reads
# (the path's dictionary type against the file's). A file names them in its metadata.
HIVE_KEYS = ("topic", "partition")


def assert_parquet_schema(path: Path, records: int) -> None:
    """One object's Parquet schema (as pyarrow reads it): the spec's columns and types,
    TIMESTAMP(MILLIS, UTC), BLOBs that are not STRING, every column chunk snappy."""
    pf = pq.ParquetFile(path)
    columns = {}
    for i in range(len(pf.schema)):
        c = pf.schema.column(i)
        columns[".".join(x for x in c.path.split(".") if x not in ("list", "element", "item"))] = c
    assert set(columns) == set(SCHEMA), sorted(columns)
    for name, c in columns.items():
        physical, string = SCHEMA[name]
        assert (c.physical_type, c.logical_type.type == "STRING") == (physical, string), (name, c)
    ts = json.loads(columns["timestamp"].logical_type.to_json())
    assert (ts["Type"], ts["isAdjustedToUTC"], ts["timeUnit"]) == ("Timestamp", True, "milliseconds"), ts
    md = pf.metadata
    assert md.num_rows == records
    kv = {k.decode(): v.decode() for k, v in (md.metadata or {}).items()}
    topic, partition = (re.search(rf"{k}=([^/]+)", str(path)).group(1) for k in HIVE_KEYS)
    assert (kv.get("tern.topic"), kv.get("tern.partition")) == (topic, partition), kv
    codecs = {md.row_group(g).column(i).compression for g in range(md.num_row_groups) for i in range(md.num_columns)}
    assert codecs == {"SNAPPY"}, codecs


# ---------------------------------------------------------------------------- the broker


def tern_cli(*args, timeout: float = 60.0) -> str:
    r = subprocess.run([str(tern_bin()), *map(str, args)], capture_output=True, timeout=timeout)
    assert r.returncode == 0, f"tern {' '.join(map(str, args))} exited {r.returncode}: {r.stderr.decode()[-3000:]}"
    return r.stdout.decode()


def metric(broker: Broker, name: str, topic: str) -> float:
    """Sum of the samples of `name` with label topic="<topic>" on the broker's /metrics."""
    port = broker.extra_args[broker.extra_args.index("--metrics") + 1].rsplit(":", 1)[1]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample.split("{", 1)[0] == name and f'topic="{topic}"' in sample:
            total += float(value)
    return total


def broker_log(broker: Broker) -> str:
    return "\n".join(p.read_text(errors="replace") for p in broker.log_paths if p.exists())


@pytest.fixture
def start_broker(tmp_path, request):
    """start_broker(*flags, name=...) starts a broker with these `tern serve` flags and a
    metrics port (its data and logs under tmp_path, by name); all are stopped at the end."""
    started: list[Broker] = []

    def start(*flags: str, name: str = "broker") -> Broker:
        b = Broker(data_dir=tmp_path / f"data-{name}", log_dir=tmp_path / f"logs-{name}", port=free_port(),
                   extra_args=["--metrics", f"127.0.0.1:{free_port()}", *flags])
        request.node._tern_broker = b  # conftest attaches its log to a failure
        started.append(b)
        b.start()
        return b

    yield start
    errors = []
    for b in started:
        try:
            b.stop()
        except BrokerError as e:
            errors.append(str(e))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture
def moto(tmp_path):
    """moto's S3 server on a free port, not yet started (a test calls .start())."""
    m = Moto(tmp_path / "logs-moto")
    try:
        yield m
    finally:
        m.stop()


# ---------------------------------------------------------------------------- the tests


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_archive_to_a_directory_is_read_by_duckdb_exactly(start_broker, tmp_path, topic, codec):
    """Whatever codec the producer's batches have, the archive holds each expired record
    once, decoded: DuckDB over the directory reads every key, value, header and timestamp
    as produced, the files have the spec's schema, `tern archive ls` lists contiguous
    objects, the metrics count the records, and the sentinels stay on the broker."""
    archive = DirArchive(tmp_path / "archive")
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 200, config={"compression.type": codec})
    wait_log_start(b.address, topic, recs)
    assert_archive_holds(archive, topic, recs)
    assert_ls(archive, topic, recs)
    entries = manifest(archive, topic, 0)["entries"]
    for e in entries:
        assert_parquet_schema(archive.root / e["path"], e["records"])
    # pandas' and pyarrow's usual read of a Hive directory: topic and partition from the path.
    table = pq.read_table(archive.root / f"topic={topic}")
    assert table.num_rows == len(recs)
    assert sorted(set(table.column("partition").to_pylist())) == sorted({r.partition for r in recs})
    wait_until(lambda: metric(b, "tern_archive_records_total", topic) >= len(recs), 5,
               what="tern_archive_records_total")
    assert metric(b, "tern_archive_objects_total", topic) >= len(entries)
    assert metric(b, "tern_archive_object_bytes_total", topic) >= sum(e["bytes"] for e in entries)
    assert metric(b, "tern_archive_bytes_total", topic) >= sum(e["log_bytes"] for e in entries)
    assert metric(b, "tern_archive_failures_total", topic) == 0
    wait_until(lambda: metric(b, "tern_archive_lag_seconds", topic) == 0, 5, what="no archive lag")
    assert_sentinels_readable(b.address, topic, recs)


@pytest.mark.timeout(90)
def test_archive_to_s3(start_broker, moto, topic):
    """The same archive in an S3 bucket under a prefix (moto's server, path-style, plain
    HTTP): DuckDB's httpfs globs and reads it exactly, `tern archive ls` reads it with the
    broker's location flags, and nothing lands outside the prefix."""
    moto.start().create_bucket(BUCKET)
    archive = S3Archive(moto)
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, partitions=2, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 200, partitions=2, config={"compression.type": "zstd"})
    wait_log_start(b.address, topic, recs)
    assert_archive_holds(archive, topic, recs)
    assert_ls(archive, topic, recs)
    keys = [o["Key"] for o in moto.s3().list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert all(k.startswith(f"{archive.prefix}/topic={topic}/partition=") for k in keys), keys
    wait_until(lambda: metric(b, "tern_archive_records_total", topic) >= len(recs), 5,
               what="tern_archive_records_total")
    assert_sentinels_readable(b.address, topic, recs)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("target", ["dir", "s3"])
def test_a_down_target_holds_retention_until_it_returns(start_broker, moto, tmp_path, topic, target):
    """While the archive cannot be written (a file where the topic's folder goes; an S3
    endpoint nothing listens on yet), retention deletes nothing of an archived topic through
    many archive intervals and retention checks; the failures are counted and logged, the
    lag shows; once the target is back, the archive catches up exactly."""
    if target == "dir":
        archive = DirArchive(tmp_path / "archive")
        bring_back = archive.block(topic).unlink
    else:
        archive = S3Archive(moto)  # moto has a port but is not started

        def bring_back():
            moto.start().create_bucket(BUCKET)
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 100)
    wait_until(lambda: metric(b, "tern_archive_failures_total", topic) > 0, 30, what="a failed export")
    failures = metric(b, "tern_archive_failures_total", topic)
    deadline = time.monotonic() + 3.0  # 10 archive intervals, 15 retention checks
    while time.monotonic() < deadline:
        assert low_watermark(b.address, topic, 0) == (0, len(recs) + 2), "retention deleted unarchived records"
        time.sleep(0.25)
    wait_until(lambda: metric(b, "tern_archive_failures_total", topic) > failures, 30, what="the exporter to retry")
    assert metric(b, "tern_archive_lag_seconds", topic) > 0
    assert metric(b, "tern_archive_pending_bytes", topic) > 0
    assert any(topic in line and re.search(r"(?i)archiv", line) and re.search(r"(?i)fail|error", line)
               for line in broker_log(b).splitlines()), "the broker's log does not mention the failed export"
    bring_back()
    wait_log_start(b.address, topic, recs, timeout=60)
    assert_archive_holds(archive, topic, recs)
    wait_until(lambda: metric(b, "tern_archive_lag_seconds", topic) == 0, 10, what="no archive lag")


@pytest.mark.timeout(60)
def test_archive_on_failure_delete_lets_retention_go_on(start_broker, tmp_path, topic):
    """archive.on.failure=delete: an export that fails does not hold retention back; the
    expired segments go unarchived, and tern_archive_skipped_segments_total counts them."""
    archive = DirArchive(tmp_path / "archive")
    blocker = archive.block(topic)
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, config={**ARCHIVED_TOPIC, "archive.on.failure": "delete"})
    recs = produce_archivable(b.address, topic, 100)
    wait_log_start(b.address, topic, recs)
    wait_until(lambda: metric(b, "tern_archive_skipped_segments_total", topic) > 0, 5,
               what="tern_archive_skipped_segments_total")
    assert metric(b, "tern_archive_failures_total", topic) > 0
    assert metric(b, "tern_archive_records_total", topic) == 0
    assert blocker.is_file(), "nothing was archived"
    assert_sentinels_readable(b.address, topic, recs)


@pytest.mark.timeout(60)
def test_a_nearly_full_disk_wins_over_waiting_for_the_archive(start_broker, tmp_path, topic):
    """Disk-full protection wins: with the archive down and archive.on.failure=wait, a data
    directory below --archive-min-free-bytes (here: any disk, the threshold is 1 EB) still
    has its expired segments deleted, counted as skipped; with room, the same set-up keeps
    them (test_a_down_target_holds_retention_until_it_returns)."""
    archive = DirArchive(tmp_path / "archive")
    archive.block(topic)
    b = start_broker(*ENABLED, *archive.flags(), "--archive-min-free-bytes", str(10**18))
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 100)
    wait_log_start(b.address, topic, recs)
    wait_until(lambda: metric(b, "tern_archive_skipped_segments_total", topic) > 0, 5,
               what="tern_archive_skipped_segments_total")
    assert metric(b, "tern_archive_records_total", topic) == 0
    assert_sentinels_readable(b.address, topic, recs)


@pytest.mark.timeout(180)
def test_kill9_during_export_leaves_no_gap_and_no_duplicate(start_broker, tmp_path, topic):
    """kill -9 at random moments of a slow export (many small objects, throttled), three
    times, each after the export made progress since the restart: retention never runs
    ahead of the manifest, and once the export has finished the archive holds every
    record exactly once. An orphan such as an interrupted export leaves (an object written,
    its manifest entry not) is planted after the first kill: the next export deletes it."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    archive = DirArchive(tmp_path / "archive")
    b = start_broker(*ENABLED, *SLOW_EXPORT, *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    n = 2000
    recs = produce_archivable(b.address, topic, n, value_size=48)
    killed_at = []
    for k in range(3):
        progress = killed_at[-1] if killed_at else 0
        wait_until(lambda: next_offset(archive, topic) > progress, 60, what=f"export progress past {progress}")
        time.sleep(rng.uniform(0.0, 0.8))
        log_start = low_watermark(b.address, topic, 0)[0]
        listed = next_offset(archive, topic)
        assert log_start <= listed, f"retention deleted up to {log_start}, the manifest lists up to {listed}"
        b.kill9()
        at = next_offset(archive, topic)  # where the manifest stopped
        assert at < n, f"seed {seed}: the export finished before kill {k + 1}; is the throttle in force?"
        killed_at.append(at)
        if k == 0:
            plant_orphan(archive, topic, recs[at])
        b.start()
    print(f"\nseed {seed}: kill -9 with the manifest at {killed_at} of {n} records")
    wait_until(lambda: next_offset(archive, topic) == n, 90, interval=0.3, what="the export to finish")
    wait_log_start(b.address, topic, recs)
    assert_archive_holds(archive, topic, recs)
    objects = len(manifest(archive, topic, 0)["entries"])
    assert objects >= 10, f"--archive-memory-bytes 8192 made {objects} objects of ~200 KB of log"


@pytest.mark.timeout(180)
def test_leader_kill9_during_export_in_a_cluster(tmp_path, topic):
    """Three brokers on etcd share one archive directory; kill -9 of a replicated
    partition's leader in the middle of its export: the new leader finishes the export,
    and the archive holds every record exactly once."""
    archive = DirArchive(tmp_path / "archive")
    c = Cluster(tmp_path, extra_args=[*ARCHIVE_ARGS, *SLOW_EXPORT, *archive.flags()])
    try:
        c.start()
        c.create_topic(topic, 1, 3, {**ARCHIVED_TOPIC, "archive.enable": "true", "min.insync.replicas": "2"})
        n = 1000
        recs = produce_archivable(c.bootstrap(), topic, n, config={"acks": "all"}, value_size=48)
        wait_until(lambda: next_offset(archive, topic) > 0, 60, what="the export to start")
        seed = random.randrange(1 << 30)
        time.sleep(random.Random(seed).uniform(0.0, 1.0))
        victim = c.brokers[c.leaders(topic)[0]]
        at = next_offset(archive, topic)
        assert at < n, "the export finished before the kill; is the throttle in force?"
        victim.kill9()
        new_leader = wait_until(lambda: (l := c.leaders(topic)[0]) > 0 and l != victim.node_id and l,
                                FAILOVER_BOUND_S + 10, what="a new leader")
        print(f"\nseed {seed}: leader {victim.node_id} kill -9 with the manifest at {at} of {n}; "
              f"broker {new_leader} leads now")
        wait_until(lambda: next_offset(archive, topic) == n, 90, interval=0.3, what="the export to finish")
        wait_log_start(c.bootstrap(), topic, recs)
        assert_archive_holds(archive, topic, recs)
        assert metric(c.brokers[new_leader], "tern_archive_records_total", topic) > 0, "the new leader archived"
    finally:
        c.stop()


@pytest.mark.timeout(90)
def test_restore_round_trip(start_broker, tmp_path, topic):
    """`tern archive restore` produces archived records into another topic, each to its
    partition number, with the key, value, headers and CreateTime it was produced with, in
    order; --from-offset K starts each partition at K, --from-time at its first record at
    or after that time."""
    archive = DirArchive(tmp_path / "archive")
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, partitions=2, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 120, partitions=2)
    wait_log_start(b.address, topic, recs)

    def restore(to: str, *selection: str, as_json: bool = True) -> str:
        create_topic(b.address, to, partitions=2)
        return tern_cli("archive", "restore", topic, *selection, "--to-topic", to, "-b", b.address,
                        *archive.flags(), *(["--json"] if as_json else []))

    def assert_restored(to: str, want: list[Rec]) -> None:
        messages, errors, _ = ck.consume_all(b.address, to)
        assert not errors, errors
        for p in (0, 1):
            got = [(m.key(), m.value(), tuple(m.headers() or ()), m.timestamp())
                   for m in messages if m.partition() == p]
            assert got == [(r.key, r.value, r.headers, (TIMESTAMP_CREATE_TIME, r.timestamp))
                           for r in want if r.partition == p], f"{to} partition {p}"

    out = restore(f"{topic}-all", "--from-offset", "0", as_json=False)
    assert f"restored {len(recs)} records" in out, out
    assert_restored(f"{topic}-all", recs)

    from_offset = [r for r in recs if r.offset >= 25]
    doc = json.loads(restore(f"{topic}-from-offset", "--from-offset", "25"))
    assert (doc["restored"], doc["partitions"]) == (len(from_offset), {str(p): n for p, n in ends_of(from_offset).items()})
    assert_restored(f"{topic}-from-offset", from_offset)

    since = sorted(r.timestamp for r in recs)[70]
    from_time = [r for r in recs if r.timestamp >= since]
    doc = json.loads(restore(f"{topic}-from-time", "--from-time", str(since)))
    assert (doc["restored"], doc["partitions"]) == (len(from_time), {str(p): n for p, n in ends_of(from_time).items()})
    assert_restored(f"{topic}-from-time", from_time)


@pytest.mark.timeout(120)
def test_restore_is_exactly_once_and_takes_to_offset_and_partition(start_broker, tmp_path, topic):
    """`tern archive restore` writes each selected record once: it produces as an
    idempotent producer and commits its progress (group tern-restore.<target>.<hash>)
    after every batch, so running the same restore again adds nothing, and neither does a
    run that ended after a batch landed but before its commit (that state is made here by
    moving the commit back over the last batch). --partition and --to-offset select; a
    restore into the archived source topic itself is refused (it would archive the
    records again under new offsets)."""
    archive = DirArchive(tmp_path / "archive")
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, partitions=2, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 120, partitions=2)
    wait_log_start(b.address, topic, recs)

    def restore(to: str, *selection: str) -> dict:
        return json.loads(tern_cli("archive", "restore", topic, *selection, "--to-topic", to, "-b", b.address,
                                   *archive.flags(), "--json"))

    def assert_restored(to: str, want: list[Rec]) -> None:
        messages, errors, _ = ck.consume_all(b.address, to)
        assert not errors, errors
        for p in (0, 1):
            got = [(m.key(), m.value(), tuple(m.headers() or ())) for m in messages if m.partition() == p]
            assert got == [(r.key, r.value, r.headers) for r in want if r.partition == p], \
                f"{to} partition {p}: {len(got)} records, {len([r for r in want if r.partition == p])} wanted"

    everything = f"{topic}-all"
    create_topic(b.address, everything, partitions=2)
    first = restore(everything, "--from-offset", "0")
    assert first["restored"] == len(recs), first
    again = restore(everything, "--from-offset", "0")
    assert (again["restored"], again.get("already_restored")) == (0, 0), f"a second run wrote again: {again}"
    assert_restored(everything, recs)

    # A run that ended after its last batch of partition 0 landed but before the commit.
    # kafka-python moves the commit (librdkafka reads and writes commit metadata as C
    # strings: past the end, or with a NUL).
    from kafka import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata, TopicPartition as KTopicPartition

    group = first["progress_group"]
    kadmin = KafkaAdminClient(bootstrap_servers=b.address)
    try:
        tp = KTopicPartition(everything, 0)
        committed = kadmin.list_group_offsets({group: [tp]})[group][tp]
        fields = dict(w.split("=") for w in committed.metadata.split()[1:])
        (listing,) = [p for p in json.loads(tern_cli("archive", "ls", topic, *archive.flags(), "--json"))["partitions"]
                      if p["partition"] == 0]
        last_object = max(listing["objects"], key=lambda o: o["first_offset"])
        k = last_object["records"]
        assert committed.offset == last_object["last_offset"] + 1, (committed, last_object)
        before = (f"tern-restore-v1 producer_id={fields['producer_id']} producer_epoch={fields['producer_epoch']} "
                  f"sequence={int(fields['sequence']) - k} target_offset={int(fields['target_offset']) - k}")
        kadmin.alter_group_offsets(group, {tp: OffsetAndMetadata(last_object["first_offset"], before, -1)})
    finally:
        kadmin.close()
    resumed = restore(everything, "--from-offset", "0")
    assert (resumed["restored"], resumed["already_restored"]) == (0, k), \
        f"the batch in flight when a run ended was written again: {resumed}"
    assert_restored(everything, recs)

    # --partition 1 --to-offset 40: partition 1's records 0..40 only, once.
    selected = f"{topic}-p1-to40"
    create_topic(b.address, selected, partitions=2)
    want = [r for r in recs if r.partition == 1 and r.offset <= 40]
    doc = restore(selected, "--from-offset", "0", "--partition", "1", "--to-offset", "40")
    assert (doc["restored"], doc["partitions"]) == (len(want), {"1": len(want)}), doc
    assert restore(selected, "--from-offset", "0", "--partition", "1", "--to-offset", "40")["restored"] == 0
    assert_restored(selected, want)

    # Into the archived source topic itself: refused, nothing written.
    ends = {p: low_watermark(b.address, topic, p)[1] for p in (0, 1)}
    r = subprocess.run([str(tern_bin()), "archive", "restore", topic, "--from-offset", "0", "-b", b.address,
                        *archive.flags()], capture_output=True, timeout=60)
    assert r.returncode != 0 and b"archive.enable=true" in r.stderr, (r.returncode, r.stderr[-500:])
    assert {p: low_watermark(b.address, topic, p)[1] for p in (0, 1)} == ends, "nothing produced to the source"


class AnswerDroppingProxy:
    """A Kafka-aware TCP proxy in front of a broker's listener: once armed, it forwards the
    next Produce request and drops the connection instead of forwarding its answer (the
    broker has appended; the client never learns it)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            upstream.settimeout(None)
            produce_ids: set[int] = set()
            threading.Thread(target=self._requests, args=(client, upstream, produce_ids), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, produce_ids), daemon=True).start()

    @staticmethod
    def _frame(sock: socket.socket) -> bytes | None:
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            want = 4 - len(data) if len(data) < 4 else 4 + struct.unpack(">i", data[:4])[0] - len(data)
            chunk = sock.recv(want)
            if not chunk:
                return None
            data += chunk
        return data

    def _requests(self, client: socket.socket, upstream: socket.socket, produce_ids: set[int]) -> None:
        try:
            while (frame := self._frame(client)) is not None:
                api_key, correlation_id = struct.unpack_from(">h", frame, 4)[0], struct.unpack_from(">i", frame, 8)[0]
                if api_key == 0 and self.armed.is_set() and not self.dropped.is_set():
                    produce_ids.add(correlation_id)
                upstream.sendall(frame)
        except OSError:
            pass

    def _answers(self, upstream: socket.socket, client: socket.socket, produce_ids: set[int]) -> None:
        try:
            while (frame := self._frame(upstream)) is not None:
                if struct.unpack_from(">i", frame, 4)[0] in produce_ids:
                    self.dropped.set()
                    break
                client.sendall(frame)
        except OSError:
            pass
        for sock in (client, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # close() alone waits for the other thread's recv
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.mark.timeout(90)
def test_restore_retries_a_lost_answer_without_writing_twice(tmp_path, topic):
    """The answer to a restore's Produce is lost (the connection drops after the broker
    appended): the restore sends the batch again with the same producer id and sequence,
    and the broker answers it as a duplicate instead of appending it twice."""
    archive = DirArchive(tmp_path / "archive")
    port = free_port()
    proxy = AnswerDroppingProxy(port)
    b = Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=port,
               extra_args=[*ENABLED, *archive.flags(), "--advertised-listeners", f"PLAINTEXT://127.0.0.1:{proxy.port}"])
    try:
        b.start()
        create_topic(b.address, topic, partitions=1, config=ARCHIVED_TOPIC)
        recs = produce_archivable(b.address, topic, 40)
        wait_log_start(b.address, topic, recs)
        target = f"{topic}-restored"
        create_topic(b.address, target, partitions=1)
        proxy.armed.set()
        doc = json.loads(tern_cli("archive", "restore", topic, "--from-offset", "0", "--to-topic", target,
                                  "-b", b.address, *archive.flags(), "--json"))
        assert proxy.dropped.is_set(), "the proxy saw no Produce to drop the answer of"
        assert doc["restored"] == len(recs), doc
        messages, errors, _ = ck.consume_all(b.address, target)
        assert not errors, errors
        values = [m.value() for m in messages]
        assert values == [r.value for r in recs], \
            f"{len(values)} records in the target for {len(recs)} restored (a retried batch written twice?)"
    finally:
        proxy.close()
        b.stop()


@pytest.mark.timeout(60)
def test_message_status_says_archived(start_broker, tmp_path, topic):
    """GET /message_status of a message that retention deleted after the archive took it:
    "archived", with the object's path and full location (which exists); of one past
    retention in a topic without archive: "expired"; a sentinel is still "pending"."""
    archive = DirArchive(tmp_path / "archive")
    http_port = free_port()
    b = start_broker(*ARCHIVE_ARGS, *archive.flags(), "--http", f"127.0.0.1:{http_port}")
    wait_until(lambda: port_accepts(http_port), 30, what="the HTTP API")
    h = Http(http_port)
    plain = f"{topic}-plain"
    create_topic(b.address, topic, config={**ARCHIVED_TOPIC, "archive.enable": "true"})
    create_topic(b.address, plain, config=ARCHIVED_TOPIC)  # archive.enable: false by default
    recs = produce_archivable(b.address, topic, 30)
    plain_recs = produce_archivable(b.address, plain, 30)
    wait_log_start(b.address, topic, recs)
    wait_log_start(b.address, plain, plain_recs)
    topic_id = h.create_topic(topic)["topic_id"]  # already there: its id
    entries = manifest(archive, topic, 0)["entries"]
    for offset in (0, len(recs) - 1):
        st = h.status(message_id_of(topic_id, 0, offset))
        assert st["message_status"] == "archived", st
        (entry,) = [e for e in entries if e["first_offset"] <= offset <= e["last_offset"]]
        assert st["archive"]["path"] == entry["path"], (st, entry)
        location = urlparse(st["archive"]["location"])
        assert location.scheme == "file" and Path(unquote(location.path)) == archive.root / entry["path"], st
        assert (archive.root / entry["path"]).is_file()
    assert h.status(message_id_of(topic_id, 0, len(recs)))["message_status"] == "pending"
    st = h.status(message_id_of(h.create_topic(plain)["topic_id"], 0, 0))
    assert st["message_status"] == "expired" and not st.get("archive"), st


@pytest.mark.timeout(60)
def test_archive_configs_are_described_and_alterable(start_broker, topic):
    """archive.enable and archive.on.failure are topic configs: described with their
    defaults (false, wait; or the broker's --archive-enable / --archive-on-failure), set
    and deleted by IncrementalAlterConfigs, and an invalid value is refused with
    INVALID_CONFIG, by IncrementalAlterConfigs and CreateTopics alike."""
    b = start_broker()
    admin = admin_for(b)
    create_topic(b.address, topic)
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert value_and_source(configs, "archive.enable") == ("false", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs, "archive.on.failure") == ("wait", ConfigSource.DEFAULT_CONFIG)
    assert not configs["archive.enable"].is_read_only and not configs["archive.on.failure"].is_read_only
    assert incremental(admin, ResourceType.TOPIC, topic, [("archive.enable", AlterConfigOpType.SET, "true"),
                                                          ("archive.on.failure", AlterConfigOpType.SET, "delete")]) is None
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert value_and_source(configs, "archive.enable") == ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert value_and_source(configs, "archive.on.failure") == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    for name in ("archive.on.failure", "archive.enable"):
        err = incremental(admin, ResourceType.TOPIC, topic, [(name, AlterConfigOpType.SET, "maybe")])
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (name, err)
    with pytest.raises(KafkaException) as refused:
        create_topic(b.address, f"{topic}-bad", config={"archive.on.failure": "maybe"})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value
    assert incremental(admin, ResourceType.TOPIC, topic, [("archive.enable", AlterConfigOpType.DELETE, None)]) is None
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert value_and_source(configs, "archive.enable") == ("false", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs, "archive.on.failure") == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    flagged = start_broker("--archive-enable", "true", "--archive-on-failure", "delete", name="flagged")
    create_topic(flagged.address, topic)
    configs = describe(admin_for(flagged), ResourceType.TOPIC, topic)
    assert value_and_source(configs, "archive.enable") == ("true", ConfigSource.STATIC_BROKER_CONFIG)
    assert value_and_source(configs, "archive.on.failure") == ("delete", ConfigSource.STATIC_BROKER_CONFIG)


# ---------------------------------------------------------------------------- S3 failures
#
# An S3 store that fails in other ways than "nothing listens": a fault-injecting HTTP
# proxy sits between tern and moto (tern's --archive-s3-endpoint is the proxy; the test
# reads moto directly). It forwards every request, or, once told to, answers matching
# requests with an S3 error, stalls them, or closes their connection.

ANY = lambda method, key: True  # noqa: E731
PUT = lambda method, key: method == "PUT"  # noqa: E731
PUT_OBJECT = lambda method, key: method == "PUT" and key.endswith(".parquet")  # noqa: E731
PUT_MANIFEST = lambda method, key: method == "PUT" and key.endswith("/_manifest.json")  # noqa: E731
S3_ERRORS = {500: "InternalError", 503: "SlowDown", 403: "InvalidAccessKeyId"}


class S3FaultProxy:
    """An HTTP/1.1 proxy to moto. fail(action, match, after, counting, times): once `after`
    requests matching `counting` (default: `match`) have been forwarded, up to `times`
    (default: all) requests matching `match` get `action`: an S3 error status (500, 503,
    403), "drop" (the connection is closed, unanswered) or "stall" (held unanswered until
    tern closes the connection; with apply_late, then forwarded to moto all the same, as a
    store may apply a write its client gave up on, once apply_late is set). heal() forwards
    everything again. `log` lists (method, key, outcome) of every request."""

    def __init__(self, upstream_port: int):
        from http.server import ThreadingHTTPServer
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, str]] = []
        self.gave_up: list[tuple[str, float]] = []  # stalled requests tern gave up on: (key, seconds held)
        self.late: list[tuple[str, int]] = []  # stalled requests applied late: (key, moto's status)
        self.apply_late = threading.Event()
        self.closing = False
        self.heal()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
        self.server.daemon_threads = True
        self.server.proxy = self
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def fail(self, action, match=ANY, after: int = 0, counting=None, times: int | None = None) -> None:
        with self.lock:
            self.action, self.match, self.counting = action, match, counting or match
            self.after, self.times = after, times

    def heal(self) -> None:
        self.fail("forward", ANY)

    def outcomes(self, outcome: str) -> int:
        with self.lock:
            return sum(1 for _, _, o in self.log if o == outcome)

    def decide(self, method: str, key: str) -> str | int:
        with self.lock:
            action = "forward"
            if self.action != "forward" and self.after <= 0 and self.match(method, key) \
                    and (self.times is None or self.times > 0):
                action = self.action
                if self.times is not None:
                    self.times -= 1
            elif self.action != "forward" and self.after > 0 and self.counting(method, key):
                self.after -= 1
            self.log.append((method, key, str(action)))
            return action

    def close(self) -> None:
        self.closing = True
        self.apply_late.set()
        self.server.shutdown()
        self.server.server_close()


class _ProxyHandler(__import__("http.server").server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def handle_one(self) -> None:
        proxy: S3FaultProxy = self.server.proxy
        assert "chunked" not in (self.headers.get("Transfer-Encoding") or ""), "a chunked request body"
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        key = unquote(urlparse(self.path).path)
        action = proxy.decide(self.command, key)
        if action == "forward":
            self.forward(body)
        elif isinstance(action, int):
            self.error(action)
        elif action == "drop":
            self.close_connection = True
        elif action == "stall":
            self.close_connection = True
            held = time.monotonic()
            import select
            while True:  # until tern closes the connection (its request timeout)
                readable, _, _ = select.select([self.connection], [], [], 0.2)
                if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                    break
            with proxy.lock:
                proxy.gave_up.append((key, time.monotonic() - held))
            if proxy.apply_late.wait(600) and not proxy.closing:
                status = self.upstream(body)[0]
                with proxy.lock:
                    proxy.late.append((key, status))

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_one

    def upstream(self, body: bytes):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.server.proxy.upstream_port, timeout=30)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():
                if k.lower() not in ("connection", "keep-alive"):
                    conn.putheader(k, v)
            conn.endheaders(body or None)
            resp = conn.getresponse()
            return resp.status, resp.reason, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def forward(self, body: bytes) -> None:
        status, reason, headers, data = self.upstream(body)
        self.send_response_only(status, reason)
        for k, v in headers:
            if k.lower() not in ("transfer-encoding", "connection", "keep-alive", "content-length"):
                self.send_header(k, v)
        if self.command == "HEAD":
            length = next((v for k, v in headers if k.lower() == "content-length"), "0")
        else:
            length = str(len(data))
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def error(self, status: int) -> None:
        code = S3_ERRORS[status]
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected {status}</Message><RequestId>fault</RequestId></Error>").encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class ProxiedS3Archive(S3Archive):
    """moto's S3, which tern reaches through the proxy (the test reads moto directly)."""

    def __init__(self, moto: Moto, proxy: S3FaultProxy):
        super().__init__(moto)
        self.proxy = proxy

    def flags(self) -> list[str]:
        flags = super().flags()
        flags[flags.index("--archive-s3-endpoint") + 1] = self.proxy.endpoint
        return flags

    def keys(self, topic: str) -> list[str]:
        """Every object under the topic's folder, by its path from the archive's root."""
        listed = self.moto.s3().list_objects_v2(Bucket=self.bucket, Prefix=f"{self.prefix}/topic={topic}/")
        return sorted(o["Key"][len(self.prefix) + 1:] for o in listed.get("Contents", []))


@pytest.fixture
def s3_proxy(moto):
    """moto started with the bucket, and a fault proxy in front of it."""
    moto.start().create_bucket(BUCKET)
    proxy = S3FaultProxy(moto.port)
    try:
        yield proxy
    finally:
        proxy.close()


def listed_offsets(archive, topic: str) -> tuple[int, list[int]]:
    """The manifest's next_offset and the offsets of every row of the objects it lists, read
    with pyarrow, in listing order."""
    import pyarrow as pa
    m = manifest(archive, topic, 0) or {"next_offset": 0, "entries": []}
    offsets: list[int] = []
    for e in m["entries"]:
        raw = archive.read(e["path"])
        assert raw is not None, f"the manifest lists {e['path']}, which is not in the store"
        offsets += pq.read_table(pa.BufferReader(raw)).column("offset").to_pylist()
    return m["next_offset"], offsets


def assert_each_record_once(address: str, archive, topic: str, recs: list[Rec]) -> int:
    """Nothing lost, nothing twice: the broker serves one contiguous run of offsets from its
    log start to its end (the records as produced, then the two sentinels), the objects
    the manifest lists hold each offset below the manifest's next_offset once, and the
    log starts no later than that next_offset. Returns the next_offset."""
    messages, errors, _ = ck.consume_all(address, topic)
    assert not errors, errors
    on_broker = [m.offset() for m in messages]
    n = len(recs)
    assert on_broker and on_broker == list(range(on_broker[0], n + 2)), \
        f"the broker serves offsets {on_broker[:3]}..{on_broker[-3:]}, not one run to {n + 2}"
    for m in messages[:-2]:
        assert m.value() == recs[m.offset()].value, f"offset {m.offset()} changed on the broker"
    next_at, archived = listed_offsets(archive, topic)  # read after the broker: it only moves on
    dupes = sorted(o for o, c in Counter(archived).items() if c > 1)
    assert not dupes, f"offsets in more than one listed object: {dupes[:5]}"
    assert archived == list(range(next_at)), f"the listed objects hold {len(archived)} offsets, not 0..{next_at - 1}"
    assert on_broker[0] <= next_at, \
        f"lost: the broker starts at {on_broker[0]}, the archive lists only offsets below {next_at}"
    return next_at


def hold_until(predicate, invariant, timeout: float, what: str):
    """Polls predicate() (bounded, as wait_until) and checks invariant() at every poll: an
    invariant that fails fails at once, not at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        invariant()
        if v := predicate():
            return v
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def log_start_within_archive(address: str, archive, topic: str):
    """The safety invariant of retention with an archive: the log never starts past what the
    manifest in the store lists. The log start is read first and the manifest second (both
    only move on), so the check cannot race an export that completes between them; a test
    that holds the store's answers also holds the manifest, so this says "retention deletes
    nothing" while the store fails."""
    def check() -> None:
        start = low_watermark(address, topic, 0)[0]
        listed = next_offset(archive, topic)
        assert start <= listed, f"retention deleted up to {start}; the archive lists only offsets below {listed}"
    return check


@pytest.mark.timeout(120)
@pytest.mark.parametrize("status,which", [(500, "every request"), (503, "writes only"), (403, "every request")])
def test_s3_error_answers_hold_retention_until_the_store_recovers(start_broker, moto, s3_proxy, topic, status, which):
    """The store answers 500 (every request), 503 SlowDown (PUTs only: the manifest reads
    and the listing work, each object's write fails) or 403 (every request, as bad
    credentials would): nothing is archived, retention deletes nothing through several
    failed exports, which the exporter retries, counts and logs, and every record stays
    readable from the broker. Once the store answers again, the export completes: the
    archive holds every record exactly once and no object that its manifest does not list."""
    s3_proxy.fail(status, ANY if which == "every request" else PUT)
    archive = ProxiedS3Archive(moto, s3_proxy)
    b = start_broker(*ENABLED, *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 100)
    unchanged = log_start_within_archive(b.address, archive, topic)
    hold_until(lambda: metric(b, "tern_archive_failures_total", topic) >= 3, unchanged, 60,
               "three failed exports")
    assert s3_proxy.outcomes(str(status)) >= 3, s3_proxy.log[-5:]
    assert manifest(archive, topic, 0) is None and archive.keys(topic) == [], archive.keys(topic)
    assert assert_each_record_once(b.address, archive, topic, recs) == 0
    assert metric(b, "tern_archive_lag_seconds", topic) > 0
    assert any(topic in line and "archive export failed" in line for line in broker_log(b).splitlines())
    s3_proxy.heal()
    wait_log_start(b.address, topic, recs, timeout=60)
    assert_archive_holds(archive, topic, recs)
    assert_each_record_once(b.address, archive, topic, recs)
    wait_until(lambda: metric(b, "tern_archive_lag_seconds", topic) == 0, 10, what="no archive lag")


@pytest.mark.timeout(120)
def test_s3_outage_between_the_parts_of_one_export(start_broker, moto, s3_proxy, topic):
    """The store goes away (every connection closed unanswered) in the middle of an export
    of many objects, after its third object and manifest: the three listed objects stay,
    retention goes no further than they do, every record is readable once from the broker
    or the listed objects, the exporter keeps retrying; once the store is back, the export
    goes on from the manifest (the first three objects are not written again) and the
    archive ends with each record exactly once."""
    s3_proxy.fail("drop", ANY, after=3, counting=PUT_MANIFEST)
    archive = ProxiedS3Archive(moto, s3_proxy)
    b = start_broker(*ENABLED, "--archive-memory-bytes", "8192", *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 1000, value_size=48)
    wait_until(lambda: metric(b, "tern_archive_failures_total", topic) >= 1, 60, what="the export to fail")
    before = manifest(archive, topic, 0)
    assert before is not None and len(before["entries"]) == 3, before
    at = before["next_offset"]
    assert 0 < at < len(recs), at
    held = log_start_within_archive(b.address, archive, topic)
    failures = metric(b, "tern_archive_failures_total", topic)
    hold_until(lambda: metric(b, "tern_archive_failures_total", topic) >= failures + 2, held, 60,
               "the exporter to retry twice")
    assert s3_proxy.outcomes("drop") >= 3
    wait_until(lambda: low_watermark(b.address, topic, 0)[0] > 0, 10, what="retention to take what the archive lists")
    assert assert_each_record_once(b.address, archive, topic, recs) == at
    assert [k for k in archive.keys(topic) if k.endswith(".parquet")] == sorted(e["path"] for e in before["entries"])
    s3_proxy.heal()
    wait_log_start(b.address, topic, recs, timeout=60)
    assert_archive_holds(archive, topic, recs)
    after = manifest(archive, topic, 0)
    assert after["entries"][:3] == before["entries"], "the objects listed before the outage were written again"
    assert len(after["entries"]) > 3


@pytest.mark.timeout(120)
def test_an_orphan_on_s3_is_deleted_and_never_counted(start_broker, moto, s3_proxy, topic):
    """Every manifest write after the second fails (500, also on the client's retries):
    the third object is written and never listed, an orphan on S3. Its records stay on the
    broker (retention stops at the listed objects), and the next export deletes it before
    it writes them again, as it deletes a second orphan planted under another name. Once
    the store takes manifests again, the archive ends with each record once: no orphan is
    left for a reader of the folder to count twice."""
    s3_proxy.fail(500, PUT_MANIFEST, after=2)
    archive = ProxiedS3Archive(moto, s3_proxy)
    b = start_broker(*ENABLED, "--archive-memory-bytes", "8192", *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 1000, value_size=48)
    wait_until(lambda: metric(b, "tern_archive_failures_total", topic) >= 1, 60, what="the export to fail")
    listed = manifest(archive, topic, 0)
    assert listed is not None and len(listed["entries"]) == 2, listed
    at = listed["next_offset"]
    paths = {e["path"] for e in listed["entries"]}

    def orphan():
        found = [k for k in archive.keys(topic) if k.endswith(".parquet") and k not in paths]
        # Each retry deletes it and writes it again: read it while it is there.
        return found and (raw := archive.read(found[0])) is not None and (found, raw)
    orphans, orphan_bytes = wait_until(orphan, 10, what="an orphan (an object written, its manifest not)")
    assert len(orphans) == 1 and manifest_range(orphans[0])[0] == at, orphans
    held = log_start_within_archive(b.address, archive, topic)
    wait_until(lambda: low_watermark(b.address, topic, 0)[0] > 0, 10, what="retention to take what the archive lists")
    assert assert_each_record_once(b.address, archive, topic, recs) == at
    # A second orphan, as an export with another memory budget would have left: records at..at+3.
    planted = re.sub(r"/\d{20}-\d{20}\.parquet$", f"/{at:020}-{at + 3:020}.parquet", orphans[0])
    moto.s3().put_object(Bucket=archive.bucket, Key=f"{archive.prefix}/{planted}", Body=orphan_bytes)
    hold_until(lambda: planted not in archive.keys(topic), held, 30, "the next export to delete the planted orphan")
    assert "deleting an object no manifest lists" in broker_log(b) and f"object={planted}" in broker_log(b), \
        "the broker does not say it deleted the planted orphan"
    failures = metric(b, "tern_archive_failures_total", topic)
    hold_until(lambda: metric(b, "tern_archive_failures_total", topic) >= failures + 1, held, 30, "another retry")
    s3_proxy.heal()
    wait_log_start(b.address, topic, recs, timeout=60)
    assert_archive_holds(archive, topic, recs)  # DuckDB over the folder: every record once, no unlisted object
    assert_each_record_once(b.address, archive, topic, recs)


def manifest_range(path: str) -> tuple[int, int]:
    first, last = re.search(r"/(\d{20})-(\d{20})\.parquet$", path).groups()
    return int(first), int(last)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("late", [False, True], ids=["never-applied", "applied-late"])
def test_s3_slower_than_the_request_timeout(start_broker, moto, s3_proxy, topic, late):
    """The first manifest write hangs, unanswered, past tern's S3 request timeout (60 s):
    while it hangs, retention deletes nothing and the broker goes on producing and
    serving; tern then gives up on it, counts a failed export and retries, and the archive
    completes with each record exactly once. applied-late: the store applies the hung
    write after all (as S3 may apply a PUT whose client gave up), once the export has
    completed and retention deleted the archived records: the stale manifest must not
    replace the complete one, or the archive forgets records the broker no longer has."""
    s3_proxy.fail("stall", PUT_MANIFEST, times=1)
    archive = ProxiedS3Archive(moto, s3_proxy)
    b = start_broker(*ENABLED, "--archive-memory-bytes", "8192", *archive.flags())
    create_topic(b.address, topic, config=ARCHIVED_TOPIC)
    recs = produce_archivable(b.address, topic, 1000, value_size=48)
    unchanged = log_start_within_archive(b.address, archive, topic)
    wait_until(lambda: s3_proxy.outcomes("stall") == 1, 30, what="the manifest write to hang")
    # Produce and fetch are not held up by the hung export.
    (report,) = ck.produce_all(b.address, topic, [{"partition": 0, "value": b"during the stall"}], {})
    assert report[1] is None, report
    recs_end = len(recs) + 2
    assert low_watermark(b.address, topic, 0) == (0, recs_end + 1)
    hold_until(lambda: metric(b, "tern_archive_failures_total", topic) >= 1, unchanged, 120,
               "tern to give up on the hung request")
    assert len(s3_proxy.gave_up) == 1 and s3_proxy.gave_up[0][1] >= 50, s3_proxy.gave_up
    wait_log_start(b.address, topic, recs, timeout=60)
    done = manifest(archive, topic, 0)
    assert done["next_offset"] == len(recs) and len(done["entries"]) > 1, done["next_offset"]
    if late:
        s3_proxy.apply_late.set()
        wait_until(lambda: s3_proxy.late, 30, what="the hung write to reach the store")
        print(f"\nthe hung manifest write, applied late: {s3_proxy.late}")
        # The broker reads the manifest again at its next visits: give it a few.
        visits = s3_proxy.outcomes("forward")
        wait_until(lambda: s3_proxy.outcomes("forward") >= visits + 6, 30, what="the exporter's next visits")
    m = manifest(archive, topic, 0)
    assert not m["skipped"] and sum(e["records"] for e in m["entries"]) == len(recs), \
        (f"the manifest lists {sum(e['records'] for e in m['entries'])} of {len(recs)} records and says "
         f"{m['skipped']} were never archived; hung write applied late: {s3_proxy.late}")
    assert_archive_holds(archive, topic, recs)


@pytest.mark.timeout(90)
def test_the_archive_of_a_transactional_topic_holds_committed_records_only(start_broker, tmp_path, topic):
    """Old transactions, committed and aborted, expire into the archive: it holds every
    committed record once, no aborted record and no control record (the markers), and
    the exporter waited for the last stable offset."""
    from confluent_kafka import Producer
    archive = DirArchive(tmp_path / "archive")
    b = start_broker(*ENABLED, *archive.flags(), "--transaction-state-log-num-partitions", "1")
    # Markers carry the time they were written, so a segment that holds one is not old:
    # size retention expires the transactions here.
    create_topic(b.address, topic, config={**ARCHIVED_TOPIC, "retention.bytes": "1"})
    p = Producer({"bootstrap.servers": b.address, "transactional.id": f"{topic}-id", **BATCHING})
    p.init_transactions(30)
    old = int(time.time() * 1000) - 2 * HOUR_MS
    expected = []
    for n, (prefix, commit) in enumerate((("c", True), ("a", False), ("d", True), ("e", False))):
        p.begin_transaction()
        for i in range(20):
            value = f"{prefix}-{i}-".encode() + os.urandom(40)
            p.produce(topic, value=value, partition=0, timestamp=old + 100 * n + i)
            if commit:
                expected.append(value)
        assert p.flush(15) == 0
        (p.commit_transaction if commit else p.abort_transaction)(30)
    # Sentinels seal the transactions' segments (and end the section retention may take).
    for _ in range(2):
        (report,) = ck.produce_all(b.address, topic, [{"partition": 0, "value": os.urandom(SENTINEL_BYTES)}],
                                   {"compression.type": "none"})
        assert report[1] is None, report
    end = low_watermark(b.address, topic, 0)[1] - 2
    wait_until(lambda: low_watermark(b.address, topic, 0)[0] >= end, 30, interval=0.2,
               what="the transactions' segments expired")
    rows = [r for r in archive_rows(archive, topic) if r["offset"] < end]  # not the sentinels
    values = [bytes(r["value"]) for r in rows]
    assert values == expected, (len(values), len(expected))
    assert len({r["offset"] for r in rows}) == len(rows)
    assert all(r["producer_id"] >= 0 for r in rows)
    assert not [v for v in values if v[:2] in (b"a-", b"e-")], "an aborted record was archived"
