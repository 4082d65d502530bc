"""A stated layout -- a user's recipe -- as a plan of the planner's problem: its memory, times and throughput.

Contract: :func:`estimate` takes a model, a cluster, the nodes and a
:class:`~partitioner.frameworks.recipe.Recipe`, checks the recipe against the
model and the cluster as Megatron-LM would (:func:`check_recipe`: one
:class:`~partitioner.problem.ProblemError` naming the option), builds the
model's problem with ``plan``'s cost model, cuts it as the recipe states
(:func:`recipe_plan`) and returns the :class:`Estimate`: per stage memory and
times, the replayed iteration, bubble, MFU and tokens/s.

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.recipes.estimate``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ...core.limits import MAX_DEVICES, MAX_MICROBATCHES, MAX_VIRTUAL_STAGES
from ...costs import CostOptions, ProblemBuilder
from ...costs.axes.experts import ep_problem
from ...costs.axes.wiring import cp_allows
from ...costs.layers import model_layers
from ...costs.memory.param_memory import param_memory
from ...costs.variants import Knobs, applies
from ...frameworks.megatron import parse_megatron_layout
from ...frameworks.recipe import Recipe
from ...plan import Evaluation, Plan, PlanError, Stage, evaluate
from ...plan.cuts import layer_roles, uniform_cuts
from ...presets import ClusterSpec, ModelSpec, load_cluster, load_model
from ...problem import Cluster, Layout, Problem, ProblemError
from ..baselines import segment_config
from ..records import Throughput
from ..results import iteration_of, plan_throughput, simulate_plan
from ..schedules.search import with_schedule
from ..targets.memory import user_count

__all__ = ["Estimate", "StageEstimate", "RecipeShape", "estimate", "check_recipe", "recipe_cost_options", "layout_vpp",
           "recipe_plan", "layout_cuts", "parts_cuts", "uneven_counts", "counted_cuts", "UNLIMITED_MEMORY"]

UNLIMITED_MEMORY = 2**62
"""GPU memory (bytes) of the problem an over-memory layout is timed on: rule 6 lifted, every other rule kept."""

# the Megatron layout symbol of each layer role (the vision encoder and projector go with the embedding's stage,
# an action head with the loss's)
_SYMBOLS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


@dataclass(frozen=True)
class RecipeShape:
    """What a recipe comes to on a job: the world, the data-parallel size, the microbatch count, the knobs.

    ``devices`` is the GPUs of one pipeline rank (dp x tp x cp); ``microbatches``
    is m = gbs / (mbs x dp); ``knobs`` are the memory knobs the problem's keys
    carry (ZeRO dropped when dp x cp = 1: it shards over nothing).
    """

    world: int
    dp: int
    devices: int
    microbatches: int
    global_batch: int
    knobs: Knobs

    @property
    def variant(self) -> str:
        return self.knobs.name


def _name_first(world: int, recipe: Recipe) -> str:
    """The option to name when tp x cp x pp does not divide the world: the first whose product stops dividing it."""
    product = 1
    for name in ("tp", "cp", "pp"):
        product *= getattr(recipe, name)
        if world % product:
            return recipe.where(name)
    return recipe.where("pp")


def check_recipe(recipe: Recipe, spec: ModelSpec, cluster: ClusterSpec, nodes: int,
                 options: CostOptions) -> RecipeShape:
    """The recipe's shape on ``nodes`` nodes of ``cluster``, or a ProblemError naming the option that breaks a rule.

    Megatron-LM's rules [1]_: tp x pp x cp divides the world and dp is what
    it leaves (a stated ``dp`` must agree); the global batch is a multiple
    of mbs x dp; the experts split over ep (ep divides the routed experts,
    ep x etp divides dp x tp x cp); without a layout the decoder layers
    split evenly over pp x vpp; interleaving (vpp > 1) needs pp >= 2 and m
    a multiple of pp. The cost model's: tp within a node (tensor parallelism
    over NVLink), tp divides every layer's heads and widths, cp splits the
    sequence, a pipeline rank is a submesh it places (a power of two within
    a node, or whole nodes).

    References
    ----------
    .. [1] NVIDIA Megatron-LM, ``megatron/training/arguments.py`` (``validate_args``:
       world size divisible by tp x pp x cp, dp = world / (tp x pp x cp), the
       global batch a multiple of micro-batch-size x dp, ``num_layers`` divisible
       by the pipeline size without a layout) and ``megatron/core/parallel_state.py``
       (the expert ranks fold ep x etp onto tp x cp x dp).
    """
    world = nodes * cluster.gpus_per_node
    if world > MAX_DEVICES:
        raise ProblemError(f"{nodes} nodes x {cluster.gpus_per_node} GPUs = {world} devices, more than the "
                           f"{MAX_DEVICES} accepted (see the accepted ranges in docs/limits.md)", path="--nodes")
    if recipe.vpp > MAX_VIRTUAL_STAGES:
        raise ProblemError(f"more than the {MAX_VIRTUAL_STAGES} virtual stages accepted (docs/limits.md)",
                           path=recipe.where("vpp"))
    tp, pp, cp, ep, etp = recipe.tp, recipe.pp, recipe.cp, recipe.ep, recipe.expert_tp
    if tp > cluster.gpus_per_node:
        raise ProblemError(f"tp {tp} spans nodes: the cost model runs tensor parallelism inside a node's "
                           f"{cluster.gpus_per_node} GPUs (NVLink)", path=recipe.where("tp"))
    if world % (tp * cp * pp):
        raise ProblemError(f"tp {tp} x cp {cp} x pp {pp} = {tp * cp * pp} does not divide the world of {world} GPUs "
                           f"({nodes} nodes x {cluster.gpus_per_node})", path=_name_first(world, recipe))
    dp = world // (tp * cp * pp)
    if recipe.dp is not None and recipe.dp != dp:
        raise ProblemError(f"dp {recipe.dp} disagrees with world / (tp x cp x pp) = {world} / {tp * cp * pp} = {dp}",
                           path=recipe.where("dp"))
    devices = world // pp
    sizes = _problem_sizes(cluster.gpus_per_node, nodes)
    if devices not in sizes:
        raise ProblemError(f"a pipeline rank of {devices} GPUs (world {world} / pp {pp}) is not a submesh the cost "
                           f"model places (a power of two dividing a node's {cluster.gpus_per_node} GPUs, or whole "
                           f"nodes)", path=recipe.where("pp"))
    gbs = recipe.gbs
    if gbs is None:
        raise ProblemError("the global batch is not stated (--global-batch / --gbs, or the recipe's "
                           "--global-batch-size)", path=recipe.where("gbs"))
    if gbs % (recipe.mbs * dp):
        raise ProblemError(f"global batch {gbs} is not a multiple of mbs {recipe.mbs} x dp {dp} = {recipe.mbs * dp}",
                           path=recipe.where("gbs"))
    m = gbs // (recipe.mbs * dp)
    if m > MAX_MICROBATCHES:
        raise ProblemError(f"m = gbs {gbs} / (mbs {recipe.mbs} x dp {dp}) = {m} microbatches, more than the "
                           f"{MAX_MICROBATCHES} accepted (docs/limits.md)", path=recipe.where("gbs"))
    if recipe.vpp > 1:
        if pp < 2:
            raise ProblemError(f"virtual stages (vpp {recipe.vpp}) need pipeline parallelism (pp >= 2)",
                               path=recipe.where("vpp"))
        if m % pp:
            raise ProblemError(f"interleaved 1F1B (vpp {recipe.vpp}) runs microbatches in rounds of pp {pp}: m = gbs "
                               f"{gbs} / (mbs {recipe.mbs} x dp {dp}) = {m} is not a multiple of {pp}",
                               path=recipe.where("gbs"))
    _check_experts(recipe, spec, dp, etp, ep)
    _check_layers(recipe, spec, options)
    zero = recipe.zero if dp * cp > 1 else 0  # ZeRO shards over the dp x cp ranks: nothing to shard over one
    return RecipeShape(world, dp, devices, m, gbs, Knobs(zero, recipe.recompute))


def _problem_sizes(gpus_per_node: int, nodes: int) -> set[int]:
    """The stage sizes rule 3 allows on ``nodes`` nodes."""
    return set(Cluster(nodes, gpus_per_node, 1, 1.0, 1.0).allowed_sizes())


def _check_experts(recipe: Recipe, spec: ModelSpec, dp: int, etp: int, ep: int) -> None:
    """ep and etp against the model's routed experts (Megatron's expert rank folding [1]_).

    References
    ----------
    .. [1] As cited in :func:`check_recipe`.
    """
    experts = max((m.experts for m in spec.modules), default=0)
    if ep > 1 and experts == 0:
        raise ProblemError(f"ep {ep}: {spec.name} has no routed experts", path=recipe.where("ep"))
    if ep > 1:
        why = ep_problem(experts, dp, recipe.tp, recipe.cp, ep, etp)
        if why is not None:
            raise ProblemError(why + " (Megatron-LM folds ep x etp onto the dp x tp x cp ranks of a pipeline rank)",
                               path=recipe.where("etp" if recipe.etp is not None and experts % ep == 0 else "ep"))


def _check_layers(recipe: Recipe, spec: ModelSpec, options: CostOptions) -> None:
    """tp divides every layer's heads and widths, cp splits its sequence; --num-layers and the even split."""
    layers = model_layers(spec, options)
    for layer in layers:
        for piece in layer.pieces:
            bad = [d for d in piece.tp_dims if d % recipe.tp]
            if bad:
                raise ProblemError(f"tp {recipe.tp} does not divide {bad[0]}, a head count or width of layer "
                                   f"{layer.name} ({piece.name})", path=recipe.where("tp"))
    for module in spec.modules:  # Megatron-Core: query groups G % tp == 0 or tp % G == 0 (KV heads replicated)
        groups = module.n_kv_heads if module.heads > 1 else 0
        if groups and groups % recipe.tp and recipe.tp % groups:
            raise ProblemError(f"tp {recipe.tp} neither divides nor is a multiple of the {groups} key-value heads of "
                               f"{module.name} (Megatron-Core's rule for grouped-query attention)",
                               path=recipe.where("tp"))
    if recipe.cp > 1:
        for layer in layers:
            if layer.role == "decoder" and not cp_allows(layer, recipe.tp, recipe.cp, options):
                raise ProblemError(f"cp {recipe.cp} cannot split layer {layer.name}: its sequence must split into "
                                   f"2 x cp chunks and its attention run a context-parallel algorithm",
                                   path=recipe.where("cp"))
    decoders = sum(layer.role == "decoder" for layer in layers)
    if recipe.num_layers is not None and recipe.num_layers != decoders:
        raise ProblemError(f"{recipe.num_layers} layers, but {spec.name} has {decoders} decoder layers",
                           path=recipe.where("num_layers"))
    chunks = recipe.pp * recipe.vpp
    if recipe.layer_parts is not None:
        _check_parts(recipe)
        return
    if recipe.first_stage_layers is not None or recipe.last_stage_layers is not None:
        uneven_counts(recipe, decoders)  # raises naming the option when Megatron-LM would refuse the split
        return
    if recipe.pipeline_layout is None and chunks > 1 and decoders % chunks:
        name = "vpp" if decoders % recipe.pp == 0 else "pp"
        raise ProblemError(f"{decoders} decoder layers do not split evenly over pp {recipe.pp} x vpp {recipe.vpp} = "
                           f"{chunks} pipeline chunks (Megatron-LM's rule without a layout); give "
                           f"--pipeline-model-parallel-layout for an uneven split", path=recipe.where(name))


def _check_parts(recipe: Recipe) -> None:
    """Stage boundaries (DeepSpeed's ``parts``) alone, one per pipeline stage boundary, without virtual stages."""
    where = recipe.where("layer_parts")
    others = [recipe.where(n) for n in ("pipeline_layout", "first_stage_layers", "last_stage_layers")
              if getattr(recipe, n) is not None]
    if others:
        raise ProblemError(f"stage boundaries and {others[0]} together: give one", path=where)
    if recipe.vpp > 1:
        raise ProblemError(f"stage boundaries with virtual stages (vpp {recipe.vpp}): DeepSpeed's pipeline runs "
                           "1F1B, one chunk per stage", path=where)
    parts = recipe.layer_parts or ()
    if len(parts) != recipe.pp + 1:
        raise ProblemError(f"{len(parts)} boundaries, but pp {recipe.pp} stages need {recipe.pp + 1}", path=where)


def parts_cuts(problem: Problem, parts: tuple[int, ...], where: str) -> list[tuple[int, int]]:
    """The stages of DeepSpeed's ``parts`` on ``problem``: stage s runs layers ``parts[s]`` .. ``parts[s+1] - 1``."""
    if parts[0] != 0 or parts[-1] != problem.num_layers:
        raise ProblemError(f"{list(parts)} must run from layer 0 to the model's {problem.num_layers} layers",
                           path=where)
    if any(b <= a for a, b in zip(parts, parts[1:])):
        raise ProblemError(f"{list(parts)} must increase: every stage holds at least one layer", path=where)
    return [(a, b - 1) for a, b in zip(parts, parts[1:])]


def uneven_counts(recipe: Recipe, decoders: int) -> list[int]:
    """Decoder layers per pipeline stage of ``--decoder-first/last-pipeline-num-layers`` (Megatron-Core's rules).

    The first (last) stage takes its stated layers, the stages between split
    the rest evenly; there must be middle layers exactly when there are
    middle stages, and they must divide [2]_. Not with a layout (Megatron
    takes one or the other) nor with virtual stages (not modelled here).

    References
    ----------
    .. [2] NVIDIA Megatron-Core 0.16.1, ``transformer/pipeline_parallel_layer_layout.py``
       (the layout's stages, ``vpp = stages / pp``) and ``pipeline_parallel/schedules.py``
       (interleaved 1F1B).
    """
    first, last = recipe.first_stage_layers, recipe.last_stage_layers
    name = "first_stage_layers" if first is not None else "last_stage_layers"
    if recipe.pipeline_layout is not None:
        raise ProblemError("an uneven split and --pipeline-model-parallel-layout together: give one",
                           path=recipe.where(name))
    if recipe.vpp > 1:
        raise ProblemError("an uneven split with virtual stages is not modelled: state it with "
                           "--pipeline-model-parallel-layout", path=recipe.where(name))
    middle_stages = recipe.pp - (first is not None) - (last is not None)
    middle = decoders - (first or 0) - (last or 0)
    if middle_stages < 0 or bool(middle) != bool(middle_stages) or middle < 0 or \
            (middle_stages and middle % middle_stages):
        raise ProblemError(f"{decoders} decoder layers less the first ({first}) and last ({last}) stages' leave "
                           f"{middle} for {max(middle_stages, 0)} middle stage(s): they must split evenly "
                           f"(Megatron-Core's rule)", path=recipe.where(name))
    each = [middle // middle_stages] * middle_stages if middle_stages else []
    return ([first] if first is not None else []) + each + ([last] if last is not None else [])


def counted_cuts(roles: list[str], counts: list[int]) -> list[tuple[int, int]]:
    """The stages of ``counts`` decoder layers each: what precedes the first decoder with the first stage, what
    follows the last with the last (the cut of :func:`~partitioner.plan.cuts.uniform_cuts` with given counts)."""
    decoders = [i for i, r in enumerate(roles) if r == "decoder"]
    cuts, k = [], 0
    for p, c in enumerate(counts):
        first = 0 if p == 0 else decoders[k]
        k += c
        last = len(roles) - 1 if p == len(counts) - 1 else decoders[k - 1]
        cuts.append((first, last))
    return cuts


def layout_vpp(recipe: Recipe) -> Recipe:
    """``recipe`` with vpp = the layout's stages / pp, as Megatron-LM derives it from a layout [2]_.

    A layout whose stages pp does not divide, or a stated vpp that disagrees
    with it, is bad input naming the option.

    References
    ----------
    .. [2] As cited in :func:`uneven_counts`.
    """
    if recipe.pipeline_layout is None:
        return recipe
    where = recipe.where("pipeline_layout")
    try:
        parsed = parse_megatron_layout(recipe.pipeline_layout)
    except ValueError as err:
        raise ProblemError(str(err), path=where) from None
    stages = len(parsed)
    if recipe.pp == 1 and stages > 1 and "vpp" not in recipe.origin:
        # Megatron-Core runs forward_backward_no_pipelining at pp 1: the model chunks run as one stage
        return replace(recipe, pipeline_layout="".join(s for st in parsed for s in st), notes=(*recipe.notes, (
            f"pp 1: Megatron-Core runs no pipeline schedule (forward_backward_no_pipelining), so the layout's "
            f"{stages} stages run as one")))
    if stages % recipe.pp:
        raise ProblemError(f"{stages} stages do not split over pp {recipe.pp} pipeline ranks (vpp = stages / pp)",
                           path=where)
    vpp = stages // recipe.pp
    if "vpp" in recipe.origin and recipe.vpp != vpp:
        raise ProblemError(f"vpp {recipe.vpp}, but the layout's {stages} stages over pp {recipe.pp} give vpp {vpp}",
                           path=recipe.where("vpp"))
    return replace(recipe, vpp=vpp)


def recipe_cost_options(base: CostOptions, recipe: Recipe, shape: RecipeShape,
                        user_set_count: bool = False, user_set_glu: bool = False) -> CostOptions:
    """The cost options that offer the recipe's keys: the user's ``base`` with the recipe's knobs and axes.

    The knobs: the variant of :attr:`RecipeShape.knobs` (format v2), or, as the
    plain key of a format-v1 problem, where the builder offers that variant
    only at one replica (a module set without ZeRO). The axes: cp with
    ``cp_min_tokens`` 1 (the recipe states cp, whatever the sequence), ep and
    etp. Precision and sequence parallelism as the recipe states them. The
    recipe's weight-memory count (a torchtitan recipe's) unless the user set one
    (``user_set_count``: ``-c memory_count`` or a bytes-per-parameter option),
    and how its framework runs the experts' gated activation unless the user
    set ``expert_fused_glu`` (``user_set_glu``).
    """
    out, axes, default = base, base.axes, CostOptions()
    if recipe.expert_fused_glu is not None and not user_set_glu:
        out = replace(out, expert_fused_glu=recipe.expert_fused_glu)
    if recipe.memory_count is not None and not user_set_count:
        count: dict[str, Any] = dict(param_memory(recipe.memory_count).option_overrides())  # bytes per parameter
        out = replace(out, memory_count=recipe.memory_count, **count)
    knobs = shape.knobs
    if knobs.name and applies(knobs, shape.dp * recipe.cp):
        out = replace(out, variants=(knobs.name,), recompute=default.recompute, zero1=default.zero1)
    else:
        out = replace(out, variants=("none",), recompute=knobs.recompute, zero1=knobs.zero == 1)
    if recipe.cp > 1:
        axes = replace(axes, cp_degrees=(1, recipe.cp), cp_min_tokens=1)
    if recipe.cp_algorithm is not None:
        axes = replace(axes, cp_algorithm=recipe.cp_algorithm)
    if recipe.ep > 1:  # the option lists etp 1 always
        axes = replace(axes, ep_degrees=(recipe.ep,), etp_degrees=tuple(sorted({1, recipe.expert_tp})))
    if recipe.fp8_recipe is not None:
        out = replace(out, fp8_recipe=recipe.fp8_recipe, precision=recipe.precision or "fp8")
    elif recipe.precision is not None:
        out = replace(out, precision=recipe.precision)
    if recipe.sequence_parallel is not None:
        out = replace(out, sequence_parallel=recipe.sequence_parallel)
    return replace(out, axes=axes)


def layout_cuts(problem: Problem, text: str, chunks: int, where: str) -> list[tuple[int, int]]:
    """The layers of each stage of a ``--pipeline-model-parallel-layout`` string [2]_ on ``problem``'s layers.

    Each problem layer has a symbol (``E`` embedding, ``t`` decoder, ``m``
    multi-token prediction, ``L`` loss) or goes with a neighbour (the vision
    encoder and projector with the next symbol's stage, an action head with
    the last). The layout's symbols, stage after stage, must be the model's
    in order (``E`` and ``L`` may be left out where the model has none);
    each stage must hold at least one layer, and there must be ``chunks``.

    References
    ----------
    .. [2] As cited in :func:`uneven_counts`.
    """
    try:
        stages = parse_megatron_layout(text)
    except ValueError as err:
        raise ProblemError(str(err), path=where) from None
    if len(stages) != chunks:
        raise ProblemError(f"{len(stages)} stages, but pp x vpp = {chunks}", path=where)
    roles = layer_roles(problem)
    symbol_layers = [(i, _SYMBOLS[r]) for i, r in enumerate(roles) if r in _SYMBOLS]
    present = {s for _, s in symbol_layers}
    stages = [[s for s in st if s in present or s in "tm"] for st in stages]  # E, L: only where the model has them
    flat = [s for st in stages for s in st]
    wanted = [s for _, s in symbol_layers]
    if flat != wanted:
        raise ProblemError(f"the layout lists {_count_text(flat)}, the model has {_count_text(wanted)}", path=where)
    if any(not st for st in stages):
        raise ProblemError(f"stage {next(k for k, st in enumerate(stages) if not st)} holds no layer of the model",
                           path=where)
    stage_of_symbol = [k for k, st in enumerate(stages) for _ in st]
    stage_of_layer = []
    for i in range(problem.num_layers):
        after = [j for j, (layer, _) in enumerate(symbol_layers) if layer >= i]
        stage_of_layer.append(stage_of_symbol[after[0]] if after else len(stages) - 1)
    return [(stage_of_layer.index(k), len(stage_of_layer) - 1 - stage_of_layer[::-1].index(k)) for k in range(chunks)]


def _count_text(symbols: list[str]) -> str:
    """``E, 32 t, L``: a symbol sequence in runs."""
    runs: list[list[Any]] = []
    for s in symbols:
        if runs and runs[-1][0] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    return ", ".join(s if n == 1 else f"{n} {s}" for s, n in runs) or "nothing"


def recipe_plan(problem: Problem, recipe: Recipe, shape: RecipeShape) -> tuple[Problem, Plan]:
    """``problem`` under the recipe's schedule (1F1B, or interleaved with vpp chunks) and the recipe's plan.

    Chunk c holds the layers of the layout's stage c, or of Megatron's even
    split (:func:`~partitioner.plan.cuts.uniform_cuts`, the cut of ``plan``'s
    ``megatron-uniform`` baseline), on pipeline rank c mod pp (contiguous
    device ids, Megatron's pp-outermost rank order). Every segment runs the
    recipe's config where its layers have it
    (:func:`~.baselines.segment_config`: a segment without experts runs
    ep = etp = 1, one without context parallelism its cp ranks as dp ranks).
    """
    P, v = recipe.pp, recipe.vpp
    scheduled = with_schedule(problem, "interleaved" if v > 1 else "1f1b", v)
    if recipe.layer_parts is not None:
        cuts = parts_cuts(scheduled, recipe.layer_parts, recipe.where("layer_parts"))
    elif recipe.pipeline_layout is not None:
        cuts = layout_cuts(scheduled, recipe.pipeline_layout, P * v, recipe.where("pipeline_layout"))
    elif recipe.first_stage_layers is not None or recipe.last_stage_layers is not None:
        roles = layer_roles(scheduled)
        cuts = counted_cuts(roles, uneven_counts(recipe, roles.count("decoder")))
    else:
        found = uniform_cuts(layer_roles(scheduled), P * v)
        if found is None:
            raise ProblemError(f"{P * v} pipeline chunks for fewer decoder layers", path=recipe.where("pp"))
        cuts = found
    d = shape.devices
    config = Layout(shape.dp, recipe.tp, shape.variant if problem.version >= 2 and problem.variants else "",
                    recipe.cp, recipe.ep, recipe.expert_tp if recipe.ep > 1 else 1)
    ids = [tuple(range(g * d, (g + 1) * d)) for g in range(P)]
    stages = []
    for c, (a, b) in enumerate(cuts):
        configs = [segment_config(scheduled, first, last, config) for first, last in scheduled.segments(a, b)]
        stages.append(Stage.from_configs(a, b, d, configs, ids[c % P]))
    return scheduled, Plan(tuple(stages))


@dataclass(frozen=True)
class StageEstimate:
    """One stage (under interleaving, one chunk) of the recipe's plan.

    ``rank`` is its pipeline rank (chunk c runs on rank c mod pp);
    ``memory_bytes`` is that rank's peak as rule 6 counts it (weights plus
    the schedule's activation stash; under interleaving, all the rank's
    chunks), ``fits`` whether it is within the GPU's usable memory.
    """

    index: int
    rank: int
    first_layer: int
    last_layer: int
    layers: str
    devices: int
    configs: tuple[str, ...]
    fwd_ms: float
    bwd_ms: float
    memory_bytes: int
    fits: bool

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.index, "rank": self.rank, "first_layer": self.first_layer, "last_layer": self.last_layer,
                "layers": self.layers, "devices": self.devices, "configs": list(self.configs), "fwd_ms": self.fwd_ms,
                "bwd_ms": self.bwd_ms, "memory_bytes": self.memory_bytes, "fits": self.fits}


@dataclass(frozen=True)
class Estimate:
    """What :func:`estimate` reports on a recipe: per stage memory and time, the iteration, MFU, what does not fit.

    ``fits`` is False when a pipeline rank is over the GPU's usable memory
    (``gpu_memory_bytes``, the cost model's: less the CUDA/NCCL reserve and
    fragmentation); ``over_memory`` says which ranks and by how much, and
    the times are then those of the same plan with the memory check lifted.
    ``iteration_ms`` is the simulator's makespan (``iteration_source``),
    ``bubble_ratio`` the replay's idle share, ``throughput`` tokens/s and MFU
    as ``plan`` reports them. ``problem``, ``plan`` and ``evaluation`` are
    the records behind it (the plan is in the JSON).
    """

    model: str
    cluster: str
    nodes: int
    recipe: Recipe
    dp: int
    microbatches: int
    schedule: str
    virtual_stages: int
    stages: tuple[StageEstimate, ...]
    gpu_memory_bytes: int
    fits: bool
    over_memory: tuple[str, ...]
    throughput: Throughput
    bubble_ratio: float | None
    bottleneck_ms: float
    estimate_ms: float
    notes: tuple[str, ...] = ()
    problem: Problem | None = field(default=None, compare=False, repr=False)
    plan: Plan | None = field(default=None, compare=False, repr=False)
    evaluation: Evaluation | None = field(default=None, compare=False, repr=False)

    @property
    def iteration_ms(self) -> float:
        return self.throughput.iteration_ms

    @property
    def gpus(self) -> int:
        return sum(s.devices for s in self.stages[: len(self.stages) // max(1, self.virtual_stages)])

    def to_dict(self) -> dict[str, Any]:
        """The ``estimate --json`` document."""
        return {
            "model": self.model, "cluster": self.cluster, "nodes": self.nodes, "gpus": self.gpus,
            "recipe": self.recipe.to_dict(), "dp": self.dp, "microbatches": self.microbatches,
            "schedule": self.schedule, "virtual_stages": self.virtual_stages,
            "fits": self.fits, "over_memory": list(self.over_memory), "gpu_memory_bytes": self.gpu_memory_bytes,
            "throughput": self.throughput.to_dict(), "iteration_ms": self.iteration_ms,
            "bubble_ratio": self.bubble_ratio, "bottleneck_ms": self.bottleneck_ms, "estimate_ms": self.estimate_ms,
            "stages": [s.to_dict() for s in self.stages],
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "notes": list(self.notes),
        }


def estimate(model: str | ModelSpec, cluster: str | ClusterSpec, recipe: Recipe, *, nodes: int | None = None,
             options: Mapping[str, Any] | None = None, objective: str = "iteration") -> Estimate:
    """Evaluate and replay ``recipe`` on ``model`` trained on ``nodes`` nodes of ``cluster``.

    Parameters
    ----------
    model, cluster : str or spec
        Preset names, YAML / ``config.json`` paths or spec objects (a spec
        loaded with a workload carries it: :func:`~partitioner.presets.load_model`).
    recipe : Recipe
        The layout, batch and memory knobs (:mod:`partitioner.frameworks.recipe`).
    nodes : int, optional
        Nodes of the cluster; the recipe's (``--nnodes``) when not given.
    options : mapping, optional
        Cost options (``-c``), as ``plan`` takes them; the recipe's knobs and axes override theirs.
    objective : {"iteration", "bottleneck"}
        The evaluation's objective (the reported times do not depend on it).

    Raises
    ------
    ProblemError
        A recipe that breaks a rule of :func:`check_recipe`, naming the option; a bad model, cluster or option.
    """
    spec, cl = load_model(model), load_cluster(cluster)
    nodes = nodes if nodes is not None else recipe.nodes
    if nodes is None:
        raise ProblemError("the number of nodes is not stated (--nodes, or the recipe's --nnodes)", path="--nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ProblemError(f"must be a positive integer, got {nodes!r}", path="--nodes")
    base = CostOptions.from_mapping(dict(options or {}))
    recipe = layout_vpp(recipe)
    shape = check_recipe(recipe, spec, cl, nodes, base)
    given = dict(options or {})
    cost_options = recipe_cost_options(base, recipe, shape, user_count(given) is not None, "expert_fused_glu" in given)
    builder = ProblemBuilder(spec, cl, nodes=nodes, options=cost_options, objective=objective)
    problem = builder.build(shape.global_batch, shape.microbatches)
    scheduled, plan = recipe_plan(problem, recipe, shape)
    fits = True
    try:
        ev = evaluate(scheduled, plan)
    except PlanError as err:
        if err.rule != 6:
            raise ProblemError(f"the recipe's plan breaks rule {err.rule}: {err}", path="recipe") from None
        fits = False
        timed = replace(scheduled, cluster=replace(scheduled.cluster, gpu_memory_bytes=UNLIMITED_MEMORY))
        ev = evaluate(timed, plan)
    return _report(spec, cl, nodes, recipe, shape, scheduled, plan, ev, fits)


def _report(spec: ModelSpec, cl: ClusterSpec, nodes: int, recipe: Recipe, shape: RecipeShape, problem: Problem,
            plan: Plan, ev: Evaluation, fits: bool) -> Estimate:
    """The :class:`Estimate` of an evaluated recipe plan: its replay, throughput and per-stage rows."""
    capacity = problem.cluster.gpu_memory_bytes
    timed = problem if fits else replace(problem, cluster=replace(problem.cluster, gpu_memory_bytes=UNLIMITED_MEMORY))
    sim = simulate_plan(timed, plan, ev)
    iteration, source = iteration_of(sim, ev)
    tput = plan_throughput(problem, ev, iteration, source)
    per_rank = ev.peak_memory_bytes
    P = recipe.pp
    rows = []
    for st in ev.stages:
        rank = st.index % P
        first, last = problem.layers[st.first_layer].name, problem.layers[st.last_layer].name
        rows.append(StageEstimate(st.index, rank, st.first_layer, st.last_layer,
                                  first if first == last else f"{first} .. {last}", st.devices,
                                  tuple(c.key for c in (st.configs or (st.layout,))), st.fwd_ms, st.bwd_ms,
                                  int(per_rank[rank]), per_rank[rank] <= capacity))
    over = tuple(f"pipeline rank {r}: {b / 2**30:.2f} GiB > {capacity / 2**30:.2f} GiB usable "
                 f"(over by {(b - capacity) / 2**30:.2f} GiB)" for r, b in enumerate(per_rank) if b > capacity)
    notes = list(recipe.notes)
    if recipe.zero and shape.knobs.zero == 0:
        notes.append(f"ZeRO-{recipe.zero} over dp x cp = 1 rank shards nothing: priced as ZeRO-0")
    bubble = sim.bubble_ratio if sim is not None and math.isfinite(sim.bubble_ratio) else None
    if bubble is not None and abs(bubble) < 1e-12:  # a one-stage replay: 0 up to the rounding of its sums
        bubble = 0.0
    return Estimate(spec.name, cl.name, nodes, recipe, shape.dp, shape.microbatches, problem.training.schedule,
                    problem.training.virtual_stages, tuple(rows), capacity, fits and not over, over, tput, bubble,
                    ev.bottleneck_ms, ev.iteration_ms, tuple(notes), problem, plan, ev)
