"""Consumer groups (classic protocol) with real clients, each member in its own process.

confluent-kafka and kafka-python members are compat/group_worker.py; kafkajs members are
compat/kafkajs/run.js (member / session modes). Every member prints its assignment and the
records it is handed as JSON lines (see group_worker.py), which the tests read.

- three consumers share a 6-partition topic; one is SIGKILLed and the other two take over
  its partitions after its session timeout (the time is measured and printed); restarted, it
  gets partitions again. Eager (range / round robin) and incremental (cooperative-sticky).
- a stable group carries on across a broker restart (SIGTERM, kill -9) without a rebalance.
- static members (group.instance.id) restart without a rebalance.
- commit / stop / resume: a member processes some records, commits (auto, sync, async or
  kafkajs manual), leaves; the next member resumes exactly at the committed offsets, also
  after a SIGTERM restart and after a kill -9 of the broker.
- the group admin APIs (ListGroups, DescribeGroups, OffsetFetch, OffsetDelete, DeleteGroups)
  through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient.
- __consumer_offsets is internal: hidden from Metadata, not writable by producers, its
  records in Kafka's OffsetCommitKey/Value format; commit metadata and leader epoch survive
  a restart.

The broker runs with tern_harness.GROUP_ARGS (300 ms initial rebalance delay, 1 s minimum
session timeout); members use session.timeout.ms=6000 and heartbeat.interval.ms=1000.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ck import new_consumer, produce_all
from tern_harness import COMPAT, GROUP_ARGS, JsonLinesProcess, wait_until

pytestmark = pytest.mark.broker_args(*GROUP_ARGS)

NODE = shutil.which("node")
KAFKAJS_DIR = COMPAT / "kafkajs"
HAVE_KAFKAJS = NODE is not None and (KAFKAJS_DIR / "node_modules" / "kafkajs").is_dir()
NEEDS_KAFKAJS = pytest.mark.skipif(
    not HAVE_KAFKAJS, reason="needs node and compat/kafkajs/node_modules (scripts/install-test-deps.sh)")

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
# A killed member is noticed when its session times out (<= 6 s after its last heartbeat);
# the survivors hear of the rebalance at their next heartbeat (1 s) and rejoin. Allow that,
# plus 5 s for the JoinGroup/SyncGroup round and slow CI.
TAKEOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 2 * HEARTBEAT_INTERVAL_MS / 1000 + 5


# ---------------------------------------------------------------------------- helpers

def create_topic(addr: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": addr, "socket.timeout.ms": 10000})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)


def produce_to_partitions(addr: str, topic: str, values_by_partition: dict[int, list[str]]) -> None:
    msgs = [{"value": v.encode(), "partition": p} for p, vs in values_by_partition.items() for v in vs]
    reports = produce_all(addr, topic, msgs, {"acks": "all"})
    errs = [r for r in reports if r[1] is not None]
    assert not errs, f"delivery errors: {errs[:3]}"


def spawn(client: str, mode: str, args: dict, log_dir: Path, name: str) -> JsonLinesProcess:
    """Starts one group member: group_worker.py (ck / kp) or kafkajs/run.js."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stderr = log_dir / f"{name}.stderr"
    if client == "kafkajs":
        js = {"broker": args["broker"], "topic": args["topic"], "group": args["group"],
              "sessionTimeout": args.get("session_timeout_ms", SESSION_TIMEOUT_MS),
              "heartbeatInterval": args.get("heartbeat_interval_ms", HEARTBEAT_INTERVAL_MS),
              "deadlineMs": int(args.get("deadline_s", 60) * 1000) + 15000}
        if mode == "session":
            js.update(commit=args["commit"], stopAfter=args["stop_after"])
        cmd = [NODE, str(KAFKAJS_DIR / "run.js"), mode, json.dumps(js)]
        env = {**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
        return JsonLinesProcess(cmd, stderr, cwd=KAFKAJS_DIR, env=env, name=name)
    short = {"confluent-kafka": "ck", "kafka-python": "kp"}[client]
    cmd = [sys.executable, str(COMPAT / "group_worker.py"), short, mode, json.dumps(args)]
    return JsonLinesProcess(cmd, stderr, cwd=COMPAT, name=name)


def current_assignment(proc: JsonLinesProcess) -> tuple[set[int], float | None]:
    """A member's assignment now and when it last changed (monotonic). group_worker.py prints
    the whole assignment after each change ("assignment"); kafkajs events are eager: an assign
    is the whole assignment, a revoke gives everything up."""
    parts: set[int] = set()
    since = None
    for e in proc.snapshot():
        if e["ev"] not in ("assign", "revoke", "lost"):
            continue
        if "assignment" in e:
            parts = set(e["assignment"])
        else:
            parts = set(e["partitions"]) if e["ev"] == "assign" else set()
        since = e["_t"]
    return parts, since


def exact_cover(procs: list[JsonLinesProcess], n_partitions: int, after: float | None = None):
    """If every live member holds a non-empty share, the shares are disjoint and together are
    every partition exactly once (all assigned after `after`): (time of the last assign,
    shares). Else None."""
    shares, times = [], []
    for p in procs:
        if not p.alive():
            return None
        parts, since = current_assignment(p)
        if not parts or since is None or (after is not None and since <= after):
            return None
        shares.append(parts)
        times.append(since)
    flat = [x for s in shares for x in s]
    if sorted(flat) != list(range(n_partitions)):
        return None
    return max(times), shares


def describe(procs: list[JsonLinesProcess]) -> str:
    lines = []
    for p in procs:
        evs = [{k: v for k, v in e.items() if k != "_t"} for e in p.snapshot() if e["ev"] != "msg"]
        lines.append(f"{p!r}: assignment now {sorted(current_assignment(p)[0])}; "
                     f"{len(p.snapshot('msg'))} records; events {evs[-8:]}; stderr tail: {p.stderr_tail(600)!r}")
    return "\n".join(lines)


def consumed(procs: list[JsonLinesProcess], after: float = 0.0) -> dict[tuple[int, str], list[str]]:
    """(partition, value) -> names of the members that were handed it (after `after`)."""
    out: dict[tuple[int, str], list[str]] = {}
    for p in procs:
        for e in p.snapshot("msg"):
            if e["_t"] > after:
                out.setdefault((e["p"], e["v"]), []).append(p.name)
    return out


def new_group(topic: str) -> str:
    return f"grp-{uuid.uuid4().hex[:8]}-{topic[-40:]}"


# ---------------------------------------------------------------------------- 1. three consumers

@pytest.mark.timeout(240)
@pytest.mark.parametrize("client,assignor", [
    ("confluent-kafka", "range"), ("confluent-kafka", "cooperative-sticky"),
    ("kafka-python", "range"), ("kafka-python", "cooperative-sticky"),
    pytest.param("kafkajs", "roundrobin", marks=NEEDS_KAFKAJS),  # kafkajs's only built-in assignor
])
def test_three_consumers_share_failover_and_rejoin(broker, topic, tmp_path, client, assignor):
    """range / roundrobin: eager rebalances; cooperative-sticky: incremental (KIP-429)."""
    n_parts = 6
    create_topic(broker.address, topic, n_parts)
    round1 = {p: [f"r1-p{p}-{i}" for i in range(10)] for p in range(n_parts)}
    produce_to_partitions(broker.address, topic, round1)
    group = new_group(topic)
    args = {"broker": broker.address, "topic": topic, "group": group,
            "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "deadline_s": 180, "assignor": assignor}
    logs = tmp_path / "members"
    members = [spawn(client, "member", args, logs, f"{client}-m{i}") for i in range(3)]
    try:
        # -- three members: each has a share, every partition exactly once
        try:
            _, shares = wait_until(lambda: exact_cover(members, n_parts), timeout=60, interval=0.1,
                                   what="3 members each assigned a share, all 6 partitions exactly once")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        assert sorted(len(s) for s in shares) == [2, 2, 2], shares  # every assignor: 6 = 2+2+2
        want1 = {(p, v) for p, vs in round1.items() for v in vs}
        try:
            wait_until(lambda: want1 <= set(consumed(members)), timeout=30, what="every round-1 record consumed")
        except AssertionError as e:
            missing = sorted(want1 - set(consumed(members)))
            raise AssertionError(f"{e}: {len(missing)} missing, e.g. {missing[:5]}\n{describe(members)}") from None

        # -- SIGKILL one: after its session times out the other two take over all 6
        victim, survivors = members[1], [members[0], members[2]]
        victim_share = sorted(current_assignment(victim)[0])
        t_kill = time.monotonic()
        victim.kill9()
        try:
            t_done, shares = wait_until(lambda: exact_cover(survivors, n_parts, after=t_kill),
                                        timeout=TAKEOVER_BOUND_S + 30, interval=0.05,
                                        what="the 2 survivors to hold all 6 partitions")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        takeover = t_done - t_kill
        print(f"\nTAKEOVER {client} ({assignor}): {takeover:.2f} s from SIGKILL of a member (holding {victim_share}) "
              f"until the 2 survivors held all {n_parts} partitions {[sorted(s) for s in shares]} "
              f"(session.timeout.ms={SESSION_TIMEOUT_MS}, heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS})")
        assert sorted(len(s) for s in shares) == [3, 3], shares
        assert takeover <= TAKEOVER_BOUND_S, (
            f"takeover took {takeover:.1f} s, more than session timeout + 2 heartbeats + 5 s "
            f"= {TAKEOVER_BOUND_S:.0f} s")

        # The survivors really consume the victim's partitions (new records on all 6).
        round2 = {p: [f"r2-p{p}-{i}" for i in range(5)] for p in range(n_parts)}
        t2 = time.monotonic()
        produce_to_partitions(broker.address, topic, round2)
        want2 = {(p, v) for p, vs in round2.items() for v in vs}
        try:
            wait_until(lambda: want2 <= set(consumed(survivors, after=t2)), timeout=30,
                       what="the survivors to consume every round-2 record")
        except AssertionError as e:
            missing = sorted(want2 - set(consumed(survivors, after=t2)))
            raise AssertionError(f"{e}: missing {missing[:6]} (victim had {victim_share})\n{describe(members)}") from None

        # -- start it again: the group rebalances and all three have partitions
        members[1] = spawn(client, "member", args, logs, f"{client}-m1-restarted")
        t_rejoin = time.monotonic()
        try:
            t_back, shares = wait_until(lambda: exact_cover(members, n_parts, after=members[1].started_at),
                                        timeout=60, interval=0.1,
                                        what="3 members (one restarted) each holding a share of all 6 partitions")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        print(f"REJOIN {client} ({assignor}): {t_back - t_rejoin:.2f} s from restarting the member until all 3 held a share")
        assert sorted(len(s) for s in shares) == [2, 2, 2], shares

        # Each new record goes to the member that holds its partition now.
        owner = {p: m.name for m in members for p in current_assignment(m)[0]}
        round3 = {p: [f"r3-p{p}-{i}" for i in range(5)] for p in range(n_parts)}
        t3 = time.monotonic()
        produce_to_partitions(broker.address, topic, round3)
        want3 = {(p, v) for p, vs in round3.items() for v in vs}
        try:
            wait_until(lambda: want3 <= set(consumed(members, after=t3)), timeout=30,
                       what="every round-3 record consumed")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        got3 = consumed(members, after=t3)
        wrong = {k: v for k, v in got3.items() if k in want3 and v != [owner[k[0]]]}
        assert not wrong, f"records handed to a member not owning the partition (owners {owner}): {list(wrong.items())[:5]}"
    finally:
        for m in members:
            m.finish(timeout=20)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("client,how", [
    ("confluent-kafka", "SIGTERM"), ("confluent-kafka", "kill -9"),
    ("kafka-python", "SIGTERM"),
    pytest.param("kafkajs", "SIGTERM", marks=NEEDS_KAFKAJS),
])
def test_stable_group_survives_broker_restart(broker, topic, tmp_path, client, how):
    """Kafka stores a group's members and assignment in __consumer_offsets at the end of every
    rebalance and restores them when the coordinator loads the group, so after a coordinator
    restart the members carry on heartbeating in the same generation: no rebalance, nobody
    loses partitions, consumption continues."""
    n_parts = 4
    create_topic(broker.address, topic, n_parts)
    group = new_group(topic)
    args = {"broker": broker.address, "topic": topic, "group": group,
            "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "deadline_s": 120}
    members = [spawn(client, "member", args, tmp_path / "members", f"{client}-m{i}") for i in range(2)]
    try:
        try:
            _, before = wait_until(lambda: exact_cover(members, n_parts), timeout=60,
                                   what="2 members sharing 4 partitions")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        time.sleep(2 * HEARTBEAT_INTERVAL_MS / 1000)  # a settled generation
        t_restart = time.monotonic()
        if how == "SIGTERM":
            assert broker.stop() == 0
        else:
            broker.kill9()
        broker.start()
        # Longer than the session timeout: restored members must not be expired either.
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 3)
        changes = {m.name: [(round(e["_t"] - t_restart, 2), e["ev"], e.get("partitions"))
                            for e in m.snapshot() if e["ev"] in ("assign", "revoke", "lost") and e["_t"] > t_restart]
                   for m in members}
        assert not any(changes.values()), (
            f"after a broker {how} restart the stable group rebalanced (Kafka restores its members "
            f"from __consumer_offsets): assignment changes {changes}; before: {before}")
        owner = {p: m.name for m in members for p in current_assignment(m)[0]}
        values = {p: [f"after-{p}-{i}" for i in range(3)] for p in range(n_parts)}
        t_prod = time.monotonic()
        produce_to_partitions(broker.address, topic, values)
        want = {(p, v) for p, vs in values.items() for v in vs}
        wait_until(lambda: want <= set(consumed(members, after=t_prod)), timeout=30,
                   what="records produced after the restart consumed")
        got = consumed(members, after=t_prod)
        assert all(got[k] == [owner[k[0]]] for k in want), (owner, got)
    finally:
        for m in members:
            m.finish(timeout=20)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("client,assignor", [
    ("confluent-kafka", "range"), ("confluent-kafka", "cooperative-sticky"),
    # kafka-python speaks JoinGroup below v9: its returning leader is told the old leader
    # id and no members (Kafka's answer without skip_assignment), follows, and syncs.
    ("kafka-python", "range"),
])
def test_static_member_restart_keeps_assignment_without_rebalance(broker, topic, tmp_path, client, assignor):
    """Static membership (group.instance.id, KIP-345, JoinGroup v5+): a static member that is
    killed and comes back within its session timeout takes its old place. Kafka
    (updateStaticMemberThenRebalanceOrCompleteJoin): in a Stable group whose selected protocol
    stays the same, the new member id replaces the old one, the generation and the assignment
    stay, and nobody rebalances -- whether or not the member was the leader (a returning
    leader gets skip_assignment at JoinGroup v9+). Each of the two members is restarted in
    turn, so one of the restarts is the leader's."""
    n_parts = 4
    create_topic(broker.address, topic, n_parts)
    group = new_group(topic)
    base = {"broker": broker.address, "topic": topic, "group": group,
            "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "deadline_s": 120, "assignor": assignor}
    logs = tmp_path / "members"
    members = [spawn(client, "member", {**base, "group_instance_id": f"static-{i}"}, logs, f"{client}-static{i}")
               for i in range(2)]
    try:
        try:
            wait_until(lambda: exact_cover(members, n_parts), timeout=60, what="2 static members sharing 4 partitions")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None
        time.sleep(2 * HEARTBEAT_INTERVAL_MS / 1000)
        problems = []
        for i in (0, 1):
            other = members[1 - i]
            old_share = current_assignment(members[i])[0]
            t_kill = time.monotonic()
            members[i].kill9()
            members[i] = spawn(client, "member", {**base, "group_instance_id": f"static-{i}"}, logs,
                               f"{client}-static{i}-restarted")
            try:
                wait_until(lambda: current_assignment(members[i])[0], timeout=SESSION_TIMEOUT_MS / 1000 + 20,
                           what=f"restarted static member {i} to get partitions")
            except AssertionError as e:
                raise AssertionError(f"{e}\n{describe(members)}") from None
            t_back = time.monotonic() - t_kill
            time.sleep(SESSION_TIMEOUT_MS / 1000 + 2)  # the old member id's session ends meanwhile
            new_share = current_assignment(members[i])[0]
            changes = [(round(e["_t"] - t_kill, 2), e["ev"], e.get("partitions")) for e in other.snapshot()
                       if e["ev"] in ("assign", "revoke", "lost") and e["_t"] > t_kill]
            print(f"\nSTATIC {client} ({assignor}): restarted static member {i} had partitions again after {t_back:.2f} s; "
                  f"{sorted(old_share)} -> {sorted(new_share)}; other member's changes: {changes}")
            if new_share != old_share:
                problems.append(f"restarted static member {i} got {sorted(new_share)}, had {sorted(old_share)}")
            if changes:
                problems.append(f"restarting static member {i}: the other member went through a rebalance: {changes}")
        assert not problems, problems
    finally:
        for m in members:
            m.finish(timeout=20)


# ---------------------------------------------------------------------------- 2. commit / resume

VARIANTS = [
    ("confluent-kafka", "auto"), ("confluent-kafka", "sync"), ("confluent-kafka", "async"),
    ("kafka-python", "auto"), ("kafka-python", "sync"), ("kafka-python", "async"),
    pytest.param("kafkajs", "auto", marks=NEEDS_KAFKAJS),
    pytest.param("kafkajs", "manual", marks=NEEDS_KAFKAJS),
]


def run_session(client, args, log_dir, name, timeout=90.0) -> list[dict]:
    proc = spawn(client, "session", args, log_dir, name)
    try:
        proc.proc.wait(timeout=timeout)
    except Exception:  # noqa: BLE001 - TimeoutExpired: reported below
        proc.kill9()
    proc.finish(timeout=5)
    evs = proc.snapshot()
    closed = [e for e in evs if e["ev"] == "closed"]
    assert proc.proc.returncode == 0 and closed, (
        f"{name} exited with {proc.proc.returncode} (closed={bool(closed)}); events "
        f"{[{k: v for k, v in e.items() if k != '_t'} for e in evs if e['ev'] != 'msg'][-10:]}; "
        f"stderr tail:\n{proc.stderr_tail(2500)}")
    return evs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("client,commit", VARIANTS)
def test_commit_stop_resume_across_broker_restarts(broker, topic, tmp_path, client, commit):
    """N numbered records on 3 partitions; four member sessions in one group, each processing
    some records, committing them and leaving. Each session must start exactly at the
    committed offsets: nothing skipped, nothing before them delivered again. Between the
    sessions: a plain consumer restart, a broker SIGTERM restart, a broker kill -9."""
    n_parts, n = 3, 60
    create_topic(broker.address, topic, n_parts)
    # Record i goes to partition i % 3 at offset i // 3.
    produce_to_partitions(broker.address, topic,
                          {p: [f"n-{i:04d}" for i in range(p, n, n_parts)] for p in range(n_parts)})
    group = new_group(topic)
    plan = [("first start", 20), ("consumer restart", 10), ("broker SIGTERM restart", 15),
            ("broker kill -9", 15)]
    start = {p: 0 for p in range(n_parts)}   # where the next session must begin
    ever_committed = {p: False for p in range(n_parts)}
    seen: list[tuple[int, int]] = []
    for step, (what, k) in enumerate(plan):
        if what == "broker SIGTERM restart":
            code = broker.stop()
            assert code == 0, f"tern exited with {code} on SIGTERM"
            broker.start()
        elif what == "broker kill -9":
            broker.kill9()
            broker.start()
        args = {"broker": broker.address, "topic": topic, "group": group, "commit": commit,
                "stop_after": k, "session_timeout_ms": SESSION_TIMEOUT_MS,
                "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS, "deadline_s": 45}
        evs = run_session(client, args, tmp_path / "sessions", f"{client}-{commit}-s{step}")
        ctx = f"session {step} (after {what}), {client} commit={commit}"
        errors = [e["error"] for e in evs if e["ev"] == "error" and str(e["error"]).startswith("deadline")]
        msgs = [(e["p"], e["o"], e["v"]) for e in evs if e["ev"] == "msg"]
        assert not errors and len(msgs) == k, f"{ctx}: processed {len(msgs)} of {k} records; {errors}"
        for p, o, v in msgs:
            assert v == f"n-{o * n_parts + p:04d}", f"{ctx}: partition {p} offset {o} holds {v!r}"
        for p in range(n_parts):
            offs = [o for pp, o, _ in msgs if pp == p]
            assert offs == list(range(start[p], start[p] + len(offs))), (
                f"{ctx}: partition {p} must resume at the committed offset {start[p]} and go on "
                f"without gaps; got offsets {offs}")
            if offs:
                start[p] += len(offs)
                ever_committed[p] = True
        seen += [(p, o) for p, o, _ in msgs]

        commits = [e for e in evs if e["ev"] == "commit"]
        if commit != "auto":
            assert len(commits) == 1 and commits[0]["error"] is None, f"{ctx}: commit failed: {commits}"
        (readback,) = [e["offsets"] for e in evs if e["ev"] == "committed"]
        for p in range(n_parts):
            got = readback.get(str(p))
            want = start[p] if ever_committed[p] else None
            # A partition with nothing processed yet may read back as "no offset" or 0.
            assert got == want or (want is None and got in (None, 0)), (
                f"{ctx}: committed offset of partition {p} read back (OffsetFetch) as {got}, "
                f"expected {want}; all: {readback}, expected {start}")

    assert sorted(seen) == [(p, o) for p in range(n_parts) for o in range(n // n_parts)], \
        "over all sessions every record must be processed exactly once"


# ---------------------------------------------------------------------------- 5. admin APIs

def start_members(client, broker, topic, group, tmp_path, count=2):
    args = {"broker": broker.address, "topic": topic, "group": group,
            "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "deadline_s": 120}
    members = [spawn(client, "member", args, tmp_path / "members", f"{client}-admin-m{i}") for i in range(count)]
    return members


@pytest.mark.timeout(180)
def test_admin_groups_confluent_kafka(broker, topic, tmp_path):
    """AdminClient: list_consumer_groups (with state filter), describe_consumer_groups,
    list_consumer_group_offsets, delete_consumer_groups (non-empty group: NON_EMPTY_GROUP)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    n_parts = 4
    create_topic(broker.address, topic, n_parts)
    produce_to_partitions(broker.address, topic, {p: [f"a-{p}-{i}" for i in range(p + 2)] for p in range(n_parts)})
    ends = {p: p + 2 for p in range(n_parts)}
    group = new_group(topic)
    admin = AdminClient({"bootstrap.servers": broker.address, "socket.timeout.ms": 10000})
    members = start_members("confluent-kafka", broker, topic, group, tmp_path)
    try:
        try:
            _, shares = wait_until(lambda: exact_cover(members, n_parts), timeout=60,
                                   what="2 members sharing 4 partitions")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None

        def listed(states=None):
            kw = {"states": states} if states is not None else {}
            res = admin.list_consumer_groups(request_timeout=10, **kw).result(timeout=15)
            assert not res.errors, [str(e) for e in res.errors]
            return {g.group_id: g for g in res.valid}

        groups = listed()
        assert group in groups, sorted(groups)
        assert groups[group].state == ConsumerGroupState.STABLE, groups[group].state
        assert groups[group].is_simple_consumer_group is False
        assert group in listed({ConsumerGroupState.STABLE})
        assert group not in listed({ConsumerGroupState.EMPTY}), "state filter Empty listed a Stable group"
        # ListGroups v5 type filter (KIP-848): a subscribe() group of this client is "classic".
        res = admin.list_consumer_groups(request_timeout=10, types={ConsumerGroupType.CLASSIC}).result(timeout=15)
        assert not res.errors and group in {g.group_id for g in res.valid}, (res.errors, [g.group_id for g in res.valid])
        res = admin.list_consumer_groups(request_timeout=10, types={ConsumerGroupType.CONSUMER}).result(timeout=15)
        assert not res.errors and group not in {g.group_id for g in res.valid}, "type filter consumer listed a classic group"

        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert d.group_id == group
        assert d.state == ConsumerGroupState.STABLE, d.state
        assert d.is_simple_consumer_group is False
        assert d.partition_assignor == "range", d.partition_assignor
        assert d.coordinator is not None and d.coordinator.id == 1, d.coordinator
        assert len(d.members) == 2, [m.member_id for m in d.members]
        described = sorted(sorted(tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic)
                           for m in d.members)
        assert described == sorted(sorted(s) for s in shares), (
            f"DescribeGroups assignments {described} differ from what the members were given {shares}")
        for m in d.members:
            assert m.member_id and m.client_id == "tern-compat-ck-worker", (m.member_id, m.client_id)
            assert m.host and "127.0.0.1" in m.host, m.host

        def committed():
            req = [ConsumerGroupTopicPartitions(group)]
            try:
                res = admin.list_consumer_group_offsets(req, request_timeout=10)[group].result(timeout=15)
            except KafkaException as e:  # Kafka answers an unknown group with no offsets, no error;
                if e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:  # tolerate GROUP_ID_NOT_FOUND too
                    return {}
                raise
            return {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic and tp.offset >= 0}

        # The members auto-commit every 500 ms: the offsets reach the log ends.
        try:
            wait_until(lambda: committed() == ends, timeout=30, interval=0.5, what=f"committed offsets {ends}")
        except AssertionError as e:
            raise AssertionError(f"{e}; last read {committed()}") from None
        # Asking for given partitions (OffsetFetch with a partition list), including one never committed.
        req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 1), TopicPartition(topic + "-none", 0)])]
        res = admin.list_consumer_group_offsets(req, request_timeout=10)[group].result(timeout=15)
        by_tp = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
        assert by_tp.get((topic, 1)) == ends[1], by_tp
        assert by_tp.get((topic + "-none", 0), -1001) < 0, by_tp

        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, ei.value

        for m in members:
            assert m.finish(timeout=20) == 0, m.stderr_tail()

        # Both left (LeaveGroup): Empty at once, offsets kept.
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert d.state == ConsumerGroupState.EMPTY and d.members == [], (d.state, d.members)
        assert listed()[group].state == ConsumerGroupState.EMPTY
        assert group in listed({ConsumerGroupState.EMPTY})
        assert group not in listed({ConsumerGroupState.STABLE})
        assert committed() == ends

        admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert group not in listed(), "deleted group still listed"
        assert committed() == {}, "a deleted group still has committed offsets"
        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert ei.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, ei.value
        # DescribeGroups of an unknown group: v0-5 state "Dead" with no error, v6+ GROUP_ID_NOT_FOUND (KIP-1043).
        try:
            d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
            assert d.state == ConsumerGroupState.DEAD and d.members == [], (d.state, d.members)
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, e
    finally:
        for m in members:
            m.finish(timeout=20)


def kp_assigned(member_assignment, topic) -> list[int]:
    """Partitions of `topic` in a kafka-python DescribeGroups member assignment (decoded
    ConsumerProtocolAssignment object, its dict form, or raw bytes)."""
    ma = member_assignment
    if isinstance(ma, (bytes, bytearray)):
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
        ma = ConsumerProtocolAssignment.decode(bytes(ma))
    if hasattr(ma, "partitions"):
        return sorted(tp.partition for tp in ma.partitions() if tp.topic == topic)
    out = []
    for t in ma.get("assigned_partitions", []):
        if isinstance(t, dict) and t.get("topic") == topic:
            out += t.get("partitions", [])
        elif isinstance(t, (list, tuple)) and t[0] == topic:
            out += list(t[1])
    return sorted(out)


@pytest.mark.timeout(180)
def test_admin_groups_kafka_python(broker, topic, tmp_path):
    """KafkaAdminClient: list_groups (states_filter), describe_groups, list_group_offsets,
    delete_group_offsets (OffsetDelete), delete_groups."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import (GroupIdNotFoundError, GroupSubscribedToTopicError, NoError)
    n_parts = 4
    create_topic(broker.address, topic, n_parts)
    produce_to_partitions(broker.address, topic, {p: [f"a-{p}-{i}" for i in range(p + 2)] for p in range(n_parts)})
    ends = {p: p + 2 for p in range(n_parts)}
    group = new_group(topic)
    admin = KafkaAdminClient(bootstrap_servers=broker.address, request_timeout_ms=10000)
    members = start_members("kafka-python", broker, topic, group, tmp_path)
    try:
        try:
            _, shares = wait_until(lambda: exact_cover(members, n_parts), timeout=60,
                                   what="2 members sharing 4 partitions")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{describe(members)}") from None

        def listed(states=None):
            return {g["group_id"]: g for g in admin.list_groups(states_filter=states)}

        groups = listed()
        assert group in groups, sorted(groups)
        assert groups[group].get("protocol_type") == "consumer", groups[group]
        assert groups[group].get("group_state") == "Stable", groups[group]
        assert group in listed(["Stable"])
        assert group not in listed(["Empty"])

        d = admin.describe_groups([group])[group]
        assert d["error"] is None, d
        assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer", d
        assert d["protocol_data"] in ("range", "roundrobin"), d["protocol_data"]
        assert len(d["members"]) == 2, d["members"]
        described = sorted(kp_assigned(m["member_assignment"], topic) for m in d["members"])
        assert described == sorted(sorted(s) for s in shares), (described, shares)

        def committed():
            offs = admin.list_group_offsets({group: None})[group]
            return {tp.partition: om.offset for tp, om in offs.items() if tp.topic == topic and om.offset >= 0}

        try:
            wait_until(lambda: committed() == ends, timeout=30, interval=0.5, what=f"committed offsets {ends}")
        except AssertionError as e:
            raise AssertionError(f"{e}; last read {committed()}") from None

        # OffsetDelete while the group is subscribed to the topic: GROUP_SUBSCRIBED_TO_TOPIC.
        res = admin.delete_group_offsets(group, [KTP(topic, 0)])
        assert res == {KTP(topic, 0): GroupSubscribedToTopicError}, res
        # DeleteGroups of a group with members: NON_EMPTY_GROUP.
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}

        for m in members:
            assert m.finish(timeout=20) == 0, m.stderr_tail()

        assert admin.describe_groups([group])[group]["group_state"] == "Empty"
        assert group in listed(["Empty"]) and group not in listed(["Stable"])
        res = admin.delete_group_offsets(group, [KTP(topic, 0)])
        assert res == {KTP(topic, 0): NoError}, res
        assert committed() == {p: o for p, o in ends.items() if p != 0}, "OffsetDelete of partition 0"

        assert admin.delete_groups([group]) == {group: "OK"}
        assert group not in listed()
        assert admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets(group, [KTP(topic, 1)])
    finally:
        for m in members:
            m.finish(timeout=20)
        admin.close()


# ---------------------------------------------------------------------------- internal topic

@pytest.mark.timeout(90)
def test_consumer_offsets_topic_is_internal(broker, topic):
    """After a commit, __consumer_offsets exists but is hidden from a full Metadata listing,
    visible (internal) when asked for by name, and producers cannot write to it."""
    produce_all(broker.address, topic, [{"value": b"x"}])
    c = new_consumer(broker.address)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset == 1, tp
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": broker.address, "socket.timeout.ms": 10000})
    all_topics = admin.list_topics(timeout=10).topics
    assert topic in all_topics and "__consumer_offsets" not in all_topics, sorted(all_topics)
    md = admin.list_topics("__consumer_offsets", timeout=10).topics.get("__consumer_offsets")
    assert md is not None and md.error is None and md.partitions, md and md.error
    reports = produce_all(broker.address, "__consumer_offsets", [{"value": b"garbage", "partition": 0}],
                          {"message.send.max.retries": 0, "message.timeout.ms": 10000})
    (_, err, _, _), = reports
    assert err is not None, "a producer wrote to __consumer_offsets"
    # Kafka: INVALID_TOPIC_EXCEPTION (17), "Cannot append to internal topic".
    assert err.code() == KafkaError.TOPIC_EXCEPTION, err


@pytest.mark.timeout(90)
def test_commit_metadata_and_leader_epoch_survive_restart(broker, topic):
    """OffsetCommit keeps the commit's metadata string and leader epoch; OffsetFetch returns
    them, also after a broker restart (replayed from __consumer_offsets)."""
    from confluent_kafka import Consumer
    produce_all(broker.address, topic, [{"value": b"%d" % i} for i in range(10)])
    group = new_group(topic)

    def consumer():
        return Consumer({"bootstrap.servers": broker.address, "group.id": group,
                         "enable.auto.commit": False, "socket.timeout.ms": 10000})

    c = consumer()
    try:
        (res,) = c.commit(offsets=[TopicPartition(topic, 0, 7, metadata="checkpoint-7", leader_epoch=0)],
                          asynchronous=False)
        assert res.error is None, res.error
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert (tp.offset, tp.metadata, tp.leader_epoch) == (7, "checkpoint-7", 0), tp
    finally:
        c.close()
    assert broker.stop() == 0
    broker.start()
    c = consumer()
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=15)
        assert (tp.offset, tp.metadata, tp.leader_epoch) == (7, "checkpoint-7", 0), tp
    finally:
        c.close()


@pytest.mark.timeout(90)
def test_consumer_offsets_records_use_kafka_format(broker, topic):
    """Tools that read __consumer_offsets directly (Burrow, kafka-console-consumer with
    OffsetsMessageFormatter, lag exporters) decode Kafka's record format: an offset commit is
    key = int16 version 0/1, string group, string topic, int32 partition; value = int16
    version, int64 offset, ... (OffsetCommitKey / OffsetCommitValue). Reading the internal
    topic by name is allowed in Kafka."""
    import struct

    from ck import consume_all
    produce_all(broker.address, topic, [{"value": b"x"}] * 5)
    group = new_group(topic)
    c = new_consumer(broker.address, {"group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        c.close()
    got, errors, _ = consume_all(broker.address, "__consumer_offsets", timeout=30)
    assert not errors, [str(e) for e in errors]
    assert got, "no records in __consumer_offsets after an offset commit"

    def kafka_offset_key(k: bytes):
        try:
            (version,) = struct.unpack_from(">h", k, 0)
            if version not in (0, 1):
                return None
            pos = 2
            fields = []
            for _ in range(2):
                (n,) = struct.unpack_from(">h", k, pos)
                fields.append(k[pos + 2:pos + 2 + n].decode())
                pos += 2 + n
            (partition,) = struct.unpack_from(">i", k, pos)
            return (*fields, partition) if pos + 4 == len(k) else None
        except (struct.error, UnicodeDecodeError):
            return None

    ours = [m for m in got if kafka_offset_key(m.key() or b"") == (group, topic, 0)]
    assert ours, ("no record with a Kafka OffsetCommitKey (int16 version, group, topic, partition) for "
                  f"{group}/{topic}/0; first keys: {[(m.key() or b'')[:80] for m in got[:3]]}")
    value = ours[-1].value()
    version, offset = struct.unpack_from(">hq", value, 0)
    assert 0 <= version <= 4 and offset == 3, (version, offset, value[:60])
