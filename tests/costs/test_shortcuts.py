"""The cost model's shared tables, the parser's shared reads and the replay without a timeline equal the long way."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.costs import CostOptions, ProblemBuilder, build_problem, cluster_layouts, layer_cost, layouts_for, model_layers
from partitioner.costs.build import recompute_settings
from partitioner.costs.variants import applies, variant_knobs
from partitioner.plan.schedules import held_counts, held_states, peak_activation_bytes, walked_stash
from partitioner.planning import megatron_baselines, microbatch_candidates
from partitioner.planning.baselines import StageSums, _megatron_plans, value_floor
from partitioner.planning.schedules.search import with_schedule
from partitioner.presets import load_cluster, load_model
from partitioner.problem import Layout, Problem, ProblemError
from partitioner.simulate.engine import _figures, _prepare, replay_check, simulate, simulate_times
from partitioner.simulate.timeline import op_times
from strategies import examples

PRESETS = [
    ("pi0", "dgx-h100", 1, 256, 8, {"variants": ["all"]}),
    ("openvla-7b", "dgx-a100-80g", 2, 512, 16, {"variants": ["all"]}),
    ("qwen2-vl-7b-video", "dgx-h100", 2, 256, 4, {"variants": ["none"], "flash_attention": False}),
    ("internvl-1.5-26b", "dgx-h200", 1, 64, 64, {"recompute": "full", "zero1": True, "max_tp": 4}),
]


@pytest.mark.slow
@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS)
def test_every_entry_is_its_own_layers_cost(model, cluster, nodes, batch, m, options):
    """Layers of one cost signature share a table; each entry is still layer_cost of that very layer."""
    problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options)
    spec, cl, opts = load_model(model), load_cluster(cluster), CostOptions.from_mapping(options)
    mb = batch // m
    layers = model_layers(spec, opts)
    knobs = variant_knobs(opts.variants, flash_attention=opts.flash_attention, modules=recompute_settings(layers, cl, opts))
    assert len(layers) == problem.num_layers
    shared = 0
    for i, (layer, built) in enumerate(zip(layers, problem.layers)):
        expected = {}
        for lay in layouts_for(layer, cluster_layouts(cl.gpus_per_node, nodes), mb, opts):
            for kn in knobs or [None]:
                if kn is None or applies(kn, lay.dp):
                    key = Layout(lay.dp, lay.tp, kn.name if kn is not None else "")
                    expected[key] = layer_cost(layer, lay, mb / lay.dp, cl, opts, m, kn).to_dict()
        assert list(built.costs) == list(expected)  # the same entries, in the same order
        for key, cost in built.costs.items():
            assert {k: getattr(cost, k) for k in expected[key]} == expected[key]
        shared += any(built.costs is other.costs for other in problem.layers[:i])
    assert shared > 0  # equal blocks do share their table


@pytest.mark.slow
@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS)
def test_one_builder_builds_what_build_problem_builds_at_every_m(model, cluster, nodes, batch, m, options):
    """The layers and the compute terms a builder keeps across microbatch counts change no number."""
    builder = ProblemBuilder(model, cluster, nodes=nodes, options=options)
    ms = microbatch_candidates(batch)
    for m in ms[::2] + ms[1::2][::-1]:  # terms kept from larger and from smaller m
        fast, slow = builder.build(batch, m), build_problem(model, cluster, nodes=nodes, global_batch=batch,
                                                             microbatches=m, options=options)
        assert fast == slow
        assert fast.to_dict() == slow.to_dict()


@pytest.mark.parametrize("options, m", [({"memory_reserve_bytes": 2**50}, 4), ({}, 3), ({"variants": ["zero2"]}, 4)])
def test_a_builder_raises_what_build_problem_raises(options, m):
    builder = ProblemBuilder("pi0", "dgx-h100", nodes=1, options=options)
    for _ in range(2):  # and again: a failed step is not kept
        with pytest.raises(ProblemError) as fast:
            builder.build(64, m)
        with pytest.raises(ProblemError) as slow:
            build_problem("pi0", "dgx-h100", nodes=1, global_batch=64, microbatches=m, options=options)
        assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS[:3])
def test_shared_tables_read_as_separate_ones(model, cluster, nodes, batch, m, options):
    problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options)
    doc = problem.to_dict()
    first = doc["layers"][1]["costs"]
    for entry in doc["layers"][2:]:  # every layer with first's keys reads the very same dict
        if list(entry["costs"]) == list(first):
            entry["costs"] = first
    again = Problem.from_dict(doc)
    apart = Problem.from_dict(copy.deepcopy(doc))
    assert again == apart
    assert again.to_dict() == apart.to_dict()


def _overflowing(shared: bool) -> dict:
    table = {"dp1tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 2**49, "act_bytes": 1},
             "dp2tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 2**50}}
    layers = [{"name": f"l{i}", "costs": table if shared else copy.deepcopy(table)} for i in range(12)]
    return {"version": 1, "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 2**40, "intra_node_GBps": 100,
                                      "inter_node_GBps": 10}, "training": {"microbatches": 2}, "layers": layers}


def test_a_shared_table_is_summed_per_layer():
    """The per-config byte totals still count every layer of a shared table (and name the same entry)."""
    with pytest.raises(ProblemError) as apart:
        Problem.from_dict(_overflowing(False))
    with pytest.raises(ProblemError) as shared:
        Problem.from_dict(_overflowing(True))
    assert str(shared.value) == str(apart.value)
    assert "layers[8].costs.dp2tp1.act_bytes" in str(shared.value)


# --------------------------------------------------------------------------- replay


def _timeline_figures(sim):
    return {"makespan_ms": sim.makespan_ms, "bubble_ratio": sim.bubble_ratio, "busy_ms": list(sim.busy_ms),
            "peak_inflight": list(sim.peak_inflight),
            "peak_memory_bytes": None if sim.peak_memory_bytes is None else list(sim.peak_memory_bytes)}


_TIMES = st.one_of(st.integers(0, 3).map(float), st.sampled_from([0.0, 0.1, 0.2, 0.3, 1e-17, 1.0]), st.floats(0, 10))


@pytest.mark.slow
@settings(max_examples=examples(400), deadline=None)
@given(st.sampled_from(["1f1b", "zb-h1", "gpipe", "forward", "interleaved"]), st.integers(1, 5), st.integers(1, 8),
       st.integers(2, 3), st.data())
def test_figures_without_the_timeline_equal_the_timelines(schedule, P, k, v, data):
    """Ties (equal or zero times) included: the op times are the event loop's, the figures the Simulation's."""
    v = v if schedule == "interleaved" else 1
    m, C = k * P if schedule == "interleaved" else k, P * v
    fwd, bwd = data.draw(st.lists(_TIMES, min_size=C, max_size=C)), data.draw(st.lists(_TIMES, min_size=C, max_size=C))
    wgrad = [b * data.draw(st.sampled_from([0.0, 0.5, 1.0, 0.3])) for b in bwd] if schedule == "zb-h1" else None
    memory = data.draw(st.none() | st.tuples(st.lists(st.integers(0, 99), min_size=C, max_size=C),
                                               st.lists(st.integers(0, 99), min_size=C, max_size=C)))
    kw = {"wgrad_ms": wgrad, "virtual_stages": v, "weight_bytes": memory and memory[0], "act_bytes": memory and memory[1]}
    sim = simulate_times(fwd, bwd, m, schedule, **kw)
    r = _prepare(fwd, bwd, m, schedule, stage_labels=None, **kw)
    assert repr(_figures(r)) == repr(_timeline_figures(sim))
    times = op_times(r.orders(), r.durations, C, m)
    assert [[(op.start, op.end) for op in sim.ops(p)] for p in range(P)] == times


@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS[:2])
@pytest.mark.parametrize("key", [("1f1b", 1), ("zb-h1", 1), ("gpipe", 1), ("interleaved", 2)])
def test_replay_check_reports_the_simulations_figures(model, cluster, nodes, batch, m, options, key):
    problem = with_schedule(build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options), *key)
    plans = megatron_baselines(problem, "iteration", keep=3)
    assert plans
    for plan, ev in plans:
        sim = simulate(problem, plan, evaluation=ev)
        report = replay_check(problem, plan, ev)
        assert report.to_dict() == {**_timeline_figures(sim), "schedule": sim.schedule, "iteration_estimate_ms": ev.iteration_ms,
                          "fits_memory": all(b <= problem.cluster.gpu_memory_bytes for b in sim.peak_memory_bytes)}


def test_replay_check_raises_what_simulate_raises():
    problem = build_problem("pi0", "dgx-h100", nodes=1, global_batch=256, microbatches=8, options={"variants": ["all"]})
    plan, ev = megatron_baselines(problem, "iteration")[0]
    inter = with_schedule(problem, "interleaved", 2)
    for call in (simulate, replay_check):
        with pytest.raises(ValueError, match="interleaved schedule replays a plan of an interleaved problem"):
            call(inter, plan, evaluation=ev) if call is simulate else call(inter, plan, ev)


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("zb-h1", 1), ("gpipe", 1), ("forward", 1), ("interleaved", 2),
                                         ("interleaved", 3)])
def test_held_states_are_the_distinct_held_counts(schedule, v):
    for P in range(1, 6):
        for m in range(1, 13):
            if schedule == "interleaved" and m % P:
                continue
            peak = [0] * (P * v)
            for d in range(P):
                walked = held_counts(schedule, d, P, m, v)
                assert held_states(schedule, d, P, m, v) == tuple(dict.fromkeys(tuple(h.values()) for h in walked))
                acts = [3 + 7 * c for c in range(P * v)]
                assert peak_activation_bytes(schedule, d, P, m, acts, v) == max(
                    sum(n * acts[c] for c, n in h.items()) for h in walked)
                for h in walked:
                    for c, n in h.items():
                        peak[c] = max(peak[c], n)
            assert walked_stash(schedule, P, m, v) == peak


# --------------------------------------------------------------------------- baselines


@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS[:2])
def test_stage_sums_kept_across_schedules_give_the_same_floors(model, cluster, nodes, batch, m, options):
    base = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options)
    other = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m * 2, options=options)
    sums = StageSums()
    for problem in (base, with_schedule(base, "zb-h1"), other, with_schedule(base, "gpipe"),
                    with_schedule(base, "interleaved", 2), with_schedule(other, "interleaved", 3)):
        for objective in ("iteration", "bottleneck"):
            for plan in _megatron_plans(problem):  # the same numbers, bit for bit, whatever the store saw before
                assert repr(value_floor(problem, plan, objective, sums)) == repr(value_floor(problem, plan, objective))
            kept = megatron_baselines(problem, objective, keep=2, sums=sums)
            assert [(p, e.value) for p, e in kept] == [(p, e.value) for p, e in megatron_baselines(problem, objective, keep=2)]


def test_one_f_one_b_orders_are_the_pairs_loops():
    from partitioner.plan.schedules import _one_f_one_b

    def loop(p, m, warmup):
        order = [("F", p, j) for j in range(warmup)]
        for j in range(m - warmup):
            order += [("F", p, warmup + j), ("B", p, j)]
        return order + [("B", p, j) for j in range(m - warmup, m)]

    for P in range(1, 9):
        for m in range(1, 30):
            for p in range(P):
                warmup = min(P - p - 1, m)
                assert _one_f_one_b(p, P, m, warmup) == loop(p, m, warmup)


@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS[:2] + [
    ("llava-1.5-13b", "dgx-a100-80g", 2, 512, 16, {"variants": ["all"]})])
def test_the_memory_precheck_is_evaluates_rule_6(model, cluster, nodes, batch, m, options):
    from partitioner.plan import PlanError, evaluate
    from partitioner.planning.baselines import _fits_memory, _megatron_candidates

    base = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options)
    refused = 0
    for key in [("1f1b", 1), ("zb-h1", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 4)]:
        problem, sums = with_schedule(base, *key), StageSums()
        for candidate in _megatron_candidates(problem):
            if value_floor(problem, candidate.plan(problem), "iteration") is None:
                continue  # no entry: neither is asked
            fits = _fits_memory(problem, candidate, sums)
            try:
                evaluate(problem, candidate.plan(problem).with_device_ids(), "iteration")
                assert fits
            except PlanError as err:
                if err.rule == 6:
                    assert not fits
                    refused += 1
    assert refused > 0


def test_zb_h1_orders_are_the_walks():
    """ZB-H1's order built by slices equals the walk that defers each W until min(P, m) forwards ran."""
    from partitioner.plan.schedules import _one_f_one_b, device_order

    def walk(p, P, m):
        order, forwards_run, weights = [], 0, 0
        for kind, _, j in _one_f_one_b(p, P, m, min(P - p - 1, m)):
            order.append((kind, p, j))
            forwards_run += kind == "F"
            if kind == "B" and forwards_run >= min(P, m):
                order.append(("W", p, weights))
                weights += 1
        return order + [("W", p, j) for j in range(weights, m)]

    for P in range(1, 10):
        for m in range(1, 30):
            for p in range(P):
                assert device_order("zb-h1", p, P, m) == walk(p, P, m)
