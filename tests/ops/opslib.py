"""Helpers for the ops suite: a real Prometheus process, HTTP and PromQL helpers, and
a PromQL lexer that finds the metric names an expression reads.

Only 127.0.0.1 is used; every wait is bounded. Processes started here are registered
with tern_harness so they are killed (by PID) if a test run is interrupted.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "compat"))

import tern_harness  # noqa: E402  (compat/tern_harness.py: Broker, free_port, wait_until)
from tern_harness import free_port, tern_bin, wait_until  # noqa: E402,F401

DEPLOY = REPO / "deploy"
GRAFANA = REPO / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "tern.json"
METRICS_RS = REPO / "src" / "metrics.rs"


# ---------------------------------------------------------------------------- HTTP
def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def http_post_form(url: str, form: dict, timeout: float = 10.0) -> tuple[int, dict]:
    data = urllib.parse.urlencode(form).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, {"status": "error", "error": body.decode("utf-8", "replace")}


# ---------------------------------------------------------------------------- /metrics
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> list[tuple[str, dict, float]]:
    """(name, labels, value) for every sample line of Prometheus text format."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


_DECLARATION = re.compile(r'^\s*(Counter|Gauge|Histogram)\((\w+)\) ([A-Z0-9_]+) = "([a-z0-9_]+)";$', re.M)


def metric_declarations() -> dict[str, tuple[str, str]]:
    """metric name -> (kind, unit) as src/metrics.rs's define_metrics! table declares
    them, kind in Prometheus's words (counter, gauge, histogram)."""
    return {name: (kind.lower(), unit) for kind, unit, _, name in _DECLARATION.findall(METRICS_RS.read_text())}


def metric_constants() -> dict[str, str]:
    """CONSTANT -> metric name, from src/metrics.rs (the names the broker exports)."""
    return {const: name for _, _, const, name in _DECLARATION.findall(METRICS_RS.read_text())}


def serve_env_vars(binary: Path | None = None) -> set[str]:
    """Every TERN_* variable `tern serve --help` documents."""
    out = subprocess.run([str(binary or tern_bin()), "serve", "--help"], capture_output=True, text=True,
                         timeout=20, check=True).stdout
    return set(re.findall(r"\[env: (TERN_[A-Z0-9_]+)=", out))


# ---------------------------------------------------------------------------- Prometheus
class Prometheus:
    """A real `prometheus` process on a free 127.0.0.1 port scraping the given targets every 1 s."""

    def __init__(self, workdir: Path, targets: list[str], job: str = "tern"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.job = job
        self.config_path = self.workdir / "prometheus.yml"
        self.log_path = self.workdir / "prometheus.log"
        self.config_path.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            f"  - job_name: {job}\n"
            "    static_configs:\n"
            f"      - targets: [{', '.join(repr(t) for t in targets)}]\n"
        )
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "Prometheus":
        binary = shutil.which("prometheus")
        if not binary:
            raise RuntimeError("prometheus not installed (scripts/install-test-deps.sh installs it)")
        cmd = [binary,
               f"--config.file={self.config_path}",
               f"--storage.tsdb.path={self.workdir / 'tsdb'}",
               "--storage.tsdb.retention.time=1h",
               f"--web.listen-address=127.0.0.1:{self.port}",
               "--log.level=warn"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        tern_harness._STARTED.append(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _ = http_get(self.url + "/-/ready", timeout=1)
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready within {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # -- HTTP API
    def raw_query(self, expr: str) -> tuple[int, dict]:
        return http_post_form(self.url + "/api/v1/query", {"query": expr})

    def query(self, expr: str) -> list[tuple[dict, float]]:
        """Instant vector / scalar result as [(labels, value)]; raises on any API error."""
        status, body = self.raw_query(expr)
        if status != 200 or body.get("status") != "success":
            raise AssertionError(f"query failed ({status}): {expr}\n{body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise AssertionError(f"unexpected result type {data['resultType']} for {expr}")
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def value(self, expr: str) -> float | None:
        """The single value of an expression (None when it returns no series)."""
        result = self.query(expr)
        if not result:
            return None
        assert len(result) == 1, f"{expr} returned {len(result)} series: {result}"
        return result[0][1]

    def wait_value(self, expr: str, predicate, timeout: float = 20.0, what: str = "") -> float | None:
        """Polls expr until predicate(value) holds (value None = no series). Returns the value;
        on timeout raises with the last value seen."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.value(expr)
            if predicate(last):
                return last
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what or expr}: last value {last!r} after {timeout}s ({expr})")
            time.sleep(0.5)

    def series_names(self) -> set[str]:
        status, body = http_get(self.url + "/api/v1/label/__name__/values")
        assert status == 200, body
        return set(json.loads(body)["data"])


def finite(v: float | None) -> bool:
    return v is not None and not math.isnan(v) and not math.isinf(v)


# ---------------------------------------------------------------------------- PromQL
# Enough of PromQL's lexical grammar to tell metric names from functions, aggregations,
# keywords, label names and durations.
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>\d+(?:\.\d+)?(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)
  | (?P<number>0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<var>\$\{[a-zA-Z0-9_]+\}|\$[a-zA-Z0-9_]+)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=(){}\[\],:@])
""", re.VERBOSE)

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan", "atan2", "start", "end"}
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Aggregation operators may be followed by a grouping clause instead of "(": sum by (x) (...).
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                "topk", "quantile", "limitk", "limit_ratio"}


def tokenize(expr: str) -> list[tuple[str, str]]:
    pos, out = 0, []
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot lex PromQL at {pos}: {expr[pos:pos + 30]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
    return out


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (identifiers that are not functions, aggregations,
    keywords, label names in {...} or grouping lists, or durations)."""
    toks = tokenize(expr)
    names: set[str] = set()
    i, brace, bracket = 0, 0, 0
    while i < len(toks):
        kind, text = toks[i]
        if kind == "op":
            brace += text == "{"
            brace -= text == "}"
            bracket += text == "["
            bracket -= text == "]"
        elif kind == "ident" and brace == 0 and bracket == 0:
            nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
            if text.lower() in _GROUPING and nxt == "(":
                depth = 0  # skip the label list: by (a, b)
                while i + 1 < len(toks):
                    i += 1
                    depth += toks[i][1] == "("
                    depth -= toks[i][1] == ")"
                    if depth == 0:
                        break
            elif text.lower() in KEYWORDS or text in AGGREGATIONS:
                pass
            elif nxt == "(":
                pass  # function or aggregation
            else:
                names.add(text)
        i += 1
    return names


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, text between its braces) for every metric selector in expr ('' if none)."""
    toks = tokenize(expr)
    out = []
    names = metric_names(expr)
    for i, (kind, text) in enumerate(toks):
        if kind == "ident" and text in names:
            if i + 1 < len(toks) and toks[i + 1][1] == "{":
                j = i + 2
                body = []
                while j < len(toks) and toks[j][1] != "}":
                    body.append(toks[j][1])
                    j += 1
                out.append((text, "".join(body)))
            else:
                out.append((text, ""))
    return out


def base_name(metric: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


# Grafana variables in a dashboard query -> values Prometheus can parse and that select
# everything (what "All" selects, allValue ".+").
def substitute_grafana_vars(expr: str, rate_interval: str = "1m") -> str:
    expr = re.sub(r"\$__rate_interval|\$\{__rate_interval\}|\$__interval|\$\{__interval\}|\$__range|\$\{__range\}",
                  rate_interval, expr)
    return re.sub(r"\$\{([a-zA-Z0-9_]+)\}|\$([a-zA-Z0-9_]+)", ".+", expr)


def dashboard_panels(dashboard: dict) -> list[dict]:
    """Every panel, including those nested in collapsed rows."""
    out = []
    for p in dashboard.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []) or [])
    return out


def dashboard_exprs(dashboard: dict) -> list[tuple[str, dict, dict]]:
    """(panel title, panel, target) for every PromQL target of the dashboard."""
    out = []
    for p in dashboard_panels(dashboard):
        for t in p.get("targets", []) or []:
            if "expr" in t:
                out.append((p.get("title", "?"), p, t))
    return out


def variable_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(variable name, query string) for every query variable."""
    out = []
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            if isinstance(q, dict):
                q = q.get("query", "")
            out.append((v["name"], q or v.get("definition", "")))
    return out


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", re.S)


def label_values_query(q: str) -> tuple[str, str]:
    """label_values(SELECTOR, LABEL) -> (SELECTOR, LABEL)."""
    m = _LABEL_VALUES.match(q)
    if not m:
        raise ValueError(f"not a label_values() query: {q!r}")
    return m.group(1), m.group(2)


# ---------------------------------------------------------------------------- processes
def run(cmd: list[str], timeout: float = 30.0, input: bytes | None = None, check: bool = False,
        env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], input=input, capture_output=True, timeout=timeout,
                          check=check, env=env)


class TernProcess:
    """A `tern` started with a given environment and command (for the env-file and
    Kubernetes entrypoint checks), logs in a file, stopped with SIGTERM."""

    def __init__(self, cmd: list[str], env: dict, log_path: Path, cwd: Path | None = None):
        self.log_path = Path(log_path)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([str(c) for c in cmd], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)
        tern_harness._STARTED.append(self.proc)

    def wait_http(self, url: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode} before {url} answered:\n{self.log()}")
            try:
                status, body = http_get(url, timeout=1)
                if status == 200:
                    return body
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{url} did not answer 200 within {timeout}s:\n{self.log()}")

    def terminate(self, timeout: float) -> tuple[int, float]:
        """SIGTERM; returns (exit code, seconds taken). SIGKILL and fail after timeout."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"did not exit within {timeout}s of SIGTERM:\n{self.log()}")
        return rc, time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def log(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""
