"""``commlens serve``: the dashboard and JSON API over the result store, under uvicorn."""

from __future__ import annotations

import os
import sys

import typer

from commlens.cli.app import app, fail
from commlens.cli.errors import errors_as_exit

TOKEN_ENV = "COMMLENS_SERVE_TOKEN"
WRITE_TOKEN_ENV = "COMMLENS_SERVE_WRITE_TOKEN"
MONITOR_TOKEN_ENV = "COMMLENS_MONITOR_TOKEN"  # what commlens.monitor and monitor collect read


@app.command("serve")
def serve(
    db: str | None = typer.Option(
        None, "--db", help="the result store (a SQLite path or a URL; default: the local one)"
    ),
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
) -> None:
    """Serve the dashboard: runs, run, compare, history, regressions, diagnoses, projections, live jobs."""
    from commlens.serve.config import ServeConfig
    from commlens.store import db_url, default_db_url

    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    write_token = write_token if write_token is not None else os.environ.get(WRITE_TOKEN_ENV) or None
    if log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        fail(f"--log-level {log_level!r}: expected critical, error, warning, info, debug or trace")
    with errors_as_exit():
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
        from commlens.serve.app import create_app

        application = create_app(config)
    import uvicorn

    _check_can_listen(host, port)
    print(f"commlens serve: {config.base_url}/ over {url}", file=sys.stderr, flush=True)
    try:
        uvicorn.run(
            application,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            server_header=False,
            proxy_headers=False,
        )
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
    except SystemExit as e:  # uvicorn exits 1 when it cannot bind (taken between the check and now)
        if e.code not in (0, None):
            fail(f"cannot listen on {host}:{port} (see uvicorn's message above)")


def _check_can_listen(host: str, port: int) -> None:
    """Bind the address once before starting, so a taken port is an ``error:`` line, not uvicorn's log."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        fail(f"--host {host!r}: {e.strerror or e}")
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
