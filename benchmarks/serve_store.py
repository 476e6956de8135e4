#!/usr/bin/env python
"""A generated result store for the dashboard benchmark (issue 16): 10,000 runs, 1,000,000 measurements.

Run from the repository root::

    .venv/bin/python benchmarks/serve_store.py --backend sqlite        # or postgresql, or both
    .venv/bin/python benchmarks/serve_store.py --backend both --regenerate

What it holds (seeded, so every generation is the same store):

1. Four systems (fingerprints): one and two hosts of 8 H100s, one host of 8 A100s, a 4-rank gloo CPU box.
2. Tag ``main``: the nightly of each system over one year, each run at its own revision (a commit of
   main); the first system runs about every 17 hours, so its series hold 500 points (the 500-point
   history page). About 60 runs carry no tag.
3. Tags ``pr-NNN``: the rest, a pull request's 1 to 6 runs within a few days, on one system.
4. Each run: 5 ops (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast) x 10 sizes (1 KiB
   to 256 MiB) x out of place and in place = 100 measurements of 20 samples each.
5. Level shifts a detector must find (``SHIFTS``): a slower all_reduce at >= 1 MiB on the first two
   systems from day 120, a faster all_gather on the first from day 250, a slower reduce_scatter on
   the A100s from day 300; and a noisy all_to_all on the CPU box (an unstable series).
6. A baseline for ``main`` of the first system (a run from before the regression) and a threshold.

Runs are built as ``commlens.results.Run`` records (validated, statistics from the samples) and turned
into rows by the store's own ``commlens.store.convert``, so they load back with ``Store.get_run``;
only the insert is bulk: SQLAlchemy Core ``executemany`` on SQLite, ``COPY`` on PostgreSQL, with the
measurement ids given here (no read-back query).

The store is made once and reused: SQLite at ``/tmp/commlens-serve-bench-v{N}.db``, PostgreSQL as the
database ``commlens_serve_bench_v{N}`` on the server of ``$COMMLENS_TEST_PG_URL`` (from
``eval "$(bash scripts/test-postgres.sh)"``). Each is built under a temporary name and renamed when
complete, so a generation cut short is never reused. ``--regenerate`` builds it again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, insert, select, text
from sqlalchemy.engine import Connection, make_url

from commlens.results.records import Measurement, Run, SystemInfo
from commlens.results.runconfig import BenchSettings
from commlens.store import Store
from commlens.store.convert import measurement_rows, run_row
from commlens.store.models import BaselineModel, MeasurementModel, RunModel, SampleModel, ThresholdModel

GENERATION = 1  # bump when the generated content changes: the cached stores' names carry it
SEED = 16
RUNS = 10_000
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
SIZES_BYTES = tuple(1024 * 4**k for k in range(10))  # 1 KiB .. 256 MiB
SAMPLES = 20
PER_RANK_OPS = {"all_gather", "reduce_scatter", "all_to_all"}  # count is per rank (nccl-tests)
REDUCING = {"all_reduce", "reduce_scatter"}
YEAR_START = datetime(2025, 12, 1, 2, 0, tzinfo=timezone.utc)
DAYS = 365
MAIN_POINTS_FIRST = 500  # main runs of the first system: its series are the 500-point history
UNTAGGED = 60
INSERT_RUNS = 50  # runs per insert batch (5,000 measurements)
SQLITE_PATH = Path(f"/tmp/commlens-serve-bench-v{GENERATION}.db")
PG_DATABASE = f"commlens_serve_bench_v{GENERATION}"


@dataclass(frozen=True)
class System:
    """One generated system: what its fingerprint is made of and how fast its collectives are."""

    name: str
    info: SystemInfo
    latency_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class Shift:
    """A level shift in the true time of some series from a day on: ``factor`` 1.12 is 12 % slower."""

    system: str
    op: str
    min_size_bytes: int
    day: float
    factor: float


def _system(
    name: str, world: int, hosts: int, backend: str, device: str, gpu: str, latency_s: float, bw: float
) -> System:
    host_names = tuple(f"{name}-{h:02d}" for h in range(hosts))
    info = SystemInfo(
        world_size=world,
        hosts=host_names,
        ranks_per_host={h: world // hosts for h in host_names},
        backend=backend,
        backend_version="2.21.5" if backend == "nccl" else "",
        device=device,
        device_names=(gpu,) * world if gpu else (),
        torch_version="2.5.1",
        python_version="3.11.7",
        cpu_model="Intel(R) Xeon(R) Platinum 8480+",
        cpu_cores=112 if device == "cuda" else 16,
        os="Linux-6.8.0-x86_64",
        commlens_version="0.16.0",
        env={"NCCL_DEBUG": "WARN"} if backend == "nccl" else {},
    )
    return System(name, info, latency_s, bw)


SYSTEMS = (
    _system("h100a", 8, 1, "nccl", "cuda", "NVIDIA H100 80GB HBM3", 14e-6, 360e9),
    _system("h100b", 16, 2, "nccl", "cuda", "NVIDIA H100 80GB HBM3", 28e-6, 42e9),
    _system("a100", 8, 1, "nccl", "cuda", "NVIDIA A100-SXM4-80GB", 18e-6, 220e9),
    _system("cpu", 4, 1, "gloo", "cpu", "", 90e-6, 2.5e9),
)
SHIFTS = (
    Shift("h100a", "all_reduce", 1 << 20, 120.0, 1.12),
    Shift("h100b", "all_reduce", 1 << 20, 120.0, 1.12),
    Shift("h100a", "all_gather", 0, 250.0, 0.90),
    Shift("a100", "reduce_scatter", 0, 300.0, 1.08),
)
NOISY = ("cpu", "all_to_all")  # an unstable series: run-to-run scatter of about 25 %
OP_COST = {"all_reduce": 1.0, "all_gather": 0.55, "reduce_scatter": 0.55, "all_to_all": 0.9, "broadcast": 0.5}


@dataclass(frozen=True)
class PlannedRun:
    day: float
    system: int
    tag: str | None
    revision: str


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def plan(runs: int = RUNS, seed: int = SEED) -> list[PlannedRun]:
    """When each run started, on which system, with which tag and revision; oldest first."""
    rng = random.Random(seed)
    main_commits: list[tuple[float, str]] = []  # (day, revision): main moves about 3 times a day
    day = 0.0
    while day < DAYS:
        main_commits.append((day, _hex(rng, 40)))
        day += rng.expovariate(3.0)
    planned: list[PlannedRun] = []

    def main_revision(at: float) -> str:
        lo, hi = 0, len(main_commits) - 1
        while lo < hi:  # the last commit at or before ``at``
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if main_commits[mid][0] <= at else (lo, mid - 1)
        return main_commits[lo][1]

    step = DAYS / MAIN_POINTS_FIRST
    planned += [PlannedRun(i * step, 0, "main", main_revision(i * step)) for i in range(MAIN_POINTS_FIRST)]
    for system in range(1, len(SYSTEMS)):
        planned += [PlannedRun(d + 0.1 * system, system, "main", main_revision(d + 0.1 * system)) for d in range(DAYS)]
    planned += [
        PlannedRun(at, rng.randrange(len(SYSTEMS)), None, main_revision(at))
        for at in (rng.uniform(0, DAYS - 1) for _ in range(UNTAGGED))
    ]
    number = 1000
    while len(planned) < runs:
        number += 1
        opened = rng.uniform(0, DAYS - 7)
        system = rng.choices(range(len(SYSTEMS)), weights=(4, 2, 2, 1))[0]
        for _ in range(min(rng.randint(1, 6), runs - len(planned))):
            planned.append(PlannedRun(opened + rng.uniform(0, 6), system, f"pr-{number}", _hex(rng, 40)))
    planned.sort(key=lambda p: (p.day, p.system))
    return planned


def _true_times(system: System, at_day: float) -> np.ndarray:
    """The (op, size, placement) grid's true mean times in seconds on ``system`` at ``at_day``."""
    out = np.empty((len(OPS), len(SIZES_BYTES), 2))
    for i, op in enumerate(OPS):
        for j, size in enumerate(SIZES_BYTES):
            t = system.latency_s + OP_COST[op] * size / system.busbw_bytes_per_s
            for shift in SHIFTS:
                if (
                    shift.system == system.name
                    and shift.op == op
                    and size >= shift.min_size_bytes
                    and at_day >= shift.day
                ):
                    t *= shift.factor
            out[i, j, 0] = t
            out[i, j, 1] = t * 0.985  # in place is a little faster
    return out


def build_run(index: int, planned: PlannedRun, rng: np.random.Generator) -> Run:
    """One run: 100 measurements of 20 samples, noise from ``rng``."""
    system = SYSTEMS[planned.system]
    world = system.info.world_size
    true = _true_times(system, planned.day)
    run_factor = np.exp(rng.normal(0.0, 0.015, size=true.shape))  # run-to-run variation per row
    if NOISY[0] == system.name:
        run_factor[OPS.index(NOISY[1])] *= np.exp(rng.normal(0.0, 0.25, size=true.shape[1:]))
    samples = true[..., None] * run_factor[..., None] * np.exp(rng.normal(0.0, 0.02, size=(*true.shape, SAMPLES)))
    measurements = []
    for i, op in enumerate(OPS):
        for j, size in enumerate(SIZES_BYTES):
            count = size // 4 // (world if op in PER_RANK_OPS else 1)
            for k, in_place in enumerate((False, True)):
                measurements.append(
                    Measurement(
                        op=op,
                        dtype="float32",
                        size_bytes=size,
                        count=count,
                        in_place=in_place,
                        world_size=world,
                        samples_s=tuple(samples[i, j, k].tolist()),
                        redop="sum" if op in REDUCING else None,
                        root=0 if op == "broadcast" else None,
                        nwrong=0,
                    )
                )
    started = YEAR_START + timedelta(days=planned.day)
    finished = started + timedelta(seconds=95 + index % 40)
    run_id = hashlib.sha256(f"serve-bench {GENERATION} {index}".encode()).hexdigest()[:32]
    sizes = f"-b 1K -e 256M -f 4 -n {SAMPLES} -w 5"
    return Run(
        run_id=run_id,
        started_at=started.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
        finished_at=finished.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
        system=system.info,
        measurements=tuple(measurements),
        tag=planned.tag,
        revision=planned.revision,
        command_line=f"commlens bench --ops {','.join(OPS)} {sizes} --nproc {world}",
        source="commlens",
        config=BenchSettings(
            {"ops": list(OPS), "min_bytes": SIZES_BYTES[0], "max_bytes": SIZES_BYTES[-1], "iters": SAMPLES}
        ),
        notes=(f"generated for benchmarks/serve_speed.py (generation {GENERATION})",),
    )


def _rows(runs: list[Run], first_id: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The runs, measurements and samples rows of ``runs``, the measurements numbered from ``first_id``."""
    run_rows = [run_row(run) for run in runs]
    m_rows: list[dict[str, Any]] = []
    s_rows: list[dict[str, Any]] = []
    next_id = first_id
    for run in runs:
        for measurement, sample in measurement_rows(run, 0, len(run.measurements)):
            m_rows.append({"id": next_id, **measurement})
            s_rows.append({"measurement_id": next_id, **sample})
            next_id += 1
    return run_rows, m_rows, s_rows


def generate_runs(runs: int = RUNS, seed: int = SEED) -> Iterator[list[Run]]:
    """The store's runs, oldest first, ``INSERT_RUNS`` at a time."""
    rng = np.random.default_rng(seed)
    batch: list[Run] = []
    for index, planned in enumerate(plan(runs, seed)):
        batch.append(build_run(index, planned, rng))
        if len(batch) == INSERT_RUNS:
            yield batch
            batch = []
    if batch:
        yield batch


def _insert_core(conn: Connection, runs: list[Run], first_id: int) -> int:
    run_rows, m_rows, s_rows = _rows(runs, first_id)
    conn.execute(insert(RunModel), run_rows)
    conn.execute(insert(MeasurementModel), m_rows)
    conn.execute(insert(SampleModel), s_rows)
    return len(m_rows)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


_JSON_COLUMNS = {"system", "config", "notes", "reported", "samples_s", "rank_samples_s", "rounds"}


def _copy(cursor: Any, table: str, rows: list[dict[str, Any]]) -> None:
    columns = list(rows[0])
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([_json(row[c]) if c in _JSON_COLUMNS else row[c] for c in columns])


def _insert_copy(conn: Connection, runs: list[Run], first_id: int) -> int:
    run_rows, m_rows, s_rows = _rows(runs, first_id)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    _copy(cursor, "runs", run_rows)
    _copy(cursor, "measurements", m_rows)
    _copy(cursor, "samples", s_rows)
    return len(m_rows)


def _annotate(conn: Connection) -> None:
    """A baseline for main of the first system (a run before the regression) and a threshold on it."""
    fingerprint = SYSTEMS[0].info.fingerprint()
    before = conn.scalar(
        select(RunModel.run_id)
        .where(RunModel.fingerprint == fingerprint, RunModel.tag == "main")
        .order_by(RunModel.started_at_utc)
        .offset(100)
        .limit(1)
    )
    conn.execute(
        insert(BaselineModel),
        [
            {
                "fingerprint": fingerprint,
                "tag": "main",
                "ref_kind": "run",
                "ref": before,
                "note": "release 0.15",
                "set_at": "2026-01-15T09:00:00+00:00",
            }
        ],
    )
    conn.execute(
        insert(ThresholdModel),
        [
            {
                "fingerprint": fingerprint,
                "tag": "main",
                "op": "all_reduce",
                "dtype": "*",
                "size_bytes": -1,
                "group_name": "",
                "min_change": 0.05,
                "alpha": None,
                "detect_alpha": None,
                "set_at": "2026-01-15T09:00:00+00:00",
            }
        ],
    )


def fill(url: str, runs: int = RUNS, seed: int = SEED, progress: bool = True) -> tuple[int, int, float]:
    """Create the schema at ``url`` and insert the generated runs; returns (runs, measurements, seconds)."""
    start = time.perf_counter()
    store = Store.open(url)
    is_pg = store.engine.dialect.name == "postgresql"
    n_runs = n_measurements = 0
    try:
        with store.engine.begin() as conn:
            for batch in generate_runs(runs, seed):
                insert_batch = _insert_copy if is_pg else _insert_core
                n_measurements += insert_batch(conn, batch, n_measurements + 1)
                n_runs += len(batch)
                if progress and n_runs % 1000 == 0:
                    print(
                        f"  {n_runs} runs, {n_measurements} measurements, {time.perf_counter() - start:.0f} s",
                        flush=True,
                    )
            _annotate(conn)
            if is_pg:
                conn.execute(
                    text("SELECT setval(pg_get_serial_sequence('measurements', 'id'), :n)"), {"n": n_measurements}
                )
        if is_pg:
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(
                    text("ANALYZE")
                )  # what autovacuum does on a team's server (the test server runs without it)
        else:
            with store.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    return n_runs, n_measurements, time.perf_counter() - start


def _pg_admin_url() -> str:
    url = os.environ.get("COMMLENS_TEST_PG_URL")
    if not url:
        raise SystemExit(
            'no PostgreSQL server: run eval "$(bash scripts/test-postgres.sh)" first (COMMLENS_TEST_PG_URL)'
        )
    return url


def _pg_databases(admin_url: str) -> set[str]:
    from sqlalchemy import create_engine

    engine = create_engine(admin_url)
    try:
        with engine.connect() as conn:
            return set(conn.scalars(text("SELECT datname FROM pg_database")))
    finally:
        engine.dispose()


def _pg_admin(admin_url: str, *statements: str) -> None:
    from sqlalchemy import create_engine

    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def pg_url(admin_url: str, database: str) -> str:
    return make_url(admin_url).set(database=database).render_as_string(hide_password=False)


def ensure_store(backend: str, *, regenerate: bool = False, runs: int = RUNS, progress: bool = True) -> str:
    """The URL of the generated store on ``backend`` (``sqlite`` or ``postgresql``), generating it if needed."""
    if backend == "sqlite":
        path = SQLITE_PATH if runs == RUNS else SQLITE_PATH.with_name(f"{SQLITE_PATH.stem}-{runs}.db")
        if path.exists() and not regenerate:
            return _current(f"sqlite:///{path}")
        partial = path.with_name(path.name + ".partial")
        for stale in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            stale.unlink(missing_ok=True)
        if progress:
            print(f"generating {runs} runs into {path}", flush=True)
        n_runs, n_m, seconds = fill(f"sqlite:///{partial}", runs, progress=progress)
        for leftover in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)
        partial.rename(path)
        if progress:
            print(f"stored {n_runs} runs, {n_m} measurements in {seconds:.0f} s", flush=True)
        return f"sqlite:///{path}"
    if backend != "postgresql":
        raise SystemExit(f"unknown backend {backend!r} (sqlite or postgresql)")
    admin = _pg_admin_url()
    name = PG_DATABASE if runs == RUNS else f"{PG_DATABASE}_{runs}"
    existing = _pg_databases(admin)
    if name in existing and not regenerate:
        return _current(pg_url(admin, name))
    building = f"{name}_partial"
    _pg_admin(admin, f'DROP DATABASE IF EXISTS "{building}"', f'CREATE DATABASE "{building}"')
    if progress:
        print(f"generating {runs} runs into PostgreSQL database {name}", flush=True)
    n_runs, n_m, seconds = fill(pg_url(admin, building), runs, progress=progress)
    _pg_admin(admin, f'DROP DATABASE IF EXISTS "{name}"', f'ALTER DATABASE "{building}" RENAME TO "{name}"')
    if progress:
        print(f"stored {n_runs} runs, {n_m} measurements in {seconds:.0f} s", flush=True)
    return pg_url(admin, name)


def _current(url: str) -> str:
    """A store generated earlier, migrated to this commlens' schema (a new index, say) if it is older."""
    from commlens.store import upgrade_schema

    upgrade_schema(url)
    return url


def describe(url: str) -> dict[str, Any]:
    """What the store at ``url`` holds: counts, and the longest series of the first system."""
    store = Store.open(url, create=False)
    try:
        with store.engine.connect() as conn:
            n_runs = conn.scalar(select(func.count()).select_from(RunModel))
            n_m = conn.scalar(select(func.count()).select_from(MeasurementModel))
            tags = conn.scalar(select(func.count(func.distinct(RunModel.tag))))
            fps = conn.scalar(select(func.count(func.distinct(RunModel.fingerprint))))
    finally:
        store.close()
    main = sum(1 for p in plan() if p.system == 0 and p.tag == "main")
    return {"runs": n_runs, "measurements": n_m, "tags": tags, "fingerprints": fps, "longest_series": main}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="sqlite")
    parser.add_argument("--regenerate", action="store_true", help="build the store again even if one is cached")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs to generate (a smaller store is cached apart)")
    args = parser.parse_args(argv)
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        url = ensure_store(backend, regenerate=args.regenerate, runs=args.runs)
        print(backend, make_url(url).render_as_string(hide_password=True), describe(url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
