"""deploy/: Prometheus config and rules pass promtool, the systemd unit passes
systemd-analyze (and its syscall filter admits every syscall tern makes), the env file,
the Kubernetes entrypoint and ConfigMap really start a broker, and the Dockerfile,
compose file and manifests are consistent with each other and with `tern serve --help`.

No Docker engine or Kubernetes API runs here: those files are checked statically (and
with `kubectl kustomize`, which renders offline)."""

from __future__ import annotations

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
    """The scrape target is the compose broker's TERN_METRICS port, on /metrics."""
    cfg = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "tern"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    metrics_port = compose["services"]["tern"]["environment"]["TERN_METRICS"].rsplit(":", 1)[1]
    assert targets == [f"tern:{metrics_port}"]


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
                "segment.bytes": "1024", "retention.bytes": "2048"})], operation_timeout=10).values():
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
    assert kinds == [("ConfigMap", "tern-config"), ("PodDisruptionBudget", "tern"), ("Service", "tern"),
                     ("Service", "tern-headless"), ("StatefulSet", "tern")], kinds


def test_k8s_manifests_hang_together(env_vars):
    objs = k8s_objects()
    sts = objs[("StatefulSet", "tern")]
    spec = sts["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    headless = objs[("Service", spec["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    assert spec["replicas"] == 1, "tern is single-node until clustering lands"
    for key in (("Service", "tern-headless"), ("Service", "tern"), ("PodDisruptionBudget", "tern")):
        sel = objs[key]["spec"]["selector"]
        sel = sel.get("matchLabels", sel)
        assert sel.items() <= labels.items(), f"{key} selects {sel}, pods are {labels}"
    assert "maxUnavailable" in objs[("PodDisruptionBudget", "tern")]["spec"]

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


def test_etcd_manifest_is_marked_for_cluster_mode():
    text = (K8S / "etcd.yaml").read_text()
    assert "UPCOMING CLUSTER MODE" in text
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert "etcd.yaml" not in kustomization["resources"]
    assert "etcd" not in " ".join(serve_env_vars()).lower(), \
        "tern now has etcd options: wire etcd.yaml into kustomization.yaml and the StatefulSet"


def _entrypoint(tmp_path: Path, pod_name: str) -> tuple[TernProcess, int, int]:
    """Runs the StatefulSet's container command as a pod would, with the ConfigMap's tern.toml,
    the binary from target/ and 127.0.0.1 addresses (TERN_* variables override the file)."""
    objs = k8s_objects()
    (c,) = objs[("StatefulSet", "tern")]["spec"]["template"]["spec"]["containers"]
    toml = tmp_path / "tern.toml"
    toml.write_text(objs[("ConfigMap", "tern-config")]["data"]["tern.toml"])
    script = c["args"][0].replace("/usr/local/bin/tern", shlex.quote(str(tern_bin()))) \
                         .replace("/etc/tern/tern.toml", shlex.quote(str(toml)))
    port, mport = free_port(), free_port()
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": pod_name, "POD_NAMESPACE": "test",
           "TERN_ADVERTISE": f"127.0.0.1:{port}", "TERN_LISTEN": f"127.0.0.1:{port}",
           "TERN_METRICS": f"127.0.0.1:{mport}", "TERN_DATA_DIR": str(tmp_path / "data")}
    return TernProcess([*c["command"], script], env=env, log_path=tmp_path / "tern.log"), port, mport


@pytest.mark.timeout(60)
def test_k8s_entrypoint_takes_node_id_from_ordinal(tmp_path):
    proc, port, mport = _entrypoint(tmp_path, "tern-2")
    try:
        proc.wait_http(f"http://127.0.0.1:{mport}/ready")
        assert http_get(f"http://127.0.0.1:{mport}/health")[0] == 200
        assert kafka_broker_ids(f"127.0.0.1:{port}") == [(2, f"127.0.0.1:{port}")]
        grace = k8s_objects()[("StatefulSet", "tern")]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        rc, took = proc.terminate(timeout=grace)  # the exec'd tern gets the SIGTERM itself
    finally:
        proc.kill()
    assert rc == 0, proc.log()
    assert took < grace / 2


def test_k8s_entrypoint_refuses_a_name_without_ordinal(tmp_path):
    proc, _, _ = _entrypoint(tmp_path, "tern")
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
    assert set(services) == {"tern", "prometheus", "grafana"}
    assert re.search(r"three-broker \+ etcd", text), "the marked note about the three-broker + etcd variant"
    tern = services["tern"]
    build = tern["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
    for name in tern["environment"]:
        assert name in env_vars, f"compose sets unknown variable {name}"
    assert tern["stop_signal"] == "SIGTERM"
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


def test_readme_has_a_section_per_deliverable():
    text = (DEPLOY / "README.md").read_text()
    for heading in ("Prometheus", "systemd", "Docker", "Compose", "Kubernetes", "Grafana"):
        assert re.search(rf"^##+ .*{heading}", text, re.M | re.I), f"no section for {heading}"
