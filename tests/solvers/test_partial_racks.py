"""Partial racks (DESIGN.md "Partial racks"): ``cluster.stage_sizes`` and ``cluster.devices``.

The fields' parsing and refusals, rules 2-4 as extended, the exact methods against ``brute`` on random
small racks, the heuristics' plans re-checked by ``evaluate``, the refusals of the methods that do not
plan them, and the preset side (``plan --gpus``).
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checks import check_plan
from conftest import run_cli
from partitioner import Problem, ProblemError, evaluate, solve
from partitioner.cluster.placement import contiguous_node_assignment, node_assignment_ids, pack_runs
from partitioner.costs.build import build_problem, job_cluster_fields
from partitioner.plan import Plan, PlanError, Stage
from partitioner.presets import load_cluster
from partitioner.problem import Cluster
from partitioner.solvers.greedy import packing_chain
from strategies import examples, small_rack_problems

REL = 1e-6


def _doc(nodes=1, gpus=8, sizes=None, devices=None, layers=3, keys=("dp1tp1", "dp2tp1", "dp4tp1")) -> dict:
    cluster = {"nodes": nodes, "gpus_per_node": gpus, "gpu_memory_bytes": 10**9,
               "intra_node_GBps": 100.0, "inter_node_GBps": 10.0}
    if sizes is not None:
        cluster["stage_sizes"] = sizes
    if devices is not None:
        cluster["devices"] = devices
    costs = {k: {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 1} for k in keys}
    return {"version": 1, "cluster": cluster, "training": {"microbatches": 4},
            "layers": [{"name": f"l{i}", "module": "m", "out_bytes": 1000, "costs": costs} for i in range(layers)]}


# --------------------------------------------------------------------------- the fields


def test_absent_fields_keep_rule_3():
    for nodes in (1, 2, 5):
        for g in (1, 2, 6, 8, 72):
            plain = Cluster(nodes, g, 1, 1.0, 1.0)
            assert not plain.partial and plain.num_devices == nodes * g
            assert plain.allowed_sizes() == tuple(sorted(
                {1 << i for i in range(g.bit_length()) if g % (1 << i) == 0} | {g} | {k * g for k in range(2, nodes + 1)}))
            for d in range(1, nodes * g + 2):
                assert plain.allows_size(d) == (d in plain.allowed_sizes())


def test_stated_sizes_and_a_partly_used_rack():
    rack = Cluster(2, 72, 1, 1.0, 1.0, None, (1, 2, 4, 8, 16, 18, 32, 36), 136)
    assert rack.num_devices == 136 and rack.physical_devices == 144
    assert rack.last_node_gpus == 64 and rack.full_nodes == 1 and rack.node_capacities() == (72, 64)
    # in-node: the stated sizes and the whole node; no multi-node stage (only one node is whole)
    assert rack.allowed_sizes() == (1, 2, 4, 8, 16, 18, 32, 36, 72)
    one = Cluster(1, 72, 1, 1.0, 1.0, None, (16, 32, 36, 72), 64)
    assert one.allowed_sizes() == (16, 32, 36)  # nothing larger than the 64 GPUs used
    for c in (rack, one):
        for d in range(1, 150):
            assert c.allows_size(d) == (d in c.allowed_sizes())


def test_fields_parse_and_round_trip():
    p = Problem.from_dict(_doc(sizes=[4, 2, 1, 3], devices=7, keys=("dp1tp1", "dp2tp1", "dp3tp1", "dp4tp1")))
    assert p.cluster.stage_sizes == (1, 2, 3, 4) and p.cluster.devices == 7 and p.num_devices == 7
    again = Problem.from_dict(p.to_dict())
    assert again.cluster == p.cluster
    assert "stage_sizes" not in Problem.from_dict(_doc()).to_dict()["cluster"]


@pytest.mark.parametrize(
    "sizes, devices, where, says",
    [
        ([], None, "cluster.stage_sizes", "non-empty list"),
        ("8", None, "cluster.stage_sizes", "non-empty list"),
        ([0, 2], None, "cluster.stage_sizes[0]", ">= 1"),
        ([2, 9], None, "cluster.stage_sizes[1]", "<= 8"),
        ([2, 2], None, "cluster.stage_sizes[1]", "twice"),
        ([1.5], None, "cluster.stage_sizes[0]", "integer"),
        (None, 0, "cluster.devices", ">= 1"),
        (None, 9, "cluster.devices", "1..8"),
        (None, "x", "cluster.devices", "integer"),
    ],
)
def test_bad_fields_name_the_field(sizes, devices, where, says):
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(_doc(sizes=sizes, devices=devices))
    assert err.value.path == where and says in str(err.value)


def test_devices_must_use_every_node_but_the_last_in_full():
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(_doc(nodes=2, devices=8))  # a job that leaves a whole node idle: give fewer nodes
    assert err.value.path == "cluster.devices" and "9..16" in str(err.value)


def test_devices_with_a_user_topology_is_refused():
    doc = _doc(gpus=2, devices=1, keys=("dp1tp1",))
    doc["cluster"]["topology"] = {"edges": [[0, 1, 10.0]]}
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(doc)
    assert err.value.path == "cluster.devices"


def test_a_cost_key_of_a_size_not_allowed_is_refused():
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(_doc(sizes=[1, 2], layers=1, keys=("dp4tp1",)))  # 4 is not stated
    assert "not an allowed stage size" in str(err.value)


# --------------------------------------------------------------------------- rules 2-4


def _plan(*stages) -> Plan:
    return Plan(tuple(Stage(a, b, d, dp, 1, device_ids=ids) for a, b, d, dp, ids in stages))


def test_rules_2_to_4_on_a_partly_used_node():
    p = Problem.from_dict(_doc(gpus=8, sizes=[2, 3, 4], devices=7, keys=("dp2tp1", "dp3tp1", "dp4tp1")))
    ok = _plan((0, 0, 3, 3, (0, 1, 2)), (1, 2, 4, 4, (3, 4, 5, 6)))
    assert evaluate(p, ok).value > 0
    with pytest.raises(PlanError) as err:  # rule 2: exactly `devices` devices
        evaluate(p, _plan((0, 0, 4, 4, (0, 1, 2, 3)), (1, 2, 4, 4, (4, 5, 6, 7))))
    assert err.value.rule == 2 and "7 of its 8" in str(err.value)
    with pytest.raises(PlanError) as err:  # rule 4: the idle device is the last
        evaluate(p, _plan((0, 0, 3, 3, (0, 1, 2)), (1, 2, 4, 4, (3, 4, 5, 7))))
    assert err.value.rule == 4 and "idle" in str(err.value)
    with pytest.raises(PlanError) as err:  # rule 3: 1 is not a stated size
        evaluate(p, _plan((0, 0, 1, 1, (0,)), (1, 1, 2, 2, (1, 2)), (2, 2, 4, 4, (3, 4, 5, 6))))
    assert err.value.rule == 3


def test_the_partly_used_node_is_numbered_last():
    # 2 nodes of 6, 10 used: sizes 4 (alone in a node) then 2 and 4 sharing the full node
    c = Cluster(2, 6, 1, 1.0, 1.0, None, (2, 4), 10)
    sizes = [4, 2, 4]
    assignment = pack_runs(c, sizes, [False, True])
    assert assignment is not None
    ids = node_assignment_ids(c, sizes, assignment)
    assert sorted(d for s in ids for d in s) == list(range(10))
    assert ids[0] == (6, 7, 8, 9)  # the 4 alone sits on the last node, whose GPUs 10, 11 stay idle
    # first fit in stage order: the first 4 and the 2 fill node 0; the second 4 the 4 GPUs used on node 1
    first_fit = contiguous_node_assignment(c, [4, 4, 2])
    assert first_fit is not None
    assert node_assignment_ids(c, [4, 4, 2], first_fit) == [(0, 1, 2, 3), (6, 7, 8, 9), (4, 5)]


# --------------------------------------------------------------------------- the methods


def _agree(problem, objective, options=None):
    oracle = solve(problem, "brute", objective=objective)
    result = solve(problem, "dp", objective=objective, options=options)
    assert oracle.status in ("optimal", "infeasible"), oracle.message
    assert result.status in ("optimal", "infeasible"), result.message
    assert (oracle.status == "infeasible") == (result.status == "infeasible"), (oracle.message, result.message)
    if oracle.status == "optimal":
        assert result.value == pytest.approx(oracle.value, rel=REL)
        check_plan(problem, result)
        check_plan(problem, oracle)
        used = sorted(d for ids in result.plan.device_ids() for d in ids)
        assert used == list(range(problem.num_devices))


def test_a_rack_whose_packing_chain_is_empty_is_planned_not_crashed():
    """2 of a node's 3 GPUs with stage size 2: no size divides both 3 and 2, so greedy's packing chain is
    empty; greedy (and dp's bottleneck ceiling, which runs it) must answer, not index an empty tuple."""
    def cost(weight):
        return {"fwd_ms": 0.5, "bwd_ms": 0.0, "weight_bytes": weight, "act_bytes": 0}

    doc = _doc(nodes=1, gpus=3, sizes=[2], devices=2)  # hypothesis's shrunk example: P = 1 over memory (26 > 25)
    doc["cluster"]["gpu_memory_bytes"] = 25
    doc["training"] = {"microbatches": 1, "objective": "bottleneck"}
    doc["stages"] = {"min": 1, "max": 2}
    doc["layers"] = [{"name": "l0", "module": "m", "out_bytes": 0, "costs": {"dp1tp2": cost(18)}},
                     {"name": "l1", "module": "m", "out_bytes": 0, "costs": {"dp1tp2": cost(0), "dp2tp1": cost(0)}},
                     {"name": "l2", "module": "m", "out_bytes": 0, "costs": {"dp1tp2": cost(8), "dp2tp1": cost(0)}}]
    problem = Problem.from_dict(doc)
    assert packing_chain(problem.cluster) == ()
    assert solve(problem, "greedy").status in ("feasible", "infeasible")
    for objective in ("bottleneck", "iteration"):
        _agree(problem, objective)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_rack_problems())
def test_dp_matches_brute_on_partial_racks(problem):
    _agree(problem, problem.objective)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_rack_problems())
def test_exact_placement_automaton_matches_brute_on_partial_racks(problem):
    _agree(problem, problem.objective, {"placement": "bins"})


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_rack_problems(schedules=("zb-h1", "gpipe")))
def test_dp_matches_brute_on_partial_racks_other_schedules(problem):
    _agree(problem, problem.objective)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_rack_problems())
def test_heuristics_plan_partial_racks_validly(problem):
    best = solve(problem, "brute")
    for method in ("greedy", "uniform", "balanced"):
        r = solve(problem, method)
        assert r.status in ("feasible", "infeasible"), (method, r.message)
        if r.plan is not None:
            check_plan(problem, r)
            assert best.status == "optimal" and r.value >= best.value * (1 - REL)


@pytest.mark.parametrize("method", ["cpsat", "milp"])
def test_methods_without_partial_racks_refuse(method):
    p = Problem.from_dict(_doc(sizes=[1, 2, 4]))
    r = solve(p, method)
    assert r.status == "error" and "partial racks" in r.message and "dp" in r.message


def test_interleaved_on_partial_racks_is_refused():
    doc = _doc(devices=6, layers=4)
    doc["training"].update(schedule="interleaved", virtual_stages=2)
    r = solve(Problem.from_dict(doc), "dp")
    assert r.status == "error" and "interleaved" in r.message


def test_a_64_of_72_rack_plans_16_and_32_gpu_stages():
    keys = ("dp16tp1", "dp32tp1", "dp64tp1", "dp8tp2", "dp16tp2")
    doc = _doc(gpus=72, sizes=[16, 32, 36, 64, 72], devices=64, layers=4, keys=keys)
    p = Problem.from_dict(doc)
    r = solve(p, "dp")
    assert r.status == "optimal"
    check_plan(p, r)
    assert sum(s.devices for s in r.plan.stages) == 64
    assert r.value == pytest.approx(solve(p, "brute").value, rel=REL)


# --------------------------------------------------------------------------- the preset side


def test_job_cluster_fields():
    rack = load_cluster("gb200-nvl72")
    assert rack.stage_sizes == (1, 2, 4, 8, 16, 18, 32, 36, 72)
    assert job_cluster_fields(rack, 1, None) == {}
    assert job_cluster_fields(rack, 1, 64) == {"devices": 64, "stage_sizes": [1, 2, 4, 8, 16, 18, 32, 36, 64, 72]}
    assert job_cluster_fields(rack, 2, 144) == {"stage_sizes": [1, 2, 4, 8, 16, 18, 32, 36, 72]}
    for bad in (0, 72, 145, 100.5, True):
        with pytest.raises(ProblemError) as err:
            job_cluster_fields(rack, 2, bad)
        assert err.value.path == "gpus"


def test_a_cluster_preset_with_bad_stage_sizes_is_refused():
    from partitioner.presets.files import cluster_from_dict

    doc = {"name": "x", "gpus_per_node": 8, "gpu_memory_bytes": 10**9, "peak_tflops": 100.0,
           "intra_node_GBps": 100.0, "inter_node_GBps": 10.0}
    for bad in ([], [0], [9], [2, 2], "4", [True]):
        with pytest.raises(ProblemError) as err:
            cluster_from_dict({**copy.deepcopy(doc), "stage_sizes": bad})
        assert err.value.path == "stage_sizes"


def test_build_problem_on_64_of_72_gpus():
    p = build_problem("llava-1.5-7b", "gb200-nvl72", nodes=1, gpus=64, global_batch=64, microbatches=4)
    assert p.cluster.devices == 64 and p.num_devices == 64 and 16 in p.cluster.stage_sizes
    sizes = {lay.devices for layer in p.layers for lay in layer.costs}
    assert {16, 32, 64} <= sizes and max(sizes) == 64
    plain = build_problem("llava-1.5-7b", "gb200-nvl72", nodes=1, global_batch=64, microbatches=4)
    assert not plain.cluster.partial  # without --gpus the preset's answers are unchanged


@pytest.mark.parametrize("out_bytes", [0, 1000])
def test_a_relaxed_optimum_that_does_not_pack_falls_back_to_the_exact_automaton(out_bytes):
    # two nodes of 6 GPUs, 10 used (6 + 4): two 5-GPU stages are fastest but cannot be placed (5 + 5 fits
    # neither a 6- nor a 4-GPU node), so dp's relaxed automata (no transfers; runs) find a bound, not a plan
    keys = ("dp4tp1", "dp5tp1", "dp6tp1")
    doc = _doc(nodes=2, gpus=6, sizes=[4, 5], devices=10, layers=2, keys=keys)
    for layer in doc["layers"]:
        layer["out_bytes"] = out_bytes
        layer["costs"]["dp5tp1"] = {"fwd_ms": 0.1, "bwd_ms": 0.1, "weight_bytes": 1, "act_bytes": 1}
    p = Problem.from_dict(doc)
    r = solve(p, "dp")
    assert r.status == "optimal" and r.extra["dp"]["placement"] == "bins"
    assert sorted(s.devices for s in r.plan.stages) == [4, 6]
    assert r.value == pytest.approx(solve(p, "brute").value, rel=REL)
    check_plan(p, r)


def test_plan_refuses_gpus_outside_its_nodes_at_the_door():
    r = run_cli("plan", "--model", "llava-1.5-7b", "--cluster", "gb200-nvl72", "--nodes", "2", "--gpus", "72",
                "--global-batch", "64")
    assert r.returncode == 2 and "gpus" in r.stderr and "73..144" in r.stderr and "Traceback" not in r.stderr


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from([(1, 72), (2, 72), (3, 72), (2, 6), (3, 12)]), st.data())
def test_sizes_of_the_packing_chain_always_pack(shape, data):
    nodes, g = shape
    sizes = data.draw(st.lists(st.integers(1, g), min_size=1, max_size=8, unique=True))
    devices = data.draw(st.integers((nodes - 1) * g + 1, nodes * g))
    cluster = Cluster(nodes, g, 1, 1.0, 1.0, None, tuple(sorted(sizes)), devices)
    chain = packing_chain(cluster)
    picked, left = [], devices
    while left > 0:
        fits = [s for s in chain if s <= left]
        assume(fits)
        picked.append(data.draw(st.sampled_from(fits)))
        left -= picked[-1]
    assume(all(s in cluster.allowed_sizes() for s in picked))
    order = data.draw(st.permutations(picked))
    assert pack_runs(cluster, order, [False] * (len(order) - 1)) is not None
