"""Format v2 in the slot model (``cpsat`` and ``milp``): one config per
(stage, module run), reshards between a stage's segments, variants, memory
across segments; agreement with an exhaustive oracle on random small v2
problems, completeness of both models, lesson 15."""
from __future__ import annotations

import itertools

import pulp
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from partitioner import Problem, evaluate, load_problem, solve
from partitioner.placement import node_assignment_ids, size_sequences
from partitioner.plan import Plan, PlanError, Stage
from partitioner.solvers.brute import placement_patterns
from partitioner.solvers.cpsat import SAFE_PARAMETERS, build_model, hint_values
from partitioner.solvers.feasibility import feasible_stage_counts
from partitioner.solvers.milp import build_milp, start_values
from partitioner.solvers.slotmodel import decisions_of_plan, integer_times, plan_of_decisions, slot_data
from checks import check_plan
from strategies import SHAPES, layouts_for

REL = 1e-6
CPSAT = {"num_workers": 1}
MODULES = ("vision", "proj", "llm", "action")


# --------------------------------------------------------------------------- generator and oracle


@st.composite
def small_v2_problems(draw, max_layers: int = 5, objectives=("bottleneck", "iteration")) -> Problem:
    """Random small version-2 problems: 1-4 module runs, variants trading memory for time,
    tight memory, transfers and reshards of comparable size, free placements."""
    nodes, gpus = draw(st.sampled_from(SHAPES + [s for s in SHAPES if s[1] > 1]))  # meshes to choose from
    n_layers = draw(st.integers(2, max_layers))
    modules = []
    for _ in range(n_layers):  # runs of modules, a module may come back later (a new run)
        if modules and draw(st.integers(0, 2)) > 0:
            modules.append(modules[-1])
        else:
            modules.append(draw(st.sampled_from(MODULES)))
    all_layouts = layouts_for(nodes, gpus)
    variants = draw(st.lists(st.sampled_from(["", "rc", "z1"]), min_size=1, max_size=3, unique=True))
    shared = draw(st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True))
    scale = draw(st.sampled_from([0.0, 0.1, 0.3, 1.0]))
    # each module has its own taste for tensor parallelism, so segments want different meshes
    taste = {(mod, tp): draw(st.floats(0.4, 1.6)) for mod in set(modules) for tp in (1, 2, 4, 8)}
    layers = []
    for i in range(n_layers):
        chosen = shared if draw(st.integers(0, 9)) < 8 else draw(
            st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True)
        )
        base = draw(st.integers(1, 30))
        costs = {}
        for dp, tp in chosen:
            d = dp * tp
            fwd = round(base / (draw(st.floats(0.6, 1.2)) * taste[modules[i], tp] * d), 3)
            weight = draw(st.integers(0, 40)) // tp
            act = draw(st.integers(0, 12)) // max(1, d // 2)
            for variant in variants:
                key = f"dp{dp}tp{tp}" + (f"/{variant}" if variant else "")
                if variant == "rc":  # recompute: less activation memory, one more forward
                    entry = (fwd, round(2 * fwd + fwd, 3), weight, act // 3)
                elif variant == "z1":  # sharded optimizer: less weight memory, some communication
                    entry = (round(fwd * 1.1, 3), round(2.2 * fwd, 3), weight // dp, act)
                else:
                    entry = (fwd, round(2 * fwd, 3), weight, act)
                costs[key] = {"fwd_ms": entry[0], "bwd_ms": entry[1], "weight_bytes": entry[2], "act_bytes": entry[3]}
        layers.append(
            {"name": f"l{i}", "module": modules[i], "out_bytes": int(draw(st.integers(0, 4000)) * scale), "costs": costs}
        )
    limit = min(n_layers, nodes * gpus)
    lo = draw(st.integers(1, limit))
    hi = draw(st.integers(lo, limit))
    doc = {
        "version": 2,
        "name": "random-v2",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpus,
            "gpu_memory_bytes": draw(st.integers(25, 300)),
            "intra_node_GBps": draw(st.sampled_from([1.0, 2.0, 8.0])) * 1e-3,
            "inter_node_GBps": draw(st.sampled_from([0.5, 1.0, 4.0])) * 1e-3,
        },
        "training": {"microbatches": draw(st.integers(1, 6)), "objective": draw(st.sampled_from(objectives))},
        "layers": layers,
    }
    stages = draw(st.sampled_from([None, {"min": lo, "max": hi}, lo]))
    if stages is not None:
        doc["stages"] = stages
    return Problem.from_dict(doc)


def oracle(problem: Problem, objective: str) -> float | None:
    """The optimum by enumeration, judged by ``evaluate`` (None: infeasible).

    Every stage count, cut, size sequence, placement pattern and config per
    segment. Given the cut, sizes and placement, a stage's configs change only
    its own time and memory, and both objectives grow with every stage time,
    so each stage takes its fastest config tuple that fits (times and
    memory from ``evaluate`` with unlimited memory); the plan so assembled is
    then evaluated on the real problem.
    """
    from dataclasses import replace

    roomy = replace(problem, cluster=replace(problem.cluster, gpu_memory_bytes=2**62))
    capacity = problem.cluster.gpu_memory_bytes
    L, N = problem.num_layers, problem.num_devices
    best = None
    for P in feasible_stage_counts(problem):
        for sizes in size_sequences(problem.cluster.allowed_sizes(), N, P):
            for assignment in placement_patterns(problem.cluster, sizes).values():
                ids = node_assignment_ids(problem.cluster, sizes, assignment)
                for cuts in itertools.combinations(range(1, L), P - 1):
                    bounds = (0, *cuts, L)
                    choices = []
                    for p in range(P):
                        a, b = bounds[p], bounds[p + 1] - 1
                        options = [
                            sorted(set.intersection(*({lay for lay in problem.layers[i].costs if lay.devices == sizes[p]} for i in range(s, e + 1))))
                            for s, e in problem.segments(a, b)
                        ]
                        choices.append([Stage.from_configs(a, b, sizes[p], combo, ids[p]) for combo in itertools.product(*options)])
                    if any(not c for c in choices):
                        continue
                    current = [c[0] for c in choices]
                    for p, options in enumerate(choices):
                        fitting = []
                        for stage in options:
                            ev = evaluate(roomy, Plan(tuple(current[:p] + [stage] + current[p + 1 :])), objective).stages[p]
                            if ev.weight_bytes + ev.stash * ev.act_bytes <= capacity:
                                fitting.append((ev.time_ms, stage))
                        if not fitting:
                            break
                        current[p] = min(fitting, key=lambda f: f[0])[1]
                    else:
                        value = evaluate(problem, Plan(tuple(current)), objective).value
                        best = value if best is None else min(best, value)
    return best


# --------------------------------------------------------------------------- agreement


def agree(problem: Problem, objective: str, method: str, options: dict) -> None:
    best = oracle(problem, objective)
    result = solve(problem, method, objective=objective, options=options)
    if best is None:
        assert result.status == "infeasible", (result.status, result.message)
        assert result.plan is None and result.message
        return
    assert result.status == "optimal", result.message
    assert result.value == pytest.approx(best, rel=REL)
    assert evaluate(problem, result.plan, objective).value == result.value
    check_plan(problem, result)
    assert result.bound <= result.value
    assert result.gap <= REL


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems(), st.integers(0, 3))
def test_cpsat_v2_matches_the_oracle(problem, seed):
    agree(problem, problem.objective, "cpsat", {**CPSAT})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_highs_v2_matches_the_oracle(problem):
    agree(problem, problem.objective, "milp", {})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_cbc_v2_matches_the_oracle(problem):
    agree(problem, problem.objective, "milp", {"backend": "cbc"})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_v2_without_a_hint_matches_the_oracle(problem):
    agree(problem, problem.objective, "cpsat", {**CPSAT, "hint": False})
    agree(problem, problem.objective, "milp", {"hint": False})
