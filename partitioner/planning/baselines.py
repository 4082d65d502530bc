"""The baselines ``plan`` compares with: Megatron-LM's uniform pipeline and FSDP.

* ``megatron-uniform`` (:func:`megatron_baseline`): Megatron-LM / torchtitan's
  default pipeline -- vision and projector on stage 0, decoder layers split
  evenly, one layout (dp, tp, cp, ep, etp) and one knob setting (recompute,
  ZeRO-0/1) for every stage, chosen the way Megatron-Core's MoE guide
  advises [MCoreMoE]: EP x TP inside a node (NVLink), CP only where the
  problem offers it (long sequences), ETP 1 or TP;
* ``fsdp`` (:func:`fsdp_baseline`): no pipeline -- one stage of all N GPUs,
  dp x cp = N, tp = 1, ZeRO-3 (FSDP full shard) with the better recompute
  choice, what OpenVLA and pi0 were trained with; on a MoE model with
  torchtitan's expert parallelism (FSDP2 + EP, ETP 1 [Titan]).

The detail, and the references cited above: ``docs/internals/planning.md``, section ``partitioner.planning.baselines``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from ..core.deadline import Deadline
from ..plan import Evaluation, Plan, PlanError, Stage, evaluate, objective_value
from ..plan.cuts import layer_roles, uniform_cuts
from ..plan.schedules import peak_activation_bytes, stash
from ..problem import LayerCost, Layout, Problem

__all__ = ["BASELINE_METHOD", "FSDP_METHOD", "BASELINES", "layer_roles", "megatron_baseline", "megatron_baselines",
           "StageSums", "fsdp_baseline", "offered_axes", "segment_config", "BaselineLayout",
           "MIN_INTERLEAVED_GROUPS"]

BASELINE_METHOD = "megatron-uniform"
FSDP_METHOD = "fsdp"
BASELINES = (BASELINE_METHOD, FSDP_METHOD)
# References of the comments below (the module docstring's detail is in docs/internals/planning.md):
# .. [MCoreVPP] NVIDIA megatron-core 0.16.1, ``megatron/core/parallel_state.py``,
#    ``initialize_model_parallel``: a virtual pipeline size with
#    ``pipeline_model_parallel_size`` 1 raises "pipeline-model-parallel size
#    should be greater than 1 with interleaved schedule".

# The fewest device groups P (pipeline ranks) an interleaved plan of ``plan`` has: Megatron-Core refuses virtual
# stages on one pipeline rank [MCoreVPP]_, and on one group the chunks run one after the other, no pipeline at all.
MIN_INTERLEAVED_GROUPS = 2


def megatron_baseline(problem: Problem, objective: str | None = None,
                      variants: Sequence[str] | None = None, sums: "StageSums | None" = None,
                      deadline: Deadline | None = None, record: Deadline | None = None) -> tuple[Plan, Evaluation] | None:
    """The best plan of the shape Megatron-LM / torchtitan give by default.

    The vision encoder and projector (and the embedding) sit on stage 0, the
    loss or action head on the last stage, the decoder layers are split
    evenly over P stages (Megatron's ``num_layers / pp``; when P does not
    divide them, the last stages take one more), and every stage has the
    same size, the same layout (dp, tp, cp, ep, etp) and the same memory
    knobs, devices in order. The layouts are those Megatron-Core's MoE
    guide admits [MCoreMoE]_: tp a power of two within a node; (cp, ep,
    etp) among those the problem's keys offer (:func:`offered_axes`), etp
    1 or tp, ep x etp dividing the stage's devices and ep x tp within a
    node; dp what the devices leave, d / (tp x cp). A segment whose layers
    lack the layout's ep or cp runs without it (:func:`segment_config`).
    The knobs are those Megatron offers -- activation recompute
    and the distributed optimizer (ZeRO-1) --: ``variants`` (default: every
    variant of the problem without ZeRO-3, and the plain key). Among the
    stage counts, layouts and knobs that fit in memory, the one with the
    best objective is returned (ties to the earlier in the order P, tp,
    (cp, ep, etp), variant); None when none fits.

    Under ``training.schedule: interleaved`` (v virtual stages) the split is
    Megatron-LM's with virtual stages: P groups (P >= 2, m a multiple of P),
    the same rule cutting the layers into P·v chunks, chunk c on group c mod P.
    ``sums`` (:class:`StageSums`) keeps the stage sums of :func:`value_floor`;
    ``deadline`` and ``record``: :func:`megatron_baselines`.

    References
    ----------
    .. [MCoreMoE] NVIDIA Megatron-LM, ``megatron/core/transformer/moe/README.md``,
       "MoE Parallel Folding" and the parallel-mapping guidance (EP x TP within
       the NVLink domain, CP for long sequences); Liu et al., "MoE Parallel
       Folding", arXiv:2504.14960, 2025.
    """
    found = megatron_baselines(problem, objective, variants, keep=1, sums=sums, deadline=deadline, record=record)
    return found[0] if found else None


def megatron_baselines(problem: Problem, objective: str | None = None, variants: Sequence[str] | None = None,
                       keep: int = 1, sums: StageSums | None = None, deadline: Deadline | None = None,
                       record: Deadline | None = None) -> list[tuple[Plan, Evaluation]]:
    """The ``keep`` best plans of :func:`megatron_baseline`'s shape (best objective first).

    The candidates are evaluated in the order of a lower bound on their value
    (:func:`value_floor`: the schedule's objective of the stages' compute
    alone, without reshards and sends); once ``keep`` plans are found, a
    candidate whose bound exceeds the ``keep``-th best value cannot enter
    and is not evaluated. The result is that of evaluating every candidate
    (ties to the earlier candidate in the enumeration order). ``sums`` keeps
    the floors' stage sums for calls on the problem under other schedules.

    ``deadline`` is checked before each candidate's floor and each
    evaluation: once it has passed, the search stops and returns the best
    plans evaluated so far (none, if it stopped among the floors), and
    ``record`` (default ``deadline``) names the cut (:meth:`Deadline.cut`:
    the candidates left, at this m and schedule).
    """
    objective = objective or problem.objective
    candidates = list(_megatron_candidates(problem, variants))
    floors: list[tuple[float, int]] = []
    for i, c in enumerate(candidates):
        if deadline is not None and deadline.expired():
            _record_cut(record or deadline, problem, len(candidates), "floored", i)
            return []
        f = _candidate_floor(problem, c, objective, sums)
        if f is not None:
            floors.append((f, i))
    floors.sort()
    found: list[tuple[float, int, Plan, Evaluation]] = []
    for n, (floor, i) in enumerate(floors):
        if len(found) >= keep and floor * (1 - _FLOOR_MARGIN) > found[keep - 1][0]:
            break  # this candidate and every later one is slower than the keep best found
        if deadline is not None and deadline.expired():
            _record_cut(record or deadline, problem, len(floors), "evaluated", n)
            break
        # tied weights (v3) count once on a stage holding both layers: left to evaluate
        fits = sums is None or bool(problem.ties) or _fits_memory(problem, candidates[i], sums)
        ev = _try(problem, candidates[i].plan(problem), objective) if fits else None  # evaluate would refuse it (rule 6)
        if ev is not None:
            found.append((ev[1].value, i, *ev))
            found.sort(key=lambda f: f[:2])
    return [(plan, ev) for _, _, plan, ev in found[:keep]]


# relative margin on value_floor against rounding: its sums and evaluate's may add in other orders
_FLOOR_MARGIN = 1e-9


def _record_cut(record: Deadline, problem: Problem, total: int, step: str, done: int) -> None:
    """Name on ``record`` the baseline search a deadline stopped: ``done`` of ``total`` candidates ``step``."""
    t = problem.training
    record.cut(f"baselines: {BASELINE_METHOD} search stopped",
               f"m={t.microbatches} {t.schedule}: {done} of {total} layouts {step}")


class _Candidate(NamedTuple):
    """A plan of :func:`megatron_baseline`'s shape before it is built: chunk c is layers ``cuts[c]`` on group c mod P."""

    groups: int  # P
    devices: int  # d = N / P per group
    tp: int
    variant: str
    cuts: list[tuple[int, int]]
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @property
    def layout(self) -> Layout:
        """The model-wide config (each segment takes :func:`segment_config` of it)."""
        return Layout(self.devices // (self.tp * self.cp), self.tp, self.variant, self.cp, self.ep, self.etp)

    def plan(self, problem: Problem) -> Plan:
        P, d, layout = self.groups, self.devices, self.layout
        ids = [tuple(range(g * d, (g + 1) * d)) for g in range(P)]
        return Plan(tuple(Stage.from_configs(a, b, d, [segment_config(problem, first, last, layout)
                                                       for first, last in problem.segments(a, b)], ids[c % P])
                          for c, (a, b) in enumerate(self.cuts)))


def offered_axes(problem: Problem) -> list[tuple[int, int, int]]:
    """Every (cp, ep, etp) of a cost key of the problem, (1, 1, 1) first, then ascending.

    A format v1/v2 problem offers only (1, 1, 1).
    """
    found, seen = {(1, 1, 1)}, set()
    for layer in problem.layers:
        if id(layer.costs) not in seen:  # layers sharing a table share its keys
            seen.add(id(layer.costs))
            found.update((c.cp, c.ep, c.etp) for c in layer.costs)
    return sorted(found)


def _config_options(config: Layout) -> list[Layout]:
    """``config``, then without its experts (ep = etp = 1), then with cp folded into dp, then both."""
    no_ep = replace(config, ep=1, etp=1)
    options = [config, no_ep]
    if config.cp > 1:
        options += [replace(c, dp=c.dp * c.cp, cp=1) for c in (config, no_ep)]
    return list(dict.fromkeys(options))


def segment_config(problem: Problem, first: int, last: int, config: Layout,
                   column: Callable[[Layout], Sequence[LayerCost | None]] | None = None) -> Layout:
    """The config the segment of layers ``first..last`` takes under the model-wide ``config``.

    ``config`` when every layer of the segment has it; else the first of
    ``config`` without expert parallelism (a segment without experts: EP
    applies to MoE layers only), ``config`` with its cp ranks as data
    parallel ranks (a module without context parallelism, as Megatron's
    LLaVA applies CP to the language model only), and both, that every
    layer has; else ``config`` (evaluate refuses the plan: rule 5). With
    cp = ep = 1 this is always ``config``. ``column(c)``, when given, is
    every layer's entry in ``c``.
    """
    options = _config_options(config)
    if len(options) == 1:
        return config
    for c in options:
        entries = column(c)[first: last + 1] if column is not None else \
            [layer.costs.get(c) for layer in problem.layers[first: last + 1]]
        if all(e is not None for e in entries):
            return c
    return config


def _megatron_plans(problem: Problem, variants: Sequence[str] | None = None) -> Iterator[Plan]:
    """Every plan of :func:`megatron_baseline`'s shape, in enumeration order (P, tp, (cp, ep, etp), variant)."""
    return (c.plan(problem) for c in _megatron_candidates(problem, variants))


def _megatron_axes(axes: Sequence[tuple[int, int, int]], d: int, tp: int, gpus_per_node: int) -> list[tuple[int, int, int]]:
    """The (cp, ep, etp) of ``axes`` Megatron-Core admits with tp on a stage of d GPUs [MCoreMoE]_.

    cp divides d / tp; etp is 1 or tp; ep x etp divides d (the experts fold
    onto the stage's dp x tp x cp ranks); ep x tp is at most a node (the
    guide keeps EP x TP inside the NVLink domain).

    References
    ----------
    .. [MCoreMoE] As cited in :func:`megatron_baseline`.
    """
    return [(cp, ep, etp) for cp, ep, etp in axes
            if (d // tp) % cp == 0 and etp in (1, tp) and d % (ep * etp) == 0 and (ep == 1 or ep * tp <= gpus_per_node)]


def _megatron_candidates(problem: Problem, variants: Sequence[str] | None = None) -> Iterator[_Candidate]:
    """:func:`_megatron_plans` as candidates, in the same order."""
    if variants is None:
        variants = [""] + [v for v in problem.variants if not v.startswith("zero3")]
    roles = layer_roles(problem)
    N = problem.num_devices
    allowed = problem.cluster.allowed_sizes()
    axes = offered_axes(problem)
    n_dec = sum(r == "decoder" for r in roles) or problem.num_layers
    v = problem.training.virtual_stages if problem.training.schedule == "interleaved" else 1
    for P in range(problem.stages.min, problem.stages.max + 1):
        if N % P or N // P not in allowed or P * v > n_dec or (v > 1 and (P < MIN_INTERLEAVED_GROUPS or problem.microbatches % P)):
            continue
        d = N // P
        cuts = uniform_cuts(roles, P * v)
        if cuts is None:
            continue
        tp = 1
        while tp <= min(d, problem.cluster.gpus_per_node):
            if d % tp == 0:
                for cp, ep, etp in _megatron_axes(axes, d, tp, problem.cluster.gpus_per_node):
                    for var in variants:
                        yield _Candidate(P, d, tp, var, cuts, cp, ep, etp)
            tp *= 2


def _candidate_floor(problem: Problem, candidate: _Candidate, objective: str, sums: "StageSums | None") -> float | None:
    """``value_floor(problem, candidate.plan(problem), objective, sums)``, without building the plan when ``sums`` is given."""
    if sums is None:
        return value_floor(problem, candidate.plan(problem), objective)
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
        self._options: dict[Layout, list[Layout]] = {}  # per config, _config_options
        self._missing: dict[Layout, list[int]] = {}  # per config, the layers before each without an entry in it

    def stage(self, problem: Problem, stage: Stage) -> tuple[float, float, float] | None:
        """:func:`_stage_sums` of ``stage`` in ``problem``, computed once."""
        self._keep_for(problem)
        key = (stage.first_layer, stage.last_layer, stage.layout, stage.configs)
        if key not in self._sums:
            self._sums[key] = _stage_sums(problem, stage, self._column)
        return self._sums[key]

    def uniform(self, problem: Problem, first: int, last: int, config: Layout) -> tuple[float, float, float] | None:
        """:meth:`stage` of a stage of layers ``first..last`` under the model-wide ``config``.

        Each segment takes :func:`segment_config` of ``config`` (as
        ``_Candidate.plan`` builds it); ``config`` itself in every segment
        when cp = ep = 1 (the stage without ``configs``).
        """
        self._keep_for(problem)
        key = ("uniform", first, last, config)
        if key not in self._sums:
            self._sums[key] = _pairs_sums(problem, self._pairs(problem, first, last, config), self._column)
        return self._sums[key]

    def bytes(self, problem: Problem, first: int, last: int, config: Layout) -> tuple[int, int]:
        """(sum weight_bytes, sum act_bytes) of layers ``first..last`` under the model-wide ``config``.

        Each segment in :func:`segment_config` of ``config``, where every layer has an entry.
        """
        self._keep_for(problem)
        key = (first, last, config)
        if key not in self._bytes:
            weight = act = 0
            for (a, b), lay in self._pairs(problem, first, last, config):
                for c in self._column(lay)[a: b + 1]:
                    assert c is not None, f"layer without an entry in {lay}"
                    weight += c.weight_bytes
                    act += c.act_bytes
            self._bytes[key] = (weight, act)
        return self._bytes[key]

    def _pairs(self, problem: Problem, first: int, last: int, config: Layout) -> list[tuple[tuple[int, int], Layout]]:
        """``((a, b), config)`` of every segment of layers ``first..last`` (``Stage.segment_configs`` of the plan)."""
        if (first, last) not in self._segments:
            self._segments[first, last] = problem.segments(first, last)
        return [((a, b), self._segment_config(problem, a, b, config)) for a, b in self._segments[first, last]]

    def _segment_config(self, problem: Problem, first: int, last: int, config: Layout) -> Layout:
        """:func:`segment_config` of the segment ``first..last`` under ``config``: the same answer, from each
        config's options and each option's count of layers without an entry (prefix sums), kept per problem
        (the baselines ask it of every stage's segments, for every stage count, cut and config)."""
        options = self._options.get(config)
        if options is None:
            options = self._options[config] = _config_options(config)
        if len(options) == 1:
            return config
        for c in options:
            missing = self._missing.get(c)
            if missing is None:
                missing = self._missing[c] = [0, *itertools.accumulate(e is None for e in self._column(c))]
            if missing[last + 1] == missing[first]:
                return c
        return config

    def _keep_for(self, problem: Problem) -> None:
        """Start afresh unless ``problem`` has the layers and version kept for."""
        if problem.layers is not self._layers or problem.version != self._version:
            self._layers, self._version = problem.layers, problem.version
            self._sums, self._columns, self._segments, self._bytes = {}, {}, {}, {}
            self._options, self._missing = {}, {}

    def _column(self, config: Layout) -> list[LayerCost | None]:
        if config not in self._columns:
            by_table: dict[int, LayerCost | None] = {}  # layers sharing a table share the lookup
            self._columns[config] = [by_table[id(layer.costs)] if id(layer.costs) in by_table
                                     else by_table.setdefault(id(layer.costs), layer.costs.get(config))
                                     for layer in self._layers or ()]  # set by _keep_for
        return self._columns[config]


def fsdp_baseline(problem: Problem, objective: str | None = None, deadline: Deadline | None = None,
                  record: Deadline | None = None) -> tuple[Plan, Evaluation] | None:
    """One stage of all N GPUs, tp = 1, ZeRO-3 (FSDP full shard), the best fitting (cp, ep) and recompute choice.

    The layouts are torchtitan's FSDP2 with its context and expert
    parallelism [Titan]_: dp x cp = N with cp among those the problem's keys
    offer, ep among those offered dividing N (EP borrows ranks from the
    FSDP ones), etp = 1; each segment in :func:`segment_config` of it. On
    a problem without cp or ep keys this is dp = N alone. Ties go to the
    earlier in the order (cp, ep), variant. None when the problem has no
    ZeRO-3 variant (``variants`` restricted), dp does not divide the
    microbatch, or nothing fits. ``deadline`` is checked before each
    evaluation: once it has passed, the best found so far (``record``,
    default ``deadline``, names the cut).

    References
    ----------
    .. [Titan] pytorch/torchtitan 0.3, ``distributed/parallel_dims.py``
       (ep divides dp_shard x cp x tp: "EP borrows ranks from FSDP and TP") and
       PR #3167 (expert tensor parallelism removed, so etp = 1).
    """
    objective = objective or problem.objective
    N, L = problem.num_devices, problem.num_layers
    best: tuple[Plan, Evaluation] | None = None
    zero3 = [v for v in problem.variants if v.startswith("zero3")]
    for cp, ep, _ in (a for a in offered_axes(problem) if a[2] == 1 and N % a[0] == 0 and N % a[1] == 0):
        for v in zero3:
            if deadline is not None and deadline.expired():
                (record or deadline).cut(f"baselines: {FSDP_METHOD} search stopped", f"m={problem.microbatches}")
                return best
            config = Layout(N // cp, 1, v, cp, ep)
            stage = Stage.from_configs(0, L - 1, N, [segment_config(problem, a, b, config) for a, b in problem.segments(0, L - 1)])
            found = _try(problem, Plan((stage,)), objective)
            if found is not None and (best is None or found[1].value < best[1].value):
                best = found
    return best


@dataclass(frozen=True)
class BaselineLayout:
    """A baseline plan's model-wide layout, as the result reports it: pp x dp x tp x cp, ep x etp for the experts.

    ``pp`` is the number of device groups; the rest is the config of the
    plan's segments with the most context and then expert parallelism (a
    segment without experts or without context parallelism runs with less,
    :func:`segment_config`); ``dp`` is the stage's devices / (tp x cp).
    """

    pp: int
    dp: int
    tp: int
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @classmethod
    def of(cls, evaluation: Evaluation, virtual_stages: int = 1) -> "BaselineLayout":
        """The layout of an evaluated baseline plan (``virtual_stages`` chunks per device group)."""
        configs = [c for st in evaluation.stages for c in (st.configs or (st.layout,))]
        top = max(configs, key=lambda c: (c.cp, c.ep, c.etp))  # the first of the most parallel
        pp = max(1, len(evaluation.stages) // max(1, virtual_stages))
        return cls(pp, evaluation.stages[0].devices // (top.tp * top.cp), top.tp, top.cp, top.ep, top.etp)

    @property
    def label(self) -> str:
        """``dp 4 x tp 2 x cp 2 x ep 8`` (cp, ep and etp only when they are not 1)."""
        parts = [f"dp {self.dp}", f"tp {self.tp}"] + [f"{axis} {getattr(self, axis)}" for axis in ("cp", "ep", "etp")
                                                        if getattr(self, axis) != 1]
        return " x ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.etp,
                "label": self.label}


def _try(problem: Problem, plan: Plan, objective: str) -> tuple[Plan, Evaluation] | None:
    plan = plan.with_device_ids()
    try:
        return plan, evaluate(problem, plan, objective)
    except PlanError:
        return None
