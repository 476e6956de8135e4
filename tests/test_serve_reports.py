"""Diagnoses, projections and live jobs: reports in the store, ``--save`` and ``commlens reports``, their API and
pages (the app in-process over SQLite and a real PostgreSQL), and the live page over a real monitor endpoint.

The documents are what the real commands print: ``diagnose stragglers`` on a recorded trace, ``diagnose hang``
on recorded Flight Recorder dumps, ``project sweep`` and ``project``; the links diagnosis is the library's own
analysis of measurement records with one slowed link.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from benchutil import commlens, error_lines
from fastapi.testclient import TestClient
from store_backends import pg_server, pg_url, store_url  # noqa: F401 - fixtures

from commlens.diagnose.links import diagnose_links
from commlens.serve.app import create_app
from commlens.serve.config import ServeConfig
from commlens.store import Store, db_url
from commlens.store.reports import (
    MAX_FILE_BYTES,
    MAX_PAYLOAD_BYTES,
    ReportError,
    ReportNotFoundError,
    default_title,
)

DATA = Path(__file__).parent / "data"
TRACES = sorted(str(p) for p in (DATA / "stragglers_late_rank1").glob("trace_rank*.json"))
HANG = DATA / "hang_hang"
SWEEP = ("project", "sweep", "llama3-8b", "-t", "dgx-h100", "-n", "64", "--vary", "layout.tp=1,2,4,8")
SWEEP_VARY_BATCH = ("--vary", "workload.global_batch=256,512", "--workers", "1")
PROJECT = ("project", "llama3-8b", "-t", "dgx-h100", "-n", "64", "--tp", "2")
BASE = "http://127.0.0.1:8765"
SAVED = re.compile(r"saved (\w+) report ([0-9a-f]{32}) in ")


# -- documents from the real commands --------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each command run once with ``--json --save``: its exit code, the document it printed, the id it saved."""
    db = tmp_path_factory.mktemp("saved") / "results.db"
    commands = {
        "stragglers": ("diagnose", "stragglers", *TRACES),
        "hang": ("diagnose", "hang", str(HANG)),
        "sweep": (*SWEEP, *SWEEP_VARY_BATCH),
        "projection": PROJECT,
    }
    out: dict[str, Any] = {"db": db}
    for kind, args in commands.items():
        proc = commlens(*args, "--json", "--save", "--db", str(db))
        found = SAVED.search(proc.stderr)
        assert found and found.group(1) == kind, proc.stderr
        out[kind] = {"code": proc.returncode, "doc": json.loads(proc.stdout), "id": found.group(2)}
    return out


def links_document() -> dict[str, Any]:
    """The links diagnosis of 4 hosts whose link 1-2 runs at a third of the others' 1 GB/s (3 passes)."""
    size = 1 << 22
    records: list[dict[str, Any]] = []
    for p in range(3):
        for a in range(4):
            for b in range(4):
                if a == b:
                    continue
                rate = 0.33e9 if {a, b} == {1, 2} else 1e9
                times = [size / rate * (1 + 0.01 * k) for k in range(3)]
                latency = [2e-5 + 1e-6 * (a + b)] * 3
                records.append(
                    {"kind": "pair", "pass": p, "round": 0, "rank": a, "peer": b, "size_bytes": size}
                    | {"times_s": times, "latency_s": latency}
                )
    for r in range(4):
        records.append({"kind": "ring", "rank": r, "size_bytes": size, "times_s": [size / 0.33e9] * 3})
    doc = json.loads(json.dumps(diagnose_links(records, 4).to_dict()))
    assert [(f["kind"], f["hosts"]) for f in doc["faults"]] == [("slow_link", [1, 2])]
    return doc


# -- the store --------------------------------------------------------------------------------------------


def test_reports_are_kept_listed_newest_first_by_kind_and_read_back_whole(
    store_url: str,  # noqa: F811 - fixture
    saved: dict[str, Any],
) -> None:
    links = links_document()
    with Store.open(store_url) as store:
        ids = {}
        for kind in ("links", "stragglers", "hang", "sweep", "projection"):
            doc = links if kind == "links" else saved[kind]["doc"]
            ids[kind] = store.reports.save(kind, f"the {kind} one", doc, fingerprint="0123456789abcdef")
            time.sleep(0.002)  # distinct creation times: "newest first" is then one order
        listed = store.reports.list()
        assert [r.kind for r in listed] == ["projection", "sweep", "hang", "stragglers", "links"]
        assert [r.kind for r in store.reports.list(("links", "hang"))] == ["hang", "links"]
        assert [r.kind for r in store.reports.list(limit=2, offset=1)] == ["sweep", "hang"]
        assert store.reports.count() == 5 and store.reports.count("sweep") == 1
        back = store.reports.get(ids["sweep"])
        assert back.payload == saved["sweep"]["doc"]
        assert back.summary.title == "the sweep one" and back.summary.fingerprint == "0123456789abcdef"
        assert store.reports.get(ids["links"]).payload == links
        with pytest.raises(ReportNotFoundError, match="no report 0{32}"):
            store.reports.get("0" * 32)
        with pytest.raises(ReportNotFoundError, match="not a report id"):
            store.reports.get("../etc/passwd")
        with pytest.raises(ReportError, match="report kind 'bogus'"):
            store.reports.list("bogus")


def test_a_document_not_of_its_kind_is_refused_naming_the_field_and_nothing_is_kept(
    tmp_path: Path, saved: dict[str, Any]
) -> None:
    stragglers = saved["stragglers"]["doc"]
    bad_rank = json.loads(json.dumps(stragglers))
    bad_rank["rows"][1]["rank"] = "1"
    nan = json.loads(json.dumps(saved["sweep"]["doc"]))
    nan["rows"][2]["mfu"] = float("nan")
    huge = {"rows": [{"layout.tp": 1, "error": "x" * (MAX_PAYLOAD_BYTES + 1), "kind": "memory"}], "best": []}
    huge["infeasible"] = {}
    cases = [
        ("sweep", stragglers, "not a sweep document (commlens project sweep --json): document: no field 'best'"),
        ("stragglers", bad_rank, "document.rows[1].rank: expected an integer, got str"),
        ("sweep", nan, "document.rows[2].mfu: nan is not a finite number"),
        ("sweep", huge, "over the 16 MiB a report keeps"),
        ("links", {"hosts": 2}, "document: no field 'format'"),
        ("bogus", stragglers, "report kind 'bogus': expected one of links, stragglers, hang, projection, sweep"),
    ]
    with Store.open(db_url(str(tmp_path / "r.db"))) as store:
        for kind, doc, message in cases:
            with pytest.raises(ReportError, match=re.escape(message)):
                store.reports.save(kind, "t", doc)
        with pytest.raises(ReportError, match="title"):
            store.reports.save("stragglers", "  ", stragglers)
        assert store.reports.count() == 0
    # an imported document's strings reach the title: kept to one printable line
    odd = links_document()
    odd["faults"][0]["kind"] = "slow\x1b[2J_link" + "!" * 300
    title = default_title("links", odd)
    assert title.startswith("links over 4 hosts: slow?[2J link!!!") and title.isprintable() and len(title) == 200


# -- the command line -------------------------------------------------------------------------------------


def test_save_keeps_exactly_what_json_prints_and_leaves_the_exit_code_alone(saved: dict[str, Any]) -> None:
    # a straggler found and a hang suspect exit 1, as without --save; the projections 0
    assert {k: saved[k]["code"] for k in ("stragglers", "hang", "sweep", "projection")} == {
        "stragglers": 1,
        "hang": 1,
        "sweep": 0,
        "projection": 0,
    }
    with Store.open(db_url(str(saved["db"])), create=False) as store:
        for kind in ("stragglers", "hang", "sweep", "projection"):
            assert store.reports.get(saved[kind]["id"]).payload == saved[kind]["doc"]
    listed = commlens("reports", "list", "--db", str(saved["db"]), "--json")
    assert listed.returncode == 0, listed.stderr
    titles = {r["kind"]: r["title"] for r in json.loads(listed.stdout)["reports"]}
    assert titles["stragglers"] == "stragglers over 3 ranks, 20 collectives: rank 1 (late arrival)"
    assert titles["hang"] == "hang check of 4 ranks: suspects 2"
    assert titles["sweep"] == "sweep of 8 points over layout.tp, workload.global_batch: 6 feasible"
    assert titles["projection"] == "llama3-8b on 64 x dgx-h100"
    shown = commlens("reports", "show", saved["hang"]["id"], "--db", str(saved["db"]))
    assert json.loads(shown.stdout) == saved["hang"]["doc"]


def test_links_save_keeps_the_measured_diagnosis(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    proc = commlens(
        "diagnose", "links", "--nproc", "3", "-b", "64K", "-n", "2", "--passes", "2", "--json", "--save", "--db", db
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: loopback ranks on a busy machine can look like a fault
    found = SAVED.search(proc.stderr)
    assert found and found.group(1) == "links", proc.stderr
    with Store.open(db_url(db), create=False) as store:
        kept = store.reports.get(found.group(2))
    assert kept.payload == json.loads(proc.stdout) and kept.payload["hosts"] == 3
    assert kept.summary.title.startswith("links over 3 hosts: ")


def test_reports_import_keeps_a_json_file_and_refuses_what_is_not_that_document(
    tmp_path: Path, saved: dict[str, Any]
) -> None:
    db = str(tmp_path / "r.db")
    good = tmp_path / "hang.json"
    good.write_text(json.dumps(saved["hang"]["doc"], indent=2))
    proc = commlens("reports", "import", "hang", str(good), "--db", db, "--title", "rank 2 never got to #7")
    assert proc.returncode == 0, proc.stderr
    assert SAVED.search(proc.stderr)
    big = tmp_path / "big.json"
    with big.open("wb") as fp:  # sparse: the reader must stop at its bound, not read it all
        fp.truncate(MAX_FILE_BYTES + 1)
    not_json = tmp_path / "notes.json"
    not_json.write_text('{"consistent": false,\n  "ranks": [0, 1,\n}')
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(saved["sweep"]["doc"]).replace('"mfu": 0.', '"mfu": NaN, "x": 0.', 1))
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(saved["sweep"]["doc"]))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases = [
        ("hang", big, f"{big}: larger than 64 MiB: not a report's --json document"),
        ("hang", not_json, f"{not_json}:3: not JSON: "),
        ("sweep", nan, f"{nan}: not JSON: NaN is not a JSON number"),
        (
            "links",
            sweep,
            f"{sweep}: not a links document (commlens diagnose links --json): document: no field 'format'",
        ),
        ("hang", deep, f"{deep}: "),
        ("hang", tmp_path / "absent.json", "absent.json: cannot read: No such file or directory"),
        ("bogus", good, "report kind 'bogus'"),
    ]
    for kind, path, message in cases:
        proc = commlens("reports", "import", kind, str(path), "--db", db)
        assert proc.returncode == 2, (path, proc.stderr)
        errors = error_lines(proc.stderr)
        assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], proc.stderr
    listed = json.loads(commlens("reports", "list", "--db", db, "--json").stdout)
    assert listed["total"] == 1 and listed["reports"][0]["title"] == "rank 2 never got to #7"


# -- the API and the pages --------------------------------------------------------------------------------


class Page(HTMLParser):
    """The elements of a page: each start tag with its attributes, and each table's body rows' cell texts."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._in_body = False
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table" and "data" in (a.get("class") or "").split():
            self._table = a["id"] or ""
            self.tables[self._table] = []
        elif tag == "tbody" and self._table is not None:
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._in_body and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k.rstrip("_")) == v for k, v in attrs.items())]

    def by_id(self, element_id: str) -> dict[str, str | None]:
        found = [a for _, a in self.tags if a.get("id") == element_id]
        assert len(found) == 1, f"{element_id}: {len(found)} elements"
        return found[0]


@pytest.fixture
def reports_app(store_url: str, saved: dict[str, Any]) -> Iterator[tuple[TestClient, dict[str, str]]]:  # noqa: F811
    """The app over a store holding one report of each kind (their ids by kind)."""
    docs = {k: saved[k]["doc"] for k in ("stragglers", "hang", "sweep", "projection")} | {"links": links_document()}
    with Store.open(store_url) as store:
        ids = {kind: store.reports.save(kind, f"the {kind} report", doc) for kind, doc in docs.items()}
    app = create_app(ServeConfig(db_url=store_url))
    with TestClient(app, base_url=BASE) as client:
        yield client, ids
    app.state.store.close()


def page(client: TestClient, path: str, data_page: str) -> Page:
    r = client.get(path)
    assert r.status_code == 200, r.text
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert not re.search(r"\sstyle=", r.text) and "<script>" not in r.text, "inline style or script"
    p = Page(r.text)
    assert p.find("body")[0]["data-page"] == data_page
    return p


def test_report_lists_and_the_api_page_and_filter_the_stored_reports(
    reports_app: tuple[TestClient, dict[str, str]],
) -> None:
    client, ids = reports_app
    listed = page(client, "/diagnose", "diagnose").tables["table-reports"]
    assert sorted(row[1] for row in listed) == ["hang", "links", "stragglers"]
    assert [row[1] for row in page(client, "/projection?kind=sweep", "projection").tables["table-reports"]] == ["sweep"]
    assert client.get("/diagnose?kind=sweep").status_code == 400
    body = client.get("/api/reports", params={"per_page": 2, "page": 2}).json()
    assert body["total"] == 5 and body["pages"] == 3 and len(body["reports"]) == 2
    assert client.get("/api/reports", params={"kind": "hang"}).json()["reports"][0]["report_id"] == ids["hang"]
    bad = client.get("/api/reports", params={"kind": "passwd"})
    assert bad.status_code == 400 and "kind" in bad.json()["error"]
    one = client.get(f"/api/reports/{ids['sweep']}").json()
    assert one["kind"] == "sweep" and one["payload"]["rows"][0]["layout.tp"] == 1
    missing = client.get("/api/reports/" + "f" * 32)
    assert missing.status_code == 404 and "no report" in missing.json()["error"]
    assert client.get("/diagnose/" + "f" * 32).status_code == 404
    moved = client.get(f"/diagnose/{ids['sweep']}", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"/projection/{ids['sweep']}"
    schema = client.get("/api/openapi.json").json()["paths"]
    assert {"/api/reports", "/api/reports/{report_id}", "/api/live"} <= set(schema)


def test_the_links_page_draws_the_matrix_as_an_svg_heatmap_and_lists_the_slow_link(
    reports_app: tuple[TestClient, dict[str, str]],
) -> None:
    client, ids = reports_app
    p = page(client, f"/diagnose/{ids['links']}", "report")
    cells = p.find("rect", class_="cell") + p.find("rect", class_="cell fault")
    assert len(cells) == 12  # 4 hosts, every ordered pair
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c["fill"] or "") for c in cells)
    slow = {(c["data-sender"], c["data-receiver"]) for c in p.find("rect", class_="cell fault")}
    assert slow == {("1", "2"), ("2", "1")}
    fills = {(c["data-sender"], c["data-receiver"]): c["fill"] for c in cells}
    assert fills[("1", "2")] == "#d92d20" and fills[("0", "3")] == "#17b26a"  # a third of expected; at expected
    faults = p.tables["table-faults"]
    assert len(faults) == 1 and faults[0][:2] == ["slow link", "1 - 2"]
    # each pair's rate is the size over its median time (1.01 x the nominal one): 0.327 and 0.990 GB/s
    assert faults[0][2:5] == ["0.33", "0.99", "33.0%"]
    assert len(p.tables["table-latency"]) == 4


def test_straggler_hang_and_projection_pages_show_their_tables(
    reports_app: tuple[TestClient, dict[str, str]], saved: dict[str, Any]
) -> None:
    client, ids = reports_app
    s = page(client, f"/diagnose/{ids['stragglers']}", "report")
    assert s.tables["table-stragglers"] == [["1", "late arrival", "gloo:all_reduce", "27416.33"]]
    assert len(s.tables["table-ranks"]) == len(saved["stragglers"]["doc"]["rows"]) == 6
    chart = s.by_id("chart-lateness")
    assert chart["class"] == "chart" and chart["data-api"] == f"/api/reports/{ids['stragglers']}"
    assert s.find("script", src="/static/reports.js")

    h = page(client, f"/diagnose/{ids['hang']}", "report")
    assert [row[:2] for row in h.tables["table-suspects"]] == [["2", "missing ranks"]]
    assert [row[2:] for row in h.tables["table-dumps"]] == [["7", "ok"], ["7", "ok"], ["6", "suspect"], ["7", "ok"]]
    culprit = h.tables["table-divergence-1"]
    assert culprit[0][:2] == ["2", "nothing (last: #6 broadcast)"]

    sw = page(client, f"/projection/{ids['sweep']}", "report")
    doc = saved["sweep"]["doc"]
    assert len(sw.tables["table-sweep"]) == len(doc["rows"]) == 8
    assert sum("cannot run" in row[-1] for row in sw.tables["table-sweep"]) == 2
    charts = [a["id"] for a in sw.find("div", class_="chart")]
    assert charts == ["chart-sweep-step_time_s", "chart-sweep-tokens_per_s", "chart-sweep-mfu", "chart-sweep-memory_gb"]
    assert [o["value"] for o in sw.find("option")] == ["layout.tp", "workload.global_batch"]
    assert len(sw.tables["table-best"]) == len(doc["best"])
    assert sw.tables["table-infeasible"][0][0] == "2"

    pr = page(client, f"/projection/{ids['projection']}", "report")
    parts = {row[0]: row[1] for row in pr.tables["table-breakdown"]}
    assert parts["compute"] == f"{saved['projection']['doc']['breakdown']['compute']:.3f}"
    assert "tp comm" in parts and "bubble" not in parts  # parts that take no time are left out
    mem = saved["projection"]["doc"]["memory"]
    assert pr.tables["table-memory"][-2:] == [
        ["allocated (peak)", f"{mem['total'] / 1e9:.1f}"],
        ["the device must hold", f"{mem['reserved'] / 1e9:.1f}"],
    ]
    assert "stage" not in [row[0] for row in pr.tables["table-memory"]]
    what = saved["projection"]["doc"]["what_if"]["changes"]
    assert [row[0] for row in pr.tables["table-what-if"]] == [c["label"] for c in what]


# -- live jobs --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_live_shows_a_real_monitor_endpoint_an_unreachable_one_and_the_stored_job(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    from commlens.monitor import Monitor, MonitorConfig

    url = db_url(str(tmp_path / "store.db"))
    Store.open(url).close()
    port, dead = _free_port(), _free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        monitor = Monitor(MonitorConfig(port=port, window_s=0.2, store=url, topology=None)).start()
        t = torch.ones(1 << 16)
        for _ in range(25):
            dist.all_reduce(t)
            dist.broadcast(t, 0)
            monitor.step()
            time.sleep(0.01)
        config = ServeConfig(db_url=url, monitor_endpoints=(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{dead}"))
        app = create_app(config)
        with TestClient(app, base_url=BASE) as client:
            doc = client.get("/api/live").json()
            live, gone = doc["jobs"]
            assert live["status"] == "live" and live["records"] == 50 and live["job_id"] == monitor.job_id
            assert gone["status"] == "unreachable" and gone["error"].startswith("cannot reach it")
            assert doc["job"] == "endpoint:0"
            counts: dict[str, int] = {}
            for w in doc["windows"]:
                counts[w["op"]] = counts.get(w["op"], 0) + w["count"]
            assert counts == {"all_reduce": 25, "broadcast": 25}
            p = page(client, "/live", "live")
            assert [row[7].split(":")[0] for row in p.tables["table-jobs"]] == ["live", "unreachable"]
            assert p.by_id("chart-live-busbw")["data-api"] == "/api/live?job=endpoint%3A0"
            assert p.by_id("chart-live-time")["data-kind"] == "live-time"

            run = monitor.stop()
            stored = client.get("/api/live", params={"job": f"run:{run.run_id}"}).json()
            assert stored["job"] == f"run:{run.run_id}" and stored["jobs"][-1]["source"] == "store"
            kept: dict[str, int] = {}
            for w in stored["windows"]:
                kept[w["op"]] = kept.get(w["op"], 0) + w["count"]
            assert kept == {"all_reduce": 25, "broadcast": 25}
            sp = page(client, f"/live?job=run:{run.run_id}", "live")
            latest = sp.tables["table-latest"]
            assert latest and all(int(row[6]) > 0 for row in latest)
            assert client.get("/api/live", params={"job": "endpoint:7"}).status_code == 404
        app.state.store.close()
    finally:
        dist.destroy_process_group()
