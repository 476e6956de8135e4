"""A real Prometheus server for tests: Debian's ``prometheus`` started on loopback with a scrape config the test writes.

Import the fixture into a test module (``from prometheus_server import prometheus``) and start a server on the
targets the test has brought up::

    server = prometheus(["127.0.0.1:9101"], rule_files=[ALERTS])
    server.wait_for('commlens_monitor_window', lambda samples: len(samples) == 1)

The server scrapes every second into a temporary storage folder, listens on a free loopback port, and is
stopped (terminated, killed if it does not exit) and its folder removed when the test ends. Where the binary
is missing the test skips, except in CI (``CI=true``, or ``COMMLENS_TEST_REQUIRE_PROMETHEUS=1`` as ``.ci/run``
sets), where it fails: CI never skips these tests silently.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

PROMETHEUS_ENV = "COMMLENS_TEST_PROMETHEUS"  # the server binary, where it is not /usr/bin/prometheus
PROMTOOL_ENV = "COMMLENS_TEST_PROMTOOL"
REQUIRE_ENV = "COMMLENS_TEST_REQUIRE_PROMETHEUS"
MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # an API answer larger than this is refused, not read
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it


class PrometheusError(RuntimeError):
    """The test server failed to start, or its HTTP API answered with an error (a query that does not parse)."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant query's answer: its labels (``__name__`` included) and its value."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Alert:
    """One alert the server holds: ``state`` is ``"pending"`` or ``"firing"``."""

    labels: dict[str, str]
    annotations: dict[str, str]
    state: str


def in_ci() -> bool:
    """Whether a missing tool must fail the test rather than skip it."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get(REQUIRE_ENV, "") == "1"


def require_tool(name: str, env: str) -> str:
    """The path of ``prometheus`` or ``promtool``: ``$env``, else ``PATH``, else ``/usr/bin``; skip or fail without it."""
    path = os.environ.get(env) or shutil.which(name) or f"/usr/bin/{name}"
    if os.access(path, os.X_OK):
        return path
    reason = (
        f"{name} is not installed ({path} missing): install Debian's prometheus package (apt-get install prometheus)"
    )
    if in_ci():
        pytest.fail(f"{reason}; in CI this is a failure, not a skip", pytrace=False)
    pytest.skip(reason)


def prometheus_binary() -> str:
    return require_tool("prometheus", PROMETHEUS_ENV)


def promtool_binary() -> str:
    return require_tool("promtool", PROMTOOL_ENV)


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrometheusServer:
    """A running ``prometheus`` scraping ``targets`` (``host:port``) every ``scrape_interval_s`` seconds."""

    def __init__(
        self,
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        scrape_interval_s: int = 1,
        job: str = "commlens",
        binary: str | None = None,
    ) -> None:
        self.targets = list(targets)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.scrape_interval_s = scrape_interval_s
        self.job = job
        self.binary = binary or prometheus_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="commlens-prometheus-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> PrometheusServer:
        config = self.dir / "prometheus.yml"
        interval = f"{self.scrape_interval_s}s"
        doc: dict[str, object] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self.targets}]}],
        }
        if self.rule_files:
            doc["rule_files"] = [str(p) for p in self.rule_files]
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        attempt = 1
        while True:
            self.port = free_port()
            try:
                self._launch(config)
                return self
            except PrometheusError:
                if attempt >= _PORT_ATTEMPTS or "address already in use" not in self.log().lower():
                    self.stop()
                    raise
            attempt += 1

    def _launch(self, config: Path) -> None:
        log = (self.dir / "prometheus.log").open("wb")
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=info",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise PrometheusError(f"prometheus not ready after {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate the server (kill it if it does not exit) and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    # -- HTTP API ------------------------------------------------------------------------------

    def api(self, path: str, params: dict[str, str] | None = None) -> object:
        """GET ``/api/v1/<path>`` and return its ``data``; an ``"error"`` answer raises :class:`PrometheusError`."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = r.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as e:  # 400 (bad_data) and 422 (execution) carry a JSON error body
            body = e.read(MAX_RESPONSE_BYTES + 1)
        if len(body) > MAX_RESPONSE_BYTES:
            raise PrometheusError(f"{path}: answer larger than {MAX_RESPONSE_BYTES} bytes")
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise PrometheusError(f"{path}: answer is not a JSON object")
        if doc.get("status") != "success":
            raise PrometheusError(f"{path}: {doc.get('errorType')}: {doc.get('error')}")
        return doc.get("data")

    def query(self, promql: str) -> list[Sample]:
        """An instant query's samples (a scalar answer is one sample without labels)."""
        data = self.api("query", {"query": promql})
        if not isinstance(data, dict):
            raise PrometheusError(f"query {promql!r}: data is not an object")
        kind, result = data.get("resultType"), data.get("result")
        if kind in ("scalar", "string") and isinstance(result, list):
            return [Sample({}, float(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise PrometheusError(f"query {promql!r}: expected an instant vector, got {kind}")
        samples = []
        for item in result:
            labels, value = item.get("metric"), item.get("value")
            if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
                raise PrometheusError(f"query {promql!r}: malformed sample {item!r}")
            samples.append(Sample({str(k): str(v) for k, v in labels.items()}, float(value[1])))
        return samples

    def wait_for(self, promql: str, predicate: Callable[[list[Sample]], bool], timeout_s: float = 30.0) -> list[Sample]:
        """Poll ``promql`` until ``predicate(samples)`` holds; the samples that satisfied it. Fails with the last ones."""
        deadline = time.monotonic() + timeout_s
        samples: list[Sample] = []
        while True:
            samples = self.query(promql)
            if predicate(samples):
                return samples
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        raise AssertionError(
            f"{promql!r} did not meet the condition within {timeout_s:.0f} s; last answer: {samples!r}; "
            f"targets: {self.target_health()!r}"
        )

    def alerts(self) -> list[Alert]:
        """The pending and firing alerts (``/api/v1/alerts``)."""
        data = self.api("alerts")
        items = data.get("alerts") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise PrometheusError("alerts: no alert list in the answer")
        return [
            Alert(
                labels={str(k): str(v) for k, v in a.get("labels", {}).items()},
                annotations={str(k): str(v) for k, v in a.get("annotations", {}).items()},
                state=str(a.get("state")),
            )
            for a in items
        ]

    def rule_names(self) -> list[str]:
        """The names of the loaded alerting and recording rules (``/api/v1/rules``)."""
        data = self.api("rules")
        groups = data.get("groups", []) if isinstance(data, dict) else []
        return [str(rule.get("name")) for group in groups for rule in group.get("rules", [])]

    def target_health(self) -> list[tuple[str, str, str]]:
        """``(scrape URL, health, last error)`` of each active target."""
        data = self.api("targets")
        active = data.get("activeTargets", []) if isinstance(data, dict) else []
        return [(str(t.get("scrapeUrl")), str(t.get("health")), str(t.get("lastError"))) for t in active]


@pytest.fixture
def prometheus() -> Iterator[Callable[..., PrometheusServer]]:
    """Start a server: ``prometheus(targets, rule_files=[...])``; each one started is stopped after the test."""
    binary = prometheus_binary()
    started: list[PrometheusServer] = []

    def start(targets: Sequence[str], **kw: object) -> PrometheusServer:
        server = PrometheusServer(targets, binary=binary, **kw)  # type: ignore[arg-type]
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()
