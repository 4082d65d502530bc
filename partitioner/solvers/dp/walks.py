"""The DP's threshold walks: the ``iteration`` objectives as least sums under a threshold on a max.

Every estimate the DP optimises has the form ``sum + coef * max`` over
stages (1F1B: stage times; zb-h1 with one k: sum of u, max of
g = (m - 1) u + k W), or is such a form plus a second max (GPipe: max F),
handled by an outer walk. :class:`ThresholdWalks` holds these walks as a mix-in
of :class:`partitioner.solvers.dp.solver.DPModel`, whose recursions (``minsum``
under a threshold, ``minmax``) and walk back they drive; see the *The
recursion* and *Schedules beyond 1F1B* sections of :mod:`.dp`. Each walk
searches the thresholds with :func:`threshold_search`: a descent towards the lowest
bottleneck for a good value early, then a branch and bound over the gaps
between the probed thresholds (bound: least sum above the gap plus coef
times its lower end).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ...plan import Plan, PlanError, evaluate
from .options import GPipeSpec, Spec, ZeroBubbleSpec

if TYPE_CHECKING:
    from ...problem import Problem
    from .placement import Automaton
    from .tables import Tables

__all__ = ["ThresholdWalks"]

INF = math.inf
_TIE = 1e-12  # relative slack when comparing a stage time with a threshold (as in dp)


@dataclass
class _Outcome:
    status: Literal["optimal", "infeasible"]
    plan: Plan | None = None
    bound: float | None = None
    stats: dict | None = None


@dataclass
class _Pass:
    """What the walk without transfers proves for the walk with them (:meth:`ThresholdWalks._comm_free_pass`)."""

    calls: int
    bound: float | None  # a lower bound on the optimum with transfers
    least_sum: float | None  # at most the sum of every plan that beats the first incumbent
    top: float  # no plan whose slowest stage is above it beats the best incumbent
    lowest: float | None  # at most every plan's slowest stage
    value: float | None  # the value, with transfers, of ``plan``
    plan: Plan | None
    levels: list | None  # the stage counts that may still beat the best incumbent (None: not known)
    floors: dict | None = None  # per level: no plan of that many stages beats min(floor, best incumbent)


def _level_floors(probes: list, maxes: dict, coef: float, top: float) -> dict:
    """Per level k: ``min_j S_k(T_j) + coef max(T_{j-1}, M_k)`` over the probes ``(T_j, {k: S_k})`` up to
    ``top`` (which must be among them), ``M_k = maxes[k]`` (see :meth:`ThresholdWalks._comm_free_pass`)."""
    floors = {}
    under = sorted((T, values) for T, values in probes if T <= top)
    for k, M in maxes.items():
        best, below = INF, -INF
        for T, values in under:
            best = min(best, values.get(k, INF) + coef * max(below, M))
            below = T
        floors[k] = best
    return floors


class ThresholdWalks:
    """The iteration objectives of :class:`~partitioner.solvers.dp.solver.DPModel` (a mix-in: it uses the model's
    ``recursion``, ``_final``, ``_final_states``, ``_level_ok``, ``reconstructions``, ``place``, ``note``)."""

    # set by the model (annotations only: no class attribute)
    K: int
    L: int
    N: int
    m: int
    problem: Problem
    G: int  # GPUs per node
    sizes: tuple[int, ...]  # the stage sizes
    out_bytes: np.ndarray  # per layer, the bytes its boundary carries (0 after the last)
    prune_levels: bool  # run the passes of :meth:`_comm_free_pass` and :meth:`_zb_comm_free` (a class attribute of the model)
    spec: Spec | None
    best_known: tuple[float, Plan] | None  # the best valid plan met so far, for a run cut short
    proven_bound: float | None
    incumbent_source: Callable[[], tuple | None]  # set by the dp method; absent: no incumbent
    _incumbent: tuple | None

    if TYPE_CHECKING:  # the model's and the walk back's methods, for the type checker only

        def recursion(self, auto: Automaton, X: np.ndarray, mode: str, limit: float, deadline: float | None) -> Tables: ...

        def _automaton_for(self, mode: str) -> Automaton: ...

        def _level_ok(self, level: int) -> bool: ...

        def place(self, stages, links, kind: str) -> Plan | None: ...

        def note(self, stages, links, kind: str, value: float) -> None: ...

        def layer_floor(self) -> tuple[float, float, float]: ...

        def least_u_sum(self) -> float: ...

        def _final(self, V, auto) -> tuple[float, tuple | None]: ...

        def _final_states(self, V, auto, value: float) -> list[tuple[int, int]]: ...

        def reconstructions(self, V, auto, X, mode, lim, level, z): ...

    def _iteration(self, auto, X, kind, deadline, stats) -> _Outcome:
        """1F1B: the least ``sum t + (m - 1) max t``.

        With an incumbent (a valid plan of value V: the warm start or the
        greedy plan, :meth:`incumbent`), no plan whose slowest stage exceeds
        ``T = (V - least sum) / (m - 1)`` can beat it (every plan's sum is at
        least the layers' least times, :meth:`~.solver.DPModel.layer_floor`), so the walk
        starts from the least sum under T, not from the unbounded one: the
        first two recursions, the widest, prune every slower stage. If the
        walk finds nothing better, the incumbent is the optimum.

        With placement states, a bound-and-prune pass runs first on the
        problem without transfers (no placement states: cheap), see
        :meth:`_comm_free_pass`: a better incumbent, a tighter T, and the
        stage counts that may still beat the incumbent; the levels above
        them get no table (:meth:`_cap_levels`), which is what lets the
        largest problems fit the memory budget.
        """
        coef = self.m - 1
        warm = self.incumbent()
        top, least_sum, lowest, calls, saved = INF, self.layer_floor()[2], None, 0, None
        if warm is not None and coef > 0:
            top = max(warm[0] - least_sum, 0.0) / coef * (1 + 1e-9)
        if kind != "none" and coef > 0 and self.prune_levels:
            found = self._comm_free_pass(deadline, coef, top, warm)
            calls += found.calls
            if found.value is not None and found.plan is not None and (warm is None or found.value < warm[0]):
                warm = self._incumbent = (found.value, found.plan, "comm-free optimum")
                self.best_known = (found.value, found.plan)
            if found.least_sum is not None:
                least_sum, lowest, top = max(least_sum, found.least_sum), found.lowest, found.top
            if found.bound is not None:
                stats["comm_free_bound"] = found.bound
                self.proven_bound = found.bound
            if warm is not None and found.levels is not None:
                if not found.levels:  # no stage count can beat the incumbent: it is the optimum
                    return self._warm_outcome(stats, calls)
                saved = self._cap_levels(min(found.levels), max(found.levels))
                stats["levels"] = self.K
        try:
            best, _, n, _ = self._walk(auto, X, kind, deadline, coef, top=top, lowest=lowest,
                                       known=warm[0] if warm is not None else INF)
            calls += n
            stats["recursions"] = calls
            if warm is not None and (best is None or best[0] > warm[0]):
                return self._warm_outcome(stats, calls)
            if best is None:
                return _Outcome("infeasible")
            return _Outcome("optimal", self._place_walked(auto, X, kind, deadline, best, coef), best[0], stats)
        finally:
            if saved is not None:
                self.K, self.bucket, self.P_lo, self.P_hi, self.stash_of_level = saved

    def _comm_free_pass(self, deadline, coef: float, top: float, warm) -> "_Pass":
        """1F1B's walk without transfers (no placement states), and what it proves of the walk with them.

        Transfers only add to stage times (a stage's configs do not depend on
        them), so every plan's stage times, sum and slowest stage with
        transfers are at least those without. Hence (Alpa bounds the real
        problem by its communication-free twin too [1]_; here it is exact):

        * its optimal plan, placed contiguously and valued with the transfers
          (:func:`partitioner.plan.evaluate`), is a valid incumbent V;
        * its least sum under ``top`` is at most the sum of every plan with
          transfers that beats the first incumbent (every such plan has
          every stage at most ``top``): a tighter threshold ``T = (V - that
          sum) / (m - 1)`` above which no plan beats V;
        * its lowest bottleneck is at most every plan's slowest stage with
          transfers (the walk's ``lowest``, without a ``minmax`` recursion over
          every placement state);
        * per stage count k (a level; the bucket level: k or more), each of
          its ``minsum`` probes at thresholds ``T_1 < ... < T_n`` (the last one
          at ``T``) bounds the plans whose slowest stage lies in ``(T_{j-1},
          T_j]``: their sums are at least the probe's least sum ``S_k(T_j)``,
          their slowest stages above ``T_{j-1}`` and at least the least
          bottleneck ``M_k`` of k stages, so no k-stage plan beats
          ``LB_k = min_j S_k(T_j) + (m - 1) max(T_{j-1}, M_k)``. The stage
          counts with ``LB_k < V`` are the only ones that may still win,
          and ``min_k LB_k`` is a lower bound on the optimum.

        The walk's notes (plans valued without transfers) are not kept.

        References
        ----------
        .. [1] L. Zheng et al., "Alpa: Automating Inter- and Intra-Operator
           Parallelism for Distributed Deep Learning", OSDI 2022, section 5.2.
        """
        auto0 = self._automaton_for("none")
        X0 = np.zeros((self.L, len(auto0.categories)))
        known = warm[0] if warm is not None else INF
        kept = (self.best_known, self.proven_bound)
        probes: list[tuple[float, dict]] = []
        try:
            found, _, calls, lowest = self._walk(auto0, X0, "none", deadline, coef, top=top, known=known, probes=probes)
        finally:
            self.best_known, self.proven_bound = kept
        if found is None or not probes:  # no plan has every stage under top: none beats ``known``, or none exists
            return _Pass(calls, None, None, top, None, None, None, None if warm is None else [])
        least = float(min(probes[0][1].values(), default=INF))  # the least sum under top (the walk's first probe)
        plan, value = self.place(found[1][0], found[1][1], "none"), None
        if plan is not None:
            try:
                value = evaluate(self.problem, plan, "iteration").value
            except PlanError:
                plan = None
        best = min(known, INF if value is None else value)
        if not math.isfinite(best):
            return _Pass(calls, None, least, top, lowest, None, None, None)
        tight = min(top, max(best - least, 0.0) / coef * (1 + 1e-9))
        # the probe at the tightened threshold, and the least bottleneck per stage count under it
        probes.append((tight, self._level_values(self.recursion(auto0, X0, "minsum", tight, deadline), auto0)))
        maxes = self._level_values(self.recursion(auto0, X0, "minmax", tight, deadline), auto0)
        calls += 2
        floors = _level_floors(probes, maxes, coef, tight)
        bound = min(min(floors.values(), default=INF), best)
        levels = [k for k, f in floors.items() if f * (1 - 1e-9) < best]
        if levels:  # a plan that may still win has one of these stage counts: its slowest stage is no less
            lowest = max(lowest, min(maxes[k] for k in levels))
        return _Pass(calls, bound, least, tight, lowest, value, plan, levels, floors)

    def _cap_levels(self, low: int, high: int) -> tuple | None:
        """Keep whole pipelines to ``low..high`` stages and drop the levels above ``high``
        (:meth:`_comm_free_pass`); the levels before, to restore, or None if nothing changes."""
        if high >= self.K and low <= self.P_lo:
            return None
        saved = (self.K, self.bucket, self.P_lo, self.P_hi, self.stash_of_level)
        self.P_lo = max(self.P_lo, low)
        if high < self.K:
            self.K, self.bucket, self.P_hi = high, False, high
            self.stash_of_level = self.stash_of_level[: high + 1]
        return saved

    def _zb_iteration(self, auto, X, kind, deadline, stats) -> _Outcome:
        """zb-h1: the least ``sum u + max g`` with ``g = (m - 1) u + k W``, a branch and bound over k.

        k = max(m - P + 1, 1) depends on the stage count P: each distinct k
        (every P < m apart, all P >= m together) is a walk over the levels
        with that k. Bounds: every plan's sum of u is at least its layers'
        least u (:meth:`.DPModel.least_u_sum`); one recursion gives the least
        max g per level under the smallest k (g grows with k, so it is a
        floor for every k), over the stages no plan that beats the best
        value V so far (first the incumbent's, :meth:`incumbent`) has. The k
        go in order of those floors, each walked from the least sum under
        ``V - least sum`` (no plan with a larger g beats V) and stopped by V.
        Before the first k with at least half the levels (the dearest walks,
        taken once the cheap ones have found a good V), one more recursion
        gives the least sum of u per level over the plans whose every stage
        has ``g_0 = (m - 1)(u + x) <= V`` (every plan below V is among them,
        whatever its k): a tighter least sum for the remaining bounds and
        walks. The search ends when a floor cannot beat the best, which is
        then the optimum. With placement states, the walks with every transfer
        at its least (:meth:`_zb_comm_free`, cheap: one state per stage size)
        come first: a floor per k (the walks with placement skip every k whose
        floor cannot beat the best), and their optima, valued with their
        transfers, as incumbents.
        """
        m = self.m
        ks = sorted({max(m - level + 1, 1) for level in range(1, self.K + 1) if self._level_ok(level)})
        best: tuple | None = None  # (value, walked payload or None for the warm start, spec)
        calls = 0
        warm = self.incumbent()
        if warm is not None:
            best = (warm[0], None, None)
        if not ks:
            return _Outcome("infeasible")

        def value() -> float:
            return INF if best is None else best[0]

        least_any = self.least_u_sum()
        relaxed: dict[int, float] = {}  # per k: no plan of that k beats it (the relaxed walks)
        if kind in ("run", "bins") and self.prune_levels and math.isfinite(value()) and np.any(self.out_bytes > 0):
            assert warm is not None  # a finite best value is the incumbent's
            relaxed, n, warm = self._zb_comm_free(ks, deadline, least_any, warm)
            calls += n
            stats["comm_free_recursions"] = n
            if warm is not None and (best is None or warm[0] < best[0]):
                best = (warm[0], None, None)
            if relaxed:
                stats["comm_free_bound"] = min(min(relaxed.values()), value())
            if all(relaxed.get(k, -INF) >= value() * (1 - 1e-12) for k in ks):
                stats["recursions"] = calls
                return self._warm_outcome(stats, calls)  # no k can beat the incumbent: it is the optimum
        self.spec = ZeroBubbleSpec(m, ks[0], every_level=True)
        ceiling = value() - least_any  # a stage above it is in no plan that could win
        floor = self._level_values(self.recursion(auto, X, "minmax", ceiling * (1 + _TIE), deadline), auto)
        calls += 1
        if not any(math.isfinite(f) for f in floor.values()):  # no plan, or none that beats the incumbent
            self.spec = None
            return _Outcome("infeasible") if best is None else self._warm_outcome(stats, calls)
        levels_of: dict[int, list[int]] = {}
        for level in floor:
            levels_of.setdefault(max(m - level + 1, 1), []).append(level)
        floors = {k: min(floor[level] for level in levels) for k, levels in levels_of.items()}
        # the k whose plans may beat the incumbent, the most promising first (the comm-free optimum where known)
        order = sorted((max(least_any + b, relaxed.get(k, -INF)), k) for k, b in floors.items() if math.isfinite(b))
        self.proven_bound = min(order[0][0], value()) if order else value()
        free = None  # the least sum of u per level over the plans that could beat the best
        walked = 0
        for cheap, k in order:
            if cheap >= value() * (1 - 1e-12):
                break  # neither this k nor any later one can beat the best
            walked += 1
            if free is None and max(levels_of[k]) * 2 >= self.K and math.isfinite(value()):
                self.spec = ZeroBubbleSpec(m, 0, every_level=True)  # k = 0: no k changes the table
                free = self._level_values(self.recursion(auto, X, "minsum", value() * (1 + _TIE), deadline), auto)
                calls += 1
            least = least_any if free is None else min(free.get(level, INF) for level in levels_of[k])
            if least + floors[k] >= value() * (1 - 1e-12):
                continue  # no plan of this k beats the best
            self.spec = ZeroBubbleSpec(m, k)
            top = (value() - least) * (1 + _TIE) if math.isfinite(value()) else INF
            found, _, n, _ = self._walk(auto, X, kind, deadline, 1, value(), lowest=floors[k], top=top, known=value())
            calls += n
            if found is not None and found[0] < value():
                best = (found[0], found[1], self.spec)
        stats["recursions"] = calls
        stats["k_walked"] = walked
        if best is None:
            self.spec = None
            return _Outcome("infeasible")
        if best[1] is None:
            return self._warm_outcome(stats, calls)
        self.spec = best[2]
        plan = self._place_walked(auto, X, kind, deadline, best[:2], 1)
        self.spec = None
        return _Outcome("optimal", plan, best[0], stats)

    def _zb_comm_free(self, ks: list[int], deadline, least_any: float, warm: tuple) -> tuple[dict, int, tuple]:
        """zb-h1's walks with every transfer at its least (placement states of stage sizes only), one per
        k, and what they prove of the walks with placement: ``({k: floor}, recursions, incumbent)``.

        The ``size`` automaton accepts every sequence of stage sizes, so its plans include every plan with
        placement states, and a boundary's category there is the same smaller stage size j
        (:mod:`.placement`); :meth:`_least_transfers` prices it at the fastest link a stage of that size
        may have, at most its transfer under any placement. Transfers only add to a stage's u and so to its
        g (:class:`.options.ZeroBubbleSpec`), so no plan of coefficient k is below the least value of
        the plans of that k in the relaxed walk (as 1F1B's :meth:`_comm_free_pass`, there without any
        transfer). Each walk is bounded by the best value V so far (a walk that finds nothing below V
        proves that k's floor is at least V); each optimum found, placed contiguously and valued with its
        transfers (:func:`partitioner.plan.evaluate`), is an incumbent when it beats V. The walks' notes
        (relaxed values) are not kept.
        """
        auto0 = self._automaton_for("size")
        X0 = self._least_transfers(auto0)
        kept = (self.best_known, self.proven_bound)
        floors: dict[int, float] = {}
        calls = 0
        bound = -INF  # a lower bound on the optimum, kept when the time limit cuts the pass short
        try:
            # per k the least max g of a relaxed plan that may beat the first V (one recursion under the least k,
            # as _zb_iteration's floor: g grows with k), each k's walk its lowest max: no minmax walk of its own
            self.spec = ZeroBubbleSpec(self.m, ks[0], every_level=True)
            ceiling = (warm[0] - least_any) * (1 + _TIE)
            lows: dict[int, float] = {}
            for level, low in self._level_values(self.recursion(auto0, X0, "minmax", ceiling, deadline), auto0).items():
                k = max(self.m - level + 1, 1)
                lows[k] = min(lows.get(k, INF), low)
            calls += 1
            # every plan has sum u >= least_any and max g >= its k's least (or beats no V: value > V)
            bound = min(warm[0], least_any + min(lows.values(), default=INF))
            # the least k (the most stages) first: with transfers cheap next to the stages' work, zb-h1's estimate
            # falls with k, so the first walks find a V that the later ones (each bounded by V) barely probe
            for k in sorted(ks):
                V = warm[0]
                if not math.isfinite(lows.get(k, INF)):
                    floors[k] = V  # no relaxed plan of this k has every g under the first V's ceiling
                    continue
                self.spec = ZeroBubbleSpec(self.m, k)
                top = (V - least_any) * (1 + _TIE)
                found, _, n, _ = self._walk(auto0, X0, "size", deadline, 1, V, lowest=lows[k], top=top, known=V)
                calls += n
                if found is None or not found[0] < V:
                    floors[k] = V  # no plan of this k, with or without transfers, is below V
                    continue
                floors[k] = found[0]
                plan = self.place(found[1][0], found[1][1], "size")
                if plan is None:
                    continue
                try:
                    value = evaluate(self.problem, plan, "iteration").value
                except PlanError:
                    continue
                if value < warm[0]:
                    warm = (value, plan, "comm-free optimum")
            bound = max(bound, min(warm[0], min(floors.values(), default=INF)))  # every k has its floor
        finally:  # the incumbent and the bound found so far are kept even when the time limit cuts the pass short
            self.best_known, self.proven_bound = kept
            if bound > -INF:
                self.proven_bound = max(bound, self.proven_bound if self.proven_bound is not None else -INF)
            self.spec = None
            if warm is not getattr(self, "_incumbent", None):
                self._incumbent = warm
                if self.best_known is None or warm[0] < self.best_known[0]:
                    self.best_known = warm[:2]
        return floors, calls, warm

    def _least_transfers(self, auto) -> np.ndarray:
        """``X[b, c]`` of the ``size`` automaton ``auto``: the transfer of the boundary after layer b in
        category c = (j, link) at the fastest link a boundary whose smaller stage has ``sizes[j]`` devices
        may use under any placement (inside a node only when that stage is smaller than a node)."""
        c = self.problem.cluster
        fast = max(c.intra_node_GBps, c.inter_node_GBps)
        X = np.zeros((self.L, len(auto.categories)))
        for k, (j, link) in enumerate(auto.categories):
            if link is None:
                continue
            bw = fast if self.sizes[j] < self.G else c.inter_node_GBps
            X[:, k] = self.out_bytes / (self.sizes[j] * bw * 1e6)
        return X

    def incumbent(self) -> tuple | None:
        """(value, plan, source) of the plan the search starts from, or None: asked of
        ``incumbent_source`` (set by the method; the greedy plan is run only when asked) once."""
        if not hasattr(self, "_incumbent"):
            source = getattr(self, "incumbent_source", None)
            self._incumbent = source() if source is not None else None
        found = self._incumbent
        if found is not None and (self.best_known is None or found[0] < self.best_known[0]):
            self.best_known = found[:2]  # returned if the search is cut short
        return found

    def _warm_outcome(self, stats, calls) -> _Outcome:
        """The incumbent (the warm start or the greedy plan) is optimal: no walk found a plan that beats it."""
        self.spec = None
        found = self._incumbent
        assert found is not None, "dp: a warm outcome without an incumbent"
        stats.update(recursions=calls, plan_from=found[2])
        return _Outcome("optimal", found[1], found[0], stats)

    def _level_values(self, V, auto) -> dict:
        """Per allowed level: the least value of a whole pipeline with that many stages."""
        out = {}
        for level in range(1, self.K + 1):
            if self._level_ok(level):
                out[level] = float(np.min(np.where(auto.accept, V.first(level, self.N), INF)))
        return out

    def _gpipe_iteration(self, auto, X, kind, deadline, stats) -> _Outcome:
        """GPipe: the least ``sum t + (m - 1)(max F + max B)``, a walk over a cap on max F around walks on max B.

        ``phi(C)``, the least ``sum t + (m - 1) max B`` over the plans with
        every ``F <= C`` (a :meth:`_walk` on B with F capped), is
        non-increasing in C, and the optimum is the least ``phi(C) + (m - 1) C``
        (for the optimal plan, C = its max F). So C need only visit, downwards
        from inf, just below the max F of each step's plan (phi is constant
        between), and stops once ``phi(C) + (m - 1) (lowest max F)`` cannot
        beat the best; an inner walk stops early when it cannot either.
        """
        coef = self.m - 1

        def max_f(stages) -> float:
            return max(stage[4][2] for stage in stages)

        def extra(stages) -> float:
            return coef * max_f(stages)

        self.spec = GPipeSpec("F")
        V = self.recursion(auto, X, "minmax", INF, deadline)
        lowest_f, _ = self._final(V, auto)
        best, calls, cap_f = None, 1, INF
        while math.isfinite(lowest_f):
            self.spec = GPipeSpec("B", cap_f * (1 + _TIE) if math.isfinite(cap_f) else INF)
            cap = INF if best is None else best[0] - coef * lowest_f
            found, _, n, _ = self._walk(auto, X, kind, deadline, coef, cap, extra)
            calls += n
            if found is None:
                break
            value = found[0] + extra(found[1][0])
            if best is None or value < best[0]:
                best = (value, found[1], self.spec)
            if coef == 0 or found[0] + coef * lowest_f >= best[0] * (1 - 1e-12):
                break
            cap_f = max_f(found[1][0]) * (1 - 4e-12)
            if cap_f < lowest_f * (1 - 1e-12):
                break
        stats["recursions"] = calls
        if best is None:
            self.spec = None
            return _Outcome("infeasible")
        self.spec = best[2]
        plan = self._place_walked(auto, X, kind, deadline, best[:2], coef, extra)
        self.spec = None
        return _Outcome("optimal", plan, best[0], stats)

    def _walk(self, auto, X, kind, deadline, coef: float, cap: float = INF, extra=None, lowest: float | None = None,
              top: float = INF, known: float = INF, probes: list | None = None):
        """The least ``sum + coef * max`` over the allowed levels (1F1B: stage times; zb-h1: sum of u, max of g).

        Returns ``(value, (stages, links, times, threshold))`` or None when
        no plan exists, a proven lower bound, the recursions run and the
        lowest max (``lowest``, when given, is taken for it; a ``cap`` of
        -inf stops the walk right after the bound).
        ``minsum(T)`` is a non-increasing step function of the threshold T;
        :func:`threshold_search` finds its best step (a (sum, max) Pareto
        point), or proves that none beats ``cap`` (a value known elsewhere).
        ``extra(stages)``: what the true objective adds to ``sum + coef * max``
        (GPipe: (m - 1) max F), for the plans noted on the way. ``top``: a
        threshold above which no plan beats ``known``, the value of a plan
        known elsewhere (the walk starts from the least sum under it; the
        proven bound is at most ``known``). ``probes``, when given, gets the threshold and the
        per-level least sums (:meth:`_level_values`) of every ``minsum`` recursion.
        """
        calls = 0
        extra = extra or (lambda stages: 0.0)

        def minsum(limit):
            nonlocal calls
            calls += 1
            V = self.recursion(auto, X, "minsum", limit, deadline)
            if probes is not None:
                probes.append((limit, self._level_values(V, auto)))
            total, arg = self._final(V, auto)
            if arg is None:
                return INF, None, None
            stages, links, times = next(self.reconstructions(V, auto, X, "minsum", limit, *arg))
            return total, max(times), (stages, links, times, limit)

        free_sum, free_max, free = minsum(top)
        if free is None:
            return None, INF, calls, None
        best = (free_sum + coef * free_max, free)
        bound = best[0]
        self.note(free[0], free[1], kind, best[0] + extra(free[0]))
        lowest_max = None
        if coef > 0:
            if lowest is None:
                # the free optimum's slowest stage bounds the lowest bottleneck: prune slower stages
                V = self.recursion(auto, X, "minmax", free_max, deadline)
                calls += 1
                lowest, _ = self._final(V, auto)
            lowest_max = lowest
            # every plan has sum >= free_sum and max >= lowest_max
            bound = free_sum + coef * lowest_max
            if self.spec is None:  # with options a walk covers one k (zb-h1) or one cap on F (GPipe)
                # a plan above ``top`` is no better than ``known``; a bound proven before may be better
                self.proven_bound = max(min(bound, known), self.proven_bound if self.proven_bound is not None else -INF)
            noted = best[0]

            def probe(limit):
                nonlocal noted
                f, M, plan = minsum(limit)
                if plan is not None and f + coef * M < noted:
                    noted = f + coef * M
                    self.note(plan[0], plan[1], kind, noted + extra(plan[0]))
                return f, M, plan

            def below(x: float, strict: bool) -> float:
                return x * (1 - 4e-12) if strict else x

            best, _ = threshold_search(probe, coef, (free_sum, free_max, free), lowest_max, below, cap)
        return best, bound, calls, lowest_max

    def _place_walked(self, auto, X, kind, deadline, best, coef: float, extra=None) -> Plan | None:
        """The plan of a walk's optimum; when its runs do not pack, another plan of the same value."""
        stages, links, _, limit = best[1]
        plan = self.place(stages, links, kind)
        if plan is None:
            # the runs do not pack: look among the other plans with the same least sum at that threshold
            V = self.recursion(auto, X, "minsum", limit, deadline)
            total, _ = self._final(V, auto)
            plans = itertools.chain.from_iterable(
                self.reconstructions(V, auto, X, "minsum", limit, level, z) for level, z in self._final_states(V, auto, total)
            )
            for stages, links, times in itertools.islice(plans, 5000):
                if _same(total + coef * max(times) + (extra(stages) if extra else 0.0), best[0]):
                    plan = self.place(stages, links, kind)
                    if plan is not None:
                        break
        return plan


def threshold_search(minsum, coef: float, free: tuple, lowest: float, below, cap: float = INF):
    """The least ``f + coef * M`` over the (sum f, max M) Pareto points of a step function ``minsum``.

    ``minsum(T)`` returns ``(f, M, payload)``: the least sum over the plans
    whose every stage is at most the threshold T, and the max and payload of
    one such plan (``M <= T``), or ``(inf, None, None)`` when there is none.
    ``free`` is its answer without threshold, ``lowest`` a lower bound on
    every plan's max, ``below(x, strict)`` the threshold that admits the
    maxes up to x (below x when ``strict``; a snapped candidate, or x), and
    ``cap`` a value known elsewhere: a plan that cannot beat it is not
    sought. Returns the best ``(value, payload)`` found (the optimum unless
    it is not below ``cap``) and the number of ``minsum`` calls.

    Every probe at T settles the maxes in ``[M, T]`` (their plans' sums are
    at least f). Between the probe at ``T_lo`` and the next
    probe up, whose point is ``(f_up, M_up)``, the unsettled maxes
    ``(T_lo, M_up)`` (below the lowest probe: ``[lowest, M_up)``) have sums
    at least ``f_up``, so none of their plans beats ``f_up + coef *
    max(T_lo, lowest)``: a *gap* is closed once that bound reaches
    the best value, and is otherwise probed at its *ceiling*,
    ``min(M_up, (best - f_up) / coef)`` -- above that no plan can win
    either; the gap with the least bound goes first. So a good value early
    closes gaps early: before the gaps, the
    search *descends* from the free optimum, probing halfway down to
    ``lowest`` while the value improves (with ``coef`` = m - 1 the optimum
    is usually near the lowest bottleneck, far below the free optimum's
    max). Under a finite ``cap`` (zb-h1's later walks, GPipe's inner ones)
    the cap already prunes and the descent is skipped: it measured more
    recursions there.
    """
    f0, M0, payload = free
    best = (f0 + coef * M0, payload)
    points = [(INF, f0, M0)]  # (threshold, f, M) of every probe with a plan
    calls = 0

    def probe(T):
        nonlocal best, calls
        calls += 1
        f, M, found = minsum(T)
        if found is None:
            return None
        points.append((T, f, M))
        if f + coef * M < best[0]:
            best = (f + coef * M, found)
        return f + coef * M, M

    def limit() -> float:
        return min(best[0], cap)

    if coef <= 0:
        return best, calls
    # the descent (no cap): halfway from the last improving point's max to the lowest bottleneck
    value, M = best[0], M0
    settled = -INF  # no plan has a max <= settled
    while cap == INF and f0 + coef * lowest < limit() * (1 - 1e-12):
        T = below(lowest + 0.5 * (M - lowest), False)
        if not T < M * (1 - 1e-12) or T < lowest * (1 - 1e-12):
            break
        got = probe(T)
        if got is None:
            settled = lowest = max(lowest, T)
            break
        if got[0] >= value:
            break
        value, M = got
    # the gaps, least bound first
    closed: set = set()
    while True:
        points.sort(key=lambda p: p[0])
        gap, floor = None, settled
        for T, f, M in points:
            bound = f + coef * max(floor, lowest)
            if M > floor and (floor, M) not in closed and bound < limit() * (1 - 1e-12):
                if gap is None or bound < gap[0]:
                    gap = (bound, floor, f, M)  # the gap with the least bound first
            floor = max(floor, T)
        if gap is None:
            return best, calls
        _, floor, f, M = gap
        T = min(below(M, True), below((limit() - f) / coef, False))
        if not T > floor or T < lowest * (1 - 1e-12):
            closed.add((floor, M))  # no threshold in the gap admits a plan that could win
        elif probe(T) is None:
            settled = lowest = max(lowest, T)  # no plan has every stage <= T


def _same(x: float, y: float) -> bool:
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return x == y or abs(x - y) <= 1e-12 * max(1.0, abs(x), abs(y))
