"""Hypothesis strategies: random small v1 problems and random valid plans for them.

Small means at most 7 layers and 8 GPUs on 1-4 nodes, so that ``brute`` can
serve as the oracle. Costs, memory pressure, transfer sizes, bandwidths
(NVLink sometimes *slower* than the network), layouts per layer, stage
bounds and both objectives are all drawn.
"""
from __future__ import annotations

from hypothesis import strategies as st

from partitioner.placement import node_assignment_ids, size_sequences
from partitioner.plan import Plan, Stage
from partitioner.problem import Cluster, Problem
from partitioner.solvers.brute import placement_patterns

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
    limit = min(n_layers, nodes * gpus)
    lo = draw(st.integers(1, limit))
    hi = draw(st.integers(lo, limit))
    stages = draw(st.sampled_from([None, {"min": lo, "max": hi}, lo]))
    doc = {
        "version": 1,
        "name": "random",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpus,
            "gpu_memory_bytes": draw(st.integers(25, 300)),
            "intra_node_GBps": draw(st.sampled_from([1.0, 2.0, 8.0])) * 1e-3,
            "inter_node_GBps": draw(st.sampled_from([0.5, 1.0, 4.0])) * 1e-3,
        },
        "training": {"microbatches": draw(st.integers(1, 8)), "objective": draw(st.sampled_from(objectives))},
        "layers": layers,
    }
    if stages is not None:
        doc["stages"] = stages
    return Problem.from_dict(doc)


@st.composite
def random_plans(draw, problem: Problem) -> Plan | None:
    """A random plan satisfying rules 1-5 (memory, rule 6, is not enforced); None if the draw fails."""
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
        a, b = bounds[p], bounds[p + 1] - 1
        common = set.intersection(*({lay for lay in problem.layers[i].costs if lay.devices == sizes[p]} for i in range(a, b + 1)))
        if not common:
            return None
        lay = draw(st.sampled_from(sorted(common)))
        stages.append(Stage(a, b, sizes[p], lay.dp, lay.tp, ids[p]))
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
