"""`promtool check metrics` on live brokers' /metrics, after traffic of every kind
(issue 10): Kafka produce and fetch, a consumer group that commits, the HTTP API's
publish / subscribe / message / ack, and in a 3-broker etcd cluster HTTP publishes
forwarded to the partition's leader on another broker.

Three brokers' setups are linted: the suite's shared one-broker etcd cluster after its
traffic (conftest.py: every metric tern declares is exported there, errors included), a
standalone broker (embedded metadata store), and each broker of a 3-broker cluster.
promtool must print nothing; on top of it every `# TYPE` needs a non-empty `# HELP`,
and every exported family must be declared in src/metrics.rs with the kind it is
exported as (the call site used the matching macro).
"""

from __future__ import annotations

import shutil
import time

import pytest

import ck
from http_client import Http
from opslib import free_port, http_get, metric_declarations, run, tern_harness
from test_cluster import Cluster  # compat/test_cluster.py: etcd + 3 brokers, the HTTP client of each

PARTITIONS = 6
MESSAGES = 300
HTTP_MESSAGES = 24


def exposition_problems(text: str) -> tuple[list[str], dict[str, str]]:
    """(problems, {family: type}) for one /metrics page: promtool's complaints, a TYPE
    without a non-empty HELP, a family src/metrics.rs does not declare or declares as
    another kind."""
    if not shutil.which("promtool"):
        pytest.fail("promtool not installed (scripts/install-test-deps.sh installs it)", pytrace=False)
    r = run(["promtool", "check", "metrics"], input=text.encode(), timeout=30)
    problems = [f"promtool: {line}" for line in (r.stdout + r.stderr).decode().splitlines() if line.strip()]
    if r.returncode != 0:
        problems.append(f"promtool exited with {r.returncode}")
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            _, _, name, *rest = line.split(" ", 3)
            helps[name] = rest[0] if rest else ""
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
    declared = metric_declarations()
    for name, kind in sorted(types.items()):
        if not helps.get(name, "").strip():
            problems.append(f"{name}: no HELP text")
        if name not in declared:
            problems.append(f"{name}: exported but not declared in src/metrics.rs")
        elif declared[name][0] != kind:
            problems.append(f"{name}: exported as a {kind}, declared as a {declared[name][0]}")
    problems += [f"{name}: HELP without TYPE" for name in sorted(set(helps) - set(types))]
    return problems, types


def scrape(metrics_port: int) -> str:
    status, text = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
    assert status == 200, text
    return text


def port_of(broker: tern_harness.Broker, flag: str) -> int:
    return int(broker.extra_args[broker.extra_args.index(flag) + 1].rsplit(":", 1)[1])


def kafka_traffic(produce_via: str, fetch_via: str, group_via: str, topic: str) -> None:
    """kcat produces MESSAGES keyed records and reads them back; a confluent-kafka group
    member reads them all and commits."""
    lines = b"".join(f"k{i % 17}:v{i}\n".encode() for i in range(MESSAGES))
    r = run(["kcat", "-b", produce_via, "-P", "-t", topic, "-K:", "-X", "acks=all"], input=lines, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = run(["kcat", "-b", fetch_via, "-C", "-t", topic, "-e", "-q", "-f", "%s\n"], timeout=60)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == MESSAGES, r.stderr.decode()
    consumer = ck.new_consumer(group_via, {"enable.auto.offset.store": True, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])
        seen, deadline = 0, time.monotonic() + 40
        while seen < MESSAGES and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                seen += 1
        assert seen == MESSAGES, f"the group member read {seen} of {MESSAGES}"
        consumer.commit(asynchronous=False)
        committed = consumer.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert sum(tp.offset for tp in committed) == MESSAGES, committed
    finally:
        consumer.close()


def http_traffic(publish: Http, subscribe: Http, read: Http, topic: str) -> list[dict]:
    """Creates `topic` through `publish`, subscribes through `subscribe`, publishes
    HTTP_MESSAGES keyed messages through `publish`, reads and acks them through `read`,
    asks one message_status and makes one bad request (400). Returns the publish answers."""
    topic_id = publish.create_topic(topic, partitions=PARTITIONS)["topic_id"]
    subscribe.subscribe(consumer_id=41, topic_id=topic_id)
    published = [publish.publish(topic_id, f"m{i}", key=f"k{i}") for i in range(HTTP_MESSAGES)]
    got, deadline = [], time.monotonic() + 30
    while len(got) < HTTP_MESSAGES and time.monotonic() < deadline:
        got += read.messages(41, topic_id, max_=100, wait_ms=500)
    assert sorted(m["message_content"] for m in got) == sorted(f"m{i}" for i in range(HTTP_MESSAGES))
    read.ack(41, topic_id, got[0]["message_id"])
    assert read.status(published[0]["message_id"])["message_status"] in ("pending", "delivered")
    assert publish.post("/publish_message", {"topic_id": topic_id}).status == 400
    return published


def test_promtool_finds_nothing_on_the_shared_broker_after_its_traffic(broker, traffic):
    """conftest's traffic reaches every metric tern declares (test_prometheus_scrape
    checks that), errors and slow requests included: all of them are linted here."""
    text = scrape(broker.metrics_port)
    problems, types = exposition_problems(text)
    assert not problems, "\n".join(problems)
    missing = sorted(set(metric_declarations()) - set(types))
    assert not missing, f"declared metrics this broker does not export after its traffic: {missing}"


def test_promtool_finds_nothing_on_a_standalone_broker(tmp_path):
    metrics_port, http_port = free_port(), free_port()
    b = tern_harness.Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs",
                            extra_args=[*tern_harness.GROUP_ARGS, "--metrics", f"127.0.0.1:{metrics_port}",
                                        "--http", f"127.0.0.1:{http_port}"])
    b.start()
    try:
        r = run([b.binary, "topic", "create", "lint-kafka", "--partitions", str(PARTITIONS), "-b", b.address])
        assert r.returncode == 0, r.stderr.decode()
        kafka_traffic(b.address, b.address, b.address, "lint-kafka")
        h = Http(http_port)
        http_traffic(h, h, h, "lint-http")
        text = scrape(metrics_port)
    finally:
        b.stop()
    problems, types = exposition_problems(text)
    assert not problems, "\n".join(problems)
    for family in ("tern_requests_total", "tern_request_duration_seconds", "tern_request_phase_seconds",
                   "tern_topic_bytes_in_total", "tern_topic_messages_out_total", "tern_group_rebalances_total",
                   "tern_http_requests_total", "tern_http_request_duration_seconds", "tern_connections"):
        assert family in types, f"{family} not exported after the traffic that records it"


@pytest.mark.timeout(180)
def test_promtool_finds_nothing_on_any_broker_of_a_cluster(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        one, two, three = cluster.brokers.values()
        cluster.create_topic("lint-kafka", PARTITIONS)
        kafka_traffic(one.address, two.address, three.address, "lint-kafka")
        http = {n: cluster.http(n) for n in cluster.brokers}
        published = http_traffic(http[1], http[2], http[3], "lint-http")
        leaders = cluster.leaders("lint-http", via=one)
        forwarded = [p for p in published if leaders[p["partition"]] != 1]
        assert forwarded, f"no HTTP publish through broker 1 went to another broker's partition: {leaders}"
        texts = {n: scrape(port_of(b, "--metrics")) for n, b in cluster.brokers.items()}
    finally:
        cluster.stop()
    exported: set[str] = set()
    for node, text in texts.items():
        problems, types = exposition_problems(text)
        assert not problems, f"broker {node}:\n" + "\n".join(problems)
        exported |= set(types)
    for family in ("tern_requests_total", "tern_topic_bytes_in_total", "tern_group_rebalances_total",
                   "tern_http_requests_total", "tern_etcd_session_up", "tern_cluster_brokers",
                   "tern_controller_elections_total", "tern_leader_partitions"):
        assert family in exported, f"{family} exported by no broker of the cluster"
