"""From a model, a cluster and a training setup to a problem.

Contract: :func:`build_problem` validates its inputs (a
:class:`~partitioner.problem.ProblemError` naming the field otherwise),
cuts the model into layers (:func:`~.layers.model_layers`), offers each
layer every layout the cluster allows and the layer divides
(:func:`cluster_layouts`, :func:`layouts_for`), fills one cost entry per
layout (:func:`~.entry.layer_cost`; once per :func:`cost_signature`, the
layers of equal blocks sharing one table) and returns the
:class:`~partitioner.problem.Problem` with ``meta`` (model, batch, FLOPs,
peak, per-layer export hints). Profiled times replace the analytic ones
when given (:mod:`.profile`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..core.deadline import Deadline
from ..presets import ClusterSpec, ModelSpec, load_cluster, load_model
from ..problem import OBJECTIVES, Cluster, Layout, Problem, ProblemError, level_doc
from .axes.experts import ep_problem
from .axes.wiring import cp_allows, cp_layer_terms, moe_dense_pieces, moe_ep_cost, sync_layout
from .compute.flops import forward_flops, model_flops_per_sample
from .compute.precision import check_precision, describe_precision, precision_summary
from .entry import finish_cost, layer_terms
from .layers import Piece, PipelineLayer, model_layers
from .memory.recompute import applicable_modules, module_chain, setting_of
from .options import CostOptions
from .profile import _apply_profile_doc, load_profile
from .variants import Knobs, applies, describe, variant_knobs

__all__ = ["build_problem", "ProblemBuilder", "TermsStore", "COUNT_FIELDS", "terms_options", "cluster_layouts", "job_cluster_fields", "layouts_for", "ep_splits", "cp_offered",
           "cost_signature", "usable_memory_bytes", "tied_layers", "recompute_settings"]


# The cost options a weight-memory count sets (:meth:`~.memory.param_memory.ParamBytes.option_overrides` and its
# name): bytes per parameter of the weights and optimizer states, of the gradients' reduction, of frozen weights.
# :func:`~.entry.finish_cost` and the routed experts' weight and gradient terms read them; the compute terms
# (:func:`~.entry.layer_terms`, :func:`~.axes.wiring.cp_layer_terms`) never do, so builders whose options differ
# only here share those terms (:class:`TermsStore`; tests/costs/test_build_cut.py builds every count with and
# without the shared terms and compares the problems).
COUNT_FIELDS = ("memory_count", "bytes_per_param", "optimizer_bytes_per_param", "grad_bytes_per_param",
                "frozen_bytes_per_param")
_COUNT_DEFAULTS: dict[str, Any] = {name: getattr(CostOptions(), name) for name in COUNT_FIELDS}

TermsKey = tuple[int, int, float, str, int, int]  # (signature, tp, samples, recompute, cp, devices under cp)
Terms = tuple[float, float, float, float]  # (fwd, B, W, act) of layer_terms / cp_layer_terms


def terms_options(opts: CostOptions) -> CostOptions:
    """``opts`` with :data:`COUNT_FIELDS` at their defaults: the part of the options the compute terms read."""
    return replace(opts, **_COUNT_DEFAULTS)


@dataclass
class TermsStore:
    """The compute terms of one model on one job (cluster, nodes, GPUs), shared by its :class:`ProblemBuilder` s.

    Per :func:`terms_options` of a builder's options, the terms of each
    layer signature at ``(tp, samples per replica, recompute, cp, the cp
    group's devices)`` (a MoE layer's: those of its dense part). A plan
    command's builders differ in the weight-memory count of each target and
    ZeRO stage (:mod:`partitioner.planning.targets.memory`) and share every
    term. ``computed`` counts the terms computed (not found) so far.
    """

    spec: ModelSpec
    cluster: ClusterSpec
    nodes: int
    gpus: int | None = None
    by_options: dict[CostOptions, dict[TermsKey, Terms]] = field(default_factory=dict)
    computed: int = 0

    def table(self, spec: ModelSpec, cluster: ClusterSpec, nodes: int, gpus: int | None,
              opts: CostOptions) -> dict[TermsKey, Terms]:
        """The terms of builders with these inputs and options (ValueError for another model or job)."""
        if (spec, cluster, nodes, gpus) != (self.spec, self.cluster, self.nodes, self.gpus):
            raise ValueError(f"a TermsStore of {self.spec.name} on {self.nodes} x {self.cluster.name} "
                             f"holds no terms of {spec.name} on {nodes} x {cluster.name}")
        return self.by_options.setdefault(terms_options(opts), {})


def usable_memory_bytes(cluster: ClusterSpec, opts: CostOptions) -> float:
    """A GPU's memory for weights and activations: less the CUDA context, NCCL and cuBLAS reserve
    (``memory_reserve_bytes``), then less the allocator's fragmentation (``allocator_fragmentation``)."""
    return (cluster.gpu_memory_bytes - opts.memory_reserve_bytes) * (1.0 - opts.allocator_fragmentation)


def layouts_for(layer: PipelineLayer, cluster_layouts: Sequence[Layout], microbatch: int, opts: CostOptions) -> list[Layout]:
    """The layouts ``layer`` can run in: tp divides its heads and widths, dp divides the microbatch, and a cp > 1
    splits its sequence (:func:`~.axes.wiring.cp_allows`: ``2 cp`` chunks, an attention algorithm it can run)."""
    out = []
    for lay in cluster_layouts:
        if microbatch % lay.dp:
            continue
        if opts.max_tp is not None and lay.tp > opts.max_tp:
            continue
        if any(d % lay.tp for p in layer.pieces for d in p.tp_dims):
            continue
        if lay.cp > 1 and not cp_allows(layer, lay.tp, lay.cp, opts):
            continue
        out.append(lay)
    return out


def ep_splits(experts: int, layout: Layout, gpus_per_node: int, opts: CostOptions) -> list[tuple[int, int]]:
    """The ``(ep, etp)`` with ep > 1 offered on a layer of a module with ``experts`` routed experts at ``layout``.

    ep from ``ep_degrees`` (default: the powers of two from 2 up to the experts, inside a node and across
    nodes), etp from ``etp_degrees`` (default: 1 and the config's tp); ep must divide the experts and
    ep x etp the config's ``dp tp cp`` (:func:`~.axes.experts.ep_problem`). ``gpus_per_node`` is kept for
    callers; the default degrees no longer stop at a node.
    """
    axes = opts.axes
    degrees = axes.ep_degrees or tuple(1 << i for i in range(1, experts.bit_length()) if 1 << i <= experts)
    etps = axes.etp_degrees or tuple(dict.fromkeys((1, layout.tp)))
    out = []
    for ep in degrees:
        for etp in etps:
            if ep > 1 and (ep, etp) not in out and ep_problem(experts, layout.dp, layout.tp, layout.cp, ep, etp) is None:
                out.append((ep, etp))
    return out


def cp_offered(layers: Sequence[PipelineLayer], opts: CostOptions) -> tuple[int, ...]:
    """The cp degrees the builder offers: ``cp_degrees`` when the language model's sequence per sample has at
    least ``cp_min_tokens`` tokens (long-context training, where Megatron users turn cp on), else only 1."""
    seq = max((p.tokens for layer in layers if layer.role == "embedding" for p in layer.pieces), default=0.0)
    return opts.axes.cp_degrees if seq >= opts.axes.cp_min_tokens else (1,)


def tied_layers(layers: Sequence[PipelineLayer]) -> dict[int, int]:
    """``{k: j}``: layer k holds a copy of layer j's weights (format v3's ``tied_to``).

    A layer with a tied piece (an LM head tied to the input embedding,
    ``Piece.tied_params``) is tied to the embedding layer of its module,
    the last one before it.
    """
    out = {}
    for k, layer in enumerate(layers):
        if not any(p.tied_params for p in layer.pieces):
            continue
        owners = [j for j in range(k) if layers[j].role == "embedding" and layers[j].module == layer.module]
        if owners:
            out[k] = owners[-1]
    return out


def cost_signature(layer: PipelineLayer) -> tuple[Piece, ...]:
    """What :func:`layouts_for` and :func:`~.entry.layer_cost` read of ``layer``: its pieces without their names.

    Layers with equal signatures (the blocks of one module) have equal cost
    entries in every layout, so :func:`build_problem` computes them once.
    """
    return tuple(replace(p, name="", module="") for p in layer.pieces)


def recompute_settings(layers: Sequence[PipelineLayer], cluster: ClusterSpec, opts: CostOptions) -> tuple[str, ...]:
    """The recompute settings below full that ``variants=all`` adds (option ``recompute_modules``).

    ``auto``: :func:`~.memory.recompute.module_chain` over the model's block kinds,
    each weighted by its number of layers, measured at one reference point
    (tp 1, one sample, cp 1: the ratio of bytes freed to time replayed that
    orders the modules barely depends on the layout) with this cluster and
    these options: per module, the activation bytes it frees and the
    backward time it adds (:func:`~.entry.layer_terms`), and the same for
    full recompute.
    """
    requested = opts.recompute_modules
    if requested == ("none",):
        return ()
    if requested != ("auto",):
        return requested
    kinds: dict[tuple[Piece, ...], list] = {}
    for layer in layers:
        pieces = tuple(p for p in layer.pieces if p.shape is not None and p.backward)
        if pieces:
            kinds.setdefault(cost_signature(replace(layer, pieces=pieces)), [pieces, 0])[1] += 1
    candidates = []
    for pieces, count in kinds.values():
        _, b_none, _, act_none = layer_terms(pieces, 1, 1.0, "none", cluster, opts)
        _, b_full, _, act_full = layer_terms(pieces, 1, 1.0, "full", cluster, opts)
        freed, replay = {}, {}
        for m in sorted(set().union(*(applicable_modules(p) for p in pieces))):
            _, b_m, _, act_m = layer_terms(pieces, 1, 1.0, setting_of([m]), cluster, opts)
            freed[m], replay[m] = count * (act_none - act_m), count * (b_m - b_none)
        candidates.append((freed, replay, count * (act_none - act_full), count * (b_full - b_none)))
    return tuple(module_chain(candidates))


def job_cluster_fields(cluster: ClusterSpec, nodes: int, gpus: int | None) -> dict[str, Any]:
    """The partial-rack fields of a problem's cluster for a job on ``gpus`` GPUs of ``nodes`` nodes (None: all).

    With ``gpus``, stage sizes inside a node follow the preset's ``stage_sizes`` (rule 3's powers of two
    when it states none); when the last node is used in part, ``devices`` is ``gpus`` and the GPUs used on
    that node are a stage size too (a 64-GPU job on one NVL72 rack may be one 64-GPU stage). DESIGN.md,
    "Partial racks".

    Raises
    ------
    ProblemError
        ``gpus`` is not an integer in ``(nodes - 1) * gpus_per_node + 1 .. nodes * gpus_per_node`` (path ``gpus``).
    """
    if gpus is None:
        return {}
    g = cluster.gpus_per_node
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not (nodes - 1) * g < gpus <= nodes * g:
        uses = (f"part or all of one {cluster.name} node" if nodes == 1 else
                f"every GPU of {nodes - 1} {cluster.name} nodes and part or all of one more (give fewer nodes for a "
                "smaller job)")
        raise ProblemError(f"must be an integer in {(nodes - 1) * g + 1}..{nodes * g}: the job uses {uses}, got {gpus!r}",
                           path="gpus")
    fields: dict[str, Any] = {}
    sizes = None if cluster.stage_sizes is None else set(cluster.stage_sizes)
    last = gpus - (nodes - 1) * g
    if last < g:
        fields["devices"] = gpus
        if sizes is None:
            sizes = {1 << i for i in range(g.bit_length()) if g % (1 << i) == 0}
        sizes.add(last)
    if sizes is not None:
        fields["stage_sizes"] = sorted(sizes)
    return fields


def cluster_layouts(gpus_per_node: int, nodes: int, cp_degrees: Sequence[int] = (1,), *,
                    stage_sizes: Sequence[int] | None = None, devices: int | None = None) -> list[Layout]:
    """Every (dp, tp, cp) whose size dp x tp x cp rule 3 allows, tp a power of two within a node, cp from
    ``cp_degrees``: first the cp = 1 layouts (format v1's), then each cp > 1 in turn. ``stage_sizes`` and
    ``devices``: the cluster's partial-rack fields (:func:`job_cluster_fields`)."""
    cluster = Cluster(nodes, gpus_per_node, 1, 1.0, 1.0, None,
                      None if stage_sizes is None else tuple(sorted(stage_sizes)), devices)
    out = []
    for cp in [1, *sorted(set(cp_degrees) - {1})]:
        for d in cluster.allowed_sizes():
            if d % cp:
                continue
            tp = 1
            while tp <= min(d // cp, gpus_per_node):
                if (d // cp) % tp == 0:
                    lay = Layout(d // (cp * tp), tp, cp=cp)
                    if cluster.allows(lay):
                        out.append(lay)
                tp *= 2
    return out



def build_problem(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    *,
    nodes: int,
    global_batch: int,
    microbatches: int,
    options: Mapping[str, Any] | CostOptions | None = None,
    objective: str = "iteration",
    profile: str | Path | Sequence[Mapping[str, Any]] | None = None,
    max_stages: int | None = None,
    gpus: int | None = None,
) -> Problem:
    """A problem for training ``model`` on ``nodes`` nodes of ``cluster``.

    Format v1, v2 with ``variants``, v3 when a layer is tied to another
    (an LM head tied to the input embedding: ``tied_to`` and its entries'
    ``tied_weight_bytes``, :func:`tied_layers`) or a layout uses cp or ep.

    Parameters
    ----------
    model, cluster : str or spec
        A preset name, a YAML/``config.json`` path, or a spec object.
    nodes : int
        Nodes of the cluster to use.
    global_batch : int
        Samples per iteration; each of the ``microbatches`` microbatches holds
        ``global_batch / microbatches`` samples, split over each stage's dp.
    options : mapping or CostOptions, optional
        Cost-model options (:class:`CostOptions`).
    objective : {"iteration", "bottleneck"}
    profile : path or records, optional
        Profiled per-layer times replacing the analytic ones (:func:`~.profile.apply_profile`).
    max_stages : int, optional
        Upper bound on the number of stages (default: min(layers, GPUs)).
    gpus : int, optional
        GPUs the job uses (default: all): the cluster's partial-rack fields (:func:`job_cluster_fields`).

    Returns
    -------
    Problem
        One cost entry per allowed layout; ``meta`` carries the model name,
        batch, FLOPs per iteration, peak FLOPs and per-layer export hints.
    """
    builder = ProblemBuilder(model, cluster, nodes=nodes, options=options, objective=objective, profile=profile,
                             max_stages=max_stages, gpus=gpus)
    return builder.build(global_batch, microbatches)


class ProblemBuilder:
    """:func:`build_problem` for one model, cluster, node count and options, at any batch and microbatch count.

    What does not depend on the batch -- the pipeline layers and their
    :func:`cost_signature` s, the knob settings, the cluster's layouts -- is
    worked out at the first :meth:`build` (and again while it raises, so the
    errors come in build_problem's order); the compute terms of a signature
    at (tp, samples per replica, recompute) (:func:`~.entry.layer_terms`)
    are kept across builds: every dp and ZeRO stage shares them, and so do
    the microbatch counts m whose m x dp give the same samples.
    ``build(global_batch, m)`` equals ``build_problem`` with the same arguments.

    ``terms``: a :class:`TermsStore` of the same model and job shared with
    other builders (whose options may differ in the weight-memory count);
    default: the builder's own.
    """

    def __init__(self, model: str | ModelSpec, cluster: str | ClusterSpec, *, nodes: int,
                 options: Mapping[str, Any] | CostOptions | None = None, objective: str = "iteration",
                 profile: str | Path | Sequence[Mapping[str, Any]] | None = None, max_stages: int | None = None,
                 gpus: int | None = None, terms: TermsStore | None = None):
        self.spec = load_model(model)
        self.cluster = load_cluster(cluster)
        self.opts = CostOptions.from_mapping(options)
        self.nodes, self.objective, self.profile, self.max_stages = nodes, objective, profile, max_stages
        self.gpus = gpus
        self._static: tuple[list[PipelineLayer], list[int], list[Knobs] | None, list[Layout]] | None = None
        self.store = terms if terms is not None else TermsStore(self.spec, self.cluster, nodes, gpus)
        self._terms = self.store.table(self.spec, self.cluster, nodes, gpus, self.opts)
        self._dense: dict[int, tuple[Piece, ...]] = {}  # a MoE layer signature's dense pieces
        self._experts = {m.name: m.experts for m in self.spec.modules if m.experts > 0}

    def _layers(self) -> tuple[list[PipelineLayer], list[int], list[Knobs] | None, list[Layout]]:
        """(layers, each layer's signature number, knob settings, cluster layouts), worked out once."""
        if self._static is None:
            layers = model_layers(self.spec, self.opts)
            knob_list = variant_knobs(self.opts.variants, flash_attention=self.opts.flash_attention,
                                      modules=recompute_settings(layers, self.cluster, self.opts))
            job = job_cluster_fields(self.cluster, self.nodes, self.gpus)
            all_layouts = cluster_layouts(self.cluster.gpus_per_node, self.nodes, cp_offered(layers, self.opts),
                                          stage_sizes=job.get("stage_sizes"), devices=job.get("devices"))
            numbers: dict[tuple[Piece, ...], int] = {}
            ids = [numbers.setdefault(cost_signature(layer), len(numbers)) for layer in layers]
            self._static = (layers, ids, knob_list, all_layouts)
        return self._static

    def _experts_offered(self, all_layouts: Sequence[Layout]) -> bool:
        """Whether some layer gets ep keys (a module with routed experts and a layout that splits them)."""
        return any(ep_splits(n, lay, self.cluster.gpus_per_node, self.opts) for n in self._experts.values()
                   for lay in all_layouts)

    def _layer_terms(self, layer: PipelineLayer, signature: int, lay: Layout, samples: float, recompute: str,
                     moe: bool) -> Terms:
        """:func:`~.axes.wiring.cp_layer_terms` of ``layer`` (a MoE layer: of its dense part), computed once per key."""
        key = (signature, lay.tp, samples, recompute, lay.cp, lay.devices if lay.cp > 1 else 0)
        terms = self._terms.get(key)
        if terms is None:
            pieces = self._dense_pieces(layer, signature) if moe else None
            terms = self._terms[key] = cp_layer_terms(layer, lay, samples, recompute, self.cluster, self.opts, pieces)
            self.store.computed += 1
        return terms

    def _dense_pieces(self, layer: PipelineLayer, signature: int) -> tuple[Piece, ...]:
        """:func:`~.axes.wiring.moe_dense_pieces` of a MoE layer, once per signature."""
        found = self._dense.get(signature)
        if found is None:
            found = self._dense[signature] = moe_dense_pieces(layer)
        return found

    def _table(self, layer: PipelineLayer, signature: int, all_layouts: Sequence[Layout], mb: int, microbatches: int,
               knob_list: list[Knobs] | None, deadline: Deadline, zero: int | None = None,
               keep: Callable[[Layout], bool] | None = None) -> dict[str, Any]:
        """The ``costs`` document of ``layer``: one entry per usable layout and knob setting, in order of emission.

        ``deadline`` is checked before each layout (:class:`~partitioner.core.deadline.TimeLimitReached`);
        ``zero``: only the knob settings of that ZeRO stage, and every setting at dp = 1 (:meth:`build`);
        ``keep``: only the layouts it accepts (:meth:`build`).
        """
        cl, opts = self.cluster, self.opts
        allowed = [lay for lay in layouts_for(layer, all_layouts, mb, opts) if keep is None or keep(lay)]
        if not allowed:
            raise ProblemError(
                f"layer {layer.name} has no usable layout: dp must divide the microbatch of {mb} samples "
                f"and tp its heads and widths",
                path="microbatches",
            )
        costs = {}
        variants: Sequence[Knobs | None] = knob_list or [None]
        experts = self._experts.get(layer.module, 0)
        moe = any(p.moe is not None for p in layer.pieces)
        for lay in allowed:
            deadline.check(f"building m={microbatches}: layer {layer.name}, layout {lay.key}")
            samples = mb / lay.dp
            for kn in variants:
                if kn is not None and not applies(kn, lay.dp * lay.cp):
                    continue
                if zero is not None and kn is not None and kn.zero != zero and lay.dp > 1:
                    continue
                knobs = kn if kn is not None else Knobs(1 if opts.zero1 else 0, opts.recompute)  # layer_cost's default
                config = Layout(lay.dp, lay.tp, kn.name if kn is not None else "", cp=lay.cp)
                # the compute terms depend on tp, the samples and recompute; under cp on the cp group's span too
                terms = self._layer_terms(layer, signature, lay, samples, knobs.recompute, moe)
                dense = self._dense_pieces(layer, signature) if moe else None
                if moe:  # the routed experts as GPUs run them, E local experts at ep = 1 (DESIGN.md, MoE physics)
                    entry = moe_ep_cost(layer, config, samples, cl, opts, microbatches, knobs, nodes=self.nodes,
                                        dense=dense, terms=terms).to_dict()
                else:
                    entry = finish_cost(layer, sync_layout(config), terms, cl, opts, microbatches, knobs,
                                        nodes=self.nodes).to_dict()
                costs[config.key] = entry
                for ep, etp in (ep_splits(experts, config, cl.gpus_per_node, opts) if experts else ()):
                    split = replace(config, ep=ep, etp=etp)
                    # a dense layer of a MoE module: ep and etp change nothing (DESIGN.md, format v3)
                    costs[split.key] = moe_ep_cost(layer, split, samples, cl, opts, microbatches, knobs,
                                                   nodes=self.nodes, dense=dense, terms=terms).to_dict() if moe else entry
        return costs

    def build(self, global_batch: int, microbatches: int, deadline: Deadline | None = None, *,
              zero: int | None = None, keep: Callable[[Layout], bool] | None = None) -> Problem:
        """The problem at ``global_batch`` samples per iteration in ``microbatches`` microbatches.

        With ``deadline``, checked between layouts of each layer's table: once it has passed, the build stops
        with :class:`~partitioner.core.deadline.TimeLimitReached` (nothing half-built is kept; the compute terms
        found so far stay in the builder's :class:`TermsStore`).

        ``zero``: a partial problem holding only the entries of knob settings of that ZeRO stage, and every
        entry at dp = 1 (where no setting shards anything): what a target's count at that stage is read from
        (:func:`~partitioner.planning.targets.memory.merge_stages`). A layer left with no entry keeps all of
        its entries.

        ``keep``: a partial problem holding only the layouts (dp, tp, cp) ``keep`` accepts, their ep splits
        included: a baseline's own layouts, built in a fraction of the time (``plan``'s first plan under a
        short limit, :func:`~partitioner.planning.search.screening.screen_counts`). A layer with none of them
        is refused (:class:`~partitioner.problem.ProblemError`, as a layer with no usable layout).
        """
        clock = deadline if deadline is not None else Deadline(None)
        spec, cl, opts = self.spec, self.cluster, self.opts
        nodes, objective, profile, max_stages = self.nodes, self.objective, self.profile, self.max_stages
        for name, value in (("nodes", nodes), ("global_batch", global_batch), ("microbatches", microbatches)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProblemError(f"must be a positive integer, got {value!r}", path=name)
        if global_batch % microbatches:
            raise ProblemError(
                f"global batch {global_batch} is not divisible into {microbatches} microbatches", path="microbatches"
            )
        if objective not in OBJECTIVES:
            raise ProblemError(f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}", path="objective")
        mb = global_batch // microbatches
        check_precision(cl, opts)  # a recipe the cluster's GPUs cannot run is bad input
        job = job_cluster_fields(cl, nodes, self.gpus)  # the partial-rack fields (plan --gpus), checked first
        layers, signatures, knob_list, all_layouts = self._layers()
        memory = usable_memory_bytes(cl, opts)
        if memory <= 0:
            raise ProblemError("memory_reserve_bytes leaves no GPU memory", path="options.memory_reserve_bytes")

        doc_layers = []
        tables: dict[int, dict[str, Any]] = {}  # cost signature -> the costs table its layers share
        ties = tied_layers(layers)
        for k, (layer, signature) in enumerate(zip(layers, signatures)):
            costs = tables.get(signature)
            if costs is None:
                costs = self._table(layer, signature, all_layouts, mb, microbatches, knob_list, clock, zero, keep)
                if not costs and zero is not None:  # no entry of that stage and no dp = 1 layout: all of them
                    costs = self._table(layer, signature, all_layouts, mb, microbatches, knob_list, clock, keep=keep)
                tables[signature] = costs
            if profile is not None:
                costs = dict(costs)  # the profile replaces entries of single layers' tables
            doc_layer: dict[str, Any] = {"name": layer.name, "module": layer.module,
                                         "out_bytes": int(round(mb * layer.out_bytes_per_sample)), "costs": costs}
            if k in ties:
                doc_layer["tied_to"] = ties[k]
            doc_layers.append(doc_layer)
        flops_sample = model_flops_per_sample(layers)
        meta = {
            "generator": "partitioner.costs",
            "model": spec.name,
            "cluster": cl.name,
            "nodes": nodes,
            "global_batch": global_batch,
            "microbatch_size": mb,
            "llm_tokens_per_sample": spec.llm_tokens,
            "model_flops_per_iteration": flops_sample * global_batch,
            "forward_flops_per_sample": forward_flops(layers),
            "peak_flops_per_gpu": cl.peak_tflops * 1e12,
            "params": spec.params,
            "options": opts.to_dict(),
            **({"precision": fp8} if (fp8 := precision_summary(cl, opts)) else {}),
            "layers": [
                {"name": layer.name, "module": layer.module, "role": layer.role, "params": layer.params, "fqns": list(layer.fqns),
                 "recompute_modules": sorted(set().union(*(applicable_modules(p) for p in layer.pieces)))}
                for layer in layers
            ],
        }
        doc: dict[str, Any] = {
            "version": 3 if ties or any(lay.is_v3 for lay in all_layouts) or self._experts_offered(all_layouts)
            else 1 if knob_list is None else 2,
            "name": f"{spec.name}-{cl.name}-{nodes}n-b{global_batch}-m{microbatches}",
            "cluster": {
                "nodes": nodes,
                "gpus_per_node": cl.gpus_per_node,
                "gpu_memory_bytes": int(memory),
                "intra_node_GBps": cl.intra_node_GBps,
                "inter_node_GBps": cl.inter_node_GBps,
                **job,
                **({"levels": [level_doc(v) for v in cl.levels]} if cl.levels is not None else {}),
            },
            "training": {"microbatches": microbatches, "objective": objective},
            "layers": doc_layers,
            "meta": meta,
        }
        if knob_list is not None:
            doc["variants"] = {kn.name: describe(kn) + describe_precision(opts) for kn in knob_list if kn.name}
        if max_stages is not None:
            if isinstance(max_stages, bool) or not isinstance(max_stages, int) or max_stages < 1:
                raise ProblemError(f"must be a positive integer, got {max_stages!r}", path="max_stages")
            doc["stages"] = {"min": 1, "max": min(max_stages, len(doc_layers), job.get("devices", nodes * cl.gpus_per_node))}
        if profile is not None:
            records = load_profile(profile) if isinstance(profile, (str, Path)) else list(profile)
            doc = _apply_profile_doc(doc, records, source=str(profile) if isinstance(profile, (str, Path)) else "profile")
        # reading the document back checks every entry: about a CPU second on 1,024 GPUs, not started past the deadline
        clock.check(f"building m={microbatches}: checking the problem")
        return Problem.from_dict(doc)

