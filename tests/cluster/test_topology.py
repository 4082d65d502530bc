"""The cluster graph: max-flow bandwidth equals the DESIGN closed form on the default graph."""
from __future__ import annotations

import itertools

import pytest

from partitioner.cluster.topology import bandwidth, default_bandwidth
from partitioner.plan import Plan, Stage, evaluate
from partitioner.problem import Cluster, Problem, Topology

CLUSTER = Cluster(nodes=4, gpus_per_node=8, gpu_memory_bytes=1, intra_node_GBps=450.0, inter_node_GBps=50.0)


def placements(size_a: int, size_b: int):
    """Disjoint valid placements of two stages: (ids_a, ids_b, same_node)."""
    G, nodes = CLUSTER.gpus_per_node, CLUSTER.nodes
    out = []
    if size_a <= G and size_b <= G and size_a + size_b <= G:
        out.append((range(size_a), range(size_a, size_a + size_b), True))
        # interleaved inside the node
        ids = list(range(G))
        a = ids[0 : 2 * size_a : 2] if 2 * size_a <= G else ids[:size_a]
        b = [d for d in ids if d not in a][:size_b]
        out.append((a, b, True))
    need_a, need_b = -(-size_a // G), -(-size_b // G)
    if need_a + need_b <= nodes:
        a = range(size_a) if size_a > G else range(G - size_a, G)  # an in-node stage at the end of node 0
        start = need_a * G
        out.append((a, range(start, start + size_b), False))
        out.append((range(start, start + size_b), a, False))
    return out


@pytest.mark.parametrize("size_a,size_b", list(itertools.product(CLUSTER.allowed_sizes(), repeat=2)))
def test_max_flow_equals_the_formula(size_a, size_b):
    cases = placements(size_a, size_b)
    if size_a + size_b <= CLUSTER.num_devices:
        assert cases, "every pair that fits has a placement"
    for a, b, same in cases:
        assert bandwidth(CLUSTER, a, b) == pytest.approx(default_bandwidth(CLUSTER, size_a, size_b, same))


def test_other_gpus_do_not_relay():
    # one GPU to one GPU across nodes: one NIC each, however many idle GPUs could relay
    assert bandwidth(CLUSTER, [0], [8]) == pytest.approx(50.0)
    assert bandwidth(CLUSTER, [0, 1], [2]) == pytest.approx(450.0)


def test_overlapping_sets_are_refused():
    with pytest.raises(ValueError):
        bandwidth(CLUSTER, [0, 1], [1, 2])


def test_user_topology_replaces_the_formula():
    # 2 nodes x 2 GPUs; inside a node 100 GB/s; between nodes only one 5 GB/s link (GPU 1 - GPU 2)
    edges = ((0, 1, 100.0), (2, 3, 100.0), (1, 2, 5.0))
    cluster = Cluster(2, 2, 10**9, 100.0, 50.0, Topology(edges))
    assert bandwidth(cluster, [0], [1]) == pytest.approx(100.0)
    assert bandwidth(cluster, [0, 1], [2, 3]) == pytest.approx(5.0)
    cost = {"fwd_ms": 1.0, "bwd_ms": 1.0, "weight_bytes": 0, "act_bytes": 0}
    problem = Problem.from_dict(
        {
            "version": 1,
            "cluster": {
                "nodes": 2, "gpus_per_node": 2, "gpu_memory_bytes": 10**9, "intra_node_GBps": 100.0,
                "inter_node_GBps": 50.0, "topology": {"edges": [list(e) for e in edges]},
            },
            "training": {"microbatches": 1},
            "layers": [{"out_bytes": 10**7, "costs": {"dp2tp1": cost}}, {"costs": {"dp2tp1": cost}}],
        }
    )
    ev = evaluate(problem, Plan((Stage(0, 0, 2, 2, 1, (0, 1)), Stage(1, 1, 2, 2, 1, (2, 3)))))
    # formula would say min(2,2) * 50 GB/s = 0.1 ms; the graph's single 5 GB/s link gives 2 ms
    assert ev.transfers_ms == pytest.approx((2.0,))
