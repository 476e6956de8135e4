"""One bounded HTTP GET of a rank endpoint: a connect timeout, a total deadline, a bounded answer.

``urllib``'s timeout bounds each socket operation, not the request: an endpoint that sends one byte a
second never trips it, and the status line alone can take hours. :func:`http_get` reads with the time
left before its deadline on every receive, so nothing an endpoint does holds the caller past it. The
request is HTTP/1.0 with ``Connection: close`` (the answer is read to its end; no chunked encoding). With a
``tls`` context (an ``https://`` endpoint, such as one behind a TLS-terminating proxy) the handshake is held to
the same deadline, and the certificate is checked as that context says.
"""

from __future__ import annotations

import socket
import ssl
import time

from commlens.errors import CommlensError

__all__ = ["FetchError", "http_get"]

MAX_HEAD_BYTES = 64 << 10


class FetchError(CommlensError, OSError):
    """A GET that did not give an answer: ``kind`` is ``unreachable``, ``timeout`` or ``bad``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


def http_get(
    host: str,
    port: int,
    path: str,
    *,
    timeout_s: float,
    connect_timeout_s: float | None = None,
    max_bytes: int = 16 << 20,
    headers: dict[str, str] | None = None,
    deadline: float | None = None,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """``GET path`` from ``host:port``: (status, body), within ``timeout_s`` in all (and before ``deadline``,
    a ``time.monotonic()`` instant, when given). Raises :class:`FetchError` otherwise."""
    started = time.monotonic()
    end = started + timeout_s if deadline is None else min(deadline, started + timeout_s)
    allotted = max(0.0, end - started)

    def left() -> float:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise FetchError("timeout", f"no answer within {allotted:.2g} s")
        return remaining

    try:
        sock = socket.create_connection((host, port), timeout=min(left(), connect_timeout_s or timeout_s))
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError(
            "timeout", f"no connection within {min(allotted, connect_timeout_s or allotted):.2g} s"
        ) from None
    except OSError as e:
        raise FetchError("unreachable", f"cannot reach it: {e.strerror or e}") from None
    if tls is not None:
        try:
            sock.settimeout(left())
            sock = tls.wrap_socket(sock, server_hostname=host)
        except FetchError:
            sock.close()
            raise
        except TimeoutError:
            sock.close()
            raise FetchError("timeout", f"no TLS handshake within {allotted:.2g} s") from None
        except ssl.SSLError as e:
            sock.close()
            raise FetchError("unreachable", f"TLS failed: {e.reason or e}") from None
        except OSError as e:
            sock.close()
            raise FetchError("unreachable", f"TLS failed: {e.strerror or e}") from None
    name = f"[{host}]" if ":" in host else host
    lines = [f"GET {path} HTTP/1.0", f"Host: {name}:{port}", "Accept: application/json", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    data = bytearray()
    try:
        with sock:
            sock.settimeout(left())
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            length: int | None = None
            head_end = -1
            while True:
                sock.settimeout(left())
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if head_end < 0:
                    head_end = data.find(b"\r\n\r\n")
                    if head_end < 0 and len(data) > MAX_HEAD_BYTES:
                        raise FetchError("bad", f"its answer's head is over {MAX_HEAD_BYTES >> 10} KiB")
                    if head_end >= 0:
                        length = _content_length(bytes(data[:head_end]))
                if len(data) - max(head_end, 0) > max_bytes:
                    raise FetchError("bad", f"its answer is over {max_bytes >> 20} MiB")
                if length is not None and len(data) - head_end - 4 >= length:
                    break
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError("timeout", f"no answer within {allotted:.2g} s") from None
    except OSError as e:
        raise FetchError("unreachable", f"cannot read its answer: {e.strerror or e}") from None
    if head_end < 0:
        raise FetchError("bad", "its answer is not HTTP (no header end)")
    status_line = bytes(data[: data.find(b"\r\n")]).decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise FetchError("bad", f"its answer is not HTTP: {status_line[:40]!r}")
    body = bytes(data[head_end + 4 :])
    if length is not None:
        body = body[:length]
    return int(parts[1]), body


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            text = value.strip()
            if text.isdigit() and len(text) < 19:
                return int(text)
            raise FetchError("bad", "its Content-Length is not a number")
    return None
