"""The v2 stage tables and their reshard times against from-the-definition computations.

``reshard._port_elements`` (closed form) is compared with the busiest ports of
:func:`partitioner.cluster.reshard.plan_reshard`'s explicit transfer list, and
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

from partitioner.cluster.reshard import Sharding, _port_elements, plan_reshard, segment_reshard_ms, stage_reshard_ms
from partitioner.problem import Cluster, Layout
from partitioner.solvers.dp.stage import _prune_list3
from strategies import examples


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


@settings(deadline=None, max_examples=examples(150))
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


@settings(deadline=None, max_examples=examples(60))
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
from partitioner.solvers.dp.stage import StageCosts  # noqa: E402
from tests.solvers.dp.test_segments import stage_best  # noqa: E402


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


@pytest.mark.slow
@settings(deadline=None, max_examples=examples(80))
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


# ----------------------------------------------------------------------------- bit for bit: the summation order

from strategies import small_v2_problems, small_v3_problems  # noqa: E402


def _chain_values(costs: StageCosts, a: int, b: int, i: int, stash: int, one, two, r1: float, r2: float):
    """Every fitting config tuple of stage a..b (one config per segment) valued as the module docstring's
    summation order forms it, by plain loops: ``[(part 1, part 2)]`` (``two`` None: the time alone).

    Inside one run: the forward sum from a (``0.0 + t[a]`` first unless a starts the run); one config
    of the size: the forward sum from a; otherwise the first segment summed backward from its end,
    then per later run ``+ r1 * r`` (and ``+ r2 * r``) and the segment's forward sum from its start.
    """
    configs, runs = costs.of_size[i], costs.runs
    segs = [(max(st, a), min(en, b)) for st, en in runs if st <= b and en >= a]

    def fits(j, x, y):
        return int(costs.next_missing[j, x]) > y

    def forward(row, x, y, lead):
        acc = row[x] if not lead else 0.0 + row[x]
        for z in range(x + 1, y + 1):
            acc = acc + row[z]
        return float(acc)

    def backward(row, x, y):
        acc = row[y]
        for z in range(y - 1, x - 1, -1):
            acc = acc + row[z]
        return float(acc)

    rows = [one] if two is None else [one, two]
    out = []
    if len(segs) == 1 or len(configs) == 1:
        lead = len(segs) == 1 and a != next(st for st, en in runs if st <= a <= en)
        for j in configs:
            if fits(j, a, b) and int(costs.memory(j, a, b, stash)) <= costs.cap:
                out.append(tuple(forward(r[j], a, b, lead) for r in rows))
        return out
    for combo in itertools.product(configs, repeat=len(segs)):
        if not all(fits(j, x, y) for j, (x, y) in zip(combo, segs)):
            continue
        if sum(int(costs.memory(j, x, y, stash)) for j, (x, y) in zip(combo, segs)) > costs.cap:
            continue
        vals = [backward(r[combo[0]], *segs[0]) for r in rows]
        for k in range(1, len(segs)):
            x, y = segs[k]
            r = costs.reshard(x - 1, costs.layouts[combo[k - 1]].mesh, costs.layouts[combo[k]].mesh, costs.sizes[i])
            for n, (row, factor) in enumerate(zip(rows, (r1, r2))):
                vals[n] = (vals[n] + factor * r) + forward(row[combo[k]], x, y, False)
        out.append(tuple(vals))
    return out


def _pareto_pairs(pairs):
    """The distinct pairs no other pair is <= in both, in order of the first part."""
    pairs = sorted(set(pairs))
    out = []
    for u, w in pairs:
        if not out or w < out[-1][1]:
            out.append((u, w))
    return out


def _assert_summation_order(costs: StageCosts, stashes) -> None:
    L = costs.L
    for stash in stashes:
        for i in range(len(costs.sizes)):
            table = costs.matrix(i, stash)
            for a in range(L):
                for b in range(L):
                    vals = _chain_values(costs, a, b, i, stash, costs.time, None, 2.0, 0.0) if a <= b else []
                    assert table[a, b] == min([v[0] for v in vals], default=math.inf)
            for parts in ("uw", "fb"):
                one, two, r1, r2 = costs._parts[parts]
                U, W = costs.options(i, stash, parts)
                want = {(a, b): _pareto_pairs(_chain_values(costs, a, b, i, stash, one, two, r1, r2))
                        for a in range(L) for b in range(a, L)}
                assert U.shape == W.shape == (L, L, max([1] + [len(v) for v in want.values()]))
                for a in range(L):
                    for b in range(L):
                        got = [(u, w) for u, w in zip(U[a, b], W[a, b]) if math.isfinite(u)]
                        assert got == want.get((a, b), [])
                        assert np.isinf(U[a, b, len(got):]).all() and np.isinf(W[a, b, len(got):]).all()


@pytest.mark.slow
@settings(deadline=None, max_examples=examples(60))
@given(st.one_of(_wide_v2(), small_v2_problems(max_layers=6)), st.lists(st.integers(1, 5), min_size=1, max_size=3),
       st.booleans())
def test_stage_tables_are_the_summation_order_bit_for_bit(problem, stashes, tiny_buffers):
    """``matrix`` is the least chain value over the fitting tuples, and ``options`` (both parts) the distinct
    Pareto pairs of the chain values in order of part 1, padded with inf to the most any stage has: equal
    floats, not approximately (what the compiled loops must keep from the numpy rule they replace). Also
    with one config per size (the spanning one-config loops), and with the kernels' buffers and the
    options' pair lists started at one point (every growth and retry path)."""
    from unittest.mock import patch

    from partitioner.solvers.dp import stage as dp_stage

    sizes = tuple(sorted({lay.devices for lay in problem.layouts()}))
    first = {}
    for lay in problem.layouts():
        first.setdefault(lay.devices, lay)
    with patch.object(dp_stage, "FRONTIER_POINTS", 1 if tiny_buffers else dp_stage.FRONTIER_POINTS), \
            patch.object(dp_stage, "OPTION_PAIRS", 1 if tiny_buffers else dp_stage.OPTION_PAIRS):
        _assert_summation_order(StageCosts(problem, problem.layouts(), sizes), stashes)
        _assert_summation_order(StageCosts(problem, tuple(first.values()), sizes), stashes[:1])


@pytest.mark.slow
def test_stage_tables_with_long_frontiers_bit_for_bit():
    """Nine one-layer runs, two meshes that trade time for memory: frontiers far past the buffers' start."""
    from unittest.mock import patch

    from partitioner.solvers.dp import stage as dp_stage

    rng = np.random.default_rng(11)
    layers = []
    for i in range(9):
        fast, light = float(rng.integers(1, 50)), int(rng.integers(1, 50))
        layers.append({"name": f"l{i}", "module": "ab"[i % 2], "out_bytes": int(rng.integers(0, 3000)), "costs": {
            "dp2tp1": {"fwd_ms": fast, "bwd_ms": 0.5, "weight_bytes": 60 - light, "act_bytes": 1},
            "dp1tp2": {"fwd_ms": fast + float(rng.integers(1, 30)), "bwd_ms": 0.25, "weight_bytes": light, "act_bytes": 0},
        }})
    problem = Problem.from_dict({
        "version": 2, "name": "long-frontiers",
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 330, "intra_node_GBps": 1e-3, "inter_node_GBps": 1e-3},
        "training": {"microbatches": 4, "objective": "bottleneck"}, "layers": layers,
    })
    costs = StageCosts(problem, problem.layouts(), (1, 2))
    for points in (1, 64):
        with patch.object(dp_stage, "FRONTIER_POINTS", points):
            _assert_summation_order(StageCosts(problem, problem.layouts(), (1, 2)), (1, 3))
    assert costs.matrix(1, 1)[0, 8] < math.inf


def _fit_end_by_definition(costs: StageCosts, j: int, stash: int) -> list[int]:
    """Per first layer a: the last b with layers a..b all in config j and ``W + stash * A <= cap`` (a - 1 if none)."""
    out = []
    for a in range(costs.L):
        b = a - 1
        while b + 1 < costs.L and costs.next_missing[j, a] > b + 1 and int(costs.memory(j, a, b + 1, stash)) <= costs.cap:
            b += 1
        out.append(b)
    return out


@settings(deadline=None, max_examples=examples(60))
@given(st.one_of(_wide_v2(), small_v2_problems(max_layers=6), small_v3_problems(max_layers=6)),
       st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_fit_ends_of_many_configs_are_each_configs_fit_end(problem, stashes, data):
    """``fit_ends`` (one sorted search over every config's rows at once) gives each config's ``fit_end`` by the
    definition, whichever configs were met before at that stash, in the order asked (repeats too)."""
    layouts = problem.layouts()
    sizes = tuple(sorted({lay.devices for lay in layouts}))
    costs = StageCosts(problem, layouts, sizes)
    J = len(layouts)
    for stash in stashes:
        before = data.draw(st.lists(st.integers(0, J - 1), max_size=2))
        for j in before:  # met alone first: the batch skips it
            costs.fit_end(j, stash)
        asked = data.draw(st.lists(st.integers(0, J - 1), min_size=0, max_size=2 * J))
        got = costs.fit_ends(asked, stash)
        assert got.shape == (len(asked), costs.L) and got.dtype == np.int64 and got.flags.c_contiguous
        for q, j in enumerate(asked):
            assert got[q].tolist() == _fit_end_by_definition(costs, j, stash)


def _pairwise_prune3(points: list) -> list:
    """The definition :func:`partitioner.solvers.dp.stage._prune_list3` keeps (every pair compared)."""
    return [p for n, p in enumerate(points)
            if not any(q[:3] != p[:3] and all(x <= y for x, y in zip(q[:3], p[:3])) or (q[:3] == p[:3] and m < n)
                       for m, q in enumerate(points))]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.5, math.inf]), st.sampled_from([0.0, 1.0, 3.0, math.inf]),
                          st.integers(0, 4)), max_size=40))
def test_the_pareto_sweep_keeps_the_pairwise_frontier(triples):
    points = [(u, w, mem, n) for n, (u, w, mem) in enumerate(triples)]  # the payload tells equal points apart
    assert _prune_list3(points) == _pairwise_prune3(points)
