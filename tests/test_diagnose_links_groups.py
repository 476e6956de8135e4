"""``diagnose links --strategy groups``: the group search's decisions, its refusal of records that do not follow
its plan, and one run on a real 8-host emulated cluster with a slow host and a slow link at once."""

from __future__ import annotations

import json
import os
import random

import pytest
from benchutil import clean_env, commlens

from commlens.diagnose.links_groups import GroupSearch, GroupsError, diagnose_groups

SIZE = 1_000_000


def _search(
    n: int,
    slow_hosts: dict[int, float],
    slow_links: dict[tuple[int, int], float],
    seed: int = 0,
    round_factor: dict[int, float] | None = None,
):
    """Drive the search with records of a shaped cluster at 100 MB/s, +-3% jitter, every edge of round r
    at ``round_factor[r]`` of its rate (a passing slowdown of the whole machine); (search, all records)."""
    rng = random.Random(seed)
    search = GroupSearch(n)
    every = []
    while (ids := search.next_round()) is not None:
        recs = []
        for tid in ids:
            for p in range(3):
                for a, b in search.tests[tid].edges():
                    rate = 100e6 * min(
                        slow_hosts.get(a, 1), slow_hosts.get(b, 1), slow_links.get((min(a, b), max(a, b)), 1)
                    )
                    rate *= (round_factor or {}).get(len(search.rounds) - 1, 1.0)
                    times = [SIZE / rate * rng.uniform(0.97, 1.03) for _ in range(3)]
                    recs.append(
                        {
                            "round": len(search.rounds) - 1,
                            "pass": p,
                            "test": tid,
                            "rank": a,
                            "peer": b,
                            "size_bytes": SIZE,
                            "times_s": times,
                        }
                    )
        search.observe(recs)
        every += recs
    return search, every


def _faults(search: GroupSearch) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.kind, f.hosts) for f in search.diagnosis().faults]


def test_healthy_cluster_costs_one_round():
    search, _ = _search(16, {}, {})
    d = search.diagnosis()
    assert d.faults == [] and len(search.rounds) == 1 and d.rounds == 3  # the screen, 3 passes
    assert d.expected_bytes_per_s == pytest.approx(100e6, rel=0.03)


def test_slow_hosts_found_in_log_rounds_and_told_from_a_slow_link():
    one, _ = _search(16, {5: 0.3}, {})
    assert _faults(one) == [("slow_host", (5,))]
    # screen, halves, quarters, pairs, references: log2(16) + 1 rounds, against all pairs' 15
    assert len(one.rounds) == 5
    f = one.diagnosis().faults[0]
    assert f.measured_bytes_per_s / f.expected_bytes_per_s == pytest.approx(0.3, abs=0.03)
    assert f.confidence == 1.0 and "with good host" in f.evidence

    two, _ = _search(16, {3: 0.3, 4: 0.3}, {})  # neighbours: one pair holds both, each is tested with a good host
    assert _faults(two) == [("slow_host", (3,)), ("slow_host", (4,))]
    assert len(two.rounds) == 5

    link, _ = _search(16, {}, {(5, 6): 0.3})  # 5-6 joins the pairs 4-5 and 6-7: both normal, the cross edge is low
    assert _faults(link) == [("slow_link", (5, 6))]
    assert [t.purpose for t in link.tests[-2:]] == ["cross", "cross"]
    pair, _ = _search(16, {}, {(4, 5): 0.3})  # inside a pair: each host normal with a good host
    assert _faults(pair) == [("slow_link", (4, 5))]


def test_report_lists_the_tests_run_and_the_verdict():
    from commlens.diagnose.links_report import format_report

    report = format_report(_search(16, {5: 0.3}, {})[0].diagnosis()).splitlines()
    assert "# group tests (15 measurement rounds: 5 x 3 passes)" in report
    assert "# latency" not in "\n".join(report)  # groups measures no latency
    tests = report[report.index("# group tests (15 measurement rounds: 5 x 3 passes)") + 2 :][:9]
    assert [line.split()[1:3] + line.split()[-1:] for line in tests] == [
        ["screen", "ring", "low"],
        ["half", "ring", "low"],
        ["half", "ring", "ok"],
        ["half", "ring", "ok"],
        ["half", "ring", "low"],
        ["half", "pair", "low"],
        ["half", "pair", "ok"],
        ["reference", "pair", "ok"],
        ["reference", "pair", "low"],
    ]
    assert tests[-1].split()[3] == "5-1"  # host 5 against host 1, shown good by the ring 0..3
    assert report[-1].startswith("FAULT slow_host host 5: 0.030 GB/s vs 0.100 expected, confidence 1.00")


def test_a_slow_link_is_still_found_when_the_halves_were_low_by_chance():
    """Link 7-8 joins the screen's halves; the halves' round runs at 65% (the whole machine slowed): both are
    low, their parts normal and nothing is named under them, so the search looks between the halves."""
    search, _ = _search(16, {}, {(7, 8): 0.3}, round_factor={1: 0.65})
    assert _faults(search) == [("slow_link", (7, 8))]
    crosses = [t.hosts for t in search.tests if t.purpose == "cross"]
    assert crosses[-2:] == [(7, 8), (15, 0)]  # the screen's own cross edges, tested last
    assert search.diagnosis().rounds <= 46 / 2  # 6 rounds x 3 passes; all pairs: 46


def test_a_thousand_hosts_in_a_few_percent_of_all_pairs_rounds():
    search, _ = _search(1024, {17: 0.3, 600: 0.3, 601: 0.4}, {})
    assert _faults(search) == [("slow_host", (17,)), ("slow_host", (600,)), ("slow_host", (601,))]
    assert len(search.rounds) == 11  # log2(1024) + 1, against 1,023 rounds a pass for all pairs


def test_replay_gives_the_workers_verdict_and_refuses_other_records():
    search, recs = _search(8, {2: 0.3}, {})
    assert diagnose_groups(recs, 8).to_dict() == search.diagnosis().to_dict()
    with pytest.raises(GroupsError, match="the plan has tests"):
        diagnose_groups([r for r in recs if r["test"] != 2], 8)
    with pytest.raises(GroupsError, match="not its ring"):
        diagnose_groups([r for r in recs if not (r["test"] == 0 and r["rank"] == 3)], 8)
    with pytest.raises(GroupsError, match="at least 4 hosts"):
        GroupSearch(3)


def test_cli_refuses_groups_below_four_hosts_and_unknown_strategies():
    proc = commlens("diagnose", "links", "--nproc", "3", "--strategy", "groups")
    assert proc.returncode == 2 and "--strategy groups needs at least 4 hosts, got 3" in proc.stderr
    proc = commlens("diagnose", "links", "--nproc", "4", "--strategy", "triples")
    assert proc.returncode == 2 and "--strategy must be one of groups, pairs, got 'triples'" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root")
def test_slow_host_and_slow_link_on_an_emulated_cluster(tmp_path):
    """8 hosts at 0.25 Gb/s; host 2 at 30% and the link 5-6 at 30%: both named, in 12 rounds to all pairs' 22.

    The screen runs 8 flows at once: at 1 Gb/s a loaded 2-core machine, not the shaping, would set their rate.
    """
    env = clean_env(COMMLENS_CLUSTER_DIR=str(tmp_path))
    name = f"w31b-g{os.getpid() % 10000}"
    up = commlens(
        "cluster",
        "up",
        name,
        "--hosts",
        "8",
        "--link-gbps",
        "0.25",
        "--slow-host",
        "2:0.3",
        "--slow-link",
        "5-6:0.3",
        env=env,
    )
    assert up.returncode == 0, up.stderr
    try:
        proc = commlens(
            "diagnose", "links", "--cluster", name, "--strategy", "groups", "-b", "512K", "-n", "2", "--json", env=env
        )
    finally:
        down = commlens("cluster", "down", name, env=env)
    assert down.returncode == 0, down.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    d = json.loads(proc.stdout)
    assert d["strategy"] == "groups" and d["format"] == "commlens.links/1"
    assert [(f["kind"], f["hosts"]) for f in d["faults"]] == [("slow_host", [2]), ("slow_link", [5, 6])]
    # screen, halves, pairs, then references and cross pairs together: 4 rounds x 3 passes; all pairs: 3 x 7 + 1
    assert d["rounds"] == 12
    # measured against the screen's rate (every host sending at once): at most ~0.45x when the truth is 0.3x
    assert all(f["measured_bytes_per_s"] < 0.5 * f["expected_bytes_per_s"] for f in d["faults"])
    assert d["bandwidth_bytes_per_s"][2][3] is not None and d["bandwidth_bytes_per_s"][0][7] is None


def test_hosts_with_no_good_host_to_compare_with_are_unresolved():
    from commlens.diagnose.links_report import format_report

    search, _ = _search(4, {}, {(0, 1): 0.3, (2, 3): 0.3})  # both halves low: no host is shown good
    d = search.diagnosis()
    assert d.faults == [] and d.unresolved == [0, 1, 2, 3]
    assert "# unresolved: hosts 0, 1, 2, 3 (no host tested good to compare them with; run --strategy pairs)" in (
        format_report(d)
    )
