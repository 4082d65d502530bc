"""ZB-H1 and interleaved 1F1B: op orders, closed forms, bounds, stash, estimates against the simulator."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import check_no_random_plan_beats
from partitioner import Plan, PlanError, Problem, Stage, evaluate, load_problem, simulate, solve
from partitioner.plan.schedules import device_order, estimate, peak_activation_bytes, stash, walked_stash
from partitioner.planning.schedules.search import compare_schedules
from partitioner.simulate.engine import replay_check, simulate_times
from strategies import examples, small_v2_problems

# --------------------------------------------------------------------------- an independent replay


def reference_orders(schedule, P, m, v=1):
    """Each device's ops ``(kind, chunk, microbatch)``, rebuilt here from the schedules' definitions.

    ZB-H1: take the 1F1B order and put one pending W after every B once the
    device has run P forwards or has none left. Interleaved: Megatron-LM's
    forward sequence is, per group of P microbatches, the v local chunks in
    turn, P microbatches each; the backward sequence the same with the
    chunks reversed; warm-up 2(P-p-1) + (v-1)P forwards (all when m = P).
    """
    orders = []
    for p in range(P):
        if schedule == "interleaved":
            fwd, bwd = [], []
            for group in range(m // P):
                for k in range(v):
                    fwd += [("F", k * P + p, group * P + i) for i in range(P)]
                    bwd += [("B", (v - 1 - k) * P + p, group * P + i) for i in range(P)]
            warm = len(fwd) if m == P else min(2 * (P - p - 1) + (v - 1) * P, len(fwd))
        else:
            fwd = [("F", p, j) for j in range(m)]
            bwd = [("B", p, j) for j in range(m)]
            warm = min(P - p - 1, m)
        seq = fwd[:warm]
        for i in range(len(fwd) - warm):
            seq += [fwd[warm + i], bwd[i]]
        seq += bwd[len(fwd) - warm :]
        if schedule == "zb-h1":
            out, pending, forwards = [], [], 0
            for op in seq:
                out.append(op)
                forwards += op[0] == "F"
                if op[0] == "B":
                    pending.append(("W", p, op[2]))
                    if forwards == m or forwards >= P:
                        out.append(pending.pop(0))
            seq = out + pending
        orders.append(seq)
    return orders


def reference_times(orders, F, B, W):
    """Op (start, end) by sweeping the devices until nothing changes (no event queue)."""
    C = len(F)
    dur = {"F": F, "B": [b - w for b, w in zip(B, W)] if W is not None else B, "W": W}
    start, end = {}, {}
    clock, idx = [0.0] * len(orders), [0] * len(orders)
    changed = True
    while changed:
        changed = False
        for p, seq in enumerate(orders):
            while idx[p] < len(seq):
                kind, c, j = seq[idx[p]]
                if kind == "F":
                    dep = ("F", c - 1, j) if c > 0 else None
                elif kind == "W":
                    dep = ("B", c, j)
                else:
                    dep = ("B", c + 1, j) if c < C - 1 else ("F", c, j)
                if dep is not None and dep not in end:
                    break
                s = max(clock[p], end[dep] if dep is not None else 0.0)
                start[(kind, c, j)] = s
                clock[p] = end[(kind, c, j)] = s + dur[kind][c]
                idx[p] += 1
                changed = True
    assert all(idx[p] == len(seq) for p, seq in enumerate(orders)), "reference loop deadlocked"
    return start, end


def draw_case(data, schedule):
    P = data.draw(st.integers(1, 6), label="P")
    v = data.draw(st.integers(2, 4), label="v") if schedule == "interleaved" else 1
    m = P * data.draw(st.integers(1, 4), label="m/P") if schedule == "interleaved" else data.draw(st.integers(1, 12), label="m")
    C = P * v
    ms = st.floats(0.0, 20.0, allow_nan=False, allow_infinity=False)
    F = data.draw(st.lists(ms, min_size=C, max_size=C), label="F")
    B = data.draw(st.lists(ms, min_size=C, max_size=C), label="B")
    W = None
    if schedule == "zb-h1":
        share = data.draw(st.lists(st.floats(0.0, 1.0), min_size=C, max_size=C), label="W/B")
        W = [b * s for b, s in zip(B, share)]
    return P, v, m, F, B, W


ALL = ("1f1b", "zb-h1", "interleaved", "gpipe", "forward")


@pytest.mark.parametrize("schedule", ["zb-h1", "interleaved", "1f1b"])
@pytest.mark.parametrize("P,m,v", [(1, 3, 2), (2, 2, 2), (3, 6, 2), (4, 8, 3), (4, 4, 2), (5, 3, 2), (6, 12, 4)])
def test_orders_match_the_reference(schedule, P, m, v):
    if schedule != "interleaved":
        v = 1
    elif m % P:
        m = P * m
    got = [device_order(schedule, p, P, m, v) for p in range(P)]
    assert got == reference_orders(schedule, P, m, v)
    for p, seq in enumerate(got):  # every op once, on its own device
        kinds = ("F", "B", "W") if schedule == "zb-h1" else ("F", "B")
        assert sorted(seq) == sorted((k, c, j) for k in kinds for c in range(p, P * v, P) for j in range(m))


def test_zbh1_order_examples():
    def text(p, P=4, m=8):
        return " ".join(f"{k}{j}" for k, _, j in device_order("zb-h1", p, P, m))

    # device 0: 1F1B's P-1 warm-up forwards, then F B W cycles, the cool-down B W pairs
    assert text(0) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7"
    # the last device: P-1 F B pairs before its first W, the tail all W's
    assert text(3) == "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7"


def test_interleaved_order_example():
    # Megatron-LM, P = 2, v = 2, m = 4: rank 0 warms up 2(P-1) + (v-1)P = 4 forwards
    text = " ".join(f"{k}{c}.{j}" for k, c, j in device_order("interleaved", 0, 2, 4, 2))
    assert text == "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3"


@settings(max_examples=examples(120), deadline=None)
@given(data=st.data(), schedule=st.sampled_from(["zb-h1", "interleaved"]))
def test_event_loop_matches_independent_sweep(data, schedule):
    P, v, m, F, B, W = draw_case(data, schedule)
    sim = simulate_times(F, B, m, schedule, wgrad_ms=W, virtual_stages=v)
    ref_start, ref_end = reference_times(reference_orders(schedule, P, m, v), F, B, W)
    assert len(sim.timeline) == len(ref_end)
    for op in sim.timeline:
        key = (op.kind, op.chunk, op.microbatch)
        assert op.stage == op.chunk % P
        assert op.start == pytest.approx(ref_start[key], abs=1e-9)
        assert op.end == pytest.approx(ref_end[key], abs=1e-9)


# --------------------------------------------------------------------------- closed forms (P equal stages)


@pytest.mark.parametrize("P,m", [(1, 1), (2, 2), (4, 4), (4, 8), (6, 9), (8, 16), (3, 17)])
@pytest.mark.parametrize("F,B,W", [(1.0, 1.0, 1.0), (2.0, 1.5, 0.5), (1.0, 3.0, 1.0), (3.0, 1.0, 1.0), (1.5, 1.5, 0.0)])
def test_zbh1_closed_form(P, m, F, B, W):
    """m(F+B+W) + (P-1)(F+B-W) for m >= P and W <= min(F, B) (B = input gradient, W = weight gradient)."""
    sim = simulate_times([F] * P, [B + W] * P, m, "zb-h1", wgrad_ms=[W] * P)
    span = m * (F + B + W) + (P - 1) * (F + B - W)
    assert sim.makespan_ms == pytest.approx(span)
    assert sim.bubble_ratio == pytest.approx((P - 1) * (F + B - W) / span)
    one_f_one_b = simulate_times([F] * P, [B + W] * P, m, "1f1b")
    assert one_f_one_b.makespan_ms == pytest.approx((m + P - 1) * (F + B + W))
    assert sim.makespan_ms <= one_f_one_b.makespan_ms + 1e-9
    # the stash stays that of 1F1B; each device defers up to P - 1 - p... W's (device P-1: P of them pending once)
    assert sim.peak_inflight == tuple(min(m, P - p) for p in range(P))
    assert sim.peak_inflight == one_f_one_b.peak_inflight


@pytest.mark.parametrize("P,m", [(4, 1), (4, 3), (6, 2), (8, 5), (8, 7)])
@pytest.mark.parametrize("F,B,W", [(1.0, 1.0, 1.0), (2.0, 1.0, 0.5)])
def test_zbh1_closed_form_short_pipeline(P, m, F, B, W):
    """m < P: (m+P-1)(F+B) + W: the W's of the last microbatch are the only ones left on the path."""
    sim = simulate_times([F] * P, [B + W] * P, m, "zb-h1", wgrad_ms=[W] * P)
    assert sim.makespan_ms == pytest.approx((m + P - 1) * (F + B) + W)


def test_zbh1_paper_form_needs_w_at_most_f():
    """W > F: device 0 cannot hide its wait for the first backward; (P-1)(F+B-W) is not reachable.

    P = 2, m = 2, F = B = 1, W = 2: device 0 runs F0 F1 by t = 2, B0 comes back
    at t = 3 and nothing else may run before it, so the makespan is at least
    1 + m(F+B+W) = 9 > 8 = the paper's form (any schedule, not only ours).
    """
    sim = simulate_times([1.0, 1.0], [3.0, 3.0], 2, "zb-h1", wgrad_ms=[2.0, 2.0])
    assert sim.makespan_ms == pytest.approx(9.0)
    assert 2 * (1 + 1 + 2) + (2 - 1) * (1 + 1 - 2) == 8


@pytest.mark.parametrize("P,v,m", [(1, 2, 1), (2, 2, 2), (2, 2, 8), (4, 2, 4), (4, 2, 8), (4, 3, 12), (3, 4, 9), (8, 2, 16)])
@pytest.mark.parametrize("F,B", [(2.0, 4.0), (3.0, 3.0), (1.0, 5.0)])
def test_interleaved_closed_form(P, v, m, F, B):
    """m(F+B) + (P-1)(F+B)/v with chunk times F/v, B/v (Narayanan et al. 2021, section 2.2.2)."""
    C = P * v
    sim = simulate_times([F / v] * C, [B / v] * C, m, "interleaved", virtual_stages=v)
    span = m * (F + B) + (P - 1) * (F + B) / v
    assert sim.makespan_ms == pytest.approx(span)
    assert sim.bubble_ratio == pytest.approx((P - 1) * (F + B) / v / span)
    assert sim.num_stages == P and len(sim.busy_ms) == P
    # Megatron-LM's warm-up bounds what a device holds: warm-up forwards + 1 (all m·v when m = P)
    warm = [m * v if m == P else min(2 * (P - p - 1) + (v - 1) * P + 1, m * v) for p in range(P)]
    assert list(sim.peak_inflight) == warm


def test_interleaved_rejects_bad_shapes():
    with pytest.raises(ValueError, match="multiple"):
        simulate_times([1.0] * 4, [1.0] * 4, 3, "interleaved", virtual_stages=2)
    with pytest.raises(ValueError, match="virtual_stages >= 2"):
        simulate_times([1.0] * 4, [1.0] * 4, 4, "interleaved")
    with pytest.raises(ValueError, match="interleaved schedule only"):
        simulate_times([1.0] * 4, [1.0] * 4, 4, "1f1b", virtual_stages=2)
    with pytest.raises(ValueError, match="wgrad_ms"):
        simulate_times([1.0] * 2, [1.0] * 2, 4, "zb-h1", wgrad_ms=[2.0, 0.5])


def test_lesson16_forward_still_280():
    sim = simulate_times([30.0, 10.0, 10.0, 20.0], None, 8, "forward")
    assert sim.makespan_ms == 280.0
    assert sim.bubble_ratio == pytest.approx(0.5)


# --------------------------------------------------------------------------- bounds for every schedule


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data(), schedule=st.sampled_from(ALL))
def test_bounds_hold_for_every_schedule(data, schedule):
    P, v, m, F, B, W = draw_case(data, schedule)
    sim = simulate_times(F, B, m, schedule, wgrad_ms=W, virtual_stages=v)
    C = P * v
    fwd_only = schedule == "forward"
    work = [m * (F[c] + (0.0 if fwd_only else B[c])) for c in range(C)]
    device_work = [sum(work[p::P]) for p in range(P)]
    tol = 1e-9 * (1 + sum(work))
    assert sim.busy_ms == pytest.approx(device_work, abs=tol)
    # a device's own work; one microbatch's path F(0..C-1), B(C-1..0) (then its W on chunk 0); all work in series
    path = sum(F) if fwd_only else sum(F) + sum(B) - (sum(W) - W[0] if W is not None else 0.0)
    assert sim.makespan_ms >= max(device_work) - tol
    assert sim.makespan_ms >= path - tol
    assert sim.makespan_ms <= sum(work) + tol
    assert -1e-9 <= sim.bubble_ratio <= 1.0
    ends = {(op.kind, op.chunk, op.microbatch): op.end for op in sim.timeline}
    for p in range(P):
        ops = sim.ops(p)
        for a, b in zip(ops, ops[1:]):
            assert b.start >= a.end - 1e-12  # one op at a time per device
    for op in sim.timeline:
        c = op.chunk
        if op.kind == "F" and c > 0:
            assert op.start >= ends[("F", c - 1, op.microbatch)] - 1e-12
        if op.kind == "B":
            dep = ("B", c + 1, op.microbatch) if c < C - 1 else ("F", c, op.microbatch)
            assert op.start >= ends[dep] - 1e-12
        if op.kind == "W":
            assert op.start >= ends[("B", c, op.microbatch)] - 1e-12
    if schedule not in ("forward", "gpipe"):
        assert all(n <= m * v for n in sim.peak_inflight)


# --------------------------------------------------------------------------- stash and memory


@pytest.mark.parametrize(
    "schedule,P,m,v",
    [("1f1b", 4, 8, 1), ("1f1b", 4, 2, 1), ("zb-h1", 5, 7, 1), ("gpipe", 3, 4, 1), ("interleaved", 4, 8, 2), ("interleaved", 3, 3, 3)],
)
def test_stash_is_what_the_simulator_holds(schedule, P, m, v):
    rng = random.Random(7)
    C = P * v
    F = [rng.uniform(0.5, 3) for _ in range(C)]
    B = [rng.uniform(0.5, 6) for _ in range(C)]
    act = [rng.randint(1, 9) * 10 for _ in range(C)]
    weight = [rng.randint(1, 9) * 1000 for _ in range(C)]
    sim = simulate_times(F, B, m, schedule, virtual_stages=v, weight_bytes=weight, act_bytes=act)
    assert list(sim.peak_inflight_chunks) == stash(schedule, P, m, v)
    for p in range(P):
        expect = sum(weight[p::P]) + peak_activation_bytes(schedule, p, P, m, act, v)
        assert sim.peak_memory_bytes[p] == expect
    if schedule in ("1f1b", "zb-h1"):
        assert stash(schedule, P, m, v) == [min(m, P - p) for p in range(P)]


def test_interleaved_peak_memory_is_below_the_sum_of_chunk_peaks():
    """The v chunks of a device do not all peak at once: Megatron's warm-up holds chunk 0 longest."""
    P, m, v = 4, 8, 2
    act = [1] * (P * v)
    per_chunk = stash("interleaved", P, m, v)
    for p in range(P):
        held = peak_activation_bytes("interleaved", p, P, m, act, v)
        assert held <= sum(per_chunk[p::P])
    assert peak_activation_bytes("interleaved", 0, P, m, act, v) == 11 < per_chunk[0] + per_chunk[4] == 8 + 4


def test_zbh1_pending_weight_gradients():
    sim = simulate_times([1.0] * 4, [2.0] * 4, 8, "zb-h1", wgrad_ms=[1.0] * 4)
    # the last device runs P F, B pairs before its first W
    assert sim.peak_pending_weight_grads == (1, 2, 3, 4)
    assert sim.to_dict()["peak_pending_weight_grads"] == [1, 2, 3, 4]
    assert simulate_times([1.0] * 4, [2.0] * 4, 8, "1f1b").peak_pending_weight_grads == (0, 0, 0, 0)


# --------------------------------------------------------------------------- estimates


@pytest.mark.parametrize("P,m", [(1, 1), (3, 2), (4, 4), (4, 9), (6, 3), (8, 16)])
def test_estimates_are_exact_on_equal_stages(P, m):
    F, B, W = 2.0, 3.0, 1.5  # B + W is the whole backward
    t = [F + B + W] * P
    assert estimate("1f1b", t, m) == pytest.approx(simulate_times([F] * P, [B + W] * P, m, "1f1b").makespan_ms)
    assert estimate("gpipe", t, m, fwd=[F] * P) == pytest.approx(simulate_times([F] * P, [B + W] * P, m, "gpipe").makespan_ms)
    zb = simulate_times([F] * P, [B + W] * P, m, "zb-h1", wgrad_ms=[W] * P)
    assert estimate("zb-h1", t, m, wgrad=[W] * P) == pytest.approx(zb.makespan_ms)
    for v in (2, 3):
        C, mm = P * v, P * max(1, m // P)
        sim = simulate_times([F / v] * C, [(B + W) / v] * C, mm, "interleaved", virtual_stages=v)
        assert estimate("interleaved", [(F + B + W) / v] * C, mm, virtual_stages=v) == pytest.approx(sim.makespan_ms)


def test_gpipe_and_forward_estimates_are_exact_for_every_input():
    rng = random.Random(3)
    for _ in range(200):
        P, m = rng.randint(1, 7), rng.randint(1, 12)
        F = [rng.uniform(0.1, 5) for _ in range(P)]
        B = [rng.uniform(0.1, 9) for _ in range(P)]
        t = [f + b for f, b in zip(F, B)]
        assert estimate("gpipe", t, m, fwd=F) == pytest.approx(simulate_times(F, B, m, "gpipe").makespan_ms)
        assert estimate("forward", t, m, fwd=F) == pytest.approx(simulate_times(F, B, m, "forward").makespan_ms)
    assert estimate("forward", [30.0, 10.0, 10.0, 20.0], 8, fwd=[30.0, 10.0, 10.0, 20.0]) == 280.0


def ratio_ranges(seed=0, cases=1200):
    """estimate / simulated makespan per schedule on random heterogeneous stages.

    P in 1..8, m in 1..32 (interleaved: a multiple of P up to 6P, v in 2..4);
    F_c uniform in [0.5, 4] ms, B_c = F_c x U[1, 3], W_c = B_c x U[0.2, 0.6].
    """
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}
    for i in range(cases):
        schedule = ("1f1b", "zb-h1", "interleaved", "gpipe")[i % 4]
        P = rng.randint(1, 8)
        v = rng.randint(2, 4) if schedule == "interleaved" else 1
        m = P * rng.randint(1, 6) if schedule == "interleaved" else rng.randint(1, 32)
        C = P * v
        F = [rng.uniform(0.5, 4.0) for _ in range(C)]
        B = [f * rng.uniform(1.0, 3.0) for f in F]
        W = [b * rng.uniform(0.2, 0.6) for b in B]
        sim = simulate_times(F, B, m, schedule, wgrad_ms=W if schedule == "zb-h1" else None, virtual_stages=v)
        est = estimate(schedule, [f + b for f, b in zip(F, B)], m, wgrad=W, fwd=F, virtual_stages=v)
        out.setdefault(schedule, []).append(est / sim.makespan_ms)
    return {k: (min(r), max(r)) for k, r in out.items()}


@pytest.mark.slow
def test_estimate_against_simulation_on_random_heterogeneous_stages():
    """The measured ranges (DESIGN.md, the report): ``PYTHONPATH=. python tests/plan/test_schedules.py`` prints them."""
    ranges = ratio_ranges()
    lo, hi = ranges["1f1b"]
    assert 1.0 - 1e-9 <= lo and hi <= 1.25  # Alpa's estimate never undershoots the 1F1B replay
    assert ranges["gpipe"] == pytest.approx((1.0, 1.0))  # exact
    lo, hi = ranges["zb-h1"]
    assert 0.80 <= lo <= 1.0 <= hi <= 1.25
    lo, hi = ranges["interleaved"]
    assert 0.65 <= lo <= 1.0 <= hi <= 1.15


if __name__ == "__main__":  # pragma: no cover - measurement for the report
    for name, (lo, hi) in sorted(ratio_ranges(cases=4000).items()):
        print(f"{name:12s} estimate / simulation {lo:.3f} .. {hi:.3f}")


# --------------------------------------------------------------------------- plans: zb-h1


def with_schedule(problem, schedule, shares=None, **training):
    """``problem`` under ``schedule``; ``shares`` (one per layer) split each backward into B and W."""
    doc = problem.to_dict()
    doc["training"] = {**doc["training"], "schedule": schedule, **training}
    if shares is not None:
        for layer, share in zip(doc["layers"], shares):
            for cost in layer["costs"].values():
                cost["bwd_weight_ms"] = cost["bwd_ms"] * share
                cost["bwd_input_ms"] = cost["bwd_ms"] - cost["bwd_weight_ms"]
    return Problem.from_dict(doc)


def test_zbh1_plan_replays_with_the_layers_weight_gradients(examples):
    base = load_problem(examples / "vla_toy_2x4.json")
    problem = with_schedule(base, "zb-h1", [0.25] * base.num_layers)
    plan = solve(base, "brute").plan
    ev = evaluate(problem, plan)
    assert [s.wgrad_ms for s in ev.stages] == pytest.approx([s.compute_bwd_ms * 0.25 for s in ev.stages])
    sim = simulate(problem, plan)  # the problem's schedule by default
    assert sim.schedule == "zb-h1"
    assert sim.wgrad_ms == pytest.approx(tuple(s.wgrad_ms for s in ev.stages))
    assert list(sim.peak_memory_bytes) == ev.peak_memory_bytes  # the 1F1B stash
    one = simulate(problem, plan, "1f1b")
    assert sim.makespan_ms <= one.makespan_ms + 1e-9
    assert ev.iteration_ms == pytest.approx(
        estimate("zb-h1", ev.times_ms, problem.microbatches, wgrad=[s.wgrad_ms for s in ev.stages])
    )
    assert replay_check(problem, plan, ev).schedule == "zb-h1"
    # no split given: an even one (LayerCost.split)
    even = evaluate(with_schedule(base, "zb-h1"), plan)
    assert [s.wgrad_ms for s in even.stages] == pytest.approx([s.compute_bwd_ms / 2 for s in even.stages])


def pareto_case():
    """Stage 1 can run a 'fast' config (t 1.9, W 0) or 'alt' (t 2.0, W 1.5): ZB-H1 prefers 'alt'."""
    def cost(fwd, b_in, b_w):
        return {"fwd_ms": fwd, "bwd_ms": b_in + b_w, "bwd_input_ms": b_in, "bwd_weight_ms": b_w, "weight_bytes": 1, "act_bytes": 1}

    return {
        "version": 2,
        "name": "pareto",
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 100, "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
        "training": {"microbatches": 4, "objective": "iteration", "schedule": "zb-h1"},
        "stages": 2,
        "layers": [
            {"name": "a", "module": "a", "out_bytes": 0, "costs": {"dp1tp1": cost(5.0, 2.5, 2.5)}},
            {"name": "b", "module": "b", "out_bytes": 0, "costs": {"dp1tp1": cost(1.0, 0.9, 0.0), "dp1tp1/alt": cost(0.5, 0.0, 1.5)}},
        ],
    }


def test_brute_zbh1_keeps_the_pareto_configs():
    problem = Problem.from_dict(pareto_case())
    result = solve(problem, "brute")
    assert result.status == "optimal"
    assert result.plan.stages[1].variant == "alt"  # not the fastest config of its stage
    # u = (7.5, 0.5), W = (2.5, 1.5), k = m - P + 1 = 3: 8 + max(3 * 7.5 + 3 * 2.5, 3 * 0.5 + 3 * 1.5)
    assert result.value == pytest.approx(38.0)
    one = solve(Problem.from_dict({**pareto_case(), "training": {"microbatches": 4, "objective": "iteration"}}), "brute")
    assert one.plan.stages[1].variant == ""  # 1F1B: the fastest config


@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_brute_zbh1_is_optimal_against_random_plans(data):
    base = data.draw(small_v2_problems(max_layers=5, objectives=("iteration",)))
    shares = data.draw(st.lists(st.floats(0.0, 1.0), min_size=base.num_layers, max_size=base.num_layers))
    problem = with_schedule(base, "zb-h1", shares)
    result = solve(problem, "brute")
    if result.status == "error":  # too large an enumeration for the oracle
        return
    if result.ok:
        ev = evaluate(problem, result.plan)
        assert result.value == pytest.approx(ev.value, rel=1e-12)
        sim = simulate(problem, result.plan)
        assert all(b <= problem.cluster.gpu_memory_bytes for b in sim.peak_memory_bytes)
    check_no_random_plan_beats(data, problem, result, tries=8)


# --------------------------------------------------------------------------- plans: interleaved


def interleaved_problem(P=2, v=2, m=4, layers=8, memory=10**6, out_bytes=0):
    cost = {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 100, "act_bytes": 10}
    return Problem.from_dict(
        {
            "version": 2,
            "name": "interleaved",
            "cluster": {"nodes": 1, "gpus_per_node": 2 * P, "gpu_memory_bytes": memory, "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
            "training": {"microbatches": m, "objective": "iteration", "schedule": "interleaved", "virtual_stages": v},
            "stages": P,
            "layers": [
                {"name": f"l{i}", "module": "llm", "out_bytes": out_bytes, "costs": {"dp2tp1": cost, "dp1tp2": {**cost, "fwd_ms": 1.5}}}
                for i in range(layers)
            ],
        }
    )


def chunk_plan(P=2, v=2, layers=8, ids=True, layouts=None):
    per = layers // (P * v)
    stages = []
    for c in range(P * v):
        dp, tp = (layouts or {}).get(c, (2, 1))
        stages.append(Stage(c * per, c * per + per - 1, 2, dp, tp, (2 * (c % P), 2 * (c % P) + 1) if ids else None))
    return Plan(tuple(stages))


def test_interleaved_plan_evaluates_and_replays():
    P, v, m = 2, 2, 4
    problem = interleaved_problem(P, v, m, out_bytes=4000)
    plan = chunk_plan(P, v)
    ev = evaluate(problem, plan)
    assert ev.schedule == "interleaved" and ev.virtual_stages == v and len(ev.stages) == P * v
    # chunk c sends to chunk c + 1 on the other group: 4000 B over 2 x 1 GB/s NVLink = 0.002 ms
    assert ev.transfers_ms == pytest.approx((0.002,) * 3)
    assert [s.fwd_ms for s in ev.stages] == pytest.approx([2.002, 2.002, 2.002, 2.0])
    assert ev.group_times_ms == pytest.approx([sum(ev.times_ms[0::2]), sum(ev.times_ms[1::2])])
    assert ev.bottleneck_ms == max(ev.group_times_ms)
    sim = simulate(problem, plan, evaluation=ev)
    assert sim.schedule == "interleaved" and sim.num_stages == P
    assert list(sim.peak_memory_bytes) == ev.peak_memory_bytes  # rule 6 is what the replay holds
    held = [peak_activation_bytes("interleaved", g, P, m, [s.act_bytes for s in ev.stages], v) for g in range(P)]
    assert ev.peak_memory_bytes == [2 * 200 + h for h in held]
    assert ev.iteration_ms == pytest.approx(estimate("interleaved", ev.times_ms, m, virtual_stages=v))
    # the same plan without device ids: groups take contiguous ids
    assert evaluate(problem, chunk_plan(P, v, ids=False)).times_ms == pytest.approx(ev.times_ms)
    with pytest.raises(ValueError, match="interleaved"):
        simulate(problem, plan, "1f1b", evaluation=ev)


@pytest.mark.parametrize(
    "plan,rule,match",
    [
        (chunk_plan(2, 2, layouts={2: (1, 2)}), 5, "share its layout"),
        (Plan(chunk_plan().stages[:3] + (Stage(6, 7, 2, 2, 1, (0, 1)),)), 4, "devices of its group"),
        (Plan(chunk_plan().stages[:2] + (Stage(4, 7, 2, 2, 1, (0, 1)),)), 1, "multiple of the 2 virtual"),
        (Plan((Stage(0, 3, 4, 4, 1), Stage(4, 7, 4, 4, 1))), 1, "outside the allowed"),
    ],
)
def test_interleaved_plan_rules(plan, rule, match):
    with pytest.raises(PlanError, match=match) as err:
        evaluate(interleaved_problem(), plan)
    assert err.value.rule == rule


def test_interleaved_group_memory_rule():
    problem = interleaved_problem(memory=2 * 200 + 50)  # group 0 holds 5 chunk-microbatches of 20 B at its peak (warm-up 2(P-1) + (v-1)P = 4, plus one)
    with pytest.raises(PlanError, match="group 0") as err:
        evaluate(problem, chunk_plan())
    assert err.value.rule == 6


# --------------------------------------------------------------------------- choosing the schedule by simulation


def test_compare_schedules_replays_every_schedule():
    P, m = 2, 4
    # 4 layers of 100 B weights and 10 B activations a stage: 1F1B holds 2 microbatches (480 B), GPipe 4 (560 B)
    base = interleaved_problem(P, 2, m, memory=500)
    problem = with_schedule(base, "1f1b", [0.4] * base.num_layers, virtual_stages=1)
    plan = Plan(tuple(Stage(4 * p, 4 * p + 3, 2, 2, 1, (2 * p, 2 * p + 1)) for p in range(P)))
    out = compare_schedules(problem, plan)
    rows = {(r["schedule"], r["virtual_stages"]): r for r in out["rows"]}
    assert set(rows) == {("1f1b", 1), ("zb-h1", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 3), ("interleaved", 4)}
    assert rows[("zb-h1", 1)]["iteration_ms"] < rows[("1f1b", 1)]["iteration_ms"]
    assert rows[("1f1b", 1)]["iteration_ms"] == pytest.approx(simulate(problem, plan).makespan_ms)
    assert not rows[("gpipe", 1)]["ok"] and "rule 6" in rows[("gpipe", 1)]["reason"]
    assert rows[("interleaved", 2)]["ok"] and rows[("interleaved", 2)]["stages"] == 4
    # Megatron's interleaved uniform split beats plain 1F1B here: 8 equal layers, bubble (P-1)(F+B)/v
    assert rows[("interleaved", 4)]["iteration_ms"] == pytest.approx(m * 12 + (P - 1) * 12 / 4)
    ok = [r for r in out["rows"] if r["ok"]]
    assert [r["iteration_ms"] for r in ok] == sorted(r["iteration_ms"] for r in ok)
    assert out["best"]["schedule"] == ok[0]["schedule"] and out["best"]["plan"]["stages"]


def test_plan_model_reports_every_schedule_of_the_kept_plan():
    from partitioner.planning import plan_model

    r = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=8, method="greedy")
    out = r.extra["schedules"]
    rows = {(row["plan_source"], row["schedule"], row["virtual_stages"]): row for row in out["rows"]}
    assert ("plan", "1f1b", 1) in rows and ("plan", "zb-h1", 1) in rows and ("baseline", "zb-h1", 1) in rows
    assert rows[("baseline", "1f1b", 1)]["ok"]
    assert {v for src, s, v in rows if s == "interleaved"} == {2, 3, 4}
    assert all(src in ("baseline", "solved") for src, s, _ in rows if s == "interleaved")  # Megatron's interleaved uniform split
    ok = [row for row in out["rows"] if row["ok"]]
    # plan keeps the fastest simulated candidate; the result's problem carries its schedule
    assert r.extra["throughput"]["iteration_ms"] == pytest.approx(min(row["iteration_ms"] for row in ok))
    assert (r.problem.training.schedule, r.problem.training.virtual_stages) == (out["chosen"]["schedule"], out["chosen"]["virtual_stages"])
    for key in ("best", "best_baseline"):
        best = out[key]
        pool = [row for row in ok if key == "best" or row["plan_source"] in ("baseline", "fsdp")]
        # the same plan's time, summed in another order by the report: equal to the last bits
        assert best["iteration_ms"] == pytest.approx(min(row["iteration_ms"] for row in pool), rel=1e-12, abs=0)
        plan = Plan.from_dict(best["plan"])
        problem = with_schedule(r.problem, best["schedule"], virtual_stages=best["virtual_stages"])
        assert simulate(problem, plan).makespan_ms == pytest.approx(best["iteration_ms"])
    off = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=8, method="greedy", schedules=False)
    assert "schedules" not in off.extra and off.problem.training.schedule == "1f1b"


def test_schedules_benchmark_table():
    from benchmarks.schedules import to_markdown

    rows = [
        {"plan_source": "plan", "schedule": "zb-h1", "virtual_stages": 1, "ok": True, "iteration_ms": 90.0,
         "estimate_ms": 91.0, "bubble_ratio": 0.05, "peak_memory_bytes": 2**31},
        {"plan_source": "baseline", "schedule": "gpipe", "virtual_stages": 1, "ok": False, "reason": "rule 6 (memory)"},
    ]
    text = to_markdown([{"model": "m", "cluster": "c", "nodes": 1, "global_batch": 8, "microbatches": 4, "status": "optimal",
                         "rows": rows}], "greedy")
    assert "| plan | zb-h1 | 1 | 90.0 | 91.0 | 5.0 | 2.0 |" in text
    assert "| baseline | gpipe | 1 | does not run: rule 6 (memory) | | | |" in text


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "gpipe", "forward"])
def test_stash_closed_forms_are_the_walked_orders(schedule):
    """stash's closed forms (1F1B, ZB-H1 min(m, P - p); GPipe, forward m) count what the op orders hold."""
    for P in range(1, 8):
        for m in range(1, 12):
            assert stash(schedule, P, m) == walked_stash(schedule, P, m), (P, m)
