"""grafana/: the dashboard reads only metrics the broker exports, every query parses in
Prometheus and returns data from a broker that has served traffic, legends name labels
the results carry, and the layout and provisioning files hang together."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import broker_metrics
from opslib import (DASHBOARD, DEPLOY, GRAFANA, base_name, dashboard_exprs, dashboard_panels, label_values_query,
                    metric_constants, metric_names, selectors, substitute_grafana_vars, variable_queries,
                    wait_until)

DASH = json.loads(DASHBOARD.read_text())
EXPRS = dashboard_exprs(DASH)
VARIABLES = variable_queries(DASH)
ALERTS = yaml.safe_load((DEPLOY / "tern-alerts.yml").read_text())
ALERT_EXPRS = [(r["alert"], r["expr"]) for g in ALERTS["groups"] for r in g["rules"]]
# Prometheus makes these itself for every target; alerts may use them, the dashboard does not.
PROMETHEUS_OWN = {"up"}


def _ids(items):
    return [f"{i}:{title}" for i, (title, *_rest) in enumerate(items)]


def test_dashboard_has_queries():
    assert len(EXPRS) >= 30, "the dashboard lost most of its queries"
    assert {"job", "instance", "topic", "group"} <= {name for name, _ in VARIABLES}


def dashboard_metric_names() -> set[str]:
    names = set()
    for _, _, target in EXPRS:
        names |= metric_names(target["expr"])
    for _, q in VARIABLES:
        selector, _label = label_values_query(q)
        names |= metric_names(substitute_grafana_vars(selector))
    return names


@pytest.fixture(scope="module")
def exported_under_load(broker, traffic, prometheus):
    """Sample names in the broker's own /metrics output once the traffic has been sampled."""
    want = set(metric_constants().values())

    def names():
        got = {n for n, _, _ in broker_metrics(broker)}
        return got if {base_name(n) for n in got} >= want else None

    try:
        return wait_until(names, timeout=20, interval=0.5, what="every metric in /metrics")
    except AssertionError:
        return {n for n, _, _ in broker_metrics(broker)}


def test_dashboard_uses_only_metrics_the_broker_exports(exported_under_load):
    constants = set(metric_constants().values())
    names = dashboard_metric_names()
    unknown = sorted(n for n in names if base_name(n) not in constants and n not in constants)
    assert not unknown, f"dashboard metrics that src/metrics.rs does not define: {unknown}"
    absent = sorted(n for n in names if n not in exported_under_load)
    assert not absent, f"dashboard metrics absent from a loaded broker's /metrics: {absent}"


def test_dashboard_covers_every_exported_metric():
    """A metric added to src/metrics.rs should get a panel."""
    used = {base_name(n) for n in dashboard_metric_names()}
    uncovered = sorted(set(metric_constants().values()) - used)
    assert not uncovered, f"exported but on no dashboard panel: {uncovered}"


def test_alert_rules_use_only_exported_metrics(exported_under_load):
    for alert, expr in ALERT_EXPRS:
        for n in metric_names(expr) - PROMETHEUS_OWN:
            assert n in exported_under_load, f"alert {alert} reads {n}, which the broker does not export"


@pytest.mark.parametrize("title,panel,target", EXPRS, ids=_ids(EXPRS))
def test_panel_query_parses_and_returns_data(prometheus, traffic, title, panel, target):
    """Prometheus's own parser accepts the query (variables replaced by what "All" selects), and
    after the traffic it returns at least one series carrying every label the legend names."""
    expr = substitute_grafana_vars(target["expr"])
    status, body = prometheus.raw_query(expr)
    assert status == 200 and body.get("status") == "success", \
        f"Prometheus rejected {title!r}: {body.get('errorType')}: {body.get('error')}\n{expr}"
    legend_labels = set(re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", target.get("legendFormat", "")))

    def has_data():
        result = prometheus.query(expr)
        return result if result else None

    result = wait_until(has_data, timeout=20, interval=0.5, what=f"data for panel {title!r}: {expr}")
    for labels, _ in result:
        missing = legend_labels - set(labels)
        assert not missing, f"legend of {title!r} names {missing}, absent from result labels {labels}"


@pytest.mark.parametrize("name,query", VARIABLES, ids=[n for n, _ in VARIABLES])
def test_variable_query_finds_values(prometheus, traffic, name, query):
    selector, label = label_values_query(query)
    expr = f"count by ({label}) ({substitute_grafana_vars(selector)})"
    result = wait_until(lambda: prometheus.query(expr) or None, timeout=20, interval=0.5,
                        what=f"values for ${name}: {expr}")
    assert all(label in labels for labels, _ in result)


@pytest.mark.parametrize("alert,expr", ALERT_EXPRS, ids=[a for a, _ in ALERT_EXPRS])
def test_alert_expression_parses_in_prometheus(prometheus, alert, expr):
    status, body = prometheus.raw_query(expr)
    assert status == 200 and body.get("status") == "success", \
        f"Prometheus rejected alert {alert}: {body.get('errorType')}: {body.get('error')}"


def test_alerts_quiet_on_a_healthy_broker_except_min_isr(prometheus, traffic):
    """On the test broker only the deliberately under-min-ISR topic should fire. The disk alerts
    are left out: they describe this machine's shared disk (builds write to it; seconds of
    data extrapolated to a day mean nothing), not the broker."""
    host_disk = {"TernDiskAlmostFull", "TernDiskFillsWithinADay"}
    assert host_disk <= {a for a, _ in ALERT_EXPRS}
    prometheus.wait_value("tern_under_min_isr_partitions", lambda v: v == 1, timeout=20)
    firing = {a for a, e in ALERT_EXPRS if a not in host_disk and prometheus.query(e)}
    assert firing == {"TernUnderMinIsrPartitions"}, f"alert conditions true: {sorted(firing)}"


def test_every_query_filters_by_job_and_instance():
    """The broker selector applies to every panel: each selector carries both matchers."""
    for title, _, target in EXPRS:
        for metric, matchers in selectors(target["expr"]):
            assert 'job=~"$job"' in matchers and 'instance=~"$instance"' in matchers, \
                f"{title!r}: {metric}{{{matchers}}} ignores the job/instance variables"


def test_variables_referenced_are_defined():
    defined = {v["name"] for v in DASH["templating"]["list"]}
    builtins = {"__rate_interval", "__interval", "__range"}
    texts = [t["expr"] for _, _, t in EXPRS] + [q for _, q in VARIABLES]
    texts += [json.dumps(p.get("datasource", {})) for p in dashboard_panels(DASH)]
    used = {m[0] or m[1] for text in texts for m in re.findall(r"\$\{([a-zA-Z0-9_]+)\}|\$([a-zA-Z0-9_]+)", text)}
    assert used, "no variables used"
    assert used <= defined | builtins, f"undefined variables: {sorted(used - defined - builtins)}"


def test_dashboard_layout_and_datasources():
    assert DASH["uid"] and DASH["title"] and DASH["schemaVersion"] >= 36
    panels = dashboard_panels(DASH)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    ds_var = [v for v in DASH["templating"]["list"] if v["type"] == "datasource"]
    assert len(ds_var) == 1 and ds_var[0]["query"] == "prometheus"
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, f"{p['title']}: {g}"
        for dx in range(g["w"]):
            for dy in range(g["h"]):
                cell = (g["x"] + dx, g["y"] + dy)
                assert cell not in cells, f"{p['title']!r} overlaps {cells[cell]!r}"
                cells[cell] = p["title"]
        if p["type"] == "row":
            continue
        assert p.get("datasource") == {"type": "prometheus", "uid": "${%s}" % ds_var[0]["name"]}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), f"{p['title']}: refIds {refs}"
        for t in p["targets"]:
            assert t.get("datasource", p["datasource"]) == p["datasource"], p["title"]
    for title in ("Cluster overview", "Throughput", "Requests", "Errors and connections", "Log storage",
                  "Replication health", "Consumer groups", "Disk"):
        assert any(p["type"] == "row" and p["title"] == title for p in panels), f"no {title!r} row"


def test_latency_panels_use_histogram_quantile_per_api():
    quantile_exprs = [t["expr"] for _, _, t in EXPRS if "histogram_quantile" in t["expr"]]
    assert quantile_exprs
    for e in quantile_exprs:
        assert all(n.endswith("_bucket") for n in metric_names(e)), f"histogram_quantile over non-buckets: {e}"
        assert re.search(r"by \([^)]*\ble\b", e), f"aggregation drops the le label: {e}"
    assert any("tern_request_duration_seconds_bucket" in e for e in quantile_exprs)
    assert any(re.search(r"by \(le, api\)", e) for e in quantile_exprs), "no per-API percentile panel"


def test_provisioning_files():
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert ds["apiVersion"] == 1
    (prom,) = [d for d in ds["datasources"] if d["type"] == "prometheus"]
    assert prom["uid"] and prom["url"].startswith("http")
    scrape = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = [j for j in scrape["scrape_configs"] if j["job_name"] == "tern"]
    interval = job.get("scrape_interval", scrape["global"]["scrape_interval"])
    assert prom["jsonData"]["timeInterval"] == interval, \
        "Grafana's timeInterval must equal the tern scrape interval ($__rate_interval depends on it)"

    dash = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "tern.yml").read_text())
    assert dash["apiVersion"] == 1
    (provider,) = dash["providers"]
    assert provider["type"] == "file"
    # docker-compose mounts grafana/dashboards where the provider looks.
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    mounts = dict(v.rsplit(":", 2)[:2] if v.count(":") >= 2 else v.split(":", 1)
                  for v in compose["services"]["grafana"]["volumes"])
    assert mounts.get("../grafana/dashboards") == provider["options"]["path"]
    assert (DEPLOY / "../grafana/dashboards/tern.json").resolve() == DASHBOARD.resolve()
    # ... and the data source URL names the compose Prometheus.
    assert prom["url"] == "http://prometheus:9090" and "prometheus" in compose["services"]
