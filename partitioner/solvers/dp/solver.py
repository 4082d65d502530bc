"""``dp``: an exact dynamic program over layers, stages (counted from the end) and devices.

:class:`DPModel` holds one problem's stage tables and runs the recursion
over suffixes (first layer, stages counted from the end, devices, placement
state, incoming boundary category): a min-max recursion for the
``bottleneck`` objective, a least sum under a threshold for ``iteration``
(a branch and bound over the threshold), and the estimates of zb-h1 and
GPipe through the specs of :mod:`.options`. Its tables are :mod:`.tables`'s,
filled by :mod:`.recursion`, read back by :mod:`.walkback` and :mod:`.walks`.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.solver``.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...cluster.levels import boundary_bandwidth, consecutive_fits, consecutive_ids, levels_period
from ...cluster.placement import contiguous_node_assignment, node_assignment_ids, pack_runs
from ...core.units import format_bytes
from ...plan import Plan, PlanError, Stage, evaluate
from ...problem import Problem
from ..base import SolveRequest
from ..errors import OutOfTime as _OutOfTime
from ..errors import TooLarge as _TooLarge
from ..greedy import solve_greedy
from .placement import Automaton, automaton_bytes, build_automaton, build_offsets_automaton
from .recursion import fill as fill_tables
from .recursion import threads as recursion_threads
from .stage import StageCosts
from .stagecache import MATRIX_CACHE_BYTES, StageTables
from .tables import Layout, Tables, table_bytes, working_bytes
from .walkback import WalkBack
from .walks import ThresholdWalks, _Outcome

__all__ = ["DPModel"]

INF = math.inf
_MEMORY_BUDGET_BYTES = 3 * 2**30  # the default budget of a model used outside the dp method
_STATE_BYTES = 64  # what one (state, stage size) transition holds, at most, in the automaton and the layout


# --------------------------------------------------------------------------- the model


class DPModel(ThresholdWalks, WalkBack, StageTables):
    """Tables and recursions for one problem (see the module docstring)."""

    _free_table: tuple[Automaton, int, str, Tables] | None  # zb-h1's free table (see recursion)
    # the iteration walks with placement states (1F1B, zb-h1) first run the bound-and-prune passes without
    # transfers, :meth:`.ThresholdWalks._comm_free_pass` and ``_zb_comm_free`` (the tests turn them off to compare)
    prune_levels: bool = True
    # keep every row of the tables, not only the keys' least values (the tests compare each entry)
    keep_rows: bool = False
    _automata: dict[str, Automaton]  # mode -> its automaton, built once (see _automaton_for)

    def __init__(self, problem: Problem, layouts: tuple | None = None, stage_counts: tuple[int, int] | None = None):
        """``layouts`` restricts the layouts stages may use (and so their sizes);
        ``stage_counts`` overrides the problem's stage bounds."""
        self.problem = problem
        cluster = problem.cluster
        self.L, self.N, self.G = problem.num_layers, cluster.num_devices, cluster.gpus_per_node
        self.m = problem.microbatches
        self.layouts = problem.layouts() if layouts is None else tuple(layouts)
        usable = {lay.devices for lay in self.layouts}
        self.sizes = tuple(d for d in cluster.allowed_sizes() if d in usable)
        self.stage_counts = stage_counts or (problem.stages.min, problem.stages.max)
        self._matrices: dict[tuple[int, int], np.ndarray] = {}
        self._stacks: dict[int, np.ndarray] = {}  # stash -> compute matrices of every size (compute_stack)
        self._packed: dict = {}  # (stash, parts) -> packed stage options (option_pack)
        self.schedule = problem.training.schedule
        # the two-part estimates (zb-h1's and GPipe's iteration): stages choose among the Pareto pairs
        # of parts ``self.parts`` (:meth:`StageCosts.options`), valued by ``self.spec`` (:mod:`.options`)
        self.parts: str | None = None
        self.spec = None
        self._budget = _MEMORY_BUDGET_BYTES
        self._deadline: float | None = None  # the deadline of the optimize() under way (the automaton's build)
        self.threads: int | None = None  # threads a level's first layers are shared among (None: the default)
        self._layer_tables()
        self.K = 0  # the stage-count levels; 0 until prepare() fixes them

    # ---------------------------------------------------------------- tables
    def _layer_tables(self) -> None:
        """Per-layer arrays only (O(configs x L)); stage tables are built per (size, stash) on demand."""
        self.costs = StageCosts(self.problem, self.layouts, self.sizes)
        self.layouts_of_size = self.costs.of_size
        self.out_bytes = self.costs.out_bytes.copy()
        if self.L:
            self.out_bytes[-1] = 0.0

    def check_budget(self, need: float, what: str) -> None:
        """Refuse before allocating: ``need`` bytes against the memory budget."""
        if need > self._budget:
            raise _TooLarge(
                f"{what} would need {format_bytes(need)} (limit {format_bytes(self._budget)}, "
                "option memory_budget_gb, which raises it)"
            )

    def _levels(self, deadline: float | None = None) -> None:
        """Stage-count levels: exact counts below ``K``; level ``K`` is "K or more" when unbounded.

        The stage choice at stash s is non-increasingly permissive in s, so the
        stashes s whose stage tables equal those of stash m form an interval
        [m_eff, m]: past m_eff every stash up to m gives the same stage times,
        and stage counts from ``m_eff`` on behave alike. Single-segment
        stages compare the sets of (config, a, b) that fit (the v1 rule);
        otherwise the stage tables themselves are compared.
        """
        P_lo, P_hi = self.stage_counts
        m = self.m
        if self.costs.single_segment and not self.costs.ties:

            every = list(range(len(self.layouts)))

            def same(s: int) -> bool:
                return np.array_equal(self.costs.fit_ends(every, s), self.costs.fit_ends(every, m))

        elif self.parts:

            def same(s: int) -> bool:
                if deadline is not None and time.perf_counter() > deadline:
                    raise _OutOfTime
                return all(
                    all(np.array_equal(x, y) for x, y in zip(self.stage_options(i, s), self.stage_options(i, m)))
                    for i in range(len(self.sizes))
                )

        else:

            def same(s: int) -> bool:
                if deadline is not None and time.perf_counter() > deadline:
                    raise _OutOfTime
                return all(np.array_equal(self.compute_matrix(i, s), self.compute_matrix(i, m)) for i in range(len(self.sizes)))

        m_eff = m
        # GPipe holds m on every stage: no smaller stash is ever asked for
        for s in range(1, min(m, P_hi) + 1) if self.schedule != "gpipe" else ():
            if same(s):
                m_eff = s
                break
        # levels from `alike` on behave alike: 1F1B's stash min(m, k) stops changing at m_eff; GPipe's
        # stash is m at every level; zb-h1's iteration estimate tells every P < m apart (k = m - P + 1)
        alike = 1 if self.schedule == "gpipe" else m if self.parts == "uw" else m_eff
        unbounded = P_hi >= min(self.L, self.N)
        if unbounded and max(alike, P_lo) < P_hi:
            self.K, self.bucket = max(alike, P_lo), True
        else:
            self.K, self.bucket = P_hi, False
        # a stash of min(m, k) gives the same stage times as min(m_eff, k): use the smaller, equivalent one
        if self.schedule == "gpipe":
            self.stash_of_level = [0] + [m_eff] * self.K
        else:
            self.stash_of_level = [0] + [min(m_eff, k) for k in range(1, self.K + 1)]
        self.P_lo, self.P_hi = P_lo, P_hi

    def natural_placement(self) -> str:
        c = self.problem.cluster
        if c.levels is not None:  # consecutive stages: a boundary's bandwidth depends on its offset
            return "offsets"
        if not np.any(self.out_bytes > 0):
            return "none"
        if c.nodes == 1 or self.G == 1 or c.intra_node_GBps == c.inter_node_GBps:
            return "size"
        return "run" if c.intra_node_GBps > c.inter_node_GBps else "bins"

    def _automaton_for(self, mode: str) -> Automaton:
        c = self.problem.cluster
        link = None
        if mode == "size":
            link = c.nodes == 1  # one node: every pair of stages shares it
        found = getattr(self, "_automata", None)
        if found is None:
            found = self._automata = {}
        if mode == "offsets" and mode not in found:
            self.check_budget(automaton_bytes(mode, self.sizes, self.G, self.N),
                              f"the placement automaton (offsets) of {len(self.sizes)} stage sizes on {self.N} devices")
            max_states = max(1, int(self._budget // (_STATE_BYTES * max(len(self.sizes), 1) * max(self.L, 1))))
            found[mode] = build_offsets_automaton(
                self.sizes, self.N, lambda o, d: consecutive_fits(c, o, d),
                lambda o, d, nxt: boundary_bandwidth(c, o, d, nxt), max_states=max_states, deadline=self._deadline,
                period=levels_period(c))
        if mode not in found:
            self.check_budget(automaton_bytes(mode, self.sizes, self.G),
                              f"the placement automaton ({mode}) of {len(self.sizes)} stage sizes")
            max_states = max(1, int(self._budget // (_STATE_BYTES * max(len(self.sizes), 1))))
            deadline = None
            if c.partial:
                # partial racks (DESIGN.md "Partial racks"): sizes that are no divisibility chain
                # give bins many states on several nodes. Each state also holds at least one table value per
                # first layer and device count a stage of its size leaves (tables.Layout): no more states than
                # the budget holds that way, and the listing stops at the deadline
                per_state = 8.0 * (self.L + 1) * max(1, self.N + 1 - max(self.sizes, default=0))
                max_states = max(1, min(max_states, int(self._budget // per_state)))
                deadline = self._deadline
            found[mode] = build_automaton(mode, self.sizes, self.G, c.nodes, link, max_states=max_states,
                                          last=c.last_node_gpus, deadline=deadline)
        return found[mode]

    def _transfer_table(self, auto: Automaton) -> np.ndarray:
        """X[b, c]: transfer time of the boundary after layer b in category c (0 after the last)."""
        c = self.problem.cluster
        X = np.zeros((self.L, len(auto.categories)))
        if auto.kind == "offsets":  # categories are bandwidths (GB/s) of the levels cluster
            for k, (gbps, _) in enumerate(auto.categories):
                if math.isfinite(gbps):
                    X[:, k] = self.out_bytes / (gbps * 1e6)
            return X
        for k, (j, link) in enumerate(auto.categories):
            if link is None:
                continue
            bw = c.intra_node_GBps if link else c.inter_node_GBps
            X[:, k] = self.out_bytes / (self.sizes[j] * bw * 1e6)
        return X

    # ---------------------------------------------------------------- recursion
    def recursion(self, auto: Automaton, X: np.ndarray, mode: str, limit: float, deadline: float | None) -> Tables:
        """Fill the tables ``V[a, level, z, c, D]`` (:class:`.tables.Tables`).

        ``mode`` "minmax": value = least largest stage time, stages above
        ``limit`` pruned; "minsum": value = least sum of stage times with every
        stage at most ``limit``. With options the spec's key and cost take the
        place of the stage time; a spec whose unbounded least sum does not
        depend on its parameters (zb-h1's k) shares that table (kept in its own
        tables; every other recursion reuses one set of tables).
        """
        spec = self.spec
        if spec is not None and spec.free_shared and mode == "minsum" and not math.isfinite(limit):
            kept = getattr(self, "_free_table", None)  # (automaton, levels, parts, tables): the object itself, not its id
            if kept is None or kept[0] is not auto or kept[1:3] != (self.K, spec.parts):
                tables = Tables(self._layout(auto), self.L, self.keep_rows)
                kept = self._free_table = (auto, self.K, spec.parts, self._fill(auto, X, mode, limit, deadline, self.K, tables))
            return kept[3]
        # levels above the largest stage count the answer may have are never read (zb-h1: one k)
        top = max((lvl for lvl in range(1, self.K + 1) if self._level_ok(lvl)), default=self.K)
        pool = getattr(self, "_pool", None)
        if pool is None or pool.layout.auto is not auto:
            pool = self._pool = Tables(self._layout(auto), self.L, self.keep_rows)
        return self._fill(auto, X, mode, limit, deadline, top, pool)

    def _layout(self, auto: Automaton) -> Layout:
        found = getattr(self, "_layouts", None)
        if found is None or found[0] is not auto:
            found = self._layouts = (auto, Layout(auto, self.sizes, self.N))
        return found[1]

    def _fill(self, auto, X, mode, limit, deadline, top, tables: Tables) -> Tables:
        """Check the memory the tables need (:meth:`recursion_bytes`, with what the model's other tables hold),
        then fill them (:func:`.recursion.fill`)."""
        kept = getattr(self, "_free_table", None)
        others = [t for t in (getattr(self, "_pool", None), kept[3] if kept else None) if t is not None and t is not tables]
        need = self.recursion_bytes(auto, sum(t.held_bytes() for t in others))
        if need > self._budget:
            raise _TooLarge(
                f"the recursion tables would need {format_bytes(need)} with {len(auto.states)} placement states "
                f"and {self.K} stage-count levels (limit {format_bytes(self._budget)}); option memory_budget_gb="
                f"{math.ceil(need / 2**30 * 10) / 10:g} lets dp finish where that much memory is free"
            )
        # the stage matrices kept across recursions take what the budget leaves beside the tables
        self.stage_cache_bytes = max(MATRIX_CACHE_BYTES, int(self._budget - need))
        return fill_tables(self, tables, auto, X, mode, limit, deadline, top)

    def recursion_bytes(self, auto: Automaton, others: int = 0) -> int:
        """Memory of the general recursion: the tables of every level, ``others`` bytes held by the model's
        other tables (zb-h1 keeps its free table beside the working one), what a recursion holds beside them
        (:func:`.tables.working_bytes`) and one stash's stack of stage matrices, which the kernels read."""
        layout = self._layout(auto)
        threads = getattr(self, "threads", None) or recursion_threads()
        stack = 8 * len(self.sizes) * self.L * self.L
        return (table_bytes(layout, self.L, self.K, self.keep_rows) + others
                + working_bytes(layout, self.L, self.N, threads) + stack)

    # ---------------------------------------------------------------- answers
    def _level_ok(self, level: int) -> bool:
        """May a whole pipeline have ``level`` stages (under zb-h1: with the current coefficient k)?"""
        P_ok = (self.P_lo <= level <= self.P_hi) or (self.bucket and level == self.K)
        return P_ok and (self.spec is None or self.spec.level_ok(level, self.m))

    def place(self, stages, links, kind: str) -> Plan | None:
        cluster = self.problem.cluster
        sizes = [s[2] for s in stages]
        if cluster.levels is not None:  # consecutive devices in pipeline order, or no plan
            offsets = np.cumsum([0] + sizes[:-1])
            if not all(consecutive_fits(cluster, int(o), d) for o, d in zip(offsets, sizes)):
                return None
            return self._plan_of(stages, consecutive_ids(sizes))
        if kind in ("none", "size"):
            assignment = contiguous_node_assignment(cluster, sizes) or pack_runs(cluster, sizes, [False] * (len(sizes) - 1))
        else:
            exact = cluster.intra_node_GBps < cluster.inter_node_GBps
            assignment = pack_runs(cluster, sizes, links, exact=exact)
        if assignment is None:
            return None
        return self._plan_of(stages, node_assignment_ids(cluster, sizes, assignment))

    def _plan_of(self, stages, ids) -> Plan:
        """The plan of reconstructed ``stages`` on the device ids ``ids``."""
        # configs at each stage's true stash (1F1B, zb-h1: min(m, P - p); GPipe: m): the same stage
        # time, or the same (u, W) options, as the level's (see _levels)
        P = len(stages)
        stashes = [self.m] * P if self.schedule == "gpipe" else [min(self.m, P - p) for p in range(P)]
        return Plan(
            tuple(
                Stage.from_configs(stage[0], stage[1], stage[2], self._configs_of(stage, stashes[p]), ids[p])
                for p, stage in enumerate(stages)
            )
        )

    def _configs_of(self, stage: tuple, stash: int) -> tuple:
        """The configs of a reconstructed stage: the fastest that fit, or (zb-h1) those of its (u, W) option."""
        a, b, _, i, *option = stage
        if not option:
            return self.stage_configs(a, b, i, stash)
        assert self.parts is not None, "dp: a stage option without the estimate's parts"
        found = self.costs.option_configs(a, b, i, stash, self.parts, *option[0][:2])
        if found is None:
            raise RuntimeError(f"dp: internal error: no configs of stage {a}..{b} reach the option {option[0]}")
        return found

    # ---------------------------------------------------------------- objectives
    def prepare(self, deadline: float | None = None) -> None:
        """Check the budget for the stage tables, then fix the stage-count levels."""
        self.check_budget(8.0 * max(6, len(self.sizes)) * self.L * self.L,
                          f"the stage tables of {self.L} layers on {len(self.sizes)} stage sizes")
        if not self.K:
            self._levels(deadline)

    def optimize(self, objective: str, kind: str, deadline, budget) -> _Outcome:
        self._budget = budget
        self.costs.deadline = deadline  # the stage tables' choice of kernels (.engine) sees the time left
        self.best_known = None  # (value, plan): the best valid plan met so far, for a run cut short
        self.proven_bound = None  # a lower bound on the optimum proven so far
        parts = {("zb-h1", "iteration"): "uw", ("gpipe", "iteration"): "fb"}.get((self.schedule, objective))
        if parts != self.parts:
            self.parts, self.K = parts, 0  # the levels depend on it (see _levels)
        self.spec = None
        self._free_table = None
        self.prepare(deadline)
        self._deadline = deadline
        auto = self._automaton_for(kind)
        X = self._transfer_table(auto)
        stats = {"placement": kind, "states": len(auto.states), "categories": len(auto.categories), "levels": self.K}
        if objective == "bottleneck":
            V = self.recursion(auto, X, "minmax", self.bottleneck_ceiling(deadline), deadline)
            value, arg = self._final(V, auto)
            if arg is None:
                return _Outcome("infeasible")
            stats["recursions"] = 1
            plan, _ = self.placed_optimum(V, auto, X, "minmax", INF, value, kind)
            return _Outcome("optimal", plan, value, stats)
        if parts == "uw":
            return self._zb_iteration(auto, X, kind, deadline, stats)
        if parts == "fb":
            return self._gpipe_iteration(auto, X, kind, deadline, stats)
        return self._iteration(auto, X, kind, deadline, stats)

    def bottleneck_ceiling(self, deadline) -> float:
        """The bottleneck of a valid plan, or inf: the better of the greedy plan and the least bottleneck
        without transfers (the recursion with no placement states, pruned at the greedy plan's value:
        transfers only add) placed contiguously, both valued with the transfers. No optimal plan has a
        stage above it, so the ``minmax`` recursion may prune slower stages (and the devices the layers
        before a suffix cannot leave it, see :mod:`.recursion`); the plan is also the best known one
        if the search is cut short."""
        plans = [self._greedy_plan("bottleneck", deadline)]
        if np.any(self.out_bytes > 0):
            known = self._bottleneck_of(plans[0])
            auto = self._automaton_for("none")
            X = np.zeros((self.L, len(auto.categories)))
            V = self.recursion(auto, X, "minmax", known * (1 + 1e-9) if math.isfinite(known) else INF, deadline)
            value, arg = self._final(V, auto)
            if arg is not None:
                plans.append(self.placed_optimum(V, auto, X, "minmax", INF, value, "none")[0])
        best = INF
        for plan in plans:
            if plan is None:
                continue  # no plan: its value is inf, never below best
            value = self._bottleneck_of(plan)
            if value < best:
                best = value
                if self.best_known is None or value < self.best_known[0]:
                    self.best_known = (value, plan)
        return best * (1 + 1e-9) if math.isfinite(best) else INF  # a margin for the order the evaluation sums in

    def _bottleneck_of(self, plan: Plan | None) -> float:
        if plan is None:
            return INF
        try:
            return evaluate(self.problem, plan, "bottleneck").value
        except PlanError:
            return INF

    def _greedy_plan(self, objective: str, deadline) -> Plan | None:
        """The greedy heuristic's plan for ``objective`` within what is left of the time limit, or None;
        None too for a model restricted to fewer layouts or stage counts than the problem's (the greedy
        plan may use others: it is no plan of this model)."""
        if tuple(self.layouts) != tuple(self.problem.layouts()) or tuple(self.stage_counts) != (
                self.problem.stages.min, self.problem.stages.max):
            return None
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            return None
        return solve_greedy(self.problem, SolveRequest(objective, time_limit=left)).plan

    def layer_floor(self) -> tuple[float, float, float]:
        """(slowest layer's least time, least total work over N, sum of least layer times) over the
        configs each layer fits in alone with one stashed microbatch: a bottleneck no plan beats is
        the larger of the first two (reshards and transfers only add; a stage's time times its
        devices is at least its layers' least work)."""
        costs = self.costs
        J = len(self.layouts)
        if J == 0 or self.L == 0:
            return INF, INF, INF
        fits = self._alone_fits()
        devices = np.array([lay.devices for lay in self.layouts], dtype=float)[:, None]
        alone = np.where(fits, costs.time, INF).min(axis=0)
        work = np.where(fits, costs.time * devices, INF).min(axis=0)
        if not np.all(np.isfinite(alone)):
            return INF, INF, INF
        return float(alone.max()), float(work.sum() / self.N), float(alone.sum())

    def _alone_fits(self) -> np.ndarray:
        """``[j, i]``: layer i fits in config j with one stashed microbatch, a tied layer (format v3)
        counted without its tied bytes (it may share a stage with the layer it is tied to)."""
        costs, idx = self.costs, np.arange(self.L)
        fits = np.array([costs.fit_end(j, 1) >= idx for j in range(len(self.layouts))])
        for _, k, row in costs.ties:
            for j, lay in enumerate(self.layouts):
                c = self.problem.layers[k].cost(lay)
                if c is not None and c.weight_bytes - int(row[j]) + c.act_bytes <= costs.cap:
                    fits[j, k] = True
        return fits

    def least_u_sum(self) -> float:
        """The sum over layers of the least ``u = fwd + bwd - W`` (zb-h1's part without the weight
        gradient) over the configs each layer fits in alone with one stashed microbatch: no plan's sum
        of u is smaller (a stage's u adds its layers', reshards and transfers)."""
        J = len(self.layouts)
        if J == 0 or self.L == 0:
            return INF
        u = np.full((J, self.L), INF)
        alone = self._alone_fits()
        for j, lay in enumerate(self.layouts):
            fit = alone[j]
            for i, layer in enumerate(self.problem.layers):
                c = layer.cost(lay)
                if c is not None and fit[i]:
                    u[j, i] = (c.fwd_ms + c.bwd_ms) - c.split()[1]
        least = u.min(axis=0)
        return float(least.sum()) if np.all(np.isfinite(least)) else INF

    def analytic_bound(self, objective: str) -> float:
        """A lower bound on the objective from :meth:`layer_floor` (valid for every plan)."""
        slowest, work, total = self.layer_floor()
        worst = max(slowest, work)
        if objective == "bottleneck" or self.schedule != "1f1b":
            # every schedule's estimate is at least max t (zb-h1: sum u + (m - 1) u_q + k W_q >= t_q, k >= 1)
            return worst
        return total + (self.m - 1) * worst

    def note(self, stages, links, kind: str, value: float) -> None:
        """Remember a valid plan met on the way (returned if the time limit cuts the search short)."""
        if self.best_known is not None and self.best_known[0] <= value:
            return
        plan = self.place(stages, links, kind)
        if plan is not None:
            self.best_known = (value, plan)
