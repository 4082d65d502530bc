"""``benchmarks/campaign.py`` runs its doors and counts what breaks (tiny runs; the large one is the coordinator's)."""
from __future__ import annotations

import random

from benchmarks import campaign
from benchmarks.campaign import Context, Outcome, judge_api_status, judge_cli, run_campaign, summary


def _ctx(tmp_path) -> Context:
    return Context(tmp_path, limit=5.0, slack=10.0, startup=2.0)


def test_the_judge_counts_each_kind_of_break(tmp_path):
    ctx = _ctx(tmp_path)
    cases = {
        "traceback": (3, "", "internal error: ZeroDivisionError: division by zero", 3.0),
        "hang": (0, "{}", "", 2.0 + 5.0 + 10.5),
        "contract": (2, "", "error: a\nerror: b", 3.0),
    }
    for category, run in cases.items():
        o = Outcome("problem", category)
        judge_cli(o, ctx, run)
        assert category in o.broke, (category, o.broke)
    clean = Outcome("problem", "clean")
    judge_cli(clean, ctx, (2, "", "error: p.json: layers[0].tied_to: must be <= 2", 3.0), names="p.json")
    judge_cli(clean, ctx, (0, '{"status": "optimal"}', "", 16.9), json_out=True)
    assert clean.broke == {}
    nan = Outcome("problem", "nan")
    judge_cli(nan, ctx, (0, '{"value": NaN}', "", 3.0), json_out=True)
    assert "contract" in nan.broke
    timeout = Outcome("problem", "timeout")
    judge_cli(timeout, ctx, (None, "", "", 200.0))
    assert "hang" in timeout.broke


def test_a_small_campaign_runs_and_sums_up(tmp_path):
    outcomes = run_campaign(6, seed=3, doors=["exact", "api"], limit=10.0, slack=10.0, work=tmp_path)
    assert len(outcomes) == 6 and {o.door for o in outcomes} <= {"exact", "api"}
    doc = summary(outcomes, ["exact", "api"])
    assert doc["total"]["cases"] == 6
    assert not [o for o in outcomes if "traceback" in o.broke or "wrong_optimal" in o.broke], doc["failures"]


def test_the_cases_are_the_seeds(tmp_path):
    first = [campaign._edit_problem(random.Random(f"7:{i}"), campaign.tied_v3_document(4, 1, 8, seed=i))[1] for i in range(5)]
    again = [campaign._edit_problem(random.Random(f"7:{i}"), campaign.tied_v3_document(4, 1, 8, seed=i))[1] for i in range(5)]
    assert first == again


def test_an_api_option_refused_as_error_counts_but_a_problem_over_brute_bound_does_not():
    from partitioner import load_problem, solve
    from tests.conftest import ROOT

    refused = Outcome("api", "threads")
    judge_api_status(refused, "error", "milp: option threads must be >= 1")
    assert "contract" in refused.broke
    # seed 101: a valid max_combinations below the problem's count is brute's bound, answered with the count
    result = solve(load_problem(ROOT / "examples" / "vla_toy_2x4.json"), "brute", options={"max_combinations": 2})
    assert result.status == "error" and "exceed the limit of 2" in result.message
    bound = Outcome("api", "max_combinations")
    judge_api_status(bound, result.status, result.message)
    assert bound.broke == {}
