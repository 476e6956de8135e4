"""The Grafana dashboard over the PostgreSQL store (src/commlens/serve/grafana-dashboard.json).

Its SQL runs here as Grafana runs it: the template variables are interpolated as Grafana's
PostgreSQL data source does (a single value with its quotes doubled, a multi-value or "All"
selection as a quoted comma list), then the macros (``$__timeFilter``, ``$__time``, ...) are
expanded as Grafana's backend expands them, and the result goes to a real PostgreSQL store
holding saved runs and change points. The rows must be the ones a user expects to see.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session
from store_backends import make_run, make_system, pg_server, pg_url  # noqa: F401 - fixtures

import commlens
from commlens.results import Run
from commlens.store import Store
from commlens.store.models import ChangePointModel

DASHBOARD = Path(commlens.__file__).parent / "serve" / "grafana-dashboard.json"
DATASOURCE = {"type": "grafana-postgresql-datasource", "uid": "${datasource}"}
ALL = "$__all"  # what Grafana stores as the value of a variable's "All" option

SYSTEM_A = make_system()
SYSTEM_B = make_system(cpu_model="Epyc")
FP_A = SYSTEM_A.fingerprint()
FP_B = SYSTEM_B.fingerprint()
T0 = datetime(2024, 3, 1, 12, 0, 0)
WINDOW = (datetime(2024, 2, 15, tzinfo=timezone.utc), datetime(2024, 4, 15, tzinfo=timezone.utc))


def _dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _variables(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in doc["templating"]["list"]}


def _panel_sql(doc: Mapping[str, Any], title: str) -> str:
    (panel,) = [p for p in doc["panels"] if p["title"] == title]
    (target,) = panel["targets"]
    return str(target["rawSql"])


def _annotation_sql(doc: Mapping[str, Any], name: str) -> str:
    (annotation,) = [a for a in doc["annotations"]["list"] if a["name"] == name]
    return str(annotation["target"]["rawSql"])


def _all_sql(doc: Mapping[str, Any]) -> list[str]:
    """Every SQL text of the dashboard: panels' targets, variables' queries, annotations."""
    sql = [t["rawSql"] for p in doc["panels"] for t in p["targets"]]
    sql += [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    sql += [a["target"]["rawSql"] for a in doc["annotations"]["list"] if not a.get("builtIn")]
    return sql


# -- Grafana's interpolation, as its PostgreSQL data source does it ---------------------------------

# Grafana's variable syntaxes: $name, ${name}, [[name]] (formats after ':' are not used here).
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}|\[\[(\w+)\]\]")
# Grafana's backend macro syntax: $__name(args)
_MACRO = re.compile(r"\$(__[A-Za-z0-9_]+)\(([^)]*)\)")


def _grafana_time(t: datetime) -> str:
    """Go's time.RFC3339Nano of a UTC time, as the macros print it: no trailing zeros in the fraction."""
    t = t.astimezone(timezone.utc)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        text += ("." + f"{t.microsecond:06d}").rstrip("0")
    return text + "Z"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def interpolate(sql: str, variables: Mapping[str, dict[str, Any]], selected: Mapping[str, Sequence[str]]) -> str:
    """Template variables as Grafana's PostgreSQL data source renders them (its ``interpolateVariable``)."""

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g is not None)
        if name not in selected:
            if name.startswith("__"):
                return match.group(0)  # a macro: the backend expands it
            raise AssertionError(f"variable ${name} has no value: {sql}")
        spec = variables[name]
        values = selected[name]
        if spec.get("multi") or spec.get("includeAll"):
            return ",".join(_quote(v) for v in values)
        (single,) = values
        return single.replace("'", "''")

    return _VARIABLE.sub(value, sql)


def expand_macros(sql: str, time_from: datetime, time_to: datetime) -> str:
    """Grafana's PostgreSQL macros, as its backend's macro engine expands them."""

    def macro(match: re.Match[str]) -> str:
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",")]
        if name == "__time":
            return f'{args[0]} AS "time"'
        if name == "__timeEpoch":
            return f'extract(epoch from {args[0]}) as "time"'
        if name == "__timeFilter":
            return f"{args[0]} BETWEEN '{_grafana_time(time_from)}' AND '{_grafana_time(time_to)}'"
        if name == "__timeFrom":
            return f"'{_grafana_time(time_from)}'"
        if name == "__timeTo":
            return f"'{_grafana_time(time_to)}'"
        if name in ("__timeGroup", "__timeGroupAlias"):
            seconds = _interval_s(args[1].strip("'"))
            group = f"floor(extract(epoch from {args[0]})/{seconds})*{seconds}"
            return group + (' AS "time"' if name == "__timeGroupAlias" else "")
        if name == "__unixEpochFilter":
            return f"{args[0]} >= {int(time_from.timestamp())} AND {args[0]} <= {int(time_to.timestamp())}"
        raise AssertionError(f"Grafana has no PostgreSQL macro ${name}")

    return _MACRO.sub(macro, sql)


def _interval_s(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([smhdw])", text).groups()  # type: ignore[union-attr]
    return int(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]


@dataclass
class GrafanaView:
    """The dashboard as a Grafana user sees it: a time range and a selection of each variable."""

    store: Store
    doc: dict[str, Any]
    time_from: datetime = WINDOW[0]
    time_to: datetime = WINDOW[1]

    def rows(self, sql: str, selected: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
        """Run one dashboard query as Grafana would, in a read-only transaction; rows as dicts."""
        text = expand_macros(interpolate(sql, _variables(self.doc), selected), self.time_from, self.time_to)
        assert "$" not in text, text
        raw = self.store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("START TRANSACTION READ ONLY")
            cursor.execute(text)  # no parameters: '%' stays SQL's modulo, as in Grafana's pgx
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, row)) for row in cursor.fetchall()]
            cursor.execute("ROLLBACK")
            return rows
        finally:
            raw.close()

    def options(self, name: str, selected: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
        """A query variable's options (text, value) as Grafana builds them: ``__text``/``__value`` columns,
        else the first column for both."""
        result = []
        for row in self.rows(_variables(self.doc)[name]["query"], selected):
            value = row.get("__value", next(iter(row.values())))
            result.append((str(row.get("__text", value)), str(value)))
        return result

    def select(self, **choice: str | Sequence[str]) -> dict[str, list[str]]:
        """Resolve a selection in the variables' order, each "All" to every option its query offers."""
        resolved: dict[str, list[str]] = {}
        for spec in self.doc["templating"]["list"]:
            name = spec["name"]
            if spec["type"] == "datasource":
                continue
            wanted = choice.get(name, ALL)
            if wanted == ALL:
                assert spec["includeAll"], f"${name} has no All option"
                resolved[name] = [value for _text, value in self.options(name, resolved)]
            else:
                resolved[name] = [wanted] if isinstance(wanted, str) else list(wanted)
        return resolved


# -- the store Grafana reads -----------------------------------------------------------------------


def _runs() -> list[Run]:
    runs = [
        # main on system A: 12 runs at one level, then 12 at +20 % (from revision r12 on)
        make_run(
            f"main-{i:02d}",
            tag="main",
            started_at=(T0 + timedelta(days=i)).isoformat() + "Z",
            ops=("all_reduce", "all_gather"),
            revision=f"r{i:02d}",
            system=SYSTEM_A,
            scale=1.0 if i < 12 else 1.2,
        )
        for i in range(24)
    ]
    runs += [
        make_run(
            f"untagged-{i}",
            started_at=(T0 + timedelta(days=i, hours=6)).isoformat() + "Z",
            system=SYSTEM_A,
        )
        for i in range(3)
    ]
    runs += [
        make_run(f"other-{i}", tag="main", started_at=(T0 + timedelta(days=i)).isoformat() + "Z", system=SYSTEM_B)
        for i in range(2)
    ]
    # Before the time window, and one whose results check failed: neither is plotted.
    runs.append(make_run("old", tag="main", started_at="2023-06-01T00:00:00Z", system=SYSTEM_A))
    failed = make_run("failed", tag="main", started_at=(T0 + timedelta(days=3, hours=1)).isoformat() + "Z", scale=9.0)
    runs.append(dataclasses.replace(failed, status="check_failed"))
    return runs


def _change(
    fingerprint: str,
    tag: str,
    size_bytes: int,
    at: int,
    before_s: float,
    after_s: float,
    *,
    op: str = "all_reduce",
    started_at: datetime | None = None,
    group: str = "",
) -> ChangePointModel:
    return ChangePointModel(
        fingerprint=fingerprint,
        tag=tag,
        op=op,
        algo="builtin",
        dtype="float32",
        redop="sum" if op == "all_reduce" else "none",
        root=-1,
        size_bytes=size_bytes,
        in_place=False,
        group_name=group,
        run_id=f"{tag or 'untagged'}-{at:02d}",
        started_at_utc=started_at or T0 + timedelta(days=at),
        revision=f"r{at:02d}" if tag == "main" else None,
        previous_run_id=f"{tag or 'untagged'}-{at - 1:02d}",
        previous_revision=f"r{at - 1:02d}" if tag == "main" else None,
        mean_before_s=before_s,
        mean_after_s=after_s,
        change=after_s / before_s - 1.0,
        p_value=0.001,
        direction="regression" if after_s > before_s else "improvement",
        detected_at="2024-04-01T00:00:00+00:00",
    )


@pytest.fixture
def view(pg_url: str) -> Iterator[GrafanaView]:  # noqa: F811 - the fixture imported above
    store = Store.open(pg_url)
    try:
        store.save_runs(_runs())
        with Session(store.engine) as session, session.begin():
            session.add_all(
                [
                    _change(FP_A, "main", 1024, 12, 15e-6, 18e-6),
                    _change(FP_A, "main", 4096, 12, 15e-6, 18e-6),
                    _change(FP_A, "", 1024, 2, 15e-6, 12e-6),  # an improvement of the untagged series
                    _change(FP_A, "main", 1024, 1, 18e-6, 15e-6, started_at=datetime(2023, 6, 1)),  # before the window
                    _change(FP_B, "main", 1024, 1, 15e-6, 30e-6),  # another system
                    _change(FP_A, "main", 1024, 5, 10e-6, 11e-6, group="tp"),  # a live job's group
                ]
            )
        yield GrafanaView(store, _dashboard())
    finally:
        store.close()


# -- the dashboard's structure -----------------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard_over_a_chosen_postgresql_data_source() -> None:
    doc = _dashboard()
    assert doc["uid"] and doc["title"] and isinstance(doc["schemaVersion"], int) and doc["schemaVersion"] >= 39
    variables = _variables(doc)
    assert list(variables) == ["datasource", "fingerprint", "tag", "op", "dtype", "size_bytes"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "grafana-postgresql-datasource"
    for name in ("fingerprint", "tag", "op", "dtype", "size_bytes"):
        spec = variables[name]
        assert spec["type"] == "query" and spec["datasource"] == DATASOURCE, name
        assert spec["query"].lstrip().upper().startswith("SELECT"), name
        assert spec["definition"] == spec["query"], name
    assert not variables["fingerprint"]["multi"] and not variables["fingerprint"]["includeAll"]
    assert all(variables[n]["multi"] and variables[n]["includeAll"] for n in ("tag", "op", "dtype", "size_bytes"))
    ids = [p["id"] for p in doc["panels"]]
    assert len(set(ids)) == len(ids) >= 4
    for panel in doc["panels"]:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["refId"], panel["title"]
            assert target["rawQuery"] is True and target["editorMode"] == "code", panel["title"]
            assert target["format"] == ("time_series" if panel["type"] == "timeseries" else "table"), panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
    annotations = [a for a in doc["annotations"]["list"] if not a.get("builtIn")]
    assert {a["name"] for a in annotations} == {"Regressions", "Improvements"}
    for annotation in annotations:
        assert annotation["datasource"] == DATASOURCE and annotation["enable"], annotation["name"]
        assert "change_points" in annotation["target"]["rawSql"], annotation["name"]
    units = {p["title"]: p["fieldConfig"]["defaults"].get("unit") for p in doc["panels"] if p["type"] == "timeseries"}
    assert sorted(units.values()) == ["GBs", "µs"]  # Grafana's unit ids: GB/s (SI, as busBW) and microseconds


def test_every_variable_a_query_uses_is_defined_before_it_and_every_macro_is_grafanas() -> None:
    doc = _dashboard()
    order = [v["name"] for v in doc["templating"]["list"]]
    known_macros = {
        "__time",
        "__timeEpoch",
        "__timeFilter",
        "__timeFrom",
        "__timeTo",
        "__timeGroup",
        "__timeGroupAlias",
    }
    used_anywhere: set[str] = set()
    for sql in _all_sql(doc):
        names = {next(g for g in m.groups() if g) for m in _VARIABLE.finditer(sql)}
        macros = {m.group(1) for m in _MACRO.finditer(sql)}
        assert macros <= known_macros, (sql, macros - known_macros)
        variables = {n for n in names if not n.startswith("__")}
        assert variables <= set(order), (sql, variables - set(order))
        used_anywhere |= variables
    assert used_anywhere == set(order) - {"datasource"}
    # A variable's query may only use the variables above it (Grafana refreshes them in that order).
    for position, spec in enumerate(doc["templating"]["list"]):
        if spec["type"] == "query":
            names = {next(g for g in m.groups() if g) for m in _VARIABLE.finditer(spec["query"])}
            assert names <= set(order[:position]), (spec["name"], names)
    # Every panel over runs plots only the selected time range; so does every change-point query.
    for sql in _all_sql(doc):
        if "FROM runs r\nJOIN measurements" in sql:
            assert "$__timeFilter(r.started_at_utc)" in sql
        if "FROM change_points" in sql:
            assert "$__timeFilter(cp.started_at_utc)" in sql


def test_grafana_interpolation_here_quotes_as_grafana_does() -> None:
    variables = {"one": {"multi": False, "includeAll": False}, "many": {"multi": True, "includeAll": True}}
    sql = "x = '$one' AND y IN ($many) AND z IN (${many}) AND $__timeFilter(t)"
    got = interpolate(sql, variables, {"one": ["it's"], "many": ["a", "b'c"]})
    assert got == "x = 'it''s' AND y IN ('a','b''c') AND z IN ('a','b''c') AND $__timeFilter(t)"
    start, end = datetime(2024, 5, 1, tzinfo=timezone.utc), datetime(2024, 5, 2, 3, 4, 5, 500000, tzinfo=timezone.utc)
    assert (
        expand_macros("$__timeFilter(t) AND $__time(t)", start, end)
        == "t BETWEEN '2024-05-01T00:00:00Z' AND '2024-05-02T03:04:05.5Z' AND t AS \"time\""
    )


# -- its SQL against a real PostgreSQL store ---------------------------------------------------------------


def test_the_variables_offer_the_stored_systems_tags_ops_dtypes_and_sizes(view: GrafanaView) -> None:
    assert view.options("fingerprint", {}) == [(fp, fp) for fp in sorted([FP_A, FP_B])]
    chosen = {"fingerprint": [FP_A]}
    assert sorted(view.options("tag", chosen)) == [("(untagged)", "(untagged)"), ("main", "main")]
    assert view.options("tag", {"fingerprint": [FP_B]}) == [("main", "main")]
    assert view.options("op", {**chosen, "tag": ["main"]}) == [
        ("all_gather", "all_gather"),
        ("all_reduce", "all_reduce"),
    ]
    assert view.options("op", {**chosen, "tag": ["(untagged)"]}) == [("all_reduce", "all_reduce")]
    chosen = {**chosen, "tag": ["main"], "op": ["all_reduce"]}
    assert view.options("dtype", chosen) == [("float32", "float32")]
    # Sizes in commlens' notation, in numeric order.
    assert view.options("size_bytes", {**chosen, "dtype": ["float32"]}) == [("1K", "1024"), ("4K", "4096")]


def test_the_time_panel_plots_each_run_of_the_series_in_the_window(view: GrafanaView) -> None:
    sql = _panel_sql(view.doc, "Mean time per run (µs)")
    rows = view.rows(sql, view.select(fingerprint=FP_A, tag="main", op="all_reduce", size_bytes="1024"))
    # 24 runs of main in the window; the run before it and the run whose check failed are left out.
    assert [r["time"] for r in rows] == [T0 + timedelta(days=i) for i in range(24)]
    assert {r["metric"] for r in rows} == {"main all_reduce 1K float32"}
    assert [round(r["mean µs"], 6) for r in rows] == [15.0] * 12 + [18.0] * 12
    # "All" of every variable: both tags, both ops, both sizes; one series each.
    rows = view.rows(sql, view.select(fingerprint=FP_A))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["metric"]] = counts.get(r["metric"], 0) + 1
    assert counts == {
        "main all_reduce 1K float32": 24,
        "main all_reduce 4K float32": 24,
        "main all_gather 1K float32": 24,
        "main all_gather 4K float32": 24,
        "(untagged) all_reduce 1K float32": 3,
        "(untagged) all_reduce 4K float32": 3,
    }
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)  # Grafana needs time order
    # A narrower time range: only the runs inside it.
    narrow = GrafanaView(
        view.store, view.doc, datetime(2024, 3, 10, tzinfo=timezone.utc), datetime(2024, 3, 15, tzinfo=timezone.utc)
    )
    rows = narrow.rows(sql, narrow.select(fingerprint=FP_A, tag="main", op="all_reduce", size_bytes="1024"))
    assert [r["time"].day for r in rows] == [10, 11, 12, 13, 14]


def test_the_bandwidth_panel_plots_each_runs_busbw_in_gb_per_s(view: GrafanaView) -> None:
    sql = _panel_sql(view.doc, "Bus bandwidth per run (GB/s)")
    rows = view.rows(sql, view.select(fingerprint=FP_A, tag="main", op="all_gather", size_bytes="4096"))
    runs = {r.run_id: r for r in _runs()}
    expected = [
        next(m for m in runs[f"main-{i:02d}"].measurements if m.op == "all_gather" and m.size_bytes == 4096)
        for i in range(24)
    ]
    assert [r["time"] for r in rows] == [T0 + timedelta(days=i) for i in range(24)]
    assert [r["busBW GB/s"] for r in rows] == pytest.approx([m.busbw_bytes_per_s / 1e9 for m in expected])
    assert {r["metric"] for r in rows} == {"main all_gather 4K float32"}
    assert rows[0]["busBW GB/s"] == pytest.approx(rows[-1]["busBW GB/s"] * 1.2)  # the +20 % time is -1/6 busBW


def test_the_annotations_are_the_stored_change_points_in_the_window_with_their_means(view: GrafanaView) -> None:
    regressions = _annotation_sql(view.doc, "Regressions")
    improvements = _annotation_sql(view.doc, "Improvements")
    one_series = view.select(fingerprint=FP_A, tag="main", op="all_reduce", size_bytes="1024")
    rows = view.rows(regressions, one_series)
    assert rows == [
        {
            "time": T0 + timedelta(days=5),
            "text": "main all_reduce 1K float32 on tp: 10.00 µs -> 11.00 µs (+10.0 %), regression at r05 (from r04)",
            "tags": "regression",
        },
        {
            "time": T0 + timedelta(days=12),
            "text": "main all_reduce 1K float32: 15.00 µs -> 18.00 µs (+20.0 %), regression at r12 (from r11)",
            "tags": "regression",
        },
    ]
    # The improvement of main is before the window; the untagged one is not selected.
    assert view.rows(improvements, one_series) == []
    everything = view.select(fingerprint=FP_A)
    assert [r["text"].split(":")[0] for r in view.rows(regressions, everything)] == [
        "main all_reduce 1K float32 on tp",
        "main all_reduce 1K float32",
        "main all_reduce 4K float32",
    ]
    assert view.rows(improvements, everything) == [
        {
            "time": T0 + timedelta(days=2),
            "text": "(untagged) all_reduce 1K float32: 15.00 µs -> 12.00 µs (-20.0 %), improvement at untagged-02"
            " (from untagged-01)",
            "tags": "improvement",
        }
    ]
    # A window reaching back to 2023 shows main's earlier improvement too.
    wide = GrafanaView(view.store, view.doc, datetime(2023, 1, 1, tzinfo=timezone.utc), WINDOW[1])
    assert [r["time"] for r in wide.rows(improvements, one_series)] == [datetime(2023, 6, 1)]
    # The other system's regression appears under its own fingerprint only.
    other = view.select(fingerprint=FP_B)
    assert [r["text"] for r in view.rows(regressions, other)] == [
        "main all_reduce 1K float32: 15.00 µs -> 30.00 µs (+100.0 %), regression at r01 (from r00)"
    ]


def test_the_tables_list_the_series_changes_and_the_systems_recent_regressions(view: GrafanaView) -> None:
    series = view.rows(
        _panel_sql(view.doc, "Change points of the selected series"),
        view.select(fingerprint=FP_A, tag="main", op="all_reduce", size_bytes="1024"),
    )
    assert [(r["series"], r["change (%)"], r["revision"], r["from revision"]) for r in series] == [
        ("main all_reduce 1K float32", 20.0, "r12", "r11"),
        ("main all_reduce 1K float32 on tp", 10.0, "r05", "r04"),
    ]
    assert series[0]["before (µs)"] == 15 and series[0]["after (µs)"] == 18
    assert series[0]["first run after"] == "main-12" and series[0]["direction"] == "regression"
    # Recent regressions: every series and tag of system A, whatever op, dtype and size are selected.
    recent = view.rows(
        _panel_sql(view.doc, "Recent regressions on this system"),
        view.select(fingerprint=FP_A, tag="main", op="all_gather", size_bytes="4096"),
    )
    assert [(r["time"], r["series"]) for r in recent] == [
        (T0 + timedelta(days=12), "main all_reduce 1K float32"),
        (T0 + timedelta(days=12), "main all_reduce 4K float32"),
        (T0 + timedelta(days=5), "main all_reduce 1K float32 on tp"),
    ]
    assert {r["direction"] for r in recent} == {"regression"}


def test_the_annotations_show_what_commlens_detect_save_stored(pg_url: str) -> None:  # noqa: F811
    """End to end: runs stored, ``commlens detect --save`` run, the dashboard's annotation query answers its change."""
    rng = random.Random(3)
    runs = [
        make_run(
            f"main-{i:02d}",
            tag="main",
            started_at=(T0 + timedelta(days=i)).isoformat() + "Z",
            revision=f"r{i:02d}",
            system=SYSTEM_A,
            scale=(1.0 if i < 12 else 1.2) * (1.0 + rng.uniform(-0.003, 0.003)),
        )
        for i in range(24)
    ]
    with Store.open(pg_url) as store:
        store.save_runs(runs)
    done = subprocess.run(
        [sys.executable, "-m", "commlens", "detect", "--db", pg_url, "--save"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: regressions found
    with Store.open(pg_url) as store:
        view = GrafanaView(store, _dashboard())
        selected = view.select(fingerprint=FP_A, tag="main", op="all_reduce")
        rows = view.rows(_annotation_sql(view.doc, "Regressions"), selected)
        assert view.rows(_annotation_sql(view.doc, "Improvements"), selected) == []
    # One change per size, at the first slower run.
    assert [r["time"] for r in rows] == [T0 + timedelta(days=12)] * 2
    for row, size in zip(rows, (1024, 4096), strict=True):
        means = [next(m for m in r.measurements if m.size_bytes == size).stats.mean_s for r in runs]
        before, after = sum(means[:12]) / 12, sum(means[12:]) / 12
        assert row["text"] == (
            f"main all_reduce {size // 1024}K float32: {_sql_round(before * 1e6, 2)} µs -> {_sql_round(after * 1e6, 2)} µs "
            f"(+{_sql_round((after / before - 1) * 100, 1)} %), regression at r12 (from r11)"
        )
        assert row["tags"] == "regression"


def _sql_round(value: float, decimals: int) -> str:
    """PostgreSQL's round(float8::numeric, n): 15 significant digits, then halves away from zero."""
    return str(Decimal(f"{value:.15g}").quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))
