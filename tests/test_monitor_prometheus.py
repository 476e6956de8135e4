"""The Prometheus side of the in-job monitor: the shipped alerting rules and Grafana dashboard, on real tools.

promtool checks and unit-tests the rules; a real Prometheus server (tests/prometheus_server.py) scrapes
exporters serving the monitor's metric names (tests/prom_exporter_standin.py, real prometheus_client
endpoints in subprocesses), answers queries through its HTTP API, raises the shipped alerts, and parses
and answers every query of the shipped dashboard.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prom_exporter_standin import SERIES, rank_values
from prometheus_server import (  # noqa: F401
    PROMETHEUS_ENV,
    REQUIRE_ENV,
    PrometheusError,
    PrometheusServer,
    Sample,
    prometheus,
    prometheus_binary,
    promtool_binary,
)

ROOT = Path(__file__).resolve().parents[1]
MONITOR = ROOT / "src" / "commlens" / "monitor"
ALERTS = MONITOR / "prometheus-alerts.yml"
DASHBOARD = MONITOR / "grafana-dashboard.json"
ALERTS_TEST = ROOT / "tests" / "data" / "monitor" / "prometheus-alerts.test.yml"
STANDIN = ROOT / "tests" / "prom_exporter_standin.py"
JOB_ID = "job-standin-7"

# What the monitor exports (issue 15): the ranks' metrics, then the collector's.
RANK_METRICS = {
    "commlens_collectives_total",
    "commlens_collective_time_seconds_total",
    "commlens_collective_bytes_total",
    "commlens_collective_duration_seconds",
    "commlens_collective_bus_bandwidth_bytes_per_second",
    "commlens_collective_expected_ratio",
    "commlens_collective_inflight_seconds",
    "commlens_monitor_records_dropped_total",
    "commlens_monitor_window",
}
COLLECTOR_METRICS = {
    "commlens_monitor_alert",
    "commlens_monitor_alerts_total",
    "commlens_monitor_rank_lateness_seconds",
    "commlens_monitor_joined_collectives_total",
}
EXPORTED = RANK_METRICS | COLLECTOR_METRICS
ALERT_NAMES = {
    "CommlensStraggler",
    "CommlensSlowGroup",
    "CommlensSlowdown",
    "CommlensHang",
    "CommlensCollectiveBelowExpected",
    "CommlensCollectiveInFlightTooLong",
}


# -- the exporters ---------------------------------------------------------------------------


class StandinExporter:
    """One stand-in exporter process: a real prometheus_client endpoint on a loopback port it picked."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(STANDIN), "--job-id", JOB_ID, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"stand-in exporter {args} did not start: {line!r}")
        self.target = f"127.0.0.1:{int(line.split()[1])}"

    def set(self, metric: str, value: float, **labels: str) -> None:
        """Set one gauge series of this exporter (its fixed labels are added)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        words = ["set", metric, repr(value), *(f"{k}={v}" for k, v in labels.items())]
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer == "ok", answer

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def exporters() -> Iterator[dict[str, StandinExporter]]:
    """Two ranks (0 on node-a, 1 on node-b) and the collector, each serving its metrics."""
    started: dict[str, StandinExporter] = {}
    try:
        started["rank0"] = StandinExporter("--role", "rank", "--rank", "0", "--host", "node-a")
        started["rank1"] = StandinExporter("--role", "rank", "--rank", "1", "--host", "node-b")
        started["collector"] = StandinExporter("--role", "collector")
        yield started
    finally:
        for exporter in started.values():
            exporter.stop()


def _by_rank(samples: list[Sample]) -> dict[str, float]:
    return {s.labels["rank"]: s.value for s in samples}


def _has(n: int) -> Callable[[list[Sample]], bool]:
    return lambda samples: len(samples) == n


# -- the alerting rules ----------------------------------------------------------------------


def test_promtool_check_rules_accepts_the_shipped_alerts() -> None:
    result = subprocess.run(
        [promtool_binary(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in result.stdout + result.stderr


def test_every_shipped_alert_has_a_duration_a_severity_and_annotations_that_quote_its_labels() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == ALERT_NAMES
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        for field in ("summary", "description"):
            assert "{{ $labels.group }}" in rule["annotations"][field], (rule["alert"], field)
        names = set(re.findall(r"commlens_[a-z0-9_]+", rule["expr"]))
        assert names and names <= EXPORTED, rule["alert"]


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    """Each alert fires with its labels after its ``for:``, and healthy series raise none (see the test file)."""
    result = subprocess.run(
        [promtool_binary(), "test", "rules", str(ALERTS_TEST)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


# -- a real Prometheus scraping real endpoints -------------------------------------------------


def test_prometheus_scrapes_the_exporters_and_its_query_api_returns_their_values(
    prometheus: Callable[..., PrometheusServer], exporters: dict[str, StandinExporter]
) -> None:
    server = prometheus([e.target for e in exporters.values()])
    counts = server.wait_for("commlens_collectives_total", _has(2))
    assert _by_rank(counts) == {"0": rank_values(0)["commlens_collectives_total"], "1": 200.0}
    labels = {s.labels["rank"]: s.labels for s in counts}
    assert labels["1"]["host"] == "node-b" and labels["1"]["job_id"] == JOB_ID
    assert {k: labels["0"][k] for k in SERIES} == SERIES
    for metric in sorted(RANK_METRICS):
        query = f'{metric}{{job_id="{JOB_ID}", quantile=~"|0.5"}}'
        assert _by_rank(server.query(query)) == {"0": rank_values(0)[metric], "1": rank_values(1)[metric]}, metric
    p99 = server.query('commlens_collective_duration_seconds{quantile="0.99", rank="1"}')
    assert [s.value for s in p99] == [pytest.approx(rank_values(1)["commlens_collective_duration_seconds"] * 1.5)]
    # PromQL over the scraped series: the group's mean busBW, and the collector's latest rank.
    mean = server.query('avg by (group) (commlens_collective_bus_bandwidth_bytes_per_second{quantile="0.5"})')
    assert [(s.labels, s.value) for s in mean] == [({"group": "dp"}, 39.5e9)]
    late = server.wait_for("topk(1, commlens_monitor_rank_lateness_seconds)", _has(1))
    assert late[0].labels["rank"] == "3" and late[0].value == 0.002
    assert server.query("commlens_monitor_joined_collectives_total")[0].value == 400
    assert all(health == "up" for _url, health, _err in server.target_health())


def test_a_query_that_does_not_parse_is_an_error_and_stop_leaves_nothing_behind(
    prometheus: Callable[..., PrometheusServer],
) -> None:
    server = prometheus([])
    with pytest.raises(PrometheusError, match="bad_data"):
        server.query("rate(commlens_collectives_total[1m]")
    proc, folder, url = server.proc, server.dir, server.url
    assert proc is not None and folder.is_dir()
    server.stop()
    assert proc.poll() is not None and not folder.exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/-/ready", timeout=2)


@pytest.mark.parametrize("ci", [False, True])
def test_a_missing_prometheus_skips_outside_ci_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: bool) -> None:
    monkeypatch.setenv(PROMETHEUS_ENV, "/nonexistent/prometheus")
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    monkeypatch.setenv("CI", "true" if ci else "")
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="prometheus is not installed"):
        prometheus_binary()


def test_the_shipped_alerts_go_pending_and_firing_when_the_collector_raises_them(
    prometheus: Callable[..., PrometheusServer], exporters: dict[str, StandinExporter]
) -> None:
    server = prometheus([e.target for e in exporters.values()], rule_files=[ALERTS])
    assert set(server.rule_names()) == ALERT_NAMES
    server.wait_for('commlens_monitor_alert{kind="straggler"}', lambda s: [x.value for x in s] == [0.0])
    assert server.alerts() == []

    collector = exporters["collector"]
    collector.set("commlens_monitor_alert", 1, kind="straggler", group="dp", op="all_reduce", rank="3")
    collector.set("commlens_monitor_alert", 1, kind="hang", group="pp", op="send", rank="5")
    server.wait_for("ALERTS", _has(2))
    alerts = {a.labels["alertname"]: a for a in server.alerts()}
    assert set(alerts) == {"CommlensStraggler", "CommlensHang"}
    assert alerts["CommlensHang"].state == "firing"  # for: 0m
    assert alerts["CommlensStraggler"].state == "pending"  # for: 1m
    assert alerts["CommlensStraggler"].annotations["summary"] == (
        f"Straggler: rank 3 in group dp (all_reduce) of job {JOB_ID}"
    )
    hang = alerts["CommlensHang"].labels
    assert (hang["severity"], hang["group"], hang["op"], hang["rank"], hang["job_id"]) == (
        "critical",
        "pp",
        "send",
        "5",
        JOB_ID,
    )

    # A rank whose oldest collective is 10 minutes old, from the ranks' own series.
    exporters["rank1"].set("commlens_collective_inflight_seconds", 600, group="dp")
    server.wait_for('ALERTS{alertname="CommlensCollectiveInFlightTooLong", rank="1", host="node-b"}', _has(1))

    collector.set("commlens_monitor_alert", 0, kind="hang", group="pp", op="send", rank="5")
    server.wait_for('ALERTS{alertname="CommlensHang"}', _has(0))


# -- the Grafana dashboard ---------------------------------------------------------------------

# The dashboard's variables, as a query for one job over every group would see them.
VARIABLES = {"$job_id": JOB_ID, "$group": ".*"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
_KEYWORDS |= {"and", "or", "unless", "inf", "nan"}


def metric_names(promql: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions, keywords, labels or durations)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"(?<![\w.])([A-Za-z_:][\w:]*)\b(?!\s*\()", text)
    return {n for n in names if n.lower() not in _KEYWORDS}


def test_metric_names_finds_the_selected_metrics_only() -> None:
    expr = 'sum by (group, rank) (rate(commlens_collectives_total{op="all_reduce"}[1m])) / on (group) up offset 5m'
    assert metric_names(expr) == {"commlens_collectives_total", "up"}
    assert metric_names('max(commlens_monitor_window{job_id=~"a"}) - 1e3 > bool 2') == {"commlens_monitor_window"}


def _dashboard() -> dict:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def _exprs(doc: dict) -> list[str]:
    return [t["expr"] for panel in doc["panels"] for t in panel["targets"]]


def _substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_the_dashboard_is_a_grafana_dashboard_over_a_chosen_prometheus_and_job() -> None:
    doc = _dashboard()
    assert doc["uid"] and doc["title"] and isinstance(doc["schemaVersion"], int) and doc["schemaVersion"] >= 39
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["job_id"]["type"] == "query"
    assert "job_id" in variables["job_id"]["query"]["query"]
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"]) >= 7
    for panel in doc["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["refId"] and target["datasource"] == panel["datasource"], panel["title"]
            assert 'job_id=~"$job_id"' in target["expr"], panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


def test_every_dashboard_query_names_exported_metrics_only() -> None:
    doc = _dashboard()
    named: set[str] = set()
    for expr in _exprs(doc):
        names = metric_names(expr)
        assert names, expr
        assert names <= EXPORTED, (expr, names - EXPORTED)
        named |= names
    # The panels the issue asks for: busBW, duration, expectation, rate, in flight, alerts, lateness.
    assert {
        "commlens_collective_bus_bandwidth_bytes_per_second",
        "commlens_collective_duration_seconds",
        "commlens_collective_expected_ratio",
        "commlens_collectives_total",
        "commlens_collective_inflight_seconds",
        "commlens_monitor_alert",
        "commlens_monitor_rank_lateness_seconds",
    } <= named
    assert any("rate(commlens_collectives_total{" in expr and "[1m])" in expr for expr in _exprs(doc))


def test_every_dashboard_query_parses_and_answers_on_a_real_prometheus(
    prometheus: Callable[..., PrometheusServer], exporters: dict[str, StandinExporter]
) -> None:
    server = prometheus([e.target for e in exporters.values()])
    exporters["collector"].set("commlens_monitor_alert", 1, kind="straggler", group="dp", op="all_reduce", rank="3")
    queries = [_substitute(expr) for expr in _exprs(_dashboard())]
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    job_values = server.wait_for(
        "count by (job_id) (commlens_monitor_window)", lambda s: len(s) == 1
    )  # what label_values(commlens_monitor_window, job_id) offers
    assert "commlens_monitor_window" in variables["job_id"]["query"]["query"]
    assert job_values[0].labels == {"job_id": JOB_ID}
    for query in queries:
        # rate() and increase() need two scrapes in their range: wait until every panel has data.
        samples = server.wait_for(query, lambda s: len(s) > 0, timeout_s=20)
        assert all(s.value == s.value for s in samples), query  # no NaN
    alerts = server.query(_substitute(next(e for e in _exprs(_dashboard()) if "commlens_monitor_alert{" in e)))
    assert [(s.labels["kind"], s.labels["rank"]) for s in alerts] == [("straggler", "3")]
