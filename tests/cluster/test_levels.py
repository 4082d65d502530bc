"""Network levels (DESIGN.md "Network levels"): ``cluster.levels``, its graph and its closed form.

The field's parsing and refusals (one error naming the field), the round trip, the levels graph's
max-flow against :func:`~partitioner.cluster.levels.levels_bandwidth` on random node-disjoint device
sets (what valid plans' boundaries are), and rule 4's consecutive placement on a levels cluster.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner import Problem, ProblemError, evaluate
from partitioner.cluster.levels import (
    boundary_bandwidth,
    consecutive_fits,
    levels_bandwidth,
    levels_period,
    network_GBps,
    size_level,
    span_level,
)
from partitioner.cluster.topology import bandwidth, cluster_graph
from partitioner.plan import Plan, PlanError, Stage
from partitioner.problem import Cluster, Level
from strategies import examples, network_levels


def _doc(nodes=4, gpus=2, levels=None) -> dict:
    cluster = {"nodes": nodes, "gpus_per_node": gpus, "gpu_memory_bytes": 10**9,
               "intra_node_GBps": 100.0, "inter_node_GBps": 50.0}
    if levels is not None:
        cluster["levels"] = levels
    costs = {k: {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 1} for k in ("dp1tp1", "dp2tp1", "dp1tp2", "dp4tp1", "dp6tp1")}
    return {"version": 1, "cluster": cluster, "training": {"microbatches": 4},
            "layers": [{"name": f"l{i}", "module": "m", "out_bytes": 10**9, "costs": costs} for i in range(3)]}


LEAF_SPINE = [{"name": "leaf", "nodes": 2, "GBps": 50.0}, {"name": "spine", "GBps": 50.0, "oversubscription": 2}]


def test_levels_parse_round_trip_and_rates():
    p = Problem.from_dict(_doc(levels=LEAF_SPINE))
    assert p.cluster.levels == (Level("leaf", 2, 50.0, 1.0), Level("spine", None, 50.0, 2.0))
    assert p.cluster.level_rates() == (50.0, 25.0)
    assert Problem.from_dict(p.to_dict()).cluster == p.cluster
    assert "levels" not in Problem.from_dict(_doc()).to_dict()["cluster"]
    assert Problem.from_dict(_doc()).cluster.levels is None


@pytest.mark.parametrize(
    "levels, where, says",
    [
        ([], "cluster.levels", "non-empty list"),
        ("leaf", "cluster.levels", "non-empty list"),
        ([{"name": "a", "GBps": 1.0}] * 9, "cluster.levels", "more than the 8"),
        ([{"name": "a", "GBps": 1.0, "wide": 1}], "cluster.levels[0]", "unknown field 'wide'"),
        ([{"GBps": 1.0}], "cluster.levels[0].name", "is missing"),
        ([{"name": "a", "nodes": 2}], "cluster.levels[0].GBps", "is missing"),
        ([{"name": "a", "GBps": 1.0}, {"name": "b", "GBps": 1.0}], "cluster.levels[0].nodes", "only the outermost"),
        ([{"name": "a", "nodes": 2, "GBps": 1.0}, {"name": "a", "GBps": 1.0}], "cluster.levels[1].name", "no other level"),
        ([{"name": "a", "nodes": 2, "GBps": 1.0}, {"name": "b", "nodes": 3, "GBps": 1.0}], "cluster.levels[1].nodes", "multiple"),
        ([{"name": "a", "nodes": 2, "GBps": 1.0}, {"name": "b", "nodes": 2, "GBps": 1.0}], "cluster.levels[1].nodes", "multiple"),
        ([{"name": "a", "nodes": 3, "GBps": 1.0}], "cluster.levels[0].nodes", "hold every node"),
        ([{"name": "a", "GBps": 0}], "cluster.levels[0].GBps", ""),
        ([{"name": "a", "GBps": 1.0, "oversubscription": 0.5}], "cluster.levels[0].oversubscription", ""),
        ([{"name": "a", "nodes": 0, "GBps": 1.0}], "cluster.levels[0].nodes", ""),
    ],
)
def test_bad_levels_name_the_field(levels, where, says):
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(_doc(levels=levels))
    assert where in str(err.value) and says in str(err.value)


def test_levels_refuse_a_user_topology_and_take_partial_racks():
    doc = _doc(levels=LEAF_SPINE)
    doc["cluster"]["topology"] = {"edges": [[i, i + 1, 1.0] for i in range(7)]}
    with pytest.raises(ProblemError, match=r"cluster\.levels.*cannot be combined with cluster\.topology"):
        Problem.from_dict(doc)
    doc = _doc(levels=LEAF_SPINE)
    doc["cluster"]["stage_sizes"] = [1, 2]
    doc["cluster"]["devices"] = 7
    c = Problem.from_dict(doc).cluster
    assert c.num_devices == 7 and c.levels is not None
    assert consecutive_fits(c, 6, 1) and not consecutive_fits(c, 6, 2)  # the last node uses one GPU


def test_the_closed_form_on_a_leaf_spine():
    c = Problem.from_dict(_doc(levels=LEAF_SPINE)).cluster  # 4 nodes x 2 GPUs; leaves {0,1}, {2,3}
    assert levels_bandwidth(c, [0], [1]) == 100.0  # one node: NVLink
    assert levels_bandwidth(c, [0, 1], [2, 3]) == 2 * 50.0  # one leaf
    assert levels_bandwidth(c, [0, 1, 2, 3], [4, 5, 6, 7]) == 4 * 25.0  # across the 2:1 spine
    # nodes 0-2 send to node 3: node 2 and 3 share leaf 1 (2 GPUs at 50), the rest is capped by node 3
    assert levels_bandwidth(c, range(6), [6, 7]) == 2 * 50.0
    assert boundary_bandwidth(c, 0, 4, 4) == 100.0
    assert span_level(c, [0, 1]) == -1 and span_level(c, range(4)) == 0 and span_level(c, range(8)) == 1
    assert consecutive_fits(c, 1, 1) and not consecutive_fits(c, 1, 2) and not consecutive_fits(c, 2, 3)
    assert consecutive_fits(c, 4, 4) and not consecutive_fits(c, 6, 4)
    assert not consecutive_fits(c, 2, 4)  # two nodes, one leaf's worth, across leaves 0 and 1
    assert consecutive_fits(c, 2, 6)  # larger than a leaf: crosses the spine anyway
    assert size_level(c.levels, 2, 2) == -1 and size_level(c.levels, 2, 4) == 0 and size_level(c.levels, 2, 6) == 1
    assert network_GBps(c.levels, 50.0, 2, 4) == 50.0 and network_GBps(c.levels, 50.0, 2, 8) == 25.0
    assert network_GBps(None, 50.0, 2, 8) == 50.0
    with pytest.raises(ValueError, match="both sets"):
        levels_bandwidth(c, [0, 2], [1, 4])


@st.composite
def _disjoint_sets(draw):
    nodes = draw(st.integers(2, 9))
    gpus = draw(st.sampled_from([1, 2, 3, 4]))
    levels = draw(network_levels(nodes))
    doc = _doc(nodes, gpus, levels)
    doc["cluster"]["inter_node_GBps"] = draw(st.sampled_from([0.5, 1.0, 4.0])) * 1e-3
    for layer in doc["layers"]:
        layer["costs"] = {"dp1tp1": layer["costs"]["dp1tp1"]}
    cluster = Problem.from_dict(doc).cluster
    order = draw(st.permutations(range(nodes)))
    k = draw(st.integers(1, nodes - 1))
    src_nodes = order[:k]
    dst_nodes = order[k:][: draw(st.integers(1, nodes - k))]

    def pick(ns):
        ids = [d for n in ns for d in range(n * gpus, (n + 1) * gpus) if draw(st.booleans())]
        return ids or [ns[0] * gpus]

    return cluster, pick(src_nodes), pick(dst_nodes)


@settings(max_examples=examples(300), deadline=None)
@given(_disjoint_sets())
def test_closed_form_equals_the_max_flow_on_the_levels_graph(case):
    cluster, src, dst = case
    assert levels_bandwidth(cluster, src, dst) == pytest.approx(bandwidth(cluster, src, dst), rel=1e-9)


def test_graph_without_levels_is_unchanged():
    plain = Problem.from_dict(_doc()).cluster
    arcs = sorted(map(str, cluster_graph(plain).edges(data=True)))
    assert any("nic-out" in a and "nic-in" in a for a in arcs)
    assert not any("'up'" in a for a in arcs)
    leveled = Problem.from_dict(_doc(levels=LEAF_SPINE)).cluster
    one_node = cluster_graph(leveled, [0, 1])
    assert not any(isinstance(v, tuple) and v[0] in ("up", "down") for v in one_node.nodes)


def test_rule_4_on_a_levels_cluster_wants_consecutive_stages():
    p = Problem.from_dict(_doc(levels=LEAF_SPINE))
    good = Plan((Stage(0, 0, 2, 2, 1, device_ids=(0, 1)), Stage(1, 2, 6, 6, 1, device_ids=tuple(range(2, 8)))))
    ev = evaluate(p, good)
    # 2 GPUs of node 0 to nodes 1-3: node 1 shares leaf 0 (2 GPUs at 50 GB/s, all the sender has)
    assert ev.transfers_ms[0] == pytest.approx(1e9 / (2 * 50.0 * 1e6))
    swapped = Plan((Stage(0, 0, 2, 2, 1, device_ids=(6, 7)), Stage(1, 2, 6, 6, 1, device_ids=tuple(range(6)))))
    with pytest.raises(PlanError, match="consecutive devices in pipeline order") as err:
        evaluate(p, swapped)
    assert err.value.rule == 4
    # the same plan on the cluster without levels is valid, as before
    evaluate(Problem.from_dict(_doc()), swapped)


def test_rule_4_keeps_a_leaf_sized_stage_inside_one_leaf():
    p = Problem.from_dict(_doc(levels=LEAF_SPINE))
    across = Plan((Stage(0, 0, 2, 2, 1, device_ids=(0, 1)), Stage(1, 1, 4, 4, 1, device_ids=(2, 3, 4, 5)),
                   Stage(2, 2, 2, 2, 1, device_ids=(6, 7))))
    with pytest.raises(PlanError, match="inside one group") as err:
        evaluate(p, across)
    assert err.value.rule == 4 and err.value.stage == 1
    evaluate(Problem.from_dict(_doc()), across)  # valid without levels


def test_a_stage_across_the_spine_pays_the_oversubscription():
    p = Problem.from_dict(_doc(levels=LEAF_SPINE))
    plan = Plan((Stage(0, 1, 4, 4, 1, device_ids=tuple(range(4))), Stage(2, 2, 4, 4, 1, device_ids=tuple(range(4, 8)))))
    assert evaluate(p, plan).transfers_ms[0] == pytest.approx(1e9 / (4 * 25.0 * 1e6))
    flat = Problem.from_dict(_doc())
    assert evaluate(flat, plan).transfers_ms[0] == pytest.approx(1e9 / (4 * 50.0 * 1e6))


def test_a_cluster_record_without_levels_reads_as_before():
    c = Cluster(2, 8, 1, 1.0, 1.0)
    assert c.levels is None and c.level_rates() == ()
    assert copy.deepcopy(c) == c


@st.composite
def _shifted_boundaries(draw):
    nodes = draw(st.integers(2, 12))
    gpus = draw(st.sampled_from([1, 2, 4]))
    doc = _doc(nodes, gpus, draw(network_levels(nodes)))
    for layer in doc["layers"]:
        layer["costs"] = {"dp1tp1": layer["costs"]["dp1tp1"]}
    cluster = Problem.from_dict(doc).cluster
    N = cluster.num_devices
    size = draw(st.sampled_from(cluster.allowed_sizes()))
    nxt = draw(st.sampled_from(cluster.allowed_sizes()))
    offset = draw(st.integers(0, N - 1))
    return cluster, offset, size, nxt


@settings(max_examples=examples(300), deadline=None)
@given(_shifted_boundaries())
def test_rule_4_and_the_max_flow_repeat_with_the_levels_period(case):
    """What dp's offsets states rely on (DESIGN.md "Network levels"): moving consecutive stages by
    :func:`levels_period` inside the cluster changes neither rule 4 nor the boundary's bandwidth."""
    cluster, offset, size, nxt = case
    W, N = levels_period(cluster), cluster.num_devices
    assert W % cluster.gpus_per_node == 0
    shifted = offset + W
    if shifted + size + nxt > N:
        return
    assert consecutive_fits(cluster, offset, size) == consecutive_fits(cluster, shifted, size)
    if consecutive_fits(cluster, offset, size) and consecutive_fits(cluster, offset + size, nxt):
        assert boundary_bandwidth(cluster, offset, size, nxt) == pytest.approx(
            boundary_bandwidth(cluster, shifted, size, nxt), rel=1e-12)
