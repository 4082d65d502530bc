"""A layout given from outside -- a published run's, or a user's -- forced on a model: its plan and its estimate.

Contract: :class:`ForcedLayout` is one model-wide layout as Megatron-LM runs
it (pp pipeline ranks with ``vpp`` model chunks each, and every rank's ``dp
x tp x cp`` mesh with the experts folded as ``ep x etp``), plus the memory
knobs (ZeRO stage, recompute).

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.recipes.forced``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from ...costs import ProblemBuilder, load_cluster
from ...costs.memory.recompute_names import canonical_setting
from ...costs.variants import Knobs
from ...plan import Plan, PlanError, Stage, evaluate
from ...plan.cuts import layer_roles, uniform_cuts
from ...plan.evaluation import Evaluation
from ...presets import ClusterSpec, ModelSpec
from ...problem import Layout, Problem, ProblemError
from ..baselines import segment_config
from ..results import simulate_plan
from ..schedules.search import with_schedule

__all__ = ["ForcedLayout", "ForcedEstimate", "forced_cuts", "forced_plan", "job_cluster", "sizes_within", "estimate_forced"]


@dataclass(frozen=True)
class ForcedLayout:
    """A model-wide layout: ``pp`` pipeline ranks of ``vpp`` chunks, each ``dp x tp x cp`` GPUs.

    ``ep`` and ``etp`` split the routed experts (folded onto the same GPUs);
    ``etp`` None is Megatron's default, ``etp = tp``. ``zero`` (0, 1: the
    distributed optimizer, 3: FSDP) and ``recompute`` (none, selective,
    full, op, or Megatron-Core ``--recompute-modules`` joined by ``+``, as
    :func:`~partitioner.costs.memory.recompute_names.canonical_setting` spells them:
    ``layernorm+moe_act``) are the memory knobs. ``split_embedding_loss``: the embedding and
    the head count as layers of the pipeline split (Megatron-LM's
    ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split``).
    """

    pp: int
    dp: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int = 1
    zero: int = 0
    recompute: str = "none"
    split_embedding_loss: bool = False

    def __post_init__(self) -> None:
        for name in ("pp", "dp", "tp", "cp", "ep", "vpp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProblemError(f"must be a positive integer, got {value!r}", path=f"layout.{name}")
        if self.etp is not None and (isinstance(self.etp, bool) or not isinstance(self.etp, int) or self.etp < 1):
            raise ProblemError(f"must be a positive integer or null (etp = tp), got {self.etp!r}", path="layout.etp")
        if self.zero not in (0, 1, 3):
            raise ProblemError(f"must be 0, 1 or 3, got {self.zero!r}", path="layout.zero")
        try:
            canonical = canonical_setting(self.recompute) if isinstance(self.recompute, str) else None
        except ValueError:
            canonical = None
        if canonical is None or canonical != self.recompute:
            raise ProblemError(f"must be none, selective, full, op or Megatron recompute modules joined by '+' "
                               f"(canonically spelled), got {self.recompute!r}", path="layout.recompute")
        ranks = self.dp * self.tp * self.cp
        if ranks % (self.ep * self.expert_tp):
            # Megatron-Core parallel_state: world size % (etp x ep x pp) != 0 raises, i.e. etp x ep divides tp x cp x dp
            raise ProblemError(f"ep {self.ep} x etp {self.expert_tp} does not divide the {ranks} GPUs of a pipeline "
                               f"rank (dp x tp x cp), as Megatron-Core requires", path="layout.ep")
        if self.ep == 1 and self.etp not in (None, self.tp):
            raise ProblemError(f"etp {self.etp} without expert parallelism: an ep = 1 layout splits each expert "
                               f"over tp ({self.tp})", path="layout.etp")

    @property
    def gpus(self) -> int:
        return self.pp * self.dp * self.tp * self.cp

    @property
    def expert_tp(self) -> int:
        """``etp``, Megatron's default (tp) when not given."""
        return self.tp if self.etp is None else self.etp

    @property
    def variant(self) -> str:
        """The cost key's variant of the memory knobs (format v2)."""
        return Knobs(self.zero, self.recompute).name

    @property
    def config(self) -> Layout:
        """The config of every MoE segment (others take it without ep and etp)."""
        if self.ep == 1:
            return Layout(self.dp, self.tp, self.variant, self.cp)
        return Layout(self.dp, self.tp, self.variant, self.cp, self.ep, self.expert_tp)

    def cost_options(self) -> dict[str, Any]:
        """Cost options under which a problem offers this layout's keys (and only those axes)."""
        out: dict[str, Any] = {"variants": [self.variant]} if self.variant else {"variants": "none",
                                                                                 "recompute": "none", "zero1": False}
        if self.cp > 1:
            out.update(cp_degrees=[1, self.cp], cp_min_tokens=1)
        if self.ep > 1:
            out.update(ep_degrees=[self.ep], etp_degrees=[self.expert_tp])
        return out


def forced_cuts(problem: Problem, chunks: int, split_embedding_loss: bool = False) -> list[tuple[int, int]]:
    """The layers of each of ``chunks`` model chunks, as Megatron-LM cuts them (module docstring) [20]_.

    ``split_embedding_loss``: every layer counts in the even split, the embedding and the head too.

    References
    ----------
    .. [20] NVIDIA Megatron-LM, ``megatron/core/transformer/transformer_block.py``
       (``get_num_layers_to_build``) and ``megatron/training/arguments.py``
       (``--account-for-embedding-in-pipeline-split``,
       ``--account-for-loss-in-pipeline-split``, ``--expert-tensor-parallel-size``
       defaulting to the tensor-parallel size).
    """
    roles = layer_roles(problem)
    decoders = [i for i, r in enumerate(roles) if r == "decoder"]
    L = len(roles)
    if decoders and len(decoders) >= chunks and not split_embedding_loss:
        cuts = uniform_cuts(roles, chunks)
        assert cuts is not None  # at least one decoder per chunk
        return cuts
    if L < chunks:
        raise ProblemError(f"{L} layers cannot fill {chunks} pipeline chunks", path="layout.pp")
    cuts, start = [], 0
    for n in _even(L, chunks):
        cuts.append((start, start + n - 1))
        start += n
    return cuts


def _even(n: int, parts: int) -> list[int]:
    base, extra = divmod(n, parts)
    return [base + (1 if p >= parts - extra else 0) for p in range(parts)]


def forced_plan(problem: Problem, layout: ForcedLayout) -> tuple[Problem, Plan]:
    """``problem`` under the layout's schedule (1F1B, or interleaved with ``vpp`` chunks) and the forced plan.

    Chunk c holds :func:`forced_cuts`' layers on device group ``c mod pp``
    (contiguous device ids); every segment takes the layout's config
    (:func:`~.baselines.segment_config`: without ep and etp where its layers
    have no experts). A config the problem does not offer is left for
    :func:`~partitioner.plan.evaluate` to refuse (rule 5).
    """
    P, v = layout.pp, layout.vpp
    if problem.num_devices != layout.gpus:
        raise ProblemError(f"the layout needs {layout.gpus} GPUs (pp x dp x tp x cp), the problem has "
                           f"{problem.num_devices}", path="layout")
    scheduled = with_schedule(problem, "interleaved" if v > 1 else "1f1b", v)
    d = layout.dp * layout.tp * layout.cp
    ids = [tuple(range(g * d, (g + 1) * d)) for g in range(P)]
    config = layout.config
    stages, with_ep = [], False
    for c, (a, b) in enumerate(forced_cuts(scheduled, P * v, layout.split_embedding_loss)):
        configs = [segment_config(scheduled, first, last, config) for first, last in scheduled.segments(a, b)]
        with_ep = with_ep or any(cfg.ep == config.ep for cfg in configs)
        stages.append(Stage.from_configs(a, b, d, configs, ids[c % P]))
    if config.ep > 1 and not with_ep:  # not silently the ep = 1 plan: no layer offers the layout's experts split
        raise ProblemError(f"no layer offers ep {config.ep} x etp {config.etp} (the cost options' ep_degrees, "
                           f"etp_degrees, or the experts' count)", path="layout.ep")
    return scheduled, Plan(tuple(stages))


@dataclass(frozen=True)
class ForcedEstimate:
    """A forced layout evaluated and replayed: the iteration time and the busiest GPU's memory.

    ``fits`` says whether the plan fits the GPUs' memory as the cost model
    counts it; when it does not, ``evaluation`` and the times come from the
    same problem with unlimited memory. ``peak_memory_bytes`` is the replay's
    peak over the GPUs, ``gpu_memory_bytes`` what the cost model lets a GPU use.
    """

    problem: Problem
    plan: Plan
    evaluation: Evaluation
    iteration_ms: float
    peak_memory_bytes: float
    gpu_memory_bytes: int
    fits: bool
    bubble_ratio: float | None

    @property
    def tokens_per_iteration(self) -> float:
        return self.problem.workload.tokens_per_iteration()


def job_cluster(cluster: ClusterSpec, gpus: int) -> ClusterSpec:
    """``cluster`` with the node a job of ``gpus`` GPUs runs on: the preset's node when whole nodes hold the
    job; else the largest group of a node's GPUs that divides it (a job smaller than a node runs on part of
    one; 256 GPUs of GB200 NVL72 racks of 72 run as four 64-GPU NVLink domains)."""
    if gpus % cluster.gpus_per_node == 0:
        return cluster
    per_node = max(d for d in range(1, min(gpus, cluster.gpus_per_node) + 1) if gpus % d == 0)
    return replace(cluster, gpus_per_node=per_node, stage_sizes=sizes_within(cluster.stage_sizes, per_node))


def sizes_within(sizes: tuple[int, ...] | None, per_node: int) -> tuple[int, ...] | None:
    """A preset's in-node ``stage_sizes`` on a node cut to ``per_node`` GPUs: those that still fit (None if none)."""
    kept = tuple(s for s in sizes or () if s <= per_node)
    return kept or None


def estimate_forced(model: str | ModelSpec, cluster: str | ClusterSpec, layout: ForcedLayout, *, global_batch: int,
                    microbatch: int, options: Mapping[str, Any] | None = None) -> ForcedEstimate:
    """Build ``model`` on ``layout.gpus`` GPUs of ``cluster``, force ``layout``, evaluate and replay it.

    ``global_batch`` samples per iteration in microbatches of ``microbatch``
    samples per data-parallel replica (m = global_batch / (microbatch x dp)
    microbatches); ``options`` are further cost options (the run's
    settings), merged under the layout's own (:meth:`ForcedLayout.cost_options`).
    """
    spec = job_cluster(load_cluster(cluster), layout.gpus)
    nodes = layout.gpus // spec.gpus_per_node
    per_step = microbatch * layout.dp
    if global_batch % per_step:
        raise ProblemError(f"global batch {global_batch} is not a whole number of microbatches of {microbatch} "
                           f"x dp {layout.dp}", path="global_batch")
    microbatches = global_batch // per_step
    merged = {**dict(options or {}), **layout.cost_options()}
    problem = ProblemBuilder(model, spec, nodes=nodes, options=merged).build(global_batch, microbatches)
    plan_layout = layout
    if layout.zero and layout.dp * layout.cp == 1:  # ZeRO shards nothing over one replica: the plain key
        plan_layout = replace(layout, zero=0)
    scheduled, plan = forced_plan(problem, plan_layout)
    memory = scheduled.cluster.gpu_memory_bytes
    try:
        ev = evaluate(scheduled, plan)
        fits = True
    except PlanError as err:
        if err.rule != 6:
            raise
        scheduled = replace(scheduled, cluster=replace(scheduled.cluster, gpu_memory_bytes=2**62))
        ev = evaluate(scheduled, plan)
        fits = False
    sim = simulate_plan(scheduled, plan, ev)
    iteration_ms = float(sim.makespan_ms) if sim.makespan_ms else ev.iteration_ms
    peak = float(sim.peak_bytes if sim.peak_bytes is not None else max(ev.peak_memory_bytes))
    return ForcedEstimate(scheduled, plan, ev, iteration_ms, peak, memory, fits, sim.bubble_ratio)
