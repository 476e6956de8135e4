#!/usr/bin/env python
"""Issue 28's availability target: ``commlens serve`` answers ``/healthz`` (p99 under 1 s) while clients
hold 2,000 idle and half-sent connections and 50 monitor endpoints trickle their answers.

Run from the repository root::

    .venv/bin/python benchmarks/serve_hostile.py                      # 2,000 connections, 50 endpoints, 30 s
    .venv/bin/python benchmarks/serve_hostile.py --connections 500 --duration 10 --no-doc

All on loopback, in this process and one ``commlens serve`` process:

1. this process raises its own descriptor soft limit to the hard one (it holds the 2,000 connections);
2. ``--endpoints`` monitor endpoints (asyncio, one port each) accept and send an HTTP answer one byte a
   second, never finishing; ``commlens serve --port 0 --monitor URL ...`` is started over them and an
   empty SQLite store;
3. ``--connections`` connections are held against it: a quarter send nothing, a quarter half a request
   line, a quarter a header byte a second, a quarter a full request head with a 1 MB body announced and
   a byte a second of it; each one the server closes is opened again at once;
4. ``--live-clients`` clients request ``/api/live`` in a loop (each a fresh connection, 20 s timeout);
   the endpoints, the connections and these clients run in a child process (asyncio, and a thread per
   live client), so that the probes below never wait for its interpreter lock;
5. once every ``--every`` seconds for ``--duration`` seconds, ``GET /healthz`` and ``GET /api/runs`` (a
   route served on a worker thread) on a fresh connection, with a 5 s timeout (a timeout counts as 5 s
   and a failure); the server's open descriptors and threads are read from ``/proc``.

The section ``## Serve under hostile clients (issue 28)`` of ``docs/benchmarks.md`` is replaced.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import asyncio
import os
import platform
import re
import resource
import selectors
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docsection import write_section  # noqa: E402

from commlens.monitor.fetch import FetchError, http_get
from commlens.results.stats import percentile as _sorted_percentile
from commlens.store import Store

SECTION = "## Serve under hostile clients (issue 28)"
HOST = "127.0.0.1"
PROBE_FROM = "127.0.0.2"  # the probes' own loopback address: a client other than the attack's


class Attack:
    """The held connections, the trickling endpoints and the live clients, on one asyncio loop (a thread)."""

    def __init__(self, connections: int, endpoints: int, live_clients: int) -> None:
        self.n_connections = connections
        self.n_endpoints = endpoints
        self.n_live = live_clients
        self.loop = asyncio.new_event_loop()
        self.endpoint_ports: list[int] = []
        self.held = 0
        self.max_held = 0
        self.opened = 0
        self.refused = 0
        self.live_status: Counter[str] = Counter()
        self.live_times: list[float] = []
        self.stop = False
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._live_pool = ThreadPoolExecutor(max_workers=max(1, live_clients))  # one thread per live client

    def start_endpoints(self) -> list[int]:
        self._thread.start()
        self.ready.wait(30)
        return self.endpoint_ports

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._endpoints())
        self.ready.set()
        self.loop.run_forever()

    async def _endpoints(self) -> None:
        async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b" " * 1000:
                    if self.stop:
                        break
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(1.0)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()

        for _ in range(self.n_endpoints):
            server = await asyncio.start_server(trickle, HOST, 0)
            self.endpoint_ports.append(server.sockets[0].getsockname()[1])

    def attack(self, port: int) -> None:
        for i in range(self.n_connections):
            asyncio.run_coroutine_threadsafe(self._hold(port, i % 4), self.loop)
        for _ in range(self.n_live):
            asyncio.run_coroutine_threadsafe(self._live(port), self.loop)

    async def _hold(self, port: int, kind: int) -> None:
        head = f"GET /healthz HTTP/1.1\r\nHost: {HOST}:{port}\r\n".encode()
        body = f"POST /login HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        body += "Content-Length: 1000000\r\n\r\n"
        while not self.stop:
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                self.refused += 1
                await asyncio.sleep(0.2)
                continue
            self.opened += 1
            self.held += 1
            self.max_held = max(self.max_held, self.held)
            try:
                if kind == 1:
                    writer.write(head[:20])
                elif kind == 3:
                    writer.write(body.encode())
                while not self.stop:  # kinds 2 and 3 trickle a byte a second; every kind waits for the close
                    if kind in (2, 3):
                        writer.write(b"X")
                    try:
                        if await asyncio.wait_for(reader.read(65536), 1.0) == b"":
                            break
                    except TimeoutError:
                        continue
            except OSError:
                pass
            finally:
                self.held -= 1
                writer.close()

    async def _live(self, port: int) -> None:
        while not self.stop:
            started = time.monotonic()
            try:
                status, _ = await self.loop.run_in_executor(self._live_pool, _live_get, port)
                self.live_status[str(status)] += 1
            except FetchError as e:
                self.live_status[e.kind] += 1
            self.live_times.append(time.monotonic() - started)

    def close(self) -> None:
        self.stop = True
        time.sleep(1.5)
        self.loop.call_soon_threadsafe(self.loop.stop)


class AttackProcess:
    """The attack in a process of its own: its loop and threads never hold the probes' interpreter lock."""

    def __init__(self, connections: int, endpoints: int, live_clients: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_attack_main, args=(child, connections, endpoints, live_clients), daemon=True)
        self._proc.start()
        self.held = 0
        self.stats: dict[str, Any] = {}

    def start_endpoints(self) -> list[int]:
        ports: list[int] = self._conn.recv()
        return ports

    def attack(self, port: int) -> None:
        self._conn.send(port)

    def sample(self) -> None:
        self._conn.send("held?")
        self.held = self._conn.recv()

    def close(self) -> None:
        self._conn.send("stop")
        self.stats = self._conn.recv()
        self._proc.join(10)

    def __getattr__(self, name: str) -> Any:
        if name in ("opened", "refused", "max_held", "live_status", "live_times"):
            return self.stats[name]
        raise AttributeError(name)


def _attack_main(conn: Any, connections: int, endpoints: int, live_clients: int) -> None:
    attack = Attack(connections, endpoints, live_clients)
    conn.send(attack.start_endpoints())
    attack.attack(conn.recv())
    while conn.recv() == "held?":
        conn.send(attack.held)
    attack.close()
    conn.send(
        {
            "opened": attack.opened,
            "refused": attack.refused,
            "max_held": attack.max_held,
            "live_status": attack.live_status,
            "live_times": attack.live_times,
        }
    )


def _live_get(port: int) -> tuple[int, bytes]:
    return http_get(HOST, port, "/api/live", timeout_s=20)


def start_server(db_url: str, endpoints: list[int], log: Path) -> tuple[subprocess.Popen[bytes], int, list[str]]:
    command = [sys.executable, "-m", "commlens", "serve", "--db", db_url, "--port", "0"]
    for p in endpoints:
        command += ["--monitor", f"http://{HOST}:{p}"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    out = b""
    deadline = time.monotonic() + 60
    while b"\n" not in out and time.monotonic() < deadline:
        if sel.select(timeout=1):
            chunk = proc.stderr.read1(4096)  # type: ignore[attr-defined]
            if not chunk:
                break
            out += chunk
    found = re.search(rb"http://127\.0\.0\.1:(\d+)/", out)
    if not found:
        proc.kill()
        raise SystemExit(f"serve did not start: {out.decode(errors='replace')}")
    port = int(found.group(1))
    while time.monotonic() < deadline:
        try:
            if http_get(HOST, port, "/healthz", timeout_s=2)[0] == 200:
                break
        except FetchError:
            time.sleep(0.2)
    shown = ["commlens", "serve", "--db", "sqlite:///TMP/results.db", "--port", "0", "--monitor", "URL", "..."]
    return proc, port, shown


def percentile(values: list[float], q: float) -> float:
    return _sorted_percentile(sorted(values), q)


def proc_counts(pid: int) -> tuple[int, int]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
    return fds, threads


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(port: int, path: str, timeout_s: float = 5.0) -> tuple[float, str]:
    """``GET path`` from 127.0.0.2 (another client than the attack's 127.0.0.1): (seconds, status or failure)."""
    started = time.monotonic()
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s, source_address=(PROBE_FROM, 0)) as s:
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {HOST}:{port}\r\n\r\n".encode())
            data = b""
            while len(data) < 12:
                s.settimeout(max(0.001, started + timeout_s - time.monotonic()))
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        status = data[9:12].decode(errors="replace") or "closed"
    except TimeoutError:
        return timeout_s, "timeout"
    except OSError as e:
        return time.monotonic() - started, type(e).__name__
    return time.monotonic() - started, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--endpoints", type=int, default=50)
    parser.add_argument("--live-clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=0.1)
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md as it is")
    args = parser.parse_args(argv)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.connections + args.endpoints * 4 + args.live_clients * 2 + 256
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (hard if hard == resource.RLIM_INFINITY else min(hard, max(need, soft)), hard)
        )
    soft_now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    workdir = Path(tempfile.mkdtemp(prefix="commlens-serve-hostile-"))
    db_url = f"sqlite:///{workdir / 'results.db'}"
    Store.open(db_url).close()
    attack = AttackProcess(args.connections, args.endpoints, args.live_clients)
    ports = attack.start_endpoints()
    proc, port, command = start_server(db_url, ports, workdir / "serve.log")
    server_soft = 0
    for line in Path(f"/proc/{proc.pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            server_soft = int(line.split()[3])
    baseline = [probe(port, "/healthz")[0] for _ in range(20)]
    health: list[float] = []
    runs: list[float] = []
    failures = Counter[str]()
    answers = Counter[str]()
    fds_max = threads_max = 0
    held_samples: list[int] = []
    try:
        attack.attack(port)
        time.sleep(3.0)  # the connections opened, the live requests under way
        end = time.monotonic() + args.duration
        cpu0, load0 = cpu_s(proc.pid), os.getloadavg()[0]
        while time.monotonic() < end:
            t, status = probe(port, "/healthz")
            health.append(t)
            failures["healthz"] += status != "200"
            answers["healthz " + status] += 1
            t, status = probe(port, "/api/runs")
            runs.append(t)
            failures["api/runs"] += status != "200"
            answers["api/runs " + status] += 1
            fds, threads = proc_counts(proc.pid)
            fds_max, threads_max = max(fds_max, fds), max(threads_max, threads)
            attack.sample()
            held_samples.append(attack.held)
            time.sleep(max(0.0, args.every - t))
        alive = proc.poll() is None
        server_cpu = (cpu_s(proc.pid) - cpu0) / args.duration if alive else float("nan")
        load1 = os.getloadavg()[0]
    finally:
        attack.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()

    def ms(v: float) -> str:
        return f"{v * 1e3:.0f} ms" if v >= 0.01 else f"{v * 1e3:.1f} ms"

    p99 = percentile(health, 99)
    live_p50 = percentile(attack.live_times, 50) if attack.live_times else float("nan")
    live_max = max(attack.live_times) if attack.live_times else float("nan")
    lines = [
        f"Measured {time.strftime('%Y-%m-%d', time.gmtime())} on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} cores, Python {platform.python_version()}), loopback, by "
        f"`.venv/bin/python benchmarks/serve_hostile.py{' ' + shlex.join(argv or sys.argv[1:]) if (argv or sys.argv[1:]) else ''}`. "
        f"The server: `{' '.join(command)}` (one `--monitor` per endpoint) with its defaults (10 s to send a request head, 30 s for a body, "
        f"5 s keep-alive, at most 4,096 connections (fewer when the descriptor limit is lower) and 32 requests per client at once), its descriptor limit "
        f"{server_soft} (raised to the hard limit at start); the benchmark process's limit {soft_now}.",
        "",
        f"Held against it: {args.connections} connections (a quarter silent, a quarter half a request line, a "
        f"quarter a header byte a second, a quarter a 1 MB body a byte a second), each reopened as soon as the "
        f"server closes it ({attack.opened} opened in all, {attack.refused} connects refused or failed; "
        f"{min(held_samples) if held_samples else 0}-{max(held_samples) if held_samples else 0} open at the samples, "
        f"{attack.max_held} at most); {args.endpoints} monitor endpoints sending a byte a second; "
        f"{args.live_clients} clients requesting `/api/live` in a loop.",
        "",
        "| what | samples | p50 | p99 | max | failed |",
        "|---|---:|---:|---:|---:|---:|",
        f"| `/healthz` before the attack (from {PROBE_FROM}, as every probe) | {len(baseline)} | {ms(percentile(baseline, 50))} | "
        f"{ms(percentile(baseline, 99))} | {ms(max(baseline))} | 0 |",
        f"| `/healthz` under it | {len(health)} | {ms(percentile(health, 50))} | {ms(p99)} | {ms(max(health))} | "
        f"{failures['healthz']} |",
        f"| `/api/runs` (worker thread) under it | {len(runs)} | {ms(percentile(runs, 50))} | "
        f"{ms(percentile(runs, 99))} | {ms(max(runs))} | {failures['api/runs']} |",
        f"| `/api/live` (the {args.live_clients} clients) | {len(attack.live_times)} | {ms(live_p50)} | "
        f"{ms(percentile(attack.live_times, 99)) if attack.live_times else '-'} | {ms(live_max)} | "
        f"{sum(v for k, v in attack.live_status.items() if k != '200')} |",
        "",
        f"`/api/live` answers by status: {', '.join(f'{k}: {v}' for k, v in sorted(attack.live_status.items()))} "
        "(429: over the 32 requests one client may have at once; every client here is 127.0.0.1). "
        f"The server's open descriptors peaked at {fds_max} and its threads at {threads_max}; "
        f"it {'was still running' if alive else 'had exited'} at the end, and used {server_cpu:.0%} of a core over "
        f"the window; the machine's 1-minute load average was {load0:.1f} at its start and {load1:.1f} at its end "
        f"(the machine is shared). The probes' answers: "
        f"{', '.join(f'{k}: {v}' for k, v in sorted(answers.items()))}.",
        "",
        f"Target: p99 of `/healthz` under 1 s: **{'met' if p99 < 1.0 and not failures['healthz'] else 'missed'}** "
        f"({ms(p99)}, {failures['healthz']} failed). The server's own CPU use says whether it was busy or waiting "
        "for a core: a server that used a fraction of one while its answers took seconds was not scheduled "
        "(every process here, the attack's included, shares the 2 cores with whatever else runs).",
    ]
    print("\n".join(lines))
    if not args.no_doc:
        write_section(SECTION, lines)
    return 0 if p99 < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
