"""Routes of flows over a :class:`~commlens.sim.fabric.Fabric`: ECMP by a seeded hash, or ideal packet spraying.

A flow goes from one GPU to another:

- inside a scale-up domain: up the source's link to the domain's switch, down the destination's;
- across domains: out of a NIC of the source's node, through the tiers up to the lowest one whose group holds both
  nodes, and down to a NIC of the destination's node. Non-rail fabrics: each GPU uses its own NIC. Rail-optimized:
  the flow travels on the destination GPU's rail, so a source on another rail first hands it over scale-up to the
  GPU on that rail (PXN); a flow arriving on another GPU's NIC is handed on likewise.
- ``ecmp``: at each tier going up, the flow's uplink is chosen by a hash of its identity (source, destination,
  flow key) and the seed, among the uplinks with a live path down to the destination (routes over a failed link
  are withdrawn; a degraded link still takes its share, as switches do not see it). The plane of a multi-plane
  fabric is hashed likewise.
- ``spray``: every flow is split evenly over all live uplinks at each tier (and over the planes): the
  load-balancing bound of per-packet spraying or ideal adaptive routing.

A failed NIC's flows move to the next live NIC of the node (on rail-optimized fabrics, to that rail at both ends).

The result is the load each bundle of flows puts on each link, aggregated: (bundle, link, weight), where weight
counts the flows of the bundle on the link (fractions when sprayed).
"""

from __future__ import annotations

import numpy as np

from commlens.sim.fabric import Fabric, SimError, flow_hash

__all__ = ["ROUTINGS", "route"]

ROUTINGS = ("ecmp", "spray")


def route(
    fabric: Fabric,
    src: np.ndarray,
    dst: np.ndarray,
    key: np.ndarray,
    bundle: np.ndarray,
    routing: str = "ecmp",
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bundle, link, weight) of flows ``src -> dst`` (GPU ids), aggregated per (bundle, link)."""
    if routing not in ROUTINGS:
        raise SimError(f"unknown routing {routing!r}; known: {', '.join(ROUTINGS)}")
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    key = np.asarray(key, dtype=np.int64)
    bundle = np.asarray(bundle, dtype=np.int64)
    F = fabric
    if src.size and (src.min() < 0 or dst.min() < 0 or max(src.max(), dst.max()) >= F.gpus):
        raise SimError(f"a flow names a GPU outside the fabric's {F.gpus}")
    A, dn = F.gpus_per_node, F.domain_nodes
    per_nic = A // F.nics_per_node
    b_parts: list[np.ndarray] = []
    l_parts: list[np.ndarray] = []
    w_parts: list[np.ndarray] = []

    def add(b: np.ndarray, link: np.ndarray, w: np.ndarray | float = 1.0) -> None:
        if b.size:
            b_parts.append(b)
            l_parts.append(link)
            w_parts.append(np.broadcast_to(np.asarray(w, dtype=np.float64), b.shape))

    ns, nd = src // A, dst // A
    intra = ((ns // dn) == (nd // dn)) & (src != dst)
    add(bundle[intra], F.nvlink_up(src[intra]))
    add(bundle[intra], F.nvlink_down(dst[intra]))
    cross = (ns // dn) != (nd // dn)
    if cross.any():
        _cross(F, src[cross], dst[cross], key[cross], bundle[cross], routing, seed, per_nic, add)
    if not b_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    b = np.concatenate(b_parts)
    link = np.concatenate(l_parts)
    w = np.concatenate(w_parts)
    dead = F.capacity[link] <= 0
    if dead.any():
        bad = int(link[np.argmax(dead)])
        raise SimError(f"a flow must cross failed link {F.link_name(bad)}: no other path exists")
    combined = b * F.links + link
    span = (int(b.max()) + 1) * F.links
    if span <= 1 << 26:  # dense enough: count in place of sorting
        dense = np.bincount(combined, weights=w, minlength=span)
        uniq = np.flatnonzero(dense)
        weight = dense[uniq]
    else:
        uniq, inv = np.unique(combined, return_inverse=True)
        weight = np.bincount(inv, weights=w, minlength=uniq.size)
    return uniq // F.links, uniq % F.links, weight


def _cross(F: Fabric, src, dst, key, bundle, routing: str, seed: int, per_nic: int, add) -> None:
    A = F.gpus_per_node
    ns, nd = src // A, dst // A
    own_s, own_d = (src % A) // per_nic, (dst % A) // per_nic
    j_s = own_d.copy() if F.rail else own_s.copy()
    j_d = own_d.copy()
    # planes: hashed (ecmp) or all of them (spray)
    if routing == "spray" and F.planes > 1:
        reps = F.planes
        idx = np.repeat(np.arange(src.size), reps)
        plane = np.tile(np.arange(reps), src.size)
        src, dst, key, bundle, ns, nd, own_s, own_d, j_s, j_d = (
            a[idx] for a in (src, dst, key, bundle, ns, nd, own_s, own_d, j_s, j_d)
        )
        share = np.full(src.size, 1.0 / reps)
    else:
        plane = (flow_hash(src, dst, key, seed, 101) % np.uint64(F.planes)).astype(np.int64)
        share = np.ones(src.size)
    _avoid_dead_nics(F, plane, ns, nd, j_s, j_d)
    relay_s = j_s != own_s
    relay_d = j_d != own_d
    gs = ns * A + j_s * per_nic
    gd = nd * A + j_d * per_nic
    add(bundle[relay_s], F.nvlink_up(src[relay_s]), share[relay_s])
    add(bundle[relay_s], F.nvlink_down(gs[relay_s]), share[relay_s])
    add(bundle[relay_d], F.nvlink_up(gd[relay_d]), share[relay_d])
    add(bundle[relay_d], F.nvlink_down(dst[relay_d]), share[relay_d])
    add(bundle, F.nic_off + F.nic_cable(plane, ns, j_s), share)
    add(bundle, F.nic_off + F.nic_cables + F.nic_cable(plane, nd, j_d), share)
    leaf_s, leaf_d = F.leaf_of(plane, ns, j_s), F.leaf_of(plane, nd, j_d)
    top = len(F.uplinks)
    # the lowest tier whose group holds both ends (rail-optimized: both ends are on one rail by construction)
    lca = np.zeros(src.size, dtype=np.int64)
    for t in range(top + 1):
        lca[(ns // F.group_nodes[t] != nd // F.group_nodes[t]) & (lca == t)] = t + 1
    if (lca > top).any():
        raise SimError("a flow's ends are under no common switch (the fabric was built for fewer nodes)")
    climb = lca > 0
    if not climb.any():
        return
    if routing == "spray":
        _spray(F, bundle[climb], leaf_s[climb], leaf_d[climb], lca[climb], share[climb], add)
    else:
        _ecmp(F, src[climb], dst[climb], key[climb], bundle[climb], leaf_s[climb], leaf_d[climb], lca[climb], seed, add)


def _avoid_dead_nics(F: Fabric, plane, ns, nd, j_s, j_d) -> None:
    """Move flows whose NIC (either end) is down to the next NIC alive at both ends, in place."""
    nic_up = F.capacity[F.nic_off : F.nic_off + F.nic_cables]
    if (nic_up > 0).all():
        return
    alive = lambda n, j: nic_up[F.nic_cable(plane, n, j)] > 0  # noqa: E731
    bad = ~(alive(ns, j_s) & alive(nd, j_d))
    for shift in range(1, F.nics_per_node):
        if not bad.any():
            return
        js = (j_s + shift) % F.nics_per_node
        jd = js if F.rail else (j_d + shift) % F.nics_per_node
        ok = bad & alive(ns, js) & alive(nd, jd)
        j_s[ok], j_d[ok] = js[ok], jd[ok]
        bad &= ~ok
    if bad.any():
        i = int(np.argmax(bad))
        raise SimError(f"node {int(ns[i])} or node {int(nd[i])} has no live NIC left for a flow between them")


def _valid(F: Fabric, t: int, sw_s: np.ndarray, sw_d: np.ndarray) -> np.ndarray | None:
    """(flows, uplinks) mask of the uplinks at tier ``t`` with live cables on both sides; None when all are live."""
    u = F.uplinks[t]
    lo = F._tier_off[t]
    c = F._tier_cables[t]
    up_cap = F.capacity[lo : lo + c]
    down_cap = F.capacity[lo + c : lo + 2 * c]
    if (up_cap > 0).all() and (down_cap > 0).all():
        return None
    cables = np.arange(u)[None, :]
    return (up_cap[sw_s[:, None] * u + cables] > 0) & (down_cap[sw_d[:, None] * u + cables] > 0)


def _ecmp(F: Fabric, src, dst, key, bundle, sw_s, sw_d, lca, seed: int, add) -> None:
    for t in range(int(lca.max())):
        go = lca > t
        src, dst, key, bundle, sw_s, sw_d, lca = (a[go] for a in (src, dst, key, bundle, sw_s, sw_d, lca))
        u = F.uplinks[t]
        h = flow_hash(src, dst, key, seed, 7 + t)
        valid = _valid(F, t, sw_s, sw_d)
        if valid is None:
            pick = (h % np.uint64(u)).astype(np.int64)
        else:
            count = valid.sum(axis=1)
            if (count == 0).any():
                i = int(np.argmax(count == 0))
                raise SimError(
                    f"no live path between {F.tier_names[t]}{int(sw_s[i])} and {F.tier_names[t]}{int(sw_d[i])} "
                    f"through the {F.tier_names[t + 1]} tier (every uplink or downlink failed)"
                )
            nth = (h % count.astype(np.uint64)).astype(np.int64)
            pick = np.argmax(valid.cumsum(axis=1) > nth[:, None], axis=1)
        add(bundle, F.up_link(t, F.tier_cable(t, sw_s, pick)))
        add(bundle, F.down_link(t, F.tier_cable(t, sw_d, pick)))
        sw_s, sw_d = F.parent(t, sw_s, pick), F.parent(t, sw_d, pick)


def _spray(F: Fabric, bundle, sw_s, sw_d, lca, share, add) -> None:
    # flows of one bundle between the same two leaves spray alike: aggregate them first
    L0 = np.int64(F.switches[0])
    k = (bundle * L0 + sw_s) * L0 + sw_d
    uniq, inv = np.unique(k * 8 + lca, return_inverse=True)
    weight = np.bincount(inv, weights=share, minlength=uniq.size)
    lca = uniq % 8
    rest = uniq // 8
    sw_d = rest % L0
    sw_s = (rest // L0) % L0
    bundle = rest // L0 // L0
    for t in range(int(lca.max())):
        go = lca > t
        bundle, sw_s, sw_d, lca, weight = (a[go] for a in (bundle, sw_s, sw_d, lca, weight))
        u = F.uplinks[t]
        valid = _valid(F, t, sw_s, sw_d)
        if valid is None:
            valid = np.ones((bundle.size, u), dtype=bool)
        count = valid.sum(axis=1)
        if (count == 0).any():
            raise SimError(f"no live path through the {F.tier_names[t + 1]} tier for some flows")
        row, pick = np.nonzero(valid)
        w = weight[row] / count[row]
        add(bundle[row], F.up_link(t, F.tier_cable(t, sw_s[row], pick)), w)
        add(bundle[row], F.down_link(t, F.tier_cable(t, sw_d[row], pick)), w)
        bundle, lca, weight = bundle[row], lca[row], w
        sw_s, sw_d = F.parent(t, sw_s[row], pick), F.parent(t, sw_d[row], pick)
