"""What ``commlens serve`` is told at start: the store, where to listen, its tokens, its links."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from commlens.errors import CommlensError

__all__ = ["MIN_TOKEN_CHARS", "ServeConfig", "ServeConfigError", "is_loopback"]

MIN_TOKEN_CHARS = 16  # a token shorter than this is refused: it could be guessed


class ServeConfigError(CommlensError, ValueError):
    """A server setting that cannot be used; the message names it."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address to bind) only reaches this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServeConfig:
    """The server's settings; validated when built.

    ``token`` guards every read (required when ``host`` is not loopback); ``write_token`` allows
    the writes (tags, baselines, thresholds), which are refused when it is None. ``public_url`` is
    the address people reach the server at (links in pull-request comments, the Host header allowed).
    ``monitor_endpoints`` are the ``commlens.monitor`` rank endpoints (``http://host:port``) whose
    live windows the live page shows: given by the operator at start, never by a client.
    """

    db_url: str
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    write_token: str | None = None
    public_url: str | None = None
    monitor_endpoints: tuple[str, ...] = field(default_factory=tuple)
    monitor_token: str | None = None

    def __post_init__(self) -> None:
        if not (0 <= self.port <= 65535):
            raise ServeConfigError(f"--port {self.port}: expected 0 to 65535")
        for name, value in (("--token", self.token), ("--write-token", self.write_token)):
            if value is not None and (len(value) < MIN_TOKEN_CHARS or not value.isprintable() or " " in value):
                raise ServeConfigError(
                    f"{name}: a token needs at least {MIN_TOKEN_CHARS} printable characters and no spaces "
                    "(`python -c 'import secrets; print(secrets.token_urlsafe())'` makes one)"
                )
        if self.token is not None and self.token == self.write_token:
            raise ServeConfigError("--write-token must differ from --token: the write token is what allows writes")
        if not is_loopback(self.host) and self.token is None:
            raise ServeConfigError(
                f"--host {self.host} is reachable from other machines: it needs a token "
                "(--token or $COMMLENS_SERVE_TOKEN), checked on every request"
            )
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
                raise ServeConfigError(f"--public-url {self.public_url!r}: expected http(s)://host[:port][/path]")
        for url in self.monitor_endpoints:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
                raise ServeConfigError(
                    f"--monitor {url!r}: expected a rank endpoint http://host:port (or https://host[:port] behind a TLS proxy)"
                )

    @property
    def base_url(self) -> str:
        """The root the pages link to from outside (pull-request comments)."""
        if self.public_url is not None:
            return self.public_url.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def allowed_hosts(self) -> frozenset[str] | None:
        """The Host header values a request may carry; None: any (bound to every address, behind a token).

        Checking Host defeats DNS rebinding: a web page cannot reach a loopback server by naming
        its own domain, whose address it turned to 127.0.0.1.
        """
        if self.host in ("0.0.0.0", "::"):
            return None
        names = {self.host, f"[{self.host}]"} if ":" in self.host else {self.host}
        if is_loopback(self.host):
            names |= {"localhost", "127.0.0.1", "[::1]"}
        allowed = {f"{n}:{self.port}" for n in names}
        if self.port == 80:
            allowed |= names
        if self.public_url is not None:
            netloc = urlsplit(self.public_url).netloc.lower()
            allowed.add(netloc)
        return frozenset(a.lower() for a in allowed)
