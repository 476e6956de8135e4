"""``commlens project sweep --executor ray`` on a real local Ray cluster (``ray_cluster.py``): the same document as
``--executor local``, computed by tasks the sweep submitted to that cluster; an address where no cluster answers
is ``error: ...`` and exit 2, at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_cluster import RayCluster, free_port, ray_cluster  # noqa: F401  (the fixture)

COMMLENS = Path(sys.executable).parent / "commlens"
# Eight points, infeasible ones among them (TP 1 needs more memory than an H100 has): both kinds of row compared.
SWEEP = ["llama3-8b", "-t", "dgx-h100", "--gpus", "64", "--vary", "layout.tp=1,2,4,8", "--vary", "gpus=64,128"]
RUN_TIMEOUT_S = 120.0
# What a second driver reads back of the cluster: Ray's timeline (task events the GCS keeps), as JSON, last line.
TIMELINE = "import json, ray; ray.init(log_to_driver=False); print(json.dumps(ray.timeline())); ray.shutdown()"


@dataclass(frozen=True)
class Ran:
    """A finished ``commlens`` process."""

    args: list[str]
    pid: int
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        assert self.returncode == 0, f"commlens {' '.join(self.args)} exited {self.returncode}:\n{self.stderr}"
        doc: dict[str, Any] = json.loads(self.stdout)
        return doc


def _env(ray: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without Ray's variables, then those of ``ray`` (a cluster's ``driver_env``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, **(ray or {})}


def _run(args: list[str], env: dict[str, str]) -> Ran:
    """``commlens project sweep ARGS`` as a process of its own (its pid kept: Ray names its driver log by it)."""
    argv = [str(COMMLENS), "project", "sweep", *args]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            raise AssertionError(
                f"commlens {' '.join(args)} still running after {RUN_TIMEOUT_S:.0f} s:\n{stderr}"
            ) from None
    return Ran(args, proc.pid, proc.returncode, stdout, stderr)


def _sweep(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The ``--json`` document of ``commlens project sweep ARGS --json`` (which must succeed)."""
    return _run([*args, "--json"], env).json()


def _driver_id(cluster: RayCluster, pid: int) -> str:
    """The Ray worker id of the driver process ``pid``: a driver of this cluster leaves
    ``python-core-driver-<id>_<pid>.log`` in the cluster's session logs."""
    logs = cluster.temp_dir / "session_latest" / "logs"
    found = sorted(logs.glob(f"python-core-driver-*_{pid}.log"))
    names = sorted(p.name for p in logs.glob("python-core-driver-*.log"))
    assert len(found) == 1, f"process {pid} was no driver of the cluster at {cluster.address}; drivers: {names}"
    return found[0].name.removeprefix("python-core-driver-").rpartition("_")[0]


def _tasks_submitted_by(cluster: RayCluster, driver_id: str, timeout_s: float = 15.0) -> int:
    """How many tasks the driver ``driver_id`` submitted, by the cluster's own record (its timeline); waits up to
    ``timeout_s`` for the driver's events to reach the GCS."""
    deadline = time.monotonic() + timeout_s
    while True:
        proc = subprocess.run(
            [sys.executable, "-c", TIMELINE],
            env=_env(cluster.driver_env),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        assert proc.returncode == 0, f"reading the cluster's timeline failed:\n{proc.stderr}"
        events = json.loads(proc.stdout.splitlines()[-1])
        submitted = sum(1 for e in events if e.get("cat") == "submit_task" and e.get("tid") == f"driver:{driver_id}")
        if submitted or time.monotonic() >= deadline:
            return submitted
        time.sleep(0.5)


def test_a_ray_sweep_gives_the_local_rows_and_runs_on_the_cluster(ray_cluster: RayCluster) -> None:
    local = _sweep([*SWEEP, "--executor", "local"], _env())
    on_ray = _run([*SWEEP, "--executor", "ray", "--json"], _env(ray_cluster.driver_env))
    remote = on_ray.json()

    def points(doc: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
        return [(r["layout.tp"], r["gpus"], r.get("step_time_s", r.get("error"))) for r in doc["rows"]]

    assert points(remote) == points(local)
    assert [(tp, gpus) for tp, gpus, _ in points(local)] == [(tp, g) for tp in (1, 2, 4, 8) for g in (64, 128)]
    assert remote == local  # every field of every row, the best ones and the infeasible counts
    assert 0 < len(local["best"]) < len(local["rows"]) and local["infeasible"]  # both kinds of row compared

    submitted = _tasks_submitted_by(ray_cluster, _driver_id(ray_cluster, on_ray.pid))
    assert 1 <= submitted <= len(local["rows"]), f"the sweep submitted {submitted} tasks to the cluster"


def test_a_ray_address_where_no_cluster_answers_is_an_error() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    ran = _run([*SWEEP, "--executor", "ray", "--json"], _env({"RAY_ADDRESS": address}))
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip() == f"error: --executor ray: no Ray cluster at RAY_ADDRESS={address}: Connection refused"
    assert ran.stdout == ""
    assert time.monotonic() - started < 30  # not Ray's minutes of retrying


SIM_SWEEP = [
    "llama3-8b",
    "--topology",
    "meta-h100-roce",
    "--gpus",
    "64",
    "--vary",
    "layout.tp=2,4",
    "--vary",  # DP's reduction exposed (not overlapped), so its simulated network shows in the step
    "layout.overlap_grad_reduce=false",
    "--network",
    "sim",
    "--fail",
    "pod0",
]


def test_a_sim_sweep_on_ray_gives_the_local_rows(ray_cluster: RayCluster) -> None:
    """``--network sim`` on the cluster: every point's communication simulated on Ray's workers (with a failed
    pod switch), the same rows as a local sweep; and the simulated network is not the analytic one."""
    local = _sweep([*SIM_SWEEP, "--executor", "local"], _env())
    on_ray = _run([*SIM_SWEEP, "--executor", "ray", "--json"], _env(ray_cluster.driver_env))
    assert on_ray.json() == local
    analytic = _sweep([*SIM_SWEEP[:9], "--executor", "local"], _env())
    steps = [r["step_time_s"] for r in local["rows"]]
    assert all(s > 0 for s in steps)
    assert steps != [r["step_time_s"] for r in analytic["rows"]]
    assert _tasks_submitted_by(ray_cluster, _driver_id(ray_cluster, on_ray.pid)) >= 1
