"""The v2 stage tables and their reshard times against from-the-definition computations.

``reshard._port_elements`` (closed form) is compared with the busiest ports of
:func:`partitioner.reshard.plan_reshard`'s explicit transfer list, and
``StageCosts.matrix`` / ``configs`` with an enumeration of every config tuple
(one config per segment) of every stage on random small v2 problems.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from partitioner.problem import Cluster, Layout
from partitioner.reshard import Sharding, _port_elements, plan_reshard, segment_reshard_ms, stage_reshard_ms


def _divisor_pairs(n: int) -> list[tuple[int, int]]:
    return [(dp, n // dp) for dp in range(1, n + 1) if n % dp == 0]


def _port_elements_by_plan(source, dest, pattern):
    """Busiest NVLink / NIC port and total from the explicit plan (the definition)."""
    B = math.lcm(source[0], dest[0])
    D = math.lcm(source[1], dest[1])
    devices = tuple(range(len(pattern)))
    plan = plan_reshard((B, 1, D), Sharding(*source, devices), Sharding(*dest, devices), dtype_bytes=1)
    load: dict = defaultdict(int)
    for (src, dst), count in plan.traffic().items():
        link = "nvlink" if pattern[src] == pattern[dst] else "nic"
        load[(src, link + "-out")] += count
        load[(dst, link + "-in")] += count
    nvlink = max((c for (_, port), c in load.items() if port.startswith("nvlink")), default=0)
    nic = max((c for (_, port), c in load.items() if port.startswith("nic")), default=0)
    return nvlink, nic, B * D


@st.composite
def _reshard_case(draw):
    n = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]))
    source = draw(st.sampled_from(_divisor_pairs(n)))
    dest = draw(st.sampled_from(_divisor_pairs(n)))
    per_node = draw(st.sampled_from([1, 2, 4, 8]))
    canonical = draw(st.booleans())
    if canonical:
        pattern = tuple(r // per_node for r in range(n))
    else:
        nodes = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        seen: dict = {}
        pattern = tuple(seen.setdefault(x, len(seen)) for x in nodes)
    return source, dest, pattern


@settings(deadline=None, max_examples=150)
@given(_reshard_case())
def test_port_elements_closed_form_matches_the_plan(case):
    source, dest, pattern = case
    assert _port_elements(source, dest, pattern) == _port_elements_by_plan(source, dest, pattern)


def test_port_elements_on_every_mesh_pair_of_two_nodes():
    for n in (8, 16):
        pattern = tuple(r // 8 for r in range(n))
        for source in _divisor_pairs(n):
            for dest in _divisor_pairs(n):
                assert _port_elements(source, dest, pattern) == _port_elements_by_plan(source, dest, pattern)


@settings(deadline=None, max_examples=60)
@given(st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([1, 2, 4, 8]), st.integers(0, 10**6), st.data())
def test_stage_reshard_is_the_segment_reshard_on_ids_from_zero(devices, per_node, out_bytes, data):
    cluster = Cluster(nodes=max(1, devices // per_node), gpus_per_node=per_node, gpu_memory_bytes=10**9,
                      intra_node_GBps=2.0, inter_node_GBps=0.5)
    assume(devices <= cluster.num_devices)
    source = Layout(*data.draw(st.sampled_from(_divisor_pairs(devices))))
    dest = Layout(*data.draw(st.sampled_from(_divisor_pairs(devices))))
    assert stage_reshard_ms(out_bytes, source, dest, devices, cluster) == segment_reshard_ms(
        out_bytes, source, dest, range(devices), cluster
    )


def test_port_elements_rejects_a_layout_of_the_wrong_size():
    with pytest.raises(ValueError):
        _port_elements((2, 2), (4, 2), tuple(range(8)))


# ----------------------------------------------------------------------------- the stage tables

from partitioner import Problem  # noqa: E402
from partitioner.solvers.dp_stage import StageCosts  # noqa: E402
from test_dp_v2 import stage_best  # noqa: E402


@st.composite
def _wide_v2(draw) -> Problem:
    """Small v2 problems on up to 16 GPUs over several nodes (NVLink and NIC reshards), runs alternating modules."""
    nodes, gpus = draw(st.sampled_from([(2, 2), (2, 4), (1, 8), (2, 8), (4, 4)]))
    n_layers = draw(st.integers(2, 5))
    modules = draw(st.lists(st.sampled_from("ab"), min_size=n_layers, max_size=n_layers))
    sizes = [d for d in (2, 4, 8, 16) if d <= nodes * gpus and (gpus % d == 0 or d % gpus == 0)]
    meshes = [(d // tp, tp) for d in sizes for tp in (1, 2, 4, 8) if d % tp == 0 and tp <= gpus]
    variants = draw(st.sampled_from([("",), ("", "r")]))
    layers = []
    for i in range(n_layers):
        keys = [(dp, tp, v) for dp, tp in meshes for v in variants]
        if draw(st.booleans()):
            keys = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True))
        base, w0, a0 = draw(st.integers(1, 40)), draw(st.integers(0, 60)), draw(st.integers(0, 24))
        costs = {}
        for dp, tp, v in keys:
            fwd = round(base / (draw(st.floats(0.3, 1.2)) * dp * tp), 3)
            bwd = round(fwd * draw(st.floats(0.0, 2.5)), 3)
            weight, act = w0 // tp, a0 // (dp * tp)
            if v == "r":
                bwd, act = round(bwd + fwd, 3), act // 4
            costs[f"dp{dp}tp{tp}" + (f"/{v}" if v else "")] = {
                "fwd_ms": fwd, "bwd_ms": bwd, "weight_bytes": weight, "act_bytes": act,
            }
        layers.append({"name": f"{modules[i]}{i}", "module": modules[i],
                       "out_bytes": draw(st.integers(0, 4000)), "costs": costs})
    doc = {
        "version": 2,
        "name": "wide-v2",
        "cluster": {
            "nodes": nodes, "gpus_per_node": gpus,
            "gpu_memory_bytes": draw(st.integers(10, 120)),
            "intra_node_GBps": draw(st.sampled_from([1.0, 8.0])) * 1e-3,
            "inter_node_GBps": draw(st.sampled_from([0.5, 4.0])) * 1e-3,
        },
        "training": {"microbatches": 4, "objective": "bottleneck"},
        "variants": {"r": "recompute"},
        "layers": layers,
    }
    return Problem.from_dict(doc)


@settings(deadline=None, max_examples=80)
@given(_wide_v2(), st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_stage_tables_match_the_enumeration_of_segment_configs(problem, stashes):
    """Every entry of ``matrix`` (and the time ``configs`` reports) equals the least time over every tuple of one
    config per segment that fits, for several stashes asked of one StageCosts in turn."""
    sizes = tuple(sorted({lay.devices for lay in problem.layouts()}))
    costs = StageCosts(problem, problem.layouts(), sizes)
    L = problem.num_layers
    for stash in stashes:
        for i, d in enumerate(sizes):
            table = costs.matrix(i, stash)
            for a in range(L):
                for b in range(L):
                    expected = stage_best(problem, a, b, d, stash) if a <= b else math.inf
                    if math.isinf(expected):
                        assert math.isinf(table[a, b])
                        assert a > b or costs.configs(a, b, i, stash) is None
                        continue
                    assert table[a, b] == pytest.approx(expected, rel=1e-9, abs=1e-12)
                    configs, t = costs.configs(a, b, i, stash)
                    assert len(configs) == len(problem.segments(a, b))
                    assert t == pytest.approx(expected, rel=1e-9, abs=1e-12)
