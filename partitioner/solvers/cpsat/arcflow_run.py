"""``cpsat`` on the arc-flow graph (:mod:`.arcflow`): the threshold walk, its proven bound, the answer.

Every solve here is a CP-SAT solve of the arc-flow model; no bound comes
from anywhere else.

* ``bottleneck``: bisection over the distinct arc times ``v``: is there a path through arcs of at most ``v``
units? (The same min-sum model as below; a proven "no" raises the bound to the next arc time, a path lowers the
answer to its slowest arc.) * ``iteration`` (``sum t + (m - 1) max t``): a parametric walk over the threshold
``Z`` on the slowest stage. With every arc slower than ``Z`` fixed to 0, the model ``minimise sum t_a x_a`` is a
shortest path in a DAG (plus, when the stage bounds cut the counts, one side constraint): its LP relaxation is
integral, so CP-SAT proves it at the root. Its answer, a path of sum ``S`` and slowest stage ``T1 <= Z``,
settles every plan whose slowest stage lies in ``[T1, Z]`` -- each has sum ``>= S`` and value ``>= S + (m - 1)
T1``, which the path attains.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.cpsat.arcflow_run``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...core.lazy import lazy_module
from ...plan import Status, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest
from ..slot.data import SlotData, SlotDecisions, plan_of_decisions
from ..slot.run import analytic_bound, build_guard, infeasible_message
from ..slot.times import IntegerTimes, conservative_bound
from .arcflow import ArcGraph, GraphTooLarge, build_graph, path_of_plan
from .formulation import apply_solver_options

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:
    cp_model = lazy_module("ortools.sat.python.cp_model")

__all__ = ["solve_on_graph", "ArcSolution"]

_CHECK_EVERY = 8192  # arcs (or states) between two deadline checks while the flow model is built
# CP-SAT parameters of every arc-flow solve, before the caller's.
ARC_PARAMETERS = {"cp_model_presolve": False, "add_lp_constraints_lazily": False, "relative_gap_limit": 0.0, "cp_model_probing_level": 0, "root_lp_iterations": 10**8}


@dataclass
class ArcSolution:
    """What the solves proved: the best path found, its model value, and the proven bound (units)."""

    path: list | None = None
    units: int | None = None
    bound: float = 0.0
    proven: bool = False
    infeasible: bool = False
    solves: list = field(default_factory=list)


class _Flow:
    """The flow model of a graph: ``x`` per arc, conservation, the stage-count domain, ``minimise sum t_a x_a``."""

    def __init__(self, graph: ArcGraph, counts, num_layers: int, check=None):
        arcs = graph.arcs
        self.model = model = cp_model.CpModel()
        n = len(arcs)
        check = check or (lambda: None)  # raises BuildTimeout past the deadline (slot.run.build_guard)
        x = []
        for start in range(0, n, _CHECK_EVERY):
            check()
            x += [model.new_bool_var(f"x{i}") for i in range(start, min(n, start + _CHECK_EVERY))]
        self.x = x
        self.t = np.asarray(arcs[:, 6], dtype=np.int64)
        out_of: dict = {}
        into: dict = {}
        for i, (src, dst) in enumerate(arcs[:, :2].tolist()):
            out_of.setdefault(src, []).append(x[i])
            into.setdefault(dst, []).append(x[i])
        sinks = set(graph.sinks)
        for k, sid in enumerate(set(out_of) | set(into)):
            if k % _CHECK_EVERY == 0:
                check()
            if sid == graph.source:
                model.add_exactly_one(out_of[sid])
            elif sid not in sinks:
                model.add(sum(into.get(sid, [])) == sum(out_of.get(sid, [])))
        model.add_exactly_one([v for sid in graph.sinks for v in into.get(sid, [])])
        if set(range(1, num_layers + 1)) - set(counts):
            model.add_linear_expression_in_domain(sum(x), cp_model.Domain.from_values(counts))
        model.minimize(cp_model.LinearExpr.weighted_sum(x, self.t.tolist()))
        self.allowed = np.ones(n, dtype=bool)

    def cap(self, limit: int) -> None:
        """Allow exactly the arcs of at most ``limit`` units (the others fixed to 0)."""
        allowed = self.t <= limit
        variables = self.model.proto.variables
        for i in np.flatnonzero(allowed != self.allowed).tolist():
            variables[self.x[i].index].domain[1] = int(allowed[i])
        self.allowed = allowed

    def hint(self, path) -> None:
        self.model.clear_hints()
        on = set(path)
        for i, v in enumerate(self.x):
            self.model.add_hint(v, int(i in on))

    @staticmethod
    def sum_bound(objective_bound: float) -> int:
        """The proven bound on the (integer) sum ``sum t_a x_a``."""
        return int(math.ceil(objective_bound - 1e-6))


def _solver(request: SolveRequest, deadline: float | None, seed: int) -> cp_model.CpSolver | None:
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = seed
    # one worker: every solve here is proven by the root LP, a portfolio only runs copies of it
    params.num_workers = 1
    apply_solver_options(solver, request, ARC_PARAMETERS)
    if deadline is not None:
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        params.max_time_in_seconds = left
    return solver


def _path(solver, flow: _Flow, graph: ArcGraph) -> list:
    """The arcs of the solution, from the source (last stage) on (the ``x`` are the model's first variables)."""
    values = np.fromiter(solver.response_proto.solution, dtype=np.int64)[: len(flow.x)]
    on = np.flatnonzero(values).tolist()
    return sorted(on, key=lambda i: -int(graph.arcs[i, 3]))


def _sub_solve(flow: _Flow, limit: int, request, deadline, out: ArcSolution, kind: str, hint=None):
    """``minimise sum t_a x_a`` over the arcs of at most ``limit`` units: (status code, solver) or (None, None) past the deadline."""
    flow.cap(limit)
    flow.model.clear_hints()  # a stale hint (a path the new cap removed) costs CP-SAT seconds of repair
    if hint is not None:
        flow.hint(hint)
    solver = _solver(request, deadline, int(request.seed))
    if solver is None:
        return None, None
    code = solver.solve(flow.model)
    out.solves.append((kind, limit, solver.status_name(code), round(solver.wall_time, 3)))
    return code, solver


def solve_on_graph(graph: ArcGraph, data: SlotData, times: IntegerTimes, request: SolveRequest, deadline, hint_path,
                   t_floor: int = 0) -> ArcSolution:
    """Run the solves of the module docstring: the best path, its units and the proven bound.

    ``t_floor``: a lower bound (units) on the slowest stage of every plan, used to stop the walk.
    """
    out = ArcSolution()
    if not len(graph.arcs) or not graph.sinks:
        out.infeasible, out.proven = True, True
        return out
    m = data.microbatches
    flow = _Flow(graph, data.counts, data.num_layers, build_guard(deadline))
    t = flow.t.tolist()

    def value(p):
        ts = [t[i] for i in p]
        return max(ts) if data.objective == "bottleneck" else sum(ts) + (m - 1) * max(ts)

    def offer(p):
        if out.units is None or value(p) < out.units:
            out.path, out.units = p, value(p)

    if hint_path is not None:
        offer(hint_path)
    if data.objective == "bottleneck":
        _bisect(flow, graph, request, deadline, out, offer)
    else:
        _walk(flow, graph, request, deadline, out, offer, value, m, max(0, t_floor))
    return out


def _bisect(flow, graph, request, deadline, out, offer) -> None:
    """Bottleneck: the least arc time ``v`` with a path through arcs of at most ``v`` units, by bisection."""
    values = sorted(set(flow.t.tolist()))
    lo, hi = 0, len(values) - 1  # the answer's index is in [lo, hi] once a path at values[hi] is known
    known = out.path is not None
    if known:
        hi = values.index(max(int(flow.t[i]) for i in out.path))
    while not known or lo < hi:
        mid = hi if not known else (lo + hi) // 2
        code, solver = _sub_solve(flow, values[mid], request, deadline, out, "feasible")
        if code == cp_model.INFEASIBLE:
            if not known:
                out.infeasible = out.proven = True
                return
            lo = mid + 1
        elif code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            p = _path(solver, flow, graph)
            offer(p)
            known, hi = True, values.index(max(int(flow.t[i]) for i in p))
        else:
            break
    out.bound = float(values[lo])
    out.proven = known and lo == hi


def _walk(flow, graph, request, deadline, out, offer, value, m: int, t_floor: int) -> None:
    """Iteration: the threshold walk of the module docstring."""
    settled = []  # proven bounds of the settled intervals
    s_bound = 0  # proven: every plan under the current limit has a sum of at least this
    limit = int(flow.t.max())
    hint = out.path
    proven, remainder = False, None
    while True:
        code, solver = _sub_solve(flow, limit, request, deadline, out, "min-sum", hint)
        hint = None
        if code == cp_model.INFEASIBLE:
            if out.path is None:
                out.infeasible = out.proven = True
                return
            proven, remainder = True, float("inf")
            break
        if code is None or code not in (cp_model.OPTIMAL,):
            if code is not None and code != cp_model.MODEL_INVALID:
                s_bound = max(s_bound, flow.sum_bound(solver.best_objective_bound))
                if code == cp_model.FEASIBLE:
                    offer(_path(solver, flow, graph))
            remainder = s_bound + (m - 1) * t_floor
            break
        p = _path(solver, flow, graph)
        offer(p)
        s_bound = max(s_bound, flow.sum_bound(solver.best_objective_bound))
        top = max(int(flow.t[i]) for i in p)
        settled.append(s_bound + (m - 1) * top)
        if s_bound + (m - 1) * t_floor >= out.units:
            proven, remainder = True, s_bound + (m - 1) * t_floor
            break
        limit = top - 1
        if m > 1:  # a slowest stage of T costs at least s_bound + (m - 1) T: skip the T that cannot win
            skip = -(-(out.units - s_bound) // (m - 1)) - 1
            if skip < limit:
                settled.append(s_bound + (m - 1) * (skip + 1))
                limit = skip
    out.bound = min(settled + [remainder])
    out.proven = proven and out.path is not None


def plan_of_path(data: SlotData, graph: ArcGraph, path: list):
    """The plan of a path (its arcs run from the last stage to the first)."""
    P = len(path)
    J = data.slots
    starts, layout, configs = [0] * J, [-1] * J, [(-1,) * len(data.groups)] * J
    for j, i in enumerate(path):
        starts[j] = int(graph.arcs[i, 2])
        configs[j] = graph.stage_configs(i)
        layout[j] = next(k for k in configs[j] if k >= 0)
    decisions = SlotDecisions(P, tuple(starts), tuple(layout), (-1,) * J, (False,) * (J - 1), tuple(configs))
    return plan_of_decisions(data, decisions)


def solve_arcflow(problem: Problem, data: SlotData, times: IntegerTimes, request: SolveRequest, deadline, hint_plan,
                  hint_source, extra: dict, resolution: float, check=None) -> Candidate | None:
    """``cpsat``'s answer on the arc-flow model (the contract of :mod:`.arcflow`), or None when
    the graph is too large (:data:`~.arcflow.MAX_ARCS`; the reason goes to ``extra["arcflow"]``)."""
    started = time.perf_counter()
    try:
        graph = build_graph(data, times, check)
    except GraphTooLarge as err:
        extra["arcflow"] = f"not used: {err}; the slot model answers"
        return None
    hint_path = path_of_plan(graph, hint_plan) if hint_plan is not None else None
    # every plan's slowest stage is at least the analytic bound, and its model units at least that less the stage error
    floor = int(math.floor(analytic_bound(problem, "bottleneck") * times.scale - times.stage_error)) - 1
    out = solve_on_graph(graph, data, times, request, deadline, hint_path, floor)
    extra["cpsat"] = {
        "model": "arc-flow",
        "states": int(len(set(graph.arcs[:, 0].tolist()) | set(graph.arcs[:, 1].tolist()))) if len(graph.arcs) else 0,
        "arcs": int(len(graph.arcs)),
        "stash_levels": graph.stash_levels,
        "solves": [list(s) for s in out.solves],
        "hint": hint_source,
        "seconds": time.perf_counter() - started,
    }
    extra["time_unit_ms"] = 1.0 / times.scale
    extra["model_error_ms"] = times.error / times.scale
    analytic = data.lower_bound()
    if out.infeasible and out.path is None:
        if hint_plan is not None:
            return Candidate("error", message="cpsat: internal error, the arc-flow model rejected a valid plan", extra=extra)
        return Candidate("infeasible", message=infeasible_message(problem), extra=extra)
    bound = conservative_bound(out.bound, times, analytic, data.num_layers)
    if out.path is None:
        if hint_plan is not None:
            message = f"cpsat: time limit reached; returning the {hint_source} plan"
            return Candidate("feasible", hint_plan, bound, message, extra, timed_out=True)
        return Candidate("error", message="cpsat: time limit reached before any plan was found", extra=extra,
                         timed_out=True)
    plan = plan_of_path(data, graph, out.path)
    value = evaluate(problem, plan, data.objective).value
    if hint_plan is not None:
        hinted = evaluate(problem, hint_plan, data.objective).value
        if hinted < value:
            plan, value = hint_plan, hinted
    status: Status = "optimal" if out.proven else "feasible"
    message = "" if out.proven else "cpsat: time limit reached before optimality was proven"
    if status == "optimal" and value - bound > resolution * value:
        status = "feasible"
        message = (
            f"cpsat: the integer time unit ({1 / times.scale:.3g} ms) cannot prove optimality to "
            f"{resolution:g}; the gap is the proven one (use dp for an exact answer)"
        )
    return Candidate(status, plan, bound, message, extra, timed_out=not out.proven)
