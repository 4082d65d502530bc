"""The greedy baseline: valid plans, never better than the optimum, never claims optimality."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from checks import check_plan
from partitioner import load_problem, solve
from partitioner.solvers.greedy import balance_cuts, grow_sizes
from strategies import examples, small_problems, small_v2_problems


@pytest.mark.slow
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_greedy_is_valid_and_never_beats_the_optimum(problem):
    greedy = solve(problem, "greedy")
    assert greedy.status in ("feasible", "infeasible")
    oracle = solve(problem, "dp")
    if greedy.status == "feasible":
        assert oracle.status == "optimal"
        assert greedy.value >= oracle.value * (1 - 1e-9)
        check_plan(problem, greedy)
    else:
        assert greedy.message


def test_lesson16_rebalancing(examples):
    r = solve(load_problem(examples / "rebalance_4gpu.json"), "greedy")
    assert r.status == "feasible" and r.value == 22.0


def test_balance_cuts_gives_exactly_the_stage_count():
    work = np.array([16.0] + [2.0] * 32 + [8.0])
    for parts in range(1, 35):
        cuts = balance_cuts(work, parts)
        assert len(cuts) == parts and cuts[0][0] == 0 and cuts[-1][1] == 33
        assert all(b + 1 == a for (_, b), (a, _) in zip(cuts, cuts[1:]))


def test_balance_cuts_covers_every_layer_despite_rounding():
    # sequential and pairwise sums of these works differ in the last bit: all layers must still be cut
    from benchmarks.synthetic import synthetic_problem
    from partitioner.solvers.greedy import layer_work

    for seed in range(12):
        work = layer_work(synthetic_problem(layers=12, nodes=2, gpus_per_node=4, layouts=2, seed=seed))
        for parts in range(1, 13):
            cuts = balance_cuts(work, parts)
            assert len(cuts) == parts and cuts[0][0] == 0 and cuts[-1][1] == 11


def test_grow_sizes_uses_every_device():
    assert sum(grow_sizes([5.0, 1.0, 1.0], (1, 2, 4, 8, 16), 16)) == 16
    assert grow_sizes([1.0] * 3, (1, 2, 4), 2) is None


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_uniform_and_balanced_are_ordered_and_never_beat_the_optimum(problem):
    optimum = solve(problem, "dp")
    uniform = solve(problem, "uniform")
    balanced = solve(problem, "balanced")
    for r in (uniform, balanced):
        assert r.status in ("feasible", "infeasible"), r.message
        if r.status == "feasible":
            assert optimum.status == "optimal" and r.value >= optimum.value * (1 - 1e-9)
            check_plan(problem, r)
    # balanced optimizes the cuts (and placement) within uniform's meshes and layouts
    if uniform.status == "feasible":
        assert balanced.status == "feasible" and balanced.value <= uniform.value * (1 + 1e-9)


def test_uniform_is_megatrons_split(examples):
    problem = load_problem(examples / "rebalance_4gpu.json")
    r = solve(problem, "uniform")
    assert r.status == "feasible"
    assert r.plan.layers_per_stage() == [9, 9, 8, 8]  # 34 layers on 4 stages, remainder first
    assert r.value == pytest.approx(16 + 8 * 2.0)  # stage 0: the vit and 8 llm layers
    b = solve(problem, "balanced")
    assert b.value == 22.0  # one layout (dp1tp1) already allows the optimal cuts here


def test_balanced_out_of_time_is_an_error_not_infeasible(examples):
    # a deadline that has passed before the first recursion step: nothing is proven infeasible
    r = solve(load_problem(examples / "rebalance_4gpu.json"), "balanced", time_limit=1e-9)
    assert r.status == "error"
    assert "time limit" in r.message


# ----------------------------------------------------------------------------- the fast paths against plain rules

import heapq  # noqa: E402
from unittest.mock import patch  # noqa: E402

from hypothesis import strategies as st  # noqa: E402

from partitioner.solvers import greedy  # noqa: E402
from partitioner.solvers.greedy import Balancer  # noqa: E402


def _plain_cuts(work: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """balance_cuts by its definition: the 60-step bisection over the threshold, one full fill per step
    (running sums by a Python loop), then the splits of the heaviest stages."""
    n = len(work)

    def fill(threshold):
        starts = [0]
        while len(starts) <= parts:
            s, acc, over = starts[-1], 0.0, None
            for j in range(s, n):
                acc += float(work[j])
                if acc > threshold and j > s:
                    over = j
                    break
            if over is None:
                return starts
            starts.append(over)
        return starts

    lo, hi = float(work.max()), float(work.sum()) * (1 + 1e-9) + 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        if len(fill(mid)) <= parts:
            hi = mid
        else:
            lo = mid
    starts = fill(hi)
    prefix = np.concatenate([[0.0], np.cumsum(work)])
    bounds = starts + [n]
    ranges = [(-(prefix[b] - prefix[a]), a, b) for a, b in zip(bounds, bounds[1:]) if b - a > 1]
    heapq.heapify(ranges)
    while len(starts) < parts:
        _, a, b = heapq.heappop(ranges)
        cut = min(max(int(np.searchsorted(prefix, (prefix[a] + prefix[b]) / 2, side="left")), a + 1), b - 1)
        starts.append(cut)
        for x, y in ((a, cut), (cut, b)):
            if y - x > 1:
                heapq.heappush(ranges, (-(prefix[y] - prefix[x]), x, y))
    starts.sort()
    bounds = starts + [n]
    return [(bounds[k], bounds[k + 1] - 1) for k in range(parts)]


_works = st.lists(
    st.one_of(
        st.just(0.0),
        st.floats(0.0, 1e4),
        st.sampled_from([0.1, 0.2, 0.3, 1e-9, 7.0, 1e12, 5e-324]),
        st.integers(0, 4).map(float),
    ),
    min_size=1,
    max_size=90,
).map(np.array)


@settings(max_examples=examples(300), deadline=None)
@given(_works, st.data())
def test_balancer_equals_the_plain_bisection(work, data):
    """Both fast paths -- the candidate search for many counts and the skipping bisection for a few -- give
    the cuts of the definition for every count, also with the candidate search forced on tiny inputs."""
    n = len(work)
    counts = data.draw(st.lists(st.integers(1, n), min_size=1, max_size=12, unique=True))
    plain = {p: _plain_cuts(work, p) for p in counts}
    with patch.object(greedy, "MANY_COUNTS", 1):
        many = Balancer(work, counts)
        assert many._starts  # the candidate search ran
        assert {p: many.cuts(p) for p in counts} == plain
    with patch.object(greedy, "MANY_COUNTS", 10**9):
        few = Balancer(work, counts)
        assert not few._starts
        assert {p: few.cuts(p) for p in counts} == plain
    assert {p: balance_cuts(work, p) for p in counts} == plain


def test_balancer_on_every_count_of_synthetic_work():
    from benchmarks.synthetic import synthetic_problem
    from partitioner.solvers.greedy import layer_work

    for layers, seed in ((40, 0), (64, 1), (96, 2)):
        work = layer_work(synthetic_problem(layers=layers, nodes=4, gpus_per_node=8, seed=seed))
        counts = range(1, layers + 1)
        balancer = Balancer(work, counts)
        assert balancer._starts
        for parts in counts:
            assert balancer.cuts(parts) == _plain_cuts(work, parts), parts


def test_balancer_past_the_candidate_limit_skips_fills():
    work = np.random.default_rng(5).random(40)
    with patch.object(greedy, "MAX_CANDIDATE_LAYERS", 10):
        balancer = Balancer(work, range(1, 41))
        assert not balancer._starts
        assert [balancer.cuts(p) for p in range(1, 41)] == [_plain_cuts(work, p) for p in range(1, 41)]
    with pytest.raises(ValueError):
        balancer.cuts(41)
    with pytest.raises(ValueError):
        Balancer(work, [0, 3])


def _value_reference(problem, tables, plan, compute, objective):
    """greedy's value as it was: each stage's node sets and both transfers worked out stage by stage."""
    from partitioner.plan import objective_value

    stages, cluster, times = plan.stages, problem.cluster, []
    for p in range(len(stages)):
        t = compute[p]
        for q in (p - 1, p):
            if 0 <= q < len(stages) - 1:
                a, b = stages[q], stages[q + 1]
                na = {cluster.node_of(d) for d in a.device_ids}
                same = len(na) == 1 and na == {cluster.node_of(d) for d in b.device_ids}
                t += tables.transfer(a.last_layer, a.devices, b.devices, same)
        times.append(t)
    return objective_value(objective, times, problem.microbatches)


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(small_problems(), small_v2_problems()))
def test_greedy_values_every_stage_count_as_the_plan_would(problem):
    """``_value`` of ``_build``'s stages (no Plan made) equals the stage-by-stage rule on the plan
    ``_plan`` makes, for every stage count greedy tries."""
    from partitioner.solvers.feasibility import feasible_stage_counts
    from partitioner.solvers.greedy import _build, _plan, _value, layer_work
    from partitioner.solvers.tables import CostTables

    tables, work = CostTables(problem), layer_work(problem)
    for P in feasible_stage_counts(problem):
        cuts = balance_cuts(work, P)
        sizes = grow_sizes([float(work[a : b + 1].sum()) for a, b in cuts], problem.cluster.allowed_sizes(), problem.num_devices)
        if sizes is None:
            continue
        stages, why, ids = _build(problem, tables, cuts, sizes)
        if stages is None:
            assert why
            continue
        plan = _plan(stages, ids)
        compute = [ch.compute_ms for *_, ch in stages]
        for objective in ("bottleneck", "iteration"):
            assert _value(problem, tables, stages, ids, objective) == _value_reference(problem, tables, plan, compute, objective)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(small_problems(), small_v2_problems()), st.data())
def test_cost_tables_hold_every_entry_as_an_elementwise_loop_would(problem, data):
    """``layer_arrays`` (one assignment per layer) stores what an entry-by-entry loop stores, for all
    configs and for a subset of them in another order; the prefix tables built on it follow."""
    from partitioner.solvers.tables import CostTables, compensated_prefix, layer_arrays

    every = problem.layouts()
    subset = tuple(data.draw(st.permutations(every)))[: data.draw(st.integers(1, len(every)))]
    for layouts in (every, subset):
        J, L = len(layouts), problem.num_layers
        want = {k: np.zeros((J, L), dtype=t) for k, t in
                (("fwd", float), ("bwd", float), ("time", float), ("weight", np.int64), ("act", np.int64), ("has", bool))}
        for j, lay in enumerate(layouts):
            for i, layer in enumerate(problem.layers):
                c = layer.cost(lay)
                if c is not None:
                    want["fwd"][j, i], want["bwd"][j, i], want["time"][j, i] = c.fwd_ms, c.bwd_ms, c.fwd_ms + c.bwd_ms
                    want["weight"][j, i], want["act"][j, i], want["has"][j, i] = c.weight_bytes, c.act_bytes, True
        got = layer_arrays(problem, layouts)
        for key, array in want.items():
            assert getattr(got, key).tobytes() == array.tobytes() and getattr(got, key).dtype == array.dtype, key
        tables = CostTables(problem, layouts)
        hi, lo = compensated_prefix(want["time"])
        assert tables.time_prefix.tobytes() == hi.tobytes() and tables.time_prefix_lo.tobytes() == lo.tobytes()
        assert np.array_equal(tables.missing_prefix[:, 1:], np.cumsum(~want["has"], axis=1))
