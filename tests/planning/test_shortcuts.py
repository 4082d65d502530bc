"""``plan``'s shortcuts give what the long way gives: projections, bounds, skipped solves."""
from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.costs import build_problem
from partitioner.planning import FSDP_METHOD, fsdp_baseline, megatron_baselines, uniform_projection, variant_at
from partitioner.planning.baselines import _megatron_plans, _try, value_floor
from partitioner.planning.records import BaselineRun, ScreenedCount
from partitioner.planning.schedules import choice as schedule_choice
from partitioner.planning.schedules.search import with_schedule
from partitioner.problem import Problem, ProblemError, _Node, _parse_cost, _parse_cost_checked
from partitioner.problem import _cost_doc as _cost_doc_for_test
from partitioner.solvers.greedy import _balance, balance_cuts
from strategies import examples


def _round_trip_projection(problem: Problem, variant: str) -> Problem | None:
    """The projection written as a v1 document and read back (what uniform_projection did before)."""
    doc = problem.to_dict()
    for layer, entry in zip(problem.layers, doc["layers"]):
        costs = {}
        for mesh in {(c.dp, c.tp) for c in layer.costs}:
            cost = next((v for k, v in layer.costs.items() if (k.dp, k.tp) == mesh
                         and k.variant == variant_at(problem, mesh[0], variant)), None)
            if cost is not None:
                costs[f"dp{mesh[0]}tp{mesh[1]}"] = _cost_doc_for_test(cost)
        if not costs:
            return None
        entry["costs"] = dict(sorted(costs.items()))
    doc["version"] = 1
    doc.pop("variants", None)
    return Problem.from_dict(doc)


@pytest.mark.parametrize("model, cluster, nodes, batch, m", [
    ("pi0", "dgx-h100", 1, 256, 8),
    ("openvla-7b", "dgx-a100-80g", 2, 512, 16),
    ("llava-1.5-7b", "dgx-h100", 1, 64, 1),
])
def test_projection_equals_the_v1_document_read_back(model, cluster, nodes, batch, m):
    problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options={"variants": ["all"]})
    assert problem.version == 2 and problem.variants
    for variant in ["", *problem.variants, "no-such-variant"]:
        fast, slow = uniform_projection(problem, variant), _round_trip_projection(problem, variant)
        if slow is None:
            assert fast is None, variant
            continue
        assert fast == slow, variant
        assert fast.version == 1 and not fast.variants
        for a, b in zip(fast.layers, slow.layers):
            assert list(a.costs) == list(b.costs)  # the same entries in the same order
            assert list(a.costs.values()) == list(b.costs.values())


def _window_fill(work, parts):
    """greedy's fill as it was (numpy windows per stage), the reference for the bisection version."""
    n = len(work)

    def fill(threshold):
        starts = [0]
        while len(starts) <= parts:
            s, width = starts[-1], 64
            while True:
                acc = np.cumsum(work[s : s + width])
                over = np.flatnonzero(acc[1:] > threshold)
                if over.size or s + width >= n:
                    break
                width *= 2
            if not over.size:
                return starts
            starts.append(s + 1 + int(over[0]))
        return starts

    return fill


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1e4), st.sampled_from([0.1, 0.2, 0.3, 1e-9, 7.0])),
                min_size=1, max_size=200), st.data())
def test_balance_cuts_equals_the_window_version(work, data):
    work = np.array(work)
    parts = data.draw(st.integers(1, len(work)))
    assert balance_cuts(work, parts) == _balance(work, parts, _window_fill(work, parts))


def test_balance_cuts_refuses_negative_work():
    with pytest.raises(ValueError):
        balance_cuts(np.array([1.0, -1.0, 2.0]), 2)


def _every_megatron_plan(problem, objective, keep):
    """megatron_baselines without the floor: every candidate evaluated, the keep best (ties to the earlier)."""
    found = []
    for i, plan in enumerate(_megatron_plans(problem)):
        ev = _try(problem, plan, objective)
        if ev is not None:
            found.append((ev[1].value, i, *ev))
    found.sort(key=lambda f: f[:2])
    return [(plan, ev) for _, _, plan, ev in found[:keep]]


SCHEDULE_KEYS = [("1f1b", 1), ("zb-h1", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 3)]


@pytest.mark.parametrize("model, cluster, nodes, batch, m", [
    ("pi0", "dgx-h100", 2, 1024, 16),
    ("openvla-7b", "dgx-a100-80g", 2, 512, 8),
    ("llava-1.5-7b", "dgx-h100", 1, 256, 32),
])
@pytest.mark.slow
@pytest.mark.parametrize("objective", ["iteration", "bottleneck"])
def test_megatron_baselines_floor_skips_only_what_cannot_win(model, cluster, nodes, batch, m, objective):
    base = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options={"variants": ["all"]})
    skipped = 0
    for key in SCHEDULE_KEYS:
        problem = with_schedule(base, *key)
        for plan in _megatron_plans(problem):  # the floor is a lower bound on every candidate's value
            floor = value_floor(problem, plan, objective)
            ev = _try(problem, plan, objective)
            if ev is not None:
                assert floor is not None and floor <= ev[1].value * (1 + 1e-12)
            if floor is None:
                assert ev is None
        for keep in (1, 3):
            calls = []
            with patch("partitioner.planning.baselines._try", side_effect=lambda *a: calls.append(1) or _try(*a)):
                fast = megatron_baselines(problem, objective, keep=keep)
            slow = _every_megatron_plan(problem, objective, keep)
            assert [(p, e.value) for p, e in fast] == [(p, e.value) for p, e in slow]
            skipped += sum(1 for plan in _megatron_plans(problem) if value_floor(problem, plan, objective) is not None) - len(calls)
    assert skipped > 0  # the floor does skip candidates here


def test_value_floor_is_none_without_an_entry():
    base = build_problem("pi0", "dgx-h100", nodes=1, global_batch=64, microbatches=4, options={"variants": ["all"]})
    plan = next(iter(_megatron_plans(base, ["no-such-variant"])))
    assert value_floor(base, plan, "iteration") is None and _try(base, plan, "iteration") is None


_VALUES = st.one_of(st.integers(-2, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.just("1"),
                    st.sampled_from([0.25, 0.5, 0.75, 1.0, 1e13, 2**54]))


@pytest.mark.slow
@settings(max_examples=examples(500), deadline=None)
@given(st.fixed_dictionaries({"fwd_ms": _VALUES, "bwd_ms": _VALUES, "weight_bytes": _VALUES, "act_bytes": _VALUES},
                             optional={"bwd_input_ms": _VALUES, "bwd_weight_ms": _VALUES}))
def test_cost_fast_path_reads_what_the_checked_path_reads(entry):
    def read(parse):
        try:
            return parse(_Node(entry, "layers[0].costs.dp1tp1"))
        except ProblemError as err:
            return str(err)

    fast, checked = read(_parse_cost), read(_parse_cost_checked)
    assert fast == checked
    assert type(fast) is type(checked)


def test_cost_fast_path_reads_a_split_entry():
    entry = {"fwd_ms": 1, "bwd_ms": 2.0, "weight_bytes": 3, "act_bytes": 4, "bwd_input_ms": 1.25, "bwd_weight_ms": 0.75}
    cost = _parse_cost(_Node(entry, "c"))
    assert cost == _parse_cost_checked(_Node(entry, "c"))
    assert cost.split() == (1.25, 0.75) and type(cost.fwd_ms) is float


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3]), st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2, -0.5]),
       st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2, 1e-13]))
def test_cost_fast_path_checks_the_split(bwd, split_b, split_w):
    entry = {"fwd_ms": 1.0, "bwd_ms": bwd, "weight_bytes": 3, "act_bytes": 4, "bwd_input_ms": split_b, "bwd_weight_ms": split_w}

    def read(parse):
        try:
            return parse(_Node(entry, "c"))
        except ProblemError as err:
            return str(err)

    assert read(_parse_cost) == read(_parse_cost_checked)


def _screened(model, cluster, nodes, batch, ms):
    """plan_model's screened entries (without the 1F1B baselines, which _baselines reads only under 1F1B)."""
    out = []
    for i, m in enumerate(ms):
        problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options={"variants": ["all"]})
        fsdp = fsdp_baseline(problem, "iteration")
        bases = {} if fsdp is None else {FSDP_METHOD: BaselineRun(problem, fsdp[0], fsdp[1], None, fsdp[1].iteration_ms)}
        out.append(ScreenedCount(m, problem, problem, bases, float(i)))
    return out


@pytest.mark.parametrize("model, cluster, nodes, batch, ms", [
    ("pi0", "dgx-h100", 1, 256, [4, 8, 16, 32]),
    ("openvla-7b", "dgx-a100-80g", 2, 256, [2, 8, 16]),
])
@pytest.mark.slow
def test_baseline_replays_skipped_only_when_they_cannot_win(model, cluster, nodes, batch, ms):
    screened = _screened(model, cluster, nodes, batch, ms)
    keys = [k for k in SCHEDULE_KEYS if k != ("1f1b", 1)]
    replays = []
    real = schedule_choice.simulate_plan

    def counted(problem, plan, ev=None):
        sim = real(problem, plan, ev)
        replays.append((ev, sim))
        return sim

    with patch.object(schedule_choice, "simulate_plan", side_effect=counted):
        full = schedule_choice._baselines(screened, keys, "iteration", True, prune=False)
        every = list(replays)
        replays.clear()
        pruned = schedule_choice._baselines(screened, keys, "iteration", True, prune=True)
    for ev, sim in every:  # the floor is a lower bound on every replay
        assert schedule_choice.busy_floor(ev) <= sim.makespan_ms
    assert len(replays) < len(every)  # some replays skipped
    def strip(rows):
        return [{k: v for k, v in vars(r).items() if k not in ("problem", "plan", "ev", "sim")} | {"ok": r.ok} | (
            {"plan": r.plan, "makespan": r.sim.makespan_ms} if r.ok else {}) for r in rows]
    assert strip(pruned) == strip(full)


def test_run_refuses_to_replay_only_below_the_floor():
    problem = build_problem("pi0", "dgx-h100", nodes=1, global_batch=256, microbatches=8, options={"variants": ["all"]})
    plan, ev = megatron_baselines(with_schedule(problem, "zb-h1"), "iteration")[0]
    prob = with_schedule(problem, "zb-h1")
    floor = schedule_choice.busy_floor(ev)
    assert schedule_choice._run(prob, plan, "iteration", True, beat=floor * 0.999) is None
    ran = schedule_choice._run(prob, plan, "iteration", True, beat=floor * 1.01)
    assert ran is not None and ran[2] >= floor
