"""commlens serve's JSON API and pages, on a real server process over SQLite and over a real PostgreSQL.

The documents must say what the command line says of the same store (runs, compare, detect), the
same on both backends, and every bad parameter must be a 4xx with an ``error`` naming it.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from serve_server import ServeProcess, free_port, running_server, serve  # noqa: F401 - fixture
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from store_backends import make_measurement, make_system, pg_server, pg_url, store_url  # noqa: F401 - fixtures

from commlens.results import Run
from commlens.results.jsonfmt import run_to_dict
from commlens.store import Store

SYSTEM = make_system()
OTHER = make_system(cpu_model="Epyc")
FP = SYSTEM.fingerprint()
SIZES = (1024, 65536, 1 << 20)


def history_runs() -> list[Run]:
    """24 nightly runs on main, +20 % on all_reduce from the 13th; 3 PR runs; one run on another system."""
    rnd = random.Random(16)
    runs = []
    for i in range(24):
        ms = []
        for op in ("all_reduce", "all_gather"):
            for size in SIZES:
                base = 2e-5 + size / 4e9
                level = 1.2 if (op == "all_reduce" and i >= 12) else 1.0
                samples = tuple(base * level * rnd.uniform(0.99, 1.01) for _ in range(9))
                ms.append(make_measurement(op, size, samples, count=size // 4, rounds=(3, 3, 3)))
        runs.append(
            Run(
                run_id=f"{i:02d}" + "a" * 14,
                started_at=f"2026-10-{i + 1:02d}T03:00:00Z",
                system=SYSTEM,
                measurements=tuple(ms),
                tag="main",
                revision=f"{i:02d}" + "c0ffee",
            )
        )
    for j in range(3):
        ms = [make_measurement("all_reduce", 1024, tuple(2.03e-5 * rnd.uniform(0.99, 1.01) for _ in range(8)))]
        runs.append(
            Run(
                run_id=f"p{j}" + "b" * 14,
                started_at=f"2026-10-2{5 + j}T03:00:00Z",
                system=SYSTEM,
                measurements=tuple(ms),
                tag="pr-17",
                source="nccl-tests",
            )
        )
    runs.append(
        Run(
            run_id="o0" + "d" * 14,
            started_at="2026-10-30T03:00:00Z",
            system=OTHER,
            measurements=(make_measurement("all_to_all", 4096, (3e-5, 3.1e-5)),),
        )
    )
    return runs


PUBLIC = "https://perf.example.org/commlens"


@contextmanager
def _pg_database(pg_server: str) -> Iterator[str]:  # noqa: F811
    """A fresh PostgreSQL database for a module's shared server, dropped afterwards."""
    name = f"commlens_serve_api_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(pg_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(pg_server).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="module")
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServeProcess]]:
    """One server per backend over the same seeded history, shared by the module's read-only tests."""
    with ExitStack() as stack:
        urls = {"sqlite": f"sqlite:///{tmp_path_factory.mktemp('serve-api') / 'results.db'}"}
        urls["postgresql"] = stack.enter_context(_pg_database(request.getfixturevalue("pg_server")))
        started = {}
        for backend, url in urls.items():
            with Store.open(url) as store:
                store.save_runs(history_runs())
            started[backend] = stack.enter_context(running_server(url, args=["--public-url", PUBLIC]))
        yield started


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, servers: dict[str, ServeProcess]) -> ServeProcess:
    return servers[request.param]


@pytest.fixture
def seeded(store_url: str) -> str:  # noqa: F811
    with Store.open(store_url) as store:
        store.save_runs(history_runs())
    return store_url


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "commlens", *args], capture_output=True, text=True, timeout=120)


def test_runs_listing_filters_and_pages_as_the_store_does(server: ServeProcess) -> None:
    doc: Any = server.get_json("/api/runs?per_page=10")
    assert (doc["total"], doc["pages"], len(doc["runs"])) == (28, 3, 10)
    assert doc["runs"][0]["run_id"] == "o0" + "d" * 14  # newest first
    page3: Any = server.get_json("/api/runs?per_page=10&page=3")
    assert len(page3["runs"]) == 8
    everything = [r["run_id"] for p in (1, 2, 3) for r in server.get_json(f"/api/runs?per_page=10&page={p}")["runs"]]  # type: ignore[index]
    assert len(set(everything)) == 28
    assert server.get_json("/api/runs?tag=pr-17")["total"] == 3  # type: ignore[index]
    assert server.get_json("/api/runs?source=nccl-tests")["total"] == 3  # type: ignore[index]
    assert server.get_json("/api/runs?op=all_to_all")["total"] == 1  # type: ignore[index]
    assert server.get_json(f"/api/runs?fingerprint={OTHER.fingerprint()[:8]}")["total"] == 1  # type: ignore[index]
    assert server.get_json("/api/runs?revision=05c0")["total"] == 1  # type: ignore[index]
    window: Any = server.get_json("/api/runs?since=2026-10-10&until=2026-10-12")
    assert [r["run_id"][:2] for r in window["runs"]] == ["11", "10", "09"]
    # the page shows the same rows
    status, _, body = server.get("/runs?tag=pr-17")
    assert status == 200 and body.count(b"/runs/p") == 3 and b"3 match" in body


def test_run_document_holds_every_row_with_its_statistics(server: ServeProcess) -> None:
    run_id = "05" + "a" * 14
    doc: Any = server.get_json(f"/api/runs/{run_id[:8]}")  # a unique prefix names the run
    assert doc["summary"]["run_id"] == run_id and doc["fingerprint"] == FP
    assert len(doc["measurements"]) == 6
    stored = run_to_dict(next(r for r in history_runs() if r.run_id == run_id))
    for row, want in zip(doc["measurements"], stored["measurements"]):
        assert (row["op"], row["size_bytes"]) == (want["op"], want["size_bytes"])
        assert row["samples_s"] == pytest.approx(want["samples_s"])
        assert row["mean_s"] == pytest.approx(sum(want["samples_s"]) / len(want["samples_s"]))
    assert doc["system"]["env"] == {"NCCL_ALGO": "Ring"}
    status, _, page = server.get(f"/runs/{run_id}")
    assert status == 200 and page.count(b"history</a>") == 6 and b"NCCL_ALGO" in page


def test_compare_is_the_command_lines_verdicts_and_links_back(server: ServeProcess) -> None:
    base, cand = "run:05" + "a" * 14, "run:20" + "a" * 14
    doc: Any = server.get_json("/api/compare?" + urlencode({"base": base, "candidate": cand}))
    cli = _cli("compare", base, cand, "--db", server.db_url, "--format", "json")
    assert cli.returncode == 1, cli.stderr  # a regression: the gate fails
    want = json.loads(cli.stdout)
    assert doc["report"]["rows"] == want["rows"]
    assert doc["report"]["summary"] == want["summary"]
    verdicts = {(r["op"], r["size_bytes"]): r["verdict"] for r in doc["report"]["rows"]}
    assert {k for k, v in verdicts.items() if v == "regression"} == {("all_reduce", s) for s in SIZES}
    assert doc["url"] == PUBLIC + "/compare?" + urlencode({"base": base, "candidate": cand})
    # the page's pull-request comment is what `compare --format markdown` prints, with a link back to the page
    markdown = _cli("compare", base, cand, "--db", server.db_url, "--format", "markdown").stdout.rstrip("\n")
    assert "3 regressions" in markdown and "**regression**" in markdown
    assert doc["markdown"] == markdown + f"\n\n[Open the comparison in commlens]({doc['url']})"
    status, _, page = server.get("/compare?" + urlencode({"base": base, "candidate": cand}))
    assert status == 200 and page.count(b'class="verdict-regression"') == 3
    # a tag pools its runs, as on the command line
    pooled: Any = server.get_json("/api/compare?" + urlencode({"base": "tag:pr-17", "candidate": "run:00" + "a" * 14}))
    assert pooled["report"]["base"]["run_ids"] == ["p0" + "b" * 14, "p1" + "b" * 14, "p2" + "b" * 14]


def test_history_finds_the_change_point_detect_finds(server: ServeProcess) -> None:
    query = urlencode({"fingerprint": FP, "tag": "main", "op": "all_reduce", "dtype": "float32", "size_bytes": 65536})
    doc: Any = server.get_json("/api/series?" + query)
    assert len(doc["points"]) == 24 and doc["series"]["redop"] == "sum"
    assert [(c["run_id"][:2], c["direction"]) for c in doc["changes"]] == [("12", "regression")]
    assert doc["changes"][0]["change"] == pytest.approx(0.2, abs=0.02)
    cli = _cli("detect", "--db", server.db_url, "--op", "all_reduce", "--size", "64K", "--tag", "main", "--json")
    found = [c for c in json.loads(cli.stdout)["changes"] if c["fingerprint"] == FP]
    assert [c["run_id"] for c in found] == [doc["changes"][0]["run_id"]]
    by_revision: Any = server.get_json("/api/series?" + query + "&order=revision")
    assert [p["revision"] for p in by_revision["points"]] == [f"{i:02d}c0ffee" for i in range(24)]
    flat: Any = server.get_json("/api/series?" + query.replace("all_reduce", "all_gather"))
    assert flat["changes"] == []
    status, _, page = server.get("/history?" + query)
    assert status == 200 and b'id="chart-history"' in page and b"+20." in page


def test_regressions_lists_recent_regressions_and_unstable_series_apart(
    seeded: str, serve: Callable[..., ServeProcess]
) -> None:
    with Store.open(seeded) as store:  # a noisy series: PR runs of a second system, scattered by 30 %
        rnd = random.Random(3)
        store.save_runs(
            [
                Run(
                    run_id=f"n{i:02d}" + "e" * 13,
                    started_at=f"2026-10-{i + 1:02d}T05:00:00Z",
                    system=OTHER,
                    measurements=(make_measurement("broadcast", 4096, (1e-5 * rnd.uniform(0.6, 1.4),), root=0),),
                    tag="noisy",
                )
                for i in range(12)
            ]
        )
    server = serve(seeded)
    doc: Any = server.get_json("/api/regressions?since=2026-10-01")
    found = {(r["series"]["op"], r["series"]["size_bytes"]) for r in doc["regressions"]}
    assert found == {("all_reduce", s) for s in SIZES}
    assert [(u["op"], u["tag"]) for u in doc["unstable"]] == [("broadcast", "noisy")]
    assert doc["unstable"][0]["noise"] > 0.1
    assert server.get_json("/api/regressions?since=2026-10-20")["regressions"] == []  # type: ignore[index]
    status, _, page = server.get("/regressions?since=2026-10-01")
    assert status == 200 and page.count(b"history</a>") == 4  # 3 regressions + 1 unstable series


def test_openapi_schema_describes_every_api_route(server: ServeProcess) -> None:
    schema: Any = server.get_json("/api/openapi.json")
    paths = set(schema["paths"])
    assert {"/api/runs", "/api/runs/{run_id}", "/api/compare", "/api/series", "/api/regressions"} <= paths
    assert {"/api/baselines", "/api/thresholds", "/api/runs/{run_id}/tag"} <= paths
    assert "RunsPage" in schema["components"]["schemas"] and "SeriesOut" in schema["components"]["schemas"]
    assert not any(p.startswith("/runs") or p == "/history" for p in paths)  # pages are not API


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/api/runs?per_page=0", 400, "per_page"),
        ("/api/runs?per_page=100000", 400, "per_page"),
        ("/api/runs?page=-1", 400, "page"),
        ("/api/runs?since=yesterday-ish", 400, "since"),
        ("/api/runs?tag=" + "x" * 500, 400, "tag"),
        ("/api/runs/zzzzzzzzzzzz", 404, "no run matches"),
        ("/api/compare?base=run:nope12345&candidate=tag:main", 404, "base"),
        ("/api/compare?base=tag:main", 400, "candidate"),
        ("/api/series?fingerprint=x&op=all_reduce&dtype=float32&size_bytes=-4", 400, "size_bytes"),
        ("/api/series?fingerprint=ffff&op=all_reduce&dtype=float32&size_bytes=4", 404, "no stored run"),
        ("/api/regressions?lookback_days=0", 400, "lookback_days"),
        ("/api/nothing-here", 404, ""),
    ],
)
def test_bad_parameters_are_a_4xx_naming_what_is_wrong(
    servers: dict[str, ServeProcess], path: str, status: int, words: str
) -> None:
    server = servers["sqlite"]
    got, headers, body = server.get(path)
    assert got == status, body
    assert headers["content-type"].startswith("application/json")
    assert words in json.loads(body)["error"]


def test_bad_page_parameters_are_an_error_page(server: ServeProcess) -> None:
    status, headers, body = server.get("/runs?per_page=abc")
    assert status == 400 and headers["content-type"].startswith("text/html")
    assert b'id="error-message"' in body and b"per_page" in body
    status, _, body = server.get("/runs/" + "0" * 16)
    assert status == 404 and b"no run matches" in body
    # a form sends the fields left empty as empty strings: not given, not wrong
    compare = "/compare?base=run:05" + "a" * 14 + "&candidate=run:20" + "a" * 14
    assert server.get(compare + "&min_change=&alpha=")[0] == 200
    assert server.get(compare + "&min_change=5%25")[0] == 200
    status, _, body = server.get(compare + "&min_change=abc")
    assert status == 400 and b"min_change" in body
    status, _, body = server.get(compare + "&alpha=0")
    assert status == 400 and b"alpha" in body
    history = "/history?" + urlencode(
        {"fingerprint": FP, "tag": "main", "op": "all_reduce", "dtype": "float32", "size_bytes": 1024}
    )
    assert server.get(history + "&redop=&root=&group=")[0] == 200
    status, _, body = server.get(history + "&root=1.5")
    assert status == 400 and b"root" in body


def test_no_endpoint_reads_a_path_a_client_gives(servers: dict[str, ServeProcess], tmp_path: Path) -> None:
    # a real run file a client might name: the server must not load it, nor say whether it exists
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(run_to_dict(history_runs()[0])))
    server = servers["sqlite"]
    for ref in (str(run_file), f"file:{run_file}", "/etc/passwd", "../../../../etc/passwd"):
        status, _, body = server.get("/api/compare?" + urlencode({"base": ref, "candidate": "tag:main"}))
        assert status in (400, 404), body
        assert b"root:" not in body
    for path in ("/static/../pyproject.toml", "/static/%2e%2e/%2e%2e/store/models.py", "/static/..%2f..%2fconfig.py"):
        status, _, body = server.get(path)
        assert status == 404 and b"import" not in body


def test_a_fresh_empty_store_serves_empty_pages(tmp_path: Path, serve: Callable[..., ServeProcess]) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(url).close()
    server = serve(url)
    assert server.get_json("/api/runs")["total"] == 0  # type: ignore[index]
    status, _, body = server.get("/runs")
    assert status == 200 and b'id="no-runs"' in body
    assert server.get("/regressions")[0] == 200


def test_a_served_test_leaves_no_temporary_directory(tmp_path: Path) -> None:
    """The test server's working directory (its log) goes with it: the test command leaves /tmp as it found it."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(url).close()
    with running_server(url) as server:
        workdir = server.dir
        assert (workdir / "serve.log").exists()
    assert not workdir.exists()


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--host", "0.0.0.0"], {}, "needs a token"),
        (["--host", "192.0.2.1", "--token", "short"], {}, "at least 16"),
        (["--token", "t" * 20, "--write-token", "t" * 20], {}, "must differ"),
        (["--port", "70000"], {}, "--port"),
        (["--public-url", "ftp://x"], {}, "--public-url"),
        (["--monitor", "not a url"], {}, "--monitor"),
        (["--log-level", "loud"], {}, "--log-level"),
    ],
)
def test_serve_refuses_bad_settings_with_an_error(
    tmp_path: Path, args: list[str], env: dict[str, str], words: str
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    Store.open(url).close()
    result = _cli("serve", "--db", url, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and words in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_on_a_missing_store_or_a_taken_port_is_an_error(tmp_path: Path) -> None:
    missing = _cli("serve", "--db", str(tmp_path / "nope.db"), "--port", str(free_port()))
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "Traceback" not in missing.stderr
    url = f"sqlite:///{tmp_path / 'r.db'}"
    Store.open(url).close()
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = _cli("serve", "--db", url, "--port", str(port))
    assert busy.returncode == 2 and "error: " in busy.stderr and "Traceback" not in busy.stderr


def test_documents_are_identical_on_sqlite_and_postgresql(servers: dict[str, ServeProcess]) -> None:
    query = urlencode({"fingerprint": FP, "tag": "main", "op": "all_reduce", "dtype": "float32", "size_bytes": 1024})
    paths = [
        "/api/runs?per_page=7&page=2",
        "/api/runs?tag=main&since=2026-10-05",
        "/api/runs/07" + "a" * 14,
        "/api/series?" + query,
        "/api/compare?base=tag:pr-17&candidate=run:03" + "a" * 14,
    ]
    docs = []
    for server in servers.values():
        got = {p: server.get_json(p) for p in paths}
        got["regressions"] = {
            k: v
            for k, v in server.get_json("/api/regressions?since=2026-10-01").items()  # type: ignore[union-attr]
            if k not in ("computed_at", "compute_s")
        }
        docs.append(got)
    assert docs[0] == docs[1]
