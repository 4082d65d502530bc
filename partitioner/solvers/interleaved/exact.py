"""Proving a cut optimal: branch and bound over the chunk ends of one group count.

The search fixes the chunks in order: a node is a prefix, chunks 0..c with
their last layers, and its children are chunk c + 1's possible ends. A
leaf (all K chunks) is priced exactly (:meth:`.cuts.GroupSpace.price` with
``exact``: each group's best mesh and options). A node is cut when its
lower bound reaches the best value known. The bound of a prefix:

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.exact``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .cuts import CutCost, GroupSpace

__all__ = ["Search", "branch_and_bound", "MARGIN"]

MARGIN = 1e-9  # relative: a prefix is cut when its bound exceeds the best value by more than this


@dataclass(frozen=True)
class Search:
    """What :func:`branch_and_bound` found: its best leaf (None: none better than the start), whether it
    finished, the least bound of what it left open (the optimum of this P is at least this) and its nodes."""

    best: CutCost | None
    finished: bool
    bound: float
    nodes: int


def _water(fixed: list[float], rest: float) -> float:
    """The least possible max over g of fixed[g] + r_g, r_g >= 0 summing to ``rest``: the groups below
    the highest take the rest first; past that, all rise together."""
    top = max(fixed)
    room = sum(top - f for f in fixed)
    return top if rest <= room else top + (rest - room) / len(fixed)


class _Prefix:
    """Per-group state of a prefix, per mesh: least compute and least bytes per row of the fixed chunks."""

    def __init__(self, space: GroupSpace) -> None:
        self.space = space
        assert space.tables is not None
        self.meshes = space.tables.meshes
        self.fastest = [min((e.fwd_ms + e.bwd_ms for lay, e in layer.costs.items() if lay in set(space.tables.configs)),
                            default=math.inf) for layer in space.problem.layers]
        self.rest = [0.0] * (space.L + 1)  # fastest compute of layers i..L-1
        for i in range(space.L - 1, -1, -1):
            self.rest[i] = self.rest[i + 1] + self.fastest[i]

    def chunk(self, g: int, j: int, a: int, b: int) -> list[tuple[float, tuple[int, ...]] | None]:
        """Per mesh: (fastest compute, least bytes per row of group g's row j) of chunk a..b, or None."""
        assert self.space.tables is not None
        out: list[tuple[float, tuple[int, ...]] | None] = []
        rows = self.space.rows[g]
        for mesh in self.meshes:
            opts = self.space.tables.options(a, b, mesh)
            if not opts:
                out.append(None)
                continue
            out.append((opts[0].compute_ms, tuple(min(o.weight_bytes + n[j] * o.act_bytes for o in opts) for n in rows)))
        return out


def branch_and_bound(space: GroupSpace, incumbent: float, deadline: float | None,
                     max_nodes: int | None = None) -> Search:
    """Search every cut of ``space`` that could beat ``incumbent`` (module docstring)."""
    P, K, L, v, m = space.groups, space.K, space.L, space.v, space.m
    capacity = space.capacity
    pre = _Prefix(space)
    M = len(pre.meshes)
    objective = space.objective
    best_value, best = incumbent, None

    def lower_bound(groups: list, sends: list[float], first_free: int) -> float:
        fixed = []
        for g in range(P):
            comp = min((st[0] for st in groups[g] if st is not None), default=math.inf)
            fixed.append(comp + sends[g])
        if math.inf in fixed:
            return math.inf
        rest = pre.rest[first_free]
        top = _water(fixed, rest)
        return top if objective == "bottleneck" else (sum(fixed) + rest) / v + (m - 1 / v) * top

    def add_chunk(groups: list, sends: list[float], c: int, a: int, b: int) -> tuple[list, list[float]] | None:
        """The state after chunk c = layers a..b, with the send after it (None: no mesh of its group fits)."""
        g, j = c % P, c // P
        new_g: list[tuple[float, tuple[int, ...]] | None] = []
        for st, ch in zip(groups[g], pre.chunk(g, j, a, b)):
            if st is None or ch is None:
                new_g.append(None)
                continue
            used = tuple(x + y for x, y in zip(st[1], ch[1]))
            new_g.append(None if any(u > capacity for u in used) else (st[0] + ch[0], used))
        if all(x is None for x in new_g):
            return None
        groups = list(groups)
        groups[g] = new_g
        sends = list(sends)
        if c < K - 1 and P > 1:  # x_c: paid by chunk c and by chunk c + 1
            x = space.send[g][b]
            sends[g] += x
            sends[(c + 1) % P] += x
        return groups, sends

    def children(c: int, a: int, groups: list, sends: list[float]) -> list:
        """Chunk c's possible last layers from layer a, each with its state and bound, best bound first."""
        out = []
        ends = [L - 1] if c == K - 1 else range(a, L - (K - c) + 1)  # every later chunk keeps a layer
        for b in ends:
            state = add_chunk(groups, sends, c, a, b)
            if state is not None:
                out.append((lower_bound(state[0], state[1], b + 1), b, state))
        out.sort(key=lambda t: (t[0], t[1]))
        return out

    start_groups = [[(0.0, tuple(0 for _ in space.rows[g])) for _ in range(M)] for g in range(P)]
    # the path's chunk starts are its frames' a's
    stack = [_Frame(0, 0, children(0, 0, start_groups, [0.0] * P))]
    nodes, finished = 0, True
    while stack:
        frame = stack[-1]
        if frame.next >= len(frame.kids):
            stack.pop()
            continue
        lb, b, state = frame.kids[frame.next]
        if lb > best_value * (1 + MARGIN):
            frame.next = len(frame.kids)  # by bound: the rest are no better
            continue
        if (max_nodes is not None and nodes >= max_nodes) or (
                deadline is not None and nodes % 64 == 0 and time.perf_counter() > deadline):
            finished = False
            break
        frame.next += 1
        nodes += 1
        if frame.chunk == K - 1:
            cost = space.price(tuple(f.first for f in stack) + (L,), exact=True, deadline=deadline)
            if not all(space.proven(g, cost.bounds) for g in range(P)):
                finished = False  # the deadline stopped a group's search: this leaf is not settled
                frame.next -= 1
                break
            if cost.fits and cost.value < best_value:
                best_value, best = cost.value, cost
            continue
        stack.append(_Frame(frame.chunk + 1, b + 1, children(frame.chunk + 1, b + 1, state[0], state[1])))
    bound = best_value
    if not finished:  # the children not yet searched, and the subtrees of the path, are open
        bound = min([best_value] + [kid[0] for f in stack for kid in f.kids[f.next:]])
    return Search(best, finished, bound, nodes)


@dataclass
class _Frame:
    """A prefix on the search path: chunk ``chunk`` starts at layer ``first``; its children (bound, last
    layer, state), best bound first, and the next one to search."""

    chunk: int
    first: int
    kids: list
    next: int = 0
