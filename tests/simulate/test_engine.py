"""The 1F1B / GPipe / forward simulator: closed forms, an independent event loop, plans, replay, CLI."""
from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from partitioner import Plan, PlanError, Problem, Stage, evaluate, load_plan, load_problem, simulate, solve
from partitioner.simulate.engine import replay_check, simulate_times
from strategies import examples, random_plans, small_problems

# --------------------------------------------------------------------------- an independent replay


def reference_timeline(F, B, m, schedule):
    """Op end times by sweeping the stages until nothing changes (no event queue).

    The order on each stage is rebuilt here from DESIGN.md's wording, and
    every op starts at max(previous op on its stage, its dependency).
    """
    P = len(F)

    def order(p):
        forwards = [("F", j) for j in range(m)]
        if schedule == "forward":
            return forwards
        if schedule == "gpipe":
            return forwards + [("B", j) for j in range(m - 1, -1, -1)]
        seq, f, b = [], 0, 0
        while f < min(P - p - 1, m):
            seq.append(("F", f))
            f += 1
        while f < m:
            seq += [("F", f), ("B", b)]
            f, b = f + 1, b + 1
        while b < m:
            seq.append(("B", b))
            b += 1
        return seq

    orders = [order(p) for p in range(P)]
    start, end = {}, {}
    clock, idx = [0.0] * P, [0] * P
    changed = True
    while changed:
        changed = False
        for p in range(P):
            while idx[p] < len(orders[p]):
                kind, j = orders[p][idx[p]]
                if kind == "F":
                    dep = ("F", p - 1, j) if p > 0 else None
                else:
                    dep = ("B", p + 1, j) if p < P - 1 else ("F", p, j)
                if dep is not None and dep not in end:
                    break
                s = max(clock[p], end[dep] if dep is not None else 0.0)
                start[(kind, p, j)] = s
                clock[p] = end[(kind, p, j)] = s + (F[p] if kind == "F" else B[p])
                idx[p] += 1
                changed = True
    assert all(idx[p] == len(orders[p]) for p in range(P)), "reference loop deadlocked"
    return start, end


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("P,m,F,B", [(1, 1, 2.0, 3.0), (4, 8, 1.0, 2.0), (4, 2, 1.5, 3.0), (8, 3, 0.5, 1.25), (3, 16, 2.0, 0.0)])
def test_equal_stages_closed_form(schedule, P, m, F, B):
    sim = simulate_times([F] * P, [B] * P, m, schedule)
    assert sim.makespan_ms == pytest.approx((m + P - 1) * (F + B))
    assert sim.bubble_ratio == pytest.approx((P - 1) / (m + P - 1))
    assert sim.busy_ms == pytest.approx([m * (F + B)] * P)


@pytest.mark.parametrize("P,m", [(1, 1), (4, 8), (4, 2), (6, 3), (5, 5), (8, 1)])
def test_peak_inflight_1f1b_is_min_m_p_minus_stage(P, m):
    sim = simulate_times([1.0] * P, [2.0] * P, m, "1f1b")
    assert sim.peak_inflight == tuple(min(m, P - p) for p in range(P))


def test_peak_inflight_gpipe_and_forward_is_m():
    assert simulate_times([1.0] * 4, [2.0] * 4, 6, "gpipe").peak_inflight == (6,) * 4
    # DESIGN: in-flight = forwards done - backwards done; a forward-only run frees nothing
    assert simulate_times([1.0] * 4, None, 6, "forward").peak_inflight == (6,) * 4


def test_lesson16_forward_flow_shop():
    sim = simulate_times([30.0, 10.0, 10.0, 20.0], None, 8, "forward")
    assert sim.makespan_ms == 280.0
    assert sim.bubble_ratio == pytest.approx(0.5)


def test_forward_equal_stages():
    sim = simulate_times([3.0] * 5, [100.0] * 5, 7, "forward")  # backward times are ignored
    assert sim.makespan_ms == pytest.approx((7 + 5 - 1) * 3.0)
    assert all(op.kind == "F" for op in sim.timeline)


def test_1f1b_order_on_each_stage():
    sim = simulate_times([1.0] * 4, [2.0] * 4, 6, "1f1b")
    got = ["".join(f"{op.kind}{op.microbatch}" for op in sim.ops(p)) for p in range(4)]
    assert got[0] == "F0F1F2F3B0F4B1F5B2B3B4B5"
    assert got[3] == "F0B0F1B1F2B2F3B3F4B4F5B5"


def test_gpipe_backwards_run_in_reverse():
    sim = simulate_times([1.0, 1.0], [1.0, 1.0], 3, "gpipe")
    assert [f"{op.kind}{op.microbatch}" for op in sim.ops(0)] == ["F0", "F1", "F2", "B2", "B1", "B0"]


@pytest.mark.parametrize(
    "args,match",
    [
        (([1.0, -1.0], [1.0, 1.0], 2, "1f1b"), "fwd_ms"),
        (([1.0, 1.0], [1.0], 2, "1f1b"), "bwd_ms"),
        (([1.0], [1.0], 0, "1f1b"), "microbatches"),
        (([1.0], [1.0], 2, "zb"), "schedule"),
        (([], [], 2, "1f1b"), "stage"),
        (([float("nan")], [1.0], 2, "1f1b"), "fwd_ms"),
    ],
)
def test_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        simulate_times(*args)


# --------------------------------------------------------------------------- property tests

times = st.floats(0.0, 50.0, allow_nan=False, allow_infinity=False)
SCHEDULES = ("1f1b", "gpipe", "forward")  # zb-h1 and interleaved: tests/plan/test_schedules.py


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(
    data=st.data(),
    P=st.integers(1, 7),
    m=st.integers(1, 10),
    schedule=st.sampled_from(SCHEDULES),
)
def test_matches_independent_loop_and_bounds(data, P, m, schedule):
    F = data.draw(st.lists(times, min_size=P, max_size=P))
    B = data.draw(st.lists(times, min_size=P, max_size=P))
    sim = simulate_times(F, B, m, schedule)
    ref_start, ref_end = reference_timeline(F, B, m, schedule)
    assert len(sim.timeline) == len(ref_end)
    for op in sim.timeline:
        assert op.start == pytest.approx(ref_start[(op.kind, op.stage, op.microbatch)], abs=1e-9)
        assert op.end == pytest.approx(ref_end[(op.kind, op.stage, op.microbatch)], abs=1e-9)
    t = F if schedule == "forward" else [f + b for f, b in zip(F, B)]
    tol = 1e-9 * (1 + sum(t) * m)
    assert max(t) * m - tol <= sim.makespan_ms <= sum(t) * m + tol
    assert -1e-9 <= sim.bubble_ratio <= 1.0


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), P=st.integers(1, 6), m=st.integers(1, 8), schedule=st.sampled_from(SCHEDULES))
def test_timeline_invariants(data, P, m, schedule):
    F = data.draw(st.lists(times, min_size=P, max_size=P))
    B = data.draw(st.lists(times, min_size=P, max_size=P))
    sim = simulate_times(F, B, m, schedule)
    ends = {(op.kind, op.stage, op.microbatch): op.end for op in sim.timeline}
    kinds = ("F",) if schedule == "forward" else ("F", "B")
    assert set(ends) == {(k, p, j) for k in kinds for p in range(P) for j in range(m)}
    for p in range(P):
        ops = sim.ops(p)
        for a, b in zip(ops, ops[1:]):
            assert b.start >= a.end - 1e-12  # one op at a time
    for op in sim.timeline:
        assert op.duration == pytest.approx(F[op.stage] if op.kind == "F" else B[op.stage])
        if op.kind == "F" and op.stage > 0:
            assert op.start >= ends[("F", op.stage - 1, op.microbatch)] - 1e-12
        if op.kind == "B":
            dep = ("B", op.stage + 1, op.microbatch) if op.stage < P - 1 else ("F", op.stage, op.microbatch)
            assert op.start >= ends[dep] - 1e-12


# --------------------------------------------------------------------------- plans


def equal_stage_problem(P=4, m=6, fwd=1.5, bwd=3.0, act=10, weight=100) -> Problem:
    cost = {"fwd_ms": fwd, "bwd_ms": bwd, "weight_bytes": weight, "act_bytes": act}
    return Problem.from_dict(
        {
            "version": 1,
            "name": "equal",
            "cluster": {"nodes": 1, "gpus_per_node": P, "gpu_memory_bytes": 10**6, "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
            "training": {"microbatches": m, "objective": "iteration"},
            "stages": P,
            "layers": [{"name": f"l{i}", "costs": {"dp1tp1": cost}} for i in range(P)],
        }
    )


def test_simulate_plan_uses_evaluated_times_and_memory(examples):
    problem = load_problem(examples / "vla_toy_2x4.json")
    result = solve(problem, "brute")
    ev = evaluate(problem, result.plan)
    sim = simulate(problem, result.plan)
    assert sim.fwd_ms == tuple(s.fwd_ms for s in ev.stages)
    assert sim.bwd_ms == tuple(s.bwd_ms for s in ev.stages)
    assert list(sim.peak_memory_bytes) == ev.peak_memory_bytes  # the stash of rule 6, replayed
    gp = simulate(problem, result.plan, "gpipe")
    assert list(gp.peak_memory_bytes) == [s.weight_bytes + problem.microbatches * s.act_bytes for s in ev.stages]


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_simulated_stash_matches_rule_6_on_random_plans(data):
    problem = data.draw(small_problems())
    plan = data.draw(random_plans(problem))
    assume(plan is not None)
    try:
        ev = evaluate(problem, plan)
    except PlanError:
        assume(False)
    sim = simulate(problem, plan, evaluation=ev)
    assert list(sim.peak_memory_bytes) == ev.peak_memory_bytes
    t = ev.times_ms
    m = problem.microbatches
    assert max(t) * m - 1e-6 <= sim.makespan_ms <= sum(t) * m + 1e-6


def test_simulate_rejects_invalid_plan(examples):
    problem = load_problem(examples / "rebalance_4gpu.json")
    bad = Plan((Stage(0, 10, 1, 1, 1), Stage(11, 33, 3, 3, 1)))
    with pytest.raises(PlanError):
        simulate(problem, bad)


def test_solve_validate_attaches_replay(examples):
    problem = load_problem(examples / "vla_toy_2x4.json")
    result = solve(problem, "brute", validate=True)
    sim = result.extra["simulation"]
    for key in ("makespan_ms", "bubble_ratio", "peak_inflight", "peak_memory_bytes", "fits_memory", "iteration_estimate_ms"):
        assert key in sim
    assert sim["iteration_estimate_ms"] == result.evaluation.iteration_ms
    assert sim["fits_memory"] is True
    assert sim["peak_memory_bytes"] == result.evaluation.peak_memory_bytes
    assert max(sim["peak_memory_bytes"]) <= problem.cluster.gpu_memory_bytes
    assert "simulation" in result.to_dict()
    assert "simulation" not in solve(problem, "brute").extra


def test_replay_equal_stages_equals_iteration_estimate():
    P, m, fwd, bwd = 4, 6, 1.5, 3.0
    problem = equal_stage_problem(P, m, fwd, bwd)
    result = solve(problem, "brute", validate=True)
    sim = result.extra["simulation"]
    assert sim["makespan_ms"] == pytest.approx(result.evaluation.iteration_ms)
    assert sim["makespan_ms"] == pytest.approx((m + P - 1) * (fwd + bwd))
    assert sim["peak_inflight"] == [min(m, P - p) for p in range(P)]


def test_replay_check_flags_memory_over_capacity():
    problem = equal_stage_problem()
    plan = Plan(tuple(Stage(p, p, 1, 1, 1) for p in range(4)))
    ev = evaluate(problem, plan)
    assert replay_check(problem, plan, ev).fits_memory is True
    tight = Problem.from_dict({**problem.to_dict(), "cluster": {**problem.to_dict()["cluster"], "gpu_memory_bytes": 100 + 3 * 10}})
    # stage 0 stashes 4 microbatches: 140 bytes > 130; replay against the tight cluster with the loose evaluation
    assert replay_check(tight, plan, ev).fits_memory is False


# --------------------------------------------------------------------------- CLI


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def stage_times_problem(tmp_path, fwd, bwd, m):
    layers = [
        {"name": f"s{p}", "costs": {"dp1tp1": {"fwd_ms": f, "bwd_ms": b, "weight_bytes": 7, "act_bytes": 3}}}
        for p, (f, b) in enumerate(zip(fwd, bwd))
    ]
    P = len(fwd)
    problem = write(
        tmp_path / "p.json",
        {
            "version": 1,
            "cluster": {"nodes": 1, "gpus_per_node": P, "gpu_memory_bytes": 1000, "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
            "training": {"microbatches": m},
            "stages": P,
            "layers": layers,
        },
    )
    plan = write(tmp_path / "plan.json", {"stages": [{"first_layer": p, "last_layer": p, "devices": 1, "dp": 1, "tp": 1} for p in range(P)]})
    return problem, plan


@pytest.mark.slow
def test_cli_lesson16_forward(tmp_path, cli):
    problem, plan = stage_times_problem(tmp_path, [30, 10, 10, 20], [0, 0, 0, 0], 8)
    r = cli("simulate", problem, plan, "--schedule", "forward", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["makespan_ms"] == 280.0
    assert doc["bubble_ratio"] == pytest.approx(0.5)
    assert doc["peak_inflight"] == [8, 8, 8, 8]
    assert doc["peak_memory_bytes"] == [7 + 8 * 3] * 4


@pytest.mark.slow
def test_cli_equal_stages_closed_form(tmp_path, cli):
    P, m, F, B = 4, 8, 2.0, 4.0
    problem, plan = stage_times_problem(tmp_path, [F] * P, [B] * P, m)
    for schedule, inflight in (("1f1b", [min(m, P - p) for p in range(P)]), ("gpipe", [m] * P)):
        r = cli("simulate", problem, plan, "--schedule", schedule, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["makespan_ms"] == pytest.approx((m + P - 1) * (F + B))
        assert doc["bubble_ratio"] == pytest.approx((P - 1) / (m + P - 1))
        assert doc["peak_inflight"] == inflight
        assert doc["peak_memory_bytes"] == [7 + 3 * n for n in inflight]
    r = cli("simulate", problem, plan)  # default 1f1b, text
    assert r.returncode == 0, r.stderr
    assert f"makespan {(m + P - 1) * (F + B):.3f} ms" in r.stdout


@pytest.mark.slow
def test_cli_exit_codes(tmp_path, cli, examples):
    problem, plan = stage_times_problem(tmp_path, [1, 1], [1, 1], 4)
    # rule 1: the stages do not cover layer 1
    broken = write(tmp_path / "broken.json", {"stages": [{"first_layer": 0, "last_layer": 0, "devices": 2, "dp": 2, "tp": 1}]})
    r = cli("simulate", problem, broken)
    assert r.returncode == 1 and "rule 1" in r.stderr
    # rule 6: memory (7 + 2 * 3 > 12 on stage 0)
    small = json.loads(problem.read_text())
    small["cluster"]["gpu_memory_bytes"] = 12
    r = cli("simulate", write(tmp_path / "small.json", small), plan)
    assert r.returncode == 1 and "rule 6" in r.stderr
    r = cli("simulate", problem, plan, "--schedule", "zero-bubble")
    assert r.returncode == 2 and "--schedule" in r.stderr
    r = cli("simulate", problem, tmp_path / "missing.json")
    assert r.returncode == 2 and "missing.json" in r.stderr
    r = cli("simulate", problem, plan, "--gantt", tmp_path / "g.bmp")
    assert r.returncode == 2 and "g.bmp" in r.stderr
    r = cli("simulate", problem, plan, "--trace", tmp_path / "no-such-dir" / "t.json")
    assert r.returncode == 2 and "cannot write" in r.stderr
    infeasible = write(tmp_path / "res.json", {"status": "infeasible", "plan": None})
    r = cli("simulate", problem, infeasible)
    assert r.returncode == 2 and "plan" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_reads_a_solve_result(tmp_path, cli, examples):
    r = cli("solve", examples / "vla_toy_2x4.json", "--method", "brute", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["simulation"]["iteration_estimate_ms"] == pytest.approx(result["value"])  # objective: iteration
    path = write(tmp_path / "result.json", result)
    r = cli("simulate", examples / "vla_toy_2x4.json", path, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["makespan_ms"] == pytest.approx(result["simulation"]["makespan_ms"])
    problem = load_problem(examples / "vla_toy_2x4.json")
    assert doc["makespan_ms"] == pytest.approx(simulate(problem, load_plan(str(path))).makespan_ms)
    r = cli("solve", examples / "vla_toy_2x4.json", "--method", "brute")
    assert "simulated 1F1B makespan" in r.stdout
