"""Brokers authenticate to each other: a three-broker cluster (real etcd) whose
inter-broker listener is SASL_SSL, each broker logging in to its peers as `User:broker`
with SCRAM-SHA-512, under `--authorizer acl`.

Replication is the witness. Until the broker user exists, followers cannot log in to
their leaders, fall behind and leave the ISR; once `tern user add broker` has run, they
log in, catch up and rejoin it. The admin CLI then speaks SASL_SSL too.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from http_client import Http
from tern_harness import Broker, BrokerError, Etcd, free_port, tern_bin, wait_until
from test_security import issue, openssl

TOPIC = "replicated"
BROKER_PASSWORD = "broker-secret"


def metric(port: int, name: str, label: str = "") -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and label in line and not line.startswith("#"))


def test_brokers_replicate_over_sasl_ssl_as_the_broker_principal(tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=tern-test-ca", cwd=pki)
    issue(pki, "server", "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    password_file = tmp_path / "broker.password"
    password_file.write_text(BROKER_PASSWORD + "\n")
    etcd = Etcd(tmp_path / "etcd", tmp_path / "logs").start()
    brokers: list[tuple[Broker, dict[str, int]]] = []
    try:
        for node in (1, 2, 3):
            ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "metrics", "http")}
            broker = Broker(data_dir=tmp_path / f"data-{node}", log_dir=tmp_path / f"logs-{node}",
                            port=ports["PLAINTEXT"], node_id=node, extra_args=[
                "--etcd", etcd.endpoint, "--etcd-lease-ttl-secs", "3",
                "--listeners", f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},SASL_SSL://127.0.0.1:{ports['SASL_SSL']}",
                "--inter-broker-listener", "SASL_SSL",
                "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                "--tls-peer-ca", str(pki / "ca.pem"),
                "--inter-broker-sasl-username", "broker",
                "--inter-broker-sasl-password-file", str(password_file),
                "--authorizer", "acl", "--super-users", "User:ANONYMOUS;User:broker",
                "--replica-lag-time-max-ms", "1500",
                "--metrics", f"127.0.0.1:{ports['metrics']}", "--http", f"127.0.0.1:{ports['http']}",
            ])
            broker.start()
            brokers.append((broker, ports))
        plaintext = ",".join(b.address for b, _ in brokers)
        admin = AdminClient({"bootstrap.servers": plaintext})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 20, what="three brokers")
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(15)

        producer = Producer({"bootstrap.servers": plaintext, "acks": "1"})
        for i in range(300):
            producer.produce(TOPIC, key=str(i).encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0

        def under_replicated() -> float:
            return sum(metric(p["metrics"], "tern_under_replicated_partitions") for _, p in brokers)

        # No broker user yet: followers cannot log in to their leaders and drop out.
        wait_until(lambda: under_replicated() > 0, 15, what="followers without a login to leave the ISR")
        assert sum(metric(p["metrics"], "tern_authentication_failures_total", 'listener="SASL_SSL"')
                   for _, p in brokers) > 0

        subprocess.run([str(tern_bin()), "user", "add", "broker", "--mechanism", "SCRAM-SHA-512",
                        "-b", brokers[0][0].address], input=BROKER_PASSWORD + "\n", text=True,
                       check=True, capture_output=True, timeout=30)
        started = time.monotonic()
        wait_until(lambda: under_replicated() == 0, 30, what="followers to log in, catch up and rejoin the ISR")
        print(f"ISR whole again {time.monotonic() - started:.1f}s after the broker user was created")
        assert all(metric(p["metrics"], "tern_sasl_authentications_total", 'mechanism="SCRAM-SHA-512"') > 0
                   for _, p in brokers)

        # acks=all now waits for followers fetching over SASL_SSL.
        producer = Producer({"bootstrap.servers": plaintext, "acks": "all"})
        for i in range(300, 400):
            producer.produce(TOPIC, key=str(i).encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0
        # The HTTP API of every broker forwards to leaders over the inter-broker listener.
        # Under the authorizer it asks for credentials (User:ANONYMOUS being a super user
        # for the PLAINTEXT listener does not open it): the broker user's.
        for _, p in brokers:
            assert Http(p["http"]).post("/create_topic", {"publisher_id": 1, "topic_name": TOPIC}).status == 401
            http = Http(p["http"], auth=("broker", BROKER_PASSWORD))
            topic_id = http.create_topic(TOPIC)["topic_id"]
            for n in range(3):
                http.publish(topic_id, f"http-{n}", key=f"k{n}")

        consumer = Consumer({"bootstrap.servers": plaintext, "group.id": "check",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([TOPIC])
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < 403 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                values.add(msg.value())
        consumer.close()
        assert {f"v{i}".encode() for i in range(400)} <= values
        assert len(values) == 400 + 3  # http-0..2 from each of three brokers: same values

        # The admin CLI over SASL_SSL, as the broker user.
        listed = subprocess.run(
            [str(tern_bin()), "user", "list", "-b", f"127.0.0.1:{brokers[1][1]['SASL_SSL']}",
             "--security-protocol", "SASL_SSL", "--ssl-ca", str(pki / "ca.pem"),
             "--sasl-username", "broker", "--sasl-password-file", str(password_file), "--json"],
            text=True, capture_output=True, timeout=30)
        assert listed.returncode == 0, listed.stderr
        assert "broker" in listed.stdout, listed.stdout
        wrong = tmp_path / "wrong.password"
        wrong.write_text("nope\n")
        refused = subprocess.run(
            [str(tern_bin()), "user", "list", "-b", f"127.0.0.1:{brokers[1][1]['SASL_SSL']}",
             "--security-protocol", "SASL_SSL", "--ssl-ca", str(pki / "ca.pem"),
             "--sasl-username", "broker", "--sasl-password-file", str(wrong)],
            text=True, capture_output=True, timeout=30)
        assert refused.returncode != 0
        assert "authentication failed" in refused.stderr.lower(), refused.stderr
    finally:
        problems = []
        for broker, _ in brokers:
            try:
                broker.stop()
            except BrokerError as e:  # stop the others regardless, then fail
                problems.append(str(e)[:2000])
                broker.kill9()
        etcd.stop()
        if problems:
            raise BrokerError("\n".join(problems))
