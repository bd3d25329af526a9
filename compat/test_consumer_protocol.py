"""KIP-848 consumer groups (`group.protocol=consumer`) with confluent-kafka (librdkafka).

The broker assigns (ConsumerGroupHeartbeat); members reconcile incrementally: a partition
moves only after its old owner reports it released. Each member is compat/group_worker.py
in its own process, printing its assignment changes and records as JSON lines.

- members join and leave while consuming: one member keeps fetching while another joins,
  every record is consumed, no partition is ever held by two members at once (the shares
  seen at any moment are disjoint), and the group ends balanced;
- a regex subscription (`^prefix.*`, resolved by the broker) picks up a topic created later;
- commits with member epochs (OffsetCommit v9) resume in the next member;
- the admin view: ListGroups v5 type "consumer", ConsumerGroupDescribe with epochs and
  assignments; DescribeGroups does not describe a consumer group as classic;
- a classic member joins a live consumer group and is assigned by the broker, and an empty
  classic group (offsets only) becomes a consumer group with its offsets;
- online migration: a live classic group whose members restart one by one with
  `group.protocol=consumer` becomes a consumer group without a partition held twice or a
  record lost, and resumes from the offsets its classic members committed; restarted
  back, it becomes a classic group again; a coordinator kill -9 in the middle of a
  migration keeps the classic members, ids and partitions.

The broker heartbeats members every 300 ms (`--group-consumer-heartbeat-interval-ms`) and
drops a silent one after 6 s.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from test_groups import consumed, current_assignment, describe, produce_to_partitions, run_session, spawn
from tern_harness import GROUP_ARGS, tern_bin, wait_until

CONSUMER_ARGS = ("--group-consumer-heartbeat-interval-ms", "300",
                 "--group-consumer-session-timeout-ms", "6000")
pytestmark = pytest.mark.broker_args(*GROUP_ARGS, *CONSUMER_ARGS)


def create_topic(addr: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": addr})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)


def member_args(broker, topic: str, group: str, **extra) -> dict:
    return {"broker": broker.address, "topic": topic, "group": group, "group_protocol": "consumer",
            "deadline_s": 120, **extra}


def shares(members) -> list[set[int]]:
    return [current_assignment(m)[0] for m in members]


@pytest.mark.timeout(180)
def test_members_join_and_leave_while_consuming(broker, topic, tmp_path):
    n = 6
    create_topic(broker.address, topic, n)
    first = {p: [f"a-p{p}-{i}" for i in range(20)] for p in range(n)}
    produce_to_partitions(broker.address, topic, first)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    logs = tmp_path / "members"
    a = spawn("confluent-kafka", "member", member_args(broker, topic, group), logs, "a")
    members = [a]
    try:
        wait_until(lambda: current_assignment(a)[0] == set(range(n)), timeout=30,
                   what="the first member to be assigned all 6 partitions")
        # While a fetches, b joins; a gives up half, one partition at a time.
        b = spawn("confluent-kafka", "member", member_args(broker, topic, group), logs, "b")
        members.append(b)
        overlaps = []

        def balanced():
            sa, sb = shares([a, b])
            if sa & sb:
                overlaps.append((sorted(sa), sorted(sb)))
            return len(sa) == len(sb) == 3 and sa | sb == set(range(n))

        t_join = time.monotonic()
        try:
            wait_until(balanced, timeout=30, interval=0.05, what="a and b to hold 3 partitions each")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        print(f"\nKIP-848 join: balanced {time.monotonic() - t_join:.2f} s after the second member started")
        assert not overlaps, f"a partition was held by two members at once: {overlaps[:3]}"
        second = {p: [f"b-p{p}-{i}" for i in range(20)] for p in range(n)}
        produce_to_partitions(broker.address, topic, second)
        want = {(p, v) for rnd in (first, second) for p, vs in rnd.items() for v in vs}
        wait_until(lambda: want <= set(consumed(members)), timeout=30, what="every record consumed")
        # Both consumed during the second round: the partitions were really shared.
        got_b = {name for (p, v), names in consumed(members).items() if v.startswith("b-") for name in names}
        assert got_b == {"a", "b"}, got_b

        # The admin view of a live consumer group.
        admin = AdminClient({"bootstrap.servers": broker.address})
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=15)
        assert group in {g.group_id for g in listed.valid}, listed.valid
        classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(timeout=15)
        assert group not in {g.group_id for g in classic.valid}
        desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert desc.type == ConsumerGroupType.CONSUMER, desc
        assert len(desc.members) == 2
        assigned = sorted(tp.partition for m in desc.members for tp in m.assignment.topic_partitions)
        assert assigned == list(range(n)), desc

        # `tern group` shows either kind.
        shown = json.loads(subprocess.run([str(tern_bin()), "group", "describe", group, "--json",
                                           "-b", broker.address], capture_output=True, text=True,
                                          check=True, timeout=30).stdout)
        assert shown["type"] == "consumer" and shown["state"] == "Stable", shown
        assert shown["group_epoch"] >= 2 and shown["protocol"] == "uniform", shown
        assert sorted(a["partition"] for m in shown["members"] for a in m["assignment"]) == list(range(n))
        assert all(m["member_epoch"] == shown["group_epoch"] for m in shown["members"]), shown
        listed = json.loads(subprocess.run([str(tern_bin()), "group", "list", "--json", "-b", broker.address],
                                           capture_output=True, text=True, check=True, timeout=30).stdout)
        assert {"group": group, "type": "consumer", "protocol_type": "consumer", "state": "Stable"} in listed

        # b leaves (close: a heartbeat with epoch -1); a takes everything back.
        b.finish()
        wait_until(lambda: current_assignment(a)[0] == set(range(n)), timeout=20,
                   what="a to hold all 6 again after b left")
    finally:
        for m in members:
            m.finish()


@pytest.mark.timeout(120)
def test_a_regex_subscription_picks_up_a_topic_created_later(broker, tmp_path):
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    create_topic(broker.address, f"{prefix}-one", 2)
    produce_to_partitions(broker.address, f"{prefix}-one", {0: ["one-0"], 1: ["one-1"]})
    group = f"kip848-rx-{prefix}"
    m = spawn("confluent-kafka", "member", member_args(broker, f"^{prefix}-.*", group), tmp_path, "rx")
    try:
        wait_until(lambda: {e["v"] for e in m.snapshot("msg")} >= {"one-0", "one-1"}, timeout=30,
                   what="the records of the topic that existed")
        create_topic(broker.address, f"{prefix}-two", 1)
        produce_to_partitions(broker.address, f"{prefix}-two", {0: ["two-0"]})
        try:
            wait_until(lambda: "two-0" in {e["v"] for e in m.snapshot("msg")}, timeout=40,
                       what="the record of the topic created after the member subscribed")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe([m])}") from None
        topics = {e["t"] for e in m.snapshot("msg")}
        assert topics == {f"{prefix}-one", f"{prefix}-two"}, topics
    finally:
        m.finish()


@pytest.mark.timeout(120)
def test_commits_carry_member_epochs_and_the_next_member_resumes(broker, topic, tmp_path):
    create_topic(broker.address, topic, 2)
    produce_to_partitions(broker.address, topic, {p: [f"p{p}-{i}" for i in range(10)] for p in range(2)})
    group = f"kip848-commit-{uuid.uuid4().hex[:6]}"
    first = run_session("confluent-kafka", member_args(broker, topic, group, commit="sync", stop_after=8),
                        tmp_path, "first")
    commits = [e for e in first if e["ev"] == "commit"]
    assert commits and commits[0]["error"] is None, first
    seen = {(e["p"], e["o"]) for e in first if e["ev"] == "msg"}
    assert len(seen) == 8
    second = run_session("confluent-kafka", member_args(broker, topic, group, commit="sync", stop_after=12),
                         tmp_path, "second")
    again = {(e["p"], e["o"]) for e in second if e["ev"] == "msg"}
    assert not (seen & again), f"records consumed twice across a commit: {sorted(seen & again)}"
    assert len(seen | again) == 20


@pytest.mark.timeout(120)
def test_a_classic_member_joins_a_live_consumer_group_and_empty_groups_convert(broker, topic, tmp_path):
    create_topic(broker.address, topic, 2)
    produce_to_partitions(broker.address, topic, {0: [f"v{i}" for i in range(5)]})
    group = f"kip848-mix-{uuid.uuid4().hex[:6]}"
    # An empty classic group: committed offsets only.
    admin_consumer = Consumer({"bootstrap.servers": broker.address, "group.id": group})
    admin_consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    admin_consumer.close()
    m = spawn("confluent-kafka", "member", member_args(broker, topic, group), tmp_path, "modern")
    old = None
    try:
        wait_until(lambda: len(m.snapshot("msg")) >= 2, timeout=30, what="the consumer member's records")
        assert [e["o"] for e in m.snapshot("msg")][:2] == [3, 4], "the classic group's offsets were kept"
        # A classic member (JoinGroup) of the live consumer group is served by it: the
        # broker assigns, one partition each.
        old = spawn("confluent-kafka", "member", {**member_args(broker, topic, group), "group_protocol": "classic"},
                    tmp_path, "classic")
        try:
            wait_until(lambda: [len(s) for s in shares([m, old])] == [1, 1], timeout=30,
                       what="the consumer and the classic member to hold one partition each")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe([m, old])}") from None
        assert shares([m, old])[0] != shares([m, old])[1]
        admin = AdminClient({"bootstrap.servers": broker.address})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert desc.type == ConsumerGroupType.CONSUMER and len(desc.members) == 2, desc
    finally:
        m.finish()
        if old is not None:
            old.finish()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_classic_to_consumer_migration_of_a_live_group(broker, topic, tmp_path, assignor):
    """Online upgrade (KIP-848's migration path): three classic members (eager `range`
    or incremental `cooperative-sticky`) share six partitions while a producer runs; they
    are restarted one by one with `group.protocol=consumer`. The first one converts the
    live group into a consumer group, whose remaining classic members are told to rejoin
    and revoke through their heartbeats. At no sampled moment do two members hold the
    same partition, every acknowledged record is consumed, the offsets the classic
    members committed are where the new members resume; restarted back with the classic
    protocol, the members are served by the consumer group until the last
    consumer-protocol member leaves, and the group is classic again."""
    import threading

    from confluent_kafka import Producer

    n = 6
    create_topic(broker.address, topic, n)
    group = f"migrate-{uuid.uuid4().hex[:8]}"
    logs = tmp_path / "members"
    first = {p: [f"first-p{p}-{i}" for i in range(10)] for p in range(n)}
    produce_to_partitions(broker.address, topic, first)
    classic = {"broker": broker.address, "topic": topic, "group": group, "assignor": assignor,
               "deadline_s": 240}
    modern = member_args(broker, topic, group, deadline_s=240)
    members = {name: spawn("confluent-kafka", "member", classic, logs, name) for name in "abc"}
    everyone = list(members.values())
    overlaps: list = []
    acked: set = set()
    stop = threading.Event()

    def produce_while_migrating():
        producer = Producer({"bootstrap.servers": broker.address, "acks": "all", "linger.ms": 5})

        def delivered(err, msg):
            if err is None:
                acked.add((msg.partition(), msg.value().decode()))

        for i in range(20_000):  # bounded: about 100 s at most
            if stop.is_set():
                break
            producer.produce(topic, value=f"live-{i}".encode(), partition=i % n, on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(30)

    def covered(live):
        shares_now = [current_assignment(m)[0] for m in live if m.alive()]
        for i, x in enumerate(shares_now):
            for y in shares_now[i + 1:]:
                if x & y:
                    overlaps.append((sorted(x), sorted(y)))
        flat = sorted(p for s in shares_now for p in s)
        return flat == list(range(n)) and all(shares_now)

    def settle(live, what):
        try:
            wait_until(lambda: covered(live), timeout=60, interval=0.05, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(everyone)}") from None

    producer = threading.Thread(target=produce_while_migrating, daemon=True)
    try:
        live = list(members.values())
        settle(live, "three classic members to share six partitions")
        want_first = {(p, v) for p, vs in first.items() for v in vs}
        wait_until(lambda: want_first <= set(consumed(everyone)), timeout=30, what="the first records consumed")
        time.sleep(1.5)  # auto-commit (every second) stores what they consumed
        producer.start()
        admin = AdminClient({"bootstrap.servers": broker.address})
        for step, name in enumerate("abc"):
            members[name].finish()
            live = [m for m in live if m is not members[name]]
            if step == 0:
                # The first conversion takes a stable group; the later ones, a group
                # still rebalancing after a member left.
                settle(live, "the two classic members left to share six partitions")
            new = spawn("confluent-kafka", "member", modern, logs, f"{name}-consumer")
            everyone.append(new)
            live.append(new)
            settle(live, f"the group to settle after {name} restarted with group.protocol=consumer")
            desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
            assert desc.type == ConsumerGroupType.CONSUMER, (step, desc)
            assert len(desc.members) == 3, (step, desc)
            if step == 0:
                # `tern group describe` tells the members not yet migrated (KIP-1099).
                shown = json.loads(subprocess.run(
                    [str(tern_bin()), "group", "describe", group, "--json", "-b", broker.address],
                    capture_output=True, text=True, check=True, timeout=30).stdout)
                kinds = sorted(m["member_protocol"] for m in shown["members"])
                assert kinds == ["classic", "classic", "consumer"], shown
        # The way back (policy bidirectional): the members restart with the classic
        # protocol again; classic members are served by the consumer group until the
        # last consumer-protocol member leaves, then the group is classic again.
        for step in range(3):
            live[0].finish()
            back = spawn("confluent-kafka", "member", classic, logs, f"back-{step}")
            everyone.append(back)
            live = live[1:] + [back]
            settle(live, f"the group to settle with {step + 1} classic members back")
        desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert desc.type == ConsumerGroupType.CLASSIC, desc
        assert len(desc.members) == 3, desc
        stop.set()
        producer.join(timeout=60)
        assert acked, "the producer's records were acknowledged"
        try:
            wait_until(lambda: acked <= set(consumed(everyone)), timeout=60, what="every acknowledged record consumed")
        except AssertionError as e:
            missing = sorted(acked - set(consumed(everyone)))
            raise AssertionError(f"{e}: {len(missing)} missing, e.g. {missing[:5]}\n{describe(everyone)}") from None
        assert not overlaps, f"a partition was held by two members at once: {overlaps[:3]}"
        # The consumer-protocol members resumed from the classic members' commits.
        reread = [(p, v) for (p, v), names in consumed(everyone).items()
                  if (p, v) in want_first and any(name.endswith("-consumer") for name in names)]
        assert not reread, f"records committed before the migration were read again: {reread[:5]}"
        print(f"\nmigration ({assignor}): {len(acked)} records produced meanwhile, all consumed")
    finally:
        stop.set()
        for m in everyone:
            m.finish()


@pytest.mark.timeout(180)
def test_a_coordinator_kill9_resumes_the_group_with_its_epochs(tmp_path, topic):
    """3 brokers on etcd; two members share a 4-partition topic. The group's coordinator
    is killed -9: its successor replays the group's records (types 3, 5-8) from its replica
    of __consumer_offsets, so the members carry on with the same member ids and epochs,
    keep their partitions (no rebalance), and consume what is produced after the kill."""
    from test_cluster import LEASE_TTL_S, Cluster, offsets_partition_of
    from test_replication import all_in_sync

    c = Cluster(tmp_path, extra_args=["--replica-lag-time-max-ms", "2000", *CONSUMER_ARGS])
    members = []
    try:
        c.start()
        c.create_topic(topic, 4, 3)
        wait_until(lambda: all_in_sync(c, topic, 3) and all_in_sync(c, "__consumer_offsets", 3), 30,
                   what="topic and offsets topic in sync")
        group = f"kip848-failover-{uuid.uuid4().hex[:6]}"
        for name in ("a", "b"):
            members.append(spawn("confluent-kafka", "member",
                                 {"broker": c.bootstrap(), "topic": topic, "group": group,
                                  "group_protocol": "consumer", "deadline_s": 150}, tmp_path, name))
        wait_until(lambda: [len(s) for s in shares(members)] == [2, 2] and
                   set.union(*shares(members)) == set(range(4)), timeout=40,
                   what="two members with two partitions each")
        admin = AdminClient({"bootstrap.servers": c.bootstrap()})
        before = admin.describe_consumer_groups([group])[group].result(timeout=15)
        ids_before = sorted(m.member_id for m in before.members)
        coordinator = c.leaders("__consumer_offsets")[offsets_partition_of(group)]
        t_kill = time.monotonic()
        c.brokers[coordinator].kill9()
        survivor = next(b for n, b in c.brokers.items() if n != coordinator)
        values = {p: [f"after-p{p}-{i}" for i in range(5)] for p in range(4)}

        def produced():
            try:
                produce_to_partitions(survivor.address, topic, values)
                return True
            except AssertionError:
                return False

        wait_until(produced, LEASE_TTL_S + 20, interval=1, what="a produce after the kill")
        want = {(p, v) for p, vs in values.items() for v in vs}
        try:
            wait_until(lambda: want <= set(consumed(members)), timeout=60, what="the records after the kill")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        admin = AdminClient({"bootstrap.servers": survivor.address})

        def described():
            try:
                return admin.describe_consumer_groups([group])[group].result(timeout=5)
            except Exception:  # noqa: BLE001 - the coordinator moving: ask again
                return None

        after = wait_until(described, LEASE_TTL_S + 20, interval=0.5, what="the group described by the new coordinator")
        assert sorted(m.member_id for m in after.members) == ids_before, (before, after)
        moved = [e for m in members for e in m.snapshot() if e["ev"] in ("revoke", "lost") and e["_t"] > t_kill]
        assert not moved, f"partitions moved across the coordinator failover: {moved}"
    finally:
        for m in members:
            m.finish()
        c.stop()


@pytest.mark.timeout(240)
def test_a_coordinator_kill9_mid_migration_keeps_the_classic_members(tmp_path, topic):
    """3 brokers on etcd; a live classic group of two cooperative members is half
    migrated (a third member joins with `group.protocol=consumer`). The coordinator is
    killed -9: its successor replays the consumer group's records, the classic members'
    protocols and session timeouts with them (Kafka's ClassicMemberMetadata), so both
    kinds of member carry on with the same ids and partitions (no rebalance) and consume
    what is produced after the kill."""
    from test_cluster import LEASE_TTL_S, Cluster, offsets_partition_of
    from test_replication import all_in_sync

    c = Cluster(tmp_path, extra_args=["--replica-lag-time-max-ms", "2000", *CONSUMER_ARGS])
    members = []
    try:
        c.start()
        c.create_topic(topic, 6, 3)
        wait_until(lambda: all_in_sync(c, topic, 3) and all_in_sync(c, "__consumer_offsets", 3), 30,
                   what="topic and offsets topic in sync")
        group = f"mig-failover-{uuid.uuid4().hex[:6]}"
        classic = {"broker": c.bootstrap(), "topic": topic, "group": group,
                   "assignor": "cooperative-sticky", "deadline_s": 200}
        for name in ("a", "b"):
            members.append(spawn("confluent-kafka", "member", classic, tmp_path, name))
        wait_until(lambda: [len(s) for s in shares(members)] == [3, 3] and
                   set.union(*shares(members)) == set(range(6)), timeout=40,
                   what="two classic members with three partitions each")
        members.append(spawn("confluent-kafka", "member", {**classic, "group_protocol": "consumer"},
                             tmp_path, "c"))
        try:
            wait_until(lambda: [len(s) for s in shares(members)] == [2, 2, 2] and
                       set.union(*shares(members)) == set(range(6)), timeout=60,
                       what="two classic members and a consumer member with two partitions each")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        admin = AdminClient({"bootstrap.servers": c.bootstrap()})
        before = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert before.type == ConsumerGroupType.CONSUMER, before
        ids_before = sorted(m.member_id for m in before.members)
        coordinator = c.leaders("__consumer_offsets")[offsets_partition_of(group)]
        t_kill = time.monotonic()
        c.brokers[coordinator].kill9()
        survivor = next(b for n, b in c.brokers.items() if n != coordinator)
        values = {p: [f"after-p{p}-{i}" for i in range(5)] for p in range(6)}

        def produced():
            try:
                produce_to_partitions(survivor.address, topic, values)
                return True
            except AssertionError:
                return False

        wait_until(produced, LEASE_TTL_S + 20, interval=1, what="a produce after the kill")
        want = {(p, v) for p, vs in values.items() for v in vs}
        try:
            wait_until(lambda: want <= set(consumed(members)), timeout=60, what="the records after the kill")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None

        def shown():
            try:
                return json.loads(subprocess.run(
                    [str(tern_bin()), "group", "describe", group, "--json", "-b", survivor.address],
                    capture_output=True, text=True, check=True, timeout=30).stdout)
            except subprocess.CalledProcessError:
                return None  # the coordinator moving: ask again

        after = wait_until(shown, LEASE_TTL_S + 20, interval=0.5, what="the group described by the new coordinator")
        assert sorted(m["member_id"] for m in after["members"]) == ids_before, (before, after)
        kinds = sorted(m["member_protocol"] for m in after["members"])
        assert kinds == ["classic", "classic", "consumer"], after
        moved = [e for m in members for e in m.snapshot() if e["ev"] in ("revoke", "lost") and e["_t"] > t_kill]
        assert not moved, f"partitions moved across the coordinator failover: {moved}"
    finally:
        for m in members:
            m.finish()
        c.stop()


@pytest.mark.timeout(120)
def test_a_static_member_restarting_gets_its_partitions_back_without_a_rebalance(broker, topic, tmp_path):
    """group.instance.id: closing leaves with epoch -2, so the group keeps the member's
    partitions for it; the same instance returning (a new process, a new member id) gets
    them back at once and the other member sees no change."""
    create_topic(broker.address, topic, 4)
    group = f"kip848-static-{uuid.uuid4().hex[:6]}"
    args = {name: member_args(broker, topic, group, group_instance_id=f"instance-{name}") for name in "ab"}
    a = spawn("confluent-kafka", "member", args["a"], tmp_path, "a")
    b = spawn("confluent-kafka", "member", args["b"], tmp_path, "b")
    again = None
    try:
        wait_until(lambda: [len(s) for s in shares([a, b])] == [2, 2], timeout=30, what="two static members, 2 + 2")
        a_share = current_assignment(a)[0]
        epoch = json.loads(subprocess.run([str(tern_bin()), "group", "describe", group, "--json", "-b", broker.address],
                                          capture_output=True, text=True, check=True, timeout=30).stdout)["group_epoch"]
        t_leave = time.monotonic()
        a.finish()
        again = spawn("confluent-kafka", "member", args["a"], tmp_path, "a-again")
        wait_until(lambda: current_assignment(again)[0] == a_share, timeout=20,
                   what="the returning instance to get its partitions back")
        changes = [e for e in b.snapshot() if e["ev"] in ("assign", "revoke", "lost") and e["_t"] > t_leave]
        assert not changes, f"the other member was rebalanced: {changes}"
        shown = json.loads(subprocess.run([str(tern_bin()), "group", "describe", group, "--json", "-b", broker.address],
                                          capture_output=True, text=True, check=True, timeout=30).stdout)
        assert shown["group_epoch"] == epoch, ("no new group epoch", epoch, shown)
        assert sorted(m["group_instance_id"] for m in shown["members"]) == ["instance-a", "instance-b"]
    finally:
        for m in (a, b, again):
            if m is not None:
                m.finish()


@pytest.mark.timeout(150)
def test_uniform_assigns_each_member_the_partitions_led_in_its_rack(tmp_path, topic):
    """3 brokers in racks rack-1..3, a topic of 6 single-replica partitions; three KIP-848
    members with `client.rack` rack-1..3 get, balanced, the partitions whose replica is in
    their own rack (so each can fetch locally)."""
    from test_cluster import Cluster

    c = Cluster(tmp_path, extra_args=list(CONSUMER_ARGS), rack_of=lambda node: f"rack-{node}")
    members = []
    try:
        c.start()
        c.create_topic(topic, 6, 1)
        leaders = c.leaders(topic)
        per_broker = sorted(list(leaders.values()).count(b) for b in c.brokers)
        if per_broker != [2, 2, 2]:
            pytest.skip(f"the ring placed the partitions unevenly ({leaders}); the check needs 2 per rack")
        group = f"kip848-racks-{uuid.uuid4().hex[:6]}"
        for node in c.brokers:
            members.append(spawn("confluent-kafka", "member",
                                 {"broker": c.bootstrap(), "topic": topic, "group": group,
                                  "group_protocol": "consumer", "client_rack": f"rack-{node}",
                                  "deadline_s": 120}, tmp_path, f"rack-{node}"))
        wait_until(lambda: [len(s) for s in shares(members)] == [2, 2, 2], timeout=40,
                   what="three members with two partitions each")
        for node, member in zip(c.brokers, members):
            mine = current_assignment(member)[0]
            assert {leaders[p] for p in mine} == {node}, (node, sorted(mine), leaders)
    finally:
        for m in members:
            m.finish()
        c.stop()
