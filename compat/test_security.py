"""TLS, mTLS and SASL (PLAIN, SCRAM-SHA-256/512) with real clients: confluent-kafka,
kafka-python, kcat, aiokafka and kafkajs; ACLs; and users and ACLs across a cluster.

Most tests share one broker per module (`shared`) with four listeners: PLAINTEXT (the
loopback admin listener the users are created through, with `tern user add`), SASL_SSL,
SASL_PLAINTEXT and SSL with required client certificates; alice has a SCRAM-SHA-512 and a
SCRAM-SHA-256 credential (PLAIN checks the password against them). Tests that remove users,
restart the broker, rewrite its certificate or need the ACL authorizer get a broker of their
own (`secure`, `authorized`), started by the same helper. Certificates come from `openssl`
(a throwaway CA, a server certificate for 127.0.0.1/localhost, a client certificate for
alice).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tern_harness import GROUP_ARGS, Broker, free_port, tern_bin, wait_until

PASSWORD = "alice-secret"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(pki: Path, name: str, subject: str, san: str | None) -> None:
    """A key and a certificate for `name`, signed by the CA in `pki`."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-subj", subject,
            "-out", f"{name}.csr", cwd=pki)
    ext = pki / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", str(ext), cwd=pki)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make test certificates (Debian package openssl)")
    pki = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=tern-test-ca", cwd=pki)
    issue(pki, "server", "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    issue(pki, "alice", "/O=tern-test/OU=clients/CN=alice", None)
    return pki


class SecureBroker:
    def __init__(self, broker: Broker, ports: dict[str, int], pki: Path):
        self.broker = broker
        self.ports = ports
        self.pki = pki

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def add_user(self, name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        subprocess.run(
            [str(tern_bin()), "user", "add", name, "--mechanism", mechanism, "-b", self.address("PLAINTEXT")],
            input=password + "\n", text=True, check=True, capture_output=True, timeout=30,
        )


ALL_LISTENERS = ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT", "SSL")


def start_secure_broker(tmp: Path, pki: Path, listeners: tuple[str, ...], extra_args: list[str]) -> SecureBroker:
    """A broker with one listener of each protocol in `listeners` (PLAINTEXT first: the
    harness waits on it), the server certificate of `pki`, and `extra_args`."""
    ports = {name: free_port() for name in listeners}
    spec = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    broker = Broker(data_dir=tmp / "data", log_dir=tmp / "logs", port=ports["PLAINTEXT"], extra_args=[
        "--listeners", spec,
        "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
        *extra_args,
    ])
    broker.start()
    return SecureBroker(broker, ports, pki)


def mtls_args(pki: Path) -> list[str]:
    """Client certificates required on the SSL listener, the subject's CN as the user."""
    return ["--tls-client-ca", str(pki / "ca.pem"),
            "--ssl-principal-mapping-rules", "RULE:^CN=([^,]+),.*$/$1/,DEFAULT"]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory, pki):
    secure = start_secure_broker(tmp_path_factory.mktemp("shared"), pki, ALL_LISTENERS,
                                 [*mtls_args(pki), *GROUP_ARGS])
    try:
        secure.add_user("alice", PASSWORD, "SCRAM-SHA-512")
        secure.add_user("alice", PASSWORD, "SCRAM-SHA-256")
        yield secure
    finally:
        secure.broker.stop()


@pytest.fixture
def shared(shared_broker, request):
    """The module's broker; a failing test's report gets its log tail."""
    request.node._tern_broker = shared_broker.broker
    return shared_broker


@pytest.fixture
def secure(tmp_path, pki, request):
    """A broker of the test's own (its users are removed, it restarts, or its certificate
    is rewritten: in a private copy of the PKI)."""
    own_pki = Path(shutil.copytree(pki, tmp_path / "pki"))
    secure = start_secure_broker(tmp_path, own_pki, ALL_LISTENERS, mtls_args(own_pki))
    request.node._tern_broker = secure.broker
    try:
        yield secure
    finally:
        secure.broker.stop()


def confluent_config(secure: SecureBroker, listener: str, mechanism: str | None, password: str = PASSWORD) -> dict:
    config = {"bootstrap.servers": secure.address(listener), "security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        config["ssl.ca.location"] = str(secure.pki / "ca.pem")
    if mechanism:
        config.update({"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": password})
    return config


def confluent_round_trip(config: dict, topic: str, count: int = 20) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({**config, "acks": "all"})
    delivered = []
    for i in range(count):
        producer.produce(topic, value=f"m{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * count
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    return values


@pytest.mark.parametrize("listener,mechanism", [
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
])
def test_confluent_kafka_produces_and_consumes_over_sasl(shared, topic, listener, mechanism):
    values = confluent_round_trip(confluent_config(shared, listener, mechanism), topic)
    assert values == [f"m{i}".encode() for i in range(20)]


def test_metadata_on_a_listener_advertises_that_listener(shared, topic):
    from confluent_kafka.admin import AdminClient

    secure = shared
    admin = AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512"))
    brokers = admin.list_topics(timeout=20).brokers
    assert [b.port for b in brokers.values()] == [secure.ports["SASL_SSL"]]
    plain = AdminClient({"bootstrap.servers": secure.address("PLAINTEXT")})
    assert [b.port for b in plain.list_topics(timeout=20).brokers.values()] == [secure.ports["PLAINTEXT"]]


def test_a_wrong_password_fails_fast_and_cleanly(shared):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    secure = shared
    errors = []
    config = confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512", password="wrong")
    started = time.monotonic()
    admin = AdminClient({**config, "error_cb": errors.append})
    wait_until(lambda: admin.poll(0.2) is not None and errors, timeout=10, what="an authentication error callback")
    assert time.monotonic() - started < 5, "the failure should be reported within seconds"
    assert any("uthentication" in str(e) for e in errors), errors
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)
    # The broker is unharmed: the right password works at once.
    good = AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512"))
    good.list_topics(timeout=10)


def test_kafka_python_scram_sha_512_over_tls(shared, topic):
    from kafka import KafkaConsumer, KafkaProducer

    secure = shared
    common = dict(
        bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
        ssl_cafile=str(secure.pki / "ca.pem"), sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice", sasl_plain_password=PASSWORD,
    )
    producer = KafkaProducer(acks="all", **common)
    for i in range(10):
        producer.send(topic, f"k{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common)
    values = []
    for message in consumer:  # ends after 10 s without a record; stop at the 10th instead
        values.append(message.value)
        if len(values) == 10:
            break
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(10)]


def test_mutual_tls_maps_the_certificate_subject_and_refuses_clients_without_one(shared, topic):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    secure = shared

    config = confluent_config(secure, "SSL", None)
    with_cert = {**config, "ssl.certificate.location": str(secure.pki / "alice.pem"),
                 "ssl.key.location": str(secure.pki / "alice.key")}
    assert confluent_round_trip(with_cert, topic, count=5) == [f"m{i}".encode() for i in range(5)]
    errors = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)
    # The handshake was refused at the TLS layer, and counted.
    metrics = secure.broker.log_tail(20000)
    assert "TLS handshake failed" in metrics, metrics[-2000:]


def raw_request(address: str, frame_body: bytes, tls: ssl.SSLContext | None = None) -> bytes | None:
    """Sends one request frame and returns the response frame, or None if the broker
    closed the connection without answering."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="localhost")
    with sock:
        sock.sendall(struct.pack(">i", len(frame_body)) + frame_body)
        head = sock.recv(4)
        if len(head) < 4:
            return None
        (size,) = struct.unpack(">i", head)
        body = b""
        while len(body) < size:
            chunk = sock.recv(size - len(body))
            if not chunk:
                return None
            body += chunk
        return body


def metadata_v1_request(correlation_id: int = 7) -> bytes:
    client_id = b"raw"
    # Metadata v1, all topics (null array).
    return struct.pack(">hhih", 3, 1, correlation_id, len(client_id)) + client_id + struct.pack(">i", -1)


def test_nothing_but_apiversions_and_sasl_before_authentication(shared, topic):
    secure = shared
    tls = ssl.create_default_context(cafile=str(secure.pki / "ca.pem"))
    assert raw_request(secure.address("SASL_SSL"), metadata_v1_request(), tls) is None
    assert raw_request(secure.address("SASL_PLAINTEXT"), metadata_v1_request()) is None
    # ApiVersions v0 is answered.
    api_versions = struct.pack(">hhih", 18, 0, 9, 3) + b"raw"
    answer = raw_request(secure.address("SASL_PLAINTEXT"), api_versions)
    assert answer is not None and struct.unpack(">i", answer[:4])[0] == 9
    # The PLAINTEXT listener serves Metadata without authentication.
    assert raw_request(secure.address("PLAINTEXT"), metadata_v1_request()) is not None


def test_users_are_listed_without_secrets_and_removed(secure):
    secure.add_user("alice", PASSWORD, "SCRAM-SHA-512")
    secure.add_user("alice", PASSWORD, "SCRAM-SHA-256")
    listed = subprocess.run([str(tern_bin()), "user", "list", "--json", "-b", secure.address("PLAINTEXT")],
                            check=True, capture_output=True, text=True).stdout
    assert '"SCRAM-SHA-512"' in listed and '"SCRAM-SHA-256"' in listed and PASSWORD not in listed
    subprocess.run([str(tern_bin()), "user", "remove", "alice", "--mechanism", "SCRAM-SHA-512",
                    "-b", secure.address("PLAINTEXT")], check=True, capture_output=True)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    gone = AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512"))
    with pytest.raises(KafkaException):
        gone.list_topics(timeout=2)
    # The other mechanism's credential remains.
    AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-256")).list_topics(timeout=10)
    # The stored credential survives a restart (embedded store).
    secure.broker.restart()
    AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-256")).list_topics(timeout=10)


def test_a_renewed_certificate_is_served_without_a_restart(secure):
    def served_subject() -> str:
        tls = ssl.create_default_context(cafile=str(secure.pki / "ca.pem"))
        with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=5) as raw:
            with tls.wrap_socket(raw, server_hostname="localhost") as sock:
                cert = sock.getpeercert()
                return dict(x[0] for x in cert["subject"]).get("organizationName", "")

    assert served_subject() == ""
    issue(secure.pki, "renewed", "/O=renewed/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    shutil.copy(secure.pki / "renewed.key", secure.pki / "server.key")
    shutil.copy(secure.pki / "renewed.pem", secure.pki / "server.pem")
    wait_until(lambda: served_subject() == "renewed", timeout=15, what="the renewed certificate")


TLS_RELOAD_REFUSED = "TLS files changed but do not load; keeping the previous certificate"


def broker_log(broker: Broker) -> str:
    """The log of the broker's current run, whole."""
    return broker.log_paths[-1].read_text(errors="replace")


def metrics_of(broker: Broker) -> dict[str, float]:
    """The broker's /metrics samples (`name{labels}` -> value), at the address its start-up
    line names (the default port, or an ephemeral one when that is taken)."""
    import urllib.request

    address = re.search(r"metrics_addr=(\S+)", broker_log(broker)).group(1)
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    return {m.group(1): float(m.group(2)) for m in
            (re.match(r"^(tern_[a-z_]+(?:\{[^}]*\})?) (\S+)$", line) for line in text.splitlines()) if m}


def test_a_bad_certificate_renewal_keeps_the_old_certificate(secure):
    """Files that do not make a working pair (a certificate whose key is not server.key,
    garbage, a half-written PEM) leave the served certificate as it was: handshakes
    verify, SASL_SSL clients work, and the broker warns (log and tern_tls_reloads_total
    {result="error"}). A good pair written afterwards is served."""
    from confluent_kafka.admin import AdminClient

    pki = secure.pki
    secure.add_user("alice", PASSWORD)

    def served() -> dict:
        """The subject of the certificate a verified handshake on SASL_SSL gets."""
        tls = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=5) as raw:
            with tls.wrap_socket(raw, server_hostname="localhost") as sock:
                return dict(x[0] for x in sock.getpeercert()["subject"])

    original = served()
    assert original == {"commonName": "localhost"}, original
    original_pem = (pki / "server.pem").read_bytes()
    issue(pki, "stranger", "/O=stranger/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    issue(pki, "renewed", "/O=renewed/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    renewed_pem = (pki / "renewed.pem").read_bytes()
    bad_certificates = {
        # (what server.pem becomes, what the warning says about it)
        # A valid certificate from the same CA, but for another key than server.key.
        "mismatched key": ((pki / "stranger.pem").read_bytes(), "KeyMismatch"),
        "garbage": (b"this is not a PEM file\n", "server.pem: no certificate in PEM form"),
        # The renewal's certificate cut off in the middle of its base64.
        "half-written": (renewed_pem[: len(renewed_pem) // 2], "server.pem: missing section end marker"),
    }
    for what, (content, reason) in bad_certificates.items():
        seen = len(broker_log(secure.broker))
        # Swapped in whole (rename), so that the broker sees this content and no other.
        (pki / "server.pem.new").write_bytes(content)
        (pki / "server.pem.new").replace(pki / "server.pem")
        warning = wait_until(
            lambda: next((line for line in broker_log(secure.broker)[seen:].splitlines()
                          if TLS_RELOAD_REFUSED in line), None),
            timeout=15, what=f"the broker to refuse the {what} certificate")
        assert "WARN" in warning and reason in warning, warning
        assert served() == original, f"after the {what} renewal the old certificate must still be served"
        AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512")).list_topics(timeout=10)
    refused = metrics_of(secure.broker)['tern_tls_reloads_total{result="error"}']
    assert refused >= len(bad_certificates), refused
    assert metrics_of(secure.broker)['tern_tls_reloads_total{result="ok"}'] == 0
    assert (pki / "server.pem").read_bytes() != original_pem

    # A correct pair afterwards is picked up (the key first: in between, the new key
    # with the half-written certificate is refused too, and the old pair stays).
    shutil.copy(pki / "renewed.key", pki / "server.key")
    shutil.copy(pki / "renewed.pem", pki / "server.pem")
    wait_until(lambda: served().get("organizationName") == "renewed", timeout=15, what="the renewed certificate")
    assert "TLS certificate reloaded" in broker_log(secure.broker)
    assert metrics_of(secure.broker)['tern_tls_reloads_total{result="ok"}'] >= 1


@pytest.fixture
def authorized(tmp_path, pki, request):
    """A broker with the ACL authorizer: the loopback PLAINTEXT listener's
    `User:ANONYMOUS` is the super user that creates users and ACLs."""
    secure = start_secure_broker(tmp_path, pki, ("PLAINTEXT", "SASL_SSL"),
                                 ["--authorizer", "acl", "--super-users", "User:ANONYMOUS"])
    request.node._tern_broker = secure.broker
    try:
        yield secure
    finally:
        secure.broker.stop()


def tern_acl(secure: SecureBroker, *args: str) -> None:
    """`tern acl ARGS` through the super user's PLAINTEXT listener."""
    subprocess.run([str(tern_bin()), "acl", *args, "-b", secure.address("PLAINTEXT")],
                   check=True, capture_output=True, timeout=30)


def grant_alice_a_prefix(secure: SecureBroker, topic: str) -> tuple[str, str]:
    """The set-up of every client's ACL test: user alice (SCRAM-SHA-512; PLAIN checks the
    password against it), two one-partition topics created by the super user,
    `alice.<topic>` and `other.<topic>`, and one PREFIXED grant through `tern acl add`:
    alice may READ, WRITE and DESCRIBE the topics named `alice.*`, and nothing else (no
    group, no other topic). Returns (mine, other)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    secure.add_user("alice", PASSWORD)
    admin = AdminClient({"bootstrap.servers": secure.address("PLAINTEXT")})
    mine, other = f"alice.{topic}", f"other.{topic}"
    for f in admin.create_topics([NewTopic(mine, 1, 1), NewTopic(other, 1, 1)]).values():
        f.result(20)
    tern_acl(secure, "add", "--allow-principal", "User:alice", "--operation", "READ", "--operation", "WRITE",
             "--operation", "DESCRIBE", "--topic", "alice.", "--resource-pattern-type", "PREFIXED")
    return mine, other


def watermarks(secure: SecureBroker, topic: str) -> tuple[int, int]:
    """(low, high) of partition 0 of `topic`, read by the super user over PLAINTEXT."""
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": secure.address("PLAINTEXT"), "group.id": "probe"})
    try:
        return probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        probe.close()


def test_acls_grant_a_prefix_hide_other_topics_and_refuse_writes(authorized, topic):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    secure = authorized
    mine, other = grant_alice_a_prefix(secure, topic)
    admin = AdminClient({"bootstrap.servers": secure.address("PLAINTEXT")})
    listed = subprocess.run([str(tern_bin()), "acl", "list", "--json", "-b", secure.address("PLAINTEXT")],
                            check=True, capture_output=True, text=True, timeout=30).stdout
    acls = json.loads(listed)
    assert sorted(a["operation"] for a in acls) == ["DESCRIBE", "READ", "WRITE"], acls
    assert {(a["name"], a["pattern_type"], a["principal"]) for a in acls} == {("alice.", "PREFIXED", "User:alice")}
    config = confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512")
    alice_admin = AdminClient(config)
    visible = set(alice_admin.list_topics(timeout=20).topics)
    assert mine in visible and other not in visible, visible
    # Writes to the granted family succeed; to another topic they are refused.
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    outcomes = {}
    for name in (mine, other):
        producer.produce(name, value=b"x", on_delivery=lambda err, msg, n=name: outcomes.setdefault(n, err))
    producer.flush(20)
    assert outcomes[mine] is None
    assert outcomes[other] is not None and outcomes[other].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcomes
    # Nothing was appended to the refused topic.
    assert watermarks(secure, other) == (0, 0)
    # A deny beats the allow, and takes effect without a restart.
    deny = AclBinding(ResourceType.TOPIC, mine, ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    for f in admin.create_acls([deny]).values():
        f.result(20)
    denied = {}
    producer.produce(mine, value=b"y", on_delivery=lambda err, msg: denied.setdefault("err", err))
    producer.flush(20)
    assert denied["err"] is not None and denied["err"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
    # Revoking it with `tern acl remove` (DeleteAcls) restores the write.
    tern_acl(secure, "remove", "--deny-principal", "User:alice", "--operation", "WRITE", "--topic", mine)
    # (a new producer: librdkafka remembers the topic's authorization error)
    restored = {}
    fresh = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    fresh.produce(mine, value=b"z", on_delivery=lambda err, msg: restored.setdefault("err", err))
    fresh.flush(20)
    assert restored["err"] is None, restored


def test_kafka_python_under_acls_is_refused_what_it_was_not_granted(authorized, topic):
    """kafka-python over SASL_SSL: a write without WRITE raises TopicAuthorizationFailed
    and appends nothing, a topic without DESCRIBE is not listed, a group without READ
    cannot be joined."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    secure = authorized
    mine, other = grant_alice_a_prefix(secure, topic)
    common = dict(
        bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
        ssl_cafile=str(secure.pki / "ca.pem"), sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice", sasl_plain_password=PASSWORD,
    )
    producer = KafkaProducer(acks="all", max_block_ms=10000, **common)
    producer.send(mine, b"granted").get(timeout=30)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send(other, b"refused").get(timeout=30)
    producer.close()
    assert watermarks(secure, other) == (0, 0)
    consumer = KafkaConsumer(group_id=f"no-read-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, **common)
    assert mine in consumer.topics() and other not in consumer.topics()
    consumer.subscribe([mine])
    with pytest.raises(GroupAuthorizationFailedError):
        for _ in range(20):
            consumer.poll(timeout_ms=500)
    consumer.close()


# ---- SaslHandshake v0: bare tokens -------------------------------------------------------

class RawConnection:
    """One TCP connection speaking size-prefixed frames (requests, or bare SASL tokens)."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def send(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def receive(self) -> bytes | None:
        """The next frame, or None if the broker closed the connection."""
        data = b""
        while len(data) < 4:
            chunk = self.sock.recv(4 - len(data))
            if not chunk:
                return None
            data += chunk
        (size,) = struct.unpack(">i", data)
        body = b""
        while len(body) < size:
            chunk = self.sock.recv(size - len(body))
            if not chunk:
                return None
            body += chunk
        return body

    def close(self) -> None:
        self.sock.close()


def sasl_handshake_v0(mechanism: str, correlation_id: int = 1) -> bytes:
    name = mechanism.encode()
    return struct.pack(">hhih", 17, 0, correlation_id, 3) + b"raw" + struct.pack(">h", len(name)) + name


@pytest.mark.parametrize("password,accepted", [(PASSWORD, True), ("wrong", False)])
def test_a_v0_handshake_exchanges_bare_tokens_as_kafka_does(shared, password, accepted):
    """SaslHandshake v0 (what librdkafka 2.0's feature check needs advertised): the token
    then travels without a request header and comes back the same way (PLAIN's answer is
    empty); a wrong password is not answered, the connection closes."""
    conn = RawConnection(shared.address("SASL_PLAINTEXT"))
    try:
        conn.send(sasl_handshake_v0("PLAIN"))
        answer = conn.receive()
        assert answer is not None
        correlation_id, error_code, count = struct.unpack(">ihi", answer[:10])
        assert (correlation_id, error_code) == (1, 0)
        assert count == 3 and b"SCRAM-SHA-512" in answer, answer
        conn.send(b"\0alice\0" + password.encode())
        token = conn.receive()
        if not accepted:
            assert token is None, token
            return
        assert token == b"", token
        # Requests, not tokens, follow: Metadata is served on the same connection.
        conn.send(metadata_v1_request(correlation_id=5))
        metadata = conn.receive()
        assert metadata is not None and struct.unpack(">i", metadata[:4])[0] == 5
    finally:
        conn.close()


# ---- kcat (Debian's, librdkafka 2.0.2) -----------------------------------------------------

KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")


def kcat_security(secure: SecureBroker, listener: str, mechanism: str | None) -> list[str]:
    args = ["-b", secure.address(listener), "-X", f"security.protocol={listener}",
            "-X", f"ssl.ca.location={secure.pki / 'ca.pem'}",
            "-X", "socket.timeout.ms=10000", "-X", "message.timeout.ms=15000"]
    if mechanism:
        args += ["-X", f"sasl.mechanisms={mechanism}", "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}"]
    else:
        args += ["-X", f"ssl.certificate.location={secure.pki / 'alice.pem'}",
                 "-X", f"ssl.key.location={secure.pki / 'alice.key'}"]
    return args


def kcat_librdkafka_version() -> tuple[int, ...]:
    """The librdkafka kcat is built with (`kcat -V`: "... librdkafka 2.0.2 builtin...")."""
    out = subprocess.run([KCAT, "-V"], capture_output=True, text=True, timeout=10).stdout
    version = out.split("librdkafka ", 1)[1].split()[0]
    return tuple(int(part) for part in version.split("."))


@needs_kcat
@pytest.mark.parametrize("listener,mechanism", [
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "PLAIN"),
    ("SSL", None),  # mTLS: alice's certificate
])
def test_kcat_produces_and_consumes(shared, topic, listener, mechanism):
    security = kcat_security(shared, listener, mechanism)
    lines = [f"kcat {listener} {mechanism} {i}" for i in range(10)]
    produced = subprocess.run([KCAT, *security, "-P", "-t", topic, "-k", "alice"],
                              input=("\n".join(lines) + "\n").encode(), capture_output=True, timeout=40)
    err = produced.stderr.decode(errors="replace")
    if mechanism and mechanism.startswith("SCRAM") and kcat_librdkafka_version() < (2, 6, 1):
        # librdkafka before 2.6.1 repeats its own nonce in the client-final message
        # (confluentinc/librdkafka#4895); Kafka 4 compares the nonce exactly (RFC 5802) and
        # refuses it, and so does tern: a clean authentication failure, not a hang.
        assert produced.returncode != 0 and "Authentication failed" in err, err[-3000:]
        assert "SCRAM nonce in the final message is not the one the server sent" in shared.broker.log_tail(20000)
        return
    assert produced.returncode == 0 and "ERROR" not in err and "FAIL" not in err, err[-3000:]
    consumed = subprocess.run([KCAT, *security, "-C", "-t", topic, "-o", "beginning", "-e", "-J"],
                              capture_output=True, timeout=40)
    err = consumed.stderr.decode(errors="replace")
    assert consumed.returncode == 0 and "ERROR" not in err, err[-3000:]
    records = [json.loads(line) for line in consumed.stdout.decode().splitlines() if line.strip()]
    assert [(r["offset"], r["key"], r["payload"]) for r in records] == \
        [(i, "alice", line) for i, line in enumerate(lines)], records[:3]


@needs_kcat
def test_kcat_under_acls_is_refused_what_it_was_not_granted(authorized, topic):
    """kcat over SASL_SSL with PLAIN (its librdkafka's SCRAM is refused, see above): `-P`
    to a topic without WRITE fails naming the authorization failure and appends nothing,
    `-L` does not list a topic without DESCRIBE, and a `-G` member reports the group
    authorization failure: of JoinGroup in a group it may only DESCRIBE, of
    FindCoordinator in a group it has no ACL for."""
    secure = authorized
    mine, other = grant_alice_a_prefix(secure, topic)
    security = kcat_security(secure, "SASL_SSL", "PLAIN")

    def kcat(*args: str, stdin: bytes = b"", timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run([KCAT, *security, *args], input=stdin, capture_output=True, timeout=timeout)

    granted = kcat("-P", "-t", mine, stdin=b"granted\n")
    assert granted.returncode == 0, granted.stderr.decode(errors="replace")[-3000:]
    refused = kcat("-P", "-t", other, stdin=b"refused\n")
    err = refused.stderr.decode(errors="replace")
    assert refused.returncode != 0 and "Topic authorization failed" in err, (refused.returncode, err[-3000:])
    assert watermarks(secure, mine) == (0, 1) and watermarks(secure, other) == (0, 0)
    listed = kcat("-L", "-J")
    assert listed.returncode == 0, listed.stderr.decode(errors="replace")[-3000:]
    names = {t["topic"] for t in json.loads(listed.stdout)["topics"]}
    assert mine in names and other not in names, names

    def member_errors(group: str) -> str:
        """A balanced consumer runs until stopped: it is given a few seconds to report."""
        member = subprocess.Popen([KCAT, *security, "-G", group, mine], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = member.communicate(timeout=6)
        except subprocess.TimeoutExpired:
            member.terminate()
            _, err = member.communicate(timeout=10)
        return err.decode(errors="replace")

    # A group it may only DESCRIBE: FindCoordinator is answered, JoinGroup refused.
    describe_only = f"describe-only-{topic}"
    tern_acl(secure, "add", "--allow-principal", "User:alice", "--operation", "DESCRIBE", "--group", describe_only)
    err = member_errors(describe_only)
    assert "JoinGroup failed: Broker: Group authorization failed" in err, err[-3000:]
    # A group without any ACL: FindCoordinator is refused already (librdkafka prints the
    # response's ErrorMessage, Kafka's text for the code, as tern sends it).
    err = member_errors(f"no-acl-{topic}")
    assert "FindCoordinator response error: Group authorization failed" in err, err[-3000:]


# ---- aiokafka ------------------------------------------------------------------------------

def aiokafka_config(secure: SecureBroker, mechanism: str) -> dict:
    from aiokafka.helpers import create_ssl_context

    return dict(bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
                ssl_context=create_ssl_context(cafile=str(secure.pki / "ca.pem")),
                sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password=PASSWORD)


async def aiokafka_round_trip(secure: SecureBroker, mechanism: str, topic: str, count: int) -> tuple[list, dict]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    common = aiokafka_config(secure, mechanism)
    producer = AIOKafkaProducer(acks="all", **common)
    await producer.start()
    try:
        offsets = [(await producer.send_and_wait(topic, f"aio{i}".encode(), key=b"k")).offset for i in range(count)]
    finally:
        await producer.stop()
    assert offsets == list(range(count)), offsets
    consumer = AIOKafkaConsumer(topic, group_id=f"aio-{topic}", auto_offset_reset="earliest",
                                enable_auto_commit=False, **common)
    await consumer.start()
    try:
        values = []
        deadline = time.monotonic() + 20
        while len(values) < count and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                values += [m.value for m in messages]
        await consumer.commit()
        committed = {"offset": await consumer.committed(TopicPartition(topic, 0))}
    finally:
        await consumer.stop()
    return values, committed


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka_produces_and_consumes_in_a_group_over_sasl_ssl(shared, topic, mechanism):
    count = 10
    values, committed = asyncio.run(asyncio.wait_for(aiokafka_round_trip(shared, mechanism, topic, count), 45))
    assert values == [f"aio{i}".encode() for i in range(count)]
    assert committed == {"offset": count}, "the group's commit (OffsetCommit over SASL_SSL) is read back"


async def aiokafka_under_acls(secure: SecureBroker, mine: str, other: str, group: str) -> dict:
    """What alice's aiokafka clients see under `grant_alice_a_prefix` plus DESCRIBE (not
    READ) on `group`: the pytest.raises below are the refusals."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    common = aiokafka_config(secure, "SCRAM-SHA-512")
    seen = {}
    producer = AIOKafkaProducer(acks="all", request_timeout_ms=10000, **common)
    await producer.start()
    try:
        seen["granted offset"] = (await producer.send_and_wait(mine, b"granted")).offset
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(other, b"refused")
        seen["producer metadata"] = (await producer.client.fetch_all_metadata()).topics()
    finally:
        await producer.stop()
    # A group member: FindCoordinator is allowed (DESCRIBE), JoinGroup is not (READ).
    member = AIOKafkaConsumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **common)
    await member.start()
    try:
        seen["consumer topics"] = await member.topics()
        member.subscribe([mine])
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                await member.getmany(timeout_ms=500)
    finally:
        await member.stop()
    # Without joining (assigned partitions), OffsetCommit is refused too (READ).
    committer = AIOKafkaConsumer(group_id=group, enable_auto_commit=False, **common)
    await committer.start()
    try:
        committer.assign([TopicPartition(mine, 0)])
        with pytest.raises(GroupAuthorizationFailedError):
            await committer.commit({TopicPartition(mine, 0): 1})
    finally:
        await committer.stop()
    return seen


def test_aiokafka_under_acls_is_refused_what_it_was_not_granted(authorized, topic):
    """aiokafka over SASL_SSL: a send without WRITE raises TopicAuthorizationFailedError
    and appends nothing, a topic without DESCRIBE is missing from its metadata, and in a
    group it may only DESCRIBE, JoinGroup and OffsetCommit are refused."""
    secure = authorized
    mine, other = grant_alice_a_prefix(secure, topic)
    group = f"describe-only-{topic}"
    tern_acl(secure, "add", "--allow-principal", "User:alice", "--operation", "DESCRIBE", "--group", group)
    seen = asyncio.run(asyncio.wait_for(aiokafka_under_acls(secure, mine, other, group), 45))
    assert seen["granted offset"] == 0
    assert watermarks(secure, mine) == (0, 1) and watermarks(secure, other) == (0, 0)
    for listing in ("producer metadata", "consumer topics"):
        assert mine in seen[listing] and other not in seen[listing], (listing, seen[listing])


# ---- kafkajs -------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["scram-sha-256", "scram-sha-512", "plain"])
def test_kafkajs_produces_and_consumes_over_sasl_ssl(shared, topic, mechanism):
    import test_kafkajs as kafkajs

    if kafkajs.NODE is None or not (kafkajs.HERE / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or compat/kafkajs/node_modules missing (scripts/install-test-deps.sh)")
    count = 20
    out = kafkajs.run("produce", {
        "broker": shared.address("SASL_SSL"), "topic": topic, "compression": "none", "idempotent": False,
        "count": count, "caFile": str(shared.pki / "ca.pem"),
        "sasl": {"mechanism": mechanism, "username": "alice", "password": PASSWORD},
    })
    kafkajs.check_roundtrip(out, count)


def test_kafkajs_under_acls_is_refused_what_it_was_not_granted(authorized, topic):
    """kafkajs over SASL_SSL (run.js acl-probe): a send without WRITE fails with a
    KafkaJSProtocolError of type TOPIC_AUTHORIZATION_FAILED and appends nothing, a topic
    without DESCRIBE is not listed (and its metadata is refused), and a member of a group
    may only DESCRIBE crashes with GROUP_AUTHORIZATION_FAILED (JoinGroup) instead of joining.
    In a group it has no ACL for at all, kafkajs swallows FindCoordinator's
    GROUP_AUTHORIZATION_FAILED (BrokerPool.withBroker tries the next broker, then throws
    KafkaJSGroupCoordinatorNotFound): only its log shows the refusal."""
    import test_kafkajs as kafkajs

    if kafkajs.NODE is None or not (kafkajs.HERE / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or compat/kafkajs/node_modules missing (scripts/install-test-deps.sh)")
    secure = authorized
    mine, other = grant_alice_a_prefix(secure, topic)
    no_acl, describe_only = f"no-acl-{topic}", f"describe-only-{topic}"
    tern_acl(secure, "add", "--allow-principal", "User:alice", "--operation", "DESCRIBE", "--group", describe_only)
    out = kafkajs.run("acl-probe", {
        "broker": secure.address("SASL_SSL"), "granted": mine, "other": other, "groups": [no_acl, describe_only],
        "caFile": str(secure.pki / "ca.pem"),
        "sasl": {"mechanism": "scram-sha-512", "username": "alice", "password": PASSWORD},
    })
    assert out["granted"] == {"ok": True}, out
    assert out["other"]["ok"] is False and out["other"]["error"]["type"] == "TOPIC_AUTHORIZATION_FAILED", out["other"]
    assert any(c["name"] == "KafkaJSProtocolError" for c in out["other"]["error"]["chain"]), out["other"]
    assert watermarks(secure, mine) == (0, 1) and watermarks(secure, other) == (0, 0)
    assert mine in out["listTopics"] and other not in out["listTopics"], out["listTopics"]
    assert out["otherMetadata"]["ok"] is False, out["otherMetadata"]
    assert out["otherMetadata"]["error"]["type"] == "TOPIC_AUTHORIZATION_FAILED", out["otherMetadata"]
    refused = out["members"][describe_only]
    assert "joined" not in refused and refused["error"]["type"] == "GROUP_AUTHORIZATION_FAILED", refused
    hidden = out["members"][no_acl]
    assert "joined" not in hidden and hidden["error"]["name"] == "KafkaJSGroupCoordinatorNotFound", hidden
    assert any("GroupCoordinator(key: 10" in e["message"] and "Group authorization failed" in (e["error"] or "")
               for e in hidden["loggedErrors"]), hidden["loggedErrors"]


# ---- re-authentication (KIP-368) -----------------------------------------------------------

REAUTH_MS = 3000
AUTH_SUCCEEDED = re.compile(r'^(\S+) +DEBUG request\{[^}]*correlation_id=(\d+) client_id="([^"]*)" peer=([^}\s]+)\}'
                            r'.*SASL authentication succeeded peer=\S+ user="[^"]+" mechanism="[A-Z0-9-]+"$', re.M)
AUTH_FAILED = re.compile(r'client_id="([^"]*)" peer=([^}\s]+)\}.*SASL authentication failed')


@pytest.fixture
def reauth(tmp_path, pki, request, monkeypatch):
    """A broker whose SASL sessions last REAUTH_MS (--connections-max-reauth-ms), logging
    each successful SASL authentication (debug) with its connection's peer address; alice
    has both SCRAM credentials, bob a SCRAM-SHA-512 one."""
    monkeypatch.setenv("RUST_LOG", "info,object_store=warn,tern::api::security::sasl_authenticate=debug")
    secure = start_secure_broker(tmp_path, pki, ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT"),
                                 ["--connections-max-reauth-ms", str(REAUTH_MS), *GROUP_ARGS])
    request.node._tern_broker = secure.broker
    try:
        secure.add_user("alice", PASSWORD, "SCRAM-SHA-512")
        secure.add_user("alice", PASSWORD, "SCRAM-SHA-256")
        secure.add_user("bob", "bob-secret", "SCRAM-SHA-512")
        yield secure
    finally:
        secure.broker.stop()


def authentications(secure: SecureBroker) -> dict[tuple[str, str], list[tuple[float, int]]]:
    """(client_id, peer) -> (when, correlation id) of each SaslAuthenticate request that
    completed an authentication on that connection, in order (from the broker's log)."""
    from datetime import datetime

    found: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for m in AUTH_SUCCEEDED.finditer(broker_log(secure.broker)):
        when = datetime.fromisoformat(m.group(1)).timestamp()
        found.setdefault((m.group(3), m.group(4)), []).append((when, int(m.group(2))))
    return found


def longest_session(secure: SecureBroker, client_id: str) -> list[tuple[float, int]]:
    """The authentications of the connection of `client_id` that authenticated most often."""
    return max((auths for (client, _), auths in authentications(secure).items() if client == client_id),
               key=len, default=[])


def check_reauthenticated(secure: SecureBroker, client_id: str, times: int = 3) -> None:
    """One connection of `client_id` authenticated, then re-authenticated at least `times`
    times, the first `times` each before the previous session ran out, and so stayed
    authenticated well past the end of its first session (without re-authenticating, its
    next request there would have closed it). Correlation ids grow: one connection's
    requests, in order."""
    auths = longest_session(secure, client_id)
    assert len(auths) >= times + 1, (client_id, auths)
    ids = [i for _, i in auths]
    assert ids == sorted(set(ids)), (client_id, auths)
    first = auths[:times + 1]
    gaps = [b - a for (a, _), (b, _) in zip(first, first[1:])]
    assert all(gap < REAUTH_MS / 1000 for gap in gaps), (client_id, gaps)
    assert first[-1][0] - first[0][0] >= 1.5 * REAUTH_MS / 1000, (client_id, first)


@pytest.mark.timeout(120)
def test_scram_clients_reauthenticate_on_their_connection_and_keep_working(reauth, topic):
    """librdkafka (2.2+ implements KIP-368) re-authenticates before the session the broker
    granted runs out: a producer (SCRAM-SHA-512) and a group consumer (SCRAM-SHA-256) on
    SASL_SSL work through several sessions, each of their connections authenticating again
    and again (the broker logs it with the connection's address; correlation ids grow: the
    same connection), and librdkafka never reconnects."""
    from confluent_kafka import Consumer, Producer

    secure = reauth
    stats = []
    producer = Producer({**confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512"), "client.id": "reauth-producer",
                         "acks": "all", "linger.ms": 0, "statistics.interval.ms": 200,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    consumer = Consumer({**confluent_config(secure, "SASL_SSL", "SCRAM-SHA-256"), "client.id": "reauth-consumer",
                         "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    delivered, received, sent = [], [], []

    def consume() -> None:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            received.append(msg.value())

    def reauthenticated_enough() -> bool:
        """One produce and consume step; then: has each client's busiest connection
        authenticated four times (three re-authentications)?"""
        sent.append(f"r{len(sent)}".encode())
        producer.produce(topic, value=sent[-1], on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        producer.poll(0)
        consume()
        return all(len(longest_session(secure, c)) >= 4 for c in ("reauth-producer", "reauth-consumer"))

    try:
        wait_until(reauthenticated_enough, timeout=60, interval=0.1, what="three re-authentications of each client")
        assert producer.flush(20) == 0
        wait_until(lambda: consume() or len(received) >= len(sent), timeout=30,
                   what="the consumer to read everything")
        producer.poll(0.5)  # a last statistics report
    finally:
        consumer.close()
    count = len(sent)
    assert [err for err, _ in delivered if err is not None] == [], delivered
    assert [offset for _, offset in delivered] == list(range(count))
    assert received == sent
    for client in ("reauth-producer", "reauth-consumer"):
        check_reauthenticated(secure, client)
    assert metrics_of(secure.broker)['tern_sasl_authentications_total{mechanism="SCRAM-SHA-512"}'] >= 4
    assert metrics_of(secure.broker)['tern_sasl_authentications_total{mechanism="SCRAM-SHA-256"}'] >= 4
    # librdkafka's own count: one connection to the broker, never dropped.
    leader = [b for b in stats[-1]["brokers"].values() if b["nodeid"] == 1]
    assert [(b["connects"], b["disconnects"]) for b in leader] == [(1, 0)], leader
    assert "expired without re-authentication" not in broker_log(secure.broker)


@pytest.mark.timeout(90)
def test_a_removed_user_is_refused_at_its_next_reauthentication(reauth, topic):
    """bob's producer is connected when his credential is removed: it keeps its session
    until it runs out, then its re-authentication on the same connection is refused
    (SASL_AUTHENTICATION_FAILED, the connection closed), librdkafka reports an
    authentication error, and what it produces afterwards is not written."""
    from confluent_kafka import KafkaError, Producer

    secure = reauth
    errors = []
    config = {**confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512"), "sasl.username": "bob",
              "sasl.password": "bob-secret", "client.id": "doomed", "acks": "all",
              "message.timeout.ms": 5000, "error_cb": errors.append}
    producer = Producer(config)
    outcome = []
    producer.produce(topic, value=b"before", on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(20) == 0 and outcome == [None], outcome
    # Once re-authenticated already: the connection that will be refused is a long-lived one.
    wait_until(lambda: producer.poll(0.1) >= 0 and len(longest_session(secure, "doomed")) >= 2,
               timeout=15, what="bob's producer to re-authenticate once")
    session = next(peer for (client, peer), ids in authentications(secure).items()
                   if client == "doomed" and len(ids) >= 2)

    tern_cli("user", "remove", "bob", "--mechanism", "SCRAM-SHA-512", "-b", secure.address("PLAINTEXT"))
    removed = time.monotonic()
    wait_until(lambda: producer.poll(0.1) >= 0 and any(
        e.code() == KafkaError._AUTHENTICATION for e in errors), timeout=15,
        what="librdkafka to report an authentication error")
    took = time.monotonic() - removed
    refused_peers = [m.group(2) for m in AUTH_FAILED.finditer(broker_log(secure.broker)) if m.group(1) == "doomed"]
    assert session in refused_peers, (session, refused_peers, broker_log(secure.broker)[-3000:])
    assert f"closing connection peer={session} " in broker_log(secure.broker), broker_log(secure.broker)[-3000:]
    assert took < REAUTH_MS / 1000 + 5, f"refused {took:.1f}s after the removal"
    assert any("uthentication" in e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION), errors
    failures = metrics_of(secure.broker)['tern_authentication_failures_total{listener="SASL_SSL",reason="credentials"}']
    assert failures >= 1, failures

    after = []
    producer.produce(topic, value=b"after", on_delivery=lambda err, msg: after.append(err))
    producer.flush(15)
    assert len(after) == 1 and after[0] is not None, after
    assert watermarks(secure, topic) == (0, 1), "nothing is written after the refusal"


KAFKAJS_REAUTH_SCRIPT = r"""
// A kafkajs producer and group consumer (two clients, client ids kafkajs-producer and
// kafkajs-consumer) over SASL_SSL: a message every 200 ms until stdin closes. One JSON
// line per event on stdout: sent (offset), msg (value), error; exit at the end.
'use strict'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')
const ARGS = JSON.parse(process.argv[2])
const out = ev => process.stdout.write(JSON.stringify(ev) + '\n')
const mechanisms = { 'kafkajs-producer': 'scram-sha-512', 'kafkajs-consumer': 'scram-sha-256' }
const client = clientId => new Kafka({
  clientId, brokers: [ARGS.broker], logLevel: logLevel.WARN,
  ssl: { ca: [fs.readFileSync(ARGS.caFile)] },
  sasl: { mechanism: mechanisms[clientId], username: 'alice', password: ARGS.password },
  // Re-authenticate once less than this is left of the session (kafkajs's default,
  // 10 s, is more than the whole session here: it would re-authenticate before every
  // request).
  reauthenticationThreshold: ARGS.threshold,
})
async function main() {
  const producer = client('kafkajs-producer').producer()
  const consumer = client('kafkajs-consumer').consumer({ groupId: ARGS.group })
  await producer.connect()
  await consumer.connect()
  await consumer.subscribe({ topic: ARGS.topic, fromBeginning: true })
  let received = 0
  await consumer.run({
    eachMessage: async ({ message }) => {
      received++
      out({ ev: 'msg', value: message.value.toString() })
    },
  })
  let n = 0
  let acknowledged = 0
  let stopping = false
  const timer = setInterval(async () => {
    const value = `j${n++}`
    try {
      const [meta] = await producer.send({ topic: ARGS.topic, acks: -1, messages: [{ value }] })
      out({ ev: 'sent', value, offset: Number(meta.baseOffset), error: meta.errorCode })
    } catch (e) {
      out({ ev: 'error', value, name: e.name, message: e.message })
    }
    acknowledged++
  }, 200)
  process.stdin.on('end', async () => {
    if (stopping) return
    stopping = true
    clearInterval(timer)
    // The last sends' acknowledgements, and the consumer's reading of them (10 s at most).
    const deadline = Date.now() + 10000
    while ((acknowledged < n || received < acknowledged) && Date.now() < deadline) {
      await new Promise(r => setTimeout(r, 50))
    }
    await producer.disconnect()
    await consumer.disconnect()
    out({ ev: 'exit' })
    process.exit(0)
  })
  process.stdin.resume()
}
main().catch(e => { out({ ev: 'error', name: e.name, message: e.message }); process.exit(1) })
"""


@pytest.mark.timeout(120)
def test_kafkajs_reauthenticates_on_its_connections_and_keeps_working(reauth, topic, tmp_path):
    """kafkajs 2.x re-authenticates lazily, before the first request it sends once the
    session is nearly over (reauthenticationThreshold): a producer (SCRAM-SHA-512) and a
    group consumer (SCRAM-SHA-256) keep working through several sessions, their
    connections authenticating again and again (growing correlation ids on one peer
    address), and no session runs out on the broker."""
    import os

    import test_kafkajs as kafkajs
    from tern_harness import JsonLinesProcess

    if kafkajs.NODE is None or not (kafkajs.HERE / "node_modules" / "kafkajs").is_dir():
        pytest.skip("node or compat/kafkajs/node_modules missing (scripts/install-test-deps.sh)")
    secure = reauth
    script = tmp_path / "reauth.js"
    script.write_text(KAFKAJS_REAUTH_SCRIPT)
    args = {"broker": secure.address("SASL_SSL"), "caFile": str(secure.pki / "ca.pem"), "topic": topic,
            "group": f"g-{topic}", "threshold": 1000,
            "password": PASSWORD}
    env = {**os.environ, "NODE_PATH": str(kafkajs.HERE / "node_modules"), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    clients = JsonLinesProcess([kafkajs.NODE, script, json.dumps(args)], tmp_path / "reauth.stderr", env=env,
                               name="kafkajs-reauth")
    try:
        wait_until(lambda: all(len(longest_session(secure, c)) >= 4 for c in ("kafkajs-producer", "kafkajs-consumer")),
                   timeout=60, what=f"three re-authentications of each kafkajs client ({clients.stderr_tail()})")
        assert clients.finish(timeout=20) == 0, clients.stderr_tail()
    finally:
        clients.kill9()
    assert clients.snapshot("error") == [], clients.snapshot("error")
    sent = clients.snapshot("sent")
    assert len(sent) >= 20 and [e["offset"] for e in sent] == list(range(len(sent))), sent
    assert {e["error"] for e in sent} == {0}, sent
    received = [e["value"] for e in clients.snapshot("msg")]
    assert received == [e["value"] for e in sent], (received, sent)
    for client in ("kafkajs-producer", "kafkajs-consumer"):
        check_reauthenticated(secure, client)
    assert "expired without re-authentication" not in broker_log(secure.broker)


def scram_client_messages(password: str, server_first_of) -> tuple[bytes, bytes]:
    """A SCRAM-SHA-256 exchange for alice (RFC 5802): sends client-first through
    `server_first_of` (which returns the server-first) and returns (client-final, the
    expected server-final)."""
    import base64
    import hashlib
    import hmac
    import os

    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = f"n=alice,r={nonce}"
    server_first = server_first_of(f"n,,{first_bare}".encode()).decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    assert attrs["r"].startswith(nonce), server_first
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, hashlib.sha256).digest()
    proof = bytes(k ^ s for k, s in zip(client_key, signature))
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    verifier = base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest())
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), b"v=" + verifier


class RawSaslClient(RawConnection):
    """SaslHandshake v1 and SaslAuthenticate v1 by hand, to see the session lifetime and to
    decide when (or whether) to re-authenticate."""

    def __init__(self, address: str):
        super().__init__(address)
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: bytes) -> bytes | None:
        """Sends a request; returns its response body (after the correlation id), or None
        when the broker closed the connection instead of answering."""
        self.correlation_id += 1
        self.send(struct.pack(">hhih", api_key, version, self.correlation_id, 3) + b"raw" + body)
        answer = self.receive()
        if answer is None:
            return None
        assert struct.unpack(">i", answer[:4])[0] == self.correlation_id
        return answer[4:]

    def authenticate_token(self, token: bytes) -> tuple[int, bytes, int]:
        """One SaslAuthenticate v1: (error code, auth bytes, session_lifetime_ms)."""
        body = self.request(36, 1, struct.pack(">i", len(token)) + token)
        assert body is not None, "the broker closed the connection during the exchange"
        (error,) = struct.unpack(">h", body[:2])
        (message_len,) = struct.unpack(">h", body[2:4])
        rest = body[4 + max(message_len, 0):]
        (token_len,) = struct.unpack(">i", rest[:4])
        auth_bytes = rest[4:4 + token_len]
        (lifetime,) = struct.unpack(">q", rest[4 + token_len:12 + token_len])
        return error, auth_bytes, lifetime

    def login(self) -> int:
        """Handshake and the two SCRAM-SHA-256 round trips; returns session_lifetime_ms."""
        handshake = self.request(17, 1, struct.pack(">h", 13) + b"SCRAM-SHA-256")
        assert handshake is not None and struct.unpack(">h", handshake[:2])[0] == 0, handshake

        def server_first_of(client_first: bytes) -> bytes:
            error, token, _ = self.authenticate_token(client_first)
            assert error == 0, error
            return token

        client_final, expected = scram_client_messages(PASSWORD, server_first_of)
        error, server_final, lifetime = self.authenticate_token(client_final)
        assert (error, server_final) == (0, expected)
        return lifetime

    def metadata_served(self) -> bool:
        return self.request(3, 1, struct.pack(">i", -1)) is not None


def test_a_session_not_renewed_in_time_ends_at_the_next_request(reauth):
    """What KIP-368 asks of the broker, seen from a hand-written client: SaslAuthenticate
    v1 carries session_lifetime_ms = connections.max.reauth.ms; a re-authentication on the
    connection before the end starts a new session (a request after the first session's end
    is served); a client that lets its session run out has the connection closed at its
    next request, unanswered, as Kafka does."""
    secure = reauth
    conn = RawSaslClient(secure.address("SASL_PLAINTEXT"))
    try:
        sent = time.monotonic()
        assert conn.login() == REAUTH_MS
        first_end = time.monotonic() + REAUTH_MS / 1000  # at or after the broker's end of it
        assert conn.metadata_served()
        # Renewed a second before the end: served past the first session's end.
        wait_until(lambda: time.monotonic() >= sent + (REAUTH_MS - 1000) / 1000, timeout=REAUTH_MS / 1000,
                   interval=0.02, what="a second before the end of the session")
        renewed = time.monotonic()
        assert conn.login() == REAUTH_MS
        second_end = time.monotonic() + REAUTH_MS / 1000  # at or after the broker's end of it
        wait_until(lambda: time.monotonic() >= first_end + 0.5, timeout=REAUTH_MS / 1000, interval=0.02,
                   what="the end of the first session")
        assert time.monotonic() < renewed + (REAUTH_MS - 300) / 1000, "too slow to test inside the second session"
        assert conn.metadata_served(), "a request inside the renewed session is refused"
        # Not renewed again: the next request after the end closes the connection.
        wait_until(lambda: time.monotonic() >= second_end + 0.2, timeout=2 * REAUTH_MS / 1000, interval=0.02,
                   what="the end of the second session")
        assert not conn.metadata_served(), "a request after the session's end was answered"
    finally:
        conn.close()
    assert 'SASL session of "alice" expired without re-authentication' in broker_log(secure.broker)


# ---- a cluster: users and ACLs set through one broker, in force on the others --------------

PROPAGATION_BOUND_S = 1.5  # "about a second", measured from the CLI's return


def tern_cli(*args: str, stdin: str | None = None) -> None:
    subprocess.run([str(tern_bin()), *args], input=stdin, text=True, check=True, capture_output=True, timeout=30)


@pytest.mark.timeout(90)
def test_a_user_and_an_acl_set_through_one_broker_apply_on_the_others(tmp_path, pki, topic):
    """Three brokers on etcd, each with a PLAINTEXT inter-broker listener (whose
    User:ANONYMOUS is the super user) and a SASL_SSL one. A SCRAM user created through
    broker 1 logs in on broker 2; an ACL granted through broker 1 lets that user write to a
    partition led by broker 3 within about a second, and revoking it refuses the write
    there within about a second."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient
    from test_cluster import Cluster

    cluster = Cluster(tmp_path, brokers=0)
    sasl_ports = {}
    cluster.etcd.start()
    try:
        for node in (1, 2, 3):
            b = cluster.add(node, start=False)
            sasl_ports[node] = free_port()
            b.extra_args += [
                "--listeners", f"PLAINTEXT://{b.address},SASL_SSL://127.0.0.1:{sasl_ports[node]}",
                "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                "--authorizer", "acl", "--super-users", "User:ANONYMOUS",
            ]
            b.start()
        wait_until(lambda: len(cluster.metadata().brokers) == 3, 20, what="all brokers registered")
        a, b, c = cluster.brokers[1], cluster.brokers[2], cluster.brokers[3]

        def sasl_config(node: int) -> dict:
            return {"bootstrap.servers": f"127.0.0.1:{sasl_ports[node]}", "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(pki / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "alice", "sasl.password": PASSWORD, "socket.timeout.ms": 3000}

        # A user created through A (AlterUserScramCredentials) logs in on B.
        tern_cli("user", "add", "alice", "--mechanism", "SCRAM-SHA-512", "-b", a.address, stdin=PASSWORD + "\n")
        created = time.monotonic()

        def logs_in_on_b() -> bool:
            try:
                AdminClient(sasl_config(2)).list_topics(timeout=2)
                return True
            except KafkaException:
                return False
        wait_until(logs_in_on_b, 10, interval=0.05, what="alice to log in on broker 2")
        print(f"\nuser created through broker 1 logs in on broker 2 after {time.monotonic() - created:.2f}s")

        # A partition led by C (the ANONYMOUS super user creates the topic).
        cluster.create_topic(topic, 6, replication_factor=1)
        partition = next(p for p, leader in cluster.leaders(topic, via=c).items() if leader == c.node_id)

        written = []

        def write_to_c(producer: Producer) -> KafkaError | None:
            outcome = {}
            producer.produce(topic, value=b"x", partition=partition,
                             on_delivery=lambda err, msg: outcome.setdefault("err", err))
            producer.flush(10)
            assert "err" in outcome, "no delivery report within 10 s"
            if outcome["err"] is None:
                written.append(1)
            return outcome["err"]

        def new_producer() -> Producer:
            return Producer({**sasl_config(3), "acks": "all", "message.timeout.ms": 5000})

        refused = write_to_c(new_producer())
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

        grant = ["--allow-principal", "User:alice", "--operation", "WRITE", "--operation", "DESCRIBE",
                 "--topic", topic]
        tern_cli("acl", "add", "-b", a.address, *grant)
        granted = time.monotonic()
        # (a new producer per try: librdkafka keeps a topic's authorization error)
        producer = wait_until(lambda: (lambda p: p if write_to_c(p) is None else None)(new_producer()),
                              10, interval=0.02, what="the grant to reach broker 3")
        took = time.monotonic() - granted
        print(f"grant through broker 1 in force on broker 3 after {took:.2f}s")
        assert took < PROPAGATION_BOUND_S, f"the grant took {took:.2f}s to reach broker 3"

        # Revoked through A: the same producer's next Produce to C is refused by C.
        tern_cli("acl", "remove", "-b", a.address, *grant)
        revoked = time.monotonic()
        refusal = wait_until(lambda: write_to_c(producer), 10, interval=0.02, what="the revocation to reach broker 3")
        took = time.monotonic() - revoked
        print(f"revocation through broker 1 in force on broker 3 after {took:.2f}s")
        assert refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refusal
        assert took < PROPAGATION_BOUND_S, f"the revocation took {took:.2f}s to reach broker 3"
        # Broker 3 holds exactly the acknowledged writes: nothing refused was appended.
        from confluent_kafka import Consumer, TopicPartition
        probe = Consumer({"bootstrap.servers": c.address, "group.id": "probe"})
        low, high = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        probe.close()
        assert (low, high) == (0, len(written)), (low, high, len(written))
    finally:
        cluster.stop()
