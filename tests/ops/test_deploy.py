"""deploy/: Prometheus config and rules pass promtool, the systemd unit passes
systemd-analyze (and its syscall filter admits every syscall tern makes), the env file,
the Kubernetes entrypoint and ConfigMap really start a broker (the latter in cluster mode,
on a real etcd), the compose etcd healthcheck probes a real etcd, and the Dockerfile,
compose file and manifests are consistent with each other and with `tern serve --help`.

No Docker engine or Kubernetes API runs here: those files are checked statically (and
with `kubectl kustomize`, which renders offline)."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import kcat, payloads
from opslib import (DEPLOY, GRAFANA, REPO, TernProcess, free_port, http_get, run, serve_env_vars, tern_bin,
                    tern_harness, wait_until)

YAML_FILES = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml"), *GRAFANA.rglob("*.yml"),
                     *GRAFANA.rglob("*.yaml")])
UNIT = DEPLOY / "systemd" / "tern.service"
ENV_FILE = DEPLOY / "systemd" / "tern.env"
K8S = DEPLOY / "k8s"


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def k8s_objects() -> dict[tuple[str, str], dict]:
    out = {}
    for f in sorted(K8S.glob("*.yaml")):
        if f.name == "kustomization.yaml":
            continue
        for d in load_all(f):
            out[(d["kind"], d["metadata"]["name"])] = d | {"_file": f.name}
    return out


def parse_env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        env[key.strip()] = value.strip()
    return env


def unit_settings(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key}", []).append(value)
    return out


def kafka_broker_ids(address: str) -> list[tuple[int, str]]:
    r = kcat(["-b", address, "-L", "-m", "5"], timeout=20)
    assert r.returncode == 0, r.stderr.decode()
    return [(int(i), a) for i, a in re.findall(r"broker (\d+) at (\S+)", r.stdout.decode())]


def compose_brokers(compose: dict) -> dict[str, dict]:
    """The compose services that run tern (tern-1, tern-2, ...), by name."""
    return {n: s for n, s in sorted(compose["services"].items()) if re.fullmatch(r"tern-\d+", n)}


def etcd_endpoints(value: str) -> list[str]:
    return [u.strip() for u in value.split(",") if u.strip()]


def etcd_get_prefix(endpoint: str, prefix: str) -> dict[str, str]:
    """Every key under prefix and its value, through etcd's v3 JSON gateway (no etcdctl)."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    b64 = lambda t: base64.b64encode(t.encode()).decode()  # noqa: E731
    req = urllib.request.Request(f"{endpoint}/v3/kv/range", method="POST",
                                 data=json.dumps({"key": b64(prefix), "range_end": b64(end)}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body = json.loads(r.read())
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
            for kv in body.get("kvs", [])}


@pytest.fixture(scope="module")
def env_vars() -> set[str]:
    names = serve_env_vars()
    assert "TERN_DATA_DIR" in names and len(names) > 10, names
    return names


# ---------------------------------------------------------------------------- YAML, promtool
@pytest.mark.parametrize("path", YAML_FILES, ids=[str(p.relative_to(REPO)) for p in YAML_FILES])
def test_yaml_parses(path):
    docs = load_all(path)
    assert docs and all(isinstance(d, dict) for d in docs), f"{path}: expected mappings"


def test_promtool_check_config():
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing (scripts/install-test-deps.sh installs the prometheus package)"
    r = run([promtool, "check", "config", DEPLOY / "prometheus.yml"], timeout=60)
    out = (r.stdout + r.stderr).decode()
    assert r.returncode == 0, out
    assert "1 rule files found" in out, "prometheus.yml should load tern-alerts.yml:\n" + out


def test_promtool_check_rules():
    r = run([shutil.which("promtool") or "promtool", "check", "rules", DEPLOY / "tern-alerts.yml"], timeout=60)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


def test_prometheus_targets_the_metrics_listener():
    """The scrape targets are every compose broker at its TERN_METRICS port, on /metrics."""
    cfg = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "tern"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    brokers = compose_brokers(yaml.safe_load((DEPLOY / "docker-compose.yml").read_text()))
    assert len(brokers) == 3
    expected = [f"{name}:{svc['environment']['TERN_METRICS'].rsplit(':', 1)[1]}" for name, svc in brokers.items()]
    assert sorted(targets) == sorted(expected) and len(targets) == len(set(targets)), targets


# ---------------------------------------------------------------------------- systemd
def _verify_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointed at the built binary (verify checks that the binary
    exists; /usr/local/bin/tern is where it is installed, not where it is built)."""
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/tern serve" in text
    copy = tmp_path / "tern.service"
    copy.write_text(text.replace("ExecStart=/usr/local/bin/tern", f"ExecStart={tern_bin()}"))
    return copy


def _systemd_analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if not exe:
        pytest.skip("systemd-analyze is not installed on this machine (Debian package: systemd)")
    return exe


def test_systemd_analyze_verify(tmp_path):
    exe = _systemd_analyze()
    r = run([exe, "verify", _verify_copy(tmp_path)], timeout=60)
    out = (r.stdout + r.stderr).decode()
    if r.returncode != 0 and re.search(r"Failed to (connect|initialize)|not been booted with systemd", out):
        pytest.skip(f"systemd-analyze verify cannot run in this container: {out.strip()[:300]}")
    assert r.returncode == 0 and not out.strip(), out


def test_systemd_unit_hardening(tmp_path):
    s = unit_settings(UNIT)
    expect = {
        "Service.User": ["tern"], "Service.StateDirectory": ["tern"], "Service.Restart": ["on-failure"],
        "Service.KillSignal": ["SIGTERM"], "Service.EnvironmentFile": ["/etc/tern/tern.env"],
        "Service.NoNewPrivileges": ["yes"], "Service.ProtectSystem": ["strict"],
    }
    for key, value in expect.items():
        assert s.get(key) == value, f"{key}={s.get(key)}"
    assert int(s["Service.LimitNOFILE"][0]) >= 65536
    assert int(s["Service.TimeoutStopSec"][0]) >= 30
    assert "DynamicUser" not in {k.split(".")[1] for k in s}, "dedicated static user, not DynamicUser"
    exe = shutil.which("systemd-analyze")
    if exe:
        r = run([exe, "security", "--offline=yes", "--no-pager", _verify_copy(tmp_path)], timeout=60)
        out = (r.stdout + r.stderr).decode()
        m = re.search(r"Overall exposure level for \S+: ([\d.]+)", out)
        assert m, out[-2000:]
        assert float(m.group(1)) <= 2.0, f"exposure {m.group(1)} (want <= 2.0, 'OK'):\n{out[-3000:]}"


def _syscall_groups() -> dict[str, list[str]]:
    r = run([_systemd_analyze(), "syscall-filter", "--no-pager"], timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    groups: dict[str, list[str]] = {}
    current = None
    for line in r.stdout.decode().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not line.startswith(" ") and s.startswith("@"):
            current = groups.setdefault(s, [])
        elif current is not None:
            current.append(s)
    return groups


def _expand(groups, name, seen=None) -> set[str]:
    out: set[str] = set()
    for m in groups.get(name, []):
        out |= _expand(groups, m) if m.startswith("@") else {m}
    return out


@pytest.mark.timeout(120)
def test_syscall_filter_and_wx_policy_admit_tern(tmp_path):
    """Under strace, a broker serving produce (acks=all and lz4 acks=1), fetch, a consumer group,
    retention, topic deletion, /metrics and a clean SIGTERM shutdown makes only syscalls in the
    unit's SystemCallFilter, and no writable+executable mappings (MemoryDenyWriteExecute)."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("strace is not installed (scripts/install-test-deps.sh installs it)")
    settings = unit_settings(UNIT)
    (allowed_spec,) = settings["Service.SystemCallFilter"]
    allowed = set()
    groups = _syscall_groups()
    for item in allowed_spec.split():
        allowed |= _expand(groups, item) if item.startswith("@") else {item}
    assert len(allowed) > 100

    port, mport = free_port(), free_port()
    trace = tmp_path / "strace.out"
    cmd = [strace, "-f", "-qq", "-o", trace, tern_bin(), "serve", "--data-dir", tmp_path / "data",
           "--listen", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{mport}", *tern_harness.GROUP_ARGS,
           "--offsets-topic-num-partitions", "2", "--log-retention-check-interval-ms", "300"]
    proc = TernProcess(cmd, env=None, log_path=tmp_path / "tern.log")
    try:
        try:
            proc.wait_http(f"http://127.0.0.1:{mport}/ready", timeout=60)
        except AssertionError:
            if proc.proc.poll() is not None and "ptrace" in proc.log():
                pytest.skip(f"strace cannot trace in this container: {proc.log()[-300:]}")
            raise
        b = f"127.0.0.1:{port}"
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": b})
        for f in admin.create_topics([NewTopic("st-retained", 1, 1, config={
                "internal.segment.bytes": "1024", "retention.bytes": "2048"})], operation_timeout=10).values():
            f.result(timeout=20)
        assert kcat(["-b", b, "-P", "-t", "st-a", "-K", ":", "-X", "acks=all"], input=payloads(200)).returncode == 0
        assert kcat(["-b", b, "-P", "-t", "st-a", "-K", ":", "-X", "acks=1", "-z", "lz4"],
                    input=payloads(50)).returncode == 0
        assert kcat(["-b", b, "-P", "-t", "st-retained", "-K", ":", "-X", "batch.num.messages=1"],
                    input=payloads(40)).returncode == 0
        assert len(kcat(["-b", b, "-C", "-t", "st-a", "-e", "-q"]).stdout.splitlines()) == 250
        r = kcat(["-b", b, "-G", "st-g", "st-a", "-e", "-q", "-c", "250", "-X", "auto.offset.reset=earliest"],
                 timeout=60)
        assert len(r.stdout.splitlines()) == 250, r.stderr.decode()
        http_get(f"http://127.0.0.1:{mport}/metrics")
        time.sleep(1.0)  # a few retention passes
        for f in admin.delete_topics(["st-retained"], operation_timeout=10).values():
            f.result(timeout=20)
        del admin
        time.sleep(5.5)  # one sampler pass (statvfs, log sizes)
        # strace keeps SIGTERM to itself: signal the traced tern (its child, by PID). strace
        # exits with the tracee's exit status.
        children = Path(f"/proc/{proc.proc.pid}/task/{proc.proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        os.kill(int(children[0]), signal.SIGTERM)
        rc = proc.proc.wait(timeout=30)
    finally:
        proc.kill()
    assert rc == 0, proc.log()

    used: set[str] = set()
    wx = []
    for line in trace.read_text(errors="replace").splitlines():
        m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)(?:\(| resumed>)", line)
        if m:
            used.add(m.group(1))
        if re.match(r"^\d+\s+(mmap|mmap2)\(", line) and "PROT_WRITE" in line and "PROT_EXEC" in line:
            wx.append(line)
        if re.match(r"^\d+\s+(mprotect|pkey_mprotect)\(", line) and "PROT_EXEC" in line:
            wx.append(line)
    assert len(used) > 30, f"strace saw too little: {sorted(used)}"
    assert used - {"exit_group"} - allowed == set(), \
        f"syscalls outside SystemCallFilter={allowed_spec}: {sorted(used - allowed)}"
    if unit_settings(UNIT).get("Service.MemoryDenyWriteExecute") == ["yes"]:
        assert not wx, "W+X mappings under MemoryDenyWriteExecute=yes:\n" + "\n".join(wx[:5])


# ---------------------------------------------------------------------------- env files
def test_env_file_names_are_real_options(env_vars):
    unknown = set(parse_env_file(ENV_FILE)) - env_vars
    assert not unknown, f"tern.env sets variables `tern serve --help` does not know: {sorted(unknown)}"


@pytest.mark.timeout(60)
def test_env_file_starts_a_broker_that_stops_cleanly(tmp_path):
    """tern.env's values parse and run a broker (addresses and data dir moved to 127.0.0.1 and a
    temp dir); SIGTERM stops it with exit 0 well within the unit's TimeoutStopSec."""
    env = parse_env_file(ENV_FILE)
    port, mport = free_port(), free_port()
    env.update(TERN_DATA_DIR=str(tmp_path / "data"), TERN_LISTEN=f"127.0.0.1:{port}",
               TERN_ADVERTISE=f"127.0.0.1:{port}", TERN_METRICS=f"127.0.0.1:{mport}", PATH="/usr/bin:/bin")
    proc = TernProcess([tern_bin(), "serve"], env=env, log_path=tmp_path / "tern.log")
    try:
        proc.wait_http(f"http://127.0.0.1:{mport}/ready")
        assert kafka_broker_ids(f"127.0.0.1:{port}") == [(int(env["TERN_NODE_ID"]), f"127.0.0.1:{port}")]
        assert kcat(["-b", f"127.0.0.1:{port}", "-P", "-t", "env-file", "-X", "acks=all"],
                    input=b"a\nb\n").returncode == 0
        timeout = int(unit_settings(UNIT)["Service.TimeoutStopSec"][0])
        rc, took = proc.terminate(timeout=timeout)
    finally:
        proc.kill()
    assert rc == 0, proc.log()
    assert took < timeout / 2, f"clean shutdown took {took:.1f}s of TimeoutStopSec={timeout}"
    if env.get("TERN_LOG_FORMAT") == "json":
        first = proc.log().splitlines()[0]
        assert json.loads(first), first


# ---------------------------------------------------------------------------- Kubernetes
def test_kustomize_renders(tmp_path):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl not installed: `kubectl kustomize deploy/k8s` not run (static checks still run)")
    r = run([kubectl, "kustomize", K8S], timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(r.stdout) if d)
    assert kinds == [("ConfigMap", "tern-config"), ("PodDisruptionBudget", "etcd"), ("PodDisruptionBudget", "tern"),
                     ("Service", "etcd-headless"), ("Service", "tern"), ("Service", "tern-headless"),
                     ("StatefulSet", "etcd"), ("StatefulSet", "tern")], kinds


def test_k8s_manifests_hang_together(env_vars):
    objs = k8s_objects()
    sts = objs[("StatefulSet", "tern")]
    spec = sts["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    headless = objs[("Service", spec["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    assert spec["replicas"] == 3, "a three-broker cluster"
    for key in (("Service", "tern-headless"), ("Service", "tern"), ("PodDisruptionBudget", "tern")):
        sel = objs[key]["spec"]["selector"]
        sel = sel.get("matchLabels", sel)
        assert sel.items() <= labels.items(), f"{key} selects {sel}, pods are {labels}"
    assert objs[("PodDisruptionBudget", "tern")]["spec"].get("maxUnavailable") == 1, "one broker down at a time"

    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for svc in ("tern-headless", "tern"):
        for p in objs[("Service", svc)]["spec"]["ports"]:
            assert p["targetPort"] in ports, f"{svc} targets unknown port {p['targetPort']}"
    for probe, path in (("startupProbe", "/health"), ("livenessProbe", "/health"), ("readinessProbe", "/ready")):
        assert c[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe
    for e in c["env"]:
        if e["name"].startswith("TERN_"):
            assert e["name"] in env_vars, f"unknown variable {e['name']}"
    env = {e["name"]: e for e in c["env"]}
    assert "TERN_NODE_ID" not in env, "the node id comes from the pod ordinal, set by the container command"
    # Kubernetes expands $(VAR) only for variables defined earlier in the list.
    names = [e["name"] for e in c["env"]]
    for e in c["env"]:
        for ref in re.findall(r"\$\((\w+)\)", e.get("value", "")):
            assert ref in names[: names.index(e["name"])], f"{e['name']} uses $({ref}) before it is defined"
    etcd_sts = objs[("StatefulSet", "etcd")]
    etcd_svc = etcd_sts["spec"]["serviceName"]
    client_port = {p["name"]: p["port"] for p in objs[("Service", etcd_svc)]["spec"]["ports"]}["client"]
    assert client_port == 2379
    expected = [f"http://etcd-{i}.{etcd_svc}.$(POD_NAMESPACE).svc.cluster.local:{client_port}"
                for i in range(etcd_sts["spec"]["replicas"])]
    assert etcd_endpoints(env["TERN_ETCD"]["value"]) == expected

    cm = objs[("ConfigMap", "tern-config")]
    config = tomllib.loads(cm["data"]["tern.toml"])
    file_keys = {"TERN_" + k.upper() for k in config}
    assert file_keys <= env_vars, f"ConfigMap keys tern does not know: {sorted(file_keys - env_vars)}"
    assert int(config["metrics"].rsplit(":", 1)[1]) == ports["metrics"]
    assert int(config["listen"].rsplit(":", 1)[1]) == ports["kafka"]
    (config_volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert config_volume["configMap"]["name"] == "tern-config"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["data"] == config["data_dir"]
    assert f"--config {mounts[config_volume['name']]}/tern.toml" in c["args"][0]
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_etcd_manifest_is_deployed_and_matches_tern_etcd(env_vars):
    """etcd.yaml is applied with the rest, and its members are exactly the endpoints the
    brokers are given: one per replica, named after the pod, on the headless Service."""
    assert "TERN_ETCD" in env_vars
    text = (K8S / "etcd.yaml").read_text()
    assert "UPCOMING" not in text.upper(), "etcd.yaml is in use, not a placeholder"
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert "etcd.yaml" in kustomization["resources"]
    assert all((K8S / r).exists() for r in kustomization["resources"])

    objs = k8s_objects()
    etcd = objs[("StatefulSet", "etcd")]
    spec = etcd["spec"]
    replicas = spec["replicas"]
    assert replicas >= 3 and replicas % 2 == 1, "an odd member count, at least 3, for a quorum that survives one loss"
    headless = objs[("Service", spec["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]} == {"client": 2379, "peer": 2380}
    pdb = objs[("PodDisruptionBudget", "etcd")]["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= \
        spec["template"]["metadata"]["labels"].items()
    (c,) = spec["template"]["spec"]["containers"]
    script = c["args"][0]
    # The member's name is its pod name (etcd-N), its client URL the one TERN_ETCD lists,
    # and the initial cluster has exactly `replicas` members.
    assert '--name "${POD_NAME}"' in script
    assert f"http://${{POD_NAME}}.{spec['serviceName']}.${{POD_NAMESPACE}}.svc.cluster.local:2379" in script
    loop = re.search(r"for i in ([\d ]+); do", script)
    assert loop and loop.group(1).split() == [str(i) for i in range(replicas)], script

    (tern_c,) = objs[("StatefulSet", "tern")]["spec"]["template"]["spec"]["containers"]
    tern_etcd = {e["name"]: e.get("value") for e in tern_c["env"]}["TERN_ETCD"]
    members = [re.fullmatch(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.\$\(POD_NAMESPACE\)\.svc\.cluster\.local:(\d+)", u)
               for u in etcd_endpoints(tern_etcd)]
    assert all(members), tern_etcd
    assert [m.group(1) for m in members] == [f"{etcd['metadata']['name']}-{i}" for i in range(replicas)]
    assert {m.group(2) for m in members} == {spec["serviceName"]}
    assert {int(m.group(3)) for m in members} == {2379}


def _entrypoint(tmp_path: Path, pod_name: str, etcd) -> tuple[TernProcess, int, int]:
    """Runs the StatefulSet's container command as a pod would, with the ConfigMap's tern.toml,
    the binary from target/ and 127.0.0.1 addresses (TERN_* variables override the file), in
    cluster mode: TERN_ETCD is the test etcd (the manifest's in-cluster URLs do not resolve
    here) and the cluster id is unique to the test, so no other broker shares its node ids."""
    objs = k8s_objects()
    (c,) = objs[("StatefulSet", "tern")]["spec"]["template"]["spec"]["containers"]
    toml = tmp_path / "tern.toml"
    toml.write_text(objs[("ConfigMap", "tern-config")]["data"]["tern.toml"])
    script = c["args"][0].replace("/usr/local/bin/tern", shlex.quote(str(tern_bin()))) \
                         .replace("/etc/tern/tern.toml", shlex.quote(str(toml)))
    port, mport = free_port(), free_port()
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": pod_name, "POD_NAMESPACE": "test",
           "TERN_ADVERTISE": f"127.0.0.1:{port}", "TERN_LISTEN": f"127.0.0.1:{port}",
           "TERN_METRICS": f"127.0.0.1:{mport}", "TERN_HTTP": f"127.0.0.1:{free_port()}", "TERN_DATA_DIR": str(tmp_path / "data"),
           "TERN_ETCD": etcd.endpoint, "TERN_CLUSTER_ID": f"k8s-{tmp_path.name}"}
    assert "TERN_ETCD" in {e["name"] for e in c["env"]}, "the StatefulSet runs tern in cluster mode"
    return TernProcess([*c["command"], script], env=env, log_path=tmp_path / "tern.log"), port, mport


@pytest.mark.timeout(60)
def test_k8s_entrypoint_takes_node_id_from_ordinal(tmp_path, etcd):
    proc, port, mport = _entrypoint(tmp_path, "tern-2", etcd)
    try:
        proc.wait_http(f"http://127.0.0.1:{mport}/ready")
        assert http_get(f"http://127.0.0.1:{mport}/health")[0] == 200
        assert kafka_broker_ids(f"127.0.0.1:{port}") == [(2, f"127.0.0.1:{port}")]
        # In cluster mode for real: registered in etcd under its cluster id, as node 2.
        prefix = f"/tern/k8s-{tmp_path.name}/"
        brokers = {k: v for k, v in etcd_get_prefix(etcd.endpoint, prefix).items() if "/brokers/" in k}
        assert list(brokers) == [prefix + "brokers/2"], brokers
        info = json.loads(brokers[prefix + "brokers/2"])
        assert (info["node_id"], info["host"], info["port"]) == (2, "127.0.0.1", port), info
        grace = k8s_objects()[("StatefulSet", "tern")]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        rc, took = proc.terminate(timeout=grace)  # the exec'd tern gets the SIGTERM itself
    finally:
        proc.kill()
    assert rc == 0, proc.log()
    assert took < grace / 2
    # A clean shutdown leaves the cluster at once (its lease revoked, not left to expire).
    assert not [k for k in etcd_get_prefix(etcd.endpoint, prefix) if "/brokers/" in k]


def test_k8s_entrypoint_refuses_a_name_without_ordinal(tmp_path, etcd):
    proc, _, _ = _entrypoint(tmp_path, "tern", etcd)
    try:
        rc = proc.proc.wait(timeout=20)
    finally:
        proc.kill()
    assert rc != 0 and "no ordinal" in proc.log()


# ---------------------------------------------------------------------------- Dockerfile
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_stages() -> list[tuple[str, str, list[tuple[str, str]]]]:
    stages = []
    for word, rest in dockerfile_instructions():
        if word == "FROM":
            m = re.match(r"(\S+)\s+AS\s+(\S+)", rest, re.I)
            assert m, f"every stage is named: FROM {rest}"
            stages.append((m.group(2), m.group(1), []))
        elif stages:
            stages[-1][2].append((word, rest))
    return stages


def test_dockerfile_stages(env_vars):
    stages = dockerfile_stages()
    names = [s[0] for s in stages]
    assert len(names) == len(set(names))
    assert names[-1] == "runtime", "the default (last) target builds from source"
    assert {"build", "runtime-base", "prebuilt", "etcd"} <= set(names)
    by_name = {n: (base, ins) for n, base, ins in stages}
    for name, base, ins in stages:
        for word, rest in ins:
            m = re.search(r"--from=(\S+)", rest)
            if word == "COPY" and m:
                assert m.group(1) in names[: names.index(name)], f"{name}: COPY --from an unknown/later stage"
            if word == "COPY" and not m:
                srcs = [s for s in rest.split()[:-1] if not s.startswith("--")]
                for s in srcs:
                    if s == "target/release/tern":
                        continue  # built on the host for --target prebuilt
                    assert list(REPO.glob(s)) or s.endswith("*"), f"{name}: COPY {s}: not in the repo"
    _, base_ins = by_name["runtime-base"]
    user = [r for w, r in base_ins if w == "USER"]
    assert user and not user[-1].startswith(("root", "0")), "runs as an unprivileged user"
    env = " ".join(r for w, r in base_ins if w == "ENV")
    for name in re.findall(r"\b(TERN_[A-Z0-9_]+)=", env):
        assert name in env_vars, f"Dockerfile ENV {name} is not a tern option"
    listen = re.search(r"TERN_LISTEN=\S+:(\d+)", env).group(1)
    metrics = re.search(r"TERN_METRICS=\S+:(\d+)", env).group(1)
    exposed = {p for w, r in base_ins if w == "EXPOSE" for p in r.split()}
    assert {listen, metrics} <= exposed
    assert ("STOPSIGNAL", "SIGTERM") in base_ins
    entry = [json.loads(r) for w, r in base_ins if w == "ENTRYPOINT"]
    assert entry == [["/usr/local/bin/tern"]], "exec form, so tern is PID 1 and receives SIGTERM"
    for stage in ("prebuilt", "runtime"):
        assert by_name[stage][0] == "runtime-base"
        assert any(w == "COPY" and r.split()[-1] == "/usr/local/bin/tern" for w, r in by_name[stage][1])


def test_docker_build_stage_copies_what_cargo_needs():
    """Every file Cargo.toml names (target paths, a build script) is copied into the build stage."""
    (_, _, build) = [st for st in dockerfile_stages() if st[0] == "build"][0]
    copied = {src.rstrip("*").rstrip("/") for w, r in build if w == "COPY" and "--from" not in r
              for src in r.split()[:-1] if not src.startswith("--")}
    manifest = tomllib.loads((REPO / "Cargo.toml").read_text())
    needed = set()
    for section in ("lib", "bin", "test", "bench", "example"):
        entries = manifest.get(section, [])
        for entry in entries if isinstance(entries, list) else [entries]:
            if "path" in entry:
                needed.add(entry["path"])
    build_script = manifest.get("package", {}).get("build")
    if build_script or (REPO / "build.rs").exists():
        needed.add(build_script if isinstance(build_script, str) else "build.rs")
    for path in sorted(needed):
        assert any(path == c or path.startswith(c + "/") for c in copied), \
            f"Cargo.toml needs {path}, which deploy/Dockerfile's build stage does not copy"


def test_dockerignore_sends_what_the_build_copies():
    patterns = [l.strip() for l in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
                if l.strip() and not l.startswith("#")]
    assert patterns[0] == "*", "allow-list: everything else (target/, .venv/, node_modules) stays out"
    allowed = {p[1:].rstrip("/") for p in patterns[1:] if p.startswith("!")}
    copied = set()
    for name, _, ins in dockerfile_stages():
        for w, r in ins:
            if w == "COPY" and "--from" not in r:
                copied |= {s.rstrip("*").rstrip("/") for s in r.split()[:-1] if not s.startswith("--")}
    assert copied <= allowed | {"Cargo.lock"}, f"copied but ignored: {sorted(copied - allowed)}"


def test_dockerfile_healthcheck_probes_ready(broker):
    """The image's HEALTHCHECK command (bash /dev/tcp, no curl) succeeds against a ready broker
    and fails against a closed port."""
    (hc,) = [r for w, r in dockerfile_instructions() if w == "HEALTHCHECK"]
    cmd = json.loads(hc[hc.index("CMD") + 3:].strip())
    assert cmd[0] == "bash" and "9644" in cmd[-1]
    ok = run([*cmd[:-1], cmd[-1].replace("9644", str(broker.metrics_port))], timeout=10)
    assert ok.returncode == 0, ok.stderr.decode()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    bad = run([*cmd[:-1], cmd[-1].replace("9644", str(closed))], timeout=10)
    assert bad.returncode != 0


# ---------------------------------------------------------------------------- compose
def test_compose_file(env_vars):
    text = (DEPLOY / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    services = compose["services"]
    assert set(services) == {"etcd", "tern-1", "tern-2", "tern-3", "prometheus", "grafana"}
    assert "NOT YET" not in text, "the cluster is here: no placeholder note"
    assert re.search(r"kcat -b 127\.0\.0\.1:9092 -L", text), "copy-paste usage listing the brokers"
    assert re.search(r"replication\s+(#\s*)?factor", text, re.I), "say how topics are replicated"
    assert not re.search(r"not\s+(#\s*)?copied", text, re.I), "replication landed: moved partitions keep their data"

    etcd = services["etcd"]
    assert etcd["build"]["target"] == "etcd"
    assert (DEPLOY / etcd["build"]["context"] / etcd["build"]["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
    assert "etcd" in [st[0] for st in dockerfile_stages()]
    etcd_flags = dict(a.removeprefix("--").split("=", 1) for a in etcd["command"])
    assert etcd_flags["advertise-client-urls"] == "http://etcd:2379"
    assert etcd_flags["listen-client-urls"].endswith(":2379")
    assert etcd_flags["initial-cluster"].split("=", 1)[0] == etcd_flags["name"], "a single member, itself"
    assert "," not in etcd_flags["initial-cluster"]
    (etcd_volume,) = [v for v in etcd["volumes"] if not v.startswith(".")]
    assert etcd_flags["data-dir"].startswith(etcd_volume.split(":")[1] + "/"), "etcd data on its named volume"
    assert "healthcheck" in etcd, "the brokers wait for a healthy etcd"

    brokers = compose_brokers(compose)
    assert list(brokers) == ["tern-1", "tern-2", "tern-3"]
    node_ids, listen_ports, data_volumes = [], [], []
    for name, tern in brokers.items():
        build = tern["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
        assert build.get("target", "runtime") == "runtime", f"{name} builds the broker image"
        env = tern["environment"]
        for var in env:
            assert var in env_vars, f"{name}: compose sets unknown variable {var}"
        assert etcd_endpoints(env["TERN_ETCD"]) == ["http://etcd:2379"], f"{name}: TERN_ETCD names the etcd service"
        # tern exits when no etcd answers at start: wait for etcd's healthcheck, not its start.
        assert tern["depends_on"]["etcd"]["condition"] == "service_healthy", f"{name} starts after etcd is healthy"
        node_ids.append(int(env["TERN_NODE_ID"]))
        listen_host, listen_port = env["TERN_LISTEN"].rsplit(":", 1)
        adv_host, adv_port = env["TERN_ADVERTISE"].rsplit(":", 1)
        assert listen_host == "0.0.0.0", f"{name} listens on all interfaces of its container"
        assert adv_host == "127.0.0.1"
        published = {}
        for p in tern["ports"]:
            host_ip, host_port, container_port = str(p).split(":")
            published[int(container_port)] = (host_ip, int(host_port))
        # Host clients connect to the advertised address: it must be the published host
        # port, forwarded to the same port the broker listens on in its container.
        assert adv_port == listen_port and published[int(listen_port)] == ("127.0.0.1", int(adv_port)), \
            f"{name}: advertise {env['TERN_ADVERTISE']}, listen {env['TERN_LISTEN']}, ports {tern['ports']}"
        listen_ports.append(int(listen_port))
        metrics_host, metrics_port = env["TERN_METRICS"].rsplit(":", 1)
        assert metrics_host == "0.0.0.0" and published[int(metrics_port)][0] == "127.0.0.1"
        (data,) = [v for v in tern["volumes"] if v.split(":")[1] == env["TERN_DATA_DIR"]]
        data_volumes.append(data.split(":")[0])
        assert tern["stop_signal"] == "SIGTERM"
    assert len(set(node_ids)) == len(node_ids) == 3, f"node ids must be distinct: {node_ids}"
    assert len(set(listen_ports)) == 3, f"each broker on its own port: {listen_ports}"
    assert len(set(data_volumes)) == 3, f"each broker on its own volume: {data_volumes}"
    host_ports = [str(p).split(":")[1] for svc in services.values() for p in svc.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), f"a host port published twice: {host_ports}"
    assert set(brokers) <= set(services["prometheus"]["depends_on"])
    for svc in services.values():
        for v in svc.get("volumes", []):
            src = v.split(":", 1)[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), f"compose mounts missing path {src}"
            else:
                assert src in compose.get("volumes", {}), f"undeclared named volume {src}"
        for p in svc.get("ports", []):
            assert str(p).startswith("127.0.0.1:"), f"published beyond loopback: {p}"
    prom_mounts = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"] if v.startswith("."))
    assert prom_mounts["./prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    rule_files = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["rule_files"]
    for rf in rule_files:
        assert prom_mounts.get(f"./{rf}") == f"/etc/prometheus/{rf}", f"rule file {rf} not mounted next to the config"
    provisioning = {v.split(":")[1] for v in services["grafana"]["volumes"] if v.startswith("../grafana/provisioning")}
    assert provisioning == {"/etc/grafana/provisioning/datasources", "/etc/grafana/provisioning/dashboards"}


def test_compose_etcd_healthcheck_probes_health(etcd):
    """The compose etcd's healthcheck (bash /dev/tcp to /health, no etcdctl in the image)
    succeeds against a real etcd and fails against a closed port."""
    hc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["etcd"]["healthcheck"]["test"]
    assert hc[0] == "CMD" and hc[1] == "bash" and "2379" in hc[-1]
    port = etcd.endpoint.rsplit(":", 1)[1]
    ok = run([*hc[1:-1], hc[-1].replace("2379", port)], timeout=10)
    assert ok.returncode == 0, ok.stderr.decode()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert run([*hc[1:-1], hc[-1].replace("2379", str(closed))], timeout=10).returncode != 0


def test_readme_has_a_section_per_deliverable():
    text = (DEPLOY / "README.md").read_text()
    for heading in ("Prometheus", "systemd", "Docker", "Compose", "Kubernetes", "Grafana"):
        assert re.search(rf"^##+ .*{heading}", text, re.M | re.I), f"no section for {heading}"
