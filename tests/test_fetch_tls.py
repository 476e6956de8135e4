"""An https:// rank endpoint (a TLS-terminating proxy in front of a job's monitor endpoint): the bounded GET
speaks TLS, checks the certificate, and holds a stalled handshake to its deadline."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commlens.monitor.fetch import FetchError, http_get

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a certificate")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
    )
    return key, crt


class _Info(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"path": self.path, "auth": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_port(cert: tuple[Path, Path]) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Info)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert[1], cert[0])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_an_https_endpoint_is_read_with_its_certificate_checked(cert: tuple[Path, Path], https_port: int) -> None:
    trusting = ssl.create_default_context(cafile=str(cert[1]))
    status, body = http_get(
        "localhost", https_port, "/info?x=1", timeout_s=5, headers={"Authorization": "Bearer t"}, tls=trusting
    )
    assert status == 200
    assert json.loads(body) == {"path": "/info?x=1", "auth": "Bearer t"}
    # The system's CAs do not know this certificate: refused, saying why, instead of read.
    with pytest.raises(FetchError) as e:
        http_get("localhost", https_port, "/info", timeout_s=5, tls=ssl.create_default_context())
    assert e.value.kind == "unreachable"
    assert "TLS failed" in str(e.value) and "CERTIFICATE" in str(e.value).upper()


def test_a_server_that_never_completes_the_handshake_is_a_timeout_at_the_deadline() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts TCP (the kernel does), never answers the TLS hello
    try:
        started = time.monotonic()
        with pytest.raises(FetchError) as e:
            http_get("127.0.0.1", listener.getsockname()[1], "/info", timeout_s=1.0, tls=ssl.create_default_context())
        assert e.value.kind == "timeout"
        assert "handshake" in str(e.value)
        assert time.monotonic() - started < 3.0
    finally:
        listener.close()


def test_the_dashboard_reads_an_https_endpoint_trusting_the_systems_cas(
    cert: tuple[Path, Path], https_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from commlens.serve.live import LiveEndpoint

    monkeypatch.setenv("SSL_CERT_FILE", str(cert[1]))  # the "system" CAs: this test's own certificate
    endpoint = LiveEndpoint(0, f"https://localhost:{https_port}", token="t")
    endpoint.poll()
    # It answered over TLS, /job and then /records: this server is no monitor endpoint, which the page says.
    assert endpoint.info == {"path": "/job", "auth": "Bearer t"}
    assert endpoint.bad and endpoint.error is not None and "/records did not answer" in endpoint.error
