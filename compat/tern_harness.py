"""Starts, stops, restarts and kills a real tern broker process for the compat tests.

Only 127.0.0.1 is used. Every wait here is bounded in time.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMPAT = REPO / "compat"
DEFAULT_BIN = REPO / "target" / "release" / "tern"

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0

# Broker flags for consumer-group tests (pass with @pytest.mark.broker_args(*GROUP_ARGS)):
# no 3 s wait before a new group's first rebalance (group.initial.rebalance.delay.ms), and
# session timeouts down to 1 s allowed (group.min.session.timeout.ms), so a dead member is
# noticed within a short session.timeout.ms.
GROUP_ARGS = ("--group-initial-rebalance-delay-ms", "300", "--group-min-session-timeout-ms", "1000")


def tern_bin() -> Path:
    return Path(os.environ.get("TERN_BIN", str(DEFAULT_BIN)))


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, chosen below the
    kernel's ephemeral range: the port is free between this call and the process that
    binds it, and in that gap an outgoing connection (a broker to etcd, a client to a
    broker) takes its local port from the ephemeral range, so it cannot take this one.
    Ports already handed out in this process are not handed out again."""
    low, _ = _ephemeral_range()
    first = 20000 if low > 21000 else 1024
    for _ in range(1000):
        port = random.randrange(first, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {first}..{low}")


def port_accepts(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


class BrokerError(RuntimeError):
    pass


# Every broker (and client) process this Python process started, so none outlives the test run
# (e.g. when a test is interrupted by its timeout before its fixture tears down).
_STARTED: list[subprocess.Popen] = []


@atexit.register
def _kill_leftovers() -> None:
    for p in _STARTED:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass


class Broker:
    """One tern process: `tern serve --data-dir DIR --listen 127.0.0.1:PORT --node-id 1 [extra_args]`.

    The data dir and port stay the same across restart() / kill9() + start(), so a
    restarted broker sees the old data at the old address.
    """

    def __init__(self, data_dir: Path, log_dir: Path, port: int | None = None, binary: Path | None = None,
                 extra_args: list[str] | tuple[str, ...] = (), node_id: int = 1,
                 extra_env: dict[str, str] | None = None):
        self.binary = Path(binary or tern_bin())
        self.node_id = node_id
        # Appended to every `tern serve` command line (e.g. GROUP_ARGS), on every (re)start.
        self.extra_args = [str(a) for a in extra_args]
        # Added to the environment of every (re)start (e.g. tools/powerloss.py's shim).
        self.extra_env = dict(extra_env or {})
        # Set by kill9(): the process is meant to be dead until the next start().
        self.killed = False
        # Set by stop(): its checks ran; a second stop() (a test's, then its fixture's) is a no-op.
        self.stopped = False
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_paths: list[Path] = []
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    # ---- addresses -------------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ---- lifecycle -------------------------------------------------------------
    def start(self, ready_timeout: float = READY_TIMEOUT_S) -> "Broker":
        if self.alive():
            raise BrokerError("broker already running")
        if not self.binary.is_file() or not os.access(self.binary, os.X_OK):
            raise BrokerError(f"tern binary not found or not executable: {self.binary} (set TERN_BIN)")
        self.starts += 1
        self.killed = False
        self.stopped = False
        log_path = self.log_dir / f"tern-{self.starts}.log"
        self.log_paths.append(log_path)
        cmd = [
            str(self.binary), "serve",
            "--data-dir", str(self.data_dir),
            "--listen", self.address,
            "--node-id", str(self.node_id),
            *self.extra_args,
        ]
        env = dict(os.environ)
        env.update(self.extra_env)
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")  # plain-text logs in the log file
        with open(log_path, "wb") as log:
            log.write(("$ " + " ".join(cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )
        _STARTED.append(self.proc)
        self._wait_ready(ready_timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(
                    f"tern exited with code {self.proc.returncode} before accepting connections\n"
                    + self.log_tail()
                )
            if port_accepts(self.port):
                return
            time.sleep(0.05)
        self.kill9()
        raise BrokerError(f"tern did not accept connections on {self.address} within {timeout:.0f}s\n" + self.log_tail())

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit code (None if never
        started). Raises BrokerError when the broker misbehaved at any time: it exited by
        itself (not through kill9()), SIGTERM did not end it with status 0, or any of its
        logs holds a panic."""
        if self.proc is None:
            return None
        if self.stopped:
            return self.proc.returncode
        self.stopped = True
        problems = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise BrokerError(f"tern did not exit within {timeout:.0f}s of SIGTERM; killed it\n" + self.log_tail())
            if self.proc.returncode != 0:
                problems.append(f"tern exited with status {self.proc.returncode} on SIGTERM")
        elif not self.killed:
            problems.append(f"tern exited by itself (status {self.proc.returncode})")
        panics = self.panics()
        if panics:
            problems.append("tern panicked: " + " | ".join(panics[:3]))
        if problems:
            raise BrokerError("; ".join(problems) + "\n" + self.log_tail())
        return self.proc.returncode

    def panics(self) -> list[str]:
        """The `panicked at` lines of every log of this broker's starts."""
        found = []
        for p in self.log_paths:
            try:
                text = p.read_text(errors="replace")
            except OSError:
                continue
            found.extend(line.strip()[:300] for line in text.splitlines() if "panicked at" in line)
        return found

    def kill9(self) -> None:
        """kill -9 the broker process (no chance to flush or clean up)."""
        self.killed = True
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self, ready_timeout: float = READY_TIMEOUT_S) -> "Broker":
        """Clean stop (SIGTERM) then start again on the same data dir and port."""
        self.stop()
        return self.start(ready_timeout)

    # ---- diagnostics -------------------------------------------------------------
    def log_tail(self, max_bytes: int = 6000) -> str:
        parts = []
        for p in self.log_paths[-2:]:
            try:
                data = p.read_bytes()
            except OSError:
                continue
            parts.append(f"--- {p} (last {min(len(data), max_bytes)} bytes) ---\n"
                         + data[-max_bytes:].decode("utf-8", "replace"))
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"Broker({self.address}, pid={self.pid}, data_dir={self.data_dir})"


class Etcd:
    """A real etcd server (Debian's etcd-server) on two free loopback ports, with its data
    in `data_dir`, so a restart keeps its keys and leases."""

    def __init__(self, data_dir: Path, log_dir: Path):
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, ready_timeout: float = READY_TIMEOUT_S) -> "Etcd":
        self.starts += 1
        client, peer = f"http://127.0.0.1:{self.client_port}", f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            "etcd", "--name", "tern-test", "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"tern-test={peer}",
        ]
        with open(self.log_dir / f"etcd-{self.starts}.log", "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        _STARTED.append(self.proc)
        wait_until(lambda: self.proc.poll() is None and port_accepts(self.client_port), ready_timeout,
                   what=f"etcd on {client}")
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_until(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Polls predicate() until it returns a truthy value or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = predicate()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported below
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))


class JsonLinesProcess:
    """A client process (e.g. group_worker.py, kafkajs/run.js) that prints one JSON object per
    line on stdout. A reader thread stamps each object with time.monotonic() at receipt
    (key "_t") and keeps them in .events. Closing stdin asks the process to finish; kill9()
    sends SIGKILL to this process (by its PID) only. stderr goes to a file (.stderr_path).
    """

    def __init__(self, cmd: list[str], stderr_path: Path, cwd: Path | None = None, env: dict | None = None,
                 name: str = ""):
        self.cmd = [str(c) for c in cmd]
        self.name = name or Path(self.cmd[1] if len(self.cmd) > 1 else self.cmd[0]).name
        self.stderr_path = Path(stderr_path)
        self.events: list[dict] = []
        self.raw_lines: list[str] = []
        self._lock = threading.Lock()
        self.started_at = time.monotonic()
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                cwd=cwd, env=env, start_new_session=True)
        _STARTED.append(self.proc)
        self._reader = threading.Thread(target=self._read, name=f"reader-{self.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:  # ends at EOF (process exited or closed stdout)
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            now = time.monotonic()
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"ev": "unparsed", "line": line}
            if not isinstance(ev, dict):
                ev = {"ev": "unparsed", "line": line}
            ev["_t"] = now
            with self._lock:
                self.raw_lines.append(line)
                self.events.append(ev)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def snapshot(self, ev: str | None = None) -> list[dict]:
        with self._lock:
            return [e for e in self.events if ev is None or e.get("ev") == ev]

    def finish(self, timeout: float = 20.0) -> int | None:
        """Closes stdin (the process's cue to shut down cleanly), waits `timeout` seconds,
        then SIGKILLs it. Returns the exit code."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
        self._reader.join(timeout=5)
        return self.proc.returncode

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stderr_tail(self, max_bytes: int = 3000) -> str:
        try:
            data = self.stderr_path.read_bytes()
        except OSError:
            return ""
        return data[-max_bytes:].decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"JsonLinesProcess({self.name}, pid={self.proc.pid}, rc={self.proc.returncode})"
