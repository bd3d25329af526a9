"""Series that exist before their first event (Prometheus's "avoid missing metrics"):
a counter whose labels the broker knows at start-up is exported at 0 from the start, so
that its first increase is visible to increase()/rate() and alerts on it can fire."""

from __future__ import annotations

import re
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tern_harness import free_port, wait_until

METRICS = f"127.0.0.1:{free_port()}"
pytestmark = pytest.mark.broker_args("--metrics", METRICS)


def scrape() -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^(tern_[a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def test_counters_with_known_labels_exist_at_zero_from_start_up(broker):
    samples = scrape()
    for series in [
        "tern_controller_elections_total",
        "tern_isr_shrinks_total",
        "tern_isr_expands_total",
        "tern_unclean_leader_elections_total",
        "tern_partition_leader_changes_total",
        "tern_decodes_refused_total",
        "tern_log_cleaner_errors_total",
        'tern_requests_total{api="Produce"}',
        'tern_slow_requests_total{api="Fetch"}',
        'tern_connections_refused_total{reason="per_ip"}',
        'tern_authentication_failures_total{listener="PLAINTEXT",reason="credentials"}',
    ]:
        assert samples.get(series) == 0, f"{series}: {samples.get(series)} at start-up"


def test_a_new_topics_counters_exist_at_zero_before_its_first_message(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    wanted = [f'{name}{{topic="{topic}"}}' for name in (
        "tern_topic_messages_in_total", "tern_topic_bytes_in_total",
        "tern_topic_messages_out_total", "tern_topic_bytes_out_total")]
    wait_until(lambda: all(s in scrape() for s in wanted), timeout=15, what="the topic's series")
    samples = scrape()
    assert [samples[s] for s in wanted] == [0, 0, 0, 0]
    assert f'tern_archive_failures_total{{topic="{topic}"}}' not in samples, "the topic is not archived"
