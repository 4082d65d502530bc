"""Seeded synthetic VLA-shaped problems for solver benchmarks.

:func:`synthetic_problem` draws a v1 problem shaped like a vision-language-
action model: a vision encoder (cheap weights, large activations, poor
tensor-parallel efficiency), a projector, a language backbone (heavy
weights) and an action head (heavy compute at the tail), on a cluster of
``nodes x gpus_per_node`` GPUs with every layout the cluster allows (or a
chosen few). Memory is set from the footprint of the model so that it binds:
``gpu_memory_bytes = headroom x (weights + m x activations) / N``, the
perfectly sharded footprint times a headroom factor -- plans that replicate
weights over many data-parallel ranks do not fit.

The same arguments and seed always give the same problem (and so the same
batch key). Nothing here is a measured profile: it is a family of
realistic-looking, hard-enough instances for timing and comparing solvers.

Usage::

    from benchmarks.synthetic import synthetic_problem
    problem = synthetic_problem(layers=64, nodes=4, gpus_per_node=8, seed=3)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from partitioner.problem import Cluster, Layout, Problem

__all__ = [
    "ModuleShape", "MODULES", "VARIANTS", "VLA_MODULES", "synthetic_problem", "synthetic_v2_problem",
    "synthetic_v3_problem", "tied_v3_document", "vla_problem", "vla_v3_problem",
    "layout_keys", "write_problems",
]

GB = 10**9


@dataclass(frozen=True)
class ModuleShape:
    """Per-layer scales of one module, before noise (on one GPU, one microbatch)."""

    name: str
    share: float  # fraction of the layers
    fwd_ms: float
    weight_bytes: float
    act_bytes: float
    out_bytes: float
    tp_overhead: float  # time lost per extra tensor-parallel rank (small GEMMs scale badly)


# Shapes loosely after a ViT-L vision tower, a 7B LLaMA-style backbone and a
# diffusion action head (weights with Adam states at 16 B/param).
MODULES = (
    ModuleShape("vision", 0.25, 3.0, 0.25 * GB, 1.6 * GB, 40e6, 0.30),
    ModuleShape("projector", 0.0, 1.0, 0.10 * GB, 0.2 * GB, 60e6, 0.15),  # exactly one layer
    ModuleShape("llm", 0.60, 6.0, 3.2 * GB, 0.8 * GB, 30e6, 0.08),
    ModuleShape("action", 0.15, 9.0, 0.6 * GB, 0.4 * GB, 10e6, 0.12),
)


def layout_keys(nodes: int, gpus_per_node: int, layouts: int | Sequence[str] | None = None) -> list[Layout]:
    """The layouts to give each layer.

    ``None``: every (dp, tp) the cluster allows; an int ``k``: for every
    allowed stage size, the ``k`` layouts with the smallest tp; a sequence
    of keys (``"dp2tp4"``): exactly those.
    """
    cluster = Cluster(nodes, gpus_per_node, 1, 1.0, 1.0)
    if layouts is not None and not isinstance(layouts, int):
        return [Layout.parse(k) for k in layouts]
    chosen = []
    for d in cluster.allowed_sizes():
        options = [Layout(d // tp, tp) for tp in range(1, min(d, gpus_per_node) + 1) if d % tp == 0 and tp & (tp - 1) == 0]
        chosen.extend(options if layouts is None else options[: max(1, layouts)])
    return chosen


def _module_of_layers(layers: int) -> list[ModuleShape]:
    vision, projector, llm, action = MODULES
    if layers < 4:
        return [llm] * layers
    n_vision = max(1, round(vision.share * layers))
    n_action = max(1, round(action.share * layers))
    n_llm = layers - n_vision - n_action - 1
    if n_llm < 1:
        n_vision -= 1
        n_llm += 1
    return [vision] * n_vision + [projector] + [llm] * n_llm + [action] * n_action


def _drawn_layer(shape: ModuleShape, lays: Sequence[Layout], draw: Callable[[float], float],
                 rng: np.random.Generator) -> tuple[dict[str, dict], float, float, float]:
    """One layer of ``shape`` drawn at random: its costs on every layout of ``lays``, its weight, activation
    and output bytes. Data parallelism splits the microbatch; tensor parallelism splits the GEMMs but loses
    efficiency per extra rank; a fixed per-layer overhead (0.02 ms) bounds the speed-up."""
    fwd1, weight, act, out = draw(shape.fwd_ms), draw(shape.weight_bytes), draw(shape.act_bytes), draw(shape.out_bytes)
    bwd_ratio = 2.0 * float(rng.uniform(0.9, 1.1))
    costs = {}
    for lay in lays:
        efficiency = 1.0 / (1.0 + shape.tp_overhead * (lay.tp - 1))
        fwd = fwd1 / (lay.dp * lay.tp * efficiency) + 0.02
        costs[lay.key] = {
            "fwd_ms": round(fwd, 4),
            "bwd_ms": round(fwd * bwd_ratio, 4),
            "weight_bytes": int(weight / lay.tp),
            "act_bytes": int(act / lay.devices),
        }
    return costs, weight, act, out


def synthetic_problem(
    layers: int = 64,
    nodes: int = 4,
    gpus_per_node: int = 8,
    layouts: int | Sequence[str] | None = None,
    transfers: bool = True,
    *,
    seed: int = 0,
    microbatches: int = 8,
    headroom: float = 1.25,
    noise: float = 0.15,
    objective: str = "iteration",
    name: str | None = None,
) -> Problem:
    """A seeded VLA-shaped v1 problem (see the module docstring).

    Parameters
    ----------
    layers, nodes, gpus_per_node : int
    layouts : int, sequence of str or None
        See :func:`layout_keys`.
    transfers : bool
        ``False`` sets every ``out_bytes`` to 0 (free stage boundaries).
    seed : int
    microbatches : int
    headroom : float
        GPU memory as a multiple of the perfectly sharded footprint; smaller is tighter.
    noise : float
        Relative spread of the per-layer scales (log-normal).
    objective : {"iteration", "bottleneck"}
    """
    if layers < 1 or nodes < 1 or gpus_per_node < 1:
        raise ValueError("layers, nodes and gpus_per_node must be >= 1")
    rng = np.random.default_rng([seed, layers, nodes, gpus_per_node, int(transfers)])
    lays = layout_keys(nodes, gpus_per_node, layouts)
    shapes = _module_of_layers(layers)

    def draw(scale: float) -> float:
        return float(scale * rng.lognormal(0.0, noise))

    docs = []
    total_weight = total_act = 0.0
    counters: dict[str, int] = {}
    for shape in shapes:
        costs, weight, act, out = _drawn_layer(shape, lays, draw, rng)
        total_weight += weight
        total_act += act
        k = counters.get(shape.name, 0)
        counters[shape.name] = k + 1
        docs.append(
            {"name": f"{shape.name}.{k}", "module": shape.name, "out_bytes": int(out) if transfers else 0, "costs": costs}
        )
    n = nodes * gpus_per_node
    memory = int(headroom * (total_weight + microbatches * total_act) / n)
    doc = {
        "version": 1,
        "name": name or f"synthetic-L{layers}-{nodes}x{gpus_per_node}-s{seed}",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "gpu_memory_bytes": memory,
            "intra_node_GBps": 300.0,
            "inter_node_GBps": 25.0,
        },
        "training": {"microbatches": microbatches, "objective": objective},
        "layers": docs,
        "meta": {
            "generator": "benchmarks.synthetic",
            "seed": seed,
            "layouts": [lay.key for lay in lays],
            "transfers": transfers,
            "headroom": headroom,
        },
    }
    return Problem.from_dict(doc)


# The three modules of :func:`vla_problem` and the largest tensor-parallel degree each allows (its small
# GEMMs scale badly): a vision tower, a language backbone and an action head, each with its own scales.
VLA_MODULES = (
    (ModuleShape("vision", 0.0, 3.0, 0.25 * GB, 1.6 * GB, 40e6, 0.30), 2),
    (ModuleShape("llm", 0.0, 6.0, 3.2 * GB, 0.8 * GB, 30e6, 0.08), 8),
    (ModuleShape("action", 0.0, 9.0, 0.6 * GB, 0.4 * GB, 10e6, 0.12), 4),
)


def vla_problem(
    vision: int = 32,
    llm: int = 192,
    action: int = 32,
    nodes: int = 32,
    gpus_per_node: int = 8,
    transfers: bool = True,
    *,
    seed: int = 0,
    microbatches: int = 32,
    headroom: float = 1.25,
    noise: float = 0.15,
    objective: str = "iteration",
) -> Problem:
    """A seeded v1 problem of three modules with their own layouts (issue 28's VLA shape).

    ``vision``, ``llm`` and ``action`` layers (:data:`VLA_MODULES`) in that order; each module's
    layers list every layout the cluster allows up to the module's largest tensor-parallel degree,
    so a stage spanning two modules has only the layouts both allow, and every stage size stays
    allowed (on 32 x 8 GPUs: 35 sizes, 52 placement states of the DP's run automaton). Costs,
    memory and transfers are drawn as in :func:`synthetic_problem`; 32 microbatches by default
    (the DP's stage-count levels grow with them).
    """
    if min(vision, llm, action) < 0 or vision + llm + action < 1 or nodes < 1 or gpus_per_node < 1:
        raise ValueError("layer counts must be >= 0 with at least one layer; nodes and gpus_per_node >= 1")
    rng = np.random.default_rng([seed, vision, llm, action, nodes, gpus_per_node, int(transfers), 28])
    every = layout_keys(nodes, gpus_per_node, None)

    def draw(scale: float) -> float:
        return float(scale * rng.lognormal(0.0, noise))

    docs = []
    total_weight = total_act = 0.0
    for (shape, tp_max), count in zip(VLA_MODULES, (vision, llm, action)):
        lays = [lay for lay in every if lay.tp <= tp_max]
        for k in range(count):
            costs, weight, act, out = _drawn_layer(shape, lays, draw, rng)
            total_weight += weight
            total_act += act
            docs.append({"name": f"{shape.name}.{k}", "module": shape.name, "out_bytes": int(out) if transfers else 0,
                         "costs": costs})
    n = nodes * gpus_per_node
    doc = {
        "version": 1,
        "name": f"vla-{vision}-{llm}-{action}-{nodes}x{gpus_per_node}-s{seed}",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "gpu_memory_bytes": int(headroom * (total_weight + microbatches * total_act) / n),
            "intra_node_GBps": 300.0,
            "inter_node_GBps": 25.0,
        },
        "training": {"microbatches": microbatches, "objective": objective},
        "layers": docs,
        "meta": {"generator": "benchmarks.synthetic.vla_problem", "seed": seed, "transfers": transfers,
                 "headroom": headroom},
    }
    return Problem.from_dict(doc)


# Memory knobs of the v2 twin (format v2 variants), as the cost model words them.
VARIANTS = {
    "recompute": "full activation recompute: keeps block inputs only, the backward runs the forward again",
    "zero1": "ZeRO-1: optimizer states (12 of the 16 bytes per parameter) sharded over the dp ranks",
}


def synthetic_v2_problem(
    layers: int = 64,
    nodes: int = 4,
    gpus_per_node: int = 8,
    layouts: int | Sequence[str] | None = None,
    transfers: bool = True,
    **kwargs,
) -> Problem:
    """The format-v2 twin of :func:`synthetic_problem` with the same arguments: the same layers,
    modules and plain configs, plus two variants per config (:data:`VARIANTS`), so 3 variants.

    ``recompute`` keeps 15 % of the activations and adds a forward to the
    backward; ``zero1`` keeps 4 + 12 / dp of the 16 bytes per parameter and
    adds 3 % to the step for its gathers. Stages may give each module segment
    its own config.
    """
    base = synthetic_problem(layers, nodes, gpus_per_node, layouts, transfers, **kwargs)
    doc = base.to_dict()
    doc["version"] = 2
    doc["name"] = base.name + "-v2"
    doc["variants"] = dict(VARIANTS)
    for layer in doc["layers"]:
        extra = {}
        for key, c in layer["costs"].items():
            dp = Layout.parse(key).dp
            extra[f"{key}/recompute"] = {
                **c, "bwd_ms": round(c["bwd_ms"] + c["fwd_ms"], 4), "act_bytes": int(c["act_bytes"] * 0.15)
            }
            extra[f"{key}/zero1"] = {
                **c,
                "fwd_ms": round(c["fwd_ms"] * 1.03, 4),
                "bwd_ms": round(c["bwd_ms"] * 1.03, 4),
                "weight_bytes": int(c["weight_bytes"] * (4 + 12 / dp) / 16),
            }
        layer["costs"].update(extra)
    return Problem.from_dict(doc)


# The v3 twin's axes (issue 24): every layout also with cp = 2 and cp = 4, the MoE layers with ep in {1, 2, 4, 8}.
V3_CP = (2, 4)
V3_EP = (2, 4, 8)


def synthetic_v3_problem(
    layers: int = 64,
    nodes: int = 4,
    gpus_per_node: int = 8,
    layouts: int | Sequence[str] | None = None,
    transfers: bool = True,
    **kwargs,
) -> Problem:
    """The format-v3 twin of :func:`synthetic_problem` with the same arguments (issue 24's benchmark).

    The same layers, modules, GPUs and plain configs; every config (dp, tp)
    also runs as (dp / C, tp, C) for C in :data:`V3_CP` where C divides dp
    (the same devices, the sequence split instead of the batch: the same
    bytes per GPU, and a ring-attention share of 4 % per extra cp rank in
    the time); and every other language layer is a MoE layer with ep in
    :data:`V3_EP` (ep dividing the devices; experts hold 3/4 of the layer's
    weights, split over ep; the all-to-alls add 2 % per doubling). The
    other language layers are its dense neighbours in the same module: they
    carry the same ep keys with their ep = 1 entry (DESIGN.md: ep changes
    nothing on a dense layer).
    """
    base = synthetic_problem(layers, nodes, gpus_per_node, layouts, transfers, **kwargs)
    return _with_5d_keys(base, V3_EP)


def tied_v3_document(layers: int = 64, nodes: int = 4, gpus_per_node: int = 8, *, share: float = 0.5, **kwargs) -> dict:
    """The document of :func:`synthetic_v3_problem` with its last layer tied to the first (format v3's
    ``tied_to``: an LM head sharing the embedding's weights), ``share`` of each of its entries' weight bytes
    being the shared copy (``tied_weight_bytes``). A dict, for tests and campaigns that edit it."""
    doc = synthetic_v3_problem(layers, nodes, gpus_per_node, **kwargs).to_dict()
    if layers >= 2:
        head = doc["layers"][-1]
        head["tied_to"] = 0
        for entry in head["costs"].values():
            entry["tied_weight_bytes"] = int(entry["weight_bytes"] * share)
    return doc


# issue 34's 5D VLA shape: every layout also at cp 2 and 4, the language layers with ep 1..8 (MoE-like keys)
VLA_V3_EP = tuple(range(1, 9))
MOE_EVERY = 2  # every other language layer is a MoE layer


def vla_v3_problem(
    vision: int = 32,
    llm: int = 192,
    action: int = 32,
    nodes: int = 32,
    gpus_per_node: int = 8,
    transfers: bool = True,
    **kwargs,
) -> Problem:
    """The 5D twin of :func:`vla_problem` with the same arguments (issue 34's slow case for the dp).

    The same layers, modules and plain configs; every config (dp, tp) also
    runs as (dp / C, tp, C) for C in :data:`V3_CP` where C divides dp (the
    sequence split instead of the batch: the same bytes per GPU, a
    ring-attention share of 4 % per extra cp rank in the time); and every
    language layer carries every ep in :data:`VLA_V3_EP` that divides its
    devices: every other one a MoE layer (experts hold 3/4 of its weights,
    split over ep; the all-to-alls add 2 % per doubling of ep), the others
    dense, with their ep = 1 entry under every ep (DESIGN.md: ep changes
    nothing on a dense layer). On 32 x 8 GPUs a language layer has about
    1,650 keys.
    """
    base = vla_problem(vision, llm, action, nodes, gpus_per_node, transfers, **kwargs)
    return _with_5d_keys(base, VLA_V3_EP)


def _with_5d_keys(base: Problem, ep_degrees: Sequence[int]) -> Problem:
    """``base`` as format v3: every config (dp, tp) also at cp = C for C in :data:`V3_CP` dividing dp (4 % slower
    per extra cp rank, the same bytes), and every language layer at every ep in ``ep_degrees`` dividing its
    devices -- each :data:`MOE_EVERY`-th one a MoE layer (experts hold 3/4 of its weights, split over ep; 2 %
    slower per doubling of ep), the others with their ep = 1 entry under every ep."""
    doc = base.to_dict()
    doc["version"] = 3
    doc["name"] = base.name + "-v3"
    llm_seen = 0
    for layer in doc["layers"]:
        moe = layer["module"] == "llm" and llm_seen % MOE_EVERY == MOE_EVERY - 1
        llm_seen += layer["module"] == "llm"
        extra = {}
        for key, c in layer["costs"].items():
            lay = Layout.parse(key)
            for cp in V3_CP:
                if lay.dp % cp == 0:
                    slow = 1.0 + 0.04 * (cp - 1)
                    extra[Layout(lay.dp // cp, lay.tp, "", cp).key] = {
                        **c, "fwd_ms": round(c["fwd_ms"] * slow, 4), "bwd_ms": round(c["bwd_ms"] * slow, 4)
                    }
        layer["costs"].update(extra)
        if layer["module"] != "llm":
            continue
        experts = {}
        for key, c in layer["costs"].items():
            lay = Layout.parse(key)
            for ep in ep_degrees:
                if lay.devices % ep:
                    continue
                entry = c
                if moe and ep > 1:
                    slow = 1.0 + 0.02 * math.log2(ep)
                    entry = {**c, "fwd_ms": round(c["fwd_ms"] * slow, 4), "bwd_ms": round(c["bwd_ms"] * slow, 4),
                             "weight_bytes": int(c["weight_bytes"] * (0.25 + 0.75 / ep))}
                experts[Layout(lay.dp, lay.tp, "", lay.cp, ep).key] = entry
        layer["costs"].update(experts)
    return Problem.from_dict(doc)


def write_problems(directory, count: int, *, first_seed: int = 0, suffix: str = ".json", **kwargs) -> list:
    """Write ``count`` problems with seeds ``first_seed ..`` into ``directory``; return the paths."""
    from pathlib import Path

    from partitioner.problem import dump_problem

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in range(first_seed, first_seed + count):
        problem = synthetic_problem(seed=seed, **kwargs)
        path = directory / f"{problem.name}{suffix}"
        dump_problem(problem, path)
        paths.append(path)
    return paths
