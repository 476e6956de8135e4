"""Every page of ``commlens serve`` in a real headless Chromium, against a real server over a seeded store.

The store holds what a team's store holds: 24 nightly runs of ``main`` on one system, whose
all_reduce at 1M gets 20 % slower from the 13th run on (revision ``rev12``), a noisy all_gather
series, four runs of a release and four of a pull request that slows all_reduce at 1M by 20 %,
and an ingested nccl-tests run. Each page must load with no console
error and no Content-Security-Policy violation, its charts must draw the stored points, its forms
must work; a screenshot of each is saved under ``test-artifacts/serve/``.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from browser import Browser, browser  # noqa: F401 - fixture
from serve_server import ServeProcess, free_port, running_server
from store_backends import make_measurement, make_system, pg_server, pg_url  # noqa: F401 - fixtures

from commlens.results import Measurement, Run
from commlens.results.units import format_size
from commlens.store import Store, db_url

SYSTEM = make_system()
FP = SYSTEM.fingerprint()
T0 = datetime(2026, 9, 1, 2, 0, 0)
NIGHTLIES = 24
CHANGE_AT = 12  # the first nightly at the slower level
SIZES = (1024, 65536, 1048576)
SAMPLES = 20  # iterations kept per row
SLOWER = 1.20
PR_RUNS = 4  # runs of the release and of the pull request, each


@dataclass(frozen=True)
class Seeded:
    """What the seeded store holds, for the tests' expectations."""

    runs: tuple[Run, ...]

    @property
    def nightlies(self) -> list[Run]:
        return [r for r in self.runs if r.tag == "main"]

    def run(self, run_id: str) -> Run:
        return next(r for r in self.runs if r.run_id == run_id)


def _base_time_s(op: str, size_bytes: int) -> float:
    """A plausible time: 20 us latency plus 10 GB/s."""
    return 20e-6 + size_bytes / 10e9 * (2.0 if op == "all_gather" else 1.0)


def _row(rng: random.Random, op: str, size_bytes: int, level: float, noise: float = 0.005) -> Measurement:
    mean = _base_time_s(op, size_bytes) * level
    samples = tuple(mean * (1.0 + rng.uniform(-noise, noise)) for _ in range(SAMPLES))
    return make_measurement(op, size_bytes, samples)


def _nightly(rng: random.Random, i: int) -> Run:
    rows: list[Measurement] = []
    for size in SIZES:
        slower = SLOWER if size == 1048576 and i >= CHANGE_AT else 1.0
        rows.append(_row(rng, "all_reduce", size, slower * (1.0 + rng.uniform(-0.004, 0.004))))
    for size in SIZES:
        # all_gather at 1K scatters by up to 25 % from night to night: too noisy to judge
        jitter = rng.uniform(-0.25, 0.25) if size == 1024 else rng.uniform(-0.004, 0.004)
        rows.append(_row(rng, "all_gather", size, 1.0 + jitter))
    return Run(
        run_id=f"nightly-{i:02d}",
        started_at=(T0 + timedelta(days=i)).isoformat() + "Z",
        system=SYSTEM,
        measurements=tuple(rows),
        tag="main",
        revision=f"rev{i:02d}",
        command_line="commlens bench -b 1K -e 1M -f 64 --ops all_reduce,all_gather",
        # markup in a note must show as text, never run
        notes=("<script>window.__pwned = 1</script> rebooted node-b",) if i == 0 else (),
    )


def seeded_runs() -> Seeded:
    rng = random.Random(16)
    runs = [_nightly(rng, i) for i in range(NIGHTLIES)]
    # A release's runs at the old level, and a pull request's whose all_reduce at 1M is 20 % slower.
    for tag, revision, day, level_1m in (("release-1", "rel1", 0, 1.0), ("pr-42", "prhead42", NIGHTLIES - 1, SLOWER)):
        for k in range(PR_RUNS):
            runs.append(
                Run(
                    run_id=f"{tag}-{k}",
                    started_at=(T0 + timedelta(days=day, hours=3 + k)).isoformat() + "Z",
                    system=SYSTEM,
                    measurements=tuple(
                        _row(rng, "all_reduce", size, level_1m if size == 1048576 else 1.0) for size in SIZES
                    ),
                    tag=tag,
                    revision=revision,
                )
            )
    runs.append(
        Run(
            run_id="ingested-nccl",
            started_at=(T0 + timedelta(days=3, hours=5)).isoformat() + "Z",
            system=SYSTEM,
            measurements=tuple(_row(rng, "all_reduce", size, 1.0) for size in SIZES),
            source="nccl-tests",
        )
    )
    return Seeded(tuple(runs))


def seed(url: str) -> Seeded:
    """Save the runs through the Store API, and the baselines a team would set: main's and the pull
    request's series both measured against the release."""
    seeded = seeded_runs()
    with Store.open(url) as store:
        store.save_runs(list(seeded.runs))
        store.baselines.set(FP, "main", "tag", "release-1", note="the release")
        store.baselines.set(FP, "pr-42", "tag", "release-1")
    return seeded


HISTORY_1M = f"/history?fingerprint={FP}&tag=main&op=all_reduce&dtype=float32&size_bytes=1048576"


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    url = db_url(str(tmp_path_factory.mktemp("serve") / "results.db"))
    seed(url)
    with running_server(url) as server:
        yield server


def _clean(browser: Browser, server: ServeProcess) -> None:  # noqa: F811
    """The page logged no error and broke no CSP rule; the server logged no traceback."""
    assert browser.console_errors() == [], browser.driver.current_url
    assert "Traceback" not in server.output(), server.output()[-3000:]


def _submit(browser: Browser, **fields: str) -> dict[str, list[str]]:  # noqa: F811
    """Fill the page's filter form as a user types, submit it, wait for the new page; its query."""
    from selenium.webdriver.common.by import By

    form = browser.driver.find_element(By.ID, "filters")
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            from selenium.webdriver.support.ui import Select

            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)
    before = browser.driver.current_url
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    browser.wait_for(lambda d: d.current_url != before, message="the form's page")
    browser.wait_for(lambda d: d.execute_script("return document.readyState") == "complete", message="page load")
    query = parse_qs(urlsplit(browser.driver.current_url).query)
    return {k: v for k, v in query.items() if v != [""]}


def _run_ids(browser: Browser) -> list[str]:  # noqa: F811
    return [row[0] for row in browser.table_rows("table-runs")]


# -- the pages over SQLite --------------------------------------------------------------------------


def test_runs_page_lists_every_run_newest_first_and_its_filters_narrow_the_table(
    sqlite_server: ServeProcess,
    browser: Browser,  # noqa: F811
) -> None:
    browser.open(sqlite_server.url("/"))
    assert browser.page() == "runs"
    seeded = seeded_runs()
    ids = _run_ids(browser)
    newest_first = sorted(seeded.runs, key=lambda r: r.started_at, reverse=True)
    assert ids == [r.run_id[:12] for r in newest_first]
    browser.screenshot("runs")
    _clean(browser, sqlite_server)

    assert _submit(browser, tag="pr-42") == {"tag": ["pr-42"], "per_page": ["50"]}
    assert _run_ids(browser) == ["pr-42-3", "pr-42-2", "pr-42-1", "pr-42-0"]
    assert _submit(browser, tag="", source="nccl-tests")["source"] == ["nccl-tests"]
    assert _run_ids(browser) == ["ingested-ncc"]
    _submit(browser, source="", op="all_gather")
    assert _run_ids(browser) == [f"nightly-{i:02d}" for i in reversed(range(NIGHTLIES))]  # only nightlies gather
    _submit(browser, op="", revision="rev05")
    assert _run_ids(browser) == ["nightly-05"]
    _submit(browser, revision="", since="2026-09-20", until="2026-09-22")
    assert _run_ids(browser) == ["nightly-21", "nightly-20", "nightly-19"]
    _submit(browser, since="", until="", tag="nobody")
    assert _run_ids(browser) == [] and browser.driver.find_element("id", "no-runs").is_displayed()
    _clean(browser, sqlite_server)


def test_runs_page_is_paged(sqlite_server: ServeProcess, browser: Browser) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    browser.open(sqlite_server.url("/runs?per_page=10"))
    total = len(seeded_runs().runs)
    seen = []
    for page in range(1, 5):
        assert f"page {page} of 4" in browser.driver.find_element(By.ID, "pager").text
        seen += _run_ids(browser)
        nexts = browser.driver.find_elements(By.CSS_SELECTOR, "#pager a[rel=next]")
        if page < 4:
            nexts[0].click()
            browser.wait_for(lambda d, p=page: f"page {p + 1} of" in d.find_element(By.ID, "pager").text)
        else:
            assert nexts == []
    assert len(seen) == len(set(seen)) == total == 33
    _clean(browser, sqlite_server)


def test_run_page_draws_time_and_busbw_against_size_and_the_iterations(
    sqlite_server: ServeProcess,
    browser: Browser,  # noqa: F811
) -> None:
    run = seeded_runs().run("nightly-00")
    browser.open(sqlite_server.url("/runs/nightly-00"))
    assert browser.page() == "run"
    # one point per row (op x size), on log axes; the iterations of one row
    assert browser.chart_points("chart-busbw") == len(run.measurements) == 6
    assert browser.chart_points("chart-time") == 6
    assert browser.chart_points("chart-dist") == SAMPLES
    rows = browser.table_rows("table-rows")
    # op, size, iterations and mean time of each stored row, in the run's order
    assert [(r[0], r[2], r[6], r[7]) for r in rows] == [
        (m.op, format_size(m.size_bytes), str(SAMPLES), f"{m.stats.mean_s * 1e6:.2f}") for m in run.measurements
    ]
    # The system fingerprint, environment and notes.
    assert FP in browser.driver.find_element("id", "run-facts").text
    assert ["cpu_model", "Xeon"] in browser.table_rows("table-system")
    assert browser.table_rows("table-env") == [["NCCL_ALGO", "Ring"]]
    # The note holds markup: shown as text, never run.
    assert browser.driver.find_element("id", "notes").text == run.notes[0]
    assert browser.js("return window.__pwned === undefined") is True
    browser.screenshot("run")
    _clean(browser, sqlite_server)
    # A row's history link opens its series.
    browser.driver.find_elements("css selector", "#table-rows a")[2].click()
    browser.wait_for(lambda d: d.execute_script("return document.body.dataset.page") == "history")
    assert browser.chart_points("chart-history") == NIGHTLIES
    assert "all_reduce 1M float32" in browser.driver.find_element("id", "series-title").text
    _clean(browser, sqlite_server)


def test_history_page_marks_the_change_point_and_draws_the_baseline(
    sqlite_server: ServeProcess,
    browser: Browser,  # noqa: F811
) -> None:
    browser.open(sqlite_server.url(HISTORY_1M))
    assert browser.page() == "history"
    assert browser.chart_points("chart-history") == NIGHTLIES
    chart = browser.driver.find_element("id", "chart-history")
    assert chart.get_attribute("data-changes") == "1"
    (change,) = browser.table_rows("table-changes")
    assert change[0] == f"nightly-{CHANGE_AT:02d}" and change[2] == f"rev{CHANGE_AT:02d}" and change[3] == "rev11"
    assert re.fullmatch(r"\+(19\.[5-9]|20\.[0-5])%", change[6]), change
    assert change[8] == "regression"
    baseline = browser.driver.find_element("id", "baseline").text
    assert "tag release-1" in baseline and "(4 run(s))" in baseline, baseline
    browser.screenshot("history")
    _clean(browser, sqlite_server)
    # The revision axis: the same points, in revision order.
    query = _submit(browser, order="revision")
    assert query["order"] == ["revision"]
    assert browser.chart_points("chart-history") == NIGHTLIES
    _clean(browser, sqlite_server)


def test_regressions_page_lists_the_change_and_the_noisy_series_apart(
    sqlite_server: ServeProcess,
    browser: Browser,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    browser.open(sqlite_server.url("/regressions?since=2026-08-01"))
    assert browser.page() == "regressions"
    (row,) = browser.table_rows("table-regressions")
    assert row[1:5] == ["all_reduce", "1M", "float32", "out"] and row[5] == "main" and row[7] == "rev12", row
    unstable = browser.table_rows("table-unstable")
    assert [r[:5] for r in unstable] == [["all_gather", "1K", "float32", "out", "main"]]
    browser.screenshot("regressions")
    _clean(browser, sqlite_server)
    # Its link opens the series' history.
    browser.driver.find_element(By.CSS_SELECTOR, "#table-regressions a").click()
    browser.wait_for(lambda d: d.execute_script("return document.body.dataset.page") == "history")
    assert browser.chart_points("chart-history") == NIGHTLIES
    _clean(browser, sqlite_server)
    # A window after the change: nothing to list.
    browser.open(sqlite_server.url("/regressions?since=2026-09-20"))
    assert browser.table_rows("table-regressions") == []
    _clean(browser, sqlite_server)


def test_compare_form_shows_the_verdict_rows_a_share_url_and_the_pr_markdown(
    sqlite_server: ServeProcess,
    browser: Browser,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    browser.open(sqlite_server.url("/compare"))
    assert browser.page() == "compare"
    query = _submit(browser, base="tag:release-1", candidate="tag:pr-42")
    assert query["base"] == ["tag:release-1"] and query["candidate"] == ["tag:pr-42"]
    rows = browser.table_rows("table-compare")
    verdicts = {(r[0], r[1]): r[-2] for r in rows}
    assert verdicts == {
        ("all_reduce", "1K"): "no change",
        ("all_reduce", "64K"): "no change",
        ("all_reduce", "1M"): "regression",
    }
    ratio_1m = float(next(r for r in rows if r[1] == "1M")[8])
    assert 1.17 < ratio_1m < 1.23
    # Every row draws its confidence interval.
    assert len(browser.driver.find_elements(By.CSS_SELECTOR, "#table-compare svg.ci")) == 3
    share = browser.driver.find_element(By.ID, "share-url").get_attribute("href")
    markdown = browser.driver.find_element(By.ID, "markdown").get_attribute("value")
    assert share in markdown and "**regression**" in markdown and "| all_reduce | 1M |" in markdown
    browser.screenshot("compare")
    _clean(browser, sqlite_server)
    # The shared URL opens the same comparison.
    browser.open(share)
    assert browser.table_rows("table-compare") == rows
    # Against the series' baseline (release-1, set for the pull request's series): the same verdicts.
    browser.open(sqlite_server.url("/compare?base=baseline&candidate=tag:pr-42"))
    assert {(r[0], r[1]): r[-2] for r in browser.table_rows("table-compare")} == verdicts
    _clean(browser, sqlite_server)


# -- the same pages over PostgreSQL ---------------------------------------------------------------------


def test_runs_and_history_pages_over_postgresql_show_what_they_show_over_sqlite(
    pg_url: str,  # noqa: F811
    sqlite_server: ServeProcess,
    browser: Browser,  # noqa: F811
) -> None:
    seed(pg_url)
    pages = {}
    with running_server(pg_url) as pg_server_process:
        for name, server in (("postgresql", pg_server_process), ("sqlite", sqlite_server)):
            browser.open(server.url("/runs?per_page=100"))
            runs = browser.table_rows("table-runs")
            if name == "postgresql":
                browser.screenshot("runs-postgresql")
            _clean(browser, server)
            browser.open(server.url(HISTORY_1M))
            points = browser.chart_points("chart-history")
            changes = browser.table_rows("table-changes")
            title = browser.driver.find_element("id", "series-title").text
            if name == "postgresql":
                browser.screenshot("history-postgresql")
            _clean(browser, server)
            pages[name] = (runs, points, changes, title)
    runs, points, changes, _title = pages["postgresql"]
    assert len(runs) == len(seeded_runs().runs) and points == NIGHTLIES and len(changes) == 1
    assert pages["postgresql"] == pages["sqlite"]


# -- diagnoses, projections and a monitored job, in a store of their own ------------------------------------

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
LINK_HOSTS = 4
SLOW_LINK = (1, 2)  # at half the rate of every other pair
SWEEP_PP = (2, 4, 8, 128)  # 128 stages do not divide the 80 layers: two points that cannot run
SWEEP_BATCH = (512, 1024)


def _commlens(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "commlens", *map(str, args)], capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _link_records() -> list[dict[str, object]]:
    """What ``commlens diagnose links`` measures on 4 hosts, 3 passes of 1 MB exchanges, with a slow 1-2 link."""
    size = 1_000_000
    records: list[dict[str, object]] = []
    for p in range(3):
        for a in range(LINK_HOSTS):
            for b in range(a + 1, LINK_HOSTS):
                rate = 50e6 if (a, b) == SLOW_LINK else 100e6
                for sender, receiver in ((a, b), (b, a)):
                    t = size / rate
                    records.append(
                        {
                            "kind": "pair",
                            "pass": p,
                            "round": 0,
                            "rank": sender,
                            "peer": receiver,
                            "size_bytes": size,
                            "times_s": [t * 0.99, t, t * 1.01],
                            "latency_s": [20e-6 + 1e-6 * sender],
                        }
                    )
    return records


def seed_reports(url: str, tmp: Path) -> dict[str, str]:
    """Keep one report of each kind through the commands' ``--save`` (links: ``reports import`` of its
    ``--json`` document), and run a real monitored training job that stores itself; kind -> report id."""
    from commlens.diagnose.links_analysis import diagnose_links

    sweep = ["--vary", "layout.pp=" + ",".join(map(str, SWEEP_PP))]
    sweep += ["--vary", "workload.global_batch=" + ",".join(map(str, SWEEP_BATCH))]
    assert _commlens("project", "sweep", "llama3-70b", "-t", "dgx-h100", "--gpus", "1024", "--tp", "8", *sweep,
                     "--workers", "2", "--save", "--db", url).returncode == 0  # fmt: skip
    assert _commlens("project", "llama3-70b", "-t", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4",
                     "--save", "--db", url).returncode == 0  # fmt: skip
    assert _commlens("diagnose", "hang", DATA / "hang_hang", "--save", "--db", url).returncode in (0, 1)
    traces = sorted((DATA / "stragglers_late_rank1").glob("*.json"))
    assert _commlens("diagnose", "stragglers", *traces, "--save", "--db", url).returncode in (0, 1)
    links = tmp / "links.json"
    links.write_text(json.dumps(diagnose_links(_link_records(), LINK_HOSTS).to_dict()))
    assert _commlens("reports", "import", "links", links, "--db", url).returncode == 0
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(free_port()), str(REPO / "examples" / "train_monitored.py"), "--steps", "30",
         "--dim", "64", "--seq", "32", "--batch", "4", "--window-s", "0.5", "--store", url],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-3000:]
    listed = json.loads(_commlens("reports", "list", "--db", url, "--json").stdout)["reports"]
    assert sorted(r["kind"] for r in listed) == ["hang", "links", "projection", "stragglers", "sweep"]
    return {r["kind"]: r["report_id"] for r in listed}


@dataclass
class ReportsServer:
    server: ServeProcess
    report_ids: dict[str, str]


@pytest.fixture(scope="module")
def reports_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportsServer]:
    tmp = tmp_path_factory.mktemp("serve-reports")
    url = db_url(str(tmp / "results.db"))
    with Store.open(url):
        pass  # the schema, before the commands write to it
    ids = seed_reports(url, tmp)
    with running_server(url) as server:
        yield ReportsServer(server, ids)


def test_diagnose_page_lists_the_kept_diagnoses_and_filters_them_by_kind(
    reports_server: ReportsServer,
    browser: Browser,  # noqa: F811
) -> None:
    server, ids = reports_server.server, reports_server.report_ids
    browser.open(server.url("/diagnose"))
    assert browser.page() == "diagnose"
    rows = browser.table_rows("table-reports")
    assert sorted(r[1] for r in rows) == ["hang", "links", "stragglers"]
    assert {r[0] for r in rows} == {ids[k][:12] for k in ("hang", "links", "stragglers")}
    browser.screenshot("diagnose")
    _clean(browser, server)
    assert _submit(browser, kind="hang")["kind"] == ["hang"]
    assert [r[1] for r in browser.table_rows("table-reports")] == ["hang"]
    _clean(browser, server)


def test_links_report_draws_the_matrix_with_the_slow_link_outlined(
    reports_server: ReportsServer,
    browser: Browser,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    server, ids = reports_server.server, reports_server.report_ids
    browser.open(server.url(f"/diagnose/{ids['links']}"))
    assert browser.page() == "report"
    (fault,) = browser.table_rows("table-faults")
    assert fault[0] == "slow link" and fault[1] == "1 - 2", fault
    heatmap = browser.driver.find_element(By.ID, "heatmap")
    assert heatmap.get_attribute("data-cells") == str(LINK_HOSTS * (LINK_HOSTS - 1))
    faulted = browser.driver.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell.fault")
    assert sorted((c.get_attribute("data-sender"), c.get_attribute("data-receiver")) for c in faulted) == [
        ("1", "2"),
        ("2", "1"),
    ]
    assert len(browser.table_rows("table-latency")) == LINK_HOSTS
    browser.screenshot("diagnose-links")
    _clean(browser, server)


def test_stragglers_and_hang_reports_name_the_late_and_the_hung_rank(
    reports_server: ReportsServer,
    browser: Browser,  # noqa: F811
) -> None:
    server, ids = reports_server.server, reports_server.report_ids
    browser.open(server.url(f"/diagnose/{ids['stragglers']}"))
    stragglers = browser.table_rows("table-stragglers")
    assert stragglers and stragglers[0][0] == "1", stragglers
    # one point per rank and collective with a lateness, as the report has them
    doc = server.get_json(f"/api/reports/{ids['stragglers']}")
    assert isinstance(doc, dict)
    late = {(r["op"], r["rank"]) for r in doc["payload"]["rows"] if r.get("lateness_p50_s") is not None}
    assert len(late) >= 3 and browser.chart_points("chart-lateness") == len(late)
    browser.screenshot("diagnose-stragglers")
    _clean(browser, server)
    browser.open(server.url(f"/diagnose/{ids['hang']}"))
    suspects = browser.table_rows("table-suspects")
    assert suspects[0][0] == "2", suspects
    browser.screenshot("diagnose-hang")
    _clean(browser, server)


def test_projection_pages_chart_the_sweep_over_its_varied_fields(
    reports_server: ReportsServer,
    browser: Browser,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server, ids = reports_server.server, reports_server.report_ids
    browser.open(server.url("/projection"))
    assert browser.page() == "projection"
    assert sorted(r[1] for r in browser.table_rows("table-reports")) == ["projection", "sweep"]
    _clean(browser, server)
    browser.open(server.url(f"/projection/{ids['sweep']}"))
    rows = browser.table_rows("table-sweep")
    feasible = (len(SWEEP_PP) - 1) * len(SWEEP_BATCH)
    assert len(rows) == len(SWEEP_PP) * len(SWEEP_BATCH)
    assert len(browser.driver.find_elements(By.CSS_SELECTOR, "#table-sweep tr.infeasible")) == len(SWEEP_BATCH)
    charts = [c for c in browser.charts() if c.startswith("chart-sweep-")]
    assert "chart-sweep-tokens_per_s" in charts, charts
    for chart in charts:
        assert browser.chart_points(chart) == feasible, chart
    browser.screenshot("projection-sweep")
    _clean(browser, server)
    # The other varied field on the x axis: the same points, drawn again.
    Select(browser.driver.find_element(By.ID, "sweep-x")).select_by_value("workload.global_batch")
    browser.wait_for(
        lambda d: d.find_element(By.ID, "chart-sweep-tokens_per_s").get_attribute("data-x") == "workload.global_batch",
        message="the sweep chart redrawn over workload.global_batch",
    )
    assert browser.chart_points("chart-sweep-tokens_per_s") == feasible
    _clean(browser, server)
    browser.open(server.url(f"/projection/{ids['projection']}"))
    assert browser.table_rows("table-breakdown")
    browser.screenshot("projection")
    _clean(browser, server)


def test_live_page_shows_the_stored_monitored_job_and_its_windows(
    reports_server: ReportsServer,
    browser: Browser,  # noqa: F811
) -> None:
    server = reports_server.server
    browser.open(server.url("/live"))
    assert browser.page() == "live"
    (job,) = browser.table_rows("table-jobs")
    assert job[1] == "store" and job[4] == "2", job
    # One point per window of each group, op (and size bucket for busBW) and rank, as the API has them.
    api = browser.driver.find_element("id", "chart-live-time").get_attribute("data-api")
    doc = server.get_json(api)
    assert isinstance(doc, dict) and doc["windows"]
    busbw = {(w["group"], w["op"], w["dtype"], w["size_bucket"], w["rank"], w["end_s"]) for w in doc["windows"]
             if w["busbw_p50_bytes_per_s"] > 0}  # fmt: skip
    times = {(w["group"], w["op"], w["rank"], w["end_s"]) for w in doc["windows"]}
    assert browser.chart_points("chart-live-busbw") == len(busbw) > 0
    assert browser.chart_points("chart-live-time") == len(times) > 0
    assert browser.table_rows("table-latest")
    browser.screenshot("live")
    _clean(browser, server)


# -- a server with tokens: signing in, and a write from the page -------------------------------------------

READ_TOKEN = "read-" + "r" * 24
WRITE_TOKEN = "write-" + "w" * 24


def _login(browser: Browser, token: str) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    form = browser.driver.find_element(By.ID, "login")
    form.find_element(By.NAME, "token").send_keys(token)
    before = browser.driver.current_url
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    browser.wait_for(lambda d: d.current_url != before or d.find_elements(By.ID, "login-failed"), message="sign in")
    browser.wait_for(lambda d: d.execute_script("return document.readyState") == "complete", message="page load")


def test_signing_in_then_setting_a_baseline_from_the_history_page(
    tmp_path: Path,
    browser: Browser,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    url = db_url(str(tmp_path / "results.db"))
    seed(url)
    with running_server(url, token=READ_TOKEN, write_token=WRITE_TOKEN) as server:
        # Without a token every page sends the browser to sign in; a wrong token is refused.
        browser.open(server.url(HISTORY_1M))
        assert browser.page() == "login" and urlsplit(browser.driver.current_url).path == "/login"
        _login(browser, "not-the-token-" + "x" * 20)
        assert browser.driver.find_element(By.ID, "login-failed").is_displayed()
        browser.clear_console()  # the refused sign-in answered 401: the one error expected here
        _login(browser, READ_TOKEN)
        assert browser.page() == "runs" and len(browser.table_rows("table-runs")) == len(seeded_runs().runs)
        browser.screenshot("login-then-runs")
        _clean(browser, server)
        # Read access only: the history page offers no write.
        browser.open(server.url(HISTORY_1M))
        assert browser.driver.find_elements(By.ID, "baseline-form") == []
        assert browser.chart_points("chart-history") == NIGHTLIES
        # With the write token too, the page's form sets the baseline (a PUT carrying the CSRF token).
        browser.open(server.url("/login"))
        _login(browser, WRITE_TOKEN)
        browser.open(server.url(HISTORY_1M))
        form = browser.driver.find_element(By.ID, "baseline-form")
        form.find_element(By.NAME, "ref").clear()
        form.find_element(By.NAME, "ref").send_keys("nightly-05")
        form.find_element(By.NAME, "note").send_keys("before the slowdown")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        browser.wait_for(
            lambda d: "nightly-05" in d.find_element(By.ID, "baseline").text, message="the new baseline shown"
        )
        assert "before the slowdown" in browser.driver.find_element(By.ID, "baseline").text
        assert browser.chart_points("chart-history") == NIGHTLIES
        browser.screenshot("history-baseline-set")
        _clean(browser, server)
    with Store.open(url) as store:
        baseline = store.baselines.get(FP, "main")
        assert baseline is not None and (baseline.ref_kind, baseline.ref) == ("run", "nightly-05")
