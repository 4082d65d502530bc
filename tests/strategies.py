"""Hypothesis strategies: random small v1, v2 and v3 problems and random valid plans for them.

Small means at most 7 layers and 8 GPUs on 1-4 nodes, so that ``brute`` can
serve as the oracle. Costs, memory pressure, transfer sizes, bandwidths
(NVLink sometimes *slower* than the network), layouts per layer, stage
bounds and both objectives are all drawn.

:func:`small_v2_problems` adds format v2: 2-4 modules in runs (so stages
have several segments, each with its own config and reshards between
them), memory-knob variants ``zero3`` (weights / dp, slower) and
``recompute-full`` (activations cut, a forward added to the backward), and
memory tight enough that variants and tp decide what fits.
:func:`random_plans` draws one config per segment, so it serves both formats.
"""
from __future__ import annotations

from hypothesis import assume, settings
from hypothesis import strategies as st

from partitioner.cluster.placement import node_assignment_ids, size_sequences
from partitioner.plan import Plan, Stage
from partitioner.problem import Cluster, Layout, Problem
from partitioner.solvers.brute import placement_patterns


def examples(budget: int) -> int:
    """A test's example count: its ``budget`` under the ``ci`` profile (max_examples 100), scaled by the
    loaded profile's max_examples (``fast``: a tenth, ``thorough``: 5x; tests/conftest.py), at least 2."""
    return max(2, round(budget * settings.default.max_examples / 100))


SHAPES = [(n, g) for n in (1, 2, 3, 4) for g in (1, 2, 4, 8) if n * g <= 8]


def layouts_for(nodes: int, gpus: int) -> list[tuple[int, int]]:
    sizes = Cluster(nodes, gpus, 1, 1.0, 1.0).allowed_sizes()
    return [(dp, d // dp) for d in sizes for dp in range(1, d + 1) if d % dp == 0 and d // dp <= gpus]


@st.composite
def small_problems(draw, max_layers: int = 7, objectives=("bottleneck", "iteration")) -> Problem:
    nodes, gpus = draw(st.sampled_from(SHAPES))
    n_layers = draw(st.integers(1, max_layers))
    all_layouts = layouts_for(nodes, gpus)
    scale = draw(st.sampled_from([0.0, 1.0, 1.0, 1.0]))  # sometimes free transfers
    shared = draw(
        st.one_of(st.just(all_layouts), st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True))
    )
    layers = []
    for i in range(n_layers):
        if draw(st.integers(0, 9)) < 7:  # most layers share the model-wide layouts, like real cost tables
            chosen = shared
        else:
            chosen = draw(st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True))
        base = draw(st.integers(1, 40))
        costs = {}
        for dp, tp in chosen:
            d = dp * tp
            # roughly scaling compute with noise, tp saving weights
            speed = draw(st.floats(0.3, 1.2)) * d
            fwd = round(base / speed, 3)
            costs[f"dp{dp}tp{tp}"] = {
                "fwd_ms": fwd,
                "bwd_ms": round(fwd * draw(st.floats(0.0, 2.5)), 3),
                "weight_bytes": draw(st.integers(0, 40)) // tp,
                "act_bytes": draw(st.integers(0, 12)) // d,
            }
        layers.append(
            {
                "name": f"l{i}",
                "module": "m",
                "out_bytes": int(draw(st.integers(0, 4000)) * scale),
                "costs": costs,
            }
        )
    return Problem.from_dict(_document(draw, 1, nodes, gpus, layers, (25, 300), objectives))


def _document(draw, version: int, nodes: int, gpus: int, layers: list, memory: tuple[int, int], objectives, **extra) -> dict:
    """The problem document around ``layers``: stage bounds, memory, bandwidths, m and objective drawn."""
    limit = min(len(layers), nodes * gpus)
    lo = draw(st.integers(1, limit))
    hi = draw(st.integers(lo, limit))
    stages = draw(st.sampled_from([None, {"min": lo, "max": hi}, lo]))
    doc = {
        "version": version,
        "name": "random" if version == 1 else f"random-v{version}",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpus,
            "gpu_memory_bytes": draw(st.integers(*memory)),
            "intra_node_GBps": draw(st.sampled_from([1.0, 2.0, 8.0])) * 1e-3,
            "inter_node_GBps": draw(st.sampled_from([0.5, 1.0, 4.0])) * 1e-3,
        },
        "training": {"microbatches": draw(st.integers(1, 8)), "objective": draw(st.sampled_from(objectives))},
        **extra,
        "layers": layers,
    }
    if stages is not None:
        doc["stages"] = stages
    return doc


VARIANTS = {
    "zero3": "weights, gradients and optimizer states sharded over dp; all-gathers added to fwd/bwd",
    "recompute-full": "keeps block inputs only; one more forward in the backward",
}
MODULES = ("vision", "projector", "llm", "action")


@st.composite
def small_v2_problems(draw, max_layers: int = 7, objectives=("bottleneck", "iteration")) -> Problem:
    """A random format-v2 problem: modules in runs, variants, tight memory, transfers and reshards.

    Every module has its own model-wide configs (a few layers draw their own
    subset, so a config may be missing on part of a segment). A variant entry
    derives from its plain entry the way the cost model's knobs do:
    ``zero3`` divides weight bytes by dp and adds time, ``recompute-full``
    cuts activation bytes and adds a forward to the backward. Memory is drawn
    around what a stage needs, so that variants and tp matter.
    """
    nodes, gpus = draw(st.sampled_from(SHAPES))
    n_layers = draw(st.integers(2, max_layers))
    n_runs = draw(st.integers(2, min(4, n_layers)))
    starts = sorted(draw(st.lists(st.integers(1, n_layers - 1), min_size=n_runs - 1, max_size=n_runs - 1, unique=True)))
    names: list[str] = []
    for _ in range(n_runs):  # adjacent runs differ; a module may come back (vision, llm, vision)
        names.append(draw(st.sampled_from([m for m in MODULES if not names or m != names[-1]])))
    bounds = [0, *starts, n_layers]
    module_of = [names[r] for r in range(n_runs) for _ in range(bounds[r], bounds[r + 1])]
    all_layouts = layouts_for(nodes, gpus)
    scale = draw(st.sampled_from([0.0, 1.0, 1.0, 1.0]))  # sometimes free transfers and reshards
    variant_names = draw(st.sampled_from([(), ("zero3",), ("recompute-full",), ("zero3", "recompute-full")]))
    some = st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True)
    shared = {name: draw(st.one_of(st.just(all_layouts), some)) for name in sorted(set(names))}
    # modules differ in size (a small vision tower, a big language model), so their best configs differ
    heft = {name: (draw(st.integers(0, 60)), draw(st.integers(0, 16))) for name in sorted(set(names))}
    layers = []
    for i in range(n_layers):
        chosen = shared[module_of[i]] if draw(st.integers(0, 9)) < 9 else draw(some)
        max_weight, max_act = heft[module_of[i]]
        base = draw(st.integers(1, 40))
        costs = {}
        for dp, tp in chosen:
            d = dp * tp
            fwd = round(base / (draw(st.floats(0.3, 1.2)) * d), 3)
            bwd = round(fwd * draw(st.floats(0.0, 2.5)), 3)
            weight = draw(st.integers(0, max_weight)) // tp
            act = draw(st.integers(0, max_act)) // d
            key = f"dp{dp}tp{tp}"
            if draw(st.integers(0, 9)) < 9:  # now and then only variant entries for a config
                costs[key] = {"fwd_ms": fwd, "bwd_ms": bwd, "weight_bytes": weight, "act_bytes": act}
            for v in variant_names:
                if not draw(st.booleans()):
                    continue
                if v == "zero3":
                    extra = round(draw(st.floats(0.0, 1.0)) * fwd, 3)
                    costs[f"{key}/{v}"] = {"fwd_ms": round(fwd + extra, 3), "bwd_ms": round(bwd + extra, 3),
                                           "weight_bytes": weight // dp, "act_bytes": act}
                else:
                    costs[f"{key}/{v}"] = {"fwd_ms": fwd, "bwd_ms": round(bwd + fwd, 3),
                                           "weight_bytes": weight, "act_bytes": act // draw(st.integers(2, 8))}
        if not costs:
            costs[f"dp{chosen[0][0]}tp{chosen[0][1]}"] = {"fwd_ms": 1.0, "bwd_ms": 1.0, "weight_bytes": 0, "act_bytes": 0}
        layers.append(
            {"name": f"{module_of[i]}.{i}", "module": module_of[i],
             "out_bytes": int(draw(st.integers(0, 4000)) * scale), "costs": costs}
        )
    variants = {v: VARIANTS[v] for v in variant_names}
    return Problem.from_dict(_document(draw, 2, nodes, gpus, layers, (15, 160), objectives, variants=variants))


@st.composite
def random_plans(draw, problem: Problem) -> Plan | None:
    """A random plan satisfying rules 1-5 (memory, rule 6, is not enforced); None if the draw fails.

    Every segment of a stage (:meth:`Problem.segments`; one per stage in v1)
    draws its own config among those all its layers have at the stage's size.
    """
    cluster = problem.cluster
    L, N = problem.num_layers, problem.num_devices
    P = draw(st.integers(problem.stages.min, min(problem.stages.max, L)))
    seqs = size_sequences(cluster.allowed_sizes(), N, P)
    if not seqs:
        return None
    sizes = draw(st.sampled_from(seqs))
    cuts = sorted(draw(st.lists(st.integers(1, L - 1), min_size=P - 1, max_size=P - 1, unique=True))) if P > 1 else []
    bounds = [0, *cuts, L]
    patterns = list(placement_patterns(cluster, sizes).values())
    assignment = draw(st.sampled_from(patterns))
    ids = node_assignment_ids(cluster, sizes, assignment)
    stages = []
    for p in range(P):
        configs = []
        for a, b in problem.segments(bounds[p], bounds[p + 1] - 1):
            common = set.intersection(
                *({lay for lay in problem.layers[i].costs if lay.devices == sizes[p]} for i in range(a, b + 1))
            )
            if not common:
                return None
            configs.append(draw(st.sampled_from(sorted(common))))
        stages.append(Stage.from_configs(bounds[p], bounds[p + 1] - 1, sizes[p], configs, ids[p]))
    return Plan(tuple(stages))


def draw_valid_plan(data, problem: Problem) -> tuple[Plan, float]:
    """Draw a plan that passes every validity rule and its objective value; rejects the example otherwise."""
    from hypothesis import assume

    from partitioner.plan import PlanError, evaluate

    plan = data.draw(random_plans(problem))
    assume(plan is not None)
    try:
        return plan, evaluate(problem, plan).value
    except PlanError:
        assume(False)
        raise  # unreachable: assume(False) rejects the example


def meshes_v3(nodes: int, gpus: int) -> list[tuple[int, int, int]]:
    """Every (dp, tp, cp) with dp*tp*cp an allowed size, tp <= gpus and cp in {1, 2, 4}."""
    sizes = Cluster(nodes, gpus, 1, 1.0, 1.0).allowed_sizes()
    return [
        (d // (tp * cp), tp, cp)
        for d in sizes
        for cp in (1, 2, 4)
        for tp in range(1, gpus + 1)
        if d % (tp * cp) == 0 and tp <= gpus
    ]


def _v3_key(dp: int, tp: int, cp: int, ep: int, etp: int, variant: str, spelled: int) -> str:
    """A key of the config in one of a few spellings (canonical, every axis written, cp/ep before tp)."""
    if spelled == 1:
        base = f"dp{dp}tp{tp}cp{cp}ep{ep}" + (f"etp{etp}" if etp != 1 or ep != 1 else "")
    elif spelled == 2:
        base = f"dp{dp}" + (f"cp{cp}" if cp != 1 else "") + f"tp{tp}" + (f"ep{ep}" if ep != 1 else "") + (f"etp{etp}" if etp != 1 else "")
    else:
        base = f"dp{dp}tp{tp}" + (f"cp{cp}" if cp != 1 else "") + (f"ep{ep}" if ep != 1 else "") + (f"etp{etp}" if etp != 1 else "")
    return f"{base}/{variant}" if variant else base


@st.composite
def small_v3_problems(draw, max_layers: int = 6, objectives=("bottleneck", "iteration"), ties: bool = True) -> Problem:
    """A random format-v3 problem: context and expert parallelism, tied weights, modules, variants.

    Every module draws its own model-wide meshes (dp, tp, cp); a cp > 1 entry
    divides activation bytes by dp*tp*cp (the sequence split) but not the
    weights, and pays a ring-attention share in time. One module may be
    MoE-like: each mesh also comes in ep (and now and then etp = 2) keys;
    its expert layers' weights fall with ep*etp, its dense layers carry the
    same ep keys with the very entry of ep = 1 (DESIGN.md: ep changes nothing
    on a dense layer). Keys are spelled in several ways (the parser
    canonicalises). Sometimes a layer is tied to an earlier one (mostly the
    last to the first: an LM head and its embedding), with a heavy copy of
    which a share is ``tied_weight_bytes``.
    Memory is drawn tight around what a stage needs.
    """
    nodes, gpus = draw(st.sampled_from(SHAPES))
    n_layers = draw(st.integers(2, max_layers))
    n_runs = draw(st.integers(1, min(3, n_layers)))
    starts = sorted(draw(st.lists(st.integers(1, n_layers - 1), min_size=n_runs - 1, max_size=n_runs - 1, unique=True)))
    names: list[str] = []
    for _ in range(n_runs):
        names.append(draw(st.sampled_from([m for m in ("vision", "llm", "moe") if not names or m != names[-1]])))
    bounds = [0, *starts, n_layers]
    module_of = [names[r] for r in range(n_runs) for _ in range(bounds[r], bounds[r + 1])]
    all_meshes = meshes_v3(nodes, gpus)
    some = st.lists(st.sampled_from(all_meshes), min_size=1, max_size=len(all_meshes), unique=True)
    shared = {name: draw(some) for name in sorted(set(names))}
    heft = {name: (draw(st.integers(0, 60)), draw(st.integers(0, 24))) for name in sorted(set(names))}
    scale = draw(st.sampled_from([0.0, 1.0, 1.0, 1.0]))
    zero3 = draw(st.booleans())
    spelled = draw(st.integers(0, 2))
    layers = []
    for i in range(n_layers):
        module = module_of[i]
        chosen = shared[module] if draw(st.integers(0, 9)) < 9 else draw(some)
        expert = module == "moe" and draw(st.booleans())
        max_weight, max_act = heft[module]
        base = draw(st.integers(1, 40))
        costs = {}
        for dp, tp, cp in chosen:
            d = dp * tp * cp
            fwd = round(base / (draw(st.floats(0.3, 1.2)) * d) + (0.1 * (cp - 1) * base / d if cp > 1 else 0.0), 3)
            bwd = round(fwd * draw(st.floats(0.0, 2.5)), 3)
            weight = draw(st.integers(0, max_weight)) // tp
            act = draw(st.integers(0, max_act)) // d
            eps = [(1, 1)]
            if module == "moe":
                eps += [(e, f) for e in (2, 4, 8) for f in (1, 2) if d % (e * f) == 0 and (f == 1 or e == 2)]
            for ep, etp in eps:
                if ep == 1 or expert:
                    w = weight // (ep * etp)
                    t = round(fwd * (1 + 0.05 * (ep - 1)), 3)
                    entry = {"fwd_ms": t, "bwd_ms": bwd, "weight_bytes": w, "act_bytes": act}
                else:  # a dense neighbour: the same entry under every ep
                    entry = dict(costs[_v3_key(dp, tp, cp, 1, 1, "", spelled)])
                costs[_v3_key(dp, tp, cp, ep, etp, "", spelled)] = entry
                if zero3 and draw(st.booleans()):
                    extra = round(draw(st.floats(0.0, 1.0)) * entry["fwd_ms"], 3)
                    costs[_v3_key(dp, tp, cp, ep, etp, "zero3", spelled)] = {
                        "fwd_ms": round(entry["fwd_ms"] + extra, 3), "bwd_ms": round(entry["bwd_ms"] + extra, 3),
                        "weight_bytes": entry["weight_bytes"] // (dp * cp), "act_bytes": act,
                    }
        layers.append(
            {"name": f"{module}.{i}", "module": module,
             "out_bytes": int(draw(st.integers(0, 4000)) * scale), "costs": costs}
        )
    if ties and n_layers >= 2 and draw(st.booleans()):
        # an LM head tied to the embedding (the last layer to the first), or any later layer to an earlier one:
        # a heavy copy of which most is shared
        k = draw(st.sampled_from([n_layers - 1, draw(st.integers(1, n_layers - 1))]))
        head = layers[k]
        head["tied_to"] = 0 if k == n_layers - 1 else draw(st.integers(0, k - 1))
        share = draw(st.sampled_from([0.0, 0.5, 1.0, 1.0]))
        copy = draw(st.integers(10, 60))
        for key, entry in head["costs"].items():
            tied = copy // Layout.parse(key).tp
            entry["weight_bytes"] += tied
            entry["tied_weight_bytes"] = int(tied * share)
    extra = {"variants": {"zero3": VARIANTS["zero3"]}} if zero3 else {}
    return Problem.from_dict(_document(draw, 3, nodes, gpus, layers, (25, 200), objectives, **extra))


# Byte scales for the boundary problems: big enough that one byte is below the MILP backends' relative
# tolerances (1e-9 of a GPU of gigabytes), odd so that no common factor makes the bytes coarse.
BYTE_SCALES = (1, 1_048_583, 1_000_000_007, 3 * 2**30 + 1)


@st.composite
def boundary_problems(draw, max_layers: int = 5, schedules: tuple[str, ...] = ("1f1b", "zb-h1", "gpipe")) -> Problem:
    """A random v1, v2 or v3 problem whose optimum sits exactly on, a hair over or a hair under the memory limit,
    now and then with stage times that tie.

    The bytes of a random small problem (:func:`small_problems`, :func:`small_v2_problems`,
    :func:`small_v3_problems`) are scaled by one of :data:`BYTE_SCALES` with a random remainder per entry, and
    a schedule is drawn from ``schedules`` (``interleaved``: two virtual stages). The GPU memory is then set
    from the plan found with unlimited memory (``dp``; ``brute`` under ``interleaved``, which dp does not
    plan): one of its stages' (device groups') memory plus -1, 0 or +1 bytes (-1: that plan needs one byte
    more than the GPU has). With ``ties`` every layer takes the first layer's times per config, in halves of
    a millisecond (exact in binary), and the same ``out_bytes``, so many plans share the optimum's value.
    """
    from hypothesis import assume

    from partitioner.plan import evaluate
    from partitioner.solvers import solve

    base = draw(st.one_of(small_problems(max_layers=max_layers), small_v2_problems(max_layers=max_layers),
                          small_v3_problems(max_layers=max_layers)))
    doc = base.to_dict()
    schedule = draw(st.sampled_from(schedules))
    if schedule != "1f1b":
        doc["training"]["schedule"] = schedule
    if schedule == "interleaved":  # m a multiple of every group count, as the format requires of a fixed one
        doc["training"]["virtual_stages"] = 2
        fixed = doc["stages"]["min"] if doc["stages"]["min"] == doc["stages"]["max"] else 1
        doc["training"]["microbatches"] = fixed * draw(st.sampled_from([2, 4, 6, 12]))
    scale = draw(st.sampled_from(BYTE_SCALES))
    ties = draw(st.booleans())
    first = doc["layers"][0]["costs"]
    for layer in doc["layers"]:
        if ties:
            layer["out_bytes"] = doc["layers"][0]["out_bytes"]
        for key, entry in layer["costs"].items():
            if ties and key in first:
                entry["fwd_ms"] = round(2 * first[key]["fwd_ms"]) / 2 + 0.5
                entry["bwd_ms"] = round(2 * first[key]["bwd_ms"]) / 2
            tied = entry.get("tied_weight_bytes", 0)
            entry["weight_bytes"] = entry["weight_bytes"] * scale + draw(st.integers(0, scale - 1))
            entry["act_bytes"] = entry["act_bytes"] * scale + draw(st.integers(0, scale - 1))
            if "tied_weight_bytes" in entry:  # at most the copy, as the format requires
                entry["tied_weight_bytes"] = min(tied * scale + draw(st.integers(0, scale - 1)), entry["weight_bytes"])
    doc["cluster"]["gpu_memory_bytes"] = 2**50
    relaxed = Problem.from_dict(doc)
    found = solve(relaxed, "brute" if schedule == "interleaved" else "dp")
    assume(found.plan is not None)
    peaks = evaluate(relaxed, found.plan).peak_memory_bytes
    on = draw(st.sampled_from([max(peaks), draw(st.sampled_from(peaks))]))
    doc["cluster"]["gpu_memory_bytes"] = max(1, on + draw(st.sampled_from([-1, 0, 0, 1])))
    return Problem.from_dict(doc)


# Rack shapes for :func:`small_rack_problems`: (nodes, gpus_per_node); nodes of 3, 5 and 6 GPUs have
# in-node sizes that need not divide the node (an NVL72 rack's 16 and 32 in small).
RACK_SHAPES = [(1, 3), (1, 5), (1, 6), (1, 8), (2, 3), (2, 4), (2, 5), (3, 3)]


def _rack_fields(draw, gpus: int, nodes: int, which: str) -> tuple[list[int] | None, int | None]:
    """The partial-rack fields of a random cluster: in-node ``stage_sizes`` (a random subset of 1..G) when
    ``which`` is ``sizes`` or ``both``, the ``devices`` the job uses when ``devices`` or ``both``."""
    stage_sizes = devices = None
    if which in ("sizes", "both"):
        stage_sizes = sorted(draw(st.lists(st.integers(1, gpus), min_size=1, max_size=gpus, unique=True)))
    if which in ("devices", "both"):
        devices = draw(st.integers((nodes - 1) * gpus + 1, nodes * gpus))
    return stage_sizes, devices


def _cluster_problem(draw, nodes: int, gpus: int, stage_sizes: list[int] | None, devices: int | None,
                     max_layers: int, objectives, schedules: tuple[str, ...], scale: float = 1.0,
                     levels: list[dict] | None = None) -> Problem:
    """A random problem on ``nodes`` x ``gpus`` with the given partial-rack fields and network ``levels``:
    layers take layouts of the sizes the cluster allows (mostly one shared set), their transfers scaled by
    ``scale``; costs, memory and bandwidths drawn as :func:`small_problems` does."""
    cluster = Cluster(nodes, gpus, 1, 1.0, 1.0, None, None if stage_sizes is None else tuple(stage_sizes), devices)
    sizes = cluster.allowed_sizes()
    all_layouts = [(dp, d // dp) for d in sizes for dp in range(1, d + 1) if d % dp == 0 and d // dp <= gpus]
    assume(all_layouts)  # every stated size is larger than the one partly used node
    shared = draw(st.one_of(st.just(all_layouts), st.lists(st.sampled_from(all_layouts), min_size=1,
                                                             max_size=len(all_layouts), unique=True)))
    layers = []
    for i in range(draw(st.integers(1, max_layers))):
        chosen = shared if draw(st.integers(0, 9)) < 7 else draw(
            st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True))
        base = draw(st.integers(1, 40))
        costs = {}
        for dp, tp in chosen:
            fwd = round(base / (draw(st.floats(0.3, 1.2)) * dp * tp), 3)
            costs[f"dp{dp}tp{tp}"] = {
                "fwd_ms": fwd,
                "bwd_ms": round(fwd * draw(st.floats(0.0, 2.5)), 3),
                "weight_bytes": draw(st.integers(0, 40)) // tp,
                "act_bytes": draw(st.integers(0, 12)) // (dp * tp),
            }
        layers.append({"name": f"l{i}", "module": "m", "out_bytes": int(draw(st.integers(0, 4000)) * scale), "costs": costs})
    doc = _document(draw, 1, nodes, gpus, layers, (25, 300), objectives)
    limit = min(len(layers), cluster.num_devices)
    if isinstance(doc.get("stages"), int) and doc["stages"] > limit or isinstance(doc.get("stages"), dict) and doc["stages"]["min"] > limit:
        doc["stages"] = limit
    elif isinstance(doc.get("stages"), dict):
        doc["stages"]["max"] = min(doc["stages"]["max"], limit)
    if stage_sizes is not None:
        doc["cluster"]["stage_sizes"] = stage_sizes
    if devices is not None:
        doc["cluster"]["devices"] = devices
    if levels is not None:
        doc["cluster"]["levels"] = levels
    doc["training"]["schedule"] = draw(st.sampled_from(schedules))
    return Problem.from_dict(doc)


@st.composite
def small_rack_problems(draw, max_layers: int = 6, objectives=("bottleneck", "iteration"),
                        schedules: tuple[str, ...] = ("1f1b",)) -> Problem:
    """A random small problem on partial racks (DESIGN.md "Partial racks").

    The cluster states its in-node ``stage_sizes`` (a random subset of 1..G, so sizes that do not divide
    the node and sets without 1) and/or that the job uses ``devices`` of its GPUs (the last node partly),
    at most 10 used GPUs so that ``brute`` serves as the oracle. Layers take layouts of the sizes the
    cluster allows; costs, memory, transfers and bandwidths are drawn as :func:`small_problems` does.
    """
    nodes, gpus = draw(st.sampled_from(RACK_SHAPES))
    stage_sizes, devices = _rack_fields(draw, gpus, nodes, draw(st.sampled_from(["sizes", "devices", "both"])))
    scale = draw(st.sampled_from([0.0, 1.0, 1.0, 1.0]))
    return _cluster_problem(draw, nodes, gpus, stage_sizes, devices, max_layers, objectives, schedules, scale)

LEVEL_SHAPES = [(2, 1), (3, 1), (4, 1), (6, 1), (8, 1), (2, 2), (3, 2), (4, 2), (5, 2), (6, 2), (2, 4), (3, 4)]


@st.composite
def network_levels(draw, nodes: int) -> list[dict]:
    """1-3 random network levels over ``nodes`` nodes (DESIGN.md "Network levels"): nested groups of
    consecutive nodes (sizes that need not divide the cluster), random per-GPU bandwidths (GB/s, as
    :func:`_document`'s bandwidths) and oversubscriptions; the outermost level holds every node."""
    count = draw(st.integers(1, 3))
    out, size = [], 1
    for k in range(count):
        level: dict = {"name": f"tier{k}", "GBps": draw(st.sampled_from([0.25, 0.5, 1.0, 4.0])) * 1e-3}
        if draw(st.booleans()):
            level["oversubscription"] = draw(st.sampled_from([1.5, 2.0, 3.0]))
        if k < count - 1:
            size *= draw(st.integers(1 if k == 0 else 2, 3))
            level["nodes"] = size
        elif draw(st.booleans()):  # stated: a multiple of the inner size, larger, holding every node
            outer = size * max(2, -(-nodes // size))
            level["nodes"] = outer if count > 1 else max(nodes, 1)
        out.append(level)
    return out


@st.composite
def small_levels_problems(draw, max_layers: int = 5, objectives=("bottleneck", "iteration"),
                          schedules: tuple[str, ...] = ("1f1b",), racks: bool = False) -> Problem:
    """A random small problem on a cluster with network levels (2-8 nodes of 1-4 GPUs, at most 12 GPUs so
    that ``brute`` serves as the oracle); layers, costs and memory drawn as :func:`small_rack_problems`.
    ``racks``: the cluster also states ``stage_sizes`` and/or ``devices`` (DESIGN.md "Partial racks")."""
    nodes, gpus = draw(st.sampled_from(LEVEL_SHAPES))
    stage_sizes = devices = None
    if racks:
        stage_sizes, devices = _rack_fields(draw, gpus, nodes, draw(st.sampled_from(["sizes", "devices", "both"])))
    levels = draw(network_levels(nodes))
    return _cluster_problem(draw, nodes, gpus, stage_sizes, devices, max_layers, objectives, schedules,
                            levels=levels)
