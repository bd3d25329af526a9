"""The HTTP API under the same users and ACLs as Kafka: HTTPS, HTTP Basic with SCRAM
users, client certificates, 401 and 403.

One broker for the module. It first runs with `User:ANONYMOUS` as a super user so that
the users and ACLs can be set up through the PLAINTEXT listener with `tern user` and
`tern acl`, then restarts on the same data directory with `--authorizer acl`,
`--super-users User:admin` and `--http-tls`: from then on an HTTP caller is who its
credentials say, and a caller without any is `User:ANONYMOUS`, refused by the ACLs.
"""

from __future__ import annotations

import ssl
import subprocess

import pytest

from http_client import Http, message_id_of
from tern_harness import Broker, free_port, tern_bin, wait_until
from test_security import issue, openssl

TOPIC = "orders"


def tern(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(tern_bin()), *args], input=stdin, text=True, capture_output=True,
                          check=True, timeout=30)


class Setup:
    def __init__(self, broker: Broker, http_port: int, pki, topic_id: int, other_topic_id: int):
        self.broker = broker
        self.http_port = http_port
        self.pki = pki
        self.topic_id = topic_id
        self.other_topic_id = other_topic_id

    def tls(self, cert: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.pem"))
        if cert:
            context.load_cert_chain(str(self.pki / f"{cert}.pem"), str(self.pki / f"{cert}.key"))
        return context

    def http(self, auth: tuple[str, str] | None = None, cert: str | None = None) -> Http:
        return Http(self.http_port, tls=self.tls(cert), auth=auth)

    def acl(self, action: str, *args: str) -> None:
        tern("acl", action, "-b", self.broker.address, *args)


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Setup:
    base = tmp_path_factory.mktemp("http-auth")
    pki = base / "pki"
    pki.mkdir()
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=tern-test-ca", cwd=pki)
    issue(pki, "server", "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    issue(pki, "carol", "/O=tern-test/CN=carol", None)
    http_port = free_port()
    tls = ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
           "--tls-client-ca", str(pki / "ca.pem"),
           "--ssl-principal-mapping-rules", "RULE:^CN=([^,]+),.*$/$1/,DEFAULT"]
    # `--http-auth optional`: the explicit opt-out, without which the anonymous setup calls
    # below would be refused although User:ANONYMOUS is a super user.
    setup_args = ["--http", f"127.0.0.1:{http_port}", "--authorizer", "acl", "--super-users", "User:ANONYMOUS",
                  "--http-auth", "optional"]
    broker = Broker(data_dir=base / "data", log_dir=base / "logs", extra_args=setup_args)
    broker.start()
    try:
        for user, mechanism in (("alice", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-256"), ("admin", "SCRAM-SHA-512")):
            tern("user", "add", user, "--mechanism", mechanism, "-b", broker.address, stdin=f"{user}-pw\n")
        plain = Http(http_port)
        topic_id = plain.create_topic(TOPIC, partitions=2)["topic_id"]
        other_topic_id = plain.create_topic("payroll")["topic_id"]
        setup = Setup(broker, http_port, pki, topic_id, other_topic_id)
        setup.acl("add", "--allow-principal", "User:alice", "--operation", "WRITE", "--operation", "READ",
                  "--topic", TOPIC)
        setup.acl("add", "--allow-principal", "User:alice", "--operation", "READ", "--group", "http-7")
        setup.acl("add", "--allow-principal", "User:bob", "--operation", "DESCRIBE", "--topic", TOPIC)
        setup.acl("add", "--allow-principal", "User:carol", "--operation", "WRITE", "--topic", TOPIC)
        # What lets the tests change ACLs later over the PLAINTEXT listener.
        setup.acl("add", "--allow-principal", "User:ANONYMOUS", "--operation", "ALTER",
                  "--operation", "DESCRIBE", "--cluster")
        broker.stop()
        broker.extra_args = ["--http", f"127.0.0.1:{http_port}", "--http-tls", "true", *tls,
                             "--authorizer", "acl", "--super-users", "User:admin"]
        broker.start()
        wait_until(lambda: setup.http(auth=("admin", "admin-pw")).get("/openapi.json").status == 200,
                   timeout=20, what="the HTTPS API")
        yield setup
    finally:
        broker.stop()


def publish_status(http: Http, topic_id: int) -> int:
    return http.post("/publish_message", {"topic_id": topic_id, "message_content": "hello"}).status


def test_no_credentials_is_401_with_a_basic_challenge(secured):
    anonymous = secured.http()
    r = anonymous.post("/publish_message", {"topic_id": secured.topic_id, "message_content": "x"})
    assert r.status == 401, r
    assert r.body["status"] == "error", r
    assert anonymous.last_headers.get("www-authenticate", anonymous.last_headers.get("WWW-Authenticate", "")) \
        .startswith("Basic"), anonymous.last_headers


def test_wrong_or_malformed_credentials_are_401(secured):
    assert publish_status(secured.http(auth=("alice", "not-her-password")), secured.topic_id) == 401
    assert publish_status(secured.http(auth=("mallory", "whatever")), secured.topic_id) == 401
    bearer = secured.http()
    r = bearer.request("GET", f"/message_status?message_id={message_id_of(secured.topic_id, 0, 0)}")
    assert r.status == 401, r


def test_basic_users_get_exactly_what_their_acls_allow(secured):
    alice = secured.http(auth=("alice", "alice-pw"))
    published = alice.publish(secured.topic_id, "from alice")
    bob = secured.http(auth=("bob", "bob-pw"))
    # bob may DESCRIBE the topic (message_status) but not WRITE to it.
    assert publish_status(bob, secured.topic_id) == 403
    assert bob.status(published["message_id"])["offset"] == published["offset"]
    # A refused publish appended nothing.
    assert alice.publish(secured.topic_id, "again", key=None)["offset"] >= 0
    # Neither may create topics (CREATE on the cluster or the topic).
    r = alice.post("/create_topic", {"publisher_id": 1, "topic_name": "new-one"})
    assert r.status == 403, r


def test_a_topic_the_caller_may_not_describe_looks_like_no_topic(secured):
    bob = secured.http(auth=("bob", "bob-pw"))
    # payroll exists, 12345 does not: bob cannot tell them apart.
    exists = bob.post("/publish_message", {"topic_id": secured.other_topic_id, "message_content": "x"})
    missing = bob.post("/publish_message", {"topic_id": 12345, "message_content": "x"})
    assert exists.status == missing.status == 403, (exists, missing)
    assert exists.body["error"].replace(str(secured.other_topic_id), "N") == \
        missing.body["error"].replace("12345", "N"), (exists, missing)
    # The super user is told the truth.
    admin = secured.http(auth=("admin", "admin-pw"))
    assert admin.post("/publish_message", {"topic_id": 12345, "message_content": "x"}).status == 404


def test_subscriptions_need_read_on_the_topic_and_the_group(secured):
    alice = secured.http(auth=("alice", "alice-pw"))
    alice.subscribe(7, secured.topic_id)
    sent = alice.publish(secured.topic_id, "for consumer 7", key="k")
    got = alice.next_message(7, secured.topic_id, wait_ms=5000)
    assert got["status"] == "ok" and got["message_id"] == sent["message_id"], got
    # Consumer 8's group is not alice's.
    r = alice.post("/subscribe", {"consumer_id": 8, "topic_id": secured.topic_id})
    assert r.status == 403, r
    # bob may not read the topic.
    bob = secured.http(auth=("bob", "bob-pw"))
    r = bob.post("/subscribe", {"consumer_id": 7, "topic_id": secured.topic_id})
    assert r.status == 403, r


def test_a_client_certificate_names_the_caller(secured):
    carol = secured.http(cert="carol")
    assert carol.publish(secured.topic_id, "from carol by certificate")["status"] == "ok"
    assert publish_status(carol, secured.other_topic_id) == 403


def test_a_revoked_acl_refuses_within_a_second(secured):
    bob = secured.http(auth=("bob", "bob-pw"))
    secured.acl("add", "--allow-principal", "User:bob", "--operation", "WRITE", "--topic", TOPIC)
    wait_until(lambda: publish_status(bob, secured.topic_id) == 200, timeout=2, what="the grant")
    secured.acl("remove", "--allow-principal", "User:bob", "--operation", "WRITE", "--topic", TOPIC)
    wait_until(lambda: publish_status(bob, secured.topic_id) == 403, timeout=2, what="the revocation")


def test_plain_http_is_refused_on_the_https_listener(secured):
    r = None
    try:
        r = Http(secured.http_port).get("/openapi.json", timeout=5)
    except Exception:  # noqa: BLE001 - the TLS listener closes a plaintext request
        return
    assert r.status != 200, r


def test_a_describer_learns_a_topic_id_by_name_and_no_one_else_learns_it_exists(secured):
    bob = secured.http(auth=("bob", "bob-pw"))
    r = bob.get(f"/topics/{TOPIC}")
    assert r.status == 200 and r.body["topic_id"] == secured.topic_id, r
    assert r.body["topic_name"] == TOPIC and r.body["partitions"] == 2, r
    # create_topic of the existing topic answers its id to him too, without CREATE.
    r = bob.post("/create_topic", {"publisher_id": 1, "topic_name": TOPIC})
    assert r.status == 200 and r.body["topic_id"] == secured.topic_id and r.body["created"] is False, r
    # Not a topic he may not describe, existing or not; nor may he create one.
    exists, missing = bob.get("/topics/payroll"), bob.get("/topics/no-such-topic")
    assert exists.status == missing.status == 403, (exists, missing)
    assert exists.body["error"].replace("payroll", "N") == missing.body["error"].replace("no-such-topic", "N")
    r = bob.post("/create_topic", {"publisher_id": 1, "topic_name": "payroll"})
    assert r.status == 403, r
    assert secured.http().get(f"/topics/{TOPIC}").status == 401
    admin = secured.http(auth=("admin", "admin-pw"))
    assert admin.get("/topics/payroll").body["topic_id"] == secured.other_topic_id
    assert admin.get("/topics/no-such-topic").status == 404
    assert admin.get("/topics/__consumer_offsets").status == 404


def test_with_an_authorizer_credentials_are_required_even_where_anonymous_is_a_super_user(secured):
    """The secure default: `User:ANONYMOUS` a super user (for a loopback admin listener)
    must not open the HTTP API; `--http-auth optional` is the explicit opt-out."""
    broker = secured.broker
    original = list(broker.extra_args)
    try:
        for http_auth, expected in (([], 401), (["--http-auth", "optional"], 200)):
            broker.stop()
            broker.extra_args = [("User:admin;User:ANONYMOUS" if a == "User:admin" else a) for a in original]
            broker.extra_args += http_auth
            broker.start()
            admin = secured.http(auth=("admin", "admin-pw"))
            wait_until(lambda: admin.get("/openapi.json").status == 200, timeout=20, what="the HTTPS API")
            assert publish_status(secured.http(), secured.topic_id) == expected, http_auth
    finally:
        broker.stop()
        broker.extra_args = original
        broker.start()
        wait_until(lambda: secured.http(auth=("admin", "admin-pw")).get("/openapi.json").status == 200,
                   timeout=20, what="the HTTPS API")


def test_http_auth_required_refuses_anonymous_callers_even_without_an_authorizer(secured):
    """Last: restarts the broker without an authorizer, with `--http-auth required`."""
    broker = secured.broker
    broker.stop()
    broker.extra_args = [a for a in broker.extra_args if a not in ("--authorizer", "acl", "--super-users", "User:admin")]
    broker.extra_args += ["--http-auth", "required"]
    broker.start()
    anonymous = secured.http()
    wait_until(lambda: anonymous.get("/openapi.json").status == 200, timeout=20, what="the HTTPS API")
    assert publish_status(anonymous, secured.topic_id) == 401
    assert publish_status(secured.http(auth=("bob", "bob-pw")), secured.topic_id) == 200
    assert publish_status(secured.http(cert="carol"), secured.other_topic_id) == 200
