"""The baselines ``plan`` compares with: Megatron-LM's uniform pipeline and FSDP.

* ``megatron-uniform`` (:func:`megatron_baseline`): Megatron-LM / torchtitan's
  default pipeline -- vision and projector on stage 0, decoder layers split
  evenly, one layout (dp, tp) and one knob setting (recompute, ZeRO-0/1)
  for every stage;
* ``fsdp`` (:func:`fsdp_baseline`): no pipeline -- one stage of all N GPUs,
  dp = N, ZeRO-3 (FSDP full shard) with the better recompute choice, what
  OpenVLA and pi0 were trained with.

Every baseline plan is checked by :func:`partitioner.plan.evaluate` (rules 1-6);
its value is that evaluation's.
"""
from __future__ import annotations

from typing import Callable, Iterator, NamedTuple, Sequence

from ..plan import Evaluation, Plan, PlanError, Stage, evaluate, objective_value
from ..plan.cuts import _uniform_cuts, layer_roles
from ..plan.schedules import peak_activation_bytes, stash
from ..problem import LayerCost, Layout, Problem

__all__ = ["BASELINE_METHOD", "FSDP_METHOD", "BASELINES", "layer_roles", "megatron_baseline", "megatron_baselines",
           "StageSums", "fsdp_baseline"]

BASELINE_METHOD = "megatron-uniform"
FSDP_METHOD = "fsdp"
BASELINES = (BASELINE_METHOD, FSDP_METHOD)


def megatron_baseline(problem: Problem, objective: str | None = None,
                      variants: Sequence[str] | None = None, sums: "StageSums | None" = None) -> tuple[Plan, Evaluation] | None:
    """The best plan of the shape Megatron-LM / torchtitan give by default.

    The vision encoder and projector (and the embedding) sit on stage 0, the
    loss or action head on the last stage, the decoder layers are split
    evenly over P stages (Megatron's ``num_layers / pp``; when P does not
    divide them, the last stages take one more), and every stage has the
    same size, the same layout (dp, tp) and the same memory knobs, devices
    in order. The knobs are those Megatron offers -- activation recompute
    and the distributed optimizer (ZeRO-1) --: ``variants`` (default: every
    variant of the problem without ZeRO-3, and the plain key). Among the
    stage counts, layouts and knobs that fit in memory, the one with the
    best objective is returned; None when none fits.

    Under ``training.schedule: interleaved`` (v virtual stages) the split is
    Megatron-LM's with virtual stages: P groups (P >= 2, m a multiple of P),
    the same rule cutting the layers into P·v chunks, chunk c on group c mod P.
    ``sums`` (:class:`StageSums`) keeps the stage sums of :func:`value_floor`.
    """
    found = megatron_baselines(problem, objective, variants, keep=1, sums=sums)
    return found[0] if found else None


def megatron_baselines(problem: Problem, objective: str | None = None, variants: Sequence[str] | None = None,
                       keep: int = 1, sums: StageSums | None = None) -> list[tuple[Plan, Evaluation]]:
    """The ``keep`` best plans of :func:`megatron_baseline`'s shape (best objective first).

    The candidates are evaluated in the order of a lower bound on their value
    (:func:`value_floor`: the schedule's objective of the stages' compute
    alone, without reshards and sends); once ``keep`` plans are found, a
    candidate whose bound exceeds the ``keep``-th best value cannot enter
    and is not evaluated. The result is that of evaluating every candidate
    (ties to the earlier candidate in the enumeration order). ``sums`` keeps
    the floors' stage sums for calls on the problem under other schedules.
    """
    objective = objective or problem.objective
    candidates = list(_megatron_candidates(problem, variants))
    floors = sorted((f, i) for i, f in enumerate(_candidate_floor(problem, c, objective, sums) for c in candidates)
                    if f is not None)
    found: list[tuple[float, int, Plan, Evaluation]] = []
    for floor, i in floors:
        if len(found) >= keep and floor * (1 - _FLOOR_MARGIN) > found[keep - 1][0]:
            break  # this candidate and every later one is slower than the keep best found
        fits = sums is None or _fits_memory(problem, candidates[i], sums)
        ev = _try(problem, candidates[i].plan(), objective) if fits else None  # evaluate would refuse it (rule 6)
        if ev is not None:
            found.append((ev[1].value, i, *ev))
            found.sort(key=lambda f: f[:2])
    return [(plan, ev) for _, _, plan, ev in found[:keep]]


# relative margin on value_floor against rounding: its sums and evaluate's may add in other orders
_FLOOR_MARGIN = 1e-9


class _Candidate(NamedTuple):
    """A plan of :func:`megatron_baseline`'s shape before it is built: chunk c is layers ``cuts[c]`` on group c mod P."""

    groups: int  # P
    devices: int  # d = N / P per group
    tp: int
    variant: str
    cuts: list[tuple[int, int]]

    @property
    def layout(self) -> Layout:
        return Layout(self.devices // self.tp, self.tp, self.variant)

    def plan(self) -> Plan:
        P, d = self.groups, self.devices
        ids = [tuple(range(g * d, (g + 1) * d)) for g in range(P)]
        return Plan(tuple(Stage(a, b, d, d // self.tp, self.tp, ids[c % P], variant=self.variant)
                          for c, (a, b) in enumerate(self.cuts)))


def _megatron_plans(problem: Problem, variants: Sequence[str] | None = None) -> Iterator[Plan]:
    """Every plan of :func:`megatron_baseline`'s shape, in enumeration order (P, then tp, then the variant)."""
    return (c.plan() for c in _megatron_candidates(problem, variants))


def _megatron_candidates(problem: Problem, variants: Sequence[str] | None = None) -> Iterator[_Candidate]:
    """:func:`_megatron_plans` as candidates, in the same order."""
    if variants is None:
        variants = [""] + [v for v in problem.variants if not v.startswith("zero3")]
    roles = layer_roles(problem)
    N = problem.num_devices
    allowed = problem.cluster.allowed_sizes()
    n_dec = sum(r == "decoder" for r in roles) or problem.num_layers
    v = problem.training.virtual_stages if problem.training.schedule == "interleaved" else 1
    for P in range(problem.stages.min, problem.stages.max + 1):
        if N % P or N // P not in allowed or P * v > n_dec or (v > 1 and (P < 2 or problem.microbatches % P)):
            continue
        d = N // P
        cuts = _uniform_cuts(roles, P * v)
        if cuts is None:
            continue
        tp = 1
        while tp <= min(d, problem.cluster.gpus_per_node):
            if d % tp == 0:
                for var in variants:
                    yield _Candidate(P, d, tp, var, cuts)
            tp *= 2


def _candidate_floor(problem: Problem, candidate: _Candidate, objective: str, sums: "StageSums | None") -> float | None:
    """``value_floor(problem, candidate.plan(), objective, sums)``, without building the plan when ``sums`` is given."""
    if sums is None:
        return value_floor(problem, candidate.plan(), objective)
    layout, found = candidate.layout, []
    for a, b in candidate.cuts:
        stage = sums.uniform(problem, a, b, layout)
        if stage is None:
            return None
        found.append(stage)
    return _floor(problem, found, objective)


def _fits_memory(problem: Problem, candidate: _Candidate, sums: "StageSums") -> bool:
    """Rule 6 of :func:`~partitioner.plan.evaluate` for the candidate, from its stages' byte sums (the same integers).

    False: evaluate raises a PlanError (rule 6, or an earlier rule), so :func:`_try` answers None.
    """
    t, capacity = problem.training, problem.cluster.gpu_memory_bytes
    found = [sums.bytes(problem, a, b, candidate.layout) for a, b in candidate.cuts]
    if t.schedule != "interleaved":
        return all(w + n * a <= capacity for (w, a), n in zip(found, stash(t.schedule, len(found), t.microbatches)))
    P, v = candidate.groups, t.virtual_stages
    acts = [a for _, a in found]
    return all(sum(w for w, _ in found[g::P]) + peak_activation_bytes("interleaved", g, P, t.microbatches, acts, v)
               <= capacity for g in range(P))


def value_floor(problem: Problem, plan: Plan, objective: str, sums: "StageSums | None" = None) -> float | None:
    """A lower bound on ``evaluate(problem, plan, objective).value``; None when a layer has no entry for its stage.

    Each stage (chunk) takes only its layers' compute: F = sum fwd, B = sum bwd
    and W = sum of the weight-gradient parts (what ``evaluate`` counts as W).
    ``evaluate`` adds the reshards and sends (>= 0) to F and B and nothing to W,
    and every schedule's estimate, and the bottleneck, is non-decreasing in F
    and B for fixed W (DESIGN.md, "Iteration estimates"), so the objective of
    these times is at most the plan's value. ``sums`` keeps the stage sums
    for later calls (the same numbers).
    """
    found = []
    for s in plan.stages:
        stage = _stage_sums(problem, s) if sums is None else sums.stage(problem, s)
        if stage is None:
            return None
        found.append(stage)
    return _floor(problem, found, objective)


def _floor(problem: Problem, stages: Sequence[tuple[float, float, float]], objective: str) -> float:
    """The schedule's objective of the stages' (F, B, W) compute sums."""
    fwd, times, wgrad = [], [], []
    for f, b, w in stages:
        fwd.append(f)
        times.append(f + b)
        wgrad.append(w)
    t = problem.training
    return objective_value(objective, times, t.microbatches, t.schedule, wgrad=wgrad, fwd=fwd,
                           virtual_stages=t.virtual_stages if t.schedule == "interleaved" else 1)


def _stage_sums(problem: Problem, stage: Stage,
                columns: Callable[[Layout], Sequence[LayerCost | None]] | None = None) -> tuple[float, float, float] | None:
    """(sum fwd, sum bwd, sum W) over the stage's layers in their configs, in layer order; None without an entry.

    ``columns(config)``, when given, is every layer's entry in ``config`` (None where it has none).
    """
    try:
        pairs = stage.segment_configs(problem)
    except PlanError:
        return None
    return _pairs_sums(problem, pairs, columns)


def _pairs_sums(problem: Problem, pairs: Sequence[tuple[tuple[int, int], Layout]],
                columns: Callable[[Layout], Sequence[LayerCost | None]] | None = None) -> tuple[float, float, float] | None:
    """:func:`_stage_sums` of the ``((first, last), config)`` segments of a stage."""
    f = b = w = 0.0
    for (first, last), lay in pairs:
        entries = [layer.costs.get(lay) for layer in problem.layers[first: last + 1]] if columns is None else \
            columns(lay)[first: last + 1]
        for c in entries:
            if c is None:
                return None
            f += c.fwd_ms
            b += c.bwd_ms
            w += c.split()[1]
    return f, b, w


class StageSums:
    """:func:`value_floor`'s stage sums, kept across calls on problems with the same layers.

    One problem under several schedules (``with_schedule``) has the same
    layers, format version and stage sums; given a problem with other
    layers or another version, the store starts afresh, so it never answers
    for the wrong problem.
    """

    def __init__(self) -> None:
        self._layers: tuple | None = None
        self._version = 0
        self._sums: dict[tuple, tuple[float, float, float] | None] = {}
        self._columns: dict[Layout, list[LayerCost | None]] = {}  # per config, every layer's entry
        self._segments: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
        self._bytes: dict[tuple, tuple[int, int]] = {}

    def stage(self, problem: Problem, stage: Stage) -> tuple[float, float, float] | None:
        """:func:`_stage_sums` of ``stage`` in ``problem``, computed once."""
        self._keep_for(problem)
        key = (stage.first_layer, stage.last_layer, stage.dp, stage.tp, stage.variant, stage.configs)
        if key not in self._sums:
            self._sums[key] = _stage_sums(problem, stage, self._column)
        return self._sums[key]

    def uniform(self, problem: Problem, first: int, last: int, config: Layout) -> tuple[float, float, float] | None:
        """:meth:`stage` of a stage of layers ``first..last`` with ``config`` in every segment (no ``configs``)."""
        self._keep_for(problem)
        key = (first, last, config.dp, config.tp, config.variant, None)
        if key not in self._sums:
            if (first, last) not in self._segments:
                self._segments[first, last] = problem.segments(first, last)
            pairs = [(seg, config) for seg in self._segments[first, last]]  # Stage.segment_configs without configs
            self._sums[key] = _pairs_sums(problem, pairs, self._column)
        return self._sums[key]

    def bytes(self, problem: Problem, first: int, last: int, config: Layout) -> tuple[int, int]:
        """(sum weight_bytes, sum act_bytes) of layers ``first..last`` in ``config`` (every one has an entry)."""
        self._keep_for(problem)
        key = (first, last, config.dp, config.tp, config.variant)
        if key not in self._bytes:
            weight = act = 0
            for c in self._column(config)[first: last + 1]:
                assert c is not None, f"layer without an entry in {config}"
                weight += c.weight_bytes
                act += c.act_bytes
            self._bytes[key] = (weight, act)
        return self._bytes[key]

    def _keep_for(self, problem: Problem) -> None:
        """Start afresh unless ``problem`` has the layers and version kept for."""
        if problem.layers is not self._layers or problem.version != self._version:
            self._layers, self._version = problem.layers, problem.version
            self._sums, self._columns, self._segments, self._bytes = {}, {}, {}, {}

    def _column(self, config: Layout) -> list[LayerCost | None]:
        if config not in self._columns:
            by_table: dict[int, LayerCost | None] = {}  # layers sharing a table share the lookup
            self._columns[config] = [by_table[id(layer.costs)] if id(layer.costs) in by_table
                                     else by_table.setdefault(id(layer.costs), layer.costs.get(config))
                                     for layer in self._layers or ()]  # set by _keep_for
        return self._columns[config]


def fsdp_baseline(problem: Problem, objective: str | None = None) -> tuple[Plan, Evaluation] | None:
    """One stage of all N GPUs, dp = N, tp = 1, ZeRO-3 (FSDP full shard), the better recompute choice.

    None when the problem has no ZeRO-3 variant (``variants`` restricted),
    dp = N does not divide the microbatch, or nothing fits.
    """
    objective = objective or problem.objective
    N, L = problem.num_devices, problem.num_layers
    best: tuple[Plan, Evaluation] | None = None
    for v in (v for v in problem.variants if v.startswith("zero3")):
        found = _try(problem, Plan((Stage(0, L - 1, N, N, 1, variant=v),)), objective)
        if found is not None and (best is None or found[1].value < best[1].value):
            best = found
    return best


def _try(problem: Problem, plan: Plan, objective: str) -> tuple[Plan, Evaluation] | None:
    plan = plan.with_device_ids()
    try:
        return plan, evaluate(problem, plan, objective)
    except PlanError:
        return None
