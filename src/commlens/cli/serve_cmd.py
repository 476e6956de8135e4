"""``commlens serve``: the dashboard and JSON API over the result store, under uvicorn."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from dataclasses import dataclass

import typer

from commlens.cli.app import app, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB, option_set

TOKEN_ENV = "COMMLENS_SERVE_TOKEN"
WRITE_TOKEN_ENV = "COMMLENS_SERVE_WRITE_TOKEN"
MONITOR_TOKEN_ENV = "COMMLENS_MONITOR_TOKEN"  # what commlens.monitor and monitor collect read


@dataclass(frozen=True)
class _LimitOptions:
    """The options of ``serve.limits.Limits``, field for field (and its defaults)."""

    header_timeout_s: float = typer.Option(
        10.0, "--header-timeout", help="seconds a connection has to send a request's headers"
    )
    body_timeout_s: float = typer.Option(30.0, "--body-timeout", help="seconds a request has to send its body")
    keep_alive_s: float = typer.Option(5.0, "--keep-alive", help="seconds an idle kept-alive connection stays open")
    max_connections: int = typer.Option(
        4096,
        "--max-connections",
        help="open connections at most (lowered to what the descriptor limit leaves room for); over it, the "
        "connection that waited longest for its headers is closed",
    )
    max_requests_per_client: int = typer.Option(
        32, "--max-requests-per-client", help="requests of one client address served at once; more get 429"
    )


@app.command("serve")
@option_set("limit_options", _LimitOptions)
def serve(
    db: str | None = DB,
    host: str = typer.Option("127.0.0.1", help="address to bind: loopback unless told; any other needs --token"),
    port: int = typer.Option(8765, help="port to listen on"),
    token: str | None = typer.Option(None, help=f"token every request needs (default: ${TOKEN_ENV})"),
    write_token: str | None = typer.Option(
        None,
        "--write-token",
        help=f"token that allows writes: tags, baselines, thresholds (default: ${WRITE_TOKEN_ENV})",
    ),
    public_url: str | None = typer.Option(
        None, "--public-url", help="the address people reach this server at (links in pull-request comments)"
    ),
    monitor: list[str] = typer.Option(
        [], "--monitor", help="a live job's rank endpoint http://HOST:PORT (commlens.monitor) for the live page"
    ),
    monitor_token: str | None = typer.Option(
        None, "--monitor-token", help="the token of those endpoints (default: $COMMLENS_MONITOR_TOKEN)"
    ),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level"),
    *,
    limit_options: _LimitOptions,
) -> None:
    """Serve the dashboard: runs, run, compare, history, regressions, diagnoses, projections, live jobs."""
    from commlens.serve.config import ServeConfig
    from commlens.store import db_url, default_db_url

    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    write_token = write_token if write_token is not None else os.environ.get(WRITE_TOKEN_ENV) or None
    if log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        fail(f"--log-level {log_level!r}: expected critical, error, warning, info, debug or trace")
    with errors_as_exit():
        from commlens.serve.limits import Limits

        limits = Limits(**dataclasses.asdict(limit_options))
        url = default_db_url() if db is None else db_url(db)
        config = ServeConfig(
            db_url=url,
            host=host,
            port=port,
            token=token,
            write_token=write_token,
            public_url=public_url,
            monitor_endpoints=tuple(monitor),
            monitor_token=monitor_token if monitor_token is not None else os.environ.get(MONITOR_TOKEN_ENV) or None,
        )
    import uvicorn

    from commlens.serve.limits import connection_plan

    cap, backlog = connection_plan(limits.max_connections)
    listener = _listen(host, port, backlog)
    config = dataclasses.replace(config, port=int(listener.getsockname()[1]))  # --port 0: the port it got
    with errors_as_exit():
        from commlens.serve.app import create_app
        from commlens.serve.limits import PerClientLimit, protocol_class

        application = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(
            PerClientLimit(application, limits.max_requests_per_client),
            host=host,
            port=config.port,
            http=protocol_class(limits, cap),
            timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # uvicorn takes a float there
            backlog=backlog,
            log_level=log_level,
            access_log=False,
            server_header=False,
            proxy_headers=False,
        )
    )
    print(f"commlens serve: {config.base_url}/ over {url}", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[listener])
    except OSError as e:
        fail(f"cannot listen on {host}:{config.port}: {e.strerror or e}")
    finally:
        listener.close()


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    """The listening socket, bound here so that a taken port is an ``error:`` line, and port 0 a real one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        fail(f"--host {host!r}: {e.strerror or e}")
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind(address)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
    sock.set_inheritable(True)
    return sock
