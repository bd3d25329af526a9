"""README.md's "Securing tern" walk-through, run as written.

The ```sh blocks that follow a `<!-- walkthrough -->` line are read from README.md and
run in order, one command at a time (a command is a line with its `\\` continuations),
in a temporary directory, each by `bash` with the variables the earlier commands set.
Only what must differ on a shared test host is substituted:

- ports: every `127.0.0.1:PORT` of the README is mapped to a free port (a port the map
  does not know fails the test), and the admin CLI's implicit default broker
  (127.0.0.1:9092) is given as TERN_BOOTSTRAP, mapped the same way;
- binaries: `tern` is TERN_BIN (a `tern` link first on PATH), and the `etcd ... &` line
  starts the harness's etcd (tern_harness.Etcd) in its place;
- long-running commands (ending in `&`): the test starts them itself, tracks their PIDs
  and ends them by PID when it finishes, also on failure.

Every command must exit 0 and show what its step says (EXPECTED below). A command the
table does not know, or a step of the table no command matches, fails the test: the
README and this file change together.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tern_harness import REPO, Etcd, _STARTED, free_port, port_accepts, tern_bin

README = REPO / "README.md"
MARKER = "<!-- walkthrough -->"
COMMAND_TIMEOUT_S = 30.0
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# The ports the walk-through uses; each is mapped to a free one.
README_PORTS = {2379, 9092, 9093, 9094, 9095, 9096, 9097, 8082, 8083, 8084, 9644, 9645, 9646}
ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")


def walkthrough_blocks(text: str) -> list[list[str]]:
    """The commands of each ```sh block that directly follows the marker line."""
    blocks = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        assert lines[i + 1].strip() == "```sh", f"README line {i + 2}: {MARKER} must precede a ```sh block"
        end = lines.index("```", i + 2)
        blocks.append(commands(lines[i + 2:end]))
    return blocks


def commands(lines: list[str]) -> list[str]:
    """Logical commands: `\\`-continued lines joined, comment-only and blank lines dropped."""
    out, current = [], ""
    for line in lines:
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line + "\n"
        if not line.endswith("\\"):
            out.append(current.rstrip("\n"))
            current = ""
    assert not current, f"a block ends in a continuation: {current!r}"
    return out


def is_background(command: str) -> bool:
    code = command.split(" #", 1)[0].rstrip()
    return code.endswith("&") and not code.endswith("&&")


@dataclass
class Ran:
    command: str
    rc: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"$ {self.command}\nrc={self.rc}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


class Walkthrough:
    """The working directory, the shell state between commands, the port map and the
    processes started for `&` commands."""

    def __init__(self, tmp: Path):
        self.work = tmp / "work"
        self.work.mkdir()
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.state = tmp / "shell-state.sh"
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        binary = tern_bin()
        assert binary.is_file(), f"tern binary not found: {binary} (set TERN_BIN)"
        (bin_dir / "tern").symlink_to(binary)
        self.etcd = Etcd(self.work / "etcd", self.logs)
        self.ports = {port: free_port() for port in README_PORTS}
        self.ports[2379] = self.etcd.client_port
        # A clean environment: none of the caller's TERN_* settings leak into the commands.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        self.env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        self.env["TERN_BOOTSTRAP"] = f"127.0.0.1:{self.ports[9092]}"
        self.env["NO_COLOR"] = "1"
        self.background: list[tuple[str, subprocess.Popen, Path]] = []

    def substitute(self, command: str) -> str:
        def port(match: re.Match) -> str:
            readme_port = int(match.group(1))
            assert readme_port in self.ports, f"README port {readme_port} is not mapped: {command}"
            return f"127.0.0.1:{self.ports[readme_port]}"
        return ADDRESS.sub(port, command)

    def script(self, command: str, exec_: bool = False) -> str:
        # `set -a`: what a command assigns is exported, so it reaches later commands
        # through the state file, as in one interactive shell.
        return (f"set -a\n[ -f {self.state} ] && . {self.state}\n"
                + ("exec " if exec_ else "") + command
                + f"\n__rc=$?\nexport -p > {self.state}\nexit $__rc\n")

    def run(self, command: str) -> Ran:
        """Runs one command to its end, or kills it (its whole process group) after
        COMMAND_TIMEOUT_S and reports rc=-9."""
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", self.script(self.substitute(command))],
                                cwd=self.work, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        _STARTED.append(proc)
        try:
            stdout, stderr = proc.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the bash this test started
            stdout, stderr = proc.communicate(timeout=5)
            stderr += f"\n(killed: still running after {COMMAND_TIMEOUT_S:.0f}s)"
        return Ran(command, proc.returncode, stdout, stderr)

    def var(self, name: str) -> str:
        return subprocess.run(["bash", "--noprofile", "--norc", "-c", f". {self.state}; printf %s \"${name}\""],
                              env=self.env, capture_output=True, text=True, timeout=10).stdout

    def start(self, command: str) -> None:
        code = command.split(" #", 1)[0].rstrip()[:-1].rstrip()
        if code.startswith("etcd "):
            self.etcd.start()
            return
        assert code.startswith("tern serve "), f"a long-running command this test cannot start: {command}"
        code = self.substitute(code)
        log = self.logs / f"serve-{len(self.background) + 1}.log"
        with open(log, "wb") as out:
            out.write(f"$ {code}\n".encode())
            out.flush()
            # `exec`: the PID tracked is the broker's own.
            proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", self.script(code, exec_=True)],
                                    cwd=self.work, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        _STARTED.append(proc)
        self.background.append((command, proc, log))
        listener = int(ADDRESS.search(code).group(1))

        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_accepts(listener):
            assert proc.poll() is None, f"`{code}` exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"`{code}` not listening on {listener} after {START_TIMEOUT_S}s"
            time.sleep(0.05)

    def stop(self) -> None:
        for _, proc, _ in reversed(self.background):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for _, proc, _ in self.background:
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.etcd.stop()

    def log_tails(self) -> str:
        return "\n".join(f"--- {log}\n{log.read_text(errors='replace')[-2500:]}" for _, _, log in self.background)


# ---- what each step shows -------------------------------------------------------------


@dataclass
class Expect:
    """The command containing `fragment`: `check(ran, walkthrough)` must hold (it raises or
    returns False otherwise). `retry_s`: a command that only reads may be retried that
    long while the cluster settles."""
    fragment: str
    check: Callable[[Ran, Walkthrough], object] = lambda ran, w: True
    retry_s: float = 0.0


def shows(*texts: str) -> Callable[[Ran, Walkthrough], bool]:
    return lambda ran, w: all(t in ran.stdout for t in texts)


def lacks(text: str) -> Callable[[Ran, Walkthrough], bool]:
    return lambda ran, w: text not in ran.stdout


def both(*checks):
    return lambda ran, w: all(c(ran, w) for c in checks)


def three_brokers(ran: Ran, w: Walkthrough) -> bool:
    return all(f"127.0.0.1:{w.ports[p]}" in ran.stdout for p in (9092, 9094, 9096))


def full_isr(ran: Ran, w: Walkthrough) -> bool:
    """Every partition of `tern topic describe` (PARTITION LEADER REPLICAS ISR ...) has all
    three brokers in its ISR: the followers log in to their leaders as `broker`."""
    rows = [line.split() for line in ran.stdout.splitlines() if line[:1].isdigit()]
    return len(rows) == 3 and all(sorted(row[3].split(",")) == ["1", "2", "3"] for row in rows)


def file_exists(name: str):
    return lambda ran, w: (w.work / name).is_file()


def numeric_var(name: str):
    return lambda ran, w: w.var(name).isdigit()


EXPECTED = [
    # 1. the CA and the broker certificate
    Expect("-keyout ca.key", file_exists("ca.pem")),
    Expect("-keyout server.key", file_exists("server.csr")),
    Expect("> san.ext", file_exists("san.ext")),
    Expect("-out server.pem", file_exists("server.pem")),
    # 2. etcd and three brokers
    Expect("> broker.pw", file_exists("broker.pw")),
    Expect("export TERN_ETCD=", lambda ran, w: w.var("TERN_HTTP_AUTH") == "required"),
    Expect("etcd --data-dir"),
    Expect("--node-id 1 "),
    Expect("--node-id 2 "),
    Expect("--node-id 3 "),
    Expect("tern cluster describe", three_brokers, retry_s=20),
    # 3. users
    Expect("tern user add broker"),
    Expect("tern user add alice"),
    Expect("tern user list", shows("alice", "broker")),
    # 4. ACLs, and a topic outside alice's grant
    Expect("tern acl add"),
    Expect("tern acl list", shows("User:alice", "PREFIXED", "alice.", "CREATE", "READ", "WRITE", "DESCRIBE")),
    Expect("tern topic create payroll"),
    # 5. alice over SASL_SSL
    Expect("export TERN_SASL_PASSWORD=", lambda ran, w: w.var("TERN_SASL_PASSWORD") != ""),
    Expect("tern topic create alice.orders"),
    Expect("tern topic list", both(shows("alice.orders"), lacks("payroll")), retry_s=10),
    Expect("kcat -P"),
    Expect("kcat -C", lambda ran, w: ran.stdout == "hello from kcat\n"),
    Expect("tern topic describe alice.orders", full_isr, retry_s=15),
    # 6. the HTTP API over HTTPS
    Expect("H=https://", lambda ran, w: w.var("H").startswith("https://")),
    Expect('"topic_name":"alice.orders"', numeric_var("ORDERS")),
    Expect("hello over https", shows('"status":"ok"', '"message_id":')),
    Expect("who am I?", lambda ran, w: ran.stdout.strip() == "401"),
    Expect('"topic_name":"payroll"', lambda ran, w: numeric_var("PAYROLL")(ran, w) and w.var("PAYROLL") != w.var("ORDERS")),
    Expect("a raise", lambda ran, w: ran.stdout.strip() == "403"),
]


def expectation_for(command: str) -> Expect:
    matching = [e for e in EXPECTED if e.fragment in command]
    assert len(matching) == 1, (f"{len(matching)} EXPECTED entries match this README command "
                                f"(add or sharpen one in {Path(__file__).name}):\n{command}")
    return matching[0]


def test_readme_blocks_are_marked():
    blocks = walkthrough_blocks(README.read_text())
    assert len(blocks) == 6, f"README's walk-through has {len(blocks)} marked ```sh blocks, not 6"
    assert all(blocks), "an empty walk-through block"


@pytest.mark.timeout(120)
def test_securing_tern_walkthrough_runs_as_written(tmp_path):
    blocks = walkthrough_blocks(README.read_text())
    w = Walkthrough(tmp_path)
    used: set[int] = set()
    started = time.monotonic()
    try:
        for step, block in enumerate(blocks, 1):
            for command in block:
                expect = expectation_for(command)
                assert id(expect) not in used, f"two README commands match {expect.fragment!r}"
                used.add(id(expect))
                t0 = time.monotonic()
                if is_background(command):
                    w.start(command)
                    print(f"step {step}: started in {time.monotonic() - t0:.1f}s: {command.splitlines()[0]}")
                    continue
                deadline = time.monotonic() + expect.retry_s
                while True:
                    ran = w.run(command)
                    ok = ran.rc == 0 and bool(expect.check(ran, w))
                    if ok or time.monotonic() >= deadline:
                        break
                    time.sleep(0.5)
                assert ok, f"step {step} of the walk-through does not show what it should:\n{ran}"
                print(f"step {step}: ok in {time.monotonic() - t0:.1f}s: {command.splitlines()[0]}")
                for line in ran.stdout.splitlines()[:12]:
                    print(f"    | {line}")
        missing = [e.fragment for e in EXPECTED if id(e) not in used]
        assert not missing, f"steps this test expects but the README no longer has: {missing}"
        print(f"walk-through ran in {time.monotonic() - started:.1f}s")
    except BaseException:
        print(w.log_tails())
        raise
    finally:
        w.stop()
