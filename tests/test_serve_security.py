"""commlens serve's guards, each attacked on a real server process: tokens, write token, CSRF, Host, CSP.

Every test tries to get around one rule the way an attacker (another web page, a guessed token, a
forged cookie) would, and asserts that it did not work and that nothing was written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_server import ServeProcess, running_server
from store_backends import make_run

from commlens.serve.config import ServeConfig
from commlens.serve.security import CSP, Gate, same_secret
from commlens.store import Store

READ = "read-token-" + "r" * 16
WRITE = "write-token-" + "w" * 16
RUN = "5ec0" + "a" * 12


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('serve-sec') / 'results.db'}"
    with Store.open(url) as store:
        store.save_runs([make_run(RUN, tag="main"), make_run("5ec1" + "b" * 12, tag="main")])
    return url


@pytest.fixture(scope="module")
def guarded(store_url: str) -> Iterator[ServeProcess]:
    """A server with a read token and a write token."""
    with running_server(store_url, token=READ, write_token=WRITE) as server:
        yield server


@pytest.fixture(scope="module")
def open_server(store_url: str) -> Iterator[ServeProcess]:
    """A loopback server with no read token and no write token: read-only."""
    with running_server(store_url) as server:
        yield server


def _json(body: bytes) -> Any:
    return json.loads(body)


def _tag_of(server: ServeProcess) -> str | None:
    status, _, body = server.request("GET", f"/api/runs/{RUN}", headers={"Authorization": f"Bearer {WRITE}"})
    assert status == 200
    tag: str | None = _json(body)["summary"]["tag"]
    return tag


def _put_tag(server: ServeProcess, tag: str, headers: dict[str, str]) -> tuple[int, bytes]:
    status, _, body = server.request(
        "PUT",
        f"/api/runs/{RUN}/tag",
        body=json.dumps({"tag": tag}).encode(),
        headers={"Content-Type": "application/json", **headers},
        auth=False,
    )
    return status, body


# -- reading needs the token ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {READ[:-1]}"},  # one character short
        {"Authorization": f"Bearer {READ}x"},  # one character more
        {"Authorization": f"Basic {READ}"},  # another scheme
        {"Authorization": READ},  # no scheme
        {"Cookie": f"commlens_session={READ}"},  # the token itself as the cookie: cookies hold an HMAC
        {"Cookie": "commlens_session=" + "0" * 64},  # a forged HMAC
        {"X-Token": READ},
    ],
)
def test_reads_without_the_token_are_refused(guarded: ServeProcess, headers: dict[str, str]) -> None:
    for path in ("/api/runs", f"/api/runs/{RUN}", "/api/openapi.json", "/api/regressions"):
        status, _, body = guarded.request("GET", path, headers=headers, auth=False)
        assert status == 401, (path, headers)
        assert "token" in _json(body)["error"] and RUN.encode() not in body
    status, response_headers, body = guarded.request("GET", "/runs", headers=headers, auth=False)
    assert status == 303 and response_headers["location"] == "/login" and RUN.encode() not in body


def test_a_token_in_the_query_string_is_not_accepted(guarded: ServeProcess) -> None:
    status, _, _ = guarded.request("GET", f"/api/runs?token={READ}", auth=False)
    assert status == 401  # URLs end up in logs and Referer headers: a token there would leak


def test_the_read_token_reads_and_health_needs_none(guarded: ServeProcess) -> None:
    assert guarded.get("/api/runs")[0] == 200
    assert guarded.get("/healthz", auth=False)[0] == 200
    assert guarded.get("/static/commlens.js", auth=False)[0] == 200


def test_signing_in_sets_an_httponly_cookie_that_is_not_the_token(guarded: ServeProcess) -> None:
    status, headers, _ = guarded.request(
        "POST",
        "/login",
        body=f"token={READ}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        auth=False,
    )
    assert status == 303
    cookie = headers["set-cookie"]
    assert cookie.startswith("commlens_session=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    assert READ not in cookie and len(value) == 64
    assert guarded.request("GET", "/api/runs", headers={"Cookie": f"commlens_session={value}"}, auth=False)[0] == 200
    wrong = guarded.request(
        "POST",
        "/login",
        body=b"token=guess-guess-guess-guess",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        auth=False,
    )
    assert wrong[0] == 401 and "commlens_session" not in wrong[1].get("set-cookie", "")


def test_a_login_posted_from_another_site_is_refused(guarded: ServeProcess) -> None:
    status, headers, _ = guarded.request(
        "POST",
        "/login",
        body=f"token={WRITE}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"},
        auth=False,
    )
    assert status == 403 and "commlens_write" not in headers.get("set-cookie", "")


# -- writing needs the write token, and a cookie write needs the CSRF token ----------------------------


def test_writes_are_refused_without_the_write_token(guarded: ServeProcess) -> None:
    before = _tag_of(guarded)
    for headers in ({}, {"Authorization": f"Bearer {READ}"}, {"Authorization": "Bearer " + WRITE[:-1] + "x"}):
        status, body = _put_tag(guarded, "hacked", headers)
        assert status in (401, 403), (headers, body)
    # a read session cookie is not a write session
    status, headers, _ = guarded.request(
        "POST", "/login", body=f"token={READ}".encode(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    session = headers["set-cookie"].split(";")[0]
    status, body = _put_tag(guarded, "hacked", {"Cookie": session})
    assert status == 403 and "write token" in _json(body)["error"]
    assert _tag_of(guarded) == before


def test_the_write_token_writes(guarded: ServeProcess) -> None:
    status, body = _put_tag(guarded, "release-1", {"Authorization": f"Bearer {WRITE}"})
    assert status == 200 and _json(body) == {"run_id": RUN, "tag": "release-1", "previous_tag": "main"}
    assert _tag_of(guarded) == "release-1"
    assert _put_tag(guarded, "main", {"Authorization": f"Bearer {WRITE}"})[0] == 200


def _write_session(server: ServeProcess) -> str:
    status, headers, _ = server.request(
        "POST", "/login", body=f"token={WRITE}".encode(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 303
    return headers["set-cookie"].split(";")[0]


def test_a_cookie_write_needs_the_csrf_token_that_only_the_page_can_read(guarded: ServeProcess) -> None:
    session = _write_session(guarded)
    csrf = "c" * 43
    before = _tag_of(guarded)
    attempts = [
        {"Cookie": session},  # a cross-site form: the cookie goes along, no header
        {"Cookie": f"{session}; commlens_csrf={csrf}"},  # the CSRF cookie without the header
        {"Cookie": f"{session}; commlens_csrf={csrf}", "X-CSRF-Token": "d" * 43},  # a wrong header
        {"Cookie": session, "X-CSRF-Token": csrf},  # a header without the cookie to match
        {"Cookie": f"{session}; commlens_csrf=", "X-CSRF-Token": ""},  # both empty
        {"Cookie": f"{session}; commlens_csrf=abc", "X-CSRF-Token": "abc"},  # too short to be one
    ]
    for headers in attempts:
        status, body = _put_tag(guarded, "hacked", headers)
        assert status == 403 and "CSRF" in _json(body)["error"], headers
    assert _tag_of(guarded) == before
    ok = {"Cookie": f"{session}; commlens_csrf={csrf}", "X-CSRF-Token": csrf}
    assert _put_tag(guarded, "main", ok)[0] == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},  # a sandboxed frame or a file: page
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain is another site's page too
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://127.0.0.1"},  # the browser's word wins
    ],
)
def test_a_write_from_another_site_is_refused_even_with_every_token(
    guarded: ServeProcess, headers: dict[str, str]
) -> None:
    session = _write_session(guarded)
    csrf = "e" * 43
    all_tokens = {"Cookie": f"{session}; commlens_csrf={csrf}", "X-CSRF-Token": csrf, **headers}
    status, body = _put_tag(guarded, "hacked", all_tokens)
    assert status == 403 and "cross-site" in _json(body)["error"]
    assert _tag_of(guarded) == "main"


def test_a_server_without_a_write_token_is_read_only(open_server: ServeProcess) -> None:
    for method, path, payload in (
        ("PUT", f"/api/runs/{RUN}/tag", {"tag": "x"}),
        ("PUT", "/api/baselines", {"fingerprint": "f", "tag": None, "ref_kind": "run", "ref": RUN}),
        ("PUT", "/api/thresholds", {"min_change": 0.5}),
        ("DELETE", "/api/thresholds", {}),
    ):
        status, _, body = open_server.request(
            method, path, body=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        assert status == 403 and "read-only" in _json(body)["error"], (method, path)
    assert open_server.get("/api/thresholds")[0] == 200 and open_server.get_json("/api/thresholds") == []
    assert open_server.get_json(f"/api/runs/{RUN}")["summary"]["tag"] == "main"  # type: ignore[index]


# -- Host, headers, pages ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "localhost.:1"])
def test_a_request_for_another_host_name_is_refused(open_server: ServeProcess, host: str) -> None:
    # DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends Host: evil.example
    status, _, body = open_server.request("GET", "/api/runs", headers={"Host": host})
    assert status == 421 and RUN.encode() not in body


def test_every_response_carries_the_security_headers(open_server: ServeProcess) -> None:
    for path in ("/runs", f"/runs/{RUN}", "/api/runs", "/api/nope", "/runs/nope-nope-nope", "/static/commlens.css"):
        _, headers, _ = open_server.get(path)
        assert headers["content-security-policy"] == CSP, path
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in CSP
        assert headers["referrer-policy"] == "same-origin"  # never sent to another site


def test_pages_hold_no_inline_script_style_or_handler(open_server: ServeProcess) -> None:
    fp = make_run(RUN).system.fingerprint()
    pages = [
        "/runs",
        f"/runs/{RUN}",
        "/compare?base=run:" + RUN + "&candidate=tag:main",
        f"/history?fingerprint={fp}&tag=main&op=all_reduce&dtype=float32&size_bytes=1024",
        "/regressions",
        "/login",
        "/runs/nope-nope-nope",
    ]
    for path in pages:
        _, _, body = open_server.get(path)
        html = body.decode()
        for tag in re.findall(r"<script\b[^>]*>", html):
            assert re.search(r'\bsrc="/static/', tag), (path, tag)
        assert not re.search(r"<script\b[^>]*>(?!</script>)", html), path  # no script body
        assert "<style" not in html and not re.search(r"\sstyle=", html), path
        assert not re.search(r"\son[a-z]+=", html), path
        assert "javascript:" not in html


def test_stored_text_is_escaped_on_the_pages(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'xss.db'}"
    payload = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    with Store.open(url) as store:
        store.save_runs([make_run("7e57" + "c" * 12, tag=payload[:60], revision=payload)])
    with running_server(url) as server:
        for path in ("/runs", "/runs/7e57" + "c" * 12):
            _, _, body = server.get(path)
            assert b"<script>alert" not in body and b"<img src=x" not in body
            assert b"&lt;script&gt;alert(1)" in body


def test_tokens_are_compared_in_constant_time_on_digests() -> None:
    # equal length digests whatever the input's length: compare_digest never returns early on length
    assert same_secret("a" * 20, "a" * 20)
    assert not same_secret("a" * 20, "a" * 21) and not same_secret("", "a") and not same_secret(None, "a")
    gate = Gate(ServeConfig(db_url="sqlite://", token=READ, write_token=WRITE))
    assert gate.access(f"Bearer {READ}", {}) == "read" and gate.access(f"Bearer {WRITE}", {}) == "write"
    assert gate.access(f"bearer   {READ}  ", {}) == "read"
    assert gate.access("Bearer ", {}) == "none" and gate.access(None, {"commlens_write": WRITE}) == "none"


def test_a_large_or_unbounded_body_is_refused_before_it_is_read(guarded: ServeProcess) -> None:
    import socket

    # a length over the limit is refused from the headers alone: the body is never sent, and the answer comes
    # (sending the body first races the server's close after its 413: the client may see a broken pipe)
    big = len(json.dumps({"tag": "x" * 200, "pad": "y" * (1 << 20)}))
    with socket.create_connection(("127.0.0.1", guarded.port), timeout=10) as conn:
        conn.sendall(
            (
                f"PUT /api/runs/{RUN}/tag HTTP/1.1\r\nHost: 127.0.0.1:{guarded.port}\r\n"
                f"Authorization: Bearer {WRITE}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {big}\r\nConnection: close\r\n\r\n"
            ).encode()
        )
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    head, _, body = answer.decode(errors="replace").partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413"), head[:200]
    assert "at most" in _json(body.encode())["error"]
    assert _tag_of(guarded) == "main"
    # a chunked body says no length: refused without reading it

    with socket.create_connection(("127.0.0.1", guarded.port), timeout=10) as conn:
        conn.sendall(
            (
                f"PUT /api/runs/{RUN}/tag HTTP/1.1\r\nHost: 127.0.0.1:{guarded.port}\r\n"
                f"Authorization: Bearer {WRITE}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                '5\r\n{"tag\r\n'
            ).encode()
        )
        reply = conn.recv(4096).decode(errors="replace")
    assert reply.startswith("HTTP/1.1 411"), reply[:200]
    assert _tag_of(guarded) == "main"
