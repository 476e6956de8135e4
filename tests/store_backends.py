"""Fixtures for the store's tests: the same test on SQLite and on a real PostgreSQL server.

Import the fixtures into a test module (``from store_backends import pg_server, pg_url, store_url``).
PostgreSQL comes from ``$COMMLENS_TEST_PG_URL`` (``scripts/test.sh`` starts a server and sets
it); each test gets a database of its own, dropped afterwards. When the variable is unset (PostgreSQL
is not installed, and this is not root to install it) the PostgreSQL tests skip, saying why, except in CI
(``CI=true`` or ``COMMLENS_TEST_REQUIRE_POSTGRES=1``, as ``.ci/run`` sets), where they fail. A server that
is set but cannot be reached always fails them.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from commlens.results import Measurement, Run, SystemInfo
from commlens.store import db_url

PG_URL_ENV = "COMMLENS_TEST_PG_URL"
REQUIRE_ENV = "COMMLENS_TEST_REQUIRE_POSTGRES"
WORLD = 4

_session_token = secrets.token_hex(3)
_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The URL of the test server's own database (the role there may create databases)."""
    url = os.environ.get(PG_URL_ENV)
    if not url:
        reason = (
            f"{PG_URL_ENV} is not set: run the tests with scripts/test.sh, which starts PostgreSQL (installing "
            f'Debian\'s postgresql as root), or first: eval "$(bash scripts/test-postgres.sh)"'
        )
        if os.environ.get("CI", "").lower() == "true" or os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; in CI this is a failure, not a skip", pytrace=False)
        pytest.skip(reason)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as e:  # noqa: BLE001 - any failure to connect is the message
        pytest.fail(f"cannot reach the test PostgreSQL server {url}: {e}", pytrace=False)
    finally:
        engine.dispose()
    return url


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    name = f"commlens_t_{_session_token}_{os.getpid()}_{next(_counter)}"
    admin = create_engine(pg_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(pg_server).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's URL, once on SQLite (a file) and once on PostgreSQL (a fresh database)."""
    if request.param == "sqlite":
        return db_url(str(tmp_path / "results.db"))
    return request.getfixturevalue("pg_url")


# -- records to store ------------------------------------------------------------------------


def make_system(backend: str = "gloo", world_size: int = WORLD, cpu_model: str = "Xeon") -> SystemInfo:
    return SystemInfo(
        world_size=world_size,
        hosts=("node-a", "node-b"),
        ranks_per_host={"node-a": world_size // 2, "node-b": world_size - world_size // 2},
        backend=backend,
        backend_version="2.19.3",
        device="cpu",
        torch_version="2.4.0",
        python_version="3.11.7",
        cpu_model=cpu_model,
        cpu_cores=16,
        os="Linux",
        commlens_version="0.1.0",
        env={"NCCL_ALGO": "Ring"},
        extra={"slurm_job": "1234", "nested": {"a": [1, 2.5]}},
    )


def make_measurement(
    op: str = "all_reduce", size_bytes: int = 1024, samples_s: tuple[float, ...] = (1e-5, 2e-5), **kw: object
) -> Measurement:
    fields: dict[str, object] = dict(dtype="float32", count=size_bytes // 4, in_place=False, world_size=WORLD)
    fields["redop"] = "sum" if op in ("all_reduce", "reduce_scatter", "reduce") else None
    fields.update(kw)
    return Measurement(op=op, size_bytes=size_bytes, samples_s=samples_s, **fields)  # type: ignore[arg-type]


def make_run(
    run_id: str,
    *,
    tag: str | None = None,
    started_at: str = "2024-05-01T12:00:00Z",
    ops: tuple[str, ...] = ("all_reduce",),
    revision: str | None = None,
    system: SystemInfo | None = None,
    scale: float = 1.0,
) -> Run:
    """A run measuring each op at 1 KiB and 4 KiB; ``scale`` multiplies every sample."""
    return Run(
        run_id=run_id,
        started_at=started_at,
        system=system or make_system(),
        measurements=tuple(
            make_measurement(op, size, (1e-5 * scale, 2e-5 * scale)) for op in ops for size in (1024, 4096)
        ),
        tag=tag,
        revision=revision,
    )
