"""The validity check and the evaluation of a plan: :func:`evaluate` and what it returns.

:func:`evaluate` checks the six validity rules of ``DESIGN.md`` in order
(rule 1 in :func:`_check_cover`, 2-4 in :func:`_check_devices`, 5 in
:func:`_check_configs`, 6 on every stage's memory) and either raises
:class:`~partitioner.plan.PlanError` naming the rule and the stage, or
returns an :class:`Evaluation`: every stage's forward/backward time, sends
and reshards included (:class:`StageEvaluation`), its memory and the
objective (:func:`objective_value`). :func:`evaluate_interleaved` does the
same for the P·v chunks of ``training.schedule: interleaved``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..cluster.levels import consecutive_fits
from ..cluster.reshard import segment_reshard_ms
from ..cluster.topology import bandwidth, default_bandwidth, transfer_ms
from ..core.units import format_bytes
from ..problem import Layout, Problem, as_problem
from .records import Plan, PlanError, Stage
from .result import as_plan
from .schedules import estimate as schedule_estimate
from .schedules import peak_activation_bytes, stash

__all__ = [
    "StageEvaluation", "Evaluation", "group_times", "objective_value", "evaluate", "evaluate_interleaved", "tied_bytes",
]


@dataclass(frozen=True)
class StageEvaluation:
    index: int
    first_layer: int
    last_layer: int
    devices: int
    layout: Layout
    device_ids: tuple[int, ...]
    nodes: tuple[int, ...]
    compute_fwd_ms: float
    compute_bwd_ms: float
    send_fwd_ms: float  # x_p: activations to the next stage (0 on the last)
    send_bwd_ms: float  # x_{p-1}: gradients to the previous stage (0 on the first)
    weight_bytes: int
    act_bytes: int
    stash: int  # peak microbatches of activations held (1F1B: min(m, P - p); schedules.stash)
    configs: tuple[Layout, ...] = ()  # one per segment
    segments: tuple[tuple[int, int], ...] = ()
    reshards_ms: tuple[float, ...] = ()  # r between segments s and s+1 (format v2)
    compute_wgrad_ms: float = 0.0  # W: the weight-gradient part of compute_bwd_ms (LayerCost.split)

    @property
    def reshard_ms(self) -> float:
        """Σ r: the intra-stage reshards, paid in the forward and again in the backward."""
        return sum(self.reshards_ms)

    @property
    def fwd_ms(self) -> float:
        return self.compute_fwd_ms + self.reshard_ms + self.send_fwd_ms

    @property
    def bwd_ms(self) -> float:
        return self.compute_bwd_ms + self.reshard_ms + self.send_bwd_ms

    @property
    def wgrad_ms(self) -> float:
        """W_p: the weight-gradient part of the backward (no sends, no reshards; zb-h1 runs it apart)."""
        return self.compute_wgrad_ms

    @property
    def time_ms(self) -> float:
        return self.fwd_ms + self.bwd_ms

    @property
    def memory_bytes(self) -> int:
        return self.weight_bytes + self.stash * self.act_bytes


@dataclass(frozen=True)
class Evaluation:
    stages: tuple[StageEvaluation, ...]
    transfers_ms: tuple[float, ...]  # x_0 .. x_{P-2}
    microbatches: int
    objective: str
    version: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1  # v: under "interleaved" the stages are P·v chunks, chunk c on group c mod P
    group_memory_bytes: tuple[int, ...] = ()  # "interleaved": per device group, the v chunks' weights + stash

    @property
    def times_ms(self) -> list[float]:
        return [s.time_ms for s in self.stages]

    @property
    def group_times_ms(self) -> list[float]:
        """Per device group, its chunks' t_c summed (the stage times unless interleaved)."""
        return group_times(self.times_ms, self.virtual_stages)

    @property
    def bottleneck_ms(self) -> float:
        return max(self.group_times_ms)

    @property
    def bottleneck_stage(self) -> int:
        times = self.group_times_ms
        return times.index(max(times))

    @property
    def iteration_ms(self) -> float:
        """The schedule's iteration estimate (1F1B: Alpa's sum t_p + (m - 1) max t_p; see ``schedules``)."""
        return objective_value("iteration", self.times_ms, self.microbatches, **self._schedule_args())

    @property
    def value(self) -> float:
        return objective_value(self.objective, self.times_ms, self.microbatches, **self._schedule_args())

    def _schedule_args(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "wgrad": [s.wgrad_ms for s in self.stages],
            "fwd": [s.fwd_ms for s in self.stages],
            "virtual_stages": self.virtual_stages,
        }

    @property
    def peak_memory_bytes(self) -> list[int]:
        """Per device (group): weights plus the schedule's activation stash, as rule 6 checks it."""
        return list(self.group_memory_bytes) if self.group_memory_bytes else [s.memory_bytes for s in self.stages]


def group_times(times: Sequence[float], virtual_stages: int = 1) -> list[float]:
    """Per device group g, the sum of t_c over its chunks c = g, g + P, ... (P = len(times) / v)."""
    P = len(times) // virtual_stages
    return [sum(times[g::P]) for g in range(P)]


def objective_value(
    objective: str,
    times: Sequence[float],
    microbatches: int,
    schedule: str = "1f1b",
    *,
    wgrad: Sequence[float] | None = None,
    fwd: Sequence[float] | None = None,
    virtual_stages: int = 1,
) -> float:
    """``bottleneck`` = max t_p (per device group under ``interleaved``); ``iteration`` =
    the schedule's estimate (:func:`partitioner.plan.schedules.estimate`; 1F1B: sum t_p + (m - 1) max t_p).

    ``wgrad`` (W_p) is needed by ``zb-h1``, ``fwd`` (F_p) by ``gpipe``;
    ``times`` are per chunk and ``virtual_stages`` = v under ``interleaved``.
    """
    if objective == "bottleneck":
        return max(group_times(times, virtual_stages))
    if objective == "iteration":
        return schedule_estimate(schedule, times, microbatches, wgrad=wgrad, fwd=fwd, virtual_stages=virtual_stages)
    raise ValueError(f"unknown objective {objective!r}")


def evaluate(problem: Problem, plan: Plan, objective: str | None = None) -> Evaluation:
    """Check ``plan`` against validity rules 1-6 and compute its times and memory.

    Parameters
    ----------
    problem : Problem, dict or path
        See :func:`~partitioner.problem.as_problem`.
    plan : Plan, SolveResult, dict, list or path
        Stages with or without ``device_ids`` (without: contiguous ids in stage
        order); see :func:`~partitioner.plan.as_plan` for what is accepted. Under
        ``training.schedule: interleaved`` the stages are the P·v chunks
        (:func:`evaluate_interleaved`).
    objective : {"bottleneck", "iteration"}, optional
        Defaults to the problem's objective.

    Returns
    -------
    Evaluation

    Raises
    ------
    PlanError
        The first rule the plan breaks, with the stage and the numbers.
    ProblemError
        ``problem`` or ``plan`` is not one of the accepted kinds, or malformed.
    """
    problem = as_problem(problem)
    plan = as_plan(plan)
    objective = objective or problem.objective
    if objective not in ("bottleneck", "iteration"):
        raise ValueError(f"unknown objective {objective!r}")
    if problem.training.schedule == "interleaved":
        return evaluate_interleaved(problem, plan, objective)
    stages = plan.stages
    P, m = len(stages), problem.microbatches

    # rule 1: contiguous cover, stage count within bounds
    _check_cover(problem, stages)
    if not problem.stages.min <= P <= problem.stages.max:
        raise PlanError(1, f"{P} stages, outside the allowed {problem.stages.min}..{problem.stages.max}")
    ids = _check_devices(problem, plan)  # rules 2-4
    assigned = _check_configs(problem, stages)  # rule 5

    # times and memory
    transfers = [_transfer_ms(problem, stages[p].last_layer, ids[p], ids[p + 1]) for p in range(P - 1)]
    evals = _stage_evaluations(problem, stages, assigned, ids, transfers, stash(problem.training.schedule, P, m))

    # rule 6: memory, the schedule's stash included
    capacity = problem.cluster.gpu_memory_bytes
    for e in evals:
        if e.memory_bytes > capacity:
            raise PlanError(
                6,
                f"needs {format_bytes(e.memory_bytes)} (weights {format_bytes(e.weight_bytes)} + {e.stash} x activations "
                f"{format_bytes(e.act_bytes)}) > {format_bytes(capacity)} per GPU",
                e.index,
            )
    return Evaluation(tuple(evals), tuple(transfers), m, objective, problem.version, problem.training.schedule)


def _check_cover(problem: Problem, stages: Sequence[Stage]) -> None:
    """Rule 1 (without the stage-count bounds): the stages cover the layers contiguously in order."""
    L = problem.num_layers
    if not stages:
        raise PlanError(1, "the plan has no stages")
    expected = 0
    for p, s in enumerate(stages):
        if s.first_layer != expected:
            raise PlanError(1, f"starts at layer {s.first_layer}, expected {expected}", p)
        if s.last_layer < s.first_layer:
            raise PlanError(1, f"last_layer {s.last_layer} < first_layer {s.first_layer}", p)
        if s.last_layer >= L:
            raise PlanError(1, f"last_layer {s.last_layer} is past the last layer {L - 1}", p)
        expected = s.last_layer + 1
    if expected != L:
        raise PlanError(1, f"the stages end at layer {expected - 1}, not at the last layer {L - 1}")


def _check_devices(problem: Problem, plan: Plan) -> list[tuple[int, ...]]:
    """Rules 2-4 (devices, mesh shape, placement); returns each stage's device ids."""
    cluster = problem.cluster
    stages = plan.stages
    N, G = cluster.num_devices, cluster.gpus_per_node

    # rule 2: every device used (with cluster.devices: exactly that many, ids 0..devices-1)
    total = sum(s.devices for s in stages)
    if total != N:
        has = f"the job uses {N} of its {cluster.physical_devices}" if cluster.devices is not None else f"the cluster has {N}"
        raise PlanError(2, f"the stages use {total} devices, {has}")

    # rule 3: mesh shape
    allowed = cluster.allowed_sizes()
    for p, s in enumerate(stages):
        if s.devices not in allowed:
            raise PlanError(3, f"{s.devices} devices is not an allowed size ({', '.join(map(str, allowed))})", p)

    # rule 4: placement
    if any(s.device_ids is not None for s in stages) and not plan.has_device_ids:
        raise PlanError(4, "either every stage names its device_ids or none does")
    ids = plan.device_ids()
    seen: dict[int, int] = {}
    for p, (s, dev) in enumerate(zip(stages, ids)):
        if len(dev) != s.devices:
            raise PlanError(4, f"names {len(dev)} device ids for {s.devices} devices", p)
        for d in dev:
            if not 0 <= d < N:
                idle = f" (devices {N}.. are idle)" if N < cluster.physical_devices else ""
                raise PlanError(4, f"device id {d} is outside 0..{N - 1}{idle}", p)
            if d in seen:
                raise PlanError(4, f"device {d} is also used by stage {seen[d]}" if seen[d] != p else f"device {d} is listed twice", p)
            seen[d] = p
        nodes = sorted({d // G for d in dev})  # cluster.node_of
        if s.devices <= G:
            if len(nodes) != 1:
                raise PlanError(4, f"{s.devices} devices must lie inside one node, but span nodes {nodes}", p)
        elif set(dev) != {d for n in nodes for d in range(n * G, (n + 1) * G)}:
            raise PlanError(4, f"a {s.devices}-device stage must take whole nodes, got devices {sorted(dev)}", p)
    # (ids are disjoint, in range and sum to N, so they cover 0..N-1)
    if cluster.levels is not None:  # DESIGN.md "Network levels": Megatron's rank order, pp outermost
        offset = 0
        for p, dev in enumerate(ids):
            if tuple(dev) != tuple(range(offset, offset + len(dev))):
                raise PlanError(4, f"on a cluster with network levels stage {p} must sit on devices "
                                   f"{offset}..{offset + len(dev) - 1} (consecutive devices in pipeline order), "
                                   f"got {_id_text(dev)}", p)
            if not consecutive_fits(cluster, offset, len(dev)):
                raise PlanError(4, f"on a cluster with network levels a stage no larger than a level's group "
                                   f"lies inside one group of it; devices {_id_text(dev)} cross one", p)
            offset += len(dev)
    return ids


def _id_text(dev: Sequence[int]) -> str:
    """Device ids as a short text: a range when consecutive."""
    ds = list(dev)
    if ds == list(range(ds[0], ds[0] + len(ds))):
        return f"{ds[0]}..{ds[-1]}"
    return ", ".join(map(str, ds[:8])) + (", ..." if len(ds) > 8 else "")


def _check_configs(problem: Problem, stages: Sequence[Stage]) -> list[list[tuple[tuple[int, int], Layout]]]:
    """Rule 5 (v2: one config per segment); returns each stage's ``((first, last), config)`` pairs."""
    G = problem.cluster.gpus_per_node
    assigned = []
    for p, s in enumerate(stages):
        try:
            pairs = s.segment_configs(problem)
        except PlanError as err:
            raise PlanError(5, err.reason, p) from None
        for (a, b), lay in pairs:
            if min(lay.dp, lay.tp, lay.cp, lay.ep, lay.etp) < 1:
                raise PlanError(5, f"config {lay.key}: every axis must be >= 1", p)
            if lay.devices != s.devices:
                product = f"dp*tp*cp = {lay.dp}*{lay.tp}*{lay.cp}" if lay.cp != 1 else f"dp*tp = {lay.dp}*{lay.tp}"
                raise PlanError(5, f"{product} must equal its {s.devices} devices", p)
            if lay.tp > G:
                raise PlanError(5, f"tp={lay.tp} exceeds gpus_per_node={G}", p)
            if lay.devices % (lay.ep * lay.etp):
                raise PlanError(5, f"config {lay.key}: ep*etp = {lay.ep * lay.etp} must divide its {lay.devices} devices", p)
            for i, layer in enumerate(problem.layers[a: b + 1], a):
                if lay not in layer.costs:
                    raise PlanError(5, f"layer {i} ({layer.name}) has no cost entry {lay.key}", p)
        assigned.append(pairs)
    return assigned


def _transfer_ms(problem: Problem, last_layer: int, src: Sequence[int], dst: Sequence[int]) -> float:
    """x: the last layer's output sent from devices ``src`` to ``dst`` (0 when nothing is sent)."""
    nbytes = problem.layers[last_layer].out_bytes
    return transfer_ms(nbytes, _boundary_bandwidth(problem, src, dst)) if nbytes else 0.0


def _stage_evaluations(
    problem: Problem,
    stages: Sequence[Stage],
    assigned: Sequence[Sequence[tuple[tuple[int, int], Layout]]],
    ids: Sequence[Sequence[int]],
    transfers: Sequence[float],
    stashes: Sequence[int],
) -> list[StageEvaluation]:
    """Every stage's evaluation; stage p sends ``transfers[p]`` forward and receives ``transfers[p - 1]`` back."""
    last = len(stages) - 1
    return [
        _stage_evaluation(
            problem, p, s, assigned[p], ids[p],
            transfers[p] if p < last else 0.0, transfers[p - 1] if p > 0 else 0.0, stashes[p],
        )
        for p, s in enumerate(stages)
    ]


def _stage_evaluation(
    problem: Problem,
    p: int,
    s: Stage,
    pairs: Sequence[tuple[tuple[int, int], Layout]],
    ids: Sequence[int],
    send_fwd: float,
    send_bwd: float,
    stash_count: int,
) -> StageEvaluation:
    """One stage's compute, reshards, sends and memory (DESIGN's F_p, B_p and rule 6 terms)."""
    fwd = bwd = wgrad = 0.0
    weight = act = 0
    for (a, b), lay in pairs:
        table = None  # the last table read in this segment's config, and c its entry
        for layer in problem.layers[a: b + 1]:
            if layer.costs is not table:  # consecutive layers of one block often share their table
                table = layer.costs
                c = table[lay]  # rule 5 checked that it exists
            fwd += c.fwd_ms
            bwd += c.bwd_ms
            wgrad += c.split()[1]
            weight += c.weight_bytes
            act += c.act_bytes
    weight -= tied_bytes(problem, s.first_layer, s.last_layer, pairs)
    reshards = tuple(
        segment_reshard_ms(problem.layers[b].out_bytes, lay, nxt, ids, problem.cluster)
        for ((_, b), lay), (_, nxt) in zip(pairs, pairs[1:])
    )
    return StageEvaluation(
        index=p,
        first_layer=s.first_layer,
        last_layer=s.last_layer,
        devices=s.devices,
        layout=s.layout,
        device_ids=tuple(ids),
        nodes=tuple(sorted({d // problem.cluster.gpus_per_node for d in ids})),  # cluster.node_of
        compute_fwd_ms=fwd,
        compute_bwd_ms=bwd,
        send_fwd_ms=send_fwd,
        send_bwd_ms=send_bwd,
        weight_bytes=weight,
        act_bytes=act,
        stash=stash_count,
        configs=tuple(lay for _, lay in pairs),
        segments=tuple(seg for seg, _ in pairs),
        reshards_ms=reshards,
        compute_wgrad_ms=wgrad,
    )


def tied_bytes(problem: Problem, first: int, last: int, pairs: Sequence[tuple[tuple[int, int], Layout]]) -> int:
    """The bytes rule 6 does not count twice on a stage of layers ``first..last`` (format v3).

    For every layer k tied to a layer j (``tied_to``) with both inside the
    stage, the ``tied_weight_bytes`` of k's entry in the config of k's
    segment (``pairs``: ``((a, b), config)`` per segment); 0 without ties.
    """
    total = 0
    for j, k in problem.ties:
        if first <= j and k <= last:
            lay = next(c for (a, b), c in pairs if a <= k <= b)
            total += problem.layers[k].costs[lay].tied_weight_bytes
    return total


def evaluate_interleaved(problem: Problem, plan: Plan, objective: str | None = None) -> Evaluation:
    """:func:`evaluate` for ``training.schedule: interleaved`` (DESIGN.md, "Schedules").

    The plan's stages are the P·v chunks in pipeline order (v =
    ``training.virtual_stages``); chunks g, g + P, ... form device group g
    and run on its devices. Rules: 1 the chunks cover the layers, their count
    is a multiple of v and P is within ``stages`` (m a multiple of P); 2-4 on
    the groups (chunks 0..P-1); 4 every chunk names its group's devices
    (same ``device_ids``, or none); 5 every chunk's configs exist and the v
    chunks of a group share its (dp, tp) in every segment (Megatron-LM's
    one layout per pipeline rank); 6 per group: the v chunks' weights plus
    the interleaved schedule's peak activations (:func:`partitioner.plan.schedules.peak_activation_bytes`).
    Chunk c sends to chunk c + 1 over the link between their groups (nothing
    when both are the same devices, P = 1).
    """
    objective = objective or problem.objective
    v, m, stages = problem.training.virtual_stages, problem.microbatches, plan.stages
    _check_cover(problem, stages)
    if len(stages) % v:
        raise PlanError(1, f"{len(stages)} chunks are not a multiple of the {v} virtual stages per device group")
    P = len(stages) // v
    if not problem.stages.min <= P <= problem.stages.max:
        raise PlanError(1, f"{P} device groups ({len(stages)} chunks / {v}), outside the allowed {problem.stages.min}..{problem.stages.max}")
    if m % P:
        raise PlanError(1, f"the interleaved schedule needs microbatches ({m}) to be a multiple of the {P} device groups")
    heads = Plan(stages[:P])
    ids = _check_devices(problem, heads)  # rules 2-4 on the groups
    for c in range(P, len(stages)):
        head, s = stages[c % P], stages[c]
        if s.devices != head.devices or (s.device_ids is not None and tuple(s.device_ids) != tuple(ids[c % P])):
            raise PlanError(4, f"chunk {c} must run on the devices of its group {c % P} (chunk {c % P}: {list(ids[c % P])})", c)
        if (s.device_ids is None) != (head.device_ids is None):
            raise PlanError(4, "either every stage names its device_ids or none does", c)
    assigned = _check_configs(problem, stages)  # rule 5
    for c, pairs in enumerate(assigned):
        mesh = stages[c % P].layout.mesh
        for _, lay in pairs:
            if lay.mesh != mesh:
                raise PlanError(
                    5, f"runs {Layout.of_mesh(lay.mesh).axes}, but the chunks of group {c % P} share its layout "
                    f"{Layout.of_mesh(mesh).axes}", c,
                )
    chunk_ids = [ids[c % P] for c in range(len(stages))]
    transfers = [
        _transfer_ms(problem, stages[c].last_layer, chunk_ids[c], chunk_ids[c + 1]) if c % P != (c + 1) % P else 0.0
        for c in range(len(stages) - 1)
    ]
    evals = _stage_evaluations(problem, stages, assigned, chunk_ids, transfers, stash("interleaved", P, m, v))
    capacity = problem.cluster.gpu_memory_bytes
    memory = []
    for g in range(P):
        weights = sum(e.weight_bytes for e in evals[g::P])
        acts = peak_activation_bytes("interleaved", g, P, m, [e.act_bytes for e in evals], v)
        if weights + acts > capacity:
            raise PlanError(
                6,
                f"group {g} needs {format_bytes(weights + acts)} (weights of its {v} chunks {format_bytes(weights)} + "
                f"peak activations {format_bytes(acts)}) > {format_bytes(capacity)} per GPU",
                g,
            )
        memory.append(weights + acts)
    return Evaluation(tuple(evals), tuple(transfers), m, objective, problem.version, "interleaved", v, tuple(memory))


def _boundary_bandwidth(problem: Problem, a: Sequence[int], b: Sequence[int]) -> float:
    cluster = problem.cluster
    if cluster.topology is not None or cluster.levels is not None:
        return bandwidth(cluster, a, b)
    na = {cluster.node_of(d) for d in a}
    nb = {cluster.node_of(d) for d in b}
    same_node = len(na) == 1 and na == nb
    return default_bandwidth(cluster, len(a), len(b), same_node)
