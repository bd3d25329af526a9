"""TLS, mTLS and SASL (PLAIN, SCRAM-SHA-256/512) with real clients.

One broker per test with four listeners: PLAINTEXT (the loopback admin listener the
users are created through, with `tern user add`), SASL_SSL, SASL_PLAINTEXT and SSL
with required client certificates. Certificates come from `openssl` (a throwaway CA,
a server certificate for 127.0.0.1/localhost, a client certificate for alice).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tern_harness import Broker, free_port, tern_bin, wait_until

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


@pytest.fixture
def secure(tmp_path, pki, request):
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT", "SSL")}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    broker = Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=ports["PLAINTEXT"], extra_args=[
        "--listeners", listeners,
        "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.pem"),
        "--ssl-principal-mapping-rules", "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
    ])
    request.node._tern_broker = broker
    broker.start()
    try:
        yield SecureBroker(broker, ports, pki)
    finally:
        broker.stop()


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
def test_confluent_kafka_produces_and_consumes_over_sasl(secure, topic, listener, mechanism):
    secure.add_user("alice", PASSWORD, "SCRAM-SHA-256" if mechanism == "SCRAM-SHA-256" else "SCRAM-SHA-512")
    values = confluent_round_trip(confluent_config(secure, listener, mechanism), topic)
    assert values == [f"m{i}".encode() for i in range(20)]


def test_metadata_on_a_listener_advertises_that_listener(secure, topic):
    from confluent_kafka.admin import AdminClient

    secure.add_user("alice", PASSWORD)
    admin = AdminClient(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-512"))
    brokers = admin.list_topics(timeout=20).brokers
    assert [b.port for b in brokers.values()] == [secure.ports["SASL_SSL"]]
    plain = AdminClient({"bootstrap.servers": secure.address("PLAINTEXT")})
    assert [b.port for b in plain.list_topics(timeout=20).brokers.values()] == [secure.ports["PLAINTEXT"]]


def test_a_wrong_password_fails_fast_and_cleanly(secure):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    secure.add_user("alice", PASSWORD)
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


def test_kafka_python_scram_sha_512_over_tls(secure, topic):
    from kafka import KafkaConsumer, KafkaProducer

    secure.add_user("alice", PASSWORD)
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
    values = [m.value for m in consumer][:10]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(10)]


def test_mutual_tls_maps_the_certificate_subject_and_refuses_clients_without_one(secure, topic):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config = confluent_config(secure, "SSL", None)
    with_cert = {**config, "ssl.certificate.location": str(secure.pki / "alice.pem"),
                 "ssl.key.location": str(secure.pki / "alice.key")}
    assert confluent_round_trip(with_cert, topic, count=5) == [f"m{i}".encode() for i in range(5)]
    errors = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
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


def test_nothing_but_apiversions_and_sasl_before_authentication(secure, topic):
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
        gone.list_topics(timeout=5)
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


@pytest.fixture
def authorized(tmp_path, pki, request):
    """A broker with the ACL authorizer: the loopback PLAINTEXT listener's
    `User:ANONYMOUS` is the super user that creates users and ACLs."""
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL")}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    broker = Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=ports["PLAINTEXT"], extra_args=[
        "--listeners", listeners,
        "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
        "--authorizer", "acl", "--super-users", "User:ANONYMOUS",
    ])
    request.node._tern_broker = broker
    broker.start()
    try:
        yield SecureBroker(broker, ports, pki)
    finally:
        broker.stop()


def test_acls_grant_a_prefix_hide_other_topics_and_refuse_writes(authorized, topic):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                       NewTopic, ResourcePatternType, ResourceType)

    secure = authorized
    secure.add_user("alice", PASSWORD)
    admin = AdminClient({"bootstrap.servers": secure.address("PLAINTEXT")})
    mine, other = f"alice.{topic}", f"other.{topic}"
    for f in admin.create_topics([NewTopic(mine, 1, 1), NewTopic(other, 1, 1)]).values():
        f.result(20)
    # The grants through `tern acl` (CreateAcls), as an operator would.
    subprocess.run([str(tern_bin()), "acl", "add", "-b", secure.address("PLAINTEXT"),
                    "--allow-principal", "User:alice", "--operation", "READ", "--operation", "WRITE",
                    "--operation", "DESCRIBE", "--topic", "alice.", "--resource-pattern-type", "PREFIXED"],
                   check=True, capture_output=True, timeout=30)
    listed = subprocess.run([str(tern_bin()), "acl", "list", "--json", "-b", secure.address("PLAINTEXT")],
                            check=True, capture_output=True, text=True, timeout=30).stdout
    import json
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
    from confluent_kafka import TopicPartition
    from confluent_kafka import Consumer
    probe = Consumer({"bootstrap.servers": secure.address("PLAINTEXT"), "group.id": "probe"})
    low, high = probe.get_watermark_offsets(TopicPartition(other, 0), timeout=10)
    probe.close()
    assert high == 0, (low, high)
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
    subprocess.run([str(tern_bin()), "acl", "remove", "-b", secure.address("PLAINTEXT"),
                    "--deny-principal", "User:alice", "--operation", "WRITE", "--topic", mine],
                   check=True, capture_output=True, timeout=30)
    # (a new producer: librdkafka remembers the topic's authorization error)
    restored = {}
    fresh = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    fresh.produce(mine, value=b"z", on_delivery=lambda err, msg: restored.setdefault("err", err))
    fresh.flush(20)
    assert restored["err"] is None, restored
