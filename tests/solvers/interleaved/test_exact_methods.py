"""Exact planning under ``training.schedule: interleaved``: brute, cpsat and milp over the same space.

The space (``partitioner/solvers/interleaved_model.py``): P equal device
groups on canonical ids, one mesh per group, P·v contiguous chunks, per
segment variants in format v2. cpsat and milp must agree with brute on
random small problems (v1 and v2, with and without transfers, memory often
binding; dp by its cut search), their bounds must be proven, and every plan must pass
``evaluate`` and replay in the simulator under ``interleaved``.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import evaluate, simulate, solve
from partitioner.plan import objective_value
from partitioner.plan.cuts import interleaved_uniform_plan
from partitioner.problem import Problem
from partitioner.solvers.interleaved.space import (
    chunk_options,
    group_counts,
    group_ids,
    group_meshes,
    interleaved_plan,
    send_ms,
    uniform_hints,
)
from strategies import examples, layouts_for

EXACT = ("cpsat", "milp", "dp")
OPTIONS = {"cpsat": {"num_workers": 1}, "milp": {}, "dp": {}}


SHAPES = [(1, 2), (2, 1), (1, 4), (2, 2), (4, 1), (2, 4), (4, 2)]


@st.composite
def interleaved_problems(draw, version: int = 1, max_layers: int = 8) -> Problem:
    """A random small interleaved problem that has group counts P > 1 to choose from.

    Most layers have every config of every allowed size (the others a random
    subset); format 2 adds module runs and a ``recompute-full`` variant
    (activations cut, a forward added to the backward). Sends are free in
    one draw out of four; memory is drawn around what a group needs, so
    that it often binds.
    """
    nodes, gpus = draw(st.sampled_from(SHAPES))
    N = nodes * gpus
    v = draw(st.sampled_from([2, 2, 3]))
    L = draw(st.integers(2 * v, max_layers))
    m = draw(st.sampled_from([2, 4, 4, 6, 8]))
    all_layouts = layouts_for(nodes, gpus)
    modules = ["llm"] * L
    if version == 2:
        cut = draw(st.integers(1, L - 1))
        modules = ["vision"] * cut + ["llm"] * (L - cut)
    scale = draw(st.sampled_from([0, 1, 1, 1]))
    layers = []
    for i in range(L):
        chosen = all_layouts if draw(st.integers(0, 9)) < 8 else draw(
            st.lists(st.sampled_from(all_layouts), min_size=1, max_size=len(all_layouts), unique=True))
        base = draw(st.integers(1, 30))
        costs = {}
        for dp, tp in chosen:
            fwd = round(base / (draw(st.floats(0.4, 1.2)) * dp * tp), 3)
            bwd = round(fwd * draw(st.floats(0.5, 2.5)), 3)
            weight = draw(st.integers(0, 40)) // tp
            act = draw(st.integers(0, 12)) // (dp * tp)
            costs[f"dp{dp}tp{tp}"] = {"fwd_ms": fwd, "bwd_ms": bwd, "weight_bytes": weight, "act_bytes": act}
            if version == 2 and draw(st.booleans()):
                costs[f"dp{dp}tp{tp}/recompute-full"] = {
                    "fwd_ms": fwd, "bwd_ms": round(bwd + fwd, 3), "weight_bytes": weight, "act_bytes": act // 3}
        layers.append({"name": f"{modules[i]}.{i}", "module": modules[i],
                       "out_bytes": scale * draw(st.integers(0, 4000)), "costs": costs})
    doc = {
        "version": version,
        "name": "random-interleaved",
        "cluster": {"nodes": nodes, "gpus_per_node": gpus, "gpu_memory_bytes": 2**40,
                    "intra_node_GBps": draw(st.sampled_from([1.0, 2.0, 8.0])) * 1e-3,
                    "inter_node_GBps": draw(st.sampled_from([0.5, 1.0, 4.0])) * 1e-3},
        "training": {"microbatches": m, "objective": draw(st.sampled_from(["bottleneck", "iteration"])),
                     "schedule": "interleaved", "virtual_stages": v},
        "layers": layers,
    }
    if version == 2:
        doc["variants"] = {"recompute-full": "keeps block inputs only; one more forward in the backward"}
    if draw(st.integers(0, 3)) == 0:
        doc["stages"] = {"min": draw(st.integers(1, 2)), "max": min(L, N)}
    # memory: mostly just below what the fastest plan needs with unlimited memory, so that it binds
    roomy = solve(Problem.from_dict(doc), "brute")
    if roomy.status == "optimal":
        peak = max(1, max(roomy.evaluation.peak_memory_bytes))
        tight = draw(st.booleans())
        doc["cluster"]["gpu_memory_bytes"] = draw(st.integers(max(1, 3 * peak // 4), max(1, peak - 1)) if tight else st.integers(peak, 2 * peak + 1))
    return Problem.from_dict(doc)


def assert_in_space(problem: Problem, result) -> None:
    """Equal groups on canonical ids, each with one mesh in every segment of its chunks."""
    v = problem.training.virtual_stages
    stages = result.plan.stages
    assert len(stages) % v == 0
    P = len(stages) // v
    assert P in group_counts(problem)
    ids = group_ids(problem, P)
    for c, s in enumerate(stages):
        assert tuple(s.device_ids) == ids[c % P]
        meshes = {lay.mesh for _, lay in s.segment_configs(problem)} | {stages[c % P].layout.mesh}
        assert len(meshes) == 1


def check_against_brute(problem: Problem) -> None:
    oracle = solve(problem, "brute")
    assert oracle.status in ("optimal", "infeasible"), oracle.message
    if oracle.status == "optimal":
        check_plan(problem, oracle)
        assert_in_space(problem, oracle)
    for method in EXACT:
        r = solve(problem, method, seed=0, options=OPTIONS[method])
        assert r.status == oracle.status, (method, r.status, r.message, oracle.value)
        if r.status != "optimal":
            continue
        check_plan(problem, r)  # evaluate (value, memory) and the interleaved replay
        assert_in_space(problem, r)
        assert r.value == pytest.approx(oracle.value, rel=1e-6), method
        assert r.bound is not None and r.bound <= oracle.value * (1 + 1e-12), method  # a proven bound
        sim = simulate(problem, r.plan)
        assert sim.makespan_ms > 0 or r.value == 0
        assert list(sim.peak_memory_bytes) == list(r.evaluation.peak_memory_bytes)  # rule 6 = the replay's peak


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_problems(version=1))
def test_v1_exact_methods_match_brute(problem):
    check_against_brute(problem)


@pytest.mark.slow
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_problems(version=2))
def test_v2_exact_methods_match_brute(problem):
    check_against_brute(problem)


def _hand_problem(memory: int = 10**12, v: int = 2, m: int = 4, out_bytes: int = 0, variants: bool = False) -> Problem:
    """8 layers on 2 nodes x 1 GPU: a heavy head and tail, light middle (the uniform split's worst case)."""
    fwd = [6.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 12.0]
    layers = []
    for i, f in enumerate(fwd):
        costs = {"dp1tp1": {"fwd_ms": f, "bwd_ms": 2 * f, "weight_bytes": 10, "act_bytes": 4}}
        if variants:
            costs["dp1tp1/recompute-full"] = {"fwd_ms": f, "bwd_ms": 3 * f, "weight_bytes": 10, "act_bytes": 1}
        layers.append({"name": f"l{i}", "module": "llm", "out_bytes": out_bytes, "costs": costs})
    doc = {
        "version": 2 if variants else 1,
        "name": "interleaved-hand",
        "cluster": {"nodes": 2, "gpus_per_node": 1, "gpu_memory_bytes": memory,
                    "intra_node_GBps": 1e-3, "inter_node_GBps": 1e-3},
        "training": {"microbatches": m, "objective": "iteration", "schedule": "interleaved", "virtual_stages": v},
        "layers": layers,
    }
    if variants:
        doc["variants"] = {"recompute-full": "one more forward in the backward, activations cut"}
    return Problem.from_dict(doc)


@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
def test_brute_beats_the_uniform_interleaved_split(objective):
    problem = _hand_problem()
    uniform = interleaved_uniform_plan(problem, 2, 2, 1, 1, 1)
    assert [(s.first_layer, s.last_layer) for s in uniform.stages] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    # t = 3 fwd = 18, 3, 3, 3, 3, 3, 3, 36 (72 in all). Uniform: group 0 = layers 0, 1, 4, 5 = 27,
    # group 1 = layers 2, 3, 6, 7 = 45. Group 1 holds the last chunk (36) and a non-empty chunk 1, so
    # 39 is the floor, reached by chunks (0)(1)(2..6)(7): 18 + 15 = 33 | 3 + 36 = 39.
    assert evaluate(problem, uniform).group_times_ms == pytest.approx([27.0, 45.0])
    base = evaluate(problem, uniform, objective).value
    best = solve(problem, "brute", objective=objective)
    assert best.status == "optimal"
    assert max(best.evaluation.group_times_ms) == pytest.approx(39.0)
    expected = 39.0 if objective == "bottleneck" else 72 / 2 + (4 - 1 / 2) * 39.0
    assert best.value == pytest.approx(expected) and best.value < base * 0.9
    for method in EXACT:
        r = solve(problem, method, objective=objective, seed=0, options=OPTIONS[method])
        assert r.status == "optimal" and r.value == pytest.approx(best.value, rel=1e-9)
        check_plan(problem, r)


def test_memory_decides_the_variant_and_every_method_agrees():
    roomy = _hand_problem(variants=True)
    fast = solve(roomy, "brute")
    assert fast.status == "optimal"
    assert all(s.variant == "" for s in fast.plan.stages)  # the plain entries are faster
    # each group holds 4 layers' weights (40) and, at its peak, several microbatches of every chunk
    need = max(fast.evaluation.peak_memory_bytes)
    tight = _hand_problem(memory=need - 1, variants=True)
    r = solve(tight, "brute")
    assert r.status == "optimal" and r.value > fast.value
    assert any(s.variant == "recompute-full" for s in r.plan.stages)
    for method in EXACT:
        other = solve(tight, method, seed=0, options=OPTIONS[method])
        assert other.status == "optimal" and other.value == pytest.approx(r.value, rel=1e-9)
        check_plan(tight, other)
    none_fit = _hand_problem(memory=40 + 3, variants=True)
    for method in ("brute",) + EXACT:
        assert solve(none_fit, method, seed=0, options=OPTIONS.get(method)).status == "infeasible"


def test_transfers_cross_between_groups_and_back_to_group_zero():
    problem = _hand_problem(out_bytes=1000)
    r = solve(problem, "brute", objective="bottleneck")
    ev = r.evaluation
    K = len(r.plan.stages)
    # every chunk boundary crosses between the two one-GPU nodes, the last group back to group 0 included
    for c in range(K - 1):
        assert ev.transfers_ms[c] == pytest.approx(send_ms(problem, r.plan.stages[c].last_layer, K // 2, c % 2))
        assert ev.transfers_ms[c] == pytest.approx(1000 / (1e-3 * 1e6))
    for method in EXACT:
        other = solve(problem, method, objective="bottleneck", seed=0, options=OPTIONS[method])
        assert other.status == "optimal" and other.value == pytest.approx(r.value, rel=1e-9)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_problems(version=2, max_layers=6))
def test_every_plan_of_brutes_space_is_accepted_by_evaluate_at_the_value_brute_computes(problem):
    """With memory unlimited, every plan of the space passes evaluate, which computes brute's chunk times."""
    doc = problem.to_dict()
    doc["cluster"]["gpu_memory_bytes"] = 2**50
    problem = Problem.from_dict(doc)
    v, m, L = problem.training.virtual_stages, problem.microbatches, problem.num_layers
    seen = 0
    for P in group_counts(problem):
        K, d = P * v, problem.num_devices // P
        for cuts in itertools.combinations(range(1, L), K - 1):
            bounds = (0,) + cuts + (L,)
            for meshes in itertools.product(group_meshes(problem, d), repeat=P):
                options = [chunk_options(problem, bounds[c], bounds[c + 1] - 1, meshes[c % P]) for c in range(K)]
                for combo in itertools.islice(itertools.product(*options), 4):
                    plan = interleaved_plan(problem, P, bounds, [o.configs for o in combo])
                    ev = evaluate(problem, plan)
                    sends = [send_ms(problem, bounds[c + 1] - 1, P, c % P) for c in range(K - 1)]
                    times = [o.compute_ms + (sends[c] if c < K - 1 else 0) + (sends[c - 1] if c else 0)
                             for c, o in enumerate(combo)]
                    assert ev.times_ms == pytest.approx(times, rel=1e-12, abs=1e-12)
                    assert ev.value == pytest.approx(
                        objective_value(problem.objective, times, m, "interleaved", virtual_stages=v), rel=1e-12
                    )
                    seen += 1
    if seen:
        assert solve(problem, "brute").status == "optimal"


def test_dp_plans_it_by_its_cut_search():
    problem = _hand_problem()
    r = solve(problem, "dp")
    assert r.status == "optimal" and r.value == pytest.approx(solve(problem, "brute").value, rel=1e-9)
    assert r.extra["interleaved"]["groups"]  # how each group count was settled


def test_brute_refuses_too_many_cuts():
    r = solve(_hand_problem(), "brute", options={"max_combinations": 3})
    assert r.status == "error" and "max_combinations" in r.message


def _wide_problem(layers: int = 24) -> Problem:
    """``layers`` layers on 2 nodes x 4 GPUs, every layout, unequal layer times: too big to prove in a blink."""
    doc = _hand_problem().to_dict()
    doc["cluster"].update(nodes=2, gpus_per_node=4, gpu_memory_bytes=10**6)
    doc["training"]["microbatches"] = 8
    doc.pop("stages", None)
    doc["layers"] = []
    for i in range(layers):
        base = 1.0 + (i * 7919 % 13) / 3
        costs = {}
        for dp, tp in layouts_for(2, 4):
            fwd = round(base / (dp * tp) * (1 + 0.1 * tp), 4)
            costs[f"dp{dp}tp{tp}"] = {"fwd_ms": fwd, "bwd_ms": 2 * fwd, "weight_bytes": 1000 // tp, "act_bytes": 100 // (dp * tp)}
        doc["layers"].append({"name": f"l{i}", "module": "llm", "out_bytes": 500, "costs": costs})
    return Problem.from_dict(doc)


@pytest.mark.parametrize("method", EXACT)
def test_a_time_limit_returns_a_plan_of_the_space_and_a_proven_bound(method):
    problem = _wide_problem()
    r = solve(problem, method, time_limit=1.0, seed=0, options=OPTIONS[method])
    assert r.status in ("optimal", "feasible"), r.message
    check_plan(problem, r)
    assert_in_space(problem, r)
    assert r.bound is not None and r.bound <= r.value
    uniform = min(value for P in group_counts(problem) for value, _ in uniform_hints(problem, problem.objective, P))
    assert r.value <= uniform * (1 + 1e-12)  # never worse than the uniform start


def test_brute_stops_at_its_time_limit_with_the_best_plan_so_far():
    r = solve(_wide_problem(20), "brute", time_limit=0.3)  # 55,252 cuts: far more than 0.3 s
    assert r.status == "feasible" and "time limit" in r.message
    check_plan(_wide_problem(20), r)


@pytest.mark.parametrize("method", EXACT)
def test_without_a_start_and_from_a_warm_start_the_answer_is_the_same(method):
    problem = _hand_problem(out_bytes=1000)
    oracle = solve(problem, "brute")
    cold = solve(problem, method, seed=0, options={**OPTIONS[method], **({} if method == "dp" else {"hint": False})})
    warm = solve(problem, method, seed=0, options=OPTIONS[method], warm_start=oracle.plan)
    for r in (cold, warm):
        assert r.status == "optimal" and r.value == pytest.approx(oracle.value, rel=1e-9)
        check_plan(problem, r)
