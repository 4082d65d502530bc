"""``plan`` picks the pipeline schedule by simulation (``partitioner.planning.schedules.choice``).

The kept plan is the fastest simulated candidate it reports -- the plan under
every schedule, the method re-run where ``schedule_support`` allows it, the
Megatron-style baselines under every schedule (interleaved 1F1B included) --
and the returned problem carries the chosen schedule, so ``evaluate``, the
simulator and the exports agree with the result. Small presets and the
``greedy`` method keep these fast.
"""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from partitioner.plan import Plan, evaluate
from partitioner.planning import plan_model
from partitioner.planning.schedules.choice import schedule_keys
from partitioner.problem import ProblemError
from partitioner.simulate.engine import simulate

CASE = dict(nodes=1, global_batch=32, microbatches=8, method="greedy")
_CACHE: dict = {}


def planned(schedule: str = "auto", **kw):
    key = (schedule, tuple(sorted(kw.items())))
    if key not in _CACHE:
        _CACHE[key] = plan_model("seed-vla-8gpu", "dgx-h100", **{**CASE, **kw}, schedule=schedule)
    return _CACHE[key]


def _consistent(r) -> None:
    """The result's problem and plan agree: evaluate gives the value, the replay the iteration."""
    ev = evaluate(r.problem, r.plan, r.objective)
    assert ev.value == pytest.approx(r.value, rel=1e-12)
    sim = simulate(r.problem, r.plan, evaluation=ev)
    assert sim.schedule == r.problem.training.schedule
    assert all(peak <= r.problem.cluster.gpu_memory_bytes for peak in sim.peak_memory_bytes)
    assert sim.makespan_ms >= max(sim.busy_ms) * (1 - 1e-9)
    assert sim.makespan_ms == pytest.approx(r.extra["throughput"]["iteration_ms"])
    assert r.extra["schedule"] == {"schedule": r.problem.training.schedule,
                                   "virtual_stages": r.problem.training.virtual_stages}


def test_plan_keeps_the_fastest_simulated_candidate_it_reports():
    r = planned()
    report = r.extra["schedules"]
    ok = [row for row in report["rows"] if row["ok"]]
    it = r.extra["throughput"]["iteration_ms"]
    assert it <= min(row["iteration_ms"] for row in ok) * (1 + 1e-9)
    assert {(row["schedule"], row["virtual_stages"]) for row in report["rows"]} == set(schedule_keys())
    chosen = report["chosen"]
    assert (chosen["schedule"], chosen["virtual_stages"]) == (r.problem.training.schedule, r.problem.training.virtual_stages)
    _consistent(r)
    # per schedule: the best plan row and the best baseline row are the fastest of their kind
    for entry in report["by_schedule"]:
        mine = [row for row in ok if (row["schedule"], row["virtual_stages"]) == (entry["schedule"], entry["virtual_stages"])]
        for side, sources in (("plan", ("plan", "solved")), ("baseline", ("baseline", "fsdp"))):
            pool = [row["iteration_ms"] for row in mine if row["plan_source"] in sources]
            assert (entry[side] is None) == (not pool)
            if pool:
                assert entry[side]["iteration_ms"] == pytest.approx(min(pool))
    # the speed-up is over the best baseline under any schedule
    best_base = min(row["iteration_ms"] for row in ok if row["plan_source"] in ("baseline", "fsdp"))
    assert r.extra["speedup"] == pytest.approx(best_base / it)


def test_trying_schedules_is_never_slower_than_1f1b_alone():
    auto, alone = planned(), planned(schedules=False)
    assert "schedules" not in alone.extra and alone.problem.training.schedule == "1f1b"
    assert auto.extra["throughput"]["iteration_ms"] <= alone.extra["throughput"]["iteration_ms"] * (1 + 1e-9)


def test_pinned_1f1b_is_the_1f1b_only_answer():
    pinned, alone = planned("1f1b"), planned(schedules=False)
    assert pinned.plan == alone.plan and pinned.value == pytest.approx(alone.value)
    assert pinned.extra["speedup"] == pytest.approx(alone.extra["speedup"])
    assert {row["schedule"] for row in pinned.extra["schedules"]["rows"]} == {"1f1b"}
    assert pinned.extra["schedules"]["pinned"]


@pytest.mark.parametrize("schedule", ["zb-h1", "gpipe"])
def test_pinned_plain_schedule(schedule):
    r = planned(schedule)
    assert r.problem.training.schedule == schedule
    assert {row["schedule"] for row in r.extra["schedules"]["rows"]} == {schedule}
    assert r.extra["baseline"]["schedule"] in (schedule,)
    _consistent(r)


def test_pinned_interleaved_gives_chunks_on_their_groups():
    r = planned("interleaved", virtual_stages=2)
    t = r.problem.training
    assert (t.schedule, t.virtual_stages) == ("interleaved", 2)
    P = len(r.plan.stages) // 2
    assert P >= 2 and len(r.plan.stages) == 2 * P and r.problem.microbatches % P == 0
    ids = r.plan.device_ids()
    assert all(ids[c] == ids[c % P] for c in range(len(ids)))
    _consistent(r)


def test_zb_h1_is_re_solved_when_the_method_models_it():
    """greedy plans zb-h1 (schedule_support allows it): its plan is a candidate, evaluated under zb-h1."""
    report = planned().extra["schedules"]
    solved = [row for row in report["rows"] if row["plan_source"] == "solved"]
    assert solved and {row["schedule"] for row in solved} == {"zb-h1"}
    assert any("gpipe: not re-solved" in n for n in report["notes"])


def test_a_solver_that_fails_under_a_schedule_is_a_note_not_a_crash(monkeypatch):
    """Whatever schedule_support allows is tried at run time; a method that then fails leaves a note."""
    import partitioner.planning.schedules.choice as choice

    monkeypatch.setattr(choice, "schedule_support", lambda method, schedule, objective: "")
    r = plan_model("seed-vla-8gpu", "dgx-h100", **CASE)
    report = r.extra["schedules"]
    assert not any("not re-solved" in n for n in report["notes"])
    ok = [row for row in report["rows"] if row["ok"]]
    assert r.extra["throughput"]["iteration_ms"] <= min(row["iteration_ms"] for row in ok) * (1 + 1e-9)
    for row in ok:
        if row["plan_source"] == "solved":
            assert row["schedule"] != "1f1b"
    _consistent(r)


def test_best_rows_replay_to_their_iteration():
    r = planned()
    from partitioner.planning.schedules.search import with_schedule

    for key in ("best", "best_baseline"):
        row = r.extra["schedules"][key]
        assert row["microbatches"] == r.problem.microbatches  # one m in this case
        problem = with_schedule(r.problem, row["schedule"], row["virtual_stages"])
        assert simulate(problem, Plan.from_dict(row["plan"])).makespan_ms == pytest.approx(row["iteration_ms"])


@pytest.mark.parametrize("schedule,v,field", [("nope", None, "schedule"), ("1f1b", 2, "virtual_stages"),
                                              ("interleaved", 1, "virtual_stages")])
def test_bad_schedule_arguments_name_the_field(schedule, v, field):
    with pytest.raises(ProblemError) as err:
        plan_model("seed-vla-8gpu", "dgx-h100", **CASE, schedule=schedule, virtual_stages=v)
    assert err.value.path == field


@pytest.mark.slow
def test_cli_schedule_option():
    base = [sys.executable, "-m", "partitioner", "plan", "--model", "seed-vla-8gpu", "--cluster", "dgx-h100", "--nodes", "1",
            "--global-batch", "32", "--microbatches", "8", "--method", "greedy"]
    bad = subprocess.run(base + ["--schedule", "zb-h2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--schedule" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run(base + ["--virtual-stages", "2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--virtual-stages" in bad.stderr
    ok = subprocess.run(base, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    r = planned()
    training = r.problem.training
    chosen = training.schedule + (f" (v = {training.virtual_stages})" if training.schedule == "interleaved" else "")
    assert f"schedule: {chosen} (chosen by simulation" in ok.stdout
    for name in ("1f1b", "zb-h1", "gpipe", "interleaved (v = 2)", "interleaved (v = 4)"):
        assert name in ok.stdout
    assert f"iteration {r.extra['throughput']['iteration_ms']:.1f} ms ({chosen} simulator)" in ok.stdout


def test_a_pinned_schedule_nothing_runs_under_is_infeasible_not_replaced():
    """m = 1 admits no interleaved plan (m a multiple of P >= 2): plan says so instead of returning a 1F1B plan."""
    r = plan_model("seed-vla-8gpu", "dgx-h100", **{**CASE, "microbatches": 1}, schedule="interleaved")
    assert r.status == "infeasible" and r.plan is None
    assert "pinned schedule interleaved" in r.message
    assert r.extra["schedules"]["chosen"] is None


def test_a_pinned_schedule_the_time_left_no_re_solve_for_still_gets_its_uniform_split():
    """Deterministic (a frozen clock past the limit): no re-solve under the pinned interleaved schedule starts,
    and the Megatron-style uniform split at the kept m still runs there, so the answer has a plan under it
    (a target's share in the default run used to end with no plan under a pinned schedule)."""
    from partitioner.core.deadline import Deadline
    from partitioner.planning.options import PlanOptions
    from partitioner.planning.plan_model import run_plan

    now = [0.0]
    clock = Deadline(1.0, clock=lambda: now[0])
    now[0] = 2.0  # passed before anything ran; the first count is still built (its first-plan grace never ends)
    opts = PlanOptions(**CASE, schedule="interleaved", virtual_stages=2, per_target=False)
    r = run_plan("seed-vla-8gpu", "dgx-h100", opts, deadline=clock)
    assert r.plan is not None, r.message
    t = r.problem.training
    assert (t.schedule, t.virtual_stages) == ("interleaved", 2)
    assert r.extra["schedules"]["chosen"]["plan_source"] == "baseline"
    assert "re-solved under: interleaved (v = 2)" in r.message  # the re-solve was cut, and the answer says so
    _consistent(r)


def test_a_re_solve_starts_from_the_plan_its_knob_setting_got_under_1f1b(monkeypatch):
    """dp re-solved under zb-h1 gets, as warm start, the plan the same knob setting got under 1F1B, and uses it."""
    import partitioner.planning.search.knob_solve as model  # where plan solves each knob setting

    calls = []
    real = model.solve

    def spy(problem, method, **kw):
        result = real(problem, method, **kw)
        calls.append((problem.training.schedule, kw.get("warm_start"), result))
        return result

    monkeypatch.setattr(model, "solve", spy)
    plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=8, method="dp")
    firsts = [r.plan for schedule, _, r in calls if schedule == "1f1b" and r.plan is not None]
    zb = [(warm, r) for schedule, warm, r in calls if schedule == "zb-h1"]
    assert firsts and zb
    for warm, r in zb:
        assert any(warm == plan for plan in firsts)  # the 1F1B plan of that setting, not the Megatron baseline
        assert r.extra["dp"]["warm_start"] == "used as an incumbent"


def test_interleaved_re_solves_have_two_device_groups_or_more():
    """plan re-solves interleaved on P >= 2 groups (Megatron-Core refuses virtual stages on one pipeline rank);
    the problem's own bounds stay what the exact methods answer on a problem file."""
    from dataclasses import replace

    from partitioner.planning.baselines import MIN_INTERLEAVED_GROUPS
    from partitioner.planning.schedules.choice import resolve_problem
    from partitioner.problem import StageBounds

    problem = planned("1f1b").problem
    wide = replace(problem, stages=StageBounds(1, 8))
    assert resolve_problem(wide, ("interleaved", 2)).stages == StageBounds(MIN_INTERLEAVED_GROUPS, 8)
    assert resolve_problem(wide, ("zb-h1", 1)).stages == StageBounds(1, 8)
    assert resolve_problem(replace(problem, stages=StageBounds(1, 1)), ("interleaved", 3)) is None
    assert wide.stages == StageBounds(1, 8) and resolve_problem(wide, ("interleaved", 2)).training.virtual_stages == 2


def test_under_a_target_round_balanced_plans_it_cannot_run_are_dropped(monkeypatch):
    """dp's round-balanced interleaved cuts pick each segment's knobs freely; plan --target keeps only those the
    target runs (here the target is made to refuse every plan: none is kept, a note says why)."""
    model = importlib.import_module("partitioner.planning.plan_model")  # the module (the package exports the function)
    monkeypatch.setattr(model, "runs", lambda rules, problem, plan: ["refused by the test"])
    r = plan_model("seed-vla-8gpu", "dgx-h100", **{**CASE, "method": "dp"}, schedule="interleaved",
                   virtual_stages=2, target="megatron")
    notes = r.extra["schedules"]["notes"]
    assert any("round-balanced dp plan dropped: refused by the test" in n for n in notes), notes
    assert "round-balanced" not in (r.message or "")
