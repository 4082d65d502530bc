"""The exact integer model of the interleaved space, for one group count P, and its two builders.

The space is :mod:`.space`'s. For a fixed P (group size
d = N / P, K = P·v chunks) the formulation is one list of linear
constraints (:func:`formulation`), handed to CP-SAT (:func:`build_cpsat`,
times in integer units) or PuLP (:func:`build_pulp`, times in ms), so both
methods solve the same model:

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.formulation``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...plan import Plan
from ...problem import LayerCost, Layout, Problem
from .space import group_configs, group_meshes, held_states, interleaved_plan, send_ms

__all__ = [
    "GroupData",
    "Spec",
    "formulation",
    "build_cpsat",
    "build_pulp",
    "plan_of_values",
    "values_of_plan",
    "complete_values",
    "group_exclusion",
    "MemoryUnits",
]


@dataclass(frozen=True)
class GroupData:
    """The constants of the model for one group count P."""

    problem: Problem
    objective: str
    groups: int  # P
    configs: tuple[Layout, ...]  # the configs of size d, config order
    meshes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, problem: Problem, objective: str, groups: int) -> "GroupData":
        d = problem.num_devices // groups
        return cls(problem, objective, groups, tuple(group_configs(problem, d)), tuple(group_meshes(problem, d)))

    @property
    def chunks(self) -> int:
        return self.groups * self.problem.training.virtual_stages

    def chunk_range(self, i: int) -> range:
        """The chunks layer i can lie in when every chunk keeps at least one layer."""
        L, K = self.problem.num_layers, self.chunks
        return range(max(0, K - L + i), min(i, K - 1) + 1)

    def entries(self, i: int) -> list[tuple[int, LayerCost]]:
        """``(k, cost entry)`` for the configs k layer i has."""
        costs = self.problem.layers[i].costs
        return [(k, costs[lay]) for k, lay in enumerate(self.configs) if lay in costs]

    def time_lower_bound(self) -> float:
        """A lower bound (ms) of the objective over the space for this P."""
        p = self.problem
        fastest = [min((c.fwd_ms + c.bwd_ms for _, c in self.entries(i)), default=0.0) for i in range(p.num_layers)]
        busiest = max(sum(fastest) / self.groups, max(fastest, default=0.0))
        if self.objective == "bottleneck":
            return busiest
        v, m = p.training.virtual_stages, p.microbatches
        return sum(fastest) / v + (m - 1 / v) * busiest

    def time_upper_bound(self) -> float:
        """No group of any plan of the space is slower (ms): every layer's slowest entry plus every send."""
        p = self.problem
        slowest = sum(max((c.fwd_ms + c.bwd_ms for _, c in self.entries(i)), default=0.0) for i in range(p.num_layers))
        sends = sum(max(send_ms(p, i, self.groups, g) for g in range(self.groups)) for i in range(p.num_layers - 1))
        return slowest + 2 * sends


@dataclass
class Spec:
    """A linear model: variables ``name -> (kind, lb, ub)`` (kind bin / int / real), constraints
    ``(terms, sense, rhs)`` with sense ``<=`` / ``==``, and the objective's terms."""

    variables: dict = field(default_factory=dict)
    constraints: list = field(default_factory=list)
    objective: dict = field(default_factory=dict)

    def var(self, name, kind: str = "bin", lb=0, ub=1):
        self.variables[name] = (kind, lb, ub)
        return name

    def add(self, terms: dict, sense: str, rhs) -> None:
        terms = {k: v for k, v in terms.items() if v}
        self.constraints.append((terms, sense, rhs))


def _add_terms(target: dict, terms: dict, factor=1) -> None:
    for k, v in terms.items():
        target[k] = target.get(k, 0) + factor * v


def _y(data: GroupData, i: int, k: int) -> tuple[dict, int]:
    """``y[i, k]`` as terms (constants 0 / 1 at the ends of k's range, and where forced)."""
    K, L = data.chunks, data.problem.num_layers
    if k <= 0 or k <= K - L + i:
        return {}, 1
    if k >= K or k > i:
        return {}, 0
    return {("y", i, k): 1}, 0


def _x(data: GroupData, i: int, c: int) -> tuple[dict, int]:
    """``x[i, c] = y[i, c] - y[i, c + 1]`` (layer i in chunk c) as terms and a constant."""
    (t1, c1), (t2, c2) = _y(data, i, c), _y(data, i, c + 1)
    terms = dict(t1)
    _add_terms(terms, t2, -1)
    return terms, c1 - c2


@dataclass(frozen=True)
class MemoryUnits:
    """How the model states bytes: exactly (``grid`` None: integers, CP-SAT) or as shares of the GPU's memory
    on a dyadic grid (the MILP).

    On the grid a load (weights, activations) is rounded down and a saving (tied bytes) up, so the model
    never states more memory than a plan needs: it cuts no valid plan, and a plan it lets over the limit
    by the rounding (at most one grid step per term) is cut off and the model solved again
    (:func:`group_exclusion`). Grid values are exact in binary floating point, so the backends' sums and
    tolerances do not blur them; raw bytes (up to 2^50) next to 0/1 decisions, or shares down to 1e-9,
    left HiGHS without presolve certifying wrong optima and wrong infeasibility on these models.
    """

    capacity: int
    grid_bits: int | None = None  # the grid step is 2^-grid_bits of the GPU's memory

    def load(self, nbytes: int) -> float:
        if self.grid_bits is None:
            return nbytes
        return ((nbytes << self.grid_bits) // self.capacity) / 2**self.grid_bits  # exact integer floor

    def save(self, nbytes: int) -> float:
        if self.grid_bits is None:
            return nbytes
        return -((-nbytes << self.grid_bits) // self.capacity) / 2**self.grid_bits  # exact integer ceiling

    @property
    def limit(self) -> float:
        return self.capacity if self.grid_bits is None else 1.0


def formulation(data: GroupData, time_coefficient: Callable[[float], float], time_ub, check=None,
                memory: MemoryUnits | None = None) -> Spec:
    """The model of the module docstring; ``time_coefficient`` maps a time in ms to the model's number
    (CP-SAT: rounded integer units, capped; PuLP: ms, capped), ``time_ub`` bounds every T_g and T;
    ``check()`` is called in the long loops (it may raise to stop the build at a deadline); ``memory``
    states the bytes (default: exact integers, as CP-SAT needs)."""
    check = check or (lambda: None)
    p, P, K = data.problem, data.groups, data.chunks
    L, v, m = p.num_layers, p.training.virtual_stages, p.microbatches
    memory = memory or MemoryUnits(p.cluster.gpu_memory_bytes)
    spec = Spec()

    def y(i: int, k: int):
        return _y(data, i, k)

    for i in range(L):
        for k in range(1, K):
            if y(i, k)[0]:
                spec.var(("y", i, k))

    def leq(a, b) -> None:  # a <= b for two y's
        (ta, ca), (tb, cb) = a, b
        terms = dict(ta)
        _add_terms(terms, tb, -1)
        if terms:
            spec.add(terms, "<=", cb - ca)

    for i in range(L):
        for k in range(1, K):
            if i + 1 < L:
                leq(y(i, k), y(i + 1, k))  # chunks in layer order
                leq(y(i + 1, k + 1), y(i, k))  # at most one chunk further per layer
            leq(y(i, k + 1), y(i, k))

    def x(i: int, c: int):
        return _x(data, i, c)

    for g in range(P):
        spec.add({spec.var(("u", g, mu)): 1 for mu in range(len(data.meshes))}, "==", 1)
    mesh_index = {mu: j for j, mu in enumerate(data.meshes)}
    for i in range(L):
        check()
        for c in data.chunk_range(i):
            zs = {spec.var(("z", i, c, k)): 1 for k, _ in data.entries(i)}
            xt, xc = x(i, c)
            terms: dict = dict(zs)
            _add_terms(terms, xt, -1)
            spec.add(terms, "==", xc)
            for mu, j in mesh_index.items():
                terms = {("z", i, c, k): 1 for k, _ in data.entries(i) if data.configs[k].mesh == mu}
                if terms:
                    terms[("u", c % P, j)] = -1
                    spec.add(terms, "<=", 0)
    variants = p.version >= 2 and len(data.configs) > len(data.meshes)
    if variants:  # one config per segment: consecutive layers of one module in one chunk agree
        for i in range(L - 1):
            if p.layers[i].module != p.layers[i + 1].module:
                continue
            nxt = dict(data.entries(i + 1))
            for c in set(data.chunk_range(i)) & set(data.chunk_range(i + 1)):
                xt, xc = x(i + 1, c)
                for k, _ in data.entries(i):
                    terms = {("z", i, c, k): 1}
                    _add_terms(terms, xt, 1)
                    if k in nxt:
                        terms[("z", i + 1, c, k)] = -1
                    spec.add(terms, "<=", 1 - xc)

    # sends X_c (as terms over y) and group times
    sends = []
    for c in range(K - 1):
        check()
        terms = {}
        const = 0.0
        for i in range(L - 1):
            coef = time_coefficient(send_ms(p, i, P, c % P))
            if not coef:
                continue
            (t1, c1), (t0, c0) = y(i + 1, c + 1), y(i, c + 1)
            _add_terms(terms, t1, coef)
            _add_terms(terms, t0, -coef)
            const += coef * (c1 - c0)
        sends.append((terms, const))
    spec.var("T", "real", 0, time_ub)
    for g in range(P):
        Tg = spec.var(("T", g), "real", 0, time_ub)
        terms = {Tg: -1}
        const = 0.0
        for c in range(g, K, P):
            check()
            for i in range(L):
                if c in data.chunk_range(i):
                    for k, e in data.entries(i):
                        _add_terms(terms, {("z", i, c, k): time_coefficient(e.fwd_ms + e.bwd_ms)})
            for j in (c, c - 1):
                if 0 <= j < K - 1:
                    _add_terms(terms, sends[j][0])
                    const += sends[j][1]
        spec.add(terms, "==", -const)
        spec.add({Tg: 1, "T": -1}, "<=", 0)

    # tied weights (format v3): tz[n, c, k] = 1 when chunk c holds both layers of tie n, the later in config k
    tied: dict = {}  # chunk c -> {("tz", n, c, k): its tied bytes}
    for n, (tj, tk) in enumerate(p.ties):
        saves = {k: memory.save(e.tied_weight_bytes) for k, e in data.entries(tk) if e.tied_weight_bytes}
        for c in set(data.chunk_range(tj)) & set(data.chunk_range(tk)) if saves else ():
            xt, xc = x(tj, c)
            both = {spec.var(("tz", n, c, k)): 1 for k in saves}
            for k in saves:
                spec.add({("tz", n, c, k): 1, ("z", tk, c, k): -1}, "<=", 0)
            terms = dict(both)
            _add_terms(terms, xt, -1)
            spec.add(terms, "<=", xc)
            tied.setdefault(c, {}).update({("tz", n, c, k): v for k, v in saves.items()})

    # memory per group and op-order state
    for c in range(K):
        acts = {("z", i, c, k): memory.load(e.act_bytes)
                for i in range(L) if c in data.chunk_range(i) for k, e in data.entries(i)}
        top = memory.load(sum(max((e.act_bytes for _, e in data.entries(i)), default=0) for i in range(L)))
        A = spec.var(("A", c), "int", 0, top)
        acts[A] = -1
        spec.add(acts, "==", 0)
    for g in range(P):
        weights = {
            ("z", i, c, k): memory.load(e.weight_bytes)
            for c in range(g, K, P)
            for i in range(L)
            if c in data.chunk_range(i)
            for k, e in data.entries(i)
        }
        for c in range(g, K, P):
            _add_terms(weights, tied.get(c, {}), -1)
        top = memory.load(sum(max((e.weight_bytes for _, e in data.entries(i)), default=0) for i in range(L)))
        W = spec.var(("W", g), "int", 0, top)
        weights[W] = -1
        spec.add(weights, "==", 0)
        for state in held_states(P, m, v, g):
            terms = {W: 1}
            for j, n in enumerate(state):
                _add_terms(terms, {("A", g + j * P): n})
            spec.add(terms, "<=", memory.limit)

    if data.objective == "bottleneck":
        spec.objective = {"T": 1}
    else:
        spec.objective = {("T", g): 1 for g in range(P)}
        spec.objective["T"] = m * v - 1
    return spec


def build_cpsat(spec: Spec, check=None):
    """The spec as a CP-SAT model (every coefficient and bound must be an integer); returns (model, vars)."""
    check = check or (lambda: None)
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    var = {}
    for name, (kind, lb, ub) in spec.variables.items():
        label = "_".join(map(str, name)) if isinstance(name, tuple) else str(name)
        var[name] = model.new_bool_var(label) if kind == "bin" else model.new_int_var(int(lb), int(ub), label)
    for j, (terms, sense, rhs) in enumerate(spec.constraints):
        if j % 1024 == 0:
            check()
        if not terms:  # a constant: keep the model infeasible when it is false
            if not (0 <= rhs if sense == "<=" else rhs == 0):
                model.add_bool_or([])
            continue
        expr = sum(int(coef) * var[k] for k, coef in terms.items())
        model.add(expr <= int(rhs) if sense == "<=" else expr == int(rhs))
    model.minimize(sum(int(coef) * var[k] for k, coef in spec.objective.items()))
    return model, var


def build_pulp(spec: Spec, check=None, name: str = "interleaved"):
    """The spec as a PuLP problem (times as continuous variables); returns (problem, vars)."""
    check = check or (lambda: None)
    import pulp

    lp = pulp.LpProblem(name, pulp.LpMinimize)
    var = {}
    for n, (kind, lb, ub) in spec.variables.items():
        label = "_".join(map(str, n)) if isinstance(n, tuple) else str(n)
        cat = {"bin": pulp.LpBinary, "int": pulp.LpContinuous, "real": pulp.LpContinuous}[kind]
        # an "int" (a memory sum, defined by its equality row) is continuous here, without the upper bound
        # CP-SAT's domain needs: a start's value may exceed a bound in shares by a rounding
        var[n] = pulp.LpVariable(label, lowBound=lb, upBound=None if kind == "int" else ub, cat=cat)
    for j, (terms, sense, rhs) in enumerate(spec.constraints):
        if j % 1024 == 0:
            check()
        if not terms:  # a constant: keep the model infeasible when it is false
            if not (0 <= rhs if sense == "<=" else rhs == 0):
                lp += var["T"] <= -1, f"c{j}"
            continue
        expr = pulp.lpSum(coef * var[k] for k, coef in terms.items())
        lp += (expr <= rhs if sense == "<=" else expr == rhs), f"c{j}"
    lp += pulp.lpSum(coef * var[k] for k, coef in spec.objective.items())
    return lp, var


def group_exclusion(data: GroupData, plan: Plan, group: int, value: Callable[[object], float]) -> tuple[dict, float]:
    """A cut ``(terms, rhs)``, read ``terms <= rhs``, that no plan of the model passes whose device group
    ``group`` holds the same chunks (the same layers, each in the same config) as ``plan`` does.

    Group g's memory (rule 6) depends only on its chunks' layers and configs (P, m and v fixed for the
    model): when ``plan`` breaks rule 6 on g, every such plan does, and no valid plan is cut. The
    literals: chunk c holds exactly its layers (``x`` of its first and last layer 1, of their neighbours 0)
    and each layer its config (``z``, as ``value`` reads the solution); the cut says not all hold.
    """
    L, P = data.problem.num_layers, data.groups
    terms: dict = {}
    rhs = -1.0
    for c in range(group, data.chunks, P):
        stage = plan.stages[c]
        a, b = stage.first_layer, stage.last_layer
        literals = [(_x(data, a, c), 1), (_x(data, b, c), 1)]
        if a > 0:
            literals.append((_x(data, a - 1, c), -1))
        if b < L - 1:
            literals.append((_x(data, b + 1, c), -1))
        for (lit_terms, const), sign in literals:  # sign -1: the literal is 1 - x
            _add_terms(terms, lit_terms, sign)
            rhs += 1 - (const if sign == 1 else 1 - const)
        for i in range(a, b + 1):
            k = max((k for k, _ in data.entries(i)), key=lambda k: value(("z", i, c, k)))
            _add_terms(terms, {("z", i, c, k): 1})
            rhs += 1
    return {k: v for k, v in terms.items() if v}, rhs


def plan_of_values(data: GroupData, value: Callable[[object], float]) -> Plan:
    """The plan of a solution (``value(name)`` reads a variable): chunk bounds from ``y``, each
    segment's config from the ``z`` of its first layer."""
    p, K, L = data.problem, data.chunks, data.problem.num_layers
    chunk = []
    for i in range(L):
        k_forced = max(0, K - L + i)
        chunk.append(k_forced + sum(round(value(("y", i, k))) for k in range(k_forced + 1, min(i, K - 1) + 1)))
    bounds = [0] + [i for i in range(1, L) if chunk[i] != chunk[i - 1]] + [L]
    configs = []
    for c in range(K):
        chosen = []
        for a, _ in p.segments(bounds[c], bounds[c + 1] - 1):
            k = max((k for k, _ in data.entries(a)), key=lambda k: value(("z", a, c, k)))
            chosen.append(data.configs[k])
        configs.append(chosen)
    return interleaved_plan(p, data.groups, bounds, configs)


def values_of_plan(data: GroupData, plan: Plan) -> dict | None:
    """The 0/1 decisions of a plan of the space (for a hint), or None when it is not in the space."""
    p, P, K, L = data.problem, data.groups, data.chunks, data.problem.num_layers
    if len(plan.stages) != K:
        return None
    chunk_of = {}
    for c, s in enumerate(plan.stages):
        for i in s.layers:
            chunk_of[i] = c
    values: dict = {}
    for i in range(L):
        for k in range(1, K):
            values[("y", i, k)] = int(chunk_of[i] >= k)
    mesh_of: dict = {}
    for c, s in enumerate(plan.stages):
        for (a, b), lay in s.segment_configs(p):
            if lay not in data.configs:
                return None
            if mesh_of.setdefault(c % P, lay.mesh) != lay.mesh:
                return None
            k = data.configs.index(lay)
            for i in range(a, b + 1):
                for kk, _ in data.entries(i):
                    values[("z", i, c, kk)] = int(kk == k)
    for g in range(P):
        for j, mu in enumerate(data.meshes):
            values[("u", g, j)] = int(mesh_of.get(g) == mu)
    for n, (tj, tk) in enumerate(p.ties):
        c = chunk_of[tk]
        if chunk_of[tj] == c:
            for kk, _ in data.entries(tk):
                if values.get(("z", tk, c, kk)):
                    values[("tz", n, c, kk)] = 1
    return values


def complete_values(spec: Spec, values: dict) -> dict:
    """``values`` (the 0/1 decisions of a plan) extended to the derived variables (A, T_g, T) by
    solving every equality with one unknown left, then T = max T_g."""
    values = dict(values)
    for name in spec.variables:
        if name[0] in ("y", "z", "u", "tz") and name not in values:
            values[name] = 0
    changed = True
    while changed:
        changed = False
        for terms, sense, rhs in spec.constraints:
            unknown = [k for k in terms if k not in values]
            if sense == "==" and len(unknown) == 1:
                k = unknown[0]
                rest = sum(c * values[j] for j, c in terms.items() if j != k)
                values[k] = (rhs - rest) / terms[k]
                changed = True
    values["T"] = max((val for k, val in values.items() if isinstance(k, tuple) and k[0] == "T"), default=0)
    return values
