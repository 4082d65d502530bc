"""Cuts of the layers into the P·v chunks of one group count, and what a cut costs.

A *cut* is the tuple of chunk bounds ``(0, b_1, ..., b_{K-1}, L)``; chunk c
is layers ``b_c .. b_{c+1} - 1`` and runs on group c mod P. :class:`GroupSpace`
holds everything of the interleaved space (:mod:`.space`) that a fixed
group count P fixes -- the group size, the sends per boundary layer and
group, each group's memory rows -- and prices a cut exactly: each group's
best mesh and options (:func:`.groups.best_group`, kept per group and
chunk ranges), its time T_g (compute plus the sends of its chunks), and
the objective (``bottleneck`` = max_g T_g, ``iteration`` = (1/v) sum_g T_g
+ (m - 1/v) max_g T_g). A group with no fitting choice makes the cut
infeasible; :meth:`GroupSpace.excess` then says by how many bytes its
least-memory choice misses (the search's guide back to plans that fit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import accumulate
from time import perf_counter
from typing import Sequence

from ...plan import Plan
from ...plan.cuts import layer_roles, uniform_cuts
from ...problem import Problem
from .groups import GroupChoice, best_group, group_rows
from .space import group_configs, held_states, interleaved_plan, send_ms
from .tables import ChunkTables

__all__ = ["GroupSpace", "CutCost", "objective_of", "rounds_value", "ROUNDS"]


ROUNDS = "rounds"  # the lockstep proxy of :func:`rounds_value`, for round-balanced candidates (not a problem objective)


def objective_of(objective: str, times: Sequence[float], m: int, v: int) -> float:
    """The objective of group times T_g: ``bottleneck`` max T_g, ``iteration`` (1/v) sum T_g + (m - 1/v) max T_g."""
    top = max(times)
    return top if objective == "bottleneck" else sum(times) / v + (m - 1 / v) * top


def rounds_value(chunk_times: Sequence[float], groups: int, m: int, v: int) -> float:
    """(m + (P - 1)/v) x sum over rounds r of max_g t_{rP+g}: the iteration if every round of P chunks
    ran at its slowest chunk's pace.

    Megatron-LM's order runs the P chunks of a round (local chunk r on every
    group) side by side, so a round whose chunks differ stalls the groups
    that finish first; for chunks equal within every round it is the
    ``iteration`` estimate. Measured against the simulator on Qwen3-VL-30B-A3B
    (2 groups x 12 chunks, m = 64; the uniform cut, the estimate's best found
    and eight random perturbations of the uniform cut): the simulated
    iteration lay between the ``iteration`` estimate (up to 12 % below it)
    and this value (up to 13 % above it) every time; the cut the estimate
    preferred put unequal chunks in a round and simulated 9 % slower than
    the uniform cut.
    """
    P = groups
    per_round = sum(max(chunk_times[r * P:(r + 1) * P]) for r in range(len(chunk_times) // P))
    return (m + (P - 1) / v) * per_round


@dataclass(frozen=True)
class CutCost:
    """A priced cut: per group its choice (None: nothing fits) and time; the objective (inf when a group does not fit)."""

    bounds: tuple[int, ...]
    choices: tuple[GroupChoice | None, ...]
    times: tuple[float, ...]
    value: float
    excess: int  # bytes by which the groups that do not fit miss, at least (0 when the cut fits)

    @property
    def fits(self) -> bool:
        return self.excess == 0


@dataclass
class GroupSpace:
    """The interleaved space of one group count P (module docstring)."""

    problem: Problem
    groups: int
    objective: str
    tables: ChunkTables | None = None
    _groups: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        p, P = self.problem, self.groups
        self.v = p.training.virtual_stages
        self.m = p.microbatches
        self.K = P * self.v
        self.L = p.num_layers
        self.size = p.num_devices // P
        self.capacity = p.cluster.gpu_memory_bytes
        if self.tables is None:
            self.tables = ChunkTables(p, tuple(group_configs(p, self.size)))
        self.rows = [group_rows(held_states(P, self.m, self.v, g)) for g in range(P)]
        self.send = [[send_ms(p, i, P, g) if i < self.L - 1 else 0.0 for i in range(self.L)] for g in range(P)]

    # ------------------------------------------------------------------ pricing

    def ranges(self, bounds: Sequence[int], g: int) -> tuple[tuple[int, int], ...]:
        """Group g's chunks as (first, last) layers, local order."""
        return tuple((bounds[c], bounds[c + 1] - 1) for c in range(g, self.K, self.groups))

    def sends(self, bounds: Sequence[int], g: int) -> float:
        """The sends group g's chunks pay: x_c after chunk c and x_{c-1} before it."""
        P, K, total = self.groups, self.K, 0.0
        if P == 1:
            return 0.0
        for c in range(g, K, P):
            if c < K - 1:
                total += self.send[g][bounds[c + 1] - 1]
            if c > 0:
                total += self.send[(c - 1) % P][bounds[c] - 1]
        return total

    def choice(self, g: int, ranges: tuple[tuple[int, int], ...], exact: bool = False,
               deadline: float | None = None) -> GroupChoice | None:
        """:func:`.groups.best_group` of group g on ``ranges`` (greedy unless ``exact``), kept.

        A kept answer is reused unless an exact one is asked and it is not
        proven (a greedy one, or an exact search the deadline stopped).
        """
        key = (g, ranges)
        found = self._groups.get(key)
        if found is None or (exact and not found[1]):
            assert self.tables is not None
            got = best_group(self.tables, ranges, self.rows[g], self.capacity, exact=exact, deadline=deadline)
            proven = got.proven if got is not None else exact and (deadline is None or perf_counter() <= deadline)
            if found is not None and found[0] is not None and (got is None or found[0].compute_ms < got.compute_ms):
                got = found[0]  # a search cut short keeps the better choice known
            found = self._groups[key] = (got, proven)
        return found[0]

    def proven(self, g: int, bounds: Sequence[int]) -> bool:
        """Whether group g's kept answer on the cut ``bounds`` is proven (its best, or that none fits)."""
        found = self._groups.get((g, self.ranges(bounds, g)))
        return found is not None and found[1]

    def excess(self, g: int, ranges: tuple[tuple[int, int], ...]) -> int:
        """How many bytes group g's least-memory options miss by on ``ranges``, at least (>= 1 when it does not fit)."""
        assert self.tables is not None
        worst = None
        for mesh in self.tables.meshes:
            options = [self.tables.options(a, b, mesh) for a, b in ranges]
            if any(not o for o in options):
                continue
            need = max(sum(min(o.weight_bytes + n[j] * o.act_bytes for o in options[j]) for j in range(len(ranges)))
                       for n in self.rows[g])
            worst = need if worst is None else min(worst, need)
        if worst is None:
            return 2**62
        return max(1, worst - self.capacity)

    def price(self, bounds: Sequence[int], exact: bool = False, deadline: float | None = None) -> CutCost:
        """The cost of a cut (module docstring): each group's greedy choice, or its best with ``exact``
        (as far as ``deadline`` lets the search go)."""
        bounds = tuple(bounds)
        choices, times, excess = [], [], 0
        for g in range(self.groups):
            r = self.ranges(bounds, g)
            ch = self.choice(g, r, exact, deadline)
            choices.append(ch)
            if ch is None:
                excess += self.excess(g, r)
                times.append(math.inf)
            else:
                times.append(ch.compute_ms + self.sends(bounds, g))
        if excess:
            value = math.inf
        elif self.objective == ROUNDS:
            value = rounds_value(self.chunk_times(bounds, choices), self.groups, self.m, self.v)
        else:
            value = objective_of(self.objective, times, self.m, self.v)
        return CutCost(bounds, tuple(choices), tuple(times), value, excess)

    def chunk_times(self, bounds: Sequence[int], choices: Sequence[GroupChoice | None]) -> list[float]:
        """t_c per chunk of a cut whose groups all fit: its option's compute plus its sends."""
        P, K = self.groups, self.K
        out = []
        for c in range(K):
            ch = choices[c % P]
            assert ch is not None
            t = ch.choices[c // P].compute_ms
            if P > 1 and c < K - 1:
                t += self.send[c % P][bounds[c + 1] - 1]
            if P > 1 and c > 0:
                t += self.send[(c - 1) % P][bounds[c] - 1]
            out.append(t)
        return out

    def plan(self, cost: CutCost) -> Plan:
        """The plan of a priced cut that fits, on the canonical group ids."""
        configs: list = [None] * self.K
        for g, ch in enumerate(cost.choices):
            assert ch is not None
            for j, c in enumerate(range(g, self.K, self.groups)):
                configs[c] = list(ch.choices[j].configs)
        return interleaved_plan(self.problem, self.groups, cost.bounds, configs)

    # ------------------------------------------------------------------ starts

    def uniform_bounds(self) -> tuple[int, ...] | None:
        """Megatron-LM's uniform cut into K chunks (:func:`partitioner.plan.cuts.interleaved_uniform_plan`)."""
        cuts = uniform_cuts(layer_roles(self.problem), self.K)
        if cuts is None:
            return None
        return tuple(a for a, _ in cuts) + (self.L,)

    def balanced_bounds(self, times: Sequence[float]) -> tuple[int, ...]:
        """K chunks of about equal ``times`` (per layer), each at least one layer: bound b_c is the
        position whose prefix sum is nearest c/K of the total, within what the other chunks leave."""
        L, K = self.L, self.K
        prefix = [0.0, *accumulate(times)]
        bounds = [0]
        for c in range(1, K):
            target = prefix[L] * c / K
            lo, hi = bounds[-1] + 1, L - (K - c)
            i = lo
            while i < hi and prefix[i + 1] <= target:
                i += 1
            if i < hi and prefix[i + 1] - target < target - prefix[i]:
                i += 1
            bounds.append(i)
        bounds.append(L)
        return tuple(bounds)
