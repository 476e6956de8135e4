"""Who may read and who may write: tokens, sessions, CSRF, Host and the headers every response carries.

- Reads: with a read token configured, every request but ``/healthz`` and ``/static`` needs
  ``Authorization: Bearer <token>`` or the session cookie that ``POST /login`` sets.
- Writes (any method but GET/HEAD/OPTIONS under ``/api``): the write token, as a Bearer header, or
  the write cookie from ``POST /login`` together with ``X-CSRF-Token`` equal to the CSRF cookie
  (double submit: another site can make the browser send cookies, never read them or set headers).
  A write token also reads. With no write token configured every write is refused.
- Tokens and cookies are compared in constant time (``hmac.compare_digest`` of SHA-256 digests,
  so not even the length leaks). Cookies hold an HMAC of the token, never the token.
- ``Host`` must be one the server is reached by (defeats DNS rebinding of a loopback server);
  a cookie-authenticated write must come from the server's own origin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal

from commlens.serve.config import ServeConfig

__all__ = [
    "CSP",
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "WRITE_COOKIE",
    "Access",
    "Gate",
    "new_csrf_token",
]

SESSION_COOKIE = "commlens_session"
WRITE_COOKIE = "commlens_write"
CSRF_COOKIE = "commlens_csrf"
CSRF_HEADER = "x-csrf-token"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    # same-origin, not no-referrer: with no-referrer Chromium sends ``Origin: null`` on the pages' own form posts
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = ("/healthz", "/static/", "/login")


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def same_secret(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two secrets; False when either is missing."""
    if given is None or expected is None:
        return False
    return hmac.compare_digest(_digest(given), _digest(expected))


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


Access = Literal["none", "read", "write"]


@dataclass(frozen=True)
class Decision:
    """What the gate says of one request: let it through, or refuse with a status and why."""

    allowed: bool
    status: int = 200
    reason: str = ""
    access: Access = "read"


class Gate:
    """Checks each request against the server's tokens."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self._allowed_hosts = config.allowed_hosts()
        self._session_value = self._cookie_value(config.token, "session")
        self._write_value = self._cookie_value(config.write_token, "write")

    @staticmethod
    def _cookie_value(token: str | None, purpose: str) -> str | None:
        if token is None:
            return None
        return hmac.new(token.encode(), f"commlens-{purpose}-cookie".encode(), hashlib.sha256).hexdigest()

    @property
    def reads_need_token(self) -> bool:
        return self.config.token is not None

    @property
    def writes_enabled(self) -> bool:
        return self.config.write_token is not None

    def session_cookie(self, token: str) -> tuple[str, str] | None:
        """The (cookie, value) that ``POST /login`` sets for a token, or None when it is neither token."""
        if same_secret(token, self.config.write_token):
            assert self._write_value is not None
            return WRITE_COOKIE, self._write_value
        if same_secret(token, self.config.token):
            assert self._session_value is not None
            return SESSION_COOKIE, self._session_value
        return None

    def host_ok(self, host: str | None) -> bool:
        if self._allowed_hosts is None:
            return True
        return host is not None and host.lower() in self._allowed_hosts

    def access(self, authorization: str | None, cookies: dict[str, str]) -> Access:
        """What the request's credentials allow, before any CSRF check."""
        bearer = None
        if authorization is not None:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer":
                bearer = value.strip()
        if same_secret(bearer, self.config.write_token) or same_secret(cookies.get(WRITE_COOKIE), self._write_value):
            return "write"
        if not self.reads_need_token:
            return "read"
        if same_secret(bearer, self.config.token) or same_secret(cookies.get(SESSION_COOKIE), self._session_value):
            return "read"
        return "none"

    def check(
        self,
        *,
        method: str,
        path: str,
        host: str | None,
        origin: str | None,
        fetch_site: str | None,
        authorization: str | None,
        cookies: dict[str, str],
        csrf_header: str | None,
    ) -> Decision:
        if not self.host_ok(host):
            return Decision(False, 421, f"Host {host!r} is not a name this server is reached by")
        if method not in SAFE_METHODS and not self._same_origin(host, origin, fetch_site):
            return Decision(False, 403, "cross-site request refused")
        if path == "/healthz" or path.startswith("/static/") or path == "/login":
            return Decision(True, access="none")
        access = self.access(authorization, cookies)
        if access == "none":
            return Decision(False, 401, "this server needs a token (Authorization: Bearer, or sign in at /login)")
        if method in SAFE_METHODS:
            return Decision(True, access=access)
        if not self.writes_enabled:
            return Decision(False, 403, "this server is read-only: start it with --write-token to allow writes")
        if access != "write":
            return Decision(False, 403, "writing needs the write token")
        bearer_write = authorization is not None and same_secret(
            authorization.partition(" ")[2].strip(), self.config.write_token
        )
        if not bearer_write and not (
            csrf_header is not None and same_secret(csrf_header, cookies.get(CSRF_COOKIE)) and len(csrf_header) >= 16
        ):
            return Decision(
                False, 403, "missing or wrong CSRF token (X-CSRF-Token must equal the commlens_csrf cookie)"
            )
        return Decision(True, access="write")

    def _same_origin(self, host: str | None, origin: str | None, fetch_site: str | None) -> bool:
        """A state-changing request must not come from another site.

        A current browser says where a request comes from in ``Sec-Fetch-Site``, which a page cannot
        set: that decides alone (``same-origin``, or ``none`` for what the user typed). Without it, an
        ``Origin`` other than this server's is refused; no Origin at all is a client that is no browser
        (curl, CI), which carries no browser's cookies unasked.
        """
        if fetch_site is not None:
            return fetch_site in ("same-origin", "none")
        if origin is None:
            return True
        if origin == "null" or host is None:
            return False
        return origin.lower().split("://", 1)[-1] == host.lower()
