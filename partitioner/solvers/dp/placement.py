"""The DP's placement automata: the states a suffix's first stage can be in, and how a stage attaches.

See the *Placement* section of :mod:`.dp` for what the kinds (``none``,
``size``, ``run``, ``bins``) model and when each is exact.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import OutOfTime, TooLarge

__all__ = ["Automaton", "automaton_bytes", "build_automaton", "build_offsets_automaton"]

TRANSITION_BYTES = 64  # one transition in the automaton's arrays and the tables' layout (pairs, keys), at most


@dataclass(frozen=True)
class Automaton:
    """Placement states of a suffix's first stage and how a new stage attaches.

    ``trans[i]`` holds arrays ``(zp, zn, co)``: putting a stage of size index
    ``i`` in front of a suffix whose first stage is in state ``zp`` gives the
    new state ``zn`` and the outgoing boundary category ``co``.
    """

    kind: str
    states: tuple
    size_of: np.ndarray  # size index of each state, -1 = any
    init: dict  # size index -> state of a last stage
    accept: np.ndarray  # states a whole pipeline may start in
    categories: tuple  # (min size index, link) ; link None = no transfer model
    trans: dict
    incoming: dict  # size index -> category ranges [(lo, hi)] a stage of that size can receive


def automaton_bytes(kind: str, sizes: tuple[int, ...], G: int, N: int = 0) -> int:
    """About what the automaton of ``kind`` and the tables' layout built from it hold (:data:`TRANSITION_BYTES`
    per transition): every state can follow every stage size, so about states x sizes transitions -- sizes^2
    on many nodes, checked against the memory budget before it is built. ``bins`` (whose state count is
    not known ahead) is bounded while it is built (``max_states`` of :func:`build_automaton`)."""
    n = len(sizes)
    if kind == "offsets":  # (size, devices used by the suffix): up to N offsets per size
        return TRANSITION_BYTES * n * max(N, 1) * max(n, 1)
    states = n + (sum(G // d for d in sizes if d < G) if kind in ("run", "bins") else 0)
    return TRANSITION_BYTES * states * max(n, 1) * (2 if kind in ("run", "bins") else 1)


def build_automaton(kind: str, sizes: tuple[int, ...], G: int, nodes: int, link_fixed: bool | None,
                    max_states: int | None = None, last: int | None = None,
                    deadline: float | None = None) -> Automaton:
    """The automaton of ``kind`` (module docstring of :mod:`.solver`, "Placement"); ``max_states`` bounds the
    reachable states of ``bins`` (:class:`~partitioner.solvers.errors.TooLarge` past it).

    ``last`` (``bins`` only) is the GPUs the job uses on the last node (DESIGN.md "Partial
    racks"; None or ``G``: all): a whole pipeline must then end with every node full but one, whose free
    space is ``G - last``, which is exactly the packings into the nodes' used GPUs. ``deadline`` (on
    :func:`time.perf_counter`'s clock): :class:`~partitioner.solvers.errors.OutOfTime` once it has passed
    while the states are listed (in-node sizes that are no divisibility chain, an NVL72 rack's 16, 18, 32,
    36, give ``bins`` free spaces of many values on several nodes, and many states)."""
    n = len(sizes)
    idle = () if last is None or last == G else (G - last,)
    if kind == "none":  # the state is the stage size only (the tables are grouped by size); one category
        trans: dict[int, tuple[np.ndarray, ...]] = {i: (np.arange(n), np.full(n, i), np.zeros(n, dtype=np.int64)) for i in range(n)}
        incoming = {i: [(0, 1)] for i in range(n)}
        return Automaton(kind, tuple(range(n)), np.arange(n), {i: i for i in range(n)}, np.ones(n, bool), ((0, None),), trans, incoming)
    if kind == "size":
        cats = tuple((j, link_fixed) for j in range(n))
        trans = {
            i: (np.arange(n), np.full(n, i), np.array([min(i, ip) for ip in range(n)])) for i in range(n)
        }
        incoming = {i: [(0, i + 1)] for i in range(n)}
        return Automaton(kind, tuple(range(n)), np.arange(n), {i: i for i in range(n)}, np.ones(n, bool), cats, trans, incoming)
    cats = tuple((j, False) for j in range(n)) + tuple((j, True) for j in range(n) if sizes[j] < G)
    # categories are ordered (j, unlinked) for all j, then (j, linked) for in-node j: both ranges are prefixes
    incoming = {i: [(0, i + 1)] + ([(n, n + i + 1)] if sizes[i] < G else []) for i in range(n)}
    cat_index = {c: k for k, c in enumerate(cats)}
    if kind == "run":

        def initial(i: int):
            return (i, sizes[i] if sizes[i] < G else G)

        def step(i: int, z):
            ip, u = z
            out = [((i, sizes[i] if sizes[i] < G else G), (min(i, ip), False))]
            if sizes[i] < G and sizes[ip] < G and u + sizes[i] <= G:
                out.append(((i, u + sizes[i]), (min(i, ip), True)))
            return out

        accept = lambda z: True  # noqa: E731  (relaxed: packing is checked after)
    else:  # bins: (size, free space of this stage's node or None, free space of other open nodes)

        def initial(i: int):
            return (i, G - sizes[i], ()) if sizes[i] <= G else (i, None, ())

        def step(i: int, z):
            ip, r, others = z
            d = sizes[i]
            carry = tuple(sorted(others + ((r,) if r else ())))
            out: list[tuple[tuple, tuple[int, bool]]] = []
            if d > G:
                out.append(((i, None, carry), (min(i, ip), False)))
                return out
            if r is not None and r >= d:
                out.append(((i, r - d, others), (min(i, ip), True)))
            for v in sorted(set(others)):
                if v >= d:
                    rest = list(others)
                    rest.remove(v)
                    new_others = tuple(sorted(rest + ([r] if r else [])))
                    out.append(((i, v - d, new_others), (min(i, ip), False)))
            out.append(((i, G - d, carry), (min(i, ip), False)))
            return out

        def accept(z) -> bool:
            if z[1] == "dead":
                return False
            return tuple(sorted(((z[1],) if z[1] else ()) + z[2])) == idle

    # reachable states
    index: dict = {}
    order: list = []

    def add(z) -> int:
        if z not in index:
            if kind == "bins" and len(z[2]) + (1 if z[1] else 0) > nodes:
                return -1
            if max_states is not None and len(order) >= max_states:
                raise TooLarge(f"the placement automaton ({kind}) would have more than {max_states:,} states "
                               f"on {n} stage sizes")
            index[z] = len(order)
            order.append(z)
        return index[z]

    for i in range(n):
        add(initial(i))
    edges: dict[int, list] = {i: [] for i in range(n)}
    k = 0
    while k < len(order):
        if deadline is not None and k % 512 == 0 and time.perf_counter() > deadline:
            raise OutOfTime
        z = order[k]
        for i in range(n):
            for zn, cat in step(i, z):
                t = add(zn)
                if t >= 0:
                    edges[i].append((k, t, cat_index[cat]))
        k += 1
    # On a partly used node a size may have no transition at all (nothing fits in front of it: 2 of a
    # 3-GPU node's 2 used GPUs). The recursion's kernels want one per size: give it a dead state of its
    # own, reached from nowhere, never accepted (its values stay infinite), that it loops on.
    for i in range(n):
        if not edges[i]:
            dead = len(order)
            order.append((i, "dead", ()))
            edges[i].append((dead, dead, cat_index[(i, False)]))
    trans = {i: tuple(np.array(col, dtype=np.int64) for col in zip(*edges[i])) for i in range(n)}
    size_of = np.array([z[0] for z in order])
    return Automaton(
        kind,
        tuple(order),
        size_of,
        {i: index[initial(i)] for i in range(n)},
        np.array([accept(z) for z in order]),
        cats,
        trans,
        incoming,
    )


def build_offsets_automaton(sizes: tuple[int, ...], N: int, fits, link_gbps, max_states: int | None = None,
                            deadline: float | None = None, period: int | None = None) -> Automaton:
    """The ``offsets`` automaton of a cluster with network levels (DESIGN.md "Network levels").

    Stages sit on consecutive devices in pipeline order, so a suffix whose first stage has size index
    ``i`` and that uses ``u`` devices starts at device ``N - u``: the state is ``(i, u)``. A stage of
    size ``d`` put in front starts at ``N - u - d`` when ``fits(offset, d)`` (rule 4); the boundary's
    category is its bandwidth ``link_gbps(offset, d, next_size)`` (GB/s), one category per distinct
    value. A whole pipeline uses ``N`` devices.

    ``period`` (a width the cluster repeats with: ``fits`` and ``link_gbps`` are unchanged when the
    stages move by it inside ``0..N-1``) keeps ``u`` modulo it: the tables' device count holds ``u``
    itself (and keeps every stage inside ``N``), so the state needs only where the offset falls in its
    period, and ``fits`` and ``link_gbps`` are asked at the smallest offset with that residue.
    """
    n = len(sizes)
    index: dict = {}
    order: list = []
    bws: dict[float, int] = {}

    def add(z) -> int:
        if z not in index:
            if max_states is not None and len(order) >= max_states:
                raise TooLarge(f"the placement automaton (offsets) would have more than {max_states:,} states "
                               f"on {n} stage sizes and {N} devices")
            index[z] = len(order)
            order.append(z)
        return index[z]

    def category(bw: float) -> int:
        return bws.setdefault(bw, len(bws))

    W = period if period is not None and period < N else None

    def key(used: int) -> int:
        return used if W is None else used % W

    def where(used_key: int, d: int) -> int:  # the stage's offset, or its smallest representative
        return N - used_key - d if W is None else (N - used_key - d) % W

    initial = {i: add((i, key(sizes[i]))) for i in range(n) if sizes[i] <= N and fits(N - sizes[i], sizes[i])}
    edges: dict[int, list] = {i: [] for i in range(n)}
    k = 0
    while k < len(order):
        if deadline is not None and k % 512 == 0 and time.perf_counter() > deadline:
            raise OutOfTime
        ip, used = order[k]
        for i, d in enumerate(sizes):
            offset = where(used, d)
            # (with a period: no real offset with this residue keeps the next stage inside the cluster)
            if offset >= 0 and offset + d + sizes[ip] <= N and fits(offset, d):
                t = add((i, key(used + d)))
                edges[i].append((k, t, category(link_gbps(offset, d, sizes[ip]))))
        k += 1
    if not bws:
        category(math.inf)  # one stage only: a category nothing sends on (its transfer time is 0)
    for i in range(n):  # a size with no transition loops on a dead state of its own (see build_automaton)
        if i not in initial:
            dead = len(order)
            order.append((i, -1))
            initial[i] = dead
        if not edges[i]:
            dead = len(order)
            order.append((i, -1))
            edges[i].append((dead, dead, 0))
    cats = tuple((bw, "GBps") for bw in bws)
    received: dict[int, set[int]] = {i: set() for i in range(n)}
    for i in range(n):
        for zp, _, co in edges[i]:
            received[order[zp][0]].add(co)
    # category 0 for every size: a whole pipeline's first stage is read there (it receives nothing)
    incoming = {i: [(c, c + 1) for c in sorted(received[i] | {0})] for i in range(n)}
    trans = {i: tuple(np.array(col, dtype=np.int64) for col in zip(*edges[i])) for i in range(n)}
    return Automaton(
        "offsets",
        tuple(order),
        np.array([z[0] for z in order]),
        initial,
        np.array([z[1] == key(N) for z in order]),
        cats,
        trans,
        incoming,
    )
