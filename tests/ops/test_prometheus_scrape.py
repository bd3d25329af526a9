"""A real Prometheus scrapes a real broker after known traffic (see conftest.py); the
series it stores must exist with the values that traffic implies."""

from __future__ import annotations

import os
import time

import pytest

from conftest import (GROUP, SHARE_GROUP, MINISR, N_FIRST, N_LATER, N_SEGMENTS, OFFSETS_PARTITIONS, ORDERS, ORDERS_PARTITIONS,
                      PAYLOAD, RAW_CONNECTIONS, SEGMENTS)
from opslib import finite, metric_constants

# Sampled gauges (log, lag, disk) are refreshed every 5 s and scraped every 1 s.
SAMPLE_WAIT = 20


def test_every_exported_metric_reaches_prometheus(prometheus, traffic):
    """Every name in src/metrics.rs is stored by Prometheus (histograms as _bucket/_sum/_count)."""
    def missing():
        stored = prometheus.series_names()
        out = []
        for const, name in sorted(metric_constants().items()):
            # A histogram is stored as _bucket/_sum/_count series, anything else under its name.
            if name not in stored and not {name + s for s in ("_bucket", "_sum", "_count")} <= stored:
                out.append(f"{name} ({const})")
        return out

    deadline = time.monotonic() + SAMPLE_WAIT
    while missing() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not missing(), f"not in Prometheus {SAMPLE_WAIT} s after traffic: {missing()}"


def test_messages_in_equals_messages_produced(prometheus, traffic):
    got = prometheus.wait_value(f'sum(tern_topic_messages_in_total{{topic="{ORDERS}"}})',
                                lambda v: v == N_FIRST + N_LATER, timeout=SAMPLE_WAIT)
    assert got == N_FIRST + N_LATER
    assert prometheus.value(f'sum(tern_topic_messages_in_total{{topic="{SEGMENTS}"}})') == N_SEGMENTS
    refused = prometheus.value(f'sum(tern_topic_messages_in_total{{topic="{MINISR}"}})')
    assert refused in (None, 0), f"a refused produce counted as {refused} messages in"


def test_log_end_offsets_match_messages_produced(prometheus, traffic):
    prometheus.wait_value(f'sum(tern_log_end_offset{{topic="{ORDERS}"}})', lambda v: v == N_FIRST + N_LATER,
                          timeout=SAMPLE_WAIT)
    parts = prometheus.query(f'tern_log_end_offset{{topic="{ORDERS}"}}')
    assert sorted(l["partition"] for l, _ in parts) == [str(i) for i in range(ORDERS_PARTITIONS)]
    assert all(v > 0 for _, v in parts), f"keys k0..k9 should reach every partition: {parts}"


def test_bytes_in_equal_log_size_and_exceed_payload(prometheus, traffic):
    """Bytes in counts record-batch bytes as appended, so with nothing deleted it equals the
    log size; both exceed the payload (keys and batch headers come on top)."""
    size = prometheus.wait_value(f'sum(tern_log_size_bytes{{topic="{ORDERS}"}})',
                                 lambda v: v is not None and v > (N_FIRST + N_LATER) * PAYLOAD, timeout=SAMPLE_WAIT)
    bytes_in = prometheus.value(f'sum(tern_topic_bytes_in_total{{topic="{ORDERS}"}})')
    assert bytes_in > (N_FIRST + N_LATER) * PAYLOAD
    prometheus.wait_value(f'sum(tern_log_size_bytes{{topic="{ORDERS}"}})', lambda v: v == bytes_in,
                          timeout=SAMPLE_WAIT, what=f"log size == bytes in ({bytes_in}) (first value {size})")


def test_bytes_out_cover_both_reads(prometheus, traffic):
    """The first N_FIRST messages were read completely by two consumers."""
    out = prometheus.wait_value(f'sum(tern_topic_bytes_out_total{{topic="{ORDERS}"}})',
                                lambda v: v is not None and v >= 2 * traffic["bytes_in_first"], timeout=SAMPLE_WAIT)
    assert out >= 2 * traffic["bytes_in_first"]


def test_segments_roll(prometheus, traffic):
    segs = prometheus.wait_value(f'sum(tern_log_segments{{topic="{SEGMENTS}"}})', lambda v: v is not None and v >= 2,
                                 timeout=SAMPLE_WAIT)
    assert segs >= 2, f"{N_SEGMENTS} batches into 1 KiB segments gave {segs} segment(s)"
    one = prometheus.value(f'sum(tern_log_segments{{topic="{ORDERS}"}})')
    assert one == ORDERS_PARTITIONS, "each ORDERS partition should still be one segment"


@pytest.mark.parametrize("api", ["Produce", "Fetch", "Metadata", "ApiVersions", "ListOffsets", "FindCoordinator",
                                 "JoinGroup", "SyncGroup", "OffsetCommit", "OffsetFetch", "Heartbeat",
                                 "LeaveGroup", "CreateTopics"])
def test_requests_counted_per_api(prometheus, traffic, api):
    total = prometheus.value(f'sum(tern_requests_total{{api="{api}"}})')
    assert total is not None and total > 0, f"no tern_requests_total{{api=\"{api}\"}}"


def test_histogram_count_matches_requests_and_quantiles_are_finite(prometheus, traffic):
    per_api = prometheus.query("sum by (api) (tern_requests_total) - sum by (api) (tern_request_duration_seconds_count)")
    assert per_api, "no api series in both tern_requests_total and the latency histogram"
    assert all(v == 0 for _, v in per_api), f"requests_total - histogram _count per api: {per_api}"
    p99 = prometheus.value('histogram_quantile(0.99, sum by (le) '
                           '(rate(tern_request_duration_seconds_bucket{api="Produce"}[5m])))')
    assert finite(p99) and 0 < p99 <= 30, f"Produce p99 {p99}"
    inf = prometheus.value('sum(tern_request_duration_seconds_bucket{api="Produce", le="+Inf"})')
    assert inf == prometheus.value('sum(tern_request_duration_seconds_count{api="Produce"})')


def test_partition_errors_counted_with_kafka_codes(prometheus, traffic):
    assert traffic["minisr_kcat_rc"] != 0, "acks=all to a topic with min.insync.replicas=2 should fail"
    not_enough = prometheus.wait_value('sum(tern_partition_errors_total{api="Produce", error="19"})',
                                       lambda v: v is not None and v >= 1, timeout=SAMPLE_WAIT)
    assert not_enough >= 1
    out_of_range = prometheus.wait_value('sum(tern_partition_errors_total{api="Fetch", error="1"})',
                                         lambda v: v is not None and v >= 1, timeout=SAMPLE_WAIT)
    assert out_of_range >= 1


def test_replication_health_gauges(prometheus, traffic):
    assert prometheus.wait_value("tern_under_min_isr_partitions", lambda v: v == 1, timeout=SAMPLE_WAIT) == 1
    assert prometheus.value("tern_under_replicated_partitions") == 0
    assert prometheus.value("tern_offline_partitions") == 0
    assert prometheus.value("tern_controller_active") == 1
    # + ops-segments, ops-minisr, ops-compacted, ops-http, ops-archived, ops-archive-blocked,
    # ops-txn, ops-share, ops-quota (1 partition each); __transaction_state has as many
    # partitions as the offsets topic.
    led = 2 * OFFSETS_PARTITIONS + ORDERS_PARTITIONS + 9
    assert prometheus.wait_value("tern_leader_partitions", lambda v: v == led, timeout=SAMPLE_WAIT) == led


def test_consumer_group_lag_members_and_rebalances(prometheus, traffic):
    lag = prometheus.wait_value(f'sum(tern_consumer_group_lag{{group="{GROUP}", topic="{ORDERS}"}})',
                                lambda v: v == N_LATER, timeout=SAMPLE_WAIT)
    assert lag == N_LATER
    parts = prometheus.query(f'tern_consumer_group_lag{{group="{GROUP}", topic="{ORDERS}"}}')
    assert sorted(l["partition"] for l, _ in parts) == [str(i) for i in range(ORDERS_PARTITIONS)]
    assert prometheus.value(f'tern_group_rebalances_total{{group="{GROUP}"}}') >= 1
    members = prometheus.wait_value(f'tern_group_members{{group="{GROUP}"}}', lambda v: v == 0, timeout=SAMPLE_WAIT)
    assert members == 0, "the kcat consumer left the group"


def test_connection_gauge_and_accepted_counter(prometheus, traffic):
    assert traffic["connections_peak"] >= RAW_CONNECTIONS
    assert prometheus.wait_value("tern_connections", lambda v: v == 0, timeout=SAMPLE_WAIT) == 0, \
        "connections closed by every client are still counted as open"
    accepted = prometheus.value("tern_connections_accepted_total")
    assert accepted >= traffic["kcat_runs"] + RAW_CONNECTIONS


def test_disk_gauges_match_statvfs(prometheus, traffic, broker):
    free = prometheus.wait_value("tern_data_dir_free_bytes", lambda v: v is not None, timeout=SAMPLE_WAIT)
    used = prometheus.value("tern_data_dir_used_bytes")
    st = os.statvfs(broker.data_dir)
    want_free = st.f_bavail * st.f_frsize
    want_used = (st.f_blocks - st.f_bfree) * st.f_frsize
    tolerance = max(2 * 1024**3, 0.05 * st.f_blocks * st.f_frsize)  # other processes write to this disk too
    assert abs(free - want_free) < tolerance, f"free {free} vs statvfs {want_free}"
    assert abs(used - want_used) < tolerance, f"used {used} vs statvfs {want_used}"
    assert used > 0 and free > 0


MODERN_TOPIC = "ops-modern-client"
MODERN_MESSAGES = 25


def test_bytes_out_labelled_with_topic_for_modern_fetch(broker, prometheus, traffic):
    """confluent-kafka's librdkafka (2.16) fetches with Fetch v13+, which names topics by id
    only. The bytes it reads must still be counted under the topic's name, never topic=""."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": broker.address, "acks": "all"})
    for i in range(MODERN_MESSAGES):
        producer.produce(MODERN_TOPIC, f"m{i:06d}".ljust(PAYLOAD, "x").encode())
    assert producer.flush(15) == 0
    del producer
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "ops-modern",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([MODERN_TOPIC])
    got, deadline = 0, time.monotonic() + 30
    while got < MODERN_MESSAGES and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got += 1
    consumer.close()
    del consumer
    assert got == MODERN_MESSAGES

    prometheus.wait_value(f'sum(tern_topic_messages_in_total{{topic="{MODERN_TOPIC}"}})',
                          lambda v: v == MODERN_MESSAGES, timeout=SAMPLE_WAIT)
    bytes_in = prometheus.value(f'sum(tern_topic_bytes_in_total{{topic="{MODERN_TOPIC}"}})')
    try:
        prometheus.wait_value(f'sum(tern_topic_bytes_out_total{{topic="{MODERN_TOPIC}"}})',
                              lambda v: v is not None and v >= bytes_in, timeout=10)
    except AssertionError as e:
        unnamed = prometheus.query('tern_topic_bytes_out_total{topic=""}')
        raise AssertionError(f"bytes read by a Fetch v13+ client are not counted under topic={MODERN_TOPIC!r} "
                             f"({e}); series with an empty topic label: {unnamed}") from None
    assert not prometheus.query('tern_topic_bytes_out_total{topic=""}'), "bytes out counted under topic=\"\""


def test_share_group_counters_follow_the_share_traffic(prometheus, traffic):
    """Five records and three more through SHARE_GROUP (conftest): one rejected, one released
    twice (archived at the limit of 2), three whose locks ran out and were redelivered."""
    group = f'group="{SHARE_GROUP}"'
    assert prometheus.value(f'sum(tern_share_records_acquired_total{{{group}}})') >= 8 + 1 + 3
    assert prometheus.value(f'sum(tern_share_records_acknowledged_total{{{group}, type="reject"}})') >= 1
    assert prometheus.value(f'sum(tern_share_records_acknowledged_total{{{group}, type="release"}})') >= 2
    assert prometheus.value(f'sum(tern_share_records_archived_total{{{group}}})') >= 1
    assert prometheus.value(f'sum(tern_share_lock_timeouts_total{{{group}}})') >= len(traffic["share"]["held"])
    assert prometheus.value(f'sum(tern_share_records_redelivered_total{{{group}}})') >= 1 + len(traffic["share"]["held"])
    assert prometheus.wait_value(f'sum(tern_share_group_lag{{{group}}})', lambda v: v == 0, timeout=SAMPLE_WAIT) == 0
